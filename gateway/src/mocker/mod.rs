//! `kvroute mocker`: a mock vLLM engine as an HTTP server, so a gateway and its load replay run
//! on one machine without GPUs.
//!
//! Layout:
//! - [`http`]: the endpoints (`/v1/completions`, `/v1/chat/completions`, `/tokenize`,
//!   `/detokenize`, `/v1/models`, `/health`, `/metrics`), answering as vLLM does;
//! - [`scheduler`]: `kvroute::sim::Engine` (queue, batch limit, KV cache, serial prefill) on the
//!   wall clock, `speedup` times faster than the model says;
//! - [`kv_events`]: vLLM 0.33's KV event wire format on a ZMQ PUB socket, with the replay ROUTER
//!   beside it, as `--kv-events-config` configures them;
//! - [`metrics`]: vLLM's metric names;
//! - [`clock`]: waits to within tens of microseconds (tokio's timer ticks in milliseconds,
//!   longer than a prefill at `--speedup 1000`).
//!
//! Blocks are named by vLLM's own hashes ([`crate::vllm_hash`]), so a router that recomputes
//! them (vllm-router's `kv_aware`) finds them. The output is filler text of `max_tokens` tokens.

pub mod clock;
pub mod http;
pub mod kv_events;
pub mod metrics;
pub mod scheduler;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use kvroute::sim::EngineModel;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::tokenize::{TokenizeError, Tokenizer};
use clock::PreciseClock;
use http::App;
use kv_events::{EventPublisher, KvEventsConfig};
use metrics::EngineMetrics;
use scheduler::Scheduler;

/// How a mock engine runs.
#[derive(Clone, Debug)]
pub struct MockerConfig {
    /// The model name it serves (requests must name it).
    pub model: String,
    /// A directory with `tokenizer.json` and `tokenizer_config.json`.
    pub tokenizer: PathBuf,
    /// Tokens per KV block. vLLM's default is 16.
    pub block_size: u32,
    /// Prefill and decode speed, batch limit and KV capacity (blocks).
    pub engine: EngineModel,
    /// How many times faster than `engine` it runs.
    pub speedup: f64,
    /// vLLM's `--kv-events-config`.
    pub kv_events: KvEventsConfig,
    /// The longest prompt plus output; the tokenizer's `model_max_length` when `None`.
    pub max_model_len: Option<usize>,
    /// Tokens generated when a request names no `max_tokens`. Default 16.
    pub default_max_tokens: u64,
    /// The largest request body taken, in bytes. Default 32 MiB.
    pub max_body_bytes: usize,
}

impl MockerConfig {
    /// A mock engine of `model` with the tokenizer in `tokenizer` and the defaults.
    pub fn new(model: impl Into<String>, tokenizer: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            tokenizer: tokenizer.into(),
            block_size: 16,
            engine: EngineModel::default(),
            speedup: 1.0,
            kv_events: KvEventsConfig::default(),
            max_model_len: None,
            default_max_tokens: 16,
            max_body_bytes: 32 << 20,
        }
    }
}

/// Why a mock engine could not start.
#[derive(Debug)]
pub enum MockerError {
    /// The tokenizer directory does not load.
    Tokenizer(TokenizeError),
    /// A setting is out of range.
    Config(String),
    /// The HTTP port cannot be bound.
    Bind(std::io::Error),
    /// A KV event socket cannot be bound.
    Events(zmq::Error),
    /// The clock's thread cannot be started.
    Clock(std::io::Error),
}

impl std::fmt::Display for MockerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tokenizer(e) => write!(f, "tokenizer: {e}"),
            Self::Config(e) => write!(f, "configuration: {e}"),
            Self::Bind(e) => write!(f, "cannot listen: {e}"),
            Self::Events(e) => write!(f, "KV event sockets: {e}"),
            Self::Clock(e) => write!(f, "cannot start the clock thread: {e}"),
        }
    }
}

impl std::error::Error for MockerError {}

/// A running mock engine.
#[derive(Debug)]
pub struct Mocker {
    address: SocketAddr,
    kv_addresses: Option<(String, Option<String>)>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl Mocker {
    /// Starts serving `config` on `bind` (port 0 picks a free one), on the current runtime.
    pub async fn start(config: MockerConfig, bind: SocketAddr) -> Result<Self, MockerError> {
        let tokenizer = Tokenizer::from_dir(&config.tokenizer).map_err(MockerError::Tokenizer)?;
        if !(config.speedup.is_finite() && config.speedup > 0.0) {
            return Err(MockerError::Config(format!("speedup {} must be > 0", config.speedup)));
        }
        if config.engine.capacity == 0 || config.engine.max_batch == 0 {
            return Err(MockerError::Config("capacity and batch size must be > 0".into()));
        }
        let max_model_len = config.max_model_len.or(tokenizer.max_length()).unwrap_or(32_768);
        let filler = filler(&tokenizer).map_err(MockerError::Tokenizer)?;
        let metrics = Arc::new(EngineMetrics::new(&config.model));
        let events = &config.kv_events;
        let publisher = if events.enable_kv_cache_events {
            if events.publisher != "zmq" {
                let publisher = &events.publisher;
                return Err(MockerError::Config(format!("publisher {publisher:?}: only zmq")));
            }
            Some(EventPublisher::start(events).map_err(MockerError::Events)?)
        } else {
            None
        };
        let kv_addresses = publisher.as_ref().map(|p| p.addresses.clone());
        let scheduler = Scheduler::new(
            config.engine.clone(),
            config.block_size,
            config.speedup,
            publisher,
            Arc::clone(&metrics),
        )
        .map_err(|e| MockerError::Config(e.to_string()))?;
        let app = Arc::new(App {
            model: config.model,
            tokenizer,
            max_model_len,
            default_max_tokens: config.default_max_tokens,
            scheduler: Arc::new(scheduler),
            clock: PreciseClock::start().map_err(MockerError::Clock)?,
            metrics,
            filler,
        });
        let router = Router::new()
            .route("/v1/completions", post(http::completions))
            .route("/v1/chat/completions", post(http::chat))
            .route("/tokenize", post(http::tokenize))
            .route("/detokenize", post(http::detokenize))
            .route("/v1/models", get(http::models))
            .route("/health", get(http::health))
            .route("/metrics", get(http::metrics))
            .layer(DefaultBodyLimit::max(config.max_body_bytes))
            .with_state(app);
        let serving =
            crate::http_server::serve(bind, router, "mocker").await.map_err(MockerError::Bind)?;
        let (address, stop, server) = (serving.address, serving.stop, serving.task);
        Ok(Self { address, kv_addresses, stop: Some(stop), server: Some(server) })
    }

    /// The HTTP address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its base URL (`http://address`).
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The KV event PUB and replay addresses, when events are on.
    pub fn kv_event_addresses(&self) -> Option<&(String, Option<String>)> {
        self.kv_addresses.as_ref()
    }

    /// Stops taking requests and waits for the server to end; open streams end with it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
            let _ = server.await;
        }
    }
}

/// The filler output: the pieces of a fixed sentence, one per token.
fn filler(tokenizer: &Tokenizer) -> Result<Vec<String>, TokenizeError> {
    let ids = tokenizer.encode(" The quick brown fox jumps over the lazy dog.", false)?;
    let pieces: Vec<String> =
        ids.iter().map(|&id| tokenizer.decode(&[id], false)).collect::<Result<_, _>>()?;
    if pieces.is_empty() {
        return Ok(vec![" x".into()]);
    }
    Ok(pieces)
}
