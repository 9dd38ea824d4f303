//! Failed commands: the one place a failure is read from an event and collected for a
//! report, and the *failed write* rule for host reads.

use super::history::Writes;
use crate::core::echo::RawEvent;
use crate::core::gates::failures_possible;
use crate::core::queue::QueueCore;
use crate::error::{Error, Result};
use crate::event::{Event, EventInner};
use crate::status::{CommandKind, ExecStatus, Status};
use std::panic::Location;
use std::ptr;
use std::sync::{Arc, Weak};

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

/// The failed commands of one buffer, for its release report: each once, though a command
/// that touched two ranges of the buffer is recorded there twice (the *two ranges* rule of
/// [`super::submit`]), and may be asked about under each.
#[derive(Default)]
pub(crate) struct Failures {
    list: Vec<FailedCommand>,
    /// The events of `list`, weakly: their handles are let go of as usual, and the
    /// address of each stays theirs while it is here, so that it names them alone.
    events: Vec<Weak<EventInner>>,
    /// Per queue that [holds failed commands until their turn](QueueCore::holds_failed_until_turn),
    /// the number of the newest failed command seen on it (the *failed ahead of its turn*
    /// rule of [`crate::record`]): the commands before it there are waited for too. The
    /// queue is held weakly, so a buffer keeps no queue alive.
    turns: Vec<(Weak<QueueCore>, u64)>,
}

impl Failures {
    /// Adds the failure of `event`, if it failed and is not here yet (up to
    /// [`MAX_FAILURES`]). Returns whether it failed.
    pub(crate) fn collect(&mut self, event: &Event) -> bool {
        match failure_of(event) {
            Some(failure) => {
                self.note_turn(event);
                let inner = Arc::as_ptr(&event.inner);
                let known = self.events.iter().any(|e| ptr::eq(e.as_ptr(), inner));
                if !known && self.list.len() < MAX_FAILURES {
                    self.list.push(failure);
                    self.events.push(Arc::downgrade(&event.inner));
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Notes the failed `event`'s place on its queue, where that queue holds a failed
    /// command's buffers until its turn.
    fn note_turn(&mut self, event: &Event) {
        let Some(queue) = event.inner.queue.as_ref() else {
            return;
        };
        let seq = event.seq();
        if !queue.holds_failed_until_turn || seq == 0 {
            return;
        }
        let this = Arc::as_ptr(queue);
        match self
            .turns
            .iter_mut()
            .find(|(q, _)| ptr::eq(q.as_ptr(), this))
        {
            Some((_, newest)) => *newest = (*newest).max(seq),
            None => self.turns.push((Arc::downgrade(queue), seq)),
        }
    }

    /// The oldest command ahead of a failed one on its queue that has not ended (the
    /// *failed ahead of its turn* rule), with a reference of its own, and its queue: one
    /// at a time, so that a wait holds no event of another buffer's command that has ended
    /// (where events keep their buffers, it would keep that buffer). The queues with none
    /// left are forgotten.
    pub(crate) fn first_ahead(&mut self) -> Option<(Arc<QueueCore>, RawEvent)> {
        let mut first = None;
        self.turns.retain(|(queue, seq)| {
            if first.is_some() {
                return true;
            }
            let Some(queue) = queue.upgrade() else {
                return false;
            };
            first = queue.first_ahead_of(*seq).map(|ahead| (queue, ahead));
            first.is_some()
        });
        first
    }

    /// Whether a command ahead of a failed one on its queue has not ended (the *failed
    /// ahead of its turn* rule). Costs nothing where no such failure was seen.
    pub(crate) fn ahead_pending(&mut self) -> bool {
        !self.turns.is_empty() && self.first_ahead().is_some()
    }

    /// The failures, oldest first.
    pub(crate) fn into_list(self) -> Vec<FailedCommand> {
        self.list
    }
}

impl From<FailedCommand> for Error {
    /// The error of a command that depends on the failed one, naming neither a buffer nor
    /// a dependency index.
    fn from(failed: FailedCommand) -> Error {
        Error::DependencyFailed {
            command: failed.command,
            status: failed.status,
            buffer: None,
            dependency: None,
        }
    }
}

impl FailedCommand {
    /// The error of a command that reads what this failed write of the buffer allocated
    /// at `site` wrote (the *failed write* rule).
    pub(crate) fn in_buffer(self, site: &'static Location<'static>) -> Error {
        Error::DependencyFailed {
            command: self.command,
            status: self.status,
            buffer: Some(site),
            dependency: None,
        }
    }

    /// The error of a command given this failed command as dependency `index` of
    /// [`Queue::after`](crate::Queue::after).
    pub(crate) fn as_dependency(self, index: usize) -> Error {
        Error::DependencyFailed {
            command: self.command,
            status: self.status,
            buffer: None,
            dependency: Some(index),
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
            return Err(writers
                .site
                .map_or(failed.into(), |site| failed.in_buffer(site)));
        }
    }
    ended
}
