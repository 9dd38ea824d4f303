//! OpenCL buffers that are released only after their own commands finish, on any ICD.
//!
//! OpenCL releases device memory asynchronously, and vendors disagree on what that means:
//! NVIDIA's `clReleaseMemObject` blocks the host until a kernel that uses the buffer ends,
//! PoCL's returns at once and keeps the memory until then. `clFinish` before every release
//! fixes both by serialising everything. A [`ClBuffer`] instead records the event of every
//! command that touches it; [`ClBuffer::release`] waits on exactly those events with
//! `clWaitForEvents`, then releases the memory. When it returns, the buffer's commands have
//! ended and the memory is gone, on every vendor, and the library waited for no unrelated
//! work. (NVIDIA's `clReleaseMemObject` itself still blocks until the context's running work
//! ends, for any buffer that has been used on the device; the tour example measures it.)
//!
//! Kernels are `.cl` files built at run time, so the crate runs on any OpenCL ICD, PoCL on
//! the CPU included. `CL_LIFETIME_DEVICE` picks the device (see [`Device::select`]).
//!
//! # Example
//!
//! ```
//! use cl_lifetime::{Arg, Context};
//!
//! fn main() -> Result<(), cl_lifetime::Error> {
//!     let ctx = Context::from_env()?;
//!     let queue = ctx.queue()?;
//!     let add = ctx.program("vector_add.cl", "")?.kernel("add")?;
//!
//!     let n = 1024;
//!     let a = ctx.buffer_from(&vec![1.0f32; n])?;
//!     let b = ctx.buffer::<f32>(n)?;
//!     let sum = ctx.buffer::<f32>(n)?;
//!     queue.write_owned(&b, vec![2.0f32; n])?; // no unsafe, no borrowed host memory
//!     queue.launch(
//!         &add,
//!         &[n],
//!         &[Arg::read(&a), Arg::read(&b), Arg::write(&sum), Arg::scalar(n as u32)],
//!     )?;
//!     let result = queue.read_owned(&sum)?.wait()?;
//!     assert!(result.iter().all(|&x| x == 3.0));
//!
//!     // Waits for `b`'s write and the kernel, and nothing else, then frees the memory.
//!     let report = b.release()?;
//!     assert!(report.failed.is_empty());
//!     Ok(())
//! }
//! ```
//!
//! # Modules
//!
//! The event record of a buffer lives in [`tracker`], free of OpenCL so that it is tested
//! on its own; [`ClBuffer`] applies it to a `cl_mem`; [`Queue`] records every enqueue;
//! [`Program`] and [`Kernel`] load `.cl` files and launch them with named argument access.

mod buffer;
mod context;
mod device;
mod error;
mod event;
mod launch;
mod pool;
mod program;
mod queue;
mod reaper;
mod stats;
pub mod tracker;

pub use buffer::{ClBuffer, FREE_GRACE, FailedCommand, PendingRead, Pod, ReleaseReport};
pub use context::Context;
pub use device::{DEVICE_VAR, Device};
pub use error::{ClStatus, Error, ExecStatus, Result, Transfer};
pub use event::{CommandKind, Event, Status, UserEvent, events_held, wait_all};
pub use pool::{Arena, POISON, Pool, PoolOptions, PoolStats};
pub use program::{Arg, KERNELS_VAR, Kernel, Program};
pub use queue::{After, Mapped, MappedMut, Queue};
pub use stats::{HazardStats, MemoryStats};

/// The README's examples run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
