//! Requests that reach the server late (a lost reply, a cancelled call, a slow network, a
//! retry by the same token), through the public API only: none may end a hold under a guard
//! that trusts it (docs/decisions/no-request-shortens-a-hold.md). Each test fails if a promise
//! of `docs/GUARANTEES.md` breaks: never two holders of an exclusive lock while both guards say
//! `is_held()`, a guard never trusts past the server's lease, a dead holder blocks others at
//! most one lease.

mod support;
use support::quick::Quick;

use redis_locks::{LockClient, Preference, WriteGuard};
use tokio::time::Instant;

use support::backend::{until_waiters, Backend};
use support::faulty::{faulty_client, Op, Rule};
use support::late::{
    a_granted, late_proxy, proxied_client, proxied_faulty_client, quorum_client, took,
    two_of_three_late, until, warm_up, warm_up_multi, watch, watch_mutex, watch_writers, Watchers,
};
use support::time::{ms, secs};
use support::Granted;

/// A hold granted by a hand-off (a release handed the Mutex to waiter A, whose heartbeat
/// window, set explicitly, is longer than its lease): A's claim (its first renewal, which
/// replaces the hand-off's window with A's lease while the hold still has that window) is
/// delayed on the network. A detaches at once and B resumes the id with a lease shorter
/// than what is left of the window: B's resume keeps the window (no request shortens a
/// hold), made even as every renewal's deadline, so A's late claim no longer finds the
/// hand-off's (odd) deadline and keeps too: B's trust stands.
async fn a_late_claim_cannot_cut_a_resume_that_kept_the_hand_off_window(b: Backend) {
    let name = "late-claim-after-keeping-resume";
    let holder = b.client().await;
    let (fa, a) = faulty_client(&b).await;
    let resumer = b.client().await;
    let w = Watchers::on(&b).await;

    let x = holder.mutex(name).lock().await.expect("X locks");
    // A's first renewal (the claim) is held before it reaches the server.
    let gate = fa.hold_requests(Rule::on(Op::Extend).times(1));
    let a_handle = a.mutex(name).lease(ms(500)).heartbeat(secs(20));
    let waiting = tokio::spawn(async move { a_handle.lock().await });
    let probe = w.observer.mutex(name);
    until_waiters(1, || probe.inspect()).await;
    assert!(x.release().await.expect("X releases"));
    let a_guard = a_granted(waiting).await;
    gate.entered_within(1, secs(20), "A's claim reached the gate")
        .await;
    let id = a_guard.detach();
    let b_lock = resumer.mutex(name).lease(secs(9));
    let b_guard = b_lock.resume(&id).await.expect("B resumes");
    assert!(b_guard.is_held());
    gate.open();
    // Give the claim time to land.
    tokio::time::sleep(ms(100)).await;
    let what = "B's resumed guard after A's late claim";
    w.mutex(what, &b_guard, name, secs(2)).await;
}

/// The same late claim through two guards of one hold, on a
/// FairLock (a ticket queue: a release promotes waiter A, whose hold then has A's heartbeat
/// deadline): A keeps its guard and hands its id to B (`hold_id`), B resumes with a 9 s lease
/// (which keeps the hand-off's deadline), then A's delayed claim lands and sets A's 500 ms
/// lease, and A's process stops. As GUARANTEES ("Several guards of one hold") says, only a
/// release or a downgrade by the other guard can end the hold under B; A's claim cannot.
async fn a_late_claim_of_a_second_guard_cannot_cut_a_fair_lock_resume(b: Backend) {
    let name = "late-claim-second-guard-fair";
    let holder = b.client().await;
    let (fa, a) = faulty_client(&b).await;
    let resumer = b.client().await;
    let observer = b.client().await;
    let contender = b.client().await;

    let x = holder.fair_lock(name).lock().await.expect("X locks");
    let gate = fa.hold_requests(Rule::on(Op::Extend).times(1));
    let a_handle = a.fair_lock(name).lease(ms(500)).heartbeat(secs(20));
    let waiting = tokio::spawn(async move { a_handle.lock().await });
    let probe = observer.fair_lock(name);
    until_waiters(1, || probe.inspect()).await;
    assert!(x.release().await.expect("X releases"));
    let a_guard = a_granted(waiting).await;
    gate.entered_within(1, secs(20), "A's claim reached the gate")
        .await;
    let id = a_guard.hold_id();
    let b_lock = resumer.fair_lock(name).lease(secs(9));
    let b_guard = b_lock.resume(&id).await.expect("B resumes");
    assert!(b_guard.is_held());
    gate.open();
    tokio::time::sleep(ms(100)).await;
    // A's process stops (its guard is never released).
    fa.freeze().await;
    let rival = contender.fair_lock(name);
    watch(
        "B's resumed fair-lock guard after A's late claim",
        || b_guard.is_held(),
        || b_guard.valid_until(),
        async || probe.inspect().await.expect("inspect"),
        async || took(rival.try_lock().await).await,
        secs(2),
    )
    .await;
    drop(a_guard);
}

