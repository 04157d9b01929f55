//! [`QuorumStore`]: the lease lock (Mutex, RwLock writer/reader preference) over N independent
//! Redis servers, granted by a majority (the Redlock scheme).
//!
//! # How a step runs
//! - **acquire**: sent to every server in parallel with the same token. Granted when a
//!   majority (`N/2 + 1`) granted and the time spent is less than `lease - drift` (drift =
//!   1% of the lease + 2 ms), so that the lease is still valid everywhere that counts when the
//!   caller gets it. Otherwise the claim is released by token on every server that granted
//!   (or did not answer), and the attempt is refused (`Busy`), or fails with
//!   [`Error::QuorumNotReached`] when so many servers failed to answer that a majority was
//!   impossible.
//! - **extend** and **release**: sent to all; a renewal counts when a majority renewed, a
//!   release reports `true` when a majority still held the lease.
//! - **downgrade**: succeeds when a majority downgraded.
//! - **inspect**: asked of every server; shows what a majority agrees on (holders and waiters
//!   that a majority of the servers report, the largest fence), so a hold that only a
//!   minority still records, after a split vote or a restart, is not shown. Needs a majority
//!   to answer.
//! - **force_release**: on all; needs a majority to answer.
//!
//! # Fencing tokens under quorum
//! Each server keeps its own fence counter. A grant's fencing token is the largest of the
//! fences reported by the servers that granted it. After an exclusive grant, every server
//! that did not report that value (it refused, did not answer, or had a lower counter) has its
//! counter raised to it, so afterwards every reachable server is at or above it. The next
//! exclusive grant needs a majority, which then contains a server whose counter is at least
//! the previous token, so its token is strictly greater.
//!
//! That argument holds while, between two consecutive exclusive grants, **at most a minority
//! of the servers lose or miss their counter**: a server restarted without persistence, one
//! failed over to a replica that had not received the last increments, or one that was
//! unreachable when the counter was raised. The maximum over a majority masks such a minority.
//! Every server's fence is also at least its clock in microseconds (`next_fence`), so when a
//! majority lose their counters tokens still rise, under the clock assumption of
//! docs/GUARANTEES.md; and the servers' fences of one grant differ by their clock offsets, so
//! the raise runs on nearly every exclusive grant. A raised counter lives for the grant's lease.
//! Shared (reader) grants report the largest last-writer fence among the servers that granted.
//!
//! # Not supported
//! The ticket queue (FairLock, Semaphore, RwLock with `Preference::Fair`) is refused with
//! [`Error::Unsupported`] on every call: queues on independent servers can disagree on the
//! order, so neither FIFO nor a permit count could be promised.
//!
//! # Wake-ups
//! One hub for the quorum: a waiter subscribes to its lock's channel on every server, and a
//! release published by any of them wakes it. A subscription a down server missed is made
//! there with the client's next (un)subscription once the server is back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::redis::{parse_url, Connect, RedisConfig, RedisStore};

/// How long a fence counter raised after a forced release lives at least on a server that
/// lagged: no hold follows that fence, and every later grant's is above the clock anyway.
const FORCED_FENCE_KEEP: Duration = Duration::from_secs(60);
use super::WaiterState;
use super::{
    Acquire, Busy, Claim, Family, Grant, HolderState, PermitChange, Slot, Snapshot, Store,
};
use crate::store::hub::{Subscriber, WakeHub};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;
use crate::vocab::options::Options;

const UNSUPPORTED_WHAT: &str =
    "the ticket queue (FairLock, Semaphore, RwLock with Preference::Fair)";
const UNSUPPORTED_WHY: &str =
    "quorum mode: queues on independent servers can disagree on the order; use Mutex or RwLock with the writer or reader preference";

/// The lease lock over N independent Redis servers; see the module docs.
#[derive(Debug)]
pub struct QuorumStore {
    nodes: Vec<RedisStore>,
    hub: Arc<WakeHub>,
}

/// Subscribes a channel on every server of the quorum. A subscription a server could not take
/// (it was down) is remembered and tried again on that server with every later
/// (un)subscription, so a server that comes back delivers wake-ups again. Its
/// (un)subscriptions run one at a time, in the order asked (the catch-up list is shared).
struct FanOut(tokio::sync::Mutex<FanOutState>);

