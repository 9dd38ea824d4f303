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
//!    [`Error::DependencyFailed`], and so does a command that reads a buffer whose last
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
//!    ([`Error::Mapped`]): nothing writes memory the host reads, and a writable mapping is
//!    exclusive.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};

use opencl3::command_queue as cl;
use opencl3::types::{cl_command_queue, cl_event};

use crate::buffer::{ClBuffer, MapStep, MemInner, PendingRead, Pod, Record, failure_of, settle};
use crate::context::{ContextInner, next_id};
use crate::device::{Device, Limits};
use crate::error::{ClStatus, Error, Result, Transfer};
use crate::event::{Event, Status};
use crate::program::{Arg, Kernel};
use crate::tracker::{Access, Entry, Lane};

pub(crate) struct QueueInner {
    pub(crate) raw: cl_command_queue,
    pub(crate) lane: Lane,
    pub(crate) ctx: Arc<ContextInner>,
    /// The queue's device's limits, which launches are checked against.
    pub(crate) limits: Limits,
    /// Set by every enqueue, cleared by a flush.
    dirty: AtomicBool,
}

// SAFETY: a cl_command_queue may be used from any thread (OpenCL 3.0 appendix A.2: every
// call is thread-safe except clSetKernelArg); `dirty` is atomic.
unsafe impl Send for QueueInner {}
// SAFETY: as above.
unsafe impl Sync for QueueInner {}

impl Drop for QueueInner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from clCreateCommandQueue* and is released once, here. The
        // release flushes the queue; its commands still complete.
        if let Err(status) = unsafe { cl::release_command_queue(self.raw) } {
            log::error!(target: "cl_lifetime::queue", "clReleaseCommandQueue failed: {}", ClStatus(status));
        }
    }
}

impl QueueInner {
    pub(crate) fn create(
        ctx: &Arc<ContextInner>,
        device: &Device,
        out_of_order: bool,
    ) -> Result<Queue> {
        let flags = if out_of_order {
            cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE
        } else {
            0
        };
        let raw = if opencl_major(device.version()) >= 2 {
            let properties = [u64::from(cl::CL_QUEUE_PROPERTIES), flags, 0];
            // SAFETY: context and device are valid handles owned by `ctx`; `properties` is
            // a zero-terminated list that outlives the call.
            unsafe {
                cl::create_command_queue_with_properties(ctx.raw, device.id, properties.as_ptr())
            }
            .map_err(|s| Error::cl("clCreateCommandQueueWithProperties", s))?
        } else {
            // An OpenCL 1.x device: calling the 2.0 entry point there is undefined (with
            // Oclgrind behind ocl-icd it spins forever, DESIGN.md trap 20), so the 1.x one,
            // which takes the same flags.
            // SAFETY: as above.
            #[allow(deprecated)]
            unsafe { cl::create_command_queue(ctx.raw, device.id, flags) }
                .map_err(|s| Error::cl("clCreateCommandQueue", s))?
        };
        Ok(Queue {
            inner: Arc::new(QueueInner {
                raw,
                lane: Lane {
                    id: next_id(),
                    in_order: !out_of_order,
                },
                ctx: ctx.clone(),
                limits: device.limits,
                dirty: AtomicBool::new(false),
            }),
        })
    }

    pub(crate) fn flush_if_dirty(&self) -> Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            cl::flush(self.raw).map_err(|s| Error::cl("clFlush", s))?;
        }
        Ok(())
    }
}

/// The major version in a `CL_DEVICE_VERSION` string (`OpenCL <major>.<minor> <vendor>`);
/// 1 when it cannot be read, the version whose entry points every platform has.
pub(crate) fn opencl_major(version: &str) -> u32 {
    version
        .strip_prefix("OpenCL ")
        .and_then(|v| v.split('.').next())
        .and_then(|major| major.trim().parse().ok())
        .unwrap_or(1)
}

/// A command queue. Cheap to clone; all clones are the same queue.
#[derive(Clone)]
pub struct Queue {
    pub(crate) inner: Arc<QueueInner>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("id", &self.inner.lane.id)
            .field("in_order", &self.inner.lane.in_order)
            .finish()
    }
}

/// One buffer a command touches, and how.
pub(crate) struct Touch<'a> {
    pub(crate) mem: &'a MemInner,
    pub(crate) access: Access,
    pub(crate) map: MapStep,
    /// Whether the command may read the buffer's contents (buffer rule 6): every read, a
    /// kernel's writable argument (it may read too) and a map; not a write, fill or copy
    /// into it, nor an unmap.
    pub(crate) reads: bool,
}

impl<'a> Touch<'a> {
    /// A command that reads the buffer when `access` is `Read`, and only writes it
    /// otherwise.
    pub(crate) fn new(mem: &'a MemInner, access: Access) -> Self {
        Touch {
            mem,
            access,
            map: MapStep::None,
            reads: access == Access::Read,
        }
    }

    /// A kernel argument: a writable one may be read too.
    pub(crate) fn kernel_arg(mem: &'a MemInner, access: Access) -> Self {
        Touch {
            reads: true,
            ..Touch::new(mem, access)
        }
    }
}

