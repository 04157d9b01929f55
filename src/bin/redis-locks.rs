//! `redis-locks`: see who holds a lock, who waits, and clear a stuck one.
//!
//! ```text
//! redis-locks [--url URL] [--prefix P] inspect NAME [--json]
//! redis-locks list [PATTERN] [--json]
//! redis-locks watch NAME [--interval-ms 1000] [--count N]
//! redis-locks force-release NAME --yes
//! ```
//!
//! Exit codes: 0 success; 1 Redis could not be reached or refused; 2 usage error (including
//! `force-release` without `--yes`); 3 `inspect` found no trace of the lock (nothing held,
//! nobody waiting, no fence).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redis_locks::store::{Family, Snapshot};
use redis_locks::{HoldKind, LockClient};

#[derive(Parser)]
#[command(
    name = "redis-locks",
    version,
    about = "Inspect and manage redis-locks locks"
)]
struct Cli {
    /// Redis URL.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379/")]
    url: String,
    /// Key prefix the locks were made with.
    #[arg(long, default_value = "rl")]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Holders (with lease left and fence), readers, waiting writers, the queue in order.
    Inspect {
        /// Lock name.
        name: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Lock names with keys under the prefix (SCAN, never KEYS).
    List {
        /// Glob on the lock name.
        #[arg(default_value = "*")]
        pattern: String,
        /// A JSON array instead of one name per line.
        #[arg(long)]
        json: bool,
    },
    /// Inspect repeatedly.
    Watch {
        /// Lock name.
        name: String,
        /// Refresh interval in ms.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many views (default: run until interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Drop every hold of the lock and bump its fence, so the evicted holders' fenced
    /// writes are refused. Waiters stay queued and are woken.
    ForceRelease {
        /// Lock name.
        name: String,
        /// Confirm: this breaks the lock for whoever holds it.
        #[arg(long)]
        yes: bool,
    },
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

fn short(token: &str) -> String {
    token.chars().take(redis_locks::TOKEN_PREFIX_LEN).collect()
}

fn kind_name(kind: HoldKind) -> String {
    match kind {
        HoldKind::Write => "write".into(),
        HoldKind::Read => "read".into(),
        HoldKind::Permits(n) => format!("permits:{n}"),
    }
}

struct View {
    name: String,
    lease: Snapshot,
    queue: Snapshot,
}

impl View {
    fn is_empty(&self) -> bool {
        let empty = |s: &Snapshot| s.holders.is_empty() && s.waiters.is_empty();
        empty(&self.lease) && empty(&self.queue) && self.fence() == 0
    }

    fn fence(&self) -> u64 {
        self.lease.fence.max(self.queue.fence)
    }

    fn json(&self) -> String {
        let holders: Vec<String> = self
            .lease
            .holders
            .iter()
            .chain(self.queue.holders.iter())
            .map(|h| {
                format!(
                    "{{\"token\":{},\"kind\":{},\"lease_remaining_ms\":{}}}",
                    json_str(&short(&h.token)),
                    json_str(&kind_name(h.kind)),
                    h.remaining_ms
                )
            })
            .collect();
        let waiting_writers: Vec<String> = self
            .lease
            .waiters
            .iter()
            .map(|w| {
                format!(
                    "{{\"token\":{},\"heartbeat_remaining_ms\":{}}}",
                    json_str(&short(&w.token)),
                    w.heartbeat_remaining_ms
                )
            })
            .collect();
        let queue: Vec<String> = self
            .queue
            .waiters
            .iter()
            .enumerate()
            .map(|(i, w)| {
                format!(
                    "{{\"position\":{i},\"ticket\":{},\"token\":{},\"weight\":{},\"heartbeat_remaining_ms\":{}}}",
                    w.ticket,
                    json_str(&short(&w.token)),
                    w.weight,
                    w.heartbeat_remaining_ms
                )
            })
            .collect();
        let permits = self
            .queue
            .permits
            .map(|p| p.to_string())
            .unwrap_or_else(|| "null".into());
        format!(
            "{{\"name\":{},\"fence\":{},\"permits\":{permits},\"holders\":[{}],\"waiting_writers\":[{}],\"queue\":[{}]}}",
            json_str(&self.name),
            self.fence(),
            holders.join(","),
            waiting_writers.join(","),
            queue.join(",")
        )
    }

    fn text(&self) -> String {
        let secs = |ms: u64| format!("{:.1}s", ms as f64 / 1000.0);
        let mut out = format!("lock {}  fence {}\n", self.name, self.fence());
        let holders: Vec<_> = self
            .lease
            .holders
            .iter()
            .chain(self.queue.holders.iter())
            .collect();
        out.push_str(&format!("holders ({}):\n", holders.len()));
        for h in holders {
            out.push_str(&format!(
                "  {:<10} {:<12} lease left {}\n",
                short(&h.token),
                kind_name(h.kind),
                secs(h.remaining_ms)
            ));
        }
        if !self.lease.waiters.is_empty() {
            out.push_str(&format!(
                "waiting writers ({}):\n",
                self.lease.waiters.len()
            ));
            for w in &self.lease.waiters {
                out.push_str(&format!(
                    "  {:<10} heartbeat left {}\n",
                    short(&w.token),
                    secs(w.heartbeat_remaining_ms)
                ));
            }
        }
        if !self.queue.waiters.is_empty() || self.queue.permits.is_some() {
            if let Some(p) = self.queue.permits {
                out.push_str(&format!("permits (stored): {p}\n"));
            }
            out.push_str(&format!("queue ({}):\n", self.queue.waiters.len()));
            for (i, w) in self.queue.waiters.iter().enumerate() {
                out.push_str(&format!(
                    "  #{i:<3} ticket {:<6} {:<10} weight {:<4} heartbeat left {}\n",
                    w.ticket,
                    short(&w.token),
                    w.weight,
                    secs(w.heartbeat_remaining_ms)
                ));
            }
        }
        out
    }
}

async fn view(client: &LockClient, name: &str) -> redis_locks::Result<View> {
    let keys = client.keys(name)?;
    let store = client.store();
    Ok(View {
        name: name.to_owned(),
        lease: store.inspect(&keys, Family::LeaseLock, None).await?,
        queue: store.inspect(&keys, Family::TicketQueue, None).await?,
    })
}

async fn list(client: &LockClient, url: &str, pattern: &str) -> redis_locks::Result<Vec<String>> {
    let conn_err = |e: redis::RedisError| redis_locks::Error::Connection(e);
    let redis_client = redis::Client::open(url).map_err(conn_err)?;
    let mut conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .map_err(conn_err)?;
    let head = format!("{}:{{", client.prefix());
    let glob = format!("{head}{pattern}}}:*");
    let mut cursor: u64 = 0;
    let mut names = std::collections::BTreeSet::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&glob)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .map_err(conn_err)?;
        for key in keys {
            if let Some(rest) = key.strip_prefix(&head) {
                if let Some(end) = rest.rfind("}:") {
                    names.insert(rest[..end].to_owned());
                }
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(names.into_iter().collect())
}

async fn run(cli: Cli) -> Result<ExitCode, redis_locks::Error> {
    let client = LockClient::builder()
        .prefix(&cli.prefix)
        .connect(&cli.url)
        .await?;
    match cli.command {
        Command::Inspect { name, json } => {
            let v = view(&client, &name).await?;
            if json {
                println!("{}", v.json());
            } else {
                print!("{}", v.text());
            }
            Ok(if v.is_empty() {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::List { pattern, json } => {
            let names = list(&client, &cli.url, &pattern).await?;
            if json {
                let items: Vec<String> = names.iter().map(|n| json_str(n)).collect();
                println!("[{}]", items.join(","));
            } else {
                for n in names {
                    println!("{n}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Watch {
            name,
            interval_ms,
            count,
            json,
        } => {
            let mut shown = 0u64;
            loop {
                let v = view(&client, &name).await?;
                if json {
                    println!("{}", v.json());
                } else {
                    println!("{}", v.text());
                }
                shown += 1;
                if count.is_some_and(|c| shown >= c) {
                    return Ok(ExitCode::SUCCESS);
                }
                tokio::time::sleep(Duration::from_millis(interval_ms.max(50))).await;
            }
        }
        Command::ForceRelease { name, yes } => {
            if !yes {
                eprintln!("force-release breaks the lock for its holders; add --yes to confirm");
                return Ok(ExitCode::from(2));
            }
            let fence = client.force_release(&name).await?;
            println!("released every hold of {name}; fence is now {fence}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            if err.is_invalid_input() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
