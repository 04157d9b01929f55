//! Per-handle options with their defaults and validation.

use std::time::Duration;

use crate::vocab::error::{Error, Result};

/// Default lease of every hold: 30 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Longest default heartbeat window of a waiter: 5 s (a waiter attempts again at least every
/// third of its window). The default window is the lease when the lease is shorter, so a
/// waiter that died blocks others for at most one lease, like a holder that died.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);
/// Default longest sleep of a waiter between attempts when no wake-up arrives: 1 s.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Default outage budget of a wait: 60 s. A wait keeps attempting through a Redis outage (a
/// restart, a failover) this long after its first failed attempt, then fails with
/// [`Error::Connection`](crate::Error::Connection). Long enough for a restart that reloads a
/// moderate data set or a Sentinel failover (about 10 to 30 s with common settings), short
/// enough that a Redis that does not come back is reported within a minute.
pub const DEFAULT_OUTAGE_BUDGET: Duration = Duration::from_secs(60);
/// Shortest accepted lease or heartbeat window: 10 ms.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// Longest accepted lease or heartbeat window: one year. Longer is a configuration mistake
/// (and past what a Redis TTL in ms and a Lua number represent exactly over time).
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Options shared by every handle kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub lease: Duration,
    pub auto_renew: bool,
    pub renew_every: Option<Duration>,
    /// Set explicitly; else [`Options::heartbeat`] derives it from the lease.
    pub heartbeat: Option<Duration>,
    pub retry_interval: Duration,
    /// After each grant, wait for this many replicas (at most this long) to acknowledge it.
    pub wait_replicas: Option<(u32, Duration)>,
    /// How long a wait keeps attempting while Redis cannot be reached.
    pub outage_budget: Duration,
    /// Who holds: appended to every claim token (`inspect` shows it), checked by
    /// [`crate::vocab::token::check_label`].
    pub label: std::sync::Arc<str>,
    /// Automatic renewals stop this long after the grant (the guard is lost when its trust
    /// runs out, the server's lease lapses within one lease).
    pub max_hold: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lease: DEFAULT_LEASE,
            auto_renew: true,
            renew_every: None,
            heartbeat: None,
            retry_interval: DEFAULT_RETRY_INTERVAL,
            wait_replicas: None,
            outage_budget: DEFAULT_OUTAGE_BUDGET,
            label: crate::vocab::token::default_label(),
            max_hold: None,
        }
    }
}

/// `at + d`, or the latest instant the clock can tell when that is past its limit (a user's
/// "wait forever" timeout plus a response timeout): deadlines never panic on overflow.
pub(crate) fn later(at: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    at.checked_add(d).unwrap_or_else(|| {
        // Halve what is added until it fits: the result is within a factor of two of the
        // clock's limit, decades away in every case.
        let mut step = d;
        loop {
            step /= 2;
            if let Some(t) = at.checked_add(step) {
                return t;
            }
        }
    })
}

pub(crate) fn check_duration(what: &'static str, d: Duration) -> Result<()> {
    if d < MIN_LEASE {
        return Err(Error::invalid(
            what,
            format!("{d:?} is shorter than the minimum {MIN_LEASE:?}"),
        ));
    }
    if d > MAX_LEASE {
        return Err(Error::invalid(
            what,
            format!("{d:?} is longer than the maximum {MAX_LEASE:?}"),
        ));
    }
    Ok(())
}

impl Options {
    /// Checks every option; called before anything is sent to Redis.
    pub fn validate(&self) -> Result<()> {
        crate::vocab::token::check_label(&self.label)?;
        check_duration("lease", self.lease)?;
        check_duration("heartbeat", self.heartbeat())?;
        if self.retry_interval.is_zero() || self.retry_interval > MAX_LEASE {
            return Err(Error::invalid(
                "retry interval",
                "must be more than zero and at most a year",
            ));
        }
        if self.outage_budget > MAX_LEASE {
            return Err(Error::invalid(
                "outage budget",
                "must be at most a year (zero gives up at the first failed attempt)",
            ));
        }
        if let Some((n, timeout)) = self.wait_replicas
            && (n == 0 || timeout.is_zero() || timeout > MAX_LEASE)
        {
            return Err(Error::invalid(
                "wait_replicas",
                "needs at least one replica and a timeout above zero",
            ));
        }
        if let Some(bound) = self.max_hold {
            check_duration("max_hold", bound)?;
        }
        if let Some(every) = self.renew_every
            && (every.is_zero() || every >= self.lease)
        {
            return Err(Error::invalid(
                    "renew interval",
                    format!("{every:?} must be more than zero and shorter than the lease {:?} (a third of it is a good choice)", self.lease),
                ));
        }
        Ok(())
    }

    /// The heartbeat window of a waiter: the one set, else the lease capped at
    /// [`DEFAULT_HEARTBEAT`]. A waiter's window bounds how long it blocks others once it died
    /// (its queue place, its writer announcement, a grant handed to it), so by default that
    /// is never longer than a dead holder's lease.
    pub fn heartbeat(&self) -> Duration {
        match self.heartbeat {
            Some(window) => window,
            None if crate::vocab::bugs::planted(crate::vocab::bugs::Bug::DeadWaiterBlocks) => {
                DEFAULT_HEARTBEAT
            }
            None => self.lease.min(DEFAULT_HEARTBEAT),
        }
    }

    /// The margin a holder keeps against clock drift and delays: 1% of the lease plus 2 ms.
    pub fn drift(lease: Duration) -> Duration {
        lease / 100 + Duration::from_millis(2)
    }
}

/// How often a hold whose lease is `lease` is renewed, with the interval set (`every`): never
/// more than half the lease; a third of it when none is set.
pub(crate) fn renew_interval(every: Option<Duration>, lease: Duration) -> Duration {
    match every {
        Some(every) => every.min(lease / 2),
        None => lease / 3,
    }
}
