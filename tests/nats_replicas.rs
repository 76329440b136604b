//! Router replicas over a real `nats-server` (started and stopped by each test on a free
//! loopback port): they converge under concurrent traffic, a restarted replica catches up, and
//! a dead server degrades to local state without stalling `route`, then sync resumes.
//!
//! Waits are bounded (a deadline per condition); no test asserts a duration.
#![cfg(not(loom))]

#[path = "support/nats_server.rs"]
mod nats_server;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use kvroute::Worker;
use kvroute::nats::{NatsConfig, NatsReplica, NatsStats};
use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
use kvroute::sequences::{RequestId, WorkerLoad};
use nats_server::NatsServer;

const BLOCK: u32 = 16;
const WORKERS: u64 = 4;

/// A router replica and its transport.
struct Replica {
    // Declared first: dropped (transport stopped) before the router.
    nats: NatsReplica,
    router: Arc<KvRouter>,
}

impl Replica {
    fn start(url: &str, namespace: &str, router_id: u64) -> Self {
        let config = NatsConfig {
            heartbeat: Duration::from_millis(100),
            snapshot_timeout: Duration::from_secs(1),
            max_reconnect_delay: Duration::from_millis(200),
            ..NatsConfig::new(url, namespace, router_id)
        };
        let nats = NatsReplica::start(config).expect("transport starts");
        let router_config =
            RouterConfig { replica_sync: true, seed: Some(router_id), ..RouterConfig::new(BLOCK) };
        let router = KvRouter::builder(router_config)
            .publisher(router_id, nats.publisher())
            .build()
            .expect("router builds");
        let router = Arc::new(router);
        for id in 0..WORKERS {
            router.add_worker(Worker::new(id, 0));
        }
        nats.attach(router.clone()).expect("attaches once");
        assert!(nats.wait_connected(Duration::from_secs(10)), "connects within 10 s");
        Self { nats, router }
    }

    fn stats(&self) -> NatsStats {
        self.nats.stats()
    }

    fn loads(&self) -> Vec<WorkerLoad> {
        let mut loads = self.router.sequences().loads();
        loads.sort_by_key(|load| load.worker);
        loads
    }

    /// Every worker's potential load for a probe prompt, sorted by worker.
    fn potential(&self) -> Vec<(Worker, usize, usize)> {
        let probe: Vec<u32> = (0..5 * BLOCK).collect();
        let mut loads: Vec<_> = self
            .router
            .potential_loads(&probe)
            .into_iter()
            .map(|l| (l.worker, l.potential_blocks, l.potential_tokens))
            .collect();
        loads.sort();
        loads
    }

    fn active_requests(&self) -> usize {
        self.loads().iter().map(|load| load.active_requests).sum()
    }
}

/// Waits until `done` holds, at most `limit`; panics with `what` (and `detail`) otherwise.
fn wait_until(
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}: {}", detail());
        thread::sleep(Duration::from_millis(10));
    }
}

fn wait_converged(a: &Replica, b: &Replica, limit: Duration) {
    wait_until(
        limit,
        "the replicas converge",
        || a.loads() == b.loads() && a.potential() == b.potential(),
        || format!("\nA {:?}\nB {:?}\nA {}\nB {}", a.loads(), b.loads(), a.stats(), b.stats()),
    );
}

/// A prompt of `blocks` full blocks whose first `shared` blocks are common to every prompt.
fn prompt(seed: u64, blocks: u32, shared: u32) -> Vec<u32> {
    (0..blocks * BLOCK)
        .map(|t| if t < shared * BLOCK { t } else { (seed as u32).wrapping_mul(7919) ^ t })
        .collect()
}

/// Routes `count` requests named `<prefix>-<i>` through `replica` (recorded as in flight),
/// and moves them along: every request completes prefill, every 3rd decodes two blocks, every
/// 2nd is freed. Returns the ids still in flight.
fn traffic(replica: &Replica, prefix: &str, count: u64) -> Vec<RequestId> {
    let mut live = Vec::new();
    for i in 0..count {
        let id = RequestId::from(format!("{prefix}-{i}").as_str());
        let tokens = prompt(i, 2 + (i % 5) as u32, (i % 3) as u32);
        let request = RouteRequest::tokens(&tokens).with_id(id.clone()).update_states(true);
        replica.router.route(&request).expect("routes");
        replica.router.mark_prefill_completed(&id).expect("in flight");
        if i % 3 == 0 {
            replica.router.add_output_block(&id).expect("in flight");
            replica.router.add_output_block(&id).expect("in flight");
        }
        if i % 2 == 0 {
            replica.router.free(&id).expect("in flight");
        } else {
            live.push(id);
        }
    }
    live
}

#[test]
fn two_replicas_converge_under_concurrent_traffic() {
    let server = NatsServer::start();
    let a = Replica::start(&server.url(), "converge", 1);
    let b = Replica::start(&server.url(), "converge", 2);

    let live: Vec<RequestId> = thread::scope(|scope| {
        let runs = [(&a, "a0"), (&a, "a1"), (&b, "b0"), (&b, "b1")]
            .map(|(replica, prefix)| scope.spawn(move || traffic(replica, prefix, 400)));
        runs.into_iter().flat_map(|run| run.join().expect("no panic")).collect()
    });
    wait_converged(&a, &b, Duration::from_secs(20));
    assert_eq!(a.active_requests(), live.len(), "both hold every request still in flight");
    assert!(a.loads().iter().all(|load| load.active_blocks > 0), "{:?}", a.loads());
    let (sa, sb) = (a.stats(), b.stats());
    assert!(sa.connected && sb.connected);
    assert!(sa.published >= 2 * 400 * 2 && sb.applied >= 2 * 400 * 2, "{sa}\n{sb}");
    assert_eq!((sa.dropped, sb.dropped), (0, 0));

    // Each replica frees what it routed; both end empty.
    for id in &live {
        let owner = if id.as_str().starts_with('a') { &a } else { &b };
        owner.router.free(id).expect("in flight");
    }
    wait_converged(&a, &b, Duration::from_secs(20));
    assert_eq!((a.active_requests(), b.active_requests()), (0, 0));
}

