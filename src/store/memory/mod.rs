//! [`MemoryStore`]: the executable specification of the store contract, in process.
//!
//! It mirrors the Lua scripts step by step (same pruning, same ordering of sorted sets by
//! score then member, same ticket numbering), so the model checks can require identical
//! replies from both. It is also a complete backend for running code that uses locks without
//! Redis: `LockClient::in_memory()`.
//!
//! The store is split like the scripts: `lease_lock` mirrors the `rw_*.lua` steps and
//! `ticket_queue` the `queue_*.lua` steps. Both are pure state machines: a step takes the
//! lock's state, the time and the request, and returns the reply with the wake-up messages to
//! publish (built through the crate's wire formats, as the scripts publish them). This module
//! wraps them: the lock around the state, the clock, and the delivery of the wake-ups to the
//! hub once the state is unlocked.

mod election;
mod lease_lock;
mod rate_limit;
mod ticket_queue;
mod zset;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use self::lease_lock::LeaseLock;
use self::rate_limit::{Foreign, RateError};
use self::ticket_queue::TicketQueue;
use super::{
    ms, Acquire, AcquireAll, Busy, Claim, Family, Grant, HolderEviction, Part, PermitChange, Rate,
    RateClaim, RateDecision, RateSnapshot, Slot, Snapshot, Store,
};
use crate::store::hub::WakeHub;
use crate::vocab::claim::LeaderInfo;
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::{key_type, LockKeys};
use crate::wire::{Named, Refusal, Renewal, WakeUp};

/// How much longer a key lives under an explicit (virtual) clock: `TTL_PAD` in prelude.lua.
const TTL_PAD_MS: u64 = 86_400_000;

/// How long a counter written by bump_fence lives at least: `BUMP_KEEP` in prelude.lua.
const BUMP_KEEP_MS: u64 = 1000;

/// Steps between two sweeps of the names whose every key would have expired.
const SWEEP_EVERY: u64 = 1024;

/// When a key given a TTL at `now` to cover `deadline` expires (`max(1, deadline - now)` ms,
/// plus the pad of a virtual clock).
fn expiry(now: u64, deadline: u64, pad: u64) -> u64 {
    now + deadline.saturating_sub(now).max(1) + pad
}

/// All state of one lock name (both families, like the keys under one hash tag).
#[derive(Clone, Debug, Default)]
struct LockState {
    /// The fence counter, shared by both families; 0 when the key does not exist.
    fence: u64,
    /// When the fence counter expires.
    fence_until: u64,
    /// When `leader` expires.
    leader_until: u64,
    /// The TTL pad of the step running (0 under the wall clock).
    pad: u64,
    /// The lease lock's keys.
    lease: LeaseLock,
    /// The ticket queue's keys.
    queue: TicketQueue,
    /// `lv`: the value an election's leader proclaimed, as (token, fence, value).
    leader: Option<(String, u64, String)>,
    /// The rate limiter's keys.
    rate: rate_limit::RateLimit,
}

impl LockState {
    /// Starts a step at `now`: what expired since the last step is gone, as keys whose TTL
    /// passed are gone in Redis (the whole state once its latest deadline passed).
    fn begin(&mut self, now: u64, pad: u64) {
        let last = [
            self.lease.last_deadline(),
            self.queue.last_deadline(),
            self.rate.last_deadline(),
            (self.fence != 0).then_some(self.fence_until),
            self.leader.is_some().then_some(self.leader_until),
        ]
        .into_iter()
        .flatten()
        .max();
        if last.is_some_and(|last| now >= last.saturating_add(self.pad)) {
            let foreign = self.rate.take_foreign();
            *self = LockState::default();
            self.rate.put_foreign(foreign);
        }
        if self.fence != 0 && now >= self.fence_until {
            self.fence = 0;
        }
        if self.leader.is_some() && now >= self.leader_until {
            self.leader = None;
        }
        self.pad = pad;
    }

    /// next_fence (prelude.lua): the fence of a new exclusive grant, held until `deadline`:
    /// above the counter and at least the clock in microseconds (`now` is in ms); the counter
    /// then expires with that hold.
    fn next_fence(&mut self, now: u64, deadline: u64) -> u64 {
        self.fence = (self.fence + 1).max(now.saturating_mul(1000));
        self.fence_until = expiry(now, deadline, self.pad);
        self.fence
    }

