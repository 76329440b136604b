//! `--metrics ADDR`: the live view's counters in the Prometheus text format, served at
//! `GET /metrics` by a thread of its own.
//!
//! [`render`] writes the text format with `prometheus-client`; [`MetricsServer`] serves whatever its closure renders at
//! the time of the request, with hyper on a current-thread runtime owned by its thread. Each
//! connection is a task of its own (a slow client never holds up another scrape), has a
//! deadline, and may send only a bounded request head; dropping the server stops it at once,
//! open connections included.

use std::io;
use std::net::SocketAddr;
#[cfg(not(loom))]
use std::net::{TcpListener, ToSocketAddrs};
#[cfg(not(loom))]
use std::thread::JoinHandle;
#[cfg(not(loom))]
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

/// The metrics in the OpenMetrics text format, written by `prometheus-client` (escaping, `_total`
/// suffixes and `# EOF` are its business). A counter's name ends in `_total`, as exposed.
pub fn render(metrics: &[Metric]) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Snapshot(metrics.to_vec())));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// Metrics taken at one scrape, as a `prometheus-client` collector.
#[derive(Debug)]
struct Snapshot(Vec<Metric>);

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        for metric in &self.0 {
            let (name, kind) = match metric.kind {
                Kind::Counter => {
                    (metric.name.strip_suffix("_total").unwrap_or(metric.name), MetricType::Counter)
                }
                Kind::Gauge => (metric.name, MetricType::Gauge),
            };
            let mut family = encoder.encode_descriptor(name, metric.help, None, kind)?;
            let encode =
                |sample: prometheus_client::encoding::MetricEncoder<'_>, value: f64| match metric
                    .kind
                {
                    Kind::Counter => ConstCounter::new(value).encode(sample),
                    Kind::Gauge => ConstGauge::new(value).encode(sample),
                };
            match metric.samples.as_slice() {
                [(labels, value)] if labels.is_empty() => encode(family, *value)?,
                samples => {
                    for (labels, value) in samples {
                        // prometheus-client 0.23 writes label values as given: escape them.
                        let labels: Vec<(&str, String)> =
                            labels.iter().map(|(k, v)| (*k, escape(v))).collect();
                        encode(family.encode_family(&labels)?, *value)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A label value with `\\`, `"` and newlines escaped, as the text format asks.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// How long one connection may take, request and response.
#[cfg(not(loom))]
const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// How long a client may take to send its request head.
#[cfg(not(loom))]
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The most a request head may hold (hyper's buffer; a scrape's head is a few hundred bytes).
#[cfg(not(loom))]
const MAX_REQUEST_HEAD: usize = 16 << 10;

/// The server thread; stops (and is joined) when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    #[cfg(not(loom))]
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    #[cfg(not(loom))]
    thread: Option<JoinHandle<()>>,
}

#[cfg(not(loom))]
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
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread =
            std::thread::Builder::new().name("kvroute-metrics".into()).spawn(move || {
                let connections = tokio::task::LocalSet::new();
                runtime.block_on(connections.run_until(accept(listener, render, stopped)));
                // Dropping the set and the runtime here ends the connections still open.
            })?;
        Ok(MetricsServer { addr, stop: Some(stop), thread: Some(thread) })
    }

    /// Where it listens (the port the OS chose, for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

#[cfg(loom)]
impl MetricsServer {
    /// Not in loom builds (tokio's networking does not build under `--cfg loom`): an error.
    pub fn start(
        addr: &str,
        _render: impl Fn() -> String + Send + 'static,
    ) -> io::Result<MetricsServer> {
        Err(io::Error::new(io::ErrorKind::Unsupported, format!("{addr}: not in loom builds")))
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

#[cfg(not(loom))]
impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections until `stopped`, each served on a task of its own.
#[cfg(not(loom))]
async fn accept(
    listener: tokio::net::TcpListener,
    render: impl Fn() -> String + 'static,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    use hyper::server::conn::http1;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use std::rc::Rc;

    let render = Rc::new(render);
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors, say: a pause rather than a busy loop.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let render = render.clone();
        tokio::task::spawn_local(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&request, &*render);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_REQUEST_HEAD)
                .keep_alive(false);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            // A client that misbehaves costs only its own connection, and only so long.
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, connection).await;
        });
    }
}

/// The answer to one request: the metrics for `GET /metrics`, 404 for any other path, 405 for
/// any other method.
#[cfg(not(loom))]
fn respond<B>(
    request: &hyper::Request<B>,
    render: &dyn Fn() -> String,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use hyper::{Method, StatusCode, header};

    let (status, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, render()),
        (&Method::GET, _) => (StatusCode::NOT_FOUND, "try /metrics\n".to_string()),
        _ => (StatusCode::METHOD_NOT_ALLOWED, "GET /metrics only\n".to_string()),
    };
    let mut response = hyper::Response::new(http_body_util::Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    response
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

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
            "# HELP kvroute_events Events applied.\n# TYPE kvroute_events counter\n\
             kvroute_events_total 42.0\n# HELP kvroute_endpoint_up Whether an endpoint is \
             connected.\n# TYPE kvroute_endpoint_up gauge\n\
             kvroute_endpoint_up{endpoint=\"tcp://a\\\"b\"} 1.0\n# EOF\n"
        );
    }

    #[test]
    fn serves_what_the_closure_renders_at_request_time() {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = count.clone();
        let server = MetricsServer::start("127.0.0.1:0", move || {
            let value = seen.fetch_add(1, Ordering::Relaxed) as f64;
            render(&[Metric::single("kvroute_scrapes_total", "Scrapes.", Kind::Counter, value)])
        })
        .unwrap();
        let first = get(server.local_addr(), "/metrics");
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        assert!(first.ends_with("kvroute_scrapes_total 0.0\n# EOF\n"), "{first}");
        assert!(
            get(server.local_addr(), "/metrics").ends_with("kvroute_scrapes_total 1.0\n# EOF\n")
        );
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