/// The acquire attempt `lock()`
/// sent first is held on a slow network; the client's connection
/// breaks, it reconnects and retries by the same token (a lost reply is not a failure), and is
/// granted. A detaches the hold and B resumes it with a 9 s lease. Then A's first attempt
/// reaches the server: for a lock its token already holds, an acquire renews as a renewal
/// does once anything renewed the hold since its grant (`regranted_until` in
/// `lua/prelude.lua`), so it cannot set A's 500 ms lease under B's trust.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_duplicate_acquire_cannot_cut_a_resumed_mutex() {
    let name = "late-duplicate-acquire";
    let b = Backend::redis();
    let (proxy, a) = proxied_client(&b).await;
    let resumer = b.client().await;
    let w = Watchers::on(&b).await;
    // Warm-up: the scripts are on the server.
    warm_up(&a, "warm-up").await;
    proxy.hold_existing();
    let a_handle = a.mutex(name).lease(ms(500));
    let locking = tokio::spawn(async move { a_handle.lock().await });
    cut_behind_the_first_attempt(&proxy).await;
    let a_guard = a_granted(locking).await;
    let id = a_guard.detach();
    let b_lock = resumer.mutex(name).lease(secs(9));
    let b_guard = b_lock.resume(&id).await.expect("B resumes");
    assert!(b_guard.is_held());
    deliver_the_held(&proxy).await;
    let what = "B's resumed guard after A's late first attempt";
    w.mutex(what, &b_guard, name, secs(2)).await;
}

/// The documented cost, checked for its bound: a holder with a
/// 3 s lease (renewed every second) asks `extend(300 ms)` and its process stops at once. Its
/// guard trusts at most 300 ms from the extend's send; the server keeps the later deadline
/// its last 3 s renewal gave. Nobody may take the lock while the guard trusts it, and others
/// must get it within the longest lease the holder had (3 s) of that extend, plus slack.
async fn a_shorter_extend_then_a_crash_blocks_at_most_the_longer_lease(b: Backend) {
    let name = "shorter-extend-then-crash";
    let (fa, a) = faulty_client(&b).await;
    let contender = b.client().await;
    let observer = b.client().await;
    let mut guard = a.mutex(name).lease(secs(3)).lock().await.expect("A locks");
    tokio::time::sleep(ms(1_200)).await;
    let sent = Instant::now();
    assert!(guard.extend(ms(300)).await.expect("extend"), "extend");
    assert!(
        guard.valid_until() <= sent + ms(300) + ms(5),
        "the guard trusts {:?} past its shorter lease",
        guard
            .valid_until()
            .saturating_duration_since(sent + ms(300))
    );
    let info = observer.mutex(name).inspect().await.expect("inspect");
    let remaining = info.holders[0].lease_remaining;
    assert!(
        remaining <= secs(3),
        "the server's lease ({remaining:?}) is longer than any lease asked"
    );
    // The process stops: nothing more reaches the server.
    fa.freeze().await;
    let trusted = guard.valid_until();
    let rival = contender.mutex(name);
    let freed = loop {
        if let Some(g) = rival.try_lock().await.granted("contender") {
            let at = Instant::now();
            let _ = g.release().await;
            break at;
        }
        assert!(
            Instant::now() < sent + secs(3) + ms(700),
            "the stopped holder blocked others past its longest lease (3 s) from its extend"
        );
        tokio::time::sleep(ms(20)).await;
    };
    assert!(
        freed >= trusted,
        "another client was granted {:?} before the stopped guard's trust ended",
        trusted.saturating_duration_since(freed)
    );
    eprintln!(
        "blocked {:?} after the extend to 300 ms (server lease then {remaining:?})",
        freed.duration_since(sent)
    );
    drop(guard);
}

