//! Workloads on servers of their own: `cluster` (a local Redis Cluster) and `quorum` (three
//! plain servers), each next to the single node.

use std::time::Instant;

use redis_locks::{LockClient, Mutex};
use tokio::task::JoinSet;

use crate::env::Env;
use crate::prim::{pairs, Prim};
use crate::row::Row;
#[cfg(feature = "cluster")]
use crate::servers::{register, RedisCluster};
use crate::servers::{start_server, RedisServer, Started};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

/// Servers and clients that only the `cluster` and `quorum` workloads need, started before
/// their first run and stopped when the bench ends.
#[derive(Default)]
pub struct Extra {
    pub cluster: Option<LockClient>,
    pub quorum: Option<LockClient>,
    /// Killed when `Extra` is dropped, after the clients (fields drop in order).
    pub servers: Vec<Started<RedisServer>>,
    #[cfg(feature = "cluster")]
    pub cluster_nodes: Option<Started<RedisCluster>>,
}

/// A local 3-master Redis Cluster (no replicas), once every node reports `cluster_state:ok`
/// and knows the others. Returns its URLs.
#[cfg(feature = "cluster")]
pub fn start_cluster(extra: &mut Extra) -> Vec<String> {
    let cluster = RedisCluster::start(3, 0);
    let pids = register(cluster.nodes());
    let cluster = extra.cluster_nodes.insert(Started {
        servers: cluster,
        pids,
    });
    cluster.urls()
}

/// Prepares what `workload` needs beyond the single node. `Ok(false)`: skip the workload.
pub async fn prepare(workload: &str, env: &Env, extra: &mut Extra) -> BoxResult<bool> {
    match workload {
        "cluster" => {
            #[cfg(feature = "cluster")]
            {
                let urls = start_cluster(extra);
                let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
                let client = LockClient::builder()
                    .prefix(&env.prefix)
                    .cluster(&urls)
                    .await?;
                extra.cluster = Some(client);
                Ok(true)
            }
            #[cfg(not(feature = "cluster"))]
            {
                let _ = (env, extra);
                eprintln!(
                    "bench: cluster skipped: LockClient::cluster needs the `cluster` feature; run \
                     `cargo run --release -p redis-locks-bench --features cluster`"
                );
                Ok(false)
            }
        }
        "quorum" => {
            let mut urls = Vec::new();
            for _ in 0..3 {
                let s = start_server(None);
                urls.push(s.url());
                extra.servers.push(s);
            }
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            let client = LockClient::builder()
                .prefix(&env.prefix)
                .quorum(&urls)
                .await?;
            extra.quorum = Some(client);
            Ok(true)
        }
        _ => Ok(true),
    }
}

/// `tasks` tasks, task `t` cycling over the names `t, t + tasks, ...` (`names` in all, so no
/// two tasks share a name), `pairs` Mutex acquire + release pairs each. Returns pairs per
/// second and the sorted pair latencies (ms).
pub async fn many_names(
    client: &LockClient,
    tag: &str,
    tasks: usize,
    names: usize,
    pairs: usize,
) -> BoxResult<(f64, Vec<f64>)> {
    let mut set = JoinSet::new();
    let start = Instant::now();
    for t in 0..tasks {
        let mine: Vec<Mutex> = (t..names)
            .step_by(tasks)
            .map(|n| client.mutex(&format!("{tag}-{n}")))
            .collect();
        set.spawn(async move {
            let mut samples = Vec::with_capacity(pairs);
            for k in 0..pairs {
                let t = Instant::now();
                mine[k % mine.len()].lock().await?.release().await?;
                samples.push(ms(t.elapsed()));
            }
            Ok::<Vec<f64>, redis_locks::Error>(samples)
        });
    }
    let mut samples = Vec::with_capacity(tasks * pairs);
    while let Some(r) = set.join_next().await {
        samples.extend(r??);
    }
    let per_s = (tasks * pairs) as f64 / start.elapsed().as_secs_f64();
    Ok((per_s, sorted(samples)))
}

pub async fn cluster(env: &Env, extra: &Extra, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "cluster";
    const TASKS: usize = 64;
    const NAMES: usize = 256;
    const PAIRS: usize = 100;
    let cluster = extra.cluster.as_ref().ok_or("cluster not started")?;
    let (c_tag, s_tag) = (format!("{W}-{run}-c"), format!("{W}-{run}-s"));
    // Warm-up: scripts loaded on every node, connections to every master open.
    many_names(cluster, &c_tag, TASKS, NAMES, 8).await?;
    many_names(&env.client, &s_tag, TASKS, NAMES, 8).await?;
    let (single, s) = many_names(&env.client, &s_tag, TASKS, NAMES, PAIRS).await?;
    let (per_s, c) = many_names(cluster, &c_tag, TASKS, NAMES, PAIRS).await?;
    Ok(vec![
        Row::new(W, "pairs_per_s", per_s, "1/s").vs("single_node_pairs_per_s", single),
        Row::new(W, "pair_p50_ms", pct(&c, 0.5), "ms").vs("single_node_pair_p50_ms", pct(&s, 0.5)),
        Row::new(W, "pair_p99_ms", pct(&c, 0.99), "ms")
            .vs("single_node_pair_p99_ms", pct(&s, 0.99)),
    ])
}

pub async fn quorum(env: &Env, extra: &Extra, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "quorum";
    const PAIRS: usize = 1000;
    let quorum = extra.quorum.as_ref().ok_or("quorum not started")?;
    let q = Prim::Mutex(quorum.mutex(&format!("{W}-{run}")));
    let single = Prim::Mutex(env.client.mutex(&format!("{W}-{run}-single")));
    pairs(&q, 50).await?; // warm-up: scripts loaded on the three servers
    pairs(&single, 50).await?;
    let (b, _) = pairs(&single, PAIRS).await?;
    let (s, elapsed) = pairs(&q, PAIRS).await?;
    Ok(vec![
        Row::new(W, "pair_p50_ms", pct(&s, 0.5), "ms").vs("single_node_pair_p50_ms", pct(&b, 0.5)),
        Row::new(W, "pair_p99_ms", pct(&s, 0.99), "ms")
            .vs("single_node_pair_p99_ms", pct(&b, 0.99)),
        Row::new(
            W,
            "pairs_per_s",
            PAIRS as f64 / elapsed.as_secs_f64(),
            "1/s",
        ),
    ])
}
