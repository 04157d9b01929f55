//! The wire formats between the crate and its Lua scripts, in one place.
//!
//! Every format that the Rust side writes for the scripts, or reads back from them, is
//! encoded and decoded here and nowhere else:
//!
//! - **script arguments**: [`Argv`] (the prelude's `now` and publish command) followed by one
//!   struct per script ([`RwAcquireArgs`], [`QueueAcquireArgs`], ...), whose fields are small
//!   typed values ([`Mode`], [`PolicyArg`], [`Wait`], [`HandOver`], [`Capacity`], [`Ms`],
//!   [`PermitChange`]) written in the script's `ARGV` order through [`ToRedisArgs`];
//! - **script replies**: [`AcquireReply`], [`DowngradeReply`], [`Flag`], [`Fence`],
//!   [`Permits`], [`LeaseLockView`] and [`TicketQueueView`], parsed through
//!   [`FromRedisValue`]; a reply of another shape is a [`ParsingError`], never a panic;
//! - **error replies**: the `RL*` codes ([`Code`]) and their details ([`ErrorReply`],
//!   [`Refusal`]), including which family holds a name that `RLMIXED` refuses;
//! - **ticket-queue members** ([`Member`]): `token`, or `token#weight` for more than one permit;
//! - **wake-up messages** ([`WakeUp`]): `*` (everyone re-checks), or the space-separated
//!   waiters a release granted, `token=fence@until` ([`HandOff`]).
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

// ---- ticket-queue members -------------------------------------------------------------------

/// A member of the ticket queue's sorted sets (holders, queue, heartbeats): the token alone
/// for one permit, `token#weight` for more (`member_of` in `queue_common.lua`). Tokens never
/// contain `#` (see `Claim::check`), so the last `#` separates the weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    /// The claim's token.
    pub token: &'a str,
    /// Permits held or wanted.
    pub weight: u32,
}

impl<'a> Member<'a> {
    /// Reads a member the way `weight_of` and `token_of` in `queue_common.lua` do: a trailing
    /// `#<digits>` is the weight, anything else is a one-permit token. `None` for a weight
    /// beyond `u32` (no script writes one).
    pub fn parse(member: &'a str) -> Option<Member<'a>> {
        match member.rsplit_once('#') {
            Some((token, digits))
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Some(Member {
                    token,
                    weight: digits.parse().ok()?,
                })
            }
            _ => Some(Member {
                token: member,
                weight: 1,
            }),
        }
    }
}

impl fmt::Display for Member<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weight == 1 {
            f.write_str(self.token)
        } else {
            write!(f, "{}#{}", self.token, self.weight)
        }
    }
}

// ---- wake-up messages -----------------------------------------------------------------------

/// The message that wakes every local waiter of a lock.
const WAKE_ALL: &str = "*";
/// The message of an election's proclaim or retract: wakes its observers only.
const LEADER_CHANGED: &str = "^";

/// A grant announced in a wake-up (`fence@until` after `token=`): the lock was handed to the
/// named waiter with `fence`, until the store-clock instant `until` (ms), the waiter's
/// heartbeat deadline at the grant (`hand_over` in `rw_common.lua`, `promote` in
/// `queue_common.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HandOff {
    /// The fencing token of the grant.
    pub fence: u64,
    /// Until when the grant holds unless the waiter claims it; `None` in a bare `fence`
    /// (accepted, never sent by the scripts).
    pub until: Option<u64>,
}

impl HandOff {
    /// True when this grant names `refusal_deadline`, the heartbeat deadline the waiter's
    /// latest refused attempt was told: the release that made it then came after that
    /// attempt was applied.
    pub(crate) fn names(&self, refusal_deadline: Option<u64>) -> bool {
        self.until.is_some() && self.until == refusal_deadline
    }

    /// Parses `fence@until` (or a bare `fence`).
    fn parse(text: &str) -> Option<HandOff> {
        let (fence, until) = match text.split_once('@') {
            Some((f, u)) => (f, Some(u.parse().ok()?)),
            None => (text, None),
        };
        Some(HandOff {
            fence: fence.parse().ok()?,
            until,
        })
    }
}

impl fmt::Display for HandOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.until {
            Some(until) => write!(f, "{}@{until}", self.fence),
            None => write!(f, "{}", self.fence),
        }
    }
}

/// One waiter named in a wake-up: `token`, or `token=fence@until` when the message carries
/// its grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named<'a> {
    /// The waiter's token.
    pub token: Cow<'a, str>,
    /// The grant made to it, if the message says so. A grant part that does not parse is
    /// ignored: the waiter is still woken and confirms with an attempt.
    pub grant: Option<HandOff>,
}

impl Named<'static> {
    /// A waiter granted `grant`.
    pub fn granted(token: impl Into<String>, grant: HandOff) -> Self {
        Named {
            token: Cow::Owned(token.into()),
            grant: Some(grant),
        }
    }
}

/// A message published on a lock's wake-up channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WakeUp<'a> {
    /// `*`: every local waiter of the lock re-checks.
    All,
    /// Space-separated waiters: the ones concerned (a ticket queue names exactly the waiters
    /// it granted, each with its grant).
    Named(Vec<Named<'a>>),
    /// `^`: an election's leader proclaimed or retracted its value; wakes its observers
    /// (which every message wakes), no waiter.
    LeaderChanged,
}

