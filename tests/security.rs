//! Security: the library works as a Redis ACL user restricted to the lock key
//! prefix, its wake-up channels and the commands it needs (the rule documented in README.md
//! and docs/RELIABILITY.md), and over TLS (`rediss://`, feature `tls`) against a local
//! redis-server with certificates generated for the test. Every script runs by SHA under that
//! rule (no `EVAL`).

mod support;
use support::backend::within_ok;
use support::quick::downgraded;
use support::quick::in_time;
use support::quick::Quick;
use support::time::{ms, secs};

use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, AcquireAll, Claim, Family, Part, PermitChange, Policy, RateClaim, RateDecision,
    RedisStore, Slot, Store, FAIR_RW_CAPACITY,
};
use redis_locks::LockClient;
use tokio::time::timeout;

use support::warnings::Warnings;
use support::RedisServer;

/// The minimal ACL rule for a user of redis-locks with the default prefix `rl`, found by
/// trial: scripts by SHA (loaded on `NOSCRIPT`), the commands the scripts call, pub/sub for
/// wake-ups, and the connection handshake. Keep in sync with docs/RELIABILITY.md.
const ACL_RULE: &[&str] = &[
    "on",
    ">secret",
    "resetkeys",
    "~rl:*",
    "resetchannels",
    "&rl:*",
    "-@all",
    "+hello",
    // Quorum mode checks at start-up that a majority of its servers answer.
    "+ping",
    "+evalsha",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+time",
    "+zcount",
    "+get",
    "+set",
    "+del",
    "+exists",
    "+incr",
    "+pexpire",
    "+publish",
    "+zadd",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zpopmin",
    "+zrank",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
];

/// The rule documented in README.md is the one tested here: the same words up to `-@all`,
/// in order (order matters there), and the same commands after it.
#[test]
fn the_tested_acl_rule_is_the_documented_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let start = readme
        .find("ACL SETUSER locks")
        .expect("README.md documents an `ACL SETUSER locks` rule");
    let block = &readme[start..];
    let block = &block[..block.find("```").expect("end of the rule's code block")];
    let documented: Vec<&str> = block
        .split_whitespace()
        .skip(3)
        .map(|word| {
            if word.starts_with('>') {
                ">secret"
            } else {
                word
            }
        })
        .collect();
    /// The words up to `-@all`, and the sorted words after it.
    fn split<'a>(rule: &[&'a str]) -> (Vec<&'a str>, Vec<&'a str>) {
        let all = rule.iter().position(|w| *w == "-@all").expect("-@all") + 1;
        let mut commands = rule[all..].to_vec();
        commands.sort_unstable();
        (rule[..all].to_vec(), commands)
    }
    assert_eq!(
        split(&documented),
        split(ACL_RULE),
        "README.md's ACL rule and the tested ACL_RULE differ"
    );
}

/// The SHA1 of every script, by name.
fn script_shas() -> Vec<(&'static str, String)> {
    // The plain forms: what a client of a single server (and each server of a quorum) runs.
    redis_locks::testing::plain_script_sources()
        .iter()
        .map(|(name, source)| (*name, redis::Script::new(source).get_hash().to_owned()))
        .collect()
}

/// True if `server` has the script with `sha` in its cache.
fn cached(server: &RedisServer, sha: &str) -> bool {
    server.cli(&["SCRIPT", "EXISTS", sha]).trim() == "1"
}

/// Calls of `command` the server counted (`INFO commandstats`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("calls"))
}

fn acl_server() -> RedisServer {
    let server = RedisServer::start();
    let mut args = vec!["ACL", "SETUSER", "locks"];
    args.extend_from_slice(ACL_RULE);
    assert_eq!(server.cli(&args), "OK");
    server
}

fn acl_url(server: &RedisServer) -> String {
    format!("redis://locks:secret@127.0.0.1:{}/", server.port())
}

/// A client of `server` as the restricted user.
async fn acl_client(server: &RedisServer) -> LockClient {
    LockClient::connect(&acl_url(server))
        .await
        .expect("connect")
}

