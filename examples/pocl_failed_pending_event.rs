//! Reproduces, with raw OpenCL calls only, the abort of PoCL 3.1 when a command whose last
//! reference the program let go of fails with a command behind it (design trap "PoCL's
//! failed pending event"), so that it can be told apart from anything this library does.
//! No cl-lifetime command is enqueued: the library only picks the device.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example pocl_failed_pending_event
//! ```
//!
//! On one in-order queue: a fill of a buffer behind a user event, then a second fill of
//! the same buffer behind it (no wait list: PoCL orders it after the first through the
//! buffer's last command). The program releases its only reference to the first fill's
//! event while the fill waits for its gate, as code that keeps no event does; then it
//! fails the gate. PoCL 3.1 aborts inside `clSetUserEventStatus` (`PTHREAD ERROR in
//! pocl_update_event_failed(): Invalid argument (22)`): it propagates the failure through
//! the released event to the command behind it. A copy from the buffer behind it does the
//! same. Kept until the gate is set, or with the command behind it on another buffer, or
//! with the gate completed, nothing goes wrong.
//! Each case runs in a child process (this program again), so one abort is reported and
//! the other cases still run.

use std::ptr;

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::memory as clm;
use opencl3::types::{cl_event, cl_mem};

mod common;
use common::{cl_err, print_device, raw_buffer, raw_queue, release_event};

/// The cases: (name, release the gated fill's event before the gate is set, the command
/// behind it fills the same buffer (else another), fail the gate).
const CASES: [(&str, bool, bool, bool); 4] = [
    (
        "released, a fill of its buffer behind it, gate failed",
        true,
        true,
        true,
    ),
    (
        "kept until the gate is set, a fill of its buffer behind it, gate failed",
        false,
        true,
        true,
    ),
    (
        "released, a fill of another buffer behind it, gate failed",
        true,
        false,
        true,
    ),
    (
        "released, a fill of its buffer behind it, gate completed",
        true,
        true,
        false,
    ),
];

fn main() -> anyhow::Result<()> {
    if let Some(case) = std::env::args().nth(1) {
        let (_, release, behind, fail) = CASES[case.parse::<usize>()?];
        return run(release, behind, fail);
    }
    print_device(&Context::from_env()?);
    for (i, (name, ..)) in CASES.iter().enumerate() {
        let out = common::this_program_again()?.arg(i.to_string()).output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().find(|l| l.contains("ERROR")).unwrap_or("");
        match out.status.code() {
            Some(0) => println!("{name}: ok"),
            _ => println!("{name}: died ({}) {said}", out.status),
        }
    }
    Ok(())
}

fn run(release: bool, same_buffer: bool, fail: bool) -> anyhow::Result<()> {
    let ctx = Context::from_env()?;
    let queue = raw_queue(&ctx, 0)?;
    let (first, second) = (raw_buffer(&ctx, 4096)?, raw_buffer(&ctx, 4096)?);
    let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
    let value = 7u32;
    let fill = |buffer: cl_mem, wait: &[cl_event]| -> anyhow::Result<cl_event> {
        // SAFETY: the queue and buffer are live; the pattern is 4 bytes copied before the
        // call returns; the events of `wait` are live.
        unsafe {
            clq::enqueue_fill_buffer(
                queue,
                buffer,
                (&raw const value).cast(),
                4,
                0,
                4096,
                wait.len() as u32,
                if wait.is_empty() {
                    ptr::null()
                } else {
                    wait.as_ptr()
                },
            )
        }
        .map_err(cl_err("clEnqueueFillBuffer"))
    };
    let gated = fill(first, &[gate])?;
    let after = fill(if same_buffer { first } else { second }, &[])?;
    clq::flush(queue).map_err(cl_err("clFlush"))?;
    if release {
        release_event(gated)?;
    }
    let status = if fail { -9 } else { cle::CL_COMPLETE };
    cle::set_user_event_status(gate, status).map_err(cl_err("clSetUserEventStatus"))?;
    clq::finish(queue).map_err(cl_err("clFinish"))?;
    if !release {
        release_event(gated)?;
    }
    for event in [after, gate] {
        release_event(event)?;
    }
    for buffer in [first, second] {
        // SAFETY: each was created above; the queue has finished.
        unsafe { clm::release_mem_object(buffer) }.map_err(cl_err("clReleaseMemObject"))?;
    }
    // SAFETY: the queue has finished and is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    Ok(())
}
