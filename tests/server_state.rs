//! Changes of the server's state behind the clients' backs, and state the clients did not
//! write: fast paths facing stale or foreign entries and keys of the wrong type, an
//! operator's `force_release` in between, `FLUSHALL`, `SCRIPT FLUSH` storms, a slow or
//! paused server (`DEBUG SLEEP`, `CLIENT PAUSE`), a restart that comes back empty, and the
//! counter tokens the fast paths rely on.
//!
//! Every test asserts a property through the public API (handles, guards, `inspect`,
//! `force_release`), on a private real redis-server and, where the stores are meant to agree,
//! on the in-memory store: never two holders, a guard never trusts past its server lease, a
//! lost lease is signalled, and holds made afterwards are renewed.

mod support;
use support::quick::in_time;
use support::quick::Quick;
use support::Granted;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis_locks::testing::store::RedisStore;
use redis_locks::LockClient;
use tokio::time::{sleep, timeout, Instant};

use support::backend::{eventually, Backend};
use support::honest::assert_honest;
use support::time::{ms, secs, server_ms};
use support::RedisServer;

// ------------------------------------------------------------------------------------------
// fast paths against state they must hand to the general logic (Redis)
// ------------------------------------------------------------------------------------------

fn granted<G>(r: &redis_locks::Result<G>) -> bool {
    r.is_ok()
}

