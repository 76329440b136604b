//! `kvroute serve`: an OpenAI-compatible gateway that routes each request to the engine whose KV
//! cache holds the longest prefix of it, without overloading anyone.
//!
//! Layout:
//! - [`workers`]: the engines (flags or a TOML file) and their health;
//! - [`proxy`]: one request's routing, forwarding, retries and lifecycle in the router;
//! - [`http`]: the endpoints (`/v1/completions`, `/v1/chat/completions`, `/v1/models`,
//!   `/health`, `/metrics`);
//! - [`metrics`]: the gateway's Prometheus metrics.
//!
//! One [`kvroute::KvRouter`] decides. Engines that publish KV events (vLLM's
//! `--kv-events-config`) feed it through kvroute's ZMQ subscriber, which heals lost batches
//! from their replay sockets; a fleet without events is routed in approximate mode (the router
//! indexes its own decisions). Prompts are tokenized as the engines tokenize them
//! ([`crate::tokenize`]). With a snapshot file the router starts warm after a restart; with
//! NATS, gateway replicas share their requests in flight.

pub mod http;
pub mod metrics;
pub mod proxy;
pub mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use kvroute::router::RouterConfig;
use kvroute::wire::zmq::{SubscriberConfig, ZmqEndpoint, ZmqSubscriber};
use kvroute::{KvRouter, Worker};
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::openai::ApiError;
use crate::tokenize::Tokenizer;
use metrics::GatewayMetrics;
use workers::{Fleet, WorkerSpec};

/// How the gateway picks a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// By cost: the prompt blocks each worker holds (from its KV events, or from the gateway's
    /// own decisions when no worker publishes them) against its load.
    #[default]
    KvAware,
    /// As `KvAware`, but from the gateway's own decisions even when engines publish events.
    Approximate,
    /// Each healthy worker in turn (the router still tracks the load).
    RoundRobin,
}

impl std::str::FromStr for Policy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "kv" | "kv-aware" => Ok(Self::KvAware),
            "approximate" => Ok(Self::Approximate),
            "round-robin" => Ok(Self::RoundRobin),
            _ => Err(format!("policy {text:?}: kv-aware, approximate or round-robin")),
        }
    }
}

/// How the gateway runs. [`ServeConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The engines.
    pub workers: Vec<WorkerSpec>,
    /// The model name requests must give (the engines' model).
    pub model: String,
    /// The engines' tokenizer directory (`tokenizer.json`, `tokenizer_config.json`).
    pub tokenizer: PathBuf,
    /// The router's settings (block size, weights).
    pub router: RouterConfig,
    /// How a worker is picked. Default [`Policy::KvAware`].
    pub policy: Policy,
    /// The longest prompt plus output; the tokenizer's `model_max_length` when `None`.
    pub max_model_len: Option<usize>,
    /// The largest request body taken, in bytes. Default 32 MiB.
    pub max_body_bytes: usize,
    /// Workers one request is tried on at most. Default 3.
    pub max_attempts: u32,
    /// How long connecting to a worker may take. Default 2 s.
    pub connect_timeout: Duration,
    /// How long a worker may take to answer a request's head. Default 60 s.
    pub first_byte_timeout: Duration,
    /// Time between health checks of every worker. Default 5 s.
    pub health_interval: Duration,
    /// Failures in a row after which a worker is skipped until healthy. Default 3.
    pub max_failures: u32,
    /// Where the router's snapshot is kept: read at start, written every
    /// `snapshot_interval` and at stop.
    pub snapshot: Option<PathBuf>,
    /// Time between snapshots. Default 60 s.
    pub snapshot_interval: Duration,
    /// Gateway replicas sharing their requests in flight over NATS.
    pub nats: Option<kvroute::nats::NatsConfig>,
}

impl ServeConfig {
    /// A gateway for `workers` serving `model`, tokenized by `tokenizer`, with the defaults.
    pub fn new(
        workers: Vec<WorkerSpec>,
        model: impl Into<String>,
        tokenizer: impl Into<PathBuf>,
    ) -> Self {
        Self {
            workers,
            model: model.into(),
            tokenizer: tokenizer.into(),
            router: RouterConfig::new(16),
            policy: Policy::KvAware,
            max_model_len: None,
            max_body_bytes: 32 << 20,
            max_attempts: 3,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(60),
            health_interval: Duration::from_secs(5),
            max_failures: 3,
            snapshot: None,
            snapshot_interval: Duration::from_secs(60),
            nats: None,
        }
    }
}

/// What the handlers share.
pub struct Gateway {
    config: ServeConfig,
    router: Arc<KvRouter>,
    fleet: Fleet,
    tokenizer: Tokenizer,
    client: reqwest::Client,
    metrics: GatewayMetrics,
    max_model_len: usize,
    /// Request ids are `{prefix}-{n}`: unique across replicas (the prefix is the router id).
    id_prefix: String,
    next_id: AtomicU64,
    subscriber: Mutex<Option<ZmqSubscriber>>,
    /// Round-robin's next turn.
    turn: AtomicU64,
    /// The subscriber's counters at the last scrape (the metrics count the difference).
    seen: Mutex<(u64, u64)>,
}

