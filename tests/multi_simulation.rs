//! Client-side simulation check of multi-locks (feature `testing`), next to the script model
//! check in `tests/model_multi.rs`.
//!
//! One proptest case is one schedule: 2 to 5 clients, each a real [`LockClient`] with its own
//! options, running a script of multi-locks over random subsets of four names (given in
//! random orders, some read, some written), single-name Mutex and RwLock holds on the same
//! names, timeouts, and waits cancelled by dropping their future, each hold kept a while then
//! released or dropped. Every client talks to one shared [`MemoryStore`] through its own
//! fault-injecting wrapper: the server's `now` is the paused tokio clock, requests and
//! replies are delayed, and some replies are lost after the server applied the request (the
//! client gets a connection error), until [`FAULTS_UNTIL`]. Half the schedules run with the
//! wrapper saying that one step takes one hash slot, as on Redis Cluster, so the multi-lock
//! takes its parts slot by slot, holding the earlier slots while it waits.
//!
//! The oracle, checked after every request the server applies and at the end:
//! - `HeldNotHolder`: a guard that says `is_held()` is, on the server, a live holder of every
//!   part in the mode it claims (so no two conflicting guards both say `is_held()`);
//! - `TrustPastLease`: its `valid_until()` is not later than any part's server deadline;
//! - `Deadlock`: every client's script finishes before [`GIVE_UP`] of virtual time (every
//!   hold is short and every wait is eventually served, so a script that does not finish
//!   is stuck);
//! - `Orphan`: no claim is held on the server without a guard while its client has sent
//!   nothing for it for [`ORPHAN_AFTER`] or half its lease, whichever is longer (a cancelled
//!   or failed acquisition releases what it may have been granted; a multi-lock waiting for
//!   a later slot renews the earlier ones, a third of a lease apart, under the token of
//!   their grant while the later slot may be pursued by a new one);
//! - `Leak`: once every script finished and the faults ended (releases whose reply was lost
//!   are retried by token), no name is held: no part of a multi-lock was left behind by a
//!   timeout, a cancellation or a lost reply, even one whose lease has not lapsed yet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{Family, HoldKind, MemoryStore, Slot, Snapshot, Store};
use redis_locks::LockClient;
use tokio::time::Instant;

mod support;
use support::time::ms;

use support::env_u32;
use support::rng::xorshift;
use support::sim_store::{self, on_paused_clock, ready, Call, Fault, Reply, Request, SimConn};

const NAMES: [&str; 4] = ["n0", "n1", "n2", "n3"];

/// What the runs did, over every case: the test requires each to have happened.
static GRANTED: AtomicU64 = AtomicU64::new(0);
static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
static CANCELLED: AtomicU64 = AtomicU64::new(0);
static LOST_REPLIES: AtomicU64 = AtomicU64::new(0);
const START_MS: u64 = 1_000_000;
/// Faults are injected into requests sent before this instant (virtual ms from the start).
const FAULTS_UNTIL: u64 = 3_000;
/// A claim held on the server with no guard, by a client that sent nothing for it for this
/// long (more than the longest retry interval of a waiting multi-lock), was left behind.
const ORPHAN_AFTER: Duration = Duration::from_millis(700);
/// A script not finished by then is stuck.
const GIVE_UP: Duration = Duration::from_secs(600);

#[derive(Clone, Debug)]
enum Op {
    /// A multi-lock over the names in `mask` (in the order `rotate` gives), writing those in
    /// `writes`; with a timeout, or cancelled after `cancel_ms` (the future dropped).
    Multi {
        mask: u8,
        writes: u8,
        rotate: usize,
        timeout_ms: Option<u64>,
        cancel_ms: Option<u64>,
        hold_ms: u64,
        drop_it: bool,
    },
    /// A single Mutex hold of one name.
    Mutex {
        name: usize,
        hold_ms: u64,
    },
    /// A single RwLock read of one name.
    Read {
        name: usize,
        hold_ms: u64,
    },
    Sleep(u64),
}

#[derive(Clone, Debug)]
struct ClientSpec {
    lease_ms: u64,
    retry_ms: u64,
    seed: u64,
    faulty: bool,
    ops: Vec<Op>,
}

#[derive(Clone, Debug)]
struct Schedule {
    one_slot: bool,
    clients: Vec<ClientSpec>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            1u8..16,
            0u8..16,
            0usize..4,
            prop::option::weighted(0.3, 1u64..400),
            prop::option::weighted(0.3, 0u64..60),
            0u64..300,
            any::<bool>(),
        )
            .prop_map(|(mask, writes, rotate, timeout_ms, cancel_ms, hold_ms, drop_it)| {
                Op::Multi { mask, writes, rotate, timeout_ms, cancel_ms, hold_ms, drop_it }
            }),
        3 => (0usize..4, 0u64..300).prop_map(|(name, hold_ms)| Op::Mutex { name, hold_ms }),
        1 => (0usize..4, 0u64..150).prop_map(|(name, hold_ms)| Op::Read { name, hold_ms }),
        1 => (0u64..100).prop_map(Op::Sleep),
    ]
}

