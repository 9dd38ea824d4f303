//! Commands from other code: a raw OpenCL call, or a library such as CLBlast or clFFT,
//! joins the buffers' records like a command of the library's own.
//!
//! The caller says which buffers the command uses and how ([`BufferUse`]); the library
//! computes the wait list its hazards require, hands it over (or, for a library that
//! takes no wait list, puts a barrier with it on the queue first), takes back the event
//! the command produced, and records it on every buffer named: the same protocol, and
//! the same infallible commit, as its own commands ([`crate::record::submit`]). From then
//! on the library's later commands on those buffers wait for it, and their releases do.

use std::sync::Arc;

use super::buffer::ClBuffer;
use super::queue::After;
use super::view::IntoView;
use crate::core::gates::failures_possible;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi::{self, cl_command_queue, cl_event};
use crate::pod::Pod;
use crate::record::block::Block;
use crate::record::submit::Touch;
use crate::tracker::{Access, Span};

/// How a command from other code uses one buffer: see [`After::enqueue_raw`].
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::opencl3::command_queue::enqueue_copy_buffer;
/// use cl_lifetime::{BufferUse, ClStatus, Error};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let (src, dst) = (ctx.buffer_from(&[5u32; 64])?, ctx.buffer::<u32>(64)?);
/// let uses = [BufferUse::read(&src), BufferUse::write(&dst)];
/// // SAFETY: the copy reads `src`, writes `dst`, waits on `wait` and hands its event over.
/// unsafe {
///     queue.after(&[]).enqueue_raw(&uses, |raw, wait| {
///         let list = if wait.is_empty() { std::ptr::null() } else { wait.as_ptr() };
///         enqueue_copy_buffer(raw, src.as_raw(), dst.as_raw(), 0, 0, 256, wait.len() as u32, list)
///             .map_err(|s| Error::Cl { call: "clEnqueueCopyBuffer", status: ClStatus(s) })
///     })?;
/// }
/// assert_eq!(queue.read_owned(&dst)?.wait()?, vec![5; 64]); // waits for the raw copy
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct BufferUse<'a> {
    block: &'a Block,
    access: Access,
    reads: bool,
    /// The bytes used: a view's, or all.
    span: Span,
}

impl std::fmt::Debug for BufferUse<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferUse")
            .field("buffer", &self.block.raw())
            .field("access", &self.access)
            .field("reads", &self.reads)
            .finish()
    }
}

impl<'a> BufferUse<'a> {
    fn new<T: Pod>(buffer: impl IntoView<'a, T>, access: Access, reads: bool) -> Self {
        let view = buffer.into_view();
        BufferUse {
            block: view.block(),
            access,
            reads,
            span: view.own_span(),
        }
    }

    /// The command only reads `buffer`: a [`ClBuffer`](crate::ClBuffer), or a
    /// [`View`](crate::View) of one, whose bytes (from [`View::byte_offset`](crate::View::byte_offset), in the
    /// buffer's memory object) are then the only ones the command may use.
    pub fn read<T: Pod>(buffer: impl IntoView<'a, T>) -> Self {
        BufferUse::new(buffer, Access::Read, true)
    }

    /// The command writes (part of) `buffer` and reads none of it.
    pub fn write<T: Pod>(buffer: impl IntoView<'a, T>) -> Self {
        BufferUse::new(buffer, Access::Write, false)
    }

    /// The command reads and writes `buffer`.
    pub fn read_write<T: Pod>(buffer: impl IntoView<'a, T>) -> Self {
        BufferUse::new(buffer, Access::Write, true)
    }

    fn touch(&self) -> Touch<'a> {
        // Other code's command may move data to or from host memory: its end is not
        // inferred from its queue's order (the tracker's *late ends* rule).
        Touch {
            reads: self.reads,
            ..Touch::host(self.block, self.access, false).within(self.span)
        }
    }
}

