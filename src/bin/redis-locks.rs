//! `redis-locks`: see who holds a lock, who waits, and clear a stuck one.
//!
//! ```text
//! redis-locks [--url URL] [--prefix P] inspect NAME [--json]
//! redis-locks list [PATTERN] [--state] [--held] [--json]
//! redis-locks watch NAME [--interval-ms 1000] [--count N] [--json]
//! redis-locks leader NAME [--follow [--count N]] [--json]
//! redis-locks force-release NAME [--holder TOKEN_PREFIX] --yes [--json]
//! redis-locks rate NAME (--per-second N | --per-minute N | --per-hour N) [--burst B] [--json]
//! redis-locks release NAME --hold HOLD_ID [--json]      (or the id in REDIS_LOCKS_HOLD)
//! ```
//!
//! `rate` shows a rate limiter (`client.rate_limiter`): what is available now, when the next
//! admission fits, and the waiters in arrival order (see `rate.rs`).
//!
//! `inspect` and `watch` read both families of state a lock name can have, each through its
//! public handle and without changing anything: the lease lock (Mutex, RwLock with Writer or
//! Reader preference: holders, waiting writers) and the ticket queue (FairLock, Semaphore,
//! RwLock with Fair preference: holders, the queue in order, stored permits). Tokens are
//! shown as their first [`redis_locks::TOKEN_PREFIX_LEN`] characters (the first
//! [`redis_locks::PROCESS_PREFIX_LEN`] name the process).
//!
//! `inspect` also names the primitive the lock is held as (see `kind.rs`): the ticket queue's
//! capacity (`cap`) and an election's leader value (`lv`) are read with plain GETs. A Mutex
//! holder and an RwLock writer are stored alike and shown as "Mutex or RwLock write". How
//! long the exclusive holder (a writer, a FairLock's, a leader, a Semaphore's every permit)
//! has held is its fence's age on the server's clock (`TIME`, read with the keys); a shared
//! hold's grant time is not stored: `inspect` says so, and `watch` says how long it saw each
//! holder.
//!
//! `watch` prints the first view, then one line (or JSON object) per change.
//!
//! `list` matches the key prefix literally and `PATTERN` as a Redis glob on the lock name.
//!
//! Exit codes: 0 success; 1 Redis could not be reached or refused; 2 usage error (including
//! `force-release` without `--yes`, or with a `--holder` prefix that matches several holders);
//! 3 `force-release --holder` matched no live holder; 3 `release --hold` found the hold gone
//! (2 for a malformed id, or one of another lock name); 3 `inspect` found no trace of the lock (nothing held,
//! nobody waiting, no fence), and `leader` when nobody leads; 4 `leader` on a name held as
//! something else than an election (a Mutex, an RwLock, a Semaphore, or a FairLock held for
//! a second or more without a leader value); 5 `list` or `inspect` found a key of foreign
//! data (another type than redis-locks keeps there, a value its scripts cannot read, a key
//! of a suffix redis-locks never writes, or one no lock name could have made): the name is
//! shown with the key and its type (with state `foreign` where the scripts cannot read
//! what it hides), and everything else is shown as usual. Every error message ends with
//! what to do about it.
//!
//! `list` leaves out the probe locks `doctor` makes (`redis-locks-doctor-...`).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redis_locks::{
    redact_url, Error, Finding, HoldId, HolderEviction, LeaderInfo, LockClient, RedisConfig,
    Report, Verdict,
};

#[path = "redis-locks/kind.rs"]
mod kind;
#[path = "redis-locks/rate.rs"]
mod rate;
#[path = "redis-locks/raw.rs"]
mod raw;
#[path = "redis-locks/view.rs"]
mod view;
#[path = "redis-locks/watch.rs"]
mod watch;

use raw::Raw;
use view::{view, Ctx, Foreign};
use watch::Tracker;

