//! Leader election (`LockClient::election`), on a real redis-server and on the in-memory
//! store: one leader at a time in arrival order, proclaim, resign, takeover after a crash,
//! `leader()` and `observe()` converging to the store's leader, bad input, quorum refusal.

mod support;
use support::faulty::faulty_client;
use support::quick::{soon, Quick};
use support::time::ms;

use std::time::Duration;

use redis_locks::{Error, LeaderInfo, LockClient, Observer, MAX_VALUE_LEN};

use support::backend::{eventually, join, until_waiters, Backend};
use support::faulty::{Op, Rule};

/// The next state the observer yields, within the generous bound.
async fn next_state(observer: &mut Observer) -> Option<LeaderInfo> {
    soon("an observer state within the bound", observer.next())
        .await
        .expect("the observer runs")
        .into_leader()
}

/// Reads the observer until it yields `want` (the leader's value, or `None`), returning what
/// it yielded; intermediate states are allowed (the observer yields the latest state).
async fn observe_until(observer: &mut Observer, want: Option<&str>) -> Option<LeaderInfo> {
    loop {
        let state = next_state(observer).await;
        if state.as_ref().map(|l| l.value.as_str()) == want {
            return state;
        }
    }
}

async fn campaign_proclaim_resign(b: Backend) {
    let c = b.client().await;
    let election = c.election("e1");
    assert_eq!(election.leader().await.expect("leader"), None);
    let mut leadership = election.campaign("a:9000").await.expect("campaign");
    assert!(leadership.is_held());
    assert_eq!(leadership.value(), "a:9000");
    let info = election.leader().await.expect("leader").expect("a leader");
    assert_eq!(info.value, "a:9000");
    assert_eq!(info.term, leadership.term(), "the term is the fence");
    assert!(info.time_left > Duration::ZERO && info.time_left <= redis_locks::DEFAULT_LEASE);
    // Values are arbitrary text, separators included.
    let odd = "b|7|x\n{y}|";
    leadership.proclaim(odd).await.expect("proclaim");
    assert_eq!(leadership.value(), odd);
    let info = election.leader().await.expect("leader").expect("a leader");
    assert_eq!((info.value.as_str(), info.term), (odd, leadership.term()));
    // Another client sees the same.
    let other = b.client().await;
    let seen = other.election("e1").leader().await.expect("leader");
    assert_eq!(
        seen.map(|l| (l.value, l.term)),
        Some((info.value, info.term))
    );
    let term = leadership.term();
    assert!(leadership.resign().await.expect("resign"));
    assert_eq!(election.leader().await.expect("leader"), None);
    let next = other.election("e1").campaign("c").await.expect("next");
    assert!(next.term() > term, "terms increase");
    assert_eq!(
        election.leader().await.expect("leader").map(|l| l.value),
        Some("c".into())
    );
}

async fn candidates_take_over_in_arrival_order(b: Backend) {
    let first = b.client().await;
    let leader = first.election("e2").campaign("0").await.expect("campaign");
    let mut waiting = Vec::new();
    for i in 1..=3 {
        let c = b.client().await;
        waiting.push(tokio::spawn(async move {
            let l = c.election("e2").campaign(i.to_string()).await?;
            let value = l.value().to_owned();
            l.resign().await?;
            Ok::<_, Error>(value)
        }));
        // Each candidate queues before the next one starts.
        let queue = first.fair_lock("e2");
        until_waiters(i, || queue.inspect()).await;
    }
    let mut observer = first.election("e2").observe();
    assert_eq!(
        next_state(&mut observer).await.map(|l| l.value),
        Some("0".into())
    );
    leader.resign().await.expect("resign");
    for (i, task) in waiting.into_iter().enumerate() {
        let value = join("candidate", task).await.expect("campaign");
        assert_eq!(value, (i + 1).to_string(), "arrival order");
    }
    observe_until(&mut observer, None).await;
}

async fn only_the_leader_proclaims(b: Backend) {
    let c = b.client().await;
    let election = c.election("e3").lease(ms(300));
    let mut leadership = election.campaign("a").await.expect("campaign");
    let fence = c.force_release("e3").await.expect("force release");
    assert!(fence > leadership.term());
    assert_eq!(election.leader().await.expect("leader"), None, "evicted");
    let err = leadership.proclaim("b").await.expect_err("not the holder");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert_eq!(
        leadership.value(),
        "a",
        "a refused proclaim changes nothing"
    );
    assert_eq!(election.leader().await.expect("leader"), None);
    eventually("the evicted leader learns it", async || {
        !leadership.is_held()
    })
    .await;
    // A new leader is not shadowed by the old value.
    let next = c.election("e3").campaign("c").await.expect("campaign");
    let info = election.leader().await.expect("leader").expect("leader");
    assert_eq!((info.value.as_str(), info.term), ("c", next.term()));
    assert!(!leadership.resign().await.expect("resign"));
    assert_eq!(
        election.leader().await.expect("leader").map(|l| l.value),
        Some("c".into()),
        "the old leader's resign does not retract the new one's value"
    );
}

