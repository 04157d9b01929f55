//! [`LockClient`]: the connection, key prefix and defaults; the factory for lock handles.

use std::sync::Arc;
use std::time::Duration;

use crate::api::guard::Guard;
use crate::api::handle::Lock;
use crate::api::kind::{self, Kind};
use crate::api::rate_limiter::RateLimiter;
use crate::api::rwlock::Preference;
use crate::engine::lease::{step_by_id, ById, Holds, Placement};
use crate::engine::wait::LockCtx;
use crate::store::{MemoryStore, QuorumStore, RedisStore, Store};
use crate::vocab::claim::HolderEviction;
use crate::vocab::deployment::{self, Verdict};
use crate::vocab::error::{Error, Result};
use crate::vocab::hold_id::HoldId;
use crate::vocab::keys::{validate_prefix, LockKeys, DEFAULT_PREFIX};
use crate::vocab::options::Options;
use crate::vocab::rate::Rate;
use crate::{Election, FairLock, MultiLock, Mutex, RwLock, Semaphore};

/// The lock whose keys the connect-time checks name (the capability probe's key, the channel
/// whose publish rights are tested): under the client's prefix, so the user's ACL rules
/// admit them. Nothing is ever stored under it.
pub(crate) const PROBE_LOCK: &str = "redis-locks-probe";

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
    holds: Arc<Holds>,
    /// The longest a request waits for its reply (Redis's response timeout).
    response_timeout: Duration,
    prefix: String,
    defaults: Options,
}

