//! Router replicas over NATS (feature `nats`): several [`KvRouter`](crate::router::KvRouter)
//! replicas share one load view by exchanging their
//! [`SequenceEvent`](crate::sequences::SequenceEvent)s through a NATS server.
//!
//! The library's request path stays synchronous: [`NatsPublisher`] hands each event to the
//! transport thread through a bounded queue and never waits (a full queue drops and counts).
//! The transport thread runs its own current-thread tokio runtime with the `async-nats` client;
//! it numbers, mirrors and sends own events, and hands peers' events to the local tracker
//! ([`PeerSink`]), whose peer lanes apply them.
//!
//! ```text
//! route ─▶ tracker ─publish─▶ NatsPublisher ─(bounded queue)─▶ transport thread ─▶ NATS
//!                ▲                                                    │
//!                └──────── apply_peer_event (peer lanes) ◀────────────┘
//! ```
//!
//! ## Subjects (namespace `ns`, replica id `id`)
//!
//! | subject                   | what                                                         |
//! |---------------------------|--------------------------------------------------------------|
//! | `kvroute.ns.seq.<id>`     | replica `id`'s changes (`Events`: a batch of what was queued at once, numbered on from the last, 1, 2, … per incarnation) and its heartbeat (`Beat`: how many changes so far), in one ordered stream |
//! | `kvroute.ns.hello`        | a replica (re)joined: every peer beats at once               |
//! | `kvroute.ns.snapshot.<id>`| request/reply: replica `id`'s requests in flight as of change `s`, in parts, to the asker's inbox |
//!
//! Frames are msgpack (see `frame.rs` for why) carrying a format version, the sender's router
//! id and its incarnation (the wall clock at its start). A replica's own messages never come
//! back to it (the client does not echo), and a frame naming this replica's id is dropped.
//!
//! ## Catch-up
//!
//! Each replica is the authority on the requests it routed, and keeps a mirror of them on its
//! transport thread, consistent with its change counter. Per peer, a replica applies changes
//! in number order and drops repeats. Whenever it cannot be sure it has a peer's whole history
//! — first contact after the peer's first change, a number skipped (a message lost while the
//! connection was down), a heartbeat ahead of what arrived (a lost tail) — it holds that
//! peer's changes back, asks the peer for a snapshot, replaces what it knew of the peer by the
//! snapshot (handing the tracker only the difference: frees, adds, progress), then applies the
//! held changes numbered after it. A peer with a larger incarnation restarted: the requests it
//! had are freed everywhere, and it is followed afresh. So a restarted replica catches up
//! within a heartbeat or so of connecting (its hello makes every peer beat; each beat leads to
//! a snapshot), and two replicas cut off from each other resync on their own once reconnected.
//!
//! ## Guarantees and limits
//!
//! - `route` never waits for the network: while the connection is down each replica works on
//!   its local state ([`NatsStats::connected`] false, [`NatsStats::unsent`] counting); the
//!   client reconnects with a capped backoff ([`NatsConfig::max_reconnect_delay`]).
//! - Once every replica is connected and quiet for a heartbeat and a snapshot round trip, the
//!   replicas' trackers hold the same requests, with the same progress, as their authors.
//! - A request routed by a replica that is down is known only to the peers that saw it, until
//!   it expires there ([`NatsConfig::expiry`] should equal the trackers' expiry).
//! - Events dropped before reaching the transport ([`NatsStats::dropped`], a full queue) are
//!   not healed: the transport's mirror never saw them either.
//! - Expiry and worker membership are not synced: each replica follows them itself.
//! - The transport lives outside the loom-checked protocol of `crate::sync` (ARCHITECTURE.md §6.1): it uses tokio's
//!   channels, whose receiving end lives on its runtime.
//!
//! ## Layout
//!
//! `config.rs` settings and errors; `frame.rs` subjects and the wire format; `mirror.rs` one
//! replica's requests and the snapshot difference; `views.rs` the per-peer catch-up state
//! machine (pure logic); `transport.rs` the thread and its event loop; `publisher.rs` and
//! `sink.rs` the two ends the tracker meets; `replica.rs` the handle; `stats.rs` the counters.

mod config;
mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod mirror;
mod publisher;
mod replica;
mod sink;
mod stats;
mod transport;
mod views;

pub use config::{MAX_OUTBOX, NatsConfig, NatsError};
pub use publisher::NatsPublisher;
pub use replica::NatsReplica;
pub use sink::PeerSink;
pub use stats::NatsStats;
