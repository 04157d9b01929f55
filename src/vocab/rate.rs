//! The rate limiter's vocabulary: a [`Rate`] (count per period, with a burst), what one
//! decision asks for ([`RateClaim`]) and answers ([`RateDecision`]), and what inspection reads
//! ([`RateSnapshot`]). See `docs/decisions/rate-limiter.md` for the algorithm.

use std::time::Duration;

use crate::vocab::claim::{ms, Busy};
use crate::vocab::error::{Error, Result};

/// Largest count per period, and largest burst, a [`Rate`] accepts: with periods of at most a
/// day, every quantity of the exact arithmetic stays an integer below 2⁵³, so the Lua scripts
/// (doubles) and the in-memory reference compute the same numbers.
pub const MAX_RATE_COUNT: u64 = 1_000_000;

/// Longest period a [`Rate`] accepts.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(86_400);

/// How many admissions a rate limiter allows per period, and how many at once (the burst).
///
/// `count` per `period` means one admission every `period / count` on average; the burst
/// (default: `count`) is how many may be admitted at once after a quiet spell. Over every
/// window of length `t` at most `burst + count·t/period` are admitted.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::Rate;
/// let api = Rate::per_second(100);                 // 100 a second, up to 100 at once
/// let smooth = Rate::per_second(100).burst(1);     // one every 10 ms, never two at once
/// let mail = Rate::per_hour(1_000).burst(50);
/// let custom = Rate::new(3, Duration::from_millis(1_500));
/// assert_eq!(smooth.burst_size(), 1);
/// assert_eq!(mail.count(), 1_000);
/// # drop((api, custom));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period: Duration,
    burst: u64,
}

impl Rate {
    /// `count` admissions per `period` (whole milliseconds, at most a day; another period is
    /// refused with an invalid-argument error when the limiter is used), with a burst of
    /// `count`.
    pub fn new(count: u64, period: Duration) -> Rate {
        Rate {
            count,
            period,
            burst: count,
        }
    }

    /// `count` per second.
    pub fn per_second(count: u64) -> Rate {
        Rate::new(count, Duration::from_secs(1))
    }

    /// `count` per minute.
    pub fn per_minute(count: u64) -> Rate {
        Rate::new(count, Duration::from_secs(60))
    }

    /// `count` per hour.
    pub fn per_hour(count: u64) -> Rate {
        Rate::new(count, Duration::from_secs(3_600))
    }

    /// The same rate with at most `burst` admitted at once (at least 1; a request for more
    /// than the burst can never be admitted, so it is refused with an invalid-argument error).
    #[must_use]
    pub fn burst(self, burst: u64) -> Rate {
        Rate { burst, ..self }
    }

    /// Admissions per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The period in whole milliseconds (a finer period is refused by [`Rate::check`]).
    pub fn period_ms(&self) -> u64 {
        ms(self.period)
    }

    /// The most admitted at once.
    pub fn burst_size(&self) -> u64 {
        self.burst
    }

    /// Refuses a rate the limiter cannot keep exactly: a zero count, period or burst, or one
    /// beyond [`MAX_RATE_COUNT`] or [`MAX_RATE_PERIOD`].
    pub fn check(&self) -> Result<()> {
        let bad = |what: &'static str, reason: String| Err(Error::InvalidArgument { what, reason });
        if self.count == 0 || self.count > MAX_RATE_COUNT {
            return bad(
                "rate",
                format!(
                    "{} per period; the count must be 1 to {MAX_RATE_COUNT} (use a longer period for a slower rate)",
                    self.count
                ),
            );
        }
        let whole_ms = self.period.subsec_nanos().is_multiple_of(1_000_000);
        if !whole_ms || self.period_ms() == 0 || self.period > MAX_RATE_PERIOD {
            return bad(
                "rate",
                format!(
                    "a period of {:?}; it must be 1 ms to one day in whole milliseconds",
                    self.period
                ),
            );
        }
        if self.burst == 0 || self.burst > MAX_RATE_COUNT {
            return bad(
                "burst",
                format!("{}; the burst must be 1 to {MAX_RATE_COUNT}", self.burst),
            );
        }
        Ok(())
    }

    /// Refuses a request for `permits` this rate can never admit: 0, or more than the burst.
    pub fn check_request(&self, permits: u64) -> Result<()> {
        self.check()?;
        if permits == 0 || permits > self.burst {
            return Err(Error::InvalidArgument {
                what: "permits",
                reason: format!(
                    "asked for {permits} at once, but the limiter admits 1 to {} (its burst) at once; ask for fewer, or raise the burst with Rate::burst",
                    self.burst
                ),
            });
        }
        Ok(())
    }
}

/// One decision asked of a store: `permits` admissions for `token` under `rate`; a waiting
/// claim's queue place lives `heartbeat` after each attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateClaim {
    /// Unique per acquisition; the queue place is found by it.
    pub token: String,
    /// Admissions asked for at once (1 ..= burst).
    pub permits: u64,
    /// The limit.
    pub rate: Rate,
    /// A waiter that does not attempt for this long is dropped from the queue.
    pub heartbeat: Duration,
}

impl RateClaim {
    /// A claim with a new token.
    pub fn new(permits: u64, rate: Rate, heartbeat: Duration) -> RateClaim {
        RateClaim {
            token: crate::vocab::token::next(),
            permits,
            rate,
            heartbeat,
        }
    }

    /// Refuses what no store could decide: a bad rate or request, a token a script could
    /// misread, a heartbeat under 1 ms.
    pub fn check(&self) -> Result<()> {
        self.rate.check_request(self.permits)?;
        crate::vocab::token::check(&self.token)?;
        if self.heartbeat < Duration::from_millis(1) {
            return Err(Error::InvalidArgument {
                what: "heartbeat",
                reason: "must be at least 1 ms".into(),
            });
        }
        Ok(())
    }
}

/// What one decision answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateDecision {
    /// Admitted at store-clock instant `at` (ms): now, or the earlier admission of the same
    /// token (a retry after a lost reply).
    Admitted {
        /// The store's clock at the admission.
        at: u64,
    },
    /// Refused: `retry_after` is when the request would fit if admitted in turn (exact for
    /// the head of the queue and for a request with nobody waiting; an estimate behind
    /// others), `position` the waiters ahead when queued, `heartbeat_until` the queue place's
    /// deadline.
    Refused(Busy),
}

/// One waiter of a rate limiter, as inspected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateWaiterState {
    /// The waiter's token.
    pub token: String,
    /// Admissions it asks for.
    pub permits: u64,
    /// Time left before its place lapses unless it attempts again, in ms.
    pub heartbeat_left_ms: u64,
}

/// A rate limiter's state, read in one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateSnapshot {
    /// The store's clock (ms).
    pub now: u64,
    /// How many single admissions would be granted now, one after the other, with nobody
    /// waiting (0 ..= burst).
    pub available: u64,
    /// When the next single admission fits, in ms from now (0: now).
    pub next_in_ms: u64,
    /// Live waiters in arrival (ticket) order.
    pub waiters: Vec<RateWaiterState>,
}
