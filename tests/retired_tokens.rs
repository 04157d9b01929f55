//! A wait that released its claim's token goes on under a new one (a multi-lock's withdraw
//! after an attempt of unknown outcome, quorum mode's release where a minority granted), and
//! the old token is retired: released again until Redis confirms it. What that must not cost:
//! a hold left behind, a waiting-writer announcement holding readers back, a lost wake-up, a
//! label, or a part of a multi-guard whose slots carry different tokens.
//!
//! Each test checks a promise of docs/GUARANTEES.md through the public API, on real
//! redis-server processes: no two holders, no leak on a cancelled or timed-out wait, a
//! cancelled writer stops holding readers back at once, a waiter outlives an outage and is
//! served once the servers answer, waits are woken by Redis (not by their polling interval).

mod support;
use support::backend::within_ok;
use support::quick::in_time;
use support::quick::Quick;

use std::time::Duration;

use redis_locks::{LockClient, RedisConfig};
use tokio::time::Instant;

use support::backend::Backend;
use support::faulty::{Faulty, Gate, Op, Rule};
use support::late::{
    a_granted, late_proxy, quorum_client, took, until, warm_up, warm_up_multi, watch, woken_after,
};
use support::proxy::Proxy;
use support::time::{ms, secs};
use support::{Granted, RedisServer};