async fn try_campaign_never_queues(b: Backend) {
    let c = b.client().await;
    let election = c.election("e4");
    let leader = election.try_campaign("a").await.expect("free");
    let err = election.try_campaign("b").await.expect_err("led");
    assert!(err.is_would_block(), "{err}");
    let info = c.fair_lock("e4").inspect().await.expect("inspect");
    assert!(info.waiters.is_empty(), "a refused try does not queue");
    drop(leader);
    eventually("a dropped leadership resigns", async || {
        election.leader().await.expect("leader").is_none()
            && c.fair_lock("e4")
                .inspect()
                .await
                .expect("inspect")
                .holders
                .is_empty()
    })
    .await;
}

async fn a_dead_leader_is_replaced(b: Backend) {
    let standby_client = b.client().await;
    let lease = ms(400);
    let (term_tx, term_rx) = tokio::sync::oneshot::channel();
    let (kill_tx, kill_rx) = std::sync::mpsc::channel::<()>();
    // The doomed leader runs on a runtime of its own thread, with its own client; shutting
    // that runtime down stops its renewals and its connection at once, as a killed process.
    let doomed_client = if b.is_memory() {
        Some(b.client().await)
    } else {
        None
    };
    let url = b.server.as_ref().map(|s| s.url());
    let thread = std::thread::spawn(move || {
        let rt = support::time::multi_thread(1);
        rt.block_on(async move {
            let c = match (doomed_client, url) {
                (Some(c), _) => c,
                (None, Some(url)) => LockClient::connect(&url).await.expect("connect"),
                (None, None) => unreachable!(),
            };
            let leadership = c.campaign_for("e5", lease, "doomed").await;
            let _ = term_tx.send(leadership.term());
            // Neither resigned nor dropped: the process just dies.
            redis_locks::testing::crash(&c);
            std::mem::forget(leadership);
            std::mem::forget(c);
        });
        kill_rx.recv().expect("kill order");
        rt.shutdown_background();
    });
    let doomed_term = term_rx.await.expect("the doomed leader's term");
    let election = standby_client.election("e5").lease(lease);
    let mut observer = election.observe();
    assert_eq!(
        observe_until(&mut observer, Some("doomed"))
            .await
            .map(|l| l.term),
        Some(doomed_term)
    );
    let standby = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("standby").await })
    };
    let queue = standby_client.fair_lock("e5");
    until_waiters(1, || queue.inspect()).await;
    kill_tx.send(()).expect("kill");
    thread.join().expect("doomed thread");
    let leadership = join("the standby takes over", standby)
        .await
        .expect("campaign");
    assert!(leadership.term() > doomed_term);
    let seen = observe_until(&mut observer, Some("standby")).await;
    assert_eq!(seen.map(|l| l.term), Some(leadership.term()));
}

async fn bad_values_are_refused(b: Backend) {
    let c = b.client().await;
    let election = c.election("e6");
    let err = election
        .campaign("x".repeat(MAX_VALUE_LEN + 1))
        .await
        .expect_err("too long");
    assert!(err.is_invalid_input(), "{err}");
    let info = c.fair_lock("e6").inspect().await.expect("inspect");
    assert!(info.holders.is_empty() && info.waiters.is_empty());
    let mut leadership = election
        .campaign("x".repeat(MAX_VALUE_LEN))
        .await
        .expect("at the limit");
    let err = leadership
        .proclaim("y".repeat(MAX_VALUE_LEN + 1))
        .await
        .expect_err("too long");
    assert!(err.is_invalid_input(), "{err}");
    assert_eq!(leadership.value().len(), MAX_VALUE_LEN);
    let err = c.election("").leader().await.expect_err("empty name");
    assert!(err.is_invalid_input(), "{err}");
    let mut observer = c.election("").observe();
    assert_eq!(observer.next().await, None);
    assert!(observer.closed_because().is_some());
}

/// Proclaims missed by the observer (messages lost) still reach it within the retry interval.
async fn observers_converge_without_messages(b: Backend) {
    let c = b.client().await;
    let leader_client = b.client().await;
    let election = c.election("e7").retry_interval(ms(100));
    let mut observer = election.observe();
    assert_eq!(next_state(&mut observer).await, None);
    let mut leadership = leader_client.lead("e7", "a").await;
    observe_until(&mut observer, Some("a")).await;
    // A proclaim whose message this observer never gets: its client's connection drops
    // the subscription (Redis) or the message is swallowed (memory).
    if b.is_memory() {
        // The shared store's hub is the observer's: divert every later message.
        let store = b.store().await;
        assert!(redis_locks::testing::divert(store.hub(), |_, _| {}));
    } else {
        b.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    }
    leadership.proclaim("b").await.expect("proclaim");
    observe_until(&mut observer, Some("b")).await;
    leadership.resign().await.expect("resign");
    observe_until(&mut observer, None).await;
}

