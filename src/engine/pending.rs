//! [`Pending`]: what an acquisition may have left on the server until it becomes holds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::hold::Start;
use crate::engine::lease::{release_with_retry, Hold, Holds};
use crate::engine::leftover::{remove_in_background, Leftover};
use crate::store::{Claim, Store};
use crate::vocab::error::Result;
use crate::vocab::keys::LockKeys;
use crate::vocab::options::Options;

/// What the server may hold for the parts of an acquisition (one claim, or a multi-lock
/// group's parts) until they become holds: queue places, writer announcements, or grants
/// whose replies were lost. The one owner of that: dropping it (the acquisition failed, or
/// its future was dropped) releases every part by token in the background, last part first;
/// the acquisition consumes it into holds ([`Pending::granted`], [`Pending::handed_over`]) or
/// forgets it once nothing can be left ([`Pending::forget`]).
pub(crate) struct Pending {
    store: Arc<dyn Store>,
    holds: Arc<Holds>,
    /// `None` once consumed or forgotten.
    parts: Option<Vec<(LockKeys, Claim)>>,
    /// Parts under tokens given up for new ones ([`Pending::retoken`]) whose release Redis
    /// has not confirmed: released again with a withdraw, or in the background at the next
    /// refusal ([`Pending::release_retired`]) or when this is dropped.
    retired: Vec<(LockKeys, Claim)>,
}

impl Pending {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        holds: Arc<Holds>,
        parts: Vec<(LockKeys, Claim)>,
    ) -> Self {
        Pending {
            store,
            holds,
            parts: Some(parts),
            retired: Vec::new(),
        }
    }

    /// The parts still pending (none once consumed or forgotten).
    pub(crate) fn parts(&self) -> &[(LockKeys, Claim)] {
        self.parts.as_deref().unwrap_or_default()
    }

    /// Nothing of the parts is left on the server (a refused try never queues): dropping it
    /// releases nothing.
    pub(crate) fn forget(&mut self) {
        self.parts = None;
    }

    /// Removes every part's traces now (and those of retired tokens), last part first, the
    /// requests sent together; true when Redis confirmed every release. The parts stay
    /// pending either way (what an attempt made after this leaves is released on drop).
    pub(crate) async fn withdraw(&mut self) -> bool {
        let store = &*self.store;
        let releases = self
            .parts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .chain(&self.retired)
            .rev()
            .map(|(lock, claim)| {
                Box::pin(release_with_retry(store, lock, claim)) as BoxFuture<'_, Result<bool>>
            })
            .collect();
        let done = join_all(releases).await;
        // The retired parts' outcomes come first (the list was reversed).
        let mut confirmed = done.iter().map(Result::is_ok);
        let retired: Vec<bool> = confirmed.by_ref().take(self.retired.len()).collect();
        let parts_done = confirmed.all(|ok| ok);
        let mut keep = retired.iter().rev();
        self.retired
            .retain(|_| !keep.next().copied().unwrap_or(false));
        parts_done && self.retired.is_empty()
    }

    /// Releases the parts of retired tokens in the background (with the usual retries) and
    /// forgets them: the wait does not wait for a server that does not answer. Nothing is
    /// sent when there are none.
    pub(crate) fn release_retired(&mut self) {
        for (lock, claim) in std::mem::take(&mut self.retired).into_iter().rev() {
            remove_in_background(
                &self.holds,
                self.store.clone(),
                lock,
                Leftover::Claim(claim),
            );
        }
    }

    /// Gives every part the new `token` for the attempts to come. Unless `released` (Redis
    /// confirmed the old token's release), the parts under the old token are retired: released
    /// again later. A
    /// request by the old token that reaches the server late (a release retried on another
    /// connection, or sent where an attempt's outcome was unsure) then names no grant of
    /// this acquisition: a late release cannot end a later grant, and a late attempt can
    /// only make a hold nobody renews, which ends with its lease.
    pub(crate) fn retoken(&mut self, token: &str, released: bool) {
        let Some(parts) = self.parts.as_mut() else {
            return;
        };
        for (lock, claim) in parts.iter_mut() {
            if !released {
                self.retired.push((lock.clone(), claim.clone()));
            }
            claim.token = token.to_owned();
        }
    }

    /// [`Pending::withdraw`], waiting at most `bound`, then forgotten if every release was
    /// confirmed: what is not done by then goes on in the background when this is dropped.
    pub(crate) async fn withdraw_within(&mut self, bound: Duration) {
        if let Ok(true) = tokio::time::timeout(bound, self.withdraw()).await {
            self.forget();
        }
    }

    /// The grants the reply to the attempt sent at `sent_at` made to the parts, one fence
    /// per part in part order, as holds trusted from that send.
    pub(crate) fn granted(mut self, fences: &[u64], sent_at: Instant, opts: &Options) -> Vec<Hold> {
        let parts = self.parts.take().unwrap_or_default();
        parts
            .into_iter()
            .zip(fences)
            .map(|((lock, claim), fence)| {
                tracing::debug!(lock = lock.name(), fence, "granted");
                let start = Start::Granted { sent_at };
                Hold::start(self.holds.clone(), lock, claim, *fence, start, opts, false)
            })
            .collect()
    }

    /// The grant a release handed to the (one) part after its attempt sent at `sent_at`,
    /// until `until` (server ms).
    pub(crate) fn handed_over(
        mut self,
        fence: u64,
        (attempt_sent_at, until): (Instant, u64),
        opts: &Options,
    ) -> Option<Hold> {
        let (lock, claim) = self.parts.take()?.into_iter().next()?;
        tracing::debug!(lock = lock.name(), fence, "granted by hand-off");
        let start = Start::HandedOver {
            attempt_sent_at,
            until,
        };
        let holds = self.holds.clone();
        Some(Hold::start(holds, lock, claim, fence, start, opts, false))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let retired = std::mem::take(&mut self.retired);
        let parts = self.parts.take().unwrap_or_default();
        for (lock, claim) in retired.into_iter().chain(parts).rev() {
            remove_in_background(
                &self.holds,
                self.store.clone(),
                lock,
                Leftover::Claim(claim),
            );
        }
    }
}

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future together (their requests leave in list order) until all are done.
pub(crate) async fn join_all<T>(futures: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut futures: Vec<Option<BoxFuture<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot.as_mut() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
