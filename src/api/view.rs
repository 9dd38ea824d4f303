//! Views: a range of a buffer's elements that commands take in place of the whole buffer.
//!
//! A [`View`] borrows its buffer, so it cannot outlive it, and the buffer cannot be
//! released, resized or dropped while a view of it is alive. A view's commands are
//! recorded in its buffer's record with the view's bytes (the tracker's *byte ranges*
//! rule): commands on disjoint views never wait on each other, overlapping ones keep every
//! ordering rule, a command on the whole buffer waits for the views' commands and the
//! reverse, and the buffer's release waits for all of them.
//!
//! # Rules
//!
//! - **A kernel argument is a sub-buffer.** A view passed to a kernel is a sub-buffer
//!   starting at its first byte, made once and kept with the buffer
//!   ([`crate::record::sub`]), whose origin must be a multiple of the device's
//!   `CL_DEVICE_MEM_BASE_ADDR_ALIGN` ([`Error::ViewMisaligned`] otherwise). Views of one
//!   buffer passed to kernels may overlap, as halos do: reads of overlapping views run at
//!   once, and a command that writes is ordered after every pending command on bytes it
//!   overlaps (the tracker's *sub-buffers* rule), never refused. A view that starts where
//!   an earlier one does and ends within it is given the earlier, longer sub-buffer (the
//!   kernel must touch only the view's elements). A part of a buffer at any element, with
//!   no sub-buffer, is a range argument ([`Arg::read_range`](crate::Arg::read_range)): the
//!   whole buffer, with the range's bytes in the record.
//! - **Through the view's sub-buffer.** OpenCL leaves concurrent use of a buffer and a
//!   sub-buffer of it undefined where one writes, whatever bytes each touches (the
//!   tracker's *sub-buffers* rule orders them). So that a transfer on one view need not
//!   wait for a kernel writing another, writes, reads, copies and fills on a view that
//!   has a sub-buffer (one passed to a kernel) go through it; on any other part of a
//!   buffer they go through the buffer itself. Maps and commands from other code
//!   ([`BufferUse`](crate::BufferUse)) use the buffer itself, at the view's byte offset.
//! - **No copy within overlapping bytes.** A copy whose source and destination are
//!   overlapping bytes of one buffer, whether each side is the buffer or a view of it, is
//!   refused with `CL_MEM_COPY_OVERLAP` before the driver sees it and records nothing:
//!   through a sub-buffer, Intel's runtime and NVIDIA's do not see the overlap and run it.

use std::fmt;
use std::ops::{Bound, Deref, RangeBounds};

use super::buffer::ClBuffer;
use crate::error::{Error, Result, Transfer};
use crate::ffi::cl_mem;
use crate::pod::Pod;
use crate::record::block::Block;
use crate::record::sub::Held;
use crate::tracker::Span;

/// Elements `offset .. offset + len` of a [`ClBuffer`], taken by every command in place of
/// the buffer (see [`ClBuffer::view`]). Offsets given to a command on a view count from
/// the view's start.
///
/// # Examples
///
/// Two writers of a buffer's two halves, which do not wait on each other:
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(1024)?;
/// let (low, high) = buf.split_at(512)?;
/// queue.fill(low, 1)?;
/// queue.fill(high, 2)?;
/// let mut out = vec![0; 512];
/// queue.read(high, &mut out)?;
/// assert_eq!(out, vec![2; 512]);
/// # Ok(())
/// # }
/// ```
///
/// A buffer cannot be released, resized or dropped while a view of it is alive:
///
/// ```compile_fail
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let buf = ctx.buffer::<u32>(16)?;
/// let view = buf.view(..8)?;
/// buf.release()?; // error[E0505]: cannot move out of `buf` because it is borrowed
/// ctx.queue()?.fill(view, 1)?;
/// # Ok(())
/// # }
/// ```
pub struct View<'b, T: Pod> {
    buffer: &'b ClBuffer<T>,
    offset: usize,
    len: usize,
}

impl<T: Pod> Clone for View<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Pod> Copy for View<'_, T> {}

impl<T: Pod> fmt::Debug for View<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("buffer", &self.buffer)
            .finish()
    }
}

/// The elements `range` selects of `len`, checked: start at most end, end at most `len`,
/// at least one element.
pub(super) fn resolve(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    let (Some(start), Some(end)) = (start, end) else {
        return Err(Error::OutOfRange {
            transfer: Transfer::View,
            offset: usize::MAX,
            len: 0,
            buffer_len: len,
        });
    };
    // A start past the end leaves the buffer whatever the end (`17..` of 16 elements is
    // not the reversed range `17..16`, which the caller never wrote).
    if start > len {
        return Err(Error::OutOfRange {
            transfer: Transfer::View,
            offset: start,
            len: end.saturating_sub(start),
            buffer_len: len,
        });
    }
    let count = end.checked_sub(start).ok_or(Error::ReversedRange {
        transfer: Transfer::View,
        start,
        end,
    })?;
    super::transfer::check_range(Transfer::View, start, count, len)?;
    Ok((start, count))
}

