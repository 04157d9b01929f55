//! [`RedisStore`]: the store contract on a real Redis, one Lua script per protocol step.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{
    ConnectionInfo, FromRedisValue, IntoConnectionInfo, ProtocolVersion, ToRedisArgs, Value,
};

use super::{
    ms, Acquire, AcquireAll, Claim, Family, Part, PermitChange, Rate, RateClaim, RateDecision,
    RateSnapshot, Slot, Snapshot, Store,
};
use crate::store::hub::{Subscriber, WakeHub};
use crate::vocab::capability::Capability;
use crate::vocab::error::{Cause, Error, NotNow, Result};
use crate::vocab::keys::LockKeys;
use crate::wire::rate::{RateAcquireArgs, RateCancelArgs, RateInspectArgs, RateReply, RateView};
use crate::wire::scripts::{Scripts, Step, Variant};
use crate::wire::{
    AcquireReply, Argv, Change, DowngradeReply, Eviction, Fence, Flag, HandOver, LeaderView,
    LeaseLockView, Ms, MultiAcquireArgs, MultiAcquireReply, NoArgs, Now, Permits, PrefixArg,
    ProclaimArgs, Publish, QueueAcquireArgs, QueueDowngradeArgs, QueueExtendArgs, QueueReleaseArgs,
    RaiseFenceArgs, Renewal, RwAcquireArgs, RwDowngradeArgs, RwExtendArgs, RwReleaseArgs,
    SetPermitsArgs, TicketQueueView,
};

/// When [`RedisStore::connect_to_hub`] opens the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connect {
    /// Before returning; fails if the server cannot be reached.
    Now,
    /// With the first command, and again after a failed one.
    Lazily,
}

/// Connection settings for Redis: timeouts of the connections the client opens.
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
    Cluster(super::cluster::ClusterConn),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<super::sentinel::SentinelConn>),
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
    publish: Publish,
    /// Whether a writer's release hands the lock straight to the next waiting writer. Off in
    /// quorum mode: each server would pick its own next writer, and a wake-up from one server
    /// is no majority grant.
    hand_over: bool,
    /// The scripts this store runs (the production ones, except in tests).
    scripts: &'static Scripts,
    /// The server's `host:port`, named by connection errors (empty for a Cluster or
    /// Sentinel, whose node changes).
    address: Arc<str>,
    /// How a single server's connection was made, for the lock engine's connection of its
    /// own ([`Store::for_engine`]).
    origin: Option<Arc<(ConnectionInfo, RedisConfig)>>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.conn {
            Conn::Single(_) => "single",
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => "cluster",
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => "sentinel",
        };
        f.debug_struct("RedisStore").field("kind", &kind).finish()
    }
}

struct SingleSubscriber(ConnectionManager);

#[async_trait]
impl Subscriber for SingleSubscriber {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.0.clone().subscribe(channel).await
    }
    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.0.clone().unsubscribe(channel).await
    }
}

#[cfg(feature = "cluster")]
struct ClusterSubscriber(redis::cluster_async::ClusterConnection);

#[cfg(feature = "cluster")]
#[async_trait]
impl Subscriber for ClusterSubscriber {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.0.clone().ssubscribe(channel).await
    }
    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.0.clone().sunsubscribe(channel).await
    }
}

/// A `rediss://` URL needs this crate's `tls` feature; without it, say so before the redis
/// crate reports a missing feature of its own.
fn check_tls_support(url: &str, tls_compiled: bool) -> Result<()> {
    let scheme = url.split("://").next().unwrap_or("");
    if !tls_compiled && scheme.eq_ignore_ascii_case("rediss") {
        return Err(Error::invalid(
            "Redis URL",
            "a rediss:// (TLS) URL needs redis-locks' `tls` feature: in Cargo.toml, \
             redis-locks = { version = \"...\", features = [\"tls\"] }",
        ));
    }
    Ok(())
}

/// The form of the URLs the library takes.
pub(crate) const URL_FORM: &str = "redis://[user:password@]host:port[/db]";

/// A URL the redis crate could not use, with the form expected.
fn bad_url(url: &str, err: redis::RedisError) -> Error {
    Error::invalid(
        "Redis URL",
        format!(
            "{:?}: {err}; expected {URL_FORM} (rediss:// for TLS)",
            crate::vocab::url::redact_url(url)
        ),
    )
}

/// Parses a `redis://` / `rediss://` URL into the redis crate's connection settings.
pub(crate) fn parse_url(url: &str) -> Result<ConnectionInfo> {
    check_tls_support(url, cfg!(feature = "tls"))?;
    url.into_connection_info().map_err(|e| bad_url(url, e))
}

/// Redis 7.0 or later, Valkey 7.2 or later (every Valkey release is 7.2 or later); another
/// server that answers `HELLO` like Redis is judged by its version as Redis would be.
pub(crate) fn supported_server(server: &str, version: &str) -> Result<()> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let needed = if server.eq_ignore_ascii_case("valkey") {
        (7, 2)
    } else {
        (7, 0)
    };
    if (major, minor) >= needed {
        Ok(())
    } else {
        Err(Error::UnsupportedServer {
            server: server.to_owned(),
            version: version.to_owned(),
            missing: Capability::Version,
            seen: String::new(),
        })
    }
}

