//! Resident memory of this process, from `/proc/self/statm`.

/// Bytes per page, as `/proc/self/statm` counts them.
fn page_size() -> u64 {
    // SAFETY: `sysconf` only reads a configuration value.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// The process's resident set size in bytes (0 if `/proc` is unavailable).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let resident: u64 = statm.split_whitespace().nth(1).and_then(|f| f.parse().ok()).unwrap_or(0);
    resident * page_size()
}

/// Hands memory the allocator holds but no one uses back to the kernel (glibc `malloc_trim`),
/// so that RSS counts live data rather than freed event buffers and drained queues.
pub fn trim() {
    // SAFETY: `malloc_trim` only releases free memory of glibc's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
