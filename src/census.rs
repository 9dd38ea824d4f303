//! Process-wide counts of what the library holds from the driver: the references to
//! events it owns, the buffers whose memory the driver has not freed yet, and the
//! longest event record any buffer reached. Plain atomics, no OpenCL call: the layers
//! that take and give up those references keep the counts here.
//!
//! They are for leak checks and stress tests: once a program has let go of every buffer,
//! queue and event, [`events_held`] and [`buffers_not_freed`] are both zero, whatever it
//! did before. Each is one relaxed atomic per reference taken or given up.

use std::sync::atomic::{AtomicUsize, Ordering};

static EVENTS: AtomicUsize = AtomicUsize::new(0);
static UNFREED: AtomicUsize = AtomicUsize::new(0);
static LONGEST_RECORD: AtomicUsize = AtomicUsize::new(0);

/// How many references to OpenCL events the library holds right now, across every
/// context: the events of buffers' records, of the wait lists those keep, of failed
/// commands kept until their dependencies end, and of the commands each queue watches.
/// However long a program runs, this stays in proportion to the commands that may still
/// run, not to the commands ever enqueued; a number that only grows is a leak. Zero once
/// the program has let go of every buffer, queue and event the library gave it.
pub fn events_held() -> usize {
    EVENTS.load(Ordering::Relaxed)
}

/// How many buffers the library made or adopted whose memory the driver has not freed
/// yet (their destructor callback has not fired): the buffers alive, plus those released
/// whose memory is still held by the driver (a command still using it, or a reference
/// held outside the library). Zero once every buffer has been released and the driver
/// has freed them all.
pub fn buffers_not_freed() -> usize {
    UNFREED.load(Ordering::Relaxed)
}

/// The most events any one buffer's record has held at once in this process. The
/// tracker's pruning and folding rules keep it small however many commands a buffer
/// sees; a number that grows with the commands enqueued is a leak.
pub fn longest_record() -> usize {
    LONGEST_RECORD.load(Ordering::Relaxed)
}

/// One more event reference held.
pub(crate) fn event_taken() {
    EVENTS.fetch_add(1, Ordering::Relaxed);
}

/// One event reference given up.
pub(crate) fn event_given_up() {
    EVENTS.fetch_sub(1, Ordering::Relaxed);
}

/// A buffer whose destructor callback is registered and has not fired.
pub(crate) fn buffer_watched() {
    UNFREED.fetch_add(1, Ordering::Relaxed);
}

/// A watched buffer's destructor callback fired.
pub(crate) fn buffer_freed() {
    UNFREED.fetch_sub(1, Ordering::Relaxed);
}

/// A record now holds `len` events.
pub(crate) fn record_reached(len: usize) {
    // A plain load first: the maximum rarely moves, so the shared line is rarely written.
    if len > LONGEST_RECORD.load(Ordering::Relaxed) {
        LONGEST_RECORD.fetch_max(len, Ordering::Relaxed);
    }
}
