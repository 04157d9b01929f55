//! Multi-locks (`multi_lock`, `multi_rwlock`) under faults: churn over overlapping names in
//! random orders with cancellations, opposite orders, refusals, timeouts and cancels,
//! per-name fences, lapsed guards, short leases renewed late, parts held by a ticket queue,
//! lost replies (a TCP proxy stalls them) and bad input. On a real redis-server and on the
//! in-memory store.
//!
//! Every test asserts its property: never a writer of a name beside another holder of it,
//! write fences strictly increase per name, no deadlock, and a refused, timed-out or
//! cancelled step holds nothing (all or nothing).

mod support;
use support::quick::in_time;
use support::quick::Quick;
use support::Granted;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::{Error, LockClient, Preference, RedisConfig, MAX_MULTI_NAMES, MAX_NAME_LEN};
use tokio::time::Instant;

use support::backend::{join, Backend};
use support::faulty::{Faulty, Op, Rule};
use support::proxy::slow_client;
use support::rng::Rng;
use support::time::{ms, secs};
use support::waits::{lease_free, within, BEFORE_THE_LEASE};

// ------------------------------------------------------------------------------------------
// churn over overlapping names
// ------------------------------------------------------------------------------------------

#[derive(Default)]
struct Occupancy {
    /// name -> (writers, readers) currently inside, as the guards say.
    inside: HashMap<String, (u32, u32)>,
    /// name -> the largest fence seen so far.
    fences: HashMap<String, u64>,
}

enum Held {
    Multi(redis_locks::MultiGuard),
    Mutex(redis_locks::MutexGuard),
    Read(redis_locks::ReadGuard),
}

const NAMES: [&str; 5] = ["mx:a", "mx:b", "mx:c", "mx:d", "mx:e"];

async fn multi_worker(
    c: LockClient,
    id: u64,
    occ: Arc<StdMutex<Occupancy>>,
    until: Instant,
) -> u64 {
    let mut rng = Rng::new(1000 + id);
    let mut wins = 0;
    while Instant::now() < until {
        // A random subset in a random order.
        let mut names: Vec<&str> = NAMES.to_vec();
        for i in (1..names.len()).rev() {
            names.swap(i, rng.below(i as u64 + 1) as usize);
        }
        names.truncate(1 + rng.below(4) as usize);
        let split = rng.below(names.len() as u64 + 1) as usize;
        let (reads, writes) = names.split_at(split);
        let op = rng.below(6);
        let cancel_after = ms(1 + rng.below(80));
        let attempt = async {
            match op {
                0 => c
                    .multi_lock(names.iter().copied())
                    .try_lock()
                    .await
                    .map(Held::Multi),
                1 | 2 => c
                    .multi_lock(names.iter().copied())
                    .lock()
                    .timeout(ms(rng_free(id, wins, 100)))
                    .await
                    .map(Held::Multi),
                3 => {
                    let pref = if id.is_multiple_of(2) {
                        Preference::Writer
                    } else {
                        Preference::Reader
                    };
                    c.multi_rwlock(reads.iter().copied(), writes.iter().copied())
                        .preference(pref)
                        .lock()
                        .timeout(ms(rng_free(id, wins, 100)))
                        .await
                        .map(Held::Multi)
                }
                4 => c
                    .mutex(names[0])
                    .lock()
                    .timeout(ms(50))
                    .await
                    .map(Held::Mutex),
                _ => c
                    .rwlock(names[0])
                    .read()
                    .timeout(ms(50))
                    .await
                    .map(Held::Read),
            }
        };
        let held = match tokio::time::timeout(cancel_after, attempt).await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) if e.is_would_block() || e.is_timeout() => continue,
            Ok(Err(e)) => panic!("worker {id} op {op}: {e}"),
            Err(_) => continue, // cancelled mid-wait
        };
        // What the guard says it holds, with its fences.
        let parts: Vec<(String, bool, u64)> = match &held {
            Held::Multi(g) => {
                assert!(g.is_held());
                g.fencing_tokens()
                    .map(|(n, f)| (n.to_owned(), op != 3 || writes.contains(&n), f))
                    .collect()
            }
            Held::Mutex(g) => vec![(names[0].to_owned(), true, g.fencing_token())],
            Held::Read(g) => vec![(names[0].to_owned(), false, g.fencing_token())],
        };
        {
            let mut o = occ.lock().unwrap();
            for (name, write, fence) in &parts {
                let (w, r) = o.inside.get(name).copied().unwrap_or((0, 0));
                if *write {
                    assert!(
                        w == 0 && r == 0,
                        "{name}: a writer beside {w} writers, {r} readers"
                    );
                } else {
                    assert!(w == 0, "{name}: a reader beside a writer");
                }
                let best = o.fences.get(name).copied().unwrap_or(0);
                if *write {
                    assert!(
                        *fence > best,
                        "{name}: write fence {fence} not above {best}"
                    );
                } else {
                    assert!(*fence >= best, "{name}: read fence {fence} below {best}");
                }
                o.fences.insert(name.clone(), best.max(*fence));
                let e = o.inside.entry(name.clone()).or_default();
                if *write {
                    e.0 += 1
                } else {
                    e.1 += 1
                }
            }
        }
        wins += 1;
        tokio::time::sleep(ms(rng.below(4))).await;
        {
            let mut o = occ.lock().unwrap();
            for (name, write, _) in &parts {
                let e = o.inside.get_mut(name).expect("entered");
                if *write {
                    e.0 -= 1
                } else {
                    e.1 -= 1
                }
            }
        }
        match (held, rng.below(2)) {
            (Held::Multi(g), 0) => assert!(g.release().await.expect("release"), "held to the end"),
            (Held::Mutex(g), 0) => assert!(g.release().await.expect("release")),
            (Held::Read(g), 0) => assert!(g.release().await.expect("release")),
            (h, _) => drop(h),
        }
    }
    wins
}

