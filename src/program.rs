//! Programs loaded from `.cl` files at run time, kernels, and launch arguments.
//!
//! # Rules
//!
//! 1. A `.cl` file named `name` is looked for, in this order: `name` as given (relative
//!    to the working directory unless absolute); in each folder of `CL_LIFETIME_KERNELS`
//!    (a path list); in `kernels/` under the working directory; beside the executable and
//!    in `kernels/` beside it. `.cl` may be left off. Nothing from the build machine is
//!    consulted, so a deployed binary finds its kernels by the same rule everywhere; a
//!    miss lists every absolute path tried and the working directory. Kernels the library
//!    itself needs are embedded in the binary and still built at run time, under names no
//!    user program shares.
//! 2. A program is built once per context, name, options and source (the context's
//!    cache): two sources under one name are two programs.
//! 3. Build options are checked before the driver sees them (a bare `-D` or `-I` at the
//!    end crashes PoCL), and every program is also built with `-cl-kernel-arg-info`, so
//!    launches can be checked ([`crate::launch`]). A build failure carries the file, the
//!    device and the full build log.
//! 4. Setting a kernel's arguments and enqueueing it happen under one lock per kernel,
//!    so threads sharing a kernel cannot interleave (DESIGN.md trap 11).
//! 5. Each kernel remembers what its arguments hold and sets only those that change, so
//!    a loop launching one kernel on the same buffers calls `clSetKernelArg` only for
//!    what differs. A buffer bound to a kernel notes the kernel; its release resets those
//!    arguments to NULL before `clReleaseMemObject`, so no kernel object keeps a released
//!    buffer alive (trap 11).

use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, PoisonError};

use opencl3::kernel as clk;
use opencl3::program as clp;
use opencl3::types::{cl_command_queue, cl_event, cl_kernel, cl_mem, cl_program};

use crate::buffer::{ClBuffer, MemInner, Pod};
use crate::context::ContextInner;
use crate::device::Limits;
use crate::error::{ClStatus, Error, Result};
use crate::launch::{self, Given, Param};
use crate::queue::{Touch, wait_ptr};
use crate::tracker::Access;
use opencl3::error_codes as codes;

/// The environment variable naming extra kernel folders.
pub const KERNELS_VAR: &str = "CL_LIFETIME_KERNELS";

