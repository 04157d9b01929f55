//! Hand-offs: a released lock is handed to its head waiter, and a push tells the waiter.
//!
//! * the push: it may arrive late, after the claim window passed (the in-memory store's
//!   wake-ups are diverted, feature `testing`, so a test decides when a push arrives), or
//!   before the reply to the waiter's refused attempt;
//! * a waiter that died is handed the lock and blocks the next caller at most a lease;
//! * hand-offs racing refusals under slow replies, and a hand-off claimed in full with
//!   auto-renewal off;
//! * the head waiter's pacing against a renewing holder, and FIFO order at the end of a dead
//!   holder's lease.

mod support;
use support::backend::within_ok;
use support::faulty::at_gate;
use support::quick::Quick;
use support::Granted;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use redis_locks::testing::store::{MemoryStore, RedisStore, Store};
use redis_locks::{testing, LockClient};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use support::backend::{eventually, until_waiters, Backend};
use support::faulty::{Faulty, Op, Rule};
use support::time::{ms, secs};
use support::RedisServer;

// ------------------------------------------------------------------------------------------
// The hand-off push: late, or ahead of the refusal reply
// ------------------------------------------------------------------------------------------

/// H holds a Mutex; W waits (announced, refusal deadline D1). W's next attempts are slowed
/// (800 ms on the way). H releases: the lock is handed to W until D1, but the push is held
/// back. D1 passes, X takes the free lock, W's slow attempt is refused (deadline D2). Only
/// now the stale push (D1) reaches W. W must not return a guard while X holds; once X
/// releases, W must get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_hand_off_push_is_not_trusted() {
    let mem = Arc::new(MemoryStore::new());
    let outbox: Arc<StdMutex<Vec<(String, String)>>> = Arc::default();
    let hold_back = Arc::new(AtomicBool::new(false));
    {
        let (tap_box, hold, hub) = (outbox.clone(), hold_back.clone(), mem.hub().clone());
        assert!(testing::divert(mem.hub(), move |channel, message| {
            if hold.load(Ordering::SeqCst) {
                tap_box
                    .lock()
                    .unwrap()
                    .push((channel.to_owned(), message.to_owned()));
            } else {
                testing::deliver(&hub, channel, message);
            }
        }));
    }
    let opts = || {
        LockClient::builder()
            .lease(ms(2_000))
            .heartbeat(ms(300))
            .retry_interval(ms(100))
    };
    let h = opts().store(mem.clone()).expect("client");
    let x = opts().store(mem.clone()).expect("client");
    let slow = Arc::new(AtomicBool::new(false));
    let w_store = Faulty::new(mem.clone() as Arc<dyn Store>);
    {
        let slow = slow.clone();
        w_store.add(
            Rule::on(Op::Acquire)
                .when(move |_| slow.load(Ordering::SeqCst))
                .delay_request(ms(800)),
        );
    }
    let w = opts().store(w_store.clone()).expect("client");

    let hg = h.mutex("m").lock().await.unwrap();
    let w_task = tokio::spawn(async move { w.mutex("m").lock().await });
    sleep(ms(150)).await; // W refused and announced
    slow.store(true, Ordering::SeqCst);
    sleep(ms(120)).await; // W's next attempt is now on its slow way
    hold_back.store(true, Ordering::SeqCst);
    assert!(hg.release().await.unwrap());
    // The hand-off's claim window (W's heartbeat deadline) passes.
    sleep(ms(450)).await;
    let xg = timeout(ms(3_000), x.mutex("m").lock())
        .await
        .unwrap()
        .unwrap();
    assert!(xg.is_held());
    slow.store(false, Ordering::SeqCst);
    // Let W's slow attempt be refused, then deliver the stale push.
    sleep(ms(900)).await;
    hold_back.store(false, Ordering::SeqCst);
    let held: Vec<_> = outbox.lock().unwrap().drain(..).collect();
    assert!(!held.is_empty(), "no push was held back");
    eprintln!("held back: {held:?}");
    for (c, m) in &held {
        testing::deliver(mem.hub(), c, m);
    }
    sleep(ms(300)).await;
    assert!(
        !w_task.is_finished() || !xg.is_held(),
        "W returned a guard from a stale hand-off while X holds"
    );
    if w_task.is_finished() {
        let wg = w_task.await.unwrap().unwrap();
        assert!(!(wg.is_held() && xg.is_held()), "W and X both is_held()");
        return;
    }
    assert!(xg.release().await.unwrap());
    let wg = timeout(ms(5_000), w_task)
        .await
        .expect("W never got the free lock")
        .unwrap()
        .unwrap();
    assert!(wg.is_held());
}