/// Stale and foreign state written by hand in front of the fast paths: an expired writer
/// record and reader entry that outlive their deadlines (key TTLs are cleanup only), a live
/// foreign writer, a fair queue holding a waiter whose heartbeat lapsed, a live waiter, an
/// expired holder entry, a Semaphore's capacity marker. Each attempt must get what the
/// general logic gives from that state, and never a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fast_paths_against_stale_and_foreign_state() {
    let server = support::RedisServer::start();
    let c = server.leased(ms(2_000)).await;
    let o = server.leased(ms(2_000)).await;
    let foreign = "f".repeat(32);

    // (a) An expired writer record and an expired reader entry, both still stored.
    let name = "server-state-stale-w";
    let k = c.keys(name).expect("keys");
    let now = server_ms(&server);
    server.cli(&[
        "SET",
        &k.key("w"),
        &format!("{}|{foreign}", now - 1_000),
        "PX",
        "60000",
    ]);
    server.cli(&["ZADD", &k.key("r"), &(now - 500).to_string(), "oldreader"]);
    server.cli(&["PEXPIRE", &k.key("r"), "60000"]);
    let g = c
        .mutex(name)
        .try_lock()
        .await
        .granted("mutex")
        .expect("(a) a mutex over an expired writer record is granted");
    assert!(
        o.mutex(name).try_lock().await.granted("m2").is_none(),
        "(a) second mutex"
    );
    assert!(
        o.rwlock(name).try_read().await.granted("r").is_none(),
        "(a) reader beside it"
    );
    assert!(
        !granted(&o.fair_lock(name).try_lock().await),
        "(a) fair lock beside it"
    );
    let info = o.mutex(name).inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "(a) {:?}", info.holders);
    assert!(g.release().await.expect("release"), "(a) release");
    let r = o
        .rwlock(name)
        .try_read()
        .await
        .granted("read")
        .expect("(a) read after release");
    assert!(
        c.mutex(name).try_lock().await.granted("m").is_none(),
        "(a) writer beside a reader"
    );
    assert!(r.release().await.expect("release"));

    // (b) A live foreign writer record: nobody else gets in, of either family.
    let name = "server-state-foreign-w";
    let k = c.keys(name).expect("keys");
    let now = server_ms(&server);
    server.cli(&[
        "SET",
        &k.key("w"),
        &format!("{}|{foreign}", now + 60_000),
        "PX",
        "60000",
    ]);
    assert!(
        c.mutex(name).try_lock().await.granted("m").is_none(),
        "(b) mutex"
    );
    assert!(
        c.rwlock(name).try_read().await.granted("r").is_none(),
        "(b) read"
    );
    assert!(
        !granted(&c.fair_lock(name).try_lock().await),
        "(b) fair lock"
    );
    assert!(
        !granted(&c.semaphore(name, 3).try_acquire().await),
        "(b) permit"
    );

    // (c) A fair queue whose only waiter's heartbeat lapsed, behind a `=1` marker left by an
    // earlier FairLock: the next FairLock is granted, exclusively.
    let name = "server-state-lapsed-waiter";
    let k = c.keys(name).expect("keys");
    let g = c.fair_lock(name).lock().await.expect("fair");
    assert!(g.release().await.expect("release"));
    let now = server_ms(&server);
    server.cli(&["ZADD", &k.key("q"), "1", "deadwaiter"]);
    server.cli(&[
        "ZADD",
        &k.key("hb"),
        &(now - 1_000).to_string(),
        "deadwaiter",
    ]);
    server.cli(&["SET", &k.key("tk"), "1"]);
    for s in ["q", "hb", "tk"] {
        server.cli(&["PEXPIRE", &k.key(s), "60000"]);
    }
    let g = c
        .fair_lock(name)
        .try_lock()
        .await
        .granted("fair")
        .expect("(c) granted past a lapsed waiter");
    assert!(
        o.fair_lock(name).try_lock().await.granted("f2").is_none(),
        "(c) second fair"
    );
    assert!(
        !granted(&o.mutex(name).try_lock().await),
        "(c) mutex beside a fair lock"
    );
    assert!(
        !granted(&o.rwlock(name).try_read().await),
        "(c) reader beside a fair lock"
    );
    assert!(g.release().await.expect("release"), "(c) release");

    // (d) A live waiter in the queue: a new FairLock claim does not overtake it.
    let now = server_ms(&server);
    server.cli(&["ZADD", &k.key("q"), "5", "livewaiter"]);
    server.cli(&[
        "ZADD",
        &k.key("hb"),
        &(now + 60_000).to_string(),
        "livewaiter",
    ]);
    server.cli(&["SET", &k.key("tk"), "5"]);
    let f = c.fair_lock(name).try_lock().await;
    assert!(
        !granted(&f),
        "(d) a FairLock overtook a live waiter: {:?}",
        f.as_ref().map(|g| g.fencing_token())
    );
    drop(f);
    server.cli(&["DEL", &k.key("q"), &k.key("hb"), &k.key("tk")]);

    // (e) An expired holder entry that outlives its deadline, under a `=1` marker: a FairLock
    // and a mutex see a free lock (one after the other), never both.
    let name = "server-state-ghost-holder";
    let k = c.keys(name).expect("keys");
    let now = server_ms(&server);
    server.cli(&["ZADD", &k.key("h"), &(now - 100).to_string(), "ghost"]);
    server.cli(&["PEXPIRE", &k.key("h"), "60000"]);
    server.cli(&["SET", &k.key("cap"), "=1", "PX", "60000"]);
    let m = c
        .mutex(name)
        .try_lock()
        .await
        .granted("mutex")
        .expect("(e) mutex over an expired holder entry");
    assert!(
        !granted(&o.fair_lock(name).try_lock().await),
        "(e) fair beside a mutex"
    );
    assert!(m.release().await.expect("release"));
    let f = o
        .fair_lock(name)
        .try_lock()
        .await
        .granted("fair")
        .expect("(e) fair over an expired holder entry");
    assert!(
        !granted(&c.mutex(name).try_lock().await),
        "(e) mutex beside a fair lock"
    );
    assert!(f.release().await.expect("release"));

    // (f) A Semaphore(2)'s `~2` marker left behind: a FairLock may take the name over when
    // the queue is idle; a Semaphore(2) permit is then refused (capacity), not granted.
    let name = "server-state-sem-marker";
    let p = c.semaphore(name, 2).acquire().await.expect("permit");
    assert!(p.release().await.expect("release"));
    let f = c
        .fair_lock(name)
        .try_lock()
        .await
        .granted("fair")
        .expect("(f) fair lock over an idle `~2` marker");
    let p2 = o.semaphore(name, 2).try_acquire().await;
    assert!(!granted(&p2), "(f) a Semaphore(2) permit beside a FairLock");
    drop(p2);
    assert!(f.release().await.expect("release"));
}

