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

/// Starts loading every cache line `value` spans (a value of a few lines, read whole soon).
#[inline]
pub(crate) fn prefetch_all<T>(value: &T) {
    prefetch_slice(std::slice::from_ref(value), usize::MAX);
}

/// Starts loading the lines of `items`, up to `max_lines` of them.
#[inline]
pub(crate) fn prefetch_slice<T>(items: &[T], max_lines: usize) {
    let start = items.as_ptr().cast::<u8>();
    let span = (start.addr() % LINE + size_of_val(items)).min(max_lines.saturating_mul(LINE));
    prefetch_lines(start, span);
}

/// Starts loading the lines of the `bytes` bytes at `address`, which need not be valid: a
/// prefetch of any address is harmless (for hints kept as plain numbers).
#[inline]
pub(crate) fn prefetch_span(address: usize, bytes: usize) {
    prefetch_lines(std::ptr::without_provenance(address), (address % LINE).saturating_add(bytes));
}

const LINE: usize = 64;

/// Starts loading the lines of the `span` bytes from the start of `start`'s line.
#[inline]
fn prefetch_lines(start: *const u8, span: usize) {
    let line = start.wrapping_byte_sub(start.addr() % LINE);
    for offset in (0..span).step_by(LINE) {
        prefetch_address(line.wrapping_byte_add(offset));
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_address(address: *const u8) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is only a hint: it never faults (whatever the address) and changes
    // no memory.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast()) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn prefetch_address(_: *const u8) {}

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
        prefetch_all(&items[3]);
        prefetch_all(&[0u64; 40]);
        prefetch_slice(&items, 4);
        prefetch_slice(&items[..0], 4);
        prefetch_span(items.as_ptr() as usize + 3, 200);
        prefetch_span(usize::MAX - 10, 100);
        prefetch_span(0, 0);
        assert_eq!(items, (0..100).collect::<Vec<u64>>());
    }
}
