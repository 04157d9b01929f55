//! Holds that cross process boundaries: hold ids, detach, resume, and release or extend by
//! id, for every single-lock primitive, on a real redis-server and on the in-memory store.
//! Separate clients stand for separate processes here (each has its own connection and
//! renewals); `tests/examples.rs` runs the handover across real OS processes.
//!
//! The second part holds adversarial tests (attacks) of the same claims through the public
//! API only: each fails if a claim of `docs/GUARANTEES.md`, `docs/decisions/hold-ids.md` or
//! the API docs breaks.

mod support;
use redis_locks::{Error, HoldId, LockClient, Preference};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use support::backend::{eventually, join, within_ok, Backend, EVENTUALLY};
use support::faulty::{
    at_gate, extend_at_gate, faulty_client, spawn_extend_hold, Faulty, Gate, Op, Rule,
};
use support::honest::{assert_honest, server_deadline, trusts_past};
use support::kinds::{detached, inspect, resume_detached};
use support::quick::{cancel_at, downgraded, in_time, soon, Quick};
use support::time::{current_thread, ms, secs};
use support::waits::lease_free;
use support::{completes_within, detached_mutex, poll_once};
use tokio::time::Instant;

/// Whether another client's exclusive attempt on `name` is refused now.
async fn blocked(c: &LockClient, kind: &str, name: &str) -> bool {
    let refused = match kind {
        "mutex" => c.mutex(name).try_lock().await.err(),
        "read" | "write" => c.rwlock(name).try_write().await.err(),
        "fair" => c.fair_lock(name).try_lock().await.err(),
        "sem" => c.semaphore(name, 3).try_acquire().await.err(),
        other => unreachable!("{other}"),
    };
    refused.is_some_and(|e| e.is_would_block())
}

/// Resumes `id` on a handle of its kind in `c`, checks the guard is honest, releases it:
/// (is_held, fence, released).
async fn resume_and_release(c: &LockClient, kind: &str, id: &HoldId) -> (bool, u64, bool) {
    let name = id.name();
    macro_rules! go {
        ($guard:expr) => {{
            let g = $guard.expect("resume");
            let before = g.valid_until();
            let info = inspect(c, kind, name).await;
            assert_honest("resumed guard", before, &info, Instant::now());
            (
                g.is_held(),
                g.fencing_token(),
                g.release().await.expect("release"),
            )
        }};
    }
    match kind {
        "mutex" => go!(c.mutex(name).resume(id).await),
        "read" => go!(c.rwlock(name).resume_read(id).await),
        "write" => go!(c.rwlock(name).resume_write(id).await),
        "fair" => go!(c.fair_lock(name).resume(id).await),
        "sem" => go!(c.semaphore(name, 3).resume(id).await),
        other => unreachable!("{other}"),
    }
}

const KINDS: [&str; 5] = ["mutex", "read", "write", "fair", "sem"];

/// A detached hold stays held on the server; another client (another process) resumes it
/// from the id's text, holds it honestly under the id's fence, and releases it.
async fn detach_then_resume_elsewhere(b: Backend) {
    let first = b.client().await;
    let second = b.client().await;
    let third = b.client().await;
    for kind in KINDS {
        let name = format!("handover-{kind}");
        let id = detached(&first, kind, &name).await;
        assert!(
            blocked(&third, kind, &name).await,
            "{kind}: detach released"
        );
        let text = id.to_string();
        let parsed: HoldId = text.parse().expect("parse");
        assert_eq!(parsed, id);
        let (held, fence, released) = resume_and_release(&second, kind, &parsed).await;
        assert!(held, "{kind}: resumed guard not held");
        assert_eq!(fence, id.fencing_token(), "{kind}");
        assert!(
            released,
            "{kind}: release of the resumed guard found nothing"
        );
        assert!(!blocked(&third, kind, &name).await, "{kind}: still held");
    }
}

/// Resuming a released, lapsed or force-released hold fails with `HoldGone` and grants
/// nothing.
async fn resume_of_a_gone_hold_grants_nothing(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    for kind in KINDS {
        let name = format!("gone-{kind}");
        // Released.
        let id = detached(&c, kind, &name).await;
        assert!(c.release_hold(&id).await.expect("release by id"));
        match resume_kind(&other, kind, &id).await {
            Err(Error::HoldGone { name: n }) => assert_eq!(n, name),
            other => panic!("{kind}: resume of a released hold gave {other:?}"),
        }
        assert!(lease_free_any(&other, kind, &name).await, "{kind}: granted");
        // Force-released.
        let id = detached(&c, kind, &name).await;
        c.force_release(&name).await.expect("force release");
        assert!(resume_kind(&other, kind, &id)
            .await
            .expect_err("forced")
            .is_hold_gone());
        assert!(lease_free_any(&other, kind, &name).await, "{kind}: granted");
    }
    // Lapsed.
    let short = c.mutex("gone-lapsed").lease(ms(300)).auto_renew(false);
    let id = short.lock().await.expect("lock").detach();
    eventually("the detached lease lapses", async || {
        lease_free(&other, "gone-lapsed").await
    })
    .await;
    let err = other
        .mutex("gone-lapsed")
        .resume(&id)
        .await
        .expect_err("lapsed");
    assert!(err.is_hold_gone(), "{err}");
    assert!(
        lease_free(&other, "gone-lapsed").await,
        "resume granted a lapsed hold"
    );
}

/// Resumes `id` on a handle of `kind`, discarding the guard kind.
async fn resume_kind(c: &LockClient, kind: &str, id: &HoldId) -> Result<u64, Error> {
    let name = id.name();
    macro_rules! fence {
        ($resume:expr) => {
            $resume.await.map(|g| g.fencing_token())
        };
    }
    match kind {
        "mutex" => fence!(c.mutex(name).resume(id)),
        "read" => fence!(c.rwlock(name).resume_read(id)),
        "write" => fence!(c.rwlock(name).resume_write(id)),
        "fair" => fence!(c.fair_lock(name).resume(id)),
        "sem" => fence!(c.semaphore(name, 3).resume(id)),
        other => unreachable!("{other}"),
    }
}

/// No live holder of `name` in its family.
async fn lease_free_any(c: &LockClient, kind: &str, name: &str) -> bool {
    inspect(c, kind, name).await.holders.is_empty()
}

/// A stale id (its hold lapsed, the lock granted again to someone else) never releases,
/// extends or resumes the later holder's grant.
async fn a_stale_id_never_touches_a_later_grant(b: Backend) {
    let c = b.client().await;
    let later = b.client().await;
    for kind in ["mutex", "fair"] {
        let name = format!("stale-{kind}");
        let id = match kind {
            "mutex" => c.lock_for(&name, ms(300)).await.detach(),
            _ => c.fair_for(&name, ms(300)).await.detach(),
        };
        // The later guard lives to the end of the case, in `later_held`.
        let (fence, later_held): (u64, Box<dyn Fn() -> bool>) = match kind {
            "mutex" => {
                let g = later.mutex(&name).lock().timeout(EVENTUALLY).await;
                let g = g.expect("relock");
                (g.fencing_token(), Box::new(move || g.is_held()))
            }
            _ => {
                let g = later.fair_lock(&name).lock().timeout(EVENTUALLY).await;
                let g = g.expect("relock");
                (g.fencing_token(), Box::new(move || g.is_held()))
            }
        };
        assert!(fence > id.fencing_token(), "{kind}: the fence did not move");
        assert!(
            !c.release_hold(&id).await.expect("release by id"),
            "{kind}: stale release"
        );
        assert!(
            !c.extend_hold(&id, secs(60)).await.expect("extend by id"),
            "{kind}: stale extend"
        );
        let err = resume_kind(&c, kind, &id).await.expect_err("stale resume");
        assert!(err.is_hold_gone(), "{kind}: {err}");
        assert!(
            blocked(&c, kind, &name).await,
            "{kind}: the later holder lost its grant"
        );
        assert!(later_held(), "{kind}: the later guard is not held");
    }
}

/// Ids of another kind, name or preference are refused before anything is sent; malformed
/// text is refused by the parser.
async fn wrong_kind_name_or_text_is_refused(b: Backend) {
    let c = b.client().await;
    let id = c.mutex("typed").lock().await.expect("lock").detach();
    let err = c.fair_lock("typed").resume(&id).await.expect_err("kind");
    assert!(matches!(err, Error::HoldKindMismatch { .. }), "{err}");
    assert!(err.is_invalid_input());
    let err = c.mutex("other").resume(&id).await.expect_err("name");
    assert!(matches!(err, Error::HoldNameMismatch { .. }), "{err}");
    let err = c
        .resume::<redis_locks::kind::Write>(&id)
        .await
        .expect_err("kind");
    assert!(matches!(err, Error::HoldKindMismatch { .. }), "{err}");

    let read = c.rwlock("typed-rw").read().await.expect("read").detach();
    let err = c
        .rwlock("typed-rw")
        .resume_write(&read)
        .await
        .expect_err("kind");
    assert!(matches!(err, Error::HoldKindMismatch { .. }), "{err}");
    let fair = c.rwlock("typed-rw").preference(Preference::Fair);
    let err = fair.resume_read(&read).await.expect_err("preference");
    assert!(matches!(err, Error::HoldKindMismatch { .. }), "{err}");

    for text in [
        "",
        "rlh1:mutex",
        "rlh9:mutex:1:abc:typed",
        "rlh1:mutex:x:abc:typed",
    ] {
        let err = text.parse::<HoldId>().expect_err(text);
        assert!(
            matches!(err, Error::MalformedHoldId { .. }),
            "{text}: {err}"
        );
    }
    // Nothing above disturbed the holds.
    assert!(blocked(&c, "mutex", "typed").await);
    assert!(c.release_hold(&id).await.expect("release"));
    assert!(c.release_hold(&read).await.expect("release"));
}

/// A worker without a guard extends and releases the hold by its id.
async fn extend_and_release_by_id(b: Backend) {
    let c = b.client().await;
    let worker = b.client().await;
    let id = c.lock_for("by-id", secs(2)).await.detach();
    assert!(worker.extend_hold(&id, secs(120)).await.expect("extend"));
    let info = worker.mutex("by-id").inspect().await.expect("inspect");
    assert!(info.holders[0].lease_remaining > secs(60), "{info:?}");
    assert!(worker.release_hold(&id).await.expect("release"));
    assert!(lease_free(&worker, "by-id").await);
    let err = worker.extend_hold(&id, ms(1)).await.expect_err("too short");
    assert!(err.is_invalid_input());
}

/// Releasing a hold by id marks this client's guard of it lost at once; a guard of it in
/// another client learns it at its next renewal.
async fn release_by_id_ends_every_guard(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let g = c.lock_for("release-ends", ms(600)).await;
    let id = g.hold_id();
    let elsewhere = other.resume_for("release-ends", ms(600), &id).await;
    assert!(c.release_hold(&id).await.expect("release"));
    assert!(
        !g.is_held(),
        "the guard of this client still trusts a released hold"
    );
    let promise = "the other client's guard learns it at its next renewal";
    soon(promise, elsewhere.lost()).await;
    assert!(!elsewhere.is_held());
}

/// Guards of one hold in two clients (two processes): both are held and honest, each on its
/// own lease owner; a second resume in a client that has a guard of the hold is refused
/// (`HoldInUse`, nothing sent); detaching one keeps the other renewing; releasing it ends the
/// hold.
async fn two_guards_of_one_hold(b: Backend) {
    let c = b.client().await;
    let d = b.client().await;
    // Long enough that a renewal late by a loaded machine's scheduling is still in time.
    let lease = ms(1_500);
    let first = c.lock_for("two-guards", lease).await;
    let id = first.hold_id();
    let second = d
        .mutex("two-guards")
        .lease(lease)
        .resume(&id)
        .await
        .expect("resume in another client");
    for client in [&c, &d] {
        let err = client
            .mutex("two-guards")
            .resume(&id)
            .await
            .expect_err("a second guard of the hold in one client");
        assert!(err.is_hold_in_use(), "{err}");
    }
    assert!(first.is_held() && second.is_held());
    assert_eq!(second.fencing_token(), first.fencing_token());
    let before = first.valid_until().min(second.valid_until());
    let info = c.mutex("two-guards").inspect().await.expect("inspect");
    assert_honest("guards in two clients", before, &info, Instant::now());
    assert_eq!(info.holders.len(), 1, "one hold on the server");
    // Detach the first: the other keeps renewing past several leases.
    let _ = first.detach();
    tokio::time::sleep(lease * 3).await;
    assert!(
        second.is_held(),
        "a detach stopped the other client's renewals"
    );
    assert!(!lease_free(&c, "two-guards").await);
    assert!(second.release().await.expect("release"));
    assert!(lease_free(&c, "two-guards").await);
}

/// A write hold's id is gone once the hold was downgraded to a read hold (whose own id
/// resumes).
async fn a_downgraded_write_id_is_gone(b: Backend) {
    let c = b.client().await;
    let rw = c.rwlock("downgraded");
    let w = rw.write().await.expect("write");
    let write_id = w.hold_id();
    let r = downgraded(w).await;
    let read_id = r.detach();
    let err = rw.resume_write(&write_id).await.expect_err("gone");
    assert!(err.is_hold_gone(), "{err}");
    let r = rw.resume_read(&read_id).await.expect("read resumes");
    assert!(r.release().await.expect("release"));
}

