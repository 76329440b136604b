//! Active sequences: what each worker is already computing, the router's load signal.
//!
//! - [`ActiveSequences`] tracks one worker, single-threaded.
//! - [`MultiWorkerSequences`] tracks a fleet of (worker, dp_rank) from many threads at once,
//!   synchronously (no async runtime), and keeps router replicas in step through
//!   [`SequenceEvent`]s (see [`SequencePublisher`] and
//!   [`MultiWorkerSequences::apply_peer_event`]).
//!
//! ## How it is laid out
//!
//! Block sequences are [`SequenceHash`](crate::SequenceHash) chains, so the requests in flight
//! on a group of workers form one compressed prefix trie; each node counts, per worker, the
//! requests covering it. A worker's pinned blocks are the nodes it counts, and the blocks of a
//! candidate it already pins are a prefix of the candidate, found for every worker of the group
//! in one walk. Hashes are stored once per group (not per worker, not per request); a request
//! keeps only the node its path ends at. A trie's parent → child links are one flat table keyed
//! by (parent, first block of the child), so each step of a walk is one cache line.
//!
//! The fleet tracker spreads workers over a power-of-two number of cache-padded shards (one
//! trie and one lock each) and finds requests by id through a separately sharded index. A
//! request-path call locks one index shard and then one worker shard; an all-worker query
//! read-locks up to four worker shards at once, without waiting (a busy shard is read alone,
//! after the others), and walks their tries in step so that their cache misses overlap.
//!
//! ## Consistency
//!
//! Bad input never panics and changes nothing: a duplicate request id, an unknown id or worker,
//! an overlap larger than the input each return a typed error. Every worker's figures in a query
//! come from one state of its shard. Requests older than the expiry are dropped lazily (when a
//! request is added to the same worker, or by an explicit sweep) and reported to the caller.

mod builder;
mod children;
mod clock;
mod error;
mod fleet_state;
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
    DEFAULT_PEER_LANES, DEFAULT_REQUEST_SHARDS, DEFAULT_WORKER_SHARDS, MAX_PEER_LANES,
    MAX_PEER_QUEUE, MAX_SHARDS, SequencesBuilder,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{AddRequestError, ConfigError, UnknownRequest};
pub use fleet_state::{RemovedWorker, WorkerChanges};
pub use load::{PotentialLoad, WorkerLoad};
pub use multi::MultiWorkerSequences;
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
