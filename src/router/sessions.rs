//! [`SessionTable`]: which worker each live session was routed to.
//!
//! A conversation's turns share their prefix, so keeping them on one worker keeps its cache
//! warm even when the KV events lag behind. Sessions live in shards (each a lock around a map)
//! so concurrent routes of different sessions rarely meet; an idle session is forgotten after
//! its TTL, checked when it is looked up and swept in bulk as a shard grows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::event::{Worker, WorkerId};
use crate::sync::Mutex;

const SHARDS: usize = 16;

#[derive(Debug)]
struct Session {
    worker: Worker,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct Shard {
    sessions: HashMap<Box<str>, Session, ahash::RandomState>,
    /// Sweep idle sessions when the shard grows past this.
    sweep_at: usize,
}

/// Live sessions and their workers.
#[derive(Debug)]
pub(crate) struct SessionTable {
    shards: Vec<Mutex<Shard>>,
    idle_ttl: Duration,
    hasher: ahash::RandomState,
}

impl SessionTable {
    pub(crate) fn new(idle_ttl: Duration) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard { sweep_at: 64, ..Shard::default() }));
        Self { shards: shards.collect(), idle_ttl, hasher: ahash::RandomState::new() }
    }

    fn shard(&self, session: &str) -> &Mutex<Shard> {
        &self.shards[self.hasher.hash_one(session) as usize % SHARDS]
    }

    /// The worker of `session`, if it is live at `now`.
    pub(crate) fn get(&self, session: &str, now: Instant) -> Option<Worker> {
        let shard = self.shard(session).lock();
        let entry = shard.sessions.get(session)?;
        (now.saturating_duration_since(entry.last_used) < self.idle_ttl).then_some(entry.worker)
    }

    /// Records that `session` was routed to `worker` at `now`.
    pub(crate) fn set(&self, session: &str, worker: Worker, now: Instant) {
        let mut shard = self.shard(session).lock();
        match shard.sessions.get_mut(session) {
            Some(entry) => *entry = Session { worker, last_used: now },
            None => {
                shard.sessions.insert(session.into(), Session { worker, last_used: now });
            }
        }
        if shard.sessions.len() >= shard.sweep_at {
            let ttl = self.idle_ttl;
            shard.sessions.retain(|_, s| now.saturating_duration_since(s.last_used) < ttl);
            shard.sweep_at = (shard.sessions.len() * 2).max(64);
        }
    }

    /// Forgets the sessions of every dp rank of `id`.
    pub(crate) fn remove_worker(&self, id: WorkerId) {
        for shard in &self.shards {
            shard.lock().sessions.retain(|_, s| s.worker.id != id);
        }
    }

    /// Live sessions at `now`.
    pub(crate) fn live(&self, now: Instant) -> usize {
        let ttl = self.idle_ttl;
        let live = |shard: &Shard| {
            shard
                .sessions
                .values()
                .filter(|s| now.saturating_duration_since(s.last_used) < ttl)
                .count()
        };
        self.shards.iter().map(|shard| live(&shard.lock())).sum()
    }
}
