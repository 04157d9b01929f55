//! FairLock behaviour (arrival order, dead and cancelled waiters, hand-off), on a real
//! redis-server and on the in-memory store.
//!
//! Arrival order is made certain by starting one waiter at a time and waiting until
//! `inspect` shows it in the queue before starting the next.

mod support;
use support::backend::within_ok;
use support::quick::soon;
use support::time::{ms, secs};

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::testing::store::{Acquire, Family, Request};
use redis_locks::{FairLock, FairLockGuard, LockClient, LockInfo};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use support::backend::{eventually, join, until_waiters, Backend, EVENTUALLY};
use support::faulty::{Faulty, Op};
use support::history::{History, Kind};
use support::queue::{dead_waiter, is};

/// The ticket slot of a FairLock (one permit of one).
async fn info(lock: &FairLock) -> LockInfo {
    lock.inspect().await.expect("inspect")
}

/// Starts waiter `i` on `lock`: it records its grant in `history` under its index, holds
/// for `hold`, and releases. Returns once the waiter is visibly queued as the `queued`-th.
async fn start_waiter(
    lock: &FairLock,
    history: &History,
    i: usize,
    hold: Duration,
    queued: usize,
) -> JoinHandle<u64> {
    let (lock2, history) = (lock.clone(), history.clone());
    let task = tokio::spawn(async move {
        let guard = lock2.lock().await.expect("lock");
        let fence = guard.fencing_token();
        let ticket = history.enter_as(i.to_string(), Kind::Exclusive, fence);
        tokio::time::sleep(hold).await;
        history.exit(ticket);
        assert!(
            guard.release().await.expect("release"),
            "waiter {i} lost its hold"
        );
        fence
    });
    until_waiters(queued, || lock.inspect()).await;
    task
}

/// Grant order recorded in `history`, as waiter indices.
fn grant_order(history: &History) -> Vec<usize> {
    history
        .grants()
        .iter()
        .map(|g| g.task.parse().expect("waiter index"))
        .collect()
}

/// Pairs (i, j) with i < j in arrival order but j granted first.
fn inversions(order: &[usize]) -> usize {
    let mut n = 0;
    for a in 0..order.len() {
        for b in a + 1..order.len() {
            if order[a] > order[b] {
                n += 1;
            }
        }
    }
    n
}

async fn eight_waiters_acquire_in_arrival_order(b: Backend) {
    let clients = [b.client().await, b.client().await];
    let locks: Vec<FairLock> = clients.iter().map(|c| c.fair_lock("eight")).collect();
    for rep in 0..20 {
        let history = History::new();
        let holder = locks[0].lock().await.expect("holder");
        let mut tasks = Vec::new();
        for i in 0..8 {
            let lock = &locks[i % 2];
            tasks.push(start_waiter(lock, &history, i, ms(1), i + 1).await);
        }
        assert!(holder.release().await.expect("release holder"));
        for t in tasks {
            join("waiter of eight", t).await;
        }
        let order = grant_order(&history);
        assert_eq!(inversions(&order), 0, "rep {rep}: order {order:?}");
        assert_eq!(order, (0..8).collect::<Vec<_>>(), "rep {rep}");
        history.check_exclusion();
    }
    let after = info(&locks[0]).await;
    assert!(
        after.holders.is_empty() && after.waiters.is_empty(),
        "{after:?}"
    );
}

