//! Waiting with a tight bound ([`within`]) and the lock states such waits look for
//! ([`queue_idle`], [`lease_free`]).

use std::time::Duration;

use redis_locks::LockClient;
use tokio::time::Instant;

use super::time::ms;

/// The bound of a check that a hold was freed by its release, not by its lease running out:
/// a third of the default 30 s lease. Far above what a release takes (milliseconds) and far
/// below the lease, so a loaded machine does not turn the verdict.
pub const BEFORE_THE_LEASE: Duration = Duration::from_secs(10);

/// The same for what a waiter leaves (a queue place, a writer's announcement, a grant handed
/// to a waiter that gave up): half the default 5 s heartbeat window, after which the server
/// would drop it by itself.
pub const BEFORE_THE_HEARTBEAT: Duration = Duration::from_millis(2_500);

/// The margin a check "within its bound" (a lease's end, an observer's retry interval) allows
/// a loaded machine: a step due at an instant may run this much later on a shared 2-core
/// runner. Far above what a step takes (milliseconds); use it only where the bug the check
/// guards would take far longer than the bound plus this margin.
pub const LOAD_MARGIN: Duration = Duration::from_millis(2_500);

/// Waits for `check` with a bound tighter than EVENTUALLY.
pub async fn within(bound: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let give_up = Instant::now() + bound;
    while !check().await {
        assert!(Instant::now() < give_up, "not within {bound:?}: {what}");
        tokio::time::sleep(ms(5)).await;
    }
}

/// Every live hold and waiter of a ticket queue name is gone.
pub async fn queue_idle(c: &LockClient, name: &str) -> bool {
    let info = c.fair_lock(name).inspect().await.expect("inspect");
    info.holders.is_empty() && info.waiters.is_empty()
}

/// No live hold of the lease lock of `name`.
pub async fn lease_free(c: &LockClient, name: &str) -> bool {
    c.mutex(name)
        .inspect()
        .await
        .expect("inspect")
        .holders
        .is_empty()
}

/// How many holders the server lists for `name` (a Mutex), read through `other`.
pub async fn holders(other: &LockClient, name: &str) -> usize {
    other
        .mutex(name)
        .inspect()
        .await
        .expect("inspect")
        .holders
        .len()
}

/// Whether another client's try of `name` is granted now (released at once): `kind` is
/// "mutex", "fair", "read", "write" or "sem" (a one-permit semaphore). An error other than
/// "held" panics.
pub async fn grantable(c: &LockClient, kind: &str, name: &str) -> bool {
    use super::Granted;
    let what = "a try of a lock left free";
    match kind {
        "mutex" => c.mutex(name).try_lock().await.granted(what).is_some(),
        "fair" => c.fair_lock(name).try_lock().await.granted(what).is_some(),
        "read" => c.rwlock(name).try_read().await.granted(what).is_some(),
        "write" => c.rwlock(name).try_write().await.granted(what).is_some(),
        "sem" => c
            .semaphore(name, 1)
            .try_acquire()
            .await
            .granted(what)
            .is_some(),
        other => unreachable!("{other}"),
    }
}
