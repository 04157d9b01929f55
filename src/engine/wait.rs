//! The one waiting loop shared by every primitive.
//!
//! 1. Attempt. Granted: done (one round trip when uncontended).
//! 2. Refused: register with the wake-up hub (subscribing to the lock's channel if this
//!    process was not yet), then attempt again at once, so a release between the first
//!    attempt and the subscription cannot be missed.
//! 3. Wait for the first of: a wake-up naming this waiter (or everyone), the end of the lease
//!    that blocks us, the waiter's own interval (jittered; also its heartbeat), the caller's
//!    deadline. Then attempt again: the attempt is the heartbeat of a queued waiter.
//! 4. On timeout, or when the future is dropped, every trace of the claim is removed (its
//!    queue place, or a grant that may have been made while the reply was in flight).
//!
//! A lost reply is not a failure: the attempt is retried with the same token, which the
//! scripts treat idempotently.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::lease::{release_in_background, release_with_retry, Hold, Holds};
use crate::store::hub::Registration;
use crate::store::{Acquire, Busy, Claim, Policy, Request, Slot, Store};
use crate::vocab::bugs::{planted, Bug};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;
use crate::vocab::options::Options;
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
    /// A wait of at most `timeout` from now (a timeout too large for the clock waits forever).
    pub(crate) fn after(timeout: Duration) -> Self {
        match Instant::now().checked_add(timeout) {
            Some(at) => Deadline::At(at, timeout),
            None => Deadline::Never,
        }
    }
}

/// What the server may hold for a claim until it becomes a hold: a queue place, a writer
/// announcement, or a grant whose reply was lost. Dropping it (the acquire failed, or its
/// future was dropped) releases the claim by token in the background; the acquire consumes it
/// instead, into a [`Hold`], by [`Pending::withdraw`], or by [`Pending::settled`].
struct Pending(Option<(Arc<dyn Store>, LockKeys, Claim)>, Arc<Holds>);

impl Pending {
    fn new(store: Arc<dyn Store>, lock: LockKeys, claim: Claim, holds: Arc<Holds>) -> Self {
        Pending(Some((store, lock, claim)), holds)
    }

    fn parts(&self) -> (&Arc<dyn Store>, &LockKeys, &Claim) {
        let (store, lock, claim) = self.0.as_ref().expect("a pending claim is consumed once");
        (store, lock, claim)
    }

    fn take(mut self) -> (Arc<dyn Store>, LockKeys, Claim) {
        self.0.take().expect("a pending claim is consumed once")
    }

    /// The claim left nothing on the server (a refused try never queues).
    fn settled(self) {
        drop(self.take());
    }

    /// Removes the claim's traces now; if Redis cannot be asked, it is left to the background.
    async fn withdraw(self) {
        let (store, lock, claim) = self.parts();
        if release_with_retry(&**store, lock, claim).await.is_ok() {
            self.settled();
        }
    }

    /// [`Pending::withdraw`], waiting at most `bound`: what is not done by then goes on in
    /// the background (the caller is not kept waiting on an unreachable Redis).
    async fn withdraw_within(self, bound: Duration) {
        let (store, lock, claim) = self.parts();
        let release = release_with_retry(&**store, lock, claim);
        if let Ok(Ok(_)) = tokio::time::timeout(bound, release).await {
            self.settled();
        }
    }

    /// The grant made to this claim by the reply to the attempt sent at `sent_at`.
    fn granted(self, fence: u64, sent_at: Instant, opts: Options) -> Hold {
        let holds = self.1.clone();
        let (store, lock, claim) = self.take();
        tracing::debug!(lock = lock.name(), fence, "granted");
        Hold::new((holds, store), lock, claim, fence, sent_at, opts)
    }

    /// The grant a release handed to this claim after its attempt sent at `sent_at`.
    fn handed_over(self, fence: u64, sent_at: Instant, opts: Options) -> Hold {
        let holds = self.1.clone();
        let (store, lock, claim) = self.take();
        tracing::debug!(lock = lock.name(), fence, "granted by hand-off");
        Hold::handed_over((holds, store), lock, claim, fence, sent_at, opts)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some((store, lock, claim)) = self.0.take() {
            release_in_background(store, lock, claim);
        }
    }
}

