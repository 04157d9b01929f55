//! The rate limiter's steps: the in-memory mirror of `rate_acquire.lua`, `rate_cancel.lua`
//! and `rate_inspect.lua` (GCRA kept exactly, head-only admission over a queue of
//! heartbeating waiters; see `docs/decisions/rate-limiter.md`). Same arithmetic, same ticket
//! numbering, same wake-ups as the scripts.

use super::zset::ZSet;
use super::{Step, WakeUps};
use crate::vocab::bugs::{planted, Bug};
use crate::vocab::claim::Busy;
use crate::vocab::rate::{Rate, RateClaim, RateDecision, RateSnapshot, RateWaiterState};
use crate::wire::rate::{parse_rate_member, rate_member};
use crate::wire::{Named, WakeUp};

/// The most admissions a refusal's estimate counts ahead of a request (`rate_acquire.lua`).
const MAX_ESTIMATE_WEIGHTS: u64 = 64_000_000;

/// Someone else's value at one key of a limiter (`MemoryStore::plant_rate_foreign`, as a
/// write by someone else plants it on Redis): the key's suffix (`rt`, `rq`, `rhb`, `rtk`,
/// `ra`) and the Redis type of the value (`string`, `list`). A step fails with it where its
/// script first uses that key; the scripts read or prune every key before they write it, so
/// what the step did before is at most a prune.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Foreign {
    pub key: String,
    pub found: String,
}

/// Why a step of the limiter failed.
#[derive(Debug)]
pub(super) enum RateError {
    /// `RLPERMITS`: the permits asked for (`1 ..= burst` is allowed).
    Permits(u64),
    /// `WRONGTYPE` or `RLCORRUPT`: a foreign value at a key the step used.
    Foreign(Foreign),
}

/// The keys of one limiter: `rt`, `rq`, `rhb`, `rtk`, `ra`.
#[derive(Clone, Debug, Default)]
pub(super) struct RateLimit {
    /// `rt`: (tat_ms, frac, count), the theoretical arrival time tat_ms + frac/count.
    tat: Option<(u64, u64, u64)>,
    /// `rq`: waiter member -> ticket.
    queue: ZSet,
    /// `rhb`: waiter member -> heartbeat deadline.
    heartbeats: ZSet,
    /// `rtk`: the last ticket handed out (0: none; reset with the last waiter).
    tickets: u64,
    /// `ra`: admitted member -> the end of its heartbeat window after the admission, for a
    /// retry after a lost reply.
    admitted: ZSet,
    /// A key holding someone else's value (one at a time), which no step writes or deletes.
    foreign: Option<Foreign>,
}

/// Returns the step's failure if `$state` holds a foreign value at `$key` (the script's first
/// use of that key fails the step there, and the step publishes nothing).
macro_rules! uses {
    ($state:expr, $key:literal) => {
        if let Some(foreign) = $state.foreign_at($key) {
            return WakeUps::default().reply(Err(RateError::Foreign(foreign)));
        }
    };
}

/// A theoretical arrival time: `ms + frac/count` (`0 <= frac < count`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tat {
    ms: u64,
    frac: u64,
}

impl Tat {
    /// Advanced by `weight` admissions of `period/count` ms each.
    fn advance(self, weight: u64, rate: &Rate) -> Tat {
        let f = self.frac + weight * rate.period_ms();
        Tat {
            ms: self.ms + f / rate.count(),
            frac: f % rate.count(),
        }
    }

    /// Ms from `now` until an admission that leaves tat here fits (<= 0: it fits now).
    fn wait_for(self, now: u64, rate: &Rate) -> i64 {
        let mut burst = rate.burst_size();
        if planted(Bug::RateBurstOffByOne) {
            burst += 1;
        }
        let slack = (burst * rate.period_ms()) as i64 - self.frac as i64;
        self.ms as i64 - slack.div_euclid(rate.count() as i64) - now as i64
    }
}

impl RateLimit {
    /// The latest deadline the limiter's keys live to, if any exists: the theoretical arrival
    /// time and the waiters' heartbeats. (An admission kept for a retry is kept no longer
    /// here once the rest expired.)
    pub(super) fn last_deadline(&self) -> Option<u64> {
        let tat = self.tat.map(|(ms, _, _)| ms);
        [tat, self.heartbeats.max_score()]
            .into_iter()
            .flatten()
            .max()
    }

