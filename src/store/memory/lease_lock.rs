//! The lease lock's state machine (Mutex, RwLock with writer or reader preference): the
//! in-memory mirror of `rw_common.lua` and the `rw_*.lua` steps, call by call.
//!
//! Pure: every step takes the lock's state, the time and the request, and returns the reply
//! with the wake-ups to publish ([`Step`]); nothing here reads a clock or publishes.

use std::time::Duration;

use super::zset::ZSet;
use super::{LockState, Step, WakeUps};
use crate::store::{
    ms, Acquire, Busy, Claim, Family, Grant, HoldKind, HolderState, Policy, Slot, Snapshot,
    WaiterState,
};
use crate::wire::{odd, HandOff, Named, Refusal, Renewal};

/// The keys `w`, `r` and `wq` of one lock.
#[derive(Clone, Debug, Default)]
pub(super) struct LeaseLock {
    /// `w`: the writer (or mutex holder) and its lease deadline.
    writer: Option<(String, u64)>,
    /// `r`: reader token -> lease deadline.
    readers: ZSet,
    /// `wq`: waiting writer token -> heartbeat deadline (the writer-preference flag).
    waiting_writers: ZSet,
}

impl LeaseLock {
    /// `live_writer` in rw_common.lua.
    fn live_writer(&self, now: u64) -> Option<(String, u64)> {
        self.writer.clone().filter(|(_, dl)| *dl > now)
    }

    /// True while a writer or a reader holds a live lease (`lease_held` in queue_common.lua).
    pub(super) fn held(&self, now: u64) -> bool {
        self.live_writer(now).is_some() || self.readers.iter().any(|(dl, _)| *dl > now)
    }

    /// The latest deadline of the three keys (their TTLs end there), if any exists.
    pub(super) fn last_deadline(&self) -> Option<u64> {
        let writer = self.writer.as_ref().map(|(_, dl)| *dl);
        [
            writer,
            self.readers.max_score(),
            self.waiting_writers.max_score(),
        ]
        .into_iter()
        .flatten()
        .max()
    }

    /// True when none of the three keys exists.
    pub(super) fn is_empty(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty() && self.waiting_writers.is_empty()
    }

    /// The live holds whose token starts with `prefix`, writer first, then readers in
    /// sorted-set order (force_release_holder.lua).
    pub(super) fn live_matching(&self, now: u64, prefix: &str) -> Vec<String> {
        let writer = self.live_writer(now).map(|(t, _)| t);
        let readers = self.readers.iter().filter(|(dl, _)| *dl > now);
        writer
            .into_iter()
            .chain(readers.map(|(_, t)| t.clone()))
            .filter(|t| t.starts_with(prefix))
            .collect()
    }

    /// Drops the live hold of `token`; the live holds left (force_release_holder.lua).
    pub(super) fn drop_hold(&mut self, now: u64, token: &str) -> usize {
        if self.writer.as_ref().is_some_and(|(t, _)| t == token) {
            self.writer = None;
            return 0;
        }
        self.readers.remove(token);
        self.readers.iter().filter(|(dl, _)| *dl > now).count()
    }

    /// Drops the writer and every reader, keeping the waiting writers (force_release.lua).
    pub(super) fn drop_holds(&mut self) {
        self.writer = None;
        self.readers = ZSet::default();
    }

    /// `prune` in rw_common.lua: when the last waiting writer lapses, the readers it held
    /// back are woken.
    fn prune(&mut self, now: u64, wakes: &mut WakeUps) {
        self.readers.remove_up_to(now);
        let waiting = self.waiting_writers.len();
        if waiting > 0 {
            let gone = self.waiting_writers.remove_up_to(now).len();
            if gone == waiting {
                wakes.all();
            }
        }
    }

    /// Removes `token`'s waiting-writer announcement (`leave_waiting` in rw_common.lua): the
    /// readers it held back are woken when it was the last.
    fn leave_waiting(&mut self, token: &str, wakes: &mut WakeUps) {
        if self.waiting_writers.remove(token) && self.waiting_writers.is_empty() {
            wakes.all();
        }
    }
}

/// Hands the free lock to the first live waiting writer until its heartbeat deadline, and
/// names it with the grant (`hand_over` in rw_common.lua); false when none waits.
fn hand_over(state: &mut LockState, now: u64, wakes: &mut WakeUps) -> bool {
    let Some((until, token)) = state
        .lease
        .waiting_writers
        .iter()
        .find(|(dl, _)| *dl > now)
        .cloned()
    else {
        return false;
    };
    if state.queue.held(now) {
        return false;
    }
    state.lease.waiting_writers.remove(&token);
    state.next_fence(now, until);
    state.lease.writer = Some((token.clone(), until));
    let grant = HandOff {
        fence: state.fence,
        until: Some(until),
    };
    wakes.granted(vec![Named::granted(token, grant)]);
    true
}

