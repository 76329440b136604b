//! [`RouterRng`]: the seedable generator behind tie-breaking and softmax sampling.

use crate::sync::{AtomicU64, Ordering};

/// SplitMix64 over one atomic counter: lock-free, so concurrent `route` calls never wait for
/// each other here, and deterministic for a seed when calls come from one thread.
#[derive(Debug)]
pub struct RouterRng {
    state: AtomicU64,
}

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl RouterRng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }

    /// A generator seeded from the clock and the address space (not reproducible).
    pub fn from_entropy() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let local = 0u8;
        Self::new(nanos ^ (std::ptr::addr_of!(local) as u64).rotate_left(32))
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(GAMMA, Ordering::Relaxed).wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`.
    pub fn next_f64(&self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform index below `n` (`n > 0`).
    pub fn below(&self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}
