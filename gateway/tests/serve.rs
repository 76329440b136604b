//! `kvroute serve` end to end on loopback, in front of `kvroute mocker` engines: routing by the
//! engines' own KV events, streams passed through as they come, the router's view of each
//! request kept in step, retries past dead workers, OpenAI errors for bad input, and a warm
//! start from the snapshot.

#![cfg(not(loom))]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kvroute_gateway::mocker::kv_events::KvEventsConfig;
use kvroute_gateway::mocker::{Mocker, MockerConfig};
use kvroute_gateway::serve::workers::WorkerSpec;
use kvroute_gateway::serve::{GatewayServer, ServeConfig};
use serde_json::{Value, json};

const MODEL: &str = "mock-model";

fn tokenizer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/tokenizer")
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

async fn mocker(events: bool, decode_ms: u64) -> Mocker {
    let mut config = MockerConfig::new(MODEL, tokenizer_dir());
    config.engine.decode_time_per_token = Duration::from_millis(decode_ms);
    config.max_model_len = Some(4096);
    if events {
        config.kv_events = KvEventsConfig {
            enable_kv_cache_events: true,
            endpoint: "tcp://127.0.0.1:*".into(),
            replay_endpoint: Some("tcp://127.0.0.1:*".into()),
            ..KvEventsConfig::default()
        };
    }
    Mocker::start(config, loopback()).await.unwrap()
}

fn spec(mocker: &Mocker) -> WorkerSpec {
    let mut spec = WorkerSpec::parse(&mocker.url()).unwrap();
    if let Some((publisher, replay)) = mocker.kv_event_addresses() {
        spec.zmq = Some(publisher.clone());
        spec.replay = replay.clone();
    }
    spec
}

fn serve_config(workers: Vec<WorkerSpec>) -> ServeConfig {
    let mut config = ServeConfig::new(workers, MODEL, tokenizer_dir());
    config.router.overlap_score_weight = 16.0;
    config.router.queued_prefill_weight = Some(1.0);
    config.max_model_len = Some(4096);
    config.max_body_bytes = 1 << 20;
    config.health_interval = Duration::from_millis(200);
    config.first_byte_timeout = Duration::from_secs(10);
    config
}

/// A prompt of ~60 words, distinct per `seed`, sharing its first half with every other seed's
/// of the same `family`.
fn prompt(family: usize, seed: usize) -> String {
    let shared: String = (0..30).map(|i| format!("fam{family}w{i} ")).collect();
    let own: String = (0..30).map(|i| format!("s{seed}x{i} ")).collect();
    shared + &own
}

struct Answer {
    status: u16,
    worker: Option<u64>,
    overlap: Option<u32>,
    attempts: Option<u32>,
    body: Value,
}

async fn complete(url: &str, body: Value) -> Answer {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let header =
        |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()?.parse().ok());
    let (worker, overlap, attempts) = (
        header("x-kvroute-worker"),
        header("x-kvroute-overlap-blocks"),
        header("x-kvroute-attempts"),
    );
    let worker = worker.map(|w: u32| u64::from(w));
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    Answer { status, worker, overlap, attempts, body }
}