fn config(response_timeout: Duration) -> RedisConfig {
    RedisConfig {
        response_timeout,
        connect_timeout: ms(500),
        ..RedisConfig::default()
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Polls `try_lock` of `name` by `contender` every 20 ms until granted (released at once) or
/// `limit`; how long it took, `None` if never.
async fn time_to_take(contender: &LockClient, name: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let m = contender.mutex(name);
    while start.elapsed() < limit {
        if let Some(g) = m.try_lock().await.granted("contender's try") {
            let _ = g.release().await;
            return Some(start.elapsed());
        }
        tokio::time::sleep(ms(20)).await;
    }
    None
}

/// Polls `try_read` of `name` by `reader` every 20 ms until granted (released at once) or
/// `limit`; how long it took, `None` if never.
async fn time_to_read(reader: &LockClient, name: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let rw = reader.rwlock(name);
    while start.elapsed() < limit {
        if let Some(g) = rw.try_read().await.granted("reader's try") {
            let _ = g.release().await;
            return Some(start.elapsed());
        }
        tokio::time::sleep(ms(20)).await;
    }
    None
}

// ---------------------------------------------------------------------------------------
// Quorum: a failed attempt that may have been granted on a majority
// ---------------------------------------------------------------------------------------

/// Quorum mode, three servers, A reaches server 2 through a proxy that stalls. A's timed wait
/// (200 ms) attempts once: servers 0 and 1 grant (a majority), server 2 does not answer
/// (response timeout 600 ms), and the raise of server 2's fence counter after the majority
/// grant does not answer either: the attempt is cut at the deadline plus one response
/// timeout, its outcome unknown (it was granted on a majority). The wait fails.
///
/// Promise (GUARANTEES "No leak on cancel"): a timed-out wait leaves no hold behind (what
/// Redis cannot be told at once is released in the background). The lease is 20 s, so a
/// hold left behind is unmistakable: a contender must take the Mutex within a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_quorum_wait_leaves_no_hold_behind() {
    let name = "retoken-timed-out-quorum";
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let p2 = Proxy::start(servers[2].port()).await;
    let direct: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let via = vec![servers[0].url(), servers[1].url(), p2.url()];
    let a = quorum_client(&via, Some(ms(600))).await;
    let contender = quorum_client(&direct, None).await;
    warm_up(&a, "retoken-warm-up").await;
    p2.stall();
    let started = Instant::now();
    let outcome = a.mutex(name).lease(secs(20)).lock().timeout(ms(200)).await;
    eprintln!(
        "A's timed wait ended after {:?}: {:?}",
        started.elapsed(),
        outcome.as_ref().map(|g| g.fencing_token())
    );
    let err = match outcome {
        Ok(g) => {
            // A grant means the scenario did not happen.
            drop(g);
            panic!("A's wait was granted although server 2 stalled past its deadline");
        }
        Err(e) => e,
    };
    eprintln!("A's error: {err}");
    // Server 2 stays stalled: the background release reaches servers 0 and 1 at once.
    let took_after = time_to_take(&contender, name, secs(5)).await;
    let info = contender.mutex(name).inspect().await.expect("inspect");
    assert!(
        took_after.is_some(),
        "A's timed-out wait left a hold behind on a majority: no contender could take the \
         Mutex within 5 s of the wait's end (lease 20 s); server view: {info:?}"
    );
    eprintln!("contender took the Mutex {took_after:?} after A's wait ended");
}

/// Quorum mode, three servers, A reaches servers 0 and 1 through proxies. A's first attempt
/// is granted on all three, but the replies of 0 and 1 are lost (the requests ran), and the
/// releases A then sends there (where unsure) never arrive (the network to 0 and 1 stalls,
/// then the connections are cut). So A's first token holds 0 and 1: a majority, with no
/// guard. The network then comes back.
///
/// Promise (GUARANTEES "Waiters outlive an outage": a wait keeps attempting while Redis
/// cannot be reached, and is served once it answers; "Idempotent acquire": a retry after a
/// lost reply finds the lock its own). With a lease of 10 s, A must be granted well before
/// that lease ends: the only hold on the lock is A's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_wait_after_lost_replies_is_served_once_the_servers_answer() {
    let name = "retoken-lost-replies-quorum";
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let p0 = Proxy::start(servers[0].port()).await;
    let p1 = Proxy::start(servers[1].port()).await;
    let via = vec![p0.url(), p1.url(), servers[2].url()];
    let a = quorum_client(&via, Some(ms(1000))).await;
    let on0 = LockClient::connect(&servers[0].url()).await.expect("on 0");
    let on1 = LockClient::connect(&servers[1].url()).await.expect("on 1");
    warm_up(&a, "retoken-warm-up").await;
    p0.stall_replies();
    p1.stall_replies();
    let handle = a.mutex(name).lease(secs(10));
    let locking = tokio::spawn(async move { handle.lock().await });
    // Wait until the first attempt ran on 0 and 1 (their replies are held back), then hold
    // every later request there too: the releases where unsure never arrive.
    let give_up = Instant::now() + secs(5);
    loop {
        let h0 = on0.mutex(name).inspect().await.expect("inspect 0").holders;
        let h1 = on1.mutex(name).inspect().await.expect("inspect 1").holders;
        if !h0.is_empty() && !h1.is_empty() {
            break;
        }
        assert!(Instant::now() < give_up, "A's attempt never ran on 0 and 1");
        tokio::time::sleep(ms(2)).await;
    }
    p0.stall();
    p1.stall();
    let first = on0.mutex(name).inspect().await.expect("inspect 0").holders;
    eprintln!("server 0 holds for: {first:?}");
    // A's attempt times out, it releases where unsure (held back), and keeps attempting.
    tokio::time::sleep(ms(2500)).await;
    // Setup check: the releases where unsure were held back, A's first token still holds
    // 0 and 1 (else the scenario did not happen).
    for (i, on) in [&on0, &on1].iter().enumerate() {
        let now = on.mutex(name).inspect().await.expect("inspect").holders;
        assert!(
            now.len() == 1 && now[0].token_prefix == first[0].token_prefix,
            "setup: server {i} should still hold A's first token: {now:?}"
        );
    }
    p0.cut();
    p1.cut();
    p0.resume();
    p1.resume();
    let back = Instant::now();
    let granted = a_granted(locking).await;
    let waited = back.elapsed();
    eprintln!("A granted {waited:?} after the network came back");
    assert!(granted.is_held());
    assert!(
        waited < secs(5),
        "A's wait was served {waited:?} after the servers answered again (lease 10 s): it was \
         blocked by its own first token's hold, which no retry names any more"
    );
}

// ---------------------------------------------------------------------------------------
// Quorum: writer announcements by the tokens a wait left
// ---------------------------------------------------------------------------------------

