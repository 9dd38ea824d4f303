//! Typed errors.
//!
//! Every failure the library reports is an [`Error`] with named fields. An OpenCL status
//! is a [`ClStatus`], which prints as its symbolic name and number, for example
//! `CL_INVALID_MEM_OBJECT (-38)`. Each variant's message sits beside it (`#[error]`, with
//! the few that depend on a field's value in the functions below the enum); `source()`
//! returns the underlying error where there is one.

use std::fmt;
use std::panic::Location;
use std::path::{Path, PathBuf};

use opencl3::error_codes as codes;
use opencl3::types::{cl_context, cl_int};

use crate::status::{CommandKind, ExecStatus};

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An OpenCL status code, printed as its name and number.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::ClStatus;
/// assert_eq!(ClStatus(-38).to_string(), "CL_INVALID_MEM_OBJECT (-38)");
/// assert!(!ClStatus(-2048).is_opencl()); // another library's code (CLBlast's)
///
/// let ctx = cl_lifetime::Context::from_env()?;
/// let gate = ctx.user_event()?;
/// gate.complete()?;
/// let again = gate.complete().err().and_then(|e| e.status());
/// assert_eq!(again.map(ClStatus::name), Some("CL_INVALID_OPERATION"));
/// assert_eq!(again.map(ClStatus::code), Some(-59));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClStatus(pub cl_int);

impl ClStatus {
    /// The raw status value.
    pub fn code(self) -> cl_int {
        self.0
    }

    /// The symbolic name, such as `CL_INVALID_MEM_OBJECT`, or `UNKNOWN` for a code the
    /// OpenCL headers do not name.
    pub fn name(self) -> &'static str {
        match self.0 {
            codes::DLOPEN_RUNTIME_LOAD_FAILED => "OpenCL loader not found",
            codes::DLOPEN_FUNCTION_NOT_AVAILABLE => "OpenCL function not in loader",
            other => match codes::error_text(other) {
                "UNKNOWN_ERROR" => "UNKNOWN",
                text => text,
            },
        }
    }
}

impl ClStatus {
    /// Whether the OpenCL headers name this code (or it is the loader's own).
    pub fn is_opencl(self) -> bool {
        self.name() != "UNKNOWN"
    }
}

impl fmt::Display for ClStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_opencl() {
            write!(f, "{} ({})", self.name(), self.0)
        } else {
            // CLBlast's codes, for example, are -2048 and below.
            write!(
                f,
                "{}, not an OpenCL status (another library's own code)",
                self.0
            )
        }
    }
}

impl fmt::Debug for ClStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for ClStatus {}

/// Which transfer a range check refers to.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Error, Transfer};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(8)?;
/// let read = queue.read_owned_range(&buf, 4..12);
/// assert!(matches!(
///     read,
///     Err(Error::OutOfRange { transfer: Transfer::Read, offset: 4, len: 8, buffer_len: 8 })
/// ));
/// let fill = queue.fill_range(&buf, 1, 6..2);
/// assert!(matches!(fill, Err(Error::ReversedRange { transfer: Transfer::Fill, .. })));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transfer {
    /// Host to device.
    Write,
    /// Device to host.
    Read,
    /// Device to device, source side.
    CopySource,
    /// Device to device, destination side.
    CopyDestination,
    /// A pattern fill.
    Fill,
    /// A mapping for reading on the host.
    Map,
    /// A mapping for reading and writing on the host.
    MapMut,
    /// A view of part of a buffer ([`ClBuffer::view`](crate::ClBuffer::view)).
    View,
}

