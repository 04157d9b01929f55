//! A fenced resource, as a user of the library would build one: a Redis key updated only by a
//! small script that refuses a fencing token lower than the highest it has accepted. It lives
//! on its own server, so faults of the lock server do not touch it.
//!
//! Every accepted write is logged with its writer, so a test can check the two safety
//! properties of fencing: no stale write is accepted (the log's fences never go down) and no
//! fence was granted twice (one writer per fence).

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;
use redis::Script;

/// Accepts `fence` (ARGV[1]) from `writer` (ARGV[2]) unless a higher fence was accepted.
const WRITE: &str = r"
local top = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = tonumber(ARGV[1])
if fence < top then
  redis.call('INCR', KEYS[3])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
";

/// One fenced resource (a key family named `name` on the resource server).
pub struct Fenced {
    conn: MultiplexedConnection,
    script: Script,
    keys: [String; 3],
}

/// What the resource accepted.
#[derive(Debug, Default)]
pub struct Audit {
    /// Accepted writes per fence, with the writers that made them.
    pub writers_by_fence: BTreeMap<u64, Vec<String>>,
    /// Accepted writes in order.
    pub accepted: Vec<(u64, String)>,
    /// Writes refused as stale.
    pub refused: u64,
}

impl Fenced {
    /// A resource on the server at `url` (use a server of its own, not the lock server).
    pub async fn new(url: &str, name: &str) -> Fenced {
        let client = redis::Client::open(url).expect("resource url");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the resource server");
        Fenced {
            conn,
            script: Script::new(WRITE),
            keys: [
                format!("res:{name}:top"),
                format!("res:{name}:log"),
                format!("res:{name}:refused"),
            ],
        }
    }

    /// Writes under `fence` as `writer`; true if the resource accepted it.
    pub async fn write(&self, fence: u64, writer: &str) -> bool {
        let mut conn = self.conn.clone();
        let accepted: i64 = self
            .script
            .key(&self.keys[0])
            .key(&self.keys[1])
            .key(&self.keys[2])
            .arg(fence)
            .arg(writer)
            .invoke_async(&mut conn)
            .await
            .expect("fenced write");
        accepted == 1
    }

    /// Reads the log back.
    pub async fn audit(&self) -> Audit {
        let mut conn = self.conn.clone();
        let log: Vec<String> = redis::cmd("LRANGE")
            .arg(&self.keys[1])
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .expect("read log");
        let refused: Option<u64> = redis::cmd("GET")
            .arg(&self.keys[2])
            .query_async(&mut conn)
            .await
            .expect("read refused");
        let mut audit = Audit {
            refused: refused.unwrap_or(0),
            ..Audit::default()
        };
        for line in log {
            let (fence, writer) = line.split_once(' ').expect("log line");
            let fence: u64 = fence.parse().expect("fence");
            let ws = audit.writers_by_fence.entry(fence).or_default();
            if !ws.iter().any(|w| w == writer) {
                ws.push(writer.to_owned());
            }
            audit.accepted.push((fence, writer.to_owned()));
        }
        audit
    }

    /// Panics unless no stale write was accepted and every fence had one writer at most.
    /// Returns the audit for further checks.
    pub async fn check(&self) -> Audit {
        let audit = self.audit().await;
        for pair in audit.accepted.windows(2) {
            assert!(
                pair[0].0 <= pair[1].0,
                "stale write accepted: fence {} after {}",
                pair[1].0,
                pair[0].0
            );
        }
        for (fence, writers) in &audit.writers_by_fence {
            assert_eq!(
                writers.len(),
                1,
                "double grant: fence {fence} was used by {writers:?}"
            );
        }
        audit
    }
}
