//! [`MemoryStore`]: the executable specification of the store contract, in process.
//!
//! It mirrors the Lua scripts step by step (same pruning, same ordering of sorted sets by
//! score then member, same ticket numbering), so the model checks can require identical
//! replies from both. It is also a complete backend for running code that uses locks without
//! Redis: `LockClient::in_memory()`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{ms, Acquire, Busy, Claim, Family, Grant, HoldKind, HolderState, PermitChange};
use super::{Policy, Slot, Snapshot, Store, WaiterState};
use crate::error::{Error, Result};
use crate::hub::WakeHub;
use crate::keys::LockKeys;
use crate::semaphore::MAX_PERMITS;
use crate::wire::{HandOff, Member, Named, Refusal, WakeUp};

/// A sorted set ordered like Redis: by score, then by member bytes.
#[derive(Clone, Debug, Default)]
struct ZSet {
    scores: HashMap<String, u64>,
    order: BTreeSet<(u64, String)>,
}

impl ZSet {
    fn add(&mut self, member: &str, score: u64) {
        if let Some(old) = self.scores.insert(member.to_owned(), score) {
            self.order.remove(&(old, member.to_owned()));
        }
        self.order.insert((score, member.to_owned()));
    }
    fn remove(&mut self, member: &str) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(old, member.to_owned()));
                true
            }
            None => false,
        }
    }
    fn score(&self, member: &str) -> Option<u64> {
        self.scores.get(member).copied()
    }
    fn len(&self) -> usize {
        self.scores.len()
    }
    fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }
    /// Removes members with score <= `max`; returns them in order.
    fn remove_up_to(&mut self, max: u64) -> Vec<String> {
        let gone: Vec<(u64, String)> = self
            .order
            .iter()
            .take_while(|(s, _)| *s <= max)
            .cloned()
            .collect();
        for (s, m) in &gone {
            self.order.remove(&(*s, m.clone()));
            self.scores.remove(m);
        }
        gone.into_iter().map(|(_, m)| m).collect()
    }
    fn max_score(&self) -> Option<u64> {
        self.order.iter().next_back().map(|(s, _)| *s)
    }
    fn first(&self) -> Option<&(u64, String)> {
        self.order.iter().next()
    }
    fn rank(&self, member: &str) -> Option<usize> {
        let score = self.score(member)?;
        Some(self.order.range(..(score, member.to_owned())).count())
    }
    fn iter(&self) -> impl Iterator<Item = &(u64, String)> {
        self.order.iter()
    }
}

