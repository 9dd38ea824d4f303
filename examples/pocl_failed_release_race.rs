//! Reproduces, with raw OpenCL calls only, the abort of PoCL 3.1 when a thread releases a
//! command's event as soon as it sees the command failed, while the failure is still
//! propagating inside the `clSetUserEventStatus` of another thread (design trap "PoCL's
//! failed event released mid-propagation"). No cl-lifetime command is enqueued: the
//! library only picks the device.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example pocl_failed_release_race
//! ```
//!
//! On one in-order queue: a fill behind a user event, and a second fill of the same buffer
//! behind it. A watcher thread waits for the first fill to end with `clWaitForEvents` and
//! then releases its only reference to the fill's event, as code that waited and is done
//! does; the main thread fails the gate. PoCL 3.1
//! fails the fill inside that `clSetUserEventStatus`: it sets the status, wakes waiters,
//! drops the queue's own reference and then locks the event again, so a release in
//! between frees an event PoCL still uses (`PTHREAD ERROR in pocl_update_event_failed():
//! Invalid argument (22)`). A release after `clSetUserEventStatus` has returned never
//! does. Each case repeats its round and runs in a child process (this program again), so
//! one abort is reported and the other cases still run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::memory as clm;
use opencl3::types::cl_event;

mod common;
use common::{
    cl_err, gated_fill, print_device, raw_buffer, raw_queue, release_event, run_round_cases,
};

/// The cases: (name, the watcher also waits for the main thread's `clSetUserEventStatus`
/// to have returned before it releases).
const CASES: [(&str, bool); 2] = [
    (
        "released once clWaitForEvents returns, during the gate's clSetUserEventStatus",
        false,
    ),
    (
        "released once clWaitForEvents returns and the gate's clSetUserEventStatus returned",
        true,
    ),
];

/// Rounds per case: the window is short, so a case repeats it.
const ROUNDS: usize = 2000;

fn main() -> anyhow::Result<()> {
    if let Some(case) = std::env::args().nth(1) {
        return run(CASES[case.parse::<usize>()?].1);
    }
    print_device(&Context::from_env()?);
    let names: Vec<&str> = CASES.iter().map(|(name, _)| *name).collect();
    run_round_cases(&names, ROUNDS)
}

/// A raw event handed to the watcher thread.
struct Handle(cl_event);
// SAFETY: an OpenCL event handle may be used from any thread (OpenCL 3.0 appendix A.2).
unsafe impl Send for Handle {}

fn run(after_the_set: bool) -> anyhow::Result<()> {
    let ctx = Context::from_env()?;
    let queue = raw_queue(&ctx, 0)?;
    let buffer = raw_buffer(&ctx, 4096)?;
    for round in 0..ROUNDS {
        let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
        let gated = Handle(gated_fill(queue, buffer, gate)?);
        // Behind it on the in-order queue, through the buffer's last command.
        let after = gated_fill(queue, buffer, gate)?;
        clq::flush(queue).map_err(cl_err("clFlush"))?;
        let set = Arc::new(AtomicBool::new(false));
        let watcher = {
            let set = set.clone();
            std::thread::spawn(move || -> anyhow::Result<()> {
                let event = gated;
                // Failed: the wait reports it; only its end matters here.
                let _ = cle::wait_for_events(&[event.0]);
                if after_the_set {
                    while !set.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                }
                release_event(event.0)
            })
        };
        cle::set_user_event_status(gate, -9).map_err(cl_err("clSetUserEventStatus"))?;
        set.store(true, Ordering::Release);
        watcher
            .join()
            .map_err(|_| anyhow::anyhow!("the watcher panicked"))??;
        clq::finish(queue).map_err(cl_err("clFinish"))?;
        for event in [after, gate] {
            release_event(event)?;
        }
        // The round finished: the parent reports the last one printed.
        println!("{round}");
    }
    // SAFETY: created above; the queue has finished.
    unsafe { clm::release_mem_object(buffer) }.map_err(cl_err("clReleaseMemObject"))?;
    // SAFETY: the queue has finished and is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    Ok(())
}
