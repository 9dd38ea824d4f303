//! Transfers: writes, reads, copies and fills, checked against the buffers' ranges.

use std::ops::Range;
use std::ptr;

use super::host::HostMemory;
use super::pending::{PendingRead, PendingWrite};
use super::queue::After;
use super::view::{IntoView, View};
use crate::error::{Error, Result, Transfer};
use crate::event::Event;
use crate::ffi;
use crate::pod::Pod;
use crate::record::failure::settle;
use crate::record::history::{MapStep, Writes};
use crate::record::submit::Touch;
use crate::tracker::{Access, Span};

/// Checks `range` against the buffer as [`check_range`] does, and returns its length; a
/// reversed range is [`Error::ReversedRange`].
pub(super) fn check_span(
    transfer: Transfer,
    range: &Range<usize>,
    buffer_len: usize,
) -> Result<usize> {
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

/// The bytes of `len` elements at element `offset` of a buffer of `buffer_len` elements
/// (checked against it before), for the tracker's *byte ranges* rule: [`Span::ALL`] when
/// they are the whole buffer, as a kernel argument's are.
pub(super) fn span_of<T: Pod>(offset: usize, len: usize, buffer_len: usize) -> Span {
    if offset == 0 && len == buffer_len {
        return Span::ALL;
    }
    let size = size_of::<T>() as u64;
    Span::new(offset as u64 * size, (offset + len) as u64 * size)
}

pub(super) fn check_range(
    transfer: Transfer,
    offset: usize,
    len: usize,
    buffer_len: usize,
) -> Result<()> {
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

impl After<'_> {
    fn enqueue_write<T: Pod>(&self, view: View<'_, T>, offset: usize, data: &[T]) -> Result<Event> {
        let at = view.at(Transfer::Write, offset, data.len())?;
        let block = view.block();
        let target = view.target(self.queue.core.limits.base_align);
        let (mem, byte_offset) = (target.mem, target.byte_offset::<T>(at));
        let touch = Touch::host(block, Access::Write, view.covers(at, data.len()))
            .within(target.span(view.span(at, data.len())));
        let event = self.submit().run(&[touch], |wait| {
            // SAFETY: the queue and the buffer are live (borrowed); the range was checked
            // against the buffer; `data` stays alive until the command ends: the callers
            // either wait for it or own the memory (the *lent host memory* rule); the
            // wait list holds live events (retained by the locked records).
            unsafe {
                ffi::enqueue_write(
                    self.queue.core.raw(),
                    mem,
                    byte_offset,
                    size_of_val(data),
                    data.as_ptr().cast(),
                    wait,
                )
            }
        })?;
        Ok(event)
    }

    /// Enqueues a non-blocking read of `len` elements at `offset` of `buffer` into `out`,
    /// which must stay valid and unaliased until the command ends. `map` is
    /// [`MapStep::Map`] for a staged read mapping (the *staged read mappings* rule of
    /// [`crate::core::staging`]), recorded as a map; [`MapStep::None`] otherwise.
    pub(super) fn enqueue_read<T: Pod>(
        &self,
        view: View<'_, T>,
        offset: usize,
        out: *mut T,
        len: usize,
        writers: &mut Writes,
        map: MapStep,
    ) -> Result<Event> {
        let at = view.at(Transfer::Read, offset, len)?;
        let block = view.block();
        let target = view.target(self.queue.core.limits.base_align);
        let (mem, byte_offset) = (target.mem, target.byte_offset::<T>(at));
        let touch = [Touch {
            map,
            ..Touch::host(block, Access::Read, false).within(target.span(view.span(at, len)))
        }];
        let event = self.submit().run_reading(
            &touch,
            |wait| {
                // SAFETY: as in `enqueue_write`; the callers keep `out` alive and unaliased
                // until the command ends (the *lent host memory* rule); every bit pattern
                // is a valid `T: Pod`.
                unsafe {
                    ffi::enqueue_read(
                        self.queue.core.raw(),
                        mem,
                        byte_offset,
                        len * size_of::<T>(),
                        out.cast(),
                        wait,
                    )
                }
            },
            Some(writers),
        )?;
        Ok(event)
    }

    /// Writes `data` to the start of `buffer` and blocks until that write is done.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when `data` is longer than the buffer, [`Error::ZeroLength`]
    /// when empty, [`Error::CommandFailed`] when the write failed.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<i32>(8)?;
    /// let data = [7; 8];
    /// queue.write(&buf, &data)?; // `data` is free again when this returns
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, data);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write<'v, T: Pod>(&self, buffer: impl IntoView<'v, T>, data: &[T]) -> Result<()> {
        self.write_at(buffer, 0, data)
    }

    /// Writes `data` at element `offset` of `buffer` and blocks until that write is done.
    ///
    /// # Errors
    ///
    /// As [`After::write`].
    pub fn write_at<'v, T: Pod>(
        &self,
        buffer: impl IntoView<'v, T>,
        offset: usize,
        data: &[T],
    ) -> Result<()> {
        let event = self.enqueue_write(buffer.into_view(), offset, data)?;
        // `data` is borrowed (the *lent host memory* rule), so this returns only when the command has ended.
        event.wait()
    }

    /// Writes `data` to the start of `buffer` without blocking. The library owns `data`
    /// until the write has ended.
    ///
    /// # Errors
    ///
    /// As [`After::write`], except that a failure of the command shows in the event.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<f32>(1024)?;
    /// let written = queue.write_owned(&buf, vec![0.5; 1024])?; // returns at once
    /// written.wait()?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![0.5; 1024]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_owned<'v, T: Pod>(
        &self,
        buffer: impl IntoView<'v, T>,
        data: Vec<T>,
    ) -> Result<Event> {
        self.write_owned_at(buffer, 0, data)
    }

    /// Writes `data` at element `offset` of `buffer` without blocking; see
    /// [`After::write_owned`].
    ///
    /// # Errors
    ///
    /// As [`After::write_owned`].
    pub fn write_owned_at<'v, T: Pod>(
        &self,
        buffer: impl IntoView<'v, T>,
        offset: usize,
        data: Vec<T>,
    ) -> Result<Event> {
        let view = buffer.into_view();
        let event = self.enqueue_write(view, offset, &data)?;
        view.block().keep_alive(event.clone(), Box::new(data));
        Ok(event)
    }

    /// Writes `data` to the start of `buffer` without blocking, and hands `data` back once
    /// the write has ended ([`PendingWrite::wait`], or `.await`): a streaming program reuses
    /// one allocation for every frame instead of a new `Vec` per write.
    ///
    /// # Errors
    ///
    /// As [`After::write_owned`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1024)?;
    /// let mut frame = vec![0u32; 1024];
    /// for i in 0..3 {
    ///     frame.fill(i);
    ///     frame = queue.write_lent(&buf, frame)?.wait()?; // the same allocation back
    /// }
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![2; 1024]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_lent<'v, T: Pod, H: HostMemory<T>>(
        &self,
        buffer: impl IntoView<'v, T>,
        data: H,
    ) -> Result<PendingWrite<T, H>> {
        // The device reads `data`'s elements, which moving `data` does not move (a `Vec`'s
        // heap memory, a host buffer's mapping); the `PendingWrite` owns them until the
        // write has ended (the *lent host memory* rule).
        let event = self.enqueue_write(buffer.into_view(), 0, data.elements())?;
        Ok(PendingWrite::new(event, data))
    }

    /// Reads the start of `buffer` into `out` and blocks until that read is done.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when `out` is longer than the buffer, [`Error::ZeroLength`]
    /// when empty, [`Error::CommandFailed`] when the read failed.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer_from(&[1u8, 2, 3, 4])?;
    /// let mut out = [0u8; 4];
    /// queue.read(&buf, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read<'v, T: Pod>(&self, buffer: impl IntoView<'v, T>, out: &mut [T]) -> Result<()> {
        self.read_at(buffer, 0, out)
    }

    /// Reads from element `offset` of `buffer` into `out` and blocks until done.
    ///
    /// # Errors
    ///
    /// As [`After::read`].
    pub fn read_at<'v, T: Pod>(
        &self,
        buffer: impl IntoView<'v, T>,
        offset: usize,
        out: &mut [T],
    ) -> Result<()> {
        let view = buffer.into_view();
        let core = &self.queue.core;
        let bytes = size_of_val(out);
        if let Some((staging, block)) = core.stage(bytes) {
            // The read goes into a pinned block of the queue's, copied out once it has
            // ended ([`crate::core::staging`]).
            let read = (|| {
                let mut writers = Writes::default();
                let event = self.enqueue_read(
                    view,
                    offset,
                    block.ptr().cast(),
                    out.len(),
                    &mut writers,
                    MapStep::None,
                )?;
                settle(&event, &writers)
            })();
            if read.is_ok() {
                // SAFETY: the read has ended and wrote `bytes` bytes at the block's address
                // (at least `bytes` long, used by this read alone); `out` holds `bytes`
                // bytes and does not overlap the block; every bit pattern is a valid
                // `T: Pod`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        block.ptr().cast::<u8>(),
                        out.as_mut_ptr().cast::<u8>(),
                        bytes,
                    );
                }
            }
            // The read has ended, or was never enqueued (`settle` returns only after).
            staging.give_back(block, core.raw());
            return read;
        }
        let mut writers = Writes::default();
        let event = self.enqueue_read(
            view,
            offset,
            out.as_mut_ptr(),
            out.len(),
            &mut writers,
            MapStep::None,
        )?;
        // `out` is borrowed (the *lent host memory* rule), so this returns only when the command has ended.
        settle(&event, &writers)
    }

    /// Reads the whole buffer into a new `Vec` without blocking.
    ///
    /// # Errors
    ///
    /// As [`After::read_owned_range`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer_from(&[3u64; 100])?;
    /// let pending = queue.read_owned(&buf)?; // returns at once
    /// // ... host work here overlaps the read ...
    /// assert_eq!(pending.wait()?, vec![3; 100]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_owned<'v, T: Pod>(&self, buffer: impl IntoView<'v, T>) -> Result<PendingRead<T>> {
        let view = buffer.into_view();
        self.read_owned_range(view, 0..view.len())
    }

    /// Reads elements `range` of `buffer` into a new `Vec` without blocking; the `Vec`
    /// comes back from [`PendingRead::wait`].
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::ZeroLength`] for a bad range.
    pub fn read_owned_range<'v, T: Pod>(
        &self,
        buffer: impl IntoView<'v, T>,
        range: Range<usize>,
    ) -> Result<PendingRead<T>> {
        self.read_range_into(buffer, range, Vec::new())
    }

    /// Reads the whole buffer without blocking into `data`, whose allocation is reused
    /// (grown if it is too small; its contents are replaced): [`PendingRead::wait`] hands it
    /// back filled. A streaming program reads every frame into one allocation.
    ///
    /// # Errors
    ///
    /// As [`After::read_owned_range`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer_from(&[5u32; 256])?;
    /// let mut frame = Vec::with_capacity(256);
    /// for _ in 0..3 {
    ///     frame = queue.read_into(&buf, frame)?.wait()?;
    ///     assert_eq!(frame, vec![5u32; 256]);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_into<'v, T: Pod, H: HostMemory<T>>(
        &self,
        buffer: impl IntoView<'v, T>,
        data: H,
    ) -> Result<PendingRead<T, H>> {
        let view = buffer.into_view();
        self.read_range_into(view, 0..view.len(), data)
    }

    /// Reads elements `range` of `buffer` without blocking into `data`, whose allocation is
    /// reused; see [`After::read_into`].
    ///
    /// # Errors
    ///
    /// As [`After::read_owned_range`].
    pub fn read_range_into<'v, T: Pod, H: HostMemory<T>>(
        &self,
        buffer: impl IntoView<'v, T>,
        range: Range<usize>,
        mut data: H,
    ) -> Result<PendingRead<T, H>> {
        let view = buffer.into_view();
        let len = check_span(Transfer::Read, &range, view.len())?;
        let room = data.room_for(len)?;
        // The device fills the room (a `Vec`'s spare capacity, a host buffer's first `len`
        // elements), which moving `data` does not move; `PendingRead` owns it until the
        // read has completed (the *lent host memory* rule).
        let mut writers = Writes::default();
        let event = self.enqueue_read(view, range.start, room, len, &mut writers, MapStep::None)?;
        Ok(PendingRead::new(event, writers, data, len))
    }
}

impl After<'_> {
    /// Copies all of `src` to the start of `dst`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when `dst` is shorter than `src`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let src = ctx.buffer_from(&[1u32, 2, 3])?;
    /// let dst = ctx.buffer::<u32>(5)?;
    /// queue.copy(&src, &dst)?; // no wait needed: the read below is ordered after it
    /// assert_eq!(queue.read_owned(&dst)?.wait()?, [1, 2, 3, 0, 0]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn copy<'s, 'd, T: Pod>(
        &self,
        src: impl IntoView<'s, T>,
        dst: impl IntoView<'d, T>,
    ) -> Result<Event> {
        let src = src.into_view();
        self.copy_range(src, 0, dst, 0, src.len())
    }

    /// Copies `len` elements from `src` at `src_offset` to `dst` at `dst_offset`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] when either range leaves its buffer, [`Error::ZeroLength`]
    /// for `len == 0`, [`Error::Cl`] naming `clEnqueueCopyBuffer` with
    /// `CL_MEM_COPY_OVERLAP` for overlapping ranges of one buffer, whether each side is the
    /// buffer or a view of it: refused before the driver sees them, and nothing recorded.
    pub fn copy_range<'s, 'd, T: Pod>(
        &self,
        src: impl IntoView<'s, T>,
        src_offset: usize,
        dst: impl IntoView<'d, T>,
        dst_offset: usize,
        len: usize,
    ) -> Result<Event> {
        let (src, dst) = (src.into_view(), dst.into_view());
        let src_at = src.at(Transfer::CopySource, src_offset, len)?;
        let dst_at = dst.at(Transfer::CopyDestination, dst_offset, len)?;
        let (s, d) = (src.block(), dst.block());
        // Refused here, not left to the driver: a view may go through its sub-buffer, and
        // Intel's runtime and NVIDIA's see no overlap between a sub-buffer and its parent
        // (or another sub-buffer of it), and run the copy.
        if s.id == d.id && src_at < dst_at + len && dst_at < src_at + len {
            return Err(Error::cl(
                "clEnqueueCopyBuffer",
                ffi::codes::CL_MEM_COPY_OVERLAP,
            ));
        }
        let align = self.queue.core.limits.base_align;
        let (from, to) = (src.target(align), dst.target(align));
        let (from_mem, from_offset) = (from.mem, from.byte_offset::<T>(src_at));
        let (to_mem, to_offset) = (to.mem, to.byte_offset::<T>(dst_at));
        let touches = [
            Touch::new(s, Access::Read).within(from.span(src.span(src_at, len))),
            Touch::write(d, dst.covers(dst_at, len)).within(to.span(dst.span(dst_at, len))),
        ];
        let event = self.submit().run(&touches, |wait| {
            // SAFETY: the queue and both buffers are live (borrowed); both ranges were
            // checked against their buffers, and do not overlap where they are one buffer
            // (refused above); the wait list holds live events.
            unsafe {
                ffi::enqueue_copy(
                    self.queue.core.raw(),
                    from_mem,
                    to_mem,
                    from_offset,
                    to_offset,
                    len * size_of::<T>(),
                    wait,
                )
            }
        })?;
        Ok(event)
    }

    /// Sets every element of `buffer` to `value`.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] from `clEnqueueFillBuffer` (the pattern size must be 1, 2, 4, ...,
    /// 128 bytes).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<f32>(512)?;
    /// queue.fill(&buf, 1.25)?.wait()?;
    /// assert!(queue.read_owned(&buf)?.wait()?.iter().all(|&x| x == 1.25));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fill<'v, T: Pod>(&self, buffer: impl IntoView<'v, T>, value: T) -> Result<Event> {
        let view = buffer.into_view();
        self.fill_range(view, value, 0..view.len())
    }

    /// Sets the elements `range` of `buffer` to `value`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::ZeroLength`] for a bad range, [`Error::Cl`] as
    /// [`After::fill`].
    pub fn fill_range<'v, T: Pod>(
        &self,
        buffer: impl IntoView<'v, T>,
        value: T,
        range: Range<usize>,
    ) -> Result<Event> {
        let view = buffer.into_view();
        let len = check_span(Transfer::Fill, &range, view.len())?;
        let at = view.offset() + range.start;
        let block = view.block();
        let target = view.target(self.queue.core.limits.base_align);
        let (mem, byte_offset) = (target.mem, target.byte_offset::<T>(at));
        let touch =
            Touch::write(block, view.covers(at, len)).within(target.span(view.span(at, len)));
        let event = self.submit().run(&[touch], |wait| {
            // SAFETY: the queue and the buffer are live (borrowed); the range was checked;
            // the wait list holds live events; `value` is `size_of::<T>()` readable bytes,
            // copied by OpenCL before it returns.
            unsafe {
                ffi::enqueue_fill(
                    self.queue.core.raw(),
                    mem,
                    ptr::from_ref(&value).cast(),
                    size_of::<T>(),
                    byte_offset,
                    len * size_of::<T>(),
                    wait,
                )
            }
        })?;
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_inside_the_buffer_passes_and_one_past_its_end_is_out_of_range() {
        assert!(check_range(Transfer::Read, 0, 10, 10).is_ok());
        assert!(check_range(Transfer::Read, 9, 1, 10).is_ok());
        assert!(matches!(
            check_range(Transfer::Write, 9, 2, 10),
            Err(Error::OutOfRange {
                transfer: Transfer::Write,
                offset: 9,
                len: 2,
                buffer_len: 10
            })
        ));
        assert!(matches!(
            check_range(Transfer::Fill, usize::MAX, 2, 10),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            check_range(Transfer::Read, 0, 0, 10),
            Err(Error::ZeroLength)
        ));
    }

    #[test]
    fn a_span_gives_its_length_and_a_reversed_one_names_both_ends() {
        assert_eq!(check_span(Transfer::Fill, &(2..5), 10).ok(), Some(3));
        let reversed = std::ops::Range { start: 5, end: 2 };
        assert!(matches!(
            check_span(Transfer::Map, &reversed, 10),
            Err(Error::ReversedRange {
                transfer: Transfer::Map,
                start: 5,
                end: 2
            })
        ));
        assert!(matches!(
            check_span(Transfer::Read, &(4..4), 10),
            Err(Error::ZeroLength)
        ));
        assert!(matches!(
            check_span(Transfer::Read, &(8..11), 10),
            Err(Error::OutOfRange { .. })
        ));
    }
}
