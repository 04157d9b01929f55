//! Marker types that tell the handles and guards of the primitives apart.
//!
//! Every handle is a [`Lock<K>`](crate::Lock) and every guard a [`Guard<K>`](crate::Guard):
//! the methods all primitives share (options, `fencing_token`, `is_held`, `lost`, `extend`,
//! `release` ...) are written once on the generic type, and each kind adds its own (a
//! [`Mutex`](crate::Mutex) has `lock`, a [`WriteGuard`](crate::WriteGuard) has `downgrade`,
//! a [`Permit`](crate::Permit) has `num_permits`). You normally name the aliases
//! ([`Mutex`](crate::Mutex), [`MutexGuard`](crate::MutexGuard) ...), not these markers;
//! they cannot be made outside the crate.

use std::fmt;

use crate::api::rwlock::Preference;

mod sealed {
    pub trait Sealed {}
}

/// Implemented by every marker of this module (sealed).
pub trait Kind: sealed::Sealed + Clone + fmt::Debug + Send + Sync + 'static {
    /// The type name shown by `Debug`.
    #[doc(hidden)]
    const NAME: &'static str;
}

/// A [`Mutex`](crate::Mutex) handle and its guard, [`MutexGuard`](crate::MutexGuard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mutex {
    _private: (),
}

/// An [`RwLock`](crate::RwLock) handle, with its [`Preference`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RwLock {
    pub(crate) preference: Preference,
}

/// A read guard of an RwLock, [`ReadGuard`](crate::ReadGuard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub(crate) preference: Preference,
}

/// A write guard of an RwLock, [`WriteGuard`](crate::WriteGuard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    pub(crate) preference: Preference,
}

/// A [`FairLock`](crate::FairLock) handle and its guard, [`FairLockGuard`](crate::FairLockGuard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairLock {
    _private: (),
}

/// A [`Semaphore`](crate::Semaphore) handle (with its permit count) and its guard,
/// [`Permit`](crate::Permit) (with the permits it holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Semaphore {
    pub(crate) permits: u32,
}

impl Mutex {
    pub(crate) const NEW: Mutex = Mutex { _private: () };
}

impl FairLock {
    pub(crate) const NEW: FairLock = FairLock { _private: () };
}

impl sealed::Sealed for Mutex {}
impl Kind for Mutex {
    const NAME: &'static str = "Mutex";
}

impl sealed::Sealed for RwLock {}
impl Kind for RwLock {
    const NAME: &'static str = "RwLock";
}

impl sealed::Sealed for Read {}
impl Kind for Read {
    const NAME: &'static str = "Read";
}

impl sealed::Sealed for Write {}
impl Kind for Write {
    const NAME: &'static str = "Write";
}

impl sealed::Sealed for FairLock {}
impl Kind for FairLock {
    const NAME: &'static str = "FairLock";
}

impl sealed::Sealed for Semaphore {}
impl Kind for Semaphore {
    const NAME: &'static str = "Semaphore";
}
