//! Server faults: `DEBUG SLEEP` longer than a lease, `kill -9` and restart on the
//! same port, `SCRIPT FLUSH`, and `maxmemory` refusing writes. Fenced writes to a resource on
//! a separate server show that no stale write is accepted and no fence is granted twice.

mod support;
use support::backend::within_ok;
use support::quick::in_time;
use support::quick::Quick;
use support::time::{ms, secs};

use redis_locks::{LockClient, RedisConfig};
use tokio::time::sleep;

use support::backend::EVENTUALLY;
use support::fenced::Fenced;
use support::waits::holders;
use support::RedisServer;

async fn connect(url: &str) -> LockClient {
    LockClient::builder()
        .redis_config(RedisConfig {
            response_timeout: ms(500),
            connect_timeout: ms(500),
            ..RedisConfig::default()
        })
        .connect(url)
        .await
        .expect("connect")
}

/// The server sleeps longer than the lease: the holder is told, a new holder takes over, and
/// the old holder's release returns false without touching the new holder's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn debug_sleep_longer_than_the_lease() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let res = RedisServer::start();
    let fenced = Fenced::new(&res.url(), "sleep").await;
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let old = a.lock_for("sleepy", secs(1)).await;
    assert!(fenced.write(old.fencing_token(), "old").await);
    let port = server.port().to_string();
    let sleeper = tokio::task::spawn_blocking(move || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port, "DEBUG", "SLEEP", "2.5"])
            .output()
            .expect("redis-cli DEBUG SLEEP")
    });
    in_time(secs(5), "lost() fired while the server slept", old.lost()).await;
    assert!(!old.is_held());
    let out = sleeper.await.expect("sleeper");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("OK"),
        "DEBUG SLEEP failed: {out:?}"
    );
    let step = "taken over";
    let new = within_ok(EVENTUALLY, step, b.mutex("sleepy").lease(secs(30)).lock()).await;
    assert!(new.fencing_token() > old.fencing_token());
    assert!(fenced.write(new.fencing_token(), "new").await);
    assert!(!fenced.write(old.fencing_token(), "old").await);
    assert!(!old.release().await.expect("stale release"));
    assert_eq!(holders(&b, "sleepy").await, 1, "stale release deleted");
    assert!(new.release().await.expect("release"));
    fenced.check().await;
}

/// `kill -9` and restart (no persistence) with holders and waiters of a mutex and a fair
/// lock: the holders' `lost()` fires at their next renewal, their `release()` is false, and
/// every waiter acquires once the server is back, one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_and_restart_without_persistence() {
    let mut server = RedisServer::start();
    let res = RedisServer::start();
    let holder = connect(&server.url()).await;
    let waiter = LockClient::builder()
        .redis_config(RedisConfig {
            response_timeout: ms(500),
            connect_timeout: ms(500),
            ..RedisConfig::default()
        })
        .retry_interval(ms(500))
        .connect(&server.url())
        .await
        .expect("connect");
    let lease = ms(1500);
    let m = holder.lock_for("restart-m", lease).await;
    let f = holder.fair_for("restart-f", lease).await;
    let mut waiters = Vec::new();
    for i in 0..2 {
        let mm = waiter.mutex("restart-m").lease(lease);
        let ff = waiter.fair_lock("restart-f").lease(lease);
        let fenced_m = Fenced::new(&res.url(), "restart-m").await;
        let fenced_f = Fenced::new(&res.url(), "restart-f").await;
        waiters.push(tokio::spawn(async move {
            let g = mm.lock().await.expect("mutex waiter after restart");
            assert!(fenced_m.write(g.fencing_token(), &format!("m{i}")).await);
            sleep(ms(50)).await;
            assert!(g.release().await.expect("release m"));
            let g = ff.lock().await.expect("fair waiter after restart");
            assert!(fenced_f.write(g.fencing_token(), &format!("f{i}")).await);
            sleep(ms(50)).await;
            assert!(g.release().await.expect("release f"));
        }));
    }
    sleep(ms(300)).await;
    server.restart();
    in_time(secs(10), "mutex holder told after the restart", m.lost()).await;
    let step = "fair lock holder told after the restart";
    in_time(secs(10), step, f.lost()).await;
    assert!(!m.release().await.expect("release after restart"));
    assert!(!f.release().await.expect("release after restart"));
    for w in waiters {
        within_ok(secs(30), "waiters acquire once the server is back", w).await;
    }
    // Fences restart with the data (documented): within the new epoch, one writer per fence.
    Fenced::new(&res.url(), "restart-m").await.check().await;
    Fenced::new(&res.url(), "restart-f").await.check().await;
}

