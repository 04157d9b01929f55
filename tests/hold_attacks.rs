//! Adversarial tests of hold ids (resume, detach, release and extend by id, co-guards,
//! `max_hold`) through the public API only, on both backends. Each test fails if a claim of
//! `docs/GUARANTEES.md`, `docs/decisions/hold-ids.md` or the API docs breaks.

mod support;

use std::time::Duration;

use redis_locks::{HoldId, LockClient};
use tokio::time::Instant;

use support::backend::{eventually, join, Backend, EVENTUALLY};
use support::faulty::{Faulty, Gate, Op, Rule};
use support::honest::{assert_honest, server_deadline};
use support::time::{ms, secs};
use support::waits::lease_free;

/// A detached mutex hold of `name` in `c` with `lease`.
async fn detached_mutex(c: &LockClient, name: &str, lease: Duration) -> HoldId {
    c.mutex(name)
        .lease(lease)
        .lock()
        .await
        .expect("lock")
        .detach()
}

/// Attack: two resumes of one detached id run concurrently in ONE client (their renewals'
/// replies are slow, so neither finds a guard of the token in the client's registry yet). A
/// client keeps at most one guard per hold: exactly one resume gives a guard, the other is
/// refused (`HoldInUse`) without sending anything, and a release through the one guard frees
/// the lock with no other guard of it left saying `is_held()`.
async fn concurrent_resumes_in_one_client_share_one_owner(b: Backend) {
    let owner = b.client().await;
    let id = detached_mutex(&owner, "att-concurrent-resumes", secs(5)).await;
    let faulty = Faulty::new(b.store().await);
    faulty.add(Rule::on(Op::Extend).times(2).delay_reply(ms(300)));
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let m = c.mutex("att-concurrent-resumes").lease(secs(5));
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
        lease_free(&owner, "att-concurrent-resumes").await,
        "the release did not release"
    );
}

both_backends!(concurrent_resumes_in_one_client_share_one_owner);

/// Attack: in ONE client, a `release_hold(id)` runs while a resume of the same id is on its
/// way (its renewal applied on the server, the reply not yet back). The resume's guard would
/// be trusted from a renewal the release follows: the release by id is refused (`HoldInUse`,
/// nothing sent) while the resume is under way, and the resumed guard is honest.
async fn release_by_id_racing_a_resume_in_one_client(b: Backend) {
    let owner = b.client().await;
    let id = detached_mutex(&owner, "att-release-vs-resume", secs(5)).await;
    let faulty = Faulty::new(b.store().await);
    let gate = Gate::new();
    faulty.add(Rule::on(Op::Extend).times(1).hold_reply(gate.clone()));
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.mutex("att-release-vs-resume")
                .lease(secs(5))
                .resume(&id)
                .await
        })
    };
    gate.wait_entered(1).await;
    let released = c.release_hold(&id).await;
    gate.open();
    let g = join("resume", resuming).await.expect("resume");
    let err = released.expect_err("a release by id beside a resume in the same client");
    assert!(err.is_hold_in_use(), "{err}");
    assert_eq!(faulty.count(Op::Release), 0, "the refused release was sent");
    let before = g.valid_until();
    let info = owner
        .mutex("att-release-vs-resume")
        .inspect()
        .await
        .expect("inspect");
    assert!(g.is_held(), "the resumed guard lost a hold nobody released");
    assert_honest("resume vs release_hold", before, &info, Instant::now());
    assert!(g.release().await.expect("release"));
    assert!(lease_free(&owner, "att-release-vs-resume").await);
}

both_backends!(release_by_id_racing_a_resume_in_one_client);

