//! [`SeqCheckpoints`]: our sequence hash of every [`SEQ_STRIDE`]-th block of a run, so the
//! writer can rehash any block's from the nearest one before it rather than from the root.
//!
//! The first one is the run's key in its lane's table and is kept inline: most runs are shorter
//! than the stride where documents or prompts are reused, and an allocation holding one hash
//! cost them about 4 bytes per live entry.

/// A run keeps our sequence hash of every `SEQ_STRIDE`-th block; the others are rehashed from
/// the nearest one before when needed (the run's last one is in its state).
pub(crate) const SEQ_STRIDE: usize = 16;

/// See the [module docs](self).
pub(crate) struct SeqCheckpoints {
    /// At offset 0: the run's key.
    first: u64,
    /// At offsets `SEQ_STRIDE`, 2·`SEQ_STRIDE`, …
    rest: Vec<u64>,
}

impl SeqCheckpoints {
    /// The checkpoints of a run whose blocks' sequence hashes are `seqs` (at least one).
    pub(crate) fn of_chain(seqs: &[u64]) -> Self {
        let rest = seqs.iter().skip(SEQ_STRIDE).step_by(SEQ_STRIDE).copied().collect();
        Self { first: seqs[0], rest }
    }

    /// The checkpoints of a run whose first block hashes to `first` and whose content hashes
    /// are `locals`, each block's hash chained from the one before by `next`.
    pub(crate) fn chained(first: u64, locals: &[u64], next: impl Fn(u64, u64) -> u64) -> Self {
        let mut rest = Vec::with_capacity(locals.len().div_ceil(SEQ_STRIDE).saturating_sub(1));
        let mut seq = first;
        for (offset, &local) in locals.iter().enumerate().skip(1) {
            seq = next(seq, local);
            if offset.is_multiple_of(SEQ_STRIDE) {
                rest.push(seq);
            }
        }
        Self { first, rest }
    }

    /// The run's key: our sequence hash of its first block.
    pub(crate) fn key(&self) -> u64 {
        self.first
    }

    /// Our sequence hash of the block at offset `index · SEQ_STRIDE`.
    pub(crate) fn at(&self, index: usize) -> u64 {
        match index {
            0 => self.first,
            _ => self.rest[index - 1],
        }
    }

    /// Keeps those of the run's first `len` blocks (at least one).
    pub(crate) fn truncate(&mut self, len: usize) {
        self.rest.truncate(len.div_ceil(SEQ_STRIDE) - 1);
        if self.rest.capacity() > 2 * self.rest.len() + 8 {
            self.rest.shrink_to_fit();
        }
    }

    /// Adds those of blocks appended at `offset` (the run's length before), whose sequence
    /// hashes are `seqs`.
    pub(crate) fn extend_at(&mut self, offset: usize, seqs: &[u64]) {
        let kept =
            seqs.iter().enumerate().filter(|(step, _)| (offset + step).is_multiple_of(SEQ_STRIDE));
        self.rest.extend(kept.map(|(_, &seq)| seq));
    }

    /// Heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.rest.capacity() * size_of::<u64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A stand-in chaining rule: enough to tell offsets apart.
    fn next(seq: u64, local: u64) -> u64 {
        seq.wrapping_mul(31).wrapping_add(local)
    }

    fn chain(first: u64, locals: &[u64]) -> Vec<u64> {
        let mut seqs = vec![first];
        for &local in &locals[1..] {
            seqs.push(next(*seqs.last().unwrap(), local));
        }
        seqs
    }

    #[test]
    fn every_stride_th_hash_is_kept_however_the_run_was_built() {
        for len in [1, 2, SEQ_STRIDE - 1, SEQ_STRIDE, SEQ_STRIDE + 1, 3 * SEQ_STRIDE + 5] {
            let locals: Vec<u64> = (0..len as u64).map(|i| i * 7 + 3).collect();
            let seqs = chain(99, &locals);
            let expected: Vec<u64> = seqs.iter().step_by(SEQ_STRIDE).copied().collect();
            let built = SeqCheckpoints::chained(99, &locals, next);
            let of_chain = SeqCheckpoints::of_chain(&seqs);
            // Appended in two parts, split anywhere.
            for cut in 1..len {
                let mut appended = SeqCheckpoints::of_chain(&seqs[..cut]);
                appended.extend_at(cut, &seqs[cut..]);
                let got: Vec<u64> = (0..expected.len()).map(|i| appended.at(i)).collect();
                assert_eq!(got, expected, "len {len} cut {cut}");
            }
            for checkpoints in [&built, &of_chain] {
                let got: Vec<u64> = (0..expected.len()).map(|i| checkpoints.at(i)).collect();
                assert_eq!(got, expected, "len {len}");
                assert_eq!(checkpoints.key(), 99);
                assert_eq!(checkpoints.rest.len(), expected.len() - 1);
            }
            // Truncated to any length, those of the kept blocks stay.
            for keep in 1..=len {
                let mut cut = SeqCheckpoints::of_chain(&seqs);
                cut.truncate(keep);
                assert_eq!(cut.rest.len(), keep.div_ceil(SEQ_STRIDE) - 1, "keep {keep}");
                for (i, &seq) in expected.iter().take(keep.div_ceil(SEQ_STRIDE)).enumerate() {
                    assert_eq!(cut.at(i), seq);
                }
            }
        }
        assert_eq!(SeqCheckpoints::of_chain(&[5]).heap_bytes(), 0, "a short run allocates none");
    }
}
