//! Queues: every enqueue computes its wait list and records its event.
//!
//! Users never pass `cl_event`s by hand: the order of their calls is the order the device
//! honours, across any number of queues, in-order or out-of-order, on any device of the
//! context. Each command checks its input here, then goes through the enqueue protocol
//! ([`crate::record::submit`], rules *every command recorded*, *locked in ID order*,
//! *hazards and dependencies*, *failures change the wait list*, *flush before a
//! cross-queue wait* and *fold*). A transfer from or into borrowed memory blocks, and
//! waits only for its own command (and so only for the hazards before it), after the
//! records are unlocked; owned memory is kept until the command ends (the record layer's
//! *lent host memory* rule).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use super::host::HostMemory;
use super::map::{Mapped, MappedMut};
use super::pending::{PendingRead, PendingWrite};
use super::svm::IntoSvm;
use super::view::IntoView;
use crate::core::queue::QueueCore;
use crate::error::Result;
use crate::event::Event;
use crate::ffi::cl_command_queue;
use crate::pod::Pod;
use crate::record::submit::Submit;

/// How to make a queue: see [`Context::queue_with`](crate::Context::queue_with).
///
/// # Examples
///
/// ```
/// let options = cl_lifetime::QueueOptions::default()
///     .out_of_order(true)
///     .profiling(true);
/// assert!(options.out_of_order && options.profiling);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueOptions {
    /// Commands may run in any order their wait lists allow
    /// (`CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE`); the library still orders the commands
    /// that share a buffer.
    pub out_of_order: bool,
    /// The queue records when each command was queued, submitted, started and ended
    /// (`CL_QUEUE_PROFILING_ENABLE`), read with [`Event::profile`]. It costs enqueue time
    /// on some drivers: about 6 µs more per launch on NVIDIA (driver 580, 1.6x), none
    /// measurable on PoCL (`BENCHMARKS.md`, "Profiling queues").
    pub profiling: bool,
    /// Whether small blocking reads (up to 1 MiB) go through pinned host memory of the
    /// queue's, then copied out on the host: on NVIDIA a read into ordinary host memory
    /// completes 13-14 µs later than a raw blocking read returns, one into pinned memory
    /// does not. `None` (the default): on GPUs, not on CPU devices.
    pub stage_reads: Option<bool>,
}

impl QueueOptions {
    /// With [`QueueOptions::out_of_order`] set to `yes`.
    #[must_use]
    pub fn out_of_order(mut self, yes: bool) -> Self {
        self.out_of_order = yes;
        self
    }

    /// With [`QueueOptions::profiling`] set to `yes`.
    #[must_use]
    pub fn profiling(mut self, yes: bool) -> Self {
        self.profiling = yes;
        self
    }

    /// With [`QueueOptions::stage_reads`] set to `Some(yes)`.
    #[must_use]
    pub fn stage_reads(mut self, yes: bool) -> Self {
        self.stage_reads = Some(yes);
        self
    }
}

/// A command queue. Cheap to clone; all clones are the same queue.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// assert!(queue.is_in_order());
/// let buf = ctx.buffer::<u32>(4)?;
/// queue.write(&buf, &[1, 2, 3, 4])?; // blocks until written
/// let same = queue.clone();
/// same.fill_range(&buf, 0, 2..4)?; // does not block
/// let mut out = [0u32; 4];
/// queue.read(&buf, &mut out)?; // after the fill: it waits on the buffer's writes
/// assert_eq!(out, [1, 2, 0, 0]);
/// # Ok(())
/// # }
/// ```
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

    /// A queue for the raw handle `raw`, a command queue of `ctx` made by other code
    /// (opencl3, a C library): the library takes its own reference, and the caller keeps
    /// theirs. Its device, order and profiling are read from the driver. Commands the
    /// caller enqueues on it directly are not known to the library: tell it with
    /// [`After::enqueue_raw`].
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_command_queue`.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`](crate::Error::ContextMismatch) when `raw` belongs to
    /// another context or to a device not in it; [`Error::Cl`](crate::Error::Cl) when
    /// its properties cannot be read.
    pub unsafe fn from_raw(ctx: &crate::Context, raw: cl_command_queue) -> Result<Queue> {
        // SAFETY: as the caller vouches.
        unsafe { ctx.adopt_queue(raw) }
    }

    /// Blocks until every command enqueued on the queue so far, by the library or by
    /// other code, has ended (`clFinish`). The library's own waits never need it: each
    /// waits on exactly the commands it depends on.
    ///
    /// In a process where no failure is possible yet (no user event made, no raw event
    /// adopted), a successful finish also vouches that the library's commands it waited
    /// for completed: their status is then known without asking the driver (the
    /// *finished queue* rule), which makes releasing the buffers they used cheaper (after
    /// 10^5 commands, PoCL's first status read of one costs microseconds). A finish made
    /// through the raw handle (`clFinish(queue.as_raw())`) vouches for nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) from `clFinish`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1024)?;
    /// let fill = queue.fill(&buf, 4)?;
    /// queue.finish()?;
    /// assert!(fill.is_terminal()); // everything queued before the finish has ended
    /// # Ok(())
    /// # }
    /// ```
    pub fn finish(&self) -> Result<()> {
        self.core.finish()
    }

    /// Whether the queue records its commands' times ([`QueueOptions::profiling`]).
    pub fn is_profiling(&self) -> bool {
        self.core.profiling
    }
}

