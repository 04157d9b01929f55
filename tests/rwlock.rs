//! RwLock behaviour, on a real redis-server and on the in-memory store.

mod support;
use support::quick::in_time;
use support::time::{ms, secs};
use support::Granted;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_locks::testing::store::{Acquire, Request};
use redis_locks::{HoldKind, LockClient, Preference, RwLock, WriteGuard};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use support::backend::{join, until_waiters, Backend, EVENTUALLY};
use support::history::{Event, History, Kind};

/// A tiny deterministic PRNG (xorshift64) for hold and pause lengths.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A duration of 0 to `max_ms` - 1 milliseconds.
    fn ms(&mut self, max_ms: u64) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ms(self.0 % max_ms)
    }
}

/// Read grants logged strictly between `from` and `to`.
fn reads_between(grants: &[Event], from: Instant, to: Instant) -> Vec<&Event> {
    let (from, to) = (from.into_std(), to.into_std());
    grants
        .iter()
        .filter(|g| g.kind == Kind::Read && g.at > from && g.at < to)
        .collect()
}

/// 8 readers and 2 writers on 2 clients with random holds for `run`: the shared log never
/// shows a reader beside a writer or two writers, and exclusive fences increase.
async fn mixed_load(b: Backend, preference: Preference, run: Duration) {
    let clients = [b.client().await, b.client().await];
    let name = format!("mixed-{preference:?}");
    let h = History::new();
    let end = Instant::now() + run;
    let mut tasks = Vec::new();
    for i in 0..10u64 {
        let lock = clients[i as usize % 2].rwlock(&name).preference(preference);
        let h = h.clone();
        let writer = i >= 8;
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(i + 1);
            while Instant::now() < end {
                if writer {
                    // Reader preference may starve writers: a timeout is allowed there only.
                    let limit = end.saturating_duration_since(Instant::now()) + EVENTUALLY;
                    match lock.write().timeout(limit).await {
                        Ok(g) => {
                            let t = h.enter(Kind::Write, g.fencing_token());
                            sleep(rng.ms(4)).await;
                            h.exit(t);
                            assert!(g.release().await.expect("release"), "write lost");
                        }
                        Err(e) if e.is_timeout() && preference == Preference::Reader => {}
                        Err(e) => panic!("write: {e}"),
                    }
                } else {
                    let g = lock.read().timeout(EVENTUALLY).await.expect("read");
                    let t = h.enter(Kind::Read, g.fencing_token());
                    sleep(rng.ms(4)).await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"), "read lost");
                }
                sleep(rng.ms(3)).await;
            }
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        join(&format!("task {i}"), t).await;
    }
    h.check_exclusion();
    h.check_shared_fences();
    let grants = h.grants();
    let writes = grants.iter().filter(|g| g.kind == Kind::Write).count();
    let reads = grants.len() - writes;
    assert!(reads > 0, "no read was granted");
    if preference != Preference::Reader {
        assert!(writes > 0, "no write was granted");
    }
    assert!(
        h.max_concurrent_reads() >= 2,
        "readers never shared the lock ({reads} reads)"
    );
}

async fn mixed_load_writer_preference(b: Backend) {
    mixed_load(b, Preference::Writer, secs(3)).await
}

async fn mixed_load_reader_preference(b: Backend) {
    mixed_load(b, Preference::Reader, secs(1)).await
}

async fn mixed_load_fair(b: Backend) {
    mixed_load(b, Preference::Fair, secs(1)).await
}

both_backends!(
    mixed_load_writer_preference,
    mixed_load_reader_preference,
    mixed_load_fair
);

/// Six readers loop 5 ms holds back to back on `name`; returns the stop flag and the tasks.
async fn looping_readers(
    b: &Backend,
    name: &str,
    preference: Preference,
    h: &History,
) -> (Arc<AtomicBool>, Vec<JoinHandle<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let clients = [b.client().await, b.client().await];
    let mut tasks = Vec::new();
    for i in 0..6 {
        let lock = clients[i % 2].rwlock(name).preference(preference);
        let (h, stop) = (h.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let g = lock.read().timeout(EVENTUALLY).await.expect("read");
                let t = h.enter(Kind::Read, g.fencing_token());
                sleep(ms(5)).await;
                h.exit(t);
                assert!(g.release().await.expect("release"));
            }
        }));
    }
    (stop, tasks)
}

