//! The fault-injecting connection the client-side simulations share (`tests/simulation.rs`,
//! `tests/multi_simulation.rs`, `tests/election_simulation.rs`): one client's [`Store`] in
//! front of the shared in-memory server, on a paused clock.
//!
//! Design (the shape; [`Faulty`](super::faulty::Faulty) stays the rule-based wrapper of a real
//! store for the other tests, it knows nothing of virtual time, oracles or wake-up fates):
//!
//! * [`SimConn<L>`] implements every [`Store`] method once: it turns the call into an owned
//!   [`Request`], runs it through one pipeline and turns the [`Reply`] back (a lost reply is
//!   one connection error, [`lost_reply`]). [`Request::apply`] forwards it to the in-memory
//!   store at an explicit `now`.
//! * The pipeline of one request: sent (the link rolls its faults) → on its way (at once,
//!   delayed, or stalled until the link says) → applied by the link at the virtual now (its
//!   oracle checks there) → the reply on its way (at once, delayed, or lost after a while) →
//!   delivered. A dead link black-holes (nothing applied, nothing comes back); a cut link
//!   (partition) fails the request unapplied.
//! * An ordered link behaves like one multiplexed connection: requests are applied in the
//!   order sent and replies delivered in that order (a delay holds up what follows), and a
//!   request once sent is applied even if the caller stops waiting (it runs in its own task).
//!   An unordered link runs each request inline in the caller's future.
//! * Each simulation supplies a [`Link`]: its world, oracle and fault policy (which faults to
//!   roll and when, what applying means for its bookkeeping, what to deliver before a reply).

#![allow(dead_code)]

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, AcquireAll, Claim, Family, HolderEviction, MemoryStore, Part, PermitChange, Snapshot,
    Store,
};
use redis_locks::testing::WakeHub;
use redis_locks::{Error, LeaderInfo, Result};
use tokio::sync::{oneshot, Notify};

/// The result of a [`MemoryStore`] call (it never waits).
pub fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory store answers at once"),
    }
}

/// The error a caller gets for a lost reply (or a request its link could not send), as from
/// a response timeout or a dropped connection.
pub fn lost_reply(why: &'static str) -> Error {
    Error::Connection {
        operation: "a test fault".into(),
        address: String::new(),
        cause: Box::new(std::io::Error::new(std::io::ErrorKind::TimedOut, why)),
    }
}

/// One [`Store`] call on its way to the server, its arguments owned (a request of an
/// ordered link outlives its caller).
#[derive(Clone, Debug)]
pub enum Request {
    Acquire {
        lock: LockKeys,
        claim: Claim,
        wait: bool,
    },
    AcquireAll {
        parts: Vec<Part>,
        claim: Claim,
    },
    Release(LockKeys, Claim),
    Extend(LockKeys, Claim, Duration),
    Downgrade(LockKeys, Claim),
    Inspect(LockKeys, Family),
    SetPermits(LockKeys, PermitChange, Duration),
    ForceRelease(LockKeys),
    ForceReleaseHolder(LockKeys, String),
    WaitReplicas(LockKeys, u32, Duration),
    Proclaim(LockKeys, Claim, Option<String>),
    Leader(LockKeys),
}

/// Its reply; `Lost` when it never reaches the caller (the caller gets [`lost_reply`]).
#[derive(Debug)]
pub enum Reply {
    Acquire(Result<Acquire>),
    AcquireAll(Result<AcquireAll>),
    Bool(Result<bool>),
    Fence(Result<Option<u64>>),
    Snapshot(Result<Snapshot>),
    Count(Result<u32>),
    Number(Result<u64>),
    Eviction(Result<HolderEviction>),
    Leader(Result<Option<LeaderInfo>>),
    Lost(&'static str),
}

impl Request {
    /// The lock it names (a multi-lock step: its first part).
    pub fn lock(&self) -> &LockKeys {
        match self {
            Request::AcquireAll { parts, .. } => &parts[0].lock,
            Request::Acquire { lock, .. }
            | Request::Release(lock, _)
            | Request::Extend(lock, ..)
            | Request::Downgrade(lock, _)
            | Request::Inspect(lock, _)
            | Request::SetPermits(lock, ..)
            | Request::ForceRelease(lock)
            | Request::ForceReleaseHolder(lock, _)
            | Request::WaitReplicas(lock, ..)
            | Request::Proclaim(lock, ..)
            | Request::Leader(lock) => lock,
        }
    }

