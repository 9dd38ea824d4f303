//! One enqueue's view of the commands still pending: within a snapshot, a command the
//! driver reported pending is taken as pending without asking again. The enqueue path
//! asks about one event up to three times (the *failed write* rule, the hazard, the
//! pruning of the record), and each question costs a driver call (0.25 µs on NVIDIA);
//! the answer may change between them anyway, so one answer serves them all. A terminal
//! status is kept for good ([`EventInner::seen`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ranges of snapshot ids handed to threads so far: each thread numbers its snapshots
/// in a range of its own, so that beginning one touches no memory shared between
/// threads (it happens on every enqueue).
static RANGES: AtomicU64 = AtomicU64::new(0);
/// Ids in one range: `range << 40 | n`, `n` from 1. 2^21 ranges keep every id below
/// 2^61, within `EventInner::pending_in` beside the status.
const RANGE: u64 = 1 << 40;

thread_local! {
    /// The snapshot this thread is in (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// The last id this thread gave a snapshot (0: none yet).
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// The snapshot this thread is in, 0 when none.
pub(crate) fn current() -> u64 {
    CURRENT.with(Cell::get)
}

/// A snapshot, for as long as the guard lives. A nested one has its own answers;
/// a terminal status read in it holds in the outer one too.
pub(crate) struct Guard(u64);

/// Begins a new snapshot on this thread.
pub(crate) fn begin() -> Guard {
    let id = LAST.with(|last| {
        let next = last.get() + 1;
        let id = if last.get() == 0 || next % RANGE == 0 {
            // The thread's first snapshot, or its range used up: a new range.
            (RANGES.fetch_add(1, Ordering::Relaxed) % (1 << 21)) * RANGE + 1
        } else {
            next
        };
        last.set(id);
        id
    });
    Guard(CURRENT.with(|c| c.replace(id)))
}

impl Drop for Guard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}
