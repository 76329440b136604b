//! [`StickyPool`]: a fixed set of lanes (OS threads), each draining its own bounded channel.
//!
//! Callers pick the lane of every message (the index and the sequence tracker send all of one
//! worker's messages to the same lane), so one worker's messages are handled in order while
//! different workers proceed in parallel. A lane owns its state (`L`): no lock guards it.
//!
//! A handler that panics (a bug) gives the lane's state a chance to [`Lane::recover`]: if it
//! does, the lane goes on with the next message (only the one that panicked is lost, or a
//! task's caller gets [`LaneDown`] once). Otherwise the lane is *down*: its state is dropped,
//! and every call that involves it returns [`LaneDown`] — calls already waiting on it too —
//! instead of blocking.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use super::spread::Spread;
use super::{LaneDown, SpawnError};
use crate::prefetch::prefetch_all;
use crate::sync::channel::{self, Receiver, Sender, TrySendError};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Gate, JoinHandle, Ordering, fence, spawn};

/// The state and message handler of one lane, owned by the lane's thread.
pub trait Lane: Send + 'static {
    /// What the lane is sent.
    type Message: Send + 'static;

    /// Handles one message.
    fn handle(&mut self, message: Self::Message);

    /// Called with the message after the one about to be handled, when the lane already holds
    /// it (in the same batch): a place to start loading what that message will look up, so
    /// its first cache misses overlap the current message's work. A hint only: it must not
    /// change anything a handler depends on.
    fn ahead(&self, next: &Self::Message) {
        let _ = next;
    }

    /// Called with the message two after the one about to be handled, when the lane already
    /// holds it: a place to start loading the message itself (written on another core), so
    /// that [`Self::ahead`] can read it without waiting. A hint only, like `ahead`.
    fn farther(&self, message: &Self::Message) {
        let _ = message;
    }

    /// Called when the lane's queue is momentarily empty (before it waits for more) and before
    /// every task: a place for deferred work such as publishing counters.
    fn idle(&mut self) {}

    /// Asked after each message: whether producers waiting for room in this lane's queue should
    /// wake to run their hook (see [`StickyPool::send_with`]) rather than wait for the room.
    fn wants_producer(&mut self) -> bool {
        false
    }

    /// Called once the lane has handled everything it took and found its queue empty, right
    /// after [`Self::idle`]: `queued` says how many messages are queued now (producers may have
    /// sent more since), and `own_sends` how many sends the calling thread itself is inside (1
    /// when an inline lane runs its hooks within the caller's send, else 0).
    fn quiet(&mut self, queued: &dyn Fn() -> usize, own_sends: usize) {
        let _ = (queued, own_sends);
    }

    /// Called after handling a message or a task panicked, on the lane's thread: puts the
    /// state back in order (whatever that costs is the lane's business) and returns `true` for
    /// the lane to go on, or `false` (the default) for it to go down.
    fn recover(&mut self) -> bool {
        false
    }
}

/// Messages a lane's two queue buffers keep room for while it is quiet: a lane that keeps up
/// with its producers reuses them without growing them, and a burst's large buffers do not
/// stay resident once it is over.
const IDLE_BATCH_ROOM: usize = 64;

/// How far ahead in its batch a lane asks for the messages themselves: a producer on another
/// core wrote them, so each is a miss, and [`Lane::farther`] reads the one after next.
const ENVELOPES_AHEAD: usize = 6;

type Task<L> = Box<dyn FnOnce(&mut L) + Send>;

enum Envelope<L: Lane> {
    Message(L::Message),
    /// Runs a closure on the lane's state, in queue order.
    Task(Task<L>),
}

/// Why [`StickyPool::try_send`] did not enqueue a message; the message comes back.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySend<M> {
    /// The lane's queue is full.
    Full(M),
    /// The lane has stopped.
    Down(M),
}

/// Where producers wait for room in one lane's full queue.
///
/// A producer that finds the queue full waits until the lane takes its next batch (the whole
/// queue, see [`serve`]), or at least half the queue, not just until one slot frees: a producer
/// that outruns its lane then wakes once per batch rather than once per message, and every
/// wakeup costs the lane a system call and the cores a context switch. The lane may also wake
/// it early to run its hook ([`Lane::wants_producer`]).
#[derive(Debug, Default)]
struct Room {
    /// Producers waiting at `gate`.
    waiting: AtomicUsize,
    gate: Gate,
    /// Queue length at or below which waiting producers go on.
    low: usize,
    /// The lane panicked: it only drops what it is sent now.
    down: AtomicBool,
    /// The lane asked a waiting producer to run its hook (taken by the producer that does).
    nudged: AtomicBool,
}

