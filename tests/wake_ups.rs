//! Wake-up subscriptions racing waiters, on a real redis-server behind a proxy: a SUBSCRIBE or
//! UNSUBSCRIBE whose reply comes after the response timeout, and channels whose waiters come
//! and go. Waiters poll only every 20 s here, so one that misses its wake-up is told apart
//! from one that got it: every hand-off must come within a few seconds.

mod support;
use support::time::{ms, secs};

use std::time::Duration;

use redis_locks::{LockClient, RedisConfig};
use tokio::time::Instant;

use support::proxy::Proxy;
use support::RedisServer;

const RESPONSE: Duration = Duration::from_millis(500);
/// Long, so a waiter that misses its wake-up is told apart from one that got it.
const RETRY: Duration = Duration::from_secs(20);
const LEASE: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(3);

async fn waiter_client(url: &str) -> LockClient {
    LockClient::builder()
        .redis_config(RedisConfig {
            response_timeout: RESPONSE,
            connect_timeout: RESPONSE,
            ..RedisConfig::default()
        })
        .lease(LEASE)
        .retry_interval(RETRY)
        .connect(url)
        .await
        .expect("connect")
}

fn numsub(server: &RedisServer, channel: &str) -> String {
    let out = server.cli(&["PUBSUB", "NUMSUB", channel]);
    out.lines().nth(1).unwrap_or("").trim().to_owned()
}

/// Hands `name` from `holder` to a waiter of `waiter` and says how long the waiter took
/// after the release.
async fn hand_off(
    holder: &LockClient,
    waiter: &LockClient,
    name: &str,
    server: &RedisServer,
) -> Duration {
    let g = holder.rwlock(name).write().await.expect("holder write");
    let w = waiter.clone();
    let n = name.to_owned();
    let task = tokio::spawn(async move {
        let got = w.rwlock(&n).read().timeout(secs(25)).await;
        (got, Instant::now())
    });
    tokio::time::sleep(ms(700)).await;
    let channel = waiter.keys(name).expect("keys").channel();
    eprintln!(
        "{name}: subscribers while waiting: {}",
        numsub(server, &channel)
    );
    let released_at = Instant::now();
    assert!(g.release().await.expect("release"));
    let (got, at) = support::backend::join("waiter", task).await;
    let guard = got.expect("waiter served");
    guard.release().await.expect("release");
    at.saturating_duration_since(released_at)
}

/// An idle channel's UNSUBSCRIBE times out (its reply does not come within the response
/// timeout) but the server applies it later. The next waiter on that lock must still be
/// woken by the release (a hub that kept believing the channel subscribed would not subscribe
/// it again, and the waiter would be served only at its 20 s retry interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn later_waiters_are_woken_after_an_unsubscribe_timed_out() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let holder = LockClient::connect(&server.url()).await.expect("connect");
    let waiter = waiter_client(&proxy.url()).await;
    let name = "deaf";
    let channel = waiter.keys(name).expect("keys").channel();

    let first = hand_off(&holder, &waiter, name, &server).await;
    assert!(first < PROMPTLY, "first hand-off took {first:?}");
    assert_eq!(numsub(&server, &channel), "1", "subscribed while waiting");

    // The channel goes idle; its UNSUBSCRIBE (after the 5 s linger) stalls past the response
    // timeout, then reaches the server.
    proxy.stall_requests_from(b"UNSUBSCRIBE");
    tokio::time::sleep(ms(5000) + RESPONSE * 3).await;
    proxy.resume();
    tokio::time::sleep(ms(300)).await;
    eprintln!(
        "numsub after the late UNSUBSCRIBE: {}",
        numsub(&server, &channel)
    );

    eprintln!("first hand-off {first:?}");
    let second = hand_off(&holder, &waiter, name, &server).await;
    eprintln!("numsub during/after second: {}", numsub(&server, &channel));
    eprintln!("second hand-off {second:?}");
    assert!(
        second < PROMPTLY,
        "a waiter after a timed-out UNSUBSCRIBE was served {second:?} after the release \
         (retry interval {RETRY:?}): it missed its wake-up"
    );
}

/// A SUBSCRIBE stalls past the response timeout (then reaches the server): the waiter falls
/// back to polling; once the release comes it must still be served promptly (its channel is
/// subscribed on the server by then), not at its 20 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_behind_a_timed_out_subscribe_is_served_promptly() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let holder = LockClient::connect(&server.url()).await.expect("connect");
    let waiter = waiter_client(&proxy.url()).await;
    let name = "late-sub";
    let channel = waiter.keys(name).expect("keys").channel();
    let g = holder.rwlock(name).write().await.expect("holder write");
    proxy.stall_requests_from(b"SUBSCRIBE");
    let w = waiter.clone();
    let task = tokio::spawn(async move {
        let got = w.rwlock(name).read().timeout(secs(25)).await;
        (got, Instant::now())
    });
    tokio::time::sleep(RESPONSE * 3).await;
    proxy.resume();
    tokio::time::sleep(ms(1500)).await;
    eprintln!("subscribers while waiting: {}", numsub(&server, &channel));
    let released_at = Instant::now();
    assert!(g.release().await.expect("release"));
    let (got, at) = support::backend::join("waiter", task).await;
    got.expect("served").release().await.expect("release");
    let took = at.saturating_duration_since(released_at);
    eprintln!("hand-off {took:?}");
    assert!(took < PROMPTLY, "served {took:?} after the release");
}

/// Channel churn: short waiters come and go on many locks while one patient waiter per lock
/// waits; every patient waiter is served promptly after its lock's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn churning_waiters_do_not_deafen_patient_ones() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.expect("connect");
    let waiter = waiter_client(&server.url()).await;
    let names: Vec<String> = (0..8).map(|i| format!("churn-{i}")).collect();
    for round in 0..3 {
        let mut guards = Vec::new();
        for n in &names {
            guards.push(holder.rwlock(n).write().await.expect("write"));
        }
        // Churn: quick timed waits that leave, on every lock, spread over > LINGER.
        let mut churn = Vec::new();
        for (k, n) in names.iter().enumerate() {
            let (w, n) = (waiter.clone(), n.clone());
            churn.push(tokio::spawn(async move {
                for j in 0..12u64 {
                    let _ = w
                        .rwlock(&n)
                        .read()
                        .timeout(ms(20 + (j * 13 + k as u64 * 7) % 60))
                        .await;
                    tokio::time::sleep(ms((j * 97 + k as u64 * 31) % 900)).await;
                }
            }));
        }
        tokio::time::sleep(ms(4500 + round * 300)).await;
        let mut patient = Vec::new();
        for n in &names {
            let (w, n) = (waiter.clone(), n.clone());
            patient.push(tokio::spawn(async move {
                let got = w.rwlock(&n).read().timeout(secs(25)).await;
                (got, Instant::now())
            }));
        }
        tokio::time::sleep(ms(1500)).await;
        let released_at = Instant::now();
        for g in guards {
            g.release().await.expect("release");
        }
        for (n, p) in names.iter().zip(patient) {
            let (got, at) = support::backend::join("patient", p).await;
            got.expect("served").release().await.expect("release");
            let took = at.saturating_duration_since(released_at);
            assert!(
                took < PROMPTLY,
                "round {round} {n}: served {took:?} after the release"
            );
        }
        for c in churn {
            c.await.expect("churn");
        }
    }
}