struct FanOutState {
    subs: Vec<Box<dyn Subscriber>>,
    /// Per server: channels wanted there that it has not confirmed.
    missing: Vec<std::collections::BTreeSet<String>>,
}

impl FanOut {
    fn new(subs: Vec<Box<dyn Subscriber>>) -> Self {
        let missing = subs.iter().map(|_| Default::default()).collect();
        FanOut(tokio::sync::Mutex::new(FanOutState { subs, missing }))
    }
}

impl FanOutState {
    /// Succeeds when at least one server took the (un)subscription: a waiter then hears a
    /// release from that one, and otherwise polls.
    async fn fan_out(&mut self, channel: &str, subscribe: bool) -> redis::RedisResult<()> {
        let mut last_err = None;
        let mut any_ok = false;
        for (sub, missing) in self.subs.iter_mut().zip(self.missing.iter_mut()) {
            if !subscribe {
                missing.remove(channel);
            }
            // Catch up on what this server missed while it was unreachable.
            let pending: Vec<String> = missing.iter().cloned().collect();
            for wanted in pending {
                if sub.subscribe(&wanted).await.is_err() {
                    break; // still down: try again next time
                }
                missing.remove(&wanted);
            }
            let result = if subscribe {
                sub.subscribe(channel).await
            } else {
                sub.unsubscribe(channel).await
            };
            match result {
                Ok(()) => any_ok = true,
                Err(e) => {
                    if subscribe {
                        missing.insert(channel.to_owned());
                    }
                    last_err = Some(e);
                }
            }
        }
        match last_err {
            Some(e) if !any_ok => Err(e),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Subscriber for FanOut {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.0.lock().await.fan_out(channel, true).await
    }
    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.0.lock().await.fan_out(channel, false).await
    }
}

fn unsupported() -> Error {
    Error::Unsupported {
        what: UNSUPPORTED_WHAT,
        reason: UNSUPPORTED_WHY,
    }
}

fn reject_ticket(claim: &Claim) -> Result<()> {
    match claim.slot {
        Slot::Ticket { .. } => Err(unsupported()),
        Slot::Write | Slot::Read => Ok(()),
    }
}

fn join_failed() -> Error {
    Error::connection(
        "reach a quorum node",
        "",
        std::io::Error::other("quorum node task failed"),
    )
}

/// What to report when too few servers answered: a non-connection error if one occurred
/// (it is the likelier cause), otherwise [`Error::QuorumNotReached`].
fn no_majority<T>(results: Vec<Result<T>>, granted: usize, required: usize) -> Error {
    for r in results {
        if let Err(e) = r
            && !e.is_connection()
        {
            return e;
        }
    }
    Error::QuorumNotReached { granted, required }
}

impl QuorumStore {
    /// Connects to the servers (`redis://` URLs of independent servers, not replicas of one
    /// another; an odd number, 3 or 5, is the useful choice). A majority must answer now, as
    /// for every later step; the others may be down: each is tried again by every step, and
    /// a server that comes back takes part from then on.
    ///
    /// Fails with [`Error::QuorumNotReached`] when fewer than a majority answer (or with the
    /// error a server gave, such as a refused password), with an invalid-input error on a bad
    /// URL.
    ///
    /// Every server that answers is checked ([`Store::check_server`], on the keys of `probe`,
    /// a lock under the client's prefix): one the scripts cannot run on refuses the quorum.
    pub async fn connect(urls: &[&str], config: RedisConfig, probe: &LockKeys) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::invalid(
                "quorum",
                "give at least one server URL (3 or 5 independent servers is the useful choice)",
            ));
        }
        let hub = WakeHub::remote();
        let mut nodes = Vec::with_capacity(urls.len());
        let mut subscribers = Vec::with_capacity(urls.len());
        for url in urls {
            // No reconnect retries inside a step: a server that is down must fail fast, or
            // every step waits for it although a majority has already answered.
            let config = RedisConfig {
                reconnect_retries: 0,
                ..config.clone()
            };
            let (store, sub) =
                RedisStore::connect_to_hub(parse_url(url)?, config, hub.clone(), Connect::Lazily)
                    .await?;
            nodes.push(store.without_hand_over());
            subscribers.push(sub);
        }
        let quorum = QuorumStore {
            nodes,
            hub: hub.clone(),
        };
        // Every server that answers must be one the scripts run on (a quorum with an old
        // server is misconfigured, even if a majority of the others would do).
        let mut pings = quorum
            .on_all(|node| {
                let probe = probe.clone();
                async move { node.check_server(&probe).await }
            })
            .await;
        if let Some(i) = pings
            .iter()
            .position(|r| matches!(r, Err(Error::UnsupportedServer { .. })))
        {
            pings.swap_remove(i)?;
        }
        let answered = pings.iter().filter(|r| r.is_ok()).count();
        let required = quorum.required();
        if answered < required {
            return Err(no_majority(pings, answered, required));
        }
        for (i, ping) in pings.iter().enumerate() {
            if let Err(err) = ping {
                // By position: a URL may carry a password.
                tracing::warn!(server = i, %err, "quorum server down at connect; every step tries it again");
            }
        }
        hub.start(Box::new(FanOut::new(subscribers)));
        Ok(quorum)
    }

    /// Servers in the quorum.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true: a quorum has at least one server.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Servers that must agree: a majority, `N/2 + 1`.
    pub fn required(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs `step` on every server in parallel; results in server order.
    async fn on_all<T, F, Fut>(&self, step: F) -> Vec<Result<T>>
    where
        F: Fn(RedisStore) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let mut set = JoinSet::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let fut = step(node.clone());
            set.spawn(async move { (i, fut.await) });
        }
        let mut out: Vec<Option<Result<T>>> = (0..self.nodes.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            if let Ok((i, result)) = joined {
                out[i] = Some(result);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(join_failed())))
            .collect()
    }

    /// Releases `claim` on the servers `which`, ignoring failures (those leases lapse).
    async fn release_on(&self, lock: &LockKeys, claim: &Claim, which: &[bool]) {
        let mut set = JoinSet::new();
        for (node, _) in self.nodes.iter().zip(which).filter(|(_, w)| **w) {
            let (node, lock, claim) = (node.clone(), lock.clone(), claim.clone());
            set.spawn(async move { node.release(&lock, &claim, None).await });
        }
        while set.join_next().await.is_some() {}
    }

    /// Raises the fence counter of the servers `which` to at least `fence`.
    async fn raise_fence(&self, lock: &LockKeys, fence: u64, keep: Duration, which: &[bool]) {
        let mut set = JoinSet::new();
        for (node, _) in self.nodes.iter().zip(which).filter(|(_, w)| **w) {
            let node = node.clone();
            let lock = lock.clone();
            set.spawn(async move { node.raise_fence(&lock, fence, keep).await });
        }
        while let Some(joined) = set.join_next().await {
            if let Ok(Err(err)) = joined {
                // The next grant on that server could hand out a fence the majority already
                // used: fenced resources refuse it, but it is worth an operator's look.
                tracing::warn!(lock = lock.name(), %err, "could not raise a lagging server's fence counter");
            }
        }
    }
}

