//! Benchmarks: every speed claim of redis-locks measured next to the limit that bounds it, in
//! one run (issue 8). See `docs/BENCHMARKS.md` for a run's table and what each row means.
//!
//! ```sh
//! cargo run --release --example bench                 # readable table
//! cargo run --release --example bench -- --json       # one JSON object per line
//! cargo run --release --example bench -- --markdown   # the table as Markdown
//! cargo run --release --example bench -- --only fifo  # one workload
//! cargo run --release --features cluster --example bench   # with the `cluster` workload
//! ```
//!
//! Starts its own `redis-server` on a free loopback port (persistence off, in a temporary
//! directory, killed at exit) unless `REDIS_URL` is set. With `REDIS_URL`, keys live under a
//! per-run prefix and are deleted afterwards; `server_cost` reads the slow log (and sets its
//! threshold to 0 for the duration, then restores it), so other clients' commands on that server
//! make it fail rather than blur it.
//!
//! Every workload runs three times; each row is the median of the three runs (the baseline
//! too, and the ratio is median value / median baseline). Baselines are measured in the same
//! run, on the same connection as the locks: PING and a trivial EVALSHA go through the
//! `RedisStore`'s own multiplexed connection (`RedisStore::query`).
//!
//! Two workloads start more servers of their own (also with `REDIS_URL`, whose server is then
//! their single-node baseline): `cluster` a local 3-master Redis Cluster (`redis-server
//! --cluster-enabled yes` + `redis-cli --cluster create`; it needs `--features cluster` and is
//! skipped, saying so, without it), `quorum` three plain servers for `LockClient::quorum`.

use std::collections::{HashMap, VecDeque};
use std::error::Error as StdError;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Acquire, Claim, RedisStore, Request, Store};
use redis_locks::{
    FairLock, FairLockGuard, LockClient, Mutex, MutexGuard, Permit, ReadGuard, RwLock, Semaphore,
};
use tokio::task::JoinSet;

type BoxError = Box<dyn StdError + Send + Sync>;
type BoxResult<T> = std::result::Result<T, BoxError>;

const WORKLOADS: &[&str] = &[
    "uncontended",
    "parallel",
    "contended_mutex",
    "contended_fair",
    "writer_wait",
    "fifo",
    "fifo_30ms",
    "semaphore",
    "server_cost",
    "server_hot",
    "renewals",
    "memory",
    "cluster",
    "quorum",
    "multi",
    "election",
];
const RUNS: usize = 3;

// ---------------------------------------------------------------------------------------------
// Rows, targets, medians, output.

/// What a row must reach. `None`: informational.
#[derive(Clone, Copy, Debug)]
enum Target {
    None,
    RatioAtMost(f64),
    RatioAtLeast(f64),
    AtMost(f64),
    AtLeast(f64),
    Equals(f64),
    AtMostBaselinePlus(f64),
    EqualsBaseline,
}

impl Target {
    fn met(self, value: f64, baseline: Option<f64>) -> Option<bool> {
        let ratio = baseline.filter(|b| *b != 0.0).map(|b| value / b);
        Some(match self {
            Target::None => return None,
            Target::RatioAtMost(r) => ratio? <= r,
            Target::RatioAtLeast(r) => ratio? >= r,
            Target::AtMost(x) => value <= x,
            Target::AtLeast(x) => value >= x,
            Target::Equals(x) => value == x,
            Target::AtMostBaselinePlus(x) => value <= baseline? + x,
            Target::EqualsBaseline => value == baseline?,
        })
    }

    fn describe(self) -> String {
        match self {
            Target::None => "-".into(),
            Target::RatioAtMost(r) => format!("ratio <= {r}"),
            Target::RatioAtLeast(r) => format!("ratio >= {r}"),
            Target::AtMost(x) => format!("<= {x}"),
            Target::AtLeast(x) => format!(">= {x}"),
            Target::Equals(x) => format!("= {x}"),
            Target::AtMostBaselinePlus(x) => format!("<= baseline + {x}"),
            Target::EqualsBaseline => "= baseline".into(),
        }
    }
}

#[derive(Clone, Debug)]
struct Row {
    workload: &'static str,
    metric: String,
    value: f64,
    unit: &'static str,
    baseline_metric: Option<String>,
    baseline_value: Option<f64>,
    target: Target,
}

impl Row {
    fn new(
        workload: &'static str,
        metric: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Row {
        Row {
            workload,
            metric: metric.into(),
            value,
            unit,
            baseline_metric: None,
            baseline_value: None,
            target: Target::None,
        }
    }

    fn vs(mut self, metric: impl Into<String>, value: f64) -> Row {
        self.baseline_metric = Some(metric.into());
        self.baseline_value = Some(value);
        self
    }

    fn target(mut self, target: Target) -> Row {
        self.target = target;
        self
    }

    fn ratio(&self) -> Option<f64> {
        let b = self.baseline_value?;
        (b != 0.0 && b.is_finite() && self.value.is_finite()).then(|| self.value / b)
    }

    fn met(&self) -> Option<bool> {
        if !self.value.is_finite() {
            return match self.target {
                Target::None => None,
                _ => Some(false),
            };
        }
        self.target.met(self.value, self.baseline_value)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One row per metric: the median of the runs' values and of their baselines.
fn merge_runs(runs: &[Vec<Row>]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for run in runs {
        for row in run {
            if out.iter().any(|r| r.metric == row.metric) {
                continue;
            }
            let same: Vec<&Row> = runs
                .iter()
                .flat_map(|r| r.iter())
                .filter(|r| r.metric == row.metric)
                .collect();
            let mut merged = row.clone();
            merged.value = median(same.iter().map(|r| r.value).collect());
            if row.baseline_value.is_some() {
                merged.baseline_value = Some(median(
                    same.iter().filter_map(|r| r.baseline_value).collect(),
                ));
            }
            out.push(merged);
        }
    }
    out
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => {
            if v == v.trunc() && v.abs() < 1e15 {
                format!("{}", v as i64)
            } else {
                format!("{v:.6}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_owned()
            }
        }
        _ => "null".into(),
    }
}

fn json_line(r: &Row) -> String {
    format!(
        "{{\"workload\": {}, \"metric\": {}, \"value\": {}, \"unit\": {}, \"baseline_metric\": {}, \"baseline_value\": {}, \"ratio\": {}}}",
        json_str(r.workload),
        json_str(&r.metric),
        json_num(Some(r.value)),
        json_str(r.unit),
        r.baseline_metric
            .as_deref()
            .map(json_str)
            .unwrap_or_else(|| "null".into()),
        json_num(r.baseline_value),
        json_num(r.ratio()),
    )
}

fn table_cells(r: &Row) -> [String; 8] {
    let baseline = match (&r.baseline_metric, r.baseline_value) {
        (Some(m), Some(v)) => format!("{m} = {}", fmt_num(v)),
        _ => "-".into(),
    };
    let met = match r.met() {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    };
    [
        r.workload.to_owned(),
        r.metric.clone(),
        fmt_num(r.value),
        r.unit.to_owned(),
        baseline,
        r.ratio().map(fmt_num).unwrap_or_else(|| "-".into()),
        r.target.describe(),
        met.to_owned(),
    ]
}

const HEADERS: [&str; 8] = [
    "workload", "metric", "value", "unit", "baseline", "ratio", "target", "met?",
];

fn print_table(rows: &[Row]) {
    let cells: Vec<[String; 8]> = rows.iter().map(table_cells).collect();
    let mut widths = HEADERS.map(str::len);
    for c in &cells {
        for (w, s) in widths.iter_mut().zip(c.iter()) {
            *w = (*w).max(s.len());
        }
    }
    let line = |c: &[String]| {
        let parts: Vec<String> = c
            .iter()
            .zip(widths.iter())
            .enumerate()
            .map(|(i, (s, w))| {
                // Numbers right-aligned, text left-aligned.
                if i == 2 || i == 5 {
                    format!("{s:>w$}")
                } else {
                    format!("{s:<w$}")
                }
            })
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(&HEADERS.map(String::from));
    let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    println!("{}", "-".repeat(total));
    for c in &cells {
        line(c);
    }
}

fn print_markdown(rows: &[Row]) {
    println!("| {} |", HEADERS.join(" | "));
    println!("|{}|", ["---"; 8].join("|"));
    for r in rows {
        let c = table_cells(r);
        println!("| {} |", c.join(" | "));
    }
}

// ---------------------------------------------------------------------------------------------
// The redis-servers this bench starts (the single node unless REDIS_URL is set): the
// integration tests' launcher (a private `redis-server` on a free loopback port, persistence
// off, in its own temporary directory, retried on port races, killed by its handle on drop).

#[allow(dead_code)] // the bench uses part of the tests' launcher
#[path = "../../tests/support/server.rs"]
mod server;

#[cfg(feature = "cluster")]
use server::RedisCluster;
use server::RedisServer;

/// Every server this bench started, `(pid, dir)`, for the Ctrl-C handler.
static STARTED: StdMutex<Vec<(u32, PathBuf)>> = StdMutex::new(Vec::new());

/// Servers the bench started (`RedisServer` or `RedisCluster`), listed in [`STARTED`] while
/// they live. Dropping forgets their pids first (the Ctrl-C handler must never signal a
/// reused pid), then the launcher kills each process by its own handle.
struct Started<T> {
    servers: T,
    pids: Vec<u32>,
}

/// Lists `nodes` in [`STARTED`]; returns their pids.
fn register<'a>(nodes: impl IntoIterator<Item = &'a RedisServer>) -> Vec<u32> {
    let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    nodes
        .into_iter()
        .map(|node| {
            started.push((node.pid(), node.dir().to_path_buf()));
            node.pid()
        })
        .collect()
}

impl<T> std::ops::Deref for Started<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.servers
    }
}

impl<T> Drop for Started<T> {
    fn drop(&mut self) {
        STARTED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(p, _)| !self.pids.contains(p));
    }
}

