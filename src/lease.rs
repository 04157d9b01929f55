//! A live hold: renewal in the background, the local validity deadline, the lost signal, and
//! release (explicit, or in the background on drop).
//!
//! Local validity is measured from the *send* of the request that granted or renewed the
//! lease, never from its reply: the server may have started the lease at any instant after the
//! request left. A hold is trusted until `sent_at + lease - drift`; each confirmed renewal
//! restarts that from its own send instant.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::options::Options;
use crate::store::{Claim, Slot, Store};

#[derive(Clone, Copy, Debug)]
struct Validity {
    until: Instant,
    lost: bool,
}

struct Shared {
    granted_at: Instant,
    store: Arc<dyn Store>,
    lock: LockKeys,
    claim: StdMutex<Claim>,
    fence: u64,
    validity: watch::Sender<Validity>,
}

impl Shared {
    fn claim(&self) -> Claim {
        self.claim.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn confirm(&self, sent_at: Instant, lease: Duration) {
        let until = sent_at + lease.saturating_sub(Options::drift(lease));
        self.validity.send_modify(|v| {
            if !v.lost && until > v.until {
                v.until = until;
            }
        });
    }

    fn mark_lost(&self, why: &str) {
        let mut changed = false;
        self.validity.send_modify(|v| {
            changed = !v.lost;
            v.lost = true;
        });
        if changed {
            tracing::warn!(lock = self.lock.name(), why, "lease lost");
            crate::telemetry::lost(&self.claim().slot);
        }
    }

    fn until(&self) -> Instant {
        self.validity.borrow().until
    }
}

/// The hold behind every guard.
pub(crate) struct Hold {
    shared: Arc<Shared>,
    renewer: Option<AbortHandle>,
    opts: Options,
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
        store: Arc<dyn Store>,
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        sent_at: Instant,
        opts: Options,
    ) -> Self {
        Self::start(
            store,
            lock,
            claim,
            fence,
            sent_at,
            opts,
            FirstRenewal::Scheduled,
        )
    }

    /// A hold handed over by someone else's release while this claim waited (the wake-up
    /// carried the grant). The grant lasts until the waiter's own heartbeat deadline, which
    /// the server set at or after `heartbeat_sent_at` (the send of the waiter's last attempt),
    /// so it is trusted for one heartbeat window from then; the full lease is claimed at once
    /// in the background.
    pub(crate) fn handed_over(
        store: Arc<dyn Store>,
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        heartbeat_sent_at: Instant,
        opts: Options,
    ) -> Self {
        let first = FirstRenewal::Immediately;
        Self::start(store, lock, claim, fence, heartbeat_sent_at, opts, first)
    }

    /// Trusts the hold for its window (the lease, or the heartbeat window of a hand-off) from
    /// `trusted_from`, minus drift, and starts renewing it.
    fn start(
        store: Arc<dyn Store>,
        lock: LockKeys,
        claim: Claim,
        fence: u64,
        trusted_from: Instant,
        opts: Options,
        first: FirstRenewal,
    ) -> Self {
        let window = match first {
            FirstRenewal::Scheduled => claim.lease,
            FirstRenewal::Immediately => claim.heartbeat,
        };
        let until = trusted_from + window.saturating_sub(Options::drift(window));
        let (validity, _) = watch::channel(Validity { until, lost: false });
        let shared = Arc::new(Shared {
            granted_at: Instant::now(),
            store,
            lock,
            claim: StdMutex::new(claim),
            fence,
            validity,
        });
        let renewer = match first {
            FirstRenewal::Scheduled => opts.auto_renew.then(|| {
                let every = opts.renew_interval();
                tokio::spawn(renew(shared.clone(), opts.clone(), every, false)).abort_handle()
            }),
            FirstRenewal::Immediately => {
                let once = !opts.auto_renew;
                let task = renew(shared.clone(), opts.clone(), Duration::ZERO, once);
                Some(tokio::spawn(task).abort_handle())
            }
        };
        Hold {
            shared,
            renewer,
            opts,
            released: false,
        }
    }

    pub(crate) fn fencing_token(&self) -> u64 {
        self.shared.fence
    }

    pub(crate) fn name(&self) -> &str {
        self.shared.lock.name()
    }

    #[cfg(feature = "testing")]
    pub(crate) fn token(&self) -> String {
        self.shared.claim().token
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
        crate::options::check_duration("lease", lease)?;
        if self.shared.validity.borrow().lost {
            return Ok(false);
        }
        let claim = self.shared.claim();
        let sent_at = Instant::now();
        let renewed = self
            .shared
            .store
            .extend(&self.shared.lock, &claim, lease, None)
            .await?;
        if renewed {
            // Later renewals keep the new length.
            self.shared
                .claim
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .lease = lease;
            self.shared.validity.send_modify(|v| {
                v.until = sent_at + lease.saturating_sub(Options::drift(lease));
            });
        } else {
            self.shared.mark_lost("extend refused");
        }
        Ok(renewed)
    }

