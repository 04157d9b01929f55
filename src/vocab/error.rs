//! The one error type of the crate.

use std::time::Duration;

use crate::vocab::capability::Capability;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The underlying cause of a connection error or of a service that is not Redis, kept in the
/// `cause` field of [`Error::Connection`] and [`Error::NotRedis`] (boxed, so this crate's API
/// does not tie you to one version of the Redis client).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when taking, holding or releasing a lock.
///
/// Errors are classified, not string-matched: ask [`Error::is_timeout`],
/// [`Error::is_connection`], [`Error::is_would_block`] or [`Error::is_invalid_input`].
///
/// Each message is whole: it quotes its cause (Redis's reply, the connection failure) once,
/// with what to do. So [`source`](std::error::Error::source) is `None` for every variant
/// (an error reporter that prints the chain prints each cause once); the underlying error
/// of [`Error::Connection`] and [`Error::NotRedis`] is kept in their `cause` field for code
/// that inspects it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// let client = redis_locks::LockClient::in_memory();
/// let err = client.mutex("").try_lock().await.unwrap_err();
/// assert!(err.is_invalid_input());
/// # }
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is empty or too long; nothing was sent to Redis.
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// Why the name was refused.
        reason: String,
    },
    /// An option or argument is out of range; nothing was sent to Redis.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The option or argument at fault (`"lease"`, `"heartbeat"`, `"permits"` ...).
        what: &'static str,
        /// Why it was refused, and what would be accepted.
        reason: String,
    },
    /// A `try_*` attempt found the lock held (or, for a ticket queue, found waiters ahead):
    /// nothing is held and the caller is not queued. Wait with `lock()` (and `.timeout(..)`)
    /// instead if you need the lock. When this client itself holds the lock (another of its
    /// guards: locks are not reentrant), the message says so.
    #[error("{}", would_block_message(name, *by_this_client))]
    WouldBlock {
        /// The lock's name.
        name: String,
        /// Whether this client (one of its live guards) holds the lock; others may hold it
        /// beside it.
        by_this_client: bool,
    },
    /// A rate limiter's `try_acquire` was refused: the rate is used up, or others wait ahead
    /// (a try never overtakes them). Nothing was admitted and the caller is not queued. Retry
    /// after `retry_after` (the server's estimate of when the request fits if everyone ahead
    /// is admitted in turn), or wait in line with `acquire(..)`.
    #[error("rate limiter `{name}` refused the request{}; retry later, or wait in line with acquire()", retry_message(*retry_after))]
    RateLimited {
        /// The limiter's name.
        name: String,
        /// When the request would fit, as the server estimated it.
        retry_after: Option<Duration>,
    },
    /// The wait ran out before the lock was granted; the waiter has left the queue.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// A key of the lock holds a value of another type (or another program's data). The key
    /// was left as it was: delete it, or pick another lock name or key prefix.
    #[error("{}", wrong_type_message(name, key.as_deref(), detail))]
    WrongType {
        /// The lock's name.
        name: String,
        /// The key at fault (such as `rl:{jobs}:w`), when it is known: the first key of the
        /// step whose type is not the one redis-locks keeps there, or the key a script found
        /// a foreign value in.
        key: Option<String>,
        /// What is wrong with it (its type, or what Redis reported).
        detail: String,
    },
    /// Redis could not be asked, or the reply was lost (connection dropped, response timeout,
    /// server restarting, loading its data or busy with a script). The outcome of the command
    /// is unknown; the library has already retried by token where that is safe.
    ///
    /// `Display` names the operation, the server's address and the cause (such as
    /// "Connection refused"), once, with what to check or do. The cause is kept in `cause`
    /// for code that inspects it; it is not repeated as the error's
    /// [`source`](std::error::Error::source).
    #[error("{}", connection_message(operation, address, cause))]
    Connection {
        /// What the library was doing (`"connect"`, `"acquire lock `jobs`"` ...).
        operation: String,
        /// The server's `host:port` (for a Cluster or Sentinel, the address it was reached
        /// through), or empty when the failure happened beside any one server.
        address: String,
        /// What went wrong underneath.
        cause: BoxError,
    },
    /// Redis answered with an error the library does not expect (for instance a command denied
    /// by an ACL rule, or memory full). `Display` quotes Redis's reply, which is the whole
    /// cause (there is no further source), with advice that fits its error code.
    #[error("Redis refused the command: {reply}; {}", redis_advice(reply))]
    Redis {
        /// Redis's error reply, as the server worded it (code first, such as `NOPERM` or
        /// `OOM`).
        reply: String,
    },
    /// The service at the URL answered, but not in the Redis protocol: another program
    /// listens on that host and port. Nothing was sent beyond the handshake (and, to tell an
    /// HTTP service, one line on a connection of its own).
    ///
    /// `Display` says so, and whether the service answered like HTTP (a web server or a
    /// proxy). What the Redis client could not parse is kept in `cause`; it is not repeated
    /// as the error's [`source`](std::error::Error::source) (it quotes raw bytes).
    #[error("the service at {address} is not a Redis server ({}); check the host and port of the URL", not_redis_message(*http))]
    NotRedis {
        /// The address from the URL.
        address: String,
        /// Whether it answered like an HTTP server.
        http: bool,
        /// What the Redis client could not parse.
        cause: BoxError,
    },
    /// Quorum mode: fewer than a majority of the nodes granted the lock in time (or, when
    /// connecting, answered at all).
    #[error("quorum not reached: only {granted} of the {required} servers needed granted the step (or answered, when connecting); check that a majority of the quorum's servers are up and reachable")]
    QuorumNotReached {
        /// Nodes that granted (when connecting: that answered).
        granted: usize,
        /// Nodes needed (a majority).
        required: usize,
    },
    /// `wait_replicas`: fewer replicas than required acknowledged a step in time, so it is not
    /// trusted: a grant was released again (it could be lost in a failover), a resume left the
    /// hold as it was, an `extend` left the guard's trust where it was.
    #[error("only {acked} of the {required} replicas required acknowledged the step in time, so it is not trusted: a grant is released again, a resume or an extend leaves the guard's trust as it was (see `Lock::wait_replicas`)")]
    ReplicasNotReached {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas required.
        required: u32,
    },
    /// The backend cannot offer this primitive (e.g. a FairLock over quorum mode, where queues
    /// on independent masters can disagree on the order).
    #[error("{what} is not supported by this backend: {reason}")]
    Unsupported {
        /// The refused primitive or operation.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// The lock name is held right now through the other family of primitives, which keeps
    /// its own state: the lease lock (a [`Mutex`](crate::Mutex), an
    /// [`RwLock`](crate::RwLock) with `Writer` or `Reader` preference) versus the ticket
    /// queue (a [`FairLock`](crate::FairLock), a [`Semaphore`](crate::Semaphore), an
    /// `RwLock` with `Fair` preference). Rather than grant both, the library refuses; the
    /// caller's queue place, if any, was removed. Use one family per lock name.
    #[error("lock `{name}` is held through {held_by}, which keeps separate state; use one family per lock name (Mutex and RwLock with Writer/Reader preference, or FairLock, Semaphore and Fair RwLock), e.g. give this one another name")]
    FamilyConflict {
        /// The lock's name.
        name: String,
        /// The primitives holding it.
        held_by: &'static str,
    },
    /// The ticket queue of this name is in use with another permit count: a
    /// [`FairLock`](crate::FairLock) (one permit), an [`RwLock`](crate::RwLock) with `Fair`
    /// preference, and [`Semaphore`](crate::Semaphore)s of different sizes share the queue's
    /// state, so they must agree on its capacity. Nothing was granted and the caller's queue
    /// place, if any, was removed. Use one kind and one permit count per name (or
    /// `Semaphore::set_permits` to change a semaphore's count for everyone).
    #[error("lock `{name}` is in use with another capacity ({detail}); use one kind of ticket-queue lock and one permit count per name, e.g. give this one another name")]
    CapacityConflict {
        /// The lock's name.
        name: String,
        /// The capacity in use and the one asked for.
        detail: String,
    },
    /// The server lacks something the library's scripts need (`missing`): it is too old
    /// (Redis 7.0 or later, or Valkey 7.2 or later, is needed), or a probe at connect found
    /// no Lua scripting, no real clock in scripts, no `PEXPIRE` `GT`/`NX`, or no RESP3.
    /// Nothing was written; the text says what to do.
    #[error("{} cannot serve redis-locks: it lacks {missing}{}; {}", server_name(server, version), seen_message(seen), missing.advice())]
    UnsupportedServer {
        /// What the server calls itself (`redis`, `valkey` ...; empty if it did not say).
        server: String,
        /// Its version (empty if it did not say).
        version: String,
        /// What it lacks.
        missing: Capability,
        /// What the probe saw instead (the server's error reply, or its clock), empty when
        /// the version alone decided.
        seen: String,
    },
    /// The server may evict lock keys under memory pressure (`maxmemory` set with an evicting
    /// `maxmemory-policy`), and the client was built with
    /// [`refuse_evicting_servers(true)`](crate::LockClientBuilder::refuse_evicting_servers).
    /// Nothing was written.
    #[error("refusing the Redis server at {address}: {detail}; set maxmemory-policy noeviction (or maxmemory 0), or keep locks on a server of their own")]
    EvictingServer {
        /// The server (`host:port`).
        address: String,
        /// Its `maxmemory` and `maxmemory-policy`, and why they matter.
        detail: String,
    },
    /// The hold a [`HoldId`](crate::HoldId) names is gone (its lease lapsed, it was
    /// released, downgraded or evicted): resuming, releasing or extending it granted nothing.
    #[error("the hold on lock `{name}` named by this hold id is gone (its lease lapsed, it was released, downgraded or evicted); nothing was granted: acquire the lock again")]
    HoldGone {
        /// The lock's name.
        name: String,
    },
    /// This client already has a guard of the hold a [`HoldId`](crate::HoldId) names (live,
    /// lost but not yet dropped, or releasing), or a resume of it is under way: a client keeps
    /// at most one guard per hold. Nothing was sent.
    #[error("this client already has a guard of the hold on lock `{name}` (or is resuming it): use that guard, or release, detach or drop it (and let its release finish) before resuming the id again; nothing was sent")]
    HoldInUse {
        /// The lock's name.
        name: String,
    },
    /// A [`HoldId`](crate::HoldId) of another kind of hold than the handle makes (a
    /// FairLock's id given to a Mutex, a read hold's to `resume_write`); nothing was sent.
    #[error("the hold id on lock `{name}` is for a {found} hold, not a {expected} hold; resume it with a handle of its own kind")]
    HoldKindMismatch {
        /// The lock's name.
        name: String,
        /// What the handle resumes.
        expected: String,
        /// What the id names.
        found: String,
    },
    /// A [`HoldId`](crate::HoldId) of another lock name than the handle's; nothing was sent.
    #[error("the hold id is for lock `{found}`, not `{expected}`; resume it with a handle of that name (or through the client)")]
    HoldNameMismatch {
        /// The handle's lock name.
        expected: String,
        /// The id's lock name.
        found: String,
    },
    /// A text that is not a hold id as `HoldId`'s `Display` writes it. The text is not
    /// repeated here (it may carry a token).
    #[error("malformed hold id: {reason}")]
    MalformedHoldId {
        /// What is wrong with it.
        reason: String,
    },
    /// The lease was lost while work ran under it (see `with_lock` helpers).
    #[error("the lease on lock `{name}` was lost before the work finished")]
    LeaseLost {
        /// The lock's name.
        name: String,
    },
}

