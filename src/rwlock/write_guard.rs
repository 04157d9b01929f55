use super::{Preference, ReadGuard};
use crate::error::Result;
use crate::guard::guard_methods;
use crate::lease::Hold;
use crate::store::{Slot, FAIR_RW_CAPACITY};

/// The exclusive hold of an [`RwLock`](crate::RwLock).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("prices");
/// let w = lock.write().await?;
/// assert!(lock.try_read().await?.is_none()); // no reader beside a writer
/// w.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the write hold in the background; keep it while you write"]
pub struct WriteGuard {
    pub(crate) hold: Hold,
    pub(crate) preference: Preference,
}

guard_methods!(WriteGuard);

impl WriteGuard {
    /// Turns the write hold into a read hold in one atomic step: no other writer can get in
    /// between. Readers waiting may join right after. The read guard keeps this write's
    /// fencing token.
    ///
    /// An associated function (`WriteGuard::downgrade(guard)`), so it cannot clash with
    /// methods of what you protect.
    ///
    /// # Cancel safety
    /// If cancelled after the request left, the hold may be a read hold or still a write hold;
    /// either way it is released in the background.
    pub async fn downgrade(guard: WriteGuard) -> Result<ReadGuard> {
        let shared = match guard.preference {
            Preference::Fair => Slot::Ticket {
                weight: 1,
                capacity: FAIR_RW_CAPACITY,
                resizable: false,
            },
            _ => Slot::Read,
        };
        let hold: Hold = guard.hold.downgrade(shared).await?;
        Ok(ReadGuard { hold })
    }
}
