//! The engine under cancellation and slow or lost replies, through the public API, on a real
//! redis-server and in memory: waits dropped at every point leave nothing on the server
//! (single locks, multi-locks, campaigns, a waiter cancelled at its hand-off); multi-lock
//! tries and lost replies never remove a later grant; FIFO holds among live waiters; many
//! holds keep their leases while renewal replies take up to a third of the lease (a renewal
//! is sent only once the previous one is answered, so replies slower than about half the
//! lease cannot keep a hold); an idle client with many holds costs no CPU; `wait_replicas` on
//! a server without replicas fails cleanly.

mod support;
use support::faulty::faulty_client;
use support::faulty::faulty_client_with;
use support::quick::downgraded;
use support::quick::Quick;
use support::Granted;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::LockClient;
use tokio::time::{sleep, timeout, Instant};

use support::backend::{eventually, eventually_within, Backend};
use support::faulty::{Faulty, Op, Rule};
use support::honest::assert_honest;
use support::time::ms;
use support::waits::{grantable, lease_free, within, BEFORE_THE_HEARTBEAT, LOAD_MARGIN};

async fn all_free(c: &LockClient, names: &[&str]) -> bool {
    for n in names {
        if !lease_free(c, n).await {
            return false;
        }
    }
    true
}

// ------------------------------------------------------------------------------------------
// cancelled single waits
// ------------------------------------------------------------------------------------------

/// Cancelled mutex acquisitions (dropped after 0..20 ms while another client holds the lock)
/// leave nothing: once the holder releases, a third client gets the lock well before the
/// hand-off window (the 5 s heartbeat) or the 30 s lease could free it. A wait cancelled just
/// before the release may still be announced when it comes, and be handed the lock; its
/// withdrawal, sent in the background when the wait was dropped, then gives it back.
async fn cancelled_lock_waits_leave_nothing(b: Backend) {
    let holder = b.client().await;
    let waiter = b.client().await;
    let other = b.client().await;
    let name = "ef-cancel";
    let g = holder.mutex(name).lock().await.expect("lock");
    for i in 0..60u64 {
        let _ = timeout(ms(i % 21), waiter.mutex(name).lock()).await;
    }
    g.release().await.expect("release");
    let what = "mutex free for a third client";
    within(BEFORE_THE_HEARTBEAT, what, async || {
        grantable(&other, "mutex", name).await
    })
    .await;
    let info = other.mutex(name).inspect().await.expect("inspect");
    assert!(
        info.waiters.is_empty(),
        "[{}] waiters left: {info:?}",
        b.kind
    );
}
/// Cancelled FairLock and writer waits (queue places, writer announcements), dropped at
/// 0..20 ms and timed out, leave nothing: a third client gets the lock within half the
/// heartbeat window of the holder's release.
async fn cancelled_fair_and_write_waits_leave_nothing(b: Backend) {
    let holder = b.client().await;
    let waiter = b.client().await;
    let other = b.client().await;
    let g = holder.fair_lock("ef-cf").lock().await.expect("fair");
    let w = holder.rwlock("ef-cw").write().await.expect("write");
    for i in 0..80u64 {
        let _ = timeout(ms(i % 21), waiter.fair_lock("ef-cf").lock()).await;
        let _ = timeout(ms(i % 21), waiter.rwlock("ef-cw").write()).await;
        if i % 10 == 0 {
            let _ = waiter.fair_lock("ef-cf").lock().timeout(ms(i % 7)).await;
            let _ = waiter.rwlock("ef-cw").write().timeout(ms(i % 7)).await;
        }
    }
    g.release().await.expect("release");
    w.release().await.expect("release");
    let what = "fair lock free for a third client";
    within(BEFORE_THE_HEARTBEAT, what, async || {
        grantable(&other, "fair", "ef-cf").await
    })
    .await;
    let what = "reader admitted (no writer announcement left)";
    within(BEFORE_THE_HEARTBEAT, what, async || {
        grantable(&other, "read", "ef-cw").await
    })
    .await;
}
/// A client built on a runtime of its own that the test drives only through `block_on`, as a
/// sync wrapper does, with a 500 ms response timeout and a 60 s heartbeat window.
fn idle_runtime_client(url: &str) -> (tokio::runtime::Runtime, LockClient) {
    let rt = support::time::current_thread();
    let config = redis_locks::RedisConfig {
        response_timeout: ms(500),
        ..redis_locks::RedisConfig::default()
    };
    let builder = LockClient::builder()
        .lease(Duration::from_secs(60))
        .heartbeat(Duration::from_secs(60))
        .redis_config(config);
    let client = rt.block_on(builder.connect(url)).expect("connect");
    (rt, client)
}

