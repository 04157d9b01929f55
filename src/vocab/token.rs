//! Claim tokens and waiter jitter, from one per-process generator.
//!
//! A token is a random per-process prefix followed by a counter, so it is unique without a
//! system call per acquisition. Tokens travel inside Lua-parsed records (`deadline|token`,
//! `token#weight`), so every token that reaches a store is checked against [`check`]: a fixed
//! charset and length, nothing a script could mistake for a separator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::vocab::error::{Error, Result};

/// Longest accepted token.
pub(crate) const MAX_TOKEN_LEN: usize = 64;
/// Characters of a generated token before its label.
pub(crate) const GENERATED_LEN: usize = 32;
/// Longest holder label: a generated token (32 characters), `-` and the label fit in the 64
/// characters a claim token may have.
pub const MAX_LABEL_LEN: usize = MAX_TOKEN_LEN - GENERATED_LEN - 1;

/// Refuses a holder label that could not ride in a token: 1 to [`MAX_LABEL_LEN`] characters
/// of `[A-Za-z0-9_-]`.
pub(crate) fn check_label(label: &str) -> Result<()> {
    let ok = !label.is_empty()
        && label.len() <= MAX_LABEL_LEN
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "label",
            format!(
                "{label:?}: a holder label has 1 to {MAX_LABEL_LEN} characters of A-Z, a-z, \
                 0-9, '_' and '-' (it travels inside the claim token)"
            ),
        ))
    }
}

/// The default holder label: `<hostname>-<pid>`, the host name from `HOSTNAME` or
/// `/etc/hostname` (else `host`), other characters than `[A-Za-z0-9_-]` turned into `_`, the
/// host name shortened so the whole fits [`MAX_LABEL_LEN`].
pub(crate) fn default_label() -> std::sync::Arc<str> {
    static LABEL: OnceLock<std::sync::Arc<str>> = OnceLock::new();
    LABEL
        .get_or_init(|| {
            let host = std::env::var("HOSTNAME")
                .ok()
                .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "host".to_owned());
            let pid = std::process::id().to_string();
            let room = MAX_LABEL_LEN - pid.len() - 1;
            let host: String = host
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(room)
                .collect();
            format!("{host}-{pid}").into()
        })
        .clone()
}

/// The label a token carries, if it is a generated token with one.
pub(crate) fn label_of(token: &str) -> Option<&str> {
    let (generated, label) = (token.get(..GENERATED_LEN)?, token.get(GENERATED_LEN..)?);
    let label = label.strip_prefix('-')?;
    (generated.bytes().all(|b| b.is_ascii_hexdigit()) && !label.is_empty()).then_some(label)
}

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
    fn labels_ride_in_valid_tokens() {
        let label = default_label();
        check_label(&label).unwrap();
        let token = format!("{}-{label}", next());
        check(&token).unwrap();
        assert_eq!(label_of(&token), Some(&*label));
        assert_eq!(label_of(&next()), None);
        let longest = "x".repeat(MAX_LABEL_LEN);
        check(&format!("{}-{longest}", next())).unwrap();
        for bad in [
            "",
            "a:b",
            "a.b",
            "a#1",
            "a|b",
            &"x".repeat(MAX_LABEL_LEN + 1),
        ] {
            assert!(check_label(bad).unwrap_err().is_invalid_input(), "{bad:?}");
        }
    }

    #[test]
    fn separators_and_bad_lengths_are_refused() {
        for bad in ["", "a|b", "a#3", "a b", "é", &"x".repeat(65)] {
            assert!(check(bad).unwrap_err().is_invalid_input(), "{bad:?}");
        }
        check(&"x".repeat(64)).unwrap();
    }
}
