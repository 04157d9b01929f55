//! A deployment's engine at the end of the runtime a client was built on
//! ([`holds_and_waits_end_with_their_runtime`]): what `main` returning does to a guard and to a
//! task still waiting, on a current-thread runtime.

use std::future::Future;
use std::time::{Duration, Instant};

use redis_locks::{LockClient, LockClientBuilder, RedisConfig};

use crate::backend::eventually;
use crate::time::{current_thread, secs};

/// Five-second response timeouts: the engine's bound is four of them, 20 s, so a drop that
/// waited for it shows.
fn patient(builder: LockClientBuilder) -> LockClientBuilder {
    let config = RedisConfig {
        response_timeout: secs(5),
        ..RedisConfig::default()
    };
    builder
        .lease(secs(60))
        .heartbeat(secs(60))
        .redis_config(config)
}

/// On the deployment `connect` reaches (a client from a builder), two programs end on a
/// current-thread runtime: one holding a Mutex (the guard and the client are dropped as
/// `main` returns), one whose task waits for a Mutex held elsewhere (the runtime is dropped
/// under it). The guard is released and the wait leaves no place, each by the client's
/// engine on connections of its own, and neither drop takes the engine's bound (`< limit`).
pub fn holds_and_waits_end_with_their_runtime<F, Fut>(connect: F, limit: Duration)
where
    F: Fn(LockClientBuilder) -> Fut,
    Fut: Future<Output = LockClient>,
{
    let outside = current_thread();
    let observer = outside.block_on(connect(LockClient::builder()));

    // A guard dropped as `main` returns.
    let rt = current_thread();
    let client = rt.block_on(connect(patient(LockClient::builder())));
    let dropped = rt.block_on(async move {
        let guard = client
            .mutex("exit-with-a-guard")
            .lock()
            .await
            .expect("lock");
        assert!(guard.is_held());
        Instant::now()
    });
    let took = dropped.elapsed();
    drop(rt);
    assert!(took < limit, "the client's drop took {took:?}");
    outside.block_on(async {
        let info = observer
            .mutex("exit-with-a-guard")
            .inspect()
            .await
            .expect("inspect");
        assert!(
            info.holders.is_empty(),
            "still held after the drop: {info:?}"
        );
    });

    // A task still waiting as the runtime ends.
    let name = "exit-with-a-wait";
    let held = outside
        .block_on(async { observer.mutex(name).lock().await })
        .expect("lock");
    let rt = current_thread();
    let waiter = rt.block_on(connect(patient(LockClient::builder())));
    let probe = waiter.mutex(name);
    rt.spawn(async move {
        let _ = waiter.mutex(name).lock().await;
        std::future::pending::<()>().await;
    });
    // Driven until the wait shows: its client's connections live on this runtime.
    rt.block_on(async {
        eventually("the wait shows", async || {
            !probe.inspect().await.expect("inspect").waiters.is_empty()
        })
        .await
    });
    drop(probe);
    let started = Instant::now();
    drop(rt);
    let took = started.elapsed();
    assert!(took < limit, "the runtime's drop took {took:?}");
    outside.block_on(async {
        let info = observer.mutex(name).inspect().await.expect("inspect");
        assert!(
            info.waiters.is_empty(),
            "the wait's place is left: {info:?}"
        );
        assert!(held.release().await.expect("release"));
    });
}

/// On `client`: a hold of the Mutex `name` is extended to 30 s, and once its guard is dropped
/// released, both by the engine, long before the lease would end.
pub async fn the_engine_extends_and_releases(client: &LockClient, name: &str) {
    let lock = client.mutex(name);
    let mut guard = lock.lock().await.expect("lock");
    let extended = tokio::time::timeout(secs(10), guard.extend(secs(30))).await;
    assert!(
        matches!(extended, Ok(Ok(true))),
        "the extend was not confirmed within 10 s: {extended:?}"
    );
    drop(guard);
    eventually("the dropped guard's hold is released", async || {
        lock.inspect().await.expect("inspect").holders.is_empty()
    })
    .await;
}
