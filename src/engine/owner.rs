//! The one owner of a client's holds: a task that keeps every hold's [`HoldState`], its
//! timers and its requests in flight, and changes them only on the messages it receives
//! ([`Command`]), the replies of the requests it sent, and its timers. Guards are handles (a
//! command sender and a `watch` of their validity); nothing else reaches a hold's state.
//!
//! Registry rules live here too, as plain data of the one task: a client has at most one
//! entry per hold (lock name and token); a resume reserves the hold first; a step by id goes
//! through the hold's entry when the client has one, else reserves it; a detached hold's
//! entry stays while anything sent for it is in flight, and steps that wait for it are
//! dispatched again when it is quiet. Every request the owner sends has a deadline.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::engine::hold::{
    Answer, Ask, Caller, Effect, Event, HoldState, Outcome, Phase, Validity,
};
use crate::engine::lease::{release_with_retry, retrying};
use crate::engine::leftover::Leftover;
use crate::store::{Claim, Slot, Store};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;

mod steps;

/// A hold's name and token: what identifies it across guards and ids.
pub(crate) type Key = (String, String);

pub(crate) fn key(lock: &LockKeys, claim: &Claim) -> Key {
    (lock.name().to_owned(), claim.token.clone())
}

/// A new hold, handed to the owner by the acquisition (or resume) that made it.
pub(crate) struct NewHold {
    pub id: u64,
    pub state: HoldState,
    pub lock: LockKeys,
    pub claim: Claim,
    pub validity: watch::Sender<Validity>,
    /// The resume's reservation this hold takes over.
    pub reserved: bool,
    /// `wait_replicas`: every lease request and downgrade is trusted only once that many
    /// replicas acknowledged it, as the grant was.
    pub replicas: Option<(u32, Duration)>,
}

/// What a step by id does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ById {
    Release,
    Extend(Duration),
}

/// A step by id, and who waits for its answer.
pub(crate) struct StepById {
    pub lock: LockKeys,
    pub claim: Claim,
    pub step: ById,
    pub reply: oneshot::Sender<Result<bool>>,
}

/// What a reservation found.
#[derive(Debug)]
pub(crate) enum Reserved {
    Done,
    InUse,
}

/// The messages the owner takes.
pub(crate) enum Command {
    Grant(Box<NewHold>),
    Extend {
        id: u64,
        lease: Duration,
        reply: oneshot::Sender<Result<bool>>,
    },
    Downgrade {
        id: u64,
        slot: Slot,
        reply: oneshot::Sender<Result<u64>>,
    },
    /// The guard sends its release itself; `Released` follows with its answer.
    Release {
        id: u64,
    },
    /// The guard's own release ended: `held` is its answer; `None` (no answer, or its caller
    /// stopped waiting first): the owner sends it again.
    Released {
        id: u64,
        held: Option<bool>,
    },
    /// The guard was dropped without a release: the owner releases the hold.
    Dropped {
        id: u64,
    },
    Detach {
        id: u64,
    },
    /// A resume reserves its hold; `ticket` names this reservation.
    Reserve {
        key: Key,
        ticket: u64,
        reply: oneshot::Sender<Reserved>,
    },
    /// The reservation `ticket` ends (its resume failed, was cancelled, or never learned its
    /// answer); another's reservation of the key stays.
    Unreserve {
        key: Key,
        ticket: u64,
    },
    ById(StepById),
    ReleaseAll {
        reply: oneshot::Sender<Result<usize>>,
    },
    /// A wait's trace that no runtime removed (see [`crate::engine::leftover`]).
    Leftover {
        lock: LockKeys,
        leftover: Leftover,
    },
    HoldsName {
        name: String,
        reply: oneshot::Sender<bool>,
    },
    /// The engine stops at once, as a process killed: nothing more is sent, nothing released
    /// (feature `testing`).
    #[cfg(feature = "testing")]
    Crash,
}

/// Someone waiting for an answer.
enum Waiter {
    Extend(oneshot::Sender<Result<bool>>),
    Downgrade(oneshot::Sender<Result<u64>>, Slot),
}

impl Waiter {
    /// The answer when nothing live is left of hold `name`: an extend renewed nothing, a
    /// downgrade finds the hold lost.
    fn nothing_live(self, name: String) {
        match self {
            Waiter::Extend(reply) => {
                let _ = reply.send(Ok(false));
            }
            Waiter::Downgrade(reply, _) => {
                let _ = reply.send(Err(Error::LeaseLost { name }));
            }
        }
    }
}

