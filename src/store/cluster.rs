//! The connection of a [`RedisStore`](super::RedisStore) on a Redis Cluster: the redis crate's
//! cluster connection, and for the lock engine one of its own (see
//! `docs/decisions/one-owner.md`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

/// How long the engine uses the client's connection after its own could not be made, before
/// it tries again.
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
    connect_timeout: Duration,
    /// The engine's own, made on first use by the engine's runtime; `None` on the client's.
    own: Option<Own>,
}

struct Own {
    conn: tokio::sync::OnceCell<ClusterConnection>,
    /// When the last attempt to make it failed.
    failed_at: Mutex<Option<Instant>>,
}

impl ClusterConn {
    pub(crate) fn new(
        shared: ClusterConnection,
        client: ClusterClient,
        connect_timeout: Duration,
    ) -> Self {
        let made = Making {
            client,
            connect_timeout,
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
        let made = Making {
            client: self.made.client.clone(),
            connect_timeout: self.made.connect_timeout,
            own: Some(Own {
                conn: tokio::sync::OnceCell::new(),
                failed_at: Mutex::new(None),
            }),
        };
        ClusterConn {
            shared: self.shared.clone(),
            made: Arc::new(made),
        }
    }

    /// The connection to send a step on: the engine's own once made. Until then it is made
    /// now (within the connect timeout); if that fails, the client's connection (which knows
    /// the nodes already) serves this step and those of the next [`RETRY_OWN_AFTER`].
    pub(crate) async fn get(&self) -> ClusterConnection {
        let Some(own) = &self.made.own else {
            return self.shared.clone();
        };
        if let Some(conn) = own.conn.get() {
            return conn.clone();
        }
        let failed_at = || own.failed_at.lock().unwrap_or_else(|p| p.into_inner());
        if failed_at().is_some_and(|at| at.elapsed() < RETRY_OWN_AFTER) {
            return self.shared.clone();
        }
        let limit = self.made.connect_timeout;
        let make = own
            .conn
            .get_or_try_init(|| self.made.client.get_async_connection());
        match tokio::time::timeout(limit, make).await {
            Ok(Ok(conn)) => conn.clone(),
            outcome => {
                let err = match outcome {
                    Ok(Err(err)) => err.to_string(),
                    _ => format!("no connection within {limit:?}"),
                };
                tracing::debug!(%err, "the lock engine's cluster connection is not made yet");
                *failed_at() = Some(Instant::now());
                self.shared.clone()
            }
        }
    }
}
