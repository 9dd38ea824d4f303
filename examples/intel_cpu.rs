//! Reproduces, with raw OpenCL calls only, what Intel's OpenCL CPU runtime (2026.2, driver
//! 2026.22.10.0.01_160000) does that the library adapts to, so that each can be told apart
//! from anything the library does. The library only picks the device.
//!
//! ```text
//! make setup    # installs the runtime into .opencl/intel
//! OCL_ICD_VENDORS=$PWD/.opencl/intel/vendors LD_LIBRARY_PATH=$PWD/.opencl/intel/lib \
//!     cargo run --release --example intel_cpu [crash]
//! ```
//!
//! 1. **A failed command reads complete.** A fill behind a user event set to a negative
//!    status does not run (the buffer keeps its contents) and `clWaitForEvents` on it
//!    returns `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`, but its status reads
//!    `CL_COMPLETE` (PoCL: -1, rusticl: the gate's value).
//! 2. **Its profile is made up.** `clGetEventProfilingInfo` of that fill succeeds, with a
//!    start of 0.
//! 3. **Events keep their buffers.** A buffer whose fill has ended is not freed by
//!    `clReleaseMemObject` while the fill's event lives: its destructor callback runs only
//!    once the event is released.
//! 4. **An out-of-order queue crashes at its release** (`crash`, last, since the process
//!    dies): after one of its commands waited on a gate that failed,
//!    `clReleaseCommandQueue` of the out-of-order queue ends in SIGSEGV
//!    (`OutOfOrderCommandQueue::Release`, `OclEvent::RemoveFloatingDependence`); an in-order
//!    queue is released fine.
//!
//! Each prints what it saw; on another driver it prints that driver's answer.

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cl_lifetime::Context;
use opencl3::command_queue::{
    self as clq, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, CL_QUEUE_PROFILING_ENABLE,
};
use opencl3::event::{self as cle, CL_COMPLETE};
use opencl3::memory::{self as clm, CL_MEM_READ_WRITE};
use opencl3::types::{cl_command_queue, cl_event, cl_mem};

mod common;
use common::{cl_err, print_device, raw_queue, release_event};

