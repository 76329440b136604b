//! End to end against a real publisher: `scripts/zmq_publisher.py` (pyzmq + msgspec, vLLM's
//! framing and replay protocol, events in both encodings) feeds the ZMQ subscriber over
//! loopback; one batch never reaches the PUB socket, and the index must heal through the replay
//! socket to exactly the state the published batches describe. A second endpoint points at a
//! port nobody listens on and must not hold the first one up. An engine that restarts and
//! whose first batches are lost before the subscriber is back must still end up as its new run
//! alone; a replay endpoint that is dead or speaks another framing, while live batches flow,
//! must keep memory bounded and show its failures. Bounded: every wait has a deadline, and the
//! publisher exits on its own after 60 s.
//!
//! Needs python3 with pyzmq and msgspec (`scripts/test` installs them).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvroute::index::ReferenceIndex;
use kvroute::pool::LaneDown;
use kvroute::recovery::{EventSink, RecoveryConfig};
use kvroute::wire::VllmDecoder;
use kvroute::wire::zmq::{SubscriberConfig, ZmqEndpoint, ZmqSubscriber};
use kvroute::{RouterEvent, StorageTier, WorkerId};

#[path = "support/python.rs"]
mod python;

const WORKER: WorkerId = WorkerId(5);
const BATCHES: u64 = 40;
const DROPPED: u64 = 7;
const DEADLINE: Duration = Duration::from_secs(30);

/// One reference index per tier.
#[derive(Default)]
struct Tiers([std::sync::Mutex<ReferenceIndex>; 4]);

impl Tiers {
    fn tier(&self, tier: StorageTier) -> std::sync::MutexGuard<'_, ReferenceIndex> {
        let i = StorageTier::ALL.iter().position(|&t| t == tier).unwrap();
        self.0[i].lock().unwrap()
    }

    fn snapshots(&self) -> Vec<String> {
        StorageTier::ALL.iter().map(|&t| format!("{:?}", self.tier(t).snapshot())).collect()
    }
}

impl EventSink for Tiers {
    fn submit(&self, event: RouterEvent) -> Result<(), LaneDown> {
        let _ = self.tier(event.tier).apply(&event);
        Ok(())
    }
}

/// Kills the publisher when the test ends, however it ends.
struct Publisher(Child);

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The expected index: every recorded batch decoded and applied in order, without `skip`.
fn expected(record: &str, skip: Option<u64>) -> Tiers {
    let tiers = Tiers::default();
    let mut decoder = VllmDecoder::new(WORKER);
    for line in record.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let seq = value["seq"].as_u64().unwrap();
        if Some(seq) == skip {
            continue;
        }
        let hex = value["payload"].as_str().unwrap();
        let payload: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        for event in decoder.decode_batch(seq, &payload).unwrap().events {
            tiers.submit(event).unwrap();
        }
    }
    tiers
}

/// A loopback port nobody listens on (bound, then released).
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_dropped_batch_heals_through_the_replay_socket() {
    python::require_zmq_publisher();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/zmq_publisher.py");
    let record_path =
        std::env::temp_dir().join(format!("kvroute-zmq-e2e-{}.jsonl", std::process::id()));
    let child = Command::new("python3")
        .arg(&script)
        .args(["--batches", &BATCHES.to_string(), "--drop", &DROPPED.to_string()])
        .arg("--record")
        .arg(&record_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("python3 is needed for this test (with pyzmq and msgspec; scripts/test installs them): {e}")
        });
    let mut publisher = Publisher(child);
    let stdout = publisher.0.stdout.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let ready = lines.recv_timeout(DEADLINE).expect(
        "the publisher did not start: is python3 with pyzmq and msgspec installed? (scripts/test installs them)",
    );
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"READY"), "publisher said {ready:?}");
    let (pub_address, replay_address) = (words[1].to_owned(), words[2].to_owned());

    let index = Arc::new(Tiers::default());
    let dead = format!("tcp://127.0.0.1:{}", dead_port());
    let config = SubscriberConfig {
        endpoints: vec![
            ZmqEndpoint::new(WorkerId(99), dead.clone()).with_replay(dead),
            ZmqEndpoint::new(WORKER, pub_address).with_replay(replay_address).with_topic("kv"),
        ],
        ..SubscriberConfig::default()
    };
    let subscriber = ZmqSubscriber::start(config, index.clone()).unwrap();

    // The stream's start (re-sent until we say go) restores the endpoint from a replay.
    wait_until("the first batch", || subscriber.stats().endpoints[1].events >= 1);
    writeln!(publisher.0.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(lines.recv_timeout(DEADLINE).unwrap(), "DONE");

    let record = std::fs::read_to_string(&record_path).unwrap();
    let _ = std::fs::remove_file(&record_path);
    let want = expected(&record, None).snapshots();
    assert_ne!(want, expected(&record, Some(DROPPED)).snapshots(), "the dropped batch matters");
    wait_until("the index to heal", || index.snapshots() == want);

    let stats = subscriber.stats();
    let live = &stats.endpoints[1];
    assert_eq!(live.last_seq, Some(BATCHES - 1));
    assert!(live.gaps >= 1, "the dropped batch is a gap: {live:?}");
    assert!(live.replay_requests >= 2, "a restore and a gap fill: {live:?}");
    assert_eq!((live.decode_errors, live.unrecovered_gaps), (0, 0), "{live:?}");
    let dead = &stats.endpoints[0];
    assert_eq!((dead.messages, dead.events), (0, 0), "{dead:?}");
    subscriber.shutdown();
}

