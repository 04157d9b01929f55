//! [`Election`]: leader election for a pool of workers, on the ticket queue.
//!
//! Candidates queue on the name's one-permit ticket queue (the FairLock of that name), so
//! they take over in arrival order and a candidate that died in the queue is skipped after its
//! heartbeat window. The holder leads once it has **proclaimed** a value: one owner-checked
//! step stores the value with the holder's token and fence next to the queue (same hash
//! slot), and publishes `^` on the lock's channel. [`Election::leader`] reads, in one step,
//! the value whose token is the live holder; a value left behind by a leader that is gone is
//! never reported. [`Election::observe`] re-reads on every message of the channel, at the
//! end of the current leader's lease, and at least every retry interval, so a lost message
//! costs latency, never a wrong final answer.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::api::fair_lock::{FairLock, FairLockGuard};
use crate::api::resume::Taken;
use crate::store::{Claim, Store};
use crate::vocab::error::{Error, Result};
use crate::vocab::hold_id::HoldId;
use crate::vocab::keys::LockKeys;

/// Longest value a leader can proclaim, in bytes.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// Added to the current leader's lease left before an observer re-reads the leader: the
/// store's deadline has passed by then.
const LEASE_END_MARGIN: Duration = Duration::from_millis(5);

/// The shortest pause between two reads of an observer, whatever its retry interval.
const MIN_REREAD: Duration = Duration::from_millis(10);

pub use crate::vocab::claim::LeaderInfo;

/// A leader election among the members of a pool: made by
/// [`LockClient::election`](crate::LockClient::election).
///
/// One candidate at a time leads; the others wait in arrival order and the next one takes
/// over when the leader resigns, or within its lease when its process dies. Works on a single
/// server, Sentinel and Redis Cluster; refused in quorum mode
/// ([`Error::Unsupported`](crate::Error::Unsupported)), as the FairLock it is built on.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let election = client.election("scheduler");
/// let leadership = election.campaign("worker-1:9000").await?;
/// // schedule jobs while `leadership.is_held()` ...
/// leadership.resign().await?;
/// assert_eq!(election.leader().await?, None);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    lock: FairLock,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.lock.name())
            .finish()
    }
}

/// Refuses a value over [`MAX_VALUE_LEN`].
fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid(
            "leader value",
            format!(
                "is {} bytes, the limit is {MAX_VALUE_LEN}; proclaim an address or id, not a payload",
                value.len()
            ),
        ));
    }
    Ok(())
}

impl Election {
    pub(crate) fn new(lock: FairLock) -> Self {
        Election { lock }
    }

    /// The election's name.
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// assert_eq!(client.election("scheduler").name(), "scheduler");
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Lease of a leadership (default 30 s), renewed while the [`Leadership`] lives: a leader
    /// whose process dies is replaced within this.
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler").lease(std::time::Duration::from_secs(5));
    /// # drop(election);
    /// ```
    pub fn lease(self, lease: Duration) -> Self {
        Election {
            lock: self.lock.lease(lease),
        }
    }

    /// Heartbeat window of a waiting candidate: one that dies in the queue is skipped after
    /// this (see [`Lock::heartbeat`](crate::Lock::heartbeat)).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler").heartbeat(std::time::Duration::from_secs(2));
    /// # drop(election);
    /// ```
    pub fn heartbeat(self, window: Duration) -> Self {
        Election {
            lock: self.lock.heartbeat(window),
        }
    }

    /// The longest a waiting candidate or an observer goes without asking the store (default
    /// 1 s): what a lost notification costs at most.
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler").retry_interval(std::time::Duration::from_millis(200));
    /// # drop(election);
    /// ```
    pub fn retry_interval(self, interval: Duration) -> Self {
        Election {
            lock: self.lock.retry_interval(interval),
        }
    }

