//! A resume after a detach in the same client, with something of the hold in flight: a
//! `release_all` whose releases are not sent yet (Mutex, multi-lock, election), a renewal
//! cancelled by the detach on an idle runtime, a step two resumes wait on, renewals sent on
//! another thread; and the registry's purge of entries left by detached guards. Through the
//! public API on both backends; each test names the claim it checks.

mod support;
use support::backend::within_ok;
use support::faulty::at_gate;
use support::faulty::extend_at_gate;
use support::faulty::faulty_client;
use support::quick::in_time;
use support::quick::Quick;

use support::poll_once;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use redis_locks::LockClient;
use tokio::time::Instant;

use support::backend::Backend;
#[allow(unused_imports)]
use support::backend::{eventually, join};
use support::faulty::{Faulty, Gate, Op, Rule};
use support::honest::trusts_past;
use support::time::{current_thread, ms, secs};
use support::waits::lease_free;

/// Runs `f` to completion on a current-thread runtime of its own, on a blocking thread (so a
/// task spawned by `f` runs only when `f` yields).
async fn on_current_thread<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        let out = rt.block_on(f());
        drop(rt);
        out
    })
    .await
    .expect("current-thread runtime")
}

// ---------------------------------------------------------------------------------------
// A release_all whose releases are not sent yet, then a detach and a resume.
// ---------------------------------------------------------------------------------------

/// `c.release_all()` polled once: it has given its holds up and spawned their releases, which
/// `rule` holds at the returned gate of `f` (`c`'s store) before the server.
async fn release_all_unsent<'a>(
    c: &'a LockClient,
    f: &Faulty,
    rule: Rule,
) -> (
    Arc<Gate>,
    Pin<Box<impl Future<Output = redis_locks::Result<usize>> + 'a>>,
) {
    let gate = f.hold_requests(rule);
    let mut all = Box::pin(c.release_all());
    assert!(
        !poll_once(&mut all).await,
        "release_all done at its first poll"
    );
    (gate, all)
}

