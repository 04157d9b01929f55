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
use crate::vocab::error::Result;
use crate::vocab::keys::LockKeys;

/// Permits of the fair RwLock's ticket queue: a reader takes one, a writer takes all.
pub const FAIR_RW_CAPACITY: u32 = 1 << 30;

/// What a claim holds, or waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Exclusive hold of the lease lock (Mutex, RwLock writer).
    Write,
    /// Shared hold of the lease lock (RwLock reader).
    Read,
    /// `weight` permits of a ticket queue with `capacity` permits. Every claim on one queue
    /// must agree on its capacity (else [`Error::CapacityConflict`](crate::Error)), except
    /// that a `resizable` one (a Semaphore's) follows a count stored by `set_permits`.
    Ticket {
        /// Permits taken.
        weight: u32,
        /// Permits in all.
        capacity: u32,
        /// True for a Semaphore, whose count `set_permits` may change for every handle;
        /// false for a fixed capacity (FairLock: 1, fair RwLock: [`FAIR_RW_CAPACITY`]).
        resizable: bool,
    },
}

impl Slot {
    /// True for holds that exclude every other hold.
    pub fn is_exclusive(&self) -> bool {
        match *self {
            Slot::Write => true,
            Slot::Read => false,
            Slot::Ticket {
                weight, capacity, ..
            } => weight >= capacity,
        }
    }
}

/// How the lease lock treats readers while writers wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// A refused writer that waits announces itself, and no new reader is admitted while a
    /// live announcement exists.
    #[default]
    Writer,
    /// Readers join whenever no writer holds; writers may starve under a steady read load.
    Reader,
}

/// One acquisition: its token and what it asks for. Every protocol step of that acquisition
/// (attempts, renewals, release) carries the same claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Unique per acquisition; the store identifies the holder or waiter by it.
    pub token: String,
    /// What is held or awaited.
    pub slot: Slot,
    /// Lease of a grant (and of every renewal).
    pub lease: Duration,
    /// A waiter that does not attempt for this long is dropped; also the claim window of a
    /// grant made by a release to a queued waiter.
    pub heartbeat: Duration,
    /// Reader/writer policy of the lease lock (ignored by the ticket queue).
    pub policy: Policy,
}

impl Claim {
    /// A claim with a fresh random token. Handles never call this directly: they describe
    /// what they want as a [`Request`], whose [`Request::claim`] is the one place that maps a
    /// primitive operation to a slot and policy.
    pub(crate) fn new(slot: Slot, lease: Duration, heartbeat: Duration, policy: Policy) -> Self {
        Claim {
            token: crate::vocab::token::next(),
            slot,
            lease,
            heartbeat,
            policy,
        }
    }

    /// Refuses a claim whose token a script could misread (a separator such as `|` or `#`,
    /// or an empty or over-long token): every store calls this before touching any state.
    pub fn check(&self) -> Result<()> {
        crate::vocab::token::check(&self.token)
    }
}

/// One primitive operation, as a handle asks for it: the only way a [`Claim`] is made, used
/// by the handles and by the model check alike, so the model check runs exactly what the
/// handles send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// `Mutex::lock` and its `try_` form: the lease lock's writer slot under writer
    /// preference (a waiting mutex claim announces itself like a waiting writer, so a release
    /// can hand the lock straight to it).
    Mutex,
    /// `RwLock::read` under the given preference.
    Read(crate::Preference),
    /// `RwLock::write` under the given preference.
    Write(crate::Preference),
    /// `FairLock::lock`: one permit of a one-permit queue.
    FairLock,
    /// `Semaphore::acquire_many(permits)` on a semaphore made with `capacity` permits.
    Semaphore {
        /// Permits taken.
        permits: u32,
        /// The handle's permit count (the server's `set_permits` count wins over it).
        capacity: u32,
    },
}

