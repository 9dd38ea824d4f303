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
//! Kernels are OpenCL C sources built at run time, given inline
//! ([`Context::program_from_source`]) or as `.cl` files found at run time
//! ([`Context::program`]), so the crate runs on any OpenCL ICD, PoCL on the CPU included. `CL_LIFETIME_DEVICE` picks the device (see [`Device::select`]).
//!
//! The [`guide`] has one chapter per task: releasing, ordering across queues, pools and
//! deferred release, failures, adopting existing code, async, views, the trace, choosing a
//! device, driver notes, and measuring.
//!
//! # Example
//!
//! A whole `src/main.rs` of a crate that depends on `cl-lifetime`; the kernel's source is
//! inline, so it needs nothing else but an OpenCL platform.
//!
//! ```
//! use cl_lifetime::{Arg, Context};
//!
//! const VECTOR_ADD: &str = "
//! __kernel void add(__global const float *a, __global const float *b,
//!                   __global float *sum, const uint n) {
//!     size_t i = get_global_id(0);
//!     if (i < n) {
//!         sum[i] = a[i] + b[i];
//!     }
//! }";
//!
//! fn main() -> Result<(), cl_lifetime::Error> {
//!     let ctx = Context::from_env()?;
//!     let queue = ctx.queue()?;
//!     let add = ctx.program_from_source("vector_add", VECTOR_ADD, "")?.kernel("add")?;
//!
//!     let n = 1024;
//!     let a = ctx.buffer_from(&vec![1.0f32; n])?;
//!     let b = ctx.buffer::<f32>(n)?;
//!     let sum = ctx.buffer::<f32>(n)?;
//!     queue.write_owned(&b, vec![2.0f32; n])?; // no unsafe, no borrowed host memory
//!     let args = [Arg::read(&a), Arg::read(&b), Arg::write(&sum), Arg::scalar(n as u32)];
//!     // SAFETY: `add` touches element i of each buffer only where i < n, their length,
//!     // and writes only `sum` (a launch is `unsafe`: see "What is safe" below).
//!     unsafe { queue.launch(&add, &[n], &args)? };
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
//! # What is safe
//!
//! Allocations, transfers, copies, fills, maps, views, host buffers, pools, arenas, events
//! and releases are safe calls: the library checks their ranges, orders them, and hands
//! out host slices only while the device cannot touch them, so no safe call reaches
//! undefined behaviour. Three kinds of call are `unsafe`, each with its contract in a
//! `# Safety` section:
//!
//! - **Kernel launches** ([`Queue::launch`], [`Queue::launch_local`] and their [`After`]
//!   forms). The library checks every argument's kind, context and the work sizes, but no
//!   library can see what a kernel's body touches (cudarc's launches, opencl3's
//!   `enqueue_nd_range` and ocl's `enq` are `unsafe` for the same reason): the caller
//!   vouches that the kernel stays inside the elements of the buffers, views and shared
//!   virtual memory it is given and writes only the arguments passed as written. A
//!   kernel that indexes past a buffer's end writes memory the buffer does not own, on a
//!   CPU device the host's.
//! - **Raw commands** ([`After::enqueue_raw`], [`After::enqueue_raw_after_barrier`]): the
//!   caller says what its command touches.
//! - **Raw handles in** (the `from_raw` constructors): the caller vouches for the handle.
//!
//! # Async
//!
//! An [`Event`] and a [`PendingRead`] can be `.await`ed, and [`ClBuffer::release_async`],
//! [`Pool::acquire_async`] and [`unblock`] are futures: std's `Future` and `Waker` only,
//! for any executor. A pending command is watched by the library's waiter: a poller that
//! reads statuses at growing pauses (back to back right after a gate is set through the
//! library), and a few threads blocked in `clWaitForEvents` on commands that end without
//! the program's help (no driver callback). It wakes the tasks whose commands ended,
//! however many await behind closed gates; a dropped future cancels nothing on the device.
//! A panic of a waker or an [`unblock`] job reaches its task, never the library's threads.
//!
//! The examples drive their futures with `pollster` (add `pollster = "0.4"` to your
//! `[dependencies]` to run them as they are); any executor does.
//!
//! ```
//! # fn main() -> Result<(), cl_lifetime::Error> {
//! # let ctx = cl_lifetime::Context::from_env()?;
//! # let queue = ctx.queue()?;
//! let buf = ctx.buffer_from(&[1u32; 1024])?;
//! let data = pollster::block_on(async {
//!     queue.fill(&buf, 2)?.await?;
//!     queue.read_owned(&buf)?.await
//! })?;
//! assert_eq!(data, vec![2u32; 1024]);
//! # Ok(())
//! # }
//! ```
//!
//! # Blocking calls
//!
//! These calls may block the calling thread on the device; each has an async form that
//! does not.
//!
//! | call | blocks until | async form |
//! |---|---|---|
//! | [`Event::wait`], [`wait_all`] | the command ends (for ever behind a user event never set) | `.await` on the [`Event`] |
//! | [`PendingRead::wait`] | the read ends (its drop never waits: its memory goes to the library's thread) | `.await` on the [`PendingRead`] |
//! | [`Queue::read`], [`Queue::write`] (and their `_at` forms) | the transfer and the commands it waits on end | [`After::read_owned`] or [`After::write_owned`], then `.await` |
//! | [`Queue::map`], [`Queue::map_mut`], [`Queue::finish`] | the buffer's writers (and readers, for `map_mut`), or every command of the queue, end | [`unblock`] |
//! | [`ClBuffer::release`], and a buffer's drop | its commands end, then up to the context's [free grace](Context::free_grace) (2 s) for the driver's free; NVIDIA's `clReleaseMemObject` also until the context's running kernels end; on Intel's CPU runtime, after one of its commands failed, also until the commands before that one on its queue end | [`ClBuffer::release_async`], or [`ClBuffer::release_deferred`] |
//! | [`SvmBuffer::release`], and its drop | its commands end (`clSVMFree` frees at once) | [`SvmBuffer::release_async`], or [`SvmBuffer::release_deferred`] |
//! | [`Queue::read_svm`], [`Queue::write_svm`] | as their buffer forms | [`Queue::read_svm_into`] or [`Queue::write_svm_lent`], then `.await` |
//! | [`Queue::map_svm`], [`Queue::map_svm_mut`] | as their buffer forms | [`unblock`] |
//! | [`Pool::acquire`] at [`PoolOptions::max_bytes`] | the pool's blocks being let go are freed | [`Pool::acquire_async`] |
//! | [`Context::wait_deferred`], the last handle of a [`Context`] dropped | every deferred release is done | [`unblock`] |
//! | enqueues ([`Queue::launch`], [`Queue::fill`], ...) | never on the device; a driver may block them inside its own call (NVIDIA's, 11 to 32 ms, with many commands queued) | [`unblock`] |
//! | [`Context::from_env`] and the other constructors | the first context over a device probes its driver (0.4 ms on PoCL, 1 ms on NVIDIA, 0.1 s on Intel's CPU runtime) | [`unblock`] |
//!
//! # Flushing
//!
//! An enqueue does not flush its own queue: commands are submitted in batches, as the
//! driver chooses, until something needs them to run. The library flushes a queue (only
//! when it has unflushed work) where a command could otherwise wait for ever:
//!
//! | when | what is flushed |
//! |---|---|
//! | a command of another queue is put in a wait list (a cross-queue hazard, or an [`Event`] given to [`Queue::after`]) | the queue of that command |
//! | a command is awaited (`.await` on an [`Event`] or a [`PendingRead`]), or a pending transfer is dropped | the command's queue |
//! | a buffer is released ([`ClBuffer::release`], its drop, [`ClBuffer::release_async`], [`ClBuffer::release_deferred`]; the same for an [`SvmBuffer`]) | the queues of its pending commands |
//! | on a driver measured to end a flushed batch together ([`DriverBehaviour::ends_batches_together`]: rusticl 22.3), before a command that waits on another queue's command or a user event | the command's own queue, so that the commands before it are not held with it |
//! | [`Queue::flush`], [`Queue::finish`] | the queue |
//!
//! The blocking calls above wait with `clWaitForEvents` or `clFinish`, which flush the
//! queues they wait on themselves. A program that enqueues and then only polls an event's
//! status (without waiting or awaiting) calls [`Queue::flush`] first: some drivers (rusticl)
//! run nothing that was not flushed.
//!
//! # Layers
//!
//! Each layer calls only the layers below it; `src/` has one folder or file per layer.
//! `make lint` checks it (`scripts/layers.py`: every `crate::` path, a name re-exported
//! at the crate's root resolved to its module).
//!
//! | layer | what it is for |
//! |---|---|
//! | `error`, `status`, [`tracker`], `checks` (the launch checks), `pod`, `util`, `census` | plain data and rules with no OpenCL call: typed errors and statuses, the event record and its hazard rules, the launch checks, the process-wide counts of what the library holds |
//! | `ffi` | the only code that calls OpenCL; every `unsafe` FFI call, each with its safety contract; one owner type for the references to each kind of handle, whose drop releases (so the types above are `Send` and `Sync` by composition) |
//! | [`trace`] | the opt-in lifetime trace: records what the layers above report, writes Chrome trace-event JSON |
//! | `core` | per-context and per-queue state: devices, counters, the memory ledger, the reaper thread, open gates, the waiter threads |
//! | `event` | retained events, user events, and failed events kept until their dependencies end |
//! | `awaiting` | the futures of commands, reads, releases and allocations, woken by `core`'s waiter |
//! | `record` | a buffer's block and record, the enqueue protocol (gather, enqueue, commit, fold) and releases |
//! | `kernel` | programs, kernel objects and their argument cache |
//! | `api` | [`Context`], [`ClBuffer`] and [`Queue`]: checked commands handed to the protocol |
//! | `alloc` | [`Pool`] and [`Arena`], clients of the buffer API |
//!
//! The rules each layer keeps are named in its module docs (for example the record
//! layer's *exact wait*, or the tracker's *shadow*), and the code cites them by name. Its
//! lock order is code (`util::sync::rank`), checked in debug builds.

