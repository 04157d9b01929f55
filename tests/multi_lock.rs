//! Multi-locks (`LockClient::multi_lock`, `multi_rwlock`), on a real redis-server and on the
//! in-memory store: all or none, canonical order, no deadlock, nothing left behind.

mod support;
use support::quick::{soon, Quick};
use support::time::{ms, secs};
use support::Granted;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use redis_locks::{LockClient, Preference, MAX_MULTI_NAMES};

use support::backend::{eventually, join, Backend, EVENTUALLY};

/// True when no live hold of the lease lock remains on `name`.
async fn free(c: &LockClient, name: &str) -> bool {
    c.mutex_info(name).await.holders.is_empty()
}

async fn takes_every_name_in_one_step(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let g = c
        .multi_lock(["m1:b", "m1:a", "m1:c"])
        .lock()
        .await
        .expect("multi");
    assert!(g.is_held());
    assert_eq!(g.names().collect::<Vec<_>>(), ["m1:a", "m1:b", "m1:c"]);
    for name in ["m1:a", "m1:b", "m1:c"] {
        assert!(
            other.mutex(name).try_lock().await.granted(name).is_none(),
            "{name} is held"
        );
        assert!(
            other.rwlock(name).try_read().await.granted(name).is_none(),
            "{name} is written"
        );
        let info = other.mutex(name).inspect().await.expect("inspect");
        assert_eq!(info.holders.len(), 1, "{name}");
        assert_eq!(
            info.fence,
            g.fencing_token(name).expect("a part"),
            "{name}: its own fence"
        );
    }
    assert!(g.release().await.expect("release"));
    for name in ["m1:a", "m1:b", "m1:c"] {
        assert!(free(&other, name).await, "{name} released");
    }
}

async fn a_busy_part_takes_nothing_and_the_wait_is_woken(b: Backend) {
    let c = b.client().await;
    let holder = b.client().await;
    let held = holder.mutex("m2:b").lock().await.expect("hold b");
    assert!(c
        .multi_lock(["m2:a", "m2:b"])
        .try_lock()
        .await
        .granted("try")
        .is_none());
    assert!(free(&c, "m2:a").await, "a refused try holds nothing");
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            // Woken by the release, not by the (long) retry interval.
            c.multi_lock(["m2:a", "m2:b"])
                .retry_interval(secs(60))
                .lock()
                .await
        })
    };
    tokio::time::sleep(ms(100)).await;
    assert!(free(&c, "m2:a").await, "a waiting multi-lock holds nothing");
    assert!(!waiter.is_finished());
    held.release().await.expect("release b");
    let g = join("multi-lock after the release", waiter)
        .await
        .expect("multi");
    assert!(g.is_held());
}

async fn a_timeout_leaves_nothing_held(b: Backend) {
    let c = b.client().await;
    let held = c.mutex("m3:z").lock().await.expect("hold z");
    let err = c
        .multi_lock(["m3:a", "m3:z"])
        .lock()
        .timeout(ms(150))
        .await
        .expect_err("busy");
    assert!(err.is_timeout(), "{err}");
    assert!(free(&c, "m3:a").await);
    drop(held);
}

async fn a_dropped_wait_leaves_nothing_held(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    for round in 0..30u64 {
        let names = ["m4:a", "m4:b", "m4:c"];
        let held = other.mutex("m4:b").lock().await.expect("hold b");
        let multi = c.multi_lock(names);
        let wait = multi.lock();
        let releaser = async {
            tokio::time::sleep(ms(round % 5)).await;
            held.release().await.expect("release");
        };
        // Cancel the wait at varying instants around the release: before, while the grant is
        // in flight, after.
        let cancel_after = ms(round % 7);
        let (_, outcome) = tokio::join!(releaser, tokio::time::timeout(cancel_after, wait));
        drop(outcome);
        eventually(
            "every part released after a cancelled multi-lock",
            async || {
                let mut all = true;
                for name in names {
                    all &= free(&other, name).await;
                }
                all
            },
        )
        .await;
    }
}

async fn opposite_orders_never_deadlock(b: Backend) {
    let names = ["m5:a", "m5:b", "m5:c", "m5:d"];
    let inside = Arc::new(AtomicU64::new(0));
    let overlap = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for worker in 0..6usize {
        let c = b.client().await;
        let (inside, overlap) = (inside.clone(), overlap.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..15usize {
                // Each worker names two or three of the names, in its own order.
                let mut mine: Vec<&str> = names
                    .iter()
                    .cycle()
                    .skip(worker + round)
                    .take(2 + (worker + round) % 2)
                    .copied()
                    .collect();
                if worker % 2 == 1 {
                    mine.reverse();
                }
                let g = c.multi_lock(mine.clone()).lock().await.expect("multi");
                // "m5:a" is in most sets: a second holder of it would show here.
                if mine.contains(&"m5:a") && inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlap.store(true, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                if mine.contains(&"m5:a") {
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
                assert!(g.release().await.expect("release"));
            }
        }));
    }
    for t in tasks {
        join("every worker finishes (no deadlock)", t).await;
    }
    assert!(!overlap.load(Ordering::SeqCst), "two holders of m5:a");
}

async fn readers_share_and_writers_exclude(b: Backend) {
    let c = b.client().await;
    let r1 = c
        .multi_rwlock(["m6:prices", "m6:stock"], ["m6:report"])
        .lock()
        .await
        .expect("first reader");
    let r2 = c
        .multi_rwlock(["m6:prices"], ["m6:other"])
        .try_lock()
        .await
        .expect("a second reader of prices");
    assert!(c
        .rwlock("m6:prices")
        .try_write()
        .await
        .granted("w")
        .is_none());
    assert!(c
        .multi_rwlock(["m6:report"], Vec::<&str>::new())
        .try_lock()
        .await
        .granted("read of a written part")
        .is_none());
    assert_eq!(
        r1.fencing_token("m6:prices"),
        Some(0),
        "a read part reports the last writer's fence (none yet)"
    );
    drop((r1, r2));
    let w = c
        .rwlock("m6:prices")
        .write()
        .timeout(EVENTUALLY)
        .await
        .expect("writer after the readers left");
    w.release().await.expect("release");
}

