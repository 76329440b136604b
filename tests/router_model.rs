//! A stateful model-based test of `KvRouter`: random operation sequences run against the
//! router and a plain model on a manual clock, in three modes — approximate (the router
//! indexes its own decisions), event-fed (engines' events handed in as published), and
//! event-fed through recovery (events lost, duplicated and reordered on the way, an engine
//! record as the recovery source).
//!
//! The model holds, per worker, the blocks the index must hold (a `ReferenceIndex` fed the
//! events the router accepts, or in approximate mode each worker's presumed blocks in least
//! recently routed order), and the requests in flight. After every operation the router's
//! loads must equal the model's; every decision must pick an allowed registered worker at the
//! least cost, with each candidate's overlap the model's wherever the model knows the index
//! exactly; every refusal must be the model's. `PROPTEST_CASES` sets the number of cases
//! (default 256).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use kvroute::hash::BlockHasher;
use kvroute::index::{EnqueueError, LaneMode, PoolConfig, ReferenceIndex};
use kvroute::recovery::{Dump, LocalIndexer, Recovered, RecoveryError, RecoverySource};
use kvroute::router::{ApproxConfig, KvRouter, RouteError, RouteRequest, RouterConfig};
use kvroute::sequences::ManualClock;
use kvroute::{
    KvEventData, LocalBlockHash, RequestId, RouterEvent, SequenceHash, StorageTier, StoredBlock,
    Worker, WorkerId,
};
use proptest::prelude::*;

const BS: u32 = 4;
const WORKERS: u64 = 4;
/// Blocks one event may carry: prompts and engine events of up to 10 blocks cross it.
const MAX_EVENT: usize = 6;
const TTL: Duration = Duration::from_secs(20);
const MAX_PRESUMED: usize = 24;
const PRUNE_TARGET: f64 = 0.5;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Approximate,
    Events,
    Recovered,
}

#[derive(Clone, Debug)]
enum Op {
    Route { family: u32, blocks: u32, extra: u32, update: bool, allowed: Option<u8> },
    AddRequest { worker: u64, family: u32, blocks: u32 },
    Progress { pick: usize, kind: u8 },
    AddWorker(u64),
    RemoveWorker(u64),
    EngineStore { worker: u64, family: u32, blocks: u32 },
    EngineRemove { worker: u64, family: u32, keep: u32 },
    Deliver { faults: Vec<u8> },
    Recover,
    Advance(u64),
    Expire,
    SaveRestore,
    Restart(u64),
    Settle,
}

fn op() -> impl Strategy<Value = Op> {
    let worker = 0..WORKERS;
    prop_oneof![
        6 => (0u32..4, 0u32..11, 0u32..BS, any::<bool>(), proptest::option::of(0u8..16))
            .prop_map(|(family, blocks, extra, update, allowed)| Op::Route {
                family, blocks, extra, update, allowed
            }),
        2 => (worker.clone(), 0u32..4, 1u32..11)
            .prop_map(|(worker, family, blocks)| Op::AddRequest { worker, family, blocks }),
        4 => (any::<usize>(), 0u8..4).prop_map(|(pick, kind)| Op::Progress { pick, kind }),
        2 => worker.clone().prop_map(Op::AddWorker),
        1 => worker.clone().prop_map(Op::RemoveWorker),
        5 => (worker.clone(), 0u32..4, 1u32..11)
            .prop_map(|(worker, family, blocks)| Op::EngineStore { worker, family, blocks }),
        2 => (worker.clone(), 0u32..4, 0u32..10)
            .prop_map(|(worker, family, keep)| Op::EngineRemove { worker, family, keep }),
        3 => proptest::collection::vec(0u8..10, 1..8).prop_map(|faults| Op::Deliver { faults }),
        1 => Just(Op::Recover),
        2 => (1u64..15).prop_map(Op::Advance),
        1 => Just(Op::Expire),
        1 => Just(Op::SaveRestore),
        1 => worker.prop_map(Op::Restart),
        1 => Just(Op::Settle),
    ]
}

fn tokens(family: u32, blocks: u32, extra: u32) -> Vec<u32> {
    (0..blocks * BS + extra).map(|t| family * 100_000 + t).collect()
}

fn worker(id: u64) -> Worker {
    Worker::new(id, 0)
}