impl Room {
    /// Producer side: waits until the queue is at or below `low`, the lane is gone, or the lane
    /// asks for a producer.
    fn wait<M>(&self, sender: &Sender<M>) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.gate.wait_until(|| {
            sender.len() <= self.low
                || sender.is_disconnected()
                || self.is_down()
                || self.nudged.swap(false, Ordering::Relaxed)
        });
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Lane side: wakes a waiting producer, if there is one, to run its hook. A producer that
    /// starts waiting just after the check is not woken; it runs its hook on its next send.
    fn nudge(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.nudged.store(true, Ordering::Relaxed);
            self.gate.open();
        }
    }

    fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Lane side, after taking a message: lets waiting producers go once there is room.
    fn taken<M>(&self, receiver: &Receiver<M>) {
        // Pairs with the producer's increment: either the lane sees it here, or the producer's
        // check (after the increment) sees this take.
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) > 0 && receiver.len() <= self.low {
            self.gate.open();
        }
    }
}

/// A fixed set of lanes; see the [module docs](self).
pub struct StickyPool<L: Lane> {
    senders: Vec<Sender<Envelope<L>>>,
    rooms: Vec<Arc<Room>>,
    threads: Vec<JoinHandle<()>>,
    /// Where the lanes run, so that two sharing a CPU move apart while a caller waits on them.
    spread: Arc<Spread>,
}

impl<L: Lane> StickyPool<L> {
    /// [`Self::with_spread`] with spreading on: the tests' and the loom models' pools.
    #[cfg(any(test, loom))]
    pub fn new(
        lanes: usize,
        queue_capacity: usize,
        make_lane: impl FnMut(usize) -> L,
    ) -> Result<Self, SpawnError> {
        Self::with_spread(lanes, queue_capacity, true, make_lane)
    }

    /// Starts `lanes` lanes (at least one), each with a queue of `queue_capacity` messages and the
    /// state `make_lane(lane_index)`; if `spread`, busy lanes that share a CPU move apart while
    /// a caller waits (see `pool/spread.rs`). Fails if the OS refuses a thread; the lanes
    /// already started are then stopped and joined.
    pub fn with_spread(
        lanes: usize,
        queue_capacity: usize,
        spread: bool,
        mut make_lane: impl FnMut(usize) -> L,
    ) -> Result<Self, SpawnError> {
        let lanes = lanes.max(1);
        let capacity = queue_capacity.max(1);
        let mut pool = Self {
            senders: Vec::with_capacity(lanes),
            rooms: Vec::with_capacity(lanes),
            threads: Vec::with_capacity(lanes),
            spread: Arc::new(Spread::new(lanes, spread)),
        };
        for index in 0..lanes {
            let (sender, receiver) = channel::bounded(capacity);
            let room = Arc::new(Room { low: capacity / 2, ..Room::default() });
            let lane = make_lane(index);
            let seat = (pool.spread.clone(), index);
            let queue = LaneQueue { receiver: Some(receiver), room: room.clone(), seat };
            // On failure `pool` drops: its drop closes the started lanes' queues and joins them.
            let thread = spawn(format!("kvroute-lane-{index}"), move || run(lane, queue))
                .map_err(SpawnError::from)?;
            pool.threads.push(thread);
            pool.senders.push(sender);
            pool.rooms.push(room);
        }
        Ok(pool)
    }

    /// The number of lanes.
    pub fn lanes(&self) -> usize {
        self.senders.len()
    }