fn schedule() -> impl Strategy<Value = Schedule> {
    let client = (
        prop_oneof![Just(100u64), Just(300), Just(1_000), Just(3_000)],
        prop_oneof![Just(20u64), Just(100), Just(500)],
        any::<u64>(),
        any::<bool>(),
        prop::collection::vec(op(), 1..12),
    )
        .prop_map(|(lease_ms, retry_ms, seed, faulty, ops)| ClientSpec {
            lease_ms,
            retry_ms,
            seed,
            faulty,
            ops,
        });
    (any::<bool>(), prop::collection::vec(client, 2..7))
        .prop_map(|(one_slot, clients)| Schedule { one_slot, clients })
}

// ---- the oracle's view of the guards ------------------------------------------------------

/// What a live guard claims.
trait Claimed: Send + Sync {
    fn is_held(&self) -> bool;
    fn valid_until(&self) -> Instant;
    /// The tokens the store knows its parts by (a multi-lock's differ between Cluster slots
    /// when a wait withdrew an attempt and went on by a new token).
    fn tokens(&self) -> Vec<String>;
    /// Each part's name, slot and token.
    fn parts(&self) -> Vec<(String, Slot, String)>;
}

struct MultiEntry(redis_locks::MultiGuard, Vec<(String, Slot)>);

impl Claimed for MultiEntry {
    fn is_held(&self) -> bool {
        self.0.is_held()
    }
    fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }
    fn tokens(&self) -> Vec<String> {
        let names = self.1.iter().map(|(name, _)| name);
        names.filter_map(|name| self.0.token_of(name)).collect()
    }
    fn parts(&self) -> Vec<(String, Slot, String)> {
        let token = |name: &str| self.0.token_of(name).unwrap_or_default();
        let parts = self.1.iter();
        parts
            .map(|(name, slot)| (name.clone(), *slot, token(name)))
            .collect()
    }
}

struct SingleEntry<K: redis_locks::kind::Kind>(redis_locks::Guard<K>, Slot);

impl<K: redis_locks::kind::Kind> Claimed for SingleEntry<K> {
    fn is_held(&self) -> bool {
        self.0.is_held()
    }
    fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }
    fn tokens(&self) -> Vec<String> {
        vec![self.0.token()]
    }
    fn parts(&self) -> Vec<(String, Slot, String)> {
        vec![(self.0.name().to_owned(), self.1, self.0.token())]
    }
}

#[derive(Default)]
struct World {
    guards: StdMutex<Vec<Weak<dyn Claimed>>>,
    /// The last instant each token's client sent anything for it, and the lease it asked for.
    last_seen: StdMutex<std::collections::HashMap<String, (Instant, Duration)>>,
    violations: StdMutex<Vec<String>>,
    lost_replies: StdMutex<u64>,
}

fn virtual_now(start: Instant) -> u64 {
    START_MS + u64::try_from(start.elapsed().as_millis()).expect("ms")
}

impl World {
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    /// Checks every live guard against the server at the virtual instant `now`.
    fn check(&self, store: &MemoryStore, start: Instant) {
        let now = virtual_now(start);
        let guards: Vec<Arc<dyn Claimed>> = {
            let mut guards = self.guards.lock().unwrap();
            guards.retain(|g| g.strong_count() > 0);
            guards.iter().filter_map(Weak::upgrade).collect()
        };
        let live: std::collections::HashSet<String> =
            guards.iter().flat_map(|g| g.tokens()).collect();
        for name in NAMES {
            let keys = LockKeys::new("rl", name).expect("name");
            let snap: Snapshot =
                ready(store.inspect(&keys, Family::LeaseLock, Some(now))).expect("inspect");
            for h in &snap.holders {
                let quiet = self
                    .last_seen
                    .lock()
                    .unwrap()
                    .get(&h.token)
                    .is_none_or(|(seen, lease)| seen.elapsed() > ORPHAN_AFTER.max(*lease / 2));
                if quiet && !live.contains(&h.token) {
                    self.violation(format!(
                        "Orphan: {} holds {name} ({} ms left) at t+{} with no guard and nothing sent for it in {ORPHAN_AFTER:?} (or half its lease)",
                        h.token,
                        h.remaining_ms,
                        now - START_MS
                    ));
                }
            }
        }
        for g in guards {
            if !g.is_held() {
                continue;
            }
            for (name, slot, token) in g.parts() {
                let keys = LockKeys::new("rl", &name).expect("name");
                let snap: Snapshot =
                    ready(store.inspect(&keys, Family::LeaseLock, Some(now))).expect("inspect");
                let kind = if slot == Slot::Write {
                    HoldKind::Write
                } else {
                    HoldKind::Read
                };
                match snap
                    .holders
                    .iter()
                    .find(|h| h.token == token && h.kind == kind)
                {
                    None => self.violation(format!(
                        "HeldNotHolder: {token} says is_held() but is no {kind:?} holder of {name} at t+{}: {:?}",
                        now - START_MS,
                        snap.holders
                    )),
                    Some(h) => {
                        let server_until = Instant::now() + ms(h.remaining_ms);
                        if g.valid_until() > server_until + ms(1) {
                            self.violation(format!(
                                "TrustPastLease: {token} trusts {name} {:?} past its server deadline",
                                g.valid_until() - server_until
                            ));
                        }
                    }
                }
            }
        }
    }
}

