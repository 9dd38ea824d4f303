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
//! 3. **Local memory.** Each [`Arg::local`] is at least one byte, and together they fit in
//!    the device's `CL_DEVICE_LOCAL_MEM_SIZE`.
//! 4. **Work sizes.** One to three dimensions, none of them zero. A local size has as many
//!    dimensions, each within `CL_DEVICE_MAX_WORK_ITEM_SIZES`, their product within
//!    `CL_DEVICE_MAX_WORK_GROUP_SIZE`. Each global dimension is at most 2³² − 1 work
//!    groups (of the local size given, or of the largest group the device allows when the
//!    driver chooses): a larger range cannot end in practice (NVIDIA refuses it, PoCL
//!    runs it for ever).
//! 5. **No argument information.** Where the driver gives no argument information (`CL_KERNEL_ARG_INFO_NOT_AVAILABLE`)
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
}

impl Param {
    /// The *declared kinds* rule, from `clGetKernelArgInfo`'s address qualifier, type name and name.
    pub(crate) fn new(address: u32, type_name: &str, name: &str, address_bits: u32) -> Param {
        let space = match address {
            ADDRESS_GLOBAL => "__global ",
            ADDRESS_CONSTANT => "__constant ",
            ADDRESS_LOCAL => "__local ",
            _ => "",
        };
        let type_name = type_name.trim();
        let declared = format!("{space}{type_name} {name}").trim().to_string();
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
        Param { kind, declared }
    }
}

/// The size in bytes of an OpenCL built-in scalar or vector type by name (`uint`,
/// `float4`, `unsigned char`, `size_t`); `None` for any other type.
pub(crate) fn scalar_size(type_name: &str, address_bits: u32) -> Option<usize> {
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
    let size = match base {
        "char" | "uchar" => 1,
        "short" | "ushort" | "half" => 2,
        "int" | "uint" | "float" => 4,
        "long" | "ulong" | "double" => 8,
        "size_t" | "ptrdiff_t" | "intptr_t" | "uintptr_t" if lanes == 1 => {
            address_bits as usize / 8
        }
        _ => return None,
    };
    Some(size * lanes)
}

/// What a launch gives for one parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Given {
    Buffer,
    Scalar(usize),
    Local(usize),
}

impl fmt::Display for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Given::Buffer => write!(f, "a buffer"),
            Given::Scalar(bytes) => write!(f, "a {bytes}-byte scalar"),
            Given::Local(bytes) => write!(f, "local memory of {bytes} bytes"),
        }
    }
}

/// The *declared kinds* rule for one argument: why `given` does not fit `param`, if it does not.
fn mismatch(param: ParamKind, given: Given) -> Option<String> {
    match (param, given) {
        (ParamKind::Unsupported, _) => {
            Some("the library cannot pass images, samplers, pipes or device queues".to_string())
        }
        (ParamKind::Buffer, Given::Buffer) | (ParamKind::Local, Given::Local(_)) => None,
        (ParamKind::Scalar(None), Given::Scalar(_)) => None,
        (ParamKind::Scalar(Some(size)), Given::Scalar(bytes)) if size == bytes => None,
        (ParamKind::Scalar(Some(size)), Given::Scalar(_)) => {
            Some(format!("the kernel declares a {size}-byte value"))
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

/// The *declared kinds*, *local memory* and *no argument information* rules: checks `given` against the kernel's parameters (`None`: the driver
/// gives no argument information).
pub(crate) fn check_args(
    kernel: &str,
    params: Option<&[Param]>,
    given: impl IntoIterator<Item = Given>,
    limits: &Limits,
) -> Result<()> {
    let mut local_total: u64 = 0;
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
        if let Some(reason) = param.and_then(|p| mismatch(p.kind, given)) {
            return Err(refuse(reason));
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
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        local_mem: 64 * 1024,
        max_group: 1024,
        max_item: [1024, 1024, 64],
        address_bits: 64,
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

    #[test]
    fn a_global_pointer_takes_only_a_buffer() {
        let p = Param::new(ADDRESS_GLOBAL, "int*", "data", 64);
        assert_eq!(p.kind, ParamKind::Buffer);
        assert_eq!(p.declared, "__global int* data");
        assert!(mismatch(p.kind, Given::Buffer).is_none());
        assert!(mismatch(p.kind, Given::Scalar(8)).is_some());
        assert!(mismatch(p.kind, Given::Local(8)).is_some());
    }

    #[test]
    fn a_value_parameter_takes_a_scalar_of_its_size() {
        let p = Param::new(0x119E, "uint", "n", 64);
        assert_eq!(p.kind, ParamKind::Scalar(Some(4)));
        assert!(mismatch(p.kind, Given::Scalar(4)).is_none());
        assert!(mismatch(p.kind, Given::Scalar(8)).is_some());
        assert!(mismatch(p.kind, Given::Buffer).is_some());
    }

    #[test]
    fn images_and_samplers_are_refused_whatever_is_given() {
        for (address, ty) in [(ADDRESS_GLOBAL, "image2d_t"), (0x119E, "sampler_t")] {
            let p = Param::new(address, ty, "x", 64);
            assert_eq!(p.kind, ParamKind::Unsupported, "{ty}");
            assert!(mismatch(p.kind, Given::Buffer).is_some());
        }
    }

    #[test]
    fn local_memory_is_refused_empty_or_past_the_device() {
        let local = [Param::new(ADDRESS_LOCAL, "int*", "scratch", 64)];
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
}