/// Checks `range` against the buffer as [`check_range`] does, and returns its length; a
/// reversed range is [`Error::ReversedRange`].
fn check_span(transfer: Transfer, range: &Range<usize>, buffer_len: usize) -> Result<usize> {
    let len = range
        .end
        .checked_sub(range.start)
        .ok_or(Error::ReversedRange {
            transfer,
            start: range.start,
            end: range.end,
        })?;
    check_range(transfer, range.start, len, buffer_len)?;
    Ok(len)
}

fn check_range(transfer: Transfer, offset: usize, len: usize, buffer_len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::ZeroLength);
    }
    match offset.checked_add(len) {
        Some(end) if end <= buffer_len => Ok(()),
        _ => Err(Error::OutOfRange {
            transfer,
            offset,
            len,
            buffer_len,
        }),
    }
}

/// Commands on one queue that also wait on extra events: see [`Queue::after`].
#[derive(Clone, Copy)]
pub struct After<'a> {
    queue: &'a Queue,
    deps: &'a [&'a Event],
}

impl fmt::Debug for After<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("After")
            .field("queue", self.queue)
            .field("deps", &self.deps)
            .finish()
    }
}

impl After<'_> {
    /// Rules 1 to 5: locks the records of `touches`, computes the wait list from their
    /// hazards and the extra dependencies, enqueues through `enqueue`, and records the new
    /// event on every buffer touched.
    fn submit<'t>(
        &self,
        touches: impl IntoIterator<Item = &'t Touch<'t>>,
        enqueue: impl FnMut(&[cl_event]) -> Result<cl_event>,
    ) -> Result<Event> {
        self.submit_reading(touches, enqueue, None)
    }

    /// [`After::submit`], also handing back in `writer` the last write of the (one)
    /// buffer touched, for a host read to check once it has ended (buffer rule 6).
    fn submit_reading<'t>(
        &self,
        touches: impl IntoIterator<Item = &'t Touch<'t>>,
        mut enqueue: impl FnMut(&[cl_event]) -> Result<cl_event>,
        mut writer: Option<&mut Option<Event>>,
    ) -> Result<Event> {
        let queue = &self.queue.inner;
        if !self.deps.iter().all(|d| d.in_context(&queue.ctx)) {
            return Err(Error::ContextMismatch);
        }
        let mut order: inline::List<&Touch<'_>> = inline::List::new();
        for touch in touches {
            if touch.mem.ctx.id != queue.ctx.id {
                return Err(Error::ContextMismatch);
            }
            order.push(touch);
        }
        order.sort_by_key(|t| t.mem.id);
        let mut locked: inline::List<(&MemInner, Access, MapStep, bool, MutexGuard<'_, Record>)> =
            inline::List::new();
        for touch in order.iter() {
            match locked.last_mut() {
                Some((mem, access, _, reads, _)) if mem.id == touch.mem.id => {
                    if touch.access == Access::Write {
                        *access = Access::Write;
                    }
                    *reads |= touch.reads;
                }
                _ => locked.push((
                    touch.mem,
                    touch.access,
                    touch.map,
                    touch.reads,
                    touch.mem.lock_record(),
                )),
            }
        }
        // Reading an event's status costs microseconds on some drivers (NVIDIA), so the
        // statuses of dependencies and hazards are read only once a failure is possible.
        let failures_possible = crate::event::failures_possible();
        // PoCL stops ordering an in-order queue's later commands after earlier pending ones
        // once a command on it has failed, so after a failure in the context the queue's
        // order is not trusted: every unended hazard goes in the wait list.
        let failure_seen = queue.ctx.gates.failure_seen();
        // Gathers the checks and the wait list, with the events it holds (kept by the new
        // event). Those are needed only once a failure is possible (a failed command must
        // outlive its dependencies), so until then the enqueue path clones and allocates
        // nothing for them.
        let gather = |locked: &mut inline::List<(
            &MemInner,
            Access,
            MapStep,
            bool,
            MutexGuard<'_, Record>,
        )>|
         -> Result<(inline::WaitList, inline::List<Event>, usize)> {
            for (_, access, map, reads, record) in locked.iter() {
                record.check_map(*access, *map)?;
                // Buffer rule 6: nothing reads data whose write failed.
                if failures_possible && *reads {
                    if let Some(failed) = record.failed_write() {
                        return Err(failed.into());
                    }
                }
            }
            if failures_possible {
                crate::event::graveyard::sweep();
                // A driver never runs a command whose wait list holds a failed event.
                if let Some(failed) = self.deps.iter().find_map(|d| failure_of(d)) {
                    return Err(failed.into());
                }
            }
            // Rules 1 to 3.
            let mut wait = inline::WaitList::new();
            let mut holds: inline::List<Event> = inline::List::new();
            let mut unelided = self.deps.len();
            for dep in self.deps {
                if !dep.same_queue(queue) {
                    dep.flush_producer()?;
                }
                wait.push(dep.as_raw());
                if failures_possible {
                    holds.push((*dep).clone());
                }
            }
            for (_, access, _, reads, record) in locked.iter_mut() {
                unelided += record.events().hazards_without_elision(*access);
                let after_failure = record.after_failure() || failure_seen;
                let record: &Record = record;
                let events = record.events();
                let reads = *reads;
                let mut add = |entry: &Entry<Event>| -> Result<()> {
                    // A finished command needs no wait, and a failed one must not be waited
                    // on: drivers fail (or never run) a command whose wait list holds one.
                    // The status is read once here: the last write may have failed since
                    // the check above, and then a reader is refused (buffer rule 6).
                    let ended = failures_possible && entry.event.is_terminal();
                    if ended && reads && entry.access == Access::Write {
                        let last = record.last_write().map(Event::as_raw);
                        if last == Some(entry.event.as_raw()) {
                            if let Some(failed) = failure_of(&entry.event) {
                                return Err(failed.into());
                            }
                        }
                    }
                    if !ended {
                        if !entry.event.same_queue(queue) {
                            entry.event.flush_producer()?;
                        }
                        wait.push(entry.event.as_raw());
                        if failures_possible {
                            holds.push(entry.event.clone());
                        }
                    }
                    Ok(())
                };
                if after_failure {
                    events
                        .hazards_after_failure(*access)
                        .try_for_each(&mut add)?;
                } else {
                    events.hazards(queue.lane, *access).try_for_each(&mut add)?;
                }
            }
            if locked.len() > 1 || !self.deps.is_empty() {
                wait.sort_dedup();
            }
            Ok((wait, holds, unelided))
        };

        // An event of the wait list can fail between the gathering and the enqueue, and
        // NVIDIA then refuses the enqueue with the failed status: gather again (the failed
        // event is left out, or refuses the command) a few times.
        let mut attempts = 0;
        let (raw, holds, had_wait_list) = loop {
            let (wait, holds, unelided) = gather(&mut locked)?;
            let wait = wait.as_slice();
            match enqueue(wait) {
                Ok(raw) => {
                    queue.ctx.stats.count_enqueue(wait.len(), unelided);
                    break (raw, holds, !wait.is_empty());
                }
                Err(e)
                    if failures_possible
                        && attempts < 3
                        && holds
                            .iter()
                            .any(|h| matches!(h.status(), Ok(Status::Failed(_)))) =>
                {
                    log::debug!(target: "cl_lifetime::queue", "enqueue refused after a dependency failed ({e}); gathering again");
                    attempts += 1;
                }
                Err(e) => return Err(e),
            }
        };
        queue.dirty.store(true, Ordering::Release);
        let deps = (holds.len() != 0).then(|| holds.into_boxed_slice());
        let event = Event::from_enqueue(raw, queue, deps);
        // The commit: nothing from here on can fail, so every buffer touched records the
        // command (a buffer that did not could be released while it runs).
        for (_, access, map, _, record) in locked.iter_mut() {
            if let Some(writer) = writer.as_deref_mut() {
                *writer = record.last_write().cloned();
            }
            record.record(
                queue.lane,
                *access,
                event.clone(),
                had_wait_list,
                failures_possible,
            );
            record.apply_map(*map);
        }
        // Rule 5, after the commit: a fold that cannot be enqueued leaves the record as it
        // is (longer, still complete).
        for (_, _, _, _, record) in locked.iter_mut() {
            if let Err(e) = self.fold(record) {
                log::warn!(target: "cl_lifetime::queue", "folding a record's reads: {e}");
            }
        }
        Ok(event)
    }

    /// Rule 5: folds a record's oldest reads into one marker on this queue when it has
    /// grown past its bound.
    fn fold(&self, record: &mut Record) -> Result<()> {
        #[cfg(test)]
        if tests::FAIL_FOLDS.get() && !record.events().reads_to_fold().is_empty() {
            return Err(Error::cl(
                "clEnqueueMarkerWithWaitList",
                opencl3::error_codes::CL_OUT_OF_HOST_MEMORY,
            ));
        }
        let queue = &self.queue.inner;
        let failures_possible = crate::event::failures_possible();
        let (count, holds): (usize, Vec<Event>) = {
            let reads = record.events().reads_to_fold();
            if reads.is_empty() {
                return Ok(());
            }
            // The marker stands for every read folded; those that have ended need no
            // wait, and a failed one must not be waited on (see `submit`).
            let live: Vec<Event> = reads
                .iter()
                .filter(|e| !(failures_possible && e.is_terminal()))
                .map(|&e| e.clone())
                .collect();
            for event in &live {
                if !event.same_queue(queue) {
                    event.flush_producer()?;
                }
            }
            (reads.len(), live)
        };
        let folded: Vec<cl_event> = holds.iter().map(Event::as_raw).collect();
        // SAFETY: the wait list holds live events (retained by `holds`) and outlives the
        // call; an empty one is passed as null.
        let raw = unsafe {
            cl::enqueue_marker_with_wait_list(queue.raw, folded.len() as u32, wait_ptr(&folded))
        }
        .map_err(|s| Error::cl("clEnqueueMarkerWithWaitList", s))?;
        queue.dirty.store(true, Ordering::Release);
        let deps = (!holds.is_empty()).then(|| holds.into_boxed_slice());
        record.fold(count, queue.lane, Event::from_enqueue(raw, queue, deps));
        Ok(())
    }

    fn enqueue_write<T: Pod>(
        &self,
        buffer: &ClBuffer<T>,
        offset: usize,
        data: &[T],
    ) -> Result<Event> {
        check_range(Transfer::Write, offset, data.len(), buffer.len())?;
        let mem = buffer.mem();
        let queue = self.queue.inner.raw;
        self.submit(&[Touch::new(mem, Access::Write)], |wait| {
            // SAFETY: the range was checked against the buffer; `data` stays alive until
            // the command ends: the callers either wait for it or own the memory (rule 4).
            unsafe {
                cl::enqueue_write_buffer(
                    queue,
                    mem.raw(),
                    cl::CL_NON_BLOCKING,
                    offset * size_of::<T>(),
                    std::mem::size_of_val(data),
                    data.as_ptr().cast(),
                    wait.len() as u32,
                    wait_ptr(wait),
                )
            }
            .map_err(|s| Error::cl("clEnqueueWriteBuffer", s))
        })
    }

    /// Enqueues a read of `len` elements into `out`, which must stay valid and unaliased
    /// until the command ends.
    fn enqueue_read<T: Pod>(
        &self,
        buffer: &ClBuffer<T>,
        offset: usize,
        out: *mut T,
        len: usize,
        writer: &mut Option<Event>,
    ) -> Result<Event> {
        check_range(Transfer::Read, offset, len, buffer.len())?;
        let mem = buffer.mem();
        let queue = self.queue.inner.raw;
        let touch = [Touch::new(mem, Access::Read)];
        self.submit_reading(
            &touch,
            |wait| {
                // SAFETY: the range was checked; the callers keep `out` alive and unaliased
                // until the command ends (rule 4); every bit pattern is a valid `T: Pod`.
                unsafe {
                    cl::enqueue_read_buffer(
                        queue,
                        mem.raw(),
                        cl::CL_NON_BLOCKING,
                        offset * size_of::<T>(),
                        len * size_of::<T>(),
                        out.cast(),
                        wait.len() as u32,
                        wait_ptr(wait),
                    )
                }
                .map_err(|s| Error::cl("clEnqueueReadBuffer", s))
            },
            Some(writer),
        )
    }

    /// Writes `data` to the start of `buffer` and blocks until that write is done.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when `data` is longer than the buffer, [`Error::ZeroLength`]
    /// when empty, [`Error::CommandFailed`] when the write failed.
    pub fn write<T: Pod>(&self, buffer: &ClBuffer<T>, data: &[T]) -> Result<()> {
        self.write_at(buffer, 0, data)
    }

    /// Writes `data` at element `offset` of `buffer` and blocks until that write is done.
    ///
    /// # Errors
    ///
    /// As [`After::write`].
    pub fn write_at<T: Pod>(&self, buffer: &ClBuffer<T>, offset: usize, data: &[T]) -> Result<()> {
        let event = self.enqueue_write(buffer, offset, data)?;
        // Rule 4: `data` is borrowed, so this returns only when the command has ended.
        event.wait()
    }

    /// Writes `data` to the start of `buffer` without blocking. The library owns `data`
    /// until the write has ended.
    ///
    /// # Errors
    ///
    /// As [`After::write`], except that a failure of the command shows in the event.
    pub fn write_owned<T: Pod>(&self, buffer: &ClBuffer<T>, data: Vec<T>) -> Result<Event> {
        self.write_owned_at(buffer, 0, data)
    }

    /// Writes `data` at element `offset` of `buffer` without blocking; see
    /// [`After::write_owned`].
    ///
    /// # Errors
    ///
    /// As [`After::write_owned`].
    pub fn write_owned_at<T: Pod>(
        &self,
        buffer: &ClBuffer<T>,
        offset: usize,
        data: Vec<T>,
    ) -> Result<Event> {
        let event = self.enqueue_write(buffer, offset, &data)?;
        buffer.mem().keep_alive(event.clone(), Box::new(data));
        Ok(event)
    }

    /// Reads the start of `buffer` into `out` and blocks until that read is done.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when `out` is longer than the buffer, [`Error::ZeroLength`]
    /// when empty, [`Error::CommandFailed`] when the read failed.
    pub fn read<T: Pod>(&self, buffer: &ClBuffer<T>, out: &mut [T]) -> Result<()> {
        self.read_at(buffer, 0, out)
    }

    /// Reads from element `offset` of `buffer` into `out` and blocks until done.
    ///
    /// # Errors
    ///
    /// As [`After::read`].
    pub fn read_at<T: Pod>(
        &self,
        buffer: &ClBuffer<T>,
        offset: usize,
        out: &mut [T],
    ) -> Result<()> {
        let mut writer = None;
        let event = self.enqueue_read(buffer, offset, out.as_mut_ptr(), out.len(), &mut writer)?;
        // Rule 6: `out` is borrowed, so this returns only when the command has ended.
        settle(&event, writer.as_ref())
    }

    /// Reads the whole buffer into a new `Vec` without blocking.
    ///
    /// # Errors
    ///
    /// As [`After::read_owned_range`].
    pub fn read_owned<T: Pod>(&self, buffer: &ClBuffer<T>) -> Result<PendingRead<T>> {
        self.read_owned_range(buffer, 0..buffer.len())
    }

    /// Reads elements `range` of `buffer` into a new `Vec` without blocking; the `Vec`
    /// comes back from [`PendingRead::wait`].
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::ZeroLength`] for a bad range.
    pub fn read_owned_range<T: Pod>(
        &self,
        buffer: &ClBuffer<T>,
        range: Range<usize>,
    ) -> Result<PendingRead<T>> {
        let len = check_span(Transfer::Read, &range, buffer.len())?;
        let mut data: Vec<T> = Vec::with_capacity(len);
        // The device fills the spare capacity; `PendingRead` sets the length only after
        // the read has completed, and owns the allocation until then (rule 4).
        let mut writer = None;
        let event = self.enqueue_read(buffer, range.start, data.as_mut_ptr(), len, &mut writer)?;
        Ok(PendingRead::new(event, writer, data, len))
    }

    /// Copies all of `src` to the start of `dst`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when `dst` is shorter than `src`.
    pub fn copy<T: Pod>(&self, src: &ClBuffer<T>, dst: &ClBuffer<T>) -> Result<Event> {
        self.copy_range(src, 0, dst, 0, src.len())
    }

    /// Copies `len` elements from `src` at `src_offset` to `dst` at `dst_offset`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when either range leaves its buffer, [`Error::ZeroLength`]
    /// for `len == 0`, [`Error::Cl`] with `CL_MEM_COPY_OVERLAP` for overlapping ranges of
    /// one buffer.
    pub fn copy_range<T: Pod>(
        &self,
        src: &ClBuffer<T>,
        src_offset: usize,
        dst: &ClBuffer<T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<Event> {
        check_range(Transfer::CopySource, src_offset, len, src.len())?;
        check_range(Transfer::CopyDestination, dst_offset, len, dst.len())?;
        let (s, d) = (src.mem(), dst.mem());
        let queue = self.queue.inner.raw;
        let touches = [Touch::new(s, Access::Read), Touch::new(d, Access::Write)];
        self.submit(&touches, |wait| {
            // SAFETY: both ranges were checked against their buffers.
            unsafe {
                cl::enqueue_copy_buffer(
                    queue,
                    s.raw(),
                    d.raw(),
                    src_offset * size_of::<T>(),
                    dst_offset * size_of::<T>(),
                    len * size_of::<T>(),
                    wait.len() as u32,
                    wait_ptr(wait),
                )
            }
            .map_err(|s| Error::cl("clEnqueueCopyBuffer", s))
        })
    }

    /// Sets every element of `buffer` to `value`.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] from `clEnqueueFillBuffer` (the pattern size must be 1, 2, 4, ...,
    /// 128 bytes).
    pub fn fill<T: Pod>(&self, buffer: &ClBuffer<T>, value: T) -> Result<Event> {
        self.fill_range(buffer, value, 0..buffer.len())
    }

    /// Sets the elements `range` of `buffer` to `value`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::ZeroLength`] for a bad range, [`Error::Cl`] as
    /// [`After::fill`].
    pub fn fill_range<T: Pod>(
        &self,
        buffer: &ClBuffer<T>,
        value: T,
        range: Range<usize>,
    ) -> Result<Event> {
        let len = check_span(Transfer::Fill, &range, buffer.len())?;
        let mem = buffer.mem();
        let queue = self.queue.inner.raw;
        self.submit(&[Touch::new(mem, Access::Write)], |wait| {
            // SAFETY: the range was checked; OpenCL copies the pattern before returning.
            unsafe {
                cl::enqueue_fill_buffer(
                    queue,
                    mem.raw(),
                    ptr::from_ref(&value).cast(),
                    size_of::<T>(),
                    range.start * size_of::<T>(),
                    len * size_of::<T>(),
                    wait.len() as u32,
                    wait_ptr(wait),
                )
            }
            .map_err(|s| Error::cl("clEnqueueFillBuffer", s))
        })
    }

    /// Maps elements `range` of `buffer` for reading on the host; blocks until the map is
    /// done, which waits only on the buffer's writers. Unmapped when the guard drops.
    ///
    /// Several read mappings of one buffer may be alive at once, as OpenCL allows. PoCL 3.1
    /// crashes when several host threads map the same buffer at the same moment (seen with
    /// raw OpenCL calls too); on it, map a shared buffer from one thread at a time.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::ZeroLength`] for a bad range, [`Error::Mapped`]
    /// while the buffer is mapped for writing, [`Error::CommandFailed`] when the map failed.
    pub fn map<'b, T: Pod>(
        &self,
        buffer: &'b ClBuffer<T>,
        range: Range<usize>,
    ) -> Result<Mapped<'b, T>> {
        self.map_as(buffer, range, Access::Read).map(Mapped)
    }

    /// Maps elements `range` of `buffer` for reading and writing on the host; blocks until
    /// the map is done. No device command may use the buffer until the guard drops.
    ///
    /// # Errors
    ///
    /// As [`After::map`], and [`Error::Mapped`] while any other mapping is alive.
    pub fn map_mut<'b, T: Pod>(
        &self,
        buffer: &'b ClBuffer<T>,
        range: Range<usize>,
    ) -> Result<MappedMut<'b, T>> {
        self.map_as(buffer, range, Access::Write).map(MappedMut)
    }

    fn map_as<'b, T: Pod>(
        &self,
        buffer: &'b ClBuffer<T>,
        range: Range<usize>,
        access: Access,
    ) -> Result<Mapping<'b, T>> {
        let transfer = match access {
            Access::Read => Transfer::Map,
            Access::Write => Transfer::MapMut,
        };
        let len = check_span(transfer, &range, buffer.len())?;
        let mem = buffer.mem();
        let queue = self.queue.inner.raw;
        let flags = match access {
            Access::Read => opencl3::memory::CL_MAP_READ,
            Access::Write => opencl3::memory::CL_MAP_READ | opencl3::memory::CL_MAP_WRITE,
        };
        let mut ptr: *mut std::ffi::c_void = ptr::null_mut();
        let touch = Touch {
            mem,
            access,
            map: MapStep::Map(access),
            reads: true,
        };
        let mut writer = None;
        let event = self.submit_reading(
            &[touch],
            |wait| {
                // SAFETY: the range was checked; `ptr` receives the mapped address.
                unsafe {
                    cl::enqueue_map_buffer(
                        queue,
                        mem.raw(),
                        cl::CL_NON_BLOCKING,
                        flags,
                        range.start * size_of::<T>(),
                        len * size_of::<T>(),
                        &mut ptr,
                        wait.len() as u32,
                        wait_ptr(wait),
                    )
                }
                .map_err(|s| Error::cl("clEnqueueMapBuffer", s))
            },
            Some(&mut writer),
        )?;
        // From here on the guard unmaps, whatever happens.
        let mapping = Mapping {
            queue: self.queue.clone(),
            mem,
            ptr: ptr.cast(),
            len,
            access,
            _elements: PhantomData,
        };
        settle(&event, writer.as_ref())?;
        Ok(mapping)
    }

    /// Launches `kernel` over `global` work items, letting the device pick the
    /// work-group size. Every buffer argument records the launch with its access.
    ///
    /// # What is checked, and what the kernel must respect
    ///
    /// Before the driver sees anything, the library checks (the launch rules of
    /// `src/launch.rs`):
    /// - the kernel, every buffer and every event come from this queue's context;
    /// - `args` has one entry per kernel parameter, and each has the kind the kernel
    ///   declares: a buffer for a `__global` or `__constant` pointer, [`Arg::local`] for a
    ///   `__local` one, [`Arg::scalar`] of the declared size for a value (images,
    ///   samplers, pipes and queues are refused). Where the driver gives no argument
    ///   information, only the count is checked and the driver checks the rest;
    /// - local memory: each [`Arg::local`] at least one byte, all of them within the
    ///   device's `CL_DEVICE_LOCAL_MEM_SIZE`;
    /// - work sizes: one to three dimensions, none zero, a local size within the device's
    ///   work-group limits, and each global dimension at most 2³² − 1 groups.
    ///
    /// What no check can see is the kernel's body. The caller vouches that the kernel
    /// touches only the elements of its buffer arguments that exist (usually by bounds
    /// checks against a length passed as a scalar), writes only buffers passed with
    /// [`Arg::write`] or [`Arg::read_write`], and stays within the local memory it is
    /// given. A kernel that indexes past a buffer's end writes memory the buffer does not
    /// own; on a CPU device that is host memory, which no OpenCL implementation guards.
    /// Within that, no launch built from safe code reaches undefined behaviour.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`], [`Error::ArgCount`], [`Error::KernelArg`] naming the
    /// argument, what was given and what the kernel declares, [`Error::WorkSize`] with the
    /// sizes and the device's limits, [`Error::DependencyFailed`] (queue rule 3), or
    /// [`Error::Cl`] from `clEnqueueNDRangeKernel`.
    pub fn launch(&self, kernel: &Kernel, global: &[usize], args: &[Arg<'_>]) -> Result<Event> {
        self.launch_local(kernel, global, None, args)
    }

    /// Launches `kernel` over `global` work items in work groups of `local`.
    ///
    /// # Errors
    ///
    /// As [`After::launch`].
    pub fn launch_local(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
    ) -> Result<Event> {
        let queue = &self.queue.inner;
        kernel.check_launch(&queue.ctx, &queue.limits, global, local, args)?;
        let mut touches: inline::List<Touch<'_>> = inline::List::new();
        for touch in args.iter().filter_map(Arg::touch) {
            touches.push(touch);
        }
        let queue = self.queue.inner.raw;
        self.submit(touches.iter(), |wait| {
            kernel.enqueue(queue, global, local, args, wait)
        })
    }
}