async fn fifty_waiters_on_three_clients_acquire_once_in_ticket_order(b: Backend) {
    let mut locks = Vec::new();
    for _ in 0..3 {
        locks.push(b.client().await.fair_lock("fifty"));
    }
    let history = History::new();
    let holder = locks[0].lock().await.expect("holder");
    let mut tasks = Vec::new();
    for i in 0..50 {
        let lock = &locks[i % 3];
        tasks.push(start_waiter(lock, &history, i, ms(2), i + 1).await);
    }
    // Tickets come from the server's counter: the queue shows them strictly increasing.
    let queued = info(&locks[1]).await;
    assert_eq!(queued.waiters.len(), 50);
    assert!(queued
        .waiters
        .iter()
        .enumerate()
        .all(|(i, w)| w.position == i));
    assert!(holder.release().await.expect("release holder"));
    let mut fences = Vec::new();
    for t in tasks {
        fences.push(join("waiter of fifty", t).await);
    }
    let order = grant_order(&history);
    assert_eq!(
        order,
        (0..50).collect::<Vec<_>>(),
        "each once, in ticket order"
    );
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences {fences:?}");
    history.check_exclusion();
}

async fn dead_waiter_in_the_middle_is_dropped_after_its_heartbeat(b: Backend) {
    // Live parties heartbeat on a 60 s window, so a dead waiter that reached the head (and
    // were granted for a claim window) would hold everyone up far past EVENTUALLY: the test
    // passes only if the dead one is dropped from the middle of the queue.
    let client = b
        .client_with(LockClient::builder().heartbeat(secs(60)))
        .await;
    let lock = client.fair_lock("dead-middle");
    let history = History::new();
    let holder = lock.lock().await.expect("holder");
    let first = start_waiter(&lock, &history, 0, Duration::ZERO, 1).await;
    let dead = dead_waiter(&client, "dead-middle", Request::FairLock, ms(300)).await;
    let before = until_waiters(2, || lock.inspect()).await;
    assert!(
        is(&before.waiters[1].token_prefix, &dead),
        "dead one is 2nd"
    );
    let last = start_waiter(&lock, &history, 2, Duration::ZERO, 3).await;
    let queue = info(&lock).await;
    assert_eq!(queue.waiters.len(), 3);
    assert!(
        is(&queue.waiters[1].token_prefix, &dead),
        "dead one in the middle"
    );

    // Its heartbeat lapses: the queue no longer shows it; the live ones keep their places.
    let after = until_waiters(2, || lock.inspect()).await;
    assert!(after.waiters.iter().all(|w| !is(&w.token_prefix, &dead)));
    assert_eq!(after.waiters[0].token_prefix, queue.waiters[0].token_prefix);
    assert_eq!(after.waiters[1].token_prefix, queue.waiters[2].token_prefix);

    let fence = holder.fencing_token();
    assert!(holder.release().await.expect("release"));
    let f0 = join("first live waiter", first).await;
    let f2 = join("waiter behind the dead one", last).await;
    assert_eq!(grant_order(&history), vec![0, 2]);
    // Nobody (the dead one included) was granted in between.
    assert!(f0 > fence && f2 > f0, "{fence} < {f0} < {f2}");
    // Nothing is left behind: no hold, no place in the queue.
    let keys = client.keys("dead-middle").expect("keys");
    let snap = client
        .store()
        .inspect(&keys, Family::TicketQueue, None)
        .await
        .expect("inspect");
    assert!(
        snap.holders.is_empty() && snap.waiters.is_empty(),
        "{snap:?}"
    );
}

async fn dead_waiter_at_the_head_is_dropped_after_its_own_heartbeat(b: Backend) {
    // The holder's handle has a long heartbeat window; the dead waiter's own window is 2 s.
    // A release that grants the (dead) head must not let it hold the lock longer than the
    // dead waiter's own window ("a granted-but-dead waiter must not hold it longer
    // than its heartbeat window"), whatever window the releaser was configured with.
    let client = b.client().await;
    let window = secs(2);
    let holder_lock = client.fair_lock("dead-head").heartbeat(secs(120));
    let lock = client.fair_lock("dead-head").heartbeat(window);
    let history = History::new();
    let holder = holder_lock.lock().await.expect("holder");
    let dead = dead_waiter(&client, "dead-head", Request::FairLock, window).await;
    let live = start_waiter(&lock, &history, 1, Duration::ZERO, 2).await;
    assert!(is(&info(&lock).await.waiters[0].token_prefix, &dead));
    let fence = holder.fencing_token();
    assert!(holder.release().await.expect("release"));
    // If the release granted the dead head (it was still live), it holds for a claim window
    // no longer than its own heartbeat window (its deadline made odd: 1 ms more at most).
    let after = info(&lock).await;
    for h in after.holders.iter().filter(|h| is(&h.token_prefix, &dead)) {
        assert!(
            h.lease_remaining <= window + ms(1),
            "the dead head was granted for {:?}, past its own heartbeat window {window:?}",
            h.lease_remaining
        );
    }
    let f = join("live waiter behind a dead head", live).await;
    assert!(f > fence);
}