/// The resumed guard has the handle's options: with auto-renew it outlives several leases.
async fn resumed_guard_renews_with_the_handles_options(b: Backend) {
    let c = b.client().await;
    let lease = ms(500);
    let id = c.fair_for("renewing", secs(30)).await.detach();
    let g = b
        .client()
        .await
        .fair_lock("renewing")
        .lease(lease)
        .resume(&id)
        .await
        .expect("resume");
    // The guard trusts the handle's lease from its renewal's send; the server keeps the
    // longer lease the hold had (no request shortens a hold, see `Store::extend`).
    let trusted = g.valid_until().saturating_duration_since(Instant::now());
    assert!(trusted <= lease, "the resumed guard trusts {trusted:?}");
    let info = c.fair_lock("renewing").inspect().await.expect("inspect");
    assert!(info.holders[0].lease_remaining > secs(25), "{info:?}");
    tokio::time::sleep(lease * 3).await;
    assert!(g.is_held(), "the resumed guard did not renew");
    assert!(g.release().await.expect("release"));
}

/// `max_hold` on Redis: renewals stop after the bound, `lost()` fires, and the lock frees
/// itself (no release).
async fn max_hold_ends_renewals(b: Backend) {
    let c = b.client().await;
    let lease = ms(400);
    let bound = ms(1_200);
    let g = c
        .mutex("bounded")
        .lease(lease)
        .max_hold(bound)
        .lock()
        .await
        .expect("lock");
    soon("lost() fires", g.lost()).await;
    assert!(!g.is_held());
    // Freed by the lapse, not by a release: the guard is still alive here.
    let other = b.client().await;
    let taken = other
        .mutex("bounded")
        .lock()
        .timeout(EVENTUALLY)
        .await
        .expect("free");
    assert!(taken.fencing_token() > g.fencing_token());
    drop(g);
}

/// `max_hold` with a paused clock: renewals go on until the bound, none after it, and the
/// guard is lost within one lease of the bound.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn max_hold_bound_on_a_paused_clock() {
    // The engine on this runtime, so its timers follow the paused clock.
    let client = LockClient::builder()
        .engine_on_current_runtime(true)
        .in_memory()
        .expect("client");
    let lease = secs(3);
    let bound = secs(10);
    let g = client
        .mutex("bounded-paused")
        .lease(lease)
        .max_hold(bound)
        .lock()
        .await
        .expect("lock");
    let granted = Instant::now();
    tokio::time::sleep(bound - ms(100)).await;
    assert!(g.is_held(), "lost before the bound");
    g.lost().await;
    let lost_after = granted.elapsed();
    assert!(
        lost_after >= bound,
        "lost after {lost_after:?}, before the bound"
    );
    assert!(
        lost_after <= bound + lease,
        "lost after {lost_after:?}: renewed past the bound {bound:?} (lease {lease:?})"
    );
}

/// A resume in the client whose guard is releasing the hold (its release request still on
/// the way to the server) must not give a guard that trusts the hold after the release is
/// applied: the releasing guard's entry stays until its release is answered, so the resume
/// is refused (`HoldInUse`, nothing sent).
async fn resume_racing_the_release_of_the_same_hold(b: Backend) {
    let (faulty, c) = faulty_client(&b).await;
    let g = c.mutex("resume-vs-release").lock().await.expect("lock");
    let id = g.hold_id();
    let gate = faulty.hold_requests(Rule::on(Op::Release).times(1));
    let releasing = tokio::spawn(async move { g.release().await });
    gate.wait_entered(1).await;
    let resumed = c.mutex("resume-vs-release").resume(&id).await;
    gate.open();
    assert!(join("release", releasing).await.expect("release"));
    assert!(
        lease_free(&c, "resume-vs-release").await,
        "the release did not release"
    );
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(guard) => assert!(
            !guard.is_held(),
            "the resumed guard trusts a hold released under it"
        ),
    }
}

/// A leader that detaches keeps leading (value and term) on the server; another client
/// (a restarted process) resumes the leadership under the same term and value, and it
/// resigns as any leadership does. A resigned leadership's id is gone.
async fn leadership_resumes_under_its_term(b: Backend) {
    let first = b.client().await;
    let second = b.client().await;
    let election = first.election("hold-election");
    let leadership = election.campaign("10.0.0.7:9000").await.expect("campaign");
    let term = leadership.term();
    let id = leadership.detach();
    let seen = second.leader_of("hold-election").await;
    assert_eq!(
        seen.map(|l| (l.value, l.term)),
        Some(("10.0.0.7:9000".into(), term))
    );
    let resumed = second
        .election("hold-election")
        .resume(&id)
        .await
        .expect("resume");
    assert_eq!((resumed.value(), resumed.term()), ("10.0.0.7:9000", term));
    assert!(resumed.is_held());
    assert!(resumed.resign().await.expect("resign"));
    let err = second
        .election("hold-election")
        .resume(&id)
        .await
        .expect_err("resigned");
    assert!(err.is_hold_gone(), "{err}");
    assert_eq!(election.leader().await.expect("leader"), None);
}

/// The fair RwLock (ticket queue) resumes read and write holds too, and refuses the id of
/// the other preference.
async fn fair_rwlock_holds_resume(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let fair = c.rwlock("fair-rw").preference(Preference::Fair);
    let read = fair.read().await.expect("read").detach();
    assert_eq!(read.kind(), "read-fair");
    let r = other
        .rwlock("fair-rw")
        .preference(Preference::Fair)
        .resume_read(&read)
        .await
        .expect("resume read");
    let err = other
        .rwlock("fair-rw")
        .resume_read(&read)
        .await
        .expect_err("preference");
    assert!(matches!(err, Error::HoldKindMismatch { .. }), "{err}");
    assert!(r.release().await.expect("release"));
    let write = fair.write().await.expect("write").detach();
    let w = other
        .rwlock("fair-rw")
        .preference(Preference::Fair)
        .resume_write(&write)
        .await
        .expect("resume write");
    assert_eq!(w.fencing_token(), write.fencing_token());
    assert!(support::would_block(fair.try_read().await));
    assert!(w.release().await.expect("release"));
}

/// A multi-lock's hold is one id per part: detached, the parts stay held; another client
/// resumes them together under their fences; ids of other names or another preference are
/// refused before anything is sent; a part that is gone makes the resume fail naming it.
async fn multi_lock_holds_resume(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let report = c.multi_rwlock(["mr-prices"], ["mr-report"]);
    let guard = report.lock().await.expect("lock");
    let fences: Vec<(String, u64)> = guard
        .fencing_tokens()
        .map(|(n, f)| (n.to_owned(), f))
        .collect();
    let ids = guard.detach();
    assert_eq!(ids.len(), 2);
    assert!(support::would_block(
        other.rwlock("mr-report").try_read().await
    ));
    let texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let parsed: Vec<HoldId> = texts.iter().map(|t| t.parse().expect("id")).collect();

    let err = other
        .multi_lock(["mr-prices", "mr-x"])
        .resume(&parsed)
        .await
        .expect_err("names");
    assert!(matches!(err, Error::HoldNameMismatch { .. }), "{err}");
    let reader = other
        .multi_rwlock(["mr-prices"], ["mr-report"])
        .preference(Preference::Reader);
    let err = reader.resume(&parsed).await.expect_err("preference");
    assert!(matches!(err, Error::HoldKindMismatch { .. }), "{err}");

    let resumed = other
        .multi_rwlock(["mr-prices"], ["mr-report"])
        .resume(&parsed)
        .await
        .expect("resume");
    assert!(resumed.is_held());
    let again: Vec<(String, u64)> = resumed
        .fencing_tokens()
        .map(|(n, f)| (n.to_owned(), f))
        .collect();
    assert_eq!(again, fences);
    let ids = resumed.detach();
    assert!(other.release_hold(&ids[1]).await.expect("release one part"));
    let err = other
        .multi_rwlock(["mr-prices"], ["mr-report"])
        .resume(&ids)
        .await
        .expect_err("a part is gone");
    match err {
        Error::HoldGone { name } => assert_eq!(name, ids[1].name()),
        other => panic!("{other}"),
    }
    assert!(other
        .release_hold(&ids[0])
        .await
        .expect("release the other part"));
    assert!(lease_free(&other, "mr-report").await && lease_free(&other, "mr-prices").await);
}

/// Resumes a detached 1 s hold through a store whose reply to the resuming renewal comes
/// 300 ms after the server applied it; true if the resumed guard's trust stays within the
/// server's lease (it is counted from the renewal's send, not its reply).
async fn resumed_trust_is_honest(b: &Backend) -> bool {
    let c = b.client().await;
    let id = c.lock_for("resume-honest", secs(1)).await.detach();
    let (faulty, resumer) = faulty_client(b).await;
    faulty.add(Rule::on(Op::Extend).times(1).delay_reply(ms(300)));
    let g = resumer.resume_for("resume-honest", secs(1), &id).await;
    let trusted = g.valid_until();
    let info = c.mutex("resume-honest").inspect().await.expect("inspect");
    let server = support::honest::server_deadline(&info, Instant::now()).expect("held");
    assert!(g.release().await.expect("release"));
    trusted <= server + ms(5)
}

async fn a_resumed_guard_trusts_from_the_send(b: Backend) {
    assert!(
        resumed_trust_is_honest(&b).await,
        "the resumed guard trusts past the server's lease"
    );
}

/// The check above finds the planted bug that trusts a resumed hold from the reply (nextest
/// runs each test in a process of its own, so the planted bug stays in this one).
#[test]
fn finds_planted_resume_trusts_reply() {
    redis_locks::testing::plant(redis_locks::testing::Bug::ResumeTrustsReply);
    let honest =
        support::time::multi_thread(2).block_on(resumed_trust_is_honest(&Backend::memory()));
    redis_locks::testing::unplant_all();
    assert!(!honest, "the planted bug went unnoticed");
}

/// A guard that lost its trust (no renewal reply came in time) while the server still held
/// its token: resuming the id in the same client is refused while that guard lives (a second
/// entry of the token beside it is what its drop would release under); an extend by id then
/// renews the server's hold without reviving the lost guard; once the lost guard is detached,
/// the id resumes, and an extend by id goes through the live guard, whose trust follows the
/// new lease.
async fn resume_after_a_local_loss_and_extend_by_id(b: Backend) {
    let (faulty, c) = faulty_client(&b).await;
    let mutex = c.mutex("lost-locally").lease(ms(600));
    let lost = mutex.lock().await.expect("lock");
    let id = lost.hold_id();
    // Every renewal is applied, but its reply is lost: the guard's trust runs out.
    faulty.add(Rule::on(Op::Extend).lose_reply());
    soon("the guard gives up", lost.lost()).await;
    faulty.clear();
    let err = mutex.resume(&id).await.expect_err("beside the lost guard");
    assert!(err.is_hold_in_use(), "{err}");
    assert!(c.extend_hold(&id, secs(30)).await.expect("extend by id"));
    assert!(!lost.is_held(), "an extend by id revived a lost guard");
    let id = lost.detach();
    let resumed = mutex.resume(&id).await.expect("the server still holds it");
    assert!(resumed.is_held());
    assert!(c.extend_hold(&id, secs(30)).await.expect("extend by id"));
    assert!(
        resumed.valid_until() > Instant::now() + secs(10),
        "the extend by id went past the live guard"
    );
    assert!(resumed.release().await.expect("release"));
}

/// A second write guard of one hold in one client (a resume of the id) is refused
/// (`HoldInUse`), so a downgrade through the one guard leaves no write guard beside the
/// server's read hold.
async fn a_downgrade_with_a_second_write_guard_keeps_it_honest(b: Backend) {
    let c = b.client().await;
    let rw = c.rwlock("co-downgrade");
    let first = rw.write().await.expect("write");
    let id = first.hold_id();
    let err = rw
        .resume_write(&id)
        .await
        .expect_err("a second write guard");
    assert!(err.is_hold_in_use(), "{err}");
    let read = downgraded(first).await;
    let info = rw.inspect().await.expect("inspect");
    assert!(
        info.holders
            .iter()
            .all(|h| h.kind == redis_locks::HoldKind::Read),
        "{:?}",
        info.holders
    );
    assert!(read.release().await.expect("release"));
}

// Attacks: adversarial tests of hold ids (resume, detach, release and extend by id, one guard
// per hold per client, `max_hold`, the fence), on both backends.

/// Attack: two resumes of one detached id run concurrently in ONE client (their renewals'
/// replies are slow, so neither finds a guard of the token in the client's registry yet). A
/// client keeps at most one guard per hold: exactly one resume gives a guard, the other is
/// refused (`HoldInUse`) without sending anything, and a release through the one guard frees
/// the lock with no other guard of it left saying `is_held()`.
async fn concurrent_resumes_in_one_client_share_one_owner(b: Backend) {
    let name = "concurrent-resumes-one-client";
    let owner = b.client().await;
    let id = detached_mutex(&owner, name, secs(5)).await;
    let (faulty, c) = faulty_client(&b).await;
    faulty.add(Rule::on(Op::Extend).times(2).delay_reply(ms(300)));
    let m = c.mutex(name).lease(secs(5));
    let (a, bb) = tokio::join!(m.resume(&id), m.resume(&id));
    let sent = faulty.count(Op::Extend);
    let (guard, refused) = match (a, bb) {
        (Ok(g), Err(e)) | (Err(e), Ok(g)) => (g, e),
        (a, bb) => panic!(
            "two concurrent resumes of one hold in one client must give exactly one guard \
             and one refusal: {:?} / {:?}",
            a.map(|g| g.detach()),
            bb.map(|g| g.detach())
        ),
    };
    assert!(refused.is_hold_in_use(), "{refused}");
    assert_eq!(sent, 1, "the refused resume sent a renewal");
    assert!(guard.is_held());
    assert!(guard.release().await.expect("release"));
    assert!(
        lease_free(&owner, name).await,
        "the release did not release"
    );
}