fn rng_free(id: u64, n: u64, max: u64) -> u64 {
    1 + (id * 31 + n * 17) % max
}

/// Churn over five names: multi-locks over random subsets in random orders (exclusive and
/// read/write, both preferences), single mutexes and readers, tries, timed waits, random
/// cancellations, releases and drops. No writer ever beside another holder of a name (as the
/// guards say), write fences strictly increase per name, reads never report an older fence,
/// no deadlock (the run ends), and nothing is left held at the end.
async fn multi_churn_exclusion_fences_no_deadlock(b: Backend) {
    let occ = Arc::new(StdMutex::new(Occupancy::default()));
    let until = Instant::now() + ms(3000);
    let mut tasks = Vec::new();
    for id in 0..4 {
        let c = b.client().await;
        tasks.push(tokio::spawn(multi_worker(c, id, occ.clone(), until)));
    }
    let mut wins = 0;
    for t in tasks {
        wins += join("worker", t).await;
    }
    assert!(
        wins > 20,
        "only {wins} grants in 3 s: starved or deadlocked"
    );
    let c = b.client().await;
    // Dropped and cancelled holds are released at once, not after their 30 s lease.
    for name in NAMES {
        within(BEFORE_THE_LEASE, "every name free at the end", async || {
            lease_free(&c, name).await
        })
        .await;
    }
}

/// Opposite orders over overlapping names, exclusive and mixed read/write, many rounds: no
/// deadlock, every round ends.
async fn multi_opposite_orders_never_deadlock(b: Backend) {
    let mut tasks = Vec::new();
    for id in 0..4u64 {
        let c = b.client().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                let g = match id {
                    0 => c.multi_lock(["dl:a", "dl:b", "dl:c"]).lock().await,
                    1 => c.multi_lock(["dl:c", "dl:b", "dl:a"]).lock().await,
                    2 => c.multi_rwlock(["dl:a"], ["dl:c"]).lock().await,
                    _ => c.multi_rwlock(["dl:c"], ["dl:a", "dl:b"]).lock().await,
                }
                .expect("multi");
                tokio::task::yield_now().await;
                g.release().await.expect("release");
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.expect("task");
        }
    };
    in_time(ms(15000), "no deadlock within 15 s", all).await;
}