/// Writer preference: once a writer waits, no new reader is admitted, and the writer is
/// granted as soon as the reads inside end.
///
/// A blocker reader stays inside while the writer waits, so the window in which new reads
/// must not be granted is a full second long; reads whose grant was already on its way when
/// the writer registered get a 500 ms allowance.
async fn writer_preference_stops_new_readers(b: Backend) {
    let name = "wpref";
    let h = History::new();
    let c = b.client().await;
    let lock = c.rwlock(name);
    let blocker = lock.read().await.expect("blocker read");
    let blocker_ticket = h.enter_as("blocker", Kind::Read, blocker.fencing_token());
    let (stop, readers) = looping_readers(&b, name, Preference::Writer, &h).await;
    sleep(ms(500)).await;

    let writer = {
        let lock = b.client().await.rwlock(name);
        let h = h.clone();
        tokio::spawn(async move {
            let g = lock.write().timeout(EVENTUALLY).await.expect("write");
            let granted = Instant::now();
            let t = h.enter_as("writer", Kind::Write, g.fencing_token());
            sleep(ms(50)).await;
            h.exit(t);
            assert!(g.release().await.expect("release"));
            (granted, Instant::now())
        })
    };
    until_waiters(1, || lock.inspect()).await;
    let registered = Instant::now();
    sleep(secs(1)).await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    h.exit(blocker_ticket);
    let blocker_gone = Instant::now();
    assert!(blocker.release().await.expect("release blocker"));
    let (granted, writer_done) = join("writer", writer).await;
    // Readers resume after the writer.
    sleep(ms(300)).await;
    stop.store(true, Ordering::SeqCst);
    for (i, r) in readers.into_iter().enumerate() {
        join(&format!("reader {i}"), r).await;
    }

    h.check_exclusion();
    let grants = h.grants();
    let before = reads_between(&grants, registered - secs(10), registered);
    assert!(
        before.len() > 10,
        "readers barely ran: {} reads",
        before.len()
    );
    let late = reads_between(&grants, registered + ms(500), granted);
    assert!(
        late.is_empty(),
        "{} reads were granted after the writer registered, first: {:?}",
        late.len(),
        late.first()
    );
    assert!(granted >= blocker_gone);
    let after = reads_between(&grants, writer_done, Instant::now());
    assert!(!after.is_empty(), "readers never resumed after the writer");
}

/// Reader preference: reads keep being granted while a writer waits.
async fn reader_preference_keeps_admitting_readers(b: Backend) {
    let name = "rpref";
    let h = History::new();
    let c = b.client().await;
    let lock = c.rwlock(name).preference(Preference::Reader);
    let blocker = lock.read().await.expect("blocker read");
    let (stop, readers) = looping_readers(&b, name, Preference::Reader, &h).await;
    sleep(ms(300)).await;

    let asked = Instant::now();
    let writer = {
        let lock = b.client().await.rwlock(name).preference(Preference::Reader);
        tokio::spawn(async move {
            let g = lock.write().timeout(EVENTUALLY).await.expect("write");
            assert!(g.release().await.expect("release"));
        })
    };
    sleep(secs(1)).await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    let window = reads_between(&h.grants(), asked + ms(300), Instant::now()).len();
    stop.store(true, Ordering::SeqCst);
    assert!(blocker.release().await.expect("release blocker"));
    for (i, r) in readers.into_iter().enumerate() {
        join(&format!("reader {i}"), r).await;
    }
    join("writer", writer).await;
    h.check_exclusion();
    assert!(
        window > 10,
        "only {window} reads were granted while the writer waited"
    );
}

both_backends!(
    writer_preference_stops_new_readers,
    reader_preference_keeps_admitting_readers
);

