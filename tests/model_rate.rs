//! Model check of the rate limiter's steps: random programs of `Store::rate_acquire`
//! (`rate_acquire.lua`, waiting and not), `Store::rate_cancel` (`rate_cancel.lua`) and clock
//! advances, run step by step on `RedisStore` (a real redis-server) and on `MemoryStore` under
//! one explicit clock. Every reply must be identical, and after every step
//! `Store::rate_inspect` (`rate_inspect.lua`) of every limiter must read the same on both.
//!
//! Claims use rates whose period is not a whole multiple of their count (the exact fraction
//! of the theoretical arrival time), requests from 1 to past the burst, heartbeats shorter
//! and longer than the advances (so waiters die in the queue), the same name under two rates
//! (a changed rate rounds the stored fraction up), and now and then someone else's writes:
//! heartbeat entries lost from `rhb` (one member's, or the whole key), so the queue holds
//! members without one; members added to `rq` (a token's own or a foreign one, at any ticket,
//! with a heartbeat entry, a lapsed one or none); a foreign value at one of the limiter's keys
//! (a list, or a string: where the limiter keeps a string, one it did not write), deleted
//! later. `MemoryStore::lose_rate_heartbeats`, `plant_rate_member`, `plant_rate_foreign` and
//! `delete_rate_foreign` do the same to the model, whose steps must then fail as the scripts
//! do (the same wrong-type error, naming the key) and change what they change. The test fails
//! if its programs never reached one of the reply kinds (admitted, refused at the head with a
//! retry, refused behind others, refused try, waiter dropped for a lapsed heartbeat, cancel of
//! a live and of no place, a token admitted earlier in its heartbeat window answered with that
//! admission, heartbeat entries lost, a member without one dropped, members planted, a step
//! refused for a foreign value and one answered beside it), so it cannot pass on easy
//! programs. The same test then plants bugs in the model, which it must find.
//! `MODEL_CASES` raises the number of programs (docs/MODEL_CHECKS.md).

mod support;
use support::model_rig::ModelRig;
use support::model_rig::{cases, full_run};
use support::replies::equal_with_message;
use support::time::{ms, secs};

use std::collections::BTreeSet;
use std::sync::Mutex;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestError, TestRunner};
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{MemoryStore, RateClaim, RateDecision, RedisStore, Store};
use redis_locks::testing::{plant, unplant_all, Bug};
use redis_locks::Rate;

const DEFAULT_CASES: u32 = 256;
const LIMITERS: usize = 2;
const TOKENS: usize = 4;
const START_MS: u64 = 1_000_000;

/// The rates of a program's claims: fractions of a ms per admission, bursts of 1 and more,
/// and a slow rate next to a fast one on the same name.
fn rates() -> [Rate; 4] {
    [
        Rate::new(3, ms(1_000)).burst(2),
        Rate::new(7, ms(100)).burst(3),
        Rate::new(2, ms(999)).burst(1),
        Rate::per_hour(5).burst(4),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        limiter: usize,
        token: usize,
        rate: usize,
        permits: u64,
        heartbeat_ms: u64,
        wait: bool,
    },
    Cancel {
        limiter: usize,
        token: usize,
        rate: usize,
        permits: u64,
    },
    /// Someone else's write loses heartbeat entries of the limiter's queue (`ZREM` of the
    /// member of `token` asking for `permits`, or `DEL` of the whole `rhb` key): the queue
    /// keeps members without one.
    LoseHeartbeat {
        limiter: usize,
        token: Option<usize>,
        permits: u64,
    },
    /// Someone else adds `member` to the limiter's queue at `ticket` (`ZADD rq`), with a
    /// heartbeat entry `heartbeat_ms` from now (0: lapsed) or none.
    PlantMember {
        limiter: usize,
        member: String,
        ticket: u64,
        heartbeat_ms: Option<u64>,
    },
    /// Someone else's value replaces the limiter's key `key` (`SET`, or `DEL` and `RPUSH`
    /// for a list); the limiter's earlier foreign value, if any, is deleted first.
    PlantForeign {
        limiter: usize,
        key: &'static str,
        list: bool,
    },
    /// The limiter's foreign value, if any, is deleted (`DEL`).
    DeleteForeign {
        limiter: usize,
    },
    Advance(u64),
}

