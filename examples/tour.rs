//! A tour of the problem cl-lifetime solves, measured live on one OpenCL device.
//!
//! A `spin` kernel (kernels/busy.cl), calibrated to run for about 300 ms, keeps a buffer
//! busy while the host lets go of that buffer. Every row times, from the kernel's launch:
//! when the release was called and when it returned, when the memory was really freed
//! (the buffer's destructor callback, which only records the time) and when the kernel
//! ended. The rows:
//!
//! 1. raw `opencl3`, as a user without this library writes it: drop the buffer.
//! 2. cl-lifetime: `ClBuffer::release`, which waits on exactly the buffer's own events.
//! 3. cl-lifetime releasing a buffer the kernel does not use: it waits for that buffer's
//!    own commands, long done, and not for the kernel. (NVIDIA's `clReleaseMemObject`
//!    itself still blocks until the context's running work ends, for any buffer that was
//!    ever used on the device; the "waited for" column shows how much of the time was the
//!    library's own wait.)
//! 4. raw `opencl3` with the usual fix, `clFinish` before the release, on that same kind
//!    of unrelated buffer: it waits for the whole queue all the same.
//!
//! Last, it counts how often a non-blocking read into host memory is still pending once the
//! next command of its in-order queue has completed (why a record keeps host transfers
//! until they have ended themselves).
//!
//! On PoCL the raw release returns at once and the memory stays allocated until the
//! kernel ends; on NVIDIA the raw release blocks the host until the kernel ends. With
//! cl-lifetime the release returns after the buffer's kernel has ended, with the memory
//! already gone, on both.
//!
//! Run it with `make demo`, or pick a device and run it directly:
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example tour
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name);
//! `CL_LIFETIME_KERNELS` names the folder(s) holding `busy.cl` when the binary runs away
//! from its source tree.

use std::ffi::c_void;
use std::ptr;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cl_lifetime::{Arg, ClStatus, Context, Kernel, Queue};
use opencl3::event::{CL_COMPLETE, Event as RawEvent};
use opencl3::memory::Buffer;
use opencl3::types::{cl_event, cl_int, cl_mem};

mod common;
use common::{Busy, LiveMem, RawSpin, ms};

/// How long one launch of the `spin` kernel should run.
const TARGET: Duration = Duration::from_millis(300);
/// Work items per launch (and elements per buffer).
const N: usize = 1 << 16;
/// How long the host lets the kernel run before it lets go of a buffer.
const HEAD_START: Duration = Duration::from_millis(50);
/// How long to wait for a callback that has not fired yet.
const CALLBACK_GRACE: Duration = Duration::from_secs(2);

