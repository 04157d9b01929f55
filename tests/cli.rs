//! The `redis-locks` CLI end to end against a real redis-server (feature `cli`).

mod support;
use support::fake_server::closed_port;
use support::quick::Quick;
use support::time::{ms, secs};

use std::process::{Command, Output};

use redis_locks::{LockClient, Preference, TOKEN_PREFIX_LEN};
use support::backend::until_waiters;
use support::RedisServer;

fn cli(server: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .arg("--url")
        .arg(server.url())
        .args(args)
        .output()
        .expect("run the redis-locks binary")
}

fn cli_with_prefix(server: &RedisServer, prefix: &str, args: &[&str]) -> Output {
    let mut with_prefix = vec!["--prefix", prefix];
    with_prefix.extend_from_slice(args);
    cli(server, &with_prefix)
}

/// A `watch` running in the background, read line by line: a test changes the server only
/// once the first view is printed (a fixed sleep raced the CLI's start on a loaded machine,
/// and the change then landed before the first view).
struct Watch {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    seen: Vec<String>,
}

impl Watch {
    fn start(server: &RedisServer, args: &[&str]) -> Watch {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
            .arg("--url")
            .arg(server.url())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run the redis-locks binary");
        let out = child.stdout.take().expect("piped stdout");
        Watch {
            child,
            lines: std::io::BufReader::new(out).lines(),
            seen: Vec::new(),
        }
    }

    /// Reads until a line satisfies `shown`; panics with what was read if the watch ends first.
    fn until(&mut self, shown: impl Fn(&str) -> bool) {
        for line in self.lines.by_ref() {
            let line = line.expect("read the watch's output");
            let done = shown(&line);
            self.seen.push(line);
            if done {
                return;
            }
        }
        panic!("the watch ended first:\n{}", self.seen.join("\n"));
    }

