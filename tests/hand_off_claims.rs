//! A hand-off's claim and renewals beside a hand-over, through the public API:
//!
//! * an automatic renewal that lands late cannot cut a lease another client's resume set;
//! * a hand-off's claim (the first request of a hold a release handed over) replaces the
//!   hand-off window with the lease, but one that lands after another client's resume
//!   cannot cut the resumed lease either;
//! * a downgrade racing renewals, and an explicit shorter extend, stay honest.
//!
//! Each test asserts a promise of `docs/GUARANTEES.md` (quoted at the test).

mod support;
use support::quick::Quick;

use std::time::Duration;

use redis_locks::kind::Kind;
use redis_locks::Preference::Fair;
use redis_locks::{Guard, HoldId, LockClient, LockInfo};
use tokio::time::{timeout, Instant};

use support::backend::{join, until_waiters, Backend};
use support::faulty::{faulty_client, Gate, Op, Rule};
use support::honest::server_deadline;
use support::time::{ms, secs};

/// The primitives a hand-off can grant.
#[derive(Clone, Copy, Debug)]
enum Prim {
    Mutex,
    Write,
    Fair,
    /// A Semaphore of 1 permit.
    Sem,
    /// A fair (ticket-queue) RwLock's write hold.
    FairWrite,
    /// A Semaphore of 3 permits taken 2 at a time (a second taker of 2 cannot fit).
    TwoOfThree,
}

/// Reads the lock `name` as the primitive `p` sees it.
async fn inspect(c: &LockClient, p: Prim, name: &str) -> LockInfo {
    match p {
        Prim::Mutex => c.mutex(name).inspect().await,
        Prim::Write => c.rwlock(name).inspect().await,
        Prim::Fair => c.fair_lock(name).inspect().await,
        Prim::Sem => c.semaphore(name, 1).inspect().await,
        Prim::FairWrite => c.rwlock(name).preference(Fair).inspect().await,
        Prim::TwoOfThree => c.semaphore(name, 3).inspect().await,
    }
    .expect("inspect")
}

/// Whether another client is granted the exclusive hold of `name` now (the guard it gets is
/// dropped, released in the background).
async fn other_granted(c: &LockClient, p: Prim, name: &str) -> bool {
    match p {
        Prim::Mutex => c.mutex(name).try_lock().await.is_ok(),
        Prim::Write => c.rwlock(name).try_write().await.is_ok(),
        Prim::Fair => c.fair_lock(name).try_lock().await.is_ok(),
        Prim::Sem => c.semaphore(name, 1).try_acquire().await.is_ok(),
        Prim::FairWrite => c.rwlock(name).preference(Fair).try_write().await.is_ok(),
        Prim::TwoOfThree => c.semaphore(name, 3).try_acquire_many(2).await.is_ok(),
    }
}

/// Locks `name` as `p` with `lease`, waiting as long as it takes; the guard is detached and
/// its id returned with the instant `lock()` returned.
async fn lock_then_detach(c: LockClient, p: Prim, name: String, lease: Duration) -> HoldId {
    match p {
        Prim::Mutex => c.lock_for(&name, lease).await.detach(),
        Prim::Write => c
            .rwlock(&name)
            .lease(lease)
            .write()
            .await
            .expect("write")
            .detach(),
        Prim::Fair => c.fair_for(&name, lease).await.detach(),
        Prim::Sem => c
            .semaphore(&name, 1)
            .lease(lease)
            .acquire()
            .await
            .expect("acquire")
            .detach(),
        Prim::FairWrite => c
            .rwlock(&name)
            .preference(Fair)
            .lease(lease)
            .write()
            .await
            .expect("write")
            .detach(),
        Prim::TwoOfThree => c
            .semaphore(&name, 3)
            .lease(lease)
            .acquire_many(2)
            .await
            .expect("acquire 2")
            .detach(),
    }
}

