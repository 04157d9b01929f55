//! Holds that cross process boundaries: a guard's [`HoldId`], [`Guard::detach`], and resume
//! (a hold id back into a live guard) on the handles.
//!
//! A resume is one owner-checked step on the server that renews the hold's lease (the
//! store's `extend` of the id's token and slot), and the guard it makes enters the lease
//! owner exactly as a grant's does: trusted from that step's send, renewed on the handle's
//! options. See `docs/decisions/hold-ids.md`.

use crate::api::guard::Guard;
use crate::api::handle::Lock;
use crate::api::kind::{self, Kind};
use crate::api::multi::{MultiGuard, MultiLock};
use crate::engine::lease::Hold;
use crate::engine::wait::LockCtx;
use crate::store::{Request, Slot};
use crate::vocab::claim::Preference;
use crate::vocab::error::{Error, Result};
use crate::vocab::hold_id::{kind_text, HoldId};

impl<K: Kind> Guard<K> {
    /// The id of this hold, to hand to another process (or a later run of this one); the
    /// guard keeps the hold and goes on renewing it. Resuming the id in another client while
    /// this guard lives makes a second guard of the same hold there (see
    /// [`Lock::resume`](crate::Lock)); in this client, a resume of it is refused
    /// ([`Error::HoldInUse`]) until this guard is given up. To hand the hold over for good,
    /// [`detach`](Guard::detach) instead.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.fair_lock("jobs").lock().await?;
    /// let id = guard.hold_id();
    /// assert_eq!(id.name(), "jobs");
    /// assert_eq!(id.fencing_token(), guard.fencing_token());
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn hold_id(&self) -> HoldId {
        let claim = self.hold.claim();
        let request = self.kind.request(claim.slot);
        HoldId::new(self.name(), request, claim.token, self.fencing_token())
    }

    /// Gives the guard up *without* releasing the hold, and returns its id: renewals stop
    /// here and the server's lease runs on until its deadline (at most one lease from the
    /// last renewal), for another process to [`resume`](crate::Lock::resume), extend or
    /// release by id. If nobody does, the lock frees itself when the lease lapses.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let mutex = client.mutex("job-17");
    /// let id = mutex.lock().await?.detach();
    /// // Still held on the server:
    /// assert!(mutex.try_lock().await.unwrap_err().is_would_block());
    /// assert!(client.release_hold(&id).await?);
    /// # Ok(()) }
    /// ```
    pub fn detach(self) -> HoldId {
        let id = self.hold_id();
        self.hold.detach();
        id
    }
}

/// What a resume has taken so far and gives up *without releasing* (detached: the server's
/// lease runs on) unless the resume completes: dropped by an error or a cancel, it leaves the
/// hold as it was before the resume, with no guard.
pub(crate) struct Taken<T: GiveUp>(Option<T>);

/// What [`Taken`] does with what it holds when the resume does not complete.
pub(crate) trait GiveUp {
    /// Stops renewing and forgets, without a release.
    fn give_up(self);
}

impl<K: Kind> GiveUp for Guard<K> {
    fn give_up(self) {
        let _ = self.detach();
    }
}

impl GiveUp for Vec<Hold> {
    fn give_up(self) {
        self.into_iter().for_each(Hold::detach);
    }
}

impl<T: GiveUp> Taken<T> {
    pub(crate) fn new(taken: T) -> Self {
        Taken(Some(taken))
    }

    pub(crate) fn get(&self) -> &T {
        self.0.as_ref().expect("taken until kept")
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("taken until kept")
    }

    /// The resume completed: what it took is the caller's now.
    pub(crate) fn keep(mut self) -> T {
        self.0.take().expect("taken until kept")
    }
}

impl<T: GiveUp> Drop for Taken<T> {
    fn drop(&mut self) {
        if let Some(taken) = self.0.take() {
            taken.give_up();
        }
    }
}

/// What a handle of kind `G` says it resumes, for a kind mismatch.
fn expected<G: Kind>(preference: Option<Preference>) -> String {
    match preference {
        Some(p) => format!("{} ({p:?} preference)", G::NAME),
        None => G::NAME.to_owned(),
    }
}

