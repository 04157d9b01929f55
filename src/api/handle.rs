//! [`Lock`]: a handle on one lock name, one generic type for every primitive, and
//! [`Acquiring`], the acquisition every handle returns.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::api::guard::Guard;
use crate::api::info::LockInfo;
use crate::api::kind::Kind;
use crate::engine::wait::{Deadline, LockCtx};
use crate::store::Request;
use crate::vocab::error::{Error, Result};

/// The option setters every handle that holds leases has (single locks and multi-locks), once:
/// `lease`, `auto_renew`, `renew_every`, `retry_interval`, `outage_budget`. `$make` is the
/// expression that makes such a handle from `client` in the examples.
macro_rules! lease_options {
    ($make:literal) => {
        #[doc = "Lease of each hold (default 30 s; 10 ms to one year). With auto-renewal on, a \
                 live guard keeps renewing it; a crashed holder blocks others for at most this."]
        #[doc = ""]
        #[doc = "```"]
        #[doc = "let client = redis_locks::LockClient::in_memory();"]
        #[doc = concat!("let handle = ", $make, ".lease(std::time::Duration::from_secs(5));")]
        #[doc = "# drop(handle);"]
        #[doc = "```"]
        pub fn lease(mut self, lease: std::time::Duration) -> Self {
            self.ctx.opts.lease = lease;
            self
        }

        #[doc = "Renew the lease in the background while the guard lives (default on)."]
        #[doc = ""]
        #[doc = "```"]
        #[doc = "let client = redis_locks::LockClient::in_memory();"]
        #[doc = concat!("let handle = ", $make, ".auto_renew(false); // the lease just runs out")]
        #[doc = "# drop(handle);"]
        #[doc = "```"]
        pub fn auto_renew(mut self, on: bool) -> Self {
            self.ctx.opts.auto_renew = on;
            self
        }

        #[doc = "How often the lease is renewed (default: a third of the lease; must be \
                 shorter than the lease)."]
        #[doc = ""]
        #[doc = "```"]
        #[doc = "use std::time::Duration;"]
        #[doc = "let client = redis_locks::LockClient::in_memory();"]
        #[doc = concat!("let handle = ", $make, ".lease(Duration::from_secs(9)).renew_every(Duration::from_secs(2));")]
        #[doc = "# drop(handle);"]
        #[doc = "```"]
        pub fn renew_every(mut self, every: std::time::Duration) -> Self {
            self.ctx.opts.renew_every = Some(every);
            self
        }

        #[doc = "The longest a waiter sleeps between attempts when no wake-up arrives (default \
                 1 s). Wake-ups from Redis normally come first; this bounds the cost of a lost one."]
        #[doc = ""]
        #[doc = "```"]
        #[doc = "let client = redis_locks::LockClient::in_memory();"]
        #[doc = concat!("let handle = ", $make, ".retry_interval(std::time::Duration::from_millis(200));")]
        #[doc = "# drop(handle);"]
        #[doc = "```"]
        pub fn retry_interval(mut self, interval: std::time::Duration) -> Self {
            self.ctx.opts.retry_interval = interval;
            self
        }

        #[doc = "How long a wait keeps attempting while Redis cannot be reached (a restart, a \
                 failover), counted from its first failed attempt; default \
                 [`DEFAULT_OUTAGE_BUDGET`](crate::DEFAULT_OUTAGE_BUDGET) (60 s). Past it, the \
                 wait fails with [`Error::Connection`](crate::Error::Connection). Attempts back \
                 off up to the retry interval meanwhile. A wait with a `.timeout(d)` ends at its \
                 deadline all the same, with `Error::Connection` if Redis was unreachable at the \
                 end, and a `try_*` makes exactly one attempt. Zero: give up at the first failed \
                 attempt."]
        #[doc = ""]
        #[doc = "```"]
        #[doc = "let client = redis_locks::LockClient::in_memory();"]
        #[doc = concat!("let handle = ", $make, ".outage_budget(std::time::Duration::from_secs(300));")]
        #[doc = "# drop(handle);"]
        #[doc = "```"]
        pub fn outage_budget(mut self, budget: std::time::Duration) -> Self {
            self.ctx.opts.outage_budget = budget;
            self
        }

        #[doc = "The longest a hold is renewed automatically: renewals stop once `bound` has \
                 passed since the grant (or the resume), the guard's `lost()` fires when its \
                 last renewal's trust runs out, and the lock is free for others at most one \
                 lease (plus one round trip) after the bound. Stops a worker stuck in an \
                 endless loop from keeping its lock forever. Default: no bound. An explicit \
                 `extend` still renews past it. 10 ms to one year."]
        #[doc = ""]
        #[doc = "```"]
        #[doc = "use std::time::Duration;"]
        #[doc = "let client = redis_locks::LockClient::in_memory();"]
        #[doc = concat!("let handle = ", $make, ".max_hold(Duration::from_secs(600));")]
        #[doc = "# drop(handle);"]
        #[doc = "```"]
        pub fn max_hold(mut self, bound: std::time::Duration) -> Self {
            self.ctx.opts.max_hold = Some(bound);
            self
        }
    };
}

