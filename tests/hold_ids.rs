//! Holds that cross process boundaries: hold ids, detach, resume, and release or extend by
//! id, for every single-lock primitive, on a real redis-server and on the in-memory store.
//! Separate clients stand for separate processes here (each has its own connection and
//! renewals); `tests/examples.rs` runs the handover across real OS processes.

mod support;

use redis_locks::{Error, HoldId, LockClient, Preference};
use tokio::time::Instant;

use support::backend::{eventually, join, Backend, EVENTUALLY};
use support::faulty::{Faulty, Gate, Op, Rule};
use support::honest::assert_honest;
use support::time::{ms, secs};
use support::waits::lease_free;

/// Takes a hold of each primitive on `name`, returns its id after detaching the guard.
async fn detached(c: &LockClient, kind: &str, name: &str) -> HoldId {
    match kind {
        "mutex" => c.mutex(name).lock().await.expect("lock").detach(),
        "read" => c.rwlock(name).read().await.expect("read").detach(),
        "write" => c.rwlock(name).write().await.expect("write").detach(),
        "fair" => c.fair_lock(name).lock().await.expect("lock").detach(),
        "sem" => c
            .semaphore(name, 3)
            .acquire_many(3)
            .await
            .expect("acquire")
            .detach(),
        other => unreachable!("{other}"),
    }
}

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
            let info = match kind {
                "fair" => c.fair_lock(name).inspect().await,
                "sem" => c.semaphore(name, 3).inspect().await,
                "mutex" => c.mutex(name).inspect().await,
                _ => c.rwlock(name).inspect().await,
            }
            .expect("inspect");
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

both_backends!(detach_then_resume_elsewhere);

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

both_backends!(resume_of_a_gone_hold_grants_nothing);

/// Resumes `id` on a handle of `kind`, discarding the guard kind.
async fn resume_kind(c: &LockClient, kind: &str, id: &HoldId) -> Result<u64, Error> {
    let name = id.name();
    match kind {
        "mutex" => c.mutex(name).resume(id).await.map(|g| g.fencing_token()),
        "read" => c
            .rwlock(name)
            .resume_read(id)
            .await
            .map(|g| g.fencing_token()),
        "write" => c
            .rwlock(name)
            .resume_write(id)
            .await
            .map(|g| g.fencing_token()),
        "fair" => c
            .fair_lock(name)
            .resume(id)
            .await
            .map(|g| g.fencing_token()),
        "sem" => c
            .semaphore(name, 3)
            .resume(id)
            .await
            .map(|g| g.fencing_token()),
        other => unreachable!("{other}"),
    }
}

/// No live holder of `name` in its family.
async fn lease_free_any(c: &LockClient, kind: &str, name: &str) -> bool {
    let info = match kind {
        "fair" => c.fair_lock(name).inspect().await,
        "sem" => c.semaphore(name, 3).inspect().await,
        "mutex" => c.mutex(name).inspect().await,
        _ => c.rwlock(name).inspect().await,
    }
    .expect("inspect");
    info.holders.is_empty()
}

