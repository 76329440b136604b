//! [`KvRouter`]: the one object a gateway embeds to pick a worker for every request.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::event::{RouterEvent, StorageTier, Worker, WorkerId};
use crate::hash::BlockHasher;
use crate::index::{EnqueueError, PoolStats, SubmitError, TieredIndex};
use crate::pool::LaneDown;
use crate::recovery::StreamKey;
use crate::recovery::{Cursor, EventSink, RecoveryCore, RecoverySource, Snapshot, SnapshotError};
use crate::router::approx::ApproxTracker;
use crate::router::cost::{self, Scratch, Weights};
use crate::router::request::{Candidate, RouteDecision, RouteInput, RouteRequest};
use crate::router::selector::argmin_by;
use crate::router::sessions::SessionTable;
use crate::router::stats::RouterStats;
use crate::router::workers::{Registry, WorkerRole};
use crate::router::{KvRouterBuilder, RouteError, RouterConfig, RouterRng};
use crate::router::{SelectContext, SharedCache, WorkerSelector};
use crate::scores::OverlapScores;
use crate::sequences::{Clock, MultiWorkerSequences, PotentialLoad, RequestId, UnknownRequest};
use crate::sync::{AtomicU64, Ordering, RwLock};

thread_local! {
    /// Each routing thread's reused buffers: a warm `route` allocates nothing but its answer.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// KV-cache-aware routing for a fleet of workers: which worker should serve this request?
///
/// Every call is synchronous, on the caller's thread, and safe from many threads at once.
/// `route` hashes the prompt, asks the prefix index (every storage tier) how much of it each
/// worker holds, asks the load tracker what each worker already computes, and picks by the
/// cost model (see [`crate::router`]). Engines' KV events go in through
/// [`apply_event`](Self::apply_event); request progress through
/// [`mark_prefill_completed`](Self::mark_prefill_completed) and [`free`](Self::free).
pub struct KvRouter {
    pub(crate) config: RouterConfig,
    pub(crate) hasher: BlockHasher,
    /// Shared with approximate mode's recorder thread.
    pub(crate) index: crate::sync::Arc<TieredIndex>,
    /// Requests on workers that decode (or do both).
    pub(crate) sequences: MultiWorkerSequences,
    /// Requests prefilling on prefill-only workers.
    pub(crate) prefill_sequences: MultiWorkerSequences,
    pub(crate) workers: RwLock<Registry>,
    pub(crate) selector: Box<dyn WorkerSelector>,
    pub(crate) rng: RouterRng,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sessions: SessionTable,
    pub(crate) approx: Option<ApproxTracker>,
    pub(crate) recovery: Option<RecoveryCore>,
    /// Per tier, the index lane restarts already handed to recovery.
    pub(crate) restarts_seen: [AtomicU64; 4],
    pub(crate) shared_cache: Option<Box<dyn SharedCache>>,
    pub(crate) counters: Counters,
    pub(crate) started: Instant,
}

/// The router's own counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub decisions: AtomicU64,
    pub refused: AtomicU64,
    pub session_hits: AtomicU64,
    pub session_moves: AtomicU64,
    pub shared_cache_failures: AtomicU64,
}

impl KvRouter {
    /// A builder for a router set up by `config`.
    pub fn builder(config: RouterConfig) -> KvRouterBuilder {
        KvRouterBuilder::new(config)
    }

    /// A router with `config` and the default selector, clock and no shared cache.
    pub fn new(config: RouterConfig) -> Result<Self, crate::router::RouterConfigError> {
        Self::builder(config).build()
    }

    /// The router's settings.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Registers `worker` to serve whole requests (no-op if it does already).
    pub fn add_worker(&self, worker: Worker) {
        self.add_worker_with_role(worker, WorkerRole::Both);
    }

    /// Registers `worker` with `role`. Changing a worker's role drops the requests it had in
    /// flight from the load tracker (they are returned).
    pub fn add_worker_with_role(&self, worker: Worker, role: WorkerRole) -> Vec<RequestId> {
        let mut registry = self.workers.write();
        let old = registry.insert(worker, role);
        let dropped = match old {
            Some(old) if old == role => return Vec::new(),
            Some(old) => self.tracker(old).remove_worker(worker).unwrap_or_default(),
            None => Vec::new(),
        };
        self.tracker(role).add_worker(worker);
        dropped
    }