/// Attack: resume the id of a live guard in the same client (a co-guard resume). A client
/// keeps at most one guard per hold: the resume is refused (`HoldInUse`) and sends nothing, and
/// the live guard keeps its hold (a cancelled or failed co-guard resume cannot touch it).
async fn cancelled_co_guard_resume_leaves_the_hold_as_before(b: Backend) {
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let mutex = c.mutex("att-cancel-co-guard").lease(secs(3));
    let g = mutex.lock().await.expect("lock");
    let id = g.hold_id();
    // The first renewal is due in 1 s: any extend before it is the resume's.
    let err = c
        .mutex("att-cancel-co-guard")
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
        !lease_free(&other, "att-cancel-co-guard").await,
        "a refused co-guard resume released the hold under the live guard"
    );
    assert!(
        g.is_held(),
        "a refused co-guard resume made the live guard lose its hold"
    );
    assert!(g.release().await.expect("release"));
}

both_backends!(cancelled_co_guard_resume_leaves_the_hold_as_before);

/// Attack: a resume on a handle with `max_hold(d)` in a client that has a guard of the hold
/// (no bound) is refused (it would have joined the unbounded owner); once that guard detaches,
/// the resume is made "with this handle's options (lease, auto-renewal, `max_hold`)", and
/// GUARANTEES: "no automatic renewal is sent once d has passed since the grant (or the
/// resume)".
async fn co_guard_resume_keeps_the_handles_max_hold(b: Backend) {
    let c = b.client().await;
    let lease = ms(400);
    let bound = ms(1_200);
    let first = c
        .mutex("att-co-max-hold")
        .lease(lease)
        .lock()
        .await
        .expect("lock");
    let bounded_handle = c.mutex("att-co-max-hold").lease(lease).max_hold(bound);
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
        lease_free(&c, "att-co-max-hold").await
    })
    .await;
    drop(bounded);
}

both_backends!(co_guard_resume_keeps_the_handles_max_hold);

/// Attack: `extend` of a `max_hold` guard past the bound, then wait: the extend is honoured
/// ("`extend` still renews"), but automatic renewals must not restart; `lost()` fires and the
/// server frees the lock by itself (no release).
async fn max_hold_is_not_reset_by_an_extend(b: Backend) {
    let c = b.client().await;
    let lease = ms(400);
    let mut g = c
        .mutex("att-max-hold-extend")
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
        lease_free(&c, "att-max-hold-extend").await
    })
    .await;
    drop(g);
}

both_backends!(max_hold_is_not_reset_by_an_extend);

/// Attack: a resume in another client (process) is cancelled while its renewal's reply is on
/// its way. Nothing may be left renewed beyond that one step: no further renewal is sent, and
/// the hold lapses within one lease of it.
async fn cancelled_resume_leaves_nothing_renewing(b: Backend) {
    let owner = b.client().await;
    let lease = ms(800);
    let id = detached_mutex(&owner, "att-cancel-resume", lease).await;
    let faulty = Faulty::new(b.store().await);
    let gate = Gate::new();
    faulty.add(Rule::on(Op::Extend).times(1).hold_reply(gate.clone()));
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.mutex("att-cancel-resume")
                .lease(lease)
                .resume(&id)
                .await
                .map(|g| g.detach())
        })
    };
    gate.wait_entered(1).await;
    resuming.abort();
    let _ = resuming.await;
    gate.open();
    let info = owner
        .mutex("att-cancel-resume")
        .inspect()
        .await
        .expect("inspect");
    if let Some(h) = info.holders.first() {
        assert!(
            h.lease_remaining <= lease,
            "the cancelled resume left a lease longer than it asked: {info:?}"
        );
    }
    eventually("the hold lapses after a cancelled resume", async || {
        lease_free(&owner, "att-cancel-resume").await
    })
    .await;
    tokio::time::sleep(lease * 2).await;
    let extends = faulty.count(Op::Extend);
    assert!(
        extends <= 1,
        "a cancelled resume left renewals running: {extends} extends sent"
    );
    // The id is gone now.
    let err = c
        .mutex("att-cancel-resume")
        .resume(&id)
        .await
        .expect_err("gone");
    assert!(err.is_hold_gone(), "{err}");
}

both_backends!(cancelled_resume_leaves_nothing_renewing);

