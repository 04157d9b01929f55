//! [`Mutex`]: a plain lease lock, one holder at a time, no ordering among waiters.

use std::time::Duration;

use crate::error::Result;
use crate::guard::{guard_methods, handle_options};
use crate::info::LockInfo;
use crate::lease::Hold;
use crate::store::{Family, Policy, Slot};
use crate::wait::{Deadline, LockCtx};

/// A distributed mutex with a lease: at most one holder at any server instant.
///
/// Pick it for "only one of us does this now" (a cron that runs once, a migration, a cache
/// rebuild). Waiters are not ordered; use [`FairLock`](crate::FairLock) when arrival order
/// matters. Each acquisition returns a strictly increasing fencing token.
///
/// Handles are cheap to clone and `Send + Sync`; options are builder methods.
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
#[derive(Clone, Debug)]
pub struct Mutex {
    pub(crate) ctx: LockCtx,
}

/// Proof of holding a [`Mutex`]. The lease renews itself while the guard lives.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let mut guard = client.mutex("report").lock().await?;
/// let fence = guard.fencing_token(); // pass it along with every write to the resource
/// assert!(guard.is_held());
/// guard.extend(std::time::Duration::from_secs(60)).await?; // need longer this time
/// assert!(guard.release().await?);
/// # let _ = fence;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock in the background; keep it while you work"]
pub struct MutexGuard {
    pub(crate) hold: Hold,
}

guard_methods!(MutexGuard);
handle_options!(Mutex);

impl Mutex {
    fn claim(&self) -> crate::store::Claim {
        // A waiting mutex claim announces itself like a waiting writer, so a release can hand
        // the lock straight to it (one trip instead of a race of every waiter).
        self.ctx.claim(Slot::Write, Policy::Writer)
    }

    /// Waits until the lock is free and takes it.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, anything it may have been granted meanwhile is
    /// released in the background.
    pub async fn lock(&self) -> Result<MutexGuard> {
        let hold = self
            .ctx
            .wait_for(self.claim(), Deadline::Never, None)
            .await?;
        Ok(MutexGuard { hold })
    }

    /// One attempt: `Ok(None)` when someone else holds the lock.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Mutex::lock`].
    pub async fn try_lock(&self) -> Result<Option<MutexGuard>> {
        let hold = self.ctx.acquire(self.claim(), Deadline::Try, None).await?;
        Ok(hold.map(|hold| MutexGuard { hold }))
    }

    /// Waits at most `timeout`; then fails with an error whose `is_timeout()` is true.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Mutex::lock`].
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard> {
        let deadline = Deadline::after(timeout);
        let hold = self.ctx.wait_for(self.claim(), deadline, None).await?;
        Ok(MutexGuard { hold })
    }

    /// Takes the lock, runs `work(fencing_token)` under it, and releases it; if the lease is
    /// lost first, `work` is stopped and the result is [`Error::LeaseLost`](crate::Error).
    /// See [`run_while_held`](crate::run_while_held).
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
        Fut: std::future::Future,
    {
        let guard = self.lock().await?;
        let fence = guard.fencing_token();
        crate::run_while_held(guard, work(fence)).await
    }

    /// The holder (token prefix, lease left) and fence, in one round trip.
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.ctx.inspect(Family::LeaseLock).await
    }
}
