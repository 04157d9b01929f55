//! Quorum (Redlock) mode on three real, independent redis-servers.

mod support;
use support::backend::within_ok;
use support::quick::downgraded;
use support::quick::{soon, Quick};
use support::time::{ms, secs};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use redis_locks::{Error, LockClient, LockClientBuilder, Preference, Verdict};
use support::backend::EVENTUALLY;
use support::history::{History, Kind};
use support::RedisServer;

/// Three independent servers.
struct Quorum {
    servers: Vec<RedisServer>,
}

impl Quorum {
    fn start() -> Quorum {
        Quorum {
            servers: (0..3).map(|_| RedisServer::start()).collect(),
        }
    }

    /// A new client (its own connections) on all three servers.
    async fn client(&self) -> LockClient {
        self.client_with(LockClient::builder()).await
    }

    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        let urls: Vec<String> = self.servers.iter().map(RedisServer::url).collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        builder.quorum(&urls).await.expect("connect quorum")
    }
}

/// `doctor` in quorum mode judges every server's settings (here one of three may evict lock
/// keys: the report is unfit and names it) and runs its probes over the majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_judges_every_server_of_a_quorum() {
    let q = Quorum::start();
    q.servers[1].cli(&["CONFIG", "SET", "maxmemory", "10mb"]);
    q.servers[1].cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let c = q.client().await;
    let report = c.doctor().await.expect("doctor");
    for (i, server) in q.servers.iter().enumerate() {
        let eviction = report
            .findings
            .iter()
            .find(|f| f.check == "eviction" && f.server.ends_with(&format!(":{}", server.port())))
            .unwrap_or_else(|| panic!("no eviction finding for server {i}: {report:?}"));
        let want = if i == 1 { Verdict::Unfit } else { Verdict::Fit };
        assert_eq!(eviction.verdict, want, "server {i}: {eviction:?}");
    }
    assert_eq!(report.verdict(), Verdict::Unfit);
    let scripts = report
        .findings
        .iter()
        .find(|f| f.check == "scripts")
        .expect("scripts");
    assert_eq!(scripts.verdict, Verdict::Fit, "{scripts:?}");
}

