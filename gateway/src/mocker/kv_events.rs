//! The mock engine's KV event sockets, as vLLM 0.33's `ZmqEventPublisher` runs them: a PUB
//! socket sending `[topic, seq (8 bytes big-endian), msgpack(EventBatch)]`, and a ROUTER replay
//! socket answering `[identity, "", start_seq]` with every buffered batch from `start_seq` on
//! (`[identity, "", topic, seq, payload]`) and an end marker (`[identity, "", "", -1, ""]`).
//!
//! Both sockets live on one thread of their own (ZMQ sockets are not shared across threads); the
//! engine hands it batches over a channel.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// vLLM's `--kv-events-config` (the fields a mock engine uses; others are ignored).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default)]
pub struct KvEventsConfig {
    /// Whether events are published at all.
    pub enable_kv_cache_events: bool,
    /// Only `"zmq"` is served.
    pub publisher: String,
    /// Where the PUB socket binds (`tcp://*:5557`).
    pub endpoint: String,
    /// Where the replay ROUTER binds; none without it.
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay.
    pub buffer_steps: usize,
    /// The PUB socket's send high-water mark.
    pub hwm: i32,
    /// The topic frame of every message.
    pub topic: String,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            enable_kv_cache_events: false,
            publisher: "zmq".into(),
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            hwm: 100_000,
            topic: String::new(),
        }
    }
}

/// One KV cache event in vLLM's terms.
#[derive(Clone, Debug, PartialEq)]
pub enum VllmEvent {
    /// Blocks newly cached, each of `block_size` of `token_ids`.
    BlockStored {
        /// vLLM's block hashes (the low 64 bits of their digests).
        block_hashes: Vec<u64>,
        /// The block before the first, if any.
        parent_block_hash: Option<u64>,
        /// The blocks' tokens, in order.
        token_ids: Vec<u32>,
        /// Tokens per block.
        block_size: u32,
    },
    /// Blocks evicted.
    BlockRemoved {
        /// Their hashes.
        block_hashes: Vec<u64>,
    },
    /// The whole cache dropped.
    AllBlocksCleared,
}

/// `msgpack(EventBatch)` as vLLM 0.33 encodes it with msgspec: `[ts, events]` (the batch is
/// `array_like`; `data_parallel_rank`, `None` here, is omitted as a default), each event a map
/// tagged by `type` with its required fields (`lora_id`, `medium`, `lora_name` included).
pub fn encode_batch(ts: f64, events: &[VllmEvent]) -> Vec<u8> {
    use rmp::encode::*;
    let mut out = Vec::with_capacity(64 + events.len() * 64);
    // Writing into a Vec cannot fail.
    let w = &mut out;
    write_array_len(w, 2).unwrap();
    write_f64(w, ts).unwrap();
    write_array_len(w, events.len() as u32).unwrap();
    for event in events {
        match event {
            VllmEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size } => {
                write_map_len(w, 8).unwrap();
                write_str(w, "type").unwrap();
                write_str(w, "BlockStored").unwrap();
                write_str(w, "block_hashes").unwrap();
                write_array_len(w, block_hashes.len() as u32).unwrap();
                for &hash in block_hashes {
                    write_uint(w, hash).unwrap();
                }
                write_str(w, "parent_block_hash").unwrap();
                match parent_block_hash {
                    Some(hash) => {
                        write_uint(w, *hash).unwrap();
                    }
                    None => write_nil(w).unwrap(),
                }
                write_str(w, "token_ids").unwrap();
                write_array_len(w, token_ids.len() as u32).unwrap();
                for &token in token_ids {
                    write_uint(w, u64::from(token)).unwrap();
                }
                write_str(w, "block_size").unwrap();
                write_uint(w, u64::from(*block_size)).unwrap();
                write_str(w, "lora_id").unwrap();
                write_nil(w).unwrap();
                write_str(w, "medium").unwrap();
                write_str(w, "GPU").unwrap();
                write_str(w, "lora_name").unwrap();
                write_nil(w).unwrap();
            }
            VllmEvent::BlockRemoved { block_hashes } => {
                write_map_len(w, 3).unwrap();
                write_str(w, "type").unwrap();
                write_str(w, "BlockRemoved").unwrap();
                write_str(w, "block_hashes").unwrap();
                write_array_len(w, block_hashes.len() as u32).unwrap();
                for &hash in block_hashes {
                    write_uint(w, hash).unwrap();
                }
                write_str(w, "medium").unwrap();
                write_str(w, "GPU").unwrap();
            }
            VllmEvent::AllBlocksCleared => {
                write_map_len(w, 1).unwrap();
                write_str(w, "type").unwrap();
                write_str(w, "AllBlocksCleared").unwrap();
            }
        }
    }
    out
}