impl LockClient {
    /// Connects to one Redis server with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder().connect(url).await
    }

    /// Connects with the settings of a `redis::Client` you already have (address, database,
    /// user, password, TLS), and the default settings otherwise; see
    /// [`LockClientBuilder::connect_client`] for what the library overrides.
    pub async fn from_client(client: &redis::Client) -> Result<Self> {
        Self::builder().connect_client(client).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with the default settings.
    /// Every primitive works; wake-ups use sharded pub/sub (see the crate's
    /// `docs/SCALE.md`).
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn cluster(urls: &[&str]) -> Result<Self> {
        Self::builder().cluster(urls).await
    }

    /// Connects to the primary that the Redis Sentinels at `sentinel_urls` name for
    /// `master_name`, with the default settings, and follows it through failovers (see
    /// [`LockClientBuilder::sentinel`]).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::sentinel(
    ///     &["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"],
    ///     "mymaster",
    /// )
    /// .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn sentinel(sentinel_urls: &[&str], master_name: &str) -> Result<Self> {
        Self::builder().sentinel(sentinel_urls, master_name).await
    }

    /// Quorum (Redlock) mode over independent Redis servers, with the default settings:
    /// Mutex and RwLock (writer or reader preference) are granted by a majority. Ticket-queue
    /// primitives (FairLock, Semaphore, `Preference::Fair`) fail with
    /// [`Error::Unsupported`](crate::Error::Unsupported) on every call. A grant's fencing
    /// token is the largest fence among the servers that granted it: the crate's
    /// `docs/SCALE.md`
    /// ("Fencing tokens under quorum") says what that guarantees.
    /// Connecting needs a majority of the servers up; the others join when they come back.
    pub async fn quorum(urls: &[&str]) -> Result<Self> {
        Self::builder().quorum(urls).await
    }

    /// A client on a new in-process store of its own: the same semantics as Redis, without
    /// Redis, for tests and local runs. It shares nothing with other calls: two
    /// `LockClient::in_memory()` clients never see each other's locks (only this client's
    /// clones share its store). To test several services that contend for the same locks,
    /// give them clients of one [`InMemory`](crate::InMemory) store.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::{InMemory, LockClient};
    /// let (a, b) = (LockClient::in_memory(), LockClient::in_memory());
    /// let held = a.mutex("m").lock().await?;
    /// assert!(b.mutex("m").try_lock().await.is_ok()); // another store: no exclusion
    ///
    /// let shared = InMemory::new();
    /// let (a, b) = (shared.client("service-a")?, shared.client("service-b")?);
    /// let held_too = a.mutex("m").lock().await?;
    /// assert!(b.mutex("m").try_lock().await.unwrap_err().is_would_block());
    /// # drop((held, held_too)); Ok(()) }
    /// ```
    pub fn in_memory() -> Self {
        LockClientBuilder::default().build(Arc::new(MemoryStore::new()))
    }

    /// Settings: key prefix, defaults for handles, Redis timeouts.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// The store behind this client (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Releases every lock this client (and its clones) holds now, at once, and returns how
    /// many the server confirmed it still held. A hold is counted once, by the call that found
    /// it live (not being released already, not detached), whichever of this client's
    /// releases of it the server applied first (a guard dropped meanwhile, a second
    /// `release_all`, a `release_hold`); a release whose answer was lost, or whose caller
    /// stopped waiting, confirms nothing, so the count is never more than what was released,
    /// and may be less. For a clean shutdown: a guard dropped while the runtime
    /// shuts down, or on a thread without a tokio runtime, cannot release in the background
    /// and stays held until its lease lapses; call this before the runtime ends instead.
    ///
    /// Every guard of this client reports itself lost afterwards (`is_held()` is false,
    /// `lost()` fires); its own `release()` then answers `Ok(false)`. Waits and resumes in
    /// progress are not cancelled (a resume still under way gives a live guard after this
    /// returns): drop their futures first if the process is going away.
    ///
    /// # Errors
    /// The first error among the releases, after every release was tried (a hold that could
    /// not be released lapses with its lease).
    ///
    /// # Cancel safety
    /// The releases run as tasks of their own on the current runtime: cancelling this call
    /// does not stop them, as long as that runtime keeps running (a runtime dropped, or a
    /// current-thread runtime no longer driven, stops them like any task of it).
    ///
    /// A guard it marked lost keeps its hold's place in this client until the guard is
    /// dropped or released: a resume of its id here is `HoldInUse` until then (a guard leaked
    /// with `std::mem::forget` keeps it for good).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("nightly-report").lock().await?;
    /// assert_eq!(client.release_all().await?, 1);
    /// assert!(!guard.is_held());
    /// assert!(client.mutex("nightly-report").try_lock().await.is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn release_all(&self) -> Result<usize> {
        self.inner.holds.release_all().await
    }

    /// Stops this client's engine at once, as if its process were killed (feature
    /// `testing`): its holds are neither renewed nor released, and lapse with their leases.
    #[cfg(feature = "testing")]
    pub(crate) fn crash_engine(&self) {
        self.inner.holds.crash();
    }

    /// The store behind this client, for the crate's own steps.
    pub(crate) fn store_ref(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The key prefix (default `rl`).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The validated keys of lock `name` under this client's prefix (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn keys(&self, name: &str) -> Result<LockKeys> {
        LockKeys::new(&self.inner.prefix, name)
    }

    fn ctx(&self, name: &str) -> LockCtx {
        LockCtx {
            store: self.inner.store.clone(),
            holds: self.inner.holds.clone(),
            response_timeout: self.inner.response_timeout,
            name: Arc::from(name),
            keys: LockKeys::new(&self.inner.prefix, name).map_err(Arc::new),
            opts: self.inner.defaults.clone(),
        }
    }

    /// Turns a hold id back into a live guard of kind `K` (the id's own: a
    /// [`MutexGuard`](crate::MutexGuard) is `Guard<kind::Mutex>`), with this client's default
    /// options; a handle's [`resume`](crate::Lock) uses the handle's. See there for what
    /// resuming does and its errors.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::{kind, Guard};
    /// let client = redis_locks::LockClient::in_memory();
    /// let id = client.semaphore("exports", 4).acquire_many(2).await?.detach();
    /// let permit: Guard<kind::Semaphore> = client.resume(&id).await?;
    /// assert_eq!(permit.num_permits(), 2);
    /// assert!(client.resume::<kind::Mutex>(&id).await.unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled, the renewal may have happened: the hold is then as before (its lease
    /// renewed), and no guard has it.
    pub async fn resume<K: Kind>(&self, id: &HoldId) -> Result<Guard<K>> {
        crate::api::resume::resume_in(&self.ctx(id.name()), id, None).await
    }

    /// Releases the hold `id` names, without a guard (the worker that only finishes the
    /// job). `Ok(true)` if it was still held; `Ok(false)` if not (it lapsed, was released or
    /// evicted): a stale id never touches a later holder's grant. This client's guard of
    /// the hold (if any) is marked lost first; a guard of it in another process learns it at
    /// its next renewal. [`Error::HoldInUse`](crate::Error::HoldInUse) (nothing sent) while
    /// a resume or another step by id of the hold is under way in this client (a resume's
    /// guard would trust a renewal the release then ends); a resume in this client is refused
    /// while the release is under way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let id = client.mutex("job").lock().await?.detach();
    /// assert!(client.release_hold(&id).await?);
    /// assert!(!client.release_hold(&id).await?); // already released
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled after the request left, the release may or may not have happened; the
    /// lease then lapses on its own.
    pub async fn release_hold(&self, id: &HoldId) -> Result<bool> {
        let ctx = self.ctx(id.name());
        let claim = id.claim(ctx.opts.lease, ctx.opts.heartbeat());
        step_by_id(&ctx.holds, ctx.keys()?, &claim, ById::Release).await
    }

    /// Renews the hold `id` names to `lease` from now, without a guard. `Ok(false)`: it holds
    /// nothing live any more (nothing changes). When this client has a guard of the hold,
    /// the request goes through it, as [`Guard::extend`](crate::Guard::extend) (a lost one
    /// stays lost). [`Error::HoldInUse`](crate::Error::HoldInUse) (nothing sent) while a
    /// resume or another step by id of the hold is under way in this client; a resume in
    /// this client is refused while the extend is under way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_locks::LockClient::in_memory();
    /// let id = client.mutex("job").lock().await?.detach();
    /// assert!(client.extend_hold(&id, Duration::from_secs(120)).await?);
    /// # client.release_hold(&id).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled, the renewal may or may not have happened.
    pub async fn extend_hold(&self, id: &HoldId, lease: Duration) -> Result<bool> {
        let ctx = self.ctx(id.name());
        let claim = id.claim(lease, ctx.opts.heartbeat());
        step_by_id(&ctx.holds, ctx.keys()?, &claim, ById::Extend(lease)).await
    }

    /// A [`Mutex`] handle. A bad name (empty, over [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// bytes, or starting with `}`) is reported by the first operation, before any Redis call.
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let cron = client.mutex("cron:nightly");
    /// # drop(cron);
    /// ```
    pub fn mutex(&self, name: &str) -> Mutex {
        Lock::new(self.ctx(name), kind::Mutex::NEW)
    }

    /// An [`RwLock`] handle (writer preference by default; see
    /// [`preference`](Lock::<kind::RwLock>::preference)).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let catalog = client.rwlock("catalog");
    /// # drop(catalog);
    /// ```
    pub fn rwlock(&self, name: &str) -> RwLock {
        Lock::new(
            self.ctx(name),
            kind::RwLock {
                preference: Preference::Writer,
            },
        )
    }

    /// A [`FairLock`] handle.
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let jobs = client.fair_lock("jobs");
    /// # drop(jobs);
    /// ```
    pub fn fair_lock(&self, name: &str) -> FairLock {
        Lock::new(self.ctx(name), kind::FairLock::NEW)
    }

    /// A [`Semaphore`] handle with `permits` permits (1 to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS); another count is reported by the first operation).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let exports = client.semaphore("exports", 4);
    /// # drop(exports);
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Lock::new(self.ctx(name), kind::Semaphore { permits })
    }

    /// A [`RateLimiter`] of `rate` (see [`Rate`]): at most `count` admissions per period
    /// across every client of the name, waiters admitted in arrival order. A bad name or
    /// rate is reported by the first operation, before any Redis call. Not available in
    /// quorum mode ([`Error::Unsupported`](crate::Error::Unsupported)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::Rate;
    /// let client = redis_locks::LockClient::in_memory();
    /// let limiter = client.rate_limiter("partner-api", Rate::per_second(100));
    /// limiter.acquire(1).await?;
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter(&self, name: &str, rate: Rate) -> RateLimiter {
        RateLimiter::new(self.ctx(name), rate)
    }

    /// An [`Election`] among the members of a pool, on the ticket queue of `name` (the
    /// FairLock of that name: use the name for nothing else). Not available in quorum mode
    /// ([`Error::Unsupported`](crate::Error::Unsupported)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let leadership = client.election("scheduler").campaign("worker-1").await?;
    /// assert!(leadership.is_held());
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election::new(self.fair_lock(name))
    }

    /// Operator's override: drops every hold of lock `name`, keeps its waiters, bumps the
    /// fence so evicted holders' fenced writes are refused, and wakes the waiters. Returns the
    /// new fence. Evicted holders learn it at their next renewal (`lost()` fires).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let stuck = client.mutex("m").lock().await?;
    /// let fence = client.force_release("m").await?;
    /// assert!(fence > stuck.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, name: &str) -> Result<u64> {
        let keys = LockKeys::new(&self.inner.prefix, name)?;
        self.inner.store.force_release(&keys, None).await
    }

    /// Operator's override for one holder: drops the one live hold of lock `name` (of
    /// either family) whose token starts with `token_prefix` (as [`HolderInfo::token_prefix`](
    /// crate::HolderInfo::token_prefix) shows it, or shorter), keeps every other hold and the
    /// waiters, and wakes the waiters. The fence is bumped when no live hold of that family
    /// is left (shared holds that remain keep the fence they share). Nothing changes when no
    /// hold or several match ([`HolderEviction::NoMatch`], [`HolderEviction::Ambiguous`]);
    /// the match and the drop are one atomic step. Quorum clients answer
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::HolderEviction;
    /// let client = redis_locks::LockClient::in_memory();
    /// let sem = client.semaphore("pool", 2);
    /// let (a, _b) = (sem.acquire().await?, sem.acquire().await?);
    /// let info = sem.inspect().await?;
    /// let prefix = info.holders[0].token_prefix.clone();
    /// let evicted = client.force_release_holder("pool", &prefix).await?;
    /// assert!(matches!(evicted, HolderEviction::Evicted { fence_bumped: false, .. }));
    /// assert_eq!(sem.inspect().await?.holders.len(), 1);
    /// # drop(a); Ok(()) }
    /// ```
    pub async fn force_release_holder(
        &self,
        name: &str,
        token_prefix: &str,
    ) -> Result<HolderEviction> {
        let keys = LockKeys::new(&self.inner.prefix, name)?;
        if token_prefix.is_empty() {
            return Err(crate::Error::InvalidArgument {
                what: "token prefix",
                reason: "it must not be empty".into(),
            });
        }
        self.inner
            .store
            .force_release_holder(&keys, token_prefix, None)
            .await
    }

    /// A [`MultiLock`] over `names`, each taken exclusively (the same lock as
    /// [`mutex(name)`](LockClient::mutex) and an [`RwLock`]'s writer): all or none, in one
    /// canonical order, so multi-locks over overlapping names never deadlock. Duplicates
    /// count once. No names, more than [`MAX_MULTI_NAMES`](crate::MAX_MULTI_NAMES), or a bad
    /// name is reported by the first operation, before any Redis call. Not available in
    /// quorum mode ([`Error::Unsupported`](crate::Error::Unsupported)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["account:7", "account:3"]).lock().await?;
    /// assert_eq!(guard.names().collect::<Vec<_>>(), ["account:3", "account:7"]);
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let names: Vec<I::Item> = names.into_iter().collect();
        MultiLock::new(
            self.ctx("multi-lock"),
            &self.inner.prefix,
            std::iter::empty(),
            names.iter().map(|n| n.as_ref()),
        )
    }

    /// A [`MultiLock`] over RwLocks: `reads` taken shared, `writes` exclusive, all or none
    /// (see [`multi_lock`](LockClient::multi_lock)). A name in both lists is refused; list it
    /// once, as a write.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let report = client.multi_rwlock(["prices", "stock"], ["report:daily"]);
    /// let guard = report.lock().await?;
    /// // Other readers of "prices" may read meanwhile; nobody writes it.
    /// assert!(client.rwlock("prices").try_read().await.is_ok());
    /// assert!(client.rwlock("prices").try_write().await.unwrap_err().is_would_block());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_rwlock<R, W>(&self, reads: R, writes: W) -> MultiLock
    where
        R: IntoIterator,
        R::Item: AsRef<str>,
        W: IntoIterator,
        W::Item: AsRef<str>,
    {
        let reads: Vec<R::Item> = reads.into_iter().collect();
        let writes: Vec<W::Item> = writes.into_iter().collect();
        MultiLock::new(
            self.ctx("multi-lock"),
            &self.inner.prefix,
            reads.iter().map(|n| n.as_ref()),
            writes.iter().map(|n| n.as_ref()),
        )
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
///     .in_memory()?;                         // or .connect("redis://...").await?
/// assert_eq!(client.prefix(), "billing");
/// // Bad settings fail here, whatever the backend:
/// assert!(redis_locks::LockClient::builder().prefix("a{b").in_memory().is_err());
/// # Ok::<(), redis_locks::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LockClientBuilder {
    prefix: String,
    defaults: Options,
    redis: RedisConfig,
    refuse_evicting: bool,
    /// Where the engine runs; `None`: on its own thread, but for a test's own store
    /// ([`LockClientBuilder::store`]), where it runs on the current runtime.
    placement: Option<Placement>,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            prefix: DEFAULT_PREFIX.to_owned(),
            defaults: Options::default(),
            redis: RedisConfig::default(),
            refuse_evicting: false,
            placement: None,
        }
    }
}