/// Takes `name` as `p` (lease 30 s); the guard's `release()` is returned as a future.
async fn take(
    c: &LockClient,
    p: Prim,
    name: &str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    match p {
        Prim::Mutex => {
            let g = c.mutex(name).lease(secs(30)).lock().await.expect("lock");
            Box::pin(async move { g.release().await.expect("release") })
        }
        Prim::Write => {
            let g = c.rwlock(name).lease(secs(30)).write().await.expect("write");
            Box::pin(async move { g.release().await.expect("release") })
        }
        Prim::Fair => {
            let g = c.fair_for(name, secs(30)).await;
            Box::pin(async move { g.release().await.expect("release") })
        }
        Prim::Sem => {
            let g = c
                .semaphore(name, 1)
                .lease(secs(30))
                .acquire()
                .await
                .expect("acquire");
            Box::pin(async move { g.release().await.expect("release") })
        }
        Prim::FairWrite => {
            let lock = c.rwlock(name).preference(Fair).lease(secs(30));
            let g = lock.write().await.expect("write");
            Box::pin(async move { g.release().await.expect("release") })
        }
        Prim::TwoOfThree => {
            let lock = c.semaphore(name, 3).lease(secs(30));
            let g = lock.acquire_many(2).await.expect("acquire 2");
            Box::pin(async move { g.release().await.expect("release") })
        }
    }
}

/// For `span`, every 25 ms: `guard` (its trust read before each inspect) never trusts past
/// the server's lease, and no other client is granted `name` while `guard` says `is_held()`.
/// A dishonest trust is noted and the watch goes on, to see whether a second holder follows;
/// the test fails at the end (or at once on a second holder) with what was seen.
async fn watch_one_holder<K: Kind>(
    what: &str,
    p: Prim,
    name: &str,
    guard: &Guard<K>,
    contender: &LockClient,
    direct: &LockClient,
    span: Duration,
) {
    let start = Instant::now();
    let end = start + span;
    let mut dishonest: Option<String> = None;
    while Instant::now() < end {
        let trusted = guard.valid_until();
        let info = inspect(direct, p, name).await;
        let answered = Instant::now();
        if dishonest.is_none() {
            // assert_honest's rule (support/honest.rs), without a panic: the guard trusts no
            // later than the server's lease (or than now, if the server lists no holder).
            let server = server_deadline(&info, answered).unwrap_or(answered);
            if trusted > server + ms(5) {
                dishonest = Some(format!(
                    "at +{:?} the guard trusts {:?} past the server's lease (server: {info:?})",
                    start.elapsed(),
                    trusted.saturating_duration_since(server)
                ));
            }
        }
        let other = other_granted(contender, p, name).await;
        let held = guard.is_held();
        assert!(
            !(other && held),
            "{what}: at +{:?} a second client was granted {name} while the guard says \
             is_held() (trusted {:?} more; server just before the attempt: {info:?}); \
             first dishonest trust seen: {dishonest:?}",
            start.elapsed(),
            guard
                .valid_until()
                .saturating_duration_since(Instant::now())
        );
        tokio::time::sleep(ms(25)).await;
    }
    if let Some(d) = dishonest {
        panic!("{what}: {d}");
    }
}

/// GUARANTEES, "A hand-over to another client": a hand-off's claim "sets the lease in place
/// of that window only while the hold still has it ... a claim that lands late keeps as any
/// renewal does".
///
/// The race: A (lease 2 s) waits for `name`; the holder releases, `name` is handed to A,
/// and A's claim (which may replace the hand-off window with the lease) is held before the
/// server, as a slow network would. A's `lock()` has returned; A detaches at once. B resumes
/// the id with a 10 s lease. A's claim then lands: had it set the lease, the server's hold
/// would end 2 s after it, under B's guard that trusts ~10 s, and a third client would be
/// granted `name` while B's guard says `is_held()`.
async fn late_hand_off_claim_beside_a_resume(p: Prim, name: &str, resume_lease: Duration) {
    late_hand_off_claim_on(Backend::redis(), p, name, resume_lease).await
}

