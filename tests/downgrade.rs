//! `WriteGuard::downgrade` under faults: a downgrade racing `release_all`, a downgrade whose
//! reply is lost, and one whose future is dropped, for every RwLock policy, on a real
//! redis-server and on the in-memory store.
//!
//! Also a downgrade racing renewals and releases: behind a renewal in flight (held, or
//! cancelled), with replies slower than the lease, a Fair downgrade with readers and writers
//! queued, and churn with short leases.
//!
//! What must hold: no read guard says `is_held()` while the server holds nothing for it, and
//! whatever a failed or abandoned downgrade left on the server is removed at once, not at
//! the end of its lease.

mod support;
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Acquire, Claim, Family, PermitChange, Snapshot, Store};
use redis_locks::testing::WakeHub;
use redis_locks::{LockClient, Preference, WriteGuard};
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::Duration;
use support::backend::{join, within_ok, Backend};
use support::faulty::{faulty_client_with, Faulty, Op, Rule};
use support::quick::Quick;
use support::time::{ms, secs};
use support::Granted;
use tokio::time::{sleep, sleep_until, timeout, Instant};

const POLICIES: [Preference; 3] = [Preference::Writer, Preference::Reader, Preference::Fair];

/// Long enough that a leaked hold is told apart from a released one without timing anything:
/// the other client's writer is given a tenth of it.
const LEASE: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(3);

async fn faulty_client(b: &Backend) -> (std::sync::Arc<Faulty>, LockClient) {
    faulty_client_with(b, LockClient::builder().lease(LEASE)).await
}

/// `client`'s write guard on `name` under `policy`.
async fn write(client: &LockClient, name: &str, policy: Preference) -> WriteGuard {
    client
        .rwlock(name)
        .preference(policy)
        .write()
        .await
        .unwrap_or_else(|e| panic!("{policy:?}: write {name}: {e}"))
}

/// `other` gets the write lock on `name` within [`PROMPTLY`] (not after a leaked lease),
/// and lets it go.
async fn writer_gets_in_promptly(other: &LockClient, name: &str, policy: Preference, after: &str) {
    let w = other
        .rwlock(name)
        .preference(policy)
        .write()
        .timeout(PROMPTLY)
        .await
        .unwrap_or_else(|e| panic!("{policy:?}: another writer after {after}: {e}"));
    w.release().await.expect("release");
}