/// Attack: in ONE client, a `release_hold(id)` runs while a resume of the same id is on its
/// way (its renewal applied on the server, the reply not yet back). The resume's guard would
/// be trusted from a renewal the release follows: the release by id is refused (`HoldInUse`,
/// nothing sent) while the resume is under way, and the resumed guard is honest.
async fn release_by_id_racing_a_resume_in_one_client(b: Backend) {
    let name = "release-by-id-racing-a-resume";
    let owner = b.client().await;
    let id = detached_mutex(&owner, name, secs(5)).await;
    let (faulty, c) = faulty_client(&b).await;
    let gate = faulty.hold_replies(Rule::on(Op::Extend).times(1));
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move { c.mutex(name).lease(secs(5)).resume(&id).await })
    };
    gate.wait_entered(1).await;
    let released = c.release_hold(&id).await;
    gate.open();
    let g = join("resume", resuming).await.expect("resume");
    let err = released.expect_err("a release by id beside a resume in the same client");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(faulty.count(Op::Release), 0, "the refused release was sent");
    let before = g.valid_until();
    let info = owner.mutex(name).inspect().await.expect("inspect");
    assert!(g.is_held(), "the resumed guard lost a hold nobody released");
    assert_honest("resume vs release_hold", before, &info, Instant::now());
    assert!(g.release().await.expect("release"));
    assert!(lease_free(&owner, name).await);
}

/// Attack: resume the id of a live guard in the same client (a co-guard resume). A client
/// keeps at most one guard per hold: the resume is refused (`HoldInUse`) and sends nothing, and
/// the live guard keeps its hold (a cancelled or failed co-guard resume cannot touch it).
async fn cancelled_co_guard_resume_leaves_the_hold_as_before(b: Backend) {
    let name = "cancelled-co-guard-resume";
    let (faulty, c) = faulty_client(&b).await;
    let mutex = c.mutex(name).lease(secs(3));
    let g = mutex.lock().await.expect("lock");
    let id = g.hold_id();
    // The first renewal is due in 1 s: any extend before it is the resume's.
    let err = c
        .mutex(name)
        .lease(secs(3))
        .resume(&id)
        .await
        .expect_err("a second guard of a live hold in one client");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(
        faulty.count(Op::Extend),
        0,
        "the refused resume sent a renewal"
    );
    let other = b.client().await;
    assert!(
        !lease_free(&other, name).await,
        "a refused co-guard resume released the hold under the live guard"
    );
    assert!(
        g.is_held(),
        "a refused co-guard resume made the live guard lose its hold"
    );
    assert!(g.release().await.expect("release"));
}

/// Attack: a resume on a handle with `max_hold(d)` in a client that has a guard of the hold
/// (no bound) is refused (it would have joined the unbounded owner); once that guard detaches,
/// the resume is made "with this handle's options (lease, auto-renewal, `max_hold`)", and
/// GUARANTEES: "no automatic renewal is sent once d has passed since the grant (or the
/// resume)".
async fn co_guard_resume_keeps_the_handles_max_hold(b: Backend) {
    let name = "co-guard-keeps-max-hold";
    let c = b.client().await;
    let lease = ms(400);
    let bound = ms(1_200);
    let first = c.mutex(name).lease(lease).lock().await.expect("lock");
    let bounded_handle = c.mutex(name).lease(lease).max_hold(bound);
    let err = bounded_handle
        .resume(&first.hold_id())
        .await
        .expect_err("a second guard of a live hold in one client");
    assert!(err.is_hold_in_use(), "{err}");
    let id = first.detach();
    let bounded = bounded_handle.resume(&id).await.expect("resume");
    let resumed_at = Instant::now();
    let lost = tokio::time::timeout(secs(8), bounded.lost()).await;
    let held_for = resumed_at.elapsed();
    assert!(
        lost.is_ok(),
        "a guard resumed with max_hold({bound:?}) and lease {lease:?} was still renewed \
         {held_for:?} after its resume"
    );
    // No renewal after the bound: the server's lease lapses within one lease of the last.
    eventually("the bounded hold lapses on the server", async || {
        lease_free(&c, name).await
    })
    .await;
    drop(bounded);
}

/// Attack: `extend` of a `max_hold` guard past the bound, then wait: the extend is honoured
/// ("`extend` still renews"), but automatic renewals must not restart; `lost()` fires and the
/// server frees the lock by itself (no release).
async fn max_hold_is_not_reset_by_an_extend(b: Backend) {
    let name = "max-hold-not-reset-by-extend";
    let c = b.client().await;
    let lease = ms(400);
    let mut g = c
        .mutex(name)
        .lease(lease)
        .max_hold(ms(800))
        .lock()
        .await
        .expect("lock");
    let granted = Instant::now();
    tokio::time::sleep(ms(500)).await;
    // Extend after a part of the bound, and again after it (if still held).
    let _ = g.extend(lease).await.expect("extend");
    tokio::time::sleep(ms(500)).await;
    if g.is_held() {
        let _ = g.extend(lease).await.expect("extend");
    }
    tokio::time::timeout(secs(10), g.lost())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "a max_hold(800ms) guard is still renewed {:?} after the grant",
                granted.elapsed()
            )
        });
    eventually("the bounded hold lapses on the server", async || {
        lease_free(&c, name).await
    })
    .await;
    drop(g);
}

/// Attack: a resume in another client (process) is cancelled while its renewal's reply is on
/// its way. Nothing may be left renewed beyond that one step: no further renewal is sent, and
/// the hold lapses within one lease of it.
async fn cancelled_resume_leaves_nothing_renewing(b: Backend) {
    let name = "cancelled-resume-renews-nothing";
    let owner = b.client().await;
    let lease = ms(800);
    let id = detached_mutex(&owner, name, lease).await;
    let (faulty, c) = faulty_client(&b).await;
    let gate = faulty.hold_replies(Rule::on(Op::Extend).times(1));
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.mutex(name)
                .lease(lease)
                .resume(&id)
                .await
                .map(|g| g.detach())
        })
    };
    cancel_at(&gate, resuming).await;
    let info = owner.mutex(name).inspect().await.expect("inspect");
    if let Some(h) = info.holders.first() {
        // A renewal's deadline is rounded up to an even millisecond (see `Store::renew`).
        assert!(
            h.lease_remaining <= lease + ms(1),
            "the cancelled resume left a lease longer than it asked: {info:?}"
        );
    }
    eventually("the hold lapses after a cancelled resume", async || {
        lease_free(&owner, name).await
    })
    .await;
    tokio::time::sleep(lease * 2).await;
    let extends = faulty.count(Op::Extend);
    assert!(
        extends <= 1,
        "a cancelled resume left renewals running: {extends} extends sent"
    );
    // The id is gone now.
    let err = c.mutex(name).resume(&id).await.expect_err("gone");
    assert!(err.is_hold_gone(), "{err}");
}

/// Attack: an id whose fence was changed. The brief's claim: a tampered id (changed fence,
/// token, kind, version) is refused. (docs/decisions/hold-ids.md says "a resume does not
/// re-read [the fence] from the server": this test records whether that is so.)
async fn a_tampered_fence_is_refused(b: Backend) {
    let name = "tampered-fence";
    let c = b.client().await;
    let other = b.client().await;
    let id = detached_mutex(&c, name, secs(10)).await;
    let real = id.fencing_token();
    let text = id.to_string();
    let forged = text.replacen(&format!(":{real}:"), &format!(":{}:", real + 1_000_000), 1);
    assert_ne!(forged, text);
    let forged: HoldId = forged.parse().expect("a well-formed forged id parses");
    let resumed = other.mutex(name).resume(&forged).await;
    let info = other.mutex(name).inspect().await.expect("inspect");
    assert!(c.release_hold(&id).await.expect("release"));
    if let Ok(g) = resumed {
        panic!(
            "a resume accepted an id with a changed fence: the guard reports fence {} while \
             the server granted {real} (its fence counter is {})",
            g.fencing_token(),
            info.fence
        );
    }
}

/// Attack: ids with a changed token, kind or version never give a live guard (the token is
/// the capability; kind and version are checked).
async fn tampered_token_kind_version_are_refused(b: Backend) {
    let name = "tampered-token-kind-version";
    let c = b.client().await;
    let other = b.client().await;
    let id = detached_mutex(&c, name, secs(10)).await;
    let text = id.to_string();
    let parts: Vec<&str> = text.splitn(5, ':').collect();
    assert_eq!(parts[0], "rlh1");
    let token = parts[3];
    // Another well-formed token of the same length: every character flipped.
    let flipped: String = token
        .chars()
        .map(|ch| if ch == 'a' { 'b' } else { 'a' })
        .collect();
    let forged = format!("rlh1:{}:{}:{}:{}", parts[1], parts[2], flipped, parts[4]);
    let forged: HoldId = forged.parse().expect("parses");
    let err = other
        .mutex(name)
        .resume(&forged)
        .await
        .expect_err("a forged token resumed");
    assert!(err.is_hold_gone(), "{err}");
    // A prefix of the token (a shorter capability).
    let short = format!(
        "rlh1:{}:{}:{}:{}",
        parts[1],
        parts[2],
        &token[..16],
        parts[4]
    );
    if let Ok(short) = short.parse::<HoldId>() {
        let err = other
            .mutex(name)
            .resume(&short)
            .await
            .expect_err("a token prefix resumed");
        assert!(err.is_hold_gone(), "{err}");
    }
    // The kind changed to the other kinds that share the lease lock.
    for kind in [
        "fair",
        "write-writer",
        "write-reader",
        "read-writer",
        "sem-1-1",
    ] {
        let forged = format!("rlh1:{kind}:{}:{}:{}", parts[2], token, parts[4]);
        let forged: HoldId = forged.parse().expect(kind);
        // A guard that did resume is detached (its drop would release the hold).
        macro_rules! refused {
            ($resume:expr) => {
                $resume.await.map(|g| g.detach()).err()
            };
        }
        let reader = other.rwlock(name).preference(Preference::Reader);
        let refused = match kind {
            "fair" => refused!(other.fair_lock(name).resume(&forged)),
            "write-writer" => refused!(other.rwlock(name).resume_write(&forged)),
            "write-reader" => refused!(reader.resume_write(&forged)),
            "read-writer" => refused!(other.rwlock(name).resume_read(&forged)),
            _ => refused!(other.semaphore(name, 1).resume(&forged)),
        };
        // A write hold of the same name is the same lease (mutex-is-the-lease-lock-writer):
        // resuming it as a writer is no second holder. Anything else must be refused.
        if kind.starts_with("write-") {
            continue;
        }
        assert!(
            refused.is_some(),
            "a mutex id with its kind changed to {kind} resumed a live guard"
        );
    }
    for version in ["rlh0", "rlh2", "RLH1", "rlh", "rlh01"] {
        let forged = text.replacen("rlh1", version, 1);
        assert!(
            forged.parse::<HoldId>().is_err(),
            "{version}: an id of another version parsed"
        );
    }
    // Nothing above disturbed or doubled the hold.
    let info = c.mutex(name).inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(c.release_hold(&id).await.expect("release"));
}

/// Attack: the strict parser. Every one-character mutation (replace, delete, insert) of a
/// valid id either fails to parse or parses to an id that writes back exactly as the mutated
/// text (no two texts name one id; no lenient reading).
#[test]
fn every_mutation_parses_strictly_or_not_at_all() {
    let rt = support::time::current_thread();
    let text = rt.block_on(async {
        let c = LockClient::in_memory();
        c.semaphore("a:b", 3)
            .acquire_many(2)
            .await
            .expect("acquire")
            .detach()
            .to_string()
    });
    let alphabet = [
        'a', 'Z', '0', '1', '9', ':', '-', '_', '+', ' ', '\n', '#', '|', 'é', '\0',
    ];
    let chars: Vec<char> = text.chars().collect();
    let mut candidates = Vec::new();
    for i in 0..=chars.len() {
        for &x in &alphabet {
            let mut m = chars.clone();
            m.insert(i, x);
            candidates.push(m.into_iter().collect::<String>());
            if i < chars.len() {
                let mut m = chars.clone();
                m[i] = x;
                candidates.push(m.into_iter().collect::<String>());
            }
        }
        if i < chars.len() {
            let mut m = chars.clone();
            m.remove(i);
            candidates.push(m.into_iter().collect::<String>());
        }
    }
    for m in candidates {
        if let Ok(id) = m.parse::<HoldId>() {
            assert_eq!(
                id.to_string(),
                m,
                "the text {m:?} parsed to an id written as another text"
            );
        }
    }
}

/// An extend by id with a shorter lease in the client that has the guard of the hold (a
/// second guard is refused) lowers that guard's trust to the new lease, and leaves the
/// server's longer lease as it was (no request shortens a hold).
async fn a_shorter_extend_by_id_lowers_every_co_guard(b: Backend) {
    let name = "shorter-extend-by-id-lowers-co-guards";
    let c = b.client().await;
    let mutex = c.mutex(name).lease(secs(10)).auto_renew(false);
    let first = mutex.lock().await.expect("lock");
    let id = first.hold_id();
    let err = mutex.resume(&id).await.expect_err("a second guard");
    assert!(err.is_hold_in_use(), "{err}");
    assert!(c.extend_hold(&id, ms(500)).await.expect("extend by id"));
    let before = first.valid_until();
    let info = mutex.inspect().await.expect("inspect");
    let answered = Instant::now();
    assert_honest("the guard", before, &info, answered);
    let trusted = before.saturating_duration_since(answered);
    assert!(trusted <= ms(500), "the guard trusts {trusted:?} ahead");
    assert!(info.holders[0].lease_remaining > secs(9), "{info:?}");
}

