//! Forwarding one request: route it, send it to the chosen worker, and pass the answer through
//! chunk by chunk, keeping the router's view of the request in step.
//!
//! The lifecycle in the router: routed → `add_request` (the route call records it); first chunk
//! of the answer → `mark_prefill_completed`; end, upstream error or client gone → `free` (an
//! [`InFlight`] guard, moved into the response body, frees it when dropped — dropping the body
//! also drops the upstream connection, which cancels the request on the engine).
//!
//! A refused connection, a timeout before the answer's head, or a 5xx before anything reached
//! the client sends the request to the next-best worker that has not failed it yet, up to
//! `max_attempts` in all.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use kvroute::router::{RouteError, RouteOverrides, RouteRequest};
use kvroute::{KvRouter, RequestId, WorkerId};

use super::Gateway;
use super::metrics;
use crate::openai::{self, ApiError, CompletionRequest, Endpoint};

/// The headers a client may set to steer its request.
pub mod headers {
    /// Requests naming the same session stay on the worker first chosen for it.
    pub const SESSION: &str = "x-session-id";
    /// Replaces the router's overlap weight for this request.
    pub const OVERLAP_WEIGHT: &str = "x-kvroute-overlap-weight";
    /// Replaces the router's temperature for this request.
    pub const TEMPERATURE: &str = "x-kvroute-temperature";
    /// Answer: the worker chosen.
    pub const WORKER: &str = "x-kvroute-worker";
    /// Answer: its data-parallel rank.
    pub const DP_RANK: &str = "x-kvroute-dp-rank";
    /// Answer: prompt blocks it already held.
    pub const OVERLAP_BLOCKS: &str = "x-kvroute-overlap-blocks";
    /// Answer: full prompt blocks.
    pub const PROMPT_BLOCKS: &str = "x-kvroute-prompt-blocks";
    /// Answer: attempts it took.
    pub const ATTEMPTS: &str = "x-kvroute-attempts";
    /// To the engine: the data-parallel rank to serve it (vLLM's header).
    pub const ENGINE_DP_RANK: &str = "x-data-parallel-rank";
}

/// A request recorded in the router; freed when dropped.
pub struct InFlight {
    router: Arc<KvRouter>,
    gateway: Arc<Gateway>,
    id: RequestId,
    worker: WorkerId,
    prefilled: bool,
}

impl InFlight {
    fn new(gateway: &Arc<Gateway>, id: RequestId, worker: WorkerId) -> Self {
        gateway.metrics.in_flight.get_or_create(&metrics::worker(worker)).inc();
        Self {
            router: Arc::clone(&gateway.router),
            gateway: Arc::clone(gateway),
            id,
            worker,
            prefilled: false,
        }
    }

