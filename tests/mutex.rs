//! Mutex behaviour, on a real redis-server and on the in-memory store.

mod support;
use support::backend::within_ok;
use support::quick::Quick;
use support::time::{ms, secs};
use support::Granted;

use std::time::Duration;

use redis_locks::testing::store::{Acquire, Family, Request};
use redis_locks::{LockClient, LockInfo};
use tokio::time::{timeout, Instant};

use support::backend::{Backend, EVENTUALLY};
use support::history::{History, Kind};

/// Load-heavy tests take this exclusively and timing-sensitive ones take it shared, so the
/// 1600-acquisition runs do not starve a 300 ms lease's renewal timer in the same process.
static LOAD: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn second_holder_is_refused(b: Backend) {
    let c = b.client().await;
    let m = c.mutex("second-holder");
    let g = m.lock().await.expect("lock");
    assert!(support::would_block(m.try_lock().await));
    assert!(g.release().await.expect("release"));
    let g2 = m.lock().timeout(secs(5)).await.expect("relock");
    assert!(g2.fencing_token() > 1);
}

/// 16 tasks on 2 clients take one mutex 100 times each; the shared log sees every overlap.
async fn sixteen_tasks_never_overlap(b: Backend) {
    let _load = LOAD.write().await;
    let clients = [b.client().await, b.client().await];
    let h = History::new();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let m = clients[i % 2].mutex("crowded");
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                let g = m.lock().await.expect("lock");
                let t = h.enter(Kind::Exclusive, g.fencing_token());
                // Give any other holder a chance to run inside the critical section.
                tokio::task::yield_now().await;
                h.exit(t);
                assert!(g.release().await.expect("release"), "lost the lock");
            }
        }));
    }
    for t in tasks {
        within_ok(secs(120), "1600 acquisitions within 2 minutes", t).await;
    }
    assert_eq!(h.grants().len(), 1600);
    h.check_exclusion();
}

/// A release by another token is refused and changes nothing.
async fn release_with_wrong_token_is_refused(b: Backend) {
    let c = b.client().await;
    let m = c.mutex("wrong-token");
    let g = m.lock().await.expect("lock");
    let before = m.inspect().await.expect("inspect");
    let raw_before = b
        .server
        .is_some()
        .then(|| b.cli(&["GET", "rl:{wrong-token}:w"]));
    let keys = c.keys("wrong-token").expect("keys");
    let other = Request::Mutex.claim(secs(30), secs(5));
    let released = c
        .store()
        .release(&keys, &other, None)
        .await
        .expect("release");
    assert!(!released, "a stranger's token released the lock");
    let after = m.inspect().await.expect("inspect");
    assert_eq!(after.holders.len(), 1);
    assert_eq!(
        after.holders[0].token_prefix,
        before.holders[0].token_prefix
    );
    assert_eq!(after.fence, before.fence);
    if let Some(raw) = raw_before {
        assert!(raw.contains('|'), "writer record: {raw}");
        assert_eq!(b.cli(&["GET", "rl:{wrong-token}:w"]), raw);
    }
    assert!(support::would_block(m.try_lock().await));
    assert!(g.is_held());
    assert!(g.release().await.expect("release"));
}

/// A holder that dies without any cleanup (no renewal, no release) blocks others until its
/// lease ends, and no longer.
async fn dead_holder_frees_within_its_lease(b: Backend) {
    let _quiet = LOAD.read().await;
    let lease = ms(1500);
    let c = b.client().await;
    let m = c.mutex("dead-holder").lease(lease).auto_renew(false);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let started = Instant::now();
    let holder = {
        let m = m.clone();
        tokio::spawn(async move {
            let g = m.lock().await.expect("lock");
            // A crash: the guard's Drop (which would release) never runs.
            std::mem::forget(g);
            tx.send(()).expect("signal");
            std::future::pending::<()>().await;
        })
    };
    rx.await.expect("holder locked");
    holder.abort();
    let _ = holder.await;

    let other = b.client().await.mutex("dead-holder");
    assert!(
        support::would_block(other.try_lock().await),
        "the dead holder's lease must still block"
    );
    let g = other
        .lock()
        .timeout(EVENTUALLY)
        .await
        .expect("lock after the lease");
    let waited = started.elapsed();
    assert!(
        waited + ms(50) >= lease,
        "granted after {waited:?}, before the lease of {lease:?} ended"
    );
    // The waiter wakes at the blocking lease's end; a generous margin for a slow machine.
    assert!(waited < lease + secs(5), "granted only after {waited:?}");
    assert!(g.release().await.expect("release"));
}

