//! Adversarial checks of the capacity marker (kept, stale, replaced), hand-off freshness and
//! serialized renewals, through the public API. Each test asserts a documented guarantee
//! (docs/GUARANTEES.md), on a real redis-server and on the in-memory store.

#[macro_use]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::LockClient;
use tokio::time::{sleep, timeout, Instant};

use support::backend::Backend;
use support::faulty::{Faulty, Op, Rule};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- 1. capacity marker -------------------------------------------------------------------

// ---- 2. hand-off --------------------------------------------------------------------------

// ---- 3. renewals / extend -----------------------------------------------------------------

/// A renewal for a long lease is slow on the wire; meanwhile `extend` shortens the lease.
/// At every point, the local `valid_until()` must not be beyond the server's deadline.
async fn extend_shorter_behind_slow_renewal(b: Backend) {
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder()
        .lease(ms(3_000))
        .store(faulty.clone())
        .expect("client");
    let server = b.client().await;
    // Every renewal for the 3 s lease takes 400 ms to reach the store.
    faulty.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(ms(3_000)))
            .delay_request(ms(400)),
    );
    let mut g = c.mutex("ext").lock().await.unwrap();
    // The renewer fires at a third of the lease (~1 s): be inside its 400 ms flight.
    sleep(ms(1_150)).await;
    let check = |g: &redis_locks::MutexGuard, srv: Duration, what: &str| {
        let local = g.valid_until().saturating_duration_since(Instant::now());
        assert!(
            local <= srv + ms(30),
            "[{}] {what}: valid_until {local:?} ahead, server {srv:?}",
            b.kind
        );
    };
    assert!(g.extend(ms(600)).await.unwrap());
    for i in 0..10 {
        let info = server.mutex("ext").inspect().await.unwrap();
        let srv = info
            .holders
            .first()
            .map(|h| h.lease_remaining)
            .unwrap_or_default();
        check(&g, srv, &format!("after extend, probe {i}"));
        sleep(ms(40)).await;
    }
    // And a longer extend while a (now 600 ms) renewal is pending.
    assert!(g.extend(ms(3_000)).await.unwrap());
    let info = server.mutex("ext").inspect().await.unwrap();
    let srv = info
        .holders
        .first()
        .map(|h| h.lease_remaining)
        .unwrap_or_default();
    check(&g, srv, "after long extend");
    drop(g);
}

both_backends!(extend_shorter_behind_slow_renewal);
