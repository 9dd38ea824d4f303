//! Events: retained `cl_event`s with RAII release, status queries and waits.
//!
//! An [`Event`] is cheap to clone (it shares one retained `cl_event`); the handle is
//! released when the last clone drops. A [`UserEvent`] is a gate the host opens or fails;
//! one dropped while still closed is failed, so no command waits on it forever.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::census;
use crate::core::context::ContextCore;
use crate::core::echo::RawEvent;
use crate::core::gates::{OpenGates, failures_possible, note_failure, note_failure_possible};
use crate::core::queue::QueueCore;
use crate::error::{Error, Result};
use crate::ffi::{self, cl_context, cl_event, cl_int};
use crate::status::{CommandKind, Status};

pub(crate) struct EventInner {
    raw: cl_event,
    /// The library's queue that produced it, if any: flushed before the event enters
    /// another queue's wait list (design trap "flush before a cross-queue wait").
    pub(crate) queue: Option<Arc<QueueCore>>,
    /// Its context, known when it was made (a queue's, a user event's) or read from the
    /// driver once when adopted, so that `after` can check it without a driver call.
    context: cl_context,
    /// The events in the command's wait list (once a failure is possible), kept until the
    /// command is seen complete (see [`graveyard`]): a failed command must outlive its own
    /// dependencies.
    deps: Mutex<Option<Box<[Event]>>>,
    /// The terminal execution status once read ([`UNKNOWN`] until then): a terminal status
    /// never changes, so it is read from the driver once.
    seen: AtomicI32,
    /// Its number on its queue's echo (0: not numbered), see [`QueueCore::skipped`].
    seq: u64,
    /// The [`snapshot`] in which the driver last reported the command pending, and that
    /// status: `id << 2 | status` (0: none).
    pending_in: AtomicU64,
    /// Its queue's finish count when it was made ([`QueueCore::finish_count`]), for the
    /// *finished queue* rule.
    finish_count: u64,
    /// Whether it was made with a wait list of the library's (once a failure was possible)
    /// or from outside: a command that can fail other than by following a failed command
    /// of its in-order queue.
    may_fail_alone: bool,
    /// Whether it was enqueued by the library while every user event of its context was
    /// set: it ends without the program's help (the waiter's *covered* rule).
    enqueued_ungated: bool,
    /// Who may end it: the library, or code outside it (the *raw handles* rule).
    origin: Origin,
    /// What stands in for it outside or inside the library, once asked for (the *raw
    /// handles* rule): a gate's twin, a foreign event's proxy; `None` where it needs none.
    stand_in: OnceLock<Option<StandIn>>,
    /// The command before it on its in-order queue (the *queue order* rule of the
    /// [`graveyard`]), where its queue keeps it.
    before: OnceLock<RawEvent>,
}

/// Who may end an event (the *raw handles* rule, see [`gate`]).
enum Origin {
    /// A command the library enqueued, or a handle of one it holds.
    Command,
    /// The event of a [`UserEvent`]: only the library sets it.
    Gate(Weak<gate::Gate>),
    /// An event from outside: it may end, or fail, at any moment, out of the library's
    /// sight.
    Foreign,
}

/// See [`EventInner::stand_in`].
enum StandIn {
    /// A gate's public handle: a user event of its own that the program may set.
    Twin(RawEvent),
    /// The library's gate that a foreign event's dependents wait on in its place.
    Proxy(Arc<gate::Gate>),
}

/// [`EventInner::seen`] before a terminal status has been read.
const UNKNOWN: cl_int = i32::MAX;

// SAFETY: OpenCL event handles may be used from any thread; every OpenCL call is
// thread-safe except clSetKernelArg on a shared cl_kernel (OpenCL 3.0 appendix A.2).
unsafe impl Send for EventInner {}
// SAFETY: as above; the other fields are atomics and a Mutex.
unsafe impl Sync for EventInner {}

/// One enqueue's view of the commands still pending: within a snapshot, a command the
/// driver reported pending is taken as pending without asking again. The enqueue path
/// asks about one event up to three times (the *failed write* rule, the hazard, the
/// pruning of the record), and each question costs a driver call (0.25 µs on NVIDIA);
/// the answer may change between them anyway, so one answer serves them all. A terminal
/// status is kept for good ([`EventInner::seen`]).
pub(crate) mod snapshot {
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
}

impl EventInner {
    fn new(
        raw: cl_event,
        context: cl_context,
        queue: Option<Arc<QueueCore>>,
        deps: Option<Box<[Event]>>,
        had_wait_list: bool,
        seq: u64,
        origin: Origin,
    ) -> Self {
        census::event_taken();
        let finish_count = queue.as_ref().map_or(0, |q| q.finish_count());
        let may_fail_alone = had_wait_list || queue.is_none();
        let enqueued_ungated = queue.as_ref().is_some_and(|q| q.ctx.gates.count() == 0);
        EventInner {
            raw,
            context,
            queue,
            deps: Mutex::new(deps),
            seen: AtomicI32::new(UNKNOWN),
            seq,
            pending_in: AtomicU64::new(0),
            finish_count,
            may_fail_alone,
            enqueued_ungated,
            origin,
            stand_in: OnceLock::new(),
            before: OnceLock::new(),
        }
    }
}

impl EventInner {
    /// An event of no queue of the library's (a user event, a handle it holds, one from
    /// outside), with no dependencies.
    fn unqueued(raw: cl_event, context: cl_context, origin: Origin) -> Self {
        EventInner::new(raw, context, None, None, false, 0, origin)
    }