/// A reader holds; writer W waits (writer preference, retry interval 100 ms, lease and
/// heartbeat 5 s) with a timeout of 1.5 s and times out. Then a new reader must be admitted
/// at once: GUARANTEES "RwLock, writer preference": a writer [..] that is cancelled [stops
/// holding readers back] at once.
async fn a_timed_out_writer_stops_holding_readers_back(
    what: &str,
    reader: &LockClient,
    writer: &LockClient,
    late_reader: &LockClient,
) {
    let name = "retoken-writer-announcements";
    let r = reader
        .rwlock(name)
        .lease(secs(20))
        .read()
        .await
        .expect("reader");
    let err = writer
        .rwlock(name)
        .lease(secs(5))
        .retry_interval(ms(100))
        .write()
        .timeout(ms(1500))
        .await
        .expect_err("the writer waits behind the reader and times out");
    assert!(err.is_timeout(), "{what}: {err}");
    let ended = Instant::now();
    let admitted = time_to_read(late_reader, name, secs(8)).await;
    let info = late_reader.rwlock(name).inspect().await.expect("inspect");
    eprintln!("{what}: a new reader admitted {admitted:?} after the writer's timeout");
    assert!(
        admitted.is_some_and(|d| d < secs(1)),
        "{what}: a writer whose wait timed out still held new readers back {:?} later \
         (admitted after {admitted:?}); server view: {info:?}",
        ended.elapsed()
    );
    drop(r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_quorum_writer_stops_holding_readers_back_at_once() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(quorum_client(&urls, None).await);
    }
    a_timed_out_writer_stops_holding_readers_back("quorum", &clients[0], &clients[1], &clients[2])
        .await;
}

/// The same on one redis-server (no new tokens there): the baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_single_server_writer_stops_holding_readers_back_at_once() {
    let b = Backend::redis();
    let (r, w, l) = (b.client().await, b.client().await, b.client().await);
    a_timed_out_writer_stops_holding_readers_back("single server", &r, &w, &l).await;
}

/// Quorum mode: a reader holds for 1 s while writer W waits (retry interval 100 ms, lease
/// and heartbeat 5 s); W is granted when the reader leaves, and releases at once. No writer
/// holds or waits any more: a new reader must be admitted at once (writer preference holds
/// readers back only "while it keeps attempting").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_released_quorum_writer_holds_no_reader_back() {
    let name = "retoken-released-writer";
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let reader = quorum_client(&urls, None).await;
    let writer = quorum_client(&urls, None).await;
    let late = quorum_client(&urls, None).await;
    let r = reader
        .rwlock(name)
        .lease(secs(20))
        .read()
        .await
        .expect("reader");
    let w = writer.rwlock(name).lease(secs(5)).retry_interval(ms(100));
    let waiting = tokio::spawn(async move { w.write().await });
    tokio::time::sleep(secs(1)).await;
    assert!(r.release().await.expect("reader releases"));
    let g = within_ok(secs(10), "writer granted", waiting)
        .await
        .expect("writer");
    assert!(g.release().await.expect("writer releases"));
    let admitted = time_to_read(&late, name, secs(8)).await;
    let info = late.rwlock(name).inspect().await.expect("inspect");
    eprintln!("a new reader admitted {admitted:?} after the writer released");
    assert!(
        admitted.is_some_and(|d| d < secs(1)),
        "a writer that was granted and released still held new readers back (admitted \
         after {admitted:?}); server view: {info:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Wake-ups for the new token
// ---------------------------------------------------------------------------------------

/// Quorum mode, three servers; W reaches server 2 through a proxy. H holds the Mutex (lease
/// 30 s); W waits (retry interval 6 s, heartbeat 30 s, so it sleeps about 5-6 s between
/// attempts unless woken). W's third attempt is refused by servers 0 and 1 and held on the
/// way to server 2; meanwhile H releases (every server publishes the wake-up, and W's hub
/// receives it), then the held attempt reaches server 2 (now free: a split vote, released).
///
/// Promise (GUARANTEES: waits are woken by Redis): the release happened after W's refused
/// attempt was decided by 0 and 1, so its wake-up must make W attempt again; W must be
/// granted well within its polling interval of the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_waiter_is_woken_by_a_release_during_its_attempt() {
    let name = "retoken-quorum-wake-up";
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let p2 = late_proxy::LateProxy::start(servers[2].port()).await;
    let direct: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let via = vec![servers[0].url(), servers[1].url(), p2.url()];
    let w = quorum_client(&via, Some(secs(5))).await;
    let h = quorum_client(&direct, None).await;
    warm_up(&w, "retoken-warm-up").await;
    let held = h.mutex(name).lease(secs(30)).lock().await.expect("H locks");
    let handle = w
        .mutex(name)
        .lease(secs(30))
        .heartbeat(secs(30))
        .retry_interval(secs(6));
    let locking = tokio::spawn(async move { handle.lock().await });
    // W's first attempts (the refusal, the attempt after subscribing) are done by then.
    tokio::time::sleep(ms(1000)).await;
    assert!(!locking.is_finished());
    let n = name.to_owned();
    p2.hold_when(move |chunk| chunk.contains("EVALSHA") && chunk.contains(&n));
    until("W's next attempt never reached server 2", secs(10), || {
        !p2.held_log().is_empty()
    })
    .await;
    eprintln!("held on the way to server 2: {:?}", p2.held_log());
    p2.hold_when_off();
    tokio::time::sleep(ms(50)).await;
    assert!(held.release().await.expect("H releases"));
    let released = Instant::now();
    // The wake-ups reach W's hub; then the held attempt reaches server 2.
    tokio::time::sleep(ms(200)).await;
    p2.deliver();
    let g = woken_after(locking, released, "W").await;
    assert!(g.is_held());
}

