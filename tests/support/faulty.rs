//! A fault-injecting [`Store`] around any other store (usually a `RedisStore`), for tests that
//! need one client's requests or replies to be slow, or held until the test lets them go.
//!
//! ```ignore
//! let faulty = Faulty::new(Arc::new(RedisStore::connect(&url).await?));
//! let client = LockClient::builder().store(faulty.clone()).expect("client");
//! // Every extend with a 30 s lease, once: the reply is held until `gate.open()`.
//! let gate = Gate::new();
//! faulty.add(Rule::on(Op::Extend).when(|c| c.lease == Some(secs(30))).times(1)
//!     .hold_reply(gate.clone()));
//! ```
//!
//! * Rules are checked in the order they were added; the FIRST rule that matches a call (and
//!   has not used up its `times`) decides that call's faults, once, when the call starts.
//!   Calls no rule matches go straight through.
//! * Faults of one call, in order: `delay_request`, then `hold_request` (wait for the gate),
//!   then the inner call, then `delay_reply`, then `hold_reply`. "Request" faults happen
//!   before the request reaches the server (the server has seen nothing yet); "reply" faults
//!   after the server applied it (only the caller does not know yet).
//! * `hub()` is the inner store's: wake-ups (pub/sub pushes) are never delayed or held.
//! * Every call that reached the inner store is logged ([`Faulty::log`]) with the instants it
//!   was forwarded and answered, so a test can tell the order in which the server saw them.
//! * A gate, once opened, stays open; a call that arrives at an open gate passes at once.

#![allow(dead_code)]

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, AcquireAll, Claim, Family, Part, PermitChange, Rate, RateClaim, RateDecision,
    RateSnapshot, Snapshot, Store,
};
use redis_locks::testing::WakeHub;
use tokio::sync::watch;
use tokio::time::Instant;

/// The store methods a rule can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Acquire,
    /// A multi-lock's step (`acquire_all`); the call names its first part.
    AcquireAll,
    Release,
    Extend,
    Downgrade,
    Inspect,
    SetPermits,
    ForceRelease,
    WaitReplicas,
    Proclaim,
    Leader,
    /// A rate limiter's decision (`rate_acquire`).
    RateAcquire,
    /// A rate limiter's cancel of a queue place (`rate_cancel`).
    RateCancel,
    RateInspect,
}

/// What a rule's predicate sees of a call.
#[derive(Clone, Debug)]
pub struct Call {
    pub op: Op,
    /// The lock's name.
    pub name: String,
    /// The claim's token (acquire, release, extend, downgrade).
    pub token: Option<String>,
    /// The lease asked for: `extend`'s argument, or the claim's lease for acquire/downgrade.
    pub lease: Option<Duration>,
    /// `acquire`'s `wait` flag.
    pub wait: Option<bool>,
}

/// "Hold until released": calls wait at a closed gate; [`Gate::open`] lets every one of them
/// (and every later one) through.
#[derive(Debug)]
pub struct Gate {
    open: watch::Sender<bool>,
    entered: watch::Sender<usize>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Arc<Gate> {
        Arc::new(Gate {
            open: watch::Sender::new(false),
            entered: watch::Sender::new(0),
        })
    }

    /// Lets every waiting and later call through.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    pub fn is_open(&self) -> bool {
        *self.open.borrow()
    }

    /// How many calls have arrived at the gate so far (waiting or let through).
    pub fn entered(&self) -> usize {
        *self.entered.borrow()
    }

    /// Waits until at least `n` calls have arrived at the gate.
    pub async fn wait_entered(&self, n: usize) {
        let mut rx = self.entered.subscribe();
        let _ = rx.wait_for(|&e| e >= n).await;
    }

    /// [`Gate::wait_entered`] within `limit`; panics with `what` past it.
    pub async fn entered_within(&self, n: usize, limit: Duration, what: &str) {
        if tokio::time::timeout(limit, self.wait_entered(n))
            .await
            .is_err()
        {
            panic!("{what}: not within {limit:?}");
        }
    }

    async fn pass(&self) {
        let mut rx = self.open.subscribe();
        self.entered.send_modify(|e| *e += 1);
        let _ = rx.wait_for(|&open| open).await;
    }
}

type Predicate = Box<dyn Fn(&Call) -> bool + Send + Sync>;

