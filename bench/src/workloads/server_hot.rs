//! The server's steady-state cost per call of each script path: every step runs on many names
//! at once, pipelined on the locks' own connection (as a busy service sends them), and the cost
//! is the `EVALSHA` time `INFO commandstats` adds up, divided by the calls. Next to each path,
//! the floor script it competes with (the `SET NX PX` script for an acquire or an extend, the
//! owner-checked `DEL` script for a release), measured the same way in the same run. The
//! `server_cost` rows are the cold side: single calls after a round trip of idling.

use std::sync::Arc;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Acquire, Claim, RedisStore, Request, Store};
use tokio::task::JoinSet;

use crate::env::{delete_lock_keys, Env};
use crate::prim::FloorPair;
use crate::probe::cmdstats;
use crate::row::{Row, Target};
use crate::workloads::server_cost::{expect_granted, long_claim, FAIR, LONG};
use crate::{BoxError, BoxResult};

/// Names per path; every step runs once on each.
pub const HOT_NAMES: usize = 2000;
/// Names per path under callgrind (`--instructions`), whose counts need no large sample.
pub const CALLGRIND_NAMES: usize = 200;
/// Calls in flight at once.
pub const HOT_DEPTH: usize = 128;

/// What a batch of steps cost the server, per call of the command that sent them: µs (the
/// command's time in `INFO commandstats`), and the commands the scripts ran inside it (every
/// other command those statistics counted meanwhile: a script's commands count under their
/// own names; only this bench talks to the server, and its `INFO` reads are left out). The
/// command count does not move with the machine's load, the µs do.
#[derive(Clone, Copy, Debug)]
pub struct Hot {
    pub usec: f64,
    pub commands: f64,
    /// The instructions the server executed per call, when it runs under callgrind
    /// (`--instructions`, `callgrind.rs`).
    pub instructions: Option<f64>,
}

/// Runs `step` on every item, `HOT_DEPTH` at a time, and returns its cost per `EVALSHA`.
pub async fn hot<T, F, Fut>(raw: &RedisStore, items: &[T], step: F) -> BoxResult<Hot>
where
    T: Clone + Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = BoxResult<()>> + Send + 'static,
{
    hot_of(raw, "evalsha", items, step).await
}

