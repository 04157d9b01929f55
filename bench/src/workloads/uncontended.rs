//! Uncontended acquire + release pairs of every primitive, next to PING, the floor pair and
//! rslock's pair.

use std::time::{Duration, Instant};

use rslock::LockManager;

use crate::env::Env;
use crate::prim::{pairs, FloorPair, Prim};
use crate::probe::{cmdstat, ping_p50};
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

const W: &str = "uncontended";
const BLOCK: usize = 100;
const BLOCKS: usize = 30;
/// The TTL of rslock's locks.
const RSLOCK_TTL: Duration = Duration::from_secs(10);

pub async fn uncontended(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let ping = ping_p50(&env.raw, 1000).await?;
    let prim = Prim::Mutex(env.client.mutex(&format!("{W}-{run}")));
    pairs(&prim, 100).await?; // warm-up: scripts loaded, connection hot
    let before = cmdstat(&env.raw, "evalsha").await?;
    let (_, elapsed) = pairs(&prim, 3000).await?;
    let after = cmdstat(&env.raw, "evalsha").await?;
    // Why a pair costs more than two PINGs: the server's own time running the two scripts.
    let server_us = (after.1 - before.1) as f64 / 3000.0;
    let on_runtime = engine_on_runtime(env)?;
    let prims = [
        ("mutex", prim, Some(1.1)),
        (
            "fair",
            Prim::Fair(env.client.fair_lock(&format!("{W}-{run}-fair"))),
            Some(1.2),
        ),
        (
            "read",
            Prim::Read(env.client.rwlock(&format!("{W}-{run}-read"))),
            Some(1.2),
        ),
        (
            "semaphore",
            Prim::Sem(env.client.semaphore(&format!("{W}-{run}-sem"), 4)),
            Some(1.2),
        ),
        // The same Mutex pair with the client's engine as a task of this runtime instead of
        // on a thread of its own: what the engine's thread costs a pair.
        (
            "mutex_engine_on_runtime",
            Prim::Mutex(on_runtime.mutex(&format!("{W}-{run}-on-runtime"))),
            None,
        ),
    ];
    for (_, prim, _) in &prims {
        pairs(prim, 100).await?;
    }
    let only: Vec<&Prim> = prims.iter().map(|(_, prim, _)| prim).collect();
    let samples = Alternated::sample(env, run, &only).await?;
    let floor_p50 = pct(&sorted(samples.floor), 0.5);
    let rslock = sorted(samples.rslock);
    let s = sorted(samples.prims[0].clone());
    let mut rows = vec![
        Row::new(W, "pair_p50_ms", pct(&s, 0.5), "ms")
            .vs("ping_p50_ms", ping)
            .target(Target::RatioAtMost(2.4)),
        Row::new(W, "floor_pair_p50_ms", floor_p50, "ms").vs("ping_p50_ms", ping),
        Row::new(W, "pair_vs_floor_p50", pct(&s, 0.5), "ms")
            .vs("floor_pair_p50_ms", floor_p50)
            .target(Target::RatioAtMost(1.1)),
        Row::new(W, "rslock_pair_p50_ms", pct(&rslock, 0.5), "ms").vs("ping_p50_ms", ping),
        Row::new(W, "pair_vs_rslock_p50", pct(&s, 0.5), "ms")
            .vs("rslock_pair_p50_ms", pct(&rslock, 0.5))
            .target(Target::RatioAtMost(1.1)),
        // What two scripts cost next to rslock's plain `SET NX PX` and one script: the bound
        // of any pair whose acquire must be a script (a fence, the waiters' flag).
        Row::new(W, "floor_vs_rslock_p50", floor_p50, "ms")
            .vs("rslock_pair_p50_ms", pct(&rslock, 0.5)),
        Row::new(W, "pair_p99_ms", pct(&s, 0.99), "ms").vs("ping_p50_ms", ping),
        Row::new(W, "pairs_per_s", 3000.0 / elapsed.as_secs_f64(), "1/s"),
        Row::new(W, "server_ms_per_pair", server_us / 1000.0, "ms").vs("ping_p50_ms", ping),
    ];
    for (i, (label, _, target)) in prims.iter().enumerate().skip(1) {
        let s = sorted(samples.prims[i].clone());
        let row = Row::new(W, format!("{label}_pair_p50_ms"), pct(&s, 0.5), "ms")
            .vs("floor_pair_p50_ms", floor_p50);
        rows.push(match target {
            Some(target) => row.target(Target::RatioAtMost(*target)),
            None => row,
        });
        rows.push(
            Row::new(W, format!("{label}_pair_p99_ms"), pct(&s, 0.99), "ms")
                .vs("floor_pair_p50_ms", floor_p50),
        );
    }
    Ok(rows)
}

/// A client on the bench's connection whose engine is a task of the current runtime instead
/// of a thread of its own.
fn engine_on_runtime(env: &Env) -> BoxResult<redis_locks::LockClient> {
    Ok(redis_locks::LockClient::builder()
        .prefix(&env.prefix)
        .engine_on_current_runtime(true)
        .store(std::sync::Arc::new(env.raw.clone()))?)
}

/// Pair latencies (ms) of the floor, of every primitive and of rslock, sampled in
/// alternating blocks of [`BLOCK`], so a drift of the machine during the run (other load, CPU
/// frequency, the runtime's threads parking) weighs on all alike.
struct Alternated {
    floor: Vec<f64>,
    prims: Vec<Vec<f64>>,
    rslock: Vec<f64>,
}

impl Alternated {
    async fn sample(env: &Env, run: usize, prims: &[&Prim]) -> BoxResult<Alternated> {
        // The floor of any Lua lease lock, on the locks' own connection.
        let floor = FloorPair::load(&env.raw).await?;
        let key = format!("{}:floor:{W}-{run}", env.prefix);
        // rslock's single-server lock on the same server (its own connection).
        let mut rslock = LockManager::new(vec![env.url.as_str()]);
        rslock.set_retry(1, Duration::from_millis(200));
        let rslock_key = format!("{}:rslock:{W}-{run}", env.prefix);
        rslock_pairs(&rslock, &rslock_key, 100).await?; // warm-up: connected, script loaded
        let mut out = Alternated {
            floor: Vec::with_capacity(BLOCK * BLOCKS),
            prims: vec![Vec::with_capacity(BLOCK * BLOCKS); prims.len()],
            rslock: Vec::with_capacity(BLOCK * BLOCKS),
        };
        for _ in 0..BLOCKS {
            for _ in 0..BLOCK {
                let t = Instant::now();
                floor.pair(&env.raw, &key, "t").await?;
                out.floor.push(ms(t.elapsed()));
            }
            for (i, prim) in prims.iter().enumerate() {
                let (s, _) = pairs(prim, BLOCK).await?;
                out.prims[i].extend(s);
            }
            out.rslock
                .extend(rslock_pairs(&rslock, &rslock_key, BLOCK).await?);
        }
        Ok(out)
    }
}

/// `n` rslock pairs on `key`: `lock` with a [`RSLOCK_TTL`] TTL (one attempt: the key is
/// private, so a refusal is an error), then `unlock`. Returns the pair latencies (ms).
async fn rslock_pairs(rslock: &LockManager, key: &str, n: usize) -> BoxResult<Vec<f64>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let lock = rslock.lock(key, RSLOCK_TTL).await?;
        rslock.unlock(&lock).await;
        samples.push(ms(t.elapsed()));
    }
    Ok(samples)
}
