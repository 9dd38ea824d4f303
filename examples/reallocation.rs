//! The reallocation problem, measured on one OpenCL device.
//!
//! A program whose buffer sizes change from step to step (adaptive meshes, variable
//! batches) pays for `clCreateBuffer`, a first use (drivers allocate at the first command,
//! CPU drivers touch fresh pages) and `clReleaseMemObject` at every step. cl-lifetime has
//! three ways to allocate less: an `Arena` (one buffer carved into sub-buffers, for a
//! known peak), a `Pool` (blocks by power-of-two size class, reused without waiting), and
//! `ClBuffer::resize` (here: grow when a step needs more, never shrink).
//!
//! 200 steps of sizes between 1 and 8 MiB (a fixed pseudo-random sequence); each step
//! gets a buffer of its size, fills it on the device, waits for the fill and gives the
//! buffer back. Measured per approach: the host time of getting and giving back buffers
//! per step (set-up included: the arena, the pool, the first buffer), the whole step, how
//! many `clCreateBuffer` calls were made and their bytes, and the peak device bytes held at
//! once (the context's memory statistics for cl-lifetime; the driver's destructor
//! callbacks for raw code).
//!
//! Run it with `make examples` (with the other examples of this series), or directly:
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example reallocation
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use std::time::{Duration, Instant};

use cl_lifetime::{Arena, Context, Device, Pool, PoolOptions};

mod common;
use common::{RawLedger, RawSpin, mib, print_device, print_table, us};

const STEPS: usize = 200;
/// Floats per step: 1 to 8 MiB.
const MIN_LEN: usize = 1 << 18;
const MAX_LEN: usize = 1 << 21;

/// The steps' sizes: a fixed pseudo-random sequence (a 64-bit LCG), the same every run.
fn sizes() -> Vec<usize> {
    let mut state: u64 = 0x5EED;
    (0..STEPS)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            MIN_LEN + (state >> 33) as usize % (MAX_LEN - MIN_LEN + 1)
        })
        .collect()
}

/// One approach's figures.
struct Row {
    approach: &'static str,
    /// Host time spent getting and giving back buffers, set-up included.
    alloc: Duration,
    /// The whole loop.
    total: Duration,
    driver_allocations: u64,
    driver_bytes: u64,
    peak: u64,
}

/// cl-lifetime's ways to allocate less.
#[derive(Clone, Copy)]
enum Approach {
    Arena,
    Pool,
    Resize,
}

impl Approach {
    fn label(self) -> &'static str {
        match self {
            Approach::Arena => "cl-lifetime: Arena, carve + reset",
            Approach::Pool => "cl-lifetime: Pool, acquire + release",
            Approach::Resize => "cl-lifetime: ClBuffer::resize to grow",
        }
    }
}

