//! Loom models of kvroute's own synchronization (run with `--cfg loom`, see the README):
//! node publication vs a reader, reuse of a dead slot, two lanes changing one node's membership,
//! the pool's flush barrier, worker removal racing a reader, and one deliberately wrong protocol
//! that loom must catch.
#![cfg(loom)]

use kvroute::index::loom_internals::{NodeTable, SharedIndex, pin};
use kvroute::pool::{Lane, StickyPool};
use kvroute::{LocalBlockHash, Worker};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;

#[test]
fn a_new_node_is_seen_whole_or_not_at_all() {
    loom::model(|| {
        let table = Arc::new(NodeTable::new());
        let writer = {
            let table = table.clone();
            thread::spawn(move || {
                table.set_bits(7, 0b101);
            })
        };
        let seen = table.get(7, &pin());
        assert!(seen == 0 || seen == 0b101, "saw a partial word {seen:#b}");
        writer.join().unwrap();
        assert_eq!(table.get(7, &pin()), 0b101);
    });
}

#[test]
fn a_reused_dead_slot_never_lends_its_word_to_the_old_key() {
    loom::model(|| {
        let table = Arc::new(NodeTable::new());
        // 5 and 21 probe from the same slot of the same shard; 5 dies, 21 reuses its slot.
        table.set_bits(5, 1);
        table.clear_bits(5, 1);
        let writer = {
            let table = table.clone();
            thread::spawn(move || {
                table.set_bits(21, 2);
            })
        };
        assert_eq!(table.get(5, &pin()), 0);
        let new = table.get(21, &pin());
        assert!(new == 0 || new == 2);
        writer.join().unwrap();
        assert_eq!(table.get(21, &pin()), 2);
    });
}

/// Slots 64 and 65 share membership word 1, whose emptiness the node's summary word tracks.
#[test]
fn two_lanes_changing_one_word_keep_the_summary_right() {
    loom::model(|| {
        let index = Arc::new(SharedIndex::new(128));
        let workers: Vec<Worker> = (0..66).map(|id| Worker::new(id, 0)).collect();
        for &worker in &workers {
            index.slots.allocate(worker).unwrap();
        }
        let node = kvroute::hash::next_sequence_hash(None, LocalBlockHash(9));
        index.add_holder(node, 64);
        let leaving = {
            let index = index.clone();
            thread::spawn(move || index.remove_holder(node, 64))
        };
        let arriving = {
            let index = index.clone();
            thread::spawn(move || {
                index.add_holder(node, 65);
            })
        };
        leaving.join().unwrap();
        arriving.join().unwrap();
        let scores = index.find_matches(&[LocalBlockHash(9)], false);
        assert_eq!(scores.sorted(), vec![(workers[65], 1)]);
    });
}

#[test]
fn worker_removal_racing_a_reader_is_before_or_after() {
    loom::model(|| {
        let index = Arc::new(SharedIndex::new(4));
        let worker = Worker::new(3, 1);
        let slot = index.slots.allocate(worker).unwrap();
        let query = [LocalBlockHash(1), LocalBlockHash(2)];
        let first = kvroute::hash::next_sequence_hash(None, query[0]);
        let second = kvroute::hash::next_sequence_hash(Some(first), query[1]);
        index.add_holder(first, slot);
        index.add_holder(second, slot);
        let remover = {
            let index = index.clone();
            thread::spawn(move || {
                index.remove_holder(second, slot);
                index.remove_holder(first, slot);
            })
        };
        let scores = index.find_matches(&query, false);
        // Removal runs tail first, so a reader sees depth 2, 1 or nothing: never another worker.
        assert!(scores.iter().all(|(w, depth)| w == worker && depth <= 2));
        remover.join().unwrap();
        assert!(index.find_matches(&query, false).is_empty());
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
        let pool = StickyPool::new(1, 1, |_| Store(cell.clone()));
        pool.send(0, 7).unwrap();
        pool.flush().unwrap();
        assert_eq!(cell.load(Ordering::Relaxed), 7);
    });
}

/// The table's reader re-checks the key after loading the word. Without that re-check, a reader
/// can pair the old key with the word of the key that reused its slot: loom must find it.
#[test]
#[should_panic(expected = "key 5 read the word of key 21")]
fn a_reader_without_the_key_recheck_is_caught() {
    loom::model(|| {
        let key = Arc::new(AtomicU64::new(5)); // a dead slot: key 5, word 0
        let word = Arc::new(AtomicU64::new(0));
        let writer = {
            let (key, word) = (key.clone(), word.clone());
            thread::spawn(move || {
                key.store(21, Ordering::Release);
                word.store(2, Ordering::Release);
            })
        };
        let seen = if key.load(Ordering::Acquire) == 5 { word.load(Ordering::Acquire) } else { 0 };
        assert_eq!(seen, 0, "key 5 read the word of key 21");
        writer.join().unwrap();
    });
}
