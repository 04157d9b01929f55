//! Which primitive holds a lock name, told from what the store keeps: the holder records of
//! both families, the ticket queue's capacity at `cap` (a count stored by `set_permits`, or
//! the marker its claims leave: `~<n>` for Semaphores of n, `=<n>` for FairLock (1) and the
//! fair RwLock (2^30); docs/decisions/capacity-marker.md) and an election's leader value `lv`.
//!
//! The lease lock keeps a writer as `"<deadline>|<token>"` whichever handle took it, so a
//! Mutex holder and an RwLock writer look the same: they are shown as "Mutex or RwLock write".

use redis_locks::HoldKind;

/// A fair RwLock's ticket queue has this many permits: a reader takes one, a writer all
/// (docs/ARCHITECTURE.md, "Two families of state").
pub const FAIR_RW_PERMITS: u32 = 1 << 30;

/// The ticket queue's capacity as `cap` holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// `"<n>"`: stored by `set_permits` (a Semaphore of n).
    Stored(u32),
    /// `"~<n>"`: the marker of Semaphores of n.
    Semaphore(u32),
    /// `"=<n>"`: a fixed capacity (1: FairLock or election, 2^30: fair RwLock).
    Fixed(u32),
}

impl Capacity {
    /// `cap`'s value, or `None` for a value redis-locks does not write.
    pub fn parse(raw: &str) -> Option<Capacity> {
        let (make, digits): (fn(u32) -> Capacity, &str) = match raw.as_bytes().first()? {
            b'~' => (Capacity::Semaphore, &raw[1..]),
            b'=' => (Capacity::Fixed, &raw[1..]),
            _ => (Capacity::Stored, raw),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().filter(|n| *n >= 1).map(make)
    }

    /// The number of permits of a Semaphore, if the queue is one's.
    pub fn semaphore_permits(self) -> Option<u32> {
        match self {
            Capacity::Stored(n) | Capacity::Semaphore(n) => Some(n),
            Capacity::Fixed(_) => None,
        }
    }

    /// Where the count comes from, for JSON.
    pub fn source(self) -> &'static str {
        match self {
            Capacity::Stored(_) => "set_permits",
            Capacity::Semaphore(_) => "marker",
            Capacity::Fixed(_) => "fixed",
        }
    }
}

/// The primitive a whole lock name is used as, from its live holders and `cap` / `lv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// Nobody holds it.
    None,
    /// The lease lock's writer: a Mutex or an RwLock writer (the store cannot tell).
    MutexOrRwLockWrite,
    /// The lease lock's readers.
    RwLockRead,
    FairLock,
    /// The fair RwLock (ticket queue of 2^30 permits).
    FairRwLock,
    Semaphore(u32),
    Election,
    /// A ticket queue whose capacity is not known (no or a foreign `cap`).
    Queue,
}

impl Primitive {
    /// Snake-case id for JSON.
    pub fn id(self) -> &'static str {
        match self {
            Primitive::None => "none",
            Primitive::MutexOrRwLockWrite => "mutex_or_rwlock_write",
            Primitive::RwLockRead => "rwlock_read",
            Primitive::FairLock => "fair_lock",
            Primitive::FairRwLock => "rwlock_fair",
            Primitive::Semaphore(_) => "semaphore",
            Primitive::Election => "election",
            Primitive::Queue => "ticket_queue",
        }
    }

    /// For people.
    pub fn text(self) -> String {
        match self {
            Primitive::None => "not held".into(),
            Primitive::MutexOrRwLockWrite => "Mutex or RwLock write".into(),
            Primitive::RwLockRead => "RwLock read".into(),
            Primitive::FairLock => "FairLock".into(),
            Primitive::FairRwLock => "RwLock (fair)".into(),
            Primitive::Semaphore(n) => format!("Semaphore of {n}"),
            Primitive::Election => "election".into(),
            Primitive::Queue => "ticket queue (capacity unknown)".into(),
        }
    }

    /// True for the kinds that are no election (`leader` exits 4 on them).
    pub fn is_not_election(self) -> bool {
        matches!(
            self,
            Primitive::MutexOrRwLockWrite
                | Primitive::RwLockRead
                | Primitive::FairRwLock
                | Primitive::Semaphore(_)
        )
    }
}

