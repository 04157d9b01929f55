//! A guard dropped where its runtime can no longer release it (the runtime has ended, or drops
//! the guard's task as it shuts down) is released all the same: the client's engine, on a
//! thread of its own, sends the release. Nothing is left held for the lease, and nothing is
//! warned. A guard whose engine runs on a runtime that has ended
//! (`engine_on_current_runtime`) cannot be released: that one warns once per lock name.

mod support;
use support::quick::Quick;
use support::time::{current_thread, ms, secs};

use std::time::Duration;

use redis_locks::{InMemory, LockClient, MutexGuard};
use support::warnings::Warnings;

/// A guard of `name` taken on a runtime that has ended by the time it is returned.
fn guard_outliving_its_runtime(client: &LockClient, name: &str, lease: Duration) -> MutexGuard {
    let runtime = current_thread();
    let guard = runtime.block_on(async {
        client
            .mutex(name)
            .lease(lease)
            .lock()
            .timeout(secs(5))
            .await
            .expect("lock")
    });
    drop(runtime);
    guard
}

/// Whether another client can take `name` now (on a runtime of its own).
fn free_now(store: &InMemory, name: &str) -> bool {
    let other = store.client("other").expect("client");
    current_thread().block_on(async { other.mutex(name).try_lock().await.is_ok() })
}

/// A guard held by a task that its runtime drops at shutdown is released by the engine.
#[test]
fn a_guard_dropped_while_its_runtime_shuts_down_is_released() {
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let store = InMemory::new();
    let client = store.client("svc").expect("client");
    let runtime = current_thread();
    runtime.block_on(async {
        let guard = client.lock_for("dropped-at-shutdown", secs(30)).await;
        // A task that keeps the guard until the runtime drops it.
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
    });
    drop(runtime);
    // The client's last handle goes: its drop waits for the engine's releases.
    drop(client);
    assert!(
        free_now(&store, "dropped-at-shutdown"),
        "the lock is still held (lease 30 s)"
    );
    let seen = warnings.0.lock().unwrap().clone();
    assert!(seen.is_empty(), "nothing to warn about: {seen:#?}");
}

/// A guard dropped after its runtime ended (outside any runtime) is released by the engine.
#[test]
fn a_guard_dropped_after_its_runtime_is_released() {
    let store = InMemory::new();
    let client = store.client("svc").expect("client");
    let guard = guard_outliving_its_runtime(&client, "dropped-late", secs(30));
    assert!(
        guard.is_held(),
        "renewed by the engine, not by the runtime that ended"
    );
    drop(guard);
    drop(client);
    assert!(
        free_now(&store, "dropped-late"),
        "the lock is still held (lease 30 s)"
    );
}

/// With the engine on a runtime that has ended, a dropped guard cannot be released: the
/// library warns once per lock name, saying for how long the lock stays held.
#[test]
fn a_guard_whose_engine_ended_warns_once_per_lock_name() {
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let store = InMemory::new();
    let lease = ms(300);
    let make = |name: &str| {
        let runtime = current_thread();
        let guard = runtime.block_on(async {
            let builder = LockClient::builder().engine_on_current_runtime(true);
            let client = store.client_with(builder).expect("client");
            client.mutex(name).lease(lease).lock().await.expect("lock")
        });
        drop(runtime);
        guard
    };
    drop(make("engine-gone"));
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert!(
        seen[0].contains("engine-gone"),
        "names the lock: {}",
        seen[0]
    );
    assert!(seen[0].contains("300ms"), "says how long: {}", seen[0]);
    drop(make("engine-gone"));
    assert_eq!(warnings.0.lock().unwrap().len(), 1, "warned once per name");
    drop(make("engine-gone-2"));
    assert_eq!(
        warnings.0.lock().unwrap().len(),
        2,
        "another name warns again"
    );
}
