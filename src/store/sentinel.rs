//! The connection of a [`RedisStore`](super::RedisStore) on a primary found through Redis
//! Sentinel: a `ConnectionManager` on the primary the sentinels name, replaced by one on the
//! new primary when the old one refuses writes (`READONLY`) or cannot be reached.
//! See `docs/decisions/sentinel.md`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::sentinel::Sentinel;
use redis::{ConnectionInfo, RedisError};
use tokio::sync::Mutex;

use super::redis::{Connect, Pushes, RedisConfig};
use crate::store::hub::{Subscriber, WakeHub};

/// The primary's connection, and how to find the next one.
pub(crate) struct SentinelConn {
    sentinels: Mutex<Sentinel>,
    /// The sentinels' addresses, for the lock engine's copy ([`SentinelConn::engine_copy`]).
    sentinel_infos: Vec<ConnectionInfo>,
    master: String,
    /// How to reach the data nodes the sentinels name (username and password, database,
    /// TLS); `None`: plain connections with the default user.
    node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
    config: RedisConfig,
    hub: Arc<WakeHub>,
    /// Shared by a client's connection and its engine's copy, so each follows a failover the
    /// other found.
    known: Arc<RwLock<Known>>,
    current: RwLock<Current>,
    /// The engine's copy connects with its first command, on the engine's runtime; the
    /// client's connection before it is used.
    when: Connect,
    /// The channels the hub subscribed, subscribed again on each new primary. Also serialises
    /// subscriptions with a switch, so none is made on a connection being replaced.
    channels: Mutex<BTreeSet<String>>,
    /// Set by a failure that may mean a failover, or by the connection dropping (the manager
    /// dials the same address again without an error, and the sentinels close a demoted
    /// primary's connections): until the sentinels answer again, each step asks them for the
    /// primary before it is sent, one question at a time and at most every
    /// [`ASK_AGAIN_AFTER`] while they do not answer.
    suspect: Arc<AtomicBool>,
    /// When the sentinels last left a question unanswered.
    unanswered_at: std::sync::Mutex<Option<Instant>>,
}

/// The longest a step waits for the sentinels to name the primary: a deadline above the
/// redis crate's own, which asks the sentinels in the order given, each with its connect
/// (1 s) and response (500 ms) timeouts, and takes the first answer. A tighter bound would cut
/// the question off while it waits for a first sentinel that does not answer, before it
/// reads the answers of the others.
const SENTINEL_QUERY_BOUND: Duration = Duration::from_secs(5);

/// After the sentinels left a question unanswered, steps go to the connection's primary
/// without asking them for this long.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// The primary the sentinels last named to either of a client's connections.
#[derive(Clone)]
struct Known {
    info: ConnectionInfo,
    address: String,
    /// Bumped when the primary moves.
    generation: u64,
}

