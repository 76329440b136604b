//! [`ZmqSubscriber`]: the handle that owns the endpoint threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::recovery::EventSink;

use super::config::{SubscriberConfig, ZmqError, millis};
use super::replay::ReplayClient;
use super::stats::{Counters, SubscriberStats};
use super::worker::EndpointWorker;

/// `ZMQ_MAXMSGSIZE` for `bytes`, saturated.
pub(super) fn max_message_size(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Batches a SUB socket holds before libzmq drops them: vLLM's PUB high-water mark.
const RCVHWM: i32 = 100_000;

/// Subscribes to engines' KV event publishers and feeds their events to an index.
///
/// Every endpoint has its own thread and sockets: a dead or slow engine never holds up the
/// others. Each thread receives `[topic, seq, payload]` messages, decodes them
/// ([`VllmDecoder`](crate::wire::VllmDecoder)) and hands them to the index in `seq` order
/// through a recovery cursor (the ZMQ `seq` is the event id, see `batches.rs`): a lost message
/// is a gap, fetched from the engine's replay socket while later ones wait; the first message
/// and an engine restart restore the endpoint's state from a replay of everything the engine
/// still buffers. A restart shows as `seq` from 0 again, and, when its first batches were lost,
/// as a reconnect of the SUB socket or a batch numbered as seen but stamped later: each of
/// these restores the endpoint in full. libzmq reconnects a dropped publisher by itself, waiting
/// from [`SubscriberConfig::reconnect`] doubling up to [`SubscriberConfig::max_reconnect`].
///
/// Dropping the handle (or [`Self::shutdown`]) stops and joins the threads.
///
/// ```no_run
/// use std::sync::Arc;
/// use kvroute::router::{KvRouter, RouterConfig};
/// use kvroute::wire::zmq::{SubscriberConfig, ZmqEndpoint, ZmqSubscriber};
/// use kvroute::WorkerId;
///
/// let router = Arc::new(KvRouter::new(RouterConfig::new(16))?);
/// let config = SubscriberConfig {
///     endpoints: vec![ZmqEndpoint::new(WorkerId(1), "tcp://10.0.0.5:5557")
///         .with_replay("tcp://10.0.0.5:5558")],
///     ..SubscriberConfig::default()
/// };
/// let subscriber = ZmqSubscriber::start(config, router.clone())?;
/// // ... route with `router` ...
/// println!("{} events applied", subscriber.stats().events());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ZmqSubscriber {
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    counters: Vec<(String, crate::WorkerId, Arc<Counters>)>,
    started: Instant,
}

impl std::fmt::Debug for ZmqSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZmqSubscriber").field("endpoints", &self.counters.len()).finish()
    }
}

impl ZmqSubscriber {
    /// Connects to every endpoint and starts its thread. A malformed endpoint refuses the
    /// whole start (nothing keeps running); an unreachable one is retried in the background.
    pub fn start<S>(config: SubscriberConfig, sink: Arc<S>) -> Result<Self, ZmqError>
    where
        S: EventSink + Send + Sync + 'static,
    {
        config.validate()?;
        let context = zmq::Context::new();
        let setup = |e: zmq::Error| ZmqError::Setup(e.to_string());
        let bad = |address: &str| {
            let address = address.to_owned();
            move |e: zmq::Error| ZmqError::Endpoint { address, reason: e.to_string() }
        };
        // Every socket first, so a bad address refuses the start before any thread runs.
        let mut prepared = Vec::new();
        for endpoint in &config.endpoints {
            let sub = context.socket(zmq::SUB).map_err(setup)?;
            sub.set_linger(0).map_err(setup)?;
            // vLLM's PUB queues up to 100,000 batches; ours must not drop them (libzmq's default
            // is 1,000) while a replay is in progress.
            sub.set_rcvhwm(RCVHWM).map_err(setup)?;
            sub.set_reconnect_ivl(millis(config.reconnect)).map_err(setup)?;
            sub.set_reconnect_ivl_max(millis(config.max_reconnect)).map_err(setup)?;
            sub.set_subscribe(&endpoint.topic).map_err(setup)?;
            sub.set_maxmsgsize(max_message_size(config.max_message_size)).map_err(setup)?;
            let monitor = Self::monitor(&context, &sub).map_err(setup)?;
            sub.connect(&endpoint.publisher).map_err(bad(&endpoint.publisher))?;
            let replay = match &endpoint.replay {
                Some(address) => {
                    Some(ReplayClient::connect(&context, address, &config).map_err(bad(address))?)
                }
                None => None,
            };
            prepared.push((endpoint.clone(), sub, monitor, replay));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut subscriber = Self {
            threads: Vec::new(),
            stop: stop.clone(),
            counters: Vec::new(),
            started: Instant::now(),
        };
        for (endpoint, sub, monitor, replay) in prepared {
            let counters = Arc::new(Counters::default());
            subscriber.counters.push((
                endpoint.publisher.clone(),
                endpoint.worker,
                counters.clone(),
            ));
            let name = format!("kvroute-zmq-{}", endpoint.worker);
            let worker = EndpointWorker::new(
                endpoint,
                (sub, monitor),
                replay,
                sink.clone(),
                &config.recovery,
                counters,
                stop.clone(),
            )
            .map_err(ZmqError::Recovery)?;
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker.run())
                .map_err(|e| ZmqError::Setup(format!("thread not started: {e}")))?;
            // On an error above, `subscriber` drops here and stops the threads already running.
            subscriber.threads.push(thread);
        }
        Ok(subscriber)
    }

    /// A PAIR socket that receives `sub`'s connection events: a reconnect may hide an engine
    /// restart whose first batches were lost (see `worker.rs`).
    fn monitor(context: &zmq::Context, sub: &zmq::Socket) -> Result<zmq::Socket, zmq::Error> {
        static MONITORS: AtomicU64 = AtomicU64::new(0);
        let address =
            format!("inproc://kvroute-zmq-monitor-{}", MONITORS.fetch_add(1, Ordering::Relaxed));
        let events = [
            zmq::SocketEvent::CONNECTED,
            zmq::SocketEvent::CONNECT_RETRIED,
            zmq::SocketEvent::DISCONNECTED,
        ];
        let events = events.into_iter().fold(0, |all, event| all | event as i32);
        sub.monitor(&address, events)?;
        let monitor = context.socket(zmq::PAIR)?;
        monitor.set_linger(0)?;
        monitor.connect(&address)?;
        Ok(monitor)
    }

    /// Every endpoint's counters now.
    pub fn stats(&self) -> SubscriberStats {
        SubscriberStats {
            endpoints: self
                .counters
                .iter()
                .map(|(publisher, worker, counters)| counters.snapshot(publisher, *worker))
                .collect(),
            uptime: self.started.elapsed(),
        }
    }

    /// Stops and joins every endpoint thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            // A thread that panicked has nothing left to clean up.
            let _ = thread.join();
        }
    }
}

impl Drop for ZmqSubscriber {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
