//! The property check of one hold's state machine (`HoldState`), as the store is checked: a
//! random sequence of events (extends, downgrades, releases, detaches, time passing) runs
//! against the machine while a simulated server applies the requests it sends, each after
//! a random delay or never, and answers each after another delay or never (a lost reply), so
//! replies come late, get lost, and requests whose reply was lost apply after later ones.
//!
//! The oracle, after every event and at every instant the server applies something:
//! - **honest**: while the machine trusts the hold (`!lost`, `until` ahead), the server holds
//!   it at least until `until`;
//! - **one lease request in flight** per hold;
//! - **nothing sent after the guard is released or detached** (but releases);
//! - **a loss for time only when the trust ran out**;
//! - at the end, **every caller answered once**, a released or detached hold **done**, and a
//!   guard's release that got no answer **followed by the owner's own** (the unanswered one
//!   may still land, so the hold is not forgotten until a release of the owner's is answered).
//!
//! Each planted bug in the machine's transitions is found by the same check
//! (`finds_planted_*`). `HOLD_CASES` sets the number of cases (default 10,000).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_locks::testing::hold::{
    trusted_until, Answer, Ask, Effect, Event, HoldState, Outcome, Plan, Planted, Start, Validity,
};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the guard (or a caller through it) does next.
#[derive(Clone, Debug)]
enum Op {
    /// Time passes by this many ms.
    Wait(u64),
    Extend(u64),
    Downgrade,
    /// The guard's own release (`false`) or one the owner sends (a drop, `release_all`).
    Release(bool),
    /// The guard's own release, whose answer never comes (applied or not).
    ReleaseUnanswered(bool),
    Detach,
    /// A timer event that nothing asked for (the machine must ignore what is not due).
    Tick,
}

/// How the server treats the `i`-th request sent: applied after `apply` ms (never when
/// `None`), answered `reply` ms after that (never when `None`).
#[derive(Clone, Copy, Debug)]
struct Fate {
    apply: Option<u64>,
    reply: Option<u64>,
}

#[derive(Clone, Debug)]
struct Case {
    lease: u64,
    heartbeat: u64,
    handed_over: bool,
    plan: Plan,
    /// How long before the start the granting request was sent, and when it was applied
    /// (ms after its send).
    sent_before: u64,
    applied_after: u64,
    fates: Vec<Fate>,
    ops: Vec<Op>,
}

fn fate() -> impl Strategy<Value = Fate> {
    (
        prop_oneof![8 => (0u64..400).prop_map(Some), 1 => Just(None)],
        prop_oneof![8 => (0u64..400).prop_map(Some), 1 => Just(None)],
    )
        .prop_map(|(apply, reply)| Fate { apply, reply })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (1u64..1_500).prop_map(Op::Wait),
        3 => (50u64..3_000).prop_map(Op::Extend),
        1 => Just(Op::Downgrade),
        1 => any::<bool>().prop_map(Op::Release),
        1 => any::<bool>().prop_map(Op::ReleaseUnanswered),
        1 => Just(Op::Detach),
        2 => Just(Op::Tick),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (200u64..3_000, 50u64..4_000, any::<bool>()),
        (
            prop_oneof![6 => Just(true), 1 => Just(false)],
            proptest::option::of(20u64..2_000),
            proptest::option::of(200u64..6_000),
        ),
        (0u64..100, 0u64..100),
        proptest::collection::vec(fate(), 40),
        proptest::collection::vec(op(), 1..30),
    )
        .prop_map(
            |(
                (lease, heartbeat, handed_over),
                (auto, every, max_hold),
                (before, after),
                fates,
                ops,
            )| {
                Case {
                    lease,
                    heartbeat,
                    handed_over,
                    plan: Plan {
                        auto_renew: auto,
                        renew_every: every.map(ms),
                        max_hold: max_hold.map(ms),
                    },
                    sent_before: before,
                    applied_after: after.min(before),
                    fates,
                    ops,
                }
            },
        )
}

/// Something scheduled on the simulated timeline.
#[derive(Clone, Copy, Debug)]
enum Due {
    /// The server applies request `n`.
    Apply(u64),
    /// Request `n`'s reply reaches the owner.
    Reply(u64),
    /// The owner stops waiting for request `n` (a renewal at its give-up instant, any other
    /// request after its bound).
    GiveUp(u64),
    /// The guard's own release reaches the server / its answer comes back.
    GuardApply,
    GuardReply,
    /// The guard stops waiting for its release's answer.
    GuardLost,
}

