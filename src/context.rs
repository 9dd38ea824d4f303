//! The context: one device, its queues, its buffers and its program cache.
//!
//! A [`Context`] is a cheap handle (an `Arc`); queues, buffers, programs and kernels each
//! keep the context alive, so it is released only after the last of them.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use opencl3::context::context as cl;
use opencl3::types::cl_context;

use crate::buffer::{ClBuffer, Pod};
use crate::device::Device;
use crate::error::{ClStatus, Error, Result};
use crate::event::{OpenGates, UserEvent};
use crate::program::{self, Program, ProgramInner};
use crate::queue::{Queue, QueueInner};
use crate::reaper::Reaper;
use crate::stats::{HazardStats, Ledger, MemoryStats, Stats};

/// Gives each context, queue and buffer an ID unique for the life of the process.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A program is built once per context, file and options.
/// Program rule 2: a program is cached under its name, options and source.
type ProgramKey = (PathBuf, String, String);

pub(crate) struct ContextInner {
    pub(crate) raw: cl_context,
    pub(crate) id: u64,
    /// The first of `devices`: the default for queues.
    pub(crate) device: Device,
    pub(crate) devices: Vec<Device>,
    /// The smallest `CL_DEVICE_MAX_MEM_ALLOC_SIZE` of `devices`.
    pub(crate) max_alloc: u64,
    pub(crate) stats: Stats,
    pub(crate) ledger: Ledger,
    pub(crate) reaper: Reaper,
    /// The context's user events that have not been set.
    pub(crate) gates: Arc<OpenGates>,
    /// How long a release waits for the driver to free the memory, in nanoseconds
    /// ([`Context::set_free_grace`]).
    free_grace: AtomicU64,
    programs: Mutex<HashMap<ProgramKey, Arc<ProgramInner>>>,
    builds: AtomicUsize,
}

impl ContextInner {
    pub(crate) fn free_grace(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.free_grace.load(Ordering::Relaxed))
    }
}

// SAFETY: a cl_context may be used from any thread (OpenCL 3.0 appendix A.2: every call
// is thread-safe except clSetKernelArg); the program cache is behind a Mutex.
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Programs hold the context internally; drop them first for a tidy order.
        self.programs
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // SAFETY: `raw` came from clCreateContext and is released once, here; every queue,
        // buffer and program of the library holds an Arc to this struct, so none is left.
        if let Err(status) = unsafe { cl::release_context(self.raw) } {
            log::error!(target: "cl_lifetime::context", "clReleaseContext failed: {}", ClStatus(status));
        }
    }
}

/// An OpenCL context on one device.
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
    pub(crate) inner: Arc<ContextInner>,
    /// Shared by the user's clones only (queues and buffers hold `inner`): its drop is the
    /// context's end from the user's side.
    _handle: Arc<UserHandle>,
}

