//! [`NodeIds`]: the node at each offset of a run, for the lane that owns it.
//!
//! A run's blocks mostly have consecutive node ids: a branch's new blocks take ids in order
//! (from the end of the lane's arena when no freed ones wait), and compacting renumbers every
//! run's nodes in order. Such a run records its first id and its length, with nothing to
//! allocate. Ids freed by one run come back in reverse order (the free list is a stack), and a
//! run appended to after other blocks were stored continues elsewhere, so most other runs are a
//! few stretches of consecutive ids, up or down: they keep one 8-byte [`Stretch`] each rather
//! than 4 bytes a block (after four passes of the soak's `conversation` shape, where runs grow
//! over a conversation's turns, 96,000 ids of one lane sat in 4,900 stretches). Ids with no
//! such order (stretches shorter than [`MIN_STRETCH`] on average) are kept in a list.
//!
//! Spans are the common case on every path (new runs, splits, appends), so only they are
//! handled inline; stretches and lists are out of line, where they cost the span path nothing.

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
    /// The ids in stretches, each ending at an offset after the one before.
    Stretches(Box<[Stretch]>),
    List(Vec<NodeId>),
}

/// Consecutive ids up or down from the first, to the run's offset `end` (exclusive), from the
/// previous stretch's end (or 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stretch {
    /// The first id; [`DOWN`] set if the ids count down from it.
    first: u32,
    end: u32,
}

/// Marks a stretch whose ids count down. Node ids stay below it (a lane holds at most
/// [`crate::index::MAX_LANE_BLOCKS`], 2^31, nodes), so spans and stretches never overflow.
const DOWN: u32 = 1 << 31;

/// Stretches are kept while they average at least this many ids (half a list's bytes or less).
const MIN_STRETCH: usize = 4;

impl Stretch {
    /// The id `step` places after the first.
    #[inline]
    fn id(self, step: u32) -> NodeId {
        if self.first & DOWN == 0 { self.first + step } else { (self.first & !DOWN) - step }
    }
}

impl NodeIds {
    /// The ids `ids`, in the most compact form that fits them.
    pub(crate) fn new(ids: &[NodeId]) -> Self {
        match ids.split_first() {
            Some((&first, _)) if is_span(first, ids) => Self::Span { first, len: ids.len() as u32 },
            _ => Self::scattered(ids),
        }
    }

