//! The life of one hold as a pure state machine: [`HoldState::on`] takes an [`Event`] and the
//! instant it happened, changes the state and returns the [`Effect`]s the owner carries out.
//! No clock is read, nothing is sent, spawned or locked here: every decision about a hold's
//! trust (the trust from the send, the drift, the renewal schedule, `max_hold`, one lease
//! request in flight, nothing sent after a release or a detach) is made in this file, so a
//! test replays any sequence of events and checks each decision (`tests/hold_machine.rs`).
//!
//! The owner ([`crate::engine::owner`]) keeps one `HoldState` per hold, delivers the events
//! (commands from guards, replies of the requests it sent, timers) and carries out the
//! effects (send request `n`, publish the validity, answer a caller, forget the hold).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

mod plan;
pub use plan::{hand_off_window, trusted_until, Plan, Planted};

/// What a guard may trust: until `until` (local monotonic clock), counted from the send of
/// the request that set it (`since`); `lost` once the hold was refused, released, or its
/// trust ran out with no renewal confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// Trusted until then.
    pub until: Instant,
    /// The send of the request that set `until`.
    pub since: Instant,
    /// Lost for good.
    pub lost: bool,
}

/// Who asked for a step and waits for its answer (the owner maps it to its reply channel).
pub type Caller = u64;

/// A request the owner is told to send, numbered per hold (`n`): its reply comes back as
/// [`Event::Reply`] with the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Renew the hold to `lease` from its arrival, never shortening it on the server
    /// (`Store::renew`); a renewal (not an `extend`) is given up at `give_up_at` (the trust
    /// it was sent under ends then).
    Lease {
        /// The lease asked.
        lease: Duration,
        /// A renewal's end of waiting.
        give_up_at: Option<Instant>,
        /// A hand-off's claim (the first renewal of a hold a release handed over): the
        /// deadline the hand-off gave, which the claim replaces with the lease as long as the
        /// hold still has it (see `Store::renew`).
        handed_until: Option<u64>,
    },
    /// Turn the exclusive hold into a shared one, for `lease` from its arrival.
    Downgrade {
        /// The lease the shared hold gets.
        lease: Duration,
    },
    /// Release the hold by token (sent by the owner; a guard's own release is sent by the
    /// guard, see [`Event::Release`]).
    Release,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied: a lease renewed, a downgrade made (with the fence the server reports), a
    /// release that found the hold live.
    Confirmed {
        /// A downgrade's fence.
        fence: Option<u64>,
    },
    /// The server holds nothing live for the token.
    Refused,
    /// No answer (a lost reply, a timeout): it may have been applied, now or later.
    Unknown,
}

/// What happened to a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Time passed: a renewal may be due, a renewal's wait may be over.
    Tick,
    /// The reply to request `n`.
    Reply {
        /// The request's number.
        n: u64,
        /// How it ended.
        outcome: Outcome,
    },
    /// `extend(lease)` by the guard, or an extend by id through this hold.
    Extend {
        /// Who waits for the answer.
        caller: Caller,
        /// The new lease.
        lease: Duration,
    },
    /// The write guard's downgrade.
    Downgrade {
        /// Who waits for the answer.
        caller: Caller,
    },
    /// A release of the hold starts: `by_owner` when the owner sends it (a drop, a
    /// `release_all`, a release by id; its answer is the reply), else the guard sends it
    /// itself (its answer comes as [`Event::Released`]). `guard_gone`: the guard is gone with
    /// it (released or dropped); a `release_all` or a release by id leave it.
    Release {
        /// The owner sends it.
        by_owner: bool,
        /// The guard is gone.
        guard_gone: bool,
    },
    /// A release sent by the guard ended: `held` is its answer (`None`: unknown, and the owner
    /// sends the release again).
    Released {
        /// Its answer.
        held: Option<bool>,
    },
    /// The guard was detached: the hold is no longer this client's; nothing more is sent.
    Detach,
}

/// What the owner does after a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send request `n`.
    Send {
        /// Its number.
        n: u64,
        /// What it asks.
        ask: Ask,
    },
    /// Answer `caller`.
    Answer {
        /// Who.
        caller: Caller,
        /// What.
        answer: Answer,
    },
    /// The hold was just lost (for the warning and the metric).
    Lost {
        /// Why.
        why: &'static str,
    },
}

