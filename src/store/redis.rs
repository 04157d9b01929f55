//! [`RedisStore`]: the store contract on a real Redis, one Lua script per protocol step.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, IntoConnectionInfo, ProtocolVersion, Script, Value};

use super::{ms, Acquire, Busy, Claim, Family, Grant, HoldKind, HolderState, Slot, Snapshot};
use super::{PermitChange, Store, WaiterState};
use crate::error::{Error, Result};
use crate::hub::{Subscriber, WakeHub};
use crate::keys::LockKeys;
use crate::scripts::SCRIPTS;

/// When [`RedisStore::connect_to_hub`] opens the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connect {
    /// Before returning; fails if the server cannot be reached.
    Now,
    /// With the first command, and again after a failed one.
    Lazily,
}

/// Connection settings of a [`RedisStore`].
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// A reply slower than this counts as lost (the outcome is then unknown and the library
    /// confirms or cleans up by token). Default [`RedisConfig::DEFAULT_RESPONSE_TIMEOUT`].
    pub response_timeout: Duration,
    /// Limit for establishing a connection. Default [`RedisConfig::DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// How many times a lost connection is re-dialled (with back-off) before a command fails
    /// with a connection error. Default [`RedisConfig::DEFAULT_RECONNECT_RETRIES`]; quorum
    /// mode uses 0 so a server that is down fails fast.
    pub reconnect_retries: usize,
}

impl RedisConfig {
    /// Default response timeout: 2 s.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default connection timeout: 2 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default reconnect attempts: 2.
    pub const DEFAULT_RECONNECT_RETRIES: usize = 2;
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            response_timeout: Self::DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            reconnect_retries: Self::DEFAULT_RECONNECT_RETRIES,
        }
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

/// The store on a Redis server (or Redis Cluster with the `cluster` feature).
///
/// Every step is one `EVALSHA` (reloaded transparently after `SCRIPT FLUSH`), so an
/// uncontended acquire and a release cost one round trip each. Wake-ups arrive as RESP3
/// pushes on the same multiplexed connection, re-subscribed after a reconnect.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    hub: Arc<WakeHub>,
    publish: &'static str,
    /// Whether a writer's release hands the lock straight to the next waiting writer. Off in
    /// quorum mode: each server would pick its own next writer, and a wake-up from one server
    /// is no majority grant.
    hand_over: bool,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.conn {
            Conn::Single(_) => "single",
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisStore").field("kind", &kind).finish()
    }
}

struct SingleSubscriber(ConnectionManager);

#[async_trait]
impl Subscriber for SingleSubscriber {
    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        self.0.subscribe(channel).await
    }
    async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        self.0.unsubscribe(channel).await
    }
}

#[cfg(feature = "cluster")]
struct ClusterSubscriber(redis::cluster_async::ClusterConnection);

#[cfg(feature = "cluster")]
#[async_trait]
impl Subscriber for ClusterSubscriber {
    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        self.0.ssubscribe(channel).await
    }
    async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        self.0.sunsubscribe(channel).await
    }
}

