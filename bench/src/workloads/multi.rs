//! Multi-lock against as many single locks.

use std::time::Instant;

use crate::env::Env;
use crate::probe::ping_p50;
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

/// Multi-lock of 2 and 8 names (one acquire step, the releases sent together) against as
/// many single Mutex locks taken one after the other and released last first, uncontended,
/// in alternating blocks on the same connection; PING as the round-trip baseline.
pub async fn multi(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "multi";
    const BLOCK: usize = 50;
    const BLOCKS: usize = 20;
    let ping = ping_p50(&env.raw, 1000).await?;
    let mut rows = Vec::new();
    for n in [2usize, 8] {
        let names: Vec<String> = (0..n).map(|i| format!("{W}-{run}-{n}-{i}")).collect();
        let multi = env.client.multi_lock(&names);
        let singles: Vec<_> = names.iter().map(|name| env.client.mutex(name)).collect();
        let (mut m, mut s) = (Vec::new(), Vec::new());
        for block in 0..=BLOCKS {
            for _ in 0..BLOCK {
                let t = Instant::now();
                multi.lock().await?.release().await?;
                if block > 0 {
                    m.push(ms(t.elapsed()));
                }
            }
            for _ in 0..BLOCK {
                let t = Instant::now();
                let mut held = Vec::with_capacity(n);
                for single in &singles {
                    held.push(single.lock().await?);
                }
                while let Some(g) = held.pop() {
                    g.release().await?;
                }
                if block > 0 {
                    s.push(ms(t.elapsed()));
                }
            }
        }
        let (m, s) = (sorted(m), sorted(s));
        rows.push(
            Row::new(W, format!("multi_{n}_pair_p50_ms"), pct(&m, 0.5), "ms")
                .vs(format!("singles_{n}_pairs_p50_ms"), pct(&s, 0.5))
                .target(Target::RatioAtMost(1.0)),
        );
        rows.push(
            Row::new(W, format!("singles_{n}_pairs_p50_ms"), pct(&s, 0.5), "ms")
                .vs("ping_p50_ms", ping),
        );
        rows.push(
            Row::new(W, format!("multi_{n}_pair_p99_ms"), pct(&m, 0.99), "ms")
                .vs("ping_p50_ms", ping),
        );
    }
    Ok(rows)
}
