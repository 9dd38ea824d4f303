use std::ffi::c_void;
use std::ptr;

use opencl3::command_queue as cl;

use super::{
    DeviceId, cl_command_queue, cl_context, cl_device_id, cl_event, cl_kernel, cl_mem, wait_len,
    wait_ptr,
};
use crate::error::{Error, Result};

/// A command queue on `device`, out of order when asked. `opencl_major` is the device's
/// OpenCL major version: a 1.x device gets the 1.x entry point, since calling the 2.0 one
/// there is undefined (design trap "OpenCL 1.x entry points": with Oclgrind behind
/// ocl-icd it spins forever).
pub(crate) fn create_queue(
    context: cl_context,
    device: DeviceId,
    out_of_order: bool,
    profiling: bool,
    opencl_major: u32,
) -> Result<cl_command_queue> {
    let device = device.raw();
    let mut flags = 0;
    if out_of_order {
        flags |= cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    }
    if profiling {
        flags |= cl::CL_QUEUE_PROFILING_ENABLE;
    }
    if opencl_major >= 2 {
        let properties = [u64::from(cl::CL_QUEUE_PROPERTIES), flags, 0];
        // SAFETY: `properties` is a zero-terminated list that outlives the call; the
        // handles are checked by the driver.
        unsafe { cl::create_command_queue_with_properties(context, device, properties.as_ptr()) }
            .map_err(|s| Error::cl("clCreateCommandQueueWithProperties", s))
    } else {
        // SAFETY: as above, with no list.
        #[allow(deprecated)]
        unsafe { cl::create_command_queue(context, device, flags) }
            .map_err(|s| Error::cl("clCreateCommandQueue", s))
    }
}

/// `clRetainCommandQueue`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid command queue.
pub(crate) unsafe fn retain_queue(raw: cl_command_queue) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::retain_command_queue(raw) }.map_err(|s| Error::cl("clRetainCommandQueue", s))
}

/// What a queue was made with: its context, device and properties.
pub(crate) struct QueueInfo {
    pub(crate) context: cl_context,
    pub(crate) device: DeviceId,
    pub(crate) out_of_order: bool,
    pub(crate) profiling: bool,
}

/// `CL_QUEUE_CONTEXT`, `CL_QUEUE_DEVICE` and `CL_QUEUE_PROPERTIES` of `raw`.
pub(crate) fn queue_info(raw: cl_command_queue) -> Result<QueueInfo> {
    let info = |param| {
        cl::get_command_queue_info(raw, param).map_err(|s| Error::cl("clGetCommandQueueInfo", s))
    };
    let properties = info(cl::CL_QUEUE_PROPERTIES)?.to_ulong();
    Ok(QueueInfo {
        context: info(cl::CL_QUEUE_CONTEXT)?.to_ptr() as cl_context,
        device: DeviceId::new(info(cl::CL_QUEUE_DEVICE)?.to_ptr() as cl_device_id),
        out_of_order: properties & cl::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0,
        profiling: properties & cl::CL_QUEUE_PROFILING_ENABLE != 0,
    })
}

/// `clFinish`.
pub(crate) fn finish(queue: cl_command_queue) -> Result<()> {
    cl::finish(queue).map_err(|s| Error::cl("clFinish", s))
}

/// `clEnqueueBarrierWithWaitList`: every later command of `queue` waits for `wait`.
///
/// # Safety
///
/// `queue` is live and every event in `wait` is live.
pub(crate) unsafe fn enqueue_barrier(
    queue: cl_command_queue,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe { cl::enqueue_barrier_with_wait_list(queue, wait_len(wait), wait_ptr(wait)) }
        .map_err(|s| Error::cl("clEnqueueBarrierWithWaitList", s))
}

/// `clReleaseCommandQueue` (which flushes it; its commands still complete).
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here, exactly once.
pub(crate) unsafe fn release_queue(raw: cl_command_queue) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::release_command_queue(raw) }.map_err(|s| Error::cl("clReleaseCommandQueue", s))
}

/// `clFlush`.
pub(crate) fn flush(queue: cl_command_queue) -> Result<()> {
    cl::flush(queue).map_err(|s| Error::cl("clFlush", s))
}

