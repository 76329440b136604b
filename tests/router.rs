//! `KvRouter`: the cost model on hand-computed cases, tiers, selection, sessions, roles, bad
//! input, and the shared cache.

use kvroute::hash::BlockHasher;
use kvroute::router::{
    KvRouter, RouteError, RouteOverrides, RouteRequest, RouterConfig, SharedCache,
    SharedCacheError, WorkerRole,
};
use kvroute::{
    LocalBlockHash, RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker, WorkerId,
};

const BS: u32 = 4;

fn config() -> RouterConfig {
    RouterConfig { seed: Some(42), ..RouterConfig::new(BS) }
}

fn router_with(workers: &[Worker], config: RouterConfig) -> KvRouter {
    let router = KvRouter::new(config).unwrap();
    for &w in workers {
        router.add_worker(w);
    }
    router
}

fn prompt(blocks: u32) -> Vec<u32> {
    (0..blocks * BS).collect()
}

fn local(tokens: &[u32]) -> Vec<LocalBlockHash> {
    BlockHasher::new(BS).unwrap().local_hashes(tokens)
}

/// `worker` reports (in `tier`) the first `n` blocks of `tokens`, named `base + i`.
fn store(
    router: &KvRouter,
    worker: Worker,
    tier: StorageTier,
    tokens: &[u32],
    n: usize,
    base: u64,
) {
    let blocks = local(tokens)[..n]
        .iter()
        .enumerate()
        .map(|(i, &local)| StoredBlock { local, hash: SequenceHash(base + i as u64) })
        .collect();
    let mut event = RouterEvent::stored(worker, 0, None, blocks);
    event.tier = tier;
    router.apply_event(event).unwrap();
    router.flush().unwrap();
}

const A: Worker = Worker::new(1, 0);
const B: Worker = Worker::new(2, 0);
const C: Worker = Worker::new(3, 0);

#[test]
fn the_breakdown_follows_the_formula_on_a_hand_computed_fleet() {
    let router = router_with(&[A, B], config());
    let tokens = prompt(6); // 24 tokens, 6 blocks
    store(&router, A, StorageTier::Device, &tokens, 4, 100);
    // B is busy: a 10-token request in flight, not prefilled, pinning 2 other blocks.
    router
        .add_request("busy".into(), &[900, 901, 902, 903, 904, 905, 906, 907, 908, 909], B)
        .unwrap();

    let decision = router.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    let breakdown = decision.breakdown.unwrap();
    let of = |w| *breakdown.iter().find(|c| c.worker == w).unwrap();
    // A: 4 blocks cached = 16 tokens; prefill (24 - 16 + 0) / 4 = 2 blocks; decode 6 blocks.
    let a = of(A);
    assert_eq!((a.overlap_blocks, a.effective_overlap, a.prefill_tokens), (4, 4.0, 8.0));
    assert_eq!((a.prefill_blocks, a.decode_blocks, a.logit), (2.0, 6, 8.0));
    // B: nothing cached; prefill (24 + 10) / 4 = 8.5; decode 2 pinned + 6 = 8.
    let b = of(B);
    assert_eq!((b.overlap_blocks, b.prefill_tokens, b.decode_blocks), (0, 34.0, 8));
    assert_eq!(b.logit, 8.5 + 8.0);
    assert_eq!((decision.worker, decision.overlap_blocks, decision.request_blocks), (A, 4, 6));
}

