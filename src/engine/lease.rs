//! The handles of a client's holds: [`Holds`] (the client's side of its engine) and [`Hold`]
//! (the one behind every guard). Neither keeps any of a hold's state: the engine's one
//! [`Owner`] task does ([`crate::engine::owner`]), deciding through each hold's pure
//! [`HoldState`] ([`crate::engine::hold`]). A guard holds the hold's id, a command sender and
//! a `watch` of its validity; it reads its trust from the watch and sends every change as a
//! message, dropping included (which works outside a runtime).
//!
//! Local validity is measured from the *send* of the request that granted or renewed the
//! lease, never from its reply: the server may have started the lease at any instant after the
//! request left. A hold is trusted until `sent_at + lease - drift`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::engine::hold::{hand_off_window, HoldState, Plan, Planted, Start, Validity};
use crate::engine::leftover::Leftover;
use crate::engine::owner::{self, hold_in_use, Command, Key, NewHold, Owner, Reserved, StepById};
use crate::store::{Claim, Slot, Store};
use crate::vocab::bugs::{planted, Bug};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;
use crate::vocab::options::Options;

pub(crate) use crate::engine::owner::ById;

mod fence;
use fence::check_fence;

/// Where a client's engine runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Placement {
    /// On a thread of its own, with a runtime of its own (the default): holds are renewed
    /// and released whatever happens to the runtimes that use the client, and the last
    /// handle's drop waits for the releases in flight, so a lock does not outlive `main`.
    #[default]
    Thread,
    /// As a task of the runtime current when the client is built (a test on a paused
    /// clock): holds are renewed while that runtime runs.
    CurrentRuntime,
}

/// A client's side of its engine: the command sender every guard of the client shares. When
/// the last handle goes (the client and every guard dropped), the engine finishes the
/// releases in flight and ends; with [`Placement::Thread`] that drop waits for it (at most
/// one step's bound), so the releases of guards dropped as `main` returns are sent.
pub(crate) struct Holds {
    tx: Option<mpsc::UnboundedSender<Command>>,
    store: Arc<dyn Store>,
    /// The engine's store: resumes send their steps there too, on the connection the
    /// engine's requests use, so a request of the engine that timed out cannot be applied
    /// after a resume's renewal.
    engine_store: Arc<dyn Store>,
    response_timeout: Duration,
    /// How many waits' background removals may be on their way at once
    /// ([`crate::engine::leftover`]).
    pub(crate) removals: tokio::sync::Semaphore,
    /// The engine's thread ([`Placement::Thread`]).
    engine_thread: Option<std::thread::JoinHandle<()>>,
    /// The engine thread's runtime: every request on `engine_store` runs there, so its
    /// connection (and every reconnection) lives on that runtime, never on a caller's that
    /// may block (the last handle's drop waits for the engine) or end.
    engine_rt: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holds").finish_non_exhaustive()
    }
}

