//! Judging the replies of the connect-time capability probe (`check_server` of the
//! [`RedisStore`](super::RedisStore)): which [`Capability`] a server lacks, told apart from a
//! refusal by the user's ACL rights (which is the user's to fix, and says so as Redis's
//! `NOPERM` does).

use redis::{FromRedisValue, RedisError, RedisResult, Value};

use super::redis::{acl_denial, error_from_redis, supported_server};
use crate::vocab::capability::{clock_is_real, Capability};
use crate::vocab::error::{Error, Result};
use crate::wire::CapabilityReply;

/// Each probe command's own reply: `HELLO 3`, `SCRIPT LOAD` of the probe, two runs of it.
pub(crate) struct Replies {
    hello: RedisResult<Value>,
    load: RedisResult<Value>,
    runs: [RedisResult<Value>; 2],
}

impl Replies {
    /// The replies in the order sent; another count is a broken reply.
    pub(crate) fn new(replies: Vec<RedisResult<Value>>) -> RedisResult<Replies> {
        let count = replies.len();
        let Ok([hello, load, first, second]) = <[_; 4]>::try_from(replies) else {
            return Err(RedisError::from((
                redis::ErrorKind::Parse,
                "the capability probe's pipeline",
                format!("{count} replies to 4 commands"),
            )));
        };
        Ok(Replies {
            hello,
            load,
            runs: [first, second],
        })
    }
}

/// What the server said of itself in `HELLO`: name, version and protocol, each if present.
#[derive(Default)]
struct Hello {
    server: String,
    version: String,
    proto: Option<i64>,
}

impl Hello {
    fn parse(reply: &Value) -> Hello {
        let mut hello = Hello::default();
        let Value::Map(pairs) = reply else {
            return hello;
        };
        for (key, value) in pairs {
            let Ok(key) = redis::from_redis_value_ref::<String>(key) else {
                continue;
            };
            match key.as_str() {
                "server" => hello.server = text(value),
                "version" => hello.version = text(value),
                "proto" => hello.proto = redis::from_redis_value_ref(value).ok(),
                _ => {}
            }
        }
        hello
    }

    fn lacks(&self, missing: Capability, seen: impl Into<String>) -> Error {
        Error::UnsupportedServer {
            server: self.server.clone(),
            version: self.version.clone(),
            missing,
            seen: seen.into(),
        }
    }
}

fn text(value: &Value) -> String {
    redis::from_redis_value_ref(value).unwrap_or_default()
}

/// The server's wording of an error reply: code first, then its message.
fn wording(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => err.to_string(),
    }
}

/// Error codes that stop the probe without saying anything of the server's capabilities:
/// the user's rights, a server not serving now (loading, busy, failing over), memory full, a
/// replica. The probe is then inconclusive: the connect goes on, and the lock steps report
/// the same refusal with its own advice.
const INCONCLUSIVE: &[&str] = &[
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "OOM",
    "READONLY",
    "MISCONF",
];

/// A failed probe command: a lost connection is that error; a refusal that says nothing of
/// the server's capabilities makes the probe inconclusive (`Ok`, logged); anything else is
/// the server lacking `missing`.
fn failed(hello: &Hello, err: RedisError, missing: Capability) -> Result<()> {
    if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() {
        return Err(error_from_redis("", err));
    }
    let code = err.code().unwrap_or("");
    if INCONCLUSIVE.contains(&code) || acl_denial(code, err.detail().unwrap_or("")) {
        inconclusive(&wording(&err));
        return Ok(());
    }
    Err(hello.lacks(missing, wording(&err)))
}

fn inconclusive(reply: &str) {
    tracing::warn!(
        %reply,
        "the server refused the capability probe, so what it can do was not checked; the \
         lock steps will meet the same refusal"
    );
}

/// The verdict on a server from the probe's replies: `Ok` if it has every capability, or if
/// a refusal that says nothing of them stopped the probe (logged).
pub(crate) fn judge(replies: Replies) -> Result<()> {
    let Replies { hello, load, runs } = replies;
    let hello = match hello {
        Ok(reply) => Hello::parse(&reply),
        Err(err) => return failed(&Hello::default(), err, Capability::Resp3),
    };
    if !hello.server.is_empty() && !hello.version.is_empty() {
        supported_server(&hello.server, &hello.version)?;
    }
    if let Some(proto) = hello.proto.filter(|p| *p != 3) {
        return Err(hello.lacks(Capability::Resp3, format!("HELLO 3 answered proto {proto}")));
    }
    if let Err(err) = load {
        return failed(&hello, err, Capability::Scripting);
    }
    let mut clocks = Vec::with_capacity(2);
    for run in runs {
        let reply = match run {
            Ok(reply) => reply,
            Err(err) => return failed(&hello, err, Capability::Scripting),
        };
        let probe = CapabilityReply::from_redis_value_ref(&reply).map_err(|_| {
            hello.lacks(
                Capability::Scripting,
                format!("the probe script answered {reply:?}"),
            )
        })?;
        if let Some(refused) = [probe.gt, probe.nx].into_iter().find_map(|r| r.err()) {
            let code = refused.split(' ').next().unwrap_or("");
            let detail = refused.get(code.len()..).unwrap_or("").trim_start();
            if INCONCLUSIVE.contains(&code) || acl_denial(code, detail) {
                inconclusive(&refused);
                return Ok(());
            }
            return Err(hello.lacks(Capability::ExpireConditions, refused));
        }
        clocks.push(probe.clock);
    }
    match clocks[..] {
        [Some(first), Some(second)] if clock_is_real(first, second) => Ok(()),
        _ => {
            let reading = |c: Option<(u64, u64)>| {
                c.map_or("no number".to_owned(), |(s, us)| format!("{s} {us}"))
            };
            Err(hello.lacks(
                Capability::ScriptClock,
                format!(
                    "TIME in two scripts answered {}, then {}",
                    reading(clocks[0]),
                    reading(clocks[1])
                ),
            ))
        }
    }
}
