//! Events longer than the index takes at once (`PoolConfig::max_event_blocks`): refused at
//! submit with a typed error, and sent in pieces by every producer inside the crate
//! (approximate mode's decisions, expiry and pruning; snapshot dumps and restores), so none is
//! dropped after an `Ok`.

use std::time::Duration;

use kvroute::index::{EnqueueError, PoolConfig, ReferenceIndex, TieredIndex};
use kvroute::router::{ApproxConfig, KvRouter, RouteRequest, RouterConfig};
use kvroute::sequences::ManualClock;
use kvroute::{
    ApplyErrorKind, KvEventData, LocalBlockHash, RouterEvent, SequenceHash, StorageTier,
    StoredBlock, Worker,
};

const BS: u32 = 4;
const W: Worker = Worker::new(1, 0);

/// A prompt of `blocks` full blocks, distinct for each `id`.
fn prompt(id: u32, blocks: u32) -> Vec<u32> {
    (0..blocks * BS).map(|t| id * 1_000_000 + t).collect()
}

fn chain(blocks: u64) -> Vec<StoredBlock> {
    (0..blocks).map(|i| StoredBlock::new(10 + i, 200 - i)).collect()
}

fn query(blocks: u64) -> Vec<LocalBlockHash> {
    (0..blocks).map(|i| LocalBlockHash(10 + i)).collect()
}

fn limited(max_event_blocks: usize) -> PoolConfig {
    PoolConfig { max_event_blocks, ..PoolConfig::default() }
}

fn approx_router(clock: &ManualClock, approximate: ApproxConfig, device: PoolConfig) -> KvRouter {
    let config = RouterConfig {
        use_kv_events: false,
        approximate,
        device_index: device,
        seed: Some(3),
        ..RouterConfig::new(BS)
    };
    let router = KvRouter::builder(config).clock(clock.clone()).build().unwrap();
    router.add_worker(W);
    router
}

#[test]
fn split_pieces_apply_like_the_whole_event() {
    let stored = RouterEvent::stored(W, 7, Some(SequenceHash(5)), chain(10));
    let pieces: Vec<RouterEvent> = stored.clone().split(4).collect();
    let sizes: Vec<usize> = pieces.iter().map(RouterEvent::block_ops).collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    let parents: Vec<Option<SequenceHash>> = pieces
        .iter()
        .map(|piece| match &piece.event.data {
            KvEventData::Stored { parent, .. } => *parent,
            other => panic!("not a Stored: {other:?}"),
        })
        .collect();
    assert_eq!(
        parents,
        vec![Some(SequenceHash(5)), Some(SequenceHash(197)), Some(SequenceHash(193))]
    );
    assert!(pieces.iter().all(|p| p.event.event_id == 7 && p.worker() == W));

    // Applied in order, the pieces leave the reference as the whole event does.
    let root = RouterEvent::stored(W, 6, None, vec![StoredBlock::new(9, 5)]);
    let (mut whole, mut cut) = (ReferenceIndex::new(), ReferenceIndex::new());
    for index in [&mut whole, &mut cut] {
        index.apply(&root).unwrap();
    }
    whole.apply(&stored).unwrap();
    pieces.iter().for_each(|piece| cut.apply(piece).unwrap());
    assert_eq!(cut.snapshot(), whole.snapshot());
    let removed = RouterEvent::removed(W, 8, (191..=200).map(SequenceHash).collect());
    let removals: Vec<RouterEvent> = removed.clone().split(3).collect();
    assert_eq!(removals.len(), 4);
    whole.apply(&removed).unwrap();
    removals.iter().for_each(|piece| cut.apply(piece).unwrap());
    assert_eq!(cut.snapshot(), whole.snapshot());

    // Within the bound, or a Cleared: the event itself; a bound of 0 is taken as 1.
    let small = RouterEvent::stored(W, 1, None, chain(3));
    assert_eq!(small.clone().split(3).collect::<Vec<_>>(), vec![small.clone()]);
    let cleared = RouterEvent::cleared(W, 2);
    assert_eq!(cleared.clone().split(0).collect::<Vec<_>>(), vec![cleared]);
    assert_eq!(small.split(0).count(), 3);
}

#[test]
fn an_oversized_event_is_refused_at_submit_with_a_typed_error() {
    // Without recovery, with it, and through the index directly: refused, counted, not applied.
    for recovery in [None, Some(Default::default())] {
        let config = RouterConfig { device_index: limited(4), recovery, ..RouterConfig::new(BS) };
        let router = KvRouter::new(config).unwrap();
        router.add_worker(W);
        let big = RouterEvent::stored(W, 0, None, chain(5));
        assert_eq!(router.apply_event(big.clone()), Err(EnqueueError::TooManyBlocks(big.clone())));
        let index = router.index();
        assert_eq!(index.apply_blocking(big.clone()), Err(EnqueueError::TooManyBlocks(big)));
        router.flush().unwrap();
        assert_eq!(index.device().find_matches(&query(5)).get(W), 0);
        assert_eq!(index.device().stats().errors_of(ApplyErrorKind::TooManyBlocks), 2);
    }

    // A lower tier's oversized event is refused without starting that tier's lanes.
    let index = TieredIndex::new(PoolConfig::default(), limited(4)).unwrap();
    let mut big = RouterEvent::stored(W, 0, None, chain(5));
    big.tier = StorageTier::Disk;
    assert_eq!(index.apply_blocking(big.clone()), Err(EnqueueError::TooManyBlocks(big)));
    assert!(index.tier(StorageTier::Disk).is_none());
    assert_eq!(index.max_event_blocks(StorageTier::Disk), 4);
}

