//! The rate limiter: an uncontended decision next to the floor pair (sampled in alternating
//! blocks), admissions per second under 64 tasks on two clients against the configured rate
//! (on the server's timestamps), the most any window of server time exceeded
//! `burst + rate·t` by, FIFO inversions among 64 queued waiters, and the worst wait of a
//! waiter against its position × the period per admission.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_locks::{Rate, RateLimiter};

use crate::env::Env;
use crate::prim::FloorPair;
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

const W: &str = "rate";
const BLOCK: usize = 100;
const BLOCKS: usize = 20;
const TASKS: usize = 64;

pub async fn rate(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let (decision, floor) = decision_vs_floor(env, run).await?;
    let mut rows = vec![
        Row::new(W, "floor_pair_p50_ms", floor, "ms"),
        Row::new(W, "decision_p50_ms", decision, "ms")
            .vs("floor_pair_p50_ms", floor)
            .target(Target::RatioAtMost(0.75)),
    ];
    rows.extend(throughput(env, run).await?);
    rows.extend(fifo(env, run).await?);
    Ok(rows)
}

/// p50 (ms) of one uncontended `try_acquire` (one script step) and of the floor pair (two
/// trivial scripts), in alternating blocks.
async fn decision_vs_floor(env: &Env, run: usize) -> BoxResult<(f64, f64)> {
    let limiter = env
        .client
        .rate_limiter(&format!("{W}-{run}-free"), Rate::per_second(1_000_000));
    let floor = FloorPair::load(&env.raw).await?;
    let key = format!("{}:floor:{W}-{run}", env.prefix);
    for _ in 0..BLOCK {
        limiter.try_acquire(1).await?;
    }
    let (mut d, mut f) = (Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        for _ in 0..BLOCK {
            let t = Instant::now();
            floor.pair(&env.raw, &key, "t").await?;
            f.push(ms(t.elapsed()));
        }
        for _ in 0..BLOCK {
            let t = Instant::now();
            limiter.try_acquire(1).await?;
            d.push(ms(t.elapsed()));
        }
    }
    Ok((pct(&sorted(d), 0.5), pct(&sorted(f), 0.5)))
}

/// 64 tasks on two clients acquire one admission each, in a loop, until 600 were admitted:
/// the admission rate on the server's timestamps (beyond the first burst) against the
/// configured one, and the most any window exceeded its bound by.
async fn throughput(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const TOTAL: usize = 600;
    let rate = Rate::per_second(200).burst(10);
    let name = format!("{W}-{run}-throughput");
    let limiters: Vec<RateLimiter> = env
        .clients()
        .iter()
        .map(|c| c.rate_limiter(&name, rate))
        .collect();
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (limiter, admitted) = (limiters[i % 2].clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            while admitted.fetch_add(1, Ordering::SeqCst) < TOTAL {
                times.push(limiter.acquire(1).await?.admitted_at_ms);
            }
            Ok::<_, redis_locks::Error>(times)
        }));
    }
    let mut times = Vec::new();
    for task in tasks {
        times.extend(task.await??);
    }
    times.sort_unstable();
    let span_ms = (times[times.len() - 1] - times[0]) as f64;
    let beyond_burst = (times.len() as u64 - rate.burst_size()) as f64;
    let per_s = beyond_burst * 1000.0 / span_ms;
    Ok(vec![
        Row::new(W, "configured_per_s", rate.count() as f64, "1/s"),
        Row::new(W, "admissions_per_s_64_tasks", per_s, "1/s")
            .vs("configured_per_s", rate.count() as f64)
            .target(Target::RatioAtLeast(0.99)),
        Row::new(
            W,
            "window_excess_max",
            window_excess(&times, rate) as f64,
            "admissions",
        )
        .target(Target::AtMost(0.0)),
    ])
}

/// The most admissions any window `[a_i, a_j]` held beyond `burst + count·(a_j − a_i)/period`
/// (0 when the bound held everywhere).
fn window_excess(sorted_times: &[u64], rate: Rate) -> u64 {
    let mut worst = 0;
    for i in 0..sorted_times.len() {
        for j in i..sorted_times.len() {
            let admitted = (j - i + 1) as u64;
            let allowed = rate.burst_size()
                + rate.count() * (sorted_times[j] - sorted_times[i]) / rate.period_ms();
            worst = worst.max(admitted.saturating_sub(allowed));
        }
    }
    worst
}

/// 64 waiters on two clients, each started once the previous one is queued (or admitted):
/// admissions out of arrival order, and the worst wait against (waiters ahead + 1) × period
/// per admission.
async fn fifo(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let rate = Rate::per_second(100).burst(1);
    let name = format!("{W}-{run}-fifo");
    let limiters: Vec<RateLimiter> = env
        .clients()
        .iter()
        .map(|c| c.rate_limiter(&name, rate))
        .collect();
    limiters[0].try_acquire(1).await.ok();
    let done = Arc::new(AtomicUsize::new(0));
    let (mut tasks, mut arrivals) = (Vec::new(), Vec::new());
    for i in 0..TASKS {
        let (limiter, d) = (limiters[i % 2].clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let admission = limiter.acquire(1).await?;
            d.fetch_add(1, Ordering::SeqCst);
            Ok::<_, redis_locks::Error>((admission.admitted_at_ms, Instant::now()))
        }));
        // Arrived (queued or admitted): note when, and how many wait ahead.
        let ahead = loop {
            let waiting = limiters[0].inspect().await?.waiters.len();
            if waiting + done.load(Ordering::SeqCst) > i {
                break waiting.saturating_sub(1);
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        arrivals.push((Instant::now(), ahead));
    }
    let per_admission_ms = rate.period_ms() as f64 / rate.count() as f64;
    let (mut inversions, mut last_at, mut worst) = (0u64, 0u64, 0f64);
    for (task, (arrived, ahead)) in tasks.into_iter().zip(arrivals) {
        let (at, admitted) = task.await??;
        if at < last_at {
            inversions += 1;
        }
        last_at = last_at.max(at);
        let waited = admitted.saturating_duration_since(arrived);
        worst = worst.max(ms(waited) / ((ahead + 1) as f64 * per_admission_ms));
    }
    Ok(vec![
        Row::new(W, "fifo_inversions_64_waiters", inversions as f64, "count")
            .target(Target::Equals(0.0)),
        Row::new(W, "worst_wait_over_position_x_period", worst, "ratio")
            .target(Target::AtMost(1.5)),
    ])
}
