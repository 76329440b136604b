//! `kvroute listen`: engines' KV event streams over ZMQ into a router's index, shown live.
//!
//! Each `--zmq` endpoint is one engine's publisher (and, optionally, its replay socket); the
//! subscriber applies their events to a [`KvRouter`] through recovery cursors. Every interval
//! the view (one row per endpoint and a total) is redrawn in place on a terminal, or appended
//! when the output is not one; `--metrics ADDR` serves the same counters to Prometheus. With
//! `--nats URL` the router also joins the replicas on that server, and the view adds their
//! requests in flight per worker. The command runs until interrupted, or for `--duration`
//! seconds.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvroute::wire::zmq::{SubscriberConfig, SubscriberStats, ZmqEndpoint, ZmqSubscriber};
use kvroute::{KvRouter, RouterConfig, Worker, WorkerId};

use crate::metrics::{self, Kind, Metric, MetricsServer};
use crate::replicas::NatsArgs;

/// What `kvroute listen` was asked for.
#[derive(Debug)]
pub struct ListenOptions {
    /// `[ID=]PUB[,replay=ADDR][,rank=N][,topic=T]`, one per engine endpoint.
    pub zmq: Vec<String>,
    /// The engines' tokens per KV block (the router's; events carry their own).
    pub block_size: u32,
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub metrics: Option<String>,
}

/// Parses one `--zmq` value; `index` is its position, the worker id when none is given.
pub fn parse_endpoint(spec: &str, index: usize) -> Result<ZmqEndpoint, String> {
    let mut parts = spec.split(',');
    let first = parts.next().unwrap_or_default().trim();
    let (worker, publisher) = match first.split_once('=') {
        Some((id, address)) if !id.contains(':') => {
            let id = id.trim().parse::<u64>().map_err(|_| {
                format!("--zmq {spec:?}: worker id {id:?} is not a non-negative integer")
            })?;
            (id, address.trim())
        }
        _ => (index as u64, first),
    };
    if !publisher.contains("://") {
        return Err(format!(
            "--zmq {spec:?}: expected an address like tcp://host:5557, got {publisher:?}"
        ));
    }
    let mut endpoint = ZmqEndpoint::new(WorkerId(worker), publisher);
    for option in parts {
        match option.trim().split_once('=') {
            Some(("replay", address)) if address.contains("://") => {
                endpoint = endpoint.with_replay(address);
            }
            Some(("rank", rank)) => {
                let rank = rank
                    .parse()
                    .map_err(|_| format!("--zmq {spec:?}: rank {rank:?} is not an integer"))?;
                endpoint = endpoint.with_dp_rank(rank);
            }
            Some(("topic", topic)) => endpoint = endpoint.with_topic(topic.as_bytes()),
            _ => {
                return Err(format!(
                    "--zmq {spec:?}: unknown option {option:?} (replay=ADDR, rank=N or topic=T)"
                ));
            }
        }
    }
    Ok(endpoint)
}

/// Refuses two `--zmq` endpoints that feed one (worker, rank): their engines would merge into
/// one worker, and one's restore would clear the other's blocks.
pub fn distinct_streams(specs: &[String], endpoints: &[ZmqEndpoint]) -> Result<(), String> {
    for (at, endpoint) in endpoints.iter().enumerate() {
        let same = |other: &ZmqEndpoint| {
            (other.worker, other.dp_rank) == (endpoint.worker, endpoint.dp_rank)
        };
        if let Some(first) = endpoints[..at].iter().position(same) {
            return Err(format!(
                "--zmq {:?} and --zmq {:?} both feed worker {} rank {}: give each engine its own \
                 id (ID=ADDR) or rank (rank=N)",
                specs[first], specs[at], endpoint.worker.0, endpoint.dp_rank
            ));
        }
    }
    Ok(())
}

