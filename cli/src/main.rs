//! `kvroute`: what KV-cache-aware routing does for a fleet.
//!
//! `kvroute replay` replays a Mooncake-format trace (the bundled conversation trace by default)
//! through a simulated fleet once per routing policy — kvroute's router and the baselines a
//! gateway would otherwise use — in parallel, and prints one row per policy: prefix hit rate
//! against the unlimited-cache oracle, TTFT and end-to-end latency, load imbalance, the
//! router's decision time and its index's event rate. `--report out.svg` (or `.html`) draws hit
//! rate and TTFT over trace time.
//!
//! `kvroute listen` (feature `listen`, on by default; needs the system libzmq) subscribes to
//! engines' KV event streams over ZMQ, keeps a router's index of them and shows a live view;
//! `--metrics ADDR` serves the same counters to Prometheus.
//!
//! `kvroute serve` runs the OpenAI-compatible gateway that routes each request to the engine
//! holding the longest prefix of it (`--worker URL,zmq=…` per engine).
//!
//! `kvroute mocker` runs a mock vLLM engine (OpenAI-compatible HTTP, vLLM's KV events on ZMQ
//! and its metrics) for a gateway to stand in front of without GPUs.
//!
//! `kvroute route` reads requests on stdin (one per line, whitespace-separated token ids) and
//! prints each decision (`<worker id> <dp rank> <overlap blocks> <prompt blocks>`), for
//! scripting; `--nats nats://…` joins the router replicas sharing that server.
//!
//! Bad input (a missing or malformed trace, zero workers, a block size that does not divide 512,
//! a malformed endpoint, a line that is not token ids, an unreachable NATS server) prints one
//! error line and exits with code 2.

#[cfg(not(loom))]
mod bench;
#[cfg(not(loom))]
mod demo;
#[cfg(feature = "listen")]
mod listen;
#[cfg(feature = "listen")]
mod metrics;
#[cfg(not(loom))]
mod mocker;
mod replicas;
mod report;
mod route;
#[cfg(not(loom))]
mod serve;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use kvroute::sim::trace::load_trace;
use kvroute::sim::{Policy, SimConfig, SimInput, SimResult, bundled_trace_path, simulate};
use rayon::prelude::*;

#[derive(Parser, Debug)]
#[command(name = "kvroute", version, about = "KV-cache-aware routing for LLM inference fleets")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a trace through a simulated fleet under several routing policies.
    Replay(ReplayArgs),
    /// Route requests read from stdin (one per line: whitespace-separated token ids) and print
    /// one decision per line: `<worker id> <dp rank> <overlap blocks> <prompt blocks>`.
    Route(route::RouteArgs),
    /// Subscribe to engines' KV events over ZMQ and show the index live.
    #[cfg(feature = "listen")]
    Listen(ListenArgs),
    /// Run a mock vLLM engine: OpenAI-compatible HTTP, vLLM's KV events on ZMQ, vLLM's metrics.
    #[cfg(not(loom))]
    Mocker(mocker::MockerArgs),
    /// Run the OpenAI-compatible KV-aware gateway in front of vLLM-style engines.
    #[cfg(not(loom))]
    Serve(serve::ServeArgs),
    /// Replay a Mooncake trace over HTTP against an OpenAI-compatible endpoint.
    #[cfg(not(loom))]
    Bench(bench::BenchArgs),
    /// Start mock engines and the gateway on loopback and replay a trace once per policy.
    #[cfg(not(loom))]
    Demo(demo::DemoArgs),
}

#[cfg(feature = "listen")]
#[derive(clap::Args, Debug)]
struct ListenArgs {
    /// An engine's KV event publisher: `[ID=]tcp://host:port[,replay=tcp://host:port]
    /// [,rank=N][,topic=T]` (the worker id defaults to the endpoint's position). Repeat for
    /// each engine.
    #[arg(long = "zmq", required = true)]
    zmq: Vec<String>,
    /// The engines' tokens per KV block.
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// Serve the counters in the Prometheus text format at http://ADDR/metrics.
    #[arg(long)]
    metrics: Option<String>,
    /// Seconds between redraws of the view.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long)]
    duration: Option<f64>,
    /// `--nats URL`: also join the router replicas there and show their load per worker.
    #[command(flatten)]
    nats: replicas::NatsArgs,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// Mooncake-format JSONL trace (timestamp, input_length, output_length, hash_ids).
    #[arg(long, default_value_os_t = bundled_trace_path())]
    trace: PathBuf,
    /// Workers in the fleet.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Tokens per KV block (must divide 512).
    #[arg(long, default_value_t = 64)]
    block_size: u32,
    /// KV blocks each worker holds.
    #[arg(long, default_value_t = 16_384)]
    capacity: usize,
    /// How much faster than the trace's timestamps requests arrive.
    #[arg(long, default_value_t = 10.0)]
    speedup: f64,
    /// Seed of the router's random choices.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Milliseconds before the engines' KV events reach the router.
    #[arg(long, default_value_t = 10)]
    event_delay_ms: u64,
    /// Policies to compare (comma-separated): kv-aware, approximate, round-robin, random,
    /// least-loaded, oracle-informed.
    #[arg(long, value_delimiter = ',', default_value = "kv-aware,round-robin,random,least-loaded")]
    policies: Vec<String>,
    /// Also run kv-aware routing in approximate mode (no KV events).
    #[arg(long)]
    approximate: bool,
    /// The router's overlap score weight: what a prompt token it must prefill costs against a
    /// block of decode load (Dynamo's default is 1).
    #[arg(long, default_value_t = 16.0)]
    overlap_weight: f64,
    /// What a prompt token already queued on a worker costs (Dynamo's formula weighs it as
    /// the overlap weight: pass the same value for it).
    #[arg(long, default_value_t = 1.0)]
    queued_prefill_weight: f64,
    /// Prompt tokens each worker prefills per second.
    #[arg(long, default_value_t = 40_000.0)]
    prefill_tokens_per_s: f64,
    /// Replay only the first N requests of the trace.
    #[arg(long)]
    limit: Option<usize>,
    /// Draw hit rate and TTFT over trace time into this .svg or .html file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Replay(args) => replay(&args),
        Command::Route(args) => route::run(&args),
        #[cfg(feature = "listen")]
        Command::Listen(args) => {
            listen_options(&args).and_then(|options| listen::run(&options, &args.nats))
        }
        #[cfg(not(loom))]
        Command::Mocker(args) => mocker::run(&args),
        #[cfg(not(loom))]
        Command::Serve(args) => serve::run(&args),
        #[cfg(not(loom))]
        Command::Bench(args) => bench::run(&args),
        #[cfg(not(loom))]
        Command::Demo(args) => demo::run(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("kvroute: {message}");
            ExitCode::from(2)
        }
    }
}