async fn cancelled_waiters_leave_at_once(b: Backend) {
    // A 60 s heartbeat: leaving the queue can only come from the cancellation itself.
    let client = b
        .client_with(LockClient::builder().heartbeat(secs(60)))
        .await;
    let lock = client.fair_lock("cancel");
    let holder = lock.lock().await.expect("holder");

    let l2 = lock.clone();
    let timed = tokio::spawn(async move { l2.lock().timeout(ms(500)).await });
    until_waiters(1, || lock.inspect()).await;
    let history = History::new();
    let patient = start_waiter(&lock, &history, 1, Duration::ZERO, 2).await;
    let patient_prefix = info(&lock).await.waiters[1].token_prefix.clone();
    let err = join("timed-out waiter", timed)
        .await
        .expect_err("the holder keeps the lock past the timeout");
    assert!(err.is_timeout(), "{err}");
    // lock_timeout removes its ticket before returning the error.
    let now = info(&lock).await;
    assert_eq!(now.waiters.len(), 1, "{now:?}");
    assert_eq!(now.waiters[0].token_prefix, patient_prefix);
    assert_eq!(now.waiters[0].position, 0, "the patient one moved up");

    // A dropped lock() future leaves too (released in the background, well before 60 s).
    let l3 = lock.clone();
    let dropped = tokio::spawn(async move { l3.lock().await.map(|_| ()) });
    until_waiters(2, || lock.inspect()).await;
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    let now = until_waiters(1, || lock.inspect()).await;
    assert_eq!(now.waiters[0].token_prefix, patient_prefix);

    // A dropped lock_with (position callback) future as well.
    let l4 = lock.clone();
    let dropped = tokio::spawn(async move { l4.lock().on_position(|_| {}).await.map(|_| ()) });
    until_waiters(2, || lock.inspect()).await;
    dropped.abort();
    let _ = dropped.await;
    until_waiters(1, || lock.inspect()).await;

    let fence = holder.fencing_token();
    assert!(holder.release().await.expect("release"));
    assert!(join("patient waiter", patient).await > fence);
}

async fn dead_holder_hands_over_after_its_lease(b: Backend) {
    let client = b.client().await;
    let lease = ms(1500);
    let dying = client
        .fair_lock("dead-holder")
        .lease(lease)
        .auto_renew(false);
    let lock = client.fair_lock("dead-holder");
    let start = Instant::now();
    let guard = dying.lock().await.expect("holder");
    let fence = guard.fencing_token();
    // Dropping a guard releases in the background; forgetting it is a crash.
    std::mem::forget(guard);
    let history = History::new();
    let waiter = start_waiter(&lock, &history, 0, Duration::ZERO, 1).await;
    let f = join("head waiter after the dead holder's lease", waiter).await;
    let waited = start.elapsed();
    assert!(f > fence);
    // Safety: the lease ran its full length before anyone else got the lock (a little slack
    // for the millisecond clock).
    assert!(
        waited + ms(20) >= lease,
        "granted after {waited:?}, before the lease {lease:?} ended"
    );
}

