//! Events: retained `cl_event`s with RAII release, status queries and waits.
//!
//! An [`Event`] is cheap to clone (it shares one retained `cl_event`); the handle is
//! released when the last clone drops. A [`UserEvent`] is a gate the host opens or fails;
//! one dropped while still closed is failed, so no command waits on it forever.
//!
//! Files by idea: this one holds [`Event`] itself (its handle, dependencies and waits);
//! `status` how a status is read and resolved once a failure is possible; `snapshot` one
//! enqueue's view of pending commands; `graveyard` events kept past their last handle;
//! `user` and `gate` the host's gates; `profile` the profiling times.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crate::util::sync::{Mutex, rank};

use crate::core::context::ContextCore;
use crate::core::echo::RawEvent;
use crate::core::gates::{OpenGates, failures_possible, note_failure, note_failure_possible};
use crate::core::queue::QueueCore;
use crate::error::{Error, Result};
use crate::ffi::{self, cl_context, cl_event, cl_int};
use crate::status::{CommandKind, Status};

pub(crate) mod gate;
pub(crate) mod graveyard;
mod profile;
pub(crate) mod snapshot;
mod status;
mod user;

pub use profile::Profile;
pub use user::UserEvent;

pub(crate) struct EventInner {
    /// Its one reference: given up by its drop, or handed to the [`graveyard`].
    raw: ManuallyDrop<RawEvent>,
    /// The library's queue that produced it, if any: flushed before the event enters
    /// another queue's wait list (design trap "flush before a cross-queue wait").
    pub(crate) queue: Option<Arc<QueueCore>>,
    /// Its context, known when it was made (a queue's, a user event's) or read from the
    /// driver once when adopted, so that `after` can check it without a driver call.
    context: ffi::UnownedContext,
    /// The events in the command's wait list (once a failure is possible), kept until the
    /// command is seen complete (see [`graveyard`]): a failed command must outlive its own
    /// dependencies.
    deps: Mutex<Option<Box<[Event]>>, rank::EventDeps>,
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

/// How many events [`Event::held_by`] looks at.
const HELD_WALK: usize = 16;

/// [`EventInner::seen`] before a terminal status has been read.
const UNKNOWN: cl_int = i32::MAX;

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
        let finish_count = queue.as_ref().map_or(0, |q| q.finish_count());
        let may_fail_alone = had_wait_list || queue.is_none();
        let enqueued_ungated = queue.as_ref().is_some_and(|q| q.ctx.gates.count() == 0);
        EventInner {
            // SAFETY: `raw` comes with its one reference: the enqueue's (`from_enqueue`),
            // one just taken (`retained`), `clCreateUserEvent`'s (`Gate::new`), or the
            // caller's (`from_raw_owned`, as its contract says).
            raw: ManuallyDrop::new(unsafe { RawEvent::from_raw(raw) }),
            // An event keeps its context.
            context: ffi::UnownedContext::new(context),
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
            ffi::execution_status(self.raw.raw())
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
        let deps = self.deps.get_mut().take().unwrap_or_default();
        let outlive = self.must_outlive_drop(&deps);
        // SAFETY: taken once, here, as the event goes; nothing reads `raw` after.
        let raw = unsafe { ManuallyDrop::take(&mut self.raw) };
        if outlive {
            graveyard::bury(raw, deps, self.before.take());
            return;
        }
        drop_iteratively(deps);
        drop(raw);
        // After its own: the command before it is let go of once it no longer needs it.
        drop(self.before.take());
    }
}

