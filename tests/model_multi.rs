//! Model check of the multi-lock step: random programs of multi-lock attempts
//! (`Store::acquire_all`, `multi_acquire.lua`) mixed with the single-name steps that make its
//! parts busy (Mutex, RwLock reader and writer under both policies, waiting writers,
//! FairLock for the family conflict), releases, renewals and clock advances, run step by step
//! on `RedisStore` (a real redis-server) and on `MemoryStore` under one virtual clock. Every
//! reply, and the state of every lock (both families) after every step, must be identical.
//!
//! The test also fails if its programs never reached one of the step's outcomes (granted,
//! granted again to its own token, refused by a writer, by readers, by a waiting writer,
//! family conflict), so it cannot pass by generating only easy programs.
//! `MODEL_CASES` raises the number of programs (see docs/MODEL_CHECKS.md).

mod support;
use support::model_rig::{cases, full_run};
use support::replies::equal_with_message;
use support::time::ms;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestCaseError, TestRng, TestRunner,
};
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    AcquireAll, Claim, Family, MemoryStore, Part, Policy, RedisStore, Request, Slot, Store,
};
use redis_locks::{Preference, Result};
use support::RedisServer;

const DEFAULT_CASES: u32 = 256;
const LOCKS: usize = 3;
const TOKENS: usize = 4;
const START_MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
enum Op {
    /// A multi-lock attempt of `token` over the locks in `mask`, writing those in `writes`.
    Multi {
        token: usize,
        mask: u8,
        writes: u8,
        policy: Policy,
        lease: u64,
    },
    /// A single-name attempt.
    Single {
        token: usize,
        lock: usize,
        request: Request,
        wait: bool,
        lease: u64,
    },
    /// Release by token of a lease-lock slot, or of the ticket queue.
    Release {
        token: usize,
        lock: usize,
        slot: Slot,
    },
    /// Renewal of a lease-lock hold.
    Extend {
        token: usize,
        lock: usize,
        slot: Slot,
        lease: u64,
    },
    Advance(u64),
}

fn lease_ms() -> impl Strategy<Value = u64> {
    prop_oneof![Just(100u64), Just(250), Just(1_000), 10u64..2_000]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        3 => Just(Request::Mutex),
        2 => Just(Request::Read(Preference::Writer)),
        1 => Just(Request::Read(Preference::Reader)),
        1 => Just(Request::Write(Preference::Reader)),
        1 => Just(Request::FairLock),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let policy = prop_oneof![3 => Just(Policy::Writer), 1 => Just(Policy::Reader)];
    let lease_slot = prop_oneof![Just(Slot::Write), Just(Slot::Read)];
    prop_oneof![
        5 => (0..TOKENS, 1u8..8, 0u8..8, policy, lease_ms()).prop_map(
            |(token, mask, writes, policy, lease)| Op::Multi { token, mask, writes, policy, lease }
        ),
        4 => (0..TOKENS, 0..LOCKS, request(), any::<bool>(), lease_ms()).prop_map(
            |(token, lock, request, wait, lease)| Op::Single { token, lock, request, wait, lease }
        ),
        3 => (0..TOKENS, 0..LOCKS, prop_oneof![
            2 => lease_slot.clone(),
            1 => Just(Request::FairLock.slot()),
        ])
            .prop_map(|(token, lock, slot)| Op::Release { token, lock, slot }),
        1 => (0..TOKENS, 0..LOCKS, lease_slot, lease_ms())
            .prop_map(|(token, lock, slot, lease)| Op::Extend { token, lock, slot, lease }),
        3 => prop_oneof![Just(1u64), Just(100), Just(250), 0u64..1_500].prop_map(Op::Advance),
    ]
}

fn token_of(i: usize) -> String {
    format!("mt{i}")
}

fn lock_keys(lock: usize) -> LockKeys {
    LockKeys::new("mm", &format!("lock{lock}")).expect("valid lock name")
}

fn claim(token: usize, slot: Slot, lease: u64, policy: Policy) -> Claim {
    Claim {
        token: token_of(token),
        slot,
        lease: ms(lease),
        heartbeat: ms(300),
        policy,
    }
}

/// The outcome kinds a program reached, so the test can require all of them.
fn outcome_kind(reply: &Result<AcquireAll>, again: bool) -> &'static str {
    match reply {
        Ok(AcquireAll::Granted(_)) if again => "granted again",
        Ok(AcquireAll::Granted(_)) => "granted",
        Ok(AcquireAll::Busy { busy, .. }) if busy.retry_after.is_none() => "busy: writer waits",
        Ok(AcquireAll::Busy { .. }) => "busy: held",
        Err(e) if e.is_family_conflict() => "family conflict",
        Err(_) => "error",
    }
}

