//! Client-side simulation check (feature `testing`), next to the script model check in
//! `tests/model.rs`. See docs/MODEL_CHECKS.md, "Client-side simulation".
//!
//! # What runs
//!
//! One proptest case is one [`Schedule`]: 2 to 6 clients, each a real [`LockClient`] with its
//! own options (lease, heartbeat, retry interval, auto-renewal), its own connection and its
//! own wake-up hub, running a script of operations (lock / try / timeout / cancel a wait /
//! read / write / acquire(n) / extend / downgrade / release / drop / hold for a while) on 1
//! or 2 lock names, each name one primitive (Mutex, RwLock with each preference, FairLock,
//! Semaphore of 2 or 3 permits).
//!
//! Hold ids (issue 29; profiles `with_hold_ids` and `across_clients`): within one client, a
//! guard is handed over to a resume of its id (`Handover`), its id resumed beside it
//! (`CoResume`, refused: one guard per hold per client) or released by id (`ReleaseById`).
//! Across clients (two processes sharing a hold id, either of which may crash): a client
//! posts a guard's id to another client's mailbox (`Give`), detaching the guard or keeping it
//! (two clients then each have a guard of one hold, which the library allows across clients),
//! and the receiver later resumes the oldest id waiting for it (`Adopt`, after waiting a while
//! for one), or releases or extends it by id with no guard of it (`ReleaseMailed`,
//! `ExtendMailed`).
//!
//! Every client talks to one shared [`MemoryStore`] (the "server") through its own [`Conn`],
//! a fault-injecting [`Store`] wrapper. Everything runs on one current-thread tokio runtime
//! with the clock paused, and the server's `now` is the same virtual clock (explicit `now`
//! on every call), so a case is a function of its schedule: tokens and jitter come from
//! `testing::seed(schedule.seed)`.
//!
//! Each client's connection behaves like one multiplexed RESP3 connection: the server
//! applies its requests in the order they were sent and its replies come back in that order
//! (a delayed one holds up those behind it), and a request that was sent is applied even if
//! the caller stops waiting for it. Faults, from each client's own lists (call `k` of a client
//! takes entry `k`; calls sent from [`FAULTS_UNTIL`] on have none):
//! - the request is delayed before the server applies it, or stalled until the next call of
//!   any client is applied (at the latest until [`FAULTS_UNTIL`]);
//! - the reply is delayed, or lost after the server applied it (the client gets a connection
//!   error, as from a response timeout);
//! - a wake-up the server publishes reaches each client on its own (the server's hub is
//!   diverted with `testing::divert`, the copies delivered with `testing::deliver`): at once
//!   (so it overtakes the delayed replies of earlier calls), late, or never. Wake-ups of one
//!   client stay in order, and one is never delivered after the reply to a call the server
//!   applied after publishing it (on one connection it could not be);
//! - a client may crash at an instant: from then on its connection applies nothing (every
//!   call hangs forever, its replies and wake-ups are never delivered) and its script is
//!   aborted; its claims on the server are left to lapse.
//!
//! # The oracle
//!
//! Checked before and after every call the server applies, after every reply the client code
//! processed (a task poked by the wrapper runs once the client yields, at the same virtual
//! instant) and after every script step, against the server read at that instant:
//! - `HeldNotHolder`: a guard with `is_held()` is a live holder of the kind it claims (write,
//!   read, or its number of permits);
//! - `Conflict`: no two conflicting guards say `is_held()` at once (a writer beside anyone,
//!   more permits than the capacity); guards of one hold (one token), in one client or in two,
//!   are one holder;
//! - `TrustPastLease`: a held guard's `valid_until()` is not later than its server deadline
//!   (exact: both count whole virtual ms, and the library keeps a drift margin of at least
//!   2 ms below the lease). Deadlines change only when a call is applied, `valid_until()`
//!   only when the client processes a reply, and the oracle runs after both, so this holds at
//!   every instant in between: a guard whose lease lapses reports `lost()` no later than its
//!   `valid_until()`;
//! - `TrustPastLease`, own deadline: a guard of a hold another client has made a call of
//!   trusts no later than the deadline its *own* client's latest successful call (grant,
//!   renewal, resume, extend, downgrade) set: it never counts another client's renewal. A call
//!   of the other client may cut that hold short (release it, downgrade it, renew it to an
//!   earlier deadline); the guard learns of it only at its next renewal (docs/GUARANTEES.md,
//!   "Several guards of one hold"), so until its own client's next successful call it is
//!   exempt from `HeldNotHolder`, the server-deadline check, `Conflict`, `SpuriousLoss` and
//!   `LostWithoutFault`, and stays bound by its own deadline, which no refused call raises: it
//!   never trusts past it, and its next renewal must fail;
//! - `LostMismatch`: `lost()` resolves at once exactly when `is_held()` is false;
//! - `DeadHoldsPastLease`: a crashed client's claim never holds on the server past
//!   one lease (the longest lease it asked for) after the later of its crash and its grant.
//!   For a hold whose id moved, only once every client that may still renew it is dead (the
//!   acquirer and each client that had a guard of it, less one that detached its guard to give
//!   the id away; a step by id renews it once, when applied): a hold
//!   now owned by a live client is not charged, one given to a client that then crashed is
//!   (the giver alive or not), from the later of the last owner's crash, the grant and the
//!   last call of it applied (a former owner's late request), for the longest lease any
//!   client asked for or the owners' heartbeat window;
//! - `LostWithoutFault`: a guard acquired from [`CLEAN_FROM`] on (after every delayed call,
//!   reply and wake-up has landed) by a live client with auto-renewal keeps `is_held()` until
//!   the client lets it go;
//! - `SpuriousLoss`: a live client's guard never says it lost its lease while its own trust
//!   (`valid_until()`) has not run out and the server still holds its claim (a renewal that
//!   gives up early, a refusal misread);
//! - `WaitTooLong`: a timed wait started from [`CLEAN_FROM`] on ends within its timeout
//!   ([`SLACK_MS`]); at [`WIND_DOWN`] every live client drops its guards and starts nothing
//!   new, and each pending wait must then be granted (or time out) within the bound
//!   [`World::wind_down`] computes, from the server's state then: `now + Σ (left + lease +
//!   step) + (waiters + 1) × step + 100 ms`, the sum over the claims on that name other than
//!   the waiters' own and the guards just dropped (crashed clients' holds and queue places,
//!   which lapse on their own: what is left of their lease or heartbeat window, plus one lease
//!   should they be handed the lock, plus one poll to notice), `step` being the longest retry
//!   interval of the schedule plus 10 ms (a lapse wakes nobody: waiters notice it by polling);
//!   a timed wait must also end by its timeout;
//! - `Leak`: once every live client has finished, no claim whose calls all ran without a
//!   fault is left on the server by a live client; a hold whose id went to another client is
//!   left to lapse when its last guard crashed or its id was never resumed, so it is a leak
//!   only once a live client sent its release;
//! - `UnexpectedError`: an operation fails with anything but a timeout, a connection error,
//!   or a lost lease (a step on a hold id: also a gone hold; `HoldInUse` only for an id of a
//!   hold this client has had, handed back while its guard is still here).
//!
//! # What it can and cannot find
//!
//! It finds client-side bugs that show as a guard trusting a lease the server does not give
//! it (hand-off windows, stale wake-ups, reordered renewals), holders that lose their lease
//! without a fault, waits that hang or overrun, claims left behind, and dead processes that
//! block others too long. It cannot find bugs in the Lua scripts (that is `tests/model.rs`),
//! in the Redis connection layer (reconnects, RESP3 pushes, subscriptions: `tests/faults*.rs`)
//! or in quorum mode, nor anything that needs two threads: one runtime thread runs everything.
//! Time is whole virtual milliseconds, so two events in the same millisecond are ordered by
//! the scheduler, not by a clock. A case replays exactly from its schedule
//! (`a_schedule_replays_exactly`); the one source of chance left is tokio's `select!` (in the
//! library's wait loop), which picks among branches ready in the same poll at random (only a
//! `--cfg tokio_unstable` build could seed it); 2 × 1000 runs showed no difference.
//! The harness itself uses `Notify` and biased `select!` only (tokio's `watch` wakes its
//! receivers in a random order).
//!
//! Planted bugs: `testing::plant(Bug::..)` puts one known client-side bug back; each
//! `finds_planted_*` test searches targeted schedules and requires a counterexample of that
//! bug's kind.

#[cfg(not(feature = "testing"))]
compile_error!(
    "the simulation needs the `testing` feature: run `cargo nextest run --all-targets \
     --all-features` (or `cargo test --all-features`)"
);

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard};
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::{Union, ValueTree};
use proptest::test_runner::{
    Config, FailurePersistence, FileFailurePersistence, RngAlgorithm, TestCaseError, TestError,
    TestRng, TestRunner,
};
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, Family, HoldKind, MemoryStore, Snapshot, Store, FAIR_RW_CAPACITY,
};
use redis_locks::testing::{self, Bug, WakeHub};
use redis_locks::{
    Error, FairLockGuard, HoldId, LockClient, MutexGuard, Permit, Preference, ReadGuard, Result,
    WriteGuard,
};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

mod support;

use support::sim_store::{
    self, on_paused_clock, ready, ready_now, Call, Fault, Reply, Request, SimConn,
};
use support::time::ms;
use support::{env_u32, serial};

/// Schedules of the main check when `SIM_CASES` is not set.
const DEFAULT_CASES: u32 = 2_000;
/// The server's clock at virtual instant 0 (far from zero, as in `tests/model.rs`).
const BASE_MS: u64 = 1_000_000;
/// Calls sent and wake-ups published from this virtual instant on run without faults.
const FAULTS_UNTIL: u64 = 2_000;
/// The longest injected delay (request, reply, wake-up).
const MAX_DELAY: u64 = 400;
/// From here on every faulty call, reply and wake-up has landed: a stall ends at
/// `FAULTS_UNTIL`, a request or reply delay or a late wake-up lasts at most `MAX_DELAY`.
const CLEAN_FROM: u64 = FAULTS_UNTIL + 2 * MAX_DELAY + 200;
/// Live clients drop their guards and start nothing new; pending waits must then end.
const WIND_DOWN: u64 = CLEAN_FROM + 1_500;
/// How much later than its timeout a timed wait may end, without faults (ms).
const SLACK_MS: u64 = 5;
/// An unbounded wait by a client that holds something becomes a wait of this long, so that
/// live clients cannot deadlock each other (a client in an unbounded wait holds nothing).
const LOCK_WHILE_HOLDING_MS: u64 = 500;

const LEASES: &[u64] = &[30, 60, 100, 150, 300, 600, 1_000, 30_000];
/// Heartbeat windows; 0 leaves the option unset (the default: the lease, at most 5 s).
const HEARTBEATS: &[u64] = &[0, 60, 100, 200, 300, 600, 1_000, 5_000];
const RETRIES: &[u64] = &[50, 100, 300, 1_000];
const DELAYS: &[u64] = &[1, 5, 20, 50, 100, 200, 300, MAX_DELAY];

// ---- schedules --------------------------------------------------------------------------

/// The primitive behind a lock name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    Mutex,
    RwWriter,
    RwReader,
    RwFair,
    FairLock,
    Semaphore(u32),
}

impl Prim {
    fn family(self) -> Family {
        match self {
            Prim::Mutex | Prim::RwWriter | Prim::RwReader => Family::LeaseLock,
            _ => Family::TicketQueue,
        }
    }

    /// Permits of the ticket queue (unused for the lease lock).
    fn capacity(self) -> u64 {
        match self {
            Prim::RwFair => u64::from(FAIR_RW_CAPACITY),
            Prim::Semaphore(n) => u64::from(n),
            _ => 1,
        }
    }

    fn preference(self) -> Preference {
        match self {
            Prim::RwReader => Preference::Reader,
            Prim::RwFair => Preference::Fair,
            _ => Preference::Writer,
        }
    }
}