type Registry = StdMutex<Vec<(Arc<redis_locks::MultiGuard>, Vec<(String, bool)>)>>;

/// Short-lease multi-locks (30 ms, some renewals late) held past their lease, over random
/// overlapping subsets: a checker samples every live guard every half millisecond; among the
/// guards saying `is_held()`, never a writer of a name beside another holder of it.
async fn multi_short_leases_never_conflict(b: Backend) {
    let reg: Arc<Registry> = Arc::new(StdMutex::new(Vec::new()));
    let until = Instant::now() + ms(3000);
    let checker = {
        let reg = reg.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            while Instant::now() < until {
                {
                    let live = reg.lock().unwrap();
                    let mut inside: HashMap<&str, (u32, u32)> = HashMap::new();
                    for (g, parts) in live.iter() {
                        if !g.is_held() {
                            continue;
                        }
                        for (name, write) in parts {
                            let e = inside.entry(name.as_str()).or_default();
                            if *write {
                                e.0 += 1
                            } else {
                                e.1 += 1
                            }
                        }
                    }
                    for (name, (w, r)) in inside {
                        assert!(
                            w == 0 || (w == 1 && r == 0),
                            "{name}: {w} writers, {r} readers held at once"
                        );
                    }
                }
                samples += 1;
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            samples
        })
    };
    let mut tasks = Vec::new();
    for id in 0..4u64 {
        let c = b.client().await;
        let reg = reg.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(500 + id);
            let mut wins = 0;
            while Instant::now() < until {
                let mut names: Vec<&str> = vec!["sl:a", "sl:b", "sl:c", "sl:d"];
                for i in (1..names.len()).rev() {
                    names.swap(i, rng.below(i as u64 + 1) as usize);
                }
                names.truncate(1 + rng.below(3) as usize);
                let split = rng.below(names.len() as u64 + 1) as usize;
                let (reads, writes) = names.split_at(split);
                let exclusive = rng.below(2) == 0;
                let lock = if exclusive {
                    c.multi_lock(names.iter().copied())
                } else {
                    c.multi_rwlock(reads.iter().copied(), writes.iter().copied())
                };
                let g = match lock
                    .lease(ms(30))
                    .retry_interval(ms(10))
                    .lock()
                    .timeout(ms(100))
                    .await
                {
                    Ok(g) => g,
                    Err(e) if e.is_timeout() => continue,
                    Err(e) => panic!("multi: {e}"),
                };
                wins += 1;
                let g = Arc::new(g);
                let parts: Vec<(String, bool)> = g
                    .names()
                    .map(|n| (n.to_owned(), exclusive || writes.contains(&n)))
                    .collect();
                reg.lock().unwrap().push((g.clone(), parts));
                tokio::time::sleep(ms(rng.below(80))).await;
                reg.lock().unwrap().retain(|(x, _)| !Arc::ptr_eq(x, &g));
                let g = Arc::try_unwrap(g).unwrap_or_else(|_| panic!("owned"));
                if rng.below(2) == 0 {
                    let _ = g.release().await.expect("release");
                } else {
                    drop(g);
                }
            }
            wins
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += join("worker", t).await;
    }
    assert!(wins > 10, "{wins} grants");
    assert!(join("checker", checker).await > 100);
}

// ------------------------------------------------------------------------------------------
// all or nothing: refusals, timeouts, cancels, lost replies, lapsed guards
// ------------------------------------------------------------------------------------------

