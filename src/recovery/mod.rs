//! Event recovery: per-stream cursors, gap detection, buffered replay and full restores, so an
//! index fed by lossy event streams converges to what the engines hold.
//!
//! Real streams lose, duplicate and reorder events, and workers restart. Every stream — a
//! worker's dp_rank in one storage tier — has a [`Cursor`]: the last event id applied. Each
//! incoming event is classified against it ([`Verdict`]): the next id is applied; an old one is
//! dropped and counted; one past a gap is buffered while the missing range is fetched from a
//! [`RecoverySource`]; the first event of a stream (or one numbered from the start again after
//! a restart) is buffered while the stream is rebuilt from a full [`Dump`]. A `Cleared` is a
//! barrier: it is applied at once, and the buffered events before it and any fetch in flight are
//! dropped (a fetch's result is thrown away when it returns). Once a fetch's events are applied
//! the buffer drains in order; a new gap starts a new fetch. Failed fetches are retried with
//! backoff, and incremental ones fall back to a full restore after a few.
//!
//! Layout: `cursor` (the cursor and its verdicts), `state` (the single-threaded state machine:
//! events and fetch results in, index actions and fetch jobs out), [`EventRecovery`] (that
//! machine behind a lock in front of an [`EventSink`] index; fetches run outside the lock from
//! [`EventRecovery::run_pending`]), `source` (the source trait and its answers), [`LocalIndexer`]
//! (the engine side: a ring of its last events and its own tree, serving both calls),
//! [`Snapshot`] (a router's restart file: its index and cursors), `config` and `stats`.
//!
//! Guarantees: queries never wait for recovery (it sits in front of the index, not in the
//! query path); a stream's events reach the index in id order, each once; after the streams go
//! quiet and the pending fetches have run, the index holds exactly what the sources hold.

mod config;
mod cursor;
mod ingest;
mod local_indexer;
mod sink;
mod snapshot;
mod source;
mod state;
#[cfg(test)]
mod state_tests;
mod stats;

pub use config::{MAX_BACKOFF, RecoveryConfig, RecoveryConfigError};
pub use cursor::{Cursor, Verdict};
pub use ingest::EventRecovery;
pub(crate) use ingest::RecoveryCore;
pub use local_indexer::{DEFAULT_RING, LocalIndexer, ZeroCapacity};
pub use sink::EventSink;
pub use snapshot::{Snapshot, SnapshotError};
pub use source::{Dump, Recovered, RecoveryError, RecoverySource};
pub use state::{Job, JobKind, StreamKey};
pub use stats::{RecoveryStats, StreamStats};
