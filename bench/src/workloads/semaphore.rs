//! Semaphore pairs next to Mutex pairs, and hand-offs between tasks on a full Semaphore.

use crate::env::Env;
use crate::prim::{pairs, Prim};
use crate::probe::{ping_p50, wake_floor};
use crate::row::{Row, Target};
use crate::stats::pct;
use crate::workloads::contended::{contend, wake_rows, HOLD};
use crate::BoxResult;

pub async fn semaphore(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "semaphore";
    let ping = ping_p50(&env.raw, 1000).await?;
    let wake = wake_floor(&env.url, 1000, HOLD).await?;
    let mutex = Prim::Mutex(env.client.mutex(&format!("{W}-{run}-mutex")));
    let sem = Prim::Sem(env.client.semaphore(&format!("{W}-{run}-sem"), 4));
    pairs(&mutex, 100).await?;
    pairs(&sem, 100).await?;
    let (m, _) = pairs(&mutex, 2000).await?;
    let (s, s_elapsed) = pairs(&sem, 2000).await?;
    let name = format!("{W}-{run}-contended");
    const TOTAL: usize = 1000;
    let c = contend(
        |client| Prim::Sem(client.semaphore(&name, 2)),
        env,
        8,
        TOTAL,
        HOLD,
    )
    .await?;
    let mut rows = vec![
        Row::new(W, "pair_p50_ms", pct(&s, 0.5), "ms").vs("mutex_pair_p50_ms", pct(&m, 0.5)),
        Row::new(W, "pairs_per_s", 2000.0 / s_elapsed.as_secs_f64(), "1/s"),
        Row::new(W, "handoff_p50_ms", pct(&c.gaps, 0.5), "ms")
            .vs("ping_p50_ms", ping)
            .target(Target::RatioAtMost(3.0)),
        Row::new(W, "handoff_p99_ms", pct(&c.gaps, 0.99), "ms").vs("ping_p50_ms", ping),
        Row::new(W, "release_call_p50_ms", pct(&c.releases, 0.5), "ms").vs("ping_p50_ms", ping),
        Row::new(
            W,
            "acquisitions_per_s",
            TOTAL as f64 / c.elapsed.as_secs_f64(),
            "1/s",
        ),
    ];
    rows.extend(wake_rows(W, pct(&c.gaps, 0.5), ping, &wake));
    Ok(rows)
}
