//! [`ChunkedVec`]: a growable array that never moves what it holds, for a lane's large arenas
//! (its nodes and runs).
//!
//! A `Vec` grows by allocating a larger buffer and copying everything into it. For an arena of
//! megabytes that fills as a lane ingests, each copy writes fresh pages: in a new process most
//! of a lane's page faults were those copies (about 3,700 of 8,000 on the `documents` shape,
//! the copies themselves aside). Here the first chunk grows like a `Vec` up to [`CHUNK`]
//! elements, and every later chunk is allocated at that size once: growing never copies, and
//! an element's place never changes. Indexing costs one more load (the chunk's buffer), from a
//! table that stays in cache.

use std::ops::{Index, IndexMut};

/// Elements per chunk (a power of two).
const CHUNK_BITS: u32 = 12;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct ChunkedVec<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        Self { chunks: Vec::new(), len: 0 }
    }
}

impl<T> ChunkedVec<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends `value`; returns its index.
    #[inline]
    pub(crate) fn push(&mut self, value: T) -> usize {
        let at = self.len;
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => {
                if chunk.len() == chunk.capacity() {
                    // Only the first chunk is ever short of room: it grows like a `Vec` up to a
                    // chunk, so a small arena stays small.
                    chunk.reserve_exact(chunk.len().max(4).min(CHUNK - chunk.len()));
                }
                chunk.push(value);
            }
            _ => {
                let mut chunk = Vec::with_capacity(if self.chunks.is_empty() { 4 } else { CHUNK });
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        at
    }

    /// Every element, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Every element, in order, mutably.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks.iter_mut().flatten()
    }

    /// Heap bytes allocated (chunk buffers and the chunk table).
    pub(crate) fn bytes(&self) -> usize {
        let buffers: usize = self.chunks.iter().map(|chunk| chunk.capacity()).sum();
        buffers * size_of::<T>() + self.chunks.capacity() * size_of::<Vec<T>>()
    }
}

impl<T> Index<usize> for ChunkedVec<T> {
    type Output = T;

    #[inline]
    fn index(&self, at: usize) -> &T {
        &self.chunks[at >> CHUNK_BITS][at & (CHUNK - 1)]
    }
}

impl<T> IndexMut<usize> for ChunkedVec<T> {
    #[inline]
    fn index_mut(&mut self, at: usize) -> &mut T {
        &mut self.chunks[at >> CHUNK_BITS][at & (CHUNK - 1)]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn elements_stay_where_they_were_put() {
        let mut vec = ChunkedVec::default();
        let mut addresses = Vec::new();
        for i in 0..3 * CHUNK + 5 {
            assert_eq!(vec.push(i as u64), i);
            if i >= CHUNK {
                addresses.push((i, std::ptr::from_ref(&vec[i])));
            }
        }
        assert_eq!(vec.len(), 3 * CHUNK + 5);
        // Past the first chunk, growing never moved an element.
        for (i, address) in addresses {
            assert!(std::ptr::eq(&vec[i], address), "{i} moved");
        }
        vec[7] = 70;
        assert_eq!(vec[7], 70);
        assert!(vec.iter().enumerate().all(|(i, &v)| v == if i == 7 { 70 } else { i as u64 }));
        vec.iter_mut().for_each(|v| *v += 1);
        assert_eq!(vec[CHUNK], CHUNK as u64 + 1);
        assert!(vec.bytes() >= vec.len() * 8);
    }

    #[test]
    fn a_small_arena_stays_small() {
        let mut vec = ChunkedVec::default();
        (0..10u64).for_each(|i| _ = vec.push(i));
        assert!(vec.bytes() < 64 * 8, "{} bytes for 10 elements", vec.bytes());
        assert_eq!(ChunkedVec::<u64>::default().bytes(), 0);
    }
}