    /// Forgets every dp rank of worker `id`: from the candidates, every tier of the index, the
    /// load trackers, approximate mode and sessions. Returns the requests it had in flight.
    ///
    /// A decision in flight holds the registry (read) from its choice until it is recorded, so
    /// it either finished before the removal, which then forgets what it recorded, or sees the
    /// worker gone: nothing of the worker is left behind (ARCHITECTURE.md §6.5).
    pub fn remove_worker(&self, id: WorkerId) -> Result<Vec<RequestId>, LaneDown> {
        let mut registry = self.workers.write();
        let removed = registry.remove(id);
        let mut dropped = Vec::new();
        for (worker, role) in removed {
            dropped.extend(self.tracker(role).remove_worker(worker).unwrap_or_default());
        }
        if let Some(approx) = &self.approx {
            approx.remove_worker(id);
        }
        self.sessions.remove_worker(id);
        if let Some(recovery) = &self.recovery {
            recovery.remove_worker(id);
        }
        self.index.remove_worker(id)?;
        drop(registry);
        Ok(dropped)
    }

    /// Every registered (worker, dp_rank) with its role, sorted.
    pub fn workers(&self) -> Vec<(Worker, WorkerRole)> {
        self.workers.read().iter().collect()
    }

    fn tracker(&self, role: WorkerRole) -> &MultiWorkerSequences {
        match role {
            WorkerRole::Prefill => &self.prefill_sequences,
            WorkerRole::Decode | WorkerRole::Both => &self.sequences,
        }
    }

    /// Hands an engine's KV event to the index of its tier, waiting for room in its lane (with
    /// recovery on, through its stream's cursor first).
    ///
    /// An event over its tier's [`PoolConfig::max_event_blocks`](crate::index::PoolConfig) is
    /// refused at once ([`EnqueueError::TooManyBlocks`]). Without recovery,
    /// [`RouterEvent::split`] cuts it into events the index takes; with recovery on, its id is
    /// then missing from its stream, and recovery fetches it from the source and applies it in
    /// such pieces.
    pub fn apply_event(&self, event: RouterEvent) -> Result<(), EnqueueError> {
        match &self.recovery {
            // The index refuses it (and counts it) before the cursor sees it.
            Some(_) if self.oversized(&event) => self.index.apply_blocking(event),
            Some(recovery) => Ok(recovery.ingest(&*self.index, event)?),
            None => self.index.apply_blocking(event),
        }
    }

    /// Whether `event` carries more blocks than its tier takes in one event.
    fn oversized(&self, event: &RouterEvent) -> bool {
        event.block_ops() > self.index.max_event_blocks(event.tier)
    }

    /// Hands an engine's KV event to the index without waiting (see [`TieredIndex::apply`]).
    /// With recovery on this is [`Self::apply_event`]: a stream's events must keep their order
    /// through the cursor, so they may wait for room.
    pub fn try_apply_event(&self, event: RouterEvent) -> Result<(), SubmitError> {
        match &self.recovery {
            Some(_) if self.oversized(&event) => Err(SubmitError::TooManyBlocks(event)),
            Some(recovery) => {
                let kept = event.clone();
                recovery.ingest(&*self.index, event).map_err(|_| SubmitError::LaneDown(kept))
            }
            None => self.index.apply(event),
        }
    }

    /// Runs the recovery fetches due now against `source` (with recovery on; otherwise does
    /// nothing). Call it from the thread that receives events, or a thread of its own, never
    /// from the routing path; [`Self::recovery_due`] says when the next retry is due. Returns how
    /// many fetches ran.
    pub fn run_recovery(&self, source: &dyn RecoverySource) -> Result<usize, LaneDown> {
        match &self.recovery {
            Some(recovery) => {
                self.resync_restarted_lanes(recovery);
                recovery.run_pending(&*self.index, source)
            }
            None => Ok(0),
        }
    }