#[test]
fn lower_tiers_continue_the_device_match_at_their_weights() {
    let router = router_with(&[A, B], config());
    let tokens = prompt(8);
    store(&router, A, StorageTier::Device, &tokens, 2, 100);
    store(&router, A, StorageTier::HostPinned, &tokens, 6, 200); // continues 4 past the device
    store(&router, A, StorageTier::Disk, &tokens, 7, 300); // 1 past the host
    store(&router, B, StorageTier::Device, &tokens, 3, 400);
    store(&router, B, StorageTier::External, &tokens, 2, 500); // inside B's device match: nothing
    let decision = router.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    let breakdown = decision.breakdown.unwrap();
    let of = |w| *breakdown.iter().find(|c| c.worker == w).unwrap();
    assert_eq!(of(A).overlap_blocks, 2);
    assert_eq!(of(A).effective_overlap, 2.0 + 4.0 * 0.75 + 0.25);
    assert_eq!(of(B).effective_overlap, 3.0);
    // Host events never reach the device index.
    assert_eq!(router.overlap_blocks(&tokens, A), 2);
    let stats = router.stats();
    assert_eq!(stats.index[1].block_ops, 6);
    assert_eq!(stats.index[2].block_ops, 7);
    assert_eq!(stats.index[0].block_ops, 2 + 3);
}

#[test]
fn overrides_change_weight_and_temperature_for_one_request() {
    let router = router_with(&[A, B], config());
    let tokens = prompt(4);
    store(&router, A, StorageTier::Device, &tokens, 4, 100);
    for i in 0..3 {
        let other: Vec<u32> = (0..BS).map(|t| 1000 + 10 * i + t).collect();
        router.add_request(format!("a{i}").into(), &other, A).unwrap();
    }
    // A: prefill 0 + 12 queued = 3 blocks, decode 3 + 4 = 7: logit 10.
    // B: prefill 16 tokens = 4 blocks, decode 4: logit 8.
    let plain = router.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    assert_eq!(plain.worker, B);
    let heavy = RouteOverrides { overlap_score_weight: Some(10.0), ..Default::default() };
    let decision = router
        .route(&RouteRequest::tokens(&tokens).with_overrides(heavy).with_breakdown())
        .unwrap();
    let of = |w| decision.breakdown.as_ref().unwrap().iter().find(|c| c.worker == w).unwrap().logit;
    assert_eq!((of(A), of(B)), (10.0 * 3.0 + 7.0, 10.0 * 4.0 + 4.0));
    assert_eq!(decision.worker, A);
    let bad = RouteOverrides { temperature: Some(-1.0), ..Default::default() };
    let refused = router.route(&RouteRequest::tokens(&tokens).with_overrides(bad));
    assert!(matches!(refused, Err(RouteError::BadOverrides(_))));
    // A temperature override samples: the dearer worker is picked some of the time.
    let hot = RouteOverrides { temperature: Some(5.0), ..Default::default() };
    let picks: Vec<Worker> = (0..200)
        .map(|_| router.route(&RouteRequest::tokens(&tokens).with_overrides(hot)).unwrap().worker)
        .collect();
    assert!(picks.contains(&A) && picks.contains(&B));
}

#[test]
fn ties_at_temperature_zero_are_broken_at_random_among_the_cheapest_only() {
    let router = router_with(&[A, B, C], config());
    router.add_request("c".into(), &prompt(2), C).unwrap(); // C costs more
    let tokens = prompt(3);
    let mut seen = [0usize; 3];
    for _ in 0..400 {
        let worker = router.route(&RouteRequest::tokens(&tokens)).unwrap().worker;
        seen[worker.id.0 as usize - 1] += 1;
    }
    assert_eq!(seen[2], 0);
    assert!(seen[0] > 140 && seen[1] > 140, "{seen:?}");
}

#[test]
fn the_same_seed_makes_the_same_choices() {
    let picks = |seed| {
        let router = router_with(
            &[A, B, C],
            RouterConfig { seed: Some(seed), temperature: 1.0, ..config() },
        );
        (0..50)
            .map(|_| router.route(&RouteRequest::tokens(&prompt(2))).unwrap().worker)
            .collect::<Vec<_>>()
    };
    assert_eq!(picks(9), picks(9));
    assert_ne!(picks(9), picks(10));
}

