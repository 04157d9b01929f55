//! A lock does not outlive `main`: a process that takes a Mutex (lease 30 s) and then ends,
//! by an error returned from `main` (on a multi-thread or a current-thread runtime, with the
//! client dropped before or after the guard) or by a panic that unwinds, has released it by
//! the time it exits: the next process gets it at once, not after the lease.
//!
//! Nor does a wait: a process whose task waits in a FairLock's queue, or as a writer announced
//! under the writer preference (heartbeat window 30 s), and that then ends the same ways, has
//! left no queue place or announcement by the time it exits, so the waiters behind it are not
//! held back for the window.
//!
//! How it runs: each test re-executes its own binary (`current_exe() <test> --exact`) as the
//! child, with [`CHILD_ENV`] set; the same test function then runs the child's program, which
//! builds its runtime as `#[tokio::main]` does, and exits the process.

mod support;
use redis_locks::{InMemory, LockClient, MutexGuard};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::quick::Quick;
use support::time::{current_thread, ms, secs};
use support::warnings::Warnings;
use support::RedisServer;

/// Set in the child's environment: `<mode>|<role>|<redis url>|<lock name>`.
const CHILD_ENV: &str = "RL_EXIT_CHILD";
const LEASE: Duration = Duration::from_secs(30);

/// What the child has when it ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A Mutex guard.
    Holder,
    /// A task waiting in a FairLock's queue (the parent holds the lock).
    FairWaiter,
    /// A task waiting to write, announced under the writer preference (the parent reads).
    WriteWaiter,
    /// A task waiting in a rate limiter's queue (the child used the one admission first).
    RateWaiter,
}

/// One admission an hour: the second waits.
fn hourly() -> redis_locks::Rate {
    redis_locks::Rate::per_hour(1).burst(1)
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Holder => "holder",
            Role::FairWaiter => "fair-waiter",
            Role::WriteWaiter => "write-waiter",
            Role::RateWaiter => "rate-waiter",
        }
    }

    fn parse(s: &str) -> Role {
        match s {
            "fair-waiter" => Role::FairWaiter,
            "write-waiter" => Role::WriteWaiter,
            "rate-waiter" => Role::RateWaiter,
            _ => Role::Holder,
        }
    }
}

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

