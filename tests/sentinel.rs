//! Redis Sentinel: the client finds the primary through the sentinels and follows it through
//! a failover (`SENTINEL FAILOVER`, a killed primary) while holders and waiters are active.
#![cfg(feature = "sentinel")]

mod support;
use support::quick::in_time;
use support::quick::Quick;
use support::time::{ms, secs};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::{LockClient, Preference};
use support::history::{History, Kind};
use support::signal;
use support::RedisSentinels;

const MASTER: &str = "locks";
/// Long enough that a waiter is served only by a wake-up, never by its own retry.
const NO_POLL: Duration = Duration::from_secs(120);

enum Failover {
    /// `SENTINEL FAILOVER`: the primary is demoted to a replica of its replica.
    Command,
    /// SIGKILL of the primary; it comes back empty and the sentinels make it a replica.
    Kill,
}

async fn failover_under_load(how: Failover) {
    let mut set = tokio::task::block_in_place(|| RedisSentinels::start(MASTER));
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .sentinel(&urls, MASTER)
        .await
        .expect("connect through the sentinels");
    let old = set.primary_port();

    // Holders on "m": every grant acknowledged by the replica, so it survives the failover.
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut holders = Vec::new();
    for i in 0..3 {
        let (client, history, stop, granted) = (
            client.clone(),
            history.clone(),
            stop.clone(),
            granted.clone(),
        );
        holders.push(tokio::spawn(async move {
            let lock = client.mutex("m").lease(secs(5)).wait_replicas(1, secs(1));
            while !stop.load(Ordering::SeqCst) {
                match lock.lock().timeout(secs(2)).await {
                    Ok(guard) => {
                        let t = history.enter_as(
                            format!("holder {i}"),
                            Kind::Exclusive,
                            guard.fencing_token(),
                        );
                        tokio::time::sleep(ms(20)).await;
                        history.exit(t);
                        granted.fetch_add(1, Ordering::SeqCst);
                        let _ = guard.release().await;
                    }
                    // During the switch: connection errors, no replica to acknowledge.
                    Err(_) => tokio::time::sleep(ms(50)).await,
                }
            }
        }));
    }

    // Waiters on "w", held across the failover; they poll only every NO_POLL, so they are
    // served by a wake-up published on the new primary.
    let blocker = client
        .mutex("w")
        .wait_replicas(1, secs(2))
        .lock()
        .await
        .expect("hold w");
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = client.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client
                .mutex("w")
                .retry_interval(NO_POLL)
                .lock()
                .timeout(secs(40))
                .await
                .expect("a waiter was not served after the failover");
            guard.release().await.expect("release w");
        }));
    }
    tokio::time::sleep(ms(500)).await;
    let before = granted.load(Ordering::SeqCst);
    assert!(before > 0, "no grant before the failover");

    let new = tokio::task::block_in_place(|| {
        match how {
            Failover::Command => set.failover(),
            Failover::Kill => set.node_mut(old).kill(),
        }
        set.wait_new_primary(old)
    });
    if let Failover::Kill = how {
        // Back empty, and a primary until it is told otherwise: the client must not use it.
        // The sentinels make it a replica of the new primary in their own time (slow on a
        // loaded machine); after two seconds the test does it for them, so grants can be
        // acknowledged again.
        tokio::task::block_in_place(|| set.node_mut(old).restart());
        tokio::time::sleep(secs(2)).await;
        let new_port = new.to_string();
        tokio::task::block_in_place(|| {
            set.node_mut(old)
                .cli(&["REPLICAOF", "127.0.0.1", &new_port])
        });
    }
    // Once the old primary is a replica, it refuses writes: grants from now on are made on
    // the new primary only if the client followed it.
    tokio::task::block_in_place(|| set.wait_replica_of(old, new));
    let demoted = granted.load(Ordering::SeqCst);
    support::backend::eventually("grants resume on the new primary", async || {
        granted.load(Ordering::SeqCst) > demoted + 5
    })
    .await;
    assert!(
        blocker.is_held(),
        "the replicated hold on w was lost in the failover"
    );
    blocker
        .release()
        .await
        .expect("release w on the new primary");
    for w in waiters {
        w.await.expect("waiter task");
    }
    stop.store(true, Ordering::SeqCst);
    for h in holders {
        h.await.expect("holder task");
    }
    history.check_exclusion();

    // Every primitive works against the new primary.
    let t = secs(10);
    let g = client
        .mutex("after-m")
        .lock()
        .timeout(t)
        .await
        .expect("mutex");
    g.release().await.expect("mutex release");
    for pref in [Preference::Writer, Preference::Reader, Preference::Fair] {
        let rw = client.rwlock("after-rw").preference(pref);
        let r = rw.read().timeout(t).await.expect("read");
        r.release().await.expect("read release");
        let w = rw.write().timeout(t).await.expect("write");
        w.release().await.expect("write release");
    }
    let f = client
        .fair_lock("after-f")
        .lock()
        .timeout(t)
        .await
        .expect("fair lock");
    f.release().await.expect("fair release");
    let p = client
        .semaphore("after-s", 2)
        .acquire()
        .timeout(t)
        .await
        .expect("permit");
    p.release().await.expect("permit release");
    // An election on the new primary: campaign, read the leader, resign.
    let election = client.election("after-e");
    let leadership = election.campaign("a").timeout(t).await.expect("campaign");
    let info = election.leader().await.expect("leader").expect("a leader");
    assert_eq!((info.value.as_str(), info.term), ("a", leadership.term()));
    assert!(leadership.resign().await.expect("resign"));
    assert_eq!(election.leader().await.expect("leader"), None);

    // A hold that did not reach the new primary (its keys gone there, as after a lost
    // replication) reports lost() at its next renewal, long before its 30 s lease ends.
    let g = client
        .mutex("unreplicated")
        .lease(secs(30))
        .renew_every(ms(300))
        .lock()
        .timeout(t)
        .await
        .expect("mutex");
    // The primary the sentinels name now is `new`, unless they failed over once more (seen in
    // CI with the Redis and Valkey suites running at once). After such a second failover the
    // node they demoted keeps acting as a primary until they reconfigure it, in their own
    // time, and the client may still renew there: so both data nodes are flushed (a replica
    // refuses with READONLY and gets the flush from its primary).
    let primary = set.primary_port();
    if primary != new {
        eprintln!("the sentinels failed over again: {new} -> {primary}");
    }
    let other = set.other_node(primary);
    tokio::task::block_in_place(|| {
        for port in [primary, other] {
            let out = set.node_mut(port).try_cli(&["FLUSHALL"]);
            eprintln!("FLUSHALL on {port}: {out:?}");
        }
    });
    let what = "a hold missing on the new primary still reports held";
    in_time(secs(10), what, g.lost()).await;
    assert!(!g.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_sentinel_failover_command() {
    failover_under_load(Failover::Command).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_failover_after_the_primary_is_killed() {
    failover_under_load(Failover::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_master_name_is_an_error() {
    let set = tokio::task::block_in_place(|| RedisSentinels::start(MASTER));
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let err = LockClient::sentinel(&urls, "no-such-master")
        .await
        .expect_err("a master the sentinels do not know");
    assert!(
        matches!(err, redis_locks::Error::InvalidArgument { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("no-such-master"), "{err}");
}

/// Data nodes reached with the user's credentials: the client logs in to the primary the
/// sentinels name as ACL user `app` (given as `SentinelNodeConnectionInfo`), every primitive
/// works, and a wrong password is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_nodes_are_reached_with_the_users_credentials() {
    use redis::sentinel::SentinelNodeConnectionInfo;
    let mut set = tokio::task::block_in_place(|| RedisSentinels::start(MASTER));
    let primary = set.primary_port();
    let ok = set.node_mut(primary).cli(&[
        "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all",
    ]);
    assert_eq!(ok.trim(), "OK");
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let nodes = |password: &str| {
        SentinelNodeConnectionInfo::default().set_redis_connection_info(
            redis::RedisConnectionInfo::default()
                .set_username("app")
                .set_password(password),
        )
    };
    let wrong = LockClient::builder()
        .connect_sentinel(&urls, MASTER, nodes("wrong"))
        .await;
    assert!(wrong.is_err(), "a wrong password must be refused");

    let client = LockClient::builder()
        .connect_sentinel(&urls, MASTER, nodes("s3cret"))
        .await
        .expect("connect as app");
    let m = client.mutex("auth-m");
    let g = m.lock().await.expect("mutex");
    assert!(m.try_lock().await.is_err(), "held");
    assert!(g.release().await.expect("release"));
    let f = client.fair_lock("auth-f").lock().await.expect("fair lock");
    assert!(f.release().await.expect("release"));
    let clients = set.node_mut(primary).cli(&["CLIENT", "LIST"]);
    assert!(
        clients.lines().any(|l| l.contains(" user=app ")),
        "no connection logged in as app: {clients}"
    );
}

/// A rate limiter through the sentinels' primary: admissions within the burst, a refused try
/// with the server's estimate, a wait admitted in turn, and inspect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limiter_works_through_the_sentinels() {
    let set = tokio::task::block_in_place(|| RedisSentinels::start(MASTER));
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::sentinel(&urls, MASTER).await.expect("connect");
    let limiter = client.rate_limiter("sentinel-rate", redis_locks::Rate::per_second(20).burst(2));
    limiter.try_acquire(2).await.expect("the burst");
    let refused = limiter.try_acquire(1).await.expect_err("used up");
    assert!(
        refused.is_rate_limited() && refused.retry_after().is_some(),
        "{refused}"
    );
    let admission = limiter.acquire(1).await.expect("in turn");
    assert_eq!(admission.permits, 1);
    assert!(limiter.inspect().await.expect("inspect").waiters.is_empty());
}

/// A failover in which the replica missed the last grant: the replica is frozen (SIGSTOP) and
/// its link closed by the primary (`CLIENT KILL TYPE replica`), a Mutex and an election are
/// granted on the primary, the primary is killed before the replica could reconnect, and the
/// sentinels promote the replica. The next fence and term on the
/// new primary are still above the lost ones (they are at least its clock in µs), although its
/// counter never saw them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_terms_rise_across_a_failover_that_lost_the_last_grant() {
    let mut set = tokio::task::block_in_place(|| RedisSentinels::start(MASTER));
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .sentinel(&urls, MASTER)
        .await
        .expect("connect through the sentinels");
    let old = set.primary_port();
    let replica = set.other_node(old);
    for _ in 0..20 {
        let g = client.mutex("fenced").lock().await.expect("lock");
        g.release().await.expect("release");
    }
    let leadership = client.lead("ruler", "a").await;
    let old_term = leadership.term();
    // Its lease would keep "ruler" held on the new primary if it were replicated: it is not.
    std::mem::forget(leadership);

    let frozen = set.node_mut(replica).pid();
    signal(frozen, "STOP");
    let killed = set
        .node_mut(old)
        .cli(&["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(killed, "1", "the replica's link");
    let lost = client.mutex("fenced").lock().await.expect("lock");
    let lost_fence = lost.fencing_token();
    std::mem::forget(lost);
    let lost_term = {
        let election = client.election("lost-ruler");
        let leadership = election.campaign("b").await.expect("campaign");
        let term = leadership.term();
        std::mem::forget(leadership);
        term
    };
    tokio::task::block_in_place(|| set.node_mut(old).kill());
    signal(frozen, "CONT");
    let new = tokio::task::block_in_place(|| set.wait_new_primary(old));
    assert_eq!(new, replica);

    // The new primary never saw the last grants.
    let stored: u64 = set
        .node_mut(new)
        .cli(&["GET", "rl:{fenced}:fence"])
        .parse()
        .expect("the replicated counter");
    assert!(
        stored < lost_fence,
        "the replica received the lost grant ({stored})"
    );
    assert_eq!(set.node_mut(new).cli(&["EXISTS", "rl:{lost-ruler}:h"]), "0");

    let after = client
        .mutex("fenced")
        .lock()
        .await
        .expect("lock on the new primary");
    assert!(
        after.fencing_token() > lost_fence,
        "fence {} after the failover is not above the lost {lost_fence}",
        after.fencing_token()
    );
    after.release().await.expect("release");
    let leadership = client
        .election("lost-ruler")
        .campaign("c")
        .await
        .expect("campaign on the new primary");
    assert!(
        leadership.term() > lost_term && leadership.term() > old_term,
        "term {} after the failover is not above the lost {lost_term}",
        leadership.term()
    );
    leadership.resign().await.expect("resign");
}

/// A Sentinel client's engine has connections of its own, made by its runtime on first use
/// on the primary the client found: a guard dropped, and a wait cut off, as a current-thread
/// runtime ends are released and removed by the engine, and the drops take no longer than
/// that.
#[test]
fn holds_and_waits_end_with_their_runtime() {
    let set = RedisSentinels::start(MASTER);
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let connect = async |builder: redis_locks::LockClientBuilder| {
        builder
            .sentinel(&urls, MASTER)
            .await
            .expect("connect through the sentinels")
    };
    support::exit::holds_and_waits_end_with_their_runtime(connect, secs(5));
}

/// A primary, a replica and three sentinels, and a client through them with `lease`.
async fn leased(lease: Duration) -> (RedisSentinels, LockClient) {
    let set = tokio::task::block_in_place(|| RedisSentinels::start(MASTER));
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .lease(lease)
        .sentinel(&urls, MASTER)
        .await
        .expect("connect through the sentinels");
    (set, client)
}

/// A new client through the sentinels `urls` (in that order), asked again for up to 20 s: the
/// new primary may not answer yet as the sentinels name it (seen on Valkey).
async fn client_through(urls: &[&str]) -> LockClient {
    let since = std::time::Instant::now();
    loop {
        match LockClient::builder().sentinel(urls, MASTER).await {
            Ok(c) => break c,
            Err(_) if since.elapsed() < secs(20) => tokio::time::sleep(ms(200)).await,
            Err(e) => panic!("connect through the sentinels: {e}"),
        }
    }
}

/// Puts both of `client`'s connections in use: its own (a lock and its release) and its
/// engine's (an extend).
async fn warm_both_connections(client: &LockClient) {
    let mut warm = client.mutex("warm").lock().await.expect("lock");
    assert!(warm.extend(secs(30)).await.expect("extend"));
    warm.release().await.expect("release");
}

/// The engine's connection needs no sentinel while the primary answers: with every sentinel
/// paused after the client connected, a hold is extended and, once its guard is dropped,
/// released, both by the engine, long before its 30 s lease would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_reaches_the_primary_while_the_sentinels_are_paused() {
    let (set, client) = leased(secs(30)).await;
    let paused = set.sentinel_pids();
    for pid in &paused {
        signal(*pid, "STOP");
    }
    support::exit::the_engine_extends_and_releases(&client, "sentinels-paused").await;
    for pid in &paused {
        signal(*pid, "CONT");
    }
}

/// The engine's connection follows its client to a new primary: a client whose engine has
/// not sent anything yet follows a failover, takes a lock on the new primary, and the old
/// primary is then cut loose as a primary of its own (`REPLICAOF NO ONE`, holding a copy of
/// that lock). The guard's extend, the engine's first step, reaches the new primary, not the
/// old one it was connected to when the client was built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_follows_its_client_to_a_new_primary() {
    let (set, client) = leased(secs(5)).await;
    let old = set.primary_port();
    tokio::task::block_in_place(|| {
        set.failover();
        let new = set.wait_new_primary(old);
        set.wait_replica_of(old, new);
    });
    let lock = client.mutex("follows-its-client").auto_renew(false);
    let mut guard = loop {
        // The first steps after the switch may meet the closed connection.
        match lock.lock().timeout(secs(2)).await {
            Ok(g) => break g,
            Err(_) => tokio::time::sleep(ms(100)).await,
        }
    };
    let cut_loose = set.node(old).cli(&["REPLICAOF", "NO", "ONE"]);
    assert_eq!(cut_loose, "OK");
    assert!(guard.extend(secs(60)).await.expect("extend"), "extended");
    let info = lock.inspect().await.expect("inspect on the new primary");
    let remaining = info.holders.first().map(|h| h.lease_remaining);
    assert!(
        remaining.is_some_and(|r| r > secs(30)),
        "the new primary's lease was not extended: {remaining:?}"
    );
    guard.release().await.expect("release");
}

/// A client whose connections dropped in a failover asks the sentinels before its next step,
/// though no step of it failed (its connections were dialled again to the old address): with
/// the old primary then cut loose as a primary of its own, its next lock still goes to the
/// new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_makes_the_client_ask_the_sentinels() {
    let (set, client) = leased(secs(30)).await;
    warm_both_connections(&client).await;
    let old = set.primary_port();
    tokio::task::block_in_place(|| {
        set.failover();
        let new = set.wait_new_primary(old);
        set.wait_replica_of(old, new);
    });
    assert_eq!(set.node(old).cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let lock = client.mutex("asks-after-a-drop").auto_renew(false);
    let held = lock.lock().timeout(secs(10)).await.expect("lock");
    let on_old = set.node(old).cli(&["KEYS", "*asks-after-a-drop*"]);
    assert!(
        on_old.trim().is_empty(),
        "granted on the old primary: {on_old}"
    );
    held.release().await.expect("release");
}

/// With every sentinel paused, the primary drops the client's connections (as a network
/// blip does): holds (3 s leases) are still renewed, and a dropped guard is still released;
/// asking the sentinels is bounded and not repeated at every step while they do not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_with_the_sentinels_paused_loses_no_hold() {
    let (set, client) = leased(secs(3)).await;
    let mut guards = Vec::new();
    for i in 0..20 {
        let guard = client.mutex(&format!("blip-{i}")).lock().await;
        guards.push(guard.expect("lock"));
    }
    // The engine's connection in use too (the first renewals come at a third of the lease).
    tokio::time::sleep(ms(1_500)).await;
    // Asked before the sentinels are paused: it asks them.
    let primary = set.primary_port();
    let paused = set.sentinel_pids();
    for pid in &paused {
        signal(*pid, "STOP");
    }
    set.node(primary).cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    tokio::time::sleep(secs(6)).await;
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    let first = guards.remove(0);
    drop(first);
    let lock = client.mutex("blip-0");
    let released = tokio::time::timeout(secs(10), async {
        while !lock.inspect().await.expect("inspect").holders.is_empty() {
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
    for pid in &paused {
        signal(*pid, "CONT");
    }
    assert_eq!(lost, 0, "holds lost while the primary answered");
    assert!(released.is_ok(), "the dropped guard's hold is still there");
}

/// While the first sentinel given does not answer, the others still name the primary: with
/// sentinel 0 and the primary A paused, sentinels 1 and 2 promote B and another client holds a
/// Mutex there; this client's steps meet the paused A, so it asks the sentinels (sentinel 0
/// first, whose question times out before 1 and 2 are read) and moves to B. When A is resumed,
/// a primary still until the sentinels demote it, this client is never granted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_first_sentinel_does_not_hide_the_new_primary() {
    let (set, client) = leased(secs(30)).await;
    warm_both_connections(&client).await;
    let old = set.primary_port();
    let (old_pid, sentinels) = (set.node(old).pid(), set.sentinel_pids());
    signal(sentinels[0], "STOP");
    signal(old_pid, "STOP");
    let new = tokio::task::block_in_place(|| set.wait_named_by(1, old));
    let urls = set.sentinel_urls();
    let others: Vec<&str> = [1, 2, 0].iter().map(|&i| urls[i].as_str()).collect();
    let other = client_through(&others).await;
    let held = loop {
        match other.mutex("silent-first").lock().timeout(secs(2)).await {
            Ok(g) => break g,
            Err(_) => tokio::time::sleep(ms(100)).await,
        }
    };
    let lock = client.mutex("silent-first").auto_renew(false);
    let mut granted = None;
    for round in 0..20 {
        if round == 8 {
            signal(old_pid, "CONT");
        }
        if let Ok(g) = lock.lock().timeout(ms(400)).await {
            granted = Some(g);
            break;
        }
    }
    signal(sentinels[0], "CONT");
    let both = granted.as_ref().is_some_and(|g| g.is_held()) && held.is_held();
    assert!(!both, "granted beside the holder on the new primary {new}");
}

/// With `wait_replicas`, a renewal is trusted only once the replicas acknowledged it, as the
/// grant was. The primary A is paused across a failover to B and resumed: it acts as a
/// primary (with no replica) until the sentinels demote it, and a guard granted there keeps
/// sending its renewals there. Another client takes the lock on B once the lease ran out there;
/// from then on the first guard never says `is_held()` beside the second's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_wait_replicas_no_renewal_on_an_old_primary_is_trusted() {
    let (set, client) = leased(secs(30)).await;
    warm_both_connections(&client).await;
    let old = set.primary_port();
    let old_pid = set.node(old).pid();
    let lock = client
        .mutex("renewed-on-the-old-primary")
        .lease(secs(8))
        .renew_every(secs(4))
        .wait_replicas(1, secs(1));
    let first = lock.lock().await.expect("lock");
    {
        let _paused = support::Stopped::stop(old_pid);
        tokio::task::block_in_place(|| set.wait_new_primary(old));
    }
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let other = client_through(&urls).await;
    let since = std::time::Instant::now();
    let second = loop {
        match other.mutex("renewed-on-the-old-primary").try_lock().await {
            Ok(g) => break g,
            Err(_) if since.elapsed() < secs(30) => tokio::time::sleep(ms(200)).await,
            Err(e) => panic!("the lease never ran out on the new primary: {e}"),
        }
    };
    let watched = std::time::Instant::now();
    while watched.elapsed() < secs(10) && first.is_held() {
        assert!(
            !second.is_held(),
            "the first guard says held beside the holder on the new primary"
        );
        tokio::time::sleep(ms(20)).await;
    }
    assert!(!first.is_held(), "the first guard still trusts its lease");
}

/// A planned failover (`SENTINEL FAILOVER`, every sentinel up) leaves the old primary writable
/// until the sentinels demote it, and a client whose connection saw no error keeps sending
/// there. Under `wait_replicas(1, ..)` that client is granted nothing there beside a holder on
/// the new primary, and its guard's renewals there are not trusted beside a new holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_leaves_no_two_holders_under_wait_replicas() {
    let (set, first) = leased(secs(30)).await;
    warm_both_connections(&first).await;
    let old = set.primary_port();
    let renewed = first
        .mutex("renewed-across-the-failover")
        .lease(secs(3))
        .renew_every(ms(500))
        .wait_replicas(1, secs(1))
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(ms(200)).await;
    tokio::task::block_in_place(|| {
        set.failover();
        set.wait_new_primary(old)
    });
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let second = client_through(&urls).await;
    let replicated = |c: &LockClient, name: &str| c.mutex(name).wait_replicas(1, secs(1));
    let held = loop {
        match replicated(&second, "granted-after-the-failover")
            .lease(secs(30))
            .lock()
            .timeout(secs(2))
            .await
        {
            Ok(g) => break g,
            Err(_) => tokio::time::sleep(ms(100)).await,
        }
    };
    let attempt = replicated(&first, "granted-after-the-failover")
        .auto_renew(false)
        .lock()
        .timeout(secs(2))
        .await;
    assert!(
        !(attempt.is_ok_and(|g| g.is_held()) && held.is_held()),
        "granted on the old primary beside the holder on the new one"
    );
    let watched = std::time::Instant::now();
    let mut taken = None;
    while watched.elapsed() < secs(12) {
        if taken.is_none() {
            taken = replicated(&second, "renewed-across-the-failover")
                .try_lock()
                .await
                .ok();
        }
        let both = taken.as_ref().is_some_and(|g| g.is_held()) && renewed.is_held();
        assert!(
            !both,
            "a guard renewed on the old primary says held beside the new holder"
        );
        tokio::time::sleep(ms(100)).await;
    }
}
