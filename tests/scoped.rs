//! `run_while_held` / `with_lock`: work runs under the lock, is stopped when the lease is
//! lost, and the lock is released after.

mod support;
use support::quick::in_time;
use support::time::{ms, secs};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis_locks::Error;
use support::backend::Backend;

async fn work_runs_under_the_lock_and_releases_it(b: Backend) {
    let c = b.client().await;
    let m = c.mutex("scoped-ok");
    let inside = m
        .with_lock(|fence| {
            let m = m.clone();
            async move {
                // Nobody else gets in while the work runs.
                assert!(support::would_block(m.try_lock().await));
                fence
            }
        })
        .await
        .expect("work done");
    assert!(inside >= 1);
    // Released after: free again at once.
    assert!(m.try_lock().await.is_ok());
    let rw = c.rwlock("scoped-rw");
    assert_eq!(rw.with_read(|_| async { 1 }).await.expect("read"), 1);
    assert_eq!(rw.with_write(|_| async { 2 }).await.expect("write"), 2);
    let s = c.semaphore("scoped-sem", 1);
    assert_eq!(s.with_permit(|_| async { 3 }).await.expect("permit"), 3);
    assert!(s.try_acquire().await.is_ok());
    let f = c.fair_lock("scoped-fair");
    assert_eq!(f.with_lock(|_| async { 4 }).await.expect("fair"), 4);
}

async fn a_lost_lease_stops_the_work(b: Backend) {
    let c = b.client().await;
    let guard = c
        .mutex("scoped-lost")
        .lease(ms(600))
        .renew_every(ms(100))
        .lock()
        .await
        .expect("lock");
    let finished = Arc::new(AtomicBool::new(false));
    let work = {
        let finished = finished.clone();
        async move {
            tokio::time::sleep(secs(30)).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    // An operator breaks the lock: the next renewal is refused, the lease is lost.
    let operator = {
        let c = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(200)).await;
            c.force_release("scoped-lost").await.expect("force release")
        })
    };
    let what = "stopped well before the work's 30 s";
    let outcome = in_time(secs(20), what, guard.run_while_held(work)).await;
    assert!(
        matches!(outcome, Err(Error::LeaseLost { ref name }) if name == "scoped-lost"),
        "{outcome:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the work ran past the lost lease"
    );
    operator.await.expect("operator");
}

both_backends!(
    work_runs_under_the_lock_and_releases_it,
    a_lost_lease_stops_the_work
);