/// All state of one lock name (both families, like the keys under one hash tag).
#[derive(Clone, Debug, Default)]
struct LockState {
    fence: u64,
    // Lease lock.
    writer: Option<(String, u64)>,
    readers: ZSet,
    waiting_writers: ZSet,
    // Ticket queue.
    holders: ZSet,
    queue: ZSet,
    heartbeats: ZSet,
    tickets: u64,
    permits: Option<u32>,
    /// The capacity marker left by the queue's claims while it is in use (mirrors the
    /// `~<n>` / `=<n>` values of the `cap` key): (fixed, n).
    capacity_mark: Option<(bool, u32)>,
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
/// use redis_locks::{store::MemoryStore, LockClient};
/// let store = Arc::new(MemoryStore::new());
/// let a = LockClient::builder().store(store.clone());
/// let b = LockClient::builder().store(store);
/// let held = a.mutex("shared").lock().await?;
/// assert!(b.mutex("shared").try_lock().await?.is_none());
/// held.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryStore {
    locks: Arc<StdMutex<HashMap<String, LockState>>>,
    hub: Arc<WakeHub>,
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

fn member_of(token: &str, weight: u32) -> String {
    Member { token, weight }.to_string()
}

fn weight_of(member: &str) -> u64 {
    Member::parse(member).map_or(1, |m| u64::from(m.weight))
}

fn token_of(member: &str) -> String {
    Member::parse(member).map_or(member, |m| m.token).to_owned()
}

/// Wake-ups produced by one step, delivered after the state lock is released.
#[derive(Default)]
struct Wakes(Vec<WakeUp<'static>>);

impl Wakes {
    fn all(&mut self) {
        self.0.push(WakeUp::All);
    }
    fn named(&mut self, named: Vec<Named<'static>>) {
        if !named.is_empty() {
            self.0.push(WakeUp::Named(named));
        }
    }
}

impl LockState {
    // ---- lease lock -----------------------------------------------------------------------

    fn live_writer(&self, now: u64) -> Option<(String, u64)> {
        self.writer.clone().filter(|(_, dl)| *dl > now)
    }

    /// The ticket queue has a live holder (mirrors `queue_held` in rw_common.lua).
    fn queue_held(&self, now: u64) -> bool {
        self.holders.iter().any(|(dl, _)| *dl > now)
    }

    /// The lease lock has a live holder (mirrors `lease_held` in queue_common.lua).
    fn lease_held(&self, now: u64) -> bool {
        self.live_writer(now).is_some() || self.readers.iter().any(|(dl, _)| *dl > now)
    }

    fn rw_prune(&mut self, now: u64, wakes: &mut Wakes) {
        self.readers.remove_up_to(now);
        let waiting = self.waiting_writers.len();
        if waiting > 0 {
            let gone = self.waiting_writers.remove_up_to(now).len();
            if gone == waiting {
                wakes.all();
            }
        }
    }

    /// Hands the free lock to the first live waiting writer until its heartbeat deadline
    /// (mirrors `hand_over` in rw_common.lua); false when none waits.
    fn hand_over(&mut self, now: u64, wakes: &mut Wakes) -> bool {
        let Some((until, token)) = self
            .waiting_writers
            .iter()
            .find(|(dl, _)| *dl > now)
            .cloned()
        else {
            return false;
        };
        if self.queue_held(now) {
            return false;
        }
        self.waiting_writers.remove(&token);
        self.fence += 1;
        self.writer = Some((token.clone(), until));
        let grant = HandOff {
            fence: self.fence,
            until: Some(until),
        };
        wakes.named(vec![Named::granted(token, grant)]);
        true
    }

    fn rw_acquire(
        &mut self,
        now: u64,
        claim: &Claim,
        wait: bool,
        wakes: &mut Wakes,
    ) -> Result<Acquire> {
        let lease = ms(claim.lease);
        let live = self.live_writer(now);
        self.rw_prune(now, wakes);
        let granted = |fence: u64| {
            Acquire::Granted(Grant {
                fence,
                lease: Duration::from_millis(lease),
            })
        };
        let busy = |retry: Option<u64>, heartbeat_until: Option<u64>| {
            Acquire::Busy(Busy {
                retry_after: retry.map(Duration::from_millis),
                position: None,
                heartbeat_until,
            })
        };
        match claim.slot {
            Slot::Write => {
                if let Some((tok, _)) = &live {
                    if *tok == claim.token {
                        self.writer = Some((claim.token.clone(), now + lease));
                        return Ok(granted(self.fence));
                    }
                }
                let retry = match &live {
                    Some((_, dl)) => Some(dl - now),
                    None => self.readers.max_score().map(|m| m - now),
                };
                if retry.is_some() {
                    let mut announced = None;
                    if wait && claim.policy == Policy::Writer {
                        let until = now + ms(claim.heartbeat);
                        self.waiting_writers.add(&claim.token, until);
                        announced = Some(until);
                    }
                    return Ok(busy(retry, announced));
                }
                if self.queue_held(now) {
                    self.leave_waiting(&claim.token, wakes);
                    return Err(family_conflict(Family::TicketQueue));
                }
                self.fence += 1;
                self.writer = Some((claim.token.clone(), now + lease));
                // Only writer-preference claims announce themselves, so only they leave.
                if claim.policy == Policy::Writer {
                    self.waiting_writers.remove(&claim.token);
                }
                Ok(granted(self.fence))
            }
            _ => {
                if let Some((_, dl)) = live {
                    return Ok(busy(Some(dl - now), None));
                }
                let mine = self.readers.score(&claim.token).is_some();
                if !mine && claim.policy == Policy::Writer && !self.waiting_writers.is_empty() {
                    return Ok(busy(None, None));
                }
                if !mine && self.queue_held(now) {
                    return Err(family_conflict(Family::TicketQueue));
                }
                self.readers.add(&claim.token, now + lease);
                Ok(granted(self.fence))
            }
        }
    }

    fn rw_release(&mut self, now: u64, token: &str, wakes: &mut Wakes) -> bool {
        let live = self.live_writer(now);
        self.rw_prune(now, wakes);
        let mut held = false;
        if live.as_ref().is_some_and(|(t, _)| t == token) {
            self.writer = None;
            held = true;
            if !self.hand_over(now, wakes) {
                wakes.all();
            }
        } else {
            if self.writer.as_ref().is_some_and(|(t, _)| t == token) {
                self.writer = None;
            }
            if self.readers.remove(token) {
                held = true;
                if self.readers.is_empty() && !self.hand_over(now, wakes) {
                    wakes.all();
                }
            }
        }
        self.leave_waiting(token, wakes);
        held
    }

    /// Removes `token`'s waiting-writer announcement (mirrors `leave_waiting` in
    /// rw_common.lua): the readers it held back are woken when it was the last.
    fn leave_waiting(&mut self, token: &str, wakes: &mut Wakes) {
        if self.waiting_writers.remove(token) && self.waiting_writers.is_empty() {
            wakes.all();
        }
    }

    /// Renews the token's hold of `slot` only (mirrors rw_extend.lua): a late renewal of a
    /// write hold never touches the read hold a downgrade made of it.
    fn rw_extend(&mut self, now: u64, claim: &Claim, lease: u64, wakes: &mut Wakes) -> bool {
        let token = claim.token.as_str();
        let live = self.live_writer(now);
        self.rw_prune(now, wakes);
        if claim.slot == Slot::Write {
            if live.is_some_and(|(t, _)| t == token) {
                self.writer = Some((token.to_owned(), now + lease));
                return true;
            }
            return false;
        }
        if self.readers.score(token).is_some() {
            self.readers.add(token, now + lease);
            return true;
        }
        false
    }

    fn rw_downgrade(&mut self, now: u64, claim: &Claim, wakes: &mut Wakes) -> Option<u64> {
        let live = self.live_writer(now);
        self.rw_prune(now, wakes);
        if live.is_none_or(|(t, _)| t != claim.token) {
            return None;
        }
        self.writer = None;
        self.readers.add(&claim.token, now + ms(claim.lease));
        wakes.all();
        Some(self.fence)
    }

    fn rw_inspect(&self, now: u64) -> Snapshot {
        let mut holders = Vec::new();
        if let Some((token, dl)) = self.live_writer(now) {
            holders.push(HolderState {
                token,
                kind: HoldKind::Write,
                remaining_ms: dl - now,
            });
        }
        for (dl, token) in self.readers.iter().filter(|(dl, _)| *dl > now) {
            holders.push(HolderState {
                token: token.clone(),
                kind: HoldKind::Read,
                remaining_ms: dl - now,
            });
        }
        let waiters = self
            .waiting_writers
            .iter()
            .filter(|(dl, _)| *dl > now)
            .map(|(dl, token)| WaiterState {
                token: token.clone(),
                weight: 1,
                ticket: 0,
                heartbeat_remaining_ms: dl - now,
            })
            .collect();
        Snapshot {
            now_ms: now,
            fence: self.fence,
            permits: None,
            holders,
            waiters,
        }
    }

    // ---- ticket queue ---------------------------------------------------------------------

    fn q_prune(&mut self, now: u64) {
        self.holders.remove_up_to(now);
        let dead = self.heartbeats.remove_up_to(now);
        for m in &dead {
            self.queue.remove(m);
        }
        // The ticket counter goes with the last waiter (tickets restart from 1).
        if !dead.is_empty() {
            self.refresh();
        }
    }

    /// The capacity in force for a claim already in the queue's state (mirrors `capacity`
    /// in queue_common.lua).
    fn capacity(&self, own: u32) -> u64 {
        let marked = self.capacity_mark.map(|(_, n)| n);
        u64::from(self.permits.or(marked).unwrap_or(own))
    }

    fn in_use(&self, now: u64) -> bool {
        self.holders.iter().any(|(dl, _)| *dl > now) || !self.queue.is_empty()
    }

    /// The capacity for a new claim, and the marker to leave if it is granted or queued
    /// (mirrors `capacity_for` in queue_common.lua).
    fn capacity_for(
        &self,
        now: u64,
        want: u32,
        resizable: bool,
    ) -> Result<(u32, Option<(bool, u32)>)> {
        let fixed = !resizable;
        if let Some(n) = self.permits {
            // A stored count may change at any set_permits: a fixed capacity cannot live on it.
            if fixed {
                return Err(capacity_conflict(
                    format!("{n} (set_permits, resizable)"),
                    want,
                ));
            }
            return Ok((n, None));
        }
        let mark = self.capacity_mark;
        if let Some((_, n)) = mark {
            if n != want && self.in_use(now) {
                return Err(capacity_conflict(n, want));
            }
        }
        let stale_or_upgrade = match mark {
            None => true,
            Some((marked_fixed, n)) => {
                n != want
                    || (fixed && !marked_fixed)
                    || (!fixed && marked_fixed && !self.in_use(now))
            }
        };
        Ok((want, stale_or_upgrade.then_some((fixed, want))))
    }

    fn permits_used(&self) -> u64 {
        self.holders.iter().map(|(_, m)| weight_of(m)).sum()
    }

    fn promote(
        &mut self,
        now: u64,
        cap: u64,
        claim_ms: u64,
        self_member: Option<&str>,
        wakes: &mut Wakes,
    ) -> bool {
        let mut free = cap.saturating_sub(self.permits_used());
        let mut named = Vec::new();
        let mut self_granted = false;
        while free > 0 {
            let Some((_, m)) = self.queue.first().cloned() else {
                break;
            };
            let w = weight_of(&m);
            if w > free || self.lease_held(now) {
                break;
            }
            free -= w;
            let until = self.heartbeats.score(&m).unwrap_or(now + claim_ms);
            self.queue.remove(&m);
            self.heartbeats.remove(&m);
            self.holders.add(&m, until);
            if w >= cap {
                self.fence += 1;
            }
            if Some(m.as_str()) == self_member {
                self_granted = true;
            } else {
                named.push((token_of(&m), until));
            }
        }
        let fence = self.fence;
        wakes.named(
            named
                .into_iter()
                .map(|(t, until)| {
                    let grant = HandOff {
                        fence,
                        until: Some(until),
                    };
                    Named::granted(t, grant)
                })
                .collect(),
        );
        self_granted
    }

    fn refresh(&mut self) {
        if self.queue.is_empty() {
            self.tickets = 0;
            self.heartbeats = ZSet::default();
        }
    }

    fn q_acquire(
        &mut self,
        now: u64,
        claim: &Claim,
        wait: bool,
        wakes: &mut Wakes,
    ) -> Result<Acquire> {
        let (weight, capacity, resizable) = ticket(claim);
        let member = member_of(&claim.token, weight);
        let (lease, hb) = (ms(claim.lease), ms(claim.heartbeat));
        self.q_prune(now);
        let (cap, mark) = match self.capacity_for(now, capacity, resizable) {
            Ok(found) => found,
            Err(e) => {
                if self.queue.remove(&member) {
                    self.heartbeats.remove(&member);
                }
                self.refresh();
                return Err(e);
            }
        };
        let cap = u64::from(cap);
        let w = u64::from(weight);
        if w < 1 || w > cap {
            self.queue.remove(&member);
            self.heartbeats.remove(&member);
            self.promote(now, cap, hb, None, wakes);
            self.refresh();
            return Err(Refusal::TooManyPermits {
                asked: w,
                capacity: cap,
            }
            .into_error(""));
        }
        let granted = |fence: u64| {
            Ok(Acquire::Granted(Grant {
                fence,
                lease: Duration::from_millis(lease),
            }))
        };
        if self.holders.score(&member).is_some() {
            self.mark_capacity(mark);
            self.holders.add(&member, now + lease);
            self.refresh();
            return granted(self.fence);
        }
        if self.lease_held(now) {
            if self.queue.remove(&member) {
                self.heartbeats.remove(&member);
            }
            self.refresh();
            return Err(family_conflict(Family::LeaseLock));
        }
        if self.queue.score(&member).is_none() {
            if self.queue.is_empty() && self.permits_used() + w <= cap {
                if w >= cap {
                    self.fence += 1;
                }
                self.mark_capacity(mark);
                self.holders.add(&member, now + lease);
                self.refresh();
                return granted(self.fence);
            }
            if !wait {
                return Ok(Acquire::Busy(Busy {
                    retry_after: None,
                    position: None,
                    heartbeat_until: None,
                }));
            }
            self.tickets += 1;
            self.queue.add(&member, self.tickets);
        }
        let heartbeat_until = now + hb;
        self.heartbeats.add(&member, heartbeat_until);
        self.mark_capacity(mark);
        if self.promote(now, cap, hb, Some(&member), wakes) {
            self.holders.add(&member, now + lease);
            self.refresh();
            return granted(self.fence);
        }
        self.refresh();
        Ok(Acquire::Busy(Busy {
            retry_after: None,
            position: self.queue.rank(&member).map(|r| r as u64),
            heartbeat_until: Some(heartbeat_until),
        }))
    }

    fn mark_capacity(&mut self, mark: Option<(bool, u32)>) {
        if mark.is_some() {
            self.capacity_mark = mark;
        }
    }

    fn q_release(&mut self, now: u64, claim: &Claim, wakes: &mut Wakes) -> bool {
        let (weight, capacity, _) = ticket(claim);
        let member = member_of(&claim.token, weight);
        let cap = self.capacity(capacity);
        self.q_prune(now);
        let held = self.holders.remove(&member);
        self.queue.remove(&member);
        self.heartbeats.remove(&member);
        self.promote(now, cap, ms(claim.heartbeat), None, wakes);
        self.refresh();
        held
    }

    fn q_extend(&mut self, now: u64, claim: &Claim, lease: u64) -> bool {
        let member = member_of(&claim.token, ticket(claim).0);
        self.q_prune(now);
        if self.holders.score(&member).is_none() {
            return false;
        }
        self.holders.add(&member, now + lease);
        self.refresh();
        true
    }

    fn q_downgrade(&mut self, now: u64, claim: &Claim, wakes: &mut Wakes) -> Option<u64> {
        let (weight, capacity, _) = ticket(claim);
        let cap = self.capacity(capacity);
        self.q_prune(now);
        let member = member_of(&claim.token, weight);
        self.holders.score(&member)?;
        self.holders.remove(&member);
        self.holders
            .add(&member_of(&claim.token, 1), now + ms(claim.lease));
        self.promote(now, cap, ms(claim.heartbeat), None, wakes);
        self.refresh();
        Some(self.fence)
    }

    fn q_inspect(&self, now: u64) -> Snapshot {
        let holders = self
            .holders
            .iter()
            .filter(|(dl, _)| *dl > now)
            .map(|(dl, m)| HolderState {
                token: token_of(m),
                kind: HoldKind::Permits(weight_of(m) as u32),
                remaining_ms: dl - now,
            })
            .collect();
        let waiters = self
            .queue
            .iter()
            .filter_map(|(ticket, m)| {
                let hb = self.heartbeats.score(m)?;
                (hb > now).then(|| WaiterState {
                    token: token_of(m),
                    weight: weight_of(m) as u32,
                    ticket: *ticket,
                    heartbeat_remaining_ms: hb - now,
                })
            })
            .collect();
        Snapshot {
            now_ms: now,
            fence: self.fence,
            permits: self.permits,
            holders,
            waiters,
        }
    }

    /// True when nothing but the fence (and a stored permit count) is left.
    fn is_idle(&self) -> bool {
        self.writer.is_none()
            && self.readers.is_empty()
            && self.waiting_writers.is_empty()
            && self.holders.is_empty()
            && self.queue.is_empty()
    }
}

/// Fills in the lock's name of an error made inside a step.
fn named(e: Error, lock: &LockKeys) -> Error {
    match e {
        Error::FamilyConflict { held_by, .. } => Error::FamilyConflict {
            name: lock.name().to_owned(),
            held_by,
        },
        Error::CapacityConflict { detail, .. } => Error::CapacityConflict {
            name: lock.name().to_owned(),
            detail,
        },
        e => e,
    }
}

/// The error a script answers with RLMIXED; the store fills in the lock's name.
fn family_conflict(held_by: Family) -> Error {
    Refusal::Mixed { held_by }.into_error("")
}

fn ticket(claim: &Claim) -> (u32, u32, bool) {
    match claim.slot {
        Slot::Ticket {
            weight,
            capacity,
            resizable,
        } => (weight, capacity, resizable),
        _ => (1, 1, false),
    }
}

/// The error a script answers with RLCAPACITY; the store fills in the lock's name.
fn capacity_conflict(stored: impl std::fmt::Display, asked: u32) -> Error {
    Refusal::capacity(stored, asked).into_error("")
}

impl MemoryStore {
    /// An empty store with its own wake-up hub.
    pub fn new() -> Self {
        MemoryStore {
            locks: Arc::default(),
            hub: WakeHub::local(),
        }
    }

    /// Runs `f` on the lock's state at `now`, then delivers the wake-ups it produced.
    fn step<T>(
        &self,
        lock: &LockKeys,
        now: Option<u64>,
        f: impl FnOnce(&mut LockState, u64, &mut Wakes) -> T,
    ) -> T {
        let now = now.unwrap_or_else(wall_clock_ms);
        let mut wakes = Wakes::default();
        let out = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            let key = lock.channel();
            let state = locks.entry(key.clone()).or_default();
            let out = f(state, now, &mut wakes);
            // Like keys with TTLs, idle state goes away; the fence (and permit count) stay.
            if state.is_idle() && state.fence == 0 && state.permits.is_none() {
                locks.remove(&key);
            }
            out
        };
        let channel = lock.channel();
        for wake_up in wakes.0 {
            self.hub.dispatch(&channel, &wake_up.to_string());
        }
        out
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
        self.step(lock, now, |s, now, wakes| match claim.slot {
            Slot::Write | Slot::Read => s.rw_acquire(now, claim, wait, wakes),
            Slot::Ticket { .. } => s.q_acquire(now, claim, wait, wakes),
        })
        .map_err(|e| named(e, lock))
    }

    async fn release(&self, lock: &LockKeys, claim: &Claim, now: Option<u64>) -> Result<bool> {
        claim.check()?;
        Ok(self.step(lock, now, |s, now, wakes| match claim.slot {
            Slot::Write | Slot::Read => s.rw_release(now, &claim.token, wakes),
            Slot::Ticket { .. } => s.q_release(now, claim, wakes),
        }))
    }

    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
    ) -> Result<bool> {
        claim.check()?;
        Ok(self.step(lock, now, |s, now, wakes| match claim.slot {
            Slot::Write | Slot::Read => s.rw_extend(now, claim, ms(lease), wakes),
            Slot::Ticket { .. } => s.q_extend(now, claim, ms(lease)),
        }))
    }

    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> Result<Option<u64>> {
        claim.check()?;
        Ok(self.step(lock, now, |s, now, wakes| match claim.slot {
            Slot::Write | Slot::Read => s.rw_downgrade(now, claim, wakes),
            Slot::Ticket { .. } => s.q_downgrade(now, claim, wakes),
        }))
    }