#[test]
fn softmax_sampling_matches_its_distribution() {
    // Logits 4, 6, 8 (A holds 2 of 4 blocks, B 1, C none; nothing in flight): normalised 0,
    // 0.5, 1; at T = 0.5 the weights are 1, e^-1, e^-2.
    let router = router_with(&[A, B, C], RouterConfig { temperature: 0.5, ..config() });
    let tokens = prompt(4);
    store(&router, A, StorageTier::Device, &tokens, 2, 100);
    store(&router, B, StorageTier::Device, &tokens, 1, 200);
    let d = router.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    let mut logits: Vec<(Worker, f64)> =
        d.breakdown.unwrap().iter().map(|c| (c.worker, c.logit)).collect();
    logits.sort_by_key(|&(w, _)| w);
    assert_eq!(logits, vec![(A, 6.0), (B, 7.0), (C, 8.0)]);
    let n = 30_000;
    let mut seen = [0f64; 3];
    for _ in 0..n {
        seen[router.route(&RouteRequest::tokens(&tokens)).unwrap().worker.id.0 as usize - 1] += 1.0;
    }
    let weights = [1.0, (-1.0f64).exp(), (-2.0f64).exp()];
    let total: f64 = weights.iter().sum();
    for (i, w) in weights.iter().enumerate() {
        let expected = n as f64 * w / total;
        // 5 standard deviations of a binomial count: a wrong formula is far outside.
        let sd = (expected * (1.0 - w / total)).sqrt();
        assert!((seen[i] - expected).abs() < 5.0 * sd, "worker {i}: {} vs {expected}", seen[i]);
    }
}

#[test]
fn bad_input_is_refused_with_typed_errors_and_changes_nothing() {
    let router = router_with(&[A], config());
    let tokens = prompt(2);
    let empty: [u32; 0] = [];
    assert_eq!(router.route(&RouteRequest::tokens(&empty)), Err(RouteError::EmptyRequest));
    assert_eq!(router.route(&RouteRequest::default()), Err(RouteError::EmptyRequest));
    assert_eq!(router.route(&RouteRequest::hashes(&[], 0)), Err(RouteError::EmptyRequest));
    assert_eq!(
        router.route(&RouteRequest::tokens(&tokens).update_states(true)),
        Err(RouteError::MissingRequestId)
    );
    assert_eq!(
        router.route(&RouteRequest::tokens(&tokens).pinned(B)),
        Err(RouteError::UnknownPinnedWorker(B))
    );
    assert_eq!(
        router.route(&RouteRequest::tokens(&tokens).allowed(&[WorkerId(9)])),
        Err(RouteError::NoWorkers)
    );
    let empty_router = router_with(&[], config());
    assert_eq!(empty_router.route(&RouteRequest::tokens(&tokens)), Err(RouteError::NoWorkers));
    assert!(KvRouter::new(RouterConfig::new(0)).is_err());
    // A duplicate id is refused and the first request stays as it was.
    router.route(&RouteRequest::tokens(&tokens).with_id("r").update_states(true)).unwrap();
    let before = router.sequences().loads();
    let dup = router.route(&RouteRequest::tokens(&prompt(5)).with_id("r").update_states(true));
    assert!(matches!(dup, Err(RouteError::Sequences(_))));
    assert_eq!(router.sequences().loads(), before);
    let stats = router.stats();
    assert_eq!((stats.decisions, stats.refused), (1, 7));
    assert_eq!(router.sequences().loads()[0].active_requests, 1);
}

#[test]
fn update_states_records_on_the_chosen_worker_until_freed() {
    let router = router_with(&[A, B], config());
    let tokens = prompt(3);
    let d = router.route(&RouteRequest::tokens(&tokens).with_id("r1").update_states(true)).unwrap();
    let load = router.sequences().load(d.worker).unwrap();
    assert_eq!((load.active_requests, load.active_blocks, load.active_tokens), (1, 3, 12));
    router.mark_prefill_completed(&"r1".into()).unwrap();
    router.add_output_block(&"r1".into()).unwrap();
    let load = router.sequences().load(d.worker).unwrap();
    assert_eq!((load.active_blocks, load.active_tokens), (4, 0));
    router.free(&"r1".into()).unwrap();
    assert!(router.free(&"r1".into()).is_err());
    assert_eq!(router.sequences().load(d.worker).unwrap().active_requests, 0);
}

