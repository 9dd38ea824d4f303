//! Platforms, devices and the selection rule.
//!
//! # Rules
//!
//! 1. **Named device.** `CL_LIFETIME_DEVICE` picks the device: `P:D` (platform and device indices, as
//!    `clinfo -l` lists them) or a case-insensitive substring of the device name, the
//!    platform name or the platform vendor (`nvidia`, `pocl`, `oclgrind`).
//! 2. **Default device.** Without it: the first GPU, else the first device of any kind.
//! 3. **Typed misses.** No loader, no platform, or no match is a typed error that says what was looked
//!    for, what was found and what to do: install an OpenCL driver (no loader, no platform),
//!    check the platforms' drivers (platforms without devices), or change or unset
//!    `CL_LIFETIME_DEVICE` (devices, none named by it). Nothing panics or waits.

use crate::util::sync::{Mutex, rank};
use std::fmt;

use crate::checks::Limits;
use crate::error::{Error, FILTER_HINT, NO_DEVICE_HINT, NO_PLATFORM_HINT, Result};
use crate::ffi::{self, cl_device_id, cl_device_type, cl_platform_id};

/// The *typed misses* rule's advice for a selection that found `platforms` platforms and
/// `devices` devices, none of them chosen.
fn no_device_hint(platforms: usize, devices: usize) -> &'static str {
    match (platforms, devices) {
        (0, _) => NO_PLATFORM_HINT,
        (_, 0) => NO_DEVICE_HINT,
        // The default rule takes any device there is: only a `CL_LIFETIME_DEVICE` misses.
        _ => FILTER_HINT,
    }
}

/// The environment variable that picks the device.
pub const DEVICE_VAR: &str = "CL_LIFETIME_DEVICE";

/// One OpenCL device, with what the library needs to know about it.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Context, Device};
/// let device = Device::from_env()?; // `CL_LIFETIME_DEVICE`, else the first GPU
/// assert!(Device::all()?.iter().any(|d| d.as_raw() == device.as_raw()));
/// let (platform, index) = device.indices();
/// let same = Device::select(Some(&format!("{platform}:{index}")))?;
/// assert_eq!(same.name(), device.name());
/// assert!(device.max_alloc_bytes() <= device.global_mem_bytes());
/// let ctx = Context::new(&device)?;
/// assert_eq!(ctx.device().as_raw(), device.as_raw());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) platform: ffi::PlatformId,
    pub(crate) id: ffi::DeviceId,
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
    /// `CL_DEVICE_SVM_CAPABILITIES`; 0 below OpenCL 2.0.
    svm: u64,
    /// What a launch is checked against (`crate::checks`).
    pub(crate) limits: Limits,
}

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

/// A kind of shared virtual memory (OpenCL 2.0's buffer SVM): how the host may reach an
/// [`SvmBuffer`](crate::SvmBuffer)'s memory.
///
/// The library reaches the host side of both kinds through maps
/// ([`Queue::map_svm`](crate::Queue::map_svm)), so code written for coarse-grained SVM runs
/// on either.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SvmKind {
    /// `CL_DEVICE_SVM_COARSE_GRAIN_BUFFER`: the host reaches the memory only while it is
    /// mapped. Every OpenCL 2.0 device with SVM has it.
    Coarse,
    /// `CL_DEVICE_SVM_FINE_GRAIN_BUFFER`: the device sees the host's writes without an
    /// unmap.
    Fine,
}

impl SvmKind {
    pub(crate) fn capability_bit(self) -> u64 {
        match self {
            SvmKind::Coarse => ffi::SVM_COARSE_GRAIN_BUFFER,
            SvmKind::Fine => ffi::SVM_FINE_GRAIN_BUFFER,
        }
    }

    /// The capability's OpenCL name, for errors.
    pub(crate) fn capability(self) -> &'static str {
        match self {
            SvmKind::Coarse => "CL_DEVICE_SVM_COARSE_GRAIN_BUFFER",
            SvmKind::Fine => "CL_DEVICE_SVM_FINE_GRAIN_BUFFER",
        }
    }
}

