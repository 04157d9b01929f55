//! The ticket queue's state machine (FairLock, Semaphore, RwLock with the fair policy): the
//! in-memory mirror of `queue_common.lua` and the `queue_*.lua` steps, call by call.
//!
//! Pure: every step takes the lock's state, the time and the request, and returns the reply
//! with the wake-ups to publish ([`Step`]); nothing here reads a clock or publishes.
//! Members are encoded as the scripts encode them ([`Member`]), so the sorted sets order them
//! alike.

use std::time::Duration;

use super::zset::ZSet;
use super::{LockState, Step, WakeUps};
use crate::store::{
    ms, Acquire, Busy, Claim, Family, Grant, HoldKind, HolderState, PermitChange, Slot, Snapshot,
    WaiterState,
};
use crate::vocab::claim::MAX_PERMITS;
use crate::wire::{odd, HandOff, Member, Named, Refusal, Renewal};

/// The keys `h`, `q`, `hb`, `tk` and `cap` of one lock.
#[derive(Clone, Debug, Default)]
pub(super) struct TicketQueue {
    /// `h`: holder member -> lease deadline.
    holders: ZSet,
    /// `q`: waiter member -> ticket.
    queue: ZSet,
    /// `hb`: waiter member -> heartbeat deadline.
    heartbeats: ZSet,
    /// `tk`: the last ticket handed out.
    tickets: u64,
    /// `cap` as `<n>`: the count stored by `set_permits`.
    permits: Option<u32>,
    /// `cap` as `~<n>` / `=<n>`: the capacity marker left by the queue's claims while it is
    /// in use, as (fixed, n). `None` while `permits` is stored (one key in Redis).
    capacity_mark: Option<(bool, u32)>,
    /// The latest holder deadline the running step set (`H_UNTIL` in queue_common.lua).
    holders_until: Option<u64>,
}

/// The member of `token` taking `weight` permits.
fn member_of(token: &str, weight: u32) -> String {
    Member { token, weight }.to_string()
}

/// `weight_of` in queue_common.lua.
fn weight_of(member: &str) -> u64 {
    Member::parse(member).map_or(1, |m| u64::from(m.weight))
}

/// `token_of` in queue_common.lua.
fn token_of(member: &str) -> &str {
    Member::parse(member).map_or(member, |m| m.token)
}

/// A ticket claim's (weight, capacity, resizable); lease-lock slots never reach the queue.
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

impl TicketQueue {
    /// True while a holder has a live lease (`queue_held` in rw_common.lua).
    pub(super) fn held(&self, now: u64) -> bool {
        self.holders.iter().any(|(dl, _)| *dl > now)
    }

    /// The lease deadline of holder `member`, if it holds (live or not).
    pub(super) fn holder_deadline(&self, member: &str) -> Option<u64> {
        self.holders.score(member)
    }

    /// The latest deadline of the queue's keys (their TTLs end there), if any exists; none
    /// while a count is stored (`cap` without TTL).
    pub(super) fn last_deadline(&self) -> Option<u64> {
        if self.permits.is_some() {
            return Some(u64::MAX);
        }
        [self.holders.max_score(), self.heartbeats.max_score()]
            .into_iter()
            .flatten()
            .max()
    }

