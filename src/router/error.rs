//! [`RouteError`]: why a routing call was refused. A refused call changes nothing.

use std::fmt;

use crate::event::Worker;
use crate::pool::LaneDown;
use crate::router::RouterConfigError;
use crate::sequences::AddRequestError;

/// Why [`KvRouter::route`](super::KvRouter::route) (or another request call) refused.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RouteError {
    /// The request has no prompt, or an empty one.
    EmptyRequest,
    /// `update_states` was asked for without a request id.
    MissingRequestId,
    /// The pinned (worker, dp_rank) is not registered.
    UnknownPinnedWorker(Worker),
    /// No registered worker may serve the request (none registered, none allowed, or none of
    /// the role it needs).
    NoWorkers,
    /// The request's overrides are out of range.
    BadOverrides(RouterConfigError),
    /// Recording the request in the load tracker failed (a duplicate id, say).
    Sequences(AddRequestError),
    /// The index lanes have stopped.
    IndexDown,
}

impl RouteError {
    /// A short stable name, for counters and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::EmptyRequest => "empty_request",
            Self::MissingRequestId => "missing_request_id",
            Self::UnknownPinnedWorker(_) => "unknown_pinned_worker",
            Self::NoWorkers => "no_workers",
            Self::BadOverrides(_) => "bad_overrides",
            Self::Sequences(_) => "sequences",
            Self::IndexDown => "index_down",
        }
    }
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyRequest => f.write_str("the request has no prompt tokens"),
            Self::MissingRequestId => f.write_str("update_states needs a request id"),
            Self::UnknownPinnedWorker(w) => write!(f, "pinned worker {w} is not registered"),
            Self::NoWorkers => f.write_str("no registered worker may serve this request"),
            Self::BadOverrides(e) => write!(f, "bad overrides: {e}"),
            Self::Sequences(e) => write!(f, "could not record the request: {e}"),
            Self::IndexDown => f.write_str("the index lanes have stopped"),
        }
    }
}

impl std::error::Error for RouteError {}

impl From<LaneDown> for RouteError {
    fn from(_: LaneDown) -> Self {
        Self::IndexDown
    }
}

impl From<AddRequestError> for RouteError {
    fn from(e: AddRequestError) -> Self {
        Self::Sequences(e)
    }
}