/// A stale id (its hold lapsed, the lock granted again to someone else) never releases,
/// extends or resumes the later holder's grant.
async fn a_stale_id_never_touches_a_later_grant(b: Backend) {
    let c = b.client().await;
    let later = b.client().await;
    for kind in ["mutex", "fair"] {
        let name = format!("stale-{kind}");
        let id = match kind {
            "mutex" => c
                .mutex(&name)
                .lease(ms(300))
                .lock()
                .await
                .expect("lock")
                .detach(),
            _ => c
                .fair_lock(&name)
                .lease(ms(300))
                .lock()
                .await
                .expect("lock")
                .detach(),
        };
        let mutex_guard;
        let fair_guard;
        let fence = match kind {
            "mutex" => {
                mutex_guard = Some(
                    later
                        .mutex(&name)
                        .lock()
                        .timeout(EVENTUALLY)
                        .await
                        .expect("relock"),
                );
                fair_guard = None;
                mutex_guard.as_ref().expect("held").fencing_token()
            }
            _ => {
                fair_guard = Some(
                    later
                        .fair_lock(&name)
                        .lock()
                        .timeout(EVENTUALLY)
                        .await
                        .expect("relock"),
                );
                mutex_guard = None;
                fair_guard.as_ref().expect("held").fencing_token()
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
        let still = match (&mutex_guard, &fair_guard) {
            (Some(g), _) => g.is_held(),
            (_, Some(g)) => g.is_held(),
            _ => false,
        };
        assert!(still, "{kind}: the later guard is not held");
    }
}

both_backends!(a_stale_id_never_touches_a_later_grant);

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

both_backends!(wrong_kind_name_or_text_is_refused);

/// A worker without a guard extends and releases the hold by its id.
async fn extend_and_release_by_id(b: Backend) {
    let c = b.client().await;
    let worker = b.client().await;
    let id = c
        .mutex("by-id")
        .lease(secs(2))
        .lock()
        .await
        .expect("lock")
        .detach();
    assert!(worker.extend_hold(&id, secs(120)).await.expect("extend"));
    let info = worker.mutex("by-id").inspect().await.expect("inspect");
    assert!(info.holders[0].lease_remaining > secs(60), "{info:?}");
    assert!(worker.release_hold(&id).await.expect("release"));
    assert!(lease_free(&worker, "by-id").await);
    let err = worker.extend_hold(&id, ms(1)).await.expect_err("too short");
    assert!(err.is_invalid_input());
}

both_backends!(extend_and_release_by_id);

/// Releasing a hold by id marks this client's guard of it lost at once; a guard of it in
/// another client learns it at its next renewal.
async fn release_by_id_ends_every_guard(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let g = c
        .mutex("release-ends")
        .lease(ms(600))
        .lock()
        .await
        .expect("lock");
    let id = g.hold_id();
    let elsewhere = other
        .mutex("release-ends")
        .lease(ms(600))
        .resume(&id)
        .await
        .expect("resume");
    assert!(c.release_hold(&id).await.expect("release"));
    assert!(
        !g.is_held(),
        "the guard of this client still trusts a released hold"
    );
    tokio::time::timeout(EVENTUALLY, elsewhere.lost())
        .await
        .expect("the other client's guard learns it at its next renewal");
    assert!(!elsewhere.is_held());
}

both_backends!(release_by_id_ends_every_guard);

/// Guards of one hold in two clients (two processes): both are held and honest, each on its
/// own lease owner; a second resume in a client that has a guard of the hold is refused
/// (`HoldInUse`, nothing sent); detaching one keeps the other renewing; releasing it ends the
/// hold.
async fn two_guards_of_one_hold(b: Backend) {
    let c = b.client().await;
    let d = b.client().await;
    let lease = ms(600);
    let first = c
        .mutex("two-guards")
        .lease(lease)
        .lock()
        .await
        .expect("lock");
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

both_backends!(two_guards_of_one_hold);

/// A write hold's id is gone once the hold was downgraded to a read hold (whose own id
/// resumes).
async fn a_downgraded_write_id_is_gone(b: Backend) {
    let c = b.client().await;
    let rw = c.rwlock("downgraded");
    let w = rw.write().await.expect("write");
    let write_id = w.hold_id();
    let r = redis_locks::WriteGuard::downgrade(w)
        .await
        .expect("downgrade");
    let read_id = r.detach();
    let err = rw.resume_write(&write_id).await.expect_err("gone");
    assert!(err.is_hold_gone(), "{err}");
    let r = rw.resume_read(&read_id).await.expect("read resumes");
    assert!(r.release().await.expect("release"));
}

both_backends!(a_downgraded_write_id_is_gone);

/// The resumed guard has the handle's options: with auto-renew it outlives several leases.
async fn resumed_guard_renews_with_the_handles_options(b: Backend) {
    let c = b.client().await;
    let lease = ms(500);
    let id = c
        .fair_lock("renewing")
        .lease(secs(30))
        .lock()
        .await
        .expect("lock")
        .detach();
    let g = b
        .client()
        .await
        .fair_lock("renewing")
        .lease(lease)
        .resume(&id)
        .await
        .expect("resume");
    let info = c.fair_lock("renewing").inspect().await.expect("inspect");
    assert!(info.holders[0].lease_remaining <= lease, "{info:?}");
    tokio::time::sleep(lease * 3).await;
    assert!(g.is_held(), "the resumed guard did not renew");
    assert!(g.release().await.expect("release"));
}

both_backends!(resumed_guard_renews_with_the_handles_options);

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
    tokio::time::timeout(EVENTUALLY, g.lost())
        .await
        .expect("lost() fires");
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

both_backends!(max_hold_ends_renewals);

/// `max_hold` with a paused clock: renewals go on until the bound, none after it, and the
/// guard is lost within one lease of the bound.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn max_hold_bound_on_a_paused_clock() {
    let client = LockClient::in_memory();
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
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let g = c.mutex("resume-vs-release").lock().await.expect("lock");
    let id = g.hold_id();
    let gate = Gate::new();
    faulty.add(Rule::on(Op::Release).times(1).hold_request(gate.clone()));
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

both_backends!(resume_racing_the_release_of_the_same_hold);

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
    let seen = second
        .election("hold-election")
        .leader()
        .await
        .expect("leader");
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

both_backends!(leadership_resumes_under_its_term);

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
    assert!(fair.try_read().await.expect_err("held").is_would_block());
    assert!(w.release().await.expect("release"));
}

both_backends!(fair_rwlock_holds_resume);

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
    assert!(other
        .rwlock("mr-report")
        .try_read()
        .await
        .expect_err("held")
        .is_would_block());
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

both_backends!(multi_lock_holds_resume);

/// Resumes a detached 1 s hold through a store whose reply to the resuming renewal comes
/// 300 ms after the server applied it; true if the resumed guard's trust stays within the
/// server's lease (it is counted from the renewal's send, not its reply).
async fn resumed_trust_is_honest(b: &Backend) -> bool {
    let c = b.client().await;
    let id = c
        .mutex("resume-honest")
        .lease(secs(1))
        .lock()
        .await
        .expect("lock")
        .detach();
    let faulty = Faulty::new(b.store().await);
    faulty.add(Rule::on(Op::Extend).times(1).delay_reply(ms(300)));
    let resumer = LockClient::builder().store(faulty.clone()).expect("client");
    let g = resumer
        .mutex("resume-honest")
        .lease(secs(1))
        .resume(&id)
        .await
        .expect("resume");
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

both_backends!(a_resumed_guard_trusts_from_the_send);

/// The check above finds the planted bug that trusts a resumed hold from the reply (nextest
/// runs each test in a process of its own, so the planted bug stays in this one).
#[test]
fn finds_planted_resume_trusts_reply() {
    redis_locks::testing::plant(redis_locks::testing::Bug::ResumeTrustsReply);
    let honest = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(resumed_trust_is_honest(&Backend::memory()));
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
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let mutex = c.mutex("lost-locally").lease(ms(600));
    let lost = mutex.lock().await.expect("lock");
    let id = lost.hold_id();
    // Every renewal is applied, but its reply is lost: the guard's trust runs out.
    faulty.add(Rule::on(Op::Extend).lose_reply());
    tokio::time::timeout(EVENTUALLY, lost.lost())
        .await
        .expect("the guard gives up");
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

both_backends!(resume_after_a_local_loss_and_extend_by_id);

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
    let read = redis_locks::WriteGuard::downgrade(first)
        .await
        .expect("downgrade");
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

both_backends!(a_downgrade_with_a_second_write_guard_keeps_it_honest);