/// The answer to a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// An extend: renewed, or not (nothing live to renew).
    Extended(bool),
    /// An extend or downgrade whose request got no answer (the owner has its error).
    Failed {
        /// The request.
        n: u64,
    },
    /// A downgrade made: the read hold's fence.
    Downgraded(u64),
    /// A downgrade refused: the hold was lost or released first.
    DowngradeLost,
}

/// Where a hold stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Held by its guard.
    Live,
    /// A release was sent (by the guard or the owner).
    Releasing,
    /// The guard was detached: the hold runs on the server until its lease ends.
    Detached,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Renewal,
    Extend(Caller),
    Downgrade(Caller),
}

/// A lease request in flight (at most one per hold).
#[derive(Clone, Copy, Debug)]
struct InFlight {
    n: u64,
    kind: Kind,
    sent_at: Instant,
    lease: Duration,
    give_up_at: Option<Instant>,
}

impl InFlight {
    /// A renewal whose reply did not come before the trust it was sent under ended.
    fn gave_up(&self, now: Instant) -> bool {
        self.kind == Kind::Renewal && self.give_up_at.is_some_and(|at| now >= at)
    }
}

/// Why a hold is lost when its renewal gave up.
const GAVE_UP: &str = "no renewal confirmed before the lease ran out";

/// When the renewals run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Renew {
    Off,
    /// The next renewal is due at `due`; `once`: the first confirmed renewal is the last.
    Due {
        due: Instant,
        once: bool,
    },
}

/// How a hold starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Granted by the reply to a request sent at `sent_at` (or resumed by a renewal sent
    /// then): trusted for its lease from that send; renewed after the usual interval.
    Granted {
        /// The request's send.
        sent_at: Instant,
    },
    /// Handed over by a release while the waiter waited: trusted for the hand-off window
    /// from the send of the waiter's latest refused attempt; its full lease is claimed at
    /// once (even with auto-renewal off).
    HandedOver {
        /// The send of the waiter's latest refused attempt.
        attempt_sent_at: Instant,
        /// The deadline the hand-off gave the hold (server ms), which its claim names.
        until: u64,
    },
}

/// One hold's state. See the module docs.
#[derive(Clone, Debug)]
pub struct HoldState {
    /// The lease every later request asks for (an `extend` sets it when sent).
    lease: Duration,
    opts_renew_every: Option<Duration>,
    validity: Validity,
    /// At most one, but under the planted bug `UnorderedRenewals`.
    in_flight: Vec<InFlight>,
    /// Releases the owner sent, by number.
    owner_releases: Vec<u64>,
    /// Extends and downgrades waiting for their turn, in order.
    queue: VecDeque<Kind>,
    /// Leases asked by the queued extends, in the same order.
    queued_leases: VecDeque<Duration>,
    /// The give-up instant a queued renewal read early (planted bug only).
    stale_give_up: Option<Instant>,
    renew: Renew,
    /// A renewal fell due while another request was in flight: sent when it ends.
    renewal_waiting: bool,
    /// No renewal is sent from then on (`max_hold`).
    renew_until: Option<Instant>,
    phase: Phase,
    /// The guard was released, dropped or detached: nothing refers to the hold any more.
    guard_gone: bool,
    /// Releases in flight, and whether one found the hold live.
    releases: u32,
    ended_live: bool,
    /// The number of the last request sent.
    next_n: u64,
    bugs: Planted,
    /// Granted by a hand-off and its lease not claimed yet: the deadline the hand-off gave,
    /// which the next renewal names (see [`Ask::Lease`]).
    claim_pending: Option<u64>,
    /// Detached while its guard still trusted it: a late `extend` of it answers `true` (the
    /// hold runs on for its id). A guard lost first stays lost for that answer too.
    detached_trusted: bool,
}

