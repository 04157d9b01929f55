//! Adversarial review 6: leader election (`Election`, `Leadership`, `Observer`) and multi-locks
//! (`multi_lock`, `multi_rwlock`), attacked through the public API on a real redis-server (with
//! a TCP proxy that stalls traffic, CLIENT KILL, SCRIPT FLUSH) and on the in-memory store.
//!
//! Every test asserts its property. One found a break, fixed since:
//! `redis_observer_with_zero_retry_interval_is_refused_or_paced`.

mod support;
use support::Granted;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::{
    Error, LeaderInfo, Leadership, LockClient, Observer, Preference, RedisConfig, MAX_MULTI_NAMES,
    MAX_NAME_LEN, MAX_VALUE_LEN,
};
use tokio::time::Instant;

use support::backend::{eventually, join, until_waiters, Backend, EVENTUALLY};
use support::proxy::Proxy;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A small deterministic generator (xorshift), one per task.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Waits for `check` with a bound tighter than EVENTUALLY.
async fn within(bound: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let give_up = Instant::now() + bound;
    while !check().await {
        assert!(Instant::now() < give_up, "not within {bound:?}: {what}");
        tokio::time::sleep(ms(5)).await;
    }
}

/// The next state the observer yields, within `bound`.
async fn next_within(observer: &mut Observer, bound: Duration) -> Option<LeaderInfo> {
    tokio::time::timeout(bound, observer.next())
        .await
        .unwrap_or_else(|_| panic!("no observer state within {bound:?}"))
        .expect("the observer runs")
}

/// Reads the observer until it yields a state whose value is `want`.
async fn observe_until(
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
            .expect("the observer runs");
        if state.as_ref().map(|l| l.value.as_str()) == want {
            return state;
        }
    }
}

/// The observer yields nothing more for `quiet` (it settled on its last state).
async fn settled(observer: &mut Observer, quiet: Duration) -> bool {
    tokio::time::timeout(quiet, observer.next()).await.is_err()
}

/// Every live hold and waiter of a ticket queue name is gone.
async fn queue_idle(c: &LockClient, name: &str) -> bool {
    let info = c.fair_lock(name).inspect().await.expect("inspect");
    info.holders.is_empty() && info.waiters.is_empty()
}

/// No live hold of the lease lock of `name`.
async fn lease_free(c: &LockClient, name: &str) -> bool {
    c.mutex(name)
        .inspect()
        .await
        .expect("inspect")
        .holders
        .is_empty()
}

