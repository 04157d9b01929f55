//! Many readers, an occasional writer refreshing a shared value: the RwLock with writer
//! preference. Readers keep reading back to back; when the writer asks, new readers wait, the
//! readers inside finish, the writer refreshes the value, and reading resumes.
//!
//! Uses `REDIS_URL` when set (the shared value lives in Redis then), otherwise the in-memory
//! backend.
//!
//! ```sh
//! cargo run --example config_cache
//! ```

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::LockClient;
use tokio::time::Instant;

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
    let lock = client.rwlock("config_cache:settings");
    // The "cache": a version number standing for the shared configuration.
    let version = Arc::new(AtomicU64::new(1));
    let reads = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let stop_at = start + Duration::from_millis(1500);

    let mut readers = Vec::new();
    for id in 0..6 {
        let (lock, version, reads) = (lock.clone(), version.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while Instant::now() < stop_at {
                let guard = lock.read().await?;
                let v = version.load(Ordering::SeqCst);
                if seen.last() != Some(&v) {
                    seen.push(v);
                }
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.release().await?;
            }
            Ok::<_, redis_locks::Error>((id, seen))
        }));
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let reads_before = reads.load(Ordering::SeqCst);
    let guard = lock.write().await?;
    let waited = asked.elapsed();
    let reads_during_wait = reads.load(Ordering::SeqCst) - reads_before;
    version.store(2, Ordering::SeqCst);
    println!(
        "writer: waited {:.1} ms for the readers inside to finish ({reads_during_wait} reads \
         completed meanwhile, all admitted before the writer asked); refreshed to version 2 under fence {}",
        waited.as_secs_f64() * 1000.0,
        guard.fencing_token()
    );
    guard.release().await?;

    for r in readers {
        let (id, seen) = r.await.expect("reader task")?;
        println!("reader {id}: saw versions {seen:?}");
    }
    println!(
        "{} reads in {:.1} s; with writer preference the writer was never starved",
        reads.load(Ordering::SeqCst),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
