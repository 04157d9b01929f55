//! A live hold: renewal in the background, the local validity deadline, the lost signal, and
//! release (explicit, or in the background on drop).
//!
//! Local validity is measured from the *send* of the request that granted or renewed the
//! lease, never from its reply: the server may have started the lease at any instant after the
//! request left. A hold is trusted until `sent_at + lease - drift`; each confirmed renewal
//! restarts that from its own send instant.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::store::{Claim, Slot, Store};
use crate::vocab::bugs::{planted, Bug};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;
use crate::vocab::options::Options;

#[derive(Clone, Copy, Debug)]
struct Validity {
    /// The hold is trusted until then (local monotonic clock).
    until: Instant,
    /// The send instant of the request that set `until` (renewals are scheduled from it).
    since: Instant,
    lost: bool,
}

impl Validity {
    /// Lost from now on: nothing is trusted past this instant any more.
    fn lose(&mut self) {
        self.lost = true;
        self.until = self.until.min(Instant::now());
    }
}

/// What the hold knows about its lease requests (renewals and `extend`s), which run one at a
/// time in the order sent, so the server applies them in that order and the last reply tells
/// the server's deadline.
#[derive(Default)]
struct Requests {
    /// The shortest lease among requests whose outcome is unknown (a lost reply, a cancelled
    /// `extend`): such a request may still be applied later, after a confirmed one, and then
    /// sets the deadline to at least its own send instant plus its lease.
    unknown_min: Option<Duration>,
}

struct Shared {
    granted_at: Instant,
    holds: Arc<Holds>,
    store: Arc<dyn Store>,
    lock: LockKeys,
    claim: StdMutex<Claim>,
    /// The exclusive grant's fence; a downgrade's reply sets it (the same fence, as the
    /// server reports it).
    fence: AtomicU64,
    validity: watch::Sender<Validity>,
    requests: tokio::sync::Mutex<Requests>,
    renewer: StdMutex<Renewer>,
    /// A release of this hold was sent (or is about to be). The hold stays in its client's
    /// registry until that release is answered, so a resume of its id in this client finds
    /// it and is refused instead of renewing a lease the release then ends under it.
    releasing: std::sync::atomic::AtomicBool,
    /// Its guard was detached: the entry stays in the registry only until nothing sent for
    /// it is in flight ([`Shared::is_quiet`]); a resume of its id in this client waits for
    /// that instead of being refused. Set under the registry's lock.
    detached: std::sync::atomic::AtomicBool,
    /// Renewal requests of this hold on their way (registered before the send, which is not
    /// made once the hold is detached: [`Shared::renewal_sending`]).
    renewals_sending: std::sync::atomic::AtomicUsize,
    /// This hold's releases and steps by id in flight (registered under the registry's lock,
    /// before anything is sent), and whether a release was answered `true` (the server still
    /// held the hold). Releases of one hold (its guard's, its drop's, `release_all`'s, one by
    /// id) may run at once, and only the first the server applies is answered `true`:
    /// `release_all` counts a hold when any of them was. Every change (of these counts and of
    /// `renewals_sending`) is announced here, for [`Shared::settled`].
    releases: watch::Sender<Releases>,
}

/// See [`Shared::releases`].
#[derive(Clone, Copy, Default)]
struct Releases {
    in_flight: usize,
    /// Steps by id (`extend_hold`) that found this hold: through its lease owner, or beside
    /// a guard whose trust ran out.
    by_id: usize,
    ended_live: bool,
}

/// An `extend_hold` of this hold under way (see [`Releases::by_id`]), until dropped.
struct StepById(Arc<Shared>);

impl StepById {
    fn new(shared: Arc<Shared>) -> StepById {
        shared.releases.send_modify(|r| r.by_id += 1);
        StepById(shared)
    }
}

impl Drop for StepById {
    fn drop(&mut self) {
        self.0.releases.send_modify(|r| r.by_id -= 1);
    }
}

/// One release of a hold, in flight from its making ([`Shared::release_ticket`]) to its
/// drop (answered, failed or cancelled), which takes it out of [`Shared::releases`] with its
/// answer if it had one.
struct ReleaseTicket {
    shared: Arc<Shared>,
    held: bool,
}

impl ReleaseTicket {
    /// Releases the hold by token.
    async fn send(mut self) -> Result<bool> {
        let claim = self.shared.claim();
        let held = release_with_retry(&*self.shared.store, &self.shared.lock, &claim).await?;
        self.held = held;
        Ok(held)
    }
}

impl Drop for ReleaseTicket {
    fn drop(&mut self) {
        let held = self.held;
        self.shared.releases.send_modify(|r| {
            r.in_flight -= 1;
            r.ended_live |= held;
        });
    }
}

/// A renewal request of a hold on its way ([`Shared::renewal_sending`]), until dropped.
struct RenewalSending<'a>(&'a Shared);

impl Drop for RenewalSending<'_> {
    fn drop(&mut self) {
        self.0.renewals_sending.fetch_sub(1, Ordering::SeqCst);
        self.0.releases.send_modify(|_| {});
    }
}

/// Where a hold's renewals stand. A hold that renews has exactly one entry in its client's
/// [`Renewals`] schedule (of the runtime that renews it) from its grant until it is released,
/// lost, or renewed for the last time: every transition moves that entry, none drops it
/// without turning renewals `Off`, so no hold can fall out of the schedule. A renewal in
/// flight keeps the entry too, at the instant its trust ends; the renewal moves it when it is
/// answered, and if its task died with its runtime, the entry is still there for the next
/// `extend` (from a live runtime) to move. A hold costs no task of its own, no timer and no
/// wake-up between renewals.
enum Renewer {
    /// Not renewed (auto-renewal off, the one renewal of a `once` plan done, released, lost).
    /// Nothing turns renewals on again.
    Off,
    /// In the schedule of `plan.runtime` at `due`; the renewal sent, if one is in flight.
    Scheduled {
        due: Instant,
        plan: Box<Plan>,
        in_flight: Option<AbortHandle>,
    },
}

/// What the schedule needs to renew a hold again.
#[derive(Clone)]
struct Plan {
    /// The hold's entry in its client's [`Holds`] (and its key in the schedule).
    id: u64,
    runtime: RuntimeKey,
    opts: Options,
    /// Stop after the first confirmed renewal (a handed-over grant with auto-renewal off).
    once: bool,
    /// No renewal is sent from then on (`max_hold` after the grant): the trust then runs out,
    /// `lost()` fires, and the server's lease lapses within one lease.
    renew_until: Option<Instant>,
}

/// When the renewal after a confirmed request is due: a renewal interval after the send of
/// that request, for the hold's lease, and at the latest halfway through what is trusted (so
/// a shortened trust, after a request of unknown outcome, is renewed in time too).
fn next_renewal(v: &Validity, lease: Duration, opts: &Options) -> Instant {
    let every = if planted(Bug::UnorderedRenewals) {
        opts.renew_interval()
    } else {
        opts.renew_interval_for(lease)
    };
    let halfway = v.since + v.until.saturating_duration_since(v.since) / 2;
    (v.since + every).min(halfway.max(v.since))
}

/// The trust a request sent at `sent_at` for `lease` buys: the server applied it at or after
/// the send, so its deadline is at least `sent_at + lease`; drift is kept off.
fn trusted_until(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(Options::drift(lease))
}

/// How long a handed-over grant is trusted from the send of the waiter's latest refused
/// attempt: the release granted it until that attempt's heartbeat deadline, and the claim that
/// follows sets the server deadline to the lease from then, so never longer than either.
fn hand_off_window(claim: &Claim) -> Duration {
    if planted(Bug::HandOffTrustsHeartbeat) {
        claim.heartbeat
    } else {
        claim.heartbeat.min(claim.lease)
    }
}

