//! Client-side simulation of the rate limiter (feature `testing`): seeded schedules of 2 to 4
//! real `LockClient`s sharing one in-memory store on tokio's paused clock, with faults
//! injected by the shared `support::faulty::Faulty` around each client's store: delayed
//! requests and replies, lost replies (applied by the server, an error to the client), and a
//! client that freezes mid-run (a process that stopped: its queue places must lapse). Each
//! client runs 1 to 3 tasks of `acquire(n)`, `acquire(n).timeout(t)`, `try_acquire(n)` and
//! waits dropped part-way (cancel).
//!
//! The server is the in-memory store on the virtual clock (every call gets the explicit
//! `now`), and it logs every decision it applies with the live waiters it saw just before.
//! The oracle, on that log (server time):
//! - `Rate`: over every window `[a_i, a_j]` of admissions, the admitted permits are at most
//!   `burst + count·(a_j − a_i)/period`;
//! - `Fifo`: every admission is of the head of the live waiters (nobody waits, or the caller
//!   is the first of them): no waiter and no `try` overtakes a live waiter;
//! - `Reported`: every admission a client was told of is one the server logged, at the same
//!   server instant;
//! - `Replay`: a retry of an admitted request (after a lost reply) is answered with that
//!   admission, and counts once;
//! - `Stuck`: every wait of a client that did not freeze ends (a dead waiter holds nobody
//!   back for ever), within a virtual bound.
//!
//! `SIM_CASES` sets the number of schedules (default 300); a failure names its seed, and
//! `SIM_SEED=<seed>` replays one. The same test plants the two limiter bugs of
//! `src/vocab/bugs.rs` in turn (burst off by one, admission not only at the head) and requires
//! the oracle to find each.

mod support;
use support::time::{ms, secs};

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use redis_locks::testing::keys::LockKeys;
use redis_locks::testing::store::{
    Acquire, Claim, Family, MemoryStore, PermitChange, Rate, RateClaim, RateDecision, RateSnapshot,
    Snapshot, Store,
};
use redis_locks::testing::{self, plant, unplant_all, Bug, WakeHub};
use redis_locks::{LockClient, Result};
use tokio::time::Instant;

use support::faulty::{Faulty, Op, Rule};
use support::rng::Rng;

/// What the schedules reached, over the run: each must be reached often.
static ADMITTED: AtomicU64 = AtomicU64::new(0);
static QUEUED: AtomicU64 = AtomicU64::new(0);
static TRIES_REFUSED: AtomicU64 = AtomicU64::new(0);
static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
static CANCELLED: AtomicU64 = AtomicU64::new(0);
static LOST_REPLIES: AtomicU64 = AtomicU64::new(0);
static REPLAYED: AtomicU64 = AtomicU64::new(0);

/// The server's clock at virtual instant 0.
const START_MS: u64 = 1_000_000;
/// A case whose waits have not all ended by then (virtual) is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(1_800);

/// One decision the server applied.
#[derive(Clone, Debug)]
struct Decision {
    at: u64,
    token: String,
    permits: u64,
    wait: bool,
    admitted: bool,
    /// An admission of a token admitted before (a retry after a lost reply), reported again.
    replay: bool,
    /// Live waiters (tokens) just before, in order.
    waiting: Vec<String>,
}

/// The in-memory store on the virtual clock, logging decisions.
#[derive(Debug)]
struct Server {
    store: MemoryStore,
    origin: Instant,
    log: StdMutex<Vec<Decision>>,
}

impl Server {
    fn now(&self) -> u64 {
        START_MS + self.origin.elapsed().as_millis() as u64
    }
}

