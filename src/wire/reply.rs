//! Script replies, parsed through [`FromRedisValue`]; another shape is a [`ParsingError`].

use super::*;

pub(super) fn malformed(what: &str, v: &Value) -> ParsingError {
    ParsingError::from(format!("{what}: {v:?}"))
}

/// The elements of an array reply (an empty Lua table may come back as nil).
pub(super) fn items<'v>(v: &'v Value, what: &str) -> Result<&'v [Value], ParsingError> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(&[]),
        other => Err(malformed(&format!("{what} is not an array"), other)),
    }
}

/// An integer (scripts answer Lua numbers as integers).
pub(super) fn int(v: &Value, what: &str) -> Result<i64, ParsingError> {
    let parsed = match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => Some(*d as i64),
        _ => None,
    };
    parsed.ok_or_else(|| malformed(&format!("{what} is not an integer"), v))
}

/// A count, instant or fence: a non-negative integer.
pub(super) fn natural(v: &Value, what: &str) -> Result<u64, ParsingError> {
    let i = int(v, what)?;
    u64::try_from(i).map_err(|_| malformed(&format!("{what} is negative"), v))
}

/// A non-negative integer, or `-1` for none.
pub(super) fn optional(v: &Value, what: &str) -> Result<Option<u64>, ParsingError> {
    match int(v, what)? {
        -1 => Ok(None),
        i => u64::try_from(i)
            .map(Some)
            .map_err(|_| malformed(&format!("{what} is negative"), v)),
    }
}

/// A string (a token or member).
pub(super) fn text(v: &Value, what: &str) -> Result<String, ParsingError> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(malformed(&format!("{what} is not a string"), other)),
    }
}

/// Implements [`FromRedisValue`] through a parser of a borrowed value.
macro_rules! from_value_ref {
    ($ty:ty, |$v:ident| $body:block) => {
        impl FromRedisValue for $ty {
            fn from_redis_value_ref($v: &Value) -> Result<Self, ParsingError> $body

            fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
                Self::from_redis_value_ref(&v)
            }
        }
    };
}

/// The reply of `rw_acquire.lua` and `queue_acquire.lua`: the fence (an integer) when
/// granted, for the lease the claim asked for; `{0, retry_ms, position, heartbeat_until}`
/// refused (each `-1` when unknown). A bare integer keeps the common reply the cheapest Redis
/// can send (a table costs the script about half a microsecond more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    Granted { fence: u64 },
    Busy(Busy),
}

impl AcquireReply {
    /// The outcome, for a claim that asked for `lease` (sent in whole ms, as [`Ms`] writes it).
    pub(crate) fn outcome(self, lease: Duration) -> Acquire {
        match self {
            AcquireReply::Granted { fence } => Acquire::Granted(Grant {
                fence,
                lease: Duration::from_millis(ms(lease)),
            }),
            AcquireReply::Busy(busy) => Acquire::Busy(busy),
        }
    }
}

from_value_ref!(AcquireReply, |v| {
    const WHAT: &str = "acquire reply";
    if let Value::Int(_) = v {
        return Ok(AcquireReply::Granted {
            fence: natural(v, "fence")?,
        });
    }
    match items(v, WHAT)? {
        [flag, retry, position, heartbeat_until] if int(flag, WHAT)? == 0 => {
            Ok(AcquireReply::Busy(Busy {
                retry_after: optional(retry, "retry")?.map(Duration::from_millis),
                position: optional(position, "position")?,
                heartbeat_until: optional(heartbeat_until, "heartbeat deadline")?,
                token_released: false,
            }))
        }
        _ => Err(malformed(WHAT, v)),
    }
});

/// The reply of `rw_downgrade.lua` and `queue_downgrade.lua`: `{1, fence}` downgraded, or
/// `{0, 0}` when the token held no live exclusive lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DowngradeReply(pub Option<u64>);

from_value_ref!(DowngradeReply, |v| {
    const WHAT: &str = "downgrade reply";
    match items(v, WHAT)? {
        [flag, fence] => match int(flag, WHAT)? {
            1 => Ok(DowngradeReply(Some(natural(fence, "fence")?))),
            0 => Ok(DowngradeReply(None)),
            _ => Err(malformed(WHAT, v)),
        },
        _ => Err(malformed(WHAT, v)),
    }
});

/// A yes/no reply, `1` or `0`: a release that found a live hold, a renewal made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flag(pub bool);

from_value_ref!(Flag, |v| {
    match int(v, "flag")? {
        1 => Ok(Flag(true)),
        0 => Ok(Flag(false)),
        _ => Err(malformed("flag is neither 1 nor 0", v)),
    }
});

/// A fence counter (`force_release.lua`, `raise_fence.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fence(pub u64);