/// A FairLock wait that times out inside `block_on` of a current-thread runtime that then
/// stays idle (a sync wrapper between two calls): its background removal is a task of that
/// runtime, which the engine leaves alone (it may be under way); it runs with the runtime's
/// next call, long before the 60 s heartbeat window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cut_off_on_a_runtime_left_idle_is_removed_by_its_next_call() {
    let b = Backend::redis();
    let holder = b.client().await;
    let name = "wait-cut-off-on-an-idle-runtime";
    let held = holder.fair_lock(name).lock().await.expect("lock");
    let url = b.url().expect("a redis-server");
    let (rt, waiter) = tokio::task::spawn_blocking(move || {
        let (rt, waiter) = idle_runtime_client(&url);
        let fair = waiter.fair_lock(name);
        let waited = rt.block_on(async { timeout(ms(300), fair.lock()).await });
        assert!(waited.is_err(), "the wait was cut off by its timeout");
        (rt, waiter)
    })
    .await
    .expect("the idle runtime's calls");
    let probe = holder.fair_lock(name);
    let info = probe.inspect().await.expect("inspect");
    assert_eq!(
        info.waiters.len(),
        1,
        "the place waits for the runtime: {info:?}"
    );
    // The next call on that runtime runs the removal first.
    let (rt, waiter) = tokio::task::spawn_blocking(move || {
        let lock = waiter.mutex("another-name");
        let next = rt.block_on(async { lock.lock().await.map(drop) });
        assert!(next.is_ok(), "the next call");
        (rt, waiter)
    })
    .await
    .expect("the next call");
    eventually("the cut-off wait's place is removed", async || {
        probe.inspect().await.expect("inspect").waiters.is_empty()
    })
    .await;
    assert!(held.release().await.expect("release"));
    drop(waiter);
    tokio::task::spawn_blocking(move || drop(rt))
        .await
        .expect("runtime dropped");
}

/// Waits of every kind that left something on the server (a FairLock's queue place, a
/// waiting writer's announcement, a Semaphore's place, a rate limiter's place) are dropped on a thread with no runtime: the engine removes
/// every trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_of_every_kind_dropped_outside_a_runtime_leave_nothing() {
    use std::future::{Future, IntoFuture};
    use std::pin::Pin;
    let b = Backend::redis();
    let holder = b.client().await;
    let waiter = b
        .client_with(LockClient::builder().heartbeat(Duration::from_secs(60)))
        .await;
    let hourly = redis_locks::Rate::per_hour(1).burst(1);
    let _fair = holder.fair_lock("dropped-fair").lock().await.expect("fair");
    let _read = holder.rwlock("dropped-rw").read().await.expect("read");
    let _permit = holder
        .semaphore("dropped-sem", 1)
        .acquire()
        .await
        .expect("permit");
    holder
        .rate_limiter("dropped-rate", hourly)
        .acquire(1)
        .await
        .expect("admitted");
    let fair = waiter.fair_lock("dropped-fair");
    let rw = waiter.rwlock("dropped-rw");
    let sem = waiter.semaphore("dropped-sem", 1);
    let rate = waiter.rate_limiter("dropped-rate", hourly);
    let mut waits: Vec<Pin<Box<dyn Future<Output = bool> + Send + '_>>> = vec![
        Box::pin(async { fair.lock().into_future().await.is_ok() }),
        Box::pin(async { rw.write().into_future().await.is_ok() }),
        Box::pin(async { sem.acquire().into_future().await.is_ok() }),
        Box::pin(async { rate.acquire(1).into_future().await.is_ok() }),
    ];
    for wait in waits.iter_mut() {
        assert!(timeout(ms(300), wait.as_mut()).await.is_err(), "each waits");
    }
    let traces = async || {
        let waiting = [
            holder
                .fair_lock("dropped-fair")
                .inspect()
                .await
                .map(|i| i.waiters.len()),
            holder
                .rwlock("dropped-rw")
                .inspect()
                .await
                .map(|i| i.waiters.len()),
            holder
                .semaphore("dropped-sem", 1)
                .inspect()
                .await
                .map(|i| i.waiters.len()),
            holder
                .rate_limiter("dropped-rate", hourly)
                .inspect()
                .await
                .map(|i| i.waiters.len()),
        ];
        waiting.map(|n| n.expect("inspect"))
    };
    assert_eq!(traces().await, [1, 1, 1, 1], "every wait left its trace");
    std::thread::scope(|s| {
        s.spawn(move || drop(waits)).join().expect("dropped");
    });
    eventually("every trace of the dropped waits is removed", async || {
        traces().await == [0; 4]
    })
    .await;
}

