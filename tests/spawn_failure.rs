//! Thread spawn failure is a typed error, not a panic: with `RUST_MIN_STACK` set beyond what
//! the OS can map, every thread this process starts fails, so the index, the tracker's peer
//! lanes and the router must report `Spawn` from their constructors. Its own process
//! (`harness = false`): the test harness would need threads itself.

#[cfg(not(loom))]
fn main() {
    use kvroute::index::{EventPool, PoolConfig, PoolConfigError, TieredIndex};
    use kvroute::router::{KvRouter, RouterConfig, RouterConfigError};
    use kvroute::sequences::{ConfigError, MultiWorkerSequences, SequenceEvent, SequencePublisher};

    struct Nowhere;
    impl SequencePublisher for Nowhere {
        fn publish(&self, _: SequenceEvent) {}
    }

    // SAFETY: no other thread exists yet; std reads the variable at the first spawn.
    unsafe { std::env::set_var("RUST_MIN_STACK", (1usize << 62).to_string()) };

    let pool = EventPool::new(PoolConfig::default());
    assert!(matches!(pool, Err(PoolConfigError::Spawn(_))), "pool: {pool:?}");
    let tiered = TieredIndex::new(PoolConfig::default(), PoolConfig::default());
    assert!(matches!(tiered, Err(PoolConfigError::Spawn(_))), "tiered: {tiered:?}");
    let tracker = MultiWorkerSequences::builder(16).replica(1, Nowhere).build();
    assert!(matches!(tracker, Err(ConfigError::Spawn(_))), "tracker: {tracker:?}");
    let router = KvRouter::new(RouterConfig::new(16));
    let expected = matches!(router, Err(RouterConfigError::Index(PoolConfigError::Spawn(_))));
    assert!(expected, "router: {:?}", router.err());
    if let Err(PoolConfigError::Spawn(error)) = pool {
        assert!(error.to_string().starts_with("could not start a lane thread"), "{error}");
    }
    println!("spawn failures are typed errors: ok");
}

#[cfg(loom)]
fn main() {}
