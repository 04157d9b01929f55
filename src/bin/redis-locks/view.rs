//! One read of a lock name: both families through their public handles, plus `cap` and
//! `lv` read plainly (see `raw.rs`), and what primitive that makes it (see `kind.rs`).

use std::time::Duration;

use redis_locks::{Error, HoldKind, HolderInfo, LeaderInfo, LockClient, LockInfo, WaiterInfo};

use crate::kind::{self, Capacity, Primitive};
use crate::raw::{Raw, RawKeys};
use crate::{json_label, json_str};

/// What `inspect` and `watch` read with: the client, the plain reads, the key prefix.
pub struct Ctx {
    pub client: LockClient,
    pub raw: Raw,
    pub prefix: String,
}

/// Both families of one lock name, each read through its public handle (one round trip
/// each, changing nothing): the lease lock (Mutex, RwLock with Writer or Reader preference)
/// and the ticket queue (FairLock, Semaphore, RwLock with Fair preference); the queue's
/// capacity and an election's leader.
pub struct View {
    pub name: String,
    pub lease: LockInfo,
    pub queue: LockInfo,
    pub raw: RawKeys,
    /// The election's live leader, when `lv` is set and its writer still holds.
    pub leader: Option<LeaderInfo>,
    /// Keys of the name that hold data redis-locks did not write (the family they belong to
    /// is shown as empty; a foreign `cap` only hides the ticket queue's capacity).
    pub foreign: Vec<Foreign>,
}

/// A key of a lock name that holds foreign or corrupt data: another type than redis-locks
/// keeps there, or a value its scripts cannot read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreign {
    /// The key, when the library or the scan named it.
    pub key: Option<String>,
    /// Its Redis type (`TYPE`), when the key is known.
    pub key_type: Option<String>,
    /// What is wrong with it.
    pub detail: String,
    /// The scripts read this key, so what the name holds may be hidden behind it (false for
    /// a key of a suffix redis-locks never writes, which hides nothing).
    pub hides: bool,
}

impl Foreign {
    /// For people: `rl:{x}:w (hash): it is a hash, where redis-locks keeps a string`.
    pub fn text(&self) -> String {
        let key = self.key.as_deref().unwrap_or("a key");
        match &self.key_type {
            Some(t) => format!("{key} ({t}): {}", self.detail),
            None => format!("{key}: {}", self.detail),
        }
    }

    pub fn json(&self) -> String {
        format!(
            "{{\"key\":{},\"type\":{},\"detail\":{}}}",
            self.key.as_deref().map_or_else(|| "null".into(), json_str),
            self.key_type
                .as_deref()
                .map_or_else(|| "null".into(), json_str),
            json_str(&self.detail)
        )
    }
}

/// The family of a hold: the lease lock of Mutex and RwLock, or the ticket queue of
/// FairLock, Semaphore, fair RwLock and election.
pub fn family(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Write | HoldKind::Read => "lease",
        _ => "queue",
    }
}

/// The hold's kind as the JSON `kind` has always said it: `write`, `read` (lease lock),
/// `write` (a fair RwLock writer, all permits) or `permits` (ticket queue).
fn kind_id(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Write | HoldKind::Permits(kind::FAIR_RW_PERMITS) => "write",
        HoldKind::Read => "read",
        _ => "permits",
    }
}

fn permits_of(kind: HoldKind) -> Option<u32> {
    match kind {
        HoldKind::Permits(n) => Some(n),
        _ => None,
    }
}

/// The smallest fence read as a server clock (µs since 1970): 2001-09-09.
const MIN_CLOCK_FENCE: u64 = 1_000_000_000_000_000;

fn null_or<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

impl View {
    pub fn is_empty(&self) -> bool {
        let empty = |i: &LockInfo| i.holders.is_empty() && i.waiters.is_empty();
        empty(&self.lease) && empty(&self.queue) && self.fence() == 0 && self.raw.lv.is_none()
    }

    /// Both families share one fence counter; each read reports it.
    pub fn fence(&self) -> u64 {
        self.lease.fence.max(self.queue.fence)
    }

    pub fn capacity(&self) -> Option<Capacity> {
        self.raw.cap.as_deref().and_then(Capacity::parse)
    }

