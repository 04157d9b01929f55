//! The store contract: one method per protocol step, and its two implementations.
//!
//! [`Store`] is the specification that [`RedisStore`] (Lua scripts on a real server) and
//! [`MemoryStore`] (the in-process reference) both satisfy; the model checks in `tests/`
//! run random programs against both and require identical replies and state after every step.
//!
//! Two families of state share the contract:
//! - the **lease lock** ([`Slot::Write`], [`Slot::Read`]): a writer record, a set of readers
//!   each with its own lease, and a set of waiting writers (the writer-preference flag). Mutex
//!   and the RwLock's writer and reader policies;
//! - the **ticket queue** ([`Slot::Ticket`]): holders with leases, waiters in ticket order
//!   with heartbeats. FairLock (one permit), Semaphore, and the RwLock's fair policy (a reader
//!   takes one permit of [`FAIR_RW_CAPACITY`], a writer takes all of them).
//!
//! # Contract (what every implementation guarantees)
//! - Time is the store's own clock in milliseconds (`now`), or the explicit `now` passed in
//!   (tests only). A hold or heartbeat with deadline `d` is live while `now < d`.
//! - Every call first forgets expired holds and waiters whose heartbeat lapsed, then acts,
//!   atomically.
//! - Exclusive holds ([`Slot::Write`]; a ticket whose weight is the whole capacity) never
//!   coexist with any other live hold on the same lock and family; readers never coexist with
//!   a writer.
//! - Each exclusive grant takes a fence strictly greater than every earlier one of that lock
//!   name; shared grants report the fence of the last exclusive grant.
//! - `acquire` with a token that already holds renews the hold from `now` and reports the
//!   same fence (idempotent), so a retry after a lost reply is safe.
//! - Ticket queue: only the head of the queue is granted; the order among live waiters is
//!   ticket order; when permits free up, waiters at the head that fit are granted for their
//!   heartbeat window and named in a wake-up, and claim the grant with their next `acquire`.
//! - `release` removes every trace of the token (hold, queue place, waiting-writer entry)
//!   and tells whether it held a live lease.

mod capabilities;
#[cfg(feature = "cluster")]
mod cluster;
pub(crate) mod hub;
pub mod memory;
pub mod quorum;
pub mod redis;
#[cfg(feature = "sentinel")]
mod sentinel;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use self::memory::MemoryStore;
pub use self::quorum::QuorumStore;
pub use self::redis::RedisStore;
use crate::store::hub::WakeHub;
pub use crate::vocab::claim::*;
use crate::vocab::error::Result;
use crate::vocab::keys::LockKeys;
pub use crate::vocab::rate::*;

