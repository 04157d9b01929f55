//! The fault-injecting connection the client-side simulations share (`tests/simulation.rs`,
//! `tests/multi_simulation.rs`, `tests/election_simulation.rs`): one client's [`Store`] in
//! front of the shared in-memory server, on a paused clock.
//!
//! Design (the shape; [`Faulty`](super::faulty::Faulty) stays the rule-based wrapper of a real
//! store for the other tests, it knows nothing of virtual time, oracles or wake-up fates):
//!
//! * [`SimConn<L>`] implements the [`Store`] methods once (all but the operators'
//!   `force_release_holder` and `wait_replicas`, which keep the trait's "unsupported"): it
//!   turns the call into an owned [`Request`], runs it through one pipeline and turns the
//!   [`Reply`] back (a lost reply is a connection error, as from a response timeout).
//!   [`Request::apply`] forwards it to the in-memory store at an explicit `now`.
//! * The pipeline of one request: sent (the link rolls its [`Fault`]) → on its way (at once,
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
    Acquire, AcquireAll, Claim, Family, MemoryStore, Part, PermitChange, Snapshot, Store,
};
use redis_locks::testing::WakeHub;
use redis_locks::{Error, LeaderInfo, Result};
use tokio::sync::{oneshot, Notify};

use super::time::ms;

/// Runs `case` on a fresh current-thread runtime whose clock is paused (virtual time).
pub fn on_paused_clock<F: Future>(case: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(case)
}

/// Polls `f` once: the value if it is ready at once.
pub fn ready_now<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// The result of a [`MemoryStore`] call (it never waits).
pub fn ready<F: Future>(f: F) -> F::Output {
    ready_now(f).expect("the in-memory store answers at once")
}

/// One [`Store`] call on its way to the server, its arguments owned (a request of an
/// ordered link outlives its caller).
#[derive(Clone, Debug)]
pub struct Request {
    /// The lock it names (a multi-lock step: its first part).
    pub lock: LockKeys,
    pub call: Call,
}

/// The method called, with its other arguments.
#[derive(Clone, Debug)]
pub enum Call {
    Acquire(Claim, bool),
    AcquireAll(Vec<Part>, Claim),
    Release(Claim),
    /// An extend or an automatic renewal, which never shortens the hold, with the deadline a
    /// hand-off gave when it is the hand-off's claim (see `Store::renew`).
    Extend(Claim, Duration, Option<u64>),
    Downgrade(Claim),
    Inspect(Family),
    SetPermits(PermitChange, Duration),
    ForceRelease,
    Proclaim(Claim, Option<String>),
    Leader,
}

/// Its reply; `Lost` when it never reaches the caller (who gets a connection error).
#[derive(Debug)]
pub enum Reply {
    Acquire(Result<Acquire>),
    AcquireAll(Result<AcquireAll>),
    Bool(Result<bool>),
    Fence(Result<Option<u64>>),
    Snapshot(Result<Snapshot>),
    Count(Result<u32>),
    Number(Result<u64>),
    Leader(Result<Option<LeaderInfo>>),
    Lost(&'static str),
}

impl Request {
    /// The claim it acts for, with the lease it asks for (`extend`'s argument, else the
    /// claim's).
    pub fn claim(&self) -> Option<(&Claim, Duration)> {
        match &self.call {
            Call::Acquire(claim, _)
            | Call::AcquireAll(_, claim)
            | Call::Release(claim)
            | Call::Downgrade(claim)
            | Call::Proclaim(claim, _) => Some((claim, claim.lease)),
            Call::Extend(claim, lease, _) => Some((claim, *lease)),
            _ => None,
        }
    }

    /// The store method's name.
    pub fn name(&self) -> &'static str {
        match self.call {
            Call::Acquire(..) => "acquire",
            Call::AcquireAll(..) => "acquire_all",
            Call::Release(_) => "release",
            Call::Extend(..) => "extend",
            Call::Downgrade(_) => "downgrade",
            Call::Inspect(_) => "inspect",
            Call::SetPermits(..) => "set_permits",
            Call::ForceRelease => "force_release",
            Call::Proclaim(..) => "proclaim",
            Call::Leader => "leader",
        }
    }

