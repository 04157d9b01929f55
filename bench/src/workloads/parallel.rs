//! 64 tasks on distinct names through one connection: throughput and the server's share.

use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use crate::env::Env;
use crate::prim::{FloorPair, Prim};
use crate::probe::{cmdstat, own_cpu_secs, server_cpu_secs};
use crate::row::{Row, Target};
use crate::BoxResult;

pub async fn parallel(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "parallel";
    const TASKS: usize = 64;
    const PAIRS: usize = 150;
    // Baseline: the same 64 tasks, a trivial script through the same connection, as many
    // scripts as the pairs run (two per pair).
    let sha: String = env
        .raw
        .query(redis::cmd("SCRIPT").arg("LOAD").arg("return 1"))
        .await?;
    let b0 = cmdstat(&env.raw, "evalsha").await?;
    let (c0, s0) = (own_cpu_secs(), server_cpu_secs(&env.raw).await?);
    let mut set = JoinSet::new();
    let start = Instant::now();
    for _ in 0..TASKS {
        let raw = env.raw.clone();
        let sha = sha.clone();
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
    let evalsha_ops = (TASKS * 2 * PAIRS) as f64 / start.elapsed().as_secs_f64();
    let b1 = cmdstat(&env.raw, "evalsha").await?;
    let (c1, s1) = (own_cpu_secs(), server_cpu_secs(&env.raw).await?);
    let trivial_us = (b1.1 - b0.1) as f64 / (b1.0 - b0.0).max(1) as f64;

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
    let elapsed = start.elapsed();
    let pairs_per_s = (TASKS * PAIRS) as f64 / elapsed.as_secs_f64();
    let b2 = cmdstat(&env.raw, "evalsha").await?;
    let (c2, s2) = (own_cpu_secs(), server_cpu_secs(&env.raw).await?);

    // The floor: the same 64 tasks running the simplest owner-checked Lua pair.
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
    let floor_pairs_per_s = (TASKS * PAIRS) as f64 / floor_start.elapsed().as_secs_f64();
    let n_ops = (TASKS * 2 * PAIRS) as f64;
    let n_pairs = (TASKS * PAIRS) as f64;
    let pair_us = (b2.1 - b1.1) as f64 / (TASKS * PAIRS) as f64;
    // The share of the wall time the server spent inside the lock scripts: near 100% means
    // the single-threaded server, not the client or the connection, sets the pace.
    let busy = (b2.1 - b1.1) as f64 / (elapsed.as_secs_f64() * 1e6) * 100.0;
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
            (s2 - s1) * 1e6 / n_pairs,
            "usec",
        )
        .vs("server_cpu_usec_per_evalsha", (s1 - s0) * 1e6 / n_ops),
        Row::new(
            W,
            "client_cpu_usec_per_pair",
            (c2 - c1) * 1e6 / n_pairs,
            "usec",
        )
        .vs("client_cpu_usec_per_evalsha", (c1 - c0) * 1e6 / n_ops),
    ])
}
