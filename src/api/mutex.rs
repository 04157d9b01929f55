//! [`Mutex`]: a plain lease lock, one holder at a time, no ordering among waiters.

use std::future::Future;

use crate::api::guard::Guard;
use crate::api::handle::{Acquiring, Lock};
use crate::api::info::LockInfo;
use crate::api::kind;
use crate::store::Request;
use crate::vocab::error::Result;

/// A distributed mutex with a lease: at most one holder at any server instant.
///
/// Pick it for "only one of us does this now" (a cron that runs once, a migration, a cache
/// rebuild). Waiters are not ordered; use [`FairLock`](crate::FairLock) when arrival order
/// matters. Each acquisition returns a strictly increasing fencing token.
///
/// Made by [`LockClient::mutex`](crate::LockClient::mutex); options are the builder methods
/// of [`Lock`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use std::time::Duration;
/// let client = redis_locks::LockClient::in_memory();
/// let mutex = client.mutex("nightly-report").lease(Duration::from_secs(10));
/// let guard = mutex.lock().await?;
/// assert!(guard.is_held());
/// // ... do the work, passing guard.fencing_token() to the resource ...
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
///
/// # Methods
///
/// On [`Lock<kind::Mutex>`](struct.Lock.html#impl-Lock%3CMutex%3E), with their examples:
///
/// - [`lock`](struct.Lock.html#impl-Lock%3CMutex%3E): wait for the lock and take it (`.timeout(..)` first to bound the wait)
/// - [`try_lock`](struct.Lock.html#impl-Lock%3CMutex%3E): one attempt, never waits
/// - [`with_lock`](struct.Lock.html#impl-Lock%3CMutex%3E): run a piece of work under the lock
/// - [`inspect`](struct.Lock.html#impl-Lock%3CMutex%3E): holders, waiters and the fence
///
/// Options (builder methods of every handle, on [`Lock`]): [`lease`](Lock::lease),
/// [`auto_renew`](Lock::auto_renew), [`renew_every`](Lock::renew_every),
/// [`retry_interval`](Lock::retry_interval), [`outage_budget`](Lock::outage_budget),
/// [`heartbeat`](Lock::heartbeat), [`wait_replicas`](Lock::wait_replicas); and
/// [`name`](Lock::name).
pub type Mutex = Lock<kind::Mutex>;

/// Proof of holding a [`Mutex`]. The lease renews itself while the guard lives; see
/// [`Guard`] for its methods.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let guard: redis_locks::MutexGuard = client.mutex("report").lock().await?;
/// let fence = guard.fencing_token(); // pass it along with every write to the resource
/// assert!(guard.release().await?);
/// # let _ = fence;
/// # Ok(()) }
/// ```
pub type MutexGuard = Guard<kind::Mutex>;

impl Lock<kind::Mutex> {
    /// Waits until the lock is free and takes it; configure the wait with
    /// [`Acquiring::timeout`] before awaiting it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_locks::LockClient::in_memory();
    /// let mutex = client.mutex("migration");
    /// let guard = mutex.lock().await?;
    /// assert!(mutex.lock().timeout(Duration::from_millis(10)).await.unwrap_err().is_timeout());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, anything it may have been granted meanwhile is
    /// released in the background.
    pub fn lock(&self) -> Acquiring<'_, kind::Mutex> {
        self.acquiring(Ok(Request::Mutex), kind::Mutex::NEW)
    }

    /// One attempt: fails with an error whose [`is_would_block`](crate::Error::is_would_block)
    /// is true when someone else holds the lock, so `if let Ok(guard) = m.try_lock().await`
    /// runs only under the lock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let mutex = client.mutex("cron:digest");
    /// let held = mutex.try_lock().await?;
    /// assert!(mutex.try_lock().await.unwrap_err().is_would_block());
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`lock`](struct.Lock.html#impl-Lock%3CMutex%3E).
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        self.attempt(Ok(Request::Mutex), kind::Mutex::NEW).await
    }

    /// Takes the lock, runs `work(fencing_token)` under it, and releases it; if the lease is
    /// lost first, `work` is stopped and the result is [`Error::LeaseLost`](crate::Error).
    /// See [`Guard::run_while_held`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let sent = client.mutex("cron:digest").with_lock(|fence| async move {
    ///     format!("digest sent under fence {fence}")
    /// }).await?;
    /// # assert!(sent.starts_with("digest"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the work is dropped and the lock released in the background.
    pub async fn with_lock<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future,
    {
        let guard = self.lock().await?;
        let fence = guard.fencing_token();
        guard.run_while_held(work(fence)).await
    }

    /// The holder (token prefix, lease left) and fence, in one round trip.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("m").lock().await?;
    /// assert_eq!(client.mutex("m").inspect().await?.holders.len(), 1);
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.inspect_family(Request::Mutex).await
    }
}
