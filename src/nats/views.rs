//! [`PeerViews`]: what this replica knows of each peer, and the catch-up protocol's state
//! machine. Pure logic (no I/O): frames in, events for the local tracker and snapshot requests
//! out, so every case is unit-tested without a server.
//!
//! Per peer (its router id) the view holds the peer's incarnation, the last of its changes
//! applied here (`applied`), whether `applied` is a complete baseline (`synced`), and a
//! [`Mirror`] of the peer's requests as applied here. A synced view applies change
//! `applied + 1` and drops older ones (duplicates); anything else is a gap: the view stops
//! applying, buffers what comes, and asks the peer for a snapshot (its requests as of some
//! change `s`); the snapshot replaces the mirror (the difference goes to the tracker as
//! events), then buffered changes after `s` apply. A heartbeat whose count is ahead of
//! `applied` is a gap too (the lost tail of a stream). A larger incarnation is a restarted
//! peer: what it had in flight is freed here, and it is synced afresh.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::frame::{Body, Frame, RequestState};
use super::mirror::Mirror;
use super::stats::Counters;
use crate::sequences::SequenceEvent;

/// What the transport must do after a frame or a tick.
#[derive(Debug, Default)]
pub(crate) struct Actions {
    /// Events for the local tracker, in order.
    pub(crate) events: Vec<SequenceEvent>,
    /// Peers to ask for a snapshot.
    pub(crate) ask: Vec<u64>,
}

/// A snapshot being received.
#[derive(Debug)]
struct Pending {
    asked: Instant,
    /// The change the snapshot is as of (known from its first part).
    seq: Option<u64>,
    next_part: u32,
    requests: Vec<RequestState>,
}

/// What this replica knows of one peer.
#[derive(Debug)]
struct View {
    incarnation: u64,
    /// When the peer was last heard from (a silent peer is not waited for).
    heard: Instant,
    applied: u64,
    synced: bool,
    mirror: Mirror,
    pending: Option<Pending>,
    /// Changes received while not synced, in arrival (= the peer's publish) order.
    buffered: Vec<(u64, SequenceEvent)>,
}

impl View {
    fn new(incarnation: u64, now: Instant) -> Self {
        Self {
            incarnation,
            heard: now,
            applied: 0,
            synced: false,
            mirror: Mirror::default(),
            pending: None,
            buffered: Vec::new(),
        }
    }

    /// Nothing received from this peer yet but its identity.
    fn untouched(&self) -> bool {
        self.applied == 0 && self.mirror.len() == 0 && self.buffered.is_empty()
    }
}

/// Every peer's view.
#[derive(Debug)]
pub(crate) struct PeerViews {
    views: HashMap<u64, View>,
    snapshot_timeout: Duration,
    /// A peer not heard from for this long is gone (or cut off): it is not asked for
    /// snapshots and not waited for, until it is heard again.
    silence: Duration,
    buffer_limit: usize,
}

impl PeerViews {
    pub(crate) fn new(snapshot_timeout: Duration, silence: Duration, buffer_limit: usize) -> Self {
        let buffer_limit = buffer_limit.max(1);
        Self { views: HashMap::new(), snapshot_timeout, silence, buffer_limit }
    }

    fn live(&self, view: &View, now: Instant) -> bool {
        now.saturating_duration_since(view.heard) < self.silence
    }

    /// Peers heard from lately.
    pub(crate) fn live_peers(&self, now: Instant) -> usize {
        self.views.values().filter(|view| self.live(view, now)).count()
    }

    /// Whether this replica holds the whole history of every peer heard from lately.
    pub(crate) fn all_synced(&self, now: Instant) -> bool {
        self.views.values().all(|view| view.synced || !self.live(view, now))
    }

    /// Handles an `Events` or `Beat` frame from a peer's stream.
    pub(crate) fn on_stream(
        &mut self,
        frame: Frame,
        now: Instant,
        stats: &Counters,
        out: &mut Actions,
    ) {
        let (origin, limit) = (frame.origin, self.buffer_limit);
        let Some(view) = self.view(origin, frame.incarnation, now, stats, out) else { return };
        match frame.body {
            Body::Events { first, events } => {
                if events.iter().any(|event| event.router_id != origin) {
                    Counters::bump(&stats.decode_errors);
                    return;
                }
                for (seq, event) in (first..).zip(events) {
                    on_event(view, origin, seq, event, limit, now, stats, out);
                }
            }
            Body::Beat { last_seq } => {
                if view.synced {
                    if last_seq > view.applied {
                        Counters::bump(&stats.gaps);
                        view.synced = false;
                        ask(view, origin, now, stats, out);
                    }
                } else if last_seq == 0 && view.untouched() && view.pending.is_none() {
                    view.synced = true;
                } else {
                    ask(view, origin, now, stats, out);
                }
            }
            Body::Hello | Body::Snapshot { .. } => {}
        }
    }

