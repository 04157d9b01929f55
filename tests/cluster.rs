//! Every primitive on a real local Redis Cluster (3 masters, replicas where a test needs
//! them), with wake-ups over sharded pub/sub.
#![cfg(feature = "cluster")]

mod support;
use support::backend::within_ok;
use support::quick::in_time;
use support::quick::Quick;
use support::time::{ms, secs};

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis_locks::testing::keys::{hash_slot, LockKeys};
use redis_locks::{LockClient, LockClientBuilder, Preference};
use support::backend::EVENTUALLY;
use support::history::{History, Kind};
use support::RedisCluster;

/// A client on `cluster` from `builder`.
async fn client_with(cluster: &RedisCluster, builder: LockClientBuilder) -> LockClient {
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    builder.cluster(&urls).await.expect("connect to cluster")
}

/// A client whose waiters would poll only every 30 s: a faster hand-off proves a wake-up.
async fn slow_polling_client(cluster: &RedisCluster) -> LockClient {
    client_with(
        cluster,
        LockClient::builder()
            .retry_interval(secs(30))
            .heartbeat(secs(180)),
    )
    .await
}

/// One live node as CLUSTER NODES (asked of node 0) describes it.
struct NodeInfo {
    id: String,
    port: u16,
    master: bool,
    /// The master's id, for a replica.
    master_id: String,
    slots: Vec<(u16, u16)>,
}

/// Every node not flagged as failed.
fn topology(cluster: &RedisCluster) -> Vec<NodeInfo> {
    cluster
        .cli(0, &["cluster", "nodes"])
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || f[2].contains("fail") {
                return None;
            }
            let slots = f[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some(NodeInfo {
                id: f[0].to_owned(),
                port: f[1].split(['@', ':']).nth(1)?.parse().ok()?,
                master: f[2].contains("master"),
                master_id: f[3].to_owned(),
                slots,
            })
        })
        .collect()
}

/// Index in `cluster.nodes()` of the node listening on `port`.
fn node_index(cluster: &RedisCluster, port: u16) -> usize {
    cluster
        .ports()
        .iter()
        .position(|p| *p == port)
        .expect("node of port")
}

/// The master that serves `slot` now: (node index, node id).
fn owner_of(cluster: &RedisCluster, slot: u16) -> (usize, String) {
    let node = topology(cluster)
        .into_iter()
        .find(|n| n.master && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .expect("slot owner");
    (node_index(cluster, node.port), node.id)
}

fn slot_of(name: &str) -> u16 {
    let keys = LockKeys::new("rl", name).expect("name");
    hash_slot(keys.channel().as_bytes())
}

/// One cluster for the behavioural basics (starting a cluster is the slow part).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_primitive_works_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let a = slow_polling_client(&cluster).await;
    let b = slow_polling_client(&cluster).await;
    waiter_is_woken_by_sharded_pubsub(&a, &b).await;
    mutex_excludes(&a, &b).await;
    rwlock_shares_reads_and_excludes_writes(&a, &b).await;
    fair_lock_grants_in_arrival_order(&a, &b).await;
    semaphore_counts_permits(&a, &b).await;
    rate_limiter_wakes_the_next_head(&a, &b).await;
    // After SCRIPT FLUSH on every node, each node gets the scripts back on first use.
    for n in 0..cluster.nodes().len() {
        assert_eq!(cluster.cli(n, &["script", "flush"]), "OK");
    }
    mutex_excludes(&a, &b).await;
    fair_lock_grants_in_arrival_order(&a, &b).await;
    waiter_is_woken_by_sharded_pubsub(&a, &b).await;
    thousand_names_spread_over_every_master(&cluster, &a).await;
    doctor_checks_every_node(&cluster, &a).await;
}

