//! Wake-up messages: `*`, or the waiters a release granted (`token=fence@until`).

use super::*;

/// The message that wakes every local waiter of a lock.
pub(super) const WAKE_ALL: &str = "*";
/// The message of an election's proclaim or retract: wakes its observers only.
pub(super) const LEADER_CHANGED: &str = "^";

/// A grant announced in a wake-up (`fence@until` after `token=`): the lock was handed to the
/// named waiter with `fence`, until the store-clock instant `until` (ms), the waiter's
/// heartbeat deadline at the grant (`hand_over` in `rw_common.lua`, `promote` in
/// `queue_common.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HandOff {
    /// The fencing token of the grant.
    pub fence: u64,
    /// Until when the grant holds unless the waiter claims it; `None` in a bare `fence`
    /// (accepted, never sent by the scripts).
    pub until: Option<u64>,
}

impl HandOff {
    /// True when this grant names `refusal_deadline`, the heartbeat deadline the waiter's
    /// latest refused attempt was told: the release that made it then came after that
    /// attempt was applied.
    pub(crate) fn names(&self, refusal_deadline: Option<u64>) -> bool {
        self.until.is_some() && self.until == refusal_deadline
    }

    /// Parses `fence@until` (or a bare `fence`).
    fn parse(text: &str) -> Option<HandOff> {
        let (fence, until) = match text.split_once('@') {
            Some((f, u)) => (f, Some(u.parse().ok()?)),
            None => (text, None),
        };
        Some(HandOff {
            fence: fence.parse().ok()?,
            until,
        })
    }
}

impl fmt::Display for HandOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.until {
            Some(until) => write!(f, "{}@{until}", self.fence),
            None => write!(f, "{}", self.fence),
        }
    }
}

/// One waiter named in a wake-up: `token`, or `token=fence@until` when the message carries
/// its grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named<'a> {
    /// The waiter's token.
    pub token: Cow<'a, str>,
    /// The grant made to it, if the message says so. A grant part that does not parse is
    /// ignored: the waiter is still woken and confirms with an attempt.
    pub grant: Option<HandOff>,
}

impl Named<'static> {
    /// A waiter granted `grant`.
    pub fn granted(token: impl Into<String>, grant: HandOff) -> Self {
        Named {
            token: Cow::Owned(token.into()),
            grant: Some(grant),
        }
    }
}

/// A message published on a lock's wake-up channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WakeUp<'a> {
    /// `*`: every local waiter of the lock re-checks.
    All,
    /// Space-separated waiters: the ones concerned (a ticket queue names exactly the waiters
    /// it granted, each with its grant).
    Named(Vec<Named<'a>>),
    /// `^`: an election's leader proclaimed or retracted its value; wakes its observers
    /// (which every message wakes), no waiter.
    LeaderChanged,
}

impl<'a> WakeUp<'a> {
    /// Parses a message as published by the scripts (and the in-memory store). Never fails:
    /// a message of another form names waiters that do not exist, and wakes nobody.
    pub fn parse(message: &'a str) -> WakeUp<'a> {
        if message == WAKE_ALL {
            return WakeUp::All;
        }
        if message == LEADER_CHANGED {
            return WakeUp::LeaderChanged;
        }
        let named = message
            .split(' ')
            .filter(|part| !part.is_empty())
            .map(|part| match part.split_once('=') {
                Some((token, grant)) => Named {
                    token: Cow::Borrowed(token),
                    grant: HandOff::parse(grant),
                },
                None => Named {
                    token: Cow::Borrowed(part),
                    grant: None,
                },
            })
            .collect();
        WakeUp::Named(named)
    }
}

impl fmt::Display for WakeUp<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WakeUp::All => f.write_str(WAKE_ALL),
            WakeUp::LeaderChanged => f.write_str(LEADER_CHANGED),
            WakeUp::Named(named) => {
                for (i, n) in named.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    f.write_str(&n.token)?;
                    if let Some(grant) = n.grant {
                        write!(f, "={grant}")?;
                    }
                }
                Ok(())
            }
        }
    }
}