/// One redis-server. C holds X (lease 30 s). A's multi-lock on [X, Y] (retry interval 6 s)
/// is refused and sleeps; its next attempt's reply is lost (unknown), the one after is
/// refused, and A withdraws (releases its token on X and Y); those releases are held back
/// for a moment, and meanwhile C releases X: the wake-up reaches A's hub while A withdraws.
///
/// Promise (waits are woken by Redis): X was released after A's refused attempt, so A must
/// attempt again at once and be granted well within its polling interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_lock_is_woken_by_a_release_during_its_withdraw() {
    use redis_locks::testing::store::RedisStore;
    let (x, y) = ("retoken-multi-wake:x", "retoken-multi-wake:y");
    let b = Backend::redis();
    let store = RedisStore::connect_with(&b_url(&b), config(secs(5)))
        .await
        .expect("A's store");
    let fa = Faulty::new(std::sync::Arc::new(store));
    let a = LockClient::builder().store(fa.clone()).expect("A");
    let c = b.client().await;
    let c_guard = c.mutex(x).lease(secs(30)).lock().await.expect("C locks X");
    let m = a.multi_lock([x, y]).lease(secs(30)).retry_interval(secs(6));
    let locking = tokio::spawn(async move { m.lock().await });
    until("A's first two attempts", secs(5), || {
        fa.count(Op::AcquireAll) >= 2
    })
    .await;
    tokio::time::sleep(ms(200)).await;
    assert_eq!(fa.count(Op::AcquireAll), 2, "A sleeps after two refusals");
    fa.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
    let gate = Gate::new();
    fa.add(Rule::on(Op::Release).times(2).hold_request(gate.clone()));
    in_time(secs(10), "A's withdraw never came", gate.wait_entered(1)).await;
    tokio::time::sleep(ms(20)).await;
    assert!(c_guard.release().await.expect("C releases X"));
    let released = Instant::now();
    tokio::time::sleep(ms(200)).await;
    gate.open();
    let g = woken_after(locking, released, "A (its withdraw ran as X was released)").await;
    assert!(g.is_held());
}

fn b_url(b: &Backend) -> String {
    b.server.as_ref().expect("server").url()
}

// ---------------------------------------------------------------------------------------
// A multi-lock stepping slot by slot (as on Redis Cluster) whose slots carry two tokens
// ---------------------------------------------------------------------------------------

/// A's multi-lock on two names in different hash slots, stepping one slot at a time (as on
/// Redis Cluster): the first slot is granted by token T1; C holds the second; A's attempt
/// there loses its reply, the next is refused, A withdraws and goes on by T2; C releases and
/// A is granted the second slot by T2. The guard's parts carry two tokens.
struct TwoTokens {
    _b: Backend,
    fa: std::sync::Arc<Faulty>,
    a: LockClient,
    contender: LockClient,
    observer: LockClient,
    guard: redis_locks::MultiGuard,
    first: String,
    second: String,
}

