//! A shared event log of grants and releases, and the safety checks run on it.
//!
//! Every task that holds a lock records `enter` right after it was granted and `exit` right
//! before it releases. One mutex guards the log and the in-critical-section counters, so the
//! log is a linear order and an overlap is seen by the `enter` that causes it, whatever the
//! timing. A violation is recorded (not panicked on, so a failing task cannot hide it), and
//! [`History::check_exclusion`] reports them all at the end.
//!
//! ```ignore
//! let h = History::new();
//! let t = h.enter(Kind::Write, guard.fencing_token());
//! // ... work ...
//! h.exit(t);
//! guard.release().await?;
//! h.check_exclusion();
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a hold excludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A shared hold (RwLock reader): excludes writers only.
    Read,
    /// The exclusive hold of an RwLock: excludes everything.
    Write,
    /// The hold of a one-holder lock (Mutex, FairLock): excludes everything.
    Exclusive,
    /// Permits of a semaphore: shared, bounded by the capacity given to
    /// [`History::with_capacity`].
    Permits(u32),
}

impl Kind {
    /// True for holds that exclude every other hold (and take a new fence).
    pub fn is_exclusive(self) -> bool {
        matches!(self, Kind::Write | Kind::Exclusive)
    }
}

/// Grant (`enter`) or release (`exit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The hold began.
    Grant,
    /// The hold ended.
    Release,
}

/// One entry of the log.
#[derive(Clone, Debug)]
pub struct Event {
    /// Position in the log (0, 1, 2, ...).
    pub seq: usize,
    /// Which hold (the same for its grant and its release).
    pub hold: usize,
    /// Who held it: a label, or the tokio task id.
    pub task: String,
    /// What was held.
    pub kind: Kind,
    /// The fencing token reported by the guard.
    pub fence: u64,
    /// Grant or release.
    pub phase: Phase,
    /// Local monotonic time of the record.
    pub at: Instant,
}

/// Proof of a recorded grant; give it back to [`History::exit`].
#[must_use = "pass the ticket to History::exit when the hold ends"]
#[derive(Debug)]
pub struct Ticket {
    hold: usize,
    task: String,
    kind: Kind,
    fence: u64,
}

impl Ticket {
    /// The fence recorded at the grant.
    pub fn fence(&self) -> u64 {
        self.fence
    }
}

#[derive(Default)]
struct State {
    exclusive: usize,
    shared: usize,
    permits: u64,
    max_shared: usize,
    next_hold: usize,
    events: Vec<Event>,
    violations: Vec<String>,
}

/// The shared log; clones share it.
#[derive(Clone)]
pub struct History {
    state: Arc<Mutex<State>>,
    capacity: Option<u64>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("History")
            .field("events", &s.events.len())
            .field("violations", &s.violations)
            .finish()
    }
}

impl History {
    /// An empty log with no permit bound.
    pub fn new() -> Self {
        History {
            state: Arc::new(Mutex::new(State::default())),
            capacity: None,
        }
    }

