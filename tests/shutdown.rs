//! `LockClient::release_all`: a client's shutdown releases every hold it has, of every
//! primitive, so others acquire at once instead of waiting out the leases; the guards report
//! themselves lost.

mod support;
use support::quick::in_time;
use support::time::secs;

use support::backend::Backend;

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