/// Resumes `id` as a guard of kind `G` on `ctx` (whose name is the id's); `preference`, when
/// given, must be the id's too.
pub(crate) async fn resume_in<G: Kind>(
    ctx: &LockCtx,
    id: &HoldId,
    preference: Option<Preference>,
) -> Result<Guard<G>> {
    let mismatch = || Error::HoldKindMismatch {
        name: id.name().to_owned(),
        expected: expected::<G>(preference),
        found: kind_text(id.request()),
    };
    let kind = G::from_request(id.request()).ok_or_else(mismatch)?;
    if let Some(p) = preference {
        let id_preference = match id.request() {
            Request::Read(q) | Request::Write(q) => Some(q),
            _ => None,
        };
        if id_preference != Some(p) {
            return Err(mismatch());
        }
    }
    let claim = id.claim(ctx.opts.lease, ctx.opts.heartbeat());
    match ctx.resume(claim, id.fencing_token()).await? {
        Some(hold) => Ok(Guard::new(hold, kind)),
        None => Err(Error::HoldGone {
            name: id.name().to_owned(),
        }),
    }
}

impl<K: Kind> Lock<K> {
    /// Resumes `id` on this handle: its name must be the id's.
    pub(crate) async fn resume_as<G: Kind>(
        &self,
        id: &HoldId,
        preference: Option<Preference>,
    ) -> Result<Guard<G>> {
        if *self.ctx.name != *id.name() {
            return Err(Error::HoldNameMismatch {
                expected: self.ctx.name.to_string(),
                found: id.name().to_owned(),
            });
        }
        resume_in(&self.ctx, id, preference).await
    }
}

/// Resume on the handles whose guard is of their own kind.
macro_rules! resume_method {
    ($kind:ty, $make:literal, $take:literal) => {
        impl Lock<$kind> {
            #[doc = "Turns a hold id (from [`Guard::hold_id`] or [`Guard::detach`], in this \
                     process or another) back into a live guard, with this handle's options \
                     (lease, auto-renewal, `max_hold`). One owner-checked step on the server \
                     renews the hold's lease; the guard is trusted from that step's send, as \
                     after any grant, and keeps the id's fencing token."]
            #[doc = ""]
            #[doc = "Fails with [`Error::HoldGone`] when the hold lapsed, was released, \
                     downgraded or evicted (nothing is granted), [`Error::HoldKindMismatch`] \
                     or [`Error::HoldNameMismatch`] when the id is for another kind of hold or \
                     another name (nothing is sent), [`Error::MalformedHoldId`] when the id's \
                     fencing token is not the one the server granted a Mutex, FairLock or \
                     write hold (an altered id: the hold is left as it was, renewed, with no \
                     guard), [`Error::HoldInUse`] when this client already has a guard of the \
                     hold (live, lost but not dropped, or releasing) or is resuming it \
                     (nothing is sent). With [`wait_replicas`](Lock::wait_replicas), \
                     [`Error::ReplicasNotReached`] when too few replicas acknowledged the \
                     renewal in time: the hold is left as it was (renewed), with no guard, \
                     so its id can be resumed again or released by id."]
            #[doc = ""]
            #[doc = "**One guard per hold per client.** A client never has two guards of \
                     one hold: use the guard it has, or detach (or drop, and let its release \
                     finish) before resuming again. Resuming an id whose hold still has a \
                     guard in *another* client (process) makes a second guard of the same \
                     hold there: a release (or drop) through either ends it for both, and the \
                     other learns it at its next renewal (its `lost()` fires then), until \
                     then trusting a lease that was released under it (a shorter lease \
                     through either, an `extend` or a resume, shortens only that guard's \
                     trust: no request shortens a hold on the server). Hand a hold over with \
                     `detach()` when only one process should hold it."]
            #[doc = ""]
            #[doc = "```"]
            #[doc = "# #[tokio::main(flavor = \"current_thread\")]"]
            #[doc = "# async fn main() -> redis_locks::Result<()> {"]
            #[doc = "let client = redis_locks::LockClient::in_memory();"]
            #[doc = concat!("let handle = ", $make, ";")]
            #[doc = concat!("let text = handle", $take, ".await?.detach().to_string();")]
            #[doc = "// ... in the process that finishes the work:"]
            #[doc = "let id: redis_locks::HoldId = text.parse()?;"]
            #[doc = "let guard = handle.resume(&id).await?;"]
            #[doc = "assert_eq!(guard.fencing_token(), id.fencing_token());"]
            #[doc = "assert!(guard.release().await?);"]
            #[doc = "# Ok(()) }"]
            #[doc = "```"]
            #[doc = ""]
            #[doc = "# Cancel safety"]
            #[doc = "If cancelled, the renewal may have happened: the hold is then as before \
                     (its lease renewed), and no guard has it."]
            pub async fn resume(&self, id: &HoldId) -> Result<Guard<$kind>> {
                self.resume_as(id, None).await
            }
        }
    };
}

