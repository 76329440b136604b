//! [`Owners`]: per trie node, how many requests of each worker pass through it.

/// A worker's slot inside one shard (dense, reused after removal).
pub(crate) type Slot = u32;

/// A worker's slot and its count of requests covering a node.
type Entry = (Slot, u32);

/// Workers a node keeps in itself before it spills them to the heap.
const FEW: usize = 3;

/// For one trie node: each worker (by slot) with the number of its requests whose block sequence
/// covers the node, all counts above zero, sorted by slot.
///
/// Up to three workers are kept in the node itself: most nodes are the private tail of one
/// request, and a document held by a few workers is too; a query that finds the trie out of
/// cache then loads the node and its owners as one, instead of following a pointer from the
/// one to the other. The shared system-prompt nodes have one entry per worker of the shard, on
/// the heap.
#[derive(Clone, Debug)]
pub(crate) enum Owners {
    /// At most `FEW` workers: the first `len` entries.
    Few { len: u8, entries: [Entry; FEW] },
    /// More than `FEW` workers.
    Many(Vec<Entry>),
}

impl Default for Owners {
    fn default() -> Self {
        Self::Few { len: 0, entries: [(0, 0); FEW] }
    }
}

/// Equal when they hold the same entries, whatever is left in unused inline room.
impl PartialEq for Owners {
    fn eq(&self, other: &Self) -> bool {
        self.entries() == other.entries()
    }
}

impl Eq for Owners {}

impl Owners {
    /// One request of `slot`.
    pub(crate) fn single(slot: Slot) -> Self {
        let mut entries = [(0, 0); FEW];
        entries[0] = (slot, 1);
        Self::Few { len: 1, entries }
    }

    /// Every `(slot, count)`, by slot, as a slice.
    fn entries(&self) -> &[Entry] {
        match self {
            Self::Few { len, entries } => &entries[..*len as usize],
            Self::Many(entries) => entries,
        }
    }

    /// Whether no request covers the node.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// Whether any request of `slot` covers the node.
    pub(crate) fn contains(&self, slot: Slot) -> bool {
        self.find(slot).is_ok()
    }

    /// How many requests of `slot` cover the node.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn count(&self, slot: Slot) -> u32 {
        self.find(slot).map_or(0, |at| self.entries()[at].1)
    }

    /// Every `(slot, count)`, by slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Slot, u32)> + '_ {
        self.entries().iter().copied()
    }

    /// Starts loading the heap entries, if any (the inline ones are in the node already).
    pub(crate) fn prefetch(&self) {
        if let Self::Many(entries) = self {
            if let Some(first) = entries.first() {
                crate::prefetch::prefetch_line(first);
            }
        }
    }

    fn find(&self, slot: Slot) -> Result<usize, usize> {
        self.entries().binary_search_by_key(&slot, |&(s, _)| s)
    }

    /// The count of the entry at `at`.
    fn count_mut(&mut self, at: usize) -> &mut u32 {
        match self {
            Self::Few { entries, .. } => &mut entries[at].1,
            Self::Many(entries) => &mut entries[at].1,
        }
    }

    /// Counts one more request of `slot`; true if the worker did not cover the node before.
    pub(crate) fn increment(&mut self, slot: Slot) -> bool {
        let at = match self.find(slot) {
            Ok(at) => {
                let count = self.count_mut(at);
                *count = count.saturating_add(1);
                return false;
            }
            Err(at) => at,
        };
        match self {
            Self::Few { len, entries } if (*len as usize) < FEW => {
                entries.copy_within(at..*len as usize, at + 1);
                entries[at] = (slot, 1);
                *len += 1;
            }
            Self::Few { entries, .. } => {
                let mut spilled = Vec::with_capacity(FEW * 2);
                spilled.extend_from_slice(&entries[..at]);
                spilled.push((slot, 1));
                spilled.extend_from_slice(&entries[at..]);
                *self = Self::Many(spilled);
            }
            Self::Many(entries) => entries.insert(at, (slot, 1)),
        }
        true
    }

    /// Counts one request of `slot` less; true if the worker no longer covers the node.
    /// A slot with no count is left alone (and reported as not dropped).
    pub(crate) fn decrement(&mut self, slot: Slot) -> bool {
        let Ok(at) = self.find(slot) else { return false };
        let count = self.count_mut(at);
        if *count > 1 {
            *count -= 1;
            return false;
        }
        match self {
            Self::Few { len, entries } => {
                entries.copy_within(at + 1..*len as usize, at);
                *len -= 1;
                entries[*len as usize] = (0, 0);
            }
            Self::Many(entries) => {
                entries.remove(at);
                if entries.len() <= FEW {
                    let mut few = [(0, 0); FEW];
                    few[..entries.len()].copy_from_slice(entries);
                    *self = Self::Few { len: entries.len() as u8, entries: few };
                }
            }
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_go_up_and_down_and_report_coverage_changes() {
        let mut owners = Owners::default();
        assert!(owners.is_empty());
        assert!(owners.increment(5));
        assert!(!owners.increment(5));
        assert!(owners.increment(2));
        assert!(owners.increment(9));
        assert_eq!(owners.iter().collect::<Vec<_>>(), vec![(2, 1), (5, 2), (9, 1)]);
        assert!(!owners.decrement(5));
        assert!(owners.decrement(2));
        assert!(!owners.decrement(2), "an absent slot is not dropped twice");
        assert!(owners.decrement(9));
        assert_eq!(owners, Owners::single(5), "a single remaining owner is stored inline");
        assert!(matches!(owners, Owners::Few { len: 1, .. }));
        assert_eq!(owners.count(5), 1);
        assert!(owners.decrement(5));
        assert!(owners.is_empty());
        assert!(!owners.decrement(5));
    }

    #[test]
    fn equal_coverage_compares_equal_whatever_the_history() {
        let mut a = Owners::default();
        a.increment(1);
        a.increment(3);
        a.decrement(3);
        let mut b = Owners::default();
        b.increment(1);
        assert_eq!(a, b);
    }

    #[test]
    fn owners_spill_to_the_heap_and_back_like_a_map() {
        let mut owners = Owners::default();
        let mut model = std::collections::BTreeMap::<Slot, u32>::new();
        let mut state = 11u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Few slots, so nodes cross three owners back and forth.
            let slot = (state >> 33) as Slot % 7;
            if state >> 63 == 0 {
                let fresh = !model.contains_key(&slot);
                *model.entry(slot).or_default() += 1;
                assert_eq!(owners.increment(slot), fresh);
            } else {
                let dropped = model.get(&slot) == Some(&1);
                match model.get_mut(&slot) {
                    Some(1) => {
                        model.remove(&slot);
                    }
                    Some(count) => *count -= 1,
                    None => {}
                }
                assert_eq!(owners.decrement(slot), dropped);
            }
            assert_eq!(
                owners.iter().collect::<Vec<_>>(),
                model.iter().map(|(&s, &c)| (s, c)).collect::<Vec<_>>()
            );
            assert_eq!(matches!(owners, Owners::Few { .. }), model.len() <= FEW, "inline iff few");
            let mut rebuilt = Owners::default();
            for (&slot, &count) in &model {
                for _ in 0..count {
                    rebuilt.increment(slot);
                }
            }
            assert_eq!(owners, rebuilt, "equal whatever the history");
        }
    }
}
