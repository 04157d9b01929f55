//! [`LockClient::doctor`]: every property a lock deployment depends on, checked on the servers
//! the client is connected to, with a verdict and a fix.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::api::client::{LockClient, PROBE_LOCK};
use crate::vocab::deployment::{self, Finding, Info, Report, Verdict};
use crate::vocab::error::{Error, Result};
use crate::vocab::keys::LockKeys;

/// How long the wake-up probe's waiter waits: far less than its retry interval, so only a
/// wake-up from the server can end its wait in time.
const WAKE_UP_WAIT: Duration = Duration::from_secs(3);
/// A wake-up slower than this did not come from a pushed message: the waiter found the lock
/// free by a retry of its own (after a failed subscription, for instance).
const PUSHED: Duration = Duration::from_millis(250);
/// The waiter's retry interval during the probe.
const NO_POLLING: Duration = Duration::from_secs(60);
/// Lock and release pairs timed for the round-trip finding.
const PAIRS: usize = 5;
/// A pair slower than this makes short leases risky.
const SLOW_PAIR: Duration = Duration::from_millis(50);
/// A server clock further from this machine's than this is reported.
const CLOCK_SKEW: Duration = Duration::from_millis(500);

fn local_clock_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

impl LockClient {
    /// Checks the deployment this client is connected to, for everything locks depend on,
    /// and says what to change. For each server: its name and version, whether it may evict
    /// lock keys (`maxmemory` and `maxmemory-policy`), persistence, replication and the
    /// `wait_replicas` advice. Then what connecting checks (the server must have Lua
    /// scripting, a real clock in scripts, `PEXPIRE` `GT`/`NX` and RESP3; a server lacking one
    /// is unfit, with what to do). Then, with a probe lock of a fresh name (its keys expire within
    /// seconds): that the scripts run (the user's ACL rights), that a release wakes a waiting
    /// client through a pushed message (channel rights, RESP3 pushes delivered), the time of
    /// an uncontended lock and release, and the server's clock against this machine's (fences
    /// are bounded below by it). The settings are read with `INFO`, which managed services
    /// allow; a refused `INFO` is reported, not fatal.
    ///
    /// The `redis-locks doctor` command prints this report.
    ///
    /// # Errors
    /// None of its own: what fails is reported as a finding.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::{LockClient, Verdict};
    /// let report = LockClient::in_memory().doctor().await?;
    /// assert_eq!(report.verdict(), Verdict::Fit);
    /// # Ok(()) }
    /// ```
    pub async fn doctor(&self) -> Result<Report> {
        let mut findings = Vec::new();
        let infos = self.store_ref().server_info().await;
        let on_servers = !matches!(&infos, Ok(infos) if infos.is_empty());
        match infos {
            Ok(infos) if infos.is_empty() => findings.push(
                Finding::new("backend", "", Verdict::Fit)
                    .detail("the in-memory store: its locks are shared within this process only"),
            ),
            Ok(infos) => {
                for (server, text) in infos {
                    let info = Info::parse(&text);
                    findings.push(deployment::server(&server, &info));
                    findings.push(deployment::eviction(&server, &info));
                    findings.push(deployment::persistence(&server, &info));
                    findings.push(deployment::replication(&server, &info));
                }
            }
            Err(err) => findings.push(
                Finding::new("settings", "", Verdict::Warning)
                    .detail(format!("INFO failed, so the settings were not read: {err}"))
                    .fix("grant the user +info to let the checks read the server's settings"),
            ),
        }
        if on_servers {
            findings.push(self.capabilities().await);
        }
        // The probe's fence counter outlives it for its lease; `redis-locks list` leaves
        // names with this prefix out.
        let probe = format!("redis-locks-doctor-{}", uuid::Uuid::new_v4().simple());
        findings.extend(self.probe(&probe).await);
        Ok(Report { findings })
    }

    /// What connecting checks ([`Store::check_server`](crate::store::Store::check_server)):
    /// Lua scripting, a real clock in scripts, `PEXPIRE` `GT`/`NX`, RESP3 and the version.
    async fn capabilities(&self) -> Finding {
        let probe = match LockKeys::new(self.prefix(), PROBE_LOCK) {
            Ok(probe) => probe,
            Err(err) => {
                return Finding::new("capabilities", "", Verdict::Warning).detail(err.to_string())
            }
        };
        match self.store_ref().check_server(&probe).await {
            Ok(()) => Finding::new("capabilities", "", Verdict::Fit).detail(
                "the capability probe found nothing missing (Lua scripting, a real clock in \
                 scripts, PEXPIRE GT/NX, RESP3)",
            ),
            Err(Error::UnsupportedServer { missing, .. }) => {
                Finding::new("capabilities", "", Verdict::Unfit)
                    .detail(format!("the server lacks {missing}"))
                    .fix(missing.advice())
            }
            Err(err) => Finding::new("capabilities", "", Verdict::Warning)
                .detail(format!("the capability probe failed: {err}"))
                .fix(
                    "grant the probe's commands on the prefix's keys (+hello +script|load \
                     +evalsha +time +pexpire, as in the README's \"Least privilege\" section)",
                ),
        }
    }

    /// The checks made with a probe lock named `name`.
    async fn probe(&self, name: &str) -> Vec<Finding> {
        let mutex = self
            .mutex(name)
            .lease(Duration::from_secs(10))
            .auto_renew(false);
        let before = local_clock_us();
        let guard = match mutex.try_lock().await {
            Ok(guard) => guard,
            Err(err) => return vec![script_failure(&err)],
        };
        let after = local_clock_us();
        let mut findings = vec![
            Finding::new("scripts", "", Verdict::Fit).detail("the lock scripts run"),
            // A fresh name has no fence counter: its first fence is the server's clock in µs.
            clock(guard.fencing_token(), before, after),
        ];
        let wake_up = self.wake_up(name, guard).await;
        findings.push(wake_up);
        findings.push(self.round_trip(name).await);
        findings
    }

