//! Kernel objects: argument checks, the argument cache, and the enqueue under one lock.

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::util::sync::{Mutex, rank};

use super::arg::{Arg, ArgKind, MAX_SCALAR};
use super::program::ProgramInner;
use super::widths::Turn;
use crate::checks::{self, Groups, Limits, Param};
use crate::core::context::ContextCore;
use crate::error::{ClStatus, Error, Result};
use crate::ffi::{self, cl_command_queue, cl_event, cl_kernel};
use crate::record::hooks::ArgHolder;
use crate::record::sub::Held;

/// The launch checks' *declared kinds* rule ([`crate::checks`]): what the kernel declares for each of its `count` parameters, or `None`
/// where the driver gives no argument information (the *no argument information* rule).
fn params(raw: cl_kernel, count: usize, address_bits: u32) -> Option<Box<[Param]>> {
    let one = |index: u32| -> std::result::Result<Param, i32> {
        let address = ffi::kernel_arg_uint(raw, index, ffi::CL_KERNEL_ARG_ADDRESS_QUALIFIER)?;
        let type_name = ffi::kernel_arg_string(raw, index, ffi::CL_KERNEL_ARG_TYPE_NAME)?;
        let name = ffi::kernel_arg_string(raw, index, ffi::CL_KERNEL_ARG_NAME).unwrap_or_default();
        // A driver that cannot say leaves the parameter writable (the careful reading).
        let is_const = ffi::kernel_arg_qualifier(raw, index)
            .is_ok_and(|q| q & u64::from(ffi::CL_KERNEL_ARG_TYPE_CONST) != 0);
        Ok(Param::new(
            address,
            &type_name,
            is_const,
            &name,
            address_bits,
        ))
    };
    match (0..count as u32).map(one).collect() {
        Ok(params) => Some(params),
        Err(status) => {
            log::debug!(target: "cl_lifetime::program", "no kernel argument information: {}", ClStatus(status));
            None
        }
    }
}

/// The launch checks' *work sizes* rule: the kernel's work-group limits on `device`, or
/// `None` where the driver does not say.
fn groups(raw: cl_kernel, device: ffi::DeviceId) -> Option<Groups> {
    let max = ffi::kernel_work_group_size(raw, device);
    let reqd = ffi::kernel_compile_work_group_size(raw, device);
    match (max, reqd) {
        (Ok(max), Ok(reqd)) => Some(Groups {
            max,
            reqd: (reqd != [0; 3]).then_some(reqd),
        }),
        (Err(status), _) | (_, Err(status)) => {
            log::debug!(target: "cl_lifetime::program", "no kernel work-group information: {}", ClStatus(status));
            None
        }
    }
}

/// What one argument of a kernel object holds now (the *arguments set once* rule).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// Never set, or its last set failed.
    Unknown,
    /// A NULL buffer.
    Null,
    /// The block with this ID (unique for the process).
    Mem(u64),
    /// The sub-buffer with ID `id` of the block with ID `parent` (a view).
    Sub { parent: u64, id: u64 },
    /// Byte `offset` of the shared virtual memory block with ID `id`.
    Svm { id: u64, offset: usize },
    /// These bytes.
    Scalar { bytes: [u8; MAX_SCALAR], len: usize },
    /// Local memory of this size.
    Local(usize),
}

impl Bound {
    /// Whether it was set with `clSetKernelArgSVMPointer` (`Some(true)`) or
    /// `clSetKernelArg` with a memory object (`Some(false)`): the *one kind per argument
    /// object* rule.
    fn svm(self) -> Option<bool> {
        match self {
            Bound::Svm { .. } => Some(true),
            Bound::Null | Bound::Mem(_) | Bound::Sub { .. } => Some(false),
            Bound::Unknown | Bound::Scalar { .. } | Bound::Local(_) => None,
        }
    }
}

struct KernelState {
    raw: ffi::OwnedKernel,
    /// The *arguments set once* rule: one entry per argument.
    bound: Vec<Bound>,
    /// Other kernel objects of the same kernel, with what their arguments hold: the *one
    /// kind per argument object* rule.
    others: Vec<(ffi::OwnedKernel, Vec<Bound>)>,
}

impl KernelState {
    /// Every kernel object, with what its arguments hold.
    fn objects(&mut self) -> impl Iterator<Item = (cl_kernel, &mut Vec<Bound>)> {
        std::iter::once((self.raw.raw(), &mut self.bound)).chain(
            self.others
                .iter_mut()
                .map(|(raw, bound)| (raw.raw(), bound)),
        )
    }
}

