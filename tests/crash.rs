//! Multi-process crash test: real worker processes contend for one lock on a real
//! `redis-server` while the test SIGKILLs and SIGSTOPs them, as holders and as waiters. Every
//! worker uses a short lease (500 ms) and the default heartbeat.
//!
//! Each test asserts, for its primitive (Mutex, FairLock):
//!
//! - safety: no two clean critical sections overlap, and the fencing tokens of clean sections
//!   strictly increase in time order. A section is clean when `is_held()` was still true after
//!   its end was taken; a holder SIGSTOPped past its lease must report its section as not clean;
//! - no process that died (SIGKILL) or is stopped (SIGSTOP) keeps others out for longer than
//!   one lease of its claim: whenever `inspect` shows such a process holding the lock, the
//!   hold has at most one lease left;
//! - progress: the lock never stands without a clean critical section for longer than
//!   [`PROGRESS_BOUND`] (five leases), neither during the faults nor after the last one, and
//!   the survivors go on completing sections after the last fault.
//!
//! The last fault tests the dead-waiter bound: a waiter SIGKILLed right after it announced
//! itself as the only waiter while a holder held, so the holder's release hands the lock to the
//! dead waiter. The grant lasts until the waiter's heartbeat deadline, at most one lease with
//! the default heartbeat, so the lock idles for about 0.5 s (a 5 s heartbeat window would
//! idle it for about 5 s).
//!
//! How it runs: a test re-executes its own binary (`current_exe() <test> --exact`) as each
//! worker, with [`WORKER_ENV`] set; the same test function then runs the worker and exits.
//! A worker prints one line per step on stdout (`RLCRASH ready|waiting|queued|holding|section|
//! released|parked|error ...`, wall-clock times in µs) and takes commands on stdin (`hold`:
//! keep the next grant until `release`; `park` / `resume`: stop / start acquiring). It exits
//! when its stdin closes, so it never outlives the test. The test reads the lines in one
//! thread per worker, samples `inspect` every 40 ms in another, and sends the signals with
//! `Child::kill` and the `kill` command. Each test takes about 15 s.
//!
//! `RL_CRASH_DUMP=<path>` writes every event and `inspect` sample of a run, in time order, to
//! `<path>.mutex` / `<path>.fair_lock`.

mod support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex as StdMutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_locks::LockClient;

use support::signal;
use support::RedisServer;

/// Set in a worker's environment: `<kind>|<redis url>|<lock name>|<worker index>`.
const WORKER_ENV: &str = "RL_CRASH_WORKER";
/// Marks the protocol lines among the test harness's own output.
const LINE_PREFIX: &str = "RLCRASH ";
/// Lease of every claim (the heartbeat is left at its default).
const LEASE: Duration = Duration::from_millis(500);
/// Longest the lock may stand without a clean critical section: five leases. A dead or stopped
/// process may keep it for one lease, the others then need a retry or two; a grant that lasts a
/// 5 s heartbeat window is far past it.
const PROGRESS_BOUND: Duration = Duration::from_millis(2500);
/// Rounding allowance on the lease left that `inspect` reports (whole milliseconds).
const LEASE_SLACK: Duration = Duration::from_millis(20);
/// Worker processes; two are SIGKILLed, three survive.
const WORKERS: usize = 5;
/// Normal loop before the first fault.
const WARM_UP: Duration = Duration::from_secs(1);
/// How long a process stays SIGSTOPped: three leases.
const STOPPED_FOR: Duration = Duration::from_millis(1500);
/// Pause after each fault.
const SETTLE: Duration = Duration::from_secs(1);
/// Observation after the last fault: longer than the 5 s a dead waiter's grant could last.
const OBSERVE: Duration = Duration::from_secs(6);
/// At least this many clean sections after the last fault.
const MIN_SECTIONS_AFTER: usize = 10;
/// Limit for every step the test waits on (a command answered, a worker ready).
const STEP_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the monitor samples `inspect`.
const SAMPLE_EVERY: Duration = Duration::from_millis(40);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mutex,
    FairLock,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::FairLock => "fair_lock",
        }
    }
}

/// Defines a crash test: the orchestrator when run normally, a worker when re-executed with
/// [`WORKER_ENV`] set.
macro_rules! crash_test {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            match std::env::var(WORKER_ENV) {
                Ok(spec) => worker::run($kind, &spec),
                Err(_) => orchestrate($kind, stringify!($name)),
            }
        }
    };
}

crash_test!(
    /// Mutex: a holder SIGKILLed, a holder SIGSTOPped past its lease, a waiter SIGSTOPped, and
    /// last the only waiter SIGKILLed right before the holder's release hands it the lock.
    mutex_sigkill_sigstop_holders_and_waiters,
    Kind::Mutex
);