/// Everything that can go wrong.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::Error;
/// let ctx = cl_lifetime::Context::from_env()?;
/// assert!(matches!(ctx.buffer::<f32>(0), Err(Error::ZeroLength)));
///
/// let built = ctx.program_from_source("broken", "__kernel void oops(", "");
/// let Err(error) = built else { panic!("a broken source built") };
/// assert_eq!(error.status().map(|s| s.name()), Some("CL_BUILD_PROGRAM_FAILURE"));
/// let Error::Build { log, .. } = &error else { panic!("not a build error: {error}") };
/// assert!(!log.is_empty()); // the compiler's full build log
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An OpenCL call returned an error status.
    #[error("{call} failed: {status}")]
    Cl {
        /// The OpenCL function, such as `clCreateBuffer`.
        call: &'static str,
        /// What it returned.
        status: ClStatus,
    },
    /// No OpenCL loader (`libOpenCL.so.1`) could be opened.
    #[error("no OpenCL loader (libOpenCL.so.1) found; {hint}")]
    NoLoader {
        /// How to install one.
        hint: &'static str,
    },
    /// No device matched the request.
    #[error("{}", no_device(.looked_for, .found, .hint))]
    NoDevice {
        /// What was looked for (the value of `CL_LIFETIME_DEVICE`, or "any device").
        looked_for: String,
        /// Every device that was found, as `P:D platform / device`.
        found: Vec<String>,
        /// What to do, by what was found: with no platform, install an OpenCL driver (an
        /// ICD, such as PoCL's `pocl-opencl-icd`); with platforms but no device, check
        /// their drivers; with devices that `CL_LIFETIME_DEVICE` names none of, change or
        /// unset it.
        hint: &'static str,
    },
    /// A buffer, transfer or fill of zero elements, or of an element type of zero bytes,
    /// was requested.
    #[error(
        "zero elements, or elements of zero bytes: a buffer or transfer needs at least one byte"
    )]
    ZeroLength,
    /// A buffer larger than `CL_DEVICE_MAX_MEM_ALLOC_SIZE` was requested.
    #[error("{bytes} bytes exceeds the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE of {max} bytes")]
    TooLarge {
        /// Requested size in bytes.
        bytes: u64,
        /// The device's limit in bytes.
        max: u64,
    },
    /// A transfer reaches outside the buffer.
    #[error("{}", out_of_range(.transfer, .offset, .len, .buffer_len))]
    OutOfRange {
        /// Which transfer.
        transfer: Transfer,
        /// First element.
        offset: usize,
        /// Number of elements.
        len: usize,
        /// Elements in the buffer.
        buffer_len: usize,
    },
    /// A range whose end comes before its start.
    #[error("{transfer:?} of elements {start}..{end}: the range ends before it starts")]
    ReversedRange {
        /// Which transfer.
        transfer: Transfer,
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
    },
    /// A `.cl` file could not be found.
    #[error("{}", kernel_file_not_found(.name, .searched, .cwd))]
    KernelFileNotFound {
        /// The name or path asked for.
        name: String,
        /// Every place that was tried, as absolute paths.
        searched: Vec<PathBuf>,
        /// The working directory that relative names were resolved against.
        cwd: PathBuf,
    },
    /// Build options the library refuses before the driver sees them (some drivers crash
    /// on them).
    #[error("build options `{options}` refused: {reason}")]
    BuildOptions {
        /// The options given.
        options: String,
        /// What is wrong with them.
        reason: String,
    },
    /// A `.cl` file exists but could not be read.
    #[error("kernel file {} could not be read", .path.display())]
    KernelFileUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A program failed to build.
    #[error(
        "building {} for {device} with options `{options}` failed: {status}\n{log}",
        .file.display()
    )]
    Build {
        /// The file (or embedded source name) that was built.
        file: PathBuf,
        /// The device it was built for.
        device: String,
        /// The build options.
        options: String,
        /// What `clBuildProgram` returned.
        status: ClStatus,
        /// The compiler's full build log.
        log: String,
    },
    /// The program has no kernel of that name.
    #[error("no kernel `{name}` in {}; it has: {}", .file.display(), .available.join(", "))]
    UnknownKernel {
        /// The name asked for.
        name: String,
        /// The program's file.
        file: PathBuf,
        /// The kernels it does have.
        available: Vec<String>,
    },
    /// A launch passed the wrong number of arguments.
    #[error("kernel `{kernel}` takes {expected} arguments, {given} were given")]
    ArgCount {
        /// The kernel.
        kernel: String,
        /// What the kernel declares.
        expected: usize,
        /// What was passed.
        given: usize,
    },
    /// A launch argument does not match what the kernel declares, or the driver refused
    /// it.
    #[error(
        "argument {index} of kernel `{kernel}` (declared `{declared}`): given {given}; {reason}{}",
        called("clSetKernelArg", .status)
    )]
    KernelArg {
        /// The kernel.
        kernel: String,
        /// Argument index.
        index: usize,
        /// What the kernel declares, such as `__global int* data` (from the driver's
        /// argument information; `unknown` where it gives none).
        declared: String,
        /// What was given, such as `a 8-byte scalar`.
        given: String,
        /// Why it was refused.
        reason: String,
        /// What `clSetKernelArg` returned, when the driver refused it.
        status: Option<ClStatus>,
    },
    /// A launch's work sizes are refused: by the library's checks (dimensions, zero
    /// sizes, the device's and the kernel's work-group limits, a local size that does not
    /// divide the global one where groups must be uniform, a range that cannot end) or by
    /// the driver.
    #[error(
        "work size refused (global {global:?}{}): {reason}{}",
        local_size(.local),
        called("clEnqueueNDRangeKernel", .status)
    )]
    WorkSize {
        /// The global size given.
        global: Vec<usize>,
        /// The local size given, if any.
        local: Option<Vec<usize>>,
        /// What is wrong, with the device's limits involved.
        reason: String,
        /// What `clEnqueueNDRangeKernel` returned, when the driver refused it.
        status: Option<ClStatus>,
    },
    /// An object of one context was used with another (or a device outside the context).
    #[error("{}", context_mismatch(.object, .its_context, .used_with))]
    ContextMismatch {
        /// The object, as the library knows it: `buffer allocated at src/main.rs:10:5`,
        /// `event of a fill`, `queue`, `kernel scale`, a device's name.
        object: String,
        /// The `cl_context` handle the object belongs to (`None` for a device, which
        /// belongs to no context).
        its_context: Option<usize>,
        /// The `cl_context` handle it was used with.
        used_with: usize,
    },
    /// A memory object adopted ([`ClBuffer::from_raw`](crate::ClBuffer::from_raw)) is
    /// already held by a buffer of the context: one memory object has one record, so
    /// that every command on it is ordered; use that buffer.
    #[error(
        "memory object {raw:#x} is already the buffer allocated at {allocated_at}: \
         one memory object has one record, so use that buffer"
    )]
    AlreadyTracked {
        /// The `cl_mem` handle.
        raw: usize,
        /// Where the buffer holding it was handed out (created, adopted, taken from a
        /// pool).
        allocated_at: String,
    },
    /// The closure of a raw enqueue ([`After::enqueue_raw`](crate::After::enqueue_raw))
    /// returned a null event: there is no command to track.
    #[error("the raw enqueue returned a null event: its command cannot be tracked")]
    NullEvent,
    /// A future of the library's was polled again after it had handed back its result.
    #[error("the future was polled again after it had handed back its result")]
    Polled,
    /// A read into a [`HostBuffer`](crate::HostBuffer) shorter than the read.
    #[error("the read brings {needed} elements and the host buffer holds {len}")]
    HostTooSmall {
        /// Elements the read brings.
        needed: usize,
        /// Elements the host buffer holds.
        len: usize,
    },
    /// The host has the buffer mapped in a way that conflicts with this command: no
    /// device command may write a mapped buffer or read one mapped for writing.
    #[error("the buffer is mapped on the host in a way that conflicts with this command")]
    Mapped,
    /// The driver's host pointer for a map or a host buffer is not aligned for the
    /// element type (a `Pod` type may be aligned to more than the driver aligns its
    /// mappings: PoCL's are 128 to 512 bytes): no slice is made of it, and nothing stays
    /// mapped. Read or write with `read_owned` / `write` instead, or use an element type
    /// of smaller alignment.
    #[error(
        "the driver's host pointer {address:#x} is not aligned to the {align} bytes the \
         element type needs: read or write with read_owned / write instead, or use an \
         element type of smaller alignment"
    )]
    HostMisaligned {
        /// The driver's pointer.
        address: usize,
        /// The alignment the element type needs, in bytes.
        align: usize,
    },
    /// A pool's maximum would be exceeded, even after trimming its unused blocks.
    #[error("pool maximum of {max} bytes reached: {in_use} in use, {requested} more asked for")]
    PoolExhausted {
        /// Bytes asked for (rounded to the size class).
        requested: u64,
        /// The pool's maximum.
        max: u64,
        /// Bytes the pool has handed out and not had back.
        in_use: u64,
    },
    /// A view passed as a kernel argument starts where the device cannot place a
    /// sub-buffer: its offset in the memory object is not a multiple of the device's
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN`. Pass the whole buffer instead, declaring the
    /// elements the kernel touches ([`Arg::read_range`](crate::Arg::read_range),
    /// [`Arg::write_range`](crate::Arg::write_range)): any element offset, with the same
    /// byte-range hazards.
    #[error(
        "a view starting at byte {byte_offset} cannot be a kernel argument: the \
         device places sub-buffers at multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN, \
         {align} bytes here (start the view at such a multiple, or pass the whole \
         buffer with Arg::read_range / Arg::write_range / Arg::read_write_range and \
         the range's first element as an argument: any offset, the same hazards)"
    )]
    ViewMisaligned {
        /// The view's start in the memory object, in bytes.
        byte_offset: usize,
        /// The device's alignment, in bytes.
        align: usize,
    },
    /// An arena has no room left for a sub-buffer.
    #[error("arena full: {requested} bytes asked for, {available} left")]
    ArenaFull {
        /// Bytes asked for (aligned).
        requested: u64,
        /// Bytes left.
        available: u64,
    },
    /// An arena cannot be reset while sub-buffers carved from it are alive.
    #[error("arena still has {live} live sub-buffers")]
    ArenaBusy {
        /// How many are alive.
        live: usize,
    },
    /// A command this operation waited on ended with an error status.
    #[error("a command ended with {status}")]
    CommandFailed {
        /// The failing command's execution status.
        status: ExecStatus,
    },
    /// A command this one depends on failed, so this one was not run, or what it read
    /// is not the data it asked for: a dependency given to
    /// [`Queue::after`](crate::Queue::after) that had failed, or the last write of a
    /// buffer this command reads.
    #[error("{}", dependency_failed(.command, .status, .buffer, .dependency))]
    DependencyFailed {
        /// What kind of command failed.
        command: CommandKind,
        /// Its execution status.
        status: ExecStatus,
        /// For a failed write of a buffer this command reads: the buffer, by the place in
        /// the program where it was allocated.
        buffer: Option<&'static Location<'static>>,
        /// For a failed dependency given to [`Queue::after`](crate::Queue::after): its
        /// index in the list given (a [`UserEvent`](crate::UserEvent), a gate, when
        /// `command` is [`CommandKind::User`]).
        dependency: Option<usize>,
    },
    /// A device of the context cannot do what the call needs: it does not report the
    /// capability (shared virtual memory on an OpenCL 1.2 device), or it reports it and
    /// the library's probe saw it fail in this context (`failed` says how).
    #[error("{}", unsupported(.capability, .device, .failed))]
    Unsupported {
        /// The capability, by its OpenCL name (`CL_DEVICE_SVM_COARSE_GRAIN_BUFFER`).
        capability: &'static str,
        /// The first device that lacks it, as `P:D platform / device`.
        device: String,
        /// What the probe saw fail, where the device reports the capability.
        failed: Option<String>,
    },
    /// [`trace::start`](crate::trace::start) while a trace is already being recorded.
    #[error("a trace is already being recorded, to {}", .path.display())]
    TraceAlreadyOn {
        /// Where that trace goes.
        path: PathBuf,
    },
    /// The trace file could not be created or written.
    #[error("the trace file {} cannot be written: {source}", .path.display())]
    TraceUnwritable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    /// [`Error::ContextMismatch`]: `object` of the context `its` (none for a device) used
    /// with `used_with`.
    pub(crate) fn context_mismatch(
        object: impl Into<String>,
        its: Option<cl_context>,
        used_with: cl_context,
    ) -> Error {
        Error::ContextMismatch {
            object: object.into(),
            its_context: its.map(|c| c as usize),
            used_with: used_with as usize,
        }
    }

    pub(crate) fn cl(call: &'static str, status: cl_int) -> Error {
        if status == codes::DLOPEN_RUNTIME_LOAD_FAILED {
            return Error::NoLoader { hint: INSTALL_HINT };
        }
        Error::Cl {
            call,
            status: ClStatus(status),
        }
    }

    /// The OpenCL API status behind this error, if there is one.
    pub fn status(&self) -> Option<ClStatus> {
        match self {
            Error::Cl { status, .. } | Error::Build { status, .. } => Some(*status),
            Error::KernelArg { status, .. } | Error::WorkSize { status, .. } => *status,
            _ => None,
        }
    }

    /// The execution status of the failed command behind this error, if there is one.
    pub fn exec_status(&self) -> Option<ExecStatus> {
        match self {
            Error::CommandFailed { status } | Error::DependencyFailed { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }
}

/// How to get an OpenCL loader and an implementation that runs everywhere
/// ([`Error::NoLoader`]).
pub(crate) const INSTALL_HINT: &str = "install the OpenCL ICD loader and a driver for \
     your device, or PoCL, a CPU OpenCL that runs anywhere: \
     `apt-get install ocl-icd-libopencl1 pocl-opencl-icd` on Debian or Ubuntu, \
     `dnf install ocl-icd pocl` on Fedora";

/// [`Error::NoDevice`] when the loader lists no platform.
pub(crate) const NO_PLATFORM_HINT: &str = "the OpenCL loader lists no platform: install an \
     OpenCL driver (an ICD) for your device, or PoCL, a CPU OpenCL that runs anywhere \
     (`apt-get install pocl-opencl-icd` on Debian or Ubuntu, `dnf install pocl` on Fedora); \
     `clinfo -l` lists what the loader finds";

/// [`Error::NoDevice`] when the loader lists platforms, but none has a device.
pub(crate) const NO_DEVICE_HINT: &str = "the OpenCL platforms found have no device: check \
     their drivers (`clinfo -l` lists what the loader finds), or install PoCL, a CPU OpenCL \
     that runs anywhere (`apt-get install pocl-opencl-icd` on Debian or Ubuntu, \
     `dnf install pocl` on Fedora)";

/// [`Error::NoDevice`] when `CL_LIFETIME_DEVICE` names none of the devices found.
pub(crate) const FILTER_HINT: &str = "set CL_LIFETIME_DEVICE to one of the devices found, \
     as its `P:D` indices or a part of its platform or device name (`pocl`, `nvidia`), or \
     unset it to take the first GPU, else the first device";

// The messages that depend on a field's value, for `#[error]` above.

