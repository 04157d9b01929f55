//! Releases and detaches racing the other steps of a hold in one client, through the public
//! API on both backends: `release_all` beside a detached guard's steps, beside releases of
//! its holds by every other path, and beside a release parked on an idle runtime; a resume
//! after a detach while steps of the hold are in flight (inside and outside a runtime); a
//! stale downgraded write id; the warning of a release cut by its runtime's shutdown. Each
//! test names the claim it checks.

mod support;
use support::backend::within_ok;
use support::faulty::at_gate;
use support::faulty::spawn_extend_hold;
use support::faulty::{extend_at_gate, faulty_client};
use support::quick::downgraded;
use support::quick::Quick;
use support::waits::{holders, BEFORE_THE_LEASE};

use std::sync::Arc;

use tokio::time::{sleep, timeout, Instant};

use support::backend::{join, Backend};
use support::faulty::{Gate, Op, Rule};
use support::honest::assert_honest;
use support::time::{current_thread, drop_runtime, ms, secs};

// ---------------------------------------------------------------------------------------
// A detached hold and release_all.
// ---------------------------------------------------------------------------------------

/// Claim: a detached hold is no longer the client's: `release_all` leaves it (and does not
/// count it), also while a step of it is still in flight here (an `extend_hold` through the
/// guard, held before the server when the guard is detached).
async fn release_all_spares_a_hold_detached_while_its_extend_is_in_flight(b: Backend) {
    let name = "race-ra-detached";
    let other = b.client().await;
    let (c, guard, _, gate, extending) = extend_at_gate(&b, name, secs(5)).await;
    let _handed_over = guard.detach();
    let n = within_ok(ms(10_000), "release_all returns", c.release_all()).await;
    let left = holders(&other, name).await;
    gate.open();
    let _ = join("extend_hold", extending).await;
    assert!(
        n == 0 && left == 1,
        "[{}] release_all after a detach (an extend_hold of the hold in flight) counted {n} \
         and left {left} holder(s): it released a hold the client had detached",
        b.kind
    );
}
// ---------------------------------------------------------------------------------------
// A resume after a detach, with steps of the hold in flight.
// ---------------------------------------------------------------------------------------

