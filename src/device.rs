//! Platforms, devices and the selection rule.
//!
//! # Rules
//!
//! 1. `CL_LIFETIME_DEVICE` picks the device: `P:D` (platform and device indices, as
//!    `clinfo -l` lists them) or a case-insensitive substring of the device name, the
//!    platform name or the platform vendor (`nvidia`, `pocl`, `oclgrind`).
//! 2. Without it: the first GPU, else the first device of any kind.
//! 3. No loader, no platform, or no match is a typed error that says what was looked
//!    for, what was found and how to install PoCL. Nothing panics or waits.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use opencl3::device as cl;
use opencl3::platform::platform;
use opencl3::types::{cl_device_id, cl_device_type, cl_platform_id};

use crate::error::{Error, INSTALL_HINT, Result};

/// The environment variable that picks the device.
pub const DEVICE_VAR: &str = "CL_LIFETIME_DEVICE";

/// One OpenCL device, with what the library needs to know about it.
#[derive(Clone)]
pub struct Device {
    pub(crate) platform: cl_platform_id,
    pub(crate) id: cl_device_id,
    platform_index: usize,
    device_index: usize,
    platform_name: String,
    platform_vendor: String,
    name: String,
    version: String,
    driver_version: String,
    kind: cl_device_type,
    max_alloc: u64,
    base_addr_align_bits: u32,
    global_mem: u64,
    /// What a launch is checked against (`crate::launch`).
    pub(crate) limits: Limits,
}

/// A device's limits that launches are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// `CL_DEVICE_LOCAL_MEM_SIZE`.
    pub(crate) local_mem: u64,
    /// `CL_DEVICE_MAX_WORK_GROUP_SIZE`.
    pub(crate) max_group: usize,
    /// `CL_DEVICE_MAX_WORK_ITEM_SIZES` (three dimensions).
    pub(crate) max_item: [usize; 3],
    /// `CL_DEVICE_ADDRESS_BITS`: the width of `size_t` in kernels.
    pub(crate) address_bits: u32,
}

// SAFETY: platform and device IDs are plain handles that the OpenCL runtime lets any thread
// use (OpenCL 3.0 appendix A.2: all API calls are thread-safe except clSetKernelArg).
unsafe impl Send for Device {}
// SAFETY: as above; `Device` holds no interior mutability.
unsafe impl Sync for Device {}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({self})")
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} {} / {}",
            self.platform_index, self.device_index, self.platform_name, self.name
        )
    }
}

fn info_string(id: cl_device_id, param: u32) -> Result<String> {
    let value = cl::get_device_info(id, param).map_err(|s| Error::cl("clGetDeviceInfo", s))?;
    Ok(String::from(value)
        .trim_end_matches('\0')
        .trim()
        .to_string())
}

fn info_u64(id: cl_device_id, param: u32) -> Result<u64> {
    let value = cl::get_device_info(id, param).map_err(|s| Error::cl("clGetDeviceInfo", s))?;
    Ok(value.to_ulong())
}

fn info_u32(id: cl_device_id, param: u32) -> Result<u32> {
    let value = cl::get_device_info(id, param).map_err(|s| Error::cl("clGetDeviceInfo", s))?;
    Ok(value.to_uint())
}

impl Limits {
    fn query(id: cl_device_id) -> Result<Limits> {
        let sizes = cl::get_device_info(id, cl::CL_DEVICE_MAX_WORK_ITEM_SIZES)
            .map_err(|s| Error::cl("clGetDeviceInfo", s))?
            .to_vec_size();
        let mut max_item = [1; 3];
        for (slot, size) in max_item.iter_mut().zip(sizes) {
            *slot = size;
        }
        let max_group = cl::get_device_info(id, cl::CL_DEVICE_MAX_WORK_GROUP_SIZE)
            .map_err(|s| Error::cl("clGetDeviceInfo", s))?
            .to_size();
        Ok(Limits {
            local_mem: info_u64(id, cl::CL_DEVICE_LOCAL_MEM_SIZE)?,
            max_group,
            max_item,
            address_bits: info_u32(id, cl::CL_DEVICE_ADDRESS_BITS)?,
        })
    }
}

impl Device {
    fn query(
        platform: cl_platform_id,
        platform_index: usize,
        platform_name: &str,
        platform_vendor: &str,
        id: cl_device_id,
        device_index: usize,
    ) -> Result<Device> {
        Ok(Device {
            platform,
            id,
            platform_index,
            device_index,
            platform_name: platform_name.to_string(),
            platform_vendor: platform_vendor.to_string(),
            name: info_string(id, cl::CL_DEVICE_NAME)?,
            version: info_string(id, cl::CL_DEVICE_VERSION)?,
            driver_version: info_string(id, cl::CL_DRIVER_VERSION)?,
            kind: info_u64(id, cl::CL_DEVICE_TYPE)?,
            max_alloc: info_u64(id, cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE)?,
            base_addr_align_bits: info_u32(id, cl::CL_DEVICE_MEM_BASE_ADDR_ALIGN)?,
            global_mem: info_u64(id, cl::CL_DEVICE_GLOBAL_MEM_SIZE)?,
            limits: Limits::query(id)?,
        })
    }

