//! Moving stock between warehouses with a multi-lock: each transfer locks its two warehouses
//! together (`client.multi_lock([from, to])`), whatever order it names them in, so transfers
//! in opposite directions never deadlock, and no update is lost.
//!
//! Each warehouse's stock is a slow read-modify-write (read, pause, write), as against a
//! remote database: without the locks, concurrent transfers would overwrite each other. Every
//! write carries the fencing token of its warehouse, and the warehouse refuses a token lower
//! than one it has seen. At the end the total must equal the starting total.
//!
//! Uses `REDIS_URL` when set (e.g. `REDIS_URL=redis://127.0.0.1:6379/`), otherwise the
//! in-memory backend, and says which.
//!
//! ```sh
//! cargo run --example transfer
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis_locks::LockClient;

const WAREHOUSES: [&str; 4] = ["berlin", "lyon", "porto", "turin"];
const WORKERS: usize = 8;
const TRANSFERS_PER_WORKER: usize = 20;
const START_STOCK: i64 = 1_000;

/// A warehouse's stock, as a remote store would keep it: a value and the highest fencing
/// token that wrote it.
#[derive(Default)]
struct Stock {
    units: i64,
    fence: u64,
}

type Stocks = Arc<StdMutex<HashMap<&'static str, Stock>>>;

/// A slow read (the lock is what keeps it consistent with the write after it).
async fn read(stocks: &Stocks, warehouse: &'static str) -> i64 {
    let units = stocks.lock().expect("stocks")[warehouse].units;
    tokio::time::sleep(Duration::from_millis(1)).await;
    units
}

/// A fenced write: refused when a later holder of the warehouse's lock already wrote.
fn write(stocks: &Stocks, warehouse: &'static str, units: i64, fence: u64) -> Result<(), String> {
    let mut stocks = stocks.lock().expect("stocks");
    let stock = stocks.get_mut(warehouse).expect("a warehouse");
    if fence < stock.fence {
        return Err(format!(
            "{warehouse}: write with fence {fence} refused, {} already wrote",
            stock.fence
        ));
    }
    stock.units = units;
    stock.fence = fence;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    let stocks: Stocks = Arc::new(StdMutex::new(
        WAREHOUSES
            .iter()
            .map(|w| {
                (
                    *w,
                    Stock {
                        units: START_STOCK,
                        fence: 0,
                    },
                )
            })
            .collect(),
    ));

    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (client, stocks) = (client.clone(), stocks.clone());
        workers.push(tokio::spawn(async move {
            for n in 0..TRANSFERS_PER_WORKER {
                // Every pair, in both directions.
                let from = WAREHOUSES[(worker + n) % WAREHOUSES.len()];
                let to = WAREHOUSES[(worker + 2 * n + 1) % WAREHOUSES.len()];
                if from == to {
                    continue;
                }
                let units = 1 + ((worker * 7 + n * 3) % 25) as i64;
                let both =
                    client.multi_lock([format!("transfer:{from}"), format!("transfer:{to}")]);
                let guard = both.lock().timeout(Duration::from_secs(30)).await?;
                let fence = |w: &str| {
                    guard
                        .fencing_token(&format!("transfer:{w}"))
                        .expect("both warehouses are parts")
                };
                let (have, get) = (read(&stocks, from).await, read(&stocks, to).await);
                write(&stocks, from, have - units, fence(from))?;
                write(&stocks, to, get + units, fence(to))?;
                guard.release().await?;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for worker in workers {
        worker.await?.map_err(|e| e.to_string())?;
    }

    let stocks = stocks.lock().expect("stocks");
    let total: i64 = stocks.values().map(|s| s.units).sum();
    for w in WAREHOUSES {
        println!("{w:>7}: {:>5} units", stocks[w].units);
    }
    println!(
        "{} transfers by {WORKERS} workers in {:?}; total {total} (started with {})",
        WORKERS * TRANSFERS_PER_WORKER,
        started.elapsed(),
        START_STOCK * WAREHOUSES.len() as i64
    );
    if total != START_STOCK * WAREHOUSES.len() as i64 {
        return Err("stock was created or lost: a transfer ran without its locks".into());
    }
    println!("stock conserved");
    Ok(())
}
