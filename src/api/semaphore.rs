//! [`Semaphore`]: N permits with leases, FIFO waiters, on the ticket queue.

use std::future::Future;

use crate::api::guard::Guard;
use crate::api::handle::{Acquiring, Lock};
use crate::api::info::LockInfo;
use crate::api::kind;
use crate::store::{HoldKind, PermitChange, Request};
use crate::vocab::error::{Error, Result};

pub use crate::vocab::claim::MAX_PERMITS;

/// A distributed counting semaphore: at most `permits` held at any server instant.
///
/// Every permit is a lease, so a crashed holder's permits come back when its lease lapses.
/// Waiters queue by ticket and heartbeat like [`FairLock`](crate::FairLock) waiters (a FairLock
/// is this with one permit); `acquire_many(n)` at the head is never overtaken by smaller
/// requests behind it. Made by [`LockClient::semaphore`](crate::LockClient::semaphore);
/// options are the builder methods of [`Lock`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let exports = client.semaphore("exports", 2);
/// let a = exports.acquire().await?;
/// let b = exports.acquire().await?;
/// assert!(exports.try_acquire().await.unwrap_err().is_would_block()); // both are out
/// a.release().await?;
/// let c = exports.try_acquire().await?; // a permit came back
/// # drop((b, c));
/// # Ok(()) }
/// ```
///
/// # Methods
///
/// On [`Lock<kind::Semaphore>`](struct.Lock.html#impl-Lock%3CSemaphore%3E), with their examples:
///
/// - [`permits`](Lock::<kind::Semaphore>::permits): the handle's permit count
/// - [`acquire`](Lock::<kind::Semaphore>::acquire): wait for one permit
/// - [`acquire_many`](Lock::<kind::Semaphore>::acquire_many): wait for several permits at once
/// - [`try_acquire`](Lock::<kind::Semaphore>::try_acquire): one attempt at one permit
/// - [`try_acquire_many`](Lock::<kind::Semaphore>::try_acquire_many): one attempt at several permits
/// - [`available_permits`](Lock::<kind::Semaphore>::available_permits): how many permits are free now
/// - [`set_permits`](Lock::<kind::Semaphore>::set_permits): change the semaphore's count for every client
/// - [`add_permits`](Lock::<kind::Semaphore>::add_permits): raise the stored count
/// - [`forget_permits`](Lock::<kind::Semaphore>::forget_permits): lower the stored count
/// - [`with_permit`](Lock::<kind::Semaphore>::with_permit): run a piece of work under one permit
/// - [`inspect`](struct.Lock.html#impl-Lock%3CSemaphore%3E): holders, waiters and the fence
///
/// Options (builder methods of every handle, on [`Lock`]): [`lease`](Lock::lease),
/// [`auto_renew`](Lock::auto_renew), [`renew_every`](Lock::renew_every),
/// [`retry_interval`](Lock::retry_interval), [`outage_budget`](Lock::outage_budget),
/// [`heartbeat`](Lock::heartbeat), [`wait_replicas`](Lock::wait_replicas); and
/// [`name`](Lock::name).
pub type Semaphore = Lock<kind::Semaphore>;

/// One or more permits of a [`Semaphore`]; see [`Guard`] for its methods and
/// [`num_permits`](Guard::<kind::Semaphore>::num_permits).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let slots = client.semaphore("exports", 4);
/// let three: redis_locks::Permit = slots.acquire_many(3).await?;
/// assert_eq!(three.num_permits(), 3);
/// assert!(slots.try_acquire_many(2).await.is_err()); // only one left
/// three.release().await?;
/// # Ok(()) }
/// ```
pub type Permit = Guard<kind::Semaphore>;

fn check_count(permits: u32) -> Result<()> {
    if permits == 0 || permits > MAX_PERMITS {
        return Err(Error::invalid(
            "permits",
            format!("a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"),
        ));
    }
    Ok(())
}

