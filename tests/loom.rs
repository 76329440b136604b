//! Loom models of kvroute's own synchronization (run with `--cfg loom`, see the README):
//! the run table's slot protocol (colliding keys too), publication of a new run vs a reader, a
//! split (a second worker joining part of a run) vs a reader, a worker joining a whole run in
//! place vs a reader, two lanes changing who holds one prefix while a query merges both, worker
//! removal racing a reader, a join (a run and its only child made one again) vs a reader, the
//! pool's flush barrier, producers waiting for room in a full queue (and woken early by a lane
//! that asks for them), a lane handing values back for producers to drop, approximate mode's
//! backlog (a push waking a sleeping drainer; a flush and the drainer taking at once), and two deliberately
//! wrong protocols that loom must catch (a split that shrinks the head first, a join that
//! unlinks its tail at once).
#![cfg(loom)]

use kvroute::index::loom_internals::{LoomLane, LoomTable};
use kvroute::pool::{Lane, StickyPool};
use kvroute::{Backlog, Handback, Worker};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;

fn w(id: u64) -> Worker {
    Worker::new(id, 0)
}

// Readers run on spawned threads and writers on the model's main thread: that is the shape in
// which loom explores every interleaving of the two here.

#[test]
fn a_new_run_is_seen_whole_or_not_at_all() {
    loom::model(|| {
        let mut lane = LoomLane::default();
        let reader = lane.reader();
        let query = thread::spawn(move || reader.find_matches(&[1, 2]));
        lane.append(w(1), None, &[1, 2]);
        let seen = query.join().unwrap();
        assert!(seen.is_empty() || seen == vec![(w(1), 2)], "saw {seen:?}");
        assert_eq!(lane.reader().find_matches(&[1, 2]), vec![(w(1), 2)]);
    });
}

/// Keys 1 and `other` share a home slot. While key 1 is inserted into the empty slot that ends
/// `other`'s probe sequence, the slot briefly holds key 1's run but no key yet: a lookup of
/// `other` must not take that run (miri caught an early reader that did).
#[test]
fn a_lookup_never_takes_a_run_from_a_slot_being_filled() {
    let other = LoomTable::same_home(1);
    loom::model(move || {
        let table = LoomTable::default();
        let reader = table.clone();
        let query = thread::spawn(move || (reader.get(other), reader.get(1)));
        table.insert(1, &[10, 11]);
        let (other, own) = query.join().unwrap();
        assert_eq!(other, None);
        assert!(own.is_none() || own == Some(vec![10, 11]), "saw {own:?}");
    });
}

/// A removed key's tombstone is reused only by that key, so a reader of another key passing
/// over it never sees a run, and the key's own reader sees it before or after.
#[test]
fn a_tombstone_is_reused_only_by_its_own_key() {
    let other = LoomTable::same_home(1);
    loom::model(move || {
        let table = LoomTable::default();
        table.insert(1, &[10]);
        table.remove(1);
        let reader = table.clone();
        let query = thread::spawn(move || (reader.get(other), reader.get(1)));
        table.insert(other, &[20]);
        table.insert(1, &[12]);
        let (other, own) = query.join().unwrap();
        assert!(other.is_none() || other == Some(vec![20]), "saw {other:?}");
        assert!(own.is_none() || own == Some(vec![12]), "saw {own:?}");
    });
}

/// A change replaces a run's version in its slot: a reader sees the old version or the new one,
/// whole, and the old one stays readable until the reader is done (the reclaimer keeps it).
#[test]
fn a_replaced_run_is_seen_old_or_new_never_mixed() {
    loom::model(|| {
        let table = LoomTable::default();
        table.insert(5, &[1, 10]);
        let reader = table.clone();
        let query = thread::spawn(move || reader.get(5));
        table.replace(5, &[1, 11, 12]);
        let seen = query.join().unwrap();
        assert!(seen == Some(vec![1, 10]) || seen == Some(vec![1, 11, 12]), "saw {seen:?}");
        assert_eq!(table.get(5), Some(vec![1, 11, 12]));
    });
}

