//! Uncontended acquire + release pairs of every primitive, next to PING and the floor pair.

use std::time::Instant;

use crate::env::Env;
use crate::prim::{pairs, FloorPair, Prim};
use crate::probe::{cmdstat, ping_p50};
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

pub async fn uncontended(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "uncontended";
    const BLOCK: usize = 100;
    const BLOCKS: usize = 30;
    let ping = ping_p50(&env.raw, 1000).await?;
    let prim = Prim::Mutex(env.client.mutex(&format!("{W}-{run}")));
    pairs(&prim, 100).await?; // warm-up: scripts loaded, connection hot
    let before = cmdstat(&env.raw, "evalsha").await?;
    let (_, elapsed) = pairs(&prim, 3000).await?;
    let after = cmdstat(&env.raw, "evalsha").await?;
    // Why a pair costs more than two PINGs: the server's own time running the two scripts.
    let server_us = (after.1 - before.1) as f64 / 3000.0;
    // The floor of any Lua lease lock on the same connection. Its pairs and every
    // primitive's pairs run in alternating blocks of 100, so a drift of the machine during
    // the run (other load, CPU frequency, the runtime's threads parking) weighs on all alike.
    let floor = FloorPair::load(&env.raw).await?;
    let key = format!("{}:floor:{W}-{run}", env.prefix);
    let prims = [
        ("mutex", prim, 1.1),
        (
            "fair",
            Prim::Fair(env.client.fair_lock(&format!("{W}-{run}-fair"))),
            1.2,
        ),
        (
            "read",
            Prim::Read(env.client.rwlock(&format!("{W}-{run}-read"))),
            1.2,
        ),
        (
            "semaphore",
            Prim::Sem(env.client.semaphore(&format!("{W}-{run}-sem"), 4)),
            1.2,
        ),
    ];
    for (_, prim, _) in &prims {
        pairs(prim, 100).await?;
    }
    let mut floor_samples = Vec::with_capacity(BLOCK * BLOCKS);
    let mut samples = vec![Vec::with_capacity(BLOCK * BLOCKS); prims.len()];
    for _ in 0..BLOCKS {
        for _ in 0..BLOCK {
            let t = Instant::now();
            floor.pair(&env.raw, &key, "t").await?;
            floor_samples.push(ms(t.elapsed()));
        }
        for (i, (_, prim, _)) in prims.iter().enumerate() {
            let (s, _) = pairs(prim, BLOCK).await?;
            samples[i].extend(s);
        }
    }
    let floor_p50 = pct(&sorted(floor_samples), 0.5);
    let s = sorted(samples[0].clone());
    let mut rows = vec![
        Row::new(W, "pair_p50_ms", pct(&s, 0.5), "ms")
            .vs("ping_p50_ms", ping)
            .target(Target::RatioAtMost(2.4)),
        Row::new(W, "floor_pair_p50_ms", floor_p50, "ms").vs("ping_p50_ms", ping),
        Row::new(W, "pair_vs_floor_p50", pct(&s, 0.5), "ms")
            .vs("floor_pair_p50_ms", floor_p50)
            .target(Target::RatioAtMost(1.1)),
        Row::new(W, "pair_p99_ms", pct(&s, 0.99), "ms").vs("ping_p50_ms", ping),
        Row::new(W, "pairs_per_s", 3000.0 / elapsed.as_secs_f64(), "1/s"),
        Row::new(W, "server_ms_per_pair", server_us / 1000.0, "ms").vs("ping_p50_ms", ping),
    ];
    for (i, (label, _, target)) in prims.iter().enumerate().skip(1) {
        let s = sorted(samples[i].clone());
        rows.push(
            Row::new(W, format!("{label}_pair_p50_ms"), pct(&s, 0.5), "ms")
                .vs("floor_pair_p50_ms", floor_p50)
                .target(Target::RatioAtMost(*target)),
        );
        rows.push(
            Row::new(W, format!("{label}_pair_p99_ms"), pct(&s, 0.99), "ms")
                .vs("floor_pair_p50_ms", floor_p50),
        );
    }
    Ok(rows)
}
