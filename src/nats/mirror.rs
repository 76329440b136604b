//! [`Mirror`]: one replica's requests in flight, rebuilt from its event stream.
//!
//! The transport keeps one for its own replica (fed by the events it publishes, so it can
//! answer snapshot requests consistently with its sequence numbers) and one per peer (fed by
//! that peer's events and snapshots, so a snapshot can be turned into the few events that take
//! the local tracker from what it was told before to the peer's state now).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::frame::RequestState;
use crate::sequences::{RequestId, SequenceEvent, SequenceEventData};

/// One event for the local tracker, `times` times over: a request's progress travels as a
/// count (a snapshot saying "40 blocks decoded" is one entry, not 40 events).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Change {
    pub(crate) event: SequenceEvent,
    pub(crate) times: u32,
}

impl Change {
    pub(crate) fn once(event: SequenceEvent) -> Self {
        Self { event, times: 1 }
    }
}

/// One replica's requests in flight, with when each was added (to forget them on expiry, as
/// the trackers do).
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    requests: HashMap<RequestId, (RequestState, Instant), ahash::RandomState>,
}

impl Mirror {
    /// Applies one event of the replica (its router id is not checked).
    pub(crate) fn apply(&mut self, event: &SequenceEvent, now: Instant) {
        let id = &event.request_id;
        match &event.data {
            SequenceEventData::AddRequest { blocks, isl, overlap } => {
                let state = RequestState {
                    request_id: id.clone(),
                    worker: event.worker,
                    blocks: blocks.clone(),
                    isl: *isl,
                    overlap: *overlap,
                    prefill_completed: false,
                    output_blocks: 0,
                };
                self.requests.insert(id.clone(), (state, now));
            }
            SequenceEventData::MarkPrefillCompleted => {
                if let Some((state, _)) = self.requests.get_mut(id) {
                    state.prefill_completed = true;
                }
            }
            SequenceEventData::AddOutputBlock => {
                if let Some((state, _)) = self.requests.get_mut(id) {
                    state.output_blocks = state.output_blocks.saturating_add(1);
                }
            }
            SequenceEventData::Free => {
                self.requests.remove(id);
            }
        }
    }

    /// Applies a [`Change`]: its event `times` times over (progress as one addition).
    pub(crate) fn apply_change(&mut self, change: &Change, now: Instant) {
        match change.event.data {
            SequenceEventData::AddOutputBlock => {
                if let Some((state, _)) = self.requests.get_mut(&change.event.request_id) {
                    state.output_blocks = state.output_blocks.saturating_add(change.times);
                }
            }
            _ if change.times > 0 => self.apply(&change.event, now),
            _ => {}
        }
    }

    /// Forgets requests added more than `expiry` ago (the trackers drop them on their own).
    pub(crate) fn expire(&mut self, now: Instant, expiry: Duration) {
        self.requests.retain(|_, (_, added)| now.saturating_duration_since(*added) < expiry);
    }

    pub(crate) fn len(&self) -> usize {
        self.requests.len()
    }

    /// Every request, in no particular order.
    pub(crate) fn states(&self) -> impl Iterator<Item = &RequestState> {
        self.requests.values().map(|(state, _)| state)
    }

    /// Frees every request (as events of `origin`) and forgets them.
    pub(crate) fn clear(&mut self, origin: u64, out: &mut Vec<Change>) {
        for (id, (state, _)) in self.requests.drain() {
            out.push(Change::once(event(origin, id, &state, SequenceEventData::Free)));
        }
    }

    /// Becomes `target` (a snapshot), pushing onto `out` the events that take a tracker which
    /// applied this mirror's events to the same state: frees of what is gone, adds of what is
    /// new, the missing progress of what stayed.
    pub(crate) fn replace(
        &mut self,
        origin: u64,
        target: Vec<RequestState>,
        now: Instant,
        out: &mut Vec<Change>,
    ) {
        let mut old = std::mem::take(&mut self.requests);
        for state in target {
            let id = state.request_id.clone();
            match old.remove(&id) {
                Some((before, added)) if same_request(&before, &state) => {
                    if state.prefill_completed && !before.prefill_completed {
                        out.push(Change::once(event(
                            origin,
                            id.clone(),
                            &state,
                            SequenceEventData::MarkPrefillCompleted,
                        )));
                    }
                    let decoded = state.output_blocks - before.output_blocks;
                    if decoded > 0 {
                        let data = SequenceEventData::AddOutputBlock;
                        let progress = event(origin, id.clone(), &state, data);
                        out.push(Change { event: progress, times: decoded });
                    }
                    self.requests.insert(id, (state, added));
                }
                before => {
                    if let Some((before, _)) = before {
                        let free = event(origin, id.clone(), &before, SequenceEventData::Free);
                        out.push(Change::once(free));
                    }
                    push_whole(origin, &state, out);
                    self.requests.insert(id, (state, now));
                }
            }
        }
        for (id, (state, _)) in old {
            out.push(Change::once(event(origin, id, &state, SequenceEventData::Free)));
        }
    }
}

