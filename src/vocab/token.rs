//! Claim tokens and waiter jitter.
//!
//! A token is a capability: whoever knows it can extend, release or resume the hold (a hold
//! id carries it). So each token carries 96 bits from the OS random generator, drawn for that
//! token alone, behind 16 hex digits that `inspect` shows: 8 of a random per-process prefix
//! (tell processes apart) and 8 that differ per acquisition. The shown part reveals none of
//! the random bits. Tokens travel inside Lua-parsed records (`deadline|token`,
//! `token#weight`), so every token that reaches a store is checked against [`check`]: a fixed
//! charset and length, nothing a script could mistake for a separator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::vocab::error::{Error, Result};

/// Longest accepted token.
pub(crate) const MAX_TOKEN_LEN: usize = 64;
/// Characters of a generated token before its label.
pub(crate) const GENERATED_LEN: usize = 32;
/// Characters of a generated token that `inspect` shows: the process prefix and the
/// per-acquisition part, all hex.
const SHOWN_LEN: usize = 16;
/// The token charset, 64 symbols: each secret character carries 6 random bits.
const SECRET_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
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

/// Makes a generated `token` carry the holder `label`: `<token>-<label>`, as [`label_of`]
/// reads it.
pub(crate) fn add_label(token: &mut String, label: &str) {
    token.reserve_exact(1 + label.len());
    token.push('-');
    token.push_str(label);
}

/// The label a token carries, if it is a generated token with one.
pub(crate) fn label_of(token: &str) -> Option<&str> {
    let (generated, label) = (token.get(..GENERATED_LEN)?, token.get(GENERATED_LEN..)?);
    let label = label.strip_prefix('-')?;
    let (shown, secret) = generated.split_at(SHOWN_LEN);
    let generated_shape = shown.bytes().all(|b| b.is_ascii_hexdigit())
        && secret.bytes().all(|b| SECRET_ALPHABET.contains(&b));
    (generated_shape && !label.is_empty()).then_some(label)
}

static PREFIX: OnceLock<AtomicU64> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn prefix() -> &'static AtomicU64 {
    PREFIX.get_or_init(|| AtomicU64::new(uuid::Uuid::new_v4().as_u64_pair().0))
}

/// A fresh token, 32 characters: 8 hex digits of the process prefix (so `inspect`'s
/// shortened tokens tell processes apart), 8 that differ for every token of this process (a
/// mix of the counter, so they also tell acquisitions apart), then 16 characters of
/// [`SECRET_ALPHABET`] carrying 96 bits from the OS random generator.
pub(crate) fn next() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix = prefix().load(Ordering::Relaxed);
    let mut token = String::with_capacity(GENERATED_LEN + 1 + MAX_LABEL_LEN);
    use std::fmt::Write as _;
    let _ = write!(
        token,
        "{:08x}{:08x}",
        prefix >> 32,
        splitmix(prefix ^ n) & 0xffff_ffff
    );
    let random = secret_bits(n);
    for i in 0..(GENERATED_LEN - SHOWN_LEN) {
        let six = (random >> (6 * i)) & 0x3f;
        token.push(char::from(SECRET_ALPHABET[six as usize]));
    }
    token
}

/// 96 random bits (in the low bits) for token number `n`: from the OS generator through
/// `uuid` v4, whose version and variant bits are skipped; deterministic after [`reseed`].
fn secret_bits(n: u64) -> u128 {
    #[cfg(feature = "testing")]
    if SEEDED.load(Ordering::Relaxed) {
        let seed = prefix().load(Ordering::Relaxed);
        let high = splitmix(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
        return (u128::from(high) << 64 | u128::from(splitmix(high ^ n))) & ((1 << 96) - 1);
    }
    let _ = n;
    let bytes = uuid::Uuid::new_v4().into_bytes();
    // Bytes 6 and 8 carry the version and variant bits; bytes 0-5 and 9-14 are all random.
    let mut random = [0u8; 16];
    random[..6].copy_from_slice(&bytes[..6]);
    random[6..12].copy_from_slice(&bytes[9..15]);
    u128::from_le_bytes(random)
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

/// Set by [`reseed`]: tokens are deterministic from then on (simulations only).
#[cfg(feature = "testing")]
static SEEDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Restarts the generator from `seed` (deterministic simulations): the random part of later
/// tokens comes from the seed too.
#[cfg(feature = "testing")]
pub(crate) fn reseed(seed: u64) {
    prefix().store(seed, Ordering::Relaxed);
    COUNTER.store(0, Ordering::Relaxed);
    SEEDED.store(true, Ordering::Relaxed);
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
        assert_ne!(a[16..], b[16..], "random parts differ");
        check(&a).unwrap();
        assert_eq!(a.len(), 32);
        assert!(a[..16].bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    /// Each of the 16 secret characters takes all 64 values over many tokens, and each bit
    /// of the 96 is set in about half of them: the random part carries 96 bits, none fixed.
    #[test]
    fn the_secret_part_carries_96_random_bits() {
        let mut seen = [[false; 64]; 16];
        let mut ones = [0u32; 96];
        let rounds = 4000;
        for _ in 0..rounds {
            let token = next();
            for (i, c) in token[SHOWN_LEN..].bytes().enumerate() {
                let six = SECRET_ALPHABET
                    .iter()
                    .position(|&a| a == c)
                    .expect("alphabet");
                seen[i][six] = true;
                for bit in 0..6 {
                    ones[6 * i + bit] += u32::from((six >> bit) & 1 == 1);
                }
            }
        }
        assert!(
            seen.iter().all(|s| s.iter().all(|&v| v)),
            "a character misses values"
        );
        for (bit, n) in ones.iter().enumerate() {
            assert!((1600..2400).contains(n), "bit {bit} set in {n} of {rounds}");
        }
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
