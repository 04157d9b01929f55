//! Adversarial review 7: three late fixes attacked through the public API, on a private
//! redis-server and on the in-memory store.
//! 1. A scheduled renewal reads its give-up instant only once its turn came (after any
//!    `extend` ahead of it), and a hold whose renewal died with its runtime is rescheduled by
//!    the next `extend`.
//! 2. `leader()` reports the stored value only while its token holds live AND its fence is
//!    the counter.
//! 3. A refused head waiter of a ticket queue is told the first holder's lease end.
//!
//! One found a break, fixed since:
//! `runtime_dies_with_its_renewal_in_flight_and_an_extend_queued` (the reschedule after a
//! runtime death relied on `is_finished()`, which a queued extend could outrun; a renewal now
//! leaves the `Renewing` state before it releases the request lock, answered or dropped).

mod support;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::{LockClient, LockInfo};
use tokio::time::{sleep, sleep_until, Instant};

use support::backend::{until_waiters, Backend};
use support::faulty::{Faulty, Gate, Op, Rule};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The latest instant the server's lease of the first holder can end, `inspect` answered at
/// `answered` (+1 ms for the truncation to whole ms).
fn server_deadline(info: &LockInfo, answered: Instant) -> Option<Instant> {
    info.holders
        .iter()
        .map(|h| answered + h.lease_remaining + ms(1))
        .max()
}