/// The limiter's keys a foreign value may be planted at.
const RATE_KEYS: [&str; 5] = ["rt", "rq", "rhb", "rtk", "ra"];

fn op() -> impl Strategy<Value = Op> {
    let limiter = prop_oneof![4 => Just(0usize), 1 => Just(1usize)];
    let rate = prop_oneof![6 => Just(0usize), 2 => 1..4usize];
    prop_oneof![
        6 => (limiter.clone(), 0..TOKENS, rate.clone(), 1..=4u64, prop::sample::select(vec![150u64, 400, 3_000]), any::<bool>())
            .prop_map(|(limiter, token, rate, permits, heartbeat_ms, wait)| Op::Acquire {
                limiter, token, rate, permits, heartbeat_ms, wait,
            }),
        1 => (limiter.clone(), 0..TOKENS, rate, 1..=4u64)
            .prop_map(|(limiter, token, rate, permits)| Op::Cancel { limiter, token, rate, permits }),
        1 => (limiter.clone(), prop::option::weighted(0.8, 0..TOKENS), 1..=2u64)
            .prop_map(|(limiter, token, permits)| Op::LoseHeartbeat { limiter, token, permits }),
        1 => (
            limiter.clone(),
            prop_oneof![
                3 => (0..TOKENS, 1..=2u64).prop_map(|(t, p)| member(t, p)),
                1 => prop::sample::select(vec!["foreign", "foreign#3", "a"]).prop_map(String::from),
            ],
            prop_oneof![0..4u64, Just(100u64)],
            prop::option::weighted(0.6, prop::sample::select(vec![0u64, 300, 10_000])),
        )
            .prop_map(|(limiter, member, ticket, heartbeat_ms)| Op::PlantMember {
                limiter, member, ticket, heartbeat_ms,
            }),
        1 => (limiter.clone(), prop::sample::select(RATE_KEYS.to_vec()), any::<bool>())
            .prop_map(|(limiter, key, list)| Op::PlantForeign { limiter, key, list }),
        1 => limiter.prop_map(|limiter| Op::DeleteForeign { limiter }),
        3 => prop_oneof![0..5u64, 5..400u64, Just(1_000u64), 1_000..5_000u64].prop_map(Op::Advance),
    ]
}

fn keys(limiter: usize) -> LockKeys {
    LockKeys::new("rl", &format!("limit{limiter}")).expect("keys")
}

fn claim(token: usize, rate: usize, permits: u64, heartbeat_ms: u64) -> RateClaim {
    RateClaim {
        token: format!("tok{token}"),
        permits,
        rate: rates()[rate],
        heartbeat: ms(heartbeat_ms),
    }
}

/// What the programs reached; each must be reached over the run.
type Reached = Mutex<BTreeSet<&'static str>>;

fn reach(reached: &Reached, kind: &'static str) {
    reached.lock().expect("reached").insert(kind);
}

fn kind_of(decision: &redis_locks::Result<RateDecision>, wait: bool, now: u64) -> &'static str {
    match decision {
        Ok(RateDecision::Admitted { at }) if *at < now => "an earlier admission replayed",
        Ok(RateDecision::Admitted { .. }) => "admitted",
        Ok(RateDecision::Refused(b)) if !wait => "refused try",
        Ok(RateDecision::Refused(b)) if b.position == Some(0) => {
            if b.retry_after.is_some() {
                "refused at the head with a retry"
            } else {
                "head without a retry"
            }
        }
        Ok(RateDecision::Refused(_)) => "refused behind others",
        Err(_) => "error",
    }
}

/// The member of `token` asking for `permits` (`rate_member`: `token#n` when n > 1).
fn member(token: usize, permits: u64) -> String {
    match permits {
        1 => format!("tok{token}"),
        n => format!("tok{token}#{n}"),
    }
}

