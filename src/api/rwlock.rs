//! [`RwLock`]: shared reads, exclusive writes, with a policy for who goes first.

use std::future::Future;

use crate::api::guard::Guard;
use crate::api::handle::{Acquiring, Lock};
use crate::api::info::LockInfo;
use crate::api::kind;
use crate::store::Request;
use crate::vocab::error::Result;

pub use crate::vocab::claim::Preference;

/// A distributed reader-writer lock: many readers or one writer, never both.
///
/// Each reader has its own lease, so a crashed reader expires alone; writers get fencing
/// tokens; the [`Preference`] decides who goes first under contention (writer preference by
/// default). Made by [`LockClient::rwlock`](crate::LockClient::rwlock); options are the
/// builder methods of [`Lock`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("config");
/// let r1 = lock.read().await?;
/// let r2 = lock.read().await?; // readers share
/// assert!(lock.try_write().await.unwrap_err().is_would_block()); // a writer must wait
/// r1.release().await?;
/// r2.release().await?;
/// let w = lock.write().await?;
/// let fence = w.fencing_token();
/// let r = redis_locks::WriteGuard::downgrade(w).await?; // atomically keep reading
/// assert_eq!(r.fencing_token(), fence);
/// # Ok(()) }
/// ```
///
/// # Methods
///
/// On [`Lock<kind::RwLock>`](struct.Lock.html#impl-Lock%3CRwLock%3E), with their examples:
///
/// - [`preference`](Lock::<kind::RwLock>::preference): writer (default), reader or fair (arrival order)
/// - [`read`](Lock::<kind::RwLock>::read): wait for a shared hold
/// - [`try_read`](Lock::<kind::RwLock>::try_read): one attempt at a shared hold
/// - [`write`](Lock::<kind::RwLock>::write): wait for the exclusive hold
/// - [`try_write`](Lock::<kind::RwLock>::try_write): one attempt at the exclusive hold
/// - [`with_read`](Lock::<kind::RwLock>::with_read): run a piece of work under a shared hold
/// - [`with_write`](Lock::<kind::RwLock>::with_write): run a piece of work under the exclusive hold
/// - [`inspect`](struct.Lock.html#impl-Lock%3CRwLock%3E): writer, readers, waiters and the fence
///
/// Options (builder methods of every handle, on [`Lock`]): [`lease`](Lock::lease),
/// [`auto_renew`](Lock::auto_renew), [`renew_every`](Lock::renew_every),
/// [`retry_interval`](Lock::retry_interval), [`outage_budget`](Lock::outage_budget),
/// [`heartbeat`](Lock::heartbeat), [`wait_replicas`](Lock::wait_replicas); and
/// [`name`](Lock::name).
pub type RwLock = Lock<kind::RwLock>;

/// A shared hold of an [`RwLock`]. Its lease is its own: if this reader's process dies, only
/// this reader expires. `fencing_token()` is the fence of the last write this read follows;
/// see [`Guard`] for its methods.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("prices");
/// let w = lock.write().await?;
/// let written = w.fencing_token();
/// w.release().await?;
/// let r: redis_locks::ReadGuard = lock.read().await?;
/// assert_eq!(r.fencing_token(), written); // the last write this read follows
/// r.release().await?;
/// # Ok(()) }
/// ```
pub type ReadGuard = Guard<kind::Read>;

/// The exclusive hold of an [`RwLock`]; see [`Guard`] for its methods and
/// [`Guard::<kind::Write>::downgrade`] for its own.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("prices");
/// let w: redis_locks::WriteGuard = lock.write().await?;
/// assert!(lock.try_read().await.is_err()); // no reader beside a writer
/// w.release().await?;
/// # Ok(()) }
/// ```
pub type WriteGuard = Guard<kind::Write>;

impl Lock<kind::RwLock> {
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
    /// assert!(fair.try_read().await.is_ok());
    /// # Ok(()) }
    /// ```
    pub fn preference(mut self, preference: Preference) -> Self {
        self.kind.preference = preference;
        self
    }

    fn read_request(&self) -> (Request, kind::Read) {
        let preference = self.kind.preference;
        (Request::Read(preference), kind::Read { preference })
    }

    fn write_request(&self) -> (Request, kind::Write) {
        let preference = self.kind.preference;
        (Request::Write(preference), kind::Write { preference })
    }

    /// Waits for a shared hold; configure the wait with [`Acquiring::timeout`] before
    /// awaiting it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let r = client.rwlock("catalog").read().timeout(std::time::Duration::from_secs(1)).await?;
    /// r.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue (fair policy) and releases anything
    /// granted meanwhile in the background.
    pub fn read(&self) -> Acquiring<'_, kind::Read> {
        let (request, kind) = self.read_request();
        self.acquiring(Ok(request), kind)
    }

    /// One attempt at a shared hold; never queues. A refusal is an error whose
    /// [`is_would_block`](crate::Error::is_would_block) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let r = client.rwlock("catalog").try_read().await?;
    /// # drop(r);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`read`](Lock::<kind::RwLock>::read).
    pub async fn try_read(&self) -> Result<ReadGuard> {
        let (request, kind) = self.read_request();
        self.attempt(Ok(request), kind).await
    }

    /// Waits for the exclusive hold; configure the wait with [`Acquiring::timeout`] before
    /// awaiting it. Under writer preference, the waiting writer holds back new readers while
    /// it keeps heartbeating.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let w = client.rwlock("catalog").write().await?;
    /// w.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: cancelling `write` loses your place and withdraws your claim at once, so
    /// readers held back by it resume immediately.
    pub fn write(&self) -> Acquiring<'_, kind::Write> {
        let (request, kind) = self.write_request();
        self.acquiring(Ok(request), kind)
    }

    /// One attempt at the exclusive hold; never queues or announces itself. A refusal is an
    /// error whose [`is_would_block`](crate::Error::is_would_block) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let r = client.rwlock("catalog").read().await?;
    /// assert!(client.rwlock("catalog").try_write().await.unwrap_err().is_would_block());
    /// # drop(r);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`write`](Lock::<kind::RwLock>::write).
    pub async fn try_write(&self) -> Result<WriteGuard> {
        let (request, kind) = self.write_request();
        self.attempt(Ok(request), kind).await
    }

    /// Takes a read hold, runs `work(fencing_token)`, releases; stops `work` if the lease is
    /// lost first ([`Error::LeaseLost`](crate::Error)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let n = client.rwlock("catalog").with_read(|_fence| async { 3 }).await?;
    /// assert_eq!(n, 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`read`](Lock::<kind::RwLock>::read).
    pub async fn with_read<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future,
    {
        let guard = self.read().await?;
        let fence = guard.fencing_token();
        guard.run_while_held(work(fence)).await
    }

    /// Takes the write hold, runs `work(fencing_token)`, releases; stops `work` if the lease
    /// is lost first ([`Error::LeaseLost`](crate::Error)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let fence = client.rwlock("catalog").with_write(|fence| async move { fence }).await?;
    /// assert!(fence > 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`write`](Lock::<kind::RwLock>::write).
    pub async fn with_write<F, Fut>(&self, work: F) -> Result<Fut::Output>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future,
    {
        let guard = self.write().await?;
        let fence = guard.fencing_token();
        guard.run_while_held(work(fence)).await
    }

    /// Writer, readers, waiting writers (or the fair queue) and fence, in one round trip.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let (a, b) = (client.rwlock("c").read().await?, client.rwlock("c").read().await?);
    /// assert_eq!(client.rwlock("c").inspect().await?.holders.len(), 2);
    /// # drop((a, b));
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.inspect_family(self.write_request().0).await
    }
}