/// Three thousand FairLock waits of one client (120 s heartbeat windows) cancelled at once,
/// on a 50 ms response timeout, shorter than the server needs for the burst: the removals
/// take turns (a bounded number on their way at once), so none gives up, and every place is
/// gone long before the heartbeat window. (Queueing them is the set-up: on a loaded machine
/// joins time out on that response timeout and back off, so it gets a longer bound.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_waits_cancelled_at_once_leave_no_place() {
    let b = Backend::redis();
    let config = redis_locks::RedisConfig {
        response_timeout: ms(50),
        ..redis_locks::RedisConfig::default()
    };
    let waiter = b
        .client_with(LockClient::builder().redis_config(config))
        .await;
    let holder = b.client().await;
    let name = "three-thousand-cancelled-waits";
    let held = holder.fair_lock(name).lock().await.expect("lock");
    let handle = waiter
        .fair_lock(name)
        .heartbeat(Duration::from_secs(120))
        .retry_interval(Duration::from_secs(10));
    let tasks: Vec<_> = (0..3_000)
        .map(|_| {
            let h = handle.clone();
            tokio::spawn(async move { h.lock().await.is_ok() })
        })
        .collect();
    let probe = holder.fair_lock(name);
    // An inspect of 3,000 waiters may time out on a loaded machine: asked again.
    eventually_within(Duration::from_secs(90), "every wait queued", async || {
        probe
            .inspect()
            .await
            .is_ok_and(|info| info.waiters.len() == 3_000)
    })
    .await;
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        assert!(t.await.is_err(), "cancelled, never granted");
    }
    eventually_within(
        Duration::from_secs(60),
        "every cancelled wait's place is removed",
        async || {
            probe
                .inspect()
                .await
                .is_ok_and(|info| info.waiters.is_empty())
        },
    )
    .await;
    assert!(held.release().await.expect("release"));
}

// ------------------------------------------------------------------------------------------
// multi-locks
// ------------------------------------------------------------------------------------------

/// try_lock churn (refused and granted, some cancelled mid-flight) on a multi-lock while
/// another client takes and releases a part: afterwards the server holds nothing, and a
/// fresh multi-lock is granted at once.
async fn multi_try_churn_leaves_nothing(b: Backend) {
    let a = b.client().await;
    let c = b.client().await;
    let names = ["ef-m1", "ef-m2", "ef-m3"];
    let ml = c.multi_lock(names);
    for i in 0..300u64 {
        let held = if i % 3 == 0 {
            Some(a.mutex("ef-m2").lock().await.expect("lock"))
        } else {
            None
        };
        if i % 5 == 0 {
            let _ = timeout(Duration::from_micros(i * 13 % 2000), ml.try_lock()).await;
        } else if let Some(g) = ml.try_lock().await.granted("multi try") {
            drop(g);
        }
        if let Some(h) = held {
            h.release().await.expect("release");
        }
    }
    within(BEFORE_THE_HEARTBEAT, "every part free", async || {
        all_free(&a, &names).await
    })
    .await;
    let g = a
        .multi_lock(names)
        .try_lock()
        .await
        .expect("fresh multi try_lock");
    sleep(ms(300)).await;
    assert!(g.is_held(), "[{}] a later grant was removed", b.kind);
    assert!(g.release().await.expect("release"));
}
/// Timed and cancelled multi-lock waits while a part is held: nothing left once the holder
/// releases.
async fn multi_cancel_churn_leaves_nothing(b: Backend) {
    let a = b.client().await;
    let c = b.client().await;
    let names = ["ef-mc1", "ef-mc2"];
    let g = a.mutex("ef-mc2").lock().await.expect("lock");
    let ml = c.multi_lock(names);
    for i in 0..100u64 {
        if i % 2 == 0 {
            let _ = timeout(ms(i % 23), ml.lock()).await;
        } else {
            let e = ml.lock().timeout(ms(i % 11)).await.expect_err("busy");
            assert!(e.is_timeout(), "[{}] {e}", b.kind);
        }
    }
    g.release().await.expect("release");
    within(
        BEFORE_THE_HEARTBEAT,
        "a third multi-lock granted",
        async || {
            a.multi_lock(names)
                .try_lock()
                .await
                .granted("try")
                .is_some()
        },
    )
    .await;
}
/// A multi-lock try_lock whose grant's reply is lost fails, and leaves nothing: another
/// client gets every part within half the 5 s heartbeat window (the lease is 30 s).
async fn multi_try_lost_reply_leaves_nothing(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let names = ["ef-ml1", "ef-ml2", "ef-ml3"];
    for _ in 0..20 {
        f.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
        let r = c.multi_lock(names).try_lock().await;
        assert!(r.is_err(), "[{}] lost reply: try_lock succeeded?", b.kind);
        within(
            BEFORE_THE_HEARTBEAT,
            "parts free after a lost try reply",
            async || all_free(&other, &names).await,
        )
        .await;
    }
}
/// A timed multi-lock wait whose every reply is lost ends by its deadline plus one response
/// timeout, and leaves nothing behind (another client gets every part within half the
/// heartbeat window).
async fn multi_lost_replies_then_timeout_leaves_nothing(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let names = ["ef-mt1", "ef-mt2"];
    f.add(Rule::on(Op::AcquireAll).lose_reply());
    let t0 = Instant::now();
    let r = c.multi_lock(names).lock().timeout(ms(400)).await;
    let took = t0.elapsed();
    assert!(r.is_err(), "[{}] every reply lost yet granted", b.kind);
    assert!(
        took < ms(400) + ms(2_000) + ms(300),
        "[{}] took {took:?}",
        b.kind
    );
    f.clear();
    within(
        BEFORE_THE_HEARTBEAT,
        "parts free after the failed wait",
        async || all_free(&other, &names).await,
    )
    .await;
    // A lost grant reply while the wait goes on, then the lock is refused (a part taken by
    // someone else meanwhile is impossible: the lost grant holds it), then timeout.
    f.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
    let g = c
        .multi_lock(names)
        .lock()
        .timeout(ms(2_000))
        .await
        .expect("lost reply retried");
    assert!(g.is_held());
    g.release().await.expect("release");
    within(
        BEFORE_THE_HEARTBEAT,
        "parts free after release",
        async || all_free(&other, &names).await,
    )
    .await;
}
/// Many refused multi-lock try_locks and timed waits with a lost reply each, interleaved
/// with grants: the background releases of failed attempts never remove a later guard.
async fn multi_failed_attempts_never_remove_later_grants(b: Backend) {
    let (f, c) = faulty_client(&b).await;
    let a = b.client().await;
    let names = ["ef-mg1", "ef-mg2"];
    let mut kept = Vec::new();
    for i in 0..40u64 {
        if i % 2 == 0 {
            f.add(Rule::on(Op::AcquireAll).times(1).lose_reply());
            let _ = c.multi_lock(names).try_lock().await;
        }
        // Take it now (waiting for any background release to let go).
        let g = c
            .multi_lock(names)
            .lock()
            .timeout(ms(3_000))
            .await
            .expect("lock");
        sleep(ms(20)).await;
        assert!(g.is_held(), "[{}] round {i}: not held", b.kind);
        let info = a.mutex("ef-mg1").inspect().await.expect("inspect");
        assert_eq!(
            info.holders.len(),
            1,
            "[{}] round {i}: server lost the grant",
            b.kind
        );
        if i == 39 {
            kept.push(g);
        } else {
            assert!(
                g.release().await.expect("release"),
                "[{}] round {i}: released by someone else",
                b.kind
            );
        }
    }
    drop(kept);
}
// ------------------------------------------------------------------------------------------
// renewals
// ------------------------------------------------------------------------------------------

fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    let after = &stat[stat.rfind(')').expect(")") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after the state field.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ms(ticks * 10)
}

/// A client of `b` with `lease` through a [`Faulty`] wrapper, and an observer client. In
/// memory, the store runs on tokio's clock (paused by the caller): leases lapse at their
/// exact virtual instants, whatever the real time the test's work takes.
async fn clock_faulty_client(
    b: &Backend,
    lease: Duration,
) -> (Arc<Faulty>, LockClient, LockClient) {
    let faulty = match b.is_memory() {
        true => Faulty::on_tokio_clock(b.store().await),
        false => Faulty::new(b.store().await),
    };
    let c = LockClient::builder().lease(lease).store(faulty.clone());
    let observer = match b.is_memory() {
        true => LockClient::builder()
            .store(faulty.clone())
            .expect("observer"),
        false => b.client().await,
    };
    (faulty, c.expect("client"), observer)
}

/// `n` holds with `lease` on one client whose renewal replies take `delay`: for `run`, every
/// one stays held and listed by the server.
async fn many_holds_slow_renewals(
    b: &Backend,
    n: usize,
    lease: Duration,
    delay: Duration,
    run: Duration,
) {
    let (faulty, c, observer) = clock_faulty_client(b, lease).await;
    let mut guards = Vec::new();
    for i in 0..n {
        guards.push(c.mutex(&format!("ef-many-{i}")).lock().await.expect("lock"));
    }
    faulty.add(Rule::on(Op::Extend).delay_reply(delay));
    let t0 = Instant::now();
    let mut first_loss: Option<(usize, Duration)> = None;
    while t0.elapsed() < run {
        sleep(ms(10)).await;
        if first_loss.is_none()
            && let Some(i) = guards.iter().position(|g| !g.is_held())
        {
            first_loss = Some((i, t0.elapsed()));
        }
    }
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    let mut listed = 0;
    for i in 0..n {
        let info = observer.mutex_info(&format!("ef-many-{i}")).await;
        listed += info.holders.len();
    }
    let extends = faulty.count(Op::Extend);
    assert!(
        first_loss.is_none(),
        "[{}] {n} holds, lease {lease:?}, renewal replies +{delay:?}: first loss {first_loss:?}; \
         {lost} not held at the end, {listed} listed; {extends} renewals sent",
        b.kind
    );
    assert_eq!(listed, n, "[{}] server listing", b.kind);
}