    /// Every device of every platform, in `clinfo -l` order.
    ///
    /// # Errors
    ///
    /// [`Error::NoLoader`] when `libOpenCL.so.1` cannot be opened; [`Error::Cl`] when a
    /// query fails. No platform at all gives an empty list.
    pub fn all() -> Result<Vec<Device>> {
        // PoCL 3.1 crashes in clGetDeviceInfo when two threads enumerate at once during its
        // first initialisation; one enumeration at a time costs nothing that matters.
        static ENUMERATING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = ENUMERATING.lock().unwrap_or_else(PoisonError::into_inner);
        let platforms = match platform::get_platform_ids() {
            Ok(p) => p,
            // The ICD loader's "no platform" (CL_PLATFORM_NOT_FOUND_KHR).
            Err(-1001) => return Ok(Vec::new()),
            Err(s) => return Err(Error::cl("clGetPlatformIDs", s)),
        };
        let mut devices = Vec::new();
        for (p, &platform_id) in platforms.iter().enumerate() {
            let platform_info = |param| {
                platform::get_platform_info(platform_id, param)
                    .map(|v| String::from(v).trim_end_matches('\0').trim().to_string())
                    .map_err(|s| Error::cl("clGetPlatformInfo", s))
            };
            let platform_name = platform_info(platform::CL_PLATFORM_NAME)?;
            let platform_vendor = platform_info(platform::CL_PLATFORM_VENDOR)?;
            let ids = match cl::get_device_ids(platform_id, cl::CL_DEVICE_TYPE_ALL) {
                Ok(ids) => ids,
                Err(cl::CL_DEVICE_NOT_FOUND) => continue,
                Err(s) => return Err(Error::cl("clGetDeviceIDs", s)),
            };
            for (d, &id) in ids.iter().enumerate() {
                devices.push(Device::query(
                    platform_id,
                    p,
                    &platform_name,
                    &platform_vendor,
                    id,
                    d,
                )?);
            }
        }
        Ok(devices)
    }

    /// The device named by `CL_LIFETIME_DEVICE`, or by the default rule without it.
    ///
    /// # Errors
    ///
    /// As [`Device::select`].
    pub fn from_env() -> Result<Device> {
        let spec = std::env::var(DEVICE_VAR).ok();
        Device::select(spec.as_deref().filter(|s| !s.trim().is_empty()))
    }

    /// The device matching `spec` (`P:D` or a name substring), or by the default rule
    /// (first GPU, else first device) when `spec` is `None`.
    ///
    /// # Errors
    ///
    /// [`Error::NoDevice`] listing what was found when nothing matches;
    /// [`Error::NoLoader`] without an OpenCL loader.
    pub fn select(spec: Option<&str>) -> Result<Device> {
        let devices = Device::all()?;
        let chosen = match spec {
            Some(spec) => pick(&devices, spec),
            None => devices
                .iter()
                .find(|d| d.is_gpu())
                .or_else(|| devices.first()),
        };
        chosen.cloned().ok_or_else(|| Error::NoDevice {
            looked_for: spec.map_or_else(
                || "any device".to_string(),
                |s| format!("{DEVICE_VAR}={s:?}"),
            ),
            found: devices.iter().map(ToString::to_string).collect(),
            hint: INSTALL_HINT,
        })
    }

    /// Platform name, such as `Portable Computing Language`.
    pub fn platform_name(&self) -> &str {
        &self.platform_name
    }

    /// Platform vendor, such as `The pocl project`.
    pub fn platform_vendor(&self) -> &str {
        &self.platform_vendor
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `CL_DEVICE_VERSION`, such as `OpenCL 3.0 CUDA`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `CL_DRIVER_VERSION`.
    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    /// `P:D` indices, as `clinfo -l` lists them.
    pub fn indices(&self) -> (usize, usize) {
        (self.platform_index, self.device_index)
    }

    /// Whether it is a GPU.
    pub fn is_gpu(&self) -> bool {
        self.kind & cl::CL_DEVICE_TYPE_GPU != 0
    }

    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE` in bytes: the largest single buffer.
    pub fn max_alloc_bytes(&self) -> u64 {
        self.max_alloc
    }

    /// `CL_DEVICE_GLOBAL_MEM_SIZE` in bytes.
    pub fn global_mem_bytes(&self) -> u64 {
        self.global_mem
    }

    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` in bytes: the alignment a sub-buffer origin needs.
    pub fn base_addr_align_bytes(&self) -> u64 {
        u64::from(self.base_addr_align_bits / 8).max(1)
    }

    /// The raw platform ID.
    pub fn platform_as_raw(&self) -> cl_platform_id {
        self.platform
    }

    /// The raw device ID (not reference counted: root devices live as long as the
    /// platform).
    pub fn as_raw(&self) -> cl_device_id {
        self.id
    }
}

/// Applies rule 1 to `spec`.
fn pick<'a>(devices: &'a [Device], spec: &str) -> Option<&'a Device> {
    let spec = spec.trim();
    if let Some((p, d)) = spec.split_once(':') {
        if let (Ok(p), Ok(d)) = (p.trim().parse::<usize>(), d.trim().parse::<usize>()) {
            return devices.iter().find(|x| x.indices() == (p, d));
        }
    }
    let needle = spec.to_lowercase();
    devices.iter().find(|x| {
        [&x.name, &x.platform_name, &x.platform_vendor]
            .iter()
            .any(|s| s.to_lowercase().contains(&needle))
    })
}
