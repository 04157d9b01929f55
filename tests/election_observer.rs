//! Election observers (`Observer`) under faults: a leader's lease lapsing silently, quick
//! hand-overs with proclaims, `release_all` under a leadership, connections killed and the
//! script cache flushed, and a zero retry interval. On a real redis-server and on the
//! in-memory store.
//!
//! Every test asserts its property: an observer yields only real (value, term) pairs of one
//! grant and converges on the store's leader (or nobody) within its bounds, without
//! hammering the server.

mod support;
use support::quick::{soon, Quick};

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::{Error, LockClient};
use tokio::time::{sleep, Instant};

use support::backend::{until_waiters, Backend, EVENTUALLY};
use support::observe::{next_within, observe_until, settled};
use support::time::{ms, secs};
use support::waits::BEFORE_THE_LEASE;

/// An observer with a retry interval far longer than the test sees a leader's lapse (no
/// message is published when a lease runs out) at the lease's end.
async fn observer_sees_a_silent_lapse_at_the_lease_end(b: Backend) {
    let name = "observer-silent";
    let lazy = b.client_with(LockClient::builder().auto_renew(false)).await;
    let watcher = b.client().await;
    // Every bound below is far shorter than this: what the observer yields in time came from
    // its first read, a wake-up or its read at the lease's end, never from its periodic read.
    let interval = secs(60);
    // Sooner than the periodic read would explain, with room for a loaded machine.
    let before_the_interval = interval / 6;
    let mut observer = watcher.election(name).retry_interval(interval).observe();
    assert_eq!(next_within(&mut observer, EVENTUALLY).await, None);
    let lease = ms(300);
    let l = lazy.campaign_for(name, lease, "a").await;
    let started = Instant::now();
    observe_until(&mut observer, Some("a"), EVENTUALLY).await;
    // At the lease's end.
    observe_until(&mut observer, None, before_the_interval).await;
    assert!(started.elapsed() < before_the_interval);
    drop(l);
}

/// Leaders A, B, C in quick succession (each proclaims a second value right after winning,
/// then resigns with the next candidate queued; the last one, C, stays). An observer started
/// before must settle on exactly C's latest value and term, and every state it yielded must
/// have been a real (value, term) pair of one grant (never A's value with B's term).
async fn observer_settles_on_the_last_grant_after_quick_handovers(b: Backend) {
    let name = "observer-observer-chain";
    let c = b.client().await;
    let mut observer = c.election(name).observe();
    type States = Vec<Option<(String, u64)>>;
    let seen: Arc<StdMutex<States>> = Arc::default();
    let seen2 = seen.clone();
    let watch = tokio::spawn(async move {
        while let Some(state) = observer.next().await {
            seen2
                .lock()
                .unwrap()
                .push(state.into_leader().map(|s| (s.value, s.term)));
        }
    });
    let mut pairs: Vec<(String, u64)> = Vec::new();
    let mut current = {
        let mut l = c.election(name).campaign("a0").await.expect("a");
        pairs.push(("a0".into(), l.term()));
        l.proclaim("a1").await.expect("proclaim");
        pairs.push(("a1".into(), l.term()));
        l
    };
    for who in ["b", "c"] {
        let next_client = b.client().await;
        let v0 = format!("{who}0");
        let task = tokio::spawn(async move {
            let l = next_client
                .election(name)
                .campaign(v0)
                .await
                .expect("campaign");
            (next_client, l)
        });
        until_waiters(1, async || c.fair_lock(name).inspect().await).await;
        assert!(
            current.resign().await.expect("resign"),
            "[{}] resign",
            b.kind
        );
        let (_client, mut l) = task.await.expect("task");
        pairs.push((format!("{who}0"), l.term()));
        l.proclaim(format!("{who}1")).await.expect("proclaim");
        pairs.push((format!("{who}1"), l.term()));
        current = l;
        std::mem::forget(_client);
    }
    let last = ("c1".to_string(), current.term());
    support::backend::eventually("the observer settles on c1", async || {
        seen.lock().unwrap().last().cloned().flatten() == Some(last.clone())
    })
    .await;
    sleep(ms(300)).await;
    let states = seen.lock().unwrap().clone();
    assert_eq!(
        states.last().cloned().flatten(),
        Some(last.clone()),
        "[{}] final observer state",
        b.kind
    );
    for s in states.iter().flatten() {
        assert!(
            pairs.contains(s),
            "[{}] the observer yielded {s:?}, no grant's pair: {pairs:?}",
            b.kind
        );
    }
    let got = c.leader_of(name).await.expect("c leads");
    assert_eq!((got.value, got.term), last, "[{}] leader()", b.kind);
    watch.abort();
    drop(current);
}