/// The head of the queue is told when the holder's lease ends, and attempts then: a dead
/// holder's lock is taken over at its lease end, not at the waiter's next heartbeat (30 s /
/// 3 here; before the hint a takeover waited for it).
async fn head_waiter_wakes_at_a_dead_holders_lease_end(b: Backend) {
    let client = b.client().await;
    let lease = ms(300);
    let dying = client
        .fair_lock("dead-holder-hint")
        .lease(lease)
        .auto_renew(false);
    let waiting = client
        .fair_lock("dead-holder-hint")
        .heartbeat(secs(30))
        .retry_interval(secs(30));
    let guard = dying.lock().await.expect("holder");
    std::mem::forget(guard);
    let start = Instant::now();
    let what = "taken over at the lease end, not at a 10 s heartbeat";
    let taken = within_ok(secs(5), what, waiting.lock()).await;
    assert!(start.elapsed() + ms(20) >= lease);
    taken.release().await.expect("release");
}

async fn try_lock_never_jumps_the_queue(b: Backend) {
    let owner = b.client().await.fair_lock("no-jump");
    let third = b.client().await.fair_lock("no-jump");
    let holder = owner.lock().await.expect("holder");
    let history = History::new();
    // The waiter holds until told, so the state after the hand-off can be checked.
    let (go, wait_go) = tokio::sync::oneshot::channel::<()>();
    let w = owner.clone();
    let h2 = history.clone();
    let waiter = tokio::spawn(async move {
        let guard: FairLockGuard = w.lock().await.expect("waiter");
        let t = h2.enter_as("waiter", Kind::Exclusive, guard.fencing_token());
        let _ = wait_go.await;
        h2.exit(t);
        guard.release().await.expect("release")
    });
    until_waiters(1, || owner.inspect()).await;
    assert!(support::would_block(third.try_lock().await), "held");
    // try_lock never stays queued.
    assert_eq!(info(&owner).await.waiters.len(), 1);

    assert!(holder.release().await.expect("release"));
    // The release handed the lock to the waiter: a third party arriving now is refused.
    assert!(
        support::would_block(third.try_lock().await),
        "try_lock jumped the queue right after the release"
    );
    eventually("the waiter holds", || {
        let h = history.clone();
        async move { !h.grants().is_empty() }
    })
    .await;
    assert!(support::would_block(third.try_lock().await), "waiter holds");
    go.send(()).expect("waiter listens");
    assert!(join("waiter", waiter).await);
    let free = third.try_lock().await.expect("free and nobody waits");
    assert!(free.release().await.expect("release"));
}

async fn lock_with_reports_decreasing_positions(b: Backend) {
    // Short retry interval: the waiter re-attempts (and learns its place) often.
    let client = b
        .client_with(LockClient::builder().retry_interval(ms(30)))
        .await;
    let lock = client.fair_lock("positions");
    let holder = lock.lock().await.expect("holder");
    let history = History::new();
    let mut ahead = Vec::new();
    for i in 0..3 {
        ahead.push(start_waiter(&lock, &history, i, ms(250), i + 1).await);
    }
    let seen = Arc::new(StdMutex::new(Vec::<u64>::new()));
    let (l, s, h) = (lock.clone(), seen.clone(), history.clone());
    let last = tokio::spawn(async move {
        let guard = l
            .lock()
            .on_position(move |p| s.lock().expect("positions").push(p))
            .await
            .expect("lock_with");
        let t = h.enter_as("3", Kind::Exclusive, guard.fencing_token());
        h.exit(t);
        guard.release().await.expect("release")
    });
    until_waiters(4, || lock.inspect()).await;
    tokio::time::sleep(ms(100)).await;
    assert!(holder.release().await.expect("release"));
    for t in ahead {
        join("waiter ahead", t).await;
    }
    assert!(join("positioned waiter", last).await);
    assert_eq!(grant_order(&history), vec![0, 1, 2, 3]);
    let seen = seen.lock().expect("positions").clone();
    assert_eq!(seen.first(), Some(&3), "three ahead at first: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] >= w[1]),
        "never grows: {seen:?}"
    );
    let mut distinct = seen.clone();
    distinct.dedup();
    assert!(distinct.len() >= 2, "progress was reported: {seen:?}");
    // `lock_with` documents one call "each time it changes": no repeats.
    assert_eq!(
        seen, distinct,
        "on_position was called again with an unchanged position"
    );
}

