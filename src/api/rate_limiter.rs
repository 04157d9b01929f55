//! [`RateLimiter`]: how many calls may *start* per period across every client, waiters
//! admitted in arrival order. See `docs/decisions/rate-limiter.md` for the algorithm (GCRA on
//! the server's clock) and the key layout.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::api::info::short;
use crate::engine::rate::{decide, RateOutcome, RateWait};
use crate::engine::wait::{Deadline, LockCtx, Waiting};
use crate::store::{Rate, RateClaim};
use crate::vocab::error::{Error, Result};

/// A distributed rate limiter: at most `count` admissions per period (and `burst` at once)
/// across every client of the name, on the Redis server's clock. Cheap to clone.
///
/// Pick it to bound how many calls *start* per second (a partner API's 100 requests a
/// second, an hourly mail quota); pick a [`Semaphore`](crate::Semaphore) to bound how many
/// *run at once*. Waiters ([`acquire`](RateLimiter::acquire)) are admitted in arrival order:
/// a request for `n` at the head of the queue is never overtaken by smaller ones behind it,
/// and [`try_acquire`](RateLimiter::try_acquire) never overtakes anyone waiting.
///
/// Make one with [`LockClient::rate_limiter`](crate::LockClient::rate_limiter). Every handle
/// of a name should use the same [`Rate`]: the state is shared, each decision follows the
/// rate of the handle that asks.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis_locks::Result<()> {
/// use redis_locks::Rate;
/// let client = redis_locks::LockClient::in_memory();
/// let partner_api = client.rate_limiter("partner-api", Rate::per_second(100).burst(10));
/// partner_api.acquire(1).await?;          // waits its turn
/// // ... call the partner API ...
/// match partner_api.try_acquire(1).await {
///     Ok(_) => { /* call it */ }
///     Err(e) if e.is_rate_limited() => println!("later: {:?}", e.retry_after()),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    ctx: LockCtx,
    rate: Rate,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("name", &&*self.ctx.name)
            .field("rate", &self.rate)
            .finish()
    }
}

/// One admission of a [`RateLimiter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admission {
    /// Admissions granted at once.
    pub permits: u64,
    /// The server's clock at the admission, in ms since the Unix epoch.
    pub admitted_at_ms: u64,
}

/// One waiter of a rate limiter, as inspected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateWaiterInfo {
    /// First characters of the waiter's token (see [`TOKEN_PREFIX_LEN`](crate::TOKEN_PREFIX_LEN)).
    pub token_prefix: String,
    /// The waiter's label (its client's [`label`](crate::LockClientBuilder::label)), when its
    /// token carries one.
    pub label: Option<String>,
    /// 0 for the head of the queue.
    pub position: usize,
    /// Admissions it asks for at once.
    pub permits: u64,
    /// Heartbeat window left before the waiter is dropped.
    pub heartbeat_remaining: Duration,
}

/// A rate limiter's state, read in one round trip ([`RateLimiter::inspect`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimiterInfo {
    /// The limiter's name.
    pub name: String,
    /// The rate of the handle that read it.
    pub rate: Rate,
    /// Single admissions that would be granted now, one after the other, if nobody waited
    /// (0 ..= burst).
    pub available: u64,
    /// How long until the next single admission fits (zero: now).
    pub next_in: Duration,
    /// Live waiters in arrival order.
    pub waiters: Vec<RateWaiterInfo>,
}

impl RateLimiter {
    pub(crate) fn new(ctx: LockCtx, rate: Rate) -> Self {
        RateLimiter { ctx, rate }
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.ctx.name
    }

    /// The rate this handle asks for.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// A claim for `permits` with a new token carrying the client's label.
    fn claim(&self, permits: u64) -> RateClaim {
        let mut claim = RateClaim::new(permits, self.rate, self.ctx.opts.heartbeat());
        claim.token.push('-');
        claim.token.push_str(&self.ctx.opts.label);
        claim
    }

    /// One attempt to be admitted for `permits` at once, never queued. Refused (the rate is
    /// used up, or others wait: a try never overtakes them) with [`Error::RateLimited`],
    /// which carries the server's estimate of when the request fits
    /// ([`Error::retry_after`]). `permits` of 0 or beyond the burst is an invalid-argument
    /// error (such a request could never be admitted).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::Rate;
    /// let client = redis_locks::LockClient::in_memory();
    /// let limiter = client.rate_limiter("mail", Rate::per_hour(2));
    /// limiter.try_acquire(2).await?;
    /// let refused = limiter.try_acquire(1).await.unwrap_err();
    /// assert!(refused.is_rate_limited());
    /// assert!(refused.retry_after().unwrap() > std::time::Duration::from_secs(60));
    /// assert!(limiter.try_acquire(3).await.unwrap_err().is_invalid_input());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: a try never leaves a queue place. A dropped attempt may still have been
    /// admitted on the server (the admission then counts against the rate).
    pub async fn try_acquire(&self, permits: u64) -> Result<Admission> {
        self.run(permits, Deadline::Try, None).await
    }

