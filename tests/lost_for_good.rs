//! A lost guard is lost for good (GUARANTEES, "A lost guard promises nothing": "once
//! `is_held()` is false (a loss, a release, `release_all`, or its trust running out) ... the
//! guard is never held again: a reply that comes later (an `extend` answered late) and an
//! `extend` asked later answer `false`"), through the public API.

mod support;
use support::quick::in_time;
use support::quick::Quick;

use std::sync::Arc;

use redis_locks::WriteGuard;
use tokio::time::{sleep, timeout, Instant};

use support::backend::{join, until_waiters, Backend};
use support::faulty::{faulty_client, Op, Rule};
use support::time::{ms, secs};

/// A write guard (lease 1 s, auto-renewal) downgrades at once; the downgrade is applied by
/// the server at once but its reply comes 1.3 s late. The renewal waits behind the
/// downgrade, so the write guard's 1 s trust runs out first. The downgrade confirmed after
/// that must not revive the hold: it fails (`LeaseLost`), or the read guard it returns is not
/// held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_downgrade_confirmed_after_the_trust_ran_out_revives_nothing() {
    let b = Backend::redis();
    let name = "lost-for-good-late-downgrade";
    let (fa, a) = faulty_client(&b).await;
    fa.add(Rule::on(Op::Downgrade).times(1).delay_reply(ms(1_300)));
    let w = a
        .rwlock(name)
        .lease(ms(1_000))
        .write()
        .await
        .expect("write");
    let granted = Instant::now();
    let outcome = WriteGuard::downgrade(w).await;
    assert!(granted.elapsed() >= ms(1_250), "the reply was late");
    if let Ok(r) = outcome {
        let lost_at = granted + ms(1_000);
        assert!(
            !r.is_held(),
            "the write guard's trust ran out at ~1 s; the downgrade confirmed at ~1.3 s \
             returned a read guard that says is_held(), trusted {:?} past the instant the \
             trust ran out",
            r.valid_until().saturating_duration_since(lost_at)
        );
    }
}

/// A mutex guard (lease 1 s): its first renewal is applied by the server but its reply is
/// held, so the guard's trust runs out (`lost()` resolves) while the server's lease runs on
/// (~1.33 s). Then, in the same client, `extend_hold(id, 10 s)` (a step by id, which "goes
/// through" a trusted guard) renews the server's lease: the lost guard must stay lost, and
/// its own `extend` must answer false.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_extend_by_id_beside_a_lost_guard_does_not_revive_it() {
    let b = Backend::redis();
    let name = "lost-for-good-extend-by-id-beside";
    let (fa, a) = faulty_client(&b).await;
    let gate = fa.hold_replies(
        Rule::on(Op::Extend)
            .when(|c| c.lease == Some(ms(1_000)))
            .times(1),
    );
    let guard = a.mutex(name).lease(ms(1_000)).lock().await.expect("lock");
    let id = guard.hold_id();
    let what = "lost() resolves once the 1 s trust runs out";
    in_time(secs(3), what, guard.lost()).await;
    let lost_at = Instant::now();
    assert!(!guard.is_held());
    let by_id = a.extend_hold(&id, secs(10)).await;
    gate.open();
    sleep(ms(100)).await;
    assert!(
        !guard.is_held(),
        "lost() resolved; extend_hold by id answered {by_id:?} and the lost guard says \
         is_held() again, trusted {:?} past the loss",
        guard.valid_until().saturating_duration_since(lost_at)
    );
    let guard = Arc::new(tokio::sync::Mutex::new(guard));
    let again = guard.lock().await.extend(secs(10)).await.expect("extend");
    assert!(!again, "an extend asked after the loss answers false");
    assert!(!guard.lock().await.is_held());
}

