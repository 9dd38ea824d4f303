//! Events: retained `cl_event`s with RAII release, status queries and waits.
//!
//! An [`Event`] is cheap to clone (it shares one retained `cl_event`); the handle is
//! released when the last clone drops. A [`UserEvent`] is a gate the host opens or fails;
//! one dropped while still closed is failed, so no command waits on it forever.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opencl3::event as cl;
use opencl3::types::{cl_event, cl_int, cl_uint};

use crate::error::{ClStatus, Error, Result};
use crate::queue::QueueInner;

/// Where a command is in its life, from `CL_EVENT_COMMAND_EXECUTION_STATUS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Enqueued, not yet submitted to the device.
    Queued,
    /// Submitted to the device.
    Submitted,
    /// Running.
    Running,
    /// Finished successfully.
    Complete,
    /// Terminated with this error status.
    Failed(ClStatus),
}

impl Status {
    fn from_raw(raw: cl_int) -> Status {
        match raw {
            cl::CL_COMPLETE => Status::Complete,
            cl::CL_RUNNING => Status::Running,
            cl::CL_SUBMITTED => Status::Submitted,
            cl::CL_QUEUED => Status::Queued,
            failed => {
                note_failure();
                Status::Failed(ClStatus(failed))
            }
        }
    }

    /// Whether the command will never run again: complete or failed.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Complete | Status::Failed(_))
    }
}

/// The kind of command an event belongs to, from `CL_EVENT_COMMAND_TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandKind {
    /// `clEnqueueWriteBuffer`.
    Write,
    /// `clEnqueueReadBuffer`.
    Read,
    /// `clEnqueueCopyBuffer`.
    Copy,
    /// `clEnqueueFillBuffer`.
    Fill,
    /// `clEnqueueNDRangeKernel`.
    Kernel,
    /// `clEnqueueMapBuffer`.
    Map,
    /// `clEnqueueUnmapMemObject`.
    Unmap,
    /// `clEnqueueMarkerWithWaitList`.
    Marker,
    /// A user event.
    User,
    /// Any other command type, by its raw value.
    Other(cl_uint),
}

impl CommandKind {
    fn from_raw(raw: cl_uint) -> CommandKind {
        use opencl3::event as q;
        match raw {
            q::CL_COMMAND_WRITE_BUFFER => CommandKind::Write,
            q::CL_COMMAND_READ_BUFFER => CommandKind::Read,
            q::CL_COMMAND_COPY_BUFFER => CommandKind::Copy,
            q::CL_COMMAND_FILL_BUFFER => CommandKind::Fill,
            q::CL_COMMAND_NDRANGE_KERNEL => CommandKind::Kernel,
            q::CL_COMMAND_MAP_BUFFER => CommandKind::Map,
            q::CL_COMMAND_UNMAP_MEM_OBJECT => CommandKind::Unmap,
            q::CL_COMMAND_MARKER => CommandKind::Marker,
            q::CL_COMMAND_USER => CommandKind::User,
            other => CommandKind::Other(other),
        }
    }
}

pub(crate) struct EventInner {
    raw: cl_event,
    /// The library's queue that produced it, if any: flushed before the event enters
    /// another queue's wait list (DESIGN.md trap 5).
    pub(crate) queue: Option<Arc<QueueInner>>,
}

// SAFETY: OpenCL event handles may be used from any thread; every OpenCL call is
// thread-safe except clSetKernelArg on a shared cl_kernel (OpenCL 3.0 appendix A.2).
unsafe impl Send for EventInner {}
// SAFETY: as above; the struct has no interior state besides the handle.
unsafe impl Sync for EventInner {}

impl Drop for EventInner {
    fn drop(&mut self) {
        // SAFETY: `raw` holds one reference that this struct owns (taken in `from_raw`),
        // released exactly once, here.
        if let Err(status) = unsafe { cl::release_event(self.raw) } {
            log::error!(target: "cl_lifetime::event", "clReleaseEvent failed: {}", ClStatus(status));
        }
    }
}

/// A retained OpenCL event.
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
    pub(crate) fn from_enqueue(raw: cl_event, queue: &Arc<QueueInner>) -> Event {
        Event {
            inner: Arc::new(EventInner {
                raw,
                queue: Some(queue.clone()),
            }),
        }
    }

    /// Takes ownership of one reference to `raw`.
    ///
    /// # Safety
    ///
    /// - `raw` is a valid `cl_event`;
    /// - the caller gives up one reference to it (from a `clEnqueue*` call,
    ///   `clCreateUserEvent` or `clRetainEvent`), which the `Event` will release.
    pub unsafe fn from_raw(raw: cl_event) -> Event {
        Event {
            inner: Arc::new(EventInner { raw, queue: None }),
        }
    }

    /// The raw handle, still owned by this `Event`.
    pub fn as_raw(&self) -> cl_event {
        self.inner.raw
    }

    /// The command's execution status.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the status cannot be queried.
    pub fn status(&self) -> Result<Status> {
        let raw = cl::get_event_info(self.inner.raw, cl::CL_EVENT_COMMAND_EXECUTION_STATUS)
            .map_err(|s| Error::cl("clGetEventInfo", s))?;
        Ok(Status::from_raw(raw.to_int()))
    }

    /// Whether the command has completed or failed. An event whose status cannot be read
    /// counts as terminal: nothing can wait on it anyway.
    pub fn is_terminal(&self) -> bool {
        self.status().map_or(true, Status::is_terminal)
    }

    /// The status as the tracker sees it; an unreadable status counts as failed.
    pub(crate) fn state(&self) -> crate::tracker::State {
        use crate::tracker::State;
        match self.status() {
            Ok(Status::Complete) => State::Complete,
            Ok(Status::Failed(_)) | Err(_) => State::Failed,
            Ok(_) => State::Pending,
        }
    }

    /// The kind of command this event belongs to.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the type cannot be queried.
    pub fn command_kind(&self) -> Result<CommandKind> {
        let raw = cl::get_event_info(self.inner.raw, cl::CL_EVENT_COMMAND_TYPE)
            .map_err(|s| Error::cl("clGetEventInfo", s))?;
        Ok(CommandKind::from_raw(raw.to_uint()))
    }

    /// Blocks until the command completes or fails.
    ///
    /// # Errors
    ///
    /// [`Error::CommandFailed`] when it ended with an error status.
    pub fn wait(&self) -> Result<()> {
        wait_terminal(&[self.inner.raw]);
        match self.status()? {
            Status::Failed(status) => Err(Error::CommandFailed { status }),
            _ => Ok(()),
        }
    }

    /// Flushes the library queue this event came from, if it has unflushed work, so that
    /// another queue can wait on it (DESIGN.md trap 5).
    pub(crate) fn flush_producer(&self) -> Result<()> {
        match &self.inner.queue {
            Some(queue) => queue.flush_if_dirty(),
            None => Ok(()),
        }
    }

    pub(crate) fn same_queue(&self, queue: &QueueInner) -> bool {
        self.inner
            .queue
            .as_ref()
            .is_some_and(|q| std::ptr::eq(Arc::as_ptr(q), queue))
    }
}