/// Classifies a failure to connect to `address`: a reply that is not the Redis protocol
/// means another service listens there.
fn connect_error(address: &str, err: redis::RedisError) -> Error {
    if err.kind() == redis::ErrorKind::Parse {
        return Error::NotRedis {
            address: address.to_owned(),
            http: false,
            cause: crate::vocab::error::Cause::boxed(err),
        };
    }
    match error_from_redis("", err) {
        Error::Connection { cause, .. } => Error::connection("connect", address, cause),
        other => other,
    }
}

/// Where a connection's pushes go: the wake-up hub, and (a Sentinel's connections) a flag
/// that a lost connection raises.
#[derive(Clone)]
pub(crate) struct Pushes {
    pub(crate) hub: Arc<WakeHub>,
    pub(crate) dropped: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl From<Arc<WakeHub>> for Pushes {
    fn from(hub: Arc<WakeHub>) -> Self {
        Pushes { hub, dropped: None }
    }
}

/// A connection manager on the server of `info`, in RESP3 with its pushes delivered to
/// `pushes` and re-subscribed after a reconnect (see [`RedisStore::connect_to_hub`] for
/// `when`).
pub(crate) async fn manager(
    info: ConnectionInfo,
    config: RedisConfig,
    pushes: impl Into<Pushes>,
    when: Connect,
) -> Result<ConnectionManager> {
    let address = info.addr().to_string();
    let plain_tcp = matches!(info.addr(), redis::ConnectionAddr::Tcp(..));
    let connect_timeout = config.connect_timeout;
    let (client, manager_config) = manager_parts(info, config, pushes.into())?;
    let conn = if when == Connect::Lazily {
        ConnectionManager::new_lazy_with_config(client, manager_config)
    } else {
        client
            .get_connection_manager_with_config(manager_config)
            .await
    }
    .map_err(|e| connect_error(&address, e));
    match conn {
        Ok(conn) => Ok(conn),
        Err(Error::NotRedis { address, cause, .. }) => {
            let http = plain_tcp && answers_like_http(&address, connect_timeout).await;
            Err(Error::NotRedis {
                address,
                http,
                cause,
            })
        }
        Err(err) => Err(err),
    }
}

/// A connection manager on the server of `info` that connects with its first command (and
/// again after a failed one), on the runtime that sends it; its pushes go to `pushes`. `None`
/// if the redis crate refuses the settings.
pub(crate) fn lazy_manager(
    info: ConnectionInfo,
    config: RedisConfig,
    pushes: impl Into<Pushes>,
) -> Option<ConnectionManager> {
    let (client, manager_config) = manager_parts(info, config, pushes.into()).ok()?;
    ConnectionManager::new_lazy_with_config(client, manager_config).ok()
}

/// The client (in RESP3, so pub/sub pushes share the command connection) and the manager's
/// settings for the server of `info`, its pushes delivered to `pushes`.
fn manager_parts(
    info: ConnectionInfo,
    config: RedisConfig,
    pushes: Pushes,
) -> Result<(redis::Client, ConnectionManagerConfig)> {
    let address = info.addr().to_string();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(settings);
    let client = redis::Client::open(info).map_err(|e| bad_url(&address, e))?;
    let manager_config = ConnectionManagerConfig::new()
        .set_push_sender(move |push: redis::PushInfo| {
            if let Some(dropped) = &pushes.dropped
                && push.kind == redis::PushKind::Disconnection
            {
                dropped.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            pushes.hub.on_push(push);
            Ok::<(), ()>(())
        })
        .set_automatic_resubscription()
        .set_response_timeout(Some(config.response_timeout))
        .set_connection_timeout(Some(config.connect_timeout))
        .set_number_of_retries(config.reconnect_retries)
        .set_max_delay(Duration::from_millis(500));
    Ok((client, manager_config))
}

/// Whether the service at `address` (`host:port`, plain TCP) answers like an HTTP server: a
/// request with a method no server implements (`PING / HTTP/1.0`, which changes nothing) is
/// answered with a status line, or (an HTTP/0.9 answer) an HTML page. Asked on a connection
/// of its own, once a connection found that the service does not speak the Redis protocol,
/// to name it in [`Error::NotRedis`].
async fn answers_like_http(address: &str, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(b"PING / HTTP/1.0\r\n\r\n").await.ok()?;
        let mut head = [0u8; 5];
        stream.read_exact(&mut head).await.ok()?;
        Some(&head == b"HTTP/" || head.starts_with(b"<!") || head.eq_ignore_ascii_case(b"<html"))
    };
    matches!(tokio::time::timeout(timeout, ask).await, Ok(Some(true)))
}

impl RedisStore {
    /// Connects to one Redis server (`redis://host:port/db`, `rediss://` with TLS support
    /// compiled into the redis crate). No constructor of the store checks what the server
    /// can do: the client does, with [`Store::check_server`] under its key prefix.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// [`RedisStore::connect`] with explicit settings.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self> {
        Self::connect_info(parse_url(url)?, config).await
    }