/// A device's launch limits; `version` is its `CL_DEVICE_VERSION`.
fn limits(id: ffi::DeviceId, version: &str) -> Result<Limits> {
    let mut max_item = [1; 3];
    let sizes = ffi::device_sizes(id, ffi::CL_DEVICE_MAX_WORK_ITEM_SIZES)?;
    for (slot, size) in max_item.iter_mut().zip(sizes) {
        *slot = size;
    }
    Ok(Limits {
        local_mem: ffi::device_u64(id, ffi::CL_DEVICE_LOCAL_MEM_SIZE)?,
        max_group: ffi::device_size(id, ffi::CL_DEVICE_MAX_WORK_GROUP_SIZE)?,
        max_item,
        address_bits: ffi::device_u32(id, ffi::CL_DEVICE_ADDRESS_BITS)?,
        base_align: (ffi::device_u32(id, ffi::CL_DEVICE_MEM_BASE_ADDR_ALIGN)? / 8).max(1) as usize,
        // OpenCL 2.x requires them; 3.0 says (a driver that cannot say has none).
        non_uniform: match opencl_major(version) {
            2 => true,
            3.. => ffi::device_u32(id, ffi::CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT)
                .is_ok_and(|b| b != 0),
            _ => false,
        },
    })
}

impl Device {
    fn query(
        platform: ffi::PlatformId,
        platform_index: usize,
        platform_name: &str,
        platform_vendor: &str,
        id: ffi::DeviceId,
        device_index: usize,
    ) -> Result<Device> {
        let version = ffi::device_string(id, ffi::CL_DEVICE_VERSION)?;
        // An OpenCL 1.x driver has no SVM, nor its query.
        let svm = if opencl_major(&version) >= 2 {
            ffi::svm_capabilities(id)
        } else {
            0
        };
        let limits = limits(id, &version)?;
        Ok(Device {
            platform,
            id,
            platform_index,
            device_index,
            platform_name: platform_name.to_string(),
            platform_vendor: platform_vendor.to_string(),
            name: ffi::device_string(id, ffi::CL_DEVICE_NAME)?,
            version,
            driver_version: ffi::device_string(id, ffi::CL_DRIVER_VERSION)?,
            kind: ffi::device_u64(id, ffi::CL_DEVICE_TYPE)?,
            max_alloc: ffi::device_u64(id, ffi::CL_DEVICE_MAX_MEM_ALLOC_SIZE)?,
            base_addr_align_bits: ffi::device_u32(id, ffi::CL_DEVICE_MEM_BASE_ADDR_ALIGN)?,
            global_mem: ffi::device_u64(id, ffi::CL_DEVICE_GLOBAL_MEM_SIZE)?,
            svm,
            limits,
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
        static ENUMERATING: Mutex<(), rank::Enumerating> = Mutex::new(());
        let _one_at_a_time = ENUMERATING.lock();
        let platforms = ffi::platform_ids()?;
        let mut devices = Vec::new();
        for (p, &platform_id) in platforms.iter().enumerate() {
            let platform_name = ffi::platform_string(platform_id, ffi::CL_PLATFORM_NAME)?;
            let platform_vendor = ffi::platform_string(platform_id, ffi::CL_PLATFORM_VENDOR)?;
            let ids = ffi::device_ids(platform_id)?;
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
        if let Some(device) = chosen {
            return Ok(device.clone());
        }
        // Counted again only on this error path: platforms without devices.
        let platforms = if devices.is_empty() {
            ffi::platform_ids()?.len()
        } else {
            1
        };
        Err(Error::NoDevice {
            looked_for: spec.map_or_else(
                || "any device".to_string(),
                |s| format!("{DEVICE_VAR}={s:?}"),
            ),
            found: devices.iter().map(ToString::to_string).collect(),
            hint: no_device_hint(platforms, devices.len()),
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

    /// The major OpenCL version the device reports (1 when unreadable): which queue and
    /// SVM entry points it has.
    pub(crate) fn opencl_major(&self) -> u32 {
        opencl_major(&self.version)
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
        self.kind & ffi::CL_DEVICE_TYPE_GPU != 0
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

    /// Whether the device reports shared virtual memory of `kind`
    /// (`CL_DEVICE_SVM_CAPABILITIES`; never below OpenCL 2.0).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Device, SvmKind};
    /// let device = Device::from_env()?;
    /// // Fine-grained buffer SVM is a superset: a device that has it has coarse too.
    /// assert!(!device.supports_svm(SvmKind::Fine) || device.supports_svm(SvmKind::Coarse));
    /// # Ok(())
    /// # }
    /// ```
    pub fn supports_svm(&self, kind: SvmKind) -> bool {
        self.svm & kind.capability_bit() != 0
    }

    /// The raw platform ID.
    pub fn platform_as_raw(&self) -> cl_platform_id {
        self.platform.raw()
    }

    /// The raw device ID (not reference counted: root devices live as long as the
    /// platform).
    pub fn as_raw(&self) -> cl_device_id {
        self.id.raw()
    }
}

/// The *named device* rule for `spec`.
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

/// The major version in a `CL_DEVICE_VERSION` string (`OpenCL <major>.<minor> <vendor>`);
/// 1 when it cannot be read, the version whose entry points every platform has.
pub(crate) fn opencl_major(version: &str) -> u32 {
    version
        .strip_prefix("OpenCL ")
        .and_then(|v| v.split('.').next())
        .and_then(|major| major.trim().parse().ok())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::opencl_major;

    #[test]
    fn the_opencl_major_version_is_read_from_the_device_version() {
        assert_eq!(opencl_major("OpenCL 1.2 Oclgrind 21.10"), 1);
        assert_eq!(opencl_major("OpenCL 3.0 CUDA"), 3);
        assert_eq!(opencl_major("OpenCL 3.0 PoCL HSTR: pthread-x86_64"), 3);
        assert_eq!(opencl_major("OpenCL 2.1 AMD-APP"), 2);
        assert_eq!(opencl_major("garbage"), 1);
        assert_eq!(opencl_major(""), 1);
    }

    use super::*;

    #[test]
    fn typed_misses_advise_by_what_was_found() {
        let none = no_device_hint(0, 0);
        assert!(none.contains("no platform") && none.contains("pocl-opencl-icd"));
        let empty = no_device_hint(2, 0);
        assert!(empty.contains("no device") && empty.contains("clinfo"));
        let filtered = no_device_hint(1, 3);
        assert!(filtered.contains(DEVICE_VAR) && filtered.contains("unset"));
        assert!(!filtered.contains("install"));
        for hint in [none, empty, filtered, crate::error::INSTALL_HINT] {
            assert!(
                !hint.contains("make "),
                "a user's crate has no Makefile: {hint}"
            );
        }
    }

    /// A device as the selection rules see it: names and indices, no driver behind it.
    fn device(p: usize, d: usize, platform: &str, vendor: &str, name: &str) -> Device {
        Device {
            platform: ffi::PlatformId::new(std::ptr::null_mut()),
            id: ffi::DeviceId::new(std::ptr::null_mut()),
            platform_index: p,
            device_index: d,
            platform_name: platform.to_string(),
            platform_vendor: vendor.to_string(),
            name: name.to_string(),
            version: "OpenCL 3.0".to_string(),
            driver_version: String::new(),
            kind: 0,
            max_alloc: 0,
            svm: 0,
            base_addr_align_bits: 0,
            global_mem: 0,
            limits: Limits {
                local_mem: 0,
                max_group: 1,
                max_item: [1; 3],
                address_bits: 64,
                base_align: 1,
                non_uniform: false,
            },
        }
    }

    fn machine() -> Vec<Device> {
        vec![
            device(
                0,
                0,
                "NVIDIA CUDA",
                "NVIDIA Corporation",
                "NVIDIA H100 80GB HBM3",
            ),
            device(
                1,
                0,
                "Portable Computing Language",
                "The pocl project",
                "cpu-x86-64",
            ),
            device(
                1,
                1,
                "Portable Computing Language",
                "The pocl project",
                "cpu-x86-64",
            ),
        ]
    }

    #[test]
    fn a_named_device_is_found_by_indices() {
        let devices = machine();
        assert_eq!(pick(&devices, "1:1").map(Device::indices), Some((1, 1)));
        assert_eq!(pick(&devices, " 0 : 0 ").map(Device::indices), Some((0, 0)));
        assert!(pick(&devices, "2:0").is_none());
    }

    #[test]
    fn a_named_device_is_found_by_any_name_case_blind() {
        let devices = machine();
        assert_eq!(pick(&devices, "nvidia").map(Device::indices), Some((0, 0)));
        assert_eq!(pick(&devices, "POCL").map(Device::indices), Some((1, 0)));
        assert_eq!(pick(&devices, "h100").map(Device::indices), Some((0, 0)));
        assert_eq!(
            pick(&devices, "Portable").map(Device::indices),
            Some((1, 0))
        );
        assert!(pick(&devices, "oclgrind").is_none());
    }
}