    /// An index lane that panicked started over without its workers' blocks: their streams
    /// are restored from full dumps (every stream of the tier if more restarts happened than
    /// the index remembers).
    fn resync_restarted_lanes(&self, recovery: &RecoveryCore) {
        for (tier, seen) in StorageTier::ALL.into_iter().zip(&self.restarts_seen) {
            let Some(pool) = self.index.tier(tier) else { continue };
            let stats = pool.stats();
            let before = seen.swap(stats.lane_restarts, Ordering::Relaxed);
            if stats.lane_restarts <= before {
                continue;
            }
            let workers = cleared_since(&stats, before).unwrap_or_else(|| {
                recovery.streams_of(tier).into_iter().map(|(worker, _)| worker).collect()
            });
            for worker in workers {
                recovery.invalidate(worker, tier);
            }
        }
    }

    /// Marks as invalidated the cursors of streams that index lane restarts not yet re-synced
    /// cleared: the index dumped beside them no longer holds what the cursors say was applied,
    /// so a restore must rebuild those streams from full dumps.
    fn invalidate_unsynced(&self, cursors: &mut [(StreamKey, Cursor)]) {
        for (tier, seen) in StorageTier::ALL.into_iter().zip(&self.restarts_seen) {
            let Some(pool) = self.index.tier(tier) else { continue };
            let stats = pool.stats();
            let seen = seen.load(Ordering::Relaxed);
            if stats.lane_restarts <= seen {
                continue;
            }
            let cleared = cleared_since(&stats, seen);
            for ((worker, stream_tier), cursor) in cursors.iter_mut() {
                let lost = cleared.as_ref().is_none_or(|cleared| cleared.contains(worker));
                if *stream_tier == tier && lost {
                    *cursor = Cursor::InvalidatedByBarrier;
                }
            }
        }
    }

    /// Writes the index (every tier) and the recovery cursors to `out`, consistent with each
    /// other (ingestion pauses while the index is flushed and dumped), for
    /// [`Self::restore_snapshot`] after a restart.
    ///
    /// Streams an index lane restart cleared, and that recovery has not rebuilt yet, are written
    /// as invalidated: a router restored from the file rebuilds them from full dumps.
    pub fn save_snapshot(&self, out: impl std::io::Write) -> Result<(), SnapshotError> {
        let take = |mut cursors: Vec<(StreamKey, Cursor)>| -> Result<Snapshot, LaneDown> {
            self.index.flush()?;
            let mut events = Vec::new();
            for tier in StorageTier::ALL {
                if let Some(pool) = self.index.tier(tier) {
                    events.extend(pool.dump_events()?.into_iter().map(|mut event| {
                        event.tier = tier;
                        event
                    }));
                }
            }
            // Read after the dump: a restart before it is seen (one after it costs a needless
            // restore, never a lost stream).
            self.invalidate_unsynced(&mut cursors);
            Ok(Snapshot { cursors, events })
        };
        let snapshot = match &self.recovery {
            Some(recovery) => recovery.paused(take),
            None => take(Vec::new()),
        };
        snapshot.map_err(|_| SnapshotError::LaneDown)?.write_to(out)
    }

    /// Starts this router (which has taken no event yet) from a snapshot: its index at once,
    /// and with recovery on its cursors, so recovery fetches only what was missed since. The
    /// file is read and checked whole first: a corrupt or truncated one changes nothing.
    pub fn restore_snapshot(&self, input: impl std::io::Read) -> Result<(), SnapshotError> {
        let snapshot = Snapshot::read_from(input)?;
        let lane_down = |_| SnapshotError::LaneDown;
        let empty = StorageTier::ALL
            .into_iter()
            .filter_map(|tier| self.index.tier(tier))
            .all(|pool| pool.workers().is_ok_and(|workers| workers.is_empty()));
        if !empty {
            return Err(SnapshotError::NotEmpty);
        }
        // A chain dumped whole may be longer than this router's index takes in one event.
        for event in snapshot.events {
            self.index.apply_split(event).map_err(lane_down)?;
        }
        self.index.flush().map_err(lane_down)?;
        if let Some(recovery) = &self.recovery {
            recovery.restore_cursors(&snapshot.cursors);
            // Streams saved as lost are rebuilt now, not at their next event.
            for &((worker, tier), cursor) in &snapshot.cursors {
                if cursor == Cursor::InvalidatedByBarrier {
                    recovery.invalidate(worker, tier);
                }
            }
        }
        Ok(())
    }