async fn two_token_guard(tag: &str, lease: Duration) -> TwoTokens {
    use redis_locks::testing::store::RedisStore;
    let b = Backend::redis();
    let store = RedisStore::connect_with(&b_url(&b), config(secs(2)))
        .await
        .expect("A's store");
    let fa = Faulty::new(std::sync::Arc::new(store));
    fa.step_slot_by_slot();
    let a = LockClient::builder().store(fa.clone()).expect("A");
    let c = b.client().await;
    let contender = b.client().await;
    let observer = b.client().await;
    let (n1, n2) = (format!("retoken-{tag}:one"), format!("retoken-{tag}:two"));
    let probe = a
        .multi_lock([n1.as_str(), n2.as_str()])
        .try_lock()
        .await
        .expect("probe");
    let order: Vec<String> = probe.names().map(str::to_owned).collect();
    assert!(probe.release().await.expect("probe release"));
    let (first, second) = (order[0].clone(), order[1].clone());
    let c_guard = c.lock_for(&second, secs(30)).await;
    let base = fa.count(Op::AcquireAll);
    let m = a
        .multi_lock([n1.as_str(), n2.as_str()])
        .lease(lease)
        .retry_interval(ms(300));
    let locking = tokio::spawn(async move { m.lock().await });
    // The first slot granted, the second refused twice (then A sleeps).
    until("A's first steps", secs(5), || {
        fa.count(Op::AcquireAll) >= base + 3
    })
    .await;
    let s2 = second.clone();
    fa.add(
        Rule::on(Op::AcquireAll)
            .when(move |c| c.name == s2)
            .times(1)
            .lose_reply(),
    );
    // The lost attempt, then a refused one that withdraws.
    until("A's withdraw", secs(5), || {
        fa.count(Op::AcquireAll) >= base + 5
    })
    .await;
    tokio::time::sleep(ms(100)).await;
    assert!(c_guard.release().await.expect("C releases"));
    let guard = within_ok(secs(10), "A granted", locking)
        .await
        .expect("A locks both");
    let (t1, t2) = (
        guard.token_of(&first).expect("first"),
        guard.token_of(&second).expect("second"),
    );
    eprintln!("first {first} by {t1}, second {second} by {t2}");
    assert_ne!(t1, t2, "setup: the slots were meant to carry two tokens");
    TwoTokens {
        _b: b,
        fa,
        a,
        contender,
        observer,
        guard,
        first,
        second,
    }
}

/// Both parts stay held through renewals (lease 1.5 s, watched 4 s): no contender takes
/// either name while the guard says `is_held()`, and the guard is still held; then `extend`
/// renews both, and `release` frees both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_two_token_multi_guard_renews_extends_and_releases_every_part() {
    let mut t = two_token_guard("renew", ms(1500)).await;
    let (probe, rival1, rival2) = (
        t.observer.mutex(&t.second),
        t.contender.mutex(&t.first),
        t.contender.mutex(&t.second),
    );
    let guard = &t.guard;
    watch(
        "a multi-guard whose slots carry two tokens",
        || guard.is_held(),
        || guard.valid_until(),
        async || probe.inspect().await.expect("inspect"),
        async || match took(rival1.try_lock().await).await {
            Some(f) => Some(f),
            None => took(rival2.try_lock().await).await,
        },
        secs(4),
    )
    .await;
    assert!(t.guard.is_held(), "renewals kept every part");
    assert!(t.guard.extend(secs(20)).await.expect("extend"));
    for name in [&t.first, &t.second] {
        let info = t.observer.mutex(name).inspect().await.expect("inspect");
        let left = info
            .holders
            .first()
            .map(|h| h.lease_remaining)
            .unwrap_or_default();
        assert!(left > secs(15), "{name} extended to 20 s: {info:?}");
    }
    assert!(t.guard.release().await.expect("release"), "held every part");
    for name in [&t.first, &t.second] {
        assert!(
            took(t.contender.mutex(name).try_lock().await)
                .await
                .is_some(),
            "{name} free at once after the release"
        );
    }
    let _ = (&t.fa, &t.a);
}

