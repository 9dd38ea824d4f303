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
//! - **No failure mid-enqueue.** A gate the program fails through the library is not failed
//!   while another thread is between reading the statuses of a command's dependencies and
//!   the driver's enqueue ([`Enqueuing`], [`failing`]): a driver that propagates a gate's
//!   failure to its dependents inside `clSetUserEventStatus` (PoCL, Intel's GPU runtime)
//!   then never meets a dependency that failed after the library read it, and never holds
//!   the command behind it for ever (both leave a command enqueued behind an already-failed
//!   event queued for good). The enqueues of a staging block's map and unmap on the
//!   caller's queue take part too, though they wait for nothing: on an in-order queue PoCL
//!   3.1 ties a new command to the one before it, then makes the command's device data,
//!   and a failure that reaches the command in between finishes it with no such data (a
//!   SIGSEGV in `clSetUserEventStatus`, design trap "a command enqueued while the command
//!   before it fails"). A guard is never taken while a lock of the library is held: the
//!   failing thread waits for every guard to go, and a guard's holder waiting on a lock
//!   that an enqueue inside another guard holds would close a circle (a settling marker,
//!   enqueued under its queue's echo lock, is left out for that reason). A gate failed
//!   from inside an enqueue
//!   on the same thread (a raw enqueue's closure) is not waited for. Events that other
//!   code can set never enter the library's wait lists at all (`event::gate`, the *raw
//!   handles* rule).
//! - **Failure in flight.** A driver may still be inside a gate's failure after the
//!   commands behind it read failed: PoCL 3.1 sets a failed command's status, wakes its
//!   waiters, drops its queue's reference to the event and only then locks the event
//!   again, all inside the `clSetUserEventStatus` that failed the gate, so a waiter that
//!   releases the event in between frees an event PoCL still uses (design trap "PoCL's
//!   failed event released mid-propagation", `examples/pocl_failed_release_race.rs`). So
//!   while a gate is being failed through the library ([`failing`]), every event reference
//!   the library gives up is held back ([`release_event`]) until each failure that was
//!   running when it was given up has returned, and released then by the thread that
//!   failed the last of them. A path correct on every driver: it costs one atomic load
//!   per release, and a short list while a gate fails.
//! - **One set at a time.** The library sets its user events, completed or failed, one
//!   at a time in the process ([`one_set_at_a_time`]). PoCL 3.1 finishes a command twice
//!   when two of its dependencies end at once and one of them failed: both threads see it
//!   queued, and both finish it (design trap "PoCL's double finish"; an abort in
//!   `pocl_update_event_finished`, or a SIGSEGV in `pocl_broadcast`). Two gates set from
//!   two threads are such a pair when a command waits on both, or on one and on a
//!   command of its in-order queue behind the other; PoCL propagates a set to every
//!   dependent inside `clSetUserEventStatus`, so sets that do not overlap never meet
//!   there. Not covered: a command ending on the driver's own thread as a gate fails, and
//!   user events set by other code. A set from inside an enqueue of this thread (a raw
//!   enqueue's closure) or from inside another set (a driver callback) is not held back.
//! - **Open gates.** Each context counts its user events not set yet, with where each was
//!   created: a wait behind one lasts until the host sets it, so a buffer's drop does not
//!   wait behind them, and a stalled release names them in the log.

use crate::util::sync::{Guard, Mutex, rank};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::census;
use crate::ffi::{self, cl_event};

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

/// Threads between reading a command's dependencies and its enqueue, and gates being
/// failed (the *no failure mid-enqueue* rule): a handshake on two counters, each side
/// announcing itself before it looks at the other (`SeqCst`), so at most one side goes on.
static ENQUEUING: AtomicUsize = AtomicUsize::new(0);
static FAILING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many [`Enqueuing`] guards this thread holds.
    static ENQUEUING_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Held from reading a command's dependencies to the end of its enqueue: no gate is failed
/// through the library meanwhile (the *no failure mid-enqueue* rule).
pub(crate) struct Enqueuing(());

impl Enqueuing {
    /// Waits while a gate is being failed, then holds back the next one until dropped.
    pub(crate) fn begin() -> Enqueuing {
        if ENQUEUING_HERE.get() == 0 {
            loop {
                ENQUEUING.fetch_add(1, Ordering::SeqCst);
                if FAILING.load(Ordering::SeqCst) == 0 {
                    break;
                }
                ENQUEUING.fetch_sub(1, Ordering::SeqCst);
                // A failing gate is one `clSetUserEventStatus` away from letting us go.
                while FAILING.load(Ordering::SeqCst) != 0 {
                    std::thread::yield_now();
                }
            }
        }
        ENQUEUING_HERE.set(ENQUEUING_HERE.get() + 1);
        Enqueuing(())
    }
}