/// A private `redis-server` on a free loopback port.
fn start_server() -> Started<RedisServer> {
    let server = RedisServer::start();
    let pids = register([&server]);
    Started {
        servers: server,
        pids,
    }
}

// ---------------------------------------------------------------------------------------------
// Environment shared by the workloads.

#[derive(Clone)]
struct Env {
    /// The store behind `client`; `raw.query` uses the very connection the locks use.
    raw: RedisStore,
    client: LockClient,
    /// A second client on its own connection (the "other process").
    client_b: LockClient,
    prefix: String,
    url: String,
}

impl Env {
    async fn connect(url: &str, prefix: &str) -> BoxResult<Env> {
        let raw = RedisStore::connect(url).await?;
        let client = LockClient::builder()
            .prefix(prefix)
            .store(Arc::new(raw.clone()))
            .expect("client");
        let client_b = LockClient::builder().prefix(prefix).connect(url).await?;
        Ok(Env {
            raw,
            client,
            client_b,
            prefix: prefix.to_owned(),
            url: url.to_owned(),
        })
    }

    fn clients(&self) -> [&LockClient; 2] {
        [&self.client, &self.client_b]
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// PING round trip p50 (ms) on the locks' own connection.
async fn ping_p50(raw: &RedisStore, n: usize) -> BoxResult<f64> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: String = raw.query(&redis::cmd("PING")).await?;
        samples.push(ms(t.elapsed()));
    }
    Ok(pct(&sorted(samples), 0.5))
}

/// CPU seconds (user + system) this process used so far, from `/proc/self/stat`.
fn own_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name (which may contain spaces): utime and stime are the
    // 12th and 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds the Redis server used so far (`INFO cpu`: its event loop, I/O included).
async fn server_cpu_secs(raw: &RedisStore) -> BoxResult<f64> {
    let v: redis::Value = raw.query(redis::cmd("INFO").arg("cpu")).await?;
    let text = match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        _ => String::new(),
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(field("used_cpu_sys:") + field("used_cpu_user:"))
}

/// `(calls, usec)` of one command from `INFO commandstats`: the server's own CPU accounting.
async fn cmdstat(raw: &RedisStore, cmd: &str) -> BoxResult<(u64, u64)> {
    let v: redis::Value = raw.query(redis::cmd("INFO").arg("commandstats")).await?;
    let text = match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        redis::Value::SimpleString(s) => s,
        other => return Err(format!("unexpected INFO reply {other:?}").into()),
    };
    let prefix = format!("cmdstat_{cmd}:");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            let (mut calls, mut usec) = (0, 0);
            for field in rest.trim().split(',') {
                if let Some(v) = field.strip_prefix("calls=") {
                    calls = v.parse()?;
                } else if let Some(v) = field.strip_prefix("usec=") {
                    usec = v.parse()?;
                }
            }
            return Ok((calls, usec));
        }
    }
    Ok((0, 0))
}

/// The primitives that are acquired and released as a whole in the workloads.
#[derive(Clone)]
enum Prim {
    Mutex(Mutex),
    Fair(FairLock),
    Sem(Semaphore),
    Read(RwLock),
}

enum Held {
    Mutex(MutexGuard),
    Fair(FairLockGuard),
    Sem(Permit),
    Read(ReadGuard),
}

impl Prim {
    async fn acquire(&self) -> redis_locks::Result<Held> {
        Ok(match self {
            Prim::Mutex(m) => Held::Mutex(m.lock().await?),
            Prim::Fair(f) => Held::Fair(f.lock().await?),
            Prim::Sem(s) => Held::Sem(s.acquire().await?),
            Prim::Read(r) => Held::Read(r.read().await?),
        })
    }
}

impl Held {
    async fn release(self) -> redis_locks::Result<bool> {
        match self {
            Held::Mutex(g) => g.release().await,
            Held::Fair(g) => g.release().await,
            Held::Sem(g) => g.release().await,
            Held::Read(g) => g.release().await,
        }
    }
}

async fn pairs(prim: &Prim, n: usize) -> BoxResult<(Vec<f64>, Duration)> {
    let mut samples = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let g = prim.acquire().await?;
        g.release().await?;
        samples.push(ms(t.elapsed()));
    }
    Ok((sorted(samples), start.elapsed()))
}

/// The floor any Lua lease lock pays: the simplest owner-checked pair (a script doing
/// `SET NX PX`, a script deleting the key only if it holds the caller's token), with no
/// fencing, no waiters and no clock, on the locks' own connection. What our scripts cost on
/// top of two round trips is measured against it.
struct FloorPair {
    acquire_sha: String,
    release_sha: String,
}

impl FloorPair {
    const ACQUIRE: &'static str =
        "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0";
    const RELEASE: &'static str =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

