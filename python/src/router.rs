//! `KvRouter`: the router, with its configuration as keyword arguments (each left out keeps
//! the Rust default of `RouterConfig::new(block_size)`), and `RouteDecision`.
//!
//! Calls that can wait or take more than a few µs (`route`, `add_request`, `potential_loads`,
//! `apply_event`, `flush`, worker changes, recovery, snapshots) run with the GIL released, so Python
//! threads calling them at once run in parallel as the Rust calls do.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use kvroute::recovery::RecoveryConfig;
use kvroute::router::{RouteInput, RouteOverrides, WorkerRole};
use kvroute::{KvRouter, RequestId, RouteDecision, RouteRequest, RouterConfig, Worker, WorkerId};

use crate::errors;
use crate::events::{event_arg, tier_name, worker_arg};
use crate::nats::PyNatsReplica;
use crate::recovery::PySource;
use crate::tokens::{Tokens, tokens as read, with_tokens};

/// `route` releases the GIL for prompts of this many tokens or more (about 2 µs of Rust work
/// with 16 workers): shorter ones are not worth the release and retake.
const RELEASE_GIL_TOKENS: usize = 1024;

/// A duration argument in seconds.
fn secs(field: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        errors::ConfigError::new_err(format!(
            "{field} must be a finite number of seconds >= 0, not {value:?}"
        ))
    })
}

/// A role argument: "prefill", "decode" or "both".
fn role_arg(role: &str) -> PyResult<WorkerRole> {
    match role {
        "prefill" => Ok(WorkerRole::Prefill),
        "decode" => Ok(WorkerRole::Decode),
        "both" => Ok(WorkerRole::Both),
        other => Err(errors::ConfigError::new_err(format!(
            "unknown worker role {other:?} (expected prefill, decode or both)"
        ))),
    }
}

fn ids(requests: Vec<RequestId>) -> Vec<String> {
    requests.iter().map(|id| id.as_str().to_owned()).collect()
}

/// Where a request should go (immutable).
#[pyclass(name = "RouteDecision", module = "kvroute", frozen, freelist = 64)]
pub struct PyRouteDecision {
    /// The chosen worker's id.
    #[pyo3(get)]
    worker_id: u64,
    /// The chosen worker's data-parallel rank.
    #[pyo3(get)]
    dp_rank: u32,
    /// Leading blocks of the prompt the chosen worker holds.
    #[pyo3(get)]
    overlap_blocks: u32,
    /// The prompt's full blocks.
    #[pyo3(get)]
    request_blocks: usize,
    /// With disaggregated serving, the decode worker as `(id, dp_rank)`.
    #[pyo3(get)]
    decode_worker: Option<(u64, u32)>,
    /// Whether the request's session chose the worker.
    #[pyo3(get)]
    session_hit: bool,
}

impl From<RouteDecision> for PyRouteDecision {
    fn from(d: RouteDecision) -> Self {
        Self {
            worker_id: d.worker.id.0,
            dp_rank: d.worker.dp_rank.0,
            overlap_blocks: d.overlap_blocks,
            request_blocks: d.request_blocks,
            decode_worker: d.decode_worker.map(|w| (w.id.0, w.dp_rank.0)),
            session_hit: d.session_hit,
        }
    }
}

#[pymethods]
impl PyRouteDecision {
    /// The chosen worker as `(id, dp_rank)`.
    #[getter]
    fn worker(&self) -> (u64, u32) {
        (self.worker_id, self.dp_rank)
    }

    fn __repr__(&self) -> String {
        format!(
            "RouteDecision(worker_id={}, dp_rank={}, overlap_blocks={}, request_blocks={}, decode_worker={:?}, session_hit={})",
            self.worker_id,
            self.dp_rank,
            self.overlap_blocks,
            self.request_blocks,
            self.decode_worker,
            if self.session_hit { "True" } else { "False" }
        )
    }
}

/// The KV-cache-aware router: which worker should serve a request, from its prompt's tokens.
#[pyclass(name = "KvRouter", module = "kvroute", frozen)]
pub struct PyKvRouter {
    pub(crate) inner: Arc<KvRouter>,
}

