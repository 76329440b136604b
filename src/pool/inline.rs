//! [`InlineLanes`]: the lanes of a pool run on the caller's thread instead of their own.
//!
//! Each lane's state sits behind a mutex, and every message or task is handled right away by
//! the thread that sends it, followed by the hooks a lane thread calls when its queue runs
//! empty ([`Lane::idle`], then [`Lane::quiet`]), and with the same panic handling
//! ([`Lane::recover`], or the lane goes down). Nothing is queued, so a message is applied when
//! its send returns and [`InlineLanes::flush`] has nothing to wait for.
//!
//! This is for embedders that want no threads and a deterministic order (simulations,
//! replays, fuzzing): one caller at a time per lane, and calls on one lane never overlap, so
//! what the threaded pool guarantees about one worker's order holds trivially.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::LaneDown;
use super::lanes::{Lane, TrySend};
use crate::sync::Mutex;

/// Lanes whose states are driven by the callers; see the [module docs](self).
pub(crate) struct InlineLanes<L: Lane> {
    /// `None` once a lane went down (it panicked and could not recover).
    lanes: Vec<Mutex<Option<L>>>,
}

impl<L: Lane> InlineLanes<L> {
    /// `lanes` lanes (at least one) with the states `make_lane(lane_index)`.
    pub(crate) fn new(lanes: usize, make_lane: impl FnMut(usize) -> L) -> Self {
        Self { lanes: (0..lanes.max(1)).map(make_lane).map(|l| Mutex::new(Some(l))).collect() }
    }

    pub(crate) fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Handles `message` on lane `lane % lanes()` now. If the handler panics and the lane
    /// recovers, the message is lost but the call succeeds, as with a lane thread (the lane's
    /// state reports the restart); if it does not recover, the lane goes down.
    pub(crate) fn try_send(
        &self,
        lane: usize,
        message: L::Message,
    ) -> Result<(), TrySend<L::Message>> {
        let mut slot = self.lanes[lane % self.lanes.len()].lock();
        if slot.is_none() {
            return Err(TrySend::Down(message));
        }
        // Like a message sent to a lane thread, it was taken whatever becomes of it: a lane that
        // goes down fails the calls that come after.
        run_guarded(&mut slot, 1, |state| {
            state.handle(message);
            // The hook's side effects (handing back spent buffers) still matter; nobody waits.
            let _ = state.wants_producer();
        });
        Ok(())
    }

    /// [`Self::try_send`], for callers that would wait for room (there is always room).
    pub(crate) fn send(&self, lane: usize, message: L::Message) -> Result<(), LaneDown> {
        self.try_send(lane, message).map_err(|_| LaneDown)
    }

    /// Runs `task` on lane `lane % lanes()`'s state and returns its result.
    pub(crate) fn run_on_lane<R>(
        &self,
        lane: usize,
        task: impl FnOnce(&mut L) -> R,
    ) -> Result<R, LaneDown> {
        let mut slot = self.lanes[lane % self.lanes.len()].lock();
        if slot.is_none() {
            return Err(LaneDown);
        }
        match run_guarded(&mut slot, 0, task) {
            Handled::Done(result) => Ok(result),
            Handled::Recovered | Handled::Down => Err(LaneDown),
        }
    }

    /// Runs `task` on every lane in turn and returns the results in lane order. Fails at once if
    /// a lane is down, before running anything (as the threaded pool does).
    pub(crate) fn run_on_all<R>(&self, task: impl Fn(&mut L) -> R) -> Result<Vec<R>, LaneDown> {
        if self.lanes.iter().any(|slot| slot.lock().is_none()) {
            return Err(LaneDown);
        }
        (0..self.lanes.len()).map(|lane| self.run_on_lane(lane, &task)).collect()
    }

    /// Nothing is ever pending; fails if a lane is down, like the threaded pool's flush.
    pub(crate) fn flush(&self) -> Result<(), LaneDown> {
        self.run_on_all(|_| ()).map(drop)
    }
}

/// How a guarded call on a lane's state ended.
enum Handled<R> {
    Done(R),
    /// It panicked; the state recovered (the call's result is lost).
    Recovered,
    /// It panicked and the state could not recover: the lane is now down.
    Down,
}