impl<T: Pod> ClBuffer<T> {
    /// A view of the elements `range` (any range: `2..10`, `..512`, `512..`, `..`), which
    /// every command takes in place of the buffer; see [`View`].
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] (naming [`Transfer::View`]) for a range that leaves the
    /// buffer (one that starts past its end included, whatever its end),
    /// [`Error::ReversedRange`] for one inside it whose end comes before its start,
    /// [`Error::ZeroLength`] for an empty one.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(8)?;
    /// let middle = buf.view(2..6)?;
    /// assert_eq!((middle.offset(), middle.len()), (2, 4));
    /// queue.fill(middle, 7)?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [0, 0, 7, 7, 7, 7, 0, 0]);
    /// assert!(buf.view(4..9).is_err()); // past the end
    /// # Ok(())
    /// # }
    /// ```
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<View<'_, T>> {
        View::whole(self).view(range)
    }

    /// Two views: the elements before `mid`, and those from `mid` on.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLength`] when `mid` is 0 or the buffer's length (a view holds at least
    /// one element), [`Error::OutOfRange`] when past it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<i16>(6)?;
    /// let (head, tail) = buf.split_at(2)?;
    /// queue.write(head, &[1, 2])?;
    /// queue.fill(tail, -1)?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [1, 2, -1, -1, -1, -1]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn split_at(&self, mid: usize) -> Result<(View<'_, T>, View<'_, T>)> {
        View::whole(self).split_at(mid)
    }
}

impl<'b, T: Pod> View<'b, T> {
    /// The whole buffer.
    pub(crate) fn whole(buffer: &'b ClBuffer<T>) -> Self {
        View {
            buffer,
            offset: 0,
            len: buffer.len(),
        }
    }

    /// A view of the elements `range` of this view (counted from its start).
    ///
    /// # Errors
    ///
    /// As [`ClBuffer::view`].
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<View<'b, T>> {
        let (start, len) = resolve(range, self.len)?;
        Ok(View {
            buffer: self.buffer,
            offset: self.offset + start,
            len,
        })
    }

    /// Two views of this one: the elements before `mid`, and those from `mid` on.
    ///
    /// # Errors
    ///
    /// As [`ClBuffer::split_at`].
    pub fn split_at(&self, mid: usize) -> Result<(View<'b, T>, View<'b, T>)> {
        Ok((self.view(..mid)?, self.view(mid..)?))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a view holds at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Where the view starts in its buffer, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Where the view starts in its buffer, in bytes.
    pub fn byte_offset(&self) -> usize {
        self.offset * size_of::<T>()
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The buffer it is a view of.
    pub fn buffer(&self) -> &'b ClBuffer<T> {
        self.buffer
    }

    /// Whether the view is its whole buffer.
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.len == self.buffer.len()
    }

    /// The buffer's block.
    pub(crate) fn block(&self) -> &'b Block {
        self.buffer.block()
    }

    /// `len` elements at `offset` of the view, checked against it for `transfer`: their
    /// offset in the buffer.
    pub(crate) fn at(&self, transfer: Transfer, offset: usize, len: usize) -> Result<usize> {
        super::transfer::check_range(transfer, offset, len, self.len)?;
        Ok(self.offset + offset)
    }

    /// The bytes of `len` elements at element `at` of the buffer (checked before), for the
    /// tracker's *byte ranges* rule: [`Span::ALL`] for the whole buffer.
    pub(crate) fn span(&self, at: usize, len: usize) -> Span {
        super::transfer::span_of::<T>(at, len, self.buffer.len())
    }

    /// Whether `len` elements at element `at` of the buffer are all of it.
    pub(crate) fn covers(&self, at: usize, len: usize) -> bool {
        at == 0 && len == self.buffer.len()
    }

    /// The view's own bytes, for the tracker, as a kernel argument reaches them: through
    /// the view's sub-buffer unless it is the whole buffer.
    pub(crate) fn arg_span(&self) -> Span {
        let span = self.span(self.offset, self.len);
        if self.is_whole() {
            span
        } else {
            span.through_sub_buffer()
        }
    }

    /// The view's own bytes, for the tracker, through the buffer's own memory object.
    pub(crate) fn own_span(&self) -> Span {
        self.span(self.offset, self.len)
    }

    /// The memory object a transfer on the view goes through (the *through the view's
    /// sub-buffer* rule of [`crate::api::view`]), on a device that places sub-buffers at
    /// multiples of `align` bytes.
    pub(crate) fn target(&self, align: usize) -> Target {
        let own = Target {
            mem: self.block().raw(),
            origin: 0,
            sub: None,
        };
        if self.is_whole() {
            return own;
        }
        match self
            .block()
            .kept_sub(self.byte_offset(), self.bytes(), align)
        {
            Some(sub) => Target {
                mem: sub.raw(),
                origin: self.offset,
                sub: Some(sub),
            },
            None => own,
        }
    }

    /// The view's region of the block, in bytes: `None` for the whole buffer.
    pub(crate) fn region(&self) -> Option<(usize, usize)> {
        (!self.is_whole()).then(|| (self.byte_offset(), self.bytes()))
    }
}

