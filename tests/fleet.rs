//! The mock fleet's event stream against the reference index, on a slice of the bundled trace.

use std::collections::HashMap;
use std::sync::OnceLock;

use kvroute::hash::{RequestHashes, sequence_hashes};
use kvroute::index::ReferenceIndex;
use kvroute::sim::trace::{TraceRequest, load_trace};
use kvroute::sim::{
    Fleet, FleetConfig, FleetConfigError, FleetReplay, Routing, bundled_trace_path, replay_fleet,
    try_replay_fleet,
};
use kvroute::{KvEventData, RouterEvent, SequenceHash, Worker};

/// The first requests of the bundled trace: enough to fill small caches, quick in debug builds.
fn trace() -> &'static [TraceRequest] {
    static TRACE: OnceLock<Vec<TraceRequest>> = OnceLock::new();
    let trace = TRACE.get_or_init(|| load_trace(bundled_trace_path()).expect("bundled trace"));
    &trace[..800]
}

/// [`small_fleet`] over [`trace`], replayed once for the tests that only read it.
fn small_replay() -> &'static FleetReplay {
    static REPLAY: OnceLock<FleetReplay> = OnceLock::new();
    REPLAY.get_or_init(|| replay_fleet(trace(), &small_fleet()))
}

/// A fleet whose caches overflow many times over on [`trace`].
fn small_fleet() -> FleetConfig {
    FleetConfig { workers: 4, cache_blocks: 2_000, sub_blocks: 4, ..FleetConfig::default() }
}

#[test]
fn event_stream_replays_into_the_reference_index() {
    let config = small_fleet();
    let replay = small_replay();
    let stats = &replay.stats;
    assert!(stats.removed_blocks > 10 * config.cache_blocks as u64, "caches must churn");

    let mut index = ReferenceIndex::new();
    for (i, event) in replay.events.iter().enumerate() {
        index.apply(event).unwrap_or_else(|err| panic!("event {i}: {err}"));
    }
    assert_eq!(stats.workers.len(), config.workers);
    for worker in &stats.workers {
        assert_eq!(index.block_count(worker.worker), worker.blocks, "{}", worker.worker);
        assert_eq!(worker.blocks, config.cache_blocks, "every cache fills");
    }
    assert_eq!(index.entry_count() as u64, stats.live_entries);
    assert_eq!(stats.stored_blocks - stats.removed_blocks, stats.live_entries);
    let ops: usize = replay.events.iter().map(RouterEvent::block_ops).sum();
    assert_eq!(ops as u64, stats.block_ops());
    assert_eq!(replay.events.len() as u64, stats.events);
    assert_eq!(replay.queries.len(), trace().len());
    let blocks: usize = replay.queries.iter().map(Vec::len).sum();
    assert_eq!(blocks as u64, stats.requested_blocks);
}

#[test]
fn hits_are_what_the_index_reports_before_serving() {
    // Served one request at a time, the index fed so far must agree with the fleet's own view.
    let mut fleet = Fleet::new(&small_fleet()).unwrap();
    let mut index = ReferenceIndex::new();
    let mut events = Vec::new();
    for request in &trace()[..300] {
        let local = request.local_hashes(fleet.hasher(), 0);
        let request = RequestHashes { sequence: sequence_hashes(&local), local };
        let scores = index.find_matches(&request.local);
        let served = fleet.serve(&request, &mut events);
        let worker = fleet.workers()[served.index].worker();
        assert_eq!(scores.get(worker) as usize, served.outcome.cached);
        for event in events.drain(..) {
            index.apply(&event).unwrap();
        }
    }
}

#[test]
fn tails_are_evicted_before_their_prefixes() {
    let config = FleetConfig { cache_blocks: 400, ..small_fleet() };
    let replay = replay_fleet(trace(), &config);
    // Per worker, each live engine hash with its parent, and live children per block.
    let mut parents: HashMap<(Worker, SequenceHash), Option<SequenceHash>> = HashMap::new();
    let mut children: HashMap<(Worker, SequenceHash), usize> = HashMap::new();
    let mut removed = 0;
    for event in &replay.events {
        let worker = event.worker();
        match &event.event.data {
            KvEventData::Stored { parent, blocks } => {
                let mut up = *parent;
                for block in blocks {
                    if let Some(up) = up {
                        *children.entry((worker, up)).or_default() += 1;
                    }
                    assert!(parents.insert((worker, block.hash), up).is_none(), "stored twice");
                    up = Some(block.hash);
                }
            }
            KvEventData::Removed { blocks } => {
                for &block in blocks {
                    let live = children.get(&(worker, block)).copied().unwrap_or(0);
                    assert_eq!(live, 0, "{worker}: evicted {block} before its {live} tail(s)");
                    let up = parents.remove(&(worker, block)).expect("removed a live block");
                    if let Some(up) = up {
                        *children.get_mut(&(worker, up)).expect("parent has children") -= 1;
                    }
                    removed += 1;
                }
            }
            KvEventData::Cleared => panic!("the fleet never clears"),
        }
    }
    assert!(removed > 10_000, "only {removed} evictions");
}