impl LockClientBuilder {
    /// Runs the client's lock engine (the one task that renews and releases its holds) as
    /// a task of the tokio runtime current when the client is built, instead of on a thread
    /// of its own (the default). For tests on a paused clock
    /// (`#[tokio::test(start_paused = true)]`): the engine's timers then follow the test's
    /// clock. Holds are renewed only while that runtime runs, and a guard dropped as the
    /// program ends may not be released before it exits (the lease bounds it). Build the
    /// client inside that runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::builder()
    ///     .engine_on_current_runtime(true)
    ///     .in_memory()?;
    /// let guard = client.mutex("m").lock().await?;
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    pub fn engine_on_current_runtime(mut self, on: bool) -> Self {
        self.placement = Some(match on {
            true => Placement::CurrentRuntime,
            false => Placement::Thread,
        });
        self
    }

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

    /// Default outage budget of every wait (default
    /// [`DEFAULT_OUTAGE_BUDGET`](crate::DEFAULT_OUTAGE_BUDGET), 60 s): how long a wait keeps
    /// attempting while Redis cannot be reached. See [`Lock::outage_budget`].
    ///
    /// ```
    /// let client = redis_locks::LockClient::builder()
    ///     .outage_budget(std::time::Duration::from_secs(300))
    ///     .in_memory()?;
    /// # Ok::<(), redis_locks::Error>(())
    /// ```
    pub fn outage_budget(mut self, budget: Duration) -> Self {
        self.defaults.outage_budget = budget;
        self
    }