/// `doctor` on a Cluster judges the settings of every node and runs its probes (scripts,
/// wake-ups over sharded pub/sub) through the cluster.
async fn doctor_checks_every_node(cluster: &RedisCluster, c: &LockClient) {
    let report = c.doctor().await.expect("doctor");
    for port in cluster.ports() {
        let eviction = report
            .findings
            .iter()
            .find(|f| f.check == "eviction" && f.server.ends_with(&format!(":{port}")))
            .unwrap_or_else(|| panic!("no eviction finding for node {port}: {report:?}"));
        assert_eq!(eviction.verdict, redis_locks::Verdict::Fit, "{eviction:?}");
    }
    for check in ["scripts", "wake-ups"] {
        let f = report
            .findings
            .iter()
            .find(|f| f.check == check)
            .expect(check);
        assert_eq!(f.verdict, redis_locks::Verdict::Fit, "{f:?}");
    }
}

/// A rate limiter's keys share one slot; its waiters are admitted in order, and the one
/// behind the head (told no retry time, polling every 30 s) is woken over sharded pub/sub
/// when it becomes the head.
async fn rate_limiter_wakes_the_next_head(a: &LockClient, b: &LockClient) {
    let keys = LockKeys::new("rl", "rate").expect("name");
    let slot = slot_of("rate");
    assert!(keys
        .rate_limiter()
        .iter()
        .all(|k| hash_slot(k.as_bytes()) == slot));
    let rate = redis_locks::Rate::per_second(2).burst(1);
    let (la, lb) = (a.rate_limiter("rate", rate), b.rate_limiter("rate", rate));
    la.try_acquire(1).await.ok();
    let first = tokio::spawn({
        let l = la.clone();
        async move { l.acquire(1).await.expect("head") }
    });
    let queued = |n: usize| {
        let l = la.clone();
        async move {
            let give_up = Instant::now() + EVENTUALLY;
            while l.inspect().await.expect("inspect").waiters.len() != n {
                assert!(Instant::now() < give_up, "not {n} waiters");
                tokio::time::sleep(ms(5)).await;
            }
        }
    };
    queued(1).await;
    let second = tokio::spawn({
        let l = lb.clone();
        async move { l.acquire(1).await.expect("behind the head") }
    });
    queued(2).await;
    let (first, second) = tokio::time::timeout(secs(15), async {
        (first.await.expect("join"), second.await.expect("join"))
    })
    .await
    .expect("the second waiter was woken, not left to its 30 s interval");
    assert!(first.admitted_at_ms < second.admitted_at_ms);
}

async fn waiter_is_woken_by_sharded_pubsub(a: &LockClient, b: &LockClient) {
    let g = a.mutex("wake").lock().await.expect("lock");
    let m = b.mutex("wake");
    let waiter = tokio::spawn(async move {
        let g = m.lock().await.expect("waiter lock");
        (Instant::now(), g)
    });
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    assert!(g.release().await.expect("release"));
    let (got, g2) = within_ok(secs(10), "woken", waiter).await;
    assert!(got - released < secs(5), "{:?}", got - released);
    g2.release().await.expect("release 2");
}

async fn mutex_excludes(a: &LockClient, b: &LockClient) {
    let g = a.mutex("m").lock().await.expect("lock");
    assert!(support::would_block(b.mutex("m").try_lock().await));
    let fence = g.fencing_token();
    assert!(g.release().await.expect("release"));
    let g = b.mutex("m").try_lock().await.expect("free");
    assert!(g.fencing_token() > fence);
    g.release().await.expect("release");
}

async fn rwlock_shares_reads_and_excludes_writes(a: &LockClient, b: &LockClient) {
    let r1 = a.rwlock("rw").read().await.expect("read");
    let r2 = b.rwlock("rw").read().await.expect("read");
    assert!(support::would_block(b.rwlock("rw").try_write().await));
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = b.rwlock("rw").write().await.expect("write");
    assert!(support::would_block(a.rwlock("rw").try_read().await));
    w.release().await.expect("release");
}

async fn fair_lock_grants_in_arrival_order(a: &LockClient, b: &LockClient) {
    let first = a.fair_lock("fifo").lock().await.expect("lock");
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let lock = if i % 2 == 0 { b } else { a }.fair_lock("fifo");
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let g = lock.lock().await.expect("queued lock");
            order.lock().expect("order").push(i);
            g.release().await.expect("release");
        }));
        // Each waiter is queued before the next arrives.
        let deadline = Instant::now() + EVENTUALLY;
        while a
            .fair_lock("fifo")
            .inspect()
            .await
            .expect("inspect")
            .waiters
            .len()
            < i + 1
        {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            tokio::time::sleep(ms(20)).await;
        }
    }
    first.release().await.expect("release");
    for w in waiters {
        within_ok(EVENTUALLY, "served", w).await;
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2]);
}