impl<'a> WakeUp<'a> {
    /// Parses a message as published by the scripts (and the in-memory store). Never fails:
    /// a message of another form names waiters that do not exist, and wakes nobody.
    pub fn parse(message: &'a str) -> WakeUp<'a> {
        if message == WAKE_ALL {
            return WakeUp::All;
        }
        if message == LEADER_CHANGED {
            return WakeUp::LeaderChanged;
        }
        let named = message
            .split(' ')
            .filter(|part| !part.is_empty())
            .map(|part| match part.split_once('=') {
                Some((token, grant)) => Named {
                    token: Cow::Borrowed(token),
                    grant: HandOff::parse(grant),
                },
                None => Named {
                    token: Cow::Borrowed(part),
                    grant: None,
                },
            })
            .collect();
        WakeUp::Named(named)
    }
}

impl fmt::Display for WakeUp<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WakeUp::All => f.write_str(WAKE_ALL),
            WakeUp::LeaderChanged => f.write_str(LEADER_CHANGED),
            WakeUp::Named(named) => {
                for (i, n) in named.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    f.write_str(&n.token)?;
                    if let Some(grant) = n.grant {
                        write!(f, "={grant}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

// ---- script arguments -----------------------------------------------------------------------

/// Writes one argument: `""` for no value (the prelude's "use the server clock").
fn write_text<W: ?Sized + RedisWrite>(out: &mut W, text: &str) {
    out.write_arg(text.as_bytes());
}

/// The prelude's `ARGV[1]`: the time in ms, or `""` for the server's own clock (`TIME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Now(pub Option<u64>);

impl ToRedisArgs for Now {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self.0 {
            Some(now) => now.write_redis_args(out),
            None => write_text(out, ""),
        }
    }
}

/// The prelude's `ARGV[2]`: the command that publishes wake-ups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// `PUBLISH` (a single server).
    Plain,
    /// `SPUBLISH`: sharded pub/sub in the lock's slot (Redis Cluster).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Sharded,
}

impl ToRedisArgs for Publish {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        write_text(
            out,
            match self {
                Publish::Plain => "PUBLISH",
                Publish::Sharded => "SPUBLISH",
            },
        );
    }
}

/// A duration argument, in whole ms (rounded down, as every store counts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ms(pub Duration);

impl ToRedisArgs for Ms {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        ms(self.0).write_redis_args(out);
    }
}

/// Which hold of the lease lock a step is about: `w` (writer or mutex), `r` (reader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Exclusive.
    Write,
    /// Shared.
    Read,
}

impl Mode {
    /// The mode of a lease-lock slot.
    pub fn of(slot: Slot) -> Mode {
        if slot == Slot::Write {
            Mode::Write
        } else {
            Mode::Read
        }
    }
}

/// Whether a renewal may shorten the hold: `set` (an `extend`: the deadline becomes now +
/// lease), `keep` (an automatic renewal: the later of that and the deadline the hold has), or
/// a hand-off's claim (`set` while the hold still has the hand-off's deadline, else `keep`).
/// [`Renewal::deadline`] is the rule (`renewed_until` in `lua/prelude.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// An explicit `extend` (or a resume's renewal): sets the deadline, shorter or longer.
    Set,
    /// An automatic renewal: never shortens the deadline, so one that lands late (after
    /// another client's resume set a longer lease) cannot cut it.
    Keep,
    /// The first renewal of a hold a release handed over, naming the deadline the hand-off
    /// gave it (the waiter's heartbeat deadline: a window that may be longer than the lease).
    /// It sets the lease while the hold still has that deadline, so a dead claimer blocks no
    /// longer than its lease; once anything extended the hold (another client's resume), it
    /// keeps, so a claim that lands late cannot cut a resumed lease.
    Claim(u64),
}

impl Renewal {
    /// The deadline (server ms) a hold whose deadline is `held` gets at `now` for `lease` ms.
    /// Every deadline it writes is even and every hand-off's is odd ([`odd`]), so a claim
    /// finds the hand-off's deadline only if nothing renewed the hold since.
    pub(crate) fn deadline(self, held: u64, now: u64, lease: u64) -> u64 {
        let set = (now + lease).next_multiple_of(2);
        match self {
            Renewal::Set => set,
            Renewal::Claim(handed) if held == handed => set,
            Renewal::Keep | Renewal::Claim(_) => held.max(set),
        }
    }

    /// The same renewal for a read hold, which is never handed over: a claim keeps.
    pub(crate) fn of_reader(self) -> Renewal {
        match self {
            Renewal::Claim(_) => Renewal::Keep,
            other => other,
        }
    }
}

/// A waiter's heartbeat deadline, which a hand-off gives the hold it grants: made odd, so no
/// renewal's deadline ([`Renewal::deadline`]) is ever equal to it (`odd` in prelude.lua).
pub(crate) fn odd(ms: u64) -> u64 {
    ms | 1
}

impl ToRedisArgs for Renewal {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            Renewal::Set => write_text(out, "set"),
            Renewal::Keep => write_text(out, "keep"),
            Renewal::Claim(handed) => handed.write_redis_args(out),
        }
    }
}

impl ToRedisArgs for Mode {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        write_text(
            out,
            match self {
                Mode::Write => "w",
                Mode::Read => "r",
            },
        );
    }
}

/// The lease lock's reader/writer policy: `writer` or `reader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PolicyArg(pub Policy);

impl ToRedisArgs for PolicyArg {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        write_text(
            out,
            match self.0 {
                Policy::Writer => "writer",
                Policy::Reader => "reader",
            },
        );
    }
}

