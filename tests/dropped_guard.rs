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
