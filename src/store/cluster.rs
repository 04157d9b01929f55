//! The connection of a [`RedisStore`](super::RedisStore) on a Redis Cluster: the redis crate's
//! cluster connection, and for the lock engine one of its own (see
//! `docs/decisions/one-owner.md`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::RoutingInfo;

use super::redis::RedisConfig;

/// After an attempt to make the engine's own connection failed, the next one starts no
/// sooner than this.
const RETRY_OWN_AFTER: Duration = Duration::from_secs(5);

/// A cluster store's connection: the client's, and on the engine's copy its own.
#[derive(Clone)]
pub(crate) struct ClusterConn {
    /// The client's connection (made before the store was returned).
    shared: ClusterConnection,
    made: Arc<Making>,
}

/// How the client's connection was made, and on the engine's copy its own.
struct Making {
    client: ClusterClient,
    config: RedisConfig,
    /// The engine's own; `None` on the client's.
    own: Option<Arc<Own>>,
}

/// The engine's own connection, made in a task of the engine's runtime, never by a step: a
/// step cut off by its deadline cannot leave an attempt half made.
struct Own {
    conn: OnceLock<(ClusterConnection, Instant)>,
    attempts: Mutex<Attempts>,
    /// Notified when an attempt ends.
    ended: tokio::sync::Notify,
}

#[derive(Default)]
struct Attempts {
    /// When the first attempt started.
    first: Option<Instant>,
    /// Whether an attempt is under way.
    under_way: bool,
    /// When the last attempt ended (without a connection).
    failed_at: Option<Instant>,
}

impl ClusterConn {
    pub(crate) fn new(
        shared: ClusterConnection,
        client: ClusterClient,
        config: RedisConfig,
    ) -> Self {
        let made = Making {
            client,
            config,
            own: None,
        };
        ClusterConn {
            shared,
            made: Arc::new(made),
        }
    }

    /// A copy for the lock engine, whose own connection is made through the start-up nodes by
    /// the runtime that uses it first, so it does not depend on the caller's runtime.
    pub(crate) fn engine_copy(&self) -> Self {
        let own = Own {
            conn: OnceLock::new(),
            attempts: Mutex::new(Attempts::default()),
            ended: tokio::sync::Notify::new(),
        };
        let made = Making {
            client: self.made.client.clone(),
            config: self.made.config.clone(),
            own: Some(Arc::new(own)),
        };
        ClusterConn {
            shared: self.shared.clone(),
            made: Arc::new(made),
        }
    }

    /// The connection to send a step on: the engine's own once it is made; until then the
    /// client's, which knows the nodes already. A task makes the own one (one attempt at a
    /// time, bounded by the connect timeout, again [`RETRY_OWN_AFTER`] after a failed one).
    /// The engine starts the first as it starts, and a step sent while that one is under way
    /// waits for it until a quarter of the response timeout after it started: the client's
    /// connection may be driven by a runtime that is blocked (a current-thread runtime
    /// dropping the client's last handle). No later step waits.
    pub(crate) async fn get(&self) -> ClusterConnection {
        let Some(own) = &self.made.own else {
            return self.shared.clone();
        };
        let ended = own.ended.notified();
        if let Some((conn, _)) = own.conn.get() {
            return conn.clone();
        }
        if let Some(first) = self.start_own(own) {
            let patience = self.made.config.response_timeout / 4;
            let until = tokio::time::Instant::from_std(first + patience);
            let _ = tokio::time::timeout_at(until, ended).await;
            if let Some((conn, _)) = own.conn.get() {
                return conn.clone();
            }
        }
        self.shared.clone()
    }

    /// Starts an attempt to make the engine's own connection unless one is under way or the
    /// last failed less than [`RETRY_OWN_AFTER`] ago. Returns when the first attempt started
    /// if it is the one under way.
    fn start_own(&self, own: &Arc<Own>) -> Option<Instant> {
        let mut attempts = own.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let first_under_way =
            |a: &Attempts| a.first.filter(|_| a.under_way && a.failed_at.is_none());
        if attempts.under_way
            || attempts
                .failed_at
                .is_some_and(|at| at.elapsed() < RETRY_OWN_AFTER)
        {
            return first_under_way(&attempts);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return None;
        };
        attempts.under_way = true;
        attempts.first.get_or_insert_with(Instant::now);
        let (own, client) = (own.clone(), self.made.client.clone());
        let limit = self.made.config.connect_timeout;
        runtime.spawn(async move {
            let made = tokio::time::timeout(limit, client.get_async_connection()).await;
            let failed = match made {
                Ok(Ok(conn)) => {
                    let _ = own.conn.set((conn, Instant::now()));
                    false
                }
                Ok(Err(err)) => {
                    tracing::debug!(%err, "the lock engine's cluster connection is not made yet");
                    true
                }
                Err(_) => {
                    tracing::debug!(
                        ?limit,
                        "the lock engine's cluster connection is not made yet"
                    );
                    true
                }
            };
            {
                let mut attempts = own.attempts.lock().unwrap_or_else(|p| p.into_inner());
                attempts.under_way = false;
                if failed {
                    attempts.failed_at = Some(Instant::now());
                }
            }
            own.ended.notify_waiters();
        });
        first_under_way(&attempts)
    }

    /// Starts making the engine's own connection (on the engine's runtime, as it starts).
    pub(crate) fn engine_started(&self) {
        if let Some(own) = &self.made.own {
            self.start_own(own);
        }
    }

    /// `WAIT` (`cmd`, routed to the lock's master) on the connection the lock's last writes
    /// went on: `WAIT` counts the writes of the connection it is sent on. Shortly after the
    /// engine's own connection took over (within what a step that wrote on the client's may
    /// still take), it is sent on both, and the lower count is the answer.
    pub(crate) async fn wait(
        &self,
        cmd: &redis::Cmd,
        route: RoutingInfo,
    ) -> redis::RedisResult<i64> {
        let own = self.made.own.as_ref().and_then(|own| own.conn.get());
        let took_over_lately = own.is_some_and(|(_, at)| {
            at.elapsed() < self.made.config.response_timeout * 4 + Duration::from_secs(1)
        });
        let mut conns = Vec::with_capacity(2);
        match own {
            Some((conn, _)) => {
                conns.push(conn.clone());
                if took_over_lately {
                    conns.push(self.shared.clone());
                }
            }
            None => conns.push(self.shared.clone()),
        }
        let mut least = i64::MAX;
        for mut conn in conns {
            let acked: i64 = conn
                .route_command(cmd.clone(), route.clone())
                .await
                .and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))?;
            least = least.min(acked);
        }
        Ok(least)
    }
}
