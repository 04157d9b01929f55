//! Store invariants the scripts and the in-memory reference must keep, whoever calls them:
//!
//! - the ticket queue knows its capacity; kinds that disagree on it are refused with
//!   `Error::is_capacity_conflict()` instead of being granted side by side;
//! - an acquire that ends in an error (the family conflict) leaves no trace;
//! - claim tokens are validated by the store itself, before any state is touched;
//! - a waiter that died blocks the lock for at most about one lease;
//! - Relative permit changes (`PermitChange::Add` / `Forget`) are applied by the store in one
//!   step, from the stored count or the handle's own, within 1 to `MAX_PERMITS`.
//!
//! Every test runs on a real redis-server and on the in-memory store.

mod support;
use support::quick::Quick;
use support::time::{ms, secs};

use std::fmt::Debug;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, Claim, Family, HoldKind, PermitChange, Policy, Slot, Store,
};
use redis_locks::MAX_PERMITS;
use redis_locks::{LockClient, LockInfo, Preference, Result};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use support::backend::{join, Backend, EVENTUALLY};
use support::faulty::Faulty;
use support::proxy::Proxy;

// ---- shared helpers ------------------------------------------------------------------------

/// How long a refused waiting acquire may take to return its error (it should be at once).
const REFUSAL_BOUND: Duration = Duration::from_secs(5);

/// How long a background clean-up may take to show in `inspect`.
const CLEANUP_BOUND: Duration = Duration::from_secs(3);

/// Polls `probe` every 10 ms until `done` holds or `bound` passes; returns the last value and
/// whether `done` held.
async fn poll_until<T, F, Fut>(
    bound: Duration,
    mut probe: F,
    done: impl Fn(&T) -> bool,
) -> (T, bool)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let give_up = Instant::now() + bound;
    loop {
        let value = probe().await;
        if done(&value) {
            return (value, true);
        }
        if Instant::now() >= give_up {
            return (value, false);
        }
        sleep(ms(10)).await;
    }
}

/// The ticket-queue state of `name` (holders, waiters), read through a FairLock handle.
async fn queue_info(c: &LockClient, name: &str) -> LockInfo {
    c.fair_lock(name)
        .inspect()
        .await
        .expect("inspect ticket queue")
}

/// Panics unless `got` is an error with `is_capacity_conflict()`; `state` is the queue as
/// seen right after the attempt, for the message.
fn assert_capacity_conflict<T: Debug>(what: &str, got: Result<T>, state: &LockInfo) {
    match got {
        Err(e) if e.is_capacity_conflict() => {}
        other => panic!(
            "{what}: expected Err(is_capacity_conflict()), got {other:?}; the queue now has \
             {} holder(s) {:?} and waiters {:?}",
            state.holders.len(),
            state.holders,
            state.waiters
        ),
    }
}

/// [`assert_capacity_conflict`] of a try's outcome `got`, the queue of `name` read after it.
async fn refused_try<T: Debug>(what: &str, c: &LockClient, name: &str, got: Result<T>) {
    let state = queue_info(c, name).await;
    assert_capacity_conflict(what, got, &state);
}

/// Runs a waiting acquire that must be refused at once with a capacity conflict, and checks
/// that nothing was granted and the refused caller left no queue place.
async fn assert_waiting_capacity_conflict<T: Debug>(
    what: &str,
    c: &LockClient,
    name: &str,
    holders_before: usize,
    acquire: impl IntoFuture<Output = redis_locks::Result<T>>,
) {
    let got = match timeout(REFUSAL_BOUND, acquire.into_future()).await {
        Ok(got) => got,
        Err(_) => {
            let state = queue_info(c, name).await;
            panic!(
                "{what}: still waiting after {REFUSAL_BOUND:?} (queued behind a holder of \
                 another capacity) instead of being refused with a capacity conflict; \
                 holders {:?}, waiters {:?}",
                state.holders, state.waiters
            );
        }
    };
    let state = queue_info(c, name).await;
    assert_capacity_conflict(what, got, &state);
    let (state, left) = poll_until(
        CLEANUP_BOUND,
        || queue_info(c, name),
        |s| s.waiters.is_empty(),
    )
    .await;
    assert!(
        left,
        "{what}: the refused caller kept a queue place: {:?}",
        state.waiters
    );
    assert_eq!(
        state.holders.len(),
        holders_before,
        "{what}: the refusal changed the holders: {:?}",
        state.holders
    );
}

// ---- defect 4: the ticket queue's capacity ---------------------------------------------------

/// `queue_acquire.lua` (and the memory store) counted each request against the
/// capacity the *caller* passed. A FairLock holder takes 1 permit of 1 (exclusive, new
/// fence), yet a Fair RwLock reader (1 of 2^30) was granted beside it. The queue must refuse
/// a request whose capacity disagrees with the one in use, with `is_capacity_conflict()`,
/// both as a try and as a waiting acquire, leaving no queue place. A Fair RwLock writer
/// (2^30 of 2^30) is refused the same way, not queued behind the FairLock.
async fn fair_lock_holder_refuses_fair_rwlock_with_capacity_conflict(b: Backend) {
    let name = "cap-fair-vs-fair-rw";
    let (c, other) = (b.client().await, b.client().await);
    let holder = c.fair_lock(name).lock().await.expect("FairLock holder");
    let rw = other.rwlock(name).preference(Preference::Fair);

    let what = "Fair RwLock try_read beside a FairLock holder";
    refused_try(what, &c, name, rw.try_read().await).await;
    let what = "Fair RwLock read() beside a FairLock holder";
    assert_waiting_capacity_conflict(what, &c, name, 1, rw.read()).await;
    let what = "Fair RwLock try_write beside a FairLock holder";
    refused_try(what, &c, name, rw.try_write().await).await;
    let what = "Fair RwLock write() beside a FairLock holder";
    assert_waiting_capacity_conflict(what, &c, name, 1, rw.write()).await;
    assert!(holder.is_held());
    assert!(holder.release().await.expect("release"));
}

