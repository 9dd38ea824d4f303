//! `ClBuffer<T>`: a typed handle to one block, released only after its own commands end.
//!
//! The release guarantee is the record layer's ([`crate::record`], rules *exact wait*,
//! *failures end too*, *lent host memory*, *drop behind a gate*, *released means freed* and
//! *failed write*); this module gives it a type.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::panic::Location;
use std::ptr;
use std::sync::Arc;

use super::queue::Queue;
use crate::core::context::ContextCore;
use crate::error::{Error, Result};
use crate::ffi::cl_mem;
use crate::pod::Pod;
use crate::record::block::Block;
use crate::record::release::ReleaseReport;

/// A device buffer of `len` elements of `T`, released only after its own commands end.
///
/// Create one with [`Context::buffer`](crate::Context::buffer); use it through a
/// [`Queue`]. It is `Send` and `Sync`: several threads may enqueue commands
/// on one buffer at once.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[1.0f32, 2.0, 3.0])?;
/// assert_eq!((buf.len(), buf.bytes()), (3, 12));
/// queue.write_at(&buf, 1, &[5.0])?;
/// assert_eq!(queue.read_owned(&buf)?.wait()?, [1.0, 5.0, 3.0]);
/// let report = buf.release()?; // waits for this buffer's commands only, then frees it
/// assert!(report.freed && report.failed.is_empty());
/// # Ok(())
/// # }
/// ```
pub struct ClBuffer<T: Pod> {
    block: Block,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod> fmt::Debug for ClBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClBuffer")
            .field("len", &self.len)
            .field("raw", &self.block.raw())
            .field("recorded", &self.record_len())
            .finish()
    }
}

impl<T: Pod> ClBuffer<T> {
    #[track_caller]
    /// A new buffer of `len` elements: a copy of `init`, or, without it, zeroed before
    /// its first read when `zeroed` (the *zeroed before read* rule), else as the driver
    /// left the memory.
    pub(crate) fn create(
        ctx: &Arc<ContextCore>,
        len: usize,
        init: Option<&[T]>,
        zeroed: bool,
    ) -> Result<Self> {
        let bytes = Block::check_size::<T>(ctx, len)?;
        let init = init.map_or(ptr::null(), |data| data.as_ptr().cast::<c_void>());
        // SAFETY: `init` is null, or points to `len` elements of `T`, `bytes` readable
        // bytes (checked above).
        let block = unsafe { Block::create(ctx, bytes, init, Location::caller()) }?;
        if init.is_null() && zeroed {
            block.mark_fresh();
        }
        Ok(ClBuffer::from_block(block, len))
    }

    /// A buffer for `raw`, a memory object of `ctx` made by other code; see
    /// [`ClBuffer::from_raw`].
    ///
    /// # Safety
    ///
    /// As [`ClBuffer::from_raw`].
    #[track_caller]
    pub(crate) unsafe fn adopt(ctx: &Arc<ContextCore>, raw: cl_mem) -> Result<Self> {
        // SAFETY: as the caller vouches.
        let block = unsafe { Block::adopt_raw(ctx, raw, Location::caller()) }?;
        let len = block.bytes() / size_of::<T>().max(1);
        if len == 0 || size_of::<T>() == 0 {
            return Err(Error::ZeroLength);
        }
        Ok(ClBuffer::from_block(block, len))
    }

    /// The buffer's block, for the layers above (a pool or an arena takes it).
    pub(crate) fn into_block(self) -> Block {
        let ClBuffer { block, .. } = self;
        block
    }

    /// A typed handle to `block`, which holds at least `len` elements of `T`.
    pub(crate) fn from_block(block: Block, len: usize) -> Self {
        ClBuffer {
            block,
            len,
            _elements: PhantomData,
        }
    }

    pub(crate) fn block(&self) -> &Block {
        &self.block
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a buffer holds at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Size in bytes: [`ClBuffer::len`] elements of `T`.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// Size in bytes of the memory object behind the buffer: [`ClBuffer::bytes`] or more (a
    /// pooled buffer's size class, an adopted object's tail past its last whole element).
    pub fn block_bytes(&self) -> usize {
        self.block.bytes()
    }

    /// How many sub-buffers the buffer holds: one per [`View`](crate::View) passed to a
    /// kernel (views from the start of a longer one share its), kept until the buffer is
    /// released.
    pub fn kept_sub_buffers(&self) -> usize {
        self.block.subs_kept()
    }

    /// How many events the record holds now. It stays small: completed events are
    /// pruned, and an in-order queue keeps only its newest read and write.
    pub fn record_len(&self) -> usize {
        self.block.record_len()
    }

    /// Waits for every command that touched the buffer, then releases it. When this
    /// returns, those commands have ended and `clReleaseMemObject` has been called.
    ///
    /// A failed command does not stop the release; it is listed in the report. Where the
    /// driver keeps a failed command's buffers until the commands before it on its
    /// in-order queue have ended (Intel's CPU runtime), the release waits for those too.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) when `clReleaseMemObject` itself fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<f32>(1024)?;
    /// queue.fill(&buf, 1.0)?;
    /// let report = buf.release()?;
    /// assert!(report.waited_on <= 1);
    /// assert!(report.failed.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(mut self) -> Result<ReleaseReport> {
        self.block.retire()
    }

