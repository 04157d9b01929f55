//! Pool leader: one member of a worker pool schedules jobs, the others stand by; when the
//! leader dies, a standby takes over within the leader's lease.
//!
//! Three members run, each on a runtime of its own thread with its own client (its own
//! connection on Redis), as separate processes would. Every member works: it claims jobs from
//! one FIFO list in strict turn under a FairLock. Every member also campaigns in the election
//! `pool_leader:scheduler`; the one that leads pushes a job every 20 ms, tagged with its term.
//! The main task watches the election (`observe`), lets the first leader schedule a few jobs,
//! then kills it: its runtime is shut down, so it neither resigns nor renews, and its
//! connection closes, as when a process is killed. A standby wins the election once the dead
//! leader's lease (1 s) has run out and goes on scheduling under a higher term.
//!
//! The example checks its own outcome and exits non-zero if it does not hold: the takeover
//! happened, the new term is higher, no job was scheduled under an older term after a newer
//! one, and no job was claimed twice.
//!
//! With `REDIS_URL` set the jobs list and the locks live in that server; otherwise in memory.
//!
//! ```sh
//! cargo run --example pool_leader
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example pool_leader
//! ```

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis_locks::{LeaderEvent, LockClient};
use tokio::time::Instant;

const MEMBERS: usize = 3;
const LEASE: Duration = Duration::from_secs(1);
const ELECTION: &str = "pool_leader:scheduler";
const CLAIMS: &str = "pool_leader:claims";
const JOB_LIST: &str = "pool_leader:jobs";
/// Jobs the first leader schedules before it is killed, and its successor after.
const JOBS_PER_TERM: usize = 10;
const GIVE_UP: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the pool keeps its state: a Redis server, or a store and lists in this process.
#[derive(Clone)]
enum Backend {
    Redis(String),
    /// One in-memory client shared by the members: a hold is renewed on the runtime that
    /// took it, so shutting a member's runtime down still stops its renewals.
    Memory {
        client: LockClient,
        jobs: Arc<StdMutex<VecDeque<String>>>,
    },
}

/// One member's view of the backend: its own client and job list connection.
struct Pool {
    client: LockClient,
    jobs: Jobs,
}

#[derive(Clone)]
enum Jobs {
    Redis(redis::aio::MultiplexedConnection),
    Memory(Arc<StdMutex<VecDeque<String>>>),
}

impl Backend {
    async fn connect(&self) -> Result<Pool, BoxError> {
        Ok(match self {
            Backend::Redis(url) => Pool {
                client: LockClient::connect(url).await?,
                jobs: Jobs::Redis(
                    redis::Client::open(url.as_str())?
                        .get_multiplexed_async_connection()
                        .await?,
                ),
            },
            Backend::Memory { client, jobs } => Pool {
                client: client.clone(),
                jobs: Jobs::Memory(jobs.clone()),
            },
        })
    }
}

impl Jobs {
    async fn push(&mut self, job: &str) -> Result<(), BoxError> {
        match self {
            Jobs::Redis(con) => {
                redis::cmd("LPUSH")
                    .arg(JOB_LIST)
                    .arg(job)
                    .query_async::<()>(con)
                    .await?
            }
            Jobs::Memory(list) => list
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(job.to_owned()),
        }
        Ok(())
    }

    async fn pop(&mut self) -> Result<Option<String>, BoxError> {
        Ok(match self {
            Jobs::Redis(con) => {
                redis::cmd("RPOP")
                    .arg(JOB_LIST)
                    .query_async::<Option<String>>(con)
                    .await?
            }
            Jobs::Memory(list) => list.lock().unwrap_or_else(|p| p.into_inner()).pop_front(),
        })
    }

    async fn clear(&mut self) -> Result<(), BoxError> {
        match self {
            Jobs::Redis(con) => {
                redis::cmd("DEL")
                    .arg(JOB_LIST)
                    .query_async::<()>(con)
                    .await?
            }
            Jobs::Memory(list) => list.lock().unwrap_or_else(|p| p.into_inner()).clear(),
        }
        Ok(())
    }
}

/// What the members report to the main task.
#[derive(Default)]
struct Report {
    /// Jobs in the order they were scheduled: (term, job).
    scheduled: Vec<(u64, String)>,
    /// Jobs as they were claimed.
    claimed: Vec<String>,
}

type Shared = Arc<StdMutex<Report>>;

