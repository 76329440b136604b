//! The transport thread: one OS thread running a current-thread tokio runtime with the
//! async-nats client, the own-state [`Mirror`], and the [`PeerViews`].
//!
//! Everything the protocol orders happens on this one task: own events get their sequence
//! numbers here (in the order the outbox delivers them, which is the order each request's
//! changes were published) and update the own mirror before they are sent, so a snapshot served
//! between two events is exactly the state as of the last number handed out.

use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::{Client, ConnectOptions, Event, Message, Subscriber};
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::config::{NatsConfig, NatsError};
use super::frame::{Body, Frame, MAX_SNAPSHOT_PARTS, RequestState, Subjects, approx_event_size};
use super::mirror::Mirror;
use super::sink::PeerSink;
use super::stats::Counters;
use super::views::{Actions, PeerViews};
use crate::sequences::SequenceEvent;
use crate::sync::{Arc, JoinHandle, Ordering};

/// Messages from the handle (and the client's event callback) to the transport task.
pub(crate) enum Control {
    /// Start applying peers' events to this sink.
    Attach(Box<dyn PeerSink>),
    /// The connection came (back) up.
    Connected,
    /// Flush and stop.
    Stop,
}

/// The largest snapshot part, in (estimated) bytes, whatever the server allows.
const MAX_PART_BYTES: usize = 256 * 1024;

/// A batch of own events stops growing past this many (estimated) bytes or events: well
/// inside the server's default 1 MiB payload limit, and short enough not to delay the first.
const MAX_BATCH_BYTES: usize = 64 * 1024;
const MAX_BATCH_EVENTS: usize = 1024;
const _: () = assert!(MAX_BATCH_EVENTS <= super::frame::MAX_FRAME_EVENTS);

/// The channels the task reads.
pub(crate) struct Inputs {
    pub(crate) outbox: mpsc::Receiver<SequenceEvent>,
    pub(crate) control: mpsc::UnboundedReceiver<Control>,
    /// For the client's event callback.
    pub(crate) control_tx: mpsc::UnboundedSender<Control>,
}

/// Starts the transport thread; returns once the client exists (connected or retrying in the
/// background), or with the reason it cannot.
pub(crate) fn start(
    config: NatsConfig,
    incarnation: u64,
    counters: Arc<Counters>,
    inputs: Inputs,
) -> Result<JoinHandle<()>, NatsError> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let name = format!("kvroute-nats-{}", config.router_id);
    let thread = crate::sync::spawn(name, move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                let _ = ready_tx.send(Err(NatsError::Spawn(error)));
                return;
            }
        };
        runtime.block_on(async move {
            let client = match connect(&config, &counters, inputs.control_tx.clone()).await {
                Ok(client) => client,
                Err(error) => {
                    let _ = ready_tx.send(Err(error));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            Transport::new(config, incarnation, counters, client).run(inputs).await;
        });
    })
    .map_err(NatsError::Spawn)?;
    match ready_rx.blocking_recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(error)) => {
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(NatsError::Stopped)
        }
    }
}

/// A client that connects in the background, reconnects forever with a capped backoff, never
/// receives its own messages, and reports connection changes to the counters and the task.
async fn connect(
    config: &NatsConfig,
    counters: &Arc<Counters>,
    control: mpsc::UnboundedSender<Control>,
) -> Result<Client, NatsError> {
    let max_delay = config.max_reconnect_delay;
    let events = counters.clone();
    ConnectOptions::new()
        .name(format!("kvroute-{}-{}", config.namespace, config.router_id))
        .no_echo()
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(2))
        .reconnect_delay_callback(move |attempts| {
            (Duration::from_millis(20) * attempts.min(1000) as u32).min(max_delay)
        })
        .event_callback(move |event| {
            match event {
                Event::Connected => {
                    events.connected.store(true, Ordering::Relaxed);
                    Counters::bump(&events.connects);
                    let _ = control.send(Control::Connected);
                }
                Event::Disconnected => {
                    events.connected.store(false, Ordering::Relaxed);
                    Counters::bump(&events.disconnects);
                }
                _ => {}
            }
            async {}
        })
        .connect(config.url.as_str())
        .await
        .map_err(|error| NatsError::Connect(error.to_string()))
}

struct Transport {
    config: NatsConfig,
    subjects: Subjects,
    incarnation: u64,
    /// Own changes numbered so far.
    seq: u64,
    own: Mirror,
    views: PeerViews,
    counters: Arc<Counters>,
    client: Client,
    sink: Option<Box<dyn PeerSink>>,
    /// Where snapshot answers for this replica arrive.
    inbox: String,
}

