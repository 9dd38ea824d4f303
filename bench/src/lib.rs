//! What the measuring programs of cl-lifetime share (the examples of this package:
//! `compare`, `enqueue_cost`, `alloc_cost`, `release_stages`, `wake_parts`): raw-`opencl3` pieces (error
//! mapping, the device header, kernel arguments and one-dimensional launches, a program
//! handle, a user-event gate, the raw side's event keeping), the `spin` calibration, and
//! the statistics and interleaved repetitions of their method ([`stats`]). Each example
//! uses part of it.
//!
//! The library's own examples keep their copy of the few pieces they use
//! (`examples/common/mod.rs`): `cargo package` packages both members of the workspace,
//! and each must build from its own files.

use std::ffi::CString;
use std::ptr;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cl_lifetime::{Arg, ClStatus, Context, Kernel, Queue};
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::kernel::{self as clk, Kernel as RawKernel};
use opencl3::program as clp;
use opencl3::types::{
    cl_command_queue, cl_context, cl_device_id, cl_event, cl_int, cl_kernel, cl_program,
};

pub mod stats;
pub use stats::{Stats, Variant, interleave, interleave_with, median};

/// Maps a raw status to an error naming the call and the status.
pub fn cl_err(call: &'static str) -> impl Fn(cl_int) -> anyhow::Error {
    move |s| anyhow!("{call} failed: {}", ClStatus(s))
}

/// Prints the device, platform and driver the run measures.
pub fn print_device(ctx: &Context) {
    let device = ctx.device();
    println!("device:   {} ({})", device.name(), device.version());
    println!("platform: {}", device.platform_name());
    println!("driver:   {}", device.driver_version());
}

/// `clSetKernelArg` of argument `index` to the plain value `value` (a `cl_mem` handle or a
/// scalar), which OpenCL copies before returning.
///
/// # Safety
///
/// Argument `index` of `kernel` must be declared with `T`'s type (a `__global` pointer for
/// a live `cl_mem`, `uint` for a `u32`), and no other thread may set `kernel`'s arguments
/// meanwhile (OpenCL 3.0 appendix A.2).
pub unsafe fn set_arg<T: Copy>(kernel: cl_kernel, index: u32, value: &T) -> anyhow::Result<()> {
    // SAFETY: the caller vouches for the argument's type and for exclusive use of the
    // kernel; `value` is valid for `size_of::<T>()` bytes during the call.
    unsafe { clk::set_kernel_arg(kernel, index, size_of::<T>(), ptr::from_ref(value).cast()) }
        .map_err(cl_err("clSetKernelArg"))
}

/// `clEnqueueNDRangeKernel` over `global` work items in one dimension, waiting on `wait`;
/// the caller owns the returned event.
///
/// # Safety
///
/// Every argument of `kernel` must be set, its buffers must hold what `global` work items
/// touch, and `wait` must hold live events.
#[inline]
pub unsafe fn enqueue_1d(
    queue: cl_command_queue,
    kernel: cl_kernel,
    global: usize,
    wait: &[cl_event],
) -> anyhow::Result<cl_event> {
    let global = [global];
    let wait_ptr = if wait.is_empty() {
        ptr::null()
    } else {
        wait.as_ptr()
    };
    // SAFETY: the caller vouches for the arguments, the buffers and the wait list; `global`
    // has one entry for work_dim 1; an empty wait list goes as a null pointer.
    unsafe {
        clq::enqueue_nd_range_kernel(
            queue,
            kernel,
            1,
            ptr::null(),
            global.as_ptr(),
            ptr::null(),
            wait.len() as u32,
            wait_ptr,
        )
    }
    .map_err(cl_err("clEnqueueNDRangeKernel"))
}

/// When raw code releases the events of its launches: the measuring examples' baseline
/// releases each at once; the others reproduce what the library's record does with them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// At once.
    No,
    /// After the batch is drained, off the clock.
    Drained,
    /// During the next batch's timed loop, one per launch (ended by then).
    Late,
}

/// The raw side's events of one batch of launches, kept as [`Keep`] says.
pub struct KeptEvents {
    keep: Keep,
    kept: Vec<cl_event>,
    /// `Keep::Late`: the previous batch's events, released one per launch.
    late: Vec<cl_event>,
}

impl KeptEvents {
    /// A batch; with `Keep::Late`, `previous` is what the last batch kept.
    pub fn new(keep: Keep, previous: Vec<cl_event>) -> KeptEvents {
        KeptEvents {
            keep,
            kept: Vec::new(),
            late: previous,
        }
    }

    /// The launch code is done with `event` (it owns its one reference): released now or
    /// kept; and with `Keep::Late`, one of the previous batch's events released.
    #[inline]
    pub fn done(&mut self, event: cl_event) -> anyhow::Result<()> {
        match self.keep {
            Keep::No => release_event(event)?,
            Keep::Drained | Keep::Late => self.kept.push(event),
        }
        self.late.pop().map_or(Ok(()), release_event)
    }

    /// The end of the timed loop: the previous batch's events not released yet go now.
    pub fn end_loop(&mut self) -> anyhow::Result<()> {
        self.late.drain(..).try_for_each(release_event)
    }

    /// After the drain, off the clock: `Keep::Drained` releases what it kept; `Keep::Late`
    /// returns it for the next batch.
    pub fn after_drain(&mut self) -> anyhow::Result<Vec<cl_event>> {
        self.end_loop()?;
        let kept = std::mem::take(&mut self.kept);
        match self.keep {
            Keep::Late => Ok(kept),
            Keep::No | Keep::Drained => {
                kept.into_iter().try_for_each(release_event)?;
                Ok(Vec::new())
            }
        }
    }
}

