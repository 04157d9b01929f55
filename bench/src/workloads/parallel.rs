//! 64 tasks on distinct names through one connection: throughput and the server's share.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::env::Env;
use crate::prim::{FloorPair, Prim};
use crate::probe::{cmdstat, own_cpu_secs, server_cpu_secs};
use crate::row::{Row, Target};
use crate::BoxResult;

const W: &str = "parallel";
const TASKS: usize = 64;
const PAIRS: usize = 150;

/// The server's EVALSHA tally and both processes' CPU time, at one moment.
struct Snapshot {
    /// `(calls, usec)` of EVALSHA (`INFO commandstats`).
    evalsha: (u64, u64),
    client_cpu: f64,
    server_cpu: f64,
}

impl Snapshot {
    async fn take(env: &Env) -> BoxResult<Snapshot> {
        let evalsha = cmdstat(&env.raw, "evalsha").await?;
        let (client_cpu, server_cpu) = (own_cpu_secs(), server_cpu_secs(&env.raw).await?);
        Ok(Snapshot {
            evalsha,
            client_cpu,
            server_cpu,
        })
    }
}

pub async fn parallel(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    // Baseline: the same 64 tasks, a trivial script through the same connection, as many
    // scripts as the pairs run (two per pair).
    let sha: String = env
        .raw
        .query(redis::cmd("SCRIPT").arg("LOAD").arg("return 1"))
        .await?;
    let b0 = Snapshot::take(env).await?;
    let evalsha_ops = trivial_scripts(env, &sha).await?;
    let b1 = Snapshot::take(env).await?;
    let trivial_us =
        (b1.evalsha.1 - b0.evalsha.1) as f64 / (b1.evalsha.0 - b0.evalsha.0).max(1) as f64;

    let elapsed = mutex_pairs(env, run).await?;
    let pairs_per_s = (TASKS * PAIRS) as f64 / elapsed.as_secs_f64();
    let b2 = Snapshot::take(env).await?;

    let floor_pairs_per_s = floor_pairs(env, run).await?;
    let n_ops = (TASKS * 2 * PAIRS) as f64;
    let n_pairs = (TASKS * PAIRS) as f64;
    let pair_us = (b2.evalsha.1 - b1.evalsha.1) as f64 / (TASKS * PAIRS) as f64;
    // The share of the wall time the server spent inside the lock scripts: near 100% means
    // the single-threaded server, not the client or the connection, sets the pace.
    let busy = (b2.evalsha.1 - b1.evalsha.1) as f64 / (elapsed.as_secs_f64() * 1e6) * 100.0;
    Ok(vec![
        Row::new(W, "pairs_per_s", pairs_per_s, "1/s").vs("evalsha_ops_per_s", evalsha_ops),
        Row::new(W, "floor_pairs_per_s", floor_pairs_per_s, "1/s")
            .vs("evalsha_ops_per_s", evalsha_ops),
        Row::new(W, "pairs_vs_floor", pairs_per_s, "1/s")
            .vs("floor_pairs_per_s", floor_pairs_per_s)
            .target(Target::RatioAtLeast(0.6)),
        Row::new(W, "server_usec_per_pair", pair_us, "usec").vs("trivial_evalsha_usec", trivial_us),
        Row::new(W, "server_busy_pct", busy, "%"),
        Row::new(
            W,
            "server_cpu_usec_per_pair",
            (b2.server_cpu - b1.server_cpu) * 1e6 / n_pairs,
            "usec",
        )
        .vs(
            "server_cpu_usec_per_evalsha",
            (b1.server_cpu - b0.server_cpu) * 1e6 / n_ops,
        ),
        Row::new(
            W,
            "client_cpu_usec_per_pair",
            (b2.client_cpu - b1.client_cpu) * 1e6 / n_pairs,
            "usec",
        )
        .vs(
            "client_cpu_usec_per_evalsha",
            (b1.client_cpu - b0.client_cpu) * 1e6 / n_ops,
        ),
    ])
}

/// `TASKS` tasks each running the trivial script `sha` twice per pair; returns EVALSHA per s.
async fn trivial_scripts(env: &Env, sha: &str) -> BoxResult<f64> {
    let mut set = JoinSet::new();
    let start = Instant::now();
    for _ in 0..TASKS {
        let raw = env.raw.clone();
        let sha = sha.to_owned();
        set.spawn(async move {
            for _ in 0..2 * PAIRS {
                let _: i64 = raw.query(redis::cmd("EVALSHA").arg(&sha).arg(0)).await?;
            }
            Ok::<(), redis_locks::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok((TASKS * 2 * PAIRS) as f64 / start.elapsed().as_secs_f64())
}

/// `TASKS` tasks, each `PAIRS` Mutex pairs on a name of its own; returns the wall time.
async fn mutex_pairs(env: &Env, run: usize) -> BoxResult<Duration> {
    let mut set = JoinSet::new();
    let start = Instant::now();
    for t in 0..TASKS {
        let prim = Prim::Mutex(env.client.mutex(&format!("{W}-{run}-{t}")));
        set.spawn(async move {
            for _ in 0..PAIRS {
                prim.acquire().await?.release().await?;
            }
            Ok::<(), redis_locks::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(start.elapsed())
}

/// The floor: the same `TASKS` tasks running the simplest owner-checked Lua pair; returns
/// pairs per second.
async fn floor_pairs(env: &Env, run: usize) -> BoxResult<f64> {
    let floor = Arc::new(FloorPair::load(&env.raw).await?);
    let mut set = JoinSet::new();
    let floor_start = Instant::now();
    for t in 0..TASKS {
        let raw = env.raw.clone();
        let floor = floor.clone();
        let key = format!("{}:floor:{W}-{run}-{t}", env.prefix);
        set.spawn(async move {
            for _ in 0..PAIRS {
                floor
                    .pair(&raw, &key, "t")
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok((TASKS * PAIRS) as f64 / floor_start.elapsed().as_secs_f64())
}