impl RedisStore {
    /// Connects to one Redis server (`redis://host:port/db`, `rediss://` with TLS support
    /// compiled into the redis crate).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// [`RedisStore::connect`] with explicit settings.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self> {
        let hub = WakeHub::remote();
        let (store, subscriber) =
            Self::connect_to_hub(url, config, hub.clone(), Connect::Now).await?;
        hub.start(subscriber);
        Ok(store)
    }

    /// Connects with the pushes of the connection delivered to `hub`, which the caller starts
    /// with the returned subscriber (a quorum fans one hub out over several servers). With
    /// [`Connect::Lazily`] nothing is sent yet: the first command connects and a failed
    /// connection is tried again by the next command (a quorum server that is down at
    /// start-up joins when it comes back); only a bad URL fails then.
    pub(crate) async fn connect_to_hub(
        url: &str,
        config: RedisConfig,
        hub: Arc<WakeHub>,
        when: Connect,
    ) -> Result<(Self, Box<dyn Subscriber>)> {
        let bad_url = |e: redis::RedisError| Error::invalid("Redis URL", e.to_string());
        let info = url.into_connection_info().map_err(bad_url)?;
        // RESP3 lets pub/sub pushes share the command connection.
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let client = redis::Client::open(info).map_err(bad_url)?;
        let pushes = hub.clone();
        let manager_config = ConnectionManagerConfig::new()
            .set_push_sender(move |push| {
                pushes.on_push(push);
                Ok::<(), ()>(())
            })
            .set_automatic_resubscription()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_number_of_retries(config.reconnect_retries)
            .set_max_delay(Duration::from_millis(500));
        let conn = if when == Connect::Lazily {
            ConnectionManager::new_lazy_with_config(client, manager_config)
        } else {
            client
                .get_connection_manager_with_config(manager_config)
                .await
        }
        .map_err(|e| Error::from_redis("", e))?;
        let subscriber = Box::new(SingleSubscriber(conn.clone()));
        let store = RedisStore {
            conn: Conn::Single(conn),
            hub,
            publish: "PUBLISH",
            hand_over: true,
        };
        Ok((store, subscriber))
    }

    /// Connects to a Redis Cluster through any of its nodes. Wake-ups use sharded pub/sub
    /// (`SSUBSCRIBE`/`SPUBLISH`) on the lock's own slot.
    #[cfg(feature = "cluster")]
    pub async fn cluster(urls: &[&str], config: RedisConfig) -> Result<Self> {
        let bad_url = |e: redis::RedisError| Error::invalid("Redis URL", e.to_string());
        let hub = WakeHub::remote();
        let pushes = hub.clone();
        let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(move |push| {
                pushes.on_push(push);
                Ok::<(), ()>(())
            })
            .response_timeout(config.response_timeout)
            .connection_timeout(config.connect_timeout)
            .build()
            .map_err(bad_url)?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| Error::from_redis("", e))?;
        hub.start(Box::new(ClusterSubscriber(conn.clone())));
        Ok(RedisStore {
            conn: Conn::Cluster(conn),
            hub,
            publish: "SPUBLISH",
            hand_over: true,
        })
    }

    /// This store's writer releases no longer hand the lock to the next waiting writer.
    pub(crate) fn without_hand_over(mut self) -> Self {
        self.hand_over = false;
        self
    }

    /// Sends any command on the store's connection (for tools and tests).
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let result = match self.conn.clone() {
            Conn::Single(mut c) => cmd.query_async(&mut c).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
        };
        result.map_err(|e| Error::from_redis("", e))
    }

    async fn run<T: FromRedisValue>(
        &self,
        lock: &LockKeys,
        script: &Script,
        keys: &[String],
        now: Option<u64>,
        args: &[String],
    ) -> Result<T> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        let now = now.map(|n| n.to_string()).unwrap_or_default();
        inv.arg(&now);
        inv.arg(self.publish);
        for a in args {
            inv.arg(a);
        }
        let result = match self.conn.clone() {
            Conn::Single(mut c) => invoke(&inv, &mut c).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(mut c) => {
                let mut all_args = vec![now, self.publish.to_owned()];
                all_args.extend_from_slice(args);
                invoke_cluster(script, keys, &all_args, &mut c).await
            }
        };
        result.map_err(|e| Error::from_redis(lock.name(), e))
    }
}

/// `EVALSHA`, loading the script after `NOSCRIPT` (the redis crate does that once). A
/// `SCRIPT FLUSH` can land between that load and the second `EVALSHA`; a few more rounds make
/// that race practically impossible without needing `EVAL` (which an ACL may rightly deny).
async fn invoke<T: FromRedisValue>(
    inv: &redis::ScriptInvocation<'_>,
    conn: &mut (impl ConnectionLike + Send),
) -> redis::RedisResult<T> {
    let mut rounds = 0;
    loop {
        match inv.invoke_async(conn).await {
            Err(err) if err.code() == Some("NOSCRIPT") && rounds < 3 => rounds += 1,
            other => return other,
        }
    }
}

