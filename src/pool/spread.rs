//! [`Spread`]: lanes that share a CPU while a caller waits on them move apart.
//!
//! A producer handing over a burst keeps one core busy, and the scheduler often runs two lanes
//! in turn on another meanwhile. When the producer then waits for the lanes (a flush, or a
//! task's result), its core is idle, but Linux moves a thread that is running only when its
//! load balancer gets to it: on the 2-core test VM that took up to 24 ms, the two lanes
//! time-sharing one core all the while (`perf sched timehist`). A lane's wakeup would be
//! placed on the idle core, but a lane with work queued does not sleep, and a brief sleep does
//! not do it (on a busy cache domain the wakeup path skips its search for an idle core).
//!
//! So a lane with work says which CPU it runs on, as it starts on a batch after waiting and
//! every 64 messages after that, and clears it when its queue runs dry. A lane that finds
//! another busy lane of its pool on its CPU while a caller waits on the pool moves itself: it
//! narrows its CPU affinity to the allowed CPUs no busy lane is on (the kernel migrates it
//! before the call returns) and then restores the affinity it had, so it is never pinned and
//! never leaves the CPUs it was allowed. With as many busy lanes as allowed CPUs there is
//! nowhere to go, and nothing is done.
//!
//! Only a caller waiting on the lanes counts, not a producer waiting for room in a queue: that
//! one goes on as soon as a lane takes its batch, and a lane moved to its core then shares
//! that core with it. Fresh `shared-fleet` ingests took 0.87 of the time they took before
//! with flushes only, 0.93 with both kinds of wait (30 process pairs each; `documents` 0.96
//! either way). How much it gains depends on how slowly the kernel balances, which varies by
//! the hour on that VM: the next day, on against off within one build gave `shared-fleet`
//! 1.01 over 20 pairs, then 0.93 over 16 pairs 40 minutes later, and `documents` 1.02 over 36.
//!
//! An embedder that places threads itself can turn this off ([`Spread::new`] with `on` false:
//! `PoolConfig::spread_lanes` for the index, `SequencesBuilder::spread_peer_lanes` for the
//! load tracker's peer lanes); lanes then never look at their CPU.
//!
//! Linux only; elsewhere, and under loom and miri, every call is a no-op.

#[cfg(all(target_os = "linux", not(any(loom, miri))))]
mod imp {
    use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
    use nix::unistd::Pid;

    use crate::sync::{AtomicUsize, Ordering};

    /// How many messages a busy lane handles between two looks at its CPU: a look costs a
    /// `sched_getcpu` (a few nanoseconds), and a message a few hundred.
    const CHECK_EVERY: usize = 64;

    /// How many messages a lane that found nowhere to go handles before it looks again: trying
    /// costs two system calls, and with more busy lanes than CPUs no try succeeds.
    const STUCK_FOR: usize = 4096;

    /// Whether lane `me`, on `cpu`, moves once a caller waits (see the [module docs](super)):
    /// if another lane's recorded CPU is `cpu`. It then avoids every CPU a lane is recorded on.
    pub(super) fn should_move(me: usize, cpu: usize, recorded: &[Option<usize>]) -> bool {
        recorded.iter().enumerate().any(|(lane, &at)| lane != me && at == Some(cpu))
    }

    /// A lane's slot when it has no work (or has not looked yet).
    const NONE: usize = usize::MAX;

    /// One pool's lanes' CPUs and waiting callers; see the [module docs](super).
    #[derive(Debug)]
    pub(crate) struct Spread {
        pub(super) cpus: Box<[AtomicUsize]>,
        waiting: AtomicUsize,
        /// Off: lanes never look (see the [module docs](super)).
        on: bool,
    }

    impl Spread {
        /// For `lanes` lanes; `on` false turns it off.
        pub(crate) fn new(lanes: usize, on: bool) -> Self {
            let cpus = (0..lanes).map(|_| AtomicUsize::new(NONE)).collect();
            Self { cpus, waiting: 0.into(), on }
        }