    /// When recovery's next waiting fetch (a retry after backoff) is due, if any.
    pub fn recovery_due(&self) -> Option<Instant> {
        self.recovery.as_ref().and_then(RecoveryCore::next_due)
    }

    /// A worker came back under a new instance id (or its state is otherwise known to be
    /// lost): each of its streams is restored from a full dump at the next recovery run.
    /// Without recovery, its state is dropped from the index instead (in approximate mode, with
    /// what it was presumed to hold).
    pub fn worker_restarted(&self, worker: Worker) -> Result<(), LaneDown> {
        match &self.recovery {
            // Only the streams the worker has: a tier it never used has nothing to restore, and
            // invalidating it would wait for good on a source that does not serve that tier.
            Some(recovery) => {
                for tier in StorageTier::ALL {
                    if recovery.streams_of(tier).iter().any(|&(w, _)| w == worker) {
                        recovery.invalidate(worker, tier);
                    }
                }
                Ok(())
            }
            // Only the tiers whose lanes run: one that never started holds nothing to clear.
            None => {
                let clear = || {
                    StorageTier::ALL
                        .into_iter()
                        .filter(|&tier| self.index.tier(tier).is_some())
                        .try_for_each(|tier| EventSink::clear(&*self.index, worker, tier))
                };
                match &self.approx {
                    // Approximate mode tells the index only blocks it does not presume held.
                    Some(approx) => approx.forget(worker, clear),
                    None => clear(),
                }
            }
        }
    }

    /// Returns once every event handed in before is visible to routing.
    pub fn flush(&self) -> Result<(), LaneDown> {
        if let Some(approx) = &self.approx {
            approx.flush()?;
        }
        self.index.flush()
    }

    /// The prefix index (every tier), for queries and stats.
    pub fn index(&self) -> &TieredIndex {
        &self.index
    }

    /// The load tracker of workers that decode (or serve whole requests).
    pub fn sequences(&self) -> &MultiWorkerSequences {
        &self.sequences
    }