/// [`many_holds_slow_renewals`] twice: on a paused clock (tokio's, which the engine's
/// renewals and trust follow, and the in-memory store's too through
/// `Faulty::on_tokio_clock`), so every grant, renewal, reply and lapse happens at its exact
/// virtual instant and the verdict is the engine's alone; and on Redis with every time ten times longer, the same ratios with
/// margins of hundreds of milliseconds, which a loaded machine's scheduling does not eat
/// (the real-clock check of the same claim).
macro_rules! on_a_paused_clock {
    ($($name:ident: $n:expr, $lease:expr, $delay:expr;)+) => {
        $(
            mod $name {
                use super::*;

                #[tokio::test(flavor = "current_thread", start_paused = true)]
                async fn memory_paused() {
                    many_holds_slow_renewals(&Backend::memory(), $n, ms($lease), ms($delay), ms($lease * 10))
                        .await;
                }

            }
        )+
    };
}

on_a_paused_clock! {
    // 500 holds, lease 300 ms, renewal replies 40 ms late.
    five_hundred_holds_300ms_slow_replies: 500, 300, 40;
    // 50 holds, lease 100 ms, renewal replies 40 ms late (a margin of 20 ms).
    fifty_holds_100ms_slow_replies: 50, 100, 40;
    // 500 holds, lease 100 ms, replies on time.
    five_hundred_holds_100ms_no_delay: 500, 100, 0;
    // One hold, lease 300 ms, every renewal reply 140 ms late (each well inside the lease;
    // the server always holds it): the guard must stay held.
    one_hold_replies_under_half_the_lease: 1, 300, 140;
    // One hold, lease 300 ms, every renewal reply 100 ms late (a third of the lease).
    one_hold_replies_a_third_of_the_lease: 1, 300, 100;
}

/// An idle client with 2000 long-leased holds does not spin: under 150 ms of CPU in 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_with_many_holds_uses_no_cpu() {
    let c = LockClient::builder()
        .lease(ms(60_000))
        .in_memory()
        .expect("client");
    let mut guards = Vec::new();
    for i in 0..2000 {
        guards.push(c.mutex(&format!("idle-{i}")).lock().await.expect("lock"));
    }
    sleep(ms(300)).await;
    let before = cpu_time();
    sleep(ms(2_000)).await;
    let used = cpu_time() - before;
    assert!(used < ms(150), "idle client used {used:?} of CPU in 2 s");
    assert!(guards.iter().all(|g| g.is_held()));
}

/// 200 holds, lease 2 s, renewal replies slowed to 600 ms (each renewal in flight a long
/// time): the client must not spin while they wait (under 600 ms CPU in 3 s), and all stay
/// held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_renewals_do_not_spin() {
    let faulty = Faulty::new(Backend::memory().store().await);
    let c = LockClient::builder()
        .lease(ms(2_000))
        .store(faulty.clone())
        .expect("client");
    let mut guards = Vec::new();
    for i in 0..200 {
        guards.push(c.mutex(&format!("spin-{i}")).lock().await.expect("lock"));
    }
    faulty.add(Rule::on(Op::Extend).delay_reply(ms(600)));
    let before = cpu_time();
    sleep(ms(3_000)).await;
    let used = cpu_time() - before;
    assert!(guards.iter().all(|g| g.is_held()), "a hold was lost");
    assert!(
        used < ms(600),
        "client used {used:?} of CPU in 3 s with renewals in flight"
    );
}

/// Extend churn with shortening and lengthening leases (`k` × 120-1020 ms) while renewal
/// replies are slowed (`k` × 25 ms): the guard stays held and never trusts past the server's
/// lease.
async fn extend_churn_stays_honest_and_held(b: Backend, k: u64) {
    let (faulty, c, observer) = clock_faulty_client(&b, ms(k * 1_000)).await;
    let name = "ef-extend-churn";
    let mut g = c.mutex(name).lock().await.expect("lock");
    faulty.add(Rule::on(Op::Extend).delay_reply(ms(k * 25)));
    let mut rng = support::rng::Rng::new(7);
    for i in 0..60 {
        let lease = ms(k * (120 + rng.below(900)));
        if i % 4 == 3 {
            // An extend cancelled in flight.
            let _ = timeout(ms(k * rng.below(30)), g.extend(lease)).await;
        } else {
            assert!(
                g.extend(lease).await.expect("extend"),
                "[{}] extend {i} refused",
                b.kind
            );
        }
        let pause = ms(k * rng.below(150));
        let end = Instant::now() + pause;
        loop {
            let until = g.valid_until();
            let held = g.is_held();
            let info = observer.mutex(name).inspect().await.expect("inspect");
            let answered = Instant::now();
            let what = format!("[{}] round {i} lease {lease:?}", b.kind);
            assert_honest(&what, until, &info, answered);
            assert!(
                held,
                "[{}] round {i}: a renewed hold reported not held",
                b.kind
            );
            if Instant::now() >= end {
                break;
            }
            sleep(ms(10)).await;
        }
    }
    assert!(g.release().await.expect("release"));
}
mod extend_churn_stays_honest_and_held {
    use super::*;

