//! Two probes beside the trace replay: a gateway's added latency (TTFT through it against the
//! same request sent straight to the engine, interleaved), and the most requests per second it
//! sustains (closed loop, short prompts, one output token).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;

use super::report::{Percentiles, percentiles};
use crate::tokenize::Tokenizer;

/// A short chat prompt, distinct per `i` (so no engine cache makes one path faster).
pub fn short_prompt(i: usize, words: usize) -> String {
    (0..words).map(|w| format!(" probe{i} w{w}")).collect()
}

/// Time to the first streamed chunk of a chat request for `prompt`.
async fn ttft(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    prompt: &str,
) -> Result<f64, String> {
    let body = json!({
        "model": model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 1, "stream": true,
    });
    let started = Instant::now();
    let url = format!("{}/v1/chat/completions", base.trim_end_matches('/'));
    let response = client.post(url).json(&body).send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let mut stream = response.bytes_stream();
    let first = stream.next().await.ok_or("empty answer")?.map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_secs_f64();
    drop(first);
    while let Some(chunk) = stream.next().await {
        chunk.map_err(|e| e.to_string())?;
    }
    Ok(elapsed)
}

/// What [`overhead`] measured, in seconds.
#[derive(Clone, Debug)]
pub struct Overhead {
    /// TTFT through the gateway minus TTFT straight to the engine, per pair.
    pub added: Percentiles,
    /// TTFT through the gateway.
    pub through: Percentiles,
    /// TTFT straight to the engine.
    pub direct: Percentiles,
    /// The chat template and tokenization alone, in this process, for the same prompts.
    pub tokenize: Percentiles,
}

/// `pairs` pairs of one request through `gateway` and one to `engine`, alternating which goes
/// first, each with its own short prompt of `words` × 2 tokens or so.
pub async fn overhead(
    gateway: &str,
    engine: &str,
    model: &str,
    tokenizer: &Tokenizer,
    pairs: usize,
    words: usize,
) -> Result<Overhead, String> {
    let client = reqwest::Client::new();
    let (mut added, mut through, mut direct, mut tokenize) = (vec![], vec![], vec![], vec![]);
    // Warm both paths' connections first.
    for i in 0..10 {
        ttft(&client, gateway, model, &short_prompt(1_000_000 + i, words)).await?;
        ttft(&client, engine, model, &short_prompt(2_000_000 + i, words)).await?;
    }
    for i in 0..pairs {
        let (a, b) = (short_prompt(2 * i, words), short_prompt(2 * i + 1, words));
        let (g, d) = if i % 2 == 0 {
            (ttft(&client, gateway, model, &a).await?, ttft(&client, engine, model, &b).await?)
        } else {
            let d = ttft(&client, engine, model, &b).await?;
            (ttft(&client, gateway, model, &a).await?, d)
        };
        added.push(g - d);
        through.push(g);
        direct.push(d);
        let messages = json!([{"role": "user", "content": a}]);
        let started = Instant::now();
        let text = tokenizer.apply_chat_template(&messages, true).map_err(|e| e.to_string())?;
        tokenizer.encode(&text, false).map_err(|e| e.to_string())?;
        tokenize.push(started.elapsed().as_secs_f64());
    }
    Ok(Overhead {
        added: percentiles(added),
        through: percentiles(through),
        direct: percentiles(direct),
        tokenize: percentiles(tokenize),
    })
}

/// What one [`throughput`] step measured.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Requests answered per second.
    pub requests_per_s: f64,
    /// Share of requests that failed.
    pub error_rate: f64,
}

/// `concurrency` clients sending short non-streamed chats (one output token) to `url` back to
/// back for `seconds`.
pub async fn throughput(
    url: &str,
    model: &str,
    concurrency: usize,
    seconds: f64,
    words: usize,
) -> Throughput {
    let client =
        reqwest::Client::builder().pool_max_idle_per_host(concurrency).build().unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let url = format!("{}/v1/chat/completions", url.trim_end_matches('/'));
    let mut tasks = Vec::new();
    for c in 0..concurrency {
        let (client, stop, ok, failed, url, model) = (
            client.clone(),
            stop.clone(),
            ok.clone(),
            failed.clone(),
            url.clone(),
            model.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let body = json!({
                    "model": model, "max_tokens": 1,
                    "messages": [{"role": "user", "content": short_prompt(c * 1_000_000 + i, words)}],
                });
                i += 1;
                let answer = client.post(&url).json(&body).timeout(Duration::from_secs(10)).send().await;
                let good = match answer {
                    Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
                    _ => false,
                };
                if good { &ok } else { &failed }.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let (done, bad) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    for task in tasks {
        let _ = task.await;
    }
    Throughput {
        concurrency,
        requests_per_s: done as f64 / elapsed,
        error_rate: bad as f64 / (done + bad).max(1) as f64,
    }
}