async fn run_program(
    redis: &RedisStore,
    model: &MemoryStore,
    ops: &[Op],
    reached: &Mutex<BTreeSet<&'static str>>,
) -> std::result::Result<(), String> {
    let mut now = START_MS;
    // Tokens that hold a multi-lock grant, to tell a first grant from a renewal by retry.
    let mut granted: BTreeSet<(usize, u8, u8)> = BTreeSet::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Multi {
                token,
                mask,
                writes,
                policy,
                lease,
            } => {
                let parts: Vec<Part> = (0..LOCKS)
                    .filter(|l| mask & (1 << l) != 0)
                    .map(|l| Part {
                        lock: lock_keys(l),
                        slot: if writes & (1 << l) != 0 {
                            Slot::Write
                        } else {
                            Slot::Read
                        },
                    })
                    .collect();
                let c = claim(*token, Slot::Write, *lease, *policy);
                let r = redis.acquire_all(&parts, &c, Some(now)).await;
                let m = model.acquire_all(&parts, &c, Some(now)).await;
                if !equal_with_message(&r, &m) {
                    return Err(format!(
                        "step {step}: {op:?} at t+{}\n  redis: {r:?}\n  model: {m:?}",
                        now - START_MS
                    ));
                }
                let key = (*token, *mask, *writes);
                let again = granted.contains(&key);
                reached.lock().unwrap().insert(outcome_kind(&r, again));
                if matches!(r, Ok(AcquireAll::Granted(_))) {
                    granted.insert(key);
                }
            }
            Op::Single {
                token,
                lock,
                request,
                wait,
                lease,
            } => {
                let mut c = request.claim(ms(*lease), ms(300));
                c.token = token_of(*token);
                let keys = lock_keys(*lock);
                let r = redis.acquire(&keys, &c, *wait, Some(now)).await;
                let m = model.acquire(&keys, &c, *wait, Some(now)).await;
                if !equal_with_message(&r, &m) {
                    return Err(format!(
                        "step {step}: {op:?}\n  redis: {r:?}\n  model: {m:?}"
                    ));
                }
            }
            Op::Release { token, lock, slot } => {
                let c = claim(*token, *slot, 100, Policy::Writer);
                let keys = lock_keys(*lock);
                let r = redis.release(&keys, &c, Some(now)).await;
                let m = model.release(&keys, &c, Some(now)).await;
                if !equal_with_message(&r, &m) {
                    return Err(format!(
                        "step {step}: {op:?}\n  redis: {r:?}\n  model: {m:?}"
                    ));
                }
                granted.retain(|(t, _, _)| t != token);
            }
            Op::Extend {
                token,
                lock,
                slot,
                lease,
            } => {
                let c = claim(*token, *slot, *lease, Policy::Writer);
                let keys = lock_keys(*lock);
                let d = ms(*lease);
                let r = redis.extend(&keys, &c, d, Some(now)).await;
                let m = model.extend(&keys, &c, d, Some(now)).await;
                if !equal_with_message(&r, &m) {
                    return Err(format!(
                        "step {step}: {op:?}\n  redis: {r:?}\n  model: {m:?}"
                    ));
                }
            }
            Op::Advance(ms) => {
                now += ms;
                granted.clear();
            }
        }
        for lock in 0..LOCKS {
            let keys = lock_keys(lock);
            for family in [Family::LeaseLock, Family::TicketQueue] {
                let r = redis.inspect(&keys, family, Some(now)).await;
                let m = model.inspect(&keys, family, Some(now)).await;
                if !equal_with_message(&r, &m) {
                    return Err(format!(
                        "step {step}: after {op:?}: {family:?} of lock{lock} at t+{}\n  redis: {r:?}\n  model: {m:?}",
                        now - START_MS
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn multi_lock_script_matches_model() {
    let server = RedisServer::start();
    let runtime = support::time::current_thread();
    let redis = runtime
        .block_on(RedisStore::connect(&server.url()))
        .expect("connect");
    let reached = Arc::new(Mutex::new(BTreeSet::new()));
    let config = Config {
        cases: cases(DEFAULT_CASES),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/model_multi.proptest-regressions",
        ))),
        source_file: Some(file!()),
        ..Config::default()
    };
    let kinds = [
        "granted",
        "granted again",
        "busy: held",
        "busy: writer waits",
        "family conflict",
    ];
    let check = |runner: &mut TestRunner| {
        let outcome = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
            runtime.block_on(async {
                let _: redis::Value = redis
                    .query(&redis::cmd("FLUSHALL"))
                    .await
                    .map_err(|e| TestCaseError::fail(format!("FLUSHALL: {e}")))?;
                let model = MemoryStore::new();
                run_program(&redis, &model, &ops, &reached)
                    .await
                    .map_err(TestCaseError::fail)
            })
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
    };
    check(&mut TestRunner::new(config.clone()));
    // Random programs sometimes miss an outcome (a grant again to its own token needs a
    // retry of a live grant); as many programs from fixed seeds, up to four, then make sure
    // every outcome was compared.
    for seed in 0..4u8 {
        if !full_run(DEFAULT_CASES) || kinds.iter().all(|k| reached.lock().unwrap().contains(k)) {
            break;
        }
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]);
        check(&mut TestRunner::new_with_rng(config.clone(), rng));
    }
    let reached = reached.lock().unwrap().clone();
    for kind in kinds {
        assert!(
            !full_run(DEFAULT_CASES) || reached.contains(kind),
            "no program reached `{kind}`; reached {reached:?}"
        );
    }
}
