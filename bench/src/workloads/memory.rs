//! Keys and bytes per held lock, and what is left on the server after the release.

use redis_locks::testing::keys::LockKeys;

use crate::env::{delete_lock_keys, Env};
use crate::prim::Held;
use crate::row::{Row, Target};
use crate::BoxResult;

pub async fn lock_keys_on_server(env: &Env, keys: &LockKeys) -> BoxResult<Vec<String>> {
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

const W: &str = "memory";
const KINDS: [&str; 5] = [
    "mutex",
    "rwlock_read",
    "rwlock_write",
    "fair_lock",
    "semaphore",
];

pub async fn memory(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
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
    let mut rows = Vec::new();
    for kind in KINDS {
        let keys = c.keys(&name(kind))?;
        let found = lock_keys_on_server(env, &keys).await?;
        let bytes = bytes_of(env, &found).await?;
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
    rows.extend(left_behind(env, run).await?);
    Ok(rows)
}

/// The bytes `MEMORY USAGE` reports for `keys`, summed.
async fn bytes_of(env: &Env, keys: &[String]) -> BoxResult<i64> {
    let mut bytes = 0i64;
    for k in keys {
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
    Ok(bytes)
}

/// What the released locks left on the server (then deleted). Nothing may be left for good (no
/// TTL): the fence counters and capacity markers stay until their TTL (the longest lease
/// granted under them) runs out, by design (docs/decisions/fences-from-the-clock.md,
/// docs/decisions/capacity-marker.md), so every key is gone within one lease.
async fn left_behind(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let mut left = 0usize;
    let mut expiring = 0usize;
    let mut longest_ttl = 0i64;
    for kind in KINDS {
        let keys = env.client.keys(&format!("{W}-{run}-{kind}"))?;
        let found = lock_keys_on_server(env, &keys).await?;
        for k in &found {
            let ttl: i64 = env.raw.query(redis::cmd("PTTL").arg(k)).await?;
            if ttl >= 0 {
                expiring += 1;
                longest_ttl = longest_ttl.max(ttl);
            } else {
                left += 1;
            }
        }
        delete_lock_keys(env, &keys).await?;
    }
    let lease_ms = redis_locks::DEFAULT_LEASE.as_millis() as f64;
    Ok(vec![
        Row::new(W, "keys_left", left as f64, "keys").target(Target::Equals(0.0)),
        Row::new(W, "keys_left_expiring", expiring as f64, "keys"),
        Row::new(W, "longest_ttl_left", longest_ttl as f64, "ms")
            .vs("lease", lease_ms)
            .target(Target::AtMostBaselinePlus(0.0)),
    ])
}
