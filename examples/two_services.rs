//! Two services, one lock store, no Redis: how to test code that coordinates across
//! processes in a single test binary.
//!
//! Each "service" has its own [`LockClient`] (with its own label), made from one shared
//! [`InMemory`] store, exactly as two processes would each connect to the same Redis. They
//! contend for a `Mutex` (a nightly report that must run once at a time) and a `FairLock`
//! (jobs claimed in arrival order); the example checks that they never hold either at the
//! same time, and exits non-zero if they did.
//!
//! Two `LockClient::in_memory()` clients would *not* exclude each other: each has a store of
//! its own.
//!
//! ```sh
//! cargo run --example two_services
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::{InMemory, LockClient};

const ROUNDS: u32 = 20;

/// How many services are inside the critical section of one lock right now.
#[derive(Default)]
struct Inside(AtomicU32);

impl Inside {
    fn enter(&self, who: &str, lock: &str) {
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        assert_eq!(
            before, 0,
            "{who} entered `{lock}` while the other service held it"
        );
    }

    fn leave(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One service: runs the report under the mutex and claims a job under the fair lock,
/// `ROUNDS` times each.
async fn service(
    who: &'static str,
    client: LockClient,
    report: Arc<Inside>,
    jobs: Arc<Inside>,
) -> redis_locks::Result<()> {
    for _ in 0..ROUNDS {
        let guard = client.mutex("nightly-report").lock().await?;
        report.enter(who, "nightly-report");
        tokio::time::sleep(Duration::from_millis(2)).await;
        report.leave();
        guard.release().await?;

        let guard = client.fair_lock("jobs").lock().await?;
        jobs.enter(who, "jobs");
        tokio::time::sleep(Duration::from_millis(2)).await;
        jobs.leave();
        guard.release().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> redis_locks::Result<()> {
    // One store, two clients: as two services connected to one Redis server.
    let store = InMemory::new();
    let billing = store.client("billing")?;
    let reports = store.client("reports")?;

    // While one service holds a lock, the other is refused it...
    let held = billing.mutex("nightly-report").lock().await?;
    let refused = reports.mutex("nightly-report").try_lock().await;
    assert!(
        refused.is_err_and(|e| e.is_would_block()),
        "reports got a held mutex"
    );
    let info = reports.mutex("nightly-report").inspect().await?;
    println!("nightly-report held by {:?}", info.holders[0].label);
    held.release().await?;

    let held = reports.fair_lock("jobs").lock().await?;
    let refused = billing.fair_lock("jobs").try_lock().await;
    assert!(
        refused.is_err_and(|e| e.is_would_block()),
        "billing got a held fair lock"
    );
    held.release().await?;

    // ... and when both wait for the locks in a loop, they never hold one at the same time.
    let (report, jobs) = (Arc::new(Inside::default()), Arc::new(Inside::default()));
    let a = tokio::spawn(service("billing", billing, report.clone(), jobs.clone()));
    let b = tokio::spawn(service("reports", reports, report, jobs));
    a.await.expect("billing task")?;
    b.await.expect("reports task")?;
    println!("two services: {ROUNDS} rounds each, never inside a lock together: ok");
    Ok(())
}
