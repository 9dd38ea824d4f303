//! Migrating an opencl3 program to cl-lifetime one step at a time, each step a program
//! that runs and checks its result.
//!
//! 0. The program as it was: opencl3 objects, a kernel that scales a vector, events
//!    passed by hand, and `finish` before anything is dropped.
//! 1. Adopt the context, the queue and the buffer (`from_raw`): the library tracks the
//!    buffer from then on. The kernel is still launched through opencl3, told to the
//!    library with `enqueue_raw`, which hands it the wait list; a read through the
//!    library waits for it, and so does the buffer's release.
//! 2. Launch the kernel through the library: no more events by hand. The launch stays
//!    `unsafe`, as opencl3's was: no library can see what a kernel touches, so the
//!    kernel's bounds are still the caller's to vouch for.
//! 3. Make the buffers through the library too: the opencl3 objects are gone, and each
//!    release waits for exactly its buffer's commands.
//!
//! ```text
//! cargo run --release --example migrate_opencl3
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use std::ptr;

use anyhow::Context as _;
use cl_lifetime::opencl3;
use cl_lifetime::{Arg, BufferUse, ClBuffer, ClStatus, Context, Device, Error, Queue};
use opencl3::command_queue::CommandQueue;
use opencl3::kernel::ExecuteKernel;
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE, ClMem as _};
use opencl3::program::Program;
use opencl3::types::CL_BLOCKING;

const N: usize = 1 << 16;
const SOURCE: &str = "__kernel void scale(__global float *v, float by) {
    size_t i = get_global_id(0);
    v[i] *= by;
}";

fn input() -> Vec<f32> {
    (0..N).map(|i| i as f32).collect()
}

fn check(got: &[f32], by: f32) -> anyhow::Result<()> {
    let wrong = got
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != i as f32 * by)
        .count();
    anyhow::ensure!(wrong == 0, "{wrong} of {N} elements are wrong");
    Ok(())
}

/// The opencl3 objects of steps 0 and 1.
struct Raw {
    context: opencl3::context::Context,
    queue: CommandQueue,
    kernel: opencl3::kernel::Kernel,
}

fn raw_setup(device: &Device) -> anyhow::Result<Raw> {
    let cl_device = opencl3::device::Device::new(device.as_raw());
    let context = opencl3::context::Context::from_device(&cl_device)?;
    // The OpenCL 1.x entry point, which every device has.
    #[allow(deprecated)]
    let queue = CommandQueue::create_default(&context, 0)?;
    let program = Program::create_and_build_from_source(&context, SOURCE, "")
        .map_err(|log| anyhow::anyhow!("build failed:\n{log}"))?;
    let kernel = opencl3::kernel::Kernel::create(&program, "scale")?;
    Ok(Raw {
        context,
        queue,
        kernel,
    })
}

/// Step 0: opencl3 as it was written.
fn step0(raw: &Raw) -> anyhow::Result<()> {
    let mut data = input();
    // SAFETY: a plain buffer of N floats; written before it is read.
    let mut buf =
        unsafe { Buffer::<f32>::create(&raw.context, CL_MEM_READ_WRITE, N, ptr::null_mut())? };
    // SAFETY: a blocking write of N floats into a buffer of N.
    unsafe {
        raw.queue
            .enqueue_write_buffer(&mut buf, CL_BLOCKING, 0, &data, &[])?
    };
    // SAFETY: the arguments match the kernel's parameters; N work items over N floats.
    let run = unsafe {
        ExecuteKernel::new(&raw.kernel)
            .set_arg(&buf)
            .set_arg(&2.0f32)
            .set_global_work_size(N)
            .enqueue_nd_range(&raw.queue)?
    };
    // SAFETY: a blocking read of N floats after the launch, named by hand.
    unsafe {
        raw.queue
            .enqueue_read_buffer(&buf, CL_BLOCKING, 0, &mut data, &[run.get()])?
    };
    raw.queue.finish()?;
    check(&data, 2.0)
}