/// Without a resume in between, a hand-off's claim still cuts
/// the hand-off's window to the claimer's lease: waiter A (lease 300 ms, heartbeat 8 s) is
/// handed the Mutex, its claim is confirmed, and its process stops. Others must get the
/// lock within A's lease of the claim, not at the end of A's 8 s heartbeat window.
async fn a_dead_claimer_blocks_at_most_its_lease(b: Backend) {
    let name = "dead-claimer";
    let holder = b.client().await;
    let (fa, a) = faulty_client(&b).await;
    let observer = b.client().await;
    let contender = b.client().await;
    let x = holder.mutex(name).lock().await.expect("X locks");
    let a_handle = a.mutex(name).lease(ms(300)).heartbeat(secs(8));
    let waiting = tokio::spawn(async move { a_handle.lock().await });
    let probe = observer.mutex(name);
    until_waiters(1, || probe.inspect()).await;
    assert!(x.release().await.expect("X releases"));
    let a_guard = a_granted(waiting).await;
    // The claim is A's first renewal: wait until it was answered.
    let give_up = Instant::now() + secs(10);
    while fa.count(Op::Extend) == 0 {
        assert!(Instant::now() < give_up, "A never claimed");
        tokio::time::sleep(ms(5)).await;
    }
    fa.freeze().await;
    let frozen = Instant::now();
    let info = probe.inspect().await.expect("inspect");
    let remaining = info.holders.first().map(|h| h.lease_remaining);
    assert!(
        // +2 ms: deadlines are rounded up to an even millisecond.
        remaining.is_none_or(|r| r <= ms(302)),
        "after A's claim the server's hold has {remaining:?} left, past A's 300 ms lease: {info:?}"
    );
    let rival = contender.mutex(name);
    loop {
        if let Some(g) = rival.try_lock().await.granted("contender") {
            let _ = g.release().await;
            break;
        }
        assert!(
            frozen.elapsed() < ms(300) + ms(700),
            "the dead claimer blocked others past its lease"
        );
        tokio::time::sleep(ms(20)).await;
    }
    drop(a_guard);
}

/// Cancellation at every await of a third client's `extend_hold`
/// by id with a shorter lease: the request is held on the network, the caller stops waiting
/// (`timeout`), B resumes the detached hold with a 9 s lease, and then the cancelled request
/// lands. No request shortens a hold, so B's trust stays within the server's lease and no
/// one else is granted beside B.
async fn a_cancelled_shorter_extend_hold_of_a_third_client_cannot_cut_a_resume(b: Backend) {
    let name = "cancelled-extend-hold-third-client";
    let a = b.client().await;
    let (fc, c) = faulty_client(&b).await;
    let resumer = b.client().await;
    let w = Watchers::on(&b).await;
    let gate = fc.hold_extend(ms(300));
    let id = a.lock_for(name, secs(10)).await.detach();
    let cancelled = tokio::time::timeout(ms(200), c.extend_hold(&id, ms(300))).await;
    assert!(
        cancelled.is_err(),
        "the held extend_hold answered: {cancelled:?}"
    );
    let b_lock = resumer.mutex(name).lease(secs(9));
    let b_guard = b_lock.resume(&id).await.expect("B resumes");
    gate.open();
    tokio::time::sleep(ms(100)).await;
    let what = "B's resumed guard after C's cancelled extend_hold";
    w.mutex(what, &b_guard, name, secs(1)).await;
}

/// Two guards of one *read* hold in different clients: A asks
/// `extend(300 ms)` and its process stops; B resumed the read id with a 9 s lease before. A
/// writer must not be granted while B's read guard says `is_held()`, and B's trust stays
/// within the server's lease.
async fn a_shorter_extend_by_one_read_guard_cannot_let_a_writer_beside_the_other(b: Backend) {
    let name = "two-read-guards-shorter-extend";
    let (fa, a) = faulty_client(&b).await;
    let resumer = b.client().await;
    let observer = b.client().await;
    let contender = b.client().await;
    let mut a_guard = a.rwlock(name).lease(secs(2)).read().await.expect("A reads");
    let id = a_guard.hold_id();
    let b_lock = resumer.rwlock(name).lease(secs(9));
    let b_guard = b_lock
        .resume_read(&id)
        .await
        .expect("B resumes the read hold");
    assert!(a_guard.extend(ms(300)).await.expect("extend"));
    fa.freeze().await;
    let (probe, rival) = (observer.rwlock(name), contender.rwlock(name));
    let what = "B's read guard after A's shorter extend and stop";
    watch_writers(what, &b_guard, &probe, &rival, secs(3)).await;
    drop(a_guard);
}

