//! A client's registry of holds under every path that takes it: a `release_all` whose
//! releases failed (Mutex, election, multi-lock), a cancelled `release_all`, guards dropped
//! outside a runtime with a release or step by id in flight, an `extend_hold` of a detached id
//! beside a renewal parked on an idle runtime, and all of them at once on a multi-thread
//! runtime. Public API; each test names the claim it checks.

mod support;
use redis_locks::LockClient;
use std::sync::Arc;
use support::backend::{within_ok, Backend};
use support::faulty::{at_gate, faulty_client, parked_renewal, Gate, Op, Rule};
use support::honest::{assert_honest, server_deadline, trusts_past};
use support::proxy::{slow_client, Proxy};
use support::quick::{downgraded, in_time, Quick};
use support::time::{ms, secs};
use support::waits::holders;
use tokio::time::{sleep, timeout, Instant};

/// Lets `slow.release_all()` fail: requests stalled, then the connection cut (the release
/// never reached the server), then traffic flows again.
async fn fail_release_all(proxy: &Proxy, slow: &LockClient) {
    proxy.stall();
    let all = in_time(ms(15_000), "release_all returns", slow.release_all()).await;
    proxy.cut();
    proxy.resume();
    assert!(
        all.is_err(),
        "release_all through a stalled proxy said {all:?}"
    );
}

/// `resume()` retried for up to 8 s while the client reconnects: the guard, or `None` when
/// refused `HoldInUse` (the claim held); any other error panics.
async fn resume_while_reconnecting<G>(
    mut resume: impl AsyncFnMut() -> redis_locks::Result<G>,
) -> Option<G> {
    let started = Instant::now();
    loop {
        match resume().await {
            Err(err) if !err.is_hold_in_use() && started.elapsed() < ms(8_000) => {
                tokio::time::sleep(ms(100)).await;
            }
            Err(err) if err.is_hold_in_use() => return None,
            Err(err) => panic!("resume failed: {err}"),
            Ok(r) => return Some(r),
        }
    }
}

/// Claim: never two guards of one hold in one client. `release_all()` fails (requests stalled,
/// then the connection cut: the release never reached the server) while the hold's guard `g`
/// lives (lost): a resume of `g`'s id in the same client is refused (`HoldInUse`), or, if it
/// gets a guard, `g`'s drop afterwards (a background release by token) must not end the hold
/// under it. Redis only (the in-memory store cannot fail a release without applying it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_release_all_keeps_the_live_guards_entry() {
    let b = Backend::redis();
    let (proxy, slow) = slow_client(&b).await;
    let other = b.client().await;
    let name = "reg-failed-release-all";
    let g = slow.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let id = g.hold_id();
    fail_release_all(&proxy, &slow).await;
    let info = other.mutex(name).inspect().await.expect("inspect");
    assert_eq!(
        info.holders.len(),
        1,
        "the failed release never reached the server"
    );
    assert!(!g.is_held(), "release_all marks the guard lost");
    // Resume the id in the same client while `g` lives (retrying while the client reconnects).
    let Some(r) =
        resume_while_reconnecting(async || slow.mutex(name).lease(secs(10)).resume(&id).await)
            .await
    else {
        return; // the claim held
    };
    // Two guards of one hold in this client now; the old one's drop releases by token.
    drop(g);
    tokio::time::sleep(ms(500)).await;
    let before = r.valid_until();
    let info = other.mutex(name).inspect().await.expect("inspect");
    if let Some(over) = trusts_past(before, &info, Instant::now()).filter(|_| r.is_held()) {
        panic!(
            "[redis] after a failed release_all the hold was unregistered while its guard \
             lived: a resume in the same client gave a second guard, and the first guard's drop \
             released the hold under it; the resumed guard is_held() and trusts {over:?} past \
             the server's lease ({} holder(s))",
            info.holders.len()
        );
    }
    drop(r.detach());
}