/// Dropping the guard frees both parts (in the background, promptly).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_two_token_multi_guard_frees_every_part() {
    let t = two_token_guard("drop", secs(20)).await;
    drop(t.guard);
    for name in [&t.first, &t.second] {
        let d = time_to_take(&t.contender, name, secs(5)).await;
        assert!(
            d.is_some_and(|d| d < secs(2)),
            "{name} freed after the drop: {d:?}"
        );
    }
}

/// The client's `release_all` frees both parts of a guard whose slots carry two tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_all_frees_every_part_of_a_two_token_multi_guard() {
    let t = two_token_guard("release-all", secs(20)).await;
    let n = t.a.release_all().await.expect("release_all");
    eprintln!("release_all released {n}");
    for name in [&t.first, &t.second] {
        let d = time_to_take(&t.contender, name, secs(5)).await;
        assert!(
            d.is_some_and(|d| d < secs(1)),
            "{name} freed by release_all: {d:?}"
        );
    }
    assert!(!t.guard.is_held(), "the guard knows it was released");
}

// ---------------------------------------------------------------------------------------
// The client's label after a new token
// ---------------------------------------------------------------------------------------

/// Quorum mode: W (label "worker-7") waits behind H, so its first attempt is refused (a new
/// token follows); H releases and W is granted. The label "travels inside every claim token"
/// and `inspect` shows it next to each holder (LockClientBuilder::label): W's hold must show
/// "worker-7".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_hold_granted_after_a_refusal_keeps_its_label() {
    let name = "retoken-quorum-label";
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let h = quorum_client(&urls, None).await;
    let w = LockClient::builder()
        .label("worker-7")
        .quorum(&strs(&urls))
        .await
        .expect("W");
    let held = h.mutex(name).lock().await.expect("H locks");
    let handle = w.mutex(name).retry_interval(ms(100));
    let waiting = tokio::spawn(async move { handle.lock().await });
    tokio::time::sleep(ms(300)).await;
    assert!(held.release().await.expect("H releases"));
    let g = within_ok(secs(10), "W granted", waiting)
        .await
        .expect("W locks");
    let info = w.mutex(name).inspect().await.expect("inspect");
    eprintln!("{info:?}");
    assert_eq!(
        info.holders.first().and_then(|h| h.label.as_deref()),
        Some("worker-7"),
        "W's hold after a refusal lost its client's label: {info:?}"
    );
    drop(g);
}

/// One redis-server: A's multi-lock (label "worker-7") withdraws after an attempt of unknown
/// outcome and is granted by a new token: `inspect` of its parts must show "worker-7".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_lock_granted_after_a_withdraw_keeps_its_label() {
    use redis_locks::testing::store::RedisStore;
    let (x, y) = ("retoken-multi-label:x", "retoken-multi-label:y");
    let b = Backend::redis();
    let store = RedisStore::connect_with(&b_url(&b), config(secs(2)))
        .await
        .expect("A's store");
    let fa = Faulty::new(std::sync::Arc::new(store));
    let a = LockClient::builder()
        .label("worker-7")
        .store(fa.clone())
        .expect("A");
    let c = b.client().await;
    let c_guard = c.mutex(x).lease(secs(30)).lock().await.expect("C locks X");
    let m = a.multi_lock([x, y]).retry_interval(ms(300));
    let locking = tokio::spawn(async move { m.lock().await });
    until("A's first two attempts", secs(5), || {
        fa.count(Op::AcquireAll) >= 2
    })
    .await;
    fa.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
    until("A's withdraw", secs(5), || fa.count(Op::AcquireAll) >= 4).await;
    tokio::time::sleep(ms(100)).await;
    assert!(c_guard.release().await.expect("C releases X"));
    let g = within_ok(secs(10), "A granted", locking)
        .await
        .expect("A locks [X, Y]");
    for name in [x, y] {
        let info = c.mutex(name).inspect().await.expect("inspect");
        eprintln!("{info:?}");
        assert_eq!(
            info.holders.first().and_then(|h| h.label.as_deref()),
            Some("worker-7"),
            "A's part {name} after a withdraw lost its client's label: {info:?}"
        );
    }
    drop(g);
}