/// Marks a lease request whose reply never came (lost, or the caller stopped waiting) as of
/// unknown outcome when dropped unanswered.
struct InFlight<'a> {
    requests: &'a mut Requests,
    lease: Duration,
    answered: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.answered {
            let min = self
                .requests
                .unknown_min
                .map_or(self.lease, |m| m.min(self.lease));
            self.requests.unknown_min = Some(min);
        }
    }
}

impl Shared {
    /// No renewal of this hold starts or goes on any more: its schedule entry is removed and
    /// its renewal in flight aborted.
    fn stop_renewer(&self) {
        let renewer = std::mem::replace(
            &mut *self.renewer.lock().unwrap_or_else(|p| p.into_inner()),
            Renewer::Off,
        );
        if let Renewer::Scheduled {
            due,
            plan,
            in_flight,
        } = renewer
        {
            self.holds.renewals.remove(plan.runtime, due, plan.id);
            if let Some(task) = in_flight {
                task.abort();
            }
        }
    }

    /// Moves the hold's entry to the renewal its trust calls for now, or to `retry_at`: after
    /// a request changed the trust (an `extend`, a downgrade), or after a renewal was answered.
    /// A lost hold's entry is removed (renewals off).
    fn reschedule(self: &Arc<Self>, retry_at: Option<Instant>) {
        let mut renewer = self.renewer.lock().unwrap_or_else(|p| p.into_inner());
        let v = *self.validity.borrow();
        if v.lost {
            self.turn_off(&mut renewer);
            return;
        }
        let Renewer::Scheduled { plan, .. } = &*renewer else {
            return;
        };
        let due = retry_at.unwrap_or_else(|| next_renewal(&v, self.claim().lease, &plan.opts));
        self.move_entry(&mut renewer, due);
    }

    /// A renewal of this hold is over (answered or failed): its entry moves to the next
    /// renewal (`once`: renewals end with the first confirmed one).
    fn renewal_done(self: &Arc<Self>, confirmed: bool, retry_at: Option<Instant>) {
        {
            let mut renewer = self.renewer.lock().unwrap_or_else(|p| p.into_inner());
            let Renewer::Scheduled {
                plan, in_flight, ..
            } = &mut *renewer
            else {
                return;
            };
            *in_flight = None;
            if confirmed && plan.once {
                self.turn_off(&mut renewer);
                return;
            }
        }
        self.reschedule(retry_at);
    }

    /// Renewals off: the entry leaves its schedule.
    fn turn_off(&self, renewer: &mut Renewer) {
        if let Renewer::Scheduled { due, plan, .. } = std::mem::replace(renewer, Renewer::Off) {
            self.holds.renewals.remove(plan.runtime, due, plan.id);
        }
    }

    /// Moves the entry (in `renewer`, `Scheduled`) to `due`, on the schedule of the runtime
    /// that renews the hold while that runtime's driver lives (an `extend` from a short-lived
    /// helper runtime leaves it there); only a hold whose runtime shut down moves to the
    /// runtime asking now.
    fn move_entry(self: &Arc<Self>, renewer: &mut Renewer, due: Instant) {
        let Renewer::Scheduled { due: old, plan, .. } = renewer else {
            return;
        };
        self.holds.renewals.remove(plan.runtime, *old, plan.id);
        let current = current_runtime();
        if !self.holds.renewals.is_live(plan.runtime) || planted(Bug::RenewalsFollowTheCaller) {
            if let Some(current) = current {
                plan.runtime = current;
            }
        } else if let Some(current) = current.filter(|c| *c != plan.runtime) {
            // Asked from another runtime while the renewing one seems alive: it may be
            // shutting down right now (its driver not marked finished yet). Look again from
            // the asking runtime a little later; a helper runtime that ends first takes the
            // look along with it.
            self.look_after_from(current);
        }
        self.holds.renewals.add(plan.runtime, due, plan.id, self);
        *old = due;
    }

    /// From runtime `origin` (the current one), checks a few times over the next two seconds
    /// that the hold's renewing runtime still lives, and moves the hold's entry to `origin`
    /// if it does not (it shut down just as a request from `origin` left the entry there).
    fn look_after_from(self: &Arc<Self>, origin: RuntimeKey) {
        let hold = Arc::downgrade(self);
        tokio::spawn(async move {
            for wait in [100, 400, 1_500] {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let Some(shared) = hold.upgrade() else { return };
                if shared.holds.renewals.has_ended(origin) {
                    return;
                }
                let mut renewer = shared.renewer.lock().unwrap_or_else(|p| p.into_inner());
                let Renewer::Scheduled { due, plan, .. } = &mut *renewer else {
                    return;
                };
                if !shared.holds.renewals.is_live(plan.runtime) {
                    shared.holds.renewals.remove(plan.runtime, *due, plan.id);
                    plan.runtime = origin;
                    shared.holds.renewals.add(origin, *due, plan.id, &shared);
                    return;
                }
            }
        });
    }

    /// Called by the driver when the entry (`due`, `id`) fell due (the driver took it out of
    /// the schedule): sends the renewal and puts the entry back at the instant the trust
    /// ends (the renewal moves it when answered). A stale entry (the hold was released or
    /// moved meanwhile) is dropped: the hold's one entry is elsewhere, or renewals are off.
    fn renew_now(self: &Arc<Self>, due: Instant, id: u64) {
        let mut renewer = self.renewer.lock().unwrap_or_else(|p| p.into_inner());
        let Renewer::Scheduled {
            due: d,
            plan,
            in_flight,
        } = &mut *renewer
        else {
            return;
        };
        if *d != due || plan.id != id {
            return;
        }
        if plan.renew_until.is_some_and(|end| Instant::now() >= end) {
            // Past `max_hold`: the driver took the entry out already; renewals end here.
            *renewer = Renewer::Off;
            return;
        }
        let back_at = if in_flight.as_ref().is_some_and(|t| !t.is_finished()) {
            // The previous renewal still waits its turn (behind an `extend`): look again soon.
            Instant::now() + Duration::from_millis(50)
        } else {
            let task = tokio::spawn(renew_once(self.clone()));
            *in_flight = Some(task.abort_handle());
            self.until().max(Instant::now() + Duration::from_millis(1))
        };
        let (runtime, id) = (plan.runtime, plan.id);
        self.holds.renewals.add(runtime, back_at, id, self);
        *d = back_at;
    }

