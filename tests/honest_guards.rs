//! Honest guards: a guard may say `is_held()` only while the server still counts it as the
//! holder. Each test reproduces one race in which the local validity deadline outlived the
//! server's lease, on a real Redis, with the fault-injecting store of `support::faulty` on
//! the client whose requests or replies must be slow.
//!
//! The checks are properties, not timings: a guard's `valid_until()` never lies beyond the
//! server's deadline for its hold (plus a generous margin), and never do two guards of one
//! mutex say `is_held()` at once.

mod support;
use support::backend::within_ok;
use support::faulty::at_gate;
use support::quick::in_time;
use support::quick::Quick;
use support::Granted;

use std::sync::Arc;
use std::time::Duration;

use redis_locks::testing::store::RedisStore;
use redis_locks::{LockClient, Mutex, MutexGuard};
use tokio::time::{sleep, timeout, Instant};

use support::backend::eventually;
use support::faulty::{Faulty, Op, Rule};
use support::time::{ms, secs};
use support::RedisServer;

/// Slack for comparing a local deadline with the server's: the server reports whole
/// milliseconds, and the inspect round trip on a busy machine takes a while. The races below
/// overshoot by seconds.
const MARGIN: Duration = Duration::from_millis(250);

async fn connect(url: &str) -> LockClient {
    LockClient::connect(url).await.expect("connect")
}

/// A client whose every store call goes through a [`Faulty`] wrapper around its own
/// `RedisStore` (own connection, own wake-up hub).
async fn faulty_client(url: &str) -> (Arc<Faulty>, LockClient) {
    let inner = RedisStore::connect(url).await.expect("connect");
    let faulty = Faulty::new(Arc::new(inner));
    let client = LockClient::builder().store(faulty.clone()).expect("client");
    (faulty, client)
}

/// Setup: within 5 s, B (whose store is `b_store`) made its second acquire attempt, the one
/// after its subscription: B waits, subscribed.
async fn b_waits_subscribed(b_store: &Faulty) {
    timeout(
        secs(5),
        eventually("B waits, subscribed", async || {
            b_store.calls(Op::Acquire).len() >= 2
        }),
    )
    .await
    .expect("setup: not within 5 s: B waits, subscribed");
}

/// `try_lock` every 20 ms until granted, at most `within`.
async fn take_when_free(mutex: &Mutex, within: Duration) -> Option<MutexGuard> {
    let until = Instant::now() + within;
    loop {
        if let Some(guard) = mutex.try_lock().await.granted("try_lock") {
            return Some(guard);
        }
        if Instant::now() >= until {
            return None;
        }
        sleep(ms(20)).await;
    }
}

/// The guard trusts its hold no longer than the server's lease for it (read with `inspect`
/// on an independent client), and says `!is_held()` if the server lists another holder.
async fn assert_trusted_within_server_lease(direct: &LockClient, guard: &MutexGuard, who: &str) {
    let info = direct.mutex(guard.name()).inspect().await.expect("inspect");
    // The server read its clock before this instant: its deadline for the hold is at most
    // `now + lease_remaining` on the local clock.
    let now = Instant::now();
    let trusted = guard.valid_until().saturating_duration_since(now);
    match info.holders.as_slice() {
        [holder] if info.fence == guard.fencing_token() => assert!(
            trusted <= holder.lease_remaining + MARGIN,
            "{who} trusts its hold for {trusted:?} more (valid_until), but the server's lease \
             for it ends in {:?}",
            holder.lease_remaining
        ),
        _ => assert!(
            !guard.is_held(),
            "{who} (fence {}) says is_held() but the server lists holders {:?} at fence {}",
            guard.fencing_token(),
            info.holders,
            info.fence
        ),
    }
}

