//! The `redis-server` launcher: REAL `redis-server` processes on free loopback ports.
//!
//! The integration tests reach it through `mod support;` (`support::RedisServer`, ...);
//! The benchmark harness (`bench/src/servers.rs`) includes this file alone with `#[path]`, so
//! it uses only `std`.
//!
//! * [`RedisServer::start`] / [`RedisServer::start_with`]: a private standalone
//!   server per call, never on 6379.
//! * [`server_url`]: honours `REDIS_URL` (one SHARED server, so tests using it
//!   must use unique lock names) or starts a private server.
//! * [`RedisCluster::start`]: a private Redis Cluster (at least 3 masters).
//!
//! Every server runs with persistence disabled in its own temporary directory,
//! so [`RedisServer::restart`] (SIGKILL, then start again on the same port)
//! brings back an EMPTY server. On drop each process is killed through its own
//! `Child` handle and its directory is removed.
//!
//! A missing `redis-server` / `redis-cli` makes tests fail loudly with install
//! instructions; they never skip.
//!
//! The environment variable `REDIS_LOCKS_SERVER` names another server binary to start in
//! place of `redis-server` (a `valkey-server`, which takes redis-server's arguments, serves
//! Sentinel with `--sentinel` and Cluster; `redis-cli` still drives it: same protocol). A
//! path that is not an executable file fails every test that starts a server, loudly.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const INSTALL_HINT: &str = "install it with `apt-get install redis-server redis-tools` \
                            (or set REDIS_URL to use an existing server)";

/// The variable naming the server binary the harness starts (unset: `redis-server`).
pub const SERVER_VAR: &str = "REDIS_LOCKS_SERVER";

/// The server binary the harness starts: `$REDIS_LOCKS_SERVER` when set and non-empty
/// (which must then be an executable file), otherwise `redis-server` from `PATH`.
pub fn server_binary() -> String {
    match std::env::var(SERVER_VAR) {
        Ok(path) if !path.trim().is_empty() => {
            let path = path.trim().to_owned();
            let executable = fs::metadata(&path).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            });
            if !executable {
                panic!(
                    "{SERVER_VAR}={path:?} is not an executable file: point it at a server \
                     binary (e.g. a valkey-server, which .ci/run fetches) or unset it to use \
                     redis-server"
                );
            }
            path
        }
        _ => "redis-server".to_owned(),
    }
}

/// How many ports / spawns to try before giving up (covers port races).
const START_ATTEMPTS: usize = 5;
/// How long a freshly spawned server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a new cluster may take to reach `cluster_state:ok` on every node.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(20);
/// Redis Cluster's bus listens on `port + 10000` by default.
const CLUSTER_BUS_OFFSET: u16 = 10000;
const CLUSTER_ARGS: &[&str] = &[
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "2000",
];

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Which kind of port a server needs.
#[derive(Clone, Copy)]
enum PortKind {
    Standalone,
    /// `port + 10000` (cluster bus) must also fit in a u16 and be free.
    Cluster,
}

/// One `redis-server` child process listening on `127.0.0.1:port`.
pub struct RedisServer {
    /// The binary to start; `None`: [`server_binary`].
    binary: Option<String>,
    port: u16,
    extra_args: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
    /// For a sentinel: the config file's text, written to `sentinel.conf` in `dir` at the
    /// first start (the sentinel rewrites that file as it learns the topology).
    sentinel_config: Option<String>,
}