/// Where a transfer on a view goes: the buffer's own memory object, or the view's
/// sub-buffer.
pub(crate) struct Target {
    /// The memory object.
    pub(crate) mem: cl_mem,
    /// The buffer's element at `mem`'s start.
    origin: usize,
    /// The sub-buffer, if the transfer goes through one.
    sub: Option<Held>,
}

impl Target {
    /// The byte offset in `mem` of element `at` of the buffer.
    pub(crate) fn byte_offset<T>(&self, at: usize) -> usize {
        (at - self.origin) * size_of::<T>()
    }

    /// `span` (bytes of the buffer), through this object (rule 10 of the tracker).
    pub(crate) fn span(&self, span: Span) -> Span {
        if self.sub.is_some() {
            span.through_sub_buffer()
        } else {
            span
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What commands take as a buffer: a [`&ClBuffer`](ClBuffer) (all of it) or a [`View`]
/// of one (by value or by reference), also behind a smart pointer (`&Arc<ClBuffer<T>>`).
/// Sealed: the library's own types only.
///
/// # Examples
///
/// A function that, like the library's commands, takes a buffer or a view of one:
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{IntoView, Queue};
/// fn zero<'b>(queue: &Queue, target: impl IntoView<'b, u32>) -> cl_lifetime::Result<()> {
///     queue.fill(target, 0)?.wait()
/// }
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[9u32; 8])?;
/// zero(&queue, buf.view(0..4)?)?; // a view
/// assert_eq!(queue.read_owned(&buf)?.wait()?, [0, 0, 0, 0, 9, 9, 9, 9]);
/// zero(&queue, &buf)?; // the whole buffer
/// assert_eq!(queue.read_owned(&buf)?.wait()?, [0; 8]);
/// # Ok(())
/// # }
/// ```
pub trait IntoView<'b, T: Pod>: sealed::Sealed {
    /// The view this names.
    fn into_view(self) -> View<'b, T>;
}

impl<T: Pod> sealed::Sealed for &ClBuffer<T> {}
impl<T: Pod> sealed::Sealed for &mut ClBuffer<T> {}
impl<T: Pod, B: Deref<Target = ClBuffer<T>>> sealed::Sealed for &B {}
impl<T: Pod> sealed::Sealed for View<'_, T> {}
impl<T: Pod> sealed::Sealed for &View<'_, T> {}

impl<'b, T: Pod> IntoView<'b, T> for &'b ClBuffer<T> {
    fn into_view(self) -> View<'b, T> {
        View::whole(self)
    }
}

/// A buffer behind a smart pointer: `&Arc<ClBuffer<T>>`, `&Box<ClBuffer<T>>`.
impl<'b, T: Pod, B: Deref<Target = ClBuffer<T>>> IntoView<'b, T> for &'b B {
    fn into_view(self) -> View<'b, T> {
        View::whole(self)
    }
}

impl<'b, T: Pod> IntoView<'b, T> for &'b mut ClBuffer<T> {
    fn into_view(self) -> View<'b, T> {
        View::whole(self)
    }
}

impl<'b, T: Pod> IntoView<'b, T> for View<'b, T> {
    fn into_view(self) -> View<'b, T> {
        self
    }
}

impl<'b, T: Pod> IntoView<'b, T> for &View<'b, T> {
    fn into_view(self) -> View<'b, T> {
        *self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_range_resolves_to_its_elements_and_a_bad_one_is_a_typed_error() {
        assert_eq!(resolve(.., 10).ok(), Some((0, 10)));
        assert_eq!(resolve(2..5, 10).ok(), Some((2, 3)));
        assert_eq!(resolve(2..=5, 10).ok(), Some((2, 4)));
        assert_eq!(resolve(..4, 10).ok(), Some((0, 4)));
        assert_eq!(resolve(7.., 10).ok(), Some((7, 3)));
        assert!(matches!(resolve(10.., 10), Err(Error::ZeroLength)));
        assert!(matches!(
            resolve(5..11, 10),
            Err(Error::OutOfRange {
                transfer: Transfer::View,
                ..
            })
        ));
        assert!(matches!(
            resolve(..=usize::MAX, 10),
            Err(Error::OutOfRange { .. })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = resolve(6..2, 10);
        assert!(matches!(
            reversed,
            Err(Error::ReversedRange {
                transfer: Transfer::View,
                start: 6,
                end: 2
            })
        ));
    }
}
