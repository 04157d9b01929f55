use crate::guard::guard_methods;
use crate::lease::Hold;

/// A shared hold of an [`RwLock`](crate::RwLock). Its lease is its own: if this reader's
/// process dies, only this reader expires.
///
/// `fencing_token()` is the fence of the last write this read follows.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("prices");
/// let w = lock.write().await?;
/// let written = w.fencing_token();
/// w.release().await?;
/// let r = lock.read().await?;
/// assert_eq!(r.fencing_token(), written); // the last write this read follows
/// r.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the read hold in the background; keep it while you read"]
pub struct ReadGuard {
    pub(crate) hold: Hold,
}

guard_methods!(ReadGuard);