    /// Connects with the connection settings of a redis crate `ConnectionInfo` (address,
    /// database, user and password, TLS): the library sets RESP3 and its own timeouts on top.
    pub async fn connect_info(info: ConnectionInfo, config: RedisConfig) -> Result<Self> {
        let hub = WakeHub::remote();
        let (store, subscriber) =
            Self::connect_to_hub(info, config, hub.clone(), Connect::Now).await?;
        hub.start(subscriber);
        Ok(store)
    }

    /// The replies the capability check judges, each command's own.
    async fn probe_replies(&self, key: &str) -> redis::RedisResult<super::capabilities::Replies> {
        let probe = crate::wire::scripts::capabilities();
        let mut hello = redis::cmd("HELLO");
        hello.arg(3);
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD")
            .arg(include_str!("../../lua/capabilities.lua"));
        let mut run = redis::cmd("EVALSHA");
        run.arg(probe.get_hash()).arg(1).arg(key);
        let mut pipe = redis::pipe();
        pipe.add_command(hello.clone())
            .add_command(load)
            .add_command(run.clone())
            .add_command(run)
            .ignore_errors();
        let pipe = &pipe;
        let replies: Vec<redis::RedisResult<Value>> = match self.conn.clone() {
            Conn::Single(mut c) => pipe.query_async(&mut c).await?,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(s) => {
                on_primary(&s, |mut c| async move { pipe.query_async(&mut c).await }).await?
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => {
                let mut c = c.get().await;
                // Each command to its own node: the probe to the key's slot (EVALSHA, then
                // EVAL there after NOSCRIPT), HELLO to any node.
                let keys = [key.to_owned()];
                let hello = hello.query_async(&mut c).await;
                let first = invoke_cluster(probe, &keys, &NoArgs, &mut c).await;
                let second = invoke_cluster(probe, &keys, &NoArgs, &mut c).await;
                vec![hello, Ok(Value::Okay), first, second]
            }
        };
        super::capabilities::Replies::new(replies)
    }

    /// The same store on a connection of its own, made on first use by the runtime that
    /// uses it first (the lock engine's: [`Store::for_engine`]); on Sentinel, to the primary
    /// this store's connection is on; on Cluster, through the start-up nodes (this store's
    /// connection serves while that fails). `None` for a store with no single server's
    /// settings kept.
    pub(crate) fn engine_copy(&self) -> Option<RedisStore> {
        let conn = match &self.conn {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(s) => Conn::Sentinel(s.engine_copy()?),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => Conn::Cluster(c.engine_copy()),
            _ => {
                let (info, config) = self.origin.as_deref()?.clone();
                // The engine subscribes to nothing: its pushes go to a hub nobody starts.
                Conn::Single(lazy_manager(info, config, WakeHub::remote())?)
            }
        };
        Some(RedisStore {
            conn,
            hub: self.hub.clone(),
            publish: self.publish,
            hand_over: self.hand_over,
            scripts: self.scripts,
            address: self.address.clone(),
            origin: None,
        })
    }

    /// Connects with the pushes of the connection delivered to `hub`, which the caller starts
    /// with the returned subscriber (a quorum fans one hub out over several servers). With
    /// [`Connect::Lazily`] nothing is sent yet: the first command connects and a failed
    /// connection is tried again by the next command (a quorum server that is down at
    /// start-up joins when it comes back); only a bad URL fails then.
    pub(crate) async fn connect_to_hub(
        info: ConnectionInfo,
        config: RedisConfig,
        hub: Arc<WakeHub>,
        when: Connect,
    ) -> Result<(Self, Box<dyn Subscriber>)> {
        let address = Arc::from(info.addr().to_string());
        let origin = Some(Arc::new((info.clone(), config.clone())));
        let conn = manager(info, config, hub.clone(), when).await?;
        let subscriber = Box::new(SingleSubscriber(conn.clone()));
        let store = RedisStore {
            conn: Conn::Single(conn),
            hub,
            publish: Publish::Plain,
            hand_over: true,
            scripts: Scripts::get(Variant::Production),
            address,
            origin,
        };
        Ok((store, subscriber))
    }

    /// Connects to the primary that the Redis Sentinels at `sentinel_urls` name for
    /// `master_name`, and follows it through failovers: a write refused with `READONLY` (the
    /// old primary was demoted) or a lost connection makes the store ask the sentinels
    /// again, and a `READONLY`-refused step is sent again to the new primary. See
    /// the crate's `docs/decisions/sentinel.md`. `node`: how to reach the data nodes (credentials, TLS),
    /// as the redis crate's Sentinel client takes it.
    #[cfg(feature = "sentinel")]
    pub async fn sentinel(
        sentinel_urls: &[&str],
        master_name: &str,
        node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
        config: RedisConfig,
    ) -> Result<Self> {
        let hub = WakeHub::remote();
        let conn = super::sentinel::SentinelConn::connect(
            sentinel_urls,
            master_name,
            node,
            config,
            hub.clone(),
        )
        .await?;
        let store = RedisStore {
            conn: Conn::Sentinel(conn.clone()),
            hub: hub.clone(),
            publish: Publish::Plain,
            hand_over: true,
            scripts: Scripts::get(Variant::Production),
            address: Arc::from(""),
            origin: None,
        };
        hub.start(Box::new(super::sentinel::SentinelSubscriber(conn)));
        Ok(store)
    }

    /// Connects to a Redis Cluster through any of its nodes. Wake-ups use sharded pub/sub
    /// (`SSUBSCRIBE`/`SPUBLISH`) on the lock's own slot.
    #[cfg(feature = "cluster")]
    pub async fn cluster(urls: &[&str], config: RedisConfig) -> Result<Self> {
        Self::cluster_with(
            redis::cluster::ClusterClientBuilder::new(urls.to_vec()),
            config,
        )
        .await
    }

    /// [`RedisStore::cluster`] from a cluster client builder the caller configured (nodes,
    /// username and password, TLS, read-from-replicas...): the store sets RESP3, its push
    /// receiver and `config`'s timeouts on top.
    #[cfg(feature = "cluster")]
    pub async fn cluster_with(
        builder: redis::cluster::ClusterClientBuilder,
        config: RedisConfig,
    ) -> Result<Self> {
        let bad_url = |e: redis::RedisError| Error::invalid("Redis URL", e.to_string());
        let hub = WakeHub::remote();
        let pushes = hub.clone();
        let client = builder
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
            .map_err(|e| error_from_redis("", e))?;
        let store = RedisStore {
            conn: Conn::Cluster(super::cluster::ClusterConn::new(
                conn.clone(),
                client,
                config.clone(),
            )),
            hub: hub.clone(),
            publish: Publish::Sharded,
            hand_over: true,
            scripts: Scripts::get(Variant::Production),
            address: Arc::from(""),
            origin: None,
        };
        hub.start(Box::new(ClusterSubscriber(conn)));
        Ok(store)
    }

    /// Whether this connection's user may publish wake-ups on `channel` (a lock's channel
    /// under the client's prefix). A user whose ACL grants no channels still gets every lock
    /// (the scripts ignore a denied publish) but its waiters are never woken by Redis and only
    /// retry on their interval: warn once, with the rule to add. Any other answer (or none)
    /// says nothing about the rights and is not reported here.
    pub(crate) async fn warn_without_channel_rights(&self, channel: &str, prefix: &str) {
        let mut cmd = redis::cmd(match self.publish {
            Publish::Plain => "PUBLISH",
            Publish::Sharded => "SPUBLISH",
        });
        cmd.arg(channel).arg("");
        if let Err(err) = self.raw::<i64>(&cmd).await
            && err.code() == Some("NOPERM")
        {
            let reply = err.to_string();
            tracing::warn!(
                %reply,
                "this Redis user may not use the lock channels, so waiters are not woken by \
                 releases and only retry on their interval (`retry_interval`); grant them \
                 with: ACL SETUSER <user> &{prefix}:* (and +subscribe +unsubscribe +publish, \
                 or +ssubscribe +sunsubscribe +spublish on Cluster)"
            );
        }
    }

    /// This store runs the scripts of `variant` instead of the production ones (tests:
    /// the fast paths against the general logic, and which paths a run took).
    #[cfg(feature = "testing")]
    pub fn with_scripts(mut self, variant: Variant) -> Self {
        self.scripts = Scripts::get(variant);
        self
    }

    /// This store's writer releases no longer hand the lock to the next waiting writer.
    pub(crate) fn without_hand_over(mut self) -> Self {
        self.hand_over = false;
        self
    }

    /// Sends any command on the store's connection (for tools and tests).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.raw(cmd)
            .await
            .map_err(|e| error_from_redis("", e).at(&self.address))
    }