impl Lock<kind::Semaphore> {
    fn request(&self, n: u32) -> Result<Request> {
        check_count(self.kind.permits)?;
        // The upper bound is the count in force on the server: `set_permits` from any client
        // may have raised or lowered this handle's count, so the script checks `n` against it.
        if n == 0 || n > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("asked for {n}; ask for 1 to the semaphore's permit count"),
            ));
        }
        Ok(Request::Semaphore {
            permits: n,
            capacity: self.kind.permits,
        })
    }

    /// The permit count this handle was made with. The count in force is the last
    /// [`set_permits`](Self::set_permits) (or `add_permits`, `forget_permits`) of any client,
    /// else this one: see [`available_permits`](Self::available_permits).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// assert_eq!(client.semaphore("exports", 3).permits(), 3);
    /// ```
    pub fn permits(&self) -> u32 {
        self.kind.permits
    }

    /// Waits for one permit; configure the wait with [`Acquiring::timeout`] and
    /// [`Acquiring::on_position`] before awaiting it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let permit = client.semaphore("exports", 2).acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue at once and releases a grant made
    /// meanwhile in the background.
    pub fn acquire(&self) -> Acquiring<'_, kind::Semaphore> {
        self.acquire_many(1)
    }

    /// Waits for `n` permits, all at once or none; FIFO: while this request is at the head,
    /// later smaller requests do not overtake it. `n` may be at most the permit count in
    /// force on the server; more is refused with an invalid-input error, also when another
    /// client lowers the count while this request waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let two = client.semaphore("exports", 4).acquire_many(2).await?;
    /// assert_eq!(two.num_permits(), 2);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub fn acquire_many(&self, n: u32) -> Acquiring<'_, kind::Semaphore> {
        self.acquiring(self.request(n), kind::Semaphore { permits: n })
    }

    /// One attempt at one permit: only when permits are free and nobody waits. A refusal is
    /// an error whose [`is_would_block`](crate::Error::is_would_block) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let one = client.semaphore("exports", 1);
    /// let held = one.try_acquire().await?;
    /// assert!(one.try_acquire().await.unwrap_err().is_would_block());
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Permit> {
        self.try_acquire_many(1).await
    }

    /// One attempt at `n` permits (see [`try_acquire`](Self::try_acquire)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let three = client.semaphore("exports", 3).try_acquire_many(3).await?;
    /// assert_eq!(three.num_permits(), 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_many(&self, n: u32) -> Result<Permit> {
        self.attempt(self.request(n), kind::Semaphore { permits: n })
            .await
    }

    /// Permits free right now on the server: the count in force (the last `set_permits` of
    /// any client, else this handle's) minus the permits of live holders, in one round trip.
    /// Waiters may take them at once; use it for metrics and decisions, not as a promise.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let exports = client.semaphore("exports", 4);
    /// let one = exports.acquire().await?;
    /// assert_eq!(exports.available_permits().await?, 3);
    /// # drop(one);
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<u32> {
        check_count(self.kind.permits)?;
        let info = self.inspect().await?;
        let count = info.permits.unwrap_or(self.kind.permits);
        let held: u64 = info
            .holders
            .iter()
            .map(|h| match h.kind {
                HoldKind::Permits(n) => u64::from(n),
                HoldKind::Write | HoldKind::Read => 0,
            })
            .sum();
        Ok(u64::from(count).saturating_sub(held) as u32)
    }

    /// Changes the number of permits for every client of this semaphore: new grants follow
    /// it, current permits are not revoked. The count is stored next to the fence and, like
    /// it, outlives the holders. Returns the new count.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let exports = client.semaphore("exports", 2);
    /// assert_eq!(exports.set_permits(5).await?, 5);
    /// assert_eq!(exports.available_permits().await?, 5);
    /// # Ok(()) }
    /// ```
    pub async fn set_permits(&self, permits: u32) -> Result<u32> {
        check_count(permits)?;
        self.change_permits(PermitChange::Set(permits)).await
    }

    /// Adds `n` permits for every client, in one step on the server (two clients adding at
    /// once both count), starting from the count in force (the last change of any client,
    /// else this handle's count). Waiters that now fit are granted at once. Returns the new
    /// count; a result above [`MAX_PERMITS`] is refused and changes nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let exports = client.semaphore("exports", 2);
    /// assert_eq!(exports.add_permits(3).await?, 5);
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, n: u32) -> Result<u32> {
        check_count(self.kind.permits)?;
        self.change_permits(PermitChange::Add {
            by: n,
            base: self.kind.permits,
        })
        .await
    }

    /// Removes `n` permits for every client, in one step on the server, from the count in
    /// force. Current holders keep their permits (nobody is revoked); new grants follow the
    /// lower count. Returns the new count; a result below 1 is refused and changes nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let exports = client.semaphore("exports", 4);
    /// assert_eq!(exports.forget_permits(3).await?, 1);
    /// assert!(exports.forget_permits(1).await.unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    pub async fn forget_permits(&self, n: u32) -> Result<u32> {
        check_count(self.kind.permits)?;
        self.change_permits(PermitChange::Forget {
            by: n,
            base: self.kind.permits,
        })
        .await
    }

    async fn change_permits(&self, change: PermitChange) -> Result<u32> {
        self.ctx.opts.validate()?;
        let keys = self.ctx.keys()?;
        self.ctx
            .store
            .set_permits(keys, change, self.ctx.opts.heartbeat(), None)
            .await
    }

    /// Waits for one permit, runs `work(fencing_token)` under it, and releases it; if the
    /// lease is lost first, `work` is stopped ([`Error::LeaseLost`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let rows = client.semaphore("exports", 2).with_permit(|_fence| async { 7 }).await?;
    /// assert_eq!(rows, 7);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: the queue place or the permit is given up in the background.
    pub async fn with_permit<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future,
    {
        let permit = self.acquire().await?;
        let fence = permit.fencing_token();
        permit.run_while_held(work(fence)).await
    }

    /// Holders with their permits, the queue in order, fence, in one round trip.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let exports = client.semaphore("exports", 2);
    /// let p = exports.acquire().await?;
    /// assert_eq!(exports.inspect().await?.holders.len(), 1);
    /// # drop(p);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.inspect_family(Request::FairLock).await
    }
}
