//! One endpoint's thread: receive, decode, sequence through recovery, heal through replay.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::event::{StorageTier, Worker};
use crate::pool::LaneDown;
use crate::recovery::{EventRecovery, EventSink, RecoveryConfig, RecoveryConfigError};
use crate::wire::{VllmDecoder, parse_seq};

use super::batches::{BatchSink, Stash, token};
use super::config::ZmqEndpoint;
use super::replay::{ReplayClient, ReplaySource};
use super::stats::Counters;

/// The longest wait in one poll: how fast the thread sees `stop` and due retries.
const POLL: Duration = Duration::from_millis(20);

/// Messages taken per wake-up before recovery gets a turn.
const BURST: usize = 1_024;

/// How long a dropped connection may go without libzmq scheduling a retry before it is taken
/// as given up (libzmq reports the retry as soon as it schedules it).
const GIVEN_UP: Duration = Duration::from_millis(500);

/// How often recovery's counters are copied out and the stash pruned.
const HOUSEKEEPING: Duration = Duration::from_millis(100);

/// How often, until the engine's first batch arrives, its replay socket is asked whether it
/// published any before this subscriber's subscription took effect.
const FIRST_BATCH_PROBE: Duration = Duration::from_millis(250);

/// With a replay socket, batches go through recovery; without, straight to the index.
enum Path<S: EventSink> {
    Recovered {
        recovery: Box<EventRecovery<BatchSink<S>>>,
        source: Box<ReplaySource>,
        stash: Arc<Stash>,
    },
    Direct(BatchSink<S>),
}

pub(super) struct EndpointWorker<S: EventSink> {
    endpoint: ZmqEndpoint,
    sub: zmq::Socket,
    /// `sub`'s connection events.
    monitor: zmq::Socket,
    /// The publisher's connection dropped since it last connected.
    disconnected: bool,
    /// The highest `seq` received live, and its batch's timestamp.
    latest: Option<(u64, f64)>,
    /// A dropped connection libzmq has not (yet) scheduled to retry, and since when: after a
    /// protocol error (a message over `max_message_size`) libzmq gives the peer up for good.
    abandoned: Option<Instant>,
    /// When to next ask the replay socket for batches published before the subscription took
    /// effect; `None` once a batch arrived (or without a replay socket).
    probe_at: Option<Instant>,
    decoder: VllmDecoder,
    path: Path<S>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    stream: Worker,
}

impl<S: EventSink> EndpointWorker<S> {
    pub(super) fn new(
        endpoint: ZmqEndpoint,
        (sub, monitor): (zmq::Socket, zmq::Socket),
        replay: Option<ReplayClient>,
        sink: Arc<S>,
        recovery: &RecoveryConfig,
        counters: Arc<Counters>,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, RecoveryConfigError> {
        let decoder = VllmDecoder::new(endpoint.worker).with_default_dp_rank(endpoint.dp_rank);
        let stream = Worker { id: endpoint.worker, dp_rank: endpoint.dp_rank.into() };
        let stash = Arc::new(Stash::new(recovery.buffer_capacity));
        let batches = BatchSink::new(stash.clone(), sink, counters.clone());
        let path = match replay {
            Some(client) => Path::Recovered {
                recovery: Box::new(EventRecovery::new(batches, recovery.clone())?),
                source: Box::new(ReplaySource {
                    client: RefCell::new(client),
                    decoder: RefCell::new(decoder.clone()),
                    stash: stash.clone(),
                    stream,
                    counters: counters.clone(),
                }),
                stash,
            },
            None => Path::Direct(batches),
        };
        let probe_at =
            matches!(path, Path::Recovered { .. }).then(|| Instant::now() + FIRST_BATCH_PROBE);
        Ok(Self {
            endpoint,
            sub,
            monitor,
            disconnected: false,
            latest: None,
            abandoned: None,
            probe_at,
            decoder,
            path,
            counters,
            stop,
            stream,
        })
    }

    pub(super) fn run(mut self) {
        let mut housekeeping = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let wait = match &self.path {
                Path::Recovered { recovery, .. } => recovery
                    .next_due()
                    .map_or(POLL, |due| due.saturating_duration_since(Instant::now()).min(POLL)),
                Path::Direct(_) => POLL,
            };
            let mut items =
                [self.sub.as_poll_item(zmq::POLLIN), self.monitor.as_poll_item(zmq::POLLIN)];
            let polled = zmq::poll(&mut items, wait.as_millis() as i64);
            let monitored = items[1].is_readable();
            if monitored {
                self.on_connection_events();
            }
            match polled {
                Ok(ready) if ready > usize::from(monitored) as i32 => {
                    for _ in 0..BURST {
                        match self.sub.recv_multipart(zmq::DONTWAIT) {
                            Ok(frames) => self.on_message(&frames),
                            Err(_) => break,
                        }
                    }
                    self.refresh(false);
                }
                Ok(_) => {}
                Err(e) => {
                    log::warn!("ZMQ poll on {} failed: {e}", self.endpoint.publisher);
                    std::thread::sleep(POLL);
                }
            }
            if let Path::Recovered { recovery, source, .. } = &self.path
                && recovery.next_due().is_some_and(|due| due <= Instant::now())
            {
                let ran = recovery.run_pending(&**source);
                self.note(ran.map(|_| ()));
                self.refresh(false);
            }
            if self.abandoned.is_some_and(|since| since.elapsed() >= GIVEN_UP) {
                self.abandoned = None;
                log::warn!(
                    "{} dropped after a protocol error: connecting again",
                    self.endpoint.publisher
                );
                // The given-up endpoint is still registered: only a fresh one connects.
                let _ = self.sub.disconnect(&self.endpoint.publisher);
                if let Err(e) = self.sub.connect(&self.endpoint.publisher) {
                    log::error!("{} not connected again: {e}", self.endpoint.publisher);
                }
            }
            if self.probe_at.is_some_and(|at| at <= Instant::now()) {
                self.probe_first_batches();
            }
            if housekeeping.elapsed() >= HOUSEKEEPING {
                self.refresh(true);
                housekeeping = Instant::now();
            }
        }
        self.refresh(true);
    }

