//! Active sequences: what each worker is already computing, the router's load signal.
//!
//! - [`ActiveSequences`] tracks one worker, single-threaded.
//! - [`MultiWorkerSequences`] tracks a fleet of (worker, dp_rank) from many threads at once.

mod builder;
mod clock;
mod error;
mod load;
mod multi;
mod owners;
mod peers;
mod replica;
mod request_id;
mod request_index;
mod requests;
mod shard;
mod single;
mod trie;

use std::time::Duration;

use crate::event::Worker;

pub use builder::{
    DEFAULT_PEER_LANES, DEFAULT_REQUEST_SHARDS, DEFAULT_WORKER_SHARDS, SequencesBuilder,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{AddRequestError, ConfigError, UnknownRequest};
pub use load::{PotentialLoad, WorkerLoad};
pub use multi::{MultiWorkerSequences, RemovedWorker, WorkerChanges};
pub use peers::PeerEventError;
pub use replica::{PeerStats, SequenceEvent, SequenceEventData, SequencePublisher};
pub use request_id::RequestId;
pub use single::ActiveSequences;

/// How long a request may stay in flight before it is presumed lost and dropped: 300 s.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(300);

/// A well-mixed hash of a worker, to spread workers over shards and lanes.
pub(crate) fn worker_hash(worker: Worker) -> u64 {
    let key = worker.id.0 ^ u64::from(worker.dp_rank.0).rotate_left(32);
    let mixed = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    mixed ^ (mixed >> 29)
}

#[cfg(all(test, not(loom)))]
mod multi_tests;