/// [`hot`] for steps sent as command `cmd` (lower case, as `INFO commandstats` names it).
pub async fn hot_of<T, F, Fut>(raw: &RedisStore, cmd: &str, items: &[T], step: F) -> BoxResult<Hot>
where
    T: Clone + Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = BoxResult<()>> + Send + 'static,
{
    let before = cmdstats(raw).await?;
    crate::callgrind::zero()?;
    for chunk in items.chunks(HOT_DEPTH) {
        let mut set = JoinSet::new();
        for item in chunk {
            set.spawn(step(item.clone()));
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
    }
    let instructions = crate::callgrind::dump()?;
    let after = cmdstats(raw).await?;
    let of = |stats: &std::collections::HashMap<String, (u64, u64)>, name: &str| {
        stats.get(name).copied().unwrap_or((0, 0))
    };
    let (b, a) = (of(&before, cmd), of(&after, cmd));
    let calls = a.0.saturating_sub(b.0);
    if calls < items.len() as u64 {
        return Err(format!("{calls} {cmd} calls for {} steps", items.len()).into());
    }
    let inner: u64 = after
        .iter()
        .filter(|(name, _)| name.as_str() != cmd && name.as_str() != "info")
        .map(|(name, stat)| stat.0.saturating_sub(of(&before, name).0))
        .sum();
    Ok(Hot {
        usec: (a.1 - b.1) as f64 / calls as f64,
        commands: inner as f64 / calls as f64,
        instructions: instructions.map(|n| n as f64 / calls as f64),
    })
}

const W: &str = "server_hot";

pub async fn server_hot(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let raw = env.raw.clone();
    let store = env.client.store().clone();
    let names = if crate::callgrind::active() {
        CALLGRIND_NAMES
    } else {
        HOT_NAMES
    };
    let keys_for = |kind: &str| -> BoxResult<Vec<LockKeys>> {
        (0..names)
            .map(|i| Ok(env.client.keys(&format!("{W}-{run}-{kind}-{i}"))?))
            .collect()
    };

    // Floor: the SET NX PX script, then the owner-checked DEL script, on distinct keys.
    let floor_keys: Vec<String> = (0..names)
        .map(|i| format!("{}:floor-hot-{run}-{i}", env.prefix))
        .collect();
    let floor = Floor::measure(&raw, &floor_keys).await?;
    let mut rows = vec![
        Row::new(W, "usec_per_call.floor_acquire", floor.acquire.usec, "usec"),
        Row::new(W, "usec_per_call.floor_release", floor.release.usec, "usec"),
        Row::new(
            W,
            "commands_per_call.floor_acquire",
            floor.acquire.commands,
            "calls",
        ),
        Row::new(
            W,
            "commands_per_call.floor_release",
            floor.release.commands,
            "calls",
        ),
    ];
    let mk = keys_for("mutex")?;
    rows.extend(lease_lock(&raw, &store, &mk, &floor).await?);
    let fk = keys_for("fair")?;
    rows.extend(ticket_queue(&raw, &store, &fk, &floor).await?);

    // The production rw_acquire as a Redis Function (FCALL) against the same source by
    // EVALSHA, each granting a Mutex on free names: what Functions would save per call.
    let (fcall, evalsha) = function_vs_script(&raw, &mk).await?;

    let mut del = redis::cmd("DEL");
    for k in &floor_keys {
        del.arg(k);
    }
    let _: i64 = raw.query(&del).await?;
    for k in mk.iter().chain(fk.iter()) {
        delete_lock_keys(env, k).await?;
    }
    rows.push(
        Row::new(W, "usec_per_call.rw_acquire.free_fcall", fcall.usec, "usec")
            .vs("usec_per_call.rw_acquire.free_evalsha", evalsha.usec),
    );
    Ok(rows)
}

/// The floor scripts' hot cost, the baselines of the script paths.
struct Floor {
    acquire: Hot,
    release: Hot,
}

impl Floor {
    /// The floor pair's acquire script on every key of `keys`, then its release script.
    async fn measure(raw: &RedisStore, keys: &[String]) -> BoxResult<Floor> {
        let floor = Arc::new(FloorPair::load(raw).await?);
        let (r, f) = (raw.clone(), floor.clone());
        let acquire = hot(raw, keys, move |k| {
            let (r, f) = (r.clone(), f.clone());
            async move {
                let got: i64 = r
                    .query(
                        redis::cmd("EVALSHA")
                            .arg(&f.acquire_sha)
                            .arg(1)
                            .arg(k)
                            .arg("t")
                            .arg(30_000),
                    )
                    .await?;
                if got != 1 {
                    return Err("floor acquire refused".into());
                }
                Ok(())
            }
        })
        .await?;
        let (r, f) = (raw.clone(), floor.clone());
        let release = hot(raw, keys, move |k| {
            let (r, f) = (r.clone(), f.clone());
            async move {
                let freed: i64 = r
                    .query(
                        redis::cmd("EVALSHA")
                            .arg(&f.release_sha)
                            .arg(1)
                            .arg(k)
                            .arg("t"),
                    )
                    .await?;
                if freed != 1 {
                    return Err("floor release refused".into());
                }
                Ok(())
            }
        })
        .await?;
        Ok(Floor { acquire, release })
    }

    /// Rows `usec_per_call.<m>` and `commands_per_call.<m>` of an acquire or extend path,
    /// next to the floor's acquire.
    fn acq(&self, m: &str, v: Hot, t: Option<f64>) -> Vec<Row> {
        Self::rows(m, v, t, "floor_acquire", self.acquire)
    }

    /// The rows of a release path, next to the floor's release.
    fn rel(&self, m: &str, v: Hot, t: Option<f64>) -> Vec<Row> {
        Self::rows(m, v, t, "floor_release", self.release)
    }

    fn rows(m: &str, v: Hot, t: Option<f64>, floor: &str, base: Hot) -> Vec<Row> {
        let r = Row::new(W, format!("usec_per_call.{m}"), v.usec, "usec")
            .vs(format!("usec_per_call.{floor}"), base.usec);
        let r = match t {
            Some(t) => r.target(Target::RatioAtMost(t)),
            None => r,
        };
        let c = Row::new(W, format!("commands_per_call.{m}"), v.commands, "calls")
            .vs(format!("commands_per_call.{floor}"), base.commands);
        let mut rows = vec![r, c];
        if let (Some(n), Some(b)) = (v.instructions, base.instructions) {
            rows.push(
                Row::new(W, format!("instructions_per_call.{m}"), n, "instr")
                    .vs(format!("instructions_per_call.{floor}"), b),
            );
        }
        rows
    }

    /// The row of a pair's instructions (an acquire and a release path) next to the floor
    /// pair's, when the server runs under callgrind.
    fn pair(&self, m: &str, acquire: Hot, release: Hot, t: f64) -> Option<Row> {
        let (a, r) = (acquire.instructions?, release.instructions?);
        let (fa, fr) = (self.acquire.instructions?, self.release.instructions?);
        Some(
            Row::new(W, format!("instructions_per_pair.{m}"), a + r, "instr")
                .vs("instructions_per_pair.floor", fa + fr)
                .target(Target::RatioAtMost(t)),
        )
    }
}

/// One step of the store on every (keys, claim) pair.
async fn each<F, Fut>(
    raw: &RedisStore,
    items: &[(LockKeys, Claim)],
    store: &Arc<dyn Store>,
    f: F,
) -> BoxResult<Hot>
where
    F: Fn(Arc<dyn Store>, LockKeys, Claim) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = BoxResult<()>> + Send + 'static,
{
    let store = store.clone();
    hot(raw, items, move |(k, c)| f.clone()(store.clone(), k, c)).await
}

async fn grant(s: Arc<dyn Store>, k: LockKeys, c: Claim) -> BoxResult<()> {
    expect_granted(s.acquire(&k, &c, true, None).await?, "hot grant")
}

async fn refused(s: Arc<dyn Store>, k: LockKeys, c: Claim) -> BoxResult<()> {
    match s.acquire(&k, &c, true, None).await? {
        Acquire::Busy(_) => Ok(()),
        Acquire::Granted(_) => Err("hot wait: granted".into()),
    }
}

async fn extend(s: Arc<dyn Store>, k: LockKeys, c: Claim) -> BoxResult<()> {
    if !s.extend(&k, &c, LONG, None).await? {
        return Err("hot extend refused".into());
    }
    Ok(())
}

async fn release(s: Arc<dyn Store>, k: LockKeys, c: Claim) -> BoxResult<()> {
    if !s.release(&k, &c, None).await? {
        return Err("hot release: not held".into());
    }
    Ok(())
}

/// A fresh long claim of `request` on each of `keys`.
fn with(keys: &[LockKeys], request: Request) -> Vec<(LockKeys, Claim)> {
    keys.iter()
        .map(|k| (k.clone(), long_claim(request)))
        .collect()
}

/// Lease lock (rw_* scripts): a Mutex on free names; then a reader on free names; then a
/// writer waiting behind a holder, and the release that hands it the lock.
async fn lease_lock(
    raw: &RedisStore,
    store: &Arc<dyn Store>,
    mk: &[LockKeys],
    floor: &Floor,
) -> BoxResult<Vec<Row>> {
    let holders = with(mk, Request::Mutex);
    let rw_acquire_free = each(raw, &holders, store, grant).await?;
    let rw_extend = each(raw, &holders, store, extend).await?;
    let rw_release = each(raw, &holders, store, release).await?;
    let read = Request::Read(redis_locks::Preference::Writer);
    let readers = with(mk, read);
    let rw_acquire_read = each(raw, &readers, store, grant).await?;
    let rw_release_read = each(raw, &readers, store, release).await?;
    let holders = with(mk, Request::Mutex);
    each(raw, &holders, store, grant).await?;
    let waiters = with(mk, Request::Mutex);
    let rw_acquire_wait = each(raw, &waiters, store, refused).await?;
    let rw_release_hand_off = each(raw, &holders, store, release).await?;
    let rw_acquire_claim = each(raw, &waiters, store, grant).await?;
    each(raw, &waiters, store, release).await?;
    let pair = floor.pair("mutex", rw_acquire_free, rw_release, 2.0);
    Ok([
        floor.acq("rw_acquire.free", rw_acquire_free, Some(2.0)),
        floor.acq("rw_extend", rw_extend, None),
        floor.rel("rw_release.no_waiter", rw_release, Some(2.0)),
        floor.acq("rw_acquire.read_free", rw_acquire_read, None),
        floor.rel("rw_release.read", rw_release_read, None),
        floor.acq("rw_acquire.wait", rw_acquire_wait, None),
        floor.rel("rw_release.hand_off", rw_release_hand_off, None),
        floor.acq("rw_acquire.claim", rw_acquire_claim, None),
    ]
    .into_iter()
    .flatten()
    .chain(pair)
    .collect())
}

/// Ticket queue (queue_* scripts): a FairLock on empty queues, a waiter joining,
/// heartbeating, the hand-off.
async fn ticket_queue(
    raw: &RedisStore,
    store: &Arc<dyn Store>,
    fk: &[LockKeys],
    floor: &Floor,
) -> BoxResult<Vec<Row>> {
    let holders = with(fk, FAIR);
    let queue_acquire_grant = each(raw, &holders, store, grant).await?;
    let queue_extend = each(raw, &holders, store, extend).await?;
    let waiters = with(fk, FAIR);
    let queue_acquire_join = each(raw, &waiters, store, refused).await?;
    let queue_acquire_heartbeat = each(raw, &waiters, store, refused).await?;
    let queue_release_hand_off = each(raw, &holders, store, release).await?;
    let queue_acquire_claim = each(raw, &waiters, store, grant).await?;
    let queue_release = each(raw, &waiters, store, release).await?;
    Ok([
        floor.acq("queue_acquire.grant", queue_acquire_grant, Some(3.0)),
        floor.acq("queue_extend", queue_extend, None),
        floor.acq("queue_acquire.join", queue_acquire_join, None),
        floor.acq("queue_acquire.heartbeat", queue_acquire_heartbeat, None),
        floor.rel("queue_release.hand_off", queue_release_hand_off, Some(5.0)),
        floor.acq("queue_acquire.claim", queue_acquire_claim, None),
        floor.rel("queue_release.no_waiter", queue_release, None),
    ]
    .into_iter()
    .flatten()
    .collect())
}

/// Grants a Mutex on each of `names` by EVALSHA of the production `rw_acquire`, releases them,
/// then grants them by FCALL of the same source loaded as a Redis Function; returns (FCALL,
/// EVALSHA) costs per call.
pub async fn function_vs_script(raw: &RedisStore, names: &[LockKeys]) -> BoxResult<(Hot, Hot)> {
    let source = &redis_locks::testing::script_sources()
        .iter()
        .find(|(n, _)| *n == "rw_acquire")
        .ok_or("no rw_acquire script")?
        .1;
    let body = source.split_once('\n').ok_or("empty script")?.1;
    let library = format!(
        "#!lua name=rlbench\nredis.register_function('rl_rw_acquire', function(KEYS, ARGV)\n{body}\nend)"
    );
    let _: String = raw
        .query(
            redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(library),
        )
        .await?;
    let sha: String = raw
        .query(redis::cmd("SCRIPT").arg("LOAD").arg(source.as_str()))
        .await?;
    let grant = |how: &'static str, sha: String, r: RedisStore| {
        move |k: LockKeys| {
            let (sha, r) = (sha.clone(), r.clone());
            async move {
                let mut cmd = redis::cmd(how);
                if how == "EVALSHA" {
                    cmd.arg(&sha);
                } else {
                    cmd.arg("rl_rw_acquire");
                }
                cmd.arg(6).arg(k.lease_lock().as_slice());
                cmd.arg("").arg("PUBLISH").arg("benchtoken").arg("w");
                cmd.arg(LONG.as_millis() as u64)
                    .arg("writer")
                    .arg("1")
                    .arg(1000);
                let fence: redis::Value = r.query(&cmd).await?;
                match fence {
                    redis::Value::Int(_) => Ok(()),
                    other => Err(format!("{how} rw_acquire: {other:?}").into()),
                }
            }
        }
    };
    let clear = |r: RedisStore, names: Vec<LockKeys>| async move {
        for k in &names {
            let _: i64 = r.query(redis::cmd("DEL").arg(&k.lease_lock()[0])).await?;
        }
        Ok::<(), BoxError>(())
    };
    let evalsha = hot(raw, names, grant("EVALSHA", sha.clone(), raw.clone())).await?;
    clear(raw.clone(), names.to_vec()).await?;
    let fcall = hot_of(raw, "fcall", names, grant("FCALL", sha, raw.clone())).await?;
    clear(raw.clone(), names.to_vec()).await?;
    let _: String = raw
        .query(redis::cmd("FUNCTION").arg("DELETE").arg("rlbench"))
        .await?;
    Ok((fcall, evalsha))
}