#![deny(rustdoc::broken_intra_doc_links)]

mod alloc;
mod api;
mod awaiting;
mod census;
mod checks;
mod core;
mod error;
mod event;
mod ffi;
pub mod guide;
mod kernel;
mod pod;
mod record;
mod status;
pub mod trace;
pub mod tracker;
mod util;

pub use alloc::{Arena, POISON, Pool, PoolOptions, PoolStats};
pub use api::buffer::ClBuffer;
pub use api::context::Context;
pub use api::host::{HostBuffer, HostMemory};
pub use api::launch::IntoArg;
pub use api::map::{Mapped, MappedMut};
pub use api::pending::{PendingRead, PendingWrite, ReadFuture, WriteFuture};
pub use api::queue::{After, Queue, QueueOptions};
pub use api::raw::BufferUse;
pub use api::svm::{IntoSvm, SvmBuffer, SvmView};
pub use api::view::{IntoView, View};
pub use awaiting::{Ended, unblock};
pub use census::{buffers_not_freed, events_held, longest_record};
pub use core::context::FREE_GRACE;
pub use core::device::{DEVICE_VAR, Device, SvmKind};
pub use core::driver::{Behaviour as DriverBehaviour, DRIVER_VAR};
pub use core::stats::{HazardStats, LiveBuffer, LiveBuffers, MemoryStats};
pub use core::waiter::WAIT_VAR;
pub use error::{ClStatus, Error, Result, Transfer};
pub use event::{Event, Profile, UserEvent, wait_all};
pub use kernel::{Arg, KERNELS_VAR, Kernel, Program};
/// The opencl3 this crate is built on, for raw code that works beside it: one and the
/// same version, so its handles and types agree with the library's.
pub use opencl3;
#[doc(hidden)]
pub use pod::Element;
pub use pod::Pod;
pub use record::failure::FailedCommand;
pub use record::release::ReleaseReport;
pub use status::{CommandKind, ExecStatus, Status};
pub use tracker::Access;

/// The README's examples run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