/// In quorum mode (three redis-servers), the late duplicate acquire of [`a_late_duplicate_acquire_cannot_cut_a_resumed_mutex`] on a majority:
/// A's first quorum attempt is held on the network to servers 0 and 1 (granted on 2), its
/// connections there break, the attempt fails without a majority (released where unsure)
/// and is retried by the same token, granted on all three. A detaches, B resumes with a 9 s
/// lease (renewed on all three), then A's first attempt reaches servers 0 and 1, where
/// "already ours" keeps B's lease: no contender takes the Mutex by quorum while B's guard
/// says `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_duplicate_acquire_cannot_cut_a_resumed_quorum_mutex() {
    let name = "late-duplicate-acquire-quorum";
    let (_servers, [p0, p1], direct, via) = two_of_three_late().await;
    let a = quorum_client(&via, Some(ms(300))).await;
    let resumer = quorum_client(&direct, None).await;
    let observer = quorum_client(&direct, None).await;
    let contender = quorum_client(&direct, None).await;
    warm_up(&a, "warm-up").await;
    p0.hold_existing();
    p1.hold_existing();
    let a_handle = a.mutex(name).lease(ms(500));
    let locking = tokio::spawn(async move { a_handle.lock().await });
    let give_up = Instant::now() + secs(10);
    while p0.queued() == 0 || p1.queued() == 0 {
        assert!(
            Instant::now() < give_up,
            "A's attempt never reached the proxies"
        );
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(ms(50)).await;
    p0.cut_clients();
    p1.cut_clients();
    let a_guard = a_granted(locking).await;
    let id = a_guard.detach();
    let b_lock = resumer.mutex(name).lease(secs(9));
    let b_guard = b_lock.resume(&id).await.expect("B resumes");
    assert!(b_guard.is_held());
    p0.deliver();
    p1.deliver();
    let give_up = Instant::now() + secs(10);
    while p0.queued() > 0 || p1.queued() > 0 {
        assert!(
            Instant::now() < give_up,
            "the held attempts were never delivered"
        );
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(ms(50)).await;
    let what = "B's resumed quorum guard after A's late first attempt";
    watch_mutex(what, &b_guard, &observer, &contender, name, secs(2)).await;
}

/// The late duplicate acquire of
/// [`a_late_duplicate_acquire_cannot_cut_a_resumed_mutex`] for a *read* hold: a reader's acquire by
/// a token that already reads keeps the later deadline, so A's first attempt, landing after B
/// resumed the read id with a 9 s lease, cannot cut it to A's 500 ms and let a writer in
/// beside B's read guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_duplicate_read_acquire_cannot_let_a_writer_beside_a_resumed_reader() {
    let name = "late-duplicate-read-acquire";
    let b = Backend::redis();
    let (proxy, a) = proxied_client(&b).await;
    let resumer = b.client().await;
    let observer = b.client().await;
    let contender = b.client().await;
    a.rwlock("warm-up")
        .read()
        .await
        .expect("warm-up")
        .release()
        .await
        .expect("release");
    proxy.hold_existing();
    let a_handle = a.rwlock(name).lease(ms(500));
    let locking = tokio::spawn(async move { a_handle.read().await });
    cut_behind_the_first_attempt(&proxy).await;
    let a_guard = a_granted(locking).await;
    let id = a_guard.detach();
    let b_lock = resumer.rwlock(name).lease(secs(9));
    let b_guard = b_lock.resume_read(&id).await.expect("B resumes");
    assert!(b_guard.is_held());
    deliver_the_held(&proxy).await;
    let (probe, rival) = (observer.rwlock(name), contender.rwlock(name));
    let what = "B's resumed read guard after A's late first attempt";
    watch_writers(what, &b_guard, &probe, &rival, secs(2)).await;
}

/// A guard (lease 10 s) asks `extend(200 ms)`; the server applies it and the reply is lost.
/// The guard then asks `extend(10 s)`, confirmed. The lost request cannot shorten the hold
/// when it lands (no request does), so the confirmation trusts its own 10 s: the guard
/// renews every ~3.3 s ("the renewal schedule follows the current lease"), not every
/// ~100 ms, and a 300 ms slow reply to one renewal does not lose the hold.
async fn a_lost_shorter_extend_does_not_cap_later_trust(b: Backend) {
    let name = "lost-shorter-extend-caps-trust";
    let (fa, a) = faulty_client(&b).await;
    let observer = b.client().await;
    fa.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(ms(200)))
            .times(1)
            .lose_reply(),
    );
    let mut guard = a.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let lost = guard.extend(ms(200)).await;
    assert!(lost.is_err(), "the lost reply answered: {lost:?}");
    let sent = Instant::now();
    assert!(
        guard.extend(secs(10)).await.expect("extend"),
        "extend(10 s)"
    );
    let trust = guard.valid_until().saturating_duration_since(sent);
    let before = fa.count(Op::Extend);
    tokio::time::sleep(secs(2)).await;
    let renewals = fa.count(Op::Extend) - before;
    let info = observer.mutex(name).inspect().await.expect("inspect");
    // One slow reply (300 ms) to the next renewal.
    fa.add(Rule::on(Op::Extend).times(1).delay_reply(ms(300)));
    tokio::time::sleep(ms(600)).await;
    let held = guard.is_held();
    assert!(
        trust >= secs(9) && renewals <= 2 && held,
        "after a lost extend(200 ms) reply, a confirmed extend(10 s) is trusted for {trust:?}; \
         {renewals} renewals in 2 s with a 10 s lease; after one 300 ms slow renewal reply \
         is_held() = {held} (server: {info:?})"
    );
}

