//! The primitives the workloads acquire and release as a whole, and the floor pair they are
//! measured against.

use std::time::{Duration, Instant};

use redis_locks::testing::store::RedisStore;
use redis_locks::{
    FairLock, FairLockGuard, Mutex, MutexGuard, Permit, ReadGuard, RwLock, Semaphore,
};

use crate::stats::{ms, sorted};
use crate::BoxResult;

/// The primitives that are acquired and released as a whole in the workloads.
#[derive(Clone)]
pub enum Prim {
    Mutex(Mutex),
    Fair(FairLock),
    Sem(Semaphore),
    Read(RwLock),
}

pub enum Held {
    Mutex(MutexGuard),
    Fair(FairLockGuard),
    Sem(Permit),
    Read(ReadGuard),
}

impl Prim {
    pub async fn acquire(&self) -> redis_locks::Result<Held> {
        Ok(match self {
            Prim::Mutex(m) => Held::Mutex(m.lock().await?),
            Prim::Fair(f) => Held::Fair(f.lock().await?),
            Prim::Sem(s) => Held::Sem(s.acquire().await?),
            Prim::Read(r) => Held::Read(r.read().await?),
        })
    }
}

impl Held {
    pub async fn release(self) -> redis_locks::Result<bool> {
        match self {
            Held::Mutex(g) => g.release().await,
            Held::Fair(g) => g.release().await,
            Held::Sem(g) => g.release().await,
            Held::Read(g) => g.release().await,
        }
    }
}

pub async fn pairs(prim: &Prim, n: usize) -> BoxResult<(Vec<f64>, Duration)> {
    let mut samples = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let g = prim.acquire().await?;
        g.release().await?;
        samples.push(ms(t.elapsed()));
    }
    Ok((sorted(samples), start.elapsed()))
}

/// The floor any Lua lease lock pays: the simplest owner-checked pair (a script doing
/// `SET NX PX`, a script deleting the key only if it holds the caller's token), with no
/// fencing, no waiters and no clock, on the locks' own connection. What our scripts cost on
/// top of two round trips is measured against it.
pub struct FloorPair {
    pub acquire_sha: String,
    pub release_sha: String,
}

impl FloorPair {
    const ACQUIRE: &'static str =
        "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0";
    const RELEASE: &'static str =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

    pub async fn load(raw: &RedisStore) -> BoxResult<FloorPair> {
        let load = |src: &'static str| async move {
            let sha: String = raw.query(redis::cmd("SCRIPT").arg("LOAD").arg(src)).await?;
            Ok::<String, redis_locks::Error>(sha)
        };
        Ok(FloorPair {
            acquire_sha: load(Self::ACQUIRE).await?,
            release_sha: load(Self::RELEASE).await?,
        })
    }

    /// One acquire + release of `key`; fails if the acquire was refused (keys are private).
    pub async fn pair(&self, raw: &RedisStore, key: &str, token: &str) -> BoxResult<()> {
        let got: i64 = raw
            .query(
                redis::cmd("EVALSHA")
                    .arg(&self.acquire_sha)
                    .arg(1)
                    .arg(key)
                    .arg(token)
                    .arg(30_000),
            )
            .await?;
        let freed: i64 = raw
            .query(
                redis::cmd("EVALSHA")
                    .arg(&self.release_sha)
                    .arg(1)
                    .arg(key)
                    .arg(token),
            )
            .await?;
        if got != 1 || freed != 1 {
            return Err(format!("floor pair on {key}: acquire {got}, release {freed}").into());
        }
        Ok(())
    }
}
