//! The writer's side of the index: one lane and everything it owns.
//!
//! A lane (a thread of its own, or in [`LaneMode::Inline`](crate::pool::LaneMode::Inline) the
//! callers' threads, one at a time) applies the events of the workers routed to it. What it
//! holds here is its alone, with no lock: its tree of runs, the arenas behind it and its
//! workers' engine-hash maps. Readers never look at any of it; they load only the runs the lane
//! publishes ([`super::runs`]).
//!
//! - `index_lane.rs`: [`IndexLane`](index_lane::IndexLane), one lane applying its workers'
//!   events; `chain.rs` checks a `Stored` event's chain before anything changes.
//! - `lane_trie.rs`: the tree of runs, its splits, and the order it publishes versions in
//!   (`lane_trie/joins.rs`: runs joined back; `lane_trie/compaction.rs`: ids renumbered densely
//!   after mass removals); `chunked.rs` its node and run arenas,
//!   `node_ids.rs` each run's node ids.
//! - `held_blocks.rs`, `tag_map.rs`, `probe_map.rs`: one worker's engine hash -> node maps.
//! - `seq_hashes.rs`, `worker_dump.rs`: our sequence hashes of nodes, for snapshots; the
//!   `Stored` events that rebuild the lane's workers.
//! - `routes.rs`, `restarts.rs`: which lane each worker's events go to; the log of lanes that
//!   panicked and started over.
//! - `spent.rs`, `handback.rs`: applied events' block lists, handed back for producers to free.
//!
//! What it guarantees: a lane applies each of its workers' events in the order they were
//! queued; a `Stored` is checked whole against the tree and the worker's map before anything
//! changes, and a rejected event changes nothing; the tree publishes only states that existed
//! (a split inserts the tail before it shortens the head, a join leaves the tail findable until
//! no reader of the head's old version remains, and a run's version is replaced whole except for
//! a change of holder bits, made in one store); a run whose holders become its only child's is
//! joined with it by the end of the event; a panic costs only the lane's own workers, which it
//! clears and logs. Nothing here imports the [`EventPool`](super::EventPool)
//! or the walk.

mod chain;
mod chunked;
pub(crate) mod handback;
mod held_blocks;
pub(super) mod index_lane;
pub(super) mod lane_trie;
mod node_ids;
mod probe_map;
pub(super) mod restarts;
pub(super) mod routes;
mod seq_hashes;
pub(super) mod spent;
mod tag_map;
mod worker_dump;