    /// keep_fence (prelude.lua): an existing counter lives at least until `deadline` (the
    /// counter lives as long as the longest hold of its name).
    fn keep_fence(&mut self, now: u64, deadline: u64) {
        if self.fence != 0 {
            self.fence_until = self.fence_until.max(expiry(now, deadline, self.pad));
        }
    }

    /// bump_fence (prelude.lua): a fence above the counter and the clock, written keeping the
    /// counter's TTL, which then lasts at least [`BUMP_KEEP_MS`] more.
    fn bump_fence(&mut self, now: u64) -> u64 {
        if self.fence == 0 {
            self.fence_until = 0;
        }
        self.fence = (self.fence + 1).max(now.saturating_mul(1000));
        self.keep_fence(now, now + BUMP_KEEP_MS);
        self.fence
    }

    /// The end of `refresh_ttls` in queue_common.lua: the fence lives as long as the holders
    /// this step granted or renewed.
    fn keep_fence_for_holders(&mut self, now: u64) {
        if let Some(until) = self.queue.take_holders_until() {
            self.keep_fence(now, until);
        }
    }

    /// True when no key is left: no fence, no stored count, no hold or waiter, no leader
    /// value. Such state is dropped.
    fn is_idle(&self) -> bool {
        self.fence == 0
            && self.lease.is_empty()
            && self.queue.is_idle()
            && self.leader.is_none()
            && self.rate.is_idle()
    }
}

/// What one step of a state machine produced: its reply, and the wake-up messages to publish
/// on the lock's channel, in order.
#[derive(Debug)]
struct Step<T> {
    reply: T,
    wake_ups: Vec<WakeUp<'static>>,
}

/// The wake-ups a step publishes, collected as it goes (the scripts' `publish` calls).
#[derive(Debug, Default)]
struct WakeUps(Vec<WakeUp<'static>>);

impl WakeUps {
    /// `*`: every waiter re-checks.
    fn all(&mut self) {
        self.0.push(WakeUp::All);
    }

    /// The waiters granted by one hand-off or promotion, in one message (none: no message).
    fn granted(&mut self, named: Vec<Named<'static>>) {
        if !named.is_empty() {
            self.0.push(WakeUp::Named(named));
        }
    }

    /// The step's outcome: `reply` with the wake-ups collected.
    fn reply<T>(self, reply: T) -> Step<T> {
        Step {
            reply,
            wake_ups: self.0,
        }
    }
}

#[cfg(feature = "testing")]
/// The state of `lock` for someone else's write. A name with no state yet gets one whose keys
/// have no TTL (someone else's keys have none), so nothing of it expires before the next step
/// (which sets the TTL pad of its own).
fn planted_state<'a>(
    locks: &'a mut HashMap<String, LockState>,
    lock: &LockKeys,
) -> &'a mut LockState {
    locks.entry(lock.channel()).or_insert_with(|| LockState {
        pad: u64::MAX,
        ..LockState::default()
    })
}

/// The error of a step that met a foreign value at a rate limiter's key, as the Redis store
/// reports the script's: a value of another type is named with its type; a string where the
/// limiter keeps one is a state or counter the scripts did not write (their `RLCORRUPT`
/// message).
fn foreign_error(lock: &LockKeys, foreign: &Foreign) -> Error {
    let key = lock.key(&foreign.key);
    let expected = key_type(&key).unwrap_or("string");
    let detail = if foreign.found != expected {
        format!(
            "it is a {}, where redis-locks keeps a {expected}",
            foreign.found
        )
    } else if foreign.key == "rt" {
        format!("key {key} does not hold a rate limiter state")
    } else {
        format!("key {key} does not hold a redis-locks counter")
    };
    Error::WrongType {
        name: lock.name().to_owned(),
        key: Some(key),
        detail,
    }
}