/// What a request asked, and its fate.
#[derive(Clone, Copy, Debug)]
struct Sent {
    ask: Ask,
    sent_at: Instant,
    outcome: Option<Outcome>,
    answered: bool,
}

/// The simulated server's view of the hold: held until `until` (`None`: released).
struct Sim {
    now: Instant,
    hold: HoldState,
    until: Option<Instant>,
    sent: BTreeMap<u64, Sent>,
    fates: std::vec::IntoIter<Fate>,
    timeline: BTreeMap<(Instant, u64), Due>,
    seq: u64,
    callers: HashSet<u64>,
    next_caller: u64,
    released: bool,
    detached: bool,
    /// The guard's own release: its answer once applied.
    guard_release: Option<Option<bool>>,
    /// The guard's own release got no answer: the owner must send one of its own before the
    /// hold is done (the unanswered one may still land).
    release_unanswered: bool,
    unordered: bool,
    /// The guard's trust ran out (or it was lost) at some event: it is never trusted again.
    gone: bool,
    /// The server's deadline is still the one a hand-off gave (a claim naming it sets the
    /// lease); any renewal or downgrade applied since writes another.
    handed: Option<u64>,
}

/// The deadline a hand-off gave a hold, as its claim names it.
const HANDED_UNTIL: u64 = 41;

const BOUND: u64 = 600;

impl Sim {
    fn schedule(&mut self, at: Instant, due: Due) {
        self.seq += 1;
        self.timeline.insert((at, self.seq), due);
    }

    /// Applies `event` to the machine and checks what it does.
    fn on(&mut self, event: Event) -> Result<(), TestCaseError> {
        let before = self.hold.validity();
        self.gone |= before.lost || before.until <= self.now;
        // The trust a confirmed lease request delivered now buys: from its send.
        let bought = match event {
            Event::Reply {
                n,
                outcome: Outcome::Confirmed { .. },
            } => self.sent.get(&n).and_then(|s| match s.ask {
                Ask::Lease { lease, .. } | Ask::Downgrade { lease } => {
                    Some(trusted_until(s.sent_at, lease))
                }
                _ => None,
            }),
            _ => None,
        };
        let trusted = bought.map_or(before.until, |b| b.max(before.until));
        let effects = self.hold.on(event, self.now);
        for effect in effects {
            match effect {
                Effect::Send { n, ask } => self.on_send(n, ask)?,
                Effect::Answer { caller, answer } => {
                    prop_assert!(
                        self.callers.remove(&caller),
                        "caller {caller} answered twice or never asked ({answer:?})"
                    );
                }
                Effect::Lost { why } => {
                    if why.contains("late")
                        || why.contains("no renewal confirmed")
                        || why.contains("trust ran out")
                    {
                        prop_assert!(
                            self.now >= trusted,
                            "lost for time ({why}) at {:?} before its trust ran out at {:?}",
                            self.now,
                            trusted
                        );
                    }
                }
            }
        }
        self.check()
    }

    /// The machine sends request `n`: checked, then applied and answered as its fate says.
    fn on_send(&mut self, n: u64, ask: Ask) -> Result<(), TestCaseError> {
        let in_flight = self
            .sent
            .values()
            .filter(|s| !s.answered && !matches!(s.ask, Ask::Release))
            .count();
        if !matches!(ask, Ask::Release) {
            prop_assert!(
                self.unordered || in_flight == 0,
                "a second lease request of the hold in flight"
            );
            prop_assert!(!self.released, "a lease request sent after a release");
        }
        prop_assert!(!self.detached, "a request sent after a detach");
        if matches!(ask, Ask::Release) {
            self.release_unanswered = false;
        }
        self.sent.insert(
            n,
            Sent {
                ask,
                sent_at: self.now,
                outcome: None,
                answered: false,
            },
        );
        let fate = self.fates.next().unwrap_or(Fate {
            apply: Some(10),
            reply: Some(10),
        });
        if let Some(a) = fate.apply {
            self.schedule(self.now + ms(a), Due::Apply(n));
            if let Some(r) = fate.reply {
                self.schedule(self.now + ms(a + r), Due::Reply(n));
            }
        }
        let give_up = match ask {
            Ask::Lease {
                give_up_at: Some(at),
                ..
            } => at,
            _ => self.now + ms(BOUND),
        };
        self.schedule(give_up, Due::GiveUp(n));
        Ok(())
    }

