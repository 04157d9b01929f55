//! Several clients on one shared in-memory store see each other's locks, as services on one
//! Redis do; separate `LockClient::in_memory()` clients share nothing.

use redis_locks::{InMemory, LockClient};

#[tokio::test]
async fn shared_clients_see_each_others_locks() {
    let store = InMemory::new();
    let billing = store.client("billing").expect("client");
    let reports = store.client("reports").expect("client");

    let held = billing.mutex("ledger").lock().await.expect("lock");
    let refused = reports
        .mutex("ledger")
        .try_lock()
        .await
        .expect_err("held by billing");
    assert!(refused.is_would_block());

    let info = reports.mutex("ledger").inspect().await.expect("inspect");
    assert_eq!(info.holders[0].label.as_deref(), Some("billing"));

    assert!(held.release().await.expect("release"));
    let again = reports
        .mutex("ledger")
        .try_lock()
        .await
        .expect("free again");
    assert!(again.release().await.expect("release"));
}

#[tokio::test]
async fn shared_clients_exclude_each_other_on_every_primitive() {
    let store = InMemory::new();
    let a = store.client("service-a").expect("client");
    let builder = LockClient::builder().label("service-b");
    let b = store.client_with(builder).expect("client");

    let fair = a.fair_lock("jobs").lock().await.expect("fair lock");
    assert!(b
        .fair_lock("jobs")
        .try_lock()
        .await
        .unwrap_err()
        .is_would_block());
    let write = a.rwlock("catalog").write().await.expect("write");
    assert!(b
        .rwlock("catalog")
        .try_read()
        .await
        .unwrap_err()
        .is_would_block());
    let permit = a.semaphore("slots", 1).acquire().await.expect("permit");
    assert!(b
        .semaphore("slots", 1)
        .try_acquire()
        .await
        .unwrap_err()
        .is_would_block());
    fair.release().await.expect("release");
    write.release().await.expect("release");
    permit.release().await.expect("release");
}

#[tokio::test]
async fn separate_in_memory_clients_share_nothing() {
    let a = LockClient::in_memory();
    let b = LockClient::in_memory();
    let held = a.mutex("ledger").lock().await.expect("lock");
    let other = b.mutex("ledger").try_lock().await.expect("another store");
    other.release().await.expect("release");
    held.release().await.expect("release");
}

#[tokio::test]
async fn a_bad_label_is_refused() {
    let store = InMemory::new();
    assert!(store.client("has space").is_err());
    assert!(store
        .client_with(LockClient::builder().prefix("a{b"))
        .is_err());
}

/// A `try_*` refused because this same client holds the lock says so; another client's
/// refusal does not.
#[tokio::test]
async fn a_refusal_by_your_own_guard_says_so() {
    let store = InMemory::new();
    let mine = store.client("mine").expect("client");
    let theirs = store.client("theirs").expect("client");
    let held = mine.mutex("report").lock().await.expect("lock");

    let own = mine
        .mutex("report")
        .try_lock()
        .await
        .expect_err("held by me");
    assert!(own.is_would_block(), "{own:?}");
    let text = own.to_string();
    assert!(
        text.contains("held by this client (another guard of yours"),
        "{text}"
    );

    let other = theirs
        .mutex("report")
        .try_lock()
        .await
        .expect_err("held by mine");
    assert!(other.is_would_block(), "{other:?}");
    assert!(!other.to_string().contains("this client"), "{other}");

    let multi = mine
        .multi_lock(["a", "report"])
        .try_lock()
        .await
        .expect_err("held");
    assert!(multi.is_would_block(), "{multi:?}");
    assert!(multi.to_string().contains("held by this client"), "{multi}");

    held.release().await.expect("release");
    let again = mine.mutex("report").try_lock().await.expect("free");
    again.release().await.expect("release");
}
