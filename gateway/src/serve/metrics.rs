//! The gateway's `/metrics`, in the Prometheus/OpenMetrics text format written by
//! `prometheus-client`: requests by outcome, retries, routing time, the prompt blocks routed and
//! how many the chosen worker held, in-flight requests and health per worker, and the KV event
//! subscriber's counters.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A request's outcome, as labelled.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok`, `client_error`, `upstream_error`, `no_worker`.
    pub outcome: String,
}

/// A worker, as labelled.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabel {
    /// Its id.
    pub worker: String,
}

/// Everything the gateway counts.
pub struct GatewayMetrics {
    registry: Registry,
    /// Requests by outcome.
    pub requests: Family<OutcomeLabel, Counter>,
    /// Attempts that failed and went to the next-best worker.
    pub retries: Counter,
    /// Seconds the chat template and tokenization of one request took.
    pub tokenize_seconds: Histogram,
    /// Seconds one routing decision took.
    pub route_seconds: Histogram,
    /// Full prompt blocks routed.
    pub prompt_blocks: Counter,
    /// Of those, blocks the chosen worker already held.
    pub overlap_blocks: Counter,
    /// Requests in flight per worker.
    pub in_flight: Family<WorkerLabel, Gauge>,
    /// 1 while a worker takes requests.
    pub healthy: Family<WorkerLabel, Gauge>,
    /// Requests in flight per worker in the router's view (gateway replicas' included).
    pub router_requests: Family<WorkerLabel, Gauge>,
    /// KV events applied from the engines' streams.
    pub kv_events: Counter<u64, AtomicU64>,
    /// Gaps in the engines' streams healed from their replay sockets.
    pub kv_gaps_healed: Counter<u64, AtomicU64>,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<OutcomeLabel, Counter>::default();
        registry.register("kvroute_gateway_requests", "Requests by outcome", requests.clone());
        let retries = Counter::default();
        registry.register(
            "kvroute_gateway_retries",
            "Attempts retried on the next-best worker",
            retries.clone(),
        );
        // Tokenization is most of the gateway's own time per request (BENCHMARKS.md, Overhead).
        let tokenize_seconds = Histogram::new(exponential_buckets(1e-5, 2.0, 20));
        registry.register(
            "kvroute_gateway_tokenize_seconds",
            "Time of one request's chat template and tokenization",
            tokenize_seconds.clone(),
        );
        let route_seconds = Histogram::new(exponential_buckets(1e-6, 2.0, 20));
        registry.register(
            "kvroute_gateway_route_seconds",
            "Time of one routing decision",
            route_seconds.clone(),
        );
        let prompt_blocks = Counter::default();
        registry.register(
            "kvroute_gateway_prompt_blocks",
            "Full prompt blocks routed",
            prompt_blocks.clone(),
        );
        let overlap_blocks = Counter::default();
        registry.register(
            "kvroute_gateway_overlap_blocks",
            "Prompt blocks the chosen worker already held",
            overlap_blocks.clone(),
        );
        let in_flight = Family::<WorkerLabel, Gauge>::default();
        registry.register(
            "kvroute_gateway_in_flight",
            "Requests in flight per worker",
            in_flight.clone(),
        );
        let healthy = Family::<WorkerLabel, Gauge>::default();
        registry.register(
            "kvroute_gateway_worker_healthy",
            "1 while a worker takes requests",
            healthy.clone(),
        );
        let router_requests = Family::<WorkerLabel, Gauge>::default();
        registry.register(
            "kvroute_gateway_router_requests",
            "Requests in flight per worker as the router sees them, replicas' included",
            router_requests.clone(),
        );
        let kv_events = Counter::<u64, AtomicU64>::default();
        registry.register("kvroute_gateway_kv_events", "KV events applied", kv_events.clone());
        let kv_gaps_healed = Counter::<u64, AtomicU64>::default();
        registry.register(
            "kvroute_gateway_kv_gaps_healed",
            "Gaps in KV event streams healed by replay",
            kv_gaps_healed.clone(),
        );
        Self {
            registry,
            requests,
            retries,
            tokenize_seconds,
            route_seconds,
            prompt_blocks,
            overlap_blocks,
            in_flight,
            healthy,
            router_requests,
            kv_events,
            kv_gaps_healed,
        }
    }
}

impl GatewayMetrics {
    /// Counts one request's outcome.
    pub fn outcome(&self, outcome: &str) {
        self.requests.get_or_create(&OutcomeLabel { outcome: outcome.to_owned() }).inc();
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// The content type of [`GatewayMetrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A worker's label.
pub fn worker(id: kvroute::WorkerId) -> WorkerLabel {
    WorkerLabel { worker: id.0.to_string() }
}
