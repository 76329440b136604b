//! What to subscribe to, and how patiently.

use std::fmt;
use std::time::Duration;

use crate::event::WorkerId;
use crate::recovery::RecoveryConfig;

/// One engine's publisher (one data-parallel rank of it: vLLM's rank r publishes on the base
/// port + r) and, if it has one, its replay socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZmqEndpoint {
    /// The worker its events are attributed to.
    pub worker: WorkerId,
    /// The rank of batches that name none.
    pub dp_rank: u32,
    /// The PUB socket's address, e.g. `tcp://10.0.0.5:5557`.
    pub publisher: String,
    /// The ROUTER replay socket's address, e.g. `tcp://10.0.0.5:5558`. Without it, lost
    /// batches are counted ([`EndpointStats::unrecovered_gaps`](super::EndpointStats)) but not
    /// refetched.
    pub replay: Option<String>,
    /// The subscription prefix (vLLM's `topic`; empty takes every message).
    pub topic: Vec<u8>,
}

impl ZmqEndpoint {
    /// The publisher at `publisher`, its events attributed to `worker`, rank 0, no replay.
    pub fn new(worker: WorkerId, publisher: impl Into<String>) -> Self {
        Self { worker, dp_rank: 0, publisher: publisher.into(), replay: None, topic: Vec::new() }
    }

    /// With the engine's replay socket.
    pub fn with_replay(mut self, replay: impl Into<String>) -> Self {
        self.replay = Some(replay.into());
        self
    }

    /// With the rank of batches that name none.
    pub fn with_dp_rank(mut self, dp_rank: u32) -> Self {
        self.dp_rank = dp_rank;
        self
    }

    /// With a subscription prefix.
    pub fn with_topic(mut self, topic: impl Into<Vec<u8>>) -> Self {
        self.topic = topic.into();
        self
    }
}

/// The subscriber's settings. [`Default`]: no endpoints, recovery's defaults, reconnects from
/// 100 ms doubling up to 5 s, 2 s for each replay answer, messages up to 64 MiB, replay answers
/// up to 100,000 batches and 1 GiB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriberConfig {
    /// The engines.
    pub endpoints: Vec<ZmqEndpoint>,
    /// Buffering and retries of gap recovery (per endpoint).
    pub recovery: RecoveryConfig,
    /// libzmq's first reconnect wait (`ZMQ_RECONNECT_IVL`).
    pub reconnect: Duration,
    /// libzmq's longest reconnect wait (`ZMQ_RECONNECT_IVL_MAX`; it doubles up to it).
    pub max_reconnect: Duration,
    /// How long a replay request waits for each answer frame before it is a failed fetch.
    pub replay_timeout: Duration,
    /// The largest message a socket accepts (`ZMQ_MAXMSGSIZE`): libzmq drops a peer that sends
    /// a larger one before allocating it (a publisher is then reconnected, and what it lost
    /// replayed or restored).
    pub max_message_size: usize,
    /// The most batches one replay answer may hold; past it the fetch fails.
    pub max_replay_batches: usize,
    /// The most payload bytes one replay answer may hold; past it the fetch fails.
    pub max_replay_bytes: usize,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            recovery: RecoveryConfig::default(),
            reconnect: Duration::from_millis(100),
            max_reconnect: Duration::from_secs(5),
            replay_timeout: Duration::from_secs(2),
            max_message_size: 64 << 20,
            max_replay_batches: 100_000,
            max_replay_bytes: 1 << 30,
        }
    }
}

/// Why the subscriber could not start.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZmqError {
    /// An endpoint was refused (a malformed address, an unknown transport); nothing started.
    Endpoint {
        /// The address.
        address: String,
        /// libzmq's reason.
        reason: String,
    },
    /// The recovery settings are invalid.
    Recovery(crate::recovery::RecoveryConfigError),
    /// A socket or thread could not be created.
    Setup(String),
    /// Two endpoints feed the same (worker, rank) stream: one's restore would clear the
    /// other's blocks, and their sequence numbers would be taken for one engine's.
    DuplicateStream {
        /// The worker.
        worker: WorkerId,
        /// The rank.
        dp_rank: u32,
    },
    /// A size limit is 0 (nothing could ever be received).
    ZeroLimit(&'static str),
}

impl fmt::Display for ZmqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Endpoint { address, reason } => {
                write!(f, "bad ZMQ endpoint {address:?}: {reason}")
            }
            Self::Recovery(error) => write!(f, "bad recovery settings: {error}"),
            Self::Setup(why) => write!(f, "ZMQ subscriber setup failed: {why}"),
            Self::DuplicateStream { worker, dp_rank } => write!(
                f,
                "two ZMQ endpoints feed worker {worker} rank {dp_rank}: give each engine its own id"
            ),
            Self::ZeroLimit(name) => write!(f, "ZMQ subscriber setting {name} must be at least 1"),
        }
    }
}

impl std::error::Error for ZmqError {}

impl SubscriberConfig {
    /// Checks the settings: recovery's, the size limits, and that no two endpoints feed the
    /// same (worker, rank) stream.
    pub fn validate(&self) -> Result<(), ZmqError> {
        self.recovery.validate().map_err(ZmqError::Recovery)?;
        for (name, value) in [
            ("max_message_size", self.max_message_size),
            ("max_replay_batches", self.max_replay_batches),
            ("max_replay_bytes", self.max_replay_bytes),
        ] {
            if value == 0 {
                return Err(ZmqError::ZeroLimit(name));
            }
        }
        let mut streams = std::collections::BTreeSet::new();
        for endpoint in &self.endpoints {
            if !streams.insert((endpoint.worker, endpoint.dp_rank)) {
                let (worker, dp_rank) = (endpoint.worker, endpoint.dp_rank);
                return Err(ZmqError::DuplicateStream { worker, dp_rank });
            }
        }
        Ok(())
    }
}

/// Milliseconds for a libzmq option, saturated.
pub(super) fn millis(duration: Duration) -> i32 {
    i32::try_from(duration.as_millis()).unwrap_or(i32::MAX)
}