/// A live mapping; unmaps on drop (the unmap is recorded like any command).
struct Mapping<'b, T: Pod> {
    queue: Queue,
    mem: &'b MemInner,
    ptr: *mut T,
    len: usize,
    access: Access,
    _elements: PhantomData<&'b mut [T]>,
}

impl<T: Pod> Drop for Mapping<'_, T> {
    fn drop(&mut self) {
        let queue = self.queue.inner.raw;
        let (mem, ptr) = (self.mem, self.ptr);
        let touch = Touch {
            mem,
            access: self.access,
            map: MapStep::Unmap(self.access),
            reads: false,
        };
        let unmapped = self.queue.after(&[]).submit(&[touch], |wait| {
            // SAFETY: `ptr` came from clEnqueueMapBuffer on this buffer and is unmapped
            // once, here; the guard that lent it out is gone.
            unsafe {
                cl::enqueue_unmap_mem_object(
                    queue,
                    mem.raw(),
                    ptr.cast(),
                    wait.len() as u32,
                    wait_ptr(wait),
                )
            }
            .map_err(|s| Error::cl("clEnqueueUnmapMemObject", s))
        });
        if let Err(e) = unmapped {
            log::error!(target: "cl_lifetime::queue", "unmapping a buffer: {e}");
        }
    }
}