from_value_ref!(Fence, |v| { Ok(Fence(natural(v, "fence")?)) });

/// The reply of `force_release_holder.lua`: `{matches, fence, bumped}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Eviction(pub crate::vocab::claim::HolderEviction);

from_value_ref!(Eviction, |v| {
    use crate::vocab::claim::HolderEviction;
    const WHAT: &str = "holder eviction reply";
    let [matches, fence, bumped] = items(v, WHAT)? else {
        return Err(malformed(WHAT, v));
    };
    let matches = natural(matches, "matches")?;
    let fence = natural(fence, "fence")?;
    Ok(Eviction(match matches {
        0 => HolderEviction::NoMatch,
        1 => HolderEviction::Evicted {
            fence,
            fence_bumped: natural(bumped, "bumped")? == 1,
        },
        n => HolderEviction::Ambiguous {
            matches: usize::try_from(n).unwrap_or(usize::MAX),
        },
    }))
});

/// The arguments of `force_release_holder.lua`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PrefixArg<'a>(pub &'a str);

impl ToRedisArgs for PrefixArg<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        self.0.write_redis_args(out);
    }

    fn num_of_args(&self) -> usize {
        1
    }
}

/// The permit count a change left (`queue_set_permits.lua`), 1 to [`MAX_PERMITS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Permits(pub u32);

from_value_ref!(Permits, |v| {
    u32::try_from(natural(v, "permits")?)
        .ok()
        .filter(|n| (1..=MAX_PERMITS).contains(n))
        .map(Permits)
        .ok_or_else(|| malformed("permit count out of range", v))
});

/// Pairs of a flat `{a1, b1, a2, b2, ...}` array (or triples: `n` per row).
pub(super) fn rows<'v>(
    v: &'v Value,
    n: usize,
    what: &str,
) -> Result<std::slice::ChunksExact<'v, Value>, ParsingError> {
    let all = items(v, what)?;
    if all.len() % n != 0 {
        return Err(malformed(&format!("{what} is not rows of {n}"), v));
    }
    Ok(all.chunks_exact(n))
}

/// The reply of `rw_inspect.lua`: `{now, fence, writer_token or "", writer_remaining_ms,
/// {reader, remaining_ms, ...}, {waiting_writer, heartbeat_remaining_ms, ...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaseLockView(pub Snapshot);

from_value_ref!(LeaseLockView, |v| {
    const WHAT: &str = "lease lock inspect reply";
    let [now, fence, writer, writer_left, readers, waiting] = items(v, WHAT)? else {
        return Err(malformed(WHAT, v));
    };
    let mut holders = Vec::new();
    let writer = text(writer, "writer")?;
    if !writer.is_empty() {
        holders.push(HolderState {
            token: writer,
            kind: HoldKind::Write,
            remaining_ms: natural(writer_left, "writer lease")?,
        });
    }
    for row in rows(readers, 2, "readers")? {
        holders.push(HolderState {
            token: text(&row[0], "reader")?,
            kind: HoldKind::Read,
            remaining_ms: natural(&row[1], "reader lease")?,
        });
    }
    let waiters = rows(waiting, 2, "waiting writers")?
        .map(|row| {
            Ok(WaiterState {
                token: text(&row[0], "waiting writer")?,
                weight: 1,
                ticket: 0,
                heartbeat_remaining_ms: natural(&row[1], "heartbeat")?,
            })
        })
        .collect::<Result<_, ParsingError>>()?;
    Ok(LeaseLockView(Snapshot {
        now_ms: natural(now, "now")?,
        fence: natural(fence, "fence")?,
        permits: None,
        holders,
        waiters,
        foreign_capacity: false,
    }))
});

/// A member as a (token, weight) pair, from a reply.
pub(super) fn member(v: &Value, what: &str) -> Result<(String, u32), ParsingError> {
    let text = text(v, what)?;
    let m = Member::parse(&text).ok_or_else(|| malformed(&format!("{what} weight"), v))?;
    Ok((m.token.to_owned(), m.weight))
}

/// The reply of `queue_inspect.lua`: `{now, fence, permits or -1, {holder_member,
/// remaining_ms, ...}, {waiter_member, ticket, heartbeat_remaining_ms, ...}, cap_foreign}`
/// (`cap_foreign` 1 when the capacity key holds foreign data, else 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TicketQueueView(pub Snapshot);

