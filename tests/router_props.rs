//! Properties of `KvRouter::route` on random fleets: it never picks a worker that is not
//! registered or not allowed, and at temperature 0 it always picks a cheapest one.

use kvroute::hash::BlockHasher;
use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
use kvroute::{RouterEvent, SequenceHash, StoredBlock, Worker, WorkerId};
use proptest::prelude::*;

const BS: u32 = 4;

#[derive(Debug, Clone)]
struct Fleet {
    /// Registered workers (ids 0..8, dp ranks 0..2).
    workers: Vec<(u64, u32)>,
    /// Per stored chain: worker index, prompt family, blocks stored.
    stored: Vec<(usize, u32, usize)>,
    /// Requests in flight: worker index, family, blocks.
    inflight: Vec<(usize, u32, usize)>,
    /// The request: family and blocks (plus a partial block's tokens).
    request: (u32, usize, u32),
    /// Allowed worker ids (may name unregistered ones), or all.
    allowed: Option<Vec<u64>>,
    temperature: f64,
}

fn tokens(family: u32, blocks: usize, extra: u32) -> Vec<u32> {
    (0..blocks as u32 * BS + extra).map(|t| family * 10_000 + t).collect()
}

fn fleet() -> impl Strategy<Value = Fleet> {
    let workers = proptest::collection::btree_set((0u64..8, 0u32..2), 1..8)
        .prop_map(|set| set.into_iter().collect::<Vec<_>>());
    (
        workers,
        proptest::collection::vec((0usize..8, 0u32..3, 1usize..12), 0..12),
        proptest::collection::vec((0usize..8, 0u32..3, 1usize..8), 0..8),
        (0u32..3, 0usize..12, 0u32..BS),
        proptest::option::of(proptest::collection::vec(0u64..10, 0..5)),
        prop_oneof![Just(0.0), 0.01f64..2.0],
    )
        .prop_map(|(workers, stored, inflight, request, allowed, temperature)| Fleet {
            workers,
            stored,
            inflight,
            request,
            allowed,
            temperature,
        })
}

fn build(fleet: &Fleet) -> KvRouter {
    let config =
        RouterConfig { seed: Some(3), temperature: fleet.temperature, ..RouterConfig::new(BS) };
    let router = KvRouter::new(config).unwrap();
    let workers: Vec<Worker> =
        fleet.workers.iter().map(|&(id, rank)| Worker::new(id, rank)).collect();
    for &w in &workers {
        router.add_worker(w);
    }
    let hasher = BlockHasher::new(BS).unwrap();
    for (n, &(at, family, blocks)) in fleet.stored.iter().enumerate() {
        let worker = workers[at % workers.len()];
        let local = hasher.local_hashes(&tokens(family, blocks, 0));
        let base = 1_000 * n as u64;
        let blocks = local
            .iter()
            .enumerate()
            .map(|(i, &local)| StoredBlock { local, hash: SequenceHash(base + i as u64) });
        router.apply_event(RouterEvent::stored(worker, n as u64, None, blocks.collect())).unwrap();
    }
    router.flush().unwrap();
    for (n, &(at, family, blocks)) in fleet.inflight.iter().enumerate() {
        let worker = workers[at % workers.len()];
        router.add_request(format!("r{n}").into(), &tokens(family, blocks, 1), worker).unwrap();
    }
    router
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn route_picks_only_allowed_registered_workers_and_a_cheapest_at_temperature_zero(fleet in fleet()) {
        let router = build(&fleet);
        let (family, blocks, extra) = fleet.request;
        let prompt = tokens(family, blocks, extra);
        prop_assume!(!prompt.is_empty());
        let allowed: Option<Vec<WorkerId>> = fleet.allowed.as_ref().map(|ids| ids.iter().map(|&id| WorkerId(id)).collect());
        let mut request = RouteRequest::tokens(&prompt).with_breakdown();
        request.allowed_workers = allowed.as_deref();
        let registered: Vec<Worker> = fleet.workers.iter().map(|&(id, rank)| Worker::new(id, rank)).collect();
        let eligible: Vec<Worker> = registered
            .iter()
            .copied()
            .filter(|w| allowed.as_ref().is_none_or(|ids| ids.contains(&w.id)))
            .collect();
        for _ in 0..4 {
            match router.route(&request) {
                Ok(decision) => {
                    prop_assert!(eligible.contains(&decision.worker));
                    let breakdown = decision.breakdown.unwrap();
                    let mut seen: Vec<Worker> = breakdown.iter().map(|c| c.worker).collect();
                    seen.sort();
                    prop_assert_eq!(&seen, &eligible);
                    let chosen = breakdown.iter().find(|c| c.worker == decision.worker).unwrap();
                    prop_assert_eq!(chosen.overlap_blocks, decision.overlap_blocks);
                    prop_assert_eq!(router.overlap_blocks(&prompt, decision.worker), decision.overlap_blocks);
                    if fleet.temperature == 0.0 {
                        let min = breakdown.iter().map(|c| c.logit).fold(f64::INFINITY, f64::min);
                        prop_assert_eq!(chosen.logit, min);
                    }
                }
                Err(error) => {
                    prop_assert!(eligible.is_empty(), "{error} with eligible workers {eligible:?}");
                }
            }
        }
    }
}