impl Drop for Enqueuing {
    fn drop(&mut self) {
        let here = ENQUEUING_HERE.get() - 1;
        ENQUEUING_HERE.set(here);
        if here == 0 {
            ENQUEUING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Runs `fail`, which fails a gate, once no other thread is inside an enqueue, and keeps
/// new enqueues from reading statuses until it has returned (the *no failure mid-enqueue*
/// rule). An enqueue of this thread's own (a raw enqueue's closure failing a gate) is not
/// waited for: it could not end first.
///
/// Event releases given up meanwhile wait for it to return (the *failure in flight*
/// rule), and those it was the last to hold back are released here.
pub(crate) fn failing<R>(fail: impl FnOnce() -> R) -> R {
    // Registered before the count: a release that reads the count non-zero finds it.
    let ticket = lock_in_flight().start();
    FAILING.fetch_add(1, Ordering::SeqCst);
    let own = usize::from(ENQUEUING_HERE.get() > 0);
    while ENQUEUING.load(Ordering::SeqCst) > own {
        std::thread::yield_now();
    }
    let result = fail();
    let free = lock_in_flight().end(ticket);
    FAILING.fetch_sub(1, Ordering::SeqCst);
    for held in free {
        release_now(held);
    }
    result
}

/// The *one set at a time* rule: the library's `clSetUserEventStatus` calls.
static SETTING: Mutex<(), rank::GateSets> = Mutex::new(());

thread_local! {
    /// Whether this thread is inside [`one_set_at_a_time`].
    static SETTING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `set`, which sets a user event, while no other thread of the process sets one
/// through the library (the *one set at a time* rule). A set nested in an enqueue of this
/// thread, which a failing gate may be waiting for, or in another set, runs at once.
pub(crate) fn one_set_at_a_time<R>(set: impl FnOnce() -> R) -> R {
    if SETTING_HERE.get() || ENQUEUING_HERE.get() > 0 {
        return set();
    }
    let _one = SETTING.lock();
    /// Clears the mark however `set` ends.
    struct Here;
    impl Drop for Here {
        fn drop(&mut self) {
            SETTING_HERE.set(false);
        }
    }
    SETTING_HERE.set(true);
    let _here = Here;
    set()
}

/// The events the library holds ([`crate::core::echo::RawEvent`]): each reference counted
/// in the census, and given up by [`release_event`] (the *failure in flight* rule).
pub(crate) enum EventKind {}

// SAFETY: a `cl_event` is an OpenCL object handle.
unsafe impl ffi::Kind for EventKind {
    type Raw = cl_event;
    const TARGET: &'static str = "cl_lifetime::event";

    unsafe fn retain(raw: cl_event) -> crate::error::Result<()> {
        // SAFETY: as the caller vouches.
        unsafe { ffi::retain_event(raw) }
    }

    unsafe fn release(raw: cl_event) -> crate::error::Result<()> {
        // SAFETY: as the caller vouches; counted, as `taken` counted it.
        unsafe { release_event(raw, true) };
        Ok(())
    }

    fn taken() {
        census::event_taken();
    }
}

// SAFETY: every OpenCL call on an event may be made by several threads at once (OpenCL 3.0
// appendix A.2).
unsafe impl ffi::Shared for EventKind {}

/// Gives up the library's reference to the event `raw` (one `clReleaseEvent`, logged if
/// refused, and counted in the census if `counted`: taken with `census::event_taken`), or,
/// while a gate is being failed through the library, holds it back until that failure has
/// returned (the *failure in flight* rule).
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here: it does not use `raw`
/// again.
pub(crate) unsafe fn release_event(raw: cl_event, counted: bool) {
    // SAFETY: the caller gives up its reference, to this owner.
    let event = unsafe { ffi::OwnedEvent::from_raw(raw) };
    let held = Held { event, counted };
    // `SeqCst`, after the caller saw the event's command end: a failure that ended it
    // counted itself before it failed anything.
    if FAILING.load(Ordering::SeqCst) == 0 {
        release_now(held);
    } else if let Err(held) = lock_in_flight().hold(held) {
        release_now(held);
    }
}

/// `clReleaseEvent` of a reference given up (by its owner, which logs a refusal).
fn release_now(held: Held) {
    drop(held.event);
    if held.counted {
        census::event_given_up();
    }
}

/// An event reference held back by the *failure in flight* rule.
struct Held {
    event: ffi::OwnedEvent,
    /// Counted in the census.
    counted: bool,
}

/// Gate failures running now, by ticket, and the releases held back behind them.
/// (`H`, what is held back, is a plain value in the unit tests.)
struct InFlight<H = Held> {
    next: u64,
    running: Vec<u64>,
    /// Each with the first ticket not running when it was given up: it waits for every
    /// ticket below that one.
    held: Vec<(u64, H)>,
}

static IN_FLIGHT: Mutex<InFlight, rank::GatesInFlight> = Mutex::new(InFlight {
    next: 0,
    running: Vec::new(),
    held: Vec::new(),
});

fn lock_in_flight() -> Guard<'static, InFlight> {
    IN_FLIGHT.lock()
}

impl<H> InFlight<H> {
    /// A failure begins: its ticket.
    fn start(&mut self) -> u64 {
        let ticket = self.next;
        self.next += 1;
        self.running.push(ticket);
        ticket
    }

    /// Failure `ticket` returned: the releases that no running failure holds back now.
    fn end(&mut self, ticket: u64) -> Vec<H> {
        self.running.retain(|&t| t != ticket);
        let oldest = self.running.iter().copied().min().unwrap_or(self.next);
        let (free, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|&(after, _)| oldest >= after);
        self.held = still;
        free.into_iter().map(|(_, held)| held).collect()
    }

    /// Holds `held` back if a failure is running; gives it back (the caller releases it)
    /// if none is.
    fn hold(&mut self, held: H) -> Result<(), H> {
        if self.running.is_empty() {
            return Err(held);
        }
        self.held.push((self.next, held));
        Ok(())
    }
}

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
    open: Mutex<Vec<(u64, &'static std::panic::Location<'static>)>, rank::Gates>,
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
        let open = self.open.lock();
        open.iter().map(|&(_, site)| site).collect()
    }

    pub(crate) fn opened(&self, id: u64, site: &'static std::panic::Location<'static>) {
        let mut open = self.open.lock();
        open.push((id, site));
        self.count.store(open.len(), Ordering::Release);
    }

    /// A gate of the context was set on this thread, after `kick`: this thread reads the
    /// context's awaited commands until the waiter's poller is awake (the waiter's *read
    /// where set* rule).
    pub(crate) fn read_where_set(&self, kick: Option<u64>) {
        if let Some(kick) = kick {
            super::waiter::waiter().read_where_set(self, kick);
        }
    }

    /// Gate `id` was set (completed or failed): the waiter reads its context's awaited
    /// commands at once, and blocks on those that now end on their own (its *kicked*
    /// rule). The kick, for [`OpenGates::read_where_set`].
    pub(crate) fn closed(&self, id: u64) -> Option<u64> {
        {
            let mut open = self.open.lock();
            open.retain(|&(i, _)| i != id);
            self.count.store(open.len(), Ordering::Release);
        }
        super::waiter::waiter().kick(self)
    }
}

#[cfg(test)]
mod tests {
    use super::InFlight;