/// With renewal on, a 300 ms lease held for 2 s stays ours.
async fn renewed_lease_is_never_lost(b: Backend) {
    let _quiet = LOAD.read().await;
    let c = b.client().await;
    let m = c.mutex("renewed").lease(ms(300));
    let g = m.lock().await.expect("lock");
    let fence = g.fencing_token();
    let start = Instant::now();
    while start.elapsed() < secs(2) {
        tokio::select! {
            _ = g.lost() => panic!("lost() fired after {:?} with renewal on", start.elapsed()),
            _ = tokio::time::sleep(ms(50)) => {}
        }
        assert!(g.is_held(), "not held after {:?}", start.elapsed());
    }
    let rival = b.client().await.mutex("renewed");
    assert!(support::would_block(rival.try_lock().await));
    assert_eq!(m.inspect().await.expect("inspect").fence, fence);
    assert!(g.is_held());
    assert!(g.release().await.expect("release"), "the lease had lapsed");
}

/// 1000 acquisitions from 4 clients: fences strictly increase in grant order.
async fn fences_strictly_increase(b: Backend) {
    let _load = LOAD.write().await;
    let h = History::new();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let m = b.client().await.mutex("fenced");
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..250 {
                let g = m.lock().await.expect("lock");
                let t = h.enter(Kind::Exclusive, g.fencing_token());
                h.exit(t);
                assert!(g.release().await.expect("release"));
            }
        }));
    }
    for t in tasks {
        within_ok(secs(120), "1000 acquisitions within 2 minutes", t).await;
    }
    let grants = h.grants();
    assert_eq!(grants.len(), 1000);
    h.check_exclusion();
    let mut fences: Vec<u64> = grants.iter().map(|g| g.fence).collect();
    fences.dedup();
    assert_eq!(fences.len(), 1000, "a fence was handed out twice");
}

/// The acquire step repeated with the same token (a retry after a lost reply) returns the
/// same grant.
async fn acquire_is_idempotent_per_token(b: Backend) {
    let c = b.client().await;
    let keys = c.keys("idempotent").expect("keys");
    let store = c.store();
    let claim = Request::Mutex.claim(secs(30), secs(5));
    let first = store
        .acquire(&keys, &claim, false, None)
        .await
        .expect("1st");
    let second = store.acquire(&keys, &claim, true, None).await.expect("2nd");
    let (Acquire::Granted(a), Acquire::Granted(g)) = (first, second) else {
        panic!("not granted twice: {first:?} then {second:?}");
    };
    assert_eq!(a.fence, g.fence, "a retry took a new fence");
    let snap = store
        .inspect(&keys, Family::LeaseLock, None)
        .await
        .expect("inspect");
    assert_eq!(snap.fence, a.fence, "the retry bumped the fence counter");
    assert_eq!(snap.holders.len(), 1);
    assert_eq!(snap.holders[0].token, claim.token);
    let other = Request::Mutex.claim(secs(30), secs(5));
    assert!(matches!(
        store
            .acquire(&keys, &other, false, None)
            .await
            .expect("other"),
        Acquire::Busy(_)
    ));
    assert!(store.release(&keys, &claim, None).await.expect("release"));
}

/// With a 30 s fallback interval, only a wake-up can let a waiter in quickly after a release.
async fn waiter_is_woken_by_notification(b: Backend) {
    let _quiet = LOAD.read().await;
    let holder = b.client().await.mutex("notified").lease(secs(60));
    let g = holder.lock().await.expect("lock");
    let waiter_client = b
        .client_with(
            LockClient::builder()
                .retry_interval(secs(30))
                .heartbeat(secs(180)),
        )
        .await;
    let waiter = waiter_client.mutex("notified");
    let task = tokio::spawn(async move {
        let g = waiter.lock().await.expect("waiter lock");
        let at = Instant::now();
        assert!(g.release().await.expect("release"));
        at
    });
    // Let the waiter make its attempts and go to sleep (its next timer is ~30 s away).
    tokio::time::sleep(ms(700)).await;
    assert!(!task.is_finished(), "the waiter got a held lock");
    let released_at = Instant::now();
    assert!(g.release().await.expect("release"));
    let granted_at = within_ok(secs(20), "the waiter was never woken", task).await;
    let delay = granted_at.saturating_duration_since(released_at);
    assert!(
        delay < secs(5),
        "the waiter got the lock {delay:?} after the release: wake-ups do not arrive"
    );
}