impl Transport {
    fn new(config: NatsConfig, incarnation: u64, counters: Arc<Counters>, client: Client) -> Self {
        Self {
            subjects: Subjects::new(&config.namespace),
            views: PeerViews::new(
                config.snapshot_timeout,
                silence(config.heartbeat, config.snapshot_timeout),
                config.buffer_limit,
            ),
            inbox: client.new_inbox(),
            config,
            incarnation,
            seq: 0,
            own: Mirror::default(),
            counters,
            client,
            sink: None,
        }
    }

    async fn run(mut self, mut inputs: Inputs) {
        let mut snapshot_requests =
            self.client.subscribe(self.subjects.snapshot(self.config.router_id)).await.ok();
        let mut streams: Option<Subscriber> = None;
        let mut hellos: Option<Subscriber> = None;
        let mut answers: Option<Subscriber> = None;
        let mut tick = tokio::time::interval(self.config.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                Some(event) = inputs.outbox.recv() => {
                    self.publish_own(event, &mut inputs.outbox).await;
                }
                control = inputs.control.recv() => match control {
                    Some(Control::Attach(sink)) if self.sink.is_none() => {
                        streams = self.client.subscribe(self.subjects.all_streams()).await.ok();
                        hellos = self.client.subscribe(self.subjects.hello()).await.ok();
                        answers = self.client.subscribe(format!("{}.*", self.inbox)).await.ok();
                        self.sink = Some(sink);
                        self.hello().await;
                    }
                    Some(Control::Attach(_)) => {}
                    Some(Control::Connected) => {
                        self.hello().await;
                        self.beat().await;
                    }
                    Some(Control::Stop) | None => break,
                },
                Some(message) = next(&mut streams) => self.on_stream(message).await,
                Some(_) = next(&mut hellos) => self.beat().await,
                Some(message) = next(&mut snapshot_requests) => self.serve_snapshot(message).await,
                Some(message) = next(&mut answers) => self.on_snapshot(message).await,
                _ = tick.tick() => self.tick().await,
            }
        }
        // What was published before the stop reaches the server if it is up, within a
        // heartbeat (a stuck server must not hold up the drop).
        let deadline = Instant::now() + self.config.heartbeat;
        while Instant::now() < deadline
            && let Ok(event) = inputs.outbox.try_recv()
        {
            self.publish_own(event, &mut inputs.outbox).await;
        }
        let _ = tokio::time::timeout(self.config.heartbeat, self.client.flush()).await;
    }

    fn frame(&self, body: Body) -> Vec<u8> {
        Frame::new(self.config.router_id, self.incarnation, body).encode()
    }

    /// Sends one message if the connection is up; false if it was not sent. Never waits long:
    /// while the client reconnects its queue does not drain.
    async fn send(&self, subject: String, reply: Option<String>, payload: Vec<u8>) -> bool {
        if self.client.connection_state() != State::Connected {
            return false;
        }
        let sent = match reply {
            Some(reply) => {
                let send = self.client.publish_with_reply(subject, reply, payload.into());
                tokio::time::timeout(self.config.heartbeat, send).await
            }
            None => {
                let send = self.client.publish(subject, payload.into());
                tokio::time::timeout(self.config.heartbeat, send).await
            }
        };
        matches!(sent, Ok(Ok(())))
    }

    /// Numbers `event` and the own events queued behind it (up to a part's size), records them
    /// in the own mirror, and sends them in one message; if it is not sent, peers find the gap
    /// by the numbers and fetch a snapshot.
    async fn publish_own(
        &mut self,
        event: SequenceEvent,
        outbox: &mut mpsc::Receiver<SequenceEvent>,
    ) {
        let now = Instant::now();
        let first = self.seq + 1;
        let mut size = approx_event_size(&event);
        let mut events = vec![event];
        while size < MAX_BATCH_BYTES && events.len() < MAX_BATCH_EVENTS {
            let Ok(event) = outbox.try_recv() else { break };
            size += approx_event_size(&event);
            events.push(event);
        }
        for event in &events {
            self.own.apply(event, now);
        }
        self.seq += events.len() as u64;
        let count = events.len() as u64;
        let payload = self.frame(Body::Events { first, events });
        let subject = self.subjects.stream(self.config.router_id);
        let counter = match self.send(subject, None, payload).await {
            true => &self.counters.published,
            false => &self.counters.unsent,
        };
        counter.fetch_add(count, Ordering::Relaxed);
    }

    async fn beat(&self) {
        let payload = self.frame(Body::Beat { last_seq: self.seq });
        self.send(self.subjects.stream(self.config.router_id), None, payload).await;
    }

    async fn hello(&self) {
        self.send(self.subjects.hello(), None, self.frame(Body::Hello)).await;
    }

    /// Decodes a peer's frame; `None` (counted) if it does not decode or is this replica's.
    fn decode(&self, message: &Message) -> Option<Frame> {
        match Frame::decode(&message.payload) {
            Ok(frame) if frame.origin != self.config.router_id => Some(frame),
            // Another process with this router id (a misconfiguration): its events are not ours.
            Ok(_) | Err(_) => {
                Counters::bump(&self.counters.decode_errors);
                None
            }
        }
    }

    async fn on_stream(&mut self, message: Message) {
        let Some(frame) = self.decode(&message) else { return };
        let mut actions = Actions::default();
        self.views.on_stream(frame, Instant::now(), &self.counters, &mut actions);
        self.act(actions).await;
    }

    async fn on_snapshot(&mut self, message: Message) {
        // The reply subject's last token names the request this answers.
        let token = message.subject.rsplit('.').next().and_then(|token| token.parse().ok());
        let Some(token) = token else { return };
        let Some(frame) = self.decode(&message) else { return };
        let mut actions = Actions::default();
        self.views.on_snapshot(token, frame, Instant::now(), &self.counters, &mut actions);
        self.act(actions).await;
    }

    /// Hands events to the sink and asks for the snapshots the views need.
    async fn act(&mut self, actions: Actions) {
        if let Some(sink) = &self.sink {
            for change in actions.events {
                for _ in 0..change.times {
                    let counter = match sink.apply_peer_event(change.event.clone()) {
                        Ok(()) => &self.counters.applied,
                        Err(_) => &self.counters.sink_errors,
                    };
                    Counters::bump(counter);
                }
            }
        }
        for (origin, token) in actions.ask {
            let subject = self.subjects.snapshot(origin);
            // Each request its own reply subject, so an earlier request's late answer is
            // told apart. Unanswered (also unsent) requests are asked again after the timeout.
            let reply = format!("{}.{token}", self.inbox);
            self.send(subject, Some(reply), Vec::new()).await;
        }
        let now = Instant::now();
        self.counters.peers.store(self.views.live_peers(now) as u64, Ordering::Relaxed);
        self.counters.synced.store(self.views.all_synced(now), Ordering::Relaxed);
    }

    /// Answers a peer's snapshot request with the own requests as of `seq`, in parts.
    async fn serve_snapshot(&mut self, message: Message) {
        let Some(reply) = message.reply else { return };
        let limit = (self.client.server_info().max_payload / 2).clamp(4096, MAX_PART_BYTES);
        let mut parts: Vec<Vec<RequestState>> = Vec::new();
        let mut part = Vec::new();
        let mut size = 0;
        for state in self.own.states() {
            if size + state.approx_size() > limit && !part.is_empty() {
                parts.push(std::mem::take(&mut part));
                size = 0;
            }
            size += state.approx_size();
            part.push(state.clone());
        }
        parts.push(part);
        let count = parts.len();
        if count > MAX_SNAPSHOT_PARTS as usize {
            // Peers would refuse it: more requests in flight than a snapshot may carry.
            return;
        }
        for (part, requests) in parts.into_iter().enumerate() {
            let last = part + 1 == count;
            let body = Body::Snapshot { seq: self.seq, part: part as u32, last, requests };
            if !self.send(reply.to_string(), None, self.frame(body)).await {
                return;
            }
        }
        Counters::bump(&self.counters.snapshots_served);
    }

    async fn tick(&mut self) {
        let up = self.client.connection_state() == State::Connected;
        self.counters.connected.store(up, Ordering::Relaxed);
        let now = Instant::now();
        let expiry = self.config.expiry.unwrap_or(Duration::MAX);
        self.own.expire(now, expiry);
        let mut actions = Actions::default();
        self.views.tick(now, expiry, &self.counters, &mut actions);
        self.act(actions).await;
        self.beat().await;
    }
}

/// How long a peer may be silent before it is taken for gone: ten heartbeats, and at least
/// two snapshot timeouts.
fn silence(heartbeat: Duration, snapshot_timeout: Duration) -> Duration {
    (heartbeat * 10).max(snapshot_timeout * 2)
}

/// The next message of a subscription that may not exist yet (then: never).
async fn next(subscriber: &mut Option<Subscriber>) -> Option<Message> {
    match subscriber {
        Some(subscriber) => subscriber.next().await,
        None => std::future::pending().await,
    }
}