    /// Whether busy lanes sharing a CPU move apart (see `pool/spread.rs`).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn spreads(&self) -> bool {
        self.spread.is_on()
    }

    /// Producers waiting for room in lane `lane % lanes()`'s queue.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn waiting(&self, lane: usize) -> usize {
        self.room(lane).waiting.load(Ordering::SeqCst)
    }

    /// Enqueues `message` on `lane % lanes()`. If that lane's queue is full, waits until the
    /// lane takes its next batch (or has worked the queue down to half), so a producer that
    /// outruns the lane wakes once per batch rather than once per message.
    pub fn send(&self, lane: usize, message: L::Message) -> Result<(), LaneDown> {
        self.send_with(lane, message, || ())
    }

    /// [`Self::send`], but each time it finds the queue full it runs `while_waiting` before it
    /// waits; while waiting, it also wakes to run it again when the lane asks for a producer
    /// ([`Lane::wants_producer`]).
    pub fn send_with(
        &self,
        lane: usize,
        message: L::Message,
        mut while_waiting: impl FnMut(),
    ) -> Result<(), LaneDown> {
        let index = lane % self.senders.len();
        let (sender, room) = (&self.senders[index], &self.rooms[index]);
        let mut envelope = Envelope::Message(message);
        loop {
            if room.is_down() {
                return Err(LaneDown);
            }
            match sender.try_send(envelope) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(_)) => return Err(LaneDown),
                Err(TrySendError::Full(back)) => envelope = back,
            }
            while_waiting();
            room.wait(sender);
        }
    }

    /// Enqueues `message` on `lane % lanes()` if its queue has room; never waits.
    pub fn try_send(&self, lane: usize, message: L::Message) -> Result<(), TrySend<L::Message>> {
        if self.room(lane).is_down() {
            return Err(TrySend::Down(message));
        }
        match self.sender(lane).try_send(Envelope::Message(message)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(Envelope::Message(m))) => Err(TrySend::Full(m)),
            Err(TrySendError::Disconnected(Envelope::Message(m))) => Err(TrySend::Down(m)),
            Err(_) => unreachable!("try_send returns the message it was given"),
        }
    }

    /// Runs `task` on lane `lane % lanes()`'s state after everything queued there before it, and
    /// returns its result.
    pub fn run_on_lane<R, F>(&self, lane: usize, task: F) -> Result<R, LaneDown>
    where
        R: Send + 'static,
        F: FnOnce(&mut L) -> R + Send + 'static,
    {
        if self.room(lane).is_down() {
            return Err(LaneDown);
        }
        let (reply, result) = channel::bounded(1);
        let task: Task<L> = Box::new(move |state| {
            // The caller may have given up waiting; nothing to do then.
            let _ = reply.send(task(state));
        });
        self.sender(lane).send(Envelope::Task(task)).map_err(|_| LaneDown)?;
        // A lane that panics drops the task unrun, which closes `reply`.
        let _waiting = self.spread.caller_waits();
        result.recv().map_err(|_| LaneDown)
    }

    /// Runs `task` on every lane (all enqueued first, so lanes work in parallel) and returns the
    /// results in lane order.
    pub fn run_on_all<R, F>(&self, task: F) -> Result<Vec<R>, LaneDown>
    where
        R: Send + 'static,
        F: Fn(&mut L) -> R + Send + Sync + Clone + 'static,
    {
        if self.rooms.iter().any(|room| room.is_down()) {
            return Err(LaneDown);
        }
        let mut replies = Vec::with_capacity(self.lanes());
        for sender in &self.senders {
            let (reply, result) = channel::bounded(1);
            let task = task.clone();
            let task: Task<L> = Box::new(move |state| {
                let _ = reply.send(task(state));
            });
            sender.send(Envelope::Task(task)).map_err(|_| LaneDown)?;
            replies.push(result);
        }
        let _waiting = self.spread.caller_waits();
        replies.into_iter().map(|result| result.recv().map_err(|_| LaneDown)).collect()
    }

    /// Returns once every message enqueued (by any thread) before this call has been handled.
    pub fn flush(&self) -> Result<(), LaneDown> {
        self.run_on_all(|_| ()).map(drop)
    }

    fn sender(&self, lane: usize) -> &Sender<Envelope<L>> {
        &self.senders[lane % self.senders.len()]
    }

    fn room(&self, lane: usize) -> &Room {
        &self.rooms[lane % self.rooms.len()]
    }
}

/// A lane's end of its queue. Dropping it (the lane finished or panicked) closes the queue and
/// wakes waiting producers, who then find the lane gone.
struct LaneQueue<M> {
    receiver: Option<Receiver<M>>,
    room: Arc<Room>,
    /// The pool's [`Spread`] and this lane's index in it.
    seat: (Arc<Spread>, usize),
}

impl<M> Drop for LaneQueue<M> {
    fn drop(&mut self) {
        drop(self.receiver.take());
        self.room.gate.open();
    }
}

