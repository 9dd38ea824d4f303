//! The kernel layer: programs loaded from `.cl` files at run time, kernel objects, and
//! launch arguments.
//!
//! # Rules
//!
//! - **Kernel lookup.** A `.cl` file named `name` is looked for, in this order: `name` as
//!   given (relative to the working directory unless absolute); in each folder of
//!   `CL_LIFETIME_KERNELS` (a path list); in `kernels/` under the working directory;
//!   beside the executable and in `kernels/` beside it. `.cl` may be left off. Nothing
//!   from the build machine is consulted, so a deployed binary finds its kernels by the
//!   same rule everywhere; a miss lists every absolute path tried and the working
//!   directory. Kernels the library itself needs are embedded in the binary and still
//!   built at run time, under names no user program shares.
//! - **Program cache.** A program is built once per context, name, options and source:
//!   two sources under one name are two programs.
//! - **Checked options.** Build options are checked before the driver sees them (a bare
//!   `-D` or `-I` at the end crashes PoCL). A build failure carries the file, the device
//!   and the full build log.
//! - **Argument checks.** Every program is also built with `-cl-kernel-arg-info`, so
//!   launches can be checked against what each kernel declares ([`crate::checks`]).
//! - **One lock per kernel.** Setting a kernel's arguments and enqueueing it happen under
//!   one lock per kernel, so threads sharing a kernel cannot interleave (design trap
//!   "kernel arguments hold buffers").
//! - **Arguments set once.** Each kernel remembers what its arguments hold and sets only
//!   those that change, so a loop launching one kernel on the same buffers calls
//!   `clSetKernelArg` only for what differs.
//! - **One kind per argument object.** An argument set with `clSetKernelArgSVMPointer`
//!   is never set with `clSetKernelArg` afterwards on the same kernel object, nor the
//!   other way round: NVIDIA's driver refuses the launch then (`CL_INVALID_KERNEL_ARGS`,
//!   design trap "an argument that was SVM"). A launch that would switch an argument's
//!   kind runs on another kernel object of the same kernel, made at the first such launch
//!   and kept for the kernel's life.
//! - **Unbind at release.** A buffer bound to a kernel notes the kernel (through
//!   [`ArgHolder`](crate::record::hooks::ArgHolder)); its release resets those arguments
//!   to NULL before `clReleaseMemObject`, so no kernel object keeps a released buffer
//!   alive (same trap).
//! - **Widest first.** Where a launch of a kernel wider than all before it must not overlap
//!   them (PoCL 5.0 to 6.x), it waits for the pending launches of that kernel, unless a
//!   gate of the context is closed ([`widths`]).

mod arg;
pub(crate) mod files;
mod object;
pub(crate) mod program;
pub(crate) mod widths;

pub use arg::Arg;
pub use files::KERNELS_VAR;
pub use object::Kernel;
pub use program::Program;
