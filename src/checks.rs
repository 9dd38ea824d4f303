//! What a launch is checked against before the driver sees it.
//!
//! # Rules
//!
//! 1. **Argument information.** Every program is built with `-cl-kernel-arg-info`, and when a kernel object is
//!    created the library reads each parameter's address space and type once
//!    (`clGetKernelArgInfo`).
//! 2. **Declared kinds.** A `__global` or `__constant` pointer takes a buffer ([`Arg::read`],
//!    [`Arg::write`], [`Arg::read_write`]) and nothing else; a `__local` pointer takes
//!    [`Arg::local`]; a parameter passed by value takes [`Arg::scalar`] of its size. The
//!    sizes of OpenCL's built-in scalar and vector types are known (`size_t` and its kin
//!    from `CL_DEVICE_ADDRESS_BITS`); for a struct or a typedef the driver checks the
//!    size. Images, samplers, pipes and device queues are refused: the library cannot
//!    pass them.
//! 3. **Element types.** Where a parameter's type (a buffer's elements, or a value) is an
//!    OpenCL built-in scalar or vector type and the Rust type given is one too (`f32` is
//!    `float`, `[i32; 4]` is `int4`; [`Pod`](crate::Pod) types of the user's are left to
//!    the caller, as are the kernel's structs), they must be of one kind (integer or
//!    floating point), lane size and lane count: a `ClBuffer<f32>` for an `int*` is
//!    refused with both types named. Integers of one width match whatever their
//!    signedness (a `u32` for an `int`): the bits are the same, and such code is common.
//! 4. **Const parameters.** A buffer given with [`Arg::write`] for a `const` (or
//!    `__constant`) parameter is refused: the kernel cannot write it, and the launch would
//!    order every later command behind a write that cannot happen. One given with
//!    [`Arg::read`] for a parameter that is not `const` launches, and is logged once per
//!    kernel and argument (target `cl_lifetime::kernel`): many kernels leave `const` off
//!    inputs they only read, so refusing would break them, but if the kernel does write
//!    it, the library does not order later commands after that write.
//! 5. **Local memory.** Each [`Arg::local`] is at least one byte, and together they fit in
//!    the device's `CL_DEVICE_LOCAL_MEM_SIZE`.
//! 6. **Work sizes.** One to three dimensions, none of them zero. A local size has as many
//!    dimensions, each within `CL_DEVICE_MAX_WORK_ITEM_SIZES`, their product within
//!    `CL_DEVICE_MAX_WORK_GROUP_SIZE`. Each global dimension is at most 2³² − 1 work
//!    groups (of the local size given, or of the largest group the device allows when the
//!    driver chooses): a larger range cannot end in practice (NVIDIA refuses it, PoCL
//!    runs it for ever). A local size given is also equal to the kernel's
//!    `reqd_work_group_size` where it declares one, and divides the global size in each
//!    dimension unless non-uniform work groups are allowed: on an OpenCL 2.x device, or a
//!    3.0 one with `CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT`, for a program built by the
//!    library with `-cl-std=CL2.0` or later and without `-cl-uniform-work-group-size`
//!    (OpenCL C 1.x, the default, needs uniform groups). Of a program built by other code
//!    the library does not know the options, and leaves that to the driver. So a launch
//!    the driver would refuse for its work size is refused before any command reaches its
//!    buffers (a new buffer's zero fill included): the driver's own refusal, still
//!    [`Error::WorkSize`], remains for what no query shows.
//! 7. **No argument information.** Where the driver gives no argument information (`CL_KERNEL_ARG_INFO_NOT_AVAILABLE`)
//!    the declared kinds cannot be checked: the count, local memory and work sizes still
//!    are, and what a scalar is given for reaches the driver unchecked.
//!
//! What no check can see is the kernel's body: a kernel that indexes past a buffer's end
//! writes device memory it does not own (host memory on a CPU device). The user vouches
//! for that when launching (see [`Queue::launch`](crate::Queue::launch)).
//!
//! [`Arg::read`]: crate::Arg::read
//! [`Arg::write`]: crate::Arg::write
//! [`Arg::read_write`]: crate::Arg::read_write
//! [`Arg::local`]: crate::Arg::local
//! [`Arg::scalar`]: crate::Arg::scalar

