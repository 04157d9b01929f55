//! What a wait may leave on the server when it ends without a hold (a queue place, a waiting
//! writer's announcement, a grant whose reply was lost, a rate limiter's queue place), and
//! its removal in the background.
//!
//! The removal runs on the caller's runtime, so it follows whatever the wait sent on the
//! caller's connection (an attempt still on its way cannot land after it). One that no
//! runtime runs to its end (none is current, or it shuts down first, as when `main` returns
//! while a task still waits) goes to the client's engine, which sends it on its own
//! connections (every Redis deployment's client gives it some); the drop of the
//! client's last handle waits for it as it waits for a hold's release. A removal whose
//! runtime only idles (a sync wrapper's between two calls) runs when that runtime runs
//! again: the engine does not send a second copy of a removal that may be under way, which
//! would add load exactly when removals are slow (a burst of cancellations on a short
//! response timeout).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::lease::{release_with_retry, retrying, Holds};
use crate::store::{Claim, Store};
use crate::vocab::error::Result;
use crate::vocab::keys::LockKeys;
use crate::vocab::rate::RateClaim;

/// How many background removals of one client are on their way at once. A burst of
/// cancelled waits (thousands at once) otherwise sends every removal together: when the
/// server needs longer than a response timeout for the burst, every attempt of many removals
/// times out, their retries add to the burst, and their places stay for the heartbeat window
/// (measured: 3,000 FairLock waits cancelled at once on a 50 ms response timeout left places
/// in 7 of 10 runs without this bound, in none of 10 with it: `tests/engine_faults.rs`).
/// Later removals wait for a turn, sent still after the wait's own requests.
pub(crate) const REMOVALS_AT_ONCE: usize = 64;

/// A trace of a wait on the server, removed by its token.
#[derive(Clone, Debug)]
pub(crate) enum Leftover {
    /// A lock's claim (released by token, whatever it left).
    Claim(Claim),
    /// A rate limiter's queue place.
    Rate(RateClaim),
}

impl Leftover {
    fn lease(&self) -> Duration {
        match self {
            Leftover::Claim(claim) => claim.lease,
            Leftover::Rate(claim) => claim.heartbeat,
        }
    }

    /// Removes it, sending again after a lost reply.
    pub(crate) async fn remove(&self, store: &dyn Store, lock: &LockKeys) -> Result<()> {
        match self {
            Leftover::Claim(claim) => release_with_retry(store, lock, claim).await.map(drop),
            Leftover::Rate(claim) => retrying(|| store.rate_cancel(lock, claim, None))
                .await
                .0
                .map(drop),
        }
    }
}

/// Removes `leftover` of `lock` in the background (see the module docs).
pub(crate) fn remove_in_background(
    holds: &Arc<Holds>,
    store: Arc<dyn Store>,
    lock: LockKeys,
    leftover: Leftover,
) {
    let mut unfinished = Unfinished {
        holds: holds.clone(),
        trace: Some((lock, leftover)),
        started: false,
    };
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        // A runtime shutting down drops its tasks, run or not: `Unfinished` then hands the
        // removal to the engine.
        handle.spawn(async move {
            let turn = unfinished.holds.removals.acquire().await;
            unfinished.started = true;
            if let Some((lock, leftover)) = &unfinished.trace
                && let Err(err) = leftover.remove(&*store, lock).await
            {
                tracing::debug!(lock = lock.name(), %err, "background release failed; the claim lapses with its lease or heartbeat");
            }
            unfinished.trace.take();
            drop(turn);
        });
    }
}

/// A removal not finished: dropped so (no runtime ran it to its end), it goes to the engine,
/// or, when the engine cannot send it, it is warned of.
struct Unfinished {
    holds: Arc<Holds>,
    /// Taken when the removal has ended (answered or failed).
    trace: Option<(LockKeys, Leftover)>,
    /// Its request may have left.
    started: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some((lock, leftover)) = self.trace.take() {
            let (name, lease) = (lock.name().to_owned(), leftover.lease());
            if !self.holds.remove_leftover(lock, leftover) {
                crate::engine::telemetry::unreleased(&name, lease, self.started);
            }
        }
    }
}
