//! [`LockClient`]: the connection, key prefix and defaults; the factory for lock handles.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::keys::{validate_prefix, LockKeys, DEFAULT_PREFIX};
use crate::options::Options;
use crate::rwlock::Preference;
use crate::store::{MemoryStore, QuorumStore, RedisStore, Store};
use crate::wait::LockCtx;
use crate::{FairLock, Mutex, RwLock, Semaphore};

pub use crate::store::redis::RedisConfig;

/// The entry point: one per process and backend, cheap to clone, `Send + Sync`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::LockClient;
/// // In production: LockClient::connect("redis://127.0.0.1/").await?
/// let client = LockClient::in_memory();
/// let guard = client.mutex("reports").lock().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LockClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn Store>,
    prefix: String,
    defaults: Options,
}

impl LockClient {
    /// Connects to one Redis server with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder().connect(url).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with the default settings.
    /// Every primitive works; wake-ups use sharded pub/sub (see `docs/SCALE.md`).
    #[cfg(feature = "cluster")]
    pub async fn cluster(urls: &[&str]) -> Result<Self> {
        Self::builder().cluster(urls).await
    }

    /// Quorum (Redlock) mode over independent Redis servers, with the default settings:
    /// Mutex and RwLock (writer or reader preference) are granted by a majority. Ticket-queue
    /// primitives (FairLock, Semaphore, `Preference::Fair`) fail with
    /// [`Error::Unsupported`](crate::Error::Unsupported) on every call. See
    /// [`QuorumStore`](crate::store::QuorumStore) for what fencing tokens mean here.
    /// Connecting needs a majority of the servers up; the others join when they come back.
    pub async fn quorum(urls: &[&str]) -> Result<Self> {
        Self::builder().quorum(urls).await
    }

    /// A client on the in-process [`MemoryStore`]: the same semantics without Redis, for tests
    /// and local runs. Locks are shared by the clones of this client only.
    pub fn in_memory() -> Self {
        Self::builder().in_memory()
    }

    /// Settings: key prefix, defaults for handles, Redis timeouts.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// The store behind this client (for tools and tests).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The key prefix (default `rl`).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The validated keys of lock `name` under this client's prefix.
    pub fn keys(&self, name: &str) -> Result<LockKeys> {
        LockKeys::new(&self.inner.prefix, name)
    }

    fn ctx(&self, name: &str) -> LockCtx {
        LockCtx {
            store: self.inner.store.clone(),
            keys: self.keys(name).map_err(Arc::new),
            opts: self.inner.defaults.clone(),
        }
    }

    /// A [`Mutex`] handle. A bad name is reported by the first operation, before any Redis call.
    pub fn mutex(&self, name: &str) -> Mutex {
        Mutex {
            ctx: self.ctx(name),
        }
    }

    /// An [`RwLock`] handle (writer preference by default).
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock {
            ctx: self.ctx(name),
            preference: Preference::Writer,
        }
    }

    /// A [`FairLock`] handle.
    pub fn fair_lock(&self, name: &str) -> FairLock {
        FairLock {
            ctx: self.ctx(name),
        }
    }

    /// A [`Semaphore`] handle with `permits` permits (1 to [`crate::semaphore::MAX_PERMITS`]).
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore {
            ctx: self.ctx(name),
            permits,
        }
    }

    /// Operator's override: drops every hold of lock `name`, keeps its waiters, bumps the
    /// fence so evicted holders' fenced writes are refused, and wakes the waiters. Returns the
    /// new fence. Evicted holders learn it at their next renewal (`lost()` fires).
    pub async fn force_release(&self, name: &str) -> Result<u64> {
        let keys = self.keys(name)?;
        self.inner.store.force_release(&keys, None).await
    }
}

/// Builder for [`LockClient`].
///
/// ```
/// use std::time::Duration;
/// let client = redis_locks::LockClient::builder()
///     .prefix("billing")                     // keys: billing:{<name>}:...
///     .lease(Duration::from_secs(10))        // default lease of every handle it makes
///     .heartbeat(Duration::from_secs(3))
///     .in_memory();                          // or .connect("redis://...").await?
/// assert_eq!(client.prefix(), "billing");
/// ```
#[derive(Clone, Debug)]
pub struct LockClientBuilder {
    prefix: String,
    defaults: Options,
    redis: RedisConfig,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            prefix: DEFAULT_PREFIX.to_owned(),
            defaults: Options::default(),
            redis: RedisConfig::default(),
        }
    }
}

impl LockClientBuilder {
    /// Key prefix (default `rl`): keys are `<prefix>:{<name>}:<part>`. No braces allowed.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Default lease of handles made by this client (default 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.defaults.lease = lease;
        self
    }

    /// Default heartbeat window of waiters (default: the lease, at most 5 s). A dead waiter
    /// blocks others for at most its window, so keep it no longer than the lease.
    pub fn heartbeat(mut self, window: Duration) -> Self {
        self.defaults.heartbeat = Some(window);
        self
    }

    /// Default longest sleep between attempts without a wake-up (default 1 s).
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.defaults.retry_interval = interval;
        self
    }

    /// Default for automatic renewal (default on).
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.defaults.auto_renew = on;
        self
    }

    /// Redis timeouts.
    pub fn redis_config(mut self, config: RedisConfig) -> Self {
        self.redis = config;
        self
    }

    fn check(&self) -> Result<()> {
        validate_prefix(&self.prefix)?;
        self.defaults.validate()
    }

    /// Connects to one Redis server.
    pub async fn connect(self, url: &str) -> Result<LockClient> {
        self.check()?;
        let store = RedisStore::connect_with(url, self.redis.clone()).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Connects to a Redis Cluster through any of its nodes.
    #[cfg(feature = "cluster")]
    pub async fn cluster(self, urls: &[&str]) -> Result<LockClient> {
        self.check()?;
        let store = RedisStore::cluster(urls, self.redis.clone()).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Quorum (Redlock) mode over independent Redis servers (see [`LockClient::quorum`]).
    pub async fn quorum(self, urls: &[&str]) -> Result<LockClient> {
        self.check()?;
        let store = QuorumStore::connect(urls, self.redis.clone()).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// On the in-process store.
    ///
    /// An invalid prefix or default is reported by every operation of the handles made.
    pub fn in_memory(self) -> LockClient {
        self.build(Arc::new(MemoryStore::new()))
    }

    /// On any store (a custom or shared [`MemoryStore`], a quorum of stores ...).
    pub fn store(self, store: Arc<dyn Store>) -> LockClient {
        self.build(store)
    }

    fn build(self, store: Arc<dyn Store>) -> LockClient {
        LockClient {
            inner: Arc::new(Inner {
                store,
                prefix: self.prefix,
                defaults: self.defaults,
            }),
        }
    }
}