/// Cancellation at many points of a shorter `extend`: A's lease
/// requests are 30 ms slow on the network; `extend(300 ms)` is dropped after 0..40 ms
/// (before it leaves, on its way, after it was applied), A detaches, B resumes with a 9 s
/// lease. Whenever the cancelled request lands, B's trust stays within the server's lease and
/// nobody else is granted beside B.
async fn cancelled_shorter_extends_at_every_point_cannot_cut_a_resume(b: Backend) {
    let (fa, a) = faulty_client(&b).await;
    let resumer = b.client().await;
    let w = Watchers::on(&b).await;
    fa.add(Rule::on(Op::Extend).delay_request(ms(30)));
    for (i, after) in [0u64, 1, 5, 15, 29, 31, 40].into_iter().enumerate() {
        let name = format!("cancelled-extend-sweep-{i}");
        let mut guard = a.mutex(&name).lease(secs(10)).lock().await.expect("lock");
        let _ = tokio::time::timeout(ms(after), guard.extend(ms(300))).await;
        let id = guard.detach();
        let b_lock = resumer.mutex(&name).lease(secs(9));
        let b_guard = b_lock.resume(&id).await.expect("B resumes");
        tokio::time::sleep(ms(100)).await;
        let what = format!("B's guard, A's extend dropped after {after} ms");
        w.mutex(&what, &b_guard, &name, ms(700)).await;
        b_guard.release().await.expect("release");
    }
}

/// Two guards of one hold: A (9 s lease, no automatic renewal)
/// keeps its guard and gives its id to B, which resumes with a 300 ms lease and stops. The
/// resume's renewal keeps the later deadline, so nobody else is granted while A's guard says
/// `is_held()`.
async fn a_shorter_resume_by_a_second_guard_cannot_cut_the_first(b: Backend) {
    let name = "shorter-resume-second-guard";
    let a = b.client().await;
    let (fb, resumer) = faulty_client(&b).await;
    let w = Watchers::on(&b).await;
    let a_guard = a.lock_unrenewed(name, secs(9)).await;
    let b_lock = resumer.mutex(name).lease(ms(300));
    let b_guard = b_lock.resume(&a_guard.hold_id()).await.expect("B resumes");
    fb.freeze().await;
    let what = "A's guard after B's shorter resume";
    w.mutex(what, &a_guard, name, secs(2)).await;
    drop(b_guard);
}

/// A hand-off's claim whose outcome stays unknown, then an `extend`: waiter A (lease 300 ms,
/// heartbeat 8 s) is handed the Mutex; its claim (which would replace the 8 s window with
/// A's 300 ms lease) is held on the network and A's connection breaks, so the claim's
/// outcome is unknown; A's `extend(300 ms)`, queued meanwhile, goes next and is the claim
/// too (every lease request is, until one is confirmed): it replaces the 8 s window with
/// A's lease. A's process then stops (and the held claim lands, finding nothing to replace).
/// A dead holder whose every lease was 300 ms must not block others for the waiter's 8 s
/// heartbeat window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_extend_after_an_unknown_claim_cannot_keep_the_hand_off_window_for_a_dead_holder() {
    let b = Backend::redis();
    let (proxy, fa, a) = proxied_faulty_client(&b).await;
    let holder = b.client().await;
    let observer = b.client().await;
    let contender = b.client().await;
    warm_up(&a, "claim-then-extend-warm-up").await;
    let mut tried = Vec::new();
    for round in 0..3 {
        let name = format!("claim-then-extend-{round}");
        // A's claim (a renewal naming the hand-off's deadline, not "keep") holds its
        // connection.
        proxy.hold_claim(13, &name);
        let x = holder.mutex(&name).lock().await.expect("X locks");
        let a_handle = a.mutex(&name).lease(ms(300)).heartbeat(secs(8));
        let waiting = tokio::spawn(async move { a_handle.lock().await });
        let probe = observer.mutex(&name);
        until_waiters(1, || probe.inspect()).await;
        assert!(x.release().await.expect("X releases"));
        let mut a_guard = a_granted(waiting).await;
        if !proxy.held_within(secs(2)).await {
            // Granted by its own attempt: no claim to hold. Another name.
            tried.push(name);
            a_guard.release().await.expect("release");
            continue;
        }
        eprintln!("held claim: {:?}", proxy.held_log());
        let (extended, ()) = tokio::join!(a_guard.extend(ms(300)), async {
            tokio::time::sleep(ms(20)).await;
            proxy.cut_clients();
        });
        assert!(
            extended.expect("extend"),
            "extend(300 ms) after the unknown claim"
        );
        fa.freeze().await;
        let frozen = Instant::now();
        proxy.deliver_all().await;
        let info = probe.inspect().await.expect("inspect");
        let rival = contender.mutex(&name);
        loop {
            if let Some(g) = rival.try_lock().await.granted("contender") {
                let _ = g.release().await;
                break;
            }
            assert!(
                frozen.elapsed() < ms(300) + ms(700),
                "the dead holder (every lease 300 ms) blocked others for {:?} and more: the \
                 extend after its unknown claim kept the hand-off's 8 s window (server after \
                 the late claim: {info:?})",
                frozen.elapsed()
            );
            tokio::time::sleep(ms(20)).await;
        }
        eprintln!("freed {:?} after the stop", frozen.elapsed());
        drop(a_guard);
        return;
    }
    panic!("every waiter was granted by its own attempt: {tried:?}");
}