impl RedisServer {
    /// Starts a standalone server on a free loopback port.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments
    /// (e.g. `&["--maxmemory", "10mb"]`) appended to the defaults.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        Self::launch(extra_args, PortKind::Standalone)
    }

    /// Like [`RedisServer::start`], with `binary` (a path, or a name on `PATH`) started in
    /// place of [`server_binary`] (the bench runs its workloads on several servers).
    pub fn start_binary(binary: &str) -> RedisServer {
        Self::launch_binary(Some(binary.to_owned()), &[], PortKind::Standalone)
    }

    fn launch(extra_args: &[&str], kind: PortKind) -> RedisServer {
        Self::launch_binary(None, extra_args, kind)
    }

    fn launch_binary(binary: Option<String>, extra_args: &[&str], kind: PortKind) -> RedisServer {
        let mut server = RedisServer {
            binary,
            port: 0,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            dir: unique_temp_dir(),
            child: None,
            sentinel_config: None,
        };
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            server.port = free_port(kind);
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(why) => {
                    failures.push(format!("attempt {attempt} on port {}: {why}", server.port));
                    server.stop();
                }
            }
        }
        panic!(
            "{} failed to start after {START_ATTEMPTS} attempts:\n{}\n{}",
            server.binary(),
            failures.join("\n"),
            server.log_contents()
        );
    }

    /// A client of this server whose holds take `lease` (otherwise default settings).
    pub async fn leased(&self, lease: std::time::Duration) -> redis_locks::LockClient {
        let builder = redis_locks::LockClient::builder().lease(lease);
        builder.connect(&self.url()).await.expect("connect")
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of the running server process. Panics if it was killed.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .expect("redis-server is not running (was it killed?)")
            .id()
    }

    /// The server's temporary directory (holds `redis.log`, `nodes.conf`, ...).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// SIGKILLs the server (if running) and starts it again on the SAME port
    /// with the same arguments, waiting until it answers PING. Because
    /// persistence is off, the restarted server is empty.
    pub fn restart(&mut self) {
        self.stop();
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(why) => {
                    failures.push(format!("attempt {attempt}: {why}"));
                    self.stop();
                    sleep(Duration::from_millis(200));
                }
            }
        }
        panic!(
            "redis-server failed to restart on port {}:\n{}\n{}",
            self.port,
            failures.join("\n"),
            self.log_contents()
        );
    }

    /// SIGKILLs the server and waits for it to exit. No-op if not running.
    /// [`RedisServer::restart`] brings it back on the same port.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT <args>` and returns its trimmed
    /// stdout. Panics (with stderr) if redis-cli fails. Note that redis-cli
    /// exits 0 on Redis error replies; those appear in the returned string.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::cli`] that returns redis-cli's failure instead of panicking: for
    /// polling a node that may close its connections meanwhile (Valkey closes client
    /// connections while a primary turns into a replica).
    pub fn try_cli(&self, args: &[&str]) -> Result<String, String> {
        let port = self.port.to_string();
        let mut full = vec!["-h", "127.0.0.1", "-p", port.as_str()];
        full.extend_from_slice(args);
        let out = redis_cli(&full);
        if !out.status.success() {
            return Err(format!(
                "redis-cli {full:?} failed ({}):\nstderr: {}\nstdout: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn log_contents(&self) -> String {
        let path = self.log_path();
        match fs::read_to_string(&path) {
            Ok(log) => format!("--- {} ---\n{log}", path.display()),
            Err(e) => format!("(could not read {}: {e})", path.display()),
        }
    }

    /// Spawns the process on `self.port` and waits until it answers PING.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        // Appending keeps the history of failed attempts / restarts for panics.
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open redis-server log file");
        let log_err = log.try_clone().expect("clone redis-server log file handle");
        let port = self.port.to_string();
        let dir = self.dir.to_str().expect("temp dir path is not UTF-8");
        let binary = self.binary();
        let mut command = Command::new(&binary);
        if let Some(config) = &self.sentinel_config {
            let path = self.dir.join("sentinel.conf");
            if !path.exists() {
                fs::write(&path, config.replace("{port}", &port)).expect("write sentinel.conf");
            }
            command.arg(&path).arg("--sentinel");
        }
        let child = command
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir", dir, "--daemonize", "no"])
            .args(["--protected-mode", "no"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                panic!("{binary} not found: {INSTALL_HINT}")
            }
            Err(e) => panic!("failed to spawn {binary}: {e}"),
        };
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let child = self.child.as_mut().expect("wait_ready needs a child");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Err(format!("the server exited early ({status})")),
                Ok(None) => {}
                Err(e) => return Err(format!("could not poll the server: {e}")),
            }
            match probe(self.port) {
                // PONG from our own process: ready.
                Some(Some(pid)) if pid == child.id() => return Ok(()),
                // PONG from someone else: we lost a port race.
                Some(Some(pid)) => {
                    return Err(format!(
                        "port is served by another redis-server (pid {pid})"
                    ))
                }
                // Alive but unidentifiable (e.g. `--requirepass`): trust our
                // child, which is still running (checked above).
                Some(None) => return Ok(()),
                None => {}
            }
            if Instant::now() >= deadline {
                return Err(format!("no PONG within {READY_TIMEOUT:?}"));
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// The binary this server runs.
    fn binary(&self) -> String {
        self.binary.clone().unwrap_or_else(server_binary)
    }

    /// SIGKILL (`Child::kill`) and reap our own child, if any.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A primary, one replica and three sentinels monitoring them as `master`, all private, on
/// free loopback ports; a failover takes a few seconds (`down-after-milliseconds` 1000,
/// `failover-timeout` 5000).
pub struct RedisSentinels {
    /// The primary at start, then its replica.
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    master: String,
}

impl RedisSentinels {
    pub fn start(master: &str) -> RedisSentinels {
        let primary = RedisServer::start();
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
        let config = format!(
            "port {{port}}\n\
             sentinel monitor {master} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {master} 1000\n\
             sentinel failover-timeout {master} 5000\n\
             sentinel parallel-syncs {master} 1\n",
            primary.port()
        );
        let sentinels = (0..3)
            .map(|_| {
                let mut s = RedisServer {
                    binary: None,
                    port: 0,
                    extra_args: Vec::new(),
                    dir: unique_temp_dir(),
                    child: None,
                    sentinel_config: Some(config.clone()),
                };
                let mut failures = Vec::new();
                for attempt in 1..=START_ATTEMPTS {
                    s.port = free_port(PortKind::Standalone);
                    let _ = fs::remove_file(s.dir.join("sentinel.conf"));
                    match s.spawn_and_wait() {
                        Ok(()) => return s,
                        Err(why) => {
                            failures.push(format!("attempt {attempt} on port {}: {why}", s.port));
                            s.stop();
                        }
                    }
                }
                panic!(
                    "redis-server --sentinel failed to start:\n{}\n{}",
                    failures.join("\n"),
                    s.log_contents()
                );
            })
            .collect();
        let all = RedisSentinels {
            nodes: vec![primary, replica],
            sentinels,
            master: master.to_owned(),
        };
        all.wait_until(
            Duration::from_secs(20),
            "the replica to sync and the sentinels to meet",
            |a| {
                a.nodes[1]
                    .cli(&["INFO", "replication"])
                    .contains("master_link_status:up")
                    && a.sentinels.iter().all(|s| {
                        let info = s.cli(&["SENTINEL", "MASTER", &a.master]);
                        // num-other-sentinels 2 and num-slaves 1, in redis-cli's line-per-field form.
                        let lines: Vec<&str> = info.lines().collect();
                        let field = |name: &str| {
                            lines
                                .iter()
                                .position(|l| *l == name)
                                .and_then(|i| lines.get(i + 1).copied())
                        };
                        field("num-other-sentinels") == Some("2")
                            && field("num-slaves") == Some("1")
                    })
            },
        );
        all
    }

    /// The sentinels' `redis://127.0.0.1:PORT/` addresses.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The primary's port as the first sentinel that answers names it.
    pub fn primary_port(&self) -> u16 {
        for s in &self.sentinels {
            let out = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.master]);
            if let Some(port) = out.lines().nth(1).and_then(|p| p.trim().parse().ok()) {
                return port;
            }
        }
        panic!("no sentinel names a primary for {}", self.master);
    }

    /// Waits until sentinel `i` names a primary other than `old` (asking it alone, so the
    /// others may be paused), and returns its port.
    pub fn wait_named_by(&self, i: usize, old: u16) -> u16 {
        let port = self.sentinels[i].port().to_string();
        let ask = [
            "2",
            "redis-cli",
            "-p",
            &port,
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
        ];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let named = Command::new("timeout")
                .args(ask)
                .arg(&self.master)
                .output()
                .ok()
                .and_then(|out| {
                    let out = String::from_utf8_lossy(&out.stdout).into_owned();
                    out.lines().nth(1)?.trim().parse::<u16>().ok()
                });
            match named {
                Some(p) if p != old => return p,
                _ => assert!(
                    Instant::now() < deadline,
                    "sentinel {i} named no new primary"
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The port of the data node that is not on `primary`.
    pub fn other_node(&self, primary: u16) -> u16 {
        self.nodes
            .iter()
            .map(RedisServer::port)
            .find(|p| *p != primary)
            .expect("two data nodes")
    }

    /// The data node on `port` (the primary or the replica).
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("no data node on that port")
    }

    /// The sentinels' process ids (to pause them with `SIGSTOP`).
    pub fn sentinel_pids(&self) -> Vec<u32> {
        self.sentinels.iter().map(RedisServer::pid).collect()
    }

    /// The data node on `port`, to send it commands.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("no data node on that port")
    }

    /// Asks a sentinel to fail over now (`SENTINEL FAILOVER`).
    pub fn failover(&self) {
        let out = self.sentinels[0].cli(&["SENTINEL", "FAILOVER", &self.master]);
        assert_eq!(out, "OK", "SENTINEL FAILOVER refused");
    }

    /// Waits until the sentinels name a primary other than `old`, and returns its port.
    pub fn wait_new_primary(&self, old: u16) -> u16 {
        self.wait_until(
            Duration::from_secs(30),
            "the sentinels to name a new primary",
            |a| a.primary_port() != old,
        );
        self.primary_port()
    }

    /// Waits until the data node on `port` is a replica of `primary` with its link up.
    pub fn wait_replica_of(&self, port: u16, primary: u16) {
        let master_port = format!("master_port:{primary}");
        self.wait_until(
            Duration::from_secs(30),
            "the old primary to become a replica",
            |a| {
                let node = a.nodes.iter().find(|n| n.port() == port).expect("node");
                // A failed reply (the node closing connections as its role changes) is
                // "not yet"; the deadline still bounds the wait.
                let Ok(info) = node.try_cli(&["INFO", "replication"]) else {
                    return false;
                };
                info.contains("role:slave")
                    && info.contains(&master_port)
                    && info.contains("master_link_status:up")
            },
        );
    }

    fn wait_until(&self, timeout: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            if Instant::now() >= deadline {
                let logs: Vec<String> = self.sentinels.iter().map(|s| s.log_contents()).collect();
                panic!("timed out waiting for {what}:\n{}", logs.join("\n"));
            }
            sleep(Duration::from_millis(100));
        }
    }
}

/// A server to test against: `(None, $REDIS_URL)` if `REDIS_URL` is set and
/// non-empty, otherwise `(Some(server), server.url())` for a fresh private
/// server. Keep the returned `Option<RedisServer>` alive for the whole test.
///
/// `REDIS_URL` points every test at ONE shared server (possibly in parallel),
/// so tests using this must use unique lock/key names and must not flush,
/// restart or reconfigure the server.
pub fn server_url() -> (Option<RedisServer>, String) {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => (None, url.trim().to_string()),
        _ => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    }
}

