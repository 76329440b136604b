//! `kvroute bench`: a Mooncake-format trace replayed over HTTP against any OpenAI-compatible
//! endpoint (kvroute's gateway, another gateway, one engine).
//!
//! Arrivals are open-loop, at the trace's timestamps divided by `speedup`; every request
//! streams. Prompts are synthesized from `hash_ids` ([`prompts`]). The report gives TTFT, ITL
//! and end-to-end latency percentiles, throughput, errors and, from the engines' own `/metrics`
//! (vLLM's prefix-cache counters), the fleet's prefix-cache hit rate over the run.

pub mod probes;
pub mod prompts;
pub mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kvroute::sim::trace::load_trace;
use serde_json::{Value, json};

use crate::openai::Endpoint;
use crate::tokenize::Tokenizer;
use prompts::PromptSynth;
pub use report::{BenchReport, Sample};

/// What to replay, against what.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The endpoint's base URL (`http://host:port`; `/v1/...` is appended).
    pub url: String,
    /// The model name sent.
    pub model: String,
    /// The trace (Mooncake JSONL).
    pub trace: PathBuf,
    /// The tokenizer the prompts are made for.
    pub tokenizer: PathBuf,
    /// Arrivals this many times faster than the trace's timestamps.
    pub speedup: f64,
    /// Replay only the first requests.
    pub limit: Option<usize>,
    /// Cap on each request's output tokens.
    pub max_output: Option<u32>,
    /// Engines whose `/metrics` give the fleet's prefix-cache hit rate.
    pub engines: Vec<String>,
    /// Chat (default) or completions.
    pub endpoint: Endpoint,
    /// How long one request may take before it counts as an error.
    pub timeout: Duration,
}

impl BenchConfig {
    /// A replay of `trace` against `url` with the defaults (chat, speed-up 1, 10 min timeout).
    pub fn new(
        url: impl Into<String>,
        model: impl Into<String>,
        trace: impl Into<PathBuf>,
        tokenizer: impl Into<PathBuf>,
    ) -> Self {
        Self {
            url: url.into(),
            model: model.into(),
            trace: trace.into(),
            tokenizer: tokenizer.into(),
            speedup: 1.0,
            limit: None,
            max_output: None,
            engines: Vec::new(),
            endpoint: Endpoint::Chat,
            timeout: Duration::from_secs(600),
        }
    }
}

/// Replays the trace; `progress` is called with the number of requests finished so far.
pub async fn run(
    config: &BenchConfig,
    progress: impl Fn(usize, usize) + Send + Sync + 'static,
) -> Result<BenchReport, String> {
    if !(config.speedup.is_finite() && config.speedup > 0.0) {
        return Err(format!("speed-up {} must be > 0", config.speedup));
    }
    let mut trace = load_trace(&config.trace).map_err(|e| e.to_string())?;
    if let Some(limit) = config.limit {
        trace.truncate(limit);
    }
    if trace.is_empty() {
        return Err("the trace has no requests".into());
    }
    let tokenizer = Tokenizer::from_dir(&config.tokenizer).map_err(|e| e.to_string())?;
    let mut synth = PromptSynth::new(&tokenizer).map_err(|e| e.to_string())?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .map_err(|e| e.to_string())?;
    let before = prefix_cache_counters(&client, &config.engines).await?;

    let total = trace.len();
    let progress = Arc::new(progress);
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let first_ts = trace[0].timestamp;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for request in &trace {
        let at =
            Duration::from_secs_f64((request.timestamp - first_ts) as f64 / 1e3 / config.speedup);
        let text = synth.prompt(&request.hash_ids, request.input_length as usize);
        let output = config
            .max_output
            .map_or(request.output_length, |cap| request.output_length.min(cap))
            .max(1);
        let body = match config.endpoint {
            Endpoint::Chat => json!({
                "model": config.model, "messages": [{"role": "user", "content": text}],
                "max_tokens": output, "stream": true, "ignore_eos": true,
            }),
            Endpoint::Completions => json!({
                "model": config.model, "prompt": text, "max_tokens": output, "stream": true,
                "ignore_eos": true,
            }),
        };
        let url = format!("{}{}", config.url.trim_end_matches('/'), config.endpoint.path());
        let (client, progress, done) = (client.clone(), Arc::clone(&progress), Arc::clone(&done));
        let timeout = config.timeout;
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until((start + at).into()).await;
            let sample = one_request(&client, &url, body, start, timeout).await;
            let finished = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(finished, total);
            sample
        }));
    }
    let mut samples = Vec::with_capacity(total);
    for task in tasks {
        samples.push(task.await.map_err(|e| e.to_string())?);
    }
    let wall = start.elapsed();
    let after = prefix_cache_counters(&client, &config.engines).await?;
    let hit_rate = match (before, after) {
        (Some((q0, h0)), Some((q1, h1))) if q1 > q0 => Some((h1 - h0) / (q1 - q0)),
        _ => None,
    };
    Ok(BenchReport::new(samples, wall, config.speedup, hit_rate))
}

/// One streamed request: when its first and last tokens came, how many, or its error.
async fn one_request(
    client: &reqwest::Client,
    url: &str,
    body: Value,
    start: Instant,
    timeout: Duration,
) -> Sample {
    let sent = Instant::now();
    let mut sample = Sample { sent: sent - start, ..Sample::default() };
    let outcome = tokio::time::timeout(timeout, async {
        let response = client.post(url).json(&body).send().await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("status {}", response.status()));
        }
        let mut stream = response.bytes_stream();
        let mut buffer = Vec::new();
        while let Some(chunk) = stream.next().await {
            buffer.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
            while let Some(end) = find(&buffer, b"\n\n") {
                let event: Vec<u8> = buffer.drain(..end + 2).collect();
                let tokens = tokens_in(&event[..end]);
                if tokens > 0 {
                    let now = sent.elapsed();
                    sample.ttft.get_or_insert(now);
                    sample.last_token = Some(now);
                    sample.tokens += tokens;
                }
            }
        }
        Ok(())
    })
    .await;
    sample.error = match outcome {
        Ok(Ok(())) if sample.tokens > 0 => None,
        Ok(Ok(())) => Some("no tokens".into()),
        Ok(Err(e)) => Some(e),
        Err(_) => Some("timed out".into()),
    };
    sample
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Tokens one SSE event carries: one per chunk with text (the engines stream a token a chunk).
fn tokens_in(event: &[u8]) -> usize {
    let Some(data) = event.strip_prefix(b"data: ") else { return 0 };
    let Ok(chunk) = serde_json::from_slice::<Value>(data) else { return 0 };
    let choice = &chunk["choices"][0];
    let text = choice["delta"]["content"].as_str().or(choice["text"].as_str()).unwrap_or("");
    usize::from(!text.is_empty())
}

/// The engines' summed `vllm:prefix_cache_queries_total` and `..._hits_total`; `None` without
/// engines.
async fn prefix_cache_counters(
    client: &reqwest::Client,
    engines: &[String],
) -> Result<Option<(f64, f64)>, String> {
    if engines.is_empty() {
        return Ok(None);
    }
    let (mut queries, mut hits) = (0.0, 0.0);
    for engine in engines {
        let url = format!("{}/metrics", engine.trim_end_matches('/'));
        let text = client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        for line in text.lines() {
            let value =
                || line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            if line.starts_with("vllm:prefix_cache_queries_total") {
                queries += value();
            } else if line.starts_with("vllm:prefix_cache_hits_total") {
                hits += value();
            }
        }
    }
    Ok(Some((queries, hits)))
}