/// 20 prompts of 1,000 blocks routed to one worker expire as 20,000 blocks: more than one
/// event of the default 16,384 carries.
#[test]
fn approximate_expiry_forgets_more_blocks_than_one_event_carries() {
    let clock = ManualClock::new();
    let approximate = ApproxConfig {
        ttl: Duration::from_secs(10),
        max_blocks: 1 << 20,
        prune_target: 0.5,
        ..ApproxConfig::default()
    };
    let router = approx_router(&clock, approximate, PoolConfig::default());
    for id in 0..20 {
        router.route(&RouteRequest::tokens(&prompt(id, 1_000)).pinned(W)).unwrap();
    }
    router.flush().unwrap();
    assert_eq!(router.index().device().stats().live_entries, 20_000);

    clock.advance(Duration::from_secs(11));
    router.expire_now().unwrap();
    router.flush().unwrap();
    let approx = router.stats().approx.unwrap();
    assert_eq!((approx.presumed_blocks, approx.expired_blocks), (0, 20_000));
    assert_eq!(router.index().device().stats().live_entries, 0);
    assert_eq!(router.overlap_blocks(&prompt(0, 1_000), W), 0);
    assert_eq!(router.index().device().stats().errors_of(ApplyErrorKind::TooManyBlocks), 0);
}

#[test]
fn approximate_mode_indexes_and_prunes_requests_over_the_event_bound() {
    let clock = ManualClock::new();
    let approximate = ApproxConfig {
        ttl: Duration::from_secs(100),
        max_blocks: 500,
        prune_target: 0.2,
        ..ApproxConfig::default()
    };
    let router = approx_router(&clock, approximate, limited(64));
    let long = prompt(1, 200);
    let first = router.route(&RouteRequest::tokens(&long)).unwrap();
    router.flush().unwrap();
    // The whole request is presumed cached, in the index as in the tracker.
    assert_eq!(router.overlap_blocks(&long, W), 200);
    let again = router.route(&RouteRequest::tokens(&long)).unwrap();
    assert_eq!((first.worker, again.overlap_blocks), (W, 200));

    // 3 × 200 > 500 blocks: pruned to 100 in one go (500 blocks, more than one event carries).
    clock.advance(Duration::from_secs(1));
    router.route(&RouteRequest::tokens(&prompt(2, 200))).unwrap();
    clock.advance(Duration::from_secs(1));
    let newest = prompt(3, 200);
    router.route(&RouteRequest::tokens(&newest)).unwrap();
    router.flush().unwrap();
    let approx = router.stats().approx.unwrap();
    assert_eq!((approx.presumed_blocks, approx.pruned_blocks), (100, 500));
    assert_eq!(router.index().device().stats().live_entries, 100);
    assert_eq!(router.overlap_blocks(&newest, W), 100);
    assert_eq!(router.overlap_blocks(&long, W), 0);
    assert_eq!(router.index().device().stats().errors_of(ApplyErrorKind::TooManyBlocks), 0);
}

fn snapshot_of(router: &KvRouter) -> Vec<u8> {
    let mut file = Vec::new();
    router.save_snapshot(&mut file).unwrap();
    file
}

#[test]
fn a_snapshot_restores_chains_longer_than_one_event_of_the_restoring_router() {
    // Saved by a router that takes 6 blocks at once, restored by one that takes 4.
    let saver = KvRouter::new(RouterConfig::new(BS)).unwrap();
    saver.apply_event(RouterEvent::stored(W, 0, None, chain(6))).unwrap();
    let restored =
        KvRouter::new(RouterConfig { device_index: limited(4), ..RouterConfig::new(BS) }).unwrap();
    restored.restore_snapshot(&snapshot_of(&saver)[..]).unwrap();
    assert_eq!(restored.index().device().find_matches(&query(6)).get(W), 6);

    // A chain the index merged from events it took is dumped in pieces it takes again.
    let config = || RouterConfig { device_index: limited(4), ..RouterConfig::new(BS) };
    let saver = KvRouter::new(config()).unwrap();
    let blocks = chain(8);
    saver.apply_event(RouterEvent::stored(W, 0, None, blocks[..4].to_vec())).unwrap();
    let parent = Some(blocks[3].hash);
    saver.apply_event(RouterEvent::stored(W, 1, parent, blocks[4..].to_vec())).unwrap();
    saver.flush().unwrap();
    let dump = saver.index().device().dump_events().unwrap();
    assert!(dump.iter().all(|event| event.block_ops() <= 4), "{dump:?}");
    let restored = KvRouter::new(config()).unwrap();
    restored.restore_snapshot(&snapshot_of(&saver)[..]).unwrap();
    assert_eq!(
        restored.index().device().snapshot().unwrap(),
        saver.index().device().snapshot().unwrap()
    );
    assert_eq!(restored.index().device().find_matches(&query(8)).get(W), 8);
}
