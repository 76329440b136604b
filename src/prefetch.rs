//! Cache prefetch hints: asking the processor to start loading memory that will be read soon,
//! so independent cache misses overlap instead of stalling one after another.

/// Starts loading the cache line at `value` into the nearest cache.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn prefetch_line<T>(value: &T) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is only a hint: it never faults and changes no memory.
    unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast()) }
}

/// Starts loading the cache line at `value` (a no-op off x86_64).
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub(crate) fn prefetch_line<T>(_: &T) {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Prefetching changes nothing (run under miri too: `cargo +nightly miri test --lib
    /// prefetch`).
    #[test]
    fn prefetch_changes_nothing() {
        let items: Vec<u64> = (0..100).collect();
        prefetch_line(&items[0]);
        prefetch_line(&items[99]);
        prefetch_line(&());
        assert_eq!(items, (0..100).collect::<Vec<u64>>());
    }
}
