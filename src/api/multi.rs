//! [`MultiLock`]: several lock names taken together, all or none, without deadlocks.
//!
//! The parts are kept in one canonical order (by name; on Redis Cluster by hash slot, then by
//! name), so every multi-lock over overlapping names takes them in the same order. One store step
//! (`multi_acquire.lua`) grants every part of one slot or none; on a single server that is
//! every part, in one round trip. On Redis Cluster the slots are taken one after the other in
//! slot order, holding the earlier ones while waiting for a later one: since every waiter
//! waits only on a slot after every slot it holds, no cycle of waiters can form.
//!
//! A refused attempt holds nothing of its slot (the step is atomic) and waits for the first
//! busy part's wake-ups, its lease's end or the retry interval, then attempts the whole slot
//! again. It never queues or announces itself, so it holds back no reader while it waits.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::rwlock::Preference;
use crate::engine::lease::Hold;
use crate::engine::pending::{join_all, BoxFuture, Pending};
use crate::engine::wait::{pursue, Deadline, LockCtx, Pursuit, Step, Waiting};
use crate::store::Busy;
use crate::store::{AcquireAll, Claim, Part, Policy, Request, Slot};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::{hash_slot, LockKeys};
use crate::wire::HandOff;

/// The most names one multi-lock takes.
pub const MAX_MULTI_NAMES: usize = 64;

/// A handle on several lock names taken together: every one or none, in one canonical order,
/// so two multi-locks over overlapping names never deadlock, whatever order their names were
/// given in. Made by [`LockClient::multi_lock`](crate::LockClient::multi_lock) (every name
/// exclusive, as a [`Mutex`](crate::Mutex)) or
/// [`LockClient::multi_rwlock`](crate::LockClient::multi_rwlock) (some names read, some
/// written, as an [`RwLock`](crate::RwLock)).
///
/// A part is the same lock as the single-name handle of that name: a multi-lock over `a` and
/// `b` excludes `client.mutex("a")` and `client.rwlock("b").write()`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let both = client.multi_lock(["warehouse:berlin", "warehouse:lyon"]);
/// let guard = both.lock().await?;
/// assert!(guard.is_held());
/// assert!(client.mutex("warehouse:lyon").try_lock().await.unwrap_err().is_would_block());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    pub(crate) ctx: LockCtx,
    pub(crate) parts: std::result::Result<Arc<[Part]>, Arc<Error>>,
    pub(crate) preference: Preference,
}