    /// The first chunk of the answer arrived: its prefill is over.
    fn first_chunk(&mut self) {
        if !std::mem::replace(&mut self.prefilled, true) {
            let _ = self.router.mark_prefill_completed(&self.id);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Unknown only if the router expired it first; nothing is left either way.
        let _ = self.router.free(&self.id);
        self.gateway.metrics.in_flight.get_or_create(&metrics::worker(self.worker)).dec();
    }
}

/// Routes and forwards one completion request.
pub async fn forward(
    gateway: Arc<Gateway>,
    endpoint: Endpoint,
    client_headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = CompletionRequest::parse(&body)?;
    gateway.check_model(&request.model)?;
    let tokenizing = Instant::now();
    let tokens = openai::prompt_tokens(&gateway.tokenizer, endpoint, &request)?;
    gateway.metrics.tokenize_seconds.observe(tokenizing.elapsed().as_secs_f64());
    let output = request.max_completion_tokens.or(request.max_tokens).unwrap_or(0);
    openai::check_context_length(
        tokens.len(),
        usize::try_from(output).unwrap_or(usize::MAX),
        gateway.max_model_len,
    )?;
    let overrides = overrides(&client_headers)?;
    let session = header_text(&client_headers, headers::SESSION)?;

    let mut tried: Vec<WorkerId> = Vec::new();
    let mut last_error = String::from("no attempt made");
    for attempt in 1..=gateway.config.max_attempts {
        let allowed: Vec<WorkerId> =
            gateway.fleet.healthy().into_iter().filter(|id| !tried.contains(id)).collect();
        if allowed.is_empty() {
            break;
        }
        let id = RequestId::from(format!(
            "{}-{}",
            gateway.id_prefix,
            gateway.next_id.fetch_add(1, Ordering::Relaxed)
        ));
        let mut route = RouteRequest::tokens(&tokens)
            .with_id(id.clone())
            .update_states(true)
            .allowed(&allowed)
            .with_overrides(overrides);
        if let Some(session) = session.as_deref() {
            route = route.in_session(session);
        }
        if gateway.config.policy == super::Policy::RoundRobin {
            let turn = gateway.turn.fetch_add(1, Ordering::Relaxed) as usize;
            route = route.pinned(kvroute::Worker::new(allowed[turn % allowed.len()].0, 0));
        }
        let started = Instant::now();
        let decision = match gateway.router.route(&route) {
            Ok(decision) => decision,
            Err(RouteError::BadOverrides(e)) => {
                return Err(ApiError::bad_request(format!("bad routing override: {e}")));
            }
            Err(RouteError::NoWorkers) => break,
            Err(e) => {
                gateway.metrics.outcome("no_worker");
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("routing failed: {e}"),
                ));
            }
        };
        gateway.metrics.route_seconds.observe(started.elapsed().as_secs_f64());
        let worker = decision.worker;
        let guard = InFlight::new(&gateway, id, worker.id);
        let Some(state) = gateway.fleet.get(worker.id) else { break };
        let mut upstream = gateway
            .client
            .post(format!("{}{}", state.spec.url.trim_end_matches('/'), endpoint.path()))
            .header("content-type", "application/json")
            .body(body.clone());
        if let Some(auth) = client_headers.get("authorization") {
            upstream = upstream.header("authorization", auth);
        }
        if state.spec.dp_ranks > 1 {
            upstream = upstream.header(headers::ENGINE_DP_RANK, worker.dp_rank.0.to_string());
        }
        let answer = tokio::time::timeout(gateway.config.first_byte_timeout, upstream.send()).await;
        let failure = match answer {
            Ok(Ok(response)) if !response.status().is_server_error() => {
                gateway.fleet.succeeded(worker.id);
                gateway.metrics.prompt_blocks.inc_by(decision.request_blocks as u64);
                gateway.metrics.overlap_blocks.inc_by(u64::from(decision.overlap_blocks));
                let outcome = if response.status().is_success() { "ok" } else { "client_error" };
                gateway.metrics.outcome(outcome);
                let mut answer = pass_through(response, guard);
                let headers = answer.headers_mut();
                let mut set = |name: &'static str, value: String| {
                    if let Ok(value) = HeaderValue::from_str(&value) {
                        headers.insert(HeaderName::from_static(name), value);
                    }
                };
                set(headers::WORKER, worker.id.0.to_string());
                set(headers::DP_RANK, worker.dp_rank.0.to_string());
                set(headers::OVERLAP_BLOCKS, decision.overlap_blocks.to_string());
                set(headers::PROMPT_BLOCKS, decision.request_blocks.to_string());
                set(headers::ATTEMPTS, attempt.to_string());
                return Ok(answer);
            }
            Ok(Ok(response)) => format!("worker {} answered {}", worker.id.0, response.status()),
            Ok(Err(e)) => format!("worker {}: {e}", worker.id.0),
            Err(_) => format!(
                "worker {}: no answer within {:?}",
                worker.id.0, gateway.config.first_byte_timeout
            ),
        };
        drop(guard);
        log::info!("attempt {attempt} failed: {failure}");
        gateway.fleet.failed(worker.id);
        gateway.metrics.retries.inc();
        tried.push(worker.id);
        last_error = failure;
    }
    if tried.is_empty() {
        gateway.metrics.outcome("no_worker");
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no healthy worker can serve this request",
        ));
    }
    gateway.metrics.outcome("upstream_error");
    Err(ApiError::new(StatusCode::BAD_GATEWAY, format!("every attempt failed; last: {last_error}")))
}

/// The upstream answer as this response: its status and content type, its body streamed as it
/// comes, the first chunk marking the prefill done, the end (or the client leaving) freeing it.
fn pass_through(response: reqwest::Response, mut guard: InFlight) -> Response {
    let status = response.status();
    let content_type = response.headers().get("content-type").cloned();
    let chunks = response.bytes_stream().map(move |chunk| {
        guard.first_chunk();
        chunk
    });
    let mut answer = Response::new(Body::from_stream(chunks));
    *answer.status_mut() = status;
    if let Some(content_type) = content_type {
        answer.headers_mut().insert("content-type", content_type);
    }
    answer
}

fn header_text(headers: &HeaderMap, name: &'static str) -> Result<Option<String>, ApiError> {
    headers
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map(str::to_owned)
                .map_err(|_| ApiError::bad_request(format!("header {name} is not text")))
        })
        .transpose()
}

/// The per-request weights asked for in headers.
fn overrides(headers: &HeaderMap) -> Result<RouteOverrides, ApiError> {
    let number = |name: &'static str| -> Result<Option<f64>, ApiError> {
        header_text(headers, name)?
            .map(|text| {
                text.trim().parse::<f64>().map_err(|_| {
                    ApiError::bad_request(format!("header {name}: {text:?} is not a number"))
                })
            })
            .transpose()
    };
    Ok(RouteOverrides {
        overlap_score_weight: number(headers::OVERLAP_WEIGHT)?,
        temperature: number(headers::TEMPERATURE)?,
    })
}
