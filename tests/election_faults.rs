//! Leader elections under faults (`Election`, `Leadership`): churn of candidates that are
//! cancelled, time out, proclaim, resign and drop; short leases renewed late; lapsed and
//! evicted leaders; FIFO among candidates; attempts of other primitives on an election's
//! name; odd input; a leader cut off by the network or answered slowly; `force_release`
//! under a leader. On a real redis-server (with a TCP proxy that stalls traffic) and on the
//! in-memory store.
//!
//! Every test asserts its property: never two leaderships say `is_held()`, `leader()` never
//! goes back in term and reports only (value, term) pairs of one grant, and a refused or
//! cancelled call leaves nothing held or queued.

mod support;
use support::quick::{soon, Quick};

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::{Error, Leadership, LockClient, MAX_NAME_LEN, MAX_VALUE_LEN};
use tokio::time::{sleep, Instant};

use support::backend::{eventually, join, until_waiters, Backend, EVENTUALLY};
use support::observe::{observe_until, settled};
use support::proxy::slow_client;
use support::rng::Rng;
use support::time::ms;
use support::waits::{
    lease_free, queue_idle, within, BEFORE_THE_HEARTBEAT, BEFORE_THE_LEASE, LOAD_MARGIN,
};

// ------------------------------------------------------------------------------------------
// churn: candidates cancelled, timed out, proclaiming, resigning, dropped
// ------------------------------------------------------------------------------------------

#[derive(Default)]
struct Board {
    /// Leaderships currently held by a candidate task, visible to the checker.
    live: StdMutex<Vec<Arc<Leadership>>>,
    /// value -> term of every value proclaimed by a leadership a campaign returned (values
    /// are unique in the test).
    terms: StdMutex<HashMap<String, u64>>,
    /// Values of campaigns that never returned a leadership (cancelled, timed out, refused).
    orphans: StdMutex<BTreeSet<String>>,
}

impl Board {
    fn show(&self, l: Leadership) -> Arc<Leadership> {
        let l = Arc::new(l);
        self.live.lock().unwrap().push(l.clone());
        l
    }
    fn hide(&self, l: Arc<Leadership>) -> Leadership {
        self.live.lock().unwrap().retain(|x| !Arc::ptr_eq(x, &l));
        Arc::try_unwrap(l).unwrap_or_else(|_| panic!("the task owns its leadership"))
    }
}

async fn candidate(c: LockClient, name: &'static str, id: u64, board: Arc<Board>, until: Instant) {
    candidate_with(c, name, id, board, until, ms(400), 20).await
}

async fn candidate_with(
    c: LockClient,
    name: &'static str,
    id: u64,
    board: Arc<Board>,
    until: Instant,
    lease: Duration,
    hold_ms: u64,
) {
    let election = c
        .election(name)
        .lease(lease)
        .retry_interval(ms(50).min(lease));
    let mut rng = Rng::new(id + 1);
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let value = format!("c{id}-{n}");
        let cancel_after = ms(1 + rng.below(60));
        let attempt = if rng.below(4) == 0 {
            tokio::time::timeout(cancel_after, election.try_campaign(value.clone())).await
        } else {
            let campaign = election
                .campaign(value.clone())
                .timeout(ms(1 + rng.below(120)));
            tokio::time::timeout(cancel_after, campaign).await
        };
        let leadership = match attempt {
            Ok(Ok(l)) => l,
            Ok(Err(e)) if e.is_would_block() || e.is_timeout() => {
                board.orphans.lock().unwrap().insert(value);
                continue;
            }
            Ok(Err(e @ Error::LeaseLost { .. })) => {
                let _ = e;
                board.orphans.lock().unwrap().insert(value);
                continue;
            }
            Ok(Err(e)) => panic!("campaign {value}: {e}"),
            Err(_) => {
                board.orphans.lock().unwrap().insert(value);
                continue;
            }
        };
        assert_eq!(leadership.value(), value);
        let term = leadership.term();
        board.terms.lock().unwrap().insert(value.clone(), term);
        let shown = board.show(leadership);
        tokio::time::sleep(ms(rng.below(hold_ms))).await;
        let mut leadership = board.hide(shown);
        if rng.below(2) == 0 {
            let v2 = format!("{value}-p");
            board.terms.lock().unwrap().insert(v2.clone(), term);
            match leadership.proclaim(v2).await {
                Ok(()) | Err(Error::LeaseLost { .. }) => {}
                Err(e) => panic!("proclaim: {e}"),
            }
            let shown = board.show(leadership);
            tokio::time::sleep(ms(rng.below(10))).await;
            leadership = board.hide(shown);
        }
        match rng.below(3) {
            0 => {
                leadership.resign().await.expect("resign");
            }
            1 => drop(leadership),
            _ => {
                // A proclaim right before the resign.
                let v3 = format!("{value}-last");
                board.terms.lock().unwrap().insert(v3.clone(), term);
                let _ = leadership.proclaim(v3).await;
                leadership.resign().await.expect("resign");
            }
        }
    }
}

