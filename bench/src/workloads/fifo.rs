//! Waiters queued on a FairLock one after the other: grant order and hand-off overhead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::env::Env;
use crate::probe::ping_p50;
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

pub async fn fifo(env: &Env, run: usize, w: &'static str, hold: Duration) -> BoxResult<Vec<Row>> {
    const WAITERS: usize = 8;
    let name = format!("{w}-{run}");
    let ping = ping_p50(&env.raw, 500).await?;
    let fair = env.client.fair_lock(&name);
    // Warm-up on another name so the waiters' scripts and the channel path are hot.
    {
        let warm = env.client.fair_lock(&format!("{name}-warm"));
        warm.lock().await?.release().await?;
    }
    let first = fair.lock().await?;
    let t0 = Instant::now();
    let seq = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for i in 0..WAITERS {
        let fair = fair.clone();
        let seq = seq.clone();
        set.spawn(async move {
            tokio::time::sleep_until((t0 + Duration::from_millis(10 * (i as u64 + 1))).into())
                .await;
            let g = fair.lock().await?;
            let granted = Instant::now();
            let order = seq.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(hold).await;
            let hold_end = Instant::now();
            g.release().await?;
            Ok::<_, redis_locks::Error>((i, order, granted, hold_end))
        });
    }
    tokio::time::sleep_until((t0 + Duration::from_millis(200)).into()).await;
    let release_start = Instant::now();
    first.release().await?;
    let mut done = Vec::new();
    while let Some(r) = set.join_next().await {
        done.push(r??);
    }
    done.sort_by_key(|d| d.0);
    let inversions = inversions(&done);
    let first_grant = done.iter().map(|d| d.2).min().unwrap_or(release_start);
    let last_end = done.iter().map(|d| d.3).max().unwrap_or(release_start);
    let holds: f64 = done.iter().map(|d| ms(d.3 - d.2)).sum();
    let all_done = ms(last_end - release_start);
    let idle_ping = idle_ping_p50(env, hold).await?;
    let overhead_target = if hold < Duration::from_millis(10) {
        Target::AtMost(3.0)
    } else {
        Target::None
    };
    Ok(vec![
        Row::new(w, "inversions", inversions as f64, "count").target(Target::Equals(0.0)),
        Row::new(
            w,
            "release_to_first_grant_ms",
            ms(first_grant - release_start),
            "ms",
        )
        .vs("ping_p50_ms", ping),
        Row::new(w, "all_done_ms", all_done, "ms"),
        Row::new(w, "handoff_overhead_ms", all_done - holds, "ms").target(overhead_target),
        Row::new(w, "idle_ping_p50_ms", idle_ping, "ms").vs("ping_p50_ms", ping),
        Row::new(
            w,
            "handoff_overhead_per_handoff_ms",
            (all_done - holds) / WAITERS as f64,
            "ms",
        )
        .vs("idle_ping_p50_ms", idle_ping),
    ])
}

/// Pairs of waiters granted in the opposite order of their arrival; `done` is sorted by
/// arrival (`.0`), `.1` is the grant order.
fn inversions(done: &[(usize, usize, Instant, Instant)]) -> usize {
    let mut inversions = 0;
    for a in 0..done.len() {
        for b in a + 1..done.len() {
            if done[a].1 > done[b].1 {
                inversions += 1;
            }
        }
    }
    inversions
}

/// The same round trip as `ping`, but each one sent right after a sleep as long as a
/// hold, like every hand-off here: the runtime's threads are parked when it starts.
async fn idle_ping_p50(env: &Env, hold: Duration) -> BoxResult<f64> {
    let mut idle = Vec::with_capacity(50);
    for _ in 0..50 {
        tokio::time::sleep(hold).await;
        let t = Instant::now();
        let _: String = env.raw.query(&redis::cmd("PING")).await?;
        idle.push(ms(t.elapsed()));
    }
    Ok(pct(&sorted(idle), 0.5))
}