/// The head of `limiter`'s queue on Redis when it has no heartbeat entry.
async fn head_without_heartbeat(redis: &RedisStore, limiter: usize) -> Option<String> {
    let k = keys(limiter);
    let head: Vec<String> = redis
        .query(redis::cmd("ZRANGE").arg(k.key("rq")).arg(0).arg(0))
        .await
        .expect("ZRANGE");
    let head = head.into_iter().next()?;
    let score: Option<String> = redis
        .query(redis::cmd("ZSCORE").arg(k.key("rhb")).arg(&head))
        .await
        .expect("ZSCORE");
    score.is_none().then_some(head)
}

/// Plants `member` on both stores (Op::PlantMember).
async fn plant_member(
    redis: &RedisStore,
    model: &MemoryStore,
    limiter: usize,
    member: &str,
    ticket: u64,
    heartbeat_until: Option<u64>,
) -> Result<(), String> {
    let k = keys(limiter);
    model.plant_rate_member(&k, member, ticket, heartbeat_until);
    let _: i64 = redis
        .query(redis::cmd("ZADD").arg(k.key("rq")).arg(ticket).arg(member))
        .await
        .map_err(|e| format!("ZADD rq: {e}"))?;
    if let Some(deadline) = heartbeat_until {
        let _: i64 = redis
            .query(
                redis::cmd("ZADD")
                    .arg(k.key("rhb"))
                    .arg(deadline)
                    .arg(member),
            )
            .await
            .map_err(|e| format!("ZADD rhb: {e}"))?;
    }
    Ok(())
}

/// Deletes the limiter's foreign value at `key` on both stores.
async fn delete_foreign(
    redis: &RedisStore,
    model: &MemoryStore,
    limiter: usize,
    key: &str,
) -> Result<(), String> {
    let k = keys(limiter);
    model.delete_rate_foreign(&k);
    let _: i64 = redis
        .query(redis::cmd("DEL").arg(k.key(key)))
        .await
        .map_err(|e| format!("DEL: {e}"))?;
    Ok(())
}

/// Plants a foreign value at the limiter's `key` on both stores: a list, or a string.
async fn plant_foreign(
    redis: &RedisStore,
    model: &MemoryStore,
    limiter: usize,
    key: &str,
    list: bool,
) -> Result<(), String> {
    let k = keys(limiter);
    let full = k.key(key);
    model.plant_rate_foreign(&k, key, if list { "list" } else { "string" });
    let _: i64 = redis
        .query(redis::cmd("DEL").arg(&full))
        .await
        .map_err(|e| format!("DEL: {e}"))?;
    let planted: redis_locks::Result<redis::Value> = if list {
        redis
            .query(redis::cmd("RPUSH").arg(&full).arg("foreign"))
            .await
    } else {
        redis
            .query(redis::cmd("SET").arg(&full).arg("foreign"))
            .await
    };
    planted.map_err(|e| format!("plant at {full}: {e}"))?;
    Ok(())
}

/// Loses heartbeat entries on both stores (Op::LoseHeartbeat); true if Redis lost any.
async fn lose_heartbeat(
    redis: &RedisStore,
    model: &MemoryStore,
    limiter: usize,
    token: Option<usize>,
    permits: u64,
) -> bool {
    let k = keys(limiter);
    let member = token.map(|t| member(t, permits));
    model.lose_rate_heartbeats(&k, member.as_deref());
    let lost: i64 = match &member {
        Some(m) => {
            redis
                .query(redis::cmd("ZREM").arg(k.key("rhb")).arg(m))
                .await
        }
        None => redis.query(redis::cmd("DEL").arg(k.key("rhb"))).await,
    }
    .expect("lose heartbeats");
    lost > 0
}

