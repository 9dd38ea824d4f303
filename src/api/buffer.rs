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

use super::host::HostMemory;
use super::queue::Queue;
use crate::core::context::ContextCore;
use crate::core::reaper::{Deferred, Step};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi::{self, cl_mem};
use crate::pod::Pod;
use crate::record::block::Block;
use crate::record::failure::settle;
use crate::record::history::Writes;
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

/// A non-blocking read into an owned `Vec`; [`PendingRead::wait`] returns it, and
/// `.await` on it does the same without blocking (see [`ReadFuture`]).
///
/// Dropping it without waiting never blocks, as for a [`PendingWrite`]: the device may
/// still be writing into its memory, which goes to the library's thread and is freed once
/// the read has ended ([`Context::wait_deferred`](crate::Context::wait_deferred) waits for
/// that).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::PendingRead;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[1u32, 2, 3, 4])?;
/// let pending: PendingRead<u32> = queue.read_owned_range(&buf, 1..3)?;
/// // Host work here overlaps the read.
/// assert_eq!(pending.wait()?, [2, 3]);
/// # Ok(())
/// # }
/// ```
pub struct PendingRead<T: Pod, H: HostMemory<T> = Vec<T>> {
    event: Event,
    /// The writes the buffer's contents came from when the read was enqueued (the
    /// *failed write* rule).
    writers: Writes,
    /// Room for `len` elements, filled once the read has completed; `None` once handed
    /// back or handed over.
    data: Option<H>,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod, H: HostMemory<T>> fmt::Debug for PendingRead<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRead")
            .field("event", &self.event)
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod, H: HostMemory<T>> PendingRead<T, H> {
    /// A read of `len` elements into `data`'s room for them ([`HostMemory::room_for`]).
    pub(crate) fn new(event: Event, writers: Writes, data: H, len: usize) -> Self {
        PendingRead {
            event,
            writers,
            data: Some(data),
            len,
            _elements: PhantomData,
        }
    }

    /// The read's event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Blocks until the read has ended and returns the data.
    ///
    /// # Errors
    ///
    /// [`Error::DependencyFailed`](crate::Error::DependencyFailed) when the buffer's last write before the read failed
    /// (the *failed write* rule), [`Error::CommandFailed`](crate::Error::CommandFailed) when the read
    /// itself failed.
    pub fn wait(mut self) -> Result<H> {
        settle(&self.event, &self.writers)?;
        let mut data = self.data.take().ok_or(crate::Error::Polled)?;
        // SAFETY: the read completed, so the device wrote all `len` elements into the
        // room `room_for` gave it.
        unsafe { data.filled(self.len) };
        Ok(data)
    }
}

impl<T: Pod, H: HostMemory<T>> Drop for PendingRead<T, H> {
    fn drop(&mut self) {
        if self.data.is_none() || ffi::has_ended(self.event.raw()) {
            return;
        }
        // The device may still be writing into `data`: it goes to the library's thread,
        // never freed under the read, and this drop does not wait (on an async executor's
        // worker, or behind a gate the caller is about to set, waiting here would block
        // what the read waits for).
        log::debug!(
            target: "cl_lifetime::buffer",
            "a pending read of {} elements was dropped before it ended; its memory is freed on \
             the library's thread once the read has ended",
            self.len
        );
        self.hand_over();
    }
}

impl<T: Pod, H: HostMemory<T>> PendingRead<T, H> {
    /// Hands the memory the read writes into to the library's thread (see
    /// [`keep_until_ended`]).
    fn hand_over(&mut self) {
        if let Some(data) = self.data.take() {
            keep_until_ended(&self.event, Box::new(data));
        }
    }
}

/// Hands `memory`, which `event`'s command still uses, to the library's thread, which
/// frees it once the command has ended; the command's queue is flushed first (the
/// library's thread only reads its status, which submits nothing: rusticl runs nothing
/// that was not flushed). An event of no queue of the library's is waited for here.
fn keep_until_ended(event: &Event, memory: Box<dyn Send>) {
    let Some(queue) = event.inner.queue.as_ref() else {
        ffi::wait_terminal(&[event.raw()]);
        return;
    };
    if let Err(e) = queue.flush_if_dirty() {
        log::warn!(target: "cl_lifetime::queue", "flushing a dropped transfer's queue: {e}");
    }
    let kept = KeptUntilEnded {
        event: event.clone(),
        _memory: memory,
    };
    queue.ctx.reaper.submit(Box::new(kept), true);
}

/// A pending transfer that lends host memory, as [`Settled`] awaits it.
trait Lends: Sized {
    type Output;
    fn event(&self) -> &Event;
    /// Its result; does not block once the command has ended.
    fn wait(self) -> Result<Self::Output>;
    /// Lets go of it without waiting: memory the command may still use goes to the
    /// library's thread.
    fn let_go(self);
}

impl<T: Pod, H: HostMemory<T>> Lends for PendingRead<T, H> {
    type Output = H;