    /// True when no key is left (a foreign value has no TTL: it stays; heartbeat entries
    /// outlive their queue when someone else deleted `rq`).
    pub(super) fn is_idle(&self) -> bool {
        self.tat.is_none()
            && self.queue.is_empty()
            && self.heartbeats.is_empty()
            && self.tickets == 0
            && self.admitted.is_empty()
            && self.foreign.is_none()
    }

    /// The foreign value, which outlives every key TTL (taken before the lock's state is
    /// dropped for its expired keys, and put back after).
    pub(super) fn take_foreign(&mut self) -> Option<Foreign> {
        self.foreign.take()
    }

    pub(super) fn put_foreign(&mut self, foreign: Option<Foreign>) {
        self.foreign = foreign;
    }

    /// The foreign value at `key`, if the limiter holds one there.
    fn foreign_at(&self, key: &str) -> Option<Foreign> {
        self.foreign.clone().filter(|f| f.key == key)
    }

    #[cfg(feature = "testing")]
    /// Someone else's value replaces the key `key` (its content is gone, as after a `SET` on
    /// Redis) and stays until [`RateLimit::delete_foreign`]; one key at a time.
    pub(super) fn plant_foreign(&mut self, key: &str, found: &str) {
        match key {
            "rt" => self.tat = None,
            "rq" => self.queue = ZSet::default(),
            "rhb" => self.heartbeats = ZSet::default(),
            "rtk" => self.tickets = 0,
            "ra" => self.admitted = ZSet::default(),
            _ => panic!("no rate limiter key `{key}`"),
        }
        self.foreign = Some(Foreign {
            key: key.to_owned(),
            found: found.to_owned(),
        });
    }

    #[cfg(feature = "testing")]
    /// The foreign value is deleted (`DEL`): its key is absent.
    pub(super) fn delete_foreign(&mut self) {
        self.foreign = None;
    }

    #[cfg(feature = "testing")]
    /// Someone else adds `member` to the queue at `ticket` (`ZADD rq`), with a heartbeat
    /// entry until `heartbeat_until` (`ZADD rhb`) or none.
    pub(super) fn plant_member(&mut self, member: &str, ticket: u64, heartbeat_until: Option<u64>) {
        self.queue.add(member, ticket);
        if let Some(deadline) = heartbeat_until {
            self.heartbeats.add(member, deadline);
        }
    }

    /// `read_tat`: the stored tat for `rate`, never before `now` (a stale one is forgotten,
    /// as its key would have expired).
    fn tat(&mut self, now: u64, rate: &Rate) -> Tat {
        let tat = read_tat(self.tat, now, rate);
        if self.tat.is_some_and(|(ms, _, _)| ms < now) {
            self.tat = None;
        }
        tat
    }

    #[cfg(feature = "testing")]
    /// Loses the heartbeat entry of `member`, or every entry (`None`): what someone else's
    /// `ZREM` or `DEL` at `rhb` does on Redis. The queue keeps the member.
    pub(super) fn lose_heartbeats(&mut self, member: Option<&str>) {
        match member {
            Some(member) => {
                self.heartbeats.remove(member);
            }
            None => self.heartbeats = ZSet::default(),
        }
    }

    fn head(&self) -> Option<String> {
        self.queue.first().map(|(_, m)| m.clone())
    }

    /// `live_head`: the first waiter with a heartbeat entry, dropping the members before it
    /// that have none (only the head is admitted, so only there could they hold anyone
    /// back). The lock queue grants such a head for one claim window instead, which lapses
    /// as its heartbeat would; an admission cannot be given on trust (it is charged to the
    /// rate for good), so the limiter drops the member as a lapsed waiter.
    fn live_head(&mut self) -> Option<String> {
        while let Some(head) = self.head() {
            if self.heartbeats.score(&head).is_some()
                || planted(Bug::RateKeepsMembersWithoutHeartbeat)
            {
                return Some(head);
            }
            self.queue.remove(&head);
        }
        None
    }