/// One step of a client's script. `name` and `guard` are taken modulo the names and the
/// client's current guards (oldest first), so shrinking keeps steps meaningful.
#[derive(Clone, Debug)]
enum Op {
    /// Wait as long as it takes (`lock`, `write`/`read`, `acquire_many`); while the client
    /// holds something, a wait of [`LOCK_WHILE_HOLDING_MS`].
    Lock {
        name: usize,
        want: u8,
    },
    /// One attempt (`try_lock`, `try_write`/`try_read`, `try_acquire_many`).
    Try {
        name: usize,
        want: u8,
    },
    /// `*_timeout` (a semaphore asks for one permit).
    Timeout {
        name: usize,
        want: u8,
        ms: u64,
    },
    /// An unbounded wait whose future is dropped after `after` ms.
    Cancel {
        name: usize,
        want: u8,
        after: u64,
    },
    /// Keep what is held for a while.
    Hold(u64),
    Extend {
        guard: usize,
        lease: u64,
    },
    /// `extend` from another task than the one that holds the guard.
    ExtendElsewhere {
        guard: usize,
        lease: u64,
    },
    /// `WriteGuard::downgrade` (other guards: nothing).
    Downgrade {
        guard: usize,
    },
    /// `WriteGuard::downgrade`, and `release_all()` on the same client `after` ms into it
    /// (other guards: `release_all()` alone).
    DowngradeRacingReleaseAll {
        guard: usize,
        after: u64,
    },
    Release {
        guard: usize,
    },
    Drop {
        guard: usize,
    },
    /// `detach()` the guard, then resume its id on this client (a handover).
    Handover {
        guard: usize,
    },
    /// Resume the guard's id while the guard lives: refused (one guard per hold per client).
    CoResume {
        guard: usize,
    },
    /// `release_hold(&guard.hold_id())`, keeping the guard.
    ReleaseById {
        guard: usize,
    },
    /// Post the guard's id to another client's mailbox (`to` modulo the other clients):
    /// `keep` false detaches the guard (a hand-over for good), true keeps it (two clients then
    /// each may have a guard of one hold).
    Give {
        guard: usize,
        to: usize,
        keep: bool,
    },
    /// Resume the oldest id waiting in this client's mailbox, after waiting up to `wait` ms
    /// for one to arrive.
    Adopt {
        wait: u64,
    },
    /// `release_hold` of the oldest id in this client's mailbox (no guard of it here).
    ReleaseMailed,
    /// `extend_hold` of the oldest id in this client's mailbox, which stays there.
    ExtendMailed {
        lease: u64,
    },
}

/// What happens to one wake-up on its way to one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Push {
    Now,
    Late(u64),
    Lost,
}

#[derive(Clone, Debug)]
struct ClientSpec {
    /// Virtual ms at which the script starts.
    start: u64,
    lease: u64,
    heartbeat: u64,
    retry: u64,
    auto_renew: bool,
    /// Virtual ms of the crash, if any.
    crash: Option<u64>,
    ops: Vec<Op>,
    /// Faults of this client's calls, in call order (then none).
    faults: Vec<Fault>,
    /// Fates of the wake-ups delivered to this client, in order (then `Now`).
    pushes: Vec<Push>,
    /// How long this client's subscriptions take, in order (then at once; none started
    /// from [`FAULTS_UNTIL`] on stalls). Empty: an in-process hub, always subscribed.
    subscribe_stalls: Vec<u64>,
}

#[derive(Clone, Debug)]
struct Schedule {
    seed: u64,
    names: Vec<Prim>,
    clients: Vec<ClientSpec>,
}

/// Which schedules a strategy makes.
#[derive(Clone, Debug)]
struct Profile {
    prims: Vec<Prim>,
    /// Allowed (lease, heartbeat) pairs.
    lease_heartbeat: Vec<(u64, u64)>,
    manual_renew: bool,
    waits: bool,
    extends: bool,
    downgrades: bool,
    /// Downgrades racing `release_all()` (with `downgrades`).
    release_all: bool,
    /// Subscriptions that take long or stall (a hub like a Redis connection's).
    subscribe_stalls: bool,
    /// `extend`s from helper runtimes that end (with `extends`).
    helper_runtimes: bool,
    request_faults: bool,
    reply_faults: bool,
    lost_replies: bool,
    push_faults: bool,
    crashes: bool,
    /// Hold ids: hand a guard over to a resume of its id, resume an id beside its guard,
    /// release by id.
    hold_ids: bool,
    /// Hold ids across clients: give a guard's id to another client (detached or kept),
    /// which resumes, releases or extends it by id later.
    shared_ids: bool,
    /// The share of gives that keep the guard (with `shared_ids`).
    keeps: f64,
}

fn pairs(keep: impl Fn(u64, u64) -> bool) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &l in LEASES {
        for &h in HEARTBEATS {
            if keep(l, h) {
                out.push((l, h));
            }
        }
    }
    out
}

const ALL_PRIMS: &[Prim] = &[
    Prim::Mutex,
    Prim::RwWriter,
    Prim::RwReader,
    Prim::RwFair,
    Prim::FairLock,
    Prim::Semaphore(2),
    Prim::Semaphore(3),
];

/// Primitives whose release hands the lock to a waiter in a wake-up.
const HAND_OFF_PRIMS: &[Prim] = &[
    Prim::Mutex,
    Prim::RwWriter,
    Prim::RwFair,
    Prim::FairLock,
    Prim::Semaphore(2),
];

impl Profile {
    /// Everything, and hold ids: the check of detach, resume and release by id.
    fn with_hold_ids() -> Profile {
        Profile {
            hold_ids: true,
            ..Profile::full()
        }
    }

    /// Everything, and hold ids within and across clients: the check of ids shared by two
    /// clients, one of which may crash.
    fn across_clients() -> Profile {
        Profile {
            hold_ids: true,
            shared_ids: true,
            ..Profile::full()
        }
    }

    /// Everything, and hold ids across clients only: every resume is an [`Op::Adopt`].
    fn adopt_only() -> Profile {
        Profile {
            shared_ids: true,
            ..Profile::full()
        }
    }

    /// Everything: the main check.
    fn full() -> Profile {
        Profile {
            prims: ALL_PRIMS.to_vec(),
            lease_heartbeat: pairs(|_, _| true),
            manual_renew: true,
            waits: true,
            extends: true,
            downgrades: true,
            release_all: true,
            subscribe_stalls: true,
            helper_runtimes: true,
            request_faults: true,
            reply_faults: true,
            lost_replies: true,
            push_faults: true,
            crashes: true,
            hold_ids: false,
            shared_ids: false,
            keeps: 0.3,
        }
    }

    /// Nothing but hand-offs and waits on [`HAND_OFF_PRIMS`], with the given (lease,
    /// heartbeat) pairs: the base of the focused profiles below.
    fn quiet(lease_heartbeat: Vec<(u64, u64)>) -> Profile {
        Profile {
            prims: HAND_OFF_PRIMS.to_vec(),
            lease_heartbeat,
            manual_renew: false,
            waits: true,
            extends: false,
            downgrades: false,
            release_all: false,
            subscribe_stalls: false,
            helper_runtimes: false,
            request_faults: false,
            reply_faults: false,
            lost_replies: false,
            push_faults: false,
            crashes: false,
            hold_ids: false,
            shared_ids: false,
            keeps: 0.3,
        }
    }

    /// Hand-offs with a lease shorter than the heartbeat, nothing else.
    fn hand_off() -> Profile {
        Profile {
            manual_renew: true,
            ..Profile::quiet(pairs(|l, h| l < h))
        }
    }

    /// Hand-offs and late calls and wake-ups, with leases at least the heartbeat
    /// (so defect 1 cannot show) and no `extend` (so defect 3 cannot).
    fn stale_grant() -> Profile {
        Profile {
            request_faults: true,
            reply_faults: true,
            lost_replies: true,
            push_faults: true,
            ..Profile::quiet(pairs(|l, h| l >= h && h <= 300))
        }
    }

    /// RwLocks written, downgraded and released all at once, with late requests and replies.
    fn downgrade_race() -> Profile {
        Profile {
            prims: vec![Prim::RwWriter, Prim::RwReader, Prim::RwFair],
            waits: false,
            downgrades: true,
            release_all: true,
            request_faults: true,
            reply_faults: true,
            ..Profile::quiet(pairs(|l, _| l >= 300))
        }
    }

    /// Waits whose subscriptions take long or stall, nothing else.
    fn stalled_subscriptions() -> Profile {
        Profile {
            subscribe_stalls: true,
            ..Profile::quiet(pairs(|l, _| l <= 1_000))
        }
    }

    /// Crashed waiters with short leases and the default heartbeat (the bound holds
    /// with default options; an explicit heartbeat longer than the lease is allowed to block
    /// for that heartbeat), no other fault.
    fn dead_waiter() -> Profile {
        Profile {
            crashes: true,
            ..Profile::quiet(pairs(|l, h| h == 0 && l <= 300))
        }
    }
}

/// Virtual ms a subscription takes, when a profile stalls them: at once, slow, or stalled
/// past the end of the schedule.
const SUBSCRIBE_STALLS: &[u64] = &[0, 0, 40, 300, 60_000];

/// The client's wake-up hub: in process, or with subscriptions that take as long as its
/// schedule says.
fn hub_for(spec: &ClientSpec, start: Instant) -> Arc<WakeHub> {
    if spec.subscribe_stalls.is_empty() {
        return testing::local_hub();
    }
    let stalls = spec.subscribe_stalls.clone();
    let calls = AtomicU64::new(0);
    testing::stalling_hub(move |_| {
        let k = calls.fetch_add(1, Ordering::Relaxed) as usize;
        if start.elapsed() >= ms(FAULTS_UNTIL) {
            return Duration::ZERO;
        }
        ms(stalls.get(k).copied().unwrap_or(0))
    })
}

fn pick(values: &'static [u64]) -> impl Strategy<Value = u64> {
    prop::sample::select(values)
}

fn op(p: &Profile) -> impl Strategy<Value = Op> {
    let name = 0..2usize;
    let guard = 0..4usize;
    let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (
            2,
            (name.clone(), any::<u8>())
                .prop_map(|(name, want)| Op::Try { name, want })
                .boxed(),
        ),
        (
            3,
            pick(&[0, 10, 50, 100, 200, 400, 800])
                .prop_map(Op::Hold)
                .boxed(),
        ),
        (
            2,
            guard
                .clone()
                .prop_map(|guard| Op::Release { guard })
                .boxed(),
        ),
        (
            1,
            guard.clone().prop_map(|guard| Op::Drop { guard }).boxed(),
        ),
    ];
    if p.waits {
        arms.push((
            4,
            (name.clone(), any::<u8>())
                .prop_map(|(name, want)| Op::Lock { name, want })
                .boxed(),
        ));
        arms.push((
            2,
            (name.clone(), any::<u8>(), pick(&[20, 100, 300, 800]))
                .prop_map(|(name, want, ms)| Op::Timeout { name, want, ms })
                .boxed(),
        ));
        arms.push((
            1,
            (name, any::<u8>(), pick(&[0, 20, 100, 300]))
                .prop_map(|(name, want, after)| Op::Cancel { name, want, after })
                .boxed(),
        ));
    }
    if p.extends {
        arms.push((
            3,
            (guard.clone(), pick(&[10, 30, 60, 100, 300, 1_000]))
                .prop_map(|(guard, lease)| Op::Extend { guard, lease })
                .boxed(),
        ));
    }
    if p.extends && p.helper_runtimes {
        arms.push((
            2,
            (guard.clone(), pick(&[30, 100, 300, 1_000]))
                .prop_map(|(guard, lease)| Op::ExtendElsewhere { guard, lease })
                .boxed(),
        ));
    }
    if p.downgrades {
        arms.push((
            1,
            guard
                .clone()
                .prop_map(|guard| Op::Downgrade { guard })
                .boxed(),
        ));
    }
    if p.hold_ids {
        arms.push((
            2,
            guard
                .clone()
                .prop_map(|guard| Op::Handover { guard })
                .boxed(),
        ));
        arms.push((
            1,
            guard
                .clone()
                .prop_map(|guard| Op::CoResume { guard })
                .boxed(),
        ));
        arms.push((
            1,
            guard
                .clone()
                .prop_map(|guard| Op::ReleaseById { guard })
                .boxed(),
        ));
    }
    if p.shared_ids {
        arms.push((
            5,
            (guard.clone(), 0..5usize, prop::bool::weighted(p.keeps))
                .prop_map(|(guard, to, keep)| Op::Give { guard, to, keep })
                .boxed(),
        ));
        arms.push((
            12,
            pick(&[50, 300, 1_000, 3_000])
                .prop_map(|wait| Op::Adopt { wait })
                .boxed(),
        ));
        arms.push((1, Just(Op::ReleaseMailed).boxed()));
        arms.push((
            2,
            pick(&[10, 30, 100, 300, 1_000])
                .prop_map(|lease| Op::ExtendMailed { lease })
                .boxed(),
        ));
    }
    if p.downgrades && p.release_all {
        arms.push((
            1,
            (guard, pick(&[0, 1, 5, 20, 100]))
                .prop_map(|(guard, after)| Op::DowngradeRacingReleaseAll { guard, after })
                .boxed(),
        ));
    }
    Union::new_weighted(arms)
}

