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
//! | at most N calls *started* per period, across every client (a partner API's quota) | [`RateLimiter`] |
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
//! The crate's source ships its design notes under `docs/`: `docs/ARCHITECTURE.md` describes
//! the keys, scripts and hand-off, and `docs/GUARANTEES.md` what each primitive promises and
//! when it stops promising it. [`Error`] says what can go wrong and what to do about it.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

// Layers, each importing only those above it in this list (tests/architecture.rs checks):
// vocab (0), wire (1), store (2), engine (3), api (4); `testing` is the test facade on top.
mod api;
mod engine;
pub(crate) mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod vocab;
mod wire;

pub use api::client::{LockClient, LockClientBuilder, RedisConfig};
pub use api::election::{
    Campaign, Election, LeaderEvent, LeaderInfo, Leadership, Observer, MAX_VALUE_LEN,
};
pub use api::fair_lock::{FairLock, FairLockGuard};
pub use api::guard::Guard;
pub use api::handle::{Acquiring, Lock};
pub use api::in_memory::InMemory;
pub use api::info::{HolderInfo, LockInfo, WaiterInfo, PROCESS_PREFIX_LEN, TOKEN_PREFIX_LEN};
pub use api::kind;
pub use api::multi::{MultiAcquiring, MultiGuard, MultiLock, MAX_MULTI_NAMES};
pub use api::mutex::{Mutex, MutexGuard};
pub use api::rate_limiter::{
    Admission, RateAcquiring, RateLimiter, RateLimiterInfo, RateWaiterInfo,
};
pub use api::rwlock::{Preference, ReadGuard, RwLock, WriteGuard};
pub use api::semaphore::{Permit, Semaphore, MAX_PERMITS};
pub use store::{HoldKind, HolderEviction};
pub use vocab::capability::Capability;
pub use vocab::deployment::{Finding, Report, Verdict};
pub use vocab::error::{BoxError, Error, Result};
pub use vocab::hold_id::HoldId;
pub use vocab::keys::{key_type, MAX_NAME_LEN, MAX_PREFIX_LEN};
pub use vocab::options::{
    DEFAULT_HEARTBEAT, DEFAULT_LEASE, DEFAULT_OUTAGE_BUDGET, DEFAULT_RETRY_INTERVAL, MAX_LEASE,
    MIN_LEASE,
};
pub use vocab::rate::{Rate, MAX_RATE_COUNT, MAX_RATE_PERIOD};
pub use vocab::token::MAX_LABEL_LEN;
pub use vocab::url::redact_url;

/// The README's code compiles (checked by `cargo test --doc`).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