/// Which calls get which faults.
pub struct Rule {
    op: Op,
    when: Option<Predicate>,
    times: Option<usize>,
    faults: Faults,
}

#[derive(Clone, Debug, Default)]
struct Faults {
    delay_request: Duration,
    hold_request: Option<Arc<Gate>>,
    delay_reply: Duration,
    hold_reply: Option<Arc<Gate>>,
    lose_reply: bool,
}

impl Rule {
    /// Every call of `op` (narrow it with [`Rule::when`] and [`Rule::times`]).
    pub fn on(op: Op) -> Rule {
        Rule {
            op,
            when: None,
            times: None,
            faults: Faults::default(),
        }
    }

    /// Only calls for which `pred` is true.
    pub fn when(mut self, pred: impl Fn(&Call) -> bool + Send + Sync + 'static) -> Rule {
        self.when = Some(Box::new(pred));
        self
    }

    /// Only the next `n` matching calls; then the rule is spent (later rules may match).
    pub fn times(mut self, n: usize) -> Rule {
        self.times = Some(n);
        self
    }

    /// Sleeps this long before forwarding the request.
    pub fn delay_request(mut self, d: Duration) -> Rule {
        self.faults.delay_request = d;
        self
    }

    /// Waits for `gate` before forwarding the request.
    pub fn hold_request(mut self, gate: Arc<Gate>) -> Rule {
        self.faults.hold_request = Some(gate);
        self
    }

    /// Sleeps this long after the inner store answered, before answering the caller.
    pub fn delay_reply(mut self, d: Duration) -> Rule {
        self.faults.delay_reply = d;
        self
    }

    /// Waits for `gate` after the inner store answered, before answering the caller.
    pub fn hold_reply(mut self, gate: Arc<Gate>) -> Rule {
        self.faults.hold_reply = Some(gate);
        self
    }

    /// The inner store applies the call, and its reply is lost: the caller gets a connection
    /// error, as from a dropped connection or a response timeout.
    pub fn lose_reply(mut self) -> Rule {
        self.faults.lose_reply = true;
        self
    }
}

/// One call that reached the inner store.
#[derive(Clone, Debug)]
pub struct Event {
    pub call: Call,
    /// When the request was handed to the inner store (after the request faults).
    pub forwarded_at: Instant,
    /// When the inner store answered (before the reply faults).
    pub answered_at: Instant,
    /// The inner store's answer, `Debug`-formatted.
    pub outcome: String,
}

/// The fault-injecting store. Share it as `Arc<Faulty>` (it converts to `Arc<dyn Store>`).
pub struct Faulty {
    inner: Arc<dyn Store>,
    rules: StdMutex<Vec<Rule>>,
    log: StdMutex<Vec<Event>>,
    /// While true, no call reaches the inner store ([`Faulty::freeze`]).
    frozen: watch::Sender<bool>,
    /// Calls on their way to (or in) the inner store.
    in_flight: AtomicUsize,
    /// Answers `one_slot_per_step` with true (a multi-lock then steps slot by slot, as on
    /// Redis Cluster), whatever the inner store says.
    one_slot: AtomicBool,
    /// With [`Faulty::on_tokio_clock`]: the store's clock is tokio's, from this instant and
    /// this wall-clock time (ms) on.
    clock: Option<(Instant, u64)>,
}