async fn run_program(
    redis: &RedisStore,
    model: &MemoryStore,
    ops: &[Op],
    reached: &Reached,
) -> Result<(), String> {
    let mut now = START_MS;
    // The key of each limiter holding a foreign value, if any.
    let mut foreign: [Option<&'static str>; LIMITERS] = [None; LIMITERS];
    // Whether the queue's sorted sets can be read directly (no foreign value there).
    let queue_readable =
        |foreign: &[Option<&str>; LIMITERS], l: usize| !matches!(foreign[l], Some("rq" | "rhb"));
    for (i, op) in ops.iter().enumerate() {
        let waiters_before = waiters(model, now).await;
        let mut heads_without_heartbeat = Vec::new();
        for limiter in 0..LIMITERS {
            heads_without_heartbeat.push(if queue_readable(&foreign, limiter) {
                head_without_heartbeat(redis, limiter).await
            } else {
                None
            });
        }
        match op {
            Op::Acquire {
                limiter,
                token,
                rate,
                permits,
                heartbeat_ms,
                wait,
            } => {
                let c = claim(*token, *rate, *permits, *heartbeat_ms);
                let k = keys(*limiter);
                let a = redis.rate_acquire(&k, &c, *wait, Some(now)).await;
                let b = model.rate_acquire(&k, &c, *wait, Some(now)).await;
                if !equal_with_message(&a, &b) {
                    return Err(format!(
                        "step {i} {op:?} at {now}: redis {a:?}, model {b:?}"
                    ));
                }
                reach(reached, kind_of(&a, *wait, now));
                reach_foreign(reached, &a, foreign[*limiter]);
            }
            Op::Cancel {
                limiter,
                token,
                rate,
                permits,
            } => {
                let c = claim(*token, *rate, *permits, 1_000);
                let k = keys(*limiter);
                let a = redis.rate_cancel(&k, &c, Some(now)).await;
                let b = model.rate_cancel(&k, &c, Some(now)).await;
                if !equal_with_message(&a, &b) {
                    return Err(format!(
                        "step {i} {op:?} at {now}: redis {a:?}, model {b:?}"
                    ));
                }
                reach(
                    reached,
                    match a {
                        Ok(true) => "cancel of a live place",
                        Ok(false) => "cancel of nothing",
                        Err(_) => "cancel failed",
                    },
                );
                reach_foreign(reached, &a, foreign[*limiter]);
            }
            // Someone else's writes to the queue's sorted sets, when they hold no foreign
            // value (a write there would fail, or delete it).
            Op::LoseHeartbeat {
                limiter,
                token,
                permits,
            } if queue_readable(&foreign, *limiter) => {
                if lose_heartbeat(redis, model, *limiter, *token, *permits).await {
                    reach(reached, "heartbeat entries lost");
                }
            }
            Op::PlantMember {
                limiter,
                member,
                ticket,
                heartbeat_ms,
            } if queue_readable(&foreign, *limiter) => {
                let until = heartbeat_ms.map(|ms| now + ms);
                plant_member(redis, model, *limiter, member, *ticket, until).await?;
                reach(reached, "members planted");
            }
            Op::LoseHeartbeat { .. } | Op::PlantMember { .. } => {}
            Op::PlantForeign { limiter, key, list } => {
                if let Some(old) = foreign[*limiter].take() {
                    delete_foreign(redis, model, *limiter, old).await?;
                }
                plant_foreign(redis, model, *limiter, key, *list).await?;
                foreign[*limiter] = Some(key);
            }
            Op::DeleteForeign { limiter } => {
                if let Some(old) = foreign[*limiter].take() {
                    delete_foreign(redis, model, *limiter, old).await?;
                }
            }
            Op::Advance(ms) => now += ms,
        }
        for (limiter, head) in heads_without_heartbeat.into_iter().enumerate() {
            let Some(head) = head else { continue };
            if !queue_readable(&foreign, limiter) {
                continue;
            }
            let rank: Option<i64> = redis
                .query(redis::cmd("ZRANK").arg(keys(limiter).key("rq")).arg(&head))
                .await
                .map_err(|e| format!("ZRANK: {e}"))?;
            if rank.is_none() {
                reach(reached, "a member without a heartbeat dropped");
            }
        }
        if waiters(model, now).await < waiters_before && !matches!(op, Op::Cancel { .. }) {
            reach(reached, "waiters left");
        }
        same_state(redis, model, now, i, op).await?;
        for (limiter, key) in foreign.iter().enumerate() {
            if let Some(key) = key {
                foreign_kept(redis, limiter, key).await?;
            }
        }
    }
    Ok(())
}

/// What a step's reply shows of a foreign value in its limiter.
fn reach_foreign<T>(reached: &Reached, reply: &redis_locks::Result<T>, foreign: Option<&str>) {
    match (reply, foreign) {
        (Err(e), Some(_)) if e.is_wrong_type() => reach(reached, "refused for a foreign value"),
        (Ok(_), Some(_)) => reach(reached, "answered beside a foreign value"),
        _ => {}
    }
}

/// The foreign value at the limiter's `key` is still there, as planted (no step overwrote
/// or deleted it).
async fn foreign_kept(redis: &RedisStore, limiter: usize, key: &str) -> Result<(), String> {
    let full = keys(limiter).key(key);
    let kind: String = redis
        .query(redis::cmd("TYPE").arg(&full))
        .await
        .map_err(|e| format!("TYPE: {e}"))?;
    let value: Vec<String> = match kind.as_str() {
        "list" => {
            redis
                .query(redis::cmd("LRANGE").arg(&full).arg(0).arg(-1))
                .await
        }
        "string" => redis
            .query(redis::cmd("GET").arg(&full))
            .await
            .map(|v: String| vec![v]),
        other => return Err(format!("the foreign value at {full} is gone ({other})")),
    }
    .map_err(|e| format!("read {full}: {e}"))?;
    if value != ["foreign"] {
        return Err(format!(
            "the foreign value at {full} was changed: {value:?}"
        ));
    }
    Ok(())
}

async fn waiters(model: &MemoryStore, now: u64) -> usize {
    let mut n = 0;
    for limiter in 0..LIMITERS {
        n += model
            .rate_inspect(&keys(limiter), &rates()[0], Some(now))
            .await
            .map_or(0, |s| s.waiters.len());
    }
    n
}

async fn same_state(
    redis: &RedisStore,
    model: &MemoryStore,
    now: u64,
    i: usize,
    op: &Op,
) -> Result<(), String> {
    for limiter in 0..LIMITERS {
        for rate in rates() {
            let a = redis.rate_inspect(&keys(limiter), &rate, Some(now)).await;
            let b = model.rate_inspect(&keys(limiter), &rate, Some(now)).await;
            if !equal_with_message(&a, &b) {
                return Err(format!(
                    "after step {i} {op:?} at {now}, limit{limiter} under {rate:?}: redis {a:?}, model {b:?}"
                ));
            }
        }
    }
    Ok(())
}

/// Random programs on an empty server of `rig` (`support::model_rig`) against the model;
/// with `seed`, the same programs every time (the planted-bug searches: found or not found
/// the same way on every run, never by luck).
fn run(
    rig: &ModelRig,
    config: Config,
    reached: &Reached,
    seed: Option<u8>,
) -> Result<(), TestError<Vec<Op>>> {
    let mut runner = match seed {
        Some(seed) => TestRunner::new_with_rng(
            config,
            proptest::test_runner::TestRng::from_seed(
                proptest::test_runner::RngAlgorithm::ChaCha,
                &[seed; 32],
            ),
        ),
        None => TestRunner::new(config),
    };
    runner.run(&prop::collection::vec(op(), 1..60), |ops| {
        let model = MemoryStore::new();
        let program = run_program(&rig.redis, &model, &ops, reached);
        rig.on_empty_server(program).map_err(TestCaseError::fail)
    })
}

/// The seed of the planted-bug searches.
const PLANTED_SEED: u8 = 1;

/// The scripts match the model, then the model with each planted bug is told apart from the
/// scripts (one test, so the process-wide bug switches never touch a clean run).
#[test]
fn rate_scripts_match_model_and_planted_bugs_are_found() {
    let rig = ModelRig::start();
    let reached = Reached::default();
    let config = Config {
        cases: cases(DEFAULT_CASES),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model-rate.txt",
        ))),
        ..Config::default()
    };
    if let Err(e) = run(&rig, config, &reached, None) {
        panic!("rate limiter scripts differ from the model: {e}");
    }
    let reached = reached.into_inner().expect("reached");
    for kind in [
        "admitted",
        "an earlier admission replayed",
        "refused try",
        "refused at the head with a retry",
        "refused behind others",
        "waiters left",
        "cancel of a live place",
        "cancel of nothing",
        "heartbeat entries lost",
        "a member without a heartbeat dropped",
        "members planted",
        "refused for a foreign value",
        "answered beside a foreign value",
    ] {
        assert!(
            !full_run(DEFAULT_CASES) || reached.contains(kind),
            "no program reached {kind}: {reached:?}"
        );
    }
    assert!(!reached.contains("head without a retry"), "{reached:?}");
    for bug in [
        Bug::RateBurstOffByOne,
        Bug::RateOvertakes,
        Bug::RateKeepsMembersWithoutHeartbeat,
        Bug::RateDeletesForeignQueueKeys,
    ] {
        plant(bug);
        let config = Config {
            cases: cases(DEFAULT_CASES).max(256),
            failure_persistence: None,
            ..Config::default()
        };
        let found = run(&rig, config, &Reached::default(), Some(PLANTED_SEED)).is_err();
        unplant_all();
        assert!(found, "the model check did not find {bug:?}");
    }
}

