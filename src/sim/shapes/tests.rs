use std::collections::HashSet;

use super::*;
use crate::sim::replay_fleet;

#[test]
fn generators_are_deterministic_and_seed_dependent() {
    let docs = DocumentReuse { requests: 300, ..DocumentReuse::default() };
    assert_eq!(docs.trace(), docs.trace());
    assert_ne!(docs.trace(), DocumentReuse { seed: 1, ..docs.clone() }.trace());
    let shared = SharedPrefixes { requests: 300, ..SharedPrefixes::default() };
    assert_eq!(shared.trace(), shared.trace());
    assert_ne!(shared.trace(), SharedPrefixes { seed: 1, ..shared.clone() }.trace());
}

#[test]
fn requests_are_whole_trace_blocks_within_the_configured_lengths() {
    let docs = DocumentReuse { requests: 500, ..DocumentReuse::default() };
    for request in docs.trace() {
        assert_eq!(request.input_length as usize, request.hash_ids.len() * 512);
        assert!((14..=48).contains(&request.hash_ids.len()), "{}", request.hash_ids.len());
    }
    let shared = SharedPrefixes { requests: 500, ..SharedPrefixes::default() };
    for request in shared.trace() {
        assert!((5..=20).contains(&request.hash_ids.len()), "{}", request.hash_ids.len());
    }
}

#[test]
fn documents_have_many_roots_and_reuse() {
    let docs = DocumentReuse { requests: 4_000, ..DocumentReuse::default() };
    let trace = docs.trace();
    let roots: HashSet<u64> = trace.iter().map(|r| r.hash_ids[0]).collect();
    assert!(roots.len() > 1_000, "{} distinct first blocks", roots.len());
    assert!(roots.len() < trace.len() / 2, "documents are reused");
    let replay = replay_fleet(&trace, &DocumentReuse::fleet());
    let hit = replay.stats.hit_rate();
    assert!((0.35..0.8).contains(&hit), "hit rate {hit}");
}

#[test]
fn the_shared_fleet_spreads_popular_prefixes_over_every_worker() {
    let shared = SharedPrefixes { requests: 2_000, ..SharedPrefixes::default() };
    let trace = shared.trace();
    let popular = trace[0].hash_ids[0];
    let config = SharedPrefixes::fleet();
    let replay = replay_fleet(&trace, &config);
    let holders: HashSet<u64> = replay
        .events
        .iter()
        .filter(|e| matches!(&e.event.data, crate::KvEventData::Stored { parent: None, .. }))
        .map(|e| e.worker_id.0)
        .collect();
    assert_eq!(holders.len(), config.workers, "every worker stores a root");
    assert!(trace.iter().filter(|r| r.hash_ids[0] == popular).count() > 100);
}

#[test]
fn every_shape_names_itself_and_builds() {
    for shape in Shape::ALL {
        assert_eq!(Shape::parse(shape.name()), Some(shape));
        if shape != Shape::Conversation {
            let (trace, config) = shape.build().unwrap();
            assert!(!trace.is_empty());
            config.validate().unwrap();
        }
    }
    assert_eq!(Shape::parse("nope"), None);
}