/// Churn: candidates on three clients campaign (blocking, timed, try), get cancelled at random
/// instants (also right after a grant), proclaim, resign, drop. A checker samples every live
/// leadership every millisecond: never two say `is_held()`; `leader()` read in sequence never
/// goes back in term, and every (term, value) it reports is the term of the leadership that
/// proclaimed that value. The observer's terms never go back and it ends on `None`, as the
/// store does.
async fn election_churn_one_leader_and_honest_reports(b: Backend) {
    let name = "election-fault-churn";
    let board = Arc::new(Board::default());
    let until = Instant::now() + ms(3000);
    let watcher = b.client().await;
    let election = watcher.election(name).retry_interval(ms(200));
    let mut observer = election.observe();
    let stop = Arc::new(AtomicBool::new(false));
    let observed = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut states = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(ms(50), observer.next()).await {
                    Ok(Some(state)) => states.push(state.into_leader()),
                    Ok(None) => panic!("observer closed: {:?}", observer.closed_because()),
                    Err(_) => {}
                }
            }
            (observer, states)
        })
    };
    let checker = {
        let board = board.clone();
        let election = election.clone();
        tokio::spawn(async move {
            let mut last_term = 0;
            let mut seen = Vec::new();
            let mut max_held = 0;
            while Instant::now() < until {
                {
                    let live = board.live.lock().unwrap();
                    let held: Vec<u64> = live
                        .iter()
                        .filter(|l| l.is_held())
                        .map(|l| l.term())
                        .collect();
                    max_held = max_held.max(held.len());
                    assert!(
                        held.len() <= 1,
                        "two leaderships say is_held() at once, terms {held:?}"
                    );
                }
                if let Some(info) = election.leader().await.expect("leader") {
                    assert!(
                        info.term >= last_term,
                        "leader() went back from term {last_term} to {}",
                        info.term
                    );
                    last_term = info.term;
                    seen.push((info.term, info.value));
                }
                tokio::time::sleep(ms(1)).await;
            }
            (seen, max_held)
        })
    };
    let mut tasks = Vec::new();
    for id in 0..3 {
        let c = b.client().await;
        tasks.push(tokio::spawn(candidate(c, name, id, board.clone(), until)));
    }
    for t in tasks {
        join("candidate", t).await;
    }
    let (seen, _) = join("checker", checker).await;
    // Everything resigned, dropped or cancelled: the store ends with nobody leading, with no
    // hold or queue place left. A hold or place left behind lapses by itself within its
    // 400 ms lease or heartbeat window, unless something still renews it: only that never
    // ends, so the bound is the generous one.
    eventually("nothing left held or queued", async || {
        queue_idle(&watcher, name).await
    })
    .await;
    assert_eq!(election.leader().await.expect("leader"), None);
    tokio::time::sleep(ms(600)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut observer, states) = join("observer", observed).await;
    let mut last = 0;
    for s in states.iter().flatten() {
        assert!(
            s.term >= last,
            "observer went back from term {last} to {}",
            s.term
        );
        last = s.term;
    }
    assert!(
        settled(&mut observer, ms(300)).await,
        "the observer keeps yielding after the election went quiet"
    );
    assert_eq!(
        states.last().cloned().flatten(),
        None,
        "the observer ends on the store's leader (nobody)"
    );
    let terms = board.terms.lock().unwrap();
    let orphans = board.orphans.lock().unwrap();
    let known: BTreeSet<u64> = terms.values().copied().collect();
    let observed_pairs = states.iter().flatten().map(|l| (l.term, l.value.clone()));
    for (term, value) in seen.into_iter().chain(observed_pairs) {
        match terms.get(&value) {
            Some(t) => assert_eq!(
                *t, term,
                "{value} reported with term {term}, its leadership's is {t}"
            ),
            None => {
                assert!(orphans.contains(&value), "{value} was never campaigned");
                assert!(
                    !known.contains(&term),
                    "cancelled campaign {value} reported with term {term} of another leadership"
                );
            }
        }
    }
}