    /// On a paused clock, the in-memory store on tokio's clock too: exact instants.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn memory_paused() {
        extend_churn_stays_honest_and_held(Backend::memory(), 1).await;
    }
}

/// Downgrade while a renewal is in flight (reply slowed), then release: the lock is free at
/// once for a writer of another client.
async fn downgrade_during_renewal_then_release(b: Backend) {
    let (faulty, c) = faulty_client_with(&b, LockClient::builder().lease(ms(600))).await;
    let other = b.client().await;
    for i in 0..5 {
        let name = format!("ef-dg-{i}");
        let w = c.rwlock(&name).write().await.expect("write");
        faulty.add(Rule::on(Op::Extend).times(1).delay_reply(ms(150)));
        let base = faulty.count(Op::Extend);
        // Due a third into the lease; one that came too late for the hold fails the
        // downgrade below, so this waits only for it to come.
        eventually("renewal sent", async || faulty.count(Op::Extend) > base).await;
        let r = downgraded(w).await;
        assert!(r.is_held(), "[{}] downgraded hold not held", b.kind);
        sleep(ms(400)).await;
        assert!(
            r.is_held(),
            "[{}] read hold lost after the downgrade",
            b.kind
        );
        assert!(r.release().await.expect("release"), "[{}] release", b.kind);
        let w2 = other.rwlock(&name).try_write().await.granted("try_write");
        assert!(
            w2.is_some(),
            "[{}] round {i}: lock not free after release",
            b.kind
        );
    }
}
// ------------------------------------------------------------------------------------------
// wait_replicas on a standalone server, timed waits' bound
// ------------------------------------------------------------------------------------------

/// wait_replicas(1) on a standalone server: every acquisition fails with
/// ReplicasNotReached (not a hang, not a guard) and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wait_replicas_on_standalone_fails_cleanly() {
    let b = Backend::redis();
    let c = b.client().await;
    let other = b.client().await;
    let no_replica = |e: redis_locks::Error| {
        assert!(
            matches!(e, redis_locks::Error::ReplicasNotReached { .. }),
            "{e}"
        )
    };
    let t0 = Instant::now();
    let m = c.mutex("ef-wr-m").wait_replicas(1, ms(100));
    no_replica(m.lock().await.expect_err("no replica"));
    let f = c.fair_lock("ef-wr-f").wait_replicas(1, ms(100));
    no_replica(f.try_lock().await.expect_err("no replica"));
    let w = c.rwlock("ef-wr-w").wait_replicas(1, ms(100));
    no_replica(w.write().timeout(ms(500)).await.expect_err("no replica"));
    let s = c.semaphore("ef-wr-s", 1).wait_replicas(1, ms(100));
    no_replica(s.acquire().await.expect_err("no replica"));
    // Four WAITs of 100 ms each, and a margin for a loaded machine: each acquisition fails at
    // its first WAIT's end (one that attempted again after its 1 s retry interval would take
    // 4.4 s at least).
    assert!(
        t0.elapsed() < ms(400) + LOAD_MARGIN,
        "took {:?}",
        t0.elapsed()
    );
    // Cancelled during the WAIT.
    for _ in 0..10 {
        let _ = timeout(ms(30), c.mutex("ef-wr-c").wait_replicas(1, ms(500)).lock()).await;
    }
    for (what, kind, name) in [
        ("mutex free", "mutex", "ef-wr-m"),
        ("fair free", "fair", "ef-wr-f"),
        ("rw free", "read", "ef-wr-w"),
        ("sem free", "sem", "ef-wr-s"),
        ("cancelled free", "mutex", "ef-wr-c"),
    ] {
        within(BEFORE_THE_HEARTBEAT, what, async || {
            grantable(&other, kind, name).await
        })
        .await;
    }
    // wait_replicas(0) is refused as an invalid argument (documented), holding nothing.
    let e = c
        .mutex("ef-wr-0")
        .wait_replicas(0, ms(100))
        .lock()
        .await
        .expect_err("0 replicas");
    assert!(
        matches!(e, redis_locks::Error::InvalidArgument { .. }),
        "{e}"
    );
    assert!(lease_free(&other, "ef-wr-0").await);
}