/// Attack: a resume in the client whose `release_all` is in flight (its release request held
/// before it reaches the server). The resume must be refused, or its guard be lost once the
/// release is done; the lock must end up free.
async fn resume_racing_release_all(b: Backend) {
    let name = "resume-racing-release-all";
    let (faulty, c) = faulty_client(&b).await;
    let g = c.mutex(name).lock().await.expect("lock");
    let id = g.hold_id();
    let gate = faulty.hold_requests(Rule::on(Op::Release).times(1));
    let releasing = {
        let c = c.clone();
        tokio::spawn(async move { c.release_all().await })
    };
    gate.wait_entered(1).await;
    let resumed = c.mutex(name).resume(&id).await;
    gate.open();
    join("release_all", releasing).await.expect("release_all");
    let other = b.client().await;
    assert!(lease_free(&other, name).await, "release_all left the hold");
    if let Ok(r) = resumed {
        assert!(
            !r.is_held(),
            "a guard resumed during release_all trusts a released hold"
        );
    }
    assert!(!g.is_held());
}

/// Attack: a guard resumed in another client, then its hold is released and re-granted by the
/// first client; the resumed guard's next renewal must find it gone (lost), and its trust
/// must never outlast the server's lease of the released hold by more than the lease.
/// (A cross-process release is learned at the next renewal: documented.) What must not
/// happen: a renewal of the resumed guard extends the NEW holder's grant.
async fn a_resumed_guard_never_renews_a_later_grant(b: Backend) {
    let name = "resumed-guard-vs-later-grant";
    let first = b.client().await;
    let second = b.client().await;
    let lease = ms(600);
    let g = first.mutex(name).lease(lease).lock().await.expect("lock");
    let id = g.hold_id();
    let resumed = second.resume_for(name, lease, &id).await;
    assert!(g.release().await.expect("release"));
    let later = first
        .mutex(name)
        .lease(secs(30))
        .auto_renew(false)
        .lock()
        .timeout(EVENTUALLY)
        .await
        .expect("the lock is free again");
    let promise = "the resumed guard learns the release at its next renewal";
    soon(promise, resumed.lost()).await;
    let info = first.mutex(name).inspect().await.expect("inspect");
    let server = server_deadline(&info, Instant::now()).expect("held by the later grant");
    assert!(
        server > Instant::now() + secs(20),
        "the later grant's lease was changed: {info:?}"
    );
    assert!(!resumed.is_held());
    assert!(later.release().await.expect("release"));
}

/// Attack: a semaphore id with its permit count or capacity changed. A resume must not give a
/// guard that claims another number of permits than the server holds for the token.
async fn tampered_permits_are_refused(b: Backend) {
    let name = "tampered-permits";
    let c = b.client().await;
    let other = b.client().await;
    let id = c
        .semaphore(name, 3)
        .acquire_many(2)
        .await
        .expect("acquire")
        .detach();
    let text = id.to_string();
    assert!(text.starts_with("rlh1:sem-2-3:"), "{text}");
    for (kind, capacity) in [("sem-1-3", 3), ("sem-3-3", 3)] {
        let forged: HoldId = text.replacen("sem-2-3", kind, 1).parse().expect(kind);
        let resumed = other.semaphore(name, capacity).resume(&forged).await;
        if let Ok(g) = resumed {
            let permits = g.num_permits();
            let _ = g.detach();
            panic!(
                "an id forged to {kind} resumed a guard of {permits} permits (the server holds 2)"
            );
        }
    }
    let info = c.semaphore(name, 3).inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(c.release_hold(&id).await.expect("release"));
}

/// Attack: `extend_hold(id, short)` in ONE client while a resume of the same id (long lease)
/// is on its way (applied on the server, reply not back). Beside the resume, the extend would
/// shorten a lease the resumed guard then trusts for the long one: it is refused (`HoldInUse`,
/// nothing sent), and the resumed guard is honest.
async fn extend_by_id_racing_a_resume_in_one_client(b: Backend) {
    let name = "extend-by-id-racing-a-resume";
    let owner = b.client().await;
    let id = detached_mutex(&owner, name, secs(10)).await;
    let (faulty, c) = faulty_client(&b).await;
    let gate = faulty.hold_replies(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(secs(10)))
            .times(1),
    );
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.mutex(name)
                .lease(secs(10))
                .auto_renew(false)
                .resume(&id)
                .await
        })
    };
    gate.wait_entered(1).await;
    let extended = c.extend_hold(&id, ms(800)).await;
    let sent = faulty.count(Op::Extend);
    gate.open();
    let g = join("resume", resuming).await.expect("resume");
    let err = extended.expect_err("an extend by id beside a resume in the same client");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(sent, 1, "the refused extend by id was sent");
    let before = g.valid_until();
    let info = owner.mutex(name).inspect().await.expect("inspect");
    let what = "a guard resumed while its own client tried to extend the hold by id";
    assert_honest(what, before, &info, Instant::now());
    drop(g);
}

/// Attack: make a co-guard in one client, to drop it under the other. The second guard is
/// refused (`HoldInUse`): the one guard keeps the hold, and its drop frees the lock.
async fn dropping_a_co_guard_makes_the_other_honest(b: Backend) {
    let name = "drop-one-co-guard";
    let c = b.client().await;
    let mutex = c.mutex(name).lease(secs(5));
    let first = mutex.lock().await.expect("lock");
    let id = first.hold_id();
    let err = mutex.resume(&id).await.expect_err("a second guard");
    assert!(err.is_hold_in_use(), "{err}");
    assert!(first.is_held());
    drop(first);
    eventually("the dropped guard's release lands", async || {
        lease_free(&c, name).await
    })
    .await;
    // The server may have applied the release before this client read its answer: until
    // then the hold is still releasing here (`HoldInUse`).
    eventually("the release's answer is read", async || {
        match mutex.resume(&id).await {
            Err(e) if e.is_hold_in_use() => false,
            Err(e) if e.is_hold_gone() => true,
            Err(e) => panic!("a resume of a released hold: {e}"),
            Ok(_) => panic!("a resume of a released hold gave a guard"),
        }
    })
    .await;
}

/// Attack: a guard resumed on a helper runtime that is then shut down. The guard never
/// trusts past the server's lease, and once dropped the hold ends (released, or lapsed).
#[test]
fn resumed_on_a_runtime_that_shuts_down() {
    let name = "resumed-on-a-runtime-that-shuts-down";
    for b in [Backend::memory(), Backend::redis()] {
        let main = support::time::current_thread();
        let (owner, id) = main.block_on(async {
            let owner = b.client().await;
            let id = detached_mutex(&owner, name, ms(800)).await;
            (owner, id)
        });
        let helper = support::time::multi_thread(1);
        let g = helper.block_on(async {
            let c = b.client().await;
            c.resume_for(name, ms(800), &id).await
        });
        helper.shutdown_timeout(ms(500));
        main.block_on(async {
            // The engine renews it whatever happened to the helper runtime (on the in-memory
            // test store it ran there, and the guard's trust runs out): honest either way.
            for _ in 0..10 {
                let until = g.valid_until();
                let info = owner.mutex(name).inspect().await.expect("inspect");
                support::honest::assert_honest(b.kind, until, &info, Instant::now());
                tokio::time::sleep(ms(100)).await;
            }
            drop(g);
            eventually("the hold lapses", async || lease_free(&owner, name).await).await;
        });
    }
}

/// Attack: a resume in the client whose only guard of the hold was just dropped (its
/// background release held before it reaches the server). The resume must be refused, or its
/// guard be lost once the release lands; the lock must end up free.
async fn resume_racing_the_drop_of_its_guard(b: Backend) {
    let name = "resume-racing-its-guards-drop";
    let (faulty, c) = faulty_client(&b).await;
    let g = c.mutex(name).lock().await.expect("lock");
    let id = g.hold_id();
    let gate = faulty.hold_requests(Rule::on(Op::Release).times(1));
    drop(g);
    gate.wait_entered(1).await;
    let resumed = c.mutex(name).resume(&id).await;
    gate.open();
    let other = b.client().await;
    eventually("the dropped guard's release lands", async || {
        lease_free(&other, name).await
    })
    .await;
    // The dropped guard's entry stays until its release is answered: refused, nothing sent.
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(r) => assert!(
            !r.is_held(),
            "a guard resumed while its dropped guard's release was in flight trusts a \
             released hold"
        ),
    }
}

/// Attack: a guard loses its trust locally (renewal replies lost) while the server still
/// holds its token; the id is resumed in the same client. A second entry of the token beside
/// the lost one would be ended by the lost one's release or drop: the resume is refused
/// (`HoldInUse`, nothing sent) until the lost guard is given up; once its release or drop
/// ended the server's hold, the id is gone.
async fn lost_guard_ended_after_a_resume(b: Backend, how: &str) {
    let name = format!("lost-guard-ended-after-resume-{how}");
    let (faulty, c) = faulty_client(&b).await;
    let mutex = c.mutex(&name).lease(secs(3));
    let lost = mutex.lock().await.expect("lock");
    let id = lost.hold_id();
    faulty.add(Rule::on(Op::Extend).lose_reply());
    soon("the guard gives up", lost.lost()).await;
    faulty.clear();
    // A renewal sent before the guard gave up may still be retried on the wire: the count
    // is taken once it has stopped moving (it must, within 5 s), so what follows is the
    // resume's alone.
    let mut sent = faulty.count(Op::Extend);
    for round in 0.. {
        assert!(
            round < 20,
            "renewals still sent 5 s after the guard gave up"
        );
        tokio::time::sleep(ms(250)).await;
        let now = faulty.count(Op::Extend);
        if now == sent {
            break;
        }
        sent = now;
    }
    let err = c
        .mutex(&name)
        .lease(secs(10))
        .resume(&id)
        .await
        .expect_err("a second entry of a token beside its lost guard");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(
        faulty.count(Op::Extend),
        sent,
        "the refused resume sent a renewal"
    );
    match how {
        "release" => {
            let _ = lost.release().await;
        }
        _ => drop(lost),
    }
    let other = b.client().await;
    eventually("the lost guard's release lands", async || {
        lease_free(&other, &name).await
    })
    .await;
    let err = mutex.resume(&id).await.expect_err("released");
    assert!(err.is_hold_gone(), "{err}");
}

async fn releasing_the_lost_guard_after_a_resume(b: Backend) {
    lost_guard_ended_after_a_resume(b, "release").await
}

async fn dropping_the_lost_guard_after_a_resume(b: Backend) {
    lost_guard_ended_after_a_resume(b, "drop").await
}
/// Attack, deterministic form of the one above: a guard without auto-renewal runs out of
/// trust (`lost()` fires, `is_held()` false) while the server's lease is longer (another
/// process extended it by id); a resume of the id in the guard's own client is refused while
/// that guard lives (it must not be revived, nor a second entry made beside it), and works
/// once the expired guard is detached.
async fn an_expired_guard_stays_lost_after_a_resume(b: Backend) {
    let name = "expired-guard-stays-lost";
    let c = b.client().await;
    let other = b.client().await;
    let expired = c.lock_unrenewed(name, ms(600)).await;
    let id = expired.hold_id();
    assert!(other
        .extend_hold(&id, secs(30))
        .await
        .expect("extend by id"));
    soon("lost() fires when the trust runs out", expired.lost()).await;
    let lost_at = Instant::now();
    assert!(!expired.is_held());
    let err = c
        .mutex(name)
        .lease(secs(10))
        .resume(&id)
        .await
        .expect_err("a resume beside the expired guard");
    assert!(err.is_hold_in_use(), "{err}");
    let revived = expired.is_held();
    let moved = expired.valid_until().saturating_duration_since(lost_at);
    assert!(
        !revived && moved.is_zero(),
        "a guard whose lost() had fired was revived by a resume of its id in its client: \
         is_held() {revived}, valid_until() moved {moved:?} past the instant it was lost"
    );
    let id = expired.detach();
    let resumed = c
        .mutex(name)
        .lease(secs(10))
        .resume(&id)
        .await
        .expect("the server still holds it");
    assert!(resumed.is_held());
    assert!(resumed.release().await.expect("release"));
}

/// Attack: `Election::resume` cut while it reads the leader's value, after its renewal:
/// cancelled there (its docs, "Cancel safety": "If cancelled, the leadership's lease may have
/// been renewed; no `Leadership` has it"), or failing there (its reply lost). The leadership
/// was handed over (detached); neither may end it: it still leads under its term and value,
/// to be resumed again.
async fn an_election_resume_cut_at_its_leader_read_keeps_the_leadership(b: Backend) {
    for (how, value) in [("cancelled", "10.0.0.9:1"), ("failed", "10.0.0.9:2")] {
        let name = &format!("{how}-election-resume");
        let first = b.client().await;
        let id = first.campaign_for(name, secs(5), value).await.detach();
        let (faulty, c) = faulty_client(&b).await;
        let outcome = if how == "cancelled" {
            let gate = faulty.hold_requests(Rule::on(Op::Leader).times(1));
            let (c, id, name) = (c.clone(), id.clone(), name.clone());
            let resuming = tokio::spawn(async move {
                let resumed = c.election(&name).lease(secs(5)).resume(&id).await;
                resumed.map(|l| l.detach())
            });
            cancel_at(&gate, resuming).await;
            None
        } else {
            faulty.add(Rule::on(Op::Leader).lose_reply());
            let resumed = c.election(name).lease(secs(5)).resume(&id).await;
            resumed.map(|l| l.detach()).err()
        };
        faulty.clear();
        tokio::time::sleep(ms(300)).await;
        let seen = first.leader_of(name).await;
        assert!(
            seen.as_ref()
                .is_some_and(|l| l.term == id.fencing_token() && l.value == value),
            "an Election::resume {how} at its leader read ({outcome:?}) ended the leadership \
             it was resuming: leader now {seen:?}"
        );
        let back = first.election(name).resume(&id).await;
        let back = back.expect("the leadership is still there to resume");
        assert!(back.resign().await.expect("resign"), "{how}");
    }
}