/// Every primitive works as the restricted user: mutex, RwLock (writer, reader and fair
/// preference, downgrade), fair lock with a waiter woken by pub/sub, semaphore, inspect,
/// force release, and script reloading after `SCRIPT FLUSH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_primitive_works_as_a_restricted_acl_user() {
    let server = acl_server();
    let url = acl_url(&server);
    let a = LockClient::connect(&url).await.expect("connect as locks");
    let b = LockClient::connect(&url).await.expect("connect as locks");

    let g = a.mutex("acl-m").lock().await.expect("mutex");
    assert!(support::would_block(b.mutex("acl-m").try_lock().await));
    assert_eq!(b.mutex_info("acl-m").await.holders.len(), 1);
    // A waiter on another connection is woken by the release (pub/sub allowed).
    let waiter = {
        let m = b
            .mutex("acl-m")
            .retry_interval(secs(60))
            .heartbeat(secs(180));
        tokio::spawn(async move { m.lock().await })
    };
    tokio::time::sleep(ms(300)).await;
    assert!(g.release().await.expect("release"));
    let g = within_ok(secs(15), "woken by the release", waiter)
        .await
        .expect("lock");
    assert!(g.release().await.expect("release"));

    for pref in [
        redis_locks::Preference::Writer,
        redis_locks::Preference::Reader,
        redis_locks::Preference::Fair,
    ] {
        let lock = a.rwlock(&format!("acl-rw-{pref:?}")).preference(pref);
        let w = lock.write().await.expect("write");
        let r = downgraded(w).await;
        let r2 = lock.read().await.expect("read");
        assert!(r.release().await.expect("release"));
        assert!(r2.release().await.expect("release"));
    }

    let f = a.fair_lock("acl-f").lock().await.expect("fair");
    let next = {
        let fl = b.fair_lock("acl-f");
        tokio::spawn(async move { fl.lock().await })
    };
    tokio::time::sleep(ms(200)).await;
    assert!(f.release().await.expect("release"));
    let f2 = within_ok(secs(15), "fair waiter granted", next)
        .await
        .expect("fair lock");
    assert!(f2.release().await.expect("release"));

    let s = a.semaphore("acl-s", 2);
    let p = s.acquire_many(2).await.expect("permits");
    assert!(support::would_block(s.try_acquire().await));
    assert!(p.release().await.expect("release"));

    let held = a.mutex("acl-forced").lock().await.expect("lock");
    assert!(b.force_release("acl-forced").await.expect("force release") >= 1);
    drop(held);

    // Scripts come back after a flush (SCRIPT LOAD is allowed).
    server.cli(&["SCRIPT", "FLUSH"]);
    let g = a
        .mutex("acl-m")
        .lock()
        .await
        .expect("lock after SCRIPT FLUSH");
    assert!(g.release().await.expect("release"));
}