/// Attack: an id whose fence was changed. The brief's claim: a tampered id (changed fence,
/// token, kind, version) is refused. (docs/decisions/hold-ids.md says "a resume does not
/// re-read [the fence] from the server": this test records whether that is so.)
async fn a_tampered_fence_is_refused(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let id = detached_mutex(&c, "att-fence", secs(10)).await;
    let real = id.fencing_token();
    let text = id.to_string();
    let forged = text.replacen(&format!(":{real}:"), &format!(":{}:", real + 1_000_000), 1);
    assert_ne!(forged, text);
    let forged: HoldId = forged.parse().expect("a well-formed forged id parses");
    let resumed = other.mutex("att-fence").resume(&forged).await;
    let info = other.mutex("att-fence").inspect().await.expect("inspect");
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

both_backends!(a_tampered_fence_is_refused);

/// Attack: ids with a changed token, kind or version never give a live guard (the token is
/// the capability; kind and version are checked).
async fn tampered_token_kind_version_are_refused(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let id = detached_mutex(&c, "att-tamper", secs(10)).await;
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
        .mutex("att-tamper")
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
            .mutex("att-tamper")
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
        let refused = match kind {
            "fair" => other
                .fair_lock("att-tamper")
                .resume(&forged)
                .await
                .map(|g| g.detach())
                .err(),
            "write-writer" => other
                .rwlock("att-tamper")
                .resume_write(&forged)
                .await
                .map(|g| g.detach())
                .err(),
            "write-reader" => other
                .rwlock("att-tamper")
                .preference(redis_locks::Preference::Reader)
                .resume_write(&forged)
                .await
                .map(|g| g.detach())
                .err(),
            "read-writer" => other
                .rwlock("att-tamper")
                .resume_read(&forged)
                .await
                .map(|g| g.detach())
                .err(),
            _ => other
                .semaphore("att-tamper", 1)
                .resume(&forged)
                .await
                .map(|g| g.detach())
                .err(),
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
    let info = c.mutex("att-tamper").inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(c.release_hold(&id).await.expect("release"));
}

both_backends!(tampered_token_kind_version_are_refused);

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

/// Attack: an extend by id with a SHORTER lease in the client that has the guard of the hold
/// (a second guard is refused) must lower the guard's trust to what the server now has.
async fn a_shorter_extend_by_id_lowers_every_co_guard(b: Backend) {
    let c = b.client().await;
    let mutex = c.mutex("att-co-extend").lease(secs(10)).auto_renew(false);
    let first = mutex.lock().await.expect("lock");
    let id = first.hold_id();
    let err = mutex.resume(&id).await.expect_err("a second guard");
    assert!(err.is_hold_in_use(), "{err}");
    assert!(c.extend_hold(&id, ms(500)).await.expect("extend by id"));
    let before = first.valid_until();
    let info = mutex.inspect().await.expect("inspect");
    assert_honest("the guard", before, &info, Instant::now());
    eventually("the shortened lease lapses", async || {
        lease_free(&c, "att-co-extend").await
    })
    .await;
    assert!(!first.is_held(), "the guard trusts a lapsed lease");
}

both_backends!(a_shorter_extend_by_id_lowers_every_co_guard);

/// Attack: a resume in the client whose `release_all` is in flight (its release request held
/// before it reaches the server). The resume must be refused, or its guard be lost once the
/// release is done; the lock must end up free.
async fn resume_racing_release_all(b: Backend) {
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let g = c.mutex("att-release-all").lock().await.expect("lock");
    let id = g.hold_id();
    let gate = Gate::new();
    faulty.add(Rule::on(Op::Release).times(1).hold_request(gate.clone()));
    let releasing = {
        let c = c.clone();
        tokio::spawn(async move { c.release_all().await })
    };
    gate.wait_entered(1).await;
    let resumed = c.mutex("att-release-all").resume(&id).await;
    gate.open();
    join("release_all", releasing).await.expect("release_all");
    let other = b.client().await;
    assert!(
        lease_free(&other, "att-release-all").await,
        "release_all left the hold"
    );
    if let Ok(r) = resumed {
        assert!(
            !r.is_held(),
            "a guard resumed during release_all trusts a released hold"
        );
    }
    assert!(!g.is_held());
}

both_backends!(resume_racing_release_all);

/// Attack: a guard resumed in another client, then its hold is released and re-granted by the
/// first client; the resumed guard's next renewal must find it gone (lost), and its trust
/// must never outlast the server's lease of the released hold by more than the lease.
/// (A cross-process release is learned at the next renewal: documented.) What must not
/// happen: a renewal of the resumed guard extends the NEW holder's grant.
async fn a_resumed_guard_never_renews_a_later_grant(b: Backend) {
    let first = b.client().await;
    let second = b.client().await;
    let lease = ms(600);
    let g = first
        .mutex("att-later-grant")
        .lease(lease)
        .lock()
        .await
        .expect("lock");
    let id = g.hold_id();
    let resumed = second
        .mutex("att-later-grant")
        .lease(lease)
        .resume(&id)
        .await
        .expect("resume");
    assert!(g.release().await.expect("release"));
    let later = first
        .mutex("att-later-grant")
        .lease(secs(30))
        .auto_renew(false)
        .lock()
        .timeout(EVENTUALLY)
        .await
        .expect("the lock is free again");
    tokio::time::timeout(EVENTUALLY, resumed.lost())
        .await
        .expect("the resumed guard learns the release at its next renewal");
    let info = first
        .mutex("att-later-grant")
        .inspect()
        .await
        .expect("inspect");
    let server = server_deadline(&info, Instant::now()).expect("held by the later grant");
    assert!(
        server > Instant::now() + secs(20),
        "the later grant's lease was changed: {info:?}"
    );
    assert!(!resumed.is_held());
    assert!(later.release().await.expect("release"));
}

both_backends!(a_resumed_guard_never_renews_a_later_grant);

/// Attack: a semaphore id with its permit count or capacity changed. A resume must not give a
/// guard that claims another number of permits than the server holds for the token.
async fn tampered_permits_are_refused(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let id = c
        .semaphore("att-permits", 3)
        .acquire_many(2)
        .await
        .expect("acquire")
        .detach();
    let text = id.to_string();
    assert!(text.starts_with("rlh1:sem-2-3:"), "{text}");
    for (kind, capacity) in [("sem-1-3", 3), ("sem-3-3", 3)] {
        let forged: HoldId = text.replacen("sem-2-3", kind, 1).parse().expect(kind);
        let resumed = other
            .semaphore("att-permits", capacity)
            .resume(&forged)
            .await;
        if let Ok(g) = resumed {
            let permits = g.num_permits();
            let _ = g.detach();
            panic!(
                "an id forged to {kind} resumed a guard of {permits} permits (the server holds 2)"
            );
        }
    }
    let info = c
        .semaphore("att-permits", 3)
        .inspect()
        .await
        .expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(c.release_hold(&id).await.expect("release"));
}

both_backends!(tampered_permits_are_refused);

/// Attack: `extend_hold(id, short)` in ONE client while a resume of the same id (long lease)
/// is on its way (applied on the server, reply not back). Beside the resume, the extend would
/// shorten a lease the resumed guard then trusts for the long one: it is refused (`HoldInUse`,
/// nothing sent), and the resumed guard is honest.
async fn extend_by_id_racing_a_resume_in_one_client(b: Backend) {
    let owner = b.client().await;
    let id = detached_mutex(&owner, "att-extend-vs-resume", secs(10)).await;
    let faulty = Faulty::new(b.store().await);
    let gate = Gate::new();
    faulty.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(secs(10)))
            .times(1)
            .hold_reply(gate.clone()),
    );
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.mutex("att-extend-vs-resume")
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
    let info = owner
        .mutex("att-extend-vs-resume")
        .inspect()
        .await
        .expect("inspect");
    assert_honest(
        "a guard resumed while its own client tried to extend the hold by id",
        before,
        &info,
        Instant::now(),
    );
    drop(g);
}

