//! Client-side simulation check of leader election (feature `testing`), next to the script
//! model check in `tests/model_election.rs`.
//!
//! One proptest case is one schedule: 2 to 5 candidate clients and 1 or 2 observer clients,
//! each a real [`LockClient`] with its own options, on one election. Candidates campaign
//! (untimed, with a timeout, cancelled by dropping the future, or `try_campaign`), and once
//! leading hold a while, proclaim new values (separators and newlines included), lose their
//! network for a while (a partition longer than the lease), then resign, drop the
//! [`Leadership`], or crash; a client may also crash at any instant of a campaign, waiting or
//! leading. A crash makes the client's connection black-hole every later request (nothing is
//! applied, no reply or wake-up comes back), so it neither renews nor releases, and its
//! `Leadership` is kept unused until the case ends: the server lets its claims lapse.
//! Observer clients run [`Election::observe`] and log every state they yield.
//!
//! Every client talks to one shared [`MemoryStore`] through its own fault-injecting wrapper,
//! which forwards `proclaim` and `leader` too: the server's `now` is the paused tokio clock;
//! requests and replies are delayed and some replies lost after the server applied the
//! request, and the wake-ups the server publishes reach each client's own hub at once or, now
//! and then, never, until [`FAULTS_UNTIL`].
//!
//! The oracle, checked after every request the server applies and every few virtual ms:
//! - `TwoLeaders`: no two `Leadership`s say `is_held()` at the same instant (crashed ones
//!   included: a paused process that woke up would trust them);
//! - `HeldNotHolder`: a `Leadership` that says `is_held()` is the store's live holder, with the
//!   store's fence as its term;
//! - `TrustPastLease`: its `valid_until()` is not later than the holder's server deadline;
//! - `ValueMismatch`: while it says `is_held()` (and no proclaim of its own is in flight or
//!   failed without an answer), the store's `leader()` reports its value and term;
//! - `NeverProclaimed` / `TermRegressed`: an observer yields only (value, term) pairs some
//!   leader proclaimed, and never a term lower than one it yielded before;
//! - `Stuck`: every client's script finishes before [`GIVE_UP`] of virtual time (a waiting
//!   candidate is served once the leaders before it resign or their leases lapse);
//! - `Leak` and `NoConvergence`, in the epilogue once the scripts ended and faults stopped:
//!   after every lease and heartbeat window has passed nobody holds or waits, and at each
//!   checkpoint every observer's last yielded state equals what `leader()` on the store says,
//!   within its retry interval plus 100 ms; the checkpoints are: nobody leads; a fresh leader A
//!   leads; A crashed and candidate B, which was waiting, won within A's server deadline plus
//!   one retry interval (`Stuck` otherwise), with a term above A's; B proclaimed a new value;
//!   B resigned or dropped its leadership.
//!
//! `finds_planted_*` prove the oracle bites: wake-ups swallowed for observers whose retry
//! interval is an hour (`NoConvergence`), a wrapper whose `proclaim` for a non-holder acts as
//! the live holder's (`ValueMismatch`), and the library's own
//! `testing::Bug::HandOffTrustsHeartbeat` put back (`TrustPastLease`). `SIM_CASES` raises the
//! number of schedules (default 1 000), `SIM_PLANTED_CASES` the searches' (default 300).

#[cfg(not(feature = "testing"))]
compile_error!(
    "the simulation needs the `testing` feature: run `cargo nextest run --all-targets \
     --all-features` (or `cargo test --all-features`)"
);

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Claim, Family, MemoryStore, Snapshot, Store};
use redis_locks::testing::{self, WakeHub};
use redis_locks::{Election, Error, LeaderInfo, Leadership, LockClient, Result};
use tokio::time::Instant;

mod support;

use support::rng::xorshift;
use support::sim_store::{self, on_paused_clock, ready, Call, Fault, Reply, Request, SimConn};
use support::time::ms;
use support::{env_u32, serial};

const NAME: &str = "leader";
const START_MS: u64 = 1_000_000;
/// Faults are injected into requests sent, and wake-ups published, before this instant
/// (virtual ms from the start).
const FAULTS_UNTIL: u64 = 3_000;
/// A script not finished by then is stuck.
const GIVE_UP: Duration = Duration::from_secs(600);
/// How often the oracle also runs between requests (virtual ms; odd, so it falls between
/// the round sleeps of the scripts).
const TICK_MS: u64 = 7;

const VALUES: [&str; 6] = ["w:9000", "", "a|b|c", "x\ny", "|", "7|1|"];

