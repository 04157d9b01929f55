//! What a hold is made with: its renewal plan (from the handle's options), the planted bugs
//! read once at the grant, and the trust a request or a hand-off buys.

use std::time::Duration;

use tokio::time::Instant;

use crate::vocab::bugs::Bug;
use crate::vocab::options::Options;

/// The planted bugs a hold was made with (feature `testing`; read once, at the grant).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Planted {
    /// [`Bug::HandOffTrustsHeartbeat`].
    pub hand_off_trusts_heartbeat: bool,
    /// [`Bug::UnorderedRenewals`].
    pub unordered_renewals: bool,
    /// [`Bug::StaleRenewalGiveUp`].
    pub stale_renewal_give_up: bool,
    /// [`Bug::DowngradeIgnoresLoss`].
    pub downgrade_ignores_loss: bool,
}

/// How a hold is renewed (from the handle's options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Renewals run on their own.
    pub auto_renew: bool,
    /// The renewal interval set (else a third of the lease).
    pub renew_every: Option<Duration>,
    /// No renewal after this long from the grant.
    pub max_hold: Option<Duration>,
}

impl Plan {
    /// The plan of a handle's options.
    pub(crate) fn of(opts: &Options) -> Plan {
        Plan {
            auto_renew: opts.auto_renew,
            renew_every: opts.renew_every,
            max_hold: opts.max_hold,
        }
    }
}

impl Planted {
    /// The bugs planted in this process now.
    pub(crate) fn now() -> Planted {
        use crate::vocab::bugs::planted;
        Planted {
            hand_off_trusts_heartbeat: planted(Bug::HandOffTrustsHeartbeat),
            unordered_renewals: planted(Bug::UnorderedRenewals),
            stale_renewal_give_up: planted(Bug::StaleRenewalGiveUp),
            downgrade_ignores_loss: planted(Bug::DowngradeIgnoresLoss),
        }
    }
}

/// The trust a request sent at `sent_at` for `lease` buys: the server applied it at or after
/// the send, so its deadline is at least `sent_at + lease`; drift is kept off.
pub fn trusted_until(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(Options::drift(lease))
}

/// How long a handed-over grant is trusted from the send of the waiter's latest refused
/// attempt: the release granted it until that attempt's heartbeat deadline, and the claim
/// that follows sets the server deadline to the lease from then, so never longer than either.
pub fn hand_off_window(heartbeat: Duration, lease: Duration, bugs: Planted) -> Duration {
    if bugs.hand_off_trusts_heartbeat {
        heartbeat
    } else {
        heartbeat.min(lease)
    }
}