struct Entry {
    seq: u64,
    state: HoldState,
    lock: LockKeys,
    claim: Claim,
    validity: watch::Sender<Validity>,
    waiters: HashMap<Caller, Waiter>,
    /// Errors of requests whose answer is [`Answer::Failed`].
    errors: HashMap<u64, Error>,
    /// Callers of releases by id, by request number.
    release_callers: HashMap<u64, oneshot::Sender<Result<bool>>>,
    /// Commands waiting for this hold to be quiet (nothing in flight).
    after_quiet: Vec<Command>,
    /// Its instant in the owner's timers.
    wake: Option<Instant>,
    /// Steps by id sent beside this (lost) guard, not answered yet.
    beside: u32,
    /// See [`NewHold::replicas`].
    replicas: Option<(u32, Duration)>,
}

/// What a request the owner sent is about.
enum Io {
    /// Request `n` of hold `id`.
    Hold { id: u64, n: u64 },
    /// The removal of a wait's trace: nobody waits for it.
    Leftover,
    /// A step by id sent beside any hold (its key was reserved for it).
    Beside {
        key: Key,
        entry: Option<u64>,
        reply: oneshot::Sender<Result<bool>>,
    },
}

/// A reply as it came back.
enum Reply {
    Lease(Result<bool>),
    Downgrade(Result<Option<u64>>),
    Release(Result<bool>),
}

struct Member {
    id: u64,
    n: u64,
    counted: bool,
    answer: Option<Result<bool>>,
    settled: Option<bool>,
}

struct ReleaseAll {
    members: Vec<Member>,
    reply: oneshot::Sender<Result<usize>>,
    /// Past this it answers with what it knows: its own releases are answered by then (each
    /// within one step's bound), and it waits no longer for a guard's own release (whose
    /// caller may sit on a runtime that is no longer driven).
    deadline: Instant,
}

/// The owner task's state.
pub(crate) struct Owner {
    store: Arc<dyn Store>,
    /// The longest one request may take (every attempt answered or timed out).
    step_bound: Duration,
    holds: HashMap<u64, Entry>,
    by_key: HashMap<Key, u64>,
    /// Reservations by key: the ticket of the resume that holds it (0: a step by id).
    reserved: HashMap<Key, u64>,
    timers: BTreeSet<(Instant, u64)>,
    io: JoinSet<(Io, Reply)>,
    jobs: Vec<ReleaseAll>,
    next_seq: u64,
    next_caller: Caller,
}

/// How long one step may take: a step is sent at most four times (20, 40 and 80 ms apart),
/// each waiting at most one response timeout.
pub(crate) fn step_bound(response_timeout: Duration) -> Duration {
    response_timeout
        .saturating_mul(4)
        .saturating_add(Duration::from_millis(140))
}

impl Owner {
    pub(crate) fn new(store: Arc<dyn Store>, response_timeout: Duration) -> Owner {
        Owner {
            store,
            step_bound: step_bound(response_timeout),
            holds: HashMap::new(),
            by_key: HashMap::new(),
            reserved: HashMap::new(),
            timers: BTreeSet::new(),
            io: JoinSet::new(),
            jobs: Vec::new(),
            next_seq: 0,
            next_caller: 0,
        }
    }