#[derive(Parser)]
#[command(
    name = "redis-locks",
    version,
    about = "Inspect and manage redis-locks locks"
)]
struct Cli {
    /// Redis URL, redis://[user:password@]host:port/[db] (its value is never printed: a
    /// password in it is shown as `***`).
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379/"
    )]
    url: String,
    /// Redis Cluster mode: URLs of any nodes of the cluster (comma-separated, or the option
    /// repeated) instead of --url. `list` scans every master.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["quorum", "sentinel"])]
    cluster: Vec<String>,
    /// Quorum mode: the URLs of every server of the quorum (comma-separated, or the option
    /// repeated) instead of --url, as the clients were built with `LockClient::quorum`.
    /// `list` shows the names found on any of them.
    #[arg(long, value_delimiter = ',', conflicts_with = "sentinel")]
    quorum: Vec<String>,
    /// Sentinel mode: the sentinels' URLs (comma-separated, or the option repeated) instead of
    /// --url, with --master naming the primary they watch.
    #[arg(long, value_delimiter = ',', requires = "master")]
    sentinel: Vec<String>,
    /// The master name the sentinels watch (with --sentinel).
    #[arg(long, requires = "sentinel")]
    master: Option<String>,
    /// Key prefix the locks were made with.
    #[arg(long, default_value = "rl")]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checks whether the deployment (the server, Cluster, quorum or Sentinel primary the
    /// options name) is fit for locks: server and version, eviction policy and maxmemory,
    /// persistence, replication, the scripts and channel rights, wake-ups pushed by the
    /// server, round-trip time and the server's clock. Exits with 0 when fit, 1 with
    /// warnings, 2 when unfit (or unreachable).
    Doctor {
        /// One JSON object (`verdict` and `findings`) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Holders (with lease left, fence, and how long the exclusive holder has held), readers,
    /// waiting writers, the queue in order, and keys of foreign data (exit 5).
    ///
    /// The server does not record whether a hold is still renewed: a detached hold (a
    /// guard's `detach()`) or one whose process died looks like any other until its lease
    /// runs out. A `lease left` that keeps falling between reads (`watch`) below two thirds
    /// of the lease (a guard renews every third of it, unless `renew_every` says otherwise)
    /// tells a hold no longer renewed.
    Inspect {
        /// Lock name.
        name: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Lock names with keys under the prefix (SCAN, never KEYS), each key's type checked
    /// (TYPE, one pipeline per scanned batch): a name with a key redis-locks did not write
    /// is shown with that key and its type (exit 5).
    List {
        /// Redis glob on the lock name (the key prefix is matched literally).
        #[arg(default_value = "*")]
        pattern: String,
        /// A JSON array instead of one name per line.
        #[arg(long)]
        json: bool,
        /// Also show each lock's state: `held`, `waiting`, `idle` (only its fence counter
        /// is left), or `foreign` (a key of it holds data redis-locks did not write: shown
        /// with the key and its type; exit 5). Reads every listed lock (two round trips
        /// each).
        #[arg(long)]
        state: bool,
        /// Only locks with a live holder or waiter (leaves out names with only a fence
        /// counter left). Reads every listed lock (two round trips each).
        #[arg(long)]
        held: bool,
    },
    /// The first view, then a line per change (holders, waiters, fence, kind, leader), read
    /// every interval.
    Watch {
        /// Lock name.
        name: String,
        /// Refresh interval in ms.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many reads (default: run until interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// JSON lines instead of text: the first view as `inspect --json` with `at`, then one
        /// object per change (`at`, `change`: added/removed/changed, `what`, `token`, `was`,
        /// `now`, `seen_for_ms`).
        #[arg(long)]
        json: bool,
    },
    /// The leader of an election (`client.election(name)`): its value, term and lease left.
    /// Exits with 3 when nobody leads, with 4 when the name is not an election: held as
    /// something else (a Mutex, an RwLock, a Semaphore, or a FairLock held for a second or
    /// more) and without a leader value.
    Leader {
        /// Election name.
        name: String,
        /// Keep watching: print the leader now, then every change (woken by the election's
        /// notifications), until interrupted or `--count` states were shown.
        #[arg(long)]
        follow: bool,
        /// With `--follow`, stop after this many states.
        #[arg(long)]
        count: Option<u64>,
        /// One JSON object per state (`{"name":..,"leader":null}` or with `value`, `term`,
        /// `lease_left_ms`) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Drop every hold of the lock and bump its fence, so the evicted holders' fenced
    /// writes are refused. Waiters stay queued and are woken. With `--holder`, only the one
    /// holder whose token starts with the prefix.
    ForceRelease {
        /// Lock name.
        name: String,
        /// Evict only the one holder whose token starts with this prefix (as `inspect` shows
        /// it), leaving the others; the fence is bumped when no hold of its family is left.
        /// An unknown prefix exits with 3, one matching several holders with 2.
        #[arg(long, value_name = "TOKEN_PREFIX")]
        holder: Option<String>,
        /// Confirm: this breaks the lock for whoever holds it.
        #[arg(long)]
        yes: bool,
        /// One JSON object (`{"name":..,"fence":..}`) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A rate limiter: what is available now, when the next admission fits, the waiters in
    /// arrival order. Give its rate as it was made (the server does not store the period or
    /// the burst).
    Rate {
        /// Rate limiter name.
        name: String,
        /// Its count per second.
        #[arg(long)]
        per_second: Option<u64>,
        /// Its count per minute.
        #[arg(long)]
        per_minute: Option<u64>,
        /// Its count per hour.
        #[arg(long)]
        per_hour: Option<u64>,
        /// Its burst (default: the count).
        #[arg(long)]
        burst: Option<u64>,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Release the one hold a hold id names (from a guard's `hold_id()` or `detach()`),
    /// owner-checked by its token: a stale id (the hold lapsed, the lock granted again)
    /// releases nothing and exits with 3. The id is a capability: pass it in
    /// REDIS_LOCKS_HOLD rather than on the command line, where other users may see it.
    Release {
        /// Lock name (must be the id's).
        name: String,
        /// The hold id, `rlh1:...`.
        #[arg(
            long,
            value_name = "HOLD_ID",
            env = "REDIS_LOCKS_HOLD",
            hide_env_values = true
        )]
        hold: String,
        /// One JSON object (`{"name":..,"released":..}`) instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// An election's leader as one JSON object.
fn leader_json(name: &str, leader: &Option<LeaderInfo>) -> String {
    match leader {
        Some(l) => format!(
            "{{\"name\":{},\"leader\":{{\"value\":{},\"term\":{},\"lease_left_ms\":{}}}}}",
            json_str(name),
            json_str(&l.value),
            l.term,
            l.time_left.as_millis()
        ),
        None => format!("{{\"name\":{},\"leader\":null}}", json_str(name)),
    }
}

/// A label as JSON: a string, or `null` for a token without one.
fn json_label(label: Option<&str>) -> String {
    label.map_or_else(|| "null".to_owned(), json_str)
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Now, as `2026-11-24T21:58:00.123Z` (UTC), for `watch`.
fn timestamp() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, millis) = (since.as_secs(), since.subsec_millis());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}

/// `s` with every Redis glob metacharacter escaped, so that as a `MATCH` pattern it matches
/// exactly `s`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The servers whose keys `list` scans: the one of --url, every server of --quorum, or every
/// master of --cluster (from `CLUSTER NODES` of the first node given, reached with the same
/// scheme, credentials and TLS settings as that URL).
async fn scan_targets(cli: &Cli) -> redis_locks::Result<Vec<redis::ConnectionInfo>> {
    use redis::IntoConnectionInfo;
    let info = |url: &str| {
        url.into_connection_info()
            .map_err(|e| redis_locks::Error::InvalidArgument {
                what: "Redis URL",
                reason: format!("{:?}: {e}", redact_url(url)),
            })
    };
    if !cli.quorum.is_empty() {
        return cli.quorum.iter().map(|u| info(u)).collect();
    }
    if let (false, Some(master)) = (cli.sentinel.is_empty(), &cli.master) {
        // The primary the sentinels name now.
        let sentinels = cli
            .sentinel
            .iter()
            .map(|u| info(u))
            .collect::<redis_locks::Result<Vec<_>>>()?;
        let mut sentinels = redis::sentinel::Sentinel::build(sentinels).map_err(|e| {
            redis_locks::Error::InvalidArgument {
                what: "Sentinel URLs",
                reason: e.to_string(),
            }
        })?;
        let primary = sentinels
            .async_master_for(master, None)
            .await
            .map_err(redis_error)?;
        return Ok(vec![primary.get_connection_info().clone()]);
    }
    let Some(seed) = cli.cluster.first() else {
        return Ok(vec![info(&cli.url)?]);
    };
    let seed = info(seed)?;
    let mut conn = connection(seed.clone()).await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(redis_error)?;
    let mut masters = Vec::new();
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        // `ip:port@cport[,hostname]`
        let addr = f[1].split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = addr.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        let host = host.to_owned();
        let addr = match seed.addr().clone() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => redis::ConnectionAddr::Tcp(host, port),
        };
        masters.push(seed.clone().set_addr(addr));
    }
    Ok(masters)
}

/// A connection with the library's own timeouts.
async fn connection(
    info: redis::ConnectionInfo,
) -> redis_locks::Result<redis::aio::MultiplexedConnection> {
    let address = info.addr().to_string();
    let conn_err = |e: redis::RedisError| redis_locks::Error::Connection {
        operation: "connect".into(),
        address: address.clone(),
        cause: Box::new(e),
    };
    let redis_client =
        redis::Client::open(info).map_err(|e| redis_locks::Error::InvalidArgument {
            what: "Redis URL",
            reason: e.to_string(),
        })?;
    let timeouts = RedisConfig::default();
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeouts.connect_timeout))
        .set_response_timeout(Some(timeouts.response_timeout));
    redis_client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(conn_err)
}