/// Waiter A (RwLock of `policy`, lease 500 ms, heartbeat 20 s) is handed the write hold of
/// `{prefix}-{round}` by X's release, its claim (a request of `arity` words, see
/// `hold_claim`) held on the network: A's guard, the name and a probe of it. Up to three
/// rounds: a waiter granted by its own attempt has no claim to hold.
async fn handed_with_its_claim_held(
    b: &Backend,
    proxy: &late_proxy::LateProxy,
    a: &LockClient,
    (prefix, arity, policy): (&str, usize, Preference),
) -> (WriteGuard, String, redis_locks::RwLock) {
    let (holder, observer) = (b.client().await, b.client().await);
    let warm_up = a.rwlock(&format!("{prefix}-warm-up")).preference(policy);
    warm_up
        .write()
        .await
        .expect("warm-up")
        .release()
        .await
        .expect("release");
    for round in 0..3 {
        let name = format!("{prefix}-{round}");
        proxy.hold_claim(arity, &name);
        let x = holder.rwlock(&name).preference(policy).write().await;
        let x = x.expect("X writes");
        let a_handle = a.rwlock(&name).preference(policy);
        let a_handle = a_handle.lease(ms(500)).heartbeat(secs(20));
        let waiting = tokio::spawn(async move { a_handle.write().await });
        let probe = observer.rwlock(&name).preference(policy);
        until_waiters(1, || probe.inspect()).await;
        assert!(x.release().await.expect("X releases"));
        let a_guard = a_granted(waiting).await;
        if proxy.held_within(secs(2)).await {
            return (a_guard, name, probe);
        }
        a_guard.release().await.expect("release");
    }
    panic!("every waiter was granted by its own attempt");
}

/// A downgrade writes now + lease with no rounding (of either parity), the one write besides
/// a grant that can leave an odd deadline: waiter A (fair RwLock, lease 500 ms, heartbeat
/// 20 s) is handed the write hold; its claim is held on the network and its connection
/// breaks (outcome unknown); A downgrades next (the read hold gets now + 500 ms, the pending
/// claim is kept for the read hold's renewals), detaches the read hold, and B resumes it
/// with a 9 s lease. Then A's claim of the write hold lands. Neither it nor A's later
/// renewals (none: A detached) may cut B's read hold: no writer is granted while B's read
/// guard says `is_held()`, and B trusts within the server's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_claim_after_a_fair_downgrade_cannot_cut_a_resumed_read_hold() {
    let b = Backend::redis();
    let (proxy, _fa, a) = proxied_faulty_client(&b).await;
    let (resumer, contender) = (b.client().await, b.client().await);
    let case = ("fair-downgrade-late-claim", 17, Preference::Fair);
    let (a_guard, name, probe) = handed_with_its_claim_held(&b, &proxy, &a, case).await;
    let (read, ()) = tokio::join!(WriteGuard::downgrade(a_guard), async {
        tokio::time::sleep(ms(20)).await;
        proxy.cut_clients();
    });
    let read = read.expect("A downgrades");
    let before = probe.inspect().await.expect("inspect");
    let id = read.detach();
    let b_lock = resumer.rwlock(&name).preference(Preference::Fair);
    let b_guard = b_lock.lease(secs(9)).resume_read(&id).await;
    let b_guard = b_guard.expect("B resumes the read hold");
    proxy.deliver_all().await;
    tokio::time::sleep(ms(50)).await;
    eprintln!("after the downgrade: {before:?}");
    let rival = contender.rwlock(&name).preference(Preference::Fair);
    let what = "B's resumed fair read guard after A's late claim";
    watch_writers(what, &b_guard, &probe, &rival, secs(2)).await;
}

