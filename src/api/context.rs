//! The context: its devices (one, or several of one platform), its queues, its buffers and
//! its program cache.
//!
//! A [`Context`] is a cheap handle (an `Arc`); queues, buffers, programs and kernels each
//! keep the context alive, so it is released only after the last of them.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::util::sync::{Mutex, rank};

use super::buffer::ClBuffer;
use super::queue::{Queue, QueueOptions};
use crate::core::context::ContextCore;
use crate::core::device::Device;
use crate::core::queue::QueueCore;
use crate::core::stats::{HazardStats, LiveBuffers, MemoryStats};
use crate::error::{Error, Result};
use crate::event::{UserEvent, graveyard};
use crate::ffi::cl_context;
use crate::kernel::files;
use crate::kernel::program::{Program, ProgramInner};
use crate::pod::Pod;
use crate::util::{next_id, sites};

/// The *program cache* rule: a program is cached under its name, options and source.
type ProgramKey = (PathBuf, String, String);

/// An OpenCL context on one device ([`Context::from_env`], [`Context::new`]) or on several
/// devices of one platform ([`Context::with_devices`]), whose buffers may then be used from
/// queues on any of them ([`Context::queue_on`]). [`Context::queue`] and the other
/// constructors of queues without a device use the first one, [`Context::device`].
///
/// A `Context` is a cheap handle: its clones share one context.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// println!("running on {}", ctx.device());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Context {
    /// Shared by the user's clones only (queues and buffers hold its `core`): its drop is
    /// the context's end from the user's side.
    shared: Arc<Shared>,
}