/// What the runs did, over every case: the main test requires each to have happened.
static WON: AtomicU64 = AtomicU64::new(0);
static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
static CANCELLED: AtomicU64 = AtomicU64::new(0);
static REFUSED_TRY: AtomicU64 = AtomicU64::new(0);
static PROCLAIMED: AtomicU64 = AtomicU64::new(0);
static RESIGNED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static CRASHED_LEADING: AtomicU64 = AtomicU64::new(0);
static CRASHED_WAITING: AtomicU64 = AtomicU64::new(0);
static LOST_IN_PARTITION: AtomicU64 = AtomicU64::new(0);
static LOST_REPLIES: AtomicU64 = AtomicU64::new(0);
static LOST_WAKE_UPS: AtomicU64 = AtomicU64::new(0);
static OBSERVED_CHANGES: AtomicU64 = AtomicU64::new(0);

// ---- schedules -----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Hold {
    Sleep(u64),
    /// `leadership.proclaim(VALUES[i])`.
    Proclaim(usize),
    /// The client's network is gone for this long (requests fail unapplied); it sleeps
    /// meanwhile.
    Partition(u64),
}

#[derive(Clone, Debug)]
enum End {
    Resign,
    Drop,
    Crash,
}

#[derive(Clone, Debug)]
enum Op {
    Campaign {
        value: usize,
        try_only: bool,
        timeout_ms: Option<u64>,
        cancel_ms: Option<u64>,
        /// The client crashes this long after the campaign started, whatever it reached.
        die_after: Option<u64>,
        hold: Vec<Hold>,
        end: End,
    },
    Sleep(u64),
}

#[derive(Clone, Debug)]
struct ClientSpec {
    lease_ms: u64,
    heartbeat_ms: Option<u64>,
    retry_ms: u64,
    seed: u64,
    faulty: bool,
    ops: Vec<Op>,
}

#[derive(Clone, Debug)]
struct ObserverSpec {
    retry_ms: u64,
    seed: u64,
    faulty: bool,
}

#[derive(Clone, Debug)]
struct Epilogue {
    lease_a: u64,
    retry_b: u64,
    proclaim_b: bool,
    resign_b: bool,
}

#[derive(Clone, Debug)]
struct Schedule {
    seed: u64,
    clients: Vec<ClientSpec>,
    observers: Vec<ObserverSpec>,
    epilogue: Epilogue,
}

/// How the schedules are drawn: the main check, or aimed at one planted bug.
#[derive(Clone, Copy)]
struct Profile {
    /// Weight of a partition among the hold steps.
    partitions: u32,
    /// Chance that a campaign has a timeout.
    timeouts: f64,
}

const MAIN: Profile = Profile {
    partitions: 1,
    timeouts: 0.3,
};
const PARTITIONS: Profile = Profile {
    partitions: 4,
    timeouts: 0.1,
};

fn hold(p: Profile) -> impl Strategy<Value = Hold> {
    prop_oneof![
        4 => (0u64..300).prop_map(Hold::Sleep),
        3 => (0..VALUES.len()).prop_map(Hold::Proclaim),
        p.partitions => prop::sample::select(vec![150u64, 400, 1_200]).prop_map(Hold::Partition),
    ]
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![3 => Just(End::Resign), 2 => Just(End::Drop), 1 => Just(End::Crash)]
}

fn op(p: Profile) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            0..VALUES.len(),
            prop::bool::weighted(0.15),
            prop::option::weighted(p.timeouts, 1u64..600),
            prop::option::weighted(0.2, 0u64..100),
            prop::option::weighted(0.15, 0u64..800),
            prop::collection::vec(hold(p), 0..4),
            end(),
        )
            .prop_map(|(value, try_only, timeout_ms, cancel_ms, die_after, hold, end)| {
                Op::Campaign { value, try_only, timeout_ms, cancel_ms, die_after, hold, end }
            }),
        1 => (0u64..150).prop_map(Op::Sleep),
    ]
}

fn schedule(p: Profile) -> impl Strategy<Value = Schedule> {
    let client = (
        prop::sample::select(vec![100u64, 300, 1_000]),
        prop::option::weighted(0.3, prop::sample::select(vec![50u64, 200, 1_000])),
        prop::sample::select(vec![20u64, 100, 300]),
        any::<u64>(),
        any::<bool>(),
        prop::collection::vec(op(p), 1..6),
    )
        .prop_map(
            |(lease_ms, heartbeat_ms, retry_ms, seed, faulty, ops)| ClientSpec {
                lease_ms,
                heartbeat_ms,
                retry_ms,
                seed,
                faulty,
                ops,
            },
        );
    let observer = (
        prop::sample::select(vec![50u64, 200, 500]),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(retry_ms, seed, faulty)| ObserverSpec {
            retry_ms,
            seed,
            faulty,
        });
    let epilogue = (
        prop::sample::select(vec![100u64, 300, 1_000]),
        prop::sample::select(vec![20u64, 100, 300]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(lease_a, retry_b, proclaim_b, resign_b)| Epilogue {
            lease_a,
            retry_b,
            proclaim_b,
            resign_b,
        });
    (
        any::<u64>(),
        prop::collection::vec(client, 2..6),
        prop::collection::vec(observer, 1..3),
        epilogue,
    )
        .prop_map(|(seed, clients, observers, epilogue)| Schedule {
            seed,
            clients,
            observers,
            epilogue,
        })
}

/// A bug planted in the harness (or, for `Library`, reverted in the library through
/// `testing::plant`), to prove the oracle finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Planted {
    /// One of the library's own client-side fixes reverted (`testing::Bug`).
    Library(testing::Bug),
    /// Observers get no wake-up and re-read only every hour (or at a leader's lease end).
    SwallowedWakeUps,
    /// A `proclaim` the store refuses (the claim does not hold) is applied again as the live
    /// holder's: a deposed leader's late proclaim or retract changes the current leader.
    ProclaimForNonHolders,
}