    /// The primitive the name is held as now.
    pub fn primitive(&self) -> Primitive {
        let lease: Vec<HoldKind> = self.lease.holders.iter().map(|h| h.kind).collect();
        kind::primitive(
            &lease,
            !self.queue.holders.is_empty() || !self.queue.waiters.is_empty(),
            self.capacity(),
            self.raw.lv.is_some(),
        )
    }

    /// The ticket queue's primitive (for its holders' kinds).
    fn queue_primitive(&self) -> Primitive {
        match self.raw.lv {
            Some(_) => Primitive::Election,
            None => kind::queue_primitive(self.capacity()),
        }
    }

    pub fn holders(&self) -> impl Iterator<Item = &HolderInfo> {
        self.lease.holders.iter().chain(self.queue.holders.iter())
    }

    /// A holder's kind, for people.
    pub fn holder_text(&self, h: &HolderInfo) -> String {
        kind::holder_text(h.kind, self.queue_primitive())
    }

    /// How long `h` has held, when the store can tell: the exclusive holder's fence is the
    /// server's clock at its grant, in µs (`max(counter + 1, TIME)`), so its age is the
    /// server's clock now less its fence (less the counter's lead, if the counter ran ahead of
    /// the clock, which only many grants within one µs or a clock set back do). The exclusive
    /// holder is the lease lock's writer, or a ticket holding the queue's whole fixed
    /// capacity (FairLock, election, fair RwLock writer, a Semaphore's every permit); a
    /// shared hold (reader, some permits) took no fence, and its grant time is not stored.
    pub fn held_for(&self, h: &HolderInfo) -> Option<Duration> {
        let exclusive = match h.kind {
            HoldKind::Write => true,
            HoldKind::Permits(n) => match self.capacity() {
                Some(Capacity::Fixed(c) | Capacity::Semaphore(c)) => n >= c,
                // A count stored by `set_permits` may change under its holds: no fence.
                _ => false,
            },
            _ => false,
        };
        let now = self.raw.now_us?;
        let fence = self.fence();
        // Counters from before fences came from the clock are small numbers, not instants.
        (exclusive && fence >= MIN_CLOCK_FENCE && now >= fence)
            .then(|| Duration::from_micros(now - fence))
    }

    /// The Semaphore's permits (stored or from the marker), and those not held.
    pub fn semaphore(&self) -> Option<(u32, u32)> {
        let n = self.capacity()?.semaphore_permits()?;
        let held: u32 = self
            .queue
            .holders
            .iter()
            .filter_map(|h| permits_of(h.kind))
            .fold(0, u32::saturating_add);
        Some((n, n.saturating_sub(held)))
    }