/// What the user's handles of one context share: the program cache. Dropped with the last
/// of them: finishes the deferred releases and reports buffers still alive.
struct Shared {
    core: Arc<ContextCore>,
    programs: Mutex<HashMap<ProgramKey, Arc<ProgramInner>>, rank::ProgramCache>,
    builds: AtomicUsize,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let gates = self.core.gates.count();
        if gates == 0 {
            self.core.reaper.wait_idle();
        } else {
            // A deferred release may be behind a gate the caller still holds: waiting here
            // could be forever. The reaper goes on freeing on its own thread.
            log::info!(
                target: "cl_lifetime::context",
                "context dropped with {gates} user events not set (created at {}): \
                 deferred releases finish on the library's thread",
                sites(&self.core.gates.sites())
            );
        }
        graveyard::sweep();
        let leaks = self.core.ledger.leaks();
        if !leaks.is_empty() {
            log::warn!(
                target: "cl_lifetime::context",
                "context dropped with {leaks}\n(they keep the context alive until they are dropped)"
            );
        }
        if crate::trace::on() {
            crate::trace::context_closed();
        }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.core().device)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The context's shared state, which queues, buffers and pools hold.
    pub(crate) fn core(&self) -> &Arc<ContextCore> {
        &self.shared.core
    }

    /// A context on the device `CL_LIFETIME_DEVICE` names, or the default device.
    ///
    /// # Errors
    ///
    /// [`Error::NoLoader`] or [`Error::NoDevice`] as [`Device::select`];
    /// [`Error::Cl`] when `clCreateContext` fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// assert!(!ctx.devices().is_empty());
    /// println!("running on {} ({})", ctx.device().name(), ctx.device().platform_name());
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_env() -> Result<Context> {
        Context::new(&Device::from_env()?)
    }

    /// A context on `device`.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when `clCreateContext` fails.
    pub fn new(device: &Device) -> Result<Context> {
        Context::with_devices(std::slice::from_ref(device))
    }

    /// A context over several devices of one platform; its buffers may be used from
    /// queues on any of them, and the library orders commands across them.
    ///
    /// # Errors
    ///
    /// [`Error::NoDevice`] for an empty list; [`Error::Cl`] when `clCreateContext` fails
    /// (`CL_INVALID_DEVICE` for devices of different platforms, for example).
    pub fn with_devices(devices: &[Device]) -> Result<Context> {
        Ok(Context::from_core(ContextCore::create(devices)?))
    }

    /// The user's first handle to `core`.
    fn from_core(core: ContextCore) -> Context {
        crate::trace::start_from_env();
        if crate::trace::on() {
            crate::trace::context_opened();
        }
        Context {
            shared: Arc::new(Shared {
                core: Arc::new(core),
                programs: Mutex::new(HashMap::new()),
                builds: AtomicUsize::new(0),
            }),
        }
    }

    /// The first device: the one [`Context::queue`] uses.
    pub fn device(&self) -> &Device {
        &self.core().device
    }

    /// What the driver of the context's first device does, as the library measured it at
    /// the device's first context (or the careful behaviour under
    /// `CL_LIFETIME_DRIVER=unknown`); [`Context::driver_of`] for another device.
    pub fn driver(&self) -> crate::DriverBehaviour {
        self.core().behaviour(&self.core().device)
    }

    /// [`Context::driver`] for `device`, one of the context's (the careful behaviour for
    /// another).
    pub fn driver_of(&self, device: &Device) -> crate::DriverBehaviour {
        self.core().behaviour(device)
    }

    /// Every device of the context.
    pub fn devices(&self) -> &[Device] {
        &self.core().devices
    }

    /// A new in-order command queue on the first device.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the queue cannot be created.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(64)?;
    /// queue.fill(&buf, 9)?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![9; 64]); // in order: after the fill
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue(&self) -> Result<Queue> {
        self.queue_with(QueueOptions::default())
    }

    /// A new out-of-order command queue on the first device.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_QUEUE_PROPERTIES` when the device has none.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.out_of_order_queue()?;
    /// let buf = ctx.buffer::<u32>(64)?;
    /// queue.fill(&buf, 3)?;
    /// // The library still orders commands on one buffer, out of order queue or not.
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![3; 64]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn out_of_order_queue(&self) -> Result<Queue> {
        self.queue_with(QueueOptions::default().out_of_order(true))
    }

    /// A new command queue on `device`, one of the context's devices.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `device` is not in the context; [`Error::Cl`] as
    /// [`Context::queue`] and [`Context::out_of_order_queue`].
    pub fn queue_on(&self, device: &Device, out_of_order: bool) -> Result<Queue> {
        self.queue_on_with(device, QueueOptions::default().out_of_order(out_of_order))
    }

    /// A new command queue on the first device, made as `options` say (out of order,
    /// profiling).
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_QUEUE_PROPERTIES` when the device cannot make such
    /// a queue.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::QueueOptions;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue_with(QueueOptions::default().profiling(true))?;
    /// let buf = ctx.buffer::<u32>(1 << 16)?;
    /// let fill = queue.fill(&buf, 7)?;
    /// fill.wait()?;
    /// println!("the fill ran for {:?}", fill.profile()?.duration());
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue_with(&self, options: QueueOptions) -> Result<Queue> {
        self.queue_on_with(&self.core().device, options)
    }

    /// A new command queue on `device`, one of the context's devices, made as `options`
    /// say.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `device` is not in the context; [`Error::Cl`] as
    /// [`Context::queue_with`].
    pub fn queue_on_with(&self, device: &Device, options: QueueOptions) -> Result<Queue> {
        let device = self
            .core()
            .devices
            .iter()
            .find(|d| d.id == device.id)
            .ok_or_else(|| Error::context_mismatch(device.to_string(), None, self.core().raw()))?;
        let core = QueueCore::create(
            self.core(),
            device,
            options.out_of_order,
            options.profiling,
            options.stage_reads.unwrap_or_else(|| device.is_gpu()),
        )?;
        Ok(Queue::from_core(Arc::new(core)))
    }

    /// Blocks until every deferred release submitted so far is done: the memory is freed.
    pub fn wait_deferred(&self) {
        self.core().reaper.wait_idle();
    }

    /// Live, pending-release, pooled and peak bytes, and allocation counts.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let before = ctx.memory_stats();
    /// let buf = ctx.buffer::<u32>(1000)?;
    /// let stats = ctx.memory_stats();
    /// assert_eq!(stats.live_bytes, before.live_bytes + 4000);
    /// assert_eq!(stats.allocations, before.allocations + 1);
    /// buf.release()?;
    /// assert_eq!(ctx.memory_stats().live_bytes, before.live_bytes);
    /// # Ok(())
    /// # }
    /// ```
    pub fn memory_stats(&self) -> MemoryStats {
        self.core().ledger.memory()
    }

    /// How many wait-list entries the hazard rules have produced so far.
    pub fn hazard_stats(&self) -> HazardStats {
        self.core().stats.hazards()
    }

    /// The leak report, on demand: every buffer of this context the program holds, with
    /// where it was allocated, largest first. The same report is logged at `warn` when the
    /// context's last handle is dropped with buffers still alive.
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let kept = ctx.buffer::<u32>(1000)?;
    /// let report = ctx.live_buffers();
    /// assert_eq!(report.total_bytes(), 4000);
    /// assert!(report.to_string().contains(&format!("4000 bytes allocated at {}", file!())));
    /// # Ok(())
    /// # }
    /// ```
    pub fn live_buffers(&self) -> LiveBuffers {
        self.core().ledger.leaks()
    }

    /// The context's statistics as one line: [`MemoryStats`], the number of buffers held,
    /// and [`HazardStats`]. [`Context::log_stats`] logs it.
    pub fn stats_line(&self) -> String {
        format!(
            "context {}: {}; {} buffers held; {}",
            self.core().id,
            self.memory_stats(),
            self.core().ledger.held(),
            self.hazard_stats()
        )
    }

    /// Logs [`Context::stats_line`] at `info`, target `cl_lifetime::stats`.
    pub fn log_stats(&self) {
        log::info!(target: "cl_lifetime::stats", "{}", self.stats_line());
    }

    /// A buffer of `len` elements that reads as zeros until written.
    ///
    /// Nothing is spent on that when the first command on the buffer writes all of it (a
    /// `write`, `fill` or `copy` of the whole buffer): only a first command that may read
    /// it (a read, a map, a kernel argument, a copy from it, a partial write) is preceded
    /// by a zero fill on its queue, once (the *zeroed before read* rule).
    /// [`Context::buffer_uninitialized`] skips even that.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLength`], [`Error::TooLarge`] past `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, or
    /// [`Error::Cl`] from `clCreateBuffer`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<f32>(256)?;
    /// assert_eq!(buf.len(), 256);
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![0.0; 256]); // reads as zeros
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn buffer<T: Pod>(&self, len: usize) -> Result<ClBuffer<T>> {
        ClBuffer::create(self.core(), len, None, true)
    }

    /// A buffer of `len` elements whose memory is left as the driver hands it out (it may
    /// hold another buffer's old data), for code that writes all of it before any read
    /// and does not want [`Context::buffer`]'s zeroing to run even once. Reading it before
    /// writing reads those bytes: not undefined behaviour (every bit pattern is a valid
    /// [`Pod`]), but data the program never wrote.
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`].
    #[track_caller]
    pub fn buffer_uninitialized<T: Pod>(&self, len: usize) -> Result<ClBuffer<T>> {
        ClBuffer::create(self.core(), len, None, false)
    }

    /// A buffer holding a copy of `data`, copied at creation (`CL_MEM_COPY_HOST_PTR`).
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer_from(&[1u16, 2, 3])?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [1, 2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn buffer_from<T: Pod>(&self, data: &[T]) -> Result<ClBuffer<T>> {
        ClBuffer::create(self.core(), data.len(), Some(data), false)
    }

    /// A zeroed [`HostBuffer`](crate::HostBuffer) of `len` elements: host memory this
    /// context's first device transfers to and from directly (pinned), for
    /// [`After::write_lent`](crate::After::write_lent) and
    /// [`After::read_into`](crate::After::read_into).
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`]: [`Error::ZeroLength`](crate::Error::ZeroLength) for no
    /// bytes (no elements, or elements of zero bytes),
    /// [`Error::TooLarge`](crate::Error::TooLarge) past the device's
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`; or the driver's error making or mapping it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<i32>(128)?;
    /// let mut pinned = ctx.host_buffer::<i32>(128)?;
    /// assert!(pinned.iter().all(|&x| x == 0)); // starts zeroed
    /// pinned.fill(-4);
    /// let pinned = queue.write_lent(&buf, pinned)?.wait()?; // handed back once written
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, *pinned);
    /// # Ok(())
    /// # }
    /// ```
    pub fn host_buffer<T: Pod>(&self, len: usize) -> Result<crate::HostBuffer<T>> {
        crate::HostBuffer::new(self.core(), len)
    }

    /// A closed gate: commands that depend on it wait until it is completed or failed.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when `clCreateUserEvent` fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u8>(16)?;
    /// let gate = ctx.user_event()?;
    /// let fill = queue.after(&[gate.event()]).fill(&buf, 1)?;
    /// gate.complete()?; // the fill may run now
    /// fill.wait()?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [1; 16]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn user_event(&self) -> Result<UserEvent> {
        UserEvent::new(
            self.core().raw(),
            &self.core().gates,
            next_id(),
            std::panic::Location::caller(),
        )
    }

    /// How long a release waits, after `clReleaseMemObject`, for the driver to free the
    /// memory (its destructor callback) before reporting `freed: false`
    /// ([`FREE_GRACE`](crate::FREE_GRACE) unless set). The time spent is in
    /// [`ReleaseReport::free_wait`](crate::ReleaseReport::free_wait); on the reaper thread
    /// a buffer in its grace holds up no other release.
    pub fn free_grace(&self) -> std::time::Duration {
        self.core().free_grace()
    }

    /// Sets [`Context::free_grace`] for every later release of the context's buffers.
    pub fn set_free_grace(&self, grace: std::time::Duration) {
        self.core().set_free_grace(grace);
    }
}

