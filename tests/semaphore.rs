//! Semaphore behaviour, on a real redis-server and on the in-memory store.
//!
//! Arrival order is made certain by starting one waiter at a time and waiting until
//! `inspect` shows it in the queue before starting the next.

mod support;
use support::quick::soon;
use support::time::{ms, secs};

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};

use redis_locks::testing::store::Request;
use redis_locks::{HoldKind, LockClient, LockInfo, Permit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use support::backend::{join, until_waiters, Backend};
use support::history::{History, Kind};
use support::queue::{dead_waiter, is};

async fn info(sem: &Semaphore) -> LockInfo {
    sem.inspect().await.expect("inspect")
}

/// Starts `acquire_many(n)` on `sem` in a task that hands back the permit; returns once the
/// request is visibly queued as the `queued`-th waiter.
async fn start_acquirer(sem: &Semaphore, n: u32, queued: usize) -> JoinHandle<Permit> {
    let s = sem.clone();
    let task = tokio::spawn(async move { s.acquire_many(n).await.expect("acquire_many") });
    until_waiters(queued, || sem.inspect()).await;
    task
}

async fn thirty_tasks_on_three_clients_never_exceed_four(b: Backend) {
    const TASKS: usize = 30;
    let mut sems = Vec::new();
    for _ in 0..3 {
        sems.push(b.client().await.semaphore("thirty", 4));
    }
    let history = History::with_capacity(4);
    // What each task saw queued right after its grant: FIFO means nobody who arrived
    // earlier is still waiting then.
    let seen_after_grant = Arc::new(StdMutex::new(Vec::<(usize, Vec<String>)>::new()));
    let blocker = sems[0].acquire_many(4).await.expect("blocker");
    let mut tasks = Vec::new();
    let mut arrival = HashMap::new();
    for i in 0..TASKS {
        let (sem, h, seen) = (
            sems[i % 3].clone(),
            history.clone(),
            seen_after_grant.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let permit = sem.acquire().await.expect("acquire");
            let t = h.enter_as(i.to_string(), Kind::Permits(1), permit.fencing_token());
            let queue = sem.inspect().await.expect("inspect").waiters;
            let prefixes = queue.into_iter().map(|w| w.token_prefix).collect();
            seen.lock().expect("seen").push((i, prefixes));
            tokio::time::sleep(ms(3 * (i as u64 % 5))).await;
            h.exit(t);
            assert!(permit.release().await.expect("release"), "task {i} lost it");
        }));
        let queued = until_waiters(i + 1, || sems[i % 3].inspect()).await;
        let newest = queued.waiters[i].token_prefix.clone();
        assert!(
            arrival.insert(newest, i).is_none(),
            "token prefixes collide"
        );
    }
    assert!(blocker.release().await.expect("release blocker"));
    for t in tasks {
        join("task", t).await;
    }
    history.check_exclusion();
    let mut served: Vec<usize> = history
        .grants()
        .iter()
        .map(|g| g.task.parse().expect("index"))
        .collect();
    served.sort_unstable();
    assert_eq!(served, (0..TASKS).collect::<Vec<_>>(), "each served once");
    for (i, queue) in seen_after_grant.lock().expect("seen").iter() {
        for p in queue {
            let j = arrival[p];
            assert!(
                j > *i,
                "task {i} was granted while earlier task {j} still waited"
            );
        }
    }
    let end = info(&sems[0]).await;
    assert!(end.holders.is_empty() && end.waiters.is_empty(), "{end:?}");
}

async fn dead_holder_permit_returns_after_its_lease(b: Backend) {
    let client = b.client().await;
    let lease = ms(1500);
    let dying = client
        .semaphore("dead-holder", 2)
        .lease(lease)
        .auto_renew(false);
    let sem = client.semaphore("dead-holder", 2);
    let start = Instant::now();
    let lost = dying.acquire().await.expect("dying holder");
    // Dropping a permit releases it in the background; forgetting it is a crash.
    std::mem::forget(lost);
    let kept = sem.acquire().await.expect("live holder");
    assert!(support::would_block(sem.try_acquire().await), "both out");
    let waiter = start_acquirer(&sem, 1, 1).await;
    let got = join("permit of the dead holder", waiter).await;
    let waited = start.elapsed();
    assert!(
        waited + ms(20) >= lease,
        "granted after {waited:?}, before the dead holder's lease {lease:?} ended"
    );
    // The live holder was not touched.
    assert!(kept.is_held());
    let now = info(&sem).await;
    assert_eq!(now.holders.len(), 2, "{now:?}");
    assert!(got.release().await.expect("release"));
    assert!(kept.release().await.expect("release"));
}