    /// The honesty oracle.
    fn check(&mut self) -> Result<(), TestCaseError> {
        if self.detached {
            return Ok(());
        }
        let v: Validity = self.hold.validity();
        if v.lost || v.until <= self.now {
            self.gone = true;
            return Ok(());
        }
        prop_assert!(
            !self.gone,
            "trusted again (until {:?}, now {:?}) after its trust ran out",
            v.until,
            self.now
        );
        match self.until {
            Some(server) => prop_assert!(
                server >= v.until,
                "trusted until {:?} but the server holds until {:?} (now {:?})",
                v.until,
                server,
                self.now
            ),
            None => prop_assert!(false, "trusted while the server holds nothing"),
        }
        Ok(())
    }

    /// The server applies request `n` now.
    fn apply(&mut self, n: u64) -> Result<(), TestCaseError> {
        let Some(sent) = self.sent.get(&n).copied() else {
            return Ok(());
        };
        let held = self.until.is_some_and(|u| u > self.now);
        let handed = self.handed.take();
        let outcome = match sent.ask {
            Ask::Lease {
                lease,
                handed_until,
                ..
            } if held => {
                let set = self.now + lease;
                let claim = handed_until.is_some() && handed_until == handed;
                self.until = Some(match claim {
                    false => self.until.map_or(set, |u| u.max(set)),
                    true => set,
                });
                Outcome::Confirmed { fence: None }
            }
            Ask::Downgrade { lease } if held => {
                self.until = Some(self.now + lease);
                Outcome::Confirmed { fence: Some(7) }
            }
            Ask::Release => {
                self.until = None;
                match held {
                    true => Outcome::Confirmed { fence: None },
                    false => Outcome::Refused,
                }
            }
            _ => {
                self.until = None;
                Outcome::Refused
            }
        };
        if let Some(s) = self.sent.get_mut(&n) {
            s.outcome = Some(outcome);
        }
        self.check()
    }

    fn reply(&mut self, n: u64, lost: bool) -> Result<(), TestCaseError> {
        let Some(sent) = self.sent.get_mut(&n) else {
            return Ok(());
        };
        if sent.answered {
            return Ok(());
        }
        sent.answered = true;
        let outcome = match (lost, sent.outcome) {
            (false, Some(outcome)) => outcome,
            _ => Outcome::Unknown,
        };
        self.on(Event::Reply { n, outcome })
    }

    /// Runs the timeline (and the machine's timers) up to `end`.
    fn run_until(&mut self, end: Instant) -> Result<(), TestCaseError> {
        loop {
            let next_due = self.timeline.keys().next().map(|(at, _)| *at);
            let wake = self.hold.next_wake();
            let next = match (next_due, wake) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            if wake.is_some_and(|w| w <= self.now) {
                self.on(Event::Tick)?;
                continue;
            }
            let Some(((_, _), due)) = self.timeline.pop_first() else {
                break;
            };
            match due {
                Due::Apply(n) => self.apply(n)?,
                Due::Reply(n) => self.reply(n, false)?,
                Due::GiveUp(n) => self.reply(n, true)?,
                Due::GuardApply => {
                    let held = self.until.is_some_and(|u| u > self.now);
                    self.until = None;
                    self.guard_release = Some(Some(held));
                    self.check()?;
                }
                Due::GuardReply => {
                    let held = self.guard_release.take().flatten();
                    self.on(Event::Released { held })?;
                }
                Due::GuardLost => {
                    self.release_unanswered = true;
                    self.on(Event::Released { held: None })?;
                }
            }
        }
        self.now = self.now.max(end);
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let gone = self.released || self.detached;
        match *op {
            Op::Wait(d) => {
                let end = self.now + ms(d);
                self.run_until(end)?;
            }
            Op::Extend(lease) if !gone => {
                self.next_caller += 1;
                self.callers.insert(self.next_caller);
                self.on(Event::Extend {
                    caller: self.next_caller,
                    lease: ms(lease),
                })?;
            }
            Op::Downgrade if !gone => {
                self.next_caller += 1;
                self.callers.insert(self.next_caller);
                self.on(Event::Downgrade {
                    caller: self.next_caller,
                })?;
            }
            Op::Release(by_owner) if !gone => {
                self.released = true;
                self.on(Event::Release {
                    by_owner,
                    guard_gone: true,
                })?;
                if !by_owner {
                    // The guard sends it itself: applied soon, answered after.
                    self.schedule(self.now + ms(5), Due::GuardApply);
                    self.schedule(self.now + ms(10), Due::GuardReply);
                }
            }
            Op::ReleaseUnanswered(applied) if !gone => {
                self.released = true;
                self.on(Event::Release {
                    by_owner: false,
                    guard_gone: true,
                })?;
                if applied {
                    self.schedule(self.now + ms(5), Due::GuardApply);
                }
                self.schedule(self.now + ms(10), Due::GuardLost);
            }
            Op::Tick => self.on(Event::Tick)?,
            Op::Detach if !gone => {
                self.on(Event::Detach)?;
                self.detached = true;
            }
            _ => {}
        }
        Ok(())
    }
}