    /// [`ClBuffer::release`] as a future: it awaits every command that touched the buffer
    /// without blocking the task's thread, then releases the buffer on the library's
    /// waiter thread (where `clReleaseMemObject` may block on NVIDIA's driver, and the
    /// wait for the driver's free runs), and hands back the same report.
    ///
    /// Dropped before it is done, the future releases the buffer deferred
    /// ([`ClBuffer::release_deferred`]) if it still holds it; nothing on the device is
    /// cancelled.
    ///
    /// # Errors
    ///
    /// As [`ClBuffer::release`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<f32>(1024)?;
    /// queue.fill(&buf, 1.0)?;
    /// let report = pollster::block_on(buf.release_async())?;
    /// assert!(report.failed.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn release_async(
        self,
    ) -> impl std::future::Future<Output = Result<ReleaseReport>> + Send + 'static {
        release_async(self.into_block())
    }

    /// Releases the buffer without blocking: its memory is freed on the context's reaper
    /// thread once every command that touched it has ended. The bytes show
    /// as pending release until then; [`Context::wait_deferred`](crate::Context::wait_deferred)
    /// waits for them.
    ///
    /// Until the reaper gets to it, a new buffer of the same size on the context made
    /// without contents ([`Context::buffer`](crate::Context::buffer), which zeroes it
    /// before any read, or [`Context::buffer_uninitialized`](crate::Context::buffer_uninitialized))
    /// takes the memory over once
    /// every command on it has ended and none failed, instead of allocating more while
    /// this memory waits to be freed; [`MemoryStats::reclaimed`](crate::MemoryStats::reclaimed)
    /// counts those. Such a buffer starts with none of this one's sub-buffers (those of its
    /// [views](crate::View) passed to kernels): any view of it is valid. Memory whose
    /// commands have ended waits about a millisecond for such a
    /// buffer before the reaper frees it (`wait_deferred` does not wait for that). A loop
    /// that allocates, enqueues and releases deferred thus keeps about as much memory as
    /// one that releases blocking, and asks the driver for memory only at its start.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u8>(1 << 20)?;
    /// queue.fill(&buf, 0)?;
    /// buf.release_deferred(); // returns at once
    /// ctx.wait_deferred();
    /// assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn release_deferred(self) {
        self.into_block().hand_back_deferred();
    }

    /// Grows or shrinks the buffer to `new_len` elements, keeping the contents that fit:
    /// a new block, a device-side copy ordered after every command on the old one, and a
    /// deferred release of the old block. The host never waits.
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`](crate::Context::buffer) for the new block, or from the copy;
    /// on error the buffer is unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let mut buf = ctx.buffer_from(&[1u32, 2, 3])?;
    /// buf.resize(&queue, 5)?; // grown: the old contents, then zeros
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [1, 2, 3, 0, 0]);
    /// buf.resize(&queue, 2)?; // shrunk: the contents that fit
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [1, 2]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn resize(&mut self, queue: &Queue, new_len: usize) -> Result<()> {
        let mut grown = ClBuffer::<T>::create(&self.block.ctx, new_len, None, true)?;
        let keep = self.len.min(new_len);
        queue.copy_range(&*self, 0, &grown, 0, keep)?;
        std::mem::swap(self, &mut grown);
        grown.release_deferred();
        Ok(())
    }

    /// A buffer for the raw handle `raw`, a memory object of `ctx` made by other code
    /// (opencl3, a C library), holding `CL_MEM_SIZE / size_of::<T>()` elements: the
    /// library takes its own reference, and the caller keeps theirs. From then on it is
    /// tracked like any other buffer; commands the caller enqueues on it directly are
    /// not, unless told with [`After::enqueue_raw`](crate::After::enqueue_raw). Its
    /// release gives up the library's reference once the buffer's commands have ended,
    /// without waiting for the memory to be freed, which the caller's reference keeps
    /// ([`ReleaseReport::freed`] says whether it was).
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_mem`.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `raw` belongs to another context;
    /// [`Error::AlreadyTracked`] when a buffer of the context holds it already (adopted
    /// before, or one of the library's own); [`Error::Cl`] when its size cannot be read;
    /// [`Error::ZeroLength`] when it holds no whole `T`.
    #[track_caller]
    pub unsafe fn from_raw(ctx: &crate::Context, raw: cl_mem) -> Result<Self> {
        // SAFETY: as the caller vouches.
        unsafe { ClBuffer::adopt(ctx.core(), raw) }
    }

    /// The raw handle, still owned by this buffer. Commands enqueued on it directly are
    /// not recorded: the release guarantee does not cover them.
    pub fn as_raw(&self) -> cl_mem {
        self.block.raw()
    }
}

/// The release of `block` as a future: awaits its commands, then releases it on the
/// library's waiter thread; released deferred if the future is dropped first.
pub(crate) fn release_async(
    mut block: Block,
) -> impl std::future::Future<Output = Result<ReleaseReport>> + Send + 'static {
    let awaited = block.awaited_at_release();
    let mut held = ReleasedIfDropped(Some(block));
    async move {
        for event in awaited {
            // A failure is the report's, read by the release.
            let _ = event.ended().await;
        }
        // Then, one at a time, the commands ahead of its failed ones on their queues (the
        // record's *failed ahead of its turn* rule).
        while let Some(ahead) = held.0.as_mut().and_then(Block::awaited_ahead) {
            let _ = ahead.ended().await;
        }
        match held.0.take() {
            Some(mut block) => crate::unblock(move || block.retire()).await,
            None => Err(crate::Error::Polled),
        }
    }
}

/// A block that an async release still holds: released deferred if the release's future
/// is dropped before it hands the block to its thread.
struct ReleasedIfDropped(Option<Block>);

impl Drop for ReleasedIfDropped {
    fn drop(&mut self) {
        if let Some(block) = self.0.take() {
            block.hand_back_deferred();
        }
    }
}
