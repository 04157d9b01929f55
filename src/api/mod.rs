//! Layer 4, the public API: the client, the handles of each primitive, guards, multi-locks,
//! elections and inspection. Imports every layer below; nothing below imports it.

pub(crate) mod client;
pub(crate) mod doctor;
pub(crate) mod election;
pub(crate) mod fair_lock;
pub(crate) mod guard;
#[macro_use]
pub(crate) mod handle;
pub(crate) mod in_memory;
pub(crate) mod info;
pub mod kind;
pub(crate) mod multi;
pub(crate) mod mutex;
pub(crate) mod rate_limiter;
pub(crate) mod resume;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