/// Whether a refused acquire waits (joins the queue, or announces a waiting writer): `1`/`0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait(pub bool);

impl ToRedisArgs for Wait {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        write_text(out, if self.0 { "1" } else { "0" });
    }
}

/// Whether a writer's release hands the lock straight to the next waiting writer: `1`/`0`
/// (off in quorum mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HandOver(pub bool);

impl ToRedisArgs for HandOver {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        write_text(out, if self.0 { "1" } else { "0" });
    }
}

/// The capacity a ticket claim asks for: `<n>` for a Semaphore (a count stored by
/// `set_permits` wins), `=<n>` for a fixed capacity (FairLock, fair RwLock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// Permits in all.
    pub permits: u32,
    /// True for a Semaphore's count.
    pub resizable: bool,
}

impl ToRedisArgs for Capacity {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        if self.resizable {
            self.permits.write_redis_args(out);
        } else {
            out.write_arg_fmt(format_args!("={}", self.permits));
        }
    }
}

/// A ticket claim's weight and capacity. Lease-lock slots never reach the queue scripts;
/// they would count as a FairLock's one permit of one.
fn ticket(slot: Slot) -> (u32, Capacity) {
    match slot {
        Slot::Ticket {
            weight,
            capacity,
            resizable,
        } => (
            weight,
            Capacity {
                permits: capacity,
                resizable,
            },
        ),
        Slot::Write | Slot::Read => (
            1,
            Capacity {
                permits: 1,
                resizable: false,
            },
        ),
    }
}

/// A permit change (`queue_set_permits.lua`): `=<n>`, `+<n>` or `-<n>`, then the base count a
/// relative change starts from while none is stored (for `=<n>`, `n` itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change(pub PermitChange);

impl ToRedisArgs for Change {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let (op, n, base) = match self.0 {
            PermitChange::Set(n) => ('=', n, n),
            PermitChange::Add { by, base } => ('+', by, base),
            PermitChange::Forget { by, base } => ('-', by, base),
        };
        out.write_arg_fmt(format_args!("{op}{n}"));
        base.write_redis_args(out);
    }

    fn num_of_args(&self) -> usize {
        2
    }
}

/// Declares the argument list of one script (`ARGV[3]` on, in field order) and writes it.
macro_rules! script_args {
    ($(#[$doc:meta])* $name:ident $(<$lt:lifetime>)? { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name $(<$lt>)? {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl $(<$lt>)? ToRedisArgs for $name $(<$lt>)? {
            fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
                $(self.$field.write_redis_args(out);)*
            }

            fn num_of_args(&self) -> usize {
                0 $(+ self.$field.num_of_args())*
            }
        }
    };
}

/// Every argument of a script: the prelude's `now` and publish command (`ARGV[1]`,
/// `ARGV[2]`), then the step's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Argv<A> {
    /// `ARGV[1]`.
    pub now: Now,
    /// `ARGV[2]`.
    pub publish: Publish,
    /// `ARGV[3]` on.
    pub step: A,
}

impl<A: ToRedisArgs> ToRedisArgs for Argv<A> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        self.now.write_redis_args(out);
        self.publish.write_redis_args(out);
        self.step.write_redis_args(out);
    }

    fn num_of_args(&self) -> usize {
        2 + self.step.num_of_args()
    }
}

/// The arguments of steps with nothing beyond the prelude (`rw_inspect`, `queue_inspect`,
/// `force_release`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoArgs;

impl ToRedisArgs for NoArgs {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, _out: &mut W) {}

    fn num_of_args(&self) -> usize {
        0
    }
}

script_args! {
    /// `rw_acquire.lua`.
    RwAcquireArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        mode: Mode,
        /// `ARGV[5]`.
        lease: Ms,
        /// `ARGV[6]`.
        policy: PolicyArg,
        /// `ARGV[7]`.
        wait: Wait,
        /// `ARGV[8]`.
        heartbeat: Ms,
    }
}

impl<'a> RwAcquireArgs<'a> {
    /// The arguments of one attempt of `claim`.
    pub fn new(claim: &'a Claim, wait: bool) -> Self {
        RwAcquireArgs {
            token: &claim.token,
            mode: Mode::of(claim.slot),
            lease: Ms(claim.lease),
            policy: PolicyArg(claim.policy),
            wait: Wait(wait),
            heartbeat: Ms(claim.heartbeat),
        }
    }
}

script_args! {
    /// `rw_release.lua`.
    RwReleaseArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        hand_over: HandOver,
    }
}

script_args! {
    /// `rw_extend.lua`.
    RwExtendArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        lease: Ms,
        /// `ARGV[5]`.
        mode: Mode,
        /// `ARGV[6]`.
        renewal: Renewal,
    }
}

impl<'a> RwExtendArgs<'a> {
    /// The arguments of a renewal of `claim` to `lease`.
    pub fn new(claim: &'a Claim, lease: Duration, renewal: Renewal) -> Self {
        RwExtendArgs {
            token: &claim.token,
            lease: Ms(lease),
            mode: Mode::of(claim.slot),
            renewal,
        }
    }
}

