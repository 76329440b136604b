//! `ZmqSubscriber`: feeds engines' ZMQ KV event streams into a router on threads of its own
//! (one per endpoint), with gap recovery from each engine's replay socket.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use kvroute::WorkerId;
use kvroute::wire::zmq::{SubscriberConfig, ZmqEndpoint, ZmqSubscriber};

use crate::errors;
use crate::router::PyKvRouter;

/// One engine's endpoint: `(worker_id, publisher_address)`, plus optional `replay` address,
/// `dp_rank` and `topic`, given as a dict with those keys.
fn endpoint_arg(obj: &Bound<'_, PyAny>) -> PyResult<ZmqEndpoint> {
    if let Ok((worker, publisher)) = obj.extract::<(u64, String)>() {
        return Ok(ZmqEndpoint::new(WorkerId(worker), publisher));
    }
    let d = obj.downcast::<PyDict>().map_err(|_| {
        errors::ZmqError::new_err("an endpoint is (worker_id, publisher) or a dict with worker_id, publisher[, replay, dp_rank, topic]")
    })?;
    let need = |key: &str| {
        d.get_item(key)?
            .ok_or_else(|| errors::ZmqError::new_err(format!("endpoint dict without {key:?}")))
    };
    let mut endpoint = ZmqEndpoint::new(
        WorkerId(need("worker_id")?.extract()?),
        need("publisher")?.extract::<String>()?,
    );
    if let Some(replay) = d.get_item("replay")? {
        endpoint = endpoint.with_replay(replay.extract::<String>()?);
    }
    if let Some(rank) = d.get_item("dp_rank")? {
        endpoint = endpoint.with_dp_rank(rank.extract()?);
    }
    if let Some(topic) = d.get_item("topic")? {
        let topic = match topic.extract::<String>() {
            Ok(s) => s.into_bytes(),
            Err(_) => topic.extract::<Vec<u8>>()?,
        };
        endpoint = endpoint.with_topic(topic);
    }
    Ok(endpoint)
}

/// A running subscriber: every endpoint's events go into `router`'s index. Stop it with
/// `stop()` (or use it as a context manager); dropping it stops it too.
#[pyclass(name = "ZmqSubscriber", module = "kvroute", frozen)]
pub struct PyZmqSubscriber {
    inner: Mutex<Option<ZmqSubscriber>>,
}

impl PyZmqSubscriber {
    fn take(&self) -> Option<ZmqSubscriber> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[pymethods]
impl PyZmqSubscriber {
    /// Connects to every endpoint and starts its thread. A malformed endpoint refuses the
    /// whole start; an unreachable one is retried in the background.
    #[new]
    #[pyo3(signature = (router, endpoints, *, reconnect=None, replay_timeout=None))]
    fn new(
        py: Python<'_>,
        router: PyRef<'_, PyKvRouter>,
        endpoints: Vec<Bound<'_, PyAny>>,
        reconnect: Option<f64>,
        replay_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let mut config = SubscriberConfig {
            endpoints: endpoints.iter().map(endpoint_arg).collect::<PyResult<_>>()?,
            ..SubscriberConfig::default()
        };
        let secs = |v: f64| {
            Duration::try_from_secs_f64(v)
                .map_err(|_| errors::ConfigError::new_err(format!("not a duration: {v}")))
        };
        if let Some(v) = reconnect {
            config.reconnect = secs(v)?;
        }
        if let Some(v) = replay_timeout {
            config.replay_timeout = secs(v)?;
        }
        let sink = Arc::clone(&router.inner);
        let subscriber =
            py.allow_threads(|| ZmqSubscriber::start(config, sink)).map_err(errors::zmq)?;
        Ok(Self { inner: Mutex::new(Some(subscriber)) })
    }

    /// Stops and joins every endpoint thread (again: does nothing).
    fn stop(&self, py: Python<'_>) {
        if let Some(subscriber) = self.take() {
            py.allow_threads(|| subscriber.shutdown());
        }
    }

    /// Whether the subscriber is running.
    #[getter]
    fn running(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Per-endpoint counters, as a list of dicts (empty once stopped).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(subscriber) = guard.as_ref() else { return Ok(Vec::new()) };
        subscriber
            .stats()
            .endpoints
            .into_iter()
            .map(|e| {
                let d = PyDict::new(py);
                d.set_item("publisher", e.publisher)?;
                d.set_item("worker_id", e.worker.0)?;
                d.set_item("messages", e.messages)?;
                d.set_item("events", e.events)?;
                d.set_item("block_ops", e.block_ops)?;
                d.set_item("decode_errors", e.decode_errors)?;
                d.set_item("last_seq", e.last_seq)?;
                d.set_item("gaps", e.gaps)?;
                d.set_item("gaps_healed", e.gaps_healed)?;
                d.set_item("restores", e.restores)?;
                d.set_item("recovering", e.recovering)?;
                Ok(d)
            })
            .collect()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.stop(py);
        false
    }
}

impl Drop for PyZmqSubscriber {
    fn drop(&mut self) {
        // Joining threads that never touch Python: safe with or without the GIL held.
        drop(self.take());
    }
}