/// Subscribes, then redraws the view every interval until `duration` (or forever).
pub fn run(options: &ListenOptions, nats: &NatsArgs) -> Result<(), String> {
    if options.zmq.is_empty() {
        return Err("listen needs at least one --zmq endpoint".into());
    }
    let endpoints = options
        .zmq
        .iter()
        .enumerate()
        .map(|(index, spec)| parse_endpoint(spec, index))
        .collect::<Result<Vec<_>, _>>()?;
    distinct_streams(&options.zmq, &endpoints)?;
    let workers: Vec<Worker> =
        endpoints.iter().map(|e| Worker::new(e.worker.0, e.dp_rank)).collect();
    // With `--nats`, the router joins its replicas (kept in `_joined` until the command ends).
    let (router, _joined) = nats.build_router(RouterConfig::new(options.block_size), |router| {
        workers.iter().for_each(|&worker| router.add_worker(worker));
    })?;
    let show_loads = nats.joins();
    let config = SubscriberConfig { endpoints, ..SubscriberConfig::default() };
    let subscriber =
        Arc::new(ZmqSubscriber::start(config, router.clone()).map_err(|e| e.to_string())?);
    let _server = match &options.metrics {
        Some(addr) => {
            let (subscriber, router) = (subscriber.clone(), router.clone());
            let server =
                MetricsServer::start(addr, move || render_metrics(&subscriber.stats(), &router))
                    .map_err(|e| format!("--metrics {addr}: {e}"))?;
            eprintln!("metrics at http://{}/metrics", server.local_addr());
            Some(server)
        }
        None => None,
    };
    let started = Instant::now();
    let terminal = std::io::stdout().is_terminal();
    let mut earlier = subscriber.stats();
    let mut drawn_lines = 0;
    loop {
        let left = options.duration.map(|d| d.saturating_sub(started.elapsed()));
        std::thread::sleep(left.map_or(options.interval, |left| left.min(options.interval)));
        let now = subscriber.stats();
        let mut view = render_view(&now, &earlier, &router);
        if show_loads {
            view.push_str(&render_loads(&router));
        }
        let mut out = std::io::stdout().lock();
        if terminal && drawn_lines > 0 {
            // Up over the last view and clear to the end: redrawn in place.
            let _ = write!(out, "\x1b[{drawn_lines}A\x1b[J");
        }
        let _ = write!(out, "{view}");
        let _ = out.flush();
        drawn_lines = view.lines().count();
        earlier = now;
        if options.duration.is_some_and(|d| started.elapsed() >= d) {
            return Ok(());
        }
    }
}