/// rw_acquire.lua: one attempt to take `claim`.
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

/// The refusal of a lease-lock claim on a name held through the ticket queue.
const QUEUE_HELD: Refusal = Refusal::Mixed {
    held_by: Family::TicketQueue,
};

fn attempt(
    state: &mut LockState,
    now: u64,
    claim: &Claim,
    wait: bool,
    wakes: &mut WakeUps,
) -> Result<Acquire, Refusal> {
    let lease = ms(claim.lease);
    let live = state.lease.live_writer(now);
    state.lease.prune(now, wakes);
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
            token_released: false,
        })
    };
    let lock = &mut state.lease;
    match claim.slot {
        Slot::Write => {
            if let Some((tok, held)) = &live
                && *tok == claim.token
            {
                let until = Renewal::regrant(*held).deadline(*held, now, lease);
                lock.writer = Some((claim.token.clone(), until));
                state.keep_fence(now, until);
                return Ok(granted(state.fence));
            }
            let retry = match &live {
                Some((_, dl)) => Some(dl - now),
                None => lock.readers.max_score().map(|m| m - now),
            };
            if retry.is_some() {
                let announce = wait && claim.policy == Policy::Writer;
                let announced = announce.then(|| odd(now + ms(claim.heartbeat)));
                if let Some(until) = announced {
                    lock.waiting_writers.add(&claim.token, until);
                }
                return Ok(busy(retry, announced));
            }
            if state.queue.held(now) {
                state.lease.leave_waiting(&claim.token, wakes);
                return Err(QUEUE_HELD);
            }
            state.next_fence(now, now + lease);
            let lock = &mut state.lease;
            lock.writer = Some((claim.token.clone(), now + lease));
            // Only writer-preference claims announce themselves, so only they leave.
            if claim.policy == Policy::Writer {
                lock.waiting_writers.remove(&claim.token);
            }
            Ok(granted(state.fence))
        }
        _ => {
            if let Some((_, dl)) = live {
                return Ok(busy(Some(dl - now), None));
            }
            // A reader already (a retry): renewed, never shortened.
            let until = match lock.readers.score(&claim.token) {
                Some(held) => Renewal::Keep.deadline(held, now, lease),
                None if claim.policy == Policy::Writer && !lock.waiting_writers.is_empty() => {
                    return Ok(busy(None, None));
                }
                None if state.queue.held(now) => return Err(QUEUE_HELD),
                None => now + lease,
            };
            state.lease.readers.add(&claim.token, until);
            state.keep_fence(now, until);
            Ok(granted(state.fence))
        }
    }
}

/// rw_release.lua: gives up everything `token` has; true if it held a live lease.
pub(super) fn release(state: &mut LockState, now: u64, token: &str) -> Step<bool> {
    let mut wakes = WakeUps::default();
    let live = state.lease.live_writer(now);
    state.lease.prune(now, &mut wakes);
    let mut held = false;
    if live.as_ref().is_some_and(|(t, _)| t == token) {
        state.lease.writer = None;
        held = true;
        if !hand_over(state, now, &mut wakes) {
            wakes.all();
        }
    } else {
        let lock = &mut state.lease;
        if lock.writer.as_ref().is_some_and(|(t, _)| t == token) {
            lock.writer = None;
        }
        if lock.readers.remove(token) {
            held = true;
            if lock.readers.is_empty() && !hand_over(state, now, &mut wakes) {
                wakes.all();
            }
        }
    }
    state.lease.leave_waiting(token, &mut wakes);
    wakes.reply(held)
}

/// rw_extend.lua: renews the token's hold of the claim's slot only, so a late renewal of a
/// write hold never touches the read hold a downgrade made of it; the deadline as `how` says
/// ([`Renewal::deadline`]).
pub(super) fn extend(
    state: &mut LockState,
    now: u64,
    claim: &Claim,
    lease: u64,
    how: Renewal,
) -> Step<bool> {
    let mut wakes = WakeUps::default();
    let token = claim.token.as_str();
    let lock = &mut state.lease;
    let live = lock.live_writer(now);
    lock.prune(now, &mut wakes);
    let renewed = if claim.slot == Slot::Write {
        let mine = live.filter(|(t, _)| t == token);
        if let Some((_, held)) = mine {
            let deadline = how.deadline(held, now, lease);
            lock.writer = Some((token.to_owned(), deadline));
            state.keep_fence(now, deadline);
        }
        mine.is_some()
    } else if let Some(held) = lock.readers.score(token) {
        let deadline = how.of_reader().deadline(held, now, lease);
        lock.readers.add(token, deadline);
        state.keep_fence(now, deadline);
        true
    } else {
        false
    };
    wakes.reply(renewed)
}

