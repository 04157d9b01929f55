//! Many live holds on one client, each renewed every third of its lease by the client's
//! renewal schedule: every guard must stay held, and the renewal rate must be what the holds
//! need. The trust margin (the least time any guard still trusted, sampled every 50 ms) shows
//! how late the latest renewal came.

use std::time::{Duration, Instant};

use redis_locks::LockClient;
use tokio::task::JoinSet;

use crate::env::Env;
use crate::probe::cmdstat;
use crate::row::{Row, Target};
use crate::stats::ms;
use crate::BoxResult;

pub const RENEWAL_HOLDS: usize = 10_000;

pub async fn renewals(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "renewals";
    let lease = Duration::from_secs(3);
    let url = env.url.clone();
    let client = LockClient::builder()
        .prefix(&env.prefix)
        .lease(lease)
        .connect(&url)
        .await?;
    let mut acquiring = JoinSet::new();
    let mut guards = Vec::with_capacity(RENEWAL_HOLDS);
    for i in 0..RENEWAL_HOLDS {
        let m = client.mutex(&format!("{W}-{run}-{i}"));
        acquiring.spawn(async move { m.try_lock().await });
        if acquiring.len() >= 256 {
            if let Some(g) = acquiring.join_next().await {
                guards.push(g??);
            }
        }
    }
    while let Some(g) = acquiring.join_next().await {
        guards.push(g??);
    }
    let (calls0, _) = cmdstat(&env.raw, "evalsha").await?;
    let start = Instant::now();
    let watch = lease * 3;
    let mut least_margin = f64::INFINITY;
    let mut lost = 0usize;
    while start.elapsed() < watch {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = tokio::time::Instant::now();
        lost = guards.iter().filter(|g| !g.is_held()).count();
        let margin = guards
            .iter()
            .filter(|g| g.is_held())
            .map(|g| ms(g.valid_until().saturating_duration_since(now)))
            .fold(f64::INFINITY, f64::min);
        least_margin = least_margin.min(margin);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (calls1, _) = cmdstat(&env.raw, "evalsha").await?;
    let mut releasing = JoinSet::new();
    for g in guards {
        releasing.spawn(g.release());
    }
    while let Some(r) = releasing.join_next().await {
        r??;
    }
    let needed = RENEWAL_HOLDS as f64 / (lease.as_secs_f64() / 3.0);
    Ok(vec![
        Row::new(W, "holds", RENEWAL_HOLDS as f64, "holds"),
        Row::new(W, "lost_guards", lost as f64, "guards").target(Target::Equals(0.0)),
        Row::new(
            W,
            "renewals_per_s",
            (calls1 - calls0) as f64 / elapsed,
            "1/s",
        )
        .vs("needed_per_s", needed),
        Row::new(W, "least_trust_left_ms", least_margin, "ms")
            .vs("lease_ms", ms(lease))
            .target(Target::RatioAtLeast(0.3)),
    ])
}