fn main() -> anyhow::Result<()> {
    let Busy {
        ctx,
        queue,
        spin,
        iters,
    } = Busy::start(N, TARGET)?;
    println!(
        "spin kernel: {N} work items x {iters} iterations, about {} ms per launch\n",
        TARGET.as_millis()
    );

    let raw = Raw::new(&ctx)?;
    let rows = [
        raw.release_in_use(iters)?,
        release_in_use(&ctx, &queue, &spin, iters)?,
        release_unrelated(&ctx, &queue, &spin, iters)?,
        raw.finish_then_release_unrelated(iters)?,
    ];
    print_table(&rows);
    println!();
    summarise(&rows);
    raw.late_host_reads()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Timing: callbacks that only record when they ran.
// ---------------------------------------------------------------------------------------

/// A moment an OpenCL callback records. Kept for the whole run on purpose (a few bytes per
/// row): the pointer handed to OpenCL must stay valid however late, or whether, the
/// callback runs.
type Mark = &'static OnceLock<Instant>;

/// Every mark made: listed so that each stays reachable, which a leak checker
/// (`make leakcheck`) tells apart from memory lost.
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

fn new_mark() -> Mark {
    let mark: Mark = Box::leak(Box::new(OnceLock::new()));
    MARKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(mark);
    mark
}

fn user_data(mark: Mark) -> *mut c_void {
    ptr::from_ref(mark).cast_mut().cast()
}

/// The destructor callback: records the time and nothing else (no OpenCL calls in a
/// callback, design trap "nothing blocking in callbacks" in docs/design.md).
extern "C" fn on_mem_freed(_mem: cl_mem, user_data: *mut c_void) {
    // SAFETY: OpenCL passes back the `user_data` given at registration, which is always a
    // `Mark`: a leaked `&'static OnceLock<Instant>`, valid for the rest of the process.
    let mark = unsafe { &*user_data.cast::<OnceLock<Instant>>() };
    let _ = mark.set(Instant::now());
}

/// The event callback for `CL_COMPLETE`: records the time and nothing else.
extern "C" fn on_event_done(_event: cl_event, _status: cl_int, user_data: *mut c_void) {
    // SAFETY: as in `on_mem_freed`: `user_data` is always a leaked `Mark`.
    let mark = unsafe { &*user_data.cast::<OnceLock<Instant>>() };
    let _ = mark.set(Instant::now());
}

/// Records when `buffer`'s memory object is destroyed: when the memory is really freed.
fn watch_mem(buffer: &impl LiveMem) -> anyhow::Result<Mark> {
    let mark = new_mark();
    // SAFETY: the cl_mem is live (`buffer` is borrowed, so not yet released); the callback
    // only stores an `Instant` through `user_data`, a `Mark` valid for the whole process.
    unsafe {
        opencl3::memory::set_mem_object_destructor_callback(
            buffer.live_mem(),
            on_mem_freed,
            user_data(mark),
        )
    }
    .map_err(|s| anyhow!("clSetMemObjectDestructorCallback failed: {}", ClStatus(s)))?;
    Ok(mark)
}

/// Records when the command of `event` ends (or fails).
fn watch_event(event: cl_event) -> anyhow::Result<Mark> {
    let mark = new_mark();
    opencl3::event::set_event_callback(event, CL_COMPLETE, on_event_done, user_data(mark))
        .map_err(|s| anyhow!("clSetEventCallback failed: {}", ClStatus(s)))?;
    Ok(mark)
}

/// When `mark` fired, waiting a little for a callback that is running late.
fn settle(mark: Mark) -> Option<Instant> {
    let deadline = Instant::now() + CALLBACK_GRACE;
    while mark.get().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    mark.get().copied()
}

/// One row of the table; times are from the launch of the kernel.
struct Row {
    approach: &'static str,
    called: Duration,
    returned: Duration,
    freed: Option<Duration>,
    kernel_end: Option<Duration>,
    waited_for: String,
    /// How long the approach's own wait took (`ReleaseReport::waited`, or `clFinish`).
    waited: Option<Duration>,
}

/// What the host saw of one release, as instants.
struct Observed {
    launched: Instant,
    called: Instant,
    returned: Instant,
    /// The buffer's destructor callback.
    freed: Mark,
    /// The kernel's completion callback.
    kernel_done: Mark,
    /// When a wait on the kernel's event, made after the release, returned.
    kernel_waited: Instant,
}

impl Observed {
    fn row(self, approach: &'static str, waited_for: String, waited: Option<Duration>) -> Row {
        let since = |t: Instant| t.saturating_duration_since(self.launched);
        // Both the callback and the wait see the end after it happened: the earlier of
        // the two is the closer bound.
        let kernel_end = match settle(self.kernel_done) {
            Some(done) => done.min(self.kernel_waited),
            None => self.kernel_waited,
        };
        Row {
            approach,
            called: since(self.called),
            returned: since(self.returned),
            freed: settle(self.freed).map(since),
            kernel_end: Some(since(kernel_end)),
            waited_for,
            waited,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Rows 2 and 3: cl-lifetime.
// ---------------------------------------------------------------------------------------

/// Row 2: release a buffer while the kernel that uses it runs.
fn release_in_use(ctx: &Context, queue: &Queue, spin: &Kernel, iters: u32) -> anyhow::Result<Row> {
    let buf = ctx.buffer::<f32>(N)?;
    queue.fill(&buf, 1.0)?;
    let freed = watch_mem(&buf)?;

    let launched = Instant::now();
    // SAFETY: `spin` is busy.cl's spin (main passes it): it touches buf[i], i < N, buf's
    // length.
    let kernel = unsafe { queue.launch(spin, &[N], &[Arg::read_write(&buf), Arg::scalar(iters)]) }?;
    queue.flush()?;
    let kernel_done = watch_event(kernel.as_raw())?;
    thread::sleep(HEAD_START);

    let called = Instant::now();
    let report = buf.release()?;
    let returned = Instant::now();
    kernel.wait()?;
    let kernel_waited = Instant::now();

    let waited_for = format!("{} (its kernel)", events(report.waited_on));
    Ok(Observed {
        launched,
        called,
        returned,
        freed,
        kernel_done,
        kernel_waited,
    }
    .row(
        "cl-lifetime: release() buffer in use",
        waited_for,
        Some(report.waited),
    ))
}

/// Row 3: release a buffer the running kernel does not use (another buffer is).
fn release_unrelated(
    ctx: &Context,
    queue: &Queue,
    spin: &Kernel,
    iters: u32,
) -> anyhow::Result<Row> {
    let busy = ctx.buffer::<f32>(N)?;
    let other = ctx.buffer::<f32>(N)?;
    queue.fill(&busy, 1.0)?;
    queue.fill(&other, 1.0)?; // `other` has a command of its own, done before the kernel
    let freed = watch_mem(&other)?;

    let launched = Instant::now();
    let kernel =
        // SAFETY: `spin` is busy.cl's spin (main passes it): it touches busy[i], i < N, busy's
        // length.
        unsafe { queue.launch(spin, &[N], &[Arg::read_write(&busy), Arg::scalar(iters)]) }?;
    queue.flush()?;
    let kernel_done = watch_event(kernel.as_raw())?;
    thread::sleep(HEAD_START);

    let called = Instant::now();
    let report = other.release()?;
    let returned = Instant::now();
    kernel.wait()?;
    let kernel_waited = Instant::now();
    busy.release()?;

    let waited_for = format!("{} (its own fill had ended)", events(report.waited_on));
    Ok(Observed {
        launched,
        called,
        returned,
        freed,
        kernel_done,
        kernel_waited,
    }
    .row(
        "cl-lifetime: release() unrelated buffer",
        waited_for,
        Some(report.waited),
    ))
}

// ---------------------------------------------------------------------------------------
// Rows 1 and 4: raw opencl3, as a user without this library writes it.
// ---------------------------------------------------------------------------------------

/// Rows 1 and 4 on raw `opencl3` objects of their own ([`RawSpin`]).
struct Raw(RawSpin);

impl Raw {
    fn new(ctx: &Context) -> anyhow::Result<Raw> {
        RawSpin::new(ctx).map(Raw)
    }

    /// A buffer of `N` ones.
    fn buffer(&self) -> anyhow::Result<Buffer<f32>> {
        let mut buffer = self.0.buffer(N)?;
        self.0.fill(&mut buffer, 1.0)?.wait()?;
        Ok(buffer)
    }

    /// Launches `spin` on `buffer` and submits it.
    fn launch(&self, buffer: &Buffer<f32>, iters: u32) -> anyhow::Result<RawEvent> {
        self.0.spin(buffer, N, iters)
    }

    /// Row 1: drop the buffer while the kernel that uses it runs.
    fn release_in_use(&self, iters: u32) -> anyhow::Result<Row> {
        let buffer = self.buffer()?;
        let freed = watch_mem(&buffer)?;

        let launched = Instant::now();
        let kernel = self.launch(&buffer, iters)?;
        let kernel_done = watch_event(kernel.get())?;
        thread::sleep(HEAD_START);

        let called = Instant::now();
        drop(buffer); // clReleaseMemObject
        let returned = Instant::now();
        kernel.wait()?;
        let kernel_waited = Instant::now();

        let waited_for = "nothing it asked for".to_string();
        Ok(Observed {
            launched,
            called,
            returned,
            freed,
            kernel_done,
            kernel_waited,
        }
        .row("raw opencl3: drop buffer in use", waited_for, None))
    }

    /// Row 4: `clFinish`, then drop a buffer the running kernel does not use.
    fn finish_then_release_unrelated(&self, iters: u32) -> anyhow::Result<Row> {
        let busy = self.buffer()?;
        let other = self.buffer()?;
        let freed = watch_mem(&other)?;

        let launched = Instant::now();
        let kernel = self.launch(&busy, iters)?;
        let kernel_done = watch_event(kernel.get())?;
        thread::sleep(HEAD_START);

        let called = Instant::now();
        self.0.queue.finish()?;
        let finished = called.elapsed();
        drop(other);
        let returned = Instant::now();
        kernel.wait()?;
        let kernel_waited = Instant::now();
        drop(busy);

        let waited_for = "the whole queue (clFinish)".to_string();
        Ok(Observed {
            launched,
            called,
            returned,
            freed,
            kernel_done,
            kernel_waited,
        }
        .row(
            "raw opencl3: clFinish, drop unrelated",
            waited_for,
            Some(finished),
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Last line: host reads that end after the next command of their queue.
// ---------------------------------------------------------------------------------------

impl Raw {
    /// How often a non-blocking read into ordinary host memory is still pending once the
    /// next command of its in-order queue (a 4-byte fill) has completed: where it happens,
    /// a record cannot infer a host transfer's end from its queue's order (design trap
    /// "pageable reads complete late"; the tracker's *late ends* rule).
    fn late_host_reads(&self) -> anyhow::Result<()> {
        const TRIES: usize = 100;
        let mut line = Vec::new();
        for len in [1 << 10, 1 << 16, 1 << 20] {
            let mut buffer = self.0.buffer(len)?;
            self.0.fill(&mut buffer, 1.0)?.wait()?;
            let mut host = vec![0f32; len];
            let mut late = 0;
            for _ in 0..TRIES {
                // SAFETY: `host` is as long as the buffer and is neither read nor moved
                // until the read's event has ended (waited below).
                let read = unsafe {
                    self.0.queue.enqueue_read_buffer(
                        &buffer,
                        opencl3::types::CL_NON_BLOCKING,
                        0,
                        &mut host,
                        &[],
                    )
                }?;
                // SAFETY: four bytes inside the buffer; the pattern is copied at once.
                let next = unsafe {
                    self.0
                        .queue
                        .enqueue_fill_buffer(&mut buffer, &[2f32], 0, 4, &[])
                }?;
                next.wait()?;
                if read.command_execution_status()?.0 != CL_COMPLETE {
                    late += 1;
                }
                read.wait()?;
            }
            line.push(format!("{late} of {TRIES} at {} KiB", len * 4 / 1024));
        }
        println!(
            "A non-blocking read into host memory was still pending when the next command \
             of its in-order queue had completed: {}. Where this is not 0 (NVIDIA copies \
             into ordinary host memory on a thread of its own, after the command \
             completes on the device), a command's end does not say that the transfers \
             before it have ended, so cl-lifetime waits for each host transfer itself \
             before the host memory or the buffer goes.",
            line.join(", ")
        );
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------------------

/// A short duration for prose: microseconds below a millisecond.
fn short(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{} µs", d.as_micros())
    } else {
        format!("{} ms", ms(d))
    }
}

fn events(n: usize) -> String {
    if n == 1 {
        "1 event".to_string()
    } else {
        format!("{n} events")
    }
}

fn ms_or(d: Option<Duration>, missing: &str) -> String {
    d.map_or_else(|| missing.to_string(), ms)
}

fn print_table(rows: &[Row]) {
    let header = [
        "approach",
        "release called (ms)",
        "release returned (ms)",
        "memory freed (callback, ms)",
        "kernel ended (ms)",
        "waited for",
    ];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.approach.to_string(),
                ms(r.called),
                ms(r.returned),
                ms_or(r.freed, "not yet"),
                ms_or(r.kernel_end, "?"),
                match r.waited {
                    Some(w) => format!("{}, {} ms", r.waited_for, ms(w)),
                    None => r.waited_for.clone(),
                },
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &cells {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
            match i {
                0 => out.push_str(&format!("{cell:<w$}")),
                5 => out.push_str(&format!(" | {cell}")),
                _ => out.push_str(&format!(" | {cell:>w$}")),
            }
        }
        println!("{out}");
    };
    line(&header.map(str::to_string));
    let rule: Vec<String> = width.iter().map(|&w| "-".repeat(w)).collect();
    println!("{}", rule.join("-|-"));
    for row in &cells {
        line(row);
    }
}

/// What the rows mean on this device, in two lines computed from the numbers.
fn summarise(rows: &[Row]) {
    let [raw, ours, unrelated, finish] = rows else {
        return;
    };
    // Callbacks and waits see an end a little after it happened: allow for that.
    let slack = TARGET / 30;
    let end = |r: &Row| r.kernel_end.unwrap_or_default();
    let took = |r: &Row| r.returned.saturating_sub(r.called);

    let raw_line = if took(raw) < slack {
        match raw.freed {
            Some(freed) if freed + slack >= end(raw) => format!(
                "the raw release returned in {} but the memory stayed allocated until {} ms, \
                 when the kernel ended",
                short(took(raw)),
                ms(freed)
            ),
            Some(freed) => format!(
                "the raw release returned in {} and the memory was freed at {} ms, before the \
                 kernel ended at {} ms",
                short(took(raw)),
                ms(freed),
                ms(end(raw))
            ),
            None => format!(
                "the raw release returned in {} and the memory was not freed within {} s",
                short(took(raw)),
                CALLBACK_GRACE.as_secs()
            ),
        }
    } else {
        let freed = match raw.freed {
            Some(freed) if freed + slack < end(raw) => {
                format!(
                    "; its destructor callback fired at {} ms, before the kernel",
                    ms(freed)
                )
            }
            _ => String::new(),
        };
        format!(
            "the raw release blocked the host for {} (the kernel ended at {} ms){freed}",
            short(took(raw)),
            ms(end(raw))
        )
    };
    println!("On this device {raw_line}.");

    let ours_ok = ours.returned + slack >= end(ours)
        && ours.freed.is_some_and(|f| f <= ours.returned + slack);
    let ours_line = if ours_ok {
        "release() returned after its kernel ended, with the memory already freed".to_string()
    } else {
        format!(
            "release() returned at {} ms, kernel ended at {} ms, memory freed at {} ms \
             (unexpected: please report)",
            ms(ours.returned),
            ms(end(ours)),
            ms_or(ours.freed, "not yet")
        )
    };
    let own_wait = unrelated.waited.unwrap_or_default();
    let unrelated_line = if took(unrelated) < slack {
        format!(
            "an unrelated buffer went in {} (clFinish first: {})",
            short(took(unrelated)),
            short(took(finish))
        )
    } else {
        // The library's own wait was short: the rest is the driver's clReleaseMemObject.
        format!(
            "an unrelated buffer waited {} for its own events, yet the driver's \
             clReleaseMemObject held the host for {} more (clFinish first: {})",
            short(own_wait),
            short(took(unrelated).saturating_sub(own_wait)),
            short(took(finish))
        )
    };
    println!("cl-lifetime: {ours_line}; {unrelated_line}.");
}
