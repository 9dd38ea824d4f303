//! Shared virtual memory: [`SvmBuffer`], an OpenCL 2.0 SVM allocation under the same
//! guarantee as a [`ClBuffer`](crate::ClBuffer).
//!
//! `clSVMFree` frees at once, whatever still uses the memory: the OpenCL specification
//! leaves the wait to the caller. An `SvmBuffer` is a block of the record layer like a
//! buffer's ([`crate::record`]), so every command that uses it is recorded with its access
//! and bytes (a kernel's, all of the allocation), and its release waits for exactly those
//! commands before `clSVMFree`.
//!
//! # Rules
//!
//! - **Recorded like a buffer.** Kernel arguments ([`Arg::read`](crate::Arg::read) and
//!   its siblings take an `SvmBuffer` or an [`SvmView`], passed with
//!   `clSetKernelArgSVMPointer`), copies and fills (`clEnqueueSVMMemcpy`,
//!   `clEnqueueSVMMemFill`), host transfers and maps (`clEnqueueSVMMap`) go through the
//!   enqueue protocol ([`crate::record::submit`]): the hazards, the failure rules, the
//!   *mapped* rule and the trace are a buffer's.
//! - **The host only through a map.** Safe code reaches the memory on the host only
//!   through [`Queue::map_svm`](crate::Queue::map_svm) and
//!   [`Queue::map_svm_mut`](crate::Queue::map_svm_mut) (or a transfer), which
//!   coarse-grained SVM needs, and which orders the host's access after the device's and
//!   the reverse on both kinds. [`SvmBuffer::as_ptr`] gives the address, for pointers
//!   stored in the memory and for raw calls; dereferencing it is the caller's `unsafe`.
//! - **Views are pointers.** A view passed to a kernel is the address of its first
//!   element: no sub-buffer, no alignment beyond the element's, and any views may overlap.
//!   Transfers, copies, fills and maps of views are ordered by the views' bytes (commands
//!   on disjoint views do not wait on each other); a kernel's are all of the allocation.
//! - **Pointers the kernel follows.** A kernel may follow pointers, or index, from the
//!   address it is given to anywhere in the same allocation: an argument that is an
//!   allocation or a view of one is recorded as using the whole allocation with the
//!   access it declares ([`Arg::read`](crate::Arg::read), [`Arg::write`](crate::Arg::write),
//!   [`Arg::read_write`](crate::Arg::read_write)), so the kernel runs after every pending
//!   write to any part of it (a read) or every pending command on it (a write), and later
//!   commands on any part of it wait for the kernel as the declared use requires. To follow
//!   pointers into another allocation, pass that allocation as an argument too, with its
//!   use, so that it is recorded and made available to the kernel.
//! - **Released after its own commands, then freed.** The release waits for the recorded
//!   commands, as a buffer's does, then calls `clSVMFree`, which frees the memory before
//!   it returns: the report's `freed` is `true`. The deferred form does the same on the
//!   reaper thread.
//! - **Only where every device has it.** A context whose devices do not all report the
//!   kind asked for refuses it with [`Error::Unsupported`](crate::Error::Unsupported)
//!   naming the capability; no SVM call reaches a driver that does not have one (an
//!   OpenCL 1.x driver has no entry points for them).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Range, RangeBounds};
use std::panic::Location;
use std::ptr;

use super::context::Context;
use super::host::HostMemory;
use super::pending::{PendingRead, PendingWrite};
use super::queue::After;
use super::transfer::{check_range, check_span, span_of};
use super::view::resolve;
use crate::core::device::SvmKind;
use crate::error::{Result, Transfer};
use crate::event::Event;
use crate::ffi;
use crate::kernel::Arg;
use crate::pod::{Pod, Ty};
use crate::record::block::{Block, Memory};
use crate::record::failure::settle;
use crate::record::history::Writes;
use crate::record::release::ReleaseReport;
use crate::record::submit::Touch;
use crate::tracker::{Access, Span};