    /// Runs until every handle is gone, then finishes what is in flight (within one step's
    /// bound).
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        self.store.engine_started();
        loop {
            // Timers first on every turn, so a steady stream of replies never starves them.
            self.tick(Instant::now());
            let next = self
                .timers
                .first()
                .map(|(at, _)| *at)
                .into_iter()
                .chain(self.jobs.iter().map(|j| j.deadline))
                .min();
            tokio::select! {
                biased;
                Some(done) = self.io.join_next(), if !self.io.is_empty() => self.io_done(done),
                cmd = rx.recv() => match cmd {
                    #[cfg(feature = "testing")]
                    Some(Command::Crash) => {
                        self.io.abort_all();
                        return;
                    }
                    Some(cmd) => self.command(cmd),
                    None => break,
                },
                _ = sleep_until_some(next) => self.tick(Instant::now()),
            }
        }
        let bound = self.step_bound;
        let _ = tokio::time::timeout(bound, async {
            while let Some(done) = self.io.join_next().await {
                self.io_done(done);
            }
        })
        .await;
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now();
        match cmd {
            Command::Grant(hold) => self.grant(*hold, now),
            Command::Extend { id, lease, reply } => {
                let caller = self.caller();
                let event = Event::Extend { caller, lease };
                self.wait(id, caller, Waiter::Extend(reply), event, now);
            }
            Command::Downgrade { id, slot, reply } => {
                let caller = self.caller();
                let event = Event::Downgrade { caller };
                self.wait(id, caller, Waiter::Downgrade(reply, slot), event, now);
            }
            Command::Release { id } => self.guard_gone(id, false, now),
            Command::Released { id, held } => {
                self.apply(id, Event::Released { held }, now);
            }
            Command::Dropped { id } => self.guard_gone(id, true, now),
            Command::Detach { id } => {
                self.apply(id, Event::Detach, now);
            }
            Command::Reserve { key, ticket, reply } => self.reserve(key, ticket, reply),
            Command::Unreserve { key, ticket } => {
                if self.reserved.get(&key) == Some(&ticket) {
                    self.reserved.remove(&key);
                }
            }
            Command::ById(step) => self.by_id(step, now),
            Command::ReleaseAll { reply } => self.release_all(reply, now),
            Command::Leftover { lock, leftover } => self.remove_leftover(lock, leftover),
            Command::HoldsName { name, reply } => {
                let held = self.holds.values().any(|e| {
                    e.lock.name() == name
                        && e.state.phase() == Phase::Live
                        && !e.state.validity().lost
                });
                let _ = reply.send(held);
            }
            #[cfg(feature = "testing")]
            Command::Crash => {}
        }
    }

    /// Registers `waiter` on hold `id` and applies `event`; with no such hold, the waiter is
    /// told at once that nothing is live.
    fn wait(&mut self, id: u64, caller: Caller, waiter: Waiter, event: Event, now: Instant) {
        let Some(entry) = self.holds.get_mut(&id) else {
            return waiter.nothing_live(String::new());
        };
        entry.waiters.insert(caller, waiter);
        self.apply(id, event, now);
    }

    /// The guard of hold `id` is gone with its release: sent by the guard itself, or by the
    /// owner (`by_owner`).
    fn guard_gone(&mut self, id: u64, by_owner: bool, now: Instant) {
        let guard_gone = true;
        self.apply(
            id,
            Event::Release {
                by_owner,
                guard_gone,
            },
            now,
        );
    }

    fn caller(&mut self) -> Caller {
        self.next_caller += 1;
        self.next_caller
    }

    fn grant(&mut self, hold: NewHold, now: Instant) {
        let key = key(&hold.lock, &hold.claim);
        if hold.reserved {
            self.reserved.remove(&key);
        }
        self.next_seq += 1;
        let id = hold.id;
        self.by_key.insert(key, id);
        self.holds.insert(
            id,
            Entry {
                seq: self.next_seq,
                state: hold.state,
                lock: hold.lock,
                claim: hold.claim,
                validity: hold.validity,
                waiters: HashMap::new(),
                errors: HashMap::new(),
                release_callers: HashMap::new(),
                after_quiet: Vec::new(),
                wake: None,
                beside: 0,
                replicas: hold.replicas,
            },
        );
        self.apply(id, Event::Tick, now);
    }

    /// Applies `event` to hold `id` and carries out what it calls for.
    fn apply(&mut self, id: u64, event: Event, now: Instant) -> Vec<Effect> {
        let Some(entry) = self.holds.get_mut(&id) else {
            return Vec::new();
        };
        // The machine decides at an instant read under the validity's write lock, and a
        // guard's `is_held` reads its instant under the read lock: a guard that saw its trust
        // run out cannot see it back, since a confirmation decided after that instant finds
        // the trust run out too. The guard sees the new validity before any caller is answered.
        let (state, validity) = (&mut entry.state, &entry.validity);
        let mut effects = Vec::new();
        validity.send_if_modified(|v| {
            effects = state.on(event, Instant::now().max(now));
            let new = state.validity();
            let changed = *v != new;
            *v = new;
            changed
        });
        for effect in &effects {
            self.effect(id, *effect);
        }
        self.settle(id);
        effects
    }

    fn effect(&mut self, id: u64, effect: Effect) {
        let Some(entry) = self.holds.get_mut(&id) else {
            return;
        };
        match effect {
            Effect::Send { n, ask } => self.send(id, n, ask),
            Effect::Answer { caller, answer } => {
                let Some(waiter) = entry.waiters.remove(&caller) else {
                    return;
                };
                let bound = self.step_bound;
                let mut failed = |n, op| {
                    entry
                        .errors
                        .remove(&n)
                        .unwrap_or_else(|| timed_out(op, bound))
                };
                match (waiter, answer) {
                    (Waiter::Extend(reply), Answer::Extended(renewed)) => {
                        let _ = reply.send(Ok(renewed));
                    }
                    (Waiter::Downgrade(reply, slot), Answer::Downgraded(fence)) => {
                        entry.claim.slot = slot;
                        let _ = reply.send(Ok(fence));
                    }
                    (Waiter::Extend(reply), Answer::Failed { n }) => {
                        let _ = reply.send(Err(failed(n, "extend")));
                    }
                    (Waiter::Downgrade(reply, _), Answer::Failed { n }) => {
                        let _ = reply.send(Err(failed(n, "downgrade")));
                    }
                    (waiter, _) => waiter.nothing_live(entry.lock.name().to_owned()),
                }
            }
            Effect::Lost { why } => {
                tracing::warn!(lock = entry.lock.name(), why, "lease lost");
                crate::engine::telemetry::lost(&entry.claim.slot);
            }
        }
    }

    /// Sends request `n` of hold `id`, with its deadline.
    fn send(&mut self, id: u64, n: u64, ask: Ask) {
        let Some(entry) = self.holds.get(&id) else {
            return;
        };
        let (store, lock, mut claim) =
            (self.store.clone(), entry.lock.clone(), entry.claim.clone());
        let (bound, io, replicas) = (self.step_bound, Io::Hold { id, n }, entry.replicas);
        match ask {
            Ask::Lease {
                lease,
                give_up_at,
                handed_until,
            } => {
                claim.lease = lease;
                let deadline = give_up_at.unwrap_or_else(|| Instant::now() + bound);
                self.io.spawn(async move {
                    // No renewal or extend shortens the hold (a hand-off's claim sets the
                    // lease while the hold has the hand-off's deadline).
                    let call = async {
                        let renewed = store
                            .renew(&lock, &claim, lease, handed_until, None)
                            .await?;
                        if renewed {
                            acknowledged(&*store, &lock, replicas).await?;
                        }
                        Ok(renewed)
                    };
                    let reply = within(Some(deadline), bound, "renew", call).await;
                    (io, Reply::Lease(reply))
                });
            }
            Ask::Downgrade { lease } => {
                // The lease the hold has now (an extend may have changed it).
                claim.lease = lease;
                self.io.spawn(async move {
                    let call = async {
                        let fence = store.downgrade(&lock, &claim, None).await?;
                        if fence.is_some() {
                            acknowledged(&*store, &lock, replicas).await?;
                        }
                        Ok(fence)
                    };
                    let reply = within(None, bound, "downgrade", call).await;
                    (io, Reply::Downgrade(reply))
                });
            }
            Ask::Release => {
                self.io.spawn(async move {
                    let call = release_with_retry(&*store, &lock, &claim);
                    let reply = within(None, bound, "release", call).await;
                    if let Err(err) = &reply {
                        tracing::debug!(lock = lock.name(), %err, "release failed; the lease will lapse");
                    }
                    (io, Reply::Release(reply))
                });
            }
        }
    }

    /// After an event on hold `id`: publish its validity, move its timer, settle the
    /// `release_all`s waiting for it, run what waited for it to be quiet, forget it once done.
    fn settle(&mut self, id: u64) {
        let Some(entry) = self.holds.get_mut(&id) else {
            return;
        };
        let wake = entry.state.next_wake();
        if wake != entry.wake {
            if let Some(old) = entry.wake.take() {
                self.timers.remove(&(old, id));
            }
            if let Some(at) = wake {
                self.timers.insert((at, id));
            }
            entry.wake = wake;
        }
        let quiet = entry.state.is_quiet() && entry.beside == 0;
        let done = entry.state.is_done() && entry.beside == 0;
        let (ended_live, releasing) = (entry.state.ended_live(), !quiet);
        self.settle_jobs(id, ended_live, releasing);
        if !quiet {
            return;
        }
        let Some(entry) = self.holds.get_mut(&id) else {
            return;
        };
        let waiting = std::mem::take(&mut entry.after_quiet);
        if done && let Some(entry) = self.holds.remove(&id) {
            if let Some(at) = entry.wake {
                self.timers.remove(&(at, id));
            }
            let key = key(&entry.lock, &entry.claim);
            if self.by_key.get(&key) == Some(&id) {
                self.by_key.remove(&key);
            }
        }
        for cmd in waiting {
            self.command(cmd);
        }
    }

    fn tick(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(entry) = self.holds.get_mut(&id) {
                entry.wake = None;
            }
            self.apply(id, Event::Tick, now);
        }
        self.expire_jobs(now);
    }

    /// Sends the removal of a wait's trace, on the owner's connection.
    fn remove_leftover(&mut self, lock: LockKeys, leftover: Leftover) {
        let (store, bound) = (self.store.clone(), self.step_bound);
        self.io.spawn(async move {
            let removal = leftover.remove(&*store, &lock);
            if let Err(err) = within(None, bound, "release", removal).await {
                tracing::debug!(lock = lock.name(), %err, "release of a wait's trace failed; it lapses with its lease or heartbeat");
            }
            (Io::Leftover, Reply::Release(Ok(true)))
        });
    }

    fn io_done(&mut self, done: std::result::Result<(Io, Reply), tokio::task::JoinError>) {
        let Ok((io, reply)) = done else {
            return;
        };
        let now = Instant::now();
        match io {
            Io::Leftover => {}
            Io::Beside {
                key,
                entry,
                reply: caller,
            } => {
                match entry {
                    Some(id) => {
                        if let Some(e) = self.holds.get_mut(&id) {
                            e.beside -= 1;
                        }
                        self.settle(id);
                    }
                    None => {
                        if self.reserved.get(&key) == Some(&0) {
                            self.reserved.remove(&key);
                        }
                    }
                }
                let outcome = match reply {
                    Reply::Lease(r) | Reply::Release(r) => r,
                    Reply::Downgrade(r) => r.map(|f| f.is_some()),
                };
                let _ = caller.send(outcome);
            }
            Io::Hold { id, n } => {
                let Some(entry) = self.holds.get_mut(&id) else {
                    return;
                };
                let outcome = match reply {
                    Reply::Lease(Ok(true)) => Outcome::Confirmed { fence: None },
                    Reply::Lease(Ok(false)) | Reply::Downgrade(Ok(None)) => Outcome::Refused,
                    Reply::Downgrade(Ok(Some(fence))) => Outcome::Confirmed { fence: Some(fence) },
                    Reply::Lease(Err(err)) | Reply::Downgrade(Err(err)) => {
                        entry.errors.insert(n, err);
                        Outcome::Unknown
                    }
                    Reply::Release(answer) => {
                        let outcome = match &answer {
                            Ok(true) => Outcome::Confirmed { fence: None },
                            Ok(false) => Outcome::Refused,
                            Err(_) => Outcome::Unknown,
                        };
                        self.release_answered(id, n, answer);
                        outcome
                    }
                };
                self.apply(id, Event::Reply { n, outcome }, now);
            }
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The longest one `WAIT` of [`acknowledged`] holds its connection: the server answers
/// nothing else on it meanwhile (every hold of the client renews on the engine's; the
/// caller's acquires, releases and waits go on the client's).
const WAIT_SLICE: Duration = Duration::from_millis(1);

/// With `wait_replicas` (`replicas`), whether that many replicas acknowledged the writes of
/// `store`'s connection so far, asked in `WAIT`s of at most [`WAIT_SLICE`] until its timeout:
/// fewer is [`Error::ReplicasNotReached`], and the step that wrote is not trusted (a grant is
/// released again, a resume gives no guard; to a hold, a renewal's outcome is unknown and it
/// is sent again, an extend or a downgrade fails with that error).
pub(crate) async fn acknowledged(
    store: &dyn Store,
    lock: &LockKeys,
    replicas: Option<(u32, Duration)>,
) -> Result<()> {
    let Some((required, timeout)) = replicas else {
        return Ok(());
    };
    let end = Instant::now() + timeout;
    // Asked again after 1, 2, 4 ... ms, at most every 50 ms: a replica that stays silent costs
    // a few dozen `WAIT`s per step, not one per millisecond.
    let mut pause = WAIT_SLICE;
    loop {
        let acked = store
            .wait_replicas(lock, required, WAIT_SLICE.min(timeout))
            .await?;
        if acked >= required {
            return Ok(());
        }
        let now = Instant::now();
        if now >= end {
            return Err(Error::ReplicasNotReached { acked, required });
        }
        tokio::time::sleep_until((now + pause).min(end)).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// `call`'s outcome, waited for until `deadline` (`None`: one step's `bound` from now); past
/// it, [`timed_out`].
async fn within<T>(
    deadline: Option<Instant>,
    bound: Duration,
    operation: &str,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let outcome = match deadline {
        Some(at) => tokio::time::timeout_at(at, call).await,
        None => tokio::time::timeout(bound, call).await,
    };
    outcome.unwrap_or_else(|_| Err(timed_out(operation, bound)))
}

/// The error of a request the owner gave up waiting for.
fn timed_out(operation: &str, bound: Duration) -> Error {
    Error::connection(
        operation,
        "",
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply from Redis within {bound:?}"),
        ),
    )
}

/// The refusal of a resume, or of a step by id, of a hold this client already has a guard of
/// (or is resuming).
pub(crate) fn hold_in_use(name: &str) -> Error {
    Error::HoldInUse {
        name: name.to_owned(),
    }
}