#[async_trait]
impl Store for Server {
    async fn rate_acquire(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        wait: bool,
        _now: Option<u64>,
    ) -> Result<RateDecision> {
        let now = Some(self.now());
        // Both calls finish without yielding: nothing runs between them.
        let before = self.store.rate_inspect(lock, &claim.rate, now).await?;
        let decision = self.store.rate_acquire(lock, claim, wait, now).await?;
        let mut log = self.log.lock().unwrap();
        let replay = log.iter().any(|d| d.admitted && d.token == claim.token);
        let at = match decision {
            RateDecision::Admitted { at } => at,
            RateDecision::Refused(_) => self.now(),
        };
        log.push(Decision {
            at,
            token: claim.token.clone(),
            permits: claim.permits,
            wait,
            replay,
            admitted: matches!(decision, RateDecision::Admitted { .. }),
            waiting: before.waiters.into_iter().map(|w| w.token).collect(),
        });
        Ok(decision)
    }

    async fn rate_cancel(
        &self,
        lock: &LockKeys,
        claim: &RateClaim,
        _: Option<u64>,
    ) -> Result<bool> {
        self.store.rate_cancel(lock, claim, Some(self.now())).await
    }

    async fn rate_inspect(
        &self,
        lock: &LockKeys,
        rate: &Rate,
        _: Option<u64>,
    ) -> Result<RateSnapshot> {
        self.store.rate_inspect(lock, rate, Some(self.now())).await
    }

    fn hub(&self) -> &Arc<WakeHub> {
        self.store.hub()
    }

    // The lock steps are not used by a rate limiter.
    async fn acquire(&self, l: &LockKeys, c: &Claim, w: bool, _: Option<u64>) -> Result<Acquire> {
        self.store.acquire(l, c, w, Some(self.now())).await
    }
    async fn release(&self, l: &LockKeys, c: &Claim, _: Option<u64>) -> Result<bool> {
        self.store.release(l, c, Some(self.now())).await
    }
    async fn renew(
        &self,
        l: &LockKeys,
        c: &Claim,
        d: Duration,
        handed: Option<u64>,
        _: Option<u64>,
    ) -> Result<bool> {
        self.store.renew(l, c, d, handed, Some(self.now())).await
    }
    async fn downgrade(&self, l: &LockKeys, c: &Claim, _: Option<u64>) -> Result<Option<u64>> {
        self.store.downgrade(l, c, Some(self.now())).await
    }
    async fn inspect(&self, l: &LockKeys, f: Family, _: Option<u64>) -> Result<Snapshot> {
        self.store.inspect(l, f, Some(self.now())).await
    }
    async fn set_permits(
        &self,
        l: &LockKeys,
        p: PermitChange,
        h: Duration,
        _: Option<u64>,
    ) -> Result<u32> {
        self.store.set_permits(l, p, h, Some(self.now())).await
    }
    async fn force_release(&self, l: &LockKeys, _: Option<u64>) -> Result<u64> {
        self.store.force_release(l, Some(self.now())).await
    }
}

/// What one schedule is: derived from its seed.
#[derive(Debug)]
struct Schedule {
    seed: u64,
    rate: Rate,
    clients: usize,
    /// The client that freezes, and when (virtual ms).
    freeze: Option<(usize, u64)>,
}

fn schedule(seed: u64) -> Schedule {
    let mut rng = Rng::new(seed);
    let rates = [
        Rate::per_second(10).burst(3),
        Rate::new(3, ms(1_000)).burst(2),
        Rate::new(7, ms(500)).burst(4),
        Rate::per_second(50).burst(1),
    ];
    let clients = 2 + rng.below(3) as usize;
    let freeze =
        (rng.below(3) == 0).then(|| (rng.below(clients as u64) as usize, rng.below(3_000)));
    Schedule {
        seed,
        rate: rates[rng.below(rates.len() as u64) as usize],
        clients,
        freeze,
    }
}