#[test]
fn allowed_and_pinned_workers_restrict_the_choice() {
    let router = router_with(&[A, B, C], config());
    let tokens = prompt(3);
    store(&router, A, StorageTier::Device, &tokens, 3, 100);
    assert_eq!(router.route(&RouteRequest::tokens(&tokens)).unwrap().worker, A);
    let allowed = [WorkerId(2), WorkerId(3)];
    for _ in 0..20 {
        assert_ne!(
            router.route(&RouteRequest::tokens(&tokens).allowed(&allowed)).unwrap().worker,
            A
        );
    }
    assert_eq!(router.route(&RouteRequest::tokens(&tokens).pinned(C)).unwrap().worker, C);
}

#[test]
fn removing_a_worker_clears_it_from_index_sequences_and_candidates() {
    let router = router_with(&[A, B], config());
    let tokens = prompt(3);
    store(&router, A, StorageTier::Device, &tokens, 3, 100);
    store(&router, A, StorageTier::HostPinned, &tokens, 3, 100);
    router.add_request("r".into(), &tokens, A).unwrap();
    assert_eq!(router.remove_worker(WorkerId(1)).unwrap(), vec!["r".into()]);
    assert_eq!(router.overlap_blocks(&tokens, A), 0);
    assert!(router.index().tier(StorageTier::HostPinned).unwrap().workers().unwrap().is_empty());
    assert!(!router.sequences().tracks(A));
    for _ in 0..10 {
        assert_eq!(router.route(&RouteRequest::tokens(&tokens)).unwrap().worker, B);
    }
    assert_eq!(router.workers(), vec![(B, WorkerRole::Both)]);
}

#[test]
fn a_session_stays_on_its_worker_until_it_is_gone_or_overloaded() {
    let router = router_with(&[A, B], config());
    let first = router.route(&RouteRequest::tokens(&prompt(2)).in_session("s")).unwrap();
    assert!(!first.session_hit);
    let other = if first.worker == A { B } else { A };
    // The other worker now holds the next turn's prefix, but the session keeps its worker.
    let turn = prompt(3);
    store(&router, other, StorageTier::Device, &turn, 3, 100);
    let second = router.route(&RouteRequest::tokens(&turn).in_session("s")).unwrap();
    assert_eq!((second.worker, second.session_hit), (first.worker, true));
    // Overload the session's worker far past the bound: the session moves.
    for i in 0..40 {
        let tokens: Vec<u32> = (0..40).map(|t| 1000 * (i + 1) + t).collect();
        router.add_request(format!("load{i}").into(), &tokens, first.worker).unwrap();
    }
    let third = router.route(&RouteRequest::tokens(&turn).in_session("s")).unwrap();
    assert_eq!((third.worker, third.session_hit), (other, false));
    router.remove_worker(other.id).unwrap();
    let fourth = router.route(&RouteRequest::tokens(&turn).in_session("s")).unwrap();
    assert_eq!((fourth.worker, fourth.session_hit), (first.worker, false));
    let stats = router.stats();
    // Removing the worker forgot its sessions: the fourth turn was routed afresh.
    assert_eq!((stats.session_hits, stats.session_moves, stats.live_sessions), (1, 1, 1));
}