/// Claim: a resumed guard (same client, after a detach) never trusts past the server's lease,
/// whatever was in flight at the detach; a `release_all` leaves a hold detached before it.
/// Here `release_all()` is polled once on a current-thread runtime (it has given the hold up and
/// spawned its release, which has not run), then the guard is detached and the id resumed in the
/// same client (10 s) while that release is held at a gate: the resume must wait for it (and
/// find the hold gone) or the release must not be sent; never a guard of a released hold.
async fn a_resume_after_a_detach_beside_a_release_all_not_yet_sent(b: Backend) {
    let name = "detach-ra-unsent";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let kind = b.kind;
    let (resumed_ok, honest, n) = on_current_thread(move || async move {
        let guard = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
        let (gate, all) = release_all_unsent(&c, &f, Rule::on(Op::Release).times(1)).await;
        let id = guard.detach();
        let what = "resume returns";
        let resumed = in_time(ms(10_000), what, c.mutex(name).lease(secs(10)).resume(&id)).await;
        gate.open();
        let n = within_ok(ms(10_000), "release_all returns", all).await;
        match resumed {
            Err(err) => {
                assert!(err.is_hold_in_use(), "{err}");
                (false, None, n)
            }
            Ok(g) => {
                let before = g.valid_until();
                let info = other.mutex(name).inspect().await.expect("inspect");
                let answered = Instant::now();
                let honest = trusts_past(before, &info, answered).map(|over| {
                    format!(
                        "[{kind}] a guard resumed after a detach beside a release_all whose \
                         release was spawned but not yet sent (release_all counted {n}) trusts \
                         {over:?} past the server's lease ({} holder(s))",
                        info.holders.len()
                    )
                });
                drop(g.detach());
                (true, honest, n)
            }
        }
    })
    .await;
    if let Some(msg) = honest {
        panic!("{msg}");
    }
    let _ = (resumed_ok, n);
}
/// Claim: the same for `MultiGuard::detach` and `MultiLock::resume`: `release_all` polled once
/// (its releases of both parts spawned, not sent), the multi-guard detached and resumed in the
/// same client: no resumed part trusts past the server's lease.
async fn a_multi_resume_after_a_detach_beside_a_release_all_not_yet_sent(b: Backend) {
    let names = ["detach-ra-multi-a", "detach-ra-multi-b"];
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let kind = b.kind;
    let verdict = on_current_thread(move || async move {
        let guard = c
            .multi_lock(names)
            .lease(secs(10))
            .lock()
            .await
            .expect("lock");
        let (gate, all) = release_all_unsent(&c, &f, Rule::on(Op::Release)).await;
        let ids = guard.detach();
        let what = "resume returns";
        let resumed = in_time(
            ms(10_000),
            what,
            c.multi_lock(names).lease(secs(10)).resume(&ids),
        )
        .await;
        gate.open();
        let n = within_ok(ms(10_000), "release_all returns", all).await;
        let g = match resumed {
            Err(err) => {
                assert!(err.is_hold_in_use(), "{err}");
                return None;
            }
            Ok(g) => g,
        };
        let before = g.valid_until();
        let mut verdict = None;
        for name in names {
            let info = other.mutex(name).inspect().await.expect("inspect");
            if let Some(over) = trusts_past(before, &info, Instant::now()) {
                verdict = Some(format!(
                    "[{kind}] a multi-guard resumed after a detach beside a release_all whose \
                     releases were spawned but not yet sent (release_all counted {n}) trusts \
                     {over:?} past the server's lease of part {name} ({} holder(s))",
                    info.holders.len()
                ));
            }
        }
        drop(g.detach());
        verdict
    })
    .await;
    if let Some(msg) = verdict {
        panic!("{msg}");
    }
}
/// Claim: the same for `Leadership::detach` and `Election::resume`: a leadership resumed after
/// a detach beside a `release_all` not sent yet never leads (trusts) past the server's lease.
async fn an_election_resume_after_a_detach_beside_a_release_all_not_yet_sent(b: Backend) {
    let name = "detach-ra-election";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let kind = b.kind;
    let verdict = on_current_thread(move || async move {
        let leadership = c.campaign_for(name, secs(10), "v1").await;
        let (gate, all) = release_all_unsent(&c, &f, Rule::on(Op::Release)).await;
        let id = leadership.detach();
        let what = "resume returns";
        let resumed = in_time(
            ms(10_000),
            what,
            c.election(name).lease(secs(10)).resume(&id),
        )
        .await;
        gate.open();
        let n = within_ok(ms(10_000), "release_all returns", all).await;
        let l = match resumed {
            Err(err) => {
                assert!(err.is_hold_in_use(), "{err}");
                return None;
            }
            Ok(l) => l,
        };
        let trusted = l.valid_until().saturating_duration_since(Instant::now());
        let leader = other.election(name).leader().await.expect("leader");
        let verdict = (l.is_held() && leader.is_none()).then(|| {
            format!(
                "[{kind}] a leadership resumed after a detach beside a release_all whose \
                 release was spawned but not yet sent (release_all counted {n}) says it leads \
                 (trusts {trusted:?}) while the server has no leader"
            )
        });
        drop(l.detach());
        verdict
    })
    .await;
    if let Some(msg) = verdict {
        panic!("{msg}");
    }
}
// ---------------------------------------------------------------------------------------
// A renewal cancelled by the detach, waiting for its turn on an idle runtime.
// ---------------------------------------------------------------------------------------