    /// Sends `cmd` and returns the redis crate's own result.
    async fn raw<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self.conn.clone() {
            Conn::Single(mut c) => cmd.query_async(&mut c).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => cmd.query_async(&mut c.get().await).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(s) => {
                on_primary(&s, |mut c| async move { cmd.query_async(&mut c).await }).await
            }
        }
    }

    /// Runs one script step: `keys`, then the step's arguments (`args`), and parses the
    /// reply; a reply of another shape is a typed error. On the server clock with `PUBLISH`
    /// the step's `plain` form runs, which takes `args` alone; otherwise its `full` form, which
    /// takes the prelude's two arguments first (`now`, the publish command).
    async fn run<A: ToRedisArgs, T: FromRedisValue>(
        &self,
        lock: &LockKeys,
        step: &Step,
        keys: &[String],
        now: Option<u64>,
        args: A,
    ) -> Result<T> {
        let argv = Argv {
            now: Now(now),
            publish: self.publish,
            step: args,
        };
        let plain = now.is_none() && self.publish == Publish::Plain;
        let result: redis::RedisResult<Value> = match self.conn.clone() {
            Conn::Single(mut c) => {
                let inv = invocation(step, plain, keys, &argv);
                invoke(&inv, &mut c).await
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => invoke_cluster(&step.full, keys, &argv, &mut c.get().await).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(s) => {
                let inv = invocation(step, plain, keys, &argv);
                let inv = &inv;
                on_primary(&s, |mut c| async move { invoke(inv, &mut c).await }).await
            }
        };
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                let err = error_from_redis(lock.name(), e).at(&self.address);
                return Err(self.name_foreign_key(err, keys).await);
            }
        };
        if let Value::Push { .. } = reply {
            // A push message (a Valkey Cluster slot migration's `sunsubscribe` was seen) came
            // back in the reply's place: the script's own reply is lost, its outcome unknown.
            return Err(Error::connection(
                operation(lock.name()),
                self.address.to_string(),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a push message came back where the script's reply was expected",
                ),
            ));
        }
        T::from_redis_value(reply).map_err(|e| Error::WrongType {
            name: lock.name().to_owned(),
            key: None,
            detail: format!("unexpected script reply: {e}"),
        })
    }

    /// `err` with the key at fault, when it is an [`Error::WrongType`] that names none: the
    /// first of `keys` whose type (asked with `TYPE`, on this error path only) is not the one
    /// redis-locks keeps there, else the one of `keys` the script's message names.
    async fn name_foreign_key(&self, err: Error, keys: &[String]) -> Error {
        let Error::WrongType {
            name,
            key: None,
            detail,
        } = err
        else {
            return err;
        };
        for key in keys {
            let Some(expected) = crate::vocab::keys::key_type(key) else {
                continue;
            };
            let found: redis::RedisResult<String> = self.raw(redis::cmd("TYPE").arg(key)).await;
            if let Ok(found) = found
                && found != "none"
                && found != expected
            {
                return Error::WrongType {
                    name,
                    key: Some(key.clone()),
                    detail: format!("it is a {found}, where redis-locks keeps a {expected}"),
                };
            }
        }
        // The longest key the message names: one key can be the start of another
        // (`rl:{n}:rt` of `rl:{n}:rtk`), and a message about the longer names both.
        let key = keys
            .iter()
            .filter(|k| detail.contains(k.as_str()))
            .max_by_key(|k| k.len())
            .cloned();
        Error::WrongType { name, key, detail }
    }
}