/// `release_all()` runs while a downgrade's reply is on its way (the server applied the
/// downgrade first): the downgrade must not come back with a read guard that says it is held,
/// and another client's writer gets the lock at once.
async fn downgrade_racing_release_all(b: Backend) {
    for policy in POLICIES {
        let name = format!("dg-release-all-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = write(&client, &name, policy).await;
        let gate = store.hold_replies(Rule::on(Op::Downgrade).times(1));
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        // The server has applied the downgrade; its reply is held back.
        gate.wait_entered(1).await;
        let released = client.release_all().await.expect("release_all");
        assert_eq!(released, 1, "{policy:?}: release_all released the hold");
        gate.open();
        match join("downgrade", downgrade).await {
            Ok(r) => assert!(
                !r.is_held(),
                "{policy:?}: a read guard says it is held after release_all released it"
            ),
            Err(e) => assert!(
                matches!(e, redis_locks::Error::LeaseLost { .. }),
                "{policy:?}: unexpected error {e}"
            ),
        }
        writer_gets_in_promptly(&other, &name, policy, "release_all").await;
    }
}

/// A downgrade whose reply is lost: the outcome is unknown to the caller, who gets an error;
/// the hold (in whatever form the server left it) is released in the background, so another
/// client's writer gets in at once.
async fn a_downgrade_with_a_lost_reply_leaves_nothing(b: Backend) {
    for policy in POLICIES {
        let name = format!("dg-lost-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = write(&client, &name, policy).await;
        store.add(Rule::on(Op::Downgrade).times(1).lose_reply());
        let outcome = WriteGuard::downgrade(w).await;
        if let Ok(r) = &outcome {
            // Confirmed after all (a retry found the read hold): it is a real read hold.
            assert!(r.is_held(), "{policy:?}: a confirmed downgrade is held");
        }
        drop(outcome);
        writer_gets_in_promptly(&other, &name, policy, "a lost downgrade reply").await;
    }
}

/// A downgrade whose future is dropped after the server applied it (its reply never comes):
/// the read hold it made is released in the background, at once.
async fn a_cancelled_downgrade_leaves_nothing(b: Backend) {
    for policy in POLICIES {
        let name = format!("dg-cancelled-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = write(&client, &name, policy).await;
        let never = store.hold_replies(Rule::on(Op::Downgrade).times(1));
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        never.wait_entered(1).await;
        downgrade.abort();
        assert!(
            downgrade.await.is_err(),
            "{policy:?}: the downgrade was cancelled"
        );
        writer_gets_in_promptly(&other, &name, policy, "a cancelled downgrade").await;
    }
}

/// After `release_all()` a guard says nothing about the future: `valid_until()` is not later
/// than the instant it was found lost.
async fn a_lost_guard_claims_no_validity(b: Backend) {
    let client = b.leased(LEASE).await;
    let w = client
        .rwlock("dg-valid-until")
        .write()
        .await
        .expect("write");
    let m = client.mutex("dg-valid-until-m").lock().await.expect("lock");
    client.release_all().await.expect("release_all");
    let now = tokio::time::Instant::now();
    assert!(!w.is_held() && !m.is_held());
    assert!(
        w.valid_until() <= now && m.valid_until() <= now,
        "a released guard still claims validity into the future"
    );
}

both_backends!(
    downgrade_racing_release_all,
    a_downgrade_with_a_lost_reply_leaves_nothing,
    a_cancelled_downgrade_leaves_nothing,
    a_lost_guard_claims_no_validity,
);

/// A downgrade whose reply is delayed, then the read guard is released: nothing is left.
async fn delayed_downgrade_then_release_leaves_nothing(b: Backend) {
    for policy in POLICIES {
        let name = format!("atk-dg-rel-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = write(&client, &name, policy).await;
        let gate = store.hold_replies(Rule::on(Op::Downgrade).times(1));
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        gate.wait_entered(1).await;
        gate.open();
        let r = join("downgrade", downgrade).await.expect("downgrade");
        assert!(r.is_held(), "{policy:?}: downgraded");
        assert!(r.release().await.expect("release"), "{policy:?}: released");
        writer_gets_in_promptly(&other, &name, policy, "release").await;
    }
}

/// Says whether a guard's `valid_until` outlived the server's hold: another client's writer
/// is tried; if granted, the guard's trust must already be over.
async fn assert_no_overtrust(
    what: &str,
    vu: Instant,
    other: &LockClient,
    name: &str,
    policy: Preference,
) {
    if let Ok(w2) = other.rwlock(name).preference(policy).try_write().await {
        let now = Instant::now();
        assert!(
            vu <= now,
            "{what}: another writer got {name} while the read guard trusted its hold {:?} longer",
            vu - now
        );
        w2.release().await.expect("release");
    }
}

/// A downgrade queued behind a renewal (its reply briefly held), with a short auto-renewed
/// lease: the read hold it makes is renewed as a read hold afterwards (no writer gets in
/// while the guard says held), and its release leaves nothing.
async fn downgrade_behind_a_renewal_keeps_renewing(b: Backend) {
    for policy in POLICIES {
        let name = format!("atk-dg-renew-{policy:?}");
        let (store, client) = faulty_client_with(&b, LockClient::builder().lease(ms(300))).await;
        let other = b.client().await;
        let w = write(&client, &name, policy).await;
        let gate = store.hold_replies(Rule::on(Op::Extend).times(1));
        gate.wait_entered(1).await;
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        tokio::time::sleep(ms(30)).await;
        gate.open();
        let r = join("downgrade", downgrade).await.expect("downgrade");
        for _ in 0..15 {
            tokio::time::sleep(ms(100)).await;
            let vu = r.valid_until();
            assert!(r.is_held(), "{policy:?}: the read hold lost its renewals");
            assert_no_overtrust(&format!("{policy:?}"), vu, &other, &name, policy).await;
        }
        let info = other
            .rwlock(&name)
            .preference(policy)
            .inspect()
            .await
            .expect("inspect");
        assert_eq!(info.holders.len(), 1, "{policy:?}: {info:?}");
        assert!(
            r.release().await.expect("release"),
            "{policy:?}: released a live hold"
        );
        writer_gets_in_promptly(&other, &name, policy, "release").await;
    }
}

/// A downgrade queued behind a renewal whose reply never comes is cancelled: the hold (the
/// renewal applied on the server) is released in the background at once.
async fn downgrade_cancelled_behind_a_renewal_leaves_nothing(b: Backend) {
    for policy in POLICIES {
        let name = format!("atk-dg-cancel-renew-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = client
            .rwlock(&name)
            .preference(policy)
            .renew_every(ms(100))
            .write()
            .await
            .expect("write");
        let never = store.hold_replies(Rule::on(Op::Extend).times(1));
        never.wait_entered(1).await;
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        tokio::time::sleep(ms(30)).await;
        downgrade.abort();
        assert!(downgrade.await.is_err());
        writer_gets_in_promptly(&other, &name, policy, "a cancelled downgrade").await;
        never.open();
    }
}

/// A downgrade whose reply comes after its whole (short, auto-renewed) lease: whatever the
/// read guard says, it never trusts the hold past the server's lease end.
async fn downgrade_reply_slower_than_the_lease(b: Backend) {
    for policy in POLICIES {
        for delay_ms in [150u64, 250, 400] {
            let name = format!("atk-dg-slow-{policy:?}-{delay_ms}");
            let (store, client) =
                faulty_client_with(&b, LockClient::builder().lease(ms(200))).await;
            let other = b.client().await;
            let w = write(&client, &name, policy).await;
            store.add(Rule::on(Op::Downgrade).times(1).delay_reply(ms(delay_ms)));
            let what = format!("{policy:?} delay {delay_ms} ms");
            match WriteGuard::downgrade(w).await {
                Ok(r) => {
                    for _ in 0..10 {
                        let vu = r.valid_until();
                        assert_no_overtrust(&what, vu, &other, &name, policy).await;
                        tokio::time::sleep(ms(50)).await;
                    }
                    drop(r);
                }
                Err(e) => eprintln!("{what}: downgrade failed: {e}"),
            }
            writer_gets_in_promptly(&other, &name, policy, &what).await;
        }
    }
}

/// A fair writer downgrades while a reader, a writer and a reader queue behind it: the first
/// reader is admitted, the writer waits until every read hold is gone, and the last reader
/// waits behind that writer; never a writer beside a reader.
async fn fair_downgrade_with_a_mixed_queue(b: Backend) {
    let name = "atk-dg-fair-queue";
    let a = b.leased(LEASE).await;
    let q = b.leased(LEASE).await;
    let lock = |c: &LockClient| c.rwlock(name).preference(Preference::Fair);
    let w = lock(&a).write().await.expect("write");
    let (c1, c2, c3) = (q.clone(), q.clone(), q.clone());
    let r1 = tokio::spawn(async move { c1.rwlock(name).preference(Preference::Fair).read().await });
    tokio::time::sleep(ms(200)).await;
    let w2 =
        tokio::spawn(async move { c2.rwlock(name).preference(Preference::Fair).write().await });
    tokio::time::sleep(ms(200)).await;
    let r2 = tokio::spawn(async move { c3.rwlock(name).preference(Preference::Fair).read().await });
    tokio::time::sleep(ms(200)).await;
    let r = WriteGuard::downgrade(w).await.expect("downgrade");
    let r1 = within_ok(PROMPTLY, "first reader admitted", r1)
        .await
        .expect("r1");
    tokio::time::sleep(ms(500)).await;
    assert!(!w2.is_finished(), "a writer got in beside two readers");
    assert!(!r2.is_finished(), "a reader jumped the queued writer");
    assert!(r.is_held() && r1.is_held());
    r.release().await.expect("release");
    tokio::time::sleep(ms(300)).await;
    assert!(!w2.is_finished(), "a writer got in beside a reader");
    r1.release().await.expect("release");
    let w2 = within_ok(PROMPTLY, "writer admitted", w2)
        .await
        .expect("w2");
    tokio::time::sleep(ms(300)).await;
    assert!(!r2.is_finished(), "a reader got in beside a writer");
    w2.release().await.expect("release");
    let r2 = within_ok(PROMPTLY, "r2 admitted", r2).await.expect("r2");
    r2.release().await.expect("release");
}

/// Semaphore: a client holds 2 permits and 1 permit under different guards; the 2-permit
/// release's replies are lost (it is sent again): afterwards exactly the 1-permit hold is
/// left, and after its release all 3 permits are free at once.
async fn semaphore_release_with_lost_replies(b: Backend) {
    let name = "atk-sem-lost";
    let (store, client) = faulty_client(&b).await;
    let other = b.client().await;
    let sem = client.semaphore(name, 3);
    let two = sem.acquire_many(2).await.expect("two");
    let one = sem.acquire().await.expect("one");
    store.add(Rule::on(Op::Release).times(2).lose_reply());
    let outcome = two.release().await;
    eprintln!("release of two with lost replies: {outcome:?}");
    let osem = other.semaphore(name, 3);
    assert!(
        osem.try_acquire_many(3).await.is_err(),
        "3 permits free while the 1-permit guard holds one"
    );
    let p = osem
        .acquire_many(2)
        .timeout(PROMPTLY)
        .await
        .expect("the 2-permit release left 2 free");
    p.release().await.expect("release");
    assert!(one.is_held());
    one.release().await.expect("release");
    let all = osem
        .acquire_many(3)
        .timeout(PROMPTLY)
        .await
        .expect("all permits free");
    all.release().await.expect("release");
}

/// Downgrade and renewals racing with a very short lease, many times, with random small
/// reply delays: a read guard that says held never has a writer beside it, and after its
/// release a writer gets in promptly.
async fn downgrade_stress_with_short_leases(b: Backend) {
    let other = b.client().await;
    for i in 0..40u64 {
        let policy = POLICIES[(i % 3) as usize];
        let name = format!("atk-dg-stress-{i}");
        let (store, client) = faulty_client_with(&b, LockClient::builder().lease(ms(60))).await;
        let w = write(&client, &name, policy).await;
        let jitter = ms((i * 7) % 45);
        store.add(Rule::on(Op::Extend).delay_reply(ms((i * 3) % 17)));
        tokio::time::sleep(jitter).await;
        store.add(
            Rule::on(Op::Downgrade)
                .times(1)
                .delay_reply(ms((i * 11) % 25)),
        );
        match WriteGuard::downgrade(w).await {
            Ok(r) => {
                for _ in 0..3 {
                    let vu = r.valid_until();
                    assert_no_overtrust(&format!("{i} {policy:?}"), vu, &other, &name, policy)
                        .await;
                    tokio::time::sleep(ms(20)).await;
                }
                let _ = r.release().await;
            }
            Err(e) => eprintln!("{i} {policy:?}: downgrade failed: {e}"),
        }
        writer_gets_in_promptly(&other, &name, policy, &format!("{i} {policy:?}")).await;
    }
}

both_backends!(
    delayed_downgrade_then_release_leaves_nothing,
    downgrade_behind_a_renewal_keeps_renewing,
    downgrade_cancelled_behind_a_renewal_leaves_nothing,
    downgrade_reply_slower_than_the_lease,
    fair_downgrade_with_a_mixed_queue,
    semaphore_release_with_lost_replies,
    downgrade_stress_with_short_leases,
);

// ------------------------------------------------------------------------------------------
// Downgrades and extends after a cancelled `extend`. A lease request whose caller stopped
// waiting may still reach the server later (its outcome is unknown to the guard): it must
// cap the trust of the guard it was sent for, and of the read guard a downgrade turns that
// guard into ("never two conflicting guards say `is_held()`", "a guard never trusts past the
// server's lease"). On a private real redis-server and on the in-memory store.
//
// Besides `support::faulty` (whose delays live in the caller's future, so a cancelled call
// never reaches the store), this file has [`Detached`]: a wrapper whose delayed `extend`
// requests run in their own task, the way a request already written to the network still
// reaches Redis after its caller stopped waiting. That is exactly the "request of unknown
// outcome" the guarantees promise to survive.
// ------------------------------------------------------------------------------------------

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