/// Times `f`, adding its host time to `total`.
fn timed<R>(total: &mut Duration, f: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let r = f();
    *total += start.elapsed();
    r
}

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let device = Device::from_env()?;
    let ctx = Context::new(&device)?;
    print_device(&ctx);
    let sizes = sizes();
    let used: usize = sizes.iter().sum::<usize>() * size_of::<f32>();
    println!(
        "{STEPS} steps, {} to {} MiB each, {} MiB in all\n",
        mib((MIN_LEN * 4) as u64),
        mib((MAX_LEN * 4) as u64),
        mib(used as u64)
    );
    let mut rows = vec![raw_steps(&ctx, &sizes)?];

    for approach in [Approach::Arena, Approach::Pool, Approach::Resize] {
        let ctx = Context::new(&device)?; // its own statistics
        let queue = ctx.queue()?;
        let (mut alloc, mut driver_bytes) = (Duration::ZERO, 0);
        let start = Instant::now();
        match approach {
            Approach::Arena => {
                let mut arena = timed(&mut alloc, || Arena::new(&ctx, MAX_LEN * 4))?;
                driver_bytes = arena.capacity() as u64;
                for &len in &sizes {
                    let buffer = timed(&mut alloc, || arena.carve::<f32>(len))?;
                    queue.fill(&buffer, 1.0)?.wait()?;
                    timed(&mut alloc, || -> anyhow::Result<()> {
                        buffer.release()?;
                        Ok(arena.reset()?)
                    })?;
                }
            }
            Approach::Pool => {
                let pool = timed(&mut alloc, || Pool::new(&ctx, PoolOptions::default()))?;
                for &len in &sizes {
                    let buffer = timed(&mut alloc, || pool.acquire_on::<f32>(&queue, len))?;
                    queue.fill(&buffer, 1.0)?.wait()?;
                    timed(&mut alloc, || buffer.release())?;
                }
                let held = pool.stats(); // nothing was trimmed: all it ever allocated
                driver_bytes = held.in_use_bytes + held.pooled_bytes;
            }
            Approach::Resize => {
                let mut buffer = timed(&mut alloc, || ctx.buffer::<f32>(sizes[0]))?;
                driver_bytes += buffer.block_bytes() as u64;
                for &len in &sizes {
                    if len > buffer.len() {
                        timed(&mut alloc, || buffer.resize(&queue, len))?;
                        driver_bytes += buffer.block_bytes() as u64;
                    }
                    queue.fill_range(&buffer, 1.0, 0..len)?.wait()?;
                }
                timed(&mut alloc, || buffer.release())?;
            }
        }
        let total = start.elapsed();
        ctx.wait_deferred();
        let stats = ctx.memory_stats();
        rows.push(Row {
            approach: approach.label(),
            alloc,
            total,
            driver_allocations: stats.driver_allocations,
            driver_bytes,
            peak: stats.peak_bytes,
        });
    }

    let per_step = |d: Duration| d / STEPS as u32;
    print_table(
        &[
            "approach",
            "get + give back (µs/step)",
            "whole step (µs)",
            "clCreateBuffer calls",
            "MiB from the driver",
            "peak device MiB",
        ],
        &rows
            .iter()
            .map(|r| {
                vec![
                    r.approach.to_string(),
                    us(per_step(r.alloc)),
                    us(per_step(r.total)),
                    r.driver_allocations.to_string(),
                    mib(r.driver_bytes),
                    mib(r.peak),
                ]
            })
            .collect::<Vec<_>>(),
    );
    if let Some((raw, ours)) = rows.split_first() {
        println!();
        for r in ours {
            // Less is better for both: a slower or larger row says "more".
            let time = common::compared(
                raw.alloc.as_secs_f64(),
                r.alloc.as_secs_f64(),
                "less",
                "more",
                "host time per step getting buffers than raw",
            );
            let bytes = common::compared(
                raw.driver_bytes as f64,
                r.driver_bytes as f64,
                "fewer",
                "more",
                "bytes from the driver",
            );
            println!("{}: {time}, {bytes}.", r.approach);
        }
    }
    Ok(())
}

/// Row 1: raw `opencl3`, a new buffer at every step.
fn raw_steps(ctx: &Context, sizes: &[usize]) -> anyhow::Result<Row> {
    let raw = RawSpin::new(ctx)?;
    let ledger = RawLedger::default();
    let mut alloc = Duration::ZERO;
    let start = Instant::now();
    for &len in sizes {
        let mut buffer = timed(&mut alloc, || raw.buffer(len))?;
        ledger.track(&buffer)?;
        raw.fill(&mut buffer, 1.0)?.wait()?;
        timed(&mut alloc, || drop(buffer)); // clReleaseMemObject
    }
    let total = start.elapsed();
    let (driver_allocations, driver_bytes) = ledger.created();
    Ok(Row {
        approach: "raw opencl3: clCreateBuffer per step",
        alloc,
        total,
        driver_allocations,
        driver_bytes,
        peak: ledger.peak(),
    })
}