/// The hand-off wake-up reaches waiter B *before* the reply to B's refused attempt (the
/// reply is held after Redis applied the attempt; pushes are never held). B takes the grant
/// (it names the heartbeat deadline of that attempt), with its renewals stalled: it must stop
/// saying `is_held()` before the server's claim window ends and C is granted. (Holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hand_off_push_before_the_refusal_reply_stays_honest() {
    let server = RedisServer::start();
    let url = server.url();
    let direct = LockClient::connect(&url).await.expect("connect");
    let b_store = Faulty::new(Arc::new(RedisStore::connect(&url).await.expect("connect")));
    let b_client = LockClient::builder()
        .store(b_store.clone())
        .expect("client");
    let name = "hand-off-push-before-reply";

    let a = direct.mutex(name).lock().await.expect("A locks");
    let renewals = b_store.hold_requests(Rule::on(Op::Extend));
    let b_mutex = b_client.mutex(name).lease(secs(1));
    let b_task = tokio::spawn(async move { b_mutex.lock().await });
    eventually("B waits, subscribed", || {
        let n = b_store.calls(Op::Acquire).len();
        async move { n >= 2 }
    })
    .await;
    let reply = b_store.hold_replies(Rule::on(Op::Acquire).times(1));
    at_gate(&reply, 1, "setup: B's next attempt applied").await;
    assert!(a.release().await.expect("A releases"));
    sleep(ms(100)).await;
    reply.open();
    let b = within_ok(secs(5), "setup: B granted", b_task)
        .await
        .expect("B's lock()");

    let c_mutex = direct.mutex(name);
    let end = Instant::now() + secs(3);
    let mut c = None;
    while Instant::now() < end {
        if c.is_none() {
            c = c_mutex.try_lock().await.granted("try_lock");
        }
        let c_held = c
            .as_ref()
            .is_some_and(|c: &redis_locks::MutexGuard| c.is_held());
        assert!(
            !(b.is_held() && c_held),
            "B (handed over, renewals stalled) and C both say is_held()"
        );
        if b.is_held() {
            let info = c_mutex.inspect().await.expect("inspect");
            assert_eq!(
                info.fence,
                b.fencing_token(),
                "B says is_held() but the server's fence moved on: {info:?}"
            );
        }
        sleep(ms(20)).await;
    }
    assert!(
        c.is_some(),
        "setup: C was granted once B's claim window ended"
    );
    renewals.open();
    drop(b);
}

// ------------------------------------------------------------------------------------------
// A dead waiter handed the lock
// ------------------------------------------------------------------------------------------

/// A waiter that dies (its release never reaches the store) right before the holder's
/// release is handed the lock; with default options (lease 1 s, heartbeat = lease) the next
/// caller gets the lock within about one lease of the death. (Holds.)
async fn dead_waiter_handed_the_lock_blocks_at_most_a_lease(backend: Backend) {
    let label = backend.kind;
    let name = "hand-off-dead-waiter-hand-off";
    let direct = backend.client().await;
    let d_store = Faulty::new(backend.store().await);
    let d_client = LockClient::builder()
        .store(d_store.clone())
        .expect("client");
    let _never = d_store.hold_requests(Rule::on(Op::Release));
    let lease = secs(1);

    let a = direct.lock_for(name, lease).await;
    let d_mutex = d_client.mutex(name).lease(lease);
    let d_task = tokio::spawn(async move { d_mutex.lock().await });
    eventually("D waits", || {
        let n = d_store.calls(Op::Acquire).len();
        async move { n >= 3 }
    })
    .await;
    d_task.abort();
    let _ = d_task.await;
    let died = Instant::now();
    let _ = a.release().await.expect("A releases");
    let what = "C granted within 5 s";
    let c = within_ok(secs(5), what, direct.mutex(name).lease(lease).lock()).await;
    let blocked = died.elapsed();
    assert!(
        blocked <= lease + ms(400),
        "[{label}] a dead waiter blocked C for {blocked:?} (lease {lease:?})"
    );
    drop(c);
}

