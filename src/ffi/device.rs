use opencl3::device as cl;
use opencl3::platform::platform;

use super::{cl_device_id, cl_platform_id};
use crate::error::{Error, Result};

pub(crate) use cl::{
    CL_DEVICE_ADDRESS_BITS, CL_DEVICE_GLOBAL_MEM_SIZE, CL_DEVICE_LOCAL_MEM_SIZE,
    CL_DEVICE_MAX_MEM_ALLOC_SIZE, CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_ITEM_SIZES,
    CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_DEVICE_NAME, CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT,
    CL_DEVICE_TYPE, CL_DEVICE_TYPE_GPU, CL_DEVICE_VERSION, CL_DRIVER_VERSION,
};
pub(crate) use opencl3::types::cl_device_type;
pub(crate) use platform::{CL_PLATFORM_NAME, CL_PLATFORM_VENDOR};

/// Declares an ID type: the driver's for the process's whole life, with no reference to
/// own (`clRetainDevice` and `clReleaseDevice` do nothing for a root device, and platforms
/// have neither).
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident($raw:ty);)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        #[repr(transparent)]
        pub(crate) struct $name($raw);

        impl $name {
            /// An ID the driver returned in a list of platforms or root devices.
            #[allow(dead_code, reason = "a platform's is made here only, but in tests")]
            pub(crate) fn new(raw: $raw) -> $name {
                $name(raw)
            }

            /// The raw ID.
            #[inline]
            pub(crate) fn raw(self) -> $raw {
                self.0
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:p}", self.0)
            }
        }

        impl std::fmt::Pointer for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Pointer::fmt(&self.0, f)
            }
        }

        // SAFETY: the ID is valid for the process's life, every OpenCL call on it may be
        // made from any thread (OpenCL 3.0 appendix A.2), and it owns nothing.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
    )*};
}

ids! {
    /// A root device's ID.
    DeviceId(cl_device_id);
    /// A platform's ID.
    PlatformId(cl_platform_id);
}

/// `clGetPlatformIDs`; no platform at all is an empty list.
pub(crate) fn platform_ids() -> Result<Vec<PlatformId>> {
    match platform::get_platform_ids() {
        Ok(ids) => Ok(ids.into_iter().map(PlatformId).collect()),
        // The ICD loader's "no platform" (CL_PLATFORM_NOT_FOUND_KHR).
        Err(-1001) => Ok(Vec::new()),
        Err(s) => Err(Error::cl("clGetPlatformIDs", s)),
    }
}

/// A string of `clGetPlatformInfo`, trimmed.
pub(crate) fn platform_string(id: PlatformId, param: u32) -> Result<String> {
    platform::get_platform_info(id.0, param)
        .map(|v| String::from(v).trim_end_matches('\0').trim().to_string())
        .map_err(|s| Error::cl("clGetPlatformInfo", s))
}

/// `clGetDeviceIDs` of every type; a platform without devices gives an empty list.
pub(crate) fn device_ids(platform: PlatformId) -> Result<Vec<DeviceId>> {
    match cl::get_device_ids(platform.0, cl::CL_DEVICE_TYPE_ALL) {
        Ok(ids) => Ok(ids.into_iter().map(DeviceId).collect()),
        Err(cl::CL_DEVICE_NOT_FOUND) => Ok(Vec::new()),
        Err(s) => Err(Error::cl("clGetDeviceIDs", s)),
    }
}

fn device_info_error(status: i32) -> Error {
    Error::cl("clGetDeviceInfo", status)
}

/// A string of `clGetDeviceInfo`, trimmed.
pub(crate) fn device_string(id: DeviceId, param: u32) -> Result<String> {
    Ok(
        String::from(cl::get_device_info(id.0, param).map_err(device_info_error)?)
            .trim_end_matches('\0')
            .trim()
            .to_string(),
    )
}

/// A `cl_ulong` (or bitfield) of `clGetDeviceInfo`.
pub(crate) fn device_u64(id: DeviceId, param: u32) -> Result<u64> {
    Ok(cl::get_device_info(id.0, param)
        .map_err(device_info_error)?
        .to_ulong())
}

/// A `cl_uint` of `clGetDeviceInfo`.
pub(crate) fn device_u32(id: DeviceId, param: u32) -> Result<u32> {
    Ok(cl::get_device_info(id.0, param)
        .map_err(device_info_error)?
        .to_uint())
}

/// A `size_t` of `clGetDeviceInfo`.
pub(crate) fn device_size(id: DeviceId, param: u32) -> Result<usize> {
    Ok(cl::get_device_info(id.0, param)
        .map_err(device_info_error)?
        .to_size())
}

/// A `size_t[]` of `clGetDeviceInfo`.
pub(crate) fn device_sizes(id: DeviceId, param: u32) -> Result<Vec<usize>> {
    Ok(cl::get_device_info(id.0, param)
        .map_err(device_info_error)?
        .to_vec_size())
}