#[test]
fn disaggregated_workers_split_prefill_by_overlap_and_decode_by_load() {
    let router = router_with(&[], config());
    let (p1, p2, d1, d2) =
        (Worker::new(1, 0), Worker::new(2, 0), Worker::new(3, 0), Worker::new(4, 0));
    router.add_worker_with_role(p1, WorkerRole::Prefill);
    router.add_worker_with_role(p2, WorkerRole::Prefill);
    router.add_worker_with_role(d1, WorkerRole::Decode);
    router.add_worker_with_role(d2, WorkerRole::Decode);
    let tokens = prompt(4);
    store(&router, p2, StorageTier::Device, &tokens, 4, 100);
    router.add_request("old".into(), &prompt(6), d1).unwrap();
    let d = router.route(&RouteRequest::tokens(&tokens).with_id("r").update_states(true)).unwrap();
    assert_eq!((d.worker, d.decode_worker), (p2, Some(d2)));
    assert!(router.stats().disaggregated);
    // Prefill load sits on the prefill worker until prefill completes, then only decode load.
    assert_eq!(router.sequences().load(d2).unwrap().active_requests, 1);
    router.mark_prefill_completed(&"r".into()).unwrap();
    router.free(&"r".into()).unwrap();
    assert_eq!(router.sequences().load(d2).unwrap().active_requests, 0);
}

struct Store(Result<usize, SharedCacheError>);

impl SharedCache for Store {
    fn prefix_hits(
        &self,
        _: &[LocalBlockHash],
        _: &[SequenceHash],
    ) -> Result<usize, SharedCacheError> {
        self.0.clone()
    }
}

#[test]
fn shared_cache_hits_count_beyond_the_own_match_and_failures_count_as_none() {
    let tokens = prompt(6);
    let router = KvRouter::builder(config()).shared_cache(Store(Ok(5))).build().unwrap();
    router.add_worker(A);
    store(&router, A, StorageTier::Device, &tokens, 2, 100);
    let d = router.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    assert_eq!(d.breakdown.unwrap()[0].effective_overlap, 2.0 + 3.0 * 0.5);
    let failing = KvRouter::builder(config())
        .shared_cache(Store(Err(SharedCacheError("down".into()))))
        .build()
        .unwrap();
    failing.add_worker(A);
    let d = failing.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    assert_eq!(d.breakdown.unwrap()[0].effective_overlap, 0.0);
    assert_eq!(failing.stats().shared_cache_failures, 1);
}

#[test]
fn lora_and_namespace_salt_the_hashes_like_the_engines() {
    let router = router_with(&[A, B], config());
    let tokens = prompt(2);
    let salted = BlockHasher::new(BS).unwrap().with_lora("adapter").local_hashes(&tokens);
    let blocks = salted
        .iter()
        .enumerate()
        .map(|(i, &local)| StoredBlock { local, hash: SequenceHash(i as u64 + 1) });
    router.apply_event(RouterEvent::stored(B, 0, None, blocks.collect())).unwrap();
    router.flush().unwrap();
    let plain = router.route(&RouteRequest::tokens(&tokens).with_breakdown()).unwrap();
    assert!(plain.breakdown.unwrap().iter().all(|c| c.overlap_blocks == 0));
    let lora = RouteRequest { lora_name: Some("adapter"), ..RouteRequest::tokens(&tokens) };
    assert_eq!(router.route(&lora).unwrap().overlap_blocks, 2);
}

mod approximate {
    use super::*;
    use kvroute::router::ApproxConfig;
    use kvroute::sequences::ManualClock;
    use std::time::Duration;

    fn approx_router(clock: &ManualClock, max_blocks: usize) -> KvRouter {
        let approximate = ApproxConfig {
            ttl: Duration::from_secs(10),
            max_blocks,
            prune_target: 0.5,
            ..ApproxConfig::default()
        };
        let config = RouterConfig { use_kv_events: false, approximate, ..config() };
        let router = KvRouter::builder(config).clock(clock.clone()).build().unwrap();
        router.add_worker(A);
        router.add_worker(B);
        router
    }

    #[test]
    fn decisions_are_indexed_as_if_the_worker_stored_the_blocks() {
        let clock = ManualClock::new();
        let router = approx_router(&clock, 1000);
        let tokens = prompt(5);
        let first = router.route(&RouteRequest::tokens(&tokens)).unwrap();
        router.flush().unwrap();
        assert_eq!(router.overlap_blocks(&tokens, first.worker), 5);
        // The next request sharing 3 blocks goes where they are presumed cached.
        let mut next = prompt(3);
        next.extend(500..508);
        let second = router.route(&RouteRequest::tokens(&next)).unwrap();
        assert_eq!((second.worker, second.overlap_blocks), (first.worker, 3));
        let stats = router.stats().approx.unwrap();
        assert_eq!((stats.decisions, stats.presumed_blocks), (2, 7));
    }

