//! The engines behind the gateway: how they are given (flags or a TOML file), and whether each
//! is healthy now.
//!
//! A worker is skipped once `max_failures` requests in a row failed on it (refused, timed out,
//! answered 5xx) or a health check failed, and taken back as soon as a health check passes.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use kvroute::WorkerId;
use kvroute::router::WorkerRole;
use serde::Deserialize;

/// One engine: where it serves HTTP and, if it publishes them, its KV events.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    /// Its base URL (`http://host:port`).
    pub url: String,
    /// Its KV event PUB socket (`tcp://host:port`); none: routed in approximate mode.
    #[serde(default)]
    pub zmq: Option<String>,
    /// Its replay ROUTER socket.
    #[serde(default)]
    pub replay: Option<String>,
    /// Data-parallel ranks it serves (1 unless vLLM runs with `--data-parallel-size`).
    #[serde(default = "one")]
    pub dp_ranks: u32,
    /// `both` (default), `prefill` or `decode`.
    #[serde(default)]
    pub role: Role,
}

fn one() -> u32 {
    1
}

/// A worker's role, as written in flags and files.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Whole requests.
    #[default]
    Both,
    /// Prompts only.
    Prefill,
    /// Decode only.
    Decode,
}

impl From<Role> for WorkerRole {
    fn from(role: Role) -> Self {
        match role {
            Role::Both => WorkerRole::Both,
            Role::Prefill => WorkerRole::Prefill,
            Role::Decode => WorkerRole::Decode,
        }
    }
}

/// The `[[workers]]` of a TOML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkersFile {
    workers: Vec<WorkerSpec>,
}

impl WorkerSpec {
    /// Parses `URL[,zmq=tcp://…][,replay=tcp://…][,ranks=N][,role=both|prefill|decode]`.
    ///
    /// ```
    /// use kvroute_gateway::serve::workers::{Role, WorkerSpec};
    ///
    /// let spec = WorkerSpec::parse("http://10.0.0.5:8000,zmq=tcp://10.0.0.5:5557,ranks=2")?;
    /// assert_eq!((spec.dp_ranks, spec.role), (2, Role::Both));
    /// assert!(WorkerSpec::parse("http://h:8000,color=blue").is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut parts = spec.split(',');
        let url = parts.next().unwrap_or_default().trim().to_owned();
        let mut worker = Self { url, zmq: None, replay: None, dp_ranks: 1, role: Role::Both };
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("worker {spec:?}: {part:?} is not key=value"))?;
            match key.trim() {
                "zmq" => worker.zmq = Some(value.to_owned()),
                "replay" => worker.replay = Some(value.to_owned()),
                "ranks" => {
                    worker.dp_ranks = value
                        .parse()
                        .map_err(|_| format!("worker {spec:?}: ranks={value:?} is not a count"))?
                }
                "role" => {
                    worker.role = match value {
                        "both" => Role::Both,
                        "prefill" => Role::Prefill,
                        "decode" => Role::Decode,
                        _ => {
                            return Err(format!(
                                "worker {spec:?}: role {value:?} is not both, prefill or decode"
                            ));
                        }
                    }
                }
                other => return Err(format!("worker {spec:?}: unknown setting {other:?}")),
            }
        }
        worker.check().map(|()| worker)
    }

    /// Reads the `[[workers]]` tables of a TOML file.
    pub fn from_toml(text: &str) -> Result<Vec<Self>, String> {
        let file: WorkersFile = toml::from_str(text).map_err(|e| e.to_string())?;
        for worker in &file.workers {
            worker.check()?;
        }
        Ok(file.workers)
    }

    fn check(&self) -> Result<(), String> {
        let url = &self.url;
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 8 {
            return Err(format!("worker URL {url:?} is not http://host:port"));
        }
        if self.dp_ranks == 0 {
            return Err(format!("worker {url}: ranks must be at least 1"));
        }
        if self.replay.is_some() && self.zmq.is_none() {
            return Err(format!("worker {url}: a replay socket needs zmq= too"));
        }
        Ok(())
    }
}

/// One worker's place in the fleet and its health.
#[derive(Debug)]
pub struct WorkerState {
    /// Its id in the router (its position in the list).
    pub id: WorkerId,
    /// How it was given.
    pub spec: WorkerSpec,
    healthy: AtomicBool,
    failures: AtomicU32,
}