/// A refused try, a timed-out wait and a cancelled wait hold nothing of the free parts, at
/// once (not "eventually"): the step is atomic.
async fn multi_refusal_timeout_cancel_hold_nothing(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let held = other.mutex("rt:b").lock().await.expect("hold b");
    let names = ["rt:c", "rt:a", "rt:b"];
    let err = c.multi_lock(names).try_lock().await.expect_err("busy");
    assert!(err.is_would_block(), "{err}");
    assert!(lease_free(&other, "rt:a").await && lease_free(&other, "rt:c").await);
    let err = c
        .multi_lock(names)
        .lock()
        .timeout(ms(40))
        .await
        .expect_err("busy");
    assert!(err.is_timeout(), "{err}");
    for n in ["rt:a", "rt:c"] {
        let g = other
            .mutex(n)
            .try_lock()
            .await
            .granted(n)
            .expect("free right after the timeout");
        g.release().await.expect("release");
    }
    let wait = {
        let c = c.clone();
        tokio::spawn(async move { c.multi_rwlock(["rt:a"], ["rt:b", "rt:c"]).lock().await })
    };
    tokio::time::sleep(ms(50)).await;
    wait.abort();
    let _ = wait.await;
    for n in ["rt:a", "rt:c"] {
        let g = other
            .mutex(n)
            .try_lock()
            .await
            .granted(n)
            .expect("free right after the cancel");
        g.release().await.expect("release");
    }
    held.release().await.expect("release b");
    let g = c.multi_lock(names).try_lock().await.expect("all free now");
    g.release().await.expect("release");
}

/// Slot by slot (as on Redis Cluster): a multi-lock that took its first slot and then timed
/// out on the second gives the first back within its response timeout; a release that is not
/// sent by then (here: delayed on its way) is sent in the background, so the part is free long
/// before its lease ends.
async fn a_timed_out_slot_by_slot_multi_lock_gives_back_what_it_took(b: Backend) {
    let faulty = Faulty::new(b.store().await);
    faulty.step_slot_by_slot();
    let config = RedisConfig {
        response_timeout: ms(200),
        ..RedisConfig::default()
    };
    let c = LockClient::builder()
        .redis_config(config)
        .store(faulty.clone())
        .expect("client");
    let other = b.client().await;
    // Two names in two slots; the later slot is busy.
    let names = ["sl:a", "sl:b"];
    let slot =
        |n: &str| redis_locks::testing::keys::hash_slot(c.keys(n).unwrap().channel().as_bytes());
    assert_ne!(slot(names[0]), slot(names[1]));
    let (first, second) = if slot(names[0]) < slot(names[1]) {
        (names[0], names[1])
    } else {
        (names[1], names[0])
    };
    let held = other
        .mutex(second)
        .lock()
        .await
        .expect("hold the later slot");
    // The release of the first slot's part is delayed past the response timeout on its way.
    faulty.add(Rule::on(Op::Release).times(1).delay_request(secs(2)));
    let err = c
        .multi_lock(names)
        .lock()
        .timeout(ms(300))
        .await
        .expect_err("the later slot is busy");
    assert!(err.is_timeout(), "{err}");
    let freed = async {
        loop {
            if let Ok(g) = other.mutex(first).try_lock().await {
                return g;
            }
            tokio::time::sleep(ms(20)).await;
        }
    };
    let g = tokio::time::timeout(BEFORE_THE_LEASE, freed)
        .await
        .unwrap_or_else(|_| {
            panic!("{first} still held {BEFORE_THE_LEASE:?} after the timeout (lease 30 s)")
        });
    g.release().await.expect("release");
    held.release().await.expect("release");
}

/// Lost replies (replies stalled while the step runs): a timed-out multi-lock leaves nothing
/// held for the lease once the network is back, and an untimed one ends holding every part
/// with the store's fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_multi_lost_replies_leave_all_or_nothing() {
    let b = Backend::redis();
    let (proxy, c) = slow_client(&b).await;
    let direct = b.client().await;
    let names = ["lr:a", "lr:b", "lr:c"];
    proxy.stall_replies();
    let err = c
        .multi_lock(names)
        .lock()
        .timeout(ms(200))
        .await
        .expect_err("no reply");
    assert!(err.is_timeout() || err.is_connection(), "{err}");
    proxy.resume();
    for n in names {
        within(
            BEFORE_THE_LEASE,
            "a lost grant is given back (lease 30 s)",
            async || lease_free(&direct, n).await,
        )
        .await;
    }
    // Untimed: the wait rides through the stall and ends holding everything.
    proxy.stall_replies();
    let task = {
        let c = c.clone();
        tokio::spawn(async move { c.multi_lock(names).lock().await })
    };
    tokio::time::sleep(ms(700)).await;
    proxy.resume();
    let g = join("multi through a stall", task).await.expect("granted");
    assert!(g.is_held());
    for n in names {
        let info = direct.mutex(n).inspect().await.expect("inspect");
        assert_eq!(info.holders.len(), 1, "{n}");
        assert_eq!(info.fence, g.fencing_token(n).expect("part"), "{n}");
        assert!(direct.mutex(n).try_lock().await.granted(n).is_none(), "{n}");
    }
    assert!(g.release().await.expect("release"));
    for n in names {
        assert!(lease_free(&direct, n).await, "{n}");
    }
}

