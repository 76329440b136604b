//! Model-based test of the active-sequence trackers: random operation sequences (adds with
//! shared prefixes, frees, prefill completions, decoded blocks, clock moves with lazy and swept
//! expiry, worker membership changes, queries) run against `MultiWorkerSequences`, one
//! `ActiveSequences` per worker, and a naive model of plain maps whose loads are recomputed from
//! scratch after every step.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use kvroute::sequences::{
    ActiveSequences, AddRequestError, ManualClock, MultiWorkerSequences, RequestId,
};
use kvroute::{OverlapScores, SequenceHash, Worker};
use proptest::prelude::*;

const BLOCK_SIZE: u32 = 4;
const EXPIRY_SECS: u64 = 300;
const WORKERS: u64 = 5;

fn worker(index: u64) -> Worker {
    Worker::new(index / 2, (index % 2) as u32)
}

/// A block sequence with the chain property: block `i` hashes blocks `0..=i`. Small alphabets
/// make requests share prefixes often.
fn chain(family: u64, seed: u64, len: usize) -> Vec<SequenceHash> {
    let mut hash = 0x1234_5678 ^ family;
    (0..len)
        .map(|i| {
            let symbol = if i < 2 { family } else { (seed >> i) & 1 };
            hash = (hash ^ symbol).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
            SequenceHash(hash)
        })
        .collect()
}

#[derive(Clone, Debug)]
struct Shape {
    family: u64,
    seed: u64,
    len: usize,
}

impl Shape {
    fn blocks(&self) -> Vec<SequenceHash> {
        chain(self.family, self.seed, self.len)
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    (0..2u64, 0..32u64, 0..7usize).prop_map(|(family, seed, len)| Shape { family, seed, len })
}

#[derive(Clone, Debug)]
enum Op {
    Add { id: u8, worker: u64, shape: Shape, with_blocks: bool, extra_tokens: usize, overlap: u32 },
    Free { id: u8 },
    MarkPrefill { id: u8 },
    OutputBlock { id: u8 },
    Advance { secs: u64 },
    ExpireStale,
    UpdateWorkers { mask: u8 },
    Query { shape: Shape, extra_tokens: usize, overlaps: Vec<(u64, u32)> },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..16u8, 0..WORKERS, shape(), any::<bool>(), 0..8usize, 0..10u32).prop_map(
            |(id, worker, shape, b, extra_tokens, overlap)| Op::Add {
                id, worker, shape, with_blocks: b || overlap % 3 != 0, extra_tokens, overlap
            }
        ),
        3 => (0..16u8).prop_map(|id| Op::Free { id }),
        1 => (0..16u8).prop_map(|id| Op::MarkPrefill { id }),
        1 => (0..16u8).prop_map(|id| Op::OutputBlock { id }),
        1 => prop::sample::select(vec![1u64, 50, 100, 150, 200, 300])
            .prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::ExpireStale),
        1 => any::<u8>().prop_map(|mask| Op::UpdateWorkers { mask: mask | 1 }),
        2 => (shape(), 0..8usize, prop::collection::vec((0..WORKERS, 0..10u32), 0..4)).prop_map(
            |(shape, extra_tokens, overlaps)| Op::Query { shape, extra_tokens, overlaps }
        ),
    ]
}

#[derive(Debug)]
struct ModelRequest {
    worker: Worker,
    blocks: Vec<SequenceHash>,
    prefill: usize,
    outputs: usize,
    started: u64,
    order: u64,
}

/// Plain maps; every figure is recomputed from the requests.
#[derive(Debug, Default)]
struct Model {
    workers: BTreeSet<Worker>,
    requests: BTreeMap<String, ModelRequest>,
    now: u64,
    order: u64,
}

impl Model {
    /// (active blocks, active tokens, requests) per tracked worker.
    fn loads(&self) -> BTreeMap<Worker, (usize, usize, usize)> {
        self.workers.iter().map(|&w| (w, self.load(w))).collect()
    }

    fn pinned(&self, worker: Worker) -> HashSet<SequenceHash> {
        let mine = self.requests.values().filter(|r| r.worker == worker);
        mine.flat_map(|r| r.blocks.iter().copied()).collect()
    }

    fn load(&self, worker: Worker) -> (usize, usize, usize) {
        let mine: Vec<&ModelRequest> =
            self.requests.values().filter(|r| r.worker == worker).collect();
        let outputs: usize = mine.iter().map(|r| r.outputs).sum();
        let tokens = mine.iter().map(|r| r.prefill).sum();
        (self.pinned(worker).len() + outputs, tokens, mine.len())
    }

    /// Removes and returns (oldest first) the requests matching `drop`.
    fn drop_where(&mut self, drop: impl Fn(&ModelRequest) -> bool) -> Vec<String> {
        let mut dropped: Vec<(u64, String)> = self
            .requests
            .iter()
            .filter(|(_, r)| drop(r))
            .map(|(id, r)| (r.order, id.clone()))
            .collect();
        dropped.sort();
        for (_, id) in &dropped {
            self.requests.remove(id);
        }
        dropped.into_iter().map(|(_, id)| id).collect()
    }