/// Short leases (30 ms, renewed every 10 ms on a loaded 2-core machine, so some renewals come
/// late and leaderships are lost) held longer than the lease: a checker samples every live
/// leadership every millisecond and never sees two saying `is_held()`.
async fn election_short_leases_never_two_held(b: Backend) {
    let name = "election-fault-short";
    let board = Arc::new(Board::default());
    let until = Instant::now() + ms(3000);
    let checker = {
        let board = board.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            while Instant::now() < until {
                {
                    let live = board.live.lock().unwrap();
                    let held: Vec<u64> = live
                        .iter()
                        .filter(|l| l.is_held())
                        .map(|l| l.term())
                        .collect();
                    assert!(
                        held.len() <= 1,
                        "two leaderships say is_held() at once: {held:?}"
                    );
                }
                samples += 1;
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            samples
        })
    };
    let mut tasks = Vec::new();
    for id in 0..4 {
        let c = b.client().await;
        tasks.push(tokio::spawn(candidate_with(
            c,
            name,
            10 + id,
            board.clone(),
            until,
            ms(30),
            90,
        )));
    }
    for t in tasks {
        join("candidate", t).await;
    }
    assert!(join("checker", checker).await > 100);
    let c = b.client().await;
    // What is left lapses within its 30 ms lease unless something still renews it.
    eventually("idle", async || queue_idle(&c, name).await).await;
}

/// A campaign cancelled at a random instant around the moment the leader resigns (waiting,
/// granted by the resign's promotion, or proclaiming) leaves no hold, queue place or value
/// behind: the next candidate is not blocked for the 30 s lease.
async fn campaign_cancelled_around_its_grant_leaves_nothing(b: Backend) {
    let name = "election-fault-cancel";
    let ca = b.client().await;
    let cb = b.client().await;
    for i in 0..16u64 {
        let leader = ca.election(name).campaign("a").await.expect("campaign a");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = {
            let cb = cb.clone();
            tokio::spawn(async move {
                let election = cb.election(name);
                tokio::select! {
                    r = election.campaign(format!("b{i}")) => Some(r),
                    _ = rx => None,
                }
            })
        };
        let q = ca.fair_lock(name);
        until_waiters(1, || q.inspect()).await;
        leader.resign().await.expect("resign");
        if !i.is_multiple_of(4) {
            tokio::time::sleep(Duration::from_micros(300 * (i % 4))).await;
        }
        let _ = tx.send(());
        if let Some(r) = join("cancelled campaign", task).await {
            r.expect("campaign b").resign().await.expect("resign b");
        }
        // A queue place or a grant handed to the cancelled campaign would stay for its 5 s
        // heartbeat window, a hold for the 30 s lease.
        within(
            BEFORE_THE_HEARTBEAT,
            "no hold or waiter after a cancelled campaign",
            async || queue_idle(&ca, name).await,
        )
        .await;
        assert_eq!(ca.election(name).leader().await.expect("leader"), None);
    }
}

// ------------------------------------------------------------------------------------------
// lapsed leaders, FIFO, what leader() reports
// ------------------------------------------------------------------------------------------

