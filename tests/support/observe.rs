//! Reading an election's [`Observer`] with bounds: the next state ([`next_within`]), the first
//! state with a given value ([`observe_until`]), and quiet ([`settled`]).

use std::time::Duration;

use redis_locks::{LeaderInfo, Observer};
use tokio::time::Instant;

/// The next state the observer yields, within `bound`.
pub async fn next_within(observer: &mut Observer, bound: Duration) -> Option<LeaderInfo> {
    tokio::time::timeout(bound, observer.next())
        .await
        .unwrap_or_else(|_| panic!("no observer state within {bound:?}"))
        .expect("the observer runs")
        .into_leader()
}

/// Reads the observer until it yields a state whose value is `want`.
pub async fn observe_until(
    observer: &mut Observer,
    want: Option<&str>,
    bound: Duration,
) -> Option<LeaderInfo> {
    let give_up = Instant::now() + bound;
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        let state = tokio::time::timeout(left, observer.next())
            .await
            .unwrap_or_else(|_| panic!("observer did not reach {want:?} within {bound:?}"))
            .expect("the observer runs")
            .into_leader();
        if state.as_ref().map(|l| l.value.as_str()) == want {
            return state;
        }
    }
}

/// The observer yields nothing more for `quiet` (it settled on its last state).
pub async fn settled(observer: &mut Observer, quiet: Duration) -> bool {
    tokio::time::timeout(quiet, observer.next()).await.is_err()
}