/// Fair: arrivals R1 W1 R2 R3 W2 are granted R1, W1, {R2 R3 together}, W2.
async fn fair_grants_in_arrival_order(b: Backend) {
    let clients = [b.client().await, b.client().await];
    let handle = |i: usize| clients[i % 2].rwlock("fair").preference(Preference::Fair);
    let h = History::new();
    let together = Arc::new(tokio::sync::Barrier::new(2));

    let r1 = handle(0).read().await.expect("R1");
    let r1_ticket = h.enter_as("R1", Kind::Read, r1.fencing_token());
    let probe = handle(0);
    let mut tasks = Vec::new();
    for (i, label) in ["W1", "R2", "R3", "W2"].into_iter().enumerate() {
        let lock = handle(i + 1);
        let (h, together) = (h.clone(), together.clone());
        tasks.push(tokio::spawn(async move {
            if label.starts_with('W') {
                let g = lock.write().await.expect(label);
                let t = h.enter_as(label, Kind::Write, g.fencing_token());
                sleep(ms(100)).await;
                h.exit(t);
                assert!(g.release().await.expect("release"));
            } else {
                let g = lock.read().await.expect(label);
                let t = h.enter_as(label, Kind::Read, g.fencing_token());
                // Both readers must hold at once, or this never completes.
                timeout(secs(10), together.wait())
                    .await
                    .unwrap_or_else(|_| panic!("{label} was not admitted together with its peer"));
                sleep(ms(50)).await;
                h.exit(t);
                assert!(g.release().await.expect("release"));
            }
        }));
        // Each arrival must be queued before the next one comes.
        until_waiters(i + 1, || probe.inspect()).await;
    }
    sleep(ms(100)).await;
    assert_eq!(h.grants().len(), 1, "someone overtook the queue");
    h.exit(r1_ticket);
    assert!(r1.release().await.expect("release R1"));
    for (i, t) in tasks.into_iter().enumerate() {
        join(&format!("arrival {i}"), t).await;
    }
    h.check_exclusion();
    h.check_shared_fences();
    let order: Vec<String> = h.grants().into_iter().map(|g| g.task).collect();
    let middle = {
        let mut m = order[2..4].to_vec();
        m.sort();
        m
    };
    assert_eq!(
        (&order[..2], middle.as_slice(), &order[4..]),
        (
            &["R1".to_owned(), "W1".to_owned()][..],
            &["R2".to_owned(), "R3".to_owned()][..],
            &["W2".to_owned()][..]
        ),
        "grant order {order:?}"
    );
}

/// A reader that dies with renewal off expires alone: a live reader keeps its hold, and a
/// later writer gets in once the live reader leaves.
async fn dead_reader_expires_alone(b: Backend) {
    let lease = ms(1500);
    let name = "dead-reader";
    let (tx, rx) = tokio::sync::oneshot::channel();
    let dying = b.client().await.rwlock(name).lease(lease).auto_renew(false);
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let g = dying.read().await.expect("dying read");
        // A crash: no renewal, and the guard's Drop (which would release) never runs.
        std::mem::forget(g);
        tx.send(()).expect("signal");
        std::future::pending::<()>().await;
    });
    rx.await.expect("dying reader holds");
    task.abort();
    let _ = task.await;

    let c = b.client().await;
    let lock = c.rwlock(name).lease(lease);
    let live = lock.read().await.expect("another reader proceeds");
    assert_eq!(lock.inspect().await.expect("inspect").holders.len(), 2);
    assert!(support::would_block(lock.try_write().await));

    // Wait for the dead reader's lease to end; the live one renews past it.
    loop {
        let holders = lock.inspect().await.expect("inspect").holders;
        if holders.len() == 1 {
            assert_eq!(holders[0].kind, HoldKind::Read);
            break;
        }
        assert!(
            started.elapsed() < lease + secs(5),
            "the dead reader never expired: {holders:?}"
        );
        sleep(ms(20)).await;
    }
    assert!(
        started.elapsed() + ms(50) >= lease,
        "the dead reader expired early"
    );
    assert!(live.is_held(), "the live reader expired with the dead one");
    assert!(support::would_block(lock.try_write().await));
    let another = lock.try_read().await.expect("readers proceed");
    assert!(another.release().await.expect("release"));
    assert!(live.release().await.expect("release live"));
    let w = lock
        .try_write()
        .await
        .expect("a writer gets in once the live reader left");
    assert!(w.release().await.expect("release"));
}

