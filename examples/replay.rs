//! Replays the bundled Mooncake conversation trace through a mock fleet, feeds the KV event
//! stream to the reference index and times ingest and `find_matches`.
//!
//! ```text
//! cargo run --release --features sim --example replay -- [--sub-blocks K] [--workers W] [--cache-blocks C]
//!                                         [--dup N] [--round-robin] [--trace PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kvroute::index::{EventPool, PoolConfig, ReferenceIndex};
use kvroute::sim::trace::load_trace;
use kvroute::sim::{FleetConfig, Routing, bundled_trace_path, try_replay_fleet};

const USAGE: &str = "usage: replay [--sub-blocks K] [--workers W] [--cache-blocks C] [--dup N] \
                     [--round-robin] [--trace PATH]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("replay: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The command line: a fleet configuration and the trace to replay.
fn parse_args() -> Result<(FleetConfig, PathBuf), String> {
    let mut config = FleetConfig::default();
    let mut trace = bundled_trace_path();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let number = |text: String| {
            text.replace('_', "").parse::<u64>().map_err(|err| format!("{flag} {text}: {err}"))
        };
        match flag.as_str() {
            "--sub-blocks" => {
                config.sub_blocks = u32::try_from(number(value()?)?).map_err(|e| e.to_string())?
            }
            "--workers" => config.workers = number(value()?)? as usize,
            "--cache-blocks" => config.cache_blocks = number(value()?)? as usize,
            "--dup" => config.dup = u32::try_from(number(value()?)?).map_err(|e| e.to_string())?,
            "--round-robin" => config.routing = Routing::RoundRobin,
            "--trace" => trace = PathBuf::from(value()?),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    config.validate().map_err(|err| err.to_string())?;
    Ok((config, trace))
}

fn run() -> Result<(), String> {
    let (config, path) = parse_args()?;
    let trace = load_trace(&path).map_err(|err| err.to_string())?;

    let start = Instant::now();
    let replay = try_replay_fleet(&trace, &config).map_err(|err| err.to_string())?;
    let simulate = start.elapsed();
    let stats = &replay.stats;

    let mut index = ReferenceIndex::new();
    let mut errors = 0usize;
    let start = Instant::now();
    for event in &replay.events {
        errors += usize::from(index.apply(event).is_err());
    }
    let ingest = start.elapsed();

    let mut latencies = Vec::with_capacity(replay.queries.len());
    let mut matched = 0u64;
    for query in &replay.queries {
        let start = Instant::now();
        let scores = index.find_matches(query);
        latencies.push(start.elapsed());
        matched += u64::from(scores.max_depth());
    }
    latencies.sort_unstable();

    // The concurrent index (2 lanes) on the same stream, checked against the reference.
    let pool = EventPool::new(PoolConfig::default()).map_err(|err| err.to_string())?;
    let start = Instant::now();
    for event in &replay.events {
        pool.apply_blocking(event.clone()).map_err(|err| err.to_string())?;
    }
    pool.flush().map_err(|err| err.to_string())?;
    let pool_ingest = start.elapsed();
    let mut pool_latencies = Vec::with_capacity(replay.queries.len());
    let mut disagreements = 0u64;
    for query in &replay.queries {
        let start = Instant::now();
        let scores = pool.find_matches(query);
        pool_latencies.push(start.elapsed());
        disagreements += u64::from(scores != index.find_matches(query));
    }
    pool_latencies.sort_unstable();
    let pool_stats = pool.stats();
    let pool_errors: u64 = pool_stats.errors.iter().sum();

    let routing = match config.routing {
        Routing::RoundRobin => "round-robin".to_owned(),
        _ => format!("bounded share (slack {})", config.share_slack),
    };
    println!("trace   {} ({} requests)", path.display(), trace.len());
    println!(
        "fleet   {} workers x {} blocks of {} tokens (K={}), dup {}, {routing}",
        config.workers,
        config.cache_blocks,
        config.block_size(),
        config.sub_blocks,
        config.dup
    );
    println!();
    let rows: Vec<(&str, String)> = vec![
        ("requests", group(stats.requests)),
        ("requested blocks", group(stats.requested_blocks)),
        ("events", group(stats.events)),
        ("block ops (stored + removed)", group(stats.block_ops())),
        ("live (worker, block) entries", group(stats.live_entries)),
        (
            "index entries / nodes",
            format!("{} / {}", group(index.entry_count() as u64), group(index.node_count() as u64)),
        ),
        ("apply errors", group(errors as u64)),
        ("fleet hit rate", hits(stats.hit_blocks, stats.hit_rate())),
        (
            "oracle hit rate (unlimited cache)",
            hits(stats.oracle_hit_blocks, stats.oracle_hit_rate()),
        ),
        (
            "fleet / oracle",
            percent(stats.hit_rate() / stats.oracle_hit_rate().max(f64::MIN_POSITIVE)),
        ),
        ("simulate fleet", seconds(simulate)),
        ("ingest (ReferenceIndex)", seconds(ingest)),
        ("ingest events/s", group(per_second(stats.events, ingest))),
        ("ingest block-ops/s", group(per_second(stats.block_ops(), ingest))),
        ("find_matches p50", micros(percentile(&latencies, 0.50))),
        ("find_matches p99", micros(percentile(&latencies, 0.99))),
        ("ingest (EventPool, 2 lanes)", seconds(pool_ingest)),
        ("  block-ops/s", group(per_second(stats.block_ops(), pool_ingest))),
        ("  find_matches p50", micros(percentile(&pool_latencies, 0.50))),
        ("  find_matches p99", micros(percentile(&pool_latencies, 0.99))),
        (
            "  bytes per live entry",
            format!("{:.1}", pool_stats.bytes as f64 / pool_stats.live_entries.max(1) as f64),
        ),
        (
            "  nodes / runs",
            format!(
                "{} / {} ({:.1} nodes per run)",
                group(pool_stats.nodes),
                group(pool_stats.runs),
                pool_stats.nodes as f64 / pool_stats.runs.max(1) as f64
            ),
        ),
        ("  apply errors", group(pool_errors)),
        ("  answers differing from reference", group(disagreements)),
        (
            "find_matches best depth, mean",
            format!("{:.1} blocks", matched as f64 / latencies.len().max(1) as f64),
        ),
    ];
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let value_width = rows.iter().map(|(_, value)| value.len()).max().unwrap_or(0);
    for (name, value) in &rows {
        println!("{name:<width$}  {value:>value_width$}");
    }
    if errors > 0 || pool_errors > 0 {
        return Err(format!("{errors} + {pool_errors} events were rejected by the indexes"));
    }
    if disagreements > 0 {
        return Err(format!("{disagreements} queries answered differently by the two indexes"));
    }
    Ok(())
}

/// The nearest-rank `p` quantile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied().unwrap_or_default()
}

fn per_second(count: u64, elapsed: Duration) -> u64 {
    (count as f64 / elapsed.as_secs_f64().max(1e-9)) as u64
}

/// `1234567` as `1,234,567`.
fn group(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn percent(fraction: f64) -> String {
    format!("{:.1} %", 100.0 * fraction)
}

/// A hit rate with its block count: `34.5 % (778,314)`.
fn hits(blocks: u64, fraction: f64) -> String {
    format!("{} ({})", percent(fraction), group(blocks))
}

fn seconds(elapsed: Duration) -> String {
    format!("{:.2} s", elapsed.as_secs_f64())
}

fn micros(elapsed: Duration) -> String {
    format!("{:.1} µs", elapsed.as_secs_f64() * 1e6)
}
