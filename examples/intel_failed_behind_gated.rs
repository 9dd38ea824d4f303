//! Reproduces, with raw OpenCL calls only, how Intel's OpenCL CPU runtime (2026.2, driver
//! 2026.22.10.0.01_160000) keeps the memory of a command that failed ahead of its turn
//! (design trap "Intel's CPU runtime keeps a failed command's buffers until its turn"), so
//! that it can be told apart from anything this library does. No cl-lifetime command is
//! enqueued: the library only picks the device.
//!
//! ```text
//! OCL_ICD_VENDORS=$PWD/.opencl/intel/vendors LD_LIBRARY_PATH=$PWD/.opencl/intel/lib \
//!     CL_LIFETIME_DEVICE=intel cargo run --release --example intel_failed_behind_gated
//! ```
//!
//! On one in-order queue: a fill of a buffer behind a user event (the *first* gate, left
//! closed), then a fill of another buffer behind a second user event, which fails. The
//! runtime ends the second fill at once, ahead of its turn: `clWaitForEvents` on it returns
//! `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` and its status reads `CL_COMPLETE`, while
//! the first fill is still queued. The program releases the second fill's event and then its
//! buffer, whose reference count reads 1: the buffer's destructor callback does not run
//! while the first gate is closed, and runs as soon as it is set. With nothing ahead of the
//! failed fill on its queue, with the gated fill behind it instead, or on another queue, the
//! buffer is freed at once.
//!
//! Each case runs in a child process (this program again): PoCL 3.1 aborts in the second
//! case (design trap "PoCL's failed command behind a pending one"), and the other cases
//! still run.

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::memory as clm;
use opencl3::types::{cl_event, cl_int, cl_mem};

mod common;
use common::{cl_err, gated_fill, print_device, raw_buffer, raw_queue, release_event};

/// Where the fill behind the closed gate goes, relative to the failed fill.
#[derive(Clone, Copy)]
enum Gated {
    /// Nowhere: the failed fill is alone on its queue.
    None,
    /// Ahead of it on its in-order queue.
    Ahead,
    /// Behind it on its in-order queue.
    Behind,
    /// On another queue, enqueued first.
    OtherQueue,
}

const CASES: [(&str, Gated); 4] = [
    ("alone on its queue", Gated::None),
    ("behind a gated fill on its queue", Gated::Ahead),
    ("ahead of a gated fill on its queue", Gated::Behind),
    ("a gated fill on another queue", Gated::OtherQueue),
];

/// How long the failed fill's buffer is given to be freed while the first gate is closed.
const GRACE: Duration = Duration::from_millis(500);

fn main() -> anyhow::Result<()> {
    if let Some(case) = std::env::args().nth(1) {
        let (name, gated) = CASES[case.parse::<usize>()?];
        return run(name, gated);
    }
    print_device(&Context::from_env()?);
    for (i, (name, _)) in CASES.iter().enumerate() {
        let out = common::this_program_again()?.arg(i.to_string()).output()?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said
                .lines()
                .find(|l| l.contains("ERROR") || l.contains("rror"))
                .unwrap_or("");
            println!("{name}: died ({}) {said}", out.status);
        }
    }
    Ok(())
}

/// Set by the failed fill's buffer's destructor callback.
static FREED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_freed(_: cl_mem, _: *mut std::ffi::c_void) {
    FREED.store(true, Ordering::SeqCst);
}

/// Whether the buffer was freed within `limit`.
fn freed_within(limit: Duration) -> bool {
    let start = Instant::now();
    while !FREED.load(Ordering::SeqCst) {
        if start.elapsed() > limit {
            return false;
        }
        // Polls the flag; nothing is ordered by this pause.
        std::thread::sleep(Duration::from_micros(100));
    }
    true
}

fn status(event: cl_event) -> anyhow::Result<cl_int> {
    Ok(
        cle::get_event_info(event, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
            .map_err(cl_err("clGetEventInfo"))?
            .into(),
    )
}

fn run(name: &str, gated: Gated) -> anyhow::Result<()> {
    let ctx = Context::from_env()?;
    let queue = raw_queue(&ctx, 0)?;
    let other = raw_queue(&ctx, 0)?;
    let (kept, failing) = (raw_buffer(&ctx, 4096)?, raw_buffer(&ctx, 4096)?);
    let closed = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
    let fails = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
    let mut first = None;
    match gated {
        Gated::Ahead => first = Some(gated_fill(queue, kept, closed)?),
        Gated::OtherQueue => first = Some(gated_fill(other, kept, closed)?),
        Gated::None | Gated::Behind => {}
    }
    let failed = gated_fill(queue, failing, fails)?;
    if let Gated::Behind = gated {
        first = Some(gated_fill(queue, kept, closed)?);
    }
    clq::flush(queue).map_err(cl_err("clFlush"))?;
    clq::flush(other).map_err(cl_err("clFlush"))?;
    cle::set_user_event_status(fails, -9).map_err(cl_err("clSetUserEventStatus"))?;
    let waited = match cle::wait_for_events(&[failed]) {
        Ok(()) => "CL_SUCCESS".to_string(),
        Err(e) => e.to_string(),
    };
    let failed_status = status(failed)?;
    let first_status = first.map(status).transpose()?;
    release_event(failed)?;
    let count: u32 = clm::get_mem_object_info(failing, clm::CL_MEM_REFERENCE_COUNT)
        .map_err(cl_err("clGetMemObjectInfo"))?
        .into();
    // SAFETY: `failing` is live; the callback only stores a flag.
    unsafe { clm::set_mem_object_destructor_callback(failing, on_freed, ptr::null_mut()) }
        .map_err(cl_err("clSetMemObjectDestructorCallback"))?;
    // SAFETY: created above; its one command has ended (waited for above); not used again.
    unsafe { clm::release_mem_object(failing) }.map_err(cl_err("clReleaseMemObject"))?;
    let freed_closed = freed_within(GRACE);
    cle::set_user_event_status(closed, cle::CL_COMPLETE).map_err(cl_err("clSetUserEventStatus"))?;
    let opened = Instant::now();
    let freed_open = freed_within(Duration::from_secs(2));
    let after = opened.elapsed();
    println!(
        "{name}: the failed fill's wait {waited}, its status {failed_status}{}; \
         reference count of its buffer {count}; released, freed within {GRACE:?}: {freed_closed}{}",
        first_status.map_or(String::new(), |s| format!(", the gated fill's {s}")),
        if freed_closed {
            String::new()
        } else if freed_open {
            format!("; freed {after:.0?} after the first gate was set")
        } else {
            "; not freed 2 s after the first gate was set".to_string()
        }
    );
    clq::finish(queue).map_err(cl_err("clFinish"))?;
    clq::finish(other).map_err(cl_err("clFinish"))?;
    if let Some(first) = first {
        release_event(first)?;
    }
    release_event(closed)?;
    release_event(fails)?;
    // SAFETY: created above; both queues have finished.
    unsafe { clm::release_mem_object(kept) }.map_err(cl_err("clReleaseMemObject"))?;
    for q in [queue, other] {
        // SAFETY: each has finished and is not used again.
        unsafe { clq::release_command_queue(q) }.map_err(cl_err("clReleaseCommandQueue"))?;
    }
    Ok(())
}
