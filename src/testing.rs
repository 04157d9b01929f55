//! Hooks for deterministic tests of code built on this crate (feature `testing`).
//!
//! Not for production: these switches change how the library behaves.
//!
//! - [`seed`] makes claim tokens and waiter jitter a function of the seed, so a simulation on
//!   tokio's paused clock replays exactly.
//! - [`plant`] reverts one of the client-side fixes that keep guards honest, so a check can
//!   prove that it finds the bug (see `tests/simulation.rs`).
//! - [`local_hub`], [`divert`] and [`deliver`] let a test store sit between a
//!   [`MemoryStore`](store::MemoryStore) and its clients' wake-ups: it takes what the
//!   store publishes and delivers it to each client's own hub late, out of order or never.
//! - [`store`] and [`keys`] expose the protocol steps behind the handles (the [`store::Store`]
//!   contract, its Redis, quorum and in-memory implementations, and the explicit clock the
//!   model checks use), and [`script_sources`] the Lua scripts. An explicit `now` turns off
//!   key TTLs: never point these at a production server.

#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU32, Ordering};
#[cfg(feature = "testing")]
use std::sync::Arc;

#[cfg(feature = "testing")]
pub use crate::hub::WakeHub;
#[cfg(feature = "testing")]
pub use crate::scripts::{
    sources as script_sources, sources_of_variant, Variant as ScriptVariant, PROBE_CHANNEL,
};

/// The store contract: one method per protocol step, and its implementations.
#[cfg(feature = "testing")]
pub mod store {
    pub use crate::store::*;
}

/// Key naming: every key of a lock under `<prefix>:{<name>}:`.
#[cfg(feature = "testing")]
pub mod keys {
    pub use crate::keys::*;
}

/// A client-side fix that a test may revert, to prove its check finds the bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bug {
    /// A handed-over hold trusts the waiter's whole heartbeat window, even when the lease is
    /// shorter, and a confirmed renewal only ever raises the trust (so the claim that sets the
    /// server deadline to the shorter lease does not lower it).
    HandOffTrustsHeartbeat,
    /// A wake-up's grant is used even after a later attempt of the same claim was refused.
    StaleGrant,
    /// Renewals and `extend` run concurrently and the local deadline only ever grows.
    UnorderedRenewals,
    /// The default heartbeat window is 5 s whatever the lease, so a waiter that died (its queue
    /// place, its writer announcement, a grant handed to it) blocks others for up to 5 s.
    DeadWaiterBlocks,
    /// A renewal reads the instant it gives up at (the trust end) before it waits behind an
    /// `extend`, so it may give up, and mark the hold lost, at a trust the `extend` raised.
    StaleRenewalGiveUp,
    /// A downgrade's reply is trusted even when the hold was released (`release_all`) or lost
    /// while the request was on its way.
    DowngradeIgnoresLoss,
    /// An `extend` moves the hold's renewals to the runtime it was called from, even while the
    /// granting runtime lives; they end with that runtime.
    RenewalsFollowTheCaller,
    /// A waiter waits for its channel's subscription with no deadline of its own.
    UnboundedSubscribe,
}

impl Bug {
    #[cfg(feature = "testing")]
    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

#[cfg(feature = "testing")]
static PLANTED: AtomicU32 = AtomicU32::new(0);

/// Reverts the fix for `bug` in this process (until [`unplant_all`]).
#[cfg(feature = "testing")]
pub fn plant(bug: Bug) {
    PLANTED.fetch_or(bug.bit(), Ordering::SeqCst);
}

/// Restores every fix.
#[cfg(feature = "testing")]
pub fn unplant_all() {
    PLANTED.store(0, Ordering::SeqCst);
}

/// Restarts the token and jitter generator from `seed`: the same program then makes the
/// same tokens and sleeps the same jittered intervals.
#[cfg(feature = "testing")]
pub fn seed(seed: u64) {
    crate::token::reseed(seed);
}

/// A wake-up hub for a [`Store`](store::Store) written in a test, like
/// `MemoryStore`'s own: in process, every channel counts as subscribed. Return it from the
/// store's `hub()` and feed it with [`deliver`].
#[cfg(feature = "testing")]
pub fn local_hub() -> Arc<WakeHub> {
    WakeHub::local()
}

/// A wake-up hub like a Redis connection's, whose subscriptions take as long as
/// `stall(channel)` says (a test's stalled or slow subscription path); unsubscribing is
/// immediate. Messages reach its waiters by [`deliver`], subscribed or not. Call it inside a
/// tokio runtime: the hub's task runs there.
#[cfg(feature = "testing")]
pub fn stalling_hub(
    stall: impl Fn(&str) -> std::time::Duration + Send + Sync + 'static,
) -> Arc<WakeHub> {
    struct Stalling<F>(F);
    #[async_trait::async_trait]
    impl<F: Fn(&str) -> std::time::Duration + Send + Sync + 'static> crate::hub::Subscriber
        for Stalling<F>
    {
        async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
            tokio::time::sleep((self.0)(channel)).await;
            Ok(())
        }
        async fn unsubscribe(&self, _: &str) -> redis::RedisResult<()> {
            Ok(())
        }
    }
    let hub = WakeHub::remote();
    hub.start(Box::new(Stalling(stall)));
    hub
}

/// From now on, every message published into `hub` (e.g. `MemoryStore::hub()`) goes to
/// `tap(channel, message)` instead of the hub's waiters, so the test decides when, and
/// whether, to [`deliver`] it. One tap per hub: false (and `tap` unused) if it had one.
#[cfg(feature = "testing")]
pub fn divert(hub: &WakeHub, tap: impl Fn(&str, &str) + Send + Sync + 'static) -> bool {
    hub.divert(Box::new(tap))
}

/// Delivers one wake-up message to the waiters registered in `hub` (a tap, if any, is
/// bypassed): `*` wakes all waiters of `channel`, otherwise the space-separated tokens named,
/// `token=fence` also handing that waiter the grant.
#[cfg(feature = "testing")]
pub fn deliver(hub: &WakeHub, channel: &str, message: &str) {
    hub.deliver(channel, message);
}

/// True when a test reverted the fix for `bug` (never without the `testing` feature).
#[inline]
pub(crate) fn planted(bug: Bug) -> bool {
    #[cfg(feature = "testing")]
    {
        PLANTED.load(Ordering::Relaxed) & bug.bit() != 0
    }
    #[cfg(not(feature = "testing"))]
    {
        let _ = bug;
        false
    }
}