fn quick() -> RedisConfig {
    RedisConfig {
        response_timeout: ms(300),
        connect_timeout: ms(500),
        ..RedisConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Election
// ---------------------------------------------------------------------------------------

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
    let name = "adv6-churn";
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
                    Ok(Some(state)) => states.push(state),
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
    // hold or queue place left (the lease is 400 ms; cancelled grants are released at once).
    within(ms(3000), "nothing left held or queued", async || {
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

/// A campaign cancelled at a random instant around the moment the leader resigns (waiting,
/// granted by the resign's promotion, or proclaiming) leaves no hold, queue place or value
/// behind: the next candidate is not blocked for the 30 s lease.
async fn campaign_cancelled_around_its_grant_leaves_nothing(b: Backend) {
    let name = "adv6-cancel";
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
        within(
            ms(2000),
            "no hold or waiter after a cancelled campaign",
            async || queue_idle(&ca, name).await,
        )
        .await;
        assert_eq!(ca.election(name).leader().await.expect("leader"), None);
    }
}

/// A leader whose lease lapsed (renewal off) cannot proclaim, and neither its resign nor its
/// drop retracts the value of the leader that took over.
async fn lapsed_leader_never_touches_the_next_one(b: Backend) {
    let name = "adv6-lapsed";
    let lazy = b.client_with(LockClient::builder().auto_renew(false)).await;
    let other = b.client().await;
    for round in 0..2 {
        let old = lazy
            .election(name)
            .lease(ms(150))
            .campaign("old")
            .await
            .expect("campaign old");
        within(ms(2000), "the old lease lapses", async || !old.is_held()).await;
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

/// An observer with a retry interval far longer than the test sees a leader's lapse (no
/// message is published when a lease runs out) at the lease's end.
async fn observer_sees_a_silent_lapse_at_the_lease_end(b: Backend) {
    let name = "adv6-silent";
    let lazy = b.client_with(LockClient::builder().auto_renew(false)).await;
    let watcher = b.client().await;
    let mut observer = watcher
        .election(name)
        .retry_interval(Duration::from_secs(60))
        .observe();
    assert_eq!(next_within(&mut observer, ms(2000)).await, None);
    let lease = ms(300);
    let l = lazy
        .election(name)
        .lease(lease)
        .campaign("a")
        .await
        .expect("campaign");
    let started = Instant::now();
    observe_until(&mut observer, Some("a"), ms(3000)).await;
    observe_until(&mut observer, None, lease + ms(1500)).await;
    assert!(started.elapsed() < lease + ms(1500));
    drop(l);
}

/// FIFO among candidates, with a queued candidate cancelled and a leader dropped (not
/// resigned): the others win in arrival order.
async fn fifo_with_cancelled_candidate_and_dropped_leader(b: Backend) {
    let name = "adv6-fifo";
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
    within(ms(3000), "idle", async || queue_idle(&first, name).await).await;
}

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
        let name = format!("adv6-val{i}");
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
        .election("adv6-wide")
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
        assert_eq!(
            tokio::time::timeout(ms(2000), observer.next())
                .await
                .expect("ends"),
            None
        );
    }
    // Zero and huge durations: refused with a typed error before anything is queued.
    let name = "adv6-durations";
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
    let held = c.mutex("adv6-fam-m").lock().await.expect("mutex");
    let err = c
        .election("adv6-fam-m")
        .campaign("v")
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(queue_idle(&c, "adv6-fam-m").await);
    held.release().await.expect("release");
    let l = c
        .election("adv6-fam-e")
        .campaign("v")
        .await
        .expect("campaign");
    let err = c
        .multi_lock(["adv6-fam-a", "adv6-fam-e", "adv6-fam-z"])
        .lock()
        .timeout(ms(300))
        .await
        .expect_err("a leader's name is not a lease lock");
    assert!(err.is_family_conflict() || err.is_timeout(), "{err}");
    assert!(lease_free(&c, "adv6-fam-a").await && lease_free(&c, "adv6-fam-z").await);
    let info = c
        .election("adv6-fam-e")
        .leader()
        .await
        .expect("leader")
        .expect("leader");
    assert_eq!((info.value.as_str(), info.term), ("v", l.term()));
    l.resign().await.expect("resign");
}

both_backends!(
    election_churn_one_leader_and_honest_reports,
    campaign_cancelled_around_its_grant_leaves_nothing,
    lapsed_leader_never_touches_the_next_one,
    observer_sees_a_silent_lapse_at_the_lease_end,
    fifo_with_cancelled_candidate_and_dropped_leader,
    election_bad_input_is_typed,
    election_and_lease_lock_families_exclude,
);

/// The observer ends on the store's leader through CLIENT KILL of every connection, SCRIPT
/// FLUSH, a proclaim right before a resign, and a leader dropped without resigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_observer_converges_through_kills_and_flushes() {
    let b = Backend::redis();
    let leader_client = b.client().await;
    let watcher = b.client().await;
    let name = "adv6-kill";
    let mut observer = watcher.election(name).retry_interval(ms(300)).observe();
    assert_eq!(next_within(&mut observer, ms(2000)).await, None);
    let mut l = leader_client
        .election(name)
        .campaign("v0")
        .await
        .expect("campaign");
    observe_until(&mut observer, Some("v0"), ms(3000)).await;
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
        let seen = observe_until(&mut observer, Some(&value), ms(3000)).await;
        assert_eq!(seen.map(|s| s.term), Some(l.term()));
    }
    // A proclaim right before the resign: the observer must end on nobody, not the last value.
    l.proclaim("last").await.expect("proclaim");
    assert!(l.resign().await.expect("resign"));
    observe_until(&mut observer, None, ms(3000)).await;
    assert!(settled(&mut observer, ms(700)).await, "settled on nobody");
    // A dropped leadership: observers learn without a resign call.
    let l = leader_client
        .election(name)
        .campaign("dropped")
        .await
        .expect("campaign");
    observe_until(&mut observer, Some("dropped"), ms(3000)).await;
    drop(l);
    observe_until(&mut observer, None, ms(3000)).await;
    assert_eq!(watcher.election(name).leader().await.expect("leader"), None);
}

/// A leader cut off by the network (its connection stalled, renewals unanswered) blocks the
/// standby for at most its lease; the standby wins only after the old leader stopped saying
/// `is_held()`, and the old leader's renewals and drop, delivered late, change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cut_off_leader_blocks_at_most_its_lease() {
    let b = Backend::redis();
    let server_port = b.server.as_ref().expect("private server").port();
    let proxy = Proxy::start(server_port).await;
    let cut_client = LockClient::builder()
        .redis_config(quick())
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let standby_client = b.client().await;
    let name = "adv6-cut";
    let lease = ms(900);
    let old = cut_client
        .election(name)
        .lease(lease)
        .campaign("old")
        .await
        .expect("campaign");
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
                    .election(name)
                    .leader()
                    .await
                    .expect("leader")
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
    assert!(
        waited <= lease + ms(600),
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
    let info = standby_client
        .election(name)
        .leader()
        .await
        .expect("leader")
        .expect("leader");
    assert_eq!((info.value.as_str(), info.term), ("standby", new.term()));
    assert!(new.is_held());
    assert!(new.resign().await.expect("resign"));
}

/// A slow proclaim reply (replies stalled): the proclaim fails or succeeds, the leader value in
/// the store is always one of the live leader's, with its term; after the resign, nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_slow_proclaim_reply_then_resign() {
    let b = Backend::redis();
    let proxy = Proxy::start(b.server.as_ref().expect("server").port()).await;
    let slow = LockClient::builder()
        .redis_config(quick())
        .connect(&proxy.url())
        .await
        .expect("connect");
    let watcher = b.client().await;
    let name = "adv6-slow";
    let mut observer = watcher.election(name).retry_interval(ms(300)).observe();
    let mut l = slow.election(name).campaign("v1").await.expect("campaign");
    observe_until(&mut observer, Some("v1"), ms(3000)).await;
    proxy.stall_replies();
    let outcome = l.proclaim("v2").await;
    proxy.resume();
    assert!(
        outcome.is_err(),
        "no reply came, yet the proclaim says {outcome:?}"
    );
    assert_eq!(l.value(), "v1", "a failed proclaim keeps the old value");
    // The request ran: the store may say v2, but only as this leader's value, with its term.
    let info = watcher
        .election(name)
        .leader()
        .await
        .expect("leader")
        .expect("leader");
    assert!(info.value == "v1" || info.value == "v2", "{info:?}");
    assert_eq!(info.term, l.term());
    // The leadership itself survived the 1.5 s stall (30 s lease): resign it.
    within(ms(3000), "the connection answers again", async || {
        slow.election(name).leader().await.is_ok()
    })
    .await;
    assert!(l.resign().await.expect("resign"));
    observe_until(&mut observer, None, ms(3000)).await;
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
    let name = "adv6-force";
    let mut observer = b_client.election(name).retry_interval(ms(300)).observe();
    let mut a = a_client
        .election(name)
        .campaign("a")
        .await
        .expect("campaign");
    let standby = {
        let c = b_client.clone();
        tokio::spawn(async move { c.election(name).campaign("b").await })
    };
    let q = a_client.fair_lock(name);
    until_waiters(1, || q.inspect()).await;
    observe_until(&mut observer, Some("a"), ms(3000)).await;
    let fence = b_client.force_release(name).await.expect("force");
    let next = join("standby", standby).await.expect("campaign b");
    assert!(next.term() > fence && fence > a.term());
    let err = a.proclaim("a2").await.expect_err("evicted");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!a.resign().await.expect("resign"));
    let seen = observe_until(&mut observer, Some("b"), ms(3000)).await;
    assert_eq!(seen.map(|s| s.term), Some(next.term()));
    assert!(settled(&mut observer, ms(700)).await);
    next.resign().await.expect("resign");
}