fn build(mode: Mode, clock: &ManualClock) -> KvRouter {
    let pool = PoolConfig {
        lanes: 2,
        max_event_blocks: MAX_EVENT,
        mode: LaneMode::Inline,
        ..PoolConfig::default()
    };
    let config = RouterConfig {
        use_kv_events: mode != Mode::Approximate,
        approximate: ApproxConfig {
            ttl: TTL,
            max_blocks: MAX_PRESUMED,
            prune_target: PRUNE_TARGET,
            ..ApproxConfig::default()
        },
        recovery: (mode == Mode::Recovered).then(Default::default),
        device_index: pool.clone(),
        lower_tier_index: pool,
        expiry: None,
        temperature: 0.0,
        seed: Some(11),
        ..RouterConfig::new(BS)
    };
    KvRouter::builder(config).clock(clock.clone()).build().unwrap()
}

/// Every engine's record, as one recovery source (lower tiers, which no engine here
/// publishes, hold nothing).
struct Engines(Vec<LocalIndexer>);

impl Engines {
    fn new() -> Self {
        Self((0..WORKERS).map(engine).collect())
    }
}

fn engine(id: u64) -> LocalIndexer {
    LocalIndexer::new(worker(id), StorageTier::Device, 4_096).unwrap()
}

impl RecoverySource for Engines {
    fn events_since(
        &self,
        w: Worker,
        tier: StorageTier,
        from: u64,
    ) -> Result<Recovered, RecoveryError> {
        match self.0.get(w.id.0 as usize) {
            Some(engine) if tier == StorageTier::Device => engine.events_since(w, tier, from),
            _ => self.full_dump(w, tier).map(Recovered::Dump),
        }
    }

    fn full_dump(&self, w: Worker, tier: StorageTier) -> Result<Dump, RecoveryError> {
        match self.0.get(w.id.0 as usize) {
            Some(engine) if tier == StorageTier::Device => engine.full_dump(w, tier),
            _ => Ok(Dump { events: Vec::new(), last_event_id: 0 }),
        }
    }
}

#[derive(Debug)]
struct Request {
    worker: Worker,
    blocks: Vec<SequenceHash>,
    isl: usize,
    overlap: u32,
    prefilled: bool,
    outputs: usize,
}

/// Approximate mode's presumed caches and the index they feed.
#[derive(Default)]
struct Presumed {
    /// Per worker, presumed blocks, least recently routed first, with their tick.
    lru: BTreeMap<Worker, Vec<(SequenceHash, u64)>>,
    /// Per worker, the blocks the index holds.
    held: BTreeMap<Worker, BTreeSet<SequenceHash>>,
    /// The clock when the router's tracker started; its next expiry sweep (ticks past it).
    base: Duration,
    next_sweep: u64,
}

impl Presumed {
    fn ticks(&self, now: Duration) -> u64 {
        (now - self.base).as_nanos() as u64
    }

    fn expire_due(&mut self, now: Duration) {
        let tick = self.ticks(now);
        let step = ((TTL / 16).as_nanos() as u64).max(1);
        if tick >= self.next_sweep {
            self.next_sweep = tick + step;
            self.expire(now);
        }
    }

    fn expire(&mut self, now: Duration) {
        let Some(cutoff) = self.ticks(now).checked_sub(TTL.as_nanos() as u64) else { return };
        for (w, lru) in &mut self.lru {
            let gone = lru.iter().take_while(|&&(_, tick)| tick <= cutoff).count();
            for (hash, _) in lru.drain(..gone) {
                self.held.entry(*w).or_default().remove(&hash);
            }
        }
    }

    fn record(&mut self, w: Worker, sequence: &[SequenceHash], now: Duration) {
        let tick = self.ticks(now);
        let lru = self.lru.entry(w).or_default();
        for &hash in sequence.iter().rev() {
            lru.retain(|&(h, _)| h != hash);
            lru.push((hash, tick));
        }
        let held = self.held.entry(w).or_default();
        held.extend(sequence.iter().copied());
        if lru.len() > MAX_PRESUMED {
            let target = (MAX_PRESUMED as f64 * PRUNE_TARGET) as usize;
            let gone = lru.len() - target;
            for (hash, _) in lru.drain(..gone) {
                held.remove(&hash);
            }
        }
    }

