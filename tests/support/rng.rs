//! A small deterministic generator ([`Rng`], [`xorshift`]) for randomized workloads that
//! replay.

/// A small deterministic generator (xorshift), one per task.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        xorshift(&mut self.0) % n
    }
}

/// One xorshift step of `state` (not zero): the new state.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