/// A waiting writer that dies (its process gone, no cleanup) holds back readers only for
/// its heartbeat window.
async fn dead_waiting_writer_stops_blocking(b: Backend) {
    let name = "dead-writer";
    let heartbeat = ms(1500);
    let c = b.client().await;
    let lock = c.rwlock(name);
    let inside = lock.read().await.expect("read");

    // A crashed writer: one waiting attempt on its own connection, then silence.
    let crashed = b.client().await;
    let keys = crashed.keys(name).expect("keys");
    let claim = Request::Mutex.claim(secs(30), heartbeat);
    let announced = Instant::now();
    let reply = crashed
        .store()
        .acquire(&keys, &claim, true, None)
        .await
        .expect("acquire");
    assert!(matches!(reply, Acquire::Busy(_)), "{reply:?}");
    assert_eq!(lock.inspect().await.expect("inspect").waiters.len(), 1);
    assert!(
        support::would_block(lock.try_read().await),
        "a reader got past a waiting writer"
    );

    let r = lock.read().timeout(EVENTUALLY).await.expect("read after");
    let waited = announced.elapsed();
    assert!(
        waited + ms(50) >= heartbeat,
        "readers were admitted after {waited:?}, inside the writer's heartbeat window"
    );
    assert!(
        waited < heartbeat + secs(5),
        "readers were admitted only after {waited:?}"
    );
    assert!(lock.inspect().await.expect("inspect").waiters.is_empty());
    assert!(r.release().await.expect("release"));
    assert!(inside.release().await.expect("release"));
}

/// A writer whose wait ends (timeout, or its future dropped) withdraws at once: readers do
/// not wait for its 30 s heartbeat window.
async fn cancelled_writer_stops_blocking_at_once(b: Backend) {
    let name = "cancelled-writer";
    let c = b.client().await;
    let lock = c.rwlock(name);
    let inside = lock.read().await.expect("read");
    let writer = b.client().await.rwlock(name).heartbeat(secs(30));

    // Timed out.
    let e = writer
        .write()
        .timeout(ms(600))
        .await
        .expect_err("write beside a reader");
    assert!(e.is_timeout(), "{e:?}");
    assert!(lock.inspect().await.expect("inspect").waiters.is_empty());
    let r = lock
        .try_read()
        .await
        .expect("readers admitted at once after a timed-out write");
    assert!(r.release().await.expect("release"));

    // Dropped (the task is aborted while it waits).
    let task = {
        let writer = writer.clone();
        tokio::spawn(async move {
            let _g = writer.write().await;
        })
    };
    until_waiters(1, || lock.inspect()).await;
    assert!(support::would_block(lock.try_read().await));
    task.abort();
    let _ = task.await;
    let dropped = Instant::now();
    let r = loop {
        if let Some(r) = lock.try_read().await.granted("try") {
            break r;
        }
        assert!(
            dropped.elapsed() < secs(5),
            "readers still held back by a dropped write() (heartbeat window is 30 s)"
        );
        sleep(ms(10)).await;
    };
    assert!(lock.inspect().await.expect("inspect").waiters.is_empty());
    assert!(r.release().await.expect("release"));
    assert!(inside.release().await.expect("release"));
}

