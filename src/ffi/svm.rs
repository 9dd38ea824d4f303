//! Shared virtual memory (OpenCL 2.0): allocation, free, the enqueued copy, fill, map and
//! unmap, and the kernel argument.
//!
//! None of these may be called on a device that does not report SVM: an OpenCL 1.x
//! driver has no entry for them, and the loader would jump to nothing. The layers above
//! call them only for a context whose every device reports the capability
//! ([`svm_capabilities`]).

use std::ffi::c_void;

use opencl3::command_queue as cl;
use opencl3::memory as mem;

use super::{DeviceId, UnownedContext, cl_command_queue, cl_context, cl_event, cl_int, cl_kernel};
use super::{wait_len, wait_ptr};
use crate::error::{Error, Result};

/// `CL_DEVICE_SVM_CAPABILITIES`.
const CL_DEVICE_SVM_CAPABILITIES: u32 = 0x1053;
/// Coarse-grained buffer SVM: the host reaches the memory only through maps.
pub(crate) const SVM_COARSE_GRAIN_BUFFER: u64 = 1 << 0;
/// Fine-grained buffer SVM: the host may touch the memory while no command uses it.
pub(crate) const SVM_FINE_GRAIN_BUFFER: u64 = 1 << 1;

/// The device's `CL_DEVICE_SVM_CAPABILITIES`, or 0 for a device that does not know the
/// query. Asked only of an OpenCL 2.0 device or newer: below that the query is not
/// defined (the caller checks the version).
pub(crate) fn svm_capabilities(id: DeviceId) -> u64 {
    opencl3::device::get_device_info(id.raw(), CL_DEVICE_SVM_CAPABILITIES)
        .map(|v| v.to_ulong())
        .unwrap_or(0)
}

/// `clSVMAlloc` of `bytes` read-write bytes, fine-grained when `fine`, aligned as the
/// driver chooses (at least to the largest OpenCL data type).
///
/// # Safety
///
/// Every device of `context` reports the SVM kind asked for.
pub(crate) unsafe fn svm_alloc(
    context: cl_context,
    bytes: usize,
    fine: bool,
) -> Result<*mut c_void> {
    let mut flags = mem::CL_MEM_READ_WRITE;
    if fine {
        flags |= mem::CL_MEM_SVM_FINE_GRAIN_BUFFER;
    }
    // SAFETY: as the caller vouches; the flags are valid for clSVMAlloc.
    unsafe { mem::svm_alloc(context, flags, bytes, 0) }.map_err(|s| Error::cl("clSVMAlloc", s))
}

/// `clSVMFree`: frees at once, whatever still uses the memory.
///
/// # Safety
///
/// `ptr` came from [`svm_alloc`] on `context`, is freed once, here, and no command that
/// uses it is pending.
pub(crate) unsafe fn svm_free(context: cl_context, ptr: *mut c_void) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { mem::svm_free(context, ptr) }.map_err(|s| Error::cl("clSVMFree", s))
}

/// One shared virtual memory allocation of a context, freed by [`SvmAlloc::free`] alone:
/// `clSVMFree` frees at once, whatever still uses the memory, so only a release that has
/// waited for the allocation's commands may call it. Dropped any other way (a panic in
/// the middle of a release), it is left allocated, which is safe, where freeing it could
/// let a pending command write freed memory.
pub(crate) struct SvmAlloc {
    ptr: *mut c_void,
    /// Kept alive by the holder (a block holds its context).
    context: UnownedContext,
}

// SAFETY: the allocation's address may be passed to OpenCL from any thread (OpenCL 3.0
// appendix A.2); the host reaches its bytes only through the library's maps and fine-
// grained views, whose own types keep Rust's aliasing rules.
unsafe impl Send for SvmAlloc {}
// SAFETY: as above; `&SvmAlloc` only reads the address.
unsafe impl Sync for SvmAlloc {}