/// A failed command: a connection problem, or what Redis replied.
fn redis_error(e: redis::RedisError) -> redis_locks::Error {
    if e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error() {
        redis_locks::Error::Connection {
            operation: "send a command".into(),
            address: String::new(),
            cause: Box::new(e),
        }
    } else {
        let reply = match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => e.to_string(),
        };
        redis_locks::Error::Redis { reply }
    }
}

/// The names `doctor` gives its probe locks start with this (`LockClient::doctor`): `list`
/// leaves them out.
const DOCTOR_PROBE: &str = "redis-locks-doctor-";

/// Lock names under `prefix` matching `pattern` on every server of `targets`, each with one
/// of its keys; `doctor`'s probe names left out.
async fn list(
    targets: Vec<redis::ConnectionInfo>,
    prefix: &str,
    pattern: &str,
) -> redis_locks::Result<Vec<(String, Listed)>> {
    let mut names = std::collections::BTreeMap::<String, Listed>::new();
    for target in targets {
        for (name, found) in list_one(target, prefix, pattern).await? {
            match names.get_mut(&name) {
                Some(seen) => seen.foreign.extend(found.foreign),
                None => {
                    names.insert(name, found);
                }
            }
        }
    }
    names.retain(|name: &String, _| !name.starts_with(DOCTOR_PROBE));
    Ok(names.into_iter().collect())
}

