//! Rate limit: two clients (think: two machines) share one Semaphore of 3 permits, so at
//! most 3 calls to a rate-limited API run at once across both, whatever each one wants.
//!
//! Each client starts 6 jobs at once; every job holds a permit for the duration of its
//! "API call". The example prints when calls start and end with the number in flight, and
//! the highest concurrency observed.
//!
//! With `REDIS_URL` set both clients are separate connections to that server; otherwise they
//! share one in-memory store. The output says which.
//!
//! ```sh
//! cargo run --example rate_limit
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example rate_limit
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::LockClient;
use tokio::time::Instant;

const PERMITS: u32 = 3;
const JOBS_PER_CLIENT: usize = 6;

/// Calls in flight right now, and the most seen at once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Gauge {
    fn start(&self) -> usize {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        n
    }

    fn end(&self) -> usize {
        self.now.fetch_sub(1, Ordering::SeqCst) - 1
    }
}

#[tokio::main]
async fn main() -> redis_locks::Result<()> {
    let (a, b) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            println!("backend: Redis at {url} (two connections)");
            (
                LockClient::connect(&url).await?,
                LockClient::connect(&url).await?,
            )
        }
        _ => {
            println!(
                "backend: in-memory, shared by both clients (set REDIS_URL to use a Redis server)"
            );
            // Clones of one in-memory client share its locks, as two processes share a Redis.
            let client = LockClient::in_memory();
            (client.clone(), client)
        }
    };
    let total = 2 * JOBS_PER_CLIENT;
    println!("{total} jobs on two clients, at most {PERMITS} at once (one Semaphore)\n");

    let gauge = Arc::new(Gauge::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (label, client) in [("A", &a), ("B", &b)] {
        let sem = client
            .semaphore("rate_limit:api", PERMITS)
            .lease(Duration::from_secs(10));
        for job in 0..JOBS_PER_CLIENT {
            let (sem, gauge) = (sem.clone(), gauge.clone());
            tasks.push(tokio::spawn(async move {
                let permit = sem.acquire().await?;
                let at = started.elapsed().as_millis();
                println!(
                    "{at:>5} ms  client {label} job {job}: call starts, {} in flight",
                    gauge.start()
                );
                // The rate-limited call.
                tokio::time::sleep(Duration::from_millis(150)).await;
                let left = gauge.end();
                let at = started.elapsed().as_millis();
                println!("{at:>5} ms  client {label} job {job}: call done, {left} in flight");
                permit.release().await?;
                Ok::<_, redis_locks::Error>(())
            }));
        }
    }
    for task in tasks {
        task.await.expect("job task panicked")?;
    }
    let max = gauge.max.load(Ordering::SeqCst);
    println!(
        "\nall {total} jobs done in {} ms; max concurrency observed: {max} (limit {PERMITS})",
        started.elapsed().as_millis()
    );
    assert!(max <= PERMITS as usize, "the limit was exceeded");
    Ok(())
}
