//! A Python object as the router's `RecoverySource`: the engine side's record of its KV events,
//! asked by `KvRouter.run_recovery` for what a stream missed.
//!
//! The object has two methods (see `RecoverySource` in the stubs):
//! - `events_since(worker_id, dp_rank, tier, from_id)`: the stream's events from `from_id` on,
//!   as a list, or a dump `(events, last_event_id)` when they are no longer kept;
//! - `full_dump(worker_id, dp_rank, tier)`: `(events, last_event_id)`, the stream's whole state.
//!
//! Events are `RouterEvent`s or dicts in Dynamo's JSON shape. Whatever the object raises or
//! returns malformed becomes the Rust `RecoveryError` (`UnknownStream` for a `LookupError`,
//! `Unavailable` with the exception's text otherwise), which recovery retries with backoff.

use pyo3::exceptions::PyLookupError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use kvroute::recovery::{Dump, Recovered, RecoveryError, RecoverySource};
use kvroute::{RouterEvent, StorageTier, Worker};

use crate::events::{event_arg, tier_name};

/// The Python source, called with the GIL taken back (`run_recovery` runs without it).
pub struct PySource(pub Py<PyAny>);

fn events(obj: &Bound<'_, PyAny>) -> PyResult<Vec<RouterEvent>> {
    obj.try_iter()?.map(|event| event_arg(&event?)).collect()
}

fn dump(obj: &Bound<'_, PyAny>) -> PyResult<Dump> {
    let (list, last_event_id): (Bound<'_, PyAny>, u64) = obj.extract()?;
    Ok(Dump { events: events(&list)?, last_event_id })
}

impl PySource {
    fn call<T>(
        &self,
        worker: Worker,
        tier: StorageTier,
        call: impl FnOnce(&Bound<'_, PyAny>, (u64, u32, &'static str)) -> PyResult<T>,
    ) -> Result<T, RecoveryError> {
        Python::with_gil(|py| {
            let args = (worker.id.0, worker.dp_rank.0, tier_name(tier));
            call(self.0.bind(py), args).map_err(|e| {
                if e.is_instance_of::<PyLookupError>(py) {
                    RecoveryError::UnknownStream { worker, tier }
                } else {
                    RecoveryError::Unavailable(e.to_string())
                }
            })
        })
    }
}

impl RecoverySource for PySource {
    fn events_since(
        &self,
        worker: Worker,
        tier: StorageTier,
        from_id: u64,
    ) -> Result<Recovered, RecoveryError> {
        self.call(worker, tier, |source, (id, rank, tier)| {
            let answer = source.call_method1("events_since", (id, rank, tier, from_id))?;
            // A tuple is a dump; any other iterable, the events themselves.
            match answer.downcast::<PyTuple>() {
                Ok(_) => Ok(Recovered::Dump(dump(&answer)?)),
                Err(_) => Ok(Recovered::Events(events(&answer)?)),
            }
        })
    }

    fn full_dump(&self, worker: Worker, tier: StorageTier) -> Result<Dump, RecoveryError> {
        self.call(worker, tier, |source, args| dump(&source.call_method1("full_dump", args)?))
    }
}
