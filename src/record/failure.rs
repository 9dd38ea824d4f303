//! Failed commands: the one place a failure is read from an event and collected for a
//! report, and the *failed write* rule for host reads.

use super::history::Writes;
use crate::core::gates::failures_possible;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::status::{CommandKind, ExecStatus, Status};

/// At most this many failures of one buffer are kept for its release report.
pub(crate) const MAX_FAILURES: usize = 64;

/// A command that ended with an error status.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{CommandKind, FailedCommand};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[0u32; 64])?;
/// let gate = ctx.user_event()?;
/// queue.after(&[gate.event()]).fill(&buf, 1)?;
/// gate.fail(-1234)?; // the fill never runs
/// let report = buf.release()?;
/// let [FailedCommand { command, status }] = report.failed[..] else { panic!("{report:?}") };
/// assert_eq!(command, CommandKind::Fill);
/// assert!(status.code() < 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailedCommand {
    /// What kind of command it was.
    pub command: CommandKind,
    /// Its negative execution status.
    pub status: ExecStatus,
}

/// The failure of `event`, if it failed: what command it was and its status.
pub(crate) fn failure_of(event: &Event) -> Option<FailedCommand> {
    match event.status() {
        Ok(Status::Failed(status)) => Some(FailedCommand {
            command: event.command_kind().unwrap_or(CommandKind::Other(0)),
            status,
        }),
        _ => None,
    }
}

/// Adds the failure of `event`, if it failed, to `failed` (up to [`MAX_FAILURES`]).
/// Returns whether it failed.
pub(crate) fn collect(failed: &mut Vec<FailedCommand>, event: &Event) -> bool {
    match failure_of(event) {
        Some(failure) => {
            if failed.len() < MAX_FAILURES {
                failed.push(failure);
            }
            true
        }
        None => false,
    }
}

impl From<FailedCommand> for Error {
    /// The error of a command that depends on the failed one (the *failed write* rule).
    fn from(failed: FailedCommand) -> Error {
        Error::DependencyFailed {
            command: failed.command,
            status: failed.status,
        }
    }
}

/// Waits for a host command that reads a buffer (a read or a map), then applies the
/// *failed write* rule ([`crate::record`]): if one of `writers`, the writes the buffer's
/// contents came from when the command was enqueued, failed, the data is not what was
/// asked for.
pub(crate) fn settle(event: &Event, writers: &Writes) -> Result<()> {
    let ended = event.wait();
    if failures_possible() {
        if let Some(failed) = writers.failure() {
            return Err(failed.into());
        }
    }
    ended
}
