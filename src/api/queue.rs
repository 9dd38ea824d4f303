//! Queues: every enqueue computes its wait list and records its event.
//!
//! Users never pass `cl_event`s by hand: the order of their calls is the order the device
//! honours, across any number of queues, in-order or out-of-order, on any device of the
//! context.
//!
//! # Rules
//!
//! 1. Every command that touches a buffer records its event there, with its access:
//!    writes, reads, copies (both ends), fills, maps, unmaps and kernel launches.
//! 2. The records of all buffers a command touches are locked, in buffer-ID order, from
//!    before the wait list is computed until the new event is recorded, so the order of
//!    the records is the order of the enqueues, whatever the threads do.
//! 3. The wait list is the buffers' hazards ([`tracker`](crate::tracker) rules 1 and 2:
//!    read after write, write after read or write, nothing from the command's own in-order
//!    queue), plus the extra dependencies given to [`Queue::after`]. Once a failure is
//!    possible (a user event exists, an event was adopted from a raw handle, or a failure
//!    was seen), the status of every event that would enter the wait list is read first:
//!    ended hazards are left out, since drivers never run a command whose wait list holds
//!    a failed event (PoCL leaves it queued forever, and its in-order queue with it); a
//!    dependency given to `after` that has failed refuses the command with
//!    [`Error::DependencyFailed`](crate::Error::DependencyFailed), and so does a command that reads a buffer whose last
//!    write failed (buffer rule 6). Once a failure has been seen in the context, the command's own
//!    in-order queue is not trusted either (PoCL stops ordering a queue's later commands
//!    after its pending ones once one of them has failed): every unended hazard goes in
//!    the wait list. Before any of that, no status is read on the enqueue path (it costs
//!    microseconds on NVIDIA).
//!    Once a failure is possible, the new event keeps the events of its wait list until it
//!    is seen complete: a failed command is not released while a dependency of it may
//!    still end (see [`crate::event`]).
//! 4. An event from another queue is flushed before it enters this queue's wait list
//!    (DESIGN.md trap 5); each queue is flushed only if it has unflushed work.
//! 5. A record that grows past [`FOLD_AT`](crate::tracker::FOLD_AT) live entries has its
//!    oldest reads folded into one `clEnqueueMarkerWithWaitList` event.
//! 6. Host memory handed to a non-blocking command is owned by the library until the
//!    command ends (trap 14); a transfer from or into borrowed memory blocks, and waits
//!    only for its own command (and so only for the hazards before it), after the records
//!    are unlocked.
//! 7. A mapped buffer refuses device commands that conflict with the mapping
//!    ([`Error::Mapped`](crate::Error::Mapped)): nothing writes memory the host reads, and a writable mapping is
//!    exclusive.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use super::buffer::{ClBuffer, PendingRead};
use super::map::{Mapped, MappedMut};
use crate::core::queue::QueueCore;
use crate::error::Result;
use crate::event::Event;
use crate::ffi::cl_command_queue;
use crate::kernel::{Arg, Kernel};
use crate::pod::Pod;
use crate::record::submit::Submit;

/// A command queue. Cheap to clone; all clones are the same queue.
#[derive(Clone)]
pub struct Queue {
    pub(crate) core: Arc<QueueCore>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("id", &self.core.lane.id)
            .field("in_order", &self.core.lane.in_order)
            .finish()
    }
}

impl Queue {
    pub(crate) fn from_core(core: Arc<QueueCore>) -> Queue {
        Queue { core }
    }
}

/// Commands on one queue that also wait on extra events: see [`Queue::after`].
#[derive(Clone, Copy)]
pub struct After<'a> {
    pub(super) queue: &'a Queue,
    pub(super) deps: &'a [&'a Event],
}

impl fmt::Debug for After<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("After")
            .field("queue", self.queue)
            .field("deps", &self.deps)
            .finish()
    }
}

impl<'a> After<'a> {
    /// The enqueue protocol for one command of this queue after `deps`.
    pub(super) fn submit(&self) -> Submit<'a> {
        Submit {
            queue: &self.queue.core,
            deps: self.deps,
        }
    }
}

