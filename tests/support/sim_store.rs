//! The fault-injecting connection the client-side simulations share (`tests/simulation.rs`,
//! `tests/multi_simulation.rs`, `tests/election_simulation.rs`): one client's [`Store`] in
//! front of the shared in-memory server, on a paused clock.
//!
//! Design (the shape; [`Faulty`](super::faulty::Faulty) stays the rule-based wrapper of a real
//! store for the other tests, it knows nothing of virtual time, oracles or wake-up fates):
//!
//! * [`SimConn<L>`] implements every [`Store`] method once: it turns the call into an owned
//!   [`Request`], runs it through one pipeline and turns the [`Reply`] back (a lost reply is
//!   one connection error, [`lost_reply`]). [`Request::apply`] forwards it to the in-memory
//!   store at an explicit `now`.
//! * The pipeline of one request: sent (the link rolls its faults) → on its way (at once,
//!   delayed, or stalled until the link says) → applied by the link at the virtual now (its
//!   oracle checks there) → the reply on its way (at once, delayed, or lost after a while) →
//!   delivered. A dead link black-holes (nothing applied, nothing comes back); a cut link
//!   (partition) fails the request unapplied.
//! * An ordered link behaves like one multiplexed connection: requests are applied in the
//!   order sent and replies delivered in that order (a delay holds up what follows), and a
//!   request once sent is applied even if the caller stops waiting (it runs in its own task).
//!   An unordered link runs each request inline in the caller's future.
//! * Each simulation supplies a [`Link`]: its world, oracle and fault policy (which faults to
//!   roll and when, what applying means for its bookkeeping, what to deliver before a reply).