fn report(shared: &Shared) -> std::sync::MutexGuard<'_, Report> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The leader's part: while it leads, a job every 20 ms under its term.
async fn campaign(id: usize, pool: &Pool, shared: Shared) -> Result<(), BoxError> {
    let election = pool.client.election(ELECTION).lease(LEASE);
    let mut jobs = pool.jobs.clone();
    loop {
        let leadership = election.campaign(format!("member-{id}")).await?;
        let term = leadership.term();
        println!("member-{id}: leading, term {term}");
        let mut seq = 0;
        loop {
            tokio::select! {
                _ = leadership.lost() => break,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            let job = format!("term{term}-job{seq}");
            // The term goes with the job: a consumer can refuse jobs of an older term.
            jobs.push(&job).await?;
            report(&shared).scheduled.push((term, job));
            seq += 1;
        }
        println!("member-{id}: lost the leadership of term {term}");
    }
}

/// Every member's part: claim the next job in turn with the others.
async fn work(pool: &Pool, shared: Shared) -> Result<(), BoxError> {
    let claims = pool.client.fair_lock(CLAIMS).lease(LEASE);
    let mut jobs = pool.jobs.clone();
    loop {
        let guard = claims.lock().await?;
        let job = jobs.pop().await?;
        guard.release().await?;
        match job {
            Some(job) => report(&shared).claimed.push(job),
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// A member on a runtime of its own thread; sending on (or dropping) `kill` shuts that
/// runtime down, which stops the member as a killed process stops.
struct Member {
    kill: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

fn start_member(id: usize, backend: Backend, shared: Shared) -> Member {
    let (kill, killed) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return eprintln!("member-{id}: no runtime: {e}"),
        };
        runtime.spawn(async move {
            let pool = match backend.connect().await {
                Ok(pool) => pool,
                Err(e) => return eprintln!("member-{id}: {e}"),
            };
            let outcome = tokio::try_join!(
                campaign(id, &pool, shared.clone()),
                work(&pool, shared.clone())
            );
            if let Err(e) = outcome {
                eprintln!("member-{id}: {e}");
            }
        });
        let _ = killed.recv();
        runtime.shutdown_background();
    });
    Member { kill, thread }
}

impl Member {
    fn kill(self) {
        let _ = self.kill.send(());
        let _ = self.thread.join();
    }
}

/// Waits until `done` holds, checking every 10 ms; an error after [`GIVE_UP`].
async fn until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), BoxError> {
    let give_up = Instant::now() + GIVE_UP;
    while !done() {
        if Instant::now() > give_up {
            return Err(format!("not within {GIVE_UP:?}: {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let backend = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("backend: Redis at {url}");
            Backend::Redis(url)
        }
        Err(_) => {
            println!("backend: in-memory (set REDIS_URL to use a Redis server)");
            Backend::Memory {
                client: LockClient::in_memory(),
                jobs: Arc::default(),
            }
        }
    };
    let main = backend.connect().await?;
    main.jobs.clone().clear().await?;
    let election = main.client.election(ELECTION);
    let mut observer = election.observe();
    let shared: Shared = Arc::default();

    // Member 0 starts first and leads; the others queue behind it as standbys.
    let mut members: Vec<Option<Member>> =
        vec![Some(start_member(0, backend.clone(), shared.clone()))];
    let first = loop {
        match observer.next().await.ok_or("the observer stopped")? {
            LeaderEvent::Leader(leader) => break leader,
            LeaderEvent::NobodyLeads => continue,
        }
    };
    println!("observer: {} leads, term {}", first.value, first.term);
    for id in 1..MEMBERS {
        members.push(Some(start_member(id, backend.clone(), shared.clone())));
    }
    until("the first leader schedules its jobs", || {
        report(&shared).scheduled.len() >= JOBS_PER_TERM
    })
    .await?;

    // Kill the leader: no resign, no renewal, its connection closed.
    let leader_id: usize = first.value.trim_start_matches("member-").parse()?;
    let killed_at = Instant::now();
    members[leader_id].take().ok_or("the leader runs")?.kill();
    println!(
        "main: killed {} (lease {} ms)",
        first.value,
        LEASE.as_millis()
    );
    let next = tokio::time::timeout(GIVE_UP, async {
        loop {
            match observer.next().await {
                Some(LeaderEvent::Leader(leader)) if leader.term != first.term => {
                    return Some(leader)
                }
                Some(_) => continue,
                None => return None,
            }
        }
    })
    .await?
    .ok_or("the observer stopped")?;
    println!(
        "observer: {} took over after {} ms, term {}",
        next.value,
        killed_at.elapsed().as_millis(),
        next.term
    );
    let before = report(&shared).scheduled.len();
    until("the new leader schedules its jobs", || {
        report(&shared).scheduled.len() >= before + JOBS_PER_TERM
    })
    .await?;
    until("the pool claims every job", || {
        let r = report(&shared);
        r.claimed.len() >= before + JOBS_PER_TERM
    })
    .await?;
    for member in members.into_iter().flatten() {
        member.kill();
    }

    let r = report(&shared);
    let mut failures = Vec::new();
    if next.term <= first.term || next.value == first.value {
        failures.push(format!("no takeover: {first:?} then {next:?}"));
    }
    if r.scheduled.windows(2).any(|w| w[1].0 < w[0].0) {
        failures.push("a job was scheduled under an older term after a newer one".to_owned());
    }
    let mut seen = HashSet::new();
    if let Some(twice) = r.claimed.iter().find(|job| !seen.insert(*job)) {
        failures.push(format!("{twice} was claimed twice"));
    }
    let terms: std::collections::BTreeSet<u64> = r.scheduled.iter().map(|(t, _)| *t).collect();
    println!(
        "scheduled {} jobs under terms {:?}, claimed {}",
        r.scheduled.len(),
        terms,
        r.claimed.len()
    );
    if failures.is_empty() {
        println!("pool ok: one scheduler at a time, taken over after the leader died");
        Ok(())
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        std::process::exit(1);
    }
}