/// A name `list` found: one of its keys, and those of its keys redis-locks did not write (a
/// suffix it never writes, or another type than it keeps there).
struct Listed {
    key: String,
    foreign: Vec<Foreign>,
}

/// What is foreign about `key`, whose type is `found`: `None` for a key redis-locks writes,
/// of the type it keeps there.
fn foreign_key(key: &str, found: &str) -> Option<Foreign> {
    let detail = match redis_locks::key_type(key) {
        Some(expected) if expected == found => return None,
        // Gone between the scan and the type (expired or deleted): nothing to report.
        _ if found == "none" => return None,
        Some(expected) => format!("it is a {found}, where redis-locks keeps a {expected}"),
        None => "not a key redis-locks makes (it writes no key of that suffix)".to_owned(),
    };
    Some(Foreign {
        key: Some(key.to_owned()),
        key_type: Some(found.to_owned()),
        detail,
        hides: redis_locks::key_type(key).is_some(),
    })
}

async fn list_one(
    target: redis::ConnectionInfo,
    prefix: &str,
    pattern: &str,
) -> redis_locks::Result<std::collections::BTreeMap<String, Listed>> {
    let mut conn = connection(target).await?;
    // Keys are `<prefix>:{<name>}:<part>`: the prefix is literal, the pattern a glob on the
    // name.
    let head = format!("{prefix}:{{");
    let glob = format!("{}{pattern}}}:*", glob_escape(&head));
    let mut cursor: u64 = 0;
    let mut names = std::collections::BTreeMap::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&glob)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .map_err(redis_error)?;
        // Each key's type, in one round trip per batch: a key of foreign data is reported
        // under its name, whatever `list` was asked to show.
        let mut types = redis::pipe();
        for key in &keys {
            types.cmd("TYPE").arg(key);
        }
        let types: Vec<String> = match keys.is_empty() {
            true => Vec::new(),
            false => types.query_async(&mut conn).await.map_err(redis_error)?,
        };
        for (key, found) in keys.into_iter().zip(types) {
            if let Some(rest) = key.strip_prefix(&head)
                && let Some(end) = rest.rfind("}:")
            {
                let name = rest[..end].to_owned();
                let foreign = foreign_key(&key, &found);
                let listed = names.entry(name).or_insert_with(|| Listed {
                    key: key.clone(),
                    foreign: Vec::new(),
                });
                listed.foreign.extend(foreign);
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(names)
}

/// URLs as they may be printed: each password replaced by `***`, comma-separated.
fn redacted(urls: &[String]) -> String {
    let urls: Vec<String> = urls.iter().map(|u| redact_url(u)).collect();
    urls.join(",")
}

/// What the operator can do about `err`, in one sentence (empty when the message already
/// says it).
fn advice(err: &Error, cli: &Cli) -> String {
    if err.is_connection() {
        let at = if !cli.cluster.is_empty() {
            redacted(&cli.cluster)
        } else if !cli.quorum.is_empty() {
            redacted(&cli.quorum)
        } else if !cli.sentinel.is_empty() {
            redacted(&cli.sentinel)
        } else {
            redact_url(&cli.url)
        };
        return format!(
            "check that Redis is running and reachable at {at}, or pass the right address with \
             --url (or REDIS_URL), --cluster, --quorum or --sentinel with --master"
        );
    }
    if err.is_wrong_type() || matches!(err, Error::NotRedis { .. }) {
        // The message says what to do: delete the key or use another name or prefix; check
        // the URL's host and port.
        return String::new();
    }
    match err {
        Error::InvalidName { .. } => {
            "check the lock name (`redis-locks list` shows the names under this prefix)".into()
        }
        Error::InvalidArgument { what, .. } if *what == "key prefix" => {
            "pass the key prefix the locks were made with as --prefix (default `rl`)".into()
        }
        Error::InvalidArgument { what, .. } if *what == "Redis URL" => {
            "pass --url (or REDIS_URL) as redis://[user:password@]host:port/[db], or \
             rediss:// for TLS"
                .into()
        }
        Error::InvalidArgument { .. } => "fix the argument named above".into(),
        Error::Redis { reply } if reply.starts_with("NOPERM") => format!(
            "check the rights of the Redis user in --url on keys `{}:*` (the ACL rule in \
             docs/RELIABILITY.md, plus +scan for `list`)",
            cli.prefix
        ),
        // The message gives the advice that fits the reply.
        Error::Redis { .. } => String::new(),
        _ => "see the message above; run `redis-locks --help` for the commands and options".into(),
    }
}

async fn run(cli: &Cli) -> Result<ExitCode, Error> {
    if let Command::Doctor { json } = &cli.command {
        return doctor(cli, *json).await;
    }
    let ctx = Ctx {
        client: connect(cli).await?,
        raw: raw_reader(cli).await?,
        prefix: cli.prefix.clone(),
    };
    match &cli.command {
        Command::Inspect { name, json } => inspect(cli, &ctx, name, *json).await,
        Command::List {
            pattern,
            json,
            state,
            held,
        } => list_names(cli, &ctx, pattern, *json, *state, *held).await,
        Command::Watch {
            name,
            interval_ms,
            count,
            json,
        } => watch(&ctx, name, *interval_ms, *count, *json).await,
        Command::Leader {
            name,
            follow,
            count,
            json,
        } => leader(&ctx, name, *follow, *count, *json).await,
        Command::ForceRelease {
            name,
            holder,
            yes,
            json,
        } => match holder {
            Some(prefix) => force_release_holder(cli, &ctx, name, prefix, *yes, *json).await,
            None => force_release(cli, &ctx, name, *yes, *json).await,
        },
        Command::Rate {
            name,
            per_second,
            per_minute,
            per_hour,
            burst,
            json,
        } => {
            let rate = rate::rate_of(*per_second, *per_minute, *per_hour, *burst)?;
            rate::show(&ctx.client, name, rate, *json).await
        }
        Command::Doctor { .. } => unreachable!("answered above"),
        Command::Release { name, hold, json } => release_hold(&ctx, name, hold, *json).await,
    }
}

/// `doctor`: the deployment's findings; exit 0 fit, 1 warnings, 2 unfit or unreachable.
async fn doctor(cli: &Cli, json: bool) -> Result<ExitCode, Error> {
    let report = match connect(cli).await {
        Ok(client) => client.doctor().await?,
        Err(err) => Report {
            findings: vec![Finding {
                check: "connect",
                server: String::new(),
                verdict: Verdict::Unfit,
                detail: err.to_string(),
                fix: advice(&err, cli),
            }],
        },
    };
    if json {
        let findings: Vec<String> = report
            .findings
            .iter()
            .map(|f| {
                format!(
                    "{{\"check\":{},\"server\":{},\"verdict\":{},\"detail\":{},\"fix\":{}}}",
                    json_str(f.check),
                    json_str(&f.server),
                    json_str(&f.verdict.to_string()),
                    json_str(&f.detail),
                    json_str(&f.fix)
                )
            })
            .collect();
        println!(
            "{{\"verdict\":{},\"findings\":[{}]}}",
            json_str(&report.verdict().to_string()),
            findings.join(",")
        );
    } else {
        for f in &report.findings {
            let server = if f.server.is_empty() { "-" } else { &f.server };
            println!("{:<8} {:<12} {server}: {}", f.verdict, f.check, f.detail);
            if !f.fix.is_empty() {
                println!("{:<8} {:<12} fix: {}", "", "", f.fix);
            }
        }
        println!("verdict: {}", report.verdict());
    }
    Ok(ExitCode::from(match report.verdict() {
        Verdict::Fit => 0,
        Verdict::Warning => 1,
        Verdict::Unfit => 2,
    }))
}

/// Connections for the plain reads of `cap` and `lv` (to the servers `list` scans). A
/// server that cannot be reached is left out (a quorum works with a majority): these reads
/// only refine what the handles report.
async fn raw_reader(cli: &Cli) -> Result<Raw, Error> {
    let mut conns = Vec::new();
    for target in scan_targets(cli).await.unwrap_or_default() {
        if let Ok(conn) = connection(target).await {
            conns.push(conn);
        }
    }
    Ok(Raw::new(conns))
}

/// A client on the server, Cluster, quorum or Sentinel the options name.
fn urls(list: &[String]) -> Vec<&str> {
    list.iter().map(String::as_str).collect()
}

async fn connect(cli: &Cli) -> Result<LockClient, Error> {
    let builder = LockClient::builder().prefix(&cli.prefix);
    if !cli.cluster.is_empty() {
        builder.cluster(&urls(&cli.cluster)).await
    } else if !cli.quorum.is_empty() {
        builder.quorum(&urls(&cli.quorum)).await
    } else if let (false, Some(master)) = (cli.sentinel.is_empty(), &cli.master) {
        builder.sentinel(&urls(&cli.sentinel), master).await
    } else {
        builder.connect(&cli.url).await
    }
}

/// `inspect NAME`: the lock's holders and waiters; exit 3 when it has no trace at all.
async fn inspect(cli: &Cli, ctx: &Ctx, name: &str, json: bool) -> Result<ExitCode, Error> {
    let mut v = view(ctx, name, true).await?;
    // The name's keys redis-locks did not write, which the scripts never read (a suffix it
    // never writes): found by the same scan as `list`'s.
    let scanned = list(scan_targets(cli).await?, &cli.prefix, &glob_escape(name)).await?;
    for (_, listed) in scanned.into_iter().filter(|(n, _)| n == name) {
        for found in listed.foreign {
            if !v.foreign.iter().any(|f| f.key == found.key) {
                v.foreign.push(found);
            }
        }
    }
    if json {
        println!("{}", v.json());
    } else {
        print!("{}", v.text());
    }
    if !v.foreign.is_empty() {
        eprintln!(
            "`{name}` has keys of foreign data (listed under `foreign`): redis-locks left them \
             untouched and shows what it could read beside them; delete them if nothing else \
             uses them, or use another name or --prefix"
        );
        return Ok(ExitCode::from(FOREIGN_KEYS));
    }
    if v.is_empty() && v.raw.rate_limiter {
        eprintln!(
            "`{name}` is a rate limiter (`client.rate_limiter`), not a lock: see it with \
             `redis-locks rate {name} --per-second N` (its rate as it was made)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    if v.is_empty() {
        eprintln!(
            "no trace of lock `{name}` under prefix `{}` (nothing held, nobody waiting, \
             no fence): check the name with `redis-locks list` and the --prefix",
            cli.prefix
        );
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// `list [PATTERN]`: the lock names under the prefix, with their state if asked, only those
/// held or waited for with `--held`.
async fn list_names(
    cli: &Cli,
    ctx: &Ctx,
    pattern: &str,
    json: bool,
    with_state: bool,
    held_only: bool,
) -> Result<ExitCode, Error> {
    let names = list(scan_targets(cli).await?, &cli.prefix, pattern).await?;
    let mut items = Vec::with_capacity(names.len());
    let mut odd = false;
    for (name, listed) in names {
        let Listed {
            key,
            foreign: found,
        } = listed;
        let (state, foreign) = match with_state || held_only {
            true => match view(ctx, &name, false).await {
                // A key the scripts could not read (state `foreign`: what it hides is not
                // shown), else one the scan found beside a state read in full.
                Ok(v) => {
                    let state = v.state();
                    (Some(state), v.foreign.into_iter().chain(found).next())
                }
                // A key under the prefix that no lock name could have made.
                Err(err @ Error::InvalidName { .. }) => {
                    let found = Foreign {
                        key_type: ctx.raw.key_type(&key).await,
                        key: Some(key),
                        detail: format!("not a key redis-locks makes ({err})"),
                        hides: false,
                    };
                    (Some("foreign"), Some(found))
                }
                Err(err) => return Err(err),
            },
            false => (None, found.into_iter().next()),
        };
        odd |= foreign.is_some();
        if held_only && state == Some("idle") && foreign.is_none() {
            continue;
        }
        items.push((name, state.filter(|_| with_state), foreign));
    }
    print_listed(&items, json);
    if odd {
        eprintln!(
            "some names have keys redis-locks did not write (shown with the key and its \
             type; state `foreign` where the scripts cannot read what they hide): \
             redis-locks left them untouched; delete them if nothing else uses them \
             (`redis-locks inspect NAME` shows the rest)"
        );
        return Ok(ExitCode::from(FOREIGN_KEYS));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what `list` found: a name per line (with its state and a foreign key, when known),
/// or one JSON array.
fn print_listed(items: &[(String, Option<&str>, Option<Foreign>)], json: bool) {
    if json {
        let items: Vec<String> = items
            .iter()
            .map(|(name, state, foreign)| match (state, foreign) {
                (Some(s), Some(f)) => format!(
                    "{{\"name\":{},\"state\":{},\"foreign\":{}}}",
                    json_str(name),
                    json_str(s),
                    f.json()
                ),
                (Some(s), None) => {
                    format!("{{\"name\":{},\"state\":{}}}", json_str(name), json_str(s))
                }
                (None, Some(f)) => {
                    format!("{{\"name\":{},\"foreign\":{}}}", json_str(name), f.json())
                }
                (None, None) => json_str(name),
            })
            .collect();
        println!("[{}]", items.join(","));
    } else {
        for (name, state, foreign) in items {
            match (state, foreign) {
                (Some(s), Some(f)) => println!("{name}\t{s}\t{}", f.text()),
                (Some(s), None) => println!("{name}\t{s}"),
                (None, Some(f)) => println!("{name}\tforeign\t{}", f.text()),
                (None, None) => println!("{name}"),
            }
        }
    }
}

/// Exit code of `list` and `inspect` when a key of foreign data was found (and reported), the
/// rest shown.
const FOREIGN_KEYS: u8 = 5;

/// `watch NAME`: the first view, then a line per change, reading every interval, `count`
/// reads or until interrupted.
async fn watch(
    ctx: &Ctx,
    name: &str,
    interval_ms: u64,
    count: Option<u64>,
    json: bool,
) -> Result<ExitCode, Error> {
    let first = view(ctx, name, true).await?;
    let at = timestamp();
    if json {
        let json = first.json();
        // The same object as `inspect --json`, with the time of the read first.
        println!("{{\"at\":{},{}", json_str(&at), &json[1..]);
    } else {
        println!("at {at}\n{}", first.text());
    }
    let mut tracker = Tracker::new(&first);
    let mut reads = 1u64;
    while count.is_none_or(|c| reads < c) {
        tokio::time::sleep(Duration::from_millis(interval_ms.max(50))).await;
        let v = view(ctx, name, true).await?;
        let at = timestamp();
        for change in tracker.update(&v) {
            match json {
                true => println!("{}", change.json(&at, name)),
                false => println!("{}", change.text(&at)),
            }
        }
        reads += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// Exit code of `leader` on a name that is no election.
const NOT_AN_ELECTION: u8 = 4;

/// `leader NAME [--follow]`: who leads the election (exit 3: nobody; 4: the name is held as
/// another primitive), and every change.
async fn leader(
    ctx: &Ctx,
    name: &str,
    follow: bool,
    count: Option<u64>,
    json: bool,
) -> Result<ExitCode, Error> {
    let election = ctx.client.election(name);
    let show = |leader: &Option<LeaderInfo>| {
        if json {
            println!("{}", leader_json(name, leader));
        } else {
            match leader {
                Some(l) => println!(
                    "{name}: {} leads, term {}, lease left {} ms",
                    l.value,
                    l.term,
                    l.time_left.as_millis()
                ),
                None => println!("{name}: nobody leads"),
            }
        }
    };
    if !follow {
        let leader = election.leader().await?;
        if leader.is_none()
            && let Some(code) = not_an_election(ctx, name, json).await?
        {
            return Ok(code);
        }
        show(&leader);
        return Ok(if leader.is_some() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(3)
        });
    }
    let mut observer = election.observe();
    let mut shown = 0u64;
    while let Some(event) = observer.next().await {
        show(&event.into_leader());
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(ExitCode::SUCCESS);
        }
    }
    eprintln!(
        "error: the watch stopped: {}",
        observer
            .closed_because()
            .unwrap_or_else(|| "the runtime is shutting down".to_owned())
    );
    Ok(ExitCode::from(1))
}

/// How long a FairLock-like holder may go without a leader value and still be a candidate
/// about to proclaim one (a campaign proclaims right after its grant, one round trip later).
const PROCLAIM_GRACE: Duration = Duration::from_secs(1);

/// When `name` has no leader value (`lv`) and is held as a Mutex, RwLock or Semaphore, or as
/// a FairLock for longer than [`PROCLAIM_GRACE`] (by its fence's age on the server's clock),
/// says so and gives exit code 4. A FairLock holder granted within the grace may be a
/// candidate that has not proclaimed yet: that is left to "nobody leads".
async fn not_an_election(ctx: &Ctx, name: &str, json: bool) -> Result<Option<ExitCode>, Error> {
    let v = view(ctx, name, true).await?;
    let p = v.primitive();
    let settled_fair_lock = p == kind::Primitive::FairLock
        && v.holders()
            .any(|h| v.held_for(h).is_some_and(|d| d >= PROCLAIM_GRACE));
    if v.raw.lv.is_some() || !(p.is_not_election() || settled_fair_lock) {
        return Ok(None);
    }
    if json {
        println!(
            "{{\"name\":{},\"leader\":null,\"election\":false,\"primitive\":{}}}",
            json_str(name),
            json_str(p.id())
        );
    }
    eprintln!(
        "`{name}` is not an election: it is held as {} and has no leader value; see it \
         with `redis-locks inspect {name}`",
        p.text()
    );
    Ok(Some(ExitCode::from(NOT_AN_ELECTION)))
}

/// `force-release NAME --yes`: breaks the lock for every holder.
async fn force_release(
    cli: &Cli,
    ctx: &Ctx,
    name: &str,
    yes: bool,
    json: bool,
) -> Result<ExitCode, Error> {
    if !yes {
        eprintln!(
            "force-release breaks the lock for its holders; run it again with --yes to \
             confirm (see who holds it first with `redis-locks inspect {name}`)"
        );
        return Ok(ExitCode::from(2));
    }
    // A name with no keys at all has nothing to release; bumping its fence would only
    // leave a fence key behind (until it expires).
    if view(ctx, name, false).await?.is_empty() {
        eprintln!(
            "no trace of lock `{name}` under prefix `{}`: nothing to release (check the \
             name with `redis-locks list` and the --prefix)",
            cli.prefix
        );
        return Ok(ExitCode::from(3));
    }
    let fence = ctx.client.force_release(name).await?;
    if json {
        println!("{{\"name\":{},\"fence\":{fence}}}", json_str(name));
    } else {
        println!("released every hold of {name}; fence is now {fence}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `force-release NAME --holder PREFIX --yes`: evicts the one holder whose token starts
/// with `prefix` (one atomic, owner-checked step: `LockClient::force_release_holder`).
async fn force_release_holder(
    cli: &Cli,
    ctx: &Ctx,
    name: &str,
    prefix: &str,
    yes: bool,
    json: bool,
) -> Result<ExitCode, Error> {
    if !yes {
        eprintln!(
            "force-release --holder breaks the lock for that holder; run it again with --yes \
             to confirm (see who holds it first with `redis-locks inspect {name}`)"
        );
        return Ok(ExitCode::from(2));
    }
    match ctx.client.force_release_holder(name, prefix).await? {
        HolderEviction::Evicted {
            fence,
            fence_bumped,
        } => {
            if json {
                println!(
                    "{{\"name\":{},\"evicted\":{},\"fence\":{fence},\"fence_bumped\":{fence_bumped}}}",
                    json_str(name),
                    json_str(prefix)
                );
            } else {
                let bumped = match fence_bumped {
                    true => format!("fence raised to {fence}"),
                    false => format!("fence left at {fence}: other holds share it"),
                };
                println!("evicted the holder {prefix}* of {name}; {bumped}");
            }
            Ok(ExitCode::SUCCESS)
        }
        HolderEviction::Ambiguous { matches } => {
            eprintln!(
                "{matches} holders of `{name}` have a token starting with `{prefix}`; nothing \
                 was released: pass a longer prefix (`redis-locks inspect {name}` shows each)"
            );
            Ok(ExitCode::from(2))
        }
        _ => {
            eprintln!(
                "no live holder of `{name}` under prefix `{}` has a token starting with \
                 `{prefix}`; nothing was released: `redis-locks inspect {name}` shows the holders",
                cli.prefix
            );
            Ok(ExitCode::from(3))
        }
    }
}

/// `release NAME --hold ID`: releases the hold the id names (`LockClient::release_hold`).
/// Never prints the id's token.
async fn release_hold(ctx: &Ctx, name: &str, hold: &str, json: bool) -> Result<ExitCode, Error> {
    let id: HoldId = hold.trim().parse()?;
    if id.name() != name {
        eprintln!(
            "the hold id is for lock `{}`, not `{name}`; nothing was released: pass the id's \
             own lock name",
            id.name()
        );
        return Ok(ExitCode::from(2));
    }
    let released = ctx.client.release_hold(&id).await?;
    if json {
        println!(
            "{{\"name\":{},\"kind\":{},\"fence\":{},\"released\":{released}}}",
            json_str(name),
            json_str(&id.kind()),
            id.fencing_token()
        );
    } else if released {
        println!(
            "released the {} hold of {name} (fence {})",
            id.kind(),
            id.fencing_token()
        );
    }
    if released {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "the hold of `{name}` this id names is gone (its lease lapsed, or it was released \
             or evicted); nothing was released: `redis-locks inspect {name}` shows who holds it"
        );
        Ok(ExitCode::from(3))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        Ok(code) => code,
        Err(err) => {
            let advice = advice(&err, &cli);
            eprintln!("error: {err}");
            // The causes, each once (the library's messages do not repeat their sources).
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            if !advice.is_empty() {
                eprintln!("  what to do: {advice}");
            }
            if err.is_invalid_input() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