fn run<L: Lane>(lane: L, queue: LaneQueue<Envelope<L>>) {
    let receiver = queue.receiver.as_ref().expect("the queue is open while the lane runs");
    let mut lane = Some(lane);
    let served = catch_unwind(AssertUnwindSafe(|| {
        let lane = lane.as_mut().expect("the lane's state is there until it panics");
        serve(lane, receiver, &queue.room, (&queue.seat.0, queue.seat.1))
    }));
    if served.is_err() {
        // A bug the lane did not recover from: its state may be half changed, so it goes, and
        // the lane only drops what it is sent from now on. Dropping a task closes its reply
        // channel, so every caller waiting on this lane (those that enqueued before the panic
        // too) gets `LaneDown` rather than waiting forever; new calls see `down` and fail at
        // once.
        queue.room.down.store(true, Ordering::Release);
        queue.room.gate.open();
        // Even if dropping the broken state panics too, the queue must still be drained.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(lane.take())));
        while let Ok(envelope) = receiver.recv() {
            drop(envelope);
        }
    }
}

/// The lane's loop: handles what it is sent until the pool closes the queue.
///
/// A busy lane takes its whole queue at once: one lock of the channel and one wakeup of the
/// waiting producers per batch rather than per message, and the producers refill the queue
/// while the lane works through the batch instead of waiting behind it. So up to twice the
/// queue's capacity can be pending on a lane: queued, and in hand.
fn serve<L: Lane>(
    lane: &mut L,
    receiver: &Receiver<Envelope<L>>,
    room: &Room,
    (spread, me): (&Spread, usize),
) {
    let handle = |lane: &mut L, envelope| {
        let handled = catch_unwind(AssertUnwindSafe(|| match envelope {
            Envelope::Message(message) => {
                lane.handle(message);
                if lane.wants_producer() {
                    room.nudge();
                }
            }
            Envelope::Task(task) => {
                lane.idle();
                task(lane)
            }
        }));
        if let Err(panic) = handled {
            // A task that panicked has dropped its reply: its caller gets `LaneDown`.
            if !catch_unwind(AssertUnwindSafe(|| lane.recover())).unwrap_or(false) {
                resume_unwind(panic);
            }
        }
    };
    // The batch in hand; it swaps buffers with the queue (see `sync/channel.rs`).
    let mut batch = VecDeque::new();
    // Messages until the lane next looks at its CPU (see `pool/spread.rs`).
    let mut until_look = 0;
    while let Ok(envelope) = receiver.recv() {
        room.taken(receiver);
        handle(lane, envelope);
        loop {
            // If a handler panics and the lane does not recover, the rest of the batch is
            // dropped with it: tasks in it close their reply channels, as for the queue (see
            // `run`).
            receiver.take_all(&mut batch);
            if batch.is_empty() {
                break;
            }
            room.taken(receiver);
            while let Some(envelope) = batch.pop_front() {
                if until_look == 0 {
                    until_look = spread.look(me);
                }
                until_look -= 1;
                if let Some(later) = batch.get(ENVELOPES_AHEAD) {
                    prefetch_all(later);
                }
                if let Some(Envelope::Message(later)) = batch.get(1) {
                    lane.farther(later);
                }
                if let Some(Envelope::Message(next)) = batch.front() {
                    lane.ahead(next);
                }
                handle(lane, envelope);
            }
        }
        spread.quiet(me);
        until_look = 0;
        // Quiet: the buffers keep room for a small batch only while the lane waits.
        batch.shrink_to(IDLE_BATCH_ROOM);
        receiver.shrink_if_empty(IDLE_BATCH_ROOM);
        lane.idle();
        lane.quiet(&|| receiver.len(), 0);
    }
}

impl<L: Lane> Drop for StickyPool<L> {
    /// Closes every queue, lets each lane finish what was enqueued, and joins the threads.
    fn drop(&mut self) {
        self.senders.clear();
        for thread in self.threads.drain(..) {
            // A lane that panicked already reported through `LaneDown`; don't panic in drop.
            let _ = thread.join();
        }
    }
}