fn fault(p: &Profile) -> BoxedStrategy<Fault> {
    let mut arms: Vec<(u32, BoxedStrategy<Fault>)> = vec![(6, Just(Fault::None).boxed())];
    if p.request_faults {
        arms.push((3, pick(DELAYS).prop_map(Fault::RequestDelay).boxed()));
        arms.push((1, Just(Fault::Stall).boxed()));
    }
    if p.reply_faults {
        arms.push((2, pick(DELAYS).prop_map(Fault::ReplyDelay).boxed()));
    }
    if p.lost_replies {
        arms.push((1, pick(DELAYS).prop_map(Fault::LostReply).boxed()));
    }
    if arms.len() == 1 {
        return Just(Fault::None).boxed();
    }
    Union::new_weighted(arms).boxed()
}

fn push(p: &Profile) -> BoxedStrategy<Push> {
    if !p.push_faults {
        return Just(Push::Now).boxed();
    }
    prop_oneof![
        4 => Just(Push::Now),
        2 => pick(DELAYS).prop_map(Push::Late),
        1 => Just(Push::Lost),
    ]
    .boxed()
}

fn client(p: &Profile) -> impl Strategy<Value = ClientSpec> {
    let renew = if p.manual_renew {
        prop::bool::weighted(0.85).boxed()
    } else {
        Just(true).boxed()
    };
    let crash = if p.crashes {
        prop::option::weighted(0.35, 0..3_000u64).boxed()
    } else {
        Just(None).boxed()
    };
    let faults = if p.request_faults || p.reply_faults {
        prop::collection::vec(fault(p), 0..24).boxed()
    } else {
        Just(Vec::new()).boxed()
    };
    let pushes = if p.push_faults {
        prop::collection::vec(push(p), 0..12).boxed()
    } else {
        Just(Vec::new()).boxed()
    };
    let stalls = if p.subscribe_stalls {
        prop::collection::vec(pick(SUBSCRIBE_STALLS), 1..6).boxed()
    } else {
        Just(Vec::new()).boxed()
    };
    (
        prop_oneof![3 => Just(0u64), 1 => 0..3_600u64],
        prop::sample::select(p.lease_heartbeat.clone()),
        pick(RETRIES),
        renew,
        crash,
        prop::collection::vec(op(p), 1..9),
        (faults, pushes, stalls),
    )
        .prop_map(
            |(
                start,
                (lease, heartbeat),
                retry,
                auto_renew,
                crash,
                ops,
                (faults, pushes, stalls),
            )| {
                ClientSpec {
                    start,
                    lease,
                    heartbeat,
                    retry,
                    auto_renew,
                    crash,
                    ops,
                    faults,
                    pushes,
                    subscribe_stalls: stalls,
                }
            },
        )
}

fn schedule(p: &Profile) -> impl Strategy<Value = Schedule> {
    (
        any::<u64>(),
        prop::collection::vec(prop::sample::select(p.prims.clone()), 1..=2),
        prop::collection::vec(client(p), 2..=6),
    )
        .prop_map(|(seed, names, clients)| Schedule {
            seed,
            names,
            clients,
        })
}

// ---- guards of every primitive --------------------------------------------------------------

enum AnyGuard {
    Mutex(MutexGuard),
    Write(WriteGuard),
    Read(ReadGuard),
    Fair(FairLockGuard),
    Permit(Permit),
}

macro_rules! each {
    ($guard:expr, $g:ident => $e:expr) => {
        match $guard {
            AnyGuard::Mutex($g) => $e,
            AnyGuard::Write($g) => $e,
            AnyGuard::Read($g) => $e,
            AnyGuard::Fair($g) => $e,
            AnyGuard::Permit($g) => $e,
        }
    };
}

impl AnyGuard {
    fn is_held(&self) -> bool {
        each!(self, g => g.is_held())
    }
    fn valid_until(&self) -> Instant {
        each!(self, g => g.valid_until())
    }
    fn token(&self) -> String {
        each!(self, g => g.token())
    }
    /// Whether `lost()` resolves on its first poll.
    fn lost_now(&self) -> bool {
        each!(self, g => ready_now(g.lost()).is_some())
    }
    async fn extend(&mut self, lease: Duration) -> Result<bool> {
        each!(self, g => g.extend(lease).await)
    }
    async fn release(self) -> Result<bool> {
        each!(self, g => g.release().await)
    }
    fn hold_id(&self) -> HoldId {
        each!(self, g => g.hold_id())
    }
    fn detach(self) -> HoldId {
        each!(self, g => g.detach())
    }
    /// Which guard type this is, for [`resume_kind`].
    fn probe(&self) -> u8 {
        match self {
            AnyGuard::Mutex(_) => 0,
            AnyGuard::Write(_) => 1,
            AnyGuard::Read(_) => 2,
            AnyGuard::Fair(_) => 3,
            AnyGuard::Permit(_) => 4,
        }
    }
}

/// A token as the trace shows it: its counter (tokens are the seed's prefix and a counter).
fn short(token: &str) -> String {
    match u64::from_str_radix(&token[token.len().saturating_sub(16)..], 16) {
        Ok(n) => format!("#{n}"),
        Err(_) => token.to_owned(),
    }
}

// ---- the world: server, clients, guards, and the oracle --------------------------------------

/// What the oracle checks; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    HeldNotHolder,
    Conflict,
    TrustPastLease,
    LostMismatch,
    DeadHoldsPastLease,
    LostWithoutFault,
    SpuriousLoss,
    WaitTooLong,
    Leak,
    UnexpectedError,
}

const ALL_CLASSES: &[Class] = &[
    Class::HeldNotHolder,
    Class::Conflict,
    Class::TrustPastLease,
    Class::LostMismatch,
    Class::DeadHoldsPastLease,
    Class::LostWithoutFault,
    Class::SpuriousLoss,
    Class::WaitTooLong,
    Class::Leak,
    Class::UnexpectedError,
];

/// The safety classes: a guard trusting what the server does not give it.
const SAFETY: &[Class] = &[Class::HeldNotHolder, Class::Conflict, Class::TrustPastLease];

#[derive(Clone, Debug)]
struct Violation {
    class: Class,
    /// Virtual ms.
    at: u64,
    what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at {} ms: {}", self.class, self.at, self.what)
    }
}

/// How a guard was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// By the reply to an attempt.
    Reply,
    /// By a wake-up that carried the grant (`token=fence`); `stale`: an attempt of the same
    /// claim was refused by the server after that grant was made.
    HandOff { stale: bool },
    /// By `downgrade`.
    Downgrade,
    /// By a resume of a hold id.
    Resume,
    /// By a resume of a hold id another client gave this one ([`Op::Adopt`]).
    Adopt { from: usize },
}

/// A hold id on its way from one client to another ([`Op::Give`]), in the receiver's mailbox.
#[derive(Clone)]
struct Mail {
    from: usize,
    id: HoldId,
    token: String,
    name: usize,
    kind: HoldKind,
    /// The guard type, for [`resume_kind`].
    probe: u8,
}

struct Entry {
    client: usize,
    name: usize,
    kind: HoldKind,
    token: String,
    guard: AnyGuard,
    /// Acquired from `CLEAN_FROM` on with auto-renewal: must stay held.
    clean: bool,
    origin: Origin,
    /// `valid_until()` when the oracle last saw the guard held: a lost guard's own
    /// `valid_until()` stops at its loss, and a loss is spurious if this trust was still left.
    trust: std::cell::Cell<Instant>,
}

impl Entry {
    fn describe(&self, id: u64) -> String {
        format!(
            "client {} guard g{id} {:?} on n{} (claim {}, {:?})",
            self.client,
            self.kind,
            self.name,
            short(&self.token),
            self.origin
        )
    }
}

/// What the wrappers saw of one claim token.
struct TokenInfo {
    /// The client that acquired it (made its first call).
    client: usize,
    name: usize,
    /// The longest lease asked for (acquire or extend), by any client.
    lease_max: u64,
    /// Every client that sent a call of it.
    callers: BTreeSet<usize>,
    /// The clients that may still renew it: the acquirer (its claim, waiting or granted) and
    /// each client a guard of it was registered in, less one that detached its guard (until a
    /// guard of it is registered there again). A call of another client (a step by id) renews
    /// it once, when applied: `last_applied` covers it.
    owners: BTreeSet<usize>,
    /// Virtual ms of the latest call of it the server applied (from any client).
    last_applied: u64,
    /// Its id went to another client ([`Op::Give`]).
    shared: bool,
    /// The latest live client that sent a release of it.
    released_by: Option<usize>,
    /// Per client with a stake in it (once a second client made a call of it): the hold the
    /// server had for it after that client's latest successful call (a grant, a renewal, a
    /// resume, an extend, a downgrade), as (kind, deadline in server ms); for the acquirer,
    /// first the hold just before the other client's first call. All that client's guard of
    /// it may trust: never another client's renewals.
    own: BTreeMap<usize, Option<(HoldKind, u64)>>,
    /// Clients whose own hold a call of another client cut short (released it, downgraded it,
    /// or renewed it to an earlier deadline) before its own deadline, until their next
    /// successful call: their guard learns it at its next renewal (docs/GUARANTEES.md,
    /// "Several guards of one hold").
    cut: BTreeSet<usize>,

    /// A call of this claim had a fault.
    faulted: bool,
    /// Virtual ms since which it holds on the server (while it does).
    holder_since: Option<u64>,
    /// The last applied attempt was granted.
    last_granted: bool,
    /// A wake-up carried a grant for it (virtual ms of the publication).
    handed_at: Option<u64>,
    /// An attempt was refused after that hand-off.
    refused_after_hand_off: bool,
}

struct WaitState {
    name: usize,
    started: u64,
    /// When a timed wait (or a cancel) gives up, virtual ms.
    limit: Option<u64>,
    /// Set at wind-down: the wait must be over by then.
    bound: Option<u64>,
}

struct ClientState {
    hub: Arc<WakeHub>,
    faults: Vec<Fault>,
    pushes: Vec<Push>,
    pushes_used: usize,
    retry: u64,
    auto_renew: bool,
    /// The heartbeat window set (0: the default).
    heartbeat: u64,
    dead_at: Option<u64>,
    finished: bool,
    wait: Option<WaitState>,
    /// The token of the client's latest acquire call (its current wait).
    acquiring: Option<String>,
    /// When the client's latest `release_all()` started (virtual ms).
    released_all: Option<u64>,
    /// Wake-ups on their way, in publication order: (step that published it, virtual ms
    /// when due, channel, message).
    push_queue: VecDeque<(u64, u64, String, String)>,
    /// Replies the connection delivered.
    replied: u64,
    /// Requests sent on the connection.
    sent: u64,
}

struct NameInfo {
    keys: LockKeys,
    prim: Prim,
}

struct World {
    start: Instant,
    /// The schedule has no fault at all (no late or lost call, reply or wake-up, no stalled
    /// subscription, no crash): every auto-renewed guard must stay held, from the start.
    fault_free: bool,
    server: MemoryStore,
    names: Vec<NameInfo>,
    clients: Vec<ClientState>,
    guards: BTreeMap<u64, Entry>,
    next_guard: u64,
    tokens: BTreeMap<String, TokenInfo>,
    /// Tokens whose hold a guard or a release by id let go of: another guard of the same
    /// hold (a resumed id, in this client or another) is lost with it, by design, while the
    /// release is on its way.
    let_go: BTreeSet<String>,
    /// Per client: the hold ids other clients gave it, oldest first ([`Op::Give`]).
    mailboxes: Vec<VecDeque<Mail>>,
    focus: Vec<Class>,
    violations: Vec<Violation>,
    /// (class, guard or client) already reported.
    reported: BTreeSet<(Class, u64)>,
    /// A violation of a focus class was found: the case stops.
    halted: bool,
    /// Clients finished or crashed.
    finished: usize,
    /// Told when `halted`, `finished` or `stopping` change, or a mailbox gets an id.
    events: Arc<Notify>,
    trace: Option<Vec<String>>,
    stopping: bool,
    /// Steps applied so far.
    seq: u64,
}