async fn dead_waiter_is_dropped_after_its_heartbeat(b: Backend) {
    // Live parties use a 60 s window: a dead waiter granted a permit would keep it far past
    // EVENTUALLY, so the test passes only if the dead one left the queue.
    let name = "dead-waiter";
    let client = b
        .client_with(LockClient::builder().heartbeat(secs(60)))
        .await;
    let sem = client.semaphore(name, 2);
    let h1 = sem.acquire().await.expect("h1");
    let h2 = sem.acquire().await.expect("h2");
    let first = start_acquirer(&sem, 1, 1).await;
    let dead = dead_waiter(
        &client,
        name,
        Request::Semaphore {
            permits: 1,
            capacity: 2,
        },
        ms(300),
    )
    .await;
    let queue = until_waiters(2, || sem.inspect()).await;
    assert!(is(&queue.waiters[1].token_prefix, &dead));
    let last = start_acquirer(&sem, 1, 3).await;
    // Its heartbeat lapses: it leaves the middle of the queue.
    let after = until_waiters(2, || sem.inspect()).await;
    assert!(after.waiters.iter().all(|w| !is(&w.token_prefix, &dead)));

    // One permit at a time: the first live waiter, then the one behind the dead one, while
    // the first keeps its permit.
    assert!(h1.release().await.expect("release"));
    let p1 = join("first waiter", first).await;
    assert!(h2.release().await.expect("release"));
    let p2 = join("waiter behind the dead one", last).await;
    let now = info(&sem).await;
    assert!(now.waiters.is_empty() && now.holders.len() == 2, "{now:?}");
    assert!(p1.release().await.expect("release"));
    assert!(p2.release().await.expect("release"));
}

async fn acquire_many_at_the_head_is_not_overtaken(b: Backend) {
    // Frequent retries: the single acquires behind get many chances to overtake.
    let client = b
        .client_with(LockClient::builder().retry_interval(ms(30)))
        .await;
    let sem = client.semaphore("many", 4);
    let other = b.client().await.semaphore("many", 4);
    let h1 = sem.acquire().await.expect("h1");
    let h2 = sem.acquire().await.expect("h2");
    // Two of four permits are free; three are asked for at the head.
    let big = start_acquirer(&sem, 3, 1).await;
    let s1 = start_acquirer(&sem, 1, 2).await;
    let s2 = start_acquirer(&sem, 1, 3).await;
    tokio::time::sleep(ms(500)).await;
    assert!(!big.is_finished() && !s1.is_finished() && !s2.is_finished());
    let queue = info(&sem).await;
    assert_eq!(queue.holders.len(), 2, "{queue:?}");
    let weights: Vec<u32> = queue.waiters.iter().map(|w| w.weight).collect();
    assert_eq!(weights, vec![3, 1, 1]);
    assert!(
        support::would_block(other.try_acquire().await),
        "queue first"
    );

    // Three free: the large request is granted, the small ones still wait (none free).
    assert!(h1.release().await.expect("release"));
    let big = join("acquire_many(3)", big).await;
    assert_eq!(big.num_permits(), 3);
    tokio::time::sleep(ms(200)).await;
    assert!(!s1.is_finished() && !s2.is_finished());
    let now = info(&sem).await;
    let mut held: Vec<HoldKind> = now.holders.iter().map(|h| h.kind).collect();
    held.sort_by_key(|k| match k {
        HoldKind::Permits(n) => *n,
        _ => 0,
    });
    assert_eq!(held, vec![HoldKind::Permits(1), HoldKind::Permits(3)]);
    assert_eq!(now.waiters.len(), 2);

    // Then in ticket order, one permit at a time.
    assert!(h2.release().await.expect("release"));
    let p1 = join("first single", s1).await;
    tokio::time::sleep(ms(200)).await;
    assert!(!s2.is_finished(), "no permit is free");
    assert!(big.release().await.expect("release"));
    let p2 = join("second single", s2).await;
    assert!(p1.release().await.expect("release"));
    assert!(p2.release().await.expect("release"));
}

