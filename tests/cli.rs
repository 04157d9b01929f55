//! The `redis-locks` CLI end to end against a real redis-server (feature `cli`).

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use redis_locks::store::Family;
use redis_locks::LockClient;
use support::RedisServer;

fn cli(server: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .arg("--url")
        .arg(server.url())
        .args(args)
        .output()
        .expect("run the redis-locks binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Waits until `f` is true (behaviour, not speed: a generous bound).
async fn until(mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..400 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached in 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shows_readers_and_a_waiting_writer() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let lock = client.rwlock("catalog");
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(lock.read().await.expect("read"));
    }
    let writer = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await })
    };
    until(async || lock.inspect().await.expect("inspect").waiters.len() == 1).await;

    let out = cli(&server, &["inspect", "catalog", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let json = stdout(&out);
    assert_eq!(json.matches("\"kind\":\"read\"").count(), 3, "{json}");
    assert_eq!(json.matches("heartbeat_remaining_ms").count(), 1, "{json}");
    assert!(!json.contains("\"kind\":\"write\""), "{json}");

    let text = stdout(&cli(&server, &["inspect", "catalog"]));
    assert!(text.contains("holders (3)"), "{text}");
    assert!(text.contains("waiting writers (1)"), "{text}");

    // Tokens are shown as short prefixes only.
    let full = client
        .store()
        .inspect(
            &client.keys("catalog").expect("keys"),
            Family::LeaseLock,
            None,
        )
        .await
        .expect("inspect");
    for h in &full.holders {
        assert!(!json.contains(&h.token), "a whole token leaked: {json}");
        assert!(json.contains(&h.token[..redis_locks::TOKEN_PREFIX_LEN]));
    }

    for r in readers {
        r.release().await.expect("release");
    }
    writer
        .await
        .expect("writer task")
        .expect("writer granted")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shows_a_fair_queue_in_order() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let fair = client.fair_lock("jobs");
    let holder = fair.lock().await.expect("lock");
    let mut waiters = Vec::new();
    for i in 1..=5usize {
        let f = fair.clone();
        waiters.push(tokio::spawn(async move { f.lock().await }));
        until(async || fair.inspect().await.expect("inspect").waiters.len() == i).await;
    }
    let full = client
        .store()
        .inspect(
            &client.keys("jobs").expect("keys"),
            Family::TicketQueue,
            None,
        )
        .await
        .expect("inspect");
    let out = cli(&server, &["inspect", "jobs", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let json = stdout(&out);
    // Queue entries appear in ticket order, positions 0..4, with the right tokens.
    let mut last = 0;
    for (i, w) in full.waiters.iter().enumerate() {
        let entry = format!(
            "{{\"position\":{i},\"ticket\":{},\"token\":\"{}\"",
            w.ticket,
            &w.token[..redis_locks::TOKEN_PREFIX_LEN]
        );
        let at = json
            .find(&entry)
            .unwrap_or_else(|| panic!("{entry} missing in {json}"));
        assert!(at >= last, "queue out of order in {json}");
        last = at;
    }
    let text = stdout(&cli(&server, &["inspect", "jobs"]));
    assert!(text.contains("queue (5)"), "{text}");

    holder.release().await.expect("release");
    for w in waiters {
        w.await
            .expect("task")
            .expect("granted")
            .release()
            .await
            .expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_force_release_and_exit_codes() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let a = client.mutex("alpha").lock().await.expect("lock");
    let fence = a.fencing_token();
    let _b = client.mutex("beta:1").lock().await.expect("lock");

    let out = cli(&server, &["list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), "[\"alpha\",\"beta:1\"]");
    let out = cli(&server, &["list", "beta*"]);
    assert_eq!(stdout(&out).trim(), "beta:1");

    // Unknown lock: exit code 3.
    assert_eq!(
        cli(&server, &["inspect", "nothing-here"]).status.code(),
        Some(3)
    );
    // Without --yes nothing happens: exit code 2 and the holder keeps the lock.
    assert_eq!(
        cli(&server, &["force-release", "alpha"]).status.code(),
        Some(2)
    );
    assert!(client
        .mutex("alpha")
        .try_lock()
        .await
        .expect("try")
        .is_none());

    let out = cli(&server, &["force-release", "alpha", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    let next = client
        .mutex("alpha")
        .try_lock()
        .await
        .expect("try")
        .expect("free now");
    assert!(
        next.fencing_token() > fence + 1,
        "the fence was bumped past the evicted holder"
    );
    // The evicted holder is told at its next renewal.
    assert!(
        !a.release().await.expect("release"),
        "the evicted guard no longer held it"
    );

    let out = cli(
        &server,
        &[
            "watch",
            "alpha",
            "--count",
            "2",
            "--interval-ms",
            "50",
            "--json",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).lines().count(), 2);

    // Unreachable server: exit code 1.
    let out = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .args(["--url", "redis://127.0.0.1:1/", "inspect", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
