//! The one waiting loop shared by every primitive ([`pursue`]).
//!
//! 1. Attempt (bounded by the deadline plus one response timeout). Granted: done (one round
//!    trip when uncontended).
//! 2. Refused: a try returns `Ok(None)`. A wait registers with the wake-up hub for the lock
//!    it is refused on (subscribing to its channel if this process was not yet, waiting for
//!    that at most one interval, never past the deadline), then attempts again at once, so a
//!    release between the first attempt and the subscription cannot be missed.
//! 3. Wait for the first of: a wake-up naming this waiter (or everyone), the end of the lease
//!    that blocks us, the waiter's own interval (jittered; also its heartbeat), the caller's
//!    deadline. A wake-up's grant is offered to the pursuit; else attempt again: the attempt
//!    is the heartbeat of a queued waiter.
//! 4. On timeout, or when the future is dropped, every trace of the claim is removed (its
//!    queue place, or a grant that may have been made while the reply was in flight); the
//!    error says whether the lock was busy or Redis unreachable.
//!
//! A lost reply is not a failure: the attempt is retried with the same token, which the
//! scripts treat idempotently, with back-off while the outage budget lasts; unless the
//! claim's token was released in between (a multi-lock's withdraw, quorum mode's release
//! where unsure): then by a new token.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::lease::{Hold, Holds};
use crate::engine::owner::acknowledged;
use crate::engine::pending::Pending;
use crate::store::hub::{Registration, WakeHub};
use crate::store::{Acquire, Busy, Claim, Policy, Request, Slot, Store};
use crate::vocab::bugs::{planted, Bug};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;
use crate::vocab::options::Options;
use crate::vocab::token::add_label;
use crate::wire::HandOff;

/// The first back-off after a failed attempt; it doubles up to the claim's interval.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// When a wait gives up.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    /// One attempt, never queued.
    Try,
    /// Wait as long as it takes.
    Never,
    /// Wait until the instant (the duration is for the error message).
    At(Instant, Duration),
}

impl Deadline {
    /// Whether a timed wait's deadline has come.
    pub(crate) fn passed(&self) -> bool {
        matches!(self, Deadline::At(limit, _) if Instant::now() >= *limit)
    }

    /// `at`, or a timed wait's deadline if that comes first.
    pub(crate) fn cap(&self, at: Instant) -> Instant {
        match self {
            Deadline::At(limit, _) => at.min(*limit),
            Deadline::Try | Deadline::Never => at,
        }
    }

    /// A wait of at most `timeout` from now (a timeout too large for the clock waits forever).
    pub(crate) fn after(timeout: Duration) -> Self {
        match Instant::now().checked_add(timeout) {
            Some(at) => Deadline::At(at, timeout),
            None => Deadline::Never,
        }
    }
}

/// The outcome of one attempt of a [`Pursuit`].
pub(crate) enum Step<W> {
    /// The reply granted what was pursued.
    Won(W),
    /// Refused (and queued or announced, when waiting); `channel` is the lock whose release
    /// to wait for.
    Refused {
        busy: Busy,
        sent_at: Instant,
        channel: String,
    },
    /// No usable reply.
    Failed(Error),
}

/// What the one acquire loop ([`pursue`]) pursues: a single claim ([`OneClaim`]) or a
/// multi-lock's group of parts. The loop owns the waiting (subscription, wake-ups, the
/// blocking lease's end, the interval, the deadline, the outage budget); the pursuit owns
/// what its attempts may leave on the server.
pub(crate) trait Pursuit: Send {
    /// What a grant yields.
    type Won: Send;
    /// One attempt; with `wait`, a refusal may queue or announce the claim.
    fn attempt(&mut self, wait: bool) -> impl std::future::Future<Output = Step<Self::Won>> + Send;
    /// After each refusal, before the loop returns (a refused try) or waits; whatever it
    /// sends is not waited for past `until` (the wait's deadline plus one response timeout).
    fn refused(
        &mut self,
        busy: &Busy,
        wait: bool,
        until: Option<Instant>,
    ) -> impl std::future::Future<Output = ()> + Send;
    /// An attempt's outcome is unknown (no reply): it may have been applied.
    fn unknown(&mut self) {}
    /// What a grant carried in a wake-up yields, if it can be trusted as it is.
    fn handed_over(&mut self, grant: HandOff, busy: &Busy, sent_at: Instant) -> Option<Self::Won>;
    /// The longest sleep between attempts (for a queued claim, also its heartbeat).
    fn interval(&self) -> Duration;
    /// The lock named in a timeout or an outage.
    fn name(&self) -> &str;
    /// The claim's token (wake-ups name it).
    fn token(&self) -> &str;
    /// The wait ended without a grant: remove the pursuit's traces now, waiting at most
    /// `bound`; what is not done by then goes on in the background.
    fn withdraw_within(&mut self, bound: Duration) -> impl std::future::Future<Output = ()> + Send;
}