    /// Stands for leader with `value` (an address, a worker id; at most [`MAX_VALUE_LEN`]
    /// bytes): waits in arrival order behind the other candidates, then proclaims `value`
    /// and returns the [`Leadership`]. Bound the wait with [`Campaign::timeout`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let leader = election.campaign("a").await?;
    /// let standby = election.campaign("b").timeout(Duration::from_millis(20)).await;
    /// assert!(standby.unwrap_err().is_timeout());
    /// # drop(leader);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the queue at once, and gives up a leadership
    /// granted meanwhile in the background.
    pub fn campaign(&self, value: impl Into<String>) -> Campaign<'_> {
        Campaign {
            election: self,
            value: value.into(),
            timeout: None,
        }
    }

    /// Leads with `value` only if nobody leads or waits now; a refusal is an error whose
    /// [`is_would_block`](crate::Error::is_would_block) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let leader = election.try_campaign("a").await?;
    /// assert!(election.try_campaign("b").await.unwrap_err().is_would_block());
    /// # drop(leader);
    /// # Ok(()) }
    /// ```
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = value.into();
        check_value(&value)?;
        let guard = self.lock.try_lock().await?;
        Leadership::begin(guard, value).await
    }

    /// The leader now, read from the store in one step: `None` when nobody leads (nobody
    /// holds, or the candidate granted last has not proclaimed yet).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// assert_eq!(election.leader().await?, None);
    /// let _leadership = election.campaign("10.0.0.7:9000").await?;
    /// assert_eq!(election.leader().await?.map(|l| l.value), Some("10.0.0.7:9000".into()));
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        let ctx = &self.lock.ctx;
        ctx.store.leader(ctx.keys()?, None).await
    }

    /// Takes a leadership back from its hold id (from [`Leadership::hold_id`] or
    /// [`Leadership::detach`], in this process or another): one owner-checked renewal of
    /// the leader's lease (see [`Lock::resume`](crate::Lock)), then it leads on with the value
    /// it proclaimed, under the same term. An id whose hold never proclaimed (a FairLock of
    /// the same name) leads with an empty value until [`Leadership::proclaim`].
    /// [`Error::HoldGone`] when the leadership ended meanwhile (its lease lapsed, it resigned,
    /// someone else leads).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let id = election.campaign("10.0.0.7:9000").await?.detach();
    /// // ... a restarted process re-adopts it:
    /// let leadership = election.resume(&id).await?;
    /// assert_eq!((leadership.value(), leadership.term()), ("10.0.0.7:9000", id.fencing_token()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled (or failed after the renewal), the leadership is left as it was: still
    /// leading under its term, its lease perhaps renewed, and no `Leadership` has it. As
    /// for [`Lock::resume`](crate::Lock), a client that already has (or is resuming) a guard
    /// of this leadership is refused with [`Error::HoldInUse`].
    pub async fn resume(&self, id: &HoldId) -> Result<Leadership> {
        // Detached, not released, if an error or a cancel ends the resume before it is done:
        // the leadership is then as it was, with no `Leadership`.
        let guard = Taken::new(self.lock.resume(id).await?);
        let term = guard.get().fencing_token();
        let value = match self.leader().await? {
            Some(info) if info.term == term => info.value,
            _ => {
                // A hold that never proclaimed (a FairLock's id): it leads with no value.
                let (store, keys, claim) = guard.get().hold.step_parts();
                if !proclaim_with_retry(&*store, &keys, &claim, Some("")).await? {
                    return Err(Error::HoldGone {
                        name: id.name().to_owned(),
                    });
                }
                String::new()
            }
        };
        Ok(Leadership {
            guard: Some(guard.keep()),
            value,
        })
    }

    /// Watches the leader: an [`Observer`] that yields who leads now, then every change of
    /// leader or value, as [`LeaderEvent`]s ([`NobodyLeads`](LeaderEvent::NobodyLeads) while
    /// nobody leads). Woken by the store's notifications; it
    /// also re-reads when the current leader's lease ends and at least every retry interval,
    /// so a lost notification delays an answer, never leaves a wrong one. When changes come
    /// faster than they are read, the latest state is yielded (intermediate ones may be
    /// skipped). The watch runs on the current tokio runtime and stops when the observer is
    /// dropped. Outside a runtime, or with an option a campaign would refuse (a zero retry
    /// interval, a bad name), the observer ends at once and [`Observer::closed_because`]
    /// says why. However short the retry interval, an observer pauses at least 10 ms between
    /// reads that no message asked for.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::LeaderEvent;
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let mut observer = election.observe();
    /// assert_eq!(observer.next().await, Some(LeaderEvent::NobodyLeads));
    /// let leadership = election.campaign("a").await?;
    /// let Some(LeaderEvent::Leader(seen)) = observer.next().await else { panic!("a leader") };
    /// assert_eq!((seen.value.as_str(), seen.term), ("a", leadership.term()));
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> Observer {
        let shared = Arc::new(ObserverShared::default());
        let ctx = &self.lock.ctx;
        let runtime = tokio::runtime::Handle::try_current();
        let keys = ctx.opts.validate().and_then(|()| ctx.keys());
        let task = match (keys, runtime) {
            (Ok(keys), Ok(runtime)) => Some(runtime.spawn(watch(
                ctx.store.clone(),
                keys.clone(),
                ctx.opts.retry_interval,
                shared.clone(),
            ))),
            (Err(err), _) => {
                shared.close(err.to_string());
                None
            }
            (_, Err(_)) => {
                shared.close("observe() was called outside a tokio runtime".to_owned());
                None
            }
        };
        Observer {
            shared,
            seen: 0,
            task,
        }
    }
}