/// The thread serving a mock engine's PUB and replay sockets.
#[derive(Debug)]
pub struct EventPublisher {
    batches: Option<mpsc::Sender<Vec<VllmEvent>>>,
    thread: Option<JoinHandle<()>>,
    /// The addresses bound (PUB, replay), with ports resolved.
    pub addresses: (String, Option<String>),
}

/// How long the socket thread waits on the replay socket before looking at the channel again.
const POLL: Duration = Duration::from_millis(2);

impl EventPublisher {
    /// Binds the sockets of `config` and starts their thread.
    pub fn start(config: &KvEventsConfig) -> Result<Self, zmq::Error> {
        let context = zmq::Context::new();
        let publisher = context.socket(zmq::PUB)?;
        publisher.set_sndhwm(config.hwm)?;
        publisher.set_linger(0)?;
        publisher.bind(&config.endpoint)?;
        let pub_address = last_endpoint(&publisher)?;
        let replay = match &config.replay_endpoint {
            Some(endpoint) => {
                let socket = context.socket(zmq::ROUTER)?;
                socket.set_linger(0)?;
                socket.bind(endpoint)?;
                Some(socket)
            }
            None => None,
        };
        let replay_address = replay.as_ref().map(last_endpoint).transpose()?;
        let (batches, receiver) = mpsc::channel();
        let topic = config.topic.clone().into_bytes();
        let buffer_steps = config.buffer_steps.max(1);
        let thread = std::thread::Builder::new()
            .name("mocker-kv-events".into())
            .spawn(move || serve(publisher, replay, topic, buffer_steps, receiver))
            .map_err(|_| zmq::Error::EMFILE)?;
        Ok(Self {
            batches: Some(batches),
            thread: Some(thread),
            addresses: (pub_address, replay_address),
        })
    }

    /// Publishes one batch (nothing when it is empty).
    pub fn publish(&self, events: Vec<VllmEvent>) {
        if let (false, Some(batches)) = (events.is_empty(), &self.batches) {
            // The thread only stops when this handle drops.
            let _ = batches.send(events);
        }
    }
}

impl Drop for EventPublisher {
    fn drop(&mut self) {
        self.batches.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The bound address, with `*` as loopback so it can be handed to a subscriber.
fn last_endpoint(socket: &zmq::Socket) -> Result<String, zmq::Error> {
    let endpoint = socket.get_last_endpoint()?.unwrap_or_default();
    Ok(endpoint.replace("0.0.0.0", "127.0.0.1"))
}

fn serve(
    publisher: zmq::Socket,
    replay: Option<zmq::Socket>,
    topic: Vec<u8>,
    buffer_steps: usize,
    batches: mpsc::Receiver<Vec<VllmEvent>>,
) {
    let mut buffer: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut next_seq = 0u64;
    loop {
        let received = if replay.is_some() {
            batches.recv_timeout(POLL).map_err(|e| e == mpsc::RecvTimeoutError::Disconnected)
        } else {
            batches.recv().map_err(|_| true)
        };
        match received {
            Ok(events) => {
                let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                let payload = encode_batch(ts.as_secs_f64(), &events);
                let seq = next_seq;
                next_seq += 1;
                let frames: [&[u8]; 3] = [&topic, &seq.to_be_bytes(), &payload];
                if let Err(e) = publisher.send_multipart(frames, zmq::DONTWAIT) {
                    log::debug!("kv events: batch {seq} not sent: {e}");
                }
                buffer.push_back((seq, payload));
                if buffer.len() > buffer_steps {
                    buffer.pop_front();
                }
            }
            Err(true) => return,
            Err(false) => {}
        }
        if let Some(replay) = &replay {
            while let Ok(request) = replay.recv_multipart(zmq::DONTWAIT) {
                answer_replay(replay, &request, &topic, &buffer);
            }
        }
    }
}

/// Answers one replay request `[identity, "", start_seq]`; anything else is ignored, as vLLM
/// logs and drops it.
fn answer_replay(
    replay: &zmq::Socket,
    request: &[Vec<u8>],
    topic: &[u8],
    buffer: &VecDeque<(u64, Vec<u8>)>,
) {
    let [identity, empty, start] = request else { return };
    let (true, Ok(start)) = (empty.is_empty(), <[u8; 8]>::try_from(start.as_slice())) else {
        return;
    };
    let start = u64::from_be_bytes(start);
    for (seq, payload) in buffer.iter().filter(|(seq, _)| *seq >= start) {
        let frames: [&[u8]; 5] = [identity, b"", topic, &seq.to_be_bytes(), payload];
        if replay.send_multipart(frames, 0).is_err() {
            return;
        }
    }
    let end: [&[u8]; 5] = [identity, b"", b"", &(-1i64).to_be_bytes(), b""];
    let _ = replay.send_multipart(end, 0);
}