/// The child's program: take the lock (or start waiting for it, as `role` says), print `HELD`
/// (or `WAITING` once its wait shows on the server), then end as `mode` says. Never returns.
fn child(mode: Mode, role: Role, url: &str, name: &str) -> ! {
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
            .heartbeat(LEASE)
            .connect(url)
            .await
            .map_err(|e| e.to_string())?;
        let guard = match role {
            Role::Holder => {
                let guard = client.mutex(name).lock().await.map_err(|e| e.to_string())?;
                println!("HELD {}", guard.fencing_token());
                Some(guard)
            }
            _ => {
                start_waiting(&client, role, name).await?;
                println!("WAITING");
                None
            }
        };
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

/// Spawns a task that waits for `name` as `role` says, and returns once the wait shows on
/// the server (a queue place, or a waiting writer's announcement).
async fn start_waiting(client: &LockClient, role: Role, name: &str) -> Result<(), String> {
    if role == Role::RateWaiter {
        let limiter = client.rate_limiter(name, hourly());
        limiter.acquire(1).await.map_err(|e| e.to_string())?;
    }
    let (c, n) = (client.clone(), name.to_owned());
    tokio::spawn(async move {
        let _guard = match role {
            Role::FairWaiter => c.fair_lock(&n).lock().await.map(drop),
            Role::RateWaiter => c.rate_limiter(&n, hourly()).acquire(1).await.map(drop),
            _ => c.rwlock(&n).write().await.map(drop),
        };
        std::future::pending::<()>().await;
    });
    for _ in 0..500 {
        if waits_on_server(client, role, name).await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the wait never showed on the server".into())
}

/// Whether a wait of `role` shows on the server.
async fn waits_on_server(client: &LockClient, role: Role, name: &str) -> Result<bool, String> {
    let waiters = match role {
        Role::FairWaiter => client
            .fair_lock(name)
            .inspect()
            .await
            .map(|i| i.waiters.len()),
        Role::RateWaiter => {
            let limiter = client.rate_limiter(name, hourly());
            limiter.inspect().await.map(|i| i.waiters.len())
        }
        _ => client.rwlock(name).inspect().await.map(|i| i.waiters.len()),
    };
    waiters.map(|n| n > 0).map_err(|e| e.to_string())
}

/// Runs the child in `mode` on a fresh server, then takes the lock at once.
fn ends_without_keeping_the_lock(test: &str, mode: Mode) {
    ends_without_leaving(test, mode, Role::Holder);
}

/// Runs the child in `mode` with `role` on a fresh server (holding the lock itself while the
/// child waits for it), then checks the child left nothing behind.
fn ends_without_leaving(test: &str, mode: Mode, role: Role) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(4, '|');
        let (m, r, url, name) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        child(Mode::parse(m), Role::parse(r), url, name);
    }
    let server = RedisServer::start();
    let url = server.url();
    let name = format!("exit-release-{}-{}", role.name(), mode.name());
    let runtime = support::time::current_thread();
    // A waiting child waits behind the parent's hold (a read hold for a writer).
    let parent = runtime.block_on(async {
        let client = LockClient::builder()
            .lease(LEASE)
            .connect(&url)
            .await
            .expect("connect");
        let fair = match role {
            Role::FairWaiter => Some(client.fair_lock(&name).lock().await.expect("lock")),
            _ => None,
        };
        let read = match role {
            Role::WriteWaiter => Some(client.rwlock(&name).read().await.expect("read")),
            _ => None,
        };
        (client, fair, read)
    });
    let (parent, _fair, _read) = parent;
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture"])
        .env(
            CHILD_ENV,
            format!("{}|{}|{url}|{name}", mode.name(), role.name()),
        )
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let shown = match role {
        Role::Holder => "HELD ",
        _ => "WAITING",
    };
    assert!(
        stdout.contains(shown),
        "the child never reached {shown:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = match mode {
        Mode::Panic => 101,
        _ => 1,
    };
    assert_eq!(output.status.code(), Some(expected), "the child's exit");
    if role != Role::Holder {
        runtime.block_on(async {
            let waits = waits_on_server(&parent, role, &name)
                .await
                .expect("inspect");
            assert!(
                !waits,
                "[{} {}] the child's wait is still on the server after its process ended",
                role.name(),
                mode.name()
            );
        });
        return;
    }
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

#[test]
fn a_fair_wait_ended_by_an_error_from_main_leaves_no_queue_place() {
    let test = "a_fair_wait_ended_by_an_error_from_main_leaves_no_queue_place";
    ends_without_leaving(test, Mode::ErrorMultiThread, Role::FairWaiter);
}

#[test]
fn a_fair_wait_on_a_current_thread_runtime_leaves_no_queue_place() {
    let test = "a_fair_wait_on_a_current_thread_runtime_leaves_no_queue_place";
    ends_without_leaving(test, Mode::ErrorCurrentThread, Role::FairWaiter);
}

#[test]
fn a_fair_wait_ended_by_a_panic_leaves_no_queue_place() {
    let test = "a_fair_wait_ended_by_a_panic_leaves_no_queue_place";
    ends_without_leaving(test, Mode::Panic, Role::FairWaiter);
}

#[test]
fn a_write_wait_ended_by_an_error_from_main_leaves_no_announcement() {
    let test = "a_write_wait_ended_by_an_error_from_main_leaves_no_announcement";
    ends_without_leaving(test, Mode::ErrorMultiThread, Role::WriteWaiter);
}

#[test]
fn a_rate_limiter_wait_ended_by_an_error_from_main_leaves_no_queue_place() {
    let test = "a_rate_limiter_wait_ended_by_an_error_from_main_leaves_no_queue_place";
    ends_without_leaving(test, Mode::ErrorMultiThread, Role::RateWaiter);
}

// ------------------------------------------------------------------------------------------
// A guard dropped where its runtime can no longer release it (the runtime has ended, or drops
// the guard's task as it shuts down) is released all the same: the client's engine, on a
// thread of its own, sends the release. Nothing is left held for the lease, and nothing is
// warned. A guard whose engine runs on a runtime that has ended
// (`engine_on_current_runtime`) cannot be released: that one warns once per lock name.
// ------------------------------------------------------------------------------------------

/// A guard of `name` taken on a runtime that has ended by the time it is returned.
fn guard_outliving_its_runtime(client: &LockClient, name: &str, lease: Duration) -> MutexGuard {
    let runtime = current_thread();
    let guard = runtime.block_on(async {
        client
            .mutex(name)
            .lease(lease)
            .lock()
            .timeout(secs(5))
            .await
            .expect("lock")
    });
    drop(runtime);
    guard
}

/// Whether another client can take `name` now (on a runtime of its own).
fn free_now(store: &InMemory, name: &str) -> bool {
    let other = store.client("other").expect("client");
    current_thread().block_on(async { other.mutex(name).try_lock().await.is_ok() })
}

/// A guard held by a task that its runtime drops at shutdown is released by the engine.
#[test]
fn a_guard_dropped_while_its_runtime_shuts_down_is_released() {
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let store = InMemory::new();
    let client = store.client("svc").expect("client");
    let runtime = current_thread();
    runtime.block_on(async {
        let guard = client.lock_for("dropped-at-shutdown", secs(30)).await;
        // A task that keeps the guard until the runtime drops it.
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
    });
    drop(runtime);
    // The client's last handle goes: its drop waits for the engine's releases.
    drop(client);
    assert!(
        free_now(&store, "dropped-at-shutdown"),
        "the lock is still held (lease 30 s)"
    );
    let seen = warnings.0.lock().unwrap().clone();
    assert!(seen.is_empty(), "nothing to warn about: {seen:#?}");
}

/// A guard dropped after its runtime ended (outside any runtime) is released by the engine.
#[test]
fn a_guard_dropped_after_its_runtime_is_released() {
    let store = InMemory::new();
    let client = store.client("svc").expect("client");
    let guard = guard_outliving_its_runtime(&client, "dropped-late", secs(30));
    assert!(
        guard.is_held(),
        "renewed by the engine, not by the runtime that ended"
    );
    drop(guard);
    drop(client);
    assert!(
        free_now(&store, "dropped-late"),
        "the lock is still held (lease 30 s)"
    );
}

/// With the engine on a runtime that has ended, a dropped guard cannot be released: the
/// library warns once per lock name, saying for how long the lock stays held.
#[test]
fn a_guard_whose_engine_ended_warns_once_per_lock_name() {
    let warnings = Warnings::default();
    let _capture = tracing::subscriber::set_default(warnings.clone());
    let store = InMemory::new();
    let lease = ms(300);
    let make = |name: &str| {
        let runtime = current_thread();
        let guard = runtime.block_on(async {
            let builder = LockClient::builder().engine_on_current_runtime(true);
            let client = store.client_with(builder).expect("client");
            client.mutex(name).lease(lease).lock().await.expect("lock")
        });
        drop(runtime);
        guard
    };
    drop(make("engine-gone"));
    let seen = warnings.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert!(
        seen[0].contains("engine-gone"),
        "names the lock: {}",
        seen[0]
    );
    assert!(seen[0].contains("300ms"), "says how long: {}", seen[0]);
    drop(make("engine-gone"));
    assert_eq!(warnings.0.lock().unwrap().len(), 1, "warned once per name");
    drop(make("engine-gone-2"));
    assert_eq!(
        warnings.0.lock().unwrap().len(),
        2,
        "another name warns again"
    );
}
