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

/// Device memory a [`Context`](crate::Context) accounts for, in bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in buffers the program holds.
    pub live_bytes: u64,
    /// Bytes released with [`ClBuffer::release_deferred`](crate::ClBuffer::release_deferred)
    /// whose commands have not ended yet.
    pub pending_release_bytes: u64,
    /// Bytes a pool keeps for reuse.
    pub pooled_bytes: u64,
    /// The highest live + pending + pooled total seen.
    pub peak_bytes: u64,
    /// Buffers handed out (created or taken from a pool).
    pub allocations: u64,
    /// Of those, how many reused a pooled block.
    pub reuses: u64,
    /// Of those, how many took over the memory of a deferred release whose commands had
    /// ended, instead of new memory from the driver (see
    /// [`ClBuffer::release_deferred`](crate::ClBuffer::release_deferred)).
    pub reclaimed: u64,
    /// `clCreateBuffer` calls.
    pub driver_allocations: u64,
}

/// The context's ledger: atomics for the counters, and the allocation site of every live
/// buffer for the leak report.
#[derive(Default)]
pub(crate) struct Ledger {
    live: AtomicU64,
    pending: AtomicU64,
    pooled: AtomicU64,
    peak: AtomicU64,
    allocations: AtomicU64,
    reuses: AtomicU64,
    reclaimed: AtomicU64,
    driver_allocations: AtomicU64,
    sites: std::sync::Mutex<
        std::collections::HashMap<u64, (u64, &'static std::panic::Location<'static>)>,
    >,
}

/// Where a buffer handed out came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `clCreateBuffer`.
    Driver,
    /// A pool's block.
    Pool,
    /// A deferred release taken over (the reaper's *reclaim* rule).
    Reclaimed,
}

/// Where bytes move in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bucket {
    Live,
    Pending,
    Pooled,
    /// Gone back to the driver.
    Freed,
}

impl Ledger {
    fn counter(&self, bucket: Bucket) -> Option<&AtomicU64> {
        match bucket {
            Bucket::Live => Some(&self.live),
            Bucket::Pending => Some(&self.pending),
            Bucket::Pooled => Some(&self.pooled),
            Bucket::Freed => None,
        }
    }

    /// Moves `bytes` from one bucket to another (`Freed` as `from` means newly allocated).
    pub(crate) fn shift(&self, bytes: u64, from: Bucket, to: Bucket) {
        if let Some(c) = self.counter(from) {
            c.fetch_sub(bytes, Ordering::Relaxed);
        }
        if let Some(c) = self.counter(to) {
            c.fetch_add(bytes, Ordering::Relaxed);
        }
        if from == Bucket::Freed {
            let total = self.live.load(Ordering::Relaxed)
                + self.pending.load(Ordering::Relaxed)
                + self.pooled.load(Ordering::Relaxed);
            self.peak.fetch_max(total, Ordering::Relaxed);
        }
    }

    /// A buffer handed out, from `source`.
    pub(crate) fn handed_out(
        &self,
        id: u64,
        bytes: u64,
        site: &'static std::panic::Location<'static>,
        source: Source,
    ) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        let counter = match source {
            Source::Driver => &self.driver_allocations,
            Source::Pool => &self.reuses,
            Source::Reclaimed => &self.reclaimed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.sites
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, (bytes, site));
    }

    /// A buffer the program no longer holds.
    pub(crate) fn given_back(&self, id: u64) {
        self.sites
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
    }

    pub(crate) fn memory(&self) -> MemoryStats {
        MemoryStats {
            live_bytes: self.live.load(Ordering::Relaxed),
            pending_release_bytes: self.pending.load(Ordering::Relaxed),
            pooled_bytes: self.pooled.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
            allocations: self.allocations.load(Ordering::Relaxed),
            reuses: self.reuses.load(Ordering::Relaxed),
            reclaimed: self.reclaimed.load(Ordering::Relaxed),
            driver_allocations: self.driver_allocations.load(Ordering::Relaxed),
        }
    }

    /// Live buffers as (bytes, allocation site), largest first.
    pub(crate) fn leaks(&self) -> Vec<(u64, &'static std::panic::Location<'static>)> {
        let mut leaks: Vec<_> = self
            .sites
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .copied()
            .collect();
        leaks.sort_by_key(|l| std::cmp::Reverse(l.0));
        leaks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_move_between_buckets_and_the_peak_counts_all_three() {
        let ledger = Ledger::default();
        ledger.shift(100, Bucket::Freed, Bucket::Live);
        ledger.shift(50, Bucket::Freed, Bucket::Live);
        ledger.shift(100, Bucket::Live, Bucket::Pooled);
        ledger.shift(50, Bucket::Live, Bucket::Pending);
        let m = ledger.memory();
        assert_eq!(
            (
                m.live_bytes,
                m.pooled_bytes,
                m.pending_release_bytes,
                m.peak_bytes
            ),
            (0, 100, 50, 150)
        );
        ledger.shift(100, Bucket::Pooled, Bucket::Live);
        ledger.shift(50, Bucket::Pending, Bucket::Freed);
        ledger.shift(10, Bucket::Freed, Bucket::Live);
        let m = ledger.memory();
        assert_eq!(
            (
                m.live_bytes,
                m.pooled_bytes,
                m.pending_release_bytes,
                m.peak_bytes
            ),
            (110, 0, 0, 150)
        );
    }

    #[test]
    fn the_leak_report_lists_what_was_handed_out_and_not_given_back_largest_first() {
        let ledger = Ledger::default();
        let site = std::panic::Location::caller();
        ledger.handed_out(1, 10, site, Source::Driver);
        ledger.handed_out(2, 30, site, Source::Pool);
        ledger.handed_out(4, 40, site, Source::Reclaimed);
        ledger.handed_out(3, 20, site, Source::Driver);
        ledger.given_back(3);
        let leaks: Vec<u64> = ledger.leaks().iter().map(|l| l.0).collect();
        assert_eq!(leaks, [40, 30, 10]);
        let m = ledger.memory();
        assert_eq!(
            (m.allocations, m.driver_allocations, m.reuses, m.reclaimed),
            (4, 2, 1, 1)
        );
    }

    #[test]
    fn hazard_counts_are_averaged_per_enqueue() {
        let stats = Stats::default();
        assert_eq!(stats.hazards().per_enqueue(), 0.0);
        stats.count_enqueue(2, 3);
        stats.count_enqueue(0, 1);
        let h = stats.hazards();
        assert_eq!(
            (h.enqueues, h.wait_entries, h.wait_entries_without_elision),
            (2, 2, 4)
        );
        assert_eq!(h.per_enqueue(), 1.0);
        assert_eq!(h.per_enqueue_without_elision(), 2.0);
    }
}