impl World {
    /// Delivers the wake-ups of `client` that are due, or published by a step before
    /// `published_before`, in order.
    fn pump(&mut self, client: usize, published_before: u64) {
        let now = self.vms();
        if self.dead(client) {
            self.clients[client].push_queue.clear();
            return;
        }
        loop {
            let state = &mut self.clients[client];
            match state.push_queue.front() {
                Some(&(seq, due, _, _)) if due <= now || seq < published_before => {}
                _ => break,
            }
            let Some((_, due, channel, message)) = state.push_queue.pop_front() else {
                break;
            };
            testing::deliver(&state.hub, &channel, &message);
            let m = short_message(&message);
            let late = if due > now {
                " (before a later reply)"
            } else {
                ""
            };
            self.log(|| format!("c{client} wake-up {m}{late}"));
        }
    }

    /// Virtual ms since the start.
    fn vms(&self) -> u64 {
        (Instant::now() - self.start).as_millis() as u64
    }

    fn server_ms(&self) -> u64 {
        BASE_MS + self.vms()
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        let t = self.vms();
        if let Some(trace) = self.trace.as_mut() {
            trace.push(format!("{t:>6} {}", line()));
        }
    }

    fn report(&mut self, class: Class, key: u64, what: String) {
        if !self.reported.insert((class, key)) {
            return;
        }
        let v = Violation {
            class,
            at: self.vms(),
            what,
        };
        self.log(|| format!("VIOLATION {v}"));
        if self.focus.contains(&class) {
            self.halted = true;
            self.events.notify_waiters();
        }
        self.violations.push(v);
    }

    fn name_of(&self, lock: &LockKeys) -> usize {
        self.names
            .iter()
            .position(|n| n.keys.name() == lock.name())
            .expect("a lock of the schedule")
    }

    fn snapshot(&self, name: usize, now: u64) -> Snapshot {
        let n = &self.names[name];
        ready(self.server.inspect(&n.keys, n.prim.family(), Some(now))).expect("inspect")
    }

    fn dead(&self, client: usize) -> bool {
        self.clients[client].dead_at.is_some()
    }

    /// The fault of call `index` of `client`, sent now.
    fn fault(&self, client: usize, index: usize) -> Fault {
        if self.vms() >= FAULTS_UNTIL {
            return Fault::None;
        }
        self.clients[client]
            .faults
            .get(index)
            .copied()
            .unwrap_or(Fault::None)
    }

    /// Records a call of `token` by `client` (live or not: a crashed client's calls are
    /// sent, never applied).
    fn note(&mut self, client: usize, name: usize, token: &str, lease: u64, faulted: bool) {
        let live = !self.dead(client);
        let info = self
            .tokens
            .entry(token.to_owned())
            .or_insert_with(|| TokenInfo {
                client,
                name,
                lease_max: 0,
                callers: BTreeSet::new(),
                owners: BTreeSet::new(),
                last_applied: 0,
                shared: false,
                released_by: None,
                own: BTreeMap::new(),
                cut: BTreeSet::new(),
                faulted: false,
                holder_since: None,
                last_granted: false,
                handed_at: None,
                refused_after_hand_off: false,
            });
        info.lease_max = info.lease_max.max(lease);
        info.faulted |= faulted;
        info.callers.insert(client);
        if live && client == info.client {
            info.owners.insert(client);
        }
    }

    /// `client` gave up its guard of `token` without a release (`detach()`): it renews the
    /// hold no more (a request already sent may still land).
    fn detached(&mut self, client: usize, token: &str) {
        if let Some(info) = self.tokens.get_mut(token) {
            info.owners.remove(&client);
        }
    }

    /// A live `client` sent a release of `token`: a guard of it in another client loses its
    /// lease by design.
    fn released(&mut self, client: usize, token: &str) {
        if self.dead(client) {
            return;
        }
        if let Some(info) = self.tokens.get_mut(token) {
            info.released_by = Some(client);
            if info.shared {
                self.let_go.insert(token.to_owned());
            }
        }
    }

    /// The hold the server has for `token` on lock `name` at `now` (server ms): its kind and
    /// deadline.
    fn hold_of(&self, name: usize, token: &str, now: u64) -> Option<(HoldKind, u64)> {
        let snap = self.snapshot(name, now);
        snap.holders
            .iter()
            .find(|h| h.token == token)
            .map(|h| (h.kind, now + h.remaining_ms))
    }

    /// Before a call of `client` on `token` is applied: when it is the first call of another
    /// client than the acquirer, the acquirer's own hold is what the server has now (all of
    /// it the acquirer's doing so far).
    fn before_call(&mut self, client: usize, token: &str) {
        let Some(info) = self.tokens.get(token) else {
            return;
        };
        if client == info.client || !info.own.is_empty() {
            return;
        }
        let (acquirer, name) = (info.client, info.name);
        let hold = self.hold_of(name, token, self.server_ms());
        if let Some(info) = self.tokens.get_mut(token) {
            info.own.insert(acquirer, hold);
        }
    }

    /// After a call of `client` on `token` was applied (`renewed`: it granted or renewed the
    /// hold): follows each client's own hold, and marks the clients whose own hold it cut
    /// short.
    fn after_call(&mut self, client: usize, token: &str, renewed: bool) {
        let vms = self.vms();
        let now = self.server_ms();
        let Some(info) = self.tokens.get(token) else {
            return;
        };
        let shared = !info.own.is_empty();
        let after = if shared {
            self.hold_of(info.name, token, now)
        } else {
            None
        };
        let Some(info) = self.tokens.get_mut(token) else {
            return;
        };
        info.last_applied = vms;
        if !shared {
            return;
        }
        if renewed {
            info.own.insert(client, after);
            info.cut.remove(&client);
        }
        let cut: Vec<usize> = info
            .own
            .iter()
            .filter(|&(&other, _)| other != client && !info.cut.contains(&other))
            .filter_map(|(&other, own)| {
                let (kind, deadline) = (*own)?;
                let short = after.is_none_or(|(k, d)| k != kind || d < deadline);
                (deadline > now && short).then_some(other)
            })
            .collect();
        info.cut.extend(cut.iter().copied());
        for other in cut {
            let t = short(token);
            self.log(|| format!("c{client}'s call cuts c{other}'s own hold of {t} short"));
        }
    }

    /// Records the outcome of an applied attempt.
    fn attempted(&mut self, token: &str, granted: bool) {
        if let Some(info) = self.tokens.get_mut(token) {
            info.last_granted = granted;
            if !granted && info.handed_at.is_some() {
                info.refused_after_hand_off = true;
            }
        }
    }

    /// Follows the holders of `name` after a call was applied; checks crashed clients'
    /// claims against their lease (defect 8).
    fn observe(&mut self, name: usize) {
        let now = self.server_ms();
        let snap = self.snapshot(name, now);
        let live: BTreeMap<&str, u64> = snap
            .holders
            .iter()
            .map(|h| (h.token.as_str(), now + h.remaining_ms))
            .collect();
        let mut late = Vec::new();
        for (token, info) in self.tokens.iter_mut().filter(|(_, i)| i.name == name) {
            match live.get(token.as_str()) {
                Some(&deadline) => {
                    let since = *info.holder_since.get_or_insert(now - BASE_MS);
                    // Charged once every client that may renew it is dead (a hold handed to a
                    // live client is not; one handed to a client that crashed is, the giver
                    // alive or not), from the last crash or the last call applied (a late
                    // request of a former owner), whichever is later.
                    let deaths: Option<Vec<(u64, usize)>> = info
                        .owners
                        .iter()
                        .map(|&c| Some((self.clients[c].dead_at?, c)))
                        .collect();
                    if let Some(&(died, client)) = deaths.as_ref().and_then(|d| d.iter().max()) {
                        let bound = info
                            .owners
                            .iter()
                            .map(|&c| self.clients[c].heartbeat)
                            .fold(info.lease_max, u64::max);
                        let from = died.max(since).max(info.last_applied);
                        let allowed = BASE_MS + from + bound;
                        if deadline > allowed {
                            late.push((client, token.clone(), since, died, deadline, bound));
                        }
                    }
                }
                None => info.holder_since = None,
            }
        }
        for (client, token, since, died, deadline, bound) in late {
            let owners = &self.tokens[&token].owners;
            self.report(
                Class::DeadHoldsPastLease,
                client as u64,
                format!(
                    "client {client} crashed at {died} ms (the last of its owners {owners:?}); \
                     its claim {} holds n{name} since {since} ms until {} ms, past its bound \
                     ({bound} ms: the longer of its leases and the owners' heartbeat windows) \
                     after the later of the crash, the grant and its last call applied",
                    short(&token),
                    deadline - BASE_MS,
                ),
            );
        }
    }

    /// The oracle: every guard against the server at this instant.
    fn check(&mut self, when: &str) {
        let now = self.server_ms();
        let snaps: Vec<Snapshot> = (0..self.names.len())
            .map(|n| self.snapshot(n, now))
            .collect();
        let mut found = Vec::new();
        let mut held: Vec<Vec<(u64, HoldKind)>> = vec![Vec::new(); self.names.len()];
        let mut held_tokens: Vec<Vec<String>> = vec![Vec::new(); self.names.len()];
        for (&id, e) in &self.guards {
            let is_held = e.guard.is_held();
            if is_held {
                e.trust.set(e.guard.valid_until());
            }
            // A hold whose id another client has: what this client's own calls left it, and
            // whether another client's call cut that short (learned at the next renewal).
            let info = self.tokens.get(&e.token);
            let cut = info.is_some_and(|i| i.cut.contains(&e.client));
            let own = info.and_then(|i| i.own.get(&e.client).copied().flatten());
            if e.guard.lost_now() == is_held {
                found.push((
                    Class::LostMismatch,
                    id,
                    format!(
                        "{}: is_held() {is_held} but lost() ready {}",
                        e.describe(id),
                        !is_held
                    ),
                ));
            }
            if !is_held {
                let until = e.trust.get().max(e.guard.valid_until());
                if until > Instant::now()
                    && !self.dead(e.client)
                    && !cut
                    && !self.let_go.contains(&e.token)
                    && snaps[e.name]
                        .holders
                        .iter()
                        .any(|h| h.token == e.token && h.kind == e.kind)
                {
                    found.push((
                        Class::SpuriousLoss,
                        id,
                        format!(
                            "{} gave up its lease with {:?} of its own trust left while the \
                             server still holds it ({when})",
                            e.describe(id),
                            until.saturating_duration_since(Instant::now())
                        ),
                    ));
                }
                if e.clean && !self.dead(e.client) && !cut && !self.let_go.contains(&e.token) {
                    found.push((
                        Class::LostWithoutFault,
                        id,
                        format!(
                            "{} lost its lease without any fault ({when})",
                            e.describe(id)
                        ),
                    ));
                }
                continue;
            }
            if let Some((_, deadline)) = own {
                let until = e.guard.valid_until();
                if until > self.start + ms(deadline - BASE_MS) {
                    found.push((
                        Class::TrustPastLease,
                        id,
                        format!(
                            "{} is valid until {} ms, past the deadline its own client's calls \
                             set ({} ms; it may trust no other client's renewal) ({when})",
                            e.describe(id),
                            self.rel(until),
                            deadline - BASE_MS
                        ),
                    ));
                }
            }
            if cut {
                // Another client's call ended or shortened the hold under it: the server no
                // longer backs it, and it is not a holder another guard conflicts with.
                continue;
            }
            // Guards of one hold (a resumed id beside its guard, or in another client) count
            // once: they are one holder.
            if !held_tokens[e.name].contains(&e.token) {
                held_tokens[e.name].push(e.token.clone());
                held[e.name].push((id, e.kind));
            }
            match snaps[e.name].holders.iter().find(|h| h.token == e.token) {
                None => found.push((
                    Class::HeldNotHolder,
                    id,
                    format!(
                        "{} says is_held() (valid until {} ms) but the server has {} ({when})",
                        e.describe(id),
                        self.rel(e.guard.valid_until()),
                        holders(&snaps[e.name])
                    ),
                )),
                Some(h) if h.kind != e.kind => found.push((
                    Class::HeldNotHolder,
                    id,
                    format!(
                        "{} but the server holds {:?} ({when})",
                        e.describe(id),
                        h.kind
                    ),
                )),
                Some(h) => {
                    let deadline = now - BASE_MS + h.remaining_ms;
                    let until = e.guard.valid_until();
                    if until > self.start + ms(deadline) {
                        found.push((
                            Class::TrustPastLease,
                            id,
                            format!(
                                "{} is valid until {} ms, the server's lease ends at {deadline} \
                                 ms ({when})",
                                e.describe(id),
                                self.rel(until)
                            ),
                        ));
                    }
                }
            }
        }
        for (name, held) in held.iter().enumerate() {
            let prim = self.names[name].prim;
            let conflict = match prim.family() {
                Family::LeaseLock => {
                    let writers = held.iter().filter(|(_, k)| *k == HoldKind::Write).count();
                    writers > 1 || (writers == 1 && held.len() > 1)
                }
                Family::TicketQueue => {
                    let permits: u64 = held
                        .iter()
                        .map(|(_, k)| match k {
                            HoldKind::Permits(n) => u64::from(*n),
                            _ => u64::MAX / 4,
                        })
                        .sum();
                    permits > prim.capacity()
                }
            };
            if conflict {
                let first = held[0].0;
                found.push((
                    Class::Conflict,
                    first,
                    format!("guards {held:?} on n{name} all say is_held() ({when})"),
                ));
            }
        }
        for (class, key, what) in found {
            self.report(class, key, what);
        }
    }