#[derive(Clone)]
struct Current {
    conn: ConnectionManager,
    address: String,
    /// The [`Known`] generation the connection is on, so callers that saw the same failure
    /// switch once, and a connection sees when the other one moved.
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
        let mut sentinels = Sentinel::build(infos.clone())
            .map_err(|e| crate::vocab::error::Error::invalid("Sentinel URLs", e.to_string()))?;
        let suspect = Arc::new(AtomicBool::new(false));
        let pushes = Pushes {
            hub: hub.clone(),
            dropped: Some(suspect.clone()),
        };
        let (conn, info) =
            Self::open(&mut sentinels, master, node.as_ref(), &config, pushes).await?;
        let address = info.addr().to_string();
        Ok(Arc::new(SentinelConn {
            sentinels: Mutex::new(sentinels),
            sentinel_infos: infos,
            master: master.to_owned(),
            node,
            config,
            hub,
            known: Arc::new(RwLock::new(Known {
                info,
                address: address.clone(),
                generation: 0,
            })),
            current: RwLock::new(Current {
                conn,
                address,
                generation: 0,
            }),
            when: Connect::Now,
            channels: Mutex::new(BTreeSet::new()),
            suspect,
            unanswered_at: std::sync::Mutex::new(None),
        }))
    }

    /// The primary's address from the sentinels, and a connection to it.
    async fn open(
        sentinels: &mut Sentinel,
        master: &str,
        node: Option<&redis::sentinel::SentinelNodeConnectionInfo>,
        config: &RedisConfig,
        pushes: Pushes,
    ) -> crate::vocab::error::Result<(ConnectionManager, ConnectionInfo)> {
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
        let conn =
            super::redis::manager(info.clone(), config.clone(), pushes, Connect::Now).await?;
        Ok((conn, info))
    }

    /// A copy for the lock engine, on a connection of its own to the primary this one uses,
    /// made by the runtime that uses it first; no sentinel is asked until a step fails there
    /// (see `docs/decisions/sentinel.md`). It subscribes to nothing; each of the two follows a
    /// new primary the other learns of. `None` if the connection cannot be set up (a setting
    /// the redis crate refuses).
    pub(crate) fn engine_copy(&self) -> Option<Arc<SentinelConn>> {
        let known = self.known();
        let hub = WakeHub::remote();
        let suspect = Arc::new(AtomicBool::new(false));
        let pushes = Pushes {
            hub: hub.clone(),
            dropped: Some(suspect.clone()),
        };
        let conn = super::redis::lazy_manager(known.info, self.config.clone(), pushes)?;
        let sentinels = Sentinel::build(self.sentinel_infos.clone()).ok()?;
        Some(Arc::new(SentinelConn {
            sentinels: Mutex::new(sentinels),
            sentinel_infos: self.sentinel_infos.clone(),
            master: self.master.clone(),
            node: self.node.clone(),
            config: self.config.clone(),
            hub,
            known: self.known.clone(),
            current: RwLock::new(Current {
                conn,
                address: known.address,
                generation: known.generation,
            }),
            when: Connect::Lazily,
            channels: Mutex::new(BTreeSet::new()),
            suspect,
            unanswered_at: std::sync::Mutex::new(None),
        }))
    }

    fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn known(&self) -> Known {
        self.known.read().unwrap_or_else(|p| p.into_inner()).clone()
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

    /// Before a step: follows a new primary the client's other connection learned of (one
    /// this connection has not failed on yet may be an old primary the sentinels have left),
    /// and after a failure that may mean a failover, asks the sentinels for the primary.
    pub(crate) async fn verify(&self) {
        let differs = |known: &Known, now: &Current| {
            known.generation != now.generation || known.address != now.address
        };
        // Compared in place on every step (nothing cloned); no writer holds both locks.
        let behind = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let now = self.current.read().unwrap_or_else(|p| p.into_inner());
            differs(&known, &now)
        };
        if behind {
            let _sentinels = self.sentinels.lock().await;
            let (known, now) = (self.known(), self.current());
            if differs(&known, &now) {
                self.switch(&now, known).await;
            }
        }
        if self.suspect.load(Ordering::SeqCst) {
            let seen = self.current().generation;
            self.reresolve(seen).await;
        }
    }

    /// After a failure on generation `seen`: asks the sentinels for the primary again and,
    /// if it moved, switches to it. Returns whether the connection changed (by this call or
    /// a concurrent one).
    pub(crate) async fn reresolve(&self, seen: u64) -> bool {
        let mut sentinels = self.sentinels.lock().await;
        let now = self.current();
        if now.generation != seen {
            return true;
        }
        let unanswered = || self.unanswered_at.lock().unwrap_or_else(|p| p.into_inner());
        if unanswered().is_some_and(|at| at.elapsed() < ASK_AGAIN_AFTER) {
            return false;
        }
        let asked = sentinels.async_master_for(&self.master, self.node.as_ref());
        let client = match tokio::time::timeout(SENTINEL_QUERY_BOUND, asked).await {
            Ok(Ok(c)) => c,
            outcome => {
                let err = match outcome {
                    Ok(Err(err)) => err.to_string(),
                    _ => format!("no answer within {SENTINEL_QUERY_BOUND:?}"),
                };
                tracing::debug!(%err, "sentinels did not name a primary");
                *unanswered() = Some(Instant::now());
                return false;
            }
        };
        *unanswered() = None;
        let info = client.get_connection_info().clone();
        let address = info.addr().to_string();
        if address == now.address {
            // The sentinels (and the server itself) still say it is the primary.
            self.suspect.store(false, Ordering::SeqCst);
            return false;
        }
        let known = self.known();
        let generation = if known.address == address {
            known.generation
        } else {
            known.generation.max(now.generation) + 1
        };
        let named = Known {
            info,
            address,
            generation,
        };
        self.switch(&now, named).await
    }

    /// Moves from `now` to the primary `to` (called with the sentinels' lock held): connects
    /// there, subscribes the hub's channels and wakes every waiter (wake-ups published during
    /// the switch were missed), and makes `to` the client's known primary. Returns whether
    /// it moved (not if the new primary cannot be reached yet).
    async fn switch(&self, now: &Current, to: Known) -> bool {
        if to.address == now.address {
            self.current
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .generation = to.generation;
            return true;
        }
        let (info, config) = (to.info.clone(), self.config.clone());
        let pushes = Pushes {
            hub: self.hub.clone(),
            dropped: Some(self.suspect.clone()),
        };
        let conn = match self.when {
            Connect::Lazily => super::redis::lazy_manager(info, config, pushes).ok_or_else(|| {
                crate::vocab::error::Error::invalid("the primary's address", &to.address)
            }),
            Connect::Now => super::redis::manager(info, config, pushes, self.when).await,
        };
        let conn = match conn {
            Ok(c) => c,
            Err(err) => {
                tracing::debug!(%err, address = %to.address, "new primary not reachable yet");
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
        tracing::info!(from = %now.address, to = %to.address, "following the Sentinel failover");
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Current {
            conn,
            address: to.address.clone(),
            generation: to.generation,
        };
        {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            if to.generation > known.generation {
                *known = to;
            }
        }
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
