//! `kvroute serve`: the OpenAI-compatible KV-aware gateway (see `kvroute_gateway::serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kvroute::router::RouterConfig;
use kvroute_gateway::serve::workers::WorkerSpec;
use kvroute_gateway::serve::{GatewayServer, Policy, ServeConfig};

/// `kvroute serve`'s flags.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// An engine: `URL[,zmq=tcp://host:port][,replay=tcp://host:port][,ranks=N]`. Repeat for
    /// each engine. Without zmq= on any, the fleet is routed in approximate mode.
    #[arg(long = "worker")]
    workers: Vec<String>,
    /// A TOML file of `[[workers]]` tables (url, zmq, replay, dp_ranks, role), instead of or
    /// beside --worker.
    #[arg(long)]
    workers_file: Option<PathBuf>,
    /// The model name requests must give (default: the tokenizer directory, as vLLM names a
    /// model by its path).
    #[arg(long)]
    model: Option<String>,
    /// The engines' tokenizer directory (`tokenizer.json`, `tokenizer_config.json`).
    #[arg(long, default_value_os_t = super::mocker::default_tokenizer())]
    tokenizer: PathBuf,
    /// How a worker is picked: kv-aware (by the prompt blocks each holds, from its KV events or
    /// from the gateway's own decisions when engines publish none), approximate (from the
    /// gateway's own decisions even when they do) or round-robin.
    #[arg(long, default_value = "kv-aware")]
    policy: Policy,
    /// The engines' tokens per KV block.
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// Weight of the prompt blocks a worker would compute against its decode load.
    #[arg(long, default_value_t = 16.0)]
    overlap_weight: f64,
    /// Weight of the prefill already queued on a worker.
    #[arg(long, default_value_t = 1.0)]
    queued_prefill_weight: f64,
    /// Softmax temperature over the workers' costs (0 picks a cheapest).
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// The longest prompt plus output (default: the tokenizer's `model_max_length`).
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Workers one request is tried on at most.
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// Seconds a worker may take to answer a request's head before the next one is tried.
    #[arg(long, default_value_t = 60.0)]
    first_byte_timeout: f64,
    /// Seconds between health checks.
    #[arg(long, default_value_t = 5.0)]
    health_interval: f64,
    /// Keep the router's snapshot in this file: read at start (warm start), written every
    /// minute and at exit.
    #[arg(long)]
    snapshot: Option<PathBuf>,
    /// Share requests in flight with the gateway replicas on this NATS server.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// The replicas' namespace on the NATS server.
    #[arg(long, default_value = "default", requires = "nats")]
    namespace: String,
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long)]
    duration: Option<f64>,
}

fn seconds(flag: &str, value: f64) -> Result<Duration, String> {
    match value.is_finite() && value > 0.0 {
        true => Ok(Duration::from_secs_f64(value)),
        false => Err(format!("{flag} must be a positive number of seconds, not {value}")),
    }
}

/// Runs the gateway until interrupted (or `--duration`); prints `READY http://ADDR` once it
/// listens.
pub fn run(args: &ServeArgs) -> Result<(), String> {
    let mut workers: Vec<WorkerSpec> =
        args.workers.iter().map(|spec| WorkerSpec::parse(spec)).collect::<Result<_, _>>()?;
    if let Some(path) = &args.workers_file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        workers
            .extend(WorkerSpec::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let model = args.model.clone().unwrap_or_else(|| args.tokenizer.display().to_string());
    let mut config = ServeConfig::new(workers, model, &args.tokenizer);
    config.router = RouterConfig {
        overlap_score_weight: args.overlap_weight,
        queued_prefill_weight: Some(args.queued_prefill_weight),
        temperature: args.temperature,
        ..RouterConfig::new(args.block_size)
    };
    config.policy = args.policy;
    config.max_model_len = args.max_model_len;
    config.max_attempts = args.max_attempts.max(1);
    config.first_byte_timeout = seconds("--first-byte-timeout", args.first_byte_timeout)?;
    config.health_interval = seconds("--health-interval", args.health_interval)?;
    config.snapshot = args.snapshot.clone();
    config.nats = args.nats.as_ref().map(|url| {
        kvroute::nats::NatsConfig::new(url, &args.namespace, super::replicas::default_router_id())
    });
    let duration = args.duration.map(|d| seconds("--duration", d)).transpose()?;

    super::bench::runtime()?.block_on(async {
        let server = GatewayServer::start(config, args.listen).await?;
        println!("READY {}", server.url());
        super::bench::until_stopped(duration).await;
        server.stop().await
    })
}