/// `SCRIPT FLUSH` between calls: the scripts are loaded again and every step still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_between_calls() {
    let b = Backend::redis();
    let c = b.client().await;
    let m = c.mutex("flushed");
    let g = m.lock().await.expect("lock");
    assert_eq!(b.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert!(support::would_block(m.try_lock().await));
    assert_eq!(b.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(m.inspect().await.expect("inspect").holders.len(), 1);
    assert_eq!(b.cli(&["SCRIPT", "FLUSH"]), "OK");
    let mut g = g;
    assert!(g.extend(secs(20)).await.expect("extend"));
    assert_eq!(b.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert!(g.release().await.expect("release"));
    assert_eq!(b.cli(&["SCRIPT", "FLUSH"]), "OK");
    let g = m.lock().await.expect("lock again");
    assert!(g.release().await.expect("release"));
}

/// Runs every acquire path of `m`; each must fail with an invalid-input error at once.
async fn assert_all_invalid(what: &str, m: &redis_locks::Mutex) {
    let quick = secs(5);
    let e = timeout(quick, m.lock())
        .await
        .unwrap_or_else(|_| panic!("{what}: lock() waited instead of failing"))
        .expect_err(what);
    assert!(e.is_invalid_input(), "{what}: lock() gave {e:?}");
    let e = m.try_lock().await.expect_err(what);
    assert!(e.is_invalid_input(), "{what}: try_lock() gave {e:?}");
    let e = timeout(quick, m.lock().timeout(secs(1)))
        .await
        .unwrap_or_else(|_| panic!("{what}: lock_timeout() waited"))
        .expect_err(what);
    assert!(e.is_invalid_input(), "{what}: lock_timeout() gave {e:?}");
}

/// Bad names and options are refused before anything reaches Redis.
async fn invalid_input_is_refused_before_redis(b: Backend) {
    let c = b.client().await;
    let year = secs(365 * 24 * 3600);
    let long = "x".repeat(1025);
    let cases: Vec<(&str, redis_locks::Mutex)> = vec![
        ("empty name", c.mutex("")),
        ("1025-byte name", c.mutex(&long)),
        ("zero lease", c.mutex("bad").lease(Duration::ZERO)),
        ("two-year lease", c.mutex("bad").lease(2 * year)),
        (
            "renew_every == lease",
            c.mutex("bad").lease(secs(1)).renew_every(secs(1)),
        ),
        (
            "renew_every > lease",
            c.mutex("bad").lease(secs(1)).renew_every(secs(2)),
        ),
        ("zero heartbeat", c.mutex("bad").heartbeat(Duration::ZERO)),
    ];
    for (what, m) in &cases {
        assert_all_invalid(what, m).await;
    }
    // The longest valid name is accepted.
    let g = c
        .mutex(&"x".repeat(1024))
        .try_lock()
        .await
        .granted("1024 bytes");
    // A valid guard refuses an invalid extension without touching the lease.
    let mut g = g.expect("free");
    let e = g.extend(Duration::ZERO).await.expect_err("zero extend");
    assert!(e.is_invalid_input(), "{e:?}");
    assert!(g.release().await.expect("release"));
    if b.server.is_some() {
        // Only the fence counter of the valid lock remains; nothing of the bad ones.
        let keys = b.cli(&["KEYS", "*"]);
        assert_eq!(
            keys,
            format!("rl:{{{}}}:fence", "x".repeat(1024)),
            "unexpected keys"
        );
    }
}

/// On redis: DBSIZE stays 0 after every refused input.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_input_leaves_redis_empty() {
    let b = Backend::redis();
    let c = b.client().await;
    let year = secs(365 * 24 * 3600);
    assert_all_invalid("empty", &c.mutex("")).await;
    assert_all_invalid("long", &c.mutex(&"n".repeat(1025))).await;
    assert_all_invalid("zero lease", &c.mutex("m").lease(Duration::ZERO)).await;
    assert_all_invalid("huge lease", &c.mutex("m").lease(2 * year)).await;
    assert_all_invalid("renew", &c.mutex("m").lease(ms(500)).renew_every(ms(500))).await;
    assert_all_invalid("heartbeat", &c.mutex("m").heartbeat(Duration::ZERO)).await;
    assert_eq!(b.cli(&["DBSIZE"]), "0");
    // Client-wide defaults are checked when connecting.
    for builder in [
        LockClient::builder().lease(Duration::ZERO),
        LockClient::builder().heartbeat(Duration::ZERO),
        LockClient::builder().lease(2 * year),
    ] {
        let e = builder
            .connect(&b.server.as_ref().expect("private server").url())
            .await
            .expect_err("invalid default accepted");
        assert!(e.is_invalid_input(), "{e:?}");
    }
    assert_eq!(b.cli(&["DBSIZE"]), "0");
}

/// A key of another type (or foreign content) at the lock's keys gives a typed error and is
/// left exactly as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreign_keys_are_reported_and_kept() {
    let b = Backend::redis();
    let c = b.client().await;
    let quick = secs(5);

    let cases: [(&str, &[&str], &str); 4] = [
        ("hash-w", &["HSET", "rl:{hash-w}:w", "a", "b"], "hash"),
        ("zset-w", &["ZADD", "rl:{zset-w}:w", "1", "m"], "zset"),
        ("text-w", &["SET", "rl:{text-w}:w", "not a lock"], "string"),
        (
            "list-fence",
            &["RPUSH", "rl:{list-fence}:fence", "x"],
            "list",
        ),
    ];
    for (name, setup, ty) in cases {
        b.cli(setup);
        let key = setup[1];
        let dump = b.cli(&["DUMP", key]);
        let m = c.mutex(name);
        let e = timeout(quick, m.lock())
            .await
            .unwrap_or_else(|_| panic!("{name}: lock() waited on a foreign key"))
            .expect_err(name);
        assert!(e.is_wrong_type(), "{name}: lock() gave {e:?}");
        let e = m.try_lock().await.expect_err(name);
        assert!(e.is_wrong_type(), "{name}: try_lock() gave {e:?}");
        assert_eq!(b.cli(&["TYPE", key]), ty, "{name}: type changed");
        assert_eq!(b.cli(&["DUMP", key]), dump, "{name}: value changed");
        assert_eq!(b.cli(&["TTL", key]), "-1", "{name}: a TTL was set");
    }
    // Nothing else was written next to the foreign keys.
    assert_eq!(b.cli(&["DBSIZE"]), "4");
}