async fn bad_input_is_refused_before_any_call(b: Backend) {
    let c = b.client().await;
    let empty = c
        .multi_lock(Vec::<String>::new())
        .lock()
        .await
        .expect_err("empty");
    assert!(empty.is_invalid_input(), "{empty}");
    let both = c
        .multi_rwlock(["m7:x"], ["m7:x"])
        .try_lock()
        .await
        .expect_err("read and write");
    assert!(both.is_invalid_input(), "{both}");
    assert!(both.to_string().contains("m7:x"), "{both}");
    let many: Vec<String> = (0..=MAX_MULTI_NAMES).map(|i| format!("m7:{i}")).collect();
    let too_many = c.multi_lock(many).lock().await.expect_err("too many");
    assert!(too_many.is_invalid_input(), "{too_many}");
    let bad_name = c
        .multi_lock(["m7:ok", ""])
        .lock()
        .await
        .expect_err("empty name");
    assert!(bad_name.is_invalid_input(), "{bad_name}");
    let fair = c
        .multi_rwlock(["m7:a"], ["m7:b"])
        .preference(Preference::Fair)
        .lock()
        .await
        .expect_err("fair");
    assert!(
        matches!(fair, redis_locks::Error::Unsupported { .. }),
        "{fair}"
    );
    // Duplicates count once.
    let g = c.multi_lock(["m7:d", "m7:d"]).lock().await.expect("dup");
    assert_eq!(g.names().count(), 1);
    g.release().await.expect("release");
    for name in ["m7:x", "m7:a", "m7:b", "m7:ok"] {
        assert!(free(&c, name).await, "{name}");
    }
}

async fn a_name_held_by_the_ticket_queue_is_a_family_conflict(b: Backend) {
    let c = b.client().await;
    let fair = c.fair_lock("m8:q").lock().await.expect("fair");
    let err = c
        .multi_lock(["m8:a", "m8:q"])
        .lock()
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(err.to_string().contains("m8:q"), "names the part: {err}");
    assert!(free(&c, "m8:a").await);
    drop(fair);
}

async fn losing_one_part_is_losing_the_guard(b: Backend) {
    let c = b.client().await;
    let g = c
        .multi_lock(["m9:a", "m9:b"])
        .lease(ms(300))
        .lock()
        .await
        .expect("multi");
    assert!(g.is_held());
    c.force_release("m9:b").await.expect("force");
    soon("lost() fires when one part is gone", g.lost()).await;
    assert!(!g.is_held());
    let err = g.run_while_held(async {}).await.expect_err("lost");
    assert!(err.to_string().contains("m9:b"), "{err}");
    assert!(free(&c, "m9:a").await, "the other part is released too");
}

async fn parts_renew_while_the_guard_lives(b: Backend) {
    let c = b.client().await;
    let mut g = c
        .multi_lock(["m10:a", "m10:b"])
        .lease(ms(200))
        .lock()
        .await
        .expect("multi");
    tokio::time::sleep(ms(700)).await;
    assert!(g.is_held(), "renewed past three leases");
    assert!(g.extend(secs(30)).await.expect("extend"));
    let left = c.mutex("m10:a").inspect().await.expect("inspect").holders[0].lease_remaining;
    assert!(left > secs(20), "{left:?}");
    assert!(g.release().await.expect("release"));
}

both_backends!(
    takes_every_name_in_one_step,
    a_busy_part_takes_nothing_and_the_wait_is_woken,
    a_timeout_leaves_nothing_held,
    a_dropped_wait_leaves_nothing_held,
    opposite_orders_never_deadlock,
    readers_share_and_writers_exclude,
    bad_input_is_refused_before_any_call,
    a_name_held_by_the_ticket_queue_is_a_family_conflict,
    losing_one_part_is_losing_the_guard,
    parts_renew_while_the_guard_lives,
);

/// A key of a part holding foreign data fails the attempt before anything is written: the
/// other parts stay free.
#[tokio::test]
async fn a_foreign_key_fails_the_step_before_any_grant() {
    let b = Backend::redis();
    let c = b.client().await;
    b.cli(&["SET", "rl:{m11:b}:fence", "not a counter"]);
    let err = c
        .multi_lock(["m11:a", "m11:b"])
        .lock()
        .await
        .expect_err("corrupt fence");
    assert!(!err.is_timeout(), "{err}");
    assert!(free(&c, "m11:a").await, "no part granted: {err}");
    b.cli(&["DEL", "rl:{m11:b}:fence"]);
    b.cli(&["LPUSH", "rl:{m11:b}:r", "x"]);
    let err = c
        .multi_rwlock(["m11:b"], ["m11:a"])
        .lock()
        .await
        .expect_err("a list where readers are");
    assert!(free(&c, "m11:a").await, "no part granted: {err}");
}

/// Quorum mode cannot make the grant atomic across servers: refused with a typed error.
#[tokio::test]
async fn quorum_mode_refuses_multi_locks() {
    let servers = [
        support::RedisServer::start(),
        support::RedisServer::start(),
        support::RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let c = LockClient::quorum(&urls).await.expect("quorum");
    let err = c.multi_lock(["a", "b"]).lock().await.expect_err("quorum");
    assert!(
        matches!(err, redis_locks::Error::Unsupported { .. }),
        "{err}"
    );
}
