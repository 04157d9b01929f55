//! Runs one behavioural test body against both backends: a real redis-server started for
//! the test, and the in-memory store; and the waiting helpers every test shares
//! ([`EVENTUALLY`], [`eventually`], [`join`], [`until_waiters`]), whatever its backend.
//!
//! ```ignore
//! async fn two_holders_never_overlap(b: Backend) { let c = b.client(0); ... }
//! both_backends!(two_holders_never_overlap);
//! ```

use std::sync::Arc;
use std::time::Duration;

use redis_locks::testing::store::{MemoryStore, RedisStore, Store};
use redis_locks::LockClient;

use super::RedisServer;

/// Several independent clients on one backend (separate connections on Redis).
pub struct Backend {
    /// The server, kept alive for the test (None on the in-memory backend or with REDIS_URL).
    pub server: Option<RedisServer>,
    url: Option<String>,
    memory: Option<Arc<MemoryStore>>,
    /// `"redis"` or `"memory"`.
    pub kind: &'static str,
}

impl Backend {
    /// A fresh private redis-server (or REDIS_URL's server when set).
    pub fn redis() -> Backend {
        let (server, url) = super::server_url();
        Backend {
            server,
            url: Some(url),
            memory: None,
            kind: "redis",
        }
    }

    /// One shared in-memory store.
    pub fn memory() -> Backend {
        Backend {
            server: None,
            url: None,
            memory: Some(Arc::new(MemoryStore::new())),
            kind: "memory",
        }
    }

    /// The server's address (`None` in memory).
    pub fn url(&self) -> Option<String> {
        self.url.clone()
    }

    /// A new client (its own connection) with default settings.
    pub async fn client(&self) -> LockClient {
        self.client_with(LockClient::builder()).await
    }

    /// A new client whose holds take `lease` (otherwise default settings).
    pub async fn leased(&self, lease: Duration) -> LockClient {
        self.client_with(LockClient::builder().lease(lease)).await
    }

    /// A new client from `builder`.
    pub async fn client_with(&self, builder: redis_locks::LockClientBuilder) -> LockClient {
        match (&self.url, &self.memory) {
            (Some(url), _) => builder
                .connect(url)
                .await
                .unwrap_or_else(|e| panic!("connect to {url}: {e}")),
            (None, Some(store)) => builder
                .store(store.clone())
                .unwrap_or_else(|e| panic!("in-memory client: {e}")),
            (None, None) => unreachable!("a backend is redis or memory"),
        }
    }

    /// A new store (its own connection on Redis; the shared store in memory), to wrap before
    /// handing it to `LockClient::builder().store(..)`.
    pub async fn store(&self) -> Arc<dyn Store> {
        match (&self.url, &self.memory) {
            (Some(url), _) => Arc::new(
                RedisStore::connect(url)
                    .await
                    .unwrap_or_else(|e| panic!("connect to {url}: {e}")),
            ),
            (None, Some(store)) => store.clone(),
            (None, None) => unreachable!("a backend is redis or memory"),
        }
    }

    /// Runs `redis-cli` against the server (panics on the memory backend).
    pub fn cli(&self, args: &[&str]) -> String {
        self.server
            .as_ref()
            .expect("cli needs a private redis-server")
            .cli(args)
    }

    /// True on the in-memory backend.
    pub fn is_memory(&self) -> bool {
        self.memory.is_some()
    }
}

/// Generous bound for "eventually" in tests on shared 2-core machines (behaviour, not speed).
pub const EVENTUALLY: Duration = Duration::from_secs(20);

/// Polls `check` every 10 ms until it holds; panics with `what` after [`EVENTUALLY`].
///
/// `check` is an async closure (`async || ..`) or a closure returning a future
/// (`|| async { .. }`); a plain condition reads `async || flag.load(..)`. Where a step needs a
/// tighter bound than [`EVENTUALLY`], wrap the call in `tokio::time::timeout`.
pub async fn eventually(what: &str, check: impl AsyncFnMut() -> bool) {
    eventually_within(EVENTUALLY, what, check).await;
}

/// [`eventually`] with another bound: for a step whose own retries can take longer than
/// [`EVENTUALLY`] on a loaded machine (a test's set-up, not what it checks).
pub async fn eventually_within(bound: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + bound;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < give_up,
            "not within {bound:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Awaits a task with the generous bound, panicking on timeout or on the task's panic.
pub async fn join<T>(what: &str, task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .unwrap_or_else(|_| panic!("not within {EVENTUALLY:?}: {what}"))
        .unwrap_or_else(|e| panic!("{what}: task failed: {e}"))
}

/// `fut` (a task, or a call that returns a `Result`) within `limit`, unwrapped: panics with
/// `what` on a timeout, an error or the task's panic.
pub async fn within_ok<T, E: std::fmt::Debug>(
    limit: Duration,
    what: &str,
    fut: impl std::future::IntoFuture<Output = Result<T, E>>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Err(_) => panic!("not within {limit:?}: {what}"),
        Ok(Err(e)) => panic!("{what}: {e:?}"),
        Ok(Ok(value)) => value,
    }
}

/// Polls `inspect` until the lock shows exactly `n` live waiters, and returns that state.
///
/// `inspect` is any inspection of the lock, e.g. `|| lock.inspect()` for any handle kind, or
/// one through another client; the caller that needs the instant the waiters first showed
/// reads `Instant::now()` right after.
pub async fn until_waiters(
    n: usize,
    mut inspect: impl AsyncFnMut() -> redis_locks::Result<redis_locks::LockInfo>,
) -> redis_locks::LockInfo {
    let give_up = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let info = inspect().await.expect("inspect");
        if info.waiters.len() == n {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "not {n} waiters within {EVENTUALLY:?}: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