/// A key of the wrong type (a list) at each key of a lock, in front of every fast path: the
/// attempts of the two families never both hold, a reader is never granted beside a mutex,
/// and nothing is granted without its fence counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keys_of_the_wrong_type_never_grant_two_holders() {
    let server = support::RedisServer::start();
    let c = server.leased(ms(5_000)).await;
    let mut table = Vec::new();
    for suffix in ["w", "r", "wq", "h", "q", "hb", "tk", "cap", "fence"] {
        let name = format!("server-state-type-{suffix}");
        let k = c.keys(&name).expect("keys");
        server.cli(&["RPUSH", &k.key(suffix), "x"]);
        let m = c.mutex(&name).try_lock().await;
        let f = c.fair_lock(&name).try_lock().await;
        let r = c.rwlock(&name).try_read().await;
        let s = c.semaphore(&name, 3).try_acquire().await;
        let row = (suffix, granted(&m), granted(&f), granted(&r), granted(&s));
        table.push(row);
        let exclusive_and_other = (granted(&m) && (granted(&f) || granted(&r) || granted(&s)))
            || (granted(&f) && (granted(&r) || granted(&s)));
        assert!(
            !exclusive_and_other,
            "wrong-type `{suffix}`: two holders (mutex, fair, read, permit) = {row:?}"
        );
        if suffix == "fence" {
            assert_eq!(
                row,
                ("fence", false, false, false, false),
                "a grant without a fence counter"
            );
        }
        drop((m, f, r, s));
    }
    eprintln!("grants by wrong-type key (mutex, fair, read, permit): {table:?}");
}

/// 8 clients (and their clones) acquire 4 000 holds concurrently on distinct names: every
/// token is distinct, and none is a suffix of another (the general release matches a stale
/// writer record by its `|token` suffix).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counter_tokens_are_unique_across_clients() {
    let b = Backend::memory();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let c = b.client_with(LockClient::builder().auto_renew(false)).await;
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for i in 0..500 {
                let g = c
                    .clone()
                    .mutex(&format!("server-state-tok-{t}-{i}"))
                    .lock()
                    .await
                    .expect("lock");
                tokens.push(g.token());
                assert!(g.release().await.expect("release"));
            }
            tokens
        }));
    }
    let mut all = std::collections::HashSet::new();
    for t in tasks {
        for tok in t.await.expect("task") {
            assert!(all.insert(tok.clone()), "token {tok} issued twice");
        }
    }
    assert_eq!(all.len(), 4_000);
    let generated: std::collections::HashSet<String> =
        all.iter().map(|t| t[..32].to_owned()).collect();
    assert_eq!(generated.len(), 4_000, "the generated parts repeat");
}

// ------------------------------------------------------------------------------------------
// force_release in between; everything forgotten (FLUSHALL)
// ------------------------------------------------------------------------------------------

