//! One step on a hold of any single-lock primitive, named by its kind: "mutex", "read",
//! "write" (an RwLock), "fair" (a FairLock) or "sem" (three permits of a Semaphore of 3).

use redis_locks::{HoldId, LockClient, LockInfo, Result};

/// A hold of `kind` on `name` in `c`, detached: its id.
pub async fn detached(c: &LockClient, kind: &str, name: &str) -> HoldId {
    match kind {
        "mutex" => c.mutex(name).lock().await.expect("lock").detach(),
        "read" => c.rwlock(name).read().await.expect("read").detach(),
        "write" => c.rwlock(name).write().await.expect("write").detach(),
        "fair" => c.fair_lock(name).lock().await.expect("lock").detach(),
        "sem" => c
            .semaphore(name, 3)
            .acquire_many(3)
            .await
            .expect("acquire")
            .detach(),
        other => unreachable!("{other}"),
    }
}

/// The lock `name` as a handle of `kind` in `c` sees it.
pub async fn inspect(c: &LockClient, kind: &str, name: &str) -> LockInfo {
    let info = match kind {
        "fair" => c.fair_lock(name).inspect().await,
        "sem" => c.semaphore(name, 3).inspect().await,
        "mutex" => c.mutex(name).inspect().await,
        _ => c.rwlock(name).inspect().await,
    };
    info.expect("inspect")
}

/// Resumes `id` on a handle of `kind` in `c` and detaches the guard again: its id.
pub async fn resume_detached(c: &LockClient, kind: &str, id: &HoldId) -> Result<HoldId> {
    let name = id.name();
    match kind {
        "mutex" => c.mutex(name).resume(id).await.map(|g| g.detach()),
        "read" => c.rwlock(name).resume_read(id).await.map(|g| g.detach()),
        "write" => c.rwlock(name).resume_write(id).await.map(|g| g.detach()),
        "fair" => c.fair_lock(name).resume(id).await.map(|g| g.detach()),
        "sem" => c.semaphore(name, 3).resume(id).await.map(|g| g.detach()),
        other => unreachable!("{other}"),
    }
}
