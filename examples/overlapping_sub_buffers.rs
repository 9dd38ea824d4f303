//! Reproduces, with raw OpenCL calls only, what NVIDIA's driver does with overlapping
//! sub-buffers, so that it can be told apart from anything this library does: the reason
//! the library releases a buffer's sub-buffers newest first.
//! The library only picks the device and finds the kernel file.
//!
//! ```text
//! CL_LIFETIME_DEVICE=nvidia cargo run --release --example overlapping_sub_buffers [A B ORDER]
//! ```
//!
//! Two sub-buffers of one 4 KiB buffer, `A` made first and `B` second (each `origin,size` in
//! bytes; default `0,164` and `0,16`), each the argument of one `add_const` launch that is
//! waited for; then both are released, the older first (`ORDER` = `older`, the default) or
//! the newer first (`newer`). Everything is valid OpenCL: OpenCL allows overlapping
//! sub-buffers, and every command on them has ended before any release.
//!
//! Seen on an NVIDIA H200 with driver 580: releasing `A` first crashes inside
//! `clReleaseMemObject` (SIGSEGV) whenever `B` lies inside `A` (`0,164` / `0,16`;
//! `0,4096` / `512,512`) or across it (`0,1024` / `512,1024`), and not when `B` holds all of
//! `A`, is the same range, or is disjoint; releasing `B` first never crashed. Where it does
//! not crash this prints `ok`.

use std::ptr;

use anyhow::Context as _;
use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::memory::{self as clm, CL_MEM_READ_WRITE};
use opencl3::types::{cl_buffer_region, cl_mem};

mod common;
use common::{ProgramHandle, add_const_and_wait, cl_err, print_device, raw_queue};

/// Bytes of the buffer both sub-buffers are made of.
const BYTES: usize = 4096;

/// `origin,size` in bytes.
fn region(arg: Option<String>, default: (usize, usize)) -> anyhow::Result<(usize, usize)> {
    let Some(arg) = arg else {
        return Ok(default);
    };
    let (origin, size) = arg.split_once(',').context("a region is ORIGIN,SIZE")?;
    Ok((origin.parse()?, size.parse()?))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let a = region(args.next(), (0, 164))?;
    let b = region(args.next(), (0, 16))?;
    let older_first = args.next().as_deref() != Some("newer");
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let device = ctx.device().as_raw();
    let source = std::fs::read_to_string(ctx.program("schedule.cl", "")?.file())?;
    let program = ProgramHandle::build(ctx.as_raw(), device, &source)?;
    let add = program.kernel("add_const")?;
    let queue = raw_queue(&ctx, 0)?;
    // SAFETY: no host pointer.
    let parent =
        unsafe { clm::create_buffer(ctx.as_raw(), CL_MEM_READ_WRITE, BYTES, ptr::null_mut()) }
            .map_err(cl_err("clCreateBuffer"))?;
    let sub = |(origin, size): (usize, usize)| -> anyhow::Result<cl_mem> {
        let region = cl_buffer_region { origin, size };
        // SAFETY: `parent` is live; `region` outlives the call; the driver checks it.
        unsafe {
            clm::create_sub_buffer(
                parent,
                CL_MEM_READ_WRITE,
                clm::CL_BUFFER_CREATE_TYPE_REGION,
                ptr::from_ref(&region).cast(),
            )
        }
        .map_err(cl_err("clCreateSubBuffer"))
    };
    let (first, second) = (sub(a)?, sub(b)?);
    for (mem, size) in [(first, a.1), (second, b.1)] {
        let n = (size / size_of::<i32>()) as u32;
        // SAFETY: `add` is `add_const`, used by this thread only; `mem` holds `size` bytes.
        unsafe { add_const_and_wait(queue, add.get(), mem, 1, n) }?;
    }
    let order = if older_first {
        [first, second]
    } else {
        [second, first]
    };
    for (k, mem) in order.into_iter().enumerate() {
        println!(
            "releasing the {} sub-buffer",
            if (k == 0) == older_first {
                "older"
            } else {
                "newer"
            }
        );
        // SAFETY: the one reference this code holds; every command on it has ended.
        unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))?;
    }
    // SAFETY: as above; its sub-buffers are released.
    unsafe { clm::release_mem_object(parent) }.map_err(cl_err("clReleaseMemObject"))?;
    // SAFETY: every command on it has ended; the queue is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    println!(
        "ok: sub-buffers {a:?} then {b:?}, used by kernels, released {} first",
        if older_first { "older" } else { "newer" }
    );
    Ok(())
}
