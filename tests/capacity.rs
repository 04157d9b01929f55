//! Capacity agreement on a ticket queue name: a FairLock (whole capacity, fixed) and
//! Semaphores of one capacity never hold side by side, and `set_permits` never resizes a
//! capacity a FairLock relies on. Covers the capacity marker (kept, stale, replaced, and
//! alive as long as its holders), `set_permits` beside FairLocks (holding, waiting, gone,
//! lapsed) and mixed FairLock/Semaphore contention, on a real redis-server and on the
//! in-memory store.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis_locks::testing::store::RedisStore;
use redis_locks::LockClient;
use tokio::time::{sleep, timeout, Instant};

use support::backend::{eventually, Backend};
use support::faulty::{Faulty, Op, Rule};
use support::time::{ms, secs};

// ------------------------------------------------------------------------------------------
// set_permits beside a FairLock
// ------------------------------------------------------------------------------------------

/// A FairLock A holds (marker `=1`). `set_permits(1)` on a Semaphore of the same name is
/// accepted (the count equals the fixed capacity) and replaces the fixed marker with a
/// plain stored count. A second FairLock B queues (a stored count equal to its capacity is
/// fine for it). Now `set_permits(2)` finds no fixed marker and is accepted too, and its
/// promote grants B beside A: two FairLock guards say `is_held()`.
async fn set_permits_cannot_resize_a_fair_lock_in_use(backend: Backend) {
    let label = backend.kind;
    let name = "capacity-setpermits-fairlock";
    let client = backend.client().await;
    let other = backend.client().await;

    let a = client.fair_lock(name).lock().await.expect("A locks");
    let sem = other.semaphore(name, 1);
    let first = sem.set_permits(1).await;
    eprintln!(
        "[{label}] set_permits(1) beside the FairLock holder: {:?}",
        first.as_ref()
    );

    let b_lock = other.fair_lock(name);
    let b_task = tokio::spawn(async move { b_lock.lock().await });
    eventually("B queued", || async {
        let info = client.fair_lock(name).inspect().await.expect("inspect");
        info.waiters.len() == 1
    })
    .await;

    let second = sem.set_permits(2).await;
    let b = match timeout(ms(1500), b_task).await {
        Ok(joined) => joined.expect("B's task").ok(),
        Err(_) => None,
    };
    let both = a.is_held() && b.as_ref().is_some_and(|b| b.is_held());
    assert!(
        !both,
        "[{label}] two FairLock guards say is_held(): A (fence {}) and B (fence {:?}); \
         set_permits(1) -> {:?}, set_permits(2) -> {:?}",
        a.fencing_token(),
        b.as_ref().map(|b| b.fencing_token()),
        first.as_ref(),
        second.as_ref(),
    );
    assert!(
        second.as_ref().is_err_and(|e| e.is_capacity_conflict()),
        "[{label}] set_permits(2) while a FairLock holds must be a capacity conflict: {:?}",
        second
    );
    drop(b);
    drop(a);
}

/// Without the intermediate `set_permits(1)`, the FairLock's `=1` marker refuses
/// `set_permits(2)` (holds).
async fn set_permits_refused_beside_a_fair_lock(backend: Backend) {
    let label = backend.kind;
    let name = "capacity-setpermits-fairlock-direct";
    let client = backend.client().await;
    let a = client.fair_lock(name).lock().await.expect("A locks");
    let second = client.semaphore(name, 1).set_permits(2).await;
    assert!(
        second.as_ref().is_err_and(|e| e.is_capacity_conflict()),
        "[{label}] set_permits(2) beside a FairLock holder: {:?}",
        second
    );
    drop(a);
}

