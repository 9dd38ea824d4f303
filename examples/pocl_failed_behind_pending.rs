//! Reproduces, with raw OpenCL calls only, the abort of PoCL 3.1 when the program lets go
//! of a failed command's event while the command before it on its in-order queue has not
//! ended (design trap "PoCL's failed command behind a pending one"), so that it can be told
//! apart from anything this library does. No cl-lifetime command is enqueued: the library
//! only picks the device.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example pocl_failed_behind_pending
//! ```
//!
//! On one in-order queue: a fill of one buffer behind a user event (the *first*), then a
//! fill of another buffer behind a second user event (the *second*). Its wait list names
//! only its own gate; the queue's order puts it behind the first. The second gate is
//! failed: PoCL fails the second fill at once (its status reads failed), and every event
//! its wait list named has ended. The program releases the second fill's event, its last
//! reference, as code that keeps no failed event does; then it sets the first gate. PoCL
//! 3.1 still has the freed event on the first fill's notify list: failing the first gate
//! aborts inside `clSetUserEventStatus` (`PTHREAD ERROR in pocl_update_event_failed():
//! Invalid argument (22)`). Kept until the first fill has ended, nothing goes wrong.
//! Each case runs in a child process (this program again), so one abort is reported and
//! the other cases still run.

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::memory as clm;
use opencl3::types::{cl_event, cl_int, cl_mem};

mod common;
use common::{cl_err, gated_fill, print_device, raw_buffer, raw_queue, release_event};

/// The cases: (name, release the failed second fill's event before the first gate is set,
/// the status the first gate is set to).
const CASES: [(&str, bool, cl_int); 4] = [
    (
        "failed, released, the command before it then failed",
        true,
        -9,
    ),
    ("failed, kept until the command before it failed", false, -9),
    (
        "failed, released, the command before it then completed",
        true,
        cle::CL_COMPLETE,
    ),
    (
        "failed, kept until the command before it completed",
        false,
        cle::CL_COMPLETE,
    ),
];

fn main() -> anyhow::Result<()> {
    if let Some(case) = std::env::args().nth(1) {
        let (_, release, first) = CASES[case.parse::<usize>()?];
        // Each case ten times: the abort reads freed memory, which may hold anything.
        for _ in 0..10 {
            run(release, first)?;
        }
        return Ok(());
    }
    print_device(&Context::from_env()?);
    for (i, (name, ..)) in CASES.iter().enumerate() {
        let out = common::this_program_again()?.arg(i.to_string()).output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said
            .lines()
            .find(|l| l.contains("ERROR") || l.contains("Assertion"))
            .unwrap_or("");
        match out.status.code() {
            Some(0) => println!("{name}: ok"),
            _ => println!("{name}: died ({}) {said}", out.status),
        }
    }
    Ok(())
}

fn run(release: bool, first_status: cl_int) -> anyhow::Result<()> {
    let ctx = Context::from_env()?;
    let queue = raw_queue(&ctx, 0)?;
    let (a, b) = (raw_buffer(&ctx, 4096)?, raw_buffer(&ctx, 4096)?);
    let first_gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
    let second_gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
    let fill = |buffer: cl_mem, gate: cl_event| gated_fill(queue, buffer, gate);
    let first = fill(a, first_gate)?;
    let second = fill(b, second_gate)?;
    clq::flush(queue).map_err(cl_err("clFlush"))?;
    cle::set_user_event_status(second_gate, -9).map_err(cl_err("clSetUserEventStatus"))?;
    let status = cle::get_event_info(second, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
        .map_err(cl_err("clGetEventInfo"))?;
    let status = cl_int::from(status);
    anyhow::ensure!(
        status < 0,
        "the second fill reads {status}, not failed, once its gate failed"
    );
    // PoCL keeps a buffer's last command's event: the program lets go of the buffer
    // (nothing else uses it), as it would once it is done with it.
    // SAFETY: created above; the fill that used it has failed.
    unsafe { clm::release_mem_object(b) }.map_err(cl_err("clReleaseMemObject"))?;
    if release {
        release_event(second)?;
    }
    cle::set_user_event_status(first_gate, first_status).map_err(cl_err("clSetUserEventStatus"))?;
    clq::finish(queue).map_err(cl_err("clFinish"))?;
    if !release {
        release_event(second)?;
    }
    for event in [first, first_gate, second_gate] {
        release_event(event)?;
    }
    // SAFETY: created above; the queue has finished.
    unsafe { clm::release_mem_object(a) }.map_err(cl_err("clReleaseMemObject"))?;
    // SAFETY: the queue has finished and is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    Ok(())
}