/// Every protocol step of the store, one script each, runs as the restricted user after a
/// `SCRIPT FLUSH`: each script is then loaded by SHA (`SCRIPT LOAD`, allowed) and run with
/// `EVALSHA`, never with `EVAL` (denied). `raise_fence` is quorum mode's; see
/// `quorum_raises_a_lagging_fence_as_a_restricted_acl_user`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_runs_by_sha_as_the_restricted_acl_user() {
    let server = acl_server();
    server.cli(&["SCRIPT", "FLUSH"]);
    server.cli(&["CONFIG", "RESETSTAT"]);
    let store = RedisStore::connect(&acl_url(&server))
        .await
        .expect("connect as locks");
    let claim = |token: &str, slot| Claim {
        token: token.to_owned(),
        slot,
        lease: secs(30),
        heartbeat: secs(30),
        policy: Policy::Writer,
    };
    let granted = |r: redis_locks::Result<Acquire>| matches!(r, Ok(Acquire::Granted(_)));

    let lock = LockKeys::new("rl", "acl-steps-lease").expect("keys");
    let writer = claim("writer", Slot::Write);
    assert!(granted(store.acquire(&lock, &writer, false, None).await));
    let lease = secs(60);
    assert!(store
        .extend(&lock, &writer, lease, None)
        .await
        .expect("extend"));
    assert!(store
        .downgrade(&lock, &writer, None)
        .await
        .expect("downgrade")
        .is_some());
    let reader = claim("writer", Slot::Read);
    assert!(store.release(&lock, &reader, None).await.expect("release"));
    store
        .inspect(&lock, Family::LeaseLock, None)
        .await
        .expect("inspect");

    let lock = LockKeys::new("rl", "acl-steps-queue").expect("keys");
    let exclusive = Slot::Ticket {
        weight: FAIR_RW_CAPACITY,
        capacity: FAIR_RW_CAPACITY,
        resizable: false,
    };
    let fair_writer = claim("fair-writer", exclusive);
    assert!(granted(
        store.acquire(&lock, &fair_writer, false, None).await
    ));
    assert!(store
        .extend(&lock, &fair_writer, lease, None)
        .await
        .expect("extend"));
    assert!(store
        .downgrade(&lock, &fair_writer, None)
        .await
        .expect("downgrade")
        .is_some());
    let fair_reader = claim(
        "fair-writer",
        Slot::Ticket {
            weight: 1,
            capacity: FAIR_RW_CAPACITY,
            resizable: false,
        },
    );
    assert!(store
        .release(&lock, &fair_reader, None)
        .await
        .expect("release"));
    store
        .inspect(&lock, Family::TicketQueue, None)
        .await
        .expect("inspect");

    let lock = LockKeys::new("rl", "acl-steps-permits").expect("keys");
    let hb = secs(30);
    for (change, count) in [
        (PermitChange::Set(3), 3),
        (PermitChange::Add { by: 2, base: 3 }, 5),
        (PermitChange::Forget { by: 4, base: 3 }, 1),
    ] {
        let got = store.set_permits(&lock, change, hb, None).await;
        assert_eq!(got.expect("set_permits"), count, "{change:?}");
    }
    assert!(
        store
            .force_release(&lock, None)
            .await
            .expect("force release")
            >= 1
    );
    // Evicting one holder by token prefix (a prefix nobody has: nothing is evicted).
    store
        .force_release_holder(&lock, "no-such-holder", None)
        .await
        .expect("force release of one holder");

    let parts: Vec<Part> = ["acl-multi-a", "acl-multi-b"]
        .iter()
        .map(|n| Part {
            lock: LockKeys::new("rl", n).expect("keys"),
            slot: Slot::Write,
        })
        .collect();
    let multi = claim("multi", Slot::Write);
    assert!(matches!(
        store.acquire_all(&parts, &multi, None).await,
        Ok(AcquireAll::Granted(_))
    ));

    let lock = LockKeys::new("rl", "acl-election").expect("keys");
    let leader = claim(
        "leader",
        Slot::Ticket {
            weight: 1,
            capacity: 1,
            resizable: false,
        },
    );
    assert!(granted(store.acquire(&lock, &leader, false, None).await));
    assert!(store
        .proclaim(&lock, &leader, Some("a"), None)
        .await
        .expect("proclaim"));
    let info = store.leader(&lock, None).await.expect("leader");
    assert_eq!(info.map(|l| l.value), Some("a".to_owned()));
    assert!(store
        .proclaim(&lock, &leader, None, None)
        .await
        .expect("retract"));

    // The rate limiter: an admission, a queued waiter, its cancel, a read.
    let lock = LockKeys::new("rl", "acl-rate").expect("keys");
    let rate = redis_locks::Rate::per_hour(1);
    let first = RateClaim::new(1, rate, hb);
    let decision = store.rate_acquire(&lock, &first, true, None).await;
    assert!(
        matches!(decision, Ok(RateDecision::Admitted { .. })),
        "{decision:?}"
    );
    let waiter = RateClaim::new(1, rate, hb);
    let decision = store.rate_acquire(&lock, &waiter, true, None).await;
    assert!(
        matches!(decision, Ok(RateDecision::Refused(_))),
        "{decision:?}"
    );
    assert!(store
        .rate_cancel(&lock, &waiter, None)
        .await
        .expect("cancel"));
    let shown = store
        .rate_inspect(&lock, &rate, None)
        .await
        .expect("inspect");
    assert!(shown.waiters.is_empty());

    for (name, sha) in script_shas() {
        if name != "raise_fence" {
            assert!(cached(&server, &sha), "{name} was not loaded by SHA");
        }
    }
    assert!(calls(&server, "evalsha") >= 18, "steps run with EVALSHA");
    assert_eq!(calls(&server, "eval"), 0, "no step runs with EVAL");
}

