//! Run work while holding a lock, stopping it if the lease is lost (in the spirit of
//! node-redlock's `using`).

use std::future::Future;

use crate::error::{Error, Result};
use crate::{FairLockGuard, MutexGuard, Permit, ReadGuard, WriteGuard};

mod sealed {
    pub trait Sealed {}
}

/// What every guard can do, for code generic over the kind of lock (sealed: implemented by
/// [`MutexGuard`], [`ReadGuard`], [`WriteGuard`], [`FairLockGuard`] and [`Permit`]).
///
/// ```
/// use redis_locks::Guard;
/// fn audit(guard: &impl Guard) -> String {
///     format!("{} under fence {}", guard.lock_name(), guard.fencing_token())
/// }
/// ```
pub trait Guard: sealed::Sealed + Send + 'static {
    /// See [`MutexGuard::lost`].
    fn lost(&self) -> impl Future<Output = ()> + Send + '_;
    /// See [`MutexGuard::release`].
    fn release(self) -> impl Future<Output = Result<bool>> + Send;
    /// See [`MutexGuard::fencing_token`].
    fn fencing_token(&self) -> u64;
    /// The lock's name.
    fn lock_name(&self) -> &str;
}

macro_rules! impl_guard {
    ($($g:ident),+) => {$(
        impl sealed::Sealed for $g {}
        impl Guard for $g {
            fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
                $g::lost(self)
            }
            fn release(self) -> impl Future<Output = Result<bool>> + Send {
                $g::release(self)
            }
            fn fencing_token(&self) -> u64 {
                $g::fencing_token(self)
            }
            fn lock_name(&self) -> &str {
                $g::name(self)
            }
        }
    )+};
}

impl_guard!(MutexGuard, ReadGuard, WriteGuard, FairLockGuard, Permit);

/// Runs `work` while `guard` holds its lock, then releases it.
///
/// If the lease is lost first (a renewal refused, or none confirmed in time), `work` is
/// stopped (dropped at its next `.await`) and the result is [`Error::LeaseLost`]: code after
/// that point never runs without the lock. Work that must not be cut mid-way should check a
/// fencing token at the resource instead.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let guard = client.mutex("cron:cleanup").lock().await?;
/// let fence = guard.fencing_token();
/// let rows = redis_locks::run_while_held(guard, async move {
///     // delete old rows, passing `fence` to the database ...
///     42
/// })
/// .await?;
/// assert_eq!(rows, 42);
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// If this future is dropped, `work` is dropped and the guard is released in the background.
pub async fn run_while_held<G: Guard, F: Future>(guard: G, work: F) -> Result<F::Output> {
    let outcome = tokio::select! {
        biased;
        _ = guard.lost() => None,
        out = work => Some(out),
    };
    let name = guard.lock_name().to_owned();
    match outcome {
        Some(out) => {
            if let Err(err) = guard.release().await {
                // The work is done; the lease lapses on its own.
                tracing::warn!(lock = %name, %err, "release after work failed");
            }
            Ok(out)
        }
        None => {
            let _ = guard.release().await;
            Err(Error::LeaseLost { name })
        }
    }
}