/// `EVALSHA` on the node that owns the lock's slot; on `NOSCRIPT` (that node's script cache
/// was flushed, or it was just promoted or added), `EVAL` of the source on the same node,
/// which runs the step and caches the script there again.
///
/// The redis crate's own reload sends `SCRIPT LOAD` to every node of the cluster and fails
/// if any one of them is unreachable (a failed master during a failover), so it is not used.
#[cfg(feature = "cluster")]
async fn invoke_cluster<T: FromRedisValue>(
    script: &Script,
    keys: &[String],
    args: &[String],
    conn: &mut redis::cluster_async::ClusterConnection,
) -> redis::RedisResult<T> {
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha
        .arg(script.get_hash())
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    match evalsha.query_async(conn).await {
        Err(err) if err.code() == Some("NOSCRIPT") => {
            let Some(source) = source_of(script) else {
                return Err(err);
            };
            let mut eval = redis::cmd("EVAL");
            eval.arg(source).arg(keys.len()).arg(keys).arg(args);
            eval.query_async(conn).await
        }
        other => other,
    }
}

/// The source of one of the crate's scripts, by its SHA1.
#[cfg(feature = "cluster")]
fn source_of(script: &Script) -> Option<&'static str> {
    static BY_HASH: std::sync::LazyLock<std::collections::HashMap<String, &'static str>> =
        std::sync::LazyLock::new(|| {
            crate::scripts::SOURCES
                .iter()
                .map(|(_, src)| (Script::new(src).get_hash().to_owned(), *src))
                .collect()
        });
    BY_HASH.get(script.get_hash()).copied()
}

fn corrupt(lock: &LockKeys, what: &str) -> Error {
    Error::WrongType {
        name: lock.name().to_owned(),
        detail: format!("unexpected script reply: {what}"),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Double(d) => Some(*d as i64),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(a) => Some(a),
        Value::Nil => Some(&[]),
        _ => None,
    }
}

fn acquire_reply(lock: &LockKeys, reply: &[i64]) -> Result<Acquire> {
    match reply {
        [1, fence, lease, ..] => Ok(Acquire::Granted(Grant {
            fence: *fence as u64,
            lease: Duration::from_millis((*lease).max(0) as u64),
        })),
        [0, retry, position, rest @ ..] => Ok(Acquire::Busy(Busy {
            retry_after: (*retry >= 0).then(|| Duration::from_millis(*retry as u64)),
            position: (*position >= 0).then_some(*position as u64),
            heartbeat_until: rest.first().filter(|h| **h >= 0).map(|h| *h as u64),
        })),
        other => Err(corrupt(lock, &format!("{other:?}"))),
    }
}

/// Splits a ticket-queue member into token and weight (`token#weight`).
pub(crate) fn split_member(member: &str) -> (String, u32) {
    if let Some((token, weight)) = member.rsplit_once('#') {
        if let Ok(w) = weight.parse::<u32>() {
            return (token.to_owned(), w);
        }
    }
    (member.to_owned(), 1)
}

/// A ticket claim's weight and capacity argument: `<n>` for a Semaphore (a count stored by
/// set_permits wins), `=<n>` for a fixed capacity.
fn ticket_args(claim: &Claim) -> (u32, String) {
    match claim.slot {
        Slot::Ticket {
            weight,
            capacity,
            resizable,
        } => {
            let capacity = if resizable {
                capacity.to_string()
            } else {
                format!("={capacity}")
            };
            (weight, capacity)
        }
        // Not reachable through the public API: lease-lock slots never reach queue scripts.
        _ => (1, "=1".to_owned()),
    }
}