impl MultiLock {
    /// `reads` shared and `writes` exclusive, validated and put in canonical order.
    pub(crate) fn new<'n>(
        ctx: LockCtx,
        prefix: &str,
        reads: impl IntoIterator<Item = &'n str>,
        writes: impl IntoIterator<Item = &'n str>,
    ) -> Self {
        let parts = Self::parts_of(prefix, reads, writes).map_err(Arc::new);
        MultiLock {
            ctx,
            parts,
            preference: Preference::Writer,
        }
    }

    fn parts_of<'n>(
        prefix: &str,
        reads: impl IntoIterator<Item = &'n str>,
        writes: impl IntoIterator<Item = &'n str>,
    ) -> Result<Arc<[Part]>> {
        let mut parts: Vec<Part> = Vec::new();
        let tagged = reads
            .into_iter()
            .map(|n| (n, Slot::Read))
            .chain(writes.into_iter().map(|n| (n, Slot::Write)));
        for (name, slot) in tagged {
            let lock = LockKeys::new(prefix, name)?;
            parts.push(Part { lock, slot });
        }
        if parts.is_empty() {
            return Err(Error::invalid(
                "multi-lock",
                "no lock names; give at least one",
            ));
        }
        parts.sort_by(|a, b| a.lock.name().cmp(b.lock.name()));
        parts.dedup_by(|later, kept| {
            later.lock.name() == kept.lock.name() && later.slot == kept.slot
        });
        if let Some(w) = parts
            .windows(2)
            .find(|w| w[0].lock.name() == w[1].lock.name())
        {
            return Err(Error::invalid(
                "multi-lock",
                format!(
                    "`{}` is both read and written; list it once, with the write",
                    w[0].lock.name()
                ),
            ));
        }
        if parts.len() > MAX_MULTI_NAMES {
            return Err(Error::invalid(
                "multi-lock",
                format!(
                    "{} names, the limit is {MAX_MULTI_NAMES}; split the work or lock a coarser name",
                    parts.len()
                ),
            ));
        }
        Ok(parts.into())
    }

    lease_options!("client.multi_lock([\"a\", \"b\"])");

    /// How the read parts treat waiting writers: [`Preference::Writer`] (default: a read part
    /// is refused while a writer of that name waits) or [`Preference::Reader`]. The fair
    /// preference's ticket queue cannot be part of a multi-lock: acquiring then fails with
    /// [`Error::Unsupported`].
    ///
    /// ```
    /// use redis_locks::Preference;
    /// let client = redis_locks::LockClient::in_memory();
    /// let view = client.multi_rwlock(["prices", "stock"], ["report"]).preference(Preference::Reader);
    /// # drop(view);
    /// ```
    pub fn preference(mut self, preference: Preference) -> Self {
        self.preference = preference;
        self
    }

    /// The names, de-duplicated, in name order (the order they are taken in, except on Redis
    /// Cluster, where they are taken by hash slot, then name).
    ///
    /// ```
    /// let client = redis_locks::LockClient::in_memory();
    /// let both = client.multi_lock(["b", "a", "b"]);
    /// assert_eq!(both.names().len(), 2);
    /// ```
    pub fn names(&self) -> Vec<&str> {
        match &self.parts {
            Ok(parts) => parts.iter().map(|p| p.lock.name()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Waits until every name is free and takes them all; configure the wait with
    /// [`MultiAcquiring::timeout`] before awaiting it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_locks::LockClient::in_memory();
    /// let held = client.mutex("b").lock().await?;
    /// let err = client.multi_lock(["a", "b"]).lock().timeout(Duration::from_millis(20)).await.unwrap_err();
    /// assert!(err.is_timeout());
    /// assert!(client.mutex("a").try_lock().await.is_ok()); // nothing was left held
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, every part it may hold or have been granted
    /// meanwhile is released in the background.
    pub fn lock(&self) -> MultiAcquiring<'_> {
        MultiAcquiring {
            lock: self,
            timeout: None,
        }
    }

    /// One attempt: fails with an error whose [`is_would_block`](Error::is_would_block) is
    /// true (naming a busy part) when any name is held by someone else; nothing is held then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let held = client.mutex("b").lock().await?;
    /// assert!(client.multi_lock(["a", "b"]).try_lock().await.unwrap_err().is_would_block());
    /// held.release().await?;
    /// assert!(client.multi_lock(["a", "b"]).try_lock().await.is_ok());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`lock`](MultiLock::lock).
    pub async fn try_lock(&self) -> Result<MultiGuard> {
        self.acquire(Deadline::Try).await
    }

    async fn acquire(&self, deadline: Deadline) -> Result<MultiGuard> {
        self.ctx.opts.validate()?;
        let parts = self.parts.as_ref().map_err(|e| clone_error(e))?;
        let policy = match self.preference {
            Preference::Writer => Policy::Writer,
            Preference::Reader => Policy::Reader,
            Preference::Fair => {
                return Err(Error::Unsupported {
                    what: "multi_rwlock with Preference::Fair",
                    reason: "the fair preference queues on a ticket queue, which cannot grant several names in one step; use Preference::Writer",
                })
            }
        };
        let mut claim = self.ctx.claim(Request::Mutex);
        claim.policy = policy;
        let store = &self.ctx.store;
        // On Redis Cluster, one step per hash slot, in slot order (then name order).
        let by_slot: Vec<Part>;
        let parts: &[Part] = if store.one_slot_per_step() {
            let mut sorted = parts.to_vec();
            sorted.sort_by_key(|p| hash_slot(p.lock.channel().as_bytes()));
            by_slot = sorted;
            &by_slot
        } else {
            parts
        };
        let mut holds: Vec<Hold> = Vec::with_capacity(parts.len());
        let mut rest: &[Part] = parts;
        while !rest.is_empty() {
            let slot = hash_slot(rest[0].lock.channel().as_bytes());
            let len = if store.one_slot_per_step() {
                rest.iter()
                    .take_while(|p| hash_slot(p.lock.channel().as_bytes()) == slot)
                    .count()
            } else {
                rest.len()
            };
            let (group, later) = rest.split_at(len);
            match self.acquire_group(group, &mut claim, deadline).await {
                Ok(granted) => holds.extend(granted),
                Err(err) => {
                    // Let go of the slots already taken, in reverse order, now; what Redis
                    // does not confirm in time is released in the background.
                    let release = release_reversed(holds);
                    let _ = tokio::time::timeout(self.ctx.response_timeout, release).await;
                    return Err(err);
                }
            }
            rest = later;
        }
        Ok(MultiGuard { holds })
    }

    /// Takes every part of `group` (one step's worth), waiting as `deadline` allows, in the
    /// one acquire loop; the holds of the grants. A wait that withdrew an attempt goes on
    /// under a new token, which `claim` then carries to the later groups.
    async fn acquire_group(
        &self,
        group: &[Part],
        claim: &mut Claim,
        deadline: Deadline,
    ) -> Result<Vec<Hold>> {
        let parts = group
            .iter()
            .map(|part| {
                let mut part_claim = claim.clone();
                part_claim.slot = part.slot;
                (part.lock.clone(), part_claim)
            })
            .collect();
        let mut pursuit = Group {
            ctx: &self.ctx,
            group,
            claim: claim.clone(),
            pending: Pending::new(self.ctx.store.clone(), self.ctx.holds.clone(), parts),
            unknown: false,
            busy_part: 0,
        };
        let waiting = Waiting {
            hub: self.ctx.store.hub(),
            deadline,
            response_timeout: self.ctx.response_timeout,
            outage_budget: self.ctx.opts.outage_budget,
        };
        let won = pursue(&mut pursuit, &waiting).await;
        claim.token = std::mem::take(&mut pursuit.claim.token);
        match won? {
            Some((fences, sent_at)) => {
                Ok(pursuit.pending.granted(&fences, sent_at, &self.ctx.opts))
            }
            None => {
                let name = group[pursuit.busy_part].lock.name();
                Err(Error::WouldBlock {
                    name: name.to_owned(),
                    by_this_client: self.ctx.holds.holds_name(name).await,
                })
            }
        }
    }
}

/// A multi-lock's group of parts (one step's worth) pursued by the acquire loop: granted all
/// at once or not at all; a multi-lock never queues or announces itself, so no release hands
/// it a grant.
struct Group<'a> {
    ctx: &'a LockCtx,
    group: &'a [Part],
    /// Its token is new after every withdraw ([`Pending::retoken`]).
    claim: Claim,
    /// What a grant whose reply was lost (or whose future was dropped in flight) may have
    /// left: released when the group is refused, when the wait ends without a grant, or in
    /// the background when the acquisition is dropped.
    pending: Pending,
    /// An attempt's outcome is unknown: it may have granted the group.
    unknown: bool,
    /// The part the latest refusal named.
    busy_part: usize,
}