/// Part of a buffer mapped for reading on the host ([`Queue::map`]). Derefs to `[T]`;
/// unmapped on drop.
pub struct Mapped<'b, T: Pod>(Mapping<'b, T>);

/// Part of a buffer mapped for reading and writing on the host ([`Queue::map_mut`]).
/// Derefs to `[T]` mutably; unmapped on drop, after which device commands see the writes.
pub struct MappedMut<'b, T: Pod>(Mapping<'b, T>);

impl<T: Pod> std::ops::Deref for Mapped<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the map completed, so `ptr` addresses `len` elements of host-visible
        // memory until the unmap in Drop; no device command may write them meanwhile
        // (the record refuses it while mapped).
        unsafe { std::slice::from_raw_parts(self.0.ptr, self.0.len) }
    }
}

impl<T: Pod> std::ops::Deref for MappedMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: as for `Mapped`; this is the only mapping of the buffer.
        unsafe { std::slice::from_raw_parts(self.0.ptr, self.0.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for MappedMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `Mapped`; a writable mapping is exclusive (the record refuses any
        // other mapping and every device command), and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr, self.0.len) }
    }
}

impl<T: Pod> fmt::Debug for Mapped<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapped").field("len", &self.0.len).finish()
    }
}

impl<T: Pod> fmt::Debug for MappedMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedMut")
            .field("len", &self.0.len)
            .finish()
    }
}

