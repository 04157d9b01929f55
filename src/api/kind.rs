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

pub(crate) mod sealed {
    use crate::store::{Request, Slot};

    /// What ties a guard's marker to the request a hold id records.
    pub trait Sealed: Sized {
        /// The request a hold of this kind answers, with the capacity its `slot` carries.
        fn request(&self, slot: Slot) -> Request;
        /// The marker of a guard resumed from a hold id of `request`, if it is this kind.
        fn from_request(request: Request) -> Option<Self>;
    }
}

use crate::store::{Request, Slot};

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

impl sealed::Sealed for Mutex {
    fn request(&self, _slot: Slot) -> Request {
        Request::Mutex
    }
    fn from_request(request: Request) -> Option<Self> {
        matches!(request, Request::Mutex).then_some(Mutex::NEW)
    }
}
impl Kind for Mutex {
    const NAME: &'static str = "Mutex";
}

impl sealed::Sealed for RwLock {
    fn request(&self, slot: Slot) -> Request {
        match slot {
            // Never a guard's marker; answered like the guard of that slot would be.
            Slot::Read => Request::Read(self.preference),
            _ => Request::Write(self.preference),
        }
    }
    fn from_request(_request: Request) -> Option<Self> {
        None
    }
}
impl Kind for RwLock {
    const NAME: &'static str = "RwLock";
}

impl sealed::Sealed for Read {
    fn request(&self, _slot: Slot) -> Request {
        Request::Read(self.preference)
    }
    fn from_request(request: Request) -> Option<Self> {
        match request {
            Request::Read(preference) => Some(Read { preference }),
            _ => None,
        }
    }
}
impl Kind for Read {
    const NAME: &'static str = "Read";
}

impl sealed::Sealed for Write {
    fn request(&self, _slot: Slot) -> Request {
        Request::Write(self.preference)
    }
    fn from_request(request: Request) -> Option<Self> {
        match request {
            Request::Write(preference) => Some(Write { preference }),
            _ => None,
        }
    }
}
impl Kind for Write {
    const NAME: &'static str = "Write";
}

impl sealed::Sealed for FairLock {
    fn request(&self, _slot: Slot) -> Request {
        Request::FairLock
    }
    fn from_request(request: Request) -> Option<Self> {
        matches!(request, Request::FairLock).then_some(FairLock::NEW)
    }
}
impl Kind for FairLock {
    const NAME: &'static str = "FairLock";
}

impl sealed::Sealed for Semaphore {
    fn request(&self, slot: Slot) -> Request {
        Request::Semaphore {
            permits: self.permits,
            capacity: capacity_of(slot, self.permits),
        }
    }
    fn from_request(request: Request) -> Option<Self> {
        match request {
            Request::Semaphore { permits, .. } => Some(Semaphore { permits }),
            _ => None,
        }
    }
}
impl Kind for Semaphore {
    const NAME: &'static str = "Semaphore";
}

/// The permit count of a ticket slot (a Semaphore guard's claim knows its handle's count).
fn capacity_of(slot: Slot, permits: u32) -> u32 {
    match slot {
        Slot::Ticket { capacity, .. } => capacity,
        Slot::Write | Slot::Read => permits,
    }
}
