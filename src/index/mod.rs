//! Prefix indexes: which worker holds which KV block.
//!
//! [`ReferenceIndex`] is the single-threaded oracle: short and obviously correct; every faster
//! structure is checked against it.

mod reference;
mod scores;

pub use reference::ReferenceIndex;
pub use scores::OverlapScores;

use std::collections::BTreeMap;

use crate::event::{SequenceHash, Worker};

/// A canonical view of an index for equality checks: per worker, each engine hash it holds with
/// our sequence hash of that block's prefix.
pub type IndexSnapshot = BTreeMap<Worker, BTreeMap<SequenceHash, SequenceHash>>;