impl Holds {
    /// Starts the engine of a client on `store` whose requests are answered within
    /// `response_timeout`.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        response_timeout: Duration,
        placement: Placement,
    ) -> Holds {
        let (tx, rx) = mpsc::unbounded_channel();
        let engine_store = store.for_engine().unwrap_or_else(|| store.clone());
        let owner = Owner::new(engine_store.clone(), response_timeout);
        let (mut engine_thread, mut engine_rt) = (None, None);
        match placement {
            Placement::Thread => {
                let (rt_tx, rt_rx) = std::sync::mpsc::sync_channel(1);
                let spawned = std::thread::Builder::new()
                    .name("redis-locks-engine".into())
                    .spawn(move || {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build();
                        match runtime {
                            Ok(runtime) => {
                                let _ = rt_tx.send(runtime.handle().clone());
                                runtime.block_on(owner.run(rx))
                            }
                            Err(err) => tracing::error!(%err, "the lock engine could not start"),
                        }
                    });
                match spawned {
                    Ok(thread) => {
                        engine_thread = Some(thread);
                        engine_rt = rt_rx.recv().ok();
                    }
                    Err(err) => {
                        tracing::error!(%err, "no thread for the lock engine, so it does not run: this client's holds are not renewed");
                    }
                }
            }
            Placement::CurrentRuntime => match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(owner.run(rx));
                }
                Err(_) => tracing::error!(
                    "a client whose engine runs on the current runtime was built outside one: \
                     its holds are not renewed"
                ),
            },
        }
        Holds {
            tx: Some(tx),
            store,
            engine_store,
            response_timeout,
            removals: tokio::sync::Semaphore::new(crate::engine::leftover::REMOVALS_AT_ONCE),
            engine_thread,
            engine_rt,
        }
    }

    /// Runs `steps` (requests on `engine_store`) on the engine's runtime when it has one of
    /// its own, else here.
    async fn on_engine<T: Send + 'static>(
        &self,
        steps: impl std::future::Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        match &self.engine_rt {
            Some(rt) => rt
                .spawn(steps)
                .await
                .unwrap_or_else(|_| Err(engine_gone("resume"))),
            None => steps.await,
        }
    }

    fn send(&self, cmd: Command) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(cmd).is_ok())
    }

    /// Hands the removal of a wait's `leftover` to the engine
    /// ([`crate::engine::leftover`]); false when the engine has no connection of its own (it
    /// shares the caller's store, as with a store the caller built, whose
    /// connections go with the caller's runtime) or has stopped.
    pub(crate) fn remove_leftover(&self, lock: LockKeys, leftover: Leftover) -> bool {
        let own = !Arc::ptr_eq(&self.store, &self.engine_store);
        own && self.send(Command::Leftover { lock, leftover })
    }

    /// Sends `cmd` made with a reply channel and waits for the answer; an engine that ended
    /// (its runtime did) answers with an error.
    async fn ask<T>(
        &self,
        what: &str,
        cmd: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        if !self.send(cmd(reply)) {
            return Err(engine_gone(what));
        }
        answer.await.map_err(|_| engine_gone(what))
    }

    /// Stops the engine at once, as if its process were killed: no renewal, no release
    /// (feature `testing`).
    #[cfg(feature = "testing")]
    pub(crate) fn crash(&self) {
        self.send(Command::Crash);
    }

    /// Whether one of these holds, still valid, is on lock `name`.
    pub(crate) async fn holds_name(&self, name: &str) -> bool {
        let name = name.to_owned();
        self.ask("look up holds", |reply| Command::HoldsName { name, reply })
            .await
            .unwrap_or(false)
    }

    /// Releases every live hold by token, all at once, and marks their guards lost (so
    /// `is_held()` is false and `lost()` fires at once). Returns how many the server still
    /// held when this was called (each counted once). Errors are reported after every
    /// release has been tried. The releases are the engine's: cancelling this call stops
    /// none of them.
    pub(crate) async fn release_all(&self) -> Result<usize> {
        self.ask("release all", |reply| Command::ReleaseAll { reply })
            .await?
    }

    /// Reserves the hold `key` for a resume in this client (see [`Reservation`]): refused
    /// ([`Error::HoldInUse`]) while the client has an entry of it (a guard, live or lost, or
    /// one released and not answered yet) or another step reserved it; a detached guard's
    /// entry with something in flight is waited for, at most one step's bound.
    async fn reserve(self: &Arc<Self>, key: Key) -> Result<Reservation> {
        let name = key.0.clone();
        let bound = owner::step_bound(self.response_timeout);
        // Armed from the ask on: if this future ends before the answer is read (cancelled,
        // timed out), the reservation it may have got is given back.
        let mut reservation = Reservation {
            holds: self.clone(),
            key: Some(key.clone()),
            ticket: crate::vocab::token::random() | 1,
        };
        let ticket = reservation.ticket;
        let asked = self.ask("resume", |reply| Command::Reserve { key, ticket, reply });
        match tokio::time::timeout(bound, asked).await {
            Ok(Ok(Reserved::Done)) => Ok(reservation),
            Ok(Err(err)) => Err(err),
            Ok(Ok(Reserved::InUse)) => {
                reservation.key = None;
                Err(hold_in_use(&name))
            }
            Err(_) => Err(hold_in_use(&name)),
        }
    }
}

impl Drop for Holds {
    fn drop(&mut self) {
        // The engine sees its last handle go once the sender is dropped.
        drop(self.tx.take());
        if let Some(thread) = self.engine_thread.take() {
            // The engine ends once the releases in flight are answered (each within its
            // bound); looked at every few microseconds at first, then every millisecond.
            let end = std::time::Instant::now() + owner::step_bound(self.response_timeout);
            let mut pause = Duration::from_micros(20);
            while !thread.is_finished() && std::time::Instant::now() < end {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(1));
            }
        }
    }
}