    /// No flush: the recorder thread picks the decision up (bounded wait, not a timing claim).
    #[test]
    fn the_recorder_thread_indexes_decisions_without_a_flush() {
        let clock = ManualClock::new();
        let router = approx_router(&clock, 1000);
        let tokens = prompt(5);
        let worker = router.route(&RouteRequest::tokens(&tokens)).unwrap().worker;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while router.overlap_blocks(&tokens, worker) < 5 {
            assert!(std::time::Instant::now() < deadline, "the decision never reached the index");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_lag_not_below_the_ttl_is_refused() {
        use kvroute::router::RouterConfigError;
        let second = Duration::from_secs(1);
        let approximate = ApproxConfig { ttl: second, lag: second, ..ApproxConfig::default() };
        let refused = KvRouter::new(RouterConfig { use_kv_events: false, approximate, ..config() });
        let expected = RouterConfigError::LagNotBelowTtl { lag: second, ttl: second };
        assert_eq!(refused.err(), Some(expected));
    }

    /// With no lag the routing thread hands the decision to the index lanes itself; with inline
    /// lanes it is in the index when `route` returns.
    #[test]
    fn without_lag_or_with_inline_lanes_routing_records_its_own_decisions() {
        use kvroute::index::PoolConfig;
        use kvroute::pool::LaneMode;
        let approximate = ApproxConfig { lag: Duration::ZERO, ..ApproxConfig::default() };
        let no_lag = KvRouter::new(RouterConfig { use_kv_events: false, approximate, ..config() });
        let device_index = PoolConfig { mode: LaneMode::Inline, ..PoolConfig::default() };
        let inline = KvRouter::new(RouterConfig { use_kv_events: false, device_index, ..config() });
        let tokens = prompt(5);
        for (router, flush_lanes) in [(no_lag.unwrap(), true), (inline.unwrap(), false)] {
            router.add_worker(A);
            let worker = router.route(&RouteRequest::tokens(&tokens)).unwrap().worker;
            if flush_lanes {
                router.index().flush().unwrap();
            }
            assert_eq!(router.overlap_blocks(&tokens, worker), 5);
        }
    }

    #[test]
    fn blocks_expire_after_the_ttl_unless_routed_again() {
        let clock = ManualClock::new();
        let router = approx_router(&clock, 1000);
        let (old, fresh) = (prompt(4), (100..108).collect::<Vec<u32>>());
        let w_old = router.route(&RouteRequest::tokens(&old)).unwrap().worker;
        clock.advance(Duration::from_secs(6));
        let w_fresh = router.route(&RouteRequest::tokens(&fresh)).unwrap().worker;
        clock.advance(Duration::from_secs(5)); // old is 11 s old, fresh 5 s
        router.expire_now().unwrap();
        router.flush().unwrap();
        assert_eq!(router.overlap_blocks(&old, w_old), 0);
        assert_eq!(router.overlap_blocks(&fresh, w_fresh), 2);
        // Routing a prefix again refreshes it: 1 block of `fresh` routed at 11 s survives 16 s.
        let head: Vec<u32> = fresh[..4].to_vec();
        let w_head = router.route(&RouteRequest::tokens(&head).pinned(w_fresh)).unwrap().worker;
        clock.advance(Duration::from_secs(6));
        router.expire_now().unwrap();
        router.flush().unwrap();
        assert_eq!(router.overlap_blocks(&fresh, w_head), 1);
        let stats = router.stats().approx.unwrap();
        assert_eq!((stats.expired_blocks, stats.presumed_blocks), (4 + 1, 1));
    }

    #[test]
    fn expiry_also_happens_lazily_while_routing() {
        let clock = ManualClock::new();
        let router = approx_router(&clock, 1000);
        let tokens = prompt(3);
        let w = router.route(&RouteRequest::tokens(&tokens)).unwrap().worker;
        clock.advance(Duration::from_secs(11));
        router.route(&RouteRequest::tokens(&prompt(1)).pinned(w)).unwrap();
        router.flush().unwrap();
        // Only the block the last request routed again is left.
        assert_eq!(router.overlap_blocks(&tokens, w), 1);
    }

    #[test]
    fn a_worker_past_max_blocks_is_pruned_least_recently_routed_tails_first() {
        let clock = ManualClock::new();
        let router = approx_router(&clock, 8);
        let (a, b) = (prompt(4), (100..116).collect::<Vec<u32>>());
        router.route(&RouteRequest::tokens(&a).pinned(A)).unwrap();
        clock.advance(Duration::from_secs(1));
        router.route(&RouteRequest::tokens(&b).pinned(A)).unwrap();
        clock.advance(Duration::from_secs(1));
        // 4 + 4 = 8 blocks: at the bound, nothing pruned yet. One more prefix block of `a`
        // refreshes a's first block; then 3 new blocks push A to 11 > 8: pruned to 4.
        let c = (200..212).collect::<Vec<u32>>();
        router.route(&RouteRequest::tokens(&a[..4]).pinned(A)).unwrap();
        clock.advance(Duration::from_secs(1));
        router.route(&RouteRequest::tokens(&c).pinned(A)).unwrap();
        router.flush().unwrap();
        // Kept: c's 3 blocks (newest) and a's first block (refreshed); b (older) and a's tail gone.
        assert_eq!(router.overlap_blocks(&c, A), 3);
        assert_eq!(router.overlap_blocks(&a, A), 1);
        assert_eq!(router.overlap_blocks(&b, A), 0);
        let stats = router.stats().approx.unwrap();
        assert_eq!((stats.pruned_blocks, stats.presumed_blocks), (7, 4));
    }
}

mod replicas {
    use super::*;
    use kvroute::router::RouterConfigError;
    use kvroute::sequences::{SequenceEvent, SequencePublisher};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Outbox(Arc<Mutex<Vec<SequenceEvent>>>);

    impl SequencePublisher for Outbox {
        fn publish(&self, event: SequenceEvent) {
            self.0.lock().unwrap().push(event);
        }
    }

    #[test]
    fn replica_sync_needs_a_publisher() {
        let config = RouterConfig { replica_sync: true, ..config() };
        assert_eq!(KvRouter::new(config).unwrap_err(), RouterConfigError::MissingPublisher);
    }

    #[test]
    fn a_peer_router_sees_the_requests_this_one_routes() {
        let outbox = Outbox::default();
        let synced = RouterConfig { replica_sync: true, ..config() };
        let one = KvRouter::builder(synced.clone()).publisher(1, outbox.clone()).build().unwrap();
        let two = KvRouter::builder(synced).publisher(2, Outbox::default()).build().unwrap();
        for router in [&one, &two] {
            router.add_worker(A);
            router.add_worker(B);
        }
        let tokens = prompt(3);
        let d = one.route(&RouteRequest::tokens(&tokens).with_id("r").update_states(true)).unwrap();
        for event in outbox.0.lock().unwrap().drain(..) {
            two.sequences().apply_peer_event(event).unwrap();
        }
        two.sequences().flush_peer_events().unwrap();
        assert_eq!(two.sequences().load(d.worker), one.sequences().load(d.worker));
        assert_eq!(two.sequences().load(d.worker).unwrap().active_requests, 1);
        // Replica sync off: nothing is published.
        let quiet = Outbox::default();
        let three = KvRouter::builder(config()).publisher(3, quiet.clone()).build().unwrap();
        three.add_worker(A);
        three.route(&RouteRequest::tokens(&tokens).with_id("q").update_states(true)).unwrap();
        assert!(quiet.0.lock().unwrap().is_empty());
    }
}
