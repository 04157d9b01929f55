//! Metrics on the `metrics` facade (feature `metrics`); no-ops without it.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `redis_locks_acquire_seconds` | histogram | `kind`, `outcome` | time from the first attempt to the outcome (granted, refused, timeout, error) |
//! | `redis_locks_hold_seconds` | histogram | `kind` | time from grant to release |
//! | `redis_locks_lost_leases_total` | counter | `kind` | leases lost while held |
//! | `redis_locks_queue_position` | gauge | `lock` | last position reported to a local waiter |

use std::time::Duration;

use crate::store::Slot;

/// A low-cardinality label for the kind of hold.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn kind(slot: &Slot) -> &'static str {
    match slot {
        Slot::Write => "write",
        Slot::Read => "read",
        Slot::Ticket {
            weight, capacity, ..
        } if weight >= capacity => "exclusive_ticket",
        Slot::Ticket { .. } => "ticket",
    }
}

#[cfg(feature = "metrics")]
mod imp {
    use super::*;

    pub(crate) fn acquired(slot: &Slot, outcome: &'static str, took: Duration) {
        metrics::histogram!("redis_locks_acquire_seconds", "kind" => kind(slot), "outcome" => outcome)
            .record(took.as_secs_f64());
    }

    pub(crate) fn held(slot: &Slot, took: Duration) {
        metrics::histogram!("redis_locks_hold_seconds", "kind" => kind(slot))
            .record(took.as_secs_f64());
    }

    pub(crate) fn lost(slot: &Slot) {
        metrics::counter!("redis_locks_lost_leases_total", "kind" => kind(slot)).increment(1);
    }

    pub(crate) fn position(lock: &str, position: u64) {
        metrics::gauge!("redis_locks_queue_position", "lock" => lock.to_owned())
            .set(position as f64);
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use super::*;

    pub(crate) fn acquired(_: &Slot, _: &'static str, _: Duration) {}
    pub(crate) fn held(_: &Slot, _: Duration) {}
    pub(crate) fn lost(_: &Slot) {}
    pub(crate) fn position(_: &str, _: u64) {}
}

pub(crate) use imp::{acquired, held, lost, position};

/// How many lock names [`unreleased`] remembers having warned about;
/// later names are logged at debug level only, so the set stays small.
const MAX_WARNED_NAMES: usize = 256;

/// Warns, once per lock name, that a claim of `name` was dropped where it cannot be
/// released: the lock stays held until its lease lapses. `cut`: its release had been sent
/// when its runtime ended, unanswered, so it may have been applied.
pub(crate) fn unreleased(name: &str, lease: Duration, cut: bool) {
    static WARNED: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
        std::sync::Mutex::new(None);
    let first = {
        let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
        let warned = warned.get_or_insert_with(Default::default);
        warned.len() < MAX_WARNED_NAMES && warned.insert(name.to_owned())
    };
    if first && cut {
        tracing::warn!(
            lock = name,
            ?lease,
            "the release of a claim of lock `{name}` was cut short by its runtime's shutdown \
             before the server answered: the lock may stay held until its lease ({lease:?}) \
             lapses. (Warned once per lock name.)"
        );
    } else if first {
        tracing::warn!(
            lock = name,
            ?lease,
            "a claim of lock `{name}` (a wait, or a guard whose engine had stopped) was \
             dropped where nothing could release it (outside a tokio runtime, or after its \
             runtime ended): the lock stays held until its lease ({lease:?}) lapses. \
             (Warned once per lock name.)"
        );
    } else {
        tracing::debug!(
            lock = name,
            "dropped where it could not be released; the lease will lapse"
        );
    }
}
