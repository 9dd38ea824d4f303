//! The release-needs-synchronization problem, measured on one OpenCL device.
//!
//! A buffer must not be released while a command still uses it, so raw OpenCL code makes
//! sure first, usually with `clFinish`: that waits for everything on the queue, not only
//! for the commands that use the buffer. cl-lifetime records every command's event on the
//! buffers it touches, and `release()` waits on exactly those.
//!
//! Two buffers on one in-order queue: B gets a short kernel, then A a long one (the `spin`
//! kernel of kernels/busy.cl, calibrated to run for about 150 ms). Right away, the host
//! releases B, which the long kernel does not use. Each row gives the host time of that
//! release (wait included), whether A's kernel was still running when it returned, and
//! when A's kernel ended (from the release call); each runs three times and the table
//! shows the run of median release time:
//!
//! 1. raw `opencl3`, the usual fix: `clFinish`, then `clReleaseMemObject` of B;
//! 2. raw `opencl3` with B's kernel event kept by hand: `clWaitForEvents` on it, then the
//!    release (exact, for the price of keeping every command's event per buffer);
//! 3. cl-lifetime: `B.release()`, which waits on the events it recorded on B.
//!
//! Run it with `make examples` (with the other examples of this series), or directly:
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example release_sync
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use std::time::{Duration, Instant};

use cl_lifetime::{Arg, Context, Kernel, Queue};
use opencl3::event::CL_COMPLETE;

mod common;
use common::{Busy, RawSpin, ms, print_table};

/// How long one launch of the long kernel should run.
const TARGET: Duration = Duration::from_millis(150);
/// Work items per launch, and floats per buffer.
const N: usize = 1 << 16;

/// How many times each approach runs; the table shows the run of median host time.
const REPS: usize = 3;

/// One release of B.
struct Sample {
    /// Host time of the release of B, wait included.
    took: Duration,
    /// Whether A's kernel was still running when B's release returned.
    a_running: bool,
    /// When A's kernel ended, from the release call.
    a_ended: Duration,
    waited_for: String,
}

const APPROACHES: [&str; 3] = [
    "raw opencl3: clFinish, release B",
    "raw opencl3: wait on B's event, release B",
    "cl-lifetime: B.release()",
];

fn main() -> anyhow::Result<()> {
    let Busy {
        ctx,
        queue,
        spin,
        iters,
    } = Busy::start(N, TARGET)?;
    println!(
        "long kernel: spin over {N} work items x {iters} iterations, about {} ms; \
         median of {REPS} runs\n",
        TARGET.as_millis()
    );
    let raw = RawSpin::new(&ctx)?;

    let mut samples: [Vec<Sample>; 3] = Default::default();
    for _ in 0..REPS {
        samples[0].push(raw_release(&raw, iters, false)?);
        samples[1].push(raw_release(&raw, iters, true)?);
        samples[2].push(lib_release(&ctx, &queue, &spin, iters)?);
    }
    let medians: Vec<&Sample> = samples
        .iter_mut()
        .map(|runs| {
            runs.sort_by_key(|s| s.took);
            &runs[runs.len() / 2]
        })
        .collect();
    print_table(
        &[
            "approach",
            "release of B (ms)",
            "A still running after",
            "A ended (ms)",
            "waited for",
        ],
        &APPROACHES
            .iter()
            .zip(&medians)
            .map(|(approach, s)| {
                vec![
                    approach.to_string(),
                    ms(s.took),
                    if s.a_running { "yes" } else { "no" }.to_string(),
                    ms(s.a_ended),
                    s.waited_for.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    );
    if let [finish, _, ours] = medians[..] {
        let compared = common::compared(
            finish.took.as_secs_f64(),
            ours.took.as_secs_f64(),
            "less",
            "more",
            "host time",
        );
        println!(
            "\nReleasing B took {} ms after clFinish and {} ms with cl-lifetime ({compared}), \
             without keeping any event by hand.",
            ms(finish.took),
            ms(ours.took)
        );
    }
    Ok(())
}

/// Rows 1 and 2: raw `opencl3`, with `clFinish` or with B's event kept by hand.
fn raw_release(raw: &RawSpin, iters: u32, by_hand: bool) -> anyhow::Result<Sample> {
    let (mut a, mut b) = (raw.buffer(N)?, raw.buffer(N)?);
    raw.fill(&mut a, 1.0)?;
    raw.fill(&mut b, 1.0)?;
    let short = raw.spin(&b, N, 1)?;
    let long = raw.spin(&a, N, iters)?;
    let start = Instant::now();
    if by_hand {
        short.wait()?;
    } else {
        raw.queue.finish()?;
    }
    drop(b); // clReleaseMemObject
    let took = start.elapsed();
    // Neither complete nor failed (a failed status is negative).
    let a_running = long.command_execution_status()?.0 > CL_COMPLETE;
    long.wait()?;
    Ok(Sample {
        took,
        a_running,
        a_ended: start.elapsed(),
        waited_for: if by_hand {
            "B's kernel event, kept by hand".into()
        } else {
            "the whole queue, A's kernel too".into()
        },
    })
}

/// Row 3: cl-lifetime.
fn lib_release(ctx: &Context, queue: &Queue, spin: &Kernel, iters: u32) -> anyhow::Result<Sample> {
    let (a, b) = (ctx.buffer::<f32>(N)?, ctx.buffer::<f32>(N)?);
    queue.fill(&a, 1.0)?;
    queue.fill(&b, 1.0)?;
    // SAFETY: `spin` is busy.cl's spin (this program's only caller passes it): it touches
    // b[i], i < N, b's length.
    unsafe { queue.launch(spin, &[N], &[Arg::read_write(&b), Arg::scalar(1u32)]) }?;
    // SAFETY: as above, a[i], i < N, a's length.
    let long = unsafe { queue.launch(spin, &[N], &[Arg::read_write(&a), Arg::scalar(iters)]) }?;
    queue.flush()?;
    let start = Instant::now();
    let report = b.release()?;
    let took = start.elapsed();
    let a_running = !long.is_terminal();
    long.wait()?;
    let a_ended = start.elapsed();
    a.release()?;
    Ok(Sample {
        took,
        a_running,
        a_ended,
        waited_for: format!(
            "{} event(s) recorded on B, {} ms",
            report.waited_on,
            ms(report.waited)
        ),
    })
}
