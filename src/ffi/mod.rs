//! The raw layer: the only module that calls OpenCL.
//!
//! Each function is one OpenCL call (through `opencl3`'s thin wrappers), or a fixed short
//! sequence of them, and returns the library's [`Error`](crate::Error) naming the call. A
//! function is `unsafe` exactly when the call has preconditions its argument types do not
//! carry (a live handle given up, a host pointer, a wait list of live events); its
//! `# Safety` section lists them, and every caller's `// SAFETY:` comment says why they
//! hold. Nothing here keeps state or decides policy: which events to wait on, when to
//! release and what a status means are decided above.
//!
//! Calls take handles raw (`cl_mem`, `cl_event`, ...). The layers above hold their
//! references through one owner type, [`Owned`], which releases each exactly once.

mod context;
mod device;
mod event;
mod mem;
mod owned;
mod program;
mod queue;
mod svm;

pub(crate) use context::*;
pub(crate) use device::*;
pub(crate) use event::*;
pub(crate) use mem::*;
pub(crate) use owned::{Kind, Owned, Shared, Unowned};

/// One reference to a memory object.
pub(crate) type OwnedMem = Owned<owned::Mem>;
/// A memory object that what holds it keeps alive.
pub(crate) type UnownedMem = Unowned<owned::Mem>;
/// One reference to a command queue.
pub(crate) type OwnedQueue = Owned<owned::Queue>;
/// One reference to a context.
pub(crate) type OwnedContext = Owned<owned::Context>;
/// A context that what holds it keeps alive.
pub(crate) type UnownedContext = Unowned<owned::Context>;
/// One reference to a program.
pub(crate) type OwnedProgram = Owned<owned::Program>;
/// One reference to a kernel object.
pub(crate) type OwnedKernel = Owned<owned::Kernel>;
/// One reference to an event, released at once (the core layer's events follow its
/// rules first).
pub(crate) type OwnedEvent = Owned<owned::Event>;
pub(crate) use program::*;
pub(crate) use queue::*;
pub(crate) use svm::*;

pub(crate) use opencl3::error_codes as codes;
pub(crate) use opencl3::types::{
    cl_command_queue, cl_context, cl_device_id, cl_event, cl_int, cl_kernel, cl_mem,
    cl_platform_id, cl_program, cl_uint,
};

/// A wait list as `clEnqueue*` takes it: null when empty.
fn wait_ptr(wait: &[cl_event]) -> *const cl_event {
    if wait.is_empty() {
        std::ptr::null()
    } else {
        wait.as_ptr()
    }
}

/// A wait list's length as `clEnqueue*` takes it. Wait lists are built from a handful of
/// buffers' records, far below `u32::MAX`.
fn wait_len(wait: &[cl_event]) -> cl_uint {
    cl_uint::try_from(wait.len()).unwrap_or(cl_uint::MAX)
}