/// A shared virtual memory allocation of `len` elements of `T` (OpenCL 2.0's
/// `clSVMAlloc`), freed only after its own commands end. The guide's chapter
/// [shared virtual memory](crate::guide::shared_virtual_memory) says how it behaves.
///
/// Create one with [`Context::svm`]. Kernels take it (or an [`SvmView`] of it) as a
/// pointer argument through [`Arg`]; the host reaches it through maps
/// ([`After::map_svm`], [`After::map_svm_mut`]) and transfers ([`After::write_svm`],
/// [`After::read_svm`], and for async code [`After::write_svm_lent`] and
/// [`After::read_svm_into`]); [`After::copy_svm`] and [`After::fill_svm`] run on the device.
///
/// # Examples
///
/// A linked list built on the host, walked by a kernel:
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Arg, Error, SvmKind};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let list = match ctx.svm::<u64>(8, SvmKind::Coarse) {
///     Ok(list) => list,
///     Err(Error::Unsupported { .. }) => return Ok(()), // an OpenCL 1.2 device
///     Err(e) => return Err(e),
/// };
/// // Node i is [value, address of the next node or 0], four nodes in reverse order.
/// let base = list.as_ptr() as u64;
/// let mut nodes = queue.map_svm_mut(&list, 0..8)?;
/// for i in 0..4 {
///     nodes[2 * i] = 10 * i as u64;
///     nodes[2 * i + 1] = if i == 0 { 0 } else { base + 16 * (i as u64 - 1) };
/// }
/// drop(nodes); // unmapped: the device sees the writes
/// let sum = ctx.buffer::<u64>(1)?;
/// let source = "__kernel void walk(__global const ulong *node, __global ulong *sum) {
///     ulong s = 0;
///     while (node) { s += node[0]; node = (__global const ulong *)node[1]; }
///     *sum = s; }";
/// let walk = ctx.program_from_source("walk", source, "")?.kernel("walk")?;
/// let head = list.view(6..8)?; // node 3
/// // SAFETY: walk reads only the nodes of `list`, its argument, through addresses inside
/// // it, and writes element 0 of `sum`, which has 1.
/// unsafe { queue.launch(&walk, &[1], &[Arg::read(head), Arg::write(&sum)])? };
/// assert_eq!(queue.read_owned(&sum)?.wait()?, [60]);
/// let report = list.release()?; // after the walk, then clSVMFree
/// assert!(report.freed);
/// # Ok(())
/// # }
/// ```
pub struct SvmBuffer<T: Pod> {
    block: Block,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod> fmt::Debug for SvmBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SvmBuffer")
            .field("len", &self.len)
            .field("kind", &self.kind())
            .field("at", &self.as_ptr())
            .field("recorded", &self.record_len())
            .finish()
    }
}

impl Context {
    /// A shared virtual memory allocation of `len` elements of `T`, of `kind`, zeroed
    /// before its first read (the *zeroed before read* rule, with `clEnqueueSVMMemFill`).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) naming the capability
    /// (`CL_DEVICE_SVM_COARSE_GRAIN_BUFFER` or `CL_DEVICE_SVM_FINE_GRAIN_BUFFER`) when a
    /// device of the context does not report it, as on every OpenCL 1.x device;
    /// [`Error::ZeroLength`](crate::Error::ZeroLength),
    /// [`Error::TooLarge`](crate::Error::TooLarge); [`Error::Cl`](crate::Error::Cl) naming
    /// `clSVMAlloc` when the driver has no memory for it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Error, SvmKind};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// match ctx.svm::<f32>(1024, SvmKind::Coarse) {
    ///     Ok(svm) => assert_eq!(svm.bytes(), 4096),
    ///     Err(Error::Unsupported { capability, .. }) => {
    ///         assert_eq!(capability, "CL_DEVICE_SVM_COARSE_GRAIN_BUFFER");
    ///         assert!(!ctx.device().supports_svm(SvmKind::Coarse));
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn svm<T: Pod>(&self, len: usize, kind: SvmKind) -> Result<SvmBuffer<T>> {
        SvmBuffer::create(self, len, kind, true, Location::caller())
    }

    /// Shared virtual memory of `len` elements left as the driver hands it out, for code
    /// that writes all of it before any read (through [`After::map_svm_mut`], say) and does
    /// not want [`Context::svm`]'s zero fill to run even once: a map for writing counts as
    /// a read. Reading it before writing reads bytes the program never wrote, as
    /// [`Context::buffer_uninitialized`] says.
    ///
    /// # Errors
    ///
    /// As [`Context::svm`].
    #[track_caller]
    pub fn svm_uninitialized<T: Pod>(&self, len: usize, kind: SvmKind) -> Result<SvmBuffer<T>> {
        SvmBuffer::create(self, len, kind, false, Location::caller())
    }
}