    /// [`Self::new`] for ids that are not one span; out of line, off the spans' path.
    #[inline(never)]
    fn scattered(ids: &[NodeId]) -> Self {
        let mut built = Self::List(Vec::new());
        built.extend_scattered(ids);
        built
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Span { len, .. } => *len as usize,
            Self::Stretches(stretches) => stretches.last().map_or(0, |last| last.end as usize),
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
            Self::Stretches(stretches) => stretched_get(stretches, offset),
            Self::List(ids) => ids[offset],
        }
    }

    /// The last id (of a run, never empty).
    pub(crate) fn last(&self) -> NodeId {
        self.get(self.len() - 1)
    }

    /// Every id, in order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        match self {
            Self::Span { first, len } => Iter::Span(*first..first + len),
            Self::Stretches(stretches) => Iter::Stretches { stretches, start: 0, step: 0 },
            Self::List(ids) => Iter::List(ids.iter().copied()),
        }
    }

    /// Appends every id to `out`.
    pub(crate) fn copy_into(&self, out: &mut Vec<NodeId>) {
        match self {
            Self::Span { first, len } => out.extend(*first..first + len),
            Self::Stretches(stretches) => copy_stretched(stretches, out),
            Self::List(ids) => out.extend_from_slice(ids),
        }
    }

    /// Appends `ids`.
    pub(crate) fn extend(&mut self, ids: &[NodeId]) {
        match self {
            Self::Span { first, len } if is_span(*first + *len, ids) => *len += ids.len() as u32,
            _ => self.extend_scattered(ids),
        }
    }

    /// [`Self::extend`] where `ids` do not continue a span; out of line, off the spans' path.
    #[inline(never)]
    fn extend_scattered(&mut self, ids: &[NodeId]) {
        debug_assert!(ids.iter().all(|&id| id < DOWN), "node ids stay below 2^31");
        match self {
            Self::List(list) if !list.is_empty() => list.extend_from_slice(ids),
            _ => self.extend_pieces(pieces_of(ids)),
        }
    }

    /// Appends the ids of `tail` (a span that continues a span stays one).
    pub(crate) fn append(&mut self, tail: &NodeIds) {
        match (&mut *self, tail) {
            (Self::Span { first, len }, &Self::Span { first: next, len: more })
                if *first + *len == next =>
            {
                *len += more;
            }
            (_, Self::List(ids)) => self.extend(ids),
            (Self::List(list), _) if !list.is_empty() => list.extend(tail.iter()),
            (_, Self::Span { first, len }) => {
                self.extend_pieces(std::iter::once(Piece {
                    first: *first,
                    len: *len,
                    down: false,
                }));
            }
            (_, Self::Stretches(stretches)) => self.extend_pieces(stretch_pieces(stretches, 0)),
        }
    }

    /// Appends `pieces` to a span, stretches or an empty list, and takes the most compact form
    /// for the whole.
    fn extend_pieces(&mut self, pieces: impl Iterator<Item = Piece>) {
        let mut stretches = match std::mem::replace(self, Self::List(Vec::new())) {
            Self::Span { first, len } if len > 0 => vec![Stretch { first, end: len }],
            Self::Stretches(stretches) => {
                // Room for the usual one more stretch, so that the box needs no resizing.
                let mut grown = Vec::with_capacity(stretches.len() + 1);
                grown.extend_from_slice(&stretches);
                grown
            }
            Self::Span { .. } => Vec::new(),
            Self::List(list) => {
                debug_assert!(list.is_empty(), "a list is extended as a list");
                Vec::new()
            }
        };
        for piece in pieces {
            push_piece(&mut stretches, piece);
        }
        *self = settled(stretches);
    }

    /// Keeps the ids before `at` and returns the rest.
    pub(crate) fn split_off(&mut self, at: usize) -> Self {
        if let Self::Span { first, len } = self {
            let tail = Self::Span { first: *first + at as NodeId, len: *len - at as u32 };
            *len = at as u32;
            return tail;
        }
        self.split_off_scattered(at)
    }

    /// [`Self::split_off`] of stretches or a list; out of line, off the spans' path.
    #[inline(never)]
    fn split_off_scattered(&mut self, at: usize) -> Self {
        match self {
            Self::Span { .. } => unreachable!("spans split inline"),
            Self::Stretches(stretches) => {
                let cut = stretches.partition_point(|stretch| stretch.end as usize <= at);
                let start = if cut == 0 { 0 } else { stretches[cut - 1].end };
                let mut head = std::mem::take(stretches).into_vec();
                let mut tail = head.split_off(cut);
                if at as u32 > start {
                    // `at` falls inside the stretch: its head stays, its rest starts the tail.
                    let split = tail[0];
                    head.push(Stretch { end: at as u32, ..split });
                    tail[0].first = split.id(at as u32 - start) | (split.first & DOWN);
                }
                for stretch in &mut tail {
                    stretch.end -= at as u32;
                }
                *self = settled(head);
                settled(tail)
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
        if let Self::List(ids) = self
            && ids.capacity() > 2 * ids.len() + 8
        {
            ids.shrink_to_fit();
        }
    }

    /// Heap bytes of stretches or a list.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Self::Span { .. } => 0,
            Self::Stretches(stretches) => size_of_val::<[Stretch]>(stretches),
            Self::List(ids) => ids.capacity() * size_of::<NodeId>(),
        }
    }
}

/// The most compact form for `stretches`: a span for one stretch up, a list for stretches too
/// short to pay.
fn settled(stretches: Vec<Stretch>) -> NodeIds {
    let len = stretches.last().map_or(0, |last| last.end as usize);
    match stretches[..] {
        [] => NodeIds::List(Vec::new()),
        [Stretch { first, end }] if first & DOWN == 0 || end == 1 => {
            NodeIds::Span { first: first & !DOWN, len: end }
        }
        _ if stretches.len() * MIN_STRETCH > len => {
            let mut ids = Vec::with_capacity(len);
            ids.extend(Iter::Stretches { stretches: &stretches, start: 0, step: 0 });
            NodeIds::List(ids)
        }
        _ => NodeIds::Stretches(stretches.into_boxed_slice()),
    }
}