impl SvmAlloc {
    /// [`svm_alloc`] of `bytes` in `context`, fine-grained when `fine`.
    ///
    /// # Safety
    ///
    /// As [`svm_alloc`]; the caller holds the process's SVM call lock
    /// (`core::context::svm_calls`), and `context` outlives the allocation.
    pub(crate) unsafe fn alloc(context: cl_context, bytes: usize, fine: bool) -> Result<SvmAlloc> {
        // SAFETY: as the caller vouches.
        let ptr = unsafe { svm_alloc(context, bytes, fine) }?;
        Ok(SvmAlloc {
            ptr,
            context: UnownedContext::new(context),
        })
    }

    /// Its address.
    #[inline]
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// [`svm_free`]s it.
    ///
    /// # Safety
    ///
    /// No command that uses it is pending, and the caller holds the process's SVM call
    /// lock.
    pub(crate) unsafe fn free(self) -> Result<()> {
        // SAFETY: allocated in `context` by `alloc`, freed once (it is consumed), with no
        // command pending, as the caller vouches.
        unsafe { svm_free(self.context.raw(), self.ptr) }
    }
}

/// A non-blocking `clEnqueueSVMMemcpy` of `bytes` bytes from `src` to `dst`, either of which
/// may be SVM or host memory.
///
/// # Safety
///
/// `queue` is live; `src` has `bytes` readable and `dst` `bytes` writable bytes until the
/// event ends; the two do not overlap; every event in `wait` is live.
pub(crate) unsafe fn enqueue_svm_copy(
    queue: cl_command_queue,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_svm_mem_cpy(
            queue,
            cl::CL_NON_BLOCKING,
            dst,
            src,
            bytes,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueSVMMemcpy", s))
}

/// `clEnqueueSVMMemFill` of `bytes` bytes at `at` with the `pattern_size`-byte `pattern`.
///
/// # Safety
///
/// `queue` is live; `at` has `bytes` writable SVM bytes, `bytes` a multiple of
/// `pattern_size`; `pattern` has `pattern_size` readable bytes (copied before the call
/// returns); every event in `wait` is live.
pub(crate) unsafe fn enqueue_svm_fill(
    queue: cl_command_queue,
    at: *mut c_void,
    pattern: *const c_void,
    pattern_size: usize,
    bytes: usize,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_svm_mem_fill(
            queue,
            at,
            pattern,
            pattern_size,
            bytes,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueSVMMemFill", s))
}

/// A non-blocking `clEnqueueSVMMap` of `bytes` bytes at `at`, for reading, or reading and
/// writing when `write`; the host may touch them once the event has completed, until the
/// unmap.
///
/// # Safety
///
/// `queue` is live; `at` has `bytes` SVM bytes; every event in `wait` is live.
pub(crate) unsafe fn enqueue_svm_map(
    queue: cl_command_queue,
    at: *mut c_void,
    write: bool,
    bytes: usize,
    wait: &[cl_event],
) -> Result<cl_event> {
    let flags = if write {
        mem::CL_MAP_READ | mem::CL_MAP_WRITE
    } else {
        mem::CL_MAP_READ
    };
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_svm_map(
            queue,
            cl::CL_NON_BLOCKING,
            flags,
            at,
            bytes,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueSVMMap", s))
}

/// `clEnqueueSVMUnmap` of the mapping at `at`.
///
/// # Safety
///
/// `queue` is live; `at` was mapped by [`enqueue_svm_map`] and is unmapped once; every
/// event in `wait` is live.
pub(crate) unsafe fn enqueue_svm_unmap(
    queue: cl_command_queue,
    at: *mut c_void,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe { cl::enqueue_svm_unmap(queue, at, wait_len(wait), wait_ptr(wait)) }
        .map_err(|s| Error::cl("clEnqueueSVMUnmap", s))
}

/// `clSetKernelArgSVMPointer`: argument `index` of `kernel` points at `at`.
///
/// # Safety
///
/// As [`set_arg_mem`](super::set_arg_mem) for `kernel`; `at` points into a live SVM
/// allocation of the kernel's context.
pub(crate) unsafe fn set_arg_svm(
    kernel: cl_kernel,
    index: u32,
    at: *const c_void,
) -> std::result::Result<(), cl_int> {
    // SAFETY: as the caller vouches.
    unsafe { opencl3::kernel::set_kernel_arg_svm_pointer(kernel, index, at) }
}
