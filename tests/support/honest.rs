//! Is a guard's trust honest? A guard that trusts until `valid_until` must never trust past
//! the server's lease of its hold, as an `inspect` reads it ([`server_deadline`],
//! [`assert_honest`]).

use redis_locks::LockInfo;
use tokio::time::Instant;

use super::time::ms;

/// The latest instant (local clock) the server's lease of the first holder in `info` can end:
/// `inspect` was answered by `answered`, and the server measured `lease_remaining` at or
/// before that (remaining is truncated to whole ms, hence +1 ms).
pub fn server_deadline(info: &LockInfo, answered: Instant) -> Option<Instant> {
    info.holders
        .iter()
        .map(|h| answered + h.lease_remaining + ms(1))
        .max()
}

/// Asserts that a guard trusting until `valid_until` (read BEFORE the `inspect` was sent, so a
/// renewal confirmed in between cannot make it look later than it was) does not trust past
/// the server's lease (read by an `inspect` answered at `answered`), with `slack` for
/// scheduling noise.
pub fn assert_honest(what: &str, valid_until: Instant, info: &LockInfo, answered: Instant) {
    let slack = ms(5);
    match server_deadline(info, answered) {
        Some(server) => assert!(
            valid_until <= server + slack,
            "{what}: the guard trusts {:?} past the server's lease",
            valid_until.saturating_duration_since(server)
        ),
        None => assert!(
            valid_until <= answered + slack,
            "{what}: the guard trusts {:?} ahead while the server lists no holder",
            valid_until.saturating_duration_since(answered)
        ),
    }
}

/// How far `valid_until` (read before the inspect) trusts past the server's lease in `info`
/// (answered at `answered`; no holder: past `answered`), beyond 5 ms of slack; `None` when it
/// does not.
pub fn trusts_past(
    valid_until: Instant,
    info: &LockInfo,
    answered: Instant,
) -> Option<std::time::Duration> {
    let server = server_deadline(info, answered).unwrap_or(answered);
    let over = valid_until.saturating_duration_since(server);
    (over > ms(5)).then_some(over)
}
