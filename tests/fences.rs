//! Fencing tokens across data loss, and names that leave nothing behind: every exclusive
//! grant's fence is above the previous one of its name and at least the server's clock in
//! microseconds, so fences keep rising when the counter is lost (a restart without
//! persistence, `FLUSHALL`, an expired counter); and once every hold of a name has ended and
//! its leases have lapsed, no key of that name is left (on Redis, and in memory). Every live
//! hold keeps its name's counter alive, forced releases and evictions raise it, and counters
//! left by releases before counters expired get a TTL once their name is used.

mod support;
use support::quick::Quick;
use support::time::{ms, secs};

use std::time::{SystemTime, UNIX_EPOCH};

use redis_locks::{InMemory, LockClient, Preference, WriteGuard};

use support::backend::{eventually, join, Backend};
use support::RedisServer;

/// The server's clock in µs (`TIME`).
fn server_clock_us(server: &RedisServer) -> u64 {
    let out = server.cli(&["TIME"]);
    let mut parts = out
        .split_whitespace()
        .map(|p| p.parse::<u64>().expect("TIME"));
    let (secs, micros) = (parts.next().unwrap(), parts.next().unwrap());
    secs * 1_000_000 + micros
}

/// The local clock in µs.
fn local_clock_us() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    now.as_micros() as u64
}

/// One exclusive grant of each kind on `name`, in turn (each released before the next):
/// their fences, in grant order.
async fn one_grant_of_each_kind(c: &LockClient, name: &str) -> Vec<(&'static str, u64)> {
    let mut fences = Vec::new();
    let g = c.mutex(name).lock().await.expect("mutex");
    fences.push(("mutex", g.fencing_token()));
    g.release().await.expect("release");
    let g = c.rwlock(name).write().await.expect("write");
    fences.push(("rwlock write", g.fencing_token()));
    g.release().await.expect("release");
    let m = c
        .multi_lock([name, "fences:other"])
        .lock()
        .await
        .expect("multi");
    fences.push(("multi-lock", m.fencing_token(name).expect("part")));
    m.release().await.expect("release");
    let g = c.fair_lock(name).lock().await.expect("fair");
    fences.push(("fair lock", g.fencing_token()));
    g.release().await.expect("release");
    let g = c
        .semaphore(name, 2)
        .acquire_many(2)
        .await
        .expect("all permits");
    fences.push(("semaphore (all permits)", g.fencing_token()));
    g.release().await.expect("release");
    let leadership = c.election(name).campaign("me").await.expect("campaign");
    fences.push(("election term", leadership.term()));
    leadership.resign().await.expect("resign");
    fences
}

