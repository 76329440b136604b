//! Hash maps keyed by values that are already 64-bit hashes (ours, or an engine's).
//!
//! Such keys need no SipHash: the crate's one mixing function ([`Mixer`], with its fixed seed)
//! spreads them so that hashbrown's control bytes (its top 7 bits) stay well spread even for
//! small or patterned keys, e.g. engine hashes that are counters, or test values. The seed is
//! fixed: use these maps for keys no sender chooses (or seed them, as the index's worker maps
//! do).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::mix::Mixer;

/// Folds one `u64` key with a multiply; see the [module docs](self).
#[derive(Default, Clone, Copy)]
pub(crate) struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys other than `u64`: fold them in byte by byte, still correct.
        for &byte in bytes {
            self.write_u64(self.0 ^ u64::from(byte));
        }
    }

    #[inline]
    fn write_u64(&mut self, key: u64) {
        self.0 = Mixer::FIXED.mix(key ^ self.0);
    }
}

/// Builds [`FoldHasher`]s.
pub(crate) type FoldBuildHasher = BuildHasherDefault<FoldHasher>;

/// A map keyed by a 64-bit hash.
pub(crate) type U64Map<V> = HashMap<u64, V, FoldBuildHasher>;
