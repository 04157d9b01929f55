//! Releases through the public API on both backends: `release()` futures dropped before
//! their answer, stale releases and renewals after a later grant, `release_all()`'s count
//! when several releases of one hold race (its guard's, its drop's, another `release_all`'s),
//! and the warning of a background release cut by its runtime's shutdown.

mod support;
use redis_locks::LockClient;
use std::sync::Arc;
use support::backend::{eventually, join, within_ok, Backend};
use support::faulty::{at_gate, extend_at_gate, faulty_client, spawn_extend_hold, Gate, Op, Rule};
use support::honest::assert_honest;
use support::quick::{downgraded, in_time, Quick};
use support::time::{current_thread, drop_runtime, ms, secs};
use support::waits::{holders, BEFORE_THE_LEASE};
use support::Granted;
use tokio::time::{sleep, timeout, Instant};

fn named(name: &'static str) -> impl Fn(&support::faulty::Call) -> bool + Send + Sync {
    move |c| c.name == name
}

/// Free for a third client before the default 30 s lease could have freed it.
async fn free_soon(other: &LockClient, name: &str, what: &str) {
    support::waits::within(support::waits::BEFORE_THE_LEASE, what, async || match other
        .mutex(name)
        .try_lock()
        .await
        .granted("try_lock")
    {
        Some(g) => {
            g.release().await.expect("release");
            true
        }
        None => false,
    })
    .await;
}

