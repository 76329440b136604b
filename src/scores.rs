//! [`OverlapScores`]: how much of a query each worker already holds.

use crate::event::Worker;

/// Per worker, the number of leading blocks of a query it holds (consecutive from block 0).
///
/// Workers that hold no leading block are absent. The order of [`OverlapScores::iter`] is
/// unspecified; equality ignores it.
#[derive(Clone, Debug, Default)]
pub struct OverlapScores {
    scores: Vec<(Worker, u32)>,
}

impl OverlapScores {
    /// No worker matches.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scores from `(worker, depth)` pairs; each worker at most once, depths above zero.
    pub fn from_pairs(scores: Vec<(Worker, u32)>) -> Self {
        debug_assert!(scores.iter().all(|&(_, depth)| depth > 0));
        Self { scores }
    }

    pub(crate) fn as_slice(&self) -> &[(Worker, u32)] {
        &self.scores
    }

    pub(crate) fn into_pairs(self) -> Vec<(Worker, u32)> {
        self.scores
    }

    /// The depth `worker` matched, or 0.
    pub fn get(&self, worker: Worker) -> u32 {
        self.scores.iter().find(|(w, _)| *w == worker).map_or(0, |&(_, depth)| depth)
    }

    /// Every matching worker with its depth.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Worker, u32)> + '_ {
        self.scores.iter().copied()
    }

    /// How many workers match at least one block.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether no worker matches.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// The deepest match, 0 when none.
    pub fn max_depth(&self) -> u32 {
        self.scores.iter().map(|&(_, depth)| depth).max().unwrap_or(0)
    }

    /// The scores ordered by worker.
    pub fn sorted(&self) -> Vec<(Worker, u32)> {
        let mut scores = self.scores.clone();
        scores.sort_unstable();
        scores
    }
}

impl PartialEq for OverlapScores {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.sorted() == other.sorted()
    }
}

impl Eq for OverlapScores {}

/// A query's match in every storage tier: per worker, the device depth and how many further
/// blocks each lower tier holds that continue it (see [`crate::index::TieredIndex`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TieredScores {
    /// Leading blocks held on the device.
    pub device: OverlapScores,
    /// Per lower tier, in [`crate::index::LOWER_TIERS`] order: blocks continuing the match past
    /// the device and the tiers before it.
    pub lower: [OverlapScores; 3],
}

impl TieredScores {
    /// The continuation blocks of `tier` per worker; the device tier's are its depths.
    pub fn continuation(&self, tier: crate::event::StorageTier) -> &OverlapScores {
        use crate::event::StorageTier;
        match tier {
            StorageTier::Device => &self.device,
            StorageTier::HostPinned => &self.lower[0],
            StorageTier::Disk => &self.lower[1],
            StorageTier::External => &self.lower[2],
        }
    }
}