    fn overlap(&self, w: Worker, sequence: &[SequenceHash]) -> u32 {
        let held = self.held.get(&w);
        sequence.iter().take_while(|h| held.is_some_and(|held| held.contains(h))).count() as u32
    }
}

struct Harness {
    mode: Mode,
    clock: ManualClock,
    router: KvRouter,
    hasher: BlockHasher,
    registered: BTreeSet<Worker>,
    requests: BTreeMap<String, Request>,
    next_request: u64,
    presumed: Presumed,
    /// The index the router must hold (events mode: the events it accepted).
    accepted: ReferenceIndex,
    /// What the engines hold (every event they published).
    truth: ReferenceIndex,
    engines: Engines,
    /// Per engine: blocks of each family's chain it holds, and events not delivered yet.
    depth: Vec<BTreeMap<u32, u32>>,
    pending: Vec<VecDeque<RouterEvent>>,
    /// Recovery mode: whether the index is known to equal `truth` (right after settling).
    exact: bool,
}

impl Harness {
    fn new(mode: Mode) -> Self {
        let clock = ManualClock::new();
        let router = build(mode, &clock);
        Self {
            mode,
            router,
            clock,
            hasher: BlockHasher::new(BS).unwrap(),
            registered: BTreeSet::new(),
            requests: BTreeMap::new(),
            next_request: 0,
            presumed: Presumed::default(),
            accepted: ReferenceIndex::new(),
            truth: ReferenceIndex::new(),
            engines: Engines::new(),
            depth: vec![BTreeMap::new(); WORKERS as usize],
            pending: vec![VecDeque::new(); WORKERS as usize],
            exact: true,
        }
    }

    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// The model's overlap of `worker` with a prompt, where the model knows it.
    fn overlap(&self, w: Worker, local: &[LocalBlockHash], seq: &[SequenceHash]) -> Option<u32> {
        match self.mode {
            Mode::Approximate => Some(self.presumed.overlap(w, seq)),
            Mode::Events => Some(self.accepted.find_matches(local).get(w)),
            Mode::Recovered => self.exact.then(|| self.truth.find_matches(local).get(w)),
        }
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op.clone() {
            Op::Route { family, blocks, extra, update, allowed } => {
                self.route(family, blocks, extra, update, allowed)?
            }
            Op::AddRequest { worker: id, family, blocks } => {
                let (w, prompt) = (worker(id), tokens(family, blocks, 0));
                let hashes = self.hasher.hash_request(&prompt);
                let own = self.router.overlap_blocks(&prompt, w);
                let id = self.request_id();
                let added = self.router.add_request(id.as_str().into(), &prompt, w);
                if !self.registered.contains(&w) {
                    prop_assert_eq!(added, Err(RouteError::UnknownPinnedWorker(w)));
                    return Ok(());
                }
                prop_assert_eq!(added, Ok(Vec::new()));
                if let Some(model) = self.overlap(w, &hashes.local, &hashes.sequence) {
                    prop_assert_eq!(own, model);
                }
                let request = Request {
                    worker: w,
                    blocks: hashes.sequence,
                    isl: prompt.len(),
                    overlap: own,
                    prefilled: false,
                    outputs: 0,
                };
                self.requests.insert(id, request);
            }
            Op::Progress { pick, kind } => {
                let Some(id) = self.requests.keys().nth(pick % self.requests.len().max(1)).cloned()
                else {
                    prop_assert!(self.router.free(&"unknown".into()).is_err());
                    return Ok(());
                };
                let rid: RequestId = id.as_str().into();
                match kind {
                    0 => {
                        prop_assert!(self.router.mark_prefill_completed(&rid).is_ok());
                        self.requests.get_mut(&id).unwrap().prefilled = true;
                    }
                    1 => {
                        prop_assert!(self.router.add_output_block(&rid).is_ok());
                        self.requests.get_mut(&id).unwrap().outputs += 1;
                    }
                    _ => {
                        prop_assert!(self.router.free(&rid).is_ok());
                        self.requests.remove(&id);
                        prop_assert!(self.router.free(&rid).is_err());
                    }
                }
            }
            Op::AddWorker(id) => {
                self.router.add_worker(worker(id));
                self.registered.insert(worker(id));
            }
            Op::RemoveWorker(id) => {
                let w = worker(id);
                let mut dropped: Vec<String> = self
                    .router
                    .remove_worker(WorkerId(id))
                    .unwrap()
                    .iter()
                    .map(|r| r.to_string())
                    .collect();
                dropped.sort();
                let expected: Vec<String> = self
                    .requests
                    .iter()
                    .filter(|(_, r)| r.worker == w)
                    .map(|(id, _)| id.clone())
                    .collect();
                prop_assert_eq!(dropped, expected);
                self.requests.retain(|_, r| r.worker != w);
                self.registered.remove(&w);
                self.presumed.lru.remove(&w);
                self.presumed.held.remove(&w);
                self.presumed.lru.remove(&w);
                self.accepted.remove_worker(WorkerId(id));
                self.exact = false;
            }
            Op::EngineStore { worker: id, family, blocks } => {
                let hashes = self.hasher.hash_request(&tokens(family, blocks, 0));
                let stored = hashes
                    .local
                    .iter()
                    .zip(&hashes.sequence)
                    .map(|(&local, &hash)| StoredBlock { local, hash })
                    .collect();
                let depth = self.depth[id as usize].entry(family).or_default();
                *depth = (*depth).max(blocks);
                self.publish(id, KvEventData::Stored { parent: None, blocks: stored })?;
            }
            Op::EngineRemove { worker: id, family, keep } => {
                let depth = self.depth[id as usize].entry(family).or_default();
                if keep >= *depth {
                    return Ok(());
                }
                let hashes = self.hasher.hash_request(&tokens(family, *depth, 0)).sequence;
                *depth = keep;
                let blocks = hashes[keep as usize..].iter().rev().copied().collect();
                self.publish(id, KvEventData::Removed { blocks })?;
            }
            Op::Deliver { faults } => self.deliver(&faults)?,
            Op::Recover => {
                if self.mode == Mode::Recovered {
                    self.router.run_recovery(&self.engines).unwrap();
                    self.exact = false;
                }
            }
            Op::Advance(secs) => self.clock.advance(Duration::from_secs(secs)),
            Op::Expire => {
                prop_assert_eq!(self.router.expire_now().unwrap(), Vec::<RequestId>::new());
                if self.mode == Mode::Approximate {
                    self.presumed.expire(self.now());
                }
            }
            Op::SaveRestore => {
                let mut file = Vec::new();
                self.router.save_snapshot(&mut file).unwrap();
                let restored = build(self.mode, &self.clock);
                restored.restore_snapshot(&file[..]).unwrap();
                for &w in &self.registered {
                    restored.add_worker(w);
                }
                prop_assert_eq!(
                    restored.index().device().snapshot().unwrap(),
                    self.router.index().device().snapshot().unwrap()
                );
                self.router = restored;
                // Requests in flight and approximate mode's ages are not in the file.
                self.requests.clear();
                self.presumed.lru.clear();
                self.presumed.base = self.now();
                self.presumed.next_sweep = 0;
            }
            Op::Restart(id) => {
                let w = worker(id);
                self.router.worker_restarted(w).unwrap();
                let cleared = RouterEvent::cleared(w, 0);
                let _ = self.accepted.apply(&cleared);
                self.presumed.held.remove(&w);
                self.presumed.lru.remove(&w);
                if self.mode == Mode::Recovered {
                    // The engine came back empty, numbering from the start; what it had not
                    // delivered is gone with it.
                    self.engines.0[id as usize] = engine(id);
                    let _ = self.truth.apply(&cleared);
                    self.depth[id as usize].clear();
                    self.pending[id as usize].clear();
                    self.exact = false;
                } else {
                    self.depth[id as usize].clear();
                }
            }
            Op::Settle => self.settle()?,
        }
        Ok(())
    }