/// Whether `ids` are `first`, `first + 1`, … (none empty).
fn is_span(first: NodeId, ids: &[NodeId]) -> bool {
    !ids.is_empty() && ids.iter().enumerate().all(|(at, &id)| id == first + at as NodeId)
}

/// The ids of a [`NodeIds`], in order.
pub(crate) enum Iter<'a> {
    Span(std::ops::Range<NodeId>),
    /// At `step` into the first of `stretches`, which starts at offset `start`.
    Stretches {
        stretches: &'a [Stretch],
        start: u32,
        step: u32,
    },
    List(std::iter::Copied<std::slice::Iter<'a, NodeId>>),
}

impl Iterator for Iter<'_> {
    type Item = NodeId;

    #[inline]
    fn next(&mut self) -> Option<NodeId> {
        match self {
            Self::Span(ids) => ids.next(),
            Self::Stretches { stretches, start, step } => {
                let (&stretch, rest) = stretches.split_first()?;
                let id = stretch.id(*step);
                *step += 1;
                if *start + *step == stretch.end {
                    (*stretches, *start, *step) = (rest, stretch.end, 0);
                }
                Some(id)
            }
            Self::List(ids) => ids.next(),
        }
    }

    /// Loops over each form's ids on its own (`for_each` and most adapters come here).
    fn fold<B, F: FnMut(B, NodeId) -> B>(self, init: B, f: F) -> B {
        match self {
            Self::Span(ids) => ids.fold(init, f),
            Self::Stretches { stretches, start, step } => {
                fold_stretched(stretches, start, step, init, f)
            }
            Self::List(ids) => ids.fold(init, f),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = match self {
            Self::Span(ids) => ids.len(),
            Self::Stretches { stretches, start, step } => {
                stretches.last().map_or(0, |last| (last.end - start - step) as usize)
            }
            Self::List(ids) => ids.len(),
        };
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// [`Iter::fold`] over stretches, from `step` into the first (which starts at `start`); out
/// of line, off the spans' path.
#[inline(never)]
fn fold_stretched<B>(
    stretches: &[Stretch],
    start: u32,
    step: u32,
    init: B,
    mut f: impl FnMut(B, NodeId) -> B,
) -> B {
    let mut acc = init;
    for (at, Piece { first, len, down }) in stretch_pieces(stretches, start).enumerate() {
        let from = if at == 0 { step } else { 0 };
        acc = if down {
            (first + 1 - len..=first - from).rev().fold(acc, &mut f)
        } else {
            (first + from..first + len).fold(acc, &mut f)
        };
    }
    acc
}

/// [`NodeIds::copy_into`] for stretches; out of line, off the spans' path.
#[inline(never)]
fn copy_stretched(stretches: &[Stretch], out: &mut Vec<NodeId>) {
    out.reserve(stretches.last().map_or(0, |last| last.end as usize));
    for Piece { first, len, down } in stretch_pieces(stretches, 0) {
        if down {
            out.extend((first + 1 - len..=first).rev());
        } else {
            out.extend(first..first + len);
        }
    }
}

/// The id at `offset` of a run in `stretches`; out of line, off the spans' path.
#[inline(never)]
fn stretched_get(stretches: &[Stretch], offset: usize) -> NodeId {
    let at = stretches.partition_point(|stretch| stretch.end as usize <= offset);
    let Some(&stretch) = stretches.get(at) else {
        let len = stretches.last().map_or(0, |last| last.end);
        panic!("offset {offset} past a run of {len}")
    };
    let start = if at == 0 { 0 } else { stretches[at - 1].end };
    stretch.id(offset as u32 - start)
}

/// Ids `first`, then up from it, or (`down`) down; all below [`DOWN`].
#[derive(Clone, Copy)]
struct Piece {
    first: NodeId,
    len: u32,
    down: bool,
}

/// The pieces `stretches` are, in order, the first of them starting at the run's offset `start`.
fn stretch_pieces(stretches: &[Stretch], start: u32) -> impl Iterator<Item = Piece> + '_ {
    let starts = std::iter::once(start).chain(stretches.iter().map(|stretch| stretch.end));
    stretches.iter().zip(starts).map(|(&Stretch { first, end }, start)| Piece {
        first: first & !DOWN,
        len: end - start,
        down: first & DOWN != 0,
    })
}

/// `ids` (below [`DOWN`]) cut into the longest pieces, in order.
fn pieces_of(ids: &[NodeId]) -> impl Iterator<Item = Piece> + '_ {
    let mut rest = ids;
    std::iter::from_fn(move || {
        let (&first, after) = rest.split_first()?;
        let up = after.iter().zip(1..).take_while(|&(&id, step)| id == first + step).count();
        let down = if up > 0 {
            0
        } else {
            after
                .iter()
                .zip(1..)
                .take_while(|&(&id, step)| first.checked_sub(step) == Some(id))
                .count()
        };
        let len = 1 + up.max(down);
        rest = &rest[len..];
        Some(Piece { first, len: len as u32, down: down > 0 })
    })
}