both_backends!(extend_by_id_racing_a_resume_in_one_client);

/// Attack: make a co-guard in one client, to drop it under the other. The second guard is
/// refused (`HoldInUse`): the one guard keeps the hold, and its drop frees the lock.
async fn dropping_a_co_guard_makes_the_other_honest(b: Backend) {
    let c = b.client().await;
    let mutex = c.mutex("att-co-drop").lease(secs(5));
    let first = mutex.lock().await.expect("lock");
    let id = first.hold_id();
    let err = mutex.resume(&id).await.expect_err("a second guard");
    assert!(err.is_hold_in_use(), "{err}");
    assert!(first.is_held());
    drop(first);
    eventually("the dropped guard's release lands", async || {
        lease_free(&c, "att-co-drop").await
    })
    .await;
    let err = mutex.resume(&id).await.expect_err("released");
    assert!(err.is_hold_gone(), "{err}");
}

both_backends!(dropping_a_co_guard_makes_the_other_honest);

/// Attack: a guard resumed on a helper runtime that is then shut down (its renewals lived
/// there). The guard must not say `is_held()` past its trust, and `lost()` (awaited on another
/// runtime) must fire no later than about `valid_until()`.
#[test]
fn resumed_on_a_runtime_that_shuts_down() {
    for b in [Backend::memory(), Backend::redis()] {
        let main = support::time::current_thread();
        let (owner, id) = main.block_on(async {
            let owner = b.client().await;
            let id = detached_mutex(&owner, "att-shutdown", ms(800)).await;
            (owner, id)
        });
        let helper = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let g = helper.block_on(async {
            let c = b.client().await;
            c.mutex("att-shutdown")
                .lease(ms(800))
                .resume(&id)
                .await
                .expect("resume")
        });
        helper.shutdown_timeout(ms(500));
        main.block_on(async {
            let until = g.valid_until();
            let fired = tokio::time::timeout(EVENTUALLY, g.lost()).await;
            let late = Instant::now().saturating_duration_since(until);
            assert!(
                fired.is_ok(),
                "{}: lost() never fired after the resuming runtime shut down",
                b.kind
            );
            assert!(
                late < secs(2),
                "{}: lost() fired {late:?} after valid_until()",
                b.kind
            );
            assert!(!g.is_held());
            eventually("the hold lapses", async || {
                lease_free(&owner, "att-shutdown").await
            })
            .await;
        });
        drop(g);
    }
}