/// An observer handle with a zero retry interval (a zero duration the campaign refuses as
/// invalid input): it must either refuse too (closed, saying why) or at least not hammer the
/// server in a loop with no pause. (Found a break: observe() did not validate the options and
/// re-read back to back; fixed: it validates, and an observer pauses at least 10 ms.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_observer_with_zero_retry_interval_is_refused_or_paced() {
    let b = Backend::redis();
    let c = b.client().await;
    let election = c.election("adv6-zero").retry_interval(Duration::ZERO);
    assert!(election
        .campaign("v")
        .await
        .expect_err("zero")
        .is_invalid_input());
    b.cli(&["CONFIG", "RESETSTAT"]);
    let mut observer = election.observe();
    let first = tokio::time::timeout(ms(1000), observer.next())
        .await
        .expect("an answer");
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

// ---------------------------------------------------------------------------------------
// Multi-locks
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Occupancy {
    /// name -> (writers, readers) currently inside, as the guards say.
    inside: HashMap<String, (u32, u32)>,
    /// name -> the largest fence seen so far.
    fences: HashMap<String, u64>,
}

enum Held {
    Multi(redis_locks::MultiGuard),
    Mutex(redis_locks::MutexGuard),
    Read(redis_locks::ReadGuard),
}

const NAMES: [&str; 5] = ["mx:a", "mx:b", "mx:c", "mx:d", "mx:e"];