/// `release()` futures dropped at many points (never polled, before the request
/// reaches the server, after it reached it but before the answer, with replies lost), one
/// after another on the same name: every time a third client gets the lock within ~1 s.
async fn dropped_release_frees_the_lock(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let name = "ra-drop";
    for i in 0..24u64 {
        let g = c.mutex(name).lock().await.expect("lock");
        match i % 4 {
            0 => drop(g.release()), // never polled
            1 => {
                f.add(Rule::on(Op::Release).times(1).delay_request(ms(300)));
                let _ = timeout(ms(i * 7 % 60), g.release()).await;
            }
            2 => {
                f.add(Rule::on(Op::Release).times(1).delay_reply(ms(300)));
                let _ = timeout(ms(i * 7 % 60), g.release()).await;
            }
            _ => {
                f.add(Rule::on(Op::Release).times(2).lose_reply());
                let _ = timeout(ms(i * 7 % 60), g.release()).await;
            }
        }
        free_soon(
            &other,
            name,
            &format!("[{}] round {i}: free after a dropped release", b.kind),
        )
        .await;
        f.clear();
    }
}
/// the dropped release's first request is held before the server; the drop's
/// background release frees the lock, a later holder (the SAME client, then another) takes
/// it; then the stale request reaches the server. The later grant must survive.
async fn stale_release_spares_later_grant(b: Backend) {
    for same_client in [true, false] {
        let (f, c) = faulty_client(&b).await;
        let other = b.client().await;
        let third = b.client().await;
        let name = if same_client {
            "ra-stale-same"
        } else {
            "ra-stale-other"
        };
        let g = c.mutex(name).lock().await.expect("lock");
        let gate = f.hold_requests(Rule::on(Op::Release).when(named(name)).times(1));
        let _ = timeout(ms(100), g.release()).await;
        assert_eq!(gate.entered(), 1, "the first release is held at the gate");
        let later_client = if same_client { &c } else { &other };
        let mut later = None;
        eventually("a later holder gets the lock", async || {
            later = later_client.mutex(name).try_lock().await.granted("try");
            later.is_some()
        })
        .await;
        let later = later.unwrap();
        gate.open();
        sleep(ms(500)).await;
        assert!(
            later.is_held(),
            "[{}] same_client={same_client}: later guard lost",
            b.kind
        );
        let info = third.mutex(name).inspect().await.expect("inspect");
        assert_eq!(
            info.holders.len(),
            1,
            "[{}] same_client={same_client}: the stale release freed a later grant: {info:?}",
            b.kind
        );
        assert!(
            third.mutex(name).try_lock().await.granted("try").is_none(),
            "[{}] same_client={same_client}: a third client got a lock held by a later holder",
            b.kind
        );
        assert!(later.release().await.expect("release"));
    }
}
/// `release_all` with (a) a hold whose dropped release reached the server but whose
/// answer is held (the server no longer holds it), (b) a hold whose dropped release is held
/// before the server (the server still holds it, but the caller gave it up), (c) one live
/// hold, (d) a live hold the server lost (force-released): the count is 1 (only c).
async fn release_all_counts_only_live_held(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let ga = c.mutex("ra-all-a").lock().await.expect("a");
    let gb = c.mutex("ra-all-b").lock().await.expect("b");
    let gc = c.mutex("ra-all-c").lock().await.expect("c");
    let gd = c.mutex("ra-all-d").lock().await.expect("d");
    let gate = f.hold_replies(Rule::on(Op::Release).when(named("ra-all-a")).times(2));
    f.add(
        Rule::on(Op::Release)
            .when(named("ra-all-b"))
            .times(2)
            .hold_request(gate.clone()),
    );
    let _ = timeout(ms(100), ga.release()).await;
    let _ = timeout(ms(100), gb.release()).await;
    // the drops' background releases arrive at the gate too
    at_gate(&gate, 4, "4 releases at the gate").await;
    other
        .force_release("ra-all-d")
        .await
        .expect("force_release");
    let n = within_ok(ms(10_000), "release_all returns", c.release_all()).await;
    assert_eq!(
        n, 1,
        "[{}] release_all counted {n}, not 1 (only c was live and held)",
        b.kind
    );
    assert!(!gc.is_held() && !gd.is_held());
    gate.open();
    for name in ["ra-all-a", "ra-all-b", "ra-all-c", "ra-all-d"] {
        free_soon(
            &other,
            name,
            &format!("[{}] {name} free after release_all", b.kind),
        )
        .await;
    }
}
/// a renewal's request is held before the server while the hold's `release()` is
/// dropped; the background release frees the lock, a later holder takes it, then the stale
/// renewal reaches the server. The later grant must survive and stay the only holder.
async fn stale_renewal_after_dropped_release(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let third = b.client().await;
    let name = "ra-renew";
    let gate = f.hold_requests(Rule::on(Op::Extend).when(named(name)).times(1));
    let g = c
        .mutex(name)
        .lease(ms(3_000))
        .renew_every(ms(100))
        .lock()
        .await
        .expect("lock");
    at_gate(&gate, 1, "a renewal at the gate").await;
    let _ = timeout(ms(30), g.release()).await;
    let mut later = None;
    eventually("a later holder gets the lock", async || {
        later = other.mutex(name).try_lock().await.granted("try");
        later.is_some()
    })
    .await;
    let later = later.unwrap();
    gate.open();
    sleep(ms(500)).await;
    assert!(later.is_held(), "[{}] later guard lost", b.kind);
    let info = third.mutex(name).inspect().await.expect("inspect");
    assert_eq!(
        info.holders.len(),
        1,
        "[{}] holders after a stale renewal: {info:?}",
        b.kind
    );
    assert!(later.release().await.expect("release"));
    free_soon(
        &third,
        name,
        &format!("[{}] free after the later holder's release", b.kind),
    )
    .await;
}
/// the other guard kinds (fair lock, write and read locks, semaphore permits,
/// multi-lock) with their `release()` futures dropped at 0..60 ms while the release replies
/// are slow or lost: each is free for a third client within ~1 s.
async fn dropped_release_every_kind(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    for i in 0..8u64 {
        let rule = |r: Rule| {
            if i % 2 == 0 {
                r.delay_reply(ms(300))
            } else {
                r.times(3).lose_reply()
            }
        };
        let cut = ms(i * 9 % 60);
        let what = |k: &str| format!("[{}] round {i}: {k} free after a dropped release", b.kind);
        // The guard's release() with slow or lost replies, dropped after `cut`.
        macro_rules! dropped_release {
            ($guard:expr) => {{
                f.add(rule(Rule::on(Op::Release)));
                let _ = timeout(cut, $guard.release()).await;
                f.clear();
            }};
        }
        // A third client's try (`$try`) is granted, and its release answers true.
        macro_rules! freed {
            ($kind:expr, $try:expr) => {
                let (bound, what) = (support::waits::BEFORE_THE_LEASE, what($kind));
                support::waits::within(bound, &what, async || match $try.await.granted("try") {
                    Some(g) => g.release().await.expect("release"),
                    None => false,
                })
                .await
            };
        }

        dropped_release!(c.fair_lock("ra-k-fair").lock().await.expect("fair"));
        freed!("fair lock", other.fair_lock("ra-k-fair").try_lock());

        dropped_release!(c.rwlock("ra-k-w").write().await.expect("write"));
        freed!("write lock", other.rwlock("ra-k-w").try_write());

        dropped_release!(c.rwlock("ra-k-r").read().await.expect("read"));
        freed!(
            "read lock (writer admitted)",
            other.rwlock("ra-k-r").try_write()
        );

        let sem = c.semaphore("ra-k-sem", 2);
        dropped_release!(sem.acquire_many(2).await.expect("permits"));
        freed!(
            "semaphore",
            other.semaphore("ra-k-sem", 2).try_acquire_many(2)
        );

        let names = ["ra-k-m1", "ra-k-m2", "ra-k-m3"];
        dropped_release!(c.multi_lock(names).lock().await.expect("multi"));
        freed!("multi-lock", other.multi_lock(names).try_lock());
    }
}
/// `release_all` while a guard's `release()` is still awaited by the caller (its
/// request held before the server) and the caller's live holds include two read holds and
/// a semaphore permit: the count is the live holds only (3), the caller's own release still
/// answers, and everything is free afterwards.
async fn release_all_during_awaited_release(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let g = c.mutex("ra-aw-x").lock().await.expect("x");
    let r1 = c.rwlock("ra-aw-r").read().await.expect("r1");
    let r2 = c.rwlock("ra-aw-r").read().await.expect("r2");
    let p = c.semaphore("ra-aw-s", 3).acquire().await.expect("permit");
    let gate = f.hold_requests(Rule::on(Op::Release).when(named("ra-aw-x")).times(1));
    let pending = tokio::spawn(g.release());
    at_gate(&gate, 1, "release at the gate").await;
    let n = within_ok(ms(10_000), "release_all returns", c.release_all()).await;
    assert_eq!(
        n, 3,
        "[{}] release_all counted {n}, not the 3 live holds",
        b.kind
    );
    assert!(!r1.is_held() && !r2.is_held() && !p.is_held());
    gate.open();
    let _ = support::backend::join("the awaited release", pending).await;
    free_soon(&other, "ra-aw-x", &format!("[{}] x free", b.kind)).await;
    support::waits::within(
        support::waits::BEFORE_THE_LEASE,
        "writer admitted",
        async || {
            other
                .rwlock("ra-aw-r")
                .try_write()
                .await
                .granted("try")
                .is_some()
        },
    )
    .await;
    assert_eq!(
        other
            .semaphore("ra-aw-s", 3)
            .available_permits()
            .await
            .expect("permits"),
        3
    );
}
/// the caller drops its `release()` future and then its whole client at once: the
/// background release still runs, and a third client gets the lock within ~1 s.
async fn dropped_release_then_dropped_client(b: Backend) {
    let other = b.client().await;
    for i in 0..6u64 {
        let (f, c) = faulty_client(&b).await;
        let name = "ra-client-gone";
        let g = c.mutex(name).lock().await.expect("lock");
        f.add(Rule::on(Op::Release).times(1).delay_reply(ms(200)));
        let _ = timeout(ms(i * 10), g.release()).await;
        drop(c);
        drop(f);
        free_soon(
            &other,
            name,
            &format!(
                "[{}] round {i}: free after release and client dropped",
                b.kind
            ),
        )
        .await;
    }
}
/// two `release_all` calls at once (on the multi-threaded runtime), over 40 live
/// holds: together they count each hold exactly once (sum 40), and everything is free.
async fn concurrent_release_alls_count_once(b: Backend) {
    let c = Arc::new(b.client().await);
    let other = b.client().await;
    for round in 0..3 {
        let mut guards = Vec::new();
        for i in 0..40 {
            guards.push(c.mutex(&format!("ra-cc-{i}")).lock().await.expect("lock"));
        }
        let (c1, c2) = (c.clone(), c.clone());
        let t1 = tokio::spawn(async move { c1.release_all().await });
        let t2 = tokio::spawn(async move { c2.release_all().await });
        let n1 = support::backend::join("release_all 1", t1)
            .await
            .expect("release_all 1");
        let n2 = support::backend::join("release_all 2", t2)
            .await
            .expect("release_all 2");
        assert_eq!(
            n1 + n2,
            40,
            "[{}] round {round}: counts {n1} + {n2} != 40",
            b.kind
        );
        assert!(guards.iter().all(|g| !g.is_held()));
        for i in 0..40 {
            let name = format!("ra-cc-{i}");
            free_soon(&other, &name, &format!("[{}] {name} free", b.kind)).await;
        }
    }
}
/// 10 Mutex holds `{prefix}-{i}` of a faulty client whose release requests are held at the
/// gate, and a `release_all` (on a task) that has sent all 10: the client, the guards, the
/// gate and the task.
async fn ten_releases_at_a_gate(
    b: &Backend,
    prefix: &str,
) -> (
    LockClient,
    Vec<redis_locks::MutexGuard>,
    Arc<Gate>,
    tokio::task::JoinHandle<redis_locks::Result<usize>>,
) {
    let (f, c) = faulty_client(b).await;
    let mut guards = Vec::new();
    let gate = Gate::new();
    for i in 0..10 {
        let name = format!("{prefix}-{i}");
        guards.push(c.mutex(&name).lock().await.expect("lock"));
        f.add(
            Rule::on(Op::Release)
                .when(move |call| call.name == name)
                .times(1)
                .hold_request(gate.clone()),
        );
    }
    let c1 = c.clone();
    let all = tokio::spawn(async move { c1.release_all().await });
    at_gate(&gate, 10, "release_all's 10 releases at the gate").await;
    (c, guards, gate, all)
}