/// Counts a call as in flight until dropped.
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl fmt::Debug for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faulty")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Faulty {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Faulty> {
        Arc::new(Faulty {
            inner,
            rules: StdMutex::default(),
            log: StdMutex::default(),
            frozen: watch::channel(false).0,
            in_flight: AtomicUsize::new(0),
            one_slot: AtomicBool::new(false),
            clock: None,
        })
    }

    /// Like [`Faulty::new`], with every call to `inner` made on tokio's clock: the store's
    /// `now` is the wall clock at this call plus the tokio time elapsed since. On a paused
    /// clock the store's leases then lapse at their exact virtual instants, however long the
    /// test's real work takes (for an inner [`MemoryStore`], which takes an explicit `now`).
    pub fn on_tokio_clock(inner: Arc<dyn Store>) -> Arc<Faulty> {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        Arc::new(Faulty {
            clock: Some((Instant::now(), u64::try_from(wall).expect("ms"))),
            ..Arc::into_inner(Faulty::new(inner)).expect("new")
        })
    }

    /// The `now` a call is made with: the caller's, else tokio's clock if so made.
    fn now(&self, given: Option<u64>) -> Option<u64> {
        given.or_else(|| {
            self.clock
                .map(|(start, wall)| wall + u64::try_from(start.elapsed().as_millis()).expect("ms"))
        })
    }

    /// Makes multi-locks through this store step one hash slot at a time, as on Redis
    /// Cluster.
    pub fn step_slot_by_slot(&self) {
        self.one_slot.store(true, Ordering::SeqCst);
    }

    /// Makes the client look like a process that stopped: no later call reaches the store
    /// until [`Faulty::thaw`]. Returns once the calls already on their way were answered.
    pub async fn freeze(&self) {
        self.frozen.send_replace(true);
        let give_up = Instant::now() + Duration::from_secs(20);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < give_up, "a call in flight never finished");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Lets the held-back calls (and every later one) through.
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }

    /// Waits until the store is not frozen; the call counts as in flight while the guard lives.
    async fn admit(&self) -> Counted<'_> {
        let mut frozen = self.frozen.subscribe();
        loop {
            // Counted before the check, so `freeze` never misses a call that saw it thawed.
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let counted = Counted(&self.in_flight);
            if !*frozen.borrow_and_update() {
                return counted;
            }
            drop(counted);
            if frozen.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Adds a rule after the existing ones.
    pub fn add(&self, rule: Rule) {
        self.rules.lock().unwrap().push(rule);
    }

    /// Adds `rule`, its calls' requests held before the store at the returned (new) gate.
    pub fn hold_requests(&self, rule: Rule) -> Arc<Gate> {
        let gate = Gate::new();
        self.add(rule.hold_request(gate.clone()));
        gate
    }

    /// Adds `rule`, its calls' replies held (the call applied) at the returned (new) gate.
    pub fn hold_replies(&self, rule: Rule) -> Arc<Gate> {
        let gate = Gate::new();
        self.add(rule.hold_reply(gate.clone()));
        gate
    }

    /// Holds the next `extend` asking `lease` before the server, at the returned gate.
    pub fn hold_extend(&self, lease: Duration) -> Arc<Gate> {
        let gate = Gate::new();
        self.add(
            Rule::on(Op::Extend)
                .when(move |call| call.lease == Some(lease))
                .times(1)
                .hold_request(gate.clone()),
        );
        gate
    }

    /// Removes every rule (calls already waiting at a gate keep waiting for it).
    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// Every call that reached the inner store so far, in the order they were answered.
    pub fn log(&self) -> Vec<Event> {
        self.log.lock().unwrap().clone()
    }

    /// How many calls of `op` reached the inner store so far.
    pub fn count(&self, op: Op) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.call.op == op)
            .count()
    }

    /// The logged calls of `op`.
    pub fn calls(&self, op: Op) -> Vec<Event> {
        self.log().into_iter().filter(|e| e.call.op == op).collect()
    }

    fn faults_for(&self, call: &Call) -> Faults {
        let mut rules = self.rules.lock().unwrap();
        for rule in rules.iter_mut() {
            if rule.op != call.op || rule.times == Some(0) {
                continue;
            }
            if let Some(pred) = &rule.when
                && !pred(call)
            {
                continue;
            }
            if let Some(n) = rule.times.as_mut() {
                *n -= 1;
            }
            return rule.faults.clone();
        }
        Faults::default()
    }

    async fn run<T, F>(&self, call: Call, inner: F) -> redis_locks::Result<T>
    where
        T: fmt::Debug,
        F: std::future::Future<Output = redis_locks::Result<T>>,
    {
        let faults = self.faults_for(&call);
        if !faults.delay_request.is_zero() {
            tokio::time::sleep(faults.delay_request).await;
        }
        if let Some(gate) = &faults.hold_request {
            gate.pass().await;
        }
        let admitted = self.admit().await;
        let forwarded_at = Instant::now();
        let result = inner.await;
        let answered_at = Instant::now();
        drop(admitted);
        self.log.lock().unwrap().push(Event {
            call,
            forwarded_at,
            answered_at,
            outcome: format!("{result:?}"),
        });
        if !faults.delay_reply.is_zero() {
            tokio::time::sleep(faults.delay_reply).await;
        }
        if let Some(gate) = &faults.hold_reply {
            gate.pass().await;
        }
        if faults.lose_reply {
            return Err(redis_locks::Error::Connection {
                operation: "a test fault".into(),
                address: String::new(),
                cause: Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "reply lost by the fault injector",
                )),
            });
        }
        result
    }
}