    /// Waits for the watch to end: its exit status and its whole output.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        for line in self.lines.by_ref() {
            self.seen.push(line.expect("read the watch's output"));
        }
        let status = self.child.wait().expect("wait for the watch");
        (status, self.seen.join("\n"))
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stdout of a run that succeeded.
fn ok(out: Output) -> String {
    assert!(out.status.success(), "{out:?}");
    stdout(&out)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every `"token":"..."` value of a JSON view, in order.
fn json_tokens(json: &str) -> Vec<String> {
    json.split("\"token\":\"")
        .skip(1)
        .map(|rest| rest.split('"').next().expect("closing quote").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shows_readers_and_a_waiting_writer() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let lock = client.rwlock("catalog");
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(lock.read().await.expect("read"));
    }
    let writer = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await })
    };
    until_waiters(1, || lock.inspect()).await;

    let json = ok(cli(&server, &["inspect", "catalog", "--json"]));
    assert_eq!(json.matches("\"kind\":\"read\"").count(), 3, "{json}");
    assert_eq!(json.matches("heartbeat_remaining_ms").count(), 1, "{json}");
    assert!(!json.contains("\"kind\":\"write\""), "{json}");

    let text = stdout(&cli(&server, &["inspect", "catalog"]));
    assert!(text.contains("holders (3)"), "{text}");
    assert!(text.contains("waiting writers (1)"), "{text}");

    // Tokens are shown as short prefixes only: the prefixes the library reports.
    let info = lock.inspect().await.expect("inspect");
    let mut shown = json_tokens(&json);
    let mut expected: Vec<String> = info
        .holders
        .iter()
        .map(|h| h.token_prefix.clone())
        .chain(info.waiters.iter().map(|w| w.token_prefix.clone()))
        .collect();
    shown.sort();
    expected.sort();
    assert_eq!(shown, expected, "{json}");
    assert!(shown.iter().all(|t| t.len() == TOKEN_PREFIX_LEN), "{json}");
    #[cfg(feature = "testing")]
    for r in &readers {
        let whole = r.token();
        assert!(!json.contains(&whole), "a whole token leaked: {json}");
        assert!(json.contains(&whole[..TOKEN_PREFIX_LEN]), "{json}");
    }

    for r in readers {
        r.release().await.expect("release");
    }
    writer
        .await
        .expect("writer task")
        .expect("writer granted")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shows_a_fair_queue_in_order() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let fair = client.fair_lock("jobs");
    let holder = fair.lock().await.expect("lock");
    let mut waiters = Vec::new();
    for i in 1..=5usize {
        let f = fair.clone();
        waiters.push(tokio::spawn(async move { f.lock().await }));
        until_waiters(i, || fair.inspect()).await;
    }
    let info = fair.inspect().await.expect("inspect");
    let out = cli(&server, &["inspect", "jobs", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let json = stdout(&out);
    // Queue entries appear in queue order, positions 0..4, with the right tokens.
    assert_eq!(info.waiters.len(), 5);
    let mut last = 0;
    for (i, w) in info.waiters.iter().enumerate() {
        assert_eq!(w.position, i);
        let entry = format!(
            "{{\"position\":{i},\"token\":\"{}\",\"label\":\"{}\",\"weight\":1,",
            w.token_prefix,
            w.label.as_deref().expect("a label")
        );
        let at = json
            .find(&entry)
            .unwrap_or_else(|| panic!("{entry} missing in {json}"));
        assert!(at >= last, "queue out of order in {json}");
        last = at;
    }
    assert!(
        json.contains("\"family\":\"queue\",\"kind\":\"permits\",\"permits\":1,"),
        "{json}"
    );
    assert!(json.contains("\"state\":\"held\""), "{json}");
    let text = stdout(&cli(&server, &["inspect", "jobs"]));
    assert!(text.contains("queue (5)"), "{text}");

    holder.release().await.expect("release");
    for w in waiters {
        w.await
            .expect("task")
            .expect("granted")
            .release()
            .await
            .expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_force_release_and_exit_codes() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let a = client.mutex("alpha").lock().await.expect("lock");
    let fence = a.fencing_token();
    let _b = client.mutex("beta:1").lock().await.expect("lock");

    let out = cli(&server, &["list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), "[\"alpha\",\"beta:1\"]");
    let out = cli(&server, &["list", "beta*"]);
    assert_eq!(stdout(&out).trim(), "beta:1");

    // Unknown lock: exit code 3, and a hint on where to look.
    let out = cli(&server, &["inspect", "nothing-here"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stderr(&out).contains("redis-locks list"), "{out:?}");
    // Without --yes nothing happens: exit code 2, a hint, and the holder keeps the lock.
    let out = cli(&server, &["force-release", "alpha"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("--yes"), "{out:?}");
    assert!(support::would_block(client.mutex("alpha").try_lock().await));

    // A name that never existed: nothing to release, and no fence key is left behind.
    let out = cli(&server, &["force-release", "never-was", "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(server.cli(&["EXISTS", "rl:{never-was}:fence"]), "0");

    let out = cli(&server, &["force-release", "alpha", "--yes", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).starts_with("{\"name\":\"alpha\",\"fence\":"),
        "{out:?}"
    );
    // After the force release, alpha has only its fence left: idle; beta:1 is still held.
    let out = cli(&server, &["list", "--state"]);
    assert_eq!(stdout(&out).trim(), "alpha\tidle\nbeta:1\theld", "{out:?}");
    let out = cli(&server, &["list", "--state", "--json"]);
    assert_eq!(
        stdout(&out).trim(),
        "[{\"name\":\"alpha\",\"state\":\"idle\"},{\"name\":\"beta:1\",\"state\":\"held\"}]"
    );
    let next = client.mutex("alpha").try_lock().await.expect("free now");
    assert!(
        next.fencing_token() > fence + 1,
        "the fence was bumped past the evicted holder"
    );
    // The evicted holder is told at its next renewal.
    assert!(
        !a.release().await.expect("release"),
        "the evicted guard no longer held it"
    );

    let out = cli(
        &server,
        &[
            "watch",
            "alpha",
            "--count",
            "2",
            "--interval-ms",
            "50",
            "--json",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    // Nothing changed between the two reads: the first view only.
    assert_eq!(stdout(&out).lines().count(), 1);
    let year = |line: &str| line[7..11].parse::<u32>().unwrap_or(0);
    for line in stdout(&out).lines() {
        // Each view says when it was read: {"at":"YYYY-MM-DDTHH:MM:SS.mmmZ",...
        assert!(
            line.starts_with("{\"at\":\"") && &line[30..32] == "Z\"",
            "{line}"
        );
        assert!(year(line) >= 2024, "{line}");
    }

    // Unreachable server: exit code 1.
    let out = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .args(["--url", "redis://127.0.0.1:1/", "inspect", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("what to do"), "{out:?}");
    assert!(stderr(&out).contains("--url"), "{out:?}");
    // A refused prefix: exit code 2 and what to pass instead.
    let out = cli(&server, &["--prefix", "a{b", "list"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("--prefix"), "{out:?}");
}

/// A key prefix is matched literally by `list`, even when it contains glob characters:
/// `app[1]` and `app\1` are globs that match `app1`, and must list only their own locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_matches_the_prefix_literally() {
    let server = RedisServer::start();
    let mut guards = Vec::new();
    for (prefix, name) in [
        ("app1", "plain"),
        ("app[1]", "bracketed"),
        ("app\\1", "backslashed"),
        ("app*", "starred"),
        ("app?", "questioned"),
    ] {
        let client = LockClient::builder()
            .prefix(prefix)
            .connect(&server.url())
            .await
            .expect("connect");
        guards.push(client.mutex(name).lock().await.expect("lock"));
    }
    for (prefix, listed) in [
        ("app1", "plain"),
        ("app[1]", "bracketed"),
        ("app\\1", "backslashed"),
        ("app*", "starred"),
        ("app?", "questioned"),
    ] {
        let out = cli_with_prefix(&server, prefix, &["list", "--json"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            stdout(&out).trim(),
            format!("[\"{listed}\"]"),
            "prefix {prefix}"
        );
    }
    // The name pattern is still a glob, under the literal prefix.
    let out = cli_with_prefix(&server, "app[1]", &["list", "brack*"]);
    assert_eq!(stdout(&out).trim(), "bracketed", "{out:?}");
    for g in guards {
        g.release().await.expect("release");
    }
}

/// Every holder and waiter shows its client's label: the one set on the builder, or the
/// default `<hostname>-<pid>`; in the readable view and in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inspect_shows_who_holds_and_who_waits() {
    let server = RedisServer::start();
    let worker = LockClient::builder()
        .label("billing-worker-3")
        .connect(&server.url())
        .await
        .expect("connect");
    let default = LockClient::connect(&server.url()).await.expect("connect");
    let ledger = worker.fair_lock("ledger");
    let held = ledger.lock().await.expect("lock");
    let waiter = {
        let lock = default.fair_lock("ledger");
        tokio::spawn(async move { lock.lock().await })
    };
    until_waiters(1, || ledger.inspect()).await;
    let pid = format!("-{}", std::process::id());

    let text = ok(cli(&server, &["inspect", "ledger"]));
    assert!(text.contains("billing-worker-3"), "{text}");
    assert!(
        text.contains(&pid),
        "the waiter's default label ends with the pid: {text}"
    );

    let out = cli(&server, &["inspect", "ledger", "--json"]);
    let json = stdout(&out);
    assert!(json.contains("\"label\":\"billing-worker-3\""), "{json}");
    assert!(
        json.split("\"label\":\"")
            .skip(1)
            .any(|l| l.split('"').next().unwrap().ends_with(&pid)),
        "{json}"
    );

    held.release().await.expect("release");
    let next = waiter.await.expect("join").expect("granted");
    next.release().await.expect("release");
}

/// A label that could not ride in a token is refused when the client is built.
#[test]
fn a_bad_label_is_refused() {
    for bad in [
        "",
        "host:1234",
        "a b",
        &"x".repeat(redis_locks::MAX_LABEL_LEN + 1),
    ] {
        let err = LockClient::builder()
            .label(bad)
            .in_memory()
            .expect_err("refused");
        assert!(err.is_invalid_input(), "{bad:?}: {err}");
    }
}

fn cli_args(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .args(args)
        .output()
        .expect("run the redis-locks binary")
}

/// `--cluster`: `inspect` reads a lock through the cluster and `list` finds names held on
/// every master (names spread over the slots of all three).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_mode_inspects_and_lists_every_master() {
    use redis_locks::testing::keys::{hash_slot, LockKeys};
    let cluster = support::RedisCluster::start(3, 0);
    let urls = cluster.urls();
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .label("cluster-holder")
        .cluster(&refs)
        .await
        .expect("cluster");
    // One name in each third of the slot range: each master holds one.
    let mut names = Vec::new();
    for third in 0..3u16 {
        let name = (0..)
            .map(|i| format!("job-{i}"))
            .find(|n| {
                let keys = LockKeys::new("rl", n).expect("name");
                hash_slot(keys.channel().as_bytes()) / 5462 == third
            })
            .expect("a name in each third");
        names.push(name);
    }
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.mutex(name).lock().await.expect("lock"));
    }
    let joined = urls[..1].join(",");
    let listed = ok(cli_args(&["--cluster", &joined, "list"]));
    for name in &names {
        assert!(
            listed.lines().any(|l| l == name),
            "{name} missing: {listed}"
        );
    }
    let json = ok(cli_args(&[
        "--cluster",
        &joined,
        "inspect",
        &names[2],
        "--json",
    ]));
    assert!(json.contains("\"label\":\"cluster-holder\""), "{json}");
    assert!(json.contains("\"state\":\"held\""), "{json}");
    for g in guards {
        g.release().await.expect("release");
    }
}

/// `--quorum`: `inspect` reads a lock held through the quorum (no ticket queue there) and
/// `list` finds its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quorum_mode_inspects_and_lists() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .label("quorum-holder")
        .quorum(&refs)
        .await
        .expect("quorum");
    let guard = client.mutex("reports").lock().await.expect("lock");
    let joined = urls.join(",");
    let text = ok(cli_args(&["--quorum", &joined, "inspect", "reports"]));
    assert!(
        text.contains("quorum-holder") && text.contains("held"),
        "{text}"
    );
    let out = cli_args(&["--quorum", &joined, "list"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).lines().any(|l| l == "reports"), "{out:?}");
    guard.release().await.expect("release");
}

/// `--sentinel` with `--master`: `inspect` and `list` reach the primary the sentinels name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_mode_inspects_and_lists() {
    let set = tokio::task::block_in_place(|| support::RedisSentinels::start("clilocks"));
    let urls = set.sentinel_urls();
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .label("sentinel-holder")
        .sentinel(&refs, "clilocks")
        .await
        .expect("sentinel");
    let guard = client.mutex("nightly").lock().await.expect("lock");
    let joined = urls.join(",");
    let text = ok(cli_args(&[
        "--sentinel",
        &joined,
        "--master",
        "clilocks",
        "inspect",
        "nightly",
    ]));
    assert!(
        text.contains("sentinel-holder") && text.contains("held"),
        "{text}"
    );
    let out = cli_args(&["--sentinel", &joined, "--master", "clilocks", "list"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).lines().any(|l| l == "nightly"), "{out:?}");
    // --sentinel without --master is an input error.
    let out = cli_args(&["--sentinel", &joined, "list"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    guard.release().await.expect("release");
}

/// `leader` shows an election's leader (exit 3 when nobody leads); `--follow` prints the
/// leader now and every change, woken by the election's notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_shows_and_follows_an_election() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let out = cli(&server, &["leader", "scheduler"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stdout(&out).contains("nobody leads"), "{out:?}");

    let mut leadership = client.lead("scheduler", "10.0.0.7:9000").await;
    let text = ok(cli(&server, &["leader", "scheduler"]));
    assert!(
        text.contains("10.0.0.7:9000 leads")
            && text.contains(&format!("term {}", leadership.term())),
        "{text}"
    );
    let out = cli(&server, &["leader", "scheduler", "--json"]);
    let json = stdout(&out);
    assert!(
        json.contains(&format!(
            "\"leader\":{{\"value\":\"10.0.0.7:9000\",\"term\":{}",
            leadership.term()
        )),
        "{json}"
    );

    // Follow three states: the leader now, a new value, nobody after the resign. Each change
    // is made once the follower printed the state before it.
    let mut follower = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .args([
            "--url",
            &server.url(),
            "leader",
            "scheduler",
            "--follow",
            "--count",
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the redis-locks binary");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stdout_pipe = follower.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout_pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        tokio::time::timeout(secs(20), rx.recv())
            .await
            .expect("a state within 20 s")
            .expect("the follower prints a line")
    };
    let line = next_line(&mut rx).await;
    assert!(line.contains("10.0.0.7:9000 leads"), "{line}");
    leadership
        .proclaim("10.0.0.8:9000")
        .await
        .expect("proclaim");
    let line = next_line(&mut rx).await;
    assert!(line.contains("10.0.0.8:9000 leads"), "{line}");
    leadership.resign().await.expect("resign");
    let line = next_line(&mut rx).await;
    assert!(line.contains("nobody leads"), "{line}");
    let status = tokio::task::spawn_blocking(move || follower.wait())
        .await
        .expect("task")
        .expect("wait");
    assert!(
        status.success(),
        "--follow --count 3 exits 0 after three states"
    );
    reader.join().expect("reader");
}

/// `list --held` shows only names someone holds or waits for: a name whose only key left is
/// its fence counter (held once, released since) is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_held_leaves_out_fence_only_names() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    client
        .locked("gone")
        .await
        .release()
        .await
        .expect("release");
    assert_eq!(server.cli(&["EXISTS", "rl:{gone}:fence"]), "1");
    let held = client.mutex("busy").lock().await.expect("lock");
    let sem = client.semaphore("pool", 3);
    let permit = sem.acquire().await.expect("acquire");

    let out = cli(&server, &["list"]);
    assert_eq!(stdout(&out).trim(), "busy\ngone\npool", "{out:?}");
    let out = cli(&server, &["list", "--held"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), "busy\npool", "{out:?}");
    let out = cli(&server, &["list", "--held", "--json"]);
    assert_eq!(stdout(&out).trim(), "[\"busy\",\"pool\"]", "{out:?}");
    let out = cli(&server, &["list", "--held", "--state"]);
    assert_eq!(stdout(&out).trim(), "busy\theld\npool\theld", "{out:?}");
    let out = cli(&server, &["list", "--held", "b*"]);
    assert_eq!(stdout(&out).trim(), "busy", "{out:?}");

    held.release().await.expect("release");
    permit.release().await.expect("release");
    let out = cli(&server, &["list", "--held"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), "", "{out:?}");
}

/// `inspect` names the primitive a lock is held as: what the lease lock can tell (a writer
/// is a Mutex or an RwLock writer, readers are an RwLock's), and what the ticket queue's
/// capacity tells (`=1` FairLock, `=2^30` fair RwLock, `~n` or a stored n: a Semaphore of n,
/// with its free permits), an election with its leader's value and term. The exclusive
/// holder's age comes from its fence (the server's clock at its grant); a shared holder's is
/// not stored: it is shown as not known (`-`, `null`), never made up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inspect_tells_the_primitive() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let json = |name: &str| ok(cli(&server, &["inspect", name, "--json"]));
    let text = |name: &str| stdout(&cli(&server, &["inspect", name]));

    // The held-for of the first holder in `j`, if known.
    let held_for = |j: &str| -> Option<u64> {
        let rest = &j[j.find("\"held_for_ms\":").expect("held_for_ms") + 14..];
        let end = rest.find(['}', ',']).expect("end");
        rest[..end].parse().ok()
    };
    let m = client.mutex("m").lock().await.expect("lock");
    let f = client.fair_lock("f").lock().await.expect("lock");
    let r = client.rwlock("rw").read().await.expect("read");
    tokio::time::sleep(ms(1_200)).await;
    let j = json("m");
    assert!(j.contains("\"primitive\":\"mutex_or_rwlock_write\""), "{j}");
    assert!(
        j.contains("\"kind\":\"write\",\"permits\":null,\"primitive\":\"mutex_or_rwlock_write\""),
        "{j}"
    );
    // Held 1.2 s on the server's clock at least; well under a minute.
    let aged = |ms: Option<u64>| ms.is_some_and(|ms| (1_200..60_000).contains(&ms));
    assert!(aged(held_for(&j)), "{j}");
    let t = text("m");
    assert!(t.contains("kind: Mutex or RwLock write"), "{t}");
    // The text says the same in seconds (`held for 1.3s`, not `-`), however late this ran.
    let shown = t
        .split("held for ")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|secs| secs.parse::<f64>().ok());
    assert!(
        shown.is_some_and(|s| aged(Some((s * 1000.0).round() as u64))),
        "{t}"
    );

    let j = json("rw");
    assert!(j.contains("\"primitive\":\"rwlock_read\""), "{j}");
    assert_eq!(
        held_for(&j),
        None,
        "a reader's grant time is not stored: {j}"
    );
    let t = text("rw");
    assert!(t.contains("kind: RwLock read"), "{t}");
    assert!(
        t.contains("held for -") && t.contains("grant time is not stored"),
        "{t}"
    );

    let j = json("f");
    assert!(j.contains("\"primitive\":\"fair_lock\""), "{j}");
    assert!(aged(held_for(&j)), "{j}");
    assert!(text("f").contains("kind: FairLock"));

    let fair = client.rwlock("frw").preference(Preference::Fair);
    let fr = fair.read().await.expect("read");
    let j = json("frw");
    assert!(j.contains("\"primitive\":\"rwlock_fair\""), "{j}");
    assert!(
        j.contains("\"kind\":\"permits\",\"permits\":1,\"primitive\":\"rwlock_fair_read\""),
        "{j}"
    );
    assert!(text("frw").contains("RwLock (fair) read"));

    // A Semaphore of 3 with 2 held, without set_permits: the capacity is the marker's.
    let sem = client.semaphore("s", 3);
    let p1 = sem.acquire().await.expect("acquire");
    let p2 = sem.acquire().await.expect("acquire");
    let j = json("s");
    assert!(
        j.contains("\"primitive\":\"semaphore\",\"fence\":")
            && j.contains("\"permits\":3,\"permits_source\":\"marker\",\"free_permits\":1,"),
        "{j}"
    );
    let t = text("s");
    assert!(
        t.contains("kind: Semaphore of 3: 2 of 3 permits held, 1 free"),
        "{t}"
    );
    assert!(t.contains("1 of 3 permits"), "{t}");

    let e = client.election("e");
    let leadership = e.campaign("node-a").await.expect("campaign");
    let j = json("e");
    assert!(j.contains("\"primitive\":\"election\""), "{j}");
    assert!(
        j.contains(&format!(
            "\"leader\":{{\"value\":\"node-a\",\"term\":{}",
            leadership.term()
        )),
        "{j}"
    );
    let t = text("e");
    assert!(
        t.contains(&format!(
            "kind: election: leader node-a, term {}",
            leadership.term()
        )),
        "{t}"
    );

    m.release().await.expect("release");
    f.release().await.expect("release");
    r.release().await.expect("release");
    fr.release().await.expect("release");
    p1.release().await.expect("release");
    p2.release().await.expect("release");
    leadership.resign().await.expect("resign");
}

/// `leader` on a name held as something else than an election (a Mutex, a Semaphore) says
/// so with exit code 4, instead of "nobody leads".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_refuses_a_name_that_is_no_election() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let m = client.mutex("jobs").lock().await.expect("lock");
    let out = cli(&server, &["leader", "jobs"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(stderr(&out).contains("is not an election"), "{out:?}");
    assert!(stderr(&out).contains("Mutex or RwLock write"), "{out:?}");
    let out = cli(&server, &["leader", "jobs", "--json"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(stdout(&out).contains("\"election\":false"), "{out:?}");

    let sem = client.semaphore("pool", 2);
    let p = sem.acquire().await.expect("acquire");
    let out = cli(&server, &["leader", "pool"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(stderr(&out).contains("Semaphore of 2"), "{out:?}");

    // A name nobody uses: still "nobody leads", exit 3.
    let out = cli(&server, &["leader", "nothing"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    m.release().await.expect("release");
    p.release().await.expect("release");
}

/// `watch` prints the first view, then only what changed: nothing while nothing changes, a
/// line per change (one JSON object each with `--json`); a holder that goes says how long
/// the watch saw it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_prints_only_changes() {
    watch_shows_a_foreign_key_come_and_go();
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let guard = client.mutex("w").lock().await.expect("lock");

    // Nothing changes: the first view only, however many reads.
    let text = ok(cli(
        &server,
        &["watch", "w", "--count", "3", "--interval-ms", "50"],
    ));
    assert_eq!(text.matches("lock w ").count(), 1, "{text}");
    assert!(
        !text.lines().any(|l| l.contains(" + ") || l.contains(" - ")),
        "{text}"
    );

    let mut watch = Watch::start(
        &server,
        &[
            "watch",
            "w",
            "--count",
            "30",
            "--interval-ms",
            "100",
            "--json",
        ],
    );
    watch.until(|l| l.starts_with("{\"at\":\""));
    guard.release().await.expect("release");
    let (status, json) = watch.finish();
    assert!(status.success(), "{json}");
    let lines: Vec<&str> = json.lines().collect();
    assert!(
        lines[0].starts_with("{\"at\":\"") && lines[0].contains("\"holders\":[{"),
        "{json}"
    );
    let changes = &lines[1..];
    assert!(changes.iter().all(|l| l.contains("\"change\":")), "{json}");
    let gone = changes
        .iter()
        .find(|l| l.contains("\"change\":\"removed\",\"what\":\"holder\""))
        .unwrap_or_else(|| panic!("no holder removal in {json}"));
    assert!(!gone.contains("\"seen_for_ms\":null"), "{gone}");
    assert!(
        changes.iter().any(|l| l.contains("\"what\":\"primitive\",\"token\":null,\"was\":\"Mutex or RwLock write\",\"now\":\"not held\"")),
        "{json}"
    );
    assert_eq!(changes.len(), 2, "{json}");
}

/// `force-release NAME --holder PREFIX --yes` evicts the one holder whose token starts with
/// the prefix `inspect` shows, and leaves the others; the evicted guard learns it. A prefix
/// matching several holders (exit 2) or none (exit 3) changes nothing. Evicting the last hold
/// of a family raises the fence; a shared hold among others leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn force_release_evicts_one_holder() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let sem = client.semaphore("pool", 3);
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(sem.acquire().await.expect("acquire"));
    }
    let before = sem.inspect().await.expect("inspect");
    let victim = before.holders[1].token_prefix.clone();

    let out = cli(&server, &["force-release", "pool", "--holder", &victim]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("--yes"), "{out:?}");
    // Every token of this process starts alike: a short prefix matches all three.
    let out = cli(
        &server,
        &["force-release", "pool", "--holder", &victim[..2], "--yes"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("3 holders"), "{out:?}");
    let out = cli(
        &server,
        &["force-release", "pool", "--holder", "zz-none", "--yes"],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stderr(&out).contains("no live holder"), "{out:?}");
    assert_eq!(sem.inspect().await.expect("inspect").holders.len(), 3);

    let args = [
        "force-release",
        "pool",
        "--holder",
        &victim,
        "--yes",
        "--json",
    ];
    let out = cli(&server, &args);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains(&format!(
            "\"evicted\":\"{victim}\",\"fence\":{},\"fence_bumped\":false",
            before.fence
        )),
        "{out:?}"
    );
    let after = sem.inspect().await.expect("inspect");
    let left: Vec<_> = after
        .holders
        .iter()
        .map(|h| h.token_prefix.clone())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!left.contains(&victim), "{left:?}");
    let text = stdout(&cli(&server, &["inspect", "pool"]));
    assert!(text.contains("2 of 3 permits held, 1 free"), "{text}");

    // The last hold of a Mutex: the fence is raised past the evicted holder's.
    let m = client.mutex("m").lock().await.expect("lock");
    let prefix = client.mutex_info("m").await.holders[0].token_prefix.clone();
    let out = cli(
        &server,
        &["force-release", "m", "--holder", &prefix, "--yes"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("fence raised to"), "{out:?}");
    let next = client.mutex("m").try_lock().await.expect("free now");
    assert!(next.fencing_token() > m.fencing_token());
    assert!(
        !m.release().await.expect("release"),
        "the evicted guard held nothing"
    );
    next.release().await.expect("release");
    let mut released = 0;
    for p in permits {
        released += usize::from(p.release().await.expect("release"));
    }
    assert_eq!(released, 2, "only the evicted permit was lost");
}

/// The `redis-locks ...` command lines of README.md and docs/ (in code blocks, or inline
/// code), each with the text after a `#` on its line.
fn documented_commands() -> Vec<(String, String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![format!("{root}/README.md")];
    let mut dirs = vec![format!("{root}/docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path.display().to_string());
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path.display().to_string());
            }
        }
    }
    let subcommand = |cmd: &str| {
        let word = cmd.split_whitespace().nth(1).unwrap_or("");
        ["inspect", "list", "watch", "leader", "force-release"].contains(&word)
            || word.starts_with('-')
    };
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("redis-locks ") {
                let (cmd, note) = trimmed.split_once(" #").unwrap_or((trimmed, ""));
                if subcommand(cmd) {
                    out.push((file.clone(), cmd.trim().to_owned(), note.to_owned()));
                }
                continue;
            }
            for span in line.split('`').skip(1).step_by(2) {
                if span.starts_with("redis-locks ") && subcommand(span) {
                    out.push((file.clone(), span.to_owned(), String::new()));
                }
            }
        }
    }
    out
}

/// Every CLI command shown in README.md and docs/ runs as written against a server where
/// the lock `jobs` is held: it exits with 0, or with a code its line names ("exit 3").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn documented_commands_run_as_written() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let held = client.fair_lock("jobs").lock().await.expect("lock");
    let commands = documented_commands();
    assert!(commands.len() >= 8, "{commands:?}");
    for (file, cmd, note) in &commands {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
            .env("REDIS_URL", server.url())
            .args(&args)
            .output()
            .expect("run");
        let named: Vec<i32> = note
            .split("exit ")
            .skip(1)
            .filter_map(|rest| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        let code = out.status.code().unwrap_or(-1);
        assert!(
            code == 0 || named.contains(&code),
            "{file}: `{cmd}` exited with {code} (its line names {named:?}): {out:?}"
        );
    }
    // The last one forced the release.
    assert!(!held.release().await.expect("release"));
}

/// `rate` shows a rate limiter's limit, what is available, and its waiters in order (text and
/// JSON); a missing or bad rate is a usage error (exit 2) that says what to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_shows_a_rate_limiter() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .label("mailer")
        .connect(&server.url())
        .await
        .expect("connect");
    let rate = redis_locks::Rate::per_hour(10).burst(4);
    let limiter = client.rate_limiter("mail", rate);
    limiter.try_acquire(4).await.expect("the burst");
    let waiter = tokio::spawn({
        let l = limiter.clone();
        async move { l.acquire(2).await }
    });
    let give_up = std::time::Instant::now() + support::backend::EVENTUALLY;
    while limiter.inspect().await.expect("inspect").waiters.is_empty() {
        assert!(
            std::time::Instant::now() < give_up,
            "the waiter never queued"
        );
        tokio::time::sleep(ms(5)).await;
    }
    let out = cli(
        &server,
        &["rate", "mail", "--per-hour", "10", "--burst", "4"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("10 per 3600s, burst 4"), "{text}");
    assert!(text.contains("available now: 0"), "{text}");
    assert!(
        text.contains("waiter 0:") && text.contains("2 permits") && text.contains("(mailer)"),
        "{text}"
    );
    let out = cli(
        &server,
        &["rate", "mail", "--per-hour", "10", "--burst", "4", "--json"],
    );
    let json = stdout(&out);
    assert!(
        json.contains("\"available\":0") && json.contains("\"permits\":2"),
        "{json}"
    );
    assert_eq!(json_tokens(&json).len(), 1, "{json}");
    // `inspect` of the name tells it is a rate limiter and how to see it.
    let out = cli(&server, &["inspect", "mail"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is a rate limiter")
            && stderr(&out).contains("redis-locks rate mail"),
        "{}",
        stderr(&out)
    );
    let out = cli(&server, &["rate", "mail"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--per-second"), "{}", stderr(&out));
    let out = cli(&server, &["rate", "mail", "--per-second", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    waiter.abort();
}

/// `doctor --json`: its verdict, and the verdict of check `check`.
fn doctor_verdicts(server: &RedisServer, check: &str) -> (Option<i32>, String, String) {
    let out = cli(server, &["doctor", "--json"]);
    let json = stdout(&out);
    let overall = json
        .split("\"verdict\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no verdict in {json}"))
        .to_owned();
    let finding = json
        .split("{\"check\":")
        .find(|f| f.starts_with(&format!("\"{check}\"")))
        .unwrap_or_else(|| panic!("no {check} finding in {json}"));
    let verdict = finding
        .split("\"verdict\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the finding's verdict")
        .to_owned();
    assert_eq!(
        overall,
        ["fit", "warning", "unfit"][out.status.code().unwrap_or(9).clamp(0, 2) as usize],
        "the exit code follows the verdict: {json}"
    );
    (out.status.code(), overall, verdict)
}

/// `doctor` exits 0 on a server fit for locks (append-only file, no eviction), 1 when holds
/// would not survive a restart (no persistence), 2 when lock keys can be evicted, and 2 when
/// the server cannot be reached; every check is reported.
#[test]
fn doctor_tells_a_fit_server_from_an_unfit_one() {
    let fit = RedisServer::start_with(&["--appendonly", "yes"]);
    let out = cli(&fit, &["doctor"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for check in [
        "server",
        "eviction",
        "persistence",
        "replication",
        "scripts",
        "clock",
        "wake-ups",
        "round trip",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("fit") && l.contains(check)),
            "{check}: {text}"
        );
    }
    assert!(text.ends_with("verdict: fit\n"), "{text}");

    let volatile = RedisServer::start();
    assert_eq!(
        doctor_verdicts(&volatile, "persistence"),
        (Some(1), "warning".into(), "warning".into())
    );

    for policy in ["allkeys-lru", "volatile-lru"] {
        let evicting =
            RedisServer::start_with(&["--maxmemory", "10mb", "--maxmemory-policy", policy]);
        assert_eq!(
            doctor_verdicts(&evicting, "eviction"),
            (Some(2), "unfit".into(), "unfit".into()),
            "{policy}"
        );
    }

    let mut gone = RedisServer::start();
    gone.kill();
    assert_eq!(
        doctor_verdicts(&gone, "connect"),
        (Some(2), "unfit".into(), "unfit".into())
    );
}

/// `release NAME --hold ID` releases the hold a detached guard left, once; a stale, foreign
/// or malformed id releases nothing, and the token never shows in the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_hold_id() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let id = client.fair_locked("job-7").await.detach();
    let text = id.to_string();
    let token = text.split(':').nth(3).expect("token").to_owned();

    let out = cli(&server, &["release", "job-8", "--hold", &text]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = cli(&server, &["release", "job-7", "--hold", "rlh1:fair:1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        client.fair_lock("job-7").try_lock().await.is_err(),
        "still held"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .args(["--url", &server.url(), "release", "job-7", "--json"])
        .env("REDIS_LOCKS_HOLD", &text)
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("\"released\":true"), "{out:?}");
    assert!(!stdout(&out).contains(&token) && !stderr(&out).contains(&token));
    let next = client
        .fair_lock("job-7")
        .try_lock()
        .await
        .expect("free now");

    // The same id again: gone, and the later holder keeps its grant.
    let out = cli(&server, &["release", "job-7", "--hold", &text]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!stderr(&out).contains(&token), "{out:?}");
    assert!(next.is_held());
    assert!(next.release().await.expect("release"));
}

/// A `redis-locks` run with `REDIS_URL` set to `url` (and no `--url`).
fn cli_env(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .env("REDIS_URL", url)
        .args(args)
        .output()
        .expect("run the redis-locks binary")
}

/// The password of a URL never shows: not in `--help` with `REDIS_URL` set, not in the hint
/// after a refused connection (URL from `REDIS_URL`, `--url`, `--quorum`, `--cluster`), not
/// in the error of a malformed URL, not in `doctor`'s report; a hint shows the URL with
/// `***` in its place. A wrong password is told as such, not as a missing one.
#[test]
fn no_password_is_printed() {
    const SECRET: &str = "s3cret";
    let down = closed_port();
    let url = format!("redis://u:{SECRET}@127.0.0.1:{down}/");
    let no_secret = |what: &str, out: &Output| {
        assert!(
            !stdout(out).contains(SECRET) && !stderr(out).contains(SECRET),
            "{what}: {}{}",
            stdout(out),
            stderr(out)
        );
    };

    let out = cli_env(&url, &["--help"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("REDIS_URL"), "{}", stdout(&out));
    no_secret("--help", &out);

    let out = cli_env(&url, &["list"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    no_secret("list, REDIS_URL down", &out);
    assert!(
        stderr(&out).contains(&format!("redis://u:***@127.0.0.1:{down}/")),
        "{}",
        stderr(&out)
    );

    for args in [
        vec!["--url", url.as_str(), "inspect", "m"],
        vec!["--quorum", url.as_str(), "--quorum", url.as_str(), "list"],
        vec!["--cluster", url.as_str(), "list"],
        vec!["--url", "redis://u:s3cret@127.0.0.1:notaport/", "list"],
        vec!["--url", "redis://u:s3cret@127.0.0.1:1/x", "list"],
        vec!["--url", "http://u:s3cret@127.0.0.1:1/", "list"],
        vec!["--url", url.as_str(), "doctor"],
        vec!["--url", url.as_str(), "doctor", "--json"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_redis-locks"))
            .args(&args)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{args:?}: {out:?}");
        no_secret(&format!("{args:?}"), &out);
    }

    // A server with a password: a wrong one is named as wrong; none at all as missing.
    let server = RedisServer::start_with(&["--requirepass", "the-right-one"]);
    let wrong = format!("redis://default:{SECRET}@127.0.0.1:{}/", server.port());
    let out = cli_env(&wrong, &["list"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    no_secret("a wrong password", &out);
    let text = stderr(&out);
    assert!(text.contains("WRONGPASS"), "{text}");
    assert!(!text.contains("put them in the URL"), "{text}");
    assert!(text.contains("not accepted"), "{text}");
    let out = cli(&server, &["list"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("put them in the URL"), "{out:?}");
}

/// One key of foreign data under the prefix hides nothing: `list --state` and `--held` show
/// every held lock beside it and the foreign name as `foreign` with its key and type,
/// `inspect` shows the foreign key and what it could read beside it; both exit with 5. A
/// key no lock name could have made is reported the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_foreign_key_hides_nothing() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let mut guards = Vec::new();
    for name in ["a", "b", "c", "d", "e", "f"] {
        guards.push(client.mutex(name).lock().await.expect("lock"));
    }
    let queued = client.fair_lock("q").lock().await.expect("lock");
    server.cli(&["HSET", "rl:{app:wrongtype}:w", "not", "ours"]);
    server.cli(&["HSET", "rl:{q}:wq", "not", "ours"]);
    server.cli(&["HSET", "rl:{capped}:cap", "not", "ours"]);
    server.cli(&["SET", "rl:{}}:x", "y"]);

    let out = cli(&server, &["list", "--state"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let text = stdout(&out);
    for name in ["a", "b", "c", "d", "e", "f"] {
        assert!(text.lines().any(|l| l == format!("{name}\theld")), "{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("app:wrongtype\tforeign\trl:{app:wrongtype}:w (hash)")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("}\tforeign\trl:{}}:x (string)")),
        "{text}"
    );
    assert!(stderr(&out).contains("foreign"), "{out:?}");

    let out = cli(&server, &["list", "--held", "--json"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    for name in ["\"a\"", "\"f\"", "\"app:wrongtype\""] {
        assert!(stdout(&out).contains(name), "{out:?}");
    }
    let out = cli(&server, &["list", "--state", "--json"]);
    assert!(
        stdout(&out).contains(
            "{\"name\":\"app:wrongtype\",\"state\":\"foreign\",\"foreign\":{\"key\":\"rl:{app:wrongtype}:w\",\"type\":\"hash\""
        ),
        "{out:?}"
    );

    let out = cli(&server, &["inspect", "app:wrongtype"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(
        stdout(&out).contains("rl:{app:wrongtype}:w (hash)"),
        "{out:?}"
    );
    // A foreign key of the lease lock beside a live FairLock holder: the holder is still
    // shown.
    let out = cli(&server, &["inspect", "q", "--json"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let json = stdout(&out);
    assert_eq!(json_tokens(&json).len(), 1, "{json}");
    assert!(
        json.contains("\"foreign\":[{\"key\":\"rl:{q}:wq\",\"type\":\"hash\""),
        "{json}"
    );
    // A foreign `cap` (read by the ticket queue's every step) is named too.
    let out = cli(&server, &["inspect", "capped"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(stdout(&out).contains("rl:{capped}:cap (hash)"), "{out:?}");

    // The library's error names the key too.
    let err = client
        .mutex("app:wrongtype")
        .try_lock()
        .await
        .expect_err("foreign data");
    assert!(err.is_wrong_type(), "{err:?}");
    assert!(err.to_string().contains("`rl:{app:wrongtype}:w`"), "{err}");

    // Plain `list` (no state read) checks each key's type too: the names with foreign keys
    // are shown with the key, the others as names alone.
    let out = cli(&server, &["list"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let text = stdout(&out);
    assert!(text.lines().any(|l| l == "a"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("app:wrongtype\tforeign\trl:{app:wrongtype}:w (hash)")),
        "{text}"
    );

    // A key of a suffix redis-locks never writes hides nothing: the lock's state is shown
    // beside it, and the script's location is not in any detail.
    server.cli(&["SET", "rl:{a}:notes", "ours"]);
    let out = cli(&server, &["list", "--state"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("a\theld\trl:{a}:notes (string): not a key redis-locks")),
        "{text}"
    );
    assert!(!text.contains("@user_script"), "{text}");
    let out = cli(&server, &["inspect", "a"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let text = stdout(&out);
    assert!(text.starts_with("lock a  held"), "{text}");
    assert!(text.contains("rl:{a}:notes (string)"), "{text}");
    let out = cli(&server, &["inspect", "capped"]);
    assert!(!stdout(&out).contains("@user_script"), "{out:?}");
    drop(queued);
    drop(guards);
}

/// A foreign `cap` (another type, or a string that is no permit count) hides no holder: the
/// ticket queue is read beside it. `inspect` shows the Semaphore's two permit holders and
/// names the key (the capacity is not known: the primitive is a ticket queue of unknown
/// capacity); `list --state` names the key; both exit with 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_cap_hides_no_holder() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let sem = client.semaphore("sem", 3);
    let p1 = sem.acquire().await.expect("acquire");
    let p2 = sem.acquire().await.expect("acquire");
    let tokens: Vec<String> = sem
        .inspect()
        .await
        .expect("inspect")
        .holders
        .into_iter()
        .map(|h| h.token_prefix)
        .collect();
    assert_eq!(tokens.len(), 2, "{tokens:?}");

    for (write, key_type) in [
        (&["SET", "rl:{sem}:cap", "not ours"][..], "string"),
        (&["HSET", "rl:{sem}:cap", "not", "ours"][..], "hash"),
    ] {
        server.cli(&["DEL", "rl:{sem}:cap"]);
        server.cli(write);
        let named = format!("rl:{{sem}}:cap ({key_type})");

        let out = cli(&server, &["inspect", "sem", "--json"]);
        assert_eq!(out.status.code(), Some(5), "{out:?}");
        let json = stdout(&out);
        let mut shown = json_tokens(&json);
        shown.sort();
        let mut held = tokens.clone();
        held.sort();
        assert_eq!(shown, held, "{json}");
        assert!(
            json.contains(&format!(
                "\"foreign\":[{{\"key\":\"rl:{{sem}}:cap\",\"type\":\"{key_type}\""
            )),
            "{json}"
        );
        assert!(json.contains("\"primitive\":\"ticket_queue\""), "{json}");

        let out = cli(&server, &["inspect", "sem"]);
        assert_eq!(out.status.code(), Some(5), "{out:?}");
        let text = stdout(&out);
        assert!(text.contains("holders (2):"), "{text}");
        for token in &tokens {
            assert!(text.contains(token.as_str()), "{text}");
        }
        assert!(text.contains(&named), "{text}");
        assert_eq!(text.matches(&named).count(), 1, "named once: {text}");

        let out = cli(&server, &["list", "--state"]);
        assert_eq!(out.status.code(), Some(5), "{out:?}");
        let text = stdout(&out);
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("sem\tforeign\t{named}"))),
            "{text}"
        );
    }
    server.cli(&["DEL", "rl:{sem}:cap"]);
    p1.release().await.expect("release");
    p2.release().await.expect("release");
}

/// A key of foreign data is a fact `watch` follows: shown in the first view, and its removal
/// is a change (what it hid shows again).
fn watch_shows_a_foreign_key_come_and_go() {
    let server = RedisServer::start();
    server.cli(&["HSET", "rl:{wf}:w", "not", "ours"]);
    let mut watch = Watch::start(
        &server,
        &["watch", "wf", "--count", "30", "--interval-ms", "100"],
    );
    watch.until(|l| l.contains("rl:{wf}:w (hash)"));
    server.cli(&["DEL", "rl:{wf}:w"]);
    let (_, text) = watch.finish();
    assert!(text.contains("rl:{wf}:w (hash)"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" - foreign key rl:{wf}:w: rl:{wf}:w (hash)")),
        "{text}"
    );
}

/// An HTTP service on the port: the CLI says it is not a Redis server and that it answered
/// like HTTP, with no raw bytes of the failed parse, and exits with 1.
#[test]
fn an_http_service_is_named_as_such() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(ms(500)));
            let mut buf = [0u8; 512];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let out = cli_env(&format!("redis://127.0.0.1:{port}/"), &["list"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stderr(&out);
    assert!(
        text.contains("not a Redis server") && text.contains("answered like HTTP"),
        "{text}"
    );
    assert!(
        !text.contains("Unexpected") && !text.contains("Parse"),
        "{text}"
    );
}

/// `leader` on a FairLock held for a second or more without a leader value says it is not an
/// election (exit 4); `doctor` says what `appendonly no` and `save ''` mean for holds;
/// `list` leaves out `doctor`'s probe names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_on_a_fair_lock_and_doctor_leftovers() {
    let server = RedisServer::start_with(&["--save", ""]);
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let held = client.fair_lock("jobs").lock().await.expect("lock");
    // Past the grace a campaign has to proclaim its value (its fence's age, server clock).
    tokio::time::sleep(ms(1_100)).await;
    let out = cli(&server, &["leader", "jobs"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        stderr(&out).contains("is not an election") && stderr(&out).contains("FairLock"),
        "{out:?}"
    );

    let out = cli(&server, &["doctor"]);
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("warning") && l.contains("persistence")),
        "{text}"
    );
    assert!(
        text.contains("save ''") && text.contains("every hold is forgotten on restart"),
        "{text}"
    );
    // The probe's fence counter outlives the probe (for its lease); `list` hides such names
    // (one planted, so the check does not depend on how long `doctor` took).
    server.cli(&["SET", "rl:{redis-locks-doctor-0123abcd}:fence", "1"]);
    let out = cli(&server, &["list"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), "jobs", "{out:?}");
    held.release().await.expect("release");
}
