//! Worker pool: N workers claim jobs from one shared list in strict turn, under one FairLock.
//!
//! Each worker queues for the lock, pops one job while holding it, releases, works, and
//! queues again. The FairLock grants in arrival order, so the workers take turns: the claim
//! order printed at the end cycles through them, and every worker gets its share.
//!
//! With `REDIS_URL` set the jobs are a Redis list (LPUSH to fill, RPOP to claim) and the lock
//! lives in that server; otherwise both are in memory. The output says which.
//!
//! ```sh
//! cargo run --example worker_pool
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example worker_pool
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use redis_locks::{FairLock, LockClient};
use tokio::sync::Mutex;

const WORKERS: usize = 4;
const JOBS: u32 = 24;
const JOB_LIST: &str = "worker_pool:jobs";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the jobs wait: a Redis list, or a queue in this process.
#[derive(Clone)]
enum Jobs {
    Redis(redis::aio::MultiplexedConnection),
    Memory(Arc<Mutex<VecDeque<u32>>>),
}

impl Jobs {
    /// Replaces the list with jobs 1..=n, first job first out.
    async fn fill(&mut self, n: u32) -> Result<(), BoxError> {
        let jobs: Vec<u32> = (1..=n).collect();
        match self {
            Jobs::Redis(con) => {
                redis::cmd("DEL")
                    .arg(JOB_LIST)
                    .query_async::<()>(con)
                    .await?;
                redis::cmd("LPUSH")
                    .arg(JOB_LIST)
                    .arg(&jobs)
                    .query_async::<()>(con)
                    .await?;
            }
            Jobs::Memory(list) => *list.lock().await = jobs.into(),
        }
        Ok(())
    }

    /// Takes the next job, if any is left.
    async fn claim(&mut self) -> Result<Option<u32>, BoxError> {
        Ok(match self {
            Jobs::Redis(con) => {
                redis::cmd("RPOP")
                    .arg(JOB_LIST)
                    .query_async::<Option<u32>>(con)
                    .await?
            }
            Jobs::Memory(list) => list.lock().await.pop_front(),
        })
    }
}

/// One worker: claims under the lock, works outside it; returns the jobs it did.
async fn worker(
    id: usize,
    lock: FairLock,
    mut jobs: Jobs,
    log: Arc<Mutex<Vec<(usize, u32)>>>,
) -> Result<Vec<u32>, BoxError> {
    let mut done = Vec::new();
    loop {
        let guard = lock.lock().await?;
        let job = jobs.claim().await?;
        if let Some(job) = job {
            log.lock().await.push((id, job));
        }
        guard.release().await?;
        let Some(job) = job else {
            return Ok(done);
        };
        // The work itself runs outside the lock.
        tokio::time::sleep(Duration::from_millis(20)).await;
        done.push(job);
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (client, mut jobs) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            println!("backend: Redis at {url} (jobs in the list `{JOB_LIST}`)");
            let con = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            (LockClient::connect(&url).await?, Jobs::Redis(con))
        }
        _ => {
            println!("backend: in-memory (set REDIS_URL to use a Redis server)");
            let list = Arc::new(Mutex::new(VecDeque::new()));
            (LockClient::in_memory(), Jobs::Memory(list))
        }
    };
    jobs.fill(JOBS).await?;
    println!("{WORKERS} workers claim {JOBS} jobs in strict turn under one FairLock\n");

    let lock = client
        .fair_lock("worker_pool:claims")
        .lease(Duration::from_secs(10));
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for id in 0..WORKERS {
        let (lock, jobs, log) = (lock.clone(), jobs.clone(), log.clone());
        tasks.push(tokio::spawn(worker(id, lock, jobs, log)));
        // Start the workers a moment apart, so their first turns are in id order.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut total = 0;
    for (id, task) in tasks.into_iter().enumerate() {
        let done = task.await??;
        println!("worker {id}: {:>2} jobs {done:?}", done.len());
        total += done.len();
    }

    let log = log.lock().await;
    let order: Vec<String> = log.iter().map(|(w, j)| format!("w{w}:{j}")).collect();
    println!("\nclaim order (worker:job): {}", order.join(" "));
    // With strict turns, a worker claims again only after the others queued before it did.
    let repeats = log.windows(2).filter(|p| p[0].0 == p[1].0).count();
    println!("claims done twice in a row by the same worker: {repeats}");
    println!("jobs claimed: {total} of {JOBS}");
    if total != JOBS as usize {
        return Err("some jobs were not claimed".into());
    }
    Ok(())
}