/// The largest numbers a script computes stay exact: a count near the limit over a day, a
/// full burst queued 70 times, so a refused try's estimate counts the capped 64 million
/// admissions ahead (products near 2^53, quotients beyond 2^32).
#[test]
fn estimates_with_a_long_queue_of_full_bursts_match_the_model() {
    let rig = ModelRig::start();
    let rate = Rate::new(999_983, secs(86_400)).burst(1_000_000);
    let model = MemoryStore::new();
    let k = keys(0);
    rig.runtime.block_on(async {
        let mut now = START_MS;
        for i in 0..72 {
            let c = RateClaim {
                token: format!("big{i}"),
                permits: 1_000_000,
                rate,
                heartbeat: secs(3_600),
            };
            let wait = i != 71;
            let a = rig.redis.rate_acquire(&k, &c, wait, Some(now)).await;
            let b = model.rate_acquire(&k, &c, wait, Some(now)).await;
            assert!(
                equal_with_message(&a, &b),
                "claim {i}: redis {a:?}, model {b:?}"
            );
            if i == 71 {
                let Ok(RateDecision::Refused(busy)) = a else {
                    panic!("the last try was not refused: {a:?}")
                };
                assert!(busy.retry_after.is_some_and(|r| r > secs(86_400 * 60)));
            }
            now += 7;
        }
        let a = rig.redis.rate_inspect(&k, &rate, Some(now)).await;
        let b = model.rate_inspect(&k, &rate, Some(now)).await;
        assert!(equal_with_message(&a, &b), "redis {a:?}, model {b:?}");
    });
}