/// A waiter (lease 1 s) is handed a mutex; its claim is applied by the server but the reply
/// is held, so the hand-off window runs out and the guard is lost. Nothing afterwards (the
/// held reply let through, an `extend`) may make it held again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hand_off_guard_whose_claim_reply_is_late_stays_lost() {
    let b = Backend::redis();
    let name = "lost-for-good-claim-reply-late";
    let (fa, a) = faulty_client(&b).await;
    let holder = b.client().await;
    let direct = b.client().await;
    let first = holder.lock_for(name, secs(30)).await;
    let gate = fa.hold_replies(
        Rule::on(Op::Extend)
            .when(|c| c.lease == Some(ms(1_000)))
            .times(1),
    );
    let a2 = a.clone();
    let waiting = tokio::spawn(async move { a2.mutex(name).lease(ms(1_000)).lock().await });
    let handle = direct.mutex(name);
    until_waiters(1, || handle.inspect()).await;
    assert!(first.release().await.expect("release"));
    let mut guard = join("A's lock", waiting).await.expect("handed over");
    let what = "lost() resolves once the window runs out";
    in_time(secs(3), what, guard.lost()).await;
    let lost_at = Instant::now();
    gate.open();
    sleep(ms(100)).await;
    assert!(
        !guard.is_held(),
        "the claim's reply came after the loss and revived the guard ({:?} past the loss)",
        guard.valid_until().saturating_duration_since(lost_at)
    );
    let again = guard.extend(secs(10)).await.expect("extend");
    assert!(!again, "an extend asked after the loss answers false");
    assert!(!guard.is_held());
}

/// The promise read literally: "once `is_held()` is false (... its trust running out) ...
/// the guard is never held again". An `extend` confirmed just before the trust's end by the
/// engine's clock but published just after it by the guard's would make a guard that already
/// said `!is_held()` say `is_held()` again. Many guards (lease 200 ms, no auto-renewal) each get an
/// `extend(10 s)` (by id, through the guard) whose reply is delayed to land around their
/// trust's end; a thread spins over every guard's `is_held()` and notes any false -> true.
/// Rounds of 40 guards until a case is seen (at most `HELD_AGAIN_ROUNDS`, default 30, about
/// 7 s; one core spins meanwhile). Before the engine decided under the validity's lock, five
/// runs saw a case in rounds 1, 11, 14, 18 and 21.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_held_never_turns_true_after_it_was_false_stress() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let b = Backend::redis();
    let (fa, a) = faulty_client(&b).await;
    let rounds = support::env_u32("HELD_AGAIN_ROUNDS", 30) as usize;
    let per_round = 40usize;
    let mut violations: Vec<String> = Vec::new();
    let mut late = 0usize;
    let mut in_time = 0usize;
    for round in 0..rounds {
        let names: Vec<String> = (0..per_round)
            .map(|i| format!("held-again-{round}-{i}"))
            .collect();
        for (i, n) in names.iter().enumerate() {
            let n2 = n.clone();
            // Delays spread over 4 ms around the trust's end (200 ms - drift 4 ms).
            let d = std::time::Duration::from_micros(191_500 + (i as u64 % 16) * 250);
            fa.add(
                Rule::on(Op::Extend)
                    .when(move |c| c.name == n2 && c.lease == Some(secs(10)))
                    .times(1)
                    .delay_reply(d),
            );
        }
        let mut guards = Vec::new();
        let mut tasks = Vec::new();
        for n in &names {
            let g = a.lock_unrenewed(n, ms(200)).await;
            let id = g.hold_id();
            let c = a.clone();
            tasks.push(tokio::spawn(
                async move { c.extend_hold(&id, secs(10)).await },
            ));
            guards.push(g);
        }
        let guards = Arc::new(guards);
        let stop = Arc::new(AtomicBool::new(false));
        let checker = {
            let (guards, stop) = (guards.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen_false = vec![None::<Instant>; guards.len()];
                let mut found = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for (i, g) in guards.iter().enumerate() {
                        let held = g.is_held();
                        match (held, seen_false[i]) {
                            (false, None) => seen_false[i] = Some(Instant::now()),
                            (true, Some(at)) => {
                                found.push(format!(
                                    "{}: is_held() false at {:?} ago, then true (valid for {:?} more)",
                                    g.name(),
                                    at.elapsed(),
                                    g.valid_until().saturating_duration_since(Instant::now())
                                ));
                                seen_false[i] = None;
                            }
                            _ => {}
                        }
                    }
                }
                found
            })
        };
        for t in tasks {
            match t.await.expect("join") {
                Ok(true) => in_time += 1,
                _ => late += 1,
            }
        }
        sleep(ms(20)).await;
        stop.store(true, Ordering::Relaxed);
        violations.extend(checker.join().expect("checker"));
        drop(guards);
        if !violations.is_empty() {
            break;
        }
    }
    eprintln!("extends confirmed in time: {in_time}, late/refused: {late}");
    assert!(
        violations.is_empty(),
        "a guard said is_held() again after it was false ({} cases; in time {in_time}, late \
         {late}): {violations:#?}",
        violations.len()
    );
}