/// A holds (lease 900 ms, renewals every 300 ms); an operator force-releases; B takes the
/// name on the fast path. A must signal the loss at its next renewal (within ~300 ms), its
/// release must say it held nothing, and B must stay the only holder, with a larger fence.
async fn force_release_in_between_is_signalled(b: Backend) {
    let a = b.leased(ms(900)).await;
    let bc = b.leased(ms(900)).await;
    let op = b.client().await;
    for family in ["mutex", "fair", "sem1", "write"] {
        let name = format!("server-state-force-{family}");
        macro_rules! run {
            ($ga:expr, $gb:expr, $inspect:expr) => {{
                let ga = $ga;
                let fa = ga.fencing_token();
                op.force_release(&name).await.expect("force_release");
                let gb = $gb;
                let forced = Instant::now();
                assert!(gb.fencing_token() > fa, "[{}] {family}: fence", b.kind);
                timeout(ms(700), ga.lost()).await.unwrap_or_else(|_| {
                    panic!("[{}] {family}: the loss was not signalled", b.kind)
                });
                assert!(!ga.is_held(), "[{}] {family}: A still held", b.kind);
                let signalled = forced.elapsed();
                assert!(
                    !ga.release().await.expect("release"),
                    "[{}] {family}: A's release said it held the lock",
                    b.kind
                );
                sleep(ms(1_200)).await;
                let info = $inspect;
                assert_eq!(
                    info.holders.len(),
                    1,
                    "[{}] {family}: {:?}",
                    b.kind,
                    info.holders
                );
                assert!(gb.is_held(), "[{}] {family}: B lost", b.kind);
                assert!(
                    gb.release().await.expect("release"),
                    "[{}] {family}",
                    b.kind
                );
                signalled
            }};
        }
        let _signalled = match family {
            "mutex" => run!(
                a.mutex(&name).lock().await.expect("a"),
                bc.mutex(&name)
                    .try_lock()
                    .await
                    .expect("b after force_release"),
                op.mutex(&name).inspect().await.expect("inspect")
            ),
            "fair" => run!(
                a.fair_lock(&name).lock().await.expect("a"),
                bc.fair_lock(&name)
                    .try_lock()
                    .await
                    .expect("b after force_release"),
                op.fair_lock(&name).inspect().await.expect("inspect")
            ),
            "sem1" => run!(
                a.semaphore(&name, 1).acquire().await.expect("a"),
                bc.semaphore(&name, 1)
                    .try_acquire()
                    .await
                    .expect("b after force_release"),
                op.semaphore(&name, 1).inspect().await.expect("inspect")
            ),
            _ => run!(
                a.rwlock(&name).write().await.expect("a"),
                bc.rwlock(&name)
                    .try_write()
                    .await
                    .expect("b after force_release"),
                op.rwlock(&name).inspect().await.expect("inspect")
            ),
        };
    }
}

both_backends!(force_release_in_between_is_signalled);

/// 100 mutex holds and 20 FairLock holds (lease 900 ms); the server forgets everything
/// (`FLUSHALL`). Every guard must signal the loss at its next renewal's refusal, before the
/// lease it trusted ran out (told by the guard's own instants, not by a clock's bound), and
/// holds made afterwards are still renewed (the driver survived the refusals).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_flushall_is_signalled_to_every_guard() {
    let server = support::RedisServer::start();
    let c = server.leased(ms(900)).await;
    let mut ms_ = Vec::new();
    let mut fs = Vec::new();
    for i in 0..100 {
        ms_.push(c.locked(&format!("server-state-flush-m{i}")).await);
    }
    for i in 0..20 {
        fs.push(c.fair_locked(&format!("server-state-flush-f{i}")).await);
    }
    sleep(ms(150)).await;
    // What each guard trusts, read as (its trusted end, whether it still holds): the end first,
    // so that an end read while the guard still held is one from before its loss.
    type View<'g> = (&'g str, Box<dyn Fn() -> (Instant, bool) + 'g>);
    let views: Vec<View<'_>> = ms_
        .iter()
        .map(|g| -> View<'_> {
            let read = move || (g.valid_until(), g.is_held());
            (g.name(), Box::new(read))
        })
        .chain(fs.iter().map(|g| -> View<'_> {
            let read = move || (g.valid_until(), g.is_held());
            (g.name(), Box::new(read))
        }))
        .collect();
    let mut trusted: Vec<Instant> = views
        .iter()
        .map(|(name, view)| match view() {
            (end, true) => end,
            (_, false) => panic!("{name}: lost before FLUSHALL"),
        })
        .collect();
    server.cli(&["FLUSHALL"]);
    // The trusted end only grows (by renewals) while a guard holds; follow it until every
    // guard has signalled its loss.
    eventually("every guard signals its loss after FLUSHALL", async || {
        let mut all_lost = true;
        for ((_, view), trusted) in views.iter().zip(trusted.iter_mut()) {
            if let (end, true) = view() {
                *trusted = end;
                all_lost = false;
            }
        }
        all_lost
    })
    .await;
    // A refused renewal ends the trust at the refusal, before the end the guard trusted; a
    // lease that merely ran out ends it at that end.
    for ((name, view), trusted) in views.iter().zip(&trusted) {
        let (end, _) = view();
        assert!(
            end < *trusted,
            "{name}: the loss was signalled only when the lease it trusted ran out, not by \
             a refused renewal"
        );
    }
    drop(views);
    drop((ms_, fs));
    let g = c.locked("server-state-flush-after").await;
    sleep(ms(2_500)).await;
    assert!(g.is_held(), "a hold made after the flush was not renewed");
    assert!(g.release().await.expect("release"));
}

