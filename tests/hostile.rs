//! Hostile input: arbitrary lock names and durations (by proptest), and garbage
//! already stored at a lock's keys. The library answers with typed errors, never panics, and
//! never touches another lock's keys (a sentinel lock, held by another client, is compared
//! byte for byte after every case).

mod support;
use support::quick::Quick;
use support::time::{ms, secs};

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis_locks::testing::keys::MAX_NAME_LEN;
use redis_locks::{LockClient, MutexGuard, MAX_LEASE, MIN_LEASE};
use tokio::runtime::Runtime;

use support::RedisServer;

/// A server, two clients and a sentinel lock held by the second client.
struct World {
    rt: Runtime,
    server: RedisServer,
    c: LockClient,
    raw: redis::aio::MultiplexedConnection,
    _sentinel: Vec<MutexGuard>,
    _sentinel_fair: Vec<redis_locks::FairLockGuard>,
}

/// A held mutex whose keys must never change while hostile input is thrown at other names.
const SENTINEL: &str = "sentinel";
/// The same for a held fair lock (a name is held through one family at a time).
const SENTINEL_FAIR: &str = "sentinel-fair";

impl World {
    fn new() -> World {
        let server = RedisServer::start();
        let rt = support::time::multi_thread(2);
        let (c, raw, sentinel, sentinel_fair) = rt.block_on(async {
            let c = LockClient::connect(&server.url()).await.expect("connect");
            let other = LockClient::connect(&server.url()).await.expect("connect");
            // No renewal, so the sentinel's keys change only if something else touches them.
            let g = other
                .mutex(SENTINEL)
                .lease(secs(600))
                .auto_renew(false)
                .lock()
                .await
                .expect("sentinel");
            let f = other
                .fair_lock(SENTINEL_FAIR)
                .lease(secs(600))
                .auto_renew(false)
                .lock()
                .await
                .expect("sentinel fair");
            let raw = redis::Client::open(server.url())
                .expect("url")
                .get_multiplexed_async_connection()
                .await
                .expect("raw connection");
            (c, raw, vec![g], vec![f])
        });
        World {
            rt,
            server,
            c,
            raw,
            _sentinel: sentinel,
            _sentinel_fair: sentinel_fair,
        }
    }

    /// Every key of the sentinel locks with its serialized value.
    async fn sentinel_keys(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut keys = self.dump_matching(b"rl:{sentinel}:*").await;
        keys.extend(self.dump_matching(b"rl:{sentinel-fair}:*").await);
        keys
    }

    async fn dump_matching(&self, pattern: &[u8]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut raw = self.raw.clone();
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut raw)
            .await
            .expect("KEYS");
        let mut out = BTreeMap::new();
        for k in keys {
            let v: Vec<u8> = redis::cmd("DUMP")
                .arg(&k)
                .query_async(&mut raw)
                .await
                .expect("DUMP");
            out.insert(k, v);
        }
        out
    }

    async fn dump(&self, key: &str) -> Option<Vec<u8>> {
        let mut raw = self.raw.clone();
        redis::cmd("DUMP")
            .arg(key)
            .query_async(&mut raw)
            .await
            .expect("DUMP")
    }

    async fn raw_cmd(&self, args: &[&str]) {
        let mut raw = self.raw.clone();
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let _: redis::Value = cmd.query_async(&mut raw).await.expect("raw command");
    }
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        // Anything, including NUL and multi-byte characters.
        any::<String>(),
        // The characters that matter to key layout.
        "[{}:\\x00 a*?#|]{0,40}",
        // Around the length limit.
        (MAX_NAME_LEN - 8..MAX_NAME_LEN + 8).prop_map(|n| "{".repeat(n)),
        (MAX_NAME_LEN - 2..MAX_NAME_LEN + 2).prop_map(|n| "é".repeat(n / 2)),
    ]
}