    /// Waits to be admitted for `permits` at once, in arrival order; add
    /// [`.timeout(d)`](RateAcquiring::timeout) to give up after `d`. The server wakes the
    /// head of the queue when it becomes the head and tells it when its request fits; every
    /// attempt is the waiter's heartbeat, and a waiter that stops attempting (its process
    /// died) is dropped after its heartbeat window, holding nobody back longer. A lost Redis
    /// is ridden out within the client's outage budget.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// use redis_locks::Rate;
    /// let client = redis_locks::LockClient::in_memory();
    /// let limiter = client.rate_limiter("exports", Rate::per_second(50).burst(5));
    /// let admission = limiter.acquire(5).timeout(Duration::from_secs(5)).await?;
    /// assert_eq!(admission.permits, 5);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future (or its timeout) gives up the place in the queue at once (in the
    /// background when dropped); nothing is admitted for it afterwards.
    pub fn acquire(&self, permits: u64) -> RateAcquiring<'_> {
        RateAcquiring {
            limiter: self,
            permits,
            timeout: None,
            on_position: None,
        }
    }

    /// The limit, what is available now and the waiters, read in one round trip on the
    /// server's clock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::Rate;
    /// let client = redis_locks::LockClient::in_memory();
    /// let limiter = client.rate_limiter("reports", Rate::per_minute(10));
    /// limiter.try_acquire(4).await?;
    /// let info = limiter.inspect().await?;
    /// assert_eq!(info.available, 6);
    /// assert!(info.waiters.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<RateLimiterInfo> {
        let keys = self.ctx.keys()?;
        let s = self.ctx.store.rate_inspect(keys, &self.rate, None).await?;
        Ok(RateLimiterInfo {
            name: self.ctx.name.to_string(),
            rate: self.rate,
            available: s.available,
            next_in: Duration::from_millis(s.next_in_ms),
            waiters: s
                .waiters
                .into_iter()
                .enumerate()
                .map(|(position, w)| RateWaiterInfo {
                    token_prefix: short(&w.token),
                    label: crate::vocab::token::label_of(&w.token).map(str::to_owned),
                    position,
                    permits: w.permits,
                    heartbeat_remaining: Duration::from_millis(w.heartbeat_left_ms),
                })
                .collect(),
        })
    }

    /// One request, in a `tracing` span `rate_acquire` with the name, the permits and the
    /// outcome.
    async fn run(
        &self,
        permits: u64,
        deadline: Deadline,
        on_position: Option<&mut (dyn FnMut(u64) + Send)>,
    ) -> Result<Admission> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "rate_acquire",
            limiter = self.name(),
            permits,
            outcome = tracing::field::Empty
        );
        let result = self
            .decide(permits, deadline, on_position)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(_) => "admitted",
            Err(e) if e.is_rate_limited() => "refused",
            Err(e) if e.is_timeout() => "timeout",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        result
    }

    async fn decide(
        &self,
        permits: u64,
        deadline: Deadline,
        on_position: Option<&mut (dyn FnMut(u64) + Send)>,
    ) -> Result<Admission> {
        self.ctx.opts.validate()?;
        self.rate.check_request(permits)?;
        let keys = self.ctx.keys()?.clone();
        let claim = self.claim(permits);
        let wait = RateWait::new(
            (self.ctx.store.clone(), self.ctx.holds.clone()),
            keys,
            claim,
            self.ctx.opts.retry_interval,
            on_position,
        );
        let waiting = Waiting {
            hub: self.ctx.store.hub(),
            deadline,
            response_timeout: self.ctx.response_timeout,
            outage_budget: self.ctx.opts.outage_budget,
        };
        match decide(wait, &waiting).await? {
            RateOutcome::Admitted(at) => Ok(Admission {
                permits,
                admitted_at_ms: at,
            }),
            RateOutcome::Refused(retry_after) => Err(Error::RateLimited {
                name: self.name().to_owned(),
                retry_after,
            }),
        }
    }
}

/// A rate-limiter wait ([`RateLimiter::acquire`]): `.await` it, optionally after
/// [`timeout`](RateAcquiring::timeout).
#[must_use = "a wait does nothing until awaited"]
pub struct RateAcquiring<'a> {
    limiter: &'a RateLimiter,
    permits: u64,
    timeout: Option<Duration>,
    on_position: Option<Box<dyn FnMut(u64) + Send + 'a>>,
}

impl<'a> RateAcquiring<'a> {
    /// Waits at most `timeout` (counted from the first poll); then the waiter leaves the
    /// queue and the result is an error whose [`is_timeout`](Error::is_timeout) is true.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use std::time::Duration;
    /// use redis_locks::Rate;
    /// let client = redis_locks::LockClient::in_memory();
    /// let limiter = client.rate_limiter("quota", Rate::per_hour(1));
    /// limiter.acquire(1).await?;
    /// let err = limiter.acquire(1).timeout(Duration::from_millis(20)).await.unwrap_err();
    /// assert!(err.is_timeout());
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls `f` with the number of waiters queued ahead of this one each time a change of it
    /// is observed, as a lock's [`on_position`](crate::Acquiring::on_position) does: `0`
    /// means next in line (admitted as soon as the rate allows), not admitted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// use redis_locks::Rate;
    /// let client = redis_locks::LockClient::in_memory();
    /// let limiter = client.rate_limiter("reports", Rate::per_second(50));
    /// limiter
    ///     .acquire(1)
    ///     .on_position(|ahead| println!("{ahead} ahead"))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn on_position(mut self, f: impl FnMut(u64) + Send + 'a) -> Self {
        self.on_position = Some(Box::new(f));
        self
    }
}

impl fmt::Debug for RateAcquiring<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateAcquiring")
            .field("name", &self.limiter.name())
            .field("permits", &self.permits)
            .field("timeout", &self.timeout)
            .field("on_position", &self.on_position.is_some())
            .finish()
    }
}

impl<'a> IntoFuture for RateAcquiring<'a> {
    type Output = Result<Admission>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Admission>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let deadline = match self.timeout {
                Some(timeout) => Deadline::after(timeout),
                None => Deadline::Never,
            };
            let mut on_position = self.on_position;
            let on_position = on_position
                .as_mut()
                .map(|f| &mut **f as &mut (dyn FnMut(u64) + Send));
            self.limiter.run(self.permits, deadline, on_position).await
        })
    }
}
