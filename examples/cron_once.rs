//! A cron job that must run once per tick even though three instances fire it: a Mutex with
//! fencing guards the side effect. The "resource" (a job ledger) accepts a write only with a
//! fencing token higher than any it has seen, so even a holder that lost its lease unnoticed
//! could not write twice.
//!
//! Uses `REDIS_URL` when set, otherwise the in-memory backend.
//!
//! ```sh
//! cargo run --example cron_once
//! ```

use std::sync::Arc;
use std::time::Duration;

use redis_locks::LockClient;
use tokio::sync::Mutex as LocalMutex;

/// The protected resource: remembers the highest fence it accepted.
#[derive(Default)]
struct Ledger {
    highest_fence: u64,
    runs: Vec<(u32, String)>,
}

impl Ledger {
    fn record(&mut self, tick: u32, instance: &str, fence: u64) -> Result<(), String> {
        if fence <= self.highest_fence {
            return Err(format!(
                "stale fence {fence} (highest {})",
                self.highest_fence
            ));
        }
        self.highest_fence = fence;
        if self.runs.iter().any(|(t, _)| *t == tick) {
            return Err(format!("tick {tick} had already run: nothing to do"));
        }
        self.runs.push((tick, instance.to_owned()));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> redis_locks::Result<()> {
    let client = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            println!("backend: Redis at {url}");
            LockClient::connect(&url).await?
        }
        _ => {
            println!("backend: in-memory (set REDIS_URL to use a Redis server)");
            LockClient::in_memory()
        }
    };
    let ledger = Arc::new(LocalMutex::new(Ledger::default()));
    for tick in 1..=3u32 {
        let mut instances = Vec::new();
        for instance in ["api-1", "api-2", "worker-7"] {
            let (client, ledger) = (client.clone(), ledger.clone());
            instances.push(tokio::spawn(async move {
                let mutex = client
                    .mutex("cron_once:digest")
                    .lease(Duration::from_secs(5));
                // try_lock: an instance that finds the job taken simply skips it.
                match mutex.try_lock().await {
                    Ok(guard) => {
                        let fence = guard.fencing_token();
                        let outcome = ledger.lock().await.record(tick, instance, fence);
                        match outcome {
                            Ok(()) => {
                                println!("tick {tick}: {instance} ran the job under fence {fence}")
                            }
                            Err(why) => println!(
                                "tick {tick}: {instance} got the lock (fence {fence}) but {why}"
                            ),
                        }
                        guard.release().await?;
                    }
                    Err(e) if e.is_would_block() => {
                        println!("tick {tick}: {instance} skipped (another instance holds it)")
                    }
                    Err(e) => return Err(e),
                }
                Ok::<_, redis_locks::Error>(())
            }));
        }
        for i in instances {
            i.await.expect("instance task")?;
        }
    }
    let mut ledger = ledger.lock().await;
    println!("ledger: {:?}", ledger.runs);
    assert_eq!(ledger.runs.len(), 3, "each tick ran exactly once");
    // A holder whose lease lapsed unnoticed comes back with an old fence: the resource refuses.
    println!(
        "a zombie writing with fence 1: {:?}",
        ledger.record(4, "zombie", 1)
    );
    Ok(())
}