    /// Picks the worker for `request`. With `update_states` the request is also recorded as
    /// in flight there; a refused call changes nothing.
    pub fn route(&self, request: &RouteRequest<'_>) -> Result<RouteDecision, RouteError> {
        let decided = SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.route_with(request, &mut scratch),
            // A selector that routes from inside `select` gets buffers of its own.
            Err(_) => self.route_with(request, &mut Scratch::default()),
        });
        let counter =
            if decided.is_ok() { &self.counters.decisions } else { &self.counters.refused };
        counter.fetch_add(1, Ordering::Relaxed);
        decided
    }

    fn route_with(
        &self,
        request: &RouteRequest<'_>,
        scratch: &mut Scratch,
    ) -> Result<RouteDecision, RouteError> {
        let isl = self.hash_input(request, scratch)?;
        if request.update_states && request.request_id.is_none() {
            return Err(RouteError::MissingRequestId);
        }
        request.overrides.validate().map_err(RouteError::BadOverrides)?;
        let now = self.clock.now();
        if let Some(approx) = &self.approx {
            approx.before_route(now)?;
        }
        self.index.find_matches_into(&scratch.hashes.local, &mut scratch.tiers);
        let shared_hits = self.shared_hits(scratch);

        let registry = self.workers.read();
        if let Some(pinned) = request.pinned_worker
            && registry.role(pinned).is_none()
        {
            return Err(RouteError::UnknownPinnedWorker(pinned));
        }
        let split = registry.disaggregated();
        self.collect_loads(scratch, isl, split);
        let overlap_score_weight =
            request.overrides.overlap_score_weight.unwrap_or(self.config.overlap_score_weight);
        let weights = Weights {
            block_size: self.config.block_size,
            overlap_score_weight,
            queued_prefill_weight: self
                .config
                .queued_prefill_weight
                .unwrap_or(overlap_score_weight),
            tiers: [
                self.config.host_hit_weight,
                self.config.disk_hit_weight,
                self.config.external_hit_weight,
            ],
            shared: self.config.shared_cache_hit_weight,
        };
        let allowed = |worker: Worker| {
            request.allowed_workers.is_none_or(|ids| ids.contains(&worker.id))
                && request.pinned_worker.is_none_or(|pinned| pinned == worker)
        };
        // Candidates come from the registry: a worker the trackers still hold while it is
        // being added or removed is none.
        let prefills =
            |worker| registry.role(worker).is_some_and(|role| !split || WorkerRole::prefills(role));
        scratch.candidates.clear();
        for load in &scratch.loads {
            if allowed(load.worker) && prefills(load.worker) {
                let lower = cost::lower_tiers(&scratch.tiers, load.worker);
                let candidate = cost::candidate(load, lower, shared_hits, isl, &weights);
                scratch.candidates.push(candidate);
            }
        }
        if scratch.candidates.is_empty() {
            return Err(RouteError::NoWorkers);
        }
        let temperature = request.overrides.temperature.unwrap_or(self.config.temperature);
        let context = SelectContext { temperature, rng: &self.rng };
        let (chosen, session_hit) = self.choose(request, &scratch.candidates, &context, now);
        let breakdown = request.breakdown.then(|| scratch.candidates.clone());
        let decode_worker = match split && registry.role(chosen.worker) == Some(WorkerRole::Prefill)
        {
            true => Some(self.choose_decoder(scratch, request, &registry)?),
            false => None,
        };

        // Recorded while the registry is held: a removal of the chosen worker waits for this
        // decision's state and then forgets it (see `remove_worker`).
        if request.update_states {
            self.record(request, scratch, isl, &chosen, decode_worker)?;
        }
        let request_blocks = scratch.hashes.local.len();
        if let Some(approx) = &self.approx {
            // The hashes go as they are (the next route hashes into new buffers).
            let hashes = std::mem::take(&mut scratch.hashes);
            approx.record(chosen.worker, hashes.local, hashes.sequence, now)?;
        }
        if let Some(session) = request.session_id {
            self.sessions.set(session, chosen.worker, now);
        }
        drop(registry);
        Ok(RouteDecision {
            worker: chosen.worker,
            overlap_blocks: chosen.overlap_blocks,
            request_blocks,
            decode_worker,
            session_hit,
            breakdown,
        })
    }

    /// Hashes the prompt into `scratch`; returns its length in tokens.
    fn hash_input(
        &self,
        request: &RouteRequest<'_>,
        scratch: &mut Scratch,
    ) -> Result<usize, RouteError> {
        let hasher = self.request_hasher(request);
        match request.input {
            None => Err(RouteError::EmptyRequest),
            Some(RouteInput::Tokens([])) | Some(RouteInput::Hashes { isl: 0, .. }) => {
                Err(RouteError::EmptyRequest)
            }
            Some(RouteInput::Tokens(tokens)) => {
                let (hashes, bytes) = (&mut scratch.hashes, &mut scratch.bytes);
                hasher.hash_request_into(tokens, request.multimodal, hashes, bytes);
                Ok(tokens.len())
            }
            Some(RouteInput::Hashes { local, isl }) => {
                scratch.hashes.local.clear();
                scratch.hashes.local.extend_from_slice(local);
                scratch.hashes.sequence.clear();
                crate::hash::extend_sequence_hashes(local, &mut scratch.hashes.sequence);
                Ok(isl)
            }
        }
    }

    /// The hasher `route` uses for `request`'s tokens (salted by its LoRA and cache namespace),
    /// for callers that hash a prompt themselves and route it as [`RouteInput::Hashes`].
    pub fn request_hasher(&self, request: &RouteRequest<'_>) -> BlockHasher {
        let mut hasher = self.hasher;
        if let Some(lora) = request.lora_name {
            hasher = hasher.with_lora(lora);
        }
        if let Some(namespace) = request.cache_namespace {
            hasher = hasher.with_namespace(namespace);
        }
        hasher
    }

    /// Leading blocks the shared cache holds, 0 if there is none or it failed (counted, logged).
    fn shared_hits(&self, scratch: &Scratch) -> usize {
        let Some(cache) = &self.shared_cache else { return 0 };
        match cache.prefix_hits(&scratch.hashes.local, &scratch.hashes.sequence) {
            Ok(hits) => hits,
            Err(error) => {
                self.counters.shared_cache_failures.fetch_add(1, Ordering::Relaxed);
                log::warn!("kvroute: {error}; scored as no hit");
                0
            }
        }
    }

    /// Every tracked worker's potential load for the request into `scratch.loads`.
    fn collect_loads(&self, scratch: &mut Scratch, isl: usize, split: bool) {
        // The trackers take the device overlaps as `OverlapScores`: lend them the buffer.
        let overlaps = OverlapScores::from_pairs(std::mem::take(&mut scratch.tiers.device));
        let candidate = &scratch.hashes.sequence;
        self.sequences.potential_loads_into(candidate, isl, &overlaps, &mut scratch.loads);
        if split {
            let more = &mut scratch.more_loads;
            self.prefill_sequences.potential_loads_into(candidate, isl, &overlaps, more);
            scratch.loads.extend_from_slice(more);
        }
        scratch.tiers.device = overlaps.into_pairs();
    }

    /// The candidate to route to, and whether the request's session kept its worker.
    fn choose(
        &self,
        request: &RouteRequest<'_>,
        candidates: &[Candidate],
        context: &SelectContext<'_>,
        now: Instant,
    ) -> (Candidate, bool) {
        if let Some(session) = request.session_id
            && let Some(worker) = self.sessions.get(session, now)
        {
            let least = candidates.iter().map(|c| c.decode_blocks).min().unwrap_or(0);
            let bound = self.config.sessions.load_bound * (least as f64 + 1.0);
            match candidates.iter().find(|c| c.worker == worker) {
                Some(kept) if kept.decode_blocks as f64 <= bound => {
                    self.counters.session_hits.fetch_add(1, Ordering::Relaxed);
                    return (*kept, true);
                }
                _ => {
                    self.counters.session_moves.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let at = self.selector.select(candidates, context);
        (candidates.get(at).copied().unwrap_or(candidates[0]), false)
    }

    /// The decode worker of a disaggregated request: the least loaded worker that decodes.
    fn choose_decoder(
        &self,
        scratch: &mut Scratch,
        request: &RouteRequest<'_>,
        registry: &Registry,
    ) -> Result<Worker, RouteError> {
        let decoders = &mut scratch.more_loads;
        decoders.clear();
        decoders.extend(scratch.loads.iter().filter(|load| {
            request.allowed_workers.is_none_or(|ids| ids.contains(&load.worker.id))
                && registry.role(load.worker).is_some_and(WorkerRole::decodes)
        }));
        if decoders.is_empty() {
            return Err(RouteError::NoWorkers);
        }
        // Decoders are compared by load alone: the prompt's KV cache moves to whichever wins.
        scratch.candidates.clear();
        scratch.candidates.extend(decoders.iter().map(|load| Candidate {
            worker: load.worker,
            decode_blocks: load.potential_blocks,
            active_requests: load.active_requests,
            logit: load.potential_blocks as f64,
            ..Candidate::default()
        }));
        let at =
            argmin_by(&scratch.candidates, &self.rng, |c| (c.decode_blocks, c.active_requests));
        Ok(scratch.candidates[at].worker)
    }

    /// Records a routed request in the load trackers; on error nothing stays recorded.
    fn record(
        &self,
        request: &RouteRequest<'_>,
        scratch: &Scratch,
        isl: usize,
        chosen: &Candidate,
        decode_worker: Option<Worker>,
    ) -> Result<(), RouteError> {
        let id = request.request_id.clone().ok_or(RouteError::MissingRequestId)?;
        let blocks = self.config.track_active_blocks.then_some(&scratch.hashes.sequence[..]);
        let overlap = chosen.overlap_blocks;
        let Some(decoder) = decode_worker else {
            self.sequences.add_request(id, chosen.worker, blocks, isl, overlap)?;
            return Ok(());
        };
        self.prefill_sequences.add_request(id.clone(), chosen.worker, blocks, isl, overlap)?;
        // The decoder receives the whole prompt's KV cache: nothing of it left to prefill.
        let cached = scratch.hashes.sequence.len() as u32;
        if let Err(error) = self.sequences.add_request(id.clone(), decoder, blocks, isl, cached) {
            let _ = self.prefill_sequences.free(&id);
            return Err(error.into());
        }
        Ok(())
    }

    /// Records request `id` (of `tokens`) as in flight on `worker`, outside `route`: for
    /// gateways that pick the worker themselves.
    pub fn add_request(
        &self,
        id: RequestId,
        tokens: &[u32],
        worker: Worker,
    ) -> Result<Vec<RequestId>, RouteError> {
        let hashes = self.hasher.hash_request(tokens);
        let overlap = self.overlap_blocks(tokens, worker);
        let blocks = self.config.track_active_blocks.then_some(&hashes.sequence[..]);
        // Held while recording, so a removal of the worker is ordered against it.
        let registry = self.workers.read();
        let role = registry.role(worker).ok_or(RouteError::UnknownPinnedWorker(worker))?;
        Ok(self.tracker(role).add_request(id, worker, blocks, tokens.len(), overlap)?)
    }

    /// The request's prefill is done: its prompt tokens stop counting as queued (on a
    /// prefill-only worker, the request leaves it).
    pub fn mark_prefill_completed(&self, id: &RequestId) -> Result<(), UnknownRequest> {
        let prefilled = self.prefill_sequences.free(id);
        let decoding = self.sequences.mark_prefill_completed(id);
        prefilled.or(decoding)
    }

    /// The request decoded one more block.
    pub fn add_output_block(&self, id: &RequestId) -> Result<(), UnknownRequest> {
        self.sequences.add_output_block(id)
    }

    /// The request finished (or was cancelled): it no longer loads any worker.
    pub fn free(&self, id: &RequestId) -> Result<(), UnknownRequest> {
        let prefilled = self.prefill_sequences.free(id);
        let decoding = self.sequences.free(id);
        decoding.or(prefilled)
    }

    /// Every registered worker's load if a request of `tokens` were sent to it.
    pub fn potential_loads(&self, tokens: &[u32]) -> Vec<PotentialLoad> {
        let hashes = self.hasher.hash_request(tokens);
        let overlaps = self.index.device().find_matches(&hashes.local);
        let mut loads = self.sequences.potential_loads(&hashes.sequence, tokens.len(), &overlaps);
        loads.extend(self.prefill_sequences.potential_loads(
            &hashes.sequence,
            tokens.len(),
            &overlaps,
        ));
        loads
    }

    /// Leading blocks of `tokens` that `worker` holds on its device.
    pub fn overlap_blocks(&self, tokens: &[u32], worker: Worker) -> u32 {
        let local = self.hasher.local_hashes(tokens);
        self.index.device().find_matches(&local).get(worker)
    }

    /// Expires approximate-mode blocks and requests past their TTLs now (both also happen
    /// lazily). Returns the expired requests.
    pub fn expire_now(&self) -> Result<Vec<RequestId>, LaneDown> {
        if let Some(approx) = &self.approx {
            approx.expire(self.clock.now())?;
        }
        let mut expired = self.sequences.expire_stale();
        expired.extend(self.prefill_sequences.expire_stale());
        Ok(expired)
    }

    /// A snapshot of the router's counters and sizes.
    pub fn stats(&self) -> RouterStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let registry = self.workers.read();
        RouterStats {
            workers: registry.len(),
            disaggregated: registry.disaggregated(),
            decisions: load(&self.counters.decisions),
            refused: load(&self.counters.refused),
            session_hits: load(&self.counters.session_hits),
            session_moves: load(&self.counters.session_moves),
            live_sessions: self.sessions.live(self.clock.now()),
            shared_cache_failures: load(&self.counters.shared_cache_failures),
            index: self.index.stats(),
            approx: self.approx.as_ref().map(ApproxTracker::stats),
            recovery: self.recovery.as_ref().map(RecoveryCore::stats),
            uptime: self.started.elapsed(),
        }
    }
}

impl fmt::Debug for KvRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvRouter")
            .field("config", &self.config)
            .field("workers", &self.workers.read().len())
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// The workers the index lane restarts in `stats` cleared after the first `seen` of them;
/// `None` if more happened than the pool remembers (then any of the tier's workers may be).
fn cleared_since(stats: &PoolStats, seen: u64) -> Option<Vec<Worker>> {
    let new = usize::try_from(stats.lane_restarts.saturating_sub(seen)).ok()?;
    let recent = stats.recent_restarts.get(stats.recent_restarts.len().checked_sub(new)?..)?;
    Some(recent.iter().flat_map(|restart| restart.cleared.iter().copied()).collect())
}