/// A handle on one lock name: cheap to clone, `Send + Sync`, holding options but no state.
///
/// Every primitive's handle is this type with its own marker, under a familiar name:
/// [`Mutex`](crate::Mutex), [`RwLock`](crate::RwLock), [`FairLock`](crate::FairLock) and
/// [`Semaphore`](crate::Semaphore). The option setters below are shared by all of them; each
/// kind adds its own ways to acquire.
///
/// ```
/// use std::time::Duration;
/// let client = redis_locks::LockClient::in_memory();
/// let mutex = client
///     .mutex("nightly-report")
///     .lease(Duration::from_secs(10))
///     .heartbeat(Duration::from_secs(2));
/// assert_eq!(mutex.name(), "nightly-report");
/// ```
#[derive(Clone)]
pub struct Lock<K: Kind> {
    pub(crate) ctx: LockCtx,
    pub(crate) kind: K,
}

impl<K: Kind> Lock<K> {
    pub(crate) fn new(ctx: LockCtx, kind: K) -> Self {
        Lock { ctx, kind }
    }

    lease_options!("client.mutex(\"m\")");

    /// Heartbeat window of a waiter (default: the lease, at most 5 s): a waiter that stops
    /// attempting for this long (its process died) is dropped from the queue, and a grant
    /// handed to it lapses. Waiters attempt at least every third of it. Keep it no longer
    /// than the lease, so a dead waiter blocks others no longer than a dead holder would.
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let jobs = client.fair_lock("jobs").heartbeat(std::time::Duration::from_secs(1));
    /// # drop(jobs);
    /// ```
    pub fn heartbeat(mut self, window: Duration) -> Self {
        self.ctx.opts.heartbeat = Some(window);
        self
    }

    /// After each grant, wait (Redis `WAIT`) until `replicas` replicas acknowledged it, at
    /// most `timeout`; if fewer did, release it again and fail with
    /// [`Error::ReplicasNotReached`]. Narrows the window in which a failover to a replica
    /// loses the grant; it costs a replication round trip per acquisition. A resume of a
    /// hold id waits so for its renewal (if fewer acknowledge, the hold is left as it was,
    /// with no guard). The hold's renewals, `extend` and `downgrade` wait so too: one that
    /// fewer replicas acknowledged is not trusted (a renewal is sent again while the guard's
    /// trust lasts; `extend` and `downgrade` fail with [`Error::ReplicasNotReached`]). On
    /// Sentinel this is what keeps a guard from being granted or renewed by an old primary
    /// that still acts as one after a failover, once it has no replicas (see the crate's
    /// guarantees).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let lock = client.mutex("m").wait_replicas(1, std::time::Duration::from_millis(50));
    /// # drop(lock);
    /// ```
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.ctx.opts.wait_replicas = Some((replicas, timeout));
        self
    }

    /// The lock's name, as given (also when it is invalid: the first operation reports that).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// assert_eq!(client.rwlock("catalog").name(), "catalog");
    /// ```
    pub fn name(&self) -> &str {
        &self.ctx.name
    }

    /// The live state of the lock's family, in one round trip.
    pub(crate) async fn inspect_family(&self, request: Request) -> Result<LockInfo> {
        let keys = self.ctx.keys()?;
        let snapshot = self.ctx.store.inspect(keys, request.family(), None).await?;
        Ok(LockInfo::from_snapshot(keys, snapshot))
    }

    /// An acquisition of `request` that yields a guard of kind `G`.
    pub(crate) fn acquiring<G: Kind>(&self, request: Result<Request>, kind: G) -> Acquiring<'_, G> {
        Acquiring {
            ctx: &self.ctx,
            request,
            kind,
            timeout: None,
            on_position: None,
        }
    }

    /// One attempt at `request`, never queued: a refusal is [`Error::WouldBlock`].
    pub(crate) async fn attempt<G: Kind>(
        &self,
        request: Result<Request>,
        kind: G,
    ) -> Result<Guard<G>> {
        let claim = self.ctx.claim(request?);
        match self.ctx.acquire(claim, Deadline::Try, None).await? {
            Some(hold) => Ok(Guard::new(hold, kind)),
            None => Err(Error::WouldBlock {
                name: self.ctx.name.to_string(),
                by_this_client: self.ctx.holds.holds_name(&self.ctx.name).await,
            }),
        }
    }
}

