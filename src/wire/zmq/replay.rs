//! The engine's replay socket: a DEALER asking vLLM's ROUTER for the batches from a `seq` on,
//! and the [`RecoverySource`] recovery fetches through.
//!
//! vLLM's protocol (`ZmqEventPublisher._service_replay`): the request is `[b"", start_seq]`
//! (8 bytes big-endian); the answer is one `[b"", topic, seq, payload]` per buffered batch from
//! `start_seq` on, then `[b"", b"", -1 (8 bytes), b""]`. The engine keeps its last
//! `buffer_steps` batches (10,000 by default).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use crate::event::{StorageTier, Worker};
use crate::recovery::{Dump, Recovered, RecoveryError, RecoverySource};
use crate::wire::{VllmDecoder, parse_seq};

use super::batches::{Stash, token};
use super::config::{SubscriberConfig, millis};
use super::stats::Counters;

/// The end-of-replay marker's sequence frame: -1 as 8 bytes big-endian.
const END_SEQ: [u8; 8] = [0xff; 8];

/// A DEALER connected to one engine's replay socket.
pub(super) struct ReplayClient {
    context: zmq::Context,
    address: String,
    timeout: Duration,
    max_message_size: usize,
    max_batches: usize,
    max_bytes: usize,
    socket: zmq::Socket,
}

impl ReplayClient {
    pub(super) fn connect(
        context: &zmq::Context,
        address: &str,
        config: &SubscriberConfig,
    ) -> Result<Self, zmq::Error> {
        let timeout = config.replay_timeout;
        let max_message_size = config.max_message_size;
        let socket = Self::socket(context, address, timeout, max_message_size)?;
        Ok(Self {
            context: context.clone(),
            address: address.to_owned(),
            timeout,
            max_message_size,
            max_batches: config.max_replay_batches,
            max_bytes: config.max_replay_bytes,
            socket,
        })
    }

    fn socket(
        context: &zmq::Context,
        address: &str,
        timeout: Duration,
        max_message_size: usize,
    ) -> Result<zmq::Socket, zmq::Error> {
        let socket = context.socket(zmq::DEALER)?;
        socket.set_linger(0)?;
        socket.set_maxmsgsize(super::subscriber::max_message_size(max_message_size))?;
        socket.set_rcvtimeo(millis(timeout))?;
        socket.set_sndtimeo(millis(timeout))?;
        socket.connect(address)?;
        Ok(socket)
    }

    /// The engine's batches from `from` on, as `(seq, payload)`.
    pub(super) fn fetch(&mut self, from: u64) -> Result<Vec<(u64, Vec<u8>)>, RecoveryError> {
        let result = self.request(from);
        if result.is_err() {
            // A late answer to a failed request must not be read as the next one's.
            match Self::socket(&self.context, &self.address, self.timeout, self.max_message_size) {
                Ok(socket) => self.socket = socket,
                Err(e) => log::warn!("replay socket {} not recreated: {e}", self.address),
            }
        }
        result
    }

    fn request(&mut self, from: u64) -> Result<Vec<(u64, Vec<u8>)>, RecoveryError> {
        let unavailable =
            |what: String| RecoveryError::Unavailable(format!("{}: {what}", self.address));
        self.socket
            .send_multipart([&b""[..], &from.to_be_bytes()], 0)
            .map_err(|e| unavailable(format!("request not sent ({e})")))?;
        let mut batches = Vec::new();
        let mut bytes = 0usize;
        loop {
            let frames = self
                .socket
                .recv_multipart(0)
                .map_err(|e| unavailable(format!("no answer ({e})")))?;
            let [_, _topic, seq, payload] = <[Vec<u8>; 4]>::try_from(frames)
                .map_err(|f| unavailable(format!("answer of {} frames, expected 4", f.len())))?;
            if seq == END_SEQ {
                return Ok(batches);
            }
            let seq = parse_seq(&seq).map_err(|e| unavailable(e.to_string()))?;
            if batches.len() == self.max_batches {
                return Err(unavailable(format!("more than {} batches", self.max_batches)));
            }
            bytes = bytes.saturating_add(payload.len());
            if bytes > self.max_bytes {
                return Err(unavailable(format!("more than {} bytes", self.max_bytes)));
            }
            batches.push((seq, payload));
        }
    }
}

/// Recovery's source for one endpoint: replays from the engine, decodes into the stash, and
/// answers with the batches' tokens. A full dump is a replay from 0 — all the engine still
/// buffers; vLLM keeps no other record, so a router that joins after the engine's buffer has
/// wrapped starts from the buffered part of its history.
pub(super) struct ReplaySource {
    pub client: RefCell<ReplayClient>,
    pub decoder: RefCell<VllmDecoder>,
    pub stash: Arc<Stash>,
    pub stream: Worker,
    pub counters: Arc<Counters>,
}

impl ReplaySource {
    /// The replayed batches from `from` on, stashed; their tokens, and the last seq.
    fn replay(&self, from: u64) -> Result<(Vec<crate::RouterEvent>, Option<u64>), RecoveryError> {
        Counters::add(&self.counters.replay_requests, 1);
        let batches = self.client.borrow_mut().fetch(from).inspect_err(|_| {
            Counters::add(&self.counters.replay_failures, 1);
        })?;
        let mut decoder = self.decoder.borrow_mut();
        let mut tokens = Vec::with_capacity(batches.len());
        let mut last = None;
        for (seq, payload) in batches {
            let events = match decoder.decode_batch(seq, &payload) {
                Ok(batch) => {
                    Counters::add(&self.counters.skipped_events, batch.skipped as u64);
                    batch.events
                }
                Err(_) => {
                    Counters::add(&self.counters.decode_errors, 1);
                    Vec::new()
                }
            };
            self.stash.put(seq, events);
            tokens.push(token(self.stream, seq));
            last = Some(seq);
        }
        Ok((tokens, last))
    }
}

impl RecoverySource for ReplaySource {
    fn events_since(
        &self,
        worker: Worker,
        tier: StorageTier,
        from: u64,
    ) -> Result<Recovered, RecoveryError> {
        if (worker, tier) != (self.stream, StorageTier::Device) {
            return Err(RecoveryError::UnknownStream { worker, tier });
        }
        Ok(Recovered::Events(self.replay(from)?.0))
    }

    fn full_dump(&self, worker: Worker, tier: StorageTier) -> Result<Dump, RecoveryError> {
        if (worker, tier) != (self.stream, StorageTier::Device) {
            return Err(RecoveryError::UnknownStream { worker, tier });
        }
        let (events, last) = self.replay(0)?;
        Ok(Dump { events, last_event_id: last.unwrap_or(0) })
    }
}