    /// `foreign` (a key holds data redis-locks did not write: what else the name has may be
    /// hidden behind it), `held`, `waiting` (nobody holds it, waiters are queued or
    /// announced) or `idle` (only the fence counter is left, or nothing).
    pub fn state(&self) -> &'static str {
        if self.foreign.iter().any(|f| f.hides) {
            "foreign"
        } else if self.holders().next().is_some() {
            "held"
        } else if !self.lease.waiters.is_empty() || !self.queue.waiters.is_empty() {
            "waiting"
        } else {
            "idle"
        }
    }

    fn holder_json(&self, h: &HolderInfo) -> String {
        format!(
            "{{\"token\":{},\"label\":{},\"family\":{},\"kind\":{},\"permits\":{},\"primitive\":{},\"lease_remaining_ms\":{},\"held_for_ms\":{}}}",
            json_str(&h.token_prefix),
            json_label(h.label.as_deref()),
            json_str(family(h.kind)),
            json_str(kind_id(h.kind)),
            null_or(permits_of(h.kind)),
            json_str(kind::holder_id(h.kind, self.queue_primitive())),
            ms(h.lease_remaining),
            null_or(self.held_for(h).map(ms))
        )
    }

    fn leader_json(&self) -> String {
        match &self.leader {
            Some(l) => format!(
                "{{\"value\":{},\"term\":{},\"lease_left_ms\":{}}}",
                json_str(&l.value),
                l.term,
                ms(l.time_left)
            ),
            None => "null".into(),
        }
    }

    pub fn json(&self) -> String {
        let holders: Vec<String> = self.holders().map(|h| self.holder_json(h)).collect();
        let waiters = |ws: &[WaiterInfo], weight: bool| -> String {
            let items: Vec<String> = ws.iter().map(|w| waiter_json(w, weight)).collect();
            items.join(",")
        };
        let (permits, free) = match self.semaphore() {
            Some((n, free)) => (Some(n), Some(free)),
            None => (None, None),
        };
        format!(
            "{{\"name\":{},\"state\":{},\"primitive\":{},\"fence\":{},\"permits\":{},\"permits_source\":{},\"free_permits\":{},\"leader\":{},\"holders\":[{}],\"waiting_writers\":[{}],\"queue\":[{}],\"foreign\":[{}]}}",
            json_str(&self.name),
            json_str(self.state()),
            json_str(self.primitive().id()),
            self.fence(),
            null_or(permits),
            self.capacity()
                .filter(|_| permits.is_some())
                .map_or_else(|| "null".into(), |c| json_str(c.source())),
            null_or(free),
            self.leader_json(),
            holders.join(","),
            waiters(&self.lease.waiters, false),
            waiters(&self.queue.waiters, true),
            self.foreign
                .iter()
                .map(Foreign::json)
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    /// The kind line: `kind: Semaphore of 3: 2 held, 1 free`, `kind: election, leader ...`.
    fn kind_line(&self) -> String {
        let p = self.primitive();
        let mut line = format!("kind: {}", p.text());
        if let (Primitive::Semaphore(_), Some((n, free))) = (p, self.semaphore()) {
            let source = self.capacity().map_or("", |c| match c {
                Capacity::Stored(_) => " (count stored by set_permits)",
                _ => "",
            });
            line.push_str(&format!(
                ": {} of {n} permits held, {free} free{source}",
                n - free
            ));
        }
        if p == Primitive::Election {
            match &self.leader {
                Some(l) => line.push_str(&format!(
                    ": leader {}, term {}, lease left {}",
                    l.value,
                    l.term,
                    secs(l.time_left)
                )),
                None => line.push_str(": nobody leads now"),
            }
        }
        line.push('\n');
        line
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "lock {}  {}  fence {}\n",
            self.name,
            self.state(),
            self.fence()
        );
        out.push_str(&self.kind_line());
        let holders: Vec<_> = self.holders().collect();
        out.push_str(&format!("holders ({}):\n", holders.len()));
        for h in &holders {
            let held_for = self.held_for(h).map_or_else(|| "-".to_owned(), secs);
            out.push_str(&format!(
                "  {:<16} {:<32} {:<6} {:<22} held for {:<7} lease left {}\n",
                h.token_prefix,
                h.label.as_deref().unwrap_or("-"),
                family(h.kind),
                self.holder_text(h),
                held_for,
                secs(h.lease_remaining)
            ));
        }
        if holders.iter().any(|h| self.held_for(h).is_none()) {
            out.push_str(
                "  (held for `-`: a shared hold's grant time is not stored; `watch` shows how \
                 long it has seen each holder)\n",
            );
        }
        self.waiters_text(&mut out);
        if !self.foreign.is_empty() {
            out.push_str(&format!(
                "foreign keys ({}): not written by redis-locks, left untouched (what they \
                 hide is not shown); delete them if nothing else uses them, or use another \
                 name or prefix:\n",
                self.foreign.len()
            ));
            for f in &self.foreign {
                out.push_str(&format!("  {}\n", f.text()));
            }
        }
        out
    }

    fn waiters_text(&self, out: &mut String) {
        if !self.lease.waiters.is_empty() {
            out.push_str(&format!(
                "waiting writers ({}):\n",
                self.lease.waiters.len()
            ));
            for w in &self.lease.waiters {
                out.push_str(&format!(
                    "  {:<16} {:<32} heartbeat left {}\n",
                    w.token_prefix,
                    w.label.as_deref().unwrap_or("-"),
                    secs(w.heartbeat_remaining)
                ));
            }
        }
        if !self.queue.waiters.is_empty() {
            out.push_str(&format!("queue ({}):\n", self.queue.waiters.len()));
            for w in &self.queue.waiters {
                out.push_str(&format!(
                    "  #{:<3} {:<16} {:<32} weight {:<4} heartbeat left {}\n",
                    w.position,
                    w.token_prefix,
                    w.label.as_deref().unwrap_or("-"),
                    w.weight,
                    secs(w.heartbeat_remaining)
                ));
            }
        }
    }
}