crash_test!(
    /// FairLock: the same faults; the SIGKILLed waiter is the head of the queue when the holder
    /// releases, and every survivor must get its turn after the last fault.
    fair_lock_sigkill_sigstop_holders_and_waiters,
    Kind::FairLock
);

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

// ---------------------------------------------------------------------------------------------
// The worker: one process, one lock handle, a loop of lock / short critical section / release.
// ---------------------------------------------------------------------------------------------

mod worker {
    use super::*;
    use redis_locks::{FairLock, FairLockGuard, Mutex, MutexGuard};
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    /// Prints one protocol line; exits quietly once nobody reads them any more.
    macro_rules! emit {
        ($($arg:tt)*) => {
            if writeln!(std::io::stdout(), "{}{}", LINE_PREFIX, format_args!($($arg)*)).is_err() {
                std::process::exit(0);
            }
        };
    }

    enum Cmd {
        Hold,
        Release,
        Park,
        Resume,
    }

    #[derive(Default)]
    struct State {
        parked: bool,
        hold_next: bool,
    }

    impl State {
        fn apply(&mut self, cmd: Cmd) {
            match cmd {
                Cmd::Hold => self.hold_next = true,
                Cmd::Park => self.parked = true,
                Cmd::Resume => self.parked = false,
                // Only meaningful while holding on command (handled there).
                Cmd::Release => {}
            }
        }
    }

    enum Handle {
        Mutex(Mutex),
        Fair(FairLock),
    }

    enum Guard {
        Mutex(MutexGuard),
        Fair(FairLockGuard),
    }

    impl Handle {
        async fn lock(&self) -> redis_locks::Result<Guard> {
            match self {
                Handle::Mutex(m) => m.lock().await.map(Guard::Mutex),
                Handle::Fair(f) => f
                    .lock()
                    .on_position(|ahead| emit!("queued {ahead}"))
                    .await
                    .map(Guard::Fair),
            }
        }
    }

    impl Guard {
        fn fencing_token(&self) -> u64 {
            match self {
                Guard::Mutex(g) => g.fencing_token(),
                Guard::Fair(g) => g.fencing_token(),
            }
        }

        fn is_held(&self) -> bool {
            match self {
                Guard::Mutex(g) => g.is_held(),
                Guard::Fair(g) => g.is_held(),
            }
        }

        async fn release(self) -> redis_locks::Result<bool> {
            match self {
                Guard::Mutex(g) => g.release().await,
                Guard::Fair(g) => g.release().await,
            }
        }
    }

