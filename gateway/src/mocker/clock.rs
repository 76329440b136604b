//! Waiting until an instant to within the kernel's timer slack, not tokio's millisecond.
//!
//! tokio's timer wheel ticks in whole milliseconds: a wait of tens of microseconds (a prefill
//! or a decode step at `--speedup 1000`) ended up to a millisecond late, or at once when its
//! deadline had passed by the time it was polled. The same prompt's TTFT jumped between about
//! 0.3 and 1.4 ms, which drowned what a gateway in front adds. [`PreciseClock`] hands waits'
//! last two milliseconds to one thread that sleeps on a condition variable until the earliest
//! deadline (late by the timer slack, about 50 µs) and completes every wait due; the rest of a
//! longer wait sleeps on tokio's timer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

/// The part of a wait left to the clock's thread: over tokio's tick, so tokio's wake-up
/// (up to a tick late) still comes before the deadline.
const COARSE_MARGIN: Duration = Duration::from_millis(2);

/// A timer thread for waits shorter than tokio's timer resolves; it stops when dropped.
#[derive(Debug)]
pub struct PreciseClock {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    due: BinaryHeap<Reverse<Due>>,
    stopped: bool,
}

/// One pending wait, ordered by its deadline.
#[derive(Debug)]
struct Due {
    at: Instant,
    done: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

impl PreciseClock {
    /// Starts the clock's thread.
    pub fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let running = Arc::clone(&shared);
        let thread =
            std::thread::Builder::new().name("mocker-clock".into()).spawn(move || run(&running))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Returns at `at` (or at once if it has passed).
    pub async fn sleep_until(&self, at: Instant) {
        if let Some(coarse) = at.checked_sub(COARSE_MARGIN)
            && coarse > Instant::now()
        {
            tokio::time::sleep_until(coarse.into()).await;
        }
        if at <= Instant::now() {
            return;
        }
        if let Some(finished) = self.register(at) {
            // An error would be the clock gone: nothing left to wait for.
            let _ = finished.await;
        }
    }

    /// Hands a wait until `at` to the clock's thread, which completes the receiver then;
    /// `None` once the clock has stopped.
    fn register(&self, at: Instant) -> Option<oneshot::Receiver<()>> {
        let (done, finished) = oneshot::channel();
        let mut state = self.shared.state.lock();
        if state.stopped {
            return None;
        }
        let earliest = state.due.peek().is_none_or(|Reverse(first)| at < first.at);
        state.due.push(Reverse(Due { at, done }));
        if earliest {
            self.shared.changed.notify_one();
        }
        Some(finished)
    }
}

impl Drop for PreciseClock {
    fn drop(&mut self) {
        self.shared.state.lock().stopped = true;
        self.shared.changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The clock's thread: completes the waits due, then sleeps until the next deadline or a new
/// earlier one.
fn run(shared: &Shared) {
    let mut state = shared.state.lock();
    while !state.stopped {
        let now = Instant::now();
        while state.due.peek().is_some_and(|Reverse(first)| first.at <= now) {
            if let Some(Reverse(due)) = state.due.pop() {
                let _ = due.done.send(());
            }
        }
        match state.due.peek().map(|Reverse(first)| first.at) {
            Some(at) => {
                shared.changed.wait_until(&mut state, at);
            }
            None => shared.changed.wait(&mut state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock's thread ends waits in deadline order, whatever order they came in, each
    /// without waiting for a later one. They are registered out of order well before the first
    /// deadline (5 ms out, 3 ms apart), with one far later (2 s), and polled until all but that
    /// one have ended: waits found ended in the same poll (an observer held back by a busy
    /// machine) count as a tie, and a second past the deadlines means one waited for a later.
    #[test]
    fn the_clock_ends_waits_in_deadline_order() {
        let clock = PreciseClock::start().unwrap();
        let start = Instant::now() + Duration::from_millis(5);
        let at = |millis: u64| start + Duration::from_millis(millis);
        let mut pending: Vec<(u64, oneshot::Receiver<()>)> = [9, 3, 2_000, 12, 0, 6]
            .into_iter()
            .map(|millis| (millis, clock.register(at(millis)).expect("the clock runs")))
            .collect();
        let mut polls: Vec<Vec<u64>> = Vec::new();
        while pending.len() > 1 {
            assert!(Instant::now() < at(1_000), "a wait still pending: {polls:?} ended");
            let mut ended = Vec::new();
            pending.retain_mut(|(millis, finished)| match finished.try_recv() {
                Ok(()) => {
                    assert!(Instant::now() >= at(*millis), "{millis} ms: ended early");
                    ended.push(*millis);
                    false
                }
                Err(oneshot::error::TryRecvError::Empty) => true,
                Err(oneshot::error::TryRecvError::Closed) => panic!("the clock dropped a wait"),
            });
            if !ended.is_empty() {
                polls.push(ended);
            }
            std::thread::yield_now();
        }
        for pair in polls.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            assert!(
                earlier.iter().max() < later.iter().min(),
                "a later deadline ended first: {polls:?}"
            );
        }
    }

    /// Waits through `sleep_until`, short (the clock's thread alone), long (tokio's timer,
    /// then the clock's) and already past, all end and none before its deadline.
    #[tokio::test]
    async fn sleeps_never_end_early() {
        let clock = Arc::new(PreciseClock::start().unwrap());
        let start = Instant::now();
        let (sender, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waits = Vec::new();
        for micros in [900u64, 300, 2_600, 0, 600, 50, 6_000] {
            let (clock, sender) = (Arc::clone(&clock), sender.clone());
            let at = start + Duration::from_micros(micros);
            waits.push(tokio::spawn(async move {
                clock.sleep_until(at).await;
                assert!(Instant::now() >= at, "{micros} µs: woke early");
                sender.send(micros).unwrap();
            }));
        }
        for wait in waits {
            wait.await.unwrap();
        }
        drop(sender);
        let mut ended = Vec::new();
        while let Some(micros) = order.recv().await {
            ended.push(micros);
        }
        ended.sort_unstable();
        assert_eq!(ended, [0, 50, 300, 600, 900, 2_600, 6_000], "every wait ends");
    }
}
