//! The vocabulary of the protocol: what a claim asks for (slots, requests, policies), what a
//! store answers (grants, refusals, snapshots of holders and waiters), permit changes,
//! multi-lock parts, leader info, and the limits on them. Every layer speaks it; it imports
//! only the error type and lock keys.

use std::time::Duration;

use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;

/// Largest permit count a semaphore accepts.
pub const MAX_PERMITS: u32 = 1 << 20;

/// Who goes first when readers and writers compete for an [`RwLock`](crate::RwLock).
///
/// ```
/// use redis_locks::{LockClient, Preference};
/// let client = LockClient::in_memory();
/// let fifo = client.rwlock("catalog").preference(Preference::Fair);
/// let reads_first = client.rwlock("stats").preference(Preference::Reader);
/// # drop((fifo, reads_first));
/// ```
///
/// `Writer` and `Reader` handles of one name share a writer record and read set. `Fair` keeps
/// its state in a ticket queue: while either kind holds the name, the other kind is refused
/// with [`Error::FamilyConflict`](Error::FamilyConflict) (never granted beside it), so
/// use `Fair` for every handle of a name or for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preference {
    /// The default. Once a writer waits (and keeps heartbeating), no new reader is admitted;
    /// the writer gets the lock as soon as the readers already inside leave or expire. A
    /// flood of readers cannot starve a writer.
    #[default]
    Writer,
    /// Readers join whenever no writer holds. Highest read throughput, but a steady stream of
    /// readers can starve writers indefinitely.
    Reader,
    /// One FIFO queue of readers and writers by arrival (ticket) order; consecutive readers at
    /// the head are admitted together (phase-fair). Nobody starves; the price is that a reader
    /// behind a queued writer waits even when the lock is read-held.
    Fair,
}

/// The leader of an election as the store sees it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let election = client.election("scheduler");
/// let leadership = election.campaign("worker-1").await?;
/// let info = election.leader().await?.expect("a leader");
/// assert_eq!(info.value, "worker-1");
/// assert_eq!(info.term, leadership.term());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The value the leader proclaimed last (an address, a worker id).
    pub value: String,
    /// The leader's term: the fencing token of its leadership, strictly greater than every
    /// earlier leader's of this election.
    pub term: u64,
    /// The leader's lease left when the store was read (renewed while the leader lives).
    pub time_left: Duration,
}

/// What an operator's eviction of one holder did (`LockClient::force_release_holder`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderEviction {
    /// The one live hold whose token starts with the prefix was dropped. `fence` is the
    /// fence counter now; `fence_bumped` says whether the eviction raised it (it does when no
    /// other live hold of the same family is left; shared holds that remain keep their fence).
    Evicted {
        /// The fence counter after the eviction.
        fence: u64,
        /// Whether the eviction raised the fence.
        fence_bumped: bool,
    },
    /// No live hold's token starts with the prefix: nothing changed.
    NoMatch,
    /// Several live holds' tokens start with the prefix: nothing changed.
    Ambiguous {
        /// How many matched.
        matches: usize,
    },
}

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
    /// must agree on its capacity (else [`Error::CapacityConflict`](Error)), except
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
    Read(Preference),
    /// `RwLock::write` under the given preference.
    Write(Preference),
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
        use Preference::Fair;
        match self {
            Request::Mutex | Request::Write(Preference::Writer | Preference::Reader) => Slot::Write,
            Request::Read(Preference::Writer | Preference::Reader) => Slot::Read,
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
            Request::Read(Preference::Reader) | Request::Write(Preference::Reader) => {
                Policy::Reader
            }
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
    /// The store released the claim's token where this attempt's outcome was unsure
    /// (quorum mode, where a minority granted or did not answer): the next attempt goes by a
    /// new token, since a copy of that release may still reach a server after it.
    pub token_released: bool,
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
    /// The ticket queue's capacity key holds data redis-locks did not write (another type, or
    /// a string that is no capacity): the capacity is not known. Always false for the lease
    /// lock, and in memory (which holds no foreign data).
    pub foreign_capacity: bool,
}

/// A change of a ticket queue's permit count (a Semaphore's), made atomically by
/// [`Store::set_permits`](crate::store::Store::set_permits): the store reads the count in force and writes the new one in one
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
    /// It may be out of range; the store then refuses the change (see [`Store::set_permits`](crate::store::Store::set_permits)).
    pub fn apply(self, stored: Option<u32>) -> i64 {
        match self {
            PermitChange::Set(n) => i64::from(n),
            PermitChange::Add { by, base } => i64::from(stored.unwrap_or(base)) + i64::from(by),
            PermitChange::Forget { by, base } => i64::from(stored.unwrap_or(base)) - i64::from(by),
        }
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

/// Outcome of one [`Store::acquire_all`](crate::store::Store::acquire_all) attempt.
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
        return Err(Error::invalid(
            "multi-lock",
            "no lock names; give at least one",
        ));
    }
    if parts.iter().any(|p| matches!(p.slot, Slot::Ticket { .. })) {
        return Err(Error::invalid(
            "multi-lock",
            "only lease locks (Mutex, RwLock with writer or reader preference) can be parts",
        ));
    }
    Ok(())
}

/// Whole milliseconds of `d`, saturating (the stores count in ms).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