/// `Debug` reads like `Display` (followed by the chain of sources, one per line, should a
/// variant ever have one): this is what `fn main() -> redis_locks::Result<()>` prints when it
/// returns an error. Match on the variants (they are public) for the fields.
///
/// ```
/// use std::error::Error as _;
/// let err = redis_locks::Error::WouldBlock { name: "jobs".into(), by_this_client: false };
/// assert_eq!(format!("{err:?}"), err.to_string());
/// assert!(err.source().is_none());
/// ```
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        if source.is_some() {
            write!(f, "\n\nCaused by:")?;
        }
        while let Some(cause) = source {
            write!(f, "\n    {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// The text of [`Error::WouldBlock`].
fn would_block_message(name: &str, by_this_client: bool) -> String {
    if by_this_client {
        format!(
            "lock `{name}` is held by this client (another guard of yours; locks are not \
             reentrant), and a try_* attempt never waits: use the guard you hold, or release it \
             first"
        )
    } else {
        format!("lock `{name}` is held by someone else (a try_* attempt never waits)")
    }
}

/// What [`Error::NotRedis`] says the service answered.
fn not_redis_message(http: bool) -> &'static str {
    if http {
        "it answered like HTTP: a web server or proxy listens there"
    } else {
        "it did not answer in the Redis protocol"
    }
}

/// The text of [`Error::WrongType`]: the key when known, what is wrong, what to do.
fn wrong_type_message(name: &str, key: Option<&str>, detail: &str) -> String {
    match key {
        Some(key) => format!(
            "the key `{key}` of lock `{name}` holds foreign data, left untouched ({detail}); \
             delete that key (`DEL {key}`) if nothing else uses it, or use another lock name \
             or key prefix"
        ),
        None => format!(
            "a key of lock `{name}` holds foreign data, left untouched ({detail}); delete it \
             or use another lock name or key prefix (`redis-locks list --state` names it)"
        ),
    }
}

/// The text of [`Error::Connection`]: the operation, the address and the cause, with advice
/// that fits the cause.
fn connection_message(operation: &str, address: &str, cause: &BoxError) -> String {
    let at = if address.is_empty() {
        "Redis".to_owned()
    } else {
        format!("Redis at {address}")
    };
    let text = full_text(cause.as_ref());
    let code = text.split([' ', ':']).next().unwrap_or("");
    let what = match code {
        "LOADING" | "BUSY" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" => {
            "is not serving commands right now"
        }
        _ => "could not be reached or its reply was lost",
    };
    let advice = match code {
        "LOADING" => {
            "the server is loading its data set after a restart: retry once it has \
                      loaded (a wait rides this out within its outage budget)"
        }
        "BUSY" => {
            "the server is busy running a script or function: retry later, or stop it \
                   with SCRIPT KILL / FUNCTION KILL"
        }
        "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" => {
            "the server or cluster is failing over or resharding: retry in a moment"
        }
        _ => {
            "the library retried where safe; check that the server is running and reachable \
              at that address (host, port, firewall, TLS)"
        }
    };
    format!("{operation}: {at} {what} ({text}); {advice}")
}