    /// Handles one part of a snapshot this replica asked for.
    pub(crate) fn on_snapshot(
        &mut self,
        frame: Frame,
        now: Instant,
        stats: &Counters,
        out: &mut Actions,
    ) {
        let Body::Snapshot { seq, part, last, requests } = frame.body else { return };
        let origin = frame.origin;
        let Some(view) = self.views.get_mut(&origin) else { return };
        if view.incarnation != frame.incarnation {
            return;
        }
        let Some(pending) = &mut view.pending else { return };
        if part != pending.next_part || pending.seq.is_some_and(|s| s != seq) {
            // A part of another answer, or one lost: give this answer up, ask again on a tick.
            view.pending = None;
            return;
        }
        pending.seq = Some(seq);
        pending.next_part += 1;
        pending.requests.extend(requests);
        if !last {
            return;
        }
        let Some(pending) = view.pending.take() else { return };
        view.mirror.replace(origin, pending.requests, now, &mut out.events);
        view.applied = seq;
        view.synced = true;
        Counters::bump(&stats.snapshots_applied);
        let buffered = std::mem::take(&mut view.buffered);
        let mut rest = buffered.into_iter();
        for (seq, event) in rest.by_ref() {
            if seq <= view.applied {
                continue;
            }
            if seq == view.applied + 1 {
                apply(view, seq, event, now, out);
                continue;
            }
            Counters::bump(&stats.gaps);
            view.synced = false;
            view.buffered.push((seq, event));
            break;
        }
        view.buffered.extend(rest);
        if !view.synced {
            ask(view, origin, now, stats, out);
        }
    }

    /// Gives up snapshots not answered in time (asking again) and forgets expired requests.
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        expiry: Duration,
        stats: &Counters,
        out: &mut Actions,
    ) {
        let silence = self.silence;
        for (&origin, view) in &mut self.views {
            view.mirror.expire(now, expiry);
            if now.saturating_duration_since(view.heard) >= silence {
                view.pending = None;
                continue;
            }
            if view
                .pending
                .as_ref()
                .is_some_and(|p| now.saturating_duration_since(p.asked) >= self.snapshot_timeout)
            {
                view.pending = None;
            }
            if !view.synced {
                ask(view, origin, now, stats, out);
            }
        }
    }

    /// The view of `origin`, after handling a change of incarnation; `None` for a frame of an
    /// incarnation older than the one known (a stale message of a replica that restarted).
    fn view(
        &mut self,
        origin: u64,
        incarnation: u64,
        now: Instant,
        stats: &Counters,
        out: &mut Actions,
    ) -> Option<&mut View> {
        let view = self.views.entry(origin).or_insert_with(|| View::new(incarnation, now));
        if incarnation < view.incarnation {
            Counters::bump(&stats.stale);
            return None;
        }
        if incarnation > view.incarnation {
            // The peer restarted with nothing in flight: what it had is gone everywhere.
            Counters::bump(&stats.peer_restarts);
            view.mirror.clear(origin, &mut out.events);
            *view = View::new(incarnation, now);
        }
        view.heard = now;
        Some(view)
    }
}

/// Handles change `seq` of peer `origin`.
#[allow(clippy::too_many_arguments)]
fn on_event(
    view: &mut View,
    origin: u64,
    seq: u64,
    event: SequenceEvent,
    limit: usize,
    now: Instant,
    stats: &Counters,
    out: &mut Actions,
) {
    if view.synced {
        if seq <= view.applied {
            Counters::bump(&stats.duplicates);
        } else if seq == view.applied + 1 {
            apply(view, seq, event, now, out);
        } else {
            Counters::bump(&stats.gaps);
            view.synced = false;
            buffer(view, seq, event, limit, stats);
            ask(view, origin, now, stats, out);
        }
    } else if seq == 1 && view.untouched() && view.pending.is_none() {
        // First contact at the peer's first change: its whole history is here.
        view.synced = true;
        apply(view, seq, event, now, out);
    } else {
        buffer(view, seq, event, limit, stats);
        ask(view, origin, now, stats, out);
    }
}

fn apply(view: &mut View, seq: u64, event: SequenceEvent, now: Instant, out: &mut Actions) {
    view.mirror.apply(&event, now);
    view.applied = seq;
    out.events.push(event);
}

fn buffer(view: &mut View, seq: u64, event: SequenceEvent, limit: usize, stats: &Counters) {
    if view.buffered.len() >= limit {
        // The snapshot will be older than what is dropped here; the next change then shows a
        // gap and a newer snapshot follows.
        Counters::bump(&stats.buffer_overflows);
        view.buffered.clear();
    }
    view.buffered.push((seq, event));
}

/// Asks `origin` for a snapshot unless one is on its way.
fn ask(view: &mut View, origin: u64, now: Instant, stats: &Counters, out: &mut Actions) {
    if view.pending.is_none() {
        view.pending = Some(Pending { asked: now, seq: None, next_part: 0, requests: Vec::new() });
        Counters::bump(&stats.snapshots_requested);
        out.ask.push(origin);
    }
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