/// A multi-guard whose leases lapsed (renewal off) says so before anyone else is granted; its
/// late release or extend does not touch the new holder.
async fn multi_lapsed_guard_never_overlaps(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let mut old = c
        .multi_lock(["lp:a", "lp:b"])
        .lease(ms(150))
        .auto_renew(false)
        .lock()
        .await
        .expect("multi");
    let new = loop {
        if let Some(g) = other
            .multi_lock(["lp:b", "lp:a"])
            .try_lock()
            .await
            .granted("try")
        {
            break g;
        }
        tokio::time::sleep(ms(2)).await;
    };
    assert!(
        !old.is_held(),
        "the old guard still says is_held() once another holds"
    );
    assert!(!old.extend(ms(5000)).await.expect("extend"), "gone");
    assert!(!old.release().await.expect("release"), "gone");
    assert!(new.is_held());
    for n in ["lp:a", "lp:b"] {
        assert!(
            c.mutex(n).try_lock().await.granted(n).is_none(),
            "{n} still the new holder's"
        );
    }
    new.release().await.expect("release");
}

/// Fencing tokens per name: each part reports its own name's counter, whatever order the
/// names came in, a read part the last writer's; the next exclusive grant is above.
async fn multi_fences_are_per_name(b: Backend) {
    let c = b.client().await;
    for _ in 0..3 {
        c.locked("fz:z").await.release().await.expect("release");
    }
    let bumped = c.mutex("fz:z").inspect().await.expect("inspect").fence;
    let g = c.multi_lock(["fz:z", "fz:a"]).lock().await.expect("multi");
    assert_eq!(g.names().collect::<Vec<_>>(), ["fz:a", "fz:z"]);
    let (z1, a1) = (
        g.fencing_token("fz:z").expect("z"),
        g.fencing_token("fz:a").expect("a"),
    );
    assert!(
        z1 > bumped,
        "a new exclusive grant of fz:z is above its earlier ones"
    );
    for (name, fence) in g.fencing_tokens() {
        assert_eq!(
            c.mutex(name).inspect().await.expect("inspect").fence,
            fence,
            "{name}"
        );
    }
    g.release().await.expect("release");
    let g = c.multi_rwlock(["fz:z"], ["fz:a"]).lock().await.expect("rw");
    assert_eq!(
        g.fencing_token("fz:z"),
        Some(z1),
        "a read part reports the last writer's"
    );
    let a2 = g.fencing_token("fz:a").expect("a");
    assert!(a2 > a1, "each name's fences rise on their own");
    drop(g);
    // A dropped guard is released at once, not after its 30 s lease.
    within(BEFORE_THE_LEASE, "released", async || {
        lease_free(&c, "fz:z").await
    })
    .await;
    let m = c.mutex("fz:z").lock().await.expect("mutex");
    assert!(m.fencing_token() > z1);
}

// ------------------------------------------------------------------------------------------
// parts of another family; bad input
// ------------------------------------------------------------------------------------------

/// A part held through the ticket queue (a FairLock, a Semaphore): a typed family conflict,
/// and the free parts are not left held.
async fn multi_part_held_by_ticket_queue(b: Backend) {
    let c = b.client().await;
    let fl = c.fair_lock("tq:b").lock().await.expect("fair");
    let err = c
        .multi_lock(["tq:a", "tq:b", "tq:c"])
        .try_lock()
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(lease_free(&c, "tq:a").await && lease_free(&c, "tq:c").await);
    let err = c
        .multi_rwlock(["tq:b"], ["tq:a"])
        .lock()
        .timeout(ms(200))
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict() || err.is_timeout(), "{err}");
    assert!(lease_free(&c, "tq:a").await);
    fl.release().await.expect("release");
    let p = c.semaphore("tq:s", 3).acquire().await.expect("permit");
    let err = c
        .multi_lock(["tq:a", "tq:s"])
        .try_lock()
        .await
        .expect_err("mixed");
    assert!(err.is_family_conflict(), "{err}");
    assert!(lease_free(&c, "tq:a").await);
    p.release().await.expect("release");
}