    /// Whether this event, dropped with its dependency list `deps`, must outlive the
    /// drop (the [`graveyard`]'s rules), once a failure is possible: its command has not
    /// ended (it may still fail, and PoCL aborts when a command whose last reference went
    /// fails with a command behind it), or it failed while one of its dependencies, or
    /// the command before it on its in-order queue, may still end and notify it.
    fn must_outlive_drop(&mut self, deps: &[Event]) -> bool {
        if !failures_possible() {
            return false;
        }
        // A status already read (terminal) is not read again from the driver.
        let seen = *self.seen.get_mut();
        let status = if seen == UNKNOWN {
            ffi::execution_status(self.raw)
        } else {
            Ok(seen)
        };
        match status {
            Ok(status) if status > ffi::CL_COMPLETE => true,
            Ok(status) if status < 0 => {
                deps.iter().any(|d| !d.has_ended())
                    || self.before.get().is_some_and(|b| !b.has_ended())
            }
            _ => false,
        }
    }
}

impl Drop for EventInner {
    fn drop(&mut self) {
        let deps = self
            .deps
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default();
        if self.must_outlive_drop(&deps) {
            graveyard::bury(self.raw, deps, self.before.take());
            return;
        }
        drop_iteratively(deps);
        release_raw(self.raw);
        // After its own: the command before it is let go of once it no longer needs it.
        drop(self.before.take());
    }
}

/// Releases one reference to `raw`, logging a failure (held back while a gate fails: the
/// gates' *failure in flight* rule).
fn release_raw(raw: cl_event) {
    // SAFETY: the caller owns one reference to `raw` (taken in `from_raw`,
    // `from_enqueue` or `UserEvent::new`) and gives it up here, exactly once.
    unsafe { crate::core::gates::release_event(raw, true) }
}

/// Drops a list of events without recursing through their own dependency lists, which
/// can form long chains (each command waiting on the one before).
fn drop_iteratively(deps: Box<[Event]>) {
    let mut stack: Vec<Event> = deps.into_vec();
    while let Some(event) = stack.pop() {
        if let Some(mut inner) = Arc::into_inner(event.inner) {
            if let Some(more) = inner
                .deps
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                // Put back, so that `inner`'s own drop buries it with them.
                if inner.must_outlive_drop(&more) {
                    *inner.deps.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(more);
                } else {
                    stack.extend(more.into_vec());
                }
            }
            drop(inner);
        }
    }
}

/// Events dropped while their command may still fail or be notified.
///
/// Two PoCL faults, once a failure is possible:
/// - **Pending.** If the last reference to a command's event goes while the command is
///   pending, and the command then fails (its gate failed, or a command before it on its
///   in-order queue did) with another command behind it, PoCL 3.1 aborts in
///   `pocl_update_event_failed` (`PTHREAD ERROR ... Invalid argument`; design trap
///   "PoCL's failed pending event", `examples/pocl_failed_pending_event.rs`).
/// - **Failed.** PoCL walks an event's notify list when a dependency of it ends: if the
///   last reference to a failed event goes while another of its dependencies is still
///   pending, PoCL reads freed memory and aborts (design trap "PoCL's failed-event notify
///   list").
///
/// - **Queue order.** PoCL ties every command of an in-order queue to the command
///   before it, which the wait list does not name: a failed command is on that one's
///   notify list until it ends, and if the last reference to the failed one goes first,
///   PoCL 3.1 locks the freed event and aborts (`pocl_lock_events_inorder` or
///   `pocl_update_event_failed`: `PTHREAD ERROR ... Invalid argument`; design trap
///   "PoCL's failed command behind a pending one",
///   `examples/pocl_failed_behind_pending.rs`). So on an in-order queue (of a driver whose
///   events do not keep buffers), once a failure is possible, each command's event keeps
///   the one before it on its queue (handed over by the queue's echo), and a failed one
///   is kept until that one has ended too.
///
/// So an event dropped in either state is kept here, unreleased, with its dependencies
/// and the command before it, and released by a later [`sweep`](graveyard::sweep) once
/// it and they have all ended.
/// Nothing else is kept: an event whose command completed, or failed after its
/// dependencies ended, is released when its last handle goes.
pub(crate) mod graveyard {
    use super::*;

    struct Grave {
        raw: cl_event,
        deps: Box<[Event]>,
        before: Option<RawEvent>,
    }

    // SAFETY: as for `EventInner`: the handle may be used from any thread.
    unsafe impl Send for Grave {}

    static GRAVES: Mutex<Vec<Grave>> = Mutex::new(Vec::new());
    /// How many graves there are, read without the lock.
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    /// Sweep when the graveyard has grown to this many (doubling, like a record's prune).
    static SWEEP_AT: AtomicUsize = AtomicUsize::new(16);

    pub(super) fn bury(raw: cl_event, deps: Box<[Event]>, before: Option<RawEvent>) {
        let count = {
            let mut graves = GRAVES.lock().unwrap_or_else(PoisonError::into_inner);
            graves.push(Grave { raw, deps, before });
            COUNT.store(graves.len(), Ordering::Release);
            graves.len()
        };
        log::debug!(target: "cl_lifetime::event", "an event waits for its command and dependencies to end ({count} waiting)");
        if count >= SWEEP_AT.load(Ordering::Acquire) {
            let left = sweep();
            SWEEP_AT.store((left * 2).max(16), Ordering::Release);
        }
    }

    /// Releases every kept event whose dependencies have all ended; returns how many are
    /// left. Cheap when there are none.
    pub(crate) fn sweep() -> usize {
        if COUNT.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let (ready, left) = {
            let Ok(mut graves) = GRAVES.try_lock() else {
                return COUNT.load(Ordering::Acquire);
            };
            let (ready, waiting): (Vec<Grave>, Vec<Grave>) =
                std::mem::take(&mut *graves).into_iter().partition(|g| {
                    ffi::has_ended(g.raw)
                        && g.deps.iter().all(Event::has_ended)
                        && g.before.as_ref().is_none_or(RawEvent::has_ended)
                });
            *graves = waiting;
            COUNT.store(graves.len(), Ordering::Release);
            (ready, graves.len())
        };
        // Outside the lock: dropping dependencies can bury more.
        for grave in ready {
            drop_iteratively(grave.deps);
            release_raw(grave.raw);
            drop(grave.before);
        }
        left
    }
}