/// A leader whose lease lapsed (renewal off) cannot proclaim, and neither its resign nor its
/// drop retracts the value of the leader that took over.
async fn lapsed_leader_never_touches_the_next_one(b: Backend) {
    let name = "election-fault-lapsed";
    let lazy = b.client_with(LockClient::builder().auto_renew(false)).await;
    let other = b.client().await;
    for round in 0..2 {
        let old = lazy
            .election(name)
            .lease(ms(150))
            .campaign("old")
            .await
            .expect("campaign old");
        eventually("the old 150 ms lease lapses", async || !old.is_held()).await;
        let mut new = other
            .election(name)
            .campaign(format!("new{round}"))
            .await
            .expect("campaign new");
        assert!(new.term() > old.term());
        let mut old = old;
        let err = old.proclaim("stale").await.expect_err("not the holder");
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        if round == 0 {
            assert!(!old.resign().await.expect("resign"), "no longer held");
        } else {
            drop(old);
            tokio::time::sleep(ms(200)).await;
        }
        let info = other.election(name).leader().await.expect("leader");
        assert_eq!(
            info.map(|l| (l.value, l.term)),
            Some((format!("new{round}"), new.term())),
            "the new leader's value stands"
        );
        new.proclaim("again").await.expect("proclaim");
        new.resign().await.expect("resign");
    }
}

/// FIFO among candidates, with a queued candidate cancelled and a leader dropped (not
/// resigned): the others win in arrival order.
async fn fifo_with_cancelled_candidate_and_dropped_leader(b: Backend) {
    let name = "election-fault-fifo";
    let first = b.client().await;
    let leader = first.election(name).campaign("0").await.expect("campaign");
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 1..=5u64 {
        let c = b.client().await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let l = c
                .election(name)
                .campaign(i.to_string())
                .await
                .expect("campaign");
            order.lock().unwrap().push(i);
            if i.is_multiple_of(2) {
                drop(l);
            } else {
                l.resign().await.expect("resign");
            }
        }));
        let q = first.fair_lock(name);
        until_waiters(i as usize, || q.inspect()).await;
    }
    // Candidate 3 gives up while queued.
    let cancelled = tasks.remove(2);
    cancelled.abort();
    let q = first.fair_lock(name);
    until_waiters(4, || q.inspect()).await;
    drop(leader);
    for t in tasks {
        join("candidate", t).await;
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2, 4, 5], "arrival order");
    // A dropped leadership is released at once, not after its 30 s lease.
    within(BEFORE_THE_LEASE, "idle", async || {
        queue_idle(&first, name).await
    })
    .await;
}

/// A leader's report must survive attempts of every other primitive on the election's name
/// (refused or not, none may move the fence counter under a live leader), and report the
/// next leader's value and term once it proclaimed; nobody in between.
async fn leader_report_survives_foreign_attempts(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let name = "election-fault-leader-foreign";
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
    let what = "after the grant";
    expect_a(what, other.election(name).leader().await.expect("leader"));
    let r = other.mutex(name).try_lock().await;
    assert!(r.is_err(), "[{}] mutex granted beside a leader", b.kind);
    let what = "after a mutex try_lock";
    expect_a(what, other.election(name).leader().await.expect("leader"));
    let r = other.fair_lock(name).try_lock().await;
    assert!(r.is_err(), "[{}] fair lock granted beside a leader", b.kind);
    let what = "after a fair try_lock";
    expect_a(what, other.election(name).leader().await.expect("leader"));
    let r = other.semaphore(name, 1).try_acquire().await;
    assert!(
        r.is_err(),
        "[{}] 1-permit semaphore granted beside a leader",
        b.kind
    );
    let what = "after a semaphore try";
    expect_a(what, other.election(name).leader().await.expect("leader"));
    let r = other.election(name).try_campaign("x").await;
    assert!(r.is_err(), "[{}] second leader", b.kind);
    let what = "after a try_campaign";
    expect_a(what, other.election(name).leader().await.expect("leader"));
    // A waiting candidate that gives up.
    let r = other.election(name).campaign("y").timeout(ms(150)).await;
    assert!(r.is_err(), "[{}] second leader", b.kind);
    let what = "after a timed-out campaign";
    expect_a(what, other.election(name).leader().await.expect("leader"));
    // Handover to B.
    let e2 = other.election(name);
    let b_task = tokio::spawn(async move { e2.campaign("b").await.expect("campaign b") });
    until_waiters(1, async || c.fair_lock(name).inspect().await).await;
    assert!(a.resign().await.expect("resign"), "[{}] resign", b.kind);
    let bl = b_task.await.expect("task");
    let got = c.leader_of(name).await.expect("b leads");
    assert_eq!(
        (got.value.as_str(), got.term),
        ("b", bl.term()),
        "[{}]",
        b.kind
    );
    assert!(bl.term() > term, "[{}] terms grow", b.kind);
    drop(bl);
}