async fn ten_thousand_queued_waiters(b: Backend) {
    const N: usize = 10_000;
    let name = "ten-thousand";
    // The real waiters must outlive the (slow, on the in-memory store in debug builds) filling.
    let client = b
        .client_with(LockClient::builder().heartbeat(secs(60)))
        .await;
    let lock = client.fair_lock(name);
    let keys = client.keys(name).expect("keys");
    let holder = lock.lock().await.expect("holder");
    let history = History::new();
    let first = start_waiter(&lock, &history, 0, Duration::ZERO, 1).await;

    // N raw waiters with a long heartbeat (five minutes: they never heartbeat, and a loaded
    // machine took 75 s to get through them), enqueued by a few concurrent tasks. Nobody
    // leaves while they enqueue, so the place each one was told (waiters ahead) is its final
    // place.
    let mut fillers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (store, keys) = (client.store().clone(), keys.clone());
        fillers.spawn(async move {
            let mut claims = Vec::new();
            for _ in 0..N / 8 {
                let c = Request::FairLock.claim(secs(300), secs(300));
                let r = store.acquire(&keys, &c, true, None).await.expect("enqueue");
                let Acquire::Busy(busy) = r else {
                    panic!("a filler was granted: {r:?}")
                };
                claims.push((busy.position.expect("queued"), c));
                // The in-memory store never suspends: let the real waiters' tasks run.
                tokio::task::yield_now().await;
            }
            claims
        });
    }
    let mut fillers_in_order = Vec::new();
    while let Some(batch) = fillers.join_next().await {
        fillers_in_order.extend(batch.expect("filler"));
    }
    fillers_in_order.sort_by_key(|(position, _)| *position);
    let positions: Vec<u64> = fillers_in_order.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        positions,
        (1..=N as u64).collect::<Vec<_>>(),
        "one place each"
    );

    // The last real waiter; its first reported position proves it queued (polling inspect
    // over 10,000 waiters would cost far more than the test itself).
    let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
    let (l, h) = (lock.clone(), history.clone());
    let last = tokio::spawn(async move {
        let mut queued_tx = Some(queued_tx);
        let guard = l
            .lock()
            .on_position(move |p| {
                if let Some(tx) = queued_tx.take() {
                    let _ = tx.send(p);
                }
            })
            .await
            .expect("lock");
        let fence = guard.fencing_token();
        h.exit(h.enter_as("1", Kind::Exclusive, fence));
        assert!(guard.release().await.expect("release"));
        fence
    });
    let ahead = within_ok(EVENTUALLY, "the last waiter queued", queued_rx).await;
    assert_eq!(
        ahead,
        N as u64 + 1,
        "behind the first waiter and every filler"
    );

    // The real waiter at the head gets the lock past the crowd behind it.
    let fence = holder.fencing_token();
    assert!(holder.release().await.expect("release"));
    let head = join("head waiter", first).await;
    assert!(head > fence);

    // Each filler is granted in its turn: releasing it reports a live hold only if the
    // previous release handed it the lock.
    for (i, (_, c)) in fillers_in_order.iter().enumerate() {
        let held = client
            .store()
            .release(&keys, c, None)
            .await
            .expect("release");
        assert!(held, "filler {i} was not the holder at its turn");
    }
    let f = join("real waiter behind 10,000", last).await;
    // One grant per filler in between: each filler's release above found it the holder.
    assert!(f > head, "the real waiter's grant came after the fillers'");
    assert_eq!(grant_order(&history), vec![0, 1]);
    history.check_exclusion();
    let end = info(&lock).await;
    assert!(end.holders.is_empty() && end.waiters.is_empty(), "{end:?}");
    if let Some(server) = &b.server {
        // Left: the fence counter and the capacity marker, until their TTL (the last
        // lease) runs out.
        let pattern = format!("rl:{{{name}}}:*");
        let left = server.cli(&["KEYS", &pattern]);
        let cap = keys.key("cap");
        for key in left.lines() {
            assert!(key == keys.fence() || key == cap, "{key} left behind");
            let pttl: i64 = server.cli(&["PTTL", key]).parse().expect("PTTL");
            assert!(pttl > 0, "{key} has no TTL ({pttl})");
        }
    }
}