/// GUARANTEES: "once `is_held()` is false (a loss, a release, `release_all`, ...) ... a reply
/// that comes later (an `extend` answered late) ... answer[s] `false`". A guard's
/// `extend(10 s)` is applied by the server at once but its reply is 500 ms late; meanwhile
/// `release_all` releases the hold (the guard says `!is_held()`, the lock is free). The late
/// extend must answer false: answering true tells its caller the lease was renewed, for a
/// hold that no longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_extend_answered_after_release_all_answers_false() {
    let b = Backend::redis();
    let name = "lost-for-good-extend-after-release-all";
    let (fa, a) = faulty_client(&b).await;
    let other = b.client().await;
    fa.add(
        Rule::on(Op::Extend)
            .when(|c| c.lease == Some(secs(10)))
            .times(1)
            .delay_reply(ms(500)),
    );
    let mut guard = a.mutex(name).lease(secs(5)).lock().await.expect("lock");
    let (extended, released) = tokio::join!(guard.extend(secs(10)), async {
        sleep(ms(100)).await;
        a.release_all().await
    });
    assert_eq!(
        released.expect("release_all"),
        1,
        "release_all released the hold"
    );
    assert!(!guard.is_held(), "release_all marked the guard lost");
    let free = other.mutex(name).try_lock().await.is_ok();
    assert!(
        !extended.as_ref().is_ok_and(|renewed| *renewed),
        "the extend answered after release_all says the lease was renewed (Ok(true)), while \
         the guard says !is_held() and the lock is free to others (another client's try_lock \
         granted: {free})"
    );
}

/// A guard (lease 1 s, no auto-renewal) gets `extend_hold(id, 10 s)` through it, applied at
/// once but answered 1.5 s late; its trust runs out at about 1 s (`lost()` resolves), and
/// only then is it detached. The loss came first: the late reply answers false, though the
/// hold is detached by the time it comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_extend_of_a_guard_lost_before_its_detach_answers_false() {
    let b = Backend::redis();
    let (fa, a) = faulty_client(&b).await;
    let late = Rule::on(Op::Extend).when(|c| c.lease == Some(secs(10)));
    fa.add(late.times(1).delay_reply(ms(1_500)));
    let lock = a.mutex("lost-for-good-then-detached").lease(secs(1));
    let guard = lock.auto_renew(false).lock().await.expect("lock");
    let (c, id) = (a.clone(), guard.hold_id());
    let extend = tokio::spawn(async move { c.extend_hold(&id, secs(10)).await });
    timeout(secs(3), guard.lost()).await.expect("lost resolves");
    assert!(!guard.is_held());
    let id = guard.detach();
    let answer = extend.await.expect("join");
    let _ = a.release_hold(&id).await;
    assert!(
        !matches!(answer, Ok(true)),
        "the guard was lost (trust ran out) before its detach and the extend's reply; the \
         late reply answered {answer:?}"
    );
}
