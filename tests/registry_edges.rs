//! A client's registry at its edges, through the public API on both backends: failed and
//! cancelled releases followed by a resume, `release_all` and drops of election and
//! multi-lock guards, `release_all`'s count when several releases race, a downgrade then a
//! detach, releases and `extend_hold` beside a renewal parked on an idle runtime (the wait for
//! the hold's turn is bounded), and a hammer with random cancellations. Each test names the
//! claim it checks.

mod support;
use support::backend::within_ok;
use support::faulty::at_gate;
use support::faulty::faulty_client;
use support::quick::downgraded;
use support::quick::in_time;
use support::quick::Quick;
use support::waits::holders;

use std::sync::Arc;

use tokio::time::{sleep, timeout, Instant};

use support::backend::Backend;
use support::faulty::{parked_renewal, Gate, Op, Rule};
use support::honest::{assert_honest, server_deadline};
use support::proxy::slow_client;
use support::time::{ms, secs};

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
