//! Ticket-queue helpers shared by the FairLock and Semaphore tests: a planted dead waiter and
//! the match between `inspect`'s shortened tokens and a raw claim.

use std::time::Duration;

use redis_locks::testing::store::{Acquire, Claim, Request};
use redis_locks::LockClient;

/// A queued waiter that never attempts again (its process died): one raw
/// `acquire(wait = true)` of `request` on `name`, with the given heartbeat window.
pub async fn dead_waiter(
    client: &LockClient,
    name: &str,
    request: Request,
    heartbeat: Duration,
) -> Claim {
    let keys = client.keys(name).expect("keys");
    let claim = request.claim(Duration::from_secs(30), heartbeat);
    let reply = client
        .store()
        .acquire(&keys, &claim, true, None)
        .await
        .expect("raw acquire");
    assert!(
        matches!(reply, Acquire::Busy(_)),
        "the dead waiter must queue, got {reply:?}"
    );
    claim
}

/// True if `shown` (a shortened token from `inspect`) is `claim`'s.
pub fn is(shown: &str, claim: &Claim) -> bool {
    !shown.is_empty() && claim.token.starts_with(shown)
}
