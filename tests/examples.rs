//! The examples that demonstrate a guarantee end to end run in CI, in memory and against a
//! private redis-server, and must succeed (each checks its own outcome and exits non-zero
//! when it does not hold). Each test builds its example first (see [`example`]).

mod support;

use std::path::PathBuf;
use std::process::Command;

/// The example `name`, built for this run: `cargo build --all-features --example <name>`
/// (the library is already built with those features for the tests, so this only compiles
/// and links the example), then `target/<profile>/examples/<name>`. `--all-targets` alone
/// does not leave it there: under `cargo test` it builds examples as test harnesses.
fn example(name: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "--all-features",
        "--example",
        name,
    ]);
    // The variables the test runner sets for this crate's targets are not the build's: a
    // build script that reads one (ring's reads CARGO_MANIFEST_DIR) would see it changed and
    // rebuild ring, rustls, redis and this crate (about 30 s each time, and the next test
    // build rebuilds them back).
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let per_crate = [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
            || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&&*key);
        if per_crate {
            build.env_remove(&*key);
        }
    }
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build
        .status()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(status.success(), "cargo build --example {name} failed");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "example `{name}` is not at {}",
        path.display()
    );
    path
}

fn run(name: &str, redis_url: Option<&str>) -> String {
    let mut cmd = Command::new(example(name));
    cmd.env_remove("REDIS_URL");
    if let Some(url) = redis_url {
        cmd.env("REDIS_URL", url);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("run {name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn transfer_conserves_stock_in_memory_and_on_redis() {
    let out = run("transfer", None);
    assert!(out.contains("backend: in-memory"), "{out}");
    assert!(out.contains("stock conserved"), "{out}");
    let server = support::RedisServer::start();
    let out = run("transfer", Some(&server.url()));
    assert!(out.contains("backend: Redis"), "{out}");
    assert!(out.contains("stock conserved"), "{out}");
}

#[test]
fn pool_leader_takes_over_after_the_leader_dies_in_memory_and_on_redis() {
    let out = run("pool_leader", None);
    assert!(out.contains("backend: in-memory"), "{out}");
    assert!(out.contains("took over after"), "{out}");
    assert!(out.contains("pool ok"), "{out}");
    let server = support::RedisServer::start();
    let out = run("pool_leader", Some(&server.url()));
    assert!(out.contains("backend: Redis"), "{out}");
    assert!(out.contains("pool ok"), "{out}");
}

#[test]
fn two_services_exclude_each_other_on_one_shared_in_memory_store() {
    let out = run("two_services", None);
    assert!(out.contains("held by Some(\"billing\")"), "{out}");
    assert!(out.contains("never inside a lock together: ok"), "{out}");
}

#[test]
fn rate_limit_shows_the_concurrency_cap_and_the_rate_in_memory_and_on_redis() {
    let out = run("rate_limit", None);
    assert!(out.contains("backend: in-memory"), "{out}");
    assert!(out.contains("max concurrency observed"), "{out}");
    assert!(out.contains("within 10 per second, burst 2: ok"), "{out}");
    let server = support::RedisServer::start();
    let out = run("rate_limit", Some(&server.url()));
    assert!(out.contains("backend: Redis"), "{out}");
    assert!(out.contains("within 10 per second, burst 2: ok"), "{out}");
}

#[test]
fn handover_crosses_processes_on_redis_and_clients_in_memory() {
    let out = run("handover", None);
    assert!(out.contains("backend: in-memory"), "{out}");
    assert!(out.contains("handover ok"), "{out}");
    let server = support::RedisServer::start();
    let out = run("handover", Some(&server.url()));
    assert!(out.contains("backend: Redis"), "{out}");
    assert!(
        out.contains("launcher: the scheduler exited; the lock is still held"),
        "{out}"
    );
    assert!(out.contains("handover ok"), "{out}");
}