// ------------------------------------------------------------------------------------------
// odd input, other lock families on the name
// ------------------------------------------------------------------------------------------

/// Odd values and names, zero and huge durations: typed errors or faithful round trips, never
/// a panic, and nothing left queued or held by a refused call.
async fn election_bad_input_is_typed(b: Backend) {
    let c = b.client().await;
    // Odd values: empty, separators, NUL, newlines, multi-byte text at the byte limit.
    let wide = "é".repeat(MAX_VALUE_LEN / 2);
    assert_eq!(wide.len(), MAX_VALUE_LEN);
    for (i, value) in ["", "|", "1|2|3", "a\0b", "\n\r\t", &wide]
        .into_iter()
        .enumerate()
    {
        let name = format!("election-fault-val{i}");
        let election = c.election(&name);
        let l = election.campaign(value).await.expect("campaign");
        let info = election.leader().await.expect("leader").expect("a leader");
        assert_eq!(
            (info.value.as_str(), info.term),
            (value, l.term()),
            "{value:?}"
        );
        l.resign().await.expect("resign");
    }
    let too_wide = "é".repeat(MAX_VALUE_LEN / 2 + 1);
    let err = c
        .election("election-fault-wide")
        .campaign(too_wide)
        .await
        .expect_err("too long");
    assert!(err.is_invalid_input(), "{err}");
    // Odd names: allowed ones round-trip, bad ones are InvalidName everywhere.
    for name in ["{", "a}b", "a|b", "x\0y", ":", &"n".repeat(MAX_NAME_LEN)] {
        let election = c.election(name);
        let l = election
            .campaign("v")
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert_eq!(
            election.leader().await.expect("leader").map(|i| i.value),
            Some("v".to_owned())
        );
        l.resign().await.expect("resign");
    }
    for name in ["", "}a", &"n".repeat(MAX_NAME_LEN + 1)] {
        let election = c.election(name);
        assert!(election
            .leader()
            .await
            .expect_err("bad name")
            .is_invalid_input());
        assert!(election
            .campaign("v")
            .await
            .expect_err("bad name")
            .is_invalid_input());
        assert!(election
            .try_campaign("v")
            .await
            .expect_err("bad name")
            .is_invalid_input());
        let mut observer = election.observe();
        assert_eq!(soon("ends", observer.next()).await, None);
    }
    // Zero and huge durations: refused with a typed error before anything is queued.
    let name = "election-fault-durations";
    let cases: Vec<(&str, redis_locks::Election)> = vec![
        ("zero lease", c.election(name).lease(Duration::ZERO)),
        ("huge lease", c.election(name).lease(Duration::MAX)),
        ("zero heartbeat", c.election(name).heartbeat(Duration::ZERO)),
        (
            "zero retry",
            c.election(name).retry_interval(Duration::ZERO),
        ),
        ("huge retry", c.election(name).retry_interval(Duration::MAX)),
    ];
    for (what, election) in cases {
        let err = election.campaign("v").await.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
        let err = election.try_campaign("v").await.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
        assert!(queue_idle(&c, name).await, "{what}: nothing queued");
    }
    // A huge retry interval is no panic for an observer: it is refused as the campaign is
    // (the observer ends at once and says why).
    let mut observer = c.election(name).retry_interval(Duration::MAX).observe();
    assert_eq!(observer.next().await, None);
    let why = observer.closed_because().expect("closed");
    assert!(why.contains("retry interval"), "{why}");
}