/// Checks the durations of `kvroute listen`'s arguments.
#[cfg(feature = "listen")]
fn listen_options(args: &ListenArgs) -> Result<listen::ListenOptions, String> {
    let seconds = |flag: &str, value: f64| match value.is_finite() && value > 0.0 {
        true => Ok(Duration::from_secs_f64(value)),
        false => Err(format!("{flag} must be a positive number of seconds, not {value}")),
    };
    Ok(listen::ListenOptions {
        zmq: args.zmq.clone(),
        block_size: args.block_size,
        interval: seconds("--interval", args.interval)?,
        duration: args.duration.map(|d| seconds("--duration", d)).transpose()?,
        metrics: args.metrics.clone(),
    })
}

fn policies(args: &ReplayArgs) -> Result<Vec<Policy>, String> {
    let mut policies = Vec::new();
    for name in &args.policies {
        let policy = Policy::from_name(name.trim()).ok_or_else(|| {
            let known: Vec<_> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {name:?} (known: {})", known.join(", "))
        })?;
        if !policies.contains(&policy) {
            policies.push(policy);
        }
    }
    if args.approximate && !policies.contains(&Policy::Approximate) {
        policies.push(Policy::Approximate);
    }
    if policies.is_empty() {
        return Err("no policy to run".into());
    }
    policies.sort();
    Ok(policies)
}

fn replay(args: &ReplayArgs) -> Result<(), String> {
    let policies = policies(args)?;
    let mut config = SimConfig {
        workers: args.workers,
        block_size: args.block_size,
        speedup: args.speedup,
        seed: args.seed,
        event_delay: Duration::from_millis(args.event_delay_ms),
        overlap_score_weight: args.overlap_weight,
        queued_prefill_weight: Some(args.queued_prefill_weight),
        ..SimConfig::default()
    };
    config.engine.capacity = args.capacity;
    config.engine.prefill_tokens_per_s = args.prefill_tokens_per_s;
    config.validate().map_err(|e| e.to_string())?;
    if let Some(report) = &args.report {
        report::check_extension(report)?;
    }
    let mut trace =
        load_trace(&args.trace).map_err(|e| format!("{}: {e}", args.trace.display()))?;
    if let Some(limit) = args.limit {
        trace.truncate(limit);
    }
    if trace.is_empty() {
        return Err(format!("{}: the trace has no requests", args.trace.display()));
    }
    let input = SimInput::new(&trace, config.block_size).map_err(|e| e.to_string())?;

    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new((input.len() * policies.len()) as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} replaying {pos}/{len} requests [{bar:40}] {eta} left",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let results: Vec<SimResult> = policies
        .par_iter()
        .map(|&policy| {
            let mut reported = std::sync::atomic::AtomicUsize::new(0);
            let progress = |done: usize| {
                let before = reported.swap(done, std::sync::atomic::Ordering::Relaxed);
                bar.inc(done.saturating_sub(before) as u64);
            };
            let result = simulate(&input, policy, &config, &progress);
            *reported.get_mut() = 0;
            result
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();

    println!(
        "{} requests from {}, {} workers x {} blocks of {} tokens, speed-up {}x, KV events {} ms late, \
         router weights: overlap {}, queued prefill {}",
        input.len(),
        args.trace.display(),
        config.workers,
        config.engine.capacity,
        config.block_size,
        config.speedup,
        args.event_delay_ms,
        args.overlap_weight,
        args.queued_prefill_weight,
    );
    println!("{}", table::render(&results));
    if let Some(path) = &args.report {
        report::write(path, &results, &table::render(&results))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("report: {}", path.display());
    }
    Ok(())
}
