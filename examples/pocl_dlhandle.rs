//! Reproduces, with raw OpenCL calls only, the abort of PoCL 5 and 6 in
//! `pocl_release_dlhandle_cache` (`Assertion 'found->ref_count > 0' failed`), so that it can
//! be told apart from anything this library does. Nothing here fails, nothing is released
//! early, and no cl-lifetime command is enqueued: the library only picks the device.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example pocl_dlhandle [ROUNDS]
//! ```
//!
//! The trigger is one kernel launched on two queues at once, with one local size and global
//! sizes that keep rising. PoCL's CPU driver keeps one compiled work-group function per
//! kernel, local size, global offset class and largest grid width, and counts the commands
//! that use each. A command takes a reference on the variant it runs; when it ends, PoCL 5
//! and 6 look the variant up again by kernel and local size only and drop a reference on the
//! first match, which is the newest variant, not necessarily the one the command took. With
//! two commands of different widths in flight, the older one's end drops the newer one's
//! reference and the newer one's end then finds the count at zero. PoCL 7.0 fixed it
//! (commit c9ac4c0, "fix dlhandle cache": the command now keeps the variant it took).
//! PoCL 3.1 took two references per command and never reaches zero.
//!
//! On an affected PoCL this aborts within the first rounds; elsewhere it prints `ok`.

use std::ptr;

use anyhow::Context as _;
use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::memory::{self as clm, CL_MEM_READ_WRITE};
use opencl3::types::{cl_event, cl_mem};

mod common;
use common::{ProgramHandle, cl_err, print_device, raw_queue, release_event, set_arg};

/// Work items per work group, the same for every launch.
const LOCAL: usize = 64;
/// Iterations of `spin` per work item: enough that the two launches of a round overlap.
const ITERS: u32 = 20_000;

fn main() -> anyhow::Result<()> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().context("ROUNDS must be a number")?,
        None => 100,
    };
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let device = ctx.device().as_raw();
    let source = std::fs::read_to_string(ctx.program("busy.cl", "")?.file())?;
    let program = ProgramHandle::build(ctx.as_raw(), device, &source)?;
    let spin = program.kernel("spin")?;
    let queues = [raw_queue(&ctx, 0)?, raw_queue(&ctx, 0)?];
    for round in 1..=rounds {
        let mut events: Vec<cl_event> = Vec::new();
        let mut buffers: Vec<cl_mem> = Vec::new();
        // Two launches, the second one group wider than the first, both wider than any
        // launch of an earlier round.
        for (q, groups) in [2 * round, 2 * round + 1].into_iter().enumerate() {
            let global = groups * LOCAL;
            // SAFETY: no host pointer; a few MiB at most.
            let buffer = unsafe {
                clm::create_buffer(
                    ctx.as_raw(),
                    CL_MEM_READ_WRITE,
                    global * size_of::<f32>(),
                    ptr::null_mut(),
                )
            }
            .map_err(cl_err("clCreateBuffer"))?;
            buffers.push(buffer);
            // SAFETY: `spin(__global float *data, uint iters)`: argument 0 is a buffer of
            // `global` floats, argument 1 a uint; the kernel is used by this thread only.
            unsafe {
                set_arg(spin.get(), 0, &buffer)?;
                set_arg(spin.get(), 1, &ITERS)?;
            }
            let mut event: cl_event = ptr::null_mut();
            // SAFETY: both arguments are set; the buffer holds `global` floats; one
            // dimension, `global` a multiple of `LOCAL`; no wait list; `event` receives the
            // command's event, released below.
            unsafe {
                clq::enqueue_nd_range_kernel(
                    queues[q],
                    spin.get(),
                    1,
                    ptr::null(),
                    [global].as_ptr(),
                    [LOCAL].as_ptr(),
                    0,
                    ptr::null(),
                )
            }
            .map(|e| event = e)
            .map_err(cl_err("clEnqueueNDRangeKernel"))?;
            events.push(event);
            clq::flush(queues[q]).map_err(cl_err("clFlush"))?;
        }
        opencl3::event::wait_for_events(&events).map_err(cl_err("clWaitForEvents"))?;
        for event in events {
            release_event(event)?;
        }
        for buffer in buffers {
            // SAFETY: every command on it has ended (waited for above).
            unsafe { clm::release_mem_object(buffer) }.map_err(cl_err("clReleaseMemObject"))?;
        }
        if round % 10 == 0 {
            println!("round {round}");
        }
    }
    for queue in queues {
        // SAFETY: every command on it has ended; the queue is not used again.
        unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    }
    println!("ok: {rounds} rounds of one kernel on two queues at rising sizes");
    Ok(())
}