/// A retained OpenCL event.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{CommandKind, Event, Status};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(1024)?;
/// let fill: Event = queue.fill(&buf, 3)?;
/// assert_eq!(fill.command_kind()?, CommandKind::Fill);
/// fill.wait()?;
/// assert_eq!(fill.status()?, Status::Complete);
/// assert!(fill.is_terminal());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Event {
    pub(crate) inner: Arc<EventInner>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Event").field(&self.inner.raw).finish()
    }
}

impl Event {
    /// Whether the command can fail other than by following a failed command of its
    /// in-order queue: it had a wait list once a failure was possible, or came from
    /// outside the library.
    pub(crate) fn may_fail_alone(&self) -> bool {
        self.inner.may_fail_alone
    }

    /// Its number on its queue's echo (0: numbered before any failure was possible, or of
    /// no queue of the library's).
    pub(crate) fn seq(&self) -> u64 {
        self.inner.seq
    }

    /// Whether the event belongs to `ctx`.
    pub(crate) fn in_context(&self, ctx: &ContextCore) -> bool {
        self.inner.context == ctx.raw
    }

    /// [`Error::ContextMismatch`] for this event, used with the context `used_with`.
    pub(crate) fn context_mismatch(&self, used_with: crate::ffi::cl_context) -> Error {
        let object = match self.command_kind() {
            Ok(kind) => format!("event {:p} of a {kind:?} command", self.inner.raw),
            Err(_) => format!("event {:p}", self.inner.raw),
        };
        Error::context_mismatch(object, Some(self.inner.context), used_with)
    }

    /// The event of a command the library enqueued on `queue` after the events `deps`,
    /// numbered `seq` by the queue's echo ([`QueueCore::enqueue_tracked`]).
    pub(crate) fn from_enqueue(
        raw: cl_event,
        queue: &Arc<QueueCore>,
        deps: Option<Box<[Event]>>,
        seq: u64,
    ) -> Event {
        let had_wait_list = deps.is_some();
        Event::from_enqueue_with(raw, queue, deps, had_wait_list, seq)
    }

    /// [`Event::from_enqueue`] for a command whose `deps` may hold events that were not
    /// in its wait list (its queue's order ran them first): `had_wait_list` says whether
    /// it had one, so whether it can fail other than by following its queue.
    pub(crate) fn from_enqueue_with(
        raw: cl_event,
        queue: &Arc<QueueCore>,
        deps: Option<Box<[Event]>>,
        had_wait_list: bool,
        seq: u64,
    ) -> Event {
        Event {
            inner: Arc::new(EventInner::new(
                raw,
                queue.ctx.raw,
                Some(queue.clone()),
                deps,
                had_wait_list,
                seq,
                Origin::Command,
            )),
        }
    }

    /// Keeps `before`, the command before this one on its in-order queue (the
    /// [`graveyard`]'s *queue order* rule), if given.
    pub(crate) fn follows(&self, before: Option<RawEvent>) {
        if let Some(before) = before {
            let _ = self.inner.before.set(before);
        }
    }

