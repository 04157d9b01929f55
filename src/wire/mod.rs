//! The wire formats between the crate and its Lua scripts, in one place.
//!
//! Every format that the Rust side writes for the scripts, or reads back from them, is
//! encoded and decoded here and nowhere else:
//!
//! - **script arguments**: [`Argv`] (the prelude's `now` and publish command) followed by one
//!   struct per script ([`RwAcquireArgs`], [`QueueAcquireArgs`], ...), whose fields are small
//!   typed values ([`Mode`], [`PolicyArg`], [`Wait`], [`HandOver`], [`Capacity`], [`Ms`],
//!   [`PermitChange`]) written in the script's `ARGV` order through [`ToRedisArgs`]
//!   (`args.rs`);
//! - **script replies**: [`AcquireReply`], [`DowngradeReply`], [`Flag`], [`Fence`],
//!   [`Permits`], [`LeaseLockView`] and [`TicketQueueView`], parsed through
//!   [`FromRedisValue`]; a reply of another shape is a [`ParsingError`], never a panic
//!   (`reply.rs`);
//! - **error replies**: the `RL*` codes ([`Code`]) and their details ([`ErrorReply`],
//!   [`Refusal`]), including which family holds a name that `RLMIXED` refuses (`error.rs`);
//! - **ticket-queue members** ([`Member`]): `token`, or `token#weight` for more than one permit
//!   (`member.rs`);
//! - **wake-up messages** ([`WakeUp`]): `*` (everyone re-checks), or the space-separated
//!   waiters a release granted, `token=fence@until` ([`HandOff`]) (`wake.rs`);
//! - the rate limiter's arguments and replies (`rate.rs`), and the scripts themselves, each
//!   assembled from its `lua/` file and the helpers it calls (`scripts.rs`).
//!
//! Each part sees the others' items through this module (`use super::*`), which also holds
//! the imports they share; `tests.rs` round-trips every format.
//!
//! The Lua side of each format is documented at the top of its script in `lua/`. The
//! in-memory reference (`store::memory`) builds its members and wake-ups here too, and
//! refuses with the same [`Refusal`]s, so both stores speak one language.

pub(crate) mod scripts;

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use redis::{FromRedisValue, ParsingError, RedisWrite, ToRedisArgs, Value};

use crate::vocab::claim::MAX_PERMITS;
use crate::vocab::claim::{
    ms, Acquire, Busy, Claim, Family, Grant, HoldKind, HolderState, PermitChange, Policy, Slot,
    Snapshot, WaiterState,
};
use crate::vocab::error::{Error, LEASE_FAMILY, QUEUE_FAMILY};

mod member;
mod wake;
#[macro_use]
mod args;
#[macro_use]
mod reply;
mod error;

pub(crate) use args::*;
pub(crate) use error::*;
pub(crate) use member::*;
pub(crate) use reply::*;
pub(crate) use wake::*;

pub(crate) mod rate;

#[cfg(test)]
mod tests;
