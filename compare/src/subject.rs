//! [`Subject`]: one prefix index under test, driven through the same small surface.
//!
//! Every subject receives the same `kvroute` events and converts each one to its own native
//! event inside [`Subject::apply`], so that conversion (one allocation and copy per event, the
//! same as the clone our own index needs to take ownership) is part of every subject's ingest
//! cost alike. Queries are converted once, before any timing ([`Subject::prepare`]); the timed
//! call is the native `find_matches` and the drop of its native answer.

use kvroute::{LocalBlockHash, RouterEvent, Worker};

/// Scores as `(worker, depth)` pairs, sorted by worker, workers with depth 0 left out.
pub type Scores = Vec<(Worker, u32)>;

/// A prefix index under test.
pub trait Subject {
    /// A query in the subject's native form.
    type Query;
    /// The subject's native answer.
    type Answer;

    /// Applies (or, for pooled subjects, enqueues) one event.
    fn apply(&self, event: &RouterEvent);

    /// Returns once every event applied so far is visible to [`Subject::find_matches`].
    fn flush(&self);

    /// `query` in native form.
    fn prepare(&self, query: &[LocalBlockHash]) -> Self::Query;

    /// The native lookup: per worker, how many leading blocks of `query` it holds.
    fn find_matches(&self, query: &Self::Query) -> Self::Answer;

    /// `answer` as `(worker, depth)` pairs in any order.
    fn pairs(answer: &Self::Answer) -> Vec<(Worker, u32)>;

    /// Runs the subject's deferred maintenance now (Dynamo CRTC's stale-child sweep, which it
    /// otherwise schedules at most once every 5 minutes). Returns whether the subject has any.
    fn compact(&self) -> bool {
        false
    }

    /// Events the subject rejected so far, where it reports them (`None` when it only logs).
    fn rejected(&self) -> Option<u64> {
        None
    }

    /// Applies every event of `events`, in order.
    fn apply_all(&self, events: &[RouterEvent]) {
        for event in events {
            self.apply(event);
        }
    }

    /// [`Subject::find_matches`] as sorted, comparable scores.
    fn scores(&self, query: &[LocalBlockHash]) -> Scores {
        normalize(Self::pairs(&self.find_matches(&self.prepare(query))))
    }
}

/// Every subject name, in table order.
pub const SUBJECTS: [&str; 4] = ["dynamo-crtc", "dynamo-radix", "kvroute-reference", "kvroute"];

/// Sorts `(worker, depth)` pairs by worker and drops zero depths (a worker matching nothing).
pub fn normalize(mut scores: Vec<(Worker, u32)>) -> Scores {
    scores.retain(|&(_, depth)| depth > 0);
    scores.sort_unstable();
    scores
}