    /// The holder label of this client's claims (default `<hostname>-<pid>`), shown by
    /// `inspect` and the CLI next to each holder and waiter so an operator can tell who holds
    /// a lock. It travels inside every claim token, so it is 1 to
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) characters of `A-Z`, `a-z`, `0-9`, `_` and `-`;
    /// anything else is refused when the client is built.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::builder()
    ///     .label("billing-worker-3")
    ///     .in_memory()?;
    /// let guard = client.mutex("invoices").lock().await?;
    /// let info = client.mutex("invoices").inspect().await?;
    /// assert_eq!(info.holders[0].label.as_deref(), Some("billing-worker-3"));
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn label(mut self, label: &str) -> Self {
        self.defaults.label = label.into();
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

    /// What connecting does when the server may evict lock keys under memory pressure
    /// (`maxmemory` set with any `maxmemory-policy` but `noeviction`: an evicted lock key is
    /// a silent second holder). By default the client logs one warning that says why and what
    /// to set; with `true` it refuses to connect with [`Error::EvictingServer`]. The check
    /// reads `INFO` (which managed services allow); a server that refuses `INFO` is not
    /// checked. [`LockClient::doctor`] reports this and the other properties a lock
    /// deployment depends on.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::builder()
    ///     .refuse_evicting_servers(true)
    ///     .connect("redis://127.0.0.1:6379")
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn refuse_evicting_servers(mut self, refuse: bool) -> Self {
        self.refuse_evicting = refuse;
        self
    }

    /// Warns about (or refuses, see [`refuse_evicting_servers`](Self::refuse_evicting_servers))
    /// a server that may evict lock keys.
    async fn check_eviction(&self, store: &dyn Store) -> Result<()> {
        let infos = match store.server_info().await {
            Ok(infos) => infos,
            Err(err) => {
                tracing::debug!(%err, "INFO refused: the eviction policy was not checked");
                return Ok(());
            }
        };
        for (address, text) in infos {
            let finding = deployment::eviction(&address, &deployment::Info::parse(&text));
            if finding.verdict != Verdict::Unfit {
                continue;
            }
            if self.refuse_evicting {
                return Err(Error::EvictingServer {
                    address,
                    detail: finding.detail,
                });
            }
            tracing::warn!(server = %address, fix = %finding.fix, "{}", finding.detail);
        }
        Ok(())
    }

    /// Connects to one Redis server.
    pub async fn connect(self, url: &str) -> Result<LockClient> {
        self.check()?;
        let store = RedisStore::connect_with(url, self.redis.clone()).await?;
        self.admit(&store).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Connects to one Redis server with the settings of a `redis::Client` you already have:
    /// its address, database, username and password, and TLS settings are used as they are,
    /// so nothing is typed twice. The library overrides two things on its own connection:
    /// the protocol is RESP3 (wake-ups arrive as pushes on the command connection) and the
    /// response and connect timeouts are this builder's [`RedisConfig`] (a reply later than
    /// the response timeout counts as lost and is confirmed by token, which the lock's
    /// safety relies on). Your client and its connections are not touched.
    ///
    /// The argument is a type of the `redis` crate (1.x): this method follows that crate's
    /// major version.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let mine = redis::Client::open("redis://app:s3cret@127.0.0.1:6379/2").expect("url");
    /// let client = redis_locks::LockClient::builder().connect_client(&mine).await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub async fn connect_client(self, client: &redis::Client) -> Result<LockClient> {
        self.check()?;
        let info = client.get_connection_info().clone();
        let store = RedisStore::connect_info(info, self.redis.clone()).await?;
        self.admit(&store).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Refuses a server the scripts cannot run on ([`Store::check_server`]: its version,
    /// Lua scripting, the clock in scripts, `PEXPIRE` `GT`/`NX`, RESP3), then warns when the
    /// user may not publish on this prefix's lock channels (see
    /// `RedisStore::warn_without_channel_rights`).
    async fn admit(&self, store: &RedisStore) -> Result<()> {
        let probe = LockKeys::new(&self.prefix, PROBE_LOCK)?;
        store.check_server(&probe).await?;
        store
            .warn_without_channel_rights(&probe.channel(), &self.prefix)
            .await;
        Ok(())
    }

    /// Connects to a Redis Cluster through any of its nodes.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn cluster(self, urls: &[&str]) -> Result<LockClient> {
        self.check()?;
        let store = RedisStore::cluster(urls, self.redis.clone()).await?;
        self.admit(&store).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Connects to a Redis Cluster with the settings of a cluster client builder of the
    /// `redis` crate you already configured (its nodes, username and password, TLS), so
    /// nothing is typed twice. As with [`connect_client`](Self::connect_client), the library
    /// sets on top: RESP3 (wake-ups arrive as pushes), its own push receiver, and the
    /// response and connect timeouts of this builder's [`RedisConfig`] (a reply later than the
    /// response timeout counts as lost and is confirmed by token, which the lock's safety
    /// relies on).
    ///
    /// The argument is a type of the `redis` crate (1.x): this method follows that crate's
    /// major version.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let mine = redis::cluster::ClusterClientBuilder::new(vec!["redis://10.0.0.1:7000"])
    ///     .username("app")
    ///     .password("s3cret");
    /// let client = redis_locks::LockClient::builder().connect_cluster(mine).await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster(
        self,
        nodes: redis::cluster::ClusterClientBuilder,
    ) -> Result<LockClient> {
        self.check()?;
        let store = RedisStore::cluster_with(nodes, self.redis.clone()).await?;
        self.admit(&store).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Connects to the primary that the Redis Sentinels at `sentinel_urls` (the sentinels'
    /// own `redis://host:port` addresses) name for `master_name`.
    ///
    /// The client follows failovers without a restart: a write refused with `READONLY` (the
    /// old primary was demoted) or a lost connection makes it ask the sentinels for the
    /// primary again and move there, subscribing its waiters' channels on the new primary
    /// and waking them. Replication is asynchronous, so a hold granted just before a
    /// failover may not have reached the new primary: that guard's next renewal is refused
    /// and it reports [`lost()`](crate::MutexGuard::lost). To make a hold survive a
    /// failover, confirm it reached the replicas with
    /// [`wait_replicas`](crate::Lock::wait_replicas) (see the crate's
    /// `docs/RELIABILITY.md`).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::builder()
    ///     .prefix("billing")
    ///     .sentinel(&["redis://127.0.0.1:26379"], "mymaster")
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn sentinel(self, sentinel_urls: &[&str], master_name: &str) -> Result<LockClient> {
        self.check()?;
        let store =
            RedisStore::sentinel(sentinel_urls, master_name, None, self.redis.clone()).await?;
        self.admit(&store).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// [`sentinel`](Self::sentinel) for data nodes that need credentials or TLS: `nodes` says
    /// how to reach the primary the sentinels name (username and password, database, TLS
    /// mode), as the redis crate's Sentinel client takes it. The sentinels themselves are
    /// reached with the credentials in their URLs. As with
    /// [`connect_client`](Self::connect_client), the library sets RESP3 and its own timeouts
    /// on top.
    ///
    /// The argument is a type of the `redis` crate (1.x): this method follows that crate's
    /// major version.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis::sentinel::SentinelNodeConnectionInfo;
    /// let auth = redis::RedisConnectionInfo::default()
    ///     .set_username("app")
    ///     .set_password("s3cret");
    /// let nodes = SentinelNodeConnectionInfo::default().set_redis_connection_info(auth);
    /// let client = redis_locks::LockClient::builder()
    ///     .connect_sentinel(&["redis://127.0.0.1:26379"], "mymaster", nodes)
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel(
        self,
        sentinel_urls: &[&str],
        master_name: &str,
        nodes: redis::sentinel::SentinelNodeConnectionInfo,
    ) -> Result<LockClient> {
        self.check()?;
        let store =
            RedisStore::sentinel(sentinel_urls, master_name, Some(nodes), self.redis.clone())
                .await?;
        self.admit(&store).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// Quorum (Redlock) mode over independent Redis servers (see [`LockClient::quorum`]).
    pub async fn quorum(self, urls: &[&str]) -> Result<LockClient> {
        self.check()?;
        let probe = LockKeys::new(&self.prefix, PROBE_LOCK)?;
        let store = QuorumStore::connect(urls, self.redis.clone(), &probe).await?;
        self.check_eviction(&store).await?;
        Ok(self.build(Arc::new(store)))
    }

    /// On a new in-process store of its own, shared with no other client (see
    /// [`LockClient::in_memory`]; for clients that share one store, see
    /// [`InMemory::client_with`](crate::InMemory::client_with)). Refuses the prefix and
    /// defaults that `connect` refuses, so a configuration tried in memory works on Redis.
    pub fn in_memory(self) -> Result<LockClient> {
        self.on_memory_store(Arc::new(MemoryStore::new()))
    }

    /// On `store`, an in-process store that other clients may share ([`crate::InMemory`]).
    pub(crate) fn on_memory_store(self, store: Arc<MemoryStore>) -> Result<LockClient> {
        self.check()?;
        Ok(self.build(store))
    }

    /// On any store (feature `testing`: a shared `MemoryStore`, a fault-injecting wrapper).
    /// The engine runs on the current runtime unless
    /// [`engine_on_current_runtime(false)`](LockClientBuilder::engine_on_current_runtime)
    /// was set: a test's store follows the test's clock.
    #[cfg(feature = "testing")]
    pub fn store(mut self, store: Arc<dyn Store>) -> Result<LockClient> {
        self.check()?;
        self.placement.get_or_insert(Placement::CurrentRuntime);
        Ok(self.build(store))
    }

    fn build(self, store: Arc<dyn Store>) -> LockClient {
        let placement = self.placement.unwrap_or_default();
        let holds = Holds::new(store.clone(), self.redis.response_timeout, placement);
        LockClient {
            inner: Arc::new(Inner {
                store,
                holds: Arc::new(holds),
                response_timeout: self.redis.response_timeout,
                prefix: self.prefix,
                defaults: self.defaults,
            }),
        }
    }
}