/// A fence counter holding text that is not a number is foreign data too: typed error,
/// value kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreign_fence_text_is_reported_and_kept() {
    let b = Backend::redis();
    let c = b.client().await;
    b.cli(&["SET", "rl:{text-fence}:fence", "not a number"]);
    let e = timeout(secs(5), c.mutex("text-fence").lock())
        .await
        .expect("lock() waited on a foreign key")
        .expect_err("a foreign fence was accepted");
    assert_eq!(b.cli(&["GET", "rl:{text-fence}:fence"]), "not a number");
    assert_eq!(b.cli(&["DBSIZE"]), "1");
    assert!(e.is_wrong_type(), "lock() gave {e:?}");
}

/// `inspect` shows the holder, its lease and the fence of its grant.
async fn fence_shows_in_inspect(b: Backend) {
    let c = b.client().await;
    let m = c.mutex("inspected");
    let g = m.lock().await.expect("lock");
    let info: LockInfo = m.inspect().await.expect("inspect");
    assert_eq!(info.fence, g.fencing_token());
    assert_eq!(info.holders.len(), 1);
    assert!(info.holders[0].lease_remaining > secs(20));
    assert!(g.release().await.expect("release"));
    let info = m.inspect().await.expect("inspect");
    assert!(info.holders.is_empty());
}