#[test]
fn a_restarted_replica_catches_up_and_its_old_requests_are_dropped() {
    let server = NatsServer::start();
    let a = Replica::start(&server.url(), "restart", 1);
    let b = Replica::start(&server.url(), "restart", 2);
    let from_a = traffic(&a, "a", 60);
    let from_b = traffic(&b, "b", 40);
    wait_converged(&a, &b, Duration::from_secs(20));
    assert_eq!(a.active_requests(), from_a.len() + from_b.len());

    drop(b);
    let more_from_a = traffic(&a, "a-while-b-is-down", 30);
    let b = Replica::start(&server.url(), "restart", 2);
    wait_converged(&a, &b, Duration::from_secs(20));
    // B's earlier requests died with it; A's (also those routed while B was down) are on both.
    assert_eq!(b.active_requests(), from_a.len() + more_from_a.len());
    assert!(b.stats().snapshots_applied >= 1, "{}", b.stats());
    assert!(a.stats().peer_restarts >= 1, "{}", a.stats());
}

#[test]
fn a_dead_server_degrades_to_local_state_and_sync_resumes_when_it_returns() {
    let mut server = NatsServer::start();
    let a = Replica::start(&server.url(), "outage", 1);
    let b = Replica::start(&server.url(), "outage", 2);
    let mut live_a = traffic(&a, "a", 40);
    let live_b = traffic(&b, "b", 40);
    wait_converged(&a, &b, Duration::from_secs(20));

    server.stop();
    let detail = || format!("{}", a.stats());
    wait_until(Duration::from_secs(10), "A sees the server gone", || !a.stats().connected, detail);
    let unsent_before = a.stats().unsent;
    // Routing goes on, on local state: every call returns, and the outage is counted.
    live_a.extend(traffic(&a, "a-offline", 300));
    assert_eq!(a.active_requests(), live_a.len() + live_b.len());
    wait_until(
        Duration::from_secs(10),
        "A counts the events it could not send",
        || a.stats().unsent >= unsent_before + 300,
        detail,
    );
    assert_ne!(a.loads(), b.loads(), "B cannot see A's offline requests");

    server.restart();
    wait_until(
        Duration::from_secs(20),
        "both reconnect",
        || a.stats().connected && b.stats().connected,
        || format!("{}\n{}", a.stats(), b.stats()),
    );
    wait_converged(&a, &b, Duration::from_secs(20));
    assert_eq!(b.active_requests(), live_a.len() + live_b.len());
    let sb = b.stats();
    assert!(sb.gaps >= 1 && sb.snapshots_applied >= 1, "{sb}");
    assert!(a.stats().disconnects >= 1 && a.stats().connects >= 2, "{}", a.stats());
}

#[test]
fn bad_settings_are_typed_errors_and_a_missing_server_is_not() {
    use kvroute::nats::NatsError;
    let bad = NatsConfig::new("nats://127.0.0.1:1", "has.dot", 1);
    assert!(matches!(NatsReplica::start(bad), Err(NatsError::BadConfig(_))));
    let zero = NatsConfig { outbox_capacity: 0, ..NatsConfig::new("nats://127.0.0.1:1", "x", 1) };
    assert!(matches!(NatsReplica::start(zero), Err(NatsError::BadConfig(_))));
    let url = NatsConfig::new("definitely not a url ::", "x", 1);
    assert!(matches!(NatsReplica::start(url), Err(NatsError::Connect(_))));

    // Nobody listens on port 1: the replica starts, local-only.
    let replica =
        NatsReplica::start(NatsConfig::new("nats://127.0.0.1:1", "x", 1)).expect("starts");
    assert!(!replica.stats().connected);
    let sink = Arc::new(kvroute::MultiWorkerSequences::builder(BLOCK).build().expect("tracker"));
    replica.attach(sink.clone()).expect("first attach");
    assert!(matches!(replica.attach(sink), Err(NatsError::AlreadyAttached)));
}

#[test]
fn a_late_replica_takes_a_state_larger_than_one_message_in_parts() {
    let server = NatsServer::start();
    let a = Replica::start(&server.url(), "parts", 1);
    // 2,000 requests of 150 blocks: ~2.7 MB of snapshot, past the server's 1 MiB payload limit
    // and the transport's 256 KiB parts.
    for i in 0..2_000u64 {
        let id = RequestId::from(format!("big-{i}").as_str());
        let tokens = prompt(i, 150, 0);
        let request = RouteRequest::tokens(&tokens).with_id(id).update_states(true);
        a.router.route(&request).expect("routes");
    }
    let b = Replica::start(&server.url(), "parts", 2);
    wait_converged(&a, &b, Duration::from_secs(30));
    assert_eq!(b.active_requests(), 2_000);
    assert_eq!(b.stats().snapshots_applied, 1, "{}", b.stats());
}
