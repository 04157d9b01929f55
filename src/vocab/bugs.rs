//! The planted bugs: client-side fixes that a test may revert (feature `testing`), to prove
//! that its check finds the bug. Without the feature nothing can be planted and
//! [`planted`] is always false.

#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU32, Ordering};

/// A client-side fix that a test may revert, to prove its check finds the bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bug {
    /// A handed-over hold trusts the waiter's whole heartbeat window, even when the lease is
    /// shorter, and a confirmed renewal only ever raises the trust (so the claim that sets the
    /// server deadline to the shorter lease does not lower it).
    HandOffTrustsHeartbeat,
    /// A wake-up's grant is used even after a later attempt of the same claim was refused.
    StaleGrant,
    /// Renewals and `extend` run concurrently and the local deadline only ever grows.
    UnorderedRenewals,
    /// The default heartbeat window is 5 s whatever the lease, so a waiter that died (its queue
    /// place, its writer announcement, a grant handed to it) blocks others for up to 5 s.
    DeadWaiterBlocks,
    /// A renewal reads the instant it gives up at (the trust end) before it waits behind an
    /// `extend`, so it may give up, and mark the hold lost, at a trust the `extend` raised.
    StaleRenewalGiveUp,
    /// A downgrade's reply is trusted even when the hold was released (`release_all`) or lost
    /// while the request was on its way.
    DowngradeIgnoresLoss,
    /// A waiter waits for its channel's subscription with no deadline of its own.
    UnboundedSubscribe,
    /// The in-memory rate limiter admits one more than its burst at once (an off-by-one in
    /// the GCRA tolerance), so a window can hold `burst + 1 + rate·t` admissions.
    RateBurstOffByOne,
    /// The in-memory rate limiter admits any queued waiter whose request fits, not only the
    /// head of the queue, so small requests overtake a large one at the head.
    RateOvertakes,
    /// A resumed hold is trusted from the reply to the renewal that resumed it, not from its
    /// send.
    ResumeTrustsReply,
    /// The in-memory rate limiter keeps a queue member without a heartbeat entry at the
    /// head, where it holds back every waiter behind it (a lost `rhb` entry wedged the
    /// limiter).
    RateKeepsMembersWithoutHeartbeat,
    /// The in-memory rate limiter deletes the queue's keys (`rq`, `rhb`, `rtk`) after a step
    /// that began on an empty queue, a foreign value there included, instead of leaving keys
    /// it did not use alone.
    RateDeletesForeignQueueKeys,
}

impl Bug {
    #[cfg(feature = "testing")]
    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

#[cfg(feature = "testing")]
static PLANTED: AtomicU32 = AtomicU32::new(0);

/// Reverts the fix for `bug` in this process (until [`unplant_all`]).
#[cfg(feature = "testing")]
pub fn plant(bug: Bug) {
    PLANTED.fetch_or(bug.bit(), Ordering::SeqCst);
}

/// Restores every fix.
#[cfg(feature = "testing")]
pub fn unplant_all() {
    PLANTED.store(0, Ordering::SeqCst);
}

/// True when a test reverted the fix for `bug` (never without the `testing` feature).
#[inline]
pub(crate) fn planted(bug: Bug) -> bool {
    #[cfg(feature = "testing")]
    {
        PLANTED.load(Ordering::Relaxed) & bug.bit() != 0
    }
    #[cfg(not(feature = "testing"))]
    {
        let _ = bug;
        false
    }
}