    /// An event for the raw handle `raw`, made by other code (an enqueue through opencl3,
    /// a C library's command): the library takes its own reference, and the caller keeps
    /// theirs. It may be given to [`Queue::after`](crate::Queue::after) like any other:
    /// while it has not ended, the library's commands wait on a gate of the library's
    /// that its waiter sets as this event ends, with its status (other code may fail it
    /// at any moment, and a driver must never be handed an already-failed dependency:
    /// design trap "a dependency that fails during the enqueue").
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_event`.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the driver refuses the reference (`clRetainEvent`).
    pub unsafe fn from_raw(raw: cl_event) -> Result<Event> {
        // SAFETY: as the caller vouches; the reference taken here is the `Event`'s.
        unsafe { ffi::retain_event(raw) }?;
        // SAFETY: one reference is now the library's.
        Ok(unsafe { Event::from_raw_owned(raw) })
    }

    /// An event that takes over the caller's reference to `raw` (the one a `clEnqueue*`
    /// call returned, say), released when the last clone of the `Event` drops.
    ///
    /// # Safety
    ///
    /// - `raw` is a valid `cl_event`;
    /// - the caller gives up one reference to it (from a `clEnqueue*` call,
    ///   `clCreateUserEvent` or `clRetainEvent`), which the `Event` will release, and
    ///   does not use `raw` after the `Event` is gone.
    pub unsafe fn from_raw_owned(raw: cl_event) -> Event {
        let context = ffi::event_context(raw);
        // SAFETY: as the caller vouches.
        unsafe { Event::adopt(raw, context) }
    }

    /// One more reference to `raw`, an event of `context` that the library already holds,
    /// as an `Event` of its own; `None` when the driver refuses the reference.
    ///
    /// # Safety
    ///
    /// `raw` is a valid event of `context`.
    pub(crate) unsafe fn retained(raw: cl_event, context: cl_context) -> Option<Event> {
        // SAFETY: as the caller vouches; the reference taken here is the `Event`'s.
        unsafe { ffi::retain_event(raw) }.ok()?;
        Some(Event {
            inner: Arc::new(EventInner::unqueued(raw, context, Origin::Command)),
        })
    }

    /// [`Event::from_raw_owned`] for an event of `context`.
    ///
    /// # Safety
    ///
    /// As [`Event::from_raw_owned`], and `raw` belongs to `context`.
    unsafe fn adopt(raw: cl_event, context: cl_context) -> Event {
        // An event from outside may fail without the library seeing it.
        note_failure_possible();
        if crate::trace::on() {
            crate::trace::not_a_command(raw);
        }
        Event {
            inner: Arc::new(EventInner::unqueued(raw, context, Origin::Foreign)),
        }
    }

    /// The driver's handle, for the library's own calls (wait lists, status reads).
    pub(crate) fn raw(&self) -> cl_event {
        self.inner.raw
    }

    /// The raw handle, still owned by this `Event`, for other code to wait on.
    ///
    /// For the event of a [`UserEvent`] it is the handle of a user event of its own, its
    /// *twin*, made at the first call: other code may wait on it, and may set it with
    /// `clSetUserEventStatus`; the library then sets the gate as
    /// [`complete`](UserEvent::complete) or [`fail`](UserEvent::fail) would, once its
    /// waiter sees the twin set (within its poll pause, up to 250 ms when the process is
    /// quiet). The commands of the library never wait on the twin itself, so a gate
    /// failed through it never meets an enqueue in between (design trap "a gate failed
    /// through its raw handle"). `complete` and `fail` set the twin too.
    pub fn as_raw(&self) -> cl_event {
        let inner = &self.inner;
        let Origin::Gate(gate) = &inner.origin else {
            return inner.raw;
        };
        if let Some(stand_in) = inner.stand_in.get() {
            return stand_in.as_ref().map_or(inner.raw, StandIn::raw);
        }
        match gate.upgrade() {
            Some(gate) => gate.public_handle(),
            // Set when its `UserEvent` went: a raw set of it is refused by the driver.
            None => inner
                .stand_in
                .get()
                .and_then(Option::as_ref)
                .map_or(inner.raw, StandIn::raw),
        }
    }

    /// The event a command of the library puts in its wait list for this dependency: a
    /// foreign event that has not ended is stood in for by a gate of the library that
    /// follows it (the *raw handles* rule); `None` means this event itself.
    pub(crate) fn wait_stand_in(&self, gates: &Arc<OpenGates>) -> Option<Event> {
        let inner = &self.inner;
        if !matches!(inner.origin, Origin::Foreign) {
            return None;
        }
        let stand_in = inner.stand_in.get_or_init(|| {
            if ffi::has_ended(inner.raw) {
                // Ended for good: a wait on it can no longer meet its failure.
                return None;
            }
            match gate::Gate::following(inner.raw, inner.context, gates) {
                Ok(proxy) => Some(StandIn::Proxy(proxy)),
                Err(e) => {
                    log::warn!(target: "cl_lifetime::event", "no gate could stand in for the foreign event {:p} ({e}); commands wait on it directly", inner.raw);
                    None
                }
            }
        });
        match stand_in {
            Some(StandIn::Proxy(proxy)) => Some(proxy.event.clone()),
            _ => None,
        }
    }

    /// When the command was queued, submitted, started and ended, from a queue made with
    /// [`QueueOptions::profiling`](crate::QueueOptions::profiling).
    ///
    /// # Errors
    ///
    /// [`Error::CommandFailed`] when the command failed (it has no times: some drivers
    /// answer with times never written); [`Error::Cl`] with
    /// `CL_PROFILING_INFO_NOT_AVAILABLE` when the queue does not profile, the command has
    /// not ended, it is a user event, or the driver's times are out of order.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::QueueOptions;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue_with(QueueOptions::default().profiling(true))?;
    /// let buf = ctx.buffer::<u32>(1 << 16)?;
    /// let fill = queue.fill(&buf, 1)?;
    /// fill.wait()?;
    /// let profile = fill.profile()?;
    /// assert!(profile.started <= profile.ended);
    /// assert!(ctx.queue()?.fill(&buf, 2)?.profile().is_err()); // not a profiling queue
    /// # Ok(())
    /// # }
    /// ```
    pub fn profile(&self) -> Result<Profile> {
        let not_available = || {
            Err(Error::cl(
                "clGetEventProfilingInfo",
                ffi::codes::CL_PROFILING_INFO_NOT_AVAILABLE,
            ))
        };
        // Asked of the library's own queue first: some drivers (rusticl) answer for a queue
        // that does not profile, with made-up times.
        if self.inner.queue.as_ref().is_some_and(|q| !q.profiling) {
            return not_available();
        }
        // Only for a command the library knows completed: drivers answer for failed or
        // skipped commands with times never written (Intel's CPU runtime: a start of 0).
        match self.status()? {
            Status::Complete => {}
            Status::Failed(status) => return Err(Error::CommandFailed { status }),
            _ => return not_available(),
        }
        let [queued, submitted, started, ended] = ffi::profiling_times(self.inner.raw)?;
        if started == 0 || !(queued <= submitted && submitted <= started && started <= ended) {
            return not_available();
        }
        Ok(Profile {
            queued,
            submitted,
            started,
            ended,
        })
    }

    /// Whether the command has completed or failed. An event whose status cannot be read
    /// counts as terminal: nothing can wait on it anyway.
    pub fn is_terminal(&self) -> bool {
        self.status().map_or(true, Status::is_terminal)
    }

    /// The status as the tracker sees it; an unreadable status counts as failed.
    pub(crate) fn state(&self) -> crate::tracker::State {
        self.status()
            .map_or(crate::tracker::State::Failed, Status::state)
    }

    /// The kind of command this event belongs to.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the type cannot be queried.
    pub fn command_kind(&self) -> Result<CommandKind> {
        Ok(CommandKind::from_raw(ffi::command_type(self.inner.raw)?))
    }

    /// Blocks until the command completes or fails.
    ///
    /// # Errors
    ///
    /// [`Error::CommandFailed`] when it ended with an error status.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1024)?;
    /// let fill = queue.fill(&buf, 6)?;
    /// fill.wait()?; // the fill has ended, successfully
    /// assert!(fill.is_terminal());
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![6; 1024]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(&self) -> Result<()> {
        ffi::wait_terminal(&[self.inner.raw]);
        self.outcome()
    }

    /// What [`Event::wait`] returns, for a command that has ended.
    pub(crate) fn outcome(&self) -> Result<()> {
        match self.status()? {
            Status::Failed(status) => Err(Error::CommandFailed { status }),
            _ => Ok(()),
        }
    }