fn engine_gone(what: &str) -> Error {
    Error::connection(
        what,
        "",
        std::io::Error::other(
            "the client's lock engine has stopped (the runtime it ran on ended); build the \
             client on a runtime that outlives its holds",
        ),
    )
}

/// A resume's reservation of its hold in its client's engine; dropping it (the resume
/// failed or was cancelled) frees the hold again; a resume that succeeds hands it to its new
/// hold.
struct Reservation {
    holds: Arc<Holds>,
    key: Option<Key>,
    ticket: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let ticket = self.ticket;
            self.holds.send(Command::Unreserve { key, ticket });
        }
    }
}

/// The hold behind every guard: a handle on the state the client's engine keeps.
pub(crate) struct Hold {
    id: u64,
    holds: Arc<Holds>,
    lock: LockKeys,
    /// The claim the store knows this hold by (its slot follows a downgrade, its lease an
    /// extend).
    claim: Claim,
    fence: u64,
    validity: watch::Receiver<Validity>,
    granted_at: Instant,
    /// Released, detached, or handed to the engine to release: the drop sends nothing.
    ended: bool,
}

impl Hold {
    /// Whether a grant handed to `claim` (whose latest refused attempt was sent at
    /// `attempt_sent_at`) is still worth taking as it is: at least half of its trust window is
    /// left. Otherwise the waiter confirms it with an attempt, which claims the full lease; a
    /// guard must not start out already (or almost) lost.
    pub(crate) fn hand_off_is_fresh(claim: &Claim, attempt_sent_at: Instant) -> bool {
        let window = hand_off_window(claim.heartbeat, claim.lease, Planted::now());
        Instant::now() < attempt_sent_at + window.saturating_sub(Options::drift(window)) / 2
    }

    /// A new hold, handed to the engine: granted by the reply to a request (trusted for its
    /// lease from that send), or handed over by someone else's release while this claim
    /// waited (the wake-up carried the grant: trusted from the send of the waiter's latest
    /// attempt for the heartbeat window, never longer than the lease, and its full lease
    /// claimed at once by the engine); see [`Start`]. `reserved`: a resume's reservation the
    /// hold takes over.
    pub(crate) fn start(
        holds: Arc<Holds>,
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        start: Start,
        opts: &Options,
        reserved: bool,
    ) -> Self {
        let now = Instant::now();
        let plan = Plan::of(opts);
        let state = HoldState::new(
            start,
            claim.lease,
            claim.heartbeat,
            plan,
            now,
            Planted::now(),
        );
        let (validity_tx, validity) = watch::channel(state.validity());
        let id = crate::vocab::token::random();
        holds.send(Command::Grant(Box::new(NewHold {
            id,
            state,
            lock: lock.clone(),
            claim: claim.clone(),
            validity: validity_tx,
            reserved,
            replicas: opts.wait_replicas,
        })));
        Hold {
            id,
            holds,
            lock,
            claim,
            fence,
            validity,
            granted_at: now,
            ended: false,
        }
    }

    pub(crate) fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// The store, keys and claim of this hold, for steps beside the lock's own (an
    /// election's proclaim).
    pub(crate) fn step_parts(&self) -> (Arc<dyn Store>, LockKeys, Claim) {
        (
            self.holds.store.clone(),
            self.lock.clone(),
            self.claim.clone(),
        )
    }

    pub(crate) fn name(&self) -> &str {
        self.lock.name()
    }

    #[cfg(feature = "testing")]
    pub(crate) fn token(&self) -> String {
        self.claim.token.clone()
    }

    /// The claim the store knows this hold by (its slot follows a downgrade).
    pub(crate) fn claim(&self) -> Claim {
        self.claim.clone()
    }

    /// Gives this guard up without releasing the hold: the server's lease runs on until its
    /// deadline. Renewals stop and nothing more is sent for it; the hold is no longer one of
    /// this client's (`release_all` leaves it). While something sent for it is still in
    /// flight, a resume of its id in this client waits for that to end.
    pub(crate) fn detach(mut self) {
        self.ended = true;
        self.holds.send(Command::Detach { id: self.id });
    }

    pub(crate) fn is_held(&self) -> bool {
        // The instant is read under the validity's read lock (see `Owner::apply`).
        let v = self.validity.borrow();
        !v.lost && Instant::now() < v.until
    }

    /// The instant until which the hold is trusted (local monotonic clock).
    pub(crate) fn valid_until(&self) -> Instant {
        self.validity.borrow().until
    }

