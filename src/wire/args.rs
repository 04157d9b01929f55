//! Script arguments: the prelude's [`Argv`] and one struct per script, in `ARGV` order.

use super::*;

/// Writes one argument: `""` for no value (the prelude's "use the server clock").
pub(super) fn write_text<W: ?Sized + RedisWrite>(out: &mut W, text: &str) {
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

/// How a renewal sets the hold's deadline: `keep` (an `extend`, a resume's or an automatic
/// renewal: the later of now + lease and the deadline the hold has, never shorter), or a
/// hand-off's claim (now + lease while the hold still has the hand-off's deadline, else
/// `keep`). No request but a claim shortens a hold, so none that lands late (after another
/// client resumed the hold) can cut the lease the resumed guard trusts.
/// [`Renewal::deadline`] is the rule (`renewed_until` in `lua/prelude.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// An `extend`, a resume's or an automatic renewal: never shortens the deadline.
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
    /// A deadline kept is made even too, so a hand-off's window kept past a renewal (another
    /// client's resume) no longer matches that hand-off's late claim.
    pub(crate) fn deadline(self, held: u64, now: u64, lease: u64) -> u64 {
        let set = (now + lease).next_multiple_of(2);
        match self {
            Renewal::Claim(handed) if held == handed => set,
            Renewal::Keep | Renewal::Claim(_) => held.max(set).next_multiple_of(2),
        }
    }

    /// How a retried grant renews a hold its token already has (an acquire by that token:
    /// its reply was lost, or a promoted waiter confirms its hand-off): as a claim naming the
    /// deadline held while it is odd (nothing renewed the hold since its grant), else as a
    /// renewal (`regranted_until` in `lua/prelude.lua`).
    pub(crate) fn regrant(held: u64) -> Renewal {
        match held % 2 {
            1 => Renewal::Claim(held),
            _ => Renewal::Keep,
        }
    }

    /// The same renewal for a read hold, which is never handed over: a claim keeps.
    pub(crate) fn of_reader(self) -> Renewal {
        Renewal::Keep
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
pub(super) fn ticket(slot: Slot) -> (u32, Capacity) {
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