/// Claim: no deadlock: every path that takes the registry's std Mutex (grants, guards'
/// release and drop, detach, release_all, release_hold / extend_hold by id, resumes, a
/// try-lock's `holds_name`) runs beside the others on a multi-thread runtime and all end. A
/// hang fails by the timeout.
async fn the_registry_paths_hammered_together_never_hang(b: Backend) {
    let c = b.client().await;
    let deadline = ms(60_000);
    let work = async {
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..4u32 {
            let c = c.clone();
            tasks.spawn(async move {
                for i in 0..25u32 {
                    let name = format!("reg-hammer-{}", (w + i) % 3);
                    let Ok(g) = c.mutex(&name).lease(ms(900)).try_lock().await else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let id = g.hold_id();
                    let c2 = c.clone();
                    let id2 = id.clone();
                    let side = tokio::spawn(async move {
                        match i % 4 {
                            0 => drop(c2.extend_hold(&id2, ms(900)).await),
                            1 => drop(c2.release_hold(&id2).await),
                            2 => drop(c2.release_all().await),
                            _ => drop(c2.mutex("reg-hammer-0").try_lock().await),
                        }
                    });
                    match i % 3 {
                        0 => {
                            let id = g.detach();
                            if let Ok(r) = c.mutex(&name).lease(ms(900)).resume(&id).await {
                                drop(r);
                            }
                        }
                        1 => drop(g.release().await),
                        _ => drop(g),
                    }
                    let _ = side.await;
                }
            });
        }
        while let Some(t) = tasks.join_next().await {
            t.expect("task");
        }
        c.release_all().await.ok();
    };
    timeout(deadline, work).await.unwrap_or_else(|_| {
        panic!(
            "[{}] the registry paths hammered together hung for {deadline:?}",
            b.kind
        )
    });
}
/// Claim: the same for elections: a leadership whose `release_all` failed stays alive (lost);
/// `Election::resume` of its id in the same client must not give a second leadership that the
/// first one's drop then deposes while it says it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_release_all_keeps_the_live_leaderships_entry() {
    let b = Backend::redis();
    let (proxy, slow) = slow_client(&b).await;
    let other = b.client().await;
    let name = "reg-failed-release-all-election";
    let l = slow.campaign_for(name, secs(10), "v1").await;
    let id = l.hold_id();
    fail_release_all(&proxy, &slow).await;
    assert!(
        other.leader_of(name).await.is_some(),
        "the failed release never reached the server"
    );
    let Some(r) =
        resume_while_reconnecting(async || slow.election(name).lease(secs(10)).resume(&id).await)
            .await
    else {
        return; // the claim held
    };
    drop(l);
    tokio::time::sleep(ms(500)).await;
    let leader = other.election(name).leader().await.expect("leader");
    if r.is_held() && leader.is_none() {
        panic!(
            "[redis] after a failed release_all the leadership was unregistered while it \
             lived: a resume in the same client gave a second leadership of term {}, and the \
             first one's drop deposed it; the resumed leadership is_held() (trusts {:?}) while \
             the server has no leader",
            r.term(),
            r.valid_until().saturating_duration_since(Instant::now())
        );
    }
    drop(r.detach());
}