// ---- the fault-injecting connection --------------------------------------------------------

/// One client's end of its connection ([`SimConn`], unordered): a request is maybe delayed on
/// its way, applied at the virtual `now`, checked by the oracle, its reply maybe delayed or
/// lost. Reads (`inspect`) go straight through, unchecked.
struct Link {
    store: Arc<MemoryStore>,
    world: Arc<World>,
    start: Instant,
    one_slot: bool,
    faulty: bool,
    rng: StdMutex<u64>,
}

impl Link {
    fn next(&self) -> u64 {
        xorshift(&mut self.rng.lock().unwrap())
    }
}

impl sim_store::Link for Link {
    const ORDERED: bool = false;

    fn one_slot_per_step(&self) -> bool {
        self.one_slot
    }

    fn send(&self, _index: u64, request: &Request) -> Option<Fault> {
        if matches!(request.call, Call::Inspect(_)) {
            return Some(Fault::None);
        }
        let (token, lease) = request
            .claim()
            .map_or(("", Duration::ZERO), |(c, lease)| (c.token.as_str(), lease));
        self.world
            .last_seen
            .lock()
            .unwrap()
            .insert(token.to_owned(), (Instant::now(), lease));
        let faults = self.faulty && virtual_now(self.start) - START_MS < FAULTS_UNTIL;
        let roll = if faults { self.next() % 100 } else { 100 };
        Some(match roll {
            0..20 => Fault::RequestDelay(self.next() % 40),
            20..35 => Fault::ReplyDelay(self.next() % 40),
            35..42 => {
                *self.world.lost_replies.lock().unwrap() += 1;
                LOST_REPLIES.fetch_add(1, Ordering::Relaxed);
                Fault::LostReply(0)
            }
            _ => Fault::None,
        })
    }

    fn apply(&self, request: &Request, _fault: Fault) -> Reply {
        let reply = request.apply(&self.store, virtual_now(self.start));
        if !matches!(request.call, Call::Inspect(_)) {
            self.world.check(&self.store, self.start);
        }
        reply
    }
}

// ---- running a schedule --------------------------------------------------------------------

fn register(world: &World, entry: Arc<dyn Claimed>) {
    world.guards.lock().unwrap().push(Arc::downgrade(&entry));
}