impl Gateway {
    fn check_model(&self, model: &str) -> Result<(), ApiError> {
        if model == self.config.model { Ok(()) } else { Err(ApiError::unknown_model(model)) }
    }

    /// The router deciding.
    pub fn router(&self) -> &Arc<KvRouter> {
        &self.router
    }

    fn refresh_metrics(&self) {
        for worker in self.fleet.all() {
            let gauge = self.metrics.healthy.get_or_create(&metrics::worker(worker.id));
            gauge.set(i64::from(worker.is_healthy()));
        }
        // Requests in flight per worker as the router sees them: replicas' included.
        let mut active = vec![0i64; self.fleet.all().len()];
        for load in self.router.potential_loads(&[]) {
            if let Some(slot) =
                usize::try_from(load.worker.id.0).ok().and_then(|i| active.get_mut(i))
            {
                *slot += load.active_requests as i64;
            }
        }
        for (worker, active) in self.fleet.all().iter().zip(active) {
            self.metrics.router_requests.get_or_create(&metrics::worker(worker.id)).set(active);
        }
        if let Some(subscriber) = self.subscriber.lock().as_ref() {
            let stats = subscriber.stats();
            let mut seen = self.seen.lock();
            let (events, gaps) = (stats.events(), stats.gaps_healed());
            self.metrics.kv_events.inc_by(events.saturating_sub(seen.0));
            self.metrics.kv_gaps_healed.inc_by(gaps.saturating_sub(seen.1));
            *seen = (events, gaps);
        }
    }

