//! Allocator room a lane reserves on its own thread as it fills memory.
//!
//! glibc gives each thread that allocates an arena of its own, and grows that arena's heap by
//! exactly what an allocation is short of: in practice one page at a time, each a system call
//! (`mprotect`) that also takes the process's memory-map lock, which stalls the other lanes'
//! page faults while it is held. A lane filling a fresh index does that for every 4 KiB it
//! allocates: about 900 calls per lane in the `documents` comparison's ingest, a sixth of the
//! lanes' time there. The heap keeps the room it has grown to once (freed memory at its top
//! goes back to the kernel, its address range stays usable), so allocating and freeing
//! `bytes` once makes later growth up to that size free of system calls. The freed pages go
//! back to the kernel when glibc trims the heap, except a header page per block when it does
//! not (its trim threshold rises once the program frees large mappings); so the index lane
//! reserves in steps sized to its growth (`IndexLane::reserve_heap_as_it_grows`), not all at
//! once. With allocators that do not grow a heap this way it is an allocation and a free.

/// The blocks the reservation is made of: below glibc's smallest threshold for serving an
/// allocation by a mapping of its own (128 KiB), so they come from the thread's heap, and as
/// large as that allows, since each writes a header page that stays resident if the heap is
/// not trimmed.
const BLOCK: usize = 120 << 10;

/// Allocates `bytes` (in blocks) on this thread and frees them (see the [module docs](self)).
pub(crate) fn reserve(bytes: usize) {
    if cfg!(miri) {
        return;
    }
    let blocks: Vec<Vec<u8>> = (0..bytes / BLOCK).map(|_| Vec::with_capacity(BLOCK)).collect();
    drop(std::hint::black_box(blocks));
}