/// Downgrade under fire: two tasks hammer `try_write`; the shared log would show any writer
/// that got in between the write hold and the read hold it became.
async fn downgrade_races_no_writer(b: Backend) {
    let name = "downgrade-race";
    let h = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut rivals = Vec::new();
    for i in 0..2 {
        let lock = b.client().await.rwlock(name);
        let (h, stop) = (h.clone(), stop.clone());
        rivals.push(tokio::spawn(async move {
            let mut rng = Rng::new(100 + i);
            while !stop.load(Ordering::SeqCst) {
                if let Some(g) = lock.try_write().await.granted("try_write") {
                    let t = h.enter_as(format!("rival{i}"), Kind::Write, g.fencing_token());
                    sleep(ms(10)).await;
                    h.exit(t);
                    assert!(g.release().await.expect("release"));
                }
                sleep(rng.ms(2)).await;
            }
        }));
    }
    let c = b.client().await;
    let lock = c.rwlock(name);
    let other = b.client().await.rwlock(name);
    for _ in 0..10 {
        let w = lock.write().timeout(EVENTUALLY).await.expect("write");
        let fence = w.fencing_token();
        let wt = h.enter_as("main", Kind::Write, fence);
        sleep(ms(5)).await;
        let r = WriteGuard::downgrade(w).await.expect("downgrade");
        // The write ticket stays open until the read hold exists: a rival granted in
        // between overlaps one of them in the log.
        h.exit(wt);
        let rt = h.enter_as("main", Kind::Read, r.fencing_token());
        assert_eq!(r.fencing_token(), fence);
        assert!(r.is_held());
        assert!(support::would_block(other.try_write().await));
        sleep(ms(20)).await;
        h.exit(rt);
        assert!(r.release().await.expect("release"));
    }
    stop.store(true, Ordering::SeqCst);
    for (i, t) in rivals.into_iter().enumerate() {
        join(&format!("rival {i}"), t).await;
    }
    h.check_exclusion();
}

/// Downgrade with a writer already waiting: the waiting writer stays out while the read
/// guard lives, and gets in after it.
async fn downgrade_keeps_waiting_writer_out(b: Backend, preference: Preference) {
    let name = format!("downgrade-wait-{preference:?}");
    let c = b.client().await;
    let lock = c.rwlock(&name).preference(preference);
    let w = lock.write().await.expect("write");
    let fence = w.fencing_token();
    let waiting = {
        let lock = b.client().await.rwlock(&name).preference(preference);
        tokio::spawn(async move {
            let g = lock
                .write()
                .timeout(EVENTUALLY)
                .await
                .expect("waiting write");
            let f = g.fencing_token();
            assert!(g.release().await.expect("release"));
            f
        })
    };
    until_waiters(1, || lock.inspect()).await;
    let r = WriteGuard::downgrade(w).await.expect("downgrade");
    assert_eq!(r.fencing_token(), fence);
    sleep(ms(500)).await;
    assert!(r.is_held(), "the read hold was lost");
    assert!(
        !waiting.is_finished(),
        "a writer got in after the downgrade"
    );
    let info = lock.inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(
        matches!(info.holders[0].kind, HoldKind::Read | HoldKind::Permits(1)),
        "{info:?}"
    );
    assert_eq!(info.waiters.len(), 1, "{info:?}");
    assert!(support::would_block(lock.try_write().await));
    assert!(r.release().await.expect("release"));
    let next = join("waiting writer", waiting).await;
    assert!(next > fence, "fence {next} after {fence}");
}

async fn downgrade_with_waiting_writer(b: Backend) {
    downgrade_keeps_waiting_writer_out(b, Preference::Writer).await
}

async fn downgrade_with_waiting_writer_fair(b: Backend) {
    downgrade_keeps_waiting_writer_out(b, Preference::Fair).await
}

both_backends!(
    downgrade_races_no_writer,
    downgrade_with_waiting_writer,
    downgrade_with_waiting_writer_fair
);

/// Every acquire path of `lock` fails with an invalid-input error, without waiting.
async fn assert_all_invalid(what: &str, lock: &RwLock) {
    let quick = secs(5);
    let t = secs(1);
    let results = [
        ("read", timeout(quick, lock.read()).await.map(|r| r.err())),
        (
            "try_read",
            timeout(quick, lock.try_read()).await.map(|r| r.err()),
        ),
        (
            "read_timeout",
            timeout(quick, lock.read().timeout(t))
                .await
                .map(|r| r.err()),
        ),
        ("write", timeout(quick, lock.write()).await.map(|r| r.err())),
        (
            "try_write",
            timeout(quick, lock.try_write()).await.map(|r| r.err()),
        ),
        (
            "write_timeout",
            timeout(quick, lock.write().timeout(t))
                .await
                .map(|r| r.err()),
        ),
    ];
    for (op, res) in results {
        let e = res
            .unwrap_or_else(|_| panic!("{what}: {op} waited instead of failing"))
            .unwrap_or_else(|| panic!("{what}: {op} succeeded"));
        assert!(e.is_invalid_input(), "{what}: {op} gave {e:?}");
    }
}

