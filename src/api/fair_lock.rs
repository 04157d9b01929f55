//! [`FairLock`]: a FIFO mutex on the ticket queue.

use std::future::Future;

use crate::api::guard::Guard;
use crate::api::handle::{Acquiring, Lock};
use crate::api::info::LockInfo;
use crate::api::kind;
use crate::store::Request;
use crate::vocab::error::Result;

/// A distributed mutex that grants the lock in strict arrival order.
///
/// Waiters take tickets from a counter on the server (never a client clock) and only the
/// head of the queue is granted, so among live waiters the order is exact. Waiters heartbeat
/// (every attempt is one); a waiter that stops (its process died) is dropped from the queue
/// after its heartbeat window, wherever it stands, so the queue never jams. A release grants
/// the next waiter directly and wakes only that waiter.
///
/// It is a [`Semaphore`](crate::Semaphore) with one permit, on the same queue. Made by
/// [`LockClient::fair_lock`](crate::LockClient::fair_lock); options are the builder methods
/// of [`Lock`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let jobs = client.fair_lock("job-claims");
/// let guard = jobs.lock().await?;
/// // claim the next job, in turn with every other worker ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Methods
///
/// On [`Lock<kind::FairLock>`](struct.Lock.html#impl-Lock%3CFairLock%3E), with their examples:
///
/// - [`lock`](struct.Lock.html#impl-Lock%3CFairLock%3E): queue for the lock and take it in arrival order
/// - [`try_lock`](struct.Lock.html#impl-Lock%3CFairLock%3E): one attempt, never queued
/// - [`with_lock`](struct.Lock.html#impl-Lock%3CFairLock%3E): run a piece of work under the lock
/// - [`inspect`](struct.Lock.html#impl-Lock%3CFairLock%3E): holder, queue and fence
///
/// Options (builder methods of every handle, on [`Lock`]): [`lease`](Lock::lease),
/// [`auto_renew`](Lock::auto_renew), [`renew_every`](Lock::renew_every),
/// [`retry_interval`](Lock::retry_interval), [`outage_budget`](Lock::outage_budget),
/// [`heartbeat`](Lock::heartbeat), [`wait_replicas`](Lock::wait_replicas); and
/// [`name`](Lock::name).
pub type FairLock = Lock<kind::FairLock>;

/// Proof of holding a [`FairLock`]; see [`Guard`] for its methods.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let guard: redis_locks::FairLockGuard = client.fair_lock("jobs").lock().await?;
/// assert!(guard.is_held());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub type FairLockGuard = Guard<kind::FairLock>;

impl Lock<kind::FairLock> {
    /// Joins the queue and waits for its turn; configure the wait with
    /// [`Acquiring::timeout`] and [`Acquiring::on_position`] before awaiting it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let jobs = client.fair_lock("jobs");
    /// let guard = jobs.lock().on_position(|ahead| println!("{ahead} waiters ahead")).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue at once (the next waiter moves up)
    /// and releases a grant made meanwhile in the background.
    pub fn lock(&self) -> Acquiring<'_, kind::FairLock> {
        self.acquiring(Ok(Request::FairLock), kind::FairLock::NEW)
    }

    /// Succeeds only when nobody holds the lock and nobody waits: it never jumps the queue
    /// and never stays in it. A refusal is an error whose
    /// [`is_would_block`](crate::Error::is_would_block) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let jobs = client.fair_lock("jobs");
    /// let held = jobs.try_lock().await?;
    /// assert!(jobs.try_lock().await.unwrap_err().is_would_block());
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`lock`](struct.Lock.html#impl-Lock%3CFairLock%3E).
    pub async fn try_lock(&self) -> Result<FairLockGuard> {
        self.attempt(Ok(Request::FairLock), kind::FairLock::NEW)
            .await
    }

    /// Waits its turn, runs `work(fencing_token)` under the lock, and releases it; if the
    /// lease is lost first, `work` is stopped ([`Error::LeaseLost`](crate::Error)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let job = client.fair_lock("jobs").with_lock(|fence| async move { fence }).await?;
    /// assert!(job > 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the queue place or the lock is given up in the background.
    pub async fn with_lock<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future,
    {
        let guard = self.lock().await?;
        let fence = guard.fencing_token();
        guard.run_while_held(work(fence)).await
    }

    /// Holder, queue in order with heartbeat ages, and fence, in one round trip.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let info = client.fair_lock("jobs").inspect().await?;
    /// assert!(info.holders.is_empty() && info.waiters.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.inspect_family(Request::FairLock).await
    }
}