/// The restricted user cannot read or write keys outside the prefix, nor run other commands.
/// Quorum mode as the restricted user: a server whose fence counter lags (here: deleted by an
/// operator, while the others' counters run far ahead of the clock) is raised to the
/// majority's fence by the next grant, through the `raise_fence` script loaded by SHA like
/// every other (no `EVAL` of inline code, which the rule denies).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quorum_raises_a_lagging_fence_as_a_restricted_acl_user() {
    let servers = [acl_server(), acl_server(), acl_server()];
    let urls: Vec<String> = servers.iter().map(acl_url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let c = LockClient::quorum(&urls).await.expect("quorum as locks");
    let m = c.mutex("acl-q");
    for _ in 0..3 {
        let g = m.lock().await.expect("lock");
        assert!(g.release().await.expect("release"));
    }
    let fence_key = "rl:{acl-q}:fence";
    let ahead = "9000000000000000";
    for server in &servers[..2] {
        assert_eq!(server.cli(&["SET", fence_key, ahead, "PX", "60000"]), "OK");
    }
    assert_eq!(servers[2].cli(&["DEL", fence_key]), "1");
    servers[2].cli(&["SCRIPT", "FLUSH"]);
    let g = m.lock().await.expect("lock with a lagging server");
    let fence = g.fencing_token();
    assert_eq!(fence, 9000000000000001, "the majority's fence");
    assert!(g.release().await.expect("release"));
    for (i, server) in servers.iter().enumerate() {
        let stored: u64 = server
            .cli(&["GET", fence_key])
            .parse()
            .unwrap_or_else(|e| panic!("server {i} fence: {e}"));
        assert!(stored >= fence, "server {i} holds fence {stored} < {fence}");
    }
    // The lagging server was raised by the raise_fence script, loaded by SHA.
    let (_, raise_fence) = script_shas()
        .into_iter()
        .find(|(name, _)| *name == "raise_fence")
        .expect("raise_fence script");
    assert!(
        cached(&servers[2], &raise_fence),
        "raise_fence not run by SHA"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_acl_user_cannot_touch_other_keys() {
    let server = acl_server();
    server.cli(&["SET", "app:secret", "s3cret"]);
    let client = redis::Client::open(acl_url(&server)).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect as locks");
    let read: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg("app:secret")
        .query_async(&mut conn)
        .await;
    let err = read.expect_err("GET outside the prefix is denied");
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
    let write: redis::RedisResult<()> = redis::cmd("SET")
        .arg("app:other")
        .arg("x")
        .query_async(&mut conn)
        .await;
    assert_eq!(write.expect_err("SET denied").code(), Some("NOPERM"));
    let flush: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut conn).await;
    assert_eq!(flush.expect_err("FLUSHALL denied").code(), Some("NOPERM"));
    // EVAL of arbitrary code is not in the rule.
    let eval: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query_async(&mut conn)
        .await;
    assert_eq!(eval.expect_err("EVAL denied").code(), Some("NOPERM"));
    // The lock keys are reachable, but a lock name cannot escape the prefix either: its keys
    // are `rl:{<name>}:...` whatever the name.
    let locks = acl_client(&server).await;
    let g = locks.mutex("app:secret").lock().await.expect("lock");
    assert!(g.release().await.expect("release"));
    assert_eq!(server.cli(&["GET", "app:secret"]), "s3cret");
}

/// A denied command surfaces as a typed error that says so, not as a hang or a panic: the
/// same user without `+zadd` cannot take a read lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_permission_is_a_clear_error() {
    let server = acl_server();
    assert_eq!(server.cli(&["ACL", "SETUSER", "locks", "-zadd"]), "OK");
    let c = acl_client(&server).await;
    let err = timeout(secs(10), c.rwlock("acl-deny").try_read())
        .await
        .expect("answered")
        .expect_err("ZADD denied");
    // Inside a script Redis 7.0 words the denial `ERR The user executing the script can't
    // run ...` and Valkey `ERR ACL failure in script: ...`: both are reported under Redis's
    // own code, with its advice.
    let text = err.to_string();
    assert!(
        matches!(err, redis_locks::Error::Redis { .. })
            && text.contains("NOPERM")
            && text.contains("Least privilege"),
        "{err:?}"
    );
    // The reply is quoted once: no source repeats it in an error reporter's chain.
    assert!(std::error::Error::source(&err).is_none(), "{err:?}");
}