    fn add(
        &mut self,
        id: &str,
        worker: Worker,
        blocks: Vec<SequenceHash>,
        isl: usize,
        overlap: u32,
    ) -> Result<Vec<String>, &'static str> {
        let cached = overlap as usize * BLOCK_SIZE as usize;
        if cached > isl {
            return Err("overlap");
        }
        if self.requests.contains_key(id) {
            return Err("duplicate");
        }
        if !self.workers.contains(&worker) {
            return Err("worker");
        }
        let now = self.now;
        let expired = self.drop_where(|r| r.worker == worker && now - r.started >= EXPIRY_SECS);
        self.order += 1;
        let request = ModelRequest {
            worker,
            blocks,
            prefill: isl - cached,
            outputs: 0,
            started: self.now,
            order: self.order,
        };
        self.requests.insert(id.to_owned(), request);
        Ok(expired)
    }
}

fn error_kind(error: &AddRequestError) -> &'static str {
    match error {
        AddRequestError::OverlapExceedsInput { .. } => "overlap",
        AddRequestError::DuplicateRequest { .. } => "duplicate",
        AddRequestError::UnknownWorker { .. } => "worker",
        _ => "other",
    }
}

fn names(ids: Vec<RequestId>) -> Vec<String> {
    ids.into_iter().map(|id| id.to_string()).collect()
}

struct Subjects {
    clock: ManualClock,
    multi: MultiWorkerSequences,
    singles: BTreeMap<Worker, ActiveSequences>,
}

impl Subjects {
    fn new(shards: usize) -> Self {
        let clock = ManualClock::new();
        let multi = MultiWorkerSequences::builder(BLOCK_SIZE)
            .expiry(Some(Duration::from_secs(EXPIRY_SECS)))
            .worker_shards(shards)
            .request_shards(2)
            .clock(clock.clone())
            .build()
            .expect("config");
        Self { clock, multi, singles: BTreeMap::new() }
    }

    fn single(&self) -> ActiveSequences {
        ActiveSequences::new(BLOCK_SIZE)
            .expect("block size")
            .with_expiry(Some(Duration::from_secs(EXPIRY_SECS)))
            .with_clock(self.clock.clone())
    }

    fn owner(&self, id: &str, model: &Model) -> Option<Worker> {
        model.requests.get(id).map(|r| r.worker)
    }
}

