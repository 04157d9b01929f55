//! Hold ids at their edges, through the public API on both backends: a detach while a step
//! of the same hold is in flight, the id of a write hold downgraded since, `release_all`
//! with resumed holds, resumes cancelled at every poll, hostile names and fences, multi-lock
//! parts resumed alone, a guard resumed on a runtime that ended, the tokens' random bits.
//! Each test names the documented claim it checks (tests/hold_ids.rs has the main cases).

mod support;
use support::detached_mutex;
use support::faulty::extend_at_gate;
use support::faulty::faulty_client;
use support::quick::downgraded;
use support::quick::Quick;

use support::completes_within;
use support::kinds::{detached, inspect, resume_detached};

use std::time::Duration;

use redis_locks::{HoldId, LockClient, Preference};
use tokio::time::Instant;

use support::backend::{eventually, join, Backend, EVENTUALLY};
use support::faulty::{Op, Rule};
use support::honest::{assert_honest, server_deadline};
use support::time::{ms, secs};
use support::waits::lease_free;

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