    fn request_id(&mut self) -> String {
        self.next_request += 1;
        format!("q{}", self.next_request)
    }

    fn route(
        &mut self,
        family: u32,
        blocks: u32,
        extra: u32,
        update: bool,
        allowed: Option<u8>,
    ) -> Result<(), TestCaseError> {
        let prompt = tokens(family, blocks, extra);
        let hashes = self.hasher.hash_request(&prompt);
        let allowed_ids: Option<Vec<WorkerId>> = allowed
            .map(|mask| (0..WORKERS).filter(|id| mask & (1 << id) != 0).map(WorkerId).collect());
        let id = self.request_id();
        let mut request = RouteRequest::tokens(&prompt).with_breakdown();
        if update {
            request = request.with_id(id.as_str()).update_states(true);
        }
        if let Some(ids) = &allowed_ids {
            request = request.allowed(ids);
        }
        if prompt.is_empty() {
            prop_assert_eq!(self.router.route(&request), Err(RouteError::EmptyRequest));
            return Ok(());
        }
        // The router's own index before the decision (events change it only when handed in).
        let own = self.router.index().device().find_matches(&hashes.local);
        let now = self.now();
        if self.mode == Mode::Approximate {
            self.presumed.expire_due(now);
        }
        let candidates: Vec<Worker> = self
            .registered
            .iter()
            .copied()
            .filter(|w| allowed_ids.as_ref().is_none_or(|ids| ids.contains(&w.id)))
            .collect();
        let decided = self.router.route(&request);
        if candidates.is_empty() {
            prop_assert_eq!(decided, Err(RouteError::NoWorkers));
            return Ok(());
        }
        let decision = decided.map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let breakdown = decision.breakdown.clone().unwrap();
        let mut listed: Vec<Worker> = breakdown.iter().map(|c| c.worker).collect();
        listed.sort();
        prop_assert_eq!(&listed, &candidates);
        prop_assert!(candidates.contains(&decision.worker));
        prop_assert_eq!(decision.request_blocks, hashes.local.len());
        let least = breakdown.iter().map(|c| c.logit).fold(f64::INFINITY, f64::min);
        for candidate in &breakdown {
            let w = candidate.worker;
            if let Some(model) = self.overlap(w, &hashes.local, &hashes.sequence) {
                prop_assert_eq!(candidate.overlap_blocks, model, "overlap of {}", w);
            }
            if self.mode != Mode::Approximate {
                prop_assert_eq!(candidate.overlap_blocks, own.get(w));
            }
            if w == decision.worker {
                prop_assert_eq!(candidate.overlap_blocks, decision.overlap_blocks);
                prop_assert!(candidate.logit <= least, "not the cheapest: {:?}", breakdown);
            }
        }
        if update {
            let request = Request {
                worker: decision.worker,
                blocks: hashes.sequence.clone(),
                isl: prompt.len(),
                overlap: decision.overlap_blocks,
                prefilled: false,
                outputs: 0,
            };
            self.requests.insert(id, request);
        }
        if self.mode == Mode::Approximate {
            self.presumed.record(decision.worker, &hashes.sequence, now);
        }
        Ok(())
    }