/// `valid_until` read BEFORE the inspect was sent never exceeds the server's deadline.
fn assert_honest(what: &str, valid_until: Instant, info: &LockInfo, answered: Instant) {
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

// ------------------------------------------------------------------------------------------
// Fix 1: renewals, extends, runtimes
// ------------------------------------------------------------------------------------------

// ------------------------------------------------------------------------------------------
// Fix 2: leader()
// ------------------------------------------------------------------------------------------

/// A leader's report must survive attempts of every other primitive on the election's name
/// (refused or not, none may move the fence counter under a live leader), and report the
/// next leader's value and term once it proclaimed; nobody in between.
async fn leader_report_survives_foreign_attempts(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let name = "adv7-leader-foreign";
    let e = c.election(name);
    let a = e.campaign("a").await.expect("campaign");
    let term = a.term();
    let expect_a = |what: &str, got: Option<redis_locks::LeaderInfo>| {
        let got = got.unwrap_or_else(|| panic!("[{}] {what}: nobody leads", b.kind));
        assert_eq!(
            (got.value.as_str(), got.term),
            ("a", term),
            "[{}] {what}",
            b.kind
        );
    };
    expect_a(
        "after the grant",
        other.election(name).leader().await.expect("leader"),
    );
    let r = other.mutex(name).try_lock().await;
    assert!(r.is_err(), "[{}] mutex granted beside a leader", b.kind);
    expect_a(
        "after a mutex try_lock",
        other.election(name).leader().await.expect("leader"),
    );
    let r = other.fair_lock(name).try_lock().await;
    assert!(r.is_err(), "[{}] fair lock granted beside a leader", b.kind);
    expect_a(
        "after a fair try_lock",
        other.election(name).leader().await.expect("leader"),
    );
    let r = other.semaphore(name, 1).try_acquire().await;
    assert!(
        r.is_err(),
        "[{}] 1-permit semaphore granted beside a leader",
        b.kind
    );
    expect_a(
        "after a semaphore try",
        other.election(name).leader().await.expect("leader"),
    );
    let r = other.election(name).try_campaign("x").await;
    assert!(r.is_err(), "[{}] second leader", b.kind);
    expect_a(
        "after a try_campaign",
        other.election(name).leader().await.expect("leader"),
    );
    // A waiting candidate that gives up.
    let r = other.election(name).campaign("y").timeout(ms(150)).await;
    assert!(r.is_err(), "[{}] second leader", b.kind);
    expect_a(
        "after a timed-out campaign",
        other.election(name).leader().await.expect("leader"),
    );
    // Handover to B.
    let e2 = other.election(name);
    let b_task = tokio::spawn(async move { e2.campaign("b").await.expect("campaign b") });
    until_waiters(1, async || c.fair_lock(name).inspect().await).await;
    assert!(a.resign().await.expect("resign"), "[{}] resign", b.kind);
    let bl = b_task.await.expect("task");
    let got = c
        .election(name)
        .leader()
        .await
        .expect("leader")
        .expect("b leads");
    assert_eq!(
        (got.value.as_str(), got.term),
        ("b", bl.term()),
        "[{}]",
        b.kind
    );
    assert!(bl.term() > term, "[{}] terms grow", b.kind);
    drop(bl);
}
both_backends!(leader_report_survives_foreign_attempts);

// ------------------------------------------------------------------------------------------
// Fix 3: the head waiter's retry hint
// ------------------------------------------------------------------------------------------

/// Leaders A, B, C in quick succession (each proclaims a second value right after winning,
/// then resigns with the next candidate queued; the last one, C, stays). An observer started
/// before must settle on exactly C's latest value and term, and every state it yielded must
/// have been a real (value, term) pair of one grant (never A's value with B's term).
async fn observer_settles_on_the_last_grant_after_quick_handovers(b: Backend) {
    let name = "adv7-observer-chain";
    let c = b.client().await;
    let mut observer = c.election(name).observe();
    type States = Vec<Option<(String, u64)>>;
    let seen: Arc<StdMutex<States>> = Arc::default();
    let seen2 = seen.clone();
    let watch = tokio::spawn(async move {
        while let Some(state) = observer.next().await {
            seen2.lock().unwrap().push(state.map(|s| (s.value, s.term)));
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
    let got = c
        .election(name)
        .leader()
        .await
        .expect("leader")
        .expect("c leads");
    assert_eq!((got.value, got.term), last, "[{}] leader()", b.kind);
    watch.abort();
    drop(current);
}
both_backends!(observer_settles_on_the_last_grant_after_quick_handovers);

/// The operator's `force_release` bumps the fence and drops the leader's hold while B waits.
/// leader() must never report A's value after that (neither with A's term nor with the new
/// counter), B wins with a term above the forced fence, A's later proclaim is refused and
/// does not change what leader() reports.
async fn force_release_under_a_leader_never_reports_the_evicted_value(b: Backend) {
    let name = "adv7-force-leader";
    let c = b.client().await;
    let other = b.client().await;
    let mut a = c.election(name).campaign("a").await.expect("a");
    let e2 = other.election(name);
    let b_task = tokio::spawn(async move { e2.campaign("b").await.expect("b") });
    until_waiters(1, async || c.fair_lock(name).inspect().await).await;
    let forced = other.force_release(name).await.expect("force_release");
    assert!(forced > a.term(), "[{}] the forced fence grows", b.kind);
    // Until B has won and proclaimed, nobody or B; never "a".
    let bl = loop {
        let got = c.election(name).leader().await.expect("leader");
        if let Some(info) = &got {
            assert_ne!(
                info.value, "a",
                "[{}] evicted value reported: {info:?}",
                b.kind
            );
        }
        if b_task.is_finished() {
            break b_task.await.expect("task");
        }
        sleep(ms(5)).await;
    };
    assert!(
        bl.term() > forced,
        "[{}] B's term above the forced fence",
        b.kind
    );
    let r = a.proclaim("a2").await;
    assert!(
        r.is_err(),
        "[{}] the evicted leader proclaimed: {r:?}",
        b.kind
    );
    let got = c
        .election(name)
        .leader()
        .await
        .expect("leader")
        .expect("b leads");
    assert_eq!(
        (got.value.as_str(), got.term),
        ("b", bl.term()),
        "[{}]",
        b.kind
    );
    drop((a, bl));
}
both_backends!(force_release_under_a_leader_never_reports_the_evicted_value);
