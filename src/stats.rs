//! Counters a context keeps about its enqueues.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many wait-list entries the hazard rules produced, for a [`Context`](crate::Context).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HazardStats {
    /// Commands enqueued on buffers.
    pub enqueues: u64,
    /// Wait-list entries given to them (hazards and extra dependencies).
    pub wait_entries: u64,
    /// How many there would have been without leaving out events of the command's own
    /// in-order queue.
    pub wait_entries_without_elision: u64,
}

impl HazardStats {
    /// Wait-list entries per enqueue.
    pub fn per_enqueue(&self) -> f64 {
        self.wait_entries as f64 / self.enqueues.max(1) as f64
    }

    /// Wait-list entries per enqueue without same-queue elision.
    pub fn per_enqueue_without_elision(&self) -> f64 {
        self.wait_entries_without_elision as f64 / self.enqueues.max(1) as f64
    }
}

#[derive(Default)]
pub(crate) struct Stats {
    enqueues: AtomicU64,
    wait_entries: AtomicU64,
    unelided: AtomicU64,
}

impl Stats {
    pub(crate) fn count_enqueue(&self, wait_entries: usize, unelided: usize) {
        self.enqueues.fetch_add(1, Ordering::Relaxed);
        self.wait_entries
            .fetch_add(wait_entries as u64, Ordering::Relaxed);
        self.unelided.fetch_add(unelided as u64, Ordering::Relaxed);
    }

    pub(crate) fn hazards(&self) -> HazardStats {
        HazardStats {
            enqueues: self.enqueues.load(Ordering::Relaxed),
            wait_entries: self.wait_entries.load(Ordering::Relaxed),
            wait_entries_without_elision: self.unelided.load(Ordering::Relaxed),
        }
    }
}
