//! [`Mixer`]: the one function that spreads keys that are already 64-bit hashes (ours, or an
//! engine's) over a table's slots.
//!
//! Such keys may be small or patterned (engine hashes that are counters, test values), and
//! whoever sends events chooses them: a root block's content hash is a run key, and an engine
//! hash is a worker-map key. A fixed mixing function would let a sender pick many keys for one
//! slot and make every operation on that table linear (hash flooding). So each pool draws its
//! own secret [`Mixer`]: two folded multiplies (the two halves of the 128-bit product xored, as
//! in foldhash), the first of the key xored with one secret word, the second by another secret
//! odd word. Without the seed, keys that share a slot are guesswork; and every output bit
//! depends on every key bit (one fold alone leaves keys that differ only in their top bits
//! bunched in the low output bits, which tables use as the slot). [`Mixer::FIXED`] serves what needs no secrecy
//! (maps keyed by our own ids) or must be reproducible (loom models).

/// A seeded 64-bit mixer; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mixer {
    xor: u64,
    mul: u64,
}

impl Mixer {
    /// A fixed seed, for keys no sender chooses and for reproducible runs.
    pub(crate) const FIXED: Mixer = Mixer { xor: 0, mul: 0xA076_1D64_78BD_642F };

    /// A fresh secret seed (fixed under loom, whose models must replay the same way).
    pub(crate) fn random() -> Self {
        if cfg!(loom) {
            return Self::FIXED;
        }
        use std::hash::{BuildHasher, RandomState};
        let state = RandomState::new();
        // The top bit keeps the product's high half well mixed; the low bit keeps it odd.
        let mul = state.hash_one(2u64) | (1 << 63) | 1;
        Self { xor: state.hash_one(1u64), mul }
    }

    /// The mixed key: every bit depends on every bit of `key` and of the seed.
    #[inline]
    pub(crate) fn mix(self, key: u64) -> u64 {
        fold(fold(key ^ self.xor, 0x9E37_79B9_7F4A_7C15), self.mul)
    }
}

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pools_draw_different_seeds_and_keys_spread() {
        assert_ne!(Mixer::random(), Mixer::random());
        // Keys that differ only in some bits still spread over 64 slots like random ones
        // (about 40 distinct slots, rarely under 30; one fold alone gave as few as 12).
        for _ in 0..20 {
            let mixer = Mixer::random();
            for shift in [0, 20, 40, 58] {
                let slots: std::collections::HashSet<u64> =
                    (0..64u64).map(|i| mixer.mix(i << shift) & 63).collect();
                assert!(slots.len() >= 24, "{} slots of 64, shift {shift}", slots.len());
            }
        }
    }
}
