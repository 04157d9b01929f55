//! Redis's CPU per call is the `duration` that `INFO commandstats` sums into `usec`. Every script
//! runs as EVALSHA, so commandstats lumps them together; and reading INFO between single calls
//! leaves each call running with cold caches (it measured about twice the in-loop cost). So the
//! per-call durations are read from the slow log with a threshold of 0 (the same `duration`,
//! one entry per call), the steps running back to back as they do in use, and attributed to
//! steps by their order. The slow log settings are restored afterwards.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Acquire, Claim, RedisStore, Request, Store};
use tokio::task::JoinSet;

use crate::env::{delete_lock_keys, Env};
use crate::probe::{config_get, config_set};
use crate::row::{Row, Target};
use crate::stats::median;
use crate::{BoxError, BoxResult};

/// Which step each EVALSHA (or SET/DEL) sent, in order; `None`: setup, not measured.
#[derive(Default)]
pub struct Steps(Vec<Option<usize>>);

/// Runs `$e` (exactly one command on the server), recording it as step `$i`.
macro_rules! step {
    ($steps:expr, $i:expr, $e:expr) => {{
        $steps.0.push($i);
        $e
    }};
}

pub async fn slowlog_reset(raw: &RedisStore) -> BoxResult<()> {
    let _: String = raw.query(redis::cmd("SLOWLOG").arg("RESET")).await?;
    Ok(())
}

/// Per-step medians (usec) of the calls named `cmds` logged since the last reset.
pub async fn slowlog_costs(
    raw: &RedisStore,
    cmds: &[&str],
    steps: &Steps,
    n_steps: usize,
) -> BoxResult<Vec<f64>> {
    let entries: Vec<redis::Value> = raw
        .query(redis::cmd("SLOWLOG").arg("GET").arg(1_000_000))
        .await?;
    let mut calls: Vec<(i64, i64)> = Vec::new();
    for e in &entries {
        let redis::Value::Array(fields) = e else {
            continue;
        };
        let (
            Some(redis::Value::Int(id)),
            Some(redis::Value::Int(usec)),
            Some(redis::Value::Array(args)),
        ) = (fields.first(), fields.get(2), fields.get(3))
        else {
            continue;
        };
        let name = match args.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_uppercase(),
            Some(redis::Value::SimpleString(s)) => s.to_uppercase(),
            _ => continue,
        };
        if cmds.contains(&name.as_str()) {
            calls.push((*id, *usec));
        }
    }
    calls.sort_unstable();
    if calls.len() != steps.0.len() {
        return Err(format!(
            "slow log holds {} {cmds:?} calls, the bench sent {} (another client on this server?)",
            calls.len(),
            steps.0.len()
        )
        .into());
    }
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); n_steps];
    for ((_, usec), step) in calls.iter().zip(steps.0.iter()) {
        if let Some(i) = step {
            per[*i].push(*usec as f64);
        }
    }
    Ok(per.into_iter().map(median).collect())
}

pub const LONG: Duration = Duration::from_secs(600);

pub fn long_claim(request: Request) -> Claim {
    request.claim(LONG, LONG)
}

pub const FAIR: Request = Request::FairLock;

/// Queues `k` waiters (refused, waiting claims with a long heartbeat) directly on the store.
pub async fn enqueue(
    store: &Arc<dyn Store>,
    keys: &LockKeys,
    request: Request,
    k: usize,
) -> BoxResult<Vec<Claim>> {
    const WORKERS: usize = 32;
    let mut set = JoinSet::new();
    for w in 0..WORKERS {
        let share = k / WORKERS + usize::from(w < k % WORKERS);
        let (store, keys) = (store.clone(), keys.clone());
        set.spawn(async move {
            let mut mine = Vec::with_capacity(share);
            for _ in 0..share {
                let c = long_claim(request);
                match store.acquire(&keys, &c, true, None).await? {
                    Acquire::Busy(_) => mine.push(c),
                    Acquire::Granted(_) => return Err("a background waiter was granted".into()),
                }
            }
            Ok::<Vec<Claim>, BoxError>(mine)
        });
    }
    let mut all = Vec::with_capacity(k);
    while let Some(r) = set.join_next().await {
        all.extend(r??);
    }
    Ok(all)
}

pub fn expect_granted(a: Acquire, what: &str) -> BoxResult<()> {
    match a {
        Acquire::Granted(_) => Ok(()),
        Acquire::Busy(_) => Err(format!("{what}: expected a grant").into()),
    }
}