// ---- the oracle ----------------------------------------------------------------------------

/// A leadership the oracle watches. It lives in `slot` while its client holds it; while a
/// proclaim of its own is in flight it is out of the slot and `frozen` keeps its trust and
/// term as they were (its trust only grows meanwhile, so checking the old one is sound).
struct Entry {
    client: String,
    slot: StdMutex<Option<Leadership>>,
    frozen: StdMutex<Option<(Instant, u64)>>,
    /// False once a proclaim failed without an answer: the store may hold the new value.
    value_known: AtomicBool,
}

impl Entry {
    fn take(&self, freeze: bool) -> Leadership {
        let l = self.slot.lock().unwrap().take().expect("the leadership");
        if freeze {
            *self.frozen.lock().unwrap() = Some((l.valid_until(), l.term()));
        }
        l
    }

    fn put_back(&self, l: Leadership) {
        *self.slot.lock().unwrap() = Some(l);
        *self.frozen.lock().unwrap() = None;
    }
}

/// What an observer yielded.
#[derive(Default)]
struct ObserverLog {
    last: StdMutex<Option<Option<(String, u64)>>>,
    max_term: AtomicU64,
    closed: AtomicBool,
}

/// A client's wake-up hub: (hub, faulty, swallows everything, rng).
type ClientHub = (Arc<WakeHub>, bool, bool, u64);

struct World {
    store: Arc<MemoryStore>,
    keys: LockKeys,
    start: Instant,
    planted: Option<Planted>,
    entries: StdMutex<Vec<Arc<Entry>>>,
    /// Every (value, term) the store accepted from a proclaim.
    proclaimed: StdMutex<HashSet<(String, u64)>>,
    observers: StdMutex<Vec<Arc<ObserverLog>>>,
    /// The first violations found (the case stops at the first one).
    violations: StdMutex<Vec<String>>,
    failed: tokio::sync::Notify,
    /// What crashed clients left (their clients), kept unused until the case ends.
    graveyard: StdMutex<Vec<Box<dyn std::any::Any + Send>>>,
    /// The client hubs wake-ups are delivered to.
    hubs: StdMutex<Vec<ClientHub>>,
}

fn pair(info: &Option<LeaderInfo>) -> Option<(String, u64)> {
    info.as_ref().map(|l| (l.value.clone(), l.term))
}