/// `release_all` over 10 live holds whose release requests are held before the
/// server; the caller drops the (now lost) guards meanwhile, and their drops'
/// background releases overtake release_all's. Every hold was live and held by the server
/// when release_all was called, so its count must be 10.
async fn release_all_overtaken_by_guard_drops(b: Backend) {
    let other = b.client().await;
    let (_c, guards, gate, all) = ten_releases_at_a_gate(&b, "ra-ov").await;
    drop(guards);
    sleep(ms(300)).await; // any background release of the drops runs now
    gate.open();
    let n = support::backend::join("release_all", all)
        .await
        .expect("release_all");
    assert_eq!(
        n, 10,
        "[{}] release_all counted {n}, not the 10 holds live and held when it was called",
        b.kind
    );
    for i in 0..10 {
        let name = format!("ra-ov-{i}");
        free_soon(&other, &name, &format!("[{}] {name} free", b.kind)).await;
    }
}
/// (The deterministic form of the concurrent case above.) release_all A over 10 live holds whose
/// release requests are held before the server; a second release_all B, called once
/// A has sent them all, finds them releasing (uncounted) and its releases overtake A's. A was
/// called with 10 holds live and held, so A + B must count 10.
async fn second_release_all_overtakes_first(b: Backend) {
    let other = b.client().await;
    let (c, guards, gate, first) = ten_releases_at_a_gate(&b, "ra-ot").await;
    let n2 = within_ok(ms(10_000), "B returns", c.release_all()).await;
    gate.open();
    let n1 = support::backend::join("release_all A", first)
        .await
        .expect("release_all A");
    assert_eq!(
        n1 + n2,
        10,
        "[{}] release_all A counted {n1}, B {n2}: the 10 holds live and held when A was called are not counted",
        b.kind
    );
    drop(guards);
    for i in 0..10 {
        let name = format!("ra-ot-{i}");
        free_soon(&other, &name, &format!("[{}] {name} free", b.kind)).await;
    }
}
/// A guard's own `release()` runs on a current-thread runtime that then goes idle (kept, not
/// driven, not dropped) after its request was applied and before its reply was read. Then
/// `release_all()` is called elsewhere: its own release finds nothing (`Ok(false)`), and the
/// parked release's answer never comes while that runtime is idle. Promise: every caller is
/// answered within a bound (`release_all` waits for a guard's release at most one step's
/// bound). `release_all_does_not_wait_for_a_release_parked_in_an_idle_runtime` covers the
/// release of a dropped guard.
async fn release_all_does_not_wait_for_a_guard_release_parked_on_an_idle_runtime(b: Backend) {
    let name = "release-all-beside-a-parked-guard-release";
    let (f, client) = faulty_client(&b).await;
    let guard = client.lock_for(name, secs(10)).await;
    f.add(Rule::on(Op::Release).times(1).delay_reply(ms(100)));
    let idle = {
        let f = f.clone();
        tokio::task::spawn_blocking(move || {
            let rt = support::time::current_thread();
            rt.block_on(async move {
                tokio::spawn(guard.release());
                let give_up = Instant::now() + secs(5);
                while f.count(Op::Release) < 1 {
                    assert!(
                        Instant::now() < give_up,
                        "the guard's release never applied"
                    );
                    sleep(ms(5)).await;
                }
            });
            rt // kept, idle: the guard's release waits there for its delayed reply
        })
        .await
        .expect("release on another runtime")
    };
    let started = Instant::now();
    let outcome = timeout(secs(10), client.release_all()).await;
    let took = started.elapsed();
    support::time::drop_runtime(idle).await;
    assert!(
        outcome.is_ok(),
        "release_all() did not return within {took:?}: it waits for a guard's release() \
         parked on an idle runtime"
    );
}