async fn multi_worker(
    c: LockClient,
    id: u64,
    occ: Arc<StdMutex<Occupancy>>,
    until: Instant,
) -> u64 {
    let mut rng = Rng::new(1000 + id);
    let mut wins = 0;
    while Instant::now() < until {
        // A random subset in a random order.
        let mut names: Vec<&str> = NAMES.to_vec();
        for i in (1..names.len()).rev() {
            names.swap(i, rng.below(i as u64 + 1) as usize);
        }
        names.truncate(1 + rng.below(4) as usize);
        let split = rng.below(names.len() as u64 + 1) as usize;
        let (reads, writes) = names.split_at(split);
        let op = rng.below(6);
        let cancel_after = ms(1 + rng.below(80));
        let attempt = async {
            match op {
                0 => c
                    .multi_lock(names.iter().copied())
                    .try_lock()
                    .await
                    .map(Held::Multi),
                1 | 2 => c
                    .multi_lock(names.iter().copied())
                    .lock()
                    .timeout(ms(rng_free(id, wins, 100)))
                    .await
                    .map(Held::Multi),
                3 => {
                    let pref = if id.is_multiple_of(2) {
                        Preference::Writer
                    } else {
                        Preference::Reader
                    };
                    c.multi_rwlock(reads.iter().copied(), writes.iter().copied())
                        .preference(pref)
                        .lock()
                        .timeout(ms(rng_free(id, wins, 100)))
                        .await
                        .map(Held::Multi)
                }
                4 => c
                    .mutex(names[0])
                    .lock()
                    .timeout(ms(50))
                    .await
                    .map(Held::Mutex),
                _ => c
                    .rwlock(names[0])
                    .read()
                    .timeout(ms(50))
                    .await
                    .map(Held::Read),
            }
        };
        let held = match tokio::time::timeout(cancel_after, attempt).await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) if e.is_would_block() || e.is_timeout() => continue,
            Ok(Err(e)) => panic!("worker {id} op {op}: {e}"),
            Err(_) => continue, // cancelled mid-wait
        };
        // What the guard says it holds, with its fences.
        let parts: Vec<(String, bool, u64)> = match &held {
            Held::Multi(g) => {
                assert!(g.is_held());
                g.fencing_tokens()
                    .map(|(n, f)| (n.to_owned(), op != 3 || writes.contains(&n), f))
                    .collect()
            }
            Held::Mutex(g) => vec![(names[0].to_owned(), true, g.fencing_token())],
            Held::Read(g) => vec![(names[0].to_owned(), false, g.fencing_token())],
        };
        {
            let mut o = occ.lock().unwrap();
            for (name, write, fence) in &parts {
                let (w, r) = o.inside.get(name).copied().unwrap_or((0, 0));
                if *write {
                    assert!(
                        w == 0 && r == 0,
                        "{name}: a writer beside {w} writers, {r} readers"
                    );
                } else {
                    assert!(w == 0, "{name}: a reader beside a writer");
                }
                let best = o.fences.get(name).copied().unwrap_or(0);
                if *write {
                    assert!(
                        *fence > best,
                        "{name}: write fence {fence} not above {best}"
                    );
                } else {
                    assert!(*fence >= best, "{name}: read fence {fence} below {best}");
                }
                o.fences.insert(name.clone(), best.max(*fence));
                let e = o.inside.entry(name.clone()).or_default();
                if *write {
                    e.0 += 1
                } else {
                    e.1 += 1
                }
            }
        }
        wins += 1;
        tokio::time::sleep(ms(rng.below(4))).await;
        {
            let mut o = occ.lock().unwrap();
            for (name, write, _) in &parts {
                let e = o.inside.get_mut(name).expect("entered");
                if *write {
                    e.0 -= 1
                } else {
                    e.1 -= 1
                }
            }
        }
        match (held, rng.below(2)) {
            (Held::Multi(g), 0) => assert!(g.release().await.expect("release"), "held to the end"),
            (Held::Mutex(g), 0) => assert!(g.release().await.expect("release")),
            (Held::Read(g), 0) => assert!(g.release().await.expect("release")),
            (h, _) => drop(h),
        }
    }
    wins
}