/// Waits until A's waiter made its second attempt: a refused waiter subscribes to the
/// lock's channel and attempts again at once, and a release between the two would grant it
/// by that attempt (no hand-off, no claim). Released after it, the lock is handed over.
async fn settled(fa: &support::faulty::Faulty) {
    let give_up = Instant::now() + secs(10);
    while fa.calls(Op::Acquire).len() < 2 {
        assert!(Instant::now() < give_up, "the waiter never attempted again");
        tokio::time::sleep(ms(2)).await;
    }
}

/// The race needs a hand-off. The holder releases once the waiter settled ([`settled`]);
/// should an attempt of the waiter still cross the release (one due to its heartbeat, a
/// slow machine), it is granted by that attempt instead, so the race is tried on up to
/// three names and fails if no hand-off came in any.
async fn late_hand_off_claim_on(b: Backend, p: Prim, name: &str, resume_lease: Duration) {
    for attempt in 0..3 {
        let name = format!("{name}-{attempt}");
        if late_hand_off_claim_once(&b, p, &name, resume_lease).await {
            return;
        }
    }
    panic!("{name}: no hand-off in three tries (each waiter was granted by its own attempt)");
}

/// One try of [`late_hand_off_claim_on`]; false if the lock was not handed over.
async fn late_hand_off_claim_once(
    b: &Backend,
    p: Prim,
    name: &str,
    resume_lease: Duration,
) -> bool {
    let (fa, a) = faulty_client(b).await;
    let holder = b.client().await;
    let resumer = b.client().await;
    let contender = b.client().await;
    let direct = b.client().await;

    let release_first = take(&holder, p, name).await;
    let gate = fa.hold_extend(ms(2_000));
    let waiting = tokio::spawn(lock_then_detach(a.clone(), p, name.to_owned(), ms(2_000)));
    until_waiters(1, async || Ok(inspect(&direct, p, name).await)).await;
    settled(&fa).await;
    assert!(release_first.await, "the holder held");
    let handed = timeout(secs(2), gate.wait_entered(1)).await.is_ok();
    let id = join("A's lock and detach", waiting).await;
    if !handed {
        gate.open();
        return false;
    }
    let (r, l) = (&resumer, resume_lease);
    match p {
        Prim::Mutex => {
            let resumed = r.mutex(name).lease(l).resume(&id).await;
            after_resume(resumed, &gate, p, name, &contender, &direct).await
        }
        Prim::Fair => {
            let resumed = r.fair_lock(name).lease(l).resume(&id).await;
            after_resume(resumed, &gate, p, name, &contender, &direct).await
        }
        Prim::Write => {
            let resumed = r.rwlock(name).lease(l).resume_write(&id).await;
            after_resume(resumed, &gate, p, name, &contender, &direct).await
        }
        Prim::Sem => {
            let resumed = r.semaphore(name, 1).lease(l).resume(&id).await;
            after_resume(resumed, &gate, p, name, &contender, &direct).await
        }
        Prim::FairWrite => {
            let lock = r.rwlock(name).preference(Fair).lease(l);
            let resumed = lock.resume_write(&id).await;
            after_resume(resumed, &gate, p, name, &contender, &direct).await
        }
        Prim::TwoOfThree => {
            let resumed = r.semaphore(name, 3).lease(l).resume(&id).await;
            after_resume(resumed, &gate, p, name, &contender, &direct).await
        }
    }
    true
}