both_backends!(
    dropped_release_frees_the_lock,
    stale_release_spares_later_grant,
    release_all_counts_only_live_held,
    stale_renewal_after_dropped_release,
    dropped_release_every_kind,
    release_all_during_awaited_release,
    dropped_release_then_dropped_client,
    concurrent_release_alls_count_once,
    release_all_overtaken_by_guard_drops,
    second_release_all_overtakes_first,
    release_all_does_not_wait_for_a_guard_release_parked_on_an_idle_runtime,
);

// ------------------------------------------------------------------------------------------
// Releases and detaches racing the other steps of a hold in one client, through the public
// API on both backends: `release_all` beside a detached guard's steps, beside releases of
// its holds by every other path, and beside a release parked on an idle runtime; a resume
// after a detach while steps of the hold are in flight (inside and outside a runtime); a
// stale downgraded write id; the warning of a release cut by its runtime's shutdown. Each
// test names the claim it checks.
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// `LockClient::release_all`: a client's shutdown releases every hold it has, of every
// primitive, so others acquire at once instead of waiting out the leases; the guards report
// themselves lost.
// ------------------------------------------------------------------------------------------

/// One hold of each primitive (two read holds), 10-minute leases and no renewal, so nothing
/// but `release_all` can free them within the test.
async fn release_all_frees_every_primitive(b: Backend) {
    let owner = b.client().await;
    let other = b.client().await;
    let long = secs(600);
    let m = owner.mutex("sd-mutex").lease(long).auto_renew(false);
    let w = owner.rwlock("sd-rw-write").lease(long).auto_renew(false);
    let r = owner.rwlock("sd-rw-read").lease(long).auto_renew(false);
    let f = owner.fair_lock("sd-fair").lease(long).auto_renew(false);
    let s = owner.semaphore("sd-sem", 2).lease(long).auto_renew(false);
    let guards_m = m.lock().await.expect("mutex");
    let guard_w = w.write().await.expect("write");
    let (read1, read2) = (r.read().await.expect("read"), r.read().await.expect("read"));
    let guard_f = f.lock().await.expect("fair");
    let permits = s.acquire_many(2).await.expect("permits");

    // Held: the other client is refused everywhere.
    assert!(other
        .mutex("sd-mutex")
        .try_lock()
        .await
        .unwrap_err()
        .is_would_block());
    assert!(other
        .rwlock("sd-rw-read")
        .try_write()
        .await
        .unwrap_err()
        .is_would_block());

    let released = owner.release_all().await.expect("release_all");
    assert_eq!(released, 6, "every live hold was released on the server");

    for held in [
        guards_m.is_held(),
        guard_w.is_held(),
        read1.is_held(),
        read2.is_held(),
        guard_f.is_held(),
        permits.is_held(),
    ] {
        assert!(!held, "a released guard must not claim the lock");
    }
    in_time(secs(1), "lost() fires at once", guards_m.lost()).await;

    // Free at once, for another client.
    let got = [
        other.mutex("sd-mutex").try_lock().await.is_ok(),
        other.rwlock("sd-rw-write").try_write().await.is_ok(),
        other.rwlock("sd-rw-read").try_write().await.is_ok(),
        other.fair_lock("sd-fair").try_lock().await.is_ok(),
        other
            .semaphore("sd-sem", 2)
            .try_acquire_many(2)
            .await
            .is_ok(),
    ];
    assert_eq!(got, [true; 5], "mutex, write, read, fair, semaphore");

    // The guards' own release finds nothing left to release; release_all has nothing left.
    assert!(!guards_m.release().await.expect("release"));
    assert_eq!(owner.release_all().await.expect("again"), 0);
}

/// A guard released or dropped before `release_all` is not counted again, and a hold granted
/// after it is tracked anew.
async fn release_all_counts_only_live_holds(b: Backend) {
    let c = b.client().await;
    let m = c.mutex("sd-count");
    m.lock()
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
    drop(c.fair_lock("sd-count-fair").lock().await.expect("fair"));
    assert_eq!(c.release_all().await.expect("none live"), 0);
    let _g = m.lock().await.expect("lock again");
    assert_eq!(
        c.clone()
            .release_all()
            .await
            .expect("a clone shares the holds"),
        1
    );
}

both_backends!(
    release_all_frees_every_primitive,
    release_all_counts_only_live_holds,
);