    /// An empty log that also checks that [`Kind::Permits`] held at once never exceed
    /// `capacity` (semaphores).
    pub fn with_capacity(capacity: u64) -> Self {
        History {
            capacity: Some(capacity),
            ..Self::new()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a grant by the current tokio task (or `"-"` outside one).
    pub fn enter(&self, kind: Kind, fence: u64) -> Ticket {
        let task = tokio::task::try_id()
            .map(|id| format!("task-{id}"))
            .unwrap_or_else(|| "-".to_owned());
        self.enter_as(task, kind, fence)
    }

    /// Records a grant by `task` (a label such as `"R1"`), checking it against every hold
    /// open at this moment.
    pub fn enter_as(&self, task: impl Into<String>, kind: Kind, fence: u64) -> Ticket {
        let task = task.into();
        let mut s = self.lock();
        let clash = match kind {
            Kind::Write | Kind::Exclusive => {
                (s.exclusive > 0 || s.shared > 0 || s.permits > 0).then(|| {
                    format!(
                        "{task} granted {kind:?} (fence {fence}) while {} exclusive, {} shared, {} permits were held",
                        s.exclusive, s.shared, s.permits
                    )
                })
            }
            Kind::Read => (s.exclusive > 0).then(|| {
                format!(
                    "{task} granted Read (fence {fence}) while {} exclusive holds were open",
                    s.exclusive
                )
            }),
            Kind::Permits(n) => {
                let over = self
                    .capacity
                    .filter(|&cap| s.permits + u64::from(n) > cap)
                    .map(|cap| {
                        format!(
                            "{task} granted {n} permits while {} of {cap} were held",
                            s.permits
                        )
                    });
                if s.exclusive > 0 {
                    Some(format!(
                        "{task} granted {n} permits while {} exclusive holds were open",
                        s.exclusive
                    ))
                } else {
                    over
                }
            }
        };
        if let Some(why) = clash {
            s.violations.push(why);
        }
        match kind {
            Kind::Write | Kind::Exclusive => s.exclusive += 1,
            Kind::Read => s.shared += 1,
            Kind::Permits(n) => s.permits += u64::from(n),
        }
        s.max_shared = s.max_shared.max(s.shared);
        let hold = s.next_hold;
        s.next_hold += 1;
        let seq = s.events.len();
        s.events.push(Event {
            seq,
            hold,
            task: task.clone(),
            kind,
            fence,
            phase: Phase::Grant,
            at: Instant::now(),
        });
        Ticket {
            hold,
            task,
            kind,
            fence,
        }
    }

    /// Records the end of the hold behind `ticket` (call it before releasing the lock).
    pub fn exit(&self, ticket: Ticket) {
        let mut s = self.lock();
        match ticket.kind {
            Kind::Write | Kind::Exclusive => s.exclusive -= 1,
            Kind::Read => s.shared -= 1,
            Kind::Permits(n) => s.permits -= u64::from(n),
        }
        let seq = s.events.len();
        s.events.push(Event {
            seq,
            hold: ticket.hold,
            task: ticket.task,
            kind: ticket.kind,
            fence: ticket.fence,
            phase: Phase::Release,
            at: Instant::now(),
        });
    }

    /// Every event so far, in log order.
    pub fn events(&self) -> Vec<Event> {
        self.lock().events.clone()
    }

    /// The grants so far, in log order.
    pub fn grants(&self) -> Vec<Event> {
        self.lock()
            .events
            .iter()
            .filter(|e| e.phase == Phase::Grant)
            .cloned()
            .collect()
    }

    /// The overlaps seen so far.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Most shared holds ([`Kind::Read`]) open at one moment.
    pub fn max_concurrent_reads(&self) -> usize {
        self.lock().max_shared
    }

    /// Panics with every violation found: an exclusive hold beside any other hold, a read
    /// beside a write, permits beyond the capacity, exclusive fences not strictly increasing
    /// in grant order.
    pub fn check_exclusion(&self) {
        let mut problems = self.violations();
        let mut last: Option<(u64, String)> = None;
        for g in self.grants().iter().filter(|g| g.kind.is_exclusive()) {
            if let Some((prev, who)) = &last
                && g.fence <= *prev
            {
                problems.push(format!(
                    "exclusive fence {} of {} (event {}) does not exceed {prev} of {who}",
                    g.fence, g.task, g.seq
                ));
            }
            last = Some((g.fence, g.task.clone()));
        }
        assert!(
            problems.is_empty(),
            "{} exclusion violations, first ones:\n{}",
            problems.len(),
            problems
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// Panics unless every shared grant reports the fence of the last exclusive grant before
    /// it in the log (0 before any). Valid only when no hold expired unseen.
    pub fn check_shared_fences(&self) {
        self.check_shared(|fence, last| fence == last, "instead of");
    }

    /// Panics unless every shared grant reports at least the fence of the last exclusive
    /// grant before it in the log: quorum mode's promise, where a writer's attempt that only a
    /// minority granted has raised those servers' counters, and a reader granted by one of them
    /// reports that higher fence (docs/SCALE.md, "Fencing tokens under quorum").
    pub fn check_shared_fences_at_least(&self) {
        self.check_shared(|fence, last| fence >= last, "below");
    }

    fn check_shared(&self, ok: fn(u64, u64) -> bool, relation: &str) {
        let mut last = 0;
        let mut problems = Vec::new();
        for g in self.grants() {
            if g.kind.is_exclusive() {
                last = g.fence;
            } else if !ok(g.fence, last) {
                problems.push(format!(
                    "{} granted {:?} with fence {} {relation} the last exclusive fence {last} \
                     (event {})",
                    g.task, g.kind, g.fence, g.seq
                ));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