/// Calls `work` on the state in `slot` (which holds one), then the hooks a lane thread calls
/// when its queue runs empty, catching a panic as a lane thread does: [`Lane::recover`], or the
/// state is dropped and the lane is down. `own_sends` is 1 when `work` handles a message the
/// caller is sending (see [`Lane::quiet`]).
fn run_guarded<L: Lane, R>(
    slot: &mut Option<L>,
    own_sends: usize,
    work: impl FnOnce(&mut L) -> R,
) -> Handled<R> {
    let Some(state) = slot.as_mut() else { return Handled::Down };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let result = work(state);
        state.idle();
        result
    }));
    let handled = match outcome {
        Ok(result) => Handled::Done(result),
        Err(_) if catch_unwind(AssertUnwindSafe(|| state.recover())).unwrap_or(false) => {
            Handled::Recovered
        }
        Err(_) => {
            // Even if dropping the broken state panics too, the lane is down for good.
            let broken = slot.take();
            let _ = catch_unwind(AssertUnwindSafe(|| drop(broken)));
            return Handled::Down;
        }
    };
    // Nothing is queued behind the call.
    if let Some(state) = slot.as_mut() {
        let _ = catch_unwind(AssertUnwindSafe(|| state.quiet(&|| 0, own_sends)));
    }
    handled
}

impl<L: Lane> fmt::Debug for InlineLanes<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InlineLanes").field("lanes", &self.lanes()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Records what it is sent; panics on 13 (recovering when `recovers`), and counts hooks.
    #[derive(Default)]
    struct Recorder {
        seen: Vec<u64>,
        idles: usize,
        quiets: usize,
        recovers: bool,
    }

    impl Lane for Recorder {
        type Message = u64;
        fn handle(&mut self, message: u64) {
            self.seen.push(message);
            assert_ne!(message, 13, "a panic injected by the test");
        }
        fn idle(&mut self) {
            self.idles += 1;
        }
        fn quiet(&mut self, queued: &dyn Fn() -> usize, _own_sends: usize) {
            assert_eq!(queued(), 0);
            self.quiets += 1;
        }
        fn recover(&mut self) -> bool {
            self.seen.clear();
            self.recovers
        }
    }

    fn seen(lanes: &InlineLanes<Recorder>, lane: usize) -> Result<Vec<u64>, LaneDown> {
        lanes.run_on_lane(lane, |state| state.seen.clone())
    }

    #[test]
    fn messages_are_handled_before_send_returns_with_the_idle_hooks() {
        let lanes = InlineLanes::new(2, |_| Recorder::default());
        for message in 0..5 {
            lanes.send(message as usize, message).unwrap();
        }
        assert_eq!(seen(&lanes, 0), Ok(vec![0, 2, 4]));
        assert_eq!(seen(&lanes, 3), Ok(vec![1, 3]));
        // Three messages and one task on lane 0, each followed by idle and quiet.
        let hooks = lanes.run_on_all(|state| (state.idles, state.quiets)).unwrap();
        assert_eq!(hooks, vec![(4, 4), (3, 3)]);
        assert_eq!(lanes.flush(), Ok(()));
    }

    #[test]
    fn a_lane_that_recovers_loses_only_what_panicked() {
        let lanes = InlineLanes::new(1, |_| Recorder { recovers: true, ..Recorder::default() });
        lanes.send(0, 1).unwrap();
        assert_eq!(lanes.try_send(0, 13), Ok(()));
        lanes.send(0, 2).unwrap();
        assert_eq!(seen(&lanes, 0), Ok(vec![2]));
        // A task that panics fails its caller once; the lane goes on.
        assert_eq!(
            lanes.run_on_lane(0, |_| panic!("a panic injected by the test")),
            Err::<(), _>(LaneDown)
        );
        assert_eq!(seen(&lanes, 0), Ok(vec![]));
    }

    #[test]
    fn a_lane_that_cannot_recover_is_down_for_every_later_call() {
        let lanes = InlineLanes::new(2, |_| Recorder::default());
        lanes.send(0, 13).unwrap();
        assert_eq!(lanes.try_send(0, 5), Err(TrySend::Down(5)));
        assert_eq!(lanes.send(2, 5), Err(LaneDown));
        assert_eq!(seen(&lanes, 0), Err(LaneDown));
        assert_eq!(lanes.run_on_all(|state| state.seen.len()), Err(LaneDown));
        assert_eq!(lanes.flush(), Err(LaneDown));
        // The other lane is unaffected.
        lanes.send(1, 7).unwrap();
        assert_eq!(seen(&lanes, 1), Ok(vec![7]));
    }
}