    async fn load(raw: &RedisStore) -> BoxResult<FloorPair> {
        let load = |src: &'static str| async move {
            let sha: String = raw.query(redis::cmd("SCRIPT").arg("LOAD").arg(src)).await?;
            Ok::<String, redis_locks::Error>(sha)
        };
        Ok(FloorPair {
            acquire_sha: load(Self::ACQUIRE).await?,
            release_sha: load(Self::RELEASE).await?,
        })
    }

    /// One acquire + release of `key`; fails if the acquire was refused (keys are private).
    async fn pair(&self, raw: &RedisStore, key: &str, token: &str) -> BoxResult<()> {
        let got: i64 = raw
            .query(
                redis::cmd("EVALSHA")
                    .arg(&self.acquire_sha)
                    .arg(1)
                    .arg(key)
                    .arg(token)
                    .arg(30_000),
            )
            .await?;
        let freed: i64 = raw
            .query(
                redis::cmd("EVALSHA")
                    .arg(&self.release_sha)
                    .arg(1)
                    .arg(key)
                    .arg(token),
            )
            .await?;
        if got != 1 || freed != 1 {
            return Err(format!("floor pair on {key}: acquire {got}, release {freed}").into());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads. Each returns the rows of one run.

async fn uncontended(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
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

async fn parallel(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
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

struct Contended {
    gaps: Vec<f64>,
    /// Duration of the holders' `release()` calls (one round trip plus the script).
    releases: Vec<f64>,
    counts: Vec<usize>,
    elapsed: Duration,
}

/// `tasks` tasks on the two clients take turns on one lock, holding `hold` each time, until
/// `total` acquisitions were made. Hand-off gap: from a holder's `release()` call to the next
/// grant's return (matched in release order, which is grant order when every permit is busy).
async fn contend(
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

async fn contended(env: &Env, run: usize, fair: bool) -> BoxResult<Vec<Row>> {
    let w: &'static str = if fair {
        "contended_fair"
    } else {
        "contended_mutex"
    };
    const TOTAL: usize = 2000;
    let ping = ping_p50(&env.raw, 1000).await?;
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
        Duration::from_millis(1),
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
    Ok(vec![
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
    ])
}

struct ReadRecord {
    started: Instant,
    granted: Instant,
    released: Instant,
}

async fn writer_wait(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "writer_wait";
    let name = format!("{W}-{run}");
    let stop = Arc::new(AtomicBool::new(false));
    let reads: Arc<StdMutex<Vec<ReadRecord>>> = Arc::default();
    let mut readers = JoinSet::new();
    for _ in 0..6 {
        let rw: RwLock = env.client.rwlock(&name);
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let g = rw.read().await?;
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let released = Instant::now();
                g.release().await?;
                reads
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(ReadRecord {
                        started,
                        granted,
                        released,
                    });
            }
            Ok::<(), redis_locks::Error>(())
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The writer is another process (client B). A watcher on client A finds the moment its
    // announcement is visible on the server: the first inspect that lists it as a waiter.
    let writer_done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let rw = env.client.rwlock(&name);
        let done = writer_done.clone();
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let info = rw.inspect().await?;
                if !info.waiters.is_empty() {
                    return Ok(Some(Instant::now()));
                }
            }
            Ok::<Option<Instant>, redis_locks::Error>(None)
        })
    };
    let writer = env.client_b.rwlock(&name);
    let asked = Instant::now();
    let wg = writer.write().await?;
    let write_granted = Instant::now();
    writer_done.store(true, Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    let visible = watcher.await??;
    wg.release().await?;
    while let Some(r) = readers.join_next().await {
        r??;
    }
    let reads = std::mem::take(&mut *reads.lock().unwrap_or_else(|p| p.into_inner()));
    let holds = sorted(reads.iter().map(|r| ms(r.released - r.granted)).collect());
    // A read that started after the announcement was visible reached the server after it, so
    // writer preference must refuse it until the writer is through.
    let after = visible
        .map(|v| {
            reads
                .iter()
                .filter(|r| r.started >= v && r.granted <= write_granted)
                .count()
        })
        .unwrap_or(0);
    let hold_p50 = pct(&holds, 0.5);
    Ok(vec![
        Row::new(W, "writer_wait_ms", ms(write_granted - asked), "ms")
            .vs("read_hold_ms", hold_p50)
            .target(Target::AtMostBaselinePlus(2.0)),
        Row::new(W, "read_hold_ms", hold_p50, "ms"),
        Row::new(W, "reads_after_register", after as f64, "count").target(Target::Equals(0.0)),
    ])
}

async fn fifo(env: &Env, run: usize, w: &'static str, hold: Duration) -> BoxResult<Vec<Row>> {
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
    let mut inversions = 0;
    for a in 0..done.len() {
        for b in a + 1..done.len() {
            if done[a].1 > done[b].1 {
                inversions += 1;
            }
        }
    }
    let first_grant = done.iter().map(|d| d.2).min().unwrap_or(release_start);
    let last_end = done.iter().map(|d| d.3).max().unwrap_or(release_start);
    let holds: f64 = done.iter().map(|d| ms(d.3 - d.2)).sum();
    let all_done = ms(last_end - release_start);
    // The same round trip as `ping`, but each one sent right after a sleep as long as a
    // hold, like every hand-off here: the runtime's threads are parked when it starts.
    let mut idle = Vec::with_capacity(50);
    for _ in 0..50 {
        tokio::time::sleep(hold).await;
        let t = Instant::now();
        let _: String = env.raw.query(&redis::cmd("PING")).await?;
        idle.push(ms(t.elapsed()));
    }
    let idle_ping = pct(&sorted(idle), 0.5);
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

async fn semaphore(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "semaphore";
    let ping = ping_p50(&env.raw, 1000).await?;
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
        Duration::from_millis(1),
    )
    .await?;
    Ok(vec![
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
    ])
}

// --- renewals ---------------------------------------------------------------------------------
//
// Many live holds on one client, each renewed every third of its lease by the client's
// renewal schedule: every guard must stay held, and the renewal rate must be what the holds
// need. The trust margin (the least time any guard still trusted, sampled every 50 ms) shows
// how late the latest renewal came.

const RENEWAL_HOLDS: usize = 10_000;

async fn renewals(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "renewals";
    let lease = Duration::from_secs(3);
    let url = env.url.clone();
    let client = LockClient::builder()
        .prefix(&env.prefix)
        .lease(lease)
        .connect(&url)
        .await?;
    let mut acquiring = JoinSet::new();
    let mut guards = Vec::with_capacity(RENEWAL_HOLDS);
    for i in 0..RENEWAL_HOLDS {
        let m = client.mutex(&format!("{W}-{run}-{i}"));
        acquiring.spawn(async move { m.try_lock().await });
        if acquiring.len() >= 256 {
            if let Some(g) = acquiring.join_next().await {
                guards.push(g??);
            }
        }
    }
    while let Some(g) = acquiring.join_next().await {
        guards.push(g??);
    }
    let (calls0, _) = cmdstat(&env.raw, "evalsha").await?;
    let start = Instant::now();
    let watch = lease * 3;
    let mut least_margin = f64::INFINITY;
    let mut lost = 0usize;
    while start.elapsed() < watch {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = tokio::time::Instant::now();
        lost = guards.iter().filter(|g| !g.is_held()).count();
        let margin = guards
            .iter()
            .filter(|g| g.is_held())
            .map(|g| ms(g.valid_until().saturating_duration_since(now)))
            .fold(f64::INFINITY, f64::min);
        least_margin = least_margin.min(margin);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (calls1, _) = cmdstat(&env.raw, "evalsha").await?;
    let mut releasing = JoinSet::new();
    for g in guards {
        releasing.spawn(g.release());
    }
    while let Some(r) = releasing.join_next().await {
        r??;
    }
    let needed = RENEWAL_HOLDS as f64 / (lease.as_secs_f64() / 3.0);
    Ok(vec![
        Row::new(W, "holds", RENEWAL_HOLDS as f64, "holds"),
        Row::new(W, "lost_guards", lost as f64, "guards").target(Target::Equals(0.0)),
        Row::new(
            W,
            "renewals_per_s",
            (calls1 - calls0) as f64 / elapsed,
            "1/s",
        )
        .vs("needed_per_s", needed),
        Row::new(W, "least_trust_left_ms", least_margin, "ms")
            .vs("lease_ms", ms(lease))
            .target(Target::RatioAtLeast(0.3)),
    ])
}

// --- server_cost ------------------------------------------------------------------------------
//
// Redis's CPU per call is the `duration` that `INFO commandstats` sums into `usec`. Every script
// runs as EVALSHA, so commandstats lumps them together; and reading INFO between single calls
// leaves each call running with cold caches (it measured about twice the in-loop cost). So the
// per-call durations are read from the slow log with a threshold of 0 (the same `duration`,
// one entry per call), the steps running back to back as they do in use, and attributed to
// steps by their order. The slow log settings are restored afterwards.

/// Which step each EVALSHA (or SET/DEL) sent, in order; `None`: setup, not measured.
#[derive(Default)]
struct Steps(Vec<Option<usize>>);

/// Runs `$e` (exactly one command on the server), recording it as step `$i`.
macro_rules! step {
    ($steps:expr, $i:expr, $e:expr) => {{
        $steps.0.push($i);
        $e
    }};
}

async fn slowlog_reset(raw: &RedisStore) -> BoxResult<()> {
    let _: String = raw.query(redis::cmd("SLOWLOG").arg("RESET")).await?;
    Ok(())
}

/// Per-step medians (usec) of the calls named `cmds` logged since the last reset.
async fn slowlog_costs(
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

const LONG: Duration = Duration::from_secs(600);

fn long_claim(request: Request) -> Claim {
    request.claim(LONG, LONG)
}

const FAIR: Request = Request::FairLock;

/// Queues `k` waiters (refused, waiting claims with a long heartbeat) directly on the store.
async fn enqueue(
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

fn expect_granted(a: Acquire, what: &str) -> BoxResult<()> {
    match a {
        Acquire::Granted(_) => Ok(()),
        Acquire::Busy(_) => Err(format!("{what}: expected a grant").into()),
    }
}

async fn delete_lock_keys(env: &Env, keys: &LockKeys) -> BoxResult<()> {
    let mut cmd = redis::cmd("DEL");
    for k in keys.lease_lock().iter().chain(keys.ticket_queue().iter()) {
        cmd.arg(k);
    }
    let _: i64 = env.raw.query(&cmd).await?;
    Ok(())
}

/// Steps of the FairLock (queue_* scripts) and of the Mutex (rw_* scripts), in table order.
const FAIR_OPS: [&str; 6] = [
    "fair_acquire_join",
    "fair_acquire_heartbeat",
    "fair_release_leave",
    "fair_extend",
    "fair_release",
    "fair_acquire_grant",
];
const MUTEX_OPS: [&str; 5] = [
    "mutex_acquire_wait",
    "mutex_release_leave",
    "mutex_extend",
    "mutex_release",
    "mutex_acquire_grant",
];
/// Waiters queued behind the holder. 1 shows what a hand-off itself costs, next to 0 (no one
/// to hand off to) and the long queues.
const SIZES: [usize; 4] = [0, 1, 1000, 10000];
const COST_SAMPLES: usize = 100;

async fn fair_costs(env: &Env, name: &str, k: usize) -> BoxResult<Vec<f64>> {
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

async fn mutex_costs(env: &Env, name: &str, k: usize) -> BoxResult<Vec<f64>> {
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

async fn config_get(raw: &RedisStore, key: &str) -> BoxResult<String> {
    let v: HashMap<String, String> = raw.query(redis::cmd("CONFIG").arg("GET").arg(key)).await?;
    v.get(key)
        .cloned()
        .ok_or_else(|| format!("CONFIG GET {key}: no value").into())
}

async fn config_set(raw: &RedisStore, key: &str, value: &str) -> BoxResult<()> {
    let _: String = raw
        .query(redis::cmd("CONFIG").arg("SET").arg(key).arg(value))
        .await?;
    Ok(())
}

async fn server_cost(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
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

async fn server_cost_steps(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
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

/// Each script path's cold cost (`server_cost`: one call after the server idled, slow log)
/// next to its hot cost (`server_hot`: steady state, pipelined), when both ran: rows
/// `server_hot/cold.<path>` with the hot cost as baseline.
fn cold_next_to_hot(earlier: &[Row], hot: &[Row]) -> Vec<Row> {
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

/// After the runs are merged: the worst 10k/0 ratio of any step, as one row.
fn server_cost_summary(rows: &[Row]) -> Option<Row> {
    let worst = rows
        .iter()
        .filter(|r| r.workload == "server_cost" && r.metric.ends_with(".q10000"))
        .filter_map(|r| r.ratio().map(|x| (x, r.metric.clone())))
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some(Row::new("server_cost", "max_ratio_10k_0", worst.0, "ratio").target(Target::AtMost(2.0)))
}

// --- server_hot -------------------------------------------------------------------------------
//
// The server's steady-state cost per call of each script path: every step runs on many names
// at once, pipelined on the locks' own connection (as a busy service sends them), and the cost
// is the `EVALSHA` time `INFO commandstats` adds up, divided by the calls. Next to each path,
// the floor script it competes with (the `SET NX PX` script for an acquire or an extend, the
// owner-checked `DEL` script for a release), measured the same way in the same run. The
// `server_cost` rows are the cold side: single calls after a round trip of idling.

/// Names per path; every step runs once on each.
const HOT_NAMES: usize = 2000;
/// Calls in flight at once.
const HOT_DEPTH: usize = 128;

/// Runs `step` on every item, `HOT_DEPTH` at a time, and returns the server µs per `EVALSHA`.
async fn hot<T, F, Fut>(raw: &RedisStore, items: &[T], step: F) -> BoxResult<f64>
where
    T: Clone + Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = BoxResult<()>> + Send + 'static,
{
    hot_of(raw, "evalsha", items, step).await
}

/// [`hot`] for steps sent as command `cmd` (lower case, as `INFO commandstats` names it).
async fn hot_of<T, F, Fut>(raw: &RedisStore, cmd: &str, items: &[T], step: F) -> BoxResult<f64>
where
    T: Clone + Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = BoxResult<()>> + Send + 'static,
{
    let before = cmdstat(raw, cmd).await?;
    for chunk in items.chunks(HOT_DEPTH) {
        let mut set = JoinSet::new();
        for item in chunk {
            set.spawn(step(item.clone()));
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
    }
    let after = cmdstat(raw, cmd).await?;
    let calls = after.0.saturating_sub(before.0);
    if calls < items.len() as u64 {
        return Err(format!("{calls} {cmd} calls for {} steps", items.len()).into());
    }
    Ok((after.1 - before.1) as f64 / calls as f64)
}

async fn server_hot(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "server_hot";
    let raw = env.raw.clone();
    let store = env.client.store().clone();
    let floor = Arc::new(FloorPair::load(&raw).await?);
    let keys_for = |kind: &str| -> BoxResult<Vec<LockKeys>> {
        (0..HOT_NAMES)
            .map(|i| Ok(env.client.keys(&format!("{W}-{run}-{kind}-{i}"))?))
            .collect()
    };

    // Floor: the SET NX PX script, then the owner-checked DEL script, on distinct keys.
    let floor_keys: Vec<String> = (0..HOT_NAMES)
        .map(|i| format!("{}:floor-hot-{run}-{i}", env.prefix))
        .collect();
    let (r, f) = (raw.clone(), floor.clone());
    let floor_acquire = hot(&raw, &floor_keys, move |k| {
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
    let floor_release = hot(&raw, &floor_keys, move |k| {
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

    // One step of the store on every (keys, claim) pair.
    async fn each<F, Fut>(
        raw: &RedisStore,
        items: &[(LockKeys, Claim)],
        store: &Arc<dyn Store>,
        f: F,
    ) -> BoxResult<f64>
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
    let with = |keys: &[LockKeys], request: Request| -> Vec<(LockKeys, Claim)> {
        keys.iter()
            .map(|k| (k.clone(), long_claim(request)))
            .collect()
    };

    // Lease lock: a Mutex on free names; then a reader on free names.
    let mk = keys_for("mutex")?;
    let holders = with(&mk, Request::Mutex);
    let rw_acquire_free = each(&raw, &holders, &store, grant).await?;
    let rw_extend = each(&raw, &holders, &store, extend).await?;
    let rw_release = each(&raw, &holders, &store, release).await?;
    let read = Request::Read(redis_locks::Preference::Writer);
    let readers = with(&mk, read);
    let rw_acquire_read = each(&raw, &readers, &store, grant).await?;
    let rw_release_read = each(&raw, &readers, &store, release).await?;
    // A writer waiting behind a holder, then the release that hands it the lock.
    let holders = with(&mk, Request::Mutex);
    each(&raw, &holders, &store, grant).await?;
    let waiters = with(&mk, Request::Mutex);
    let rw_acquire_wait = each(&raw, &waiters, &store, refused).await?;
    let rw_release_hand_off = each(&raw, &holders, &store, release).await?;
    let rw_acquire_claim = each(&raw, &waiters, &store, grant).await?;
    each(&raw, &waiters, &store, release).await?;

    // Ticket queue: a FairLock on empty queues, a waiter joining, heartbeating, the hand-off.
    let fk = keys_for("fair")?;
    let holders = with(&fk, FAIR);
    let queue_acquire_grant = each(&raw, &holders, &store, grant).await?;
    let queue_extend = each(&raw, &holders, &store, extend).await?;
    let waiters = with(&fk, FAIR);
    let queue_acquire_join = each(&raw, &waiters, &store, refused).await?;
    let queue_acquire_heartbeat = each(&raw, &waiters, &store, refused).await?;
    let queue_release_hand_off = each(&raw, &holders, &store, release).await?;
    let queue_acquire_claim = each(&raw, &waiters, &store, grant).await?;
    let queue_release = each(&raw, &waiters, &store, release).await?;

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

    let acq = |m: &str, v: f64, t: Option<f64>| {
        let r = Row::new(W, format!("usec_per_call.{m}"), v, "usec")
            .vs("usec_per_call.floor_acquire", floor_acquire);
        match t {
            Some(t) => r.target(Target::RatioAtMost(t)),
            None => r,
        }
    };
    let rel = |m: &str, v: f64, t: Option<f64>| {
        let r = Row::new(W, format!("usec_per_call.{m}"), v, "usec")
            .vs("usec_per_call.floor_release", floor_release);
        match t {
            Some(t) => r.target(Target::RatioAtMost(t)),
            None => r,
        }
    };
    Ok(vec![
        Row::new(W, "usec_per_call.floor_acquire", floor_acquire, "usec"),
        Row::new(W, "usec_per_call.floor_release", floor_release, "usec"),
        acq("rw_acquire.free", rw_acquire_free, Some(2.0)),
        acq("rw_extend", rw_extend, None),
        rel("rw_release.no_waiter", rw_release, Some(2.0)),
        acq("rw_acquire.read_free", rw_acquire_read, None),
        rel("rw_release.read", rw_release_read, None),
        acq("rw_acquire.wait", rw_acquire_wait, None),
        rel("rw_release.hand_off", rw_release_hand_off, None),
        acq("rw_acquire.claim", rw_acquire_claim, None),
        acq("queue_acquire.grant", queue_acquire_grant, Some(3.0)),
        acq("queue_extend", queue_extend, None),
        acq("queue_acquire.join", queue_acquire_join, None),
        acq("queue_acquire.heartbeat", queue_acquire_heartbeat, None),
        rel("queue_release.hand_off", queue_release_hand_off, Some(5.0)),
        acq("queue_acquire.claim", queue_acquire_claim, None),
        rel("queue_release.no_waiter", queue_release, None),
        Row::new(W, "usec_per_call.rw_acquire.free_fcall", fcall, "usec")
            .vs("usec_per_call.rw_acquire.free_evalsha", evalsha),
    ])
}

/// Grants a Mutex on each of `names` by EVALSHA of the production `rw_acquire`, releases them,
/// then grants them by FCALL of the same source loaded as a Redis Function; returns (FCALL,
/// EVALSHA) server µs per call.
async fn function_vs_script(raw: &RedisStore, names: &[LockKeys]) -> BoxResult<(f64, f64)> {
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

// --- memory -----------------------------------------------------------------------------------

async fn lock_keys_on_server(env: &Env, keys: &LockKeys) -> BoxResult<Vec<String>> {
    // Every key of a lock starts with the same `<prefix>:{<name>}:` (glob-escaped here).
    let base = keys.key("");
    let mut pattern = String::new();
    for c in base.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    let mut cursor: u64 = 0;
    let mut found = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = env
            .raw
            .query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await?;
        found.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    found.sort();
    Ok(found)
}

async fn memory(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "memory";
    let c = &env.client;
    let name = |kind: &str| format!("{W}-{run}-{kind}");
    let mut guards: Vec<(&'static str, String, Held)> = Vec::new();
    guards.push((
        "mutex",
        name("mutex"),
        Held::Mutex(c.mutex(&name("mutex")).lock().await?),
    ));
    guards.push((
        "fair_lock",
        name("fair_lock"),
        Held::Fair(c.fair_lock(&name("fair_lock")).lock().await?),
    ));
    guards.push((
        "semaphore",
        name("semaphore"),
        Held::Sem(c.semaphore(&name("semaphore"), 4).acquire().await?),
    ));
    let read = c.rwlock(&name("rwlock_read")).read().await?;
    let write = c.rwlock(&name("rwlock_write")).write().await?;
    let kinds = [
        "mutex",
        "rwlock_read",
        "rwlock_write",
        "fair_lock",
        "semaphore",
    ];
    let mut rows = Vec::new();
    for kind in kinds {
        let keys = c.keys(&name(kind))?;
        let found = lock_keys_on_server(env, &keys).await?;
        let mut bytes = 0i64;
        for k in &found {
            let b: Option<i64> = env
                .raw
                .query(
                    redis::cmd("MEMORY")
                        .arg("USAGE")
                        .arg(k)
                        .arg("SAMPLES")
                        .arg(0),
                )
                .await?;
            bytes += b.unwrap_or(0);
        }
        rows.push(Row::new(
            W,
            format!("keys_per_lock.{kind}"),
            found.len() as f64,
            "keys",
        ));
        rows.push(Row::new(
            W,
            format!("bytes_per_lock.{kind}"),
            bytes as f64,
            "bytes",
        ));
    }
    for (_, _, g) in guards {
        g.release().await?;
    }
    read.release().await?;
    write.release().await?;
    // Left for good (no TTL) must be only the fence counters; a capacity marker stays until
    // its TTL (the longest lease granted under it) runs out, by design
    // (docs/decisions/capacity-marker.md).
    let mut left = 0usize;
    let mut expiring = 0usize;
    let mut fences = 0usize;
    for kind in kinds {
        let keys = c.keys(&name(kind))?;
        let found = lock_keys_on_server(env, &keys).await?;
        for k in &found {
            let ttl: i64 = env.raw.query(redis::cmd("PTTL").arg(k)).await?;
            if ttl >= 0 {
                expiring += 1;
            } else {
                left += 1;
            }
        }
        fences += found.iter().filter(|k| **k == keys.fence()).count();
        delete_lock_keys(env, &keys).await?;
    }
    rows.push(
        Row::new(W, "keys_left", left as f64, "keys")
            .vs("fence_keys", fences as f64)
            .target(Target::EqualsBaseline),
    );
    rows.push(Row::new(W, "keys_left_expiring", expiring as f64, "keys"));
    Ok(rows)
}

// --- cluster, quorum ----------------------------------------------------------------------------

/// Servers and clients that only the `cluster` and `quorum` workloads need, started before
/// their first run and stopped when the bench ends.
#[derive(Default)]
struct Extra {
    cluster: Option<LockClient>,
    quorum: Option<LockClient>,
    /// Killed when `Extra` is dropped, after the clients (fields drop in order).
    servers: Vec<Started<RedisServer>>,
    #[cfg(feature = "cluster")]
    cluster_nodes: Option<Started<RedisCluster>>,
}

/// A local 3-master Redis Cluster (no replicas), once every node reports `cluster_state:ok`
/// and knows the others. Returns its URLs.
#[cfg(feature = "cluster")]
fn start_cluster(extra: &mut Extra) -> Vec<String> {
    let cluster = RedisCluster::start(3, 0);
    let pids = register(cluster.nodes());
    let cluster = extra.cluster_nodes.insert(Started {
        servers: cluster,
        pids,
    });
    cluster.urls()
}

/// Prepares what `workload` needs beyond the single node. `Ok(false)`: skip the workload.
async fn prepare(workload: &str, env: &Env, extra: &mut Extra) -> BoxResult<bool> {
    match workload {
        "cluster" => {
            #[cfg(feature = "cluster")]
            {
                let urls = start_cluster(extra);
                let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
                let client = LockClient::builder()
                    .prefix(&env.prefix)
                    .cluster(&urls)
                    .await?;
                extra.cluster = Some(client);
                Ok(true)
            }
            #[cfg(not(feature = "cluster"))]
            {
                let _ = (env, extra);
                eprintln!(
                    "bench: cluster skipped: LockClient::cluster needs the `cluster` feature; run \
                     `cargo run --release --features cluster --example bench`"
                );
                Ok(false)
            }
        }
        "quorum" => {
            let mut urls = Vec::new();
            for _ in 0..3 {
                let s = start_server();
                urls.push(s.url());
                extra.servers.push(s);
            }
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            let client = LockClient::builder()
                .prefix(&env.prefix)
                .quorum(&urls)
                .await?;
            extra.quorum = Some(client);
            Ok(true)
        }
        _ => Ok(true),
    }
}

/// `tasks` tasks, task `t` cycling over the names `t, t + tasks, ...` (`names` in all, so no
/// two tasks share a name), `pairs` Mutex acquire + release pairs each. Returns pairs per
/// second and the sorted pair latencies (ms).
async fn many_names(
    client: &LockClient,
    tag: &str,
    tasks: usize,
    names: usize,
    pairs: usize,
) -> BoxResult<(f64, Vec<f64>)> {
    let mut set = JoinSet::new();
    let start = Instant::now();
    for t in 0..tasks {
        let mine: Vec<Mutex> = (t..names)
            .step_by(tasks)
            .map(|n| client.mutex(&format!("{tag}-{n}")))
            .collect();
        set.spawn(async move {
            let mut samples = Vec::with_capacity(pairs);
            for k in 0..pairs {
                let t = Instant::now();
                mine[k % mine.len()].lock().await?.release().await?;
                samples.push(ms(t.elapsed()));
            }
            Ok::<Vec<f64>, redis_locks::Error>(samples)
        });
    }
    let mut samples = Vec::with_capacity(tasks * pairs);
    while let Some(r) = set.join_next().await {
        samples.extend(r??);
    }
    let per_s = (tasks * pairs) as f64 / start.elapsed().as_secs_f64();
    Ok((per_s, sorted(samples)))
}

async fn cluster(env: &Env, extra: &Extra, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "cluster";
    const TASKS: usize = 64;
    const NAMES: usize = 256;
    const PAIRS: usize = 100;
    let cluster = extra.cluster.as_ref().ok_or("cluster not started")?;
    let (c_tag, s_tag) = (format!("{W}-{run}-c"), format!("{W}-{run}-s"));
    // Warm-up: scripts loaded on every node, connections to every master open.
    many_names(cluster, &c_tag, TASKS, NAMES, 8).await?;
    many_names(&env.client, &s_tag, TASKS, NAMES, 8).await?;
    let (single, s) = many_names(&env.client, &s_tag, TASKS, NAMES, PAIRS).await?;
    let (per_s, c) = many_names(cluster, &c_tag, TASKS, NAMES, PAIRS).await?;
    Ok(vec![
        Row::new(W, "pairs_per_s", per_s, "1/s").vs("single_node_pairs_per_s", single),
        Row::new(W, "pair_p50_ms", pct(&c, 0.5), "ms").vs("single_node_pair_p50_ms", pct(&s, 0.5)),
        Row::new(W, "pair_p99_ms", pct(&c, 0.99), "ms")
            .vs("single_node_pair_p99_ms", pct(&s, 0.99)),
    ])
}

async fn quorum(env: &Env, extra: &Extra, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "quorum";
    const PAIRS: usize = 1000;
    let quorum = extra.quorum.as_ref().ok_or("quorum not started")?;
    let q = Prim::Mutex(quorum.mutex(&format!("{W}-{run}")));
    let single = Prim::Mutex(env.client.mutex(&format!("{W}-{run}-single")));
    pairs(&q, 50).await?; // warm-up: scripts loaded on the three servers
    pairs(&single, 50).await?;
    let (b, _) = pairs(&single, PAIRS).await?;
    let (s, elapsed) = pairs(&q, PAIRS).await?;
    Ok(vec![
        Row::new(W, "pair_p50_ms", pct(&s, 0.5), "ms").vs("single_node_pair_p50_ms", pct(&b, 0.5)),
        Row::new(W, "pair_p99_ms", pct(&s, 0.99), "ms")
            .vs("single_node_pair_p99_ms", pct(&b, 0.99)),
        Row::new(
            W,
            "pairs_per_s",
            PAIRS as f64 / elapsed.as_secs_f64(),
            "1/s",
        ),
    ])
}

// ---------------------------------------------------------------------------------------------

async fn run_once(env: &Env, extra: &Extra, workload: &str, run: usize) -> BoxResult<Vec<Row>> {
    match workload {
        "uncontended" => uncontended(env, run).await,
        "parallel" => parallel(env, run).await,
        "contended_mutex" => contended(env, run, false).await,
        "contended_fair" => contended(env, run, true).await,
        "writer_wait" => writer_wait(env, run).await,
        "fifo" => fifo(env, run, "fifo", Duration::from_millis(5)).await,
        "fifo_30ms" => fifo(env, run, "fifo_30ms", Duration::from_millis(30)).await,
        "semaphore" => semaphore(env, run).await,
        "server_cost" => server_cost(env, run).await,
        "server_hot" => server_hot(env, run).await,
        "renewals" => renewals(env, run).await,
        "memory" => memory(env, run).await,
        "cluster" => cluster(env, extra, run).await,
        "quorum" => quorum(env, extra, run).await,
        "multi" => multi(env, run).await,
        "election" => election(env, run).await,
        other => Err(format!("unknown workload {other}").into()),
    }
}

struct Args {
    json: bool,
    markdown: bool,
    only: Option<String>,
}

fn parse_args() -> BoxResult<Args> {
    let mut args = Args {
        json: false,
        markdown: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--markdown" => args.markdown = true,
            "--only" => {
                let name = it.next().ok_or("--only needs a workload name")?;
                if !WORKLOADS.contains(&name.as_str()) {
                    return Err(format!(
                        "unknown workload {name}; one of {}",
                        WORKLOADS.join(", ")
                    )
                    .into());
                }
                args.only = Some(name);
            }
            "-h" | "--help" => {
                println!(
                    "usage: cargo run --release [--features cluster] --example bench [-- --json | --markdown] [--only NAME]\n\
                     workloads: {} (cluster needs --features cluster)\nREDIS_URL: use that server instead of starting one",
                    WORKLOADS.join(", ")
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (try --help)").into()),
        }
    }
    Ok(args)
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    format!("{cpus} CPUs, {model}, load average {load}")
}

async fn redis_version(raw: &RedisStore) -> String {
    let v: redis_locks::Result<redis::Value> = raw.query(redis::cmd("INFO").arg("server")).await;
    let text = match v {
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(redis::Value::VerbatimString { text, .. }) => text,
        _ => String::new(),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

async fn bench(args: &Args, url: &str) -> BoxResult<()> {
    let prefix = format!("rlbench{}", std::process::id());
    let env = Env::connect(url, &prefix).await?;
    let version = redis_version(&env.raw).await;
    eprintln!(
        "bench: {} | redis-server {version} at {url} | PING baseline on the locks' own connection",
        machine()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut extra = Extra::default();
    for &w in WORKLOADS {
        if args.only.as_deref().is_some_and(|o| o != w) {
            continue;
        }
        let t = Instant::now();
        if !prepare(w, &env, &mut extra).await? {
            continue;
        }
        let mut runs = Vec::new();
        for run in 0..RUNS {
            runs.push(run_once(&env, &extra, w, run).await?);
        }
        let mut merged = merge_runs(&runs);
        if w == "server_cost" {
            if let Some(summary) = server_cost_summary(&merged) {
                merged.push(summary);
            }
        }
        if w == "server_hot" {
            let side_by_side = cold_next_to_hot(&rows, &merged);
            merged.extend(side_by_side);
        }
        eprintln!("bench: {w} done in {:.1} s", t.elapsed().as_secs_f64());
        if args.json {
            for r in &merged {
                println!("{}", json_line(r));
            }
        }
        rows.extend(merged);
    }
    let total = started.elapsed().as_secs_f64();
    if !args.json {
        println!(
            "machine: {} | redis-server {version} | {RUNS} runs per workload, medians shown\n",
            machine()
        );
        if args.markdown {
            print_markdown(&rows);
        } else {
            print_table(&rows);
        }
        let missed: Vec<String> = rows
            .iter()
            .filter(|r| r.met() == Some(false))
            .map(|r| format!("{}/{}", r.workload, r.metric))
            .collect();
        println!(
            "\ntargets met: {} of {}; missed: {}",
            rows.iter().filter(|r| r.met() == Some(true)).count(),
            rows.iter().filter(|r| r.met().is_some()).count(),
            if missed.is_empty() {
                "none".to_owned()
            } else {
                missed.join(", ")
            }
        );
        println!("total: {total:.1} s");
    }
    eprintln!("bench: total {total:.1} s");
    Ok(())
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    if let Ok(spec) = std::env::var(LEADER_ENV) {
        return leader_process(&spec).await;
    }
    let args = parse_args()?;
    let (server, url) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            let s = start_server();
            let url = s.url();
            (Some(s), url)
        }
    };
    // Ctrl-C: stop the servers this bench started (by their pids) before exiting.
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let started = STARTED.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (pid, dir) in started {
                let _ = Command::new("kill").arg(pid.to_string()).status();
                let _ = std::fs::remove_dir_all(&dir);
            }
            std::process::exit(130);
        }
    });
    let result = bench(&args, &url).await;
    if server.is_none() {
        // A shared server: leave nothing behind under this run's prefix.
        if let Ok(raw) = RedisStore::connect(&url).await {
            cleanup_prefix(&raw, &format!("rlbench{}", std::process::id())).await;
        }
    }
    drop(server);
    result
}

async fn cleanup_prefix(raw: &RedisStore, prefix: &str) {
    let mut cursor: u64 = 0;
    loop {
        let r: redis_locks::Result<(u64, Vec<String>)> = raw
            .query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}:*"))
                    .arg("COUNT")
                    .arg(1000),
            )
            .await;
        let Ok((next, keys)) = r else { return };
        if !keys.is_empty() {
            let _: redis_locks::Result<i64> = raw.query(redis::cmd("DEL").arg(&keys)).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// Multi-lock of 2 and 8 names (one acquire step, the releases sent together) against as
/// many single Mutex locks taken one after the other and released last first, uncontended,
/// in alternating blocks on the same connection; PING as the round-trip baseline.
async fn multi(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "multi";
    const BLOCK: usize = 50;
    const BLOCKS: usize = 20;
    let ping = ping_p50(&env.raw, 1000).await?;
    let mut rows = Vec::new();
    for n in [2usize, 8] {
        let names: Vec<String> = (0..n).map(|i| format!("{W}-{run}-{n}-{i}")).collect();
        let multi = env.client.multi_lock(&names);
        let singles: Vec<_> = names.iter().map(|name| env.client.mutex(name)).collect();
        let (mut m, mut s) = (Vec::new(), Vec::new());
        for block in 0..=BLOCKS {
            for _ in 0..BLOCK {
                let t = Instant::now();
                multi.lock().await?.release().await?;
                if block > 0 {
                    m.push(ms(t.elapsed()));
                }
            }
            for _ in 0..BLOCK {
                let t = Instant::now();
                let mut held = Vec::with_capacity(n);
                for single in &singles {
                    held.push(single.lock().await?);
                }
                while let Some(g) = held.pop() {
                    g.release().await?;
                }
                if block > 0 {
                    s.push(ms(t.elapsed()));
                }
            }
        }
        let (m, s) = (sorted(m), sorted(s));
        rows.push(
            Row::new(W, format!("multi_{n}_pair_p50_ms"), pct(&m, 0.5), "ms")
                .vs(format!("singles_{n}_pairs_p50_ms"), pct(&s, 0.5))
                .target(Target::RatioAtMost(1.0)),
        );
        rows.push(
            Row::new(W, format!("singles_{n}_pairs_p50_ms"), pct(&s, 0.5), "ms")
                .vs("ping_p50_ms", ping),
        );
        rows.push(
            Row::new(W, format!("multi_{n}_pair_p99_ms"), pct(&m, 0.99), "ms")
                .vs("ping_p50_ms", ping),
        );
    }
    Ok(rows)
}

/// Set in the environment of the leader process the `election` workload kills:
/// `<redis url>|<key prefix>|<election name>|<lease ms>`.
const LEADER_ENV: &str = "RL_BENCH_LEADER";

/// The killed leader: campaigns, says `LEADING <term>` on stdout, and leads (renewing) until
/// it is killed or its stdin closes.
async fn leader_process(spec: &str) -> BoxResult<()> {
    let [url, prefix, name, lease_ms] = spec.split('|').collect::<Vec<_>>()[..] else {
        return Err(format!("{LEADER_ENV}: expected url|prefix|name|lease_ms, got {spec}").into());
    };
    let client = LockClient::builder().prefix(prefix).connect(url).await?;
    let leadership = client
        .election(name)
        .lease(Duration::from_millis(lease_ms.parse()?))
        .campaign(format!("pid-{}", std::process::id()))
        .await?;
    println!("LEADING {}", leadership.term());
    use std::io::Write as _;
    std::io::stdout().flush()?;
    // Lead until the parent kills this process (or goes away: stdin closes).
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin()
            .read_line(&mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
    })
    .await?;
    drop(leadership);
    Ok(())
}

/// Leader election: how soon a standby leads after the leader's process is killed (SIGKILL:
/// no resign, its renewals stop), bounded by the leader's lease; and how soon an observer on
/// another connection sees a proclaimed value, next to PING.
async fn election(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "election";
    const LEASE: Duration = Duration::from_millis(500);
    const KILLS: usize = 5;
    const PROCLAIMS: usize = 200;
    let ping = ping_p50(&env.raw, 1000).await?;
    let mut rows = Vec::new();

    // Observe latency: client A leads and proclaims; client B's observer yields the value.
    let name = format!("{W}-{run}-observe");
    let mut leadership = env.client.election(&name).campaign("v0").await?;
    let mut observer = env.client_b.election(&name).observe();
    while observer.next().await.flatten().map(|l| l.value) != Some("v0".into()) {}
    let mut seen = Vec::with_capacity(PROCLAIMS);
    for i in 1..=PROCLAIMS {
        let value = format!("v{i}");
        let t = Instant::now();
        leadership.proclaim(value.as_str()).await?;
        loop {
            let state = tokio::time::timeout(Duration::from_secs(10), observer.next())
                .await
                .map_err(|_| "the observer saw no proclaim within 10 s")?
                .ok_or("the observer stopped")?;
            if state.map(|l| l.value) == Some(value.clone()) {
                break;
            }
        }
        seen.push(ms(t.elapsed()));
    }
    leadership.resign().await?;
    let seen = sorted(seen);
    rows.push(
        Row::new(W, "observe_after_proclaim_p50_ms", pct(&seen, 0.5), "ms")
            .vs("ping_p50_ms", ping)
            .target(Target::RatioAtMost(4.0)),
    );
    rows.push(
        Row::new(W, "observe_after_proclaim_p99_ms", pct(&seen, 0.99), "ms")
            .vs("ping_p50_ms", ping),
    );

    // Fail-over: a leader process is killed; a standby (queued before the kill) and an
    // observer on this process measure from the kill.
    let exe = std::env::current_exe()?;
    let name = format!("{W}-{run}-failover");
    let (mut campaign_ms, mut observe_ms, mut past_lease_ms) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..KILLS {
        let mut child = Command::new(&exe)
            .env(
                LEADER_ENV,
                format!("{}|{}|{name}|{}", env.url, env.prefix, LEASE.as_millis()),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("leader stdout")?;
        let line = tokio::task::spawn_blocking(move || {
            use std::io::BufRead as _;
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            line
        })
        .await?;
        let old_term: u64 = line
            .trim()
            .strip_prefix("LEADING ")
            .ok_or_else(|| format!("leader process said {line:?}"))?
            .parse()?;
        let election = env.client_b.election(&name).lease(LEASE);
        let mut observer = election.observe();
        while observer.next().await.flatten().map(|l| l.term) != Some(old_term) {}
        let standby = {
            let election = election.clone();
            tokio::spawn(async move { election.campaign("standby").await })
        };
        // The standby queues behind the leader before the kill.
        let queue = env.client.fair_lock(&name);
        while queue.inspect().await?.waiters.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Wait a random part of a renewal interval, so the kill lands anywhere in it.
        let spread = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos()
            % 150;
        tokio::time::sleep(Duration::from_millis(u64::from(spread))).await;
        let killed = Instant::now();
        child.kill()?;
        // The dead leader's lease left on the server: the part of the fail-over it imposes.
        let left = queue
            .inspect()
            .await?
            .holders
            .first()
            .map_or(0.0, |h| ms(h.lease_remaining));
        let _ = child.wait();
        let leadership = tokio::time::timeout(Duration::from_secs(10), standby)
            .await
            .map_err(|_| "no takeover within 10 s")???;
        campaign_ms.push(ms(killed.elapsed()));
        past_lease_ms.push(ms(killed.elapsed()) - left);
        loop {
            let state = tokio::time::timeout(Duration::from_secs(10), observer.next())
                .await
                .map_err(|_| "the observer saw no takeover within 10 s")?
                .ok_or("the observer stopped")?;
            if state.map(|l| l.term) == Some(leadership.term()) {
                break;
            }
        }
        observe_ms.push(ms(killed.elapsed()));
        leadership.resign().await?;
    }
    let lease = ms(LEASE);
    let (campaign_ms, observe_ms) = (sorted(campaign_ms), sorted(observe_ms));
    let past_lease_ms = sorted(past_lease_ms);
    rows.push(
        Row::new(
            W,
            "failover_after_kill_p50_ms",
            pct(&campaign_ms, 0.5),
            "ms",
        )
        .vs("lease_ms", lease)
        .target(Target::RatioAtMost(1.0)),
    );
    rows.push(
        Row::new(
            W,
            "failover_after_kill_max_ms",
            pct(&campaign_ms, 1.0),
            "ms",
        )
        .vs("lease_ms", lease),
    );
    rows.push(
        Row::new(
            W,
            "failover_seen_by_observer_p50_ms",
            pct(&observe_ms, 0.5),
            "ms",
        )
        .vs("lease_ms", lease),
    );
    rows.push(
        Row::new(
            W,
            "takeover_past_lease_end_p50_ms",
            pct(&past_lease_ms, 0.5),
            "ms",
        )
        .vs("ping_p50_ms", ping),
    );
    Ok(rows)
}