/// A campaign for leadership: await it (or call [`timeout`](Campaign::timeout) first). Made
/// by [`Election::campaign`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let election = client.election("scheduler");
/// let campaign = election.campaign("a").timeout(std::time::Duration::from_secs(5));
/// let leadership = campaign.await?;
/// # drop(leadership);
/// # Ok(()) }
/// ```
#[must_use = "a campaign does nothing until it is awaited"]
pub struct Campaign<'a> {
    election: &'a Election,
    value: String,
    timeout: Option<Duration>,
}

impl Campaign<'_> {
    /// Gives up with a timeout error ([`is_timeout`](crate::Error::is_timeout)) if leadership
    /// is not won within `timeout`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let leadership = election.campaign("a").timeout(std::time::Duration::from_secs(1)).await?;
    /// # drop(leadership);
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl fmt::Debug for Campaign<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Campaign")
            .field("name", &self.election.name())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<'a> IntoFuture for Campaign<'a> {
    type Output = Result<Leadership>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Leadership>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            check_value(&self.value)?;
            let mut acquiring = self.election.lock.lock();
            if let Some(timeout) = self.timeout {
                acquiring = acquiring.timeout(timeout);
            }
            let guard = acquiring.await?;
            Leadership::begin(guard, self.value).await
        })
    }
}

/// Proof of leading an election: a [`FairLockGuard`] on the election's name, renewed in the
/// background while it lives, with the value it proclaimed. Dropping it resigns in the
/// background.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let election = client.election("scheduler");
/// let mut leadership = election.campaign("a").await?;
/// assert!(leadership.is_held());
/// leadership.proclaim("a, now on port 9001").await?;
/// assert_eq!(election.leader().await?.unwrap().value, "a, now on port 9001");
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the leadership resigns in the background; keep it while you lead"]
pub struct Leadership {
    guard: Option<FairLockGuard>,
    value: String,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("guard", &self.guard)
            .field("value", &self.value)
            .finish()
    }
}

/// Sets (`Some`) or retracts (`None`) the leader's value, retrying a lost reply a few times
/// (the step is idempotent).
async fn proclaim_with_retry(
    store: &dyn Store,
    keys: &LockKeys,
    claim: &Claim,
    value: Option<&str>,
) -> Result<bool> {
    crate::engine::lease::retrying(|| store.proclaim(keys, claim, value, None))
        .await
        .0
}

