//! Failures and gates: what the enqueue path must know before it may skip reading event
//! statuses, and which user events of a context are still closed.
//!
//! # Rules
//!
//! - **Failures possible.** Until a command may have failed without the library seeing it,
//!   the enqueue path reads no event status (it costs microseconds on some drivers). The
//!   flag is set once a user event exists (it can be failed through its raw handle), an
//!   event from outside has been adopted, or a failure has been seen; it is never cleared.
//!   From then on the status of every event that would enter a wait list is read, since a
//!   driver never runs a command whose wait list holds a failed event (PoCL leaves it
//!   queued forever).
//! - **Failure epoch.** Every failure seen anywhere moves a process-wide counter, so a
//!   record looks for failed events only after one has happened since it last looked.
//! - **Open gates.** Each context counts its user events not set yet, with where each was
//!   created: a wait behind one lasts until the host sets it, so a buffer's drop does not
//!   wait behind them, and a stalled release names them in the log.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Counts failures seen anywhere (a gate failed, a failed status read), so a record need
/// look for failed events (the tracker's *shadow* rule) only after one has happened.
static FAILURE_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Whether a command may have failed without the library seeing it: set once a user
/// event exists (it can be failed through its raw handle), an event from outside has
/// been adopted, or a failure has been seen. Until then the enqueue path reads no status
/// (it costs microseconds on some drivers); from then on it reads the status of every
/// event it would put in a wait list, since a driver never runs a command whose wait
/// list holds a failed event (PoCL leaves it queued forever).
static FAILURES_POSSIBLE: AtomicBool = AtomicBool::new(false);

/// See [`FAILURES_POSSIBLE`].
pub(crate) fn failures_possible() -> bool {
    FAILURES_POSSIBLE.load(Ordering::Acquire)
}

/// [`failures_possible`], ordered with every `SeqCst` access: the *finished queue* rule
/// (`QueueCore::finish`) reads it after taking its ticket.
pub(crate) fn failures_possible_now() -> bool {
    FAILURES_POSSIBLE.load(Ordering::SeqCst)
}

/// The number of failures seen so far.
pub(crate) fn failure_epoch() -> u64 {
    FAILURE_EPOCH.load(Ordering::Acquire)
}

/// Whether any command has been seen to fail (a gate failed, a failed status read):
/// until then no command can be doomed ([`Event::is_doomed`](crate::Event)).
pub(crate) fn any_failure_seen() -> bool {
    failure_epoch() != 0
}

/// Notes that a command may fail without the library seeing it (an event adopted from
/// outside).
pub(crate) fn note_failure_possible() {
    // SeqCst for the *finished queue* rule (`QueueCore::finish`).
    FAILURES_POSSIBLE.store(true, Ordering::SeqCst);
}

/// Notes that a command failed.
pub(crate) fn note_failure() {
    FAILURES_POSSIBLE.store(true, Ordering::SeqCst);
    FAILURE_EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The user events of one context that have not been set yet, with where each was
/// created: a wait behind one of them lasts until the host sets it, so a buffer's Drop
/// does not wait behind them (the record layer's *drop behind a gate* rule) and a stalled
/// release names them in the log.
#[derive(Default)]
pub(crate) struct OpenGates {
    open: Mutex<Vec<(u64, &'static std::panic::Location<'static>)>>,
    count: AtomicUsize,
    /// Failures seen in the context: a gate failed, or a failed status read.
    failures: AtomicU64,
}

impl OpenGates {
    /// Whether a command of the context has been seen to fail.
    pub(crate) fn failure_seen(&self) -> bool {
        self.failures.load(Ordering::Acquire) != 0
    }

    pub(crate) fn note_failure(&self) {
        self.failures.fetch_add(1, Ordering::AcqRel);
        note_failure();
    }

    /// How many gates of the context are still closed.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Where the closed gates were created.
    pub(crate) fn sites(&self) -> Vec<&'static std::panic::Location<'static>> {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.iter().map(|&(_, site)| site).collect()
    }

    pub(crate) fn opened(&self, id: u64, site: &'static std::panic::Location<'static>) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.push((id, site));
        self.count.store(open.len(), Ordering::Release);
    }

    pub(crate) fn closed(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|&(i, _)| i != id);
        self.count.store(open.len(), Ordering::Release);
    }
}