impl HoldState {
    /// A new hold (see [`Start`]), with the claim's `lease` and `heartbeat`, at `now`.
    pub fn new(
        start: Start,
        lease: Duration,
        heartbeat: Duration,
        plan: Plan,
        now: Instant,
        bugs: Planted,
    ) -> HoldState {
        let (from, window, first) = match start {
            Start::Granted { sent_at } => (sent_at, lease, None),
            Start::HandedOver {
                attempt_sent_at,
                until,
            } => (
                attempt_sent_at,
                hand_off_window(heartbeat, lease, bugs),
                Some((now, until)),
            ),
        };
        let validity = Validity {
            until: trusted_until(from, window),
            since: from,
            lost: false,
        };
        let mut hold = HoldState {
            lease,
            opts_renew_every: plan.renew_every,
            validity,
            in_flight: Vec::new(),
            owner_releases: Vec::new(),
            queue: VecDeque::new(),
            queued_leases: VecDeque::new(),
            stale_give_up: None,
            renew: Renew::Off,
            renewal_waiting: false,
            renew_until: plan.max_hold.map(|d| crate::vocab::options::later(from, d)),
            phase: Phase::Live,
            guard_gone: false,
            releases: 0,
            ended_live: false,
            next_n: 0,
            bugs,
            claim_pending: first.map(|(_, until)| until),
            detached_trusted: false,
        };
        hold.renew = match (first, plan.auto_renew) {
            (None, false) => Renew::Off,
            (None, true) => Renew::Due {
                due: hold.next_renewal(),
                once: false,
            },
            (Some((at, _)), auto) => Renew::Due {
                due: at,
                once: !auto,
            },
        };
        hold
    }

    /// What a guard may trust now.
    pub fn validity(&self) -> Validity {
        self.validity
    }

    /// Where the hold stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Not lost, and its trust has not run out at `now`.
    pub fn is_trusted(&self, now: Instant) -> bool {
        !self.validity.lost && now < self.validity.until
    }

    /// Nothing sent for this hold is in flight: no lease request, no release.
    pub fn is_quiet(&self) -> bool {
        self.in_flight.is_empty() && self.releases == 0
    }

    /// Whether a release of this hold found it live.
    pub fn ended_live(&self) -> bool {
        self.ended_live
    }

    /// The hold is no longer its guard's (released or detached) and nothing sent for it is
    /// in flight: the owner forgets it.
    pub fn is_done(&self) -> bool {
        self.phase != Phase::Live && self.guard_gone && self.is_quiet()
    }

    /// The next instant this hold needs a [`Event::Tick`]: a renewal due, or the end of a
    /// renewal's wait for its reply.
    pub fn next_wake(&self) -> Option<Instant> {
        let due = match self.renew {
            Renew::Due { due, .. } if self.phase == Phase::Live && self.in_flight.is_empty() => {
                Some(due)
            }
            _ => None,
        };
        // Once lost, the renewal's wait is over: its reply changes nothing. Until then the
        // trust's end is a wake too: a guard whose trust ran out is lost for good.
        let give_up = match self.validity.lost {
            true => None,
            false => self.in_flight.iter().filter_map(|r| r.give_up_at).min(),
        };
        let ends =
            (self.phase == Phase::Live && !self.validity.lost).then_some(self.validity.until);
        [due, give_up, ends].into_iter().flatten().min()
    }

    /// The transition: applies `event` at `now`, returns what the owner must do.
    pub fn on(&mut self, event: Event, now: Instant) -> Vec<Effect> {
        let mut fx = Vec::new();
        match event {
            Event::Tick => self.tick(now, &mut fx),
            Event::Reply { n, outcome } => self.reply(n, outcome, now, &mut fx),
            Event::Extend { caller, lease } => {
                self.enqueue(Kind::Extend(caller), Some(lease), now, &mut fx)
            }
            Event::Downgrade { caller } => {
                self.enqueue(Kind::Downgrade(caller), None, now, &mut fx)
            }
            Event::Release {
                by_owner,
                guard_gone,
            } => {
                self.end(Phase::Releasing, now, &mut fx);
                self.guard_gone |= guard_gone;
                self.releases += 1;
                if by_owner {
                    let n = self.number();
                    self.owner_releases.push(n);
                    fx.push(Effect::Send {
                        n,
                        ask: Ask::Release,
                    });
                }
            }
            Event::Released { held: None } => {
                // The guard's own release got no answer: it may still land, at any time. The
                // owner sends it again (one release ends, one starts), so the hold is known
                // gone before it is forgotten: a resume of its id in this client is refused
                // meanwhile, and finds nothing after.
                let n = self.number();
                self.owner_releases.push(n);
                fx.push(Effect::Send {
                    n,
                    ask: Ask::Release,
                });
            }
            Event::Released { held } => {
                self.releases = self.releases.saturating_sub(1);
                self.ended_live |= held == Some(true);
            }
            Event::Detach => {
                self.guard_gone = true;
                if self.phase == Phase::Live {
                    self.detached_trusted = self.is_trusted(now);
                    self.end(Phase::Detached, now, &mut fx);
                }
            }
        }
        fx
    }

