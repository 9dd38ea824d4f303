//! Reproduces, with raw OpenCL calls only, the crash of PoCL 3.1 when a command joins an
//! in-order queue while the command before it fails (design trap "a command enqueued while
//! the command before it fails"). No cl-lifetime command is enqueued: the library only
//! picks the device.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example pocl_enqueue_while_failing
//! ```
//!
//! Each round: a fill behind a user event on an in-order queue; another thread enqueues
//! fills with no wait list on that queue as fast as it can, while the main thread fails
//! the gate. PoCL ties each new fill to the queue's last command before it marks the fill
//! queued (and allocates its device data); a failure that reaches the fill in between
//! finishes it without that data, and PoCL dereferences it (SIGSEGV inside
//! `clSetUserEventStatus`). With the enqueues held back while the gate is failed (as the
//! library's handshake does), nothing goes wrong. Each case runs in a child process (this
//! program again), so a crash is reported and the other case still runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::memory as clm;
use opencl3::types::{cl_command_queue, cl_event, cl_mem};

mod common;
use common::{
    cl_err, gated_fill, print_device, raw_buffer, raw_queue, release_event, run_round_cases,
};

/// The cases: (name, the enqueues are held back while the gate is being failed).
const CASES: [(&str, bool); 2] = [
    ("fills enqueued while the gate fails", false),
    ("fills held back while the gate fails", true),
];

/// Rounds per case.
const ROUNDS: usize = 2000;

fn main() -> anyhow::Result<()> {
    if let Some(case) = std::env::args().nth(1) {
        return run(CASES[case.parse::<usize>()?].1);
    }
    print_device(&Context::from_env()?);
    let names: Vec<&str> = CASES.iter().map(|(name, _)| *name).collect();
    run_round_cases(&names, ROUNDS)
}

/// A fill's event, handed back by the enqueuing thread.
struct Event(cl_event);
// SAFETY: an OpenCL event handle may be used from any thread (OpenCL 3.0 appendix A.2).
unsafe impl Send for Event {}

/// Raw handles handed to the enqueuing thread.
#[derive(Clone, Copy)]
struct Handles(cl_command_queue, cl_mem);
// SAFETY: OpenCL queue and memory handles may be used from any thread (OpenCL 3.0
// appendix A.2).
unsafe impl Send for Handles {}

impl Handles {
    /// Both handles (a method, so that a closure captures the whole `Handles`).
    fn get(self) -> (cl_command_queue, cl_mem) {
        (self.0, self.1)
    }
}

fn run(held_back: bool) -> anyhow::Result<()> {
    let ctx = Context::from_env()?;
    let queue = raw_queue(&ctx, 0)?;
    let (gated, other) = (raw_buffer(&ctx, 4096)?, raw_buffer(&ctx, 4096)?);
    // Taken for reading by the enqueuer around each enqueue, for writing by the main
    // thread around the gate's failure: the library's handshake, in its simplest form.
    let handshake = Arc::new(RwLock::new(()));
    for round in 0..ROUNDS {
        let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
        let first = gated_fill(queue, gated, gate)?;
        clq::flush(queue).map_err(cl_err("clFlush"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let enqueuer = {
            let (stop, handshake, handles) =
                (stop.clone(), handshake.clone(), Handles(queue, other));
            std::thread::spawn(move || -> anyhow::Result<Vec<Event>> {
                let (queue, other) = handles.get();
                let value = 1u32;
                // Kept until the queue has finished: a pending command's event let go of
                // aborts PoCL when it fails (design trap "PoCL's failed pending event").
                let mut fills = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let _turn = held_back.then(|| handshake.read());
                    // SAFETY: the queue and buffer are live; the pattern is 4 bytes copied
                    // before the call returns; no wait list.
                    let fill = unsafe {
                        clq::enqueue_fill_buffer(
                            queue,
                            other,
                            (&raw const value).cast(),
                            4,
                            0,
                            4,
                            0,
                            std::ptr::null(),
                        )
                    }
                    .map_err(cl_err("clEnqueueFillBuffer"))?;
                    fills.push(Event(fill));
                }
                Ok(fills)
            })
        };
        {
            let _failing = held_back.then(|| handshake.write());
            cle::set_user_event_status(gate, -9).map_err(cl_err("clSetUserEventStatus"))?;
        }
        stop.store(true, Ordering::Release);
        let fills = enqueuer
            .join()
            .map_err(|_| anyhow::anyhow!("the enqueuer panicked"))??;
        clq::finish(queue).map_err(cl_err("clFinish"))?;
        for fill in fills {
            release_event(fill.0)?;
        }
        for event in [first, gate] {
            release_event(event)?;
        }
        println!("{round}");
    }
    for buffer in [gated, other] {
        // SAFETY: created above; the queue has finished.
        unsafe { clm::release_mem_object(buffer) }.map_err(cl_err("clReleaseMemObject"))?;
    }
    // SAFETY: the queue has finished and is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    Ok(())
}
