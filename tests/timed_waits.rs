//! Timed waits on a server that answers slowly: every step of a `.timeout(d)` wait, its last
//! attempt and its clean-up included, ends by the deadline plus one response timeout
//! (docs/GUARANTEES.md, "Waiters outlive an outage"), and a busy lock is reported as busy
//! (`is_timeout()`), not as an unreachable server. On a real redis-server and in memory.

mod support;
use support::faulty::faulty_client;

use std::time::Duration;

use redis_locks::RedisConfig;
use tokio::time::Instant;

use support::backend::Backend;
use support::faulty::{Op, Rule};
use support::time::ms;

/// The response timeout of a client built on a store (the default).
const RESPONSE: Duration = RedisConfig::DEFAULT_RESPONSE_TIMEOUT;
/// Scheduling slack on a loaded 2-core machine; one response timeout too many is 2 s.
const SLACK: Duration = Duration::from_millis(400);

/// A busy lock whose acquire replies take 1 s and release replies 1.9 s (each within the
/// response timeout): the wait's last attempt and the withdrawal of its claim share the one
/// response timeout past the deadline.
async fn a_timed_wait_ends_by_its_deadline_plus_one_response_timeout(b: Backend) {
    let holder = b.client().await;
    let (faulty, c) = faulty_client(&b).await;
    let g = holder.mutex("slow-bound").lock().await.expect("lock");
    faulty.add(Rule::on(Op::Acquire).delay_reply(ms(1_000)));
    faulty.add(Rule::on(Op::Release).delay_reply(ms(1_900)));
    let started = Instant::now();
    let e = c
        .mutex("slow-bound")
        .lock()
        .timeout(ms(100))
        .await
        .expect_err("busy");
    let took = started.elapsed();
    assert!(
        took <= ms(100) + RESPONSE + SLACK,
        "[{}] a 100 ms wait took {took:?} ({e})",
        b.kind
    );
    faulty.clear();
    g.release().await.expect("release");
}

/// A busy lock on a server that answers every attempt in 1.9 s: the refusal comes after the
/// deadline, and the wait ends as a timeout (the lock was busy), not as an outage.
async fn a_busy_lock_on_a_slow_server_is_a_timeout(b: Backend) {
    let holder = b.client().await;
    let (faulty, c) = faulty_client(&b).await;
    let g = holder.mutex("slow-busy").lock().await.expect("lock");
    faulty.add(Rule::on(Op::Acquire).delay_reply(ms(1_900)));
    let e = c
        .mutex("slow-busy")
        .lock()
        .timeout(ms(100))
        .await
        .expect_err("busy");
    assert!(
        e.is_timeout(),
        "[{}] a busy lock on a slow server: `{e}` (is_connection: {})",
        b.kind,
        e.is_connection()
    );
    faulty.clear();
    g.release().await.expect("release");
}

/// A timed multi-lock wait on a busy part whose first attempt's reply is lost (the server
/// refused it), and whose clean-up releases answer late and are lost: it still ends by its
/// deadline plus one response timeout, and what it may have left is released in the
/// background (the parts are free for another client afterwards).
async fn a_timed_multi_lock_wait_ends_by_its_deadline_with_slow_cleanup(b: Backend) {
    let holder = b.client().await;
    let (faulty, c) = faulty_client(&b).await;
    let g = holder.mutex("slow-multi-b").lock().await.expect("lock");
    faulty.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
    faulty.add(Rule::on(Op::Release).delay_reply(ms(1_500)).lose_reply());
    let started = Instant::now();
    let e = c
        .multi_lock(["slow-multi-a", "slow-multi-b"])
        .lock()
        .timeout(ms(100))
        .await
        .expect_err("busy");
    let took = started.elapsed();
    assert!(
        took <= ms(100) + RESPONSE + SLACK,
        "[{}] a 100 ms multi-lock wait took {took:?} ({e})",
        b.kind
    );
    faulty.clear();
    g.release().await.expect("release");
    support::backend::eventually("both parts free", async || {
        holder
            .multi_lock(["slow-multi-a", "slow-multi-b"])
            .try_lock()
            .await
            .is_ok()
    })
    .await;
}

both_backends!(
    a_timed_wait_ends_by_its_deadline_plus_one_response_timeout,
    a_busy_lock_on_a_slow_server_is_a_timeout,
    a_timed_multi_lock_wait_ends_by_its_deadline_with_slow_cleanup,
);
