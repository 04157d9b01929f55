//! A client's registry of holds under every path that takes it: a `release_all` whose
//! releases failed (Mutex, election, multi-lock), a cancelled `release_all`, guards dropped
//! outside a runtime with a release or step by id in flight, an `extend_hold` of a detached id
//! beside a renewal parked on an idle runtime, and all of them at once on a multi-thread
//! runtime. Public API; each test names the claim it checks.

mod support;
use support::quick::in_time;
use support::quick::Quick;

use redis_locks::LockClient;
use tokio::time::{timeout, Instant};

use support::backend::Backend;
use support::faulty::{faulty_client, parked_renewal, Gate, Op, Rule};
use support::honest::trusts_past;
use support::proxy::{slow_client, Proxy};
use support::time::{ms, secs};

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