    fn held(tag: usize) -> usize {
        tag
    }

    fn tags(free: &[usize]) -> Vec<usize> {
        free.to_vec()
    }

    fn in_flight() -> InFlight<usize> {
        InFlight {
            next: 0,
            running: Vec::new(),
            held: Vec::new(),
        }
    }

    #[test]
    fn a_release_with_no_failure_running_is_not_held() {
        let mut flight = in_flight();
        assert!(flight.hold(held(1)).is_err());
        let a = flight.start();
        assert!(flight.end(a).is_empty());
        assert!(flight.hold(held(2)).is_err());
    }

    #[test]
    fn a_held_release_waits_for_every_failure_running_when_it_was_given_up() {
        let mut flight = in_flight();
        let a = flight.start();
        let b = flight.start();
        assert!(flight.hold(held(1)).is_ok());
        assert!(flight.end(b).is_empty(), "`a` still runs");
        assert_eq!(tags(&flight.end(a)), [1]);
        assert!(flight.held.is_empty());
    }

    #[test]
    fn a_held_release_does_not_wait_for_a_failure_that_began_after_it() {
        let mut flight = in_flight();
        let a = flight.start();
        assert!(flight.hold(held(1)).is_ok());
        let b = flight.start();
        assert!(flight.hold(held(2)).is_ok());
        assert_eq!(
            tags(&flight.end(a)),
            [1],
            "only `b` runs, which began after 1"
        );
        assert_eq!(tags(&flight.end(b)), [2]);
    }
}