impl Drop for KeptEvents {
    /// A batch cut short by an error still gives its events back.
    fn drop(&mut self) {
        for event in self.kept.drain(..).chain(self.late.drain(..)) {
            let _ = release_event(event);
        }
    }
}

/// Releases one reference to `event`, which the caller owns.
// A safe function on a raw handle, as the measuring programs call it on events they own
// (clippy asks a library's public functions on raw pointers to be `unsafe`).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn release_event(event: cl_event) -> anyhow::Result<()> {
    // SAFETY: `event` came from an enqueue or clCreateUserEvent of the caller, which owns
    // its one reference and gives it up here, exactly once.
    unsafe { cle::release_event(event) }.map_err(cl_err("clReleaseEvent"))
}

/// A raw program, released on drop (opencl3's `Program` cannot wrap a handle).
pub struct ProgramHandle(pub cl_program);

impl ProgramHandle {
    /// `clCreateProgramWithSource` + `clBuildProgram` for `device`.
    pub fn build(context: cl_context, device: cl_device_id, source: &str) -> anyhow::Result<Self> {
        let program = ProgramHandle(
            clp::create_program_with_source(context, &[source])
                .map_err(cl_err("clCreateProgramWithSource"))?,
        );
        clp::build_program(
            program.0,
            &[device],
            &CString::default(),
            None,
            ptr::null_mut(),
        )
        .map_err(cl_err("clBuildProgram"))?;
        Ok(program)
    }

    /// A new kernel object for `name`.
    pub fn kernel(&self, name: &str) -> anyhow::Result<RawKernel> {
        let name = CString::new(name)?;
        Ok(RawKernel::new(
            clk::create_kernel(self.0, &name).map_err(cl_err("clCreateKernel"))?,
        ))
    }
}

impl Drop for ProgramHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from clCreateProgramWithSource and is released once, here;
        // the kernels made from it hold their own references.
        if let Err(s) = unsafe { clp::release_program(self.0) } {
            log::error!("clReleaseProgram failed: {}", ClStatus(s));
        }
    }
}

/// A raw user event that holds launches back. Dropping it opens it (if still closed, so
/// that nothing waits forever after an error) and releases it.
pub struct RawGate {
    /// The user event, for the wait lists of the launches it holds back.
    pub event: cl_event,
    open: bool,
}

impl RawGate {
    /// A closed gate in `context`.
    pub fn new(context: cl_context) -> anyhow::Result<RawGate> {
        let event = cle::create_user_event(context).map_err(cl_err("clCreateUserEvent"))?;
        Ok(RawGate { event, open: false })
    }

    /// Opens the gate: the launches waiting on it may run.
    pub fn open(&mut self) -> anyhow::Result<()> {
        self.open = true;
        cle::set_user_event_status(self.event, cle::CL_COMPLETE)
            .map_err(cl_err("clSetUserEventStatus"))
    }
}

impl Drop for RawGate {
    fn drop(&mut self) {
        if !self.open {
            if let Err(e) = self.open() {
                log::error!("opening a gate: {e}");
            }
        }
        if let Err(e) = release_event(self.event) {
            log::error!("{e}");
        }
    }
}

/// Finds how many iterations make one `spin` launch over `items` work items take about
/// `target`. The first launch also builds the kernel for the device (PoCL compiles at the
/// first enqueue).
///
/// # Safety
///
/// `spin` is the `spin` kernel of `busy.cl` (or one that touches only element
/// `get_global_id(0)` of its one buffer argument), which it is launched as.
pub unsafe fn calibrate(
    ctx: &Context,
    queue: &Queue,
    spin: &Kernel,
    items: usize,
    target: Duration,
) -> anyhow::Result<u32> {
    let buf = ctx.buffer::<f32>(items)?;
    queue.fill(&buf, 1.0)?;
    let time = |iters: u32| -> anyhow::Result<Duration> {
        let start = Instant::now();
        let args = [Arg::read_write(&buf), Arg::scalar(iters)];
        // SAFETY: `spin` touches element i < items of buf, which has items (the caller's
        // contract).
        unsafe { queue.launch(spin, &[items], &args)? }.wait()?;
        Ok(start.elapsed())
    };
    let scale = |iters: u32, took: Duration| -> u32 {
        let took = took.max(Duration::from_micros(10));
        let scaled = f64::from(iters) * target.as_secs_f64() / took.as_secs_f64();
        scaled.clamp(1.0, f64::from(u32::MAX)) as u32
    };
    time(1)?; // warm-up
    let mut iters: u32 = 256;
    let estimate = loop {
        let took = time(iters)?.max(Duration::from_micros(10));
        if took >= target / 8 || iters == u32::MAX {
            break scale(iters, took);
        }
        let factor = ((target / 6).as_secs_f64() / took.as_secs_f64()).clamp(2.0, 64.0);
        iters = (f64::from(iters) * factor).min(f64::from(u32::MAX)) as u32;
    };
    // Refine at full length, on the median of three launches: a short probe on a busy
    // host (PoCL shares its cores with everything else) can be far off.
    let mut took = [time(estimate)?, time(estimate)?, time(estimate)?];
    took.sort();
    Ok(scale(estimate, took[1]))
}

/// A buffer size in KiB or MiB.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
