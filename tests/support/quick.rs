//! Short forms of the chains the tests write most (`c.mutex(n).lease(l).lock().await` and
//! the like, which rustfmt spreads over six lines): [`Quick`] on a client, and [`soon`] and
//! [`cancel_at`] for the waits and cancellations around them. Each panics naming the lock
//! on an error.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis_locks::{
    FairLockGuard, HoldId, LeaderInfo, Leadership, LockClient, LockInfo, MutexGuard, ReadGuard,
    WriteGuard,
};

use super::backend::EVENTUALLY;
use super::faulty::Gate;

/// The chains on a client, unwrapped.
pub trait Quick {
    /// `mutex(name).lock()`.
    fn locked(&self, name: &str) -> impl Future<Output = MutexGuard> + Send;
    /// `fair_lock(name).lock()`.
    fn fair_locked(&self, name: &str) -> impl Future<Output = FairLockGuard> + Send;
    /// `mutex(name).lease(lease).lock()`.
    fn lock_for(&self, name: &str, lease: Duration) -> impl Future<Output = MutexGuard> + Send;
    /// `mutex(name).lease(lease).auto_renew(false).lock()`.
    fn lock_unrenewed(
        &self,
        name: &str,
        lease: Duration,
    ) -> impl Future<Output = MutexGuard> + Send;
    /// `fair_lock(name).lease(lease).lock()`.
    fn fair_for(&self, name: &str, lease: Duration) -> impl Future<Output = FairLockGuard> + Send;
    /// `mutex(name).lease(lease).resume(id)`.
    fn resume_for(
        &self,
        name: &str,
        lease: Duration,
        id: &HoldId,
    ) -> impl Future<Output = MutexGuard> + Send;
    /// `mutex(name).inspect()`.
    fn mutex_info(&self, name: &str) -> impl Future<Output = LockInfo> + Send;
    /// `election(name).lease(lease).campaign(value)`.
    fn campaign_for(
        &self,
        name: &str,
        lease: Duration,
        value: &str,
    ) -> impl Future<Output = Leadership> + Send;
    /// `election(name).campaign(value)`.
    fn lead(&self, name: &str, value: &str) -> impl Future<Output = Leadership> + Send;
    /// `election(name).leader()`.
    fn leader_of(&self, name: &str) -> impl Future<Output = Option<LeaderInfo>> + Send;
}

impl Quick for LockClient {
    async fn locked(&self, name: &str) -> MutexGuard {
        let got = self.mutex(name).lock().await;
        got.unwrap_or_else(|e| panic!("lock {name}: {e}"))
    }

    async fn fair_locked(&self, name: &str) -> FairLockGuard {
        let got = self.fair_lock(name).lock().await;
        got.unwrap_or_else(|e| panic!("lock {name}: {e}"))
    }

    async fn lock_for(&self, name: &str, lease: Duration) -> MutexGuard {
        let got = self.mutex(name).lease(lease).lock().await;
        got.unwrap_or_else(|e| panic!("lock {name}: {e}"))
    }

    async fn lock_unrenewed(&self, name: &str, lease: Duration) -> MutexGuard {
        let got = self.mutex(name).lease(lease).auto_renew(false).lock().await;
        got.unwrap_or_else(|e| panic!("lock {name}: {e}"))
    }

    async fn fair_for(&self, name: &str, lease: Duration) -> FairLockGuard {
        let got = self.fair_lock(name).lease(lease).lock().await;
        got.unwrap_or_else(|e| panic!("lock {name}: {e}"))
    }

    async fn resume_for(&self, name: &str, lease: Duration, id: &HoldId) -> MutexGuard {
        let got = self.mutex(name).lease(lease).resume(id).await;
        got.unwrap_or_else(|e| panic!("resume {name}: {e}"))
    }

    async fn mutex_info(&self, name: &str) -> LockInfo {
        let got = self.mutex(name).inspect().await;
        got.unwrap_or_else(|e| panic!("inspect {name}: {e}"))
    }

    async fn campaign_for(&self, name: &str, lease: Duration, value: &str) -> Leadership {
        let got = self.election(name).lease(lease).campaign(value).await;
        got.unwrap_or_else(|e| panic!("campaign {name}: {e}"))
    }

    async fn lead(&self, name: &str, value: &str) -> Leadership {
        let got = self.election(name).campaign(value).await;
        got.unwrap_or_else(|e| panic!("campaign {name}: {e}"))
    }

    async fn leader_of(&self, name: &str) -> Option<LeaderInfo> {
        let got = self.election(name).leader().await;
        got.unwrap_or_else(|e| panic!("leader of {name}: {e}"))
    }
}

/// `fut` within [`EVENTUALLY`]; panics with `what` on a timeout.
pub async fn soon<T>(what: &str, fut: impl std::future::IntoFuture<Output = T>) -> T {
    tokio::time::timeout(EVENTUALLY, fut)
        .await
        .unwrap_or_else(|_| panic!("not within {EVENTUALLY:?}: {what}"))
}

/// `fut` within `limit`; panics with `what` on a timeout.
pub async fn in_time<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::IntoFuture<Output = T>,
) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("not within {limit:?}: {what}"))
}

/// `WriteGuard::downgrade(w)`: the read guard.
pub async fn downgraded(w: WriteGuard) -> ReadGuard {
    let name = w.name().to_owned();
    let got = WriteGuard::downgrade(w).await;
    got.unwrap_or_else(|e| panic!("downgrade {name}: {e}"))
}

/// Cancels `task` once one request entered `gate`, then opens the gate: the task is
/// cancelled with its request held, which reaches the server after the cancel.
pub async fn cancel_at<T>(gate: &Arc<Gate>, task: tokio::task::JoinHandle<T>) {
    gate.wait_entered(1).await;
    task.abort();
    let _ = task.await;
    gate.open();
}
