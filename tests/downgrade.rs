//! `WriteGuard::downgrade` under faults: a downgrade racing `release_all`, a downgrade whose
//! reply is lost, and one whose future is dropped, for every RwLock policy, on a real
//! redis-server and on the in-memory store.
//!
//! What must hold: no read guard says `is_held()` while the server holds nothing for it, and
//! whatever a failed or abandoned downgrade left on the server is removed at once, not at
//! the end of its lease.

mod support;

use std::time::Duration;

use redis_locks::{LockClient, Preference, WriteGuard};

use support::backend::{join, Backend};
use support::faulty::{Faulty, Gate, Op, Rule};

const POLICIES: [Preference; 3] = [Preference::Writer, Preference::Reader, Preference::Fair];

/// Long enough that a leaked hold is told apart from a released one without timing anything:
/// the other client's writer is given a tenth of it.
const LEASE: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(3);

async fn faulty_client(b: &Backend) -> (std::sync::Arc<Faulty>, LockClient) {
    let store = Faulty::new(b.store().await);
    let client = LockClient::builder()
        .lease(LEASE)
        .store(store.clone())
        .expect("client");
    (store, client)
}

/// `release_all()` runs while a downgrade's reply is on its way (the server applied the
/// downgrade first): the downgrade must not come back with a read guard that says it is held,
/// and another client's writer gets the lock at once.
async fn downgrade_racing_release_all(b: Backend) {
    for policy in POLICIES {
        let name = format!("dg-release-all-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = client
            .rwlock(&name)
            .preference(policy)
            .write()
            .await
            .expect("write");
        let gate = Gate::new();
        store.add(Rule::on(Op::Downgrade).times(1).hold_reply(gate.clone()));
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        // The server has applied the downgrade; its reply is held back.
        gate.wait_entered(1).await;
        let released = client.release_all().await.expect("release_all");
        assert_eq!(released, 1, "{policy:?}: release_all released the hold");
        gate.open();
        match join("downgrade", downgrade).await {
            Ok(r) => assert!(
                !r.is_held(),
                "{policy:?}: a read guard says it is held after release_all released it"
            ),
            Err(e) => assert!(
                matches!(e, redis_locks::Error::LeaseLost { .. }),
                "{policy:?}: unexpected error {e}"
            ),
        }
        let w2 = other
            .rwlock(&name)
            .preference(policy)
            .write()
            .timeout(PROMPTLY)
            .await
            .unwrap_or_else(|e| panic!("{policy:?}: another writer after release_all: {e}"));
        w2.release().await.expect("release");
    }
}

/// A downgrade whose reply is lost: the outcome is unknown to the caller, who gets an error;
/// the hold (in whatever form the server left it) is released in the background, so another
/// client's writer gets in at once.
async fn a_downgrade_with_a_lost_reply_leaves_nothing(b: Backend) {
    for policy in POLICIES {
        let name = format!("dg-lost-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = client
            .rwlock(&name)
            .preference(policy)
            .write()
            .await
            .expect("write");
        store.add(Rule::on(Op::Downgrade).times(1).lose_reply());
        let outcome = WriteGuard::downgrade(w).await;
        if let Ok(r) = &outcome {
            // Confirmed after all (a retry found the read hold): it is a real read hold.
            assert!(r.is_held(), "{policy:?}: a confirmed downgrade is held");
        }
        drop(outcome);
        let w2 = other
            .rwlock(&name)
            .preference(policy)
            .write()
            .timeout(PROMPTLY)
            .await
            .unwrap_or_else(|e| panic!("{policy:?}: writer after a lost downgrade reply: {e}"));
        w2.release().await.expect("release");
    }
}

/// A downgrade whose future is dropped after the server applied it (its reply never comes):
/// the read hold it made is released in the background, at once.
async fn a_cancelled_downgrade_leaves_nothing(b: Backend) {
    for policy in POLICIES {
        let name = format!("dg-cancelled-{policy:?}");
        let (store, client) = faulty_client(&b).await;
        let other = b.client().await;
        let w = client
            .rwlock(&name)
            .preference(policy)
            .write()
            .await
            .expect("write");
        let never = Gate::new();
        store.add(Rule::on(Op::Downgrade).times(1).hold_reply(never.clone()));
        let downgrade = tokio::spawn(WriteGuard::downgrade(w));
        never.wait_entered(1).await;
        downgrade.abort();
        assert!(
            downgrade.await.is_err(),
            "{policy:?}: the downgrade was cancelled"
        );
        let w2 = other
            .rwlock(&name)
            .preference(policy)
            .write()
            .timeout(PROMPTLY)
            .await
            .unwrap_or_else(|e| panic!("{policy:?}: writer after a cancelled downgrade: {e}"));
        w2.release().await.expect("release");
    }
}

/// After `release_all()` a guard says nothing about the future: `valid_until()` is not later
/// than the instant it was found lost.
async fn a_lost_guard_claims_no_validity(b: Backend) {
    let client = b.client_with(LockClient::builder().lease(LEASE)).await;
    let w = client
        .rwlock("dg-valid-until")
        .write()
        .await
        .expect("write");
    let m = client.mutex("dg-valid-until-m").lock().await.expect("lock");
    client.release_all().await.expect("release_all");
    let now = tokio::time::Instant::now();
    assert!(!w.is_held() && !m.is_held());
    assert!(
        w.valid_until() <= now && m.valid_until() <= now,
        "a released guard still claims validity into the future"
    );
}

both_backends!(
    downgrade_racing_release_all,
    a_downgrade_with_a_lost_reply_leaves_nothing,
    a_cancelled_downgrade_leaves_nothing,
    a_lost_guard_claims_no_validity,
);