fn rng_free(id: u64, n: u64, max: u64) -> u64 {
    1 + (id * 31 + n * 17) % max
}

/// Churn over five names: multi-locks over random subsets in random orders (exclusive and
/// read/write, both preferences), single mutexes and readers, tries, timed waits, random
/// cancellations, releases and drops. No writer ever beside another holder of a name (as the
/// guards say), write fences strictly increase per name, reads never report an older fence,
/// no deadlock (the run ends), and nothing is left held at the end.
async fn multi_churn_exclusion_fences_no_deadlock(b: Backend) {
    let occ = Arc::new(StdMutex::new(Occupancy::default()));
    let until = Instant::now() + ms(3000);
    let mut tasks = Vec::new();
    for id in 0..4 {
        let c = b.client().await;
        tasks.push(tokio::spawn(multi_worker(c, id, occ.clone(), until)));
    }
    let mut wins = 0;
    for t in tasks {
        wins += join("worker", t).await;
    }
    assert!(
        wins > 20,
        "only {wins} grants in 3 s: starved or deadlocked"
    );
    let c = b.client().await;
    for name in NAMES {
        within(ms(3000), "every name free at the end", async || {
            lease_free(&c, name).await
        })
        .await;
    }
}

/// Opposite orders over overlapping names, exclusive and mixed read/write, many rounds: no
/// deadlock, every round ends.
async fn multi_opposite_orders_never_deadlock(b: Backend) {
    let mut tasks = Vec::new();
    for id in 0..4u64 {
        let c = b.client().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                let g = match id {
                    0 => c.multi_lock(["dl:a", "dl:b", "dl:c"]).lock().await,
                    1 => c.multi_lock(["dl:c", "dl:b", "dl:a"]).lock().await,
                    2 => c.multi_rwlock(["dl:a"], ["dl:c"]).lock().await,
                    _ => c.multi_rwlock(["dl:c"], ["dl:a", "dl:b"]).lock().await,
                }
                .expect("multi");
                tokio::task::yield_now().await;
                g.release().await.expect("release");
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.expect("task");
        }
    };
    tokio::time::timeout(ms(15000), all)
        .await
        .expect("no deadlock within 15 s");
}

/// A refused try, a timed-out wait and a cancelled wait hold nothing of the free parts, at
/// once (not "eventually"): the step is atomic.
async fn multi_refusal_timeout_cancel_hold_nothing(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let held = other.mutex("rt:b").lock().await.expect("hold b");
    let names = ["rt:c", "rt:a", "rt:b"];
    let err = c.multi_lock(names).try_lock().await.expect_err("busy");
    assert!(err.is_would_block(), "{err}");
    assert!(lease_free(&other, "rt:a").await && lease_free(&other, "rt:c").await);
    let err = c
        .multi_lock(names)
        .lock()
        .timeout(ms(40))
        .await
        .expect_err("busy");
    assert!(err.is_timeout(), "{err}");
    for n in ["rt:a", "rt:c"] {
        let g = other
            .mutex(n)
            .try_lock()
            .await
            .granted(n)
            .expect("free right after the timeout");
        g.release().await.expect("release");
    }
    let wait = {
        let c = c.clone();
        tokio::spawn(async move { c.multi_rwlock(["rt:a"], ["rt:b", "rt:c"]).lock().await })
    };
    tokio::time::sleep(ms(50)).await;
    wait.abort();
    let _ = wait.await;
    for n in ["rt:a", "rt:c"] {
        let g = other
            .mutex(n)
            .try_lock()
            .await
            .granted(n)
            .expect("free right after the cancel");
        g.release().await.expect("release");
    }
    held.release().await.expect("release b");
    let g = c.multi_lock(names).try_lock().await.expect("all free now");
    g.release().await.expect("release");
}

