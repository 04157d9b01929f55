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
//!   model checks use), and [`script_sources`] the Lua scripts ([`plain_script_sources`] their
//!   plain forms, which a single server runs). An explicit `now` turns off
//!   key TTLs: never point these at a production server.

use std::sync::Arc;

pub use crate::store::hub::WakeHub;
pub use crate::wire::scripts::{
    fast_paths_of, plain_sources as plain_script_sources, sources as script_sources,
    sources_of_variant, Variant as ScriptVariant, PROBE_CHANNEL,
};

/// The store contract: one method per protocol step, and its implementations.
pub mod store {
    pub use crate::store::*;
}

/// Key naming: every key of a lock under `<prefix>:{<name>}:`.
pub mod keys {
    pub use crate::vocab::keys::*;
}

pub use crate::vocab::bugs::{plant, unplant_all, Bug};

/// Restarts the token and jitter generator from `seed`: the same program then makes the
/// same tokens and sleeps the same jittered intervals.
pub fn seed(seed: u64) {
    crate::vocab::token::reseed(seed);
}

/// A wake-up hub for a [`Store`](store::Store) written in a test, like
/// `MemoryStore`'s own: in process, every channel counts as subscribed. Return it from the
/// store's `hub()` and feed it with [`deliver`].
pub fn local_hub() -> Arc<WakeHub> {
    WakeHub::local()
}

/// A wake-up hub like a Redis connection's, whose subscriptions take as long as
/// `stall(channel)` says (a test's stalled or slow subscription path); unsubscribing is
/// immediate. Messages reach its waiters by [`deliver`], subscribed or not. Call it inside a
/// tokio runtime: the hub's task runs there.
pub fn stalling_hub(
    stall: impl Fn(&str) -> std::time::Duration + Send + Sync + 'static,
) -> Arc<WakeHub> {
    struct Stalling<F>(F);
    #[async_trait::async_trait]
    impl<F: Fn(&str) -> std::time::Duration + Send + Sync + 'static> crate::store::hub::Subscriber
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
pub fn divert(hub: &WakeHub, tap: impl Fn(&str, &str) + Send + Sync + 'static) -> bool {
    hub.divert(Box::new(tap))
}

/// Delivers one wake-up message to the waiters registered in `hub` (a tap, if any, is
/// bypassed): `*` wakes all waiters of `channel`, otherwise the space-separated tokens named,
/// `token=fence` also handing that waiter the grant.
pub fn deliver(hub: &WakeHub, channel: &str, message: &str) {
    hub.deliver(channel, message);
}

/// The pure state machine of one hold (its events, effects and trust rules), for the
/// property check that replays event sequences against it (`tests/hold_machine.rs`).
pub mod hold {
    pub use crate::engine::hold::{
        hand_off_window, trusted_until, Answer, Ask, Caller, Effect, Event, HoldState, Outcome,
        Phase, Plan, Planted, Start, Validity,
    };
}

/// Stops `client`'s engine at once, as if its process were killed: its holds are neither
/// renewed nor released any more, and lapse with their leases (a crash simulated in-process).
pub fn crash(client: &crate::LockClient) {
    client.crash_engine();
}
