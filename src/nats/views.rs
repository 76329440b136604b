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

use super::frame::{Body, Frame, MAX_SNAPSHOT_PROGRESS, MAX_SNAPSHOT_REQUESTS, RequestState};
use super::mirror::{Change, Mirror};
use super::stats::Counters;
use crate::sequences::SequenceEvent;

/// What the transport must do after a frame or a tick.
#[derive(Debug, Default)]
pub(crate) struct Actions {
    /// Events for the local tracker, in order (progress as a count).
    pub(crate) events: Vec<Change>,
    /// Snapshots to ask for: of which peer, and the token its answer must carry (the reply
    /// subject's last token), so that only the answer to this very request is taken.
    pub(crate) ask: Vec<(u64, u64)>,
}

/// A snapshot being received.
#[derive(Debug)]
struct Pending {
    /// Names this request's answer: parts of any other answer (an earlier request's, late)
    /// are not this one's and leave it alone.
    token: u64,
    asked: Instant,
    /// Decoded blocks the parts so far report, all requests together.
    progress: u64,
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
    /// The token of the last snapshot asked (tokens never repeat).
    last_token: u64,
}

impl PeerViews {
    pub(crate) fn new(snapshot_timeout: Duration, silence: Duration, buffer_limit: usize) -> Self {
        let buffer_limit = buffer_limit.max(1);
        Self { views: HashMap::new(), snapshot_timeout, silence, buffer_limit, last_token: 0 }
    }

    fn live(&self, view: &View, now: Instant) -> bool {
        now.saturating_duration_since(view.heard) < self.silence
    }

    /// What this replica believes `origin` holds.
    pub(crate) fn mirror(&self, origin: u64) -> Option<&Mirror> {
        self.views.get(&origin).map(|view| &view.mirror)
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
        let tokens = &mut self.last_token;
        let views = &mut self.views;
        let Some(view) = view(views, origin, frame.incarnation, now, stats, out) else { return };
        match frame.body {
            Body::Events { first, events } => {
                // Numbers past `u64::MAX` (refused at decode as well) are not a change's.
                let numbered = first > 0 && first.checked_add(events.len() as u64).is_some();
                if !numbered || events.iter().any(|event| event.router_id != origin) {
                    Counters::bump(&stats.decode_errors);
                    return;
                }
                let mut at = At { origin, now, tokens, stats, out };
                for (offset, event) in (0..).zip(events) {
                    on_event(view, first + offset, event, limit, &mut at);
                }
            }
            Body::Beat { last_seq } => {
                if view.synced {
                    if last_seq > view.applied {
                        Counters::bump(&stats.gaps);
                        view.synced = false;
                        ask(view, origin, now, tokens, stats, out);
                    }
                } else if last_seq == 0 && view.untouched() && view.pending.is_none() {
                    view.synced = true;
                } else {
                    ask(view, origin, now, tokens, stats, out);
                }
            }
            Body::Hello | Body::Snapshot { .. } => {}
        }
    }

    /// Handles one part of a snapshot this replica asked for, received with reply token
    /// `token`.
    pub(crate) fn on_snapshot(
        &mut self,
        token: u64,
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
        if token != pending.token {
            // The answer to an earlier request (given up): not this one's, and no harm to it.
            Counters::bump(&stats.stale);
            return;
        }
        let progress = requests.iter().map(|state| u64::from(state.output_blocks)).sum::<u64>();
        if part != pending.next_part
            || pending.seq.is_some_and(|s| s != seq)
            || pending.requests.len() + requests.len() > MAX_SNAPSHOT_REQUESTS
            || pending.progress + progress > MAX_SNAPSHOT_PROGRESS
        {
            // A part lost, or an answer past the bounds: give it up, ask again on a tick.
            view.pending = None;
            return;
        }
        pending.seq = Some(seq);
        pending.next_part += 1;
        pending.progress += progress;
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
            if Some(seq) == view.applied.checked_add(1) {
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
            ask(view, origin, now, &mut self.last_token, stats, out);
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
                ask(view, origin, now, &mut self.last_token, stats, out);
            }
        }
    }
}

/// The view of `origin`, after handling a change of incarnation; `None` for a frame of an
/// incarnation older than the one known (a stale message of a replica that restarted).
fn view<'a>(
    views: &'a mut HashMap<u64, View>,
    origin: u64,
    incarnation: u64,
    now: Instant,
    stats: &Counters,
    out: &mut Actions,
) -> Option<&'a mut View> {
    let view = views.entry(origin).or_insert_with(|| View::new(incarnation, now));
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

/// Where a peer's frame is handled: which peer, when, and where results go.
struct At<'a> {
    origin: u64,
    now: Instant,
    tokens: &'a mut u64,
    stats: &'a Counters,
    out: &'a mut Actions,
}

impl At<'_> {
    fn ask(&mut self, view: &mut View) {
        ask(view, self.origin, self.now, self.tokens, self.stats, self.out);
    }
}

/// Handles change `seq` of the peer `at` names.
fn on_event(view: &mut View, seq: u64, event: SequenceEvent, limit: usize, at: &mut At<'_>) {
    let stats = at.stats;
    if view.synced {
        if seq <= view.applied {
            Counters::bump(&stats.duplicates);
        } else if Some(seq) == view.applied.checked_add(1) {
            apply(view, seq, event, at.now, at.out);
        } else {
            Counters::bump(&stats.gaps);
            view.synced = false;
            buffer(view, seq, event, limit, stats);
            at.ask(view);
        }
    } else if seq == 1 && view.untouched() && view.pending.is_none() {
        // First contact at the peer's first change: its whole history is here.
        view.synced = true;
        apply(view, seq, event, at.now, at.out);
    } else {
        buffer(view, seq, event, limit, stats);
        at.ask(view);
    }
}

fn apply(view: &mut View, seq: u64, event: SequenceEvent, now: Instant, out: &mut Actions) {
    view.mirror.apply(&event, now);
    view.applied = seq;
    out.events.push(Change::once(event));
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

/// Asks `origin` for a snapshot unless one is on its way; the request gets the next token.
fn ask(
    view: &mut View,
    origin: u64,
    now: Instant,
    last_token: &mut u64,
    stats: &Counters,
    out: &mut Actions,
) {
    if view.pending.is_none() {
        *last_token += 1;
        let token = *last_token;
        view.pending = Some(Pending {
            token,
            asked: now,
            progress: 0,
            seq: None,
            next_part: 0,
            requests: Vec::new(),
        });
        Counters::bump(&stats.snapshots_requested);
        out.ask.push((origin, token));
    }
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