/// Adds the faults of one client: some calls delayed, some replies lost.
fn add_faults(faulty: &Faulty, rng: &mut Rng) {
    let lose: HashSet<u64> = (0..rng.below(4)).map(|_| rng.below(30)).collect();
    let calls = AtomicU64::new(0);
    faulty.add(
        Rule::on(Op::RateAcquire)
            .when(move |_| lose.contains(&calls.fetch_add(1, Ordering::Relaxed)))
            .lose_reply(),
    );
    let delay_reply = ms(1 + rng.below(120));
    faulty.add(
        Rule::on(Op::RateAcquire)
            .times(rng.below(6) as usize)
            .delay_reply(delay_reply),
    );
    let delay_request = ms(1 + rng.below(60));
    faulty.add(
        Rule::on(Op::RateAcquire)
            .times(rng.below(6) as usize)
            .delay_request(delay_request),
    );
    faulty.add(
        Rule::on(Op::RateCancel)
            .times(rng.below(2) as usize)
            .delay_request(delay_request),
    );
}

/// One task's script: rounds of acquire, timed acquire, try, or a wait dropped part-way.
async fn task(client: LockClient, rate: Rate, mut rng: Rng, told: Arc<StdMutex<Vec<u64>>>) {
    let limiter = client.rate_limiter("sim", rate);
    for _ in 0..2 + rng.below(4) {
        let n = 1 + rng.below(rate.burst_size());
        let outcome = match rng.below(4) {
            0 => limiter.try_acquire(n).await,
            1 => {
                let t = ms(rng.below(800));
                limiter.acquire(n).timeout(t).await
            }
            2 => {
                let t = ms(rng.below(500));
                match tokio::time::timeout(t, limiter.acquire(n)).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        // Dropped part-way: cancelled.
                        CANCELLED.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
            }
            _ => limiter.acquire(n).await,
        };
        match outcome {
            Ok(admission) => told.lock().unwrap().push(admission.admitted_at_ms),
            Err(e) if e.is_rate_limited() => _ = TRIES_REFUSED.fetch_add(1, Ordering::Relaxed),
            Err(e) if e.is_timeout() => _ = TIMED_OUT.fetch_add(1, Ordering::Relaxed),
            Err(e) if e.is_connection() => _ = LOST_REPLIES.fetch_add(1, Ordering::Relaxed),
            Err(e) => panic!("unexpected error: {e}"),
        }
        tokio::time::sleep(ms(rng.below(300))).await;
    }
}