script_args! {
    /// `rw_downgrade.lua`.
    RwDowngradeArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`: the lease of the read hold.
        lease: Ms,
    }
}

script_args! {
    /// `queue_acquire.lua`.
    QueueAcquireArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        weight: u32,
        /// `ARGV[5]`.
        lease: Ms,
        /// `ARGV[6]`.
        heartbeat: Ms,
        /// `ARGV[7]`.
        capacity: Capacity,
        /// `ARGV[8]`.
        wait: Wait,
    }
}

impl<'a> QueueAcquireArgs<'a> {
    /// The arguments of one attempt of `claim`.
    pub fn new(claim: &'a Claim, wait: bool) -> Self {
        let (weight, capacity) = ticket(claim.slot);
        QueueAcquireArgs {
            token: &claim.token,
            weight,
            lease: Ms(claim.lease),
            heartbeat: Ms(claim.heartbeat),
            capacity,
            wait: Wait(wait),
        }
    }
}

script_args! {
    /// `queue_release.lua`.
    QueueReleaseArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        weight: u32,
        /// `ARGV[5]`: the claim window of waiters granted by this release.
        heartbeat: Ms,
        /// `ARGV[6]`.
        capacity: Capacity,
    }
}

impl<'a> QueueReleaseArgs<'a> {
    /// The arguments of the release of `claim`.
    pub fn new(claim: &'a Claim) -> Self {
        let (weight, capacity) = ticket(claim.slot);
        QueueReleaseArgs {
            token: &claim.token,
            weight,
            heartbeat: Ms(claim.heartbeat),
            capacity,
        }
    }
}

script_args! {
    /// `queue_extend.lua`.
    QueueExtendArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        weight: u32,
        /// `ARGV[5]`.
        lease: Ms,
        /// `ARGV[6]`.
        renewal: Renewal,
    }
}

impl<'a> QueueExtendArgs<'a> {
    /// The arguments of a renewal of `claim` to `lease`.
    pub fn new(claim: &'a Claim, lease: Duration, renewal: Renewal) -> Self {
        QueueExtendArgs {
            token: &claim.token,
            weight: ticket(claim.slot).0,
            lease: Ms(lease),
            renewal,
        }
    }
}

script_args! {
    /// `queue_downgrade.lua`.
    QueueDowngradeArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`: the exclusive weight held.
        weight: u32,
        /// `ARGV[5]`: the lease of the shared hold.
        lease: Ms,
        /// `ARGV[6]`.
        heartbeat: Ms,
        /// `ARGV[7]`.
        capacity: Capacity,
    }
}

impl<'a> QueueDowngradeArgs<'a> {
    /// The arguments of the downgrade of `claim`.
    pub fn new(claim: &'a Claim) -> Self {
        let (weight, capacity) = ticket(claim.slot);
        QueueDowngradeArgs {
            token: &claim.token,
            weight,
            lease: Ms(claim.lease),
            heartbeat: Ms(claim.heartbeat),
            capacity,
        }
    }
}

script_args! {
    /// `queue_set_permits.lua`.
    SetPermitsArgs {
        /// `ARGV[3]` and `ARGV[4]`.
        change: Change,
        /// `ARGV[5]`: the claim window of waiters granted by the change.
        heartbeat: Ms,
    }
}

script_args! {
    /// `raise_fence.lua`.
    RaiseFenceArgs {
        /// `ARGV[3]`: the value to raise the counter to.
        fence: u64,
        /// `ARGV[4]`: how long the counter lives at least (the grant's lease).
        keep: Ms,
    }
}

/// What `election_proclaim.lua` does: `p` sets the value, `r` retracts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProclaimMode {
    /// `p`.
    Proclaim,
    /// `r`.
    Retract,
}

impl ToRedisArgs for ProclaimMode {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        write_text(
            out,
            match self {
                ProclaimMode::Proclaim => "p",
                ProclaimMode::Retract => "r",
            },
        );
    }
}

script_args! {
    /// `election_proclaim.lua`.
    ProclaimArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        mode: ProclaimMode,
        /// `ARGV[5]`: the value (empty for a retract).
        value: &'a str,
    }
}

impl<'a> ProclaimArgs<'a> {
    /// Sets `value` for `claim`'s token, or retracts the token's value (`None`).
    pub fn new(claim: &'a Claim, value: Option<&'a str>) -> Self {
        ProclaimArgs {
            token: &claim.token,
            mode: match value {
                Some(_) => ProclaimMode::Proclaim,
                None => ProclaimMode::Retract,
            },
            value: value.unwrap_or(""),
        }
    }
}

/// The mode of each part of a multi-lock, one letter per part (`w` or `r`, as [`Mode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Modes<'a>(pub &'a [crate::vocab::claim::Part]);

impl ToRedisArgs for Modes<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let modes: String = self
            .0
            .iter()
            .map(|part| match Mode::of(part.slot) {
                Mode::Write => 'w',
                Mode::Read => 'r',
            })
            .collect();
        write_text(out, &modes);
    }
}

script_args! {
    /// `multi_acquire.lua`.
    MultiAcquireArgs<'a> {
        /// `ARGV[3]`.
        token: &'a str,
        /// `ARGV[4]`.
        lease: Ms,
        /// `ARGV[5]`.
        policy: PolicyArg,
        /// `ARGV[6]`.
        modes: Modes<'a>,
    }
}

impl<'a> MultiAcquireArgs<'a> {
    /// The arguments of one attempt of `claim` over `parts`.
    pub fn new(claim: &'a Claim, parts: &'a [crate::vocab::claim::Part]) -> Self {
        MultiAcquireArgs {
            token: &claim.token,
            lease: Ms(claim.lease),
            policy: PolicyArg(claim.policy),
            modes: Modes(parts),
        }
    }
}