/// A `Semaphore(5)` permit was granted beside a FairLock holder (1 of 1), because
/// the semaphore counted the one used permit against its own 5. Expected: refused with
/// `is_capacity_conflict()` (try and waiting), nothing granted, no queue place left.
async fn fair_lock_holder_refuses_semaphore_of_five_with_capacity_conflict(b: Backend) {
    let name = "cap-fair-vs-sem5";
    let (c, other) = (b.client().await, b.client().await);
    let holder = c.fair_lock(name).lock().await.expect("FairLock holder");
    let sem = other.semaphore(name, 5);

    let what = "Semaphore(5) try_acquire beside a FairLock holder";
    refused_try(what, &c, name, sem.try_acquire().await).await;
    let what = "Semaphore(5) acquire() beside a FairLock holder";
    assert_waiting_capacity_conflict(what, &c, name, 1, sem.acquire()).await;
    assert!(holder.release().await.expect("release"));
}

/// A `Semaphore(3)` holding all three permits (exclusive, new fence) and a FairLock
/// (1 of 1) disagree on the capacity; without the capacity check the FairLock counts the 3 used permits
/// against its own capacity of 1 and is just "busy" (a waiting `lock()` queues behind the
/// semaphore). Expected: `is_capacity_conflict()` for `try_lock` and `lock()`, no queue place.
async fn full_semaphore_of_three_refuses_fair_lock_with_capacity_conflict(b: Backend) {
    let name = "cap-sem3-vs-fair";
    let (c, other) = (b.client().await, b.client().await);
    let all = c
        .semaphore(name, 3)
        .acquire_many(3)
        .await
        .expect("3 of 3 permits");
    let fair = other.fair_lock(name);

    let what = "FairLock try_lock beside Semaphore(3) 3-of-3";
    refused_try(what, &c, name, fair.try_lock().await).await;
    let what = "FairLock lock() beside Semaphore(3) 3-of-3";
    assert_waiting_capacity_conflict(what, &c, name, 1, fair.lock()).await;
    assert!(all.release().await.expect("release"));
}

/// The other way round: with a FairLock holding (1 of 1), a `Semaphore(3)` counts
/// the used permit against its own 3, so without the capacity check `try_acquire_many(2)` is granted beside
/// the exclusive FairLock holder (1 + 2 <= 3), and `acquire_many(3)` is merely busy (and
/// would queue behind it). Expected: `is_capacity_conflict()` for all of them, no queue place.
async fn fair_lock_holder_refuses_semaphore_of_three(b: Backend) {
    let name = "cap-fair-vs-sem3";
    let (c, other) = (b.client().await, b.client().await);
    let holder = c.fair_lock(name).lock().await.expect("FairLock holder");
    let sem = other.semaphore(name, 3);

    let what = "Semaphore(3) try_acquire_many(2) beside a FairLock holder";
    refused_try(what, &c, name, sem.try_acquire_many(2).await).await;
    let what = "Semaphore(3) try_acquire_many(3) beside a FairLock holder";
    refused_try(what, &c, name, sem.try_acquire_many(3).await).await;
    let what = "Semaphore(3) acquire_many(3) beside a FairLock holder";
    assert_waiting_capacity_conflict(what, &c, name, 1, sem.acquire_many(3)).await;
    assert!(holder.release().await.expect("release"));
}

/// `semaphore("s", 2)` holding both permits, then
/// `semaphore("s", 5).try_acquire()` was granted: three holders of a 2-permit semaphore.
/// Expected: `is_capacity_conflict()` (try and waiting), still two holders, no queue place.
async fn full_semaphore_of_two_refuses_semaphore_of_five(b: Backend) {
    let name = "cap-sem2-vs-sem5";
    let (c, other) = (b.client().await, b.client().await);
    let two = c.semaphore(name, 2);
    let p1 = two.acquire().await.expect("permit 1 of 2");
    let p2 = two.acquire().await.expect("permit 2 of 2");
    let five = other.semaphore(name, 5);

    let what = "Semaphore(5) try_acquire beside a full Semaphore(2)";
    refused_try(what, &c, name, five.try_acquire().await).await;
    let what = "Semaphore(5) acquire() beside a full Semaphore(2)";
    assert_waiting_capacity_conflict(what, &c, name, 2, five.acquire()).await;
    assert!(p1.release().await.expect("release"));
    assert!(p2.release().await.expect("release"));
}

/// A count stored by `set_permits` applies to every Semaphore handle, but a
/// FairLock (capacity 1) or a Fair RwLock (capacity 2^30) on a name whose stored count is 4
/// must be refused with `is_capacity_conflict()`, whether or not a permit is out. Without the check
/// the FairLock takes 1 of the stored 4 (a non-exclusive "FairLock" beside a permit), the
/// Fair RwLock reader likewise, and the Fair RwLock writer gets an invalid-input error
/// ("asked for 1073741824 permits of 4").
async fn stored_permit_count_refuses_fair_lock_and_fair_rwlock(b: Backend) {
    let name = "cap-stored-4";
    let (c, other) = (b.client().await, b.client().await);
    let sem = c.semaphore(name, 2);
    sem.set_permits(4).await.expect("set_permits(4)");
    let permit = sem.acquire().await.expect("1 of 4");
    let fair = other.fair_lock(name);
    let rw = other.rwlock(name).preference(Preference::Fair);

    let what = "FairLock try_lock on a name with 4 stored permits";
    refused_try(what, &c, name, fair.try_lock().await).await;
    let what = "FairLock lock() on a name with 4 stored permits";
    assert_waiting_capacity_conflict(what, &c, name, 1, fair.lock()).await;
    let what = "Fair RwLock try_read on a name with 4 stored permits";
    refused_try(what, &c, name, rw.try_read().await).await;
    let what = "Fair RwLock try_write on a name with 4 stored permits";
    refused_try(what, &c, name, rw.try_write().await).await;
    assert!(permit.release().await.expect("release"));

    // Nobody holds now; the stored count still disagrees with the FairLock's.
    let what = "FairLock try_lock on an idle name with 4 stored permits";
    refused_try(what, &c, name, fair.try_lock().await).await;
    // Semaphore handles follow the stored count whatever their own (existing behaviour).
    let any = other.semaphore(name, 9);
    let four = any.try_acquire_many(4).await.expect("all 4 free");
    assert!(support::would_block(any.try_acquire().await));
    assert!(four.release().await.expect("release"));
}