    fn claim(&self) -> Claim {
        self.claim.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn mark_lost(&self, why: &str) {
        let mut changed = false;
        self.validity.send_modify(|v| {
            changed = !v.lost;
            v.lose();
        });
        if changed {
            tracing::warn!(lock = self.lock.name(), why, "lease lost");
            crate::engine::telemetry::lost(&self.claim().slot);
        }
    }

    fn until(&self) -> Instant {
        self.validity.borrow().until
    }

    /// Asks the store to renew the hold to its current lease from now; `Ok(false)`: it holds
    /// nothing live (the hold is then marked lost). The lease is read once this request's
    /// turn has come, so a renewal that waited behind an `extend` asks for the length the
    /// `extend` set.
    ///
    /// `extend_to`: an `extend` to that lease (stored for later renewals once this request
    /// has its turn); `None`: a renewal for the stored one.
    ///
    /// A `renewal` (the schedule's, not an `extend`) gives up, and marks the hold lost, when
    /// no reply came before the trust ends. That instant too is read once its turn has come:
    /// an `extend` confirmed while the renewal waited has moved it.
    ///
    /// The local deadline follows the last request the server applied, never the largest
    /// reply: a request for a shorter lease lowers the trust before it is even sent (it may
    /// be applied at any moment from then on), and a confirmed reply sets the trust from its
    /// own send instant, capped by any earlier request whose outcome stayed unknown.
    async fn request(self: &Arc<Self>, extend_to: Option<Duration>) -> Result<bool> {
        let renewal = extend_to.is_none();
        if planted(Bug::UnorderedRenewals) {
            let lease = extend_to.unwrap_or(self.claim().lease);
            let outcome = self
                .request_unordered(lease, renewal.then(|| self.until()))
                .await;
            if !renewal {
                self.reschedule(None);
            }
            return outcome;
        }
        let read_early = renewal.then(|| self.until());
        let mut requests = self.turn().await?;
        // The new length is stored only once this request has its turn: one that gave up
        // waiting for it changes nothing.
        if let Some(lease) = extend_to {
            self.set_lease(lease);
        }
        if self.validity.borrow().lost {
            return Ok(false);
        }
        let give_up_at = if renewal {
            let until = match read_early {
                Some(early) if planted(Bug::StaleRenewalGiveUp) => early,
                _ => self.until(),
            };
            if Instant::now() >= until {
                self.mark_lost("renewal came too late");
                return Ok(false);
            }
            Some(until)
        } else {
            None
        };
        // A renewal registers before it is sent, and is not sent for a detached hold.
        let _sending = match renewal {
            true => match self.renewal_sending() {
                Some(sending) => Some(sending),
                None => return Ok(false),
            },
            false => None,
        };
        let claim = self.claim();
        let lease = claim.lease;
        let sent_at = Instant::now();
        // The planted hand-off bug keeps the old rule too: trust only ever grew.
        let raise_only = planted(Bug::HandOffTrustsHeartbeat);
        if !raise_only {
            self.validity.send_modify(|v| {
                v.until = v.until.min(trusted_until(sent_at, lease));
            });
            // The trust may have shrunk: the next renewal follows it (a renewal's own request
            // is rescheduled when answered).
            self.reschedule(None);
        }
        let unknown_min = requests.unknown_min;
        let mut in_flight = InFlight {
            requests: &mut requests,
            lease,
            answered: false,
        };
        let Some(reply) = self.send(&claim, lease, give_up_at).await else {
            return Ok(false);
        };
        if reply.is_ok() {
            in_flight.answered = true;
        }
        // Outcome unknown (an error): `in_flight` records it when dropped.
        let trusted = unknown_min.map_or(lease, |m| m.min(lease));
        self.answered(reply?, sent_at, trusted, raise_only)
    }

    /// Takes the answer to a lease request sent at `sent_at` that the server applies for
    /// `trusted` (its lease, capped by any earlier request of unknown outcome): confirmed,
    /// the trust runs from the send; refused, the hold is lost.
    fn answered(
        self: &Arc<Self>,
        confirmed: bool,
        sent_at: Instant,
        trusted: Duration,
        raise_only: bool,
    ) -> Result<bool> {
        if !confirmed {
            self.mark_lost("renewal refused: the lease lapsed or was taken over");
            return Ok(false);
        }
        let until = trusted_until(sent_at, trusted);
        self.validity.send_modify(|v| {
            if !v.lost && (!raise_only || until > v.until) {
                v.until = until;
                v.since = sent_at;
            }
        });
        self.reschedule(None);
        Ok(true)
    }

    /// Sends one lease request; `None` (the hold marked lost) when no reply came before
    /// `give_up_at`.
    async fn send(
        &self,
        claim: &Claim,
        lease: Duration,
        give_up_at: Option<Instant>,
    ) -> Option<Result<bool>> {
        let call = self.store.extend(&self.lock, claim, lease, None);
        match give_up_at {
            Some(at) => match tokio::time::timeout_at(at, call).await {
                Ok(reply) => Some(reply),
                Err(_) => {
                    self.mark_lost("no renewal confirmed before the lease ran out");
                    None
                }
            },
            None => Some(call.await),
        }
    }

    /// The planted bug: requests run concurrently, a renewal's reply only ever raises the
    /// trust and `extend` sets it from its own reply (and stores its lease for later renewals
    /// only once confirmed, so a renewal racing it asks for the old one).
    async fn request_unordered(
        &self,
        lease: Duration,
        give_up_at: Option<Instant>,
    ) -> Result<bool> {
        let claim = self.claim();
        let sent_at = Instant::now();
        let Some(reply) = self.send(&claim, lease, give_up_at).await else {
            return Ok(false);
        };
        match reply {
            Ok(true) => {
                let until = trusted_until(sent_at, lease);
                let is_extend = give_up_at.is_none();
                self.validity.send_modify(|v| {
                    if !v.lost && (is_extend || until > v.until) {
                        v.until = until;
                        v.since = sent_at;
                    }
                });
                Ok(true)
            }
            Ok(false) => {
                self.mark_lost("renewal refused: the lease lapsed or was taken over");
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }
}

/// The live holds of one client, for [`Holds::release_all`] (a client's shutdown). Each hold
/// registers itself when granted and leaves when released or dropped; the registry keeps no
/// hold alive.
pub(crate) struct Holds {
    /// By id, so `release_all` sends its releases in grant order (a simulation replays exactly).
    live: StdMutex<BTreeMap<u64, Weak<Shared>>>,
    /// Holds being resumed (or released or extended by id without a guard) in this client, as
    /// (lock name, token): such a step reserves its token here (together with the check that
    /// `live` has no entry of it) before it sends anything, so this client never makes a
    /// second guard of one hold, nor sends a step by id beside a resume.
    resuming: StdMutex<std::collections::HashSet<(String, String)>>,
    next_id: AtomicU64,
    renewals: Renewals,
    /// How long a step of one hold in flight can last at most (every attempt of it answered
    /// or timed out): what a resume waits for a detached guard's steps, and `release_all` for
    /// another release of a hold it counts.
    step_bound: Duration,
}

/// The runtime a schedule belongs to: a tokio runtime, or (feature `testing`) one a
/// simulation stands in for, which it can end at will ([`on_simulated_runtime`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RuntimeKey {
    Tokio(tokio::runtime::Id),
    #[cfg(feature = "testing")]
    Simulated(u64),
}

#[cfg(feature = "testing")]
tokio::task_local! {
    static SIMULATED_RUNTIME: u64;
}

/// Runs `f` as if on the simulated runtime `n`: holds granted and entries moved there belong
/// to its schedule, until [`Holds::end_simulated_runtime`] ends it (feature `testing`).
#[cfg(feature = "testing")]
pub(crate) async fn on_simulated_runtime<F: std::future::Future>(n: u64, f: F) -> F::Output {
    SIMULATED_RUNTIME.scope(n, f).await
}

/// The runtime asking now, if any.
fn current_runtime() -> Option<RuntimeKey> {
    #[cfg(feature = "testing")]
    if let Ok(n) = SIMULATED_RUNTIME.try_with(|n| *n) {
        return Some(RuntimeKey::Simulated(n));
    }
    tokio::runtime::Handle::try_current()
        .ok()
        .map(|h| RuntimeKey::Tokio(h.id()))
}

/// A client's renewal schedules, one per tokio runtime that made holds (so a hold's renewals
/// run on the runtime that granted it, as its own tasks would): holds waiting for their first
/// renewal, by due time, and one driver task per runtime that starts each hold's renewal task
/// when it falls due. Adding a hold wakes the driver only when it is due before the driver's
/// next look (or no driver runs yet), so a steady stream of holds costs two short locks and
/// one map insert each, no wake-up.
#[derive(Default)]
struct Renewals {
    by_runtime: StdMutex<HashMap<RuntimeKey, Arc<Schedule>>>,
}

#[derive(Default)]
struct Schedule {
    state: StdMutex<ScheduleState>,
    wake: Notify,
}

#[derive(Default)]
struct ScheduleState {
    due: BTreeMap<(Instant, u64), Weak<Shared>>,
    /// When the driver looks next (`None`: when notified).
    armed: Option<Instant>,
    driver: Option<JoinHandle<()>>,
    /// The client is gone: the driver ends.
    closed: bool,
}

impl Renewals {
    /// Schedules the first renewal of hold `id` at `due` on the schedule of `runtime`, the
    /// current one (this runs inside an acquisition).
    fn add(&self, runtime: RuntimeKey, due: Instant, id: u64, shared: &Arc<Shared>) {
        let schedule = {
            let mut by_runtime = self.by_runtime.lock().unwrap_or_else(|p| p.into_inner());
            // A runtime that shut down took its driver along; its schedule has nothing left
            // to start once empty.
            by_runtime.retain(|_, s| !s.is_spent());
            by_runtime.entry(runtime).or_default().clone()
        };
        schedule.add(due, id, shared);
    }

    /// Whether `runtime` is known to have ended: a simulated runtime ended by the test (a
    /// tokio runtime that ended runs none of its tasks, so nobody asks on its behalf).
    fn has_ended(&self, runtime: RuntimeKey) -> bool {
        match runtime {
            RuntimeKey::Tokio(_) => false,
            #[cfg(feature = "testing")]
            RuntimeKey::Simulated(_) => self
                .by_runtime
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&runtime)
                .is_some_and(|s| s.lock().closed),
        }
    }

    /// Whether `runtime`'s schedule has a driver that still runs (its runtime is alive).
    fn is_live(&self, runtime: RuntimeKey) -> bool {
        let schedule = self
            .by_runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&runtime)
            .cloned();
        schedule.is_some_and(|s| {
            let state = s.lock();
            !state.closed && state.driver.as_ref().is_some_and(|d| !d.is_finished())
        })
    }