/// Rule 1: where `name` is looked for, in order, as absolute paths: the working directory
/// `cwd`, the value of `CL_LIFETIME_KERNELS` and the executable's path are given.
pub(crate) fn search_paths(
    name: &str,
    cwd: &Path,
    kernels_var: Option<&std::ffi::OsStr>,
    exe: Option<&Path>,
) -> Vec<PathBuf> {
    let mut names = vec![PathBuf::from(name)];
    if Path::new(name).extension().is_none() {
        names.push(PathBuf::from(format!("{name}.cl")));
    }
    let mut dirs: Vec<PathBuf> = vec![cwd.to_path_buf()];
    if !Path::new(name).is_absolute() {
        if let Some(list) = kernels_var {
            dirs.extend(
                std::env::split_paths(list)
                    .filter(|d| !d.as_os_str().is_empty())
                    .map(|d| cwd.join(d)),
            );
        }
        dirs.push(cwd.join("kernels"));
        if let Some(dir) = exe.and_then(Path::parent) {
            dirs.push(dir.to_path_buf());
            dirs.push(dir.join("kernels"));
        }
    }
    let mut paths = Vec::new();
    for dir in &dirs {
        for n in &names {
            let path = dir.join(n);
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// Rule 1.
pub(crate) fn find_file(name: &str) -> Result<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let exe = std::env::current_exe().ok();
    let kernels_var = std::env::var_os(KERNELS_VAR);
    let searched = search_paths(name, &cwd, kernels_var.as_deref(), exe.as_deref());
    match searched.iter().find(|p| p.is_file()) {
        Some(found) => Ok(found.canonicalize().unwrap_or_else(|_| found.clone())),
        None => Err(Error::KernelFileNotFound {
            name: name.to_string(),
            searched,
            cwd,
        }),
    }
}

/// Rule 3: options that must not reach the driver.
pub(crate) fn check_options(options: &str) -> Result<()> {
    let refuse = |reason: &str| Error::BuildOptions {
        options: options.to_string(),
        reason: reason.to_string(),
    };
    if options.contains('\0') {
        return Err(refuse("the options contain a NUL byte"));
    }
    let words: Vec<&str> = options.split_whitespace().collect();
    for (at, word) in words.iter().enumerate() {
        if matches!(*word, "-D" | "-I")
            && words.get(at + 1).is_none_or(|next| next.starts_with('-'))
        {
            return Err(refuse(&format!("`{word}` is not followed by its value")));
        }
    }
    Ok(())
}

/// Rule 3: what every build adds to the user's options.
const ARG_INFO: &str = "-cl-kernel-arg-info";

pub(crate) struct ProgramInner {
    raw: cl_program,
    ctx_id: u64,
    file: PathBuf,
    /// The first device's `CL_DEVICE_ADDRESS_BITS` (the size of `size_t` parameters).
    address_bits: u32,
}

// SAFETY: a cl_program may be used from any thread (OpenCL 3.0 appendix A.2: every call is
// thread-safe except clSetKernelArg); the struct is immutable.
unsafe impl Send for ProgramInner {}
// SAFETY: as above.
unsafe impl Sync for ProgramInner {}

impl Drop for ProgramInner {
    fn drop(&mut self) {
        // SAFETY: `raw` came from clCreateProgramWithSource and is released once, here;
        // kernels made from it hold an Arc to this struct.
        if let Err(status) = unsafe { clp::release_program(self.raw) } {
            log::error!(target: "cl_lifetime::program", "clReleaseProgram failed: {}", ClStatus(status));
        }
    }
}

impl ProgramInner {
    /// Rule 3: builds `source` for the context's device.
    pub(crate) fn build(
        ctx: &ContextInner,
        file: &Path,
        source: &str,
        options: &str,
    ) -> Result<Arc<ProgramInner>> {
        check_options(options)?;
        let given = options;
        let options = &format!("{options} {ARG_INFO}");
        let raw = clp::create_program_with_source(ctx.raw, &[source])
            .map_err(|s| Error::cl("clCreateProgramWithSource", s))?;
        // Owned from here on, so a failed build releases it.
        let program = ProgramInner {
            raw,
            ctx_id: ctx.id,
            file: file.to_path_buf(),
            address_bits: ctx.device.limits.address_bits,
        };
        // `check_options` refused a NUL byte.
        let c_options = CString::new(options.as_str()).unwrap_or_default();
        let ids: Vec<_> = ctx.devices.iter().map(|d| d.id).collect();
        let built = clp::build_program(raw, &ids, &c_options, None, ptr::null_mut());
        log::debug!(target: "cl_lifetime::program", "built {} ({options}) for {:?}: {built:?}", file.display(), ctx.devices);
        if let Err(status) = built {
            // Report the first device whose build failed, with its full log.
            let failed = ctx
                .devices
                .iter()
                .find(|d| {
                    clp::get_program_build_info(raw, d.id, clp::CL_PROGRAM_BUILD_STATUS)
                        .map_or(true, |s| s.to_int() != clp::CL_BUILD_SUCCESS)
                })
                .unwrap_or(&ctx.device);
            let log = clp::get_program_build_info(raw, failed.id, clp::CL_PROGRAM_BUILD_LOG)
                .map(|v| String::from(v).trim_end_matches('\0').to_string())
                .unwrap_or_else(|s| format!("(no build log: {})", ClStatus(s)));
            return Err(Error::Build {
                file: file.to_path_buf(),
                device: failed.to_string(),
                options: given.to_string(),
                status: ClStatus(status),
                log,
            });
        }
        Ok(Arc::new(program))
    }
}

/// A built program.
#[derive(Clone)]
pub struct Program {
    inner: Arc<ProgramInner>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("file", &self.inner.file)
            .finish()
    }
}

impl Program {
    pub(crate) fn from_inner(inner: Arc<ProgramInner>) -> Program {
        Program { inner }
    }

    /// The file it was built from.
    pub fn file(&self) -> &Path {
        &self.inner.file
    }

    /// The names of its kernels.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the program cannot be queried.
    pub fn kernel_names(&self) -> Result<Vec<String>> {
        let names = clp::get_program_info(self.inner.raw, clp::CL_PROGRAM_KERNEL_NAMES)
            .map_err(|s| Error::cl("clGetProgramInfo", s))?;
        Ok(String::from(names)
            .trim_end_matches('\0')
            .split(';')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// A new kernel object for the kernel `name`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownKernel`] listing the kernels the program has.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let unknown = || Error::UnknownKernel {
            name: name.to_string(),
            file: self.inner.file.clone(),
            available: self.kernel_names().unwrap_or_default(),
        };
        let c_name = CString::new(name).map_err(|_| unknown())?;
        let raw = match clk::create_kernel(self.inner.raw, &c_name) {
            Ok(raw) => raw,
            Err(opencl3::error_codes::CL_INVALID_KERNEL_NAME) => return Err(unknown()),
            Err(s) => return Err(Error::cl("clCreateKernel", s)),
        };
        let mut kernel = KernelInner {
            state: Mutex::new(KernelState {
                raw,
                bound: Vec::new(),
            }),
            name: name.to_string(),
            num_args: 0,
            params: None,
            program: self.inner.clone(),
        };
        // `kernel` owns `raw` from here on, so an error below releases it.
        kernel.num_args = clk::get_kernel_info(raw, clk::CL_KERNEL_NUM_ARGS)
            .map_err(|s| Error::cl("clGetKernelInfo", s))?
            .to_uint() as usize;
        kernel.state_mut().bound = vec![Bound::Unknown; kernel.num_args];
        kernel.params = params(raw, kernel.num_args, self.inner.address_bits);
        Ok(Kernel {
            inner: Arc::new(kernel),
        })
    }
}

/// Launch rule 1: what the kernel declares for each of its `count` parameters, or `None`
/// where the driver gives no argument information (launch rule 5).
fn params(raw: cl_kernel, count: usize, address_bits: u32) -> Option<Box<[Param]>> {
    let text = |index: u32, what| -> std::result::Result<String, i32> {
        Ok(String::from(clk::get_kernel_arg_info(raw, index, what)?)
            .trim_end_matches('\0')
            .to_string())
    };
    let one = |index: u32| -> std::result::Result<Param, i32> {
        let address =
            clk::get_kernel_arg_info(raw, index, clk::CL_KERNEL_ARG_ADDRESS_QUALIFIER)?.to_uint();
        let type_name = text(index, clk::CL_KERNEL_ARG_TYPE_NAME)?;
        let name = text(index, clk::CL_KERNEL_ARG_NAME).unwrap_or_default();
        Ok(Param::new(address, &type_name, &name, address_bits))
    };
    match (0..count as u32).map(one).collect() {
        Ok(params) => Some(params),
        Err(status) => {
            log::debug!(target: "cl_lifetime::program", "no kernel argument information: {}", ClStatus(status));
            None
        }
    }
}

/// What one argument of a kernel object holds now (rule 5).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// Never set, or its last set failed.
    Unknown,
    /// A NULL buffer.
    Null,
    /// The buffer with this ID (`MemInner::id`, unique for the process).
    Mem(u64),
    /// These bytes.
    Scalar { bytes: [u8; MAX_SCALAR], len: usize },
    /// Local memory of this size.
    Local(usize),
}