    fn number(&mut self) -> u64 {
        self.next_n += 1;
        self.next_n
    }

    /// The guard gives the hold up (released or detached): renewals stop, callers waiting
    /// for a turn are answered, nothing more is trusted.
    fn end(&mut self, phase: Phase, now: Instant, fx: &mut Vec<Effect>) {
        if self.phase == Phase::Live || phase == Phase::Releasing {
            self.phase = phase;
        }
        self.renew = Renew::Off;
        self.renewal_waiting = false;
        self.lose(now);
        self.answer_queue(fx);
    }

    /// Lost from `now` on: nothing is trusted past it.
    fn lose(&mut self, now: Instant) {
        self.validity.lost = true;
        self.validity.until = self.validity.until.min(now);
        self.renew = Renew::Off;
        self.renewal_waiting = false;
    }

    fn mark_lost(&mut self, why: &'static str, now: Instant, fx: &mut Vec<Effect>) {
        if !self.validity.lost {
            fx.push(Effect::Lost { why });
        }
        self.lose(now);
        self.answer_queue(fx);
    }

    /// Callers queued for a turn get "nothing live" (the hold ended or was lost).
    fn answer_queue(&mut self, fx: &mut Vec<Effect>) {
        self.queued_leases.clear();
        for kind in self.queue.drain(..) {
            answer(kind, Answer::Extended(false), Answer::DowngradeLost, fx);
        }
    }

    /// When the renewal after the last confirmed request is due: a renewal interval after
    /// its send, and at the latest halfway through what is trusted.
    fn next_renewal(&self) -> Instant {
        let every = crate::vocab::options::renew_interval(self.opts_renew_every, self.lease);
        let v = self.validity;
        let halfway = v.since + v.until.saturating_duration_since(v.since) / 2;
        (v.since + every).min(halfway.max(v.since))
    }

    fn reschedule(&mut self) {
        if let Renew::Due { once, .. } = self.renew {
            self.renew = Renew::Due {
                due: self.next_renewal(),
                once,
            };
        }
    }

    fn tick(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.in_flight.iter().any(|r| r.gave_up(now)) && !self.validity.lost {
            self.mark_lost(GAVE_UP, now, fx);
        }
        self.ran_out(now, fx);
        let Renew::Due { due, .. } = self.renew else {
            return;
        };
        if self.phase != Phase::Live || now < due {
            return;
        }
        if self.renew_until.is_some_and(|end| now >= end) {
            // Past `max_hold`: the trust of the last renewal runs out.
            self.renew = Renew::Off;
            return;
        }
        if !self.in_flight.is_empty() && !self.bugs.unordered_renewals {
            // Its turn comes when the request in flight ends.
            if !self.renewal_waiting {
                self.renewal_waiting = true;
                self.stale_give_up = Some(self.validity.until);
            }
            return;
        }
        self.send_renewal(now, fx);
    }

    /// A live guard whose trust ran out at `now` is lost for good: no later reply revives it.
    fn ran_out(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.phase == Phase::Live && !self.validity.lost && now >= self.validity.until {
            self.mark_lost("the lease's trust ran out", now, fx);
        }
    }

