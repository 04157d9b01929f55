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