/// The compatible cases (these must keep passing): kinds
/// whose capacity agrees share the queue. `semaphore(name, 1)` and `fair_lock(name)` act as
/// one mutex (the second is busy or queued, never an error); two `semaphore(name, 3)`
/// handles share 3 permits; a stored count applies to Semaphore handles of any count, and a
/// FairLock is fine on a name whose stored count is 1.
async fn agreeing_capacities_share_the_queue(b: Backend) {
    let (c, other) = (b.client().await, b.client().await);

    // Semaphore(1) and FairLock: one mutex.
    let name = "cap-ok-sem1-fair";
    let fair = c.fair_lock(name);
    let sem1 = other.semaphore(name, 1);
    let g = fair.lock().await.expect("FairLock");
    assert!(
        sem1.try_acquire()
            .await
            .expect_err("Semaphore(1) beside a FairLock: busy, not an error")
            .is_would_block(),
        "Semaphore(1) granted beside a FairLock holder"
    );
    let s1 = sem1.clone();
    let waiting = tokio::spawn(async move { s1.acquire().await });
    let (state, queued) = poll_until(
        EVENTUALLY,
        || queue_info(&c, name),
        |s| s.waiters.len() == 1,
    )
    .await;
    assert!(
        queued,
        "Semaphore(1) did not queue behind the FairLock: {state:?}"
    );
    let fence = g.fencing_token();
    assert!(g.release().await.expect("release"));
    let p = join("Semaphore(1) after the FairLock", waiting)
        .await
        .expect("Semaphore(1) granted after the FairLock released");
    assert!(p.fencing_token() > fence, "1 of 1 is exclusive: new fence");
    assert!(
        fair.try_lock()
            .await
            .expect_err("FairLock beside Semaphore(1): busy, not an error")
            .is_would_block(),
        "FairLock granted beside a Semaphore(1) holder"
    );
    assert!(p.release().await.expect("release"));
    let g = fair.try_lock().await.expect("free again");
    assert!(g.release().await.expect("release"));

    // Two Semaphore(3) handles on two clients: 3 permits in all.
    let name = "cap-ok-sem3-sem3";
    let (a, bb) = (c.semaphore(name, 3), other.semaphore(name, 3));
    let two = a.acquire_many(2).await.expect("2 of 3");
    let one = bb.acquire().await.expect("3 of 3");
    assert!(support::would_block(bb.try_acquire().await));
    assert!(support::would_block(a.try_acquire().await));
    assert!(two.release().await.expect("release"));
    let again = bb.try_acquire_many(2).await.expect("2 free again");
    assert_eq!(queue_info(&c, name).await.holders.len(), 2);
    assert!(again.release().await.expect("release"));
    assert!(one.release().await.expect("release"));

    // A stored count applies to every Semaphore handle, whatever its own count.
    let name = "cap-ok-stored-3";
    let stored = c.semaphore(name, 2);
    stored.set_permits(3).await.expect("set_permits(3)");
    let seven = other.semaphore(name, 7);
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(
            seven
                .try_acquire()
                .await
                .unwrap_or_else(|e| panic!("Semaphore(7) on stored 3, permit {i}: {e}")),
        );
    }
    assert!(support::would_block(seven.try_acquire().await));
    assert!(support::would_block(stored.try_acquire().await));
    for p in held {
        assert!(p.release().await.expect("release"));
    }

    // A stored count is a Semaphore's, and any set_permits may change it: a FairLock is
    // refused on it even when the count is 1 (else a later set_permits(2) would admit a second
    // FairLock holder), and set_permits is refused while a FairLock uses the queue.
    let name = "cap-stored-1";
    let _sem = c.semaphore(name, 4);
    _sem.set_permits(1).await.expect("set_permits(1)");
    let refused = other.fair_lock(name).try_lock().await;
    assert!(
        matches!(&refused, Err(e) if e.is_capacity_conflict()),
        "FairLock on a stored count: {refused:?}"
    );
    let name = "cap-fixed-in-use";
    let g = other.fair_lock(name).try_lock().await.expect("free");
    for permits in [1, 2] {
        let resized = c.semaphore(name, 1).set_permits(permits).await;
        assert!(
            matches!(&resized, Err(e) if e.is_capacity_conflict()),
            "set_permits({permits}) beside a FairLock holder: {:?}",
            resized.map(|_| ())
        );
    }
    assert!(g.release().await.expect("release"));
}

both_backends!(
    fair_lock_holder_refuses_fair_rwlock_with_capacity_conflict,
    fair_lock_holder_refuses_semaphore_of_five_with_capacity_conflict,
    full_semaphore_of_three_refuses_fair_lock_with_capacity_conflict,
    fair_lock_holder_refuses_semaphore_of_three,
    full_semaphore_of_two_refuses_semaphore_of_five,
    stored_permit_count_refuses_fair_lock_and_fair_rwlock,
    agreeing_capacities_share_the_queue,
);

// ---- defect 5: an acquire that ends in an error leaves no trace -----------------------------