/// A name used by a Mutex cannot be campaigned for (typed family conflict, nothing queued),
/// and a multi-lock over a leader's name is refused without holding its other parts.
async fn election_and_lease_lock_families_exclude(b: Backend) {
    let c = b.client().await;
    let held = c.mutex("election-fault-fam-m").lock().await.expect("mutex");
    let err = c
        .election("election-fault-fam-m")
        .campaign("v")
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(queue_idle(&c, "election-fault-fam-m").await);
    held.release().await.expect("release");
    let l = c.lead("election-fault-fam-e", "v").await;
    let err = c
        .multi_lock([
            "election-fault-fam-a",
            "election-fault-fam-e",
            "election-fault-fam-z",
        ])
        .lock()
        .timeout(ms(300))
        .await
        .expect_err("a leader's name is not a lease lock");
    assert!(err.is_family_conflict() || err.is_timeout(), "{err}");
    assert!(
        lease_free(&c, "election-fault-fam-a").await
            && lease_free(&c, "election-fault-fam-z").await
    );
    let info = c.leader_of("election-fault-fam-e").await.expect("leader");
    assert_eq!((info.value.as_str(), info.term), ("v", l.term()));
    l.resign().await.expect("resign");
}

// ------------------------------------------------------------------------------------------
// a leader cut off or answered slowly; force_release under a leader
// ------------------------------------------------------------------------------------------

/// A leader cut off by the network (its connection stalled, renewals unanswered) blocks the
/// standby for at most its lease; the standby wins only after the old leader stopped saying
/// `is_held()`, and the old leader's renewals and drop, delivered late, change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cut_off_leader_blocks_at_most_its_lease() {
    let b = Backend::redis();
    let (proxy, cut_client) = slow_client(&b).await;
    let standby_client = b.client().await;
    let name = "election-fault-cut";
    let lease = ms(900);
    let old = cut_client.campaign_for(name, lease, "old").await;
    let standby = {
        let c = standby_client.clone();
        tokio::spawn(async move { c.election(name).lease(lease).campaign("standby").await })
    };
    let q = standby_client.fair_lock(name);
    until_waiters(1, || q.inspect()).await;
    let old = Arc::new(old);
    let stalled_at = Instant::now();
    proxy.stall();
    // While the standby waits, the old leader may still trust its lease; sample both.
    let overlap = Arc::new(AtomicBool::new(false));
    let sampler = {
        let old = old.clone();
        let overlap = overlap.clone();
        let c = standby_client.clone();
        tokio::spawn(async move {
            let give_up = Instant::now() + lease * 4;
            while Instant::now() < give_up {
                let held_before = old.is_held();
                let led_by_standby = c
                    .leader_of(name)
                    .await
                    .is_some_and(|l| l.value == "standby");
                if led_by_standby && old.is_held() && held_before {
                    overlap.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(ms(2)).await;
            }
        })
    };
    let new = join("standby wins", standby).await.expect("campaign");
    let waited = stalled_at.elapsed();
    assert!(
        !old.is_held(),
        "the cut-off leader still says is_held() when the standby wins"
    );
    // Its lease, and a margin for a loaded machine: the standby attempts at the lease's end
    // it was told and at least every 300 ms (a third of its heartbeat window), so it wins soon
    // after the lease, unless something kept the cut-off leader's hold alive past it.
    assert!(
        waited <= lease + LOAD_MARGIN,
        "the standby waited {waited:?} for a leader cut off with a {lease:?} lease"
    );
    assert!(new.term() > old.term());
    join("sampler", sampler).await;
    assert!(
        !overlap.load(Ordering::Relaxed),
        "old leader and standby led at once"
    );
    // The held-back traffic (renewals, a proclaim) now arrives late: nothing changes.
    proxy.resume();
    tokio::time::sleep(ms(500)).await;
    let old = Arc::try_unwrap(old).unwrap_or_else(|_| panic!("sampler done"));
    assert!(!old.is_held());
    drop(old);
    tokio::time::sleep(ms(500)).await;
    let info = standby_client.leader_of(name).await.expect("leader");
    assert_eq!((info.value.as_str(), info.term), ("standby", new.term()));
    assert!(new.is_held());
    assert!(new.resign().await.expect("resign"));
}

