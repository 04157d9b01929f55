//! Plain reads of the two keys no public handle reports: the ticket queue's capacity `cap`
//! and an election's leader value `lv` (both strings, read with GET, changing nothing), and
//! the server's clock (`TIME`), which dates the exclusive holder's grant from its fence.
//!
//! Each server `list` scans is asked (one, every server of a quorum, or every master of a
//! Cluster, where the master that does not own the key answers MOVED and is skipped); the
//! first value found wins.

use redis::aio::MultiplexedConnection;

use crate::view::Foreign;

/// The two raw values of one name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawKeys {
    pub cap: Option<String>,
    pub lv: Option<String>,
    /// The first answering server's clock at the read, in µs.
    pub now_us: Option<u64>,
    /// The name has a rate limiter's state (`rt`, `rq` or `ra`): `rate` shows it.
    pub rate_limiter: bool,
    /// `cap` or `lv` when it is not a string.
    pub foreign: Vec<Foreign>,
}

/// Connections to the servers to read from, opened once.
pub struct Raw {
    conns: Vec<MultiplexedConnection>,
}

impl Raw {
    pub fn new(conns: Vec<MultiplexedConnection>) -> Raw {
        Raw { conns }
    }

    /// `cap` and `lv` of `name` under `prefix`. A server that cannot answer (MOVED, a wrong
    /// type, a lost connection) is skipped: these keys only refine what `inspect` shows.
    pub async fn read(&self, prefix: &str, name: &str) -> RawKeys {
        let mut out = RawKeys::default();
        for conn in &self.conns {
            let mut conn = conn.clone();
            type Reply = (Option<String>, Option<String>, (u64, u64), u64);
            let key = |k: &str| format!("{prefix}:{{{name}}}:{k}");
            let reply: redis::RedisResult<Reply> = redis::pipe()
                .get(key("cap"))
                .get(key("lv"))
                .cmd("TIME")
                .cmd("EXISTS")
                .arg(key("rt"))
                .arg(key("rq"))
                .arg(key("ra"))
                .query_async(&mut conn)
                .await;
            match reply {
                Ok((cap, lv, (secs, micros), rate_keys)) => {
                    out.cap = out.cap.or(cap);
                    out.lv = out.lv.or(lv);
                    out.rate_limiter |= rate_keys > 0;
                    let now = secs.saturating_mul(1_000_000).saturating_add(micros);
                    out.now_us = out.now_us.or(Some(now));
                }
                Err(e) if e.code() == Some("WRONGTYPE") && out.foreign.is_empty() => {
                    for key in [key("cap"), key("lv")] {
                        let found = key_type_on(&mut conn, &key).await;
                        if let Some(t) = found.filter(|t| t != "string" && t != "none") {
                            out.foreign.push(Foreign {
                                detail: format!("it is a {t}, where redis-locks keeps a string"),
                                key: Some(key),
                                key_type: Some(t),
                                hides: true,
                            });
                        }
                    }
                }
                // MOVED (another master owns the key), a lost connection: skipped.
                Err(_) => {}
            }
        }
        out
    }

    /// The Redis type of `key` (`TYPE`) on the first server that has it.
    pub async fn key_type(&self, key: &str) -> Option<String> {
        for conn in &self.conns {
            let mut conn = conn.clone();
            if let Some(t) = key_type_on(&mut conn, key).await.filter(|t| t != "none") {
                return Some(t);
            }
        }
        None
    }
}

async fn key_type_on(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("TYPE").arg(key).query_async(conn).await.ok()
}