/// Each script path's cold cost (`server_cost`: one call after the server idled, slow log)
/// next to its hot cost (`server_hot`: steady state, pipelined), when both ran: rows
/// `server_hot/cold.<path>` with the hot cost as baseline.
pub fn cold_next_to_hot(earlier: &[Row], hot: &[Row]) -> Vec<Row> {
    const PATHS: &[(&str, &str)] = &[
        ("rw_acquire.free", "mutex_acquire_grant.q0"),
        ("rw_extend", "mutex_extend.q0"),
        ("rw_release.no_waiter", "mutex_release.q0"),
        ("rw_acquire.wait", "mutex_acquire_wait.q0"),
        ("rw_release.hand_off", "mutex_release.q1"),
        ("rw_acquire.claim", "mutex_acquire_grant.q1"),
        ("queue_acquire.grant", "fair_acquire_grant.q0"),
        ("queue_extend", "fair_extend.q0"),
        ("queue_acquire.join", "fair_acquire_join.q0"),
        ("queue_acquire.heartbeat", "fair_acquire_heartbeat.q0"),
        ("queue_release.hand_off", "fair_release.q1"),
        ("queue_acquire.claim", "fair_acquire_grant.q1"),
        ("queue_release.no_waiter", "fair_release.q0"),
    ];
    let find = |rows: &[Row], workload: &str, metric: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.metric == metric)
            .map(|r| r.value)
    };
    PATHS
        .iter()
        .filter_map(|(hot_path, cold_path)| {
            let h = find(hot, "server_hot", &format!("usec_per_call.{hot_path}"))?;
            let c = find(
                earlier,
                "server_cost",
                &format!("usec_per_call.{cold_path}"),
            )?;
            Some(
                Row::new("server_hot", format!("cold.{hot_path}"), c, "usec")
                    .vs(format!("usec_per_call.{hot_path}"), h),
            )
        })
        .collect()
}