/// What a majority of the servers agree on: the holders and waiters that at least `required`
/// of the snapshots show (by token and kind), each with the least time left among them, and
/// the largest fence. The clock is the first snapshot's.
/// The fence a majority of the servers report (the one the granting majority was raised
/// to), so a minority server that restarted empty, was raised by a contender, or ran an
/// acquire late does not stand for the quorum; the largest when no value has a majority.
fn majority_fence(snapshots: &[Snapshot], required: usize) -> u64 {
    let count = |fence: u64| snapshots.iter().filter(|s| s.fence == fence).count();
    snapshots
        .iter()
        .map(|s| s.fence)
        .find(|f| count(*f) >= required)
        .or_else(|| snapshots.iter().map(|s| s.fence).max())
        .unwrap_or(0)
}

fn majority_view(snapshots: &[Snapshot], required: usize) -> Snapshot {
    let mut holders: Vec<(HolderState, usize)> = Vec::new();
    let mut waiters: Vec<(WaiterState, usize)> = Vec::new();
    for snapshot in snapshots {
        for h in &snapshot.holders {
            match holders
                .iter_mut()
                .find(|(seen, _)| seen.token == h.token && seen.kind == h.kind)
            {
                Some((seen, n)) => {
                    seen.remaining_ms = seen.remaining_ms.min(h.remaining_ms);
                    *n += 1;
                }
                None => holders.push((h.clone(), 1)),
            }
        }
        for w in &snapshot.waiters {
            match waiters.iter_mut().find(|(seen, _)| seen.token == w.token) {
                Some((seen, n)) => {
                    seen.heartbeat_remaining_ms =
                        seen.heartbeat_remaining_ms.min(w.heartbeat_remaining_ms);
                    *n += 1;
                }
                None => waiters.push((w.clone(), 1)),
            }
        }
    }
    Snapshot {
        now_ms: snapshots.first().map_or(0, |s| s.now_ms),
        fence: majority_fence(snapshots, required),
        permits: None,
        // Only the lease lock runs in quorum mode.
        foreign_capacity: false,
        holders: holders
            .into_iter()
            .filter(|(_, n)| *n >= required)
            .map(|(h, _)| h)
            .collect(),
        waiters: waiters
            .into_iter()
            .filter(|(_, n)| *n >= required)
            .map(|(w, _)| w)
            .collect(),
    }
}