impl Leadership {
    /// Proclaims `value` for a freshly granted `guard`.
    async fn begin(guard: FairLockGuard, value: String) -> Result<Leadership> {
        let (store, keys, claim) = guard.hold.step_parts();
        match proclaim_with_retry(&*store, &keys, &claim, Some(&value)).await {
            Ok(true) => Ok(Leadership {
                guard: Some(guard),
                value,
            }),
            Ok(false) => {
                let name = guard.name().to_owned();
                let _ = guard.release().await;
                Err(Error::LeaseLost { name })
            }
            Err(err) => {
                // Not leading without a value: give the grant up before answering (a
                // release that fails too leaves the lease to lapse on its own).
                let _ = guard.release().await;
                Err(err)
            }
        }
    }

    fn guard(&self) -> &FairLockGuard {
        self.guard
            .as_ref()
            .expect("a leadership keeps its guard until it is consumed")
    }

    /// The term: this leadership's fencing token, strictly greater than every earlier
    /// leader's of this election. Pass it to what the leader writes, so a deposed leader's
    /// late writes can be refused.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let first = election.campaign("a").await?;
    /// let term = first.term();
    /// first.resign().await?;
    /// assert!(election.campaign("b").await?.term() > term);
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        self.guard().fencing_token()
    }

    /// The id of this leadership's hold, for [`Election::resume`] elsewhere; this leadership
    /// goes on (resuming the id while it lives gives two leaderships of one term, as for
    /// [`Guard::hold_id`](crate::Guard::hold_id)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let leadership = client.election("scheduler").campaign("a").await?;
    /// assert_eq!(leadership.hold_id().fencing_token(), leadership.term());
    /// # Ok(()) }
    /// ```
    pub fn hold_id(&self) -> HoldId {
        self.guard().hold_id()
    }

    /// Gives this leadership up *without* resigning: renewals stop, the value stays
    /// proclaimed and the lease runs on, for [`Election::resume`] to take it back (a process
    /// restarting in place). If nobody does, another candidate leads once the lease lapses.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let id = election.campaign("a").await?.detach();
    /// assert_eq!(election.leader().await?.map(|l| l.value), Some("a".into()));
    /// # let _ = id;
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> HoldId {
        let guard = self
            .guard
            .take()
            .expect("a leadership keeps its guard until it is consumed");
        guard.detach()
    }

    /// The value proclaimed last.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let leadership = client.election("scheduler").campaign("a").await?;
    /// assert_eq!(leadership.value(), "a");
    /// # Ok(()) }
    /// ```
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The election's name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// assert_eq!(client.election("scheduler").campaign("a").await?.name(), "scheduler");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.guard().name()
    }

    /// True while the leadership can be trusted, from the local clock (see
    /// [`Guard::is_held`](crate::Guard::is_held)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// assert!(client.election("scheduler").campaign("a").await?.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.guard().is_held()
    }

    /// The instant (local monotonic clock) until which the leadership is trusted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let leadership = client.election("scheduler").campaign("a").await?;
    /// assert!(leadership.valid_until() > tokio::time::Instant::now());
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.guard().valid_until()
    }

    /// Resolves when the leadership can no longer be trusted (a renewal refused, or none
    /// confirmed in time): stop acting as leader then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let leadership = client.election("scheduler").campaign("a").await?;
    /// tokio::select! {
    ///     _ = leadership.lost() => println!("deposed; stop scheduling"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(5)) => println!("scheduled"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.guard().lost().await
    }

    /// Replaces the value observers see (at most [`MAX_VALUE_LEN`] bytes), in one step that
    /// checks this leadership still holds. [`Error::LeaseLost`](crate::Error::LeaseLost) if it
    /// no longer does: nothing changed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let mut leadership = client.election("scheduler").campaign("a").await?;
    /// leadership.proclaim("a (draining)").await?;
    /// assert_eq!(leadership.value(), "a (draining)");
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled after the request left, the new value may or may not be set; `value()`
    /// keeps the old one.
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        check_value(&value)?;
        let guard = self.guard();
        let lost = || Error::LeaseLost {
            name: guard.name().to_owned(),
        };
        if !guard.is_held() {
            return Err(lost());
        }
        let (store, keys, claim) = guard.hold.step_parts();
        if !proclaim_with_retry(&*store, &keys, &claim, Some(&value)).await? {
            return Err(lost());
        }
        self.value = value;
        Ok(())
    }

    /// Steps down: retracts the value (observers see `None` at once) and releases the
    /// leadership, so the next candidate takes over. `Ok(true)` if this leadership still held
    /// until then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let election = client.election("scheduler");
    /// let leadership = election.campaign("a").await?;
    /// assert!(leadership.resign().await?);
    /// assert_eq!(election.leader().await?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled, the leadership is given up in the background.
    pub async fn resign(mut self) -> Result<bool> {
        let Some(guard) = self.guard.take() else {
            return Ok(false);
        };
        let (store, keys, claim) = guard.hold.step_parts();
        // A failed retract leaves a value whose token no longer holds once the release
        // below is through: never reported.
        let _ = proclaim_with_retry(&*store, &keys, &claim, None).await;
        guard.release().await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        // Resign in the background: retract first, so observers learn at once; the guard's
        // own drop then releases.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let (store, keys, claim) = guard.hold.step_parts();
                let _ = proclaim_with_retry(&*store, &keys, &claim, None).await;
                drop(guard);
            });
        }
    }
}