// ------------------------------------------------------------------------------------------
// the script cache flushed
// ------------------------------------------------------------------------------------------

/// `SCRIPT FLUSH` every 20 ms while three clients contend for one mutex (with renewals every
/// 100 ms): never two guards inside at once. (Holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_flush_storm_keeps_exclusion() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let url = server.url();
    let flusher = RedisStore::connect(&url).await.expect("connect");
    let inside = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + secs(3);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = LockClient::connect(&url).await.expect("connect");
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let mutex = client
                .mutex("server-state-script-flush")
                .lease(ms(300))
                .renew_every(ms(100));
            let mut rounds = 0u32;
            while Instant::now() < end {
                let g = mutex.lock().await.expect("lock");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                sleep(ms(15)).await;
                assert!(g.is_held());
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release");
                rounds += 1;
            }
            rounds
        }));
    }
    while Instant::now() < end {
        let _: redis::Value = flusher
            .query(redis::cmd("SCRIPT").arg("FLUSH"))
            .await
            .expect("SCRIPT FLUSH");
        sleep(ms(20)).await;
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    assert!(total > 10, "setup: only {total} rounds");
}

/// `SCRIPT FLUSH` every 15 ms for 2.5 s while holds of every primitive are renewed every
/// 100 ms, and two clients take and release a FairLock and a Semaphore(2) on the fast paths
/// (counting who is inside): every hold stays held, never two FairLock holders, never three
/// permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_script_flush_during_renewals_and_fast_paths() {
    let server = support::RedisServer::start();
    let url = server.url();
    let c = LockClient::builder()
        .lease(ms(300))
        .connect(&url)
        .await
        .expect("connect");
    let m = c.mutex("server-state-sf-m").lock().await.expect("m");
    let f = c.fair_lock("server-state-sf-f").lock().await.expect("f");
    let p = c
        .semaphore("server-state-sf-s", 2)
        .acquire_many(2)
        .await
        .expect("s");
    let r = c.rwlock("server-state-sf-r").read().await.expect("r");
    let w = c.rwlock("server-state-sf-w").write().await.expect("w");
    let end = Instant::now() + ms(2_500);
    let fair_inside = Arc::new(AtomicUsize::new(0));
    let sem_inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = LockClient::builder()
            .lease(ms(300))
            .connect(&url)
            .await
            .expect("connect");
        let (fi, si) = (fair_inside.clone(), sem_inside.clone());
        tasks.push(tokio::spawn(async move {
            let fair = client.fair_lock("server-state-sf-contended");
            let sem = client.semaphore("server-state-sf-contended-sem", 2);
            let mut rounds = 0u32;
            while Instant::now() < end {
                let g = fair.lock().await.expect("fair");
                assert_eq!(fi.fetch_add(1, Ordering::SeqCst), 0, "two FairLock holders");
                sleep(ms(3)).await;
                assert!(g.is_held());
                fi.fetch_sub(1, Ordering::SeqCst);
                assert!(g.release().await.expect("release"));
                // Both permits in one claim: two clients taking one each and then waiting
                // for a second would wait on each other forever.
                let both = sem.acquire_many(2).await.expect("permits");
                let before = si.fetch_add(2, Ordering::SeqCst);
                assert!(before == 0, "{} permits beside two", before);
                sleep(ms(3)).await;
                si.fetch_sub(2, Ordering::SeqCst);
                assert!(both.release().await.expect("release"));
                rounds += 1;
            }
            rounds
        }));
    }
    while Instant::now() < end {
        let out = server.cli(&["SCRIPT", "FLUSH"]);
        assert_eq!(out, "OK");
        sleep(ms(15)).await;
        let held = [
            m.is_held(),
            f.is_held(),
            p.is_held(),
            r.is_held(),
            w.is_held(),
        ];
        assert_eq!(
            held, [true; 5],
            "mutex, fair, permits, read, write under SCRIPT FLUSH"
        );
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    assert!(total > 10, "setup: only {total} rounds");
    for ok in [
        m.release().await.expect("r"),
        f.release().await.expect("r"),
        p.release().await.expect("r"),
        r.release().await.expect("r"),
        w.release().await.expect("r"),
    ] {
        assert!(ok, "a hold renewed under SCRIPT FLUSH was gone at release");
    }
}