    async fn inspect(&self, lock: &LockKeys, family: Family, now: Option<u64>) -> Result<Snapshot> {
        Ok(self.step(lock, now, |s, now, _| match family {
            Family::LeaseLock => s.rw_inspect(now),
            Family::TicketQueue => s.q_inspect(now),
        }))
    }

    async fn set_permits(
        &self,
        lock: &LockKeys,
        change: PermitChange,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> Result<u32> {
        self.step(lock, now, |s, now, wakes| {
            // Mirrors queue_set_permits.lua: the count is checked before anything changes.
            let count = change.apply(s.permits);
            let Some(permits) = u32::try_from(count)
                .ok()
                .filter(|n| (1..=MAX_PERMITS).contains(n))
            else {
                return Err(Refusal::PermitCount { count }.into_error(lock.name()));
            };
            s.q_prune(now);
            if let Some((true, n)) = s.capacity_mark {
                if s.in_use(now) {
                    return Err(capacity_conflict(format!("{n} (fixed)"), permits));
                }
            }
            s.permits = Some(permits);
            s.capacity_mark = None; // the stored count replaces the marker (one key in Redis)
            s.promote(now, u64::from(permits), ms(heartbeat), None, wakes);
            s.refresh();
            Ok(permits)
        })
        .map_err(|e| named(e, lock))
    }

    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> Result<u64> {
        Ok(self.step(lock, now, |s, _, wakes| {
            s.writer = None;
            s.readers = ZSet::default();
            s.holders = ZSet::default();
            s.fence += 1;
            wakes.all();
            s.fence
        }))
    }

    fn hub(&self) -> &Arc<WakeHub> {
        &self.hub
    }
}