/// Claim: a resume after a `detach()` never runs beside a step of the hold still in flight in
/// the same client (GUARANTEES), so the resumed guard is honest. `extend_hold(5 s)` E1 is held
/// before the server, the guard is detached, a second `extend_hold(800 ms)` E2 starts, E1 is let
/// through; a resume (10 s) follows while E2 is held: it must wait for E2 (or be refused), never
/// trust 10 s of a lease E2 then cuts to 800 ms.
async fn a_resume_after_a_detach_waits_for_a_step_queued_behind_it(b: Backend) {
    let name = "race-detach-queued-step";
    let (f, c) = faulty_client(&b).await;
    let guard = c.lock_unrenewed(name, secs(10)).await;
    let id = guard.hold_id();
    let (gate1, gate2) = (Gate::new(), Gate::new());
    f.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(secs(5)))
            .times(1)
            .hold_request(gate1.clone()),
    );
    f.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(ms(800)))
            .times(1)
            .hold_request(gate2.clone()),
    );
    let e1 = spawn_extend_hold(&c, &id, secs(5));
    at_gate(&gate1, 1, "E1 at the gate").await;
    let _ = guard.detach();
    sleep(ms(200)).await; // the detach is done while E1 is in flight
    let e2 = spawn_extend_hold(&c, &id, ms(800));
    sleep(ms(200)).await; // E2 has started
    gate1.open();
    let _ = join("E1", e1).await;
    // E2 reaches its gate if it was sent (else it was refused: nothing to see).
    let e2_sent = timeout(ms(2_000), gate2.wait_entered(1)).await.is_ok();
    let resumed = c
        .mutex(name)
        .lease(secs(10))
        .auto_renew(false)
        .resume(&id)
        .await;
    gate2.open();
    let extended = join("E2", e2).await;
    match resumed {
        Err(err) => assert!(err.is_hold_in_use() || err.is_hold_gone(), "{err}"),
        Ok(g) => {
            let before = g.valid_until();
            let info = c.mutex(name).inspect().await.expect("inspect");
            let what = format!(
                "[{}] a guard resumed after a detach while an extend_hold(800 ms) that \
                 found the detached entry was still to be applied (sent {e2_sent}, \
                 answered {extended:?})",
                b.kind
            );
            assert_honest(&what, before, &info, Instant::now());
        }
    }
}
/// Claim: the same, for an `extend_hold` that goes beside a guard whose trust ran out (another
/// client kept the hold alive on the server): a resume after the detach waits for it (or is
/// refused), never trusts 10 s of a lease the 800 ms extend then cuts.
async fn a_resume_after_a_detach_waits_for_an_extend_beside_a_lapsed_guard(b: Backend) {
    let name = "race-detach-beside-step";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let guard = c.lock_unrenewed(name, ms(1_000)).await;
    let id = guard.hold_id();
    // Another process keeps the hold alive on the server; this guard's own trust runs out.
    assert!(other
        .extend_hold(&id, secs(20))
        .await
        .expect("extend by id"));
    sleep(ms(1_200)).await;
    assert!(!guard.is_held(), "the guard's trust ran out");
    let gate = f.hold_extend(ms(800));
    let extending = spawn_extend_hold(&c, &id, ms(800));
    at_gate(&gate, 1, "the extend beside the lapsed guard at the gate").await;
    let _ = guard.detach();
    let resumed = c
        .mutex(name)
        .lease(secs(10))
        .auto_renew(false)
        .resume(&id)
        .await;
    gate.open();
    let extended = join("extend_hold", extending).await;
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(g) => {
            let before = g.valid_until();
            let info = c.mutex(name).inspect().await.expect("inspect");
            let what = format!(
                "[{}] a guard resumed after detaching a lapsed guard while an \
                 extend_hold(800 ms) beside it was in flight (answered {extended:?})",
                b.kind
            );
            assert_honest(&what, before, &info, Instant::now());
        }
    }
}
/// Claim: the same, with the detach on a thread without a runtime while an `extend_hold(id,
/// 800 ms)` through the guard is on its way: the resume that follows never trusts 10 s of the
/// 800 ms lease.
async fn detach_outside_a_runtime_during_an_extend_then_resume(b: Backend) {
    let name = "race-detach-no-runtime";
    let (c, guard, id, gate, extending) = extend_at_gate(&b, name, ms(800)).await;
    std::thread::spawn(move || {
        let _ = guard.detach();
    })
    .join()
    .expect("detach thread");
    let resumed = c
        .mutex(name)
        .lease(secs(10))
        .auto_renew(false)
        .resume(&id)
        .await;
    gate.open();
    let extended = join("extend_hold", extending).await;
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(g) => {
            let before = g.valid_until();
            let info = c.mutex(name).inspect().await.expect("inspect");
            let what = format!(
                "[{}] a guard resumed after a detach outside a runtime while an \
                 extend_hold(800 ms) through the detached guard was in flight \
                 (answered {extended:?})",
                b.kind
            );
            assert_honest(&what, before, &info, Instant::now());
        }
    }
}
/// Claim: once the steps in flight at a detach have ended, a resume of the id in the same
/// client goes ahead, also when the detach ran inside another runtime's `block_on` (a sync
/// wrapper's) that is idle now.
async fn a_detach_in_an_idle_runtime_does_not_leave_the_hold_in_use(b: Backend) {
    let name = "race-detach-idle-runtime";
    // The extend gives the hold 30 s: a resume is refused only while the client still counts
    // the hold in use, never because the lease ran out.
    let (c, guard, id, gate, extending) = extend_at_gate(&b, name, secs(30)).await;
    let idle = tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        rt.block_on(async move {
            let _ = guard.detach();
        });
        rt // kept, idle (as a sync wrapper's runtime between calls)
    })
    .await
    .expect("detach in another runtime");
    gate.open();
    assert!(
        join("extend_hold", extending).await.expect("extend_hold"),
        "the extend found the hold"
    );
    let give_up = Instant::now() + BEFORE_THE_LEASE;
    let outcome = loop {
        match c
            .mutex(name)
            .lease(secs(10))
            .auto_renew(false)
            .resume(&id)
            .await
        {
            Err(err) if err.is_hold_in_use() && Instant::now() < give_up => sleep(ms(50)).await,
            other => break other,
        }
    };
    drop_runtime(idle).await;
    match outcome {
        Ok(g) => drop(g),
        Err(err) => panic!(
            "[{}] {BEFORE_THE_LEASE:?} after the extend in flight at the detach was answered, \
             a resume of the detached id in the same client is still refused: {err} (the \
             detach ran in a runtime that is idle now)",
            b.kind
        ),
    }
}
// ---------------------------------------------------------------------------------------
// release_all's liveness.
// ---------------------------------------------------------------------------------------

