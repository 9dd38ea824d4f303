use std::ffi::CStr;
use std::ptr;

use opencl3::kernel as clk;
use opencl3::program as clp;

use super::{DeviceId, cl_context, cl_device_id, cl_int, cl_kernel, cl_mem, cl_program};
use crate::error::{ClStatus, Error, Result};

pub(crate) use clk::{
    CL_KERNEL_ARG_ADDRESS_QUALIFIER, CL_KERNEL_ARG_NAME, CL_KERNEL_ARG_TYPE_CONST,
    CL_KERNEL_ARG_TYPE_NAME, CL_KERNEL_ARG_TYPE_QUALIFIER,
};

/// `clCreateProgramWithSource`: a new program with one reference, owned by the caller.
pub(crate) fn create_program(context: cl_context, source: &str) -> Result<cl_program> {
    clp::create_program_with_source(context, &[source])
        .map_err(|s| Error::cl("clCreateProgramWithSource", s))
}

/// `clBuildProgram` for `devices`, or the failed build's status.
pub(crate) fn build_program(
    program: cl_program,
    devices: &[DeviceId],
    options: &CStr,
) -> std::result::Result<(), cl_int> {
    let devices: Vec<cl_device_id> = devices.iter().map(|d| d.raw()).collect();
    clp::build_program(program, &devices, options, None, ptr::null_mut())
}

/// Whether `program` built for `device` (`CL_PROGRAM_BUILD_STATUS`).
pub(crate) fn built_for(program: cl_program, device: DeviceId) -> bool {
    clp::get_program_build_info(program, device.raw(), clp::CL_PROGRAM_BUILD_STATUS)
        .is_ok_and(|s| s.to_int() == clp::CL_BUILD_SUCCESS)
}

/// The build log of `program` for `device`, or why there is none.
pub(crate) fn build_log(program: cl_program, device: DeviceId) -> String {
    clp::get_program_build_info(program, device.raw(), clp::CL_PROGRAM_BUILD_LOG)
        .map(|v| String::from(v).trim_end_matches('\0').to_string())
        .unwrap_or_else(|s| format!("(no build log: {})", ClStatus(s)))
}

/// `CL_PROGRAM_KERNEL_NAMES`, split.
pub(crate) fn kernel_names(program: cl_program) -> Result<Vec<String>> {
    let names = clp::get_program_info(program, clp::CL_PROGRAM_KERNEL_NAMES)
        .map_err(|s| Error::cl("clGetProgramInfo", s))?;
    Ok(String::from(names)
        .trim_end_matches('\0')
        .split(';')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect())
}

/// `clRetainProgram`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid program.
pub(crate) unsafe fn retain_program(raw: cl_program) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { clp::retain_program(raw) }.map_err(|s| Error::cl("clRetainProgram", s))
}

/// `CL_PROGRAM_CONTEXT`.
pub(crate) fn program_context(raw: cl_program) -> Result<cl_context> {
    clp::get_program_info(raw, clp::CL_PROGRAM_CONTEXT)
        .map(|c| c.to_ptr() as cl_context)
        .map_err(|s| Error::cl("clGetProgramInfo", s))
}

/// `clRetainKernel`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid kernel.
pub(crate) unsafe fn retain_kernel(raw: cl_kernel) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { clk::retain_kernel(raw) }.map_err(|s| Error::cl("clRetainKernel", s))
}

/// `CL_KERNEL_PROGRAM` and `CL_KERNEL_FUNCTION_NAME`.
pub(crate) fn kernel_program_and_name(raw: cl_kernel) -> Result<(cl_program, String)> {
    let info =
        |param| clk::get_kernel_info(raw, param).map_err(|s| Error::cl("clGetKernelInfo", s));
    let program = info(clk::CL_KERNEL_PROGRAM)?.to_ptr() as cl_program;
    let name = String::from(info(clk::CL_KERNEL_FUNCTION_NAME)?)
        .trim_end_matches('\0')
        .to_string();
    Ok((program, name))
}

/// `clReleaseProgram`.
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here, exactly once.
pub(crate) unsafe fn release_program(raw: cl_program) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { clp::release_program(raw) }.map_err(|s| Error::cl("clReleaseProgram", s))
}

/// `clCreateKernel`, or the status of the failure (`CL_INVALID_KERNEL_NAME` for a name
/// the program lacks).
pub(crate) fn create_kernel(
    program: cl_program,
    name: &CStr,
) -> std::result::Result<cl_kernel, cl_int> {
    clk::create_kernel(program, name)
}

