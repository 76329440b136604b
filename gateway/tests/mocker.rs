//! `kvroute mocker` end to end on loopback: its HTTP answers, its errors, its metrics, and its KV
//! events read by kvroute's own ZMQ subscriber into a router that then finds the prompt's blocks.

#![cfg(not(loom))]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
use kvroute::wire::zmq::{SubscriberConfig, ZmqEndpoint, ZmqSubscriber};
use kvroute::{Worker, WorkerId};
use kvroute_gateway::mocker::kv_events::KvEventsConfig;
use kvroute_gateway::mocker::{Mocker, MockerConfig};
use kvroute_gateway::tokenize::Tokenizer;
use serde_json::{Value, json};

const MODEL: &str = "mock-model";

fn tokenizer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/tokenizer")
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn config(events: bool) -> MockerConfig {
    let mut config = MockerConfig::new(MODEL, tokenizer_dir());
    config.speedup = 50.0;
    config.max_model_len = Some(4096);
    config.max_body_bytes = 1 << 20;
    if events {
        config.kv_events = KvEventsConfig {
            enable_kv_cache_events: true,
            endpoint: "tcp://127.0.0.1:*".into(),
            replay_endpoint: Some("tcp://127.0.0.1:*".into()),
            ..KvEventsConfig::default()
        };
    }
    config
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new().post(url).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn long_prompt(seed: usize) -> String {
    (0..60).map(|i| format!("word{} ", (i * 7 + seed) % 97)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_vllm_does_and_its_events_feed_a_router() {
    let mocker = Mocker::start(config(true), loopback()).await.unwrap();
    let url = mocker.url();
    let (publisher, replay) = mocker.kv_event_addresses().cloned().unwrap();

    let router = Arc::new(KvRouter::new(RouterConfig::new(16)).unwrap());
    let worker = Worker::new(7, 0);
    router.add_worker(worker);
    let endpoint = ZmqEndpoint::new(WorkerId(7), publisher).with_replay(replay.unwrap());
    let subscriber = ZmqSubscriber::start(
        SubscriberConfig { endpoints: vec![endpoint], ..SubscriberConfig::default() },
        Arc::clone(&router),
    )
    .unwrap();
    // A PUB drops what it sends before the subscriber is connected: the first batch is then a
    // gap the subscriber fills from the replay socket, so either way it arrives.

    let client = reqwest::Client::new();
    assert_eq!(client.get(format!("{url}/health")).send().await.unwrap().status(), 200);
    let models: Value =
        client.get(format!("{url}/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);

    let prompt = long_prompt(1);
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 7});
    let (status, answer) = post(&format!("{url}/v1/completions"), &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["usage"]["completion_tokens"], 7);
    let tokenizer = Tokenizer::from_dir(tokenizer_dir()).unwrap();
    let tokens = tokenizer.encode(&prompt, true).unwrap();
    assert_eq!(answer["usage"]["prompt_tokens"], tokens.len());
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert_eq!(tokenizer.encode(text, false).unwrap().len(), 7, "{text:?}");

    // /tokenize agrees with the tokenizer.
    let (status, tokenized) =
        post(&format!("{url}/tokenize"), &json!({"model": MODEL, "prompt": prompt})).await;
    assert_eq!(status, 200);
    assert_eq!(tokenized["tokens"], json!(tokens));
    let (_, detokenized) =
        post(&format!("{url}/detokenize"), &json!({"model": MODEL, "tokens": tokens})).await;
    assert_eq!(detokenized["prompt"], prompt);

    // The router learns the prompt's full blocks from the engine's events.
    let blocks = tokens.len() / 16;
    assert!(blocks >= 4, "the prompt fills {blocks} blocks");
    let deadline = Instant::now() + Duration::from_secs(10);
    let overlap = loop {
        router.flush().unwrap();
        let decision = router.route(&RouteRequest::tokens(&tokens)).unwrap();
        if decision.overlap_blocks as usize == blocks || Instant::now() > deadline {
            break decision.overlap_blocks as usize;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(overlap, blocks, "blocks the router found on the mock engine");

    // Sending it again hits the engine's prefix cache, in vLLM's metric names.
    let (status, _) = post(&format!("{url}/v1/completions"), &body).await;
    assert_eq!(status, 200);
    let metrics = client.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    let value = |name: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("vllm:prefix_cache_queries_total"), 2.0 * tokens.len() as f64);
    assert_eq!(value("vllm:prefix_cache_hits_total"), (blocks * 16) as f64);
    assert_eq!(value("vllm:num_requests_running"), 0.0);
    assert_eq!(value("vllm:generation_tokens_total"), 14.0);
    subscriber.shutdown();
    mocker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_chunk_by_chunk_and_frees_the_engine_when_the_client_leaves() {
    let mut config = config(false);
    config.engine.max_batch = 1;
    config.speedup = 1.0;
    config.engine.decode_time_per_token = Duration::from_millis(20);
    let mocker = Mocker::start(config, loopback()).await.unwrap();
    let url = mocker.url();
    let chat = |max_tokens: u64| {
        json!({
            "model": MODEL, "stream": true, "max_tokens": max_tokens,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "Tell me a story."}],
        })
    };
    let client = reqwest::Client::new();
    let response =
        client.post(format!("{url}/v1/chat/completions")).json(&chat(5)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let events: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(events.len(), 5 + 1 + 1 + 1, "tokens, finish, usage, [DONE]: {body}");
    let first: Value = serde_json::from_str(events[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let usage: Value = serde_json::from_str(events[6]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(events[7], "[DONE]");

    // A long stream, dropped after its first chunk: the one batch slot must come back, or the
    // next request would wait for 10,000 tokens (200 s).
    let mut long =
        client.post(format!("{url}/v1/chat/completions")).json(&chat(10_000)).send().await.unwrap();
    assert!(long.chunk().await.unwrap().is_some());
    drop(long);
    let (next_url, next_body) = (
        format!("{url}/v1/completions"),
        json!({"model": MODEL, "prompt": "hello", "max_tokens": 2}),
    );
    let next = post(&next_url, &next_body);
    let (status, _) = tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .expect("the abandoned stream still holds the engine's one batch slot");
    assert_eq!(status, 200);
    mocker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_with_their_status() {
    let mocker = Mocker::start(config(false), loopback()).await.unwrap();
    let url = format!("{}/v1/completions", mocker.url());
    let client = reqwest::Client::new();
    let send = |body: Vec<u8>| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let response = client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "invalid request body"),
        (br#"{"model": "other", "prompt": "x"}"#.to_vec(), 404, "does not exist"),
        (br#"{"model": "mock-model"}"#.to_vec(), 400, "needs a prompt"),
        (br#"{"model": "mock-model", "prompt": [1, 99999999]}"#.to_vec(), 400, "out of vocabulary"),
        (br#"{"model": "mock-model", "prompt": "x", "max_tokens": 0}"#.to_vec(), 400, "at least 1"),
        (
            br#"{"model": "mock-model", "prompt": "x", "max_tokens": 5000}"#.to_vec(),
            400,
            "maximum context length",
        ),
    ];
    for (body, status, message) in cases {
        let (got, text) = send(body).await;
        assert_eq!(got, status, "{text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(error["error"]["message"].as_str().unwrap().contains(message), "{text}");
        assert_eq!(error["error"]["code"], status);
    }
    // Over the body limit (1 MiB here).
    let huge = format!(r#"{{"model": "mock-model", "prompt": "{}"}}"#, "a".repeat(2 << 20));
    let (status, _) = send(huge.into_bytes()).await;
    assert_eq!(status, 413);
    // It still serves.
    let (status, _) =
        send(br#"{"model": "mock-model", "prompt": "still here", "max_tokens": 1}"#.to_vec()).await;
    assert_eq!(status, 200);
    mocker.stop().await;
}