/// Refused try_locks (hundreds) never leave a background release that removes a later grant
/// of the same client: after the churn, lock() and keep it for 1 s with a short lease.
async fn refused_tries_never_remove_a_later_grant(b: Backend) {
    let holder = b.client().await;
    let c = b.leased(ms(300)).await;
    let name = "ef-refused";
    let g = holder.fair_lock(name).lock().await.expect("lock");
    for _ in 0..300 {
        assert!(c.fair_lock(name).try_lock().await.granted("try").is_none());
    }
    g.release().await.expect("release");
    let mine = c
        .fair_lock(name)
        .lock()
        .timeout(ms(2_000))
        .await
        .expect("lock");
    sleep(ms(1_000)).await;
    assert!(mine.is_held(), "[{}] later grant lost", b.kind);
    let info = holder.fair_lock(name).inspect().await.expect("i");
    assert_eq!(
        info.holders.len(),
        1,
        "[{}] server lost the later grant",
        b.kind
    );
}
/// FIFO among live FairLock waiters while other waits are cancelled around them: the live
/// waiters are granted in the order they queued.
async fn fifo_with_cancel_churn(b: Backend) {
    let holder = b.client().await;
    let churn = b.client().await;
    let name = "ef-fifo";
    let g = holder.fair_lock(name).lock().await.expect("lock");
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4usize {
        let c = b.client().await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = c.fair_lock(name).lock().await.expect("lock");
            order.lock().unwrap().push(i);
            sleep(ms(20)).await;
            g.release().await.expect("release");
        }));
        support::backend::until_waiters(i + 1, async || holder.fair_lock(name).inspect().await)
            .await;
        // Cancelled waits between live ones.
        for k in 0..5u64 {
            let _ = timeout(ms(k * 3), churn.fair_lock(name).lock()).await;
        }
        within(BEFORE_THE_HEARTBEAT, "cancelled waiters gone", async || {
            holder
                .fair_lock(name)
                .inspect()
                .await
                .expect("i")
                .waiters
                .len()
                == i + 1
        })
        .await;
    }
    g.release().await.expect("release");
    for t in tasks {
        support::backend::join("waiter", t).await;
    }
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2, 3],
        "[{}] FIFO order",
        b.kind
    );
}
/// A FairLock waiter cancelled right as the holder's release hands it the lock: the next live
/// waiter gets it before the first's hand-off window (its 5 s heartbeat) could end, every
/// round.
async fn cancelled_at_hand_off_passes_the_lock_on(b: Backend) {
    let holder = b.client().await;
    let first = b.client().await;
    let second = b.client().await;
    let name = "ef-handoff";
    for round in 0..30u64 {
        let g = holder.fair_lock(name).lock().await.expect("lock");
        let h1 = tokio::spawn({
            let first = first.clone();
            async move {
                let _ = timeout(ms(10_000), first.fair_lock(name).lock()).await;
            }
        });
        support::backend::until_waiters(1, async || holder.fair_lock(name).inspect().await).await;
        let h2 = tokio::spawn({
            let second = second.clone();
            async move { second.fair_lock(name).lock().timeout(ms(20_000)).await }
        });
        support::backend::until_waiters(2, async || holder.fair_lock(name).inspect().await).await;
        let rel = g.release();
        let offset = Duration::from_micros(round * 97 % 3000);
        let (r, ()) = tokio::join!(rel, async {
            sleep(offset).await;
            h1.abort();
        });
        r.expect("release");
        let t0 = Instant::now();
        let got = timeout(BEFORE_THE_HEARTBEAT, h2).await;
        let Ok(Ok(Ok(g2))) = got else {
            panic!("[{}] round {round}: second waiter not served within {BEFORE_THE_HEARTBEAT:?} of the first's cancel ({:?} after)", b.kind, t0.elapsed());
        };
        g2.release().await.expect("release");
        within(BEFORE_THE_HEARTBEAT, "idle", async || {
            support::waits::queue_idle(&holder, name).await
        })
        .await;
    }
}
/// Cancelled and timed-out campaigns (dropped at 0..20 ms) while someone leads leave
/// nothing: once the leader resigns, a third candidate wins within half the heartbeat window.
async fn cancelled_campaigns_leave_nothing(b: Backend) {
    let leader = b.client().await;
    let candidate = b.client().await;
    let third = b.client().await;
    let name = "ef-elect";
    let l = leader.election(name).try_campaign("a").await.expect("lead");
    for i in 0..60u64 {
        if i % 3 == 0 {
            let _ = candidate
                .election(name)
                .campaign("b")
                .timeout(ms(i % 9))
                .await;
        } else {
            let _ = timeout(ms(i % 21), candidate.election(name).campaign("b")).await;
        }
    }
    assert!(l.resign().await.expect("resign"));
    within(BEFORE_THE_HEARTBEAT, "third candidate wins", async || {
        third.election(name).try_campaign("c").await.is_ok()
    })
    .await;
}
/// Cancelled acquire_many waits on a semaphore leave no permits taken or queued.
async fn cancelled_acquire_many_leaves_nothing(b: Backend) {
    let holder = b.client().await;
    let waiter = b.client().await;
    let other = b.client().await;
    let name = "ef-sem";
    let p = holder
        .semaphore(name, 4)
        .acquire_many(3)
        .await
        .expect("3 permits");
    for i in 0..80u64 {
        let _ = timeout(
            ms(i % 21),
            waiter.semaphore(name, 4).acquire_many(2 + (i % 3) as u32),
        )
        .await;
    }
    p.release().await.expect("release");
    within(BEFORE_THE_HEARTBEAT, "all 4 permits free", async || {
        other
            .semaphore(name, 4)
            .try_acquire_many(4)
            .await
            .granted("try")
            .is_some()
    })
    .await;
}
/// Holds granted on a current-thread runtime that is shut down while every renewal is in
/// flight (its reply held), then extended from the main runtime: every one is renewed from
/// then on (held and listed 3 s later, lease 400 ms).
#[test]
fn extend_after_runtime_shutdown_with_renewals_in_flight() {
    let main = support::time::multi_thread(2);
    let b = Backend::memory();
    let (faulty, c, observer) = main.block_on(async {
        let (faulty, c) = faulty_client_with(&b, LockClient::builder().lease(ms(400))).await;
        (faulty, c, b.client().await)
    });
    let gate = support::faulty::Gate::new();
    faulty.add(Rule::on(Op::Extend).hold_reply(gate.clone()));
    let helper = support::time::current_thread();
    let mut guards = helper.block_on(async {
        let mut gs = Vec::new();
        for i in 0..20 {
            gs.push(c.mutex(&format!("ef-rt-{i}")).lock().await.expect("lock"));
        }
        // Wait until every renewal is in flight (held at the gate).
        gate.wait_entered(20).await;
        gs
    });
    drop(helper);
    faulty.clear();
    gate.open();
    main.block_on(async {
        for g in guards.iter_mut() {
            assert!(g.extend(ms(400)).await.expect("extend"), "extend refused");
        }
        sleep(ms(3_000)).await;
        let held = guards.iter().filter(|g| g.is_held()).count();
        let mut listed = 0;
        for i in 0..20 {
            listed += observer
                .mutex_info(&format!("ef-rt-{i}"))
                .await
                .holders
                .len();
        }
        assert_eq!(
            (held, listed),
            (20, 20),
            "held, listed 3 s after the extends"
        );
    });
}