// ------------------------------------------------------------------------------------------
// a slow or paused server, a restart that comes back empty
// ------------------------------------------------------------------------------------------

/// 60 holds of four primitives (lease 1.5 s, renewed every 500 ms) while the server stalls
/// repeatedly (`DEBUG SLEEP 0.35` five times, then `CLIENT PAUSE 700 WRITE`): every guard stays
/// held, and sampled guards never trust past their server lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_slow_server_keeps_holds_and_guards_honest() {
    let server = Arc::new(support::RedisServer::start());
    let c = server.leased(ms(1_500)).await;
    let o = LockClient::connect(&server.url()).await.expect("connect");
    let mut mutexes = Vec::new();
    let mut fairs = Vec::new();
    let mut permits = Vec::new();
    let mut writes = Vec::new();
    for i in 0..15 {
        mutexes.push(c.locked(&format!("server-state-slow-m{i}")).await);
        fairs.push(c.fair_locked(&format!("server-state-slow-f{i}")).await);
        permits.push(
            c.semaphore(&format!("server-state-slow-s{i}"), 2)
                .acquire()
                .await
                .expect("s"),
        );
        writes.push(
            c.rwlock(&format!("server-state-slow-w{i}"))
                .write()
                .await
                .expect("w"),
        );
    }
    let srv = server.clone();
    let stalls = tokio::task::spawn_blocking(move || {
        for _ in 0..5 {
            srv.cli(&["DEBUG", "SLEEP", "0.35"]);
            std::thread::sleep(ms(300));
        }
        srv.cli(&["CLIENT", "PAUSE", "700", "WRITE"]);
        std::thread::sleep(ms(900));
    });
    let end = Instant::now() + ms(4_800);
    let mut checks = 0;
    while Instant::now() < end {
        for (i, g) in mutexes.iter().enumerate().step_by(4) {
            let until = g.valid_until();
            let info = o.mutex(g.name()).inspect().await.expect("inspect");
            assert_honest(&format!("mutex {i}"), until, &info, Instant::now());
            checks += 1;
        }
        for (i, g) in fairs.iter().enumerate().step_by(4) {
            let until = g.valid_until();
            let info = o.fair_lock(g.name()).inspect().await.expect("inspect");
            assert_honest(&format!("fair {i}"), until, &info, Instant::now());
        }
        sleep(ms(50)).await;
    }
    stalls.await.expect("stalls");
    assert!(checks > 10, "setup: {checks} checks");
    let lost: Vec<String> = mutexes
        .iter()
        .map(|g| (g.name().to_owned(), g.is_held()))
        .chain(fairs.iter().map(|g| (g.name().to_owned(), g.is_held())))
        .chain(permits.iter().map(|g| (g.name().to_owned(), g.is_held())))
        .chain(writes.iter().map(|g| (g.name().to_owned(), g.is_held())))
        .filter(|(_, held)| !held)
        .map(|(n, _)| n)
        .collect();
    assert!(lost.is_empty(), "lost under a slow server: {lost:?}");
}