/// `err`'s text followed by each source whose text it does not already contain.
fn full_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// Advice for an [`Error::Redis`] reply, by its error code.
fn redis_advice(reply: &str) -> &'static str {
    let code = reply.split([' ', ':']).next().unwrap_or("");
    if reply.contains("DB index is out of range") {
        return "the database number in the URL (`/db`) is beyond the server's `databases` \
                setting (16 by default, so 0 to 15): use a lower one or raise `databases`";
    }
    match code {
        "NOPERM" => {
            "the Redis user lacks an ACL right for this command, key or channel: grant \
                     the rules in the README's \"Least privilege\" section"
        }
        "NOAUTH" => {
            "the server needs a user and password and none was given: put them in the URL \
             (redis://user:password@host:port)"
        }
        "WRONGPASS" => {
            "the user or password in the URL is not accepted (a typo, a changed password or a \
             disabled user): check them against the server's `requirepass` or its ACL users \
             (`ACL LIST`)"
        }
        "OOM" => {
            "the server has reached `maxmemory` and evicts nothing it may write here: free \
                  memory, raise `maxmemory`, or choose an eviction policy"
        }
        "READONLY" => {
            "the server is a read-only replica: connect to the primary (or use \
                       Sentinel mode, which follows it)"
        }
        "NOSCRIPT" | "NOREPLICAS" | "MISCONF" => "see the server's log for the cause",
        _ => "see the server's log; the reply's first word is Redis's error code",
    }
}