/// Bad names and options are refused before anything reaches Redis, for every preference.
async fn invalid_input_is_refused(b: Backend) {
    let c = b.client().await;
    let year = secs(365 * 24 * 3600);
    let long = "y".repeat(1025);
    for p in [Preference::Writer, Preference::Reader, Preference::Fair] {
        let cases: Vec<(&str, RwLock)> = vec![
            ("empty name", c.rwlock("")),
            ("1025-byte name", c.rwlock(&long)),
            ("zero lease", c.rwlock("bad").lease(Duration::ZERO)),
            ("two-year lease", c.rwlock("bad").lease(2 * year)),
            (
                "renew_every == lease",
                c.rwlock("bad").lease(secs(1)).renew_every(secs(1)),
            ),
            ("zero heartbeat", c.rwlock("bad").heartbeat(Duration::ZERO)),
            ("two-year heartbeat", c.rwlock("bad").heartbeat(2 * year)),
        ];
        for (what, lock) in cases {
            assert_all_invalid(&format!("{p:?} {what}"), &lock.preference(p)).await;
        }
    }
    if b.server.is_some() {
        assert_eq!(b.cli(&["DBSIZE"]), "0", "a refused call wrote to Redis");
    }
}

/// Foreign data at any key of the lock gives a typed error and is left exactly as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreign_keys_are_reported_and_kept() {
    let b = Backend::redis();
    let c = b.client().await;
    let quick = secs(5);
    type Case<'a> = (&'a str, Preference, &'a [&'a str], &'a str);
    let cases: [Case<'_>; 7] = [
        (
            "w-hash",
            Preference::Writer,
            &["HSET", "rl:{w-hash}:w", "a", "b"],
            "hash",
        ),
        (
            "w-text",
            Preference::Writer,
            &["SET", "rl:{w-text}:w", "hello"],
            "string",
        ),
        (
            "r-text",
            Preference::Writer,
            &["SET", "rl:{r-text}:r", "hello"],
            "string",
        ),
        (
            "r-list",
            Preference::Reader,
            &["RPUSH", "rl:{r-list}:r", "x"],
            "list",
        ),
        (
            "wq-hash",
            Preference::Writer,
            &["HSET", "rl:{wq-hash}:wq", "a", "b"],
            "hash",
        ),
        (
            "h-text",
            Preference::Fair,
            &["SET", "rl:{h-text}:h", "hello"],
            "string",
        ),
        (
            "q-hash",
            Preference::Fair,
            &["HSET", "rl:{q-hash}:q", "a", "b"],
            "hash",
        ),
    ];
    for (name, p, setup, ty) in cases {
        b.cli(setup);
        let key = setup[1];
        let dump = b.cli(&["DUMP", key]);
        let lock = c.rwlock(name).preference(p);
        let results = [
            ("read", timeout(quick, lock.read()).await.map(|r| r.err())),
            (
                "try_read",
                timeout(quick, lock.try_read()).await.map(|r| r.err()),
            ),
            ("write", timeout(quick, lock.write()).await.map(|r| r.err())),
            (
                "try_write",
                timeout(quick, lock.try_write()).await.map(|r| r.err()),
            ),
        ];
        for (op, res) in results {
            let e = res
                .unwrap_or_else(|_| panic!("{name}: {op} waited on a foreign key"))
                .unwrap_or_else(|| panic!("{name}: {op} succeeded over a foreign key"));
            assert!(e.is_wrong_type(), "{name}: {op} gave {e:?}");
        }
        assert_eq!(b.cli(&["TYPE", key]), ty, "{name}: type changed");
        assert_eq!(b.cli(&["DUMP", key]), dump, "{name}: value changed");
        assert_eq!(b.cli(&["TTL", key]), "-1", "{name}: a TTL was set");
    }
    let keys = b.cli(&["KEYS", "*"]);
    assert_eq!(
        b.cli(&["DBSIZE"]),
        "7",
        "keys written beside foreign ones:\n{keys}"
    );
}