/// Attack: a resume in the client whose only guard of the hold was just dropped (its
/// background release held before it reaches the server). The resume must be refused, or its
/// guard be lost once the release lands; the lock must end up free.
async fn resume_racing_the_drop_of_its_guard(b: Backend) {
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let g = c.mutex("att-drop-race").lock().await.expect("lock");
    let id = g.hold_id();
    let gate = Gate::new();
    faulty.add(Rule::on(Op::Release).times(1).hold_request(gate.clone()));
    drop(g);
    gate.wait_entered(1).await;
    let resumed = c.mutex("att-drop-race").resume(&id).await;
    gate.open();
    let other = b.client().await;
    eventually("the dropped guard's release lands", async || {
        lease_free(&other, "att-drop-race").await
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

both_backends!(resume_racing_the_drop_of_its_guard);

/// Attack: a guard loses its trust locally (renewal replies lost) while the server still
/// holds its token; the id is resumed in the same client. A second entry of the token beside
/// the lost one would be ended by the lost one's release or drop: the resume is refused
/// (`HoldInUse`, nothing sent) until the lost guard is given up; once its release or drop
/// ended the server's hold, the id is gone.
async fn lost_guard_ended_after_a_resume(b: Backend, how: &str) {
    let name = format!("att-lost-then-resumed-{how}");
    let faulty = Faulty::new(b.store().await);
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let mutex = c.mutex(&name).lease(secs(3));
    let lost = mutex.lock().await.expect("lock");
    let id = lost.hold_id();
    faulty.add(Rule::on(Op::Extend).lose_reply());
    tokio::time::timeout(EVENTUALLY, lost.lost())
        .await
        .expect("the guard gives up");
    faulty.clear();
    let sent = faulty.count(Op::Extend);
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

both_backends!(dropping_the_lost_guard_after_a_resume);
both_backends!(releasing_the_lost_guard_after_a_resume);

/// Attack, deterministic form of the one above: a guard without auto-renewal runs out of
/// trust (`lost()` fires, `is_held()` false) while the server's lease is longer (another
/// process extended it by id); a resume of the id in the guard's own client is refused while
/// that guard lives (it must not be revived, nor a second entry made beside it), and works
/// once the expired guard is detached.
async fn an_expired_guard_stays_lost_after_a_resume(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let expired = c
        .mutex("att-expired-revived")
        .lease(ms(600))
        .auto_renew(false)
        .lock()
        .await
        .expect("lock");
    let id = expired.hold_id();
    assert!(other
        .extend_hold(&id, secs(30))
        .await
        .expect("extend by id"));
    tokio::time::timeout(EVENTUALLY, expired.lost())
        .await
        .expect("lost() fires when the trust runs out");
    let lost_at = Instant::now();
    assert!(!expired.is_held());
    let err = c
        .mutex("att-expired-revived")
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
        .mutex("att-expired-revived")
        .lease(secs(10))
        .resume(&id)
        .await
        .expect("the server still holds it");
    assert!(resumed.is_held());
    assert!(resumed.release().await.expect("release"));
}

both_backends!(an_expired_guard_stays_lost_after_a_resume);

/// Attack: cancel `Election::resume` after its renewal, while it reads the leader's value.
/// Its docs ("Cancel safety"): "If cancelled, the leadership's lease may have been renewed;
/// no `Leadership` has it." So the detached leadership must still lead (same term) after the
/// cancel, not be resigned or released.
async fn cancelled_election_resume_keeps_the_leadership(b: Backend) {
    let first = b.client().await;
    let id = first
        .election("att-election-cancel")
        .lease(secs(5))
        .campaign("10.0.0.9:1")
        .await
        .expect("campaign")
        .detach();
    let faulty = Faulty::new(b.store().await);
    let gate = Gate::new();
    faulty.add(Rule::on(Op::Leader).times(1).hold_request(gate.clone()));
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let resuming = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.election("att-election-cancel")
                .lease(secs(5))
                .resume(&id)
                .await
                .map(|l| l.detach())
        })
    };
    gate.wait_entered(1).await;
    resuming.abort();
    let _ = resuming.await;
    gate.open();
    tokio::time::sleep(ms(300)).await;
    let seen = first
        .election("att-election-cancel")
        .leader()
        .await
        .expect("leader");
    assert!(
        seen.as_ref()
            .is_some_and(|l| l.term == id.fencing_token() && l.value == "10.0.0.9:1"),
        "a cancelled Election::resume ended the leadership it was resuming: leader now {seen:?}"
    );
    let back = first
        .election("att-election-cancel")
        .resume(&id)
        .await
        .expect("the leadership is still there to resume");
    assert!(back.resign().await.expect("resign"));
}

both_backends!(cancelled_election_resume_keeps_the_leadership);

/// Attack: `Election::resume` whose read of the leader's value fails (its reply lost). The
/// leadership was handed over (detached); a failed resume must not end it: the error is
/// reported and the leadership still leads under its term, to be resumed again.
async fn a_failed_election_resume_keeps_the_leadership(b: Backend) {
    let first = b.client().await;
    let id = first
        .election("att-election-fail")
        .lease(secs(5))
        .campaign("10.0.0.9:2")
        .await
        .expect("campaign")
        .detach();
    let faulty = Faulty::new(b.store().await);
    faulty.add(Rule::on(Op::Leader).lose_reply());
    let c = LockClient::builder().store(faulty.clone()).expect("client");
    let outcome = c
        .election("att-election-fail")
        .lease(secs(5))
        .resume(&id)
        .await
        .map(|l| l.detach());
    faulty.clear();
    tokio::time::sleep(ms(300)).await;
    let seen = first
        .election("att-election-fail")
        .leader()
        .await
        .expect("leader");
    assert!(
        seen.as_ref().is_some_and(|l| l.term == id.fencing_token()),
        "an Election::resume that failed ({:?}) ended the leadership: leader now {seen:?}",
        outcome.as_ref().err()
    );
    let back = first
        .election("att-election-fail")
        .resume(&id)
        .await
        .expect("resume again");
    assert!(back.resign().await.expect("resign"));
}

both_backends!(a_failed_election_resume_keeps_the_leadership);

/// Attack: cancel `MultiLock::resume` (in another process) after its first part was renewed,
/// while the second part's renewal is held. Its docs ("Cancel safety"): "If cancelled, the
/// parts renewed so far are left held, with no guard." So the first part must still be held
/// on the server (until its lease lapses), not released by the cancel.
async fn cancelled_multi_resume_leaves_the_parts_held(b: Backend) {
    let names = ["att-multi-cancel-a", "att-multi-cancel-b"];
    let owner = b.client().await;
    let ids = owner
        .multi_lock(names)
        .lease(secs(5))
        .lock()
        .await
        .expect("lock")
        .detach();
    let faulty = Faulty::new(b.store().await);
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
    let c = LockClient::builder().store(faulty.clone()).expect("client");
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
    gate.wait_entered(1).await;
    resuming.abort();
    let _ = resuming.await;
    gate.open();
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

both_backends!(cancelled_multi_resume_leaves_the_parts_held);

/// Attack: resume on handles with options a lock would refuse (a 1 ms lease, a zero
/// `max_hold`). The resume must be refused as invalid input without touching the hold (no
/// 1 ms renewal that would end it), on every resume entry point.
async fn resume_with_bad_options_leaves_the_hold(b: Backend) {
    let c = b.client().await;
    let other = b.client().await;
    let id = detached_mutex(&c, "att-bad-options", secs(10)).await;
    let outcomes = [
        (
            "lease 1ms",
            other
                .mutex("att-bad-options")
                .lease(ms(1))
                .resume(&id)
                .await
                .map(|g| g.detach()),
        ),
        (
            "max_hold 0",
            other
                .mutex("att-bad-options")
                .max_hold(Duration::ZERO)
                .resume(&id)
                .await
                .map(|g| g.detach()),
        ),
    ];
    tokio::time::sleep(ms(200)).await;
    let info = c.mutex("att-bad-options").inspect().await.expect("inspect");
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

both_backends!(resume_with_bad_options_leaves_the_hold);

/// Attack: the id is a capability. Its `Debug` form, and the errors of a malformed text
/// carrying the token, must never repeat the token (the 96 random bits after the shown
/// prefix).
#[test]
fn the_token_never_leaks_through_debug_or_errors() {
    let rt = support::time::current_thread();
    let id = rt.block_on(async {
        LockClient::in_memory()
            .mutex("att-leak")
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
        format!("rlh1:mutex:01:{token}:att-leak"),
        format!("rlh1:mutexx:1:{token}:att-leak"),
        format!("rlh1:mutex:1:{token}:"),
        format!("rlh2:mutex:1:{token}:att-leak"),
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
    let c = b.client().await;
    let rw = c.rwlock("att-co-downgrade").lease(secs(5));
    let first = rw.write().await.expect("write");
    let id = first.hold_id();
    let err = rw
        .resume_write(&id)
        .await
        .expect_err("a second guard of the write hold");
    assert!(err.is_hold_in_use(), "{err}");
    let read = redis_locks::WriteGuard::downgrade(first)
        .await
        .expect("downgrade");
    assert!(read.is_held());
    let other = b.client().await;
    let reader = other
        .rwlock("att-co-downgrade")
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

both_backends!(downgrading_one_write_co_guard);