/// Fencing tokens per name: each part reports its own name's counter, whatever order the
/// names came in, a read part the last writer's; the next exclusive grant is above.
async fn multi_fences_are_per_name(b: Backend) {
    let c = b.client().await;
    for _ in 0..3 {
        c.mutex("fz:z")
            .lock()
            .await
            .expect("bump")
            .release()
            .await
            .expect("release");
    }
    let g = c.multi_lock(["fz:z", "fz:a"]).lock().await.expect("multi");
    assert_eq!(g.names().collect::<Vec<_>>(), ["fz:a", "fz:z"]);
    assert_eq!(g.fencing_token("fz:z"), Some(4));
    assert_eq!(g.fencing_token("fz:a"), Some(1));
    for (name, fence) in g.fencing_tokens() {
        assert_eq!(
            c.mutex(name).inspect().await.expect("inspect").fence,
            fence,
            "{name}"
        );
    }
    g.release().await.expect("release");
    let g = c.multi_rwlock(["fz:z"], ["fz:a"]).lock().await.expect("rw");
    assert_eq!(
        g.fencing_token("fz:z"),
        Some(4),
        "a read part reports the last writer's"
    );
    assert_eq!(g.fencing_token("fz:a"), Some(2));
    drop(g);
    within(ms(2000), "released", async || lease_free(&c, "fz:z").await).await;
    let m = c.mutex("fz:z").lock().await.expect("mutex");
    assert_eq!(m.fencing_token(), 5);
}

/// A multi-guard whose leases lapsed (renewal off) says so before anyone else is granted; its
/// late release or extend does not touch the new holder.
async fn multi_lapsed_guard_never_overlaps(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let mut old = c
        .multi_lock(["lp:a", "lp:b"])
        .lease(ms(150))
        .auto_renew(false)
        .lock()
        .await
        .expect("multi");
    let new = loop {
        if let Some(g) = other
            .multi_lock(["lp:b", "lp:a"])
            .try_lock()
            .await
            .granted("try")
        {
            break g;
        }
        tokio::time::sleep(ms(2)).await;
    };
    assert!(
        !old.is_held(),
        "the old guard still says is_held() once another holds"
    );
    assert!(!old.extend(ms(5000)).await.expect("extend"), "gone");
    assert!(!old.release().await.expect("release"), "gone");
    assert!(new.is_held());
    for n in ["lp:a", "lp:b"] {
        assert!(
            c.mutex(n).try_lock().await.granted(n).is_none(),
            "{n} still the new holder's"
        );
    }
    new.release().await.expect("release");
}

/// Bad input: typed errors before any call, never a panic, nothing held.
async fn multi_bad_input_is_typed(b: Backend) {
    let c = b.client().await;
    let empty: [&str; 0] = [];
    let many: Vec<String> = (0..=MAX_MULTI_NAMES).map(|i| format!("bi:{i}")).collect();
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let cases: Vec<(&str, redis_locks::MultiLock)> = vec![
        ("no names", c.multi_lock(empty)),
        ("65 names", c.multi_lock(many.iter())),
        ("empty name", c.multi_lock(["bi:a", ""])),
        ("brace name", c.multi_lock(["bi:a", "}x"])),
        ("long name", c.multi_lock(["bi:a", long.as_str()])),
        ("read and write", c.multi_rwlock(["bi:a"], ["bi:a"])),
        ("zero lease", c.multi_lock(["bi:a"]).lease(Duration::ZERO)),
        ("huge lease", c.multi_lock(["bi:a"]).lease(Duration::MAX)),
        (
            "zero retry",
            c.multi_lock(["bi:a"]).retry_interval(Duration::ZERO),
        ),
        (
            "zero renew",
            c.multi_lock(["bi:a"]).renew_every(Duration::ZERO),
        ),
        (
            "huge budget",
            c.multi_lock(["bi:a"]).outage_budget(Duration::MAX),
        ),
    ];
    for (what, lock) in cases {
        let err = lock.try_lock().await.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
        let err = lock.lock().timeout(ms(50)).await.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
    }
    let err = c
        .multi_rwlock(["bi:a"], ["bi:b"])
        .preference(Preference::Fair)
        .try_lock()
        .await
        .expect_err("fair");
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(lease_free(&c, "bi:a").await && lease_free(&c, "bi:b").await);
    // Duplicates collapse; 64 names (with duplicates beyond) is fine.
    let at_limit: Vec<String> = (0..MAX_MULTI_NAMES).map(|i| format!("bi:{i}")).collect();
    let g = c
        .multi_lock(at_limit.iter().chain(at_limit.iter()))
        .try_lock()
        .await
        .expect("64 names");
    assert_eq!(g.names().count(), MAX_MULTI_NAMES);
    g.release().await.expect("release");
    let g = c
        .multi_lock(["bi:a", "bi:a"])
        .try_lock()
        .await
        .expect("dup");
    assert_eq!(g.names().collect::<Vec<_>>(), ["bi:a"]);
    g.release().await.expect("release");
}

