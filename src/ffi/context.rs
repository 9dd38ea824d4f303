use std::ptr;

use opencl3::context::context as cl;

use super::{cl_context, cl_device_id};
use crate::error::{Error, Result};

/// `clCreateContext` over `devices` (all of one platform).
pub(crate) fn create_context(devices: &[cl_device_id]) -> Result<cl_context> {
    cl::create_context(devices, ptr::null(), None, ptr::null_mut())
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
