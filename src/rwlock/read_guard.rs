use crate::guard::guard_methods;
use crate::lease::Hold;

/// A shared hold of an [`RwLock`](crate::RwLock). Its lease is its own: if this reader's
/// process dies, only this reader expires.
///
/// `fencing_token()` is the fence of the last write this read follows.
#[must_use = "dropping the guard releases the read hold in the background; keep it while you read"]
pub struct ReadGuard {
    pub(crate) hold: Hold,
}

guard_methods!(ReadGuard);
