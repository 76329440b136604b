//! `--metrics ADDR`: the live view's counters in the Prometheus text format, served at
//! `GET /metrics` by a thread of its own.
//!
//! std only: one connection at a time (scrapes come every few seconds), each with short read
//! and write timeouts so a stuck client cannot hold the server. [`render`] writes the text
//! format; [`MetricsServer`] serves whatever its closure renders at the time of the request.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Whether a metric only grows or may go both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric family: a name, its help line, and its samples by label set.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Metric {
    /// A metric with one unlabelled sample.
    pub fn single(name: &'static str, help: &'static str, kind: Kind, value: f64) -> Self {
        Self { name, help, kind, samples: vec![(Vec::new(), value)] }
    }
}

/// The metrics in the Prometheus text exposition format (version 0.0.4).
pub fn render(metrics: &[Metric]) -> String {
    let mut out = String::new();
    for metric in metrics {
        let kind = match metric.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# HELP {} {}", metric.name, metric.help);
        let _ = writeln!(out, "# TYPE {} {kind}", metric.name);
        for (labels, value) in &metric.samples {
            out.push_str(metric.name);
            if !labels.is_empty() {
                let pairs: Vec<String> =
                    labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
                let _ = write!(out, "{{{}}}", pairs.join(","));
            }
            let _ = writeln!(out, " {value}");
        }
    }
    out
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The server thread; stops (and is joined) when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` and serves `render()` at `GET /metrics`. Fails if the address does not
    /// resolve or cannot be bound.
    pub fn start(
        addr: &str,
        render: impl Fn() -> String + Send + 'static,
    ) -> io::Result<MetricsServer> {
        let resolved = addr.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{addr} resolves to nothing"))
        })?;
        let listener = TcpListener::bind(resolved)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread =
            std::thread::Builder::new().name("kvroute-metrics".into()).spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::Acquire) {
                        break;
                    }
                    // A client that misbehaves costs only its own connection.
                    if let Ok(stream) = stream {
                        let _ = serve(stream, &render);
                    }
                }
            })?;
        Ok(MetricsServer { addr, stop, thread: Some(thread) })
    }

    /// Where it listens (the port the OS chose, for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one request: the metrics for `GET /metrics`, 404 for any other path, 405 for any
/// other method.
fn serve(stream: TcpStream, render: &impl Fn() -> String) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // Skip the headers (a request without a body ends at the empty line).
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let mut words = request.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", render()),
        (Some("GET"), Some(_)) => ("404 Not Found", "try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "GET /metrics only\n".to_string()),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    #[test]
    fn renders_counters_gauges_and_escaped_labels() {
        let metrics = [
            Metric::single("kvroute_events_total", "Events applied.", Kind::Counter, 42.0),
            Metric {
                name: "kvroute_endpoint_up",
                help: "Whether an endpoint is connected.",
                kind: Kind::Gauge,
                samples: vec![(vec![("endpoint", "tcp://a\"b".to_string())], 1.0)],
            },
        ];
        assert_eq!(
            render(&metrics),
            "# HELP kvroute_events_total Events applied.\n# TYPE kvroute_events_total counter\n\
             kvroute_events_total 42\n# HELP kvroute_endpoint_up Whether an endpoint is \
             connected.\n# TYPE kvroute_endpoint_up gauge\n\
             kvroute_endpoint_up{endpoint=\"tcp://a\\\"b\"} 1\n"
        );
    }

    #[test]
    fn serves_what_the_closure_renders_at_request_time() {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = count.clone();
        let server = MetricsServer::start("127.0.0.1:0", move || {
            let value = seen.fetch_add(1, Ordering::Relaxed) as f64;
            render(&[Metric::single("kvroute_scrapes", "Scrapes.", Kind::Counter, value)])
        })
        .unwrap();
        let first = get(server.local_addr(), "/metrics");
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        assert!(first.ends_with("kvroute_scrapes 0\n"), "{first}");
        assert!(get(server.local_addr(), "/metrics").ends_with("kvroute_scrapes 1\n"));
        assert!(get(server.local_addr(), "/").starts_with("HTTP/1.1 404"));
        drop(server);
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn an_address_in_use_is_an_error_not_a_panic() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        assert!(MetricsServer::start(&addr, String::new).is_err());
        assert!(MetricsServer::start("not an address", String::new).is_err());
    }
}
