//! Subject `kvroute-reference`: `kvroute::index::ReferenceIndex`, our single-threaded oracle.
//!
//! Not built for speed: it is the sanity baseline every other subject is cross-checked against.

use std::cell::{Cell, RefCell};

use kvroute::index::ReferenceIndex;
use kvroute::{LocalBlockHash, OverlapScores, RouterEvent, Worker};

use crate::subject::Subject;

/// Our reference radix tree.
#[derive(Default)]
pub struct KvrouteReference {
    index: RefCell<ReferenceIndex>,
    rejected: Cell<u64>,
}

impl KvrouteReference {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Live (worker, block) entries.
    pub fn entry_count(&self) -> usize {
        self.index.borrow().entry_count()
    }
}

impl Subject for KvrouteReference {
    type Query = Vec<LocalBlockHash>;
    type Answer = OverlapScores;

    fn apply(&self, event: &RouterEvent) {
        // The same per-event clone the pooled subjects pay to take ownership.
        let event = event.clone();
        if self.index.borrow_mut().apply(&event).is_err() {
            self.rejected.set(self.rejected.get() + 1);
        }
    }

    fn flush(&self) {}

    fn prepare(&self, query: &[LocalBlockHash]) -> Self::Query {
        query.to_vec()
    }

    fn find_matches(&self, query: &Self::Query) -> Self::Answer {
        self.index.borrow().find_matches(query)
    }

    fn pairs(answer: &Self::Answer) -> Vec<(Worker, u32)> {
        answer.iter().collect()
    }

    fn rejected(&self) -> Option<u64> {
        Some(self.rejected.get())
    }
}