/// Set in the child process of [`a_lock_over_tls`]: the `rediss://` URL to lock through.
#[cfg(feature = "tls")]
const TLS_CHILD_URL: &str = "REDIS_LOCKS_TLS_CHILD_URL";

/// TLS: a CA and a server certificate for 127.0.0.1 are generated with the `openssl` CLI,
/// redis-server listens on TLS only, and the library connects with `rediss://`, trusting the
/// CA through `SSL_CERT_FILE` (the redis crate's rustls backend loads the platform roots,
/// which honour that variable). The client runs in a child process of this test binary
/// started with that variable: setting it in this process would race every thread that
/// reads the environment. A redis-server without TLS support fails this test loudly.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_over_tls() {
    if let Ok(url) = std::env::var(TLS_CHILD_URL) {
        let fence = lock_over_tls(&url).await;
        println!("tls-fence={fence}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("redis-locks-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tls dir");
    let path = |f: &str| dir.join(f).to_str().expect("utf-8 path").to_owned();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("the openssl CLI is needed for the TLS test: {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (ca_key, ca_crt) = (path("ca.key"), path("ca.crt"));
    let (key, csr, crt, ext) = (
        path("server.key"),
        path("server.csr"),
        path("server.crt"),
        path("server.ext"),
    );
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &ca_key,
        "-out",
        &ca_crt,
        "-days",
        "1",
        "-subj",
        "/CN=redis-locks test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &csr,
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "1",
        "-extfile",
        &ext,
    ]);

    let binary = support::server_binary();
    let version = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{binary} --version: {e}"));
    let tls_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let tls_port_s = tls_port.to_string();
    // The harness waits for a plain-text PING, so the plain port stays open next to TLS; the
    // library only ever talks to the TLS port.
    let server = std::panic::catch_unwind(|| {
        RedisServer::start_with(&[
            "--tls-port",
            &tls_port_s,
            "--tls-cert-file",
            &crt,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca_crt,
            "--tls-auth-clients",
            "no",
        ])
    })
    .unwrap_or_else(|_| {
        panic!(
            "{binary} could not start with TLS: this build ({}) may lack TLS support; \
             install a redis-server built with TLS (Debian's redis-server is)",
            String::from_utf8_lossy(&version.stdout).trim()
        )
    });
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let exe = std::env::current_exe().expect("this test binary");
    let child = std::process::Command::new(exe)
        .args([
            "--exact",
            "a_lock_over_tls",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(TLS_CHILD_URL, &url)
        .env("SSL_CERT_FILE", &ca_crt)
        .output()
        .expect("run the TLS client");
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "the TLS client failed: {out}{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let fence = out
        .lines()
        .find_map(|l| l.split_once("tls-fence=").map(|(_, fence)| fence.trim()))
        .unwrap_or_else(|| panic!("the TLS client ran no lock: {out}"));
    // The state really is on the TLS server.
    assert_eq!(server.cli(&["GET", "rl:{tls}:fence"]), fence);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The client side of [`a_lock_over_tls`]: a lock, a refused second try, a release over
/// TLS; the fence granted.
#[cfg(feature = "tls")]
async fn lock_over_tls(url: &str) -> u64 {
    let c = LockClient::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect over TLS to {url}: {e}"));
    let g = c.mutex("tls").lock().await.expect("lock over TLS");
    assert!(g.fencing_token() >= 1);
    assert!(support::would_block(c.mutex("tls").try_lock().await));
    let fence = g.fencing_token();
    assert!(g.release().await.expect("release over TLS"));
    fence
}

/// A user whose ACL grants no channels (`resetchannels` without `&rl:*`): connecting warns
/// once with the rule to add; a release that deleted the hold reports success (the wake-up it
/// could not publish does not fail it), and a waiter still gets the lock, by its retry
/// interval.
#[tokio::test(flavor = "current_thread")]
async fn a_user_without_channel_rights_is_warned_and_releases_still_succeed() {
    let server = acl_server();
    assert_eq!(
        server.cli(&["ACL", "SETUSER", "locks", "resetchannels"]),
        "OK"
    );
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());

    let a = acl_client(&server).await;
    let b = acl_client(&server).await;
    let seen = warnings.0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|w| w.contains("&rl:*")),
        "connect warns with the channel rule to add: {seen:?}"
    );

    let m = a.mutex("no-channels");
    let g = m.try_lock().await.expect("granted");
    let patient = b.mutex("no-channels").retry_interval(ms(100));
    let waiter = patient.lock().timeout(secs(20));
    let release = async {
        tokio::time::sleep(ms(300)).await;
        g.release().await
    };
    let (got, released) = tokio::join!(waiter, release);
    assert!(released.expect("a done release is reported as done"));
    got.expect("the waiter is served by its retry interval")
        .release()
        .await
        .expect("release");
}