/// Commands from other code.
impl After<'_> {
    /// Records a command that other code enqueues: `enqueue` is given this queue's raw
    /// handle and the wait list the buffers' hazards (and this `After`'s events)
    /// require, enqueues its command with that wait list, and returns the command's
    /// event, handing over its one reference. The event is recorded on every buffer of
    /// `uses`, and returned.
    ///
    /// `enqueue` is called once, or again (with a new wait list) when it returned an
    /// error and an event of the wait list had failed meanwhile (NVIDIA refuses such an
    /// enqueue): a call that returns an error must have enqueued nothing. A buffer whose
    /// last write failed is refused for a command that reads it, as for the library's own
    /// (the *failed write* rule).
    ///
    /// # Safety
    ///
    /// - the event `enqueue` returns is that of a command it enqueued on the queue given,
    ///   whose wait list holds every event of the wait list given, and whose one
    ///   reference is handed over;
    /// - that command, and any other that `enqueue` enqueued, uses no buffer of the
    ///   library other than those of `uses`, and those only as declared, and has ended
    ///   when its event has.
    ///
    /// # Errors
    ///
    /// What `enqueue` returned; [`Error::DependencyFailed`](crate::Error::DependencyFailed)
    /// when a buffer read was last written by a command that failed, or an event of
    /// [`Queue::after`](crate::Queue::after) failed; [`Error::ContextMismatch`](crate::Error::ContextMismatch)
    /// for a buffer or event of another context; [`Error::Mapped`](crate::Error::Mapped)
    /// for a buffer mapped in a way the use conflicts with.
    ///
    /// # Examples
    ///
    /// A fill through raw opencl3 calls, which a read through the library then waits
    /// for:
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{BufferUse, ClStatus, Context, Error};
    /// use cl_lifetime::opencl3::command_queue::enqueue_fill_buffer;
    ///
    /// let ctx = Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(256)?;
    /// let seven = 7u32;
    /// // SAFETY: the fill writes `buf` only, waits on the list it is given, and hands
    /// // its event's one reference over.
    /// unsafe {
    ///     queue.after(&[]).enqueue_raw(&[BufferUse::write(&buf)], |raw_queue, wait| {
    ///         enqueue_fill_buffer(
    ///             raw_queue,
    ///             buf.as_raw(),
    ///             (&raw const seven).cast(),
    ///             4,
    ///             0,
    ///             256 * 4,
    ///             wait.len() as u32,
    ///             if wait.is_empty() { std::ptr::null() } else { wait.as_ptr() },
    ///         )
    ///         .map_err(|status| Error::Cl { call: "clEnqueueFillBuffer", status: ClStatus(status) })
    ///     })?;
    /// }
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![7; 256]);
    /// # Ok(())
    /// # }
    /// ```
    pub unsafe fn enqueue_raw(
        &self,
        uses: &[BufferUse<'_>],
        mut enqueue: impl FnMut(cl_command_queue, &[cl_event]) -> Result<cl_event>,
    ) -> Result<Event> {
        let core = &self.queue.core;
        let touches: Vec<Touch<'_>> = uses.iter().map(BufferUse::touch).collect();
        self.submit()
            .run(&touches, |wait| checked(enqueue(core.raw(), wait)?, core))
    }

    /// [`After::enqueue_raw`] for code that takes no wait list (CLBlast's API takes a
    /// queue and gives back an event): when the hazards require a wait, the library
    /// first enqueues a barrier with them on this queue (`clEnqueueBarrierWithWaitList`),
    /// which every later command of the queue waits for; then `enqueue` is given the
    /// queue's raw handle.
    ///
    /// # Safety
    ///
    /// - the event `enqueue` returns is that of a command it enqueued on the queue given,
    ///   whose one reference is handed over;
    /// - every command `enqueue` enqueued uses no buffer of the library other than those
    ///   of `uses`, and those only as declared, and has ended when that event has (true
    ///   of a library that enqueues in order on an in-order queue and returns its last
    ///   command's event).
    ///
    /// # Errors
    ///
    /// As [`After::enqueue_raw`]; [`Error::Cl`](crate::Error::Cl) from
    /// `clEnqueueBarrierWithWaitList`.
    pub unsafe fn enqueue_raw_after_barrier(
        &self,
        uses: &[BufferUse<'_>],
        mut enqueue: impl FnMut(cl_command_queue) -> Result<cl_event>,
    ) -> Result<Event> {
        let core = &self.queue.core;
        let touches: Vec<Touch<'_>> = uses.iter().map(BufferUse::touch).collect();
        let mut barrier = None;
        let event = self.submit().run(&touches, |wait| {
            let queue = core.raw();
            if !wait.is_empty() {
                // SAFETY: the queue is live (borrowed); the wait list holds live events
                // (retained by the locked records).
                let raw = unsafe { ffi::enqueue_barrier(queue, wait) }?;
                barrier = Some(barrier_event(raw, core, wait));
            }
            checked(enqueue(queue)?, core)
        })?;
        // The barrier is kept until the command behind it has ended (a failed event must
        // outlive its dependencies: design trap "PoCL's failed-event notify list").
        if let (Some(barrier), Some(first)) = (barrier, uses.first()) {
            first.block.keep_alive(event.clone(), Box::new(barrier));
        }
        Ok(event)
    }
}

/// `raw`, the event a raw enqueue's closure handed over, if the library can track it: not
/// null, and of the queue's context (one `clGetEventInfo`). An event of another context is
/// released (its one reference was handed over) and refused.
fn checked(raw: cl_event, queue: &crate::core::queue::QueueCore) -> Result<cl_event> {
    if raw.is_null() {
        return Err(Error::NullEvent);
    }
    let context = ffi::event_context(raw);
    if context != queue.ctx.raw() {
        // SAFETY: the closure handed its one reference over (`enqueue_raw`'s contract).
        let _ = unsafe { ffi::release_event(raw) };
        return Err(Error::context_mismatch(
            format!("event {raw:p} returned by a raw enqueue"),
            (!context.is_null()).then_some(context),
            queue.ctx.raw(),
        ));
    }
    Ok(raw)
}

/// The barrier's event, holding the events it waits on once a failure is possible.
fn barrier_event(
    raw: cl_event,
    queue: &Arc<crate::core::queue::QueueCore>,
    wait: &[cl_event],
) -> Event {
    let deps = failures_possible().then(|| {
        wait.iter()
            // SAFETY: every event of the wait list is live (retained by the locked
            // records); each gets a reference of its own.
            .filter_map(|&w| unsafe { Event::retained(w, queue.ctx.raw()) })
            .collect::<Vec<_>>()
            .into_boxed_slice()
    });
    Event::from_enqueue(raw, queue, deps, 0)
}

impl<T: Pod> ClBuffer<T> {
    /// The commands that a command using this buffer with `access` must wait for, and
    /// that have not ended: for a read, the writes; for a write, every use. Raw code
    /// that does not go through [`After::enqueue_raw`] can wait on exactly these (or put
    /// them in its wait list); a command enqueued later by the library may add more.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Access;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(4)?;
    /// let gate = ctx.user_event()?;
    /// let fill = queue.after(&[gate.event()]).fill(&buf, 1)?;
    /// let before_a_read = buf.hazards(Access::Read);
    /// assert_eq!(before_a_read.len(), 1);
    /// assert_eq!(before_a_read[0].as_raw(), fill.as_raw());
    /// gate.complete()?;
    /// fill.wait()?;
    /// assert!(buf.hazards(Access::Write).is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn hazards(&self, access: Access) -> Vec<Event> {
        let record = self.block().lock_record();
        record
            .events()
            .hazards_after_failure(access)
            .filter(|entry| !entry.event.is_terminal())
            .map(|entry| entry.event.clone())
            .collect()
    }
}