/// The protocol steps of every primitive. See the module docs for the contract.
///
/// `now` is `None` in production (the store's clock); tests pass an explicit time in ms.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use std::time::Duration;
/// use redis_locks::testing::keys::LockKeys;
/// use redis_locks::testing::store::{Acquire, MemoryStore, Request, Store};
/// let store = MemoryStore::new();
/// let lock = LockKeys::new("rl", "jobs")?;
/// let second = Duration::from_secs(1);
/// let claim = Request::Mutex.claim(second, second);
/// // One step at an explicit time (ms): granted, then the lease lapses at t + 1000.
/// assert!(matches!(store.acquire(&lock, &claim, false, Some(5_000)).await?, Acquire::Granted(_)));
/// let other = Request::Mutex.claim(second, second);
/// assert!(matches!(store.acquire(&lock, &other, false, Some(5_999)).await?, Acquire::Busy(_)));
/// assert!(matches!(store.acquire(&lock, &other, false, Some(6_000)).await?, Acquire::Granted(_)));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// One attempt to take `claim`. With `wait`, a refused claim joins the queue (ticket
    /// queue) or announces itself (writer under [`Policy::Writer`]); a repeated attempt is the
    /// waiter's heartbeat.
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<Acquire>;

    /// Removes every trace of the claim; `Ok(true)` if it held a live lease until now.
    async fn release(&self, lock: &LockKeys, claim: &Claim, now: Option<u64>) -> Result<bool>;

    /// Renews a live hold to `lease` from now, never shortening it (its deadline becomes the
    /// later of now + `lease` and the one it has); `Ok(false)` if the claim holds nothing
    /// live. A request that reaches the server late (an `extend` whose caller stopped
    /// waiting, a renewal of a detached hold), after another client resumed the hold with a
    /// longer lease, cannot cut that lease. The same as [`Store::renew`] with no hand-off.
    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
    ) -> Result<bool> {
        self.renew(lock, claim, lease, None, now).await
    }

    /// An automatic renewal: as [`Store::extend`].
    ///
    /// `handed_until`: the first renewal of a hold a release handed over (its claim) names
    /// the deadline the hand-off gave (the waiter's heartbeat deadline, a window that may be
    /// longer than the lease). While the hold still has that deadline, the claim sets it to
    /// now + `lease`, so a dead claimer blocks others no longer than its lease; once anything
    /// renewed the hold (another client's resume), the claim keeps as any renewal does.
    /// The store tells the two apart because every deadline an extend or renewal writes is
    /// rounded up to an even millisecond and every waiter's heartbeat deadline (which a
    /// hand-off gives the hold) is odd: no renewal can write the hand-off's deadline again.
    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        handed_until: Option<u64>,
        now: Option<u64>,
    ) -> Result<bool>;

    /// Turns a live exclusive hold into a shared one atomically (`Write` -> `Read`, or an
    /// exclusive ticket -> one permit) with `claim.lease`; `Ok(Some(fence))` on success.
    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<Option<u64>>;

    /// Reads the live state of one family in one step, changing nothing.
    async fn inspect(&self, lock: &LockKeys, family: Family, now: Option<u64>) -> Result<Snapshot>;

    /// Changes the stored permit count of a ticket queue in one step (see [`PermitChange`]),
    /// grants the waiters that now fit (each for `heartbeat`, until it claims the grant), and
    /// returns the new count. Current holds stay; new grants follow the new count.
    ///
    /// A change that would leave fewer than 1 or more than
    /// [`MAX_PERMITS`](crate::vocab::claim::MAX_PERMITS) permits is refused with an
    /// invalid-input error (`Error::is_invalid_input`), and one while a FairLock or fair
    /// RwLock uses the queue with a capacity conflict; either way nothing changes.
    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> Result<u32>;

    /// Drops every hold of the lock, bumps the fence and wakes every waiter; returns the new
    /// fence. For operators: evicted holders learn it when their renewal is refused.
    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> Result<u64>;

    /// Drops the one live hold (of either family) whose token starts with `token_prefix`,
    /// keeps every other hold and the waiters, wakes every waiter, and bumps the fence when
    /// no live hold of that family is left. Nothing changes when no hold or several match.
    /// For operators. Stores without it (the quorum) answer
    /// [`Error::Unsupported`](crate::vocab::error::Error::Unsupported).
    async fn force_release_holder(
        &self,
        _lock: &LockKeys,
        _token_prefix: &str,
        _now: Option<u64>,
    ) -> Result<HolderEviction> {
        Err(crate::vocab::error::Error::Unsupported {
            what: "evicting one holder",
            reason: "this store does not implement it",
        })
    }

    /// Waits until `replicas` replicas of the server holding the lock acknowledged every
    /// write made so far on this store's connection (Redis `WAIT`), at most `timeout`;
    /// returns how many did. Stores without replicas answer
    /// [`Error::Unsupported`](crate::vocab::error::Error::Unsupported).
    async fn wait_replicas(
        &self,
        lock: &LockKeys,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32> {
        let _ = (lock, replicas, timeout);
        Err(crate::vocab::error::Error::Unsupported {
            what: "wait_replicas",
            reason: "this store has no replicas to wait for",
        })
    }

    /// The wake-up hub that delivers this store's notifications to local waiters.
    fn hub(&self) -> &Arc<WakeHub>;

    /// A store of its own for the client's lock engine (renewals, and the releases of
    /// dropped guards), on connections the engine's runtime drives, so they go on while the
    /// runtime that made this store is blocked or gone; `None`: the engine shares this one.
    fn for_engine(&self) -> Option<Arc<dyn Store>> {
        None
    }

    /// Called once by the lock engine on its own runtime as it starts, on the store
    /// [`Store::for_engine`] gave it: a store may start making its connections there.
    fn engine_started(&self) {}

    /// One all-or-nothing attempt over several lease locks (a multi-lock): grants every part
    /// to `claim`'s token, each for `claim.lease` under `claim.policy`, or changes nothing
    /// (expired readers of a read part may be pruned, as by `acquire`) and names the first
    /// busy part. Never queues or announces: a refused multi-lock waits on the busy part's
    /// wake-ups and attempts again. `claim.slot` is not used: each [`Part`] names its own
    /// ([`Slot::Write`] or [`Slot::Read`]); parts are distinct locks, in the caller's order.
    ///
    /// A part whose name is held through the ticket queue fails the attempt with a family
    /// conflict naming that part. Idempotent like `acquire`: a retry after a lost reply finds
    /// its own holds and renews them with the same fences.
    ///
    /// Stores that cannot make the grant atomic answer [`Error::Unsupported`](crate::vocab::error::Error).
    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<AcquireAll> {
        let _ = (parts, claim, now);
        Err(crate::vocab::error::Error::Unsupported {
            what: "multi_lock",
            reason: "this store cannot take several locks in one atomic step",
        })
    }

    /// Election: the live holder of the name's one-permit ticket queue (FairLock) sets
    /// (`Some`) or retracts (`None`) the value it leads with, in one step, and the change is
    /// published to observers (`^`). `Ok(false)` when `claim` holds no live lease there:
    /// nothing changes. The value is stored with the claim's token and the fence counter (the
    /// holder's fence), and reported by [`leader`](Store::leader) only while that token holds.
    ///
    /// Stores without the ticket queue answer [`Error::Unsupported`](crate::vocab::error::Error).
    async fn proclaim(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        value: Option<&str>,
        now: Option<u64>,
    ) -> Result<bool> {
        let _ = (lock, claim, value, now);
        Err(no_election())
    }

    /// Election: the leader now, in one read: the value the live holder proclaimed, its fence
    /// (the term) and its lease left; `None` when no live holder proclaimed one (nobody
    /// leads, or the holder granted last has not proclaimed yet).
    async fn leader(
        &self,
        lock: &LockKeys,
        now: Option<u64>,
    ) -> Result<Option<crate::vocab::claim::LeaderInfo>> {
        let _ = (lock, now);
        Err(no_election())
    }

    /// Rate limiter: one decision for `claim` (see `docs/decisions/rate-limiter.md`). Forgets
    /// waiters whose heartbeat lapsed, then admits the claim if it is the head of the queue
    /// (or nobody waits) and its permits fit the rate (GCRA on the store's clock); else
    /// refuses with when it would fit, and with `wait` joins the queue or heartbeats its place.
    /// A step that changes the head of the queue names the new head in a wake-up (unless it
    /// is the caller). Permits outside `1 ..= burst` are refused with an invalid-input error.
    /// Idempotent by token: a claim admitted within its heartbeat window before is answered
    /// with that admission (its time), and nothing changes.
    ///
    /// Stores that cannot keep one rate and one order answer
    /// [`Error::Unsupported`](crate::vocab::error::Error::Unsupported).
    async fn rate_acquire(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<RateDecision> {
        let _ = (lock, claim, wait, now);
        Err(no_rate_limiter())
    }

    /// Rate limiter: removes the claim's queue place (a timed-out or dropped wait);
    /// `Ok(true)` if it had a live one. Wakes the new head if the head left.
    async fn rate_cancel(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        now: Option<u64>,
    ) -> Result<bool> {
        let _ = (lock, claim, now);
        Err(no_rate_limiter())
    }

    /// Rate limiter: what `rate` allows now and who waits, in one read, changing nothing.
    async fn rate_inspect(
        &self,
        lock: &LockKeys,
        rate: &Rate,
        now: Option<u64>,
    ) -> Result<RateSnapshot> {
        let _ = (lock, rate, now);
        Err(no_rate_limiter())
    }

    /// Refuses a server the scripts cannot run on with
    /// [`Error::UnsupportedServer`](crate::vocab::error::Error::UnsupportedServer), naming the
    /// [`Capability`](crate::vocab::capability::Capability) it lacks; `probe` is a lock under
    /// the client's prefix whose keys the check may name (it creates none). Run when a
    /// client connects, and by the doctor. A store without servers (in memory) has
    /// everything.
    async fn check_server(&self, probe: &LockKeys) -> Result<()> {
        let _ = probe;
        Ok(())
    }

    /// The `INFO` reply of each server the store writes to, as (address, text), for the
    /// deployment checks. A store without servers (in memory) has none.
    async fn server_info(&self) -> Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }

    /// True when a refused `acquire`, or one that fails, may have released the claim's token
    /// where its outcome was unsure (quorum mode releases what a minority granted). The next
    /// attempt then goes by a new token: that release may reach a server late, after a
    /// retry by the same token was granted there, and end it.
    fn releases_where_unsure(&self) -> bool {
        false
    }

    /// True when one `acquire_all` may only touch the keys of one Redis Cluster hash slot:
    /// a multi-lock then sends one per slot, in slot order.
    fn one_slot_per_step(&self) -> bool {
        false
    }
}

/// The answer of a store that cannot run a rate limiter.
fn no_rate_limiter() -> crate::vocab::error::Error {
    crate::vocab::error::Error::Unsupported {
        what: "rate limiter",
        reason: "this store cannot keep one rate and one arrival order (quorum mode: each server would keep its own); use a single Redis, Sentinel or Cluster",
    }
}

/// The answer of a store without the ticket queue to an election step.
fn no_election() -> crate::vocab::error::Error {
    crate::vocab::error::Error::Unsupported {
        what: "election",
        reason: "this store has no ticket queue to elect a leader on",
    }
}