/// `a, b` for a list of code locations.
pub(crate) fn sites(sites: &[&std::panic::Location<'_>]) -> String {
    let names: Vec<String> = sites.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// Dropped with the last user handle of a context: finishes the deferred releases and
/// reports buffers still alive.
struct UserHandle(Arc<ContextInner>);

impl Drop for UserHandle {
    fn drop(&mut self) {
        let gates = self.0.gates.count();
        if gates == 0 {
            self.0.reaper.wait_idle();
        } else {
            // A deferred release may be behind a gate the caller still holds: waiting here
            // could be forever. The reaper goes on freeing on its own thread.
            log::info!(
                target: "cl_lifetime::context",
                "context dropped with {gates} user events not set (created at {}): \
                 deferred releases finish on the library's thread",
                sites(&self.0.gates.sites())
            );
        }
        crate::event::graveyard::sweep();
        let leaks = self.0.ledger.leaks();
        if !leaks.is_empty() {
            let total: u64 = leaks.iter().map(|l| l.0).sum();
            log::warn!(
                target: "cl_lifetime::context",
                "context dropped with {} live buffers ({total} bytes); they keep it alive:",
                leaks.len()
            );
            for (bytes, site) in leaks {
                log::warn!(target: "cl_lifetime::context", "  {bytes} bytes allocated at {site}");
            }
        }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.device)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context on the device `CL_LIFETIME_DEVICE` names, or the default device.
    ///
    /// # Errors
    ///
    /// [`Error::NoLoader`] or [`Error::NoDevice`] as [`Device::select`];
    /// [`Error::Cl`] when `clCreateContext` fails.
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
        let Some(first) = devices.first() else {
            return Err(Error::NoDevice {
                looked_for: "a context over no devices".to_string(),
                found: Vec::new(),
                hint: crate::error::INSTALL_HINT,
            });
        };
        let ids: Vec<_> = devices.iter().map(|d| d.id).collect();
        let raw = cl::create_context(&ids, ptr::null(), None, ptr::null_mut())
            .map_err(|s| Error::cl("clCreateContext", s))?;
        log::debug!(target: "cl_lifetime::context", "context on {devices:?}");
        let inner = Arc::new(ContextInner {
            raw,
            id: next_id(),
            device: first.clone(),
            devices: devices.to_vec(),
            max_alloc: devices
                .iter()
                .map(Device::max_alloc_bytes)
                .min()
                .unwrap_or(0),
            stats: Stats::default(),
            ledger: Ledger::default(),
            reaper: Reaper::default(),
            gates: Arc::default(),
            free_grace: AtomicU64::new(crate::buffer::FREE_GRACE.as_nanos() as u64),
            programs: Mutex::new(HashMap::new()),
            builds: AtomicUsize::new(0),
        });
        Ok(Context {
            _handle: Arc::new(UserHandle(inner.clone())),
            inner,
        })
    }

    /// The first device: the one [`Context::queue`] uses.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// Every device of the context.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// A new in-order command queue on the first device.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the queue cannot be created.
    pub fn queue(&self) -> Result<Queue> {
        QueueInner::create(&self.inner, &self.inner.device, false)
    }

    /// A new out-of-order command queue on the first device.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_QUEUE_PROPERTIES` when the device has none.
    pub fn out_of_order_queue(&self) -> Result<Queue> {
        QueueInner::create(&self.inner, &self.inner.device, true)
    }

    /// A new command queue on `device`, one of the context's devices.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `device` is not in the context; [`Error::Cl`] as
    /// [`Context::queue`] and [`Context::out_of_order_queue`].
    pub fn queue_on(&self, device: &Device, out_of_order: bool) -> Result<Queue> {
        let device = self
            .inner
            .devices
            .iter()
            .find(|d| d.id == device.id)
            .ok_or(Error::ContextMismatch)?;
        QueueInner::create(&self.inner, device, out_of_order)
    }

    /// Blocks until every deferred release submitted so far is done: the memory is freed.
    pub fn wait_deferred(&self) {
        self.inner.reaper.wait_idle();
    }

    /// Live, pending-release, pooled and peak bytes, and allocation counts.
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.ledger.memory()
    }

    /// How many wait-list entries the hazard rules have produced so far.
    pub fn hazard_stats(&self) -> HazardStats {
        self.inner.stats.hazards()
    }

    /// A buffer of `len` elements whose contents are undefined until written.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLength`], [`Error::TooLarge`] past `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, or
    /// [`Error::Cl`] from `clCreateBuffer`.
    #[track_caller]
    pub fn buffer<T: Pod>(&self, len: usize) -> Result<ClBuffer<T>> {
        ClBuffer::create(&self.inner, len, None)
    }

    /// A buffer holding a copy of `data`, copied at creation (`CL_MEM_COPY_HOST_PTR`).
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`].
    #[track_caller]
    pub fn buffer_from<T: Pod>(&self, data: &[T]) -> Result<ClBuffer<T>> {
        ClBuffer::create(&self.inner, data.len(), Some(data))
    }

    /// A closed gate: commands that depend on it wait until it is completed or failed.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when `clCreateUserEvent` fails.
    #[track_caller]
    pub fn user_event(&self) -> Result<UserEvent> {
        UserEvent::new(
            self.inner.raw,
            &self.inner.gates,
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
        self.inner.free_grace()
    }

    /// Sets [`Context::free_grace`] for every later release of the context's buffers.
    pub fn set_free_grace(&self, grace: std::time::Duration) {
        let nanos = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        self.inner.free_grace.store(nanos, Ordering::Relaxed);
    }

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
        let path = program::find_file(file)?;
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
    pub fn program_from_source(&self, name: &str, source: &str, options: &str) -> Result<Program> {
        self.cached_program(PathBuf::from(format!("<source>/{name}")), source, options)
    }

    /// One of the library's own programs, embedded in the binary: cached apart from every
    /// user program (program rule 1).
    pub(crate) fn own_program(&self, name: &str, source: &str) -> Result<Program> {
        self.cached_program(PathBuf::from(format!("<cl-lifetime>/{name}")), source, "")
    }

    fn cached_program(&self, path: PathBuf, source: &str, options: &str) -> Result<Program> {
        let key = (path, options.to_string(), source.to_string());
        let mut cache = self
            .inner
            .programs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = cache.get(&key) {
            return Ok(Program::from_inner(found.clone()));
        }
        let built = ProgramInner::build(&self.inner, &key.0, source, options)?;
        self.inner.builds.fetch_add(1, Ordering::Relaxed);
        cache.insert(key, built.clone());
        Ok(Program::from_inner(built))
    }

    /// How many programs this context has built (cache hits do not count).
    pub fn programs_built(&self) -> usize {
        self.inner.builds.load(Ordering::Relaxed)
    }

    /// The raw handle, still owned by this context.
    pub fn as_raw(&self) -> cl_context {
        self.inner.raw
    }
}
