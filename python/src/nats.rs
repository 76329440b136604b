//! `NatsReplica`: router replicas sharing one load view over a NATS server. Pass one to
//! `KvRouter(..., replica=...)`; the router publishes its requests and applies its peers'.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use kvroute::nats::{NatsConfig, NatsReplica};

use crate::errors;

/// This router's replica handle: its NATS transport thread runs until it is dropped.
#[pyclass(name = "NatsReplica", module = "kvroute", frozen)]
pub struct PyNatsReplica {
    pub(crate) inner: NatsReplica,
}

#[pymethods]
impl PyNatsReplica {
    /// Starts the transport for replica `router_id` of `namespace` at `url`. A server that is
    /// down is not an error: the replica runs alone and connects when it is up.
    #[new]
    #[pyo3(signature = (url, namespace, router_id, *, heartbeat=None))]
    fn new(
        py: Python<'_>,
        url: String,
        namespace: String,
        router_id: u64,
        heartbeat: Option<f64>,
    ) -> PyResult<Self> {
        let mut config = NatsConfig::new(url, namespace, router_id);
        if let Some(v) = heartbeat {
            config.heartbeat = Duration::try_from_secs_f64(v).map_err(|_| {
                errors::NatsError::new_err(format!("heartbeat must be seconds >= 0, not {v}"))
            })?;
        }
        let inner = py.allow_threads(|| NatsReplica::start(config)).map_err(errors::nats)?;
        Ok(Self { inner })
    }

    /// This replica's router id.
    #[getter]
    fn router_id(&self) -> u64 {
        self.inner.router_id()
    }

    /// Waits up to `timeout` seconds for the connection; whether it is up.
    fn wait_connected(&self, py: Python<'_>, timeout: f64) -> bool {
        let timeout = Duration::try_from_secs_f64(timeout).unwrap_or_default();
        py.allow_threads(|| self.inner.wait_connected(timeout))
    }

    /// Waits up to `timeout` seconds until every known peer is caught up; whether they are.
    fn wait_caught_up(&self, py: Python<'_>, timeout: f64) -> bool {
        let timeout = Duration::try_from_secs_f64(timeout).unwrap_or_default();
        py.allow_threads(|| self.inner.wait_caught_up(timeout))
    }

    /// The transport's counters, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("connected", s.connected)?;
        d.set_item("unsent", s.unsent)?;
        d.set_item("dropped", s.dropped)?;
        d.set_item("published", s.published)?;
        d.set_item("applied", s.applied)?;
        Ok(d)
    }
}
