//! Adversarial checks of the honest-guard guarantees (docs/GUARANTEES.md, "How a guard's
//! deadline is kept honest", and the capacity-agreement row), through the public API only:
//! handles, guards, `LockClient::builder().store(..)` with fault wrappers, cancellation.
//!
//! Every test asserts a guarantee as a property ("never two conflicting guards say
//! `is_held()`", "a guard that says `is_held()` is listed by the server"), with margins of
//! hundreds of milliseconds. Tests run against a private real redis-server and, where the
//! two stores are meant to agree, against the in-memory store too.
//!
//! Besides `support::faulty` (whose delays live in the caller's future, so a cancelled call
//! never reaches the store), this file has [`Detached`]: a wrapper whose delayed `extend`
//! requests run in their own task, the way a request already written to the network still
//! reaches Redis after its caller stopped waiting. That is exactly the "request of unknown
//! outcome" the guarantees promise to survive.

mod support;
use support::Granted;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, Claim, Family, PermitChange, RedisStore, Snapshot, Store,
};
use redis_locks::testing::WakeHub;
use redis_locks::{LockClient, Preference, WriteGuard};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use support::backend::{eventually, Backend};
use support::faulty::{Faulty, Gate, Op, Rule};
use support::RedisServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

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

    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
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
            return self.inner.extend(lock, claim, lease, now).await;
        };
        let (inner, lock, claim) = (self.inner.clone(), lock.clone(), claim.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let record = self.applied.clone();
        tokio::spawn(async move {
            sleep(delay).await;
            let at = Instant::now();
            let result = inner.extend(&lock, &claim, lease, now).await;
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
// Break 1: downgrade forgets lease requests of unknown outcome.
// ------------------------------------------------------------------------------------------

/// A writer cancels an `extend(400 ms)` after it was sent (its outcome is unknown: it may
/// still be applied), then `extend(9 s)` is confirmed; the write guard correctly caps its
/// trust at 400 ms from that confirmation. It then downgrades. The read guard starts with a
/// clean slate and trusts the full 9 s from the downgrade's send, but the cancelled request
/// reaches the server afterwards: `rw_extend` renews whatever the token holds, so it sets the
/// *reader's* deadline to `now + 400 ms`. From then until the read guard's next renewal (3 s
/// after the downgrade) the reader says `is_held()` while the server lists nobody, and a
/// writer of another client is granted beside it.
async fn downgrade_after_a_cancelled_shorter_extend(backend: Backend) {
    let label = backend.kind;
    let name = "adv-downgrade-unknown-extend";
    let other = backend.client().await;
    let detached = Detached::new(backend.store().await);
    let victim = LockClient::builder()
        .store(detached.clone())
        .expect("client");
    let lease = secs(9);
    let short = ms(400);
    let delay = ms(1200);

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
    assert!(
        w.valid_until() <= Instant::now() + short,
        "setup: the write guard caps its trust after the cancelled extend"
    );
    let r = WriteGuard::downgrade(w).await.expect("downgrade");

    // The cancelled extend reaches the server 1.2 s after it was sent, shortening the
    // reader's deadline to ~1.6 s; the read guard's first renewal is due ~3.1 s.
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

both_backends!(downgrade_after_a_cancelled_shorter_extend);

/// The same cancelled `extend(400 ms)` on a mutex (no downgrade): the rule "a request of
/// unknown outcome caps later trust" holds, the guard never trusts beyond the server deadline
/// once the late request shortened it. (Holds.)
async fn cancelled_shorter_extend_caps_a_mutex(backend: Backend) {
    let label = backend.kind;
    let name = "adv-mutex-unknown-extend";
    let other = backend.client().await;
    let detached = Detached::new(backend.store().await);
    let victim = LockClient::builder()
        .store(detached.clone())
        .expect("client");
    let lease = secs(9);
    let short = ms(400);
    let delay = ms(1200);

    let mut g = victim
        .mutex(name)
        .lease(lease)
        .lock()
        .await
        .expect("G locks");
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

both_backends!(cancelled_shorter_extend_caps_a_mutex);

// ------------------------------------------------------------------------------------------
// Break 2: set_permits turns a FairLock's fixed capacity into a resizable count.
// ------------------------------------------------------------------------------------------

/// A FairLock A holds (marker `=1`). `set_permits(1)` on a Semaphore of the same name is
/// accepted (the count equals the fixed capacity) and replaces the fixed marker with a
/// plain stored count. A second FairLock B queues (a stored count equal to its capacity is
/// fine for it). Now `set_permits(2)` finds no fixed marker and is accepted too, and its
/// promote grants B beside A: two FairLock guards say `is_held()`.
async fn set_permits_cannot_resize_a_fair_lock_in_use(backend: Backend) {
    let label = backend.kind;
    let name = "adv-setpermits-fairlock";
    let client = backend.client().await;
    let other = backend.client().await;

    let a = client.fair_lock(name).lock().await.expect("A locks");
    let sem = other.semaphore(name, 1);
    let first = sem.set_permits(1).await;
    eprintln!(
        "[{label}] set_permits(1) beside the FairLock holder: {:?}",
        first.as_ref()
    );

    let b_lock = other.fair_lock(name);
    let b_task = tokio::spawn(async move { b_lock.lock().await });
    eventually("B queued", || async {
        let info = client.fair_lock(name).inspect().await.expect("inspect");
        info.waiters.len() == 1
    })
    .await;

    let second = sem.set_permits(2).await;
    let b = match timeout(ms(1500), b_task).await {
        Ok(joined) => joined.expect("B's task").ok(),
        Err(_) => None,
    };
    let both = a.is_held() && b.as_ref().is_some_and(|b| b.is_held());
    assert!(
        !both,
        "[{label}] two FairLock guards say is_held(): A (fence {}) and B (fence {:?}); \
         set_permits(1) -> {:?}, set_permits(2) -> {:?}",
        a.fencing_token(),
        b.as_ref().map(|b| b.fencing_token()),
        first.as_ref(),
        second.as_ref(),
    );
    assert!(
        second.as_ref().is_err_and(|e| e.is_capacity_conflict()),
        "[{label}] set_permits(2) while a FairLock holds must be a capacity conflict: {:?}",
        second
    );
    drop(b);
    drop(a);
}

both_backends!(set_permits_cannot_resize_a_fair_lock_in_use);

/// Without the intermediate `set_permits(1)`, the FairLock's `=1` marker refuses
/// `set_permits(2)` (holds).
async fn set_permits_refused_beside_a_fair_lock(backend: Backend) {
    let label = backend.kind;
    let name = "adv-setpermits-fairlock-direct";
    let client = backend.client().await;
    let a = client.fair_lock(name).lock().await.expect("A locks");
    let second = client.semaphore(name, 1).set_permits(2).await;
    assert!(
        second.as_ref().is_err_and(|e| e.is_capacity_conflict()),
        "[{label}] set_permits(2) beside a FairLock holder: {:?}",
        second
    );
    drop(a);
}

both_backends!(set_permits_refused_beside_a_fair_lock);

// ------------------------------------------------------------------------------------------
// Break 3: a capacity-marker upgrade shortens the marker's life below the holders'.
// ------------------------------------------------------------------------------------------

/// A Semaphore(1) holder A (lease 8 s) leaves the marker `~1`, alive 8 s. A FairLock waiter W
/// (heartbeat 300 ms) queues behind it: same capacity, so the marker is upgraded to `=1`,
/// but it is written with `SET .. PX` for the latest deadline *this run* saw, W's heartbeat
/// deadline, not A's lease. W's process dies (its release never reaches the store); 300 ms
/// later the marker is gone although A holds for seconds more, and a Semaphore(3) of the same
/// name is granted a permit beside A's whole-capacity permit.
async fn capacity_marker_outlives_its_holders(backend: Backend) {
    let label = backend.kind;
    let name = "adv-marker-upgrade";
    let direct = backend.client().await;
    let w_store = Faulty::new(backend.store().await);
    let w_client = LockClient::builder()
        .store(w_store.clone())
        .expect("client");
    // W "dies": none of its releases ever reaches the store.
    let never = Gate::new();
    w_store.add(Rule::on(Op::Release).hold_request(never.clone()));

    let a = direct
        .semaphore(name, 1)
        .lease(secs(8))
        .acquire()
        .await
        .expect("A takes the only permit");
    let w_lock = w_client.fair_lock(name).heartbeat(ms(300));
    let w_task = tokio::spawn(async move { w_lock.lock().await });
    eventually("W queued and heartbeating", || {
        let n = w_store.calls(Op::Acquire).len();
        async move { n >= 3 }
    })
    .await;
    if let Some(server) = &backend.server {
        // The marker after W's upgrade: `=1`, alive for W's heartbeat, not A's lease.
        let key = format!("rl:{{{name}}}:cap");
        let (value, pttl): (Option<String>, i64) = {
            let probe = RedisStore::connect(&server.url()).await.expect("connect");
            let value = probe.query(redis::cmd("GET").arg(&key)).await.expect("GET");
            let pttl = probe
                .query(redis::cmd("PTTL").arg(&key))
                .await
                .expect("PTTL");
            (value, pttl)
        };
        eprintln!("[{label}] with W queued: {key} = {value:?}, PTTL {pttl} ms (A's lease: 8 s)");
    }
    w_task.abort();
    let _ = w_task.await;
    // W's last heartbeat deadline passes; A's lease (8 s) is far from over.
    sleep(ms(800)).await;

    let intruder = direct.semaphore(name, 3).try_acquire().await;
    let info = direct.semaphore(name, 1).inspect().await.expect("inspect");
    let got = intruder.is_ok();
    assert!(
        !(a.is_held() && got),
        "[{label}] Semaphore(3) got a permit beside Semaphore(1)'s only permit (A still \
         held): holders {:?}",
        info.holders
    );
    eprintln!(
        "[{label}] Semaphore(3) beside A: {:?}",
        intruder.as_ref().map(|p| p.num_permits())
    );
    drop(intruder);
    drop(a);
}

both_backends!(capacity_marker_outlives_its_holders);

// ------------------------------------------------------------------------------------------
// Attacks that held.
// ------------------------------------------------------------------------------------------

/// Break 1 on the fair RwLock (ticket queue): the downgrade renames the holder's member
/// (`token#2^30` -> `token`), so the late `extend(400 ms)` for the write member finds nothing
/// and the read guard's deadline stays honest. (Holds.)
async fn fair_downgrade_after_a_cancelled_shorter_extend(backend: Backend) {
    let label = backend.kind;
    let name = "adv-fair-downgrade-unknown-extend";
    let other = backend.client().await;
    let detached = Detached::new(backend.store().await);
    let victim = LockClient::builder()
        .store(detached.clone())
        .expect("client");
    let (lease, short, delay) = (secs(9), ms(400), ms(1200));

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

/// `SCRIPT FLUSH` every 20 ms while three clients contend for one mutex (with renewals every
/// 100 ms): never two guards inside at once. (Holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_flush_storm_keeps_exclusion() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let url = server.url();
    let flusher = RedisStore::connect(&url).await.expect("connect");
    let inside = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + secs(3);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = LockClient::connect(&url).await.expect("connect");
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let mutex = client
                .mutex("adv-script-flush")
                .lease(ms(300))
                .renew_every(ms(100));
            let mut rounds = 0u32;
            while Instant::now() < end {
                let g = mutex.lock().await.expect("lock");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                sleep(ms(15)).await;
                assert!(g.is_held());
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release");
                rounds += 1;
            }
            rounds
        }));
    }
    while Instant::now() < end {
        let _: redis::Value = flusher
            .query(redis::cmd("SCRIPT").arg("FLUSH"))
            .await
            .expect("SCRIPT FLUSH");
        sleep(ms(20)).await;
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    assert!(total > 10, "setup: only {total} rounds");
}
