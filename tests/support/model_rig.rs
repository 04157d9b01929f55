//! The rig of the model checks that drive one real redis-server from a current-thread runtime
//! (`tests/model_election.rs`, `tests/model_rate.rs`): the server, the runtime and the
//! `RedisStore` on it, and a program run on an emptied server.

use std::future::Future;

use redis_locks::testing::store::RedisStore;

use super::RedisServer;

/// One redis-server and a runtime to drive it.
pub struct ModelRig {
    _server: RedisServer,
    pub runtime: tokio::runtime::Runtime,
    pub redis: RedisStore,
}

impl ModelRig {
    pub fn start() -> ModelRig {
        let server = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let redis = runtime
            .block_on(RedisStore::connect(&server.url()))
            .expect("connect");
        ModelRig {
            _server: server,
            runtime,
            redis,
        }
    }

    /// Runs `program` on the rig's runtime once the server is empty (`FLUSHALL`).
    pub fn on_empty_server<T>(
        &self,
        program: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        self.runtime.block_on(async {
            let _: redis::Value = self
                .redis
                .query(&redis::cmd("FLUSHALL"))
                .await
                .map_err(|e| format!("FLUSHALL: {e}"))?;
            program.await
        })
    }
}

/// The programs a model check runs: `MODEL_CASES`, `default` when it is unset.
pub fn cases(default: u32) -> u32 {
    crate::env_u32("MODEL_CASES", default)
}

/// Whether this run checks coverage (every outcome reached): at the default number of
/// programs or more. A run with fewer (`.ci/run`'s Valkey step: the same scripts on another
/// server) compares the stores on programs that need not reach every outcome.
pub fn full_run(default: u32) -> bool {
    cases(default) >= default
}