/// A fence counter holding text that is not a number is foreign data: a reader must get a
/// typed error, and nothing may be written beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreign_fence_text_is_reported_and_kept() {
    let b = Backend::redis();
    let c = b.client().await;
    b.cli(&["SET", "rl:{rw-text-fence}:fence", "not a number"]);
    let step = "read() waited on a foreign key";
    let res = in_time(secs(5), step, c.rwlock("rw-text-fence").read()).await;
    let keys = b.cli(&["KEYS", "*"]);
    assert_eq!(b.cli(&["GET", "rl:{rw-text-fence}:fence"]), "not a number");
    assert_eq!(
        b.cli(&["DBSIZE"]),
        "1",
        "keys written:\n{keys}\nreply: {res:?}"
    );
    let e = res.expect_err("a reader was granted over a foreign fence");
    assert!(e.is_wrong_type(), "read() gave {e:?}");
}

/// A fresh client on the same backend sees the lock's state: keys, not process memory.
async fn state_is_shared_between_clients(b: Backend) {
    let a = b.client().await.rwlock("shared-state");
    let other: LockClient = b.client().await;
    let r = a.read().await.expect("read");
    let info = other
        .rwlock("shared-state")
        .inspect()
        .await
        .expect("inspect");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].kind, HoldKind::Read);
    assert!(support::would_block(
        other.rwlock("shared-state").try_write().await
    ));
    assert!(r.release().await.expect("release"));
}

/// Asserts `outcome` is a `FamilyConflict` naming `name`.
fn assert_conflict<T: std::fmt::Debug>(what: &str, name: &str, outcome: redis_locks::Result<T>) {
    match outcome {
        Err(e) if e.is_family_conflict() => {
            assert!(e.to_string().contains(name), "{what}: {e}");
        }
        other => panic!("{what}: expected a family conflict, got {other:?}"),
    }
}

/// The lease lock (Mutex, RwLock with Writer/Reader preference) and the ticket queue
/// (FairLock, Semaphore, RwLock with Fair preference) keep separate state. A name is held
/// through one of them at a time: an acquire through the other is refused with a typed error,
/// and works again once the name is free. Without this, a Fair and a Writer-preference RwLock
/// handle of one name could both write.
async fn one_name_is_held_through_one_family_at_a_time(b: Backend) {
    let c = b.client().await;
    let name = "one-family";
    let writer_pref = c.rwlock(name);
    let fair = c.rwlock(name).preference(Preference::Fair);

    // Held through the lease lock.
    let w = writer_pref.write().await.expect("write");
    assert_conflict("fair write", name, fair.try_write().await);
    assert_conflict("fair read", name, fair.try_read().await);
    assert_conflict("fair lock", name, c.fair_lock(name).try_lock().await);
    assert_conflict("semaphore", name, c.semaphore(name, 3).try_acquire().await);
    let waited = fair.write().timeout(secs(5)).await;
    assert_conflict("waiting fair write", name, waited);
    // The same family just waits its turn.
    assert!(support::would_block(c.mutex(name).try_lock().await));
    assert!(w.release().await.expect("release"));

    // Free again: the ticket queue may take it, and then the lease lock is refused.
    let r = fair.read().await.expect("fair read");
    assert_conflict("write", name, writer_pref.try_write().await);
    assert_conflict("read", name, writer_pref.try_read().await);
    assert_conflict("mutex", name, c.mutex(name).lock().timeout(secs(5)).await);
    let info = fair.inspect().await.expect("inspect");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(
        info.waiters.is_empty(),
        "a refused caller stayed queued: {info:?}"
    );
    assert!(r.release().await.expect("release"));
    let m = c.mutex(name).try_lock().await.expect("free");
    assert!(m.release().await.expect("release"));
}

both_backends!(
    fair_grants_in_arrival_order,
    dead_reader_expires_alone,
    dead_waiting_writer_stops_blocking,
    cancelled_writer_stops_blocking_at_once,
    invalid_input_is_refused,
    state_is_shared_between_clients,
    one_name_is_held_through_one_family_at_a_time,
);
