//! `.wait_replicas(n, timeout)`: a grant counts only once n replicas acknowledged it.

mod support;
use support::quick::Quick;
use support::time::{ms, secs};

use redis_locks::{Error, LockClient};
use support::backend::eventually;
use support::RedisServer;

/// The error of a grant or a resume that no replica acknowledged (one was required).
fn none_acked(err: &Error) -> bool {
    matches!(
        err,
        Error::ReplicasNotReached {
            acked: 0,
            required: 1
        }
    )
}

/// A primary and its replica, once the replica is online.
async fn replicated() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_for_replica(&master).await;
    (master, replica)
}

async fn wait_for_replica(master: &RedisServer) {
    eventually("the replica came online", async || {
        let info = master.cli(&["INFO", "replication"]);
        info.contains("connected_slaves:1") && info.contains("state=online")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_waits_for_an_acknowledging_replica() {
    let (master, replica) = replicated().await;
    let client = LockClient::connect(&master.url()).await.expect("connect");
    let guard = client
        .mutex("replicated")
        .wait_replicas(1, secs(5))
        .lock()
        .await
        .expect("one replica acknowledges");
    // The replica has the grant: the writer record is there.
    let on_replica = replica.cli(&["EXISTS", "rl:{replicated}:w"]);
    assert_eq!(on_replica, "1");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_without_enough_replicas_is_released() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let err = client
        .mutex("unreplicated")
        .wait_replicas(1, ms(100))
        .lock()
        .await
        .expect_err("no replica can acknowledge");
    assert!(none_acked(&err), "{err:?}");
    // Released again: another client gets it at once.
    let other = LockClient::connect(&server.url()).await.expect("connect");
    assert!(other.mutex("unreplicated").try_lock().await.is_ok());
}

#[tokio::test]
async fn memory_store_refuses_wait_replicas() {
    let client = LockClient::in_memory();
    let err = client
        .mutex("m")
        .wait_replicas(1, ms(100))
        .lock()
        .await
        .expect_err("no replicas in memory");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(client.mutex("m").try_lock().await.is_ok());
}

#[tokio::test]
async fn zero_replicas_is_invalid_input() {
    let client = LockClient::in_memory();
    let err = client
        .mutex("m")
        .wait_replicas(0, ms(100))
        .lock()
        .await
        .expect_err("invalid");
    assert!(err.is_invalid_input(), "{err:?}");
}

/// A resume with `wait_replicas` waits for the replicas after its renewal, as a grant does:
/// with a replica, the resumed guard holds and the replica has the renewed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_waits_for_an_acknowledging_replica() {
    let (master, replica) = replicated().await;
    let client = LockClient::connect(&master.url()).await.expect("connect");
    let id = client.mutex("handed").lock().await.expect("lock").detach();
    let resumer = LockClient::connect(&master.url()).await.expect("connect");
    let lease = secs(120);
    let guard = resumer
        .mutex("handed")
        .lease(lease)
        .wait_replicas(1, secs(5))
        .resume(&id)
        .await
        .expect("one replica acknowledges the resume");
    // The replica saw the resume's renewal: the lease there is the resumer's (120 s), not
    // the 30 s of the grant.
    let ttl: u64 = replica
        .cli(&["PTTL", "rl:{handed}:w"])
        .parse()
        .expect("PTTL");
    assert!(ttl > 60_000, "the replica's lease is {ttl} ms");
    assert!(guard.release().await.expect("release"));
}

/// Without enough replicas, a resume fails with `ReplicasNotReached` and gives no guard; the
/// hold is left as it was (renewed), so its id can still be released (or resumed) by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_without_enough_replicas_gives_no_guard() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let id = client.locked("unreplicated").await.detach();
    let resumer = LockClient::connect(&server.url()).await.expect("connect");
    let err = resumer
        .mutex("unreplicated")
        .wait_replicas(1, ms(100))
        .resume(&id)
        .await
        .expect_err("no replica can acknowledge");
    assert!(none_acked(&err), "{err:?}");
    // Still held, by nobody's guard: a third client is refused until the id releases it.
    let other = LockClient::connect(&server.url()).await.expect("connect");
    assert!(other.mutex("unreplicated").try_lock().await.is_err());
    assert!(resumer.release_hold(&id).await.expect("release by id"));
    assert!(other.mutex("unreplicated").try_lock().await.is_ok());
}

/// With `wait_replicas`, renewals and `extend` wait for the replicas as the grant did: with an
/// acknowledging replica the guard is renewed past several leases; once the replica is gone,
/// an `extend` fails with `ReplicasNotReached` and the renewals the primary confirmed are not
/// trusted, so the guard's trust ends with the lease it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_extends_wait_for_the_replicas() {
    let (master, mut replica) = replicated().await;
    let client = LockClient::connect(&master.url()).await.expect("connect");
    let mut guard = client
        .mutex("renewed-with-replicas")
        .lease(ms(1500))
        .wait_replicas(1, secs(1))
        .lock()
        .await
        .expect("one replica acknowledges");
    tokio::time::sleep(secs(4)).await;
    assert!(
        guard.is_held(),
        "renewals the replica acknowledged are trusted"
    );
    replica.kill();
    // Refused for want of a replica, or, when a renewal waiting for the dead replica held its
    // turn until the trust ran out, answered `false` by a guard already lost.
    let sent = match guard.extend(secs(30)).await {
        Err(err) => {
            assert!(none_acked(&err), "{err:?}");
            true
        }
        Ok(extended) => {
            assert!(!extended && !guard.is_held(), "an unacknowledged extend");
            false
        }
    };
    // The primary applied the extend: it holds the lock for 30 s, but the guard trusts no
    // more than the lease its last acknowledged renewal bought.
    tokio::time::sleep(secs(2)).await;
    assert!(
        !guard.is_held(),
        "a renewal no replica acknowledged was trusted"
    );
    let on_primary: i64 = master
        .cli(&["PTTL", "rl:{renewed-with-replicas}:w"])
        .parse()
        .expect("pttl");
    assert!(
        !sent || on_primary > 20_000,
        "the extend was applied: {on_primary} ms"
    );
}

