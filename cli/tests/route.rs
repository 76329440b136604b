//! `kvroute route` as a script uses it: the binary, token ids on stdin, decisions on stdout;
//! and joined to a library replica through a real `nats-server`.
#![cfg(not(loom))]

#[path = "../../tests/support/nats_server.rs"]
mod nats_server;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kvroute::Worker;
use kvroute::nats::{NatsConfig, NatsReplica};
use kvroute::router::{KvRouter, RouteRequest, RouterConfig};

fn route(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("route")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvroute runs");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("kvroute exits")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `count` tokens starting at `from`, as an input line.
fn line(from: u32, count: u32) -> String {
    (from..from + count).map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
}

#[test]
fn one_decision_per_line_and_shared_prefixes_follow_in_approximate_mode() {
    let input = format!("{}\n{}\n{}\n", line(0, 40), line(0, 36), line(1000, 20));
    let out = route(&["--workers", "3", "--approximate", "--block-size", "16"], &input);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<Vec<u64>> = text(&out.stdout)
        .lines()
        .map(|l| l.split(' ').map(|f| f.parse().expect("numbers")).collect())
        .collect();
    assert_eq!(lines.len(), 3);
    // worker, dp rank, overlap blocks, prompt blocks.
    assert_eq!(lines[0][1..], [0, 0, 2]);
    assert_eq!(lines[1], [lines[0][0], 0, 2, 2], "the second prompt follows the first");
    assert_eq!(lines[2][2..], [0, 1]);
}

#[test]
fn bad_input_is_one_clear_error_naming_the_line() {
    for (input, message) in [
        ("1 2\n3 x 4\n", "line 2: \"x\" is not a token id"),
        ("1 2\n\n", "line 2: no token ids"),
        ("99999999999\n", "line 1: \"99999999999\" is not a token id"),
    ] {
        let out = route(&[], input);
        assert_eq!(out.status.code(), Some(2), "{input:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(message) && stderr.lines().count() == 1, "{stderr}");
        assert!(!stderr.contains("panicked"));
    }
    let out = route(&["--nats", "nats://127.0.0.1:1", "--nats-timeout", "0.3"], "1\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no NATS server answered"), "{}", text(&out.stderr));
}

#[test]
fn with_nats_decisions_see_a_peer_replicas_load() {
    let server = nats_server::NatsServer::start();
    // A library replica has worker 0 busy with long prompts.
    let replica = NatsReplica::start(NatsConfig::new(server.url(), "cli", 1)).expect("starts");
    let config = RouterConfig { replica_sync: true, seed: Some(1), ..RouterConfig::new(16) };
    let router =
        KvRouter::builder(config).publisher(1, replica.publisher()).build().expect("router");
    let router = Arc::new(router);
    router.add_worker(Worker::new(0, 0));
    router.add_worker(Worker::new(1, 0));
    replica.attach(router.clone()).expect("attach");
    assert!(replica.wait_connected(Duration::from_secs(10)));
    let long: Vec<u32> = (0..4096).collect();
    for i in 0..8 {
        let id = format!("busy-{i}");
        let request = RouteRequest::tokens(&long).with_id(id.as_str()).pinned(Worker::new(0, 0));
        router.route(&request.update_states(true)).expect("routes");
    }

    // Alone, the CLI would pick worker 0 for the first line (ties break by seed); joined to the
    // replica, it sees worker 0's load and every short request goes to worker 1.
    let input = format!("{}\n{}\n", line(5, 16), line(9, 16));
    let url = server.url();
    let out = route(
        &["--workers", "2", "--nats", &url, "--namespace", "cli", "--router-id", "2"],
        &input,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let chosen: Vec<String> =
        stdout.lines().map(|l| l.split(' ').next().unwrap_or("").to_owned()).collect();
    assert_eq!(chosen, ["1", "1"], "{stdout}");
    assert!(replica.stats().snapshots_served >= 1, "{}", replica.stats());
}

#[test]
fn two_recording_replicas_route_the_same_line_numbers_without_clashing() {
    use std::io::{BufRead, BufReader};
    let server = nats_server::NatsServer::start();
    let url = server.url();
    let args = |id: &'static str| {
        ["--workers", "2", "--record", "--nats", &url, "--namespace", "rec", "--router-id", id]
            .map(str::to_owned)
    };
    // Replica 1 records its line 1 and stays up (its stdin open).
    let mut first = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("route")
        .args(args("1"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvroute runs");
    let mut stdin = first.stdin.take().expect("stdin");
    writeln!(stdin, "{}", line(0, 32)).expect("write stdin");
    let mut decision = String::new();
    BufReader::new(first.stdout.take().expect("stdout"))
        .read_line(&mut decision)
        .expect("first decision");
    assert!(!decision.is_empty(), "replica 1 routed nothing");
    // Replica 2 catches up with replica 1 (its line 1 included), then records its own lines.
    let second = args("2");
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    let out = route(&second, &format!("{}\n{}\n", line(100, 32), line(200, 32)));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 2);
    drop(stdin);
    let status = first.wait().expect("replica 1 exits");
    assert!(status.success());
}