/// A private Redis Cluster on loopback: `masters * (1 + replicas_per_master)`
/// servers. Dropping it stops every node (each `RedisServer` drops itself).
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
    replicas_per_master: usize,
}

impl RedisCluster {
    /// Starts the nodes, runs `redis-cli --cluster create`, and waits (up to
    /// ~20 s) until every node reports `cluster_state:ok` and knows every other
    /// node. Redis requires `masters >= 3`.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "Redis Cluster needs at least 3 masters, got {masters}"
        );
        let total = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| RedisServer::launch(CLUSTER_ARGS, PortKind::Cluster))
            .collect();
        let cluster = RedisCluster {
            nodes,
            masters,
            replicas_per_master,
        };
        cluster.create();
        cluster.wait_ok();
        cluster
    }

    fn create(&self) {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let replicas = self.replicas_per_master.to_string();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", replicas.as_str(), "--cluster-yes"]);
        let out = redis_cli(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !stdout.contains("[OK] All 16384 slots covered") {
            panic!(
                "redis-cli {args:?} failed ({}):\nstderr: {}\nstdout: {stdout}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
            );
        }
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        let want_nodes = format!("cluster_known_nodes:{}", self.nodes.len());
        loop {
            let infos: Vec<String> = self
                .nodes
                .iter()
                .map(|n| n.cli(&["cluster", "info"]))
                .collect();
            let ready = infos.iter().all(|info| {
                let mut lines = info.lines().map(str::trim);
                let ok = lines.clone().any(|l| l == "cluster_state:ok");
                ok && lines.any(|l| l == want_nodes)
            });
            if ready {
                return;
            }
            if Instant::now() >= deadline {
                let report: Vec<String> = self
                    .nodes
                    .iter()
                    .zip(&infos)
                    .map(|(n, info)| format!("--- node 127.0.0.1:{} ---\n{info}", n.port()))
                    .collect();
                panic!(
                    "cluster not ok on every node within {CLUSTER_TIMEOUT:?}:\n{}",
                    report.join("\n")
                );
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// `redis://127.0.0.1:PORT/` for every node (masters and replicas).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// All nodes, in the order given to `redis-cli --cluster create` (the
    /// first `masters` were created as masters, the rest as replicas).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Mutable access to one node, e.g. to `kill()` / `restart()` it.
    pub fn node_mut(&mut self, node: usize) -> &mut RedisServer {
        let len = self.nodes.len();
        self.nodes
            .get_mut(node)
            .unwrap_or_else(|| panic!("cluster has {len} nodes, no node {node}"))
    }

    pub fn masters(&self) -> usize {
        self.masters
    }

    pub fn replicas_per_master(&self) -> usize {
        self.replicas_per_master
    }

    /// `redis-cli -p PORT_OF(node) <args>` (plain connection, no `-c`).
    pub fn cli(&self, node: usize, args: &[&str]) -> String {
        self.nodes
            .get(node)
            .unwrap_or_else(|| panic!("cluster has {} nodes, no node {node}", self.nodes.len()))
            .cli(args)
    }
}

/// Runs `redis-cli` with `args`, failing loudly if it is not installed.
fn redis_cli(args: &[&str]) -> Output {
    match Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("redis-cli not found: {INSTALL_HINT}"),
        Err(e) => panic!("failed to run redis-cli {args:?}: {e}"),
    }
}

/// A port on 127.0.0.1 (never 6379) that was free a moment ago. Races are possible; the
/// caller retries with a new port if the server then fails to start.
fn free_port(kind: PortKind) -> u16 {
    for _ in 0..100 {
        let listener =
            TcpListener::bind(("127.0.0.1", 0)).expect("bind an ephemeral port on 127.0.0.1");
        let port = listener.local_addr().expect("read ephemeral port").port();
        drop(listener);
        if port == 6379 {
            continue; // never the default port, where a real server may live
        }
        match kind {
            PortKind::Standalone => return port,
            PortKind::Cluster => {
                let bus_free = port
                    .checked_add(CLUSTER_BUS_OFFSET)
                    .is_some_and(|bus| TcpListener::bind(("127.0.0.1", bus)).is_ok());
                if bus_free {
                    return port;
                }
            }
        }
    }
    panic!("could not find a free loopback port (with a free cluster bus port)");
}

/// Creates `$TMPDIR/redis-locks-test-<pid>-<counter>-<nanos>`.
fn unique_temp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = format!(
        "redis-locks-test-{}-{}-{nanos}",
        std::process::id(),
        DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(name);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create temp dir {}: {e}", dir.display()));
    dir
}

/// One readiness probe over a plain TCP connection.
///
/// * `None`: not answering (yet).
/// * `Some(Some(pid))`: answered `+PONG`; `pid` is the answering server's
///   `process_id` (from `INFO server`), to detect a port stolen by another server.
/// * `Some(None)`: alive but would not say who it is (`-NOAUTH`).
fn probe(port: u16) -> Option<Option<u32>> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let timeout = Duration::from_millis(500);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);

    stream.write_all(b"PING\r\n").ok()?;
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    if line.starts_with("-NOAUTH") {
        return Some(None);
    }
    if !line.starts_with("+PONG") {
        return None; // e.g. -LOADING, or connection closed
    }

    // Identify the server: INFO server -> bulk string containing process_id.
    stream.write_all(b"INFO server\r\n").ok()?;
    line.clear();
    reader.read_line(&mut line).ok()?;
    let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body).ok()?;
    let pid = String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.trim().strip_prefix("process_id:")?.parse().ok());
    // A PONG without a parsable pid still means "alive".
    Some(pid)
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to process `pid`; panics if `kill` fails.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run `kill`");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// Process `pid` stopped (`SIGSTOP`) until this is dropped (`SIGCONT`), even by a failing
/// assertion.
pub struct Stopped(pub u32);

impl Stopped {
    pub fn stop(pid: u32) -> Stopped {
        signal(pid, "STOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}
