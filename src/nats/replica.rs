//! [`NatsReplica`]: the handle that owns the transport thread.

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use super::config::{NatsConfig, NatsError};
use super::publisher::NatsPublisher;
use super::sink::PeerSink;
use super::stats::{Counters, NatsStats};
use super::transport::{self, Control, Inputs};
use crate::sync::{Arc, AtomicBool, JoinHandle, Ordering};

/// One router replica's link to its peers over NATS: publishes this replica's
/// [`SequenceEvent`](crate::sequences::SequenceEvent)s, applies its peers' to a local tracker,
/// catches up after a restart or an outage, and serves snapshots of its own requests. See
/// [the module docs](super) for the protocol.
///
/// Dropping it stops the transport thread (after flushing what was published).
///
/// ```
/// use std::sync::Arc;
/// use kvroute::nats::{NatsConfig, NatsReplica};
/// use kvroute::router::{KvRouter, RouteRequest, RouterConfig};
/// use kvroute::Worker;
///
/// // No server listens here: the replica runs local-only and keeps trying to connect.
/// let replica = NatsReplica::start(NatsConfig::new("nats://127.0.0.1:9", "docs", 1))?;
/// let config = RouterConfig { replica_sync: true, ..RouterConfig::new(4) };
/// let router = Arc::new(KvRouter::builder(config).publisher(1, replica.publisher()).build()?);
/// replica.attach(router.clone())?;
///
/// router.add_worker(Worker::new(1, 0));
/// let tokens: Vec<u32> = (0..16).collect();
/// let decision = router.route(&RouteRequest::tokens(&tokens).with_id("r1").update_states(true))?;
/// assert_eq!(decision.worker, Worker::new(1, 0));
/// assert!(!replica.stats().connected);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NatsReplica {
    router_id: u64,
    heartbeat: Duration,
    incarnation: u64,
    publisher: NatsPublisher,
    control: mpsc::UnboundedSender<Control>,
    counters: Arc<Counters>,
    attached: AtomicBool,
    thread: Option<JoinHandle<()>>,
}

impl NatsReplica {
    /// Validates `config` and starts the transport thread. A server that is down is not an
    /// error: the replica runs local-only ([`NatsStats::connected`] is false) and connects
    /// when the server is up. Fails on a bad setting, an unusable URL, or a thread the OS
    /// would not start.
    pub fn start(config: NatsConfig) -> Result<Self, NatsError> {
        config.validate()?;
        let counters = Arc::new(Counters::default());
        let (outbox_tx, outbox) = mpsc::channel(config.outbox_capacity);
        let (control_tx, control) = mpsc::unbounded_channel();
        let (router_id, heartbeat) = (config.router_id, config.heartbeat);
        let incarnation = new_incarnation();
        let inputs = Inputs { outbox, control, control_tx: control_tx.clone() };
        let thread = transport::start(config, incarnation, counters.clone(), inputs)?;
        Ok(Self {
            router_id,
            heartbeat,
            incarnation,
            publisher: NatsPublisher { outbox: outbox_tx, counters: counters.clone() },
            control: control_tx,
            counters,
            attached: AtomicBool::new(false),
            thread: Some(thread),
        })
    }

    /// The publisher to build the router (or tracker) with, as this replica's router id.
    pub fn publisher(&self) -> NatsPublisher {
        self.publisher.clone()
    }

    /// Starts applying peers' events to `sink` (the router or tracker built with
    /// [`publisher`](Self::publisher)) and catching up with every live peer. Once only.
    pub fn attach(&self, sink: impl PeerSink) -> Result<(), NatsError> {
        if self.attached.swap(true, Ordering::AcqRel) {
            return Err(NatsError::AlreadyAttached);
        }
        self.control.send(Control::Attach(Box::new(sink))).map_err(|_| NatsError::Stopped)
    }

    /// This replica's router id.
    pub fn router_id(&self) -> u64 {
        self.router_id
    }

    /// This run's incarnation (peers tell a restart by a larger one).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Waits up to `timeout` for the connection to be up; whether it is. (Never needed for
    /// correctness: events made before are sent as a snapshot once peers ask.)
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.counters.connected.load(Ordering::Relaxed) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// Waits up to `timeout` until this replica, attached, has caught up with every live peer:
    /// connected, a heartbeat's time for every peer to answer its hello, then no snapshot
    /// awaited. Whether it has. For tools that route a batch right after starting.
    pub fn wait_caught_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if !self.wait_connected(timeout) {
            return false;
        }
        std::thread::sleep(self.heartbeat.min(deadline.saturating_duration_since(Instant::now())));
        loop {
            let stats = self.stats();
            if stats.connected && stats.synced {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The transport's counters now.
    pub fn stats(&self) -> NatsStats {
        self.counters.snapshot()
    }
}

impl Drop for NatsReplica {
    fn drop(&mut self) {
        let _ = self.control.send(Control::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for NatsReplica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsReplica")
            .field("router_id", &self.router_id)
            .field("incarnation", &self.incarnation)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The wall clock in nanoseconds: larger for each later start of a replica (unless the clock
/// is set back by more than the time between the two starts).
fn new_incarnation() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
}