/// The outcome of one attempt.
enum Attempt {
    /// The reply granted the claim.
    Granted { fence: u64, sent_at: Instant },
    /// Refused (and queued or announced, when waiting).
    Refused { busy: Busy, sent_at: Instant },
    /// No usable reply.
    Failed(Error),
}

/// The outcome of waiting after a refusal.
enum Woken {
    /// A release handed this claim the lock and the grant can be trusted as it is.
    HandedOver(HandOff),
    /// Attempt again (a wake-up, the claim's interval, the blocking lease's end, or the
    /// caller's deadline).
    Retry,
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
    Error::Connection(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no reply from Redis within {bound:?} past the wait's deadline"),
    )))
}

/// How long a waiter waits for its channel's subscription before it goes on without it
/// (polling until it is in place): at most one response timeout or one of its polling
/// `interval`s, whichever is shorter, and never past the wait's deadline.
pub(crate) fn subscribe_bound(
    deadline: Deadline,
    response_timeout: Duration,
    interval: Duration,
) -> Instant {
    let bound = crate::vocab::options::later(Instant::now(), response_timeout.min(interval));
    match deadline {
        Deadline::At(limit, _) => bound.min(limit),
        Deadline::Try | Deadline::Never => bound,
    }
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
        claim.token.reserve_exact(1 + self.opts.label.len());
        claim.token.push('-');
        claim.token.push_str(&self.opts.label);
        claim
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
        mut on_position: Option<&mut (dyn FnMut(u64) + Send)>,
    ) -> Result<Option<Hold>> {
        self.opts.validate()?;
        let lock = self.keys()?.clone();
        let wait = !matches!(deadline, Deadline::Try);
        let pending = Pending::new(
            self.store.clone(),
            lock.clone(),
            claim.clone(),
            self.holds.clone(),
        );
        let mut registration = None;
        let mut last_position = None;
        // Since when Redis has not answered, and the latest reason why.
        let mut outage: Option<(Instant, Error)> = None;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let attempt = match deadline {
                // An attempt in flight at the deadline gets one bounded round trip more.
                Deadline::At(limit, _) => {
                    let bound = crate::vocab::options::later(limit, self.response_timeout);
                    tokio::time::timeout_at(bound, self.attempt(&lock, &claim, wait))
                        .await
                        .unwrap_or_else(|_| Attempt::Failed(no_reply(self.response_timeout)))
                }
                _ => self.attempt(&lock, &claim, wait).await,
            };
            if !matches!(attempt, Attempt::Failed(_)) {
                outage = None;
                backoff = FIRST_BACKOFF;
            }
            match attempt {
                Attempt::Granted { fence, sent_at } => {
                    return self.confirm(pending, fence, sent_at).await.map(Some);
                }
                Attempt::Refused { .. } if !wait => {
                    // A refused try never stays queued.
                    pending.settled();
                    return Ok(None);
                }
                Attempt::Refused { busy, sent_at } => {
                    if let Some(pos) = busy.position.filter(|p| Some(*p) != last_position) {
                        last_position = Some(pos);
                        crate::engine::telemetry::position(lock.name(), pos);
                        if let Some(f) = on_position.as_mut() {
                            f(pos);
                        }
                    }
                    let Some(reg) = registration.as_ref() else {
                        // Subscribed only now: attempt again at once, so a release between the
                        // first attempt and the subscription is not missed.
                        let mut reg = self.store.hub().register(&lock.channel(), &claim.token);
                        reg.subscribed(subscribe_bound(
                            deadline,
                            self.response_timeout,
                            self.interval(&claim),
                        ))
                        .await;
                        registration = Some(reg);
                        continue;
                    };
                    if let Woken::HandedOver(grant) =
                        self.sleep(reg, &claim, &busy, sent_at, deadline).await
                    {
                        return Ok(Some(pending.handed_over(
                            grant.fence,
                            sent_at,
                            self.opts.clone(),
                        )));
                    }
                }
                // A wait rides through an outage within its budget, attempting again with
                // the same token (the failed attempt may have run); a try makes one attempt.
                Attempt::Failed(err) if wait && err.is_retryable() => {
                    let since = outage
                        .as_ref()
                        .map_or_else(Instant::now, |(since, _)| *since);
                    if since.elapsed() >= self.opts.outage_budget {
                        return Err(err);
                    }
                    tracing::debug!(lock = lock.name(), %err, "Redis unreachable; attempting again by token");
                    let mut wake_at = Instant::now() + jitter(backoff);
                    if let Deadline::At(limit, _) = deadline {
                        wake_at = wake_at.min(limit);
                    }
                    outage = Some((since, err));
                    backoff = (backoff * 2).min(self.interval(&claim));
                    tokio::time::sleep_until(wake_at).await;
                }
                // Whatever ended the acquire, it leaves no trace: dropping `pending` releases
                // by token in the background (a lost reply may have been a grant; a refusal
                // may have left a queue place or an announcement).
                Attempt::Failed(err) => return Err(err),
            }
            if let Deadline::At(limit, waited) = deadline {
                if Instant::now() >= limit {
                    drop(registration.take());
                    // Redis unreachable at the deadline: say so, not "the lock was busy".
                    if let Some((_, err)) = outage {
                        return Err(err);
                    }
                    pending.withdraw_within(self.response_timeout).await;
                    return Err(Error::Timeout {
                        name: lock.name().to_owned(),
                        waited,
                    });
                }
            }
        }
    }

    /// One attempt, timed from its send.
    async fn attempt(&self, lock: &LockKeys, claim: &Claim, wait: bool) -> Attempt {
        let sent_at = Instant::now();
        match self.store.acquire(lock, claim, wait, None).await {
            Ok(Acquire::Granted(grant)) => Attempt::Granted {
                fence: grant.fence,
                sent_at,
            },
            Ok(Acquire::Busy(busy)) => Attempt::Refused { busy, sent_at },
            Err(err) => Attempt::Failed(err),
        }
    }

    /// Turns a grant into a hold, after the replicas acknowledged it if the handle asks for
    /// that (if they do not, the grant is released again).
    async fn confirm(&self, pending: Pending, fence: u64, sent_at: Instant) -> Result<Hold> {
        if let Some((replicas, timeout)) = self.opts.wait_replicas {
            // If this is cancelled, dropping `pending` releases the grant.
            let (_, lock, _) = pending.parts();
            match self.store.wait_replicas(lock, replicas, timeout).await {
                Ok(acked) if acked >= replicas => {}
                outcome => {
                    pending.withdraw().await;
                    return Err(match outcome {
                        Ok(acked) => Error::ReplicasNotReached {
                            acked,
                            required: replicas,
                        },
                        Err(err) => err,
                    });
                }
            }
        }
        Ok(pending.granted(fence, sent_at, self.opts.clone()))
    }

    /// After a refusal of the attempt sent at `sent_at`: waits for the first of a wake-up
    /// naming this claim (or everyone), the end of the lease that blocks it, the claim's own
    /// interval (jittered; also its heartbeat) and the caller's deadline.
    async fn sleep(
        &self,
        reg: &Registration,
        claim: &Claim,
        busy: &Busy,
        sent_at: Instant,
        deadline: Deadline,
    ) -> Woken {
        let mut sleep = jitter(self.interval(claim));
        if let Some(hint) = busy.retry_after {
            sleep = sleep.min(hint + Duration::from_millis(1));
        }
        let mut wake_at = Instant::now() + sleep;
        if let Deadline::At(limit, _) = deadline {
            wake_at = wake_at.min(limit);
        }
        tokio::select! {
            biased;
            _ = reg.notified() => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
        // A hand-off's wake-up may carry the grant itself: the hold is then valid from our
        // last attempt, and the full lease is claimed in the background, which saves the
        // hand-off a round trip. A grant that does not name the deadline our latest refusal
        // was told may predate that refusal (the push was delayed, the claim window ended and
        // someone else took the lock): the next attempt confirms it instead (it claims a grant
        // that still stands); so does a grant whose trust window is mostly gone.
        let wanted = matches!(claim.slot, Slot::Ticket { .. } | Slot::Write)
            // With wait_replicas, the normal claim path runs WAIT first.
            && self.opts.wait_replicas.is_none();
        match reg.take_grant() {
            Some(grant)
                if wanted
                    && (grant.names(busy.heartbeat_until) || planted(Bug::StaleGrant))
                    && Hold::hand_off_is_fresh(claim, sent_at) =>
            {
                Woken::HandedOver(grant)
            }
            _ => Woken::Retry,
        }
    }
}
