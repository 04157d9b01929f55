//! The environment shared by the workloads: the store and clients on the bench's server.

use std::sync::Arc;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::RedisStore;
use redis_locks::LockClient;

use crate::BoxResult;

#[derive(Clone)]
pub struct Env {
    /// The store behind `client`; `raw.query` uses the very connection the locks use.
    pub raw: RedisStore,
    pub client: LockClient,
    /// A second client on its own connection (the "other process").
    pub client_b: LockClient,
    pub prefix: String,
    pub url: String,
}

impl Env {
    pub async fn connect(url: &str, prefix: &str) -> BoxResult<Env> {
        let raw = if crate::callgrind::active() {
            // The server under callgrind answers a pipelined batch far slower than a reply
            // counts as lost by default.
            let config = redis_locks::RedisConfig {
                response_timeout: std::time::Duration::from_secs(120),
                ..Default::default()
            };
            RedisStore::connect_with(url, config).await?
        } else {
            RedisStore::connect(url).await?
        };
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

    pub fn clients(&self) -> [&LockClient; 2] {
        [&self.client, &self.client_b]
    }
}

pub async fn cleanup_prefix(raw: &RedisStore, prefix: &str) {
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

/// Deletes every key of the lock `keys` names (its lease-lock and ticket-queue keys).
pub async fn delete_lock_keys(env: &Env, keys: &LockKeys) -> BoxResult<()> {
    let mut cmd = redis::cmd("DEL");
    for k in keys.lease_lock().iter().chain(keys.ticket_queue().iter()) {
        cmd.arg(k);
    }
    let _: i64 = env.raw.query(&cmd).await?;
    Ok(())
}