pub(crate) fn wait_ptr(wait: &[cl_event]) -> *const cl_event {
    if wait.is_empty() {
        ptr::null()
    } else {
        wait.as_ptr()
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
    /// [`Error::Cl`] from `clFlush`.
    pub fn flush(&self) -> Result<()> {
        self.inner.dirty.store(false, Ordering::Release);
        cl::flush(self.inner.raw).map_err(|s| Error::cl("clFlush", s))
    }

    /// Whether the queue runs its commands in order.
    pub fn is_in_order(&self) -> bool {
        self.inner.lane.in_order
    }

    /// The raw handle, still owned by this queue.
    pub fn as_raw(&self) -> cl_command_queue {
        self.inner.raw
    }
}

/// Lists that stay on the stack for the few items an enqueue has, so the enqueue path
/// allocates nothing in the common case.
mod inline {
    use opencl3::types::cl_event;

    /// Items kept inline before a list moves to the heap.
    pub(super) const INLINE: usize = 4;

    /// A list of up to [`INLINE`] items on the stack, more on the heap.
    pub(super) enum List<T> {
        Inline([Option<T>; INLINE], usize),
        Heap(Vec<T>),
    }

    impl<T> List<T> {
        pub(super) fn new() -> Self {
            List::Inline([const { None }; INLINE], 0)
        }

        pub(super) fn push(&mut self, item: T) {
            match self {
                List::Inline(items, len) if *len < INLINE => {
                    items[*len] = Some(item);
                    *len += 1;
                }
                List::Inline(items, _) => {
                    let mut heap: Vec<T> = items.iter_mut().filter_map(Option::take).collect();
                    heap.push(item);
                    *self = List::Heap(heap);
                }
                List::Heap(heap) => heap.push(item),
            }
        }

        pub(super) fn len(&self) -> usize {
            match self {
                List::Inline(_, len) => *len,
                List::Heap(heap) => heap.len(),
            }
        }

        /// The items, in order, on the heap.
        pub(super) fn into_boxed_slice(self) -> Box<[T]> {
            match self {
                List::Inline(items, len) => items.into_iter().take(len).flatten().collect(),
                List::Heap(heap) => heap.into_boxed_slice(),
            }
        }

        pub(super) fn last_mut(&mut self) -> Option<&mut T> {
            match self {
                List::Inline(items, len) => items[..*len].last_mut().and_then(Option::as_mut),
                List::Heap(heap) => heap.last_mut(),
            }
        }

        pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
            let (inline, heap): (&[Option<T>], &[T]) = match self {
                List::Inline(items, len) => (&items[..*len], &[]),
                List::Heap(heap) => (&[], heap),
            };
            inline.iter().flatten().chain(heap)
        }

        pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
            let (inline, heap): (&mut [Option<T>], &mut [T]) = match self {
                List::Inline(items, len) => (&mut items[..*len], &mut []),
                List::Heap(heap) => (&mut [], heap),
            };
            inline.iter_mut().flatten().chain(heap)
        }

        /// Sorts by `key`, stably.
        pub(super) fn sort_by_key<K: Ord>(&mut self, key: impl Fn(&T) -> K) {
            match self {
                List::Inline(items, len) => {
                    items[..*len].sort_by_key(|item| item.as_ref().map(&key))
                }
                List::Heap(heap) => heap.sort_by_key(key),
            }
        }
    }

    /// A wait list: contiguous, as `clEnqueue*` takes it, on the stack up to [`INLINE`].
    pub(super) struct WaitList {
        inline: [cl_event; INLINE],
        len: usize,
        heap: Vec<cl_event>,
    }

    impl WaitList {
        pub(super) fn new() -> Self {
            WaitList {
                inline: [std::ptr::null_mut(); INLINE],
                len: 0,
                heap: Vec::new(),
            }
        }

        pub(super) fn push(&mut self, event: cl_event) {
            if self.len < INLINE {
                self.inline[self.len] = event;
                self.len += 1;
            } else {
                if self.heap.is_empty() {
                    self.heap.extend_from_slice(&self.inline);
                }
                self.heap.push(event);
            }
        }

        pub(super) fn as_slice(&self) -> &[cl_event] {
            if self.heap.is_empty() {
                &self.inline[..self.len]
            } else {
                &self.heap
            }
        }

        /// Sorts the events and drops repeats.
        pub(super) fn sort_dedup(&mut self) {
            if self.heap.is_empty() {
                let events = &mut self.inline[..self.len];
                events.sort_unstable_by_key(|&e| e as usize);
                let mut kept = 0;
                for i in 0..events.len() {
                    if kept == 0 || events[i] != events[kept - 1] {
                        events[kept] = events[i];
                        kept += 1;
                    }
                }
                self.len = kept;
            } else {
                self.heap.sort_unstable_by_key(|&e| e as usize);
                self.heap.dedup();
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_list_keeps_its_order_and_sorts_across_the_heap_boundary() {
            for n in [0, 1, INLINE, INLINE + 1, 3 * INLINE] {
                let mut list = List::new();
                for i in (0..n).rev() {
                    list.push(i);
                }
                assert_eq!(list.len(), n);
                assert_eq!(
                    list.iter().copied().collect::<Vec<_>>(),
                    (0..n).rev().collect::<Vec<_>>()
                );
                list.sort_by_key(|&i| i);
                assert_eq!(
                    list.iter().copied().collect::<Vec<_>>(),
                    (0..n).collect::<Vec<_>>()
                );
                for item in list.iter_mut() {
                    *item += 1;
                }
                assert_eq!(
                    list.last_mut().copied(),
                    n.checked_sub(1).map(|last| last + 1)
                );
            }
        }

        #[test]
        fn a_wait_list_is_contiguous_sorted_and_free_of_repeats_at_every_size() {
            for n in [0usize, 1, INLINE, INLINE + 1, 3 * INLINE] {
                let mut wait = WaitList::new();
                for i in 0..n {
                    // Every event twice, newest first.
                    let e = (8 * (n - i)) as cl_event;
                    wait.push(e);
                    wait.push(e);
                }
                assert_eq!(wait.as_slice().len(), 2 * n);
                wait.sort_dedup();
                let expected: Vec<cl_event> = (1..=n).map(|i| (8 * i) as cl_event).collect();
                assert_eq!(wait.as_slice(), &expected[..]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Makes every fold on this thread fail, as an enqueue the driver refuses would.
        pub(super) static FAIL_FOLDS: Cell<bool> = const { Cell::new(false) };
    }

    #[test]
    fn the_queue_entry_point_follows_the_device_version() {
        assert_eq!(opencl_major("OpenCL 1.2 Oclgrind 21.10"), 1);
        assert_eq!(opencl_major("OpenCL 3.0 CUDA"), 3);
        assert_eq!(opencl_major("OpenCL 3.0 PoCL HSTR: pthread-x86_64"), 3);
        assert_eq!(opencl_major("OpenCL 2.1 AMD-APP"), 2);
        assert_eq!(opencl_major("garbage"), 1);
        assert_eq!(opencl_major(""), 1);
    }

    /// A fold that fails after the enqueue must not leave the other buffers of the
    /// command without its event (they could be released while it runs).
    #[test]
    fn a_command_is_recorded_on_every_buffer_even_when_a_fold_fails() {
        let Ok(ctx) = crate::Context::from_env() else {
            return;
        };
        let Ok(ooo) = ctx.out_of_order_queue() else {
            return;
        };
        let a = ctx.buffer::<u32>(16).unwrap();
        let b = ctx.buffer::<u32>(16).unwrap();
        let gate = ctx.user_event().unwrap();
        let reads: Vec<_> = (0..crate::tracker::FOLD_AT)
            .map(|_| ooo.after(&[gate.event()]).read_owned(&a).unwrap())
            .collect();
        FAIL_FOLDS.set(true);
        let copied = ooo.after(&[gate.event()]).copy(&a, &b);
        FAIL_FOLDS.set(false);
        let on_b = b.mem().lock_record().events().len();
        gate.complete().unwrap();
        for read in reads {
            read.wait().unwrap();
        }
        let copy = copied.expect("the copy was enqueued, so it is reported");
        copy.wait().unwrap();
        assert_eq!(on_b, 1, "the copy is missing from its destination's record");
    }
}
