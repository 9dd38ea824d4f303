//! The free-after-asynchronous-work problem, measured on one OpenCL device.
//!
//! Freeing a buffer that asynchronous work still uses is made safe by waiting for that
//! work, and the wait is a hidden synchronisation point: the host stops feeding the device
//! and the overlap of host and device work is lost. cl-lifetime's `release()` waits too
//! (for the buffer's own commands only); `release_deferred()` returns at once and lets a
//! thread of the library free the memory when those commands end, the OpenCL counterpart
//! of `cudaFreeAsync`.
//!
//! A loop of 200 steps, each: prepare the step's input on the host (1 MiB of floats),
//! allocate a buffer, write the input, run a short `spin` kernel (kernels/busy.cl,
//! calibrated to about 2 ms; one work group of 64 items, so that on a CPU device it runs on
//! one core and leaves the others to the host), read back the first few results, release
//! the buffer. Rows:
//!
//! 1. raw `opencl3`: `clFinish`, then `clReleaseMemObject`, each step;
//! 2. cl-lifetime: `release()`, which waits for the step's commands;
//! 3. cl-lifetime: `release_deferred()`; the host takes each step's results two steps
//!    later, so it prepares the next input while the device works.
//!
//! Measured: steps per second, and the peak device bytes held at once: the context's
//! memory statistics for cl-lifetime (live + pending release), the driver's destructor
//! callbacks for raw code; and how many buffers came from the driver (a deferred release
//! whose commands have ended hands its memory to the next buffer of its size).
//!
//! Run it with `make examples` (with the other examples of this series), or directly:
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example free_after_async
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use cl_lifetime::{Arg, Context, Device};
use opencl3::types::CL_NON_BLOCKING;

mod common;
use common::{Busy, RawLedger, RawSpin, mib, ms, print_table};

/// Steps per loop.
const STEPS: usize = 200;
/// Floats per buffer: 1 MiB.
const LEN: usize = 1 << 18;
/// Work items of the kernel (one work group), and floats read back.
const ITEMS: usize = 64;
const RESULTS: usize = 16;
/// How long the kernel should run.
const TARGET: Duration = Duration::from_millis(2);
/// How many steps later the deferred loop takes a step's results.
const DEPTH: usize = 2;

/// One loop's figures.
struct Row {
    approach: &'static str,
    took: Duration,
    peak: u64,
    from_driver: u64,
}

/// The host's share of a step: its input.
fn input(step: usize) -> Vec<f32> {
    (0..LEN).map(|k| ((step * LEN + k) as f32).sin()).collect()
}

fn main() -> anyhow::Result<()> {
    let Busy {
        ctx,
        queue: _,
        spin: _,
        iters,
    } = Busy::start(ITEMS, TARGET)?;
    std::hint::black_box(input(0)); // warm-up
    let host = Instant::now();
    std::hint::black_box(input(1));
    println!(
        "{STEPS} steps; kernel: spin over {ITEMS} work items x {iters} iterations, about {} \
         ms; input: {} MiB, prepared in {} ms\n",
        TARGET.as_millis(),
        mib((LEN * size_of::<f32>()) as u64),
        ms(host.elapsed())
    );

    let rows = [
        raw_loop(&ctx, iters)?,
        lib_loop(ctx.device(), iters, false)?,
        lib_loop(ctx.device(), iters, true)?,
    ];
    let per_s = |r: &Row| STEPS as f64 / r.took.as_secs_f64();
    print_table(
        &[
            "approach",
            "steps/s",
            "ms per step",
            "peak device MiB",
            "buffers from the driver",
        ],
        &rows
            .iter()
            .map(|r| {
                vec![
                    r.approach.to_string(),
                    format!("{:.0}", per_s(r)),
                    ms(r.took / STEPS as u32),
                    mib(r.peak),
                    r.from_driver.to_string(),
                ]
            })
            .collect::<Vec<_>>(),
    );
    let [finish, _, deferred] = &rows;
    println!(
        "\nrelease_deferred() ran {:.2}x the steps per second of clFinish + release, with \
         {:.1}x its peak device bytes.",
        per_s(deferred) / per_s(finish),
        deferred.peak as f64 / finish.peak.max(1) as f64
    );
    Ok(())
}