/// force_release.lua: drops every hold of both families (waiters stay), bumps the fence and
/// wakes everyone; the new fence.
fn force_release(state: &mut LockState, now: u64) -> Step<u64> {
    state.lease.drop_holds();
    state.queue.drop_holds();
    let fence = state.bump_fence(now);
    let mut wakes = WakeUps::default();
    wakes.all();
    wakes.reply(fence)
}

/// force_release_holder.lua: drops the one live hold whose token starts with `prefix`
/// (nothing when none or several match), bumps the fence when its family has no live hold
/// left, and wakes everyone.
fn force_release_holder(state: &mut LockState, now: u64, prefix: &str) -> Step<HolderEviction> {
    let lease = state.lease.live_matching(now, prefix);
    let queue = state.queue.live_matching(now, prefix);
    let matches = lease.len() + queue.len();
    if matches != 1 {
        let reply = match matches {
            0 => HolderEviction::NoMatch,
            n => HolderEviction::Ambiguous { matches: n },
        };
        return WakeUps::default().reply(reply);
    }
    let left = match (lease.first(), queue.first()) {
        (Some(token), _) => state.lease.drop_hold(now, token),
        (None, Some(member)) => state.queue.drop_hold(now, member),
        (None, None) => unreachable!("one match"),
    };
    let fence_bumped = left == 0;
    let fence = if fence_bumped {
        state.bump_fence(now)
    } else {
        state.fence
    };
    let mut wakes = WakeUps::default();
    wakes.all();
    wakes.reply(HolderEviction::Evicted {
        fence,
        fence_bumped,
    })
}

/// The in-process store. Cheap to clone; clones share state.
///
/// Share one between several clients to test code that coordinates across "machines"
/// without Redis:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use std::sync::Arc;
/// use redis_locks::{testing::store::MemoryStore, LockClient};
/// let store = Arc::new(MemoryStore::new());
/// let a = LockClient::builder().store(store.clone())?;
/// let b = LockClient::builder().store(store)?;
/// let held = a.mutex("shared").lock().await?;
/// assert!(b.mutex("shared").try_lock().await.unwrap_err().is_would_block());
/// held.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryStore {
    locks: Arc<StdMutex<HashMap<String, LockState>>>,
    hub: Arc<WakeHub>,
    steps: Arc<AtomicU64>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(ms)
        .unwrap_or(0)
}

impl MemoryStore {
    /// An empty store with its own wake-up hub.
    pub fn new() -> Self {
        MemoryStore {
            locks: Arc::default(),
            hub: WakeHub::local(),
            steps: Arc::default(),
        }
    }