/// `CL_KERNEL_NUM_ARGS`.
pub(crate) fn kernel_num_args(kernel: cl_kernel) -> Result<usize> {
    clk::get_kernel_info(kernel, clk::CL_KERNEL_NUM_ARGS)
        .map(|n| n.to_uint() as usize)
        .map_err(|s| Error::cl("clGetKernelInfo", s))
}

/// `CL_KERNEL_WORK_GROUP_SIZE` of `kernel` on `device`, or the status of the failure.
pub(crate) fn kernel_work_group_size(
    kernel: cl_kernel,
    device: DeviceId,
) -> std::result::Result<usize, cl_int> {
    clk::get_kernel_work_group_info(kernel, device.raw(), clk::CL_KERNEL_WORK_GROUP_SIZE)
        .map(|v| v.to_size())
}

/// `CL_KERNEL_COMPILE_WORK_GROUP_SIZE` of `kernel` on `device` (zeros where the kernel
/// declares no `reqd_work_group_size`), or the status of the failure.
pub(crate) fn kernel_compile_work_group_size(
    kernel: cl_kernel,
    device: DeviceId,
) -> std::result::Result<[usize; 3], cl_int> {
    let sizes = clk::get_kernel_work_group_info(
        kernel,
        device.raw(),
        clk::CL_KERNEL_COMPILE_WORK_GROUP_SIZE,
    )?
    .to_vec_size();
    let mut out = [0; 3];
    for (slot, size) in out.iter_mut().zip(sizes) {
        *slot = size;
    }
    Ok(out)
}

/// A `cl_uint` of `clGetKernelArgInfo` for argument `index`.
pub(crate) fn kernel_arg_uint(
    kernel: cl_kernel,
    index: u32,
    what: u32,
) -> std::result::Result<u32, cl_int> {
    clk::get_kernel_arg_info(kernel, index, what).map(|v| v.to_uint())
}

/// `CL_KERNEL_ARG_TYPE_QUALIFIER` of argument `index` (a `cl_bitfield`).
pub(crate) fn kernel_arg_qualifier(
    kernel: cl_kernel,
    index: u32,
) -> std::result::Result<u64, cl_int> {
    clk::get_kernel_arg_info(kernel, index, CL_KERNEL_ARG_TYPE_QUALIFIER).map(|v| v.to_ulong())
}

/// A string of `clGetKernelArgInfo` for argument `index`.
pub(crate) fn kernel_arg_string(
    kernel: cl_kernel,
    index: u32,
    what: u32,
) -> std::result::Result<String, cl_int> {
    clk::get_kernel_arg_info(kernel, index, what)
        .map(|v| String::from(v).trim_end_matches('\0').to_string())
}

/// `clSetKernelArg` of a buffer (or NULL) for argument `index`.
///
/// # Safety
///
/// `kernel` is live and no other thread sets its arguments or enqueues it meanwhile;
/// `mem` is null or a live buffer.
pub(crate) unsafe fn set_arg_mem(
    kernel: cl_kernel,
    index: u32,
    mem: cl_mem,
) -> std::result::Result<(), cl_int> {
    let value = if mem.is_null() {
        ptr::null()
    } else {
        ptr::from_ref(&mem).cast()
    };
    // SAFETY: as the caller vouches; OpenCL copies the handle value before returning.
    unsafe { clk::set_kernel_arg(kernel, index, size_of::<cl_mem>(), value) }
}

/// `clSetKernelArg` of a value passed by copy.
///
/// # Safety
///
/// As [`set_arg_mem`] for `kernel`.
pub(crate) unsafe fn set_arg_bytes(
    kernel: cl_kernel,
    index: u32,
    bytes: &[u8],
) -> std::result::Result<(), cl_int> {
    // SAFETY: as the caller vouches; `bytes` is readable for its length and copied.
    unsafe { clk::set_kernel_arg(kernel, index, bytes.len(), bytes.as_ptr().cast()) }
}

/// `clSetKernelArg` declaring `size` bytes of local memory.
///
/// # Safety
///
/// As [`set_arg_mem`] for `kernel`.
pub(crate) unsafe fn set_arg_local(
    kernel: cl_kernel,
    index: u32,
    size: usize,
) -> std::result::Result<(), cl_int> {
    // SAFETY: as the caller vouches; a NULL value with a size declares local memory.
    unsafe { clk::set_kernel_arg(kernel, index, size, ptr::null()) }
}

/// `clReleaseKernel`.
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here, exactly once.
pub(crate) unsafe fn release_kernel(raw: cl_kernel) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { clk::release_kernel(raw) }.map_err(|s| Error::cl("clReleaseKernel", s))
}
