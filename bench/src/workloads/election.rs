//! Leader election: fail-over after a leader process is killed, and observe latency.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use redis_locks::LockClient;

use crate::env::Env;
use crate::probe::ping_p50;
use crate::row::{Row, Target};
use crate::stats::{ms, pct, sorted};
use crate::BoxResult;

/// Set in the environment of the leader process the `election` workload kills:
/// `<redis url>|<key prefix>|<election name>|<lease ms>`.
pub const LEADER_ENV: &str = "RL_BENCH_LEADER";

/// The killed leader: campaigns, says `LEADING <term>` on stdout, and leads (renewing) until
/// it is killed or its stdin closes.
pub async fn leader_process(spec: &str) -> BoxResult<()> {
    let [url, prefix, name, lease_ms] = spec.split('|').collect::<Vec<_>>()[..] else {
        return Err(format!("{LEADER_ENV}: expected url|prefix|name|lease_ms, got {spec}").into());
    };
    let client = LockClient::builder().prefix(prefix).connect(url).await?;
    let leadership = client
        .election(name)
        .lease(Duration::from_millis(lease_ms.parse()?))
        .campaign(format!("pid-{}", std::process::id()))
        .await?;
    println!("LEADING {}", leadership.term());
    use std::io::Write as _;
    std::io::stdout().flush()?;
    // Lead until the parent kills this process (or goes away: stdin closes).
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin()
            .read_line(&mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
    })
    .await?;
    drop(leadership);
    Ok(())
}

const W: &str = "election";
const LEASE: Duration = Duration::from_millis(500);
const KILLS: usize = 5;
const PROCLAIMS: usize = 200;

/// Leader election: how soon a standby leads after the leader's process is killed (SIGKILL:
/// no resign, its renewals stop), bounded by the leader's lease; and how soon an observer on
/// another connection sees a proclaimed value, next to PING.
pub async fn election(env: &Env, run: usize) -> BoxResult<Vec<Row>> {
    let ping = ping_p50(&env.raw, 1000).await?;
    let mut rows = observe_latency(env, run, ping).await?;
    rows.extend(failover(env, run, ping).await?);
    Ok(rows)
}

/// Observe latency: client A leads and proclaims; client B's observer yields the value.
async fn observe_latency(env: &Env, run: usize, ping: f64) -> BoxResult<Vec<Row>> {
    let name = format!("{W}-{run}-observe");
    let mut leadership = env.client.election(&name).campaign("v0").await?;
    let mut observer = env.client_b.election(&name).observe();
    while observer
        .next()
        .await
        .and_then(|e| e.into_leader())
        .map(|l| l.value)
        != Some("v0".into())
    {}
    let mut seen = Vec::with_capacity(PROCLAIMS);
    for i in 1..=PROCLAIMS {
        let value = format!("v{i}");
        let t = Instant::now();
        leadership.proclaim(value.as_str()).await?;
        loop {
            let state = tokio::time::timeout(Duration::from_secs(10), observer.next())
                .await
                .map_err(|_| "the observer saw no proclaim within 10 s")?
                .ok_or("the observer stopped")?;
            if state.into_leader().map(|l| l.value) == Some(value.clone()) {
                break;
            }
        }
        seen.push(ms(t.elapsed()));
    }
    leadership.resign().await?;
    let seen = sorted(seen);
    Ok(vec![
        Row::new(W, "observe_after_proclaim_p50_ms", pct(&seen, 0.5), "ms")
            .vs("ping_p50_ms", ping)
            .target(Target::RatioAtMost(4.0)),
        Row::new(W, "observe_after_proclaim_p99_ms", pct(&seen, 0.99), "ms")
            .vs("ping_p50_ms", ping),
    ])
}

