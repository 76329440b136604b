//! Decoding bytes into index operations, and the differential check of the concurrent index
//! against the reference. Shared by the fuzz target and `tests/fuzz_corpus.rs`.

use kvroute::hash::next_sequence_hash;
use kvroute::index::{EventPool, LaneMode, PoolConfig, ReferenceIndex};
use kvroute::{
    ApplyErrorKind, LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId,
};

/// Operations per input: enough for rich histories of four workers, few enough for the fuzzer
/// to run over a thousand inputs a second.
const MAX_OPS: usize = 96;

/// Lanes per input, by its first byte: mostly one or two (a 2-core machine runs them in
/// parallel), sometimes three.
const LANES: [usize; 4] = [1, 2, 1, 3];

/// The hashes one input draws from: small alphabets of values from the whole `u64` range, so
/// that shared prefixes and conflicts stay common while hashes take the values that broke the
/// index before: 0 (a table's empty marker), 1, `u64::MAX` (0's stand-in in the run table), and
/// sequence hashes of short chains (a root's content hash equal to another run's key), plus a
/// value the input chooses.
#[derive(Clone, Debug)]
pub struct Dictionary {
    /// Content hashes.
    pub locals: Vec<u64>,
    /// Engine hashes.
    pub engine: Vec<u64>,
}

impl Dictionary {
    /// The fixed values and `chosen` (any `u64`, from the input).
    pub fn new(chosen: u64) -> Self {
        let seq = |a: u64, b: u64| next_sequence_hash(Some(SequenceHash(a)), LocalBlockHash(b)).0;
        let (max, k01, k10) = (u64::MAX, seq(0, 1), seq(1, 0));
        let locals = vec![0, 1, max, k01, k10, seq(max, 0), seq(k01, 0), chosen];
        let engine = vec![0, 1, 2, 3, 4, 5, max, max - 1, k01, k10, seq(max, 0), chosen];
        Self { locals, engine }
    }
}

/// One step of a history.
#[derive(Clone, Debug)]
pub enum Op {
    /// An event for the index.
    Event(RouterEvent),
    /// Remove one (worker, dp_rank).
    RemoveRank(Worker),
    /// Remove every rank of a worker id.
    RemoveId(WorkerId),
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }
}

/// The lane count, dictionary and operations `data` encodes.
pub fn decode(data: &[u8]) -> (usize, Dictionary, Vec<Op>) {
    let mut bytes = Bytes(data);
    let first = bytes.next().unwrap_or(0);
    let lanes = LANES[usize::from(first % 4)];
    // The chosen value: eight bytes if the first asks for them, else a small one.
    let chosen = match first & 4 != 0 {
        true => (0..8).fold(0u64, |value, _| value << 8 | u64::from(bytes.next().unwrap_or(0))),
        false => u64::from(first >> 3),
    };
    let dictionary = Dictionary::new(chosen);
    let (locals, engine) = (&dictionary.locals, &dictionary.engine);
    let (local_count, engine_count) = (locals.len() as u8, engine.len() as u8);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS {
        let (Some(tag), Some(who)) = (bytes.next(), bytes.next()) else { break };
        let worker = Worker::new(u64::from(who % 4), u32::from(who / 4 % 2));
        let op = match tag % 8 {
            0..=3 => {
                let parent = bytes.next().unwrap_or(0);
                let parent = (parent % 2 == 1)
                    .then(|| SequenceHash(engine[usize::from(parent / 2 % engine_count)]));
                let len = bytes.next().unwrap_or(0) % 6;
                let blocks = (0..len)
                    .map_while(|_| {
                        let b = bytes.next()?;
                        Some(StoredBlock::new(
                            locals[usize::from(b % local_count)],
                            engine[usize::from(b / local_count % engine_count)],
                        ))
                    })
                    .collect();
                Op::Event(RouterEvent::stored(worker, 0, parent, blocks))
            }
            4 | 5 => {
                let len = 1 + bytes.next().unwrap_or(0) % 3;
                let blocks = (0..len)
                    .map_while(|_| {
                        Some(SequenceHash(engine[usize::from(bytes.next()? % engine_count)]))
                    })
                    .collect();
                Op::Event(RouterEvent::removed(worker, 0, blocks))
            }
            6 => Op::Event(RouterEvent::cleared(worker, 0)),
            _ if who % 2 == 0 => Op::RemoveRank(worker),
            _ => Op::RemoveId(worker.id),
        };
        ops.push(op);
    }
    (lanes, dictionary, ops)
}