/// The primitive of a name: the lease lock's holders first (write, else read), then the
/// ticket queue's (an election when `lv` is set, else by its capacity).
pub fn primitive(
    lease: &[HoldKind],
    queue_held: bool,
    cap: Option<Capacity>,
    election: bool,
) -> Primitive {
    if lease.iter().any(|k| matches!(k, HoldKind::Write)) {
        return Primitive::MutexOrRwLockWrite;
    }
    if !lease.is_empty() {
        return Primitive::RwLockRead;
    }
    if !queue_held && !election {
        return Primitive::None;
    }
    if election {
        return Primitive::Election;
    }
    queue_primitive(cap)
}

/// A ticket queue's primitive from its capacity.
pub fn queue_primitive(cap: Option<Capacity>) -> Primitive {
    match cap {
        Some(Capacity::Fixed(1)) => Primitive::FairLock,
        Some(Capacity::Fixed(FAIR_RW_PERMITS)) => Primitive::FairRwLock,
        Some(c) => c
            .semaphore_permits()
            .map_or(Primitive::Queue, Primitive::Semaphore),
        None => Primitive::Queue,
    }
}

/// One holder's kind, for people: `Mutex or RwLock write`, `RwLock read`, `FairLock`,
/// `RwLock (fair) write`, `RwLock (fair) read`, `1 of 3 permits`, `election candidate`.
pub fn holder_text(kind: HoldKind, queue: Primitive) -> String {
    match (kind, queue) {
        (HoldKind::Write, _) => "Mutex or RwLock write".into(),
        (HoldKind::Read, _) => "RwLock read".into(),
        (HoldKind::Permits(FAIR_RW_PERMITS), _) => "RwLock (fair) write".into(),
        (HoldKind::Permits(_), Primitive::FairRwLock) => "RwLock (fair) read".into(),
        (HoldKind::Permits(_), Primitive::FairLock) => "FairLock".into(),
        (HoldKind::Permits(_), Primitive::Election) => "election (leader's hold)".into(),
        (HoldKind::Permits(n), Primitive::Semaphore(of)) => format!("{n} of {of} permits"),
        (HoldKind::Permits(1), _) => "1 permit".into(),
        (HoldKind::Permits(n), _) => format!("{n} permits"),
        #[allow(unreachable_patterns)]
        _ => "other".into(),
    }
}

/// One holder's kind id, for JSON.
pub fn holder_id(kind: HoldKind, queue: Primitive) -> &'static str {
    match (kind, queue) {
        (HoldKind::Write, _) => "mutex_or_rwlock_write",
        (HoldKind::Read, _) => "rwlock_read",
        (HoldKind::Permits(FAIR_RW_PERMITS), _) => "rwlock_fair_write",
        (HoldKind::Permits(_), Primitive::FairRwLock) => "rwlock_fair_read",
        (HoldKind::Permits(_), Primitive::FairLock) => "fair_lock",
        (HoldKind::Permits(_), Primitive::Election) => "election",
        (HoldKind::Permits(_), Primitive::Semaphore(_)) => "semaphore",
        (HoldKind::Permits(_), _) => "permits",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_capacity_form() {
        assert_eq!(Capacity::parse("3"), Some(Capacity::Stored(3)));
        assert_eq!(Capacity::parse("~3"), Some(Capacity::Semaphore(3)));
        assert_eq!(Capacity::parse("=1"), Some(Capacity::Fixed(1)));
        for bad in ["", "~", "=0", "x", "~-1", "3x"] {
            assert_eq!(Capacity::parse(bad), None, "{bad}");
        }
    }
}