// ------------------------------------------------------------------------------------------
// Hand-offs under slow replies; claimed in full with auto-renewal off
// ------------------------------------------------------------------------------------------

/// Mutex and FairLock hand-offs under contention with a short heartbeat and a slow store
/// (acquire replies delayed at random), so hand-offs race refusals: never two guards
/// `is_held()` at once, and every `lock()` returns (the lock is released within ms).
async fn hand_off_under_delays(b: Backend) {
    for fair_kind in [false, true] {
        let inside = Arc::new(AtomicUsize::new(0));
        let end = Instant::now() + ms(3_000);
        let mut tasks = Vec::new();
        for i in 0..4u64 {
            let faulty = Faulty::new(b.store().await);
            faulty.add(
                Rule::on(Op::Acquire)
                    .when(move |_| crate::rand_bit(i))
                    .delay_reply(ms(20 + 15 * i)),
            );
            let c = LockClient::builder()
                .lease(ms(500))
                .heartbeat(ms(150))
                .retry_interval(ms(40))
                .store(faulty)
                .expect("client");
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < end {
                    let got = if fair_kind {
                        timeout(ms(5_000), c.fair_lock("ho").lock())
                            .await
                            .map(|r| r.map(either_fair))
                    } else {
                        timeout(ms(5_000), c.mutex("ho").lock())
                            .await
                            .map(|r| r.map(either_mutex))
                    };
                    let g = got
                        .expect("lock() never returned though holders release at once")
                        .unwrap();
                    let k = inside.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(k, 0, "two guards inside (fair={fair_kind})");
                    assert!(g.held());
                    sleep(ms(3)).await;
                    assert!(g.held(), "guard lost within 3 ms of a hand-off");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await;
                    n += 1;
                }
                n
            }));
        }
        for t in tasks {
            assert!(t.await.unwrap() > 0);
        }
    }
}

enum Either {
    M(redis_locks::MutexGuard),
    F(redis_locks::FairLockGuard),
}

fn either_mutex(g: redis_locks::MutexGuard) -> Either {
    Either::M(g)
}

fn either_fair(g: redis_locks::FairLockGuard) -> Either {
    Either::F(g)
}

impl Either {
    fn held(&self) -> bool {
        match self {
            Either::M(g) => g.is_held(),
            Either::F(g) => g.is_held(),
        }
    }
    async fn release(self) {
        match self {
            Either::M(g) => {
                g.release().await.ok();
            }
            Either::F(g) => {
                g.release().await.ok();
            }
        }
    }
}

fn rand_bit(salt: u64) -> bool {
    use std::sync::atomic::AtomicU64;
    static S: AtomicU64 = AtomicU64::new(0x9E3779B97F4A7C15);
    let mut x = S.fetch_add(0x9E3779B97F4A7C15 ^ salt, Ordering::Relaxed);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58476D1CE4E5B9);
    x ^= x >> 29;
    x & 1 == 1
}