pub(crate) struct KernelInner {
    /// The *one lock per kernel* rule: covers setting arguments and enqueueing.
    state: Mutex<KernelState, rank::KernelState>,
    name: Arc<str>,
    num_args: usize,
    /// What each parameter declares (`None`: no argument information).
    params: Option<Box<[Param]>>,
    /// Its work-group limits on each device of its program (`None`: not known).
    groups: Box<[(ffi::DeviceId, Option<Groups>)]>,
    program: Arc<ProgramInner>,
    /// The arguments (a bit per index) already logged as read through a writable
    /// parameter (the launch checks' *const parameters* rule logs each once).
    logged_reads: AtomicU64,
}

impl KernelInner {
    /// Resets every argument whose binding `holds` says so to NULL.
    fn reset_where(&self, holds: impl Fn(Bound) -> bool) {
        let mut state = self.state.lock();
        for (raw, bound) in state.objects() {
            Self::reset_in(raw, bound, &holds, &self.name);
        }
    }

    /// [`KernelInner::reset_where`] for one kernel object.
    fn reset_in(raw: cl_kernel, bound: &mut [Bound], holds: &impl Fn(Bound) -> bool, name: &str) {
        for (index, bound) in bound.iter_mut().enumerate() {
            if holds(*bound) {
                // SAFETY: a NULL value is allowed for a buffer argument (OpenCL 3.0,
                // clSetKernelArg); the kernel lock is held.
                let reset = unsafe { ffi::set_arg_mem(raw, index as u32, ptr::null_mut()) };
                *bound = match reset {
                    Ok(()) => Bound::Null,
                    Err(status) => {
                        log::debug!(target: "cl_lifetime::program", "resetting argument {index} of {name}: {}", ClStatus(status));
                        Bound::Unknown
                    }
                };
            }
        }
    }
}

impl ArgHolder for KernelInner {
    /// The *unbind at release* rule: resets every argument that holds block `mem_id` (or a
    /// sub-buffer of it) to NULL. Called by the block's release, before
    /// `clReleaseMemObject`.
    fn unbind(&self, mem_id: u64) {
        self.reset_where(|bound| match bound {
            Bound::Mem(id) | Bound::Sub { parent: id, .. } => id == mem_id,
            _ => false,
        });
    }

    /// Resets every argument that holds sub-buffer `sub_id` to NULL: called before the
    /// sub-buffer is released, so that the kernel (which some drivers let keep it) does
    /// not release it later in an order the driver does not survive.
    fn unbind_sub(&self, sub_id: u64) {
        self.reset_where(|bound| matches!(bound, Bound::Sub { id, .. } if id == sub_id));
    }
}

/// A kernel of a built program. Cheap to clone; clones share one `cl_kernel` and its lock.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::Arg;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let source = "__kernel void scale(__global float *v, float k) { v[get_global_id(0)] *= k; }";
/// let scale = ctx.program_from_source("scale", source, "")?.kernel("scale")?;
/// assert_eq!((scale.name(), scale.num_args()), ("scale", 2));
/// let buf = ctx.buffer_from(&[1.0f32, 2.0, 3.0])?;
/// // SAFETY: scale touches element i < 3 of buf, which has 3.
/// unsafe { queue.launch(&scale, &[3], &[Arg::read_write(&buf), Arg::scalar(2.0f32)])? };
/// assert_eq!(queue.read_owned(&buf)?.wait()?, [2.0, 4.0, 6.0]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<KernelInner>,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.inner.name)
            .field("num_args", &self.inner.num_args)
            .finish()
    }
}

impl Kernel {
    /// The kernel `name` of `program`, held by `owned`. Every call that sets its
    /// arguments or enqueues it is made under its state's lock (the *one lock per kernel*
    /// rule: `clSetKernelArg` is the one OpenCL call not safe on a kernel shared between
    /// threads).
    pub(crate) fn adopt(
        owned: ffi::OwnedKernel,
        name: &str,
        program: &Arc<ProgramInner>,
    ) -> Result<Kernel> {
        let raw = owned.raw();
        let mut kernel = KernelInner {
            state: Mutex::new(KernelState {
                raw: owned,
                bound: Vec::new(),
                others: Vec::new(),
            }),
            name: name.into(),
            num_args: 0,
            params: None,
            groups: Box::default(),
            program: program.clone(),
            logged_reads: AtomicU64::new(0),
        };
        // `kernel` owns `raw` from here on, so an error below releases it.
        kernel.num_args = ffi::kernel_num_args(raw)?;
        kernel.state.get_mut().bound = vec![Bound::Unknown; kernel.num_args];
        kernel.params = params(raw, kernel.num_args, program.address_bits);
        kernel.groups = program
            .devices
            .iter()
            .map(|&d| (d, groups(raw, d)))
            .collect();
        Ok(Kernel {
            inner: Arc::new(kernel),
        })
    }