/// Every worker, by id.
#[derive(Debug)]
pub struct Fleet {
    workers: Vec<WorkerState>,
    max_failures: u32,
}

impl Fleet {
    /// The fleet of `specs` (worker `i` gets id `i`), all taken as healthy.
    pub fn new(specs: Vec<WorkerSpec>, max_failures: u32) -> Self {
        let workers = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| WorkerState {
                id: WorkerId(i as u64),
                spec,
                healthy: AtomicBool::new(true),
                failures: AtomicU32::new(0),
            })
            .collect();
        Self { workers, max_failures: max_failures.max(1) }
    }

    /// Every worker.
    pub fn all(&self) -> &[WorkerState] {
        &self.workers
    }

    /// Worker `id`.
    pub fn get(&self, id: WorkerId) -> Option<&WorkerState> {
        self.workers.get(usize::try_from(id.0).ok()?)
    }

    /// The workers taking requests now.
    pub fn healthy(&self) -> Vec<WorkerId> {
        self.workers.iter().filter(|w| w.is_healthy()).map(|w| w.id).collect()
    }

    /// A request failed on `id`: past `max_failures` in a row it is skipped.
    pub fn failed(&self, id: WorkerId) {
        if let Some(worker) = self.get(id) {
            let failures = worker.failures.fetch_add(1, Ordering::Relaxed) + 1;
            if failures >= self.max_failures && worker.healthy.swap(false, Ordering::Relaxed) {
                log::warn!(
                    "worker {} ({}) skipped after {failures} failures",
                    id.0,
                    worker.spec.url
                );
            }
        }
    }

    /// A request succeeded on `id`.
    pub fn succeeded(&self, id: WorkerId) {
        if let Some(worker) = self.get(id) {
            worker.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A health check's verdict on `id`.
    pub fn checked(&self, id: WorkerId, healthy: bool) {
        if let Some(worker) = self.get(id) {
            if healthy {
                worker.failures.store(0, Ordering::Relaxed);
            }
            if worker.healthy.swap(healthy, Ordering::Relaxed) != healthy {
                let state = if healthy { "healthy again" } else { "failed its health check" };
                log::warn!("worker {} ({}) {state}", id.0, worker.spec.url);
            }
        }
    }
}

impl WorkerState {
    /// Whether it takes requests now.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_files_give_the_same_workers() {
        let flag = WorkerSpec::parse(
            "http://a:8000,zmq=tcp://a:5557,replay=tcp://a:5558,ranks=2,role=prefill",
        )
        .unwrap();
        let file = WorkerSpec::from_toml(
            "[[workers]]\nurl = \"http://a:8000\"\nzmq = \"tcp://a:5557\"\n\
             replay = \"tcp://a:5558\"\ndp_ranks = 2\nrole = \"prefill\"\n",
        )
        .unwrap();
        assert_eq!(file, vec![flag]);
    }

    #[test]
    fn bad_workers_are_refused_with_a_reason() {
        for (spec, why) in [
            ("10.0.0.1:8000", "not http"),
            ("http://a:1,ranks=0", "at least 1"),
            ("http://a:1,ranks=x", "not a count"),
            ("http://a:1,role=boss", "role"),
            ("http://a:1,replay=tcp://a:2", "needs zmq"),
            ("http://a:1,zmq", "key=value"),
        ] {
            let error = WorkerSpec::parse(spec).unwrap_err();
            assert!(error.contains(why), "{spec}: {error}");
        }
        assert!(WorkerSpec::from_toml("[[workers]]\nurl = \"http://a:1\"\nport = 3\n").is_err());
    }

    #[test]
    fn a_failing_worker_is_skipped_until_a_health_check_passes() {
        let specs = vec![
            WorkerSpec::parse("http://a:1").unwrap(),
            WorkerSpec::parse("http://b:1").unwrap(),
        ];
        let fleet = Fleet::new(specs, 2);
        fleet.failed(WorkerId(1));
        fleet.succeeded(WorkerId(1));
        fleet.failed(WorkerId(1));
        assert_eq!(fleet.healthy().len(), 2, "failures must be in a row");
        fleet.failed(WorkerId(1));
        assert_eq!(fleet.healthy(), vec![WorkerId(0)]);
        fleet.checked(WorkerId(1), true);
        assert_eq!(fleet.healthy().len(), 2);
    }
}