/// A started publisher: the process, its stdout lines, its PUB and replay addresses.
fn start_publisher(
    args: &[&str],
    record: &std::path::Path,
) -> (Publisher, mpsc::Receiver<String>, String, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/zmq_publisher.py");
    let child = Command::new("python3")
        .arg(&script)
        .args(args)
        .arg("--record")
        .arg(record)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with pyzmq and msgspec (.ci/run installs them)");
    let mut publisher = Publisher(child);
    let stdout = publisher.0.stdout.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let ready = lines.recv_timeout(DEADLINE).expect("the publisher starts");
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"READY"), "publisher said {ready:?}");
    let (pub_address, replay_address) = (words[1].to_owned(), words[2].to_owned());
    (publisher, lines, pub_address, replay_address)
}

fn record_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kvroute-zmq-e2e-{name}-{}.jsonl", std::process::id()))
}

#[test]
fn an_engine_restart_whose_first_batches_are_lost_leaves_only_the_new_run() {
    let first_record = record_path("run1");
    let (mut first, said, pub_address, replay_address) =
        start_publisher(&["--batches", "100"], &first_record);
    let index = Arc::new(Tiers::default());
    let endpoint = ZmqEndpoint::new(WORKER, pub_address.clone())
        .with_replay(replay_address.clone())
        .with_topic("kv");
    let config = SubscriberConfig { endpoints: vec![endpoint], ..SubscriberConfig::default() };
    let subscriber = ZmqSubscriber::start(config, index.clone()).unwrap();
    wait_until("the first batch", || subscriber.stats().endpoints[0].events >= 1);
    writeln!(first.0.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(said.recv_timeout(DEADLINE).unwrap(), "DONE");
    let old = expected(&std::fs::read_to_string(&first_record).unwrap(), None).snapshots();
    wait_until("the first run", || index.snapshots() == old);

    // The engine goes down for 6 s; its next run publishes batches 0 and 1 before the
    // subscriber is back (lost), then 2..79 once it is.
    drop(first);
    std::thread::sleep(Duration::from_secs(6));
    let second_record = record_path("run2");
    let args = ["--batches", "80", "--hash-base", "3000", "--lost", "2"];
    let args =
        [&args[..], &["--pub-address", &pub_address, "--replay-address", &replay_address]].concat();
    let (_second, said, _, _) = start_publisher(&args, &second_record);
    assert_eq!(said.recv_timeout(DEADLINE).unwrap(), "DONE");
    let new = expected(&std::fs::read_to_string(&second_record).unwrap(), None).snapshots();
    assert_ne!(new, old);
    let start = Instant::now();
    while index.snapshots() != new {
        let stats = subscriber.stats();
        assert!(start.elapsed() < DEADLINE, "the index is not the new run's alone: {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = subscriber.stats();
    assert!(stats.endpoints[0].reconnects >= 1, "{stats:?}");
    subscriber.shutdown();
    let _ = std::fs::remove_file(first_record);
    let _ = std::fs::remove_file(second_record);
}

#[test]
fn a_broken_replay_endpoint_keeps_memory_bounded_and_shows_its_failures() {
    const CAPACITY: usize = 64;
    let record = record_path("broken");
    let args = ["--batches", "3000", "--replay-mode", "framing", "--interval", "0.0005"];
    let (mut publisher, said, pub_address, replay_address) = start_publisher(&args, &record);
    let index = Arc::new(Tiers::default());
    let dead = format!("tcp://127.0.0.1:{}", dead_port());
    let config = SubscriberConfig {
        endpoints: vec![
            // Answers with another framing.
            ZmqEndpoint::new(WORKER, pub_address.clone())
                .with_replay(replay_address)
                .with_topic("kv"),
            // A replay port nobody listens on.
            ZmqEndpoint::new(WorkerId(6), pub_address).with_replay(dead).with_topic("kv"),
        ],
        recovery: RecoveryConfig { buffer_capacity: CAPACITY, ..RecoveryConfig::default() },
        replay_timeout: Duration::from_millis(200),
        ..SubscriberConfig::default()
    };
    let subscriber = ZmqSubscriber::start(config, index.clone()).unwrap();
    wait_until("both endpoints", || subscriber.stats().endpoints.iter().all(|e| e.messages >= 1));
    writeln!(publisher.0.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(said.recv_timeout(DEADLINE).unwrap(), "DONE");
    wait_until("every live batch", || {
        subscriber.stats().endpoints.iter().all(|e| e.last_seq == Some(2_999))
    });
    let stats = subscriber.stats();
    for endpoint in &stats.endpoints {
        assert!(endpoint.stashed <= CAPACITY as u64, "the stash grew: {endpoint:?}");
        assert!(endpoint.replay_failures >= 1 && endpoint.recovering, "{endpoint:?}");
        assert_eq!(endpoint.events, 0, "nothing was restored: {endpoint:?}");
    }
    subscriber.shutdown();
    let _ = std::fs::remove_file(record);
}