    /// The raw handle, still owned by this kernel. Raw code may query it, but must not
    /// set its arguments nor enqueue it: the library keeps what it set, and sets and
    /// enqueues under one lock per kernel. It is the kernel object the last launch ran on:
    /// a launch that gives an argument shared virtual memory where an earlier one gave a
    /// buffer (or the other way round) runs on another object of the same kernel (the
    /// kernel layer's *one kind per argument object* rule).
    pub fn as_raw(&self) -> ffi::cl_kernel {
        self.inner.state.lock().raw.raw()
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many arguments it declares.
    pub fn num_args(&self) -> usize {
        self.inner.num_args
    }

    /// The launch checks ([`crate::checks`]) against the queue's device, `device`, and its
    /// `limits`.
    pub(crate) fn check_launch(
        &self,
        ctx: &ContextCore,
        device: ffi::DeviceId,
        limits: &Limits,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
    ) -> Result<()> {
        if self.inner.program.ctx_id != ctx.id {
            let its = ffi::program_context(self.inner.program.raw()).ok();
            return Err(Error::context_mismatch(
                format!("kernel {}", self.inner.name),
                its,
                ctx.raw(),
            ));
        }
        if args.len() != self.inner.num_args {
            return Err(Error::ArgCount {
                kernel: self.inner.name.to_string(),
                expected: self.inner.num_args,
                given: args.len(),
            });
        }
        checks::check_work(global, local, limits)?;
        if let Some(local) = local {
            let groups = self.inner.groups.iter().find(|(d, _)| *d == device);
            let uniform = self
                .inner
                .program
                .non_uniform
                .map(|n| !(n && limits.non_uniform));
            checks::check_groups(global, local, groups.and_then(|(_, g)| g.as_ref()), uniform)?;
        }
        let reads = checks::check_args(
            &self.inner.name,
            self.inner.params.as_deref(),
            args.iter().map(Arg::given),
            limits,
        )?;
        if reads == 0 {
            return Ok(());
        }
        let new = reads & !self.inner.logged_reads.fetch_or(reads, Ordering::Relaxed);
        for index in (0..64).filter(|i| new & (1 << i) != 0) {
            log::warn!(
                target: "cl_lifetime::kernel",
                "kernel {} argument {index} ({}) is given with Arg::read, but the parameter is \
                 not const: if the kernel writes it, the library does not order later commands \
                 after that write (declare it const, or pass Arg::write)",
                self.inner.name,
                checks::declared(self.inner.params.as_deref(), index)
            );
        }
        Ok(())
    }

    /// The *widest first* rule's turn for a launch of this kernel over `global`
    /// (`gates_open`: whether a user event of the context is unset): the program's lock,
    /// held until the launch is recorded.
    pub(crate) fn width_turn(&self, global: &[usize], gates_open: bool) -> Turn<'_> {
        self.inner
            .program
            .widths
            .turn(&self.inner.name, global, gates_open)
    }

    /// The *one lock per kernel* and *arguments set once* rules: sets the arguments that
    /// changed and enqueues, under the kernel's lock.
    #[inline]
    pub(crate) fn enqueue(
        &self,
        queue: cl_command_queue,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
        subs: &[(usize, Held)],
        wait: &[cl_event],
    ) -> Result<cl_event> {
        let mut state = self.inner.state.lock();
        self.set_args(&mut state, args, subs)?;
        // SAFETY: `queue` is live (the caller's), the kernel is live (owned here), its
        // arguments are all set to live objects of the declared kinds (`check_launch`,
        // then `set_args` under this lock), `global` and `local` have the same dimensions
        // (`check_launch`), and the wait list holds live events (retained by the records
        // and dependencies the caller holds locked).
        unsafe { ffi::enqueue_kernel(queue, state.raw.raw(), global, local, wait) }.map_err(
            |status| match status {
                ffi::codes::CL_INVALID_WORK_GROUP_SIZE
                | ffi::codes::CL_INVALID_WORK_ITEM_SIZE
                | ffi::codes::CL_INVALID_GLOBAL_WORK_SIZE
                | ffi::codes::CL_INVALID_GLOBAL_OFFSET => Error::WorkSize {
                    global: global.to_vec(),
                    local: local.map(<[usize]>::to_vec),
                    reason: "the driver refused it (an OpenCL 1.x device needs each global \
                         dimension to be a multiple of the local one)"
                        .to_string(),
                    status: Some(ClStatus(status)),
                },
                _ => Error::cl("clEnqueueNDRangeKernel", status),
            },
        )
    }