/// With auto-renewal off, a FairLock waiter (heartbeat 200 ms) handed the lock by the
/// holder's release must claim its full lease (1.5 s) at once: 800 ms later it is still held
/// and listed, with most of its lease left on the server; and with nothing renewing it, it
/// must stop saying `is_held()` by the end of that lease.
async fn hand_off_with_auto_renew_off_is_claimed_in_full(b: Backend) {
    let c = b
        .client_with(
            LockClient::builder()
                .lease(ms(1_500))
                .heartbeat(ms(200))
                .auto_renew(false),
        )
        .await;
    let o = b.client().await;
    for fair in [false, true] {
        let name = format!("hand-off-handoff-{fair}");
        macro_rules! run {
            ($lock:expr, $inspect:expr) => {{
                let holder = $lock.await.expect("holder");
                let waiter = tokio::spawn({
                    let c = c.clone();
                    let name = name.clone();
                    async move {
                        if fair {
                            Box::new(c.fair_lock(&name).lock().await.expect("waiter"))
                                as Box<dyn std::any::Any + Send>
                        } else {
                            Box::new(c.mutex(&name).lock().await.expect("waiter"))
                                as Box<dyn std::any::Any + Send>
                        }
                    }
                });
                support::backend::until_waiters(1, async || $inspect).await;
                sleep(ms(50)).await;
                assert!(holder.release().await.expect("release"));
                let got = within_ok(ms(1_000), "the waiter was granted", waiter).await;
                let granted = Instant::now();
                sleep(ms(800)).await;
                let info = $inspect.expect("inspect");
                assert_eq!(info.holders.len(), 1, "[{}] {name}: not listed 800 ms after the hand-off", b.kind);
                assert!(
                    info.holders[0].lease_remaining > ms(400),
                    "[{}] {name}: only {:?} left on the server 800 ms after a hand-off of a 1.5 s lease",
                    b.kind,
                    info.holders[0].lease_remaining
                );
                (got, granted)
            }};
        }
        let (got, granted) = if fair {
            run!(
                c.fair_lock(&name).lock(),
                o.fair_lock(&name).inspect().await
            )
        } else {
            run!(c.mutex(&name).lock(), o.mutex(&name).inspect().await)
        };
        let held = |g: &Box<dyn std::any::Any + Send>| {
            if let Some(g) = g.downcast_ref::<redis_locks::FairLockGuard>() {
                g.is_held()
            } else {
                g.downcast_ref::<redis_locks::MutexGuard>()
                    .expect("guard")
                    .is_held()
            }
        };
        assert!(
            held(&got),
            "[{}] {name}: not held 800 ms after the hand-off",
            b.kind
        );
        sleep_until(granted + ms(1_600)).await;
        assert!(
            !held(&got),
            "[{}] {name}: held past its unrenewed lease",
            b.kind
        );
    }
}

// ------------------------------------------------------------------------------------------
// The head waiter: paced by a renewing holder, FIFO at a dead holder's lease end
// ------------------------------------------------------------------------------------------

/// A head waiter (retry interval 3 s) against a live holder (lease 900 ms, renewed every
/// 300 ms) for 5 s: the hint says "at most 900 ms"; after each attempt the holder has
/// renewed, so the waiter must not spin. Counted at the waiter's store: a bound of 2.5
/// attempts per second (the hint alone gives ~1.1 to 1.7 per second). Same with a semaphore
/// whose head waiter needs two permits while two 1-permit holders (of 3) renew.
async fn head_waiter_is_paced_by_a_renewing_holder(b: Backend) {
    for semaphore in [false, true] {
        let name = format!("hand-off-pace-{semaphore}");
        let holder = b.leased(ms(900)).await;
        let faulty = Faulty::new(b.store().await);
        let waiter = LockClient::builder()
            .retry_interval(ms(3_000))
            .heartbeat(ms(20_000))
            .store(faulty.clone())
            .expect("client");
        let mut held = Vec::new();
        let n0;
        let t0;
        if semaphore {
            let s = holder.semaphore(&name, 3);
            held.push(s.acquire().await.expect("p1"));
            sleep(ms(150)).await; // stagger the holders' deadlines
            held.push(s.acquire().await.expect("p2"));
            n0 = faulty.count(Op::Acquire);
            t0 = Instant::now();
            let r = waiter
                .semaphore(&name, 3)
                .acquire_many(2)
                .timeout(ms(5_000))
                .await;
            assert!(
                r.is_err(),
                "[{}] waiter got 2 of 3 permits beside 2 holders",
                b.kind
            );
        } else {
            let g = holder.fair_lock(&name).lock().await.expect("holder");
            n0 = faulty.count(Op::Acquire);
            t0 = Instant::now();
            let r = waiter.fair_lock(&name).lock().timeout(ms(5_000)).await;
            assert!(r.is_err(), "[{}] waiter got a held fair lock", b.kind);
            drop(g);
        }
        let secs = t0.elapsed().as_secs_f64();
        let attempts = faulty.count(Op::Acquire) - n0;
        assert!(
            (attempts as f64) / secs <= 2.5,
            "[{}] semaphore={semaphore}: the head waiter made {attempts} attempts in {secs:.1} s \
             against a live renewing holder",
            b.kind
        );
        drop(held);
    }
}