    /// The claim it acts for, with the lease it asks for (`extend`'s argument, else the
    /// claim's).
    pub fn claim(&self) -> Option<(&Claim, Duration)> {
        match self {
            Request::Acquire { claim, .. }
            | Request::AcquireAll { claim, .. }
            | Request::Release(_, claim)
            | Request::Downgrade(_, claim)
            | Request::Proclaim(_, claim, _) => Some((claim, claim.lease)),
            Request::Extend(_, claim, lease) => Some((claim, *lease)),
            _ => None,
        }
    }

    /// The store method's name.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Acquire { .. } => "acquire",
            Request::AcquireAll { .. } => "acquire_all",
            Request::Release(..) => "release",
            Request::Extend(..) => "extend",
            Request::Downgrade(..) => "downgrade",
            Request::Inspect(..) => "inspect",
            Request::SetPermits(..) => "set_permits",
            Request::ForceRelease(_) => "force_release",
            Request::ForceReleaseHolder(..) => "force_release_holder",
            Request::WaitReplicas(..) => "wait_replicas",
            Request::Proclaim(..) => "proclaim",
            Request::Leader(_) => "leader",
        }
    }

    /// Applies it to `store` at `now` (server ms).
    pub fn apply(&self, store: &MemoryStore, now: u64) -> Reply {
        let now = Some(now);
        match self {
            Request::Acquire { lock, claim, wait } => {
                Reply::Acquire(ready(store.acquire(lock, claim, *wait, now)))
            }
            Request::AcquireAll { parts, claim } => {
                Reply::AcquireAll(ready(store.acquire_all(parts, claim, now)))
            }
            Request::Release(lock, claim) => Reply::Bool(ready(store.release(lock, claim, now))),
            Request::Extend(lock, claim, lease) => {
                Reply::Bool(ready(store.extend(lock, claim, *lease, now)))
            }
            Request::Downgrade(lock, claim) => {
                Reply::Fence(ready(store.downgrade(lock, claim, now)))
            }
            Request::Inspect(lock, family) => {
                Reply::Snapshot(ready(store.inspect(lock, *family, now)))
            }
            Request::SetPermits(lock, change, heartbeat) => {
                Reply::Count(ready(store.set_permits(lock, *change, *heartbeat, now)))
            }
            Request::ForceRelease(lock) => Reply::Number(ready(store.force_release(lock, now))),
            Request::ForceReleaseHolder(lock, prefix) => {
                Reply::Eviction(ready(store.force_release_holder(lock, prefix, now)))
            }
            Request::WaitReplicas(lock, replicas, timeout) => {
                Reply::Count(ready(store.wait_replicas(lock, *replicas, *timeout)))
            }
            Request::Proclaim(lock, claim, value) => {
                Reply::Bool(ready(store.proclaim(lock, claim, value.as_deref(), now)))
            }
            Request::Leader(lock) => Reply::Leader(ready(store.leader(lock, now))),
        }
    }
}

/// How a request gets to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Now,
    /// This much later.
    Delay(Duration),
    /// When [`Link::stall`] resolves.
    Stall,
}

/// How its reply gets back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Back {
    Now,
    /// This much later.
    Delay(Duration),
    /// Never: the caller gets a connection error this much later (at once for zero).
    Lost(Duration),
}