/// Quorum mode, three servers; writer W reaches server 2 through a proxy that stalls (a
/// minority down: quorum mode is meant to go on). Response timeout 1.5 s, the default lease
/// (30 s: heartbeat 5 s, W's interval 1 s). Reader R1 holds a read (lease 60 s); W waits
/// for the write. Every attempt of W is refused by 0 and 1 (which record its waiting-writer
/// announcement, heartbeat 5 s) and unanswered by 2: the store releases the token on 2
/// (where unsure) and W goes on under a new token, retiring the old one; at the next
/// refusal it releases the retired token again.
///
/// Promise (GUARANTEES, "RwLock, writer preference"): once a waiting writer has announced
/// itself, no new reader is admitted while it keeps attempting. W keeps attempting the whole
/// time (it is a live `write()` wait); a late reader polling `try_read` must never be
/// admitted while W waits. The release of a retired token must not make W wait for server 2: if
/// it did, W's attempts would come more than a heartbeat apart and each new token's
/// announcement would lapse before the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_writer_with_a_stalled_minority_keeps_readers_out() {
    let name = "writer-pref-with-a-stalled-minority";
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let p2 = Proxy::start(servers[2].port()).await;
    let direct: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let via = vec![servers[0].url(), servers[1].url(), p2.url()];
    let w = quorum_client(&via, Some(ms(1500))).await;
    let r1 = quorum_client(&direct, None).await;
    let late = quorum_client(&direct, None).await;
    let on0 = LockClient::connect(&servers[0].url()).await.expect("on 0");
    warm_up(&w, "stalled-minority-warm-up").await;
    let held = r1
        .rwlock(name)
        .lease(secs(60))
        .read()
        .await
        .expect("R1 reads");
    p2.stall();
    let handle = w.rwlock(name);
    let writing = tokio::spawn(async move { handle.write().await });
    // W's first announcement on server 0.
    let give_up = Instant::now() + secs(10);
    loop {
        let info = on0.rwlock(name).inspect().await.expect("inspect 0");
        if !info.waiters.is_empty() {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "W never announced itself on server 0"
        );
        tokio::time::sleep(ms(10)).await;
    }
    let announced = Instant::now();
    // Watch for 25 s: W keeps waiting (R1 holds), and no new reader may get in.
    let mut admitted = Vec::new();
    let mut gaps = Vec::new();
    let mut last_seen = Instant::now();
    let mut tokens: Vec<String> = Vec::new();
    while announced.elapsed() < secs(25) {
        let info = on0.rwlock(name).inspect().await.expect("inspect 0");
        let now: Vec<String> = info
            .waiters
            .iter()
            .map(|w| w.token_prefix.clone())
            .collect();
        if now != tokens {
            eprintln!(
                "{:>8.2?} server 0's waiting writers: {now:?}",
                announced.elapsed()
            );
            tokens = now;
        }
        if info.waiters.is_empty() {
            gaps.push(announced.elapsed());
        } else {
            last_seen = Instant::now();
        }
        if let Some(g) = late
            .rwlock(name)
            .lease(secs(5))
            .try_read()
            .await
            .granted("late reader's try")
        {
            admitted.push((announced.elapsed(), last_seen.elapsed(), info.clone()));
            let _ = g.release().await;
        }
        assert!(!writing.is_finished(), "W's wait ended while R1 holds");
        tokio::time::sleep(ms(50)).await;
    }
    writing.abort();
    drop(held);
    eprintln!(
        "server 0 showed no waiting writer at {} polls (first: {:?}, last: {:?})",
        gaps.len(),
        gaps.first(),
        gaps.last()
    );
    assert!(
        admitted.is_empty(),
        "a new reader was admitted {} times while writer W kept waiting (writer preference); \
         first at {:?} after W's first announcement ({:?} after server 0 last showed W's \
         announcement), server 0 then: {:?}",
        admitted.len(),
        admitted[0].0,
        admitted[0].1,
        admitted[0].2
    );
}

// ---------------------------------------------------------------------------------------
// Fences in quorum mode after a minority grant
// ---------------------------------------------------------------------------------------