    pub(crate) async fn lost(&self) {
        let mut rx = self.validity.clone();
        let mut engine_gone = false;
        loop {
            // The instant is read under the validity's read lock, as `is_held` reads it: a
            // `lost()` that resolved is never followed by `is_held()` true.
            let v = {
                let v = rx.borrow_and_update();
                if v.lost || Instant::now() >= v.until {
                    return;
                }
                *v
            };
            if engine_gone {
                tokio::time::sleep_until(v.until).await;
                return;
            }
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(v.until) => {}
                changed = rx.changed() => engine_gone = changed.is_err(),
            }
        }
    }

    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<bool> {
        crate::vocab::options::check_duration("lease", lease)?;
        if self.validity.borrow().lost {
            return Ok(false);
        }
        let id = self.id;
        let renewed = self
            .holds
            .ask("extend", |reply| Command::Extend { id, lease, reply })
            .await??;
        if renewed {
            self.claim.lease = lease;
        }
        Ok(renewed)
    }

    /// Releases the hold by token, on the caller's own task. The engine is told before the
    /// request leaves (renewals stop, the guard is lost) and after its answer; a release
    /// whose future is dropped before the answer is sent again by the engine.
    pub(crate) async fn release(mut self) -> Result<bool> {
        crate::engine::telemetry::held(&self.claim.slot, self.granted_at.elapsed());
        self.holds.send(Command::Release { id: self.id });
        // From here the engine knows of the release: the drop must not send `Dropped`
        // unless the answer never came (see `Cut`).
        self.ended = true;
        let cut = Cut {
            holds: &self.holds,
            id: self.id,
            armed: true,
        };
        let outcome = release_with_retry(&*self.holds.store, &self.lock, &self.claim).await;
        cut.disarm(outcome.as_ref().ok().copied());
        outcome
    }

    /// Turns the exclusive hold into a shared one (`shared_slot`) atomically, in place: the
    /// same hold and engine entry go on as the shared hold. The request takes its turn behind
    /// the hold's other lease requests, and its grant is trusted from its send; a loss that
    /// came before the reply wins. If the caller stops waiting or the reply is lost, the
    /// guard is dropped and its release removes whichever form the server has.
    pub(crate) async fn downgrade(&mut self, shared_slot: Slot) -> Result<()> {
        let id = self.id;
        let name = self.lock.name().to_owned();
        let fence = self
            .holds
            .ask("downgrade", |reply| Command::Downgrade {
                id,
                slot: shared_slot,
                reply,
            })
            .await?
            .map_err(|err| match err {
                Error::LeaseLost { .. } => Error::LeaseLost { name },
                other => other,
            })?;
        self.fence = fence;
        self.claim.slot = shared_slot;
        Ok(())
    }
}

/// A guard's release on its way: dropped before its answer came (the caller stopped
/// waiting), it tells the engine, which sends the release again.
struct Cut<'a> {
    holds: &'a Holds,
    id: u64,
    armed: bool,
}

impl Cut<'_> {
    fn disarm(mut self, held: Option<bool>) {
        self.armed = false;
        self.holds.send(Command::Released { id: self.id, held });
    }
}

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (id, held) = (self.id, None);
            self.holds.send(Command::Released { id, held });
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.ended {
            crate::engine::telemetry::held(&self.claim.slot, self.granted_at.elapsed());
            if !self.holds.send(Command::Dropped { id: self.id }) {
                crate::engine::telemetry::unreleased(self.lock.name(), self.claim.lease, false);
            }
        }
    }
}