    /// The engine of `id` publishes `data`: handed in at once (events mode) or queued for
    /// delivery (recovery mode).
    fn publish(&mut self, id: u64, data: KvEventData) -> Result<(), TestCaseError> {
        let event = self.engines.0[id as usize].publish(data);
        let _ = self.truth.apply(&event);
        match self.mode {
            Mode::Approximate => {}
            Mode::Events => {
                let accepted = self.hand_in(event.clone())?;
                if accepted {
                    let _ = self.accepted.apply(&event);
                }
            }
            Mode::Recovered => {
                self.pending[id as usize].push_back(event);
                self.exact = false;
            }
        }
        Ok(())
    }

    /// Hands `event` to the router: refused at once if oversized, taken otherwise.
    fn hand_in(&self, event: RouterEvent) -> Result<bool, TestCaseError> {
        let oversized = event.block_ops() > MAX_EVENT;
        let handed = self.router.apply_event(event.clone());
        if oversized {
            prop_assert_eq!(handed, Err(EnqueueError::TooManyBlocks(event)));
        } else {
            prop_assert_eq!(handed, Ok(()));
        }
        Ok(!oversized)
    }

    /// Delivers every engine's pending events, each by its fault: lost, duplicated, swapped
    /// with the next, or as is.
    fn deliver(&mut self, faults: &[u8]) -> Result<(), TestCaseError> {
        if self.mode != Mode::Recovered {
            return Ok(());
        }
        let mut fault = faults.iter().cycle();
        for id in 0..WORKERS as usize {
            let mut queue = std::mem::take(&mut self.pending[id]);
            while let Some(event) = queue.pop_front() {
                match fault.next().copied().unwrap_or(0) {
                    6 => {}
                    7 => {
                        self.hand_in(event.clone())?;
                        self.hand_in(event)?;
                    }
                    8 if !queue.is_empty() => {
                        let next = queue.pop_front().unwrap();
                        self.hand_in(next)?;
                        self.hand_in(event)?;
                    }
                    _ => {
                        self.hand_in(event)?;
                    }
                }
            }
        }
        self.exact = false;
        Ok(())
    }