/// A FairLock used the name once and is gone (released). Only a Semaphore(1) uses the queue
/// now. `set_permits` is documented to be refused only "while a FairLock/fair RwLock uses the
/// queue": here none does, so it must succeed.
async fn set_permits_after_fair_lock_left(b: Backend) {
    let c = b.leased(ms(2_000)).await;
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
    let c = b.leased(ms(300)).await;
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
    let c = b.leased(ms(300)).await;
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

// ------------------------------------------------------------------------------------------
// The capacity marker lives as long as its holders
// ------------------------------------------------------------------------------------------

/// A Semaphore(1) holder A (lease 8 s) leaves the marker `~1`, alive 8 s. A FairLock waiter W
/// (heartbeat 300 ms) queues behind it: same capacity, so the marker is upgraded to `=1`,
/// but it is written with `SET .. PX` for the latest deadline *this run* saw, W's heartbeat
/// deadline, not A's lease. W's process dies (its release never reaches the store); 300 ms
/// later the marker is gone although A holds for seconds more, and a Semaphore(3) of the same
/// name is granted a permit beside A's whole-capacity permit.
async fn capacity_marker_outlives_its_holders(backend: Backend) {
    let label = backend.kind;
    let name = "capacity-marker-upgrade";
    let direct = backend.client().await;
    let w_store = Faulty::new(backend.store().await);
    let w_client = LockClient::builder()
        .store(w_store.clone())
        .expect("client");
    // W "dies": none of its releases ever reaches the store.
    let _never = w_store.hold_requests(Rule::on(Op::Release));

    let a = direct
        .semaphore(name, 1)
        .lease(secs(8))
        .acquire()
        .await
        .expect("A takes the only permit");
    let w_lock = w_client.fair_lock(name).heartbeat(ms(300));
    let w_task = tokio::spawn(async move { w_lock.lock().await });
    eventually("W queued and heartbeating", || {
        let n = w_store.calls(Op::Acquire).len();
        async move { n >= 3 }
    })
    .await;
    if let Some(server) = &backend.server {
        // The marker after W's upgrade: `=1`, alive for W's heartbeat, not A's lease.
        let key = format!("rl:{{{name}}}:cap");
        let (value, pttl): (Option<String>, i64) = {
            let probe = RedisStore::connect(&server.url()).await.expect("connect");
            let value = probe.query(redis::cmd("GET").arg(&key)).await.expect("GET");
            let pttl = probe
                .query(redis::cmd("PTTL").arg(&key))
                .await
                .expect("PTTL");
            (value, pttl)
        };
        eprintln!("[{label}] with W queued: {key} = {value:?}, PTTL {pttl} ms (A's lease: 8 s)");
    }
    w_task.abort();
    let _ = w_task.await;
    // W's last heartbeat deadline passes; A's lease (8 s) is far from over.
    sleep(ms(800)).await;

    let intruder = direct.semaphore(name, 3).try_acquire().await;
    let info = direct.semaphore(name, 1).inspect().await.expect("inspect");
    let got = intruder.is_ok();
    assert!(
        !(a.is_held() && got),
        "[{label}] Semaphore(3) got a permit beside Semaphore(1)'s only permit (A still \
         held): holders {:?}",
        info.holders
    );
    eprintln!(
        "[{label}] Semaphore(3) beside A: {:?}",
        intruder.as_ref().map(|p| p.num_permits())
    );
    drop(intruder);
    drop(a);
}

// ------------------------------------------------------------------------------------------
// FairLocks and Semaphores on one name
// ------------------------------------------------------------------------------------------

/// Never a FairLock holder next to a Semaphore(5) permit, across marker kinds and staleness:
/// FairLock held -> Semaphore(5) refused; permit held -> FairLock refused; Semaphore(1)
/// permit + FairLock waiting -> set_permits(5) refused (else the waiter would be granted next
/// to 4 more permits).
async fn fair_lock_and_semaphore_never_coexist(b: Backend) {
    let c = b.leased(ms(2_000)).await;
    let d = b.leased(ms(2_000)).await;
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

both_backends!(
    set_permits_cannot_resize_a_fair_lock_in_use,
    set_permits_refused_beside_a_fair_lock,
    set_permits_after_fair_lock_left,
    set_permits_after_fair_lock_lapsed,
    set_permits_while_semaphore_keeps_queue_busy,
    capacity_marker_outlives_its_holders,
    fair_lock_and_semaphore_never_coexist,
    mixed_capacity_contention,
);
