//! A guard dropped where it cannot be released (its tokio runtime has ended) leaves its lock
//! held for the lease: the library warns once per lock name, saying for how long and what
//! to call instead.

mod support;

use std::time::Duration;

use redis_locks::{InMemory, MutexGuard};
use support::warnings::Warnings;

/// A guard of `name` taken on a runtime that has ended by the time it is returned.
fn guard_outliving_its_runtime(store: &InMemory, name: &str, lease: Duration) -> MutexGuard {
    let client = store.client("svc").expect("client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let guard = runtime.block_on(async {
        client
            .mutex(name)
            .lease(lease)
            .lock()
            .timeout(Duration::from_secs(5))
            .await
            .expect("lock")
    });
    drop(runtime);
    guard
}

/// A guard held by a task that its runtime drops at shutdown: the background release cannot
/// run any more, and the warning says so.
#[test]
fn a_guard_dropped_while_its_runtime_shuts_down_warns() {
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let store = InMemory::new();
    let client = store.client("svc").expect("client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let guard = client
            .mutex("dropped-at-shutdown")
            .lease(Duration::from_millis(300))
            .lock()
            .await
            .expect("lock");
        // A task that keeps the guard until the runtime drops it.
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
    });
    drop(runtime);
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert!(seen[0].contains("dropped-at-shutdown"), "{seen:#?}");
    assert!(seen[0].contains("shutting down"), "{seen:#?}");
    // The lock is held until its lease lapses, as the warning says.
    let other = store.client("other").expect("client");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let err = other
            .mutex("dropped-at-shutdown")
            .try_lock()
            .await
            .expect_err("still held");
        assert!(err.is_would_block(), "{err}");
    });
}

#[test]
fn a_guard_dropped_after_its_runtime_warns_once_per_lock_name() {
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let store = InMemory::new();
    let lease = Duration::from_millis(300);

    drop(guard_outliving_its_runtime(&store, "dropped-late", lease));
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    let text = &seen[0];
    assert!(text.contains("dropped-late"), "names the lock: {text}");
    assert!(
        text.contains("300ms"),
        "says how long it stays held: {text}"
    );
    assert!(
        text.contains("release().await") && text.contains("release_all()"),
        "says what to call instead: {text}"
    );

    // The same name again (once its lease lapsed): no second warning.
    std::thread::sleep(lease + Duration::from_millis(100));
    drop(guard_outliving_its_runtime(&store, "dropped-late", lease));
    assert_eq!(warnings.0.lock().unwrap().len(), 1, "warned once per name");

    // Another name warns again.
    drop(guard_outliving_its_runtime(&store, "dropped-late-2", lease));
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert!(seen[1].contains("dropped-late-2"), "{seen:#?}");
}