/// Claim: once nothing sent for a detached hold is in flight, a resume of its id in the same
/// client goes ahead (no `HoldInUse`). The hold is granted on current-thread runtime A (its
/// renewals run there); an `extend_hold` of it holds the hold's turn for requests, its request
/// held before the server; a renewal falls due on A and waits for its turn; A goes idle (its
/// `block_on` returned, as a sync wrapper's runtime between calls). The guard is detached (the
/// renewal, cancelled, never sent) and the extend is let through and answered: the resume must
/// not wait for the renewal parked on A.
async fn a_renewal_aborted_by_the_detach_on_an_idle_runtime_leaves_no_hold_in_use(b: Backend) {
    let name = "detach-idle-renewal";
    let (f, c) = faulty_client(&b).await;
    let gate = f.hold_extend(secs(5));
    let main = tokio::runtime::Handle::current();
    let (c2, gate2) = (c.clone(), gate.clone());
    let (idle, guard, extending) = tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        let (guard, extending) = rt.block_on(async move {
            let guard = c2.mutex(name).lease(secs(3)).lock().await.expect("lock");
            let id = guard.hold_id();
            let extending = main.spawn(async move { c2.extend_hold(&id, secs(5)).await });
            at_gate(&gate2, 1, "extend at the gate").await;
            // The renewal falls due (a third of 3 s after the grant) and queues behind it.
            tokio::time::sleep(ms(1_500)).await;
            (guard, extending)
        });
        (rt, guard, extending)
    })
    .await
    .expect("runtime A");
    let id = guard.detach();
    gate.open();
    assert!(
        join("extend_hold", extending).await.expect("extend_hold"),
        "the extend found the hold"
    );
    let started = Instant::now();
    let what = "resume returns";
    let resumed = in_time(ms(20_000), what, c.mutex(name).lease(secs(10)).resume(&id)).await;
    let took = started.elapsed();
    support::time::drop_runtime(idle).await;
    match resumed {
        Ok(g) => drop(g.detach()),
        Err(err) => panic!(
            "[{}] a resume after a detach, with the extend in flight at the detach answered \
             and the renewal aborted by it never sent, was refused after {took:?}: {err} (the \
             aborted renewal was parked on runtime A, idle, queued for the hold's request lock)",
            b.kind
        ),
    }
}
// ---------------------------------------------------------------------------------------
// Two resumes waiting on one detached entry; the registry purge; renewals on another thread.
// ---------------------------------------------------------------------------------------

