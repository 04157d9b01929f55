//! The redis-servers this bench starts (the single node unless REDIS_URL is set): the
//! integration tests' launcher (a private `redis-server` on a free loopback port, persistence
//! off, in its own temporary directory, retried on port races, killed by its handle on drop).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex as StdMutex;

#[allow(dead_code)] // the bench uses part of the tests' launcher
#[path = "../../tests/support/server.rs"]
mod server;

#[cfg(feature = "cluster")]
pub use server::RedisCluster;
pub use server::RedisServer;

/// Every server this bench started, `(pid, dir)`, for the Ctrl-C handler.
pub static STARTED: StdMutex<Vec<(u32, PathBuf)>> = StdMutex::new(Vec::new());

/// Servers the bench started (`RedisServer` or `RedisCluster`), listed in [`STARTED`] while
/// they live. Dropping forgets their pids first (the Ctrl-C handler must never signal a
/// reused pid), then the launcher kills each process by its own handle.
pub struct Started<T> {
    pub servers: T,
    pub pids: Vec<u32>,
}

/// Lists `nodes` in [`STARTED`]; returns their pids.
pub fn register<'a>(nodes: impl IntoIterator<Item = &'a RedisServer>) -> Vec<u32> {
    let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    nodes
        .into_iter()
        .map(|node| {
            started.push((node.pid(), node.dir().to_path_buf()));
            node.pid()
        })
        .collect()
}

impl<T> std::ops::Deref for Started<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.servers
    }
}

impl<T> Drop for Started<T> {
    fn drop(&mut self) {
        STARTED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(p, _)| !self.pids.contains(p));
    }
}

/// A private `redis-server` on a free loopback port.
pub fn start_server(binary: Option<&str>) -> Started<RedisServer> {
    let server = binary.map_or_else(RedisServer::start, RedisServer::start_binary);
    let pids = register([&server]);
    Started {
        servers: server,
        pids,
    }
}

/// A private server started under callgrind (`--instructions`): `binary`, or the harness's
/// default, through a wrapper script in the server's own temporary folder; the bench's
/// instruction counts then read this server.
pub fn start_under_callgrind(binary: Option<&str>) -> crate::BoxResult<Started<RedisServer>> {
    let dir = std::env::temp_dir().join(format!("rlbench-callgrind-{}", std::process::id()));
    let binary = binary.map_or_else(server::server_binary, str::to_owned);
    let wrapper = crate::callgrind::wrapper(&binary, &dir)?;
    let started = start_server(Some(&wrapper));
    crate::callgrind::activate(started.pid(), &dir);
    Ok(started)
}

/// Ctrl-C: stops the servers this bench started (by their pids) before exiting.
pub fn stop_on_ctrl_c() {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let started = STARTED.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for (pid, dir) in started {
                let _ = Command::new("kill").arg(pid.to_string()).status();
                let _ = std::fs::remove_dir_all(&dir);
            }
            std::process::exit(130);
        }
    });
}
