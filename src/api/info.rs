//! What `inspect` shows an operator: holders, readers, waiters, fence.

use std::time::Duration;

use crate::store::{HoldKind, Snapshot};
use crate::vocab::keys::LockKeys;

/// Tokens are shown shortened to this many characters: the first [`PROCESS_PREFIX_LEN`]
/// are the same for every acquisition of one process (tell clients apart by them), the rest
/// differ for every acquisition.
pub const TOKEN_PREFIX_LEN: usize = 16;
/// The characters of a shown token that identify the process that made it.
pub const PROCESS_PREFIX_LEN: usize = 8;

/// One live hold.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// First characters of the holder's token.
    pub token_prefix: String,
    /// The holder's label (its client's [`label`](crate::LockClientBuilder::label), by
    /// default `<hostname>-<pid>`), when its token carries one.
    pub label: Option<String>,
    /// Write, read or permits.
    pub kind: HoldKind,
    /// Lease left on the server's clock.
    pub lease_remaining: Duration,
}

/// One live waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaiterInfo {
    /// First characters of the waiter's token.
    pub token_prefix: String,
    /// The waiter's label, when its token carries one (see [`HolderInfo::label`]).
    pub label: Option<String>,
    /// 0 for the head of the queue (waiting writers of a lease lock: by heartbeat order).
    pub position: usize,
    /// Permits wanted.
    pub weight: u32,
    /// Heartbeat window left before the waiter is dropped.
    pub heartbeat_remaining: Duration,
}

/// The state of a lock, read in one round trip.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let lock = client.rwlock("catalog");
/// let (a, b) = (lock.read().await?, lock.read().await?);
/// let info = lock.inspect().await?;
/// assert_eq!(info.holders.len(), 2);
/// for h in &info.holders {
///     println!("{} {:?} lease left {:?}", h.token_prefix, h.kind, h.lease_remaining);
/// }
/// # drop((a, b));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// The fence counter: the last exclusive grant's token.
    pub fence: u64,
    /// Permits stored by `set_permits`, if any.
    pub permits: Option<u32>,
    /// Live holds.
    pub holders: Vec<HolderInfo>,
    /// Live waiters, in order.
    pub waiters: Vec<WaiterInfo>,
    /// The ticket queue's capacity key (`<prefix>:{<name>}:cap`), when it holds data
    /// redis-locks did not write (another type, or a string that is no capacity): the holders
    /// and waiters are read beside it, but the capacity is not known
    /// ([`permits`](Self::permits) is `None`), and the queue's steps that read it fail with
    /// [`Error::WrongType`](crate::Error::WrongType) until it is deleted. Always `None` for
    /// the lease lock (Mutex, RwLock with writer or reader preference) and in memory.
    pub foreign_capacity: Option<String>,
}

pub(crate) fn short(token: &str) -> String {
    token.chars().take(TOKEN_PREFIX_LEN).collect()
}

impl LockInfo {
    /// The snapshot of `keys`' lock, read in one step.
    pub(crate) fn from_snapshot(keys: &LockKeys, s: Snapshot) -> Self {
        LockInfo {
            name: keys.name().to_owned(),
            foreign_capacity: s.foreign_capacity.then(|| keys.key("cap")),
            fence: s.fence,
            permits: s.permits,
            holders: s
                .holders
                .into_iter()
                .map(|h| HolderInfo {
                    token_prefix: short(&h.token),
                    label: crate::vocab::token::label_of(&h.token).map(str::to_owned),
                    kind: h.kind,
                    lease_remaining: Duration::from_millis(h.remaining_ms),
                })
                .collect(),
            waiters: s
                .waiters
                .into_iter()
                .enumerate()
                .map(|(position, w)| WaiterInfo {
                    token_prefix: short(&w.token),
                    label: crate::vocab::token::label_of(&w.token).map(str::to_owned),
                    position,
                    weight: w.weight,
                    heartbeat_remaining: Duration::from_millis(w.heartbeat_remaining_ms),
                })
                .collect(),
        }
    }
}