resume_method!(kind::Mutex, "client.mutex(\"job\")", ".lock()");
resume_method!(kind::FairLock, "client.fair_lock(\"job\")", ".lock()");
resume_method!(
    kind::Semaphore,
    "client.semaphore(\"job\", 3)",
    ".acquire()"
);

impl Lock<kind::RwLock> {
    /// Turns the id of a read hold of this RwLock (same name and preference) back into a
    /// live [`ReadGuard`](crate::ReadGuard); see [`Lock::resume`](struct.Lock.html#method.resume)
    /// for what resuming does and its errors.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let prices = client.rwlock("prices");
    /// let id = prices.read().await?.detach();
    /// let guard = prices.resume_read(&id).await?;
    /// assert!(prices.resume_write(&id).await.unwrap_err().is_invalid_input());
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`Lock::resume`](struct.Lock.html#method.resume).
    pub async fn resume_read(&self, id: &HoldId) -> Result<Guard<kind::Read>> {
        self.resume_as(id, Some(self.kind.preference)).await
    }

    /// Turns the id of a write hold of this RwLock (same name and preference) back into a
    /// live [`WriteGuard`](crate::WriteGuard); see
    /// [`Lock::resume`](struct.Lock.html#method.resume) for what resuming does and its
    /// errors. The id of a write hold that was downgraded since is gone for a resume (and
    /// `extend_hold`); a `release_hold` by it still ends the read hold the downgrade made.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let prices = client.rwlock("prices");
    /// let id = prices.write().await?.detach();
    /// let guard = prices.resume_write(&id).await?;
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As for [`Lock::resume`](struct.Lock.html#method.resume).
    pub async fn resume_write(&self, id: &HoldId) -> Result<Guard<kind::Write>> {
        self.resume_as(id, Some(self.kind.preference)).await
    }
}

/// The request a multi-lock part answers: its slot under the multi-lock's preference.
fn part_request(slot: Slot, preference: Preference) -> Request {
    match slot {
        Slot::Read => Request::Read(preference),
        _ => Request::Write(preference),
    }
}

impl MultiGuard {
    /// One hold id per part (a multi-lock's hold is one hold per name, all under one token),
    /// in the guard's order; the guard keeps the holds. Each id is a `write-<preference>`
    /// or `read-<preference>` hold: [`MultiLock::resume`] takes them back together, and an
    /// RwLock handle (or `release_hold`, `extend_hold`) takes any one alone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let guard = client.multi_lock(["from", "to"]).lock().await?;
    /// let ids = guard.hold_ids();
    /// assert_eq!(ids.len(), 2);
    /// assert_eq!(ids[0].kind(), "write-writer");
    /// # Ok(()) }
    /// ```
    pub fn hold_ids(&self) -> Vec<HoldId> {
        self.holds
            .iter()
            .map(|hold| {
                let claim = hold.claim();
                let preference = match claim.policy {
                    crate::store::Policy::Reader => Preference::Reader,
                    crate::store::Policy::Writer => Preference::Writer,
                };
                let request = part_request(claim.slot, preference);
                HoldId::new(hold.name(), request, claim.token, hold.fencing_token())
            })
            .collect()
    }

    /// Gives the guard up without releasing any part, and returns the parts' ids (see
    /// [`hold_ids`](MultiGuard::hold_ids)): renewals stop, every lease runs on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let transfer = client.multi_lock(["from", "to"]);
    /// let ids = transfer.lock().await?.detach();
    /// let guard = transfer.resume(&ids).await?;
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> Vec<HoldId> {
        let ids = self.hold_ids();
        for hold in std::mem::take(&mut self.holds) {
            hold.detach();
        }
        ids
    }
}

impl MultiLock {
    /// Takes a multi-lock's hold back from the ids of its parts (from
    /// [`MultiGuard::hold_ids`] or [`MultiGuard::detach`]): one owner-checked renewal per
    /// part, each trusted from its send, with this multi-lock's options. The ids must name
    /// exactly this multi-lock's names, each with its own kind (write or read) and this
    /// preference, else [`Error::HoldNameMismatch`] or [`Error::HoldKindMismatch`] and
    /// nothing is sent. If any part is gone, the result is [`Error::HoldGone`] naming it,
    /// and the parts resumed before it are left as they were (held on the server, their
    /// leases renewed, no guard): release them by id, or let them lapse. As for
    /// [`Lock::resume`](crate::Lock), a part this client already has a guard of is refused
    /// with [`Error::HoldInUse`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis_locks::Result<()> {
    /// let client = redis_locks::LockClient::in_memory();
    /// let report = client.multi_rwlock(["prices"], ["report"]);
    /// let ids = report.lock().await?.detach();
    /// let guard = report.resume(&ids).await?;
    /// assert_eq!(guard.names().count(), 2);
    /// assert!(guard.release().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled (or failed), the parts renewed so far are left held, with no guard
    /// (given up without a release, as by `detach`).
    pub async fn resume(&self, ids: &[HoldId]) -> Result<MultiGuard> {
        self.ctx.opts.validate()?;
        let parts = self
            .parts
            .as_ref()
            .map_err(|e| crate::api::multi::clone_error(e))?;
        let same_names = ids.len() == parts.len()
            && parts
                .iter()
                .all(|p| ids.iter().any(|id| id.name() == p.lock.name()));
        if !same_names {
            let names = |it: &mut dyn Iterator<Item = &str>| it.collect::<Vec<_>>().join(", ");
            return Err(Error::HoldNameMismatch {
                expected: names(&mut parts.iter().map(|p| p.lock.name())),
                found: names(&mut ids.iter().map(HoldId::name)),
            });
        }
        let mut matched = Vec::with_capacity(parts.len());
        for part in parts.iter() {
            let Some(id) = ids.iter().find(|id| id.name() == part.lock.name()) else {
                // Ruled out by the check above; answered as the mismatch it would be.
                return Err(Error::HoldNameMismatch {
                    expected: part.lock.name().to_owned(),
                    found: String::new(),
                });
            };
            let expected = part_request(part.slot, self.preference);
            if id.request() != expected {
                return Err(Error::HoldKindMismatch {
                    name: id.name().to_owned(),
                    expected: kind_text(expected),
                    found: kind_text(id.request()),
                });
            }
            matched.push((part.lock.clone(), id));
        }
        // Detached, not released, if an error or a cancel ends the resume before it is done.
        let mut holds = Taken::new(Vec::with_capacity(matched.len()));
        for (lock, id) in matched {
            let claim = id.claim(self.ctx.opts.lease, self.ctx.opts.heartbeat());
            let (engine, opts) = (self.ctx.holds.clone(), self.ctx.opts.clone());
            match Hold::resume(engine, lock, claim, id.fencing_token(), opts).await? {
                Some(hold) => holds.get_mut().push(hold),
                None => {
                    return Err(Error::HoldGone {
                        name: id.name().to_owned(),
                    })
                }
            }
        }
        Ok(MultiGuard {
            holds: holds.keep(),
        })
    }
}
