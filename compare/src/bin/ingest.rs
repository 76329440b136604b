//! Ingest only, for working on kvroute's lanes: the comparison's event stream applied to a fresh
//! `EventPool` `--reps` times in one process, printing each time and the fastest. Events are
//! cloned before the clock starts, or with `--clone-inside` in the timed loop as the comparison
//! does; `--engine-hashes` as in the comparison. With `--lanes 1` the lane thread is the
//! bottleneck and the producer has the other core, so the figure tracks a lane's cost per block
//! op with less scheduling noise. `--queue 4096,65536` alternates lane queue capacities rep by
//! rep and prints each one's median. `--trim` hands freed memory back to the kernel before each
//! rep (as the comparison does before its ingest), so event clones and lane structures start on
//! fresh pages; each rep prints the minor page faults of the producer and of each lane. On this
//! shared VM the machine's speed still drifts by tens of percent over minutes: compare builds in
//! alternating runs.
//!
//! `--shape` picks the workload shape (`kvroute::sim::shapes`; default the conversation trace).
//!
//! `--no-spread` turns off the lanes' moving apart (`PoolConfig::spread_lanes`), so its effect
//! can be measured within one build.
//!
//! `--recovery` alternates reps without and with `kvroute::recovery::EventRecovery` in front
//! of the pool (every stream's cursor primed by a `Cleared` barrier before the clock starts), so
//! the cost of the cursor check shows as the difference of the two medians.
//!
//! ```sh
//! cargo run --release -p kvroute-compare --bin ingest -- --dup 1 --lanes 1 --reps 7
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use kvroute::index::{EventPool, PoolConfig};
use kvroute::recovery::{EventRecovery, RecoveryConfig};
use kvroute::sim::shapes::Shape;
use kvroute::{RouterEvent, Worker};
use kvroute_compare::workload::{self, EngineHashes};

