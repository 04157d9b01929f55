//! What the bench reads off the server and the machine: round trips, CPU time, command
//! statistics, configuration, versions.

use std::collections::HashMap;
use std::time::Instant;

use redis_locks::testing::store::RedisStore;

use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

/// PING round trip p50 (ms) on the locks' own connection.
pub async fn ping_p50(raw: &RedisStore, n: usize) -> BoxResult<f64> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: String = raw.query(&redis::cmd("PING")).await?;
        samples.push(ms(t.elapsed()));
    }
    Ok(pct(&sorted(samples), 0.5))
}

/// CPU seconds (user + system) this process used so far, from `/proc/self/stat`.
pub fn own_cpu_secs() -> f64 {
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
pub async fn server_cpu_secs(raw: &RedisStore) -> BoxResult<f64> {
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

/// `(calls, usec)` of every command from `INFO commandstats`, by name (lower case): the
/// server's own accounting, which counts the commands a script runs under their own names.
pub async fn cmdstats(raw: &RedisStore) -> BoxResult<HashMap<String, (u64, u64)>> {
    let v: redis::Value = raw.query(redis::cmd("INFO").arg("commandstats")).await?;
    let text = match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        redis::Value::SimpleString(s) => s,
        other => return Err(format!("unexpected INFO reply {other:?}").into()),
    };
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let (mut calls, mut usec) = (0, 0);
        for field in rest.trim().split(',') {
            if let Some(v) = field.strip_prefix("calls=") {
                calls = v.parse()?;
            } else if let Some(v) = field.strip_prefix("usec=") {
                usec = v.parse()?;
            }
        }
        out.insert(name.to_owned(), (calls, usec));
    }
    Ok(out)
}

/// `(calls, usec)` of one command from `INFO commandstats`: the server's own CPU accounting.
pub async fn cmdstat(raw: &RedisStore, cmd: &str) -> BoxResult<(u64, u64)> {
    Ok(cmdstats(raw).await?.get(cmd).copied().unwrap_or((0, 0)))
}

pub async fn config_get(raw: &RedisStore, key: &str) -> BoxResult<String> {
    let v: HashMap<String, String> = raw.query(redis::cmd("CONFIG").arg("GET").arg(key)).await?;
    v.get(key)
        .cloned()
        .ok_or_else(|| format!("CONFIG GET {key}: no value").into())
}

pub async fn config_set(raw: &RedisStore, key: &str, value: &str) -> BoxResult<()> {
    let _: String = raw
        .query(redis::cmd("CONFIG").arg("SET").arg(key).arg(value))
        .await?;
    Ok(())
}

pub fn machine() -> String {
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

/// The server's name and version (`redis-server 7.0.15`, `valkey-server 9.1.2`), from
/// `INFO server`.
pub async fn server_version(raw: &RedisStore) -> String {
    let v: redis_locks::Result<redis::Value> = raw.query(redis::cmd("INFO").arg("server")).await;
    let text = match v {
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(redis::Value::VerbatimString { text, .. }) => text,
        _ => String::new(),
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    // Valkey reports the Redis version it is compatible with too; its own comes first.
    match (field("valkey_version:"), field("redis_version:")) {
        (Some(v), _) => format!("valkey-server {v}"),
        (None, Some(v)) => format!("redis-server {v}"),
        (None, None) => "a server of unknown version".to_owned(),
    }
}

/// The wake-up floor's p50s (ms), [`wake_floor`].
pub struct WakeFloor {
    /// Samples back to back.
    pub hot: f64,
    /// Each sample after the idle sleep.
    pub idle: f64,
}

/// The wake-up floor: from a script call that only publishes, on one connection, to the
/// message reaching a task of this process through another connection's RESP3 pushes. That
/// is the path a hand-off's wake-up takes (the release's script on the holder's connection,
/// the grant pushed to the waiter's), with no lock work on either side: what a hand-off
/// cannot beat. `n` samples back to back, then `n` each after an `idle` sleep, as a hand-off
/// after a hold starts: threads that went idle are woken again, which on a virtual machine
/// costs more than the round trip.
pub async fn wake_floor(url: &str, n: usize, idle: std::time::Duration) -> BoxResult<WakeFloor> {
    use redis::aio::{ConnectionManager, ConnectionManagerConfig};
    use redis::{IntoConnectionInfo, ProtocolVersion, PushKind};
    let client = || -> BoxResult<redis::Client> {
        let info = url.into_connection_info()?;
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        Ok(redis::Client::open(info.set_redis_settings(settings))?)
    };
    let (pushed, mut pushes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let config = ConnectionManagerConfig::new().set_push_sender(move |push: redis::PushInfo| {
        if push.kind == PushKind::Message {
            let _ = pushed.send(());
        }
        Ok::<(), ()>(())
    });
    let mut waiter = ConnectionManager::new_with_config(client()?, config).await?;
    let mut holder = ConnectionManager::new(client()?).await?;
    let channel = "redis-locks-bench:{wake-floor}:ch";
    waiter.subscribe(channel).await?;
    // The waiting task: stamps each wake-up as it is woken, as a waiter's acquire returns.
    let (stamp, mut stamps) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let waiting = tokio::spawn(async move {
        while pushes.recv().await.is_some() {
            if stamp.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    let publish = redis::Script::new("return redis.call('PUBLISH', KEYS[1], ARGV[1])");
    let mut p50 = [0.0; 2];
    for (series, pause) in [std::time::Duration::ZERO, idle].into_iter().enumerate() {
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + 50 {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let t = Instant::now();
            let _: i64 = publish
                .key(channel)
                .arg("*")
                .invoke_async(&mut holder)
                .await?;
            let woken = stamps
                .recv()
                .await
                .ok_or("the wake-up floor's waiter ended")?;
            if i >= 50 {
                samples.push(ms(woken.saturating_duration_since(t)));
            }
        }
        p50[series] = pct(&sorted(samples), 0.5);
    }
    waiting.abort();
    Ok(WakeFloor {
        hot: p50[0],
        idle: p50[1],
    })
}