/// A short random pause after a split vote, so contenders woken together spread out.
async fn split_vote_pause() {
    let r = (uuid::Uuid::new_v4().as_u128() % 20) as u64;
    tokio::time::sleep(Duration::from_millis(1 + r)).await;
}

impl QuorumStore {
    /// `renew` on every server: renewed once a majority renewed.
    async fn renew_on_all(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
    ) -> Result<bool> {
        reject_ticket(claim)?;
        let results = self
            .on_all(|node| {
                let (lock, claim) = (lock.clone(), claim.clone());
                // Quorum mode never hands a lock over: no renewal is a claim.
                async move { node.renew(&lock, &claim, lease, None, now).await }
            })
            .await;
        let renewed = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let unknown = results.iter().filter(|r| r.is_err()).count();
        let required = self.required();
        if renewed >= required {
            // The holder trusts it from the send of the request, minus drift (lease.rs).
            return Ok(true);
        }
        if renewed + unknown >= required {
            return Err(no_majority(results, renewed, required));
        }
        Ok(false)
    }
}

#[async_trait]
impl Store for QuorumStore {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<Acquire> {
        reject_ticket(claim)?;
        let started = Instant::now();
        let results = self
            .on_all(|node| {
                let (lock, claim) = (lock.clone(), claim.clone());
                async move { node.acquire(&lock, &claim, wait, now).await }
            })
            .await;
        let elapsed = started.elapsed();
        let required = self.required();
        let mut granted = 0;
        let mut fence = 0;
        let mut retry_after: Option<Duration> = None;
        let mut unsure = Vec::with_capacity(results.len());
        let mut answered = 0;
        for r in &results {
            match r {
                Ok(Acquire::Granted(g)) => {
                    granted += 1;
                    answered += 1;
                    fence = fence.max(g.fence);
                    unsure.push(true);
                }
                Ok(Acquire::Busy(b)) => {
                    answered += 1;
                    if let Some(hint) = b.retry_after {
                        retry_after = Some(retry_after.map_or(hint, |r: Duration| r.min(hint)));
                    }
                    unsure.push(false);
                }
                // Unknown outcome: it may have granted.
                Err(_) => unsure.push(true),
            }
        }
        let in_time = elapsed + Options::drift(claim.lease) < claim.lease;
        if granted >= required && in_time {
            if claim.slot.is_exclusive() {
                // Every server not known to be at `fence` is raised to it (see module docs).
                let behind: Vec<bool> = results
                    .iter()
                    .map(|r| !matches!(r, Ok(Acquire::Granted(g)) if g.fence == fence))
                    .collect();
                if behind.iter().any(|b| *b) {
                    self.raise_fence(lock, fence, claim.lease, &behind).await;
                }
            }
            tracing::debug!(lock = lock.name(), granted, fence, "quorum granted");
            return Ok(Acquire::Granted(Grant {
                fence,
                lease: claim.lease,
            }));
        }
        let token_released = unsure.iter().any(|u| *u);
        if token_released {
            self.release_on(lock, claim, &unsure).await;
        }
        if answered < required {
            return Err(no_majority(results, granted, required));
        }
        if granted > 0 && wait {
            split_vote_pause().await;
        }
        // Quorum mode never hands a lock over, so no wake-up carries a grant to match.
        Ok(Acquire::Busy(Busy {
            retry_after,
            position: None,
            heartbeat_until: None,
            token_released,
        }))
    }