fn waiter_json(w: &WaiterInfo, weight: bool) -> String {
    let weight = if weight {
        format!(",\"weight\":{}", w.weight)
    } else {
        String::new()
    };
    format!(
        "{{\"position\":{},\"token\":{},\"label\":{}{weight},\"heartbeat_remaining_ms\":{}}}",
        w.position,
        json_str(&w.token_prefix),
        json_label(w.label.as_deref()),
        ms(w.heartbeat_remaining)
    )
}

/// Reads `name` (changing nothing). With `full` false only the two families are read (what
/// `list` needs for a state); `cap`, `lv` and the leader are left out.
pub async fn view(ctx: &Ctx, name: &str, full: bool) -> redis_locks::Result<View> {
    let client = &ctx.client;
    let mut foreign = Vec::new();
    // `inspect` only reads, whatever the handle's options: a FairLock handle reads the ticket
    // queue whichever ticket-queue primitive (FairLock, Semaphore, fair RwLock) made it. A
    // family with a foreign key is shown empty, the key reported; a foreign `cap` is reported
    // beside the queue's holders and waiters (the library reads them past it).
    let lease = match client.mutex(name).inspect().await {
        Ok(info) => Some(info),
        Err(err) => {
            foreign.push(foreign_of(ctx, err).await?);
            None
        }
    };
    let queue = match client.fair_lock(name).inspect().await {
        // A foreign capacity key hides no holder or waiter: they are shown beside it.
        Ok(info) => {
            if let Some(key) = &info.foreign_capacity {
                foreign.push(foreign_capacity(ctx, key).await);
            }
            Some(info)
        }
        // Quorum mode has no ticket queue: nothing can be held or queued there.
        Err(Error::Unsupported { .. }) => None,
        Err(err) => {
            foreign.push(foreign_of(ctx, err).await?);
            None
        }
    };
    let (lease, queue) = match (lease, queue) {
        (Some(lease), Some(queue)) => (lease, queue),
        (Some(lease), None) => (lease.clone(), empty(lease)),
        (None, Some(queue)) => (empty(queue.clone()), queue),
        (None, None) => {
            let info = empty_info(name).await?;
            (info.clone(), info)
        }
    };
    let raw = match full {
        true => ctx.raw.read(&ctx.prefix, name).await,
        false => RawKeys::default(),
    };
    for found in &raw.foreign {
        if !foreign.iter().any(|f| f.key == found.key) {
            foreign.push(found.clone());
        }
    }
    let leader = match raw.lv {
        Some(_) => client.election(name).leader().await.ok().flatten(),
        None => None,
    };
    Ok(View {
        name: name.to_owned(),
        lease,
        queue,
        raw,
        leader,
        foreign,
    })
}

/// `info` without holders, waiters, stored permits or a foreign capacity (the fence kept:
/// both families share it).
fn empty(mut info: LockInfo) -> LockInfo {
    info.holders.clear();
    info.waiters.clear();
    info.permits = None;
    info.foreign_capacity = None;
    info
}

/// A lock state with nothing in it, for a name whose two families both have foreign keys:
/// the in-memory backend's view of a name never used.
async fn empty_info(name: &str) -> redis_locks::Result<LockInfo> {
    LockClient::in_memory().mutex(name).inspect().await
}

/// The ticket queue's capacity key `key`, which holds foreign data (with its type): what else
/// the queue holds is read beside it, but not its capacity.
async fn foreign_capacity(ctx: &Ctx, key: &str) -> Foreign {
    let key_type = ctx.raw.key_type(key).await;
    let detail = match key_type.as_deref() {
        Some(t) if t != "string" => format!("it is a {t}, where redis-locks keeps a string"),
        _ => "it does not hold a capacity redis-locks writes (`<n>`, `~<n>` or `=<n>`): the \
              capacity is not known"
            .to_owned(),
    };
    Foreign {
        key: Some(key.to_owned()),
        key_type,
        detail,
        hides: true,
    }
}

/// The foreign key `err` reports (with its type), or `err` itself when it is not about a
/// key's data.
async fn foreign_of(ctx: &Ctx, err: Error) -> redis_locks::Result<Foreign> {
    match err {
        Error::WrongType { key, detail, .. } => {
            let key_type = match &key {
                Some(k) => ctx.raw.key_type(k).await,
                None => None,
            };
            Ok(Foreign {
                key,
                key_type,
                detail,
                hides: true,
            })
        }
        other => Err(other),
    }
}
