use std::ptr;
use std::time::Duration;

use opencl3::event as cl;

use super::{cl_context, cl_event, cl_int, cl_uint};
use crate::error::{Error, Result};

pub(crate) use cl::CL_COMPLETE;

/// `CL_EVENT_COMMAND_EXECUTION_STATUS`, or the status of the failed query.
pub(crate) fn execution_status(raw: cl_event) -> std::result::Result<cl_int, cl_int> {
    cl::get_event_info(raw, cl::CL_EVENT_COMMAND_EXECUTION_STATUS).map(|s| s.to_int())
}

/// Whether the command of `raw` has ended, completed or failed (an unreadable status
/// counts as ended: nothing can wait on it either).
pub(crate) fn has_ended(raw: cl_event) -> bool {
    execution_status(raw).map_or(true, |s| s <= CL_COMPLETE)
}

/// `CL_EVENT_REFERENCE_COUNT`: stale as soon as read, and meant for finding leaks; the
/// driver probes read it to see whether a command holds its dependencies.
pub(crate) fn event_reference_count(raw: cl_event) -> Result<cl_uint> {
    cl::get_event_info(raw, cl::CL_EVENT_REFERENCE_COUNT)
        .map(|s| s.to_uint())
        .map_err(|s| Error::cl("clGetEventInfo", s))
}

/// `CL_EVENT_COMMAND_TYPE`.
pub(crate) fn command_type(raw: cl_event) -> Result<cl_uint> {
    cl::get_event_info(raw, cl::CL_EVENT_COMMAND_TYPE)
        .map(|t| t.to_uint())
        .map_err(|s| Error::cl("clGetEventInfo", s))
}

/// A command's end callback: the event, its terminal status and the user data.
pub(crate) type EndCallback = extern "C" fn(cl_event, cl_int, *mut std::ffi::c_void);

/// `clSetEventCallback` for `CL_COMPLETE`: `callback` runs once the command has ended
/// (completed or failed), possibly at once on this thread when it already has.
///
/// # Safety
///
/// `raw` is a live event, and `callback` may be called with `user` exactly once from any
/// thread (the driver's), also after the event's last release.
pub(crate) unsafe fn on_end(
    raw: cl_event,
    callback: EndCallback,
    user: *mut std::ffi::c_void,
) -> Result<()> {
    cl::set_event_callback(raw, CL_COMPLETE, callback, user)
        .map_err(|s| Error::cl("clSetEventCallback", s))
}

/// `CL_EVENT_COMMAND_QUEUE`, or null when it cannot be read (or the event has no queue).
pub(crate) fn event_queue(raw: cl_event) -> cl::cl_command_queue {
    cl::get_event_info(raw, cl::CL_EVENT_COMMAND_QUEUE)
        .map_or(ptr::null_mut(), |q| q.to_ptr() as cl::cl_command_queue)
}

/// `CL_EVENT_CONTEXT`, or null when it cannot be read.
pub(crate) fn event_context(raw: cl_event) -> cl_context {
    cl::get_event_info(raw, cl::CL_EVENT_CONTEXT)
        .map_or(ptr::null_mut(), |c| c.to_ptr() as cl_context)
}

/// `clReleaseEvent`.
///
/// # Safety
///
/// The caller owns one reference to `raw` (from a `clEnqueue*` call,
/// `clCreateUserEvent` or `clRetainEvent`) and gives it up here, exactly once.
pub(crate) unsafe fn release_event(raw: cl_event) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::release_event(raw) }.map_err(|s| Error::cl("clReleaseEvent", s))
}

/// `clRetainEvent`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid event.
pub(crate) unsafe fn retain_event(raw: cl_event) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::retain_event(raw) }.map_err(|s| Error::cl("clRetainEvent", s))
}

/// `clCreateUserEvent`: a new event with one reference, owned by the caller.
pub(crate) fn create_user_event(context: cl_context) -> Result<cl_event> {
    cl::create_user_event(context).map_err(|s| Error::cl("clCreateUserEvent", s))
}

/// `clSetUserEventStatus`.
pub(crate) fn set_user_event_status(raw: cl_event, status: cl_int) -> Result<()> {
    cl::set_user_event_status(raw, status).map_err(|s| Error::cl("clSetUserEventStatus", s))
}

/// Blocks until every event in `raws` is complete or failed. `clWaitForEvents` returns
/// early with `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` when one of them failed
/// (design trap "a failed wait returns early"), so after an error each event is waited on
/// by itself; an event whose wait errors for another reason is polled until it is
/// terminal. An empty list returns at once, without calling `clWaitForEvents` (trap "empty
/// wait lists").
pub(crate) fn wait_terminal(raws: &[cl_event]) {
    if raws.is_empty() || cl::wait_for_events(raws).is_ok() {
        return;
    }
    for &raw in raws {
        if cl::wait_for_events(&[raw]).is_ok() {
            continue;
        }
        let mut pause = Duration::from_micros(50);
        while execution_status(raw).unwrap_or(-1) > CL_COMPLETE {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }
}

/// `CL_PROFILING_COMMAND_QUEUED`, `_SUBMIT`, `_START` and `_END` of `raw`, in
/// nanoseconds of the device's clock.
pub(crate) fn profiling_times(raw: cl_event) -> Result<[u64; 4]> {
    let mut times = [0; 4];
    for (time, param) in times.iter_mut().zip([
        cl::CL_PROFILING_COMMAND_QUEUED,
        cl::CL_PROFILING_COMMAND_SUBMIT,
        cl::CL_PROFILING_COMMAND_START,
        cl::CL_PROFILING_COMMAND_END,
    ]) {
        *time = cl::get_event_profiling_info(raw, param)
            .map_err(|s| Error::cl("clGetEventProfilingInfo", s))?
            .to_ulong();
    }
    Ok(times)
}
