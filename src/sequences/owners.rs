//! [`Owners`]: per trie node, how many requests of each worker pass through it.

/// A worker's slot inside one shard (dense, reused after removal).
pub(crate) type Slot = u32;

/// A worker's slot and its count of requests covering a node.
type Entry = (Slot, u32);

/// For one trie node: each worker (by slot) with the number of its requests whose block sequence
/// covers the node, all counts above zero.
///
/// Most nodes are the private tail of one request (one owner, no allocation); the shared
/// system-prompt nodes have one entry per worker of the shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Owners {
    /// No request covers the node.
    #[default]
    Empty,
    /// Exactly one worker: `(slot, count)`.
    One(Slot, u32),
    /// Two or more workers, sorted by slot.
    Many(Vec<(Slot, u32)>),
}

impl Owners {
    /// One request of `slot`.
    pub(crate) fn single(slot: Slot) -> Self {
        Self::One(slot, 1)
    }

    /// Whether no request covers the node.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Self::Empty)
    }

    /// Whether any request of `slot` covers the node.
    pub(crate) fn contains(&self, slot: Slot) -> bool {
        self.iter().any(|(s, _)| s == slot)
    }

    /// How many requests of `slot` cover the node.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn count(&self, slot: Slot) -> u32 {
        self.iter().find(|&(s, _)| s == slot).map_or(0, |(_, count)| count)
    }

    /// Every `(slot, count)`, by slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Slot, u32)> + '_ {
        let (one, many): (Option<Entry>, &[Entry]) = match self {
            Self::Empty => (None, &[]),
            Self::One(slot, count) => (Some((*slot, *count)), &[]),
            Self::Many(entries) => (None, entries),
        };
        one.into_iter().chain(many.iter().copied())
    }

    /// Starts loading the heap entries, if any (the inline cases are in the node already).
    pub(crate) fn prefetch(&self) {
        if let Self::Many(entries) = self {
            if let Some(first) = entries.first() {
                crate::prefetch::prefetch_line(first);
            }
        }
    }

    /// Counts one more request of `slot`; true if the worker did not cover the node before.
    pub(crate) fn increment(&mut self, slot: Slot) -> bool {
        match self {
            Self::Empty => {
                *self = Self::single(slot);
                true
            }
            Self::One(owner, count) if *owner == slot => {
                *count = count.saturating_add(1);
                false
            }
            Self::One(owner, count) => {
                let mut entries = vec![(*owner, *count), (slot, 1)];
                entries.sort_unstable();
                *self = Self::Many(entries);
                true
            }
            Self::Many(entries) => match entries.binary_search_by_key(&slot, |&(s, _)| s) {
                Ok(at) => {
                    entries[at].1 = entries[at].1.saturating_add(1);
                    false
                }
                Err(at) => {
                    entries.insert(at, (slot, 1));
                    true
                }
            },
        }
    }

    /// Counts one request of `slot` less; true if the worker no longer covers the node.
    /// A slot with no count is left alone (and reported as not dropped).
    pub(crate) fn decrement(&mut self, slot: Slot) -> bool {
        match self {
            Self::One(owner, count) if *owner == slot => {
                if *count > 1 {
                    *count -= 1;
                    false
                } else {
                    *self = Self::Empty;
                    true
                }
            }
            Self::Many(entries) => {
                let Ok(at) = entries.binary_search_by_key(&slot, |&(s, _)| s) else {
                    return false;
                };
                if entries[at].1 > 1 {
                    entries[at].1 -= 1;
                    return false;
                }
                entries.remove(at);
                if let [(owner, count)] = entries[..] {
                    *self = Self::One(owner, count);
                }
                true
            }
            _ => false,
        }
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
        assert_eq!(owners, Owners::One(5, 1), "a single remaining owner is stored inline");
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
}
