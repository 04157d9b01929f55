//! Test harness: runs REAL `redis-server` processes on free loopback ports ([`server`]:
//! [`RedisServer`], [`RedisCluster`], [`server_url`]; `REDIS_LOCKS_SERVER` names another
//! binary, e.g. a `valkey-server`), and the helpers the tests share.
//!
//! A crate of its own (`redis-locks-test-support`), compiled once for every test binary;
//! an integration test includes `tests/support/mod.rs` with `mod support;`, which
//! re-exports it and checks the features the tests are built with.
//!
//! * [`backend`]: one test body on both backends, and the waiting helpers (`eventually`,
//!   `until_waiters`, `join`, `EVENTUALLY`).
//! * [`queue`]: planted dead waiters and inspect's shortened tokens, for ticket queues.
//! * [`replies`]: comparing two stores' replies, errors by classification (the model checks).
//! * [`faulty`], [`proxy`], [`fenced`], [`history`]: fault injection, a TCP proxy, a fenced
//!   resource and the grant history checks ([`proxy::quick`]: short timeouts behind a proxy).
//! * [`time`]: `ms`, `secs`, a server's clock, a current-thread runtime.
//! * [`exit`]: a deployment's guards and waits at the end of their runtime.
//! * [`honest`]: a guard never trusts past the server's lease (`assert_honest`).
//! * [`waits`]: `within` a tight bound; idle queues and free lease locks.
//! * [`observe`]: reading an election observer with bounds.
//! * [`fake_server`]: a fake server on loopback that lacks one capability (the connect checks).
//! * [`rng`]: a small deterministic generator for randomized workloads.
//! * [`warnings`]: capturing the library's warnings.
//! * [`model_rig`]: a redis-server and a runtime for the model checks.
//! * [`env_u32`], [`serial`], [`poll_once`]: case counts from the environment; one test at
//!   a time; one poll of a future.
//! * [`sim_store`]: the fault-injecting connection of the client-side simulations.

#![allow(dead_code)]

pub mod backend;
pub mod exit;
pub mod fake_server;
pub mod faulty;
pub mod fenced;
pub mod history;
pub mod honest;
pub mod kinds;
pub mod late;
pub mod model_rig;
pub mod observe;
pub mod proxy;
pub mod queue;
pub mod quick;
pub mod replies;
pub mod rng;
mod server;
pub mod sim_store;
pub mod time;
pub mod waits;
pub mod warnings;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use server::{
    server_binary, server_url, signal, RedisCluster, RedisSentinels, RedisServer, Stopped,
};

/// The number in the environment variable `name` (a case count), `default` when it is unset.
pub fn env_u32(name: &str, default: u32) -> u32 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}")),
        Err(_) => default,
    }
}

/// Planted bugs (and seeds) are process-wide: tests that plant one run one at a time, each
/// holding this (`cargo test` runs a file's tests on threads of one process).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads a `try_*` outcome as "granted or not": `Some(guard)` when granted, `None` when the
/// lock was held ([`redis_locks::Error::is_would_block`]); any other error panics with `what`.
#[allow(dead_code)]
pub trait Granted<G> {
    /// See the trait.
    fn granted(self, what: &str) -> Option<G>;
}

impl<G> Granted<G> for redis_locks::Result<G> {
    fn granted(self, what: &str) -> Option<G> {
        match self {
            Ok(guard) => Some(guard),
            Err(e) if e.is_would_block() => None,
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Polls `fut` once; `true` if it completed.
pub async fn poll_once<F: std::future::Future>(fut: &mut std::pin::Pin<Box<F>>) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_ready())).await
}

/// Polls `fut` up to `polls` times, 10 ms apart, then drops it (cancelled at that poll);
/// `true` if it completed.
pub async fn completes_within<F: std::future::Future>(polls: usize, fut: F) -> bool {
    let mut fut = Box::pin(fut);
    for _ in 0..polls {
        if poll_once(&mut fut).await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

/// A try's outcome as `Ok(true)` (granted; the guard dropped at once), `Ok(false)` (held,
/// [`redis_locks::Error::is_would_block`]) or the error.
pub fn tried<G>(outcome: redis_locks::Result<G>) -> redis_locks::Result<bool> {
    match outcome {
        Ok(_) => Ok(true),
        Err(e) if e.is_would_block() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a `try_*` was refused because the lock is held
/// ([`redis_locks::Error::is_would_block`]); a grant panics.
pub fn would_block<G: std::fmt::Debug>(tried: redis_locks::Result<G>) -> bool {
    tried
        .expect_err("a try that must be refused")
        .is_would_block()
}

/// A detached Mutex hold of `name` in `c` with `lease`.
pub async fn detached_mutex(
    c: &redis_locks::LockClient,
    name: &str,
    lease: std::time::Duration,
) -> redis_locks::HoldId {
    let guard = c.mutex(name).lease(lease).lock().await.expect("lock");
    guard.detach()
}
