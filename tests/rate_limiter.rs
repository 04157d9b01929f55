//! Rate limiter behaviour, on a real redis-server and on the in-memory store: the rate over
//! every window (on the store's timestamps), arrival order, refusals with `retry_after`,
//! cancel safety, dead waiters, typed errors, and the refusal in quorum mode.
//!
//! No timed assertions: admissions are checked on the server timestamps they report, and
//! arrival order is made certain by starting one waiter at a time and waiting until it is
//! visibly queued (or admitted) before starting the next.

mod support;
use support::faulty::faulty_client;
use support::quick::soon;
use support::time::{ms, secs};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{RateClaim, RateDecision};
use redis_locks::{Error, LockClient, Rate, RateLimiter, RateLimiterInfo};
use tokio::task::JoinHandle;

use support::backend::{eventually, join, Backend};
use support::RedisServer;

async fn info(limiter: &RateLimiter) -> RateLimiterInfo {
    limiter.inspect().await.expect("inspect")
}

/// Polls until `limiter` shows `n` live waiters.
async fn until_rate_waiters(limiter: &RateLimiter, n: usize) {
    let l = limiter.clone();
    let what = format!("{n} waiters on {}", limiter.name());
    eventually(&what, async || info(&l).await.waiters.len() == n).await;
}

/// Queues a waiter at the head of `limiter`'s queue at store level, which never attempts
/// again (a process that died): uses the rate up with a try, then asks for one more (with a
/// new token each round, until it is refused and queued, however slow the machine).
async fn plant_head(
    b: &Backend,
    limiter: &RateLimiter,
    heartbeat: Duration,
) -> (RateClaim, redis_locks::testing::store::Busy) {
    let store = b.store().await;
    let keys = LockKeys::new("rl", limiter.name()).expect("keys");
    for _ in 0..20 {
        limiter.try_acquire(1).await.ok();
        let waiter = RateClaim::new(1, limiter.rate(), heartbeat);
        let decision = store.rate_acquire(&keys, &waiter, true, None).await;
        if let Ok(RateDecision::Refused(busy)) = decision {
            assert_eq!(busy.position, Some(0), "{busy:?}");
            return (waiter, busy);
        }
    }
    panic!("no waiter could be queued on {}", limiter.name());
}

/// Over every window `[a_i, a_j]` of the sorted admission times (ms), the admissions in it
/// are at most `burst + count·(a_j − a_i)/period`.
fn assert_within_rate(times: &mut [u64], rate: Rate) {
    times.sort_unstable();
    for i in 0..times.len() {
        for j in i..times.len() {
            let admitted = (j - i + 1) as u64;
            let span = times[j] - times[i];
            assert!(
                admitted.saturating_sub(rate.burst_size()) * rate.period_ms()
                    <= rate.count() * span,
                "{admitted} admissions within {span} ms exceed {rate:?}: {times:?}"
            );
        }
    }
}

/// 64 tasks on two clients, each started once the previous one is queued or admitted:
/// admissions stay within the rate over every window, and come in arrival order.
async fn sixty_four_tasks_keep_the_rate_and_the_order(b: Backend) {
    const TASKS: usize = 64;
    let rate = Rate::per_second(200).burst(4);
    let limiters = [
        b.client().await.rate_limiter("api", rate),
        b.client().await.rate_limiter("api", rate),
    ];
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks: Vec<JoinHandle<u64>> = Vec::new();
    for i in 0..TASKS {
        let (limiter, done) = (limiters[i % 2].clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let admission = limiter.acquire(1).await.expect("acquire");
            done.fetch_add(1, Ordering::SeqCst);
            admission.admitted_at_ms
        }));
        // Arrived: queued (a live waiter) or already admitted (counted), never neither.
        let (l, done) = (limiters[0].clone(), admitted.clone());
        eventually("the task arrived", async || {
            info(&l).await.waiters.len() + done.load(Ordering::SeqCst) == i + 1
        })
        .await;
    }
    let mut times = Vec::new();
    for task in tasks {
        times.push(join("an admission", task).await);
    }
    for pair in times.windows(2) {
        assert!(
            pair[0] <= pair[1],
            "admitted out of arrival order: {times:?}"
        );
    }
    assert_within_rate(&mut times, rate);
    assert!(info(&limiters[1]).await.waiters.is_empty());
}