/// An error reply that means "not now" (`LOADING`, `BUSY` ...), as the server worded it: its
/// code, then its message.
#[derive(Debug)]
pub(crate) struct NotNow {
    pub(crate) code: String,
    pub(crate) detail: String,
}

impl std::fmt::Display for NotNow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.detail)
    }
}

impl std::error::Error for NotNow {}

/// A Redis client error kept as a source. The redis crate's own error prints its cause's text
/// in `Display` *and* returns that cause from `source()`, so an error reporter would print it
/// twice; this wrapper skips the repeated layer, so each cause is printed once.
#[derive(Debug)]
pub(crate) struct Cause(pub(crate) redis::RedisError);

impl Cause {
    pub(crate) fn boxed(err: redis::RedisError) -> BoxError {
        Box::new(Cause(err))
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let inner = std::error::Error::source(&self.0)?;
        if inner.to_string() == self.0.to_string() {
            inner.source()
        } else {
            Some(inner)
        }
    }
}

/// What [`Error::FamilyConflict`] names when the lease lock holds the name.
pub(crate) const LEASE_FAMILY: &str = "a Mutex or an RwLock with Writer or Reader preference";
/// What [`Error::FamilyConflict`] names when the ticket queue holds the name.
pub(crate) const QUEUE_FAMILY: &str = "a FairLock, a Semaphore or an RwLock with Fair preference";