/// Steps of the FairLock (queue_* scripts) and of the Mutex (rw_* scripts), in table order.
pub const FAIR_OPS: [&str; 6] = [
    "fair_acquire_join",
    "fair_acquire_heartbeat",
    "fair_release_leave",
    "fair_extend",
    "fair_release",
    "fair_acquire_grant",
];
pub const MUTEX_OPS: [&str; 5] = [
    "mutex_acquire_wait",
    "mutex_release_leave",
    "mutex_extend",
    "mutex_release",
    "mutex_acquire_grant",
];
/// Waiters queued behind the holder. 1 shows what a hand-off itself costs, next to 0 (no one
/// to hand off to) and the long queues.
pub const SIZES: [usize; 4] = [0, 1, 1000, 10000];
pub const COST_SAMPLES: usize = 100;

pub async fn fair_costs(env: &Env, name: &str, k: usize) -> BoxResult<Vec<f64>> {
    let raw = &env.raw;
    let store = env.client.store();
    let keys = env.client.keys(name)?;
    let mut holder = long_claim(FAIR);
    expect_granted(store.acquire(&keys, &holder, true, None).await?, "holder")?;
    let mut queued: HashMap<String, Claim> = enqueue(store, &keys, FAIR, k)
        .await?
        .into_iter()
        .map(|c| (c.token.clone(), c))
        .collect();
    let mut steps = Steps::default();
    slowlog_reset(raw).await?;
    for _ in 0..COST_SAMPLES {
        let j = long_claim(FAIR);
        step!(steps, Some(0), store.acquire(&keys, &j, true, None).await?);
        step!(steps, Some(1), store.acquire(&keys, &j, true, None).await?);
        step!(steps, Some(2), store.release(&keys, &j, None).await?);
        step!(
            steps,
            Some(3),
            store.extend(&keys, &holder, LONG, None).await?
        );
        // Releasing hands the lock to the head of the queue (if any), which then claims it.
        step!(steps, Some(4), store.release(&keys, &holder, None).await?);
        let next = if k == 0 {
            long_claim(FAIR)
        } else {
            let h: Vec<String> = raw
                .query(redis::cmd("ZRANGE").arg(keys.key("h")).arg(0).arg(-1))
                .await?;
            let token = h.first().ok_or("nobody was promoted")?;
            queued
                .remove(token)
                .ok_or("the promoted waiter is not ours")?
        };
        let granted = step!(
            steps,
            Some(5),
            store.acquire(&keys, &next, true, None).await?
        );
        expect_granted(granted, "fair_acquire_grant")?;
        holder = next;
        if k > 0 {
            // Keep the queue at k waiters.
            let c = long_claim(FAIR);
            step!(steps, None, store.acquire(&keys, &c, true, None).await?);
            queued.insert(c.token.clone(), c);
        }
    }
    let costs = slowlog_costs(raw, &["EVALSHA"], &steps, FAIR_OPS.len()).await?;
    delete_lock_keys(env, &keys).await?;
    Ok(costs)
}

pub async fn mutex_costs(env: &Env, name: &str, k: usize) -> BoxResult<Vec<f64>> {
    let raw = &env.raw;
    let store = env.client.store();
    let keys = env.client.keys(name)?;
    let mut holder = long_claim(Request::Mutex);
    expect_granted(store.acquire(&keys, &holder, true, None).await?, "holder")?;
    // Waiting mutex claims announce themselves in the waiting-writer set.
    let mut waiting = enqueue(store, &keys, Request::Mutex, k).await?;
    let mut steps = Steps::default();
    slowlog_reset(raw).await?;
    for _ in 0..COST_SAMPLES {
        let j = long_claim(Request::Mutex);
        step!(steps, Some(0), store.acquire(&keys, &j, true, None).await?);
        step!(steps, Some(1), store.release(&keys, &j, None).await?);
        step!(
            steps,
            Some(2),
            store.extend(&keys, &holder, LONG, None).await?
        );
        step!(steps, Some(3), store.release(&keys, &holder, None).await?);
        // The release handed the lock to the first waiting writer (earliest heartbeat
        // deadline), which now claims it; with nobody waiting a newcomer takes it.
        // Read with a plain GET (not a script, so it stays out of the measured steps).
        let record: Option<String> = raw.query(redis::cmd("GET").arg(keys.key("w"))).await?;
        let handed = record.and_then(|r| r.split_once('|').map(|(_, t)| t.to_owned()));
        let next = match handed.and_then(|t| waiting.iter().position(|c| c.token == t)) {
            Some(i) => waiting.remove(i),
            None => long_claim(Request::Mutex),
        };
        let granted = step!(
            steps,
            Some(4),
            store.acquire(&keys, &next, true, None).await?
        );
        expect_granted(granted, "mutex_acquire_grant")?;
        holder = next;
        if k > 0 {
            let c = long_claim(Request::Mutex);
            step!(steps, None, store.acquire(&keys, &c, true, None).await?);
            waiting.insert(0, c);
        }
    }
    let costs = slowlog_costs(raw, &["EVALSHA"], &steps, MUTEX_OPS.len()).await?;
    delete_lock_keys(env, &keys).await?;
    Ok(costs)
}

