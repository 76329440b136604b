//! `kvroute listen` against a real publisher (`scripts/zmq_publisher.py`: pyzmq + msgspec,
//! vLLM's framing and replay socket): the view counts the events, the gap the publisher makes
//! on purpose and its healing; `--metrics` serves the same counters; a malformed endpoint is one
//! error line with exit code 2. Bounded: every wait has a deadline, the publisher exits on its
//! own after 60 s and `listen` after `--duration`.
#![cfg(all(feature = "listen", not(loom)))]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

#[path = "../../tests/support/python.rs"]
mod python;

const DEADLINE: Duration = Duration::from_secs(30);

/// Kills the process when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines `reader` yields, on a channel (so reads can have deadlines).
fn lines(reader: impl Read + Send + 'static) -> Receiver<String> {
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            if send.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    lines
}

/// The numbers of the view's `all` row: events, events/s, block ops, gaps, healed, errors,
/// restores, replay failures, stashed.
fn totals(view: &str) -> Vec<u64> {
    let row = view.lines().rev().find(|line| line.starts_with("all ")).expect("an `all` row");
    row.split_whitespace().skip(1).map(|n| n.parse().expect("a number")).collect()
}

#[test]
fn listen_shows_a_publishers_events_and_the_healed_gap_and_serves_metrics() {
    python::require_zmq_publisher();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/zmq_publisher.py");
    let record =
        std::env::temp_dir().join(format!("kvroute-cli-listen-{}.jsonl", std::process::id()));
    let publisher = Command::new("python3")
        .arg(&script)
        .args(["--batches", "30", "--drop", "9", "--topic", "kv"])
        .arg("--record")
        .arg(&record)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with pyzmq and msgspec (scripts/test installs them)");
    let mut publisher = Killed(publisher);
    let said = lines(publisher.0.stdout.take().unwrap());
    let ready = said.recv_timeout(DEADLINE).expect("the publisher starts");
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"READY"), "publisher said {ready:?}");
    let endpoint = format!("5={},replay={},topic=kv", words[1], words[2]);

    let listen = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["listen", "--zmq", &endpoint, "--interval", "0.5", "--duration", "6"])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut listen = Killed(listen);
    let view = lines(listen.0.stdout.take().unwrap());
    let notes = lines(listen.0.stderr.take().unwrap());
    let metrics = notes.recv_timeout(DEADLINE).expect("listen says where its metrics are");
    let address = metrics
        .strip_prefix("metrics at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("listen said {metrics:?}"))
        .to_string();

    // The first view means the subscriber runs: let the publisher go on past batch 0.
    view.recv_timeout(DEADLINE).expect("a first view");
    writeln!(publisher.0.stdin.as_mut().unwrap(), "go").unwrap();
    assert_eq!(said.recv_timeout(DEADLINE).as_deref(), Ok("DONE"));

    let mut printed = String::new();
    while let Ok(line) = view.recv_timeout(DEADLINE) {
        printed.push_str(&line);
        printed.push('\n');
        // The scrape comes while listen still runs: once the whole stream is in.
        if line.starts_with("all ") && totals(&printed)[4] >= 2 {
            break;
        }
    }
    let mut scrape = TcpStream::connect(&address).unwrap();
    write!(scrape, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut body = String::new();
    scrape.read_to_string(&mut body).unwrap();
    while let Ok(line) = view.recv_timeout(DEADLINE) {
        printed.push_str(&line);
        printed.push('\n');
    }
    let status = listen.0.wait().unwrap();
    assert!(status.success(), "listen exited with {status}:\n{printed}");

    let [events, _, block_ops, gaps, healed, errors, restores, replay_failures, _] =
        totals(&printed)[..]
    else {
        panic!("nine totals in {printed}")
    };
    assert!(restores >= 1 && replay_failures == 0, "{printed}");
    assert!(events >= 30 && block_ops >= events, "{printed}");
    assert!(gaps >= 1 && healed >= 2, "the dropped batch is a gap, healed: {printed}");
    assert_eq!(errors, 0, "{printed}");
    let index = printed.lines().rev().find(|l| l.starts_with("index:")).unwrap();
    assert!(index.starts_with("index: 1 workers, "), "{index}");
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    let events_line = format!("kvroute_events_total{{worker=\"5\",endpoint=\"{}\"}} ", words[1]);
    assert!(body.contains(&events_line), "{body}");
    let _ = std::fs::remove_file(record);
}

#[test]
fn a_malformed_endpoint_is_one_error_line_and_exit_code_2() {
    for endpoint in ["localhost:5557", "tcp://127.0.0.1:1,speed=3", "nonsense://x"] {
        let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
            .args(["listen", "--zmq", endpoint, "--duration", "1"])
            .output()
            .expect("the binary runs");
        assert_eq!(out.status.code(), Some(2), "{endpoint}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{endpoint}: {stderr}");
        assert!(stderr.starts_with("kvroute: "), "{endpoint}: {stderr}");
    }
}

#[test]
fn two_endpoints_for_one_worker_are_one_error_line_and_exit_code_2() {
    // The second endpoint's id is its position, 1: the first one's.
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["listen", "--zmq", "1=tcp://127.0.0.1:1", "--zmq", "tcp://127.0.0.1:2"])
        .args(["--duration", "1"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("both feed worker 1 rank 0"), "{stderr}");
}

#[path = "../../tests/support/nats_server.rs"]
mod nats_server;

/// With `--nats`, listen joins the replicas and shows their requests in flight per worker.
#[test]
fn with_nats_listen_shows_the_replicas_requests_per_worker() {
    use kvroute::Worker;
    use kvroute::nats::{NatsConfig, NatsReplica};
    use kvroute::router::{KvRouter, RouteRequest, RouterConfig};

    let server = nats_server::NatsServer::start();
    let replica = NatsReplica::start(NatsConfig::new(server.url(), "listen", 1)).expect("starts");
    let config = RouterConfig { replica_sync: true, ..RouterConfig::new(16) };
    let router =
        KvRouter::builder(config).publisher(1, replica.publisher()).build().expect("router");
    let router = std::sync::Arc::new(router);
    router.add_worker(Worker::new(4, 0));
    replica.attach(router.clone()).expect("attach");
    assert!(replica.wait_connected(DEADLINE));
    let prompt: Vec<u32> = (0..64).collect();
    for i in 0..3 {
        let id = format!("r{i}");
        let request = RouteRequest::tokens(&prompt).with_id(id.as_str());
        router.route(&request.update_states(true)).expect("routes");
    }

    // Nobody publishes on this endpoint: the view's load table is what is checked.
    let url = server.url();
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["listen", "--zmq", "4=tcp://127.0.0.1:9", "--duration", "2", "--interval", "1"])
        .args(["--nats", &url, "--namespace", "listen", "--router-id", "2"])
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let last = stdout.lines().rev().find(|l| l.starts_with("4/0 "));
    let row: Vec<&str> =
        last.unwrap_or_else(|| panic!("no load row:\n{stdout}")).split_whitespace().collect();
    assert_eq!(row.get(1), Some(&"3"), "three requests in flight on worker 4:\n{stdout}");
}
