//! [`NatsConfig`]: where a replica connects, who it is, and its limits; [`NatsError`].

use std::fmt;
use std::time::Duration;

use crate::sequences::DEFAULT_EXPIRY;

/// The most events the outbox (route path → transport thread) may hold.
pub const MAX_OUTBOX: usize = 1 << 24;

/// How a [`NatsReplica`](super::NatsReplica) connects and behaves.
///
/// ```
/// use std::time::Duration;
/// use kvroute::nats::NatsConfig;
///
/// let config = NatsConfig { heartbeat: Duration::from_millis(200), ..NatsConfig::new("nats://127.0.0.1:4222", "prod", 1) };
/// assert!(config.validate().is_ok());
/// assert!(NatsConfig::new("nats://127.0.0.1:4222", "a.b", 1).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsConfig {
    /// The server, e.g. `nats://127.0.0.1:4222`.
    pub url: String,
    /// Replicas that share a namespace share a load view (one subject token: no `.`, `*`,
    /// `>` or whitespace).
    pub namespace: String,
    /// This replica's id: the `router_id` its tracker publishes as, unique in the namespace.
    pub router_id: u64,
    /// Own events the outbox holds before `publish` drops (and counts) them: 262,144 (a
    /// burst the transport cannot send as fast as it comes; it sends ~0.5-1 M changes/s).
    pub outbox_capacity: usize,
    /// How often the replica says how many changes it has made (peers find a lost tail of
    /// its stream from it) and retries unanswered snapshots: 500 ms.
    pub heartbeat: Duration,
    /// How long a snapshot may take to arrive before it is asked again: 2 s.
    pub snapshot_timeout: Duration,
    /// Requests are forgotten by the transport this long after they were added; set it to the
    /// trackers' expiry ([`DEFAULT_EXPIRY`] by default; `None` keeps them until freed).
    pub expiry: Option<Duration>,
    /// The longest wait between reconnection attempts: 1 s.
    pub max_reconnect_delay: Duration,
    /// A peer's events held while its snapshot is awaited, at most: 1,048,576.
    pub buffer_limit: usize,
}

impl NatsConfig {
    /// Defaults for replica `router_id` of `namespace` on the server at `url`.
    pub fn new(url: impl Into<String>, namespace: impl Into<String>, router_id: u64) -> Self {
        Self {
            url: url.into(),
            namespace: namespace.into(),
            router_id,
            outbox_capacity: 1 << 18,
            heartbeat: Duration::from_millis(500),
            snapshot_timeout: Duration::from_secs(2),
            expiry: Some(DEFAULT_EXPIRY),
            max_reconnect_delay: Duration::from_secs(1),
            buffer_limit: 1 << 20,
        }
    }

    /// Checks every setting (also done by [`NatsReplica::start`](super::NatsReplica::start)).
    pub fn validate(&self) -> Result<(), NatsError> {
        let bad = |reason: String| Err(NatsError::BadConfig(reason));
        let token_ok = |c: char| !c.is_whitespace() && !matches!(c, '.' | '*' | '>');
        if self.namespace.is_empty() || !self.namespace.chars().all(token_ok) {
            return bad(format!("namespace {:?} is not one NATS subject token", self.namespace));
        }
        if self.url.trim().is_empty() {
            return bad("the server url is empty".into());
        }
        if self.outbox_capacity == 0 || self.outbox_capacity > MAX_OUTBOX {
            return bad(format!(
                "outbox_capacity {} is not in 1..={MAX_OUTBOX}",
                self.outbox_capacity
            ));
        }
        if self.buffer_limit == 0 {
            return bad("buffer_limit is 0".into());
        }
        let durations = [
            ("heartbeat", self.heartbeat),
            ("snapshot_timeout", self.snapshot_timeout),
            ("max_reconnect_delay", self.max_reconnect_delay),
        ];
        for (name, value) in durations {
            if value.is_zero() || value > Duration::from_secs(3600) {
                return bad(format!("{name} {value:?} is not in (0, 1 h]"));
            }
        }
        Ok(())
    }
}

/// Why a [`NatsReplica`](super::NatsReplica) did not start or attach.
#[derive(Debug)]
#[non_exhaustive]
pub enum NatsError {
    /// A setting is out of range (the message says which).
    BadConfig(String),
    /// The server address is not valid (a server that is down is not an error: the replica
    /// starts local-only and connects when it can).
    Connect(String),
    /// The OS would not start the transport thread or its runtime.
    Spawn(std::io::Error),
    /// [`NatsReplica::attach`](super::NatsReplica::attach) was called twice.
    AlreadyAttached,
    /// The transport thread has stopped.
    Stopped,
}

impl fmt::Display for NatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadConfig(reason) => write!(f, "bad NATS replica config: {reason}"),
            Self::Connect(reason) => write!(f, "cannot use the NATS server: {reason}"),
            Self::Spawn(error) => write!(f, "cannot start the NATS transport thread: {error}"),
            Self::AlreadyAttached => f.write_str("the replica is already attached to a tracker"),
            Self::Stopped => f.write_str("the NATS transport thread has stopped"),
        }
    }
}

impl std::error::Error for NatsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Spawn(error) => Some(error),
            _ => None,
        }
    }
}
