//! Subject `dynamo-radix`: Dynamo's single-threaded `RadixTree`.
//!
//! Driven directly: `RadixTree::new()`, `apply_event(event)` (returns its error, which we
//! count), `find_matches(hashes, false)` (takes the query by value, so each timed call is given
//! its own copy, prepared beforehand).

use std::cell::{Cell, RefCell};

use dynamo_kv_router::RadixTree;
use dynamo_kv_router::protocols as dy;
use kvroute::{LocalBlockHash, RouterEvent, Worker};

use crate::convert;
use crate::subject::Subject;

/// Dynamo's single-threaded radix tree (`Rc`-based: neither `Send` nor `Sync`).
pub struct DynamoRadix {
    tree: RefCell<RadixTree>,
    rejected: Cell<u64>,
}

impl DynamoRadix {
    /// An empty tree.
    pub fn new() -> Self {
        Self { tree: RefCell::new(RadixTree::new()), rejected: Cell::new(0) }
    }
}

impl Default for DynamoRadix {
    fn default() -> Self {
        Self::new()
    }
}

impl Subject for DynamoRadix {
    /// Consumed by the call, hence a cell the timed call takes from.
    type Query = RefCell<Vec<dy::LocalBlockHash>>;
    type Answer = dy::OverlapScores;

    fn apply(&self, event: &RouterEvent) {
        if self.tree.borrow_mut().apply_event(convert::to_dynamo(event)).is_err() {
            self.rejected.set(self.rejected.get() + 1);
        }
    }

    fn flush(&self) {}

    fn prepare(&self, query: &[LocalBlockHash]) -> Self::Query {
        RefCell::new(convert::query(query))
    }

    fn find_matches(&self, query: &Self::Query) -> Self::Answer {
        self.tree.borrow().find_matches(query.take(), false)
    }

    fn pairs(answer: &Self::Answer) -> Vec<(Worker, u32)> {
        convert::scores(answer)
    }

    fn rejected(&self) -> Option<u64> {
        Some(self.rejected.get())
    }
}