#[pymethods]
impl PyKvRouter {
    /// A router for engines with `block_size`-token KV blocks. Every other setting left out
    /// keeps the Rust default (see the stubs). `replica` joins router replicas over NATS.
    #[new]
    #[pyo3(signature = (
        block_size, *, overlap_score_weight=None, queued_prefill_weight=None, temperature=None,
        use_kv_events=None, host_hit_weight=None, disk_hit_weight=None, external_hit_weight=None,
        track_active_blocks=None, expiry=None, approx_ttl=None, approx_max_blocks=None,
        approx_lag=None,
        session_idle_ttl=None, session_load_bound=None, index_lanes=None, recovery=false,
        seed=None, replica=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        block_size: u32,
        overlap_score_weight: Option<f64>,
        queued_prefill_weight: Option<f64>,
        temperature: Option<f64>,
        use_kv_events: Option<bool>,
        host_hit_weight: Option<f64>,
        disk_hit_weight: Option<f64>,
        external_hit_weight: Option<f64>,
        track_active_blocks: Option<bool>,
        expiry: Option<f64>,
        approx_ttl: Option<f64>,
        approx_max_blocks: Option<usize>,
        approx_lag: Option<f64>,
        session_idle_ttl: Option<f64>,
        session_load_bound: Option<f64>,
        index_lanes: Option<usize>,
        recovery: bool,
        seed: Option<u64>,
        replica: Option<PyRef<'_, PyNatsReplica>>,
    ) -> PyResult<Self> {
        let mut config = RouterConfig::new(block_size);
        if let Some(v) = overlap_score_weight {
            config.overlap_score_weight = v;
        }
        config.queued_prefill_weight = queued_prefill_weight.or(config.queued_prefill_weight);
        if let Some(v) = temperature {
            config.temperature = v;
        }
        if let Some(v) = use_kv_events {
            config.use_kv_events = v;
        }
        if let Some(v) = host_hit_weight {
            config.host_hit_weight = v;
        }
        if let Some(v) = disk_hit_weight {
            config.disk_hit_weight = v;
        }
        if let Some(v) = external_hit_weight {
            config.external_hit_weight = v;
        }
        if let Some(v) = track_active_blocks {
            config.track_active_blocks = v;
        }
        if let Some(v) = expiry {
            // 0 turns expiry off.
            config.expiry = if v == 0.0 { None } else { Some(secs("expiry", v)?) };
        }
        if let Some(v) = approx_ttl {
            config.approximate.ttl = secs("approx_ttl", v)?;
        }
        if let Some(v) = approx_max_blocks {
            config.approximate.max_blocks = v;
        }
        if let Some(v) = approx_lag {
            config.approximate.lag = secs("approx_lag", v)?;
        }
        if let Some(v) = session_idle_ttl {
            config.sessions.idle_ttl = secs("session_idle_ttl", v)?;
        }
        if let Some(v) = session_load_bound {
            config.sessions.load_bound = v;
        }
        if let Some(v) = index_lanes {
            config.device_index.lanes = v;
        }
        if recovery {
            config.recovery = Some(RecoveryConfig::default());
        }
        config.seed = seed.or(config.seed);
        let mut builder = None;
        if let Some(replica) = &replica {
            config.replica_sync = true;
            let inner = &replica.inner;
            builder = Some(
                KvRouter::builder(config.clone()).publisher(inner.router_id(), inner.publisher()),
            );
        }
        let router = py
            .allow_threads(move || match builder {
                Some(builder) => builder.build(),
                None => KvRouter::new(config),
            })
            .map_err(errors::config)?;
        let router = Arc::new(router);
        if let Some(replica) = &replica {
            replica.inner.attach(Arc::clone(&router)).map_err(errors::nats)?;
        }
        Ok(Self { inner: router })
    }

    /// The KV block size in tokens.
    #[getter]
    fn block_size(&self) -> u32 {
        self.inner.config().block_size
    }

    /// Registers worker `worker_id` (rank `dp_rank`) with `role` ("both", "prefill" or
    /// "decode"). Returns the ids of requests a role change dropped.
    #[pyo3(signature = (worker_id, dp_rank=0, role="both"))]
    fn add_worker(
        &self,
        py: Python<'_>,
        worker_id: u64,
        dp_rank: u32,
        role: &str,
    ) -> PyResult<Vec<String>> {
        let role = role_arg(role)?;
        let router = &self.inner;
        Ok(ids(
            py.allow_threads(|| router.add_worker_with_role(Worker::new(worker_id, dp_rank), role))
        ))
    }

    /// Removes worker `worker_id` (every rank): its cache leaves the index and its requests
    /// the load tracker. Returns the ids of the requests it had.
    fn remove_worker(&self, py: Python<'_>, worker_id: u64) -> PyResult<Vec<String>> {
        let router = &self.inner;
        let removed = py.allow_threads(|| router.remove_worker(WorkerId(worker_id)));
        Ok(ids(removed.map_err(errors::lane_down)?))
    }

    /// The registered workers as `(id, dp_rank, role)`.
    fn workers(&self) -> Vec<(u64, u32, &'static str)> {
        self.inner
            .workers()
            .into_iter()
            .map(|(w, role)| {
                let role = match role {
                    WorkerRole::Prefill => "prefill",
                    WorkerRole::Decode => "decode",
                    WorkerRole::Both => "both",
                };
                (w.id.0, w.dp_rank.0, role)
            })
            .collect()
    }

    /// Chooses the worker for a prompt of `tokens` (a uint32 buffer, or a list of ints).
    ///
    /// With `request_id`, the request is recorded as in flight on the chosen worker (unless
    /// `update_states=False`); free it with `free(request_id)`.
    ///
    /// Buffers are read in place. Prompts of 1024 tokens or more are routed with the GIL
    /// released (a mutable buffer's blocks hashed before; `bytes` are immutable).
    #[pyo3(signature = (
        tokens, *, request_id=None, update_states=None, lora_name=None, cache_namespace=None,
        allowed_workers=None, pinned_worker=None, session_id=None, overlap_score_weight=None,
        temperature=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn route(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        request_id: Option<&str>,
        update_states: Option<bool>,
        lora_name: Option<&str>,
        cache_namespace: Option<&str>,
        allowed_workers: Option<Vec<u64>>,
        pinned_worker: Option<&Bound<'_, PyAny>>,
        session_id: Option<&str>,
        overlap_score_weight: Option<f64>,
        temperature: Option<f64>,
    ) -> PyResult<PyRouteDecision> {
        let allowed: Option<Vec<WorkerId>> =
            allowed_workers.map(|w| w.into_iter().map(WorkerId).collect());
        let pinned = pinned_worker.map(worker_arg).transpose()?;
        let router = &self.inner;
        let decision = with_tokens(tokens, |tokens| {
            let route = |input: RouteInput<'_>| {
                let mut request = RouteRequest::tokens(&[]);
                request.input = Some(input);
                request.lora_name = lora_name;
                request.cache_namespace = cache_namespace;
                request.allowed_workers = allowed.as_deref();
                request.pinned_worker = pinned;
                request.session_id = session_id;
                request.overrides = RouteOverrides { overlap_score_weight, temperature };
                if let Some(id) = request_id {
                    request.request_id = Some(RequestId::from(id));
                }
                request.update_states = update_states.unwrap_or(request_id.is_some());
                router.route(&request)
            };
            Ok(match tokens {
                // Small prompts route in less time than releasing and retaking the GIL costs.
                t if t.as_slice().len() < RELEASE_GIL_TOKENS => {
                    route(RouteInput::Tokens(t.as_slice()))
                }
                // Another thread may write to a mutable buffer once the GIL is released: its
                // blocks are hashed first (cheaper than a copy of its tokens, hashed anyway).
                Tokens::Borrowed(t) => {
                    let mut salts = RouteRequest::tokens(&[]);
                    (salts.lora_name, salts.cache_namespace) = (lora_name, cache_namespace);
                    let local = router.request_hasher(&salts).local_hashes(t);
                    py.allow_threads(|| route(RouteInput::Hashes { local: &local, isl: t.len() }))
                }
                t => py.allow_threads(|| route(RouteInput::Tokens(t.as_slice()))),
            })
        })?;
        Ok(decision.map_err(errors::route)?.into())
    }

    /// For python/bench/route_bench.py: the Rust call `route` makes for `tokens` (no options),
    /// timed inside as python/bench/route_bench.rs times it, in nanoseconds. Setting the same
    /// call's Python cost beside it in one process, call by call, cancels out the machine's
    /// drift between two processes.
    fn _route_ns(&self, tokens: &Bound<'_, PyAny>) -> PyResult<u64> {
        let router = &self.inner;
        with_tokens(tokens, |tokens| {
            let t0 = std::time::Instant::now();
            let decision = router.route(&RouteRequest::tokens(tokens.as_slice()));
            let elapsed = t0.elapsed().as_nanos() as u64;
            std::hint::black_box(decision.map_err(errors::route)?);
            Ok(elapsed)
        })
    }

    /// Records request `request_id` (of `tokens`) as in flight on a worker the caller chose.
    /// Returns the ids of requests that expired meanwhile.
    #[pyo3(signature = (request_id, tokens, worker_id, dp_rank=0))]
    fn add_request(
        &self,
        py: Python<'_>,
        request_id: &str,
        tokens: &Bound<'_, PyAny>,
        worker_id: u64,
        dp_rank: u32,
    ) -> PyResult<Vec<String>> {
        let tokens = read(tokens)?;
        let id = RequestId::from(request_id);
        let router = &self.inner;
        let worker = Worker::new(worker_id, dp_rank);
        let done = py.allow_threads(|| router.add_request(id, &tokens, worker));
        Ok(ids(done.map_err(errors::route)?))
    }

    /// The request's prefill is done: its prompt stops counting as queued.
    fn mark_prefill_completed(&self, request_id: &str) -> PyResult<()> {
        self.inner.mark_prefill_completed(&RequestId::from(request_id)).map_err(errors::unknown)
    }

    /// The request decoded one more block.
    fn add_output_block(&self, request_id: &str) -> PyResult<()> {
        self.inner.add_output_block(&RequestId::from(request_id)).map_err(errors::unknown)
    }

    /// The request finished or was cancelled: it no longer loads its worker.
    fn free(&self, request_id: &str) -> PyResult<()> {
        self.inner.free(&RequestId::from(request_id)).map_err(errors::unknown)
    }

    /// Hands an engine's KV event (a `RouterEvent`, or a dict in Dynamo's JSON shape) to the
    /// index, waiting for room in its lane. It is applied asynchronously: `flush()` waits
    /// until every event handed in is visible to `route`.
    fn apply_event(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let event = event_arg(event)?;
        let router = &self.inner;
        py.allow_threads(|| router.apply_event(event)).map_err(errors::enqueue)
    }

    /// Returns once every event handed in before is visible to routing.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let router = &self.inner;
        py.allow_threads(|| router.flush()).map_err(errors::lane_down)
    }

    /// Every registered worker's load if a request of `tokens` were sent to it, as dicts.
    fn potential_loads<'py>(
        &self,
        py: Python<'py>,
        tokens: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let tokens = read(tokens)?;
        let router = &self.inner;
        let loads = py.allow_threads(|| router.potential_loads(&tokens));
        loads
            .into_iter()
            .map(|load| {
                let d = PyDict::new(py);
                d.set_item("worker_id", load.worker.id.0)?;
                d.set_item("dp_rank", load.worker.dp_rank.0)?;
                d.set_item("potential_blocks", load.potential_blocks)?;
                d.set_item("potential_tokens", load.potential_tokens)?;
                d.set_item("active_tokens", load.active_tokens)?;
                d.set_item("overlap_blocks", load.overlap_blocks)?;
                d.set_item("active_requests", load.active_requests)?;
                Ok(d)
            })
            .collect()
    }

    /// Leading blocks of `tokens` that worker `worker_id` (rank `dp_rank`) holds.
    #[pyo3(signature = (tokens, worker_id, dp_rank=0))]
    fn overlap_blocks(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        worker_id: u64,
        dp_rank: u32,
    ) -> PyResult<u32> {
        let tokens = read(tokens)?;
        let router = &self.inner;
        Ok(py.allow_threads(|| router.overlap_blocks(&tokens, Worker::new(worker_id, dp_rank))))
    }

    /// The router's counters, as a dict (see the stubs for its keys).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("workers", stats.workers)?;
        d.set_item("disaggregated", stats.disaggregated)?;
        d.set_item("decisions", stats.decisions)?;
        d.set_item("refused", stats.refused)?;
        d.set_item("session_hits", stats.session_hits)?;
        d.set_item("session_moves", stats.session_moves)?;
        d.set_item("live_sessions", stats.live_sessions)?;
        d.set_item("shared_cache_failures", stats.shared_cache_failures)?;
        d.set_item("uptime", stats.uptime.as_secs_f64())?;
        let index = PyDict::new(py);
        for (tier, pool) in kvroute::StorageTier::ALL.into_iter().zip(&stats.index) {
            let p = PyDict::new(py);
            p.set_item("events", pool.events)?;
            p.set_item("block_ops", pool.block_ops)?;
            p.set_item("errors", pool.errors.iter().sum::<u64>())?;
            p.set_item("live_entries", pool.live_entries)?;
            p.set_item("nodes", pool.nodes)?;
            p.set_item("bytes", pool.bytes)?;
            index.set_item(tier_name(tier), p)?;
        }
        d.set_item("index", index)?;
        Ok(d)
    }

    /// The worker `worker_id` (rank `dp_rank`) came back under a new instance, or its state is
    /// otherwise known to be lost. With recovery on, each of its streams is restored from a
    /// full dump at the next `run_recovery`; without, its blocks are dropped from the index.
    #[pyo3(signature = (worker_id, dp_rank=0))]
    fn worker_restarted(&self, py: Python<'_>, worker_id: u64, dp_rank: u32) -> PyResult<()> {
        let router = &self.inner;
        py.allow_threads(|| router.worker_restarted(Worker::new(worker_id, dp_rank)))
            .map_err(errors::lane_down)
    }

    /// Expires approximate-mode blocks and in-flight requests past their TTLs now (both also
    /// happen lazily). Returns the ids of the expired requests.
    fn expire_now(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let router = &self.inner;
        Ok(ids(py.allow_threads(|| router.expire_now()).map_err(errors::lane_down)?))
    }

    /// Runs the recovery fetches due now against `source` (an object with `events_since` and
    /// `full_dump`, see the stubs), with recovery on; otherwise does nothing. Call it from the
    /// thread that hands in events, or one of its own, never from the routing path.
    /// `recovery_due()` says when a retry is due. Returns how many fetches ran.
    fn run_recovery(&self, py: Python<'_>, source: Py<PyAny>) -> PyResult<usize> {
        let router = &self.inner;
        let source = PySource(source);
        py.allow_threads(|| router.run_recovery(&source)).map_err(errors::lane_down)
    }

    /// Seconds until recovery's next waiting fetch (a retry after backoff) is due (0 when it
    /// is due already), or None when none waits.
    fn recovery_due(&self) -> Option<f64> {
        let due = self.inner.recovery_due()?;
        Some(due.saturating_duration_since(std::time::Instant::now()).as_secs_f64())
    }

    /// Writes the index and the recovery cursors to the file at `path`.
    fn save_snapshot(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let router = &self.inner;
        py.allow_threads(|| {
            let file =
                std::fs::File::create(&path).map_err(kvroute::recovery::SnapshotError::Io)?;
            let mut out = std::io::BufWriter::new(file);
            router.save_snapshot(&mut out)?;
            std::io::Write::flush(&mut out).map_err(kvroute::recovery::SnapshotError::Io)
        })
        .map_err(errors::snapshot)
    }

    /// Starts this router (which has taken no event yet) from the snapshot at `path`; a
    /// corrupt or truncated file changes nothing.
    fn restore_snapshot(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let router = &self.inner;
        py.allow_threads(|| {
            let file = std::fs::File::open(&path).map_err(kvroute::recovery::SnapshotError::Io)?;
            router.restore_snapshot(std::io::BufReader::new(file))
        })
        .map_err(errors::snapshot)
    }

    fn __repr__(&self) -> String {
        format!(
            "KvRouter(block_size={}, workers={})",
            self.inner.config().block_size,
            self.inner.stats().workers
        )
    }
}