impl<L: Lane> fmt::Debug for StickyPool<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StickyPool").field("lanes", &self.lanes()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{Arc, Mutex};

    /// Records (key, value) in arrival order.
    struct Recorder(Arc<Mutex<Vec<(u64, u64)>>>);

    impl Lane for Recorder {
        type Message = (u64, u64);
        fn handle(&mut self, message: (u64, u64)) {
            self.0.lock().push(message);
        }
    }

    #[test]
    fn one_keys_messages_stay_in_order_and_flush_waits_for_them() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let pool = StickyPool::new(3, 4, |_| Recorder(log.clone())).expect("lanes start");
        for value in 0..200 {
            for key in 0..5u64 {
                pool.send(key as usize, (key, value)).unwrap();
            }
        }
        pool.flush().unwrap();
        let log = log.lock().clone();
        assert_eq!(log.len(), 1000);
        for key in 0..5 {
            let values: Vec<u64> = log.iter().filter(|m| m.0 == key).map(|m| m.1).collect();
            assert_eq!(values, (0..200).collect::<Vec<_>>());
        }
    }

    /// Per look ahead: the last message handled, the one shown, and how far ahead (1 or 2).
    type Shown = Arc<Mutex<Vec<(Option<u64>, u64, u64)>>>;

    /// Records what it handles and, per message, the ones it was shown ahead of it.
    struct LookingAhead {
        handled: Vec<u64>,
        shown: Shown,
        gate: Arc<Mutex<()>>,
    }

    impl Lane for LookingAhead {
        type Message = u64;
        fn ahead(&self, next: &u64) {
            let last = self.handled.last().copied();
            self.shown.lock().push((last, *next, 1));
        }
        fn farther(&self, message: &u64) {
            let last = self.handled.last().copied();
            self.shown.lock().push((last, *message, 2));
        }
        fn handle(&mut self, message: u64) {
            // The first message waits, so the rest arrive as one batch.
            drop(self.gate.lock());
            self.handled.push(message);
        }
    }

    #[test]
    fn a_batch_shows_the_lane_each_next_message_before_the_current_one() {
        let shown = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock();
        let pool = StickyPool::new(1, 64, |_| LookingAhead {
            handled: Vec::new(),
            shown: shown.clone(),
            gate: gate.clone(),
        })
        .expect("lanes start");
        for message in 0..20 {
            pool.send(0, message).unwrap();
        }
        drop(held);
        pool.flush().unwrap();
        let handled = pool.run_on_lane(0, |lane: &mut LookingAhead| lane.handled.clone()).unwrap();
        assert_eq!(handled, (0..20).collect::<Vec<_>>());
        // Message 0 is taken alone; then the rest come as a batch, each shown twice: right
        // before the one two ahead of it is handled, and before the one ahead of it is (after
        // the one before that); the batch's first never, its second only once.
        let shown = shown.lock().clone();
        assert!(!shown.is_empty(), "a batch was looked ahead in");
        for &(last, message, distance) in &shown {
            let before = last.expect("shown after the first message was handled");
            assert_eq!(message, before + 1 + distance, "{shown:?}");
        }
        for message in 3..20 {
            let times: Vec<u64> =
                shown.iter().filter(|s| s.1 == message).map(|&(_, _, d)| d).collect();
            assert_eq!(times, [2, 1], "message {message}: {shown:?}");
        }
    }

    #[test]
    fn tasks_see_lane_state_and_drop_finishes_the_queue() {
        let log = Arc::new(Mutex::new(Vec::new()));
        {
            let pool = StickyPool::new(2, 16, |_| Recorder(log.clone())).expect("lanes start");
            pool.send(1, (1, 1)).unwrap();
            let seen = pool.run_on_lane(1, |lane: &mut Recorder| lane.0.lock().len()).unwrap();
            assert_eq!(seen, 1);
            for value in 0..10 {
                pool.send(0, (0, value)).unwrap();
            }
        }
        assert_eq!(log.lock().len(), 11);
    }

    /// A lane that blocks on `Wait` until the test lets it go, and panics on `Explode`.
    struct Fragile;

    enum Step {
        Wait(Arc<Mutex<()>>),
        Explode,
    }

    impl Lane for Fragile {
        type Message = Step;
        fn handle(&mut self, step: Step) {
            match step {
                Step::Wait(gate) => drop(gate.lock()),
                Step::Explode => panic!("a bug in the lane (this panic is expected by the test)"),
            }
        }
    }

    #[test]
    fn a_lane_that_panics_fails_callers_instead_of_leaving_them_waiting() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let gate = Arc::new(Mutex::new(()));
            let held = gate.lock();
            let pool = Arc::new(StickyPool::new(1, 16, |_| Fragile).expect("lanes start"));
            pool.send(0, Step::Wait(gate.clone())).unwrap();
            pool.send(0, Step::Explode).unwrap();
            // A task queued behind the panic: its caller must not wait forever.
            let caller = {
                let pool = pool.clone();
                std::thread::spawn(move || pool.run_on_lane(0, |_: &mut Fragile| ()))
            };
            while pool.senders[0].len() < 2 {
                std::thread::yield_now();
            }
            drop(held);
            let queued = caller.join().expect("the caller does not panic");
            let later = pool.flush();
            let send = pool.send(0, Step::Wait(gate.clone()));
            let try_send = matches!(pool.try_send(0, Step::Explode), Err(TrySend::Down(_)));
            done.send((queued, later, send, try_send)).unwrap();
        });
        // Only a guard against the bug (a hang) failing this test forever, not a timing claim.
        let outcome = finished.recv_timeout(std::time::Duration::from_secs(60));
        let (queued, later, send, try_send) = outcome.expect("callers of a panicked lane return");
        assert_eq!(queued, Err(LaneDown));
        assert_eq!(later, Err(LaneDown));
        assert_eq!(send, Err(LaneDown));
        assert!(try_send);
    }

    /// Blocks on `Wait` until the test lets it go, and asks for a producer after every message.
    struct Calling;

    impl Lane for Calling {
        type Message = Option<Arc<Mutex<()>>>;
        fn handle(&mut self, wait: Option<Arc<Mutex<()>>>) {
            if let Some(gate) = wait {
                drop(gate.lock());
            }
        }
        fn wants_producer(&mut self) -> bool {
            true
        }
    }

    /// A producer waiting for room in a full queue runs its hook again when the lane asks,
    /// while the queue is still full (so nothing but the lane's call can have woken it).
    #[test]
    fn a_producer_waiting_for_room_runs_its_hook_when_the_lane_asks() {
        let gates: Vec<Arc<Mutex<()>>> = (0..3).map(|_| Arc::new(Mutex::new(()))).collect();
        let mut held: Vec<_> = gates.iter().map(|gate| Some(gate.lock())).collect();
        let pool = Arc::new(StickyPool::new(1, 2, |_| Calling).expect("lanes start"));
        let queued = |pool: &StickyPool<Calling>| pool.senders[0].len();
        // The lane takes the first message and waits in it; two more fill the queue.
        pool.send(0, Some(gates[0].clone())).unwrap();
        while queued(&pool) > 0 {
            std::thread::yield_now();
        }
        pool.send(0, Some(gates[1].clone())).unwrap();
        pool.send(0, Some(gates[2].clone())).unwrap();
        // Let the first go: the lane takes the other two in hand and waits in the second.
        held[0].take();
        while queued(&pool) > 0 {
            std::thread::yield_now();
        }
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let producer = {
            let (pool, runs) = (pool.clone(), runs.clone());
            std::thread::spawn(move || {
                let hook = || {
                    runs.fetch_add(1, Ordering::SeqCst);
                };
                for _ in 0..3 {
                    pool.send_with(0, None, hook).unwrap();
                }
            })
        };
        // Two messages refill the queue; the third runs the hook and waits.
        while pool.rooms[0].waiting.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // The lane finishes the second message and asks: the hook runs again, queue still full.
        held[1].take();
        while runs.load(Ordering::SeqCst) < 2 {
            std::thread::yield_now();
        }
        assert_eq!(queued(&pool), 2);
        held[2].take();
        producer.join().unwrap();
        pool.flush().unwrap();
    }

    #[test]
    fn try_send_reports_a_full_queue() {
        struct Slow(Arc<Mutex<()>>);
        impl Lane for Slow {
            type Message = ();
            fn handle(&mut self, (): ()) {
                drop(self.0.lock());
            }
        }
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock();
        let pool = StickyPool::new(1, 1, |_| Slow(gate.clone())).expect("lanes start");
        let mut full = false;
        for _ in 0..4 {
            full |= matches!(pool.try_send(0, ()), Err(TrySend::Full(())));
        }
        assert!(full, "a one-slot queue behind a blocked lane must fill up");
        drop(held);
        pool.flush().unwrap();
    }
}