/// Commands on one queue that also wait on extra events: see [`Queue::after`].
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let (a, b) = (ctx.buffer::<u32>(16)?, ctx.buffer::<u32>(16)?);
/// let gate = ctx.user_event()?;
/// let deps = [gate.event()];
/// let after: cl_lifetime::After<'_> = queue.after(&deps);
/// let first = after.fill(&a, 1)?; // `After` is `Copy`: one for several commands
/// let second = after.fill(&b, 2)?;
/// assert!(!first.is_terminal() && !second.is_terminal());
/// gate.complete()?;
/// assert_eq!(queue.read_owned(&b)?.wait()?, [2; 16]);
/// # Ok(())
/// # }
/// ```
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
    ($( $(#[$doc:meta])* fn $name:ident $(<$($l:lifetime,)* $t:ident>)? (&self $(, $arg:ident : $ty:ty)*) -> $ret:ty; )*) => {
        $(
            $(#[$doc])*
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`After::", stringify!($name), "`].")]
            pub fn $name $(<$($l,)* $t: Pod>)? (&self $(, $arg: $ty)*) -> $ret {
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
        fn write<'v, T>(&self, buffer: impl IntoView<'v, T>, data: &[T]) -> Result<()>;
        /// Writes `data` at element `offset`; blocks until that write is done.
        fn write_at<'v, T>(&self, buffer: impl IntoView<'v, T>, offset: usize, data: &[T]) -> Result<()>;
        /// Writes `data` without blocking; the library owns it until the write ends.
        fn write_owned<'v, T>(&self, buffer: impl IntoView<'v, T>, data: Vec<T>) -> Result<Event>;
        /// Writes `data` at element `offset` without blocking.
        fn write_owned_at<'v, T>(&self, buffer: impl IntoView<'v, T>, offset: usize, data: Vec<T>) -> Result<Event>;
        /// Reads the start of `buffer` into `out`; blocks until that read is done.
        fn read<'v, T>(&self, buffer: impl IntoView<'v, T>, out: &mut [T]) -> Result<()>;
        /// Reads from element `offset` into `out`; blocks until that read is done.
        fn read_at<'v, T>(&self, buffer: impl IntoView<'v, T>, offset: usize, out: &mut [T]) -> Result<()>;
        /// Reads the whole buffer into a new `Vec` without blocking.
        fn read_owned<'v, T>(&self, buffer: impl IntoView<'v, T>) -> Result<PendingRead<T>>;
        /// Reads elements `range` into a new `Vec` without blocking.
        fn read_owned_range<'v, T>(&self, buffer: impl IntoView<'v, T>, range: Range<usize>) -> Result<PendingRead<T>>;

        /// Copies all of `src` to the start of `dst`.
        fn copy<'s, 'd, T>(&self, src: impl IntoView<'s, T>, dst: impl IntoView<'d, T>) -> Result<Event>;
        /// Copies `len` elements between the given offsets.
        fn copy_range<'s, 'd, T>(&self, src: impl IntoView<'s, T>, src_offset: usize, dst: impl IntoView<'d, T>, dst_offset: usize, len: usize) -> Result<Event>;
        /// Sets every element of `buffer` to `value`.
        fn fill<'v, T>(&self, buffer: impl IntoView<'v, T>, value: T) -> Result<Event>;
        /// Sets the elements `range` of `buffer` to `value`.
        fn fill_range<'v, T>(&self, buffer: impl IntoView<'v, T>, value: T, range: Range<usize>) -> Result<Event>;

        /// Copies `data` into the start of shared virtual memory; blocks until done.
        fn write_svm<'v, T>(&self, svm: impl IntoSvm<'v, T>, data: &[T]) -> Result<()>;
        /// Copies the start of shared virtual memory into `out`; blocks until done.
        fn read_svm<'v, T>(&self, svm: impl IntoSvm<'v, T>, out: &mut [T]) -> Result<()>;
        /// Copies all of `src` to the start of `dst`, both shared virtual memory.
        fn copy_svm<'s, 'd, T>(&self, src: impl IntoSvm<'s, T>, dst: impl IntoSvm<'d, T>) -> Result<Event>;
        /// Sets every element of shared virtual memory to `value`.
        fn fill_svm<'v, T>(&self, svm: impl IntoSvm<'v, T>, value: T) -> Result<Event>;
        /// Maps elements `range` of shared virtual memory for reading on the host.
        fn map_svm<'b, T>(&self, svm: impl IntoSvm<'b, T>, range: Range<usize>) -> Result<Mapped<'b, T>>;
        /// Maps elements `range` of shared virtual memory for reading and writing.
        fn map_svm_mut<'b, T>(&self, svm: impl IntoSvm<'b, T>, range: Range<usize>) -> Result<MappedMut<'b, T>>;
    }

    /// Writes `data` (a `Vec` or a [`HostBuffer`](crate::HostBuffer)) without blocking,
    /// and hands it back once the write has ended; see [`After::write_lent`].
    ///
    /// # Errors
    ///
    /// As [`After::write_lent`].
    pub fn write_lent<'v, T: Pod, H: HostMemory<T>>(
        &self,
        buffer: impl IntoView<'v, T>,
        data: H,
    ) -> Result<PendingWrite<T, H>> {
        self.after(&[]).write_lent(buffer, data)
    }

    /// Copies `data` into the start of shared virtual memory without blocking, and hands
    /// it back once the copy has ended; see [`After::write_svm_lent`].
    ///
    /// # Errors
    ///
    /// As [`After::write_svm_lent`].
    pub fn write_svm_lent<'v, T: Pod, H: HostMemory<T>>(
        &self,
        svm: impl IntoSvm<'v, T>,
        data: H,
    ) -> Result<PendingWrite<T, H>> {
        self.after(&[]).write_svm_lent(svm, data)
    }

    /// Copies all of shared virtual memory into `data` without blocking; see
    /// [`After::read_svm_into`].
    ///
    /// # Errors
    ///
    /// As [`After::read_svm_into`].
    pub fn read_svm_into<'v, T: Pod, H: HostMemory<T>>(
        &self,
        svm: impl IntoSvm<'v, T>,
        data: H,
    ) -> Result<PendingRead<T, H>> {
        self.after(&[]).read_svm_into(svm, data)
    }

    /// Reads the whole buffer into `data` (a `Vec`'s allocation, or a
    /// [`HostBuffer`](crate::HostBuffer)) without blocking; see [`After::read_into`].
    ///
    /// # Errors
    ///
    /// As [`After::read_into`].
    pub fn read_into<'v, T: Pod, H: HostMemory<T>>(
        &self,
        buffer: impl IntoView<'v, T>,
        data: H,
    ) -> Result<PendingRead<T, H>> {
        self.after(&[]).read_into(buffer, data)
    }

    /// Reads elements `range` into `data` without blocking; see [`After::read_range_into`].
    ///
    /// # Errors
    ///
    /// As [`After::read_range_into`].
    pub fn read_range_into<'v, T: Pod, H: HostMemory<T>>(
        &self,
        buffer: impl IntoView<'v, T>,
        range: Range<usize>,
        data: H,
    ) -> Result<PendingRead<T, H>> {
        self.after(&[]).read_range_into(buffer, range, data)
    }

    /// Maps elements `range` for reading on the host; blocks on the buffer's writers only.
    ///
    /// # Errors
    ///
    /// As [`After::map`].
    pub fn map<'b, T: Pod>(
        &self,
        buffer: impl IntoView<'b, T>,
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
        buffer: impl IntoView<'b, T>,
        range: Range<usize>,
    ) -> Result<MappedMut<'b, T>> {
        self.after(&[]).map_mut(buffer, range)
    }

    /// Submits this queue's commands to the device (`clFlush`).
    ///
    /// An enqueue does not flush its queue: the driver submits when it chooses, and some
    /// (rusticl) run nothing that was not flushed. The library flushes for you wherever
    /// waiting could stall otherwise: before a queue's command enters another queue's wait
    /// list, in every blocking call and wait (`Event::wait`, blocking reads, writes and
    /// maps, `release`), when a future of a command is first polled, and before a deferred
    /// release or a dropped pending read is handed to the library's thread. Call `flush`
    /// yourself when you want the device to start on work nothing waits for yet (say,
    /// before host work that overlaps it).
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) from `clFlush`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1 << 20)?;
    /// let fill = queue.fill(&buf, 1)?;
    /// queue.flush()?; // the device starts on the fill while the host works on
    /// let host_sum: u64 = (0..1000u64).sum();
    /// fill.wait()?;
    /// assert_eq!(host_sum, 499_500);
    /// assert_eq!(queue.read_owned(&buf)?.wait()?[..4], [1; 4]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush(&self) -> Result<()> {
        self.core.flush()
    }

    /// Whether the queue runs its commands in order.
    pub fn is_in_order(&self) -> bool {
        self.core.lane.in_order
    }

    /// The raw handle that commands go to now, still owned by this queue. It changes once
    /// a failure left the driver failing every later command of the queue (current Mesa's
    /// rusticl): the queue then moved onto a new driver queue, so read it again rather than
    /// keeping it across commands that may fail.
    pub fn as_raw(&self) -> cl_command_queue {
        self.core.raw()
    }
}