    fn send_renewal(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        self.renewal_waiting = false;
        let stale = self.stale_give_up.take();
        let until = match stale {
            Some(early) if self.bugs.stale_renewal_give_up => early,
            _ => self.validity.until,
        };
        if now >= until {
            self.mark_lost("renewal came too late", now, fx);
            return;
        }
        // Back at the trust's end unless the reply moves it.
        if let Renew::Due { once, .. } = self.renew {
            self.renew = Renew::Due { due: until, once };
        }
        let lease = self.lease;
        self.send(Kind::Renewal, lease, Some(until), now, fx);
    }

    /// A lease request leaves now: a request for a shorter lease lowers the trust first (it
    /// may be applied at any moment from now on).
    fn send(
        &mut self,
        kind: Kind,
        lease: Duration,
        give_up_at: Option<Instant>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let n = self.number();
        if !self.bugs.hand_off_trusts_heartbeat && !self.bugs.unordered_renewals {
            self.validity.until = self.validity.until.min(trusted_until(now, lease));
            if kind != Kind::Renewal {
                self.reschedule();
            }
        }
        let ask = match kind {
            Kind::Downgrade(_) => Ask::Downgrade { lease },
            // Until a claim is confirmed, every lease request is the claim (an extend too): one
            // sent after a claim of unknown outcome must still replace the hand-off's window
            // with the lease, or a holder that dies then blocks others for the whole window.
            Kind::Renewal | Kind::Extend(_) => Ask::Lease {
                lease,
                give_up_at,
                handed_until: self.claim_pending,
            },
        };
        self.in_flight.push(InFlight {
            n,
            kind,
            sent_at: now,
            lease,
            give_up_at,
        });
        fx.push(Effect::Send { n, ask });
    }

    fn enqueue(&mut self, kind: Kind, lease: Option<Duration>, now: Instant, fx: &mut Vec<Effect>) {
        let caller = match kind {
            Kind::Extend(c) | Kind::Downgrade(c) => c,
            Kind::Renewal => return,
        };
        self.ran_out(now, fx);
        if self.phase != Phase::Live || self.validity.lost {
            answer(kind, Answer::Extended(false), Answer::DowngradeLost, fx);
            return;
        }
        if self.bugs.unordered_renewals
            && let Some(lease) = lease
        {
            // The planted bug: sent at once beside whatever is in flight.
            self.send_unordered(caller, lease, now, fx);
            return;
        }
        self.queue.push_back(kind);
        if let Some(lease) = lease {
            self.queued_leases.push_back(lease);
        }
        self.next_turn(now, fx);
    }

    /// The planted bug's extend: sent at once, its lease stored only once confirmed.
    fn send_unordered(
        &mut self,
        caller: Caller,
        lease: Duration,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let n = self.number();
        self.in_flight.push(InFlight {
            n,
            kind: Kind::Extend(caller),
            sent_at: now,
            lease,
            give_up_at: None,
        });
        fx.push(Effect::Send {
            n,
            ask: Ask::Lease {
                lease,
                give_up_at: None,
                handed_until: None,
            },
        });
    }

    /// Starts the next request whose turn has come: a queued extend or downgrade, else a
    /// renewal that fell due meanwhile.
    fn next_turn(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if !self.in_flight.is_empty() || self.phase != Phase::Live || self.validity.lost {
            return;
        }
        if let Some(kind) = self.queue.pop_front() {
            match kind {
                Kind::Extend(_) => {
                    let lease = self.queued_leases.pop_front().unwrap_or(self.lease);
                    // This request and every later renewal ask for the new length.
                    self.lease = lease;
                    self.send(kind, lease, None, now, fx);
                }
                Kind::Downgrade(_) => {
                    let lease = self.lease;
                    self.send(kind, lease, None, now, fx);
                }
                Kind::Renewal => {}
            }
            return;
        }
        if self.renewal_waiting {
            self.send_renewal(now, fx);
        }
    }