/// The server [`Error::UnsupportedServer`] names: as it called itself, else "the server".
fn server_name(server: &str, version: &str) -> String {
    match format!("{server} {version}").trim() {
        "" => "the server".to_owned(),
        name => name.to_owned(),
    }
}

/// What [`Error::UnsupportedServer`]'s probe saw, if anything.
fn seen_message(seen: &str) -> String {
    if seen.is_empty() {
        String::new()
    } else {
        format!(" (the probe saw: {seen})")
    }
}

/// The retry hint of [`Error::RateLimited`].
fn retry_message(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (it fits in about {d:?})"),
        None => String::new(),
    }
}

impl Error {
    /// True when a rate limiter's `try_acquire` was refused ([`Error::RateLimited`]).
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Error::RateLimited { .. })
    }

    /// How long until a refused rate-limited request would fit, as the server estimated it
    /// ([`Error::RateLimited`]); `None` for every other error.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// True when a `try_*` attempt found the lock held ([`Error::WouldBlock`]).
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock { .. })
    }

    /// True when a wait with a `.timeout(..)` ran out of time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// True when Redis could not be reached or the reply was lost: the outcome is unknown.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection { .. })
    }

    /// True when the caller's input was refused before anything was sent to Redis.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. }
                | Error::InvalidArgument { .. }
                | Error::MalformedHoldId { .. }
                | Error::HoldKindMismatch { .. }
                | Error::HoldNameMismatch { .. }
        )
    }

    /// True when the hold a [`HoldId`](crate::HoldId) names is gone ([`Error::HoldGone`]):
    /// its lease lapsed, or it was released, downgraded or evicted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("job").lock().await?;
    /// let id = guard.hold_id();
    /// guard.release().await?;
    /// assert!(client.mutex("job").resume(&id).await.unwrap_err().is_hold_gone());
    /// # Ok(()) }
    /// ```
    pub fn is_hold_gone(&self) -> bool {
        matches!(self, Error::HoldGone { .. })
    }

    /// True when this client already has a guard of the hold a
    /// [`HoldId`](crate::HoldId) names, or is resuming it ([`Error::HoldInUse`]): use that
    /// guard, or give it up first. Nothing was sent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.mutex("job").lock().await?;
    /// let id = guard.hold_id();
    /// assert!(client.mutex("job").resume(&id).await.unwrap_err().is_hold_in_use());
    /// let id = guard.detach();
    /// assert!(client.mutex("job").resume(&id).await?.release().await?);
    /// # Ok(()) }
    /// ```
    pub fn is_hold_in_use(&self) -> bool {
        matches!(self, Error::HoldInUse { .. })
    }

    /// True when the name is held through the other family of primitives
    /// ([`Error::FamilyConflict`]).
    pub fn is_family_conflict(&self) -> bool {
        matches!(self, Error::FamilyConflict { .. })
    }

    /// True when the name's ticket queue is in use with another capacity
    /// ([`Error::CapacityConflict`]).
    pub fn is_capacity_conflict(&self) -> bool {
        matches!(self, Error::CapacityConflict { .. })
    }

    /// True when a key of the lock holds data the library did not write.
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// A request for more permits than the semaphore has on the server (`detail` says how
    /// many of how many).
    pub(crate) fn too_many_permits(detail: &str) -> Self {
        Error::invalid(
            "permits",
            format!(
                "{detail}; a request may take at most the semaphore's permit count (the last \
                 `set_permits` of any client, else the handle's count)"
            ),
        )
    }

    /// An [`Error::Connection`] while doing `operation` on the server at `address` (empty when
    /// unknown).
    pub(crate) fn connection(
        operation: impl Into<String>,
        address: impl Into<String>,
        cause: impl Into<BoxError>,
    ) -> Self {
        Error::Connection {
            operation: operation.into(),
            address: address.into(),
            cause: cause.into(),
        }
    }

    /// This error with `address` as its server's address, if it is a connection error that
    /// names none yet.
    pub(crate) fn at(mut self, at: &str) -> Self {
        if let Error::Connection { address, .. } = &mut self
            && address.is_empty()
        {
            *address = at.to_owned();
        }
        self
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// Whether retrying the same request (same token) may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        // A quorum not reached is mostly servers not answering: retry like a lost reply.
        self.is_connection() || matches!(self, Error::QuorumNotReached { .. })
    }
}