/// A hand-off (A's release grants the lock to waiter B, B holds at once from the wake-up)
/// is first trusted for B's heartbeat window, because that is the deadline the release wrote
/// for B on the server. B then claims its lease, which sets the server deadline to
/// `now + lease`: with a lease (1 s) shorter than the heartbeat (5 s) that *shortens* the
/// server's deadline, but the local deadline was only ever raised, so B went on trusting the
/// 5 s window. Once B's lease lapsed on the server, C was granted while B still said
/// `is_held()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_guard_trusts_no_longer_than_the_server_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let direct = connect(&url).await;
    let (b_store, b_client) = faulty_client(&url).await;
    let name = "honest-handoff-lease";

    let a = direct.mutex(name).lock().await.expect("A locks");
    let b_mutex = b_client
        .mutex(name)
        .lease(secs(1))
        .auto_renew(false)
        .heartbeat(secs(5));
    let b_task = tokio::spawn(async move { b_mutex.lock().await });
    // B's second attempt follows its subscription: from then on a release hands over to B
    // through the wake-up.
    b_waits_subscribed(&b_store).await;
    sleep(ms(50)).await;
    assert!(a.release().await.expect("A releases"), "setup: A held");

    let what = "setup: B granted by the hand-off within 5 s";
    let b = within_ok(secs(5), what, b_task).await.expect("B's lock()");
    // Let B's claim of its lease (if it makes one) be answered and applied locally.
    let _ = timeout(secs(1), async {
        while b_store.calls(Op::Extend).is_empty() {
            sleep(ms(5)).await;
        }
    })
    .await;
    sleep(ms(50)).await;

    for _ in 0..4 {
        assert_trusted_within_server_lease(&direct, &b, "B (handed over)").await;
        sleep(ms(100)).await;
    }

    // B's 1 s lease lapses (no auto-renewal); C gets the lock: B must know it is gone.
    let c = take_when_free(&direct.mutex(name), secs(8))
        .await
        .expect("C gets the lock once B's 1 s lease lapsed");
    assert!(
        !b.is_held(),
        "C (fence {}) was granted while B (fence {}) still says is_held(), valid_until in {:?}",
        c.fencing_token(),
        b.fencing_token(),
        b.valid_until().saturating_duration_since(Instant::now())
    );
    drop(b);
    c.release().await.expect("C releases");
}

/// A release hands the lock to waiter B and publishes `token=fence`; the hub stores that
/// grant for B. If B's next heartbeat attempt is already on its way (here: held before it
/// reaches Redis), and reaches Redis only after B's claim window ended and C took the lock,
/// the attempt is refused. The wait loop then still took the grant stored by the wake-up and
/// returned a guard for the old fence: B and C both said `is_held()`, while the server listed
/// C only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_waiter_never_uses_a_stale_hand_off_grant() {
    let server = RedisServer::start();
    let url = server.url();
    let direct = connect(&url).await;
    let (b_store, b_client) = faulty_client(&url).await;
    let name = "honest-stale-grant";

    let a = direct.mutex(name).lock().await.expect("A locks");
    // B's renewals are held: a guard B gets keeps trusting its local deadline instead of
    // learning within a round trip that the server does not list it.
    let renewals = b_store.hold_requests(Rule::on(Op::Extend));
    let b_mutex = b_client.mutex(name).heartbeat(secs(3));
    let mut b_task = Some(tokio::spawn(async move { b_mutex.lock().await }));
    b_waits_subscribed(&b_store).await;

    // B's next heartbeat attempt (about 1 s later) is held before it reaches Redis.
    let attempt = b_store.hold_requests(Rule::on(Op::Acquire));
    at_gate(&attempt, 1, "setup: B's next attempt within 5 s").await;

    // Meanwhile A releases: the lock is handed to B (until B's heartbeat deadline, at most
    // 3 s after B's previous attempt) and the wake-up carries the grant.
    let a_fence = a.fencing_token();
    assert!(a.release().await.expect("A releases"), "setup: A held");
    let info = direct.mutex(name).inspect().await.expect("inspect");
    assert!(
        info.fence > a_fence && info.holders.len() == 1,
        "setup: A's release handed the lock to B: {info:?}"
    );
    let b_fence = info.fence;

    // B's claim window ends unclaimed; C takes the lock.
    let c = take_when_free(&direct.mutex(name), secs(6))
        .await
        .expect("setup: C gets the lock once B's claim window ended");
    assert!(c.fencing_token() > b_fence);

    // Now B's attempt reaches Redis, which refuses it (C holds).
    attempt.open();

    let until = Instant::now() + ms(1500);
    let mut b: Option<MutexGuard> = None;
    let mut round = 0u32;
    while Instant::now() < until {
        if b_task.as_ref().is_some_and(|t| t.is_finished()) {
            let task = b_task.take().expect("B's task");
            b = Some(task.await.expect("B's task").expect("B's lock()"));
        }
        let b_held = b.as_ref().is_some_and(|g| g.is_held());
        assert!(
            !(b_held && c.is_held()),
            "two guards say is_held() at once: B (fence {}) and C (fence {})",
            b.as_ref().map_or(0, |g| g.fencing_token()),
            c.fencing_token()
        );
        if round.is_multiple_of(10) {
            for (who, guard) in [("B", b.as_ref()), ("C", Some(&c))] {
                let Some(guard) = guard else { continue };
                let info = direct.mutex(name).inspect().await.expect("inspect");
                if guard.is_held() {
                    assert!(
                        info.holders.len() == 1 && info.fence == guard.fencing_token(),
                        "{who} (fence {}) says is_held() but the server lists holders {:?} at \
                         fence {}",
                        guard.fencing_token(),
                        info.holders,
                        info.fence
                    );
                }
            }
        }
        round += 1;
        sleep(ms(5)).await;
    }

    if let Some(task) = b_task {
        task.abort();
    }
    renewals.open();
    drop(b);
    c.release().await.expect("C releases");
}