    fn stop_renewing(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
    }

    pub(crate) async fn release(mut self) -> Result<bool> {
        self.stop_renewing();
        self.released = true;
        self.shared.mark_lost_quietly();
        let claim = self.shared.claim();
        crate::telemetry::held(&claim.slot, self.shared.granted_at.elapsed());
        release_with_retry(&*self.shared.store, &self.shared.lock, &claim).await
    }

    /// Turns an exclusive hold into a shared one (`shared_slot`) atomically.
    pub(crate) async fn downgrade(mut self, shared_slot: Slot) -> Result<Hold> {
        let claim = self.shared.claim();
        let sent_at = Instant::now();
        let fence = self
            .shared
            .store
            .downgrade(&self.shared.lock, &claim, None)
            .await?;
        match fence {
            Some(fence) => {
                self.stop_renewing();
                self.released = true;
                let mut shared_claim = claim;
                shared_claim.slot = shared_slot;
                Ok(Hold::new(
                    self.shared.store.clone(),
                    self.shared.lock.clone(),
                    shared_claim,
                    fence,
                    sent_at,
                    self.opts.clone(),
                ))
            }
            None => {
                self.shared.mark_lost("downgrade found no live write hold");
                Err(Error::LeaseLost {
                    name: self.shared.lock.name().to_owned(),
                })
            }
        }
    }
}

impl Shared {
    fn mark_lost_quietly(&self) {
        self.validity.send_modify(|v| v.lost = true);
    }
}

/// Releases by token, retrying a lost reply a few times (release is idempotent by token).
pub(crate) async fn release_with_retry(
    store: &dyn Store,
    lock: &LockKeys,
    claim: &Claim,
) -> Result<bool> {
    let mut delay = Duration::from_millis(20);
    let mut attempt = 0;
    let mut first_error = None;
    loop {
        match store.release(lock, claim, None).await {
            Err(e) if e.is_retryable() && attempt < 3 => {
                attempt += 1;
                first_error.get_or_insert(e);
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            // After a lost reply, "nothing held" may mean the lost attempt released it: the
            // answer stays unknown, so the first error is reported, not a false "you had lost it".
            Ok(false) => {
                return match first_error {
                    Some(e) => Err(e),
                    None => Ok(false),
                }
            }
            other => return other,
        }
    }
}

/// Releases `claim` in the background, if a runtime is there to run it.
pub(crate) fn release_in_background(store: Arc<dyn Store>, lock: LockKeys, claim: Claim) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            if let Err(err) = release_with_retry(&*store, &lock, &claim).await {
                tracing::debug!(lock = lock.name(), %err, "background release failed; the lease will lapse");
            }
        });
    } else {
        tracing::debug!(
            lock = lock.name(),
            "dropped outside a runtime; the lease will lapse"
        );
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop_renewing();
        if !self.released {
            self.shared.mark_lost_quietly();
            release_in_background(
                self.shared.store.clone(),
                self.shared.lock.clone(),
                self.shared.claim(),
            );
        }
    }
}

/// Renews the lease every `renew_interval`, the first time after `first`; with `once`, stops
/// after the first confirmed renewal.
async fn renew(shared: Arc<Shared>, opts: Options, first: Duration, once: bool) {
    let every = opts.renew_interval();
    let mut next = Instant::now() + first;
    loop {
        tokio::time::sleep_until(next).await;
        let claim = shared.claim();
        let sent_at = Instant::now();
        let until = shared.until();
        if sent_at >= until {
            shared.mark_lost("renewal came too late");
            return;
        }
        let call = shared.store.extend(&shared.lock, &claim, claim.lease, None);
        match tokio::time::timeout_at(until, call).await {
            Ok(Ok(true)) => {
                shared.confirm(sent_at, claim.lease);
                if once {
                    return;
                }
                next = sent_at + every;
            }
            Ok(Ok(false)) => {
                shared.mark_lost("renewal refused: the lease lapsed or was taken over");
                return;
            }
            Ok(Err(err)) => {
                tracing::debug!(lock = shared.lock.name(), %err, "renewal failed; retrying");
                // Retry soon, but well inside what is left of the lease.
                let left = until.saturating_duration_since(Instant::now());
                next = Instant::now() + (left / 4).min(Duration::from_millis(500));
            }
            Err(_) => {
                shared.mark_lost("no renewal confirmed before the lease ran out");
                return;
            }
        }
    }
}