/// The lease-lock state of `name` (writer, readers, waiting writers).
async fn lease_info(c: &LockClient, name: &str) -> LockInfo {
    c.rwlock(name).inspect().await.expect("inspect lease lock")
}

/// A client on its own connection that [`Faulty::freeze`] can stop like a frozen process.
async fn gated_client(b: &Backend) -> (LockClient, Arc<Faulty>) {
    let gate = Faulty::new(b.client().await.store().clone());
    let client = LockClient::builder().store(gate.clone()).expect("client");
    (client, gate)
}

/// The scenario of defect 5 for one kind of waiting writer (`start` makes it wait on the
/// gated client): it announces itself in the waiting-writer set with a 30 s heartbeat; its
/// calls are held back while the lease-lock holder's lease lapses without a release and a
/// FairLock takes the name; then its next attempt runs and must end in a family conflict
/// that leaves nothing behind.
async fn family_conflict_leaves_no_waiting_writer<G, F, Fut>(b: Backend, name: &str, start: F)
where
    G: Debug + Send + 'static,
    F: FnOnce(LockClient) -> Fut,
    Fut: Future<Output = redis_locks::Result<G>> + Send + 'static,
{
    let c = b.client().await;
    let (gated, gate) = gated_client(&b).await;
    let holder = c.lock_unrenewed(name, secs(30)).await;
    let waiter: JoinHandle<redis_locks::Result<G>> = tokio::spawn(start(gated));
    let (state, announced) = poll_until(
        EVENTUALLY,
        || lease_info(&c, name),
        |s| s.waiters.len() == 1,
    )
    .await;
    assert!(
        announced,
        "setup: the writer never announced itself: {state:?}"
    );

    // The waiter's next attempts are held back while the name changes family.
    gate.freeze().await;
    // The holder goes without a release (which would hand the lock to the waiter): evicted,
    // as an operator would (no request shortens a lease).
    c.force_release(name).await.expect("evict the holder");
    let (state, lapsed) = poll_until(
        EVENTUALLY,
        || lease_info(&c, name),
        |s| s.holders.is_empty(),
    )
    .await;
    assert!(lapsed, "setup: the holder was not evicted: {state:?}");
    let fair = c
        .fair_lock(name)
        .try_lock()
        .await
        .expect("setup: the FairLock takes the name once the lease lapsed");
    gate.thaw();

    let got = join("the waiting writer's next attempt", waiter).await;
    match &got {
        Err(e) if e.is_family_conflict() => {}
        other => panic!("setup: expected Err(is_family_conflict()), got {other:?}"),
    }

    // No trace: the waiting-writer entry is gone (its heartbeat would keep it for 30 s).
    let (state, gone) = poll_until(
        CLEANUP_BOUND,
        || lease_info(&c, name),
        |s| s.waiters.is_empty(),
    )
    .await;
    assert!(
        gone,
        "the writer refused with a family conflict ({got:?}) is still announced as a waiting \
         writer {CLEANUP_BOUND:?} later (it holds readers back until its 30 s heartbeat \
         lapses): {:?}",
        state.waiters
    );

    // Once the FairLock releases, a reader is admitted at once, and a writer's release does
    // not hand the lock to the dead claim.
    assert!(fair.release().await.expect("release FairLock"));
    let rw = c.rwlock(name);
    let r = rw
        .read()
        .timeout(secs(2))
        .await
        .expect("a reader is admitted at once after the FairLock released");
    assert!(r.release().await.expect("release reader"));
    let w = rw.write().timeout(secs(2)).await.expect("writer");
    assert!(w.release().await.expect("release writer"));
    let r = rw
        .read()
        .timeout(secs(2))
        .await
        .expect("a reader is admitted at once after a writer released");
    assert!(r.release().await.expect("release reader"));
    drop(holder);
}

/// With a Mutex waiter (it announces itself like a writer): `rw_acquire.lua` and the
/// memory store answered the family conflict without removing the token from the
/// waiting-writer set, and `wait.rs` disarmed the clean-up because the error is not
/// retryable. The dead announcement then held readers back for its whole heartbeat window.
async fn refused_mutex_waiter_leaves_no_waiting_writer(b: Backend) {
    family_conflict_leaves_no_waiting_writer(b, "trace-mutex", |c| async move {
        c.mutex("trace-mutex").heartbeat(secs(30)).lock().await
    })
    .await
}

/// With an RwLock writer (writer preference): the same trace is left by `write()`.
async fn refused_rwlock_writer_leaves_no_waiting_writer(b: Backend) {
    family_conflict_leaves_no_waiting_writer(b, "trace-rwlock", |c| async move {
        c.rwlock("trace-rwlock").heartbeat(secs(30)).write().await
    })
    .await
}

both_backends!(
    refused_mutex_waiter_leaves_no_waiting_writer,
    refused_rwlock_writer_leaves_no_waiting_writer,
);

// ---- defect 7: tokens are validated by the store --------------------------------------------

/// Runs a store-level test body on a fresh `RedisStore` (private server, or `REDIS_URL`) and
/// on a fresh `MemoryStore`.
macro_rules! both_stores {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    let (_server, url) = $crate::support::server_url();
                    let store = redis_locks::testing::store::RedisStore::connect(&url)
                        .await
                        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
                    super::$name(std::sync::Arc::new(store)).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name(std::sync::Arc::new(redis_locks::testing::store::MemoryStore::new()))
                        .await
                }
            }
        )+
    };
}

/// The keys of lock `name`, made unique to this test process: these tests assert an untouched
/// state (fence 0), which a shared `REDIS_URL` server keeps from earlier runs.
fn keys(name: &str) -> LockKeys {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{}-{nanos}", std::process::id())
    });
    LockKeys::new("rl", &format!("{name}-{run}")).expect("lock keys")
}

