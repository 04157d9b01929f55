//! Durations, clocks and runtimes the tests share: [`ms`], [`secs`], [`server_ms`] (a
//! redis-server's own clock) and [`current_thread`] (a runtime of its own, to shut down).

use std::time::Duration;

use super::RedisServer;

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The server's clock in ms.
pub fn server_ms(server: &RedisServer) -> u64 {
    let t = server.cli(&["TIME"]);
    let mut parts = t.split_whitespace();
    let secs: u64 = parts.next().expect("secs").parse().expect("secs");
    let micros: u64 = parts.next().expect("micros").parse().expect("micros");
    secs * 1000 + micros / 1000
}

/// A current-thread runtime with time and I/O, for tests that shut a runtime down.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A multi-thread runtime of `workers` threads with time and I/O.
pub fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Drops a runtime on a plain thread (a runtime cannot be dropped inside another's context).
pub async fn drop_runtime(rt: tokio::runtime::Runtime) {
    tokio::task::spawn_blocking(move || drop(rt))
        .await
        .expect("drop runtime");
}
