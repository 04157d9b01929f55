//! The client's renewal schedule: every renewal of every hold is an entry in one schedule per
//! client and runtime, sent by its driver when due; no hold has a task of its own. These tests
//! pin what that must not break.

use std::time::Duration;

use redis_locks::LockClient;

mod support;
use support::backend::Backend;
use support::faulty::faulty_client_with;
use support::faulty::{Op, Rule};
use support::quick::Quick;
use support::time::{ms, secs};

fn runtime() -> tokio::runtime::Runtime {
    support::time::current_thread()
}

/// A client first used on a runtime that then shut down (its renewal driver went with it)
/// still renews the holds it makes on the next runtime.
#[test]
fn renewals_continue_after_the_first_runtime_shut_down() {
    let client = LockClient::builder()
        .lease(ms(600))
        .in_memory()
        .expect("in-memory client");
    runtime().block_on(async {
        let guard = client.mutex("first").lock().await.expect("lock");
        guard.release().await.expect("release");
    });
    runtime().block_on(async {
        let guard = client.mutex("second").lock().await.expect("lock");
        tokio::time::sleep(ms(2000)).await;
        assert!(
            guard.is_held(),
            "a 600 ms hold was not renewed for 2 s on the second runtime"
        );
        let other = client.mutex("second").try_lock().await;
        assert!(other.is_err(), "the lock was free while the guard held it");
        assert!(guard.release().await.expect("release"));
    });
}

/// Holds made on a second runtime are renewed there while the first runtime, where the
/// client made its first holds, still exists but runs nothing.
#[test]
fn renewals_run_on_the_runtime_of_the_hold() {
    let client = LockClient::builder()
        .lease(ms(600))
        .in_memory()
        .expect("in-memory client");
    let idle = runtime();
    idle.block_on(async {
        let guard = client.mutex("first").lock().await.expect("lock");
        guard.release().await.expect("release");
    });
    let busy = std::thread::spawn(move || {
        runtime().block_on(async {
            let guard = client.mutex("second").lock().await.expect("lock");
            tokio::time::sleep(ms(2000)).await;
            let held = guard.is_held();
            guard.release().await.expect("release");
            held
        })
    });
    let held = busy.join().expect("second runtime");
    drop(idle);
    assert!(
        held,
        "a 600 ms hold on the second runtime was not renewed while the first one sat idle"
    );
}

/// Holds released before their first renewal leave nothing scheduled that could renew them
/// later: after many short holds, the lock is free and a later holder keeps it.
#[tokio::test]
async fn short_holds_leave_no_renewal_behind() {
    let client = LockClient::builder()
        .lease(ms(600))
        .in_memory()
        .expect("in-memory client");
    let m = client.mutex("short");
    for _ in 0..200 {
        let g = m.lock().await.expect("lock");
        assert!(g.release().await.expect("release"));
    }
    // Past every scheduled first renewal of those holds.
    tokio::time::sleep(ms(700)).await;
    let g = m.try_lock().await.expect("the lock is free");
    tokio::time::sleep(ms(1800)).await;
    assert!(g.is_held(), "the last holder was not renewed");
    assert!(g.release().await.expect("release"));
    assert!(m.try_lock().await.is_ok(), "a released lock stayed held");
}

/// An `extend` before the first renewal starts the renewal task, which then follows the new
/// lease: a hold shortened to 600 ms by `extend` is still renewed in time.
#[tokio::test]
async fn extend_before_the_first_renewal_is_followed() {
    let client = LockClient::builder()
        .lease(secs(30))
        .in_memory()
        .expect("in-memory client");
    let mut g = client.mutex("shortened").lock().await.expect("lock");
    assert!(g.extend(ms(600)).await.expect("extend"));
    tokio::time::sleep(ms(2000)).await;
    assert!(g.is_held(), "the shortened hold was not renewed in time");
    assert!(g.release().await.expect("release"));
}

/// Long holds cost no task each: 300 holds of a 300 ms lease renewed for 1.5 s (five leases)
/// stay held, while the runtime never has a task per hold alive between renewals.
#[test]
fn long_holds_are_renewed_without_a_task_each() {
    let client = LockClient::builder()
        .lease(ms(300))
        .in_memory()
        .expect("in-memory client");
    runtime().block_on(async {
        let mut guards = Vec::new();
        for i in 0..300 {
            guards.push(client.locked(&format!("long-{i}")).await);
        }
        let metrics = tokio::runtime::Handle::current().metrics();
        let mut fewest_alive = usize::MAX;
        // From the first renewal on (100 ms), sampled at instants that drift across the
        // renewal rounds.
        tokio::time::sleep(ms(150)).await;
        for _ in 0..36 {
            tokio::time::sleep(ms(37)).await;
            fewest_alive = fewest_alive.min(metrics.num_alive_tasks());
        }
        for g in &guards {
            assert!(g.is_held(), "{} lost while its client renewed it", g.name());
        }
        assert!(
            fewest_alive < 30,
            "{fewest_alive} tasks alive at best for 300 long holds: a task per hold"
        );
        for g in guards {
            assert!(g.release().await.expect("release"));
        }
    });
}