/// Arbitrary names: valid ones (1 to 1024 bytes) work end to end on every family, others are
/// refused (empty, too long, or starting with `}`) with `is_invalid_input()` before Redis is asked; the sentinel lock is never touched.
#[test]
fn arbitrary_names_are_refused_or_isolated() {
    let w = World::new();
    let before = w.rt.block_on(w.sentinel_keys());
    assert!(before.len() >= 3, "sentinel keys: {:?}", before.keys());
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&name_strategy(), |name| {
            prop_assume!(name != SENTINEL && name != SENTINEL_FAIR);
            w.rt.block_on(async {
                let valid =
                    !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.starts_with('}');
                let m = w.c.mutex(&name).lease(secs(5));
                let f = w.c.fair_lock(&name).lease(secs(5));
                let r = w.c.rwlock(&name).lease(secs(5));
                match (m.try_lock().await, valid) {
                    (Ok(g), true) => {
                        assert_eq!(g.name(), name);
                        assert!(g.release().await.expect("release"));
                    }
                    (Err(e), false) => assert!(e.is_invalid_input(), "{e}"),
                    (other, _) => panic!("mutex {name:?} (valid={valid}): {other:?}"),
                }
                match (f.try_lock().await, valid) {
                    (Ok(g), true) => assert!(g.release().await.expect("release")),
                    (Err(e), false) => assert!(e.is_invalid_input(), "{e}"),
                    (other, _) => panic!("fair lock {name:?} (valid={valid}): {other:?}"),
                }
                match (r.try_read().await, valid) {
                    (Ok(g), true) => assert!(g.release().await.expect("release")),
                    (Err(e), false) => assert!(e.is_invalid_input(), "{e}"),
                    (other, _) => panic!("read {name:?} (valid={valid}): {other:?}"),
                }
                assert_eq!(
                    w.sentinel_keys().await,
                    before,
                    "{name:?} touched the sentinel"
                );
            });
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

fn duration_strategy() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(MIN_LEASE),
        Just(MIN_LEASE - Duration::from_nanos(1)),
        Just(MAX_LEASE),
        Just(MAX_LEASE + Duration::from_nanos(1)),
        (0u64..100_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_secs),
    ]
}

fn in_range(d: Duration) -> bool {
    (MIN_LEASE..=MAX_LEASE).contains(&d)
}

/// Leases this short may lapse for real between two steps when the 2-core test machine is
/// busy (a renewal misses its window); longer ones must survive the test's few round trips.
fn can_lapse(lease: Duration) -> bool {
    lease < secs(1)
}