/// What one simulation supplies for one client's connection: its world, its oracle and its
/// fault policy. The hooks run in this order for each request: [`send`](Link::send),
/// [`on_the_way`](Link::on_the_way) (and [`stall`](Link::stall)), [`dead`](Link::dead),
/// [`cut`](Link::cut), [`apply`](Link::apply), [`applied`](Link::applied),
/// [`back`](Link::back), [`dead`](Link::dead), [`before_reply`](Link::before_reply),
/// [`replied`](Link::replied).
pub trait Link: Send + Sync + 'static {
    /// The faults rolled for one request when it was sent (and what the link keeps of it).
    type Plan: Send + 'static;

    /// Ordered: requests applied, and replies delivered, in the order sent, each request
    /// applied even if its caller stopped waiting. Unordered: each runs in its caller.
    const ORDERED: bool;

    /// The hub the client's waiters listen on.
    fn hub(&self) -> &Arc<WakeHub>;

    /// What the store answers to [`Store::one_slot_per_step`].
    fn one_slot_per_step(&self) -> bool {
        false
    }

    /// The connection's request number `index` (from 0) is sent: its plan, or `None` to
    /// black-hole it (never applied, never answered).
    fn send(&self, index: u64, request: &Request) -> Option<Self::Plan>;

    /// How the request gets to the server.
    fn on_the_way(&self, plan: &Self::Plan) -> Way;

    /// Resolves when a stalled request ([`Way::Stall`]) goes on.
    fn stall(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The client is dead: from here on nothing of this request is applied or comes back.
    fn dead(&self) -> bool {
        false
    }

    /// The client's network is gone: the request fails unapplied, after 5 ms.
    fn cut(&self) -> bool {
        false
    }

    /// Applies the request on the server at the virtual now (and runs the oracle).
    fn apply(&self, request: &Request, plan: &mut Self::Plan) -> Reply;

    /// Right after the request was applied (and, ordered, the next one may go).
    fn applied(&self) {}

    /// How the reply gets back (decided once it was applied).
    fn back(&self, plan: &Self::Plan) -> Back;

    /// Just before the reply is delivered.
    fn before_reply(&self, _plan: &Self::Plan) {}

    /// Right after the reply was delivered.
    fn replied(&self) {}
}

/// Whose turn it is on an ordered connection.
#[derive(Default)]
struct Lane {
    sent: AtomicU64,
    /// (the next request to apply, the next reply to deliver)
    next: StdMutex<(u64, u64)>,
    /// Told when either moves on.
    turn: Notify,
}

impl Lane {
    /// Resolves once `cond` holds of `next` (re-checked each time the turn moves on; `Notify`
    /// wakes its waiters in order, so runs replay).
    async fn until(&self, cond: impl Fn(&(u64, u64)) -> bool) {
        loop {
            let told = self.turn.notified();
            if cond(&self.next.lock().unwrap()) {
                return;
            }
            told.await;
        }
    }

    fn move_on(&self, step: impl FnOnce(&mut (u64, u64))) {
        step(&mut self.next.lock().unwrap());
        self.turn.notify_waiters();
    }
}

/// One client's connection to the simulated server; see the module.
pub struct SimConn<L: Link> {
    link: Arc<L>,
    lane: Arc<Lane>,
}

impl<L: Link> fmt::Debug for SimConn<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimConn")
    }
}

impl<L: Link> SimConn<L> {
    pub fn new(link: L) -> Arc<SimConn<L>> {
        Arc::new(SimConn {
            link: Arc::new(link),
            lane: Arc::default(),
        })
    }

    async fn call(&self, request: Request) -> Reply {
        let index = self.lane.sent.fetch_add(1, Ordering::Relaxed);
        let Some(plan) = self.link.send(index, &request) else {
            return std::future::pending().await;
        };
        if !L::ORDERED {
            let reply = flight(&*self.link, &self.lane, index, &request, plan).await;
            self.link.replied();
            return reply;
        }
        let (tx, rx) = oneshot::channel();
        let (link, lane) = (self.link.clone(), self.lane.clone());
        tokio::spawn(async move {
            let reply = flight(&*link, &lane, index, &request, plan).await;
            let _ = tx.send(reply);
            link.replied();
        });
        match rx.await {
            Ok(reply) => reply,
            Err(_) => std::future::pending().await,
        }
    }
}

/// The link's own fields and methods (a crash, a partition) through the connection.
impl<L: Link> std::ops::Deref for SimConn<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.link
    }
}

