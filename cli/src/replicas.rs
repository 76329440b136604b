//! `--nats`: joining the router replicas that share a NATS server, for any subcommand that
//! builds a router (`#[command(flatten)]` the [`NatsArgs`], then [`NatsArgs::build_router`]).

use std::sync::Arc;
use std::time::Duration;

use kvroute::router::{KvRouter, RouterConfig};

/// The flags that join this router to its replicas.
#[derive(clap::Args, Debug)]
pub struct NatsArgs {
    /// Join the router replicas on this NATS server (e.g. nats://127.0.0.1:4222): their
    /// requests in flight count in this router's decisions, and this router's are published.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// The replicas' namespace on the NATS server.
    #[arg(long, default_value = "default", requires = "nats")]
    namespace: String,
    /// This replica's router id (unique in the namespace; default: from the process id and
    /// the clock).
    #[arg(long, requires = "nats")]
    router_id: Option<u64>,
    /// How long to wait for the NATS server, and then for the peers' snapshots, in seconds.
    #[arg(long, default_value_t = 5.0, requires = "nats")]
    nats_timeout: f64,
}

/// Keeps the replica's transport running; drop it after the router's last use.
pub struct Joined {
    #[cfg(not(loom))]
    _replica: Option<kvroute::nats::NatsReplica>,
    /// This replica's router id, when joined.
    router_id: Option<u64>,
}

impl Joined {
    /// This replica's router id with `--nats`; `None` alone.
    pub fn router_id(&self) -> Option<u64> {
        self.router_id
    }
}

impl NatsArgs {
    /// Whether `--nats` was given.
    pub fn joins(&self) -> bool {
        self.nats.is_some()
    }

    /// The router of `config` (replica sync turned on with `--nats`); `register` adds its
    /// workers before it catches up with its peers. One error line for a bad URL, an
    /// unreachable server or peers that do not answer in time.
    pub fn build_router(
        &self,
        config: RouterConfig,
        register: impl FnOnce(&KvRouter),
    ) -> Result<(Arc<KvRouter>, Joined), String> {
        let Some(url) = &self.nats else {
            let router = KvRouter::new(config).map_err(|e| e.to_string())?;
            register(&router);
            #[cfg(not(loom))]
            return Ok((Arc::new(router), Joined { _replica: None, router_id: None }));
            #[cfg(loom)]
            return Ok((Arc::new(router), Joined { router_id: None }));
        };
        let timeout = Duration::try_from_secs_f64(self.nats_timeout)
            .map_err(|_| format!("--nats-timeout {} is not a duration", self.nats_timeout))?;
        self.join(url, config, register, timeout)
    }

    #[cfg(not(loom))]
    fn join(
        &self,
        url: &str,
        config: RouterConfig,
        register: impl FnOnce(&KvRouter),
        timeout: Duration,
    ) -> Result<(Arc<KvRouter>, Joined), String> {
        use kvroute::nats::{NatsConfig, NatsReplica};
        let router_id = self.router_id.unwrap_or_else(default_router_id);
        let replica = NatsReplica::start(NatsConfig::new(url, &self.namespace, router_id))
            .map_err(|e| format!("--nats {url}: {e}"))?;
        let config = RouterConfig { replica_sync: true, ..config };
        let router = KvRouter::builder(config)
            .publisher(router_id, replica.publisher())
            .build()
            .map_err(|e| e.to_string())?;
        let router = Arc::new(router);
        register(&router);
        replica.attach(router.clone()).map_err(|e| e.to_string())?;
        if !replica.wait_connected(timeout) {
            return Err(format!("--nats {url}: no NATS server answered within {timeout:?}"));
        }
        // Decisions should see the peers' requests: take their snapshots first.
        if !replica.wait_caught_up(timeout) {
            return Err(format!(
                "--nats {url}: the peers' state did not arrive within {timeout:?}"
            ));
        }
        Ok((router, Joined { _replica: Some(replica), router_id: Some(router_id) }))
    }

    #[cfg(loom)]
    fn join(
        &self,
        _url: &str,
        _config: RouterConfig,
        _register: impl FnOnce(&KvRouter),
        _timeout: Duration,
    ) -> Result<(Arc<KvRouter>, Joined), String> {
        Err("this build (--cfg loom) has no NATS transport".into())
    }
}

/// A router id unlikely to clash: the process id and the clock's nanoseconds.
#[cfg(not(loom))]
pub fn default_router_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (u64::from(std::process::id()) << 32) | u64::from(nanos)
}
