//! Subject `kvroute`: our concurrent index, `kvroute::index::EventPool`.
//!
//! Driven through its public API: `EventPool::new(PoolConfig { lanes, ..Default::default() })`;
//! events go through `apply_blocking` (its lane queues are bounded, 8,192 events by default:
//! the producer waits for room instead of retrying `apply`'s `QueueFull`); `flush()` is the
//! barrier; queries call `find_matches(&hashes)` on the caller's thread.

use kvroute::index::{EventPool, PoolConfig};
use kvroute::{LocalBlockHash, OverlapScores, RouterEvent, Worker};

use crate::subject::Subject;

/// Our pooled concurrent index.
pub struct KvroutePool {
    pool: EventPool,
}

impl KvroutePool {
    /// A fresh index behind `lanes` event threads. The harness has no way on without it.
    pub fn new(lanes: usize) -> Self {
        let pool = EventPool::new(PoolConfig { lanes, ..PoolConfig::default() });
        Self { pool: pool.unwrap_or_else(|error| panic!("kvroute pool of {lanes} lanes: {error}")) }
    }

    /// The pool itself, for what the subject surface does not cover (stats, dumps).
    pub fn pool(&self) -> &EventPool {
        &self.pool
    }
}

impl Subject for KvroutePool {
    type Query = Vec<LocalBlockHash>;
    type Answer = OverlapScores;

    fn apply(&self, event: &RouterEvent) {
        // The lanes are only down if one panicked; the cross-check would then fail loudly.
        self.pool.apply_blocking(event.clone()).expect("kvroute lanes are alive");
    }

    fn flush(&self) {
        self.pool.flush().expect("kvroute lanes are alive");
    }

    fn prepare(&self, query: &[LocalBlockHash]) -> Self::Query {
        query.to_vec()
    }

    fn find_matches(&self, query: &Self::Query) -> Self::Answer {
        self.pool.find_matches(query)
    }

    fn pairs(answer: &Self::Answer) -> Vec<(Worker, u32)> {
        answer.iter().collect()
    }

    fn rejected(&self) -> Option<u64> {
        Some(self.pool.stats().errors.iter().sum())
    }
}