/// Runs one schedule; `Err` names the first violation.
async fn run(s: &Schedule) -> std::result::Result<(), String> {
    let server = Arc::new(Server {
        store: MemoryStore::new(),
        origin: Instant::now(),
        log: StdMutex::default(),
    });
    let mut rng = Rng::new(s.seed ^ 0x5eed);
    let told: Arc<StdMutex<Vec<u64>>> = Arc::default();
    let mut live = Vec::new();
    let mut freezer = None;
    for c in 0..s.clients {
        let faulty = Faulty::new(server.clone());
        add_faults(&faulty, &mut rng);
        let heartbeat = ms(150 + rng.below(600));
        let client = LockClient::builder()
            .label(&format!("c{c}"))
            .heartbeat(heartbeat)
            .retry_interval(ms(50 + rng.below(400)))
            .outage_budget(secs(5))
            .store(faulty.clone())
            .map_err(|e| e.to_string())?;
        for _ in 0..1 + rng.below(3) {
            let handle = tokio::spawn(task(
                client.clone(),
                s.rate,
                Rng::new(rng.below(u64::MAX)),
                told.clone(),
            ));
            match s.freeze {
                Some((frozen, _)) if frozen == c => drop(handle),
                _ => live.push(handle),
            }
        }
        if let Some((_, at)) = s.freeze.filter(|(f, _)| *f == c) {
            freezer = Some(tokio::spawn(async move {
                tokio::time::sleep(ms(at)).await;
                faulty.freeze().await;
                let _keep = client;
            }));
        }
    }
    let all = async {
        for handle in live {
            handle.await.map_err(|e| format!("a task failed: {e}"))?;
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout(STUCK_AFTER, all).await {
        Ok(outcome) => outcome?,
        Err(_) => return Err(format!("Stuck: waits still running after {STUCK_AFTER:?}")),
    }
    drop(freezer);
    let log = server.log.lock().unwrap().clone();
    let told = told.lock().unwrap().clone();
    check(s, &log, &told)
}

/// The oracle over the server's log.
fn check(s: &Schedule, log: &[Decision], told: &[u64]) -> std::result::Result<(), String> {
    for replay in log.iter().filter(|d| d.admitted && d.replay) {
        let first = log.iter().find(|d| d.admitted && d.token == replay.token);
        if first.is_none_or(|f| f.at != replay.at) {
            return Err(format!(
                "Replay: {replay:?} is not the token's admission {first:?}"
            ));
        }
        REPLAYED.fetch_add(1, Ordering::Relaxed);
    }
    let admitted: Vec<&Decision> = log.iter().filter(|d| d.admitted && !d.replay).collect();
    ADMITTED.fetch_add(admitted.len() as u64, Ordering::Relaxed);
    let queued = log.iter().filter(|d| d.wait && !d.admitted).count();
    QUEUED.fetch_add(queued as u64, Ordering::Relaxed);
    for d in &admitted {
        if d.waiting.first().is_some_and(|head| *head != d.token) {
            return Err(format!("Fifo: {d:?} admitted past the head"));
        }
    }
    let rate = s.rate;
    for (i, a) in admitted.iter().enumerate() {
        let mut permits = 0;
        for b in &admitted[i..] {
            permits += b.permits;
            let span = b.at - a.at;
            if permits.saturating_sub(rate.burst_size()) * rate.period_ms() > rate.count() * span {
                return Err(format!(
                    "Rate: {permits} permits admitted within {span} ms ({} .. {}) under {rate:?}",
                    a.at, b.at
                ));
            }
        }
    }
    let logged: HashSet<u64> = admitted.iter().map(|d| d.at).collect();
    if let Some(at) = told.iter().find(|at| !logged.contains(at)) {
        return Err(format!(
            "Reported: a client was told of an admission at {at} the server never made"
        ));
    }
    Ok(())
}

fn simulate(seed: u64) -> std::result::Result<(), String> {
    testing::seed(seed);
    let s = schedule(seed);
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(run(&s))
        .map_err(|e| format!("seed {seed} ({s:?}): {e}"))
}

fn cases() -> u64 {
    std::env::var("SIM_CASES")
        .ok()
        .map(|v| v.parse().expect("SIM_CASES is a number"))
        .unwrap_or(300)
}

/// The oracle holds on every schedule; with each limiter bug planted, it fails on some.
#[test]
fn rate_limiter_keeps_the_rate_and_the_order_under_faults() {
    if let Ok(seed) = std::env::var("SIM_SEED") {
        simulate(seed.parse().expect("SIM_SEED is a number")).unwrap();
        return;
    }
    for seed in 0..cases() {
        if let Err(e) = simulate(seed) {
            panic!("{e}");
        }
    }
    for (what, count) in [
        ("admissions", &ADMITTED),
        ("refusals of a waiter", &QUEUED),
        ("refused tries", &TRIES_REFUSED),
        ("timed-out waits", &TIMED_OUT),
        ("cancelled waits", &CANCELLED),
        ("lost replies", &LOST_REPLIES),
        ("admissions replayed to a retry", &REPLAYED),
    ] {
        let n = count.load(Ordering::Relaxed);
        eprintln!("{what}: {n}");
        assert!(n > cases() / 10, "only {n} {what} in {} schedules", cases());
    }
    for (bug, class) in [
        (Bug::RateBurstOffByOne, "Rate:"),
        (Bug::RateOvertakes, "Fifo:"),
    ] {
        plant(bug);
        let found = (0..cases().max(300)).find_map(|seed| simulate(seed).err());
        unplant_all();
        let found = found.unwrap_or_else(|| panic!("{bug:?} planted, and no schedule failed"));
        assert!(
            found.contains(class),
            "{bug:?} planted, found another violation: {found}"
        );
    }
}
