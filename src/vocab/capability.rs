//! What the lock scripts need of a server, one [`Capability`] each: what a server lacking it
//! is refused for ([`Error::UnsupportedServer`](crate::Error::UnsupportedServer)), and what
//! to do about it. Pure: the Redis store probes, this names and advises.

use std::fmt;

/// One thing the lock scripts need of the server, probed when a client connects (and by
/// [`LockClient::doctor`](crate::LockClient::doctor)). A server lacking one is refused with
/// [`Error::UnsupportedServer`](crate::Error::UnsupportedServer), which names it.
///
/// ```
/// use redis_locks::Capability;
/// assert!(Capability::ScriptClock.to_string().contains("TIME"));
/// assert!(!Capability::ScriptClock.advice().is_empty());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// Redis 7.0 or later (Valkey 7.2 or later), by the version the server reports: script
    /// flags on the shebang line, `PEXPIRE` with `NX`/`GT`, sharded pub/sub on Cluster.
    Version,
    /// RESP3 (`HELLO 3`): wake-ups arrive as pushed messages on the command connection.
    Resp3,
    /// Lua scripting (`SCRIPT LOAD`, `EVALSHA`, script flags): every step is one script.
    Scripting,
    /// `TIME` inside a script answers a plausible clock that advances from one script to the
    /// next: every deadline and fence is read from it.
    ScriptClock,
    /// `PEXPIRE` with the `GT` and `NX` options: a fence counter's TTL only ever grows.
    ExpireConditions,
}

impl Capability {
    /// What to do about a server that lacks this capability.
    pub fn advice(self) -> &'static str {
        match self {
            Capability::Version => {
                "upgrade the server to Redis 7.0 or later, or Valkey 7.2 or later (KeyDB, on a \
                 Redis 6 base, cannot serve locks)"
            }
            Capability::Resp3 => {
                "use a server (or proxy) that speaks RESP3 and passes its pushed messages: \
                 Redis 7.0 or later, Valkey; a proxy without pub/sub cannot serve locks"
            }
            Capability::Scripting => {
                "enable Lua scripting: on Valkey 9.1 or later load its Lua module, on Garnet \
                 start the server with --lua, and use no proxy or managed tier that blocks \
                 scripts"
            }
            Capability::ScriptClock => {
                "use a server whose TIME inside scripts reads the real clock (Redis, Valkey); \
                 Dragonfly's has answered 0 0, which would make deadlines and fences \
                 meaningless"
            }
            Capability::ExpireConditions => {
                "use Redis 7.0 or later, or Valkey 7.2 or later: PEXPIRE with GT and NX came \
                 with Redis 7.0 (KeyDB, on a Redis 6 base, lacks them)"
            }
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::Version => {
                "Redis 7.0 or later (or Valkey 7.2 or later) for script flags, PEXPIRE NX/GT \
                 and sharded pub/sub"
            }
            Capability::Resp3 => "RESP3 (HELLO 3), which carries the wake-ups as pushed messages",
            Capability::Scripting => "Lua scripting (SCRIPT LOAD and EVALSHA)",
            Capability::ScriptClock => {
                "a real clock from TIME inside scripts (plausible, and advancing between scripts)"
            }
            Capability::ExpireConditions => "PEXPIRE with the GT and NX options",
        })
    }
}

/// The earliest plausible server clock, in seconds since the epoch (2020-09-13).
const EARLIEST: u64 = 1_600_000_000;
/// The latest plausible one (2100-01-01).
const LATEST: u64 = 4_102_444_800;

/// Whether two readings of `TIME` inside scripts, `(seconds, microseconds)`, the second
/// taken by a later script, read a real clock: plausible dates, and advancing.
pub(crate) fn clock_is_real(first: (u64, u64), second: (u64, u64)) -> bool {
    let plausible = |(s, us): (u64, u64)| (EARLIEST..LATEST).contains(&s) && us < 1_000_000;
    plausible(first) && plausible(second) && second > first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_is_real_when_plausible_and_advancing() {
        let now = (1_795_770_031, 585_240);
        assert!(clock_is_real(now, (now.0, now.1 + 1)));
        assert!(clock_is_real(now, (now.0 + 1, 0)));
        // Dragonfly's `0 0`, a frozen clock, one going back, microseconds out of range.
        assert!(!clock_is_real((0, 0), (0, 0)));
        assert!(!clock_is_real(now, now));
        assert!(!clock_is_real(now, (now.0 - 1, 999_999)));
        assert!(!clock_is_real(now, (now.0, 1_000_000)));
        assert!(!clock_is_real((12, 5), (13, 5)));
    }
}
