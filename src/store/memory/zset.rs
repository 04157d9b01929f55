//! [`ZSet`]: a sorted set ordered like a Redis one, for the in-memory state machines.

use std::collections::{BTreeSet, HashMap};

/// A sorted set ordered like Redis: by score, then by member bytes.
#[derive(Clone, Debug, Default)]
pub(super) struct ZSet {
    scores: HashMap<String, u64>,
    order: BTreeSet<(u64, String)>,
}

impl ZSet {
    /// `ZADD`: adds `member` or moves it to `score`.
    pub fn add(&mut self, member: &str, score: u64) {
        if let Some(old) = self.scores.insert(member.to_owned(), score) {
            self.order.remove(&(old, member.to_owned()));
        }
        self.order.insert((score, member.to_owned()));
    }

    /// `ZREM`: true if `member` was there.
    pub fn remove(&mut self, member: &str) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(old, member.to_owned()));
                true
            }
            None => false,
        }
    }

    /// `ZSCORE`.
    pub fn score(&self, member: &str) -> Option<u64> {
        self.scores.get(member).copied()
    }

    /// `ZCARD`.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// True when `ZCARD` is 0.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// `ZREMRANGEBYSCORE -inf max`: removes members with score <= `max`; returns them in
    /// order.
    pub fn remove_up_to(&mut self, max: u64) -> Vec<String> {
        let gone: Vec<(u64, String)> = self
            .order
            .iter()
            .take_while(|(s, _)| *s <= max)
            .cloned()
            .collect();
        for (s, m) in &gone {
            self.order.remove(&(*s, m.clone()));
            self.scores.remove(m);
        }
        gone.into_iter().map(|(_, m)| m).collect()
    }

    /// The largest score, if any.
    pub fn max_score(&self) -> Option<u64> {
        self.order.iter().next_back().map(|(s, _)| *s)
    }

    /// The first (score, member), if any.
    pub fn first(&self) -> Option<&(u64, String)> {
        self.order.iter().next()
    }

    /// `ZRANK`.
    pub fn rank(&self, member: &str) -> Option<usize> {
        let score = self.score(member)?;
        Some(self.order.range(..(score, member.to_owned())).count())
    }

    /// (score, member) in order.
    pub fn iter(&self) -> impl Iterator<Item = &(u64, String)> {
        self.order.iter()
    }
}