fn run(case: &Case, bugs: Planted) -> Result<(), TestCaseError> {
    let start_at = Instant::now();
    let lease = ms(case.lease);
    let heartbeat = ms(case.heartbeat);
    let sent_at = start_at - ms(case.sent_before);
    let applied = sent_at + ms(case.applied_after);
    let (start, until) = if case.handed_over {
        // The release granted it until the waiter's heartbeat deadline.
        (
            Start::HandedOver {
                attempt_sent_at: sent_at,
                until: HANDED_UNTIL,
            },
            applied + heartbeat,
        )
    } else {
        (Start::Granted { sent_at }, applied + lease)
    };
    let hold = HoldState::new(start, lease, heartbeat, case.plan, start_at, bugs);
    let mut sim = Sim {
        now: start_at,
        hold,
        until: Some(until),
        sent: BTreeMap::new(),
        fates: case.fates.clone().into_iter(),
        timeline: BTreeMap::new(),
        seq: 0,
        callers: HashSet::new(),
        next_caller: 0,
        released: false,
        detached: false,
        guard_release: None,
        release_unanswered: false,
        unordered: bugs.unordered_renewals,
        gone: false,
        handed: case.handed_over.then_some(HANDED_UNTIL),
    };
    sim.check()?;
    for op in &case.ops {
        sim.step(op)?;
    }
    // The guard goes (released by its drop, unless released or detached already), then
    // every request ends.
    if !sim.released && !sim.detached {
        sim.released = true;
        sim.on(Event::Release {
            by_owner: true,
            guard_gone: true,
        })?;
    }
    let end = sim.now + ms(60_000);
    sim.run_until(end)?;
    prop_assert!(
        sim.callers.is_empty(),
        "callers never answered: {:?}",
        sim.callers
    );
    prop_assert!(sim.hold.is_done(), "the hold is not done at the end");
    prop_assert!(
        !sim.release_unanswered,
        "the guard's release got no answer and the owner sent none of its own"
    );
    Ok(())
}