/// Step 1: the same objects, adopted; the raw launch is told to the library.
fn step1(raw: &Raw) -> anyhow::Result<()> {
    // SAFETY: valid handles, which the opencl3 objects keep; the library takes its own
    // references.
    let ctx = unsafe { Context::from_raw(raw.context.get()) }?;
    // SAFETY: as above.
    let queue = unsafe { Queue::from_raw(&ctx, raw.queue.get()) }?;
    // SAFETY: a plain buffer of N floats, adopted at once.
    let made =
        unsafe { Buffer::<f32>::create(&raw.context, CL_MEM_READ_WRITE, N, ptr::null_mut())? };
    // SAFETY: a valid buffer of `ctx`.
    let buf = unsafe { ClBuffer::<f32>::from_raw(&ctx, made.get()) }?;
    queue.write(&buf, &input())?;
    // SAFETY: the launch reads and writes `buf` only, waits on the list it is given and
    // hands over the one reference of its event (retained before opencl3's drops).
    unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[BufferUse::read_write(&buf)], |_, wait| {
                let event = ExecuteKernel::new(&raw.kernel)
                    .set_arg(&made)
                    .set_arg(&2.0f32)
                    .set_global_work_size(N)
                    .set_event_wait_list(wait)
                    .enqueue_nd_range(&raw.queue)
                    .map_err(|e| Error::Cl {
                        call: "clEnqueueNDRangeKernel",
                        status: ClStatus(e.0),
                    })?;
                opencl3::event::retain_event(event.get()).map_err(|status| Error::Cl {
                    call: "clRetainEvent",
                    status: ClStatus(status),
                })?;
                Ok(event.get())
            })?;
    }
    // Waits for the raw launch, which waits for the write: no event by hand.
    check(&queue.read_owned(&buf)?.wait()?, 2.0)?;
    let report = buf.release()?;
    println!(
        "  step 1: adopted, raw launch recorded: ok; released, freed: {} (opencl3's Buffer \
         still holds it)",
        report.freed
    );
    Ok(())
}

/// Step 2: the kernel through the library; the buffer still comes from opencl3.
fn step2(raw: &Raw) -> anyhow::Result<()> {
    // SAFETY: as in step 1.
    let ctx = unsafe { Context::from_raw(raw.context.get()) }?;
    let queue = ctx.queue()?;
    // SAFETY: a plain buffer of N floats, adopted at once.
    let made =
        unsafe { Buffer::<f32>::create(&raw.context, CL_MEM_READ_WRITE, N, ptr::null_mut())? };
    // SAFETY: a valid buffer of `ctx`.
    let buf = unsafe { ClBuffer::<f32>::from_raw(&ctx, made.get()) }?;
    let scale = ctx
        .program_from_source("scale", SOURCE, "")?
        .kernel("scale")?;
    queue.write(&buf, &input())?;
    // SAFETY: scale touches v[i], i < N, buf's length.
    unsafe { queue.launch(&scale, &[N], &[Arg::read_write(&buf), Arg::scalar(2.0f32)]) }?;
    check(&queue.read_owned(&buf)?.wait()?, 2.0)
}

/// Step 3: no opencl3 left.
fn step3(device: &Device) -> anyhow::Result<()> {
    let ctx = Context::new(device)?;
    let queue = ctx.queue()?;
    let buf = ctx.buffer_from(&input())?;
    let scale = ctx
        .program_from_source("scale", SOURCE, "")?
        .kernel("scale")?;
    // SAFETY: scale touches v[i], i < N, buf's length.
    unsafe { queue.launch(&scale, &[N], &[Arg::read_write(&buf), Arg::scalar(3.0f32)]) }?;
    check(&queue.read_owned(&buf)?.wait()?, 3.0)?;
    let report = buf.release()?;
    println!(
        "  step 3: the library alone: ok; released, freed: {}",
        report.freed
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let device = Device::from_env()?;
    println!("device: {device}");
    let raw = raw_setup(&device).context("opencl3 set-up")?;
    step0(&raw).context("step 0")?;
    println!("  step 0: opencl3 alone: ok");
    step1(&raw).context("step 1")?;
    step2(&raw).context("step 2")?;
    println!("  step 2: kernel through the library: ok");
    step3(&device).context("step 3")?;
    println!("every step gave the same result");
    Ok(())
}