impl World {
    fn vms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).expect("ms")
    }

    fn now(&self) -> u64 {
        START_MS + self.vms()
    }

    fn faults(&self) -> bool {
        self.vms() < FAULTS_UNTIL
    }

    fn violation(&self, what: String) {
        let mut violations = self.violations.lock().unwrap();
        if violations.len() < 20 {
            violations.push(format!("t+{}: {what}", self.vms()));
        }
        self.failed.notify_one();
    }

    fn snapshot(&self) -> Snapshot {
        ready(
            self.store
                .inspect(&self.keys, Family::TicketQueue, Some(self.now())),
        )
        .expect("inspect")
    }

    fn leader(&self) -> Option<LeaderInfo> {
        ready(self.store.leader(&self.keys, Some(self.now()))).expect("leader")
    }

    /// The store publishes a wake-up: each client hub gets it at once, or (during faults, for
    /// a faulty client, 1 in 10) never; swallowing hubs never.
    fn publish(&self, channel: &str, message: &str) {
        let faults = self.faults();
        let mut hubs = self.hubs.lock().unwrap();
        for (hub, faulty, swallow, rng) in hubs.iter_mut() {
            if *swallow {
                continue;
            }
            if faults && *faulty && xorshift(rng).is_multiple_of(10) {
                LOST_WAKE_UPS.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            testing::deliver(hub, channel, message);
        }
    }

    /// Checks every watched leadership against the store now.
    fn check(&self) {
        let snap = self.snapshot();
        let leader = self.leader();
        let entries = self.entries.lock().unwrap().clone();
        let mut held = Vec::new();
        for e in &entries {
            let (is_held, until, term, value) = match &*e.slot.lock().unwrap() {
                Some(l) => (
                    l.is_held(),
                    l.valid_until(),
                    l.term(),
                    Some(l.value().to_owned()),
                ),
                None => match *e.frozen.lock().unwrap() {
                    Some((until, term)) => (Instant::now() < until, until, term, None),
                    None => continue,
                },
            };
            if !is_held {
                continue;
            }
            held.push(format!("{} (term {term})", e.client));
            let holder = match snap.holders.as_slice() {
                [h] if snap.fence == term => h,
                _ => {
                    self.violation(format!(
                        "HeldNotHolder: {} says is_held() with term {term}, the store has fence {} and holders {:?}",
                        e.client, snap.fence, snap.holders
                    ));
                    continue;
                }
            };
            let server_until = Instant::now() + ms(holder.remaining_ms);
            if until > server_until + ms(1) {
                self.violation(format!(
                    "TrustPastLease: {} trusts {:?} past its server deadline",
                    e.client,
                    until - server_until
                ));
            }
            if let Some(value) = value
                && e.value_known.load(Ordering::Relaxed)
                && pair(&leader) != Some((value.clone(), term))
            {
                self.violation(format!(
                        "ValueMismatch: {} leads with {value:?} (term {term}), the store's leader() is {leader:?}",
                        e.client
                    ));
            }
        }
        if held.len() > 1 {
            self.violation(format!("TwoLeaders: {held:?} all say is_held()"));
        }
    }

    fn bury(&self, what: Box<dyn std::any::Any + Send>) {
        self.graveyard.lock().unwrap().push(what);
    }

    fn watch(&self, entry: Arc<Entry>) {
        self.entries.lock().unwrap().push(entry);
    }

    fn unwatch(&self, entry: &Arc<Entry>) {
        self.entries
            .lock()
            .unwrap()
            .retain(|e| !Arc::ptr_eq(e, entry));
    }

    /// Waits until every observer's last yielded state is the store's leader, at most
    /// `bound`; a `NoConvergence` violation otherwise.
    async fn converge(&self, label: &str, bound: Duration) {
        let until = Instant::now() + bound;
        loop {
            let want = pair(&self.leader());
            let observers = self.observers.lock().unwrap().clone();
            let behind: Vec<_> = observers
                .iter()
                .enumerate()
                .filter(|(_, o)| o.last.lock().unwrap().as_ref() != Some(&want))
                .map(|(i, o)| format!("observer {i}: {:?}", o.last.lock().unwrap()))
                .collect();
            if behind.is_empty() {
                return;
            }
            if Instant::now() >= until {
                self.violation(format!(
                    "NoConvergence ({label}): the store's leader is {want:?} for {bound:?}, but {behind:?}"
                ));
                return;
            }
            tokio::time::sleep(ms(5)).await;
        }
    }
}

// ---- the fault-injecting connection --------------------------------------------------------

/// One client's end of its connection ([`SimConn`], unordered): a request is maybe delayed on
/// its way, applied at the virtual `now` (not at all when partitioned or dead), checked by the
/// oracle, its reply maybe delayed or lost.
struct Link {
    world: Arc<World>,
    name: String,
    hub: Arc<WakeHub>,
    faulty: bool,
    dead: AtomicBool,
    partition_until: StdMutex<Option<Instant>>,
    rng: StdMutex<u64>,
}

type Conn = SimConn<Link>;

fn connect(world: &Arc<World>, name: String, faulty: bool, seed: u64, swallow: bool) -> Arc<Conn> {
    let hub = testing::local_hub();
    world
        .hubs
        .lock()
        .unwrap()
        .push((hub.clone(), faulty, swallow, seed | 1));
    let link = Link {
        world: world.clone(),
        name,
        hub: hub.clone(),
        faulty,
        dead: AtomicBool::new(false),
        partition_until: StdMutex::new(None),
        rng: StdMutex::new(seed | 1),
    };
    SimConn::new(link, hub)
}

impl Link {
    fn next(&self) -> u64 {
        xorshift(&mut self.rng.lock().unwrap())
    }