/// A request for the whole burst at the head is admitted before smaller ones that arrived
/// after it, though they would fit sooner.
async fn a_big_request_at_the_head_is_not_overtaken(b: Backend) {
    let rate = Rate::per_second(20).burst(4);
    let limiter = b.client().await.rate_limiter("big-first", rate);
    limiter.try_acquire(4).await.expect("the burst");
    let l = limiter.clone();
    let big = tokio::spawn(async move { l.acquire(4).await.expect("big").admitted_at_ms });
    until_rate_waiters(&limiter, 1).await;
    let mut small = Vec::new();
    for n in 2..=4 {
        let l = limiter.clone();
        small.push(tokio::spawn(async move {
            l.acquire(1).await.expect("small").admitted_at_ms
        }));
        until_rate_waiters(&limiter, n).await;
    }
    let waiters = info(&limiter).await.waiters;
    assert_eq!(
        waiters.iter().map(|w| w.permits).collect::<Vec<_>>(),
        [4, 1, 1, 1]
    );
    let big_at = join("big", big).await;
    for task in small {
        let at = join("small", task).await;
        assert!(
            at > big_at,
            "a small request ({at}) overtook the big one ({big_at})"
        );
    }
}

/// `on_position` tells a waiter how many wait ahead of it, each change once: a waiter queued
/// behind another is told 1, then 0 when the one ahead is admitted, and is admitted itself.
async fn on_position_follows_the_queue(b: Backend) {
    let rate = Rate::per_second(10).burst(1);
    let limiter = b.client().await.rate_limiter("positions", rate);
    limiter.try_acquire(1).await.expect("the burst");
    let l = limiter.clone();
    let first = tokio::spawn(async move { l.acquire(1).await.expect("first") });
    until_rate_waiters(&limiter, 1).await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (l, log) = (limiter.clone(), seen.clone());
    let second = tokio::spawn(async move {
        l.acquire(1)
            .on_position(move |ahead| log.lock().unwrap().push(ahead))
            .await
            .expect("second")
    });
    join("first", first).await;
    join("second", second).await;
    assert_eq!(*seen.lock().unwrap(), [1, 0], "positions told");
}

/// A planted waiter (at store level, never attempting again) holds the head: a try is
/// refused even when the rate would allow it, with the server's estimate; once the waiter
/// cancels, the try is admitted.
async fn a_try_never_overtakes_a_waiter(b: Backend) {
    let rate = Rate::per_second(20).burst(1);
    let client = b.client().await;
    let limiter = client.rate_limiter("no-overtaking", rate);
    let store = b.store().await;
    let keys = LockKeys::new("rl", "no-overtaking").expect("keys");
    // A waiter queued behind a used-up burst; it lives 60 s without attempting.
    let (waiter, _) = plant_head(&b, &limiter, secs(60)).await;
    // Wait until the rate alone would allow a request (50 ms at 20/s), then try.
    eventually("the rate allows one", async || {
        info(&limiter).await.available == 1
    })
    .await;
    let err = limiter
        .try_acquire(1)
        .await
        .expect_err("refused behind the waiter");
    assert!(err.is_rate_limited(), "{err}");
    assert!(err.retry_after().is_some(), "{err}");
    assert!(store
        .rate_cancel(&keys, &waiter, None)
        .await
        .expect("cancel"));
    limiter
        .try_acquire(1)
        .await
        .expect("admitted once nobody waits");
}

/// A waiter that died in the queue (it never attempts again) holds the live waiter behind it
/// back only until its heartbeat deadline, on the server's clock.
async fn a_dead_waiter_is_dropped_after_its_heartbeat(b: Backend) {
    let rate = Rate::per_second(50).burst(1);
    let limiter = b.client().await.rate_limiter("dead-waiter", rate);
    let (_, busy) = plant_head(&b, &limiter, ms(400)).await;
    let dead_until = busy.heartbeat_until.expect("queued");
    let admission = limiter
        .acquire(1)
        .await
        .expect("admitted after the dead waiter");
    assert!(
        admission.admitted_at_ms >= dead_until,
        "admitted at {} while the dead head lived until {dead_until}",
        admission.admitted_at_ms
    );
    assert!(info(&limiter).await.waiters.is_empty());
}

/// A timed-out wait and a dropped wait leave no place in the queue.
async fn timed_out_and_dropped_waits_leave_no_place(b: Backend) {
    let limiter = b.client().await.rate_limiter("quota", Rate::per_hour(1));
    let first = limiter.acquire(1).await.expect("first");
    assert_eq!(first.permits, 1);
    let err = limiter
        .acquire(1)
        .timeout(ms(50))
        .await
        .expect_err("the hour is used up");
    assert!(err.is_timeout(), "{err}");
    // The place is removed at the deadline (the rest of it in the background).
    until_rate_waiters(&limiter, 0).await;
    let l = limiter.clone();
    let task = tokio::spawn(async move { l.acquire(1).await });
    until_rate_waiters(&limiter, 1).await;
    task.abort();
    until_rate_waiters(&limiter, 0).await;
}

