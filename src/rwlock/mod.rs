//! [`RwLock`]: shared reads, exclusive writes, with a policy for who goes first.

mod read_guard;
mod write_guard;

use std::time::Duration;

pub use self::read_guard::ReadGuard;
pub use self::write_guard::WriteGuard;
use crate::error::Result;
use crate::guard::handle_options;
use crate::info::LockInfo;
use crate::store::{Claim, Family, Policy, Slot, FAIR_RW_CAPACITY};
use crate::wait::{Deadline, LockCtx};

/// Who goes first when readers and writers compete for an [`RwLock`].
///
/// ```
/// use redis_locks::{LockClient, Preference};
/// let client = LockClient::in_memory();
/// let fifo = client.rwlock("catalog").preference(Preference::Fair);
/// let reads_first = client.rwlock("stats").preference(Preference::Reader);
/// # drop((fifo, reads_first));
/// ```
///
/// `Writer` and `Reader` handles of one name share a writer record and read set. `Fair` keeps
/// its state in a ticket queue: while either kind holds the name, the other kind is refused
/// with [`Error::FamilyConflict`](crate::Error::FamilyConflict) (never granted beside it), so
/// use `Fair` for every handle of a name or for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preference {
    /// The default. Once a writer waits (and keeps heartbeating), no new reader is admitted;
    /// the writer gets the lock as soon as the readers already inside leave or expire. A
    /// flood of readers cannot starve a writer.
    #[default]
    Writer,
    /// Readers join whenever no writer holds. Highest read throughput, but a steady stream of
    /// readers can starve writers indefinitely.
    Reader,
    /// One FIFO queue of readers and writers by arrival (ticket) order; consecutive readers at
    /// the head are admitted together (phase-fair). Nobody starves; the price is that a reader
    /// behind a queued writer waits even when the lock is read-held.
    Fair,
}

/// A distributed reader-writer lock: many readers or one writer, never both.
///
/// Each reader has its own lease, so a crashed reader expires alone; writers get fencing
/// tokens; the [`Preference`] decides who goes first under contention (writer preference by
/// default).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("config");
/// let r1 = lock.read().await?;
/// let r2 = lock.read().await?; // readers share
/// assert!(lock.try_write().await?.is_none()); // a writer must wait for them
/// r1.release().await?;
/// r2.release().await?;
/// let w = lock.write().await?;
/// let fence = w.fencing_token();
/// let r = redis_locks::WriteGuard::downgrade(w).await?; // atomically keep reading
/// assert_eq!(r.fencing_token(), fence);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    pub(crate) ctx: LockCtx,
    pub(crate) preference: Preference,
}

handle_options!(RwLock);