fn claim(token: &str, slot: Slot) -> Claim {
    Claim {
        token: token.into(),
        slot,
        lease: secs(30),
        heartbeat: secs(30),
        policy: Policy::Writer,
    }
}

/// True for `Err(e)` with `e.is_invalid_input()`.
fn invalid<T>(r: &redis_locks::Result<T>) -> bool {
    matches!(r, Err(e) if e.is_invalid_input())
}

/// No store checked claim tokens, though they travel inside Lua-parsed records
/// (`deadline|token`, `token#weight`). Every method that takes a claim (acquire, try or
/// waiting; release; extend; downgrade) must refuse a token outside 1 to 64 characters of
/// `[A-Za-z0-9_-]` with `is_invalid_input()`, for every slot, in `RedisStore` and
/// `MemoryStore`, before touching any state (both families stay empty, fence 0).
async fn store_refuses_invalid_tokens_on_every_claim_method(store: Arc<dyn Store>) {
    let long = "x".repeat(65);
    let bad_tokens = [
        "A|B",
        "tok#5",
        "",
        long.as_str(),
        "white space",
        "caf\u{e9}",
        "line\nbreak",
    ];
    let slots = [
        Slot::Write,
        Slot::Read,
        Slot::Ticket {
            weight: 1,
            capacity: 1,
            resizable: false,
        },
        Slot::Ticket {
            weight: 2,
            capacity: 5,
            resizable: true,
        },
    ];
    // The boundary of the allowed charset and length stays accepted.
    let longest: String = "Az09_-".chars().cycle().take(64).collect();
    for (j, slot) in slots.iter().enumerate() {
        let lock = keys(&format!("good-token-{j}"));
        let c = claim(&longest, *slot);
        let got = store.acquire(&lock, &c, false, None).await;
        assert!(
            matches!(got, Ok(Acquire::Granted(_))),
            "a valid 64-character token ({slot:?}) was refused: {got:?}"
        );
        let got = store.extend(&lock, &c, secs(60), None).await;
        assert!(matches!(got, Ok(true)), "extend, valid token: {got:?}");
        let got = store.release(&lock, &c, None).await;
        assert!(matches!(got, Ok(true)), "release, valid token: {got:?}");
    }

    let (mut accepted, mut touched) = (Vec::new(), Vec::new());
    for (i, token) in bad_tokens.iter().enumerate() {
        for (j, slot) in slots.iter().enumerate() {
            // One lock per case: whatever a case leaves behind cannot mask another.
            let lock = keys(&format!("bad-token-{i}-{j}"));
            let c = claim(token, *slot);
            let mut check = |method: &str, ok: bool, got: String| {
                if !ok {
                    accepted.push((i, format!("{method}({token:?}, {slot:?}) -> {got}")));
                }
            };
            let r = store.acquire(&lock, &c, false, None).await;
            check("try acquire", invalid(&r), format!("{r:?}"));
            let r = store.acquire(&lock, &c, true, None).await;
            check("waiting acquire", invalid(&r), format!("{r:?}"));
            let r = store.extend(&lock, &c, secs(60), None).await;
            check("extend", invalid(&r), format!("{r:?}"));
            let r = store.downgrade(&lock, &c, None).await;
            check("downgrade", invalid(&r), format!("{r:?}"));
            let r = store.release(&lock, &c, None).await;
            check("release", invalid(&r), format!("{r:?}"));
            for family in [Family::LeaseLock, Family::TicketQueue] {
                match store.inspect(&lock, family, None).await {
                    Ok(s) if s.holders.is_empty() && s.waiters.is_empty() && s.fence == 0 => {}
                    // An unreadable state counts as touched (an empty token leaves a writer
                    // record `<deadline>|` that the scripts then call corrupt).
                    got => touched.push((
                        i,
                        format!(
                            "state touched by token {token:?} ({slot:?}): {family:?} -> {got:?}"
                        ),
                    )),
                }
            }
        }
    }
    // The first problem of each token, then the rest up to a dozen lines.
    let all: Vec<&(usize, String)> = accepted.iter().chain(&touched).collect();
    let mut shown: Vec<&str> = (0..bad_tokens.len())
        .filter_map(|i| all.iter().find(|(t, _)| *t == i).map(|(_, p)| p.as_str()))
        .collect();
    shown.truncate(12);
    assert!(
        accepted.is_empty() && touched.is_empty(),
        "{} of {} claim calls with invalid tokens were not refused with is_invalid_input(), \
         and {} lock states were touched; the first problem per token:\n{}",
        accepted.len(),
        bad_tokens.len() * slots.len() * 5,
        touched.len(),
        shown.join("\n")
    );
}

/// `rw_release.lua` cleans up "an expired record of ours" by a suffix match
/// (`...|<token>`), so with a writer whose token is `A|B` (record `<deadline>|A|B`), a
/// release by token `B`, which holds nothing, deleted that live writer's record. The store
/// must refuse the token `A|B`; and the attack must not work: whatever holds survives a
/// release by another token. (The memory store compares tokens exactly, so there only the
/// refusal fails without the check.)
async fn pipe_in_token_cannot_forge_another_writers_release(store: Arc<dyn Store>) {
    let lock = keys("pipe-token");
    let victim = claim("A|B", Slot::Write);
    let bystander = claim("B", Slot::Write);
    let granted = store.acquire(&lock, &victim, false, None).await;
    if let Ok(Acquire::Granted(_)) = granted {
        let released = store.release(&lock, &bystander, None).await;
        let s = store
            .inspect(&lock, Family::LeaseLock, None)
            .await
            .expect("inspect");
        assert!(
            s.holders
                .iter()
                .any(|h| h.token == victim.token && h.kind == HoldKind::Write),
            "a release by token `B` (which held nothing; it returned {released:?}) deleted \
             the live writer record of token `A|B`: holders now {:?}",
            s.holders
        );
    }
    assert!(
        invalid(&granted),
        "the token `A|B` must be refused with is_invalid_input(), got {granted:?}"
    );
    // The lock is untouched: a valid writer takes it at once.
    let honest = claim("honest-writer", Slot::Write);
    assert!(matches!(
        store.acquire(&lock, &honest, false, None).await,
        Ok(Acquire::Granted(_))
    ));
    assert!(store.release(&lock, &honest, None).await.expect("release"));
}