async fn run_client(client: LockClient, spec: ClientSpec, world: Arc<World>) {
    for op in spec.ops {
        match op {
            Op::Multi {
                mask,
                writes,
                rotate,
                timeout_ms,
                cancel_ms,
                hold_ms,
                drop_it,
            } => {
                let mut names: Vec<usize> = (0..4).filter(|i| mask & (1 << i) != 0).collect();
                let turn = rotate % names.len();
                names.rotate_left(turn);
                let reads: Vec<&str> = names
                    .iter()
                    .filter(|i| writes & (1 << *i) == 0)
                    .map(|i| NAMES[*i])
                    .collect();
                let wr: Vec<&str> = names
                    .iter()
                    .filter(|i| writes & (1 << *i) != 0)
                    .map(|i| NAMES[*i])
                    .collect();
                let parts: Vec<(String, Slot)> = reads
                    .iter()
                    .map(|n| (n.to_string(), Slot::Read))
                    .chain(wr.iter().map(|n| (n.to_string(), Slot::Write)))
                    .collect();
                let multi = client.multi_rwlock(reads, wr);
                let wait = async {
                    match timeout_ms {
                        Some(t) => multi.lock().timeout(ms(t)).await,
                        None => multi.lock().await,
                    }
                };
                let outcome = match cancel_ms {
                    Some(c) => match tokio::time::timeout(ms(c), wait).await {
                        Ok(outcome) => outcome,
                        Err(_) => {
                            // Cancelled: the future was dropped.
                            CANCELLED.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    },
                    None => wait.await,
                };
                let guard = match outcome {
                    Ok(g) => {
                        GRANTED.fetch_add(1, Ordering::Relaxed);
                        g
                    }
                    Err(e) if e.is_timeout() => {
                        TIMED_OUT.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) if e.is_connection() => continue,
                    Err(e) => {
                        world.violation(format!("UnexpectedError: multi-lock: {e}"));
                        continue;
                    }
                };
                let entry = Arc::new(MultiEntry(guard, parts));
                register(&world, entry.clone());
                tokio::time::sleep(ms(hold_ms)).await;
                let Ok(MultiEntry(guard, _)) = Arc::try_unwrap(entry) else {
                    unreachable!("the oracle holds weak references only")
                };
                if drop_it {
                    drop(guard);
                } else if let Err(e) = guard.release().await
                    && !e.is_connection()
                {
                    world.violation(format!("UnexpectedError: release: {e}"));
                }
            }
            Op::Mutex { name, hold_ms } => match client.mutex(NAMES[name]).lock().await {
                Ok(g) => {
                    let entry = Arc::new(SingleEntry(g, Slot::Write));
                    register(&world, entry.clone());
                    tokio::time::sleep(ms(hold_ms)).await;
                    drop(entry);
                }
                Err(e) if e.is_connection() => {}
                Err(e) => world.violation(format!("UnexpectedError: mutex: {e}")),
            },
            Op::Read { name, hold_ms } => match client.rwlock(NAMES[name]).read().await {
                Ok(g) => {
                    let entry = Arc::new(SingleEntry(g, Slot::Read));
                    register(&world, entry.clone());
                    tokio::time::sleep(ms(hold_ms)).await;
                    drop(entry);
                }
                Err(e) if e.is_connection() => {}
                Err(e) => world.violation(format!("UnexpectedError: read: {e}")),
            },
            Op::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
}

async fn run(schedule: Schedule) -> std::result::Result<(), String> {
    let store = Arc::new(MemoryStore::new());
    let world = Arc::new(World::default());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for spec in schedule.clients.clone() {
        let link = Link {
            store: store.clone(),
            world: world.clone(),
            start,
            one_slot: schedule.one_slot,
            faulty: spec.faulty,
            rng: StdMutex::new(spec.seed | 1),
        };
        let conn = SimConn::new(link, store.hub().clone());
        let client = LockClient::builder()
            .lease(ms(spec.lease_ms))
            .retry_interval(ms(spec.retry_ms))
            .store(conn)
            .expect("client");
        tasks.push(tokio::spawn(run_client(client, spec, world.clone())));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        match tokio::time::timeout_at(start + GIVE_UP, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("client {i} panicked: {e}")),
            Err(_) => return Err(format!("Deadlock: client {i} did not finish its script")),
        }
    }
    // Background releases run now, retried after a lost reply; nothing is left to lapse.
    let faults_end = start + ms(FAULTS_UNTIL);
    tokio::time::sleep_until(faults_end.max(Instant::now()) + ms(300)).await;
    let now = virtual_now(start);
    for name in NAMES {
        let keys = LockKeys::new("rl", name).expect("name");
        let snap = ready(store.inspect(&keys, Family::LeaseLock, Some(now))).expect("inspect");
        if !snap.holders.is_empty() {
            world.violation(format!(
                "Leak: {name} still held after every script finished: {:?}",
                snap.holders
            ));
        }
    }
    let violations = world.violations.lock().unwrap().clone();
    match violations.first() {
        Some(first) => Err(format!("{first} ({} violations)", violations.len())),
        None => Ok(()),
    }
}

fn simulate(schedule: Schedule) -> std::result::Result<(), String> {
    on_paused_clock(run(schedule))
}

#[test]
fn multi_locks_stay_honest_and_never_deadlock() {
    let cases = env_u32("SIM_CASES", 200);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(e) = runner.run(&schedule(), |s| simulate(s).map_err(TestCaseError::fail)) {
        panic!("{e}");
    }
    for (what, count) in [
        ("granted", &GRANTED),
        ("timed out", &TIMED_OUT),
        ("cancelled", &CANCELLED),
        ("lost replies", &LOST_REPLIES),
    ] {
        let n = count.load(Ordering::Relaxed);
        assert!(
            n > cases as u64 / 10,
            "only {n} multi-locks {what} in {cases} cases"
        );
    }
}