/// Claim (`LockClient::release_all`, cancel safety): "the releases run as tasks of their own:
/// cancelling this call does not stop them"; a client's shutdown whose caller stops waiting
/// still releases every hold. Here `release_all()` has given the hold up (its guard says lost)
/// and its release is held before the server; the call is then cancelled (its future dropped,
/// as a shutdown timeout does) and the release let through: the server must end up not
/// holding the lock while the guard (kept, lost) lives.
async fn a_cancelled_release_all_still_releases(b: Backend) {
    let name = "reg-cancelled-release-all";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let g = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let gate = f.hold_requests(Rule::on(Op::Release).times(1));
    let cancelled = timeout(ms(300), c.release_all()).await;
    assert!(
        cancelled.is_err(),
        "release_all returned through a held release: {cancelled:?}"
    );
    assert!(!g.is_held(), "release_all gave the guard up");
    gate.open();
    tokio::time::sleep(ms(500)).await;
    let info = other.mutex(name).inspect().await.expect("inspect");
    let still = info.holders.len();
    let sent = f.count(Op::Release);
    drop(g);
    assert!(
        still == 0,
        "[{}] release_all cancelled while its release waited before the server: the release \
         was stopped with it ({sent} release(s) reached the server) and the server still holds \
         the lock ({still} holder(s)) while its guard lives, lost",
        b.kind
    );
}
/// Claim: a step by id ends within its bound, and a resume after a detach never gets
/// `HoldInUse` once everything sent has ended. The hold is granted on current-thread runtime A;
/// its renewal falls due there and is held before the server; A goes idle (a sync wrapper's
/// runtime between calls). The guard is detached (the renewal, cancelled, still waiting for its
/// turn on A), the renewal's gate opened; an `extend_hold` of the id in the same client must
/// still return within the bound.
async fn an_extend_hold_of_a_detached_id_ends_within_its_bound(b: Backend) {
    let name = "reg-extend-detached-parked";
    let (f, c) = faulty_client(&b).await;
    let (idle, guard, gate) = parked_renewal(&c, &f, name).await;
    let id = guard.detach();
    gate.open();
    let started = Instant::now();
    let (c3, id3) = (c.clone(), id.clone());
    let extending = tokio::spawn(async move { c3.extend_hold(&id3, secs(5)).await });
    tokio::time::sleep(ms(200)).await;
    let resumed = timeout(ms(15_000), c.mutex(name).lease(secs(5)).resume(&id)).await;
    let resumed = match resumed {
        Ok(Ok(g)) => {
            drop(g.detach());
            "a guard".to_owned()
        }
        Ok(Err(err)) => format!("{err}"),
        Err(_) => "no answer in 15 s".to_owned(),
    };
    let extended = timeout(ms(15_000).saturating_sub(started.elapsed()), extending).await;
    let took = started.elapsed();
    support::time::drop_runtime(idle).await;
    if extended.is_err() {
        panic!(
            "[{}] extend_hold of a detached hold (same client) still waits after {took:?} \
             (step_bound is 8.14 s): it went through the detached entry's lease owner, whose \
             request turn a renewal aborted by the detach and parked on idle runtime A holds; \
             a resume of the id here meanwhile answered: {resumed}",
            b.kind
        );
    }
}
/// Claim: the same for multi-locks: a multi-guard whose `release_all` failed stays alive (lost);
/// `MultiLock::resume` of its ids in the same client must not give a second multi-guard whose
/// parts the first one's drop then releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_release_all_keeps_the_live_multi_guards_entries() {
    let b = Backend::redis();
    let (proxy, slow) = slow_client(&b).await;
    let other = b.client().await;
    let names = ["reg-fra-multi-a", "reg-fra-multi-b"];
    let g = slow
        .multi_lock(names)
        .lease(secs(10))
        .lock()
        .await
        .expect("lock");
    let ids = g.hold_ids();
    fail_release_all(&proxy, &slow).await;
    let Some(r) = resume_while_reconnecting(async || {
        slow.multi_lock(names).lease(secs(10)).resume(&ids).await
    })
    .await
    else {
        return; // the claim held
    };
    drop(g);
    tokio::time::sleep(ms(500)).await;
    let before = r.valid_until();
    let mut verdict = None;
    for name in names {
        let info = other.mutex(name).inspect().await.expect("inspect");
        if let Some(over) = trusts_past(before, &info, Instant::now()).filter(|_| r.is_held()) {
            verdict = Some(format!(
                "[redis] after a failed release_all the multi-guard's parts were unregistered \
                 while it lived: a multi-resume in the same client gave a second multi-guard, \
                 and the first one's drop released part {name} under it; the resumed guard \
                 is_held() and trusts {over:?} past the server's lease ({} holder(s))",
                info.holders.len()
            ));
        }
    }
    drop(r.detach());
    if let Some(msg) = verdict {
        panic!("{msg}");
    }
}

/// A step of a hold in flight (held before the server) in the guard's own client.
#[derive(Clone, Copy)]
enum InFlight {
    /// `release_all()`'s release of the hold.
    ReleaseAll,
    /// A `release_hold` of the guard's own id (through the guard's entry).
    ReleaseHold,
    /// An `extend_hold(id, 1 s)` (through the guard's lease owner).
    ExtendHold,
}