/// B resumed (`resumed`); A's held claim is let through; B's guard is watched for 3 s.
async fn after_resume<K: Kind>(
    resumed: redis_locks::Result<Guard<K>>,
    gate: &Gate,
    p: Prim,
    name: &str,
    contender: &LockClient,
    direct: &LockClient,
) {
    let resumed = resumed.expect("B resumes");
    assert!(resumed.is_held());
    gate.open();
    let what = "B's resumed guard after A's late hand-off claim";
    watch_one_holder(what, p, name, &resumed, contender, direct, ms(3_000)).await;
    assert!(resumed.is_held(), "B's guard is renewed throughout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutex_late_hand_off_claim_cannot_cut_a_longer_resume() {
    late_hand_off_claim_beside_a_resume(Prim::Mutex, "claim-late-mutex", secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_late_hand_off_claim_cannot_cut_a_longer_resume() {
    late_hand_off_claim_beside_a_resume(Prim::Write, "claim-late-write", secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fair_lock_late_hand_off_claim_cannot_cut_a_longer_resume() {
    late_hand_off_claim_beside_a_resume(Prim::Fair, "claim-late-fair", secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_late_hand_off_claim_cannot_cut_a_longer_resume() {
    late_hand_off_claim_beside_a_resume(Prim::Sem, "claim-late-sem", secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fair_rwlock_write_late_hand_off_claim_cannot_cut_a_longer_resume() {
    let name = "claim-late-fair-write";
    late_hand_off_claim_beside_a_resume(Prim::FairWrite, name, secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_of_three_permits_late_hand_off_claim_cannot_cut_a_longer_resume() {
    let name = "claim-late-two-of-three";
    late_hand_off_claim_beside_a_resume(Prim::TwoOfThree, name, secs(10)).await;
    let name = "claim-late-two-of-three-memory";
    late_hand_off_claim_on(Backend::memory(), Prim::TwoOfThree, name, secs(10)).await;
}

/// The claim is applied but its reply is lost; the engine sends it again (still naming the
/// hand-off's deadline, since none was confirmed), and that one is held on its way while A
/// detaches and B resumes with a longer lease; then it lands: it keeps, as any renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_sent_again_after_a_lost_reply_cannot_cut_a_longer_resume() {
    let (b, p, name) = (Backend::redis(), Prim::Mutex, "claim-lost-reply-sent-again");
    let (fa, a) = faulty_client(&b).await;
    let holder = b.client().await;
    let (resumer, contender, direct) = (b.client().await, b.client().await, b.client().await);
    let release_first = take(&holder, p, name).await;
    let gate = Gate::new();
    let claim = |call: &support::faulty::Call| call.lease == Some(ms(2_000));
    fa.add(Rule::on(Op::Extend).when(claim).times(1).lose_reply());
    let held = Rule::on(Op::Extend).when(claim).times(1);
    fa.add(held.hold_request(gate.clone()));
    let (a2, name2) = (a.clone(), name.to_owned());
    let waiting = tokio::spawn(async move { a2.lock_for(&name2, ms(2_000)).await });
    until_waiters(1, async || Ok(inspect(&direct, p, name).await)).await;
    settled(&fa).await;
    assert!(release_first.await, "the holder held");
    let guard = join("A's lock", waiting).await;
    gate.entered_within(1, secs(20), "A's second claim reached the gate")
        .await;
    let id = guard.detach();
    let resumed = resumer.mutex(name).lease(secs(10)).resume(&id).await;
    after_resume(resumed, &gate, p, name, &contender, &direct).await;
}

/// A claim answered replaces the hand-off window (here a 5 s heartbeat) with the lease (1
/// s), on every family that hands over (the Mutex: `tests/mutex.rs`), so a claimer that
/// dies then blocks others for one lease at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_replaces_the_hand_off_window_with_the_lease() {
    for b in [Backend::redis(), Backend::memory()] {
        for (p, name) in [
            (Prim::Fair, "claim-window-fair"),
            (Prim::FairWrite, "claim-window-fair-write"),
            (Prim::TwoOfThree, "claim-window-two-of-three"),
        ] {
            claim_replaces_the_window(&b, p, name).await;
        }
    }
}

/// Up to three tries, as [`late_hand_off_claim_on`]: a waiter granted by its own attempt
/// sends no claim.
async fn claim_replaces_the_window(b: &Backend, p: Prim, name: &str) {
    for attempt in 0..3 {
        if claim_replaces_the_window_once(b, p, &format!("{name}-{attempt}")).await {
            return;
        }
    }
    panic!("{p:?}: no hand-off in three tries (each waiter was granted by its own attempt)");
}

/// One try: false if the lock was not handed over (no claim was sent).
async fn claim_replaces_the_window_once(b: &Backend, p: Prim, name: &str) -> bool {
    let (fa, a) = faulty_client(b).await;
    let (holder, direct) = (b.client().await, b.client().await);
    let release_first = take(&holder, p, name).await;
    let (lease, heartbeat) = (secs(1), secs(5));
    let name2 = name.to_owned();
    let waiting = tokio::spawn(async move {
        match p {
            Prim::Fair => {
                let lock = a.fair_lock(&name2).lease(lease).heartbeat(heartbeat);
                lock.lock().await.expect("lock").detach()
            }
            Prim::FairWrite => {
                let lock = a.rwlock(&name2).preference(Fair);
                let lock = lock.lease(lease).heartbeat(heartbeat);
                lock.write().await.expect("write").detach()
            }
            _ => {
                let lock = a.semaphore(&name2, 3).lease(lease).heartbeat(heartbeat);
                lock.acquire_many(2).await.expect("acquire 2").detach()
            }
        }
    });
    until_waiters(1, async || Ok(inspect(&direct, p, name).await)).await;
    settled(&fa).await;
    assert!(release_first.await, "the holder held");
    // The claim is sent before `lock()` returns; the detach waits for nothing, so wait for
    // its answer here.
    let _id = join("A's lock", waiting).await;
    let give_up = Instant::now() + secs(2);
    while fa.calls(Op::Extend).is_empty() {
        if Instant::now() > give_up {
            return false;
        }
        tokio::time::sleep(ms(2)).await;
    }
    let info = inspect(&direct, p, name).await;
    let left = info.holders[0].lease_remaining;
    assert!(
        left <= lease + ms(1),
        "{p:?}: the claim left {left:?} of the hand-off window, not the 1 s lease: {info:?}"
    );
    true
}

/// Control of the race above (expected to pass): B resumes with a lease no longer than
/// A's (2 s), so A's late claim, landing after B's send, cannot end the server's hold before
/// B's trust. Shows the harness itself (gate, resume, watch) is sound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_mutex_late_hand_off_claim_beside_an_equal_resume() {
    late_hand_off_claim_beside_a_resume(Prim::Mutex, "claim-late-control", ms(2_000)).await;
}

/// The same race on the in-memory store (the engine decides the claim's `set`, so every
/// store is open to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_mutex_late_hand_off_claim_cannot_cut_a_longer_resume() {
    late_hand_off_claim_on(
        Backend::memory(),
        Prim::Mutex,
        "claim-late-memory",
        secs(10),
    )
    .await;
}

/// The same race on an election (a FairLock whose holder proclaimed): the leader resigns,
/// the leadership is handed to A (lease 2 s), whose claim is held; A detaches, B resumes the
/// leadership with a 10 s lease; A's claim lands. A third candidate must not be granted the
/// leadership while B's `Leadership` says `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn election_late_hand_off_claim_cannot_cut_a_longer_resume() {
    let b = Backend::redis();
    for attempt in 0..3 {
        if election_late_hand_off_claim_once(&b, &format!("claim-late-election-{attempt}")).await {
            return;
        }
    }
    panic!("no hand-off in three tries (each candidate was granted by its own attempt)");
}

/// One try of the election's race (as [`late_hand_off_claim_once`]); false if the
/// leadership was not handed over.
async fn election_late_hand_off_claim_once(b: &Backend, name: &str) -> bool {
    let name = name.to_owned();
    let (fa, a) = faulty_client(b).await;
    let holder = b.client().await;
    let resumer = b.client().await;
    let contender = b.client().await;
    let direct = b.client().await;
    let first = holder
        .election(&name)
        .lease(secs(30))
        .campaign("first")
        .await
        .expect("first leads");
    let gate = fa.hold_extend(ms(2_000));
    let (a2, name2) = (a.clone(), name.clone());
    let waiting = tokio::spawn(async move {
        a2.election(&name2)
            .lease(ms(2_000))
            .campaign("a")
            .await
            .expect("A leads")
            .detach()
    });
    until_waiters(1, async || Ok(inspect(&direct, Prim::Fair, &name).await)).await;
    settled(&fa).await;
    assert!(first.resign().await.expect("resign"), "first led");
    let handed = timeout(secs(2), gate.wait_entered(1)).await.is_ok();
    let id = join("A's campaign and detach", waiting).await;
    if !handed {
        gate.open();
        return false;
    }
    let resumed = resumer
        .election(&name)
        .lease(secs(10))
        .resume(&id)
        .await
        .expect("B resumes");
    assert!(resumed.is_held());
    gate.open();
    let start = Instant::now();
    while start.elapsed() < ms(3_000) {
        let other = contender.election(&name).try_campaign("d").await;
        let held = resumed.is_held();
        let leader = direct.election(&name).leader().await.expect("leader");
        assert!(
            !(other.is_ok() && held),
            "at +{:?} a third candidate leads (leader() = {leader:?}) while B's resumed \
             Leadership says is_held() (trusted {:?} more)",
            start.elapsed(),
            resumed
                .valid_until()
                .saturating_duration_since(Instant::now())
        );
        drop(other);
        tokio::time::sleep(ms(25)).await;
    }
    assert!(resumed.is_held(), "B's leadership is renewed throughout");
    true
}

/// GUARANTEES, "A downgrade is the same hold" and "Lease requests of one hold ... run one at a
/// time": a write guard (lease 300 ms, renewed every ~100 ms, each renewal 40 ms on the way
/// and 40 ms back, some replies lost) downgrades at a random instant, racing its renewals
/// (keep) and its lost replies (which may have been applied). For 400 ms after each downgrade
/// the read guard never trusts past the server's lease of its read hold, and no writer is
/// granted while it says `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_downgrade_racing_renewals_stays_honest() {
    use redis_locks::WriteGuard;
    let b = Backend::redis();
    let (fa, a) = faulty_client(&b).await;
    let contender = b.client().await;
    let direct = b.client().await;
    fa.add(Rule::on(Op::Extend).times(3).lose_reply());
    fa.add(
        Rule::on(Op::Extend)
            .delay_request(ms(40))
            .delay_reply(ms(40)),
    );
    fa.add(
        Rule::on(Op::Downgrade)
            .delay_request(ms(30))
            .delay_reply(ms(30)),
    );
    let mut rng = support::rng::Rng::new(7);
    for round in 0..12 {
        let name = format!("downgrade-racing-renewals-{round}");
        let w = a.rwlock(&name).lease(ms(300)).write().await.expect("write");
        tokio::time::sleep(ms(rng.below(400))).await;
        let r = match WriteGuard::downgrade(w).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("round {round}: downgrade failed ({e}); nothing to watch");
                continue;
            }
        };
        let start = Instant::now();
        while start.elapsed() < ms(400) {
            let trusted = r.valid_until();
            let info = direct.rwlock(&name).inspect().await.expect("inspect");
            let answered = Instant::now();
            let server = server_deadline(&info, answered).unwrap_or(answered);
            assert!(
                trusted <= server + ms(5),
                "round {round}: the read guard trusts {:?} past the server's lease ({info:?})",
                trusted.saturating_duration_since(server)
            );
            let writer = contender.rwlock(&name).try_write().await.is_ok();
            assert!(
                !(writer && r.is_held()),
                "round {round}: a writer was granted while the read guard says is_held()"
            );
            tokio::time::sleep(ms(20)).await;
        }
        drop(r);
    }
}

/// An `extend` to a shorter lease shortens the guard's trust, not the server's lease (no
/// request shortens a hold), and the renewals after it ask for the new length. A mutex guard
/// (lease 10 s) whose renewals are slow (60 ms each way), the first one's reply lost
/// (applied), calls `extend(1 s)` while a renewal may be on its way. For 2 s after: the guard
/// never trusts past the server, trusts no more than 1 s ahead (+ one renewal's round trip),
/// and stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shorter_extend_shortens_the_trust_not_the_server_lease() {
    let b = Backend::redis();
    let name = "shorter-extend-shortens-the-trust";
    let (fa, a) = faulty_client(&b).await;
    let direct = b.client().await;
    fa.add(
        Rule::on(Op::Extend)
            .when(|c| c.lease == Some(secs(10)))
            .times(1)
            .lose_reply(),
    );
    fa.add(
        Rule::on(Op::Extend)
            .delay_request(ms(60))
            .delay_reply(ms(60)),
    );
    let mut g = a
        .mutex(name)
        .lease(secs(10))
        .renew_every(ms(300))
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(ms(750)).await;
    assert!(
        g.extend(secs(1)).await.expect("extend"),
        "extend(1 s) renewed"
    );
    let start = Instant::now();
    while start.elapsed() < ms(2_000) {
        let trusted = g.valid_until();
        let info = direct.mutex(name).inspect().await.expect("inspect");
        let answered = Instant::now();
        let server = server_deadline(&info, answered).unwrap_or(answered);
        assert!(
            trusted <= server + ms(5),
            "the guard trusts {:?} past the server's lease ({info:?})",
            trusted.saturating_duration_since(server)
        );
        let ahead = trusted.saturating_duration_since(answered);
        assert!(
            ahead <= ms(1_150),
            "at +{:?} after extend(1 s) the guard trusts {ahead:?} ahead",
            start.elapsed()
        );
        tokio::time::sleep(ms(20)).await;
    }
    assert!(g.is_held(), "renewed with the 1 s lease throughout");
}

/// The late claim again with no fault-injecting store: a real TCP proxy between A and the
/// server holds A's requests from the claim's bytes on (a congested network), while B talks
/// to the server directly. A detaches as soon as `lock()` returns; B resumes with 10 s; the
/// proxy then lets A's bytes through. A waiter granted by its own attempt sends no claim:
/// then the race is tried again on another name, up to three.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutex_late_hand_off_claim_through_a_slow_network_cannot_cut_a_longer_resume() {
    let server = support::RedisServer::start();
    for attempt in 0..3 {
        if slow_network_claim_once(&server, &format!("claim-late-proxy-{attempt}")).await {
            return;
        }
    }
    panic!("no hand-off in three tries (each waiter was granted by its own attempt)");
}

/// One try of the slow network's race; false if A sent no claim (no hand-off).
async fn slow_network_claim_once(server: &support::RedisServer, name: &str) -> bool {
    use support::proxy::Proxy;
    let proxy = Proxy::start(server.port()).await;
    let connect = async |url: String| LockClient::connect(&url).await.expect("connect");
    let a = connect(proxy.url()).await;
    let holder = connect(server.url()).await;
    let resumer = connect(server.url()).await;
    let contender = connect(server.url()).await;
    let direct = connect(server.url()).await;
    let first = holder.lock_for(name, secs(30)).await;
    let (a2, name2) = (a.clone(), name.to_owned());
    let waiting = tokio::spawn(async move { a2.lock_for(&name2, ms(2_000)).await.detach() });
    let handle = direct.mutex(name);
    until_waiters(1, || handle.inspect()).await;
    // rw_extend's arguments end with the mode and the renewal: a write hold's claim names
    // the hand-off's deadline (13 digits of server ms), a renewal says "keep".
    proxy.stall_requests_from(b"\r\n$1\r\nw\r\n$13\r\n");
    assert!(first.release().await.expect("release"));
    let id = join("A's lock and detach", waiting).await;
    // The claim leaves on the engine's connection just after the grant: wait for its bytes.
    let give_up = Instant::now() + secs(2);
    while !proxy.requests_stalled() && Instant::now() < give_up {
        tokio::time::sleep(ms(5)).await;
    }
    if !proxy.requests_stalled() {
        return false;
    }
    let resumed = resumer
        .mutex(name)
        .lease(secs(10))
        .resume(&id)
        .await
        .expect("B resumes");
    proxy.resume();
    watch_one_holder(
        "B's resumed guard after A's claim came through the slow network",
        Prim::Mutex,
        name,
        &resumed,
        &contender,
        &direct,
        ms(3_000),
    )
    .await;
    true
}