    /// Runs the worker described by `spec` and exits the process.
    pub(super) fn run(kind: Kind, spec: &str) -> ! {
        let fields: Vec<&str> = spec.split('|').collect();
        assert!(
            fields.len() == 4 && fields[0] == kind.name(),
            "{WORKER_ENV}={spec:?} is not a {} worker spec",
            kind.name()
        );
        let (url, name) = (fields[1].to_owned(), fields[2].to_owned());
        let index: u64 = fields[3].parse().expect("worker index");
        let (tx, rx) = unbounded_channel();
        thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                let cmd = match line.trim() {
                    "" => continue,
                    "hold" => Cmd::Hold,
                    "release" => Cmd::Release,
                    "park" => Cmd::Park,
                    "resume" => Cmd::Resume,
                    other => {
                        emit!("error unknown command {other:?}");
                        continue;
                    }
                };
                if tx.send(cmd).is_err() {
                    break;
                }
            }
            // Stdin closed: the test is gone or done. Never outlive it.
            std::process::exit(0);
        });
        let rt = support::time::current_thread();
        rt.block_on(work(kind, &url, &name, index, rx));
        std::process::exit(1);
    }

    /// This process's token prefix as `inspect` shows it: taken from a private lock's holder.
    async fn whoami(client: &LockClient) -> redis_locks::Result<String> {
        let probe = client.mutex(&format!("crash-whoami-{}", std::process::id()));
        let guard = probe.lock().await?;
        let info = probe.inspect().await?;
        guard.release().await?;
        Ok(info
            .holders
            .first()
            .map(|h| process_of(&h.token_prefix))
            .unwrap_or_default())
    }

    /// Returns only on a fatal error (reported first).
    async fn work(kind: Kind, url: &str, name: &str, index: u64, mut rx: UnboundedReceiver<Cmd>) {
        let client = match LockClient::connect(url).await {
            Ok(client) => client,
            Err(e) => return emit!("error connect: {e}"),
        };
        let prefix = match whoami(&client).await {
            Ok(prefix) if !prefix.is_empty() => prefix,
            other => return emit!("error whoami: {other:?}"),
        };
        // The lease is short; the heartbeat is the default (that is the point).
        let handle = match kind {
            Kind::Mutex => Handle::Mutex(client.mutex(name).lease(LEASE)),
            Kind::FairLock => Handle::Fair(client.fair_lock(name).lease(LEASE)),
        };
        emit!("ready {prefix}");
        let mut state = State::default();
        let mut round = index;
        loop {
            while let Ok(cmd) = rx.try_recv() {
                state.apply(cmd);
            }
            if state.parked {
                emit!("parked");
                while state.parked {
                    match rx.recv().await {
                        Some(cmd) => state.apply(cmd),
                        None => return,
                    }
                }
            }
            emit!("waiting");
            let guard = match handle.lock().await {
                Ok(guard) => guard,
                Err(e) => {
                    emit!("error lock: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // The section starts when lock() returned ...
            let start = now_us();
            let fence = guard.fencing_token();
            let on_command = std::mem::take(&mut state.hold_next);
            emit!("holding {fence} {start} {}", u8::from(on_command));
            if on_command {
                // Held until the test says so; it may SIGKILL or SIGSTOP us meanwhile.
                loop {
                    match rx.recv().await {
                        Some(Cmd::Release) => break,
                        Some(cmd) => state.apply(cmd),
                        None => return,
                    }
                }
            } else {
                round += 1;
                tokio::time::sleep(Duration::from_millis(2 + round % 4)).await;
            }
            // ... and ends before the last check: clean only if still held after its end.
            let end = now_us();
            let clean = guard.is_held();
            emit!("section {start} {end} {fence} {}", u8::from(clean));
            match guard.release().await {
                Ok(held) => emit!("released {held}"),
                Err(e) => emit!("released error: {e}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The orchestrator.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Section {
    worker: usize,
    start: u64,
    end: u64,
    fence: u64,
    clean: bool,
}

#[derive(Clone, Debug)]
enum Msg {
    Ready(String),
    Waiting,
    Queued(u64),
    Holding {
        fence: u64,
        on_command: bool,
    },
    Section(Section),
    Released(String),
    Parked,
    Error(String),
    /// The worker's stdout closed: it exited.
    Exited,
}

#[derive(Clone, Debug)]
struct Event {
    worker: usize,
    at: u64,
    msg: Msg,
}

fn parse(worker: usize, line: &str) -> Msg {
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    let bad = || Msg::Error(format!("unparsable line {line:?}"));
    match f.first().copied() {
        Some("ready") => Msg::Ready(f.get(1).unwrap_or(&"").to_string()),
        Some("waiting") => Msg::Waiting,
        Some("queued") => num(1).map(Msg::Queued).unwrap_or_else(bad),
        Some("holding") => match (num(1), num(3)) {
            (Some(fence), Some(c)) => Msg::Holding {
                fence,
                on_command: c == 1,
            },
            _ => bad(),
        },
        Some("section") => match (num(1), num(2), num(3), num(4)) {
            (Some(start), Some(end), Some(fence), Some(clean)) => Msg::Section(Section {
                worker,
                start,
                end,
                fence,
                clean: clean == 1,
            }),
            _ => bad(),
        },
        Some("released") => Msg::Released(f[1..].join(" ")),
        Some("parked") => Msg::Parked,
        Some("error") => Msg::Error(f[1..].join(" ")),
        _ => bad(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    Running,
    Stopped,
    Dead,
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    prefix: String,
    life: Life,
}

/// Every worker process; each is SIGKILLed and reaped on drop (a stopped one too), also when
/// the test panics.
struct Fleet {
    procs: Vec<Proc>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in &mut self.procs {
            p.stdin = None;
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// One `inspect` of the lock: sent and answered at these wall-clock instants.
struct Sample {
    sent: u64,
    answered: u64,
    holders: Vec<(String, Duration)>,
    waiters: Vec<String>,
}

/// Samples `inspect` in a thread of its own until dropped.
struct Monitor {
    samples: Arc<StdMutex<Vec<Sample>>>,
    failures: Arc<StdMutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    fn start(kind: Kind, url: String, name: String) -> Monitor {
        let samples = Arc::new(StdMutex::new(Vec::new()));
        let failures = Arc::new(StdMutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, f, st) = (samples.clone(), failures.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let rt = support::time::current_thread();
            rt.block_on(async move {
                let client = match LockClient::connect(&url).await {
                    Ok(c) => c,
                    Err(e) => return f.lock().unwrap().push(format!("connect: {e}")),
                };
                while !st.load(Ordering::Relaxed) {
                    let sent = now_us();
                    let info = match kind {
                        Kind::Mutex => client.mutex(&name).inspect().await,
                        Kind::FairLock => client.fair_lock(&name).inspect().await,
                    };
                    let answered = now_us();
                    match info {
                        Ok(info) => s.lock().unwrap().push(Sample {
                            sent,
                            answered,
                            holders: info
                                .holders
                                .iter()
                                .map(|h| (process_of(&h.token_prefix), h.lease_remaining))
                                .collect(),
                            waiters: info
                                .waiters
                                .iter()
                                .map(|w| process_of(&w.token_prefix))
                                .collect(),
                        }),
                        Err(e) => f.lock().unwrap().push(format!("inspect: {e}")),
                    }
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
            });
        });
        Monitor {
            samples,
            failures,
            stop,
            thread: Some(thread),
        }
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.halt();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    KillHolder,
    StopHolder,
    StopWaiter,
    Cont,
    KillWaiter,
}

#[derive(Clone, Copy, Debug)]
struct Fault {
    /// When the signal had surely taken effect (SIGKILL, SIGSTOP), or was about to be sent
    /// (SIGCONT): the dead or stopped span is never overstated.
    at: u64,
    worker: usize,
    kind: FaultKind,
    /// The fence of the hold a holder had when signalled.
    fence: Option<u64>,
}

/// One crash test run: the server, the workers, the monitor and everything they reported.
struct Run {
    kind: Kind,
    started: u64,
    log: Vec<Event>,
    faults: Vec<Fault>,
    /// When each SIGKILL was sent (a worker's stdout may close before it is reaped).
    kills_sent: Vec<(usize, u64)>,
    // Dropped in this order: the monitor, the workers, the server, and only then the lines
    // still coming from the workers.
    monitor: Monitor,
    fleet: Fleet,
    _server: RedisServer,
    events: Receiver<Event>,
}

fn spawn_reader(worker: usize, stdout: ChildStdout, tx: Sender<Event>) {
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The first line shares its start with the harness's `test <name> ... `.
            if let Some((_, rest)) = line.split_once(LINE_PREFIX) {
                let at = now_us();
                let msg = parse(worker, rest);
                if tx.send(Event { worker, at, msg }).is_err() {
                    return;
                }
            }
        }
        let _ = tx.send(Event {
            worker,
            at: now_us(),
            msg: Msg::Exited,
        });
    });
}

/// The state letter of `/proc/<pid>/stat` (`T` when stopped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

impl Run {
    fn start(kind: Kind, test_name: &str) -> Run {
        let server = RedisServer::start();
        let url = server.url();
        let name = format!("crash-{}", kind.name());
        let exe = std::env::current_exe().expect("path of the test binary");
        let (tx, events) = channel();
        let mut fleet = Fleet { procs: Vec::new() };
        for w in 0..WORKERS {
            let spec = format!("{}|{url}|{name}|{w}", kind.name());
            let mut child = Command::new(&exe)
                .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
                .env(WORKER_ENV, spec)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker");
            spawn_reader(w, child.stdout.take().expect("stdout"), tx.clone());
            fleet.procs.push(Proc {
                pid: child.id(),
                stdin: child.stdin.take(),
                child,
                prefix: String::new(),
                life: Life::Running,
            });
        }
        let monitor = Monitor::start(kind, url, name);
        Run {
            kind,
            started: now_us(),
            events,
            log: Vec::new(),
            faults: Vec::new(),
            kills_sent: Vec::new(),
            monitor,
            fleet,
            _server: server,
        }
    }

    fn rel(&self, at: u64) -> String {
        format!("+{:.3}s", secs(at.saturating_sub(self.started)))
    }

    /// Records one event (and the prefix a `ready` line tells).
    fn record(&mut self, ev: Event) {
        if let Msg::Ready(prefix) = &ev.msg {
            self.fleet.procs[ev.worker].prefix = prefix.clone();
        }
        self.log.push(ev);
    }

    /// Receives events for `d`.
    fn pump_for(&mut self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.events.recv_timeout(left) {
                Ok(ev) => self.record(ev),
                Err(RecvTimeoutError::Timeout) => return,
                Err(RecvTimeoutError::Disconnected) => thread::sleep(left),
            }
        }
    }

    /// Receives events until one from `worker` at or after log index `from` matches `pred`;
    /// returns it.
    fn wait_for(
        &mut self,
        from: usize,
        worker: usize,
        what: &str,
        pred: impl Fn(&Msg) -> bool,
    ) -> Event {
        let until = Instant::now() + STEP_TIMEOUT;
        let mut cursor = from;
        loop {
            if let Some(ev) = self.log[cursor..]
                .iter()
                .find(|e| e.worker == worker && pred(&e.msg))
            {
                return ev.clone();
            }
            cursor = self.log.len();
            if Instant::now() >= until {
                self.abort(&format!("w{worker} did not report {what} in time"));
            }
            self.pump_for(Duration::from_millis(5));
        }
    }

    /// Receives events until `done` holds.
    fn wait_until(&mut self, what: &str, done: impl Fn(&Run) -> bool) {
        let until = Instant::now() + STEP_TIMEOUT;
        while !done(self) {
            if Instant::now() >= until {
                self.abort(&format!("timed out waiting for {what}"));
            }
            self.pump_for(Duration::from_millis(5));
        }
    }

    /// Receives events until the monitor shows `worker` waiting in a sample sent at or after
    /// `since`, as the only waiter if `alone`.
    fn wait_waiting(&mut self, worker: usize, since: u64, alone: bool) {
        let prefix = self.fleet.procs[worker].prefix.clone();
        let until = Instant::now() + STEP_TIMEOUT;
        loop {
            let seen = self.monitor.samples.lock().unwrap().iter().any(|s| {
                s.sent >= since && s.waiters.contains(&prefix) && (!alone || s.waiters.len() == 1)
            });
            if seen {
                return;
            }
            if Instant::now() >= until {
                let what = if alone {
                    "as the only waiter"
                } else {
                    "waiting"
                };
                self.abort(&format!("inspect never showed w{worker} {what}"));
            }
            self.pump_for(Duration::from_millis(5));
        }
    }

    fn abort(&self, why: &str) -> ! {
        let mut out = format!("{why}\n{}", self.timeline());
        for w in 0..WORKERS {
            let last: Vec<String> = self
                .log
                .iter()
                .rev()
                .filter(|e| e.worker == w)
                .take(4)
                .map(|e| format!("{} {:?}", self.rel(e.at), e.msg))
                .collect();
            let _ = write!(out, "\nw{w} last said: {}", last.join(" < "));
        }
        if let Some(s) = self.monitor.samples.lock().unwrap().last() {
            let _ = write!(
                out,
                "\nlast inspect at {}: holders {:?}, waiters {:?}",
                self.rel(s.sent),
                s.holders,
                s.waiters
            );
        }
        panic!("{out}")
    }

    /// Sends `cmd` to `worker`; returns the log index its answers come after.
    fn send(&mut self, worker: usize, cmd: &str) -> usize {
        let mark = self.log.len();
        let p = &mut self.fleet.procs[worker];
        let stdin = p.stdin.as_mut().expect("stdin of a live worker");
        writeln!(stdin, "{cmd}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("command {cmd:?} to w{worker}: {e}"));
        mark
    }

    /// Has `worker` keep its next grant until `release`; returns the fence of that hold and when
    /// it was reported.
    fn hold(&mut self, worker: usize) -> (u64, u64) {
        let mark = self.send(worker, "hold");
        let ev = self.wait_for(mark, worker, "a hold on command", |m| {
            matches!(
                m,
                Msg::Holding {
                    on_command: true,
                    ..
                }
            )
        });
        match ev.msg {
            Msg::Holding { fence, .. } => (fence, ev.at),
            _ => unreachable!(),
        }
    }

    fn sigkill(&mut self, worker: usize, kind: FaultKind, fence: Option<u64>) {
        self.kills_sent.push((worker, now_us()));
        let p = &mut self.fleet.procs[worker];
        p.child.kill().expect("SIGKILL a worker");
        p.child.wait().expect("reap a worker");
        p.life = Life::Dead;
        p.stdin = None;
        let at = now_us();
        self.faults.push(Fault {
            at,
            worker,
            kind,
            fence,
        });
    }

    fn sigstop(&mut self, worker: usize, kind: FaultKind, fence: Option<u64>) {
        let pid = self.fleet.procs[worker].pid;
        signal(pid, "STOP");
        let until = Instant::now() + STEP_TIMEOUT;
        while proc_state(pid) != Some('T') {
            if Instant::now() >= until {
                self.abort(&format!("w{worker} (pid {pid}) did not stop"));
            }
            thread::sleep(Duration::from_millis(1));
        }
        self.fleet.procs[worker].life = Life::Stopped;
        let at = now_us();
        self.faults.push(Fault {
            at,
            worker,
            kind,
            fence,
        });
    }

    fn sigcont(&mut self, worker: usize) {
        let at = now_us();
        signal(self.fleet.procs[worker].pid, "CONT");
        self.fleet.procs[worker].life = Life::Running;
        self.faults.push(Fault {
            at,
            worker,
            kind: FaultKind::Cont,
            fence: None,
        });
    }

    /// The faults, in order, for reports.
    fn timeline(&self) -> String {
        let mut out = format!(
            "{} crash test, lease {LEASE:?}, default heartbeat; faults:",
            self.kind.name()
        );
        for f in &self.faults {
            let _ = write!(out, "\n  {} {:?} w{}", self.rel(f.at), f.kind, f.worker);
            if let Some(fence) = f.fence {
                let _ = write!(out, " (holding fence {fence})");
            }
        }
        let errors: Vec<String> = self
            .log
            .iter()
            .filter_map(|e| match &e.msg {
                Msg::Error(m) => Some(format!("{} w{}: {m}", self.rel(e.at), e.worker)),
                _ => None,
            })
            .collect();
        if !errors.is_empty() {
            let _ = write!(out, "\nworker errors:\n  {}", errors.join("\n  "));
        }
        out
    }
}

/// The longest stretch of `[from, to]` that no clean section covers: (length, its start).
fn longest_idle(clean: &[Section], from: u64, to: u64) -> (u64, u64) {
    let mut cursor = from;
    let mut best = (0, from);
    for s in clean {
        if s.end <= cursor {
            continue;
        }
        if s.start >= to {
            break;
        }
        if s.start > cursor && s.start - cursor > best.0 {
            best = (s.start - cursor, cursor);
        }
        cursor = cursor.max(s.end);
    }
    if to > cursor && to - cursor > best.0 {
        best = (to - cursor, cursor);
    }
    best
}

fn orchestrate(kind: Kind, test_name: &str) {
    let mut run = Run::start(kind, test_name);
    run.wait_until("every worker ready", |run| {
        run.fleet.procs.iter().all(|p| !p.prefix.is_empty())
    });
    // Roles: w0 is SIGKILLed holding, w1 SIGSTOPped holding, w2 holds while the others are
    // caught waiting, w3 is SIGSTOPped waiting, w4 is SIGKILLed as the next waiter in line.
    let (killed_holder, stopped_holder, holder, stopped_waiter, victim) = (0, 1, 2, 3, 4);
    run.pump_for(WARM_UP);

    // 1. A holder SIGKILLed: it keeps the lock until its lease ends.
    let (fence, _) = run.hold(killed_holder);
    run.sigkill(killed_holder, FaultKind::KillHolder, Some(fence));
    run.pump_for(SETTLE);

    // 2. A holder SIGSTOPped for three leases, then resumed: its guard must say it lost the
    //    lock, so its section is not clean.
    let (fence, _) = run.hold(stopped_holder);
    run.sigstop(stopped_holder, FaultKind::StopHolder, Some(fence));
    run.pump_for(STOPPED_FOR);
    run.sigcont(stopped_holder);
    run.send(stopped_holder, "release");
    run.pump_for(SETTLE);

    // 3. A waiter SIGSTOPped for three leases while a holder holds; the release may hand the
    //    lock to the stopped waiter.
    let (_, since) = run.hold(holder);
    run.wait_waiting(stopped_waiter, since, false);
    run.sigstop(stopped_waiter, FaultKind::StopWaiter, None);
    run.send(holder, "release");
    run.pump_for(STOPPED_FOR);
    run.sigcont(stopped_waiter);
    run.pump_for(SETTLE);

    // 4. The next waiter in line SIGKILLed right after it announced itself: the others stand
    //    aside, `holder` holds, the victim becomes the only waiter and is killed, and the
    //    holder's release then hands the lock to the dead waiter.
    let mark = run.log.len();
    for w in [stopped_holder, stopped_waiter] {
        run.send(w, "park");
    }
    for w in [stopped_holder, stopped_waiter] {
        run.wait_for(mark, w, "parked", |m| matches!(m, Msg::Parked));
    }
    let (_, since) = run.hold(holder);
    run.wait_waiting(victim, since, true);
    run.sigkill(victim, FaultKind::KillWaiter, None);
    let mark = run.send(holder, "release");
    run.wait_for(mark, holder, "its release", |m| {
        matches!(m, Msg::Released(_))
    });
    for w in [stopped_holder, stopped_waiter] {
        run.send(w, "resume");
    }
    run.pump_for(OBSERVE);
    let ended = now_us();
    // Sections that started before the end may still be on their way.
    run.pump_for(Duration::from_millis(200));
    run.monitor.halt();
    check(&run, ended);
}

/// Writes every event and `inspect` sample, in time order, to `$RL_CRASH_DUMP.<kind>` (if the
/// variable is set), for a closer look at a run.
fn dump(run: &Run) {
    let Ok(path) = std::env::var("RL_CRASH_DUMP") else {
        return;
    };
    let mut rows: Vec<(u64, String)> = run
        .log
        .iter()
        .map(|e| (e.at, format!("w{} {:?}", e.worker, e.msg)))
        .collect();
    for s in run.monitor.samples.lock().unwrap().iter() {
        rows.push((
            s.sent,
            format!("inspect holders {:?} waiters {:?}", s.holders, s.waiters),
        ));
    }
    for f in &run.faults {
        rows.push((f.at, format!("FAULT {:?} w{}", f.kind, f.worker)));
    }
    rows.sort_by_key(|r| r.0);
    let prefixes: Vec<String> = (0..WORKERS)
        .map(|w| format!("w{w}={}", run.fleet.procs[w].prefix))
        .collect();
    let mut text = format!("{}\n", prefixes.join(" "));
    for (at, row) in rows {
        let _ = writeln!(text, "{} {row}", run.rel(at));
    }
    let file = format!("{path}.{}", run.kind.name());
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("write {file}: {e}"));
}

/// Every assertion, on everything the run recorded; one panic listing every violation.
fn check(run: &Run, ended: u64) {
    dump(run);
    let mut problems: Vec<String> = Vec::new();
    let dead_at = |w: usize| {
        run.faults
            .iter()
            .find(|f| {
                f.worker == w && matches!(f.kind, FaultKind::KillHolder | FaultKind::KillWaiter)
            })
            .map(|f| f.at)
    };

    // Workers: none exited on its own, none reported an error.
    for e in &run.log {
        match &e.msg {
            Msg::Exited
                if !run
                    .kills_sent
                    .iter()
                    .any(|&(w, sent)| w == e.worker && sent <= e.at) =>
            {
                problems.push(format!(
                    "w{} exited on its own at {}",
                    e.worker,
                    run.rel(e.at)
                ))
            }
            Msg::Error(m) => problems.push(format!(
                "w{} reported an error at {}: {m}",
                e.worker,
                run.rel(e.at)
            )),
            _ => {}
        }
    }

    // Safety: clean sections never overlap, their fences increase in time order.
    let sections: Vec<Section> = run
        .log
        .iter()
        .filter_map(|e| match e.msg {
            Msg::Section(s) => Some(s),
            _ => None,
        })
        .collect();
    let mut clean: Vec<Section> = sections.iter().copied().filter(|s| s.clean).collect();
    clean.sort_by_key(|s| (s.start, s.end));
    let mut latest: Option<Section> = None;
    let mut overlaps = 0;
    for s in &clean {
        if let Some(p) = latest {
            if s.start < p.end {
                overlaps += 1;
                if overlaps <= 5 {
                    problems.push(format!(
                        "overlapping clean sections: w{} fence {} [{}, {}] and w{} fence {} [{}, {}]",
                        p.worker,
                        p.fence,
                        run.rel(p.start),
                        run.rel(p.end),
                        s.worker,
                        s.fence,
                        run.rel(s.start),
                        run.rel(s.end)
                    ));
                }
            }
            if s.fence <= p.fence {
                problems.push(format!(
                    "fencing tokens out of order: w{} fence {} at {} after w{} fence {} at {}",
                    s.worker,
                    s.fence,
                    run.rel(s.start),
                    p.worker,
                    p.fence,
                    run.rel(p.start)
                ));
            }
        }
        if latest.is_none_or(|p| s.end > p.end) {
            latest = Some(*s);
        }
    }

    // The holder stopped past its lease must not have counted its section as clean.
    for f in run
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::StopHolder)
    {
        let fence = f.fence.expect("a stopped holder's fence");
        match sections.iter().find(|s| s.worker == f.worker && s.fence == fence) {
            Some(s) if s.clean => problems.push(format!(
                "w{} was SIGSTOPped for {STOPPED_FOR:?} (lease {LEASE:?}) holding fence {fence}, yet its guard still said held after the section"
                , f.worker
            )),
            Some(_) => {}
            None => problems.push(format!(
                "w{} never reported the section of fence {fence} it was SIGSTOPped in",
                f.worker
            )),
        }
    }

    // No dead or stopped process holds the lock with more than one lease left.
    let stopped_spans: Vec<(usize, u64, u64)> = run
        .faults
        .iter()
        .filter(|f| matches!(f.kind, FaultKind::StopHolder | FaultKind::StopWaiter))
        .map(|f| {
            let cont = run
                .faults
                .iter()
                .find(|c| c.kind == FaultKind::Cont && c.worker == f.worker && c.at > f.at)
                .map_or(u64::MAX, |c| c.at);
            (f.worker, f.at, cont)
        })
        .collect();
    let samples = run.monitor.samples.lock().unwrap();
    let mut seen: HashMap<usize, (u64, u64, Duration)> = HashMap::new();
    let mut overlong: Vec<(usize, String)> = Vec::new();
    for s in samples.iter() {
        for (prefix, left) in &s.holders {
            let Some(w) = run.fleet.procs.iter().position(|p| &p.prefix == prefix) else {
                continue;
            };
            let dead = dead_at(w).is_some_and(|k| k <= s.sent);
            let stopped = stopped_spans
                .iter()
                .any(|&(sw, from, to)| sw == w && from <= s.sent && s.answered <= to);
            if !(dead || stopped) {
                continue;
            }
            let entry = seen.entry(w).or_insert((s.sent, s.sent, Duration::ZERO));
            entry.1 = s.sent;
            entry.2 = entry.2.max(*left);
            if *left > LEASE + LEASE_SLACK && !overlong.iter().any(|&(ow, _)| ow == w) {
                overlong.push((
                    w,
                    format!(
                        "w{w}, {}, held the lock at {} with {left:?} of lease left: more than one lease ({LEASE:?})",
                        if dead { "SIGKILLed" } else { "SIGSTOPped" },
                        run.rel(s.sent)
                    ),
                ));
            }
        }
    }
    problems.extend(overlong.into_iter().map(|(_, p)| p));
    let inspect_failures = run.monitor.failures.lock().unwrap().clone();
    if samples.len() < 20 {
        problems.push(format!(
            "only {} inspect samples ({inspect_failures:?})",
            samples.len()
        ));
    }
    drop(samples);

    // Progress, during the faults and after the last one.
    let last_fault = run.faults.last().expect("faults").at;
    let first = clean.first().map_or(run.started, |s| s.start);
    let (before, before_at) = longest_idle(&clean, first, last_fault);
    let (after, after_at) = longest_idle(&clean, last_fault, ended);
    let bound = us(PROGRESS_BOUND);
    if before > bound {
        problems.push(format!(
            "no clean critical section for {:.3}s from {} (during the faults); bound {PROGRESS_BOUND:?}",
            secs(before),
            run.rel(before_at)
        ));
    }
    if after > bound {
        problems.push(format!(
            "no clean critical section for {:.3}s from {} (after the last fault, at {}); bound {PROGRESS_BOUND:?}",
            secs(after),
            run.rel(after_at),
            run.rel(last_fault)
        ));
    }
    let after_sections: Vec<&Section> = clean
        .iter()
        .filter(|s| s.start >= last_fault && s.start < ended)
        .collect();
    if after_sections.len() < MIN_SECTIONS_AFTER {
        problems.push(format!(
            "only {} clean sections in the {OBSERVE:?} after the last fault (at least {MIN_SECTIONS_AFTER})",
            after_sections.len()
        ));
    }
    let survivors: Vec<usize> = (0..WORKERS).filter(|&w| dead_at(w).is_none()).collect();
    if run.kind == Kind::FairLock {
        // Arrival order: every survivor gets its turn.
        for &w in &survivors {
            if !after_sections.iter().any(|s| s.worker == w) {
                problems.push(format!(
                    "w{w} completed no clean section after the last fault"
                ));
            }
        }
    }

    let mut summary = format!(
        "{}\n{} workers ({} survived), {} clean and {} other sections, {} inspect samples\n\
         longest stretch without a clean section: {:.3}s during the faults (from {}), \
         {:.3}s after the last one (from {}); bound {PROGRESS_BOUND:?}; {} clean sections after it",
        run.timeline(),
        WORKERS,
        survivors.len(),
        clean.len(),
        sections.len() - clean.len(),
        run.monitor.samples.lock().unwrap().len(),
        secs(before),
        run.rel(before_at),
        secs(after),
        run.rel(after_at),
        after_sections.len()
    );
    let mut seen: Vec<_> = seen.into_iter().collect();
    seen.sort();
    for (w, (from, to, max_left)) in seen {
        let _ = write!(
            summary,
            "\nw{w} seen holding while dead or stopped from {} to {}, at most {max_left:?} left",
            run.rel(from),
            run.rel(to)
        );
    }
    let queued = run
        .log
        .iter()
        .filter(|e| matches!(e.msg, Msg::Queued(0)))
        .count();
    let waits = run
        .log
        .iter()
        .filter(|e| matches!(e.msg, Msg::Waiting))
        .count();
    let released_false = run
        .log
        .iter()
        .filter(|e| matches!(&e.msg, Msg::Released(r) if r != "true"))
        .count();
    let _ = write!(
        summary,
        "\n{waits} waits ({queued} reported head of queue), {released_false} releases that found the lock gone"
    );
    if !problems.is_empty() {
        panic!(
            "{} problem(s):\n- {}\n\n{summary}",
            problems.len(),
            problems.join("\n- ")
        );
    }
    eprintln!("{summary}");
}

/// The part of a shown token that identifies the worker process that made it.
fn process_of(token_prefix: &str) -> String {
    token_prefix
        .chars()
        .take(redis_locks::PROCESS_PREFIX_LEN)
        .collect()
}
