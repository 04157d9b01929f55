//! Fencing tokens across data loss, and names that leave nothing behind: every exclusive
//! grant's fence is above the previous one of its name and at least the server's clock in
//! microseconds, so fences keep rising when the counter is lost (a restart without
//! persistence, `FLUSHALL`, an expired counter); and once every hold of a name has ended and
//! its leases have lapsed, no key of that name is left (on Redis, and in memory).

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_locks::{InMemory, LockClient};

use support::backend::{eventually, Backend};
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
    let c = b
        .client_with(LockClient::builder().lease(Duration::from_millis(200)))
        .await;
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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let leader = runtime.block_on(async {
            let election = c.election(&election).lease(Duration::from_millis(300));
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
        .client_with(
            LockClient::builder()
                .lease(Duration::from_millis(300))
                .auto_renew(false),
        )
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
        .client_with(
            LockClient::builder()
                .lease(Duration::from_millis(300))
                .auto_renew(false),
        )
        .expect("client");
    use_every_kind_and_abandon_some(&c, "idle").await;
    assert!(store.names_kept() > 0, "the abandoned holds keep state");
    eventually("every idle name is dropped", async || {
        store.names_kept() == 0
    })
    .await;
}