/// One request from send to reply.
async fn flight<L: Link>(
    link: &L,
    lane: &Lane,
    index: u64,
    request: &Request,
    mut plan: L::Plan,
) -> Reply {
    match link.on_the_way(&plan) {
        Way::Now => {}
        Way::Delay(d) => tokio::time::sleep(d).await,
        Way::Stall => link.stall().await,
    }
    if L::ORDERED {
        lane.until(|next| next.0 == index).await;
    }
    if link.dead() {
        return std::future::pending().await;
    }
    if link.cut() {
        if L::ORDERED {
            lane.move_on(|next| next.0 = index + 1);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        if L::ORDERED {
            lane.until(|next| next.1 == index).await;
            lane.move_on(|next| next.1 = index + 1);
        }
        return Reply::Lost("simulated partition");
    }
    let reply = link.apply(request, &mut plan);
    if L::ORDERED {
        lane.move_on(|next| next.0 = index + 1);
    }
    link.applied();
    let reply = match link.back(&plan) {
        Back::Now => reply,
        Back::Delay(d) => {
            tokio::time::sleep(d).await;
            reply
        }
        Back::Lost(d) => {
            if !d.is_zero() {
                tokio::time::sleep(d).await;
            }
            Reply::Lost("simulated lost reply")
        }
    };
    if L::ORDERED {
        lane.until(|next| next.1 == index).await;
    }
    if link.dead() {
        return std::future::pending().await;
    }
    link.before_reply(&plan);
    if L::ORDERED {
        lane.move_on(|next| next.1 = index + 1);
    }
    reply
}

/// The typed result in `reply`.
macro_rules! answer {
    ($reply:expr, $variant:ident) => {
        match $reply {
            Reply::$variant(result) => result,
            Reply::Lost(why) => Err(lost_reply(why)),
            other => unreachable!("{other:?} answers another request"),
        }
    };
}

#[async_trait]
impl<L: Link> Store for SimConn<L> {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        _now: Option<u64>,
    ) -> Result<Acquire> {
        let request = Request::Acquire {
            lock: lock.clone(),
            claim: claim.clone(),
            wait,
        };
        answer!(self.call(request).await, Acquire)
    }

    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        _now: Option<u64>,
    ) -> Result<AcquireAll> {
        let request = Request::AcquireAll {
            parts: parts.to_vec(),
            claim: claim.clone(),
        };
        answer!(self.call(request).await, AcquireAll)
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, _now: Option<u64>) -> Result<bool> {
        let request = Request::Release(lock.clone(), claim.clone());
        answer!(self.call(request).await, Bool)
    }

    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        _now: Option<u64>,
    ) -> Result<bool> {
        let request = Request::Extend(lock.clone(), claim.clone(), lease);
        answer!(self.call(request).await, Bool)
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        _now: Option<u64>,
    ) -> Result<Option<u64>> {
        let request = Request::Downgrade(lock.clone(), claim.clone());
        answer!(self.call(request).await, Fence)
    }

    async fn inspect(
        &self,
        lock: &LockKeys,
        family: Family,
        _now: Option<u64>,
    ) -> Result<Snapshot> {
        let request = Request::Inspect(lock.clone(), family);
        answer!(self.call(request).await, Snapshot)
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        _now: Option<u64>,
    ) -> Result<u32> {
        let request = Request::SetPermits(lock.clone(), change, heartbeat);
        answer!(self.call(request).await, Count)
    }

    async fn force_release(&self, lock: &LockKeys, _now: Option<u64>) -> Result<u64> {
        let request = Request::ForceRelease(lock.clone());
        answer!(self.call(request).await, Number)
    }

    async fn force_release_holder(
        &self,
        lock: &LockKeys,
        token_prefix: &str,
        _now: Option<u64>,
    ) -> Result<HolderEviction> {
        let request = Request::ForceReleaseHolder(lock.clone(), token_prefix.to_owned());
        answer!(self.call(request).await, Eviction)
    }

    async fn wait_replicas(
        &self,
        lock: &LockKeys,
        replicas: u32,
        timeout: Duration,
    ) -> Result<u32> {
        let request = Request::WaitReplicas(lock.clone(), replicas, timeout);
        answer!(self.call(request).await, Count)
    }

    async fn proclaim(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        value: Option<&str>,
        _now: Option<u64>,
    ) -> Result<bool> {
        let request = Request::Proclaim(lock.clone(), claim.clone(), value.map(str::to_owned));
        answer!(self.call(request).await, Bool)
    }

    async fn leader(&self, lock: &LockKeys, _now: Option<u64>) -> Result<Option<LeaderInfo>> {
        let request = Request::Leader(lock.clone());
        answer!(self.call(request).await, Leader)
    }

    fn hub(&self) -> &Arc<WakeHub> {
        self.link.hub()
    }

    fn one_slot_per_step(&self) -> bool {
        self.link.one_slot_per_step()
    }
}
