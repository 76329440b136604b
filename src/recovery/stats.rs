//! What recovery did, per stream.

use std::time::Duration;

use crate::event::{StorageTier, Worker};

use super::Cursor;

/// One stream's recovery counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Where the stream stands.
    pub cursor: Cursor,
    /// Whether a recovery is in progress.
    pub recovering: bool,
    /// Gaps seen (an id past the next expected one).
    pub gaps: u64,
    /// Events dropped as already applied (duplicates, late copies, recovered overlap).
    pub duplicates: u64,
    /// Incremental recoveries that filled a gap.
    pub incremental_recoveries: u64,
    /// Full restores applied (first contact, restart, overflow, fallback).
    pub restores: u64,
    /// Worker restarts detected.
    pub restarts: u64,
    /// `Cleared` barriers applied.
    pub barriers: u64,
    /// Failed fetches from the recovery source.
    pub failed_fetches: u64,
    /// Fetch results thrown away because a barrier or a newer fetch had overtaken them.
    pub discarded_results: u64,
    /// Buffered events the source never published (left over from before a restart), dropped.
    pub phantoms: u64,
    /// Live events dropped because the buffer was full.
    pub buffer_overflows: u64,
    /// Live events buffered now.
    pub buffered: usize,
    /// Gaps healed, and the time from gap to healed: the last one and the longest.
    pub healed: u64,
    /// The last gap's time to heal.
    pub last_heal: Option<Duration>,
    /// The longest time to heal.
    pub max_heal: Option<Duration>,
}

/// Every stream's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Per (worker, tier), sorted.
    pub streams: Vec<((Worker, StorageTier), StreamStats)>,
    /// Fetch results for streams removed meanwhile (dropped).
    pub orphan_results: u64,
}

impl RecoveryStats {
    /// The counters of one stream.
    pub fn stream(&self, worker: Worker, tier: StorageTier) -> Option<&StreamStats> {
        self.streams.iter().find(|(key, _)| *key == (worker, tier)).map(|(_, stats)| stats)
    }

    /// True when no stream is recovering or holding buffered events.
    pub fn settled(&self) -> bool {
        self.streams.iter().all(|(_, s)| !s.recovering && s.buffered == 0)
    }
}