    /// Its context's handle.
    pub(crate) fn context_raw(&self) -> cl_context {
        self.inner.context
    }

    /// Whether the library enqueued it while every user event of its context was set.
    pub(crate) fn enqueued_ungated(&self) -> bool {
        self.inner.enqueued_ungated
    }

    /// Flushes the library queue this event came from, if it has unflushed work, so that
    /// another queue can wait on it (design trap "flush before a cross-queue wait").
    pub(crate) fn flush_producer(&self) -> Result<()> {
        match &self.inner.queue {
            Some(queue) => queue.flush_if_dirty(),
            None => Ok(()),
        }
    }

    pub(crate) fn same_queue(&self, queue: &QueueCore) -> bool {
        self.inner
            .queue
            .as_ref()
            .is_some_and(|q| std::ptr::eq(Arc::as_ptr(q), queue))
    }
}

/// Reading a command's status: once from the driver when it is terminal, and, once a
/// failure is possible, resolved against the command's queue and wait list (a driver's
/// "complete" is not taken on trust after a failure).
impl Event {
    /// The command's execution status.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the status cannot be queried.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Status;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1024)?;
    /// let fill = queue.fill(&buf, 1)?;
    /// fill.wait()?;
    /// assert_eq!(fill.status()?, Status::Complete);
    /// # Ok(())
    /// # }
    /// ```
    pub fn status(&self) -> Result<Status> {
        let seen = self.inner.seen.load(Ordering::Acquire);
        if seen != UNKNOWN {
            if seen < 0 {
                self.let_go_of_ended_deps();
            }
            return Ok(Status::from_raw(seen));
        }
        let snapshot = snapshot::current();
        if snapshot != 0 {
            let pending = self.inner.pending_in.load(Ordering::Relaxed);
            if pending >> 2 == snapshot {
                return Ok(Status::from_raw((pending & 3) as cl_int));
            }
        }
        if self.finished_by_its_queue() {
            return Ok(Status::from_raw(self.finish(ffi::CL_COMPLETE)));
        }
        let raw =
            ffi::execution_status(self.inner.raw).map_err(|s| Error::cl("clGetEventInfo", s))?;
        let raw = match raw {
            ffi::CL_COMPLETE if failures_possible() => self.resolve_complete(),
            terminal if terminal <= ffi::CL_COMPLETE => self.finish(terminal),
            running => self.note_pending(snapshot, running),
        };
        Ok(Status::from_raw(raw))
    }

    /// The *finished queue* rule: a command that a successful [`Queue::finish`] waited
    /// for, while no failure was possible, has completed; no driver call is needed to
    /// know it (after 10^5 commands, PoCL's first status read of one costs 1.4-2.5 µs).
    ///
    /// [`Queue::finish`]: crate::Queue::finish
    fn finished_by_its_queue(&self) -> bool {
        self.inner
            .queue
            .as_ref()
            .is_some_and(|q| q.finished(self.inner.finish_count))
    }

    /// Keeps a pending status for the rest of the enqueue that read it (`snapshot`).
    fn note_pending(&self, snapshot: u64, running: cl_int) -> cl_int {
        if snapshot != 0 && (0..=3).contains(&running) {
            let pending = snapshot << 2 | running as u64;
            self.inner.pending_in.store(pending, Ordering::Relaxed);
        }
        running
    }

    /// The status of this command, which the driver reports complete, once a failure is
    /// possible. It failed when its queue's driver may have skipped it after another
    /// command failed (design trap "a failure echoes on its queue"), or when a command of
    /// its wait list failed: NVIDIA reports some such commands complete without having
    /// run them, and runs others on what a skipped command left. The commands of the wait
    /// list that the driver reports complete are resolved the same way first, without
    /// recursion, so a chain that ran after a skipped command fails as a whole.
    fn resolve_complete(&self) -> cl_int {
        // Most commands resolve in one step, with no allocation; a chain of commands the
        // driver reports complete and no one has asked about is walked with a stack.
        let Some(deps) = self.resolve_step() else {
            return self.inner.seen.load(Ordering::Acquire);
        };
        // Usually each of those resolves in one step itself, and so does this one then.
        if deps.iter().all(|dep| dep.resolve_step().is_none()) {
            let failed = self.failed_dependency();
            return self.finish(failed.unwrap_or(ffi::CL_COMPLETE));
        }
        let mut stack: Vec<(Event, Vec<Event>)> = vec![(self.clone(), deps)];
        while let Some((_, deps)) = stack.last_mut() {
            match deps.pop() {
                Some(dep) => {
                    if let Some(its_deps) = dep.resolve_step() {
                        stack.push((dep, its_deps));
                    }
                }
                None => {
                    if let Some((event, _)) = stack.pop() {
                        // Every dependency the driver reported complete is resolved now.
                        let failed = event.failed_dependency();
                        event.finish(failed.unwrap_or(ffi::CL_COMPLETE));
                    }
                }
            }
        }
        self.inner.seen.load(Ordering::Acquire)
    }

