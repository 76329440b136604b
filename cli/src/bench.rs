//! `kvroute bench`: a Mooncake trace replayed over HTTP against an OpenAI-compatible endpoint
//! (see `kvroute_gateway::bench`), with a progress bar, a table and, optionally, an SVG.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kvroute::sim::bundled_trace_path;
use kvroute_gateway::bench::{self, BenchConfig, BenchReport};
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

/// The runtime the HTTP work runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
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