/// How an acquire loop waits: its wake-ups, deadline and bounds.
pub(crate) struct Waiting<'a> {
    pub hub: &'a Arc<WakeHub>,
    pub deadline: Deadline,
    pub response_timeout: Duration,
    pub outage_budget: Duration,
}

/// Since when Redis has not answered, the latest reason why, and the next back-off.
struct Outage {
    since: Option<(Instant, Error)>,
    backoff: Duration,
}

/// The one acquire loop, for every wait of the crate (its steps are in the module docs).
pub(crate) async fn pursue<P: Pursuit>(p: &mut P, w: &Waiting<'_>) -> Result<Option<P::Won>> {
    let wait = !matches!(w.deadline, Deadline::Try);
    // Every step of a timed wait, its last attempt and its clean-up included, ends by then.
    let hard_end = match w.deadline {
        Deadline::At(limit, _) => Some(crate::vocab::options::later(limit, w.response_timeout)),
        Deadline::Try | Deadline::Never => None,
    };
    let mut registration: Option<Registration> = None;
    let mut outage = Outage {
        since: None,
        backoff: FIRST_BACKOFF,
    };
    loop {
        match bounded_attempt(p, w, wait).await {
            Step::Won(won) => return Ok(Some(won)),
            Step::Refused {
                busy,
                sent_at,
                channel,
            } => {
                outage = Outage {
                    since: None,
                    backoff: FIRST_BACKOFF,
                };
                p.refused(&busy, wait, hard_end).await;
                if !wait {
                    return Ok(None);
                }
                // A refusal that came at or after the deadline ends the wait below.
                if !w.deadline.passed() {
                    let pursuer = (p.token(), p.interval());
                    let Some(reg) = kept_or_new(pursuer, w, &mut registration, &channel).await
                    else {
                        continue;
                    };
                    if let Some(won) = sleep(p, reg, &busy, sent_at, w.deadline).await {
                        return Ok(Some(won));
                    }
                }
            }
            Step::Failed(err) if wait && err.is_retryable() => {
                p.unknown();
                let (name, interval) = (p.name().to_owned(), p.interval());
                ride_outage(&name, interval, w, &mut outage, err).await?;
            }
            // Whatever ended the acquire, the pursuit leaves no trace (a lost reply may have
            // been a grant; a refusal may have left a queue place or an announcement).
            Step::Failed(err) => {
                p.unknown();
                return Err(err);
            }
        }
        if let (Deadline::At(_, waited), Some(end)) = (w.deadline, hard_end)
            && w.deadline.passed()
        {
            drop(registration.take());
            // Redis unreachable at the deadline: say so, not "the lock was busy".
            if let Some((_, err)) = outage.since {
                return Err(err);
            }
            p.withdraw_within(end.saturating_duration_since(Instant::now()))
                .await;
            return Err(Error::Timeout {
                name: p.name().to_owned(),
                waited,
            });
        }
    }
}

/// The registration to wait on `channel` with: the one kept from the last refusal if it is
/// for that channel (a wake-up already delivered to it stays). It keeps the token it was
/// made with: the pursuits whose token changes (a multi-lock's after a withdraw, a quorum
/// claim's) are never handed a lock, so no wake-up names them. Otherwise a new one, waited
/// for until subscribed (bounded), and `None`: the pursuit attempts again at once, so a
/// release between its attempt and the subscription is not missed.
async fn kept_or_new<'r>(
    (token, interval): (&str, Duration),
    w: &Waiting<'_>,
    registration: &'r mut Option<Registration>,
    channel: &str,
) -> Option<&'r Registration> {
    if registration
        .as_ref()
        .is_some_and(|reg| reg.channel() == channel)
    {
        return registration.as_ref();
    }
    let mut reg = w.hub.register(channel, token);
    // The old one (another channel) goes once the new one is in place.
    *registration = None;
    // Waited for at most one response timeout or one polling `interval`, whichever is
    // shorter, never past the wait's deadline; then the waiter goes on without it (polling
    // until it is in place).
    let bound = crate::vocab::options::later(Instant::now(), w.response_timeout.min(interval));
    reg.subscribed(w.deadline.cap(bound)).await;
    *registration = Some(reg);
    None
}