/// Extends a hold of a 600 ms lease from a helper runtime that then ends, waits four leases,
/// and tells whether the hold was still renewed: its guard held, the lock busy for others.
async fn renewed_after_an_extend_from_a_runtime_that_ended(b: &Backend) -> bool {
    let client = b.leased(ms(600)).await;
    let other = b.client().await;
    let mut guard = client.mutex("helper-extend").lock().await.expect("lock");
    let guard = tokio::task::spawn_blocking(move || {
        runtime().block_on(async {
            assert!(guard.extend(ms(600)).await.expect("extend"));
        });
        guard
    })
    .await
    .expect("helper runtime");
    tokio::time::sleep(ms(2400)).await;
    let held = guard.is_held();
    let busy = other.mutex("helper-extend").try_lock().await.is_err();
    assert_eq!(held, busy, "the guard and the server disagree");
    held
}

/// An `extend` made from a short-lived helper runtime (`spawn_blocking` with a runtime of its
/// own, a test runtime) does not take the hold's renewals along when that runtime ends: the
/// runtime that granted the hold is alive and keeps renewing it.
async fn an_extend_from_a_runtime_that_ends_keeps_the_renewals(b: Backend) {
    assert!(
        renewed_after_an_extend_from_a_runtime_that_ended(&b).await,
        "the hold lost its renewals with the helper runtime"
    );
}

both_backends!(an_extend_from_a_runtime_that_ends_keeps_the_renewals);

const LEASE: Duration = Duration::from_millis(300);

/// Extends from a series of helper runtimes, each sent while a (slowed) renewal may be in
/// flight: the granting runtime keeps renewing the hold after every helper ended.
async fn extends_from_helpers_racing_slow_renewals(b: Backend) {
    let (store, client) = faulty_client_with(&b, LockClient::builder().lease(LEASE)).await;
    let other = b.client().await;
    store.add(Rule::on(Op::Extend).delay_reply(ms(40)));
    let mut guard = client.mutex("atk-rt-helpers").lock().await.expect("lock");
    for i in 0..8u64 {
        tokio::time::sleep(ms(17 * i % 90)).await;
        guard = tokio::task::spawn_blocking(move || {
            runtime().block_on(async {
                let _ = guard.extend(LEASE).await;
            });
            guard
        })
        .await
        .expect("helper");
        tokio::time::sleep(ms(700)).await;
        assert!(
            guard.is_held(),
            "round {i}: renewals stopped after a helper runtime ended"
        );
        assert!(
            other.mutex("atk-rt-helpers").try_lock().await.is_err(),
            "round {i}: the lock was free while its guard said held"
        );
    }
    assert!(guard.release().await.expect("release"));
}

/// A hold granted on a helper runtime that ends, then extended from the main runtime: its
/// renewals move to the main runtime and go on.
async fn granted_on_a_helper_then_extended_on_main(b: Backend) {
    let client = b.leased(LEASE).await;
    let other = b.client().await;
    let c = client.clone();
    let mut guard = tokio::task::spawn_blocking(move || {
        runtime().block_on(async { c.mutex("atk-rt-granted-helper").lock().await.expect("lock") })
    })
    .await
    .expect("helper");
    assert!(guard.extend(LEASE).await.expect("extend"));
    tokio::time::sleep(ms(1500)).await;
    assert!(guard.is_held(), "renewals did not move to the main runtime");
    assert!(
        other
            .mutex("atk-rt-granted-helper")
            .try_lock()
            .await
            .is_err(),
        "the lock was free while its guard said held"
    );
    assert!(guard.release().await.expect("release"));
}

/// A hold granted on a helper runtime that ends and is never extended: it may lapse, but
/// then the guard must not say it is held.
async fn granted_on_a_helper_never_extended_is_honest(b: Backend) {
    let client = b.leased(LEASE).await;
    let other = b.client().await;
    let c = client.clone();
    let guard = tokio::task::spawn_blocking(move || {
        runtime().block_on(async { c.mutex("atk-rt-honest").lock().await.expect("lock") })
    })
    .await
    .expect("helper");
    for _ in 0..20 {
        tokio::time::sleep(ms(50)).await;
        let vu = guard.valid_until();
        if let Ok(g) = other.mutex("atk-rt-honest").try_lock().await {
            let now = tokio::time::Instant::now();
            assert!(
                vu <= now,
                "another client got the lock while the guard trusted it"
            );
            g.release().await.expect("release");
            break;
        }
    }
}

both_backends!(
    extends_from_helpers_racing_slow_renewals,
    granted_on_a_helper_then_extended_on_main,
    granted_on_a_helper_never_extended_is_honest,
);
