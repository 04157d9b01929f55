//! [`InMemory`]: one in-process store that several clients share, like services on one Redis.

use std::sync::Arc;

use crate::api::client::{LockClient, LockClientBuilder};
use crate::store::MemoryStore;
use crate::vocab::error::Result;

/// One in-memory store shared by several clients, for testing services that coordinate
/// through locks without running Redis. Every client made from it (and from its clones)
/// sees the others' locks, as clients of one Redis server do; give each its own label so
/// [`inspect`](crate::Mutex::inspect) tells them apart.
///
/// [`LockClient::in_memory()`] is the single-client form: each call makes a new store that
/// only that client and its clones see.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::InMemory;
/// let redis = InMemory::new();
/// let billing = redis.client("billing")?;
/// let reports = redis.client("reports")?;
/// let held = billing.mutex("ledger").lock().await?;
/// assert!(reports.mutex("ledger").try_lock().await.unwrap_err().is_would_block());
/// held.release().await?;
/// assert!(reports.mutex("ledger").try_lock().await.is_ok());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct InMemory {
    store: Arc<MemoryStore>,
}

impl InMemory {
    /// A new, empty store. Clones of the value share it.
    ///
    /// ```
    /// let store = redis_locks::InMemory::new();
    /// let same_store = store.clone();
    /// # drop((store, same_store));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// How many lock names still keep state in the store, as keys would be left on Redis.
    /// Once every hold of a name has ended and its lease has lapsed, the name keeps nothing
    /// (its fence counter goes too); a count stored with
    /// [`Semaphore::set_permits`](crate::Semaphore::set_permits) is kept.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// use redis_locks::{InMemory, LockClient};
    /// let store = InMemory::new();
    /// let client = store.client_with(LockClient::builder().lease(Duration::from_millis(50)))?;
    /// client.mutex("job-7").lock().await?.release().await?;
    /// tokio::time::sleep(Duration::from_millis(100)).await;
    /// assert_eq!(store.names_kept(), 0);
    /// # Ok(()) }
    /// ```
    pub fn names_kept(&self) -> usize {
        self.store.names_kept()
    }

    /// A client on this store with holder label `label` and the default settings otherwise.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `label` is not 1 to
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) characters of `A-Z`, `a-z`, `0-9`, `_`, `-`.
    ///
    /// ```
    /// let store = redis_locks::InMemory::new();
    /// let worker = store.client("worker-1")?;
    /// assert!(store.client("not a label").is_err());
    /// # drop(worker); Ok::<(), redis_locks::Error>(())
    /// ```
    pub fn client(&self, label: &str) -> Result<LockClient> {
        self.client_with(LockClient::builder().label(label))
    }

    /// A client on this store with the settings of `builder` (label, prefix, lease...).
    ///
    /// # Errors
    /// The settings that [`LockClientBuilder::in_memory`] refuses.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// use redis_locks::{InMemory, LockClient};
    /// let store = InMemory::new();
    /// let a = store.client_with(LockClient::builder().label("a").lease(Duration::from_secs(5)))?;
    /// let b = store.client("b")?;
    /// let held = a.fair_lock("jobs").lock().await?;
    /// assert!(b.fair_lock("jobs").try_lock().await.unwrap_err().is_would_block());
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn client_with(&self, builder: LockClientBuilder) -> Result<LockClient> {
        builder.on_memory_store(self.store.clone())
    }
}
