//! What connecting checks of the server: one test per capability the scripts need, each a
//! server lacking it, refused with `Error::UnsupportedServer` naming it (and what to do), and
//! the doctor's verdict on a server that lost one after the connect. Real server processes
//! where one lacks the capability (scripting: Valkey's Lua module unloaded, or Redis with its
//! scripting commands renamed away); a fake server where none here does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redis_locks::{Capability, Error, Verdict};

mod support;

use support::fake_server::{self, quick, FakeServer};
use support::RedisServer;

/// The capability a refused connect names, with the text checked to say what to do.
fn missing(err: &Error) -> Capability {
    match err {
        Error::UnsupportedServer { missing, .. } => {
            let text = err.to_string();
            assert!(text.contains(&missing.to_string()), "{text}");
            assert!(text.contains(missing.advice()), "{text}");
            *missing
        }
        other => panic!("expected UnsupportedServer, got {other:?}"),
    }
}

/// A real clock reading, advancing by at least a microsecond per call.
fn clock() -> impl Fn() -> (u64, u64) {
    let last = AtomicU64::new(0);
    move || {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_micros() as u64;
        let now = now.max(last.load(Ordering::Relaxed) + 1);
        last.store(now, Ordering::Relaxed);
        (now / 1_000_000, now % 1_000_000)
    }
}

/// A fake Redis 7.2 whose probe script answers `probe(TIME reading)`.
async fn fake(probe: impl Fn((u64, u64)) -> Vec<u8> + Send + Sync + 'static) -> FakeServer {
    let now = clock();
    FakeServer::start(move |command| {
        fake_server::like_redis(command).unwrap_or_else(|| probe(now()))
    })
    .await
}

#[tokio::test]
async fn a_real_server_has_every_capability() {
    let server = RedisServer::start();
    let client = quick().connect(&server.url()).await.expect("connect");
    // The probe's key was never created.
    assert_eq!(server.cli(&["DBSIZE"]), "0");
    let report = client.doctor().await.expect("doctor");
    let found = report
        .findings
        .iter()
        .find(|f| f.check == "capabilities")
        .expect("a capabilities finding");
    assert_eq!(found.verdict, Verdict::Fit, "{found:?}");
}

/// Valkey 9.1 runs Lua as a module: unloaded, `SCRIPT LOAD` and `EVALSHA` answer that no
/// scripting engine is there. A Redis has its scripting commands renamed away instead.
#[tokio::test]
async fn a_server_without_scripting_is_refused_by_name() {
    let probe = RedisServer::start();
    let valkey = probe.cli(&["INFO", "server"]).contains("valkey_version");
    drop(probe);
    let server = if valkey {
        let server = RedisServer::start_with(&["--enable-module-command", "yes"]);
        assert_eq!(server.cli(&["MODULE", "UNLOAD", "lua"]), "OK");
        server
    } else {
        RedisServer::start_with(&[
            "--rename-command",
            "EVALSHA",
            "",
            "--rename-command",
            "EVAL",
            "",
            "--rename-command",
            "SCRIPT",
            "",
        ])
    };
    let err = quick().connect(&server.url()).await.expect_err("refused");
    assert_eq!(missing(&err), Capability::Scripting, "{err}");
}

/// Dragonfly has answered `TIME` inside scripts with `0 0`.
#[tokio::test]
async fn a_script_clock_of_zero_is_refused_by_name() {
    let server = fake(|_| fake_server::probe_reply(0, 0, None, None)).await;
    let err = quick().connect(&server.url()).await.expect_err("refused");
    assert_eq!(missing(&err), Capability::ScriptClock, "{err}");
    assert!(err.to_string().contains("0 0"), "says what it saw: {err}");
}

/// A clock that does not advance from one script to the next is no clock for deadlines.
#[tokio::test]
async fn a_frozen_script_clock_is_refused_by_name() {
    let server = fake(|_| fake_server::probe_reply(1_795_770_031, 585_240, None, None)).await;
    let err = quick().connect(&server.url()).await.expect_err("refused");
    assert_eq!(missing(&err), Capability::ScriptClock, "{err}");
}

/// KeyDB (a Redis 6 base) refuses `PEXPIRE ... GT`, whatever version it reports.
#[tokio::test]
async fn a_server_without_pexpire_gt_is_refused_by_name() {
    let refusal = "ERR Unsupported option GT";
    let server = fake(move |(s, us)| fake_server::probe_reply(s, us, Some(refusal), None)).await;
    let err = quick().connect(&server.url()).await.expect_err("refused");
    assert_eq!(missing(&err), Capability::ExpireConditions, "{err}");
    assert!(
        err.to_string().contains(refusal),
        "quotes the server: {err}"
    );
}

/// A server (or proxy) that keeps RESP2 after `HELLO 3` cannot push the wake-ups.
#[tokio::test]
async fn a_server_without_resp3_is_refused_by_name() {
    let server = FakeServer::start(|command| match command.first().map(String::as_str) {
        Some("HELLO") => fake_server::hello("7.2.4", 2),
        _ => fake_server::like_redis(command).unwrap_or_else(|| fake_server::int(0)),
    })
    .await;
    let err = quick().connect(&server.url()).await.expect_err("refused");
    assert_eq!(missing(&err), Capability::Resp3, "{err}");
}

/// A missing ACL right is the user's to grant, not a server's lack: a denied probe command
/// leaves the check inconclusive (no false refusal), and the lock steps report the denial as
/// Redis's `NOPERM`, on Redis and on Valkey alike.
#[tokio::test]
async fn a_denied_probe_command_is_no_missing_capability() {
    let server = RedisServer::start();
    let rule = [
        "ACL",
        "SETUSER",
        "locks",
        "on",
        ">secret",
        "~rl:*",
        "&rl:*",
        "-@all",
        "+hello",
        "+ping",
        "+evalsha",
        "+script|load",
        "+time",
        "+publish",
    ];
    assert_eq!(server.cli(&rule), "OK");
    let url = format!("redis://locks:secret@127.0.0.1:{}/", server.port());
    let client = quick().connect(&url).await.expect("not refused");
    let err = client
        .mutex("m")
        .try_lock()
        .await
        .expect_err("PEXPIRE denied");
    assert!(matches!(err, Error::Redis { .. }), "{err:?}");
    assert!(err.to_string().contains("NOPERM"), "{err}");
}

/// A server that loses a capability after the connect: the doctor names it, unfit, with
/// what to do.
#[tokio::test]
async fn the_doctor_reports_a_lost_capability() {
    let broken = Arc::new(AtomicBool::new(false));
    let flag = broken.clone();
    let server = fake(move |(s, us)| {
        if flag.load(Ordering::Relaxed) {
            fake_server::probe_reply(0, 0, None, None)
        } else {
            fake_server::probe_reply(s, us, None, None)
        }
    })
    .await;
    let client = quick().connect(&server.url()).await.expect("connect");
    broken.store(true, Ordering::Relaxed);
    let report = client.doctor().await.expect("doctor");
    let found = report
        .findings
        .iter()
        .find(|f| f.check == "capabilities")
        .expect("a capabilities finding");
    assert_eq!(found.verdict, Verdict::Unfit, "{found:?}");
    assert!(
        found.detail.contains(&Capability::ScriptClock.to_string()),
        "{found:?}"
    );
    assert_eq!(found.fix, Capability::ScriptClock.advice());
}