struct KernelState {
    raw: cl_kernel,
    /// Rule 5: one entry per argument.
    bound: Vec<Bound>,
}

pub(crate) struct KernelInner {
    /// Rule 4: the lock that covers setting arguments and enqueueing.
    state: Mutex<KernelState>,
    name: String,
    num_args: usize,
    /// Launch rule 1 (`None`: no argument information).
    params: Option<Box<[Param]>>,
    program: Arc<ProgramInner>,
}

// SAFETY: every use of the cl_kernel goes through the Mutex, which makes clSetKernelArg
// plus enqueue one critical section (rule 4; OpenCL 3.0 appendix A.2 names
// clSetKernelArg as the one call that is not thread-safe on a shared kernel).
unsafe impl Send for KernelInner {}
// SAFETY: as above.
unsafe impl Sync for KernelInner {}

impl KernelInner {
    fn state_mut(&mut self) -> &mut KernelState {
        self.state.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rule 5: resets every argument that holds buffer `mem_id` to NULL. Called by the
    /// buffer's release, before `clReleaseMemObject`.
    pub(crate) fn unbind(&self, mem_id: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let raw = state.raw;
        for (index, bound) in state.bound.iter_mut().enumerate() {
            if *bound == Bound::Mem(mem_id) {
                // SAFETY: a NULL value is allowed for a buffer argument (OpenCL 3.0,
                // clSetKernelArg); the kernel lock is held.
                let reset = unsafe {
                    clk::set_kernel_arg(raw, index as u32, size_of::<cl_mem>(), ptr::null())
                };
                *bound = match reset {
                    Ok(()) => Bound::Null,
                    Err(status) => {
                        log::debug!(target: "cl_lifetime::program", "resetting argument {index} of {}: {}", self.name, ClStatus(status));
                        Bound::Unknown
                    }
                };
            }
        }
    }
}

impl Drop for KernelInner {
    fn drop(&mut self) {
        let raw = self.state_mut().raw;
        // SAFETY: `raw` came from clCreateKernel and is released once, here.
        if let Err(status) = unsafe { clk::release_kernel(raw) } {
            log::error!(target: "cl_lifetime::program", "clReleaseKernel failed: {}", ClStatus(status));
        }
    }
}

/// A kernel of a built program. Cheap to clone; clones share one `cl_kernel` and its lock.
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
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many arguments it declares.
    pub fn num_args(&self) -> usize {
        self.inner.num_args
    }