/// A ticket member is `token#weight`, and `weight_of` reads a token ending in
/// `#<digits>` as that many permits. A FairLock claim with token `x#0` counted as 0 permits,
/// so a second FairLock was granted beside it (two holders of a 1-permit lock); a one-permit
/// claim with token `y#5` counted as 5 and locked every other permit of a `Semaphore(5)`.
/// The store must refuse such tokens, and the attacks must not work.
async fn hash_digits_token_cannot_fake_a_permit_count(store: Arc<dyn Store>) {
    let fair = Slot::Ticket {
        weight: 1,
        capacity: 1,
        resizable: false,
    };
    let lock = keys("hash-token-fair");
    let zero = claim("x#0", fair);
    let honest = claim("honest-fair", fair);
    let attacker = store.acquire(&lock, &zero, false, None).await;
    let second = store.acquire(&lock, &honest, false, None).await;
    let s = store
        .inspect(&lock, Family::TicketQueue, None)
        .await
        .expect("inspect");
    assert!(
        s.holders.len() <= 1,
        "two holders of a 1-permit FairLock (the token `x#0` counted as 0 permits: {attacker:?}, \
         then {second:?}): {:?}",
        s.holders
    );
    assert!(
        invalid(&attacker),
        "the token `x#0` must be refused with is_invalid_input(), got {attacker:?}"
    );
    assert!(matches!(second, Ok(Acquire::Granted(_))), "{second:?}");

    let sem = Slot::Ticket {
        weight: 1,
        capacity: 5,
        resizable: true,
    };
    let lock = keys("hash-token-sem");
    let five = claim("y#5", sem);
    let honest = claim("honest-permit", sem);
    let attacker = store.acquire(&lock, &five, false, None).await;
    let second = store.acquire(&lock, &honest, false, None).await;
    let s = store
        .inspect(&lock, Family::TicketQueue, None)
        .await
        .expect("inspect");
    assert!(
        matches!(second, Ok(Acquire::Granted(_))),
        "a one-permit claim with token `y#5` ({attacker:?}) took all 5 permits of the \
         semaphore: the next one-permit claim got {second:?}; holders {:?}",
        s.holders
    );
    assert!(
        invalid(&attacker),
        "the token `y#5` must be refused with is_invalid_input(), got {attacker:?}"
    );
}

both_stores!(
    store_refuses_invalid_tokens_on_every_claim_method,
    pipe_in_token_cannot_forge_another_writers_release,
    hash_digits_token_cannot_fake_a_permit_count,
);

// ---- defect 8: a dead waiter blocks for at most about a lease -------------------------------

/// How a client is made to look dead: its traffic stalls in a TCP proxy (Redis), or its
/// store calls are held back by [`Faulty::freeze`] (in-memory store, or a shared `REDIS_URL` server
/// whose port the test does not own).
enum Freezer {
    Proxy(Proxy),
    Gate(Arc<Faulty>),
}

impl Freezer {
    /// From now on nothing this client sends reaches the store.
    async fn freeze(&self) {
        match self {
            Freezer::Proxy(proxy) => proxy.stall(),
            Freezer::Gate(gate) => gate.freeze().await,
        }
    }
}

/// A client (own connection) that [`Freezer::freeze`] turns into a dead process.
async fn freezable_client(b: &Backend) -> (LockClient, Freezer) {
    match &b.server {
        Some(server) => {
            let proxy = Proxy::start(server.port()).await;
            let client = LockClient::connect(&proxy.url())
                .await
                .expect("connect through the proxy");
            (client, Freezer::Proxy(proxy))
        }
        None => {
            let (client, gate) = gated_client(b).await;
            (client, Freezer::Gate(gate))
        }
    }
}

/// The lease of every party in the dead-waiter tests.
const SHORT_LEASE: Duration = Duration::from_millis(500);

/// From the holder's release, how long the live waiter may take to be granted. A fixed
/// library needs at most about one lease (500 ms) plus a retry; a 5 s default heartbeat took the dead
/// waiter's whole heartbeat window, about 4 to 5 s with the default 5 s heartbeat.
const DEAD_WAITER_BOUND: Duration = Duration::from_millis(2500);