    /// Virtual ms of an instant.
    fn rel(&self, t: Instant) -> String {
        let d = t.saturating_duration_since(self.start);
        format!("{:.1}", d.as_secs_f64() * 1000.0)
    }

    /// Wind-down: live clients drop their guards; every pending wait gets its bound.
    fn wind_down(&mut self) {
        self.stopping = true;
        let dropped: Vec<u64> = self
            .guards
            .iter()
            .filter(|(_, e)| !self.dead(e.client))
            .map(|(id, _)| *id)
            .collect();
        let mut gone = BTreeSet::new();
        for id in dropped {
            if let Some(e) = self.guards.remove(&id) {
                gone.insert(e.token.clone());
                drop(e);
            }
        }
        let now = self.server_ms();
        let step = self.clients.iter().map(|c| c.retry).max().unwrap_or(0) + 10;
        for name in 0..self.names.len() {
            let waiting: Vec<usize> = (0..self.clients.len())
                .filter(|&c| {
                    !self.dead(c)
                        && self.clients[c]
                            .wait
                            .as_ref()
                            .is_some_and(|w| w.name == name)
                })
                .collect();
            if waiting.is_empty() {
                continue;
            }
            let mine: BTreeSet<&String> = waiting
                .iter()
                .filter_map(|&c| self.clients[c].acquiring.as_ref())
                .collect();
            let snap = self.snapshot(name, now);
            let lease = |t: &str| self.tokens.get(t).map_or(0, |i| i.lease_max);
            let claims = snap
                .holders
                .iter()
                .map(|h| (&h.token, h.remaining_ms))
                .chain(
                    snap.waiters
                        .iter()
                        .map(|w| (&w.token, w.heartbeat_remaining_ms)),
                );
            let mut allowance = 0;
            for (token, left) in claims {
                if !gone.contains(token) && !mine.contains(token) {
                    allowance += left + lease(token) + step;
                }
            }
            let bound = now - BASE_MS + allowance + (waiting.len() as u64 + 1) * step + 100;
            for c in waiting {
                if let Some(w) = self.clients[c].wait.as_mut() {
                    w.bound = Some(match w.limit {
                        Some(limit) => bound.min(limit + SLACK_MS),
                        None => bound,
                    });
                }
            }
        }
        let bounds: Vec<(usize, u64)> = (0..self.clients.len())
            .filter_map(|c| Some((c, self.clients[c].wait.as_ref()?.bound?)))
            .collect();
        self.log(|| format!("wind-down: guards dropped, wait bounds {bounds:?}"));
    }

    /// Claims a live client left on the server although none of their calls had a fault.
    fn check_leaks(&mut self) {
        let now = self.server_ms();
        let mut found = Vec::new();
        for name in 0..self.names.len() {
            let snap = self.snapshot(name, now);
            let tokens = snap
                .holders
                .iter()
                .map(|h| &h.token)
                .chain(snap.waiters.iter().map(|w| &w.token));
            for token in tokens {
                let Some(info) = self.tokens.get(token) else {
                    continue;
                };
                // A hold whose id went to another client is left to lapse when its last guard
                // crashed or its id was never resumed: it is a leak once a live client
                // released it.
                let by = if info.shared {
                    info.released_by.filter(|&c| !self.dead(c))
                } else {
                    Some(info.client).filter(|&c| !self.dead(c))
                };
                if let (false, Some(by)) = (info.faulted, by) {
                    found.push((
                        by,
                        format!(
                            "client {by} finished but the claim {} it let go is still on n{name}: \
                             {}",
                            short(token),
                            holders(&snap)
                        ),
                    ));
                }
            }
        }
        for (client, what) in found {
            self.report(Class::Leak, client as u64, what);
        }
    }
}

fn holders(s: &Snapshot) -> String {
    let h: Vec<String> = s
        .holders
        .iter()
        .map(|h| format!("{} {:?} for {} ms", short(&h.token), h.kind, h.remaining_ms))
        .collect();
    let w: Vec<String> = s.waiters.iter().map(|w| short(&w.token)).collect();
    format!("holders [{}] waiters [{}]", h.join(", "), w.join(", "))
}

/// Everything the tasks of one case share.
struct Sim {
    world: StdMutex<World>,
    /// Told after every applied call (a stalled request waits for the next one).
    applied: Notify,
    /// Wakes the oracle task after a reply.
    poke: Notify,
    /// Told when `halted`, `finished` or `stopping` change, or a mailbox gets an id (tokio's `watch` would wake its
    /// receivers in a random order; `Notify` wakes them in order, so runs replay).
    events: Arc<Notify>,
    outbox: Arc<StdMutex<Vec<(String, String)>>>,
    tasks: StdMutex<Vec<Option<AbortHandle>>>,
}

impl Sim {
    /// Resolves once `cond` holds, re-checked whenever `notify` is told.
    async fn until(&self, notify: &Notify, cond: impl Fn(&World) -> bool) {
        loop {
            let told = notify.notified();
            let done = cond(&self.world());
            if done {
                return;
            }
            told.await;
        }
    }

    fn world(&self) -> StdMutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn at(&self, vms: u64) -> Instant {
        self.world().start + ms(vms)
    }

    fn dead(&self, client: usize) -> bool {
        self.world().dead(client)
    }

    fn check(&self, when: &str) {
        self.world().check(when);
    }

    fn log(&self, line: impl FnOnce() -> String) {
        self.world().log(line);
    }

    /// Crashes `client`: nothing of it reaches the server any more.
    fn kill(&self, client: usize) {
        let mut gone = Vec::new();
        {
            let mut w = self.world();
            let now = w.vms();
            w.clients[client].dead_at = Some(now);
            w.clients[client].wait = None;
            let ids: Vec<u64> = w
                .guards
                .iter()
                .filter(|(_, e)| e.client == client)
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                gone.extend(w.guards.remove(&id));
            }
            w.log(|| format!("c{client} CRASHES"));
            if !w.clients[client].finished {
                w.finished += 1;
                w.events.notify_waiters();
            }
        }
        if let Some(task) = self.tasks.lock().unwrap()[client].take() {
            task.abort();
        }
        drop(gone);
    }

    /// Sends what the server published during the call just applied on its way to every
    /// live client, each copy with its own fate; wake-ups of one client stay in order.
    fn fan_out(self: &Arc<Self>, w: &mut World) {
        let messages = std::mem::take(&mut *self.outbox.lock().unwrap());
        let now = w.vms();
        let faulty = now < FAULTS_UNTIL;
        for (channel, message) in messages {
            for named in message.split(' ') {
                if let Some((token, _)) = named.split_once('=')
                    && let Some(info) = w.tokens.get_mut(token)
                {
                    info.handed_at = Some(now);
                    info.refused_after_hand_off = false;
                }
            }
            for c in 0..w.clients.len() {
                if w.dead(c) {
                    continue;
                }
                let state = &mut w.clients[c];
                let fate = match state.pushes.get(state.pushes_used) {
                    Some(&p) if faulty => {
                        state.pushes_used += 1;
                        p
                    }
                    _ => Push::Now,
                };
                let due = match fate {
                    Push::Now => now,
                    Push::Late(d) => now + d,
                    Push::Lost => {
                        let m = short_message(&message);
                        w.log(|| format!("c{c} loses wake-up {m}"));
                        continue;
                    }
                };
                let seq = w.seq;
                w.clients[c]
                    .push_queue
                    .push_back((seq, due, channel.clone(), message.clone()));
                if due > now {
                    let sim = self.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep_until(sim.at(due)).await;
                        sim.world().pump(c, 0);
                        sim.poke.notify_one();
                    });
                }
                w.pump(c, 0);
            }
        }
    }
}

