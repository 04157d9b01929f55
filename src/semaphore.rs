//! [`Semaphore`]: N permits with leases, FIFO waiters, on the ticket queue.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::{guard_methods, handle_options};
use crate::info::LockInfo;
use crate::lease::Hold;
use crate::store::{Claim, Family, PermitChange, Policy, Slot};
use crate::wait::{Deadline, LockCtx};

/// Largest permit count a semaphore accepts.
pub const MAX_PERMITS: u32 = 1 << 20;

/// A distributed counting semaphore: at most `permits` held at any server instant.
///
/// Every permit is a lease, so a crashed holder's permits come back when its lease lapses.
/// Waiters queue by ticket and heartbeat like [`FairLock`](crate::FairLock) waiters (a FairLock
/// is this with one permit); `acquire_many(n)` at the head is never overtaken by smaller
/// requests behind it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let exports = client.semaphore("exports", 2);
/// let a = exports.acquire().await?;
/// let b = exports.acquire().await?;
/// assert!(exports.try_acquire().await?.is_none()); // both permits are out
/// a.release().await?;
/// let c = exports.try_acquire().await?.expect("a permit came back");
/// # drop((b, c));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    pub(crate) ctx: LockCtx,
    pub(crate) permits: u32,
}

/// One or more permits of a [`Semaphore`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let slots = client.semaphore("exports", 4);
/// let three = slots.acquire_many(3).await?;
/// assert_eq!(three.count(), 3);
/// assert!(slots.try_acquire_many(2).await?.is_none()); // only one left
/// three.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the permit releases it in the background"]
pub struct Permit {
    pub(crate) hold: Hold,
    pub(crate) count: u32,
}

guard_methods!(Permit);
handle_options!(Semaphore);

impl Permit {
    /// How many permits this guard holds.
    pub fn count(&self) -> u32 {
        self.count
    }
}

impl Semaphore {
    fn claim(&self, n: u32) -> Result<Claim> {
        if self.permits == 0 || self.permits > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!(
                    "a semaphore has 1 to {MAX_PERMITS} permits, not {}",
                    self.permits
                ),
            ));
        }
        // The upper bound is the count in force on the server: `set_permits` from any client
        // may have raised or lowered this handle's count, so the script checks `n` against it.
        if n == 0 || n > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("asked for {n}; ask for 1 to the semaphore's permit count"),
            ));
        }
        Ok(self.ctx.claim(
            Slot::Ticket {
                weight: n,
                capacity: self.permits,
                resizable: true,
            },
            Policy::Writer,
        ))
    }

    /// The permit count this handle was made with (see [`Semaphore::set_permits`]).
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits for one permit.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue at once and releases a grant made
    /// meanwhile in the background.
    pub async fn acquire(&self) -> Result<Permit> {
        self.acquire_many(1).await
    }

    /// Waits for `n` permits, all at once or none; FIFO: while this request is at the head,
    /// later smaller requests do not overtake it. `n` may be at most the permit count in
    /// force on the server (the last [`Semaphore::set_permits`] of any client, else this
    /// handle's count); more is refused with an invalid-input error, also when another
    /// client lowers the count while this request waits.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn acquire_many(&self, n: u32) -> Result<Permit> {
        let hold = self
            .ctx
            .wait_for(self.claim(n)?, Deadline::Never, None)
            .await?;
        Ok(Permit { hold, count: n })
    }

    /// One attempt at one permit: only when permits are free and nobody waits.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.try_acquire_many(1).await
    }

    /// One attempt at `n` permits.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<Permit>> {
        let hold = self
            .ctx
            .acquire(self.claim(n)?, Deadline::Try, None)
            .await?;
        Ok(hold.map(|hold| Permit { hold, count: n }))
    }

    /// Waits at most `timeout` for one permit, then leaves the queue (`is_timeout()`).
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Permit> {
        let deadline = Deadline::after(timeout);
        let hold = self.ctx.wait_for(self.claim(1)?, deadline, None).await?;
        Ok(Permit { hold, count: 1 })
    }

    /// Changes the number of permits for every client of this semaphore: new grants follow
    /// it, current permits are not revoked. The count is stored next to the fence and, like
    /// it, outlives the holders. Returns a handle with the new count.
    pub async fn set_permits(mut self, permits: u32) -> Result<Self> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"),
            ));
        }
        self.ctx.opts.validate()?;
        let keys = self.ctx.keys()?;
        self.permits = self
            .ctx
            .store
            .set_permits(
                keys,
                PermitChange::Set(permits),
                self.ctx.opts.heartbeat(),
                None,
            )
            .await?;
        Ok(self)
    }

    /// Waits for one permit, runs `work` under it, and releases it; if the lease is lost
    /// first, `work` is stopped ([`Error::LeaseLost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: the queue place or the permit is given up in the background.
    pub async fn with_permit<Fut: std::future::Future>(&self, work: Fut) -> Result<Fut::Output> {
        let permit = self.acquire().await?;
        crate::run_while_held(permit, work).await
    }

    /// Holders with their permits, the queue in order, fence, in one round trip.
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.ctx.inspect(Family::TicketQueue).await
    }
}