    /// The launch rules ([`crate::launch`]) against the queue's device `limits`.
    pub(crate) fn check_launch(
        &self,
        ctx: &ContextInner,
        limits: &Limits,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
    ) -> Result<()> {
        if self.inner.program.ctx_id != ctx.id {
            return Err(Error::ContextMismatch);
        }
        if args.len() != self.inner.num_args {
            return Err(Error::ArgCount {
                kernel: self.inner.name.clone(),
                expected: self.inner.num_args,
                given: args.len(),
            });
        }
        launch::check_work(global, local, limits)?;
        launch::check_args(
            &self.inner.name,
            self.inner.params.as_deref(),
            args.iter().map(Arg::given),
            limits,
        )
    }

    /// Rules 4 and 5: sets the arguments that changed and enqueues, under the kernel's
    /// lock.
    pub(crate) fn enqueue(
        &self,
        queue: cl_command_queue,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
        wait: &[cl_event],
    ) -> Result<cl_event> {
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.set_args(&mut state, args)?;
        // SAFETY: the arguments are set (count checked in `check_launch`), `global` and
        // `local` have `global.len()` entries, and the wait list outlives the call.
        unsafe {
            opencl3::command_queue::enqueue_nd_range_kernel(
                queue,
                state.raw,
                global.len() as u32,
                ptr::null(),
                global.as_ptr(),
                local.map_or(ptr::null(), <[usize]>::as_ptr),
                wait.len() as u32,
                wait_ptr(wait),
            )
        }
        .map_err(|status| match status {
            codes::CL_INVALID_WORK_GROUP_SIZE
            | codes::CL_INVALID_WORK_ITEM_SIZE
            | codes::CL_INVALID_GLOBAL_WORK_SIZE
            | codes::CL_INVALID_GLOBAL_OFFSET => Error::WorkSize {
                global: global.to_vec(),
                local: local.map(<[usize]>::to_vec),
                reason: "the driver refused it (an OpenCL 1.x device needs each global \
                         dimension to be a multiple of the local one)"
                    .to_string(),
                status: Some(ClStatus(status)),
            },
            _ => Error::cl("clEnqueueNDRangeKernel", status),
        })
    }

