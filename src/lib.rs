//! # redis-locks
//!
//! Distributed coordination primitives on Redis for tokio services:
//!
//! | you need | use |
//! |---|---|
//! | one holder at a time, order does not matter (a cron that runs once) | [`Mutex`] |
//! | many readers or one writer, writers never starved | [`RwLock`] |
//! | one holder at a time, strictly in arrival order (job claiming) | [`FairLock`] |
//! | at most N at once (rate-limited API, export slots) | [`Semaphore`] |
//! | several names at once, all or none, without deadlocks (a transfer between two accounts) | [`MultiLock`] |
//! | one member of a pool leads, the others stand by and take over (a scheduler) | [`Election`] |
//!
//! Every hold is a lease on the server's clock, renewed in the background while its guard
//! lives; a guard tells you when its lease may be gone ([`Guard::lost`]); every exclusive
//! grant carries a strictly increasing fencing token. Waiters are woken by Redis pub/sub, not
//! by polling. [`LockClient::in_memory`] gives the same semantics without Redis.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> redis_locks::Result<()> {
//! use redis_locks::LockClient;
//! let client = LockClient::in_memory(); // or LockClient::connect("redis://127.0.0.1/").await?
//! let lock = client.rwlock("catalog");
//! let read = lock.read().await?;
//! println!("reading under fence {}", read.fencing_token());
//! read.release().await?;
//! # Ok(()) }
//! ```
//!
//! See `docs/ARCHITECTURE.md` for the keys, scripts and hand-off, and `docs/GUARANTEES.md`
//! for what each primitive promises and when it stops promising it.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod client;
mod election;
mod error;
mod fair_lock;
mod guard;
mod handle;
mod hub;
mod info;
pub(crate) mod keys;
pub mod kind;
mod lease;
mod multi;
mod mutex;
mod options;
mod rwlock;
mod scripts;
mod semaphore;
pub(crate) mod store;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(not(feature = "testing"))]
mod testing;
mod token;
mod wait;
mod wire;

pub use client::{LockClient, LockClientBuilder, RedisConfig};
pub use election::{Campaign, Election, LeaderInfo, Leadership, Observer, MAX_VALUE_LEN};
pub use error::{BoxError, Error, Result};
pub use fair_lock::{FairLock, FairLockGuard};
pub use guard::Guard;
pub use handle::{Acquiring, Lock};
pub use info::{HolderInfo, LockInfo, WaiterInfo, PROCESS_PREFIX_LEN, TOKEN_PREFIX_LEN};
pub use keys::{MAX_NAME_LEN, MAX_PREFIX_LEN};
pub use multi::{MultiAcquiring, MultiGuard, MultiLock, MAX_MULTI_NAMES};
pub use mutex::{Mutex, MutexGuard};
pub use options::{
    DEFAULT_HEARTBEAT, DEFAULT_LEASE, DEFAULT_OUTAGE_BUDGET, DEFAULT_RETRY_INTERVAL, MAX_LEASE,
    MIN_LEASE,
};
pub use rwlock::{Preference, ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Permit, Semaphore, MAX_PERMITS};
pub use store::HoldKind;
pub use token::MAX_LABEL_LEN;

/// The README's code compiles (checked by `cargo test --doc`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