/// Absurd rates and requests are typed errors at once, never a wait forever.
async fn bad_rates_and_requests_are_typed_errors(b: Backend) {
    let client = b.client().await;
    let bad = [
        (Rate::per_second(0), 1),
        (Rate::per_second(10).burst(0), 1),
        (Rate::new(1, Duration::ZERO), 1),
        (Rate::new(1, Duration::from_micros(500)), 1),
        (Rate::new(1, Duration::from_micros(1_500)), 1),
        (Rate::per_hour(redis_locks::MAX_RATE_COUNT + 1), 1),
        (Rate::new(1, secs(86_401)), 1),
        (Rate::per_second(10), 0),
        (Rate::per_second(10).burst(3), 4),
    ];
    for (rate, n) in bad {
        let limiter = client.rate_limiter("bad", rate);
        let err = limiter.try_acquire(n).await.expect_err("refused");
        assert!(err.is_invalid_input(), "{rate:?} n={n}: {err}");
        let err = soon("no wait", limiter.acquire(n))
            .await
            .expect_err("refused");
        assert!(err.is_invalid_input(), "{rate:?} n={n}: {err}");
    }
    let err = client
        .rate_limiter("", Rate::per_second(1))
        .try_acquire(1)
        .await;
    assert!(err.expect_err("bad name").is_invalid_input());
}

/// `inspect` shows the limit, what is available, and the waiters in order with their
/// permits and labels.
async fn inspect_shows_the_limit_and_the_waiters(b: Backend) {
    let client = b.client_with(LockClient::builder().label("worker-7")).await;
    let limiter = client.rate_limiter("shown", Rate::per_hour(10).burst(5));
    assert_eq!(info(&limiter).await.available, 5);
    limiter.try_acquire(3).await.expect("three");
    let shown = info(&limiter).await;
    assert_eq!(shown.available, 2);
    assert_eq!(shown.next_in, Duration::ZERO);
    limiter.try_acquire(2).await.expect("two");
    let shown = info(&limiter).await;
    assert_eq!(shown.available, 0);
    assert!(shown.next_in > secs(300), "{shown:?}");
    let l = limiter.clone();
    let task = tokio::spawn(async move { l.acquire(2).await });
    until_rate_waiters(&limiter, 1).await;
    let waiter = &info(&limiter).await.waiters[0];
    assert_eq!((waiter.position, waiter.permits), (0, 2));
    assert_eq!(waiter.label.as_deref(), Some("worker-7"));
    task.abort();
    until_rate_waiters(&limiter, 0).await;
}

/// Clients whose waiters would poll only every 30 s: a waiter behind the head that is
/// admitted much sooner was woken by the server when it became the head.
async fn slow_polling(b: &Backend) -> LockClient {
    b.client_with(
        LockClient::builder()
            .retry_interval(secs(30))
            .heartbeat(secs(180)),
    )
    .await
}

/// The second waiter is told no retry time (it is not the head) and would sleep its 30 s
/// interval; the admission of the head names it in a wake-up, and it is admitted at once.
async fn the_next_head_is_woken_by_the_server(a: &LockClient, b: &LockClient) {
    let rate = Rate::per_second(2).burst(1);
    let (la, lb) = (a.rate_limiter("woken", rate), b.rate_limiter("woken", rate));
    la.try_acquire(1).await.ok();
    let first = tokio::spawn({
        let l = la.clone();
        async move { l.acquire(1).await.expect("head") }
    });
    until_rate_waiters(&la, 1).await;
    let second = tokio::spawn({
        let l = lb.clone();
        async move { l.acquire(1).await.expect("behind the head") }
    });
    // Both queued: the head waits for its turn (at most 500 ms), the second behind it.
    until_rate_waiters(&la, 2).await;
    let (first, second) = tokio::time::timeout(secs(15), async {
        (first.await.expect("join"), second.await.expect("join"))
    })
    .await
    .expect("the second waiter was woken, not left to its 30 s interval");
    assert!(first.admitted_at_ms < second.admitted_at_ms);
}

async fn the_next_head_is_woken(b: Backend) {
    let (x, y) = (slow_polling(&b).await, slow_polling(&b).await);
    the_next_head_is_woken_by_the_server(&x, &y).await;
}