pub async fn server_cost(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let raw = &env.raw;
    let saved = (
        config_get(raw, "slowlog-log-slower-than").await?,
        config_get(raw, "slowlog-max-len").await?,
    );
    config_set(raw, "slowlog-log-slower-than", "0").await?;
    config_set(raw, "slowlog-max-len", "100000").await?;
    let result = server_cost_steps(env, run).await;
    config_set(raw, "slowlog-log-slower-than", &saved.0).await?;
    config_set(raw, "slowlog-max-len", &saved.1).await?;
    slowlog_reset(raw).await?;
    result
}

pub async fn server_cost_steps(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "server_cost";
    let raw = &env.raw;
    // Warm-up: every script used below is loaded, so no sample pays a NOSCRIPT round.
    // (The slow log then also holds the failed EVALSHA of each reload, so the warm-up's own
    // tally cannot match; a real error shows again in the measured calls below.)
    let _ = fair_costs(env, &format!("{W}-{run}-warm-fair"), 0).await;
    let _ = mutex_costs(env, &format!("{W}-{run}-warm-mutex"), 0).await;

    // The plain-key lock, for comparison: SET NX PX to take it, DEL to drop it.
    let key = format!("{}:bench-plain-key-{run}", env.prefix);
    let mut steps = Steps::default();
    slowlog_reset(raw).await?;
    for _ in 0..COST_SAMPLES {
        let _: Option<String> = step!(
            steps,
            Some(0),
            raw.query(
                redis::cmd("SET")
                    .arg(&key)
                    .arg("0123456789abcdef0123456789abcdef")
                    .arg("NX")
                    .arg("PX")
                    .arg(30000)
            )
            .await?
        );
        let _: i64 = step!(
            steps,
            Some(1),
            raw.query(redis::cmd("DEL").arg(&key)).await?
        );
    }
    let plain = slowlog_costs(raw, &["SET", "DEL"], &steps, 2).await?;
    let (set_us, del_us) = (plain[0], plain[1]);

    let mut by_size: Vec<Vec<f64>> = Vec::new();
    for k in SIZES {
        let mut v = fair_costs(env, &format!("{W}-{run}-fair-{k}"), k).await?;
        v.extend(mutex_costs(env, &format!("{W}-{run}-mutex-{k}"), k).await?);
        by_size.push(v);
    }
    let mut rows = vec![
        Row::new(W, "usec_per_call.set_nx_px", set_us, "usec"),
        Row::new(W, "usec_per_call.del", del_us, "usec"),
    ];
    let ops: Vec<&str> = FAIR_OPS.iter().chain(MUTEX_OPS.iter()).copied().collect();
    for (i, op) in ops.iter().enumerate() {
        let zero = by_size[0][i];
        for (s, k) in SIZES.iter().enumerate() {
            let metric = format!("usec_per_call.{op}.q{k}");
            let v = by_size[s][i];
            let row = match k {
                0 if op.contains("release") => {
                    Row::new(W, metric, v, "usec").vs("usec_per_call.del", del_us)
                }
                0 => Row::new(W, metric, v, "usec").vs("usec_per_call.set_nx_px", set_us),
                10000 => Row::new(W, metric, v, "usec")
                    .vs(format!("usec_per_call.{op}.q0"), zero)
                    .target(Target::RatioAtMost(2.0)),
                _ => Row::new(W, metric, v, "usec").vs(format!("usec_per_call.{op}.q0"), zero),
            };
            rows.push(row);
        }
    }
    Ok(rows)
}

/// After the runs are merged: the worst 10k/0 ratio of any step, as one row.
pub fn server_cost_summary(rows: &[Row]) -> Option<Row> {
    let worst = rows
        .iter()
        .filter(|r| r.workload == "server_cost" && r.metric.ends_with(".q10000"))
        .filter_map(|r| r.ratio().map(|x| (x, r.metric.clone())))
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some(Row::new("server_cost", "max_ratio_10k_0", worst.0, "ratio").target(Target::AtMost(2.0)))
}