/// Claim: `release_all` returns within its bound even when another release of a hold it counts
/// is parked on a runtime that no longer runs it: the guard is dropped inside a current-thread
/// runtime's `block_on` while `release_all`'s own release is held, the drop's release is
/// applied, its reply delayed on that runtime, which then goes idle.
async fn release_all_does_not_wait_for_a_release_parked_in_an_idle_runtime(b: Backend) {
    let name = "race-ra-idle-runtime";
    let (f, c) = faulty_client(&b).await;
    let guard = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let gate_all = f.hold_requests(Rule::on(Op::Release).times(1));
    let all = {
        let c = c.clone();
        tokio::spawn(async move { c.release_all().await })
    };
    at_gate(&gate_all, 1, "release_all's release at the gate").await;
    f.add(Rule::on(Op::Release).times(1).delay_reply(ms(100)));
    let idle = {
        let f = f.clone();
        tokio::task::spawn_blocking(move || {
            let rt = current_thread();
            rt.block_on(async move {
                drop(guard);
                let give_up = Instant::now() + ms(5_000);
                while f.count(Op::Release) < 1 {
                    assert!(Instant::now() < give_up, "the drop's release never applied");
                    sleep(ms(5)).await;
                }
            });
            rt // kept, idle: the drop's release waits for its delayed reply there
        })
        .await
        .expect("drop in another runtime")
    };
    gate_all.open();
    let started = Instant::now();
    let outcome = timeout(ms(10_000), all).await;
    let took = started.elapsed();
    drop_runtime(idle).await;
    let n = outcome
        .unwrap_or_else(|_| {
            panic!(
                "[{}] release_all did not return within {took:?} after its own release was \
                 let through: it waits for a release of the hold parked in an idle runtime",
                b.kind
            )
        })
        .expect("task");
    let _ = n;
}
// ---------------------------------------------------------------------------------------
// Mixed releases racing a release_all that gave every hold up first.
// ---------------------------------------------------------------------------------------

/// Claim: release_all counts every hold live at its call whose release (by any path, each
/// answered) the server applied and "never counts a hold twice across concurrent calls", with
/// every path at once on the multi-threaded runtime: release_all A gives up 24 live holds
/// first (its releases held before the server); then release_alls B and C, guard drops,
/// guards' own `release()`, and `release_hold` by id all race, their replies delayed by
/// different amounts, most applied before A's. A must count 24, B and C nothing (they found
/// every hold being released), three rounds.
async fn mixed_releases_race_a_release_all_that_gave_up_first(b: Backend) {
    const N: usize = 24;
    let (f, c) = faulty_client(&b).await;
    let c = Arc::new(c);
    let other = b.client().await;
    for round in 0..3 {
        let round_start = Instant::now();
        f.clear();
        let mut guards = Vec::new();
        // The default 30 s lease: each name is free at the end because a release applied,
        // long before a lease would run out.
        for i in 0..N {
            let g = c.locked(&format!("race-mix-{i}")).await;
            guards.push(g);
        }
        let gate = f.hold_requests(
            Rule::on(Op::Release)
                .when(|call| call.name.starts_with("race-mix-"))
                .times(N),
        );
        for i in 0..N {
            let name = format!("race-mix-{i}");
            let d = ms(((i as u64 * 37 + round * 11) % 120) + 1);
            f.add(
                Rule::on(Op::Release)
                    .when(move |call| call.name == name)
                    .delay_reply(d),
            );
        }
        let a = {
            let c = c.clone();
            tokio::spawn(async move { c.release_all().await })
        };
        at_gate(&gate, N, "A's releases at the gate").await;
        let bc: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.release_all().await })
            })
            .collect();
        let mut others = Vec::new();
        for (i, g) in guards.into_iter().enumerate() {
            match i % 4 {
                0 => drop(g),
                1 => others.push(tokio::spawn(async move { g.release().await.map(|_| ()) })),
                2 => {
                    let (c, id) = (c.clone(), g.hold_id());
                    others.push(tokio::spawn(async move {
                        let _g = g;
                        c.release_hold(&id).await.map(|_| ())
                    }));
                }
                _ => drop(tokio::spawn(async move {
                    sleep(ms(30)).await;
                    drop(g)
                })),
            }
        }
        sleep(ms(250)).await;
        let opened_at = Instant::now();
        gate.open();
        let na = join("release_all A", a).await.expect("release_all A");
        let overtaking = f
            .calls(Op::Release)
            .iter()
            .filter(|e| e.forwarded_at > round_start && e.forwarded_at < opened_at)
            .filter(|e| e.call.name.starts_with("race-mix-") && e.outcome.contains("true"))
            .count();
        assert!(
            overtaking >= N / 2,
            "only {overtaking} releases overtook A's"
        );
        let mut nbc = Vec::new();
        for t in bc {
            nbc.push(join("release_all B/C", t).await.expect("release_all B/C"));
        }
        for t in others {
            let _ = join("a guard's release", t).await;
        }
        assert!(
            na == N && nbc == [0, 0],
            "[{}] round {round}: release_all A (first to give up all {N} live holds) counted \
             {na}, B and C {nbc:?}",
            b.kind
        );
        for i in 0..N {
            let name = format!("race-mix-{i}");
            support::waits::within(
                BEFORE_THE_LEASE,
                &format!("[{}] {name} free", b.kind),
                async || holders(&other, &name).await == 0,
            )
            .await;
        }
    }
}
// ---------------------------------------------------------------------------------------
// A pre-downgrade write id after the read hold it became was released.
// ---------------------------------------------------------------------------------------