fn run(ops: Vec<Op>, shards: usize) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let mut subjects = Subjects::new(shards);
    let initial = [worker(0), worker(1), worker(2)];
    subjects.multi.update_workers(initial);
    for w in initial {
        model.workers.insert(w);
        subjects.singles.insert(w, subjects.single());
    }
    for op in ops {
        match op {
            Op::Add { id, worker: w, shape, with_blocks, extra_tokens, overlap } => {
                let (id, w) = (format!("r{id}"), worker(w));
                let blocks = shape.blocks();
                let isl = blocks.len() * BLOCK_SIZE as usize + extra_tokens;
                let given = with_blocks.then_some(&blocks[..]);
                let kept = if with_blocks { blocks.clone() } else { Vec::new() };
                let owner = subjects.owner(&id, &model);
                let expected = model.add(&id, w, kept, isl, overlap);
                let got = subjects.multi.add_request(id.as_str().into(), w, given, isl, overlap);
                let got = got.map(names).map_err(|e| error_kind(&e));
                prop_assert_eq!(&got, &expected);
                // A single tracker knows only its own worker's requests: an id in flight on
                // another worker is not its business.
                let foreign = owner.is_some_and(|o| o != w);
                if let (Some(single), false) = (subjects.singles.get_mut(&w), foreign) {
                    let got = single.add_request(id.as_str().into(), given, isl, overlap);
                    let got = got.map(names).map_err(|e| error_kind(&e));
                    prop_assert_eq!(&got, &expected);
                }
            }
            Op::Free { id } => {
                let id = format!("r{id}");
                let owner = subjects.owner(&id, &model);
                let expected = model.requests.remove(&id).is_some();
                prop_assert_eq!(subjects.multi.free(&id.as_str().into()).is_ok(), expected);
                if let Some(single) = owner.and_then(|w| subjects.singles.get_mut(&w)) {
                    prop_assert!(single.free(&id.as_str().into()).is_ok());
                }
            }
            Op::MarkPrefill { id } => {
                let id = format!("r{id}");
                let owner = subjects.owner(&id, &model);
                let request = model.requests.get_mut(&id);
                let expected = request.is_some();
                if let Some(request) = request {
                    request.prefill = 0;
                }
                let got = subjects.multi.mark_prefill_completed(&id.as_str().into());
                prop_assert_eq!(got.is_ok(), expected);
                if let Some(single) = owner.and_then(|w| subjects.singles.get_mut(&w)) {
                    prop_assert!(single.mark_prefill_completed(&id.as_str().into()).is_ok());
                }
            }
            Op::OutputBlock { id } => {
                let id = format!("r{id}");
                let owner = subjects.owner(&id, &model);
                let request = model.requests.get_mut(&id);
                let expected = request.is_some();
                if let Some(request) = request {
                    request.outputs += 1;
                }
                prop_assert_eq!(
                    subjects.multi.add_output_block(&id.as_str().into()).is_ok(),
                    expected
                );
                if let Some(single) = owner.and_then(|w| subjects.singles.get_mut(&w)) {
                    prop_assert!(single.add_output_block(&id.as_str().into()).is_ok());
                }
            }
            Op::Advance { secs } => {
                model.now += secs;
                subjects.clock.advance(Duration::from_secs(secs));
            }
            Op::ExpireStale => {
                let now = model.now;
                let mut expected = model.drop_where(|r| now - r.started >= EXPIRY_SECS);
                let mut got = names(subjects.multi.expire_stale());
                expected.sort();
                got.sort();
                prop_assert_eq!(&got, &expected);
                let mut from_singles: Vec<String> =
                    subjects.singles.values_mut().flat_map(|s| names(s.expire_stale())).collect();
                from_singles.sort();
                prop_assert_eq!(&from_singles, &expected);
            }
            Op::UpdateWorkers { mask } => {
                let wanted: BTreeSet<Worker> =
                    (0..WORKERS).filter(|i| mask >> i & 1 == 1).map(worker).collect();
                let changes = subjects.multi.update_workers(wanted.iter().copied());
                let added: Vec<Worker> = wanted.difference(&model.workers).copied().collect();
                prop_assert_eq!(&changes.added, &added);
                let mut removed: Vec<(Worker, Vec<String>)> =
                    changes.removed.into_iter().map(|r| (r.worker, names(r.requests))).collect();
                removed.sort();
                let gone: Vec<Worker> = model.workers.difference(&wanted).copied().collect();
                let expected: Vec<(Worker, Vec<String>)> =
                    gone.iter().map(|&w| (w, model.drop_where(|r| r.worker == w))).collect();
                prop_assert_eq!(&removed, &expected);
                model.workers = wanted.clone();
                subjects.singles.retain(|w, _| wanted.contains(w));
                for w in added {
                    let single = subjects.single();
                    subjects.singles.insert(w, single);
                }
            }
            Op::Query { shape, extra_tokens, overlaps } => {
                let candidate = shape.blocks();
                let isl = candidate.len() * BLOCK_SIZE as usize + extra_tokens;
                let overlaps: BTreeMap<Worker, u32> =
                    overlaps.into_iter().map(|(w, d)| (worker(w), d)).filter(|p| p.1 > 0).collect();
                let scores = OverlapScores::from_pairs(overlaps.clone().into_iter().collect());
                let mut got: Vec<(Worker, usize, usize, usize)> = subjects
                    .multi
                    .potential_loads(&candidate, isl, &scores)
                    .into_iter()
                    .map(|l| (l.worker, l.potential_blocks, l.potential_tokens, l.active_requests))
                    .collect();
                got.sort();
                let mut expected = Vec::new();
                for &w in &model.workers {
                    let (blocks, tokens, requests) = model.load(w);
                    let pinned = model.pinned(w);
                    let new_blocks = candidate.iter().filter(|h| !pinned.contains(h)).count();
                    let overlap = overlaps.get(&w).copied().unwrap_or(0);
                    let new_tokens = isl.saturating_sub(overlap as usize * BLOCK_SIZE as usize);
                    expected.push((w, blocks + new_blocks, tokens + new_tokens, requests));
                    let single = &subjects.singles[&w];
                    let (pb, pt) = single.potential_blocks_and_tokens(&candidate, isl, overlap);
                    prop_assert_eq!((pb, pt), (blocks + new_blocks, tokens + new_tokens));
                    prop_assert_eq!(single.new_blocks(&candidate), new_blocks);
                }
                prop_assert_eq!(&got, &expected);
            }
        }
        // Every step: loads from scratch, and who runs what.
        let mut loads: Vec<_> = subjects
            .multi
            .loads()
            .into_iter()
            .map(|l| (l.worker, (l.active_blocks, l.active_tokens, l.active_requests)))
            .collect();
        loads.sort();
        let expected: Vec<_> = model.loads().into_iter().collect();
        prop_assert_eq!(&loads, &expected);
        for (&w, single) in &subjects.singles {
            let load = (single.active_blocks(), single.active_tokens(), single.active_requests());
            prop_assert_eq!(load, model.load(w));
        }
        for (id, request) in &model.requests {
            prop_assert_eq!(subjects.multi.worker_of(&id.as_str().into()), Some(request.worker));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn trackers_match_the_naive_model(
        ops in prop::collection::vec(op(), 1..120),
        shards in prop::sample::select(vec![1usize, 2, 4]),
    ) {
        run(ops, shards)?;
    }
}
