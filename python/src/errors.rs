//! The exception hierarchy: `KvrouteError` and one subclass per Rust error enum, each raised
//! with the Rust error's own message (its `Display`).

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{PyErr, create_exception};

use kvroute::hash::HashError;
use kvroute::index::EnqueueError;
use kvroute::nats::NatsError as RustNatsError;
use kvroute::pool::LaneDown;
use kvroute::recovery::SnapshotError as RustSnapshotError;
use kvroute::router::{RouteError as RustRouteError, RouterConfigError};
use kvroute::sequences::UnknownRequest;
use kvroute::wire::WireError as RustWireError;
use kvroute::wire::zmq::ZmqError as RustZmqError;

create_exception!(kvroute, KvrouteError, PyException, "Base of every error kvroute raises.");
create_exception!(
    kvroute,
    ConfigError,
    KvrouteError,
    "A configuration is out of range (Rust `RouterConfigError`, `HashError`)."
);
create_exception!(
    kvroute,
    RouteError,
    KvrouteError,
    "A routing call was refused (Rust `RouteError`); `kind` names the variant."
);
create_exception!(
    kvroute,
    UnknownRequestError,
    KvrouteError,
    "No request in flight has this id (Rust `UnknownRequest`)."
);
create_exception!(
    kvroute,
    EventError,
    KvrouteError,
    "An event was refused or malformed (Rust `EnqueueError`, or a bad event value)."
);
create_exception!(
    kvroute,
    IndexDownError,
    KvrouteError,
    "The index lanes have stopped (Rust `LaneDown`)."
);
create_exception!(
    kvroute,
    SnapshotError,
    KvrouteError,
    "Saving or restoring a snapshot failed (Rust `SnapshotError`)."
);
create_exception!(
    kvroute,
    WireError,
    KvrouteError,
    "An engine's wire message could not be decoded (Rust `WireError`)."
);
create_exception!(
    kvroute,
    ZmqError,
    KvrouteError,
    "The ZMQ subscriber could not start (Rust `ZmqError`)."
);
create_exception!(kvroute, NatsError, KvrouteError, "A NATS replica failed (Rust `NatsError`).");

/// Registers the exception classes on the module, under their Python names.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("KvrouteError", py.get_type::<KvrouteError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("RouteError", py.get_type::<RouteError>())?;
    m.add("UnknownRequestError", py.get_type::<UnknownRequestError>())?;
    m.add("EventError", py.get_type::<EventError>())?;
    m.add("IndexDownError", py.get_type::<IndexDownError>())?;
    m.add("SnapshotError", py.get_type::<SnapshotError>())?;
    m.add("WireError", py.get_type::<WireError>())?;
    m.add("ZmqError", py.get_type::<ZmqError>())?;
    m.add("NatsError", py.get_type::<NatsError>())?;
    Ok(())
}

/// `RouterConfigError` as `ConfigError`.
pub fn config(e: RouterConfigError) -> PyErr {
    ConfigError::new_err(e.to_string())
}

/// `HashError` as `ConfigError`.
pub fn hash(e: HashError) -> PyErr {
    ConfigError::new_err(e.to_string())
}

/// `RouteError` as `kvroute.RouteError`, with `kind` set to the variant's stable name.
pub fn route(e: RustRouteError) -> PyErr {
    let err = RouteError::new_err(e.to_string());
    Python::with_gil(|py| {
        // Setting an attribute on a fresh exception object cannot fail but for memory.
        let _ = err.value(py).setattr("kind", e.kind());
    });
    err
}

/// `UnknownRequest` as `UnknownRequestError`.
pub fn unknown(e: UnknownRequest) -> PyErr {
    UnknownRequestError::new_err(e.to_string())
}

/// `EnqueueError` as `EventError` (or `IndexDownError` for stopped lanes).
pub fn enqueue(e: EnqueueError) -> PyErr {
    match e {
        EnqueueError::LaneDown => IndexDownError::new_err(e.to_string()),
        other => EventError::new_err(other.to_string()),
    }
}

/// `LaneDown` as `IndexDownError`.
pub fn lane_down(e: LaneDown) -> PyErr {
    IndexDownError::new_err(e.to_string())
}

/// `SnapshotError` as `kvroute.SnapshotError`.
pub fn snapshot(e: RustSnapshotError) -> PyErr {
    SnapshotError::new_err(e.to_string())
}

/// `WireError` as `kvroute.WireError`.
pub fn wire(e: RustWireError) -> PyErr {
    WireError::new_err(e.to_string())
}

/// `ZmqError` as `kvroute.ZmqError`.
pub fn zmq(e: RustZmqError) -> PyErr {
    ZmqError::new_err(e.to_string())
}

/// `NatsError` as `kvroute.NatsError`.
pub fn nats(e: RustNatsError) -> PyErr {
    NatsError::new_err(e.to_string())
}

/// A malformed event value from Python (a bad tier name, a missing key) as `EventError`.
pub fn bad_event(message: impl Into<String>) -> PyErr {
    EventError::new_err(message.into())
}