/// Attack: cancel `MultiLock::resume` (in another process) after its first part was renewed,
/// while the second part's renewal is held. Its docs ("Cancel safety"): "If cancelled, the
/// parts renewed so far are left held, with no guard." So the first part must still be held
/// on the server (until its lease lapses), not released by the cancel.
async fn cancelled_multi_resume_leaves_the_parts_held(b: Backend) {
    let names = ["cancelled-multi-resume-a", "cancelled-multi-resume-b"];
    let owner = b.client().await;
    let ids = owner
        .multi_lock(names)
        .lease(secs(5))
        .lock()
        .await
        .expect("lock")
        .detach();
    let (faulty, c) = faulty_client(&b).await;
    let gate = Gate::new();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let first_part = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    {
        let (seen, first_part) = (seen.clone(), first_part.clone());
        faulty.add(
            Rule::on(Op::Extend)
                .when(move |call| {
                    let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if n == 0 {
                        *first_part.lock().unwrap() = call.name.clone();
                    }
                    n == 1
                })
                .hold_request(gate.clone()),
        );
    }
    let resuming = {
        let (c, ids) = (c.clone(), ids.clone());
        tokio::spawn(async move {
            c.multi_lock(names)
                .lease(secs(5))
                .resume(&ids)
                .await
                .map(|g| g.detach())
        })
    };
    cancel_at(&gate, resuming).await;
    tokio::time::sleep(ms(300)).await;
    let first_part = first_part.lock().unwrap().clone();
    assert!(names.contains(&first_part.as_str()), "{first_part:?}");
    let info = owner.rwlock(&first_part).inspect().await.expect("inspect");
    assert!(
        !info.holders.is_empty(),
        "a cancelled MultiLock::resume released the part it had renewed ({first_part}): \
         {info:?}"
    );
    for id in &ids {
        let _ = owner.release_hold(id).await;
    }
}

/// Attack: resume on handles with options a lock would refuse (a 1 ms lease, a zero
/// `max_hold`). The resume must be refused as invalid input without touching the hold (no
/// 1 ms renewal that would end it), on every resume entry point.
async fn resume_with_bad_options_leaves_the_hold(b: Backend) {
    let name = "resume-with-bad-options";
    let c = b.client().await;
    let other = b.client().await;
    let id = detached_mutex(&c, name, secs(10)).await;
    let outcomes = [
        (
            "lease 1ms",
            other
                .mutex(name)
                .lease(ms(1))
                .resume(&id)
                .await
                .map(|g| g.detach()),
        ),
        (
            "max_hold 0",
            other
                .mutex(name)
                .max_hold(Duration::ZERO)
                .resume(&id)
                .await
                .map(|g| g.detach()),
        ),
    ];
    tokio::time::sleep(ms(200)).await;
    let info = c.mutex(name).inspect().await.expect("inspect");
    assert!(
        info.holders
            .first()
            .is_some_and(|h| h.lease_remaining > secs(5)),
        "a resume with bad options changed the hold: {info:?} ({outcomes:?})"
    );
    for (what, outcome) in outcomes {
        let err = outcome.expect_err(what);
        assert!(err.is_invalid_input(), "{what}: {err}");
    }
    assert!(c.release_hold(&id).await.expect("release"));
}

/// Attack: the id is a capability. Its `Debug` form, and the errors of a malformed text
/// carrying the token, must never repeat the token (the 96 random bits after the shown
/// prefix).
#[test]
fn the_token_never_leaks_through_debug_or_errors() {
    let name = "token-never-leaks";
    let rt = support::time::current_thread();
    let id = rt.block_on(async {
        LockClient::in_memory()
            .mutex(name)
            .lock()
            .await
            .expect("lock")
            .detach()
    });
    let text = id.to_string();
    let token = text.split(':').nth(3).expect("token").to_owned();
    assert!(token.len() >= 32, "{token}");
    let secret = &token[16..];
    let debug = format!("{id:?}");
    assert!(!debug.contains(secret), "Debug shows the token: {debug}");
    for bad in [
        format!(" {text}"),
        format!("rlh1:mutex:01:{token}:token-never-leaks"),
        format!("rlh1:mutexx:1:{token}:token-never-leaks"),
        format!("rlh1:mutex:1:{token}:"),
        format!("rlh2:mutex:1:{token}:token-never-leaks"),
    ] {
        let err = bad.parse::<HoldId>().expect_err(&bad);
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains(secret),
            "the error repeats the token: {shown}"
        );
    }
}

/// Attack: two guards of one write hold in one client (a resume of the write id while the
/// write guard lives), then ONE of them downgraded to a read hold: the other, still a
/// `WriteGuard`, would say `is_held()` beside other readers. The second guard is refused
/// (`HoldInUse`); the one guard downgrades, and another client may then read beside it.
async fn downgrading_one_write_co_guard(b: Backend) {
    let name = "downgrade-one-write-co-guard";
    let c = b.client().await;
    let rw = c.rwlock(name).lease(secs(5));
    let first = rw.write().await.expect("write");
    let id = first.hold_id();
    let err = rw
        .resume_write(&id)
        .await
        .expect_err("a second guard of the write hold");
    assert!(err.is_hold_in_use(), "{err}");
    let read = downgraded(first).await;
    assert!(read.is_held());
    let other = b.client().await;
    let reader = other
        .rwlock(name)
        .try_read()
        .await
        .expect("a reader beside the downgraded hold");
    assert!(read.release().await.expect("release"));
    assert!(reader.release().await.expect("release"));
    let err = rw
        .resume_write(&id)
        .await
        .expect_err("downgraded, then released");
    assert!(err.is_hold_gone(), "{err}");
}

/// Attack: in ONE client without a guard of the hold, a resume of the id starts while a
/// `release_hold(id)` is on its way (its request held before it reaches the server). The
/// resume's renewal could land first and its guard trust a lease the release then ends: the
/// step by id reserves the hold, so the resume is refused (`HoldInUse`, nothing sent).
async fn resume_racing_a_release_by_id_in_one_client(b: Backend) {
    let name = "resume-racing-a-release-by-id";
    let owner = b.client().await;
    let id = detached_mutex(&owner, name, secs(5)).await;
    let (faulty, c) = faulty_client(&b).await;
    let gate = faulty.hold_requests(Rule::on(Op::Release).times(1));
    let releasing = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move { c.release_hold(&id).await })
    };
    gate.wait_entered(1).await;
    let resumed = c.mutex(name).resume(&id).await;
    let sent = faulty.count(Op::Extend);
    gate.open();
    assert!(join("release by id", releasing).await.expect("release"));
    assert!(lease_free(&owner, name).await);
    let err = resumed
        .map(|g| g.detach())
        .expect_err("a resume beside a release by id in the same client");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(sent, 0, "the refused resume sent a renewal");
}

/// Attack: in ONE client without a guard of the hold, a resume (long lease) starts while an
/// `extend_hold(id, short)` is on its way (held before it reaches the server). Applied after
/// the resume's renewal, the extend would leave the resumed guard trusting the long lease: the
/// resume is refused (`HoldInUse`, nothing sent) while the step by id is under way.
async fn resume_racing_an_extend_by_id_in_one_client(b: Backend) {
    let name = "resume-racing-an-extend-by-id";
    let owner = b.client().await;
    let id = detached_mutex(&owner, name, secs(10)).await;
    let (faulty, c) = faulty_client(&b).await;
    let gate = faulty.hold_extend(ms(800));
    let extending = spawn_extend_hold(&c, &id, ms(800));
    gate.wait_entered(1).await;
    let before = faulty.count(Op::Extend);
    let resumed = c.mutex(name).lease(secs(10)).resume(&id).await;
    let sent = faulty.count(Op::Extend);
    gate.open();
    assert!(join("extend by id", extending).await.expect("extend"));
    let err = resumed
        .map(|g| g.detach())
        .expect_err("a resume beside an extend by id in the same client");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(sent, before, "the refused resume sent a renewal");
    assert!(owner.release_hold(&id).await.expect("release"));
}

/// GUARANTEES, "A hand-over to another client is safe only once the detaching client is
/// quiet": A (lease 1 s) detaches while its automatic renewal is on its way (held before the
/// server, as a slow network would); B resumes with a lease no longer than A's, as the
/// guarantee advises; A's renewal then lands and sets the server's lease to 1 s from its
/// arrival, which is after B's send: B's guard stays honest, and nobody else is granted the
/// mutex while B says it holds it. (With a longer lease for B, A's late renewal ends the
/// server's hold first: the known limit that guarantee names.)
#[tokio::test]
async fn a_late_renewal_of_the_detaching_client_cannot_cut_a_shorter_resume() {
    late_renewal_beside_a_resume("handover-late-renewal-of-the-detaching-client", ms(1_000)).await;
}

/// A (lease 1 s) detaches its mutex while its automatic renewal is held before the server;
/// another client resumes the id with `resume_lease`; A's renewal then lands. For 1.5 s the
/// resumed guard stays honest (its trust within the server's lease) and a third client is
/// never granted the mutex beside it.
async fn late_renewal_beside_a_resume(name: &str, resume_lease: Duration) {
    let b = Backend::redis();
    let (fa, a) = support::faulty::faulty_client(&b).await;
    let resumer = b.client().await;
    let contender = b.client().await;
    let direct = b.client().await;
    let gate = fa.hold_extend(ms(1_000));
    let guard = a.lock_for(name, ms(1_000)).await;
    gate.entered_within(1, secs(20), "A's renewal reached the gate")
        .await;
    let id = guard.detach();
    let resumed = resumer
        .mutex(name)
        .lease(resume_lease)
        .resume(&id)
        .await
        .expect("B resumes");
    assert!(resumed.is_held());
    gate.open();
    let end = Instant::now() + ms(1_500);
    while Instant::now() < end {
        let trusted = resumed.valid_until();
        let info = direct.mutex(name).inspect().await.expect("inspect");
        assert_honest("B's resumed guard", trusted, &info, Instant::now());
        let other = contender.mutex(name).try_lock().await;
        assert!(
            !(other.is_ok() && resumed.is_held()),
            "a second holder beside B's resumed guard (server: {info:?})"
        );
        tokio::time::sleep(ms(50)).await;
    }
    assert!(resumed.is_held(), "B's guard is renewed throughout");
}

/// A client whose first request on its engine's connection is a resume: that connection
/// still lives on the engine's runtime, so dropping the guard and then the client (as `main`
/// returning does) sends the release at once, and the lock is free for the next client
/// without waiting for its 30 s lease.
#[tokio::test]
async fn a_resumed_hold_is_released_when_its_client_is_dropped() {
    let b = Backend::redis();
    let name = "resumed-hold-released-at-client-drop";
    let first = b.client().await;
    let id = first.lock_for(name, secs(30)).await.detach();
    drop(first);
    let resumer = b.client().await;
    let guard = resumer.resume_for(name, secs(30), &id).await;
    drop(guard);
    drop(resumer);
    let next = b.client().await;
    assert!(
        next.mutex(name).try_lock().await.is_ok(),
        "the resumed hold was released when its client was dropped"
    );
}

/// A (lease 1 s, auto-renewal) detaches its mutex guard while its automatic renewal is on its
/// way to the server (held before the server, as a slow network would). B, another client
/// whose handle has a 10 s lease, resumes the id: its guard trusts 10 s from its renewal's
/// send. A's renewal then arrives, asking for 1 s. B's guard keeps saying
/// `is_held()`: an automatic renewal never shortens a hold (`Store::renew`), so the server
/// keeps B's lease and no third client is granted the mutex beside B.
#[tokio::test]
async fn a_late_renewal_of_the_detaching_client_cannot_cut_a_longer_resume() {
    late_renewal_beside_a_resume("handover-late-renewal-beside-a-longer-resume", secs(10)).await;
}

/// A (lease 10 s) asks to `extend` its mutex to 1 s; the request is held on its way to the
/// server (a slow network) and A stops waiting for it, then detaches. B, another client,
/// resumes the id with a 10 s lease: its guard trusts 10 s from its renewal's send. A's
/// extend then lands. No request shortens a hold on the server (an `extend` keeps the later
/// of now + lease and the deadline held), so B's lease stands: for 2.5 s (well past the 1 s
/// the late extend asked for) B's guard stays honest and no third client is granted the
/// mutex beside it.
#[tokio::test]
async fn a_cancelled_shorter_extend_of_the_detaching_client_cannot_cut_a_resume() {
    let name = "a-cancelled-shorter-extend-beside-a-resume";
    let b = Backend::redis();
    let (fa, a) = support::faulty::faulty_client(&b).await;
    let resumer = b.client().await;
    let contender = b.client().await;
    let direct = b.client().await;
    let gate = fa.hold_extend(ms(1_000));
    let mut guard = a.mutex(name).lease(secs(10)).lock().await.expect("A locks");
    tokio::select! {
        answered = guard.extend(ms(1_000)) => panic!("the held extend was answered: {answered:?}"),
        entered = tokio::time::timeout(secs(20), gate.wait_entered(1)) => {
            entered.expect("A's extend reached the gate");
        }
    }
    let id = guard.detach();
    let resumed = resumer
        .mutex(name)
        .lease(secs(10))
        .resume(&id)
        .await
        .expect("B resumes");
    assert!(resumed.is_held());
    gate.open();
    let what = "B's resumed guard after A's late extend";
    support::late::watch_mutex(what, &resumed, &direct, &contender, name, ms(2_500)).await;
    assert!(resumed.is_held(), "B's guard is renewed throughout");
}