fn cases() -> u32 {
    std::env::var("HOLD_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

#[test]
fn hold_machine_stays_honest() {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&case(), |c| run(&c, Planted::default()));
    if let Err(err) = outcome {
        panic!("{err}");
    }
}

/// Whether a counterexample shows a guard trusting past the server's hold (or a released hold
/// that does not end, which is how a downgrade that ignores its loss shows).
fn dishonest(why: &str) -> bool {
    why.contains("server holds")
        || why.contains("holds nothing")
        || why.contains("not done")
        || why.contains("trusted again")
}

/// The planted bugs `set` turns on.
fn planted(set: impl FnOnce(&mut Planted)) -> Planted {
    let mut bugs = Planted::default();
    set(&mut bugs);
    bugs
}

/// The checker finds `bugs` within `budget` cases.
fn finds(bugs: Planted, budget: u32) -> String {
    let mut runner = TestRunner::new(Config {
        cases: budget,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    });
    match runner.run(&case(), |c| run(&c, bugs)) {
        Ok(()) => panic!("{bugs:?} not found in {budget} cases"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn finds_planted_hand_off_trusting_the_heartbeat() {
    let why = finds(planted(|p| p.hand_off_trusts_heartbeat = true), 20_000);
    assert!(dishonest(&why), "{why}");
}

#[test]
fn finds_planted_unordered_renewals() {
    let why = finds(planted(|p| p.unordered_renewals = true), 20_000);
    // Two requests of the hold in flight: the minimal case found is a guard that gives up on
    // a lease it still trusts, or one whose trust (only ever raised) outruns the server's.
    assert!(
        why.contains("before its trust ran out") || dishonest(&why),
        "{why}"
    );
}

#[test]
fn finds_planted_stale_renewal_give_up() {
    let why = finds(planted(|p| p.stale_renewal_give_up = true), 20_000);
    assert!(why.contains("before its trust ran out"), "{why}");
}

#[test]
fn finds_planted_downgrade_ignoring_a_loss() {
    let why = finds(planted(|p| p.downgrade_ignores_loss = true), 20_000);
    assert!(dishonest(&why), "{why}");
}

/// A reply to request `n`.
fn reply(n: u64, outcome: Outcome) -> Event {
    Event::Reply { n, outcome }
}

/// A confirmation of request `n` (no fence).
fn confirmed(n: u64) -> Event {
    reply(n, Outcome::Confirmed { fence: None })
}

/// An `extend(lease)` by `caller`.
fn extend(caller: u64, lease: Duration) -> Event {
    Event::Extend { caller, lease }
}

/// The number of the one request `fx` sends (panics on anything else).
fn sent(fx: &[Effect]) -> u64 {
    match fx {
        [Effect::Send { n, .. }] => *n,
        other => panic!("expected one request, got {other:?}"),
    }
}

/// Asserts that `fx` marks the hold lost.
fn assert_lost(fx: &[Effect]) {
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Lost { .. })),
        "{fx:?}"
    );
}

/// A hold granted at `t0` by a request sent then, with `lease` (heartbeat the same).
fn granted_at(t0: Instant, lease: Duration, auto_renew: bool) -> HoldState {
    let plan = Plan {
        auto_renew,
        renew_every: None,
        max_hold: None,
    };
    let start = Start::Granted { sent_at: t0 };
    HoldState::new(start, lease, lease, plan, t0, Planted::default())
}

/// A table of single transitions: a confirmed renewal trusts from its send, never from its
/// reply; a request for a shorter lease lowers the trust before it is sent; one of unknown
/// outcome does not cap later trust (no request shortens a hold); a refused one loses it.
#[test]
fn transitions_table() {
    let t0 = Instant::now();
    let lease = ms(3_000);
    let mut hold = granted_at(t0, lease, true);
    let drift = |l: Duration| l / 100 + ms(2);
    assert_eq!(hold.validity().until, t0 + lease - drift(lease));
    assert_eq!(hold.next_wake(), Some(t0 + ms(1_000)), "renewed a third in");
    // The renewal leaves at 1 s and is answered at 1.3 s: trusted from 1 s.
    let fx = hold.on(Event::Tick, t0 + ms(1_000));
    let n = match fx.as_slice() {
        [Effect::Send {
            n,
            ask: Ask::Lease { lease: l, .. },
        }] if *l == lease => *n,
        other => panic!("expected one renewal, got {other:?}"),
    };
    hold.on(confirmed(n), t0 + ms(1_300));
    assert_eq!(hold.validity().until, t0 + ms(1_000) + lease - drift(lease));
    // An extend to 500 ms lowers the trust at its send.
    let fx = hold.on(extend(1, ms(500)), t0 + ms(1_400));
    assert!(matches!(fx.as_slice(), [Effect::Send { .. }]), "{fx:?}");
    let until = t0 + ms(1_400) + ms(500) - drift(ms(500));
    assert_eq!(hold.validity().until, until);
    // Its reply is lost: the caller learns of the failure.
    let n = n + 1;
    let fx = hold.on(reply(n, Outcome::Unknown), t0 + ms(1_500));
    let failed = Answer::Failed { n };
    assert_eq!(
        fx,
        vec![Effect::Answer {
            caller: 1,
            answer: failed
        }]
    );
    let n = sent(&hold.on(extend(2, ms(5_000)), t0 + ms(1_600)));
    hold.on(confirmed(n), t0 + ms(1_700));
    assert_eq!(
        hold.validity().until,
        t0 + ms(1_600) + ms(5_000) - drift(ms(5_000)),
        "a request of unknown outcome cannot shorten the hold: no cap"
    );
    // A refusal loses the hold; a release then ends it.
    let n = sent(&hold.on(extend(3, lease), t0 + ms(1_800)));
    assert_lost(&hold.on(reply(n, Outcome::Refused), t0 + ms(1_900)));
    assert!(hold.validity().lost);
    let release = Event::Release {
        by_owner: false,
        guard_gone: true,
    };
    let fx = hold.on(release, t0 + ms(2_000));
    assert!(fx.is_empty(), "the guard sends its own release: {fx:?}");
    assert!(!hold.is_done(), "its release is in flight");
    hold.on(Event::Released { held: Some(false) }, t0 + ms(2_100));
    assert!(hold.is_done());
}

/// A guard whose trust ran out is lost for good: an extend confirmed after that (its reply
/// late, or sent by a guard without automatic renewal past its lease) answers `false` and
/// revives nothing; an extend asked after that is refused without a send.
#[test]
fn a_reply_after_the_trust_ran_out_revives_nothing() {
    let t0 = Instant::now();
    let lease = ms(1_000);
    let trusted = t0 + lease - (lease / 100 + ms(2));
    let refused = |caller| Effect::Answer {
        caller,
        answer: Answer::Extended(false),
    };
    // An extend to 10 s sent at once, answered 1.5 s later: the renewal waits behind it, the
    // trust runs out at `trusted`, and the late confirmation finds the guard lost.
    let mut hold = granted_at(t0, lease, true);
    let n = sent(&hold.on(extend(1, ms(10_000)), t0));
    assert_eq!(hold.next_wake(), Some(trusted), "woken when the trust ends");
    assert_lost(&hold.on(Event::Tick, trusted));
    let fx = hold.on(confirmed(n), t0 + ms(1_500));
    assert_eq!(fx, vec![refused(1)]);
    assert!(hold.validity().lost && hold.validity().until <= trusted);
    // Without automatic renewal: nothing is sent for the guard past its trust; the tick at
    // its end marks it lost, and an extend after that is answered `false` unsent.
    let mut hold = granted_at(t0, lease, false);
    assert_eq!(hold.next_wake(), Some(trusted));
    assert_lost(&hold.on(Event::Tick, trusted));
    let fx = hold.on(extend(2, ms(10_000)), t0 + ms(1_100));
    assert_eq!(fx, vec![refused(2)]);
    assert!(!hold.is_trusted(t0 + ms(1_100)));
}

/// No lease request shortens the hold on the server, so a late one of a detached hold cannot
/// cut a lease another client's resume set; only the first request of a hold granted by a
/// hand-off names the hand-off's deadline (the server replaces that window with the lease as
/// long as the hold still has it): not a later renewal, not an `extend`.
#[test]
fn only_a_hand_off_claim_names_its_deadline() {
    let t0 = Instant::now();
    let plan = Plan {
        auto_renew: true,
        renew_every: None,
        max_hold: None,
    };
    let lease = ms(3_000);
    let handed_of = |fx: &[Effect]| match fx {
        [Effect::Send {
            n,
            ask: Ask::Lease { handed_until, .. },
        }] => (*n, *handed_until),
        other => panic!("expected one lease request, got {other:?}"),
    };
    let start = Start::HandedOver {
        attempt_sent_at: t0,
        until: 12_345,
    };
    let mut handed = HoldState::new(start, lease, ms(60_000), plan, t0, Planted::default());
    let (n, handed_until) = handed_of(&handed.on(Event::Tick, t0));
    assert_eq!(
        handed_until,
        Some(12_345),
        "the claim names the hand-off's deadline"
    );
    handed.on(confirmed(n), t0 + ms(10));
    let due = handed.next_wake().expect("renewal due");
    let (_, handed_until) = handed_of(&handed.on(Event::Tick, due));
    assert!(handed_until.is_none(), "a later renewal names no deadline");

    let mut granted = granted_at(t0, lease, true);
    let (n, handed_until) = handed_of(&granted.on(Event::Tick, t0 + ms(1_000)));
    assert!(
        handed_until.is_none(),
        "a granted hold's renewal names no deadline"
    );
    granted.on(confirmed(n), t0 + ms(1_010));
    let (_, handed_until) = handed_of(&granted.on(extend(1, ms(500)), t0 + ms(1_100)));
    assert!(handed_until.is_none(), "an extend names no deadline");
}
