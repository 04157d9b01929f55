//! Plain reads of the two keys no public handle reports: the ticket queue's capacity `cap`
//! and an election's leader value `lv` (both strings, read with GET, changing nothing), and
//! the server's clock (`TIME`), which dates the exclusive holder's grant from its fence.
//!
//! Each server `list` scans is asked (one, every server of a quorum, or every master of a
//! Cluster, where the master that does not own the key answers MOVED and is skipped); the
//! first value found wins.

use redis::aio::MultiplexedConnection;

/// The two raw values of one name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawKeys {
    pub cap: Option<String>,
    pub lv: Option<String>,
    /// The first answering server's clock at the read, in µs.
    pub now_us: Option<u64>,
    /// The name has a rate limiter's state (`rt`, `rq` or `ra`): `rate` shows it.
    pub rate_limiter: bool,
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
            if let Ok((cap, lv, (secs, micros), rate_keys)) = reply {
                out.cap = out.cap.or(cap);
                out.lv = out.lv.or(lv);
                out.rate_limiter |= rate_keys > 0;
                let now = secs.saturating_mul(1_000_000).saturating_add(micros);
                out.now_us = out.now_us.or(Some(now));
            }
        }
        out
    }
}