async fn semaphore_counts_permits(a: &LockClient, b: &LockClient) {
    let p1 = a.semaphore("sem", 2).acquire().await.expect("permit 1");
    let p2 = b.semaphore("sem", 2).acquire().await.expect("permit 2");
    assert!(support::would_block(
        b.semaphore("sem", 2).try_acquire().await
    ));
    let sem = b.semaphore("sem", 2);
    let waiter = tokio::spawn(async move { sem.acquire().await.expect("queued permit") });
    tokio::time::sleep(ms(200)).await;
    p1.release().await.expect("release");
    let p3 = within_ok(secs(5), "woken within 5 s", waiter).await;
    p2.release().await.expect("release");
    p3.release().await.expect("release");
}

async fn thousand_names_spread_over_every_master(cluster: &RedisCluster, c: &LockClient) {
    let mut guards = Vec::new();
    for i in 0..1000 {
        let m = c.mutex(&format!("job-{i}")).auto_renew(false);
        guards.push(m.try_lock().await.expect("free name"));
    }
    // Our slot computation agrees with the server's.
    for name in ["job-0", "job-1", "job-999"] {
        let key = LockKeys::new("rl", name).expect("name").key("w");
        let slot: u16 = cluster
            .cli(0, &["cluster", "keyslot", &key])
            .parse()
            .expect("slot");
        assert_eq!(slot, hash_slot(key.as_bytes()));
    }
    // Every master holds some of the locks' keys (fence + writer record per name).
    let mut total = 0;
    for n in 0..cluster.masters() {
        let keys: usize = cluster.cli(n, &["dbsize"]).parse().expect("dbsize");
        assert!(keys > 100, "master {n} holds only {keys} keys");
        total += keys;
    }
    assert!(total >= 2000, "{total}");
    for g in guards {
        assert!(g.release().await.expect("release"));
    }
}

/// Spawns `tasks` tasks running `body(i)` and waits (generously) for all of them.
async fn run_tasks<F, Fut>(tasks: usize, body: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handles: Vec<_> = (0..tasks).map(|i| tokio::spawn(body(i))).collect();
    for (i, t) in handles.into_iter().enumerate() {
        tokio::time::timeout(EVENTUALLY, t)
            .await
            .unwrap_or_else(|_| panic!("task {i} did not finish"))
            .unwrap_or_else(|e| panic!("task {i}: {e}"));
    }
}

/// A short hold, so that the tasks overlap in time.
async fn hold() {
    tokio::time::sleep(ms(2)).await;
}

/// Every primitive under 16 tasks on two clients (8 each), every grant and release recorded in
/// a history per lock and checked: the Cluster adds routing, redirects and sharded wake-ups
/// between the client and the scripts, none of which may let two holds overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_tasks_on_two_clients_per_primitive() {
    let cluster = RedisCluster::start(3, 0);
    let clients = [
        client_with(&cluster, LockClient::builder()).await,
        client_with(&cluster, LockClient::builder()).await,
    ];
    let mutex = History::new();
    let rwlock = History::new();
    let fair_rwlock = History::new();
    let fair = History::new();
    let sem = History::with_capacity(3);
    tokio::join!(
        run_tasks(16, |i| {
            let (m, h) = (clients[i % 2].mutex("hist-mutex"), mutex.clone());
            async move {
                for _ in 0..5 {
                    let g = m.lock().await.expect("mutex lock");
                    let t = h.enter(Kind::Exclusive, g.fencing_token());
                    hold().await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "mutex hold lost");
                }
            }
        }),
        rw_tasks(&clients, Preference::Writer, "hist-rw", &rwlock),
        rw_tasks(&clients, Preference::Fair, "hist-rw-fair", &fair_rwlock),
        run_tasks(16, |i| {
            let (f, h) = (clients[i % 2].fair_lock("hist-fair"), fair.clone());
            async move {
                for _ in 0..4 {
                    let g = f.lock().await.expect("fair lock");
                    let t = h.enter(Kind::Exclusive, g.fencing_token());
                    hold().await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "fair hold lost");
                }
            }
        }),
        run_tasks(16, |i| {
            let (s, h) = (clients[i % 2].semaphore("hist-sem", 3), sem.clone());
            // Every fourth task takes two permits at once.
            let n = if i % 4 == 0 { 2 } else { 1 };
            async move {
                for _ in 0..4 {
                    let p = s.acquire_many(n).await.expect("permits");
                    let t = h.enter(Kind::Permits(n), p.fencing_token());
                    hold().await;
                    h.exit(t);
                    assert!(p.release().await.expect("release"), "permits lost");
                }
            }
        }),
    );
    for (what, h, grants) in [
        ("mutex", &mutex, 80),
        ("rwlock", &rwlock, 64),
        ("rwlock fair", &fair_rwlock, 64),
        ("fair lock", &fair, 64),
        ("semaphore", &sem, 64),
    ] {
        assert_eq!(h.grants().len(), grants, "{what}");
        h.check_exclusion();
    }
    rwlock.check_shared_fences();
    fair_rwlock.check_shared_fences();
}

