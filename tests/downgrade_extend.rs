//! Downgrades and extends after a cancelled `extend`. A lease request whose caller stopped
//! waiting may still reach the server later (its outcome is unknown to the guard): it must
//! cap the trust of the guard it was sent for, and of the read guard a downgrade turns that
//! guard into ("never two conflicting guards say `is_held()`", "a guard never trusts past the
//! server's lease"). On a private real redis-server and on the in-memory store.
//!
//! Besides `support::faulty` (whose delays live in the caller's future, so a cancelled call
//! never reaches the store), this file has [`Detached`]: a wrapper whose delayed `extend`
//! requests run in their own task, the way a request already written to the network still
//! reaches Redis after its caller stopped waiting. That is exactly the "request of unknown
//! outcome" the guarantees promise to survive.

mod support;
use support::quick::Quick;
use support::Granted;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Acquire, Claim, Family, PermitChange, Snapshot, Store};
use redis_locks::testing::WakeHub;
use redis_locks::{LockClient, Preference, WriteGuard};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use support::backend::Backend;
use support::time::{ms, secs};

/// A store wrapper whose matching `extend` requests are sent from their own task after a
/// delay: the caller may stop waiting (cancel the `extend`), the request still reaches the
/// store later, after requests sent after it. Everything else goes straight through.
struct Detached {
    inner: Arc<dyn Store>,
    /// (lease of the extend to detach, delay before it reaches the store), each used once.
    rules: StdMutex<Vec<(Duration, Duration)>>,
    /// When each detached extend reached the store, and what it answered.
    applied: Arc<StdMutex<Vec<(Instant, String)>>>,
}

impl std::fmt::Debug for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detached").finish_non_exhaustive()
    }
}

impl Detached {
    fn new(inner: Arc<dyn Store>) -> Arc<Detached> {
        Arc::new(Detached {
            inner,
            rules: StdMutex::default(),
            applied: Arc::default(),
        })
    }

    /// The next `extend` asking for `lease` reaches the store `delay` after it was sent,
    /// whether or not its caller still waits.
    fn detach_extend(&self, lease: Duration, delay: Duration) {
        self.rules.lock().unwrap().push((lease, delay));
    }