    fn event(&self) -> &Event {
        &self.event
    }

    fn wait(self) -> Result<H> {
        PendingRead::wait(self)
    }

    fn let_go(mut self) {
        if self.data.is_some() && !ffi::has_ended(self.event.raw()) {
            self.hand_over();
        }
    }
}

impl<T: Pod, H: HostMemory<T>> Lends for PendingWrite<T, H> {
    type Output = H;

    fn event(&self) -> &Event {
        &self.event
    }

    fn wait(self) -> Result<H> {
        PendingWrite::wait(self)
    }

    /// Its drop does not wait.
    fn let_go(self) {}
}

/// A pending transfer awaited: ready once its command has ended, with what its `wait`
/// returns; dropped early, it lets go of the transfer without waiting.
struct Settled<P: Lends> {
    pending: Option<P>,
    ended: crate::awaiting::Ended,
}

impl<P: Lends> Settled<P> {
    fn new(pending: P) -> Self {
        Settled {
            ended: crate::awaiting::Ended::new(pending.event().clone()),
            pending: Some(pending),
        }
    }

    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<P::Output>> {
        match self.ended.poll_end(cx) {
            std::task::Poll::Pending => std::task::Poll::Pending,
            std::task::Poll::Ready(()) => std::task::Poll::Ready(match self.pending.take() {
                Some(pending) => pending.wait(),
                None => Err(crate::Error::Polled),
            }),
        }
    }
}

impl<P: Lends> Drop for Settled<P> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.let_go();
        }
    }
}

/// A [`PendingRead`] as a future: its data once the read has ended, or the error
/// [`PendingRead::wait`] would return (`.await` on a `PendingRead`). The task's thread
/// never blocks; dropped before the read ended, it hands the memory the read writes into
/// to the library's thread, which frees it once the read has ended.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use std::future::IntoFuture;
/// use cl_lifetime::ReadFuture;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[1u32; 16])?;
/// let read: ReadFuture<u32> = queue.read_owned(&buf)?.into_future();
/// assert_eq!(pollster::block_on(read)?, vec![1; 16]);
/// // The same in an async block: `.await` on the `PendingRead`.
/// let data = pollster::block_on(async { queue.read_owned(&buf)?.await })?;
/// assert_eq!(data, vec![1; 16]);
/// # Ok(())
/// # }
/// ```
#[must_use = "a future does nothing unless awaited"]
pub struct ReadFuture<T: Pod, H: HostMemory<T> = Vec<T>>(Settled<PendingRead<T, H>>);

impl<T: Pod, H: HostMemory<T>> fmt::Debug for ReadFuture<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadFuture")
            .field("read", &self.0.pending)
            .finish()
    }
}

// Nothing in it relies on staying where it is: it holds handles and host memory.
impl<T: Pod, H: HostMemory<T>> Unpin for ReadFuture<T, H> {}

impl<T: Pod, H: HostMemory<T>> std::future::IntoFuture for PendingRead<T, H> {
    type Output = Result<H>;
    type IntoFuture = ReadFuture<T, H>;

    fn into_future(self) -> ReadFuture<T, H> {
        ReadFuture(Settled::new(self))
    }
}

impl<T: Pod, H: HostMemory<T>> std::future::Future for ReadFuture<T, H> {
    type Output = Result<H>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<H>> {
        self.get_mut().0.poll(cx)
    }
}