/// Claim: never a release sent for a hold after a resume in the same client without the resumed
/// guard marked lost or the resume waiting for it. `step` of the hold is in flight, held before
/// the server; the guard is then dropped on a thread without a tokio runtime (it cannot release
/// in the background); a resume (10 s) of the id in the same client must wait for that step
/// (and find the hold gone, or its lease as the step left it), never trust a hold the step
/// then ends or cuts (an `extend_hold` to 1 s must not leave it trusting 10 s).
async fn a_guard_dropped_outside_a_runtime_keeps_its_entry(b: Backend, step: InFlight) {
    let (name, what) = match step {
        InFlight::ReleaseAll => ("reg-drop-off-runtime", "release_all's release"),
        InFlight::ReleaseHold => ("reg-drop-off-runtime-by-id", "a release_hold of its id"),
        InFlight::ExtendHold => (
            "reg-drop-off-runtime-extend",
            "an extend_hold (1 s) of its id",
        ),
    };
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let g = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let id = g.hold_id();
    let gate = Gate::new();
    let rule = match step {
        InFlight::ExtendHold => Rule::on(Op::Extend).when(|call| call.lease == Some(secs(1))),
        _ => Rule::on(Op::Release),
    };
    f.add(rule.times(1).hold_request(gate.clone()));
    let (c2, id2) = (c.clone(), id.clone());
    let in_flight = tokio::spawn(async move {
        match step {
            InFlight::ReleaseAll => format!("{:?}", c2.release_all().await),
            InFlight::ReleaseHold => format!("{:?}", c2.release_hold(&id2).await),
            InFlight::ExtendHold => format!("{:?}", c2.extend_hold(&id2, secs(1)).await),
        }
    });
    timeout(ms(5_000), gate.wait_entered(1))
        .await
        .unwrap_or_else(|_| panic!("{what} at the gate"));
    std::thread::spawn(move || drop(g))
        .join()
        .expect("drop off runtime");
    let promise = "resume returns";
    let resumed = in_time(
        ms(15_000),
        promise,
        c.mutex(name).lease(secs(10)).resume(&id),
    )
    .await;
    gate.open();
    let said = timeout(ms(10_000), in_flight)
        .await
        .unwrap_or_else(|_| panic!("{what} returns"))
        .expect("join");
    let r = match resumed {
        Err(err) => {
            assert!(err.is_hold_in_use(), "{err}");
            return; // the claim held
        }
        Ok(r) => r,
    };
    let before = r.valid_until();
    let info = other.mutex(name).inspect().await.expect("inspect");
    let over = trusts_past(before, &info, Instant::now());
    let held = r.is_held();
    drop(r.detach());
    if let Some(over) = over.filter(|_| held) {
        panic!(
            "[{}] a guard dropped outside a runtime unregistered its hold while {what} was in \
             flight: a resume (10 s) in the same client went ahead, and that step (said \
             {said}) ended or cut the hold under the resumed guard, which is_held() and \
             trusts {over:?} past the server's lease ({} holder(s))",
            b.kind,
            info.holders.len()
        );
    }
}

async fn a_guard_dropped_outside_a_runtime_keeps_its_entry_for_a_release_all_in_flight(b: Backend) {
    a_guard_dropped_outside_a_runtime_keeps_its_entry(b, InFlight::ReleaseAll).await
}
async fn a_guard_dropped_outside_a_runtime_keeps_its_entry_for_a_release_hold_in_flight(
    b: Backend,
) {
    a_guard_dropped_outside_a_runtime_keeps_its_entry(b, InFlight::ReleaseHold).await
}
async fn a_guard_dropped_outside_a_runtime_keeps_its_entry_for_an_extend_hold_in_flight(
    b: Backend,
) {
    a_guard_dropped_outside_a_runtime_keeps_its_entry(b, InFlight::ExtendHold).await
}
both_backends!(
    a_guard_dropped_outside_a_runtime_keeps_its_entry_for_a_release_all_in_flight,
    a_guard_dropped_outside_a_runtime_keeps_its_entry_for_a_release_hold_in_flight,
    a_guard_dropped_outside_a_runtime_keeps_its_entry_for_an_extend_hold_in_flight
);

both_backends!(
    the_registry_paths_hammered_together_never_hang,
    a_cancelled_release_all_still_releases,
    an_extend_hold_of_a_detached_id_ends_within_its_bound,
);

// ------------------------------------------------------------------------------------------
// A client's registry at its edges, through the public API on both backends: failed and
// cancelled releases followed by a resume, `release_all` and drops of election and
// multi-lock guards, `release_all`'s count when several releases race, a downgrade then a
// detach, releases and `extend_hold` beside a renewal parked on an idle runtime (the wait for
// the hold's turn is bounded), and a hammer with random cancellations. Each test names the
// claim it checks.
// ------------------------------------------------------------------------------------------