/// A non-blocking `clEnqueueWriteBuffer` of `bytes` bytes from `src` at byte `offset`.
///
/// # Safety
///
/// `queue` and `mem` are live; the range lies inside `mem`; `src` points to `bytes`
/// readable bytes that stay alive and unchanged until the command ends; every event in
/// `wait` is live.
pub(crate) unsafe fn enqueue_write(
    queue: cl_command_queue,
    mem: cl_mem,
    offset: usize,
    bytes: usize,
    src: *const c_void,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_write_buffer(
            queue,
            mem,
            cl::CL_NON_BLOCKING,
            offset,
            bytes,
            src,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueWriteBuffer", s))
}

/// A non-blocking `clEnqueueReadBuffer` of `bytes` bytes at byte `offset` into `dst`.
///
/// # Safety
///
/// As [`enqueue_write`], with `dst` pointing to `bytes` writable bytes that nothing else
/// uses until the command ends.
pub(crate) unsafe fn enqueue_read(
    queue: cl_command_queue,
    mem: cl_mem,
    offset: usize,
    bytes: usize,
    dst: *mut c_void,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_read_buffer(
            queue,
            mem,
            cl::CL_NON_BLOCKING,
            offset,
            bytes,
            dst,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueReadBuffer", s))
}

/// `clEnqueueCopyBuffer` of `bytes` bytes between byte offsets.
///
/// # Safety
///
/// `queue`, `src` and `dst` are live, both ranges lie inside their buffers, and every
/// event in `wait` is live.
pub(crate) unsafe fn enqueue_copy(
    queue: cl_command_queue,
    src: cl_mem,
    dst: cl_mem,
    src_offset: usize,
    dst_offset: usize,
    bytes: usize,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_copy_buffer(
            queue,
            src,
            dst,
            src_offset,
            dst_offset,
            bytes,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueCopyBuffer", s))
}

/// `clEnqueueFillBuffer` of `bytes` bytes at byte `offset` with the `pattern_size` bytes
/// at `pattern` (copied before the call returns).
///
/// # Safety
///
/// `queue` and `mem` are live, the range lies inside `mem`, `pattern` points to
/// `pattern_size` readable bytes, and every event in `wait` is live.
pub(crate) unsafe fn enqueue_fill(
    queue: cl_command_queue,
    mem: cl_mem,
    pattern: *const c_void,
    pattern_size: usize,
    offset: usize,
    bytes: usize,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe {
        cl::enqueue_fill_buffer(
            queue,
            mem,
            pattern,
            pattern_size,
            offset,
            bytes,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueFillBuffer", s))
}

/// A non-blocking `clEnqueueMapBuffer` of `bytes` bytes at byte `offset`, for reading, or
/// reading and writing when `write`. Returns the event and the mapped address, valid once
/// the event has completed and until it is unmapped.
///
/// # Safety
///
/// `queue` and `mem` are live, the range lies inside `mem`, and every event in `wait` is
/// live.
pub(crate) unsafe fn enqueue_map(
    queue: cl_command_queue,
    mem: cl_mem,
    write: bool,
    offset: usize,
    bytes: usize,
    wait: &[cl_event],
) -> Result<(cl_event, *mut c_void)> {
    use opencl3::memory::{CL_MAP_READ, CL_MAP_WRITE};
    let flags = if write {
        CL_MAP_READ | CL_MAP_WRITE
    } else {
        CL_MAP_READ
    };
    let mut mapped: *mut c_void = ptr::null_mut();
    // SAFETY: as the caller vouches; `mapped` receives the address.
    let event = unsafe {
        cl::enqueue_map_buffer(
            queue,
            mem,
            cl::CL_NON_BLOCKING,
            flags,
            offset,
            bytes,
            &mut mapped,
            wait_len(wait),
            wait_ptr(wait),
        )
    }
    .map_err(|s| Error::cl("clEnqueueMapBuffer", s))?;
    Ok((event, mapped))
}

/// `clEnqueueUnmapMemObject` of `mapped`.
///
/// # Safety
///
/// `queue` and `mem` are live, `mapped` came from [`enqueue_map`] on `mem` and is
/// unmapped once, and every event in `wait` is live.
pub(crate) unsafe fn enqueue_unmap(
    queue: cl_command_queue,
    mem: cl_mem,
    mapped: *mut c_void,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe { cl::enqueue_unmap_mem_object(queue, mem, mapped, wait_len(wait), wait_ptr(wait)) }
        .map_err(|s| Error::cl("clEnqueueUnmapMemObject", s))
}

/// `clEnqueueMarkerWithWaitList`: an event that completes when every event of `wait` has.
///
/// # Safety
///
/// `queue` is live and every event in `wait` is live.
pub(crate) unsafe fn enqueue_marker(
    queue: cl_command_queue,
    wait: &[cl_event],
) -> Result<cl_event> {
    // SAFETY: as the caller vouches.
    unsafe { cl::enqueue_marker_with_wait_list(queue, wait_len(wait), wait_ptr(wait)) }
        .map_err(|s| Error::cl("clEnqueueMarkerWithWaitList", s))
}

/// `clEnqueueNDRangeKernel` over `global` work items, in groups of `local` when given.
///
/// # Safety
///
/// `queue` and `kernel` are live; every argument of `kernel` is set to a live object or
/// value of the kind it declares, and nothing else sets them until this returns; `local`
/// has as many entries as `global` (one to three); every event in `wait` is live.
pub(crate) unsafe fn enqueue_kernel(
    queue: cl_command_queue,
    kernel: cl_kernel,
    global: &[usize],
    local: Option<&[usize]>,
    wait: &[cl_event],
) -> std::result::Result<cl_event, super::cl_int> {
    // SAFETY: as the caller vouches; `global` and `local` outlive the call.
    unsafe {
        cl::enqueue_nd_range_kernel(
            queue,
            kernel,
            global.len() as u32,
            ptr::null(),
            global.as_ptr(),
            local.map_or(ptr::null(), <[usize]>::as_ptr),
            wait_len(wait),
            wait_ptr(wait),
        )
    }
}

/// `clEnqueueMigrateMemObjects` of `mem` to the queue's device, contents undefined: makes
/// the allocation real now (design trap "late allocation failure").
///
/// # Safety
///
/// `queue` and `mem` are live.
pub(crate) unsafe fn enqueue_migrate(queue: cl_command_queue, mem: cl_mem) -> Result<cl_event> {
    // SAFETY: as the caller vouches; one object, no wait list.
    unsafe {
        cl::enqueue_migrate_mem_object(
            queue,
            1,
            &mem,
            opencl3::memory::CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED,
            0,
            ptr::null(),
        )
    }
    .map_err(|s| Error::cl("clEnqueueMigrateMemObjects", s))
}