impl RwLock {
    /// Chooses the [`Preference`] (default [`Preference::Writer`]).
    ///
    /// `Writer` and `Reader` handles of one name share one state and may be mixed. A `Fair`
    /// handle keeps its state in a ticket queue: while one kind holds the name, the other is
    /// refused with [`Error::FamilyConflict`](crate::Error::FamilyConflict) instead of
    /// waiting, so pick `Fair` for every handle of a name or for none.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::{LockClient, Preference};
    /// let client = LockClient::in_memory();
    /// let held = client.rwlock("doc").write().await?;
    /// let fair = client.rwlock("doc").preference(Preference::Fair);
    /// assert!(fair.try_read().await.unwrap_err().is_family_conflict());
    /// held.release().await?;
    /// assert!(fair.try_read().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn preference(mut self, preference: Preference) -> Self {
        self.preference = preference;
        self
    }

    fn policy(&self) -> Policy {
        match self.preference {
            Preference::Reader => Policy::Reader,
            _ => Policy::Writer,
        }
    }

    fn read_slot(&self) -> Slot {
        match self.preference {
            Preference::Fair => Slot::Ticket {
                weight: 1,
                capacity: FAIR_RW_CAPACITY,
                resizable: false,
            },
            _ => Slot::Read,
        }
    }

    pub(crate) fn write_slot(preference: Preference) -> Slot {
        match preference {
            Preference::Fair => Slot::Ticket {
                weight: FAIR_RW_CAPACITY,
                capacity: FAIR_RW_CAPACITY,
                resizable: false,
            },
            _ => Slot::Write,
        }
    }

    fn read_claim(&self) -> Claim {
        self.ctx.claim(self.read_slot(), self.policy())
    }

    fn write_claim(&self) -> Claim {
        self.ctx
            .claim(Self::write_slot(self.preference), self.policy())
    }

    fn read_guard(&self, hold: crate::lease::Hold) -> ReadGuard {
        ReadGuard { hold }
    }

    fn write_guard(&self, hold: crate::lease::Hold) -> WriteGuard {
        WriteGuard {
            hold,
            preference: self.preference,
        }
    }

    /// Waits for a shared hold.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue (fair policy) and releases anything
    /// granted meanwhile in the background.
    pub async fn read(&self) -> Result<ReadGuard> {
        let hold = self
            .ctx
            .wait_for(self.read_claim(), Deadline::Never, None)
            .await?;
        Ok(self.read_guard(hold))
    }

    /// One attempt at a shared hold; never queues.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RwLock::read`].
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        let hold = self
            .ctx
            .acquire(self.read_claim(), Deadline::Try, None)
            .await?;
        Ok(hold.map(|h| self.read_guard(h)))
    }

    /// Waits at most `timeout` for a shared hold (`is_timeout()` error after).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RwLock::read`].
    pub async fn read_timeout(&self, timeout: Duration) -> Result<ReadGuard> {
        let deadline = Deadline::after(timeout);
        let hold = self.ctx.wait_for(self.read_claim(), deadline, None).await?;
        Ok(self.read_guard(hold))
    }

    /// Waits for the exclusive hold. Under writer preference, the waiting writer holds back
    /// new readers while it keeps heartbeating.
    ///
    /// # Cancel safety
    /// Cancel safe: cancelling `write` loses your place and withdraws your claim at once, so
    /// readers held back by it resume immediately.
    pub async fn write(&self) -> Result<WriteGuard> {
        let hold = self
            .ctx
            .wait_for(self.write_claim(), Deadline::Never, None)
            .await?;
        Ok(self.write_guard(hold))
    }

    /// One attempt at the exclusive hold; never queues or announces itself.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RwLock::write`].
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        let hold = self
            .ctx
            .acquire(self.write_claim(), Deadline::Try, None)
            .await?;
        Ok(hold.map(|h| self.write_guard(h)))
    }

    /// Waits at most `timeout` for the exclusive hold (`is_timeout()` error after).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RwLock::write`].
    pub async fn write_timeout(&self, timeout: Duration) -> Result<WriteGuard> {
        let deadline = Deadline::after(timeout);
        let hold = self
            .ctx
            .wait_for(self.write_claim(), deadline, None)
            .await?;
        Ok(self.write_guard(hold))
    }

    /// Takes a read hold, runs `work(fencing_token)`, releases; stops `work` if the lease is
    /// lost first ([`Error::LeaseLost`](crate::Error)).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RwLock::read`].
    pub async fn with_read<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future,
    {
        let guard = self.read().await?;
        let fence = guard.fencing_token();
        crate::run_while_held(guard, work(fence)).await
    }

    /// Takes the write hold, runs `work(fencing_token)`, releases; stops `work` if the lease
    /// is lost first ([`Error::LeaseLost`](crate::Error)).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RwLock::write`].
    pub async fn with_write<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future,
    {
        let guard = self.write().await?;
        let fence = guard.fencing_token();
        crate::run_while_held(guard, work(fence)).await
    }

    /// Writer, readers, waiting writers (or the fair queue) and fence, in one round trip.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let family = match self.preference {
            Preference::Fair => Family::TicketQueue,
            _ => Family::LeaseLock,
        };
        self.ctx.inspect(family).await
    }
}
