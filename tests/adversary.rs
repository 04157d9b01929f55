//! Adversarial checks of the honest-guard guarantees (docs/GUARANTEES.md, "How a guard's
//! deadline is kept honest", and the capacity-agreement row), through the public API only:
//! handles, guards, `LockClient::builder().store(..)` with fault wrappers, cancellation.
//!
//! Every test asserts a guarantee as a property ("never two conflicting guards say
//! `is_held()`", "a guard that says `is_held()` is listed by the server"), with margins of
//! hundreds of milliseconds. Tests run against a private real redis-server and, where the
//! two stores are meant to agree, against the in-memory store too.
//!
//! Besides `support::faulty` (whose delays live in the caller's future, so a cancelled call
//! never reaches the store), this file has [`Detached`]: a wrapper whose delayed `extend`
//! requests run in their own task, the way a request already written to the network still
//! reaches Redis after its caller stopped waiting. That is exactly the "request of unknown
//! outcome" the guarantees promise to survive.

mod support;
use support::Granted;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, Claim, Family, PermitChange, RedisStore, Snapshot, Store,
};
use redis_locks::testing::WakeHub;
use redis_locks::{LockClient, Preference, WriteGuard};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use support::backend::{eventually, Backend};
use support::faulty::{Faulty, Gate, Op, Rule};
use support::RedisServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ------------------------------------------------------------------------------------------
// Break 1: downgrade forgets lease requests of unknown outcome.
// ------------------------------------------------------------------------------------------

// ------------------------------------------------------------------------------------------
// Break 2: set_permits turns a FairLock's fixed capacity into a resizable count.
// ------------------------------------------------------------------------------------------

// ------------------------------------------------------------------------------------------
// Break 3: a capacity-marker upgrade shortens the marker's life below the holders'.
// ------------------------------------------------------------------------------------------

// ------------------------------------------------------------------------------------------
// Attacks that held.
// ------------------------------------------------------------------------------------------

/// `SCRIPT FLUSH` every 20 ms while three clients contend for one mutex (with renewals every
/// 100 ms): never two guards inside at once. (Holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_flush_storm_keeps_exclusion() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let url = server.url();
    let flusher = RedisStore::connect(&url).await.expect("connect");
    let inside = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + secs(3);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = LockClient::connect(&url).await.expect("connect");
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let mutex = client
                .mutex("adv-script-flush")
                .lease(ms(300))
                .renew_every(ms(100));
            let mut rounds = 0u32;
            while Instant::now() < end {
                let g = mutex.lock().await.expect("lock");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                sleep(ms(15)).await;
                assert!(g.is_held());
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release");
                rounds += 1;
            }
            rounds
        }));
    }
    while Instant::now() < end {
        let _: redis::Value = flusher
            .query(redis::cmd("SCRIPT").arg("FLUSH"))
            .await
            .expect("SCRIPT FLUSH");
        sleep(ms(20)).await;
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    assert!(total > 10, "setup: only {total} rounds");
}