    fn releases_where_unsure(&self) -> bool {
        true
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, now: Option<u64>) -> Result<bool> {
        reject_ticket(claim)?;
        let results = self
            .on_all(|node| {
                let (lock, claim) = (lock.clone(), claim.clone());
                async move { node.release(&lock, &claim, now).await }
            })
            .await;
        let held = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let answered = results.iter().filter(|r| r.is_ok()).count();
        let required = self.required();
        if held >= required {
            return Ok(true);
        }
        let unknown = results.len() - answered;
        if held + unknown >= required {
            // The servers that did not answer might have made a majority that held.
            return Err(no_majority(results, held, required));
        }
        Ok(false)
    }

    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        _handed_until: Option<u64>,
        now: Option<u64>,
    ) -> Result<bool> {
        self.renew_on_all(lock, claim, lease, now).await
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<Option<u64>> {
        reject_ticket(claim)?;
        let results = self
            .on_all(|node| {
                let (lock, claim) = (lock.clone(), claim.clone());
                async move { node.downgrade(&lock, &claim, now).await }
            })
            .await;
        let done: Vec<u64> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied().flatten())
            .collect();
        let unknown = results.iter().filter(|r| r.is_err()).count();
        let required = self.required();
        if done.len() >= required {
            return Ok(done.iter().copied().max());
        }
        if done.len() + unknown >= required {
            return Err(no_majority(results, done.len(), required));
        }
        Ok(None)
    }

    async fn inspect(&self, lock: &LockKeys, family: Family, now: Option<u64>) -> Result<Snapshot> {
        if family == Family::TicketQueue {
            return Err(unsupported());
        }
        let results = self
            .on_all(|node| {
                let lock = lock.clone();
                async move { node.inspect(&lock, family, now).await }
            })
            .await;
        let required = self.required();
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if answered < required {
            return Err(no_majority(results, answered, required));
        }
        let snapshots: Vec<Snapshot> = results.into_iter().flatten().collect();
        Ok(majority_view(&snapshots, required))
    }

    async fn set_permits(
        &self,
        _lock: &LockKeys,
        _change: PermitChange,
        _heartbeat: Duration,
        _now: Option<u64>,
    ) -> Result<u32> {
        Err(unsupported())
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> Result<u64> {
        let results = self
            .on_all(|node| {
                let lock = lock.clone();
                async move { node.force_release(&lock, now).await }
            })
            .await;
        let fences: Vec<u64> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        let required = self.required();
        let Some(fence) = fences
            .iter()
            .copied()
            .max()
            .filter(|_| fences.len() >= required)
        else {
            return Err(no_majority(results, fences.len(), required));
        };
        let behind: Vec<bool> = results
            .iter()
            .map(|r| !matches!(r, Ok(f) if *f == fence))
            .collect();
        if behind.iter().any(|b| *b) {
            self.raise_fence(lock, fence, FORCED_FENCE_KEEP, &behind)
                .await;
        }
        Ok(fence)
    }

    /// Every server that answers must have what the scripts need; a server that is down is
    /// left out (as at connect: one that joins later is not checked).
    async fn check_server(&self, probe: &LockKeys) -> Result<()> {
        let checks = self
            .on_all(|node| {
                let probe = probe.clone();
                async move { node.check_server(&probe).await }
            })
            .await;
        match checks
            .into_iter()
            .find(|r| matches!(r, Err(Error::UnsupportedServer { .. })))
        {
            Some(refused) => refused,
            None => Ok(()),
        }
    }

    /// Every server's that answered (a server that is down is left out; the doctor reports the
    /// servers it heard from); the first error when none answered.
    async fn server_info(&self) -> Result<Vec<(String, String)>> {
        let results = self
            .on_all(|node| async move { node.server_info().await })
            .await;
        let mut out = Vec::new();
        let mut first_error = None;
        for result in results {
            match result {
                Ok(infos) => out.extend(infos),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        match (out.is_empty(), first_error) {
            (true, Some(e)) => Err(e),
            _ => Ok(out),
        }
    }

    fn hub(&self) -> &Arc<WakeHub> {
        &self.hub
    }

    /// Every server gets a connection of its own for the lock engine, as a single server's
    /// store does.
    fn for_engine(&self) -> Option<Arc<dyn Store>> {
        let nodes = self
            .nodes
            .iter()
            .map(RedisStore::engine_copy)
            .collect::<Option<_>>()?;
        Some(Arc::new(QuorumStore {
            nodes,
            hub: self.hub.clone(),
        }))
    }
}