    fn remove(&self, runtime: RuntimeKey, due: Instant, id: u64) {
        let schedule = self
            .by_runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&runtime)
            .cloned();
        if let Some(schedule) = schedule {
            schedule.lock().due.remove(&(due, id));
        }
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        let by_runtime = self.by_runtime.lock().unwrap_or_else(|p| p.into_inner());
        for schedule in by_runtime.values() {
            schedule.lock().closed = true;
            schedule.wake.notify_one();
        }
    }
}

impl Schedule {
    fn lock(&self) -> std::sync::MutexGuard<'_, ScheduleState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Nothing scheduled and no driver running.
    fn is_spent(&self) -> bool {
        let state = self.lock();
        state.due.is_empty() && state.driver.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Adds an entry; spawns the driver on the current runtime if none runs.
    fn add(self: &Arc<Self>, due: Instant, id: u64, shared: &Arc<Shared>) {
        let notify = {
            let mut state = self.lock();
            state.due.insert((due, id), Arc::downgrade(shared));
            if state.closed {
                // An ended (simulated) runtime: nothing runs its entries.
                false
            } else if state.driver.as_ref().is_none_or(JoinHandle::is_finished) {
                state.armed = Some(due);
                state.driver = Some(tokio::spawn(drive(self.clone())));
                false
            } else if state.armed.is_none_or(|armed| due < armed) {
                state.armed = Some(due);
                true
            } else {
                false
            }
        };
        if notify {
            self.wake.notify_one();
        }
    }
}

/// The driver of a client's schedule: starts the renewal task of every hold whose first
/// renewal is due, then sleeps until the next one is (or a sooner one is added).
async fn drive(schedule: Arc<Schedule>) {
    loop {
        let (ready, next) = {
            let mut state = schedule.lock();
            if state.closed {
                return;
            }
            let now = Instant::now();
            let mut ready = Vec::new();
            while let Some(entry) = state.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let (due, id) = *entry.key();
                ready.push((due, id, entry.remove()));
            }
            state.armed = state.due.keys().next().map(|(due, _)| *due);
            (ready, state.armed)
        };
        for (due, id, shared) in ready {
            if let Some(shared) = shared.upgrade() {
                shared.renew_now(due, id);
            }
        }
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = schedule.wake.notified() => {}
                }
            }
            None => schedule.wake.notified().await,
        }
    }
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner()).len();
        f.debug_struct("Holds").field("live", &live).finish()
    }
}

impl Holds {
    /// The holds of a client whose store answers each request within `response_timeout`.
    pub(crate) fn new(response_timeout: Duration) -> Holds {
        // A step by id or a release is sent at most four times, 20, 40 and 80 ms apart.
        let step_bound = response_timeout
            .saturating_mul(4)
            .saturating_add(Duration::from_millis(140));
        Holds {
            live: StdMutex::default(),
            resuming: StdMutex::default(),
            next_id: AtomicU64::default(),
            renewals: Renewals::default(),
            step_bound,
        }
    }

    fn register(&self, shared: &Arc<Shared>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        // Entries left by detached guards whose steps have ended (nothing refers to them any
        // more) are dropped now and then: each time the registry doubles.
        if live.len() >= 64 && live.len().is_power_of_two() {
            live.retain(|_, weak| weak.strong_count() > 0);
        }
        live.insert(id, Arc::downgrade(shared));
        id
    }

    /// Whether one of these holds, still valid, is on lock `name`.
    pub(crate) fn holds_name(&self, name: &str) -> bool {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .any(|shared| {
                shared.lock.name() == name
                    && !shared.validity.borrow().lost
                    && !shared.detached.load(Ordering::Acquire)
            })
    }

