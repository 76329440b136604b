//! [`NodeIds`]: the node at each offset of a run, for the lane that owns it.
//!
//! A run's blocks mostly have consecutive node ids: a branch's new blocks take ids in order
//! (from the end of the lane's arena when no freed ones wait), and compacting renumbers every
//! run's nodes in order. Such a run records its first id and its length, with nothing to
//! allocate; a run whose ids are not consecutive (reused ids, an append after other blocks)
//! keeps them in a list. In the `documents` comparison that took one allocation (and its free)
//! off nearly every event.

/// Identifies a node (one block's place in the tree) to its lane.
pub(crate) type NodeId = u32;

/// See the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeIds {
    /// `first`, `first + 1`, … `first + len - 1`.
    Span {
        first: NodeId,
        len: u32,
    },
    List(Vec<NodeId>),
}

impl NodeIds {
    /// The ids `ids`, as a span if they are consecutive.
    pub(crate) fn new(ids: &[NodeId]) -> Self {
        match ids.first() {
            Some(&first) if is_span(first, ids) => Self::Span { first, len: ids.len() as u32 },
            _ => Self::List(ids.to_vec()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Span { len, .. } => *len as usize,
            Self::List(ids) => ids.len(),
        }
    }

    /// The id at `offset`.
    #[inline]
    pub(crate) fn get(&self, offset: usize) -> NodeId {
        match self {
            Self::Span { first, len } => {
                assert!(offset < *len as usize, "offset {offset} past a run of {len}");
                first + offset as NodeId
            }
            Self::List(ids) => ids[offset],
        }
    }

    /// The last id (of a run, never empty).
    pub(crate) fn last(&self) -> NodeId {
        self.get(self.len() - 1)
    }

    /// Every id, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        let (span, list) = match self {
            Self::Span { first, len } => (*first..first + len, &[][..]),
            Self::List(ids) => (0..0, &ids[..]),
        };
        span.chain(list.iter().copied())
    }

    /// Appends `ids`.
    pub(crate) fn extend(&mut self, ids: &[NodeId]) {
        if let Self::Span { first, len } = self {
            if ids.first() == Some(&(*first + *len)) && is_span(*first + *len, ids) {
                *len += ids.len() as u32;
                return;
            }
            *self = Self::List(self.iter().collect());
        }
        if let Self::List(list) = self {
            list.extend_from_slice(ids);
        }
    }

    /// Appends the ids of `tail` (a span that continues a span stays one).
    pub(crate) fn append(&mut self, tail: &NodeIds) {
        match tail {
            Self::List(ids) => self.extend(ids),
            &Self::Span { first, len } => match self {
                Self::Span { first: head, len: head_len } if *head + *head_len == first => {
                    *head_len += len;
                }
                Self::List(ids) => ids.extend(first..first + len),
                Self::Span { .. } => {
                    let mut ids: Vec<NodeId> = self.iter().collect();
                    ids.extend(first..first + len);
                    *self = Self::List(ids);
                }
            },
        }
    }

    /// Keeps the ids before `at` and returns the rest.
    pub(crate) fn split_off(&mut self, at: usize) -> Self {
        match self {
            Self::Span { first, len } => {
                let tail = Self::Span { first: *first + at as NodeId, len: *len - at as u32 };
                *len = at as u32;
                tail
            }
            Self::List(ids) => {
                let tail = Self::new(&ids[at..]);
                ids.truncate(at);
                *self = Self::new(ids);
                tail
            }
        }
    }

    /// Gives back a list's spare capacity once it is most of the list.
    pub(crate) fn shrink(&mut self) {
        if let Self::List(ids) = self {
            if ids.capacity() > 2 * ids.len() + 8 {
                ids.shrink_to_fit();
            }
        }
    }

    /// Heap bytes of a list.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Self::Span { .. } => 0,
            Self::List(ids) => ids.capacity() * size_of::<NodeId>(),
        }
    }
}

/// Whether `ids` are `first`, `first + 1`, … (never past `NodeId::MAX`).
fn is_span(first: NodeId, ids: &[NodeId]) -> bool {
    ids.iter().enumerate().all(|(at, &id)| u64::from(id) == u64::from(first) + at as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ids(ids: &NodeIds) -> Vec<NodeId> {
        ids.iter().collect()
    }

    #[test]
    fn consecutive_ids_are_a_span_until_they_are_not() {
        let mut run = NodeIds::new(&[5, 6, 7]);
        assert!(matches!(run, NodeIds::Span { first: 5, len: 3 }));
        run.extend(&[8, 9]);
        assert!(matches!(run, NodeIds::Span { first: 5, len: 5 }));
        assert_eq!((run.get(4), run.last(), run.len()), (9, 9, 5));
        run.extend(&[20, 21]);
        assert_eq!(ids(&run), [5, 6, 7, 8, 9, 20, 21]);
        assert!(matches!(run, NodeIds::List(_)));
        // Splitting a list leaves spans where the parts are consecutive.
        let tail = run.split_off(5);
        assert_eq!((ids(&run), ids(&tail)), (vec![5, 6, 7, 8, 9], vec![20, 21]));
        assert!(matches!((&run, &tail), (NodeIds::Span { .. }, NodeIds::Span { .. })));
        let mut span = NodeIds::new(&[1, 2, 3, 4]);
        let back = span.split_off(1);
        assert_eq!((ids(&span), ids(&back)), (vec![1], vec![2, 3, 4]));
        assert_eq!(NodeIds::new(&[3, 2]), NodeIds::List(vec![3, 2]));
        assert_eq!(NodeIds::new(&[NodeId::MAX]).last(), NodeId::MAX);
        assert_eq!(NodeIds::new(&[NodeId::MAX, 0]), NodeIds::List(vec![NodeId::MAX, 0]));
        assert_eq!(span.heap_bytes(), 0);
    }

    #[test]
    #[should_panic(expected = "past a run")]
    fn a_span_is_checked_like_a_list() {
        NodeIds::new(&[1, 2]).get(2);
    }
}
