//! A lock does not outlive `main`: a process that takes a Mutex (lease 30 s) and then ends,
//! by an error returned from `main` (on a multi-thread or a current-thread runtime, with the
//! client dropped before or after the guard) or by a panic that unwinds, has released it by
//! the time it exits: the next process gets it at once, not after the lease.
//!
//! How it runs: each test re-executes its own binary (`current_exe() <test> --exact`) as the
//! child, with [`CHILD_ENV`] set; the same test function then runs the child's program, which
//! builds its runtime as `#[tokio::main]` does, and exits the process.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use redis_locks::LockClient;

use support::RedisServer;

/// Set in the child's environment: `<mode>|<redis url>|<lock name>`.
const CHILD_ENV: &str = "RL_EXIT_CHILD";
const LEASE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
enum Mode {
    ErrorMultiThread,
    ErrorCurrentThread,
    ClientDroppedFirst,
    Panic,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ErrorMultiThread => "error-multi-thread",
            Mode::ErrorCurrentThread => "error-current-thread",
            Mode::ClientDroppedFirst => "client-dropped-first",
            Mode::Panic => "panic",
        }
    }

    fn parse(s: &str) -> Mode {
        match s {
            "error-multi-thread" => Mode::ErrorMultiThread,
            "error-current-thread" => Mode::ErrorCurrentThread,
            "client-dropped-first" => Mode::ClientDroppedFirst,
            _ => Mode::Panic,
        }
    }
}

/// The child's program: take the lock, print `HELD`, then end as `mode` says. Never returns.
fn child(mode: Mode, url: &str, name: &str) -> ! {
    let runtime = match mode {
        Mode::ErrorCurrentThread => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .expect("runtime");
    let program = async {
        let client = LockClient::builder()
            .lease(LEASE)
            .connect(url)
            .await
            .map_err(|e| e.to_string())?;
        let guard = client.mutex(name).lock().await.map_err(|e| e.to_string())?;
        println!("HELD {}", guard.fencing_token());
        if let Mode::ClientDroppedFirst = mode {
            drop(client);
        }
        if let Mode::Panic = mode {
            panic!("the job failed while holding the lock");
        }
        // The job fails: `main` returns its error through `?`, the guard still in scope.
        Err::<(), String>("the job failed while holding the lock".into())?;
        drop(guard);
        Ok::<(), String>(())
    };
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(program)));
    drop(runtime);
    std::process::exit(match outcome {
        Ok(Ok(())) => 0,
        Ok(Err(_)) => 1,
        Err(_) => 101,
    })
}

/// Runs the child in `mode` on a fresh server, then takes the lock at once.
fn ends_without_keeping_the_lock(test: &str, mode: Mode) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(3, '|');
        let (m, url, name) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        child(Mode::parse(m), url, name);
    }
    let server = RedisServer::start();
    let url = server.url();
    let name = format!("exit-release-{}", mode.name());
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture"])
        .env(CHILD_ENV, format!("{}|{url}|{name}", mode.name()))
        .stdin(Stdio::null())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("HELD "),
        "the child never held the lock: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = match mode {
        Mode::Panic => 101,
        _ => 1,
    };
    assert_eq!(output.status.code(), Some(expected), "the child's exit");
    let runtime = support::time::current_thread();
    runtime.block_on(async {
        let client = LockClient::connect(&url).await.expect("connect");
        let held = client.mutex(&name).inspect().await.expect("inspect");
        assert!(
            held.holders.is_empty(),
            "[{}] the lock is still held after its process ended: {held:?}",
            mode.name()
        );
        let next = client.mutex(&name).try_lock().await;
        assert!(
            next.is_ok(),
            "[{}] the next process could not take the lock: {next:?}",
            mode.name()
        );
    });
}

#[test]
fn error_from_main_on_a_multi_thread_runtime_releases() {
    let test = "error_from_main_on_a_multi_thread_runtime_releases";
    ends_without_keeping_the_lock(test, Mode::ErrorMultiThread);
}

#[test]
fn error_from_main_on_a_current_thread_runtime_releases() {
    let test = "error_from_main_on_a_current_thread_runtime_releases";
    ends_without_keeping_the_lock(test, Mode::ErrorCurrentThread);
}

#[test]
fn error_from_main_with_the_client_dropped_first_releases() {
    let test = "error_from_main_with_the_client_dropped_first_releases";
    ends_without_keeping_the_lock(test, Mode::ClientDroppedFirst);
}

#[test]
fn panic_in_main_releases() {
    ends_without_keeping_the_lock("panic_in_main_releases", Mode::Panic);
}