/// Resuming a hold from its id, and releasing or extending a hold by its id. A client keeps
/// at most one guard per hold: a resume reserves the hold first and is refused when the
/// client has an entry of it; a step by id goes through that entry, and is refused while a
/// resume of the hold is under way in this client.
impl Hold {
    /// Turns `claim` (a hold id's token and slot, with the handle's lease) back into a hold
    /// after one owner-checked step that renews the lease (the store's `extend`); trusted
    /// from that step's send, as a grant is. `Ok(None)`: the store holds nothing live for
    /// the token (nothing was granted). [`Error::HoldInUse`] (nothing sent): this client
    /// already has a guard of the hold, or is resuming it. For an exclusive hold, the
    /// server's fence (in quorum mode, the majority's) must be the id's `fence`, read before
    /// the renewal (else [`Error::MalformedHoldId`], nothing renewed). With `wait_replicas`
    /// in `opts`, the replicas must acknowledge the renewal (else
    /// [`Error::ReplicasNotReached`], the hold left renewed with no guard).
    pub(crate) async fn resume(
        holds: Arc<Holds>,
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        opts: Options,
    ) -> Result<Option<Hold>> {
        let store = holds.engine_store.clone();
        let mut reservation = holds.reserve(owner::key(&lock, &claim)).await?;
        let (wait_replicas, lock2, claim2) = (opts.wait_replicas, lock.clone(), claim.clone());
        let steps = async move {
            let (lock, claim) = (lock2, claim2);
            // The fence first: an altered id is refused before anything is renewed.
            if !check_fence(&*store, &lock, &claim, fence).await? {
                return Ok(None);
            }
            let (renewed, sent_at) = renew_for_resume(&*store, &lock, &claim).await;
            if !renewed? {
                return Ok(None);
            }
            // As after a grant: the guard counts only once the replicas have the renewal. If
            // they do not, the hold is left as it was (renewed), no guard.
            owner::acknowledged(&*store, &lock, wait_replicas).await?;
            Ok(Some(sent_at))
        };
        let Some(sent_at) = holds.on_engine(steps).await? else {
            return Ok(None);
        };
        let sent_at = match planted(Bug::ResumeTrustsReply) {
            true => Instant::now(),
            false => sent_at,
        };
        // The new hold takes the reservation over.
        reservation.key = None;
        let start = Start::Granted { sent_at };
        Ok(Some(Hold::start(
            holds, lock, claim, fence, start, &opts, true,
        )))
    }
}

/// The owner-checked renewal of a resume, sent again after a lost reply (it is idempotent:
/// each sets the same lease from its own arrival); with the send instant of the attempt
/// answered.
async fn renew_for_resume(
    store: &dyn Store,
    lock: &LockKeys,
    claim: &Claim,
) -> (Result<bool>, Instant) {
    let mut sent_at = Instant::now();
    let (outcome, _) = retrying(|| {
        sent_at = Instant::now();
        store.extend(lock, claim, claim.lease, None)
    })
    .await;
    (outcome, sent_at)
}

/// Releases ([`ById::Release`]) or renews ([`ById::Extend`], to its lease from now) the hold
/// `claim` names, without a guard; `Ok(false)`: it holds nothing live. When this client has a
/// guard of that hold, the step goes through it: a release marks the guard lost first; an
/// extend of a trusted guard makes its trust and renewals follow the new lease, a guard whose
/// trust ran out stays lost and the extend goes beside it. Without a guard here, the step
/// reserves the hold as a resume does (so a resume in this client is refused meanwhile); it
/// is refused itself ([`Error::HoldInUse`], nothing sent) while a resume of the hold is under
/// way in this client.
pub(crate) async fn step_by_id(
    holds: &Holds,
    lock: &LockKeys,
    claim: &Claim,
    step: ById,
) -> Result<bool> {
    let what = match step {
        ById::Release => "release by id",
        ById::Extend(lease) => {
            crate::vocab::options::check_duration("lease", lease)?;
            "extend by id"
        }
    };
    let (lock, claim) = (lock.clone(), claim.clone());
    let by_id = |reply| StepById {
        lock,
        claim,
        step,
        reply,
    };
    holds.ask(what, |reply| Command::ById(by_id(reply))).await?
}

/// Runs an idempotent step, sending it again after a lost reply (a retryable error) up to
/// three times, 20, 40 and 80 ms apart. Returns the last outcome and the first error retried:
/// after a lost reply, an answer such as "nothing held" may be the lost attempt's own doing.
pub(crate) async fn retrying<T, F, Fut>(mut step: F) -> (Result<T>, Option<Error>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(20);
    let mut first_error = None;
    for attempt in 0.. {
        match step().await {
            Err(e) if e.is_retryable() && attempt < 3 => {
                first_error.get_or_insert(e);
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return (other, first_error),
        }
    }
    unreachable!("the loop returns")
}

/// Releases by token, retrying a lost reply a few times (release is idempotent by token).
pub(crate) async fn release_with_retry(
    store: &dyn Store,
    lock: &LockKeys,
    claim: &Claim,
) -> Result<bool> {
    match retrying(|| store.release(lock, claim, None)).await {
        // After a lost reply, "nothing held" may mean the lost attempt released it: the
        // answer stays unknown, so the first error is reported, not a false "you had lost it".
        (Ok(false), Some(e)) => Err(e),
        (outcome, _) => outcome,
    }
}