    /// Applies it to `store` at `now` (server ms).
    pub fn apply(&self, store: &MemoryStore, now: u64) -> Reply {
        let (lock, now) = (&self.lock, Some(now));
        match &self.call {
            Call::Acquire(claim, wait) => {
                Reply::Acquire(ready(store.acquire(lock, claim, *wait, now)))
            }
            Call::AcquireAll(parts, claim) => {
                Reply::AcquireAll(ready(store.acquire_all(parts, claim, now)))
            }
            Call::Release(claim) => Reply::Bool(ready(store.release(lock, claim, now))),
            Call::Extend(claim, lease, handed_until) => {
                Reply::Bool(ready(store.renew(lock, claim, *lease, *handed_until, now)))
            }
            Call::Downgrade(claim) => Reply::Fence(ready(store.downgrade(lock, claim, now))),
            Call::Inspect(family) => Reply::Snapshot(ready(store.inspect(lock, *family, now))),
            Call::SetPermits(change, heartbeat) => {
                Reply::Count(ready(store.set_permits(lock, *change, *heartbeat, now)))
            }
            Call::ForceRelease => Reply::Number(ready(store.force_release(lock, now))),
            Call::Proclaim(claim, value) => {
                Reply::Bool(ready(store.proclaim(lock, claim, value.as_deref(), now)))
            }
            Call::Leader => Reply::Leader(ready(store.leader(lock, now))),
        }
    }
}

/// Faults of one request (delays in virtual ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The server applies the call this much later.
    RequestDelay(u64),
    /// The reply arrives this much later.
    ReplyDelay(u64),
    /// Applied, then the reply is lost: a connection error after this long (0: at once).
    LostReply(u64),
    /// Held until [`Link::stall`] resolves.
    Stall,
}

/// What one simulation supplies for one client's connection: its world, its oracle and its
/// fault policy. The hooks run in the order they are declared.
pub trait Link: Send + Sync + 'static {
    /// Ordered: requests applied, and replies delivered, in the order sent, each request
    /// applied even if its caller stopped waiting. Unordered: each runs in its caller.
    const ORDERED: bool;

    /// What the store answers to [`Store::one_slot_per_step`].
    fn one_slot_per_step(&self) -> bool {
        false
    }

    /// The connection's request number `index` (from 0) is sent: its faults, or `None` to
    /// black-hole it (never applied, never answered).
    fn send(&self, index: u64, request: &Request) -> Option<Fault>;

    /// Resolves when a stalled request goes on.
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
    fn apply(&self, request: &Request, fault: Fault) -> Reply;

    /// Right after the request was applied (and, ordered, the next one may go).
    fn applied(&self) {}

    /// Just before a reply is delivered (ordered: in the order they were applied).
    fn before_reply(&self) {}

    /// Right after the reply was delivered.
    fn replied(&self) {}
}

/// Whose turn it is on an ordered connection (on an unordered one it is always everyone's).
#[derive(Default)]
struct Lane {
    ordered: bool,
    sent: AtomicU64,
    /// The next request to apply ([`APPLY`]), the next reply to deliver ([`REPLY`]).
    next: StdMutex<[u64; 2]>,
    /// Told when either moves on.
    turn: Notify,
}

const APPLY: usize = 0;
const REPLY: usize = 1;

impl Lane {
    /// Resolves once it is request `index`'s turn to `step` (re-checked each time a turn
    /// moves on; `Notify` wakes its waiters in order, so runs replay).
    async fn wait(&self, step: usize, index: u64) {
        if !self.ordered {
            return;
        }
        loop {
            let told = self.turn.notified();
            if self.next.lock().unwrap()[step] == index {
                return;
            }
            told.await;
        }
    }

    /// Request `index` took its turn to `step`: the next one may.
    fn pass(&self, step: usize, index: u64) {
        if self.ordered {
            self.next.lock().unwrap()[step] = index + 1;
            self.turn.notify_waiters();
        }
    }
}

/// One client's connection to the simulated server; see the module.
pub struct SimConn<L: Link> {
    link: Arc<L>,
    lane: Arc<Lane>,
    /// The hub the client's waiters listen on.
    hub: Arc<WakeHub>,
}

impl<L: Link> fmt::Debug for SimConn<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimConn")
    }
}

impl<L: Link> SimConn<L> {
    pub fn new(link: L, hub: Arc<WakeHub>) -> Arc<SimConn<L>> {
        Arc::new(SimConn {
            link: Arc::new(link),
            lane: Arc::new(Lane {
                ordered: L::ORDERED,
                ..Lane::default()
            }),
            hub,
        })
    }