/// Another party's downgrade leaves an odd deadline behind a late claim: waiter A (RwLock,
/// writer preference, lease 500 ms, heartbeat 20 s) is handed the write hold; its claim is
/// held on the network and its connection breaks; A detaches, B resumes the write hold with
/// a 9 s lease (which keeps the window, even) and downgrades it (the read hold gets now +
/// 9 s, of either parity). Then A's claim lands. It names the write hold, which is gone: B's
/// read hold stands, and no writer is granted beside B's read guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_claim_after_anothers_downgrade_cannot_let_a_writer_beside_the_reader() {
    let b = Backend::redis();
    let (proxy, _fa, a) = proxied_faulty_client(&b).await;
    let (resumer, contender) = (b.client().await, b.client().await);
    let case = ("others-downgrade-late-claim", 13, Preference::Writer);
    let (a_guard, name, probe) = handed_with_its_claim_held(&b, &proxy, &a, case).await;
    let id = a_guard.detach();
    proxy.cut_clients();
    let b_lock = resumer.rwlock(&name).lease(secs(9));
    let b_write = b_lock
        .resume_write(&id)
        .await
        .expect("B resumes the write hold");
    let b_guard = WriteGuard::downgrade(b_write).await.expect("B downgrades");
    proxy.deliver_all().await;
    tokio::time::sleep(ms(50)).await;
    let rival = contender.rwlock(&name);
    let what = "B's read guard (downgraded) after A's late claim";
    watch_writers(what, &b_guard, &probe, &rival, secs(2)).await;
}

/// Once the proxy holds a request (the first attempt), cuts the client side of every
/// connection: the client reconnects and retries, the held request reaches the server later.
async fn cut_behind_the_first_attempt(proxy: &late_proxy::LateProxy) {
    let give_up = Instant::now() + secs(10);
    while proxy.queued() == 0 {
        assert!(
            Instant::now() < give_up,
            "A's attempt never reached the proxy"
        );
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(ms(50)).await;
    proxy.cut_clients();
}

/// Lets the proxy's held requests through and waits until they left (plus 50 ms for the
/// server to run them).
async fn deliver_the_held(proxy: &late_proxy::LateProxy) {
    proxy.deliver_all().await;
    tokio::time::sleep(ms(50)).await;
}

/// Quorum mode (three redis-servers): a quorum acquire that gets no majority releases its
/// claim by token on every server where it is unsure, then the wait attempts again. Here A's
/// first attempt is held on the network to servers 0 and 1 (granted on 2): it times out
/// there, so the client releases the token on all three; those releases to 0 and 1 are held
/// behind the attempt. A's connections there then break, and the retry is granted on all
/// three servers: A has a guard (lease 9 s). The held attempt and the held *release* then
/// reach servers 0 and 1. The retry must not be a claim those late requests name (a retry
/// by the same token would be ended by the late release on a majority, and a contender
/// granted beside A's guard): no contender is granted while A's guard says `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_release_of_a_failed_quorum_attempt_cannot_end_its_retry() {
    let name = "late-release-of-quorum-attempt";
    let (_servers, [p0, p1], direct, via) = two_of_three_late().await;
    let a = quorum_client(&via, Some(ms(300))).await;
    let observer = quorum_client(&direct, None).await;
    let contender = quorum_client(&direct, None).await;
    warm_up(&a, "warm-up").await;
    p0.hold_existing();
    p1.hold_existing();
    // A reconnect after the attempt's timeout is held too, until the cut.
    p0.hold_new(true);
    p1.hold_new(true);
    let a_handle = a.mutex(name).lease(secs(9));
    let locking = tokio::spawn(async move { a_handle.lock().await });
    // Two requests held on each proxy: the attempt, then the release of its token.
    let both = || {
        [&p0, &p1].iter().all(|p| {
            let log = p.held_log();
            log.len() >= 2
        })
    };
    until(
        "the attempt and its release never both reached the proxies",
        secs(10),
        both,
    )
    .await;
    eprintln!("p0 held: {:?}", p0.held_log());
    eprintln!("p1 held: {:?}", p1.held_log());
    p0.hold_new(false);
    p1.hold_new(false);
    p0.cut_clients();
    p1.cut_clients();
    let a_guard = a_granted(locking).await;
    assert!(a_guard.is_held());
    p0.deliver();
    p1.deliver();
    until("the held requests were never delivered", secs(10), || {
        p0.queued() == 0 && p1.queued() == 0
    })
    .await;
    tokio::time::sleep(ms(50)).await;
    watch_mutex(
        "A's quorum guard after its failed attempt's late release",
        &a_guard,
        &observer,
        &contender,
        name,
        secs(2),
    )
    .await;
}