        /// Caller side: counts the caller as waiting on the lanes until the guard drops.
        pub(crate) fn caller_waits(&self) -> CallerWaits<'_> {
            self.waiting.fetch_add(1, Ordering::Relaxed);
            CallerWaits(self)
        }

        /// Lane side, while it has work: records lane `me`'s CPU, and moves the lane if it
        /// shares that CPU with another busy lane while a caller waits. Returns how many
        /// messages the lane handles before it looks again.
        pub(crate) fn look(&self, me: usize) -> usize {
            if !self.on {
                return usize::MAX;
            }
            let Ok(cpu) = sched_getcpu() else { return STUCK_FOR };
            self.cpus[me].store(cpu, Ordering::Relaxed);
            if self.waiting.load(Ordering::Relaxed) == 0 {
                return CHECK_EVERY;
            }
            let recorded = self.recorded();
            if !should_move(me, cpu, &recorded) {
                return CHECK_EVERY;
            }
            match move_off(|cpu| recorded.contains(&Some(cpu))) {
                Some(now) => {
                    self.cpus[me].store(now, Ordering::Relaxed);
                    CHECK_EVERY
                }
                None => STUCK_FOR,
            }
        }

        /// Lane side, when its queue is empty: it is not busy any more.
        pub(crate) fn quiet(&self, me: usize) {
            self.cpus[me].store(NONE, Ordering::Relaxed);
        }

        /// Whether lanes move apart.
        #[cfg(all(test, not(loom)))]
        pub(crate) fn is_on(&self) -> bool {
            self.on
        }

        pub(super) fn recorded(&self) -> Vec<Option<usize>> {
            let slot = |cpu: &AtomicUsize| Some(cpu.load(Ordering::Relaxed)).filter(|&c| c != NONE);
            self.cpus.iter().map(slot).collect()
        }
    }

    /// See [`Spread::caller_waits`].
    pub(crate) struct CallerWaits<'a>(&'a Spread);

    impl Drop for CallerWaits<'_> {
        fn drop(&mut self) {
            self.0.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The CPUs in `set`.
    pub(super) fn cpus_in(set: &CpuSet) -> impl Iterator<Item = usize> + '_ {
        (0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false))
    }

    /// Moves the calling thread to one of its allowed CPUs that `avoid` does not name, and
    /// gives it back the affinity it had; returns the CPU it moved to, or `None` if every
    /// allowed CPU is avoided (or the OS refused).
    pub(super) fn move_off(avoid: impl Fn(usize) -> bool) -> Option<usize> {
        let this_thread = Pid::from_raw(0);
        let allowed = sched_getaffinity(this_thread).ok()?;
        let mut elsewhere = CpuSet::new();
        let mut any = false;
        for cpu in cpus_in(&allowed) {
            if !avoid(cpu) {
                elsewhere.set(cpu).ok()?;
                any = true;
            }
        }
        if !any {
            return None;
        }
        sched_setaffinity(this_thread, &elsewhere).ok()?;
        // The kernel has moved the thread into `elsewhere` before the call returned.
        let now = sched_getcpu().ok();
        // Should restoring fail, the thread stays on allowed CPUs, only fewer of them.
        let _ = sched_setaffinity(this_thread, &allowed);
        now
    }
}

#[cfg(not(all(target_os = "linux", not(any(loom, miri)))))]
mod imp {
    /// Does nothing on this platform (see the [module docs](super)).
    #[derive(Debug)]
    pub(crate) struct Spread;

    /// See [`Spread::caller_waits`].
    pub(crate) struct CallerWaits;

    impl Spread {
        pub(crate) fn new(_lanes: usize, _on: bool) -> Self {
            Self
        }

        pub(crate) fn caller_waits(&self) -> CallerWaits {
            CallerWaits
        }