    /// From now on nothing this client sends is applied and nothing comes back.
    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        let mut hubs = self.world.hubs.lock().unwrap();
        hubs.retain(|(hub, ..)| !Arc::ptr_eq(hub, &self.hub));
    }

    /// `proclaim` on the store, and (planted) again as the live holder's when refused.
    fn proclaim(&self, lock: &LockKeys, claim: &Claim, value: Option<&str>) -> Result<bool> {
        let (world, now) = (&self.world, self.world.now());
        let store = &world.store;
        let mut done = ready(store.proclaim(lock, claim, value, Some(now)))?;
        if !done && world.planted == Some(Planted::ProclaimForNonHolders) {
            let snap = ready(store.inspect(lock, Family::TicketQueue, Some(now)))?;
            if let [holder] = snap.holders.as_slice() {
                let mut as_holder = claim.clone();
                as_holder.token = holder.token.clone();
                done = ready(store.proclaim(lock, &as_holder, value, Some(now)))?;
            }
        }
        if done
            && value.is_some()
            && let Some(info) = ready(store.leader(lock, Some(now)))?
        {
            world
                .proclaimed
                .lock()
                .unwrap()
                .insert((info.value, info.term));
        }
        Ok(done)
    }
}

impl sim_store::Link for Link {
    const ORDERED: bool = false;

    fn send(&self, _index: u64, _request: &Request) -> Option<Fault> {
        if self.dead() {
            return None;
        }
        let faults = self.faulty && self.world.faults();
        let roll = if faults { self.next() % 100 } else { 100 };
        Some(match roll {
            0..15 => Fault::RequestDelay(self.next() % 40),
            // Sent into a partition: it fails unapplied, there is no reply to delay or lose.
            _ if self.cut() => Fault::None,
            15..30 => Fault::ReplyDelay(self.next() % 40),
            30..37 => {
                LOST_REPLIES.fetch_add(1, Ordering::Relaxed);
                Fault::LostReply(0)
            }
            _ => Fault::None,
        })
    }

    fn dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn cut(&self) -> bool {
        self.partition_until
            .lock()
            .unwrap()
            .is_some_and(|until| Instant::now() < until)
    }

    fn apply(&self, request: &Request, _fault: Fault) -> Reply {
        let reply = match &request.call {
            Call::Proclaim(claim, value) => {
                Reply::Bool(self.proclaim(&request.lock, claim, value.as_deref()))
            }
            _ => request.apply(&self.world.store, self.world.now()),
        };
        self.world.check();
        reply
    }
}

// ---- running a schedule --------------------------------------------------------------------

fn client_on(conn: Arc<Conn>, lease_ms: u64, retry_ms: u64, heartbeat_ms: Option<u64>) -> Election {
    let mut builder = LockClient::builder()
        .lease(ms(lease_ms))
        .retry_interval(ms(retry_ms));
    if let Some(hb) = heartbeat_ms {
        builder = builder.heartbeat(ms(hb));
    }
    builder.store(conn).expect("client").election(NAME)
}

/// Crashes the client: its connection black-holes everything from now on.
fn crash(conn: &Conn) {
    conn.die();
}