async fn no_key_outlives_the_lock(b: Backend) {
    let name = "leftovers";
    let client = b.client().await;
    // Keys may outlive their last holder by up to the longest lease granted in them (the
    // holder set's and the capacity marker's TTLs only grow): a short lease keeps that short.
    let lock = client.fair_lock(name).lease(secs(2));
    let holder = lock.lock().await.expect("holder");
    let history = History::new();
    let live = start_waiter(&lock, &history, 0, Duration::ZERO, 1).await;
    let _dead = dead_waiter(&client, name, Request::FairLock, ms(300)).await;
    let l2 = lock.clone();
    let timed = tokio::spawn(async move { l2.lock().timeout(ms(200)).await });
    until_waiters(3, || lock.inspect()).await;
    if let Some(server) = &b.server {
        // While in use, every key of the lock carries a TTL, the fence counter too.
        let pattern = format!("rl:{{{name}}}:*");
        let listed = server.cli(&["KEYS", &pattern]);
        let all: Vec<&str> = listed.lines().collect();
        assert!(
            all.len() >= 4,
            "holders, queue, heartbeats, tickets, fence: {all:?}"
        );
        for key in all {
            let pttl: i64 = server.cli(&["PTTL", key]).parse().expect("PTTL");
            assert!(pttl > 0, "{key} has no TTL ({pttl})");
        }
    }
    assert!(join("timed waiter", timed).await.is_err());
    assert!(holder.release().await.expect("release"));
    join("live waiter", live).await;
    // The dead waiter's place lapses on its own, with no further calls.
    eventually("the lock is empty", || {
        let lock = lock.clone();
        async move {
            let i = info(&lock).await;
            i.holders.is_empty() && i.waiters.is_empty()
        }
    })
    .await;
    if let Some(server) = &b.server {
        let pattern = format!("rl:{{{name}}}:*");
        eventually("no key is left", || {
            let left = server.cli(&["KEYS", &pattern]);
            async move { left.is_empty() }
        })
        .await;
    }
}

/// A release grants the next waiter and its wake-up carries the grant: the waiter returns a
/// guard without another round trip, then claims its full lease in the background. With
/// renewal on and off, the hold outlives the short claim window (the heartbeat) it was handed.
async fn handed_off_waiter_claims_its_full_lease(b: Backend) {
    let c = b.client().await;
    for auto_renew in [true, false] {
        let name = format!("handoff-{auto_renew}");
        let fair = c
            .fair_lock(&name)
            .lease(secs(30))
            .heartbeat(ms(1500))
            .auto_renew(auto_renew);
        let holder = fair.lock().await.expect("holder");
        let fence = holder.fencing_token();
        let waiter = {
            let fair = fair.clone();
            tokio::spawn(async move { fair.lock().await })
        };
        until_waiters(1, || fair.inspect()).await;
        assert!(holder.release().await.expect("release"));
        let guard = join("handed-off waiter", waiter).await.expect("granted");
        assert!(guard.fencing_token() > fence, "the grant's own fence");
        assert!(guard.is_held());
        // The background claim lifts the lease from the claim window to the full lease.
        eventually("full lease claimed", || {
            let fair = fair.clone();
            async move {
                let i = info(&fair).await;
                i.holders.len() == 1 && i.holders[0].lease_remaining > secs(2)
            }
        })
        .await;
        // Past the claim window the hold is still there, locally and on the server.
        tokio::time::sleep(ms(1800)).await;
        assert!(
            guard.is_held(),
            "auto_renew={auto_renew}: lost after the claim window"
        );
        assert_eq!(info(&fair).await.holders.len(), 1);
        assert!(support::would_block(fair.try_lock().await));
        assert!(guard.release().await.expect("release"));
    }
}

