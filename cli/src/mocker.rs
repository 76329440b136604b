//! `kvroute mocker`: a mock vLLM engine (see `kvroute_gateway::mocker`) as a process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kvroute::sim::EngineModel;
use kvroute_gateway::mocker::kv_events::KvEventsConfig;
use kvroute_gateway::mocker::{Mocker, MockerConfig};

/// `kvroute mocker`'s flags.
#[derive(clap::Args, Debug)]
pub struct MockerArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// The model name to serve (requests must name it); the tokenizer directory by default, as
    /// vLLM names a model by its path.
    #[arg(long)]
    model: Option<String>,
    /// A directory with `tokenizer.json` and `tokenizer_config.json` (its `chat_template`).
    #[arg(long, default_value_os_t = default_tokenizer())]
    tokenizer: PathBuf,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// KV cache capacity in blocks.
    #[arg(long, default_value_t = 16_384)]
    num_blocks: usize,
    /// Requests running at once.
    #[arg(long, default_value_t = 64)]
    max_num_seqs: usize,
    /// Prompt tokens prefilled per second (over the tokens not in cache).
    #[arg(long, default_value_t = 40_000.0)]
    prefill_tokens_per_s: f64,
    /// Milliseconds per output token.
    #[arg(long, default_value_t = 20.0)]
    decode_ms_per_token: f64,
    /// Run this many times faster than the model above says.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// The longest prompt plus output (default: the tokenizer's `model_max_length`).
    #[arg(long)]
    max_model_len: Option<usize>,
    /// vLLM's `--kv-events-config` JSON, e.g. `{"enable_kv_cache_events": true, "publisher":
    /// "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}`.
    #[arg(long)]
    kv_events_config: Option<String>,
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long)]
    duration: Option<f64>,
}

/// The bundled tokenizer (`data/tokenizer`), as an absolute path (it doubles as the model name).
pub fn default_tokenizer() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/tokenizer");
    dir.canonicalize().unwrap_or(dir)
}

/// Runs a mock engine until interrupted (or `--duration`). It prints one line once it listens:
/// `READY http://ADDR [kv-events=tcp://… replay=tcp://…]`.
pub fn run(args: &MockerArgs) -> Result<(), String> {
    let kv_events = match &args.kv_events_config {
        Some(json) => serde_json::from_str::<KvEventsConfig>(json)
            .map_err(|e| format!("--kv-events-config: {e}"))?,
        None => KvEventsConfig::default(),
    };
    let positive = |flag: &str, v: f64| match v.is_finite() && v > 0.0 {
        true => Ok(v),
        false => Err(format!("{flag} must be a positive number, not {v}")),
    };
    let engine = EngineModel {
        prefill_tokens_per_s: positive("--prefill-tokens-per-s", args.prefill_tokens_per_s)?,
        decode_time_per_token: Duration::from_secs_f64(
            positive("--decode-ms-per-token", args.decode_ms_per_token)? / 1e3,
        ),
        max_batch: args.max_num_seqs,
        capacity: args.num_blocks,
        ..EngineModel::default()
    };
    let model = args.model.clone().unwrap_or_else(|| args.tokenizer.display().to_string());
    let mut config = MockerConfig::new(model, &args.tokenizer);
    config.block_size = args.block_size;
    config.engine = engine;
    config.speedup = positive("--speedup", args.speedup)?;
    config.kv_events = kv_events;
    config.max_model_len = args.max_model_len;
    let duration = args.duration.map(|d| positive("--duration", d)).transpose()?;

    super::bench::runtime()?.block_on(async {
        let mocker = Mocker::start(config, args.listen).await.map_err(|e| e.to_string())?;
        let events = match mocker.kv_event_addresses() {
            Some((publisher, Some(replay))) => format!(" kv-events={publisher} replay={replay}"),
            Some((publisher, None)) => format!(" kv-events={publisher}"),
            None => String::new(),
        };
        println!("READY {}{events}", mocker.url());
        super::bench::until_stopped(duration.map(Duration::from_secs_f64)).await;
        mocker.stop().await;
        Ok(())
    })
}