fn main() -> ExitCode {
    let (mut dup, mut lanes, mut reps) = (1u32, 1usize, 7usize);
    let mut queues = vec![PoolConfig::default().queue_capacity];
    let mut clone_inside = false;
    let mut trim_first = false;
    let mut with_recovery = false;
    let mut spread_lanes = true;
    let mut hashes = EngineHashes::Shared;
    let mut shape = Shape::Conversation;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--clone-inside" {
            clone_inside = true;
            continue;
        }
        if flag == "--recovery" {
            with_recovery = true;
            continue;
        }
        if flag == "--no-spread" {
            spread_lanes = false;
            continue;
        }
        if flag == "--trim" {
            trim_first = true;
            continue;
        }
        if flag == "--queue"
            && let Some(parsed) = args.next().as_deref().and_then(parse_list)
        {
            queues = parsed;
            continue;
        }
        if flag == "--engine-hashes"
            && let Some(parsed) = args.next().as_deref().and_then(EngineHashes::parse)
        {
            hashes = parsed;
            continue;
        }
        if flag == "--shape"
            && let Some(parsed) = args.next().as_deref().and_then(Shape::parse)
        {
            shape = parsed;
            continue;
        }
        let value = args.next().and_then(|v| v.parse::<usize>().ok());
        match (flag.as_str(), value) {
            ("--dup", Some(v)) => dup = v.max(1) as u32,
            ("--lanes", Some(v)) => lanes = v.max(1),
            ("--reps", Some(v)) => reps = v.max(1),
            _ => {
                eprintln!(
                    "usage: ingest [--dup N] [--lanes L] [--reps R] [--queue Q[,Q…]] [--clone-inside] \
                     [--trim] [--recovery] [--no-spread] [--engine-hashes shared|per-worker] \
                     [--shape conversation|documents|shared-fleet]"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    let workload = match workload::build(shape, dup, hashes) {
        Ok(workload) => workload,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let block_ops: usize = workload.events.iter().map(|e| e.block_ops()).sum();
    println!("{}", workload.description);
    let mut times = Vec::with_capacity(reps);
    let mut lane_cpus = Vec::with_capacity(reps);
    let mut by_queue: Vec<Vec<f64>> = vec![Vec::new(); queues.len()];
    let modes: &[bool] = if with_recovery { &[false, true] } else { &[false] };
    let mut by_mode: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut streams: Vec<(Worker, kvroute::StorageTier)> =
        workload.events.iter().map(|e| (e.worker(), e.tier)).collect();
    streams.sort();
    streams.dedup();
    for rep in 1..=reps {
        // Several capacities (and modes) take turns, so the machine's drift hits them alike.
        let turn = (rep - 1) % queues.len();
        let mode = (rep - 1) % modes.len();
        let recovering = modes[mode];
        let queue_capacity = queues[turn];
        let config = PoolConfig { lanes, queue_capacity, spread_lanes, ..PoolConfig::default() };
        let pool = match EventPool::new(config) {
            Ok(pool) => pool,
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        };
        // Cloned ahead (the producer only sends and the lanes are the bottleneck), or inside
        // the timed loop as the comparison does.
        let events = if clone_inside { Vec::new() } else { workload.events.clone() };
        if trim_first {
            kvroute_compare::memory::trim();
        }
        let recovery = EventRecovery::new(&pool, RecoveryConfig::default()).expect("defaults");
        if recovering {
            for &(worker, tier) in &streams {
                let mut barrier = RouterEvent::cleared(worker, 0);
                barrier.tier = tier;
                recovery.ingest(barrier).expect("lanes are alive");
            }
            pool.flush().expect("lanes are alive");
        }
        let submit = |event: RouterEvent| {
            if recovering {
                recovery.ingest(event).expect("lanes are alive");
            } else {
                pool.apply_blocking(event).expect("lanes are alive");
            }
        };
        let faults_start = minor_faults(this_thread());
        let producer_start = cpu_seconds(this_thread());
        let start = Instant::now();
        if clone_inside {
            for event in &workload.events {
                submit(event.clone());
            }
        }
        for event in events {
            submit(event);
        }
        pool.flush().expect("lanes are alive");
        let elapsed = start.elapsed().as_secs_f64();
        let producer_cpu = cpu_seconds(this_thread()) - producer_start;
        let producer_faults = minor_faults(this_thread()) - faults_start;
        let lane_faults: Vec<String> =
            lane_tasks().iter().map(|(_, task)| minor_faults(task).to_string()).collect();
        let stats = pool.stats();
        let per_lane = lane_cpu_seconds();
        let lane_cpu: f64 = per_lane.iter().sum();
        let split: Vec<String> = per_lane.iter().map(|cpu| format!("{:.0}", cpu * 1e3)).collect();
        lane_cpus.push(lane_cpu);
        println!(
            "rep {rep}: {:.1} ms, {:.2} M block-ops/s, lanes on cpu {:.1} ms ({} ms; {:.1} ns/op), producer {:.1} ms, faults producer {} lanes {}, {:.1} B/entry, {} nodes, {} runs",
            elapsed * 1e3,
            block_ops as f64 / elapsed / 1e6,
            lane_cpu * 1e3,
            split.join(" + "),
            lane_cpu * 1e9 / block_ops as f64,
            producer_cpu * 1e3,
            producer_faults,
            lane_faults.join(" + "),
            stats.bytes as f64 / stats.live_entries.max(1) as f64,
            stats.nodes,
            stats.runs,
        );
        if recovering {
            let stats = recovery.stats();
            let sum = |f: fn(&kvroute::recovery::StreamStats) -> u64| -> u64 {
                stats.streams.iter().map(|(_, s)| f(s)).sum()
            };
            println!(
                "  (with recovery: {} streams, {} gaps, {} duplicates, settled: {})",
                stats.streams.len(),
                sum(|s| s.gaps),
                sum(|s| s.duplicates),
                stats.settled()
            );
        }
        times.push(elapsed);
        by_queue[turn].push(block_ops as f64 / elapsed / 1e6);
        by_mode[mode].push(block_ops as f64 / elapsed / 1e6);
        drop(recovery);
        drop(pool);
    }
    if queues.len() > 1 {
        for (queue, mut rates) in queues.iter().zip(by_queue) {
            rates.sort_by(f64::total_cmp);
            let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
            println!("queue {queue}: median {median:.2} M block-ops/s over {} reps", rates.len());
        }
    }
    if modes.len() > 1 {
        for (recovering, mut rates) in modes.iter().zip(by_mode) {
            rates.sort_by(f64::total_cmp);
            let median = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
            let name = if *recovering { "through recovery" } else { "straight to the pool" };
            println!("{name}: median {median:.2} M block-ops/s over {} reps", rates.len());
        }
    }
    times.sort_by(f64::total_cmp);
    lane_cpus.sort_by(f64::total_cmp);
    let (best, median) = (times[0], times[times.len() / 2]);
    println!(
        "{lanes} lane(s), {block_ops} block ops: best {:.2}, median {:.2} M block-ops/s; lane cpu \
         per op: best {:.1}, median {:.1} ns",
        block_ops as f64 / best / 1e6,
        block_ops as f64 / median / 1e6,
        lane_cpus[0] * 1e9 / block_ops as f64,
        lane_cpus[lane_cpus.len() / 2] * 1e9 / block_ops as f64,
    );
    ExitCode::SUCCESS
}

/// `a,b,c` as numbers of at least 1.
fn parse_list(list: &str) -> Option<Vec<usize>> {
    list.split(',').map(|item| item.parse::<usize>().ok().filter(|&n| n > 0)).collect()
}

/// CPU time so far of each of this process's live lane threads, in lane order (Linux
/// `schedstat`; none elsewhere).
fn lane_cpu_seconds() -> Vec<f64> {
    lane_tasks().iter().map(|(_, task)| cpu_seconds(task)).collect()
}

/// This process's live lane threads as (lane index, `/proc` task directory), in lane order.
fn lane_tasks() -> Vec<(usize, PathBuf)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut lanes = Vec::new();
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if let Some(index) = comm.trim().strip_prefix("kvroute-lane-") {
            lanes.push((index.parse::<usize>().unwrap_or(usize::MAX), path));
        }
    }
    lanes.sort_by_key(|&(index, _)| index);
    lanes
}

/// The calling thread's `/proc` task directory.
fn this_thread() -> &'static Path {
    Path::new("/proc/thread-self")
}

/// CPU time so far of the thread whose `/proc` task directory is `task` (Linux `schedstat`; 0
/// if unreadable).
fn cpu_seconds(task: &Path) -> f64 {
    let schedstat = std::fs::read_to_string(task.join("schedstat")).unwrap_or_default();
    let nanos: u64 = schedstat.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    nanos as f64 / 1e9
}

/// Minor page faults so far of the thread whose `/proc` task directory is `task` (0 if
/// unreadable).
fn minor_faults(task: &Path) -> u64 {
    let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
    // Fields after the parenthesised command name; minflt is the 10th field overall.
    let fields = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    fields.split_whitespace().nth(7).and_then(|f| f.parse().ok()).unwrap_or(0)
}