/// An admission whose reply was lost is found by the retry with the same token: the wait is
/// admitted once, and the rate is charged once.
async fn a_retry_after_a_lost_reply_is_admitted_once(b: Backend) {
    use support::faulty::{Op, Rule};
    let (faulty, client) = faulty_client(&b).await;
    faulty.add(Rule::on(Op::RateAcquire).times(1).lose_reply());
    let limiter = client.rate_limiter("lost-reply", Rate::per_hour(5));
    let admission = limiter.acquire(2).await.expect("admitted after the retry");
    assert_eq!(faulty.count(Op::RateAcquire), 2, "{:?}", faulty.log());
    assert_eq!(info(&limiter).await.available, 3, "charged once");
    let first = &faulty.calls(Op::RateAcquire)[0];
    assert!(
        first
            .outcome
            .contains(&format!("at: {}", admission.admitted_at_ms)),
        "{first:?}"
    );
}

both_backends!(
    a_retry_after_a_lost_reply_is_admitted_once,
    the_next_head_is_woken,
    sixty_four_tasks_keep_the_rate_and_the_order,
    a_big_request_at_the_head_is_not_overtaken,
    on_position_follows_the_queue,
    a_try_never_overtakes_a_waiter,
    a_dead_waiter_is_dropped_after_its_heartbeat,
    timed_out_and_dropped_waits_leave_no_place,
    bad_rates_and_requests_are_typed_errors,
    inspect_shows_the_limit_and_the_waiters,
);

/// The keys expire when the limiter is idle: the state key when its theoretical arrival time
/// is reached, the queue's keys with the last heartbeat deadline, the admissions kept for
/// retries one heartbeat window after the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_when_idle() {
    let b = Backend::redis();
    let rate = Rate::per_second(10).burst(1);
    let client = b
        .client_with(LockClient::builder().heartbeat(ms(500)))
        .await;
    let limiter = client.rate_limiter("idle", rate);
    limiter.try_acquire(1).await.expect("admitted");
    let ttl: i64 = b
        .cli(&["PTTL", "rl:{idle}:ra"])
        .trim()
        .parse()
        .expect("PTTL");
    // -2: already expired (a slow machine), which the bound allowed too; 0: expires within
    // this millisecond (the server rounds down); -1 (no TTL) fails.
    assert!(
        ttl == -2 || (0..=500).contains(&ttl),
        "admissions key TTL {ttl} ms"
    );
    let ttl: i64 = b
        .cli(&["PTTL", "rl:{idle}:rt"])
        .trim()
        .parse()
        .expect("PTTL");
    assert!(
        ttl == -2 || (0..=101).contains(&ttl),
        "state key TTL {ttl} ms"
    );
    plant_head(&b, &limiter, ms(300)).await;
    for key in ["rl:{idle}:rq", "rl:{idle}:rhb", "rl:{idle}:rtk"] {
        let ttl: i64 = b.cli(&["PTTL", key]).trim().parse().expect("PTTL");
        assert!(ttl == -2 || (0..=300).contains(&ttl), "{key} TTL {ttl} ms");
    }
    eventually("every key of the idle limiter expired", async || {
        b.cli(&[
            "EXISTS",
            "rl:{idle}:rt",
            "rl:{idle}:rq",
            "rl:{idle}:rhb",
            "rl:{idle}:rtk",
            "rl:{idle}:ra",
        ])
        .trim()
            == "0"
    })
    .await;
}

/// Quorum mode refuses the limiter with a typed error on every call: independent servers
/// would each keep their own rate and order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_mode_refuses_the_rate_limiter() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder().quorum(&urls).await.expect("quorum");
    let limiter = client.rate_limiter("q", Rate::per_second(5));
    let unsupported = |r: Result<(), Error>| matches!(r, Err(Error::Unsupported { .. }));
    assert!(unsupported(limiter.try_acquire(1).await.map(drop)));
    assert!(unsupported(limiter.acquire(1).await.map(drop)));
    assert!(unsupported(limiter.inspect().await.map(drop)));
}