// ---- script replies -------------------------------------------------------------------------

fn malformed(what: &str, v: &Value) -> ParsingError {
    ParsingError::from(format!("{what}: {v:?}"))
}

/// The elements of an array reply (an empty Lua table may come back as nil).
fn items<'v>(v: &'v Value, what: &str) -> Result<&'v [Value], ParsingError> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(&[]),
        other => Err(malformed(&format!("{what} is not an array"), other)),
    }
}

/// An integer (scripts answer Lua numbers as integers).
fn int(v: &Value, what: &str) -> Result<i64, ParsingError> {
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
fn natural(v: &Value, what: &str) -> Result<u64, ParsingError> {
    let i = int(v, what)?;
    u64::try_from(i).map_err(|_| malformed(&format!("{what} is negative"), v))
}

/// A non-negative integer, or `-1` for none.
fn optional(v: &Value, what: &str) -> Result<Option<u64>, ParsingError> {
    match int(v, what)? {
        -1 => Ok(None),
        i => u64::try_from(i)
            .map(Some)
            .map_err(|_| malformed(&format!("{what} is negative"), v)),
    }
}

/// A string (a token or member).
fn text(v: &Value, what: &str) -> Result<String, ParsingError> {
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
fn rows<'v>(
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
    }))
});

/// A member as a (token, weight) pair, from a reply.
fn member(v: &Value, what: &str) -> Result<(String, u32), ParsingError> {
    let text = text(v, what)?;
    let m = Member::parse(&text).ok_or_else(|| malformed(&format!("{what} weight"), v))?;
    Ok((m.token.to_owned(), m.weight))
}

/// The reply of `queue_inspect.lua`: `{now, fence, permits or -1, {holder_member,
/// remaining_ms, ...}, {waiter_member, ticket, heartbeat_remaining_ms, ...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TicketQueueView(pub Snapshot);