/// Runs `step` on the primary the sentinels named last. A failure that says the connection no
/// longer leads to the primary makes the store ask the sentinels again, now and before every
/// later step until they answer (so a step never goes to a restarted old primary that the
/// connection manager reconnected to after the sentinels moved on); a step refused with
/// `READONLY` did not run, so it is sent once more to the new primary. Any other failure
/// (a lost connection leaves the outcome unknown) is returned as it is, for the caller's
/// own handling of an unknown outcome.
#[cfg(feature = "sentinel")]
async fn on_primary<T, F, Fut>(
    conn: &super::sentinel::SentinelConn,
    mut step: F,
) -> redis::RedisResult<T>
where
    F: FnMut(ConnectionManager) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    conn.verify().await;
    let (c, generation) = conn.conn();
    match step(c).await {
        Err(err) if super::sentinel::needs_new_primary(&err) => {
            conn.suspect();
            let moved = conn.reresolve(generation).await;
            if moved && err.code() == Some("READONLY") {
                step(conn.conn().0).await
            } else {
                Err(err)
            }
        }
        other => other,
    }
}

/// The invocation of `step` with `keys` and `argv`: its `plain` form with the step's own
/// arguments when `plain`, else its `full` form with all of `argv`.
fn invocation<'a, A: ToRedisArgs>(
    step: &'a Step,
    plain: bool,
    keys: &[String],
    argv: &Argv<A>,
) -> redis::ScriptInvocation<'a> {
    if plain {
        let mut inv = step.plain.prepare_invoke();
        inv.key(keys).arg(&argv.step);
        inv
    } else {
        let mut inv = step.full.prepare_invoke();
        inv.key(keys).arg(argv);
        inv
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
    script: &redis::Script,
    keys: &[String],
    args: &impl ToRedisArgs,
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
            let Some(source) = crate::wire::scripts::source_by_hash(script.get_hash()) else {
                return Err(err);
            };
            let mut eval = redis::cmd("EVAL");
            eval.arg(source).arg(keys.len()).arg(keys).arg(args);
            eval.query_async(conn).await
        }
        other => other,
    }
}

impl RedisStore {
    /// Raises the lock's fence counter to at least `fence` (quorum mode: a server that
    /// lagged must never hand out a smaller fence than the majority did).
    pub(crate) async fn raise_fence(
        &self,
        lock: &LockKeys,
        fence: u64,
        keep: Duration,
    ) -> Result<u64> {
        let keys = [lock.fence()];
        let Fence(reached) = self
            .run(
                lock,
                &self.scripts.raise_fence,
                &keys,
                None,
                RaiseFenceArgs {
                    fence,
                    keep: Ms(keep),
                },
            )
            .await?;
        Ok(reached)
    }
}