    async fn call(&self, request: Request) -> Reply {
        let index = self.lane.sent.fetch_add(1, Ordering::Relaxed);
        let Some(fault) = self.link.send(index, &request) else {
            return std::future::pending().await;
        };
        if !L::ORDERED {
            let reply = flight(&*self.link, &self.lane, index, &request, fault).await;
            self.link.replied();
            return reply;
        }
        let (tx, rx) = oneshot::channel();
        let (link, lane) = (self.link.clone(), self.lane.clone());
        tokio::spawn(async move {
            let reply = flight(&*link, &lane, index, &request, fault).await;
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
    fault: Fault,
) -> Reply {
    match fault {
        Fault::RequestDelay(d) => tokio::time::sleep(ms(d)).await,
        Fault::Stall => link.stall().await,
        _ => {}
    }
    lane.wait(APPLY, index).await;
    if link.dead() {
        return std::future::pending().await;
    }
    if link.cut() {
        lane.pass(APPLY, index);
        tokio::time::sleep(ms(5)).await;
        lane.wait(REPLY, index).await;
        lane.pass(REPLY, index);
        return Reply::Lost("simulated partition");
    }
    let mut reply = link.apply(request, fault);
    lane.pass(APPLY, index);
    link.applied();
    match fault {
        Fault::ReplyDelay(d) => tokio::time::sleep(ms(d)).await,
        Fault::LostReply(d) => {
            if d > 0 {
                tokio::time::sleep(ms(d)).await;
            }
            reply = Reply::Lost("simulated lost reply");
        }
        _ => {}
    }
    lane.wait(REPLY, index).await;
    if link.dead() {
        return std::future::pending().await;
    }
    link.before_reply();
    lane.pass(REPLY, index);
    reply
}

/// The result types a [`Reply`] carries.
pub trait FromReply: Sized {
    /// The result in `reply`, if it carries this type.
    fn from_reply(reply: Reply) -> Option<Result<Self>>;
}

macro_rules! from_reply {
    ($($variant:ident: $t:ty),*) => {$(
        impl FromReply for $t {
            fn from_reply(reply: Reply) -> Option<Result<$t>> {
                match reply {
                    Reply::$variant(result) => Some(result),
                    _ => None,
                }
            }
        }
    )*};
}

from_reply!(Acquire: Acquire, AcquireAll: AcquireAll, Bool: bool, Fence: Option<u64>,
    Snapshot: Snapshot, Count: u32, Number: u64, Leader: Option<LeaderInfo>);

impl<L: Link> SimConn<L> {
    /// Sends `call` on `lock`: the result its reply carries; a lost one is a connection error,
    /// as from a response timeout.
    async fn ask<T: FromReply>(&self, lock: &LockKeys, call: Call) -> Result<T> {
        let lock = lock.clone();
        match self.call(Request { lock, call }).await {
            Reply::Lost(why) => Err(Error::Connection {
                operation: "a test fault".into(),
                address: String::new(),
                cause: Box::new(std::io::Error::new(std::io::ErrorKind::TimedOut, why)),
            }),
            reply => T::from_reply(reply).expect("the reply to the request sent"),
        }
    }
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
        self.ask(lock, Call::Acquire(claim.clone(), wait)).await
    }

    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        _now: Option<u64>,
    ) -> Result<AcquireAll> {
        self.ask(
            &parts[0].lock,
            Call::AcquireAll(parts.to_vec(), claim.clone()),
        )
        .await
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, _now: Option<u64>) -> Result<bool> {
        self.ask(lock, Call::Release(claim.clone())).await
    }

    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        handed_until: Option<u64>,
        _now: Option<u64>,
    ) -> Result<bool> {
        self.ask(lock, Call::Extend(claim.clone(), lease, handed_until))
            .await
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        _now: Option<u64>,
    ) -> Result<Option<u64>> {
        self.ask(lock, Call::Downgrade(claim.clone())).await
    }

    async fn inspect(
        &self,
        lock: &LockKeys,
        family: Family,
        _now: Option<u64>,
    ) -> Result<Snapshot> {
        self.ask(lock, Call::Inspect(family)).await
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        _now: Option<u64>,
    ) -> Result<u32> {
        self.ask(lock, Call::SetPermits(change, heartbeat)).await
    }

    async fn force_release(&self, lock: &LockKeys, _now: Option<u64>) -> Result<u64> {
        self.ask(lock, Call::ForceRelease).await
    }

    async fn proclaim(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        value: Option<&str>,
        _now: Option<u64>,
    ) -> Result<bool> {
        let value = value.map(str::to_owned);
        self.ask(lock, Call::Proclaim(claim.clone(), value)).await
    }

    async fn leader(&self, lock: &LockKeys, _now: Option<u64>) -> Result<Option<LeaderInfo>> {
        self.ask(lock, Call::Leader).await
    }

    fn hub(&self) -> &Arc<WakeHub> {
        &self.hub
    }

    fn one_slot_per_step(&self) -> bool {
        self.link.one_slot_per_step()
    }
}
