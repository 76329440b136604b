//! `kvroute bench`: a Mooncake trace replayed over HTTP against an OpenAI-compatible endpoint
//! (see `kvroute_gateway::bench`), with a progress bar, a table and, optionally, an SVG.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kvroute::sim::bundled_trace_path;
use kvroute_gateway::bench::report as probes_percentiles;
use kvroute_gateway::bench::{self, BenchConfig, BenchReport, probes};
use kvroute_gateway::openai::Endpoint;

use crate::table::render_rows;

/// `kvroute bench`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The endpoint's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The model name to send (default: the tokenizer directory, as `kvroute serve` names it).
    #[arg(long)]
    pub model: Option<String>,
    /// Mooncake-format JSONL trace (timestamp, input_length, output_length, hash_ids).
    #[arg(long, default_value_os_t = bundled_trace_path())]
    pub trace: PathBuf,
    /// The tokenizer the prompts are made for.
    #[arg(long, default_value_os_t = super::mocker::default_tokenizer())]
    pub tokenizer: PathBuf,
    /// Arrivals this many times faster than the trace's timestamps.
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// Replay only the first N requests.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Cap on each request's output tokens.
    #[arg(long)]
    pub max_output: Option<u32>,
    /// An engine whose /metrics give the fleet's prefix-cache hit rate (repeat per engine).
    #[arg(long = "engine")]
    pub engines: Vec<String>,
    /// Send to /v1/completions instead of /v1/chat/completions.
    #[arg(long)]
    pub completions: bool,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
    /// Draw each request's TTFT over the replay to this SVG file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Instead of the trace: the latency --url adds, as TTFT through it minus TTFT of the same
    /// kind of request sent straight to this engine, interleaved (--limit pairs, default 500).
    #[arg(long, value_name = "ENGINE_URL")]
    pub direct: Option<String>,
    /// Instead of the trace: requests/s sustained by --url with this many clients in a closed
    /// loop (short chats, one output token), one row per value (e.g. 8,16,32,64).
    #[arg(long, value_delimiter = ',')]
    pub throughput: Vec<usize>,
    /// Seconds each --throughput step runs.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
}

impl BenchArgs {
    /// The gateway crate's configuration.
    pub fn config(&self) -> Result<BenchConfig, String> {
        let model = self.model.clone().unwrap_or_else(|| self.tokenizer.display().to_string());
        let mut config = BenchConfig::new(&self.url, model, &self.trace, &self.tokenizer);
        config.speedup = self.speedup;
        config.limit = self.limit;
        config.max_output = self.max_output;
        config.engines = self.engines.clone();
        config.endpoint = if self.completions { Endpoint::Completions } else { Endpoint::Chat };
        config.timeout = Duration::try_from_secs_f64(self.timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("--timeout {} is not a positive duration", self.timeout))?;
        Ok(config)
    }
}

/// A progress bar for `total` requests labelled `label` (hidden when `quiet`).
pub fn progress_bar(label: &str, quiet: bool) -> ProgressBar {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {label} {{pos}}/{{len}} requests [{{bar:40}}] {{eta}} left"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Replays on `runtime`, showing progress.
pub fn replay(
    runtime: &tokio::runtime::Runtime,
    config: &BenchConfig,
    label: &str,
    quiet: bool,
) -> Result<BenchReport, String> {
    let bar = progress_bar(label, quiet);
    let shown = bar.clone();
    let report = runtime.block_on(bench::run(config, move |done, total| {
        shown.set_length(total as u64);
        shown.set_position(done as u64);
    }));
    bar.finish_and_clear();
    report
}

/// The table of `(name, report)` rows.
pub fn table(reports: &[(String, BenchReport)]) -> String {
    let rows: Vec<Vec<String>> = reports.iter().map(|(name, report)| report.row(name)).collect();
    render_rows(&BenchReport::header(), &rows)
}

/// Runs `kvroute bench`.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let config = args.config()?;
    let runtime = runtime()?;
    if let Some(engine) = &args.direct {
        return probe_overhead(&runtime, args, &config, engine);
    }
    if !args.throughput.is_empty() {
        return probe_throughput(&runtime, args, &config);
    }
    let report = replay(&runtime, &config, "replaying", args.quiet)?;
    println!("{}", table(&[(args.url.clone(), report.clone())]));
    if report.errors() > 0 {
        println!("errors: {}", report.error_kinds().join("; "));
    }
    if let Some(path) = &args.report {
        draw(path, &[(args.url.clone(), report)])?;
        println!("report: {}", path.display());
    }
    Ok(())
}