/// A wait whose reply is lost is retried with the same token; the retry must find its
/// admission (charged once), however other clients of the name are configured. Here another
/// client with a 50 ms heartbeat steps on the name between the admission and the retry (well
/// inside the asking client's own 5 s window): its step prunes the retry record by *its*
/// heartbeat.
async fn a_lost_reply_is_charged_once_despite_a_short_heartbeat_neighbour(b: Backend) {
    use support::faulty::{Faulty, Gate, Op, Rule};
    let rate = Rate::per_hour(3);
    let faulty = Faulty::new(b.store().await);
    let gate = Gate::new();
    faulty.add(Rule::on(Op::RateAcquire).times(1).lose_reply());
    faulty.add(
        Rule::on(Op::RateAcquire)
            .times(1)
            .hold_request(gate.clone()),
    );
    let slow = LockClient::builder()
        .heartbeat(secs(5))
        .store(faulty.clone())
        .expect("client");
    let quick = b.client_with(LockClient::builder().heartbeat(ms(50))).await;
    let a = slow.rate_limiter("lost-neighbour", rate);
    let task = tokio::spawn(async move { a.acquire(1).await });
    let promise = "the wait retried after the lost reply";
    soon(promise, gate.wait_entered(1)).await; // the retry is on its way, the admission was made
    tokio::time::sleep(ms(300)).await;
    let other = quick.rate_limiter("lost-neighbour", rate);
    other
        .try_acquire(1)
        .await
        .expect("the neighbour is admitted (2 of 3)");
    gate.open();
    let mine = task.await.expect("join");
    let available = other.inspect().await.expect("inspect").available;
    assert!(
        mine.is_ok() && available == 1,
        "one admission each told to 2 callers, yet the limiter was charged {} of 3 \
         (wait after the lost reply: {mine:?}); log {:?}",
        3 - available,
        faulty.log()
    );
}

/// A name used as a mutex too: the limiter's call returns (admitted or typed error), no
/// panic, no wait; and the held mutex is unaffected.
async fn a_name_used_as_a_lock_too(b: Backend) {
    let client = b.client().await;
    let guard = client.mutex("both").lock().await.expect("lock");
    let limiter = client.rate_limiter("both", Rate::per_second(2).burst(2));
    let r = soon("answered", limiter.try_acquire(2)).await;
    assert!(
        r.is_ok() || r.as_ref().is_err_and(|e| !e.is_rate_limited()),
        "{r:?}"
    );
    assert!(guard.is_held());
    assert!(client.mutex("both").try_lock().await.is_err(), "still held");
    guard.release().await.expect("release");
}

/// Plants a waiter at the head of `limiter`'s queue, with a heartbeat far longer than any
/// wait below, and loses its heartbeat entry as `lose` says (one member, or the whole `rhb`
/// key): the limiter holds nobody back behind a member it cannot tell alive. A try answers
/// (admitted or refused, never an error) and a wait is admitted; the member is gone from `rq`.
async fn a_member_without_a_heartbeat_entry(lose: &str) {
    let b = Backend::redis();
    let name = format!("no-heartbeat-{lose}");
    let rate = Rate::per_second(50).burst(1);
    let limiter = b.client().await.rate_limiter(&name, rate);
    let (waiter, _) = plant_head(&b, &limiter, secs(3_600)).await;
    let (rq, rhb) = (format!("rl:{{{name}}}:rq"), format!("rl:{{{name}}}:rhb"));
    match lose {
        "member" => b.cli(&["ZREM", &rhb, &waiter.token]),
        _ => b.cli(&["DEL", &rhb]),
    };
    match limiter.try_acquire(1).await {
        Ok(_) => {}
        Err(e) if e.is_rate_limited() => {}
        Err(e) => panic!("a try failed on a member without a heartbeat: {e:?}"),
    }
    limiter
        .acquire(1)
        .timeout(secs(600))
        .await
        .expect("admitted past the member without a heartbeat");
    assert_eq!(b.cli(&["ZSCORE", &rq, &waiter.token]).trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_heartbeat_entry_was_lost_is_dropped() {
    a_member_without_a_heartbeat_entry("member").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_a_lost_heartbeat_key_are_dropped() {
    a_member_without_a_heartbeat_entry("key").await;
}

/// A member someone else added to the queue, with no heartbeat entry, ahead of every ticket:
/// dropped when it is the head, as a waiter whose heartbeat lapsed (the lock queue would grant
/// it one claim window; a limiter cannot admit on trust). A try answers, a wait is admitted,
/// and the member is gone from `rq`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_someone_else_queued_is_dropped() {
    let b = Backend::redis();
    let limiter = b
        .client()
        .await
        .rate_limiter("foreign-member", Rate::per_second(50).burst(1));
    let rq = "rl:{foreign-member}:rq";
    b.cli(&["ZADD", rq, "0", "intruder"]);
    match limiter.try_acquire(1).await {
        Ok(_) => {}
        Err(e) if e.is_rate_limited() => {}
        Err(e) => panic!("a try failed on a foreign queue member: {e:?}"),
    }
    b.cli(&["ZADD", rq, "0", "intruder#2"]);
    limiter
        .acquire(1)
        .timeout(secs(600))
        .await
        .expect("admitted past the foreign member");
    assert_eq!(b.cli(&["ZCARD", rq]).trim(), "0");
}

both_backends!(
    a_lost_reply_is_charged_once_despite_a_short_heartbeat_neighbour,
    a_name_used_as_a_lock_too,
);
