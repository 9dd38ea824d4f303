//! Raw-`opencl3` pieces the measuring examples share: error mapping, a program handle,
//! a user-event gate, and the `spin` calibration. Each example uses part of it.
#![allow(dead_code)]

use std::ffi::CString;
use std::ptr;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cl_lifetime::{Arg, ClStatus, Context, Kernel, Queue};
use opencl3::event as cle;
use opencl3::kernel::{self as clk, Kernel as RawKernel};
use opencl3::program as clp;
use opencl3::types::{cl_context, cl_device_id, cl_event, cl_int, cl_program};

/// Maps a raw status to an error naming the call and the status.
pub fn cl_err(call: &'static str) -> impl Fn(cl_int) -> anyhow::Error {
    move |s| anyhow!("{call} failed: {}", ClStatus(s))
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

/// A raw user event that holds launches back. Dropping it opens it (if still closed, so
/// that nothing waits forever after an error) and releases it.
pub struct RawGate {
    pub event: cl_event,
    open: bool,
}

impl RawGate {
    pub fn new(context: cl_context) -> anyhow::Result<RawGate> {
        let event = cle::create_user_event(context).map_err(cl_err("clCreateUserEvent"))?;
        Ok(RawGate { event, open: false })
    }

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