/// A release hands the mutex straight to a waiting claim and the wake-up carries the grant:
/// the waiter's guard comes back without another acquire, with the next fence, and the full
/// lease is claimed in the background (also with renewal off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_the_mutex_to_a_waiter_in_one_trip() {
    use std::sync::Arc;
    use support::faulty::{Faulty, Op};
    for auto_renew in [true, false] {
        let store = Faulty::new(Arc::new(redis_locks::testing::store::MemoryStore::new()));
        let c = LockClient::builder().store(store.clone()).expect("client");
        let m = c
            .mutex("handed")
            .lease(secs(30))
            .heartbeat(secs(120))
            .retry_interval(secs(60))
            .auto_renew(auto_renew);
        let holder = m.lock().await.expect("holder");
        let fence = holder.fencing_token();
        let waiter = {
            let m = m.clone();
            tokio::spawn(async move { m.lock().await })
        };
        // The waiter has announced itself (two attempts: before and after subscribing).
        let give_up = Instant::now() + EVENTUALLY;
        while store.count(Op::Acquire) < 3 {
            assert!(Instant::now() < give_up, "the waiter never attempted");
            tokio::time::sleep(ms(5)).await;
        }
        let acquires = store.count(Op::Acquire);
        let extends = store.count(Op::Extend);
        assert!(holder.release().await.expect("release"));
        let guard = within_ok(EVENTUALLY, "handed over", waiter)
            .await
            .expect("granted");
        assert_eq!(
            store.count(Op::Acquire),
            acquires,
            "the waiter attempted again"
        );
        assert!(guard.fencing_token() > fence);
        let give_up = Instant::now() + EVENTUALLY;
        while store.count(Op::Extend) == extends {
            assert!(Instant::now() < give_up, "the full lease was never claimed");
            tokio::time::sleep(ms(5)).await;
        }
        let info: LockInfo = m.inspect().await.expect("inspect");
        // The claim replaced the hand-off window (the 120 s heartbeat) with the 30 s lease
        // (a renewal's deadline is rounded up to an even millisecond: see `Store::renew`).
        let left = info.holders[0].lease_remaining;
        assert!(left <= ms(30_001) && left > secs(20), "{info:?}");
        assert!(guard.is_held());
        assert!(guard.release().await.expect("release"));
    }
}

/// Wake-ups for many names at once: one client waits on 1,000 distinct locks (with a retry
/// interval far longer than the test, so only notifications can wake it), another releases
/// them all. Every waiter is granted, the client holds one subscription per waited-on name,
/// and once the waits are over the subscriptions are all dropped (after their linger time):
/// no channel leaks with name churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_names_are_woken_and_unsubscribed() {
    const N: usize = 1000;
    let _load = LOAD.write().await;
    let b = Backend::redis();
    let holder = b.client().await;
    let waiter = b.client().await;
    let mut held = Vec::with_capacity(N);
    for i in 0..N {
        let g = holder.locked(&format!("churn-{i}")).await;
        held.push(g);
    }
    let mut tasks = Vec::with_capacity(N);
    for i in 0..N {
        let m = waiter
            .mutex(&format!("churn-{i}"))
            .retry_interval(secs(600));
        tasks.push(tokio::spawn(
            async move { m.lock().timeout(secs(300)).await },
        ));
    }
    let channels = || -> usize {
        let listed = b.cli(&["PUBSUB", "CHANNELS", "rl:{churn-*"]);
        listed.lines().filter(|l| !l.is_empty()).count()
    };
    let start = Instant::now();
    while channels() < N {
        assert!(
            start.elapsed() < EVENTUALLY,
            "only {} of {N} subscribed",
            channels()
        );
        tokio::time::sleep(ms(50)).await;
    }
    for g in held {
        assert!(g.release().await.expect("release"));
    }
    let granted = timeout(EVENTUALLY, async {
        let mut guards = Vec::with_capacity(N);
        for t in tasks {
            guards.push(t.await.expect("task").expect("granted"));
        }
        guards
    })
    .await
    .expect("every waiter is woken by its release, not by its 600 s interval");
    assert_eq!(granted.len(), N);
    for g in granted {
        assert!(g.release().await.expect("release"));
    }
    // Subscriptions linger 5 s after their last waiter, then go.
    let start = Instant::now();
    while channels() > 0 {
        assert!(
            start.elapsed() < EVENTUALLY,
            "{} channels still subscribed",
            channels()
        );
        tokio::time::sleep(ms(200)).await;
    }
}

both_backends!(
    second_holder_is_refused,
    sixteen_tasks_never_overlap,
    release_with_wrong_token_is_refused,
    dead_holder_frees_within_its_lease,
    renewed_lease_is_never_lost,
    fences_strictly_increase,
    acquire_is_idempotent_per_token,
    waiter_is_woken_by_notification,
    invalid_input_is_refused_before_redis,
    fence_shows_in_inspect,
);
