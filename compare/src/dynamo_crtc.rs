//! Subject `dynamo-crtc`: Dynamo's `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>`.
//!
//! Driven as Dynamo's router drives it: `ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(),
//! lanes, block_size)`; events go through `enqueue_event` (non-blocking, sticky per
//! (worker, dp_rank) lane); `flush_and_wait().await` is the barrier; queries call
//! `backend().find_matches(&hashes, false)` — exactly what its async
//! `KvIndexerInterface::find_matches` runs inline on the caller's thread, minus the future.

use std::sync::atomic::{AtomicU64, Ordering};

use dynamo_kv_router::ConcurrentRadixTreeCompressed;
use dynamo_kv_router::indexer::{SyncIndexer, ThreadPoolIndexer};
use dynamo_kv_router::protocols as dy;
use kvroute::{LocalBlockHash, RouterEvent, Worker};
use tokio::runtime::Runtime;

use crate::convert;
use crate::subject::Subject;

/// Tokens per KV block given to Dynamo's constructor; only used by its token-hashing entry
/// points, which this comparison does not call.
const BLOCK_SIZE: u32 = 64;

/// Dynamo's pooled concurrent compressed radix tree.
pub struct DynamoCrtc {
    indexer: ThreadPoolIndexer<ConcurrentRadixTreeCompressed>,
    /// Drives `flush_and_wait` (its oneshot receivers need no particular runtime).
    runtime: Runtime,
    enqueue_failures: AtomicU64,
}

impl DynamoCrtc {
    /// A fresh tree behind `lanes` event threads.
    pub fn new(lanes: usize) -> Self {
        let indexer =
            ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(), lanes, BLOCK_SIZE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread tokio runtime");
        Self { indexer, runtime, enqueue_failures: AtomicU64::new(0) }
    }
}

impl Subject for DynamoCrtc {
    type Query = Vec<dy::LocalBlockHash>;
    type Answer = dy::OverlapScores;

    fn apply(&self, event: &RouterEvent) {
        if self.indexer.enqueue_event(convert::to_dynamo(event)).is_err() {
            self.enqueue_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self) {
        self.runtime.block_on(self.indexer.flush_and_wait()).expect("Dynamo lanes are alive");
    }

    fn prepare(&self, query: &[LocalBlockHash]) -> Self::Query {
        convert::query(query)
    }

    fn find_matches(&self, query: &Self::Query) -> Self::Answer {
        self.indexer.backend().find_matches(query, false)
    }

    fn pairs(answer: &Self::Answer) -> Vec<(Worker, u32)> {
        convert::scores(answer)
    }

    fn compact(&self) -> bool {
        // What its `CleanupStaleChildren` lane task runs; safe alongside the lanes.
        self.indexer.backend().run_cleanup_task();
        true
    }

    fn rejected(&self) -> Option<u64> {
        // Application errors are only logged by the lanes; enqueue failures are all we see.
        None
    }
}