fn no_device(looked_for: &str, found: &[String], hint: &str) -> String {
    if found.is_empty() {
        format!("no OpenCL device found (looked for {looked_for}); {hint}")
    } else {
        let found = found.join(", ");
        format!("no OpenCL device matches {looked_for} (found: {found}); {hint}")
    }
}

fn out_of_range(transfer: &Transfer, offset: &usize, len: &usize, buffer_len: &usize) -> String {
    match offset.checked_add(*len) {
        Some(end) => {
            format!("{transfer:?} of elements {offset}..{end} is outside a buffer of {buffer_len}")
        }
        None => format!(
            "{transfer:?} of {len} elements from element {offset} is outside a buffer of {buffer_len}"
        ),
    }
}

fn kernel_file_not_found(name: &str, searched: &[PathBuf], cwd: &Path) -> String {
    let mut text = format!(
        "kernel file `{name}` not found (working directory {}); searched:",
        cwd.display()
    );
    for path in searched {
        text.push_str(&format!(" {}", path.display()));
    }
    text
}

/// ` (CALL: STATUS)` where the driver refused the call, else nothing.
fn called(call: &str, status: &Option<ClStatus>) -> String {
    match status {
        Some(status) => format!(" ({call}: {status})"),
        None => String::new(),
    }
}

