//! [`Guard`]: the proof of a hold, one generic type for every primitive.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::api::kind::{self, Kind};
use crate::engine::lease::Hold;
use crate::store::Request;
use crate::vocab::error::{Error, Result};

/// Proof of holding a lock: a lease on the server's clock, renewed in the background while
/// the guard lives, released when it is dropped (in the background) or by
/// [`release`](Guard::release).
///
/// Every primitive's guard is this type with its own marker, under a familiar name:
/// [`MutexGuard`](crate::MutexGuard), [`ReadGuard`](crate::ReadGuard),
/// [`WriteGuard`](crate::WriteGuard), [`FairLockGuard`](crate::FairLockGuard) and
/// [`Permit`](crate::Permit). The methods below are shared by all of them; code generic over
/// the kind of lock takes a `Guard<K>`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::{kind::Kind, Guard};
/// fn audit<K: Kind>(guard: &Guard<K>) -> String {
///     format!("{} under fence {}", guard.name(), guard.fencing_token())
/// }
/// let client = redis_locks::LockClient::in_memory();
/// let mut guard = client.mutex("report").lock().await?;
/// println!("{}", audit(&guard));
/// assert!(guard.is_held());
/// guard.extend(std::time::Duration::from_secs(60)).await?; // need longer this time
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock in the background; keep it while you work"]
pub struct Guard<K: Kind> {
    pub(crate) hold: Hold,
    pub(crate) kind: K,
}

impl<K: Kind> Guard<K> {
    pub(crate) fn new(hold: Hold, kind: K) -> Self {
        Guard { hold, kind }
    }

    /// The fencing token of this hold: strictly greater than every earlier exclusive grant's
    /// on this lock name (a shared hold reports the last exclusive grant's). Pass it to the
    /// resource you protect and have it refuse tokens lower than the highest it has seen:
    /// that stops a holder whose lease lapsed unnoticed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let first = client.mutex("m").lock().await?;
    /// let fence = first.fencing_token();
    /// first.release().await?;
    /// assert!(client.mutex("m").lock().await?.fencing_token() > fence);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.hold.fencing_token()
    }

    /// The lock's name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// assert_eq!(client.fair_lock("jobs").lock().await?.name(), "jobs");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.hold.name()
    }

    /// The claim token the store knows this hold by (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn token(&self) -> String {
        self.hold.token()
    }

    /// True while the lease can be trusted, answered from the local clock without a round
    /// trip: false once a renewal was refused, or once the lease may have lapsed (measured
    /// from the send of the last confirmed grant or renewal).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("m").lock().await?;
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// The instant (local monotonic clock) until which the lease is trusted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("m").lock().await?;
    /// assert!(guard.valid_until() > tokio::time::Instant::now());
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.hold.valid_until()
    }

    /// Resolves when the lease can no longer be trusted: a renewal was refused, or no renewal
    /// was confirmed before the lease ran out. Await it next to your work
    /// (`tokio::select!`) to stop when the lock is gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("m").lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => println!("lock lost; stop writing"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(5)) => println!("work done"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.hold.lost().await
    }

    /// Renews the lease to `lease` from now (and keeps that length for later automatic
    /// renewals). `Ok(false)`: the lease was already gone. A shorter lease shortens how long
    /// the guard trusts the hold, not the server's deadline: no request shortens a hold on
    /// the server, so none that lands late can end it under another guard's trust.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let mut guard = client.mutex("m").lock().await?;
    /// assert!(guard.extend(std::time::Duration::from_secs(120)).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled, the renewal may or may not have happened (and may still happen): the
    /// guard then trusts the hold no longer than either outcome allows (the shorter of the old
    /// deadline and `lease` from the send), and later renewals keep that cap.
    pub async fn extend(&mut self, lease: Duration) -> Result<bool> {
        self.hold.extend(lease).await
    }

    /// Releases the lock. `Ok(true)` if this guard still held it; `Ok(false)` if it no longer
    /// did (the lease lapsed or was taken over, or another release of this client, such as a
    /// `release_all` or a `release_hold` sent while this one was on its way, ended it first);
    /// `Err` if Redis could not be asked (the lease then lapses on its own).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("m").lock().await?;
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled after the request left, the release may or may not have happened; the
    /// lease then lapses on its own.
    pub async fn release(self) -> Result<bool> {
        self.hold.release().await
    }

    /// Runs `work` while this guard holds its lock, then releases it.
    ///
    /// If the lease is lost first (a renewal refused, or none confirmed in time), `work` is
    /// stopped (dropped at its next `.await`) and the result is [`Error::LeaseLost`]: code
    /// after that point never runs without the lock. Work that must not be cut mid-way should
    /// check a fencing token at the resource instead. The handles' `with_*` methods take the
    /// lock and call this.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("cron:cleanup").lock().await?;
    /// let fence = guard.fencing_token();
    /// let rows = guard
    ///     .run_while_held(async move {
    ///         // delete old rows, passing `fence` to the database ...
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 42);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If this future is dropped, `work` is dropped and the guard is released in the
    /// background.
    pub async fn run_while_held<F: Future>(self, work: F) -> Result<F::Output> {
        let outcome = tokio::select! {
            biased;
            _ = self.lost() => None,
            out = work => Some(out),
        };
        let name = self.name().to_owned();
        match outcome {
            Some(out) => {
                if let Err(err) = self.release().await {
                    // The work is done; the lease lapses on its own.
                    tracing::warn!(lock = %name, %err, "release after work failed");
                }
                Ok(out)
            }
            None => {
                let _ = self.release().await;
                Err(Error::LeaseLost { name })
            }
        }
    }
}

impl Guard<kind::Write> {
    /// Turns the write hold into a read hold in one atomic step: no other writer can get in
    /// between. Readers waiting may join right after. The read guard keeps this write's
    /// fencing token.
    ///
    /// An associated function (`WriteGuard::downgrade(guard)`), so it cannot clash with
    /// methods of what you protect.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::WriteGuard;
    /// let client = redis_locks::LockClient::in_memory();
    /// let w = client.rwlock("prices").write().await?;
    /// let fence = w.fencing_token();
    /// let r = WriteGuard::downgrade(w).await?;
    /// assert_eq!(r.fencing_token(), fence);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled after the request left, the hold may be a read hold or still a write hold;
    /// either way it is released in the background.
    pub async fn downgrade(guard: Self) -> Result<Guard<kind::Read>> {
        let preference = guard.kind.preference;
        let shared = Request::Read(preference).slot();
        let mut hold = guard.hold;
        hold.downgrade(shared).await?;
        Ok(Guard::new(hold, kind::Read { preference }))
    }
}

impl Guard<kind::Semaphore> {
    /// How many permits this guard holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let three = client.semaphore("exports", 4).acquire_many(3).await?;
    /// assert_eq!(three.num_permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn num_permits(&self) -> u32 {
        self.kind.permits
    }
}

impl<K: Kind> fmt::Debug for Guard<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("kind", &K::NAME)
            .field("name", &self.hold.name())
            .field("fencing_token", &self.hold.fencing_token())
            .field("is_held", &self.hold.is_held())
            .finish()
    }
}