    /// The hold of this client on lock `name` with `claim`'s token (in whatever form: a
    /// downgraded write hold is found by its write id), the lease owner a step by id of that
    /// hold goes through, with `begin` run on it under the registry's lock (so the step is
    /// registered on the hold before a resume can find the entry quiet). A client has at most
    /// one entry of a token on a name ([`Holds::reserve`]).
    fn find<T>(
        &self,
        name: &str,
        claim: &Claim,
        begin: impl FnOnce(&Arc<Shared>) -> T,
    ) -> Option<(Arc<Shared>, T)> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let shared = live
            .values()
            .filter_map(Weak::upgrade)
            .find(|shared| shared.lock.name() == name && shared.claim().token == claim.token)?;
        let begun = begin(&shared);
        Some((shared, begun))
    }

    /// Reserves the hold of `token` on lock `name` for a resume (or a step by id without a
    /// guard) in this client: [`Reserve::InUse`] when the client has an entry of it (a guard,
    /// live or lost, or one dropped or released and not answered yet) or another step
    /// reserved it; [`Reserve::Settling`] when its only entry is a detached guard's with
    /// something sent for it still in flight. A detached guard's entry found quiet is dropped
    /// here. One check-and-insert under the registry's lock, so two resumes (or a resume and
    /// a guard) of one hold never both go ahead, and no step of the hold registers between
    /// the check and the reservation.
    fn reserve(self: &Arc<Self>, name: &str, token: &str) -> Reserve {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let mut quiet = Vec::new();
        for (id, shared) in live.iter().filter_map(|(id, w)| Some((*id, w.upgrade()?))) {
            if shared.lock.name() != name || shared.claim().token != token {
                continue;
            }
            if !shared.detached.load(Ordering::SeqCst) {
                return Reserve::InUse;
            }
            if !shared.is_quiet() {
                return Reserve::Settling(shared);
            }
            quiet.push(id);
        }
        for id in quiet {
            live.remove(&id);
        }
        let mut resuming = self.resuming.lock().unwrap_or_else(|p| p.into_inner());
        let key = (name.to_owned(), token.to_owned());
        if !resuming.insert(key.clone()) {
            return Reserve::InUse;
        }
        drop(resuming);
        drop(live);
        Reserve::Done(Reservation {
            holds: self.clone(),
            key,
        })
    }

    /// [`Holds::reserve`], waiting for a detached guard's entry of the hold to settle first
    /// (at most [`Holds::step_bound`]: a step still in flight then, parked on a runtime that
    /// no longer runs it, leaves the hold in use).
    async fn reserve_after_detach(
        self: &Arc<Self>,
        name: &str,
        token: &str,
    ) -> Option<Reservation> {
        loop {
            match self.reserve(name, token) {
                Reserve::Done(reservation) => return Some(reservation),
                Reserve::InUse => return None,
                Reserve::Settling(shared) => {
                    tokio::time::timeout(self.step_bound, shared.settled())
                        .await
                        .ok()?;
                }
            }
        }
    }

    /// The hold of entry `id` is no longer this client's (its guard detached, released and
    /// answered, or dropped where no release can be sent): its entry goes now if nothing sent
    /// for it is in flight, else it stays until a resume of its id in this client finds it
    /// quiet ([`Holds::reserve`]), so no resume runs beside what is still on its way.
    fn leave(&self, id: u64, shared: &Shared) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        shared.detached.store(true, Ordering::SeqCst);
        if shared.is_quiet() {
            live.remove(&id);
        }
    }

    /// Ends the simulated runtime `n` for this client's holds, as a runtime that shuts down
    /// ends its driver: entries on its schedule are never sent (feature `testing`).
    #[cfg(feature = "testing")]
    pub(crate) fn end_simulated_runtime(&self, n: u64) {
        let key = RuntimeKey::Simulated(n);
        let schedule = self
            .renewals
            .by_runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if let Some(schedule) = schedule {
            let mut state = schedule.lock();
            state.closed = true;
            if let Some(driver) = state.driver.take() {
                driver.abort();
            }
        }
    }

    /// Releases every live hold by token, all at once, and marks their guards lost (so
    /// `is_held()` is false and `lost()` fires at once). Returns how many the server still
    /// held when this was called (each counted once). Errors are reported after every
    /// release has been tried.
    pub(crate) async fn release_all(&self) -> Result<usize> {
        // Under the registry's lock, each release is registered on its hold before anything
        // is sent, and before a detach (which takes the same lock) can find the hold quiet.
        let holds: Vec<(u64, Arc<Shared>, bool, ReleaseTicket)> = {
            let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            live.iter()
                .filter_map(|(id, weak)| Some((*id, weak.upgrade()?)))
                // A detached guard's hold is not this client's any more.
                .filter(|(_, shared)| !shared.detached.load(Ordering::SeqCst))
                .map(|(id, shared)| {
                    // A hold already being released (its guard released or dropped, another
                    // `release_all`, the answer not in yet) is waited for here, so the
                    // shutdown waits for it, but not counted: it was given up before this
                    // call. Released by token here: no renewal may go on.
                    let counted = shared.end_locally();
                    let ticket = shared.release_ticket();
                    (id, shared, counted, ticket)
                })
                .collect()
        };
        let step_bound = self.step_bound;
        // Tasks of their own (a dropped `JoinHandle` does not abort its task): cancelling
        // this call stops none of them. Each hold's entry stays for its guard, which is lost
        // now; the guard's own end (its drop, its `release()`) lets the entry go.
        let releases: Vec<_> = holds
            .into_iter()
            .map(|(_, shared, counted, ticket)| {
                tokio::spawn(async move {
                    let outcome = ticket.send().await;
                    let counted = match outcome {
                        Ok(held) if counted => held || shared.ended_live(step_bound).await,
                        _ => false,
                    };
                    outcome.map(|_| counted)
                })
            })
            .collect();
        let (mut released, mut first_error) = (0, None);
        for task in releases {
            let outcome = task.await;
            match outcome {
                Ok(Ok(true)) => released += 1,
                Ok(Ok(false)) => {}
                Ok(Err(err)) => {
                    first_error.get_or_insert(err);
                }
                Err(join) => {
                    first_error.get_or_insert(Error::connection("release", "", join));
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(released),
        }
    }
}

/// What [`Holds::reserve`] found.
enum Reserve {
    Done(Reservation),
    /// Another entry or step has the hold.
    InUse,
    /// Only a detached guard's entry, with something sent for it still in flight.
    Settling(Arc<Shared>),
}

/// A resume's reservation of its hold in its client's [`Holds`]; dropping it (the resume
/// done, failed or cancelled) frees the name and token again. A resume that succeeds drops it
/// only once its hold is registered, so the check in [`Holds::reserve`] always sees one.
struct Reservation {
    holds: Arc<Holds>,
    key: (String, String),
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.holds
            .resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// The refusal of a resume, or of a step by id, of a hold this client already has a guard of
/// (or is resuming).
fn hold_in_use(name: &str) -> Error {
    Error::HoldInUse {
        name: name.to_owned(),
    }
}

/// The hold behind every guard.
pub(crate) struct Hold {
    shared: Arc<Shared>,
    /// This hold's entry in its client's [`Holds`].
    id: u64,
    released: bool,
}

/// When a new hold is first renewed.
enum FirstRenewal {
    /// After the usual interval, if auto-renewal is on.
    Scheduled,
    /// At once, and at least that once even with auto-renewal off (a handed-over grant whose
    /// short claim window must become the full lease).
    Immediately,
}

impl Hold {
    /// A hold granted by the reply to a request sent at `sent_at`: trusted for its lease from
    /// that instant.
    pub(crate) fn new(
        (holds, store): (Arc<Holds>, Arc<dyn Store>),
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        sent_at: Instant,
        opts: Options,
    ) -> Self {
        let window = claim.lease;
        let first = FirstRenewal::Scheduled;
        Self::start(
            (holds, store),
            lock,
            claim,
            fence,
            sent_at,
            window,
            opts,
            first,
        )
    }

    /// A hold handed over by someone else's release while this claim waited (the wake-up
    /// carried the grant). The release granted it after the waiter's attempt sent at
    /// `attempt_sent_at` was applied, until the heartbeat deadline that attempt set, so it is
    /// trusted from that send for the heartbeat window, and never for longer than the lease
    /// (the claim that follows sets the server deadline to its lease from then). The full
    /// lease is claimed at once in the background.
    pub(crate) fn handed_over(
        (holds, store): (Arc<Holds>, Arc<dyn Store>),
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        attempt_sent_at: Instant,
        opts: Options,
    ) -> Self {
        let window = hand_off_window(&claim);
        let first = FirstRenewal::Immediately;
        Self::start(
            (holds, store),
            lock,
            claim,
            fence,
            attempt_sent_at,
            window,
            opts,
            first,
        )
    }

    /// Whether a grant handed to `claim` (whose latest refused attempt was sent at
    /// `attempt_sent_at`) is still worth taking as it is: at least half of its trust window is
    /// left. Otherwise the waiter confirms it with an attempt, which claims the full lease; a
    /// guard must not start out already (or almost) lost.
    pub(crate) fn hand_off_is_fresh(claim: &Claim, attempt_sent_at: Instant) -> bool {
        let window = hand_off_window(claim);
        Instant::now() < attempt_sent_at + window.saturating_sub(Options::drift(window)) / 2
    }

    /// Trusts the hold for `window` from `trusted_from`, minus drift, and starts renewing it.
    #[allow(clippy::too_many_arguments)]
    fn start(
        (holds, store): (Arc<Holds>, Arc<dyn Store>),
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        trusted_from: Instant,
        window: Duration,
        opts: Options,
        first: FirstRenewal,
    ) -> Self {
        let until = trusted_until(trusted_from, window);
        let (validity, _) = watch::channel(Validity {
            until,
            since: trusted_from,
            lost: false,
        });
        let shared = Arc::new(Shared {
            granted_at: Instant::now(),
            holds,
            store,
            lock,
            claim: StdMutex::new(claim),
            fence: AtomicU64::new(fence),
            validity,
            requests: tokio::sync::Mutex::default(),
            renewer: StdMutex::new(Renewer::Off),
            releasing: std::sync::atomic::AtomicBool::new(false),
            detached: std::sync::atomic::AtomicBool::new(false),
            renewals_sending: std::sync::atomic::AtomicUsize::new(0),
            releases: watch::Sender::new(Releases::default()),
        });
        let id = shared.holds.register(&shared);
        let once = match first {
            FirstRenewal::Scheduled if !opts.auto_renew => None,
            FirstRenewal::Scheduled => Some(false),
            FirstRenewal::Immediately => Some(!opts.auto_renew),
        };
        if let Some(once) = once {
            let plan = Plan {
                id,
                runtime: current_runtime().expect("a hold is made inside a tokio runtime"),
                opts: opts.clone(),
                once,
                renew_until: opts
                    .max_hold
                    .map(|d| crate::vocab::options::later(trusted_from, d)),
            };
            let due = match first {
                FirstRenewal::Scheduled => {
                    next_renewal(&shared.validity.borrow(), shared.claim().lease, &opts)
                }
                FirstRenewal::Immediately => Instant::now(),
            };
            // The renewer says `Scheduled` before the entry exists, so the driver never finds
            // an entry whose renewer it would skip.
            let mut renewer = shared.renewer.lock().unwrap_or_else(|p| p.into_inner());
            *renewer = Renewer::Scheduled {
                due,
                plan: Box::new(plan.clone()),
                in_flight: None,
            };
            shared.holds.renewals.add(plan.runtime, due, id, &shared);
        }
        Hold {
            shared,
            id,
            released: false,
        }
    }
    pub(crate) fn fencing_token(&self) -> u64 {
        self.shared.fence.load(Ordering::Relaxed)
    }

    /// The store, keys and claim of this hold, for steps beside the lock's own (an
    /// election's proclaim).
    pub(crate) fn step_parts(&self) -> (Arc<dyn Store>, LockKeys, Claim) {
        (
            self.shared.store.clone(),
            self.shared.lock.clone(),
            self.shared.claim(),
        )
    }

    pub(crate) fn name(&self) -> &str {
        self.shared.lock.name()
    }

    #[cfg(feature = "testing")]
    pub(crate) fn token(&self) -> String {
        self.shared.claim().token
    }

    /// The claim the store knows this hold by (its slot follows a downgrade).
    pub(crate) fn claim(&self) -> Claim {
        self.shared.claim()
    }

    /// Gives this guard up without releasing the hold: the server's lease runs on until its
    /// deadline. Renewals stop, and the hold is no longer one of this client's (`release_all`
    /// leaves it). Its registry entry goes at once if nothing sent for it is in flight;
    /// otherwise (its renewal, cancelled here but perhaps already on its way; a release or
    /// step by id, `release_hold`, `extend_hold`; a `release_all`) it stays, and a resume of
    /// its id in this client first waits for those to end (each by its own deadline): what
    /// they send may shorten or end the hold, and a resume's guard is trusted only from a
    /// renewal sent after them.
    pub(crate) fn detach(mut self) {
        self.released = true;
        self.shared.stop_renewer();
        self.shared.holds.leave(self.id, &self.shared);
    }

    pub(crate) fn is_held(&self) -> bool {
        let v = *self.shared.validity.borrow();
        !v.lost && Instant::now() < v.until
    }

    /// The instant until which the hold is trusted (local monotonic clock).
    pub(crate) fn valid_until(&self) -> Instant {
        self.shared.until()
    }

    pub(crate) async fn lost(&self) {
        let mut rx = self.shared.validity.subscribe();
        loop {
            let v = *rx.borrow_and_update();
            if v.lost || Instant::now() >= v.until {
                return;
            }
            tokio::select! {
            biased;
                _ = tokio::time::sleep_until(v.until) => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<bool> {
        crate::vocab::options::check_duration("lease", lease)?;
        if self.shared.validity.borrow().lost {
            return Ok(false);
        }
        if planted(Bug::UnorderedRenewals) {
            let renewed = self.shared.request_unordered(lease, None).await;
            if matches!(renewed, Ok(true)) {
                self.shared
                    .claim
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .lease = lease;
            }
            return renewed;
        }
        // This request and every later renewal ask for the new length (and the renewal
        // schedule follows it); a renewal already sent with the old length is answered before
        // this request goes out.
        self.shared.request(Some(lease)).await
    }

    /// Releases the hold by token. Until the release has been answered the hold still counts
    /// as unreleased: if the caller stops waiting (a timeout, a dropped future), the hold's
    /// drop sends the release again in the background (a release is idempotent by token), so
    /// a release that never left is not lost with its future.
    pub(crate) async fn release(mut self) -> Result<bool> {
        self.shared.begin_release();
        let slot = self.shared.claim().slot;
        crate::engine::telemetry::held(&slot, self.shared.granted_at.elapsed());
        let outcome = self.shared.release_ticket().send().await;
        // Released once answered: a release whose future is dropped before that is sent again
        // by the drop, in the background.
        self.released = true;
        // Registered until answered: a resume meanwhile finds it releasing.
        self.shared.holds.leave(self.id, &self.shared);
        outcome
    }

    /// Turns the exclusive hold into a shared one (`shared_slot`) atomically, in place: the
    /// same hold, lease owner and registry entry go on as the shared hold.
    ///
    /// The request takes its turn behind the hold's other lease requests, and its grant is
    /// trusted from its send. A `release_all` (or any loss) that came before the reply wins:
    /// the hold stays lost and the downgrade reports it (what the release left of either
    /// form on the server is removed by it, whatever the order the server saw them in). If the
    /// reply is lost or the caller stops waiting, the hold is dropped, and its background
    /// release removes whichever form the server has.
    pub(crate) async fn downgrade(&mut self, shared_slot: Slot) -> Result<()> {
        let shared = self.shared.clone();
        let requests = shared.turn().await?;
        let lost = || Error::LeaseLost {
            name: shared.lock.name().to_owned(),
        };
        if shared.validity.borrow().lost {
            return Err(lost());
        }
        let claim = shared.claim();
        let sent_at = Instant::now();
        let Some(fence) = shared.store.downgrade(&shared.lock, &claim, None).await? else {
            shared.mark_lost("downgrade found no live write hold");
            return Err(lost());
        };
        let trusted = requests
            .unknown_min
            .map_or(claim.lease, |m| m.min(claim.lease));
        if planted(Bug::DowngradeIgnoresLoss) {
            // The planted bug: the reply is trusted whatever happened meanwhile.
            shared.validity.send_modify(|v| v.lost = false);
        }
        shared.fence.store(fence, Ordering::Relaxed);
        shared.claim.lock().unwrap_or_else(|p| p.into_inner()).slot = shared_slot;
        let mut committed = false;
        shared.validity.send_modify(|v| {
            if !v.lost {
                v.until = trusted_until(sent_at, trusted);
                v.since = sent_at;
                committed = true;
            }
        });
        if !committed {
            return Err(lost());
        }
        shared.reschedule(None);
        // The next lease request (a renewal waiting its turn) sees the read claim.
        drop(requests);
        Ok(())
    }
}

/// Resuming a hold from its id, and releasing or extending a hold by its id. A client keeps
/// at most one guard (one lease owner) per hold: a resume reserves the hold's token first and
/// is refused when the client has an entry of it; a step by id goes through that entry's lease
/// owner, and is refused while a resume of the hold is under way in this client.
impl Hold {
    /// Turns `claim` (a hold id's token and slot, with the handle's lease) back into a hold
    /// after one owner-checked step that renews the lease (the store's `extend`); trusted
    /// from that step's send, as a grant is. `Ok(None)`: the store holds nothing live for
    /// the token (nothing was granted). [`Error::HoldInUse`] (nothing sent): this client
    /// already has a guard of the hold, or is resuming it. For an exclusive hold, the server's
    /// fence must be the id's `fence` (else [`Error::MalformedHoldId`], the hold left as it
    /// was, renewed, with no guard). With `wait_replicas` in `opts`, the replicas must
    /// acknowledge the renewal (else [`Error::ReplicasNotReached`], the hold left so too).
    pub(crate) async fn resume(
        (holds, store): (Arc<Holds>, Arc<dyn Store>),
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        opts: Options,
    ) -> Result<Option<Hold>> {
        let Some(reservation) = holds.reserve_after_detach(lock.name(), &claim.token).await else {
            return Err(hold_in_use(lock.name()));
        };
        let (renewed, sent_at) = Self::renew_for_resume(&*store, &lock, &claim).await;
        if !renewed? {
            return Ok(None);
        }
        // The fence counter is a live exclusive holder's fence (no grant takes one while it
        // lives). A Semaphore's is left out: its count may change under its holds.
        let fenced = match claim.slot {
            Slot::Write => Some(crate::vocab::claim::Family::LeaseLock),
            Slot::Ticket {
                resizable: false, ..
            } if claim.slot.is_exclusive() => Some(crate::vocab::claim::Family::TicketQueue),
            _ => None,
        };
        // The deadline the fence check read (planted bug only).
        let mut inspected = None;
        if let Some(family) = fenced {
            let inspect_sent = Instant::now();
            let snapshot = retrying(|| store.inspect(&lock, family, None)).await.0?;
            let ours = |token: &str| {
                token == claim.token
                    || token
                        .strip_prefix(claim.token.as_str())
                        .is_some_and(|rest| rest.starts_with('#'))
            };
            let Some(holder) = snapshot.holders.iter().find(|h| ours(&h.token)) else {
                // The lease lapsed (or was released) since the renewal: gone, as a refusal.
                return Ok(None);
            };
            inspected = Some(inspect_sent + Duration::from_millis(holder.remaining_ms));
            if snapshot.fence != fence {
                return Err(Error::MalformedHoldId {
                    reason: format!(
                        "its fencing token is not the one the server granted the hold on lock \
                         `{}` (the id was altered); the hold is left as it was",
                        lock.name()
                    ),
                });
            }
        }
        if let Some((replicas, timeout)) = opts.wait_replicas {
            // As after a grant: the guard counts only once the replicas have the renewal.
            // If they do not, the hold is left as it was (renewed), with no guard.
            let acked = store.wait_replicas(&lock, replicas, timeout).await?;
            if acked < replicas {
                return Err(Error::ReplicasNotReached {
                    acked,
                    required: replicas,
                });
            }
        }
        let mut trusted_from = if planted(Bug::ResumeTrustsReply) {
            Instant::now()
        } else {
            sent_at
        };
        if planted(Bug::ResumeTrustsInspectedLease) {
            // The planted bug: whatever renewed the hold last counts as this resume's renewal.
            if let Some(from) = inspected.and_then(|until| until.checked_sub(claim.lease)) {
                trusted_from = trusted_from.max(from);
            }
        }
        let hold = Hold::new((holds, store), lock, claim, fence, trusted_from, opts);
        // Registered now: the reservation may go.
        drop(reservation);
        Ok(Some(hold))
    }

    /// The owner-checked renewal of a resume, sent again after a lost reply (it is
    /// idempotent: each sets the same lease from its own arrival); with the send instant of
    /// the attempt answered.
    async fn renew_for_resume(
        store: &dyn Store,
        lock: &LockKeys,
        claim: &Claim,
    ) -> (Result<bool>, Instant) {
        let mut delay = Duration::from_millis(20);
        for attempt in 0.. {
            let sent_at = Instant::now();
            match store.extend(lock, claim, claim.lease, None).await {
                Err(err) if err.is_retryable() && attempt < 3 => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                outcome => return (outcome, sent_at),
            }
        }
        unreachable!("the loop returns")
    }
}

/// Releases the hold `claim` names without a guard. This client's guard of that hold (if
/// any) is marked lost first (its renewals stop), so it never trusts a lease released under
/// it. Without a guard here, the step reserves the hold as a resume does, so a resume in this
/// client meanwhile is refused; it is refused itself ([`Error::HoldInUse`], nothing sent)
/// while a resume (or another step by id) of the hold is under way in this client: that
/// resume's guard would be trusted from a renewal the release may follow.
pub(crate) async fn release_by_id(
    (holds, store): (&Arc<Holds>, &dyn Store),
    lock: &LockKeys,
    claim: &Claim,
) -> Result<bool> {
    let found = holds.find(lock.name(), claim, |shared| {
        shared.begin_release();
        shared.release_ticket()
    });
    if let Some((_, ticket)) = found {
        return ticket.send().await;
    }
    let Some(_reserved) = holds.reserve_after_detach(lock.name(), &claim.token).await else {
        return Err(hold_in_use(lock.name()));
    };
    release_with_retry(store, lock, claim).await
}

/// Renews the hold `claim` names to `lease` from now, without a guard; `Ok(false)`: it
/// holds nothing live. When this client has a guard of that hold, the request goes through
/// its lease owner, so its trust and renewals follow the new lease (a lost guard stays lost:
/// the request is sent beside it). Without a guard here, the step reserves the hold as a
/// resume does; it is refused ([`Error::HoldInUse`], nothing sent) while a resume (or another
/// step by id) of the hold is under way in this client.
pub(crate) async fn extend_by_id(
    (holds, store): (&Arc<Holds>, &dyn Store),
    lock: &LockKeys,
    claim: &Claim,
    lease: Duration,
) -> Result<bool> {
    crate::vocab::options::check_duration("lease", lease)?;
    // Until this step ends (also when it goes beside the guard), a detach of the guard keeps
    // the hold registered, so no resume here runs beside it. A detached guard's entry is not
    // a lease owner to go through: the step waits for it to be quiet, as a resume does.
    let found = holds.find(lock.name(), claim, |shared| {
        (!shared.detached.load(Ordering::SeqCst)).then(|| StepById::new(shared.clone()))
    });
    let (found, _step) = match found {
        Some((shared, Some(step))) => (Some(shared), Some(step)),
        _ => (None, None),
    };
    let _reserved = match found {
        // Releasing, or not in the id's form any more (a write id of a hold downgraded
        // since): nothing live of that kind to extend.
        Some(shared) if shared.is_releasing() || shared.claim().slot != claim.slot => {
            return Ok(false)
        }
        // Through the owner, as the guard's own `extend`: one request at a time, its trust
        // from this request's send. `Ok(false)` marks the guard lost, or found it lost (a
        // renewal gave up meanwhile) before anything was sent: asked again beside it.
        Some(shared) if shared.is_trusted() => match shared.request(Some(lease)).await {
            Ok(false) => None,
            outcome => return outcome,
        },
        // A guard whose trust ran out (its `lost()` fired) is not revived: it ends here for
        // good, after its request in flight, and sends nothing more (nor does a resume start
        // beside it); the step goes beside it.
        Some(shared) => {
            let _turn = shared.turn().await?;
            shared.stop_renewer();
            shared.mark_lost_quietly();
            None
        }
        None => match holds.reserve_after_detach(lock.name(), &claim.token).await {
            Some(reserved) => Some(reserved),
            None => return Err(hold_in_use(lock.name())),
        },
    };
    retrying(|| store.extend(lock, claim, lease, None)).await.0
}

impl Shared {
    /// A release of this hold starts: renewals stop, its guard is lost, and a resume of its id
    /// in this client is refused (`HoldInUse`) until the release is answered.
    fn begin_release(&self) {
        let _ = self.end_locally();
    }

    /// Releasing from now on: renewals stop, the guard of this entry is lost. `true` for the
    /// first call (the one that gave the hold up).
    fn end_locally(&self) -> bool {
        let first = !self.releasing.swap(true, Ordering::AcqRel);
        self.stop_renewer();
        self.mark_lost_quietly();
        first
    }

    /// A release of this hold, registered in flight now (see [`Shared::releases`]); send it
    /// with [`ReleaseTicket::send`].
    fn release_ticket(self: &Arc<Self>) -> ReleaseTicket {
        self.releases.send_modify(|r| r.in_flight += 1);
        ReleaseTicket {
            shared: self.clone(),
            held: false,
        }
    }

    /// Registers a renewal of this hold as on its way, unless the hold was detached (then
    /// nothing may be sent for it: a resume of its id may be renewing it). The count is
    /// raised before the flag is read, and a detach sets the flag before it reads the count
    /// (both sequentially consistent), so either the renewal sees the detach or the detach
    /// sees the renewal.
    fn renewal_sending(&self) -> Option<RenewalSending<'_>> {
        self.renewals_sending.fetch_add(1, Ordering::SeqCst);
        let sending = RenewalSending(self);
        (!self.detached.load(Ordering::SeqCst)).then_some(sending)
    }

    /// This hold's turn for a lease request, waited for at most [`Holds::step_bound`] (the
    /// longest a request in flight can take): a turn kept by a renewal parked on a runtime
    /// that is no longer driven would otherwise hold every later request forever.
    async fn turn(&self) -> Result<tokio::sync::MutexGuard<'_, Requests>> {
        let bound = self.holds.step_bound;
        tokio::time::timeout(bound, self.requests.lock())
            .await
            .map_err(|_| Error::Timeout {
                name: self.lock.name().to_owned(),
                waited: bound,
            })
    }

    /// Whether nothing sent for this hold is in flight now: no renewal, release or step by
    /// id.
    fn is_quiet(&self) -> bool {
        let r = *self.releases.borrow();
        r.in_flight == 0 && r.by_id == 0 && self.renewals_sending.load(Ordering::SeqCst) == 0
    }

    /// Once nothing sent for this hold is in flight (each request ends by its own deadline).
    async fn settled(&self) {
        let mut rx = self.releases.subscribe();
        let _ = rx
            .wait_for(|r| {
                r.in_flight == 0
                    && r.by_id == 0
                    && self.renewals_sending.load(Ordering::SeqCst) == 0
            })
            .await;
    }

    /// Whether one of this hold's releases was answered `true`, once none is in flight (or
    /// `bound` has passed: a release parked on a runtime that no longer runs it): a release
    /// answered `false` may have been overtaken by one the server applied first (its `true`
    /// is on its way). A release whose answer was lost, or whose caller stopped waiting,
    /// confirms nothing.
    async fn ended_live(&self, bound: Duration) -> bool {
        let mut rx = self.releases.subscribe();
        let wait = rx.wait_for(|r| r.ended_live || r.in_flight == 0);
        let _ = tokio::time::timeout(bound, wait).await;
        self.releases.borrow().ended_live
    }

    /// Not lost, and its trust has not run out: a guard of it says `is_held()`.
    fn is_trusted(&self) -> bool {
        let v = *self.validity.borrow();
        !v.lost && Instant::now() < v.until
    }

    fn is_releasing(&self) -> bool {
        self.releasing.load(Ordering::Acquire)
    }

    /// The lease every later request of this hold asks for (an `extend`'s).
    fn set_lease(&self, lease: Duration) {
        self.claim.lock().unwrap_or_else(|p| p.into_inner()).lease = lease;
    }

    fn mark_lost_quietly(&self) {
        self.validity.send_modify(Validity::lose);
    }
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

/// Releases `claim` in the background, if a runtime is there to run it.
pub(crate) fn release_in_background(store: Arc<dyn Store>, lock: LockKeys, claim: Claim) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        // A runtime shutting down drops its tasks unrun: the release then never happens.
        let unfinished = Unfinished {
            lease: claim.lease,
            lock: Some(lock),
            started: false,
        };
        handle.spawn(async move {
            let mut unfinished = unfinished;
            unfinished.started = true;
            let lock = unfinished.lock.clone().expect("set above");
            if let Err(err) = release_with_retry(&*store, &lock, &claim).await {
                tracing::debug!(lock = lock.name(), %err, "background release failed; the lease will lapse");
            }
            unfinished.lock = None;
        });
    } else {
        warn_dropped_outside_a_runtime(lock.name(), claim.lease, false);
    }
}

/// A background release not finished yet: dropped so (its runtime shut down before running
/// it, or while its request was on its way), it warns as a guard dropped outside a runtime
/// does.
struct Unfinished {
    lease: Duration,
    /// Taken when the release has ended (answered or failed).
    lock: Option<LockKeys>,
    /// The release had started: its request may have reached the server.
    started: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(lock) = &self.lock {
            warn_dropped_outside_a_runtime(lock.name(), self.lease, self.started);
        }
    }
}

/// How many lock names [`warn_dropped_outside_a_runtime`] remembers having warned about;
/// later names are logged at debug level only, so the set stays small.
const MAX_WARNED_NAMES: usize = 256;

/// Warns, once per lock name, that a guard of `name` was dropped where it cannot be
/// released (no tokio runtime): the lock stays held until its lease lapses. `cut`: its
/// release had been sent when its runtime ended, unanswered, so it may have been applied.
fn warn_dropped_outside_a_runtime(name: &str, lease: Duration, cut: bool) {
    static WARNED: StdMutex<Option<std::collections::HashSet<String>>> = StdMutex::new(None);
    let first = {
        let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
        let warned = warned.get_or_insert_with(Default::default);
        warned.len() < MAX_WARNED_NAMES && warned.insert(name.to_owned())
    };
    if first && cut {
        tracing::warn!(
            lock = name,
            ?lease,
            "the release of a guard of lock `{name}` was cut short by its runtime's shutdown \
             before the server answered: the lock may stay held until its lease ({lease:?}) \
             lapses. Call `release().await` on the guard, or `LockClient::release_all().await` \
             before the runtime ends. (Warned once per lock name.)"
        );
    } else if first {
        tracing::warn!(
            lock = name,
            ?lease,
            "a guard of lock `{name}` (or a wait for it) was dropped outside a tokio runtime \
             (or after its runtime ended, or while it was shutting down), \
             so it could not be released: the lock stays held until its lease ({lease:?}) \
             lapses. Call `release().await` on the guard, or `LockClient::release_all().await` \
             before the runtime ends. (Warned once per lock name.)"
        );
    } else {
        tracing::debug!(
            lock = name,
            "dropped outside a runtime; the lease will lapse"
        );
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // A released or detached hold left the renewals.
        if !self.released {
            self.shared.begin_release();
            let shared = self.shared.clone();
            let id = self.id;
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                // In flight from now, not from the task's first poll.
                let ticket = shared.release_ticket();
                // A runtime shutting down drops its tasks unrun: the release then never
                // happens.
                let unfinished = Unfinished {
                    lease: shared.claim().lease,
                    lock: Some(shared.lock.clone()),
                    started: false,
                };
                handle.spawn(async move {
                    let mut unfinished = unfinished;
                    unfinished.started = true;
                    if let Err(err) = ticket.send().await {
                        tracing::debug!(lock = shared.lock.name(), %err, "background release failed; the lease will lapse");
                    }
                    unfinished.lock = None;
                    // Registered until answered: a resume meanwhile finds it releasing.
                    shared.holds.leave(id, &shared);
                });
            } else {
                // Nothing can be sent from here; what is already on its way for the hold
                // (a `release_all`'s release, a step by id) keeps the entry until it ends.
                self.shared.holds.leave(self.id, &self.shared);
                let claim = self.shared.claim();
                warn_dropped_outside_a_runtime(self.shared.lock.name(), claim.lease, false);
            }
        }
    }
}

/// One renewal of a hold whose entry fell due, for the hold's lease; then the hold's entry
/// moves to the next (a renewal interval after this request's send, or soon after a failed
/// one), unless its plan was `once` (a handed-over grant's claim with auto-renewal off) or the
/// lease is gone.
async fn renew_once(shared: Arc<Shared>) {
    if shared.validity.borrow().lost {
        shared.renewal_done(false, None);
        return;
    }
    match shared.request(None).await {
        Ok(confirmed) => shared.renewal_done(confirmed, None),
        Err(err) => {
            tracing::debug!(lock = shared.lock.name(), %err, "renewal failed; retrying");
            // Retry soon, but well inside what is left of the lease.
            let left = shared.until().saturating_duration_since(Instant::now());
            let retry_at = Instant::now() + (left / 4).min(Duration::from_millis(500));
            shared.renewal_done(false, Some(retry_at));
        }
    }
}
