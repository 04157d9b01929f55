//! Quickstart: take a mutex, a read lock and a fair lock, and show what they report.
//!
//! Uses `REDIS_URL` when set (e.g. `REDIS_URL=redis://127.0.0.1:6379/`), otherwise the
//! in-memory backend, and says which.
//!
//! ```sh
//! cargo run --example quickstart
//! ```

use std::time::Duration;

use redis_locks::{LockClient, WriteGuard};

#[tokio::main]
async fn main() -> redis_locks::Result<()> {
    let client = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            println!("backend: Redis at {url}");
            LockClient::connect(&url).await?
        }
        _ => {
            println!("backend: in-memory (set REDIS_URL to use a Redis server)");
            LockClient::in_memory()
        }
    };

    // A lease mutex: one holder at a time, a fencing token per acquisition.
    let mutex = client
        .mutex("quickstart:report")
        .lease(Duration::from_secs(10));
    let guard = mutex.lock().await?;
    println!(
        "mutex: held={} fencing_token={}",
        guard.is_held(),
        guard.fencing_token()
    );
    println!(
        "mutex: a second try_lock while held -> {}",
        if mutex.try_lock().await.is_ok() {
            "granted (bug!)"
        } else {
            "refused, as it should be"
        }
    );
    println!("mutex: released={}", guard.release().await?);

    // An RwLock: readers share, a writer excludes them, a write downgrades to a read.
    let rw = client.rwlock("quickstart:config");
    let r1 = rw.read().await?;
    let r2 = rw.read().await?;
    println!(
        "rwlock: two readers inside; try_write -> {}",
        if rw.try_write().await.is_ok() {
            "granted (bug!)"
        } else {
            "refused"
        }
    );
    r1.release().await?;
    r2.release().await?;
    let w = rw.write().await?;
    let fence = w.fencing_token();
    let r = WriteGuard::downgrade(w).await?;
    println!(
        "rwlock: wrote under fence {fence}, downgraded to a read with fence {}",
        r.fencing_token()
    );
    r.release().await?;

    // A FairLock: strict arrival order.
    let fair = client.fair_lock("quickstart:jobs");
    let first = fair.lock().await?;
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move { fair.lock().timeout(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let info = fair.inspect().await?;
    println!(
        "fair lock: {} holder, {} waiting",
        info.holders.len(),
        info.waiters.len()
    );
    first.release().await?;
    let second = waiter.await.expect("waiter task")?;
    println!(
        "fair lock: handed off to the waiter, fencing_token={}",
        second.fencing_token()
    );
    second.release().await?;
    println!("quickstart: ok");
    Ok(())
}