    /// A PUB drops what it sends before a subscription takes effect, and a lost first batch
    /// with none after it leaves no gap to see: until a batch arrives live, the replay socket
    /// is asked now and then whether the engine published any, and if so the endpoint is
    /// restored from it in full (recovery then fetches them; an empty answer changes nothing,
    /// so the engine's first batch still applies when it comes).
    fn probe_first_batches(&mut self) {
        let Path::Recovered { recovery, source, .. } = &self.path else { return };
        let published = source.client.borrow_mut().fetch(0).is_ok_and(|b| !b.is_empty());
        if published {
            recovery.invalidate(self.stream, StorageTier::Device);
            self.probe_at = None;
        } else {
            self.probe_at = Some(Instant::now() + FIRST_BATCH_PROBE);
        }
    }

    fn on_message(&mut self, frames: &[Vec<u8>]) {
        Counters::add(&self.counters.messages, 1);
        // A live batch: any gap before it is now seen, and recovered, the usual way.
        self.probe_at = None;
        let (seq, events) = match self.decoder.decode_message(frames) {
            Ok(batch) => {
                Counters::add(&self.counters.skipped_events, batch.skipped as u64);
                self.check_timestamp(batch.seq, batch.ts);
                (batch.seq, batch.events)
            }
            Err(_) => {
                Counters::add(&self.counters.decode_errors, 1);
                // An undecodable batch still takes its place in the sequence, empty.
                match frames.get(1).map(|seq| parse_seq(seq)) {
                    Some(Ok(seq)) => (seq, Vec::new()),
                    _ => return,
                }
            }
        };
        let previous = self.counters.next_seq.swap(seq.saturating_add(1), Ordering::Relaxed);
        let done = match &self.path {
            Path::Recovered { recovery, stash, .. } => {
                // What it drops, recovery drops too (and counts in `buffer_overflows`).
                stash.put_live(seq, events);
                recovery.ingest(token(self.stream, seq))
            }
            Path::Direct(batches) => {
                if previous != 0 && seq > previous {
                    Counters::add(&self.counters.unrecovered_gaps, 1);
                }
                batches.apply(events)
            }
        };
        self.note(done);
    }

    /// A reconnect to the publisher: whatever happened meanwhile, the engine may have restarted
    /// and published its first batches before we were back, so later ones, numbered at or
    /// below the old run's last, would pass for duplicates. The endpoint is restored in full
    /// from the replay socket, which holds only the running engine's batches.
    fn on_connection_events(&mut self) {
        while let Ok(frames) = self.monitor.recv_multipart(zmq::DONTWAIT) {
            let Some(event) = frames.first().and_then(|f| f.get(..2)) else { continue };
            let event = u16::from_le_bytes([event[0], event[1]]);
            if event == zmq::SocketEvent::DISCONNECTED as u16 {
                self.disconnected = true;
                self.abandoned = Some(Instant::now());
            } else if event == zmq::SocketEvent::CONNECT_RETRIED as u16 {
                self.abandoned = None;
            } else if event == zmq::SocketEvent::CONNECTED as u16 && self.disconnected {
                self.disconnected = false;
                self.abandoned = None;
                Counters::add(&self.counters.reconnects, 1);
                if let Path::Recovered { recovery, .. } = &self.path {
                    recovery.invalidate(self.stream, StorageTier::Device);
                }
            }
        }
    }

    /// A batch numbered at or below the latest one but stamped later is no duplicate: the
    /// engine restarted and its first batches were lost. The endpoint is restored in full.
    fn check_timestamp(&mut self, seq: u64, ts: f64) {
        let restarted = match self.latest {
            Some((latest, latest_ts)) if seq <= latest => ts > latest_ts,
            _ => false,
        };
        if restarted || self.latest.is_none_or(|(latest, _)| seq > latest) {
            self.latest = Some((seq, ts));
        }
        if restarted {
            Counters::add(&self.counters.suspected_restarts, 1);
            if let Path::Recovered { recovery, .. } = &self.path {
                recovery.invalidate(self.stream, StorageTier::Device);
            }
        }
    }

    fn note(&self, result: Result<(), LaneDown>) {
        if result.is_err() && !self.counters.index_down.swap(true, Ordering::Relaxed) {
            log::error!("the index is down: events from {} are dropped", self.endpoint.publisher);
        }
    }

    /// Copies recovery's counters out; with `prune`, drops stashed duplicates once the stream
    /// is settled.
    fn refresh(&self, prune: bool) {
        let Path::Recovered { recovery, stash, .. } = &self.path else { return };
        let stats = recovery.stats();
        let Some(stream) = stats.stream(self.stream, StorageTier::Device) else { return };
        let store =
            |counter: &std::sync::atomic::AtomicU64, value| counter.store(value, Ordering::Relaxed);
        store(&self.counters.gaps, stream.gaps);
        store(&self.counters.gaps_healed, stream.healed);
        store(&self.counters.restores, stream.restores);
        store(&self.counters.buffer_overflows, stream.buffer_overflows);
        self.counters.recovering.store(stream.recovering, Ordering::Relaxed);
        store(&self.counters.stashed, stash.len() as u64);
        if !prune {
            return;
        }
        if let (false, 0, Some(last)) =
            (stream.recovering, stream.buffered, stream.cursor.last_applied())
            && stash.len() > 0
        {
            stash.prune_through(last);
        }
    }
}