use std::fmt;

use crate::error::{Error, Result};
use crate::pod::{Element, Ty};
use crate::tracker::Access;

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
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN`, in bytes (at least 1): where a sub-buffer may
    /// start.
    pub(crate) base_align: usize,
    /// Whether the device runs non-uniform work groups for a program of OpenCL C 2.0 or
    /// later: an OpenCL 2.x device, or a 3.0 one with
    /// `CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT` (the *work sizes* rule).
    pub(crate) non_uniform: bool,
}

/// A kernel's work-group limits on one device (the *work sizes* rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Groups {
    /// `CL_KERNEL_WORK_GROUP_SIZE`: the most work items in one of its groups.
    pub(crate) max: usize,
    /// `CL_KERNEL_COMPILE_WORK_GROUP_SIZE`, where the kernel declares
    /// `reqd_work_group_size`.
    pub(crate) reqd: Option<[usize; 3]>,
}

/// Whether a program built with `options` may run non-uniform work groups where its
/// device allows them (the *work sizes* rule): OpenCL C 2.0 or later
/// (`-cl-std=CL2.0`, `CL3.0`, `CLC++`), without `-cl-uniform-work-group-size`.
pub(crate) fn allows_non_uniform(options: &str) -> bool {
    let std = options
        .split_whitespace()
        .filter_map(|o| o.strip_prefix("-cl-std="))
        .next_back();
    let modern =
        std.is_some_and(|v| v.starts_with("CL2") || v.starts_with("CL3") || v.starts_with("CLC++"));
    modern
        && !options
            .split_whitespace()
            .any(|o| o == "-cl-uniform-work-group-size")
}

/// `CL_KERNEL_ARG_ADDRESS_GLOBAL` and its kin.
const ADDRESS_GLOBAL: u32 = 0x119B;
const ADDRESS_LOCAL: u32 = 0x119C;
const ADDRESS_CONSTANT: u32 = 0x119D;

/// The *work sizes* rule: the most work groups one global dimension may hold.
const MAX_GROUPS: u128 = u32::MAX as u128;

/// What a parameter takes (the *declared kinds* rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamKind {
    /// A `__global` or `__constant` pointer.
    Buffer,
    /// A `__local` pointer.
    Local,
    /// A value of this many bytes (`None`: a type whose size the library does not know).
    Scalar(Option<usize>),
    /// An image, sampler, pipe or queue.
    Unsupported,
}

/// One parameter as the kernel declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) kind: ParamKind,
    /// As written in the kernel, such as `__global int* data`.
    pub(crate) declared: String,
    /// The type a buffer's elements or a value have, where it is an OpenCL built-in
    /// (the *element types* rule).
    pub(crate) element: Option<Element>,
    /// That type's name, such as `int` or `float4`.
    pub(crate) type_name: String,
    /// Whether the kernel cannot write through it: `const`-qualified, or `__constant`.
    pub(crate) read_only: bool,
}

impl Param {
    /// The *declared kinds* rule, from `clGetKernelArgInfo`'s address qualifier, type
    /// name, whether the type is `const`, and name.
    pub(crate) fn new(
        address: u32,
        type_name: &str,
        is_const: bool,
        name: &str,
        address_bits: u32,
    ) -> Param {
        let space = match address {
            ADDRESS_GLOBAL => "__global ",
            ADDRESS_CONSTANT => "__constant ",
            ADDRESS_LOCAL => "__local ",
            _ => "",
        };
        let type_name = type_name.trim();
        let qualifier = if is_const { "const " } else { "" };
        let declared = format!("{space}{qualifier}{type_name} {name}")
            .trim()
            .to_string();
        let opaque = [
            "image",
            "sampler_t",
            "pipe",
            "queue_t",
            "clk_event_t",
            "reserve_id_t",
        ]
        .iter()
        .any(|t| type_name.contains(t));
        let kind = match address {
            _ if opaque => ParamKind::Unsupported,
            ADDRESS_GLOBAL | ADDRESS_CONSTANT => ParamKind::Buffer,
            ADDRESS_LOCAL => ParamKind::Local,
            _ if type_name.ends_with('*') => ParamKind::Unsupported,
            _ => ParamKind::Scalar(scalar_size(type_name, address_bits)),
        };
        let pointee = match kind {
            ParamKind::Buffer | ParamKind::Local => type_name.trim_end_matches('*').trim(),
            _ => type_name,
        };
        Param {
            kind,
            declared,
            element: element_of(pointee, address_bits),
            type_name: pointee.to_string(),
            read_only: is_const || address == ADDRESS_CONSTANT,
        }
    }
}

/// The *element types* rule: the built-in type a type name names (`uint`, `float4`,
/// `unsigned char`, `size_t`), a 3-vector counted as the four lanes it takes; `None` for
/// any other type.
pub(crate) fn element_of(type_name: &str, address_bits: u32) -> Option<Element> {
    let (base, lanes) = split_type(type_name)?;
    let (float, bytes) = match base {
        "char" | "uchar" => (false, 1),
        "short" | "ushort" => (false, 2),
        "half" => (true, 2),
        "int" | "uint" => (false, 4),
        "float" => (true, 4),
        "long" | "ulong" => (false, 8),
        "double" => (true, 8),
        "size_t" | "ptrdiff_t" | "intptr_t" | "uintptr_t" if lanes == 1 => {
            (false, address_bits / 8)
        }
        _ => return None,
    };
    Some(Element {
        float,
        bytes: bytes as u8,
        lanes: lanes as u8,
    })
}

/// A built-in type name's base and lanes (`float4`: `float`, 4; a 3-vector: 4 lanes).
fn split_type(type_name: &str) -> Option<(&str, usize)> {
    let mut t = type_name.trim();
    while let Some(rest) = ["const ", "volatile "]
        .iter()
        .find_map(|q| t.strip_prefix(q))
    {
        t = rest.trim_start();
    }
    let t = match t {
        "unsigned char" => "uchar",
        "unsigned short" => "ushort",
        "unsigned int" => "uint",
        "unsigned long" => "ulong",
        other => other,
    };
    let split = t.find(|c: char| c.is_ascii_digit()).unwrap_or(t.len());
    let (base, lanes) = t.split_at(split);
    let lanes = match lanes {
        "" => 1,
        "2" => 2,
        "3" | "4" => 4, // a 3-vector is stored as a 4-vector
        "8" => 8,
        "16" => 16,
        _ => return None,
    };
    Some((base, lanes))
}

/// The size in bytes of an OpenCL built-in scalar or vector type by name (`uint`,
/// `float4`, `unsigned char`, `size_t`); `None` for any other type.
pub(crate) fn scalar_size(type_name: &str, address_bits: u32) -> Option<usize> {
    element_of(type_name, address_bits).map(|e| e.bytes as usize * e.lanes as usize)
}

/// What a launch gives for one parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Given {
    Buffer {
        access: Access,
        /// Passed as [`Arg::read_write`](crate::Arg::read_write) (recorded as written).
        read_write: bool,
        ty: Ty,
    },
    Scalar {
        bytes: usize,
        ty: Ty,
    },
    Local(usize),
}

impl fmt::Display for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Given::Buffer {
                access: Access::Read,
                ty,
                ..
            } => write!(f, "a buffer of {} read (Arg::read)", ty.rust),
            Given::Buffer {
                read_write: true,
                ty,
                ..
            } => write!(
                f,
                "a buffer of {} read and written (Arg::read_write)",
                ty.rust
            ),
            Given::Buffer { ty, .. } => write!(f, "a buffer of {} written (Arg::write)", ty.rust),
            Given::Scalar { bytes, ty } => write!(f, "a {bytes}-byte scalar ({})", ty.rust),
            Given::Local(bytes) => write!(f, "local memory of {bytes} bytes"),
        }
    }
}

/// The *declared kinds*, *element types* and *const parameters* rules for one argument:
/// why `given` does not fit `param`, if it does not.
fn mismatch(param: &Param, given: Given) -> Option<String> {
    let types = |ty: Ty| match (param.element, ty.element) {
        (Some(declared), Some(element)) if !element.fits(declared) => Some(format!(
            "the kernel declares {} and {} is given",
            param.type_name, ty.rust
        )),
        _ => None,
    };
    match (param.kind, given) {
        (ParamKind::Unsupported, _) => {
            Some("the library cannot pass images, samplers, pipes or device queues".to_string())
        }
        (ParamKind::Buffer, Given::Buffer { access, ty, .. }) => types(ty).or_else(|| {
            (param.read_only && access == Access::Write).then(|| {
                "the parameter is const (or __constant): the kernel cannot write it, so \
                 pass Arg::read"
                    .to_string()
            })
        }),
        (ParamKind::Local, Given::Local(_)) => None,
        (ParamKind::Scalar(None), Given::Scalar { ty, .. }) => types(ty),
        (ParamKind::Scalar(Some(size)), Given::Scalar { bytes, ty }) => {
            if size == bytes {
                types(ty)
            } else {
                Some(format!("the kernel declares a {size}-byte value"))
            }
        }
        (ParamKind::Buffer, _) => Some("a global or constant pointer takes a buffer".into()),
        (ParamKind::Local, _) => Some("a local pointer takes Arg::local".into()),
        (ParamKind::Scalar(_), _) => Some("a value parameter takes Arg::scalar".into()),
    }
}

/// What parameter `index` declares, for error messages (`unknown` without argument
/// information).
pub(crate) fn declared(params: Option<&[Param]>, index: usize) -> String {
    params
        .and_then(|p| p.get(index))
        .map_or_else(|| "unknown".to_string(), |p| p.declared.clone())
}

/// The *declared kinds*, *element types*, *const parameters*, *local memory* and *no
/// argument information* rules: checks `given` against the kernel's parameters (`None`:
/// the driver gives no argument information). Returns the arguments (a bit per index
/// below 64) where a buffer is given with [`Arg::read`] for a parameter the kernel may
/// write, for the caller to log.
pub(crate) fn check_args(
    kernel: &str,
    params: Option<&[Param]>,
    given: impl IntoIterator<Item = Given>,
    limits: &Limits,
) -> Result<u64> {
    let mut local_total: u64 = 0;
    let mut read_but_writable = 0u64;
    for (index, given) in given.into_iter().enumerate() {
        let param = params.and_then(|p| p.get(index));
        let refuse = |reason: String| Error::KernelArg {
            kernel: kernel.to_string(),
            index,
            declared: declared(params, index),
            given: given.to_string(),
            reason,
            status: None,
        };
        if let Some(reason) = param.and_then(|p| mismatch(p, given)) {
            return Err(refuse(reason));
        }
        let read = matches!(
            given,
            Given::Buffer {
                access: Access::Read,
                ..
            }
        );
        if read && param.is_some_and(|p| !p.read_only) && index < 64 {
            read_but_writable |= 1 << index;
        }
        if let Given::Local(bytes) = given {
            if bytes == 0 {
                return Err(refuse("local memory must be at least one byte".into()));
            }
            local_total = local_total.saturating_add(bytes as u64);
            if local_total > limits.local_mem {
                return Err(refuse(format!(
                    "local arguments total {local_total} bytes, over the device's \
                     CL_DEVICE_LOCAL_MEM_SIZE of {} bytes",
                    limits.local_mem
                )));
            }
        }
    }
    Ok(read_but_writable)
}

/// The *work sizes* rule.
pub(crate) fn check_work(global: &[usize], local: Option<&[usize]>, limits: &Limits) -> Result<()> {
    let refuse = |reason: String| Error::WorkSize {
        global: global.to_vec(),
        local: local.map(<[usize]>::to_vec),
        reason,
        status: None,
    };
    if global.is_empty() || global.len() > 3 {
        return Err(refuse("a launch has one to three dimensions".into()));
    }
    if global.contains(&0) {
        return Err(refuse("a global dimension is zero".into()));
    }
    if let Some(local) = local {
        if local.len() != global.len() {
            return Err(refuse(
                "the local size needs as many dimensions as the global".into(),
            ));
        }
        if local.contains(&0) {
            return Err(refuse("a local dimension is zero".into()));
        }
        if let Some(d) = (0..local.len()).find(|&d| local[d] > limits.max_item[d]) {
            return Err(refuse(format!(
                "local dimension {d} is over the device's CL_DEVICE_MAX_WORK_ITEM_SIZES {:?}",
                limits.max_item
            )));
        }
        let items = local.iter().map(|&l| l as u128).product::<u128>();
        if items > limits.max_group as u128 {
            return Err(refuse(format!(
                "{items} work items per group, over the device's \
                 CL_DEVICE_MAX_WORK_GROUP_SIZE of {}",
                limits.max_group
            )));
        }
    }
    let size_max = (1u128 << limits.address_bits.min(64)) - 1;
    for (d, &size) in global.iter().enumerate() {
        let group = local
            .map_or(limits.max_item[d].min(limits.max_group), |l| l[d])
            .max(1);
        let cap = (MAX_GROUPS * group as u128).min(size_max);
        if size as u128 > cap {
            return Err(refuse(format!(
                "global dimension {d} is over {cap} work items (2^32 - 1 groups of {group}), \
                 a range that cannot end"
            )));
        }
    }
    Ok(())
}

/// The *work sizes* rule, for a launch with a `local` size that passed
/// [`check_work`]: `groups` are the kernel's limits on the queue's device (`None`: not
/// known), `uniform` whether its groups must divide the global size (`None`: not known).
pub(crate) fn check_groups(
    global: &[usize],
    local: &[usize],
    groups: Option<&Groups>,
    uniform: Option<bool>,
) -> Result<()> {
    let refuse = |reason: String| Error::WorkSize {
        global: global.to_vec(),
        local: Some(local.to_vec()),
        reason,
        status: None,
    };
    if let Some(groups) = groups {
        if let Some(reqd) = groups.reqd {
            let given = (0..3).map(|d| local.get(d).copied().unwrap_or(1));
            if !given.eq(reqd) {
                return Err(refuse(format!(
                    "the kernel declares reqd_work_group_size({}, {}, {})",
                    reqd[0], reqd[1], reqd[2]
                )));
            }
        }
        // The kernel's CL_KERNEL_WORK_GROUP_SIZE is not checked: rusticl reports 32 for a
        // kernel it runs in groups of 64, and a driver that means it refuses the launch.
    }
    if uniform == Some(true) {
        if let Some(d) = (0..local.len()).find(|&d| global[d] % local[d] != 0) {
            return Err(refuse(format!(
                "global dimension {d} is not a multiple of the local one, and this kernel's \
                 work groups must be uniform (OpenCL C 1.x, -cl-uniform-work-group-size, or \
                 a device without non-uniform work groups)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        local_mem: 64 * 1024,
        max_group: 1024,
        max_item: [1024, 1024, 64],
        address_bits: 64,
        base_align: 128,
        non_uniform: true,
    };

    #[test]
    fn built_in_types_have_their_sizes_and_others_none() {
        assert_eq!(scalar_size("uint", 64), Some(4));
        assert_eq!(scalar_size("unsigned int", 64), Some(4));
        assert_eq!(scalar_size("const float4", 64), Some(16));
        assert_eq!(scalar_size("float3", 64), Some(16));
        assert_eq!(scalar_size("double16", 64), Some(128));
        assert_eq!(scalar_size("char", 64), Some(1));
        assert_eq!(scalar_size("size_t", 64), Some(8));
        assert_eq!(scalar_size("size_t", 32), Some(4));
        assert_eq!(scalar_size("my_struct", 64), None);
        assert_eq!(scalar_size("int5", 64), None);
    }

    fn buffer<T: crate::Pod>(access: Access) -> Given {
        Given::Buffer {
            access,
            read_write: false,
            ty: Ty::of::<T>(),
        }
    }

    fn scalar<T: crate::Pod>() -> Given {
        Given::Scalar {
            bytes: size_of::<T>(),
            ty: Ty::of::<T>(),
        }
    }

    #[test]
    fn a_global_pointer_takes_only_a_buffer() {
        let p = Param::new(ADDRESS_GLOBAL, "int*", false, "data", 64);
        assert_eq!(p.kind, ParamKind::Buffer);
        assert_eq!(p.declared, "__global int* data");
        assert!(mismatch(&p, buffer::<i32>(Access::Write)).is_none());
        assert!(mismatch(&p, scalar::<u64>()).is_some());
        assert!(mismatch(&p, Given::Local(8)).is_some());
    }

    #[test]
    fn a_value_parameter_takes_a_scalar_of_its_size() {
        let p = Param::new(0x119E, "uint", false, "n", 64);
        assert_eq!(p.kind, ParamKind::Scalar(Some(4)));
        assert!(mismatch(&p, scalar::<u32>()).is_none());
        assert!(mismatch(&p, scalar::<u64>()).is_some());
        assert!(mismatch(&p, buffer::<u32>(Access::Read)).is_some());
    }

    // A `ClBuffer<f32>` for an `int*` parameter, or an `f32` scalar for an `int` one,
    // launched.
    #[test]
    fn a_buffer_or_scalar_of_another_element_type_is_refused_naming_both_types() {
        let data = Param::new(ADDRESS_GLOBAL, "int*", false, "data", 64);
        let reason = mismatch(&data, buffer::<f32>(Access::Write)).unwrap();
        assert!(reason.contains("int") && reason.contains("f32"), "{reason}");
        let n = Param::new(0x119E, "int", false, "n", 64);
        let reason = mismatch(&n, scalar::<f32>()).unwrap();
        assert!(reason.contains("int") && reason.contains("f32"), "{reason}");
        // Integers of one width fit whatever their signedness.
        assert!(mismatch(&data, buffer::<u32>(Access::Write)).is_none());
        assert!(mismatch(&n, scalar::<u32>()).is_none());
        // Vectors by lanes: a float4 takes [f32; 4], a float3 takes the four lanes it fills.
        let v = Param::new(ADDRESS_GLOBAL, "float4*", false, "v", 64);
        assert!(mismatch(&v, buffer::<[f32; 4]>(Access::Read)).is_none());
        assert!(mismatch(&v, buffer::<f32>(Access::Read)).is_some());
        assert!(mismatch(&v, buffer::<[i32; 4]>(Access::Read)).is_some());
        let v3 = Param::new(0x119E, "float3", false, "v", 64);
        assert!(mismatch(&v3, scalar::<[f32; 4]>()).is_none());
        // size_t is an integer of the device's address width.
        let size = Param::new(0x119E, "size_t", false, "n", 64);
        assert!(mismatch(&size, scalar::<u64>()).is_none());
        assert!(mismatch(&size, scalar::<f64>()).is_some());
        // User types are left to the caller, either side.
        let s = Param::new(ADDRESS_GLOBAL, "struct particle*", false, "p", 64);
        assert!(mismatch(&s, buffer::<f32>(Access::Write)).is_none());
        assert!(mismatch(&data, buffer::<[u8; 3]>(Access::Write)).is_none());
    }

    // `Arg::write` given for a `const` (or `__constant`) parameter is refused: the kernel
    // cannot write it. `Arg::read` for a writable one is reported to the caller to log.
    #[test]
    fn a_const_parameter_refuses_arg_write_and_a_writable_one_reports_arg_read() {
        let input = Param::new(ADDRESS_GLOBAL, "float*", true, "a", 64);
        let table = Param::new(ADDRESS_CONSTANT, "float*", false, "t", 64);
        let out = Param::new(ADDRESS_GLOBAL, "float*", false, "out", 64);
        for p in [&input, &table] {
            let reason = mismatch(p, buffer::<f32>(Access::Write)).unwrap();
            assert!(reason.contains("const"), "{reason}");
            assert!(mismatch(p, buffer::<f32>(Access::Read)).is_none());
        }
        let params = [input, table, out];
        let reads = check_args(
            "k",
            Some(&params),
            [
                buffer::<f32>(Access::Read),
                buffer::<f32>(Access::Read),
                buffer::<f32>(Access::Read),
            ],
            &LIMITS,
        );
        assert_eq!(reads.unwrap(), 0b100);
    }

    #[test]
    fn images_and_samplers_are_refused_whatever_is_given() {
        for (address, ty) in [(ADDRESS_GLOBAL, "image2d_t"), (0x119E, "sampler_t")] {
            let p = Param::new(address, ty, false, "x", 64);
            assert_eq!(p.kind, ParamKind::Unsupported, "{ty}");
            assert!(mismatch(&p, buffer::<u8>(Access::Read)).is_some());
        }
    }

    #[test]
    fn local_memory_is_refused_empty_or_past_the_device() {
        let local = [Param::new(ADDRESS_LOCAL, "int*", false, "scratch", 64)];
        let ok = check_args("k", Some(&local), [Given::Local(1024)], &LIMITS);
        assert!(ok.is_ok());
        for bytes in [0, usize::MAX, 64 * 1024 + 1] {
            let err = check_args("k", Some(&local), [Given::Local(bytes)], &LIMITS);
            assert!(
                matches!(err, Err(Error::KernelArg { .. })),
                "{bytes}: {err:?}"
            );
        }
        // Without argument information the local sizes are still checked.
        let err = check_args("k", None, [Given::Local(usize::MAX)], &LIMITS);
        assert!(matches!(err, Err(Error::KernelArg { .. })), "{err:?}");
    }

    #[test]
    fn work_sizes_within_the_device_pass_and_others_name_the_sizes() {
        assert!(check_work(&[1 << 20], None, &LIMITS).is_ok());
        assert!(check_work(&[64, 64], Some(&[16, 16]), &LIMITS).is_ok());
        for (global, local) in [
            (vec![usize::MAX], None),
            (vec![64], Some(vec![2048])),
            (vec![64, 64], Some(vec![64, 64])),
            (vec![64, 64, 64], Some(vec![1, 1, 128])),
            (vec![], None),
            (vec![0], None),
        ] {
            let err = check_work(&global, local.as_deref(), &LIMITS).unwrap_err();
            let Error::WorkSize { global: g, .. } = &err else {
                panic!("{err:?}")
            };
            assert_eq!(g, &global);
        }
    }

    #[test]
    fn a_local_size_not_dividing_a_uniform_kernel_or_off_its_required_size_is_refused() {
        let groups = Groups {
            max: 256,
            reqd: None,
        };
        assert!(check_groups(&[64], &[7], Some(&groups), Some(false)).is_ok());
        assert!(check_groups(&[64], &[7], Some(&groups), None).is_ok());
        let err = check_groups(&[64], &[7], Some(&groups), Some(true)).unwrap_err();
        assert!(err.to_string().contains("not a multiple"), "{err}");
        assert!(check_groups(&[64, 8], &[8, 8], Some(&groups), Some(true)).is_ok());
        // Past the kernel's reported maximum: the driver decides (rusticl runs it).
        assert!(check_groups(&[512], &[512], Some(&groups), Some(true)).is_ok());
        assert!(check_groups(&[512], &[512], None, Some(true)).is_ok());
        let reqd = Groups {
            max: 256,
            reqd: Some([16, 1, 1]),
        };
        assert!(check_groups(&[64], &[16], Some(&reqd), Some(true)).is_ok());
        assert!(check_groups(&[64, 4], &[16, 1], Some(&reqd), Some(true)).is_ok());
        let err = check_groups(&[64], &[8], Some(&reqd), Some(true)).unwrap_err();
        assert!(
            err.to_string().contains("reqd_work_group_size(16, 1, 1)"),
            "{err}"
        );
    }

    #[test]
    fn only_opencl_c_2_or_later_without_uniform_groups_allows_non_uniform_ones() {
        assert!(!allows_non_uniform(""));
        assert!(!allows_non_uniform("-cl-std=CL1.2 -cl-kernel-arg-info"));
        assert!(allows_non_uniform("-cl-std=CL2.0"));
        assert!(allows_non_uniform(
            "-I dir -cl-std=CL3.0 -cl-fast-relaxed-math"
        ));
        assert!(allows_non_uniform("-cl-std=CLC++2021"));
        assert!(!allows_non_uniform(
            "-cl-std=CL3.0 -cl-uniform-work-group-size"
        ));
        // The last -cl-std given counts.
        assert!(!allows_non_uniform("-cl-std=CL2.0 -cl-std=CL1.2"));
    }
}