/// Programs.
impl Context {
    /// The program in the `.cl` file `file`, built with `options`, once per context and
    /// contents (a file that changed on disk is built again).
    ///
    /// `file` is looked for as given (relative to the working directory), then in each
    /// folder of `CL_LIFETIME_KERNELS`, then in `kernels/` under the working directory,
    /// then beside the executable and in `kernels/` beside it; `.cl` may be left off.
    ///
    /// # Errors
    ///
    /// [`Error::KernelFileNotFound`] listing every absolute path tried and the working
    /// directory; [`Error::BuildOptions`] for options the library refuses (a bare `-D` or
    /// `-I` with no value); [`Error::Build`] with the device and the full build log.
    pub fn program(&self, file: &str, options: &str) -> Result<Program> {
        let path = files::find_file(file)?;
        let source =
            std::fs::read_to_string(&path).map_err(|source| Error::KernelFileUnreadable {
                path: path.clone(),
                source,
            })?;
        self.cached_program(path, &source, options)
    }

    /// The program built from `source`, named `name` in errors and logs, once per
    /// context, name, options and source: two sources under one name are two programs.
    ///
    /// # Errors
    ///
    /// [`Error::BuildOptions`] as [`Context::program`]; [`Error::Build`] with the device
    /// and the full build log.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Arg;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let source = "__kernel void twice(__global int *x) { x[get_global_id(0)] *= 2; }";
    /// let twice = ctx.program_from_source("twice", source, "")?.kernel("twice")?;
    /// let buf = ctx.buffer_from(&[1, 2, 3, 4])?;
    /// // SAFETY: twice touches element i < 4 of buf, which has 4.
    /// unsafe { queue.launch(&twice, &[4], &[Arg::read_write(&buf)])? };
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [2, 4, 6, 8]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn program_from_source(&self, name: &str, source: &str, options: &str) -> Result<Program> {
        self.cached_program(PathBuf::from(format!("<source>/{name}")), source, options)
    }