fn main() -> anyhow::Result<()> {
    let arg = std::env::args().nth(1);
    let crash = arg.as_deref() == Some("crash");
    if arg.as_deref() == Some("crash-event") {
        return two_failed_dependencies(&Context::from_env()?);
    }
    let ctx = Context::from_env()?;
    print_device(&ctx);

    // 1 and 2.
    let queue = raw_queue(&ctx, CL_QUEUE_PROFILING_ENABLE)?;
    let buffer = new_buffer(&ctx)?;
    fill(queue, buffer, 0, &[])?.wait_and_release()?;
    let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
    let gated = fill(queue, buffer, 5, &[gate])?;
    clq::flush(queue).map_err(cl_err("clFlush"))?;
    cle::set_user_event_status(gate, -77).map_err(cl_err("clSetUserEventStatus"))?;
    let waited = cle::wait_for_events(&[gated.0]);
    let status = cle::get_event_info(gated.0, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
        .map_err(cl_err("clGetEventInfo"))?
        .to_int();
    let first = read_first(queue, buffer)?;
    println!(
        "1. a fill behind a gate set to -77: clWaitForEvents {}, status {status}{}, it {}",
        waited.map_or_else(|e| e.to_string(), |()| "CL_SUCCESS".into()),
        if status == CL_COMPLETE {
            " (CL_COMPLETE)"
        } else {
            ""
        },
        if first == 5 { "ran" } else { "did not run" }
    );
    let start = cle::get_event_profiling_info(gated.0, cle::CL_PROFILING_COMMAND_START)
        .map(|v| v.to_ulong());
    let end =
        cle::get_event_profiling_info(gated.0, cle::CL_PROFILING_COMMAND_END).map(|v| v.to_ulong());
    match (start, end) {
        (Ok(start), Ok(end)) => println!(
            "2. its profile: start {} end {} (a duration of {:.0} s)",
            start,
            end,
            end.saturating_sub(start) as f64 / 1e9
        ),
        (Err(e), _) | (_, Err(e)) => {
            println!("2. its profile: {}", cl_err("clGetEventProfilingInfo")(e))
        }
    }
    gated.wait_and_release()?;
    release_event(gate)?;

    // 3.
    let kept = new_buffer(&ctx)?;
    let ended = fill(queue, kept, 1, &[])?;
    cle::wait_for_events(&[ended.0]).map_err(cl_err("clWaitForEvents"))?;
    static FREED: AtomicBool = AtomicBool::new(false);
    extern "C" fn on_freed(_: cl_mem, _: *mut std::ffi::c_void) {
        FREED.store(true, Ordering::SeqCst);
    }
    // SAFETY: `kept` is live; the callback only stores a flag.
    unsafe { clm::set_mem_object_destructor_callback(kept, on_freed, ptr::null_mut()) }
        .map_err(cl_err("clSetMemObjectDestructorCallback"))?;
    // SAFETY: its one command has ended; not used again.
    unsafe { clm::release_mem_object(kept) }.map_err(cl_err("clReleaseMemObject"))?;
    let freed_with_event = wait_for(&FREED, Duration::from_millis(500));
    release_event(ended.take())?;
    let start = Instant::now();
    let freed_after = wait_for(&FREED, Duration::from_secs(2));
    println!(
        "3. a released buffer whose fill has ended, the fill's event still held: {}; \
         the event released: {}",
        if freed_with_event {
            "freed"
        } else {
            "not freed after 500 ms"
        },
        if freed_after {
            format!("freed {:.2?} later", start.elapsed())
        } else {
            "still not freed".into()
        }
    );

    // SAFETY: every command on them has ended.
    unsafe { clm::release_mem_object(buffer) }.map_err(cl_err("clReleaseMemObject"))?;
    // SAFETY: as above; not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;

    // 4.
    for out_of_order in [false, crash] {
        if !out_of_order && !crash {
            println!("4. (run with `crash` to release an out-of-order queue after a failure)");
        }
        let kind = if out_of_order {
            "an out-of-order"
        } else {
            "an in-order"
        };
        let flags = if out_of_order {
            CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE
        } else {
            0
        };
        let queue = raw_queue(&ctx, flags)?;
        let buffer = new_buffer(&ctx)?;
        let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
        let gated = fill(queue, buffer, 2, &[gate])?;
        clq::flush(queue).map_err(cl_err("clFlush"))?;
        cle::set_user_event_status(gate, -5).map_err(cl_err("clSetUserEventStatus"))?;
        gated.wait_and_release()?;
        release_event(gate)?;
        println!("4. releasing {kind} queue one of whose commands waited on a failed gate ...");
        // SAFETY: its one command has ended; not used again.
        unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
        println!("   released");
        // SAFETY: as above.
        unsafe { clm::release_mem_object(buffer) }.map_err(cl_err("clReleaseMemObject"))?;
    }
    println!("5. (run with `crash-event` for two dependencies of one command failing together)");
    Ok(())
}

/// 5 (`crash-event`): a fill behind a gate on queue A, a copy of its buffer on queue B
/// behind the fill, and a fill on queue A whose wait list holds the copy and the gate. The
/// gate fails; the copy's event, still retained, is freed by the driver: the next
/// `clGetEventInfo` or `clReleaseEvent` of it reads freed memory (SIGSEGV). With the gate
/// alone in the last wait list, or the copy alone, nothing happens.
fn two_failed_dependencies(ctx: &Context) -> anyhow::Result<()> {
    print_device(ctx);
    let (a, b) = (raw_queue(ctx, 0)?, raw_queue(ctx, 0)?);
    let (x, y) = (new_buffer(ctx)?, new_buffer(ctx)?);
    for round in 1..=100 {
        let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
        let first = fill(a, x, 1, &[gate])?;
        clq::flush(a).map_err(cl_err("clFlush"))?;
        // SAFETY: both buffers are live and 4 KiB; the wait list holds a live event.
        let copy = unsafe { clq::enqueue_copy_buffer(b, x, y, 0, 0, 4096, 1, &first.0) }
            .map(Owned)
            .map_err(cl_err("clEnqueueCopyBuffer"))?;
        clq::flush(b).map_err(cl_err("clFlush"))?;
        let last = fill(a, y, 2, &[copy.0, gate])?;
        cle::set_user_event_status(gate, -59).map_err(cl_err("clSetUserEventStatus"))?;
        // The library would read the copy's status now: this is where it crashed.
        let status = cle::get_event_info(copy.0, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
            .map_err(cl_err("clGetEventInfo"))?
            .to_int();
        if round == 1 {
            println!("5. the copy, both its dependencies failed: status {status}");
        }
        last.wait_and_release()?;
        drop((first, copy));
        release_event(gate)?;
    }
    println!("   100 rounds, no crash");
    Ok(())
}

/// A command's event, owned.
struct Owned(cl_event);

impl Owned {
    fn wait_and_release(self) -> anyhow::Result<()> {
        let _ = cle::wait_for_events(&[self.0]);
        release_event(self.take())
    }

    fn take(self) -> cl_event {
        let raw = self.0;
        std::mem::forget(self);
        raw
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = release_event(self.0);
    }
}

fn new_buffer(ctx: &Context) -> anyhow::Result<cl_mem> {
    // SAFETY: no host pointer.
    unsafe { clm::create_buffer(ctx.as_raw(), CL_MEM_READ_WRITE, 4096, ptr::null_mut()) }
        .map_err(cl_err("clCreateBuffer"))
}

/// A fill of the whole 4 KiB with `value` behind `wait`.
fn fill(
    queue: cl_command_queue,
    buffer: cl_mem,
    value: u32,
    wait: &[cl_event],
) -> anyhow::Result<Owned> {
    let wait_ptr = if wait.is_empty() {
        ptr::null()
    } else {
        wait.as_ptr()
    };
    // SAFETY: `queue` and `buffer` are live; the pattern is 4 bytes copied before the call
    // returns; every event of `wait` is live.
    unsafe {
        clq::enqueue_fill_buffer(
            queue,
            buffer,
            (&raw const value).cast(),
            4,
            0,
            4096,
            wait.len() as u32,
            wait_ptr,
        )
    }
    .map(Owned)
    .map_err(cl_err("clEnqueueFillBuffer"))
}

/// The buffer's first `u32`, by a blocking read.
fn read_first(queue: cl_command_queue, buffer: cl_mem) -> anyhow::Result<u32> {
    let mut out = 0u32;
    // SAFETY: a blocking read of 4 bytes into `out`, which outlives the call.
    let event = unsafe {
        clq::enqueue_read_buffer(
            queue,
            buffer,
            clq::CL_BLOCKING,
            0,
            4,
            (&raw mut out).cast(),
            0,
            ptr::null(),
        )
    }
    .map_err(cl_err("clEnqueueReadBuffer"))?;
    release_event(event)?;
    Ok(out)
}

fn wait_for(flag: &AtomicBool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !flag.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    flag.load(Ordering::SeqCst)
}