fn assert_rising(fences: &[(&str, u64)], floor: u64) {
    let mut previous = ("(clock before the first grant)", floor);
    for &(kind, fence) in fences {
        assert!(
            fence > previous.1,
            "{kind}'s fence {fence} is not above {}'s {}: {fences:?}",
            previous.0,
            previous.1
        );
        previous = (kind, fence);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_grant_takes_a_fence_above_the_last_and_the_server_clock() {
    let b = Backend::redis();
    let c = b.client().await;
    let floor = server_clock_us(b.server.as_ref().expect("a private server"));
    let fences = one_grant_of_each_kind(&c, "kinds").await;
    assert_rising(&fences, floor);
    let after = server_clock_us(b.server.as_ref().unwrap());
    for &(kind, fence) in &fences {
        // The counter runs ahead of the clock only by grants within one microsecond.
        assert!(
            fence <= after + 16,
            "{kind}: {fence} is past the clock {after}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_grants_take_fences_above_the_last_and_the_clock() {
    let c = LockClient::in_memory();
    let floor = local_clock_us() - 1000;
    let fences = one_grant_of_each_kind(&c, "kinds").await;
    assert_rising(&fences, floor);
}

/// Fences and a term taken before `lose` (which wipes the server's data) are below every one
/// taken after it.
async fn fences_rise_across(what: &str, lose: impl FnOnce(&mut RedisServer)) {
    let mut b = Backend::redis();
    let c = b.client().await;
    let mut before = Vec::new();
    for _ in 0..20 {
        before.extend(one_grant_of_each_kind(&c, "survivor").await);
    }
    let last = before.iter().map(|(_, f)| *f).max().expect("fences");
    lose(b.server.as_mut().expect("a private server"));
    let keys = b.cli(&["KEYS", "*survivor*"]);
    assert!(keys.is_empty(), "{what} left keys: {keys}");
    // A new client after a restart (the old one reconnects too, but need not have yet).
    let c = b.client().await;
    let after = one_grant_of_each_kind(&c, "survivor").await;
    assert_rising(&after, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_across_a_restart_without_persistence() {
    fences_rise_across("the restart", |server| server.restart()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_across_flushall() {
    fences_rise_across("FLUSHALL", |server| {
        assert_eq!(server.cli(&["FLUSHALL"]), "OK");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_after_the_counter_expired() {
    let b = Backend::redis();
    let c = b.leased(ms(200)).await;
    let first = one_grant_of_each_kind(&c, "expiring").await;
    let fence_key = c.keys("expiring").expect("keys").fence();
    eventually("the fence counter expires", async || {
        b.cli(&["EXISTS", &fence_key]) == "0"
    })
    .await;
    let after = one_grant_of_each_kind(&c, "expiring").await;
    let last = first.iter().map(|(_, f)| *f).max().unwrap();
    assert_rising(&after, last);
}

/// Holds of every kind on `name`, ended by release, and one more hold of each family left to
/// lapse (its guard forgotten, with auto-renew off): the caller then expects no key left.
async fn use_every_kind_and_abandon_some(c: &LockClient, name: &str) {
    one_grant_of_each_kind(c, name).await;
    let read = c.rwlock(name).read().await.expect("read");
    read.release().await.expect("release");
    let permits = c.semaphore(name, 3).acquire().await.expect("permit");
    permits.release().await.expect("release");
    let semaphore = c.semaphore(&format!("{name}:sem"), 3);
    let sem = semaphore.acquire().await.expect("permit");
    std::mem::forget(sem);
    let mutex = c.mutex(&format!("{name}:mutex")).auto_renew(false);
    std::mem::forget(mutex.lock().await.expect("mutex"));
    // A leader whose runtime ends: its renewals end with it, its lease (and value) lapse.
    let (c, election) = (c.clone(), format!("{name}:election"));
    let leader = tokio::task::spawn_blocking(move || {
        let runtime = support::time::current_thread();
        let leader = runtime.block_on(async {
            let election = c.election(&election).lease(ms(300));
            election.campaign("x").await.expect("campaign")
        });
        drop(runtime);
        leader
    })
    .await
    .expect("the helper thread");
    drop(leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_is_left_once_every_hold_ended_and_lapsed() {
    let b = Backend::redis();
    let c = b
        .client_with(LockClient::builder().lease(ms(300)).auto_renew(false))
        .await;
    use_every_kind_and_abandon_some(&c, "idle").await;
    let keys = b.cli(&["KEYS", "*idle*"]);
    assert!(
        !keys.is_empty(),
        "the abandoned holds keep keys while their leases run"
    );
    eventually("every key of the idle names expires", async || {
        b.cli(&["KEYS", "*idle*"]).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_name_is_kept_in_memory_once_every_hold_ended_and_lapsed() {
    let store = InMemory::new();
    let c = store
        .client_with(LockClient::builder().lease(ms(300)).auto_renew(false))
        .expect("client");
    use_every_kind_and_abandon_some(&c, "idle").await;
    assert!(store.names_kept() > 0, "the abandoned holds keep state");
    eventually("every idle name is dropped", async || {
        store.names_kept() == 0
    })
    .await;
}

// ---- fences after forced releases, hand-offs, downgrades; counters of live holds ----

fn backends() -> [Backend; 2] {
    [Backend::redis(), Backend::memory()]
}

/// an operator's `force_release` on a name whose fence counter does not exist (never
/// held exclusively, or expired) while a reader holds it, then a writer right away. The
/// fence `force_release` returns ("the new fence, so the evicted holders' fenced writes are
/// refused") must be below the next grant's: fences strictly rise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_force_release_takes_a_fence_above_the_forced_one() {
    for b in backends() {
        let c = b.client().await;
        let op = b.client().await;
        for i in 0..200 {
            let name = format!("forced:{i}");
            let reader = c.rwlock(&name).read().await.expect("read");
            let forced = op.force_release(&name).await.expect("force_release");
            let w = c.rwlock(&name).try_write().await.expect("write");
            assert!(
                w.fencing_token() > forced,
                "{}: round {i}: the write after force_release got fence {} which is not above \
                 the fence force_release returned ({forced})",
                b.kind,
                w.fencing_token()
            );
            w.release().await.expect("release");
            drop(reader);
        }
    }
}

/// The same without any holder: `force_release` of an idle name, then a Mutex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_after_force_release_of_an_idle_name_takes_a_higher_fence() {
    for b in backends() {
        let c = b.client().await;
        for i in 0..200 {
            let name = format!("idle-forced:{i}");
            let forced = c.force_release(&name).await.expect("force_release");
            let g = c.mutex(&name).try_lock().await.expect("lock");
            assert!(
                g.fencing_token() > forced,
                "{}: round {i}: Mutex fence {} after force_release's {forced}",
                b.kind,
                g.fencing_token()
            );
            g.release().await.expect("release");
        }
    }
}

/// an exclusive hold renewed far beyond the lease its fence counter was given, then
/// downgraded. The downgrade reports "the fence of the write just left" from the counter: a
/// counter that expired under a live writer would report 0 (or anything else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_renewed_write_hold_keeps_its_fence_counter_for_the_downgrade() {
    for b in backends() {
        let c = b.leased(ms(300)).await;
        for pref in [Preference::Writer, Preference::Reader, Preference::Fair] {
            let name = format!("downgrade:{pref:?}");
            let w = c
                .rwlock(&name)
                .preference(pref)
                .write()
                .await
                .expect("write");
            let fence = w.fencing_token();
            tokio::time::sleep(ms(1500)).await;
            assert!(w.is_held(), "{}: {pref:?}: the writer renews", b.kind);
            let r = WriteGuard::downgrade(w).await.expect("downgrade");
            assert_eq!(
                r.fencing_token(),
                fence,
                "{}: {pref:?}: a writer renewed for 5 leases downgraded with another fence",
                b.kind
            );
            r.release().await.expect("release");
        }
    }
}

/// the hand-off to a waiting writer takes its fence with the counter's TTL set to the
/// waiter's claim window only (its heartbeat deadline). The new writer then holds for many
/// leases; its downgrade must still see its own fence, above the first writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_handed_the_lock_keeps_its_fence_counter() {
    for b in backends() {
        let c = b
            .client_with(LockClient::builder().lease(ms(300)).heartbeat(ms(100)))
            .await;
        for pref in [Preference::Writer, Preference::Reader, Preference::Fair] {
            let name = format!("handoff:{pref:?}");
            let first = c.rwlock(&name).preference(pref).write().await.expect("w1");
            let f1 = first.fencing_token();
            let lock = c.rwlock(&name).preference(pref);
            let kind = b.kind;
            let waiter = tokio::spawn(async move {
                let w = lock.write().await.expect("w2");
                let fence = w.fencing_token();
                tokio::time::sleep(ms(1500)).await;
                assert!(w.is_held(), "{kind}: {pref:?}: the second writer renews");
                let r = WriteGuard::downgrade(w).await.expect("downgrade");
                (fence, r.fencing_token())
            });
            if pref == Preference::Reader {
                // A waiting writer does not announce itself under reader preference.
                tokio::time::sleep(ms(200)).await;
            } else {
                support::backend::until_waiters(1, async || {
                    c.rwlock(&name).preference(pref).inspect().await
                })
                .await;
            }
            first.release().await.expect("release");
            let (f2, after) = join("the second writer", waiter).await;
            assert!(f2 > f1, "{}: {pref:?}: hand-off fence {f2} <= {f1}", b.kind);
            assert_eq!(
                after, f2,
                "{}: {pref:?}: the handed-off writer's downgrade reports another fence",
                b.kind
            );
        }
    }
}

/// `lv` expires with the leader's lease at the time of the proclaim. A leader granted
/// by a hand-off holds only until its claim window (heartbeat deadline) when it proclaims,
/// and claims its full lease in the background with an attempt (not queue_extend, which is
/// the only path that lengthens `lv`). `leader()` must keep naming a live, renewing leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_granted_by_a_hand_off_stays_visible_while_it_renews() {
    for b in backends() {
        let c = b.client().await;
        for round in 0..4 {
            let name = format!("handoff-election:{round}");
            let election = c.election(&name).lease(secs(6)).heartbeat(ms(100));
            let first = election.campaign("first").await.expect("first");
            let second = c.election(&name).lease(secs(6)).heartbeat(ms(100));
            let waiting = tokio::spawn(async move { second.campaign("second").await });
            support::backend::until_waiters(1, async || c.fair_lock(&name).inspect().await).await;
            first.resign().await.expect("resign");
            let leader = join("the second candidate", waiting).await.expect("second");
            // Well within the leader's 6 s lease (its first renewal is due after a third of it).
            for i in 0..30 {
                let seen = election.leader().await.expect("leader");
                let ok = seen
                    .as_ref()
                    .is_some_and(|l| l.value == "second" && l.term == leader.term());
                assert!(
                    ok,
                    "{}: round {round}, check {i} ({} ms after the grant): leader() reports \
                     {seen:?} while the leader of term {} lives (is_held {})",
                    b.kind,
                    i * 50,
                    leader.term(),
                    leader.is_held()
                );
                tokio::time::sleep(ms(50)).await;
            }
            leader.resign().await.expect("resign");
        }
    }
}

/// a leader with a short lease renews for many leases; `lv` must never lapse before
/// the leader does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewing_leader_with_a_short_lease_stays_visible() {
    for b in backends() {
        let c = b.client().await;
        let election = c.election("short-leader").lease(ms(300));
        let mut leader = election.campaign("a").await.expect("campaign");
        for i in 0..40 {
            if i == 20 {
                leader.proclaim("b").await.expect("proclaim");
            }
            let seen = election.leader().await.expect("leader");
            // The local validity is a lower bound of the server's deadline: held after the
            // read means live at the read.
            let held = leader.is_held();
            assert!(
                !held || seen.as_ref().is_some_and(|l| l.term == leader.term()),
                "{}: check {i}: leader() reports {seen:?} while the leader lives",
                b.kind
            );
            assert!(
                held,
                "{}: check {i}: the leader lost its lease (load?)",
                b.kind
            );
            tokio::time::sleep(ms(50)).await;
        }
        leader.resign().await.expect("resign");
    }
}

/// (Redis) After ten leases of renewals, every live exclusive holder's fence counter
/// exists, is at least its fence, and has a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_live_exclusive_holder_keeps_a_fence_counter_at_least_its_fence() {
    let b = Backend::redis();
    let c = b.leased(ms(300)).await;
    let check = |name: &str, kind: &str, fence: u64, held: &dyn Fn() -> bool| {
        let key = c.keys(name).expect("keys").fence();
        let value = b.cli(&["GET", &key]);
        let pttl: i64 = b.cli(&["PTTL", &key]).parse().expect("PTTL");
        let counter: u64 = value.parse().unwrap_or(0);
        assert!(held(), "{kind}: the holder lost its lease (load?)");
        assert!(
            counter >= fence,
            "{kind}: a live holder of fence {fence} finds the counter at {value:?} (PTTL {pttl})"
        );
        assert!(pttl > 0, "{kind}: the counter has PTTL {pttl}");
    };
    let wait = ms(2000);

    let g = c.mutex("live:mutex").lock().await.expect("mutex");
    tokio::time::sleep(wait).await;
    check("live:mutex", "mutex", g.fencing_token(), &|| g.is_held());
    g.release().await.unwrap();

    let g = c.fair_lock("live:fair").lock().await.expect("fair");
    tokio::time::sleep(wait).await;
    check("live:fair", "fair lock", g.fencing_token(), &|| g.is_held());
    g.release().await.unwrap();

    let g = c
        .semaphore("live:sem", 3)
        .acquire_many(3)
        .await
        .expect("sem");
    tokio::time::sleep(wait).await;
    check(
        "live:sem",
        "semaphore (all permits)",
        g.fencing_token(),
        &|| g.is_held(),
    );
    g.release().await.unwrap();

    let m = c
        .multi_lock(["live:m1", "live:m2"])
        .lock()
        .await
        .expect("multi");
    tokio::time::sleep(wait).await;
    check(
        "live:m1",
        "multi-lock part",
        m.fencing_token("live:m1").unwrap(),
        &|| m.is_held(),
    );
    check(
        "live:m2",
        "multi-lock part",
        m.fencing_token("live:m2").unwrap(),
        &|| m.is_held(),
    );
    m.release().await.unwrap();

    let l = c.campaign_for("live:election", ms(300), "x").await;
    tokio::time::sleep(wait).await;
    check("live:election", "election", l.term(), &|| l.is_held());
    l.resign().await.unwrap();

    // A Mutex handed to a waiter (counter TTL: the waiter's claim window).
    let first = c.mutex("live:handoff").lock().await.expect("first");
    let lock = c.mutex("live:handoff");
    let waiter = tokio::spawn(async move { lock.lock().await.expect("second") });
    support::backend::until_waiters(1, async || c.mutex("live:handoff").inspect().await).await;
    first.release().await.unwrap();
    let second = join("the waiter", waiter).await;
    tokio::time::sleep(wait).await;
    check(
        "live:handoff",
        "mutex hand-off",
        second.fencing_token(),
        &|| second.is_held(),
    );
    second.release().await.unwrap();
}

/// Semaphore resized under its holders. A grant of all permits takes a fence; the
/// count grows, a shared permit joins; it shrinks again, and the next holder of all permits
/// must take a fence above every earlier one (and a shared permit's reported fence must not
/// exceed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_across_set_permits() {
    for b in backends() {
        let c = b.client().await;
        let sem = c.semaphore("resized", 1);
        let a = sem.acquire().await.expect("a");
        let fa = a.fencing_token();
        sem.set_permits(2).await.expect("grow");
        let s = c.semaphore("resized", 2);
        let shared = s.acquire().await.expect("shared");
        assert_eq!(
            shared.fencing_token(),
            fa,
            "{}: a shared permit reports the last exclusive fence",
            b.kind
        );
        a.release().await.unwrap();
        sem.set_permits(1).await.expect("shrink");
        let one = c.semaphore("resized", 1);
        let waiting = tokio::spawn(async move { one.acquire().await.expect("c") });
        support::backend::until_waiters(1, async || c.semaphore("resized", 1).inspect().await)
            .await;
        shared.release().await.unwrap();
        let g = join("the waiter", waiting).await;
        assert!(
            g.fencing_token() > fa,
            "{}: the holder of the one permit after resizing got fence {} <= {fa}",
            b.kind,
            g.fencing_token()
        );
        g.release().await.unwrap();
    }
}

/// A downgraded reader keeps the counter alive as long as it renews (the counter lives as long
/// as the longest hold), so a reader arriving long after the writer's lease still reports the
/// writer's fence; once every hold ended and the counter lapsed, the next writer's fence is
/// above both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_keeps_the_fence_counter_and_fences_rise_after_it_lapsed() {
    for b in backends() {
        let c = b.leased(ms(300)).await;
        let w = c.rwlock("reader-left").write().await.expect("write");
        let f1 = w.fencing_token();
        let r = WriteGuard::downgrade(w).await.expect("downgrade");
        tokio::time::sleep(ms(1500)).await;
        assert!(r.is_held(), "{}: the downgraded reader renews", b.kind);
        let key = c.keys("reader-left").expect("keys").fence();
        if !b.is_memory() {
            assert_eq!(
                b.cli(&["EXISTS", &key]),
                "1",
                "the reader keeps the counter"
            );
        }
        let late = c.rwlock("reader-left").read().await.expect("late reader");
        assert_eq!(
            late.fencing_token(),
            f1,
            "{}: the last writer's fence",
            b.kind
        );
        r.release().await.unwrap();
        late.release().await.unwrap();
        if !b.is_memory() {
            eventually("the counter lapses after the last hold", async || {
                b.cli(&["EXISTS", &key]) == "0"
            })
            .await;
        } else {
            tokio::time::sleep(ms(400)).await;
        }
        let w2 = c.rwlock("reader-left").write().await.expect("write 2");
        assert!(
            w2.fencing_token() > f1,
            "{}: writer after the counter lapsed got {} (first writer {f1})",
            b.kind,
            w2.fencing_token()
        );
        w2.release().await.unwrap();
    }
}

/// (Redis) A program of every kind, including waits cancelled mid-way, forced
/// releases and an abandoned leader, must leave no key without a TTL (but a stored count),
/// and no key at all once the leases lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_is_left_after_cancelled_waits_and_forced_releases() {
    for b in [Backend::redis()] {
        let c = b
            .client_with(LockClient::builder().lease(ms(200)).heartbeat(ms(200)))
            .await;
        let op = b.client().await;
        // Waits cancelled while another holds.
        let held = c.mutex("gone:m").lock().await.unwrap();
        let _ = tokio::time::timeout(ms(100), c.mutex("gone:m").lock()).await;
        let _ = tokio::time::timeout(ms(100), c.rwlock("gone:m").write()).await;
        held.release().await.unwrap();
        let held = c.fair_lock("gone:f").lock().await.unwrap();
        let _ = tokio::time::timeout(ms(100), c.fair_lock("gone:f").lock()).await;
        let _ = tokio::time::timeout(ms(100), c.semaphore("gone:f", 1).acquire()).await;
        drop(held);
        let leader = c.election("gone:e").campaign("a").await.unwrap();
        let _ = tokio::time::timeout(ms(100), c.election("gone:e").campaign("b")).await;
        // Forced releases: of a held name, of an idle name, of one holder.
        let stuck = c.mutex("gone:forced").lock().await.unwrap();
        op.force_release("gone:forced").await.unwrap();
        drop(stuck);
        op.force_release("gone:never").await.unwrap();
        let sem = c.semaphore("gone:s", 2);
        let (p1, p2) = (sem.acquire().await.unwrap(), sem.acquire().await.unwrap());
        let prefix = sem.inspect().await.unwrap().holders[0].token_prefix.clone();
        op.force_release_holder("gone:s", &prefix).await.unwrap();
        drop((p1, p2));
        let w = c.rwlock("gone:d").write().await.unwrap();
        let r = WriteGuard::downgrade(w).await.unwrap();
        drop(r);
        drop(leader);
        if !b.is_memory() {
            let keys = b.cli(&["KEYS", "*gone*"]);
            for key in keys.lines().filter(|k| !k.is_empty()) {
                let ttl = b.cli(&["PTTL", key]);
                assert_ne!(ttl, "-1", "{key} has no TTL (keys: {keys})");
            }
            eventually("every key of the program expires", async || {
                b.cli(&["KEYS", "*gone*"]).is_empty()
            })
            .await;
        }
    }
}

/// `force_release_holder` evicting the last reader of a name without a fence counter reports
/// a bumped fence ("the fence counter after the eviction"); a writer right after must take a
/// fence above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_evicting_the_last_reader_takes_a_fence_above_the_eviction() {
    use redis_locks::HolderEviction;
    for b in backends() {
        let c = b.client().await;
        let op = b.client().await;
        for i in 0..200 {
            let name = format!("evicted-reader:{i}");
            let rw = c.rwlock(&name);
            let reader = rw.read().await.expect("read");
            let prefix = rw.inspect().await.expect("inspect").holders[0]
                .token_prefix
                .clone();
            let HolderEviction::Evicted {
                fence: evicted,
                fence_bumped: true,
            } = op
                .force_release_holder(&name, &prefix)
                .await
                .expect("evict")
            else {
                panic!("{}: the lone reader was not evicted with a bump", b.kind);
            };
            let w = rw.try_write().await.expect("write");
            assert!(
                w.fencing_token() > evicted,
                "{}: round {i}: the writer after evicting the last reader got fence {} which \
                 is not above the eviction's ({evicted})",
                b.kind,
                w.fencing_token()
            );
            w.release().await.expect("release");
            drop(reader);
        }
    }
}

/// (Redis, upgrade) A fence counter written by a release before counters expired (a bare
/// INCR, no TTL) gets a TTL once its name is used at all: read-locked, shared by a permit, or
/// force-released (`keep_fence` adds a TTL to a key without one; `bump_fence` writes one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_left_by_the_previous_release_gets_a_ttl_once_touched() {
    let b = Backend::redis();
    let c = b.leased(ms(200)).await;
    let mut permanent = Vec::new();
    for (name, touch) in [("old:read", 0), ("old:permit", 1), ("old:forced", 2)] {
        let key = c.keys(name).expect("keys").fence();
        // What the previous release left: INCR, never expiring.
        assert_eq!(b.cli(&["SET", &key, "41"]), "OK");
        match touch {
            0 => c
                .rwlock(name)
                .read()
                .await
                .unwrap()
                .release()
                .await
                .map(drop)
                .unwrap(),
            1 => c
                .semaphore(name, 3)
                .acquire()
                .await
                .unwrap()
                .release()
                .await
                .map(drop)
                .unwrap(),
            _ => drop(c.force_release(name).await.unwrap()),
        }
        if b.cli(&["PTTL", &key]) == "-1" {
            permanent.push(format!("{name} = {}", b.cli(&["GET", &key])));
        }
    }
    assert!(
        permanent.is_empty(),
        "counters left by the previous release still never expire after their names were \
         used: {permanent:?}"
    );
}
