//! Built programs and the kernels they contain.

use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::check_options;
use super::object::Kernel;
use super::widths::Widths;
use crate::core::context::ContextCore;
use crate::error::{ClStatus, Error, Result};
use crate::ffi::{self, cl_program};

/// The *argument checks* rule: what every build adds to the user's options.
const ARG_INFO: &str = "-cl-kernel-arg-info";

pub(crate) struct ProgramInner {
    owned: ffi::OwnedProgram,
    pub(super) ctx_id: u64,
    pub(super) file: PathBuf,
    /// The first device's `CL_DEVICE_ADDRESS_BITS` (the size of `size_t` parameters).
    pub(super) address_bits: u32,
    /// The launches of this program's kernels that may be pending, where launches of one
    /// kernel at different work sizes must not overlap (the *widest first* rule).
    pub(super) widths: Arc<Widths>,
    /// The devices it is built for, those of its context (each kernel reads its work-group
    /// limits on each: the launch checks' *work sizes* rule).
    pub(super) devices: Box<[ffi::DeviceId]>,
    /// Whether its options allow non-uniform work groups where the device runs them (the
    /// *work sizes* rule); `None` for a program built by other code, whose options the
    /// library does not know.
    pub(super) non_uniform: Option<bool>,
}

impl ProgramInner {
    /// The program's handle; kernels made from it hold an `Arc` to this struct.
    pub(super) fn raw(&self) -> cl_program {
        self.owned.raw()
    }

    /// The *checked options* and *argument checks* rules: builds `source`, named `file`,
    /// for the context's devices.
    pub(crate) fn build(
        ctx: &ContextCore,
        file: &Path,
        source: &str,
        options: &str,
    ) -> Result<Arc<ProgramInner>> {
        check_options(options)?;
        let given = options;
        let options = &format!("{options} {ARG_INFO}");
        // Owned from here on, so a failed build releases it.
        let program = ProgramInner {
            // SAFETY: clCreateProgramWithSource returned the program with one reference,
            // given to its owner.
            owned: unsafe { ffi::OwnedProgram::from_raw(ffi::create_program(ctx.raw(), source)?) },
            ctx_id: ctx.id,
            file: file.to_path_buf(),
            address_bits: ctx.device.limits.address_bits,
            widths: Arc::default(),
            devices: ctx.devices.iter().map(|d| d.id).collect(),
            non_uniform: Some(crate::checks::allows_non_uniform(given)),
        };
        // `check_options` refused a NUL byte.
        let c_options = CString::new(options.as_str()).unwrap_or_default();
        let ids: Vec<_> = ctx.devices.iter().map(|d| d.id).collect();
        let built = ffi::build_program(program.raw(), &ids, &c_options);
        log::debug!(target: "cl_lifetime::program", "built {} ({options}) for {:?}: {built:?}", file.display(), ctx.devices);
        if let Err(status) = built {
            // Report the first device whose build failed, with its full log.
            let failed = ctx
                .devices
                .iter()
                .find(|d| !ffi::built_for(program.raw(), d.id))
                .unwrap_or(&ctx.device);
            return Err(Error::Build {
                file: file.to_path_buf(),
                device: failed.to_string(),
                options: given.to_string(),
                status: ClStatus(status),
                log: ffi::build_log(program.raw(), failed.id),
            });
        }
        Ok(Arc::new(program))
    }
}

impl ProgramInner {
    /// Takes one reference of its own to `raw`, a program of `ctx` built by other code.
    ///
    /// # Safety
    ///
    /// `raw` is a valid program.
    pub(crate) unsafe fn adopt(ctx: &ContextCore, raw: cl_program) -> Result<Arc<ProgramInner>> {
        let its = ffi::program_context(raw)?;
        if its != ctx.raw() {
            return Err(Error::context_mismatch(
                format!("program {raw:p}"),
                Some(its),
                ctx.raw(),
            ));
        }
        Ok(Arc::new(ProgramInner {
            // SAFETY: `raw` is a valid program, as the caller vouches.
            owned: unsafe { ffi::OwnedProgram::retain(raw) }?,
            ctx_id: ctx.id,
            file: PathBuf::from("<raw>"),
            address_bits: ctx.device.limits.address_bits,
            widths: Arc::default(),
            devices: ctx.devices.iter().map(|d| d.id).collect(),
            non_uniform: None,
        }))
    }
}

/// A built program.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::Error;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let source = "__kernel void one(__global int *v) { v[0] = 1; }
///               __kernel void two(__global int *v) { v[0] = 2; }";
/// let program = ctx.program_from_source("pair", source, "")?;
/// let mut names = program.kernel_names()?;
/// names.sort();
/// assert_eq!(names, ["one", "two"]);
/// assert!(matches!(program.kernel("three"), Err(Error::UnknownKernel { .. })));
/// ctx.program_from_source("pair", source, "")?; // from the context's cache
/// assert_eq!(ctx.programs_built(), 1);
/// # Ok(())
/// # }
/// ```
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

    /// The raw handle, still owned by this program.
    pub fn as_raw(&self) -> ffi::cl_program {
        self.inner.raw()
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
        ffi::kernel_names(self.inner.raw())
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
        match ffi::create_kernel(self.inner.raw(), &c_name) {
            // SAFETY: clCreateKernel returned the kernel with one reference, given to its
            // owner.
            Ok(raw) => Kernel::adopt(
                unsafe { ffi::OwnedKernel::from_raw(raw) },
                name,
                &self.inner,
            ),
            Err(ffi::codes::CL_INVALID_KERNEL_NAME) => Err(unknown()),
            Err(s) => Err(Error::cl("clCreateKernel", s)),
        }
    }
}
