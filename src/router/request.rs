//! What a caller asks the router ([`RouteRequest`]) and what it answers ([`RouteDecision`]).

use crate::event::{LocalBlockHash, Worker, WorkerId};
use crate::router::RouteOverrides;
use crate::sequences::RequestId;

/// The prompt of a request: its tokens, or its block hashes computed elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteInput<'a> {
    /// The prompt's tokens; the router hashes its full blocks.
    Tokens(&'a [u32]),
    /// The prompt's full blocks' content hashes (see [`crate::hash`]) and its length in
    /// tokens (which may end in a partial block).
    Hashes {
        /// Content hashes of the full blocks, in order.
        local: &'a [LocalBlockHash],
        /// Input length in tokens.
        isl: usize,
    },
}

/// One routing question. Borrowed, so asking allocates nothing.
///
/// ```
/// use kvroute::router::RouteRequest;
///
/// let tokens = [1u32, 2, 3, 4, 5];
/// let request = RouteRequest::tokens(&tokens).with_id("req-1").update_states(true);
/// assert!(request.update_states);
/// ```
#[derive(Clone, Debug, Default)]
pub struct RouteRequest<'a> {
    /// The prompt.
    pub input: Option<RouteInput<'a>>,
    /// LoRA adapter the request uses (salts the block hashes as the engines do).
    pub lora_name: Option<&'a str>,
    /// Cache namespace (salts the block hashes as the engines do).
    pub cache_namespace: Option<&'a str>,
    /// Multimodal objects per block: `multimodal[i]` holds the `mm_hash`es of the objects in
    /// block `i` (see [`crate::hash::BlockHasher::local_hashes_mm`]).
    pub multimodal: &'a [Vec<u64>],
    /// The request's id; required when `update_states` is set.
    pub request_id: Option<RequestId>,
    /// Only these workers (any of their dp ranks) may serve it; `None` allows every worker.
    pub allowed_workers: Option<&'a [WorkerId]>,
    /// Serve it on this (worker, dp_rank), whatever the costs.
    pub pinned_worker: Option<Worker>,
    /// Per-request weights.
    pub overrides: RouteOverrides,
    /// Record the request as in flight on the chosen worker (the id is required).
    pub update_states: bool,
    /// Keep requests of this conversation on the worker first chosen for it.
    pub session_id: Option<&'a str>,
    /// Return every candidate's cost terms in [`RouteDecision::breakdown`] (allocates).
    pub breakdown: bool,
}

impl<'a> RouteRequest<'a> {
    /// A request for `tokens`, every other field at its default.
    pub fn tokens(tokens: &'a [u32]) -> Self {
        Self { input: Some(RouteInput::Tokens(tokens)), ..Self::default() }
    }

    /// A request whose full blocks' content hashes are `local`, `isl` tokens long.
    pub fn hashes(local: &'a [LocalBlockHash], isl: usize) -> Self {
        Self { input: Some(RouteInput::Hashes { local, isl }), ..Self::default() }
    }

    /// Sets the request id.
    pub fn with_id(mut self, id: impl Into<RequestId>) -> Self {
        self.request_id = Some(id.into());
        self
    }

    /// Sets whether the request is recorded as in flight on the chosen worker.
    pub fn update_states(mut self, update: bool) -> Self {
        self.update_states = update;
        self
    }

    /// Restricts the candidates to these workers.
    pub fn allowed(mut self, workers: &'a [WorkerId]) -> Self {
        self.allowed_workers = Some(workers);
        self
    }

    /// Pins the request to `worker`.
    pub fn pinned(mut self, worker: Worker) -> Self {
        self.pinned_worker = Some(worker);
        self
    }

    /// Sets the per-request weights.
    pub fn with_overrides(mut self, overrides: RouteOverrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// Names the request's session.
    pub fn in_session(mut self, session: &'a str) -> Self {
        self.session_id = Some(session);
        self
    }

    /// Asks for every candidate's cost terms.
    pub fn with_breakdown(mut self) -> Self {
        self.breakdown = true;
        self
    }
}

/// One candidate's terms in the cost model (lower logit is better), for logging.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// The (worker, dp_rank).
    pub worker: Worker,
    /// Leading blocks of the request it holds on its device.
    pub overlap_blocks: u32,
    /// Device blocks plus lower-tier and shared-cache continuation blocks at their weights.
    pub effective_overlap: f64,
    /// Prompt tokens it would compute plus the prefill tokens it already has queued.
    pub prefill_tokens: f64,
    /// `prefill_tokens / block_size`.
    pub prefill_blocks: f64,
    /// Prefill tokens it already has queued (its requests in flight not yet prefilled).
    pub queued_prefill_tokens: usize,
    /// Blocks its requests in flight would pin with this one added.
    pub decode_blocks: usize,
    /// Requests in flight on it now.
    pub active_requests: usize,
    /// `weight × prefill_blocks + decode_blocks`.
    pub logit: f64,
}

/// The router's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouteDecision {
    /// The (worker, dp_rank) that should serve the request (its prefill, when serving is
    /// disaggregated).
    pub worker: Worker,
    /// Leading blocks of the request that worker holds on its device.
    pub overlap_blocks: u32,
    /// Full blocks in the request.
    pub request_blocks: usize,
    /// With disaggregated serving (some workers prefill-only or decode-only), the worker that
    /// decodes the request; `None` when `worker` does both.
    pub decode_worker: Option<Worker>,
    /// True when the session's earlier worker was kept.
    pub session_hit: bool,
    /// Every candidate's terms, when the request asked for them.
    pub breakdown: Option<Vec<Candidate>>,
}
