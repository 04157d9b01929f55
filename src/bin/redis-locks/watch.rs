//! `watch`: the first view, then one line per change between two reads.
//!
//! A read is reduced to facts, each keyed by what it is about: the primitive, the fence, the
//! leader, each holder, each waiting writer and each queued waiter (by token prefix), and
//! each key of foreign data (by key: what it hides is not shown while it is there). A fact
//! that appears is `added`, one that goes is `removed` (a holder's with how long this watch
//! saw it held: from the first read that showed it to the last), one whose description
//! differs is `changed`. Lease and heartbeat times left are not facts (they change on every
//! read).

use std::collections::BTreeMap;
use std::time::Instant;

use crate::json_str;
use crate::view::{family, View};

/// What a fact is about: its kind and, for holders and waiters, the token prefix.
type Key = (&'static str, String);

/// The facts of one read.
pub fn facts(v: &View) -> BTreeMap<Key, String> {
    let mut out = BTreeMap::new();
    out.insert(("primitive", String::new()), v.primitive().text());
    out.insert(("fence", String::new()), v.fence().to_string());
    if v.raw.lv.is_some() {
        let leader = v.leader.as_ref().map_or_else(
            || "nobody".to_owned(),
            |l| format!("{} (term {})", l.value, l.term),
        );
        out.insert(("leader", String::new()), leader);
    }
    for h in v.holders() {
        let label = h.label.as_deref().unwrap_or("-");
        let desc = format!("{label} {} {}", family(h.kind), v.holder_text(h));
        out.insert(("holder", h.token_prefix.clone()), desc);
    }
    for w in &v.lease.waiters {
        let label = w.label.as_deref().unwrap_or("-").to_owned();
        out.insert(("waiting writer", w.token_prefix.clone()), label);
    }
    for w in &v.queue.waiters {
        let label = w.label.as_deref().unwrap_or("-");
        let desc = format!("#{} {label} weight {}", w.position, w.weight);
        out.insert(("queued", w.token_prefix.clone()), desc);
    }
    for f in &v.foreign {
        let key = f.key.clone().unwrap_or_default();
        out.insert(("foreign key", key), f.text());
    }
    out
}

/// One change between two reads.
pub struct Change {
    pub change: &'static str,
    pub what: &'static str,
    pub token: String,
    pub was: Option<String>,
    pub now: Option<String>,
    /// For a removed fact: how long this watch saw it (first read to last read showing it).
    pub seen_for_ms: Option<u128>,
}

impl Change {
    pub fn text(&self, at: &str) -> String {
        let sign = match self.change {
            "added" => "+",
            "removed" => "-",
            _ => "~",
        };
        let mut line = format!("{at} {sign} {}", self.what);
        if !self.token.is_empty() {
            line.push_str(&format!(" {}", self.token));
        }
        match (&self.was, &self.now) {
            (Some(was), Some(now)) => line.push_str(&format!(": {was} -> {now}")),
            (None, Some(now)) => line.push_str(&format!(": {now}")),
            (Some(was), None) => line.push_str(&format!(": {was}")),
            (None, None) => {}
        }
        if let Some(ms) = self.seen_for_ms {
            line.push_str(&format!(
                " (seen held for {:.1}s by this watch)",
                ms as f64 / 1e3
            ));
        }
        line
    }

    pub fn json(&self, at: &str, name: &str) -> String {
        let opt = |s: &Option<String>| s.as_deref().map_or_else(|| "null".into(), json_str);
        let token = match self.token.is_empty() {
            true => "null".into(),
            false => json_str(&self.token),
        };
        let seen = self
            .seen_for_ms
            .map_or_else(|| "null".into(), |ms| ms.to_string());
        format!(
            "{{\"at\":{},\"name\":{},\"change\":{},\"what\":{},\"token\":{token},\"was\":{},\"now\":{},\"seen_for_ms\":{seen}}}",
            json_str(at),
            json_str(name),
            json_str(self.change),
            json_str(self.what),
            opt(&self.was),
            opt(&self.now)
        )
    }
}

/// What the watch remembers between reads: the last facts, and when each was first and
/// last seen.
pub struct Tracker {
    last: BTreeMap<Key, String>,
    first_seen: BTreeMap<Key, Instant>,
    last_read: Instant,
}

impl Tracker {
    pub fn new(first: &View) -> Tracker {
        let now = Instant::now();
        let last = facts(first);
        let first_seen = last.keys().map(|k| (k.clone(), now)).collect();
        Tracker {
            last,
            first_seen,
            last_read: now,
        }
    }

    /// The changes from the last read to `v`, in key order (removals with their times).
    pub fn update(&mut self, v: &View) -> Vec<Change> {
        let now = Instant::now();
        let next = facts(v);
        let mut changes = Vec::new();
        for (key, was) in &self.last {
            let change = |change, now: Option<&String>, seen_for_ms| Change {
                change,
                what: key.0,
                token: key.1.clone(),
                was: Some(was.clone()),
                now: now.cloned(),
                seen_for_ms,
            };
            match next.get(key) {
                None => {
                    let seen = self
                        .first_seen
                        .remove(key)
                        .map(|first| self.last_read.saturating_duration_since(first).as_millis());
                    let seen = seen.filter(|_| key.0 == "holder");
                    changes.push(change("removed", None, seen));
                }
                Some(n) if n != was => changes.push(change("changed", Some(n), None)),
                Some(_) => {}
            }
        }
        for (key, desc) in &next {
            if !self.last.contains_key(key) {
                self.first_seen.insert(key.clone(), now);
                changes.push(Change {
                    change: "added",
                    what: key.0,
                    token: key.1.clone(),
                    was: None,
                    now: Some(desc.clone()),
                    seen_for_ms: None,
                });
            }
        }
        self.last = next;
        self.last_read = now;
        changes
    }
}