/// 16 tasks on two clients take turns on one quorum Mutex, `rounds` holds each, every hold
/// recorded in `h`. With `kill_after`, server 2 is killed once that many holds are done, while
/// the other tasks are waiting or holding; the dead server answers each step with an
/// immediate connection error.
async fn mutex_rounds(q: &mut Quorum, h: &History, rounds: usize, kill_after: Option<usize>) {
    let clients = [q.client().await, q.client().await];
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let m = clients[i % 2].mutex("counter");
        let (h, done) = (h.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let g = m.lock().timeout(EVENTUALLY).await.expect("lock");
                let t = h.enter(Kind::Exclusive, g.fencing_token());
                tokio::time::sleep(ms(2)).await;
                h.exit(t);
                // A hold granted by servers {0, 2} and released after server 2 died cannot be
                // confirmed by a majority: the outcome is unknown (an error), allowed only in
                // the kill run; a refused release ("not held") never is.
                match g.release().await {
                    Ok(held) => assert!(held, "hold lost"),
                    Err(e) => assert!(
                        kill_after.is_some()
                            && matches!(e, redis_locks::Error::QuorumNotReached { .. }),
                        "release: {e:?}"
                    ),
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    if let Some(n) = kill_after {
        let deadline = Instant::now() + EVENTUALLY;
        while done.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "no progress before the kill");
            tokio::time::sleep(ms(5)).await;
        }
        q.servers[2].kill();
    }
    for t in tasks {
        within_ok(EVENTUALLY, "all tasks finish", t).await;
    }
    assert_eq!(done.load(Ordering::SeqCst), 16 * rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_tasks_on_two_clients_never_overlap() {
    let mut q = Quorum::start();
    let h = History::new();
    mutex_rounds(&mut q, &h, 4, None).await;
    // check_exclusion also requires the fences to increase in grant order.
    h.check_exclusion();
    assert_eq!(h.grants().len(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_dying_mid_run_breaks_no_exclusion() {
    let mut q = Quorum::start();
    let h = History::new();
    mutex_rounds(&mut q, &h, 1, Some(12)).await;
    h.check_exclusion();
    assert_eq!(h.grants().len(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_rwlock_tasks_share_reads_and_exclude_writes() {
    let q = Quorum::start();
    let clients = [q.client().await, q.client().await];
    let h = History::new();
    let mut tasks = Vec::new();
    // 12 readers and 4 writers, each four holds.
    for i in 0..16 {
        let lock = clients[i % 2].rwlock("shared-doc");
        let h = h.clone();
        let writer = i % 4 == 3;
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                if writer {
                    let g = lock.write().timeout(EVENTUALLY).await.expect("write");
                    let t = h.enter(Kind::Write, g.fencing_token());
                    tokio::time::sleep(ms(2)).await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "write lost");
                } else {
                    let g = lock.read().timeout(EVENTUALLY).await.expect("read");
                    let t = h.enter(Kind::Read, g.fencing_token());
                    tokio::time::sleep(ms(4)).await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "read lost");
                }
            }
        }));
    }
    for t in tasks {
        within_ok(EVENTUALLY, "all tasks finish", t).await;
    }
    h.check_exclusion();
    // Each read reports the largest last-writer fence among its granters: at least the fence
    // of the write before it, more after a write attempt that only a minority granted.
    h.check_shared_fences_at_least();
    let writes = h.grants().iter().filter(|g| g.kind == Kind::Write).count();
    assert_eq!((writes, h.grants().len()), (16, 64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minority_down_still_works() {
    let mut q = Quorum::start();
    let a = q.client().await;
    let b = q.client().await;
    q.servers[2].kill();
    let g = a
        .mutex("minority")
        .lock()
        .await
        .expect("lock with one node down");
    assert!(support::would_block(b.mutex("minority").try_lock().await));
    assert!(g.release().await.expect("release"));
    let g = b
        .mutex("minority")
        .lock()
        .timeout(secs(10))
        .await
        .expect("second holder");
    assert!(g.release().await.expect("release"));
}

/// A client can start while a minority of the servers is down, and a server that comes back
/// takes part again without a new client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_down_at_start_up_joins_when_it_comes_back() {
    let mut q = Quorum::start();
    q.servers[2].kill();
    let c = q.client().await;
    let g = c
        .mutex("late")
        .lock()
        .await
        .expect("lock with one node down");
    assert!(g.release().await.expect("release"));

    q.servers[2].restart();
    // The next steps try the server again; soon a hold is recorded there too.
    let joined = async {
        loop {
            let g = c.mutex("late").lock().await.expect("lock");
            let on_server_2 = q.servers[2].cli(&["EXISTS", "rl:{late}:w"]) == "1";
            assert!(g.release().await.expect("release"));
            if on_server_2 {
                return;
            }
            tokio::time::sleep(ms(50)).await;
        }
    };
    soon("the restarted server never took part", joined).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_majority_down_is_a_typed_error() {
    let mut q = Quorum::start();
    // A wait rides through a lost quorum within its outage budget (60 s by default), then
    // fails with the typed error: a short budget reaches it in a second.
    let c = q
        .client_with(LockClient::builder().outage_budget(secs(1)))
        .await;
    q.servers[0].kill();
    q.servers[1].kill();
    let one_of_two = |err: &Error| {
        matches!(
            err,
            Error::QuorumNotReached {
                granted: 1,
                required: 2
            }
        )
    };
    // The one server left grants; one of three is not a majority.
    let err = c.mutex("majority").lock().await.expect_err("no quorum");
    assert!(one_of_two(&err), "{err:?}");
    // Nor can a new client connect: one server answers, two are needed.
    let urls: Vec<String> = q.servers.iter().map(RedisServer::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let err = LockClient::builder()
        .quorum(&urls)
        .await
        .expect_err("one of three servers up");
    assert!(one_of_two(&err), "{err:?}");
    let err = c
        .rwlock("majority-rw")
        .try_read()
        .await
        .expect_err("no quorum");
    assert!(matches!(err, Error::QuorumNotReached { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticket_queue_primitives_are_refused() {
    let q = Quorum::start();
    let c = q.client().await;
    let unsupported = |r: Result<(), Error>| matches!(r, Err(Error::Unsupported { .. }));
    assert!(unsupported(c.fair_lock("f").lock().await.map(drop)));
    assert!(unsupported(c.fair_lock("f").try_lock().await.map(drop)));
    assert!(unsupported(c.fair_lock("f").inspect().await.map(drop)));
    assert!(unsupported(c.semaphore("s", 3).acquire().await.map(drop)));
    let s = c.semaphore("s", 3);
    assert!(unsupported(s.set_permits(4).await.map(drop)));
    let fair = c.rwlock("rw").preference(Preference::Fair);
    assert!(unsupported(fair.read().await.map(drop)));
    assert!(unsupported(fair.write().await.map(drop)));
    // Nothing was written on any server.
    for s in &q.servers {
        assert_eq!(s.cli(&["dbsize"]), "0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rwlock_readers_share_and_exclude_writers() {
    let q = Quorum::start();
    let a = q.client().await;
    let b = q.client().await;
    let r1 = a.rwlock("doc").read().await.expect("read 1");
    let r2 = b.rwlock("doc").read().await.expect("read 2");
    assert!(support::would_block(b.rwlock("doc").try_write().await));
    r1.release().await.expect("release r1");
    r2.release().await.expect("release r2");
    let w = a.rwlock("doc").write().await.expect("write");
    assert!(support::would_block(b.rwlock("doc").try_read().await));
    assert!(support::would_block(b.rwlock("doc").try_write().await));
    let fence = w.fencing_token();
    let r = downgraded(w).await;
    assert_eq!(r.fencing_token(), fence);
    let r3 = b
        .rwlock("doc")
        .read()
        .await
        .expect("read beside downgraded");
    assert!(r3.fencing_token() >= fence);
    assert!(support::would_block(b.rwlock("doc").try_write().await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiter_is_woken_on_release() {
    let q = Quorum::start();
    let a = q.client().await;
    // A waiter that would poll only every 30 s: a fast hand-off proves the wake-up.
    let b = q
        .client_with(
            LockClient::builder()
                .retry_interval(secs(30))
                .heartbeat(secs(180)),
        )
        .await;
    let g = a.mutex("wake").lock().await.expect("lock");
    let m = b.mutex("wake");
    let waiter = tokio::spawn(async move { m.lock().await.map(|g| (Instant::now(), g)) });
    tokio::time::sleep(ms(500)).await;
    let released = Instant::now();
    assert!(g.release().await.expect("release"));
    let (got, g2) = within_ok(secs(10), "woken", waiter)
        .await
        .expect("waiter lock");
    assert!(got - released < secs(5), "{:?}", got - released);
    g2.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fences_keep_increasing_when_a_minority_loses_its_counter() {
    let mut q = Quorum::start();
    let c = q.client().await;
    let m = c.mutex("fence");
    // Server 2 misses five grants, then comes back empty.
    q.servers[2].kill();
    let mut last = 0;
    for _ in 0..5 {
        let g = m.lock().await.expect("lock");
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.release().await.expect("release");
    }
    q.servers[2].restart();
    let g = m.lock().await.expect("lock on all three");
    assert!(g.fencing_token() > last);
    last = g.fencing_token();
    g.release().await.expect("release");
    // Server 1 restarts empty, server 0 goes away: the grant comes from servers 1 and 2,
    // and server 2's counter was raised by the previous grant.
    q.servers[1].restart();
    q.servers[0].kill();
    let g = m
        .lock()
        .timeout(EVENTUALLY)
        .await
        .expect("lock on servers 1 and 2");
    assert!(
        g.fencing_token() > last,
        "{} after {last}",
        g.fencing_token()
    );
}

/// A release whose answer is unknown on the servers that could make the majority is an
/// error (outcome unknown), not `Ok(false)` ("you had lost it"): here servers 0 and 2 granted,
/// server 1 refused (another holder), then server 2 died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_with_an_unknown_majority_is_an_error() {
    let mut q = Quorum::start();
    let lone = LockClient::connect(&q.servers[1].url())
        .await
        .expect("connect to server 1 alone");
    let _foreign = lone.mutex("r").lock().await.expect("lock on server 1");
    let c = q.client().await;
    let g = c
        .mutex("r")
        .try_lock()
        .await
        .expect("granted by servers 0 and 2");
    q.servers[2].kill();
    let err = g.release().await.expect_err("outcome unknown");
    assert!(
        matches!(err, redis_locks::Error::QuorumNotReached { .. }),
        "{err:?}"
    );
}

/// `inspect` shows what a majority of the servers agree on: a quorum hold (with one server
/// down, too), but not a record that only one server has, which the quorum does not honour
/// either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inspect_shows_the_majority_view() {
    let mut q = Quorum::start();
    let c = q.client().await;

    // A writer record on one server only (a minority): not shown, and not honoured.
    let stray = c.mutex("stray");
    let record = [
        "SET",
        "rl:{stray}:w",
        "99999999999999|someone",
        "PX",
        "60000",
    ];
    assert_eq!(q.servers[0].cli(&record), "OK");
    let info = stray.inspect().await.expect("inspect");
    assert!(info.holders.is_empty(), "{info:?}");
    let g = stray.try_lock().await.expect("servers 1 and 2 grant");
    assert!(g.release().await.expect("release"));

    // A quorum hold is shown, also with a server down.
    let m = c.mutex("seen");
    let g = m.lock().await.expect("lock");
    let info = m.inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.fence, g.fencing_token());
    q.servers[2].kill();
    let info = m.inspect().await.expect("inspect with one server down");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(g.release().await.expect("release"));
    assert!(m.inspect().await.expect("inspect").holders.is_empty());
}

/// A waiter that subscribed while a server was down gets that subscription on the server
/// once it is back (caught up with the client's next subscription), so wake-ups from it are
/// not lost for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subscriptions_missed_while_a_server_was_down_are_caught_up() {
    let mut q = Quorum::start();
    q.servers[2].kill();
    let c = q.client().await;
    let holder = q.client().await;
    let g = holder.mutex("missed").lock().await.expect("lock");
    let g2 = holder.mutex("later").lock().await.expect("lock");
    let channels = |server: &RedisServer| server.cli(&["PUBSUB", "CHANNELS", "rl:*"]);
    let wait_on = |name: &str| {
        let m = c.mutex(name).retry_interval(secs(600));
        tokio::spawn(async move { m.lock().timeout(secs(60)).await })
    };
    let first = wait_on("missed");
    let deadline = Instant::now() + EVENTUALLY;
    while !channels(&q.servers[0]).contains("rl:{missed}:ch") {
        assert!(
            Instant::now() < deadline,
            "the first waiter never subscribed"
        );
        tokio::time::sleep(ms(20)).await;
    }
    q.servers[2].restart();
    assert_eq!(channels(&q.servers[2]), "", "nothing subscribed there yet");
    // The next subscription of this client catches the restarted server up.
    let second = wait_on("later");
    while !channels(&q.servers[2]).contains("rl:{missed}:ch") {
        assert!(
            Instant::now() < deadline,
            "server 2 never got the missed subscription: {:?}",
            channels(&q.servers[2])
        );
        tokio::time::sleep(ms(20)).await;
    }
    drop((g, g2));
    for w in [first, second] {
        let g = w
            .await
            .expect("task")
            .expect("granted after the holder's release");
        assert!(g.release().await.expect("release"));
    }
}

/// The id of `id` with its fence changed to `fence` (as an altered id would carry).
fn with_fence(id: &redis_locks::HoldId, fence: u64) -> redis_locks::HoldId {
    let text = id.to_string();
    let parts: Vec<&str> = text.splitn(5, ':').collect();
    format!(
        "{}:{}:{fence}:{}:{}",
        parts[0], parts[1], parts[3], parts[4]
    )
    .parse()
    .expect("an id with another fence")
}

/// Resume in quorum mode compares the id's fence with the one a majority of the servers
/// reports. Server 2 restarts empty (no persistence) under a held Mutex, and a contender's
/// try there raises its fence counter (the try is refused: servers 0 and 1 hold): the id is
/// untouched, and its resume in another client succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_a_minority_restarted_empty_and_raised_by_a_contender() {
    let mut q = Quorum::start();
    let name = "quorum-resume-minority-restarted";
    let holder = q.client().await;
    let id = holder.lock_for(name, secs(30)).await.detach();
    q.servers[2].restart();
    let contender = q.client().await;
    assert!(
        contender.mutex(name).try_lock().await.is_err(),
        "the majority still holds it"
    );
    let raised: u64 = q.servers[2]
        .cli(&["GET", &format!("rl:{{{name}}}:fence")])
        .parse()
        .expect("the contender left a fence counter on the restarted server");
    assert_ne!(
        raised,
        id.fencing_token(),
        "the restarted server's fence differs"
    );
    let resumer = q.client().await;
    let guard = resumer
        .mutex(name)
        .lease(secs(30))
        .resume(&id)
        .await
        .expect("the untouched id resumes");
    assert!(guard.is_held());
    assert_eq!(guard.fencing_token(), id.fencing_token());
    assert!(guard.release().await.expect("release"));
}

/// A server that ran the holder's acquire late (after the majority granted it) took its
/// fence from its own, later clock: its counter is above the majority's. That state is made
/// here directly (server 2's counter raised past the grant's fence, as a late acquire leaves
/// it): the resume of the untouched id still succeeds, the majority's fence being the id's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_beside_a_minority_whose_fence_ran_ahead() {
    let q = Quorum::start();
    let name = "quorum-resume-fence-ahead";
    let holder = q.client().await;
    let guard = holder.lock_for(name, secs(30)).await;
    let fence = guard.fencing_token();
    let id = guard.detach();
    let key = format!("rl:{{{name}}}:fence");
    let ahead = (fence + 5_000).to_string();
    assert_eq!(q.servers[2].cli(&["SET", &key, &ahead, "KEEPTTL"]), "OK");
    let resumer = q.client().await;
    let resumed = resumer
        .mutex(name)
        .lease(secs(30))
        .resume(&id)
        .await
        .expect("the untouched id resumes");
    assert_eq!(resumed.fencing_token(), fence);
    assert!(resumed.release().await.expect("release"));
}

/// A resume refused for an altered fence renews nothing: the hold keeps the lease it had
/// (2 s), not the resuming handle's 30 s, on every server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_resume_renews_nothing() {
    let q = Quorum::start();
    let name = "quorum-refused-resume";
    let holder = q.client().await;
    let id = holder.lock_unrenewed(name, secs(2)).await.detach();
    let altered = with_fence(&id, id.fencing_token() + 1);
    let resumer = q.client().await;
    let err = resumer
        .mutex(name)
        .lease(secs(30))
        .resume(&altered)
        .await
        .expect_err("an altered fence");
    assert!(matches!(err, Error::MalformedHoldId { .. }), "{err}");
    for (i, server) in q.servers.iter().enumerate() {
        let ttl: i64 = server
            .cli(&["PTTL", &format!("rl:{{{name}}}:w")])
            .parse()
            .expect("pttl");
        assert!(
            (0..=3_000).contains(&ttl),
            "server {i}: the writer record lives {ttl} ms: renewed by a refused resume"
        );
    }
}

/// A quorum client's engine has connections of its own on every server, as a single
/// server's does: a guard dropped, and a wait cut off, as a current-thread runtime ends are
/// released and removed by the engine, and the drops take no longer than that.
#[test]
fn a_quorum_clients_holds_and_waits_end_with_their_runtime() {
    let q = Quorum::start();
    let connect = async |builder: LockClientBuilder| q.client_with(builder).await;
    support::exit::holds_and_waits_end_with_their_runtime(connect, secs(5));
}

/// The engine reaches the majority while one server is stalled (`SIGSTOP`: it takes requests
/// and never answers): an extend is confirmed, and a dropped guard's hold is released on the
/// two servers that answer, as on Sentinel with the sentinels paused and on Cluster with the
/// start-up nodes unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_reaches_the_majority_while_a_server_is_stalled() {
    let q = Quorum::start();
    let client = q
        .client_with(
            LockClient::builder().redis_config(redis_locks::RedisConfig {
                response_timeout: secs(1),
                ..Default::default()
            }),
        )
        .await;
    let name = "a-server-stalled";
    let stalled = support::Stopped::stop(q.servers[2].pid());
    support::exit::the_engine_extends_and_releases(&client, name).await;
    for (i, server) in q.servers[..2].iter().enumerate() {
        let left = server.cli(&["EXISTS", &format!("rl:{{{name}}}:w")]);
        assert_eq!(left, "0", "server {i} still has the writer record");
    }
    drop(stalled);
}