    /// One step of [`Event::resolve_complete`] for a command the driver reports complete
    /// (or already resolved): finishes it when its queue may have skipped it, when a
    /// dependency failed, or when every dependency is resolved, reading each dependency's
    /// status once; otherwise returns the dependencies to resolve first.
    fn resolve_step(&self) -> Option<Vec<Event>> {
        if self.inner.seen.load(Ordering::Acquire) != UNKNOWN {
            return None;
        }
        if self
            .inner
            .queue
            .as_ref()
            .is_some_and(|queue| queue.skipped(self.inner.seq))
        {
            self.finish(ffi::codes::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
            return None;
        }
        let mut unresolved = Vec::new();
        let mut failed = None;
        {
            let deps = self
                .inner
                .deps
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for dep in deps.as_deref().unwrap_or_default() {
                let unknown = dep.inner.seen.load(Ordering::Acquire) == UNKNOWN;
                match dep.raw_status_now() {
                    status if status < 0 => {
                        failed = Some(status);
                        break;
                    }
                    ffi::CL_COMPLETE if unknown => unresolved.push(dep.clone()),
                    _ => {}
                }
            }
        }
        if failed.is_some() || unresolved.is_empty() {
            self.finish(failed.unwrap_or(ffi::CL_COMPLETE));
            None
        } else {
            Some(unresolved)
        }
    }

    /// Records the terminal status `raw`, unless one was recorded first (which is
    /// returned instead), and lets go of the dependencies that are no longer needed.
    fn finish(&self, raw: cl_int) -> cl_int {
        if let Err(seen) =
            self.inner
                .seen
                .compare_exchange(UNKNOWN, raw, Ordering::AcqRel, Ordering::Acquire)
        {
            return seen;
        }
        if crate::trace::on() {
            crate::trace::seen_ended(self.inner.raw, raw);
        }
        if raw == ffi::CL_COMPLETE {
            // Complete, so every dependency completed before it: none is needed now,
            // and letting them go breaks chains of commands that waited on each other.
            let deps = self
                .inner
                .deps
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(deps) = deps {
                drop_iteratively(deps);
            }
        } else {
            match &self.inner.queue {
                Some(queue) => queue.ctx.gates.note_failure(),
                None => note_failure(),
            }
            self.let_go_of_ended_deps();
        }
        raw
    }

    /// The terminal status if known, else the driver's status, without looking at
    /// dependencies (no recursion through chains of commands).
    fn raw_status_now(&self) -> cl_int {
        let seen = self.inner.seen.load(Ordering::Acquire);
        if seen != UNKNOWN {
            return seen;
        }
        ffi::execution_status(self.inner.raw).unwrap_or(-1)
    }

    /// Whether the command has ended (completed or failed), asked without recursion.
    pub(crate) fn has_ended(&self) -> bool {
        self.raw_status_now() <= ffi::CL_COMPLETE
    }

    /// A failed command keeps its dependencies only while one of them may still end
    /// (and notify it); once all have ended they go, so that commands that failed one
    /// after another do not keep each other in a chain.
    fn let_go_of_ended_deps(&self) {
        let mut deps = self
            .inner
            .deps
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if deps
            .as_deref()
            .is_some_and(|d| d.iter().all(Event::has_ended))
        {
            let ended = deps.take();
            drop(deps);
            if let Some(ended) = ended {
                drop_iteratively(ended);
            }
        }
    }

    /// Whether the command has not ended although one of its dependencies failed: a
    /// driver may still fail it, or run it (NVIDIA), and a command that waits on it may
    /// fail with it.
    pub(crate) fn is_doomed(&self) -> bool {
        !self.has_ended() && self.failed_dependency().is_some()
    }

    /// The status of a failed event of this command's wait list, if one failed.
    fn failed_dependency(&self) -> Option<cl_int> {
        let deps = self
            .inner
            .deps
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        deps.as_deref()?
            .iter()
            .map(Event::raw_status_now)
            .find(|&status| status < 0)
    }
}

/// When a command was queued, submitted, started and ended: `CL_PROFILING_COMMAND_*`, in
/// nanoseconds of the device's clock (comparable between commands of one device).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Profile, QueueOptions};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue_with(QueueOptions::default().profiling(true))?;
/// let buf = ctx.buffer::<u32>(1 << 16)?;
/// let fill = queue.fill(&buf, 1)?;
/// fill.wait()?;
/// let profile: Profile = fill.profile()?;
/// assert!(profile.queued <= profile.started && profile.started <= profile.ended);
/// assert_eq!(profile.duration().as_nanos(), u128::from(profile.ended - profile.started));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// When the host enqueued it.
    pub queued: u64,
    /// When the host handed it to the device.
    pub submitted: u64,
    /// When the device started running it.
    pub started: u64,
    /// When the device finished it.
    pub ended: u64,
}

impl Profile {
    /// How long it ran on the device (end - start).
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.ended.saturating_sub(self.started))
    }

    /// How long it waited between being enqueued and starting (start - queued): its wait
    /// list, the queue's order and the device's load.
    pub fn waited(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.started.saturating_sub(self.queued))
    }
}

/// A gate the host opens ([`UserEvent::complete`]) or fails ([`UserEvent::fail`]).
/// Commands given it as a dependency wait until then. Dropping a gate that is still
/// closed fails it with `CL_INVALID_OPERATION`, so nothing waits on it forever.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(256)?;
/// let gate = ctx.user_event()?;
/// let fill = queue.after(&[gate.event()]).fill(&buf, 5)?;
/// queue.flush()?;
/// assert!(!fill.is_terminal()); // held until the gate opens
/// gate.complete()?;
/// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![5; 256]);
/// assert!(gate.complete().is_err()); // a gate is set once
/// # Ok(())
/// # }
/// ```
pub struct UserEvent {
    gate: Arc<gate::Gate>,
}

impl fmt::Debug for UserEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserEvent")
            .field("event", &self.gate.event)
            .field("set", &self.gate.is_set())
            .finish()
    }
}

impl UserEvent {
    pub(crate) fn new(
        context: cl_context,
        gates: &Arc<OpenGates>,
        id: u64,
        site: &'static std::panic::Location<'static>,
    ) -> Result<UserEvent> {
        Ok(UserEvent {
            gate: gate::Gate::new(context, gates, id, site)?,
        })
    }

    /// The event to pass as a dependency.
    pub fn event(&self) -> &Event {
        &self.gate.event
    }