/// Leases, heartbeats, timeouts and extensions from zero to `Duration::MAX`: accepted when in
/// range, refused with `is_invalid_input()` otherwise; no panic (e.g. an `Instant` overflow).
#[test]
fn arbitrary_durations_are_refused_or_work() {
    let w = World::new();
    let before = w.rt.block_on(w.sentinel_keys());
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    // Waits up to a year here; `Duration::MAX` as a wait has its own test below.
    let wait = prop_oneof![
        Just(Duration::ZERO),
        Just(MAX_LEASE),
        (0u64..100_000).prop_map(Duration::from_millis),
    ];
    let strategy = (
        duration_strategy(),
        duration_strategy(),
        wait,
        duration_strategy(),
    );
    runner
        .run(&strategy, |(lease, heartbeat, wait, extend)| {
            w.rt.block_on(async {
                let valid = in_range(lease) && in_range(heartbeat);
                let m = w.c.mutex("durations").lease(lease).heartbeat(heartbeat);
                match (m.lock().timeout(wait).await, valid) {
                    (Ok(mut g), true) => {
                        // A lease of a few ms, or an extension to a few ms (trusted from its
                        // send), can lapse for real on a busy machine before the reply
                        // arrives; then the guard must say so.
                        let short = can_lapse(lease) || (in_range(extend) && can_lapse(extend));
                        match (g.extend(extend).await, in_range(extend)) {
                            (Ok(true), true) => {}
                            (Ok(false), true) if short => {
                                assert!(!g.is_held(), "extend said lost, guard says held")
                            }
                            (Err(e), false) => assert!(e.is_invalid_input(), "{e}"),
                            (other, _) => panic!("lease {lease:?} extend({extend:?}): {other:?}"),
                        }
                        let released = g.release().await.expect("release");
                        assert!(released || short, "lease {lease:?} lost");
                    }
                    (Err(e), false) => assert!(e.is_invalid_input(), "{e}"),
                    (other, _) => {
                        panic!("lease {lease:?} heartbeat {heartbeat:?} wait {wait:?}: {other:?}")
                    }
                }
                let s = w.c.semaphore("durations-sem", 2).lease(lease);
                match (s.try_acquire().await, in_range(lease)) {
                    (Ok(p), true) => {
                        let released = p.release().await.expect("release");
                        assert!(released || can_lapse(lease), "lease {lease:?} lost");
                    }
                    (Err(e), false) => assert!(e.is_invalid_input(), "{e}"),
                    (other, _) => panic!("semaphore lease {lease:?}: {other:?}"),
                }
                assert_eq!(w.sentinel_keys().await, before);
            });
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits longer than the clock can represent (`Duration::MAX`, a common "forever") do not
/// panic: each `*_timeout` either waits without a deadline or refuses the value with a typed
/// error.
#[test]
fn a_wait_of_duration_max_does_not_panic() {
    let w = World::new();
    w.rt.block_on(async {
        let mut outcomes = Vec::new();
        for what in ["mutex", "fair lock", "semaphore", "read", "write"] {
            let c = w.c.clone();
            let name = format!("forever-{what}");
            // A panic inside the task is reported as a JoinError instead of ending the test.
            let task = tokio::spawn(async move {
                let wait = Duration::MAX;
                match what {
                    "mutex" => c.mutex(&name).lock().timeout(wait).await.map(drop),
                    "fair lock" => c.fair_lock(&name).lock().timeout(wait).await.map(drop),
                    "semaphore" => c
                        .semaphore(&name, 1)
                        .acquire()
                        .timeout(wait)
                        .await
                        .map(drop),
                    "read" => c.rwlock(&name).read().timeout(wait).await.map(drop),
                    _ => c.rwlock(&name).write().timeout(wait).await.map(drop),
                }
            });
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_invalid_input() => {}
                Ok(Err(e)) => outcomes.push(format!("{what}: unexpected error {e}")),
                Err(e) => outcomes.push(format!("{what}: panicked ({e})")),
            }
        }
        assert!(outcomes.is_empty(), "{outcomes:#?}");
    });
}

/// Which operations read a key, by suffix: the lease-lock family or the ticket queue.
fn queue_key(suffix: &str) -> bool {
    matches!(suffix, "h" | "q" | "hb" | "tk" | "cap")
}

/// Foreign data of the wrong type at each key of both families (and the shared fence): every
/// operation on that family fails with `is_wrong_type()`, except the ticket queue's inspect
/// on a foreign `cap`, which answers and names the key (`LockInfo::foreign_capacity`); the
/// key is left as it was.
#[test]
fn wrong_types_at_every_key_are_reported_and_kept() {
    let w = World::new();
    let before = w.rt.block_on(w.sentinel_keys());
    w.rt.block_on(async {
        let mut failures = Vec::new();
        for suffix in ["w", "r", "wq", "fence", "h", "q", "hb", "tk", "cap"] {
            let zset = matches!(suffix, "r" | "wq" | "h" | "q" | "hb");
            let name = format!("wt-{suffix}");
            let key = format!("rl:{{{name}}}:{suffix}");
            // A string where a sorted set belongs, a list where a string belongs.
            if zset {
                w.raw_cmd(&["SET", &key, "foreign"]).await;
            } else {
                w.raw_cmd(&["RPUSH", &key, "foreign"]).await;
            }
            let kept = w.dump(&key).await;
            let mut outcomes: Vec<(&str, redis_locks::Result<bool>)> = Vec::new();
            if !queue_key(suffix) {
                let m = w.c.mutex(&name);
                // A mutex never announces waiters, so it does not read `wq` at all (and
                // leaves it alone, as asserted below); every other key is its own.
                if suffix != "wq" {
                    outcomes.push(("mutex", support::tried(m.try_lock().await)));
                }
                let r = w.c.rwlock(&name);
                outcomes.push(("read", support::tried(r.try_read().await)));
                outcomes.push(("inspect", m.inspect().await.map(|_| true)));
            }
            if queue_key(suffix) || suffix == "fence" {
                let f = w.c.fair_lock(&name);
                // The ticket counter is read only when a waiter joins the queue (a `try_*`
                // never does); inspect reads it and must report it.
                if suffix != "tk" {
                    outcomes.push(("fair", support::tried(f.try_lock().await)));
                    let s = w.c.semaphore(&name, 3);
                    outcomes.push(("semaphore", support::tried(s.try_acquire().await)));
                }
                let info = f.inspect().await;
                if suffix == "cap" {
                    // A foreign capacity hides no holder: the queue is read beside it.
                    match info {
                        Ok(info) if info.foreign_capacity.as_deref() == Some(key.as_str()) => {}
                        other => failures.push(format!("{key} (inspect queue): {other:?}")),
                    }
                } else {
                    outcomes.push(("inspect queue", info.map(|_| true)));
                }
            }
            for (what, outcome) in outcomes {
                match outcome {
                    Err(e) if e.is_wrong_type() => {}
                    other => failures.push(format!("{key} ({what}): {other:?}")),
                }
            }
            assert_eq!(w.dump(&key).await, kept, "{key} was overwritten");
        }
        assert!(
            failures.is_empty(),
            "not reported as wrong type: {failures:#?}"
        );
    });
    assert_eq!(w.rt.block_on(w.sentinel_keys()), before);
}

/// Values of the right type that the library did not write: typed errors (never a panic, never
/// an untyped `Error::Redis`), keys kept; the ticket queue's inspect answers beside a
/// malformed `cap` and names it.
#[test]
fn malformed_values_are_reported_and_kept() {
    let w = World::new();
    let before = w.rt.block_on(w.sentinel_keys());
    w.rt.block_on(async {
        let mut failures = Vec::new();
        let cases: &[(&str, &[&str])] = &[
            ("mal-w", &["SET", "rl:{mal-w}:w", "garbage"]),
            ("mal-w2", &["SET", "rl:{mal-w2}:w", "12|"]),
            ("mal-fence", &["SET", "rl:{mal-fence}:fence", "abc"]),
            ("mal-cap", &["SET", "rl:{mal-cap}:cap", "-5"]),
            ("mal-cap2", &["SET", "rl:{mal-cap2}:cap", "abc"]),
        ];
        for (name, set) in cases {
            w.raw_cmd(set).await;
            let key = set[1];
            let kept = w.dump(key).await;
            let outcome = if key.ends_with(":cap") {
                support::tried(w.c.fair_lock(name).try_lock().await)
            } else {
                support::tried(w.c.mutex(name).try_lock().await)
            };
            match outcome {
                Err(e) if e.is_wrong_type() => {}
                other => failures.push(format!("{set:?}: {other:?}")),
            }
            if key.ends_with(":cap") {
                match w.c.fair_lock(name).inspect().await {
                    Ok(info) if info.foreign_capacity.as_deref() == Some(key) => {}
                    other => failures.push(format!("{set:?} (inspect): {other:?}")),
                }
            }
            assert_eq!(w.dump(key).await, kept, "{key} was overwritten");
        }
        // A count above 2^32 - 1 is no capacity redis-locks writes (none reaches it): inspect
        // names the key rather than failing to read the count.
        let key = "rl:{mal-cap3}:cap";
        w.raw_cmd(&["SET", key, "~4294967296"]).await;
        match w.c.fair_lock("mal-cap3").inspect().await {
            Ok(info) if info.foreign_capacity.as_deref() == Some(key) => {}
            other => failures.push(format!("{key} ~4294967296 (inspect): {other:?}")),
        }
        assert!(
            failures.is_empty(),
            "not reported as wrong type: {failures:#?}"
        );
    });
    assert_eq!(w.rt.block_on(w.sentinel_keys()), before);
}

/// Foreign members in the ticket queue's sorted sets (`abc#notanumber`): no panic, the foreign
/// member is kept, and the answer is a typed error or a refusal (the member counts as a holder).
#[test]
fn malformed_queue_members_do_not_panic_or_vanish() {
    let w = World::new();
    w.rt.block_on(async {
        let far = "99999999999999";
        for (name, key) in [("mal-h", "rl:{mal-h}:h"), ("mal-q", "rl:{mal-q}:q")] {
            w.raw_cmd(&["ZADD", key, far, "abc#notanumber"]).await;
            let f = w.c.fair_lock(name);
            match f.try_lock().await {
                Err(e) if e.is_would_block() || e.is_wrong_type() => {}
                other => panic!("{key}: a foreign member was ignored: {other:?}"),
            }
            let mut raw = w.raw.clone();
            let score: Option<String> = redis::cmd("ZSCORE")
                .arg(key)
                .arg("abc#notanumber")
                .query_async(&mut raw)
                .await
                .expect("ZSCORE");
            assert!(score.is_some(), "{key}: the foreign member was removed");
            // Inspect shows it, without panicking on the member's format.
            let info = f.inspect().await;
            assert!(info.is_ok() || info.as_ref().is_err_and(|e| e.is_wrong_type()));
        }
    });
    drop(w.server);
}

/// A prefix or default that `connect` refuses is refused by the in-memory builder too, with the
/// same kind of error, before any lock is made: a configuration tried in memory works on Redis.
#[test]
fn bad_builder_settings_are_refused_alike_in_memory_and_on_redis() {
    let server = RedisServer::start();
    let rt = Runtime::new().expect("runtime");
    let long = "p".repeat(200);
    let builders: Vec<(&str, redis_locks::LockClientBuilder)> = vec![
        ("empty prefix", LockClient::builder().prefix("")),
        ("brace in prefix", LockClient::builder().prefix("a{b")),
        ("200-byte prefix", LockClient::builder().prefix(&long)),
        ("zero lease", LockClient::builder().lease(Duration::ZERO)),
        (
            "zero retry interval",
            LockClient::builder().retry_interval(Duration::ZERO),
        ),
        (
            "huge heartbeat",
            LockClient::builder().heartbeat(MAX_LEASE * 2),
        ),
    ];
    for (what, builder) in builders {
        let memory = builder.clone().in_memory().expect_err(what);
        let redis = rt.block_on(builder.connect(&server.url())).expect_err(what);
        assert!(memory.is_invalid_input(), "{what}: in memory: {memory}");
        assert!(redis.is_invalid_input(), "{what}: on Redis: {redis}");
        assert_eq!(memory.to_string(), redis.to_string(), "{what}");
    }
    // A good configuration is accepted by both.
    let good = LockClient::builder()
        .prefix("billing")
        .lease(MIN_LEASE * 100);
    assert!(good.clone().in_memory().is_ok());
    assert!(rt.block_on(good.connect(&server.url())).is_ok());
}

/// The longest timeout the clock can add to now, less one second: a deadline that exists, but
/// past which nothing more can be added (a response timeout, a back-off).
fn timeout_at_the_clocks_limit() -> Duration {
    let now = tokio::time::Instant::now();
    let (mut fits, mut overflows) = (Duration::ZERO, Duration::MAX);
    while overflows - fits > secs(1) {
        let mid = fits + (overflows - fits) / 2;
        if now.checked_add(mid).is_some() {
            fits = mid;
        } else {
            overflows = mid;
        }
    }
    fits.saturating_sub(secs(1))
}

/// A wait with a timeout near the clock's limit (a user's "forever") neither panics nor
/// returns early: the single lock, the multi-lock and the election campaign wait on.
async fn a_timeout_at_the_clocks_limit_waits_without_panicking(b: support::backend::Backend) {
    let holder = b.client().await;
    let waiter = b.client().await;
    let huge = timeout_at_the_clocks_limit();
    let _m = holder.mutex("huge-timeout").lock().await.expect("lock");
    let _e = holder.lead("huge-timeout-election", "holder").await;
    let mutex = waiter.mutex("huge-timeout");
    let multi = waiter.multi_lock(["huge-timeout", "huge-timeout-2"]);
    let election = waiter.election("huge-timeout-election");
    let waits = async {
        tokio::join!(
            mutex.lock().timeout(huge),
            multi.lock().timeout(huge),
            election.campaign("waiter").timeout(huge),
        )
    };
    // Still waiting after a while (no panic, no early return), then dropped.
    let outcome = tokio::time::timeout(ms(1500), waits).await;
    assert!(
        outcome.is_err(),
        "a wait with a huge timeout returned early"
    );
}

both_backends!(a_timeout_at_the_clocks_limit_waits_without_panicking);

/// Foreign data at each key of a rate limiter (the wrong type, or a ticket counter that is no
/// number): every step that reads the key fails with `is_wrong_type()`, and a step that fails
/// writes nothing: every key of the limiter is left as it was (no admission charged, no queue
/// place or ticket counter left behind without a TTL). A step that begins on an empty queue
/// reads the ticket counter and the heartbeats only to join the queue, so the hour's one
/// admission (a try on an empty queue) is made beside a foreign value there, which it leaves
/// alone; the wait that follows must join, and fails. Inspect reads the counter too. Each
/// error names the foreign key (`rl:{n}:rt` is a prefix of `rl:{n}:rtk`: the error about the
/// counter must not name the state).
#[test]
fn rate_limiter_foreign_values_are_reported_and_kept() {
    let w = World::new();
    let before = w.rt.block_on(w.sentinel_keys());
    w.rt.block_on(async {
        let mut failures = Vec::new();
        let cases: &[(&str, &[&str])] = &[
            ("rate-rt", &["RPUSH", "rl:{rate-rt}:rt", "foreign"]),
            ("rate-rt2", &["SET", "rl:{rate-rt2}:rt", "foreign"]),
            ("rate-rq", &["SET", "rl:{rate-rq}:rq", "foreign"]),
            ("rate-rhb", &["SET", "rl:{rate-rhb}:rhb", "foreign"]),
            ("rate-rtk", &["RPUSH", "rl:{rate-rtk}:rtk", "foreign"]),
            ("rate-rtk2", &["SET", "rl:{rate-rtk2}:rtk", "abc"]),
            ("rate-ra", &["SET", "rl:{rate-ra}:ra", "foreign"]),
        ];
        for (name, set) in cases {
            w.raw_cmd(set).await;
            let key = set[1];
            let kept = w.dump(key).await;
            let pattern = format!("rl:{{{name}}}:*");
            let limiter = w.c.rate_limiter(name, redis_locks::Rate::per_hour(1));
            let unread_by_a_try = key.ends_with(":rtk") || key.ends_with(":rhb");
            let keys_before = w.dump_matching(pattern.as_bytes()).await;
            let first = limiter.try_acquire(1).await;
            let mut outcomes = Vec::new();
            if unread_by_a_try {
                if let Err(e) = first {
                    failures.push(format!("{key} (first try): {e:?}"));
                }
            } else {
                outcomes.push(("try", first.map(|_| ()), keys_before));
            }
            let keys_before = w.dump_matching(pattern.as_bytes()).await;
            let wait = limiter
                .acquire(1)
                .timeout(ms(200))
                .await
                .map(|_| ());
            outcomes.push(("wait", wait, keys_before));
            if !key.ends_with(":ra") && !key.ends_with(":rhb") {
                let keys_before = w.dump_matching(pattern.as_bytes()).await;
                let inspect = limiter.inspect().await.map(|_| ());
                outcomes.push(("inspect", inspect, keys_before));
            }
            for (what, outcome, keys_before) in outcomes {
                match outcome {
                    Err(e) if e.is_wrong_type() => {
                        if w.dump_matching(pattern.as_bytes()).await != keys_before {
                            failures.push(format!("{key} ({what}): failed, yet wrote keys"));
                        }
                        // The error names the key to delete, and no other.
                        if !matches!(&e, redis_locks::Error::WrongType { key: Some(k), .. } if k == key)
                        {
                            failures.push(format!("{key} ({what}): names another key: {e}"));
                        }
                    }
                    other => failures.push(format!("{key} ({what}): {other:?}")),
                }
            }
            assert_eq!(w.dump(key).await, kept, "{key} was overwritten or deleted");
        }
        assert!(
            failures.is_empty(),
            "not reported as wrong type, or written: {failures:#?}"
        );
    });
    assert_eq!(w.rt.block_on(w.sentinel_keys()), before);
}