/// A part held through the ticket queue (a FairLock, a Semaphore): a typed family conflict,
/// and the free parts are not left held.
async fn multi_part_held_by_ticket_queue(b: Backend) {
    let c = b.client().await;
    let fl = c.fair_lock("tq:b").lock().await.expect("fair");
    let err = c
        .multi_lock(["tq:a", "tq:b", "tq:c"])
        .try_lock()
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(lease_free(&c, "tq:a").await && lease_free(&c, "tq:c").await);
    let err = c
        .multi_rwlock(["tq:b"], ["tq:a"])
        .lock()
        .timeout(ms(200))
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict() || err.is_timeout(), "{err}");
    assert!(lease_free(&c, "tq:a").await);
    fl.release().await.expect("release");
    let p = c.semaphore("tq:s", 3).acquire().await.expect("permit");
    let err = c
        .multi_lock(["tq:a", "tq:s"])
        .try_lock()
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(lease_free(&c, "tq:a").await);
    p.release().await.expect("release");
}

both_backends!(
    multi_churn_exclusion_fences_no_deadlock,
    multi_opposite_orders_never_deadlock,
    multi_refusal_timeout_cancel_hold_nothing,
    multi_fences_are_per_name,
    multi_lapsed_guard_never_overlaps,
    multi_bad_input_is_typed,
    multi_part_held_by_ticket_queue,
);

/// Lost replies (replies stalled while the step runs): a timed-out multi-lock leaves nothing
/// held for the lease once the network is back, and an untimed one ends holding every part
/// with the store's fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_multi_lost_replies_leave_all_or_nothing() {
    let b = Backend::redis();
    let proxy = Proxy::start(b.server.as_ref().expect("server").port()).await;
    let c = LockClient::builder()
        .redis_config(quick())
        .connect(&proxy.url())
        .await
        .expect("connect");
    let direct = b.client().await;
    let names = ["lr:a", "lr:b", "lr:c"];
    proxy.stall_replies();
    let err = c
        .multi_lock(names)
        .lock()
        .timeout(ms(200))
        .await
        .expect_err("no reply");
    assert!(err.is_timeout() || err.is_connection(), "{err}");
    proxy.resume();
    for n in names {
        within(
            ms(3000),
            "a lost grant is given back (lease 30 s)",
            async || lease_free(&direct, n).await,
        )
        .await;
    }
    // Untimed: the wait rides through the stall and ends holding everything.
    proxy.stall_replies();
    let task = {
        let c = c.clone();
        tokio::spawn(async move { c.multi_lock(names).lock().await })
    };
    tokio::time::sleep(ms(700)).await;
    proxy.resume();
    let g = join("multi through a stall", task).await.expect("granted");
    assert!(g.is_held());
    for n in names {
        let info = direct.mutex(n).inspect().await.expect("inspect");
        assert_eq!(info.holders.len(), 1, "{n}");
        assert_eq!(info.fence, g.fencing_token(n).expect("part"), "{n}");
        assert!(direct.mutex(n).try_lock().await.granted(n).is_none(), "{n}");
    }
    assert!(g.release().await.expect("release"));
    for n in names {
        assert!(lease_free(&direct, n).await, "{n}");
    }
}

/// `release_all()` while leading: the leadership is gone (proclaim refused, resign false), the
/// store says nobody leads at once, and an observer converges within its retry interval even
/// though that release publishes nothing and retracts nothing.
async fn release_all_under_a_leadership(b: Backend) {
    let c = b.client().await;
    let watcher = b.client().await;
    let name = "adv6-relall";
    let interval = ms(1500);
    let mut observer = watcher.election(name).retry_interval(interval).observe();
    let mut l = c.election(name).campaign("a").await.expect("campaign");
    observe_until(&mut observer, Some("a"), ms(3000)).await;
    assert!(c.release_all().await.expect("release_all") >= 1);
    assert!(!l.is_held());
    assert_eq!(watcher.election(name).leader().await.expect("leader"), None);
    let released = Instant::now();
    observe_until(&mut observer, None, interval + ms(1000)).await;
    let stale = released.elapsed();
    let err = l.proclaim("b").await.expect_err("released");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!l.resign().await.expect("resign"));
    assert!(stale <= interval + ms(1000), "observer stale for {stale:?}");
}