    /// The *one kind per argument object* rule: makes current a kernel object on which no
    /// argument of `args` switches between SVM and a memory object, another one of the
    /// kernel's or a new one.
    fn object_for(&self, state: &mut KernelState, args: &[Arg<'_>]) -> Result<()> {
        // Allocates nothing: this runs at every launch.
        let fits = |bound: &[Bound]| {
            args.iter()
                .zip(bound)
                .all(|(arg, had)| match (&arg.0, had.svm()) {
                    (ArgKind::Buffer(b), Some(had)) => b.block.is_svm() == had,
                    _ => true,
                })
        };
        if fits(&state.bound) {
            return Ok(());
        }
        let other = match state.others.iter().position(|(_, bound)| fits(bound)) {
            Some(i) => state.others.swap_remove(i),
            None => {
                let name = std::ffi::CString::new(&*self.inner.name)
                    .map_err(|_| Error::cl("clCreateKernel", ffi::codes::CL_INVALID_KERNEL_NAME))?;
                let raw = ffi::create_kernel(self.inner.program.raw(), &name)
                    .map_err(|s| Error::cl("clCreateKernel", s))?;
                // SAFETY: clCreateKernel returned the kernel with one reference, given to
                // its owner.
                (
                    unsafe { ffi::OwnedKernel::from_raw(raw) },
                    vec![Bound::Unknown; self.inner.num_args],
                )
            }
        };
        let (raw, bound) = other;
        let old_raw = std::mem::replace(&mut state.raw, raw);
        let old_bound = std::mem::replace(&mut state.bound, bound);
        state.others.push((old_raw, old_bound));
        Ok(())
    }

    /// The *arguments set once* rule: sets each argument whose value differs from what the
    /// kernel holds; `subs` holds the sub-buffers of the arguments that are views, by
    /// index.
    fn set_args(
        &self,
        state: &mut KernelState,
        args: &[Arg<'_>],
        subs: &[(usize, Held)],
    ) -> Result<()> {
        self.object_for(state, args)?;
        let raw = state.raw.raw();
        let sub_of = |index: usize| subs.iter().find(|(i, _)| *i == index).map(|(_, s)| s);
        for ((index, arg), bound) in args.iter().enumerate().zip(state.bound.iter_mut()) {
            let wanted = match &arg.0 {
                ArgKind::Buffer(b) if b.block.is_svm() => Bound::Svm {
                    id: b.block.id,
                    offset: b.region.map_or(0, |(origin, _)| origin),
                },
                ArgKind::Buffer(b) => match sub_of(index) {
                    Some(sub) => Bound::Sub {
                        parent: b.block.id,
                        id: sub.id(),
                    },
                    None => Bound::Mem(b.block.id),
                },
                ArgKind::Scalar { bytes, len, .. } => Bound::Scalar {
                    bytes: *bytes,
                    len: *len,
                },
                ArgKind::Local(size) => Bound::Local(*size),
            };
            if *bound == wanted {
                continue;
            }
            let set = match &arg.0 {
                // SAFETY: the kernel lock is held; the block is a live SVM allocation of
                // the kernel's context (borrowed for the launch; `check_launch` compared
                // the contexts), and the offset is within it (the view's region).
                ArgKind::Buffer(b) if b.block.is_svm() => unsafe {
                    let offset = b.region.map_or(0, |(origin, _)| origin);
                    ffi::set_arg_svm(raw, index as u32, b.block.svm_at(offset))
                },
                // SAFETY: the kernel lock is held; the block is a live buffer (borrowed for
                // the launch), and a view's sub-buffer is live (held by `subs`).
                ArgKind::Buffer(b) => unsafe {
                    let mem = sub_of(index).map_or(b.block.raw(), |sub| sub.raw());
                    ffi::set_arg_mem(raw, index as u32, mem)
                },
                // SAFETY: the kernel lock is held; `bytes` holds `len` initialized bytes.
                ArgKind::Scalar { bytes, len, .. } => unsafe {
                    ffi::set_arg_bytes(raw, index as u32, &bytes[..*len])
                },
                // SAFETY: the kernel lock is held.
                ArgKind::Local(size) => unsafe { ffi::set_arg_local(raw, index as u32, *size) },
            };
            if let Err(status) = set {
                *bound = Bound::Unknown;
                return Err(Error::KernelArg {
                    kernel: self.inner.name.to_string(),
                    index,
                    declared: checks::declared(self.inner.params.as_deref(), index),
                    given: arg.given().to_string(),
                    reason: "the driver refused it".to_string(),
                    status: Some(ClStatus(status)),
                });
            }
            // A kernel holds no reference to SVM: nothing to unbind at its release.
            if let ArgKind::Buffer(b) = &arg.0 {
                if !b.block.is_svm() {
                    b.block
                        .bound_to(Arc::downgrade(&self.inner) as Weak<dyn ArgHolder>);
                }
            }
            *bound = wanted;
        }
        Ok(())
    }
}
