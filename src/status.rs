//! What the driver says about a command: its [`Status`], its [`CommandKind`], and the
//! [`ExecStatus`] of one that ended abnormally. Like [`crate::error`], it reads OpenCL's
//! constants and calls nothing.
//!
//! [`Status::from_raw`] is the one place a raw execution status is read as a status, and
//! [`Status::state`] the one place a status becomes the [`tracker`](crate::tracker)'s
//! [`State`].

use std::fmt;

use opencl3::error_codes as codes;
use opencl3::event as cl;
use opencl3::types::{cl_int, cl_uint};

use crate::tracker::State;

/// A command's execution status when it ended abnormally (a negative value of
/// `CL_EVENT_COMMAND_EXECUTION_STATUS`). Execution statuses are not API error codes: a
/// driver or a failed user event may end a command with any negative value (PoCL uses -1,
/// a user event's `fail(-1234)` gives -1234), so it prints as its number, with a name only
/// for `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`, the one status the specification
/// gives a command whose dependency failed.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{ExecStatus, Status};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[0u32; 64])?;
/// let gate = ctx.user_event()?;
/// let fill = queue.after(&[gate.event()]).fill(&buf, 1)?;
/// gate.fail(-1234)?;
/// assert_eq!(gate.status()?, Status::Failed(ExecStatus(-1234)));
/// // The fill never ran: -1234 or -14, as the driver says.
/// let failed = fill.wait().err().and_then(|e| e.exec_status());
/// assert!(failed.is_some_and(|status| status.code() < 0));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExecStatus(pub cl_int);

impl ExecStatus {
    /// The raw status value.
    pub fn code(self) -> cl_int {
        self.0
    }
}

impl fmt::Display for ExecStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == codes::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST {
            write!(f, "execution status {} (a dependency failed)", self.0)
        } else {
            write!(f, "execution status {}", self.0)
        }
    }
}

impl fmt::Debug for ExecStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where a command is in its life, from `CL_EVENT_COMMAND_EXECUTION_STATUS`.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::Status;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(64)?;
/// let gate = ctx.user_event()?;
/// let fill = queue.after(&[gate.event()]).fill(&buf, 1)?;
/// assert!(!fill.status()?.is_terminal()); // queued, submitted or running: not ended
/// gate.complete()?;
/// fill.wait()?;
/// assert_eq!(fill.status()?, Status::Complete);
/// # Ok(())
/// # }
/// ```
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
    Failed(ExecStatus),
}

impl Status {
    /// Reads a raw `CL_EVENT_COMMAND_EXECUTION_STATUS`.
    pub(crate) fn from_raw(raw: cl_int) -> Status {
        match raw {
            cl::CL_COMPLETE => Status::Complete,
            cl::CL_RUNNING => Status::Running,
            cl::CL_SUBMITTED => Status::Submitted,
            cl::CL_QUEUED => Status::Queued,
            failed => Status::Failed(ExecStatus(failed)),
        }
    }

    /// Whether the command will never run again: complete or failed.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Complete | Status::Failed(_))
    }

    /// The status as the tracker sees it.
    pub(crate) fn state(self) -> State {
        match self {
            Status::Complete => State::Complete,
            Status::Failed(_) => State::Failed,
            Status::Queued | Status::Submitted | Status::Running => State::Pending,
        }
    }
}

/// The kind of command an event belongs to, from `CL_EVENT_COMMAND_TYPE`.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::CommandKind;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let src = ctx.buffer_from(&[1u32; 64])?;
/// let dst = ctx.buffer::<u32>(64)?;
/// let copy = queue.copy(&src, &dst)?;
/// assert_eq!(copy.command_kind()?, CommandKind::Copy);
/// let gate = ctx.user_event()?;
/// assert_eq!(gate.command_kind()?, CommandKind::User);
/// gate.complete()?;
/// # Ok(())
/// # }
/// ```
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
    /// `clEnqueueSVMMemcpy`.
    SvmMemcpy,
    /// `clEnqueueSVMMemFill`.
    SvmMemFill,
    /// `clEnqueueSVMMap`.
    SvmMap,
    /// `clEnqueueSVMUnmap`.
    SvmUnmap,
    /// A user event.
    User,
    /// Any other command type, by its raw value.
    Other(cl_uint),
}

impl CommandKind {
    /// Reads a raw `CL_EVENT_COMMAND_TYPE`.
    pub(crate) fn from_raw(raw: cl_uint) -> CommandKind {
        match raw {
            cl::CL_COMMAND_WRITE_BUFFER => CommandKind::Write,
            cl::CL_COMMAND_READ_BUFFER => CommandKind::Read,
            cl::CL_COMMAND_COPY_BUFFER => CommandKind::Copy,
            cl::CL_COMMAND_FILL_BUFFER => CommandKind::Fill,
            cl::CL_COMMAND_NDRANGE_KERNEL => CommandKind::Kernel,
            cl::CL_COMMAND_MAP_BUFFER => CommandKind::Map,
            cl::CL_COMMAND_UNMAP_MEM_OBJECT => CommandKind::Unmap,
            cl::CL_COMMAND_MARKER => CommandKind::Marker,
            cl::CL_COMMAND_SVM_MEMCPY => CommandKind::SvmMemcpy,
            cl::CL_COMMAND_SVM_MEMFILL => CommandKind::SvmMemFill,
            cl::CL_COMMAND_SVM_MAP => CommandKind::SvmMap,
            cl::CL_COMMAND_SVM_UNMAP => CommandKind::SvmUnmap,
            cl::CL_COMMAND_USER => CommandKind::User,
            other => CommandKind::Other(other),
        }
    }
}