impl Request {
    /// What the store holds or queues for this request.
    pub fn slot(self) -> Slot {
        use crate::Preference::Fair;
        match self {
            Request::Mutex
            | Request::Write(crate::Preference::Writer | crate::Preference::Reader) => Slot::Write,
            Request::Read(crate::Preference::Writer | crate::Preference::Reader) => Slot::Read,
            Request::Read(Fair) => Slot::Ticket {
                weight: 1,
                capacity: FAIR_RW_CAPACITY,
                resizable: false,
            },
            Request::Write(Fair) => Slot::Ticket {
                weight: FAIR_RW_CAPACITY,
                capacity: FAIR_RW_CAPACITY,
                resizable: false,
            },
            Request::FairLock => Slot::Ticket {
                weight: 1,
                capacity: 1,
                resizable: false,
            },
            Request::Semaphore { permits, capacity } => Slot::Ticket {
                weight: permits,
                capacity,
                resizable: true,
            },
        }
    }

    /// The lease lock's reader/writer policy (the ticket queue has none: it is FIFO).
    pub fn policy(self) -> Policy {
        match self {
            Request::Read(crate::Preference::Reader)
            | Request::Write(crate::Preference::Reader) => Policy::Reader,
            _ => Policy::Writer,
        }
    }

    /// The family of state the request lives in.
    pub fn family(self) -> Family {
        match self.slot() {
            Slot::Write | Slot::Read => Family::LeaseLock,
            Slot::Ticket { .. } => Family::TicketQueue,
        }
    }

    /// The claim a handle sends for this request, with a fresh token.
    pub fn claim(self, lease: Duration, heartbeat: Duration) -> Claim {
        Claim::new(self.slot(), lease, heartbeat, self.policy())
    }
}

/// A granted hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token: new for exclusive grants, the last exclusive one's for shared.
    pub fence: u64,
    /// The lease granted, counted from the store's `now` at the grant.
    pub lease: Duration,
}

/// A refused attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy {
    /// When the lease that blocks this attempt ends, if the store knows.
    pub retry_after: Option<Duration>,
    /// Waiters ahead in the ticket queue (0: head), if this claim is queued.
    pub position: Option<u64>,
    /// The store-clock instant (ms) until which this claim's queue place or waiting-writer
    /// announcement lives, if it waits. A release that hands the lock to this claim names
    /// the same instant in its wake-up, which tells the waiter the grant came after this
    /// attempt.
    pub heartbeat_until: Option<u64>,
}

/// Outcome of one acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The claim holds the lock.
    Granted(Grant),
    /// The claim does not hold it (and is queued, or announced as a waiting writer, when it
    /// asked to wait).
    Busy(Busy),
}

/// Which family of state to inspect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Writer record, readers, waiting writers.
    LeaseLock,
    /// Holders, queue, heartbeats.
    TicketQueue,
}

/// A live hold, as inspected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderState {
    /// The holder's token.
    pub token: String,
    /// Write, read, or the permits of a ticket.
    pub kind: HoldKind,
    /// Lease left, in ms.
    pub remaining_ms: u64,
}

/// The kind of a hold, as inspected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldKind {
    /// The lease lock's writer.
    Write,
    /// A lease lock reader.
    Read,
    /// Permits of a ticket queue.
    Permits(u32),
}

/// A live waiter, as inspected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterState {
    /// The waiter's token.
    pub token: String,
    /// Permits wanted (1 for a waiting writer of the lease lock).
    pub weight: u32,
    /// Ticket number (0 for the lease lock's waiting writers, which have none).
    pub ticket: u64,
    /// Heartbeat left, in ms.
    pub heartbeat_remaining_ms: u64,
}

/// The state of one lock family, read in one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The store's clock at the read, in ms.
    pub now_ms: u64,
    /// The fence counter (last exclusive grant's token).
    pub fence: u64,
    /// Permits stored by `set_permits`, if any.
    pub permits: Option<u32>,
    /// Live holds: writer first, then readers or ticket holders in store order.
    pub holders: Vec<HolderState>,
    /// Live waiters: waiting writers (by heartbeat deadline), or the queue in ticket order.
    pub waiters: Vec<WaiterState>,
}

