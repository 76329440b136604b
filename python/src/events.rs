//! Ids, tiers and KV events on the Python side: `RouterEvent`, a small frozen class, which
//! converts to and from a dict in Dynamo's JSON shape (`{"worker_id": ..., "storage_tier": ...,
//! "event": {"event_id": ..., "data": {"stored": {...}} , "dp_rank": ...}}`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use kvroute::wire::{dynamo_from_json, dynamo_to_json};
use kvroute::{KvEventData, RouterEvent, SequenceHash, StorageTier, StoredBlock, Worker, WorkerId};

use crate::errors;

/// A tier from its Python name: "device", "host_pinned", "disk" or "external".
pub fn tier_from_str(name: &str) -> PyResult<StorageTier> {
    match name {
        "device" => Ok(StorageTier::Device),
        "host_pinned" => Ok(StorageTier::HostPinned),
        "disk" => Ok(StorageTier::Disk),
        "external" => Ok(StorageTier::External),
        other => Err(errors::bad_event(format!(
            "unknown storage tier {other:?} (expected device, host_pinned, disk or external)"
        ))),
    }
}

/// A tier's Python name.
pub fn tier_name(tier: StorageTier) -> &'static str {
    match tier {
        StorageTier::Device => "device",
        StorageTier::HostPinned => "host_pinned",
        StorageTier::Disk => "disk",
        StorageTier::External => "external",
    }
}

/// One KV event of one worker's engine (immutable).
///
/// Build one with `RouterEvent.stored(...)`, `.removed(...)` or `.cleared(...)`, or from a
/// dict in Dynamo's JSON shape with `RouterEvent.from_dict(d)`.
#[pyclass(name = "RouterEvent", module = "kvroute", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyRouterEvent {
    pub(crate) inner: RouterEvent,
}

impl PyRouterEvent {
    fn with(
        worker_id: u64,
        dp_rank: u32,
        event_id: u64,
        tier: &str,
        data: KvEventData,
    ) -> PyResult<Self> {
        let mut inner = RouterEvent::new(Worker::new(worker_id, dp_rank), event_id, data);
        inner.tier = tier_from_str(tier)?;
        Ok(Self { inner })
    }
}

#[pymethods]
impl PyRouterEvent {
    /// A chain of blocks now cached: `blocks` is a list of `(local_hash, engine_hash)` pairs,
    /// prefix first, continuing the block whose engine hash is `parent` (or a root chain).
    #[staticmethod]
    #[pyo3(signature = (worker_id, event_id, blocks, *, parent=None, dp_rank=0, tier="device"))]
    fn stored(
        worker_id: u64,
        event_id: u64,
        blocks: Vec<(u64, u64)>,
        parent: Option<u64>,
        dp_rank: u32,
        tier: &str,
    ) -> PyResult<Self> {
        let blocks =
            blocks.into_iter().map(|(local, hash)| StoredBlock::new(local, hash)).collect();
        let data = KvEventData::Stored { parent: parent.map(SequenceHash), blocks };
        Self::with(worker_id, dp_rank, event_id, tier, data)
    }

    /// Blocks evicted, named by their engine hashes.
    #[staticmethod]
    #[pyo3(signature = (worker_id, event_id, blocks, *, dp_rank=0, tier="device"))]
    fn removed(
        worker_id: u64,
        event_id: u64,
        blocks: Vec<u64>,
        dp_rank: u32,
        tier: &str,
    ) -> PyResult<Self> {
        let data = KvEventData::Removed { blocks: blocks.into_iter().map(SequenceHash).collect() };
        Self::with(worker_id, dp_rank, event_id, tier, data)
    }

    /// The worker's whole cache (of this dp_rank and tier) was dropped.
    #[staticmethod]
    #[pyo3(signature = (worker_id, event_id, *, dp_rank=0, tier="device"))]
    fn cleared(worker_id: u64, event_id: u64, dp_rank: u32, tier: &str) -> PyResult<Self> {
        Self::with(worker_id, dp_rank, event_id, tier, KvEventData::Cleared)
    }