    /// Drops the waiters whose heartbeat lapsed, wherever they stand, and the members without
    /// a heartbeat entry at the head. A queue empty when the step began (`head_before`) has
    /// nothing to prune, and its `rhb` is not touched.
    fn prune(&mut self, head_before: Option<&str>, now: u64) {
        if head_before.is_none() {
            return;
        }
        for member in self.heartbeats.remove_up_to(now) {
            self.queue.remove(&member);
        }
        self.live_head();
    }

    fn leave(&mut self, member: &str) -> bool {
        self.heartbeats.remove(member);
        self.queue.remove(member)
    }

    /// `leave` in rate_acquire.lua: the caller leaves the queue (`in_queue`: it may stand in
    /// it) and the queue settles; nothing is touched on a queue that was empty when the step
    /// began.
    fn leave_and_settle(
        &mut self,
        head_before: Option<String>,
        member: &str,
        in_queue: bool,
        wakes: &mut WakeUps,
    ) {
        if head_before.is_none() {
            if planted(Bug::RateDeletesForeignQueueKeys) {
                self.queue = ZSet::default();
                self.heartbeats = ZSet::default();
                self.tickets = 0;
                if self
                    .foreign
                    .as_ref()
                    .is_some_and(|f| f.key != "rt" && f.key != "ra")
                {
                    self.foreign = None;
                }
            }
            return;
        }
        if in_queue {
            self.leave(member);
        }
        self.settle(head_before, member, wakes);
    }

    /// `settle_queue`: the ticket counter goes with the last waiter (a queue empty when the
    /// step began has none to drop); a new head other than `self_member` is named in a
    /// wake-up.
    fn settle(&mut self, head_before: Option<String>, self_member: &str, wakes: &mut WakeUps) {
        let Some(head) = self.live_head() else {
            if head_before.is_some() {
                self.heartbeats = ZSet::default();
                self.tickets = 0;
            }
            return;
        };
        if Some(&head) != head_before.as_ref() && head != self_member {
            let (token, _) = parse_rate_member(&head);
            wakes.0.push(WakeUp::Named(vec![Named {
                token: token.to_owned().into(),
                grant: None,
            }]));
        }
    }

    /// The weights of the first `ahead` waiters.
    fn weights_ahead(&self, ahead: usize) -> u64 {
        self.queue
            .iter()
            .take(ahead)
            .map(|(_, m)| parse_rate_member(m).1)
            .fold(0, u64::saturating_add)
    }
}

/// `read_tat` of the stored (ms, frac, count): a fraction stored under another count is
/// rounded up to the next whole ms; never before `now`.
fn read_tat(stored: Option<(u64, u64, u64)>, now: u64, rate: &Rate) -> Tat {
    let Some((mut ms, mut frac, count)) = stored else {
        return Tat { ms: now, frac: 0 };
    };
    if count != rate.count() && frac > 0 {
        (ms, frac) = (ms + 1, 0);
    }
    if ms < now {
        return Tat { ms: now, frac: 0 };
    }
    Tat { ms, frac }
}

