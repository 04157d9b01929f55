//! Error replies: the `RL*` codes and their details.

use super::*;

/// The error codes of the scripts: the first word of an error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// `RLMIXED`: the name is held through the other family of primitives.
    Mixed,
    /// `RLCAPACITY`: the ticket queue is in use with another capacity.
    Capacity,
    /// `RLPERMITS`: a permit request or permit count out of range.
    Permits,
    /// `RLCORRUPT`: a key holds a value the scripts did not write.
    Corrupt,
    /// `RLARG`: an argument a script cannot use (a bug of the caller, not user input).
    Arg,
}

impl Code {
    /// Every code.
    #[cfg(test)]
    pub(super) const ALL: [Code; 5] = [
        Code::Mixed,
        Code::Capacity,
        Code::Permits,
        Code::Corrupt,
        Code::Arg,
    ];

    /// The code as the scripts write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Mixed => "RLMIXED",
            Code::Capacity => "RLCAPACITY",
            Code::Permits => "RLPERMITS",
            Code::Corrupt => "RLCORRUPT",
            Code::Arg => "RLARG",
        }
    }

    /// The code of an error reply, if it is one of the scripts'.
    pub fn parse(code: &str) -> Option<Code> {
        Some(match code {
            "RLMIXED" => Code::Mixed,
            "RLCAPACITY" => Code::Capacity,
            "RLPERMITS" => Code::Permits,
            "RLCORRUPT" => Code::Corrupt,
            "RLARG" => Code::Arg,
            _ => return None,
        })
    }
}

/// `RLMIXED` details start with the family that holds the name, then `:`.
pub(super) const MIXED_LEASE: &str = "lease: the name is held through the lease lock";
pub(super) const MIXED_QUEUE: &str = "queue: the name is held through the ticket queue";

/// A refusal by the store, the same from the scripts and from the in-memory reference: the
/// caller gets it as a typed [`Error`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `RLMIXED lease: ...` / `RLMIXED queue: ...`: the name is held through `held_by`.
    Mixed {
        /// The family that holds the name.
        held_by: Family,
    },
    /// `RLCAPACITY in use with <stored> permits, asked for <asked>`.
    Capacity {
        /// Everything after the code.
        detail: String,
    },
    /// `RLPERMITS asked for <asked> permits of <capacity>`: a claim for more permits than the
    /// queue has (or none).
    TooManyPermits {
        /// Permits asked for.
        asked: u64,
        /// The capacity in force.
        capacity: u64,
    },
    /// `RLPERMITS count <count> out of range`: a permit change that would leave fewer than 1
    /// or more than [`MAX_PERMITS`] permits.
    PermitCount {
        /// The count the change would have left.
        count: i64,
    },
}

impl Refusal {
    /// The capacity conflict worded as `capacity_conflict` in `queue_common.lua` does.
    pub fn capacity(stored: impl fmt::Display, asked: impl fmt::Display) -> Refusal {
        Refusal::Capacity {
            detail: format!("in use with {stored} permits, asked for {asked}"),
        }
    }

    /// The code of this refusal.
    pub fn code(&self) -> Code {
        match self {
            Refusal::Mixed { .. } => Code::Mixed,
            Refusal::Capacity { .. } => Code::Capacity,
            Refusal::TooManyPermits { .. } | Refusal::PermitCount { .. } => Code::Permits,
        }
    }

    /// The caller's error for lock `name`.
    pub fn into_error(self, name: &str) -> Error {
        match self {
            Refusal::Mixed { held_by } => Error::FamilyConflict {
                name: name.to_owned(),
                held_by: match held_by {
                    Family::LeaseLock => LEASE_FAMILY,
                    Family::TicketQueue => QUEUE_FAMILY,
                },
            },
            Refusal::Capacity { detail } => Error::CapacityConflict {
                name: name.to_owned(),
                detail,
            },
            Refusal::TooManyPermits { asked, capacity } => {
                Error::too_many_permits(&format!("asked for {asked} permits of {capacity}"))
            }
            Refusal::PermitCount { count } => Error::invalid(
                "permits",
                format!("a semaphore has 1 to {MAX_PERMITS} permits, not {count}"),
            ),
        }
    }