    /// Holds `name` with `guard` while another handle waits for it without polling, then
    /// releases: the waiter is granted in time only if the release's wake-up reached it.
    async fn wake_up(&self, name: &str, guard: crate::MutexGuard) -> Finding {
        let waiter = self
            .mutex(name)
            .retry_interval(NO_POLLING)
            .auto_renew(false);
        let inspect = self.mutex(name);
        let wait = tokio::spawn(async move { waiter.lock().timeout(WAKE_UP_WAIT).await });
        // Let the waiter announce itself and subscribe before the release.
        let give_up = Instant::now() + Duration::from_secs(2);
        while Instant::now() < give_up {
            let waiting = inspect.inspect().await.is_ok_and(|i| !i.waiters.is_empty());
            if waiting {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        let _ = guard.release().await;
        match wait.await {
            Ok(Ok(granted)) => {
                let took = released.elapsed();
                let _ = granted.release().await;
                let ms = took.as_secs_f64() * 1000.0;
                if took <= PUSHED {
                    Finding::new("wake-ups", "", Verdict::Fit).detail(format!(
                        "a release woke a waiting client through a pushed message in {ms:.1} ms"
                    ))
                } else {
                    no_wake_up(format!(
                        "the waiting client got the lock {ms:.0} ms after the release, by a \
                         retry of its own, not by a pushed message"
                    ))
                }
            }
            Ok(Err(err)) => {
                no_wake_up(format!("a release did not wake the waiting client ({err})"))
            }
            Err(join) => Finding::new("wake-ups", "", Verdict::Warning)
                .detail(format!("the probe's waiter did not finish: {join}")),
        }
    }

    /// Times uncontended lock and release pairs on `name`.
    async fn round_trip(&self, name: &str) -> Finding {
        let mutex = self.mutex(name).auto_renew(false);
        let mut pairs = Vec::with_capacity(PAIRS);
        for _ in 0..PAIRS {
            let start = Instant::now();
            match mutex.try_lock().await {
                Ok(guard) => {
                    let _ = guard.release().await;
                }
                Err(err) => {
                    return Finding::new("round trip", "", Verdict::Warning)
                        .detail(format!("an uncontended lock failed: {err}"));
                }
            }
            pairs.push(start.elapsed());
        }
        pairs.sort();
        let median = pairs[PAIRS / 2];
        let detail = format!(
            "an uncontended lock and release take {:.2} ms (median of {PAIRS})",
            median.as_secs_f64() * 1000.0
        );
        if median > SLOW_PAIR {
            Finding::new("round trip", "", Verdict::Warning)
                .detail(detail)
                .fix("keep leases far longer than this, and the client close to the server")
        } else {
            Finding::new("round trip", "", Verdict::Fit).detail(detail)
        }
    }
}

/// The finding when a release's wake-up did not reach the waiter (`what` happened instead).
fn no_wake_up(what: String) -> Finding {
    Finding::new("wake-ups", "", Verdict::Warning)
        .detail(format!(
            "{what}: waiters then wait for their retry interval, so hand-offs are slow"
        ))
        .fix(
            "grant the lock channels (ACL SETUSER <user> &<prefix>:* +subscribe +unsubscribe \
             +publish, or the s- forms on Cluster), and make sure nothing between the client \
             and the server drops RESP3 push messages",
        )
}

/// The finding when the probe lock could not be taken.
fn script_failure(err: &Error) -> Finding {
    let text = err.to_string();
    let fix = if text.contains("NOPERM") {
        "grant the scripts and keys: ACL SETUSER <user> ~<prefix>:* +evalsha +eval +script|load \
         (the README's \"Least privilege\" section)"
    } else {
        "see the error; `redis-locks doctor` needs the server to run the lock scripts"
    };
    Finding::new("scripts", "", Verdict::Unfit)
        .detail(format!("the probe lock failed: {text}"))
        .fix(fix)
}

/// The server's clock against this machine's, from a first fence `fence` (the server's µs)
/// granted between the local instants `before` and `after` (µs).
fn clock(fence: u64, before: i64, after: i64) -> Finding {
    let server = i64::try_from(fence).unwrap_or(i64::MAX);
    let (lo, hi) = (server - after, server - before);
    let skew_ms = |us: i64| us as f64 / 1000.0;
    let detail = format!(
        "the server's clock is {:+.1} to {:+.1} ms from this machine's",
        skew_ms(lo),
        skew_ms(hi)
    );
    let bound = i64::try_from(CLOCK_SKEW.as_micros()).unwrap_or(i64::MAX);
    if lo > bound || hi < -bound {
        Finding::new("clock", "", Verdict::Warning)
            .detail(detail)
            .fix(
                "run NTP on the servers and clients: fences are bounded below by the server's \
             clock, and a failover or restart keeps them rising only if the new server's \
             clock is not behind the old one's",
            )
    } else {
        Finding::new("clock", "", Verdict::Fit).detail(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_skew_is_reported_beyond_half_a_second() {
        assert_eq!(clock(1_000_000, 990_000, 1_010_000).verdict, Verdict::Fit);
        assert_eq!(
            clock(3_000_000, 1_000_000, 1_010_000).verdict,
            Verdict::Warning
        );
        assert_eq!(
            clock(1_000_000, 3_000_000, 3_010_000).verdict,
            Verdict::Warning
        );
    }
}