/// Claim: a write id of a hold downgraded since releases the read hold through its
/// guard, and nothing else: once that read hold was released, the same client's *new* read
/// hold, another client's read hold, and later a new write hold of the same client are
/// neither released nor extended by the stale write id (`Ok(false)` both).
async fn a_stale_downgraded_write_id_touches_no_later_hold(b: Backend) {
    let name = "race-stale-write-id";
    let c = b.client().await;
    let other = b.client().await;
    let rw = c.rwlock(name).lease(secs(10));
    let w = rw.write().await.expect("write");
    let write_id = w.hold_id();
    let read = downgraded(w).await;
    assert!(read.release().await.expect("release read"));
    let mine = rw.read().await.expect("a new read hold, same client");
    let theirs = other
        .rwlock(name)
        .lease(secs(10))
        .read()
        .await
        .expect("a read hold, other client");
    let extended = c.extend_hold(&write_id, secs(60)).await.expect("extend");
    let released = c.release_hold(&write_id).await.expect("release");
    let released_other = other.release_hold(&write_id).await.expect("release");
    let info = rw.inspect().await.expect("inspect");
    assert!(
        !extended
            && !released
            && !released_other
            && mine.is_held()
            && theirs.is_held()
            && info.holders.len() == 2
            // A renewal's deadline is rounded up to an even millisecond.
            && info.holders.iter().all(|h| h.lease_remaining <= secs(10) + ms(1)),
        "[{}] stale write id: extended {extended}, released {released}/{released_other}, \
         holders {:?}",
        b.kind,
        info.holders
    );
    mine.release().await.expect("release");
    theirs.release().await.expect("release");
    let w2 = rw.write().await.expect("a new write hold, same client");
    let released = c.release_hold(&write_id).await.expect("release");
    let extended = c.extend_hold(&write_id, secs(60)).await.expect("extend");
    assert!(
        !released && !extended && w2.is_held(),
        "[{}] stale write id vs a new write hold: released {released}, extended {extended}",
        b.kind
    );
    w2.release().await.expect("release");
}
/// Claim: a detach inside another runtime that is shut down at once, while an `extend_hold` of
/// the hold is in flight: a resume in this client waits for the extend, then goes ahead, and
/// its guard is honest.
async fn detach_in_a_runtime_that_shuts_down_then_resume(b: Backend) {
    let name = "race-detach-runtime-gone";
    let (c, guard, id, gate, extending) = extend_at_gate(&b, name, secs(5)).await;
    tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        rt.block_on(async move {
            let _ = guard.detach();
        });
        drop(rt);
    })
    .await
    .expect("detach in another runtime, then its shutdown");
    // A resume waits for the extend in flight (the engine keeps the detached hold until it is
    // answered); the extend is let through meanwhile.
    let opener = {
        let gate = gate.clone();
        tokio::spawn(async move {
            sleep(ms(300)).await;
            gate.open();
        })
    };
    let resumed = c.mutex(name).lease(secs(10)).resume(&id).await;
    opener.await.expect("opener");
    assert!(join("extend_hold", extending).await.expect("extend_hold"));
    let g = resumed.unwrap_or_else(|e| panic!("[{}] resume after the extend: {e}", b.kind));
    let until = g.valid_until();
    let info = c.mutex(name).inspect().await.expect("inspect");
    let what = format!(
        "[{}] resumed after an extend in flight at the detach",
        b.kind
    );
    assert_honest(&what, until, &info, Instant::now());
    g.release().await.expect("release");
}

both_backends!(
    release_all_spares_a_hold_detached_while_its_extend_is_in_flight,
    a_resume_after_a_detach_waits_for_a_step_queued_behind_it,
    a_resume_after_a_detach_waits_for_an_extend_beside_a_lapsed_guard,
    detach_outside_a_runtime_during_an_extend_then_resume,
    a_detach_in_an_idle_runtime_does_not_leave_the_hold_in_use,
    release_all_does_not_wait_for_a_release_parked_in_an_idle_runtime,
    mixed_releases_race_a_release_all_that_gave_up_first,
    a_stale_downgraded_write_id_touches_no_later_hold,
    detach_in_a_runtime_that_shuts_down_then_resume,
);