    /// Opens the gate: commands waiting on it may run.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_OPERATION` when the gate was already set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(8)?;
    /// let gate = ctx.user_event()?;
    /// let write = queue.after(&[gate.event()]).write_owned(&buf, vec![4; 8])?;
    /// gate.complete()?; // the write may run now
    /// write.wait()?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [4; 8]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn complete(&self) -> Result<()> {
        self.gate.set_status(ffi::CL_COMPLETE)
    }

    /// Fails the gate with `status`, which must be negative; commands waiting on it
    /// terminate with an error.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_VALUE` for a status that is not negative, or
    /// `CL_INVALID_OPERATION` when the gate was already set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Error, Status};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(8)?;
    /// let gate = ctx.user_event()?;
    /// let fill = queue.after(&[gate.event()]).fill(&buf, 1)?;
    /// gate.fail(-1)?; // the fill never runs
    /// assert!(matches!(fill.wait(), Err(Error::CommandFailed { .. })));
    /// assert!(matches!(fill.status()?, Status::Failed(_)));
    /// assert!(gate.fail(0).is_err()); // a status that is not negative is refused
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail(&self, status: cl_int) -> Result<()> {
        if status >= 0 {
            return Err(Error::cl(
                "clSetUserEventStatus",
                ffi::codes::CL_INVALID_VALUE,
            ));
        }
        self.gate.set_status(status)
    }
}

impl std::ops::Deref for UserEvent {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.gate.event
    }
}

impl Drop for UserEvent {
    fn drop(&mut self) {
        // Set through its twin, and not seen yet: as it was set.
        self.gate.follow_twin_now();
        if !self.gate.is_set() {
            log::warn!(
                target: "cl_lifetime::event",
                "the user event {:p} created at {} was dropped while not set; failing it (the \
                 commands behind it fail)",
                self.gate.shown(),
                self.gate.site
            );
            if let Err(e) = self.gate.set_status(ffi::codes::CL_INVALID_OPERATION) {
                log::error!(target: "cl_lifetime::event", "failing a dropped user event: {e}");
            }
        }
    }
}

/// Gates: user events that only the library sets.
///
/// # Rules
///
/// - **Raw handles.** A driver that never runs a command whose wait list holds a failed
///   event (PoCL leaves it queued for good, and its in-order queue with it) must never
///   be handed such a list, yet the library reads its dependencies' statuses before the
///   enqueue; the gates' *no failure mid-enqueue* rule closes that window for a gate
///   failed through the library, not for an event that other code sets. So no command
///   of the library ever waits on an event that other code can set or fail:
///   - a gate's public handle ([`Event::as_raw`] of a [`UserEvent`]'s event) is its
///     *twin*, a user event of its own made on demand; other code may wait on it or set
///     it, and the waiter, seeing it set, sets the gate itself through the library
///     ([`Gate::set_status`]); setting the gate sets the twin too;
///   - a foreign event (adopted with [`Event::from_raw`]) that has not ended is stood in
///     for, in the wait lists of the library's commands, by a *proxy* gate that the
///     waiter sets as the foreign event ends, with its status.
///
///   A twin or a proxy is followed from the waiter's poller (and, for a foreign command,
///   from a blocker where waits sleep): a raw set is seen within a poll pause.
pub(crate) mod gate {
    use super::*;
    use crate::core::waiter::{Order, Watch, waiter};

    /// A user event that only the library sets.
    pub(crate) struct Gate {
        pub(crate) event: Event,
        set: AtomicBool,
        id: u64,
        gates: Arc<OpenGates>,
        /// Where it was created, for the log.
        pub(crate) site: &'static std::panic::Location<'static>,
        /// Held while the twin is made, and while a set gate sets its twin: a twin made
        /// while the gate is set is set by it.
        twin: Mutex<()>,
    }

    impl Gate {
        /// A new gate of `context`, counted among its open `gates` as `id`.
        pub(crate) fn new(
            context: cl_context,
            gates: &Arc<OpenGates>,
            id: u64,
            site: &'static std::panic::Location<'static>,
        ) -> Result<Arc<Gate>> {
            let raw = ffi::create_user_event(context)?;
            // A user event exists: it can be failed without the library.
            note_failure_possible();
            if crate::trace::on() {
                crate::trace::not_a_command(raw);
            }
            gates.opened(id, site);
            Ok(Arc::new_cyclic(|weak| Gate {
                // `raw` was just created in `context`; its one reference is the event's.
                event: Event {
                    inner: Arc::new(EventInner::unqueued(
                        raw,
                        context,
                        Origin::Gate(weak.clone()),
                    )),
                },
                set: AtomicBool::new(false),
                id,
                gates: gates.clone(),
                site,
                twin: Mutex::new(()),
            }))
        }

        /// A gate of `context` that follows the foreign event `source`: set, with its
        /// status, once it has ended (the *raw handles* rule).
        pub(crate) fn following(
            source: cl_event,
            context: cl_context,
            gates: &Arc<OpenGates>,
        ) -> std::result::Result<Arc<Gate>, String> {
            let proxy = Gate::new(
                context,
                gates,
                crate::util::next_id(),
                std::panic::Location::caller(),
            )
            .map_err(|e| e.to_string())?;
            // A foreign command (not a user event) ends without the program's help.
            let on_its_own = ffi::command_type(source).is_ok_and(|t| t != CL_COMMAND_USER);
            if let Err(e) = proxy.follow(source, on_its_own) {
                // Set, so that it is not left open.
                let _ = proxy.set_status(ffi::codes::CL_INVALID_OPERATION);
                return Err(e);
            }
            Ok(proxy)
        }

        /// The handle the program knows it by, for the log: its twin once made.
        pub(crate) fn shown(&self) -> cl_event {
            let inner = &self.event.inner;
            inner
                .stand_in
                .get()
                .and_then(Option::as_ref)
                .map_or(inner.raw, StandIn::raw)
        }

        pub(crate) fn is_set(&self) -> bool {
            self.set.load(Ordering::Acquire)
        }