/// One attempt; one in flight at the deadline gets one bounded round trip more.
async fn bounded_attempt<P: Pursuit>(p: &mut P, w: &Waiting<'_>, wait: bool) -> Step<P::Won> {
    match w.deadline {
        Deadline::At(limit, _) => {
            let bound = crate::vocab::options::later(limit, w.response_timeout);
            tokio::time::timeout_at(bound, p.attempt(wait))
                .await
                .unwrap_or_else(|_| Step::Failed(no_reply(w.response_timeout)))
        }
        Deadline::Try | Deadline::Never => p.attempt(wait).await,
    }
}

/// A failed attempt while waiting: gives up once the outage budget is spent, else sleeps a
/// back-off (jittered, never past the deadline) before the next attempt by the same token.
async fn ride_outage(
    name: &str,
    interval: Duration,
    w: &Waiting<'_>,
    outage: &mut Outage,
    err: Error,
) -> Result<()> {
    let since = outage
        .since
        .as_ref()
        .map_or_else(Instant::now, |(since, _)| *since);
    if since.elapsed() >= w.outage_budget {
        return Err(err);
    }
    tracing::debug!(lock = name, %err, "Redis unreachable; attempting again by token");
    let wake_at = w.deadline.cap(Instant::now() + jitter(outage.backoff));
    outage.since = Some((since, err));
    outage.backoff = (outage.backoff * 2).min(interval);
    tokio::time::sleep_until(wake_at).await;
    Ok(())
}

/// After a refusal of the attempt sent at `sent_at`: waits for the first of a wake-up
/// naming this claim (or everyone), the end of the lease that blocks it, the pursuit's own
/// interval (jittered; also its heartbeat) and the caller's deadline; then offers the
/// pursuit the grant the wake-up carried, if any.
async fn sleep<P: Pursuit>(
    p: &mut P,
    reg: &Registration,
    busy: &Busy,
    sent_at: Instant,
    deadline: Deadline,
) -> Option<P::Won> {
    let mut sleep = jitter(p.interval());
    if let Some(hint) = busy.retry_after {
        sleep = sleep.min(hint + Duration::from_millis(1));
    }
    let wake_at = deadline.cap(Instant::now() + sleep);
    tokio::select! {
        biased;
        _ = reg.notified() => {}
        _ = tokio::time::sleep_until(wake_at) => {}
    }
    let grant = reg.take_grant()?;
    p.handed_over(grant, busy, sent_at)
}

/// Everything a handle needs to acquire: store, lock keys (or the error that refused the
/// name), options.
#[derive(Clone, Debug)]
pub(crate) struct LockCtx {
    pub store: Arc<dyn Store>,
    /// The client's live holds (for its shutdown).
    pub holds: Arc<Holds>,
    /// The longest a request waits for its reply: what "one bounded round trip" past a
    /// deadline means.
    pub response_timeout: Duration,
    /// The name as given (valid or not).
    pub name: Arc<str>,
    pub keys: std::result::Result<LockKeys, Arc<Error>>,
    pub opts: Options,
}

/// The error of an attempt whose reply did not come within one round trip past the deadline.
pub(crate) fn no_reply(bound: Duration) -> Error {
    Error::connection(
        "wait for a lock",
        "",
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply from Redis within {bound:?} past the wait's deadline"),
        ),
    )
}

pub(crate) fn jitter(d: Duration) -> Duration {
    // 80% to 100% of `d`, so waiters woken together do not retry in lockstep.
    let r = (crate::vocab::token::random() % 1000) as u32;
    d.mul_f64(0.8 + f64::from(r) / 5000.0)
}

impl LockCtx {
    pub(crate) fn keys(&self) -> Result<&LockKeys> {
        self.keys.as_ref().map_err(|e| match &**e {
            Error::InvalidName { reason } => Error::InvalidName {
                reason: reason.clone(),
            },
            other => Error::invalid("lock name", other.to_string()),
        })
    }

    pub(crate) fn claim(&self, request: Request) -> Claim {
        let mut claim = request.claim(self.opts.lease, self.opts.heartbeat());
        add_label(&mut claim.token, &self.opts.label);
        claim
    }

    /// A fresh claim token carrying the client's label.
    pub(crate) fn new_token(&self) -> String {
        let mut token = crate::vocab::token::next();
        add_label(&mut token, &self.opts.label);
        token
    }