/// `--direct`: the gateway's added TTFT, and tokenization alone.
fn probe_overhead(
    runtime: &tokio::runtime::Runtime,
    args: &BenchArgs,
    config: &BenchConfig,
    engine: &str,
) -> Result<(), String> {
    let tokenizer = kvroute_gateway::tokenize::Tokenizer::from_dir(&args.tokenizer)
        .map_err(|e| e.to_string())?;
    let pairs = args.limit.unwrap_or(500);
    let spinner = progress_bar("probing", args.quiet);
    let probe = probes::overhead(&args.url, engine, &config.model, &tokenizer, pairs, 64);
    let result = runtime.block_on(probe)?;
    spinner.finish_and_clear();
    let ms = |p: probes_percentiles::Percentiles| {
        vec![format!("{:.3}", p.p50 * 1e3), format!("{:.3}", p.p99 * 1e3)]
    };
    let rows = vec![
        [vec![format!("TTFT through {}", args.url)], ms(result.through)].concat(),
        [vec![format!("TTFT straight to {engine}")], ms(result.direct)].concat(),
        [vec!["added by the gateway (per pair)".to_owned()], ms(result.added)].concat(),
        [vec!["of which tokenization (in process)".to_owned()], ms(result.tokenize)].concat(),
    ];
    println!(
        "{pairs} interleaved pairs of short chats (64 words: about 520 prompt tokens with the \
         bundled tokenizer; 1 output token)"
    );
    println!("{}", render_rows(&["what", "p50 ms", "p99 ms"], &rows));
    Ok(())
}

/// `--throughput`: requests/s and errors per concurrency.
fn probe_throughput(
    runtime: &tokio::runtime::Runtime,
    args: &BenchArgs,
    config: &BenchConfig,
) -> Result<(), String> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(format!("--seconds {} must be > 0", args.seconds));
    }
    let mut rows = Vec::new();
    for &concurrency in &args.throughput {
        let step = runtime.block_on(probes::throughput(
            &args.url,
            &config.model,
            concurrency.max(1),
            args.seconds,
            16,
        ));
        rows.push(vec![
            concurrency.to_string(),
            format!("{:.0}", step.requests_per_s),
            format!("{:.2}", step.error_rate * 100.0),
        ]);
    }
    println!(
        "closed loop against {}: short chats, 1 output token, {} s a step",
        args.url, args.seconds
    );
    println!("{}", render_rows(&["clients", "req/s", "errors %"], &rows));
    Ok(())
}

/// The runtime the HTTP work runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Waits `duration`, or until Ctrl-C when there is none (how `serve` and `mocker` run).
pub async fn until_stopped(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Each request's TTFT against its send time, one series per report, as an SVG.
pub fn draw(path: &Path, reports: &[(String, BenchReport)]) -> Result<(), String> {
    use plotters::prelude::*;
    let points: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|(_, r)| {
            r.samples
                .iter()
                .filter_map(|s| Some((s.sent.as_secs_f64(), s.ttft?.as_secs_f64())))
                .collect()
        })
        .collect();
    let x_max = points.iter().flatten().map(|p| p.0).fold(1e-3, f64::max);
    let y_max = points.iter().flatten().map(|p| p.1).fold(1e-3, f64::max);
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("time to first token per request", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max * 1.05)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("sent at (s of replay)")
        .y_desc("TTFT (s)")
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, ((name, _), series)) in reports.iter().zip(&points).enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(series.iter().map(|&(x, y)| Circle::new((x, y), 2, color.filled())))
            .map_err(|e| fail(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
    }
    chart.configure_series_labels().border_style(BLACK).draw().map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}