/// The README's rate-limiter row, exactly: `Rate::per_second(n)` has a burst of `n`, so `n`
/// calls start at once after a quiet spell and one more every `1/n` s, and a one-second
/// window can see `2n - 1` starts (here 9 for 5); `.burst(1)` spaces them `1/n` apart, so a
/// window sees `n`. Checked on Redis and on the reference under one explicit clock.
#[test]
fn the_default_burst_is_the_count_as_the_readme_says() {
    let rig = ModelRig::start();
    rig.runtime.block_on(async {
        let model = MemoryStore::new();
        for (name, rate, starts) in [
            (0, Rate::per_second(5), 9),
            (1, Rate::per_second(5).burst(1), 5),
        ] {
            let k = keys(name);
            let stores: [&dyn Store; 2] = [&rig.redis, &model];
            for store in stores {
                let mut admitted = Vec::new();
                // A try every 50 ms over one second [START, START + 1000).
                for step in 0..20u64 {
                    let now = START_MS + step * 50;
                    loop {
                        let c = RateClaim {
                            token: format!("t{name}-{step}-{}", admitted.len()),
                            permits: 1,
                            rate,
                            heartbeat: secs(10),
                        };
                        match store.rate_acquire(&k, &c, false, Some(now)).await {
                            Ok(RateDecision::Admitted { .. }) => admitted.push(now),
                            Ok(RateDecision::Refused(_)) => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                assert_eq!(admitted.len(), starts, "{rate:?}: {admitted:?}");
                let at_once = admitted.iter().filter(|&&t| t == START_MS).count();
                assert_eq!(at_once as u64, rate.burst_size(), "{rate:?}: {admitted:?}");
            }
        }
    });
}
