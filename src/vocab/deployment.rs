//! What a lock deployment depends on, judged from a server's `INFO` reply: the verdicts the
//! client's connect-time check and [`LockClient::doctor`](crate::LockClient::doctor) give.
//! Pure: parsing and judging only; the stores read `INFO`, the client runs the probes.

use std::collections::BTreeMap;
use std::fmt;

/// How fit one property of a deployment is for locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// Nothing to do.
    Fit,
    /// Locks work, with a weaker guarantee than they could have (see the finding's fix).
    Warning,
    /// Locks are not safe on this deployment as it is configured.
    Unfit,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Verdict::Fit => "fit",
            Verdict::Warning => "warning",
            Verdict::Unfit => "unfit",
        })
    }
}

/// One property of a deployment, checked: what was found and, unless fit, what to change.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// let report = redis_locks::LockClient::in_memory().doctor().await?;
/// for finding in &report.findings {
///     println!("{} {}: {}", finding.verdict, finding.check, finding.detail);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was checked (`eviction`, `persistence`, `wake-ups` ...).
    pub check: &'static str,
    /// The server it was checked on (`host:port`), or empty for the whole deployment.
    pub server: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to change (empty when fit).
    pub fix: String,
}

impl Finding {
    pub(crate) fn new(check: &'static str, server: &str, verdict: Verdict) -> Self {
        Finding {
            check,
            server: server.to_owned(),
            verdict,
            detail: String::new(),
            fix: String::new(),
        }
    }

    pub(crate) fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = fix.into();
        self
    }
}

/// What [`LockClient::doctor`](crate::LockClient::doctor) found, one finding per property
/// and server.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::Verdict;
/// let report = redis_locks::LockClient::in_memory().doctor().await?;
/// assert_eq!(report.verdict(), Verdict::Fit);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The findings, server by server, then the deployment-wide ones.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst verdict of the findings ([`Verdict::Fit`] when there are none).
    ///
    /// ```
    /// use redis_locks::{Report, Verdict};
    /// assert_eq!(Report::default().verdict(), Verdict::Fit);
    /// ```
    pub fn verdict(&self) -> Verdict {
        self.findings
            .iter()
            .map(|f| f.verdict)
            .max()
            .unwrap_or(Verdict::Fit)
    }
}

/// The fields of an `INFO` reply (`name:value` lines; sections and comments skipped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Info(BTreeMap<String, String>);