/// What an observer's watch task shares with it.
#[derive(Default)]
struct ObserverShared {
    state: StdMutex<ObserverState>,
}

#[derive(Default)]
struct ObserverState {
    /// Bumped at every change published.
    version: u64,
    current: Option<LeaderInfo>,
    /// Why the watch stopped (a permanent error), if it did.
    closed: Option<String>,
    waker: Option<Waker>,
}

impl ObserverShared {
    fn state(&self) -> std::sync::MutexGuard<'_, ObserverState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, leader: Option<LeaderInfo>) {
        let mut st = self.state();
        st.version += 1;
        st.current = leader;
        if let Some(waker) = st.waker.take() {
            waker.wake();
        }
    }

    fn close(&self, reason: String) {
        let mut st = self.state();
        st.closed = Some(reason);
        if let Some(waker) = st.waker.take() {
            waker.wake();
        }
    }
}

/// The watch behind an [`Observer`]: registers for the lock's notifications first (so none
/// is missed between a read and the wait), then reads the leader, publishes it if it changed,
/// and waits for a notification, the current leader's lease end or the retry interval.
async fn watch(
    store: Arc<dyn Store>,
    keys: LockKeys,
    interval: Duration,
    shared: Arc<ObserverShared>,
) {
    let mut registration = store.hub().register_observer(&keys.channel());
    registration
        .subscribed(crate::vocab::options::later(
            tokio::time::Instant::now(),
            interval,
        ))
        .await;
    let mut last: Option<Option<(u64, String)>> = None;
    let mut backoff = crate::engine::wait::FIRST_BACKOFF;
    loop {
        let wait = match store.leader(&keys, None).await {
            Ok(leader) => {
                backoff = crate::engine::wait::FIRST_BACKOFF;
                let seen = leader.as_ref().map(|l| (l.term, l.value.clone()));
                let wait = match &leader {
                    Some(l) => (l.time_left + LEASE_END_MARGIN).min(interval),
                    None => interval,
                };
                if last.as_ref() != Some(&seen) {
                    last = Some(seen);
                    shared.publish(leader);
                }
                wait
            }
            Err(err @ (Error::Unsupported { .. } | Error::InvalidName { .. })) => {
                // Permanent: no read will ever succeed.
                shared.close(err.to_string());
                return;
            }
            Err(err) => {
                tracing::debug!(election = %keys.name(), %err, "reading the leader failed; retrying");
                let wait = backoff.min(interval);
                backoff = (backoff * 2).min(interval);
                wait
            }
        };
        tokio::select! {
            _ = registration.notified() => {}
            _ = tokio::time::sleep(crate::engine::wait::jitter(wait).max(MIN_REREAD)) => {}
        }
    }
}