/// Appends `piece` to `stretches`: to the last stretch where it continues it.
#[inline]
fn push_piece(stretches: &mut Vec<Stretch>, piece: Piece) {
    let start = match stretches[..] {
        [.., before, _] => before.end,
        _ => 0,
    };
    if let Some(last) = stretches.last_mut() {
        let (len, base) = (last.end - start, last.first & !DOWN);
        let down = last.first & DOWN != 0;
        // A stretch or piece of one id may count either way.
        let up_ok = (!down || len == 1) && (!piece.down || piece.len == 1);
        let down_ok = (down || len == 1) && (piece.down || piece.len == 1);
        if up_ok && base + len == piece.first {
            (last.first, last.end) = (base, last.end + piece.len);
            return;
        }
        if down_ok && base.checked_sub(len) == Some(piece.first) {
            (last.first, last.end) = (base | DOWN, last.end + piece.len);
            return;
        }
    }
    let end = stretches.last().map_or(0, |last| last.end) + piece.len;
    let first = if piece.down && piece.len > 1 { piece.first | DOWN } else { piece.first };
    stretches.push(Stretch { first, end });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ids(ids: &NodeIds) -> Vec<NodeId> {
        ids.iter().collect()
    }

    /// Checks every way of reading `ids` against `model`.
    fn agrees(ids: &NodeIds, model: &[NodeId]) -> Result<(), TestCaseError> {
        prop_assert_eq!(ids.len(), model.len());
        prop_assert_eq!(self::ids(ids), model);
        let mut copied = vec![7];
        ids.copy_into(&mut copied);
        prop_assert_eq!(&copied[1..], model);
        // Folding picks up where `next` left off, inside a stretch or at its end.
        for taken in 0..model.len().min(3) {
            let mut iter = ids.iter();
            let mut seen: Vec<NodeId> = iter.by_ref().take(taken).collect();
            prop_assert_eq!(iter.len(), model.len() - taken);
            iter.for_each(|id| seen.push(id));
            prop_assert_eq!(&seen, model);
        }
        for (offset, &id) in model.iter().enumerate() {
            prop_assert_eq!(ids.get(offset), id);
        }
        Ok(())
    }

    #[test]
    fn consecutive_ids_are_a_span_until_they_are_not() {
        let mut run = NodeIds::new(&[5, 6, 7]);
        assert!(matches!(run, NodeIds::Span { first: 5, len: 3 }));
        run.extend(&[8, 9]);
        assert!(matches!(run, NodeIds::Span { first: 5, len: 5 }));
        assert_eq!((run.get(4), run.last(), run.len()), (9, 9, 5));
        run.extend(&[20, 21, 22, 23, 24]);
        assert_eq!(ids(&run), [5, 6, 7, 8, 9, 20, 21, 22, 23, 24]);
        assert_eq!(run.heap_bytes() % size_of::<Stretch>(), 0);
        assert!(matches!(&run, NodeIds::Stretches(stretches) if stretches.len() == 2));
        // Splitting leaves spans where the parts are consecutive.
        let tail = run.split_off(5);
        assert_eq!((ids(&run), ids(&tail)), (vec![5, 6, 7, 8, 9], vec![20, 21, 22, 23, 24]));
        assert!(matches!((&run, &tail), (NodeIds::Span { .. }, NodeIds::Span { .. })));
        let mut span = NodeIds::new(&[1, 2, 3, 4]);
        let back = span.split_off(1);
        assert_eq!((ids(&span), ids(&back)), (vec![1], vec![2, 3, 4]));
        assert_eq!(NodeIds::new(&[3, 2]), NodeIds::List(vec![3, 2]));
        // The highest ids a lane has.
        assert_eq!(NodeIds::new(&[DOWN - 1]).last(), DOWN - 1);
        assert_eq!(NodeIds::new(&[DOWN - 1, 0]), NodeIds::List(vec![DOWN - 1, 0]));
        assert_eq!(
            ids(&NodeIds::new(&[DOWN - 1, DOWN - 2, DOWN - 3, DOWN - 4])),
            [DOWN - 1, DOWN - 2, DOWN - 3, DOWN - 4]
        );
        assert_eq!(span.heap_bytes(), 0);
    }

    #[test]
    fn ids_freed_in_order_and_taken_back_from_a_stack_are_one_stretch() {
        let down = NodeIds::new(&[40, 39, 38, 37, 36, 35]);
        assert_eq!(down, NodeIds::Stretches(Box::new([Stretch { first: 40 | DOWN, end: 6 }])));
        assert_eq!((down.get(5), down.last()), (35, 35));
        // A turn appended later, up, then a single id.
        let mut run = down.clone();
        run.extend(&[90, 91, 92, 93, 94, 95, 7]);
        assert_eq!(ids(&run), [40, 39, 38, 37, 36, 35, 90, 91, 92, 93, 94, 95, 7]);
        assert!(matches!(&run, NodeIds::Stretches(stretches) if stretches.len() == 3));
        // Too many short stretches are a list.
        run.extend(&[1, 3, 5]);
        assert!(matches!(run, NodeIds::List(_)));
    }

    #[test]
    #[should_panic(expected = "past a run")]
    fn a_span_is_checked_like_a_list() {
        NodeIds::new(&[1, 2]).get(2);
    }

    #[test]
    #[should_panic(expected = "past a run")]
    fn stretches_are_checked_like_a_list() {
        NodeIds::new(&[1, 2, 3, 4, 9, 8, 7, 6]).get(8);
    }

    /// Ids as allocation makes them: stretches up, stretches down, and strays.
    fn pieces() -> impl Strategy<Value = Vec<NodeId>> {
        let piece = (0u32..64, 1u32..12, 0u8..3).prop_map(|(base, len, kind)| match kind {
            0 => (base..base + len).collect::<Vec<_>>(),
            1 => (base..base + len).rev().collect(),
            _ => vec![base * 7 % 61, DOWN - 1 - base][..len.min(2) as usize].to_vec(),
        });
        prop::collection::vec(piece, 1..5).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        /// Agrees with a plain list of ids through building, appending and splitting, in
        /// whatever form the ids settle.
        #[test]
        fn matches_a_list(
            start in pieces(),
            ops in prop::collection::vec((0u8..3, pieces(), any::<prop::sample::Index>()), 1..12),
        ) {
            let mut run = NodeIds::new(&start);
            let mut model = start;
            agrees(&run, &model)?;
            for (op, ids, at) in ops {
                match op {
                    0 => {
                        run.extend(&ids);
                        model.extend(&ids);
                    }
                    1 => {
                        run.append(&NodeIds::new(&ids));
                        model.extend(&ids);
                    }
                    _ => {
                        let at = 1 + at.index(model.len());
                        if at >= model.len() {
                            continue;
                        }
                        let tail = run.split_off(at);
                        run.shrink();
                        let model_tail = model.split_off(at);
                        agrees(&tail, &model_tail)?;
                        if model.len() < model_tail.len() {
                            (run, model) = (tail, model_tail);
                        }
                    }
                }
                agrees(&run, &model)?;
                if let NodeIds::Stretches(stretches) = &run {
                    prop_assert!(stretches.len() * MIN_STRETCH <= model.len());
                }
            }
        }
    }
}
