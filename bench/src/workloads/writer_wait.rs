//! A writer arriving among busy readers: how long it waits, and that no read overtakes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis_locks::RwLock;
use tokio::task::JoinSet;

use crate::env::Env;
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

pub struct ReadRecord {
    started: Instant,
    granted: Instant,
    released: Instant,
}

pub async fn writer_wait(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    const W: &str = "writer_wait";
    let name = format!("{W}-{run}");
    let stop = Arc::new(AtomicBool::new(false));
    let reads: Arc<StdMutex<Vec<ReadRecord>>> = Arc::default();
    let mut readers = JoinSet::new();
    for _ in 0..6 {
        let rw: RwLock = env.client.rwlock(&name);
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let g = rw.read().await?;
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let released = Instant::now();
                g.release().await?;
                reads
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(ReadRecord {
                        started,
                        granted,
                        released,
                    });
            }
            Ok::<(), redis_locks::Error>(())
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The writer is another process (client B). A watcher on client A finds the moment its
    // announcement is visible on the server: the first inspect that lists it as a waiter.
    let writer_done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let rw = env.client.rwlock(&name);
        let done = writer_done.clone();
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let info = rw.inspect().await?;
                if !info.waiters.is_empty() {
                    return Ok(Some(Instant::now()));
                }
            }
            Ok::<Option<Instant>, redis_locks::Error>(None)
        })
    };
    let writer = env.client_b.rwlock(&name);
    let asked = Instant::now();
    let wg = writer.write().await?;
    let write_granted = Instant::now();
    writer_done.store(true, Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    let visible = watcher.await??;
    wg.release().await?;
    while let Some(r) = readers.join_next().await {
        r??;
    }
    let reads = std::mem::take(&mut *reads.lock().unwrap_or_else(|p| p.into_inner()));
    let holds = sorted(reads.iter().map(|r| ms(r.released - r.granted)).collect());
    // A read that started after the announcement was visible reached the server after it, so
    // writer preference must refuse it until the writer is through.
    let after = visible
        .map(|v| {
            reads
                .iter()
                .filter(|r| r.started >= v && r.granted <= write_granted)
                .count()
        })
        .unwrap_or(0);
    let hold_p50 = pct(&holds, 0.5);
    Ok(vec![
        Row::new(W, "writer_wait_ms", ms(write_granted - asked), "ms")
            .vs("read_hold_ms", hold_p50)
            .target(Target::AtMostBaselinePlus(2.0)),
        Row::new(W, "read_hold_ms", hold_p50, "ms"),
        Row::new(W, "reads_after_register", after as f64, "count").target(Target::Equals(0.0)),
    ])
}