from_value_ref!(TicketQueueView, |v| {
    const WHAT: &str = "ticket queue inspect reply";
    let [now, fence, permits, holders, waiters] = items(v, WHAT)? else {
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
    Ok(TicketQueueView(Snapshot {
        now_ms: natural(now, "now")?,
        fence: natural(fence, "fence")?,
        permits,
        holders,
        waiters,
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

// ---- error replies --------------------------------------------------------------------------

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
    const ALL: [Code; 5] = [
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
const MIXED_LEASE: &str = "lease: the name is held through the lease lock";
const MIXED_QUEUE: &str = "queue: the name is held through the ticket queue";

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
            Code::Corrupt => Some(ErrorReply::Corrupt(detail.to_owned())),
            Code::Arg => Some(ErrorReply::Arg(detail.to_owned())),
            code => Refusal::parse(code, detail).map(ErrorReply::Refused),
        }
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

pub(crate) mod rate;

#[cfg(test)]
mod tests {
    use super::*;

    // ---- encoders of what the scripts write, for round trips ----------------------------

    fn int_v(i: i64) -> Value {
        Value::Int(i)
    }

    fn text_v(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn opt_v(o: Option<u64>) -> Value {
        o.map_or(int_v(-1), |n| int_v(n as i64))
    }

    /// What `rw_acquire.lua` and `queue_acquire.lua` return for `reply`.
    fn acquire_value(reply: &Acquire) -> Value {
        match *reply {
            Acquire::Granted(g) => int_v(g.fence as i64),
            Acquire::Busy(b) => Value::Array(vec![
                int_v(0),
                opt_v(b.retry_after.map(ms)),
                opt_v(b.position),
                opt_v(b.heartbeat_until),
            ]),
        }
    }

    /// What `rw_inspect.lua` returns for a lease-lock snapshot.
    fn lease_view_value(s: &Snapshot) -> Value {
        let (writer, left) = s
            .holders
            .iter()
            .find(|h| h.kind == HoldKind::Write)
            .map_or(("", 0), |h| (h.token.as_str(), h.remaining_ms));
        let readers = s
            .holders
            .iter()
            .filter(|h| h.kind == HoldKind::Read)
            .flat_map(|h| [text_v(&h.token), int_v(h.remaining_ms as i64)])
            .collect();
        let waiting = s
            .waiters
            .iter()
            .flat_map(|w| [text_v(&w.token), int_v(w.heartbeat_remaining_ms as i64)])
            .collect();
        Value::Array(vec![
            int_v(s.now_ms as i64),
            int_v(s.fence as i64),
            text_v(writer),
            int_v(left as i64),
            Value::Array(readers),
            Value::Array(waiting),
        ])
    }

    /// What `queue_inspect.lua` returns for a ticket-queue snapshot.
    fn queue_view_value(s: &Snapshot) -> Value {
        let holders = s
            .holders
            .iter()
            .flat_map(|h| {
                let HoldKind::Permits(weight) = h.kind else {
                    panic!("a ticket holder holds permits")
                };
                let m = Member {
                    token: &h.token,
                    weight,
                };
                [text_v(&m.to_string()), int_v(h.remaining_ms as i64)]
            })
            .collect();
        let waiters = s
            .waiters
            .iter()
            .flat_map(|w| {
                let m = Member {
                    token: &w.token,
                    weight: w.weight,
                };
                [
                    text_v(&m.to_string()),
                    int_v(w.ticket as i64),
                    int_v(w.heartbeat_remaining_ms as i64),
                ]
            })
            .collect();
        Value::Array(vec![
            int_v(s.now_ms as i64),
            int_v(s.fence as i64),
            opt_v(s.permits.map(u64::from)),
            Value::Array(holders),
            Value::Array(waiters),
        ])
    }

    fn args(a: impl ToRedisArgs) -> Vec<String> {
        let n = a.num_of_args();
        let out: Vec<String> = a
            .to_redis_args()
            .into_iter()
            .map(|b| String::from_utf8(b).expect("utf-8 argument"))
            .collect();
        assert_eq!(out.len(), n, "num_of_args of {out:?}");
        out
    }

    // ---- decoders of the arguments, as the scripts read them ----------------------------

    /// `queue_common.lua`'s `capacity_for`: `=` for a fixed capacity, then the count.
    fn capacity_of(arg: &str) -> Capacity {
        let (fixed, n) = match arg.strip_prefix('=') {
            Some(n) => (true, n),
            None => (false, arg),
        };
        Capacity {
            permits: n.parse().expect("capacity count"),
            resizable: !fixed,
        }
    }

    /// `queue_set_permits.lua`'s reading of `ARGV[3]` and `ARGV[4]`.
    fn change_of(op_n: &str, base: &str) -> PermitChange {
        let (op, n) = op_n.split_at(1);
        let (n, base) = (n.parse().expect("n"), base.parse().expect("base"));
        match op {
            "=" => PermitChange::Set(n),
            "+" => PermitChange::Add { by: n, base },
            "-" => PermitChange::Forget { by: n, base },
            other => panic!("unknown op {other}"),
        }
    }

    fn claim(slot: Slot, policy: Policy) -> Claim {
        Claim {
            token: "tok-1".to_owned(),
            slot,
            lease: Duration::from_micros(1_500_700),
            heartbeat: Duration::from_millis(250),
            policy,
        }
    }

    // ---- round trips -------------------------------------------------------------------

    #[test]
    fn member_round_trip() {
        for (token, weight) in [("a", 1), ("tok_-9", 2), ("x", 1 << 30), ("7", u32::MAX)] {
            let m = Member { token, weight };
            let text = m.to_string();
            assert_eq!(Member::parse(&text), Some(m), "{text}");
        }
        assert_eq!(
            Member {
                token: "t",
                weight: 1
            }
            .to_string(),
            "t"
        );
        assert_eq!(
            Member {
                token: "t",
                weight: 3
            }
            .to_string(),
            "t#3"
        );
        // As weight_of/token_of in queue_common.lua read them.
        assert_eq!(
            Member::parse("a#b"),
            Some(Member {
                token: "a#b",
                weight: 1
            })
        );
        assert_eq!(
            Member::parse("a#"),
            Some(Member {
                token: "a#",
                weight: 1
            })
        );
        assert_eq!(Member::parse("a#99999999999"), None);
    }

    #[test]
    fn wake_up_round_trip() {
        assert_eq!(WakeUp::All.to_string(), "*");
        assert_eq!(WakeUp::parse("*"), WakeUp::All);
        let grants = WakeUp::Named(vec![
            Named::granted(
                "tokA",
                HandOff {
                    fence: 7,
                    until: Some(1_000_250),
                },
            ),
            Named::granted(
                "tokB",
                HandOff {
                    fence: 7,
                    until: Some(0),
                },
            ),
        ]);
        let text = grants.to_string();
        assert_eq!(text, "tokA=7@1000250 tokB=7@0");
        assert_eq!(WakeUp::parse(&text), grants);
        let bare = WakeUp::Named(vec![
            Named {
                token: "plain".into(),
                grant: None,
            },
            Named {
                token: "fenced".into(),
                grant: Some(HandOff {
                    fence: 3,
                    until: None,
                }),
            },
        ]);
        assert_eq!(bare.to_string(), "plain fenced=3");
        assert_eq!(WakeUp::parse(&bare.to_string()), bare);
        // A grant that does not parse still names its waiter.
        assert_eq!(
            WakeUp::parse("t=x@1"),
            WakeUp::Named(vec![Named {
                token: "t".into(),
                grant: None
            }])
        );
        assert_eq!(WakeUp::parse(""), WakeUp::Named(vec![]));
    }

    #[test]
    fn prelude_arguments() {
        let argv = Argv {
            now: Now(None),
            publish: Publish::Plain,
            step: NoArgs,
        };
        assert_eq!(args(argv), ["", "PUBLISH"]);
        let argv = Argv {
            now: Now(Some(1_700_000_000_123)),
            publish: Publish::Sharded,
            step: RaiseFenceArgs {
                fence: 42,
                keep: Ms(Duration::from_millis(1500)),
            },
        };
        assert_eq!(args(argv), ["1700000000123", "SPUBLISH", "42", "1500"]);
    }

    #[test]
    fn small_argument_values_round_trip() {
        for (slot, text) in [(Slot::Write, "w"), (Slot::Read, "r")] {
            assert_eq!(args(Mode::of(slot)), [text]);
        }
        assert_eq!(args(PolicyArg(Policy::Writer)), ["writer"]);
        assert_eq!(args(PolicyArg(Policy::Reader)), ["reader"]);
        for b in [true, false] {
            // queue_acquire.lua: `== '1'`; rw_release.lua: `~= '0'`.
            assert_eq!(args(Wait(b))[0] == "1", b);
            assert_eq!(args(HandOver(b))[0] != "0", b);
        }
        assert_eq!(args(Ms(Duration::from_micros(1_999))), ["1"]);
        for capacity in [
            Capacity {
                permits: 5,
                resizable: true,
            },
            Capacity {
                permits: 1 << 30,
                resizable: false,
            },
        ] {
            assert_eq!(capacity_of(&args(capacity)[0]), capacity);
        }
        for change in [
            PermitChange::Set(4),
            PermitChange::Add { by: 2, base: 5 },
            PermitChange::Forget {
                by: u32::MAX,
                base: MAX_PERMITS,
            },
        ] {
            let a = args(Change(change));
            assert_eq!(change_of(&a[0], &a[1]), change, "{a:?}");
        }
    }

    #[test]
    fn script_arguments_in_argv_order() {
        let writer = claim(Slot::Write, Policy::Writer);
        assert_eq!(
            args(RwAcquireArgs::new(&writer, true)),
            ["tok-1", "w", "1500", "writer", "1", "250"]
        );
        let reader = claim(Slot::Read, Policy::Reader);
        assert_eq!(
            args(RwAcquireArgs::new(&reader, false)),
            ["tok-1", "r", "1500", "reader", "0", "250"]
        );
        assert_eq!(
            args(RwExtendArgs::new(
                &reader,
                Duration::from_secs(2),
                Renewal::Set
            )),
            ["tok-1", "2000", "r", "set"]
        );
        assert_eq!(
            args(RwReleaseArgs {
                token: "tok-1",
                hand_over: HandOver(false)
            }),
            ["tok-1", "0"]
        );
        assert_eq!(
            args(RwDowngradeArgs {
                token: "tok-1",
                lease: Ms(writer.lease)
            }),
            ["tok-1", "1500"]
        );
        let sem = claim(
            Slot::Ticket {
                weight: 2,
                capacity: 5,
                resizable: true,
            },
            Policy::Writer,
        );
        assert_eq!(
            args(QueueAcquireArgs::new(&sem, true)),
            ["tok-1", "2", "1500", "250", "5", "1"]
        );
        assert_eq!(
            args(QueueReleaseArgs::new(&sem)),
            ["tok-1", "2", "250", "5"]
        );
        assert_eq!(
            args(QueueExtendArgs::new(
                &sem,
                Duration::from_millis(900),
                Renewal::Keep
            )),
            ["tok-1", "2", "900", "keep"]
        );
        let fair_writer = claim(
            Slot::Ticket {
                weight: 1 << 30,
                capacity: 1 << 30,
                resizable: false,
            },
            Policy::Writer,
        );
        assert_eq!(
            args(QueueDowngradeArgs::new(&fair_writer)),
            ["tok-1", "1073741824", "1500", "250", "=1073741824"]
        );
        assert_eq!(
            args(SetPermitsArgs {
                change: Change(PermitChange::Forget { by: 1, base: 3 }),
                heartbeat: Ms(Duration::from_millis(100)),
            }),
            ["-1", "3", "100"]
        );
    }

    #[test]
    fn acquire_reply_round_trip() {
        let replies = [
            Acquire::Granted(Grant {
                fence: 0,
                lease: Duration::from_millis(1500),
            }),
            Acquire::Granted(Grant {
                fence: 1 << 40,
                lease: Duration::from_millis(1),
            }),
            Acquire::Busy(Busy {
                retry_after: Some(Duration::from_millis(120)),
                position: None,
                heartbeat_until: Some(1_000_250),
            }),
            Acquire::Busy(Busy {
                retry_after: None,
                position: Some(0),
                heartbeat_until: None,
            }),
        ];
        for reply in replies {
            let lease = match reply {
                Acquire::Granted(g) => g.lease,
                Acquire::Busy(_) => Duration::from_secs(1),
            };
            let parsed = AcquireReply::from_redis_value(acquire_value(&reply));
            assert_eq!(parsed.map(|r| r.outcome(lease)), Ok(reply));
        }
    }

    #[test]
    fn small_replies_round_trip() {
        for fence in [None, Some(0), Some(9)] {
            let v = Value::Array(vec![
                int_v(fence.is_some().into()),
                int_v(fence.unwrap_or(0) as i64),
            ]);
            assert_eq!(
                DowngradeReply::from_redis_value(v),
                Ok(DowngradeReply(fence))
            );
        }
        for b in [true, false] {
            assert_eq!(Flag::from_redis_value(int_v(b.into())), Ok(Flag(b)));
        }
        assert_eq!(Fence::from_redis_value(int_v(12)), Ok(Fence(12)));
        for n in [1, MAX_PERMITS] {
            let v = int_v(n.into());
            assert_eq!(Permits::from_redis_value(v), Ok(Permits(n)));
        }
    }

    #[test]
    fn inspect_replies_round_trip() {
        let holder = |token: &str, kind, remaining_ms| HolderState {
            token: token.to_owned(),
            kind,
            remaining_ms,
        };
        let waiter = |token: &str, weight, ticket, heartbeat_remaining_ms| WaiterState {
            token: token.to_owned(),
            weight,
            ticket,
            heartbeat_remaining_ms,
        };
        let lease = [
            Snapshot {
                now_ms: 1_000_000,
                fence: 4,
                permits: None,
                holders: vec![holder("w1", HoldKind::Write, 30)],
                waiters: vec![waiter("w2", 1, 0, 5), waiter("w3", 1, 0, 6)],
            },
            Snapshot {
                now_ms: 5,
                fence: 0,
                permits: None,
                holders: vec![
                    holder("r1", HoldKind::Read, 1),
                    holder("r2", HoldKind::Read, 2),
                ],
                waiters: vec![],
            },
        ];
        for s in lease {
            let parsed = LeaseLockView::from_redis_value(lease_view_value(&s));
            assert_eq!(parsed, Ok(LeaseLockView(s)));
        }
        let queue = [
            Snapshot {
                now_ms: 1_000_000,
                fence: 2,
                permits: Some(5),
                holders: vec![
                    holder("a", HoldKind::Permits(1), 10),
                    holder("b", HoldKind::Permits(3), 20),
                ],
                waiters: vec![waiter("c", 2, 1, 7), waiter("d", 1, 2, 8)],
            },
            Snapshot {
                now_ms: 0,
                fence: 0,
                permits: None,
                holders: vec![],
                waiters: vec![],
            },
        ];
        for s in queue {
            let parsed = TicketQueueView::from_redis_value(queue_view_value(&s));
            assert_eq!(parsed, Ok(TicketQueueView(s)));
        }
    }

    #[test]
    fn malformed_replies_are_errors() {
        let bad = [
            Value::Nil,
            Value::Array(vec![int_v(2), int_v(1), int_v(1)]),
            Value::Array(vec![int_v(1), int_v(-3), int_v(1)]),
            Value::Array(vec![int_v(0), int_v(-2), int_v(-1), int_v(-1)]),
            Value::Array(vec![int_v(1), int_v(1)]),
            Value::Array(vec![text_v("x"), int_v(1), int_v(1)]),
            // The old grant table, and a negative fence.
            Value::Array(vec![int_v(1), int_v(7), int_v(1000)]),
            int_v(-1),
        ];
        for v in bad {
            assert!(AcquireReply::from_redis_value(v.clone()).is_err(), "{v:?}");
        }
        assert!(Flag::from_redis_value(int_v(2)).is_err());
        assert!(Fence::from_redis_value(int_v(-1)).is_err());
        assert!(Permits::from_redis_value(int_v(0)).is_err());
        assert!(Permits::from_redis_value(int_v(i64::from(MAX_PERMITS) + 1)).is_err());
        assert!(DowngradeReply::from_redis_value(Value::Array(vec![int_v(1)])).is_err());
        let odd = Value::Array(vec![
            int_v(1),
            int_v(0),
            text_v(""),
            int_v(0),
            Value::Array(vec![text_v("r1")]),
            Value::Array(vec![]),
        ]);
        assert!(LeaseLockView::from_redis_value(odd).is_err());
        let big = Value::Array(vec![
            int_v(1),
            int_v(0),
            int_v(-1),
            Value::Array(vec![text_v("a#99999999999"), int_v(1)]),
            Value::Array(vec![]),
        ]);
        assert!(TicketQueueView::from_redis_value(big).is_err());
    }

    #[test]
    fn error_replies_round_trip() {
        for code in Code::ALL {
            assert_eq!(Code::parse(code.as_str()), Some(code));
        }
        let refusals = [
            Refusal::Mixed {
                held_by: Family::LeaseLock,
            },
            Refusal::Mixed {
                held_by: Family::TicketQueue,
            },
            Refusal::capacity("3 (set_permits, resizable)", 1),
            Refusal::TooManyPermits {
                asked: 4,
                capacity: 3,
            },
            Refusal::PermitCount { count: -2 },
            Refusal::PermitCount {
                count: i64::from(MAX_PERMITS) + 1,
            },
        ];
        for refusal in refusals {
            let text = refusal.to_string();
            let (code, detail) = text.split_once(' ').expect("code and detail");
            assert_eq!(
                ErrorReply::parse(code, detail),
                Some(ErrorReply::Refused(refusal)),
                "{text}"
            );
        }
        assert_eq!(
            ErrorReply::parse("RLCORRUPT", "key k does not hold a counter"),
            Some(ErrorReply::Corrupt("key k does not hold a counter".into()))
        );
        assert_eq!(
            ErrorReply::parse("RLARG", "bad"),
            Some(ErrorReply::Arg("bad".into()))
        );
        assert_eq!(ErrorReply::parse("RLMIXED", "somewhere: else"), None);
        assert_eq!(ErrorReply::parse("RLPERMITS", "too many"), None);
        assert_eq!(ErrorReply::parse("WRONGTYPE", "x"), None);
    }

    /// The scripts write the same formats: each literal the Rust side relies on appears in
    /// the script that produces it.
    #[test]
    fn scripts_write_these_formats() {
        let source = |name: &str| {
            crate::wire::scripts::sources()
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.as_str())
                .unwrap_or_else(|| panic!("no script {name}"))
        };
        assert!(source("rw_acquire").contains(&format!("'RLMIXED {MIXED_QUEUE}'")));
        assert!(source("queue_acquire").contains(&format!("'RLMIXED {MIXED_LEASE}'")));
        assert!(source("queue_acquire")
            .contains("'RLPERMITS asked for ' .. weight .. ' permits of ' .. cap"));
        assert!(source("queue_set_permits").contains(&format!("local MAX_PERMITS = {MAX_PERMITS}")));
        assert!(source("queue_set_permits").contains("'RLPERMITS count '"));
        assert!(source("queue_set_permits").contains("' out of range'"));
        for name in ["rw_release", "force_release"] {
            assert!(source(name).contains("'*'"), "{name} wakes everyone with *");
        }
        assert!(source("queue_acquire").contains("token .. '#' .. weight"));
    }
}