async fn set_permits_changes_new_grants_only(b: Backend) {
    let client = b.client().await;
    let sem = client.semaphore("resize", 2);
    let p1 = sem.acquire().await.expect("p1");
    let p2 = sem.acquire().await.expect("p2");
    assert!(support::would_block(sem.try_acquire().await));
    let waiter = start_acquirer(&sem, 1, 1).await;

    // Raising grants the waiter that now fits, current permits stay.
    assert_eq!(sem.set_permits(3).await.expect("raise"), 3);
    let p3 = join("waiter granted by the raise", waiter).await;
    assert_eq!(info(&sem).await.permits, Some(3));
    assert!(support::would_block(sem.try_acquire().await), "3 of 3 out");

    // Lowering revokes nobody: all three keep their permits (and can renew them).
    assert_eq!(sem.set_permits(1).await.expect("lower"), 1);
    let mut held = [p1, p2, p3];
    for p in held.iter_mut() {
        assert!(p.is_held());
        assert!(p.extend(secs(30)).await.expect("extend"));
    }
    assert_eq!(info(&sem).await.holders.len(), 3);
    // A handle made with the old count follows the stored one too.
    let old = client.semaphore("resize", 2);
    let [p1, p2, p3] = held;
    assert!(p1.release().await.expect("release"));
    assert!(p2.release().await.expect("release"));
    assert!(
        support::would_block(old.try_acquire().await),
        "1 of 1 still out"
    );
    assert!(
        support::would_block(sem.try_acquire().await),
        "1 of 1 still out"
    );
    assert!(p3.release().await.expect("release"));
    let only = old.try_acquire().await.expect("the one permit");
    assert!(
        support::would_block(sem.try_acquire().await),
        "capacity is 1"
    );
    assert!(only.release().await.expect("release"));

    // Requests are bounded by the stored count, not by the handle's own: a handle made
    // with 2 may take 4 of 4 once another client raised the count, and no more than that.
    assert_eq!(sem.set_permits(4).await.expect("raise"), 4);
    let four = old.try_acquire_many(4).await.expect("all free");
    assert_eq!(four.num_permits(), 4);
    assert!(four.release().await.expect("release"));
    let e = old.try_acquire_many(5).await.expect_err("5 of 4");
    assert!(e.is_invalid_input(), "{e}");
    assert!(e.to_string().contains("5 permits of 4"), "{e}");
    drop(sem);
}

async fn invalid_inputs_are_refused(b: Backend) {
    let client = b.client().await;
    let zero = client.semaphore("invalid-zero", 0);
    assert!(zero
        .acquire()
        .await
        .expect_err("0 permits")
        .is_invalid_input());
    assert!(zero.try_acquire().await.expect_err("0").is_invalid_input());
    let sem = client.semaphore("invalid", 3);
    assert!(sem.acquire_many(0).await.expect_err("0").is_invalid_input());
    assert!(sem
        .acquire_many(4)
        .await
        .expect_err("4 of 3")
        .is_invalid_input());
    assert!(sem
        .try_acquire_many(4)
        .await
        .expect_err("4")
        .is_invalid_input());
    let too_many = client.semaphore("invalid", redis_locks::MAX_PERMITS + 1);
    assert!(too_many
        .acquire()
        .await
        .expect_err("max")
        .is_invalid_input());
    let err = client
        .semaphore("invalid", 3)
        .set_permits(0)
        .await
        .expect_err("set 0");
    assert!(err.is_invalid_input());
    // More than the count stored by set_permits: refused by the store, not queued forever.
    assert_eq!(sem.set_permits(2).await.expect("set 2"), 2);
    let stale = client.semaphore("invalid", 3);
    let err = soon("refused, not left waiting", stale.acquire_many(3))
        .await
        .expect_err("3 of 2");
    assert!(err.is_invalid_input(), "{err}");
    let now = info(&sem).await;
    assert!(now.holders.is_empty() && now.waiters.is_empty(), "{now:?}");
    let ok = sem.acquire_many(2).await.expect("2 of 2");
    assert!(ok.release().await.expect("release"));
}

/// The handle's relative changes and `available_permits` act on the count in force on the
/// server, for every client: added permits go to a waiter at once, forgotten ones revoke no
/// holder, a change below one permit is refused and changes nothing.
async fn relative_permit_changes_through_the_handles(b: Backend) {
    let (c1, c2) = (b.client().await, b.client().await);
    let (a, other) = (c1.semaphore("relative", 2), c2.semaphore("relative", 2));
    let p1 = a.acquire().await.expect("p1");
    let p2 = a.acquire().await.expect("p2");
    assert_eq!(other.available_permits().await.expect("available"), 0);
    let waiter = start_acquirer(&other, 1, 1).await;
    assert_eq!(other.add_permits(1).await.expect("add"), 3);
    let p3 = join("waiter granted by the added permit", waiter).await;
    assert_eq!(a.available_permits().await.expect("available"), 0);
    assert_eq!(a.forget_permits(2).await.expect("forget"), 1);
    for p in [&p1, &p2, &p3] {
        assert!(p.is_held(), "forgetting permits revokes no holder");
    }
    assert_eq!(other.available_permits().await.expect("available"), 0);
    let refused = other.forget_permits(1).await.expect_err("below one permit");
    assert!(refused.is_invalid_input(), "{refused}");
    assert_eq!(a.inspect().await.expect("inspect").permits, Some(1));
    for p in [p1, p2, p3] {
        assert!(p.release().await.expect("release"));
    }
    assert_eq!(other.available_permits().await.expect("available"), 1);
    assert_eq!(a.set_permits(4).await.expect("set"), 4);
    assert_eq!(other.available_permits().await.expect("available"), 4);
}

