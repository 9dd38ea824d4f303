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
use crate::event::UserEvent;
use crate::program::{self, Program, ProgramInner};
use crate::queue::{Queue, QueueInner};

/// Gives each context, queue and buffer an ID unique for the life of the process.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A program is built once per context, file and options.
type ProgramKey = (PathBuf, String);

pub(crate) struct ContextInner {
    pub(crate) raw: cl_context,
    pub(crate) id: u64,
    pub(crate) device: Device,
    programs: Mutex<HashMap<ProgramKey, Arc<ProgramInner>>>,
    builds: AtomicUsize,
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
        let raw = cl::create_context(&[device.id], ptr::null(), None, ptr::null_mut())
            .map_err(|s| Error::cl("clCreateContext", s))?;
        log::debug!(target: "cl_lifetime::context", "context on {device}");
        Ok(Context {
            inner: Arc::new(ContextInner {
                raw,
                id: next_id(),
                device: device.clone(),
                programs: Mutex::new(HashMap::new()),
                builds: AtomicUsize::new(0),
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// A new in-order command queue.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the queue cannot be created.
    pub fn queue(&self) -> Result<Queue> {
        QueueInner::create(&self.inner, false)
    }

    /// A new out-of-order command queue.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_QUEUE_PROPERTIES` when the device has none.
    pub fn out_of_order_queue(&self) -> Result<Queue> {
        QueueInner::create(&self.inner, true)
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
    pub fn user_event(&self) -> Result<UserEvent> {
        UserEvent::new(self.inner.raw)
    }

    /// The program in the `.cl` file `file`, built with `options`, once per context.
    ///
    /// `file` is a path, or a name looked up in the folders of `CL_LIFETIME_KERNELS` and
    /// then in the crate's own `kernels/` folder (`.cl` may be left off).
    ///
    /// # Errors
    ///
    /// [`Error::KernelFileNotFound`] listing where it looked; [`Error::Build`] with the
    /// device and the full build log.
    pub fn program(&self, file: &str, options: &str) -> Result<Program> {
        let path = program::find_file(file)?;
        let source =
            std::fs::read_to_string(&path).map_err(|source| Error::KernelFileUnreadable {
                path: path.clone(),
                source,
            })?;
        self.cached_program(path, &source, options)
    }

    /// The program built from `source`, cached under `name` and `options`. This is how the
    /// library's own kernels are embedded in the binary and still built at run time.
    ///
    /// # Errors
    ///
    /// [`Error::Build`] with the device and the full build log.
    pub fn program_from_source(&self, name: &str, source: &str, options: &str) -> Result<Program> {
        self.cached_program(PathBuf::from(format!("<embedded>/{name}")), source, options)
    }

    fn cached_program(&self, path: PathBuf, source: &str, options: &str) -> Result<Program> {
        let key = (path, options.to_string());
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
