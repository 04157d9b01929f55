//! A store that counts the protocol steps it is asked for, around the in-memory reference:
//! for tests that a path costs no more round trips than it should.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use redis_locks::keys::LockKeys;
use redis_locks::store::{Acquire, Claim, Family, MemoryStore, Snapshot, Store};

/// A store that counts the steps it is asked for, around the in-memory reference.
#[derive(Debug, Default)]
pub struct Counting {
    pub inner: MemoryStore,
    pub acquires: AtomicUsize,
    pub extends: AtomicUsize,
}

#[async_trait::async_trait]
impl Store for Counting {
    async fn acquire(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        wait: bool,
        now: Option<u64>,
    ) -> redis_locks::Result<Acquire> {
        self.acquires
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.acquire(lock, claim, wait, now).await
    }
    async fn release(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        self.inner.release(lock, claim, now).await
    }
    async fn extend(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        lease: Duration,
        now: Option<u64>,
    ) -> redis_locks::Result<bool> {
        self.extends
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.extend(lock, claim, lease, now).await
    }
    async fn downgrade(
        &self,
        lock: &LockKeys,
        claim: &Claim,
        now: Option<u64>,
    ) -> redis_locks::Result<Option<u64>> {
        self.inner.downgrade(lock, claim, now).await
    }
    async fn inspect(
        &self,
        lock: &LockKeys,
        family: Family,
        now: Option<u64>,
    ) -> redis_locks::Result<Snapshot> {
        self.inner.inspect(lock, family, now).await
    }
    async fn set_permits(
        &self,
        lock: &LockKeys,
        permits: u32,
        heartbeat: Duration,
        now: Option<u64>,
    ) -> redis_locks::Result<()> {
        self.inner.set_permits(lock, permits, heartbeat, now).await
    }
    async fn force_release(&self, lock: &LockKeys, now: Option<u64>) -> redis_locks::Result<u64> {
        self.inner.force_release(lock, now).await
    }
    fn hub(&self) -> &Arc<redis_locks::WakeHub> {
        self.inner.hub()
    }
}