impl RedisStore {
    /// Raises the lock's fence counter to at least `fence` (quorum mode: a server that
    /// lagged must never hand out a smaller fence than the majority did).
    pub(crate) async fn raise_fence(&self, lock: &LockKeys, fence: u64) -> Result<u64> {
        let keys = [lock.fence()];
        let reached: i64 = self
            .run(
                lock,
                &SCRIPTS.raise_fence,
                &keys,
                None,
                &[fence.to_string()],
            )
            .await?;
        Ok(reached.max(0) as u64)
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<Acquire> {
        claim.check()?;
        let wait = if wait { "1" } else { "0" }.to_owned();
        let reply: Vec<i64> = match claim.slot {
            Slot::Write | Slot::Read => {
                let mode = if claim.slot == Slot::Write { "w" } else { "r" };
                let policy = match claim.policy {
                    super::Policy::Writer => "writer",
                    super::Policy::Reader => "reader",
                };
                let args = [
                    claim.token.clone(),
                    mode.to_owned(),
                    ms(claim.lease).to_string(),
                    policy.to_owned(),
                    wait,
                    ms(claim.heartbeat).to_string(),
                ];
                self.run(lock, &SCRIPTS.rw_acquire, &lock.lease_lock(), now, &args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let (weight, capacity) = ticket_args(claim);
                let args = [
                    claim.token.clone(),
                    weight.to_string(),
                    ms(claim.lease).to_string(),
                    ms(claim.heartbeat).to_string(),
                    capacity,
                    wait,
                ];
                self.run(
                    lock,
                    &SCRIPTS.queue_acquire,
                    &lock.ticket_queue(),
                    now,
                    &args,
                )
                .await?
            }
        };
        acquire_reply(lock, &reply)
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, now: Option<u64>) -> Result<bool> {
        claim.check()?;
        let held: i64 = match claim.slot {
            Slot::Write | Slot::Read => {
                let hand_over = if self.hand_over { "1" } else { "0" };
                let args = [claim.token.clone(), hand_over.to_owned()];
                self.run(lock, &SCRIPTS.rw_release, &lock.lease_lock(), now, &args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let (weight, capacity) = ticket_args(claim);
                let args = [
                    claim.token.clone(),
                    weight.to_string(),
                    ms(claim.heartbeat).to_string(),
                    capacity,
                ];
                self.run(
                    lock,
                    &SCRIPTS.queue_release,
                    &lock.ticket_queue(),
                    now,
                    &args,
                )
                .await?
            }
        };
        Ok(held == 1)
    }

    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
    ) -> Result<bool> {
        claim.check()?;
        let renewed: i64 = match claim.slot {
            Slot::Write | Slot::Read => {
                let mode = if claim.slot == Slot::Write { "w" } else { "r" };
                let args = [claim.token.clone(), ms(lease).to_string(), mode.to_owned()];
                self.run(lock, &SCRIPTS.rw_extend, &lock.lease_lock(), now, &args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let (weight, _) = ticket_args(claim);
                let args = [
                    claim.token.clone(),
                    weight.to_string(),
                    ms(lease).to_string(),
                ];
                self.run(
                    lock,
                    &SCRIPTS.queue_extend,
                    &lock.ticket_queue(),
                    now,
                    &args,
                )
                .await?
            }
        };
        Ok(renewed == 1)
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<Option<u64>> {
        claim.check()?;
        let reply: Vec<i64> = match claim.slot {
            Slot::Write | Slot::Read => {
                let args = [claim.token.clone(), ms(claim.lease).to_string()];
                self.run(lock, &SCRIPTS.rw_downgrade, &lock.lease_lock(), now, &args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let (weight, capacity) = ticket_args(claim);
                let args = [
                    claim.token.clone(),
                    weight.to_string(),
                    ms(claim.lease).to_string(),
                    ms(claim.heartbeat).to_string(),
                    capacity,
                ];
                self.run(
                    lock,
                    &SCRIPTS.queue_downgrade,
                    &lock.ticket_queue(),
                    now,
                    &args,
                )
                .await?
            }
        };
        match reply.as_slice() {
            [1, fence, ..] => Ok(Some(*fence as u64)),
            [0, ..] => Ok(None),
            other => Err(corrupt(lock, &format!("{other:?}"))),
        }
    }

    async fn inspect(&self, lock: &LockKeys, family: Family, now: Option<u64>) -> Result<Snapshot> {
        let bad = |what: &str| corrupt(lock, what);
        match family {
            Family::LeaseLock => {
                let v: Value = self
                    .run(lock, &SCRIPTS.rw_inspect, &lock.lease_lock(), now, &[])
                    .await?;
                let a = array(&v).ok_or_else(|| bad("inspect reply"))?;
                let [now_ms, fence, wtok, wrem, readers, writers, ..] = a else {
                    return Err(bad("inspect reply length"));
                };
                let mut holders = Vec::new();
                let wtok = text(wtok).unwrap_or_default();
                if !wtok.is_empty() {
                    holders.push(HolderState {
                        token: wtok,
                        kind: HoldKind::Write,
                        remaining_ms: int(wrem).unwrap_or(0).max(0) as u64,
                    });
                }
                let rows = array(readers).ok_or_else(|| bad("readers"))?;
                for pair in rows.chunks(2) {
                    if let [t, rem] = pair {
                        holders.push(HolderState {
                            token: text(t).unwrap_or_default(),
                            kind: HoldKind::Read,
                            remaining_ms: int(rem).unwrap_or(0).max(0) as u64,
                        });
                    }
                }
                let rows = array(writers).ok_or_else(|| bad("waiting writers"))?;
                let waiters = rows
                    .chunks(2)
                    .filter_map(|pair| match pair {
                        [t, rem] => Some(WaiterState {
                            token: text(t).unwrap_or_default(),
                            weight: 1,
                            ticket: 0,
                            heartbeat_remaining_ms: int(rem).unwrap_or(0).max(0) as u64,
                        }),
                        _ => None,
                    })
                    .collect();
                Ok(Snapshot {
                    now_ms: int(now_ms).unwrap_or(0).max(0) as u64,
                    fence: int(fence).unwrap_or(0).max(0) as u64,
                    permits: None,
                    holders,
                    waiters,
                })
            }
            Family::TicketQueue => {
                let v: Value = self
                    .run(lock, &SCRIPTS.queue_inspect, &lock.ticket_queue(), now, &[])
                    .await?;
                let a = array(&v).ok_or_else(|| bad("inspect reply"))?;
                let [now_ms, fence, permits, holders, waiters, ..] = a else {
                    return Err(bad("inspect reply length"));
                };
                let holders = array(holders)
                    .ok_or_else(|| bad("holders"))?
                    .chunks(2)
                    .filter_map(|pair| match pair {
                        [m, rem] => {
                            let (token, weight) = split_member(&text(m)?);
                            Some(HolderState {
                                token,
                                kind: HoldKind::Permits(weight),
                                remaining_ms: int(rem).unwrap_or(0).max(0) as u64,
                            })
                        }
                        _ => None,
                    })
                    .collect();
                let waiters = array(waiters)
                    .ok_or_else(|| bad("waiters"))?
                    .chunks(3)
                    .filter_map(|row| match row {
                        [m, ticket, rem] => {
                            let (token, weight) = split_member(&text(m)?);
                            Some(WaiterState {
                                token,
                                weight,
                                ticket: int(ticket).unwrap_or(0).max(0) as u64,
                                heartbeat_remaining_ms: int(rem).unwrap_or(0).max(0) as u64,
                            })
                        }
                        _ => None,
                    })
                    .collect();
                let permits = int(permits).unwrap_or(-1);
                Ok(Snapshot {
                    now_ms: int(now_ms).unwrap_or(0).max(0) as u64,
                    fence: int(fence).unwrap_or(0).max(0) as u64,
                    permits: u32::try_from(permits).ok(),
                    holders,
                    waiters,
                })
            }
        }
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> Result<u32> {
        let (op, n, base) = match change {
            PermitChange::Set(n) => ('=', n, n),
            PermitChange::Add { by, base } => ('+', by, base),
            PermitChange::Forget { by, base } => ('-', by, base),
        };
        let args = [
            format!("{op}{n}"),
            base.to_string(),
            ms(heartbeat).to_string(),
        ];
        let permits: i64 = self
            .run(
                lock,
                &SCRIPTS.queue_set_permits,
                &lock.ticket_queue(),
                now,
                &args,
            )
            .await?;
        u32::try_from(permits).map_err(|_| corrupt(lock, &format!("permits {permits}")))
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> Result<u64> {
        let fence: i64 = self
            .run(
                lock,
                &SCRIPTS.force_release,
                &lock.force_release(),
                now,
                &[],
            )
            .await?;
        Ok(fence.max(0) as u64)
    }

    async fn wait_replicas(
        &self,
        lock: &LockKeys,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ms(timeout));
        let acked: i64 = match self.conn.clone() {
            Conn::Single(mut c) => wait.query_async(&mut c).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(mut c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                // WAIT has no key: send it to the master of the lock's slot, where the
                // lock's writes went.
                let slot = crate::keys::hash_slot(lock.channel().as_bytes());
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                c.route_command(wait, route)
                    .await
                    .and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))
            }
        }
        .map_err(|e| Error::from_redis(lock.name(), e))?;
        Ok(u32::try_from(acked.max(0)).unwrap_or(u32::MAX))
    }

    fn hub(&self) -> &Arc<WakeHub> {
        &self.hub
    }
}
