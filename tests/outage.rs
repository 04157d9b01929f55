//! Outages: Redis killed for longer than 10 s under each primitive, then restarted on the same
//! port (empty: persistence is off, as after a failover to a replica that had nothing).
//!
//! While Redis is down:
//! - a wait with `.timeout(d)` returns by `d` plus one bounded round trip and says the cause
//!   (`is_connection()`, never `is_timeout()`);
//! - `try_*` is one attempt: it fails with `is_connection()` within the response timeout;
//! - a `lock()` without a deadline keeps waiting (its outage budget is longer than the
//!   outage) and is served once Redis is back, with a guard that is held.
//!
//! One test function per primitive, so nextest runs them side by side.

mod support;
use support::backend::within_ok;
use support::quick::Quick;
use support::time::{ms, secs};

use std::time::Duration;

use redis_locks::{LockClient, RedisConfig};
use tokio::time::Instant;

use support::RedisServer;

/// Longer than 10 s, as the outage this library must ride through.
const OUTAGE: Duration = Duration::from_secs(11);
/// The response timeout of the clients (a bounded round trip).
const RESPONSE: Duration = Duration::from_millis(500);

async fn client(server: &RedisServer) -> LockClient {
    LockClient::builder()
        .redis_config(RedisConfig {
            response_timeout: RESPONSE,
            connect_timeout: RESPONSE,
            ..RedisConfig::default()
        })
        .outage_budget(secs(60))
        .connect(&server.url())
        .await
        .expect("connect")
}

/// What one primitive is asked during the outage.
#[derive(Clone, Copy, Debug)]
enum Primitive {
    Mutex,
    Read,
    Write,
    FairLock,
    Semaphore,
}

impl Primitive {
    /// A wait (no deadline or `timeout`) for a hold; `Ok(true)` when the guard is held.
    async fn wait(self, c: &LockClient, timeout: Option<Duration>) -> redis_locks::Result<bool> {
        let name = format!("outage-{self:?}");
        macro_rules! held {
            ($handle:expr, $method:ident) => {{
                let handle = $handle;
                let acquiring = handle.$method();
                let guard = match timeout {
                    Some(t) => acquiring.timeout(t).await?,
                    None => acquiring.await?,
                };
                let held = guard.is_held();
                guard.release().await?;
                Ok(held)
            }};
        }
        match self {
            Primitive::Mutex => held!(c.mutex(&name), lock),
            Primitive::Read => held!(c.rwlock(&name), read),
            Primitive::Write => held!(c.rwlock(&name), write),
            Primitive::FairLock => held!(c.fair_lock(&name), lock),
            Primitive::Semaphore => held!(c.semaphore(&name, 2), acquire),
        }
    }

    /// One `try_*` attempt; `Ok(())` when granted (and released again).
    async fn try_once(self, c: &LockClient) -> redis_locks::Result<()> {
        let name = format!("outage-try-{self:?}");
        match self {
            Primitive::Mutex => c.mutex(&name).try_lock().await.map(drop),
            Primitive::Read => c.rwlock(&name).try_read().await.map(drop),
            Primitive::Write => c.rwlock(&name).try_write().await.map(drop),
            Primitive::FairLock => c.fair_lock(&name).try_lock().await.map(drop),
            Primitive::Semaphore => c.semaphore(&name, 2).try_acquire().await.map(drop),
        }
    }
}