/// A slow proclaim reply (replies stalled): the proclaim fails or succeeds, the leader value in
/// the store is always one of the live leader's, with its term; after the resign, nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_slow_proclaim_reply_then_resign() {
    let b = Backend::redis();
    let (proxy, slow) = slow_client(&b).await;
    let watcher = b.client().await;
    let name = "election-fault-slow";
    let mut observer = watcher.election(name).retry_interval(ms(300)).observe();
    let mut l = slow.election(name).campaign("v1").await.expect("campaign");
    observe_until(&mut observer, Some("v1"), EVENTUALLY).await;
    proxy.stall_replies();
    let outcome = l.proclaim("v2").await;
    proxy.resume();
    assert!(
        outcome.is_err(),
        "no reply came, yet the proclaim says {outcome:?}"
    );
    assert_eq!(l.value(), "v1", "a failed proclaim keeps the old value");
    // The request ran: the store may say v2, but only as this leader's value, with its term.
    let info = watcher.leader_of(name).await.expect("leader");
    assert!(info.value == "v1" || info.value == "v2", "{info:?}");
    assert_eq!(info.term, l.term());
    // The leadership itself survived the 1.5 s stall (30 s lease): resign it.
    eventually("the connection answers again", async || {
        slow.election(name).leader().await.is_ok()
    })
    .await;
    assert!(l.resign().await.expect("resign"));
    observe_until(&mut observer, None, EVENTUALLY).await;
    assert!(settled(&mut observer, ms(700)).await);
    assert!(queue_idle(&watcher, name).await);
}

/// force_release during an election with a waiting candidate: the candidate wins with a
/// larger term, the evicted leader's proclaim and resign change nothing, the observer ends on
/// the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_force_release_hands_over_cleanly() {
    let b = Backend::redis();
    let a_client = b.client().await;
    let b_client = b.client().await;
    let name = "election-fault-force";
    let mut observer = b_client.election(name).retry_interval(ms(300)).observe();
    let mut a = a_client.lead(name, "a").await;
    let standby = {
        let c = b_client.clone();
        tokio::spawn(async move { c.election(name).campaign("b").await })
    };
    let q = a_client.fair_lock(name);
    until_waiters(1, || q.inspect()).await;
    observe_until(&mut observer, Some("a"), EVENTUALLY).await;
    let fence = b_client.force_release(name).await.expect("force");
    let next = join("standby", standby).await.expect("campaign b");
    assert!(next.term() > fence && fence > a.term());
    let err = a.proclaim("a2").await.expect_err("evicted");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!a.resign().await.expect("resign"));
    let seen = observe_until(&mut observer, Some("b"), EVENTUALLY).await;
    assert_eq!(seen.map(|s| s.term), Some(next.term()));
    assert!(settled(&mut observer, ms(700)).await);
    next.resign().await.expect("resign");
}

/// The operator's `force_release` bumps the fence and drops the leader's hold while B waits.
/// leader() must never report A's value after that (neither with A's term nor with the new
/// counter), B wins with a term above the forced fence, A's later proclaim is refused and
/// does not change what leader() reports.
async fn force_release_under_a_leader_never_reports_the_evicted_value(b: Backend) {
    let name = "election-fault-force-leader";
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
    let got = c.leader_of(name).await.expect("b leads");
    assert_eq!(
        (got.value.as_str(), got.term),
        ("b", bl.term()),
        "[{}]",
        b.kind
    );
    drop((a, bl));
}

both_backends!(
    election_churn_one_leader_and_honest_reports,
    election_short_leases_never_two_held,
    campaign_cancelled_around_its_grant_leaves_nothing,
    lapsed_leader_never_touches_the_next_one,
    fifo_with_cancelled_candidate_and_dropped_leader,
    leader_report_survives_foreign_attempts,
    election_bad_input_is_typed,
    election_and_lease_lock_families_exclude,
    force_release_under_a_leader_never_reports_the_evicted_value,
);
