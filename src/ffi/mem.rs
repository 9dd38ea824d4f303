use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Condvar};

use crate::util::sync::{Mutex, rank};
use std::time::Duration;

use opencl3::memory as cl;

use super::{cl_context, cl_mem};
use crate::census;
use crate::error::{ClStatus, Error, Result};

/// `clRetainMemObject`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid memory object.
pub(crate) unsafe fn retain_mem(raw: cl_mem) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::retain_mem_object(raw) }.map_err(|s| Error::cl("clRetainMemObject", s))
}

/// `CL_MEM_SIZE` and `CL_MEM_CONTEXT` of a memory object.
pub(crate) fn mem_size_and_context(raw: cl_mem) -> Result<(usize, cl_context)> {
    let size = cl::get_mem_object_info(raw, cl::CL_MEM_SIZE)
        .map_err(|s| Error::cl("clGetMemObjectInfo", s))?
        .to_size();
    let context = cl::get_mem_object_info(raw, cl::CL_MEM_CONTEXT)
        .map_err(|s| Error::cl("clGetMemObjectInfo", s))?
        .to_ptr() as cl_context;
    Ok((size, context))
}

/// The buffer a sub-buffer was made from and its origin there (`CL_MEM_ASSOCIATED_MEMOBJECT`,
/// `CL_MEM_OFFSET`); `None` for a buffer that is no sub-buffer.
pub(crate) fn mem_parent(raw: cl_mem) -> Result<Option<(cl_mem, usize)>> {
    let parent = cl::get_mem_object_info(raw, cl::CL_MEM_ASSOCIATED_MEMOBJECT)
        .map_err(|s| Error::cl("clGetMemObjectInfo", s))?
        .to_ptr() as cl_mem;
    if parent.is_null() {
        return Ok(None);
    }
    let offset = cl::get_mem_object_info(raw, cl::CL_MEM_OFFSET)
        .map_err(|s| Error::cl("clGetMemObjectInfo", s))?
        .to_size();
    Ok(Some((parent, offset)))
}

/// `CL_MEM_REFERENCE_COUNT`: stale as soon as read, and meant for finding leaks; the
/// driver probes read it to see whether a command's event holds its buffer.
pub(crate) fn mem_reference_count(raw: cl_mem) -> Result<u32> {
    cl::get_mem_object_info(raw, cl::CL_MEM_REFERENCE_COUNT)
        .map(|s| s.to_uint())
        .map_err(|s| Error::cl("clGetMemObjectInfo", s))
}

/// `clCreateBuffer` of `bytes` read-write bytes that the driver allocates in host memory
/// it can transfer to and from directly (`CL_MEM_ALLOC_HOST_PTR`: pinned memory on GPUs).
pub(crate) fn create_pinned_buffer(context: cl_context, bytes: usize) -> Result<cl_mem> {
    // SAFETY: no host pointer is given.
    unsafe {
        cl::create_buffer(
            context,
            cl::CL_MEM_READ_WRITE | cl::CL_MEM_ALLOC_HOST_PTR,
            bytes,
            ptr::null_mut(),
        )
    }
    .map_err(|s| Error::cl("clCreateBuffer", s))
}

/// `clCreateBuffer` of `bytes` read-write bytes, copied from `init` when it is not null
/// (`CL_MEM_COPY_HOST_PTR`).
///
/// # Safety
///
/// `init` is null, or points to `bytes` readable bytes (OpenCL copies them before
/// returning).
pub(crate) unsafe fn create_buffer(
    context: cl_context,
    bytes: usize,
    init: *const c_void,
) -> Result<cl_mem> {
    let flags = if init.is_null() {
        cl::CL_MEM_READ_WRITE
    } else {
        cl::CL_MEM_READ_WRITE | cl::CL_MEM_COPY_HOST_PTR
    };
    // SAFETY: as the caller vouches for `init`; `context` is a plain handle the driver
    // checks.
    unsafe { cl::create_buffer(context, flags, bytes, init.cast_mut()) }
        .map_err(|s| Error::cl("clCreateBuffer", s))
}

/// `clCreateSubBuffer` of `size` bytes at `origin` of `parent`, read-write.
///
/// # Safety
///
/// `parent` is a live buffer.
pub(crate) unsafe fn create_sub_buffer(
    parent: cl_mem,
    origin: usize,
    size: usize,
) -> Result<cl_mem> {
    let region = opencl3::types::cl_buffer_region { origin, size };
    // SAFETY: `parent` is live (the caller vouches); `region` outlives the call, and the
    // driver checks it against the parent.
    unsafe {
        cl::create_sub_buffer(
            parent,
            cl::CL_MEM_READ_WRITE,
            cl::CL_BUFFER_CREATE_TYPE_REGION,
            ptr::from_ref(&region).cast(),
        )
    }
    .map_err(|s| Error::cl("clCreateSubBuffer", s))
}

/// `clReleaseMemObject`.
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here, exactly once.
pub(crate) unsafe fn release_mem(raw: cl_mem) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::release_mem_object(raw) }.map_err(|s| Error::cl("clReleaseMemObject", s))
}

/// Set by the destructor callback when the driver frees the memory.
#[derive(Default)]
pub(crate) struct Freed {
    done: Mutex<bool, rank::FreedSignal>,
    signal: Condvar,
}

impl Freed {
    /// Whether the callback has fired.
    pub(crate) fn fired(&self) -> bool {
        *self.done.lock()
    }

    /// Waits up to `limit` for the callback; returns whether it fired.
    pub(crate) fn wait(&self, limit: Duration) -> bool {
        let done = self.done.lock();
        let (done, _) = done.wait_timeout_while(&self.signal, limit, |done| !*done);
        *done
    }
}

/// The destructor callback: it only signals (design trap "nothing blocking in callbacks").
extern "C" fn on_freed(_mem: cl_mem, user: *mut c_void) {
    // SAFETY: `user` is the `Arc<Freed>` leaked in `watch_free`, and OpenCL calls this
    // callback exactly once, so the reference is taken back exactly once.
    let freed = unsafe { Arc::from_raw(user.cast_const().cast::<Freed>()) };
    census::buffer_freed();
    *freed.done.lock() = true;
    freed.signal.notify_all();
}

/// Registers a destructor callback on `raw` that signals the returned [`Freed`]; `None`
/// when the driver refuses.
///
/// # Safety
///
/// `raw` is a live buffer.
pub(crate) unsafe fn watch_free(raw: cl_mem) -> Option<Arc<Freed>> {
    let freed = Arc::new(Freed::default());
    let user = Arc::into_raw(freed.clone()).cast_mut().cast::<c_void>();
    // SAFETY: `raw` is live (the caller vouches); `user` is a leaked Arc that the callback
    // takes back.
    match unsafe { cl::set_mem_object_destructor_callback(raw, on_freed, user) } {
        Ok(()) => {
            census::buffer_watched();
            Some(freed)
        }
        Err(status) => {
            // SAFETY: the callback was not registered, so it will never take `user` back.
            drop(unsafe { Arc::from_raw(user.cast_const().cast::<Freed>()) });
            log::debug!(target: "cl_lifetime::buffer", "no destructor callback: {}", ClStatus(status));
            None
        }
    }
}