    fn reply(&mut self, n: u64, outcome: Outcome, now: Instant, fx: &mut Vec<Effect>) {
        if let Some(i) = self.owner_releases.iter().position(|r| *r == n) {
            self.owner_releases.swap_remove(i);
            self.releases = self.releases.saturating_sub(1);
            self.ended_live |= matches!(outcome, Outcome::Confirmed { .. });
            return;
        }
        let Some(i) = self.in_flight.iter().position(|r| r.n == n) else {
            return;
        };
        let req = self.in_flight.remove(i);
        match outcome {
            Outcome::Confirmed { fence } => self.confirmed(req, fence, now, fx),
            Outcome::Refused => {
                let why = match req.kind {
                    Kind::Downgrade(_) => "downgrade found no live write hold",
                    _ => "renewal refused: the lease lapsed or was taken over",
                };
                self.mark_lost(why, now, fx);
                answer(req.kind, Answer::Extended(false), Answer::DowngradeLost, fx);
            }
            Outcome::Unknown => {
                match req.kind {
                    Kind::Renewal => {
                        if req.gave_up(now) {
                            self.mark_lost(GAVE_UP, now, fx);
                        } else if let Renew::Due { once, .. } = self.renew {
                            // Retry soon, well inside what is left of the trust.
                            let left = self.validity.until.saturating_duration_since(now);
                            let due = now + (left / 4).min(Duration::from_millis(500));
                            self.renew = Renew::Due { due, once };
                        }
                    }
                    kind => answer(kind, Answer::Failed { n }, Answer::Failed { n }, fx),
                }
            }
        }
        self.next_turn(now, fx);
    }

    fn confirmed(&mut self, req: InFlight, fence: Option<u64>, now: Instant, fx: &mut Vec<Effect>) {
        if req.gave_up(now) && !self.validity.lost {
            // Confirmed after the trust it was sent under ended: the guard already lost it.
            self.mark_lost(GAVE_UP, now, fx);
        }
        // Any reply (an extend's, a downgrade's) that comes after the trust ran out finds the
        // guard lost: it is not revived, and its caller learns the lease was gone.
        self.ran_out(now, fx);
        if let Kind::Downgrade(_) = req.kind
            && self.bugs.downgrade_ignores_loss
        {
            self.validity.lost = false;
            self.phase = Phase::Live;
        }
        if self.validity.lost {
            // The server renewed it, but the guard trusts nothing any more. Detached
            // meanwhile while trusted: the extend did renew the hold, which runs on for its
            // id. Released (by the guard, `release_all` or the drop) or lost, even if
            // detached after the loss: the lease is gone for the guard, so `false`. A
            // downgrade reports the loss.
            let renewed = self.phase == Phase::Detached && self.detached_trusted;
            answer(
                req.kind,
                Answer::Extended(renewed),
                Answer::DowngradeLost,
                fx,
            );
            return;
        }
        if !matches!(req.kind, Kind::Downgrade(_)) {
            self.claim_pending = None;
        }
        // A request whose outcome stayed unknown may still be applied after this one, but
        // cannot shorten the hold (no request does; a claim only while nothing renewed it).
        let until = trusted_until(req.sent_at, req.lease);
        let raise_only = self.bugs.hand_off_trusts_heartbeat
            || (self.bugs.unordered_renewals && req.kind == Kind::Renewal);
        if !raise_only || until > self.validity.until {
            self.validity.until = until;
            self.validity.since = req.sent_at;
        }
        if let Kind::Extend(_) = req.kind
            && self.bugs.unordered_renewals
        {
            self.lease = req.lease;
        }
        match (req.kind, self.renew) {
            (Kind::Renewal, Renew::Due { once: true, .. }) => self.renew = Renew::Off,
            _ => self.reschedule(),
        }
        let fence = fence.unwrap_or_default();
        answer(
            req.kind,
            Answer::Extended(true),
            Answer::Downgraded(fence),
            fx,
        );
    }
}

/// Answers the caller of a request of `kind`: `extend` to an extend's, `downgrade` to a
/// downgrade's (a renewal has none).
fn answer(kind: Kind, extend: Answer, downgrade: Answer, fx: &mut Vec<Effect>) {
    let (caller, answer) = match kind {
        Kind::Extend(caller) => (caller, extend),
        Kind::Downgrade(caller) => (caller, downgrade),
        Kind::Renewal => return,
    };
    fx.push(Effect::Answer { caller, answer });
}