impl<T: Pod> SvmBuffer<T> {
    /// A new allocation, zeroed before its first read when `zeroed` (the *zeroed before
    /// read* rule).
    fn create(
        ctx: &Context,
        len: usize,
        kind: SvmKind,
        zeroed: bool,
        site: &'static Location<'static>,
    ) -> Result<Self> {
        let ctx = ctx.core();
        let bytes = Block::check_size::<T>(ctx, len)?;
        let block = Block::create_svm(ctx, bytes, kind, site)?;
        if zeroed {
            block.mark_fresh();
        }
        Ok(SvmBuffer::from_block(block, len))
    }

    /// A typed handle to `block`, SVM holding at least `len` elements of `T`.
    pub(crate) fn from_block(block: Block, len: usize) -> Self {
        debug_assert!(block.is_svm() && block.bytes() >= len * size_of::<T>());
        SvmBuffer {
            block,
            len,
            _elements: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: an allocation holds at least one element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The kind of shared virtual memory.
    pub fn kind(&self) -> SvmKind {
        match self.block.memory {
            Memory::Svm(kind) => kind,
            Memory::Buffer => unreachable!("an SvmBuffer's block is SVM"),
        }
    }

    /// The address of the first element, the same on the host and on the devices: for
    /// pointers stored in the memory, and for raw calls. The library records nothing done
    /// through it, and reading or writing it outside a mapping is the caller's `unsafe`
    /// (on coarse-grained SVM the host may touch the memory only while it is mapped).
    pub fn as_ptr(&self) -> *mut T {
        self.block.svm_at(0).cast()
    }

    /// How many events the record holds now.
    pub fn record_len(&self) -> usize {
        self.block.record_len()
    }

    /// A view of the elements `range`, which commands and kernel arguments take in place
    /// of the whole allocation.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) or
    /// [`Error::ReversedRange`](crate::Error::ReversedRange) (naming [`Transfer::View`])
    /// for a range that leaves the allocation,
    /// [`Error::ZeroLength`](crate::Error::ZeroLength) for an empty one.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<SvmView<'_, T>> {
        let (offset, len) = resolve(range, self.len)?;
        Ok(SvmView {
            svm: self,
            offset,
            len,
        })
    }

    /// Waits for every command that used the allocation, then frees it with `clSVMFree`.
    /// A failed command does not stop the release; it is listed in the report. Where the
    /// driver keeps a failed command until the commands before it on its in-order queue
    /// have ended (Intel's CPU runtime), the release waits for those too.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) naming `clSVMFree` when the driver refuses the free.
    pub fn release(mut self) -> Result<ReleaseReport> {
        self.block.retire()
    }

    /// [`SvmBuffer::release`] as a future: it awaits every command that used the
    /// allocation without blocking the task's thread, then frees it on the library's waiter
    /// thread, as [`ClBuffer::release_async`](crate::ClBuffer::release_async) does.
    /// Dropped before it is done, the future releases the allocation deferred.
    ///
    /// # Errors
    ///
    /// As [`SvmBuffer::release`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::SvmKind;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let Ok(svm) = ctx.svm::<u32>(1024, SvmKind::Coarse) else { return Ok(()) };
    /// queue.fill_svm(&svm, 3)?;
    /// let report = pollster::block_on(svm.release_async())?;
    /// assert!(report.freed && report.failed.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn release_async(
        self,
    ) -> impl std::future::Future<Output = Result<ReleaseReport>> + Send + 'static {
        let SvmBuffer { block, .. } = self;
        super::buffer::release_async(block)
    }

    /// Frees the allocation without blocking: on the context's reaper thread once every
    /// command that used it has ended, as
    /// [`ClBuffer::release_deferred`](crate::ClBuffer::release_deferred) does (an SVM
    /// allocation is never taken over by a new buffer).
    pub fn release_deferred(self) {
        let SvmBuffer { block, .. } = self;
        block.hand_back_deferred();
    }

    fn whole(&self) -> SvmView<'_, T> {
        SvmView {
            svm: self,
            offset: 0,
            len: self.len,
        }
    }
}

