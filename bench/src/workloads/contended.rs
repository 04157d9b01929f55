//! Tasks on two clients taking turns on one lock: hand-off gaps and fairness.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis_locks::LockClient;
use tokio::task::JoinSet;

use crate::env::Env;
use crate::prim::Prim;
use crate::probe::{ping_p50, wake_floor, WakeFloor};
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

/// How long each holder of these workloads holds (a tokio sleep: 1-2 ms).
pub const HOLD: Duration = Duration::from_millis(1);

/// The rows that put a hand-off p50 next to the wake-up floor (`floor`, taken with idle
/// sleeps of [`HOLD`]: every hand-off here starts after a hold).
pub fn wake_rows(w: &'static str, handoff_p50: f64, ping: f64, floor: &WakeFloor) -> [Row; 3] {
    [
        Row::new(w, "handoff_vs_wake_floor", handoff_p50, "ms")
            .vs("wake_floor_idle_p50_ms", floor.idle),
        Row::new(w, "wake_floor_p50_ms", floor.hot, "ms").vs("ping_p50_ms", ping),
        Row::new(w, "wake_floor_idle_p50_ms", floor.idle, "ms").vs("ping_p50_ms", ping),
    ]
}

pub struct Contended {
    pub gaps: Vec<f64>,
    /// Duration of the holders' `release()` calls (one round trip plus the script).
    pub releases: Vec<f64>,
    pub counts: Vec<usize>,
    pub elapsed: Duration,
}

/// `tasks` tasks on the two clients take turns on one lock, holding `hold` each time, until
/// `total` acquisitions were made. Hand-off gap: from a holder's `release()` call to the next
/// grant's return (matched in release order, which is grant order when every permit is busy).
pub async fn contend(
    make: impl Fn(&LockClient) -> Prim,
    env: &Env,
    tasks: usize,
    total: usize,
    hold: Duration,
) -> BoxResult<Contended> {
    let counter = Arc::new(AtomicUsize::new(0));
    let releases: Arc<StdMutex<VecDeque<Instant>>> = Arc::default();
    let gaps: Arc<StdMutex<Vec<f64>>> = Arc::default();
    let release_calls: Arc<StdMutex<Vec<f64>>> = Arc::default();
    let mut set = JoinSet::new();
    let start = Instant::now();
    for t in 0..tasks {
        let prim = make(env.clients()[t % 2]);
        let (counter, releases, gaps) = (counter.clone(), releases.clone(), gaps.clone());
        let release_calls = release_calls.clone();
        set.spawn(async move {
            let mut mine = 0usize;
            loop {
                let guard = prim.acquire().await?;
                let granted = Instant::now();
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let released = releases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pop_front();
                if n >= total {
                    guard.release().await?;
                    break;
                }
                if let Some(r) = released {
                    gaps.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(ms(granted - r));
                }
                mine += 1;
                tokio::time::sleep(hold).await;
                let release_start = Instant::now();
                releases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(release_start);
                guard.release().await?;
                release_calls
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(ms(release_start.elapsed()));
            }
            Ok::<usize, redis_locks::Error>(mine)
        });
    }
    let mut counts = Vec::new();
    while let Some(r) = set.join_next().await {
        counts.push(r??);
    }
    let elapsed = start.elapsed();
    let gaps = std::mem::take(&mut *gaps.lock().unwrap_or_else(|p| p.into_inner()));
    let release_calls =
        std::mem::take(&mut *release_calls.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Contended {
        gaps: sorted(gaps),
        releases: sorted(release_calls),
        counts,
        elapsed,
    })
}

pub async fn contended(env: &Env, run: usize, fair: bool) -> BoxResult<Vec<Row>> {
    let w: &'static str = if fair {
        "contended_fair"
    } else {
        "contended_mutex"
    };
    const TOTAL: usize = 2000;
    let ping = ping_p50(&env.raw, 1000).await?;
    let wake = wake_floor(&env.url, 1000, HOLD).await?;
    let name = format!("{w}-{run}");
    let c = contend(
        |client| {
            if fair {
                Prim::Fair(client.fair_lock(&name))
            } else {
                Prim::Mutex(client.mutex(&name))
            }
        },
        env,
        8,
        TOTAL,
        HOLD,
    )
    .await?;
    let min = c.counts.iter().copied().min().unwrap_or(0) as f64;
    let max = c.counts.iter().copied().max().unwrap_or(0) as f64;
    let mean = TOTAL as f64 / 8.0;
    let (tmin, tmax) = if fair {
        (Target::AtLeast(mean - 1.0), Target::AtMost(mean + 1.0))
    } else {
        (Target::None, Target::None)
    };
    let mut rows = vec![
        Row::new(w, "handoff_p50_ms", pct(&c.gaps, 0.5), "ms")
            .vs("ping_p50_ms", ping)
            .target(Target::RatioAtMost(1.6)),
        Row::new(w, "handoff_p99_ms", pct(&c.gaps, 0.99), "ms").vs("ping_p50_ms", ping),
        Row::new(w, "release_call_p50_ms", pct(&c.releases, 0.5), "ms").vs("ping_p50_ms", ping),
        Row::new(w, "per_task_min", min, "count").target(tmin),
        Row::new(w, "per_task_max", max, "count").target(tmax),
        Row::new(
            w,
            "acquisitions_per_s",
            TOTAL as f64 / c.elapsed.as_secs_f64(),
            "1/s",
        ),
    ];
    rows.extend(wake_rows(w, pct(&c.gaps, 0.5), ping, &wake));
    Ok(rows)
}