    /// An event from a dict in Dynamo's JSON shape.
    #[staticmethod]
    fn from_dict(py: Python<'_>, d: &Bound<'_, PyDict>) -> PyResult<Self> {
        let json = py.import("json")?.call_method1("dumps", (d,))?;
        Self::from_json(&json)
    }

    /// An event from Dynamo's JSON (str or bytes).
    #[staticmethod]
    fn from_json(json: &Bound<'_, PyAny>) -> PyResult<Self> {
        let inner = match json.downcast::<PyString>() {
            Ok(text) => dynamo_from_json(text.to_cow()?.as_bytes()),
            Err(_) => dynamo_from_json(json.downcast::<PyBytes>()?.as_bytes()),
        };
        Ok(Self { inner: inner.map_err(|e| errors::bad_event(e.to_string()))? })
    }

    /// This event as a dict in Dynamo's JSON shape.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?.call_method1("loads", (self.to_json(),))
    }

    /// This event as Dynamo's JSON.
    fn to_json(&self) -> String {
        dynamo_to_json(&self.inner)
    }

    /// The worker's id.
    #[getter]
    fn worker_id(&self) -> u64 {
        self.inner.worker_id.0
    }

    /// The worker's data-parallel rank.
    #[getter]
    fn dp_rank(&self) -> u32 {
        self.inner.event.dp_rank.0
    }

    /// The event's id in its stream.
    #[getter]
    fn event_id(&self) -> u64 {
        self.inner.event.event_id
    }

    /// The storage tier: "device", "host_pinned", "disk" or "external".
    #[getter]
    fn tier(&self) -> &'static str {
        tier_name(self.inner.tier)
    }

    /// "stored", "removed" or "cleared".
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner.event.data {
            KvEventData::Stored { .. } => "stored",
            KvEventData::Removed { .. } => "removed",
            KvEventData::Cleared => "cleared",
        }
    }

    /// A stored chain's parent engine hash (None for a root chain or another kind).
    #[getter]
    fn parent(&self) -> Option<u64> {
        match &self.inner.event.data {
            KvEventData::Stored { parent, .. } => parent.map(|p| p.0),
            _ => None,
        }
    }

    /// Stored: `(local_hash, engine_hash)` pairs; removed: engine hashes; cleared: empty.
    #[getter]
    fn blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.inner.event.data {
            KvEventData::Stored { blocks, .. } => {
                let pairs: Vec<(u64, u64)> = blocks.iter().map(|b| (b.local.0, b.hash.0)).collect();
                Ok(pairs.into_pyobject(py)?.into_any())
            }
            KvEventData::Removed { blocks } => {
                let hashes: Vec<u64> = blocks.iter().map(|b| b.0).collect();
                Ok(hashes.into_pyobject(py)?.into_any())
            }
            KvEventData::Cleared => Ok(Vec::<u64>::new().into_pyobject(py)?.into_any()),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RouterEvent(kind={:?}, worker_id={}, dp_rank={}, event_id={}, tier={:?}, blocks={})",
            self.kind(),
            self.worker_id(),
            self.dp_rank(),
            self.event_id(),
            self.tier(),
            self.inner.block_ops()
        )
    }
}

/// An event argument: a `RouterEvent`, or a dict in Dynamo's JSON shape.
pub fn event_arg(obj: &Bound<'_, PyAny>) -> PyResult<RouterEvent> {
    if let Ok(event) = obj.downcast::<PyRouterEvent>() {
        return Ok(event.get().inner.clone());
    }
    if let Ok(d) = obj.downcast::<PyDict>() {
        return Ok(PyRouterEvent::from_dict(obj.py(), d)?.inner);
    }
    Err(errors::bad_event(format!(
        "an event is a kvroute.RouterEvent or a dict in Dynamo's JSON shape, not {}",
        obj.get_type().name()?
    )))
}

/// A worker argument: an int id (dp_rank 0) or an `(id, dp_rank)` pair.
pub fn worker_arg(obj: &Bound<'_, PyAny>) -> PyResult<Worker> {
    if let Ok(id) = obj.extract::<u64>() {
        return Ok(Worker::new(id, 0));
    }
    let (id, rank): (u64, u32) = obj.extract()?;
    Ok(Worker { id: WorkerId(id), dp_rank: kvroute::DpRank(rank) })
}