/// The hand-off costs the woken waiter no acquire round trip: the release's wake-up carries
/// the grant, and the waiter's only call afterwards is the background claim (an extend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_needs_no_acquire_round_trip() {
    let store = Faulty::new(Arc::new(redis_locks::testing::store::MemoryStore::new()));
    let c = LockClient::builder().store(store.clone()).expect("client");
    // Long intervals: the waiter makes no heartbeat attempt during the measurement.
    let fair = c
        .fair_lock("counted")
        .heartbeat(secs(120))
        .retry_interval(secs(60));
    let holder = fair.lock().await.expect("holder");
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move { fair.lock().await })
    };
    until_waiters(1, || fair.inspect()).await;
    let acquires_before = store.count(Op::Acquire);
    let extends_before = store.count(Op::Extend);
    holder.release().await.expect("release");
    let guard = join("waiter", waiter).await.expect("granted");
    assert_eq!(
        store.count(Op::Acquire),
        acquires_before,
        "the woken waiter attempted again instead of using the grant it was sent"
    );
    eventually("background claim", || {
        let n = store.count(Op::Extend);
        async move { n > extends_before }
    })
    .await;
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// `on_position` counts the waiters queued ahead, not the holders: a waiter behind a live
/// holder with nobody else queued is told `0` (next in line) while it still waits, and one
/// queued behind it `1`; neither is granted until the holder leaves.
async fn on_position_counts_waiters_ahead_not_holders(b: Backend) {
    let client = b.client().await;
    let lock = client.fair_lock("position-zero");
    let holder = lock.lock().await.expect("holder");
    let mut waiters = Vec::new();
    let mut seen = Vec::new();
    for i in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let l = lock.clone();
        waiters.push(tokio::spawn(async move {
            l.lock()
                .on_position(move |ahead| {
                    let _ = tx.send(ahead);
                })
                .await
        }));
        until_waiters(i + 1, || lock.inspect()).await;
        seen.push(rx);
    }
    for (i, rx) in seen.iter_mut().enumerate() {
        let first = soon("a position is reported", rx.recv())
            .await
            .expect("sender alive");
        assert_eq!(first, i as u64, "waiter {i}: waiters queued ahead of it");
    }
    assert!(holder.is_held(), "the holder still holds");
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "nobody granted yet"
    );
    assert!(holder.release().await.expect("release"));
    for w in waiters {
        let guard = join("waiter", w).await.expect("granted");
        guard.release().await.expect("release");
    }
}

both_backends!(
    on_position_counts_waiters_ahead_not_holders,
    handed_off_waiter_claims_its_full_lease,
    eight_waiters_acquire_in_arrival_order,
    fifty_waiters_on_three_clients_acquire_once_in_ticket_order,
    dead_waiter_in_the_middle_is_dropped_after_its_heartbeat,
    dead_waiter_at_the_head_is_dropped_after_its_own_heartbeat,
    cancelled_waiters_leave_at_once,
    dead_holder_hands_over_after_its_lease,
    head_waiter_wakes_at_a_dead_holders_lease_end,
    try_lock_never_jumps_the_queue,
    lock_with_reports_decreasing_positions,
    ten_thousand_queued_waiters,
    no_key_outlives_the_lock,
);