/// rw_downgrade.lua: the token's live write hold becomes a read hold; the fence of the write.
pub(super) fn downgrade(state: &mut LockState, now: u64, claim: &Claim) -> Step<Option<u64>> {
    let mut wakes = WakeUps::default();
    let lock = &mut state.lease;
    let live = lock.live_writer(now);
    lock.prune(now, &mut wakes);
    if live.is_none_or(|(t, _)| t != claim.token) {
        return wakes.reply(None);
    }
    lock.writer = None;
    lock.readers.add(&claim.token, now + ms(claim.lease));
    state.keep_fence(now, now + ms(claim.lease));
    wakes.all();
    wakes.reply(Some(state.fence))
}

/// rw_inspect.lua: the live state, changing nothing.
pub(super) fn inspect(state: &LockState, now: u64) -> Snapshot {
    let lock = &state.lease;
    let mut holders = Vec::new();
    if let Some((token, dl)) = lock.live_writer(now) {
        holders.push(HolderState {
            token,
            kind: HoldKind::Write,
            remaining_ms: dl - now,
        });
    }
    for (dl, token) in lock.readers.iter().filter(|(dl, _)| *dl > now) {
        holders.push(HolderState {
            token: token.clone(),
            kind: HoldKind::Read,
            remaining_ms: dl - now,
        });
    }
    let waiters = lock
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
        fence: state.fence,
        permits: None,
        holders,
        waiters,
        foreign_capacity: false,
    }
}

/// What the first pass of multi_acquire.lua finds for one part: `None` when the claim can
/// take it, else the refusal (a busy reply with its retry hint, or the family conflict).
/// Changes nothing but what `prune` drops, for read parts, as the script does.
pub(super) fn part_refusal(
    state: &mut LockState,
    now: u64,
    claim: &Claim,
    slot: Slot,
) -> Step<Option<Result<Option<u64>, Refusal>>> {
    let mut wakes = WakeUps::default();
    let token = claim.token.as_str();
    let live = state.lease.live_writer(now);
    let mine = live.as_ref().is_some_and(|(t, _)| t == token);
    let refusal = if slot == Slot::Write {
        if mine {
            None
        } else if let Some((_, dl)) = live {
            Some(Ok(Some(dl - now)))
        } else if let Some(latest) = state
            .lease
            .readers
            .iter()
            .map(|(dl, _)| *dl)
            .filter(|dl| *dl > now)
            .max()
        {
            Some(Ok(Some(latest - now)))
        } else if state.queue.held(now) {
            Some(Err(Refusal::Mixed {
                held_by: Family::TicketQueue,
            }))
        } else {
            None
        }
    } else if let Some((_, dl)) = live {
        Some(Ok(Some(dl - now)))
    } else {
        state.lease.prune(now, &mut wakes);
        let lock = &state.lease;
        if lock.readers.score(token).is_some() {
            None
        } else if claim.policy == Policy::Writer && !lock.waiting_writers.is_empty() {
            Some(Ok(None))
        } else if state.queue.held(now) {
            Some(Err(Refusal::Mixed {
                held_by: Family::TicketQueue,
            }))
        } else {
            None
        }
    };
    wakes.reply(refusal)
}

/// The second pass of multi_acquire.lua for one part the first pass found free: grants it
/// (renews it with the same fence when the token holds it already); the fence.
pub(super) fn grant_part(state: &mut LockState, now: u64, claim: &Claim, slot: Slot) -> u64 {
    let token = claim.token.as_str();
    let lease = ms(claim.lease);
    let deadline = now + lease;
    if slot == Slot::Write {
        let mine = state
            .lease
            .live_writer(now)
            .filter(|(t, _)| t == token)
            .map(|(_, held)| held);
        let deadline = match mine {
            // Already ours (a retry): renewed as rw_acquire's retry is.
            Some(held) => {
                let until = Renewal::regrant(held).deadline(held, now, lease);
                state.keep_fence(now, until);
                until
            }
            None => {
                state.next_fence(now, deadline);
                deadline
            }
        };
        state.lease.writer = Some((token.to_owned(), deadline));
    } else {
        let until = match state.lease.readers.score(token) {
            Some(held) => Renewal::Keep.deadline(held, now, lease),
            None => deadline,
        };
        state.lease.readers.add(token, until);
        state.keep_fence(now, until);
    }
    state.fence
}
