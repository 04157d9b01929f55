//! Layer 3, the engine: the acquire loop, holds and their renewal, telemetry. Imports the
//! vocabulary, the wire and the stores; the public API sits on top of it.

pub(crate) mod hold;
pub(crate) mod lease;
pub(crate) mod leftover;
pub(crate) mod owner;
pub(crate) mod pending;
pub(crate) mod rate;
pub(crate) mod telemetry;
pub(crate) mod wait;
