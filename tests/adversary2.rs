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

/// A FairLock used the name once and is gone (released). Only a Semaphore(1) uses the queue
/// now. `set_permits` is documented to be refused only "while a FairLock/fair RwLock uses the
/// queue": here none does, so it must succeed.
async fn set_permits_after_fair_lock_left(b: Backend) {
    let c = b.client_with(LockClient::builder().lease(ms(2_000))).await;
    let g = c.fair_lock("cap-a").lock().await.unwrap();
    assert!(g.release().await.unwrap());
    let sem = c.semaphore("cap-a", 1);
    let p = sem.acquire().await.unwrap();
    let r = sem.set_permits(5).await;
    assert!(
        r.is_ok(),
        "[{}] set_permits refused although no FairLock uses the queue (only a Semaphore(1) permit is held): {r:?}",
        b.kind
    );
    drop(p);
}

/// Same, but the FairLock's lease has fully lapsed too (so on Redis its marker's TTL is
/// over). Redis and memory must agree.
async fn set_permits_after_fair_lock_lapsed(b: Backend) {
    let c = b.client_with(LockClient::builder().lease(ms(300))).await;
    let g = c.fair_lock("cap-b").lock().await.unwrap();
    assert!(g.release().await.unwrap());
    sleep(ms(700)).await;
    let sem = c.semaphore("cap-b", 1);
    let p = sem.acquire().await.unwrap();
    let r = sem.set_permits(5).await;
    assert!(
        r.is_ok(),
        "[{}] set_permits refused after the FairLock lapsed long ago: {r:?}",
        b.kind
    );
    drop(p);
}

/// The FairLock used the name once, 300 ms lease, released at once. From then on only
/// Semaphore(1) permits (renewed) use the queue, for 1.5 s: far beyond anything the
/// FairLock's marker had to cover. `set_permits(5)` must be accepted.
async fn set_permits_while_semaphore_keeps_queue_busy(b: Backend) {
    let c = b.client_with(LockClient::builder().lease(ms(300))).await;
    let g = c.fair_lock("cap-c").lock().await.unwrap();
    assert!(g.release().await.unwrap());
    let sem = c.semaphore("cap-c", 1).lease(ms(400));
    let p = sem.acquire().await.unwrap();
    sleep(ms(1_500)).await;
    assert!(p.is_held());
    let r = sem.set_permits(5).await;
    assert!(
        r.is_ok(),
        "[{}] set_permits refused 1.2 s after the FairLock's lease ended, with only a \
         Semaphore(1) permit in use: {r:?}",
        b.kind
    );
    drop(p);
}

/// Never a FairLock holder next to a Semaphore(5) permit, across marker kinds and staleness:
/// FairLock held -> Semaphore(5) refused; permit held -> FairLock refused; Semaphore(1)
/// permit + FairLock waiting -> set_permits(5) refused (else the waiter would be granted next
/// to 4 more permits).
async fn fair_lock_and_semaphore_never_coexist(b: Backend) {
    let c = b.client_with(LockClient::builder().lease(ms(2_000))).await;
    let d = b.client_with(LockClient::builder().lease(ms(2_000))).await;
    // a. FairLock holds.
    let g = c.fair_lock("mix").lock().await.unwrap();
    let r = d.semaphore("mix", 5).try_acquire().await;
    assert!(
        matches!(&r, Err(e) if e.is_capacity_conflict()),
        "[{}] a: {r:?}",
        b.kind
    );
    g.release().await.unwrap();
    // b. Stale '=1' marker; a Semaphore(5) takes over, then a FairLock is refused.
    let p = d.semaphore("mix", 5).acquire().await.unwrap();
    let r = c.fair_lock("mix").try_lock().await;
    assert!(
        matches!(&r, Err(e) if e.is_capacity_conflict()),
        "[{}] b: {r:?}",
        b.kind
    );
    p.release().await.unwrap();
    // c. Semaphore(1) holds; a FairLock waits (marker upgraded to '=1'); set_permits(5).
    let p1 = d.semaphore("mix", 1).acquire().await.unwrap();
    let fl = c.fair_lock("mix");
    let waiter = tokio::spawn(async move { fl.lock().await });
    sleep(ms(300)).await;
    let r = d.semaphore("mix", 1).set_permits(5).await;
    assert!(
        r.is_err(),
        "[{}] c: set_permits(5) accepted while a FairLock waits",
        b.kind
    );
    p1.release().await.unwrap();
    let fg = timeout(ms(5_000), waiter).await.unwrap().unwrap().unwrap();
    assert!(fg.is_held());
    let r = d.semaphore("mix", 5).try_acquire().await;
    assert!(
        matches!(&r, Err(e) if e.is_capacity_conflict()),
        "[{}] c2: {r:?}",
        b.kind
    );
    let r = d.semaphore("mix", 1).try_acquire().await;
    assert!(
        matches!(&r, Err(e) if e.is_would_block()),
        "[{}] c3: {r:?}",
        b.kind
    );
    fg.release().await.unwrap();
}

/// Contention: FairLock users and Semaphore(3) users on one name, with short leases and
/// renewals, for a few seconds. Never a FairLock guard `is_held()` while a permit guard
/// `is_held()`, and never more than 3 permits.
async fn mixed_capacity_contention(b: Backend) {
    let fair = Arc::new(AtomicUsize::new(0));
    let sem = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + ms(4_000);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let c = b
            .client_with(
                LockClient::builder()
                    .lease(ms(400))
                    .heartbeat(ms(300))
                    .retry_interval(ms(50)),
            )
            .await;
        let (fair, sem) = (fair.clone(), sem.clone());
        let kind = b.kind;
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            while Instant::now() < end {
                if i % 2 == 0 {
                    match c.fair_lock("contend").lock().timeout(ms(300)).await {
                        Ok(g) => {
                            fair.fetch_add(1, Ordering::SeqCst);
                            let s = sem.load(Ordering::SeqCst);
                            let f = fair.load(Ordering::SeqCst);
                            assert!(g.is_held());
                            assert!(
                                s == 0 && f == 1,
                                "[{kind}] fair holder beside {s} permits / {f} fair"
                            );
                            sleep(ms(5)).await;
                            fair.fetch_sub(1, Ordering::SeqCst);
                            g.release().await.ok();
                        }
                        Err(e) if e.is_capacity_conflict() || e.is_timeout() => {
                            conflicts += 1;
                            sleep(ms(3)).await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                } else {
                    match c.semaphore("contend", 3).acquire().timeout(ms(300)).await {
                        Ok(p) => {
                            let s = sem.fetch_add(1, Ordering::SeqCst) + 1;
                            let f = fair.load(Ordering::SeqCst);
                            assert!(p.is_held());
                            assert!(
                                f == 0 && s <= 3,
                                "[{kind}] permit beside {f} fair holders / {s} permits"
                            );
                            sleep(ms(5)).await;
                            sem.fetch_sub(1, Ordering::SeqCst);
                            p.release().await.ok();
                        }
                        Err(e) if e.is_capacity_conflict() || e.is_timeout() => {
                            conflicts += 1;
                            sleep(ms(3)).await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

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

both_backends!(
    set_permits_after_fair_lock_left,
    set_permits_after_fair_lock_lapsed,
    set_permits_while_semaphore_keeps_queue_busy,
    fair_lock_and_semaphore_never_coexist,
    mixed_capacity_contention,
    extend_shorter_behind_slow_renewal
);