both_backends!(
    relative_permit_changes_through_the_handles,
    thirty_tasks_on_three_clients_never_exceed_four,
    dead_holder_permit_returns_after_its_lease,
    dead_waiter_is_dropped_after_its_heartbeat,
    acquire_many_at_the_head_is_not_overtaken,
    set_permits_changes_new_grants_only,
    invalid_inputs_are_refused,
);

/// Lists every key of the ticket queue whose TTL ends before the latest deadline it must keep
/// (holders: their leases; queue, heartbeats, ticket counter: the latest heartbeat; the
/// capacity marker: all of them, since it must outlive every holder and waiter it describes),
/// read in one atomic step on the server clock. Empty when every TTL covers its deadlines.
const TTL_GAPS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function top(k)
  local r = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  return r[2] and tonumber(r[2])
end
local gaps = {}
local function cover(k, deadline)
  if not deadline or deadline <= now then return end
  local p = redis.call('PTTL', k)
  if p < 0 or p + 2 < deadline - now then
    gaps[#gaps + 1] = k .. ' pttl ' .. p .. ' < ' .. (deadline - now)
  end
end
local hb = top(KEYS[3])
local held = top(KEYS[1])
cover(KEYS[1], held)
cover(KEYS[2], hb)
cover(KEYS[3], hb)
cover(KEYS[4], hb)
cover(KEYS[5], held)
cover(KEYS[5], hb)
return gaps
"#;

/// Key TTLs are cleanup only, but they must never end while a deadline inside the key is
/// still live (the state would vanish under a holder or a waiter). Scripts lengthen TTLs only
/// when a deadline is added or moved later; this walks joins, heartbeats, a partial and a full
/// promotion, an extension and releases, and checks every TTL after each step.
#[tokio::test]
async fn ttls_always_cover_the_live_deadlines() {
    let b = Backend::redis();
    let client = b.client().await;
    let name = "ttl-cover";
    let keys = client.keys(name).expect("keys");
    let (h, q, hb, tk) = (keys.key("h"), keys.key("q"), keys.key("hb"), keys.key("tk"));
    let cap = keys.key("cap");
    let check = |step: &str| {
        let gaps = b.cli(&["EVAL", TTL_GAPS, "5", &h, &q, &hb, &tk, &cap]);
        assert!(gaps.trim().is_empty(), "after {step}: {gaps}");
    };
    let sem = client.semaphore(name, 3).lease(secs(4)).heartbeat(secs(2));
    let two = sem.acquire_many(2).await.expect("two");
    let mut one = sem.acquire().await.expect("one");
    check("three permits out");
    let w1 = start_acquirer(&sem, 1, 1).await;
    check("a waiter joined");
    let w2 = start_acquirer(&sem, 2, 2).await;
    check("a second waiter joined");
    tokio::time::sleep(ms(900)).await; // heartbeats happen meanwhile
    check("heartbeats");
    assert!(one.extend(secs(8)).await.expect("extend"));
    check("an extension");
    assert!(two.release().await.expect("release"));
    let p1 = join("first waiter", w1).await; // 2 freed: the 1 fits, the 2 behind it does not
    check("a partial promotion");
    assert!(one.release().await.expect("release"));
    let p2 = join("second waiter", w2).await;
    check("the last waiter promoted");
    assert!(p1.release().await.expect("release"));
    check("a release with no waiter");
    assert!(p2.release().await.expect("release"));
    // Nothing is left but the fence counter (absent here: no grant took every permit) and the
    // capacity marker, until its TTL (the last lease) runs out.
    let pattern = format!("rl:{{{name}}}:*");
    let left = b.cli(&["KEYS", &pattern]);
    assert!(
        left.lines().all(|k| k == keys.fence() || k == cap),
        "left: {left}"
    );
    let pttl: i64 = b.cli(&["PTTL", &cap]).parse().expect("PTTL");
    assert!(
        pttl > 0 || pttl == -2,
        "the capacity marker has no TTL ({pttl})"
    );
}