/// Drops a list of events without recursing through their own dependency lists, which
/// can form long chains (each command waiting on the one before).
fn drop_iteratively(deps: Box<[Event]>) {
    let mut stack: Vec<Event> = deps.into_vec();
    while let Some(event) = stack.pop() {
        if let Some(mut inner) = Arc::into_inner(event.inner) {
            if let Some(more) = inner.deps.get_mut().take() {
                // Put back, so that `inner`'s own drop buries it with them.
                if inner.must_outlive_drop(&more) {
                    *inner.deps.get_mut() = Some(more);
                } else {
                    stack.extend(more.into_vec());
                }
            }
            drop(inner);
        }
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
        f.debug_tuple("Event").field(&self.inner.raw.raw()).finish()
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
        self.inner.context.raw() == ctx.raw()
    }

    /// [`Error::ContextMismatch`] for this event, used with the context `used_with`.
    pub(crate) fn context_mismatch(&self, used_with: crate::ffi::cl_context) -> Error {
        let object = match self.command_kind() {
            Ok(kind) => format!("event {:p} of a {kind:?} command", self.inner.raw.raw()),
            Err(_) => format!("event {:p}", self.inner.raw.raw()),
        };
        Error::context_mismatch(object, Some(self.inner.context.raw()), used_with)
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
                queue.ctx.raw(),
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
        self.inner.raw.raw()
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
            return inner.raw.raw();
        };
        if let Some(stand_in) = inner.stand_in.get() {
            return stand_in.as_ref().map_or(inner.raw.raw(), StandIn::raw);
        }
        match gate.upgrade() {
            Some(gate) => gate.public_handle(),
            // Set when its `UserEvent` went: a raw set of it is refused by the driver.
            None => inner
                .stand_in
                .get()
                .and_then(Option::as_ref)
                .map_or(inner.raw.raw(), StandIn::raw),
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
            if ffi::has_ended(inner.raw.raw()) {
                // Ended for good: a wait on it can no longer meet its failure.
                return None;
            }
            match gate::Gate::following(inner.raw.raw(), inner.context.raw(), gates) {
                Ok(proxy) => Some(StandIn::Proxy(proxy)),
                Err(e) => {
                    log::warn!(target: "cl_lifetime::event", "no gate could stand in for the foreign event {:p} ({e}); commands wait on it directly", inner.raw.raw());
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
        let [queued, submitted, started, ended] = ffi::profiling_times(self.inner.raw.raw())?;
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
        Ok(CommandKind::from_raw(ffi::command_type(
            self.inner.raw.raw(),
        )?))
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
        ffi::wait_terminal(&[self.inner.raw.raw()]);
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
        self.inner.context.raw()
    }

    /// Whether the library enqueued it while every user event of its context was set.
    pub(crate) fn enqueued_ungated(&self) -> bool {
        self.inner.enqueued_ungated
    }

    /// The flag of a gate not set yet that this command waits on, directly or through
    /// the pending commands it waits on, looking at up to [`HELD_WALK`] events: until
    /// the gate is set the command cannot complete, so the waiter reads it at its
    /// longest pause (its *held* rule). Only a failure of another of its dependencies
    /// can end it sooner, and the waiter sees that within the pause.
    pub(crate) fn held_by(&self) -> Option<Arc<AtomicBool>> {
        let deps_of = |event: &Event| -> Vec<Event> {
            event
                .inner
                .deps
                .lock()
                .as_deref()
                .map(<[Event]>::to_vec)
                .unwrap_or_default()
        };
        let mut stack = deps_of(self);
        let mut looked = 0;
        while let Some(event) = stack.pop() {
            looked += 1;
            if looked > HELD_WALK {
                return None;
            }
            match &event.inner.origin {
                Origin::Gate(gate) => {
                    if let Some(gate) = gate.upgrade().filter(|g| !g.is_set()) {
                        return Some(gate.set_flag().clone());
                    }
                }
                // One seen ended holds nothing back.
                Origin::Command if event.inner.seen.load(Ordering::Acquire) == UNKNOWN => {
                    stack.extend(deps_of(&event));
                }
                Origin::Command | Origin::Foreign => {}
            }
        }
        None
    }

    /// Flushes the library queue this event came from, if it has unflushed work, so that
    /// another queue can wait on it (design trap "flush before a cross-queue wait").
    pub(crate) fn flush_producer(&self) -> Result<()> {
        match (&self.inner.queue, &self.inner.origin) {
            (Some(queue), _) => queue.flush_if_dirty(),
            // A pooled block's hand-over gate: the queues of the commands it stands for.
            (None, Origin::Gate(gate)) => gate.upgrade().map_or(Ok(()), |g| g.flush_stood_for()),
            (None, _) => Ok(()),
        }
    }

    pub(crate) fn same_queue(&self, queue: &QueueCore) -> bool {
        self.inner
            .queue
            .as_ref()
            .is_some_and(|q| std::ptr::eq(Arc::as_ptr(q), queue))
    }
}

impl StandIn {
    fn raw(&self) -> cl_event {
        match self {
            StandIn::Twin(twin) => twin.raw(),
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