both_backends!(
    detach_then_resume_elsewhere,
    resume_of_a_gone_hold_grants_nothing,
    a_stale_id_never_touches_a_later_grant,
    wrong_kind_name_or_text_is_refused,
    extend_and_release_by_id,
    release_by_id_ends_every_guard,
    two_guards_of_one_hold,
    a_downgraded_write_id_is_gone,
    resumed_guard_renews_with_the_handles_options,
    max_hold_ends_renewals,
    resume_racing_the_release_of_the_same_hold,
    leadership_resumes_under_its_term,
    fair_rwlock_holds_resume,
    multi_lock_holds_resume,
    a_resumed_guard_trusts_from_the_send,
    resume_after_a_local_loss_and_extend_by_id,
    a_downgrade_with_a_second_write_guard_keeps_it_honest,
    concurrent_resumes_in_one_client_share_one_owner,
    release_by_id_racing_a_resume_in_one_client,
    cancelled_co_guard_resume_leaves_the_hold_as_before,
    co_guard_resume_keeps_the_handles_max_hold,
    max_hold_is_not_reset_by_an_extend,
    cancelled_resume_leaves_nothing_renewing,
    a_tampered_fence_is_refused,
    tampered_token_kind_version_are_refused,
    a_shorter_extend_by_id_lowers_every_co_guard,
    resume_racing_release_all,
    a_resumed_guard_never_renews_a_later_grant,
    tampered_permits_are_refused,
    extend_by_id_racing_a_resume_in_one_client,
    dropping_a_co_guard_makes_the_other_honest,
    resume_racing_the_drop_of_its_guard,
    dropping_the_lost_guard_after_a_resume,
    releasing_the_lost_guard_after_a_resume,
    an_expired_guard_stays_lost_after_a_resume,
    an_election_resume_cut_at_its_leader_read_keeps_the_leadership,
    cancelled_multi_resume_leaves_the_parts_held,
    resume_with_bad_options_leaves_the_hold,
    downgrading_one_write_co_guard,
    resume_racing_a_release_by_id_in_one_client,
    resume_racing_an_extend_by_id_in_one_client,
);

/// A guard's own release that gets no answer (its request held on the network past the
/// response timeout, as a slow link does) may still land at any time. The engine sends the
/// release again on its own connection and keeps the hold in use until that one is answered,
/// so a resume of the guard's id in the same client finds the hold in use or gone, never a
/// hold the late release then ends under a new guard while another client takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_no_answer_cannot_end_a_resume_in_its_client() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let server = support::RedisServer::start();
    let proxy = support::late::late_proxy::LateProxy::start(server.port()).await;
    let config = redis_locks::RedisConfig {
        response_timeout: ms(300),
        ..redis_locks::RedisConfig::default()
    };
    let a = LockClient::builder()
        .redis_config(config)
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let rival = LockClient::connect(&server.url()).await.expect("connect");
    support::late::warm_up(&a, "release-unanswered-warm-up").await;
    let name = "release-unanswered-then-resume";
    let guard = a.mutex(name).lease(secs(30)).lock().await.expect("lock");
    let id = guard.hold_id();
    // The first request naming the guard's token (its release) is held, with everything
    // after it on that connection.
    let (token, once) = (guard.token(), Arc::new(AtomicBool::new(false)));
    proxy.hold_when(move |chunk| chunk.contains(&token) && !once.swap(true, Ordering::SeqCst));
    let released = guard.release().await;
    assert!(
        released.is_err(),
        "the release's answer never came: {released:?}"
    );
    let resumed = a.mutex(name).lease(secs(30)).resume(&id).await;
    match &resumed {
        Err(e) => assert!(e.is_hold_in_use() || e.is_hold_gone(), "{e}"),
        Ok(g) => panic!(
            "resumed a hold whose release may still land: held {}",
            g.is_held()
        ),
    }
    proxy.deliver_all().await;
    let next = eventually("the lock is free for the next client", async || {
        rival.mutex(name).try_lock().await.is_ok()
    });
    next.await;
}

// ------------------------------------------------------------------------------------------
// Hold ids at their edges, through the public API on both backends: a detach while a step
// of the same hold is in flight, the id of a write hold downgraded since, `release_all`
// with resumed holds, resumes cancelled at every poll, hostile names and fences, multi-lock
// parts resumed alone, a guard resumed on a runtime that ended, the tokens' random bits.
// Each test names the documented claim it checks (tests/hold_ids.rs has the main cases).
// ------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// 1. A detach while a release or extend of the same hold is in flight in the same client.
// ---------------------------------------------------------------------------------------

/// in ONE client, `release_hold(id)` goes through the client's guard of the hold
/// (marking it lost and releasing); while that release is on its way (held before it reaches
/// the server), the guard is detached, and the id is resumed in the same client.
///
/// Claims checked: GUARANTEES "A hold whose release is in flight in the same
/// client stays registered until the release is answered, and a resume that finds it is
/// refused", and "a step by id and a resume of one hold never run side by side in one client
/// ... whatever the interleaving" (docs/decisions/hold-ids.md, Decisions 3b and 4). A resume
/// that goes ahead here renews the hold just before the release ends it: its guard says
/// `is_held()` for a hold the server no longer has.
async fn detach_during_a_release_by_id_then_resume_in_one_client(b: Backend) {
    let name = "edge-detach-vs-release-by-id";
    let (faulty, c) = faulty_client(&b).await;
    let guard = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let id = guard.hold_id();
    let gate = faulty.hold_requests(Rule::on(Op::Release).times(1));
    let releasing = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move { c.release_hold(&id).await })
    };
    gate.wait_entered(1).await;
    // The guard is lost now (its release is under way); its owner gives it up.
    assert!(!guard.is_held(), "release_hold did not mark the guard lost");
    let _ = guard.detach();
    let resumed = c.mutex(name).lease(secs(10)).resume(&id).await;
    gate.open();
    assert!(join("release_hold", releasing)
        .await
        .expect("release by id"));
    let other = b.client().await;
    assert!(
        lease_free(&other, name).await,
        "the release did not release"
    );
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(g) => {
            let trusted = g.valid_until().saturating_duration_since(Instant::now());
            assert!(
                !g.is_held(),
                "{}: a guard resumed in the client whose release_hold of the hold was in \
                 flight (its guard detached meanwhile) trusts {trusted:?} of a hold the \
                 release ended",
                b.kind
            );
        }
    }
}

/// in ONE client, `release_all()` is under way (its release of the hold held before it
/// reaches the server); the guard (lost by `release_all`) is detached and the id resumed in
/// the same client. Same claims as above (a releasing hold stays registered until its release
/// is answered; one lease owner per hold per client whatever the interleaving), and
/// `release_all`'s "Every guard of this client reports itself lost afterwards".
async fn detach_during_release_all_then_resume_in_one_client(b: Backend) {
    let name = "edge-detach-vs-release-all";
    let (faulty, c) = faulty_client(&b).await;
    let guard = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
    let gate = faulty.hold_requests(Rule::on(Op::Release).times(1));
    let releasing = {
        let c = c.clone();
        tokio::spawn(async move { c.release_all().await })
    };
    gate.wait_entered(1).await;
    assert!(!guard.is_held(), "release_all did not mark the guard lost");
    let id = guard.detach();
    let resumed = c.mutex(name).lease(secs(10)).resume(&id).await;
    gate.open();
    join("release_all", releasing).await.expect("release_all");
    let other = b.client().await;
    assert!(lease_free(&other, name).await, "release_all left the hold");
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(g) => {
            let trusted = g.valid_until().saturating_duration_since(Instant::now());
            assert!(
                !g.is_held(),
                "{}: a guard resumed during release_all (the lost guard detached meanwhile) \
                 trusts {trusted:?} of a hold release_all ended",
                b.kind
            );
        }
    }
}