impl Pursuit for Group<'_> {
    type Won = (Vec<u64>, Instant);

    async fn attempt(&mut self, _wait: bool) -> Step<Self::Won> {
        let sent_at = Instant::now();
        match self
            .ctx
            .store
            .acquire_all(self.group, &self.claim, None)
            .await
        {
            Ok(AcquireAll::Granted(grants)) => {
                Step::Won((grants.iter().map(|g| g.fence).collect(), sent_at))
            }
            Ok(AcquireAll::Busy { part, busy }) => {
                self.busy_part = part;
                Step::Refused {
                    busy,
                    sent_at,
                    channel: self.group[part].lock.channel(),
                }
            }
            Err(err) => Step::Failed(err),
        }
    }

    /// An attempt whose reply was lost may have granted the whole group, and part of that
    /// grant may still stand: it is given back before the loop returns or waits.
    async fn refused(&mut self, _busy: &Busy, wait: bool, until: Option<Instant>) {
        if self.unknown {
            let withdraw = self.pending.withdraw();
            let done = match until {
                // What is not confirmed by then stays pending (released on drop).
                Some(until) => tokio::time::timeout_at(until, withdraw)
                    .await
                    .unwrap_or(false),
                None => withdraw.await,
            };
            // The withdraw's releases may still reach the server later (one retried on a
            // new connection, the first copy delayed): the next attempts go by a new token,
            // which those releases cannot end. What was not confirmed is retired: released
            // again, in the background, at the next refusal.
            self.claim.token = self.ctx.new_token();
            self.pending.retoken(&self.claim.token, done);
            self.unknown = false;
        } else {
            self.pending.release_retired();
        }
        if !wait && !self.unknown {
            // A refused try leaves nothing: no queue place, no announcement.
            self.pending.forget();
        }
    }

    fn unknown(&mut self) {
        self.unknown = true;
    }

    fn handed_over(&mut self, _: HandOff, _: &Busy, _: Instant) -> Option<Self::Won> {
        None
    }

    fn interval(&self) -> Duration {
        self.ctx.opts.retry_interval
    }

    fn name(&self) -> &str {
        self.group.first().map_or("", |p| p.lock.name())
    }

    fn token(&self) -> &str {
        &self.claim.token
    }

    async fn withdraw_within(&mut self, bound: Duration) {
        if self.unknown {
            self.pending.withdraw_within(bound).await;
        } else {
            // Refused every time: a multi-lock leaves nothing behind a refusal.
            self.pending.forget();
        }
    }
}