        /// Has the waiter set this gate as `source` ends.
        fn follow(
            self: &Arc<Gate>,
            source: cl_event,
            on_its_own: bool,
        ) -> std::result::Result<(), String> {
            // SAFETY: `source` is a live event (the caller's); each handle below takes a
            // reference of its own.
            let (watched, followed) =
                unsafe { (RawEvent::retain(source), RawEvent::retain(source)) };
            let (Some(watched), Some(followed)) = (watched, followed) else {
                return Err("clRetainEvent refused".into());
            };
            let watch = Arc::new(Watch::default());
            let waker = std::task::Waker::from(Arc::new(Follower {
                source: followed,
                gate: self.clone(),
            }));
            watch.ended_or_wake(&waker);
            let order = Order {
                driver: self.event.inner.context as usize,
                queue: None,
                in_order: false,
                ends_on_its_own: on_its_own,
                gates: Some(self.gates.clone()),
            };
            waiter()
                .watch(Arc::new(watched), order, watch)
                .map(drop)
                .map_err(|e| format!("the waiter's thread could not start: {e}"))
        }

        /// The handle other code gets: the twin, made at the first call (the *raw
        /// handles* rule); the gate's own handle once it is set, or where no twin can
        /// be made.
        pub(crate) fn public_handle(self: &Arc<Gate>) -> cl_event {
            let inner = &self.event.inner;
            let _making = self.twin.lock().unwrap_or_else(PoisonError::into_inner);
            let stand_in = inner.stand_in.get_or_init(|| {
                if self.is_set() {
                    return None;
                }
                match self.make_twin() {
                    Ok(twin) => Some(StandIn::Twin(twin)),
                    Err(e) => {
                        log::warn!(target: "cl_lifetime::event", "no twin for the user event {:p} ({e}); its own handle is handed out, and a failure set through it is not covered", inner.raw);
                        None
                    }
                }
            });
            stand_in.as_ref().map_or(inner.raw, StandIn::raw)
        }

        fn make_twin(self: &Arc<Gate>) -> std::result::Result<RawEvent, String> {
            let raw =
                ffi::create_user_event(self.event.inner.context).map_err(|e| e.to_string())?;
            // SAFETY: `raw` was just created; its one reference is the twin's.
            let twin = unsafe { RawEvent::own(raw) };
            if crate::trace::on() {
                crate::trace::not_a_command(raw);
            }
            if let Err(e) = self.follow(raw, false) {
                let _ = ffi::set_user_event_status(raw, ffi::codes::CL_INVALID_OPERATION);
                return Err(e);
            }
            Ok(twin)
        }

        /// Sets the gate through the library: the gates' *no failure mid-enqueue* rule,
        /// the waiter's kick, and the twin.
        pub(crate) fn set_status(&self, status: cl_int) -> Result<()> {
            if self.set.swap(true, Ordering::AcqRel) {
                return Err(Error::cl(
                    "clSetUserEventStatus",
                    ffi::codes::CL_INVALID_OPERATION,
                ));
            }
            if status < 0 {
                // Noted before the driver propagates it, so no enqueue that follows misses it.
                self.gates.note_failure();
            }
            self.gates.closing();
            let set = if status < 0 {
                // The gates' *no failure mid-enqueue* rule.
                crate::core::gates::failing(|| ffi::set_user_event_status(self.event.raw(), status))
            } else {
                ffi::set_user_event_status(self.event.raw(), status)
            };
            self.gates.closed(self.id);
            {
                let _twin = self.twin.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(Some(StandIn::Twin(twin))) = self.event.inner.stand_in.get() {
                    // Refused when other code set it first: that set is what this follows.
                    let _ = ffi::set_user_event_status(twin.as_raw(), status);
                }
            }
            // Failed events that waited on this gate may be free to go now.
            graveyard::sweep();
            set
        }

        /// Sets the gate as its twin was set, if it was (a `UserEvent` dropped before the
        /// waiter saw the twin set).
        pub(crate) fn follow_twin_now(&self) {
            if self.is_set() {
                return;
            }
            if let Some(Some(StandIn::Twin(twin))) = self.event.inner.stand_in.get() {
                follow_status(self, twin.as_raw());
            }
        }
    }

    /// Sets `gate` as `source` ended, if it has.
    fn follow_status(gate: &Gate, source: cl_event) {
        let status = match ffi::execution_status(source) {
            Ok(status) if status > ffi::CL_COMPLETE => return,
            Ok(status) => status,
            // An event whose status cannot be read counts as failed with that status.
            Err(status) => status,
        };
        if !gate.is_set() {
            // Refused only when the library set it meanwhile.
            let _ = gate.set_status(status);
        }
    }

    /// The waker of a followed event: sets its gate (the *raw handles* rule).
    struct Follower {
        source: RawEvent,
        gate: Arc<Gate>,
    }

    impl std::task::Wake for Follower {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            follow_status(&self.gate, self.source.as_raw());
        }
    }

    /// `CL_COMMAND_USER`.
    const CL_COMMAND_USER: u32 = 0x11F5;
}

impl StandIn {
    fn raw(&self) -> cl_event {
        match self {
            StandIn::Twin(twin) => twin.as_raw(),
            StandIn::Proxy(proxy) => proxy.event.raw(),
        }
    }
}

/// Blocks until every event is complete or failed.
///
/// # Errors
///
/// [`Error::CommandFailed`] with the first failed status, after all have ended.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let (a, b) = (ctx.queue()?, ctx.queue()?);
/// let (x, y) = (ctx.buffer::<u32>(1024)?, ctx.buffer::<u32>(1024)?);
/// let (fx, fy) = (a.fill(&x, 1)?, b.fill(&y, 2)?);
/// cl_lifetime::wait_all(&[&fx, &fy])?;
/// assert!(fx.is_terminal() && fy.is_terminal());
/// # Ok(())
/// # }
/// ```
pub fn wait_all(events: &[&Event]) -> Result<()> {
    let raws: Vec<cl_event> = events.iter().map(|e| e.raw()).collect();
    ffi::wait_terminal(&raws);
    for event in events {
        if let Status::Failed(status) = event.status()? {
            return Err(Error::CommandFailed { status });
        }
    }
    Ok(())
}