    /// The longest a waiter sleeps between attempts.
    fn interval(&self, claim: &Claim) -> Duration {
        let heartbeats = match claim.slot {
            Slot::Ticket { .. } => true,
            Slot::Write => claim.policy == Policy::Writer,
            Slot::Read => false,
        };
        if heartbeats {
            self.opts.retry_interval.min(claim.heartbeat / 3)
        } else {
            self.opts.retry_interval
        }
    }

    /// Resumes the hold a hold id names (its `claim`, asking for this handle's lease) with
    /// this handle's options: one owner-checked renewal, trusted from its send.
    /// `Ok(None)`: the hold is gone, nothing was granted.
    pub(crate) async fn resume(&self, claim: Claim, fence: u64) -> Result<Option<Hold>> {
        self.opts.validate()?;
        let lock = self.keys()?.clone();
        Hold::resume(self.holds.clone(), lock, claim, fence, self.opts.clone()).await
    }

    /// Acquires `claim`, waiting until granted or `deadline` (never `Deadline::Try`).
    pub(crate) async fn wait_for(
        &self,
        claim: Claim,
        deadline: Deadline,
        on_position: Option<&mut (dyn FnMut(u64) + Send)>,
    ) -> Result<Hold> {
        let deadline = match deadline {
            Deadline::Try => Deadline::Never,
            d => d,
        };
        match self.acquire(claim, deadline, on_position).await? {
            Some(hold) => Ok(hold),
            // Only `Deadline::Try` returns without a grant, and it was ruled out above.
            None => Err(Error::Timeout {
                name: self.keys()?.name().to_owned(),
                waited: Duration::ZERO,
            }),
        }
    }

    /// Acquires `claim`, waiting as `deadline` allows. `Ok(None)`: a `Try` that was refused.
    /// Runs in a `tracing` span `acquire` with the lock name, the slot and the outcome.
    pub(crate) async fn acquire(
        &self,
        claim: Claim,
        deadline: Deadline,
        on_position: Option<&mut (dyn FnMut(u64) + Send)>,
    ) -> Result<Option<Hold>> {
        use tracing::Instrument;
        let started = Instant::now();
        let slot = claim.slot;
        let name = self.keys.as_ref().map(|k| k.name()).unwrap_or("");
        let span = tracing::debug_span!(
            "acquire",
            lock = name,
            slot = ?claim.slot,
            outcome = tracing::field::Empty
        );
        let result = self
            .acquire_inner(claim, deadline, on_position)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(Some(_)) => "granted",
            Ok(None) => "refused",
            Err(e) if e.is_timeout() => "timeout",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        crate::engine::telemetry::acquired(&slot, outcome, started.elapsed());
        result
    }

    async fn acquire_inner(
        &self,
        claim: Claim,
        deadline: Deadline,
        on_position: Option<&mut (dyn FnMut(u64) + Send)>,
    ) -> Result<Option<Hold>> {
        self.opts.validate()?;
        let lock = self.keys()?.clone();
        let pending = Pending::new(
            self.store.clone(),
            self.holds.clone(),
            vec![(lock.clone(), claim.clone())],
        );
        let mut one = OneClaim {
            ctx: self,
            interval: self.interval(&claim),
            lock,
            claim,
            pending,
            last_position: None,
            on_position,
        };
        let waiting = Waiting {
            hub: self.store.hub(),
            deadline,
            response_timeout: self.response_timeout,
            outage_budget: self.opts.outage_budget,
        };
        let won = pursue(&mut one, &waiting).await?;
        let pending = one.pending;
        match won {
            None => Ok(None),
            Some(Won::Granted { fence, sent_at }) => {
                self.confirm(pending, fence, sent_at).await.map(Some)
            }
            Some(Won::HandedOver {
                fence,
                sent_at,
                until,
            }) => Ok(pending.handed_over(fence, (sent_at, until), &self.opts)),
        }
    }

    /// Turns a grant into a hold, after the replicas acknowledged it if the handle asks for
    /// that (if they do not, the grant is released again).
    async fn confirm(&self, mut pending: Pending, fence: u64, sent_at: Instant) -> Result<Hold> {
        if self.opts.wait_replicas.is_some() {
            // If this is cancelled, dropping `pending` releases the grant.
            let lock = pending.parts()[0].0.clone();
            let acked = acknowledged(&*self.store, &lock, self.opts.wait_replicas).await;
            if let Err(err) = acked {
                // Released now; if Redis cannot be asked, in the background.
                if pending.withdraw().await {
                    pending.forget();
                }
                return Err(err);
            }
        }
        let hold = pending.granted(&[fence], sent_at, &self.opts).pop();
        Ok(hold.expect("one part, one hold"))
    }
}