/// The view: one row per endpoint, then the index's size.
pub fn render_view(now: &SubscriberStats, earlier: &SubscriberStats, router: &KvRouter) -> String {
    let secs = now.uptime.saturating_sub(earlier.uptime).as_secs_f64().max(1e-9);
    let headers = [
        "worker",
        "endpoint",
        "events",
        "events/s",
        "block ops",
        "gaps",
        "healed",
        "errors",
        "restores",
        "replay fails",
        "stashed",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for endpoint in &now.endpoints {
        let before = earlier.endpoints.iter().find(|e| e.publisher == endpoint.publisher);
        let rate = endpoint.events.saturating_sub(before.map_or(0, |e| e.events)) as f64 / secs;
        rows.push(vec![
            endpoint.worker.0.to_string(),
            endpoint.publisher.clone(),
            endpoint.events.to_string(),
            format!("{rate:.0}"),
            endpoint.block_ops.to_string(),
            (endpoint.gaps + endpoint.unrecovered_gaps).to_string(),
            endpoint.gaps_healed.to_string(),
            endpoint.decode_errors.to_string(),
            endpoint.restores.to_string(),
            endpoint.replay_failures.to_string(),
            endpoint.stashed.to_string(),
        ]);
    }
    let gaps: u64 = now.endpoints.iter().map(|e| e.gaps + e.unrecovered_gaps).sum();
    rows.push(vec![
        "all".into(),
        String::new(),
        now.events().to_string(),
        format!("{:.0}", now.events_per_sec(earlier)),
        now.block_ops().to_string(),
        gaps.to_string(),
        now.gaps_healed().to_string(),
        now.decode_errors().to_string(),
        now.restores().to_string(),
        now.replay_failures().to_string(),
        now.endpoints.iter().map(|e| e.stashed).sum::<u64>().to_string(),
    ]);
    let (workers, blocks) = index_size(router);
    let mut text = table(&headers, &rows, 2);
    text.push_str(&format!(
        "index: {workers} workers, {blocks} blocks held; up {:.0} s\n",
        now.uptime.as_secs_f64()
    ));
    text
}

/// The index's size: the workers it knows (device tier) and the blocks it holds (every tier).
fn index_size(router: &KvRouter) -> (usize, u64) {
    let blocks = router.index().stats().iter().map(|tier| tier.live_entries).sum();
    let workers = router.index().device().workers().map_or(0, |w| w.len());
    (workers, blocks)
}

/// The replicas' requests in flight per worker (`--nats`).
pub fn render_loads(router: &KvRouter) -> String {
    let rows: Vec<Vec<String>> = router
        .sequences()
        .loads()
        .iter()
        .map(|load| {
            let tokens = match load.active_tokens {
                usize::MAX => "overflow".to_string(),
                tokens => tokens.to_string(),
            };
            vec![
                load.worker.to_string(),
                load.active_requests.to_string(),
                load.active_blocks.to_string(),
                tokens,
            ]
        })
        .collect();
    table(&["worker", "requests", "active blocks", "prefill tokens"], &rows, 1)
}

/// Aligned columns: the first `left` left-aligned (names), the rest right-aligned (numbers).
fn table(headers: &[&str], rows: &[Vec<String>], left: usize) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells
            .zip(&widths)
            .enumerate()
            .map(|(at, (cell, &width))| match at < left {
                true => format!("{cell:<width$}"),
                false => format!("{cell:>width$}"),
            })
            .collect();
        cells.join("  ").trim_end().to_string() + "\n"
    };
    let mut text = line(&mut headers.iter().copied());
    text += &line(
        &mut widths.iter().map(|&w| &"----------------------------------------"[..w.min(40)]),
    );
    for row in rows {
        text += &line(&mut row.iter().map(String::as_str));
    }
    text
}

