//! The owner's registry steps: resumes' reservations, steps by id, `release_all`, and who
//! waits for a release's answer. Part of the one [`Owner`]: the same task, the same state.

use super::*;

impl Owner {
    /// Hands the answer of release `n` of hold `id` to whoever waits for it: a release by id,
    /// or a `release_all`.
    pub(super) fn release_answered(&mut self, id: u64, n: u64, answer: Result<bool>) {
        if let Some(caller) = self
            .holds
            .get_mut(&id)
            .and_then(|e| e.release_callers.remove(&n))
        {
            let _ = caller.send(answer);
            return;
        }
        for job in &mut self.jobs {
            if let Some(m) = job.members.iter_mut().find(|m| m.id == id && m.n == n) {
                m.answer = Some(answer);
                return;
            }
        }
    }

    /// Settles the `release_all` members of hold `id` whose own release was answered: a
    /// counted hold counts once its own release found it live, or once none of its releases
    /// is in flight any more and one of them did.
    pub(super) fn settle_jobs(&mut self, id: u64, ended_live: bool, releasing: bool) {
        let mut i = 0;
        while i < self.jobs.len() {
            let job = &mut self.jobs[i];
            for m in job
                .members
                .iter_mut()
                .filter(|m| m.id == id && m.settled.is_none())
            {
                match &m.answer {
                    Some(Ok(true)) => m.settled = Some(m.counted),
                    Some(Ok(false)) if ended_live || !releasing => {
                        m.settled = Some(m.counted && ended_live)
                    }
                    Some(Err(_)) => m.settled = Some(false),
                    _ => {}
                }
            }
            if job.members.iter().all(|m| m.settled.is_some()) {
                finish(self.jobs.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }

    /// Answers every `release_all` past its deadline with what it knows: a counted member
    /// counts if its own release, or another of this client's that was answered, found the
    /// hold live; one not answered counts nothing.
    pub(super) fn expire_jobs(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.jobs.len() {
            if self.jobs[i].deadline > now {
                i += 1;
                continue;
            }
            let mut job = self.jobs.swap_remove(i);
            for m in job.members.iter_mut().filter(|m| m.settled.is_none()) {
                let ended_live = self.holds.get(&m.id).is_some_and(|e| e.state.ended_live());
                m.settled = Some(match m.answer {
                    Some(Ok(true)) => m.counted,
                    Some(Ok(false)) => m.counted && ended_live,
                    _ => false,
                });
            }
            finish(job);
        }
    }

    pub(super) fn reserve(&mut self, key: Key, ticket: u64, reply: oneshot::Sender<Reserved>) {
        if let Some(&id) = self.by_key.get(&key)
            && let Some(entry) = self.holds.get_mut(&id)
        {
            if entry.state.phase() != Phase::Detached {
                let _ = reply.send(Reserved::InUse);
                return;
            }
            // A detached hold with something in flight: asked again once it is quiet.
            entry
                .after_quiet
                .push(Command::Reserve { key, ticket, reply });
            return;
        }
        if reply.is_closed() || self.reserved.contains_key(&key) {
            let _ = reply.send(Reserved::InUse);
            return;
        }
        self.reserved.insert(key.clone(), ticket);
        if reply.send(Reserved::Done).is_err() {
            // Its caller gave up waiting.
            self.reserved.remove(&key);
        }
    }

    pub(super) fn by_id(&mut self, s: StepById, now: Instant) {
        let key = key(&s.lock, &s.claim);
        if let Some(&id) = self.by_key.get(&key) {
            let caller = self.caller();
            let entry = self.holds.get_mut(&id).expect("by_key names a live entry");
            match (entry.state.phase(), s.step) {
                // A detached hold, or a lost guard with something in flight: the step waits
                // for it to be quiet, then goes beside.
                (Phase::Detached, _) | (Phase::Live, ById::Extend(_))
                    if entry.state.phase() == Phase::Detached
                        || (!entry.state.is_trusted(now)
                            && (!entry.state.is_quiet() || entry.beside > 0)) =>
                {
                    entry.after_quiet.push(Command::ById(s));
                    return;
                }
                (_, ById::Release) => {
                    if let Some(n) = self.release_by_owner(id, now)
                        && let Some(entry) = self.holds.get_mut(&id)
                    {
                        entry.release_callers.insert(n, s.reply);
                    }
                    return;
                }
                (Phase::Releasing, ById::Extend(_)) => {
                    let _ = s.reply.send(Ok(false));
                    return;
                }
                (Phase::Live, ById::Extend(_)) if entry.claim.slot != s.claim.slot => {
                    // A write id of a hold downgraded since: nothing of that form to extend.
                    let _ = s.reply.send(Ok(false));
                    return;
                }
                (Phase::Live, ById::Extend(lease)) if entry.state.is_trusted(now) => {
                    entry.waiters.insert(caller, Waiter::Extend(s.reply));
                    self.apply(id, Event::Extend { caller, lease }, now);
                    return;
                }
                (_, ById::Extend(_)) => {
                    // A guard whose trust ran out is not revived: it stays lost, and the
                    // step goes beside it (nothing of it is in flight). Counted on the entry
                    // until answered: a detach meanwhile keeps the entry, and a resume waits
                    // for it.
                    entry.beside += 1;
                    self.beside(key, s, Some(id));
                    return;
                }
            }
        }
        if self.reserved.contains_key(&key) {
            let _ = s.reply.send(Err(hold_in_use(s.lock.name())));
            return;
        }
        self.reserved.insert(key.clone(), 0);
        self.beside(key, s, None);
    }

    /// The owner releases hold `id`, its guard left in place (a `release_all`, a release by
    /// id): the number of the release request sent.
    pub(super) fn release_by_owner(&mut self, id: u64, now: Instant) -> Option<u64> {
        let event = Event::Release {
            by_owner: true,
            guard_gone: false,
        };
        self.apply(id, event, now).iter().find_map(|e| match e {
            Effect::Send {
                n,
                ask: Ask::Release,
            } => Some(*n),
            _ => None,
        })
    }

    /// Sends a step by id beside any guard: counted on hold `entry` if the client has one
    /// (a lost guard), else under the key's reservation.
    pub(super) fn beside(&mut self, key: Key, s: StepById, entry: Option<u64>) {
        let store = self.store.clone();
        let bound = self.step_bound;
        self.io.spawn(async move {
            let (lock, claim) = (&s.lock, &s.claim);
            let call = async {
                match s.step {
                    ById::Release => release_with_retry(&*store, lock, claim).await,
                    ById::Extend(lease) => {
                        retrying(|| store.extend(lock, claim, lease, None)).await.0
                    }
                }
            };
            let outcome = within(None, bound, "step by id", call).await;
            let reply = s.reply;
            (Io::Beside { key, entry, reply }, Reply::Release(outcome))
        });
    }

    pub(super) fn release_all(&mut self, reply: oneshot::Sender<Result<usize>>, now: Instant) {
        let mut live: Vec<(u64, u64)> = self
            .holds
            .iter()
            .filter(|(_, e)| e.state.phase() != Phase::Detached)
            .map(|(id, e)| (e.seq, *id))
            .collect();
        live.sort_unstable();
        let mut members = Vec::new();
        for (_, id) in live {
            let counted = self
                .holds
                .get(&id)
                .is_some_and(|e| e.state.phase() == Phase::Live);
            if let Some(n) = self.release_by_owner(id, now) {
                members.push(Member {
                    id,
                    n,
                    counted,
                    answer: None,
                    settled: None,
                });
            }
        }
        if members.is_empty() {
            let _ = reply.send(Ok(0));
            return;
        }
        let deadline = now + self.step_bound + Duration::from_millis(50);
        self.jobs.push(ReleaseAll {
            members,
            reply,
            deadline,
        });
    }
}

/// Answers a settled `release_all`: how many holds it counted, or its first error.
fn finish(job: ReleaseAll) {
    let mut released = 0;
    let mut first_error = None;
    for m in job.members {
        match m.answer {
            Some(Err(err)) => {
                first_error.get_or_insert(err);
            }
            _ if m.settled == Some(true) => released += 1,
            _ => {}
        }
    }
    let _ = job.reply.send(match first_error {
        Some(err) => Err(err),
        None => Ok(released),
    });
}