#[test]
fn event_ids_are_consecutive_per_worker() {
    let replay = small_replay();
    let mut last: HashMap<Worker, u64> = HashMap::new();
    for event in &replay.events {
        let previous = last.insert(event.worker(), event.event.event_id).unwrap_or(0);
        assert_eq!(event.event.event_id, previous + 1, "{}", event.worker());
    }
    assert_eq!(last.len(), small_fleet().workers);
}

#[test]
fn engine_hashes_differ_from_router_hashes() {
    let replay = replay_fleet(&trace()[..1], &small_fleet());
    let query = &replay.queries[0];
    let KvEventData::Stored { parent: None, blocks } = &replay.events[0].event.data else {
        panic!("first event stores a root chain");
    };
    let ours = sequence_hashes(query);
    assert_eq!(blocks.iter().map(|b| b.local).collect::<Vec<_>>(), *query);
    assert!(blocks.iter().zip(&ours).all(|(block, &seq)| block.hash != seq));
}

#[test]
fn bounded_share_spreads_load_and_beats_round_robin() {
    // Caches that hold a good part of the slice, so that routing (not churn) decides hits.
    let config = FleetConfig { cache_blocks: 8_000, ..small_fleet() };
    let bounded = replay_fleet(trace(), &config).stats;
    let round_robin =
        replay_fleet(trace(), &FleetConfig { routing: Routing::RoundRobin, ..config.clone() })
            .stats;
    let n = bounded.requests as f64;
    let cap = (1.0 + config.share_slack) * n / config.workers as f64;
    for worker in &bounded.workers {
        assert!(worker.requests as f64 <= cap + 1.0, "{worker:?} over {cap}");
    }
    let (hits, baseline) = (bounded.hit_blocks as f64, round_robin.hit_blocks as f64);
    assert!(hits > 1.5 * baseline, "bounded share {hits} vs round-robin {baseline} hits");
    assert!(bounded.hit_blocks <= bounded.oracle_hit_blocks);
    assert_eq!(bounded.oracle_hit_blocks, round_robin.oracle_hit_blocks);
    assert!(round_robin.workers.iter().all(|w| w.requests == 200));
}

#[test]
fn dup_replays_the_trace_as_new_conversations() {
    let trace = &trace()[..200];
    let config = FleetConfig { dup: 2, ..small_fleet() };
    let replay = replay_fleet(trace, &config);
    assert_eq!(replay.queries.len(), 400);
    assert_eq!(replay.stats.requests, 400);
    let (first, second) = replay.queries.split_at(200);
    assert!(first.iter().zip(second).all(|(a, b)| a.len() == b.len() && a.first() != b.first()));
    // The oracle hits as much in the second replay as in the first: nothing carries over.
    let once = replay_fleet(trace, &small_fleet()).stats;
    assert_eq!(replay.stats.oracle_hit_blocks, 2 * once.oracle_hit_blocks);
}

#[test]
fn replay_is_deterministic() {
    let a = small_replay();
    let b = replay_fleet(trace(), &small_fleet());
    assert_eq!(a.events, b.events);
    assert_eq!(a.stats, b.stats);
}

#[test]
fn invalid_configs_are_errors() {
    let base = FleetConfig::default();
    let cases = [
        (FleetConfig { workers: 0, ..base.clone() }, FleetConfigError::NoWorkers),
        (
            FleetConfig { sub_blocks: 0, ..base.clone() },
            FleetConfigError::SubBlocks { sub_blocks: 0 },
        ),
        (
            FleetConfig { sub_blocks: 3, ..base.clone() },
            FleetConfigError::SubBlocks { sub_blocks: 3 },
        ),
        (
            FleetConfig { share_slack: -0.5, ..base.clone() },
            FleetConfigError::ShareSlack { share_slack: -0.5 },
        ),
    ];
    for (config, expected) in cases {
        assert_eq!(try_replay_fleet(trace(), &config).unwrap_err(), expected);
        assert!(!expected.to_string().is_empty());
    }
    let nan = FleetConfig { share_slack: f64::NAN, ..base.clone() };
    assert!(matches!(nan.validate(), Err(FleetConfigError::ShareSlack { .. })));
    assert_eq!(base.block_size(), 64);
    assert_eq!(FleetConfig { sub_blocks: 512, ..base }.block_size(), 1);
}