    /// Parses the detail of an `RLMIXED`, `RLCAPACITY` or `RLPERMITS` reply.
    fn parse(code: Code, detail: &str) -> Option<Refusal> {
        match code {
            Code::Mixed => match detail.split_once(':')?.0 {
                "lease" => Some(Refusal::Mixed {
                    held_by: Family::LeaseLock,
                }),
                "queue" => Some(Refusal::Mixed {
                    held_by: Family::TicketQueue,
                }),
                _ => None,
            },
            Code::Capacity => Some(Refusal::Capacity {
                detail: detail.to_owned(),
            }),
            Code::Permits => {
                if let Some(rest) = detail.strip_prefix("asked for ") {
                    let (asked, capacity) = rest.split_once(" permits of ")?;
                    Some(Refusal::TooManyPermits {
                        asked: asked.parse().ok()?,
                        capacity: capacity.parse().ok()?,
                    })
                } else {
                    let count = detail
                        .strip_prefix("count ")?
                        .strip_suffix(" out of range")?;
                    Some(Refusal::PermitCount {
                        count: count.parse().ok()?,
                    })
                }
            }
            Code::Corrupt | Code::Arg => None,
        }
    }
}

impl fmt::Display for Refusal {
    /// The error reply as the scripts write it: code, space, detail.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.code().as_str())?;
        match self {
            Refusal::Mixed {
                held_by: Family::LeaseLock,
            } => f.write_str(MIXED_LEASE),
            Refusal::Mixed {
                held_by: Family::TicketQueue,
            } => f.write_str(MIXED_QUEUE),
            Refusal::Capacity { detail } => f.write_str(detail),
            Refusal::TooManyPermits { asked, capacity } => {
                write!(f, "asked for {asked} permits of {capacity}")
            }
            Refusal::PermitCount { count } => write!(f, "count {count} out of range"),
        }
    }
}

/// An error reply of a script, parsed from its code and detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ErrorReply {
    /// A refusal the caller learns as a typed error.
    Refused(Refusal),
    /// `RLCORRUPT <detail>`: a key of the lock holds a value the scripts did not write.
    Corrupt(String),
    /// `RLARG <detail>`: a script could not use an argument.
    Arg(String),
}

impl ErrorReply {
    /// Parses an error reply; `None` when the code is not one of the scripts' or its detail
    /// is not what the script writes.
    pub fn parse(code: &str, detail: &str) -> Option<ErrorReply> {
        match Code::parse(code)? {
            Code::Corrupt => Some(ErrorReply::Corrupt(as_written(detail).to_owned())),
            Code::Arg => Some(ErrorReply::Arg(as_written(detail).to_owned())),
            code => Refusal::parse(code, detail).map(ErrorReply::Refused),
        }
    }
}

/// An error's detail as the script wrote it: the server appends where the error was raised
/// (` script: <sha>, on @user_script:<line>.`), which tells a reader nothing.
fn as_written(detail: &str) -> &str {
    match detail.find(" script: ") {
        Some(at) => detail[..at].trim_end(),
        None => detail,
    }
}

/// The reply of `capabilities.lua`: what `TIME` answered inside the script (`None` if not
/// two natural numbers), and whether `PEXPIRE` accepted `GT` and `NX` (`Err`: the server's
/// refusal, as it worded it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CapabilityReply {
    pub clock: Option<(u64, u64)>,
    pub gt: Result<(), String>,
    pub nx: Result<(), String>,
}

from_value_ref!(CapabilityReply, |v| {
    const WHAT: &str = "capability probe reply";
    let [seconds, micros, gt, nx] = items(v, WHAT)? else {
        return Err(malformed(WHAT, v));
    };
    let clock = natural(seconds, "seconds")
        .and_then(|s| Ok((s, natural(micros, "microseconds")?)))
        .ok();
    let accepted = |reply: &Value| match reply {
        Value::Int(1) => Ok(()),
        other => Err(text(other, "refusal").unwrap_or_else(|_| format!("{other:?}"))),
    };
    Ok(CapabilityReply {
        clock,
        gt: accepted(gt),
        nx: accepted(nx),
    })
});
