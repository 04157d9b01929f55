//! The election's steps: the in-memory mirror of `election_proclaim.lua` and
//! `election_leader.lua`. The leader is the live holder of the name's one-permit ticket queue
//! that proclaimed a value; the value is kept with the proclaiming token, so a value left by
//! a leader that is gone is never reported.

use std::time::Duration;

use super::{LockState, Step, WakeUps};
use crate::vocab::claim::LeaderInfo;
use crate::wire::WakeUp;

/// election_proclaim.lua: sets (`Some`) or retracts (`None`) the value of `token`, if it is
/// the live holder; publishes the change.
pub(super) fn proclaim(
    state: &mut LockState,
    now: u64,
    token: &str,
    value: Option<&str>,
) -> Step<bool> {
    let mut wakes = WakeUps::default();
    let Some(deadline) = state
        .queue
        .holder_deadline(token)
        .filter(|deadline| *deadline > now)
    else {
        return wakes.reply(false);
    };
    match value {
        Some(value) => {
            state.leader = Some((token.to_owned(), state.fence, value.to_owned()));
            state.leader_until = super::expiry(now, deadline, state.pad);
        }
        None if state.leader.as_ref().is_some_and(|(t, _, _)| t == token) => state.leader = None,
        None => return wakes.reply(true),
    }
    wakes.0.push(WakeUp::LeaderChanged);
    wakes.reply(true)
}

/// election_leader.lua: the value the live holder proclaimed under its current grant, if any
/// (a value of an earlier grant of the same token has an older fence than the counter).
pub(super) fn leader(state: &LockState, now: u64) -> Option<LeaderInfo> {
    let (token, fence, value) = state.leader.as_ref()?;
    let deadline = state.queue.holder_deadline(token)?;
    (deadline > now && *fence == state.fence).then(|| LeaderInfo {
        value: value.clone(),
        term: *fence,
        time_left: Duration::from_millis(deadline - now),
    })
}
