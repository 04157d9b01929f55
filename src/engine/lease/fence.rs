//! A resume's fence check: the id's fence against the server's, before anything is renewed.

use super::*;

/// For a Mutex, FairLock or write hold: the server's fence must be the id's. The fence
/// counter is a live exclusive holder's fence (no grant takes one while it lives); a
/// Semaphore's is left out (its count may change under its holds). In quorum mode the store
/// reports the fence a majority agrees on. `Ok(true)`: the fence is the id's (or the hold is
/// not fenced); `Ok(false)`: the hold is gone (lapsed or released), as a refusal.
pub(super) async fn check_fence(
    store: &dyn Store,
    lock: &LockKeys,
    claim: &Claim,
    fence: u64,
) -> Result<bool> {
    use crate::vocab::claim::Family;
    let family = match claim.slot {
        Slot::Write => Family::LeaseLock,
        Slot::Ticket {
            resizable: false, ..
        } if claim.slot.is_exclusive() => Family::TicketQueue,
        _ => return Ok(true),
    };
    let snapshot = retrying(|| store.inspect(lock, family, None)).await.0?;
    let ours = |token: &str| {
        token == claim.token
            || token
                .strip_prefix(claim.token.as_str())
                .is_some_and(|rest| rest.starts_with('#'))
    };
    if !snapshot.holders.iter().any(|h| ours(&h.token)) {
        return Ok(false);
    }
    if snapshot.fence != fence {
        return Err(Error::MalformedHoldId {
            reason: format!(
                "its fencing token is not the one the server granted the hold on lock `{}` \
                 (the id was altered); the hold is left as it was",
                lock.name()
            ),
        });
    }
    Ok(true)
}