/// in ONE client, `extend_hold(id, 800ms)` goes through the client's guard (lease
/// 10 s); while that extend is on its way (held before it reaches the server), the guard is
/// detached and the id resumed in the same client with a 10 s lease. The resume's renewal
/// reaches the server first, the short extend after it: the server's lease is 800 ms.
///
/// Claims checked: GUARANTEES "one lease owner (one trust, one renewal
/// schedule, one request at a time) per hold per client, whatever the interleaving ... a step
/// by id and a resume of one hold never run side by side in one client", and the honest
/// holder ("`valid_until()` never exceeds the server deadline of the hold").
async fn detach_during_an_extend_by_id_then_resume_in_one_client(b: Backend) {
    let name = "edge-detach-vs-extend-by-id";
    let (c, guard, id, gate, extending) = extend_at_gate(&b, name, ms(800)).await;
    let _ = guard.detach();
    let resumed = c
        .mutex(name)
        .lease(secs(10))
        .auto_renew(false)
        .resume(&id)
        .await;
    gate.open();
    let extended = join("extend_hold", extending).await;
    match resumed {
        Err(err) => assert!(err.is_hold_in_use(), "{err}"),
        Ok(g) => {
            // The extend was cut at its bound (outcome unknown), or answered.
            if let Ok(found) = extended {
                assert!(found, "the extend found nothing");
            }
            let before = g.valid_until();
            let info = c.mutex(name).inspect().await.expect("inspect");
            let what = format!(
                "{}: a guard resumed while an extend_hold of the hold ran in the same \
                 client (its guard detached meanwhile)",
                b.kind
            );
            assert_honest(&what, before, &info, Instant::now());
            drop(g);
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. A write id replayed after a downgrade (the fence's hold moved to a read hold).
// ---------------------------------------------------------------------------------------

/// A write hold's id, taken before the hold was downgraded, used in another client
/// (another process): the hold is a read hold now, so a resume of the write id is refused
/// as gone and an extend by it renews nothing, but a release by it ends the read hold (a
/// release by token ends the hold in whatever form; README, "Handing a lock to another
/// process"). The read guard in the first client learns it at its next renewal, as any
/// guard of a hold released by another client does.
async fn a_pre_downgrade_write_id_resumes_and_extends_nothing_but_releases(b: Backend) {
    let name = "edge-downgraded-write-id";
    let c = b.client().await;
    let other = b.client().await;
    let rw = c.rwlock(name).lease(secs(10));
    let w = rw.write().await.expect("write");
    let write_id = w.hold_id();
    let read = downgraded(w).await;
    let err = other
        .rwlock(name)
        .resume_write(&write_id)
        .await
        .expect_err("the write id is gone");
    assert!(err.is_hold_gone(), "{err}");
    let extended = other
        .extend_hold(&write_id, secs(60))
        .await
        .expect("extend by id");
    assert!(
        !extended,
        "{}: extend_hold by a downgraded write id renewed the hold",
        b.kind
    );
    let info = other.rwlock(name).inspect().await.expect("inspect");
    let remaining: Vec<_> = info.holders.iter().map(|h| h.lease_remaining).collect();
    assert!(
        !remaining.is_empty() && remaining.iter().all(|r| *r <= secs(10)),
        "{}: the read hold's lease after extend_hold(write id, 60 s): {remaining:?}",
        b.kind
    );
    let released = other.release_hold(&write_id).await.expect("release by id");
    let info = other.rwlock(name).inspect().await.expect("inspect");
    assert!(
        released && info.holders.is_empty(),
        "{}: release_hold by the write id answered {released}, holders now {:?}",
        b.kind,
        info.holders
    );
    // Learned at the read guard's next renewal (10 s lease: within ~4 s).
    eventually("the read guard learns the release", async || {
        !read.is_held()
    })
    .await;
}

/// The same pre-downgrade write id in the client that holds the read guard the downgrade
/// made: `extend_hold` answers `Ok(false)` and sends nothing (no hold of that kind), and
/// `release_hold` goes through the read guard (marked lost first) and ends the hold.
async fn a_pre_downgrade_write_id_in_the_guards_own_client(b: Backend) {
    let name = "edge-downgraded-write-id-own-client";
    let c = b.client().await;
    let rw = c.rwlock(name).lease(secs(10));
    let w = rw.write().await.expect("write");
    let write_id = w.hold_id();
    let read = downgraded(w).await;
    let extended = c
        .extend_hold(&write_id, secs(60))
        .await
        .expect("extend by id");
    assert!(
        !extended && read.is_held(),
        "{}: extended {extended}, read held {}",
        b.kind,
        read.is_held()
    );
    let released = c.release_hold(&write_id).await.expect("release by id");
    let info = rw.inspect().await.expect("inspect");
    assert!(
        released && !read.is_held() && info.holders.is_empty(),
        "{}: release_hold(write id) answered {released}; read guard held {}; holders {:?}",
        b.kind,
        read.is_held(),
        info.holders
    );
}

// ---------------------------------------------------------------------------------------
// 4. release_all and resumed holds.
// ---------------------------------------------------------------------------------------

/// `release_all` counts and releases holds that were resumed
/// (through a handle and through `LockClient::resume`) as it does granted ones, and marks
/// their guards lost; their ids are gone afterwards.
async fn release_all_counts_resumed_holds(b: Backend) {
    let owner = b.client().await;
    let c = b.client().await;
    let a = detached_mutex(&owner, "edge-ra-resumed-a", secs(10)).await;
    let s = owner
        .semaphore("edge-ra-resumed-s", 3)
        .acquire_many(2)
        .await
        .expect("acquire")
        .detach();
    let ga = c
        .mutex("edge-ra-resumed-a")
        .resume(&a)
        .await
        .expect("resume");
    let gs: redis_locks::Guard<redis_locks::kind::Semaphore> = c.resume(&s).await.expect("resume");
    let granted = c.fair_lock("edge-ra-granted").lock().await.expect("lock");
    assert_eq!(c.release_all().await.expect("release_all"), 3);
    assert!(!ga.is_held() && !gs.is_held() && !granted.is_held());
    assert!(lease_free(&owner, "edge-ra-resumed-a").await);
    let info = owner
        .semaphore("edge-ra-resumed-s", 3)
        .inspect()
        .await
        .expect("inspect");
    assert!(info.holders.is_empty(), "{info:?}");
    assert!(!owner.release_hold(&a).await.expect("release"));
    assert!(!ga.release().await.expect("release after release_all"));
}

// ---------------------------------------------------------------------------------------
// 5. Cancellation at every await.
// ---------------------------------------------------------------------------------------

/// a resume of each single-lock kind, through a store that
/// answers every call 30 ms late, is dropped after 1, 2, ... polls (10 ms apart) until it
/// completes. After every cancel: the hold is still on the server (nothing released), no
/// reservation is left behind (a resume in the same client then works, never `HoldInUse`),
/// and the id's fence is the server's.
async fn a_resume_cancelled_at_every_poll_leaves_the_hold(b: Backend) {
    let (faulty, c) = faulty_client(&b).await;
    faulty.add(Rule::on(Op::Extend).delay_reply(ms(30)));
    faulty.add(Rule::on(Op::Inspect).delay_reply(ms(30)));
    let owner = b.client().await;
    for kind in ["mutex", "read", "write", "fair", "sem"] {
        let name = format!("edge-cancel-sweep-{kind}");
        let mut id = detached(&owner, kind, &name).await;
        let mut completed = false;
        for polls in 1..40 {
            let done = match kind {
                "mutex" => completes_within(polls, c.mutex(&name).resume(&id)).await,
                "read" => completes_within(polls, c.rwlock(&name).resume_read(&id)).await,
                "write" => completes_within(polls, c.rwlock(&name).resume_write(&id)).await,
                "fair" => completes_within(polls, c.fair_lock(&name).resume(&id)).await,
                _ => completes_within(polls, c.semaphore(&name, 3).resume(&id)).await,
            };
            // A completed resume's guard was dropped inside the sweep (released): take it
            // again to go on; a cancelled one must have left the hold as it was.
            let info = inspect(&owner, kind, &name).await;
            if done {
                completed = true;
                break;
            }
            assert!(
                !info.holders.is_empty(),
                "{} {kind}: a resume cancelled after {polls} polls released the hold",
                b.kind
            );
            // No reservation left: the same client resumes it now, then detaches again.
            let again = resume_detached(&c, kind, &id).await;
            id = again.unwrap_or_else(|e| {
                panic!(
                    "{} {kind}: after a resume cancelled at poll {polls}, a resume in the \
                     same client failed: {e}",
                    b.kind
                )
            });
        }
        assert!(completed, "{kind}: the resume never completed");
    }
}

/// `MultiLock::resume` and `Election::resume`, through a store
/// that answers 30 ms late, dropped after 1, 2, ... polls: every part stays held (detached,
/// not released) and no part stays reserved (the same client resumes them all right after).
async fn multi_and_election_resumes_cancelled_at_every_poll(b: Backend) {
    let (faulty, c) = faulty_client(&b).await;
    for op in [Op::Extend, Op::Inspect, Op::Leader, Op::Proclaim] {
        faulty.add(Rule::on(op).delay_reply(ms(30)));
    }
    let owner = b.client().await;
    let names = ["edge-cms-a", "edge-cms-b", "edge-cms-c"];
    let mut ids = owner.multi_lock(names).lock().await.expect("lock").detach();
    for polls in 1..40 {
        if completes_within(polls, c.multi_lock(names).resume(&ids)).await {
            break;
        }
        for n in names {
            assert!(
                !lease_free(&owner, n).await,
                "{}: a multi-lock resume cancelled after {polls} polls released part {n}",
                b.kind
            );
        }
        ids = c
            .multi_lock(names)
            .resume(&ids)
            .await
            .unwrap_or_else(|e| panic!("{}: after a cancel at poll {polls}: {e}", b.kind))
            .detach();
    }
    let election = "edge-cms-election";
    let mut id = owner.lead(election, "v1").await.detach();
    for polls in 1..40 {
        if completes_within(polls, c.election(election).resume(&id)).await {
            break;
        }
        let leader = owner.election(election).leader().await.expect("leader");
        assert_eq!(
            leader.map(|l| l.value),
            Some("v1".to_owned()),
            "{}: an election resume cancelled after {polls} polls changed the leadership",
            b.kind
        );
        let l = c
            .election(election)
            .resume(&id)
            .await
            .unwrap_or_else(|e| panic!("{}: after a cancel at poll {polls}: {e}", b.kind));
        assert_eq!(l.value(), "v1");
        id = l.detach();
    }
}

// ---------------------------------------------------------------------------------------
// 6. Hostile ids.
// ---------------------------------------------------------------------------------------

/// ids of names with ':' (and an embedded `rlh1:` id), unicode,
/// braces, and the longest name allowed round-trip through text and resume in another
/// client; an oversized name or token is refused by the parser; a fence of `u64::MAX` on an
/// exclusive id is refused (`MalformedHoldId`) and leaves the hold held.
async fn hostile_names_and_fences(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let long = "x".repeat(redis_locks::MAX_NAME_LEN);
    let names = [
        "a:b:c".to_owned(),
        "rlh1:mutex:1:abc:inner".to_owned(),
        "zürich-✓-日本".to_owned(),
        "{tag}:x".to_owned(),
        long.clone(),
    ];
    for name in &names {
        let id = detached_mutex(&c, name, secs(10)).await;
        let text = id.to_string();
        let parsed: HoldId = text.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(parsed, id);
        assert_eq!(parsed.name(), name);
        let g = other
            .mutex(name)
            .resume(&parsed)
            .await
            .unwrap_or_else(|e| panic!("{}: {name}: {e}", b.kind));
        assert_eq!(g.fencing_token(), id.fencing_token());
        assert!(g.release().await.expect("release"));
    }
    let id = detached_mutex(&c, "edge-hostile", secs(10)).await;
    let text = id.to_string();
    let too_long = format!("{text}{}", "y".repeat(redis_locks::MAX_NAME_LEN));
    assert!(
        too_long.parse::<HoldId>().is_err(),
        "an oversized name parsed"
    );
    let token = text.split(':').nth(3).expect("token").to_owned();
    let long_token = text.replacen(&token, &"t".repeat(65), 1);
    assert!(
        long_token.parse::<HoldId>().is_err(),
        "a 65-char token parsed"
    );
    let max_fence: HoldId = text
        .replacen(
            &format!(":{}:", id.fencing_token()),
            &format!(":{}:", u64::MAX),
            1,
        )
        .parse()
        .expect("u64::MAX parses");
    let err = other
        .mutex("edge-hostile")
        .resume(&max_fence)
        .await
        .expect_err("an altered fence");
    assert!(
        matches!(err, redis_locks::Error::MalformedHoldId { .. }),
        "{}: {err}",
        b.kind
    );
    assert!(
        !lease_free(&other, "edge-hostile").await,
        "the hold was ended"
    );
    // The refused resume left no reservation: the genuine id resumes in the same client.
    let g = other
        .mutex("edge-hostile")
        .resume(&id)
        .await
        .expect("resume");
    assert!(g.release().await.expect("release"));
}

/// every part of a multi-lock resumed ALONE in another client
/// (write parts through `resume_write`, read parts through `resume_read`): the fence check of a
/// write part compares with the part's own fence, so a genuine part id is never refused as
/// altered; and a part of the reader-preference multi-lock is refused by a writer-preference
/// handle.
async fn multi_lock_parts_resume_alone(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let ids = c
        .multi_rwlock(["edge-parts-w1", "edge-parts-w2"], ["edge-parts-r"])
        .lock()
        .await
        .expect("lock")
        .detach();
    for id in &ids {
        let rw = other.rwlock(id.name());
        let fence = if id.kind().starts_with("write") {
            let g = rw.resume_write(id).await;
            let g = g.unwrap_or_else(|e| panic!("{}: {}: {e}", b.kind, id.kind()));
            let f = g.fencing_token();
            assert!(g.release().await.expect("release"));
            f
        } else {
            let g = rw.resume_read(id).await.expect("resume read part");
            let f = g.fencing_token();
            assert!(g.release().await.expect("release"));
            f
        };
        assert_eq!(fence, id.fencing_token(), "{}", id.name());
    }
    let ids = c
        .multi_rwlock(["edge-parts-w1"], ["edge-parts-r"])
        .preference(Preference::Reader)
        .lock()
        .await
        .expect("lock")
        .detach();
    let err = other
        .rwlock("edge-parts-w1")
        .resume_write(&ids[0])
        .await
        .expect_err("preference");
    assert!(err.is_invalid_input(), "{err}");
    for id in &ids {
        assert!(other.release_hold(id).await.expect("release"));
    }
}

/// tokens are capabilities with 96 random bits (README: "its
/// token carries 96 bits from the OS generator"; docs/decisions/hold-ids.md, Decision 5: 16
/// characters of `[A-Za-z0-9_-]` after the 16 shown). Over 1024 ids of one process, every
/// one of the 16 secret positions takes nearly all 64 symbols (no position fixed, e.g. by a
/// uuid's version or variant bits), no two secret parts are equal, and the shown prefix
/// (`Debug`) never includes a secret character.
#[tokio::test(flavor = "current_thread")]
async fn token_secret_parts_carry_96_random_bits() {
    let c = LockClient::in_memory();
    let mut secrets = std::collections::HashSet::new();
    let mut seen: Vec<std::collections::HashSet<char>> = vec![Default::default(); 16];
    for _ in 0..1024 {
        let g = c.mutex("edge-tokens").lock().await.expect("lock");
        let id = g.hold_id();
        let text = id.to_string();
        let token = text.split(':').nth(3).expect("token").to_owned();
        // A generated token is 32 characters; a holder label may follow it (`-<label>`).
        assert!(token.len() >= 32, "{token}");
        let secret = &token[16..32];
        assert!(
            !format!("{id:?}").contains(&token[..17]),
            "Debug shows a secret character"
        );
        for (i, ch) in secret.chars().enumerate() {
            seen[i].insert(ch);
        }
        assert!(secrets.insert(secret.to_owned()), "a secret part repeated");
        assert!(g.release().await.expect("release"));
    }
    for (i, chars) in seen.iter().enumerate() {
        assert!(
            chars.len() >= 56,
            "secret position {i} took only {} of 64 symbols over 1024 tokens: not 6 random bits",
            chars.len()
        );
    }
}

// ---------------------------------------------------------------------------------------
// 7. Runtimes.
// ---------------------------------------------------------------------------------------

/// a guard resumed on a helper runtime that then shuts down
/// still counts as this client's guard of the hold (a resume in the same client is refused,
/// `HoldInUse`); dropped on the main runtime, its release runs there and frees the lock, and
/// the id is gone afterwards.
#[test]
fn a_guard_resumed_on_a_dead_runtime_is_released_from_another() {
    for b in [Backend::memory(), Backend::redis()] {
        // Multi-threaded, so the clients' connections (made here) are driven while the
        // helper runtime blocks this thread.
        let main = support::time::multi_thread(1);
        let (owner, c, id) = main.block_on(async {
            let owner = b.client().await;
            let c = b.client().await;
            let id = detached_mutex(&owner, "edge-dead-runtime", secs(10)).await;
            (owner, c, id)
        });
        let helper = support::time::multi_thread(1);
        let g = helper.block_on(async { c.resume_for("edge-dead-runtime", secs(10), &id).await });
        helper.shutdown_timeout(ms(500));
        main.block_on(async {
            let err = c
                .mutex("edge-dead-runtime")
                .resume(&id)
                .await
                .expect_err("a second guard");
            assert!(err.is_hold_in_use(), "{}: {err}", b.kind);
            drop(g);
            eventually("the drop's release lands", async || {
                lease_free(&owner, "edge-dead-runtime").await
            })
            .await;
            // The server freed the lock before c's engine had the release's reply: until it
            // has, the hold is still c's (`HoldInUse`, nothing sent); then it is gone.
            let give_up = Instant::now() + secs(5);
            let err = loop {
                let err = c
                    .mutex("edge-dead-runtime")
                    .resume(&id)
                    .await
                    .expect_err("released");
                if !err.is_hold_in_use() || Instant::now() > give_up {
                    break err;
                }
                tokio::time::sleep(ms(5)).await;
            };
            assert!(err.is_hold_gone(), "{}: {err}", b.kind);
        });
    }
}

/// Keeps `server_deadline` and `EVENTUALLY` in use across edits of this file.
#[allow(dead_code)]
fn _uses(info: &redis_locks::LockInfo) -> (Option<Instant>, Duration) {
    (server_deadline(info, Instant::now()), EVENTUALLY)
}

both_backends!(
    detach_during_a_release_by_id_then_resume_in_one_client,
    detach_during_release_all_then_resume_in_one_client,
    detach_during_an_extend_by_id_then_resume_in_one_client,
    a_pre_downgrade_write_id_resumes_and_extends_nothing_but_releases,
    a_pre_downgrade_write_id_in_the_guards_own_client,
    release_all_counts_resumed_holds,
    a_resume_cancelled_at_every_poll_leaves_the_hold,
    multi_and_election_resumes_cancelled_at_every_poll,
    hostile_names_and_fences,
    multi_lock_parts_resume_alone,
);

// ------------------------------------------------------------------------------------------
// A resume after a detach in the same client, with something of the hold in flight: a
// `release_all` whose releases are not sent yet (Mutex, multi-lock, election), a renewal
// cancelled by the detach on an idle runtime, a step two resumes wait on, renewals sent on
// another thread; and the registry's purge of entries left by detached guards. Through the
// public API on both backends; each test names the claim it checks.
// ------------------------------------------------------------------------------------------

/// Runs `f` to completion on a current-thread runtime of its own, on a blocking thread (so a
/// task spawned by `f` runs only when `f` yields).
async fn on_current_thread<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        let out = rt.block_on(f());
        drop(rt);
        out
    })
    .await
    .expect("current-thread runtime")
}

// ---------------------------------------------------------------------------------------
// A release_all whose releases are not sent yet, then a detach and a resume.
// ---------------------------------------------------------------------------------------

/// `c.release_all()` polled once: it has given its holds up and spawned their releases, which
/// `rule` holds at the returned gate of `f` (`c`'s store) before the server.
async fn release_all_unsent<'a>(
    c: &'a LockClient,
    f: &Faulty,
    rule: Rule,
) -> (
    Arc<Gate>,
    Pin<Box<impl Future<Output = redis_locks::Result<usize>> + 'a>>,
) {
    let gate = f.hold_requests(rule);
    let mut all = Box::pin(c.release_all());
    assert!(
        !poll_once(&mut all).await,
        "release_all done at its first poll"
    );
    (gate, all)
}