/// A wake-up message as the trace shows it.
fn short_message(message: &str) -> String {
    message
        .split(' ')
        .map(|m| match m.split_once('=') {
            Some((t, f)) => format!("{}={f}", short(t)),
            None if m == "*" => "*".to_owned(),
            None => short(m),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

// ---- the fault-injecting connection -----------------------------------------------------------

/// One client's end of its connection to the shared server ([`SimConn`], ordered): like one
/// multiplexed RESP3 connection, requests are applied in the order they were sent and replies
/// come back in that order (a delay holds up what follows it); wake-ups may overtake replies,
/// but a wake-up is never delivered after the reply to a call the server applied after
/// publishing it.
struct Link {
    sim: Arc<Sim>,
    client: usize,
    /// The server's steps that applied the requests whose replies are on their way, in order.
    steps: StdMutex<VecDeque<u64>>,
}

type Conn = SimConn<Link>;

impl sim_store::Link for Link {
    const ORDERED: bool = true;

    fn send(&self, index: u64, request: &Request) -> Option<Fault> {
        let c = self.client;
        let mut w = self.sim.world();
        let fault = if w.dead(c) {
            Fault::None
        } else {
            w.fault(c, index as usize)
        };
        let name = w.name_of(&request.lock);
        w.clients[c].sent += 1;
        if let Some((claim, lease)) = request.claim() {
            let lease = lease.as_millis() as u64;
            w.note(c, name, &claim.token, lease, fault != Fault::None);
            if matches!(request.call, Call::Release(_)) {
                w.released(c, &claim.token);
            }
            if matches!(request.call, Call::Acquire(..)) {
                w.clients[c].acquiring = Some(claim.token.clone());
            }
        }
        w.check(request.name());
        Some(fault)
    }

    /// A stalled request waits until the next call of any client is applied, at the latest
    /// [`FAULTS_UNTIL`].
    async fn stall(&self) {
        let applied = self.sim.applied.notified();
        let until = self.sim.at(FAULTS_UNTIL);
        tokio::select! {
            biased;
            _ = applied => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }

    /// A crashed client's requests are never applied, its replies never come.
    fn dead(&self) -> bool {
        self.sim.dead(self.client)
    }

    fn apply(&self, request: &Request, fault: Fault) -> Reply {
        let (sim, c) = (&self.sim, self.client);
        let mut w = sim.world();
        let now = w.server_ms();
        let name = w.name_of(&request.lock);
        let token = request.claim().map(|(claim, _)| claim.token.clone());
        if let Some(token) = &token {
            w.before_call(c, token);
        }
        let out = request.apply(&w.server, now);
        if let (Call::Acquire(claim, _), Reply::Acquire(out)) = (&request.call, &out) {
            w.attempted(&claim.token, matches!(out, Ok(Acquire::Granted(_))));
        }
        w.seq += 1;
        self.steps.lock().unwrap().push_back(w.seq);
        w.log(|| {
            let token = request
                .claim()
                .map(|(c, _)| short(&c.token))
                .unwrap_or_default();
            let what = request.name();
            format!("c{c} {what} {token} on n{name} -> {out:?} [{fault:?}]")
        });
        if let Some(token) = &token {
            let renewed = matches!(
                (&request.call, &out),
                (Call::Acquire(..), Reply::Acquire(Ok(Acquire::Granted(_))))
                    | (Call::Extend(..), Reply::Bool(Ok(true)))
                    | (Call::Downgrade(_), Reply::Fence(Ok(Some(_))))
            );
            w.after_call(c, token, renewed);
        }
        sim.fan_out(&mut w);
        w.observe(name);
        w.check(request.name());
        out
    }

    fn applied(&self) {
        self.sim.applied.notify_waiters();
    }

    /// Wake-ups published up to this call's step arrive before its reply.
    fn before_reply(&self) {
        let step = self
            .steps
            .lock()
            .unwrap()
            .pop_front()
            .expect("an applied request");
        let mut w = self.sim.world();
        w.pump(self.client, step + 1);
        w.clients[self.client].replied += 1;
    }

    /// The oracle runs once the client code processed the reply.
    fn replied(&self) {
        self.sim.poke.notify_one();
    }
}

// ---- clients ----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Wait,
    Try,
    Timeout(u64),
    Cancel(u64),
}

/// Acquires `want` of lock `name` (a `prim`) as `mode` says; the guard and the kind of hold it
/// claims.
async fn acquire(
    client: &LockClient,
    name: &str,
    prim: Prim,
    want: u8,
    mode: Mode,
) -> Result<Option<(AnyGuard, HoldKind)>> {
    let timeout = |t: u64| ms(t);
    macro_rules! by_mode {
        ($wait:expr, $try:expr, $timeout:expr, $wrap:expr, $kind:expr) => {{
            let guard = match mode {
                Mode::Wait | Mode::Cancel(_) => Some($wait.await?),
                Mode::Try => match $try.await {
                    Ok(g) => Some(g),
                    Err(e) if e.is_would_block() => None,
                    Err(e) => return Err(e),
                },
                Mode::Timeout(t) => Some($timeout(timeout(t)).await?),
            };
            Ok(guard.map(|g| ($wrap(g), $kind)))
        }};
    }
    match prim {
        Prim::Mutex => {
            let m = client.mutex(name);
            by_mode!(
                m.lock(),
                m.try_lock(),
                |t| m.lock().timeout(t),
                AnyGuard::Mutex,
                HoldKind::Write
            )
        }
        Prim::FairLock => {
            let f = client.fair_lock(name);
            by_mode!(
                f.lock(),
                f.try_lock(),
                |t| f.lock().timeout(t),
                AnyGuard::Fair,
                HoldKind::Permits(1)
            )
        }
        Prim::RwWriter | Prim::RwReader | Prim::RwFair => {
            let rw = client.rwlock(name).preference(prim.preference());
            let fair = prim == Prim::RwFair;
            if want.is_multiple_of(2) {
                let kind = if fair {
                    HoldKind::Permits(FAIR_RW_CAPACITY)
                } else {
                    HoldKind::Write
                };
                by_mode!(
                    rw.write(),
                    rw.try_write(),
                    |t| rw.write().timeout(t),
                    AnyGuard::Write,
                    kind
                )
            } else {
                let kind = if fair {
                    HoldKind::Permits(1)
                } else {
                    HoldKind::Read
                };
                by_mode!(
                    rw.read(),
                    rw.try_read(),
                    |t| rw.read().timeout(t),
                    AnyGuard::Read,
                    kind
                )
            }
        }
        Prim::Semaphore(cap) => {
            let s = client.semaphore(name, cap);
            let n = match mode {
                Mode::Timeout(_) => 1,
                _ => 1 + u32::from(want) % cap,
            };
            by_mode!(
                s.acquire_many(n),
                s.try_acquire_many(n),
                |t| s.acquire().timeout(t),
                AnyGuard::Permit,
                HoldKind::Permits(n)
            )
        }
    }
}

/// A guard of kind `probe` (0 Mutex, 1 Write, 2 Read, 3 FairLock, 4 Permit) resumed from
/// `id` on `client`.
async fn resume_kind(
    client: &LockClient,
    label: &str,
    prim: Prim,
    probe: u8,
    id: &HoldId,
) -> Result<AnyGuard> {
    let rw = || client.rwlock(label).preference(prim.preference());
    Ok(match probe {
        0 => AnyGuard::Mutex(client.mutex(label).resume(id).await?),
        1 => AnyGuard::Write(rw().resume_write(id).await?),
        2 => AnyGuard::Read(rw().resume_read(id).await?),
        3 => AnyGuard::Fair(client.fair_lock(label).resume(id).await?),
        _ => {
            let cap = u32::try_from(prim.capacity()).unwrap_or(1);
            AnyGuard::Permit(client.semaphore(label, cap).resume(id).await?)
        }
    })
}

/// A client's script, run until its end or the wind-down.
struct Script {
    sim: Arc<Sim>,
    c: usize,
    client: LockClient,
    names: Vec<Prim>,
}

impl Script {
    async fn run(self, spec: ClientSpec) {
        tokio::time::sleep_until(self.sim.at(spec.start)).await;
        for (i, op) in spec.ops.iter().enumerate() {
            if self.sim.world().stopping {
                break;
            }
            self.sim.log(|| format!("c{} op {i}: {op:?}", self.c));
            self.op(op).await;
            self.sim.check("after a script step");
        }
        let mine: Vec<Entry> = {
            let mut w = self.sim.world();
            let ids: Vec<u64> = w
                .guards
                .iter()
                .filter(|(_, e)| e.client == self.c)
                .map(|(id, _)| *id)
                .collect();
            w.clients[self.c].finished = true;
            w.log(|| format!("c{} done, drops {ids:?}", self.c));
            ids.into_iter()
                .filter_map(|id| w.guards.remove(&id))
                .collect()
        };
        drop(mine);
        let mut w = self.sim.world();
        w.finished += 1;
        w.events.notify_waiters();
    }

    fn holds_any(&self) -> bool {
        self.sim.world().guards.values().any(|e| e.client == self.c)
    }

    /// Takes the client's `index`-th guard (modulo) out of the registry, if it has any and it
    /// passes `keep`.
    fn take(&self, index: usize, keep: impl Fn(&Entry) -> bool) -> Option<(u64, Entry)> {
        let mut w = self.sim.world();
        let ids: Vec<u64> = w
            .guards
            .iter()
            .filter(|(_, e)| e.client == self.c)
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            return None;
        }
        let id = ids[index % ids.len()];
        if !keep(&w.guards[&id]) {
            return None;
        }
        w.guards.remove(&id).map(|e| (id, e))
    }

    fn register(
        &self,
        name: usize,
        kind: HoldKind,
        guard: AnyGuard,
        clean: bool,
        origin: Option<Origin>,
    ) {
        let mut w = self.sim.world();
        let token = guard.token();
        let origin = origin.unwrap_or_else(|| match w.tokens.get(&token) {
            Some(info) if !info.last_granted => Origin::HandOff {
                stale: info.refused_after_hand_off,
            },
            _ => Origin::Reply,
        });
        if let Some(info) = w.tokens.get_mut(&token) {
            info.owners.insert(self.c);
        }
        let id = w.next_guard;
        w.next_guard += 1;
        let entry = Entry {
            client: self.c,
            name,
            kind,
            token,
            trust: std::cell::Cell::new(guard.valid_until()),
            guard,
            clean,
            origin,
        };
        let d = entry.describe(id);
        let until = w.rel(entry.guard.valid_until());
        w.log(|| format!("c{} GRANTED {d}, valid until {until} ms", self.c));
        w.guards.insert(id, entry);
        w.check("a guard was returned");
    }

    fn put_back(&self, id: u64, entry: Entry) {
        // The operation may have changed the trust (an `extend` to a shorter lease).
        entry.trust.set(entry.guard.valid_until());
        let mut w = self.sim.world();
        w.guards.insert(id, entry);
        w.check("a guard was handed back");
    }

    async fn op(&self, op: &Op) {
        let c = self.c;
        let sim = &self.sim;
        match *op {
            Op::Lock { name, want } => {
                let mode = if self.holds_any() {
                    Mode::Timeout(LOCK_WHILE_HOLDING_MS)
                } else {
                    Mode::Wait
                };
                self.wait(name, want, mode).await;
            }
            Op::Try { name, want } => self.wait(name, want, Mode::Try).await,
            Op::Timeout { name, want, ms } => self.wait(name, want, Mode::Timeout(ms)).await,
            Op::Cancel { name, want, after } => self.wait(name, want, Mode::Cancel(after)).await,
            Op::Hold(d) => {
                tokio::select! {
                    biased;
                    _ = sim.until(&sim.events, |w| w.stopping) => {}
                    _ = tokio::time::sleep(ms(d)) => {}
                }
            }
            Op::Extend { guard, lease } => {
                if let Some((id, mut e)) = self.take(guard, |_| true) {
                    let r = e.guard.extend(ms(lease)).await;
                    sim.log(|| format!("c{c} extend g{id} to {lease} ms -> {r:?}"));
                    self.expected(&r);
                    self.put_back(id, e);
                }
            }
            Op::ExtendElsewhere { guard, lease } => {
                if let Some((id, mut e)) = self.take(guard, |_| true) {
                    // From another task: the engine, not the caller, renews the hold.
                    let (r, guard) = tokio::spawn(async move {
                        let r = e.guard.extend(ms(lease)).await;
                        (r, e)
                    })
                    .await
                    .expect("the extend's task");
                    e = guard;
                    sim.log(|| {
                        format!("c{c} extend g{id} to {lease} ms from another task -> {r:?}")
                    });
                    self.expected(&r);
                    self.put_back(id, e);
                }
            }
            Op::Downgrade { guard } => self.downgrade(guard, None).await,
            Op::DowngradeRacingReleaseAll { guard, after } => {
                self.downgrade(guard, Some(after)).await
            }
            Op::Release { guard } => {
                if let Some((id, e)) = self.take(guard, |_| true) {
                    sim.world().let_go.insert(e.token.clone());
                    let r = e.guard.release().await;
                    sim.log(|| format!("c{c} release g{id} -> {r:?}"));
                    self.expected(&r);
                }
            }
            Op::Drop { guard } => {
                if let Some((id, e)) = self.take(guard, |_| true) {
                    sim.world().let_go.insert(e.token.clone());
                    sim.log(|| format!("c{c} drops g{id}"));
                    drop(e);
                }
            }
            Op::Handover { guard } => self.handover(guard).await,
            Op::CoResume { guard } => {
                if let Some((id, e)) = self.take(guard, |_| true) {
                    let hold = e.guard.hold_id();
                    let name = e.name;
                    let label = format!("n{name}");
                    let prim = self.names[name];
                    let probe = e.guard.probe();
                    let resumed = resume_kind(&self.client, &label, prim, probe, &hold).await;
                    sim.log(|| {
                        format!(
                            "c{c} resumes g{id}'s id beside it -> {:?}",
                            resumed.as_ref().err()
                        )
                    });
                    self.put_back(id, e);
                    // A client keeps one guard per hold: refused, nothing sent.
                    match resumed {
                        // Or gone, when the guard's hold was released under it (its entry
                        // left with the release).
                        Err(err) if err.is_hold_in_use() || err.is_hold_gone() => {}
                        Ok(g) => {
                            let _ = g.detach();
                            panic!("c{c}: a resume of g{id}'s id beside it gave a second guard");
                        }
                        Err(err) => panic!("c{c}: a resume beside g{id} was not refused: {err}"),
                    }
                }
            }
            Op::ReleaseById { guard } => {
                if let Some((id, e)) = self.take(guard, |_| true) {
                    sim.world().let_go.insert(e.token.clone());
                    let r = self.client.release_hold(&e.guard.hold_id()).await;
                    sim.log(|| format!("c{c} releases g{id} by id -> {r:?}"));
                    self.expected(&r);
                    self.put_back(id, e);
                }
            }
            Op::Give { guard, to, keep } => self.give(guard, to, keep),
            Op::Adopt { wait } => {
                let c = self.c;
                tokio::select! {
                    biased;
                    _ = sim.until(&sim.events, |w| w.stopping || !w.mailboxes[c].is_empty()) => {}
                    _ = tokio::time::sleep(ms(wait)) => {}
                }
                if let Some(mail) = self.mail(true) {
                    let origin = Origin::Adopt { from: mail.from };
                    self.resume(&mail, origin).await;
                }
            }
            Op::ReleaseMailed => {
                if let Some(mail) = self.mail(true) {
                    let r = self.client.release_hold(&mail.id).await;
                    let t = short(&mail.token);
                    sim.log(|| format!("c{c} releases {t} by id (from c{}) -> {r:?}", mail.from));
                    self.expected_mailed(&r, &mail);
                }
            }
            Op::ExtendMailed { lease } => {
                if let Some(mail) = self.mail(false) {
                    let r = self.client.extend_hold(&mail.id, ms(lease)).await;
                    let t = short(&mail.token);
                    sim.log(|| {
                        format!(
                            "c{c} extends {t} by id (from c{}) to {lease} ms -> {r:?}",
                            mail.from
                        )
                    });
                    self.expected_mailed(&r, &mail);
                }
            }
        }
    }

    /// `detach()` the client's `guard`-th guard, then resume its id on this client.
    async fn handover(&self, guard: usize) {
        let Some((id, e)) = self.take(guard, |_| true) else {
            return;
        };
        let mail = Mail {
            from: self.c,
            id: e.guard.hold_id(),
            token: e.token,
            name: e.name,
            kind: e.kind,
            probe: e.guard.probe(),
        };
        // The detached guard is gone before the resume is sent.
        let _ = e.guard.detach();
        self.sim.world().detached(self.c, &mail.token);
        self.sim.log(|| format!("c{} hands g{id} over", self.c));
        self.resume(&mail, Origin::Resume).await;
    }

    /// Posts the id of the client's `guard`-th guard to the mailbox of another client (`to`
    /// modulo the others); detaches the guard unless `keep`.
    fn give(&self, guard: usize, to: usize, keep: bool) {
        let Some((id, e)) = self.take(guard, |_| true) else {
            return;
        };
        let others = self.sim.world().clients.len() - 1;
        let to = (self.c + 1 + to % others) % (others + 1);
        let mail = Mail {
            from: self.c,
            id: e.guard.hold_id(),
            token: e.token.clone(),
            name: e.name,
            kind: e.kind,
            probe: e.guard.probe(),
        };
        if keep {
            self.put_back(id, e);
        } else {
            let _ = e.guard.detach();
        }
        let mut w = self.sim.world();
        if let Some(info) = w.tokens.get_mut(&mail.token) {
            info.shared = true;
        }
        if !keep {
            w.detached(self.c, &mail.token);
        }
        let how = if keep { "keeps" } else { "detaches" };
        let (c, t) = (self.c, short(&mail.token));
        w.log(|| format!("c{c} {how} g{id} and gives {t} to c{to}"));
        w.mailboxes[to].push_back(mail);
        w.events.notify_waiters();
    }

    /// The oldest id in this client's mailbox, taken out of it if `take`.
    fn mail(&self, take: bool) -> Option<Mail> {
        let mut w = self.sim.world();
        let mailbox = &mut w.mailboxes[self.c];
        if take {
            mailbox.pop_front()
        } else {
            mailbox.front().cloned()
        }
    }

    /// Resumes `mail`'s id on this client and registers the guard as `origin`; a resume that
    /// fails must fail for a reason the schedule explains.
    async fn resume(&self, mail: &Mail, origin: Origin) {
        let label = format!("n{}", mail.name);
        let prim = self.names[mail.name];
        let resumed = resume_kind(&self.client, &label, prim, mail.probe, &mail.id).await;
        let (c, t) = (self.c, short(&mail.token));
        self.sim.log(|| {
            format!(
                "c{c} resumes {t} ({origin:?}) -> {:?}",
                resumed.as_ref().err()
            )
        });
        match resumed {
            Ok(g) => self.register(mail.name, mail.kind, g, false, Some(origin)),
            Err(err) if origin == Origin::Resume => self.expected::<()>(&Err(err)),
            Err(err) => self.expected_mailed::<()>(&Err(err), mail),
        }
    }

    /// Reports an error of a step on a mailed id that no fault explains: a gone hold is
    /// expected, and `HoldInUse` (one guard per hold per client) only when this client has
    /// had the hold itself (the id came back while its guard, live or being released, is
    /// here).
    fn expected_mailed<T>(&self, r: &Result<T>, mail: &Mail) {
        if let Err(e) = r {
            let mine = {
                let w = self.sim.world();
                w.tokens
                    .get(&mail.token)
                    .is_some_and(|i| i.callers.contains(&self.c))
            };
            if e.is_hold_in_use() && mine {
                return;
            }
        }
        self.expected(r);
    }

    fn auto_renew(&self) -> bool {
        self.sim.world().clients[self.c].auto_renew
    }

    /// Whether a guard whose operation started at `started` (virtual ms) must stay held:
    /// once every fault has landed, or from the start in a schedule without faults.
    fn clean_from(&self, started: u64) -> bool {
        started >= CLEAN_FROM || self.sim.world().fault_free
    }

    /// `WriteGuard::downgrade` of the client's `guard`-th guard, if it is a write guard; with
    /// `release_all` `after` ms into it, if asked (the client's every guard is then let go:
    /// none of them is expected to stay held, the downgraded one included).
    async fn downgrade(&self, guard: usize, release_all: Option<u64>) {
        let (c, sim) = (self.c, &self.sim);
        let release_all = async {
            let Some(after) = release_all else { return };
            tokio::time::sleep(ms(after)).await;
            // The client lets go of its guards: they are no longer checked (the one being
            // downgraded is, once the downgrade returns).
            let let_go: Vec<Entry> = {
                let mut w = sim.world();
                w.clients[c].released_all = Some(w.vms());
                let ids: Vec<u64> = w
                    .guards
                    .iter()
                    .filter(|(_, e)| e.client == c)
                    .map(|(id, _)| *id)
                    .collect();
                ids.into_iter()
                    .filter_map(|id| w.guards.remove(&id))
                    .collect()
            };
            let r = self.client.release_all().await;
            sim.log(|| format!("c{c} release_all -> {r:?}"));
            self.expected(&r);
            drop(let_go);
        };
        let Some((id, e)) = self.take(guard, |e| matches!(e.guard, AnyGuard::Write(_))) else {
            return release_all.await;
        };
        {
            // A failed downgrade drops the guard, which releases the hold: another guard of
            // it (a resumed id) is lost with it, by design.
            let mut w = sim.world();
            if w.guards.values().any(|other| other.token == e.token) {
                w.let_go.insert(e.token.clone());
            }
        }
        let AnyGuard::Write(w) = e.guard else {
            unreachable!("a write guard was taken")
        };
        let started = sim.world().vms();
        let (r, ()) = tokio::join!(WriteGuard::downgrade(w), release_all);
        sim.log(|| format!("c{c} downgrade g{id} -> {:?}", r.as_ref().map(|_| ())));
        match r {
            Ok(read) => {
                let kind = if self.names[e.name] == Prim::RwFair {
                    HoldKind::Permits(1)
                } else {
                    HoldKind::Read
                };
                let released = sim.world().clients[c]
                    .released_all
                    .is_some_and(|at| at >= started);
                let clean = self.auto_renew() && self.clean_from(started) && !released;
                let origin = Some(Origin::Downgrade);
                self.register(e.name, kind, AnyGuard::Read(read), clean, origin);
            }
            Err(err) => self.expected::<()>(&Err(err)),
        }
    }

    /// Reports an error no fault explains.
    fn expected<T>(&self, r: &Result<T>) {
        if let Err(e) = r {
            // A hold id's hold may be gone.
            let by_id = e.is_hold_gone();
            if !(e.is_timeout()
                || e.is_connection()
                || matches!(e, Error::LeaseLost { .. })
                || by_id)
            {
                let what = format!("client {}: unexpected error {e:?}", self.c);
                self.sim
                    .world()
                    .report(Class::UnexpectedError, self.c as u64, what);
            }
        }
    }

    /// One acquisition, with the wait bookkeeping the liveness checks need.
    async fn wait(&self, name: usize, want: u8, mode: Mode) {
        let name = name % self.names.len();
        let prim = self.names[name];
        let started = {
            let mut w = self.sim.world();
            let started = w.vms();
            let limit = match mode {
                Mode::Timeout(t) | Mode::Cancel(t) => Some(started + t),
                _ => None,
            };
            if mode != Mode::Try {
                w.clients[self.c].wait = Some(WaitState {
                    name,
                    started,
                    limit,
                    bound: None,
                });
            }
            started
        };
        let label = format!("n{name}");
        let fut = acquire(&self.client, &label, prim, want, mode);
        let result = match mode {
            Mode::Cancel(after) => {
                tokio::select! {
                    biased;
                    r = fut => Some(r),
                    _ = tokio::time::sleep(ms(after)) => None,
                }
            }
            _ => Some(fut.await),
        };
        let mut late = None;
        {
            let mut w = self.sim.world();
            let now = w.vms();
            if let Some(wait) = w.clients[self.c].wait.take() {
                let due = match (wait.bound, wait.limit) {
                    (Some(bound), _) => Some(bound),
                    (None, Some(limit)) if wait.started >= CLEAN_FROM => Some(limit + SLACK_MS),
                    _ => None,
                };
                if let Some(due) = due.filter(|&d| now > d) {
                    late = Some(format!(
                        "client {} waited on n{} from {} ms ({mode:?}) until {now} ms, past {due} ms",
                        self.c, wait.name, wait.started
                    ));
                }
            }
            let outcome = match &result {
                Some(Ok(Some(_))) => "granted".to_owned(),
                Some(Ok(None)) => "refused".to_owned(),
                Some(Err(e)) => format!("error: {e}"),
                None => "cancelled".to_owned(),
            };
            w.log(|| format!("c{} {mode:?} on n{name} -> {outcome}", self.c));
            if let Some(what) = late {
                w.report(Class::WaitTooLong, self.c as u64, what);
            }
        }
        match result {
            Some(Ok(Some((guard, kind)))) => {
                let clean = self.auto_renew() && self.clean_from(started);
                self.register(name, kind, guard, clean, None);
            }
            Some(r) => self.expected(&r.map(|_| ())),
            None => {}
        }
    }
}

// ---- one case ---------------------------------------------------------------------------------

/// What one case found.
struct Outcome {
    violations: Vec<Violation>,
    trace: Vec<String>,
}

impl Outcome {
    fn first(&self, focus: &[Class]) -> Option<&Violation> {
        self.violations.iter().find(|v| focus.contains(&v.class))
    }
}

/// Runs `schedule` on a fresh paused runtime; stops at the first violation of a `focus` class.
fn simulate(schedule: &Schedule, focus: &[Class], trace: bool) -> Outcome {
    testing::seed(schedule.seed);
    on_paused_clock(run(schedule, focus, trace))
}

async fn run(schedule: &Schedule, focus: &[Class], trace: bool) -> Outcome {
    let start = Instant::now();
    let server = MemoryStore::new();
    let outbox: Arc<StdMutex<Vec<(String, String)>>> = Arc::default();
    let tap = outbox.clone();
    assert!(testing::divert(server.hub(), move |channel, message| {
        tap.lock()
            .unwrap()
            .push((channel.to_owned(), message.to_owned()));
    }));
    let events = Arc::new(Notify::new());
    let names = schedule
        .names
        .iter()
        .enumerate()
        .map(|(i, &prim)| NameInfo {
            keys: LockKeys::new("rl", &format!("n{i}")).expect("lock name"),
            prim,
        })
        .collect();
    let clients = schedule
        .clients
        .iter()
        .map(|spec| ClientState {
            hub: hub_for(spec, start),
            faults: spec.faults.clone(),
            pushes: spec.pushes.clone(),
            pushes_used: 0,
            retry: spec.retry,
            auto_renew: spec.auto_renew,
            heartbeat: spec.heartbeat,
            dead_at: None,
            finished: false,
            wait: None,
            acquiring: None,
            released_all: None,
            push_queue: VecDeque::new(),
            replied: 0,
            sent: 0,
        })
        .collect();
    let fault_free = schedule.clients.iter().all(|c| {
        c.crash.is_none()
            && c.faults.iter().all(|f| matches!(f, Fault::None))
            && c.pushes.iter().all(|p| matches!(p, Push::Now))
            && c.subscribe_stalls.iter().all(|&s| s == 0)
    });
    let world = World {
        start,
        fault_free,
        server,
        names,
        clients,
        guards: BTreeMap::new(),
        next_guard: 0,
        tokens: BTreeMap::new(),
        let_go: BTreeSet::new(),
        mailboxes: vec![VecDeque::new(); schedule.clients.len()],
        focus: focus.to_vec(),
        violations: Vec::new(),
        reported: BTreeSet::new(),
        halted: false,
        finished: 0,
        events: events.clone(),
        trace: trace.then(Vec::new),
        stopping: false,
        seq: 0,
    };
    let sim = Arc::new(Sim {
        world: StdMutex::new(world),
        applied: Notify::new(),
        poke: Notify::new(),
        events,
        outbox,
        tasks: StdMutex::new(Vec::new()),
    });

    // The oracle after every reply the client code processed.
    let oracle = {
        let sim = sim.clone();
        tokio::spawn(async move {
            loop {
                sim.poke.notified().await;
                sim.check("after a reply");
            }
        })
    };
    let mut handles = Vec::new();
    for (c, spec) in schedule.clients.iter().enumerate() {
        let hub = sim.world().clients[c].hub.clone();
        let conn: Arc<Conn> = SimConn::new(
            Link {
                sim: sim.clone(),
                client: c,
                steps: StdMutex::default(),
            },
            hub,
        );
        let mut builder = LockClient::builder().lease(ms(spec.lease));
        if spec.heartbeat > 0 {
            builder = builder.heartbeat(ms(spec.heartbeat));
        }
        let client = builder
            .retry_interval(ms(spec.retry))
            .auto_renew(spec.auto_renew)
            .store(conn)
            .expect("client");
        let script = Script {
            sim: sim.clone(),
            c,
            client,
            names: schedule.names.clone(),
        };
        let task = tokio::spawn(script.run(spec.clone()));
        sim.tasks.lock().unwrap().push(Some(task.abort_handle()));
        handles.push(task.abort_handle());
        if let Some(at) = spec.crash {
            let sim = sim.clone();
            handles.push(
                tokio::spawn(async move {
                    tokio::time::sleep_until(sim.at(at)).await;
                    sim.kill(c);
                })
                .abort_handle(),
            );
        }
    }

    let all = schedule.clients.len();
    let halted = || sim.until(&sim.events, |w| w.halted);
    let finished = || sim.until(&sim.events, |w| w.finished >= all);
    'run: {
        // Phase 1: scripts and faults, until the wind-down.
        tokio::select! {
            biased;
            _ = halted() => break 'run,
            _ = finished() => {}
            _ = tokio::time::sleep_until(sim.at(WIND_DOWN)) => {}
        }
        // Phase 2: pending waits must end within their bounds.
        let limit = {
            let mut w = sim.world();
            w.wind_down();
            w.clients
                .iter()
                .filter_map(|c| c.wait.as_ref()?.bound)
                .max()
                .unwrap_or(0)
                .max(w.vms())
                + 1
        };
        sim.events.notify_waiters();
        tokio::select! {
            biased;
            _ = halted() => break 'run,
            _ = finished() => {}
            _ = tokio::time::sleep_until(sim.at(limit)) => {
                let mut w = sim.world();
                let stuck: Vec<(usize, u64, u64)> = (0..w.clients.len())
                    .filter(|&c| !w.dead(c) && !w.clients[c].finished)
                    .filter_map(|c| {
                        let wait = w.clients[c].wait.as_ref()?;
                        Some((c, wait.started, wait.bound.unwrap_or(0)))
                    })
                    .collect();
                for (c, started, bound) in stuck {
                    let what = format!(
                        "client {c} still waits at {limit} ms (since {started} ms), bound {bound} ms"
                    );
                    w.report(Class::WaitTooLong, c as u64, what);
                }
            }
        }
        // Let the background releases of the last guards land, then look for leftovers.
        let cap = sim.world().vms().max(FAULTS_UNTIL) + 2 * MAX_DELAY + 100;
        loop {
            tokio::time::sleep(ms(1)).await;
            let w = sim.world();
            let idle = (0..w.clients.len())
                .all(|c| w.dead(c) || w.clients[c].replied == w.clients[c].sent);
            if idle || w.vms() >= cap {
                break;
            }
        }
        let mut w = sim.world();
        if w.clients.iter().all(|c| c.finished || c.dead_at.is_some()) {
            w.check_leaks();
        }
        w.check("at the end");
    }
    oracle.abort();
    for h in handles {
        h.abort();
    }
    let mut w = sim.world();
    let guards = std::mem::take(&mut w.guards);
    let outcome = Outcome {
        violations: std::mem::take(&mut w.violations),
        trace: w.trace.take().unwrap_or_default(),
    };
    drop(w);
    drop(guards);
    outcome
}

// ---- the tests --------------------------------------------------------------------------------

/// Plants one bug for the life of the value (and restores every fix after, even on panic).
struct Planted;

impl Planted {
    fn new(bug: Option<Bug>) -> Planted {
        testing::unplant_all();
        if let Some(bug) = bug {
            testing::plant(bug);
        }
        Planted
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        testing::unplant_all();
    }
}

/// The property: no violation of a `focus` class.
fn property(
    focus: &'static [Class],
) -> impl Fn(Schedule) -> std::result::Result<(), TestCaseError> {
    move |schedule| match simulate(&schedule, focus, false).first(focus) {
        Some(v) => Err(TestCaseError::fail(v.to_string())),
        None => Ok(()),
    }
}

/// Prints a failing schedule with the trace of its run.
fn explain(schedule: &Schedule, focus: &[Class]) -> String {
    let outcome = simulate(schedule, focus, true);
    let mut out = format!("{schedule:#?}\n");
    for line in &outcome.trace {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Runs `SIM*_CASES` (the variable `cases`, default [`DEFAULT_CASES`]) schedules of `profile`
/// with no bug planted; a violation of any class fails with the counterexample's trace.
fn stays_honest(profile: Profile, cases: &str, persistence: Option<&'static str>, what: &str) {
    let _serial = serial();
    let _planted = Planted::new(None);
    let config = Config {
        cases: env_u32(cases, DEFAULT_CASES),
        max_shrink_iters: env_u32("SIM_SHRINK_ITERS", 2_000),
        failure_persistence: persistence.map(|path| {
            Box::new(FileFailurePersistence::Direct(path)) as Box<dyn FailurePersistence>
        }),
        source_file: persistence.map(|_| file!()),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let started = std::time::Instant::now();
    let result = runner.run(&schedule(&profile), property(ALL_CLASSES));
    eprintln!("{what}: {:?} for the schedules run", started.elapsed());
    if let Err(e) = result {
        let detail = match &e {
            TestError::Fail(_, schedule) => explain(schedule, ALL_CLASSES),
            TestError::Abort(_) => String::new(),
        };
        panic!("the client-side simulation found a counterexample: {e}\n{detail}");
    }
}

#[test]
fn guards_stay_honest_under_faults() {
    let regressions = Some("proptest-regressions/simulation.txt");
    stays_honest(Profile::full(), "SIM_CASES", regressions, "simulation");
}

/// The main check with hold ids: guards handed over to a resume of their id, resumed beside
/// themselves, released by id (`SIM_HOLD_ID_CASES`, default [`DEFAULT_CASES`]).
#[test]
fn guards_stay_honest_with_hold_ids() {
    let what = "simulation with hold ids";
    stays_honest(Profile::with_hold_ids(), "SIM_HOLD_ID_CASES", None, what);
}

/// Hold ids shared by two clients, with crashes: ids given to another client (detached or
/// kept beside the guard) and resumed, released or extended by id there, besides everything
/// of [`guards_stay_honest_with_hold_ids`] (`SIM_SHARED_ID_CASES`, default [`DEFAULT_CASES`]).
#[test]
fn guards_stay_honest_with_hold_ids_across_clients() {
    let what = "simulation with hold ids across clients";
    stays_honest(Profile::across_clients(), "SIM_SHARED_ID_CASES", None, what);
}

/// Whether any client of `schedule` has an op that `is`.
fn has_op(schedule: &Schedule, is: impl Fn(&Op) -> bool) -> bool {
    schedule.clients.iter().flat_map(|c| &c.ops).any(is)
}

/// Searches schedules of `profile` with `bug` planted (a fixed proptest seed, so the search
/// is the same on every run) for a violation of a `focus` class; the minimal one found.
fn finds(bug: Bug, profile: Profile, focus: &'static [Class], seed: u8) -> (Schedule, String) {
    let _serial = serial();
    let _planted = Planted::new(Some(bug));
    let config = Config {
        cases: env_u32("SIM_PLANTED_CASES", 500),
        max_shrink_iters: env_u32("SIM_PLANTED_SHRINK_ITERS", 300),
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    match runner.run(&schedule(&profile), property(focus)) {
        Err(TestError::Fail(why, schedule)) => {
            eprintln!("{bug:?}: {why}\n{}", explain(&schedule, focus));
            (schedule, why.to_string())
        }
        other => panic!("{bug:?} planted: the simulation found no counterexample ({other:?})"),
    }
}

#[test]
fn finds_planted_resume_trusts_reply() {
    let (schedule, why) = finds(Bug::ResumeTrustsReply, Profile::with_hold_ids(), SAFETY, 9);
    assert!(
        why.contains("TrustPastLease") || why.contains("HeldNotHolder"),
        "{why}"
    );
    let resumes = has_op(&schedule, |op| {
        matches!(op, Op::Handover { .. } | Op::CoResume { .. })
    });
    assert!(resumes, "found without a resume: {why}");
}

/// The same bug through a hold handed to another client: the profile has no resume in one
/// client, so the counterexample's resume is an [`Op::Adopt`].
#[test]
fn finds_planted_resume_trusts_reply_across_clients() {
    let (schedule, why) = finds(Bug::ResumeTrustsReply, Profile::adopt_only(), SAFETY, 10);
    assert!(
        why.contains("TrustPastLease") || why.contains("HeldNotHolder"),
        "{why}"
    );
    assert!(why.contains("Adopt"), "not an adopted guard: {why}");
    let adopts = has_op(&schedule, |op| matches!(op, Op::Adopt { .. }));
    assert!(adopts, "found without an adopt: {why}");
}

#[test]
fn finds_planted_hand_off_trusts_heartbeat() {
    let (_, why) = finds(Bug::HandOffTrustsHeartbeat, Profile::hand_off(), SAFETY, 1);
    assert!(why.contains("HandOff"), "not a hand-off: {why}");
}

#[test]
fn finds_planted_stale_grant() {
    let (_, why) = finds(Bug::StaleGrant, Profile::stale_grant(), SAFETY, 2);
    assert!(
        why.contains("HandOff { stale: true }"),
        "not a stale grant: {why}"
    );
}

#[test]
fn finds_planted_downgrade_ignores_loss() {
    let (schedule, why) = finds(
        Bug::DowngradeIgnoresLoss,
        Profile::downgrade_race(),
        SAFETY,
        5,
    );
    let races = has_op(&schedule, |op| {
        matches!(op, Op::DowngradeRacingReleaseAll { .. })
    });
    assert!(
        races,
        "the counterexample has no downgrade racing release_all: {why}"
    );
}

#[test]
fn finds_planted_unbounded_subscribe() {
    let (schedule, why) = finds(
        Bug::UnboundedSubscribe,
        Profile::stalled_subscriptions(),
        &[Class::WaitTooLong],
        6,
    );
    let stalled = schedule
        .clients
        .iter()
        .any(|c| c.subscribe_stalls.iter().any(|&s| s > 0));
    assert!(stalled, "the counterexample stalls no subscription: {why}");
}

#[test]
fn finds_planted_dead_waiter_blocks() {
    let (schedule, why) = finds(
        Bug::DeadWaiterBlocks,
        Profile::dead_waiter(),
        &[Class::DeadHoldsPastLease],
        8,
    );
    assert!(schedule.clients.iter().any(|c| c.crash.is_some()), "{why}");
}

#[test]
fn a_schedule_replays_exactly() {
    let _serial = serial();
    let _planted = Planted::new(None);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let profile = Profile::full();
    let strategy = schedule(&profile);
    let n = env_u32("SIM_REPLAYS", 100);
    let mut differ = 0;
    for _ in 0..n {
        let s = strategy
            .new_tree(&mut runner)
            .expect("a schedule")
            .current();
        let a = simulate(&s, &[], true).trace;
        let b = simulate(&s, &[], true).trace;
        if a != b {
            differ += 1;
            let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
            if differ == 1 {
                let lo = at.saturating_sub(6);
                eprintln!(
                    "first run:\n{}\nsecond run:\n{}",
                    a[lo..(at + 3).min(a.len())].join("\n"),
                    b[lo..(at + 3).min(b.len())].join("\n")
                );
            }
        }
    }
    assert_eq!(differ, 0, "{differ} of {n} schedules ran differently twice");
}