/// Runs under one key (keys are not unique): while the writer removes one of two
/// and publishes a third under the same key (reusing the removed one's slot), a reader looking
/// for the one that stays always finds it, whole.
#[test]
fn colliding_keys_never_hide_a_run() {
    loom::model(|| {
        let table = LoomTable::default();
        table.insert(5, &[1, 10]);
        table.insert(5, &[2, 20]);
        let reader = table.clone();
        let query = thread::spawn(move || reader.get_starting(5, 2));
        table.remove_starting(5, 1);
        table.insert(5, &[3, 30]);
        assert_eq!(query.join().unwrap(), Some(vec![2, 20]));
        assert_eq!(table.get_starting(5, 3), Some(vec![3, 30]));
        assert_eq!(table.get_starting(5, 1), None);
    });
}

/// Worker 2 joining the first block of worker 1's run splits it: the tail run is published
/// before the head shrinks, so a reader never loses worker 1's later blocks.
#[test]
fn a_split_never_hides_blocks_from_a_reader() {
    loom::model(|| {
        let mut lane = LoomLane::default();
        let nodes = lane.append(w(1), None, &[1, 2, 3]);
        let reader = lane.reader();
        let query = thread::spawn(move || reader.find_matches(&[1, 2, 3]));
        lane.add_holder(w(2), &nodes[..1]);
        let seen = query.join().unwrap();
        assert!(seen == vec![(w(1), 3)] || seen == vec![(w(1), 3), (w(2), 1)], "saw {seen:?}");
        assert_eq!(lane.reader().find_matches(&[1, 2, 3]), vec![(w(1), 3), (w(2), 1)]);
    });
}

/// Worker 2 joining all of worker 1's run changes its holder bits in place, in the version a
/// reader may be walking: the reader sees the run before or after, and a worker 2 it sees
/// carries its name (the slot is named before the bit is set, with release).
#[test]
fn a_holder_joining_a_whole_run_in_place_is_seen_before_or_after() {
    loom::model(|| {
        let mut lane = LoomLane::default();
        let nodes = lane.append(w(1), None, &[1, 2]);
        let reader = lane.reader();
        let query = thread::spawn(move || reader.find_matches(&[1, 2, 3]));
        lane.add_holder(w(2), &nodes);
        let seen = query.join().unwrap();
        assert!(seen == vec![(w(1), 2)] || seen == vec![(w(1), 2), (w(2), 2)], "saw {seen:?}");
        assert_eq!(lane.reader().find_matches(&[1, 2]), vec![(w(1), 2), (w(2), 2)]);
    });
}

/// Lanes never share a node: a prefix two lanes' workers hold is a run in each lane's tree, and
/// a query merges the walks. One worker leaving while the other arrives gives each its own
/// before-or-after answer, never a partial one.
#[test]
fn two_lanes_changing_one_prefix_answer_independently() {
    loom::model(|| {
        let mut left = LoomLane::default();
        let mut right = LoomLane::default();
        let held = left.append(w(1), None, &[9, 8]);
        let (left_reader, right_reader) = (left.reader(), right.reader());
        let query = thread::spawn(move || {
            let mut seen = left_reader.find_matches(&[9, 8]);
            seen.extend(right_reader.find_matches(&[9, 8]));
            seen
        });
        let arriving = thread::spawn(move || {
            right.append(w(2), None, &[9, 8]);
            right
        });
        left.release(w(1), &held);
        let seen = query.join().unwrap();
        for (worker, depth) in &seen {
            assert!((*worker == w(1) || *worker == w(2)) && *depth == 2, "saw {seen:?}");
        }
        let right = arriving.join().unwrap();
        assert!(left.reader().find_matches(&[9, 8]).is_empty());
        assert_eq!(right.reader().find_matches(&[9, 8]), vec![(w(2), 2)]);
    });
}

/// Worker 4 holds [1, 2] (shared with worker 3) and [3] below it. Whichever run its removal
/// changes first, a reader sees a prefix of what worker 4 held (a worker counts until its first
/// missing block), and worker 3 untouched.
#[test]
fn worker_removal_racing_a_reader_sees_a_prefix() {
    loom::model(|| {
        let mut lane = LoomLane::default();
        let first = lane.append(w(3), None, &[1, 2]);
        let second = lane.append(w(4), Some(first[1]), &[3]);
        lane.add_holder(w(4), &first);
        let reader = lane.reader();
        let query = thread::spawn(move || reader.find_matches(&[1, 2, 3]));
        lane.release(w(4), &[first[0], first[1], second[0]]);
        let seen = query.join().unwrap();
        assert!(
            [vec![(w(3), 2), (w(4), 3)], vec![(w(3), 2), (w(4), 2)], vec![(w(3), 2)]]
                .contains(&seen),
            "saw {seen:?}"
        );
        assert_eq!(lane.reader().find_matches(&[1, 2, 3]), vec![(w(3), 2)]);
    });
}