    /// Rule 5: sets each argument whose value differs from what the kernel holds.
    fn set_args(&self, state: &mut KernelState, args: &[Arg<'_>]) -> Result<()> {
        let raw = state.raw;
        for ((index, arg), bound) in args.iter().enumerate().zip(state.bound.iter_mut()) {
            let wanted = match &arg.0 {
                ArgKind::Buffer(mem, _) => Bound::Mem(mem.id),
                ArgKind::Scalar { bytes, len } => Bound::Scalar {
                    bytes: *bytes,
                    len: *len,
                },
                ArgKind::Local(size) => Bound::Local(*size),
            };
            if *bound == wanted {
                continue;
            }
            let set = match &arg.0 {
                ArgKind::Buffer(mem, _) => {
                    let handle: cl_mem = mem.raw();
                    // SAFETY: `handle` is a live cl_mem (its buffer is borrowed for the
                    // launch); OpenCL copies the handle value before returning.
                    unsafe {
                        clk::set_kernel_arg(
                            raw,
                            index as u32,
                            size_of::<cl_mem>(),
                            ptr::from_ref(&handle).cast(),
                        )
                    }
                }
                ArgKind::Scalar { bytes, len } => {
                    // SAFETY: `bytes` holds `len` initialized bytes, copied by OpenCL.
                    unsafe { clk::set_kernel_arg(raw, index as u32, *len, bytes.as_ptr().cast()) }
                }
                ArgKind::Local(size) => {
                    // SAFETY: a NULL value with a size declares local memory.
                    unsafe { clk::set_kernel_arg(raw, index as u32, *size, ptr::null()) }
                }
            };
            if let Err(status) = set {
                *bound = Bound::Unknown;
                return Err(Error::KernelArg {
                    kernel: self.inner.name.clone(),
                    index,
                    declared: launch::declared(self.inner.params.as_deref(), index),
                    given: arg.given().to_string(),
                    reason: "the driver refused it".to_string(),
                    status: Some(ClStatus(status)),
                });
            }
            if let ArgKind::Buffer(mem, _) = &arg.0 {
                mem.bound_to(Arc::downgrade(&self.inner));
            }
            *bound = wanted;
        }
        Ok(())
    }
}

/// Largest scalar argument, in bytes (a `double16` is 128).
const MAX_SCALAR: usize = 128;

enum ArgKind<'a> {
    Buffer(&'a MemInner, Access),
    Scalar { bytes: [u8; MAX_SCALAR], len: usize },
    Local(usize),
}

/// One kernel argument, naming how the kernel uses it.
pub struct Arg<'a>(ArgKind<'a>);

impl fmt::Debug for Arg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ArgKind::Buffer(mem, access) => write!(f, "Arg::{access:?}(buffer {})", mem.id),
            ArgKind::Scalar { len, .. } => write!(f, "Arg::scalar({len} bytes)"),
            ArgKind::Local(size) => write!(f, "Arg::local({size} bytes)"),
        }
    }
}

impl<'a> Arg<'a> {
    /// A buffer the kernel only reads.
    pub fn read<T: Pod>(buffer: &'a ClBuffer<T>) -> Arg<'a> {
        Arg(ArgKind::Buffer(buffer.mem(), Access::Read))
    }

    /// A buffer the kernel writes (and may read).
    pub fn write<T: Pod>(buffer: &'a ClBuffer<T>) -> Arg<'a> {
        Arg(ArgKind::Buffer(buffer.mem(), Access::Write))
    }

    /// A buffer the kernel reads and writes.
    pub fn read_write<T: Pod>(buffer: &'a ClBuffer<T>) -> Arg<'a> {
        Arg::write(buffer)
    }

    /// A value passed by copy, such as a `u32` length or a `[f32; 4]`.
    pub fn scalar<T: Pod>(value: T) -> Arg<'a> {
        const {
            assert!(
                size_of::<T>() <= MAX_SCALAR,
                "scalar arguments are at most 128 bytes"
            )
        };
        let mut bytes = [0u8; MAX_SCALAR];
        // SAFETY: `T: Pod` is plain data of `size_of::<T>()` bytes, which fit in `bytes`
        // (checked above); the regions do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(
                ptr::from_ref(&value).cast::<u8>(),
                bytes.as_mut_ptr(),
                size_of::<T>(),
            );
        }
        Arg(ArgKind::Scalar {
            bytes,
            len: size_of::<T>(),
        })
    }

    /// Local memory for `len` elements of `T` per work group.
    pub fn local<T: Pod>(len: usize) -> Arg<'a> {
        Arg(ArgKind::Local(len.saturating_mul(size_of::<T>())))
    }

    /// What the launch checks see ([`crate::launch`]).
    pub(crate) fn given(&self) -> Given {
        match self.0 {
            ArgKind::Buffer(..) => Given::Buffer,
            ArgKind::Scalar { len, .. } => Given::Scalar(len),
            ArgKind::Local(size) => Given::Local(size),
        }
    }

    pub(crate) fn from_mem(mem: &'a MemInner, access: Access) -> Arg<'a> {
        Arg(ArgKind::Buffer(mem, access))
    }

    pub(crate) fn touch(&self) -> Option<Touch<'a>> {
        match self.0 {
            ArgKind::Buffer(mem, access) => Some(Touch::kernel_arg(mem, access)),
            _ => None,
        }
    }
}