/// A change of a ticket queue's permit count (a Semaphore's), made atomically by
/// [`Store::set_permits`]: the store reads the count in force and writes the new one in one
/// step, so concurrent relative changes from several clients all count.
///
/// A relative change starts from the count stored by an earlier `set_permits` of any client;
/// while none is stored, from its `base`: the permit count of the handle that asks (each
/// Semaphore handle follows its own count until one is stored).
///
/// ```
/// use redis_locks::testing::store::PermitChange;
/// assert_eq!(PermitChange::Add { by: 2, base: 5 }.apply(None), 7);
/// assert_eq!(PermitChange::Add { by: 2, base: 5 }.apply(Some(3)), 5);
/// assert_eq!(PermitChange::Forget { by: 4, base: 5 }.apply(Some(3)), -1); // refused
/// assert_eq!(PermitChange::Set(4).apply(Some(3)), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PermitChange {
    /// Exactly this many permits.
    Set(u32),
    /// `by` permits more.
    Add {
        /// Permits added.
        by: u32,
        /// The count to start from while none is stored (the asking handle's own).
        base: u32,
    },
    /// `by` permits fewer. Current holds stay; new grants follow the lower count.
    Forget {
        /// Permits taken away.
        by: u32,
        /// The count to start from while none is stored (the asking handle's own).
        base: u32,
    },
}

impl PermitChange {
    /// The count this change leaves when `stored` is the count stored now (`None`: none is).
    /// It may be out of range; the store then refuses the change (see [`Store::set_permits`]).
    pub fn apply(self, stored: Option<u32>) -> i64 {
        match self {
            PermitChange::Set(n) => i64::from(n),
            PermitChange::Add { by, base } => i64::from(stored.unwrap_or(base)) + i64::from(by),
            PermitChange::Forget { by, base } => i64::from(stored.unwrap_or(base)) - i64::from(by),
        }
    }
}

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

    /// Renews a live hold to `lease` from now; `Ok(false)` if the claim holds nothing live.
    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
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
    /// [`MAX_PERMITS`](crate::api::semaphore::MAX_PERMITS) permits is refused with an
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

    /// Waits until `replicas` replicas of the server holding the lock acknowledged every
    /// write made so far on this store's connection (Redis `WAIT`), at most `timeout`;
    /// returns how many did. Stores without replicas answer
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    async fn wait_replicas(
        &self,
        lock: &LockKeys,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32> {
        let _ = (lock, replicas, timeout);
        Err(crate::Error::Unsupported {
            what: "wait_replicas",
            reason: "this store has no replicas to wait for",
        })
    }

    /// The wake-up hub that delivers this store's notifications to local waiters.
    fn hub(&self) -> &Arc<WakeHub>;

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
    /// Stores that cannot make the grant atomic answer [`Error::Unsupported`](crate::Error).
    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<AcquireAll> {
        let _ = (parts, claim, now);
        Err(crate::Error::Unsupported {
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
    /// Stores without the ticket queue answer [`Error::Unsupported`](crate::Error).
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
    ) -> Result<Option<crate::api::election::LeaderInfo>> {
        let _ = (lock, now);
        Err(no_election())
    }

    /// True when one `acquire_all` may only touch the keys of one Redis Cluster hash slot:
    /// a multi-lock then sends one per slot, in slot order.
    fn one_slot_per_step(&self) -> bool {
        false
    }
}

/// The answer of a store without the ticket queue to an election step.
fn no_election() -> crate::Error {
    crate::Error::Unsupported {
        what: "election",
        reason: "this store has no ticket queue to elect a leader on",
    }
}

/// One lock of a multi-lock and the hold it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The lock.
    pub lock: LockKeys,
    /// [`Slot::Write`] (exclusive) or [`Slot::Read`] (shared); ticket slots are refused.
    pub slot: Slot,
}

/// Outcome of one [`Store::acquire_all`] attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireAll {
    /// Every part is held: its grant, in part order.
    Granted(Vec<Grant>),
    /// No part was granted.
    Busy {
        /// Index of the first busy part.
        part: usize,
        /// Why, as for a single attempt (no queue position or announcement: a multi-lock
        /// never queues).
        busy: Busy,
    },
}

/// Refuses parts an `acquire_all` cannot take: none, or a ticket slot.
pub(crate) fn check_parts(parts: &[Part]) -> Result<()> {
    if parts.is_empty() {
        return Err(crate::Error::invalid(
            "multi-lock",
            "no lock names; give at least one",
        ));
    }
    if parts.iter().any(|p| matches!(p.slot, Slot::Ticket { .. })) {
        return Err(crate::Error::invalid(
            "multi-lock",
            "only lease locks (Mutex, RwLock with writer or reader preference) can be parts",
        ));
    }
    Ok(())
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
