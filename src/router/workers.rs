//! The fleet the router chooses among: each (worker, dp_rank) with its [`WorkerRole`].

use crate::event::{Worker, WorkerId};

/// What a worker does when serving is disaggregated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WorkerRole {
    /// Computes prompts only; the KV cache then moves to a decode worker.
    Prefill,
    /// Decodes only, from KV caches computed elsewhere.
    Decode,
    /// Serves whole requests (the default, and the only role in aggregated serving).
    #[default]
    Both,
}

impl WorkerRole {
    /// Whether a worker of this role can compute a prompt.
    pub fn prefills(self) -> bool {
        self != Self::Decode
    }

    /// Whether a worker of this role can decode.
    pub fn decodes(self) -> bool {
        self != Self::Prefill
    }
}

/// Registered workers, sorted, with their roles.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    workers: Vec<(Worker, WorkerRole)>,
    /// Workers whose role is not [`WorkerRole::Both`]: serving is disaggregated while any is.
    split: usize,
}

impl Registry {
    /// The role of `worker`, if registered.
    pub(crate) fn role(&self, worker: Worker) -> Option<WorkerRole> {
        let at = self.workers.binary_search_by_key(&worker, |&(w, _)| w).ok()?;
        Some(self.workers[at].1)
    }

    /// Registers `worker` as `role`; returns its previous role, if any.
    pub(crate) fn insert(&mut self, worker: Worker, role: WorkerRole) -> Option<WorkerRole> {
        let split = |role| usize::from(role != WorkerRole::Both);
        self.split += split(role);
        match self.workers.binary_search_by_key(&worker, |&(w, _)| w) {
            Ok(at) => {
                let old = std::mem::replace(&mut self.workers[at].1, role);
                self.split -= split(old);
                Some(old)
            }
            Err(at) => {
                self.workers.insert(at, (worker, role));
                None
            }
        }
    }

    /// Unregisters every dp rank of `id`; returns them with their roles.
    pub(crate) fn remove(&mut self, id: WorkerId) -> Vec<(Worker, WorkerRole)> {
        let removed: Vec<_> = self.workers.iter().copied().filter(|(w, _)| w.id == id).collect();
        self.workers.retain(|(w, _)| w.id != id);
        self.split -= removed.iter().filter(|(_, role)| *role != WorkerRole::Both).count();
        removed
    }

    /// Whether serving is disaggregated (some worker only prefills or only decodes).
    pub(crate) fn disaggregated(&self) -> bool {
        self.split > 0
    }

    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (Worker, WorkerRole)> + '_ {
        self.workers.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_kept_and_disaggregation_follows_them() {
        let mut registry = Registry::default();
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        assert_eq!(registry.insert(a, WorkerRole::Both), None);
        assert!(!registry.disaggregated());
        assert_eq!(registry.insert(b, WorkerRole::Prefill), None);
        assert!(registry.disaggregated());
        assert_eq!(registry.insert(b, WorkerRole::Both), Some(WorkerRole::Prefill));
        assert!(!registry.disaggregated());
        registry.insert(b, WorkerRole::Decode);
        assert_eq!(registry.remove(WorkerId(2)), vec![(b, WorkerRole::Decode)]);
        assert!(!registry.disaggregated());
        assert_eq!(registry.role(a), Some(WorkerRole::Both));
        assert_eq!(registry.role(b), None);
        assert_eq!(registry.len(), 1);
    }
}