/// `extend(30 s)` sets the local deadline from its own reply. A background renewal sent
/// while that reply was on its way still carried the old 3 s lease, and Redis applied it
/// after the extend: the server deadline went back to `now + 3 s`. The renewal's
/// confirmation could only raise the local deadline, and the extend's reply then set it to
/// 30 s; with later renewals stalled, the guard trusted 30 s while another client was
/// granted about 3 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_racing_a_renewal_trusts_no_longer_than_the_server_deadline() {
    let server = RedisServer::start();
    let url = server.url();
    let direct = connect(&url).await;
    let (g_store, g_client) = faulty_client(&url).await;
    let name = "honest-extend-race";
    let lease = secs(3);
    let longer = secs(30);

    // The reply of the user's extend (the one call with the 30 s lease) is held.
    let extend_reply = g_store.hold_replies(
        Rule::on(Op::Extend)
            .when(move |c| c.lease == Some(longer))
            .times(1),
    );
    let mut g = g_client.lock_for(name, lease).await;
    let extend = tokio::spawn(async move {
        let renewed = g.extend(longer).await;
        (g, renewed)
    });
    at_gate(
        &extend_reply,
        1,
        "setup: the extend reached Redis within 5 s",
    )
    .await;
    let extend_applied = g_store
        .calls(Op::Extend)
        .iter()
        .find(|e| e.call.lease == Some(longer))
        .expect("the extend is logged")
        .answered_at;

    // A background renewal (due a second in) with the old lease, if one were sent after the
    // extend was applied, would go through; every later renewal stalls. (The engine sends
    // none while the extend is in flight; the wait ends well inside the 3 s trust, so the
    // extend's reply still comes in time to be trusted.)
    let renewed_after = timeout(ms(1_500), async {
        loop {
            let after = g_store
                .calls(Op::Extend)
                .iter()
                .any(|e| e.call.lease == Some(lease) && e.forwarded_at > extend_applied);
            if after {
                return;
            }
            sleep(ms(5)).await;
        }
    })
    .await
    .is_ok();
    let stall = g_store.hold_requests(Rule::on(Op::Extend));
    extend_reply.open();
    let what = "setup: extend answered once its reply was let go";
    let (g, renewed) = within_ok(secs(5), what, extend).await;
    assert!(renewed.expect("extend"), "setup: extend(30 s) was refused");
    eprintln!("a renewal with the old lease was applied after the extend: {renewed_after}");

    for _ in 0..3 {
        assert_trusted_within_server_lease(&direct, &g, "G (extended to 30 s)").await;
        sleep(ms(100)).await;
    }

    // If the server lets G's hold lapse, G must know it before another client is granted.
    if let Some(c) = take_when_free(&direct.mutex(name), secs(5)).await {
        assert!(
            !g.is_held(),
            "C (fence {}) was granted while G (fence {}) still says is_held(), valid_until in \
             {:?}",
            c.fencing_token(),
            g.fencing_token(),
            g.valid_until().saturating_duration_since(Instant::now())
        );
        c.release().await.expect("C releases");
    }
    stall.open();
    drop(g);
}