/// Waits until no request is in flight in the gateway's router.
async fn settles(server: &GatewayServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let loads = server.gateway().router().potential_loads(&[1, 2, 3]);
        let busy: usize = loads.iter().map(|l| l.active_requests).sum();
        if busy == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "requests still in flight: {loads:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_to_the_engine_holding_the_prefix_by_its_events() {
    let engines = [mocker(true, 1).await, mocker(true, 1).await];
    let server = GatewayServer::start(serve_config(engines.iter().map(spec).collect()), loopback())
        .await
        .unwrap();
    let url = server.url();

    // Two families of prompts; once an engine reports a family's blocks, the family's other
    // prompts follow them there, with the shared half as their overlap.
    let mut home = [None, None];
    for seed in 0..6 {
        for (family, home) in home.iter_mut().enumerate() {
            let answer = complete(
                &url,
                json!({"model": MODEL, "prompt": prompt(family, seed), "max_tokens": 2}),
            )
            .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            assert_eq!(answer.body["usage"]["completion_tokens"], 2);
            if seed == 0 {
                *home = answer.worker;
                // Let the engine's events reach the router before the family's next prompt.
                tokio::time::sleep(Duration::from_millis(300)).await;
            } else {
                assert_eq!(answer.worker, *home, "family {family}, prompt {seed}");
                assert!(answer.overlap.unwrap() >= 4, "overlap {:?}", answer.overlap);
            }
        }
    }
    settles(&server).await;
    let metrics = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("kvroute_gateway_requests_total{outcome=\"ok\"} 12"), "{metrics}");
    assert!(metrics.contains("kvroute_gateway_tokenize_seconds_count 12"), "{metrics}");
    server.stop().await.unwrap();
    for engine in engines {
        engine.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_pass_through_as_they_come_and_a_client_leaving_frees_the_request() {
    let engine = mocker(true, 20).await;
    let server = GatewayServer::start(serve_config(vec![spec(&engine)]), loopback()).await.unwrap();
    let client = reqwest::Client::new();
    let body = json!({"model": MODEL, "stream": true, "max_tokens": 2000,
                      "messages": [{"role": "user", "content": "Tell me everything."}]});
    let mut stream = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let first = stream.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    // The first chunk is here while the engine is still generating (2,000 tokens take 40 s):
    // nothing was buffered whole.
    let metrics =
        client.get(format!("{}/metrics", engine.url())).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("vllm:num_requests_running{model_name=\"mock-model\"} 1"),
        "{metrics}"
    );
    let loads = server.gateway().router().potential_loads(&[1]);
    assert_eq!(loads.iter().map(|l| l.active_requests).sum::<usize>(), 1);

    drop(stream);
    settles(&server).await;
    // The engine's request was cancelled with the connection.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = client
            .get(format!("{}/metrics", engine.url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.contains("vllm:num_requests_running{model_name=\"mock-model\"} 0") {
            break;
        }
        assert!(Instant::now() < deadline, "the engine still runs the abandoned request");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await.unwrap();
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_worker_is_retried_past_then_skipped() {
    let engine = mocker(false, 1).await;
    // A port nobody listens on: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let workers = vec![WorkerSpec::parse(&format!("http://{dead}")).unwrap(), spec(&engine)];
    let mut config = serve_config(workers);
    config.health_interval = Duration::from_secs(3600);
    config.max_failures = 2;
    let server = GatewayServer::start(config, loopback()).await.unwrap();
    // Ties go either way, so the dead worker is tried first about every other time until its
    // second failure; after that it is skipped (50 requests: fewer than 2 tries is ~2^-45).
    let mut retried = 0;
    for seed in 0..50 {
        let answer = complete(
            &server.url(),
            json!({"model": MODEL, "prompt": prompt(seed, seed), "max_tokens": 1}),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.worker, Some(1));
        retried += usize::from(answer.attempts.unwrap() > 1);
    }
    assert_eq!(retried, 2, "requests that went to the dead worker first");
    assert_eq!(
        server
            .gateway()
            .router()
            .potential_loads(&[1])
            .iter()
            .map(|l| l.active_requests)
            .sum::<usize>(),
        0
    );
    server.stop().await.unwrap();
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_openai_errors_and_leaves_nothing_in_flight() {
    let engine = mocker(false, 1).await;
    let server = GatewayServer::start(serve_config(vec![spec(&engine)]), loopback()).await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/v1/completions", server.url());
    // Just over the 1 MiB limit: a body far over it would still be arriving when the server
    // answers 413 and closes, and the unread rest would reset the connection under the answer.
    let huge = format!(r#"{{"model": "mock-model", "prompt": "{}"}}"#, "a".repeat(1 << 20));
    let cases: Vec<(String, u16, &str)> = vec![
        ("{broken".into(), 400, "invalid request body"),
        (r#"{"model": "gpt-9", "prompt": "x"}"#.into(), 404, "does not exist"),
        (
            format!(r#"{{"model": "mock-model", "prompt": "{}"}}"#, "word ".repeat(5000)),
            400,
            "maximum context length",
        ),
        (
            r#"{"model": "mock-model", "prompt": "x", "max_tokens": 9000}"#.into(),
            400,
            "maximum context length",
        ),
        (huge, 413, "length limit"),
    ];
    for (body, status, message) in cases {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], status);
        assert!(error["error"]["message"].as_str().unwrap().contains(message), "{error}");
    }
    let bad_header = client
        .post(&url)
        .header("x-kvroute-overlap-weight", "lots")
        .json(&json!({"model": MODEL, "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_header.status(), 400);
    let stats = server.gateway().router().potential_loads(&[1]);
    assert_eq!(stats.iter().map(|l| l.active_requests).sum::<usize>(), 0, "{stats:?}");
    server.stop().await.unwrap();
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_starts_warm_from_its_snapshot() {
    let engines = [mocker(false, 1).await, mocker(false, 1).await];
    let snapshot =
        std::env::temp_dir().join(format!("kvroute-serve-snapshot-{}.bin", std::process::id()));
    let _ = std::fs::remove_file(&snapshot);
    let config = || {
        let mut config = serve_config(engines.iter().map(spec).collect());
        config.snapshot = Some(snapshot.clone());
        config
    };
    // Approximate mode (no events): what the router knows is only what it routed.
    let server = GatewayServer::start(config(), loopback()).await.unwrap();
    let body = json!({"model": MODEL, "prompt": prompt(9, 9), "max_tokens": 1});
    let first = complete(&server.url(), body.clone()).await;
    assert_eq!((first.status, first.overlap), (200, Some(0)));
    server.stop().await.unwrap();
    assert!(snapshot.exists());

    let server = GatewayServer::start(config(), loopback()).await.unwrap();
    let again = complete(&server.url(), body).await;
    assert_eq!(again.worker, first.worker, "the restarted gateway remembers where the prompt went");
    assert!(again.overlap.unwrap() >= 4, "overlap {:?}", again.overlap);
    server.stop().await.unwrap();
    let _ = std::fs::remove_file(&snapshot);
    for engine in engines {
        engine.stop().await;
    }
}
