use std::ptr;

use opencl3::context::context as cl;

use super::{DeviceId, cl_context, cl_device_id};
use crate::error::{Error, Result};

/// `clCreateContext` over `devices` (all of one platform).
pub(crate) fn create_context(devices: &[DeviceId]) -> Result<cl_context> {
    let devices: Vec<cl_device_id> = devices.iter().map(|d| d.raw()).collect();
    cl::create_context(&devices, ptr::null(), None, ptr::null_mut())
        .map_err(|s| Error::cl("clCreateContext", s))
}

/// `clReleaseContext`.
///
/// # Safety
///
/// The caller owns one reference to `raw` and gives it up here.
pub(crate) unsafe fn release_context(raw: cl_context) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::release_context(raw) }.map_err(|s| Error::cl("clReleaseContext", s))
}

/// `clRetainContext`: one more reference to `raw`, owned by the caller.
///
/// # Safety
///
/// `raw` is a valid context.
pub(crate) unsafe fn retain_context(raw: cl_context) -> Result<()> {
    // SAFETY: as the caller vouches.
    unsafe { cl::retain_context(raw) }.map_err(|s| Error::cl("clRetainContext", s))
}

/// `CL_CONTEXT_DEVICES`.
pub(crate) fn context_devices(raw: cl_context) -> Result<Vec<DeviceId>> {
    let devices = cl::get_context_info(raw, cl::CL_CONTEXT_DEVICES)
        .map_err(|s| Error::cl("clGetContextInfo", s))?
        .to_vec_intptr();
    Ok(devices
        .into_iter()
        .map(|d| DeviceId::new(d as cl_device_id))
        .collect())
}
