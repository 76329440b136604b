//! `kvroute demo`: the whole stack on loopback in one command. For each policy it starts K
//! `kvroute mocker` engines and a `kvroute serve` gateway as child processes, replays the trace
//! through the gateway with `kvroute bench`, stops them, and prints one row per policy.
//! Children are killed when the demo ends, fails or is interrupted (Ctrl-C).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use kvroute::sim::bundled_trace_path;
use kvroute_gateway::bench::BenchReport;

use crate::bench::{BenchArgs, draw, replay, runtime, table};

/// `kvroute demo`'s flags.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Mock engines to start.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Mooncake-format JSONL trace.
    #[arg(long, default_value_os_t = bundled_trace_path())]
    trace: PathBuf,
    /// Replay only the first N requests.
    #[arg(long, default_value_t = 300)]
    limit: usize,
    /// Engines and arrivals this many times faster than the trace and the engine model (the
    /// default keeps a 2-core machine, which runs the engines too, from saturating).
    #[arg(long, default_value_t = 3.0)]
    speedup: f64,
    /// Cap on each request's output tokens (the stream volume a 2-core machine carries).
    #[arg(long, default_value_t = 32)]
    max_output: u32,
    /// Each engine's KV cache, in 16-token blocks.
    #[arg(long, default_value_t = 65_536)]
    num_blocks: usize,
    /// The longest prompt plus output the engines and the gateway take (the bundled trace's
    /// longest prompt is 126,195 tokens).
    #[arg(long, default_value_t = 131_072)]
    max_model_len: usize,
    /// The policies, in order: kvroute's (kv-aware, approximate, round-robin), and the peer
    /// gateway `vllm-router:POLICY` (kv_aware, cache_aware, round_robin; `pip install
    /// vllm-router`) in front of the same kind of engines.
    #[arg(long, value_delimiter = ',', default_value = "kv-aware,approximate,round-robin")]
    policies: Vec<String>,
    /// The gateway's weight of prompt blocks a worker would compute (`kvroute serve
    /// --overlap-weight`; its default when not given).
    #[arg(long)]
    overlap_weight: Option<f64>,
    /// The gateway's weight of prefill already queued on a worker (`kvroute serve
    /// --queued-prefill-weight`; its default when not given).
    #[arg(long)]
    queued_prefill_weight: Option<f64>,
    /// Draw every policy's TTFT per request to this SVG file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

/// A child process, killed when dropped.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `kvroute ARGS…` and waits for its `READY` line; returns it and the line's words.
fn start(args: &[String]) -> Result<(Spawned, Vec<String>), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start kvroute {}: {e}", args[0]))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let child = Spawned(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
    if !line.starts_with("READY ") {
        return Err(format!("kvroute {} did not start: {line:?}", args[0]));
    }
    Ok((child, line.split_whitespace().map(str::to_owned).collect()))
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<(), String> {
    if args.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    let runtime = runtime()?;
    let tokenizer = super::mocker::default_tokenizer();
    let model = tokenizer.display().to_string();
    let events = r#"{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", "replay_endpoint": "tcp://127.0.0.1:*"}"#;
    let mut reports: Vec<(String, BenchReport)> = Vec::new();
    for policy in &args.policies {
        let mut children = Vec::new();
        let (mut workers, mut engines) = (Vec::new(), Vec::new());
        for _ in 0..args.workers {
            let (child, words) = start(&[
                "mocker".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--speedup".into(),
                args.speedup.to_string(),
                "--num-blocks".into(),
                args.num_blocks.to_string(),
                "--max-model-len".into(),
                args.max_model_len.to_string(),
                "--kv-events-config".into(),
                events.into(),
            ])?;
            children.push(child);
            let url = words.get(1).cloned().ok_or("no URL")?;
            let zmq = words.iter().find_map(|w| w.strip_prefix("kv-events=")).unwrap_or_default();
            let replay = words.iter().find_map(|w| w.strip_prefix("replay=")).unwrap_or_default();
            workers.push(format!("{url},zmq={zmq},replay={replay}"));
            engines.push(url);
        }
        let (gateway, url) = match policy.strip_prefix("vllm-router:") {
            Some(peer_policy) => start_vllm_router(peer_policy, &workers, &model, &runtime)?,
            None => start_serve(policy, &workers, args)?,
        };
        children.push(gateway);
        let bench = BenchArgs {
            url,
            model: Some(model.clone()),
            trace: args.trace.clone(),
            tokenizer: tokenizer.clone(),
            speedup: args.speedup,
            limit: Some(args.limit),
            max_output: Some(args.max_output),
            engines,
            completions: false,
            timeout: 600.0,
            report: None,
            quiet: args.quiet,
            direct: None,
            throughput: Vec::new(),
            seconds: 10.0,
        };
        let config = bench.config()?;
        let (label, quiet) = (policy.clone(), args.quiet);
        let report = runtime.block_on(async move {
            let work = tokio::task::spawn_blocking(move || replay_inner(&config, &label, quiet));
            tokio::select! {
                report = work => Some(report.map_err(|e| e.to_string()).and_then(|r| r)),
                _ = tokio::signal::ctrl_c() => None,
            }
        });
        drop(children);
        let Some(report) = report else {
            // The children are gone; the replay's threads need not finish.
            eprintln!("kvroute demo: interrupted");
            std::process::exit(130);
        };
        let report = report?;
        reports.push((policy.clone(), report));
    }
    println!(
        "{} requests of {}, {} mock engines x {} blocks, speed-up {}x, output capped at {} tokens",
        args.limit,
        args.trace.display(),
        args.workers,
        args.num_blocks,
        args.speedup,
        args.max_output
    );
    println!("{}", table(&reports));
    for (policy, report) in &reports {
        if report.errors() > 0 {
            println!("{policy} errors: {}", report.error_kinds().join("; "));
        }
    }
    if let Some(path) = &args.report {
        draw(path, &reports)?;
        println!("report: {}", path.display());
    }
    Ok(())
}