struct Store(Arc<AtomicU64>);

impl Lane for Store {
    type Message = u64;
    fn handle(&mut self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

#[test]
fn flush_returns_after_earlier_messages_are_handled() {
    loom::model(|| {
        let cell = Arc::new(AtomicU64::new(0));
        let pool = StickyPool::new(1, 1, |_| Store(cell.clone())).expect("lanes start");
        pool.send(0, 7).unwrap();
        pool.flush().unwrap();
        assert_eq!(cell.load(Ordering::Relaxed), 7);
    });
}

/// Producers that find the queue full wait for the lane to drain it (to half: here, to empty);
/// loom reports a deadlock if a wakeup can be lost, for one waiter or two.
#[test]
fn producers_waiting_for_room_are_woken() {
    loom::model(|| {
        let cell = Arc::new(AtomicU64::new(0));
        let pool = Arc::new(StickyPool::new(1, 1, |_| Store(cell.clone())).expect("lanes start"));
        let other = {
            let pool = pool.clone();
            thread::spawn(move || pool.send(0, 1).unwrap())
        };
        pool.send(0, 2).unwrap();
        pool.send(0, 3).unwrap();
        other.join().unwrap();
        pool.flush().unwrap();
        assert_ne!(cell.load(Ordering::Relaxed), 0);
    });
}

/// A lane that asks for a producer after every message.
struct Asking(Arc<AtomicU64>);

impl Lane for Asking {
    type Message = u64;
    fn handle(&mut self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
    fn wants_producer(&mut self) -> bool {
        true
    }
}

/// A producer waiting for room may also be woken by the lane asking for it (its hook runs, and
/// it waits again if there is still no room): loom reports a deadlock if either wakeup can be
/// lost or a stale request leaves the producer waiting for nothing.
#[test]
fn producers_woken_by_the_lane_still_get_room() {
    loom::model(|| {
        let cell = Arc::new(AtomicU64::new(0));
        let pool = Arc::new(StickyPool::new(1, 1, |_| Asking(cell.clone())).expect("lanes start"));
        let hooks = Arc::new(AtomicU64::new(0));
        let hook = || {
            hooks.fetch_add(1, Ordering::Relaxed);
        };
        for value in 1..=3 {
            pool.send_with(0, value, hook).unwrap();
        }
        pool.flush().unwrap();
        assert_eq!(cell.load(Ordering::Relaxed), 3);
    });
}

/// Values a lane hands back are dropped exactly once, whether a producer takes them while the
/// lane hands more over or they are still there when the handback goes; a second producer
/// (dropping one at a time) finds the first one busy and goes on.
#[test]
fn handed_back_values_are_dropped_once() {
    loom::model(|| {
        let value = Arc::new(());
        let handback = Arc::new(Handback::new(2));
        let lane = {
            let (handback, value) = (handback.clone(), value.clone());
            thread::spawn(move || {
                handback.hand_over(&mut vec![value.clone()]);
                handback.hand_over(&mut vec![value.clone(), value.clone()]);
            })
        };
        let other = {
            let handback = handback.clone();
            thread::spawn(move || handback.drop_some(1))
        };
        handback.drop_handed_over();
        lane.join().unwrap();
        other.join().unwrap();
        drop(handback);
        assert_eq!(Arc::strong_count(&value), 1);
    });
}

/// The split protocol in miniature, in the wrong order: the head shrinks before the tail run is
/// published, so a reader can find neither the tail in the head nor the tail run. Loom must
/// find that interleaving.
#[test]
#[should_panic(expected = "lost the tail")]
fn a_split_that_shrinks_the_head_first_is_caught() {
    loom::model(|| {
        let head_len = Arc::new(AtomicU64::new(3)); // the run [1, 2, 3]
        let tail_published = Arc::new(AtomicU64::new(0)); // the run [2, 3] once split off
        let writer = {
            let (head_len, tail_published) = (head_len.clone(), tail_published.clone());
            thread::spawn(move || {
                head_len.store(1, Ordering::Release);
                tail_published.store(1, Ordering::Release);
            })
        };
        let depth = match head_len.load(Ordering::Acquire) {
            3 => 3,
            _ => 1 + 2 * tail_published.load(Ordering::Acquire),
        };
        assert_eq!(depth, 3, "lost the tail");
        writer.join().unwrap();
    });
}

/// Worker 2 leaving the first block of worker 1's run leaves both parts with the same holders:
/// they are joined into a new version of the head, and the tail stays in the table below the
/// head's old tail id, so a reader still on the old head never loses worker 1's later blocks.
#[test]
fn a_join_never_hides_blocks_from_a_reader() {
    loom::model(|| {
        let mut lane = LoomLane::default();
        let nodes = lane.append(w(1), None, &[1, 2, 3]);
        lane.add_holder(w(2), &nodes[..1]);
        assert_eq!(lane.runs(), 2);
        let reader = lane.reader();
        let query = thread::spawn(move || reader.find_matches(&[1, 2, 3]));
        lane.release(w(2), &nodes[..1]);
        let seen = query.join().unwrap();
        assert!(seen == vec![(w(1), 3)] || seen == vec![(w(1), 3), (w(2), 1)], "saw {seen:?}");
        assert_eq!(lane.reader().find_matches(&[1, 2, 3]), vec![(w(1), 3)]);
        assert_eq!(lane.runs(), 1);
    });
}

/// A join whose tail is unlinked at once, while a reader may still be on the head's old
/// version: the reader can find neither the tail's blocks in that version nor the tail run.
/// Loom must find that interleaving.
#[test]
#[should_panic(expected = "lost the tail")]
fn a_join_that_unlinks_the_tail_at_once_is_caught() {
    loom::model(|| {
        let mut lane = LoomLane::default();
        let nodes = lane.append(w(1), None, &[1, 2, 3]);
        lane.add_holder(w(2), &nodes[..1]);
        let reader = lane.reader();
        let query = thread::spawn(move || reader.find_matches(&[1, 2, 3]));
        lane.release_unlinking_joined_tails_at_once(w(2), &nodes[..1]);
        let seen = query.join().unwrap();
        assert!(seen.first() == Some(&(w(1), 3)), "lost the tail: saw {seen:?}");
    });
}

/// A drainer thread as approximate mode's recorder runs one: sleeps until pushed, takes, and
/// stops once `done` says so of what it took or the backlog closes.
fn drain_until(
    backlog: &Arc<Backlog<u32>>,
    done: fn(&[u32]) -> bool,
) -> thread::JoinHandle<Vec<u32>> {
    let backlog = backlog.clone();
    thread::spawn(move || {
        let (mut taken, mut seen) = (Vec::new(), backlog.pushed());
        while !done(&taken) && backlog.sleep_unless_pushed(seen) {
            seen = backlog.pushed();
            backlog.take(&mut taken);
        }
        taken
    })
}

/// Approximate mode's backlog: a drainer that found nothing goes to sleep while a router pushes
/// two decisions. If a push could miss the sleeping drainer, loom finds the deadlock.
#[test]
fn a_backlog_push_always_wakes_a_sleeping_drainer() {
    loom::model(|| {
        let backlog = Arc::new(Backlog::default());
        let drainer = drain_until(&backlog, |taken| taken.len() == 2);
        backlog.push(1);
        backlog.push(2);
        assert_eq!(drainer.join().unwrap(), [1, 2]);
    });
}

/// The drainer thread and a flush on another thread take from the backlog while a router
/// pushes, then the backlog closes: every decision is taken exactly once, each taker's in the
/// order pushed, and the drainer stops.
#[test]
fn a_backlog_hands_each_item_to_exactly_one_taker_in_order() {
    loom::model(|| {
        let backlog = Arc::new(Backlog::default());
        let drainer = drain_until(&backlog, |_| false);
        let router = {
            let backlog = backlog.clone();
            thread::spawn(move || {
                backlog.push(1);
                backlog.push(2);
            })
        };
        let mut flushed = Vec::new();
        backlog.take(&mut flushed);
        router.join().unwrap();
        backlog.close();
        let drained = drainer.join().unwrap();
        let mut rest = Vec::new();
        backlog.take(&mut rest);
        for taker in [&flushed, &drained, &rest] {
            assert!(taker.is_sorted(), "out of order: {taker:?}");
        }
        let mut all = [flushed, drained, rest].concat();
        all.sort_unstable();
        assert_eq!(all, [1, 2]);
    });
}