/// Whether `after` can follow `before` by progress alone (prefill completing, blocks decoded).
fn same_request(before: &RequestState, after: &RequestState) -> bool {
    before.worker == after.worker
        && before.blocks == after.blocks
        && before.isl == after.isl
        && before.overlap == after.overlap
        && before.output_blocks <= after.output_blocks
        && (after.prefill_completed || !before.prefill_completed)
}

/// The events that add `state` from nothing.
pub(crate) fn push_whole(origin: u64, state: &RequestState, out: &mut Vec<Change>) {
    let add = SequenceEventData::AddRequest {
        blocks: state.blocks.clone(),
        isl: state.isl,
        overlap: state.overlap,
    };
    let id = &state.request_id;
    out.push(Change::once(event(origin, id.clone(), state, add)));
    if state.prefill_completed {
        let data = SequenceEventData::MarkPrefillCompleted;
        out.push(Change::once(event(origin, id.clone(), state, data)));
    }
    if state.output_blocks > 0 {
        let progress = event(origin, id.clone(), state, SequenceEventData::AddOutputBlock);
        out.push(Change { event: progress, times: state.output_blocks });
    }
}

fn event(
    origin: u64,
    request_id: RequestId,
    state: &RequestState,
    data: SequenceEventData,
) -> SequenceEvent {
    SequenceEvent { router_id: origin, request_id, worker: state.worker, data }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{SequenceHash, Worker};

    fn add(id: &str, worker: u64) -> SequenceEvent {
        SequenceEvent {
            router_id: 9,
            request_id: id.into(),
            worker: Worker::new(worker, 0),
            data: SequenceEventData::AddRequest {
                blocks: Some(vec![SequenceHash(1)]),
                isl: 20,
                overlap: 0,
            },
        }
    }

    fn with(event: &SequenceEvent, data: SequenceEventData) -> SequenceEvent {
        SequenceEvent { data, ..event.clone() }
    }

    fn sorted(mirror: &Mirror) -> Vec<RequestState> {
        let mut states: Vec<_> = mirror.states().cloned().collect();
        states.sort_by(|a, b| a.request_id.as_str().cmp(b.request_id.as_str()));
        states
    }

    #[test]
    fn replace_emits_what_turns_the_old_state_into_the_new() {
        let now = Instant::now();
        // What the peer told us before a gap ...
        let mut seen = Mirror::default();
        let (a, b, c) = (add("a", 1), add("b", 1), add("c", 2));
        for e in [&a, &b, &c] {
            seen.apply(e, now);
        }
        // ... and what it holds now: a progressed, b gone, c moved worker (id reused), d new.
        let mut truth = Mirror::default();
        for e in [
            a.clone(),
            with(&a, SequenceEventData::MarkPrefillCompleted),
            with(&a, SequenceEventData::AddOutputBlock),
            with(&a, SequenceEventData::AddOutputBlock),
            add("c", 3),
            add("d", 1),
            with(&add("d", 1), SequenceEventData::AddOutputBlock),
        ] {
            truth.apply(&e, now);
        }
        let mut out = Vec::new();
        seen.replace(9, truth.states().cloned().collect(), now, &mut out);
        assert_eq!(sorted(&seen), sorted(&truth));

        // Replaying the events onto the old state gives the new one.
        let mut replayed = Mirror::default();
        for e in [&a, &b, &c] {
            replayed.apply(e, now);
        }
        for change in &out {
            for _ in 0..change.times {
                replayed.apply(&change.event, now);
            }
        }
        assert_eq!(sorted(&replayed), sorted(&truth));
        // Progress of a kept request is sent as progress (one counted entry), not as a re-add.
        let about_a: Vec<_> = out.iter().filter(|c| c.event.request_id.as_str() == "a").collect();
        assert_eq!(about_a.len(), 2);
        assert_eq!(about_a[1].times, 2);
    }

    #[test]
    fn clear_frees_everything_and_expiry_forgets_old_requests() {
        let t0 = Instant::now();
        let mut mirror = Mirror::default();
        mirror.apply(&add("a", 1), t0);
        mirror.apply(&add("b", 1), t0 + Duration::from_secs(10));
        mirror.expire(t0 + Duration::from_secs(12), Duration::from_secs(5));
        assert_eq!(mirror.len(), 1);
        let mut out = Vec::new();
        mirror.clear(4, &mut out);
        assert_eq!(mirror.len(), 0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].times, 1);
        assert_eq!(
            (out[0].event.router_id, out[0].event.data.clone()),
            (4, SequenceEventData::Free)
        );
    }
}