/// The renewal interval was fixed when the guard was made (a third of the handle's 3 s
/// lease). After `extend` to a shorter lease, the next renewal was due only after that new
/// lease had run out: the guard reported itself lost although nothing failed, and another
/// client was granted. Auto-renewal must follow the lease the guard now has.
///
/// (600 ms rather than 300 ms: still far below the old 1 s renewal interval, and
/// it leaves a fixed renewal loop a comfortable margin on a busy machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_to_a_shorter_lease_keeps_the_guard_renewed() {
    let server = RedisServer::start();
    let url = server.url();
    let owner = connect(&url).await;
    let other = connect(&url).await;
    let name = "honest-shorter-extend";

    let mut g = owner.lock_for(name, secs(3)).await;
    assert!(
        g.extend(ms(600)).await.expect("extend"),
        "setup: extend refused"
    );
    let extended = Instant::now();

    // Over three of the new leases, with renewals that can all succeed.
    let lost = timeout(ms(2000), g.lost()).await;
    assert!(
        lost.is_err(),
        "lost() fired {:?} after extend(600 ms) on an auto-renewed guard, though no renewal \
         failed",
        extended.elapsed()
    );
    assert!(g.is_held(), "the auto-renewed guard says !is_held()");
    let taken = other.mutex(name).try_lock().await.granted("try_lock");
    assert!(
        taken.is_none(),
        "another client was granted the lock (fence {:?}) while the auto-renewed guard lived",
        taken.as_ref().map(|t| t.fencing_token())
    );
    assert!(g.release().await.expect("release"), "the guard still held");
}

/// A renewal that comes due in the same instant as the user's `extend(30 s)` had read the
/// hold's lease (1 s) before it slept; queued behind the extension, it went out with that old
/// lease and cut the server lease back to 1 s right after the user was told it was 30 s. A
/// renewal asks for the lease the hold has when its turn comes. (Paused clock, so the two
/// meet in one instant every run; the in-memory store keeps the server clock, which does not
/// move meanwhile.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_renewal_due_with_extend_keeps_the_extended_lease() {
    // The engine on this runtime, so its timers follow the paused clock.
    let client = LockClient::builder()
        .engine_on_current_runtime(true)
        .in_memory()
        .expect("client");
    let mutex = client.mutex("honest-renewal-with-extend").lease(secs(1));
    let mut g = mutex.lock().await.expect("G locks");
    let granted = Instant::now();
    // The first renewal is due a third of the lease after the grant.
    tokio::time::sleep_until(granted + secs(1) / 3).await;
    assert!(g.extend(secs(30)).await.expect("extend"), "extend refused");
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let info = mutex.inspect().await.expect("inspect");
    let left = info.holders[0].lease_remaining;
    assert!(
        left > secs(20),
        "a renewal after extend(30 s) cut the server lease back to {left:?}"
    );
    assert!(g.is_held());
    assert!(g.release().await.expect("release"));
}

// A guard whose trust ran out is lost for good (GUARANTEES, "A lost guard promises nothing"):
// no reply that comes later, and no extend asked later, revives it.