pub(crate) fn clone_error(e: &Error) -> Error {
    match e {
        Error::InvalidName { reason } => Error::InvalidName {
            reason: reason.clone(),
        },
        Error::InvalidArgument { what, reason } => Error::InvalidArgument {
            what,
            reason: reason.clone(),
        },
        other => Error::invalid("multi-lock", other.to_string()),
    }
}

/// Releases `holds` last first, all requests sent at once; `Ok(true)` if every one held.
async fn release_reversed(mut holds: Vec<Hold>) -> Result<bool> {
    holds.reverse();
    let releases = holds
        .into_iter()
        .map(|h| Box::pin(h.release()) as BoxFuture<'static, Result<bool>>)
        .collect();
    let mut all = true;
    let mut first_err = None;
    for outcome in join_all(releases).await {
        match outcome {
            Ok(held) => all &= held,
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(all),
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names())
            .field("preference", &self.preference)
            .field("options", &self.ctx.opts)
            .finish()
    }
}

/// A wait for a [`MultiLock`], returned by [`MultiLock::lock`]: configure it, then `.await`
/// it for the guard. Nothing is sent until it is awaited; without
/// [`timeout`](MultiAcquiring::timeout) it waits as long as it takes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let guard = client
///     .multi_lock(["a", "b"])
///     .lock()
///     .timeout(std::time::Duration::from_secs(5))
///     .await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// Cancel safe: if the future is dropped, every part it holds or may have been granted is
/// released in the background.
#[must_use = "an acquisition does nothing until it is awaited"]
pub struct MultiAcquiring<'a> {
    lock: &'a MultiLock,
    timeout: Option<Duration>,
}

impl MultiAcquiring<'_> {
    /// Waits at most `timeout` (counted from the first poll); then every part taken so far is
    /// released and the result is an error whose [`is_timeout`](Error::is_timeout) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_locks::LockClient::in_memory();
    /// let held = client.mutex("a").lock().await?;
    /// let err = client.multi_lock(["a", "b"]).lock().timeout(Duration::from_millis(20)).await.unwrap_err();
    /// assert!(err.is_timeout());
    /// # drop(held);
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl fmt::Debug for MultiAcquiring<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiAcquiring")
            .field("names", &self.lock.names())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<'a> IntoFuture for MultiAcquiring<'a> {
    type Output = Result<MultiGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<MultiGuard>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let deadline = match self.timeout {
                Some(timeout) => Deadline::after(timeout),
                None => Deadline::Never,
            };
            self.lock.acquire(deadline).await
        })
    }
}

/// Proof of holding every name of a [`MultiLock`]: one lease per name, each renewed in the
/// background while the guard lives, all released when it is dropped (in the background) or
/// by [`release`](MultiGuard::release).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let client = redis_locks::LockClient::in_memory();
/// let guard = client.multi_lock(["from", "to"]).lock().await?;
/// let fence_from = guard.fencing_token("from").expect("a part");
/// let fence_to = guard.fencing_token("to").expect("a part");
/// // ... write both resources, each with its own fencing token ...
/// # let _ = (fence_from, fence_to);
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases every name in the background; keep it while you work"]
pub struct MultiGuard {
    /// In canonical order.
    pub(crate) holds: Vec<Hold>,
}