/// Claim: never a resumed guard trusting past the server's lease. A guard's
/// `release()` fails (proxy stalled, then resumed without a cut: the release's bytes arrive
/// late); a resume of its id in the same client must not be trusted while the late release
/// ends the hold under it. The engine sends the release again (stalled too) and the hold is in
/// use until that is answered; `HoldInUse` does not stick past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_release_delivered_late_under_a_resume() {
    let b = Backend::redis();
    let (proxy, slow) = slow_client(&b).await;
    let other = b.client().await;
    let name = "edge-failed-release-late";
    let g = slow.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let id = g.hold_id();
    proxy.stall();
    let rel = in_time(ms(15_000), "release returns", g.release()).await;
    assert!(rel.is_err(), "release through a stalled proxy said {rel:?}");
    let started = Instant::now();
    // Resume while stalled (the resume's renewal is held too), then let everything through.
    let c2 = slow.clone();
    let id2 = id.clone();
    let resuming = tokio::spawn(async move {
        loop {
            match c2.mutex(name).lease(secs(10)).resume(&id2).await {
                Err(e) if !e.is_hold_gone() && started.elapsed() < ms(8_000) => sleep(ms(50)).await,
                other => break other,
            }
        }
    });
    sleep(ms(100)).await;
    proxy.resume();
    let r = within_ok(ms(20_000), "resume ends", resuming).await;
    eprintln!(
        "check 3: resume said {:?}",
        r.as_ref().map(|g| g.is_held()).map_err(|e| e.to_string())
    );
    let r = match r {
        Err(e) => {
            assert!(!e.is_hold_in_use(), "HoldInUse after a failed release: {e}");
            return;
        }
        Ok(r) => r,
    };
    sleep(ms(500)).await;
    let info = other.mutex(name).inspect().await.expect("inspect");
    let answered = Instant::now();
    let held = r.is_held();
    let until = r.valid_until();
    drop(r.detach());
    if held {
        let what = "[redis] resume after a failed release() whose bytes arrived late";
        assert_honest(what, until, &info, answered);
    }
}