        /// Returns how many messages the lane handles before it looks again.
        pub(crate) fn look(&self, _me: usize) -> usize {
            usize::MAX
        }

        pub(crate) fn quiet(&self, _me: usize) {}

        /// Never: lanes do not move here.
        #[cfg(all(test, not(loom)))]
        pub(crate) fn is_on(&self) -> bool {
            false
        }
    }
}

pub(crate) use imp::Spread;

#[cfg(all(test, target_os = "linux", not(any(loom, miri))))]
mod tests {
    use super::*;

    #[test]
    fn a_lane_moves_only_off_a_cpu_another_busy_lane_shares() {
        use imp::should_move;

        let recorded = [Some(1), Some(1), None, Some(0)];
        assert!(should_move(0, 1, &recorded));
        assert!(should_move(1, 1, &recorded));
        assert!(!should_move(3, 0, &recorded), "alone on its CPU");
        assert!(!should_move(2, 2, &recorded), "a quiet lane's slot is no one's");
    }

    /// The real move: the thread leaves the avoided CPU while its affinity is narrowed, and
    /// gets its affinity back whole.
    #[test]
    fn moving_off_a_cpu_lands_elsewhere_and_restores_the_affinity() {
        use nix::sched::{sched_getaffinity, sched_getcpu};
        use nix::unistd::Pid;

        let mover = std::thread::spawn(|| {
            let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
            let allowed: Vec<usize> = imp::cpus_in(&before).collect();
            let here = sched_getcpu().unwrap();
            let moved = imp::move_off(|cpu| cpu == here);
            let after = sched_getaffinity(Pid::from_raw(0)).unwrap();
            (allowed, here, moved, before == after)
        });
        let (allowed, here, moved, restored) = mover.join().unwrap();
        assert!(restored, "the affinity is the same before and after");
        if allowed.len() > 1 {
            let now = moved.expect("another allowed CPU to move to");
            assert!(now != here && allowed.contains(&now), "moved from {here} to {now}");
        } else {
            assert_eq!(moved, None, "one allowed CPU: nowhere to go");
        }
        assert_eq!(imp::move_off(|_| true), None, "every CPU avoided");
    }

    /// A lane sharing its CPU with a busy lane moves once a caller waits; the test plays the
    /// other lane by recording this thread's own CPU for it.
    #[test]
    fn a_lane_sharing_its_cpu_moves_when_a_caller_waits() {
        use nix::sched::{sched_getaffinity, sched_getcpu};
        use nix::unistd::Pid;

        let spread = Spread::new(2, true);
        spread.look(0);
        assert!(spread.recorded()[0].is_some(), "a busy lane's CPU is recorded");
        let allowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let many = imp::cpus_in(&allowed).count() > 1;
        let waits = spread.caller_waits();
        let now = sched_getcpu().unwrap();
        spread.cpus[1].store(now, crate::sync::Ordering::Relaxed);
        // Still on `now` at the look, the lane moves; moved already, it records where it is.
        // Either way it ends off `now`.
        spread.look(0);
        let landed = spread.recorded()[0];
        if many {
            assert!(landed.is_some_and(|cpu| cpu != now), "moved off {now}: {landed:?}");
        } else {
            assert_eq!(landed, Some(now), "one allowed CPU: stays");
        }
        drop(waits);
        spread.quiet(0);
        assert_eq!(spread.recorded()[0], None);
    }

    /// Turned off, a lane never looks: it records no CPU and does not move, whoever waits.
    #[test]
    fn a_spread_turned_off_never_looks() {
        use nix::sched::sched_getcpu;

        let spread = Spread::new(2, false);
        let _waits = spread.caller_waits();
        spread.cpus[1].store(sched_getcpu().unwrap(), crate::sync::Ordering::Relaxed);
        assert_eq!(spread.look(0), usize::MAX, "never looks again");
        assert_eq!(spread.recorded()[0], None, "records no CPU");
    }
}