/// The server is down for 3 s (longer than a quick restart): waiters that were waiting keep
/// waiting and acquire once it is back, instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_survive_a_three_second_outage() {
    let mut server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let waiter = connect(&server.url()).await;
    let g = holder.lock_for("outage", secs(2)).await;
    let m = waiter.mutex("outage");
    let w = tokio::spawn(async move { m.lock().await });
    sleep(ms(300)).await;
    server.kill();
    sleep(secs(3)).await;
    server.restart();
    let got = within_ok(secs(30), "waiter returned", w).await;
    let got = got.expect("the waiter failed during the outage instead of waiting");
    assert!(got.release().await.expect("release"));
    drop(g);
}

/// With persistence (AOF, fsync always), a `kill -9` keeps the lock state and the fence: the
/// holder keeps its lease across the restart, the next grant's fence is higher, and the fenced
/// resource never accepts a stale write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_and_restart_with_persistence_keeps_fences() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let res = RedisServer::start();
    let fenced = Fenced::new(&res.url(), "aof").await;
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let old = a.lock_for("aof", secs(3)).await;
    assert!(fenced.write(old.fencing_token(), "old").await);
    server.restart();
    // The state came back: another client is refused while the lease lives.
    assert!(support::would_block(b.mutex("aof").try_lock().await));
    assert!(fenced.write(old.fencing_token(), "old").await);
    let old_fence = old.fencing_token();
    assert!(old.release().await.expect("release"));
    let new = b.mutex("aof").lock().await.expect("lock");
    assert!(new.fencing_token() > old_fence);
    assert!(fenced.write(new.fencing_token(), "new").await);
    assert!(!fenced.write(old_fence, "old").await);
    assert!(new.release().await.expect("release"));
    fenced.check().await;
}

/// `SCRIPT FLUSH` over and over while holders renew and waiters wait: scripts are reloaded
/// transparently, nobody loses a lease, waiters get the lock in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_mid_run() {
    let server = RedisServer::start();
    let res = RedisServer::start();
    let clients = [connect(&server.url()).await, connect(&server.url()).await];
    let port = server.port().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            let mut flushes = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let out = std::process::Command::new("redis-cli")
                    .args(["-p", &port, "SCRIPT", "FLUSH"])
                    .output()
                    .expect("redis-cli");
                assert!(String::from_utf8_lossy(&out.stdout).contains("OK"));
                flushes += 1;
                std::thread::sleep(ms(100));
            }
            flushes
        })
    };
    let mut tasks = Vec::new();
    for i in 0..4 {
        let c = clients[i % 2].clone();
        let fenced = Fenced::new(&res.url(), "flush").await;
        tasks.push(tokio::spawn(async move {
            for round in 0..3 {
                let g = c
                    .fair_lock("flushed")
                    .lease(ms(600))
                    .lock()
                    .await
                    .expect("lock while scripts are flushed");
                assert!(
                    fenced
                        .write(g.fencing_token(), &format!("{i}-{round}"))
                        .await
                );
                // Longer than the lease: renewals must get through the flushes.
                sleep(ms(700)).await;
                assert!(g.is_held(), "lease lost to SCRIPT FLUSH");
                assert!(g.release().await.expect("release"));
            }
        }));
    }
    for t in tasks {
        within_ok(secs(60), "done", t).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(flusher.await.expect("flusher") > 3);
    let audit = Fenced::new(&res.url(), "flush").await.check().await;
    assert_eq!(audit.writers_by_fence.len(), 12);
}

/// `maxmemory` reached with `noeviction`: an acquire is refused with a typed error that says
/// OOM, a holder can still release (deletes are allowed), and everything works again once
/// memory is available.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maxmemory_refuses_writes_with_a_typed_error() {
    let server = RedisServer::start();
    let c = connect(&server.url()).await;
    let held = c.lock_for("oom-held", secs(30)).await;
    // Scripts loaded before memory runs out (SCRIPT LOAD is refused under OOM too).
    let warm = c.fair_lock("oom-fair").lock().await.expect("warm");
    assert!(warm.release().await.expect("release"));
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    // Each attempt: granted (Ok(true)), refused (Ok(false)) or the error.
    let outcomes = [
        ("mutex", support::tried(c.mutex("oom").try_lock().await)),
        (
            "fair lock",
            support::tried(c.fair_lock("oom-fair").try_lock().await),
        ),
        ("read", support::tried(c.rwlock("oom-rw").try_read().await)),
    ];
    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|(_, r)| {
            !matches!(r, Err(e @ redis_locks::Error::Redis { .. }) if e.to_string().contains("OOM"))
        })
        .map(|(what, r)| format!("{what}: {r:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "writes under maxmemory must be refused with Error::Redis saying OOM; got {wrong:?}"
    );
    assert!(held.release().await.expect("release under OOM"));
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let g = c.mutex("oom").try_lock().await.expect("free");
    assert!(g.release().await.expect("release"));
}