/// `release_all()` while leading: the leadership is gone (proclaim refused, resign false), the
/// store says nobody leads at once, and an observer converges by its next periodic read (its
/// 1.5 s retry interval) even though that release publishes nothing and retracts nothing:
/// checked as sooner than the 30 s lease's end it would otherwise wait for.
async fn release_all_under_a_leadership(b: Backend) {
    let c = b.client().await;
    let watcher = b.client().await;
    let name = "observer-relall";
    let interval = ms(1500);
    let mut observer = watcher.election(name).retry_interval(interval).observe();
    let mut l = c.election(name).campaign("a").await.expect("campaign");
    observe_until(&mut observer, Some("a"), EVENTUALLY).await;
    assert!(c.release_all().await.expect("release_all") >= 1);
    assert!(!l.is_held());
    assert_eq!(watcher.election(name).leader().await.expect("leader"), None);
    let released = Instant::now();
    observe_until(&mut observer, None, BEFORE_THE_LEASE).await;
    let stale = released.elapsed();
    let err = l.proclaim("b").await.expect_err("released");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!l.resign().await.expect("resign"));
    assert!(
        stale < BEFORE_THE_LEASE,
        "observer stale for {stale:?} (retry interval {interval:?})"
    );
}

/// The observer ends on the store's leader through CLIENT KILL of every connection, SCRIPT
/// FLUSH, a proclaim right before a resign, and a leader dropped without resigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_observer_converges_through_kills_and_flushes() {
    let b = Backend::redis();
    let leader_client = b.client().await;
    let watcher = b.client().await;
    let name = "observer-kill";
    let mut observer = watcher.election(name).retry_interval(ms(300)).observe();
    assert_eq!(next_within(&mut observer, EVENTUALLY).await, None);
    let mut l = leader_client.lead(name, "v0").await;
    observe_until(&mut observer, Some("v0"), EVENTUALLY).await;
    let disruptions: [&[&str]; 4] = [
        &["CLIENT", "KILL", "TYPE", "pubsub"],
        &["CLIENT", "KILL", "TYPE", "normal"],
        &["SCRIPT", "FLUSH"],
        &["CLIENT", "KILL", "TYPE", "normal"],
    ];
    for (i, cmd) in disruptions.iter().enumerate() {
        b.cli(cmd);
        let value = format!("v{}", i + 1);
        // The leader's own connection may have been killed too: a proclaim may fail once.
        let mut tries = 0;
        loop {
            match l.proclaim(value.clone()).await {
                Ok(()) => break,
                Err(e) if e.is_connection() && tries < 5 => tries += 1,
                Err(e) => panic!("proclaim {value}: {e}"),
            }
        }
        let seen = observe_until(&mut observer, Some(&value), EVENTUALLY).await;
        assert_eq!(seen.map(|s| s.term), Some(l.term()));
    }
    // A proclaim right before the resign: the observer must end on nobody, not the last value.
    l.proclaim("last").await.expect("proclaim");
    assert!(l.resign().await.expect("resign"));
    observe_until(&mut observer, None, EVENTUALLY).await;
    assert!(settled(&mut observer, ms(700)).await, "settled on nobody");
    // A dropped leadership: observers learn without a resign call.
    let l = leader_client.lead(name, "dropped").await;
    observe_until(&mut observer, Some("dropped"), EVENTUALLY).await;
    drop(l);
    observe_until(&mut observer, None, EVENTUALLY).await;
    assert_eq!(watcher.election(name).leader().await.expect("leader"), None);
}

/// An observer handle with a zero retry interval (a zero duration the campaign refuses as
/// invalid input): it must either refuse too (closed, saying why) or at least not hammer the
/// server in a loop with no pause. (Found a break: observe() did not validate the options and
/// re-read back to back; fixed: it validates, and an observer pauses at least 10 ms.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_observer_with_zero_retry_interval_is_refused_or_paced() {
    let b = Backend::redis();
    let c = b.client().await;
    let election = c.election("observer-zero").retry_interval(Duration::ZERO);
    assert!(election
        .campaign("v")
        .await
        .expect_err("zero")
        .is_invalid_input());
    b.cli(&["CONFIG", "RESETSTAT"]);
    let mut observer = election.observe();
    let first = soon("an answer", observer.next()).await;
    tokio::time::sleep(ms(500)).await;
    let stats = b.cli(&["INFO", "commandstats"]);
    let calls: u64 = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    drop(observer);
    let refused = first.is_none();
    assert!(
        refused || calls < 100,
        "observe() with a zero retry interval was neither refused nor paced: {calls} leader reads in 0.5 s"
    );
}

both_backends!(
    observer_sees_a_silent_lapse_at_the_lease_end,
    observer_settles_on_the_last_grant_after_quick_handovers,
    release_all_under_a_leadership,
);