    /// How many lock names still have state (in Redis: at least one key) at the wall clock.
    /// A name whose holds all ended, and whose leases have lapsed, has none: its fence counter
    /// and every other record expire with the holds, as the keys do on Redis. A count stored
    /// with `set_permits` is kept.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::sync::Arc;
    /// use redis_locks::{testing::store::MemoryStore, LockClient};
    /// let store = Arc::new(MemoryStore::new());
    /// let client = LockClient::builder().store(store.clone())?;
    /// let held = client.mutex("job-1").lock().await?;
    /// assert_eq!(store.names_kept(), 1);
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn names_kept(&self) -> usize {
        let now = wall_clock_ms();
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, state| {
            state.begin(now, 0);
            !state.is_idle()
        });
        locks.len()
    }

    #[cfg(feature = "testing")]
    /// Loses the heartbeat entry of the rate limiter waiter `member` of `lock`, or every
    /// entry (`None`), as a write by someone else to `rl:{name}:rhb` (`ZREM`, `DEL`) loses them
    /// on Redis; the queue keeps the member. For the model check of how a limiter treats a
    /// queue member without a heartbeat (`tests/model_rate.rs`).
    pub fn lose_rate_heartbeats(&self, lock: &LockKeys, member: Option<&str>) {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = locks.get_mut(&lock.channel()) {
            state.rate.lose_heartbeats(member);
        }
    }

    #[cfg(feature = "testing")]
    /// Plants someone else's value at the key `rl:{name}:<key>` of the rate limiter `lock`
    /// (`key`: `rt`, `rq`, `rhb`, `rtk` or `ra`), of the Redis type `found` (`"string"`,
    /// `"list"`), replacing what the key held, as a `SET` (or `DEL` and `RPUSH`) by someone
    /// else does on Redis. Until [`MemoryStore::delete_rate_foreign`], a step that uses the
    /// key fails with the wrong-type error the scripts give, naming it (a string where
    /// the limiter keeps one is a state or counter the scripts did not write). One key of a
    /// limiter at a time. For the model check of foreign values (`tests/model_rate.rs`).
    pub fn plant_rate_foreign(&self, lock: &LockKeys, key: &str, found: &str) {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        planted_state(&mut locks, lock)
            .rate
            .plant_foreign(key, found);
    }

    #[cfg(feature = "testing")]
    /// Deletes the foreign value [`MemoryStore::plant_rate_foreign`] planted (`DEL` of its
    /// key on Redis).
    pub fn delete_rate_foreign(&self, lock: &LockKeys) {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = locks.get_mut(&lock.channel()) {
            state.rate.delete_foreign();
        }
    }

    #[cfg(feature = "testing")]
    /// Adds `member` to the queue of the rate limiter `lock` at `ticket`, with a heartbeat
    /// entry until `heartbeat_until` (ms) or none, as someone else's `ZADD` to
    /// `rl:{name}:rq` (and `rl:{name}:rhb`) does on Redis. For the model check of foreign
    /// queue members (`tests/model_rate.rs`).
    pub fn plant_rate_member(
        &self,
        lock: &LockKeys,
        member: &str,
        ticket: u64,
        heartbeat_until: Option<u64>,
    ) {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        planted_state(&mut locks, lock)
            .rate
            .plant_member(member, ticket, heartbeat_until);
    }

    /// Runs one step on the lock's state at `now` (the wall clock unless given), then
    /// publishes the wake-ups it produced, once the state is unlocked.
    fn step<T>(
        &self,
        lock: &LockKeys,
        now: Option<u64>,
        f: impl FnOnce(&mut LockState, u64) -> Step<T>,
    ) -> T {
        let pad = if now.is_some() { TTL_PAD_MS } else { 0 };
        let now = now.unwrap_or_else(wall_clock_ms);
        let channel = lock.channel();
        let Step { reply, wake_ups } = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            if self.steps.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
                // Names nobody touches any more go once their keys would have expired.
                locks.retain(|_, state| {
                    state.begin(now, pad);
                    !state.is_idle()
                });
            }
            let state = locks.entry(channel.clone()).or_default();
            state.begin(now, pad);
            let step = f(state, now);
            state.keep_fence_for_holders(now);
            if state.is_idle() {
                locks.remove(&channel);
            }
            step
        };
        for wake_up in wake_ups {
            self.hub.dispatch(&channel, &wake_up.to_string());
        }
        reply
    }

    /// A step that publishes nothing (a read).
    fn read<T>(
        &self,
        lock: &LockKeys,
        now: Option<u64>,
        f: impl FnOnce(&LockState, u64) -> T,
    ) -> T {
        self.step(lock, now, |state, now| {
            WakeUps::default().reply(f(state, now))
        })
    }
}

