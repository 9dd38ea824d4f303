//! Host memory that transfers lend to the device: a `Vec`, or a [`HostBuffer`] the device
//! reaches directly (pinned), and the rules they keep.
//!
//! # Rules
//!
//! - **Lent, then handed back.** A non-blocking transfer from or into host memory the
//!   caller gives ([`After::write_lent`](crate::After::write_lent),
//!   [`After::read_into`](crate::After::read_into)) owns it until the command has ended,
//!   then hands it back: one allocation serves every frame of a stream.
//! - **Pinned for life.** A [`HostBuffer`] is a `CL_MEM_ALLOC_HOST_PTR` buffer mapped once
//!   when made and unmapped when dropped; only its host address is used, never the buffer
//!   in a command. Its contents start zeroed.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use crate::core::context::ContextCore;
use crate::core::staging::Pinned;
use crate::error::{Error, Result};
use crate::ffi;
use crate::pod::Pod;
use crate::record::block::Block;

/// Host memory a non-blocking transfer can lend to the device: `Vec<T>` or
/// [`HostBuffer<T>`]. Sealed: the library relies on what each does.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{ClBuffer, HostMemory, Queue, Result};
/// fn round_trip<H: HostMemory<f32>>(q: &Queue, buf: &ClBuffer<f32>, host: H) -> Result<H> {
///     let host = q.write_lent(buf, host)?.wait()?; // handed back once written
///     q.read_into(buf, host)?.wait()
/// }
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<f32>(4)?;
/// assert_eq!(round_trip(&queue, &buf, vec![1.5f32; 4])?, [1.5; 4]);
/// let mut pinned = ctx.host_buffer::<f32>(4)?;
/// pinned.fill(2.5);
/// assert_eq!(*round_trip(&queue, &buf, pinned)?, [2.5; 4]);
/// # Ok(())
/// # }
/// ```
pub trait HostMemory<T: Pod>: Send + 'static + sealed::Sealed {
    /// The elements a write sends.
    #[doc(hidden)]
    fn elements(&self) -> &[T];
    /// Room for a read of `len` elements: where the device writes them.
    #[doc(hidden)]
    fn room_for(&mut self, len: usize) -> Result<*mut T>;
    /// After a read of `len` elements into [`HostMemory::room_for`]'s room has completed.
    ///
    /// # Safety
    ///
    /// The read completed and wrote all `len` elements there.
    #[doc(hidden)]
    unsafe fn filled(&mut self, len: usize);
}

mod sealed {
    pub trait Sealed {}
    impl<T: crate::Pod> Sealed for Vec<T> {}
    impl<T: crate::Pod> Sealed for super::HostBuffer<T> {}
}

impl<T: Pod> HostMemory<T> for Vec<T> {
    fn elements(&self) -> &[T] {
        self
    }

    /// The `Vec`'s allocation, grown if too small; its contents are replaced.
    fn room_for(&mut self, len: usize) -> Result<*mut T> {
        self.clear();
        self.reserve_exact(len);
        Ok(self.as_mut_ptr())
    }

    unsafe fn filled(&mut self, len: usize) {
        // SAFETY: the caller vouches that the read wrote `len` elements, and `room_for`
        // reserved at least `len`.
        unsafe { self.set_len(len) };
    }
}

/// Host memory the device transfers to and from directly: a `CL_MEM_ALLOC_HOST_PTR`
/// buffer, mapped for its whole life (pinned memory on GPUs, where a transfer from it
/// needs no staging copy). It derefs to `[T]`; give it to
/// [`After::write_lent`](crate::After::write_lent) and
/// [`After::read_into`](crate::After::read_into), which hand it back once the transfer has
/// ended. Made by [`Context::host_buffer`](crate::Context::host_buffer); starts zeroed.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<f32>(4096)?;
/// let mut frame = ctx.host_buffer::<f32>(4096)?;
/// for i in 0..3 {
///     frame.fill(i as f32);
///     frame = queue.write_lent(&buf, frame)?.wait()?;
///     frame = queue.read_into(&buf, frame)?.wait()?;
///     assert!(frame.iter().all(|&x| x == i as f32));
/// }
/// # Ok(())
/// # }
/// ```
pub struct HostBuffer<T: Pod> {
    pinned: Option<Pinned>,
    /// The queue it was mapped through, for its unmap (a queue of its own), released
    /// after it.
    queue: ffi::OwnedQueue,
    len: usize,
    _elements: PhantomData<T>,
}

// SAFETY: the mapped memory is plain host memory, reached through `&self` and `&mut self`
// as a slice's is; the handles' owners are `Send` and `Sync`.
unsafe impl<T: Pod> Send for HostBuffer<T> {}
// SAFETY: as above: `&HostBuffer` gives only `&[T]`.
unsafe impl<T: Pod> Sync for HostBuffer<T> {}

impl<T: Pod> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod> HostBuffer<T> {
    /// A zeroed host buffer of `len` elements on `ctx`'s first device, its size checked
    /// as every buffer's is ([`Block::check_size`]).
    pub(crate) fn new(ctx: &ContextCore, len: usize) -> Result<HostBuffer<T>> {
        let bytes = Block::check_size::<T>(ctx, len)?;
        let (context, device) = (ctx.raw(), ctx.device.id);
        let major = ctx.device.opencl_major();
        let queue = ffi::create_queue(context, device, false, false, major)?;
        // SAFETY: clCreateCommandQueue* returned the queue with one reference, given to its
        // owner (so an error below releases it).
        let queue = unsafe { ffi::OwnedQueue::from_raw(queue) };
        let pinned = Pinned::create(context, queue.raw(), bytes)?;
        // No slice of a misaligned pointer: the mapping and its queue go.
        if let Err(e) = super::map::check_aligned::<T>(pinned.ptr()) {
            // Its own queue: shared with no one.
            pinned.release(queue.raw(), false);
            return Err(e);
        }
        // SAFETY: the mapping holds at least `bytes` writable bytes, used by nothing else.
        unsafe { std::ptr::write_bytes(pinned.ptr().cast::<u8>(), 0, bytes) };
        Ok(HostBuffer {
            pinned: Some(pinned),
            queue,
            len,
            _elements: PhantomData,
        })
    }

    fn ptr(&self) -> *mut c_void {
        self.pinned
            .as_ref()
            .map_or(std::ptr::null_mut(), Pinned::ptr)
    }
}

impl<T: Pod> std::ops::Deref for HostBuffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` initialized (zeroed, then written as `T`)
        // elements, aligned for `T` (checked in `new`), alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.ptr().cast::<T>(), self.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr().cast::<T>(), self.len) }
    }
}

impl<T: Pod> HostMemory<T> for HostBuffer<T> {
    fn elements(&self) -> &[T] {
        self
    }

    /// Its first `len` elements; `Error::HostTooSmall` when it has fewer.
    fn room_for(&mut self, len: usize) -> Result<*mut T> {
        if len > self.len {
            return Err(Error::HostTooSmall {
                needed: len,
                len: self.len,
            });
        }
        Ok(self.ptr().cast::<T>())
    }

    unsafe fn filled(&mut self, _len: usize) {}
}

impl<T: Pod> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        if let Some(pinned) = self.pinned.take() {
            // Its own queue: shared with no one.
            pinned.release(self.queue.raw(), false);
        }
        // Then the queue, by its owner, after the unmap it ran.
    }
}