/// Elements `offset .. offset + len` of an [`SvmBuffer`] (see [`SvmBuffer::view`]), taken
/// by commands and kernel arguments in place of the whole allocation. Commands on a view
/// are recorded over its elements only. A kernel given a view gets the address of its
/// first element and is recorded as using the whole allocation with its declared access,
/// since it may reach any of it from there (the guide's chapter
/// [shared virtual memory](crate::guide::shared_virtual_memory)).
pub struct SvmView<'b, T: Pod> {
    svm: &'b SvmBuffer<T>,
    offset: usize,
    len: usize,
}

impl<T: Pod> Clone for SvmView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Pod> Copy for SvmView<'_, T> {}

impl<T: Pod> fmt::Debug for SvmView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SvmView")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("svm", &self.svm)
            .finish()
    }
}

impl<'b, T: Pod> SvmView<'b, T> {
    /// First element, counted from the allocation's start.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a view holds at least one element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn block(&self) -> &'b Block {
        &self.svm.block
    }

    /// The bytes of `len` elements at element `at` of the allocation.
    fn span(&self, at: usize, len: usize) -> Span {
        span_of::<T>(at, len, self.svm.len)
    }

    /// Element `offset` of the view, for `len` elements, checked against the view and
    /// counted from the allocation's start.
    fn at(&self, transfer: Transfer, offset: usize, len: usize) -> Result<usize> {
        check_range(transfer, offset, len, self.len)?;
        Ok(self.offset + offset)
    }

    /// The view as a kernel argument the kernel uses with `access`: the address of its
    /// first element, recorded over the whole allocation (the *pointers the kernel
    /// follows* rule), since the kernel may reach any of it from there.
    pub(crate) fn arg(self, access: Access) -> Arg<'b> {
        let whole = self.offset == 0 && self.len == self.svm.len;
        let size = size_of::<T>();
        let region = (!whole).then_some((self.offset * size, self.len * size));
        Arg::block(self.block(), access, Ty::of::<T>(), region, Span::ALL)
    }
}

/// What SVM commands take: an [`SvmBuffer`] (all of it) or an [`SvmView`].
pub trait IntoSvm<'b, T: Pod> {
    /// The elements the command uses.
    fn into_svm(self) -> SvmView<'b, T>;
}

impl<'b, T: Pod> IntoSvm<'b, T> for &'b SvmBuffer<T> {
    fn into_svm(self) -> SvmView<'b, T> {
        self.whole()
    }
}

impl<'b, T: Pod> IntoSvm<'b, T> for SvmView<'b, T> {
    fn into_svm(self) -> SvmView<'b, T> {
        self
    }
}

impl<'b, T: Pod> IntoSvm<'b, T> for &SvmView<'b, T> {
    fn into_svm(self) -> SvmView<'b, T> {
        *self
    }
}