/// Every query over the content hashes `0..locals` of length 0..=`depth`.
pub fn queries(locals: u64, depth: usize) -> Vec<Vec<LocalBlockHash>> {
    let mut all = vec![Vec::new()];
    let mut frontier = all.clone();
    for _ in 0..depth {
        let next: Vec<Vec<LocalBlockHash>> = frontier
            .iter()
            .flat_map(|q: &Vec<LocalBlockHash>| {
                (0..locals).map(move |l| {
                    let mut q = q.clone();
                    q.push(LocalBlockHash(l));
                    q
                })
            })
            .collect();
        all.extend(next.iter().cloned());
        frontier = next;
    }
    all
}

/// Every query of length 0..=`depth` over `locals`.
pub fn queries_over(locals: &[u64], depth: usize) -> Vec<Vec<LocalBlockHash>> {
    let picked = |query: Vec<LocalBlockHash>| {
        query.into_iter().map(|index| LocalBlockHash(locals[index.0 as usize])).collect()
    };
    queries(locals.len() as u64, depth).into_iter().map(picked).collect()
}

/// The queries worth asking `reference` over `locals`, up to `depth` blocks: the empty one,
/// then every one-block extension of the queries some worker holds whole (the reference's
/// held paths). Any wrong answer of another index shows at one of them: its first wrong block
/// extends a path the reference holds.
pub fn held_paths(
    reference: &ReferenceIndex,
    locals: &[u64],
    depth: usize,
) -> Vec<Vec<LocalBlockHash>> {
    let mut all = vec![Vec::new()];
    let mut frontier = vec![Vec::new()];
    for at in 0..depth {
        let mut next = Vec::new();
        for query in &frontier {
            for &local in locals {
                let mut longer: Vec<LocalBlockHash> = query.clone();
                longer.push(LocalBlockHash(local));
                let held = reference.find_matches(&longer).max_depth() as usize == at + 1;
                if held && at + 1 < depth {
                    next.push(longer.clone());
                }
                all.push(longer);
            }
        }
        frontier = next;
    }
    all
}

/// Where an input's lanes run: on threads of their own when its last byte is 7 modulo 8 (one
/// input in eight), else on the checking thread ([`LaneMode::Inline`]: the same lane code with
/// no thread wakeups, several times faster). Both modes apply the same lane code; the threaded
/// share keeps the queues, round trips and lane restarts of the threaded pool in every run.
pub fn mode_of(data: &[u8]) -> LaneMode {
    match data.last() {
        Some(last) if last % 8 == 7 => LaneMode::Threads,
        _ => LaneMode::Inline,
    }
}

/// Runs `data` through both indexes, the pool's lanes in the mode the input asks for
/// ([`mode_of`]); describes the first disagreement.
pub fn check(data: &[u8]) -> Result<(), String> {
    check_as(data, mode_of(data))
}

/// [`check`] with the lanes in `mode`. Queries follow the reference's held paths up to 6
/// blocks deep (see [`held_paths`]).
pub fn check_as(data: &[u8], mode: LaneMode) -> Result<(), String> {
    let (lanes, dictionary, ops) = decode(data);
    let config = PoolConfig { lanes, mode, ..PoolConfig::default() };
    check_ops_with(config, &ops, |reference| held_paths(reference, &dictionary.locals, 6))
}

/// Applies `ops` to an [`EventPool`] with `lanes` lanes (on threads, then again inline) and to
/// the reference; after a flush, compares error counts, snapshots, every query over `0..locals`
/// up to `depth` blocks (with and without early exit) and the state the pool's dump rebuilds.
/// Describes the first disagreement.
pub fn check_ops(lanes: usize, ops: &[Op], locals: u64, depth: usize) -> Result<(), String> {
    check_ops_on(lanes, ops, &queries(locals, depth))
}

