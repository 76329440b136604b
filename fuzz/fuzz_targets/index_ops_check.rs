//! Decoding bytes into index operations, and the differential check of the concurrent index
//! against the reference. Shared by the fuzz target and `tests/fuzz_corpus.rs`.

use kvroute::index::{EventPool, PoolConfig, ReferenceIndex};
use kvroute::{
    ApplyErrorKind, LocalBlockHash, RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId,
};

/// Small alphabets so that shared prefixes, conflicts and unknown names are common.
const LOCALS: u8 = 5;
const ENGINE_HASHES: u8 = 12;
const MAX_OPS: usize = 200;

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

/// The lane count and operations `data` encodes.
pub fn decode(data: &[u8]) -> (usize, Vec<Op>) {
    let mut bytes = Bytes(data);
    let lanes = 1 + usize::from(bytes.next().unwrap_or(0) % 4);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS {
        let (Some(tag), Some(who)) = (bytes.next(), bytes.next()) else { break };
        let worker = Worker::new(u64::from(who % 4), u32::from(who / 4 % 2));
        let op = match tag % 8 {
            0..=3 => {
                let parent = bytes.next().unwrap_or(0);
                let parent = (parent % 2 == 1)
                    .then_some(SequenceHash(u64::from(parent / 2 % ENGINE_HASHES)));
                let len = bytes.next().unwrap_or(0) % 6;
                let blocks = (0..len)
                    .map_while(|_| {
                        let b = bytes.next()?;
                        Some(StoredBlock::new(
                            u64::from(b % LOCALS),
                            u64::from(b / LOCALS % ENGINE_HASHES),
                        ))
                    })
                    .collect();
                Op::Event(RouterEvent::stored(worker, 0, parent, blocks))
            }
            4 | 5 => {
                let len = 1 + bytes.next().unwrap_or(0) % 3;
                let blocks = (0..len)
                    .map_while(|_| Some(SequenceHash(u64::from(bytes.next()? % ENGINE_HASHES))))
                    .collect();
                Op::Event(RouterEvent::removed(worker, 0, blocks))
            }
            6 => Op::Event(RouterEvent::cleared(worker, 0)),
            _ if who % 2 == 0 => Op::RemoveRank(worker),
            _ => Op::RemoveId(worker.id),
        };
        ops.push(op);
    }
    (lanes, ops)
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

/// Runs `data` through both indexes; describes the first disagreement.
pub fn check(data: &[u8]) -> Result<(), String> {
    let (lanes, ops) = decode(data);
    check_ops(lanes, &ops, u64::from(LOCALS), 3)
}

/// Applies `ops` to an [`EventPool`] with `lanes` lanes and to the reference; after a flush,
/// compares error counts, snapshots, every query over `0..locals` up to `depth` blocks (with and
/// without early exit) and the state the pool's dump rebuilds. Describes the first disagreement.
pub fn check_ops(lanes: usize, ops: &[Op], locals: u64, depth: usize) -> Result<(), String> {
    check_ops_on(lanes, ops, &queries(locals, depth))
}

/// [`check_ops`] with the given queries.
pub fn check_ops_on(lanes: usize, ops: &[Op], all: &[Vec<LocalBlockHash>]) -> Result<(), String> {
    let pool = EventPool::new(PoolConfig { lanes, ..PoolConfig::default() });
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
    for query in all {
        for (got, expected) in [
            (pool.find_matches(query), reference.find_matches(query)),
            (pool.find_matches_early_exit(query), reference.find_matches_early_exit(query)),
        ] {
            if got != expected {
                let (got, expected) = (got.sorted(), expected.sorted());
                return Err(format!("{query:?}: {got:?} vs reference {expected:?}"));
            }
        }
    }
    let mut rebuilt = ReferenceIndex::new();
    for event in pool.dump_events().map_err(|e| e.to_string())? {
        rebuilt.apply(&event).map_err(|e| format!("dump event rejected: {e}"))?;
    }
    if rebuilt.snapshot() != reference.snapshot() {
        return Err("the dump does not rebuild the reference's state".into());
    }
    if all.iter().any(|query| rebuilt.find_matches(query) != reference.find_matches(query)) {
        return Err("the rebuilt index answers differently".into());
    }
    Ok(())
}