/// rate_acquire.lua. A foreign value fails the step where the script first uses its key.
pub(super) fn acquire(
    state: &mut RateLimit,
    now: u64,
    claim: &RateClaim,
    wait: bool,
) -> Step<Result<RateDecision, RateError>> {
    let mut wakes = WakeUps::default();
    let rate = &claim.rate;
    let member = rate_member(&claim.token, claim.permits);
    uses!(state, "rq");
    let head_before = state.head();
    if head_before.is_some() {
        uses!(state, "rtk");
        uses!(state, "rhb");
    }
    state.prune(head_before.as_deref(), now);
    let heartbeat = super::ms(claim.heartbeat);
    uses!(state, "ra");
    state.admitted.remove_up_to(now);
    uses!(state, "rt");
    let tat = state.tat(now, rate);
    if claim.permits < 1 || claim.permits > rate.burst_size() {
        state.leave_and_settle(head_before, &member, true, &mut wakes);
        return wakes.reply(Err(RateError::Permits(claim.permits)));
    }
    // A retry of an admitted request (its reply was lost): the same admission, nothing more.
    if let Some(until) = state.admitted.score(&member) {
        let at = until.saturating_sub(heartbeat);
        state.leave_and_settle(head_before, &member, false, &mut wakes);
        return wakes.reply(Ok(RateDecision::Admitted { at }));
    }
    let position = state.queue.rank(&member);
    let ahead = position.unwrap_or(state.queue.len());
    if ahead == 0 || (position.is_some() && planted(Bug::RateOvertakes)) {
        let next = tat.advance(claim.permits, rate);
        if next.wait_for(now, rate) <= 0 {
            state.tat = Some((next.ms, next.frac, rate.count()));
            state.admitted.add(&member, now + heartbeat);
            state.leave_and_settle(head_before, &member, true, &mut wakes);
            return wakes.reply(Ok(RateDecision::Admitted { at: now }));
        }
    }
    // Capped as the script caps it (exact arithmetic below 2^53): a hint only.
    let weights = (claim.permits + state.weights_ahead(ahead)).min(MAX_ESTIMATE_WEIGHTS);
    let retry = tat.advance(weights, rate).wait_for(now, rate).max(1) as u64;
    if !wait {
        state.leave_and_settle(head_before, &member, position.is_some(), &mut wakes);
        return wakes.reply(Ok(refused(Some(retry), None, None)));
    }
    // The entry first, then the place (a queue that was empty uses `rhb` and `rtk` here
    // first; the entry is taken back when the counter is foreign).
    if head_before.is_none() {
        uses!(state, "rhb");
    }
    let heartbeat_until = now + heartbeat;
    state.heartbeats.add(&member, heartbeat_until);
    if position.is_none() {
        if let Some(foreign) = state.foreign_at("rtk") {
            state.heartbeats.remove(&member);
            return wakes.reply(Err(RateError::Foreign(foreign)));
        }
        state.tickets += 1;
        state.queue.add(&member, state.tickets);
    }
    state.settle(head_before, &member, &mut wakes);
    let retry = (ahead == 0).then_some(retry);
    wakes.reply(Ok(refused(
        retry,
        Some(ahead as u64),
        Some(heartbeat_until),
    )))
}

fn refused(
    retry: Option<u64>,
    position: Option<u64>,
    heartbeat_until: Option<u64>,
) -> RateDecision {
    RateDecision::Refused(Busy {
        retry_after: retry.map(std::time::Duration::from_millis),
        position,
        heartbeat_until,
        token_released: false,
    })
}

/// rate_cancel.lua.
pub(super) fn cancel(
    state: &mut RateLimit,
    now: u64,
    claim: &RateClaim,
) -> Step<Result<bool, RateError>> {
    let mut wakes = WakeUps::default();
    let member = rate_member(&claim.token, claim.permits);
    uses!(state, "rq");
    let head_before = state.head();
    if head_before.is_none() {
        // An empty queue holds no place: nothing to remove or prune.
        return wakes.reply(Ok(false));
    }
    uses!(state, "rtk");
    uses!(state, "rhb");
    state.prune(head_before.as_deref(), now);
    let had = state.leave(&member);
    state.settle(head_before, &member, &mut wakes);
    wakes.reply(Ok(had))
}

/// rate_inspect.lua (reads only: the stale tat is not forgotten here).
pub(super) fn inspect(state: &RateLimit, now: u64, rate: &Rate) -> Result<RateSnapshot, Foreign> {
    for key in ["rt", "rtk", "rq"] {
        if let Some(foreign) = state.foreign_at(key) {
            return Err(foreign);
        }
    }
    if !state.queue.is_empty()
        && let Some(foreign) = state.foreign_at("rhb")
    {
        return Err(foreign);
    }
    let tat = read_tat(state.tat, now, rate);
    let used = (tat.ms - now) * rate.count() + tat.frac;
    let room = (rate.burst_size() * rate.period_ms()).saturating_sub(used);
    let available = room / rate.period_ms();
    let next_in_ms = tat.advance(1, rate).wait_for(now, rate).max(0) as u64;
    let waiters = state
        .queue
        .iter()
        .filter_map(|(_, member)| {
            let deadline = state.heartbeats.score(member).filter(|d| *d > now)?;
            let (token, permits) = parse_rate_member(member);
            Some(RateWaiterState {
                token: token.to_owned(),
                permits,
                heartbeat_left_ms: deadline - now,
            })
        })
        .collect();
    Ok(RateSnapshot {
        now,
        available,
        next_in_ms,
        waiters,
    })
}
