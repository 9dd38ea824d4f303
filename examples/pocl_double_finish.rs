//! Reproduces, with raw OpenCL calls only, the abort of PoCL 3.1 (and up to 7.1) when
//! several threads share one in-order queue and fail the gates their commands wait on
//! (design trap "PoCL's double finish"), so that it can be told apart from anything this
//! library does. No cl-lifetime command is enqueued: the library only picks the device.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example pocl_double_finish [ROUNDS]
//! ```
//!
//! Each of four threads, ROUNDS times (default 200): makes a 4 KiB buffer and a user event,
//! enqueues on the shared in-order queue a fill behind the user event and a read of the
//! buffer behind the fill, flushes, fails the user event, and waits for the read. Nothing
//! is released before the end (every event, buffer and user event is kept until the queue
//! has finished), so no reference of the program's goes early.
//! A command of the shared queue then has two dependencies that can end at the same
//! moment: its own gate, failed by the host, and the command before it on the queue, of
//! another thread, ending on a worker thread. PoCL fails it on one path while the other
//! submits it: PoCL 3.1 aborts (`pocl_update_event_finished`, assertion
//! `cq->command_count > 0` or `event->status > CL_COMPLETE`) or crashes, in 3 of 4 runs.
//! With one thread (`-- 200 1`) there is no command of another thread before it, and no
//! abort. Fixed upstream in June 2026 (PoCL pull request 2216).

use std::ptr;
use std::sync::Mutex;

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::memory::{self as clm, CL_MEM_READ_WRITE};
use opencl3::types::{cl_command_queue, cl_event, cl_mem};

mod common;
use common::{cl_err, print_device, raw_queue};

/// Raw handles, kept until the end (OpenCL handles may be used from any thread).
#[derive(Default)]
struct Kept {
    events: Vec<usize>,
    buffers: Vec<usize>,
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let threads: usize = args.next().map_or(Ok(4), |a| a.parse())?;
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let queue = raw_queue(&ctx, 0)? as usize;
    let kept = Mutex::new(Kept::default());
    let failed_reads = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let mut workers = Vec::new();
        for _ in 0..threads {
            let (ctx, kept, failed_reads) = (&ctx, &kept, &failed_reads);
            workers.push(s.spawn(move || -> anyhow::Result<()> {
                let queue = queue as cl_command_queue;
                for _ in 0..rounds {
                    // SAFETY: no host pointer.
                    let buffer: cl_mem = unsafe {
                        clm::create_buffer(ctx.as_raw(), CL_MEM_READ_WRITE, 4096, ptr::null_mut())
                    }
                    .map_err(cl_err("clCreateBuffer"))?;
                    let gate = cle::create_user_event(ctx.as_raw())
                        .map_err(cl_err("clCreateUserEvent"))?;
                    let value = 7u32;
                    // SAFETY: the queue and buffer are live; the pattern is 4 bytes copied
                    // before the call returns; the gate is live.
                    let fill: cl_event = unsafe {
                        clq::enqueue_fill_buffer(
                            queue,
                            buffer,
                            (&raw const value).cast(),
                            4,
                            0,
                            4096,
                            1,
                            &gate,
                        )
                    }
                    .map_err(cl_err("clEnqueueFillBuffer"))?;
                    let mut out = [0u32; 16];
                    // SAFETY: the queue and buffer are live; `out` holds 64 bytes and
                    // outlives the read (waited for below); the fill's event is live.
                    let read: cl_event = unsafe {
                        clq::enqueue_read_buffer(
                            queue,
                            buffer,
                            0,
                            0,
                            64,
                            out.as_mut_ptr().cast(),
                            1,
                            &fill,
                        )
                    }
                    .map_err(cl_err("clEnqueueReadBuffer"))?;
                    clq::flush(queue).map_err(cl_err("clFlush"))?;
                    // The gate fails on the host while the other threads' commands before
                    // this one end on PoCL's worker threads.
                    cle::set_user_event_status(gate, -7).map_err(cl_err("clSetUserEventStatus"))?;
                    if cle::wait_for_events(&[read]).is_err() {
                        failed_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    let read = Ok::<cl_event, ()>(read);
                    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                    kept.events.extend([gate as usize, fill as usize]);
                    if let Ok(read) = read {
                        kept.events.push(read as usize);
                    }
                    kept.buffers.push(buffer as usize);
                }
                Ok(())
            }));
        }
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a thread panicked"))??;
        }
        Ok(())
    })?;
    let queue = queue as cl_command_queue;
    clq::finish(queue).map_err(cl_err("clFinish"))?;
    let kept = kept.into_inner().unwrap_or_else(|p| p.into_inner());
    for e in kept.events {
        // SAFETY: each was created or enqueued above and is released once, here.
        let _ = unsafe { cle::release_event(e as cl_event) };
    }
    for b in kept.buffers {
        // SAFETY: as above; the queue has finished.
        let _ = unsafe { clm::release_mem_object(b as cl_mem) };
    }
    // SAFETY: the queue has finished and is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    println!(
        "ok: {threads} threads x {rounds} rounds, {} blocking reads failed with their gate",
        failed_reads.into_inner()
    );
    Ok(())
}