/// `CLIENT PAUSE 1500 WRITE` right after the holds' renewals (lease 600 ms): the renewals
/// queue up behind the pause while the server's leases run out (read-only `inspect` still
/// answers). No guard may trust past its server lease meanwhile; once the pause ends, the
/// late renewals are refused, every guard has signalled the loss, and the names are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_client_pause_past_the_lease_keeps_guards_honest() {
    let server = Arc::new(support::RedisServer::start());
    let c = server.leased(ms(600)).await;
    let o = LockClient::connect(&server.url()).await.expect("connect");
    let m = c.mutex("server-state-pause-m").lock().await.expect("m");
    let f = c.fair_lock("server-state-pause-f").lock().await.expect("f");
    // Load the inspect scripts on the observer's connection first: a SCRIPT LOAD waits out a
    // write pause, and every later reply on that connection behind it.
    o.mutex_info("server-state-pause-m").await;
    o.fair_lock("server-state-pause-f")
        .inspect()
        .await
        .expect("inspect");
    sleep(ms(250)).await;
    let srv = server.clone();
    let pause = tokio::task::spawn_blocking(move || srv.cli(&["CLIENT", "PAUSE", "1500", "WRITE"]));
    let paused = Instant::now();
    let mut checks = 0;
    while paused.elapsed() < ms(1_400) {
        let (mu, fu) = (m.valid_until(), f.valid_until());
        if let Ok(Ok(info)) = timeout(ms(300), o.mutex("server-state-pause-m").inspect()).await {
            assert_honest("mutex during the pause", mu, &info, Instant::now());
            checks += 1;
        }
        if let Ok(Ok(info)) = timeout(ms(300), o.fair_lock("server-state-pause-f").inspect()).await
        {
            assert_honest("fair during the pause", fu, &info, Instant::now());
        }
        sleep(ms(20)).await;
    }
    assert_eq!(pause.await.expect("pause"), "OK");
    assert!(
        checks > 5,
        "setup: inspect did not answer during the pause ({checks})"
    );
    in_time(ms(2_000), "mutex loss signalled", m.lost()).await;
    in_time(ms(2_000), "fair loss signalled", f.lost()).await;
    sleep(ms(500)).await;
    assert!(
        !m.is_held() && !f.is_held(),
        "a guard holds again after the pause"
    );
    assert!(
        o.mutex("server-state-pause-m").try_lock().await.is_ok(),
        "mutex name not free"
    );
    assert!(
        o.fair_lock("server-state-pause-f").try_lock().await.is_ok(),
        "fair name not free"
    );
}

/// The server restarts empty (no persistence) 300 ms into 20 holds of a 6 s lease (renewals
/// every 2 s): the next renewal of each is refused, so every guard signals the loss well
/// before its 6 s trust ends, and holds made afterwards are renewed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restart_empty_is_signalled_at_the_next_renewal() {
    let mut server = support::RedisServer::start();
    let c = server.leased(ms(6_000)).await;
    let mut guards: Vec<Box<dyn Fn() -> bool + Send>> = Vec::new();
    let mut lost = Vec::new();
    for i in 0..10 {
        let g = Arc::new(c.locked(&format!("server-state-restart-m{i}")).await);
        let g2 = g.clone();
        guards.push(Box::new(move || g2.is_held()));
        lost.push(tokio::spawn(async move {
            g.lost().await;
            Instant::now()
        }));
        let g = Arc::new(c.fair_locked(&format!("server-state-restart-f{i}")).await);
        let g2 = g.clone();
        guards.push(Box::new(move || g2.is_held()));
        lost.push(tokio::spawn(async move {
            g.lost().await;
            Instant::now()
        }));
    }
    let granted = Instant::now();
    sleep(ms(300)).await;
    server.restart();
    for (i, l) in lost.into_iter().enumerate() {
        let at = timeout(ms(4_500), l)
            .await
            .unwrap_or_else(|_| panic!("guard {i}: loss not signalled 4.8 s after the restart"))
            .expect("task");
        assert!(
            at < granted + ms(5_000),
            "guard {i}: signalled only {:?} after the grant (trust ends at ~6 s)",
            at - granted
        );
    }
    assert!(guards.iter().all(|held| !held()), "a guard still held");
    let g = c.lock_for("server-state-restart-after", ms(600)).await;
    sleep(ms(2_000)).await;
    assert!(g.is_held(), "a hold made after the restart was not renewed");
}