    /// Writes the router's snapshot next to its file, then moves it in place.
    fn save_snapshot(&self) -> Result<(), String> {
        let Some(path) = &self.config.snapshot else { return Ok(()) };
        let partial = path.with_extension("partial");
        let file =
            std::fs::File::create(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
        let mut out = std::io::BufWriter::new(file);
        self.router.save_snapshot(&mut out).map_err(|e| e.to_string())?;
        let file = out.into_inner().map_err(|e| e.to_string())?;
        file.sync_all().map_err(|e| e.to_string())?;
        std::fs::rename(&partial, path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// A running gateway.
pub struct GatewayServer {
    address: SocketAddr,
    gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
    replica: Option<kvroute::nats::NatsReplica>,
}

impl std::fmt::Debug for GatewayServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayServer").field("address", &self.address).finish_non_exhaustive()
    }
}

impl GatewayServer {
    /// Starts the gateway on `bind` (port 0 picks a free one), on the current runtime.
    pub async fn start(config: ServeConfig, bind: SocketAddr) -> Result<Self, String> {
        if config.workers.is_empty() {
            return Err("no workers: give at least one".into());
        }
        let mut config = config;
        if config.policy == Policy::Approximate {
            for worker in &mut config.workers {
                (worker.zmq, worker.replay) = (None, None);
            }
        }
        let with_events = config.workers.iter().filter(|w| w.zmq.is_some()).count();
        if with_events != 0 && with_events != config.workers.len() {
            return Err(format!(
                "{with_events} of {} workers publish KV events: give every worker zmq= or none \
                 (a fleet without events is routed in approximate mode)",
                config.workers.len()
            ));
        }
        if config.workers.iter().any(|w| w.role != workers::Role::Both) {
            return Err(
                "disaggregated prefill/decode workers are not served yet: role=both only".into()
            );
        }
        let tokenizer = Tokenizer::from_dir(&config.tokenizer).map_err(|e| e.to_string())?;
        let max_model_len = config.max_model_len.or(tokenizer.max_length()).unwrap_or(32_768);
        let router_config =
            RouterConfig { use_kv_events: with_events > 0, ..config.router.clone() };
        router_config.validate().map_err(|e| e.to_string())?;

        // Building, restoring and joining replicas block: off the runtime's threads.
        let setup = config.clone();
        let (router, replica, router_id) =
            tokio::task::spawn_blocking(move || build_router(&setup, router_config))
                .await
                .map_err(|e| e.to_string())??;

        let endpoints: Vec<ZmqEndpoint> = config
            .workers
            .iter()
            .enumerate()
            .filter_map(|(i, spec)| {
                let endpoint = ZmqEndpoint::new(kvroute::WorkerId(i as u64), spec.zmq.clone()?);
                Some(match &spec.replay {
                    Some(replay) => endpoint.with_replay(replay.clone()),
                    None => endpoint,
                })
            })
            .collect();
        let subscriber = if endpoints.is_empty() {
            None
        } else {
            let subscriber_config = SubscriberConfig { endpoints, ..SubscriberConfig::default() };
            Some(
                ZmqSubscriber::start(subscriber_config, Arc::clone(&router))
                    .map_err(|e| e.to_string())?,
            )
        };
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        let gateway = Arc::new(Gateway {
            fleet: Fleet::new(config.workers.clone(), config.max_failures),
            router,
            tokenizer,
            client,
            metrics: GatewayMetrics::default(),
            max_model_len,
            id_prefix: format!("{router_id:x}"),
            next_id: AtomicU64::new(0),
            turn: AtomicU64::new(0),
            subscriber: Mutex::new(subscriber),
            seen: Mutex::new((0, 0)),
            config,
        });

        let app = Router::new()
            .route("/v1/completions", post(http::completions))
            .route("/v1/chat/completions", post(http::chat))
            .route("/v1/models", get(http::models))
            .route("/health", get(http::health))
            .route("/metrics", get(http::metrics))
            .layer(DefaultBodyLimit::max(gateway.config.max_body_bytes))
            .with_state(Arc::clone(&gateway));
        let serving = crate::http_server::serve(bind, app, "gateway")
            .await
            .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
        let (address, stop, server) = (serving.address, serving.stop, serving.task);
        let tasks = vec![
            server,
            tokio::spawn(health_checks(Arc::clone(&gateway))),
            tokio::spawn(snapshots(Arc::clone(&gateway))),
        ];
        Ok(Self { address, gateway, stop: Some(stop), tasks, replica })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The shared state (its router, for one).
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops serving, writes the snapshot and stops the event subscriber.
    pub async fn stop(mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
        let gateway = Arc::clone(&self.gateway);
        let saved = tokio::task::spawn_blocking(move || {
            let saved = gateway.save_snapshot();
            if let Some(subscriber) = gateway.subscriber.lock().take() {
                subscriber.shutdown();
            }
            saved
        })
        .await
        .map_err(|e| e.to_string())?;
        drop(self.replica.take());
        saved
    }
}

type Built = (Arc<KvRouter>, Option<kvroute::nats::NatsReplica>, u64);

/// The router with the workers registered, warm from the snapshot when there is one, joined to
/// its NATS replicas when asked.
fn build_router(config: &ServeConfig, router_config: RouterConfig) -> Result<Built, String> {
    let register = |router: &KvRouter| {
        for (i, spec) in config.workers.iter().enumerate() {
            for rank in 0..spec.dp_ranks {
                router.add_worker_with_role(Worker::new(i as u64, rank), spec.role.into());
            }
        }
    };
    let restore = |router: &KvRouter| -> Result<(), String> {
        let Some(path) = &config.snapshot else { return Ok(()) };
        match std::fs::File::open(path) {
            Ok(file) => router
                .restore_snapshot(std::io::BufReader::new(file))
                .map_err(|e| format!("snapshot {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("snapshot {}: {e}", path.display())),
        }
    };
    let Some(nats) = &config.nats else {
        let router = KvRouter::new(router_config).map_err(|e| e.to_string())?;
        register(&router);
        restore(&router)?;
        return Ok((Arc::new(router), None, u64::from(std::process::id())));
    };
    use kvroute::nats::NatsReplica;
    let router_id = nats.router_id;
    let replica =
        NatsReplica::start(nats.clone()).map_err(|e| format!("--nats {}: {e}", nats.url))?;
    let router = KvRouter::builder(RouterConfig { replica_sync: true, ..router_config })
        .publisher(router_id, replica.publisher())
        .build()
        .map_err(|e| e.to_string())?;
    let router = Arc::new(router);
    register(&router);
    restore(&router)?;
    replica.attach(Arc::clone(&router)).map_err(|e| e.to_string())?;
    let timeout = nats.snapshot_timeout.max(Duration::from_secs(5));
    if !replica.wait_connected(timeout) {
        return Err(format!("--nats {}: no NATS server answered within {timeout:?}", nats.url));
    }
    if !replica.wait_caught_up(timeout) {
        return Err(format!(
            "--nats {}: the peers' state did not arrive within {timeout:?}",
            nats.url
        ));
    }
    Ok((router, Some(replica), router_id))
}

/// Checks every worker's `/health` every interval.
async fn health_checks(gateway: Arc<Gateway>) {
    let interval = gateway.config.health_interval;
    let timeout = interval.min(Duration::from_secs(2));
    loop {
        tokio::time::sleep(interval).await;
        for worker in gateway.fleet.all() {
            let url = format!("{}/health", worker.spec.url.trim_end_matches('/'));
            let answer = gateway.client.get(url).timeout(timeout).send().await;
            let healthy = answer.is_ok_and(|a| a.status().is_success());
            gateway.fleet.checked(worker.id, healthy);
        }
    }
}

/// Saves the snapshot every interval, when there is a file for it.
async fn snapshots(gateway: Arc<Gateway>) {
    if gateway.config.snapshot.is_none() {
        return;
    }
    loop {
        tokio::time::sleep(gateway.config.snapshot_interval).await;
        let saving = Arc::clone(&gateway);
        match tokio::task::spawn_blocking(move || saving.save_snapshot()).await {
            Ok(Err(e)) => log::warn!("snapshot not saved: {e}"),
            Err(e) => log::warn!("snapshot not saved: {e}"),
            Ok(Ok(())) => {}
        }
    }
}