/// Claim: never two guards of one hold in one client; `HoldInUse` does not stick.
/// A guard's `release()` is cancelled while its request is held before the server; the drop
/// re-sends it in the background (held too). While that is in flight, a resume is refused;
/// once it is answered, a resume is not `HoldInUse` and gets no guard (the hold is gone).
async fn a_cancelled_release_then_resume(b: Backend) {
    let name = "edge-cancelled-release";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let g = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let id = g.hold_id();
    let gate = f.hold_requests(Rule::on(Op::Release).times(2));
    let cancelled = timeout(ms(200), g.release()).await;
    assert!(cancelled.is_err(), "release returned through a gate");
    at_gate(&gate, 2, "the drop's background release at the gate").await;
    let promise = "resume answers";
    let during = in_time(
        ms(15_000),
        promise,
        c.mutex(name).lease(secs(10)).resume(&id),
    )
    .await;
    let during_s = match &during {
        Ok(r) => format!("a guard (is_held {})", r.is_held()),
        Err(e) => format!("{e}"),
    };
    gate.open();
    sleep(ms(500)).await;
    if let Ok(r) = during {
        let info = other.mutex(name).inspect().await.expect("inspect");
        let answered = Instant::now();
        let (held, until) = (r.is_held(), r.valid_until());
        drop(r.detach());
        if held {
            let what = format!("[{}] resume beside a drop's background release", b.kind);
            assert_honest(&what, until, &info, answered);
        }
    }
    assert_eq!(
        holders(&other, name).await,
        0,
        "[{}] the drop released",
        b.kind
    );
    let promise = "resume answers";
    let after = in_time(
        ms(15_000),
        promise,
        c.mutex(name).lease(secs(10)).resume(&id),
    )
    .await;
    match after {
        Err(e) => assert!(
            !e.is_hold_in_use(),
            "[{}] after the drop's release was answered a resume is still `{e}` (during: \
             {during_s})",
            b.kind
        ),
        Ok(r) => panic!(
            "[{}] resumed a released hold (is_held {})",
            b.kind,
            r.is_held()
        ),
    }
}
/// Claim: `release_all`'s count is never above the holds live at its call that
/// the server still held. Two `release_all`s, a `release_hold` of the id and the guard's own
/// `release()` race on one hold (all releases held at a gate, then let through together).
async fn release_all_counts_a_raced_hold_at_most_once(b: Backend) {
    let name = "edge-count-race";
    let (f, c) = faulty_client(&b).await;
    let g = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let id = g.hold_id();
    let gate = f.hold_requests(Rule::on(Op::Release).times(4));
    let (c1, c2, c3, id3) = (c.clone(), c.clone(), c.clone(), id.clone());
    let a1 = tokio::spawn(async move { c1.release_all().await });
    let by_id = tokio::spawn(async move { c3.release_hold(&id3).await });
    let own = tokio::spawn(async move { g.release().await });
    let a2 = tokio::spawn(async move { c2.release_all().await });
    sleep(ms(300)).await;
    gate.open();
    let n1 = timeout(ms(15_000), a1).await.expect("a1").expect("join");
    let n2 = timeout(ms(15_000), a2).await.expect("a2").expect("join");
    let r_id = within_ok(ms(15_000), "by id", by_id).await;
    let r_own = timeout(ms(15_000), own).await.expect("own").expect("join");
    let total = n1.as_ref().copied().unwrap_or(0) + n2.as_ref().copied().unwrap_or(0);
    assert!(
        total <= 1,
        "[{}] one hold counted {total} times: release_all {n1:?} and {n2:?}, release_hold \
         {r_id:?}, release() {r_own:?}",
        b.kind
    );
}
/// Claim: as the test above, for a hold whose lease lapsed on the server (its renewals held)
/// while its guard still lives (lost): `release_all` counts 0.
async fn release_all_does_not_count_a_lapsed_hold(b: Backend) {
    let name = "edge-count-lapsed";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let gate = f.hold_requests(Rule::on(Op::Extend));
    let g = c.mutex(name).lease(ms(600)).lock().await.expect("lock");
    sleep(ms(1_200)).await;
    assert_eq!(holders(&other, name).await, 0, "lapsed");
    let n = in_time(ms(15_000), "release_all returns", c.release_all()).await;
    gate.open();
    drop(g);
    assert!(
        matches!(n, Ok(0)),
        "[{}] release_all counted a hold the server no longer held: {n:?}",
        b.kind
    );
}
/// Claim: never two guards of one hold; never trusting past the server's lease.
/// A write hold downgraded then detached: a resume of the write id must not give a write
/// guard; a resume of the read id gives one honest read guard, and a second is refused.
async fn downgrade_then_detach_then_resume_both_ids(b: Backend) {
    let name = "edge-downgrade-detach";
    let c = b.client().await;
    let other = b.client().await;
    let rw = c.rwlock(name).lease(secs(10));
    let w = rw.write().await.expect("write");
    let write_id = w.hold_id();
    let read = downgraded(w).await;
    let in_use = rw.resume_write(&write_id).await;
    assert!(
        in_use.is_err(),
        "[{}] a write guard resumed beside its downgraded read guard",
        b.kind
    );
    let read_id = read.detach();
    let as_write = rw.resume_write(&write_id).await;
    assert!(
        as_write.is_err(),
        "[{}] a write guard resumed from the write id of a hold now read",
        b.kind
    );
    let r1 = rw.resume_read(&read_id).await.expect("resume read");
    let r2 = rw.resume_read(&read_id).await;
    assert!(
        r2.as_ref().is_err_and(|e| e.is_hold_in_use()),
        "[{}] a second read guard of one hold in one client: {:?}",
        b.kind,
        r2.as_ref().map(|g| g.is_held())
    );
    let info = other.rwlock(name).inspect().await.expect("inspect");
    let what = format!("[{}] resumed read guard", b.kind);
    assert_honest(&what, r1.valid_until(), &info, Instant::now());
    assert!(r1.release().await.expect("release"));
}
/// The end of a case whose `release_all` (`all`) and guard drop have their releases held at
/// `gate`: a resume (`resume`, the resumed guard's `is_held()`) meanwhile gives no `what`;
/// then the releases are let through, `release_all` counts `count`, and 300 ms later a
/// resume is not `HoldInUse` and gives no guard of the released hold.
async fn around_held_releases(
    b: &Backend,
    f: &support::faulty::Faulty,
    gate: &Gate,
    all: tokio::task::JoinHandle<redis_locks::Result<usize>>,
    count: usize,
    what: &str,
    resume: impl AsyncFn() -> redis_locks::Result<bool>,
) {
    let during = timeout(ms(15_000), resume()).await.expect("resume answers");
    if let Ok(held) = &during {
        panic!(
            "[{}] a {what} resumed while its releases were in flight (is_held {held})",
            b.kind
        );
    }
    f.clear();
    gate.open();
    let n = within_ok(ms(15_000), "release_all", all).await;
    assert!(
        matches!(n, Ok(c) if c == count),
        "[{}] release_all said {n:?}",
        b.kind
    );
    sleep(ms(300)).await;
    match timeout(ms(15_000), resume()).await.expect("resume answers") {
        Err(e) => assert!(
            !e.is_hold_in_use(),
            "[{}] after every release was answered a resume of the {what} is still `{e}` \
             (during: {:?})",
            b.kind,
            during.err()
        ),
        Ok(held) => panic!("[{}] resumed a released {what} (is_held {held})", b.kind),
    }
}