/// Bad input: typed errors before any call, never a panic, nothing held.
async fn multi_bad_input_is_typed(b: Backend) {
    let c = b.client().await;
    let empty: [&str; 0] = [];
    let many: Vec<String> = (0..=MAX_MULTI_NAMES).map(|i| format!("bi:{i}")).collect();
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let cases: Vec<(&str, redis_locks::MultiLock)> = vec![
        ("no names", c.multi_lock(empty)),
        ("65 names", c.multi_lock(many.iter())),
        ("empty name", c.multi_lock(["bi:a", ""])),
        ("brace name", c.multi_lock(["bi:a", "}x"])),
        ("long name", c.multi_lock(["bi:a", long.as_str()])),
        ("read and write", c.multi_rwlock(["bi:a"], ["bi:a"])),
        ("zero lease", c.multi_lock(["bi:a"]).lease(Duration::ZERO)),
        ("huge lease", c.multi_lock(["bi:a"]).lease(Duration::MAX)),
        (
            "zero retry",
            c.multi_lock(["bi:a"]).retry_interval(Duration::ZERO),
        ),
        (
            "zero renew",
            c.multi_lock(["bi:a"]).renew_every(Duration::ZERO),
        ),
        (
            "huge budget",
            c.multi_lock(["bi:a"]).outage_budget(Duration::MAX),
        ),
    ];
    for (what, lock) in cases {
        let err = lock.try_lock().await.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
        let err = lock.lock().timeout(ms(50)).await.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
    }
    let err = c
        .multi_rwlock(["bi:a"], ["bi:b"])
        .preference(Preference::Fair)
        .try_lock()
        .await
        .expect_err("fair");
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(lease_free(&c, "bi:a").await && lease_free(&c, "bi:b").await);
    // Duplicates collapse; 64 names (with duplicates beyond) is fine.
    let at_limit: Vec<String> = (0..MAX_MULTI_NAMES).map(|i| format!("bi:{i}")).collect();
    let g = c
        .multi_lock(at_limit.iter().chain(at_limit.iter()))
        .try_lock()
        .await
        .expect("64 names");
    assert_eq!(g.names().count(), MAX_MULTI_NAMES);
    g.release().await.expect("release");
    let g = c
        .multi_lock(["bi:a", "bi:a"])
        .try_lock()
        .await
        .expect("dup");
    assert_eq!(g.names().collect::<Vec<_>>(), ["bi:a"]);
    g.release().await.expect("release");
}

/// MultiGuard::extend with a zero or huge lease: a typed error, the guard unchanged and held.
async fn multi_extend_bad_durations(b: Backend) {
    let c = b.client().await;
    let mut g = c.multi_lock(["ex:a", "ex:b"]).lock().await.expect("multi");
    for d in [Duration::ZERO, ms(1), Duration::MAX] {
        let err = g.extend(d).await.expect_err("bad lease");
        assert!(err.is_invalid_input(), "{d:?}: {err}");
        assert!(g.is_held(), "{d:?}");
    }
    assert!(g.extend(ms(5000)).await.expect("extend"));
    assert!(g.release().await.expect("release"));
}

both_backends!(
    multi_churn_exclusion_fences_no_deadlock,
    multi_opposite_orders_never_deadlock,
    multi_short_leases_never_conflict,
    multi_refusal_timeout_cancel_hold_nothing,
    a_timed_out_slot_by_slot_multi_lock_gives_back_what_it_took,
    multi_lapsed_guard_never_overlaps,
    multi_fences_are_per_name,
    multi_part_held_by_ticket_queue,
    multi_bad_input_is_typed,
    multi_extend_bad_durations,
);