fn call(op: Op, lock: &LockKeys, claim: Option<&Claim>) -> Call {
    Call {
        op,
        name: lock.name().to_owned(),
        token: claim.map(|c| c.token.clone()),
        lease: claim.map(|c| c.lease),
        wait: None,
    }
}

/// An extend's or a renewal's call, as the rules see it.
fn extend_call(lock: &LockKeys, claim: &Claim, lease: Duration) -> Call {
    Call {
        lease: Some(lease),
        ..call(Op::Extend, lock, Some(claim))
    }
}

#[async_trait::async_trait]
impl Store for Faulty {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> redis_locks::Result<Acquire> {
        let c = Call {
            wait: Some(wait),
            ..call(Op::Acquire, lock, Some(claim))
        };
        self.run(c, self.inner.acquire(lock, claim, wait, self.now(now)))
            .await
    }

    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<AcquireAll> {
        let c = call(Op::AcquireAll, &parts[0].lock, Some(claim));
        self.run(c, self.inner.acquire_all(parts, claim, self.now(now)))
            .await
    }

    async fn release(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        let c = call(Op::Release, lock, Some(claim));
        self.run(c, self.inner.release(lock, claim, self.now(now)))
            .await
    }

    /// An extend or an automatic renewal: an [`Op::Extend`] to the rules.
    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        handed_until: Option<u64>,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        let c = extend_call(lock, claim, lease);
        let call = self
            .inner
            .renew(lock, claim, lease, handed_until, self.now(now));
        self.run(c, call).await
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<Option<u64>> {
        let c = call(Op::Downgrade, lock, Some(claim));
        self.run(c, self.inner.downgrade(lock, claim, self.now(now)))
            .await
    }

