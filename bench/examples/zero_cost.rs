//! What the *zeroed before read* rule costs: a new `Context::buffer` whose first command
//! may read it (here a kernel that increments it in place) gets a zero fill first; one
//! made with `Context::buffer_uninitialized` does not, and reads what the driver left.
//!
//! Per size (4 KiB, 1 MiB, 64 MiB), one iteration is: make the buffer, launch
//! `increment` on it (`Arg::read_write`), wait for the launch, release the buffer.
//! Variants, interleaved in an order that reverses every repetition:
//! - `uninitialized` (the baseline): `buffer_uninitialized`, no zero fill;
//! - `zeroed`: `buffer`, so the library fills it with zeros before the launch;
//! - `written first`: `buffer`, then the program's own `fill` of all of it before the
//!   launch (the rule then adds nothing: what a program that initialises its buffers pays).
//!
//! Prints, per variant, the median over the repetitions of the mean µs per iteration, its
//! min-max, and the ratio to the baseline's median.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example zero_cost [-- --reps R]
//! ```

use std::time::{Duration, Instant};

use anyhow::Context as _;
use cl_lifetime::{Arg, ClBuffer, Context, Kernel, Queue};
use harness::{Stats, interleave_with, print_device, size_label};

const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];
/// How long one repetition of one variant should take, roughly.
const TARGET_REP: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Uninitialized,
    Zeroed,
    WrittenFirst,
}

const VARIANTS: [Variant; 3] = [
    Variant::Uninitialized,
    Variant::Zeroed,
    Variant::WrittenFirst,
];

fn iteration(
    ctx: &Context,
    queue: &Queue,
    kernel: &Kernel,
    words: usize,
    v: Variant,
) -> anyhow::Result<()> {
    let buf: ClBuffer<i32> = match v {
        Variant::Uninitialized => ctx.buffer_uninitialized(words)?,
        Variant::Zeroed | Variant::WrittenFirst => ctx.buffer(words)?,
    };
    if v == Variant::WrittenFirst {
        queue.fill(&buf, 0)?;
    }
    let args = [Arg::read_write(&buf), Arg::scalar(words as u32)];
    // SAFETY: `kernel` is busy.cl's increment (main passes it): it touches buf[i] only where
    // i < words, buf's length.
    unsafe { queue.launch(kernel, &[words], &args) }?.wait()?;
    buf.release()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let reps = std::env::args()
        .skip_while(|a| a != "--reps")
        .nth(1)
        .map(|r| r.parse::<usize>())
        .transpose()
        .context("--reps takes a number")?
        .unwrap_or(7);
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let queue = ctx.queue()?;
    let kernel = ctx.program("busy", "")?.kernel("increment")?;
    println!("size      variant         µs/iteration (median, min-max)   vs uninitialized");
    for bytes in SIZES {
        let words = bytes / 4;
        // Iterations per repetition, from one timed warm-up iteration of the slowest kind.
        let start = Instant::now();
        for v in VARIANTS {
            iteration(&ctx, &queue, &kernel, words, v)?;
        }
        let one = start.elapsed() / 3;
        let count =
            (TARGET_REP.as_secs_f64() / one.as_secs_f64().max(1e-6)).clamp(3.0, 2000.0) as usize;
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
        interleave_with(reps, &VARIANTS, |v| {
            let start = Instant::now();
            for _ in 0..count {
                iteration(&ctx, &queue, &kernel, words, v)?;
            }
            let mean = start.elapsed().as_secs_f64() * 1e6 / count as f64;
            samples[VARIANTS.iter().position(|&x| x == v).unwrap_or(0)].push(mean);
            Ok(())
        })?;
        let stats: Vec<Stats> = samples.iter().map(|s| Stats::of(s)).collect();
        for (v, s) in VARIANTS.iter().zip(&stats) {
            println!(
                "{:<9} {:<15} {:>10.1} ({:.1}-{:.1}) {:>20.2}x",
                size_label(bytes),
                format!("{v:?}"),
                s.median,
                s.min,
                s.max,
                s.median / stats[0].median
            );
        }
    }
    Ok(())
}