/// 100 holds with leases of `k` × 50-300 ms, each in its own task extending to a random lease
/// (sometimes cancelled mid-flight) and pausing up to `k` × 120 ms while its renewals run:
/// for 3 s every hold stays held and never trusts past the server's lease.
async fn extend_churn(c: LockClient, observer: LockClient, k: u64) {
    let mut tasks = Vec::new();
    for i in 0..100u64 {
        let c = c.clone();
        let observer = observer.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("ef-churn-{i}");
            let mut g = c.mutex(&name).lock().await.expect("lock");
            let mut rng = support::rng::Rng::new(i + 11);
            let end = Instant::now() + ms(3_000);
            let mut round = 0;
            while Instant::now() < end {
                round += 1;
                let lease = ms(k * (50 + rng.below(250)));
                if rng.below(5) == 0 {
                    let cut = Duration::from_micros(k * rng.below(3000));
                    let _ = timeout(cut, g.extend(lease)).await;
                } else {
                    assert!(
                        g.extend(lease).await.expect("extend"),
                        "{name} round {round}: extend refused"
                    );
                }
                sleep(ms(k * rng.below(120))).await;
                let until = g.valid_until();
                let held = g.is_held();
                let info = observer.mutex(&name).inspect().await.expect("inspect");
                let answered = Instant::now();
                let what = format!("{name} round {round} lease {lease:?}");
                assert_honest(&what, until, &info, answered);
                assert!(held, "{name} round {round} (lease {lease:?}): not held");
            }
            assert!(
                g.release().await.expect("release"),
                "{name}: release found nothing"
            );
        }));
    }
    for t in tasks {
        support::backend::join("churn task", t).await;
    }
}

mod many_short_holds_extend_churn {
    use super::*;

    /// On a paused clock, the in-memory store on tokio's clock too: the leases of 50 ms and
    /// up lapse (or not) at exact virtual instants.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn memory_paused() {
        let store = Faulty::on_tokio_clock(Backend::memory().store().await);
        let c = LockClient::builder()
            .lease(ms(200))
            .store(store.clone())
            .expect("client");
        let observer = LockClient::builder().store(store).expect("observer");
        extend_churn(c, observer, 1).await;
    }
}

both_backends!(
    cancelled_lock_waits_leave_nothing,
    cancelled_fair_and_write_waits_leave_nothing,
    multi_try_churn_leaves_nothing,
    multi_cancel_churn_leaves_nothing,
    multi_try_lost_reply_leaves_nothing,
    multi_lost_replies_then_timeout_leaves_nothing,
    multi_failed_attempts_never_remove_later_grants,
    downgrade_during_renewal_then_release,
    refused_tries_never_remove_a_later_grant,
    fifo_with_cancel_churn,
    cancelled_at_hand_off_passes_the_lock_on,
    cancelled_campaigns_leave_nothing,
    cancelled_acquire_many_leaves_nothing,
);
