//! The workloads. Each returns the rows of one run.

pub mod contended;
pub mod election;
pub mod fifo;
pub mod memory;
pub mod multi;
pub mod multi_node;
pub mod parallel;
pub mod rate;
pub mod renewals;
pub mod semaphore;
pub mod server_cost;
pub mod server_hot;
pub mod uncontended;
pub mod writer_wait;

use std::time::Duration;

use crate::env::Env;
use crate::row::Row;
use crate::BoxResult;
use contended::contended;
use election::election;
use fifo::fifo;
use memory::memory;
use multi::multi;
use multi_node::{cluster, quorum, Extra};
use parallel::parallel;
use rate::rate;
use renewals::renewals;
use semaphore::semaphore;
use server_cost::server_cost;
use server_hot::server_hot;
use uncontended::uncontended;
use writer_wait::writer_wait;

/// Every workload, in the order they run.
pub const WORKLOADS: &[&str] = &[
    "uncontended",
    "parallel",
    "contended_mutex",
    "contended_fair",
    "writer_wait",
    "fifo",
    "fifo_30ms",
    "semaphore",
    "server_cost",
    "server_hot",
    "renewals",
    "memory",
    "cluster",
    "quorum",
    "multi",
    "election",
    "rate",
];

pub async fn run_once(env: &Env, extra: &Extra, workload: &str, run: usize) -> BoxResult<Vec<Row>> {
    match workload {
        "uncontended" => uncontended(env, run).await,
        "parallel" => parallel(env, run).await,
        "contended_mutex" => contended(env, run, false).await,
        "contended_fair" => contended(env, run, true).await,
        "writer_wait" => writer_wait(env, run).await,
        "fifo" => fifo(env, run, "fifo", Duration::from_millis(5)).await,
        "fifo_30ms" => fifo(env, run, "fifo_30ms", Duration::from_millis(30)).await,
        "semaphore" => semaphore(env, run).await,
        "server_cost" => server_cost(env, run).await,
        "server_hot" => server_hot(env, run).await,
        "renewals" => renewals(env, run).await,
        "memory" => memory(env, run).await,
        "cluster" => cluster(env, extra, run).await,
        "quorum" => quorum(env, extra, run).await,
        "multi" => multi(env, run).await,
        "election" => election(env, run).await,
        "rate" => rate(env, run).await,
        other => Err(format!("unknown workload {other}").into()),
    }
}