/// `rejected_calls` of `command` (refused before running, e.g. NOPERM), from `INFO
/// commandstats`.
fn rejected(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix("rejected_calls="))
        })
        .map_or(0, |n| n.trim().parse().expect("rejected_calls"))
}

/// A user one right short of the rule (no `+unsubscribe`): once a waiter's channel goes idle,
/// the refused UNSUBSCRIBE is logged as a warning naming the right, tried again only with
/// back-off (no busy loop), and later waits still work and end by their deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_user_without_unsubscribe_is_warned_and_waits_go_on() {
    let server = acl_server();
    assert_eq!(
        server.cli(&["ACL", "SETUSER", "locks", "-unsubscribe"]),
        "OK"
    );
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let a = acl_client(&server).await;
    let b = acl_client(&server).await;

    // B waits (and subscribes), is served, and leaves: its channel goes idle.
    let g = a.mutex("no-unsub").try_lock().await.expect("granted");
    let patient = b.mutex("no-unsub");
    let waiter = patient.lock().timeout(secs(20));
    let release = async {
        tokio::time::sleep(ms(200)).await;
        g.release().await
    };
    let (got, released) = tokio::join!(waiter, release);
    released.expect("release");
    got.expect("served").release().await.expect("release");

    // Past the channel's linger, the unsubscribe is refused; watch the server for 2 s more.
    tokio::time::sleep(secs(6)).await;
    let before = rejected(&server, "unsubscribe");
    tokio::time::sleep(secs(2)).await;
    let during = rejected(&server, "unsubscribe") - before;
    assert!(
        before >= 1,
        "the idle channel was never unsubscribed (rejected UNSUBSCRIBE: {before})"
    );
    assert!(
        during <= 2,
        "{during} refused UNSUBSCRIBE calls in 2 s: a retry loop"
    );
    let seen = warnings.0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|w| w.contains("unsubscribe")),
        "the refused UNSUBSCRIBE is a warning that names the right: {seen:?}"
    );

    // Later waits are not held up: a timed wait on a held lock ends by its deadline.
    let held = a.mutex("no-unsub-2").try_lock().await.expect("granted");
    let started = tokio::time::Instant::now();
    let what = "a timed wait hung";
    let waited = in_time(
        secs(10),
        what,
        b.mutex("no-unsub-2").lock().timeout(ms(300)),
    )
    .await;
    assert!(waited.expect_err("held").is_timeout());
    assert!(started.elapsed() < secs(5));
    held.release().await.expect("release");
}
