//! The memory-still-held-after-release problem, measured on one OpenCL device.
//!
//! `clReleaseMemObject` of a buffer that a kernel still uses only says that the program is
//! done with it: the driver frees the memory when the kernel ends. On PoCL the call
//! returns at once, so the program believes the memory is gone while it is still held.
//! cl-lifetime's `release()` waits for the buffer's own commands, calls
//! `clReleaseMemObject`, and returns once the driver has freed the memory; its report says
//! so (`freed`), and the context's memory statistics agree.
//!
//! A 64 MiB buffer, a `spin` kernel (kernels/busy.cl, calibrated to run for about 150 ms)
//! on it, and the buffer's release right after the launch, once with raw `opencl3` (drop
//! the buffer) and once with cl-lifetime. Measured: the host time of the release call,
//! when the kernel ended and when the driver really freed the memory (the buffer's
//! destructor callback, which only records the time), both from the moment the release
//! returned; and the bytes the driver still held at that moment.
//!
//! Run it with `make examples` (with the other examples of this series), or directly:
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example memory_held
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use std::time::{Duration, Instant};

use cl_lifetime::Arg;

mod common;
use common::{Busy, FreedAt, RawSpin, mib, ms, print_table, us};

/// How long the kernel should run.
const TARGET: Duration = Duration::from_millis(150);
/// Work items of the kernel, over the start of the buffer.
const N: usize = 1 << 16;
/// Floats per buffer: 64 MiB.
const LEN: usize = 16 << 20;
/// How long to wait for a destructor callback that has not fired.
const GRACE: Duration = Duration::from_secs(5);

/// What the host saw of one release.
struct Row {
    approach: &'static str,
    /// Host time of the release call.
    call: Duration,
    returned: Instant,
    kernel_ended: Instant,
    /// The destructor callback, if it fired within the grace.
    freed: Option<Instant>,
    /// The library's own account, if any.
    says: String,
}

impl Row {
    /// `t` from the moment the release returned, in ms: negative when before.
    fn after_return(&self, t: Instant) -> String {
        let ms = match t.checked_duration_since(self.returned) {
            Some(after) => after.as_secs_f64() * 1e3,
            None => -(self.returned - t).as_secs_f64() * 1e3,
        };
        format!("{ms:+.2}")
    }

    /// Bytes the driver still held when the release returned.
    fn held_at_return(&self) -> u64 {
        match self.freed {
            Some(freed) if freed <= self.returned => 0,
            _ => (LEN * size_of::<f32>()) as u64,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let Busy {
        ctx,
        queue,
        spin,
        iters,
    } = Busy::start(N, TARGET)?;
    println!(
        "kernel: spin over {N} work items x {iters} iterations, about {} ms, on a buffer of \
         {} MiB\n",
        TARGET.as_millis(),
        mib((LEN * size_of::<f32>()) as u64)
    );

    // Raw opencl3: drop the buffer while its kernel runs.
    let raw = RawSpin::new(&ctx)?;
    let mut buffer = raw.buffer(LEN)?;
    raw.fill(&mut buffer, 1.0)?.wait()?;
    let freed = FreedAt::watch(&buffer)?;
    let kernel = raw.spin(&buffer, N, iters)?;
    let called = Instant::now();
    drop(buffer); // clReleaseMemObject
    let returned = Instant::now();
    kernel.wait()?;
    let kernel_ended = Instant::now();
    let raw_row = Row {
        approach: "raw opencl3: drop the buffer",
        call: returned - called,
        returned,
        kernel_ended,
        freed: freed.wait(GRACE),
        says: "nothing".into(),
    };

    // cl-lifetime: release().
    let buffer = ctx.buffer::<f32>(LEN)?;
    queue.fill(&buffer, 1.0)?.wait()?;
    let freed = FreedAt::watch(&buffer)?;
    let kernel =
        // SAFETY: spin touches buffer[i], i < N, below buffer's LEN.
        unsafe { queue.launch(&spin, &[N], &[Arg::read_write(&buffer), Arg::scalar(iters)]) }?;
    queue.flush()?;
    let called = Instant::now();
    let report = buffer.release()?;
    let returned = Instant::now();
    let live = ctx.memory_stats().live_bytes;
    kernel.wait()?;
    let kernel_ended = Instant::now();
    let ours = Row {
        approach: "cl-lifetime: release()",
        call: returned - called,
        returned,
        kernel_ended,
        freed: freed.wait(GRACE),
        says: format!(
            "freed: {}, waited on {} event(s); live MiB: {}",
            report.freed,
            report.waited_on,
            mib(live)
        ),
    };

    let rows = [raw_row, ours];
    print_table(
        &[
            "approach",
            "release call (ms)",
            "kernel ended (ms after return)",
            "memory freed (ms after return)",
            "MiB held at return",
            "the release's report",
        ],
        &rows
            .iter()
            .map(|r| {
                vec![
                    r.approach.to_string(),
                    format!("{:.3}", r.call.as_secs_f64() * 1e3),
                    r.after_return(r.kernel_ended),
                    r.freed.map_or_else(
                        || format!("not within {} s", GRACE.as_secs()),
                        |t| r.after_return(t),
                    ),
                    mib(r.held_at_return()),
                    r.says.clone(),
                ]
            })
            .collect::<Vec<_>>(),
    );
    println!();
    for r in &rows {
        match r.freed {
            Some(freed) if freed > r.returned => println!(
                "{}: the memory was still held for {} ms after the release returned.",
                r.approach,
                ms(freed - r.returned)
            ),
            Some(freed) => println!(
                "{}: the memory was freed {} µs before the release returned.",
                r.approach,
                us(r.returned - freed)
            ),
            None => println!(
                "{}: the memory was not freed within {} s.",
                r.approach,
                GRACE.as_secs()
            ),
        }
    }
    Ok(())
}