/// Blocks until every event in `raws` is complete or failed. `clWaitForEvents` returns
/// early with `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` when one of them failed
/// (DESIGN.md trap 2), so after an error each event is waited on by itself; an event whose
/// wait errors for another reason is polled until it is terminal. An empty list returns at
/// once, without calling `clWaitForEvents` (trap 1).
pub(crate) fn wait_terminal(raws: &[cl_event]) {
    if raws.is_empty() || cl::wait_for_events(raws).is_ok() {
        return;
    }
    for &raw in raws {
        if cl::wait_for_events(&[raw]).is_ok() {
            continue;
        }
        let mut pause = Duration::from_micros(50);
        loop {
            let status = cl::get_event_info(raw, cl::CL_EVENT_COMMAND_EXECUTION_STATUS)
                .map(|s| s.to_int())
                .unwrap_or(-1);
            if status <= cl::CL_COMPLETE {
                break;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }
}

/// Counts failures seen anywhere (a gate failed, a failed status read), so a record need
/// look for failed events (tracker rule 5) only after one has happened.
static FAILURE_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The number of failures seen so far.
pub(crate) fn failure_epoch() -> u64 {
    FAILURE_EPOCH.load(Ordering::Acquire)
}

/// Notes that a command failed.
pub(crate) fn note_failure() {
    FAILURE_EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// A gate the host opens ([`UserEvent::complete`]) or fails ([`UserEvent::fail`]).
/// Commands given it as a dependency wait until then. Dropping a gate that is still
/// closed fails it with `CL_INVALID_OPERATION`, so nothing waits on it forever.
pub struct UserEvent {
    event: Event,
    set: AtomicBool,
}

impl fmt::Debug for UserEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserEvent")
            .field("event", &self.event)
            .field("set", &self.set.load(Ordering::Relaxed))
            .finish()
    }
}

impl UserEvent {
    pub(crate) fn new(context: opencl3::types::cl_context) -> Result<UserEvent> {
        let raw = cl::create_user_event(context).map_err(|s| Error::cl("clCreateUserEvent", s))?;
        // SAFETY: `raw` was just created and its one reference is handed over.
        let event = unsafe { Event::from_raw(raw) };
        Ok(UserEvent {
            event,
            set: AtomicBool::new(false),
        })
    }

    /// The event to pass as a dependency.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Opens the gate: commands waiting on it may run.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_OPERATION` when the gate was already set.
    pub fn complete(&self) -> Result<()> {
        self.set_status(cl::CL_COMPLETE)
    }

    /// Fails the gate with `status`, which must be negative; commands waiting on it
    /// terminate with an error.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_VALUE` for a status that is not negative, or
    /// `CL_INVALID_OPERATION` when the gate was already set.
    pub fn fail(&self, status: cl_int) -> Result<()> {
        if status >= 0 {
            return Err(Error::cl("clSetUserEventStatus", cl::CL_INVALID_VALUE));
        }
        let set = self.set_status(status);
        note_failure();
        set
    }

    fn set_status(&self, status: cl_int) -> Result<()> {
        if self.set.swap(true, Ordering::AcqRel) {
            return Err(Error::cl(
                "clSetUserEventStatus",
                opencl3::error_codes::CL_INVALID_OPERATION,
            ));
        }
        cl::set_user_event_status(self.event.as_raw(), status)
            .map_err(|s| Error::cl("clSetUserEventStatus", s))
    }
}

impl std::ops::Deref for UserEvent {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.event
    }
}

impl Drop for UserEvent {
    fn drop(&mut self) {
        if !self.set.load(Ordering::Acquire) {
            log::warn!(target: "cl_lifetime::event", "a user event was dropped while closed; failing it");
            if let Err(e) = self.set_status(opencl3::error_codes::CL_INVALID_OPERATION) {
                log::error!(target: "cl_lifetime::event", "failing a dropped user event: {e}");
            }
        }
    }
}

/// Blocks until every event is complete or failed.
///
/// # Errors
///
/// [`Error::CommandFailed`] with the first failed status, after all have ended.
pub fn wait_all(events: &[&Event]) -> Result<()> {
    let raws: Vec<cl_event> = events.iter().map(|e| e.as_raw()).collect();
    wait_terminal(&raws);
    for event in events {
        if let Status::Failed(status) = event.status()? {
            return Err(Error::CommandFailed { status });
        }
    }
    Ok(())
}