impl MultiGuard {
    /// The names held, in the order they were taken (by name; on Redis Cluster by hash slot,
    /// then name).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["b", "a"]).lock().await?;
    /// assert_eq!(guard.names().count(), 2);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.holds.iter().map(|h| h.name())
    }

    /// The fencing token of the part `name` (`None` if it is not a part): strictly greater
    /// than every earlier exclusive grant's on that name (a read part reports the last
    /// exclusive grant's). Pass each resource the token of its own name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// assert!(guard.fencing_token("a").is_some());
    /// assert!(guard.fencing_token("c").is_none());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.holds
            .iter()
            .find(|h| h.name() == name)
            .map(|h| h.fencing_token())
    }

    /// Every part's name and fencing token, in canonical order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// for (name, fence) in guard.fencing_tokens() {
    ///     println!("{name}: {fence}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&str, u64)> {
        self.holds.iter().map(|h| (h.name(), h.fencing_token()))
    }

    /// The claim token the store knows the first part by (feature `testing`): every part's,
    /// unless on Redis Cluster a wait withdrew an attempt after an earlier slot's grant (the
    /// later slots then have the new token).
    #[cfg(feature = "testing")]
    pub fn token(&self) -> String {
        self.holds.first().map(|h| h.token()).unwrap_or_default()
    }

    /// The claim token the store knows the part `name` by (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn token_of(&self, name: &str) -> Option<String> {
        self.holds
            .iter()
            .find(|h| h.name() == name)
            .map(|h| h.token())
    }

    /// True while every part's lease can be trusted (see [`Guard::is_held`](crate::Guard)):
    /// false as soon as any one may be gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.holds.iter().all(|h| h.is_held())
    }

    /// The instant (local monotonic clock) until which every part is trusted: the earliest
    /// of the parts'.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// assert!(guard.valid_until() > tokio::time::Instant::now());
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.holds
            .iter()
            .map(|h| h.valid_until())
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// Resolves when any part's lease can no longer be trusted. Await it next to your work
    /// (`tokio::select!`) to stop when a lock is gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => println!("a part was lost; stop writing"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(5)) => println!("work done"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        let mut lost: Vec<BoxFuture<'_, ()>> = self
            .holds
            .iter()
            .map(|h| Box::pin(h.lost()) as BoxFuture<'_, ()>)
            .collect();
        if lost.is_empty() {
            return;
        }
        std::future::poll_fn(|cx| {
            if lost.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Renews every part's lease to `lease` from now (and keeps that length for later
    /// automatic renewals). `Ok(false)`: at least one part was already gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let mut guard = client.multi_lock(["a", "b"]).lock().await?;
    /// assert!(guard.extend(std::time::Duration::from_secs(120)).await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`Guard::extend`](crate::Guard::extend), for each part.
    pub async fn extend(&mut self, lease: Duration) -> Result<bool> {
        let renewals = self
            .holds
            .iter_mut()
            .map(|h| Box::pin(h.extend(lease)) as BoxFuture<'_, Result<bool>>)
            .collect();
        let mut all = true;
        for outcome in join_all(renewals).await {
            all &= outcome?;
        }
        Ok(all)
    }

    /// Releases every part, the last name first (all requests leave at once). `Ok(true)` if
    /// this guard still held every part; `Ok(false)` if any had lapsed or been taken over;
    /// `Err` if Redis could not be asked about some part (its lease then lapses on its own).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["a", "b"]).lock().await?;
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled after the requests left, each release may or may not have happened; the
    /// leases then lapse on their own.
    pub async fn release(mut self) -> Result<bool> {
        release_reversed(std::mem::take(&mut self.holds)).await
    }

    /// Runs `work` while this guard holds every part, then releases them; if any part is
    /// lost first, `work` is stopped (dropped at its next `.await`) and the result is
    /// [`Error::LeaseLost`] naming that part. See [`Guard::run_while_held`](crate::Guard).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["from", "to"]).lock().await?;
    /// let moved = guard.run_while_held(async { 3 }).await?;
    /// assert_eq!(moved, 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If this future is dropped, `work` is dropped and the parts are released in the
    /// background.
    pub async fn run_while_held<F: Future>(self, work: F) -> Result<F::Output> {
        let outcome = tokio::select! {
            biased;
            _ = self.lost() => None,
            out = work => Some(out),
        };
        match outcome {
            Some(out) => {
                if let Err(err) = self.release().await {
                    tracing::warn!(%err, "release of a multi-lock after work failed");
                }
                Ok(out)
            }
            None => {
                let name = self
                    .holds
                    .iter()
                    .find(|h| !h.is_held())
                    .map(|h| h.name().to_owned())
                    .unwrap_or_default();
                let _ = self.release().await;
                Err(Error::LeaseLost { name })
            }
        }
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        // The last name first, as `release` does.
        while let Some(hold) = self.holds.pop() {
            drop(hold);
        }
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("fencing_tokens", &self.fencing_tokens().collect::<Vec<_>>())
            .field("is_held", &self.is_held())
            .finish()
    }
}