/// A non-blocking write from a `Vec` the library hands back once the write has ended
/// ([`After::write_lent`](crate::After::write_lent)): [`PendingWrite::wait`] returns it,
/// and `.await` on it does the same without blocking.
///
/// Dropped before the write has ended, it returns at once: the `Vec` goes to the library's
/// thread, which frees it once the write has ended.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::PendingWrite;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(1024)?;
/// let pending: PendingWrite<u32> = queue.write_lent(&buf, vec![7u32; 1024])?;
/// let data = pending.wait()?; // the same `Vec`, handed back once the write has ended
/// assert_eq!(queue.read_owned(&buf)?.wait()?, data);
/// # Ok(())
/// # }
/// ```
pub struct PendingWrite<T: Pod, H: HostMemory<T> = Vec<T>> {
    event: Event,
    /// Read by the device until the write has ended; `None` once handed back.
    data: Option<H>,
    _elements: PhantomData<T>,
}

impl<T: Pod, H: HostMemory<T>> fmt::Debug for PendingWrite<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingWrite")
            .field("event", &self.event)
            .field("len", &self.data.as_ref().map(|d| d.elements().len()))
            .finish()
    }
}

impl<T: Pod, H: HostMemory<T>> PendingWrite<T, H> {
    pub(crate) fn new(event: Event, data: H) -> Self {
        PendingWrite {
            event,
            data: Some(data),
            _elements: PhantomData,
        }
    }

    /// The write's event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Blocks until the write has ended and hands the `Vec` back, as it was.
    ///
    /// # Errors
    ///
    /// [`Error::CommandFailed`](crate::Error::CommandFailed) when the write failed (the
    /// `Vec` is freed).
    pub fn wait(mut self) -> Result<H> {
        let outcome = self.event.wait();
        // The write has ended: the device no longer reads the memory.
        let data = self.data.take().ok_or(crate::Error::Polled)?;
        outcome.map(|()| data)
    }
}

impl<T: Pod, H: HostMemory<T>> Drop for PendingWrite<T, H> {
    fn drop(&mut self) {
        // The device may still read `data`: it goes to the library's thread, never freed
        // under the write, and this drop does not wait.
        if let Some(data) = self.data.take() {
            if !ffi::has_ended(self.event.raw()) {
                keep_until_ended(&self.event, Box::new(data));
            }
        }
    }
}

/// A [`PendingWrite`] as a future: the `Vec` once the write has ended, or the error
/// [`PendingWrite::wait`] would return (`.await` on a `PendingWrite`).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use std::future::IntoFuture;
/// use cl_lifetime::WriteFuture;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(256)?;
/// let write: WriteFuture<u32> = queue.write_lent(&buf, vec![3u32; 256])?.into_future();
/// let back = pollster::block_on(write)?; // the `Vec`, once written
/// assert_eq!(back, vec![3; 256]);
/// assert_eq!(queue.read_owned(&buf)?.wait()?, back);
/// # Ok(())
/// # }
/// ```
#[must_use = "a future does nothing unless awaited"]
pub struct WriteFuture<T: Pod, H: HostMemory<T> = Vec<T>>(Settled<PendingWrite<T, H>>);

impl<T: Pod, H: HostMemory<T>> fmt::Debug for WriteFuture<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteFuture")
            .field("write", &self.0.pending)
            .finish()
    }
}

// Nothing in it relies on staying where it is: it holds handles and host memory.
impl<T: Pod, H: HostMemory<T>> Unpin for WriteFuture<T, H> {}

impl<T: Pod, H: HostMemory<T>> std::future::IntoFuture for PendingWrite<T, H> {
    type Output = Result<H>;
    type IntoFuture = WriteFuture<T, H>;

    fn into_future(self) -> WriteFuture<T, H> {
        WriteFuture(Settled::new(self))
    }
}

impl<T: Pod, H: HostMemory<T>> std::future::Future for WriteFuture<T, H> {
    type Output = Result<H>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<H>> {
        self.get_mut().0.poll(cx)
    }
}

/// Host memory a command still uses, kept by the library's thread until the command has
/// ended (a pending read or a lent write dropped before it ended).
struct KeptUntilEnded {
    event: Event,
    _memory: Box<dyn Send>,
}

impl Deferred for KeptUntilEnded {
    fn poll(&mut self, _hurry: bool) -> Step {
        if ffi::has_ended(self.event.raw()) {
            Step::Done
        } else {
            Step::Pending
        }
    }
}