/// `kvroute serve --policy POLICY` in front of `workers`, with the demo's limits and weights.
fn start_serve(
    policy: &str,
    workers: &[String],
    demo: &DemoArgs,
) -> Result<(Spawned, String), String> {
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--policy".into(),
        policy.into(),
        "--max-model-len".into(),
        demo.max_model_len.to_string(),
    ];
    if let Some(weight) = demo.overlap_weight {
        args.extend(["--overlap-weight".into(), weight.to_string()]);
    }
    if let Some(weight) = demo.queued_prefill_weight {
        args.extend(["--queued-prefill-weight".into(), weight.to_string()]);
    }
    for worker in workers {
        args.extend(["--worker".into(), worker.clone()]);
    }
    let (child, words) = start(&args)?;
    Ok((child, words.get(1).cloned().ok_or("no URL")?))
}

/// The peer gateway, `vllm-router --policy POLICY`, in front of `workers` (`URL,zmq=…,replay=…`),
/// given their event sources for `kv_aware` as ../shared/notes/peers.md says. Ready once its
/// /health answers.
fn start_vllm_router(
    policy: &str,
    workers: &[String],
    model: &str,
    runtime: &tokio::runtime::Runtime,
) -> Result<(Spawned, String), String> {
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port())
    };
    let (http, prometheus) =
        (port().map_err(|e| e.to_string())?, port().map_err(|e| e.to_string())?);
    let mut command = Command::new("vllm-router");
    command.args(["--host", "127.0.0.1", "--port", &http.to_string()]);
    command.args(["--prometheus-port", &prometheus.to_string(), "--policy", policy]);
    command.args([
        "--kv-event-block-size",
        "16",
        "--kv-event-model",
        model,
        "--log-level",
        "error",
    ]);
    command.arg("--worker-urls");
    let parsed: Vec<(&str, &str, &str)> = workers
        .iter()
        .map(|w| {
            let mut parts = w.split(',');
            let url = parts.next().unwrap_or_default();
            let zmq = parts.next().and_then(|p| p.strip_prefix("zmq=")).unwrap_or_default();
            let replay = parts.next().and_then(|p| p.strip_prefix("replay=")).unwrap_or_default();
            (url, zmq, replay)
        })
        .collect();
    command.args(parsed.iter().map(|p| p.0));
    if policy == "kv_aware" {
        for (url, zmq, replay) in &parsed {
            command.args(["--kv-event-source", &format!("{url}={zmq}")]);
            command.args(["--kv-event-replay-source", &format!("{url}={replay}")]);
        }
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start vllm-router ({e}): pip install vllm-router"))?;
    let child = Spawned(child);
    let url = format!("http://127.0.0.1:{http}");
    let ready = runtime.block_on(async {
        let client = reqwest::Client::new();
        for _ in 0..300 {
            if client
                .get(format!("{url}/health"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        false
    });
    if !ready {
        return Err("vllm-router did not become healthy in 30 s".into());
    }
    Ok((child, url))
}

/// One replay on a runtime of its own (the demo's runtime waits for Ctrl-C meanwhile).
fn replay_inner(
    config: &kvroute_gateway::bench::BenchConfig,
    policy: &str,
    quiet: bool,
) -> Result<BenchReport, String> {
    let runtime = runtime()?;
    replay(&runtime, config, policy, quiet)
}