/// On the Mutex: a release handed the lock to the waiting writer with the
/// *earliest* heartbeat deadline (the one heard from longest ago, likeliest dead) until that
/// deadline, up to the 5 s default heartbeat whatever the lease. With a 500 ms lease and the
/// default heartbeat, a waiter D that froze kept the live waiter L (who started waiting after
/// D) out for ~4-5 s after the holder released. Required: L is granted within
/// `DEAD_WAITER_BOUND` of the release.
async fn dead_mutex_waiter_blocks_no_longer_than_a_lease(b: Backend) {
    let name = "dead-waiter-mutex";
    let c = b.client().await;
    // The holder renews itself; its lease length does not matter here.
    let holder = c.lock_for(name, secs(10)).await;
    let (d_client, freezer) = freezable_client(&b).await;
    let dead = tokio::spawn(async move {
        d_client
            .mutex(name)
            .lease(SHORT_LEASE)
            .lock()
            .await
            .map(drop)
    });
    let (state, announced) = poll_until(
        EVENTUALLY,
        || lease_info(&c, name),
        |s| s.waiters.len() == 1,
    )
    .await;
    assert!(announced, "setup: D never announced itself: {state:?}");
    freezer.freeze().await;

    let live_mutex = c.mutex(name).lease(SHORT_LEASE);
    let live = tokio::spawn(async move {
        let g = live_mutex.lock().await;
        (Instant::now(), g)
    });
    // L announces itself. D, silent since it froze, has the earlier heartbeat deadline, so
    // the release hands the lock to D; with the default heartbeat (the lease) that grant
    // lapses within a lease and L takes the lock.
    sleep(ms(300)).await;
    assert!(
        !live.is_finished(),
        "setup: L was granted while the holder held"
    );

    let released_at = Instant::now();
    assert!(holder.release().await.expect("release"));
    let (granted_at, g) = join("the live waiter", live).await;
    let g = g.expect("the live waiter's lock()");
    let waited = granted_at.duration_since(released_at);
    eprintln!(
        "{}: the live waiter was granted {waited:?} after the release",
        b.kind
    );
    assert!(
        waited <= DEAD_WAITER_BOUND,
        "the live waiter got the Mutex {waited:?} after the holder released (bound \
         {DEAD_WAITER_BOUND:?}, lease {SHORT_LEASE:?}): the dead waiter blocked it for its \
         heartbeat window"
    );
    assert!(g.release().await.expect("release"));
    dead.abort();
}

/// Starts a FairLock waiter that records its grant instant and fence in `log`, holds for
/// `hold`, then releases; returns once it is the `queued`-th waiter in the queue.
async fn start_fair_waiter(
    c: &LockClient,
    name: &'static str,
    log: Arc<std::sync::Mutex<Vec<(usize, Instant, u64)>>>,
    i: usize,
    hold: Duration,
    queued: usize,
) -> JoinHandle<()> {
    let lock = c.fair_lock(name).lease(SHORT_LEASE);
    let task = tokio::spawn(async move {
        let g = lock.lock().await.expect("live FairLock waiter");
        log.lock()
            .unwrap()
            .push((i, Instant::now(), g.fencing_token()));
        sleep(hold).await;
        assert!(g.release().await.expect("release"));
    });
    let (state, ok) = poll_until(
        EVENTUALLY,
        || queue_info(c, name),
        |s| s.waiters.len() == queued,
    )
    .await;
    assert!(
        ok,
        "setup: waiter {i} did not queue as #{queued}: {state:?}"
    );
    task
}

/// On the FairLock: a release granted the head of the queue until its own heartbeat
/// deadline (up to the 5 s default, whatever the 500 ms lease), so a dead head D kept L1 and
/// L2, queued behind it, out for ~4-5 s. Required: the dead head is skipped (L1 granted within
/// `DEAD_WAITER_BOUND` of the holder's release), and FIFO order among the live waiters holds
/// (L1, then L2).
async fn dead_fair_lock_head_is_skipped_within_a_lease(b: Backend) {
    let name = "dead-waiter-fair";
    let c = b.client().await;
    let holder = c.fair_for(name, secs(10)).await;
    let (d_client, freezer) = freezable_client(&b).await;
    let dead = tokio::spawn(async move {
        d_client
            .fair_lock(name)
            .lease(SHORT_LEASE)
            .lock()
            .await
            .map(drop)
    });
    let (state, queued) = poll_until(
        EVENTUALLY,
        || queue_info(&c, name),
        |s| s.waiters.len() == 1,
    )
    .await;
    assert!(queued, "setup: D never queued: {state:?}");
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let l1 = start_fair_waiter(&c, name, log.clone(), 1, ms(200), 2).await;
    let l2 = start_fair_waiter(&c, name, log.clone(), 2, Duration::ZERO, 3).await;

    freezer.freeze().await;
    let released_at = Instant::now();
    assert!(holder.release().await.expect("release"));
    join("L1", l1).await;
    join("L2", l2).await;
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.iter().map(|(i, _, _)| *i).collect::<Vec<_>>(),
        vec![1, 2],
        "live waiters out of FIFO order: {log:?}"
    );
    assert!(log[0].2 < log[1].2, "fences not increasing: {log:?}");
    let waited = log[0].1.duration_since(released_at);
    eprintln!("{}: L1 was granted {waited:?} after the release", b.kind);
    assert!(
        waited <= DEAD_WAITER_BOUND,
        "L1, queued behind a dead head, got the FairLock {waited:?} after the holder released \
         (bound {DEAD_WAITER_BOUND:?}, lease {SHORT_LEASE:?}): the dead head held it for its \
         heartbeat window"
    );
    dead.abort();
}

both_backends!(
    dead_mutex_waiter_blocks_no_longer_than_a_lease,
    dead_fair_lock_head_is_skipped_within_a_lease,
);

// ---- relative permit changes ----------------------------------------------------------------

/// A Semaphore's claim of `weight` permits out of a handle count of `capacity`.
fn permits_claim(token: &str, weight: u32, capacity: u32) -> Claim {
    claim(
        token,
        Slot::Ticket {
            weight,
            capacity,
            resizable: true,
        },
    )
}

/// The count stored for `lock`, as inspected.
async fn stored_permits(store: &Arc<dyn Store>, lock: &LockKeys) -> Option<u32> {
    store
        .inspect(lock, Family::TicketQueue, None)
        .await
        .expect("inspect")
        .permits
}