/// A proclaim or retract whose reply is lost was applied anyway; it is sent again (the step is
/// idempotent), so the campaign, the new value and the resign all still succeed.
async fn lost_proclaim_replies_are_retried(b: Backend) {
    let (faulty, c) = faulty_client(&b).await;
    faulty.add(Rule::on(Op::Proclaim).times(1).lose_reply());
    let mut leadership = c.election("e12").campaign("a").await.expect("campaign");
    assert_eq!(
        faulty.count(Op::Proclaim),
        2,
        "the lost proclaim was sent again"
    );
    let info = c.election("e12").leader().await.expect("leader");
    assert_eq!(info.map(|l| l.value), Some("a".to_owned()));
    faulty.add(Rule::on(Op::Proclaim).times(1).lose_reply());
    leadership.proclaim("b").await.expect("proclaim");
    assert_eq!(leadership.value(), "b");
    assert_eq!(faulty.count(Op::Proclaim), 4);
    faulty.add(Rule::on(Op::Proclaim).times(1).lose_reply());
    assert!(leadership.resign().await.expect("resign"));
    assert_eq!(
        faulty.count(Op::Proclaim),
        6,
        "the lost retract was sent again"
    );
    assert_eq!(c.election("e12").leader().await.expect("leader"), None);
}

both_backends!(
    lost_proclaim_replies_are_retried,
    campaign_proclaim_resign,
    candidates_take_over_in_arrival_order,
    only_the_leader_proclaims,
    try_campaign_never_queues,
    a_dead_leader_is_replaced,
    bad_values_are_refused,
    observers_converge_without_messages,
);

/// A key of another type where the leader's value lives: a typed error, nothing changed.
#[tokio::test]
async fn a_foreign_value_key_is_a_typed_error() {
    let b = Backend::redis();
    let c = b.client().await;
    b.cli(&["SET", "rl:{e8}:lv", "not a leader value"]);
    let err = c.election("e8").leader().await.expect_err("corrupt");
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    b.cli(&["DEL", "rl:{e8}:lv"]);
    b.cli(&["LPUSH", "rl:{e8}:lv", "x"]);
    let err = c.election("e8").campaign("a").await.expect_err("a list");
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    let info = c.fair_lock("e8").inspect().await.expect("inspect");
    assert!(
        info.holders.is_empty(),
        "a failed campaign gives up its grant"
    );
}

/// Quorum mode has no ticket queue: every election step is refused with a typed error.
#[tokio::test]
async fn quorum_mode_refuses_elections() {
    let servers = [
        support::RedisServer::start(),
        support::RedisServer::start(),
        support::RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let c = LockClient::quorum(&urls).await.expect("quorum");
    let election = c.election("e9");
    let err = election.campaign("a").await.expect_err("quorum");
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    let err = election.leader().await.expect_err("quorum");
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    let mut observer = election.observe();
    assert_eq!(observer.next().await, None);
    assert!(observer.closed_because().is_some());
}

/// A Redis restart (empty, persistence off) loses the leadership: the leader's guard reports
/// it, the standby still waiting re-queues on the new server and wins, and an observer that
/// lived through the restart converges to the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_election_outlives_a_redis_restart() {
    let mut b = Backend::redis();
    let leader_client = b.client().await;
    let standby_client = b.client().await;
    let observer_client = b.client().await;
    let lease = ms(600);
    let leadership = leader_client.campaign_for("e10", lease, "a").await;
    let standby = {
        let c = standby_client.clone();
        tokio::spawn(async move {
            c.election("e10")
                .lease(lease)
                .heartbeat(ms(300))
                .campaign("b")
                .await
        })
    };
    let queue = observer_client.fair_lock("e10");
    until_waiters(1, || queue.inspect()).await;
    let mut observer = observer_client
        .election("e10")
        .retry_interval(ms(200))
        .observe();
    observe_until(&mut observer, Some("a")).await;
    b.server.as_mut().expect("a private server").restart();
    soon("the leader learns its lease is gone", leadership.lost()).await;
    let next = join("the standby wins on the restarted server", standby)
        .await
        .expect("campaign");
    let seen = observe_until(&mut observer, Some("b")).await;
    assert_eq!(seen.map(|l| l.term), Some(next.term()));
}

/// `observe()` outside a tokio runtime does not panic: the observer is closed and says why.
#[test]
fn observe_outside_a_runtime_is_closed_not_a_panic() {
    let c = LockClient::in_memory();
    let observer = c.election("e11").observe();
    let why = observer.closed_because().expect("closed");
    assert!(why.contains("runtime"), "{why}");
}