/// One campaign of a client, and what it does once leading.
async fn campaign(world: &Arc<World>, election: &Election, conn: &Arc<Conn>, op: &Op) {
    let Op::Campaign {
        value,
        try_only,
        timeout_ms,
        cancel_ms,
        hold,
        end,
        ..
    } = op
    else {
        return;
    };
    let value = format!("{}:{}", conn.name, VALUES[*value]);
    let outcome = if *try_only {
        election.try_campaign(value).await
    } else {
        let mut campaign = election.campaign(value);
        if let Some(t) = timeout_ms {
            campaign = campaign.timeout(ms(*t));
        }
        match cancel_ms {
            Some(c) => match tokio::time::timeout(ms(*c), campaign).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    CANCELLED.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            },
            None => campaign.await,
        }
    };
    let leadership = match outcome {
        Ok(l) => l,
        Err(e) if e.is_timeout() => {
            TIMED_OUT.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) if e.is_would_block() => {
            REFUSED_TRY.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) if e.is_connection() || matches!(e, Error::LeaseLost { .. }) => return,
        Err(e) => {
            world.violation(format!("UnexpectedError: {} campaign: {e}", conn.name));
            return;
        }
    };
    WON.fetch_add(1, Ordering::Relaxed);
    let entry = Arc::new(Entry {
        client: conn.name.clone(),
        slot: StdMutex::new(Some(leadership)),
        frozen: StdMutex::new(None),
        value_known: AtomicBool::new(true),
    });
    world.watch(entry.clone());
    world.check();
    for step in hold {
        match step {
            Hold::Sleep(n) => tokio::time::sleep(ms(*n)).await,
            Hold::Proclaim(v) => {
                let mut l = entry.take(true);
                let r = l.proclaim(format!("{}:{}", conn.name, VALUES[*v])).await;
                match &r {
                    Ok(()) => {
                        PROCLAIMED.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::LeaseLost { .. }) => {}
                    Err(e) if e.is_connection() => {
                        entry.value_known.store(false, Ordering::Relaxed);
                    }
                    Err(e) => {
                        world.violation(format!("UnexpectedError: {} proclaim: {e}", conn.name))
                    }
                }
                entry.put_back(l);
                world.check();
            }
            Hold::Partition(n) => {
                *conn.partition_until.lock().unwrap() = Some(Instant::now() + ms(*n));
                tokio::time::sleep(ms(*n)).await;
                let lost = entry
                    .slot
                    .lock()
                    .unwrap()
                    .as_ref()
                    .is_some_and(|l| !l.is_held());
                if lost {
                    LOST_IN_PARTITION.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    match end {
        End::Resign => {
            let l = entry.take(false);
            world.unwatch(&entry);
            match l.resign().await {
                Ok(_) => {
                    RESIGNED.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.is_connection() => {}
                Err(e) => world.violation(format!("UnexpectedError: {} resign: {e}", conn.name)),
            }
        }
        End::Drop => {
            let l = entry.take(false);
            world.unwatch(&entry);
            drop(l);
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        End::Crash => {
            // The leadership stays in its entry, unused, until the case ends.
            CRASHED_LEADING.fetch_add(1, Ordering::Relaxed);
            crash(conn);
        }
    }
}

async fn run_client(world: Arc<World>, index: usize, spec: ClientSpec) {
    let conn = connect(&world, format!("c{index}"), spec.faulty, spec.seed, false);
    let election = client_on(
        conn.clone(),
        spec.lease_ms,
        spec.retry_ms,
        spec.heartbeat_ms,
    );
    for op in &spec.ops {
        if conn.dead.load(Ordering::SeqCst) {
            break;
        }
        match op {
            Op::Sleep(n) => tokio::time::sleep(ms(*n)).await,
            Op::Campaign { die_after, .. } => {
                let run = campaign(&world, &election, &conn, op);
                let mut run = std::pin::pin!(run);
                match die_after {
                    None => run.await,
                    Some(d) => {
                        tokio::select! {
                            biased;
                            () = &mut run => {}
                            () = tokio::time::sleep(ms(*d)) => {
                                let leading = world
                                    .entries
                                    .lock()
                                    .unwrap()
                                    .iter()
                                    .any(|e| e.client == conn.name);
                                if leading {
                                    CRASHED_LEADING.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    CRASHED_WAITING.fetch_add(1, Ordering::Relaxed);
                                }
                                crash(&conn);
                            }
                        }
                    }
                }
            }
        }
    }
    if conn.dead.load(Ordering::SeqCst) {
        // A dead process does not shut its client down: kept unused until the case ends.
        world.bury(Box::new(election));
    }
}

/// Runs an observer client until the case ends, logging what it yields.
async fn run_observer(world: Arc<World>, election: Election, log: Arc<ObserverLog>) {
    let mut observer = election.observe();
    while let Some(state) = observer.next().await {
        OBSERVED_CHANGES.fetch_add(1, Ordering::Relaxed);
        let seen = pair(&state.into_leader());
        if let Some((value, term)) = &seen {
            if !world
                .proclaimed
                .lock()
                .unwrap()
                .contains(&(value.clone(), *term))
            {
                world.violation(format!(
                    "NeverProclaimed: an observer yields {value:?} with term {term}"
                ));
            }
            let before = log.max_term.fetch_max(*term, Ordering::Relaxed);
            if *term < before {
                world.violation(format!(
                    "TermRegressed: an observer yields term {term} after term {before}"
                ));
            }
        }
        *log.last.lock().unwrap() = Some(seen);
    }
    log.closed.store(true, Ordering::Relaxed);
    world.violation(format!("ObserverClosed: {:?}", observer.closed_because()));
}

/// The epilogue, once every script ended: nobody is left; a fresh leader A, a crash, the
/// waiting B takes over within A's lease; B proclaims; B steps down. Observers converge at
/// each checkpoint.
async fn epilogue(world: &Arc<World>, schedule: &Schedule, lease_max: u64, hb_max: u64) {
    let observe_bound = ms(schedule
        .observers
        .iter()
        .map(|o| o.retry_ms)
        .max()
        .unwrap_or(0)
        + 100);
    // Every crashed claim lapses, every background release is through.
    let settle = ms(FAULTS_UNTIL.max(world.vms()) + lease_max + hb_max + 500);
    tokio::time::sleep_until(world.start + settle).await;
    let snap = world.snapshot();
    if !snap.holders.is_empty() || !snap.waiters.is_empty() {
        world.violation(format!(
            "Leak: after every script and lease, holders {:?} waiters {:?}",
            snap.holders, snap.waiters
        ));
    }
    world.converge("after the scripts", observe_bound).await;

    let e = &schedule.epilogue;
    let conn_a = connect(world, "A".to_owned(), false, 1, false);
    let a = client_on(conn_a.clone(), e.lease_a, 100, None);
    let leadership_a = match tokio::time::timeout(ms(1_000), a.campaign("A")).await {
        Ok(Ok(l)) => l,
        other => {
            world.violation(format!(
                "Stuck: a campaign on a free election: {:?}",
                other.map(|r| r.map(|l| l.term()))
            ));
            return;
        }
    };
    let term_a = leadership_a.term();
    let entry_a = Arc::new(Entry {
        client: "A".to_owned(),
        slot: StdMutex::new(Some(leadership_a)),
        frozen: StdMutex::new(None),
        value_known: AtomicBool::new(true),
    });
    world.watch(entry_a);
    world.converge("A leads", observe_bound).await;

    let conn_b = connect(world, "B".to_owned(), false, 2, false);
    let b = client_on(conn_b, 1_000, e.retry_b, None);
    let waiting = tokio::spawn(async move { b.campaign("B").await.map(|l| (l, b)) });
    let queued = Instant::now() + ms(1_000);
    while world.snapshot().waiters.is_empty() {
        if Instant::now() > queued {
            world.violation("Stuck: B never queued".to_owned());
            return;
        }
        tokio::time::sleep(ms(1)).await;
    }
    let deadline_a = Instant::now()
        + ms(world
            .snapshot()
            .holders
            .first()
            .map_or(0, |h| h.remaining_ms));
    crash(&conn_a);
    world.bury(Box::new(a));
    let bound = deadline_a + ms(e.retry_b + 20);
    let (leadership_b, b) = match tokio::time::timeout_at(bound, waiting).await {
        Ok(Ok(Ok(won))) => won,
        other => {
            world.violation(format!(
                "Stuck: B did not take over within A's lease and one retry interval: {:?}",
                other.map(|r| r.map(|r| r.map(|(l, _)| l.term())))
            ));
            return;
        }
    };
    if leadership_b.term() <= term_a {
        world.violation(format!(
            "TermRegressed: B's term {} after A's {term_a}",
            leadership_b.term()
        ));
    }
    let entry_b = Arc::new(Entry {
        client: "B".to_owned(),
        slot: StdMutex::new(Some(leadership_b)),
        frozen: StdMutex::new(None),
        value_known: AtomicBool::new(true),
    });
    world.watch(entry_b.clone());
    world.converge("B took over", observe_bound).await;
    if e.proclaim_b {
        let mut l = entry_b.take(true);
        if let Err(err) = l.proclaim("B|2\n").await {
            world.violation(format!("UnexpectedError: B proclaim: {err}"));
        }
        entry_b.put_back(l);
        world.converge("B proclaimed", observe_bound).await;
    }
    let l = entry_b.take(false);
    world.unwatch(&entry_b);
    if e.resign_b {
        if let Err(err) = l.resign().await {
            world.violation(format!("UnexpectedError: B resign: {err}"));
        }
    } else {
        drop(l);
    }
    world.converge("B stepped down", observe_bound).await;
    drop(b);
}

async fn run(schedule: Schedule, planted: Option<Planted>) -> std::result::Result<(), String> {
    testing::seed(schedule.seed);
    let store = Arc::new(MemoryStore::new());
    let world = Arc::new(World {
        store: store.clone(),
        keys: LockKeys::new("rl", NAME).expect("name"),
        start: Instant::now(),
        planted,
        entries: StdMutex::default(),
        proclaimed: StdMutex::default(),
        observers: StdMutex::default(),
        violations: StdMutex::default(),
        failed: tokio::sync::Notify::new(),
        graveyard: StdMutex::default(),
        hubs: StdMutex::default(),
    });
    let tap = Arc::downgrade(&world);
    assert!(testing::divert(store.hub(), move |channel, message| {
        if let Some(world) = tap.upgrade() {
            world.publish(channel, message);
        }
    }));
    let ticker = {
        let world = world.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ms(TICK_MS)).await;
                world.check();
            }
        })
    };
    let mut background = vec![ticker];
    for (i, spec) in schedule.observers.iter().enumerate() {
        let swallow = planted == Some(Planted::SwallowedWakeUps);
        let retry = if swallow { 3_600_000 } else { spec.retry_ms };
        let conn = connect(&world, format!("o{i}"), spec.faulty, spec.seed, swallow);
        let election = client_on(conn, 1_000, retry, None);
        let log = Arc::new(ObserverLog::default());
        world.observers.lock().unwrap().push(log.clone());
        background.push(tokio::spawn(run_observer(world.clone(), election, log)));
    }
    // The case stops at its first violation.
    let scripts = async {
        let mut tasks = Vec::new();
        for (i, spec) in schedule.clients.iter().enumerate() {
            tasks.push(tokio::spawn(run_client(world.clone(), i, spec.clone())));
        }
        let mut stuck = false;
        for (i, task) in tasks.into_iter().enumerate() {
            match tokio::time::timeout_at(world.start + GIVE_UP, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    world.violation(format!("client {i} panicked: {e}"));
                    stuck = true;
                }
                Err(_) => {
                    world.violation(format!("Stuck: client {i} did not finish its script"));
                    stuck = true;
                }
            }
        }
        if !stuck {
            let lease_max = schedule
                .clients
                .iter()
                .map(|c| c.lease_ms)
                .max()
                .unwrap_or(0);
            let hb_max = schedule
                .clients
                .iter()
                .filter_map(|c| c.heartbeat_ms)
                .max()
                .unwrap_or(0);
            epilogue(&world, &schedule, lease_max, hb_max).await;
        }
    };
    tokio::select! {
        biased;
        () = world.failed.notified() => {}
        () = scripts => {}
    }
    for task in background {
        task.abort();
    }
    // What crashed clients left is dropped only now that the case is over (their
    // connections apply nothing, so their destructors change nothing on the server). Not
    // `mem::forget`: what they hold keeps the runtime's driver, and its files, alive.
    let entries: Vec<_> = world.entries.lock().unwrap().drain(..).collect();
    let graveyard: Vec<_> = world.graveyard.lock().unwrap().drain(..).collect();
    drop((entries, graveyard));
    let violations = world.violations.lock().unwrap().clone();
    match violations.first() {
        Some(first) => Err(format!("{first} ({} violations)", violations.len())),
        None => Ok(()),
    }
}

