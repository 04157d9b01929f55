//! Claim tokens and waiter jitter, from one per-process generator.
//!
//! A token is a random per-process prefix followed by a counter, so it is unique without a
//! system call per acquisition. Tokens travel inside Lua-parsed records (`deadline|token`,
//! `token#weight`), so every token that reaches a store is checked against [`check`]: a fixed
//! charset and length, nothing a script could mistake for a separator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Longest accepted token.
pub(crate) const MAX_TOKEN_LEN: usize = 64;

static PREFIX: OnceLock<AtomicU64> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn prefix() -> &'static AtomicU64 {
    PREFIX.get_or_init(|| AtomicU64::new(uuid::Uuid::new_v4().as_u64_pair().0))
}

/// A fresh token, 32 hex digits: 8 of the process prefix (so `inspect`'s shortened tokens
/// tell processes apart), 16 that differ for every token of this process (a bijective mix of
/// the counter, so they also tell acquisitions apart), then the other 8 of the prefix.
pub(crate) fn next() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix = prefix().load(Ordering::Relaxed);
    let (high, low) = (prefix >> 32, prefix & 0xffff_ffff);
    format!("{high:08x}{:016x}{low:08x}", splitmix(prefix ^ n))
}

/// A pseudo-random number from the process generator (for jitter), not for security.
pub(crate) fn random() -> u64 {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    splitmix(prefix().load(Ordering::Relaxed) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Restarts the generator from `seed` (deterministic simulations).
#[cfg(feature = "testing")]
pub(crate) fn reseed(seed: u64) {
    prefix().store(seed, Ordering::Relaxed);
    COUNTER.store(0, Ordering::Relaxed);
}

/// Refuses a token a script could misread: 1 to 64 characters of `[A-Za-z0-9_-]`.
pub(crate) fn check(token: &str) -> Result<()> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(Error::invalid(
            "token",
            format!(
                "{} bytes; a claim token has 1 to {MAX_TOKEN_LEN} characters",
                token.len()
            ),
        ));
    }
    if let Some(bad) = token
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(Error::invalid(
            "token",
            format!("{bad:?} is not allowed; a claim token uses only A-Z, a-z, 0-9, '_' and '-'"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_and_valid() {
        let a = next();
        let b = next();
        assert_eq!(a[..8], b[..8], "one process prefix");
        assert_ne!(a[8..16], b[8..16], "shortened tokens differ");
        assert_eq!(a[24..], b[24..], "one process prefix");
        check(&a).unwrap();
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn separators_and_bad_lengths_are_refused() {
        for bad in ["", "a|b", "a#3", "a b", "é", &"x".repeat(65)] {
            assert!(check(bad).unwrap_err().is_invalid_input(), "{bad:?}");
        }
        check(&"x".repeat(64)).unwrap();
    }
}
