//! Benchmarks: every speed claim of redis-locks measured next to the limit that bounds it, in
//! one run. See `docs/BENCHMARKS.md` for a run's table and what each row means.
//!
//! ```sh
//! cargo run --release -p redis-locks-bench                   # readable table
//! cargo run --release -p redis-locks-bench -- --json         # one JSON object per line
//! cargo run --release -p redis-locks-bench -- --markdown     # the table as Markdown
//! cargo run --release -p redis-locks-bench -- --only fifo    # one workload
//! cargo run --release -p redis-locks-bench -- --only uncontended,contended_mutex,fifo \
//!     --server redis-server --server "$(.ci/fetch-valkey)"   # those rows on Redis, then Valkey
//! cargo run --release -p redis-locks-bench --features cluster   # with the `cluster` workload
//! cargo run --release -p redis-locks-bench -- --only server_hot --instructions   # server work
//! ```
//!
//! The crate depends on redis-locks with its `testing` feature (the server-cost rows call the
//! store's protocol steps directly); its own `cluster` feature turns on `redis-locks/cluster`.
//!
//! Starts its own `redis-server` on a free loopback port (persistence off, in a temporary
//! directory, killed at exit) unless `REDIS_URL` is set; with `--server PATH` (given once per
//! server) it starts each of those binaries in turn and prints a table for each (the
//! `quorum` and `cluster` workloads' extra servers are the harness's default binary). With `REDIS_URL`, keys live under a
//! per-run prefix and are deleted afterwards; `server_cost` reads the slow log (and sets its
//! threshold to 0 for the duration, then restores it), so other clients' commands on that server
//! make it fail rather than blur it.
//!
//! Every workload runs three times; each row is the median of the three runs (the baseline
//! too, and the ratio is median value / median baseline). Baselines are measured in the same
//! run, on the same connection as the locks: PING and a trivial EVALSHA go through the
//! `RedisStore`'s own multiplexed connection (`RedisStore::query`). The uncontended rows also
//! have rslock's lock + unlock pair as a baseline, on the same server (its own connection).
//!
//! Two workloads start more servers of their own (also with `REDIS_URL`, whose server is then
//! their single-node baseline): `cluster` a local 3-master Redis Cluster (`redis-server
//! --cluster-enabled yes` + `redis-cli --cluster create`; it needs `--features cluster` and is
//! skipped, saying so, without it), `quorum` three plain servers for `LockClient::quorum`.

mod args;
mod callgrind;
mod env;
mod output;
mod prim;
mod probe;
mod row;
mod run;
mod servers;
mod stats;
mod workloads;

use std::error::Error as StdError;

use redis_locks::testing::store::RedisStore;

type BoxError = Box<dyn StdError + Send + Sync>;
type BoxResult<T> = std::result::Result<T, BoxError>;

#[tokio::main]
async fn main() -> BoxResult<()> {
    if let Ok(spec) = std::env::var(workloads::election::LEADER_ENV) {
        return workloads::election::leader_process(&spec).await;
    }
    let args = args::parse_args()?;
    servers::stop_on_ctrl_c();
    if !args.servers.is_empty() {
        if std::env::var("REDIS_URL").is_ok_and(|url| !url.is_empty()) {
            return Err("--server starts its own servers: unset REDIS_URL".into());
        }
        // One server after another, each with its own table: what moving costs, side by side.
        for binary in &args.servers {
            let server = if args.instructions {
                servers::start_under_callgrind(Some(binary))?
            } else {
                servers::start_server(Some(binary))
            };
            run::bench(&args, &server.url()).await?;
            println!();
        }
        return Ok(());
    }
    let (server, url) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() && args.instructions => {
            return Err("--instructions starts its own server: unset REDIS_URL".into());
        }
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            let s = if args.instructions {
                servers::start_under_callgrind(None)?
            } else {
                servers::start_server(None)
            };
            let url = s.url();
            (Some(s), url)
        }
    };
    let result = run::bench(&args, &url).await;
    if server.is_none() {
        // A shared server: leave nothing behind under this run's prefix.
        if let Ok(raw) = RedisStore::connect(&url).await {
            env::cleanup_prefix(&raw, &format!("rlbench{}", std::process::id())).await;
        }
    }
    drop(server);
    result
}