    /// One of the library's own programs, embedded in the binary: cached apart from every
    /// user program (the *kernel lookup* rule of [`crate::kernel`]).
    pub(crate) fn own_program(&self, name: &str, source: &str) -> Result<Program> {
        self.cached_program(PathBuf::from(format!("<cl-lifetime>/{name}")), source, "")
    }

    fn cached_program(&self, path: PathBuf, source: &str, options: &str) -> Result<Program> {
        let key = (path, options.to_string(), source.to_string());
        let mut cache = self.shared.programs.lock();
        if let Some(found) = cache.get(&key) {
            return Ok(Program::from_inner(found.clone()));
        }
        let built = ProgramInner::build(self.core(), &key.0, source, options)?;
        self.shared.builds.fetch_add(1, Ordering::Relaxed);
        cache.insert(key, built.clone());
        Ok(Program::from_inner(built))
    }

    /// How many programs this context has built (cache hits do not count).
    pub fn programs_built(&self) -> usize {
        self.shared.builds.load(Ordering::Relaxed)
    }

    /// The raw handle, still owned by this context.
    pub fn as_raw(&self) -> cl_context {
        self.core().raw()
    }
}

/// Handles from other code.
impl Context {
    /// A context for the raw handle `raw`, made by other code (opencl3, a C library):
    /// the library takes its own reference, and the caller keeps theirs. Its devices are
    /// the context's (`CL_CONTEXT_DEVICES`), in that order. Every `Context::from_raw` of
    /// one handle is a context of its own to the library: buffers and queues go with the
    /// `Context` they were made or adopted through.
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_context`.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the context's devices cannot be read; [`Error::NoDevice`] when
    /// it has none, or one of them is not among the platforms' devices ([`Device::all`]).
    pub unsafe fn from_raw(raw: cl_context) -> Result<Context> {
        let ids = crate::ffi::context_devices(raw)?;
        let all = Device::all()?;
        let devices = ids
            .iter()
            .map(|id| all.iter().find(|d| d.id == *id).cloned())
            .collect::<Option<Vec<Device>>>()
            .filter(|devices| !devices.is_empty())
            .ok_or_else(|| Error::NoDevice {
                looked_for: "the devices of an adopted context".to_string(),
                found: all.iter().map(ToString::to_string).collect(),
                hint: "adopt a context with at least one device, of a platform that the \
                       OpenCL loader lists (Device::all)",
            })?;
        // SAFETY: `raw` is valid, as the caller vouches; the reference taken here is the
        // one `ContextCore` releases.
        let owned = unsafe { crate::ffi::OwnedContext::retain(raw) }?;
        Ok(Context::from_core(ContextCore::adopt(
            owned,
            &devices[0],
            &devices,
        )))
    }

    /// A queue for the raw handle `raw`, a command queue of this context made by other
    /// code: the library takes its own reference, and the caller keeps theirs. Its
    /// device, order and profiling are read from the driver. Commands the caller
    /// enqueues on it directly are not known to the library: tell it with
    /// [`After::enqueue_raw`](crate::After::enqueue_raw).
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_command_queue`.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `raw` belongs to another context or device;
    /// [`Error::Cl`] when its properties cannot be read.
    pub(crate) unsafe fn adopt_queue(&self, raw: crate::ffi::cl_command_queue) -> Result<Queue> {
        let info = crate::ffi::queue_info(raw)?;
        if info.context != self.core().raw() {
            return Err(Error::context_mismatch(
                format!("queue {raw:p}"),
                Some(info.context),
                self.core().raw(),
            ));
        }
        let device = self
            .core()
            .devices
            .iter()
            .find(|d| d.id == info.device)
            .ok_or_else(|| {
                Error::context_mismatch(
                    format!("the device {:p} of queue {raw:p}", info.device),
                    None,
                    self.core().raw(),
                )
            })?;
        // SAFETY: `raw` is valid, as the caller vouches; the reference taken here is the
        // one `QueueCore` releases.
        let owned = unsafe { crate::ffi::OwnedQueue::retain(raw) }?;
        Ok(Queue::from_core(Arc::new(QueueCore::adopt(
            self.core(),
            owned,
            device,
            info.out_of_order,
            info.profiling,
            device.is_gpu(),
        ))))
    }
}