fn simulate(schedule: Schedule, planted: Option<Planted>) -> std::result::Result<(), String> {
    testing::unplant_all();
    if let Some(Planted::Library(bug)) = planted {
        testing::plant(bug);
    }
    on_paused_clock(run(schedule, planted))
}

#[test]
fn elections_stay_honest_and_observers_converge() {
    let _serial = serial();
    let cases = env_u32("SIM_CASES", 1_000);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(e) = runner.run(&schedule(MAIN), |s| {
        simulate(s, None).map_err(TestCaseError::fail)
    }) {
        panic!("{e}");
    }
    let mut counts = Vec::new();
    for (what, count) in [
        ("campaigns won", &WON),
        ("campaigns timed out", &TIMED_OUT),
        ("campaigns cancelled", &CANCELLED),
        ("try_campaign refused", &REFUSED_TRY),
        ("proclaims", &PROCLAIMED),
        ("resignations", &RESIGNED),
        ("leaderships dropped", &DROPPED),
        ("crashes while leading", &CRASHED_LEADING),
        ("crashes while waiting", &CRASHED_WAITING),
        ("leaderships lost in a partition", &LOST_IN_PARTITION),
        ("lost replies", &LOST_REPLIES),
        ("lost wake-ups", &LOST_WAKE_UPS),
        ("observed changes", &OBSERVED_CHANGES),
    ] {
        let n = count.load(Ordering::Relaxed);
        counts.push(format!("{what}: {n}"));
        assert!(
            n > u64::from(cases) / 20,
            "only {n} {what} in {cases} cases"
        );
    }
    eprintln!("{cases} schedules: {}", counts.join(", "));
}

