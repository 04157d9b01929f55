//! The connection of a [`RedisStore`](super::RedisStore) on a primary found through Redis
//! Sentinel: a `ConnectionManager` on the primary the sentinels name, replaced by one on the
//! new primary when the old one refuses writes (`READONLY`) or cannot be reached.
//! See `docs/decisions/sentinel.md`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::sentinel::Sentinel;
use redis::{ConnectionInfo, RedisError};
use tokio::sync::Mutex;

use super::redis::{Connect, RedisConfig};
use crate::store::hub::{Subscriber, WakeHub};

/// The primary's connection, and how to find the next one.
pub(crate) struct SentinelConn {
    sentinels: Mutex<Sentinel>,
    master: String,
    /// How to reach the data nodes the sentinels name (username and password, database,
    /// TLS); `None`: plain connections with the default user.
    node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
    config: RedisConfig,
    hub: Arc<WakeHub>,
    current: RwLock<Current>,
    /// The channels the hub subscribed, subscribed again on each new primary. Also serialises
    /// subscriptions with a switch, so none is made on a connection being replaced.
    channels: Mutex<BTreeSet<String>>,
    /// Set by a failure that may mean a failover: until the sentinels answer again, each
    /// step asks them for the primary before it is sent.
    suspect: AtomicBool,
}

#[derive(Clone)]
struct Current {
    conn: ConnectionManager,
    address: String,
    /// Bumped on each switch, so callers that saw the same failure switch once.
    generation: u64,
}

/// Whether `err` says the connection no longer leads to a primary: the server was demoted
/// (`READONLY`), or could not be reached.
pub(crate) fn needs_new_primary(err: &RedisError) -> bool {
    err.code() == Some("READONLY")
        || err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
}

impl SentinelConn {
    /// Asks the sentinels at `urls` for the primary of `master` and connects to it.
    pub(crate) async fn connect(
        urls: &[&str],
        master: &str,
        node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
        config: RedisConfig,
        hub: Arc<WakeHub>,
    ) -> crate::vocab::error::Result<Arc<Self>> {
        let infos = urls
            .iter()
            .map(|u| super::redis::parse_url(u))
            .collect::<crate::vocab::error::Result<Vec<ConnectionInfo>>>()?;
        if infos.is_empty() {
            return Err(crate::vocab::error::Error::invalid(
                "Sentinel URLs",
                "give the address of at least one sentinel, e.g. redis://127.0.0.1:26379",
            ));
        }
        let mut sentinels = Sentinel::build(infos)
            .map_err(|e| crate::vocab::error::Error::invalid("Sentinel URLs", e.to_string()))?;
        let (conn, address) =
            Self::open(&mut sentinels, master, node.as_ref(), &config, &hub).await?;
        Ok(Arc::new(SentinelConn {
            sentinels: Mutex::new(sentinels),
            master: master.to_owned(),
            node,
            config,
            hub,
            current: RwLock::new(Current {
                conn,
                address,
                generation: 0,
            }),
            channels: Mutex::new(BTreeSet::new()),
            suspect: AtomicBool::new(false),
        }))
    }

    /// The primary's address from the sentinels, and a connection to it.
    async fn open(
        sentinels: &mut Sentinel,
        master: &str,
        node: Option<&redis::sentinel::SentinelNodeConnectionInfo>,
        config: &RedisConfig,
        hub: &Arc<WakeHub>,
    ) -> crate::vocab::error::Result<(ConnectionManager, String)> {
        let client = sentinels
            .async_master_for(master, node)
            .await
            .map_err(|e| match e.kind() {
                redis::ErrorKind::MasterNameNotFoundBySentinel => {
                    crate::vocab::error::Error::invalid(
                        "Sentinel master name",
                        format!(
                        "no sentinel names a reachable primary for `{master}`: use a name from \
                         the sentinels' `sentinel monitor <name> ...` lines (SENTINEL MASTERS \
                         lists them), and check that the primary is up"
                    ),
                    )
                }
                _ => super::redis::error_from_redis("", e),
            })?;
        let info = client.get_connection_info().clone();
        let address = info.addr().to_string();
        let conn = super::redis::manager(info, config.clone(), hub.clone(), Connect::Now).await?;
        Ok((conn, address))
    }

    fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The connection to the primary as last resolved, and its generation.
    pub(crate) fn conn(&self) -> (ConnectionManager, u64) {
        let c = self.current();
        (c.conn, c.generation)
    }

    /// The connection may no longer lead to the primary: ask the sentinels before the next
    /// step.
    pub(crate) fn suspect(&self) {
        self.suspect.store(true, Ordering::SeqCst);
    }

    /// After a failure that may mean a failover, asks the sentinels for the primary (and
    /// follows it) before a step is sent.
    pub(crate) async fn verify(&self) {
        if self.suspect.load(Ordering::SeqCst) {
            let seen = self.current().generation;
            self.reresolve(seen).await;
        }
    }

    /// After a failure on generation `seen`: asks the sentinels for the primary again and,
    /// if it moved, connects to the new one, subscribes the hub's channels there and wakes
    /// every waiter (wake-ups published during the switch were missed). Returns whether
    /// the connection changed (by this call or a concurrent one).
    pub(crate) async fn reresolve(&self, seen: u64) -> bool {
        let mut sentinels = self.sentinels.lock().await;
        let now = self.current();
        if now.generation != seen {
            return true;
        }
        let client = match sentinels
            .async_master_for(&self.master, self.node.as_ref())
            .await
        {
            Ok(c) => c,
            Err(err) => {
                tracing::debug!(%err, "sentinels did not name a primary");
                return false;
            }
        };
        let info = client.get_connection_info().clone();
        let address = info.addr().to_string();
        if address == now.address {
            // The sentinels (and the server itself) still say it is the primary.
            self.suspect.store(false, Ordering::SeqCst);
            return false;
        }
        let conn =
            match super::redis::manager(info, self.config.clone(), self.hub.clone(), Connect::Now)
                .await
            {
                Ok(c) => c,
                Err(err) => {
                    tracing::debug!(%err, %address, "new primary not reachable yet");
                    return false;
                }
            };
        let channels = self.channels.lock().await;
        let mut sub = conn.clone();
        for channel in channels.iter() {
            if let Err(err) = sub.subscribe(channel).await {
                tracing::debug!(channel, %err, "resubscribe on the new primary failed");
            }
        }
        tracing::info!(from = %now.address, to = %address, "following the Sentinel failover");
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Current {
            conn,
            address,
            generation: now.generation + 1,
        };
        self.suspect.store(false, Ordering::SeqCst);
        drop(channels);
        self.hub.wake_all();
        true
    }
}

/// The hub's subscriptions on the current primary.
pub(crate) struct SentinelSubscriber(pub(crate) Arc<SentinelConn>);

#[async_trait]
impl Subscriber for SentinelSubscriber {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        let mut channels = self.0.channels.lock().await;
        channels.insert(channel.to_owned());
        self.0.current().conn.subscribe(channel).await
    }
    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        let mut channels = self.0.channels.lock().await;
        channels.remove(channel);
        self.0.current().conn.unsubscribe(channel).await
    }
}