from_value_ref!(TicketQueueView, |v| {
    const WHAT: &str = "ticket queue inspect reply";
    let [now, fence, permits, holders, waiters, cap_foreign] = items(v, WHAT)? else {
        return Err(malformed(WHAT, v));
    };
    let holders = rows(holders, 2, "holders")?
        .map(|row| {
            let (token, weight) = member(&row[0], "holder")?;
            Ok(HolderState {
                token,
                kind: HoldKind::Permits(weight),
                remaining_ms: natural(&row[1], "holder lease")?,
            })
        })
        .collect::<Result<_, ParsingError>>()?;
    let waiters = rows(waiters, 3, "waiters")?
        .map(|row| {
            let (token, weight) = member(&row[0], "waiter")?;
            Ok(WaiterState {
                token,
                weight,
                ticket: natural(&row[1], "ticket")?,
                heartbeat_remaining_ms: natural(&row[2], "heartbeat")?,
            })
        })
        .collect::<Result<_, ParsingError>>()?;
    let permits = match optional(permits, "permits")? {
        None => None,
        Some(n) => Some(u32::try_from(n).map_err(|_| malformed("permits", permits))?),
    };
    let foreign_capacity = match natural(cap_foreign, "cap_foreign")? {
        0 => false,
        1 => true,
        _ => return Err(malformed("cap_foreign", cap_foreign)),
    };
    Ok(TicketQueueView(Snapshot {
        now_ms: natural(now, "now")?,
        fence: natural(fence, "fence")?,
        permits,
        holders,
        waiters,
        foreign_capacity,
    }))
});

/// The reply of `election_leader.lua`: `{now}` when nobody leads, `{now, fence, remaining_ms,
/// value}` when the live holder proclaimed `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaderView(pub Option<crate::vocab::claim::LeaderInfo>);

from_value_ref!(LeaderView, |v| {
    const WHAT: &str = "election leader reply";
    match items(v, WHAT)? {
        [_now] => Ok(LeaderView(None)),
        [_now, fence, remaining, value] => Ok(LeaderView(Some(crate::vocab::claim::LeaderInfo {
            value: text(value, "leader value")?,
            term: natural(fence, "term")?,
            time_left: Duration::from_millis(natural(remaining, "leader lease")?),
        }))),
        _ => Err(malformed(WHAT, v)),
    }
});

/// The reply of `multi_acquire.lua`: every part's fence when all are granted;
/// `{-1, part, retry_ms}` refused at `part` (1-based, retry `-1` when unknown); `{-2, part}`
/// the part's name is held through the ticket queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MultiAcquireReply {
    Granted(Vec<u64>),
    Busy { part: usize, retry: Option<u64> },
    Mixed { part: usize },
}

impl MultiAcquireReply {
    /// The outcome for `claim` over `parts`; a part index out of range, or fences for another
    /// number of parts, is a malformed reply.
    pub(crate) fn outcome(
        self,
        claim: &Claim,
        parts: &[crate::vocab::claim::Part],
    ) -> Result<crate::vocab::claim::AcquireAll, Error> {
        use crate::vocab::claim::AcquireAll;
        let malformed = || Error::WrongType {
            name: parts
                .first()
                .map(|p| p.lock.name())
                .unwrap_or("")
                .to_owned(),
            key: None,
            detail: format!("multi-lock reply does not fit {} parts", parts.len()),
        };
        match self {
            MultiAcquireReply::Granted(fences) if fences.len() == parts.len() => {
                Ok(AcquireAll::Granted(
                    fences
                        .into_iter()
                        .map(|fence| Grant {
                            fence,
                            lease: Duration::from_millis(ms(claim.lease)),
                        })
                        .collect(),
                ))
            }
            MultiAcquireReply::Busy { part, retry } if (1..=parts.len()).contains(&part) => {
                Ok(AcquireAll::Busy {
                    part: part - 1,
                    busy: Busy {
                        retry_after: retry.map(Duration::from_millis),
                        position: None,
                        heartbeat_until: None,
                        token_released: false,
                    },
                })
            }
            MultiAcquireReply::Mixed { part } if (1..=parts.len()).contains(&part) => {
                Err(Refusal::Mixed {
                    held_by: Family::TicketQueue,
                }
                .into_error(parts[part - 1].lock.name()))
            }
            _ => Err(malformed()),
        }
    }
}

from_value_ref!(MultiAcquireReply, |v| {
    const WHAT: &str = "multi-lock reply";
    let all = items(v, WHAT)?;
    let index = |p: &Value| {
        natural(p, "part").and_then(|p| usize::try_from(p).map_err(|_| malformed(WHAT, v)))
    };
    match all {
        [flag, part, retry] if int(flag, WHAT)? == -1 => Ok(MultiAcquireReply::Busy {
            part: index(part)?,
            retry: optional(retry, "retry")?,
        }),
        [flag, part] if int(flag, WHAT)? == -2 => {
            Ok(MultiAcquireReply::Mixed { part: index(part)? })
        }
        fences => Ok(MultiAcquireReply::Granted(
            fences
                .iter()
                .map(|f| natural(f, "fence"))
                .collect::<Result<_, _>>()?,
        )),
    }
});
