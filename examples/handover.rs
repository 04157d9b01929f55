//! Handing a lock to another process: a scheduler locks a job, puts the hold's id into a job
//! queue and exits; a worker process picks the job up, resumes the hold, works under its
//! fence, and releases it.
//!
//! With `REDIS_URL` set, this runs across real OS processes: the example starts itself as a
//! `scheduler` child, waits for it to exit (its client, connection and renewals gone with it),
//! then starts a `worker` child that takes the job from a Redis list. The hold outlives the
//! scheduler's process because `detach()` gives the guard up without releasing it; the worker
//! re-adopts it with one owner-checked renewal. Without `REDIS_URL`, the same two roles run in
//! one process on a shared in-memory store (two clients, as two processes would have).
//!
//! ```sh
//! cargo run --example handover                              # in memory
//! REDIS_URL=redis://127.0.0.1/ cargo run --example handover # across processes
//! ```

use std::error::Error;
use std::process::Command;
use std::time::Duration;

use redis::AsyncCommands;
use redis_locks::{HoldId, LockClient};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// The lock and the Redis list that carries the job (the hold id).
const LOCK: &str = "handover:job-42";
const QUEUE: &str = "handover:jobs";
/// Where the worker records the work it did, with the fence it did it under.
const DONE: &str = "handover:done";

/// Locks the job and returns the id to enqueue; the guard is given up, not released.
async fn schedule(client: &LockClient) -> Result<HoldId> {
    let guard = client
        .mutex(LOCK)
        .lease(Duration::from_secs(10))
        .lock()
        .await?;
    println!(
        "scheduler: locked {LOCK} under fence {}",
        guard.fencing_token()
    );
    Ok(guard.detach())
}

/// Resumes the hold, checks nobody else can take the lock, works, releases. Returns the
/// fence the work was done under.
async fn work(client: &LockClient, other: &LockClient, text: &str) -> Result<u64> {
    let id: HoldId = text.parse()?;
    let guard = client.mutex(id.name()).resume(&id).await?;
    let fence = guard.fencing_token();
    if fence != id.fencing_token() || !guard.is_held() {
        return Err("the resumed guard does not hold the scheduler's grant".into());
    }
    if other.mutex(LOCK).try_lock().await.is_ok() {
        return Err("someone else got the lock while the worker held it".into());
    }
    println!("worker: resumed {LOCK} under fence {fence}; working");
    tokio::time::sleep(Duration::from_millis(20)).await;
    if !guard.release().await? {
        return Err("the hold was gone before the worker released it".into());
    }
    println!("worker: released {LOCK}");
    Ok(fence)
}

/// Both roles in one process, on one in-memory store.
async fn in_memory() -> Result<()> {
    println!("backend: in-memory (one process; set REDIS_URL to cross processes)");
    let store = redis_locks::InMemory::new();
    let (jobs, mut queue) = tokio::sync::mpsc::unbounded_channel::<String>();
    {
        let scheduler = store.client("scheduler")?;
        jobs.send(schedule(&scheduler).await?.to_string())?;
        // The scheduler's client goes away, as its process would.
    }
    let text = queue.recv().await.ok_or("no job")?;
    let (worker, other) = (store.client("worker")?, store.client("other")?);
    let fence = work(&worker, &other, &text).await?;
    other.mutex(LOCK).try_lock().await?.release().await?;
    println!("handover ok: the work ran under fence {fence}, and the lock is free again");
    Ok(())
}

/// The `scheduler` child: lock, enqueue the id, exit without releasing.
async fn scheduler_process(url: &str) -> Result<()> {
    let client = LockClient::connect(url).await?;
    let id = schedule(&client).await?;
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let _: i64 = conn.lpush(QUEUE, id.to_string()).await?;
    println!("scheduler: enqueued the job; exiting without releasing");
    Ok(())
}

/// The `worker` child: take the job, resume, work under the fence, release.
async fn worker_process(url: &str) -> Result<()> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let job: Option<(String, String)> = conn.brpop(QUEUE, 10.0).await?;
    let (_, text) = job.ok_or("no job within 10 s")?;
    let client = LockClient::connect(url).await?;
    let other = LockClient::connect(url).await?;
    let fence = work(&client, &other, &text).await?;
    let _: () = conn.set(DONE, fence).await?;
    Ok(())
}

/// Runs this example as a child in `role`, and fails unless it succeeds.
fn child(role: &str) -> Result<()> {
    let status = Command::new(std::env::current_exe()?).arg(role).status()?;
    if !status.success() {
        return Err(format!("the {role} process failed: {status}").into());
    }
    Ok(())
}

/// The launcher on Redis: a scheduler process, then a worker process; then checks.
async fn across_processes(url: &str) -> Result<()> {
    println!("backend: Redis (a scheduler process, then a worker process)");
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = conn.del(&[QUEUE, DONE]).await?;
    child("scheduler")?;
    let observer = LockClient::connect(url).await?;
    if observer.mutex(LOCK).try_lock().await.is_ok() {
        return Err("the lock was free after the scheduler exited".into());
    }
    println!("launcher: the scheduler exited; the lock is still held");
    child("worker")?;
    let fence: u64 = conn.get(DONE).await?;
    observer.mutex(LOCK).try_lock().await?.release().await?;
    println!("handover ok: the work ran under fence {fence}, and the lock is free again");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let url = std::env::var("REDIS_URL").ok();
    let role = std::env::args().nth(1);
    match (role.as_deref(), url.as_deref()) {
        (Some("scheduler"), Some(url)) => scheduler_process(url).await,
        (Some("worker"), Some(url)) => worker_process(url).await,
        (None, Some(url)) => across_processes(url).await,
        (None, None) => in_memory().await,
        (Some(role), _) => Err(format!("unknown role {role:?}, or REDIS_URL not set").into()),
    }
}