/// The counters for `--metrics`.
pub fn render_metrics(stats: &SubscriberStats, router: &KvRouter) -> String {
    let per_endpoint = |value: fn(&kvroute::wire::zmq::EndpointStats) -> u64| {
        stats
            .endpoints
            .iter()
            .map(|e| {
                let labels =
                    vec![("worker", e.worker.0.to_string()), ("endpoint", e.publisher.clone())];
                (labels, value(e) as f64)
            })
            .collect::<Vec<_>>()
    };
    let family =
        |name, help, kind, value| Metric { name, help, kind, samples: per_endpoint(value) };
    let (workers, blocks) = index_size(router);
    metrics::render(&[
        family("kvroute_events_total", "Events applied to the index.", Kind::Counter, |e| e.events),
        family("kvroute_block_ops_total", "Block operations applied.", Kind::Counter, |e| {
            e.block_ops
        }),
        family("kvroute_messages_total", "Messages received live.", Kind::Counter, |e| e.messages),
        family("kvroute_decode_errors_total", "Undecodable messages.", Kind::Counter, |e| {
            e.decode_errors
        }),
        family("kvroute_gaps_total", "Sequence gaps seen.", Kind::Counter, |e| {
            e.gaps + e.unrecovered_gaps
        }),
        family("kvroute_gaps_healed_total", "Gaps healed by replay.", Kind::Counter, |e| {
            e.gaps_healed
        }),
        family("kvroute_restores_total", "Full restores.", Kind::Counter, |e| e.restores),
        family("kvroute_replay_requests_total", "Replay requests sent.", Kind::Counter, |e| {
            e.replay_requests
        }),
        family(
            "kvroute_replay_failures_total",
            "Replay requests that failed.",
            Kind::Counter,
            |e| e.replay_failures,
        ),
        family("kvroute_reconnects_total", "Reconnects to the publisher.", Kind::Counter, |e| {
            e.reconnects
        }),
        family(
            "kvroute_suspected_restarts_total",
            "Batches numbered as seen but stamped later (engine restarts).",
            Kind::Counter,
            |e| e.suspected_restarts,
        ),
        family(
            "kvroute_buffer_overflows_total",
            "Live batches dropped while recovering (each restores in full).",
            Kind::Counter,
            |e| e.buffer_overflows,
        ),
        family("kvroute_stashed_batches", "Live batches awaiting recovery.", Kind::Gauge, |e| {
            e.stashed
        }),
        family(
            "kvroute_recovering",
            "1 while the endpoint awaits its replay socket.",
            Kind::Gauge,
            |e| u64::from(e.recovering),
        ),
        Metric::single(
            "kvroute_index_blocks",
            "Blocks the index holds.",
            Kind::Gauge,
            blocks as f64,
        ),
        Metric::single(
            "kvroute_index_workers",
            "Workers the index knows.",
            Kind::Gauge,
            workers as f64,
        ),
        Metric::single(
            "kvroute_uptime_seconds",
            "Time since the subscriber started.",
            Kind::Gauge,
            stats.uptime.as_secs_f64(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_specs_parse_with_ids_replay_rank_and_topic() {
        let plain = parse_endpoint("tcp://127.0.0.1:5557", 3).unwrap();
        assert_eq!(plain, ZmqEndpoint::new(WorkerId(3), "tcp://127.0.0.1:5557"));
        let full = parse_endpoint("7=tcp://h:5557,replay=tcp://h:5558,rank=2,topic=kv", 0).unwrap();
        let expected = ZmqEndpoint::new(WorkerId(7), "tcp://h:5557")
            .with_replay("tcp://h:5558")
            .with_dp_rank(2)
            .with_topic(b"kv".to_vec());
        assert_eq!(full, expected);
    }

    #[test]
    fn replay_failures_and_restores_show_in_the_view_and_the_metrics() {
        let endpoint = kvroute::wire::zmq::EndpointStats {
            publisher: "tcp://h:5557".into(),
            worker: WorkerId(4),
            restores: 2,
            replay_requests: 9,
            replay_failures: 7,
            recovering: true,
            stashed: 5,
            ..Default::default()
        };
        let now = SubscriberStats { endpoints: vec![endpoint], uptime: Duration::from_secs(2) };
        let router = KvRouter::new(RouterConfig::new(16)).unwrap();
        let view = render_view(&now, &SubscriberStats::default(), &router);
        let header = view.lines().next().unwrap();
        assert!(header.ends_with("restores  replay fails  stashed"), "{view}");
        let all = view.lines().find(|line| line.starts_with("all ")).unwrap();
        let last: Vec<&str> = all.split_whitespace().rev().take(3).collect();
        assert_eq!(last, ["5", "7", "2"], "{view}");
        let metrics = render_metrics(&now, &router);
        let sample = |name: &str| {
            let prefix = format!("{name}{{worker=\"4\",endpoint=\"tcp://h:5557\"}} ");
            let line = metrics.lines().find(|line| line.starts_with(&prefix));
            line.and_then(|line| line[prefix.len()..].parse::<f64>().ok())
        };
        assert_eq!(sample("kvroute_restores_total"), Some(2.0), "{metrics}");
        assert_eq!(sample("kvroute_replay_requests_total"), Some(9.0), "{metrics}");
        assert_eq!(sample("kvroute_replay_failures_total"), Some(7.0), "{metrics}");
        assert_eq!(sample("kvroute_recovering"), Some(1.0), "{metrics}");
        assert_eq!(sample("kvroute_stashed_batches"), Some(5.0), "{metrics}");
    }

    #[test]
    fn bad_endpoint_specs_say_what_is_wrong() {
        for (spec, says) in [
            ("localhost:5557", "expected an address"),
            ("x=tcp://h:1", "worker id"),
            ("tcp://h:1,rank=two", "rank"),
            ("tcp://h:1,speed=3", "unknown option"),
            ("tcp://h:1,replay=h:2", "unknown option"),
        ] {
            let error = parse_endpoint(spec, 0).unwrap_err();
            assert!(error.contains(says), "{spec}: {error}");
        }
    }
}
