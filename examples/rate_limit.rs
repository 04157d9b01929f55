//! Two limits a worker pool needs against a partner API, shared by two clients (think: two
//! machines), and which primitive gives which:
//!
//! 1. **Concurrency cap** (a [`Semaphore`](redis_locks::Semaphore) of 3 permits): at most 3
//!    calls *run at once* across both clients, however long each takes.
//! 2. **Rate limit** (a [`RateLimiter`](redis_locks::RateLimiter) of 10 per second, burst 2):
//!    at most 10 calls *start* per second across both clients (and 2 at once after a quiet
//!    spell), admitted in arrival order, on the server's clock.
//!
//! Each part starts 6 jobs per client at once and prints when each call starts; the
//! concurrency part also prints how many are in flight, the rate part checks every window of
//! admissions against `burst + rate·t` on the server timestamps.
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

use redis_locks::{LockClient, Rate};
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

/// Part 1: a Semaphore caps how many calls run at once.
async fn concurrency_cap(clients: [&LockClient; 2]) -> redis_locks::Result<()> {
    println!(
        "1. concurrency cap: a Semaphore of {PERMITS} permits, at most {PERMITS} calls at once\n"
    );
    let gauge = Arc::new(Gauge::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (label, client) in ["A", "B"].into_iter().zip(clients) {
        let sem = client
            .semaphore("rate_limit:api-concurrency", PERMITS)
            .lease(Duration::from_secs(10));
        for job in 0..JOBS_PER_CLIENT {
            let (sem, gauge) = (sem.clone(), gauge.clone());
            tasks.push(tokio::spawn(async move {
                let permit = sem.acquire().await?;
                let at = started.elapsed().as_millis();
                let n = gauge.start();
                println!("{at:>5} ms  client {label} job {job}: call starts, {n} in flight");
                // The call itself.
                tokio::time::sleep(Duration::from_millis(150)).await;
                gauge.end();
                permit.release().await?;
                Ok::<_, redis_locks::Error>(())
            }));
        }
    }
    for task in tasks {
        task.await.expect("job task panicked")?;
    }
    let max = gauge.max.load(Ordering::SeqCst);
    println!("max concurrency observed: {max} (limit {PERMITS})\n");
    assert!(max <= PERMITS as usize, "the concurrency cap was exceeded");
    Ok(())
}

/// Part 2: a RateLimiter caps how many calls start per second.
async fn rate_limit(clients: [&LockClient; 2]) -> redis_locks::Result<()> {
    let rate = Rate::per_second(10).burst(2);
    println!("2. rate limit: a RateLimiter of 10 per second, burst 2 (calls may overlap)\n");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (label, client) in ["A", "B"].into_iter().zip(clients) {
        let limiter = client.rate_limiter("rate_limit:api-rate", rate);
        for job in 0..JOBS_PER_CLIENT {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                let admission = limiter.acquire(1).await?;
                let at = started.elapsed().as_millis();
                println!("{at:>5} ms  client {label} job {job}: call starts");
                Ok::<_, redis_locks::Error>(admission.admitted_at_ms)
            }));
        }
    }
    let mut times = Vec::new();
    for task in tasks {
        times.push(task.await.expect("job task panicked")?);
    }
    times.sort_unstable();
    // Over every window of server time, at most burst + rate·t admissions.
    for (i, first) in times.iter().enumerate() {
        for (j, last) in times.iter().enumerate().skip(i) {
            let admitted = (j - i + 1) as u64;
            let bound = rate.burst_size() * 1000 + rate.count() * (last - first);
            assert!(admitted * 1000 <= bound, "the rate was exceeded");
        }
    }
    let span = times[times.len() - 1] - times[0];
    println!(
        "{} calls started over {span} ms of server time: within 10 per second, burst 2: ok",
        times.len()
    );
    Ok(())
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
            // Clones of one in-memory client share its state, as two processes share a Redis.
            let client = LockClient::in_memory();
            (client.clone(), client)
        }
    };
    concurrency_cap([&a, &b]).await?;
    rate_limit([&a, &b]).await?;
    Ok(())
}