/// A replica that stops answering holds up no other hold of the client: the engine's `WAIT`s
/// for one hold's renewals (`wait_replicas`) hold its connection a millisecond at a time, so
/// a 600 ms hold without `wait_replicas` renewed on that connection is never lost while the
/// replica is paused for 6 s, and a dropped guard's hold is released meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_replica_holds_up_no_other_hold() {
    let (master, replica) = replicated().await;
    let client = LockClient::connect(&master.url()).await.expect("connect");
    let replicated = client
        .mutex("waits-for-the-replica")
        .lease(secs(6))
        .wait_replicas(1, ms(1500))
        .lock()
        .await
        .expect("lock");
    let short = client
        .mutex("short")
        .lease(ms(600))
        .lock()
        .await
        .expect("lock");
    let dropped = client
        .mutex("dropped")
        .lease(secs(30))
        .lock()
        .await
        .expect("lock");
    let paused = support::Stopped::stop(replica.pid());
    let since = std::time::Instant::now();
    let mut dropped = Some(dropped);
    while since.elapsed() < secs(6) {
        assert!(short.is_held(), "a 600 ms hold was lost behind a WAIT");
        if since.elapsed() > secs(2) {
            drop(dropped.take());
        }
        tokio::time::sleep(ms(20)).await;
    }
    assert_eq!(
        master.cli(&["EXISTS", "rl:{dropped}:w"]),
        "0",
        "not released"
    );
    drop(paused);
    drop(replicated);
}

/// A grant's wait for the replicas holds the caller's connection a millisecond at a time: with
/// the replica paused, an acquire under `wait_replicas(1, 3 s)` waits out its timeout while
/// the same client takes and releases another lock, each within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grants_wait_for_the_replicas_holds_up_no_other_step() {
    let (master, replica) = replicated().await;
    let client = LockClient::connect(&master.url()).await.expect("connect");
    let paused = support::Stopped::stop(replica.pid());
    let waiting = client
        .mutex("waits-for-the-replica")
        .wait_replicas(1, secs(3));
    let grant = tokio::spawn(async move { waiting.lock().await.map(drop) });
    tokio::time::sleep(ms(300)).await;
    for _ in 0..5 {
        let other = client.mutex("beside").lock().timeout(secs(1)).await;
        let other = other.expect("the other lock, beside the grant's wait");
        assert!(other.release().await.expect("release"));
    }
    let err = grant
        .await
        .expect("task")
        .expect_err("no replica acknowledges");
    assert!(none_acked(&err), "{err:?}");
    drop(paused);
}