/// How a single claim was won.
pub(crate) enum Won {
    /// By the reply to the attempt sent at `sent_at`.
    Granted { fence: u64, sent_at: Instant },
    /// By a release that handed it over after the attempt sent at `sent_at`, until `until`
    /// (server ms).
    HandedOver {
        fence: u64,
        sent_at: Instant,
        until: u64,
    },
}

/// A single claim pursued by the acquire loop; what the server may hold for it is `pending`'s
/// until it becomes a hold.
struct OneClaim<'a, 'p> {
    ctx: &'a LockCtx,
    interval: Duration,
    lock: LockKeys,
    claim: Claim,
    pending: Pending,
    last_position: Option<u64>,
    on_position: Option<&'p mut (dyn FnMut(u64) + Send)>,
}

impl OneClaim<'_, '_> {
    /// After an attempt the store answered by releasing the token where unsure
    /// ([`Busy::token_released`], or a failure of a store that
    /// [`releases_where_unsure`](Store::releases_where_unsure)): the next attempt goes by a
    /// new token, so that release, if it reaches a server late, names no later grant. The
    /// old token is retired: released again, in the background, at the next refusal, so
    /// what it may still hold (a grant whose release did not get through, a waiting-writer
    /// announcement) does not hold the new one back for long.
    fn new_token(&mut self) {
        self.claim.token = self.ctx.new_token();
        self.pending.retoken(&self.claim.token, false);
    }
}

impl Pursuit for OneClaim<'_, '_> {
    type Won = Won;

    async fn attempt(&mut self, wait: bool) -> Step<Won> {
        let sent_at = Instant::now();
        match self
            .ctx
            .store
            .acquire(&self.lock, &self.claim, wait, None)
            .await
        {
            Ok(Acquire::Granted(grant)) => Step::Won(Won::Granted {
                fence: grant.fence,
                sent_at,
            }),
            Ok(Acquire::Busy(busy)) => Step::Refused {
                busy,
                sent_at,
                channel: self.lock.channel(),
            },
            Err(err) => Step::Failed(err),
        }
    }

    async fn refused(&mut self, busy: &Busy, wait: bool, _until: Option<Instant>) {
        // Tokens retired at an earlier refusal go now, in the background: the current one has
        // been refused (and, as a waiting writer, announced) since, so no reader slips in
        // between, and the wait does not wait for a server that does not answer.
        self.pending.release_retired();
        if busy.token_released {
            self.new_token();
        }
        if !wait {
            // A refused try never stays queued.
            self.pending.forget();
            return;
        }
        if let Some(pos) = busy.position.filter(|p| Some(*p) != self.last_position) {
            self.last_position = Some(pos);
            crate::engine::telemetry::position(self.lock.name(), pos);
            if let Some(f) = self.on_position.as_mut() {
                f(pos);
            }
        }
    }

    /// A hand-off's wake-up may carry the grant itself: the hold is then valid from our last
    /// attempt, and the full lease is claimed in the background, which saves the hand-off a
    /// round trip. A grant that does not name the deadline our latest refusal was told may
    /// predate that refusal (the push was delayed, the claim window ended and someone else
    /// took the lock): the next attempt confirms it instead (it claims a grant that still
    /// stands); so does a grant whose trust window is mostly gone.
    fn handed_over(&mut self, grant: HandOff, busy: &Busy, sent_at: Instant) -> Option<Won> {
        let wanted = matches!(self.claim.slot, Slot::Ticket { .. } | Slot::Write)
            // With wait_replicas, the normal claim path runs WAIT first.
            && self.ctx.opts.wait_replicas.is_none();
        let trusted = wanted
            && (grant.names(busy.heartbeat_until) || planted(Bug::StaleGrant))
            && Hold::hand_off_is_fresh(&self.claim, sent_at);
        // A grant that names the refusal has its deadline (`names`); a planted stale grant
        // may not, and its claim then names none the server could have.
        trusted.then_some(Won::HandedOver {
            fence: grant.fence,
            sent_at,
            until: grant.until.unwrap_or(0),
        })
    }

    fn unknown(&mut self) {
        if self.ctx.store.releases_where_unsure() {
            self.new_token();
        }
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn token(&self) -> &str {
        &self.claim.token
    }

    async fn withdraw_within(&mut self, bound: Duration) {
        self.pending.withdraw_within(bound).await;
    }
}