fn local_size(local: &Option<Vec<usize>>) -> String {
    match local {
        Some(local) => format!(", local {local:?}"),
        None => ", local chosen by the driver".to_string(),
    }
}

fn context_mismatch(object: &str, its_context: &Option<usize>, used_with: &usize) -> String {
    match its_context {
        Some(its) => {
            format!("{object} belongs to context {its:#x} and was used with context {used_with:#x}")
        }
        None => format!("{object} is not a device of context {used_with:#x}"),
    }
}

fn dependency_failed(
    command: &CommandKind,
    status: &ExecStatus,
    buffer: &Option<&'static Location<'static>>,
    dependency: &Option<usize>,
) -> String {
    match (command, buffer, dependency) {
        (command, Some(site), _) => format!(
            "the buffer allocated at {site} holds data whose write (a {command:?} command) \
             failed with {status}, so this command, which reads it, was refused: write \
             the buffer again before reading it (the release report lists its failures)"
        ),
        (CommandKind::User, None, Some(index)) => format!(
            "the user event (gate) given to Queue::after at index {index} failed with \
             {status}, so this command was not enqueued"
        ),
        (command, None, Some(index)) => format!(
            "the {command:?} command given to Queue::after at index {index} failed with \
             {status}, so this command was not enqueued"
        ),
        (command, None, None) => {
            format!("a {command:?} command this one depends on failed with {status}")
        }
    }
}

