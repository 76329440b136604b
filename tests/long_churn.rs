//! Long churn: workers store and evict prefixes and suffixes of shared chains, many times over.
//! The index answers as the reference does, and it is made of as many runs as an index freshly
//! built from the same final state: runs that holder changes split join back once their holders
//! are equal again.

use kvroute::index::{EventPool, PoolConfig, ReferenceIndex};
use kvroute::pool::LaneMode;
use kvroute::{LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
use proptest::prelude::*;

/// Blocks per chain.
const LEN: u64 = 48;
/// Chain `c` is chain 0 up to block `BRANCH_AT[c]`, then its own (a shared system prompt, then
/// documents): branches deep inside runs, past the hashes a short run keeps inline.
const BRANCH_AT: [u64; 3] = [LEN, 16, 30];

/// The content (and engine) hash of chain `chain`'s block at `depth`.
fn block(chain: usize, depth: u64) -> u64 {
    if depth < BRANCH_AT[chain] { depth + 1 } else { 1000 * chain as u64 + depth + 1 }
}

/// One step of a history, over workers 0..4.
#[derive(Clone, Debug)]
enum Step {
    /// Blocks `from..to` of a chain, below block `from - 1` (which the worker may not hold: then
    /// both indexes reject the event).
    Store {
        worker: u64,
        chain: usize,
        from: u64,
        to: u64,
    },
    /// Blocks `from..to` of a chain evicted, last first, as engines list them.
    Evict {
        worker: u64,
        chain: usize,
        from: u64,
        to: u64,
    },
    Clear {
        worker: u64,
    },
    Remove {
        worker: u64,
    },
}

impl Step {
    fn event(&self) -> Option<RouterEvent> {
        let stretch =
            |chain: usize, from: u64, to: u64| (from..to.min(LEN)).map(move |d| block(chain, d));
        Some(match *self {
            Step::Store { worker, chain, from, to } => {
                let parent = (from > 0).then(|| SequenceHash(block(chain, from - 1)));
                let blocks = stretch(chain, from, to).map(|h| StoredBlock::new(h, h)).collect();
                RouterEvent::stored(Worker::new(worker, 0), 0, parent, blocks)
            }
            Step::Evict { worker, chain, from, to } => {
                let hashes: Vec<SequenceHash> =
                    stretch(chain, from, to).map(SequenceHash).collect();
                let hashes = hashes.into_iter().rev().collect();
                RouterEvent::removed(Worker::new(worker, 0), 0, hashes)
            }
            Step::Clear { worker } => RouterEvent::cleared(Worker::new(worker, 0), 0),
            Step::Remove { .. } => return None,
        })
    }
}

fn step() -> impl Strategy<Value = Step> {
    let (worker, chain, depth) = (0u64..4, 0usize..3, 0..LEN);
    prop_oneof![
        4 => (worker.clone(), chain.clone(), 1..=LEN)
            .prop_map(|(worker, chain, to)| Step::Store { worker, chain, from: 0, to }),
        3 => (worker.clone(), chain.clone(), depth.clone(), 1..LEN)
            .prop_map(|(worker, chain, from, len)| Step::Store { worker, chain, from, to: from + len }),
        2 => (worker.clone(), chain.clone(), 1..=LEN)
            .prop_map(|(worker, chain, to)| Step::Evict { worker, chain, from: 0, to }),
        3 => (worker.clone(), chain.clone(), depth.clone())
            .prop_map(|(worker, chain, from)| Step::Evict { worker, chain, from, to: LEN }),
        2 => (worker.clone(), chain, depth, 1..LEN / 2)
            .prop_map(|(worker, chain, from, len)| Step::Evict { worker, chain, from, to: from + len }),
        1 => worker.clone().prop_map(|worker| Step::Clear { worker }),
        1 => worker.prop_map(|worker| Step::Remove { worker }),
    ]
}

/// Every chain whole: its answer scores every prefix.
fn queries() -> Vec<Vec<LocalBlockHash>> {
    (0..BRANCH_AT.len()).map(|c| (0..LEN).map(|d| LocalBlockHash(block(c, d))).collect()).collect()
}

fn pool(lanes: usize, mode: LaneMode) -> EventPool {
    EventPool::new(PoolConfig { lanes, mode, ..PoolConfig::default() }).expect("a valid config")
}

/// Runs `steps` through a pool and the reference, checking the answers every `every` steps and
/// at the end; returns the pool.
fn churn(steps: &[Step], lanes: usize, mode: LaneMode, every: usize) -> Result<EventPool, String> {
    let (pool, mut reference) = (pool(lanes, mode), ReferenceIndex::new());
    let mut rejected = 0;
    let check = |pool: &EventPool, reference: &ReferenceIndex, at: usize| -> Result<(), String> {
        pool.flush().map_err(|e| e.to_string())?;
        for query in queries() {
            let (got, want) = (pool.find_matches(&query), reference.find_matches(&query));
            if got != want {
                return Err(format!("after step {at}: {got:?}, the reference {want:?}"));
            }
        }
        Ok(())
    };
    for (at, step) in steps.iter().enumerate() {
        match (step, step.event()) {
            (_, Some(event)) => {
                rejected += u64::from(reference.apply(&event).is_err());
                pool.apply_blocking(event).map_err(|e| e.to_string())?;
            }
            (Step::Remove { worker }, None) => {
                reference.remove_worker(WorkerId(*worker));
                pool.remove_worker(WorkerId(*worker)).map_err(|e| e.to_string())?;
            }
            (_, None) => unreachable!("only removals make no event"),
        }
        if (at + 1) % every == 0 {
            check(&pool, &reference, at)?;
        }
    }
    check(&pool, &reference, steps.len())?;
    let errors: u64 = pool.stats().errors.iter().sum();
    if errors != rejected {
        return Err(format!("{errors} events rejected, {rejected} by the reference"));
    }
    let snapshot = pool.snapshot().map_err(|e| e.to_string())?;
    if snapshot != reference.snapshot() {
        return Err("the snapshot differs from the reference's".into());
    }
    Ok(pool)
}

/// A pool built afresh from `pool`'s dump, flushed.
fn rebuilt(pool: &EventPool) -> EventPool {
    let fresh = self::pool(1, LaneMode::Inline);
    for event in pool.dump_events().expect("lanes up") {
        fresh.apply_blocking(event).expect("lanes up");
    }
    fresh.flush().expect("lanes up");
    fresh
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// One lane: answers as the reference's throughout, and as many runs (and nodes) as a pool
    /// built afresh from the final state.
    #[test]
    fn runs_join_back_to_what_a_fresh_build_makes(steps in prop::collection::vec(step(), 100..500)) {
        let pool = churn(&steps, 1, LaneMode::Inline, 50).map_err(TestCaseError::fail)?;
        let fresh = rebuilt(&pool);
        let (long, short) = (pool.stats(), fresh.stats());
        prop_assert_eq!(long.nodes, short.nodes);
        prop_assert_eq!(long.runs, short.runs, "runs after the churn, and in a fresh build");
        prop_assert_eq!(pool.snapshot().unwrap(), fresh.snapshot().unwrap());
    }

    /// Two lanes on their own threads: answers as the reference's throughout.
    #[test]
    fn churn_on_threaded_lanes_answers_as_the_reference(steps in prop::collection::vec(step(), 100..400)) {
        churn(&steps, 2, LaneMode::Threads, 40).map_err(TestCaseError::fail)?;
    }
}

/// Worker S stores a 200-block chain; worker W stores, then evicts, each prefix of it in turn.
/// Every store splits S's run at a new place and every eviction joins it back: S's chain ends
/// as one run, as when it was stored (it used to end as 200).
#[test]
fn a_chain_others_cache_and_evict_prefix_by_prefix_stays_one_run() {
    let (s, w) = (Worker::new(1, 0), Worker::new(2, 0));
    for mode in [LaneMode::Inline, LaneMode::Threads] {
        let pool = pool(1, mode);
        let stored = |worker, len| {
            let blocks = (1..=len).map(|h| StoredBlock::new(h, h)).collect();
            RouterEvent::stored(worker, 0, None, blocks)
        };
        pool.apply_blocking(stored(s, 200)).unwrap();
        pool.flush().unwrap();
        let before = pool.stats();
        assert_eq!(before.runs, 1);
        for len in 1..200 {
            pool.apply_blocking(stored(w, len)).unwrap();
            let evicted = (1..=len).rev().map(SequenceHash).collect();
            pool.apply_blocking(RouterEvent::removed(w, 0, evicted)).unwrap();
        }
        pool.flush().unwrap();
        let after = pool.stats();
        assert_eq!((after.runs, after.nodes, after.live_entries), (1, 200, 200), "{mode:?}");
        let query: Vec<LocalBlockHash> = (1..=200).map(LocalBlockHash).collect();
        let scores = pool.find_matches(&query);
        assert_eq!((scores.get(s), scores.get(w)), (200, 0), "{mode:?}");
    }
}