/// A multi-lock's wait gives back what an attempt of unknown outcome may have granted
/// (`Group::refused` withdraws: a release of its token on every part), then attempts again.
/// Here: C holds X; A's first multi-lock attempt on [X, Y] is refused but its reply is lost
/// (unknown), its next attempt is refused, and the withdraw's releases are held on a slow
/// network: A's connection breaks, the releases are retried on a new one, C releases X and A
/// is granted [X, Y] (lease 9 s). Then the held releases reach the server: they must not end
/// A's holds (a retry by the withdrawn token would be ended by them, and a contender would
/// take Y beside A's MultiGuard): no contender is granted while the MultiGuard says
/// `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_withdraw_of_a_multi_lock_cannot_end_its_later_grant() {
    use redis_locks::testing::store::RedisStore;
    use support::faulty::Faulty;
    let (x, y) = ("late-withdraw-multi:x", "late-withdraw-multi:y");
    let b = Backend::redis();
    let port = b.server.as_ref().expect("server").port();
    let proxy = late_proxy::LateProxy::start(port).await;
    let store = RedisStore::connect_with(
        &proxy.url(),
        redis_locks::RedisConfig {
            response_timeout: ms(300),
            connect_timeout: ms(500),
            ..redis_locks::RedisConfig::default()
        },
    )
    .await
    .expect("A's store through the proxy");
    let fa = Faulty::new(std::sync::Arc::new(store));
    let a = LockClient::builder().store(fa.clone()).expect("A");
    let c = b.client().await;
    let observer = b.client().await;
    let contender = b.client().await;
    // Warm-up: the scripts are on the server.
    warm_up_multi(&a, "late-withdraw-multi").await;
    let c_guard = c.mutex(x).lease(secs(30)).lock().await.expect("C locks X");
    // The first attempt's reply is lost (the server refused it: C holds X).
    fa.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
    // The first release of the test's names (the withdraw: an `rw_release`, whose plain form
    // has six keys and two arguments) holds A's connection.
    proxy.hold_when(|chunk| {
        chunk.starts_with("*11\r\n$7\r\nEVALSHA") && chunk.contains("late-withdraw-multi:")
    });
    let m = a.multi_lock([x, y]).lease(secs(9));
    let locking = tokio::spawn(async move { m.lock().await });
    until(
        "the withdraw's release never reached the proxy",
        secs(10),
        || !proxy.held_log().is_empty(),
    )
    .await;
    proxy.hold_when_off();
    proxy.cut_clients();
    eprintln!("held: {:?}", proxy.held_log());
    tokio::time::sleep(ms(300)).await;
    assert!(c_guard.release().await.expect("C releases X"));
    let a_guard = a_granted(locking).await;
    assert!(a_guard.is_held());
    proxy.deliver();
    until("the held releases were never delivered", secs(10), || {
        proxy.queued() == 0
    })
    .await;
    tokio::time::sleep(ms(50)).await;
    let (probe, rival) = (observer.mutex(y), contender.mutex(y));
    let rival_x = contender.mutex(x);
    watch(
        "A's multi-lock guard (part Y) after its withdraw's late release",
        || a_guard.is_held(),
        || a_guard.valid_until(),
        async || probe.inspect().await.expect("inspect"),
        async || match took(rival.try_lock().await).await {
            Some(f) => Some(f),
            None => took(rival_x.try_lock().await).await,
        },
        secs(2),
    )
    .await;
}

both_backends!(
    a_late_claim_cannot_cut_a_resume_that_kept_the_hand_off_window,
    a_late_claim_of_a_second_guard_cannot_cut_a_fair_lock_resume,
    a_shorter_extend_then_a_crash_blocks_at_most_the_longer_lease,
    a_dead_claimer_blocks_at_most_its_lease,
    a_cancelled_shorter_extend_hold_of_a_third_client_cannot_cut_a_resume,
    a_shorter_extend_by_one_read_guard_cannot_let_a_writer_beside_the_other,
    a_lost_shorter_extend_does_not_cap_later_trust,
    cancelled_shorter_extends_at_every_point_cannot_cut_a_resume,
    a_shorter_resume_by_a_second_guard_cannot_cut_the_first,
);