/// Claim: never two leaderships of one hold in one client; `HoldInUse` does not
/// stick. `release_all` gives the leadership up; then it is dropped while `release_all`'s
/// release and the drop's are held; a resume meanwhile is refused; once they are answered a
/// resume is not `HoldInUse`.
async fn election_release_all_then_drop_then_resume(b: Backend) {
    let name = "edge-election";
    let (f, c) = faulty_client(&b).await;
    let l = c.campaign_for(name, secs(10), "v1").await;
    let id = l.hold_id();
    let gate = f.hold_requests(Rule::on(Op::Release));
    let c2 = c.clone();
    let all = tokio::spawn(async move { c2.release_all().await });
    at_gate(&gate, 1, "at gate").await;
    drop(l);
    at_gate(&gate, 2, "drop at gate").await;
    let resume = async || {
        let l = c.election(name).lease(secs(10)).resume(&id).await;
        l.map(|l| l.is_held())
    };
    around_held_releases(&b, &f, &gate, all, 1, "leadership", resume).await;
}
/// Claim: no deadlock, no hang, and no `HoldInUse` left once everything ended.
/// Every registry path is run with random cancellations on a multi-thread runtime, on a store
/// that delays some requests; afterwards, every id ever made is resumed: none may be
/// `HoldInUse`, and no two guards of one hold are held at once.
async fn hammer_with_cancellations(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    f.add(Rule::on(Op::Release).when(|_| true).delay_request(ms(7)));
    f.add(Rule::on(Op::Extend).when(|_| true).delay_reply(ms(5)));
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let work = async {
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..4u64 {
            let c = c.clone();
            let ids = ids.clone();
            tasks.spawn(async move {
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (w + 1);
                let mut rnd = move |n: u64| support::rng::xorshift(&mut seed) % n;
                for i in 0..30u64 {
                    let name = format!("edge-hammer-{}", (w + i) % 3);
                    let Ok(Ok(g)) =
                        timeout(ms(200), c.mutex(&name).lease(ms(900)).try_lock()).await
                    else {
                        continue;
                    };
                    let id = g.hold_id();
                    ids.lock().unwrap().push((name.clone(), id.clone()));
                    let (c2, id2) = (c.clone(), id.clone());
                    let cut = ms(rnd(15));
                    let side = tokio::spawn(async move {
                        let _ = match rnd(4) {
                            0 => {
                                timeout(cut, async { drop(c2.extend_hold(&id2, ms(900)).await) })
                                    .await
                            }
                            1 => timeout(cut, async { drop(c2.release_hold(&id2).await) }).await,
                            2 => timeout(cut, async { drop(c2.release_all().await) }).await,
                            _ => {
                                timeout(cut, async {
                                    drop(c2.mutex(id2.name()).lease(ms(900)).resume(&id2).await)
                                })
                                .await
                            }
                        };
                    });
                    let cut = ms(rnd(15));
                    match rnd(5) {
                        0 => {
                            let id = g.detach();
                            if let Ok(Ok(r)) =
                                timeout(cut, c.mutex(&name).lease(ms(900)).resume(&id)).await
                            {
                                drop(r);
                            }
                        }
                        1 => drop(timeout(cut, g.release()).await),
                        2 => std::thread::spawn(move || drop(g)).join().unwrap(),
                        3 => {
                            let c3 = c.clone();
                            let id = id.clone();
                            let resumed = c3.mutex(&name).lease(ms(900)).resume(&id).await;
                            if let Ok(r) = &resumed {
                                assert!(
                                    !(r.is_held() && g.is_held()),
                                    "two held guards of one hold in one client"
                                );
                            }
                            drop(resumed);
                            drop(g);
                        }
                        _ => drop(g),
                    }
                    let _ = side.await;
                }
            });
        }
        while let Some(res) = tasks.join_next().await {
            res.expect("worker");
        }
    };
    timeout(ms(90_000), work)
        .await
        .unwrap_or_else(|_| panic!("[{}] hammer hung (deadlock?)", b.kind));
    // Everything ended; leases (0.9 s) lapse; the step bound passes.
    sleep(ms(2_000)).await;
    let ids = ids.lock().unwrap().clone();
    let mut stuck = Vec::new();
    for (name, id) in &ids {
        match timeout(ms(15_000), c.mutex(name).lease(ms(900)).resume(id)).await {
            Err(_) => stuck.push(format!("{id}: resume hung")),
            Ok(Err(e)) if e.is_hold_in_use() => stuck.push(format!("{id}: {e}")),
            Ok(Ok(g)) => drop(g.release().await),
            Ok(Err(_)) => {}
        }
    }
    assert!(
        stuck.is_empty(),
        "[{}] once everything ended, {} of {} ids still refused: {:?}",
        b.kind,
        stuck.len(),
        ids.len(),
        &stuck[..stuck.len().min(5)]
    );
    let _ = server_deadline;
}
/// Multi-lock: `release_all`, then the multi-guard dropped while the releases of
/// one part are held: a `MultiLock::resume` of its ids meanwhile gives no multi-guard; once
/// everything is answered it is not `HoldInUse`.
async fn multi_release_all_then_drop_then_resume(b: Backend) {
    let names = ["edge-multi-a", "edge-multi-b"];
    let (f, c) = faulty_client(&b).await;
    let g = c
        .multi_lock(names)
        .lease(secs(10))
        .lock()
        .await
        .expect("lock");
    let ids = g.hold_ids();
    let gate = f.hold_requests(Rule::on(Op::Release));
    let c2 = c.clone();
    let all = tokio::spawn(async move { c2.release_all().await });
    at_gate(&gate, 2, "at gate").await;
    drop(g);
    sleep(ms(100)).await;
    let resume = async || {
        let g = c.multi_lock(names).lease(secs(10)).resume(&ids).await;
        g.map(|g| g.is_held())
    };
    around_held_releases(&b, &f, &gate, all, 2, "multi-guard", resume).await;
}
/// Claim: a step by id ends within its bound (no hang). As tests/registry.rs's
/// `an_extend_hold_of_a_detached_id_ends_within_its_bound`, but the guard is NOT detached (it
/// lives, kept by the test): `extend_hold` of its id goes through its lease owner, whose
/// request turn a renewal parked on idle current-thread runtime A holds.
async fn an_extend_hold_of_a_live_guards_id_beside_a_parked_renewal(b: Backend) {
    let name = "edge-extend-live-parked";
    let (f, c) = faulty_client(&b).await;
    let (idle, guard, gate) = parked_renewal(&c, &f, name).await;
    gate.open();
    let id = guard.hold_id();
    let started = Instant::now();
    let extended = timeout(ms(12_000), c.extend_hold(&id, secs(5))).await;
    let took = started.elapsed();
    let held = guard.is_held();
    drop(guard.detach());
    support::time::drop_runtime(idle).await;
    assert!(
        extended.is_ok(),
        "[{}] extend_hold of a live guard's id (same client) still waits after {took:?}: it \
         queues on the guard's lease owner, whose request turn a renewal parked on idle \
         runtime A holds (guard is_held {held})",
        b.kind
    );
}
/// As `an_extend_hold_of_a_live_guards_id_beside_a_parked_renewal`, with `release_hold` of the id and the guard's own `release()` instead:
/// neither may hang behind the parked renewal.
async fn a_release_beside_a_parked_renewal_does_not_hang(b: Backend) {
    let name = "edge-release-live-parked";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let (idle, guard, gate) = parked_renewal(&c, &f, name).await;
    gate.open();
    let id = guard.hold_id();
    let by_id = timeout(ms(12_000), c.release_hold(&id)).await;
    let all = timeout(ms(12_000), c.release_all()).await;
    let own = timeout(ms(12_000), guard.release()).await;
    let still = holders(&other, name).await;
    support::time::drop_runtime(idle).await;
    assert!(
        by_id.is_ok() && all.is_ok() && own.is_ok(),
        "[{}] beside a renewal parked on idle runtime A: release_hold {by_id:?}, release_all \
         {all:?}, release() {own:?} (server holders {still})",
        b.kind
    );
}

both_backends!(
    a_cancelled_release_then_resume,
    release_all_counts_a_raced_hold_at_most_once,
    release_all_does_not_count_a_lapsed_hold,
    downgrade_then_detach_then_resume_both_ids,
    election_release_all_then_drop_then_resume,
    hammer_with_cancellations,
    multi_release_all_then_drop_then_resume,
    an_extend_hold_of_a_live_guards_id_beside_a_parked_renewal,
    a_release_beside_a_parked_renewal_does_not_hang,
);
