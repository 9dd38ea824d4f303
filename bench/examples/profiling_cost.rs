//! What a profiling queue costs: the host time per launch of `tiny` (spent in
//! `Queue::launch`, the drains every 1,000 launches not counted) on a queue made with
//! `QueueOptions::profiling(true)`, against a plain queue measured in the same run
//! (interleaved repetitions, median and min-max), with the ratio.
//!
//! ```text
//! cargo run --release --example profiling_cost
//! cargo run --release --example profiling_cost -- --launches 50000 --reps 7
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device; `CL_LIFETIME_KERNELS` names the folder(s) holding
//! `tiny.cl` when the binary runs away from its source tree.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use cl_lifetime::{Arg, Context, Kernel, Queue, QueueOptions};

use harness::print_device;
use harness::stats::{Stats, Variant, interleave};

/// Launches between two drains, as in `enqueue_cost`.
const BATCH: usize = 1_000;
const ITEMS: usize = 64;

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let mut launches = 20_000;
    let mut reps = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--launches" => launches = value()?.parse()?,
            "--reps" => reps = value()?.parse()?,
            other => anyhow::bail!("unknown argument {other}; see the example's documentation"),
        }
    }
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let kernel = ctx.program("tiny", "")?.kernel("tiny")?;
    let buffer = ctx.buffer_from(&[0i32; ITEMS])?;
    let plain = ctx.queue()?;
    let timed = ctx.queue_with(QueueOptions::default().profiling(true))?;

    // Host time in `launch` alone: the drains between batches are not counted.
    let run = |queue: &Queue| -> anyhow::Result<f64> {
        let mut enqueueing = Duration::ZERO;
        let mut last = None;
        for i in 0..launches {
            let start = Instant::now();
            // SAFETY: tiny touches buffer[i], i < ITEMS, buffer's length.
            let launch = unsafe { queue.launch(&kernel, &[ITEMS], &[Arg::read_write(&buffer)]) }?;
            enqueueing += start.elapsed();
            if (i + 1) % BATCH == 0 {
                launch.wait()?;
            } else {
                last = Some(launch);
            }
        }
        if let Some(last) = last {
            last.wait()?;
        }
        Ok(enqueueing.as_secs_f64() * 1e6 / launches as f64)
    };
    warm_up(&kernel, &plain, &timed, &buffer)?;
    let mut variants: [Variant<'_>; 2] = [Box::new(|| run(&plain)), Box::new(|| run(&timed))];
    let samples = interleave(reps, &mut variants)?;
    let (plain, timed) = (Stats::of(&samples[0]), Stats::of(&samples[1]));
    println!("{launches} launches per repetition, {reps} repetitions, interleaved");
    for (name, s) in [("plain queue", plain), ("profiling queue", timed)] {
        println!(
            "  {name:<16} {:7.3} µs/launch enqueued (min {:.3}, max {:.3})",
            s.median, s.min, s.max
        );
    }
    println!(
        "  profiling / plain: {:.2}x, {:+.3} µs per launch",
        timed.median / plain.median,
        timed.median - plain.median
    );
    Ok(())
}

/// One untimed batch on each queue: builds, first launches and allocations out of the
/// way.
fn warm_up(
    kernel: &Kernel,
    plain: &Queue,
    timed: &Queue,
    buffer: &cl_lifetime::ClBuffer<i32>,
) -> anyhow::Result<()> {
    for queue in [plain, timed] {
        for _ in 0..BATCH {
            // SAFETY: `kernel` is tiny (main passes it): it touches buffer[i], i < ITEMS, the
            // length of the buffer main passes.
            unsafe { queue.launch(kernel, &[ITEMS], &[Arg::read_write(buffer)]) }?;
        }
        queue.finish()?;
    }
    Ok(())
}