impl Info {
    pub(crate) fn parse(text: &str) -> Info {
        Info(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.trim_end().split_once(':'))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    pub(crate) fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    fn number(&self, field: &str) -> Option<u64> {
        self.get(field)?.parse().ok()
    }
}

/// Whether the server may delete lock keys under memory pressure: with `maxmemory` set, every
/// policy but `noeviction` may (`volatile-*` policies evict keys with a TTL, and every live
/// lock record has one, so they drop live locks first). An evicted lock key is a second holder.
pub(crate) fn eviction(server: &str, info: &Info) -> Finding {
    let policy = info.get("maxmemory_policy");
    let maxmemory = info.number("maxmemory");
    match (policy, maxmemory) {
        (Some(policy), Some(max)) if max > 0 && policy != "noeviction" => {
            Finding::new("eviction", server, Verdict::Unfit)
                .detail(format!(
                    "maxmemory {max} bytes with maxmemory-policy {policy}: under memory pressure \
                     the server deletes keys, and an evicted lock key lets a second holder in"
                ))
                .fix(
                    "set maxmemory-policy noeviction (writes then fail loudly instead), or \
                     maxmemory 0, or keep locks on a server of their own",
                )
        }
        (Some(policy), Some(max)) => {
            Finding::new("eviction", server, Verdict::Fit).detail(if max == 0 {
                format!("no maxmemory limit (policy {policy}): lock keys are never evicted")
            } else {
                format!("maxmemory {max} bytes with noeviction: lock keys are never evicted")
            })
        }
        _ => Finding::new("eviction", server, Verdict::Warning)
            .detail("INFO memory did not say maxmemory and maxmemory_policy")
            .fix("check that the server's maxmemory-policy is noeviction or maxmemory is 0"),
    }
}

/// Whether the lock state survives a restart. Without persistence a restart forgets every
/// hold (a second holder may be granted while the first still works); fences still rise,
/// being bounded below by the server's clock.
pub(crate) fn persistence(server: &str, info: &Info) -> Finding {
    if info.get("aof_enabled") == Some("1") {
        let detail = "append-only file on: holds survive a restart (up to its fsync policy)";
        return Finding::new("persistence", server, Verdict::Fit).detail(detail);
    }
    Finding::new("persistence", server, Verdict::Warning)
        .detail(
            "no append-only file (appendonly no): a restart loses the holds granted since the \
             last RDB snapshot, and with no snapshots either (save '') every hold is forgotten \
             on restart; a second holder can then be granted while the first still works (it \
             learns at its next renewal); fences keep rising, bounded below by the server's \
             clock",
        )
        .fix(
            "set appendonly yes (appendfsync everysec or always) if holds must survive a \
             restart; RDB snapshots alone (save <seconds> <changes>) keep only the holds of the \
             last snapshot",
        )
}

/// Replication, and whether `wait_replicas` can make a hold survive a failover.
pub(crate) fn replication(server: &str, info: &Info) -> Finding {
    let role = info.get("role").unwrap_or("unknown");
    let replicas = info.number("connected_slaves").unwrap_or(0);
    match (role, replicas) {
        ("master", 0) => Finding::new("replication", server, Verdict::Fit)
            .detail("a primary without replicas: no failover can lose a grant"),
        ("master", n) => Finding::new("replication", server, Verdict::Warning)
            .detail(format!(
                "a primary with {n} replica(s): replication is asynchronous, so a failover can \
                 lose the last grants (their holders then see lost())"
            ))
            .fix(format!(
                "use .wait_replicas({}, timeout) on the locks that must survive a failover",
                n.div_ceil(2)
            )),
        (role, _) => Finding::new("replication", server, Verdict::Unfit)
            .detail(format!("role {role}: locks need the primary"))
            .fix("point the client at the primary (or at the Sentinels)"),
    }
}

/// The server's name and version, judged as the README's table of servers does: tested in
/// CI (Redis 7.x, Valkey 9.x), expected to work (other Valkey 7.2 or later, Redis 8 or later),
/// untested with known risks (Dragonfly, Garnet), or too old (before Redis 7.0 or Valkey
/// 7.2, KeyDB on its Redis 6 base). What the scripts need is probed separately (the
/// `capabilities` finding); this says what is known of the server by name.
pub(crate) fn server(server: &str, info: &Info) -> Finding {
    let version = |field: &str| {
        info.get(field).map(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            (v, (parts.next().unwrap_or(0), parts.next().unwrap_or(0)))
        })
    };
    let fit = |detail: String| Finding::new("server", server, Verdict::Fit).detail(detail);
    let untested = |detail: String, fix: &str| {
        Finding::new("server", server, Verdict::Warning)
            .detail(detail)
            .fix(fix)
    };
    let too_old = |detail: String| {
        Finding::new("server", server, Verdict::Unfit)
            .detail(detail)
            .fix("upgrade to Redis 7.0 or later, or Valkey 7.2 or later")
    };
    if let Some((v, _)) = version("dragonfly_version") {
        return untested(
            format!("dragonfly {v}: not tested; its TIME inside scripts has answered 0 0"),
            "connecting refuses it while TIME inside scripts is broken; test your workload \
             before relying on it, or use Redis or Valkey",
        );
    }
    if let Some((v, _)) = version("garnet_version") {
        return untested(
            format!("garnet {v}: not tested; it runs Lua only with --lua"),
            "start it with --lua and check the wake-ups finding (its RESP3 pushes have closed \
             subscribed connections), or use Redis or Valkey",
        );
    }
    match (version("valkey_version"), version("redis_version")) {
        (Some((v, (9, _))), _) => fit(format!("valkey {v}: tested in CI (Valkey 9.x)")),
        (Some((v, at)), _) if at >= (7, 2) => fit(format!(
            "valkey {v}: expected to work (not tested in CI; Valkey 7.2 and later run the \
             scripts as Redis 7.2 does)"
        )),
        (Some((v, _)), _) => too_old(format!("valkey {v}")),
        (None, Some((v, (7, _)))) => fit(format!("redis {v}: tested in CI (Redis 7.x)")),
        (None, Some((v, (major, _)))) if major > 7 => fit(format!(
            "redis {v}: expected to work (not tested in CI; the scripts are reloaded after \
             SCRIPT FLUSH or the eviction of cached scripts)"
        )),
        (None, Some((v, _))) => too_old(format!("redis {v}")),
        (None, None) => Finding::new("server", server, Verdict::Warning)
            .detail("INFO server did not name the version")
            .fix("check that the server is Redis 7.0 or Valkey 7.2 or later"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(lines: &[&str]) -> Info {
        Info::parse(&format!("# Section\r\n{}\r\n", lines.join("\r\n")))
    }

    #[test]
    fn eviction_is_unfit_only_with_a_limit_and_an_evicting_policy() {
        let cases = [
            (
                ["maxmemory:0", "maxmemory_policy:allkeys-lru"],
                Verdict::Fit,
            ),
            (
                ["maxmemory:1048576", "maxmemory_policy:noeviction"],
                Verdict::Fit,
            ),
            (
                ["maxmemory:1048576", "maxmemory_policy:allkeys-lru"],
                Verdict::Unfit,
            ),
            (
                ["maxmemory:1048576", "maxmemory_policy:volatile-ttl"],
                Verdict::Unfit,
            ),
        ];
        for (lines, want) in cases {
            assert_eq!(eviction("s", &info(&lines)).verdict, want, "{lines:?}");
        }
        assert_eq!(eviction("s", &info(&[])).verdict, Verdict::Warning);
    }

    #[test]
    fn persistence_and_replication_verdicts() {
        assert_eq!(
            persistence("s", &info(&["aof_enabled:1"])).verdict,
            Verdict::Fit
        );
        assert_eq!(
            persistence("s", &info(&["aof_enabled:0"])).verdict,
            Verdict::Warning
        );
        let primary = info(&["role:master", "connected_slaves:0"]);
        assert_eq!(replication("s", &primary).verdict, Verdict::Fit);
        let replicated = replication("s", &info(&["role:master", "connected_slaves:3"]));
        assert_eq!(replicated.verdict, Verdict::Warning);
        assert!(
            replicated.fix.contains("wait_replicas(2,"),
            "{}",
            replicated.fix
        );
        assert_eq!(
            replication("s", &info(&["role:slave"])).verdict,
            Verdict::Unfit
        );
    }

    #[test]
    fn server_versions() {
        let verdict = |lines: &[&str]| {
            let found = server("s", &info(lines));
            (found.verdict, found.detail)
        };
        let redis7 = verdict(&["redis_version:7.0.15"]);
        assert_eq!(redis7.0, Verdict::Fit);
        assert!(redis7.1.contains("tested in CI"), "{}", redis7.1);
        let redis8 = verdict(&["redis_version:8.2.1"]);
        assert_eq!(redis8.0, Verdict::Fit);
        assert!(redis8.1.contains("expected to work"), "{}", redis8.1);
        assert_eq!(verdict(&["redis_version:6.2.1"]).0, Verdict::Unfit);
        let valkey9 = verdict(&["redis_version:7.2.4", "valkey_version:9.1.2"]);
        assert_eq!(valkey9.0, Verdict::Fit);
        assert!(
            valkey9.1.starts_with("valkey 9.1.2: tested"),
            "{}",
            valkey9.1
        );
        let valkey8 = verdict(&["redis_version:7.2.4", "valkey_version:8.0.1"]);
        assert_eq!(valkey8.0, Verdict::Fit);
        assert!(valkey8.1.contains("expected to work"), "{}", valkey8.1);
        let dragonfly = verdict(&["redis_version:7.4.0", "dragonfly_version:df-v1.30.0"]);
        assert_eq!(dragonfly.0, Verdict::Warning);
        let garnet = verdict(&["redis_version:7.4.3", "garnet_version:1.0.80"]);
        assert_eq!(garnet.0, Verdict::Warning);
        assert_eq!(verdict(&[]).0, Verdict::Warning);
    }
}