/// What an [`Observer`] yields: the election's leader, or that nobody leads.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::LeaderEvent;
/// let client = redis_locks::LockClient::in_memory();
/// let election = client.election("scheduler");
/// let mut observer = election.observe();
/// let _leadership = election.campaign("worker-1").await?;
/// while let Some(event) = observer.next().await {
///     match event {
///         LeaderEvent::Leader(leader) => {
///             println!("{} leads (term {})", leader.value, leader.term);
///             break;
///         }
///         LeaderEvent::NobodyLeads => println!("nobody leads"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderEvent {
    /// This member leads (its value, term and lease left).
    Leader(LeaderInfo),
    /// Nobody leads: no campaign holds the election now.
    NobodyLeads,
}

impl LeaderEvent {
    /// The leader, if somebody leads.
    ///
    /// ```
    /// assert!(redis_locks::LeaderEvent::NobodyLeads.leader().is_none());
    /// ```
    pub fn leader(&self) -> Option<&LeaderInfo> {
        match self {
            LeaderEvent::Leader(leader) => Some(leader),
            LeaderEvent::NobodyLeads => None,
        }
    }

    /// The leader, if somebody leads, by value.
    ///
    /// ```
    /// assert_eq!(redis_locks::LeaderEvent::NobodyLeads.into_leader(), None);
    /// ```
    pub fn into_leader(self) -> Option<LeaderInfo> {
        match self {
            LeaderEvent::Leader(leader) => Some(leader),
            LeaderEvent::NobodyLeads => None,
        }
    }
}

impl From<Option<LeaderInfo>> for LeaderEvent {
    fn from(leader: Option<LeaderInfo>) -> Self {
        leader.map_or(LeaderEvent::NobodyLeads, LeaderEvent::Leader)
    }
}

/// Watches an election's leader: made by [`Election::observe`]. A
/// [`Stream`](futures_core::Stream) of [`LeaderEvent`]s (who leads now, then every change),
/// also readable with [`next`](Observer::next) without a stream library.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let election = client.election("scheduler");
/// let mut observer = election.observe();
/// let first = election.campaign("a").await?;
/// // The first item is the state when the watch first read it; skip to "a".
/// while observer.next().await.and_then(|e| e.into_leader()).map(|l| l.value) != Some("a".into()) {}
/// first.resign().await?;
/// assert_eq!(observer.next().await, Some(redis_locks::LeaderEvent::NobodyLeads));
/// # Ok(()) }
/// ```
pub struct Observer {
    shared: Arc<ObserverShared>,
    seen: u64,
    /// The watch; `None` when it never started (see `closed_because`).
    task: Option<tokio::task::JoinHandle<()>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.state();
        f.debug_struct("Observer")
            .field("current", &st.current)
            .field("closed", &st.closed)
            .finish()
    }
}

impl Observer {
    /// The next state: `Some(event)` (who leads now at the first call, then at each change),
    /// `None` once the watch stopped for good (the store does not support elections, the name
    /// is invalid: see [`closed_because`](Observer::closed_because)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::LeaderEvent;
    /// let client = redis_locks::LockClient::in_memory();
    /// let mut observer = client.election("scheduler").observe();
    /// assert_eq!(observer.next().await, Some(LeaderEvent::NobodyLeads));
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet returned is returned by the next call.
    pub async fn next(&mut self) -> Option<LeaderEvent> {
        std::future::poll_fn(|cx| self.poll_change(cx)).await
    }

    /// Why the watch stopped, if it did.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let mut observer = client.election("").observe(); // an invalid name
    /// assert_eq!(observer.next().await, None);
    /// assert!(observer.closed_because().is_some());
    /// # Ok(()) }
    /// ```
    pub fn closed_because(&self) -> Option<String> {
        self.shared.state().closed.clone()
    }

    fn poll_change(&mut self, cx: &mut Context<'_>) -> Poll<Option<LeaderEvent>> {
        let mut st = self.shared.state();
        if st.version > self.seen {
            self.seen = st.version;
            return Poll::Ready(Some(st.current.clone().into()));
        }
        if st.closed.is_some() || self.task.as_ref().is_none_or(|t| t.is_finished()) {
            return Poll::Ready(None);
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl futures_core::Stream for Observer {
    type Item = LeaderEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_change(cx)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