/// Mutex, lease 1 s with auto-renewal; at once `extend(10 s)`, whose reply comes 1.5 s late
/// (the server applied it at once). The renewal waits behind the extend, so the guard's 1 s
/// trust runs out: `is_held()` false, `lost()` resolves. Then the extend is confirmed and
/// the same guard says `is_held()` again, `valid_until()` ~10 s ahead: it must not.
#[tokio::test]
async fn a_slow_extend_does_not_revive_a_lost_guard() {
    let server = RedisServer::start();
    let name = "lost-for-good-slow-extend-after-trust-ran-out";
    let (f, client) = faulty_client(&server.url()).await;
    f.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(secs(10)))
            .times(1)
            .delay_reply(ms(1_500)),
    );
    let mut guard = client.lock_for(name, ms(1_000)).await;
    let granted = Instant::now();
    let extended = guard.extend(secs(10)).await;
    // `extend` took ~1.5 s; the guard's 1 s trust had run out meanwhile.
    assert!(granted.elapsed() >= ms(1_400), "the reply was delayed");
    assert!(
        !extended.expect("extend"),
        "the late extend answers false: for the guard the lease was already gone"
    );
    // The promise: a guard that went `!is_held()` (its trust ran out at ~1 s) stays lost.
    let ran_out_at = granted + ms(1_000);
    assert!(
        !guard.is_held() && guard.valid_until() <= ran_out_at,
        "the guard's trust ran out at ~1 s (so is_held() was false from then on), yet after \
         the late extend it says is_held() = {} with valid_until {:?} after the instant it ran \
         out",
        guard.is_held(),
        guard.valid_until().saturating_duration_since(ran_out_at)
    );
}

/// The same, observed from `lost()` itself on a second task: `lost()` resolves while the
/// extend is on its way; afterwards the guard must not be `is_held()` again.
#[tokio::test]
async fn once_lost_resolves_the_guard_is_never_held_again() {
    let server = RedisServer::start();
    let name = "lost-for-good-lost-then-held-again";
    let (f, client) = faulty_client(&server.url()).await;
    f.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(secs(10)))
            .times(1)
            .delay_reply(ms(1_500)),
    );
    let guard = client.lock_for(name, ms(1_000)).await;
    let guard = Arc::new(tokio::sync::Mutex::new(guard));
    let id = guard.lock().await.hold_id();
    // The extend goes by id through the guard (the same owner path as `guard.extend`), so
    // the test can keep reading the guard meanwhile.
    let extending = {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(async move { client.extend_hold(&id, secs(10)).await })
    };
    let g = guard.lock().await;
    let what = "lost() resolves once the 1 s trust runs out";
    in_time(secs(3), what, g.lost()).await;
    assert!(!g.is_held(), "lost() resolved: the guard is not held");
    let lost_at = Instant::now();
    let answer = extending.await.expect("join").expect("extend_hold");
    sleep(ms(50)).await;
    assert!(
        !g.is_held(),
        "lost() resolved and is_held() was false; then the extend (answer {answer}) was \
         confirmed and the guard says is_held() again, trusted {:?} past the instant it was lost",
        g.valid_until().saturating_duration_since(lost_at)
    );
}

/// Without auto-renewal: the guard says `!is_held()` and `lost()` resolves by the clock, and `extend()`, which could land inside the
/// server's lease (it ends up to the drift later), must not revive the guard.
#[tokio::test]
async fn an_extend_after_the_trust_ran_out_revives_nothing() {
    let server = RedisServer::start();
    let name = "lost-for-good-extend-after-trust-ran-out-no-auto-renew";
    let client = LockClient::connect(&server.url()).await.expect("client");
    let mut guard = client.lock_unrenewed(name, ms(1_000)).await;
    // lease 1 s: trusted until send + 988 ms; the server's deadline is arrival + 1000 ms.
    in_time(secs(2), "lost() resolves", guard.lost()).await;
    assert!(!guard.is_held());
    let lost_at = Instant::now();
    let renewed = guard.extend(secs(10)).await.expect("extend");
    assert!(!renewed, "an extend after the trust ran out answers false");
    assert!(
        !guard.is_held(),
        "lost() had resolved and is_held() was false; extend() answered {renewed} and the \
         guard is held again, trusted {:?} past the instant it was lost",
        guard.valid_until().saturating_duration_since(lost_at)
    );
}