/// A holder (lease 1.5 s, no auto-renewal) vanishes without releasing. Three waiters
/// (retry interval 10 s) queue in order. The head must get the lock at the lease end (not
/// before: a grant's reply comes after the server saw the lease end, which is at least the
/// holder's send + 1.5 s; and not much later: the hint), then the others in FIFO order as
/// each releases.
async fn dead_holder_head_waiter_at_the_lease_end_in_fifo(b: Backend) {
    let name = "hand-off-dead-holder";
    let holder = b
        .client_with(LockClient::builder().lease(ms(1_500)).auto_renew(false))
        .await;
    let sent = Instant::now();
    let g = holder.fair_lock(name).lock().await.expect("holder");
    std::mem::forget(g);
    let order: Arc<StdMutex<Vec<(usize, Instant)>>> = Arc::default();
    let mut tasks = Vec::new();
    let observer = b.client().await;
    for i in 0..3 {
        let w = b
            .client_with(
                LockClient::builder()
                    .retry_interval(ms(10_000))
                    .heartbeat(ms(40_000)),
            )
            .await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = w.fair_lock(name).lock().await.expect("waiter");
            order.lock().unwrap().push((i, Instant::now()));
            sleep(ms(100)).await;
            g.release().await.expect("release");
        }));
        until_waiters(i + 1, async || observer.fair_lock(name).inspect().await).await;
    }
    assert!(
        Instant::now() < sent + ms(1_400),
        "setup: waiters queued before the lease end"
    );
    for t in tasks {
        within_ok(ms(6_000), "every waiter served within 6 s", t).await;
    }
    let order = order.lock().unwrap().clone();
    let ids: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, [0, 1, 2], "[{}] FIFO", b.kind);
    let first = order[0].1;
    assert!(
        first + ms(2) >= sent + ms(1_500),
        "[{}] the head got the lock {:?} before the dead holder's lease ended",
        b.kind,
        (sent + ms(1_500)) - first
    );
    assert!(
        first <= sent + ms(1_500) + ms(400),
        "[{}] the head got the lock {:?} after the dead holder's lease ended (hint ignored)",
        b.kind,
        first - (sent + ms(1_500))
    );
}

/// A dead holder (lease 1 s, no renewal, never released). W1 queues first with a 10 s retry
/// interval (only the hint wakes it at the lease end); W2 queues behind with a 40 ms interval
/// (it attempts often, and right at the lease end). FIFO: W1 must get the lock first,
/// however eager W2 is.
async fn eager_second_waiter_never_overtakes_the_hinted_head(b: Backend) {
    let name = "hand-off-eager-second";
    let holder = b
        .client_with(LockClient::builder().lease(ms(1_000)).auto_renew(false))
        .await;
    std::mem::forget(holder.fair_lock(name).lock().await.expect("holder"));
    let observer = b.client().await;
    let order: Arc<StdMutex<Vec<usize>>> = Arc::default();
    let mut tasks = Vec::new();
    for (i, interval, hb) in [(0usize, 10_000u64, 40_000u64), (1, 40, 2_000)] {
        let w = b
            .client_with(
                LockClient::builder()
                    .retry_interval(ms(interval))
                    .heartbeat(ms(hb)),
            )
            .await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = w.fair_lock(name).lock().await.expect("waiter");
            order.lock().unwrap().push(i);
            sleep(ms(50)).await;
            g.release().await.expect("release");
        }));
        until_waiters(i + 1, async || observer.fair_lock(name).inspect().await).await;
    }
    for t in tasks {
        within_ok(ms(5_000), "both served within 5 s", t).await;
    }
    assert_eq!(*order.lock().unwrap(), [0, 1], "[{}] FIFO", b.kind);
}

both_backends!(
    dead_waiter_handed_the_lock_blocks_at_most_a_lease,
    hand_off_under_delays,
    hand_off_with_auto_renew_off_is_claimed_in_full,
    head_waiter_is_paced_by_a_renewing_holder,
    dead_holder_head_waiter_at_the_lease_end_in_fifo,
    eager_second_waiter_never_overtakes_the_hinted_head,
);