/// `Add` and `Forget` start from the handle's count (`base`) while none is stored, then from
/// the stored count; a change that would leave fewer than 1 or more than `MAX_PERMITS`
/// permits is refused with `is_invalid_input()` and changes nothing.
async fn relative_permit_changes_follow_the_stored_count(store: Arc<dyn Store>) {
    let hb = secs(30);
    let lock = keys("relative-permits");
    let change = |c: PermitChange| {
        let (store, lock) = (store.clone(), lock.clone());
        async move { store.set_permits(&lock, c, hb, None).await }
    };
    assert_eq!(stored_permits(&store, &lock).await, None);
    let add = |by, base| PermitChange::Add { by, base };
    let forget = |by, base| PermitChange::Forget { by, base };
    assert_eq!(change(add(2, 3)).await.expect("add to the base"), 5);
    assert_eq!(change(add(1, 100)).await.expect("add to the stored"), 6);
    assert_eq!(change(forget(4, 1)).await.expect("forget"), 2);
    assert_eq!(stored_permits(&store, &lock).await, Some(2));

    let refused = [
        forget(2, 5),
        forget(u32::MAX, 5),
        add(MAX_PERMITS - 1, 1),
        add(u32::MAX, 1),
        PermitChange::Set(0),
        PermitChange::Set(MAX_PERMITS + 1),
    ];
    for c in refused {
        let got = change(c).await;
        assert!(invalid(&got), "{c:?} from 2 must be refused: {got:?}");
        assert_eq!(stored_permits(&store, &lock).await, Some(2), "after {c:?}");
    }
    assert_eq!(
        change(add(MAX_PERMITS - 2, 1))
            .await
            .expect("up to the max"),
        MAX_PERMITS
    );
    assert_eq!(
        change(forget(MAX_PERMITS - 1, 1)).await.expect("down to 1"),
        1
    );

    // Forgetting from the handle's own count while none is stored.
    let fresh = keys("relative-permits-fresh");
    let got = store.set_permits(&fresh, forget(1, 3), hb, None).await;
    assert_eq!(got.expect("forget from the base"), 2);
    let gone = keys("relative-permits-gone");
    let got = store.set_permits(&gone, forget(3, 3), hb, None).await;
    assert!(invalid(&got), "3 - 3 permits: {got:?}");
    assert_eq!(stored_permits(&store, &gone).await, None);

    // A FairLock's fixed capacity refuses relative changes too, storing nothing.
    let fair = keys("relative-permits-fair");
    let holder = claim(
        "fair-holder",
        Slot::Ticket {
            weight: 1,
            capacity: 1,
            resizable: false,
        },
    );
    assert!(matches!(
        store.acquire(&fair, &holder, false, None).await,
        Ok(Acquire::Granted(_))
    ));
    let got = store.set_permits(&fair, add(1, 1), hb, None).await;
    assert!(
        matches!(&got, Err(e) if e.is_capacity_conflict()),
        "a relative change beside a FairLock holder: {got:?}"
    );
    assert_eq!(stored_permits(&store, &fair).await, None);
}

/// Added permits grant the waiters that now fit at once; forgotten permits revoke no hold,
/// but new grants follow the lower count.
async fn added_permits_grant_waiters_forgotten_ones_keep_holds(store: Arc<dyn Store>) {
    let hb = secs(30);
    let lock = keys("relative-permits-grants");
    let a = permits_claim("holder-a", 2, 2);
    let b = permits_claim("waiter-b", 1, 2);
    assert!(matches!(
        store.acquire(&lock, &a, false, None).await,
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        store.acquire(&lock, &b, true, None).await,
        Ok(Acquire::Busy(_))
    ));
    let add = PermitChange::Add { by: 1, base: 2 };
    assert_eq!(
        store.set_permits(&lock, add, hb, None).await.expect("add"),
        3
    );
    let s = store
        .inspect(&lock, Family::TicketQueue, None)
        .await
        .expect("inspect");
    assert!(
        s.waiters.is_empty() && s.holders.iter().any(|h| h.token == b.token),
        "the added permit went to the waiter: holders {:?}, waiters {:?}",
        s.holders,
        s.waiters
    );
    assert!(matches!(
        store.acquire(&lock, &b, true, None).await,
        Ok(Acquire::Granted(_))
    ));

    let forget = PermitChange::Forget { by: 2, base: 2 };
    assert_eq!(
        store
            .set_permits(&lock, forget, hb, None)
            .await
            .expect("forget"),
        1
    );
    let s = store
        .inspect(&lock, Family::TicketQueue, None)
        .await
        .expect("inspect");
    assert_eq!(s.holders.len(), 2, "holds stay: {:?}", s.holders);
    let c = permits_claim("late-c", 1, 2);
    assert!(matches!(
        store.acquire(&lock, &c, false, None).await,
        Ok(Acquire::Busy(_))
    ));
    let d = permits_claim("greedy-d", 2, 2);
    let got = store.acquire(&lock, &d, false, None).await;
    assert!(invalid(&got), "2 permits of 1: {got:?}");
}

/// Concurrent relative changes from many callers all count: the store reads and writes the
/// count in one step.
async fn concurrent_relative_changes_all_count(store: Arc<dyn Store>) {
    let lock = keys("relative-permits-concurrent");
    let tasks: Vec<JoinHandle<redis_locks::Result<u32>>> = (0..24)
        .map(|i| {
            let (store, lock) = (store.clone(), lock.clone());
            tokio::spawn(async move {
                let change = if i % 3 == 2 {
                    PermitChange::Forget { by: 1, base: 100 }
                } else {
                    PermitChange::Add { by: 2, base: 100 }
                };
                store.set_permits(&lock, change, secs(30), None).await
            })
        })
        .collect();
    let mut last = 0;
    for t in tasks {
        last = last.max(join("set_permits", t).await.expect("relative change"));
    }
    // 16 adds of 2 and 8 forgets of 1 from 100, whatever the order: a lost update would
    // leave less (or more).
    assert_eq!(stored_permits(&store, &lock).await, Some(100 + 32 - 8));
    assert!(last <= 132, "no reply beyond every add: {last}");
}

both_stores!(
    relative_permit_changes_follow_the_stored_count,
    added_permits_grant_waiters_forgotten_ones_keep_holds,
    concurrent_relative_changes_all_count,
);