    fn applied(&self) -> Vec<(Instant, String)> {
        self.applied.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Store for Detached {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> redis_locks::Result<Acquire> {
        self.inner.acquire(lock, claim, wait, now).await
    }

    async fn release(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        self.inner.release(lock, claim, now).await
    }

    /// An extend or renewal for a lease a rule names is detached (applied after the rule's
    /// delay, its reply then lost for the caller that stopped waiting); others go through.
    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        handed_until: Option<u64>,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        let delay = {
            let mut rules = self.rules.lock().unwrap();
            rules
                .iter()
                .position(|(l, _)| *l == lease)
                .map(|i| rules.remove(i).1)
        };
        let Some(delay) = delay else {
            return self
                .inner
                .renew(lock, claim, lease, handed_until, now)
                .await;
        };
        let (inner, lock, claim) = (self.inner.clone(), lock.clone(), claim.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let record = self.applied.clone();
        tokio::spawn(async move {
            sleep(delay).await;
            let at = Instant::now();
            let result = inner.renew(&lock, &claim, lease, handed_until, now).await;
            record.lock().unwrap().push((at, format!("{result:?}")));
            let _ = tx.send(result);
        });
        let outcome = rx.await;
        outcome.unwrap_or_else(|_| Ok(false))
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<Option<u64>> {
        self.inner.downgrade(lock, claim, now).await
    }

    async fn inspect(
        &self,
        lock: &LockKeys,
        family: Family,
        now: Option<u64>,
    ) -> redis_locks::Result<Snapshot> {
        self.inner.inspect(lock, family, now).await
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> redis_locks::Result<u32> {
        self.inner.set_permits(lock, change, heartbeat, now).await
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> redis_locks::Result<u64> {
        self.inner.force_release(lock, now).await
    }

    fn hub(&self) -> &Arc<WakeHub> {
        self.inner.hub()
    }
}

// ------------------------------------------------------------------------------------------
// A downgrade after a cancelled shorter extend
// ------------------------------------------------------------------------------------------

/// A writer cancels an `extend(400 ms)` after it was sent (the request reaches the server
/// 250 ms later, inside its 400 ms: a guard whose trust ran out meanwhile would be lost for
/// good), then asks `extend(9 s)` and downgrades. Were the cancelled request applied
/// after the downgrade (`rw_extend` renews whatever the token holds), it would set the
/// *reader's* deadline to `now + 400 ms` while the read guard trusts 9 s, and a writer of
/// another client would be granted beside it. The engine keeps the cancelled request as its
/// own: the next request of the hold leaves only once it was answered, so it cannot land after
/// the downgrade.
async fn downgrade_after_a_cancelled_shorter_extend(backend: Backend) {
    let label = backend.kind;
    let name = "downgrade-extend-downgrade-unknown-extend";
    let other = backend.client().await;
    let detached = Detached::new(backend.store().await);
    let victim = LockClient::builder()
        .store(detached.clone())
        .expect("client");
    let lease = secs(9);
    let short = ms(400);
    let delay = ms(250);

    let mut w = victim
        .rwlock(name)
        .lease(lease)
        .write()
        .await
        .expect("W writes");
    detached.detach_extend(short, delay);
    let cancelled_at = Instant::now();
    let cancelled = timeout(ms(100), w.extend(short)).await;
    assert!(
        cancelled.is_err(),
        "setup: the detached extend was answered"
    );
    assert!(w.extend(lease).await.expect("extend"), "setup: extend(9 s)");
    // The cancelled extend is still the engine's request: the next one left only once its
    // reply came, so the server applied them in that order and the 9 s stand.
    assert_eq!(
        detached.applied().len(),
        1,
        "the cancelled extend was applied before extend(9 s) was answered"
    );
    let r = WriteGuard::downgrade(w).await.expect("downgrade");

    // The cancelled extend reached the server 250 ms after it was sent, before the
    // extend(9 s) and the downgrade left (one request of a hold in flight at a time); had it
    // landed after them, it would have cut the reader's deadline to 400 ms.
    sleep_until(cancelled_at + delay + short + ms(400)).await;
    let applied = detached.applied();
    eprintln!(
        "[{label}] read guard is_held() {}, detached extend applied: {applied:?}",
        r.is_held()
    );
    let info = other.rwlock(name).inspect().await.expect("inspect");
    let intruder = other.rwlock(name).try_write().await.granted("try_write");
    let both = r.is_held() && intruder.is_some();
    assert!(
        !both,
        "[{label}] the read guard says is_held() (valid_until in {:?}) while another client \
         was granted the write lock (fence {:?}); the server listed holders {:?} before; \
         detached extend applied: {applied:?}",
        r.valid_until().saturating_duration_since(Instant::now()),
        intruder.as_ref().map(|g| g.fencing_token()),
        info.holders,
    );
    drop(intruder);
    drop(r);
}

/// `downgrade_after_a_cancelled_shorter_extend` on the fair RwLock (ticket queue): the
/// downgrade renames the holder's member (`token#2^30` -> `token`), so the late
/// `extend(400 ms)` for the write member finds nothing and the read guard's deadline stays
/// honest. (Holds.)
async fn fair_downgrade_after_a_cancelled_shorter_extend(backend: Backend) {
    let label = backend.kind;
    let name = "downgrade-extend-fair-downgrade-unknown-extend";
    let other = backend.client().await;
    let detached = Detached::new(backend.store().await);
    let victim = LockClient::builder()
        .store(detached.clone())
        .expect("client");
    let (lease, short, delay) = (secs(9), ms(400), ms(250));

    let mut w = victim
        .rwlock(name)
        .preference(Preference::Fair)
        .lease(lease)
        .write()
        .await
        .expect("W writes");
    detached.detach_extend(short, delay);
    let cancelled_at = Instant::now();
    assert!(timeout(ms(100), w.extend(short)).await.is_err());
    assert!(w.extend(lease).await.expect("extend"));
    let r = WriteGuard::downgrade(w).await.expect("downgrade");
    sleep_until(cancelled_at + delay + short + ms(400)).await;
    let intruder = other
        .rwlock(name)
        .preference(Preference::Fair)
        .try_write()
        .await
        .granted("try_write");
    assert!(
        !(r.is_held() && intruder.is_some()),
        "[{label}] fair read guard and another writer both held; detached: {:?}",
        detached.applied()
    );
    drop(intruder);
    drop(r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fair_downgrade_after_a_cancelled_shorter_extend_stays_honest() {
    fair_downgrade_after_a_cancelled_shorter_extend(Backend::redis()).await;
}

// ------------------------------------------------------------------------------------------
// A cancelled shorter extend on a mutex
// ------------------------------------------------------------------------------------------

/// The same cancelled `extend(400 ms)` on a mutex (no downgrade): applied late, it cannot
/// shorten the hold, and the guard never trusts beyond the server deadline.
async fn cancelled_shorter_extend_caps_a_mutex(backend: Backend) {
    let label = backend.kind;
    let name = "downgrade-extend-mutex-unknown-extend";
    let other = backend.client().await;
    let detached = Detached::new(backend.store().await);
    let victim = LockClient::builder()
        .store(detached.clone())
        .expect("client");
    let lease = secs(9);
    let short = ms(400);
    let delay = ms(250);

    let mut g = victim.lock_for(name, lease).await;
    detached.detach_extend(short, delay);
    let sent = Instant::now();
    assert!(timeout(ms(100), g.extend(short)).await.is_err());
    assert!(g.extend(lease).await.expect("extend"));
    let end = sent + delay + secs(2);
    while Instant::now() < end {
        let info = other.mutex(name).inspect().await.expect("inspect");
        let now = Instant::now();
        if g.is_held() {
            let remaining = info.holders.first().map(|h| h.lease_remaining);
            let trusted = g.valid_until().saturating_duration_since(now);
            assert!(
                remaining.is_some_and(|r| trusted <= r + ms(150)),
                "[{label}] G trusts {trusted:?} more, the server's lease: {remaining:?}"
            );
        }
        sleep(ms(50)).await;
    }
    drop(g);
}

both_backends!(
    downgrade_after_a_cancelled_shorter_extend,
    cancelled_shorter_extend_caps_a_mutex,
);