/// Claim: a resumed guard (same client, after a detach) never trusts past the server's lease,
/// whatever was in flight at the detach; a `release_all` leaves a hold detached before it.
/// Here `release_all()` is polled once on a current-thread runtime (it has given the hold up and
/// spawned its release, which has not run), then the guard is detached and the id resumed in the
/// same client (10 s) while that release is held at a gate: the resume must wait for it (and
/// find the hold gone) or the release must not be sent; never a guard of a released hold.
async fn a_resume_after_a_detach_beside_a_release_all_not_yet_sent(b: Backend) {
    let name = "detach-ra-unsent";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let kind = b.kind;
    let (resumed_ok, honest, n) = on_current_thread(move || async move {
        let guard = c.mutex(name).lease(secs(10)).lock().await.expect("lock");
        let (gate, all) = release_all_unsent(&c, &f, Rule::on(Op::Release).times(1)).await;
        let id = guard.detach();
        let what = "resume returns";
        let resumed = in_time(ms(10_000), what, c.mutex(name).lease(secs(10)).resume(&id)).await;
        gate.open();
        let n = within_ok(ms(10_000), "release_all returns", all).await;
        match resumed {
            Err(err) => {
                assert!(err.is_hold_in_use(), "{err}");
                (false, None, n)
            }
            Ok(g) => {
                let before = g.valid_until();
                let info = other.mutex(name).inspect().await.expect("inspect");
                let answered = Instant::now();
                let honest = trusts_past(before, &info, answered).map(|over| {
                    format!(
                        "[{kind}] a guard resumed after a detach beside a release_all whose \
                         release was spawned but not yet sent (release_all counted {n}) trusts \
                         {over:?} past the server's lease ({} holder(s))",
                        info.holders.len()
                    )
                });
                drop(g.detach());
                (true, honest, n)
            }
        }
    })
    .await;
    if let Some(msg) = honest {
        panic!("{msg}");
    }
    let _ = (resumed_ok, n);
}
/// Claim: the same for `MultiGuard::detach` and `MultiLock::resume`: `release_all` polled once
/// (its releases of both parts spawned, not sent), the multi-guard detached and resumed in the
/// same client: no resumed part trusts past the server's lease.
async fn a_multi_resume_after_a_detach_beside_a_release_all_not_yet_sent(b: Backend) {
    let names = ["detach-ra-multi-a", "detach-ra-multi-b"];
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let kind = b.kind;
    let verdict = on_current_thread(move || async move {
        let guard = c
            .multi_lock(names)
            .lease(secs(10))
            .lock()
            .await
            .expect("lock");
        let (gate, all) = release_all_unsent(&c, &f, Rule::on(Op::Release)).await;
        let ids = guard.detach();
        let what = "resume returns";
        let resumed = in_time(
            ms(10_000),
            what,
            c.multi_lock(names).lease(secs(10)).resume(&ids),
        )
        .await;
        gate.open();
        let n = within_ok(ms(10_000), "release_all returns", all).await;
        let g = match resumed {
            Err(err) => {
                assert!(err.is_hold_in_use(), "{err}");
                return None;
            }
            Ok(g) => g,
        };
        let before = g.valid_until();
        let mut verdict = None;
        for name in names {
            let info = other.mutex(name).inspect().await.expect("inspect");
            if let Some(over) = trusts_past(before, &info, Instant::now()) {
                verdict = Some(format!(
                    "[{kind}] a multi-guard resumed after a detach beside a release_all whose \
                     releases were spawned but not yet sent (release_all counted {n}) trusts \
                     {over:?} past the server's lease of part {name} ({} holder(s))",
                    info.holders.len()
                ));
            }
        }
        drop(g.detach());
        verdict
    })
    .await;
    if let Some(msg) = verdict {
        panic!("{msg}");
    }
}
/// Claim: the same for `Leadership::detach` and `Election::resume`: a leadership resumed after
/// a detach beside a `release_all` not sent yet never leads (trusts) past the server's lease.
async fn an_election_resume_after_a_detach_beside_a_release_all_not_yet_sent(b: Backend) {
    let name = "detach-ra-election";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let kind = b.kind;
    let verdict = on_current_thread(move || async move {
        let leadership = c.campaign_for(name, secs(10), "v1").await;
        let (gate, all) = release_all_unsent(&c, &f, Rule::on(Op::Release)).await;
        let id = leadership.detach();
        let what = "resume returns";
        let resumed = in_time(
            ms(10_000),
            what,
            c.election(name).lease(secs(10)).resume(&id),
        )
        .await;
        gate.open();
        let n = within_ok(ms(10_000), "release_all returns", all).await;
        let l = match resumed {
            Err(err) => {
                assert!(err.is_hold_in_use(), "{err}");
                return None;
            }
            Ok(l) => l,
        };
        let trusted = l.valid_until().saturating_duration_since(Instant::now());
        let leader = other.election(name).leader().await.expect("leader");
        let verdict = (l.is_held() && leader.is_none()).then(|| {
            format!(
                "[{kind}] a leadership resumed after a detach beside a release_all whose \
                 release was spawned but not yet sent (release_all counted {n}) says it leads \
                 (trusts {trusted:?}) while the server has no leader"
            )
        });
        drop(l.detach());
        verdict
    })
    .await;
    if let Some(msg) = verdict {
        panic!("{msg}");
    }
}
// ---------------------------------------------------------------------------------------
// A renewal cancelled by the detach, waiting for its turn on an idle runtime.
// ---------------------------------------------------------------------------------------

/// Claim: once nothing sent for a detached hold is in flight, a resume of its id in the same
/// client goes ahead (no `HoldInUse`). The hold is granted on current-thread runtime A (its
/// renewals run there); an `extend_hold` of it holds the hold's turn for requests, its request
/// held before the server; a renewal falls due on A and waits for its turn; A goes idle (its
/// `block_on` returned, as a sync wrapper's runtime between calls). The guard is detached (the
/// renewal, cancelled, never sent) and the extend is let through and answered: the resume must
/// not wait for the renewal parked on A.
async fn a_renewal_aborted_by_the_detach_on_an_idle_runtime_leaves_no_hold_in_use(b: Backend) {
    let name = "detach-idle-renewal";
    let (f, c) = faulty_client(&b).await;
    let gate = f.hold_extend(secs(5));
    let main = tokio::runtime::Handle::current();
    let (c2, gate2) = (c.clone(), gate.clone());
    let (idle, guard, extending) = tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        let (guard, extending) = rt.block_on(async move {
            let guard = c2.mutex(name).lease(secs(3)).lock().await.expect("lock");
            let id = guard.hold_id();
            let extending = main.spawn(async move { c2.extend_hold(&id, secs(5)).await });
            at_gate(&gate2, 1, "extend at the gate").await;
            // The renewal falls due (a third of 3 s after the grant) and queues behind it.
            tokio::time::sleep(ms(1_500)).await;
            (guard, extending)
        });
        (rt, guard, extending)
    })
    .await
    .expect("runtime A");
    let id = guard.detach();
    gate.open();
    assert!(
        join("extend_hold", extending).await.expect("extend_hold"),
        "the extend found the hold"
    );
    let started = Instant::now();
    let what = "resume returns";
    let resumed = in_time(ms(20_000), what, c.mutex(name).lease(secs(10)).resume(&id)).await;
    let took = started.elapsed();
    support::time::drop_runtime(idle).await;
    match resumed {
        Ok(g) => drop(g.detach()),
        Err(err) => panic!(
            "[{}] a resume after a detach, with the extend in flight at the detach answered \
             and the renewal aborted by it never sent, was refused after {took:?}: {err} (the \
             aborted renewal was parked on runtime A, idle, queued for the hold's request lock)",
            b.kind
        ),
    }
}
// ---------------------------------------------------------------------------------------
// Two resumes waiting on one detached entry; the registry purge; renewals on another thread.
// ---------------------------------------------------------------------------------------

/// Claim: two concurrent resumes of one id after a detach give one guard (the other
/// `HoldInUse`), and neither waits past the bound once the step in flight at the detach ends.
/// Both start while an `extend_hold` of the hold is held before the server, then it is let
/// through.
async fn two_resumes_waiting_on_one_detached_entry_give_one_guard(b: Backend) {
    let name = "detach-two-resumes";
    let (c, guard, id, gate, extending) = extend_at_gate(&b, name, secs(5)).await;
    let _ = guard.detach();
    let resume = |c: LockClient, id: redis_locks::HoldId| {
        tokio::spawn(async move { c.mutex(name).lease(secs(10)).resume(&id).await })
    };
    let (r1, r2) = (resume(c.clone(), id.clone()), resume(c.clone(), id.clone()));
    tokio::time::sleep(ms(200)).await;
    gate.open();
    let opened = Instant::now();
    let _ = join("extend_hold", extending).await;
    let (a, b2) = (join("resume 1", r1).await, join("resume 2", r2).await);
    let took = opened.elapsed();
    let won = [&a, &b2].iter().filter(|r| r.is_ok()).count();
    let in_use = [&a, &b2]
        .iter()
        .filter(|r| r.as_ref().err().is_some_and(|e| e.is_hold_in_use()))
        .count();
    assert!(
        won == 1 && in_use == 1 && took < ms(3_000),
        "[{}] two resumes waiting on one detached entry: {won} guard(s), {in_use} HoldInUse, \
         {took:?} after the step ended ({:?} / {:?})",
        b.kind,
        a.as_ref().map(|_| "guard"),
        b2.as_ref().map(|_| "guard"),
    );
}
/// Claim: the registry's purge of entries left by detached guards never drops a live one:
/// holds, detaches (some with a step in flight, so their entries stay) and resumes in one client
/// push the registry past 64, 128 and 256 entries; afterwards a resume of every live guard's id
/// in the same client is still refused (`HoldInUse`): no second guard of a hold is ever made.
async fn the_registry_purge_never_drops_a_live_entry(b: Backend) {
    let c = b.client().await;
    let mut live = Vec::new();
    let mut detached = Vec::new();
    for i in 0..300 {
        let name = format!("detach-purge-{i}");
        let g = c.mutex(&name).lease(secs(30)).lock().await.expect("lock");
        if i % 3 == 0 {
            detached.push(g.detach());
        } else {
            live.push(g);
        }
        if i % 7 == 0
            && let Some(id) = detached.pop()
        {
            live.push(c.resume_for(id.name(), secs(30), &id).await);
        }
    }
    for g in &live {
        let id = g.hold_id();
        match c.mutex(id.name()).resume(&id).await {
            Err(e) if e.is_hold_in_use() => {}
            other => panic!(
                "[{}] a second guard of {} in the client that has a live guard of it: {:?}",
                b.kind,
                id.name(),
                other.map(|_| "guard")
            ),
        }
    }
    assert_eq!(c.release_all().await.expect("release_all"), live.len());
    for id in detached {
        assert!(c.release_hold(&id).await.expect("release_hold"));
    }
}
/// Claim: a resumed guard never trusts past the server's lease, whatever was in flight at the
/// detach, on the multi-threaded runtime: a hold with a short lease (150 ms, renewed every 50 ms)
/// is detached on one worker around the instant its renewal is sent on another, and resumed at
/// once with a 2 s lease; the resumed guard is checked against the server (a 150 ms renewal
/// applied after the resume would shorten it), 120 rounds. On a loaded machine a 150 ms lease
/// can lapse before its renewal is answered: such a round's resume finds the hold gone (an
/// honest answer, and nothing is granted), and most rounds must still resume.
async fn detach_while_a_renewal_is_sent_then_resume_hammered(b: Backend) {
    let c = b.client().await;
    let name = "detach-hammer";
    let mut resumed = 0;
    for round in 0..120u64 {
        let g = c.mutex(name).lease(ms(150)).lock().await.expect("lock");
        // Around the first renewal (50 ms after the grant), a little earlier or later.
        tokio::time::sleep(ms(46 + round % 9)).await;
        let id = tokio::spawn(async move { g.detach() })
            .await
            .expect("detach");
        let r = c
            .mutex(name)
            .lease(secs(2))
            .auto_renew(false)
            .resume(&id)
            .await;
        let g = match r {
            Ok(g) => g,
            Err(e) if e.is_hold_gone() => {
                assert!(lease_free(&c, name).await, "gone, yet held");
                continue;
            }
            Err(e) => panic!("[{}] round {round}: {e}", b.kind),
        };
        resumed += 1;
        tokio::time::sleep(ms(30)).await;
        let before = g.valid_until();
        let info = c.mutex(name).inspect().await.expect("inspect");
        if let Some(over) = trusts_past(before, &info, Instant::now()) {
            panic!(
                "[{}] round {round}: a guard resumed right after a detach beside a renewal \
                 trusts {over:?} past the server's lease",
                b.kind
            );
        }
        assert!(g.release().await.expect("release"));
    }
    assert!(
        resumed >= 60,
        "[{}] only {resumed} of 120 rounds resumed",
        b.kind
    );
}

both_backends!(
    a_resume_after_a_detach_beside_a_release_all_not_yet_sent,
    a_multi_resume_after_a_detach_beside_a_release_all_not_yet_sent,
    an_election_resume_after_a_detach_beside_a_release_all_not_yet_sent,
    a_renewal_aborted_by_the_detach_on_an_idle_runtime_leaves_no_hold_in_use,
    two_resumes_waiting_on_one_detached_entry_give_one_guard,
    the_registry_purge_never_drops_a_live_entry,
    detach_while_a_renewal_is_sent_then_resume_hammered,
);
