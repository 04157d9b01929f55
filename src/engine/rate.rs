//! The rate limiter's wait: a [`Pursuit`] of the one acquire loop ([`pursue`]), and the queue
//! place it may leave on the server, removed when the wait ends without an admission.
//!
//! A refused waiter sleeps until the first of: a wake-up naming it (the step that made it the
//! head of the queue publishes its token), the instant its request fits (`retry_after`, which
//! the server computes exactly for the head), its interval (also its heartbeat), the caller's
//! deadline; then it attempts again. No admission rides in a wake-up: only the waiter's own
//! attempt admits it, on the server's clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::lease::{retrying, Holds};
use crate::engine::leftover::{remove_in_background, Leftover};
use crate::engine::wait::{pursue, Deadline, Pursuit, Step, Waiting};
use crate::store::{Busy, RateClaim, RateDecision, Store};
use crate::vocab::error::Result;
use crate::vocab::keys::LockKeys;
use crate::wire::HandOff;

/// A queue place a rate-limiter wait may have left: removed by token when dropped, unless
/// the wait was admitted or never queued ([`QueuePlace::forget`]).
pub(crate) struct QueuePlace {
    store: Arc<dyn Store>,
    holds: Arc<Holds>,
    lock: LockKeys,
    claim: Option<RateClaim>,
}

impl QueuePlace {
    /// Nothing is left on the server (an admission removes the place; a refused try never
    /// queues).
    fn forget(&mut self) {
        self.claim = None;
    }

    /// Removes the place now, waiting at most `bound`; forgotten once Redis confirmed it.
    async fn cancel_within(&mut self, bound: Duration) {
        let Some(claim) = self.claim.as_ref() else {
            return;
        };
        let (store, lock) = (&*self.store, &self.lock);
        let cancel = retrying(|| store.rate_cancel(lock, claim, None));
        if let Ok((Ok(_), _)) = tokio::time::timeout(bound, cancel).await {
            self.forget();
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            let (store, lock) = (self.store.clone(), self.lock.clone());
            remove_in_background(&self.holds, store, lock, Leftover::Rate(claim));
        }
    }
}

/// One rate-limiter request pursued by the acquire loop.
pub(crate) struct RateWait<'p> {
    lock: LockKeys,
    claim: RateClaim,
    place: QueuePlace,
    interval: Duration,
    /// Told each new queue position (waiters ahead).
    on_position: Option<&'p mut (dyn FnMut(u64) + Send)>,
    last_position: Option<u64>,
}

impl<'p> RateWait<'p> {
    /// A wait for `claim` on `lock`, attempting at least every `retry_interval` (and three
    /// times per heartbeat window).
    pub(crate) fn new(
        (store, holds): (Arc<dyn Store>, Arc<Holds>),
        lock: LockKeys,
        claim: RateClaim,
        retry_interval: Duration,
        on_position: Option<&'p mut (dyn FnMut(u64) + Send)>,
    ) -> RateWait<'p> {
        let interval = retry_interval.min(claim.heartbeat / 3);
        let place = QueuePlace {
            store,
            holds,
            lock: lock.clone(),
            claim: Some(claim.clone()),
        };
        RateWait {
            lock,
            claim,
            place,
            interval,
            on_position,
            last_position: None,
        }
    }
}

/// What a refused try reports: the server's estimate of when the request fits.
pub(crate) enum RateOutcome {
    /// Admitted at this store-clock instant (ms).
    Admitted(u64),
    /// Refused (a try): fits in about this long, if the store said.
    Refused(Option<Duration>),
}

/// Runs one rate-limiter request to its end: one attempt for [`Deadline::Try`], else waits in
/// the queue until admitted or the deadline.
pub(crate) async fn decide(mut wait: RateWait<'_>, waiting: &Waiting<'_>) -> Result<RateOutcome> {
    if matches!(waiting.deadline, Deadline::Try) {
        // A try never queues (whatever its outcome, it leaves no place to cancel): one
        // attempt, whose refusal carries the estimate.
        let step = wait.attempt(false).await;
        wait.place.forget();
        return match step {
            Step::Won(at) => Ok(RateOutcome::Admitted(at)),
            Step::Refused { busy, .. } => Ok(RateOutcome::Refused(busy.retry_after)),
            Step::Failed(err) => Err(err),
        };
    }
    // Only a try returns without an admission (handled above).
    Ok(match pursue(&mut wait, waiting).await? {
        Some(at) => RateOutcome::Admitted(at),
        None => RateOutcome::Refused(None),
    })
}

impl Pursuit for RateWait<'_> {
    type Won = u64;

    async fn attempt(&mut self, wait: bool) -> Step<u64> {
        let sent_at = Instant::now();
        match self
            .place
            .store
            .rate_acquire(&self.lock, &self.claim, wait, None)
            .await
        {
            Ok(RateDecision::Admitted { at }) => {
                self.place.forget();
                Step::Won(at)
            }
            Ok(RateDecision::Refused(busy)) => Step::Refused {
                busy,
                sent_at,
                channel: self.lock.channel(),
            },
            Err(err) => Step::Failed(err),
        }
    }

    async fn refused(&mut self, busy: &Busy, wait: bool, _until: Option<Instant>) {
        if !wait {
            self.place.forget();
        } else if let Some(pos) = busy.position.filter(|p| Some(*p) != self.last_position) {
            self.last_position = Some(pos);
            crate::engine::telemetry::position(self.lock.name(), pos);
            if let Some(f) = self.on_position.as_mut() {
                f(pos);
            }
        }
    }

    fn handed_over(&mut self, _grant: HandOff, _busy: &Busy, _sent_at: Instant) -> Option<u64> {
        // Only the waiter's own attempt admits it.
        None
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
        self.place.cancel_within(bound).await;
    }
}