/// Claim: two concurrent resumes of one id after a detach give one guard (the other
/// `HoldInUse`), and neither waits past the bound once the step in flight at the detach ends.
/// Both start while an `extend_hold` of the hold is held before the server, then it is let
/// through.
async fn two_resumes_waiting_on_one_detached_entry_give_one_guard(b: Backend) {
    let name = "detach-two-resumes";
    let (c, guard, id, gate, extending) = extend_at_gate(&b, name, secs(5)).await;
    let _ = guard.detach();
    let resume = |c: LockClient, id: redis_locks::HoldId| {
        tokio::spawn(async move { c.mutex(name).lease(secs(10)).resume(&id).await })
    };
    let (r1, r2) = (resume(c.clone(), id.clone()), resume(c.clone(), id.clone()));
    tokio::time::sleep(ms(200)).await;
    gate.open();
    let opened = Instant::now();
    let _ = join("extend_hold", extending).await;
    let (a, b2) = (join("resume 1", r1).await, join("resume 2", r2).await);
    let took = opened.elapsed();
    let won = [&a, &b2].iter().filter(|r| r.is_ok()).count();
    let in_use = [&a, &b2]
        .iter()
        .filter(|r| r.as_ref().err().is_some_and(|e| e.is_hold_in_use()))
        .count();
    assert!(
        won == 1 && in_use == 1 && took < ms(3_000),
        "[{}] two resumes waiting on one detached entry: {won} guard(s), {in_use} HoldInUse, \
         {took:?} after the step ended ({:?} / {:?})",
        b.kind,
        a.as_ref().map(|_| "guard"),
        b2.as_ref().map(|_| "guard"),
    );
}
/// Claim: the registry's purge of entries left by detached guards never drops a live one:
/// holds, detaches (some with a step in flight, so their entries stay) and resumes in one client
/// push the registry past 64, 128 and 256 entries; afterwards a resume of every live guard's id
/// in the same client is still refused (`HoldInUse`): no second guard of a hold is ever made.
async fn the_registry_purge_never_drops_a_live_entry(b: Backend) {
    let c = b.client().await;
    let mut live = Vec::new();
    let mut detached = Vec::new();
    for i in 0..300 {
        let name = format!("detach-purge-{i}");
        let g = c.mutex(&name).lease(secs(30)).lock().await.expect("lock");
        if i % 3 == 0 {
            detached.push(g.detach());
        } else {
            live.push(g);
        }
        if i % 7 == 0
            && let Some(id) = detached.pop()
        {
            live.push(c.resume_for(id.name(), secs(30), &id).await);
        }
    }
    for g in &live {
        let id = g.hold_id();
        match c.mutex(id.name()).resume(&id).await {
            Err(e) if e.is_hold_in_use() => {}
            other => panic!(
                "[{}] a second guard of {} in the client that has a live guard of it: {:?}",
                b.kind,
                id.name(),
                other.map(|_| "guard")
            ),
        }
    }
    assert_eq!(c.release_all().await.expect("release_all"), live.len());
    for id in detached {
        assert!(c.release_hold(&id).await.expect("release_hold"));
    }
}
/// Claim: a resumed guard never trusts past the server's lease, whatever was in flight at the
/// detach, on the multi-threaded runtime: a hold with a short lease (150 ms, renewed every 50 ms)
/// is detached on one worker around the instant its renewal is sent on another, and resumed at
/// once with a 2 s lease; the resumed guard is checked against the server (a 150 ms renewal
/// applied after the resume would shorten it), 120 rounds. On a loaded machine a 150 ms lease
/// can lapse before its renewal is answered: such a round's resume finds the hold gone (an
/// honest answer, and nothing is granted), and most rounds must still resume.
async fn detach_while_a_renewal_is_sent_then_resume_hammered(b: Backend) {
    let c = b.client().await;
    let name = "detach-hammer";
    let mut resumed = 0;
    for round in 0..120u64 {
        let g = c.mutex(name).lease(ms(150)).lock().await.expect("lock");
        // Around the first renewal (50 ms after the grant), a little earlier or later.
        tokio::time::sleep(ms(46 + round % 9)).await;
        let id = tokio::spawn(async move { g.detach() })
            .await
            .expect("detach");
        let r = c
            .mutex(name)
            .lease(secs(2))
            .auto_renew(false)
            .resume(&id)
            .await;
        let g = match r {
            Ok(g) => g,
            Err(e) if e.is_hold_gone() => {
                assert!(lease_free(&c, name).await, "gone, yet held");
                continue;
            }
            Err(e) => panic!("[{}] round {round}: {e}", b.kind),
        };
        resumed += 1;
        tokio::time::sleep(ms(30)).await;
        let before = g.valid_until();
        let info = c.mutex(name).inspect().await.expect("inspect");
        if let Some(over) = trusts_past(before, &info, Instant::now()) {
            panic!(
                "[{}] round {round}: a guard resumed right after a detach beside a renewal \
                 trusts {over:?} past the server's lease",
                b.kind
            );
        }
        assert!(g.release().await.expect("release"));
    }
    assert!(
        resumed >= 60,
        "[{}] only {resumed} of 120 rounds resumed",
        b.kind
    );
}

both_backends!(
    a_resume_after_a_detach_beside_a_release_all_not_yet_sent,
    a_multi_resume_after_a_detach_beside_a_release_all_not_yet_sent,
    an_election_resume_after_a_detach_beside_a_release_all_not_yet_sent,
    a_renewal_aborted_by_the_detach_on_an_idle_runtime_leaves_no_hold_in_use,
    two_resumes_waiting_on_one_detached_entry_give_one_guard,
    the_registry_purge_never_drops_a_live_entry,
    detach_while_a_renewal_is_sent_then_resume_hammered,
);