fn unsupported(capability: &str, device: &str, failed: &Option<String>) -> String {
    match failed {
        None => format!("device {device} does not report {capability}, which this call needs"),
        Some(failed) => format!(
            "device {device} reports {capability}, but in this context {failed} \
             (measured by the library's probe), so this call is refused"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsupported_capability_names_it_the_device_and_what_the_probe_saw() {
        let missing = Error::Unsupported {
            capability: "CL_DEVICE_SVM_FINE_GRAIN_BUFFER",
            device: "1:0 NVIDIA CUDA / NVIDIA H200".to_string(),
            failed: None,
        };
        assert_eq!(
            missing.to_string(),
            "device 1:0 NVIDIA CUDA / NVIDIA H200 does not report \
             CL_DEVICE_SVM_FINE_GRAIN_BUFFER, which this call needs"
        );
        let measured = Error::Unsupported {
            capability: "CL_DEVICE_SVM_COARSE_GRAIN_BUFFER",
            device: "1:0 NVIDIA CUDA / NVIDIA H200".to_string(),
            failed: Some("a kernel given an SVM pointer is refused".to_string()),
        };
        let text = measured.to_string();
        assert!(
            text.contains("reports CL_DEVICE_SVM_COARSE_GRAIN_BUFFER"),
            "{text}"
        );
        assert!(
            text.contains("a kernel given an SVM pointer is refused"),
            "{text}"
        );
    }

    #[test]
    fn status_prints_name_and_number() {
        assert_eq!(ClStatus(-38).to_string(), "CL_INVALID_MEM_OBJECT (-38)");
        assert_eq!(
            ClStatus(-14).to_string(),
            "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (-14)"
        );
    }

    #[test]
    fn an_execution_status_prints_as_one_and_not_as_an_api_error() {
        assert_eq!(ExecStatus(-1).to_string(), "execution status -1");
        assert_eq!(ExecStatus(-1234).to_string(), "execution status -1234");
        assert_eq!(
            ExecStatus(-14).to_string(),
            "execution status -14 (a dependency failed)"
        );
        let failed = Error::CommandFailed {
            status: ExecStatus(-1),
        };
        assert!(
            !failed.to_string().contains("CL_DEVICE_NOT_FOUND"),
            "{failed}"
        );
    }

    #[test]
    fn a_reversed_range_names_both_ends() {
        let e = Error::ReversedRange {
            transfer: Transfer::Fill,
            start: 12,
            end: 4,
        };
        assert_eq!(
            e.to_string(),
            "Fill of elements 12..4: the range ends before it starts"
        );
    }

    #[test]
    fn unknown_status_is_named_unknown() {
        assert_eq!(ClStatus(-12345).name(), "UNKNOWN");
    }

    // A status outside OpenCL's range (CLBlast's, -2048 and below) printed as `UNKNOWN`.
    #[test]
    fn a_status_outside_opencl_prints_its_number_and_says_it_is_not_opencl() {
        let clblast = ClStatus(-2048);
        assert!(!clblast.is_opencl());
        assert_eq!(
            clblast.to_string(),
            "-2048, not an OpenCL status (another library's own code)"
        );
        let e = Error::cl("CLBlastSgemm", -2048);
        assert!(e.to_string().contains("-2048, not an OpenCL status"), "{e}");
        assert!(!e.to_string().contains("UNKNOWN"), "{e}");
        assert_eq!(ClStatus(-38).to_string(), "CL_INVALID_MEM_OBJECT (-38)");
    }

    #[test]
    fn missing_loader_is_its_own_error() {
        assert!(matches!(
            Error::cl("clGetPlatformIDs", codes::DLOPEN_RUNTIME_LOAD_FAILED),
            Error::NoLoader { .. }
        ));
    }
}