/// Fail-over: a leader process is killed; a standby (queued before the kill) and an
/// observer on this process measure from the kill.
async fn failover(env: &Env, run: usize, ping: f64) -> BoxResult<Vec<Row>> {
    let name = format!("{W}-{run}-failover");
    let (mut campaign_ms, mut observe_ms, mut past_lease_ms) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..KILLS {
        let kill = kill_leader(env, &name).await?;
        campaign_ms.push(kill.campaign_ms);
        past_lease_ms.push(kill.past_lease_ms);
        observe_ms.push(kill.observe_ms);
    }
    let lease = ms(LEASE);
    let (campaign_ms, observe_ms) = (sorted(campaign_ms), sorted(observe_ms));
    let past_lease_ms = sorted(past_lease_ms);
    Ok(vec![
        Row::new(
            W,
            "failover_after_kill_p50_ms",
            pct(&campaign_ms, 0.5),
            "ms",
        )
        .vs("lease_ms", lease)
        .target(Target::RatioAtMost(1.0)),
        Row::new(
            W,
            "failover_after_kill_max_ms",
            pct(&campaign_ms, 1.0),
            "ms",
        )
        .vs("lease_ms", lease),
        Row::new(
            W,
            "failover_seen_by_observer_p50_ms",
            pct(&observe_ms, 0.5),
            "ms",
        )
        .vs("lease_ms", lease),
        Row::new(
            W,
            "takeover_past_lease_end_p50_ms",
            pct(&past_lease_ms, 0.5),
            "ms",
        )
        .vs("ping_p50_ms", ping),
    ])
}

/// What one kill of the leader measured, from the kill.
struct Kill {
    /// Until the standby's campaign returned leadership.
    campaign_ms: f64,
    /// The same, less the lease the dead leader left on the server.
    past_lease_ms: f64,
    /// Until the observer saw the standby's term.
    observe_ms: f64,
}

/// Starts a leader process (this binary with [`LEADER_ENV`] set) on election `name`; returns
/// it once it leads, with its term.
async fn spawn_leader(env: &Env, name: &str) -> BoxResult<(Child, u64)> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(
            LEADER_ENV,
            format!("{}|{}|{name}|{}", env.url, env.prefix, LEASE.as_millis()),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("leader stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        line
    })
    .await?;
    let term: u64 = line
        .trim()
        .strip_prefix("LEADING ")
        .ok_or_else(|| format!("leader process said {line:?}"))?
        .parse()?;
    Ok((child, term))
}

/// One fail-over: a leader process, a standby queued behind it, the kill, the takeover.
async fn kill_leader(env: &Env, name: &str) -> BoxResult<Kill> {
    let (mut child, old_term) = spawn_leader(env, name).await?;
    let election = env.client_b.election(name).lease(LEASE);
    let mut observer = election.observe();
    while observer
        .next()
        .await
        .and_then(|e| e.into_leader())
        .map(|l| l.term)
        != Some(old_term)
    {}
    let standby = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("standby").await })
    };
    // The standby queues behind the leader before the kill.
    let queue = env.client.fair_lock(name);
    while queue.inspect().await?.waiters.is_empty() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Wait a random part of a renewal interval, so the kill lands anywhere in it.
    let spread = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos()
        % 150;
    tokio::time::sleep(Duration::from_millis(u64::from(spread))).await;
    let killed = Instant::now();
    child.kill()?;
    // The dead leader's lease left on the server: the part of the fail-over it imposes.
    let left = queue
        .inspect()
        .await?
        .holders
        .first()
        .map_or(0.0, |h| ms(h.lease_remaining));
    let _ = child.wait();
    let leadership = tokio::time::timeout(Duration::from_secs(10), standby)
        .await
        .map_err(|_| "no takeover within 10 s")???;
    let campaign_ms = ms(killed.elapsed());
    let past_lease_ms = ms(killed.elapsed()) - left;
    loop {
        let state = tokio::time::timeout(Duration::from_secs(10), observer.next())
            .await
            .map_err(|_| "the observer saw no takeover within 10 s")?
            .ok_or("the observer stopped")?;
        if state.into_leader().map(|l| l.term) == Some(leadership.term()) {
            break;
        }
    }
    let observe_ms = ms(killed.elapsed());
    leadership.resign().await?;
    Ok(Kill {
        campaign_ms,
        past_lease_ms,
        observe_ms,
    })
}