macro_rules! forward {
    ($( $(#[$doc:meta])* fn $name:ident $(<$t:ident>)? (&self $(, $arg:ident : $ty:ty)*) -> $ret:ty; )*) => {
        $(
            $(#[$doc])*
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`After::", stringify!($name), "`].")]
            pub fn $name $(<$t: Pod>)? (&self $(, $arg: $ty)*) -> $ret {
                self.after(&[]).$name($($arg),*)
            }
        )*
    };
}

impl Queue {
    /// Commands that also wait on `deps`: events from this or another queue of the
    /// context, or [`UserEvent`](crate::UserEvent) gates.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(4)?;
    /// let gate = ctx.user_event()?;
    /// let fill = queue.after(&[gate.event()]).fill(&buf, 7)?;
    /// gate.complete()?;
    /// fill.wait()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn after<'a>(&'a self, deps: &'a [&'a Event]) -> After<'a> {
        After { queue: self, deps }
    }

    forward! {
        /// Writes `data` to the start of `buffer`; blocks until that write is done.
        fn write<T>(&self, buffer: &ClBuffer<T>, data: &[T]) -> Result<()>;
        /// Writes `data` at element `offset`; blocks until that write is done.
        fn write_at<T>(&self, buffer: &ClBuffer<T>, offset: usize, data: &[T]) -> Result<()>;
        /// Writes `data` without blocking; the library owns it until the write ends.
        fn write_owned<T>(&self, buffer: &ClBuffer<T>, data: Vec<T>) -> Result<Event>;
        /// Writes `data` at element `offset` without blocking.
        fn write_owned_at<T>(&self, buffer: &ClBuffer<T>, offset: usize, data: Vec<T>) -> Result<Event>;
        /// Reads the start of `buffer` into `out`; blocks until that read is done.
        fn read<T>(&self, buffer: &ClBuffer<T>, out: &mut [T]) -> Result<()>;
        /// Reads from element `offset` into `out`; blocks until that read is done.
        fn read_at<T>(&self, buffer: &ClBuffer<T>, offset: usize, out: &mut [T]) -> Result<()>;
        /// Reads the whole buffer into a new `Vec` without blocking.
        fn read_owned<T>(&self, buffer: &ClBuffer<T>) -> Result<PendingRead<T>>;
        /// Reads elements `range` into a new `Vec` without blocking.
        fn read_owned_range<T>(&self, buffer: &ClBuffer<T>, range: Range<usize>) -> Result<PendingRead<T>>;
        /// Copies all of `src` to the start of `dst`.
        fn copy<T>(&self, src: &ClBuffer<T>, dst: &ClBuffer<T>) -> Result<Event>;
        /// Copies `len` elements between the given offsets.
        fn copy_range<T>(&self, src: &ClBuffer<T>, src_offset: usize, dst: &ClBuffer<T>, dst_offset: usize, len: usize) -> Result<Event>;
        /// Sets every element of `buffer` to `value`.
        fn fill<T>(&self, buffer: &ClBuffer<T>, value: T) -> Result<Event>;
        /// Sets the elements `range` of `buffer` to `value`.
        fn fill_range<T>(&self, buffer: &ClBuffer<T>, value: T, range: Range<usize>) -> Result<Event>;
        /// Launches `kernel` over `global` work items.
        fn launch(&self, kernel: &Kernel, global: &[usize], args: &[Arg<'_>]) -> Result<Event>;
        /// Launches `kernel` over `global` work items in work groups of `local`.
        fn launch_local(&self, kernel: &Kernel, global: &[usize], local: Option<&[usize]>, args: &[Arg<'_>]) -> Result<Event>;
    }

    /// Maps elements `range` for reading on the host; blocks on the buffer's writers only.
    ///
    /// # Errors
    ///
    /// As [`After::map`].
    pub fn map<'b, T: Pod>(
        &self,
        buffer: &'b ClBuffer<T>,
        range: Range<usize>,
    ) -> Result<Mapped<'b, T>> {
        self.after(&[]).map(buffer, range)
    }

    /// Maps elements `range` for reading and writing on the host.
    ///
    /// # Errors
    ///
    /// As [`After::map_mut`].
    pub fn map_mut<'b, T: Pod>(
        &self,
        buffer: &'b ClBuffer<T>,
        range: Range<usize>,
    ) -> Result<MappedMut<'b, T>> {
        self.after(&[]).map_mut(buffer, range)
    }

    /// Submits this queue's commands to the device (`clFlush`).
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) from `clFlush`.
    pub fn flush(&self) -> Result<()> {
        self.core.flush()
    }

    /// Whether the queue runs its commands in order.
    pub fn is_in_order(&self) -> bool {
        self.core.lane.in_order
    }

    /// The raw handle, still owned by this queue.
    pub fn as_raw(&self) -> cl_command_queue {
        self.core.raw
    }
}