/// Row 1: raw `opencl3`, `clFinish` then release, each step.
fn raw_loop(ctx: &Context, iters: u32) -> anyhow::Result<Row> {
    let raw = RawSpin::new(ctx)?;
    let ledger = RawLedger::default();
    let mut sum = 0.0;
    let start = Instant::now();
    for step in 0..STEPS {
        let data = input(step);
        let mut buffer = raw.buffer(LEN)?;
        ledger.track(&buffer)?;
        let mut out = [0.0f32; RESULTS];
        // SAFETY: `data` holds LEN floats, the buffer's size, and outlives the write,
        // which the `finish` below waits for.
        unsafe {
            raw.queue
                .enqueue_write_buffer(&mut buffer, CL_NON_BLOCKING, 0, &data, &[])
        }?;
        raw.spin(&buffer, ITEMS, iters)?;
        // SAFETY: `out` holds RESULTS floats, inside the buffer, and outlives the read,
        // which the `finish` below waits for.
        unsafe {
            raw.queue
                .enqueue_read_buffer(&buffer, CL_NON_BLOCKING, 0, &mut out, &[])
        }?;
        raw.queue.finish()?;
        drop(buffer); // clReleaseMemObject
        sum += out[0];
    }
    let took = start.elapsed();
    std::hint::black_box(sum);
    Ok(Row {
        approach: "raw opencl3: clFinish, release",
        took,
        peak: ledger.peak(),
        from_driver: ledger.created().0,
    })
}

/// Rows 2 and 3: cl-lifetime, on a context of its own (for its own peak).
fn lib_loop(device: &Device, iters: u32, deferred: bool) -> anyhow::Result<Row> {
    let ctx = Context::new(device)?;
    let queue = ctx.queue()?;
    let spin = ctx.program("busy.cl", "")?.kernel("spin")?;
    let warm = ctx.buffer::<f32>(ITEMS)?;
    queue.fill(&warm, 1.0)?;
    // SAFETY: spin touches warm[i], i < ITEMS, warm's length.
    unsafe {
        queue.launch(
            &spin,
            &[ITEMS],
            &[Arg::read_write(&warm), Arg::scalar(1u32)],
        )
    }?;
    warm.release()?;
    let before = ctx.memory_stats().driver_allocations;

    let mut pending = VecDeque::new();
    let mut sum = 0.0;
    let start = Instant::now();
    for step in 0..STEPS {
        let data = input(step);
        let buffer = ctx.buffer::<f32>(LEN)?;
        queue.write_owned(&buffer, data)?;
        // SAFETY: spin touches buffer[i], i < ITEMS, below buffer's LEN.
        unsafe {
            queue.launch(
                &spin,
                &[ITEMS],
                &[Arg::read_write(&buffer), Arg::scalar(iters)],
            )
        }?;
        pending.push_back(queue.read_owned_range(&buffer, 0..RESULTS)?);
        if deferred {
            buffer.release_deferred();
            queue.flush()?;
        } else {
            buffer.release()?;
        }
        while pending.len() > if deferred { DEPTH } else { 0 } {
            if let Some(read) = pending.pop_front() {
                sum += read.wait()?[0];
            }
        }
    }
    for read in pending {
        sum += read.wait()?[0];
    }
    let took = start.elapsed();
    std::hint::black_box(sum);
    ctx.wait_deferred();
    let stats = ctx.memory_stats();
    Ok(Row {
        approach: if deferred {
            "cl-lifetime: release_deferred()"
        } else {
            "cl-lifetime: release()"
        },
        took,
        peak: stats.peak_bytes,
        from_driver: stats.driver_allocations - before,
    })
}
