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
