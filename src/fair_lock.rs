//! [`FairLock`]: a FIFO mutex on the ticket queue.

use std::time::Duration;

use crate::error::Result;
use crate::guard::{guard_methods, handle_options};
use crate::info::LockInfo;
use crate::lease::Hold;
use crate::store::{Claim, Family, Policy, Slot};
use crate::wait::{Deadline, LockCtx};

/// A distributed mutex that grants the lock in strict arrival order.
///
/// Waiters take tickets from a counter on the server (never a client clock) and only the
/// head of the queue is granted, so among live waiters the order is exact. Waiters heartbeat
/// (every attempt is one); a waiter that stops (its process died) is dropped from the queue
/// after its heartbeat window, wherever it stands, so the queue never jams. A release grants
/// the next waiter directly and wakes only that waiter.
///
/// It is a [`Semaphore`](crate::Semaphore) with one permit, on the same queue.
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
#[derive(Clone, Debug)]
pub struct FairLock {
    pub(crate) ctx: LockCtx,
}

/// Proof of holding a [`FairLock`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let jobs = client.fair_lock("jobs");
/// let guard = jobs.lock_with(|ahead| println!("{ahead} waiters ahead")).await?;
/// assert!(guard.is_held());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock in the background (and grants the next waiter)"]
pub struct FairLockGuard {
    pub(crate) hold: Hold,
}

guard_methods!(FairLockGuard);
handle_options!(FairLock);

const SLOT: Slot = Slot::Ticket {
    weight: 1,
    capacity: 1,
    resizable: false,
};

impl FairLock {
    fn claim(&self) -> Claim {
        self.ctx.claim(SLOT, Policy::Writer)
    }

    /// Joins the queue and waits for its turn.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue at once (the next waiter moves up)
    /// and releases a grant made meanwhile in the background.
    pub async fn lock(&self) -> Result<FairLockGuard> {
        let hold = self
            .ctx
            .wait_for(self.claim(), Deadline::Never, None)
            .await?;
        Ok(FairLockGuard { hold })
    }

    /// As [`FairLock::lock`], calling `on_position` with the number of waiters ahead each time
    /// it changes is observed (0: next in line), so a job claimer can show progress.
    ///
    /// # Cancel safety
    /// As [`FairLock::lock`].
    pub async fn lock_with(
        &self,
        mut on_position: impl FnMut(u64) + Send,
    ) -> Result<FairLockGuard> {
        let hold = self
            .ctx
            .wait_for(self.claim(), Deadline::Never, Some(&mut on_position))
            .await?;
        Ok(FairLockGuard { hold })
    }

    /// Succeeds only when nobody holds the lock and nobody waits: it never jumps the queue
    /// and never stays in it.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`FairLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<FairLockGuard>> {
        let hold = self.ctx.acquire(self.claim(), Deadline::Try, None).await?;
        Ok(hold.map(|hold| FairLockGuard { hold }))
    }

    /// Waits at most `timeout`, then leaves the queue and fails with `is_timeout()`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`FairLock::lock`].
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<FairLockGuard> {
        let deadline = Deadline::after(timeout);
        let hold = self.ctx.wait_for(self.claim(), deadline, None).await?;
        Ok(FairLockGuard { hold })
    }

    /// Waits its turn, runs `work(fencing_token)` under the lock, and releases it; if the
    /// lease is lost first, `work` is stopped ([`Error::LeaseLost`](crate::Error)).
    ///
    /// # Cancel safety
    /// Cancel safe: the queue place or the lock is given up in the background.
    pub async fn with_lock<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future,
    {
        let guard = self.lock().await?;
        let fence = guard.fencing_token();
        crate::run_while_held(guard, work(fence)).await
    }

    /// Holder, queue in order with heartbeat ages, and fence, in one round trip.
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.ctx.inspect(Family::TicketQueue).await
    }
}