async fn rides_through_an_outage(p: Primitive) {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    // Everything works before.
    assert!(p.wait(&c, None).await.expect("before the outage"));

    server.kill();
    let down_since = Instant::now();

    // A patient waiter, started during the outage.
    let patient = {
        let c = c.clone();
        tokio::spawn(async move { p.wait(&c, None).await })
    };

    // A wait with a deadline returns by it, plus one bounded round trip, and names the cause.
    let started = Instant::now();
    let err = p.wait(&c, Some(ms(300))).await.expect_err("Redis is down");
    let took = started.elapsed();
    assert!(
        err.is_connection() && !err.is_timeout(),
        "{p:?}: Redis down must read as a connection error, not a busy lock: {err:?}"
    );
    assert!(
        took <= ms(300) + RESPONSE * 2,
        "{p:?}: the timed wait took {took:?}"
    );

    // `try_*` is one attempt, bounded by the response timeout.
    let started = Instant::now();
    let err = p.try_once(&c).await.expect_err("Redis is down");
    let took = started.elapsed();
    assert!(err.is_connection(), "{p:?}: {err:?}");
    assert!(took <= RESPONSE * 3, "{p:?}: try took {took:?}");

    tokio::time::sleep(OUTAGE.saturating_sub(down_since.elapsed())).await;
    assert!(
        !patient.is_finished(),
        "{p:?}: the waiter gave up during the outage"
    );
    server.restart();

    let held = within_ok(secs(30), "served within 30 s of the restart", patient)
        .await
        .expect("the waiter that outlived the outage is granted");
    assert!(held, "{p:?}: its guard is held");
    // And the client works as before.
    assert!(p.wait(&c, None).await.expect("after the outage"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_rides_through_an_outage() {
    rides_through_an_outage(Primitive::Mutex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_read_rides_through_an_outage() {
    rides_through_an_outage(Primitive::Read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_write_rides_through_an_outage() {
    rides_through_an_outage(Primitive::Write).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_rides_through_an_outage() {
    rides_through_an_outage(Primitive::FairLock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_rides_through_an_outage() {
    rides_through_an_outage(Primitive::Semaphore).await;
}

/// The outage budget bounds a wait without deadline: past it, the waiter gives up with a
/// connection error rather than waiting forever on a Redis that does not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_gives_up_after_its_outage_budget() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    server.kill();
    let started = Instant::now();
    let err = c
        .mutex("budget")
        .outage_budget(secs(2))
        .lock()
        .await
        .expect_err("Redis stays down");
    let took = started.elapsed();
    assert!(err.is_connection(), "{err:?}");
    assert!(
        took >= secs(2) && took <= secs(2) + RESPONSE * 4,
        "gave up after {took:?}"
    );
}

/// Subscriptions stall (a server that stops answering just as waiters subscribe): every timed
/// wait still ends by its deadline plus one response timeout, however many waiters on other
/// locks subscribe through the same client at once: the single lock, the multi-lock and the
/// election campaign.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timed_waits_end_by_their_deadline_while_subscriptions_stall() {
    const WAIT: Duration = Duration::from_millis(300);
    // Scheduling slack on a loaded 2-core machine; one serial SUBSCRIBE too many is 500 ms,
    // and the last of 8 serial ones would be 3.5 s late.
    const SLACK: Duration = Duration::from_millis(1000);
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let holder = LockClient::connect(&server.url()).await.expect("connect");
    let waiter = LockClient::builder()
        .redis_config(RedisConfig {
            response_timeout: RESPONSE,
            connect_timeout: RESPONSE,
            ..RedisConfig::default()
        })
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let mut held = Vec::new();
    for i in 0..6 {
        held.push(holder.locked(&format!("stall-{i}")).await);
    }
    let _multi_part = holder.mutex("stall-multi-b").lock().await.expect("lock");
    let _leader = holder.lead("stall-election", "holder").await;
    proxy.stall_requests_from(b"SUBSCRIBE");

    let started = Instant::now();
    let mut waits: Vec<tokio::task::JoinHandle<(String, bool, Duration)>> = Vec::new();
    for i in 0..6 {
        let c = waiter.clone();
        waits.push(tokio::spawn(async move {
            let got = c.mutex(&format!("stall-{i}")).lock().timeout(WAIT).await;
            (format!("mutex {i}"), got.is_ok(), started.elapsed())
        }));
    }
    let c = waiter.clone();
    waits.push(tokio::spawn(async move {
        let multi = c.multi_lock(["stall-multi-a", "stall-multi-b"]);
        let got = multi.lock().timeout(WAIT).await;
        ("multi-lock".to_owned(), got.is_ok(), started.elapsed())
    }));
    let c = waiter.clone();
    waits.push(tokio::spawn(async move {
        let election = c.election("stall-election");
        let got = election.campaign("waiter").timeout(WAIT).await;
        ("campaign".to_owned(), got.is_ok(), started.elapsed())
    }));
    for wait in waits {
        let (what, granted, took) = support::backend::join("timed wait", wait).await;
        assert!(!granted, "{what}: granted a lock that stayed held");
        assert!(
            took <= WAIT + RESPONSE + SLACK,
            "{what}: a {WAIT:?} wait returned after {took:?} (response timeout {RESPONSE:?})"
        );
    }
    proxy.resume();
}