/// 12 readers and 4 writers on one RwLock, four holds each.
async fn rw_tasks(clients: &[LockClient; 2], preference: Preference, name: &str, h: &History) {
    run_tasks(16, |i| {
        let lock = clients[i % 2].rwlock(name).preference(preference);
        let h = h.clone();
        let writer = i % 4 == 3;
        async move {
            for _ in 0..4 {
                if writer {
                    let g = lock.write().await.expect("write");
                    let t = h.enter(Kind::Write, g.fencing_token());
                    hold().await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "write lost");
                } else {
                    let g = lock.read().await.expect("read");
                    let t = h.enter(Kind::Read, g.fencing_token());
                    hold().await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "read lost");
                }
            }
        }
    })
    .await;
    let writes = h.grants().iter().filter(|g| g.kind == Kind::Write).count();
    assert_eq!(writes, 16, "{name}");
}

/// Moves `slot` from its master to the next one with CLUSTER SETSLOT + MIGRATE, the way
/// `redis-cli --cluster reshard` does it (keys moved until none is left, then the slot
/// assigned everywhere). Returns the new owner's node index.
fn migrate_slot(cluster: &RedisCluster, slot: u16) -> usize {
    let slot_arg = slot.to_string();
    let (src, src_id) = owner_of(cluster, slot);
    let dst = (src + 1) % cluster.masters();
    let dst_id = cluster.cli(dst, &["cluster", "myid"]);
    let dst_port = cluster.ports()[dst].to_string();
    let ok = |out: String| assert_eq!(out, "OK");
    ok(cluster.cli(
        dst,
        &["cluster", "setslot", &slot_arg, "importing", &src_id],
    ));
    ok(cluster.cli(
        src,
        &["cluster", "setslot", &slot_arg, "migrating", &dst_id],
    ));
    let mut moved = 0;
    loop {
        let keys = cluster.cli(src, &["cluster", "getkeysinslot", &slot_arg, "1000"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        moved += keys.len();
        let mut migrate = vec!["migrate", "127.0.0.1", &dst_port, "", "0", "5000", "KEYS"];
        migrate.extend(&keys);
        // NOKEY: a release deleted the listed keys meanwhile.
        let out = cluster.cli(src, &migrate);
        assert!(out == "OK" || out == "NOKEY", "{out}");
    }
    assert!(moved > 0, "the lock has keys in slot {slot}");
    for n in 0..cluster.masters() {
        ok(cluster.cli(n, &["cluster", "setslot", &slot_arg, "node", &dst_id]));
    }
    dst
}

/// Tasks that take `name` in turns (recording every hold in `h`) until `stop`, riding out
/// the connection errors of a failover; each makes at least one grant.
fn contenders(
    clients: [&LockClient; 2],
    name: &str,
    tasks: usize,
    h: &History,
    stop: &Arc<AtomicBool>,
    grants: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|i| {
            let m = clients[i % 2].mutex(name);
            let (h, stop, grants) = (h.clone(), stop.clone(), grants.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + 3 * EVENTUALLY;
                let mut mine = 0;
                while mine == 0 || !stop.load(Ordering::SeqCst) {
                    let g = match m.lock().timeout(EVENTUALLY).await {
                        Ok(g) => g,
                        Err(e) if e.is_connection() && Instant::now() < deadline => {
                            tokio::time::sleep(ms(200)).await;
                            continue;
                        }
                        Err(e) => panic!("contender {i}: {e}"),
                    };
                    let t =
                        h.enter_as(format!("contender-{i}"), Kind::Exclusive, g.fencing_token());
                    hold().await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "contender {i} lost");
                    mine += 1;
                    grants.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect()
}

/// Waits until `grants` reaches `n`.
async fn wait_grants(grants: &AtomicUsize, n: usize, what: &str) {
    let deadline = Instant::now() + EVENTUALLY;
    while grants.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "{what}: only {grants:?} of {n} grants"
        );
        tokio::time::sleep(ms(10)).await;
    }
}

/// Stops the contenders and waits for them.
async fn stop_all(stop: &AtomicBool, tasks: Vec<tokio::task::JoinHandle<()>>) {
    stop.store(true, Ordering::SeqCst);
    for (i, t) in tasks.into_iter().enumerate() {
        tokio::time::timeout(3 * EVENTUALLY, t)
            .await
            .unwrap_or_else(|_| panic!("contender {i} did not finish"))
            .unwrap_or_else(|e| panic!("contender {i}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_migrated_while_held_and_waited_on() {
    let cluster = RedisCluster::start(3, 0);
    let builder = || LockClient::builder().lease(secs(6));
    let a = client_with(&cluster, builder()).await;
    let b = client_with(&cluster, builder()).await;
    let name = "migrating";
    let h = History::new();
    let mut g = a.mutex(name).lock().await.expect("lock");
    let fence = g.fencing_token();
    let held = h.enter_as("holder", Kind::Exclusive, fence);
    let (stop, grants) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let tasks = contenders([&a, &b], name, 8, &h, &stop, &grants);
    tokio::time::sleep(ms(300)).await;

    let dst = migrate_slot(&cluster, slot_of(name));
    assert_eq!(owner_of(&cluster, slot_of(name)).0, dst);

    // The hold moved with its keys: a fresh client and the waiters are refused, and the
    // holder renews on the new master.
    let c = client_with(&cluster, builder()).await;
    assert!(support::would_block(c.mutex(name).try_lock().await));
    assert!(g.extend(secs(6)).await.expect("extend after move"));
    assert_eq!(grants.load(Ordering::SeqCst), 0, "granted while held");
    h.exit(held);
    assert!(g.release().await.expect("release"));
    // The waiters are served by the new master...
    wait_grants(&grants, 8, "after the first move").await;
    // ...and keep being served while the slot moves again under them.
    let before = grants.load(Ordering::SeqCst);
    let dst2 = migrate_slot(&cluster, slot_of(name));
    assert_ne!(dst2, dst);
    wait_grants(&grants, before + 16, "after the second move").await;
    stop_all(&stop, tasks).await;
    h.check_exclusion();
    assert!(h.grants()[1].fence > fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_keeps_holds_that_reached_the_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    let builder = || LockClient::builder().lease(secs(20));
    let a = client_with(&cluster, builder()).await;
    let b = client_with(&cluster, builder()).await;
    let name = "failover";
    let slot = slot_of(name);
    let h = History::new();
    let mut g = a.mutex(name).lock().await.expect("lock");
    let fence = g.fencing_token();
    let held = h.enter_as("holder", Kind::Exclusive, fence);
    let (master, master_id) = owner_of(&cluster, slot);
    // A new cluster's nodes may take a moment to learn every replica's role.
    let deadline = Instant::now() + EVENTUALLY;
    let replica_port = loop {
        if let Some(t) = topology(&cluster)
            .into_iter()
            .find(|n| !n.master && n.master_id == master_id)
        {
            break t.port;
        }
        assert!(Instant::now() < deadline, "no replica of the lock's master");
        tokio::time::sleep(ms(100)).await;
    };
    let replica = node_index(&cluster, replica_port);
    // The hold reached the replica before the master goes away (a new cluster's replica
    // may still be syncing: WAIT again until it acknowledges).
    let deadline = Instant::now() + EVENTUALLY;
    while cluster.cli(master, &["wait", "1", "1000"]) != "1" {
        assert!(Instant::now() < deadline, "the replica never acknowledged");
    }
    // Empty script caches: the promoted replica must get the scripts back although one node
    // of the cluster (the failed master) cannot be reached.
    for n in 0..cluster.nodes().len() {
        assert_eq!(cluster.cli(n, &["script", "flush"]), "OK");
    }
    // Waiters queued behind the hold ride out the failover and are served after it.
    let (stop, grants) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let tasks = contenders([&a, &b], name, 4, &h, &stop, &grants);
    cluster.node_mut(master).kill();
    let deadline = Instant::now() + EVENTUALLY;
    while owner_of_from(&cluster, replica, slot) != Some(replica) {
        assert!(Instant::now() < deadline, "replica never promoted");
        tokio::time::sleep(ms(200)).await;
    }
    // What users see: calls during the failover fail with connection errors (after the
    // library's retries); afterwards the hold is still there, on the promoted replica.
    let deadline = Instant::now() + EVENTUALLY;
    let refused = loop {
        match b.mutex(name).try_lock().await {
            Ok(r) => break Some(r),
            Err(e) if e.is_would_block() => break None,
            Err(e) if e.is_connection() && Instant::now() < deadline => {
                tokio::time::sleep(ms(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(refused.is_none(), "second holder after failover");
    assert_eq!(grants.load(Ordering::SeqCst), 0, "granted while held");
    assert!(g.extend(secs(20)).await.expect("extend"));
    assert!(g.is_held());
    h.exit(held);
    assert!(g.release().await.expect("release"));
    wait_grants(&grants, 8, "after the failover").await;
    stop_all(&stop, tasks).await;
    // No overlap, and every grant after the failover has a larger fence than the hold's.
    h.check_exclusion();
    let g2 = b.mutex(name).try_lock().await.expect("free");
    assert!(g2.fencing_token() > fence);
    g2.release().await.expect("release");
}

/// The master of `slot` as seen by node `from` (node index), if it knows one.
fn owner_of_from(cluster: &RedisCluster, from: usize, slot: u16) -> Option<usize> {
    let nodes = cluster.cli(from, &["cluster", "nodes"]);
    nodes.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
            return None;
        }
        let owns = f[8..].iter().any(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
        });
        let port: u16 = f[1].split(['@', ':']).nth(1)?.parse().ok()?;
        owns.then(|| node_index(cluster, port))
    })
}

/// A client built from the user's own cluster builder keeps its credentials: every node
/// requires a password for user `app`, the library's connections log in as `app`, and every
/// primitive works; the same builder with a wrong password is refused.
#[tokio::test]
async fn client_from_the_users_cluster_builder_keeps_its_credentials() {
    let cluster = RedisCluster::start(3, 0);
    for node in 0..cluster.nodes().len() {
        let ok = cluster.cli(
            node,
            &[
                "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all",
            ],
        );
        assert_eq!(ok.trim(), "OK", "ACL SETUSER on node {node}");
    }
    let builder = |password: &str| {
        redis::cluster::ClusterClientBuilder::new(cluster.urls())
            .username("app")
            .password(password)
    };
    let wrong = LockClient::builder()
        .connect_cluster(builder("wrong"))
        .await;
    assert!(wrong.is_err(), "a wrong password must be refused");

    let client = LockClient::builder()
        .connect_cluster(builder("s3cret"))
        .await
        .expect("connect as app");
    let m = client.mutex("own-builder-m");
    let g = m.lock().await.expect("mutex");
    assert!(m.try_lock().await.is_err(), "held");
    assert!(g.release().await.expect("release"));
    let f = client.fair_locked("own-builder-f").await;
    assert!(f.release().await.expect("release"));
    let p = client
        .semaphore("own-builder-s", 2)
        .acquire()
        .await
        .expect("permit");
    assert!(p.release().await.expect("release"));
    let mut logged_in = 0;
    for node in 0..cluster.nodes().len() {
        let clients = cluster.cli(node, &["CLIENT", "LIST"]);
        logged_in += clients.lines().filter(|l| l.contains(" user=app ")).count();
    }
    assert!(logged_in > 0, "no connection logged in as app");
}

/// A multi-lock over names on every master and two names sharing a slot: taken one slot at a
/// time in slot order, every part held, all released; workers naming overlapping sets in
/// opposite orders all finish (no deadlock across slots) and never share a part; a wait woken
/// by a release on another master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_locks_span_slots_without_deadlock() {
    let cluster = RedisCluster::start(3, 0);
    let a = slow_polling_client(&cluster).await;
    let b = slow_polling_client(&cluster).await;
    // "s}1" and "s}2" hash by the tag "s": one slot, one step.
    let names = ["alpha", "beta", "gamma", "delta", "s}1", "s}2"];
    let slots: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| redis_locks::testing::keys::hash_slot(format!("rl:{{{n}}}:w").as_bytes()))
        .collect();
    assert_eq!(slots.len(), names.len() - 1, "five slots");
    let g = a
        .multi_lock(names)
        .lock()
        .await
        .expect("multi on a cluster");
    for name in names {
        assert!(
            b.mutex(name).try_lock().await.is_err(),
            "{name} is held by the multi-lock"
        );
    }
    assert!(g.release().await.expect("release"));
    for name in names {
        let info = b.mutex(name).inspect().await.expect("inspect");
        assert!(info.holders.is_empty(), "{name} released");
    }

    // Woken across masters: a holder of "gamma" releases; the multi-lock waiting on it (with a
    // 30 s poll) is granted well before its next poll.
    let held = b.mutex("gamma").lock().await.expect("hold gamma");
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.multi_lock(["alpha", "gamma", "s}1"]).lock().await })
    };
    tokio::time::sleep(ms(200)).await;
    held.release().await.expect("release gamma");
    let promise = "woken by the release, not by its 30 s poll";
    let g = within_ok(secs(10), promise, waiter).await.expect("multi");
    g.release().await.expect("release");

    let inside = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for worker in 0..4usize {
        let c = if worker % 2 == 0 {
            a.clone()
        } else {
            b.clone()
        };
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..10usize {
                let mut mine: Vec<&str> = names
                    .iter()
                    .cycle()
                    .skip(worker + round)
                    .take(3)
                    .copied()
                    .collect();
                if worker % 2 == 1 {
                    mine.reverse();
                }
                mine.push("alpha");
                let g = c.multi_lock(mine).lock().await.expect("multi");
                assert_eq!(
                    inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                    0,
                    "two holders of alpha"
                );
                tokio::time::sleep(ms(2)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        let promise = "every worker finishes: no deadlock across slots";
        within_ok(secs(60), promise, t).await;
    }
}

/// Elections on a cluster: the value key lives in the lock's slot, proclaims reach observers
/// by sharded pub/sub (the clients poll only every 30 s), a standby takes over on resign, on
/// names owned by different masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn elections_work_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let a = slow_polling_client(&cluster).await;
    let b = slow_polling_client(&cluster).await;
    let names = ["alpha", "beta", "gamma"];
    let owners: std::collections::BTreeSet<usize> = names
        .iter()
        .map(|n| owner_of(&cluster, slot_of(n)).0)
        .collect();
    assert!(owners.len() > 1, "the names span masters");
    for name in names {
        let election = b.election(name);
        let mut observer = election.observe();
        let first = in_time(secs(10), "first state", observer.next()).await;
        assert_eq!(
            first,
            Some(redis_locks::LeaderEvent::NobodyLeads),
            "{name}: nobody leads yet"
        );
        let mut leader = a.election(name).campaign("a").await.expect("campaign");
        let standby = {
            let b = b.clone();
            tokio::spawn(async move { b.election(name).campaign("b").await })
        };
        let seen = loop {
            let state = tokio::time::timeout(secs(10), observer.next())
                .await
                .expect("woken by the proclaim, not by a 30 s poll")
                .expect("observer runs")
                .into_leader();
            if state.is_some() {
                break state;
            }
        };
        assert_eq!(
            seen.map(|l| (l.value, l.term)),
            Some(("a".to_owned(), leader.term()))
        );
        leader.proclaim("a2").await.expect("proclaim");
        let seen = tokio::time::timeout(secs(10), observer.next())
            .await
            .expect("woken by the proclaim")
            .expect("observer runs")
            .into_leader();
        assert_eq!(seen.map(|l| l.value), Some("a2".to_owned()));
        let term = leader.term();
        assert!(leader.resign().await.expect("resign"));
        let next = within_ok(secs(10), "the standby is woken by the release", standby)
            .await
            .expect("campaign");
        assert!(next.term() > term);
        let info = a.leader_of(name).await.expect("a leader");
        assert_eq!((info.value.as_str(), info.term), ("b", next.term()));
        next.resign().await.expect("resign");
    }
}

/// A Cluster client's engine has a connection of its own, made by its runtime on first use:
/// a guard dropped, and a wait cut off, as a current-thread runtime ends are released and
/// removed by the engine, and the drops take no longer than that.
#[test]
fn holds_and_waits_end_with_their_runtime() {
    let cluster = RedisCluster::start(3, 0);
    let connect = async |builder: LockClientBuilder| client_with(&cluster, builder).await;
    support::exit::holds_and_waits_end_with_their_runtime(connect, secs(5));
}

/// A cluster of three masters and a client (`lease`, `response_timeout`, a 5 s connect
/// timeout) whose only start-up node is behind a proxy, stalled once the client is built.
async fn behind_a_stalled_start_up_node(
    response_timeout: Duration,
    lease: Duration,
) -> (RedisCluster, support::proxy::Proxy, LockClient) {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3, 0));
    let proxy = support::proxy::Proxy::start(cluster.ports()[0]).await;
    let config = redis_locks::RedisConfig {
        connect_timeout: secs(5),
        response_timeout,
        ..redis_locks::RedisConfig::default()
    };
    let client = LockClient::builder()
        .lease(lease)
        .redis_config(config)
        .cluster(&[proxy.url().as_str()])
        .await
        .expect("connect through the proxy");
    proxy.stall();
    (cluster, proxy, client)
}

/// The engine's own connection is made through the start-up nodes, by a task of its own:
/// while they cannot be reached (the only one given is behind a stalled proxy, and the
/// connect timeout, 5 s, outlasts what a renewal or an extend may take) the engine uses the
/// client's connection, which already knows the nodes: holds on 3 s leases are renewed, and
/// an extend and a dropped guard's release are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_uses_the_clients_connection_while_the_start_up_nodes_are_unreachable() {
    let (_cluster, _proxy, client) = behind_a_stalled_start_up_node(secs(1), secs(3)).await;
    let renewed = client.mutex("renewed-with-start-up-nodes-unreachable");
    let guard = renewed.lock().await.expect("lock");
    tokio::time::sleep(secs(7)).await;
    assert!(
        guard.is_held(),
        "the hold was lost while the cluster answered"
    );
    drop(guard);
    support::exit::the_engine_extends_and_releases(&client, "start-up-nodes-unreachable").await;
}

/// Only steps sent while the engine's first attempt at its own connection is under way wait
/// for it: with the only start-up node stalled, a 5 s connect timeout and a 20 s response
/// timeout (a step would wait up to 5 s), extends sent after the first attempt failed, across
/// the next attempt's 5 s, each take well under that wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_step_waits_for_a_later_attempt_at_the_engines_connection() {
    let (_cluster, _proxy, client) = behind_a_stalled_start_up_node(secs(20), secs(30)).await;
    let mut guard = client.mutex("no-later-wait").lock().await.expect("lock");
    // The first attempt ends (fails) 5 s after the engine started; the next starts 5 s later.
    tokio::time::sleep(secs(6)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..30 {
        let sent = Instant::now();
        assert!(guard.extend(secs(30)).await.expect("extend"), "extended");
        slowest = slowest.max(sent.elapsed());
        tokio::time::sleep(ms(300)).await;
    }
    assert!(slowest < secs(2), "an extend waited {slowest:?}");
    guard.release().await.expect("release");
}