impl<K: Kind> fmt::Debug for Lock<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(K::NAME)
            .field("name", &&*self.ctx.name)
            .field("kind", &self.kind)
            .field("options", &self.ctx.opts)
            .finish()
    }
}

/// Called with the number of waiters ahead.
type PositionFn<'a> = Box<dyn FnMut(u64) + Send + 'a>;

/// A wait for a lock, returned by `lock()`, `read()`, `write()` and `acquire()`: configure it,
/// then `.await` it for the guard.
///
/// Nothing is sent until it is awaited. Without [`timeout`](Acquiring::timeout) it waits as
/// long as it takes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use std::time::Duration;
/// let client = redis_locks::LockClient::in_memory();
/// let jobs = client.fair_lock("jobs");
/// let guard = jobs
///     .lock()
///     .timeout(Duration::from_secs(5))
///     .on_position(|ahead| println!("{ahead} waiters ahead"))
///     .await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// Cancel safe: if the future is dropped, its queue place or writer announcement is withdrawn
/// and anything it may have been granted meanwhile is released, in the background.
#[must_use = "an acquisition does nothing until it is awaited"]
pub struct Acquiring<'a, K: Kind> {
    ctx: &'a LockCtx,
    request: Result<Request>,
    kind: K,
    timeout: Option<Duration>,
    on_position: Option<PositionFn<'a>>,
}

impl<'a, K: Kind> Acquiring<'a, K> {
    /// Waits at most `timeout` (counted from the first poll); then the waiter leaves the
    /// queue and the result is an error whose [`is_timeout`](Error::is_timeout) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_locks::LockClient::in_memory();
    /// let held = client.mutex("m").lock().await?;
    /// let err = client.mutex("m").lock().timeout(Duration::from_millis(20)).await.unwrap_err();
    /// assert!(err.is_timeout());
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls `f` with the number of *waiters* queued ahead of this one, each time a change of
    /// it is observed. Holders are not counted: `0` means next in line (granted as soon as
    /// the holders leave, or the permits it asks for are free), not granted. Only the ticket
    /// queue (FairLock, Semaphore, RwLock with `Fair` preference) has positions; for the
    /// other locks `f` is never called.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let permit = client
    ///     .semaphore("exports", 2)
    ///     .acquire()
    ///     .on_position(|ahead| println!("{ahead} ahead"))
    ///     .await?;
    /// # drop(permit);
    /// # Ok(()) }
    /// ```
    pub fn on_position(mut self, f: impl FnMut(u64) + Send + 'a) -> Self {
        self.on_position = Some(Box::new(f));
        self
    }
}

impl<K: Kind> fmt::Debug for Acquiring<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquiring")
            .field("name", &&*self.ctx.name)
            .field("kind", &self.kind)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<'a, K: Kind> IntoFuture for Acquiring<'a, K> {
    type Output = Result<Guard<K>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Guard<K>>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let Acquiring {
                ctx,
                request,
                kind,
                timeout,
                mut on_position,
            } = self;
            let claim = ctx.claim(request?);
            let deadline = match timeout {
                Some(timeout) => Deadline::after(timeout),
                None => Deadline::Never,
            };
            let position = on_position
                .as_mut()
                .map(|f| &mut **f as &mut (dyn FnMut(u64) + Send));
            let hold = ctx.wait_for(claim, deadline, position).await?;
            Ok(Guard::new(hold, kind))
        })
    }
}