    async fn inspect(
        &self,
        lock: &LockKeys,
        family: Family,
        now: Option<u64>,
    ) -> redis_locks::Result<Snapshot> {
        let c = call(Op::Inspect, lock, None);
        self.run(c, self.inner.inspect(lock, family, self.now(now)))
            .await
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> redis_locks::Result<u32> {
        let c = call(Op::SetPermits, lock, None);
        self.run(
            c,
            self.inner
                .set_permits(lock, change, heartbeat, self.now(now)),
        )
        .await
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> redis_locks::Result<u64> {
        let c = call(Op::ForceRelease, lock, None);
        self.run(c, self.inner.force_release(lock, self.now(now)))
            .await
    }

    async fn wait_replicas(
        &self,
        lock: &LockKeys,
        replicas: u32,
        timeout: Duration,
    ) -> redis_locks::Result<u32> {
        let c = call(Op::WaitReplicas, lock, None);
        self.run(c, self.inner.wait_replicas(lock, replicas, timeout))
            .await
    }

    async fn proclaim(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        value: Option<&str>,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        let c = call(Op::Proclaim, lock, Some(claim));
        self.run(c, self.inner.proclaim(lock, claim, value, self.now(now)))
            .await
    }

    async fn leader(
        &self,
        lock: &LockKeys,
        now: Option<u64>,
    ) -> redis_locks::Result<Option<redis_locks::LeaderInfo>> {
        let c = call(Op::Leader, lock, None);
        self.run(c, self.inner.leader(lock, self.now(now))).await
    }

    async fn rate_acquire(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        wait: bool,
        now: Option<u64>,
    ) -> redis_locks::Result<RateDecision> {
        let c = Call {
            token: Some(claim.token.clone()),
            wait: Some(wait),
            ..call(Op::RateAcquire, lock, None)
        };
        self.run(c, self.inner.rate_acquire(lock, claim, wait, self.now(now)))
            .await
    }

    async fn rate_cancel(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        let c = Call {
            token: Some(claim.token.clone()),
            ..call(Op::RateCancel, lock, None)
        };
        self.run(c, self.inner.rate_cancel(lock, claim, self.now(now)))
            .await
    }

    async fn rate_inspect(
        &self,
        lock: &LockKeys,
        rate: &Rate,
        now: Option<u64>,
    ) -> redis_locks::Result<RateSnapshot> {
        let c = call(Op::RateInspect, lock, None);
        self.run(c, self.inner.rate_inspect(lock, rate, self.now(now)))
            .await
    }

    fn hub(&self) -> &Arc<WakeHub> {
        self.inner.hub()
    }

    fn one_slot_per_step(&self) -> bool {
        self.one_slot.load(Ordering::SeqCst) || self.inner.one_slot_per_step()
    }
}

/// A client of `b`'s store through a fresh [`Faulty`] wrapper (default options), and the
/// wrapper to add rules to.
pub async fn faulty_client(b: &super::backend::Backend) -> (Arc<Faulty>, redis_locks::LockClient) {
    let f = Faulty::new(b.store().await);
    let c = redis_locks::LockClient::builder()
        .store(f.clone())
        .expect("client");
    (f, c)
}

/// As [`faulty_client`], the client built from `builder` (its lease, heartbeat, ...).
pub async fn faulty_client_with(
    b: &super::backend::Backend,
    builder: redis_locks::LockClientBuilder,
) -> (Arc<Faulty>, redis_locks::LockClient) {
    let f = Faulty::new(b.store().await);
    let c = builder.store(f.clone()).expect("client");
    (f, c)
}

/// A Mutex guard of `name` in `c` (lease 3 s), granted on current-thread runtime A, whose
/// first renewal (lease 3 s) is held at the returned gate (rule added to `f`, `c`'s store);
/// A is returned idle, as a sync wrapper's runtime between calls, so the renewal stays parked
/// there until A runs again. Drop A with `tokio::task::spawn_blocking`.
pub async fn parked_renewal(
    c: &redis_locks::LockClient,
    f: &Faulty,
    name: &str,
) -> (
    tokio::runtime::Runtime,
    redis_locks::Guard<redis_locks::kind::Mutex>,
    Arc<Gate>,
) {
    let gate = Gate::new();
    f.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(super::time::secs(3)))
            .times(1)
            .hold_request(gate.clone()),
    );
    let (c2, gate2, name) = (c.clone(), gate.clone(), name.to_owned());
    let (idle, guard) = tokio::task::spawn_blocking(move || {
        let rt = super::time::current_thread();
        let guard = rt.block_on(async move {
            let guard = c2.mutex(&name).lease(super::time::secs(3)).lock().await;
            let guard = guard.expect("lock");
            tokio::time::timeout(super::time::ms(5_000), gate2.wait_entered(1))
                .await
                .expect("the renewal at the gate");
            guard
        });
        (rt, guard)
    })
    .await
    .expect("runtime A");
    (idle, guard, gate)
}

/// `c.extend_hold(id, lease)` on a task of its own.
pub fn spawn_extend_hold(
    c: &redis_locks::LockClient,
    id: &redis_locks::HoldId,
    lease: Duration,
) -> tokio::task::JoinHandle<redis_locks::Result<bool>> {
    let (c, id) = (c.clone(), id.clone());
    tokio::spawn(async move { c.extend_hold(&id, lease).await })
}

/// A 10 s Mutex hold of `name` on a fault-injecting client (no auto-renewal), with an
/// `extend_hold(id, lease)` of it on its way, held at `gate` before the server: the client,
/// the guard, its id, the gate and the extend's task.
pub async fn extend_at_gate(
    b: &super::backend::Backend,
    name: &str,
    lease: Duration,
) -> (
    redis_locks::LockClient,
    redis_locks::MutexGuard,
    redis_locks::HoldId,
    Arc<Gate>,
    tokio::task::JoinHandle<redis_locks::Result<bool>>,
) {
    let (f, c) = faulty_client(b).await;
    let lock = c.mutex(name).lease(super::time::secs(10)).auto_renew(false);
    let guard = lock.lock().await.expect("lock");
    let id = guard.hold_id();
    let gate = f.hold_extend(lease);
    let extending = spawn_extend_hold(&c, &id, lease);
    tokio::time::timeout(super::time::ms(5_000), gate.wait_entered(1))
        .await
        .expect("extend at the gate");
    (c, guard, id, gate, extending)
}

/// [`Gate::entered_within`] 5 s: `n` calls arrived at `gate`.
pub async fn at_gate(gate: &Gate, n: usize, what: &str) {
    gate.entered_within(n, Duration::from_secs(5), what).await
}