    /// True when no holder or waiter is left and no count is stored.
    pub(super) fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && self.permits.is_none()
    }

    /// The live holder members starting with `prefix`, in sorted-set order
    /// (force_release_holder.lua).
    pub(super) fn live_matching(&self, now: u64, prefix: &str) -> Vec<String> {
        self.holders
            .iter()
            .filter(|(dl, m)| *dl > now && m.starts_with(prefix))
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// Drops holder `member`; the live holders left (force_release_holder.lua).
    pub(super) fn drop_hold(&mut self, now: u64, member: &str) -> usize {
        self.holders.remove(member);
        self.holders.iter().filter(|(dl, _)| *dl > now).count()
    }

    /// Drops every holder, keeping the waiters (force_release.lua).
    pub(super) fn drop_holds(&mut self) {
        self.holders = ZSet::default();
    }

    /// `hold_until`: records `member` as a holder until `deadline`; `refresh_ttls` then keeps
    /// the fence alive as long (see [`LockState::keep_fence_for_holders`]).
    fn hold_until(&mut self, member: &str, deadline: u64) {
        self.holders.add(member, deadline);
        self.holders_until = Some(self.holders_until.map_or(deadline, |d| d.max(deadline)));
    }

    /// The latest holder deadline this step set, taken (`H_UNTIL` in queue_common.lua).
    pub(super) fn take_holders_until(&mut self) -> Option<u64> {
        self.holders_until.take()
    }

    /// `prune`: drops lapsed holders, and waiters whose heartbeat lapsed.
    fn prune(&mut self, now: u64) {
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

    /// `refresh_ttls`, as far as state goes: an empty queue forgets its tickets.
    fn refresh(&mut self) {
        if self.queue.is_empty() {
            self.tickets = 0;
            self.heartbeats = ZSet::default();
        }
    }

    /// `capacity`: the capacity in force for a claim already in the queue's state.
    fn capacity(&self, own: u32) -> u64 {
        let marked = self.capacity_mark.map(|(_, n)| n);
        u64::from(self.permits.or(marked).unwrap_or(own))
    }

    /// `in_use`: a live holder or any waiter.
    fn in_use(&self, now: u64) -> bool {
        self.held(now) || !self.queue.is_empty()
    }

    /// `capacity_for`: the capacity for a new claim, and the marker to leave if it is granted
    /// or queued.
    fn capacity_for(
        &self,
        now: u64,
        want: u32,
        resizable: bool,
    ) -> Result<(u32, Option<(bool, u32)>), Refusal> {
        let fixed = !resizable;
        if let Some(n) = self.permits {
            // A stored count may change at any set_permits: a fixed capacity cannot live on it.
            if fixed {
                return Err(Refusal::capacity(
                    format!("{n} (set_permits, resizable)"),
                    want,
                ));
            }
            return Ok((n, None));
        }
        let mark = self.capacity_mark;
        if let Some((_, n)) = mark
            && n != want
            && self.in_use(now)
        {
            return Err(Refusal::capacity(n, want));
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

    /// `mark_capacity`.
    fn mark_capacity(&mut self, mark: Option<(bool, u32)>) {
        if mark.is_some() {
            self.capacity_mark = mark;
        }
    }

    /// `permits_used`.
    fn permits_used(&self) -> u64 {
        self.holders.iter().map(|(_, m)| weight_of(m)).sum()
    }
}

/// `promote`: grants, in ticket order, the waiters at the head that fit in the free permits,
/// each until its own heartbeat deadline, and names them with their grants (except
/// `self_member`). True if `self_member` was granted.
fn promote(
    state: &mut LockState,
    now: u64,
    cap: u64,
    claim_ms: u64,
    self_member: Option<&str>,
    wakes: &mut WakeUps,
) -> bool {
    let mut free = cap.saturating_sub(state.queue.permits_used());
    let mut named = Vec::new();
    let mut self_granted = false;
    while free > 0 {
        let q = &mut state.queue;
        let Some((_, m)) = q.queue.first().cloned() else {
            break;
        };
        let w = weight_of(&m);
        // Never granted beside a lease-lock holder.
        if w > free || state.lease.held(now) {
            break;
        }
        free -= w;
        let until = q.heartbeats.score(&m).unwrap_or(odd(now + claim_ms));
        q.queue.remove(&m);
        q.heartbeats.remove(&m);
        q.hold_until(&m, until);
        if w >= cap {
            state.next_fence(now, until);
        }
        if Some(m.as_str()) == self_member {
            self_granted = true;
        } else {
            named.push((token_of(&m).to_owned(), until));
        }
    }
    let fence = state.fence;
    wakes.granted(
        named
            .into_iter()
            .map(|(token, until)| {
                let grant = HandOff {
                    fence,
                    until: Some(until),
                };
                Named::granted(token, grant)
            })
            .collect(),
    );
    self_granted
}

/// queue_acquire.lua: one attempt to take the claim's permits.
pub(super) fn acquire(
    state: &mut LockState,
    now: u64,
    claim: &Claim,
    wait: bool,
) -> Step<Result<Acquire, Refusal>> {
    let mut wakes = WakeUps::default();
    let reply = attempt(state, now, claim, wait, &mut wakes);
    wakes.reply(reply)
}

fn attempt(
    state: &mut LockState,
    now: u64,
    claim: &Claim,
    wait: bool,
    wakes: &mut WakeUps,
) -> Result<Acquire, Refusal> {
    let (weight, capacity, resizable) = ticket(claim);
    let member = member_of(&claim.token, weight);
    let (lease, hb) = (ms(claim.lease), ms(claim.heartbeat));
    let q = &mut state.queue;
    q.prune(now);
    let (cap, mark) = match q.capacity_for(now, capacity, resizable) {
        Ok(found) => found,
        Err(refusal) => {
            if q.queue.remove(&member) {
                q.heartbeats.remove(&member);
            }
            q.refresh();
            return Err(refusal);
        }
    };
    let cap = u64::from(cap);
    let w = u64::from(weight);
    if w < 1 || w > cap {
        q.queue.remove(&member);
        q.heartbeats.remove(&member);
        promote(state, now, cap, hb, None, wakes);
        state.queue.refresh();
        return Err(Refusal::TooManyPermits {
            asked: w,
            capacity: cap,
        });
    }
    let granted = |fence: u64| {
        Ok(Acquire::Granted(Grant {
            fence,
            lease: Duration::from_millis(lease),
        }))
    };
    if let Some(held) = q.holders.score(&member) {
        q.mark_capacity(mark);
        q.hold_until(&member, Renewal::regrant(held).deadline(held, now, lease));
        q.refresh();
        return granted(state.fence);
    }
    if state.lease.held(now) {
        if q.queue.remove(&member) {
            q.heartbeats.remove(&member);
        }
        q.refresh();
        return Err(Refusal::Mixed {
            held_by: Family::LeaseLock,
        });
    }
    if q.queue.score(&member).is_none() {
        if q.queue.is_empty() && q.permits_used() + w <= cap {
            if w >= cap {
                state.next_fence(now, now + lease);
            }
            let q = &mut state.queue;
            q.mark_capacity(mark);
            q.hold_until(&member, now + lease);
            q.refresh();
            return granted(state.fence);
        }
        if !wait {
            return Ok(Acquire::Busy(Busy {
                retry_after: None,
                position: None,
                heartbeat_until: None,
                token_released: false,
            }));
        }
        q.tickets += 1;
        q.queue.add(&member, q.tickets);
    }
    q.mark_capacity(mark);
    heartbeat(state, now, &member, (cap, hb, lease), wakes)
}

/// A queued claim's attempt: its heartbeat, then the grant if it is at the head and fits,
/// else its place and, at the head, when the first holder's lease ends (it may then fit).
fn heartbeat(
    state: &mut LockState,
    now: u64,
    member: &str,
    (cap, hb, lease): (u64, u64, u64),
    wakes: &mut WakeUps,
) -> Result<Acquire, Refusal> {
    let heartbeat_until = odd(now + hb);
    state.queue.heartbeats.add(member, heartbeat_until);
    if promote(state, now, cap, hb, Some(member), wakes) {
        let q = &mut state.queue;
        q.hold_until(member, now + lease);
        q.refresh();
        return Ok(Acquire::Granted(Grant {
            fence: state.fence,
            lease: Duration::from_millis(lease),
        }));
    }
    let q = &mut state.queue;
    q.refresh();
    let position = q.queue.rank(member).map(|r| r as u64);
    let retry_after = match position {
        Some(0) => q
            .holders
            .first()
            .map(|(deadline, _)| Duration::from_millis(deadline.saturating_sub(now))),
        _ => None,
    };
    Ok(Acquire::Busy(Busy {
        retry_after,
        position,
        heartbeat_until: Some(heartbeat_until),
        token_released: false,
    }))
}

/// queue_release.lua: gives up the claim's hold and queue place, then grants the waiters
/// that now fit; true if it held a live lease.
pub(super) fn release(state: &mut LockState, now: u64, claim: &Claim) -> Step<bool> {
    let mut wakes = WakeUps::default();
    let (weight, capacity, _) = ticket(claim);
    let member = member_of(&claim.token, weight);
    let q = &mut state.queue;
    let cap = q.capacity(capacity);
    q.prune(now);
    // Whatever form the hold has now: a downgrade turned `token#w` into `token`.
    let held = q.holders.remove(&member) | q.holders.remove(&claim.token);
    q.queue.remove(&member);
    q.heartbeats.remove(&member);
    promote(state, now, cap, ms(claim.heartbeat), None, &mut wakes);
    state.queue.refresh();
    wakes.reply(held)
}

/// queue_extend.lua: renews a live hold to `lease` ms from now, as `how` says
/// ([`Renewal::deadline`]).
pub(super) fn extend(
    state: &mut LockState,
    now: u64,
    claim: &Claim,
    lease: u64,
    how: Renewal,
) -> Step<bool> {
    let member = member_of(&claim.token, ticket(claim).0);
    let q = &mut state.queue;
    q.prune(now);
    let held = q.holders.score(&member);
    let renewed = held.is_some();
    if let Some(held) = held {
        q.hold_until(&member, how.deadline(held, now, lease));
        q.refresh();
        // A leader's value lives as long as its lease.
        if state.leader.is_some() {
            let until = super::expiry(now, now + lease, state.pad);
            state.leader_until = state.leader_until.max(until);
        }
    }
    WakeUps::default().reply(renewed)
}

/// queue_downgrade.lua: a live exclusive hold becomes a one-permit hold, then the waiters
/// that now fit are granted; the fence of the exclusive hold.
pub(super) fn downgrade(state: &mut LockState, now: u64, claim: &Claim) -> Step<Option<u64>> {
    let mut wakes = WakeUps::default();
    let (weight, capacity, _) = ticket(claim);
    let q = &mut state.queue;
    let cap = q.capacity(capacity);
    q.prune(now);
    let member = member_of(&claim.token, weight);
    if q.holders.score(&member).is_none() {
        return wakes.reply(None);
    }
    q.holders.remove(&member);
    q.hold_until(&member_of(&claim.token, 1), now + ms(claim.lease));
    promote(state, now, cap, ms(claim.heartbeat), None, &mut wakes);
    state.queue.refresh();
    wakes.reply(Some(state.fence))
}

/// queue_set_permits.lua: applies `change` to the stored count (or to its base while none is
/// stored), refusing a count outside 1 to [`MAX_PERMITS`] and any change while a FairLock or
/// fair RwLock uses the queue; then grants the waiters that now fit. The new count.
pub(super) fn set_permits(
    state: &mut LockState,
    now: u64,
    change: PermitChange,
    heartbeat: u64,
) -> Step<Result<u32, Refusal>> {
    let mut wakes = WakeUps::default();
    let count = change.apply(state.queue.permits);
    let Some(permits) = u32::try_from(count)
        .ok()
        .filter(|n| (1..=MAX_PERMITS).contains(n))
    else {
        return wakes.reply(Err(Refusal::PermitCount { count }));
    };
    let q = &mut state.queue;
    q.prune(now);
    if let Some((true, n)) = q.capacity_mark
        && q.in_use(now)
    {
        return wakes.reply(Err(Refusal::capacity(format!("{n} (fixed)"), permits)));
    }
    q.permits = Some(permits);
    q.capacity_mark = None; // the stored count replaces the marker (one key in Redis)
    promote(state, now, u64::from(permits), heartbeat, None, &mut wakes);
    state.queue.refresh();
    wakes.reply(Ok(permits))
}

/// queue_inspect.lua: the live state, changing nothing.
pub(super) fn inspect(state: &LockState, now: u64) -> Snapshot {
    let q = &state.queue;
    let holders = q
        .holders
        .iter()
        .filter(|(dl, _)| *dl > now)
        .map(|(dl, m)| HolderState {
            token: token_of(m).to_owned(),
            kind: HoldKind::Permits(weight_of(m) as u32),
            remaining_ms: dl - now,
        })
        .collect();
    let waiters = q
        .queue
        .iter()
        .filter_map(|(ticket, m)| {
            let hb = q.heartbeats.score(m)?;
            (hb > now).then(|| WaiterState {
                token: token_of(m).to_owned(),
                weight: weight_of(m) as u32,
                ticket: *ticket,
                heartbeat_remaining_ms: hb - now,
            })
        })
        .collect();
    Snapshot {
        now_ms: now,
        fence: state.fence,
        permits: q.permits,
        holders,
        waiters,
        // What `queue_inspect.lua` reports of a foreign `cap`: memory holds no foreign data.
        foreign_capacity: false,
    }
}
