//! Counters a context keeps about its enqueues.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many wait-list entries the hazard rules produced, for a [`Context`](crate::Context).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[0u32; 1024])?;
/// let gate = ctx.user_event()?;
/// queue.after(&[gate.event()]).fill(&buf, 1)?; // waits on the gate
/// queue.fill(&buf, 2)?; // after the first fill, which its in-order queue runs first
/// gate.complete()?;
/// queue.finish()?;
/// let stats = ctx.hazard_stats();
/// assert_eq!((stats.enqueues, stats.wait_entries), (2, 1));
/// assert_eq!(stats.wait_entries_without_elision, 2);
/// assert_eq!(stats.per_enqueue(), 0.5);
/// # Ok(())
/// # }
/// ```
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
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let buf = ctx.buffer::<u8>(1 << 20)?;
/// let stats = ctx.memory_stats();
/// assert_eq!(stats.live_bytes, 1 << 20);
/// assert_eq!((stats.allocations, stats.driver_allocations), (1, 1));
/// buf.release_deferred();
/// ctx.wait_deferred();
/// let stats = ctx.memory_stats();
/// assert_eq!((stats.live_bytes, stats.pending_release_bytes), (0, 0));
/// assert_eq!(stats.peak_bytes, 1 << 20);
/// # Ok(())
/// # }
/// ```
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

impl std::fmt::Display for HazardStats {
    /// `1200 enqueues, 0.40 wait-list entries each (1.10 without same-queue elision)`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} enqueues, {:.2} wait-list entries each ({:.2} without same-queue elision)",
            self.enqueues,
            self.per_enqueue(),
            self.per_enqueue_without_elision()
        )
    }
}

impl std::fmt::Display for MemoryStats {
    /// `live 4.0 MiB, pending release 0 B, pooled 1.0 MiB, peak 6.0 MiB; 12 allocations: 3 from
    /// the driver, 8 reused from pools, 1 reclaimed from deferred releases`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "live {}, pending release {}, pooled {}, peak {}; {} allocations: {} from the driver, \
             {} reused from pools, {} reclaimed from deferred releases",
            Bytes(self.live_bytes),
            Bytes(self.pending_release_bytes),
            Bytes(self.pooled_bytes),
            Bytes(self.peak_bytes),
            self.allocations,
            self.driver_allocations,
            self.reuses,
            self.reclaimed
        )
    }
}

/// A byte count in the largest binary unit that keeps it at 1 or more.
pub(crate) struct Bytes(pub(crate) u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit < UNITS.len() - 1 {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

/// A buffer the program holds: its size and where it was allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBuffer {
    /// Its size in bytes.
    pub bytes: u64,
    /// The call that allocated it, or took it from a pool.
    pub allocated_at: &'static std::panic::Location<'static>,
}

/// The leak report: every buffer the program holds, largest first, with where it was
/// allocated ([`Context::live_buffers`](crate::Context::live_buffers)). The context logs
/// it at `warn` when its last handle is dropped with buffers still alive.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let small = ctx.buffer::<u32>(256)?;
/// let large = ctx.buffer::<u32>(1 << 16)?;
/// let live = ctx.live_buffers();
/// let sizes: Vec<u64> = live.buffers.iter().map(|b| b.bytes).collect();
/// assert_eq!(sizes, [1 << 18, 1 << 10]); // largest first
/// assert_eq!(live.total_bytes(), (1 << 18) + (1 << 10));
/// assert!(live.to_string().starts_with("2 live buffers"));
/// drop((small, large));
/// assert!(ctx.live_buffers().is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveBuffers {
    /// The buffers, largest first.
    pub buffers: Vec<LiveBuffer>,
}

impl LiveBuffers {
    /// Their bytes in all.
    pub fn total_bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.bytes).sum()
    }

    /// Whether the program holds no buffer.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }
}

impl std::fmt::Display for LiveBuffers {
    /// `2 live buffers (6000 bytes):` and a line per buffer, `  4000 bytes allocated at
    /// src/main.rs:12:9`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} live buffers ({} bytes)",
            self.buffers.len(),
            self.total_bytes()
        )?;
        if !self.buffers.is_empty() {
            f.write_str(":")?;
        }
        for b in &self.buffers {
            write!(f, "\n  {} bytes allocated at {}", b.bytes, b.allocated_at)?;
        }
        Ok(())
    }
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
    sites: crate::util::sync::Mutex<
        std::collections::HashMap<u64, (u64, &'static std::panic::Location<'static>)>,
        crate::util::sync::rank::LedgerSites,
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
        if crate::trace::on() {
            let from = match source {
                Source::Driver => "driver",
                Source::Pool => "pool",
                Source::Reclaimed => "a deferred release taken over",
            };
            crate::trace::handed_out(id, site, from);
        }
        let counter = match source {
            Source::Driver => &self.driver_allocations,
            Source::Pool => &self.reuses,
            Source::Reclaimed => &self.reclaimed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.sites.lock().insert(id, (bytes, site));
    }

    /// A buffer the program no longer holds.
    pub(crate) fn given_back(&self, id: u64) {
        self.sites.lock().remove(&id);
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

    /// How many buffers the program holds.
    pub(crate) fn held(&self) -> usize {
        self.sites.lock().len()
    }

    /// The buffers the program holds, largest first.
    pub(crate) fn leaks(&self) -> LiveBuffers {
        let mut buffers: Vec<LiveBuffer> = self
            .sites
            .lock()
            .values()
            .map(|&(bytes, allocated_at)| LiveBuffer {
                bytes,
                allocated_at,
            })
            .collect();
        buffers.sort_by_key(|b| (std::cmp::Reverse(b.bytes), b.allocated_at.to_string()));
        LiveBuffers { buffers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_the_largest_unit_that_keeps_them_at_one_or_more() {
        let shown: Vec<String> = [0, 1023, 1024, 1536, 5 << 20, 3 << 30]
            .into_iter()
            .map(|b| Bytes(b).to_string())
            .collect();
        assert_eq!(
            shown,
            ["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 GiB"]
        );
    }

    #[test]
    fn the_leak_report_names_each_buffer_with_its_site_largest_first() {
        let ledger = Ledger::default();
        let here = std::panic::Location::caller();
        ledger.handed_out(1, 10, here, Source::Driver);
        ledger.handed_out(2, 4000, here, Source::Pool);
        let report = ledger.leaks().to_string();
        let expected = format!(
            "2 live buffers (4010 bytes):\n  4000 bytes allocated at {here}\n  10 bytes allocated at {here}"
        );
        assert_eq!(report, expected);
        ledger.given_back(1);
        ledger.given_back(2);
        assert_eq!(ledger.leaks().to_string(), "0 live buffers (0 bytes)");
    }

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
        let leaks: Vec<u64> = ledger.leaks().buffers.iter().map(|l| l.bytes).collect();
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