/// One redis-server. C holds X (lease 30 s). A's multi-lock on [X, Y] waits (retry interval
/// 5 s, so polling cannot explain a prompt grant). A's store loses the replies of its first
/// eight multi-acquires (each ran: refused, C holds X) and of its first forty releases (each
/// ran): every refusal after a lost reply withdraws, the withdraw is not confirmed, the token
/// is retired and the wait goes on under a new one; retired tokens pile up and are released
/// again at every refusal. Then C releases X.
///
/// Promises: waits are woken by Redis (A is granted within 1 s of C's release, well within
/// its 5 s interval); no leak (A's release leaves nothing: a contender takes X and Y at
/// once, and the server shows no holder or waiter of either).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_lock_with_many_retired_tokens_is_woken_and_leaves_nothing() {
    use support::backend::Backend;
    use support::faulty::{Faulty, Op, Rule};
    let (x, y) = ("many-retired-multi:x", "many-retired-multi:y");
    let b = Backend::redis();
    let fa = Faulty::new(b.store().await);
    let a = LockClient::builder()
        .retry_interval(secs(5))
        .store(fa.clone())
        .expect("A");
    let c = b.client().await;
    let contender = b.client().await;
    warm_up_multi(&a, "many-retired-multi").await;
    let c_guard = c.mutex(x).lease(secs(30)).lock().await.expect("C locks X");
    fa.add(Rule::on(Op::AcquireAll).times(8).lose_reply());
    fa.add(Rule::on(Op::Release).times(40).lose_reply());
    let acquires_before = fa.count(Op::AcquireAll);
    let m = a.multi_lock([x, y]).lease(secs(10));
    let started = Instant::now();
    let locking = tokio::spawn(async move { m.lock().await });
    // Every lost reply is retried (back-off), then withdrawn: wait until the eight were used
    // and the wait sleeps refused.
    let give_up = Instant::now() + secs(30);
    while fa.count(Op::AcquireAll) < acquires_before + 10 {
        assert!(Instant::now() < give_up, "A's wait stopped attempting");
        assert!(!locking.is_finished(), "A's wait ended while C holds X");
        tokio::time::sleep(ms(20)).await;
    }
    tokio::time::sleep(ms(300)).await;
    let releases_sent = fa.count(Op::Release);
    eprintln!(
        "after {:?}: {} multi-acquires, {releases_sent} releases sent",
        started.elapsed(),
        fa.count(Op::AcquireAll) - acquires_before
    );
    let released = Instant::now();
    assert!(c_guard.release().await.expect("C releases X"));
    let g = a_granted(locking).await;
    let woke = released.elapsed();
    assert!(g.is_held());
    assert!(
        woke < secs(1),
        "A's multi-lock was granted {woke:?} after C released X (interval 5 s): not woken"
    );
    // The faults are over: A's own release is answered.
    let releases_at_grant = fa.count(Op::Release);
    fa.clear();
    tokio::time::sleep(ms(200)).await;
    assert!(
        g.release().await.expect("A releases"),
        "A's multi-guard lost"
    );
    let start = Instant::now();
    let mut both = None;
    while start.elapsed() < secs(2) {
        let gx = contender.mutex(x).try_lock().await.granted("contender X");
        let gy = contender.mutex(y).try_lock().await.granted("contender Y");
        if let (Some(gx), Some(gy)) = (gx, gy) {
            both = Some(start.elapsed());
            let _ = gx.release().await;
            let _ = gy.release().await;
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    let ix = contender.mutex(x).inspect().await.expect("inspect X");
    let iy = contender.mutex(y).inspect().await.expect("inspect Y");
    assert!(
        both.is_some_and(|d| d < ms(500)),
        "after A's release a contender could not take X and Y (took {both:?}); X: {ix:?}, \
         Y: {iy:?}"
    );
    assert!(
        ix.holders.is_empty()
            && ix.waiters.is_empty()
            && iy.holders.is_empty()
            && iy.waiters.is_empty(),
        "left behind: X: {ix:?}, Y: {iy:?}"
    );
    eprintln!(
        "releases sent in all: {} (before C's release: {releases_sent}, at the grant: \
         {releases_at_grant})",
        fa.count(Op::Release)
    );
}
