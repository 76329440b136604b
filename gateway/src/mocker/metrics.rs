//! The mock engine's `/metrics`: vLLM's metric names (`vllm:num_requests_running`,
//! `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, `vllm:prefix_cache_queries_total`,
//! `vllm:prefix_cache_hits_total`, token counters), labelled with `model_name`, in the
//! Prometheus/OpenMetrics text format written by `prometheus-client`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The counters and gauges one mock engine exposes.
pub struct EngineMetrics {
    registry: Registry,
    running: Gauge,
    waiting: Gauge,
    kv_usage: Gauge<f64, AtomicU64>,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_cache_queries: Counter,
    /// Of those, tokens found cached.
    pub prefix_cache_hits: Counter,
    /// Prompt tokens received.
    pub prompt_tokens: Counter,
    /// Tokens generated.
    pub generation_tokens: Counter,
}

impl EngineMetrics {
    /// Registers every metric, labelled `model_name=model`.
    pub fn new(model: &str) -> Self {
        let labels = [("model_name".into(), model.to_owned().into())];
        let mut registry = Registry::with_labels(labels.into_iter());
        let (running, waiting) = (Gauge::default(), Gauge::default());
        let kv_usage = Gauge::<f64, AtomicU64>::default();
        let (queries, hits) = (Counter::default(), Counter::default());
        let (prompt, generation) = (Counter::default(), Counter::default());
        registry.register(
            "vllm:num_requests_running",
            "Number of requests in model execution batches",
            running.clone(),
        );
        registry.register(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed",
            waiting.clone(),
        );
        registry.register(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage",
            kv_usage.clone(),
        );
        registry.register(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens",
            queries.clone(),
        );
        registry.register(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens",
            hits.clone(),
        );
        registry.register(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed",
            prompt.clone(),
        );
        registry.register(
            "vllm:generation_tokens",
            "Number of generation tokens processed",
            generation.clone(),
        );
        Self {
            registry,
            running,
            waiting,
            kv_usage,
            prefix_cache_queries: queries,
            prefix_cache_hits: hits,
            prompt_tokens: prompt,
            generation_tokens: generation,
        }
    }

    /// Sets the load gauges.
    pub fn set_load(&self, running: usize, waiting: usize, kv_usage: f64) {
        self.running.set(running as i64);
        self.waiting.set(waiting as i64);
        self.kv_usage.set(kv_usage);
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// The content type of [`EngineMetrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
