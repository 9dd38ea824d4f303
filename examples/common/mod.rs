//! Pieces the library's examples share: the device header, raw-`opencl3` error mapping,
//! kernel arguments, event release and program handle, and the `spin` kernel's
//! calibration. Each example uses part of it. (The measuring programs of bench/ have
//! their own copy in their harness: each package builds from its own files.)
#![allow(dead_code)]

use std::ffi::CString;
use std::ptr;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cl_lifetime::{Arg, ClStatus, Context, Kernel, Queue};
use opencl3::event as cle;
use opencl3::kernel::{self as clk, Kernel as RawKernel};
use opencl3::program as clp;
use opencl3::types::{cl_context, cl_device_id, cl_event, cl_int, cl_kernel, cl_program};

/// Prints the device, platform and driver the run measures.
pub fn print_device(ctx: &Context) {
    let device = ctx.device();
    println!("device:   {} ({})", device.name(), device.version());
    println!("platform: {}", device.platform_name());
    println!("driver:   {}", device.driver_version());
}

/// Maps a raw status to an error naming the call and the status.
pub fn cl_err(call: &'static str) -> impl Fn(cl_int) -> anyhow::Error {
    move |s| anyhow!("{call} failed: {}", ClStatus(s))
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

/// Releases one reference to `event`, which the caller owns.
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

/// Finds how many iterations make one `spin` launch over `items` work items take about
/// `target`. The first launch also builds the kernel for the device (PoCL compiles at the
/// first enqueue).
pub fn calibrate(
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
        queue
            .launch(spin, &[items], &[Arg::read_write(&buf), Arg::scalar(iters)])?
            .wait()?;
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