impl RedisStore {
    /// `renew`: an extend or renewal (`Renewal::Keep`) or a hand-off's claim.
    async fn renew_as(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
        renewal: Renewal,
    ) -> Result<bool> {
        claim.check()?;
        let Flag(renewed) = match claim.slot {
            Slot::Write | Slot::Read => {
                let args = RwExtendArgs::new(claim, lease, renewal);
                self.run(lock, &self.scripts.rw_extend, lock.lease_lock(), now, args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let args = QueueExtendArgs::new(claim, lease, renewal);
                let keys = lock.ticket_queue();
                self.run(lock, &self.scripts.queue_extend, keys, now, args)
                    .await?
            }
        };
        Ok(renewed)
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
        let reply: AcquireReply = match claim.slot {
            Slot::Write | Slot::Read => {
                let args = RwAcquireArgs::new(claim, wait);
                self.run(lock, &self.scripts.rw_acquire, lock.lease_lock(), now, args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let args = QueueAcquireArgs::new(claim, wait);
                let keys = lock.ticket_queue();
                self.run(lock, &self.scripts.queue_acquire, keys, now, args)
                    .await?
            }
        };
        Ok(reply.outcome(claim.lease))
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, now: Option<u64>) -> Result<bool> {
        claim.check()?;
        let Flag(held) = match claim.slot {
            Slot::Write | Slot::Read => {
                let args = RwReleaseArgs {
                    token: &claim.token,
                    hand_over: HandOver(self.hand_over),
                };
                self.run(lock, &self.scripts.rw_release, lock.lease_lock(), now, args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let args = QueueReleaseArgs::new(claim);
                let keys = lock.ticket_queue();
                self.run(lock, &self.scripts.queue_release, keys, now, args)
                    .await?
            }
        };
        Ok(held)
    }

    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        handed_until: Option<u64>,
        now: Option<u64>,
    ) -> Result<bool> {
        let how = handed_until.map_or(Renewal::Keep, Renewal::Claim);
        self.renew_as(lock, claim, lease, now, how).await
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<Option<u64>> {
        claim.check()?;
        let DowngradeReply(fence) = match claim.slot {
            Slot::Write | Slot::Read => {
                let args = RwDowngradeArgs {
                    token: &claim.token,
                    lease: Ms(claim.lease),
                };
                let keys = lock.lease_lock();
                self.run(lock, &self.scripts.rw_downgrade, keys, now, args)
                    .await?
            }
            Slot::Ticket { .. } => {
                let args = QueueDowngradeArgs::new(claim);
                let keys = lock.ticket_queue();
                self.run(lock, &self.scripts.queue_downgrade, keys, now, args)
                    .await?
            }
        };
        Ok(fence)
    }

    async fn inspect(&self, lock: &LockKeys, family: Family, now: Option<u64>) -> Result<Snapshot> {
        match family {
            Family::LeaseLock => {
                let keys = lock.lease_lock();
                let LeaseLockView(snapshot) = self
                    .run(lock, &self.scripts.rw_inspect, keys, now, NoArgs)
                    .await?;
                Ok(snapshot)
            }
            Family::TicketQueue => {
                let keys = lock.ticket_queue();
                let TicketQueueView(snapshot) = self
                    .run(lock, &self.scripts.queue_inspect, keys, now, NoArgs)
                    .await?;
                Ok(snapshot)
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
        let args = SetPermitsArgs {
            change: Change(change),
            heartbeat: Ms(heartbeat),
        };
        let keys = lock.ticket_queue();
        let Permits(permits) = self
            .run(lock, &self.scripts.queue_set_permits, keys, now, args)
            .await?;
        Ok(permits)
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> Result<u64> {
        let keys = lock.force_release();
        let Fence(fence) = self
            .run(lock, &self.scripts.force_release, keys, now, NoArgs)
            .await?;
        Ok(fence)
    }

    async fn force_release_holder(
        &self,
        lock: &LockKeys,
        token_prefix: &str,
        now: Option<u64>,
    ) -> Result<super::HolderEviction> {
        let keys = lock.force_release();
        let script = &self.scripts.force_release_holder;
        let Eviction(eviction) = self
            .run(lock, script, keys, now, PrefixArg(token_prefix))
            .await?;
        Ok(eviction)
    }

    /// Refuses a server the scripts cannot run on, with [`Error::UnsupportedServer`] naming
    /// what it lacks: the name, version and protocol its `HELLO` reports (a reply without
    /// them is let through), then two runs of the capability probe (`capabilities.lua`) on a
    /// key of `probe` (a lock under the client's prefix, so the user's ACL key rules admit
    /// it; the key is never created), which show Lua scripting, a real clock in scripts
    /// (plausible, advancing from the first run to the second) and `PEXPIRE` `GT`/`NX`.
    ///
    /// One round trip on a single server or a Sentinel's primary (`HELLO`, `SCRIPT LOAD` and
    /// both runs in one pipeline); on Cluster the node that answers `HELLO` and the one that
    /// owns the probe key's slot (a cluster runs one version; a mixed one during an upgrade
    /// is not checked node by node). A refusal that says nothing of the capabilities (the
    /// user's ACL rights, a server still loading, memory full, a replica) leaves the check
    /// inconclusive: logged, not refused, and the lock steps report it with their own advice.
    async fn check_server(&self, probe: &LockKeys) -> Result<()> {
        let replies = self.probe_replies(&probe.fence()).await;
        let replies = replies.map_err(|e| error_from_redis("", e).at(&self.address))?;
        super::capabilities::judge(replies).map_err(|e| e.at(&self.address))
    }

    async fn server_info(&self) -> Result<Vec<(String, String)>> {
        let reply: Value = self
            .raw(&redis::cmd("INFO"))
            .await
            .map_err(|e| error_from_redis("", e).at(&self.address))?;
        let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
        let here = match &*self.address {
            "" => "the primary".to_owned(),
            address => address.to_owned(),
        };
        Ok(match &reply {
            // Cluster: one reply per node.
            Value::Map(nodes) => nodes
                .iter()
                .filter_map(|(node, info)| Some((text(node)?, text(info)?)))
                .collect(),
            other => text(other).map(|t| (here, t)).into_iter().collect(),
        })
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
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(s) => {
                let wait = &wait;
                on_primary(&s, |mut c| async move { wait.query_async(&mut c).await }).await
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                // WAIT has no key: send it to the master of the lock's slot, where the
                // lock's writes went.
                let slot = crate::vocab::keys::hash_slot(lock.channel().as_bytes());
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                c.wait(&wait, route).await
            }
        }
        .map_err(|e| error_from_redis(lock.name(), e).at(&self.address))?;
        Ok(u32::try_from(acked.max(0)).unwrap_or(u32::MAX))
    }

    fn hub(&self) -> &Arc<WakeHub> {
        &self.hub
    }

    /// A Cluster store starts making the engine's own connection (on the engine's runtime).
    fn engine_started(&self) {
        #[cfg(feature = "cluster")]
        if let Conn::Cluster(c) = &self.conn {
            c.engine_started();
        }
    }

    /// The lock engine gets a connection of its own, made on first use by the engine's
    /// runtime (`RedisStore::engine_copy`).
    fn for_engine(&self) -> Option<Arc<dyn Store>> {
        Some(Arc::new(self.engine_copy()?))
    }

    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<AcquireAll> {
        claim.check()?;
        super::check_parts(parts)?;
        let first = &parts[0].lock;
        if self.one_slot_per_step() {
            let slot = crate::vocab::keys::hash_slot(first.channel().as_bytes());
            if let Some(other) = parts
                .iter()
                .find(|p| crate::vocab::keys::hash_slot(p.lock.channel().as_bytes()) != slot)
            {
                return Err(Error::invalid(
                    "multi-lock",
                    format!(
                        "`{}` and `{}` are in different Cluster hash slots; one step takes one slot",
                        first.name(),
                        other.lock.name()
                    ),
                ));
            }
        }
        let keys: Vec<String> = parts
            .iter()
            .flat_map(|p| p.lock.lease_lock().iter().cloned())
            .collect();
        let args = MultiAcquireArgs::new(claim, parts);
        let reply: MultiAcquireReply = self
            .run(first, &self.scripts.multi_acquire, &keys, now, args)
            .await?;
        reply.outcome(claim, parts)
    }

    async fn proclaim(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        value: Option<&str>,
        now: Option<u64>,
    ) -> Result<bool> {
        claim.check()?;
        let args = ProclaimArgs::new(claim, value);
        let Flag(done) = self
            .run(
                lock,
                &self.scripts.election_proclaim,
                lock.election(),
                now,
                args,
            )
            .await?;
        Ok(done)
    }

    async fn leader(
        &self,
        lock: &LockKeys,
        now: Option<u64>,
    ) -> Result<Option<crate::vocab::claim::LeaderInfo>> {
        let LeaderView(leader) = self
            .run(
                lock,
                &self.scripts.election_leader,
                lock.election(),
                now,
                NoArgs,
            )
            .await?;
        Ok(leader)
    }

    async fn rate_acquire(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<RateDecision> {
        claim.check()?;
        let args = RateAcquireArgs::new(claim, wait);
        let RateReply(decision) = self
            .run(
                lock,
                &self.scripts.rate_acquire,
                lock.rate_limiter(),
                now,
                args,
            )
            .await?;
        Ok(decision)
    }

    async fn rate_cancel(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        now: Option<u64>,
    ) -> Result<bool> {
        claim.check()?;
        let args = RateCancelArgs {
            token: &claim.token,
            permits: claim.permits,
        };
        let Flag(had) = self
            .run(
                lock,
                &self.scripts.rate_cancel,
                lock.rate_limiter(),
                now,
                args,
            )
            .await?;
        Ok(had)
    }

    async fn rate_inspect(
        &self,
        lock: &LockKeys,
        rate: &Rate,
        now: Option<u64>,
    ) -> Result<RateSnapshot> {
        rate.check()?;
        let args = RateInspectArgs {
            count: rate.count(),
            period_ms: rate.period_ms(),
            burst: rate.burst_size(),
        };
        let RateView(snapshot) = self
            .run(
                lock,
                &self.scripts.rate_inspect,
                lock.rate_limiter(),
                now,
                args,
            )
            .await?;
        Ok(snapshot)
    }

    fn one_slot_per_step(&self) -> bool {
        match self.conn {
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => true,
            _ => false,
        }
    }
}

/// What a connection error on lock `name` (none: a command of no lock) interrupted.
fn operation(name: &str) -> String {
    if name.is_empty() {
        "send a command".to_owned()
    } else {
        format!("a step on lock `{name}`")
    }
}

/// Whether an error reply is a denial by the user's ACL rights worded without Redis's
/// `NOPERM` code: a command called by a script, which Valkey answers `ERR ACL failure in
/// script: User locks has no permissions to run the 'zadd' command ...` and Redis 7.0 `ERR
/// The user executing the script can't run this command or subcommand ...`.
pub(crate) fn acl_denial(code: &str, detail: &str) -> bool {
    code == "ERR"
        && (detail.starts_with("ACL failure in script")
            || detail.starts_with("The user executing the script can't run"))
}

/// An ACL denial in Redis's own form: `NOPERM`, then the server's words (`detail`), so it is
/// advised as every other missing right is.
fn as_noperm(detail: &str) -> String {
    format!("NOPERM {detail}")
}

/// Classifies a Redis error for the lock `name` (the Redis adapter owns this mapping).
pub(crate) fn error_from_redis(name: &str, err: redis::RedisError) -> Error {
    if err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_io_error()
    {
        return Error::connection(operation(name), "", Cause::boxed(err));
    }
    use crate::wire::ErrorReply;
    let detail = err.detail().unwrap_or("");
    // The scripts' own codes (`RL*`): their wire format is known to `wire` only.
    match err.code().and_then(|code| ErrorReply::parse(code, detail)) {
        Some(ErrorReply::Refused(refusal)) => return refusal.into_error(name),
        Some(ErrorReply::Corrupt(detail)) => {
            return Error::WrongType {
                name: name.to_owned(),
                key: None,
                detail,
            }
        }
        // A script could not use its arguments: a bug, reported as Redis said it.
        Some(ErrorReply::Arg(_)) | None => {}
    }
    if acl_denial(err.code().unwrap_or(""), detail) {
        return Error::Redis {
            reply: as_noperm(detail),
        };
    }
    match err.code() {
        Some("WRONGTYPE") => Error::WrongType {
            name: name.to_owned(),
            key: None,
            detail: detail.to_owned(),
        },
        Some(code @ ("LOADING" | "BUSY" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN")) => {
            let not_now = NotNow {
                code: code.to_owned(),
                detail: detail.to_owned(),
            };
            Error::connection(operation(name), "", not_now)
        }
        // The server's own wording, code first (the redis crate renders some codes in
        // words of its own).
        Some(code) if !detail.is_empty() => Error::Redis {
            reply: format!("{code} {detail}"),
        },
        _ => Error::Redis {
            reply: err.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{acl_denial, check_tls_support, supported_server};

    #[test]
    fn acl_denials_inside_scripts_are_told_in_every_wording() {
        // Valkey 9, then Redis 7.0: both without the NOPERM code.
        let valkey = "ACL failure in script: User locks has no permissions to run the 'zadd' \
                      command script: on @user_script:1.";
        let redis = "The user executing the script can't run this command or subcommand \
                     script: 956ac74, on @user_script:1.";
        assert!(acl_denial("ERR", valkey));
        assert!(acl_denial("ERR", redis));
        assert!(!acl_denial(
            "ERR",
            "Error running script: attempt to compare nil"
        ));
        assert!(!acl_denial("NOSCRIPT", valkey));
    }

    #[test]
    fn servers_older_than_the_scripts_need_are_refused() {
        for (server, version) in [("redis", "7.0.0"), ("redis", "7.2.4"), ("redis", "8.0.1")] {
            assert!(
                supported_server(server, version).is_ok(),
                "{server} {version}"
            );
        }
        for (server, version) in [("valkey", "7.2.5"), ("valkey", "8.1.0")] {
            assert!(
                supported_server(server, version).is_ok(),
                "{server} {version}"
            );
        }
        for (server, version) in [("redis", "6.2.14"), ("redis", "5.0.7"), ("valkey", "7.0.0")] {
            let err = supported_server(server, version).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(version) && text.contains("7.0 or later"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_tls_url_without_the_feature_names_the_feature() {
        let err = check_tls_support("rediss://cache.internal:6380/", false).unwrap_err();
        assert!(err.is_invalid_input());
        assert!(err.to_string().contains("`tls` feature"), "{err}");
        assert!(check_tls_support("REDISS://h/", false).is_err());
        assert!(check_tls_support("rediss://h/", true).is_ok());
        assert!(check_tls_support("redis://h/", false).is_ok());
    }
}