/// [`check_ops`] with the given queries.
pub fn check_ops_on(lanes: usize, ops: &[Op], all: &[Vec<LocalBlockHash>]) -> Result<(), String> {
    for mode in [LaneMode::Threads, LaneMode::Inline] {
        let config = PoolConfig { lanes, mode, ..PoolConfig::default() };
        check_ops_with(config, ops, |_| all.to_vec()).map_err(|e| format!("{mode:?}: {e}"))?;
    }
    Ok(())
}

/// Applies `ops` to an [`EventPool`] set up by `config` and to the reference, and compares them
/// (see [`check_ops`]) on the queries `queries` picks once the reference has applied `ops`.
pub fn check_ops_with(
    config: PoolConfig,
    ops: &[Op],
    queries: impl FnOnce(&ReferenceIndex) -> Vec<Vec<LocalBlockHash>>,
) -> Result<(), String> {
    let one_lane = config.lanes == 1;
    let pool = EventPool::new(config);
    let pool = pool.map_err(|e| e.to_string())?;
    let mut reference = ReferenceIndex::new();
    let mut errors = [0u64; ApplyErrorKind::ALL.len()];
    for op in ops {
        match op.clone() {
            Op::Event(event) => {
                if let Err(error) = reference.apply(&event) {
                    errors[error.kind().index()] += 1;
                }
                pool.apply_blocking(event).map_err(|e| e.to_string())?;
            }
            Op::RemoveRank(worker) => {
                let expected = reference.remove_worker_dp_rank(worker);
                let got = pool.remove_worker_dp_rank(worker).map_err(|e| e.to_string())?;
                if got != expected {
                    return Err(format!("remove {worker}: {got} vs reference {expected}"));
                }
            }
            Op::RemoveId(id) => {
                let expected = reference.remove_worker(id);
                let got = pool.remove_worker(id).map_err(|e| e.to_string())?;
                if got != expected {
                    return Err(format!("remove id {id}: {got} vs reference {expected}"));
                }
            }
        }
    }
    pool.flush().map_err(|e| e.to_string())?;
    if pool.stats().errors != errors {
        return Err(format!("error counts {:?} vs reference {errors:?}", pool.stats().errors));
    }
    if pool.snapshot().map_err(|e| e.to_string())? != reference.snapshot() {
        return Err("snapshots differ".into());
    }
    if pool.workers().map_err(|e| e.to_string())? != reference.workers() {
        return Err("worker lists differ".into());
    }
    if pool.stats().live_entries != reference.entry_count() as u64 {
        return Err("live entry counts differ".into());
    }
    // One lane's tree prunes exactly like the reference (more lanes may each hold a node).
    let nodes = pool.stats().nodes;
    if one_lane && nodes != reference.node_count() as u64 {
        return Err(format!("{nodes} nodes vs reference {}", reference.node_count()));
    }
    // The dump must rebuild the same index: the same state, and the same answers below.
    let mut rebuilt = ReferenceIndex::new();
    for event in pool.dump_events().map_err(|e| e.to_string())? {
        rebuilt.apply(&event).map_err(|e| format!("dump event rejected: {e}"))?;
    }
    if rebuilt.snapshot() != reference.snapshot() {
        return Err("the dump does not rebuild the reference's state".into());
    }
    for query in &queries(&reference) {
        let expected = reference.find_matches(query);
        if rebuilt.find_matches(query) != expected {
            return Err(format!("{query:?}: the rebuilt index answers differently"));
        }
        for (got, expected) in [
            (pool.find_matches(query), expected),
            (pool.find_matches_early_exit(query), reference.find_matches_early_exit(query)),
        ] {
            if got != expected {
                let (got, expected) = (got.sorted(), expected.sorted());
                return Err(format!("{query:?}: {got:?} vs reference {expected:?}"));
            }
        }
    }
    Ok(())
}