/// MultiGuard::extend with a zero or huge lease: a typed error, the guard unchanged and held.
async fn multi_extend_bad_durations(b: Backend) {
    let c = b.client().await;
    let mut g = c.multi_lock(["ex:a", "ex:b"]).lock().await.expect("multi");
    for d in [Duration::ZERO, Duration::from_millis(1), Duration::MAX] {
        let err = g.extend(d).await.expect_err("bad lease");
        assert!(err.is_invalid_input(), "{d:?}: {err}");
        assert!(g.is_held(), "{d:?}");
    }
    assert!(g.extend(ms(5000)).await.expect("extend"));
    assert!(g.release().await.expect("release"));
}

both_backends!(release_all_under_a_leadership, multi_extend_bad_durations);

/// Short leases (30 ms, renewed every 10 ms on a loaded 2-core machine, so some renewals come
/// late and leaderships are lost) held longer than the lease: a checker samples every live
/// leadership every millisecond and never sees two saying `is_held()`.
async fn election_short_leases_never_two_held(b: Backend) {
    let name = "adv6-short";
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
    within(ms(3000), "idle", async || queue_idle(&c, name).await).await;
}

type Registry = StdMutex<Vec<(Arc<redis_locks::MultiGuard>, Vec<(String, bool)>)>>;

/// Short-lease multi-locks (30 ms, some renewals late) held past their lease, over random
/// overlapping subsets: a checker samples every live guard every half millisecond; among the
/// guards saying `is_held()`, never a writer of a name beside another holder of it.
async fn multi_short_leases_never_conflict(b: Backend) {
    let reg: Arc<Registry> = Arc::new(StdMutex::new(Vec::new()));
    let until = Instant::now() + ms(3000);
    let checker = {
        let reg = reg.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            while Instant::now() < until {
                {
                    let live = reg.lock().unwrap();
                    let mut inside: HashMap<&str, (u32, u32)> = HashMap::new();
                    for (g, parts) in live.iter() {
                        if !g.is_held() {
                            continue;
                        }
                        for (name, write) in parts {
                            let e = inside.entry(name.as_str()).or_default();
                            if *write {
                                e.0 += 1
                            } else {
                                e.1 += 1
                            }
                        }
                    }
                    for (name, (w, r)) in inside {
                        assert!(
                            w == 0 || (w == 1 && r == 0),
                            "{name}: {w} writers, {r} readers held at once"
                        );
                    }
                }
                samples += 1;
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            samples
        })
    };
    let mut tasks = Vec::new();
    for id in 0..4u64 {
        let c = b.client().await;
        let reg = reg.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(500 + id);
            let mut wins = 0;
            while Instant::now() < until {
                let mut names: Vec<&str> = vec!["sl:a", "sl:b", "sl:c", "sl:d"];
                for i in (1..names.len()).rev() {
                    names.swap(i, rng.below(i as u64 + 1) as usize);
                }
                names.truncate(1 + rng.below(3) as usize);
                let split = rng.below(names.len() as u64 + 1) as usize;
                let (reads, writes) = names.split_at(split);
                let exclusive = rng.below(2) == 0;
                let lock = if exclusive {
                    c.multi_lock(names.iter().copied())
                } else {
                    c.multi_rwlock(reads.iter().copied(), writes.iter().copied())
                };
                let g = match lock
                    .lease(ms(30))
                    .retry_interval(ms(10))
                    .lock()
                    .timeout(ms(100))
                    .await
                {
                    Ok(g) => g,
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => panic!("multi: {e}"),
                };
                wins += 1;
                let g = Arc::new(g);
                let parts: Vec<(String, bool)> = g
                    .names()
                    .map(|n| (n.to_owned(), exclusive || writes.contains(&n)))
                    .collect();
                reg.lock().unwrap().push((g.clone(), parts));
                tokio::time::sleep(ms(rng.below(80))).await;
                reg.lock().unwrap().retain(|(x, _)| !Arc::ptr_eq(x, &g));
                let g = Arc::try_unwrap(g).unwrap_or_else(|_| panic!("owned"));
                if rng.below(2) == 0 {
                    let _ = g.release().await.expect("release");
                } else {
                    drop(g);
                }
            }
            wins
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += join("worker", t).await;
    }
    assert!(wins > 10, "{wins} grants");
    assert!(join("checker", checker).await > 100);
}

both_backends!(
    election_short_leases_never_two_held,
    multi_short_leases_never_conflict
);

/// Silence unused-import warnings for helpers only some tests use.
#[allow(dead_code)]
fn _unused() -> (Option<AtomicU64>, Duration) {
    (None, EVENTUALLY)
}

#[allow(dead_code)]
async fn _eventually_used() {
    eventually("x", async || true).await;
}
