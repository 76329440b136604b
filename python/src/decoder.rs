//! `VllmDecoder`: vLLM/SGLang KV event batches (msgpack) in, `RouterEvent`s out.

use std::sync::Mutex;

use pyo3::prelude::*;

use kvroute::WorkerId;
use kvroute::wire::VllmDecoder;

use crate::errors;
use crate::events::PyRouterEvent;

/// One decoded batch: its sequence number, timestamp, dp_rank and events.
#[pyclass(name = "DecodedBatch", module = "kvroute", frozen)]
pub struct PyDecodedBatch {
    /// The batch's sequence number (the ZMQ message's `seq` frame).
    #[pyo3(get)]
    seq: u64,
    /// The engine's timestamp.
    #[pyo3(get)]
    ts: f64,
    /// The batch's data-parallel rank, if it names one.
    #[pyo3(get)]
    dp_rank: Option<u32>,
    /// Events of kinds the router does not use, skipped.
    #[pyo3(get)]
    skipped: usize,
    /// The events, in order.
    #[pyo3(get)]
    events: Vec<Py<PyRouterEvent>>,
}

#[pymethods]
impl PyDecodedBatch {
    fn __repr__(&self) -> String {
        format!(
            "DecodedBatch(seq={}, events={}, skipped={})",
            self.seq,
            self.events.len(),
            self.skipped
        )
    }
}

/// Decodes one engine's KV event batches; its events are attributed to `worker_id`.
#[pyclass(name = "VllmDecoder", module = "kvroute", frozen)]
pub struct PyVllmDecoder {
    // The decoder keeps per-engine state (the block size it learnt): one caller at a time.
    inner: Mutex<VllmDecoder>,
}

impl PyVllmDecoder {
    fn wrap(py: Python<'_>, batch: kvroute::wire::DecodedBatch) -> PyResult<PyDecodedBatch> {
        let events = batch
            .events
            .into_iter()
            .map(|inner| Py::new(py, PyRouterEvent { inner }))
            .collect::<PyResult<_>>()?;
        Ok(PyDecodedBatch {
            seq: batch.seq,
            ts: batch.ts,
            dp_rank: batch.dp_rank,
            skipped: batch.skipped,
            events,
        })
    }

    fn decoder(&self) -> std::sync::MutexGuard<'_, VllmDecoder> {
        // A panic inside the decoder would be a bug; its state is still a decoder's.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl PyVllmDecoder {
    /// A decoder for worker `worker_id`; batches naming no dp_rank get `default_dp_rank`.
    #[new]
    #[pyo3(signature = (worker_id, *, default_dp_rank=0))]
    fn new(worker_id: u64, default_dp_rank: u32) -> Self {
        let inner = VllmDecoder::new(WorkerId(worker_id)).with_default_dp_rank(default_dp_rank);
        Self { inner: Mutex::new(inner) }
    }

    /// The worker the decoded events are attributed to.
    #[getter]
    fn worker_id(&self) -> u64 {
        self.decoder().worker().0
    }

    /// Decodes a batch's msgpack `payload`, numbering its events `seq`.
    fn decode_batch(&self, py: Python<'_>, seq: u64, payload: &[u8]) -> PyResult<PyDecodedBatch> {
        let batch =
            py.allow_threads(|| self.decoder().decode_batch(seq, payload)).map_err(errors::wire)?;
        Self::wrap(py, batch)
    }

    /// Decodes a ZMQ multipart message `[topic, seq, payload]` (a list of bytes).
    fn decode_message(&self, py: Python<'_>, frames: Vec<Vec<u8>>) -> PyResult<PyDecodedBatch> {
        let batch =
            py.allow_threads(|| self.decoder().decode_message(&frames)).map_err(errors::wire)?;
        Self::wrap(py, batch)
    }
}