impl After<'_> {
    /// Copies `data` into the start of `svm` (`clEnqueueSVMMemcpy`) and blocks until the
    /// copy is done.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `data` is longer than `svm`,
    /// [`Error::ZeroLength`](crate::Error::ZeroLength) when empty,
    /// [`Error::CommandFailed`](crate::Error::CommandFailed) when the copy failed.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::SvmKind;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let Ok(svm) = ctx.svm::<u32>(4, SvmKind::Coarse) else { return Ok(()) };
    /// queue.write_svm(&svm, &[1, 2, 3, 4])?;
    /// let mut out = [0; 2];
    /// queue.read_svm(svm.view(2..)?, &mut out)?;
    /// assert_eq!(out, [3, 4]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_svm<'v, T: Pod>(&self, svm: impl IntoSvm<'v, T>, data: &[T]) -> Result<()> {
        // `data` is borrowed until the copy has ended: waited for here.
        self.enqueue_svm_write(svm.into_svm(), data)?.wait()
    }

    /// Copies `data` (a `Vec` or a [`HostBuffer`](crate::HostBuffer)) into the start of
    /// `svm` without blocking, and hands `data` back once the copy has ended
    /// ([`PendingWrite::wait`], or `.await`): the form of [`After::write_svm`] for async
    /// code, which keeps neither the allocation nor a borrow of it across the await.
    ///
    /// # Errors
    ///
    /// As [`After::write_svm`], except that a failed copy is reported by
    /// [`PendingWrite::wait`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::SvmKind;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let Ok(svm) = ctx.svm::<f32>(2, SvmKind::Coarse) else { return Ok(()) };
    /// let written = queue.write_svm_lent(&svm, vec![0.5f32, 1.5])?; // returns at once
    /// let data = pollster::block_on(written)?; // or `.await`: the same `Vec` back
    /// let read = pollster::block_on(queue.read_svm_into(&svm, data)?)?;
    /// assert_eq!(read, [0.5, 1.5]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_svm_lent<'v, T: Pod, H: HostMemory<T>>(
        &self,
        svm: impl IntoSvm<'v, T>,
        data: H,
    ) -> Result<PendingWrite<T, H>> {
        // The device reads `data`'s elements, which moving `data` does not move; the
        // `PendingWrite` owns them until the copy has ended (the *lent host memory* rule).
        let event = self.enqueue_svm_write(svm.into_svm(), data.elements())?;
        Ok(PendingWrite::new(event, data))
    }

    /// Enqueues the copy of `data` into the start of `view`; the caller keeps `data`'s
    /// elements alive and unmoved until the returned event has ended.
    fn enqueue_svm_write<T: Pod>(&self, view: SvmView<'_, T>, data: &[T]) -> Result<Event> {
        let at = view.at(Transfer::Write, 0, data.len())?;
        let block = view.block();
        let covers = data.len() == view.svm.len;
        let touch = Touch::host(block, Access::Write, covers).within(view.span(at, data.len()));
        self.submit().run(&[touch], |wait| {
            // SAFETY: the queue and the allocation are live (borrowed); the range was
            // checked against it; `data` stays alive and unmoved until the copy has ended
            // (the caller vouches); host and SVM memory do not overlap; the wait list
            // holds live events.
            unsafe {
                ffi::enqueue_svm_copy(
                    self.queue.core.raw(),
                    block.svm_at(at * size_of::<T>()),
                    data.as_ptr().cast(),
                    size_of_val(data),
                    wait,
                )
            }
        })
    }

    /// Copies the start of `svm` into `out` (`clEnqueueSVMMemcpy`) and blocks until the
    /// copy is done.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `out` is longer than `svm`,
    /// [`Error::ZeroLength`](crate::Error::ZeroLength) when empty,
    /// [`Error::CommandFailed`](crate::Error::CommandFailed) when the copy failed,
    /// [`Error::DependencyFailed`](crate::Error::DependencyFailed) when a write of the
    /// bytes it reads failed.
    pub fn read_svm<'v, T: Pod>(&self, svm: impl IntoSvm<'v, T>, out: &mut [T]) -> Result<()> {
        let mut writers = Writes::default();
        let event =
            self.enqueue_svm_read(svm.into_svm(), out.as_mut_ptr(), out.len(), &mut writers)?;
        // `out` is borrowed mutably until the copy has ended: settled here.
        settle(&event, &writers)
    }

    /// Copies all of `svm` into `data` (a `Vec`'s allocation, reused and grown if it is
    /// too small, or a [`HostBuffer`](crate::HostBuffer)) without blocking:
    /// [`PendingRead::wait`], or `.await`, hands it back filled. The form of
    /// [`After::read_svm`] for async code; see [`After::write_svm_lent`].
    ///
    /// # Errors
    ///
    /// As [`After::read_svm`], except that a failed copy, or a failed write of what it
    /// reads, is reported by [`PendingRead::wait`].
    pub fn read_svm_into<'v, T: Pod, H: HostMemory<T>>(
        &self,
        svm: impl IntoSvm<'v, T>,
        mut data: H,
    ) -> Result<PendingRead<T, H>> {
        let view = svm.into_svm();
        let len = view.len;
        let room = data.room_for(len)?;
        // The device fills the room, which moving `data` does not move; the `PendingRead`
        // owns it until the copy has ended (the *lent host memory* rule).
        let mut writers = Writes::default();
        let event = self.enqueue_svm_read(view, room, len, &mut writers)?;
        Ok(PendingRead::new(event, writers, data, len))
    }

    /// Enqueues the copy of the first `len` elements of `view` to `dst`, with the writes
    /// it reads in `writers`; the caller keeps `dst` valid for `len` elements, and unused
    /// by anything else, until the returned event has ended.
    fn enqueue_svm_read<T: Pod>(
        &self,
        view: SvmView<'_, T>,
        dst: *mut T,
        len: usize,
        writers: &mut Writes,
    ) -> Result<Event> {
        let at = view.at(Transfer::Read, 0, len)?;
        let block = view.block();
        let touch = Touch::host(block, Access::Read, false).within(view.span(at, len));
        self.submit().run_reading(
            &[touch],
            |wait| {
                // SAFETY: the queue and the allocation are live (borrowed); the range was
                // checked against it; `dst` is valid for `len` elements and used by nothing
                // else until the copy has ended (the caller vouches), and every bit pattern
                // is a valid `T: Pod`; host and SVM memory do not overlap; the wait list
                // holds live events.
                unsafe {
                    ffi::enqueue_svm_copy(
                        self.queue.core.raw(),
                        dst.cast(),
                        block.svm_at(at * size_of::<T>()),
                        len * size_of::<T>(),
                        wait,
                    )
                }
            },
            Some(writers),
        )
    }

    /// Copies all of `src` to the start of `dst` on the device (`clEnqueueSVMMemcpy`),
    /// without blocking.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `src` is longer than `dst`;
    /// [`Error::Cl`](crate::Error::Cl) with `CL_MEM_COPY_OVERLAP` for overlapping ranges of
    /// one allocation, refused before the driver sees them.
    pub fn copy_svm<'s, 'd, T: Pod>(
        &self,
        src: impl IntoSvm<'s, T>,
        dst: impl IntoSvm<'d, T>,
    ) -> Result<Event> {
        let (src, dst) = (src.into_svm(), dst.into_svm());
        let len = src.len;
        let dst_at = dst.at(Transfer::CopyDestination, 0, len)?;
        let (s, d) = (src.block(), dst.block());
        // Refused here, not left to the driver: a CPU driver may copy with `memcpy`, whose
        // overlapping use is undefined.
        let (from, to) = (src.offset, dst_at);
        if s.id == d.id && from < to + len && to < from + len {
            return Err(crate::Error::cl(
                "clEnqueueSVMMemcpy",
                ffi::codes::CL_MEM_COPY_OVERLAP,
            ));
        }
        let covers = len == dst.svm.len;
        let touches = [
            Touch::new(s, Access::Read).within(src.span(src.offset, len)),
            Touch::write(d, covers).within(dst.span(dst_at, len)),
        ];
        let event = self.submit().run(&touches, |wait| {
            // SAFETY: the queue and both allocations are live (borrowed); both ranges are
            // within them (checked); the driver refuses overlapping ones; the wait list
            // holds live events.
            unsafe {
                ffi::enqueue_svm_copy(
                    self.queue.core.raw(),
                    d.svm_at(dst_at * size_of::<T>()),
                    s.svm_at(src.offset * size_of::<T>()),
                    len * size_of::<T>(),
                    wait,
                )
            }
        })?;
        Ok(event)
    }

    /// Sets every element of `svm` to `value` on the device (`clEnqueueSVMMemFill`),
    /// without blocking.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) from `clEnqueueSVMMemFill` (the element size must be
    /// 1, 2, 4, ..., 128 bytes).
    pub fn fill_svm<'v, T: Pod>(&self, svm: impl IntoSvm<'v, T>, value: T) -> Result<Event> {
        let view = svm.into_svm();
        let block = view.block();
        let covers = view.len == view.svm.len;
        let touch = Touch::write(block, covers).within(view.span(view.offset, view.len));
        let event = self.submit().run(&[touch], |wait| {
            // SAFETY: the queue and the allocation are live (borrowed); the view is within
            // it; `value` is `size_of::<T>()` readable bytes, copied before the call
            // returns; the wait list holds live events.
            unsafe {
                ffi::enqueue_svm_fill(
                    self.queue.core.raw(),
                    block.svm_at(view.offset * size_of::<T>()),
                    ptr::from_ref(&value).cast(),
                    size_of::<T>(),
                    view.len * size_of::<T>(),
                    wait,
                )
            }
        })?;
        Ok(event)
    }
}

/// The elements `range` of `view`, checked, as (first element of the allocation, count).
pub(super) fn svm_range<T: Pod>(
    view: &SvmView<'_, T>,
    transfer: Transfer,
    range: &Range<usize>,
) -> Result<(usize, usize, Span)> {
    let len = check_span(transfer, range, view.len)?;
    let start = view.offset + range.start;
    Ok((start, len, view.span(start, len)))
}