/// Searches schedules of `profile` with `planted` (a fixed proptest seed, so the search is
/// the same on every run); the violation found must be one of `want`.
fn finds(planted: Planted, profile: Profile, want: &[&str]) {
    let _serial = serial();
    let config = Config {
        cases: env_u32("SIM_PLANTED_CASES", 300),
        max_shrink_iters: 16,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let result = runner.run(&schedule(profile), |s| {
        simulate(s, Some(planted)).map_err(TestCaseError::fail)
    });
    testing::unplant_all();
    match result {
        Err(TestError::Fail(why, _)) => {
            eprintln!("{planted:?}: {why}");
            assert!(
                want.iter().any(|w| why.message().contains(w)),
                "{planted:?}: expected a violation of {want:?}, found {why}"
            );
        }
        other => panic!("{planted:?} planted: no counterexample ({other:?})"),
    }
}

#[test]
fn finds_planted_swallowed_wake_ups() {
    finds(Planted::SwallowedWakeUps, MAIN, &["NoConvergence"]);
}

#[test]
fn finds_planted_proclaim_for_non_holders() {
    finds(
        Planted::ProclaimForNonHolders,
        PARTITIONS,
        &["ValueMismatch"],
    );
}

#[test]
fn finds_planted_hand_off_trusts_heartbeat() {
    finds(
        Planted::Library(testing::Bug::HandOffTrustsHeartbeat),
        MAIN,
        &["TrustPastLease", "TwoLeaders", "HeldNotHolder"],
    );
}
