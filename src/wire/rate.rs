//! The rate limiter's arguments and replies (`lua/rate_*.lua`), and its queue members
//! (`token#n`), which the in-memory reference builds here too.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, RedisWrite, ToRedisArgs, Value};

use super::{int, items, malformed, natural, optional, text, Ms};
use crate::vocab::claim::Busy;
use crate::vocab::rate::{RateClaim, RateDecision, RateSnapshot, RateWaiterState};

/// A limiter's queue member: the token, then `#<n>` when it asks for more than one.
pub(crate) fn rate_member(token: &str, permits: u64) -> String {
    if permits == 1 {
        token.to_owned()
    } else {
        format!("{token}#{permits}")
    }
}

/// The token and permits of a queue member.
pub(crate) fn parse_rate_member(member: &str) -> (&str, u64) {
    match member.rsplit_once('#') {
        Some((token, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (token, n.parse().unwrap_or(u64::MAX))
        }
        _ => (member, 1),
    }
}

/// `"1"` or `"0"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitFlag(pub bool);

impl ToRedisArgs for WaitFlag {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg(if self.0 { b"1" } else { b"0" });
    }
}

script_args! {
    /// `rate_acquire.lua`.
    RateAcquireArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        permits: u64,
        /// `ARGV[5]`.
        count: u64,
        /// `ARGV[6]`.
        period_ms: u64,
        /// `ARGV[7]`.
        burst: u64,
        /// `ARGV[8]`.
        heartbeat: Ms,
        /// `ARGV[9]`.
        wait: WaitFlag,
    }
}

impl<'a> RateAcquireArgs<'a> {
    /// One decision for `claim`.
    pub fn new(claim: &'a RateClaim, wait: bool) -> Self {
        RateAcquireArgs {
            token: &claim.token,
            permits: claim.permits,
            count: claim.rate.count(),
            period_ms: claim.rate.period_ms(),
            burst: claim.rate.burst_size(),
            heartbeat: Ms(claim.heartbeat),
            wait: WaitFlag(wait),
        }
    }
}

script_args! {
    /// `rate_cancel.lua`.
    RateCancelArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        permits: u64,
    }
}

script_args! {
    /// `rate_inspect.lua`.
    RateInspectArgs {
        /// `ARGV[3]`.
        count: u64,
        /// `ARGV[4]`.
        period_ms: u64,
        /// `ARGV[5]`.
        burst: u64,
    }
}

/// The reply of `rate_acquire.lua`: `{1, now}` admitted, `{0, retry_ms, position,
/// heartbeat_until}` refused (each `-1` when unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RateReply(pub RateDecision);

from_value_ref!(RateReply, |v| {
    const WHAT: &str = "rate limiter reply";
    match items(v, WHAT)? {
        [flag, at] if int(flag, WHAT)? == 1 => Ok(RateReply(RateDecision::Admitted {
            at: natural(at, "admission time")?,
        })),
        [flag, retry, position, heartbeat_until] if int(flag, WHAT)? == 0 => {
            Ok(RateReply(RateDecision::Refused(Busy {
                retry_after: optional(retry, "retry")?.map(Duration::from_millis),
                position: optional(position, "position")?,
                heartbeat_until: optional(heartbeat_until, "heartbeat deadline")?,
                token_released: false,
            })))
        }
        _ => Err(malformed(WHAT, v)),
    }
});

/// The reply of `rate_inspect.lua`: `{now, available, next_ms, {member, heartbeat_left, ...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RateView(pub RateSnapshot);

from_value_ref!(RateView, |v| {
    const WHAT: &str = "rate limiter inspect reply";
    match items(v, WHAT)? {
        [now, available, next, waiters] => {
            let rows = items(waiters, "rate limiter waiters")?;
            if rows.len() % 2 != 0 {
                return Err(malformed(WHAT, v));
            }
            let waiters = rows
                .chunks(2)
                .map(|row| {
                    let member = text(&row[0], "waiter")?;
                    let (token, permits) = parse_rate_member(&member);
                    Ok(RateWaiterState {
                        token: token.to_owned(),
                        permits,
                        heartbeat_left_ms: natural(&row[1], "heartbeat left")?,
                    })
                })
                .collect::<Result<Vec<_>, ParsingError>>()?;
            Ok(RateView(RateSnapshot {
                now: natural(now, "now")?,
                available: natural(available, "available")?,
                next_in_ms: natural(next, "next admission")?,
                waiters,
            }))
        }
        _ => Err(malformed(WHAT, v)),
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_carry_the_permits_beyond_one() {
        assert_eq!(rate_member("a", 1), "a");
        assert_eq!(rate_member("a", 3), "a#3");
        assert_eq!(parse_rate_member("a#3"), ("a", 3));
        assert_eq!(parse_rate_member("a"), ("a", 1));
        assert_eq!(parse_rate_member("a#"), ("a#", 1));
    }

    #[test]
    fn replies_parse_into_decisions() {
        let admitted = Value::Array(vec![Value::Int(1), Value::Int(42)]);
        assert_eq!(
            RateReply::from_redis_value_ref(&admitted).unwrap().0,
            RateDecision::Admitted { at: 42 }
        );
        let refused = Value::Array(vec![
            Value::Int(0),
            Value::Int(7),
            Value::Int(-1),
            Value::Int(-1),
        ]);
        assert_eq!(
            RateReply::from_redis_value_ref(&refused).unwrap().0,
            RateDecision::Refused(Busy {
                retry_after: Some(Duration::from_millis(7)),
                position: None,
                heartbeat_until: None,
                token_released: false,
            })
        );
        assert!(RateReply::from_redis_value_ref(&Value::Int(1)).is_err());
    }
}
