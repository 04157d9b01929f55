//! All key naming in one place. Every key and the wake-up channel of a lock share the prefix
//! `<prefix>:{<name>}:`, so they hash to one Redis Cluster slot and an operator can find them
//! by the lock's name.

use crate::vocab::error::{Error, Result};

/// Longest accepted lock name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "rl";

/// A validated lock name with its key names.
///
/// ```
/// let keys = redis_locks::testing::keys::LockKeys::new("rl", "jobs").unwrap();
/// assert_eq!(keys.fence(), "rl:{jobs}:fence");
/// assert_eq!(keys.channel(), "rl:{jobs}:ch");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockKeys {
    inner: std::sync::Arc<Inner>,
}

/// The name and every key list a script takes, built once per handle (a clone shares them),
/// so no step formats a key string.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Inner {
    name: String,
    base: String,
    lease_lock: [String; 6],
    ticket_queue: [String; 10],
    force_release: [String; 5],
    election: [String; 4],
    rate_limiter: [String; 6],
}

impl LockKeys {
    /// Validates `name` and builds its keys under `prefix`.
    ///
    /// Names are arbitrary UTF-8 (braces, colons and NUL included) of 1 to
    /// [`MAX_NAME_LEN`] bytes, except that a name may not start with `}` (its hash tag would be
    /// empty). The hash tag opens at the prefix's `{`, so whatever else the name contains,
    /// every key of the lock lands in one slot, and the fixed suffixes keep the keys of
    /// different names distinct.
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::InvalidName {
                reason: "the name is empty; give every lock a non-empty name".into(),
            });
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidName {
                reason: format!(
                    "the name is {} bytes, the limit is {MAX_NAME_LEN}; hash long identifiers first",
                    name.len()
                ),
            });
        }
        if name.starts_with('}') {
            // `rl:{}...` has an empty hash tag: Redis Cluster would then hash each whole key,
            // scattering the lock's keys over several slots.
            return Err(Error::InvalidName {
                reason: "the name starts with `}`, which would leave its keys without a common Cluster hash tag; prefix it with any other character".into(),
            });
        }
        let base = format!("{prefix}:{{{name}}}:");
        let key = |suffix: &str| format!("{base}{suffix}");
        let inner = Inner {
            name: name.to_owned(),
            lease_lock: [
                key("w"),
                key("r"),
                key("wq"),
                key("fence"),
                key("ch"),
                key("h"),
            ],
            ticket_queue: [
                key("h"),
                key("q"),
                key("hb"),
                key("tk"),
                key("fence"),
                key("ch"),
                key("cap"),
                key("w"),
                key("r"),
                key("lv"),
            ],
            force_release: [key("w"), key("r"), key("h"), key("fence"), key("ch")],
            election: [key("h"), key("lv"), key("ch"), key("fence")],
            rate_limiter: [
                key("rt"),
                key("rq"),
                key("rhb"),
                key("rtk"),
                key("ch"),
                key("ra"),
            ],
            base,
        };
        Ok(LockKeys {
            inner: std::sync::Arc::new(inner),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// `<prefix>:{<name>}:<suffix>`.
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.inner.base)
    }

    /// The wake-up channel.
    pub fn channel(&self) -> String {
        self.inner.lease_lock[4].clone()
    }

    /// The fence counter (it expires with the holds it serves).
    pub fn fence(&self) -> String {
        self.inner.lease_lock[3].clone()
    }

    /// Keys of the lease lock (mutex, RwLock writer/reader policies), in script order. The
    /// last one is the ticket queue's holder set, which the scripts only read: a grant of one
    /// family is refused while the other holds the name.
    pub fn lease_lock(&self) -> &[String; 6] {
        &self.inner.lease_lock
    }

    /// Keys of the ticket queue (FairLock, Semaphore, RwLock fair policy), in script order.
    /// Then the lease lock's writer and readers, which the scripts only read, and an
    /// election's leader value, whose TTL an extension lengthens.
    pub fn ticket_queue(&self) -> &[String; 10] {
        &self.inner.ticket_queue
    }

    /// Keys of the rate limiter of this name, in script order (`rate_common.lua`).
    pub fn rate_limiter(&self) -> &[String; 6] {
        &self.inner.rate_limiter
    }

    /// Keys touched by a forced release, in script order.
    pub fn force_release(&self) -> &[String; 5] {
        &self.inner.force_release
    }

    /// Keys of an election's steps (`election_*.lua`), in script order: the ticket queue's
    /// holders, the leader's value, the channel and the fence counter.
    pub fn election(&self) -> &[String; 4] {
        &self.inner.election
    }
}

/// The type redis-locks keeps at `key` (as `TYPE` names it: `string` or `zset`), from the
/// key's suffix after `}:`; `None` for a suffix it never writes (docs/ARCHITECTURE.md, "Two
/// families of state", and the rate limiter's keys). For tools that check a keyspace: a key
/// under the prefix whose type differs, or that has no type here, was not written by
/// redis-locks (the CLI's `list` reports both).
///
/// ```
/// assert_eq!(redis_locks::key_type("rl:{jobs}:w"), Some("string"));
/// assert_eq!(redis_locks::key_type("rl:{jobs}:h"), Some("zset"));
/// assert_eq!(redis_locks::key_type("rl:{jobs}:notes"), None);
/// ```
pub fn key_type(key: &str) -> Option<&'static str> {
    let (_, suffix) = key.rsplit_once("}:")?;
    match suffix {
        "w" | "fence" | "tk" | "cap" | "lv" | "rt" | "rtk" => Some("string"),
        "r" | "wq" | "h" | "q" | "hb" | "rq" | "rhb" | "ra" => Some("zset"),
        _ => None,
    }
}

/// Validates a key prefix: 1 to [`MAX_PREFIX_LEN`] bytes, no braces (they would move the
/// hash tag away from the lock name).
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(
            "key prefix",
            format!("must be 1 to {MAX_PREFIX_LEN} bytes"),
        ));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(
            "key prefix",
            "must not contain `{` or `}` (the lock name is the hash tag)",
        ));
    }
    Ok(())
}

/// The Redis Cluster hash slot of `key` (CRC16 of its hash tag, mod 16384).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn hash_slot(key: &[u8]) -> u16 {
    let tagged = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16_xmodem(tagged) % 16384
}

#[cfg_attr(not(feature = "testing"), allow(dead_code))]
fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_lock_shares_one_slot() {
        for name in ["a", "jobs", "x}y", "{", "a{b}c", "na:me", "\0", "{}", "x}"] {
            let keys = LockKeys::new("rl", name).expect("valid name");
            let slot = hash_slot(keys.channel().as_bytes());
            for k in keys
                .lease_lock()
                .iter()
                .chain(keys.ticket_queue().iter())
                .chain(keys.election().iter())
                .chain(keys.rate_limiter().iter())
            {
                assert_eq!(hash_slot(k.as_bytes()), slot, "{name:?}: {k}");
            }
        }
    }

    #[test]
    fn known_slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"foo{}{bar}"), hash_slot(b"foo{}{bar}"));
    }

    #[test]
    fn names_are_validated() {
        assert!(LockKeys::new("rl", "").is_err());
        assert!(LockKeys::new("rl", "}").is_err());
        assert!(LockKeys::new("rl", "}a").is_err());
        assert!(LockKeys::new("rl", &"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(LockKeys::new("rl", &"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("app:locks").is_ok());
    }
}