    /// Recovery mode: delivers what is pending, has every engine publish once more (so lost
    /// last events show as gaps), and runs recovery until it settles: the index then holds
    /// exactly what the engines hold.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        if self.mode != Mode::Recovered {
            return Ok(());
        }
        self.deliver(&[0])?;
        for id in 0..WORKERS {
            let empty = KvEventData::Stored { parent: None, blocks: Vec::new() };
            let event = self.engines.0[id as usize].publish(empty);
            let _ = self.truth.apply(&event);
            self.hand_in(event)?;
        }
        let mut settled = false;
        for _ in 0..16 {
            self.router.run_recovery(&self.engines).unwrap();
            let stats = self.router.stats().recovery.unwrap();
            if stats.settled() && self.router.recovery_due().is_none() {
                settled = true;
                break;
            }
        }
        prop_assert!(settled, "recovery did not settle: {:?}", self.router.stats().recovery);
        self.router.flush().unwrap();
        prop_assert_eq!(self.router.index().device().snapshot().unwrap(), self.truth.snapshot());
        self.exact = true;
        Ok(())
    }

    /// The router's loads against the model's requests in flight.
    fn check_loads(&self) -> Result<(), TestCaseError> {
        let loads: BTreeMap<Worker, (usize, usize, usize)> = self
            .router
            .sequences()
            .loads()
            .into_iter()
            .map(|l| (l.worker, (l.active_requests, l.active_blocks, l.active_tokens)))
            .collect();
        let workers: Vec<Worker> = loads.keys().copied().collect();
        prop_assert_eq!(workers, self.registered.iter().copied().collect::<Vec<_>>());
        for &w in &self.registered {
            let on: Vec<&Request> = self.requests.values().filter(|r| r.worker == w).collect();
            let pinned: BTreeSet<SequenceHash> =
                on.iter().flat_map(|r| r.blocks.iter().copied()).collect();
            let blocks = pinned.len() + on.iter().map(|r| r.outputs).sum::<usize>();
            let tokens: usize = on
                .iter()
                .filter(|r| !r.prefilled)
                .map(|r| r.isl.saturating_sub(r.overlap as usize * BS as usize))
                .sum();
            prop_assert_eq!(loads[&w], (on.len(), blocks, tokens), "load of {}", w);
        }
        Ok(())
    }

    /// Exact modes: the index against the model, block for block.
    fn check_index(&self) -> Result<(), TestCaseError> {
        match self.mode {
            Mode::Events => {
                self.router.flush().unwrap();
                let index = self.router.index().device().snapshot().unwrap();
                prop_assert_eq!(index, self.accepted.snapshot());
            }
            Mode::Approximate => {
                self.router.flush().unwrap();
                let index = self.router.index().device().snapshot().unwrap();
                let held: BTreeMap<Worker, BTreeSet<SequenceHash>> = index
                    .into_iter()
                    .filter(|(_, blocks)| !blocks.is_empty())
                    .map(|(w, blocks)| (w, blocks.into_keys().collect()))
                    .collect();
                let model: BTreeMap<Worker, BTreeSet<SequenceHash>> = self
                    .presumed
                    .held
                    .iter()
                    .filter(|(_, blocks)| !blocks.is_empty())
                    .map(|(&w, blocks)| (w, blocks.clone()))
                    .collect();
                prop_assert_eq!(held, model);
            }
            Mode::Recovered => {}
        }
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

fn check(mode: Mode, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut harness = Harness::new(mode);
    for op in ops {
        harness.run(op)?;
        harness.check_loads()?;
        harness.check_index()?;
    }
    harness.settle()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn approximate_mode_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        check(Mode::Approximate, &ops)?;
    }

    #[test]
    fn event_fed_mode_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        check(Mode::Events, &ops)?;
    }

    #[test]
    fn event_fed_mode_through_recovery_follows_the_model(
        ops in proptest::collection::vec(op(), 1..40)
    ) {
        check(Mode::Recovered, &ops)?;
    }
}