impl MemoryStore {
    /// `renew` ([`Renewal`]).
    fn renew_as(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
        how: Renewal,
    ) -> Result<bool> {
        claim.check()?;
        Ok(self.step(lock, now, |state, now| match claim.slot {
            Slot::Write | Slot::Read => lease_lock::extend(state, now, claim, ms(lease), how),
            Slot::Ticket { .. } => ticket_queue::extend(state, now, claim, ms(lease), how),
        }))
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<Acquire> {
        claim.check()?;
        self.step(lock, now, |state, now| match claim.slot {
            Slot::Write | Slot::Read => lease_lock::acquire(state, now, claim, wait),
            Slot::Ticket { .. } => ticket_queue::acquire(state, now, claim, wait),
        })
        .map_err(|refusal| refusal.into_error(lock.name()))
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, now: Option<u64>) -> Result<bool> {
        claim.check()?;
        Ok(self.step(lock, now, |state, now| match claim.slot {
            Slot::Write | Slot::Read => lease_lock::release(state, now, &claim.token),
            Slot::Ticket { .. } => ticket_queue::release(state, now, claim),
        }))
    }

    async fn renew(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        handed_until: Option<u64>,
        now: Option<u64>,
    ) -> Result<bool> {
        let how = handed_until.map_or(Renewal::Keep, Renewal::Claim);
        self.renew_as(lock, claim, lease, now, how)
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<Option<u64>> {
        claim.check()?;
        Ok(self.step(lock, now, |state, now| match claim.slot {
            Slot::Write | Slot::Read => lease_lock::downgrade(state, now, claim),
            Slot::Ticket { .. } => ticket_queue::downgrade(state, now, claim),
        }))
    }

    async fn inspect(&self, lock: &LockKeys, family: Family, now: Option<u64>) -> Result<Snapshot> {
        Ok(self.read(lock, now, |state, now| match family {
            Family::LeaseLock => lease_lock::inspect(state, now),
            Family::TicketQueue => ticket_queue::inspect(state, now),
        }))
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> Result<u32> {
        self.step(lock, now, |state, now| {
            ticket_queue::set_permits(state, now, change, ms(heartbeat))
        })
        .map_err(|refusal| refusal.into_error(lock.name()))
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> Result<u64> {
        Ok(self.step(lock, now, force_release))
    }

    async fn force_release_holder(
        &self,
        lock: &LockKeys,
        token_prefix: &str,
        now: Option<u64>,
    ) -> Result<HolderEviction> {
        Ok(self.step(lock, now, |state, now| {
            force_release_holder(state, now, token_prefix)
        }))
    }

    fn hub(&self) -> &Arc<WakeHub> {
        &self.hub
    }

    async fn proclaim(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        value: Option<&str>,
        now: Option<u64>,
    ) -> Result<bool> {
        claim.check()?;
        Ok(self.step(lock, now, |state, now| {
            election::proclaim(state, now, &claim.token, value)
        }))
    }

    async fn leader(&self, lock: &LockKeys, now: Option<u64>) -> Result<Option<LeaderInfo>> {
        Ok(self.read(lock, now, election::leader))
    }

    async fn rate_acquire(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        wait: bool,
        now: Option<u64>,
    ) -> Result<RateDecision> {
        claim.check()?;
        self.step(lock, now, |state, now| {
            rate_limit::acquire(&mut state.rate, now, claim, wait)
        })
        .map_err(|e| match e {
            RateError::Permits(asked) => Refusal::TooManyPermits {
                asked,
                capacity: claim.rate.burst_size(),
            }
            .into_error(lock.name()),
            RateError::Foreign(foreign) => foreign_error(lock, &foreign),
        })
    }

    async fn rate_cancel(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        now: Option<u64>,
    ) -> Result<bool> {
        claim.check()?;
        self.step(lock, now, |state, now| {
            rate_limit::cancel(&mut state.rate, now, claim)
        })
        .map_err(|e| match e {
            RateError::Foreign(foreign) => foreign_error(lock, &foreign),
            RateError::Permits(_) => unreachable!("a cancel asks for no admission"),
        })
    }

    async fn rate_inspect(
        &self,
        lock: &LockKeys,
        rate: &Rate,
        now: Option<u64>,
    ) -> Result<RateSnapshot> {
        rate.check()?;
        self.read(lock, now, |state, now| {
            rate_limit::inspect(&state.rate, now, rate)
        })
        .map_err(|foreign| foreign_error(lock, &foreign))
    }

    async fn acquire_all(
        &self,
        parts: &[Part],
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<AcquireAll> {
        claim.check()?;
        super::check_parts(parts)?;
        let pad = if now.is_some() { TTL_PAD_MS } else { 0 };
        let now = now.unwrap_or_else(wall_clock_ms);
        let mut published = Vec::new();
        let outcome = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            let mut refused = None;
            for (i, part) in parts.iter().enumerate() {
                let channel = part.lock.channel();
                let state = locks.entry(channel.clone()).or_default();
                state.begin(now, pad);
                let step = lease_lock::part_refusal(state, now, claim, part.slot);
                published.push((channel, step.wake_ups));
                if let Some(refusal) = step.reply {
                    refused = Some((i, refusal));
                    break;
                }
            }
            let outcome = match refused {
                Some((part, Ok(retry))) => Ok(AcquireAll::Busy {
                    part,
                    busy: Busy {
                        retry_after: retry.map(Duration::from_millis),
                        position: None,
                        heartbeat_until: None,
                        token_released: false,
                    },
                }),
                Some((part, Err(refusal))) => Err(refusal.into_error(parts[part].lock.name())),
                None => Ok(AcquireAll::Granted(
                    parts
                        .iter()
                        .map(|part| {
                            let state = locks.entry(part.lock.channel()).or_default();
                            Grant {
                                fence: lease_lock::grant_part(state, now, claim, part.slot),
                                lease: Duration::from_millis(ms(claim.lease)),
                            }
                        })
                        .collect(),
                )),
            };
            for part in parts {
                let channel = part.lock.channel();
                if locks.get(&channel).is_some_and(LockState::is_idle) {
                    locks.remove(&channel);
                }
            }
            outcome
        };
        for (channel, wake_ups) in published {
            for wake_up in wake_ups {
                self.hub.dispatch(&channel, &wake_up.to_string());
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    //! The state machines are pure: a step's wake-ups come back with its reply.

    use super::*;
    use crate::store::{Grant, Policy};
    use crate::wire::HandOff;

    fn claim(token: &str, slot: Slot) -> Claim {
        Claim {
            token: token.to_owned(),
            slot,
            lease: Duration::from_millis(1_000),
            heartbeat: Duration::from_millis(300),
            policy: Policy::Writer,
        }
    }

    #[test]
    fn a_writer_release_hands_the_lock_over_in_its_wake_up() {
        let mut state = LockState::default();
        let (a, b) = (claim("a", Slot::Write), claim("b", Slot::Write));
        let step = lease_lock::acquire(&mut state, 100, &a, false);
        // The first fence is the clock in µs (100 ms); the next one the clock again (300 ms).
        assert!(matches!(
            step.reply,
            Ok(Acquire::Granted(Grant { fence: 100_000, .. }))
        ));
        assert!(step.wake_ups.is_empty());
        let step = lease_lock::acquire(&mut state, 200, &b, true);
        assert!(matches!(step.reply, Ok(Acquire::Busy(_))));
        let step = lease_lock::release(&mut state, 300, "a");
        assert!(step.reply);
        // Until b's heartbeat deadline (200 + 300 ms), made odd (see `wire::odd`).
        let grant = HandOff {
            fence: 300_000,
            until: Some(501),
        };
        assert_eq!(
            step.wake_ups,
            [WakeUp::Named(vec![Named::granted("b", grant)])]
        );
        assert_eq!(step.wake_ups[0].to_string(), "b=300000@501");
    }

    #[test]
    fn a_permit_change_grants_the_waiters_that_now_fit() {
        let mut state = LockState::default();
        let slot = Slot::Ticket {
            weight: 1,
            capacity: 1,
            resizable: true,
        };
        let (a, b) = (claim("a", slot), claim("b", slot));
        let step = ticket_queue::acquire(&mut state, 100, &a, false);
        assert!(matches!(step.reply, Ok(Acquire::Granted(_))));
        let step = ticket_queue::acquire(&mut state, 100, &b, true);
        assert!(matches!(step.reply, Ok(Acquire::Busy(_))));
        let add = PermitChange::Add { by: 1, base: 1 };
        let step = ticket_queue::set_permits(&mut state, 150, add, 300);
        assert_eq!(step.reply, Ok(2));
        assert_eq!(step.wake_ups.len(), 1);
        // A shared grant reports the last exclusive fence (a took all of 1 permit); until b's
        // heartbeat deadline (100 + 300 ms), made odd (see `wire::odd`).
        assert_eq!(step.wake_ups[0].to_string(), "b=100000@401");
        // Out of range: refused, nothing changes, nobody is woken.
        let forget = PermitChange::Forget { by: 2, base: 1 };
        let step = ticket_queue::set_permits(&mut state, 160, forget, 300);
        assert_eq!(
            step.reply,
            Err(crate::wire::Refusal::PermitCount { count: 0 })
        );
        assert!(step.wake_ups.is_empty());
        assert_eq!(ticket_queue::inspect(&state, 160).permits, Some(2));
    }
}
