//! Where missing events come from: the engine side's record of what it published.

use std::fmt;

use crate::event::{RouterEvent, StorageTier, Worker};

/// A worker's whole state as events, and the last event id it covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// Events that rebuild the stream's state on an empty index (their ids do not matter).
    pub events: Vec<RouterEvent>,
    /// The id of the last published event the dump includes (0 when nothing was published:
    /// sources number their events from 1, or from 0 with the first event included).
    pub last_event_id: u64,
}

/// An answer to [`RecoverySource::events_since`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// The stream's events from the asked id on, in order.
    Events(Vec<RouterEvent>),
    /// The asked range is no longer kept: the whole state instead.
    Dump(Dump),
}

/// Why a source could not answer. Every failure is retried with backoff; incremental
/// recoveries fall back to a full restore after a few.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The source does not serve this stream.
    UnknownStream {
        /// The worker.
        worker: Worker,
        /// The tier.
        tier: StorageTier,
    },
    /// The source could not be reached or failed; the text says why.
    Unavailable(String),
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownStream { worker, tier } => {
                write!(f, "the source serves no stream for worker {worker}, tier {tier:?}")
            }
            Self::Unavailable(why) => write!(f, "recovery source unavailable: {why}"),
        }
    }
}

impl std::error::Error for RecoveryError {}

/// The engine side's record of its events, asked synchronously (from the thread that runs
/// [`EventRecovery::run_pending`](super::EventRecovery::run_pending), never from a query).
///
/// Contract: a source records every event before the event is published, so it never answers
/// with less than what has already arrived. An event that arrived before the source's answer
/// and that the source has never published is a leftover from an earlier run of a restarted
/// worker, and is dropped.
pub trait RecoverySource {
    /// The events of (`worker`, `tier`) from `from_id` on, or a dump when they are gone.
    fn events_since(
        &self,
        worker: Worker,
        tier: StorageTier,
        from_id: u64,
    ) -> Result<Recovered, RecoveryError>;

    /// The whole state of (`worker`, `tier`).
    fn full_dump(&self, worker: Worker, tier: StorageTier) -> Result<Dump, RecoveryError>;
}
