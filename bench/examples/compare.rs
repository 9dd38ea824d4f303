//! The comparative benchmark: cl-lifetime against raw `opencl3`, every figure a ratio
//! against a baseline measured in the same run.
//!
//! ```text
//! make bench                 # cargo run --release --example compare
//! make bench QUICK=1         # ... -- --quick (under 2 minutes on PoCL, 2 cores)
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example compare -- --quick
//! ```
//!
//! Comparisons (numbered as in the benchmark issue):
//!
//! 1. **Tracking overhead**: host time per `tiny` enqueue, cl-lifetime `Queue::launch`
//!    against raw `clEnqueueNDRangeKernel` with the argument set once, on one queue and on
//!    two alternating queues (raw code passes the previous event and flushes by hand). As
//!    in `enqueue_cost.rs` beside this file, each batch of launches waits on a user event
//!    until the clock stops, so the host path alone is timed. A second baseline, on one
//!    and two queues, is the same raw code holding each event until the next batch and
//!    releasing it there, inside the loop: raw code that keeps the library's guarantee
//!    (each command's event held until it has ended), as the buffer's record does with
//!    superseded events (the tracker's *shadow* rule).
//! 2. **Precise release**: host time to release a buffer whose own work has ended while
//!    another queue runs a long `spin` kernel on another buffer: `ClBuffer::release`
//!    against `clFinish` on both queues then `clReleaseMemObject` (the serialising fix),
//!    and against a bare `clReleaseMemObject`.
//! 3. **Allocation**: a pooled acquire + release (with and without a first use) against
//!    `clCreateBuffer` + a 4-byte first use + `clReleaseMemObject`, as in `alloc_cost.rs`
//!    beside this file.
//! 4. **Pipeline**: iterations of allocate, write, kernel, read, release on 1 and 4 queues;
//!    iterations per second and peak device bytes. The `clFinish` baseline ends every
//!    round; every other variant keeps up to [`DEPTH`] iterations in flight per queue
//!    (non-blocking write and read, each result checked when its slot comes round again),
//!    which costs the raw and non-pooled variants a buffer per iteration in flight, and
//!    the pool (stream-ordered reuse through `Pool::acquire_on`) none.
//! 5. **Scale**: release time of an idle buffer against the number of commands it has
//!    seen and the number of live buffers. Each repetition releases an unused buffer
//!    first (the first driver call after a burst of launches pays for the driver's
//!    clean-up, see `ScaleSample`), then the measured one; both are reported.
//! 6. **Peer**: the pipeline of 4 written with the `ocl` crate (a `Buffer` per iteration,
//!    drop at the end), in its safe blocking form and in its `unsafe` non-blocking form
//!    (`block(false)`, [`DEPTH`] in flight per queue), run in the same interleaving as
//!    comparison 4.
//! 7. **Blocking host calls**: a `tiny` launch, then a blocking read, write, or map and
//!    unmap of its 4 KiB buffer, against raw opencl3's blocking (`CL_BLOCKING`) calls.
//! 8. **BabelStream**: copy, mul, add, triad and dot (with the read-back of its partial
//!    sums), written from BabelStream's published definitions and run on `ClBuffer`s
//!    against the same kernels on raw opencl3 (2^25 doubles and 100 iterations, 2^22 and 20
//!    in quick mode); each side passes BabelStream's solution check.
//!
//! 9. **Views**: two `spin` writers, one per half of a buffer on two queues, then a read of
//!    half A: `ClBuffer::split_at` views against the same buffer passed whole (the
//!    writers' records overlap, so half A waits for both) and against two sub-buffers made
//!    by hand with raw events; milliseconds per round until half A is back and until both
//!    halves are written.
//! 10. **Streaming**: frames produced on the host, written, incremented and read back on 3
//!     queues, every element checked on the host, [`DEPTH`] frames in flight per queue, with
//!     the same buffers and host memory reused (`write_lent`, `read_into`), against the
//!     same in raw opencl3 holding each frame's events.
//! 11. **Two devices**: a pipeline that alternates the two devices of one context (the
//!     platform of `CL_LIFETIME_DEVICE` when it has two, else the first that does) on one
//!     buffer set, each stage on the device that owns its buffer: a write and a kernel on
//!     device 0, a kernel reading that buffer on device 1, a kernel and a read on device 0,
//!     [`DEPTH`] iterations in flight, each result checked on the host. The library's
//!     buffers come from a pool per device (`Pool::acquire_on` the owning device's queue,
//!     `release_deferred` once the read is enqueued) with no event in the code, against
//!     raw opencl3 on the same context and devices with a `clCreateBuffer` per buffer and
//!     iteration, each producer's event in its consumer's wait list, the producer's queue
//!     flushed first, and each buffer's events waited for before its release. µs per
//!     iteration and peak device bytes per device; without two devices on one platform it
//!     says so and records nothing.
//! 12. **View chunks**: host time per `tiny` launch on a view, in gated batches as in 1, on
//!     16 chunks spread over a buffer split into 16,384 (each launched once before:
//!     16,384 views passed to kernels) against the same launches on a buffer split into 16
//!     (goal: within 1.2x).
//! 13. **Pooled views**: a service's loop, 200 iterations: acquire 4 MiB from a `Pool`, run
//!     `spin_from` on each half on its own queue, release; each half a view (`split_at`)
//!     against the whole buffer with the half's first element as an argument. µs per
//!     iteration (goal: within 1.05x), memory objects allocated from the driver and peak
//!     device MiB (goal: equal), each run on a context of its own.
//!
//! `CL_LIFETIME_COMPARE_ONLY=7,8` runs only the comparisons it lists (4 also runs 6).
//!
//! # Method
//!
//! Each variant runs R repetitions (R >= 5), interleaved with the other variants of its
//! comparison in an order that reverses every repetition. Reported: the median and the
//! min-max over the repetitions, and the ratio ours / theirs of the medians. For costs the
//! ratio is lower-is-better; for throughput (iterations per second) higher-is-better; the
//! metric name says which.
//!
//! Output: `target/bench/report.json`, `report.md` and `report.svg` (the target folder is
//! `CARGO_TARGET_DIR` when set).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::ptr;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use cl_lifetime::{Arg, ClBuffer, Context, Kernel, PendingRead, Pool, PoolOptions, Queue, View};
use opencl3::command_queue::{self as clq, CL_QUEUE_PROPERTIES, CommandQueue};
use opencl3::event as cle;
use opencl3::kernel::Kernel as RawKernel;
use opencl3::memory::{self as clm, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
use opencl3::types::{cl_context, cl_event, cl_mem};
use plotters::prelude::*;

#[path = "parts/two_devices.rs"]
mod two_devices;
#[path = "parts/views.rs"]
mod views;

use harness::{
    Keep, KeptEvents, ProgramHandle, RawGate, Stats, Variant, calibrate, cl_err, enqueue_1d,
    interleave, interleave_with, median, release_event, set_arg, size_label,
};

/// Work items of a `tiny` launch (and i32 elements of its buffer).
const TINY_ITEMS: usize = 64;
/// Launches per gated batch (comparison 1).
const BATCH: usize = 1_000;
/// Work items per `spin` launch (and f32 elements of its buffer).
const SPIN_ITEMS: usize = 1 << 16;
/// How long the host lets the `spin` kernel run before it releases the other buffer.
const HEAD_START: Duration = Duration::from_millis(5);
/// The first-use command of comparison 3: a fill of this pattern over the first 4 bytes.
const PATTERN: u32 = 0x5EED_5EED;
/// i32 elements per pipeline buffer (256 KiB).
const PIPE_ITEMS: usize = 1 << 16;
const PIPE_BYTES: u64 = (PIPE_ITEMS * size_of::<i32>()) as u64;
/// Pipeline iterations in flight per queue, for every variant that can overlap them (all
/// but the `clFinish` one and the blocking `ocl` peer).
const DEPTH: usize = 4;

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let quick = parse_args()?;
    let plan = Plan::new(quick);
    let started = Instant::now();

    let ctx = Context::from_env()?;
    let device = ctx.device();
    let device_name = format!("{} ({})", device.name(), device.version());
    let driver = format!(
        "{}, driver {}",
        device.platform_name(),
        device.driver_version()
    );
    println!("device:   {device_name}");
    println!("platform: {driver}");
    println!(
        "mode:     {}, {} repetitions per variant, interleaved\n",
        if quick { "quick" } else { "full" },
        plan.reps
    );

    let tiny = ctx.program("tiny.cl", "")?;
    let busy = ctx.program("busy.cl", "")?;
    let source = format!(
        "{}\n{}",
        std::fs::read_to_string(tiny.file())
            .with_context(|| format!("reading {}", tiny.file().display()))?,
        std::fs::read_to_string(busy.file())
            .with_context(|| format!("reading {}", busy.file().display()))?
    );
    let raw = Raw::new(&ctx, &source)?;
    let lib = Lib {
        ctx: ctx.clone(),
        queues: [ctx.queue()?, ctx.queue()?],
        tiny: tiny.kernel("tiny")?,
        spin: busy.kernel("spin")?,
    };

    let mut report = Report {
        device: device_name,
        driver,
        rows: Vec::new(),
        notes: Vec::new(),
    };
    section("1. tracking overhead", || {
        tracking(&plan, &raw, &lib, &mut report)
    })?;
    section("2. precise release", || {
        precise_release(&plan, &raw, &lib, &mut report)
    })?;
    section("3. allocation", || {
        allocation(&plan, &raw, &lib, &mut report)
    })?;
    section("4. pipeline", || {
        pipeline(&plan, &raw, ctx.device(), &source, &mut report)
    })?;
    section("5. scale", || scale(&plan, &raw, &lib, &mut report))?;
    section("7. blocking host calls", || {
        blocking(&plan, &raw, &lib, &mut report)
    })?;
    section("8. BabelStream", || {
        babelstream(&plan, &raw, &lib, &mut report)
    })?;
    section("9. views", || {
        views::views(&plan, &raw, &lib, &busy, &mut report)
    })?;
    section("10. streaming", || {
        views::streaming(&plan, &raw, &mut report)
    })?;
    section("11. two devices", || {
        two_devices::two_devices(&plan, &mut report)
    })?;
    section("12. view chunks", || {
        views::view_chunks(&plan, &lib, &mut report)
    })?;
    section("13. pooled views", || {
        views::pooled_views(&plan, &lib, &mut report)
    })?;
    ctx.wait_deferred();

    let dir = bench_dir()?;
    report.write(&dir)?;
    println!(
        "\nwrote {} (report.json, report.md, report.svg) in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs comparison `name` unless `CL_LIFETIME_COMPARE_ONLY` names others (a list of
/// comparison numbers, such as `1,6`); the report then holds only those run.
fn section(name: &str, body: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    if let Ok(only) = std::env::var("CL_LIFETIME_COMPARE_ONLY") {
        let number = name.split('.').next().unwrap_or_default();
        if !only.split(',').any(|n| n.trim() == number) {
            return Ok(());
        }
    }
    let start = Instant::now();
    println!("== {name}");
    body().with_context(|| format!("comparison {name}"))?;
    println!("   ({:.1} s)\n", start.elapsed().as_secs_f64());
    Ok(())
}

fn parse_args() -> anyhow::Result<bool> {
    let mut quick = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => quick = true,
            // `cargo bench`-style harness flag, harmless to ignore.
            "--bench" => {}
            other => bail!("unknown argument {other:?} (expected --quick)"),
        }
    }
    Ok(quick)
}

/// `target/bench` of the workspace (the repository root), created.
fn bench_dir() -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // This package's folder is bench/ in the repository (the workspace's root).
            let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
            bench.parent().unwrap_or(bench).join("target")
        });
    let dir = target.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The sizes of the run.
struct Plan {
    quick: bool,
    reps: usize,
    /// Comparison 1: launches per repetition.
    launches: usize,
    /// Comparison 2: how long the `spin` kernel on the other queue runs.
    spin: Duration,
    /// Comparison 3: how long one repetition of one variant should take.
    alloc_target: Duration,
    /// Comparison 4: iterations per repetition.
    iterations: usize,
    /// Comparison 5: commands seen, live buffers.
    commands: Vec<usize>,
    live: Vec<usize>,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                reps: 7,
                launches: 20 * BATCH,
                spin: Duration::from_millis(30),
                alloc_target: Duration::from_millis(60),
                iterations: 300,
                commands: vec![1, 1_000, 100_000],
                live: vec![1, 1_000, 20_000],
            }
        } else {
            Plan {
                quick,
                reps: 9,
                launches: 20 * BATCH,
                spin: Duration::from_millis(60),
                alloc_target: Duration::from_millis(150),
                iterations: 1_000,
                commands: vec![1, 1_000, 1_000_000],
                live: vec![1, 1_000, 100_000],
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The report.
// ---------------------------------------------------------------------------------------

struct Row {
    comparison: String,
    variant: String,
    baseline: String,
    metric: String,
    unit: String,
    ours: Stats,
    theirs: Stats,
    higher_is_better: bool,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.ours.median / self.theirs.median
    }

    fn better(&self) -> bool {
        if self.higher_is_better {
            self.ratio() >= 1.0
        } else {
            self.ratio() <= 1.0
        }
    }
}

struct Report {
    device: String,
    driver: String,
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Report {
    /// A cost row (lower is better).
    #[allow(clippy::too_many_arguments)]
    fn cost(
        &mut self,
        comparison: &str,
        variant: &str,
        baseline: &str,
        what: &str,
        unit: &str,
        ours: &[f64],
        theirs: &[f64],
    ) {
        self.push(
            comparison, variant, baseline, what, unit, ours, theirs, false,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        comparison: &str,
        variant: &str,
        baseline: &str,
        what: &str,
        unit: &str,
        ours: &[f64],
        theirs: &[f64],
        higher_is_better: bool,
    ) {
        let row = Row {
            comparison: comparison.to_string(),
            variant: variant.to_string(),
            baseline: baseline.to_string(),
            metric: format!(
                "{what} (ratio: {} is better)",
                if higher_is_better { "higher" } else { "lower" }
            ),
            unit: unit.to_string(),
            ours: Stats::of(ours),
            theirs: Stats::of(theirs),
            higher_is_better,
        };
        println!(
            "   {:<44} vs {:<40} ours {} [{}-{}] theirs {} [{}-{}] {}; ratio {}",
            row.variant,
            row.baseline,
            num(row.ours.median),
            num(row.ours.min),
            num(row.ours.max),
            num(row.theirs.median),
            num(row.theirs.min),
            num(row.theirs.max),
            row.unit,
            ratio_text(row.ratio())
        );
        self.rows.push(row);
    }

    fn write(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        let json: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "comparison": r.comparison,
                    "variant": r.variant,
                    "baseline": r.baseline,
                    "device": self.device,
                    "metric": r.metric,
                    "unit": r.unit,
                    "ours": r.ours.median,
                    "theirs": r.theirs.median,
                    "ratio": r.ratio(),
                    "ours_min": r.ours.min,
                    "ours_max": r.ours.max,
                    "theirs_min": r.theirs.min,
                    "theirs_max": r.theirs.max,
                })
            })
            .collect();
        std::fs::write(
            dir.join("report.json"),
            serde_json::to_string_pretty(&json)? + "\n",
        )?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        self.chart(&dir.join("report.svg"))?;
        Ok(())
    }

    fn markdown(&self) -> String {
        let command: Vec<String> = std::env::args().collect();
        let mut md = String::new();
        md.push_str("# cl-lifetime comparative benchmark\n\n");
        md.push_str(&format!("- device: {}\n", self.device));
        md.push_str(&format!("- platform and driver: {}\n", self.driver));
        md.push_str(&format!("- command: `{}`\n", command.join(" ")));
        md.push_str(
            "- every figure: the median over interleaved repetitions [min-max]; ratio = \
             ours / theirs of the medians, both measured in this run\n",
        );
        for note in &self.notes {
            md.push_str(&format!("- note: {note}\n"));
        }
        md.push_str(
            "\n| comparison | variant (ours) | baseline (theirs) | metric | unit | ours | \
             theirs | ratio |\n|---|---|---|---|---|---:|---:|---:|\n",
        );
        for r in &self.rows {
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} [{}-{}] | {} [{}-{}] | {} |\n",
                r.comparison,
                r.variant,
                r.baseline,
                r.metric,
                r.unit,
                num(r.ours.median),
                num(r.ours.min),
                num(r.ours.max),
                num(r.theirs.median),
                num(r.theirs.min),
                num(r.theirs.max),
                ratio_text(r.ratio())
            ));
        }
        md
    }

    /// A horizontal bar per row: its ratio on a log axis, with the 1.0 reference line.
    fn chart(&self, path: &std::path::Path) -> anyhow::Result<()> {
        let rows: Vec<&Row> = self.rows.iter().filter(|r| r.ratio().is_finite()).collect();
        let n = rows.len().max(1) as i32;
        let ratios = rows.iter().map(|r| r.ratio()).filter(|&r| r > 0.0);
        let lo = ratios.clone().fold(0.5, f64::min) / 1.5;
        let hi = ratios.fold(2.0, f64::max) * 1.5;
        let labels: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{}: {} vs {} [{}, {}]",
                    r.comparison.split(' ').next().unwrap_or(""),
                    r.variant,
                    r.baseline,
                    r.unit,
                    if r.higher_is_better {
                        "higher better"
                    } else {
                        "lower better"
                    }
                )
            })
            .collect();
        let height = 120 + 22 * n as u32;
        let root = SVGBackend::new(path, (1400, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("cl-lifetime / baseline, {}", self.device),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(720)
            .build_cartesian_2d((lo..hi).log_scale(), (0..n).into_segmented())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n as usize)
            .y_label_formatter(&|v| match v {
                // Row 0 at the top.
                SegmentValue::CenterOf(i) => labels
                    .get((n - 1 - *i) as usize)
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .label_style(("sans-serif", 11))
            .x_desc("ratio ours / theirs (log scale; green: cl-lifetime better)")
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let colour = if r.better() {
                    RGBColor(0, 150, 60).mix(0.8)
                } else {
                    RGBColor(210, 40, 40).mix(0.8)
                };
                let y = n - 1 - i as i32;
                let mut bar = Rectangle::new(
                    [
                        (lo, SegmentValue::Exact(y)),
                        (r.ratio(), SegmentValue::Exact(y + 1)),
                    ],
                    colour.filled(),
                );
                bar.set_margin(3, 3, 0, 0);
                bar
            }))
            .map_err(plot_err)?;
        chart
            .draw_series(LineSeries::new(
                [(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
                BLACK.stroke_width(2),
            ))
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
        Ok(())
    }
}

fn plot_err(e: impl std::fmt::Debug) -> anyhow::Error {
    anyhow!("drawing the chart: {e:?}")
}

/// A number with a precision that suits its size.
fn num(value: f64) -> String {
    let a = value.abs();
    if !value.is_finite() {
        format!("{value}")
    } else if a >= 1e6 {
        format!("{value:.3e}")
    } else if a >= 100.0 {
        format!("{value:.0}")
    } else if a >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.4}")
    }
}

fn ratio_text(ratio: f64) -> String {
    if ratio.is_finite() && ratio != 0.0 && ratio.abs() < 0.01 {
        format!("{ratio:.2e}")
    } else {
        format!("{ratio:.3}")
    }
}

// ---------------------------------------------------------------------------------------
// Raw opencl3: the calls a user writes without the library.
// ---------------------------------------------------------------------------------------

/// A kernel argument of the raw side.
#[derive(Clone, Copy)]
enum RawArg {
    Mem(cl_mem),
    U32(u32),
}

/// Raw queues, kernels and buffers in the library's context.
struct Raw {
    context: cl_context,
    queues: Vec<CommandQueue>,
    tiny: RawKernel,
    spin: RawKernel,
    increment: RawKernel,
    _program: ProgramHandle,
}

impl Raw {
    fn new(ctx: &Context, source: &str) -> anyhow::Result<Raw> {
        let device = ctx.device().as_raw();
        let properties = [u64::from(CL_QUEUE_PROPERTIES), 0, 0];
        let mut queues = Vec::new();
        for _ in 0..4 {
            // SAFETY: context and device are live handles of `ctx`; `properties` is a
            // zero-terminated list that outlives the call.
            let queue = unsafe {
                clq::create_command_queue_with_properties(ctx.as_raw(), device, properties.as_ptr())
            }
            .map_err(cl_err("clCreateCommandQueueWithProperties"))?;
            // The wrapper releases it on drop; the dimension count is only used by
            // opencl3's `ExecuteKernel`, which this code does not use.
            queues.push(CommandQueue::new(queue, 3));
        }
        let program = ProgramHandle::build(ctx.as_raw(), device, source)?;
        let kernel = |name: &str| program.kernel(name);
        Ok(Raw {
            context: ctx.as_raw(),
            queues,
            tiny: kernel("tiny")?,
            spin: kernel("spin")?,
            increment: kernel("increment")?,
            _program: program,
        })
    }

    fn queue(&self, q: usize) -> clq::cl_command_queue {
        self.queues[q].get()
    }

    /// `clCreateBuffer` of `bytes`, no host pointer.
    fn create(&self, bytes: usize) -> anyhow::Result<cl_mem> {
        // SAFETY: no host pointer; `bytes` is within CL_DEVICE_MAX_MEM_ALLOC_SIZE (checked
        // by the caller for the large sizes).
        unsafe { clm::create_buffer(self.context, CL_MEM_READ_WRITE, bytes, ptr::null_mut()) }
            .map_err(cl_err("clCreateBuffer"))
    }

    /// `clCreateBuffer` holding a copy of `data`.
    fn create_from<T: Copy>(&self, data: &[T]) -> anyhow::Result<cl_mem> {
        let mut copy = data.to_vec();
        // SAFETY: `copy` holds `size_of_val(data)` bytes, copied by OpenCL before the call
        // returns (CL_MEM_COPY_HOST_PTR) and not used afterwards.
        unsafe {
            clm::create_buffer(
                self.context,
                CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                size_of_val(data),
                copy.as_mut_ptr().cast(),
            )
        }
        .map_err(cl_err("clCreateBuffer"))
    }

    /// `clReleaseMemObject`.
    fn release(&self, mem: cl_mem) -> anyhow::Result<()> {
        // SAFETY: `mem` came from `create`/`create_from` and this code releases its one
        // reference exactly once, here. Commands still running on it keep it alive
        // inside the driver.
        unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))
    }

    fn set_args(&self, kernel: &RawKernel, args: &[RawArg]) -> anyhow::Result<()> {
        for (i, arg) in args.iter().enumerate() {
            let i = i as u32;
            // Every kernel of this file takes its buffers as `__global` pointers and its
            // counts as `uint`, at the positions the callers pass them; only this thread
            // uses the kernel.
            match arg {
                // SAFETY: a `__global` pointer argument, and `mem` is a live cl_mem.
                RawArg::Mem(mem) => unsafe { set_arg(kernel.get(), i, mem) }?,
                // SAFETY: a `uint` argument.
                RawArg::U32(value) => unsafe { set_arg(kernel.get(), i, value) }?,
            }
        }
        Ok(())
    }

    /// One launch over `global` items on queue `q`, waiting on `wait`; the kernel's
    /// arguments must be set. The caller owns the returned event.
    #[inline]
    fn enqueue(
        &self,
        q: usize,
        kernel: &RawKernel,
        global: usize,
        wait: &[cl_event],
    ) -> anyhow::Result<cl_event> {
        // SAFETY: the kernel's arguments are set (callers set them before launching) and
        // its buffers hold one element per work item; the wait list holds live events.
        unsafe { enqueue_1d(self.queue(q), kernel.get(), global, wait) }
    }

    /// Sets the arguments and launches; the caller owns the event.
    fn launch(
        &self,
        q: usize,
        kernel: &RawKernel,
        args: &[RawArg],
        global: usize,
    ) -> anyhow::Result<cl_event> {
        self.set_args(kernel, args)?;
        self.enqueue(q, kernel, global, &[])
    }

    /// The first use of comparison 3: a 4-byte fill at offset 0, waited for.
    fn first_use(&self, mem: cl_mem) -> anyhow::Result<()> {
        wait_release(self.fill(0, mem)?)
    }

    /// A 4-byte fill at offset 0 on queue `q`; returns its event.
    fn fill(&self, q: usize, mem: cl_mem) -> anyhow::Result<cl_event> {
        // SAFETY: `mem` is a live buffer of at least 4 bytes; the 4-byte pattern is copied
        // by OpenCL before the call returns; no wait list.
        unsafe {
            clq::enqueue_fill_buffer(
                self.queue(q),
                mem,
                ptr::from_ref(&PATTERN).cast(),
                size_of::<u32>(),
                0,
                size_of::<u32>(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueFillBuffer"))
    }

    /// A non-blocking write of `data` to `mem` on queue `q`; `data` must stay alive and
    /// unmoved (its heap block) until the returned event completes.
    fn write(&self, q: usize, mem: cl_mem, data: &[i32]) -> anyhow::Result<cl_event> {
        // SAFETY: `mem` holds at least `size_of_val(data)` bytes; the caller keeps `data`
        // alive until the write's event completes.
        unsafe {
            clq::enqueue_write_buffer(
                self.queue(q),
                mem,
                clq::CL_NON_BLOCKING,
                0,
                size_of_val(data),
                data.as_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueWriteBuffer"))
    }

    /// A non-blocking read of `mem` into `out` on queue `q`; `out` must stay alive and
    /// untouched until the returned event completes.
    fn read(&self, q: usize, mem: cl_mem, out: &mut [i32]) -> anyhow::Result<cl_event> {
        // SAFETY: `mem` holds at least `size_of_val(out)` bytes; the caller keeps `out`
        // alive and unread until the read's event completes.
        unsafe {
            clq::enqueue_read_buffer(
                self.queue(q),
                mem,
                clq::CL_NON_BLOCKING,
                0,
                size_of_val(out),
                out.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueReadBuffer"))
    }

    fn flush(&self, q: usize) -> anyhow::Result<()> {
        clq::flush(self.queue(q)).map_err(cl_err("clFlush"))
    }

    fn finish(&self, q: usize) -> anyhow::Result<()> {
        clq::finish(self.queue(q)).map_err(cl_err("clFinish"))
    }
}

/// Waits for a raw event, then releases it.
fn wait_release(event: cl_event) -> anyhow::Result<()> {
    let waited = cle::wait_for_events(&[event]).map_err(cl_err("clWaitForEvents"));
    release_event(event)?;
    waited
}

/// The library's side: queues and kernels in the main context.
struct Lib {
    ctx: Context,
    queues: [Queue; 2],
    tiny: Kernel,
    spin: Kernel,
}

/// The library's `clFinish`, as its users call it: [`Queue::finish`], which also lets
/// the queue's events be known ended without a status read (the *finished queue* rule).
fn lib_finish(queue: &Queue) -> anyhow::Result<()> {
    Ok(queue.finish()?)
}

// ---------------------------------------------------------------------------------------
// 1. Tracking overhead.
// ---------------------------------------------------------------------------------------

/// µs per enqueue of `n` raw `tiny` launches on `nq` queues, in gated batches.
fn tracking_raw(raw: &Raw, mem: cl_mem, nq: usize, n: usize, keep: Keep) -> anyhow::Result<f64> {
    raw.set_args(&raw.tiny, &[RawArg::Mem(mem)])?;
    let mut total = Duration::ZERO;
    // `Keep::Late`: each batch's events, released during the next batch's loop.
    let mut held: Vec<cl_event> = Vec::new();
    let mut left = n;
    while left > 0 {
        let batch = left.min(BATCH);
        left -= batch;
        let mut events = KeptEvents::new(keep, std::mem::take(&mut held));
        let mut gate = RawGate::new(raw.context)?;
        // The untimed lead launch: waits on the gate, and is the first launch's producer
        // with two queues (on the queue the first timed launch does not use).
        let lead_queue = nq - 1;
        let lead = raw.enqueue(lead_queue, &raw.tiny, TINY_ITEMS, &[gate.event])?;
        let start = Instant::now();
        if nq == 1 {
            release_event(lead)?;
            for _ in 0..batch {
                events.done(raw.enqueue(0, &raw.tiny, TINY_ITEMS, &[])?)?;
            }
        } else {
            let (mut previous, mut producer) = (lead, lead_queue);
            for i in 0..batch {
                let q = i % 2;
                // The producer queue must be flushed before another queue waits on its
                // event (design trap "flush before a cross-queue wait").
                raw.flush(producer)?;
                let event = raw.enqueue(q, &raw.tiny, TINY_ITEMS, &[previous])?;
                events.done(previous)?;
                (previous, producer) = (event, q);
            }
            events.done(previous)?;
        }
        events.end_loop()?;
        total += start.elapsed();
        gate.open()?;
        for q in 0..nq {
            raw.finish(q)?;
        }
        held = events.after_drain()?;
    }
    held.into_iter().try_for_each(release_event)?;
    Ok(total.as_secs_f64() * 1e6 / n as f64)
}

/// µs per enqueue of `n` cl-lifetime `tiny` launches on `nq` queues, in gated batches.
fn tracking_lib(lib: &Lib, buf: &ClBuffer<i32>, nq: usize, n: usize) -> anyhow::Result<f64> {
    let mut total = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let batch = left.min(BATCH);
        left -= batch;
        let gate = lib.ctx.user_event()?;
        // SAFETY: tiny touches buf[i], i < TINY_ITEMS, the length of the buffer every caller
        // passes.
        unsafe {
            lib.queues[nq - 1].after(&[gate.event()]).launch(
                &lib.tiny,
                &[TINY_ITEMS],
                &[Arg::read_write(buf)],
            )
        }?;
        let start = Instant::now();
        for i in 0..batch {
            // The returned event is dropped: the buffer's record keeps what it needs.
            // SAFETY: as above.
            unsafe {
                lib.queues[i % nq].launch(&lib.tiny, &[TINY_ITEMS], &[Arg::read_write(buf)])
            }?;
        }
        total += start.elapsed();
        gate.complete()?;
        for queue in &lib.queues[..nq] {
            lib_finish(queue)?;
        }
    }
    Ok(total.as_secs_f64() * 1e6 / n as f64)
}

fn tracking(plan: &Plan, raw: &Raw, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    let mem = raw.create_from(&[0i32; TINY_ITEMS])?;
    let buf = lib.ctx.buffer_from(&[0i32; TINY_ITEMS])?;
    let result = (|| -> anyhow::Result<()> {
        // Warm-up: PoCL builds the kernel at the first launch; the heap settles.
        for nq in [1, 2] {
            tracking_raw(raw, mem, nq, 2 * BATCH, Keep::No)?;
            tracking_lib(lib, &buf, nq, 2 * BATCH)?;
        }
        let n = plan.launches;
        for (nq, label) in [(1, "1 queue"), (2, "2 queues alternating")] {
            let mut variants: Vec<Variant<'_>> = vec![
                Box::new(|| tracking_raw(raw, mem, nq, n, Keep::No)),
                Box::new(|| tracking_lib(lib, &buf, nq, n)),
            ];
            variants.push(Box::new(|| tracking_raw(raw, mem, nq, n, Keep::Late)));
            let samples = interleave(plan.reps, &mut variants)?;
            report.cost(
                "1 tracking overhead",
                &format!("cl-lifetime launch, {label}"),
                &format!(
                    "raw opencl3 enqueue{}",
                    if nq == 2 {
                        ", event passed and flushed by hand"
                    } else {
                        ", args set once"
                    }
                ),
                "host time per enqueue",
                "µs",
                &samples[1],
                &samples[0],
            );
            // What the guarantee costs, reproduced in raw code: each event held until the
            // next batch (the record keeps each command's event until it has ended, its
            // buffer is released or a later command supersedes it), then freed on the
            // enqueuing thread.
            report.cost(
                "1 tracking overhead",
                &format!("cl-lifetime launch, {label}"),
                "the same raw code holding each event until the next batch, then \
                 releasing it in the loop (as the record keeps superseded events)",
                "host time per enqueue",
                "µs",
                &samples[1],
                &samples[2],
            );
        }
        Ok(())
    })();
    raw.release(mem)?;
    buf.release()?;
    result
}

// ---------------------------------------------------------------------------------------
// 2. Precise release.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum RawRelease {
    /// `clFinish` on both queues, then `clReleaseMemObject`.
    FinishBoth,
    /// `clReleaseMemObject` alone.
    Drop,
}

/// µs to release a buffer whose `tiny` launch has ended while queue 1 runs `spin`.
fn release_lib(lib: &Lib, other: &ClBuffer<f32>, iters: u32) -> anyhow::Result<f64> {
    let buf = lib.ctx.buffer_from(&[0i32; TINY_ITEMS])?;
    // SAFETY: tiny touches buf[i], i < TINY_ITEMS, buf's length.
    unsafe { lib.queues[0].launch(&lib.tiny, &[TINY_ITEMS], &[Arg::read_write(&buf)]) }?.wait()?;
    // SAFETY: spin touches other[i], i < SPIN_ITEMS, the length of the buffer the caller passes.
    let spin = unsafe {
        lib.queues[1].launch(
            &lib.spin,
            &[SPIN_ITEMS],
            &[Arg::read_write(other), Arg::scalar(iters)],
        )
    }?;
    lib.queues[1].flush()?;
    thread::sleep(HEAD_START);
    let start = Instant::now();
    let report = buf.release()?;
    let took = start.elapsed();
    spin.wait()?;
    if !report.failed.is_empty() {
        bail!("a command on the released buffer failed");
    }
    Ok(took.as_secs_f64() * 1e6)
}

fn release_raw(raw: &Raw, other: cl_mem, iters: u32, how: RawRelease) -> anyhow::Result<f64> {
    let mem = raw.create_from(&[0i32; TINY_ITEMS])?;
    wait_release(raw.launch(0, &raw.tiny, &[RawArg::Mem(mem)], TINY_ITEMS)?)?;
    let spin = raw.launch(
        1,
        &raw.spin,
        &[RawArg::Mem(other), RawArg::U32(iters)],
        SPIN_ITEMS,
    )?;
    raw.flush(1)?;
    thread::sleep(HEAD_START);
    let start = Instant::now();
    let result = (|| {
        if how == RawRelease::FinishBoth {
            raw.finish(0)?;
            raw.finish(1)?;
        }
        raw.release(mem)
    })();
    let took = start.elapsed();
    let waited = wait_release(spin);
    result?;
    waited?;
    Ok(took.as_secs_f64() * 1e6)
}

fn precise_release(plan: &Plan, raw: &Raw, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    // SAFETY: `lib.spin` is busy.cl's spin.
    let iters = unsafe { calibrate(&lib.ctx, &lib.queues[1], &lib.spin, SPIN_ITEMS, plan.spin) }?;
    println!(
        "   spin on the other queue: {SPIN_ITEMS} items x {iters} iterations (about {} ms)",
        plan.spin.as_millis()
    );
    let other = lib.ctx.buffer_from(&vec![1.0f32; SPIN_ITEMS])?;
    let other_raw = raw.create_from(&vec![1.0f32; SPIN_ITEMS])?;
    let result = (|| -> anyhow::Result<()> {
        // Warm-up: the raw kernels' first launches build them for the device.
        release_raw(raw, other_raw, 1, RawRelease::Drop)?;
        release_lib(lib, &other, 1)?;
        let mut variants: Vec<Variant<'_>> = vec![
            Box::new(|| release_lib(lib, &other, iters)),
            Box::new(|| release_raw(raw, other_raw, iters, RawRelease::FinishBoth)),
            Box::new(|| release_raw(raw, other_raw, iters, RawRelease::Drop)),
        ];
        let samples = interleave(plan.reps, &mut variants)?;
        let variant = "cl-lifetime release(), other queue busy";
        report.cost(
            "2 precise release",
            variant,
            "raw clFinish on both queues + clReleaseMemObject",
            "host time per release",
            "µs",
            &samples[0],
            &samples[1],
        );
        report.cost(
            "2 precise release",
            variant,
            "raw clReleaseMemObject (unsafe on some ICDs)",
            "host time per release",
            "µs",
            &samples[0],
            &samples[2],
        );
        Ok(())
    })();
    raw.release(other_raw)?;
    other.release()?;
    result
}

// ---------------------------------------------------------------------------------------
// 3. Allocation.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Alloc {
    /// clCreateBuffer + 4-byte fill, waited for + clReleaseMemObject.
    Raw,
    /// `Pool::acquire` + `release`.
    Pooled,
    /// `Pool::acquire` + the same fill + `release`.
    PooledUsed,
}

const ALLOCS: [Alloc; 3] = [Alloc::Raw, Alloc::Pooled, Alloc::PooledUsed];

/// `n` pairs of `variant` at `bytes`; returns the host time of the loop.
fn alloc_run(
    raw: &Raw,
    pool: &Pool,
    queue: &Queue,
    variant: Alloc,
    bytes: usize,
    n: usize,
) -> anyhow::Result<Duration> {
    let len = bytes / size_of::<u32>();
    let start = Instant::now();
    match variant {
        Alloc::Raw => {
            for _ in 0..n {
                let mem = raw.create(bytes)?;
                let used = raw.first_use(mem);
                raw.release(mem)?;
                used?;
            }
        }
        Alloc::Pooled => {
            for _ in 0..n {
                pool.acquire::<u32>(len)?.release()?;
            }
        }
        Alloc::PooledUsed => {
            for _ in 0..n {
                let buf = pool.acquire::<u32>(len)?;
                queue.fill_range(&buf, PATTERN, 0..1)?.wait()?;
                buf.release()?;
            }
        }
    }
    Ok(start.elapsed())
}

fn allocation(plan: &Plan, raw: &Raw, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    let pool = Pool::new(&lib.ctx, PoolOptions::default())?;
    let queue = &lib.queues[0];
    let max = lib.ctx.device().max_alloc_bytes();
    for bytes in [4 << 10, 1 << 20, 64 << 20] {
        if bytes as u64 > max {
            report.notes.push(format!(
                "3 allocation: {} skipped, above CL_DEVICE_MAX_MEM_ALLOC_SIZE",
                size_label(bytes)
            ));
            continue;
        }
        // Warm-up (PoCL builds its fill kernel at the first fill; the pool creates its
        // block of this size class), then pairs per repetition for about the target.
        let mut n = [0usize; 3];
        for variant in ALLOCS {
            alloc_run(raw, &pool, queue, variant, bytes, 3)?;
            let mut probe = 4;
            let took = loop {
                let took = alloc_run(raw, &pool, queue, variant, bytes, probe)?;
                if took >= plan.alloc_target / 10 || probe >= 1_000_000 {
                    break took;
                }
                probe *= 4;
            };
            let per = took.as_secs_f64().max(1e-9) / probe as f64;
            n[variant as usize] =
                (plan.alloc_target.as_secs_f64() / per).clamp(10.0, 1_000_000.0) as usize;
        }
        let mut variants: Vec<Variant<'_>> = ALLOCS
            .iter()
            .map(|&variant| -> Variant<'_> {
                let count = n[variant as usize];
                let pool = &pool;
                Box::new(move || {
                    let took = alloc_run(raw, pool, queue, variant, bytes, count)?;
                    Ok(took.as_secs_f64() * 1e6 / count as f64)
                })
            })
            .collect();
        let before = lib.ctx.memory_stats().driver_allocations;
        let samples = interleave(plan.reps, &mut variants)?;
        let reused = lib.ctx.memory_stats().driver_allocations == before;
        if !reused {
            report.notes.push(format!(
                "3 allocation, {}: the pool called clCreateBuffer inside the timed loops",
                size_label(bytes)
            ));
        }
        let size = size_label(bytes);
        let baseline = "raw clCreateBuffer + first use + clReleaseMemObject";
        report.cost(
            "3 allocation",
            &format!("pool acquire + release, {size}"),
            baseline,
            "host time per allocation",
            "µs",
            &samples[Alloc::Pooled as usize],
            &samples[Alloc::Raw as usize],
        );
        report.cost(
            "3 allocation",
            &format!("pool acquire + first use + release, {size}"),
            baseline,
            "host time per allocation",
            "µs",
            &samples[Alloc::PooledUsed as usize],
            &samples[Alloc::Raw as usize],
        );
    }
    drop(pool);
    lib.ctx.wait_deferred();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 4. Pipeline.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LibPipe {
    /// `ClBuffer::release` once the read is waited for.
    Blocking,
    /// `ClBuffer::release_deferred` right after the read is enqueued.
    Deferred,
    /// `Pool::acquire_on` the iteration's queue, `release_deferred` right after the read
    /// is enqueued: the block goes back to the pool at once, and the queue's next
    /// iteration reuses it with no wait (its in-order queue orders the reuse).
    Pooled,
}

impl LibPipe {
    fn label(self) -> &'static str {
        match self {
            LibPipe::Blocking => "cl-lifetime blocking release, 4 in flight per queue",
            LibPipe::Deferred => "cl-lifetime deferred release, 4 in flight per queue",
            LibPipe::Pooled => "cl-lifetime pool (acquire_on), 4 in flight per queue",
        }
    }
}

/// A library context of its own for one pipeline variant, so that its peak bytes are its
/// own.
struct PipeCtx {
    ctx: Context,
    queues: Vec<Queue>,
    increment: Kernel,
    pool: Pool,
}

impl PipeCtx {
    fn new() -> anyhow::Result<PipeCtx> {
        let ctx = Context::from_env()?;
        let queues = (0..4).map(|_| ctx.queue()).collect::<Result<Vec<_>, _>>()?;
        let increment = ctx.program("busy.cl", "")?.kernel("increment")?;
        let pool = Pool::new(&ctx, PoolOptions::default())?;
        Ok(PipeCtx {
            ctx,
            queues,
            increment,
            pool,
        })
    }
}

fn check(out: &[i32], expect: i32) -> anyhow::Result<()> {
    match (out.first(), out.last()) {
        (Some(&a), Some(&b)) if a == expect && b == expect => Ok(()),
        (a, b) => bail!("pipeline result {a:?}..{b:?}, expected {expect}"),
    }
}

/// Up to [`DEPTH`] pipeline iterations in flight per queue, oldest first.
struct InFlight<S>(Vec<VecDeque<S>>);

impl<S> InFlight<S> {
    fn new(nq: usize) -> Self {
        InFlight((0..nq).map(|_| VecDeque::new()).collect())
    }

    /// Retires queue `q`'s oldest iteration when it has [`DEPTH`] in flight, before the
    /// next one allocates (so the peak is DEPTH buffers per queue).
    fn make_room(
        &mut self,
        q: usize,
        retire: impl FnOnce(S) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        if self.0[q].len() == DEPTH {
            if let Some(slot) = self.0[q].pop_front() {
                retire(slot)?;
            }
        }
        Ok(())
    }

    fn push(&mut self, q: usize, slot: S) {
        self.0[q].push_back(slot);
    }

    /// Retires every iteration still in flight.
    fn drain(self, mut retire: impl FnMut(S) -> anyhow::Result<()>) -> anyhow::Result<()> {
        self.0.into_iter().flatten().try_for_each(&mut retire)
    }
}

/// Iterations per second of the library pipeline on `nq` queues, up to [`DEPTH`]
/// iterations in flight per queue.
fn pipe_lib(p: &PipeCtx, variant: LibPipe, nq: usize, n: usize) -> anyhow::Result<f64> {
    struct Slot {
        buf: Option<ClBuffer<i32>>,
        read: PendingRead<i32>,
        expect: i32,
    }
    let retire = |slot: Slot| -> anyhow::Result<()> {
        check(&slot.read.wait()?, slot.expect)?;
        if let Some(buf) = slot.buf {
            buf.release()?;
        }
        Ok(())
    };
    let mut slots = InFlight::new(nq);
    let start = Instant::now();
    for i in 0..n {
        let q = i % nq;
        slots.make_room(q, retire)?;
        let queue = &p.queues[q];
        let buf = match variant {
            LibPipe::Pooled => p.pool.acquire_on::<i32>(queue, PIPE_ITEMS)?,
            _ => p.ctx.buffer::<i32>(PIPE_ITEMS)?,
        };
        let value = i as i32;
        queue.write_owned(&buf, vec![value; PIPE_ITEMS])?;
        // SAFETY: increment touches buf[i] only where i < PIPE_ITEMS, buf's length.
        unsafe {
            queue.launch(
                &p.increment,
                &[PIPE_ITEMS],
                &[Arg::read_write(&buf), Arg::scalar(PIPE_ITEMS as u32)],
            )
        }?;
        let read = queue.read_owned(&buf)?;
        let buf = match variant {
            LibPipe::Blocking => Some(buf),
            _ => {
                buf.release_deferred();
                None
            }
        };
        slots.push(
            q,
            Slot {
                buf,
                read,
                expect: value + 1,
            },
        );
    }
    slots.drain(retire)?;
    // The deferred frees count: the run ends when its memory is back.
    p.ctx.wait_deferred();
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Bytes the raw harness holds in buffers: now and at most.
#[derive(Default)]
struct Peak {
    live: u64,
    peak: u64,
}

impl Peak {
    fn add(&mut self, bytes: u64) {
        self.live += bytes;
        self.peak = self.peak.max(self.live);
    }
}

/// Iterations per second of the raw pipeline on `nq` queues: rounds of one iteration per
/// queue, each round ended by `clFinish` on every queue.
fn pipe_raw_finish(raw: &Raw, nq: usize, n: usize, peak: &mut Peak) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let round = nq.min(n - i);
        let mut live = Vec::with_capacity(round);
        for q in 0..round {
            let value = (i + q) as i32;
            let input = vec![value; PIPE_ITEMS];
            let mut out = vec![0i32; PIPE_ITEMS];
            let mem = raw.create(PIPE_BYTES as usize)?;
            peak.add(PIPE_BYTES);
            release_event(raw.write(q, mem, &input)?)?;
            release_event(raw.launch(
                q,
                &raw.increment,
                &[RawArg::Mem(mem), RawArg::U32(PIPE_ITEMS as u32)],
                PIPE_ITEMS,
            )?)?;
            release_event(raw.read(q, mem, &mut out)?)?;
            live.push((mem, input, out, value + 1));
        }
        for q in 0..round {
            raw.finish(q)?;
        }
        for (mem, _input, out, expect) in live {
            raw.release(mem)?;
            peak.live -= PIPE_BYTES;
            check(&out, expect)?;
        }
        i += round;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Iterations per second of the raw pipeline on `nq` queues, up to [`DEPTH`] iterations
/// in flight per queue, each buffer released once its own read's event has completed.
fn pipe_raw_events(raw: &Raw, nq: usize, n: usize, peak: &mut Peak) -> anyhow::Result<f64> {
    struct Slot {
        mem: cl_mem,
        read: cl_event,
        _input: Vec<i32>,
        out: Vec<i32>,
        expect: i32,
    }
    let retire = |slot: Slot, peak: &mut Peak| -> anyhow::Result<()> {
        let waited = wait_release(slot.read);
        raw.release(slot.mem)?;
        peak.live -= PIPE_BYTES;
        waited?;
        check(&slot.out, slot.expect)
    };
    let mut slots = InFlight::new(nq);
    let start = Instant::now();
    for i in 0..n {
        let q = i % nq;
        slots.make_room(q, |slot| retire(slot, peak))?;
        let value = i as i32;
        let input = vec![value; PIPE_ITEMS];
        let mut out = vec![0i32; PIPE_ITEMS];
        let mem = raw.create(PIPE_BYTES as usize)?;
        peak.add(PIPE_BYTES);
        release_event(raw.write(q, mem, &input)?)?;
        release_event(raw.launch(
            q,
            &raw.increment,
            &[RawArg::Mem(mem), RawArg::U32(PIPE_ITEMS as u32)],
            PIPE_ITEMS,
        )?)?;
        let read = raw.read(q, mem, &mut out)?;
        raw.flush(q)?;
        slots.push(
            q,
            Slot {
                mem,
                read,
                _input: input,
                out,
                expect: value + 1,
            },
        );
    }
    slots.drain(|slot| retire(slot, peak))?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The peer: the same pipeline written with the `ocl` crate, as its documentation shows
/// it: a `Buffer` per iteration, blocking write and read, the kernel's argument set with
/// `set_arg`, and the buffer dropped at the end of the iteration.
struct OclPeer {
    queues: Vec<ocl::Queue>,
    kernel: ocl::Kernel,
}

fn ocl_err(e: ocl::Error) -> anyhow::Error {
    anyhow!("ocl: {e}")
}

impl OclPeer {
    /// On the device `CL_LIFETIME_DEVICE` picked, found by its `P:D` indices.
    fn new(device: &cl_lifetime::Device, source: &str) -> anyhow::Result<OclPeer> {
        let (p, d) = device.indices();
        let platform = *ocl::Platform::list()
            .get(p)
            .with_context(|| format!("ocl: no platform {p}"))?;
        let ocl_device = *ocl::Device::list_all(platform)
            .map_err(ocl_err)?
            .get(d)
            .with_context(|| format!("ocl: no device {p}:{d}"))?;
        let name = ocl_device.name().map_err(ocl_err)?;
        if name != device.name() {
            bail!("ocl: device {p}:{d} is {name:?}, not {:?}", device.name());
        }
        let context = ocl::Context::builder()
            .platform(platform)
            .devices(ocl_device)
            .build()
            .map_err(ocl_err)?;
        let program = ocl::Program::builder()
            .src(source)
            .devices(ocl_device)
            .build(&context)
            .map_err(ocl_err)?;
        let queues = (0..4)
            .map(|_| ocl::Queue::new(&context, ocl_device, None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ocl_err)?;
        let kernel = ocl::Kernel::builder()
            .program(&program)
            .name("increment")
            .queue(queues[0].clone())
            .global_work_size(PIPE_ITEMS)
            .arg(None::<&ocl::Buffer<i32>>)
            .arg(PIPE_ITEMS as u32)
            .build()
            .map_err(ocl_err)?;
        Ok(OclPeer { queues, kernel })
    }

    /// Iterations per second on `nq` queues (round robin; each iteration blocks on its
    /// read, as ocl's safe API does).
    fn run(&self, nq: usize, n: usize, peak: &mut Peak) -> anyhow::Result<f64> {
        let start = Instant::now();
        for i in 0..n {
            let queue = &self.queues[i % nq];
            let value = i as i32;
            let input = vec![value; PIPE_ITEMS];
            let mut out = vec![0i32; PIPE_ITEMS];
            let buf = ocl::Buffer::<i32>::builder()
                .queue(queue.clone())
                .len(PIPE_ITEMS)
                .build()
                .map_err(ocl_err)?;
            peak.add(PIPE_BYTES);
            buf.write(&input[..]).enq().map_err(ocl_err)?;
            self.kernel.set_arg(0, &buf).map_err(ocl_err)?;
            // SAFETY: both arguments of `increment` are set (the buffer just above, the
            // length at build time) and the buffer holds PIPE_ITEMS i32, one per work item
            // of the global size the kernel was built with.
            unsafe { self.kernel.cmd().queue(queue).enq() }.map_err(ocl_err)?;
            buf.read(&mut out[..]).enq().map_err(ocl_err)?;
            drop(buf);
            peak.live -= PIPE_BYTES;
            check(&out, value + 1)?;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }
}

impl OclPeer {
    /// The same with non-blocking transfers, up to [`DEPTH`] iterations in flight per
    /// queue: `ocl` allows that only through `unsafe` (`block(false)`), since the host
    /// memory must outlive the commands, which this harness ensures by hand.
    fn run_async(&self, nq: usize, n: usize, peak: &mut Peak) -> anyhow::Result<f64> {
        struct Slot {
            buf: ocl::Buffer<i32>,
            read: ocl::Event,
            _input: Vec<i32>,
            out: Vec<i32>,
            expect: i32,
        }
        let retire = |slot: Slot, peak: &mut Peak| -> anyhow::Result<()> {
            slot.read.wait_for().map_err(|e| anyhow!("ocl: {e}"))?;
            drop(slot.buf);
            peak.live -= PIPE_BYTES;
            check(&slot.out, slot.expect)
        };
        let mut slots = InFlight::new(nq);
        let start = Instant::now();
        for i in 0..n {
            let q = i % nq;
            slots.make_room(q, |slot| retire(slot, peak))?;
            let queue = &self.queues[q];
            let value = i as i32;
            let input = vec![value; PIPE_ITEMS];
            let mut out = vec![0i32; PIPE_ITEMS];
            let buf = ocl::Buffer::<i32>::builder()
                .queue(queue.clone())
                .len(PIPE_ITEMS)
                .build()
                .map_err(ocl_err)?;
            peak.add(PIPE_BYTES);
            // SAFETY: `input` lives in the slot until the read (ordered after this write on
            // the same in-order queue) has been waited for.
            unsafe { buf.write(&input[..]).block(false).enq() }.map_err(ocl_err)?;
            self.kernel.set_arg(0, &buf).map_err(ocl_err)?;
            // SAFETY: as in `run`.
            unsafe { self.kernel.cmd().queue(queue).enq() }.map_err(ocl_err)?;
            let mut read = ocl::Event::empty();
            // SAFETY: `out` lives in the slot, untouched, until `read` has been waited for.
            unsafe { buf.read(&mut out[..]).block(false).enew(&mut read).enq() }
                .map_err(ocl_err)?;
            queue.flush().map_err(ocl_err)?;
            slots.push(
                q,
                Slot {
                    buf,
                    read,
                    _input: input,
                    out,
                    expect: value + 1,
                },
            );
        }
        slots.drain(|slot| retire(slot, peak))?;
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }
}

const RAW_FINISH: &str = "raw, clFinish per iteration (per round of one per queue)";
const RAW_EVENTS: &str = "raw, per-buffer event waits, 4 iterations in flight per queue";
const OCL_PEER: &str = "ocl crate: Buffer + Kernel, blocking write/read, drop";
const OCL_ASYNC: &str =
    "ocl crate: Buffer + Kernel, unsafe non-blocking write/read, 4 in flight per queue, drop";

fn pipeline(
    plan: &Plan,
    raw: &Raw,
    device: &cl_lifetime::Device,
    source: &str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let libs = [LibPipe::Blocking, LibPipe::Deferred, LibPipe::Pooled];
    let peer = match OclPeer::new(device, source) {
        Ok(peer) => Some(peer),
        Err(e) => {
            report
                .notes
                .push(format!("6 peer: the ocl crate could not run here: {e:#}"));
            None
        }
    };
    let n = plan.iterations;
    for nq in [1, 4] {
        // A context per variant and queue count, so that each peak is its own.
        let ctxs = libs
            .iter()
            .map(|_| PipeCtx::new())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut peaks: [Peak; 4] = Default::default();
        // Warm-up.
        pipe_raw_finish(raw, nq, 4, &mut Peak::default())?;
        pipe_raw_events(raw, nq, 4, &mut Peak::default())?;
        if let Some(peer) = &peer {
            peer.run(nq, 4, &mut Peak::default())?;
            peer.run_async(nq, 4, &mut Peak::default())?;
        }
        for (p, &variant) in ctxs.iter().zip(&libs) {
            pipe_lib(p, variant, nq, 4)?;
        }
        let samples = {
            let [finish_peak, events_peak, ocl_peak, ocl_async_peak] = &mut peaks;
            let mut variants: Vec<Variant<'_>> = vec![
                Box::new(move || pipe_raw_finish(raw, nq, n, finish_peak)),
                Box::new(move || pipe_raw_events(raw, nq, n, events_peak)),
            ];
            if let Some(peer) = &peer {
                variants.push(Box::new(move || peer.run(nq, n, ocl_peak)));
                variants.push(Box::new(move || peer.run_async(nq, n, ocl_async_peak)));
            }
            for (p, &variant) in ctxs.iter().zip(&libs) {
                variants.push(Box::new(move || pipe_lib(p, variant, nq, n)));
            }
            interleave(plan.reps, &mut variants)?
        };
        let first_lib = if peer.is_some() { 4 } else { 2 };
        let queues = if nq == 1 { "1 queue" } else { "4 queues" };
        let label = |variant: LibPipe| format!("{}, {queues}", variant.label());
        for (k, &variant) in libs.iter().enumerate() {
            for (b, baseline) in [RAW_FINISH, RAW_EVENTS].iter().enumerate() {
                report.push(
                    "4 pipeline",
                    &label(variant),
                    baseline,
                    "iterations per second",
                    "it/s",
                    &samples[first_lib + k],
                    &samples[b],
                    true,
                );
            }
        }
        // Peak device bytes: the library's ledger of the variant's own context against
        // the harness's count of the raw buffers.
        let kib = |bytes: u64| bytes as f64 / 1024.0;
        for (p, &variant) in ctxs.iter().zip(&libs) {
            let ours = kib(p.ctx.memory_stats().peak_bytes);
            for (baseline, peak) in [(RAW_FINISH, &peaks[0]), (RAW_EVENTS, &peaks[1])] {
                report.cost(
                    "4 pipeline",
                    &label(variant),
                    baseline,
                    "peak device bytes",
                    "KiB",
                    &[ours],
                    &[kib(peak.peak)],
                );
            }
        }
        // Deferred release against blocking release, both the library's.
        let (deferred, blocking) = (LibPipe::Deferred, LibPipe::Blocking);
        let m = ctxs[1].ctx.memory_stats();
        report.notes.push(format!(
            "4 pipeline, {}: {} of {} allocations took over a deferred release, {} asked the driver",
            label(deferred),
            m.reclaimed,
            m.allocations,
            m.driver_allocations
        ));
        report.push(
            "4 pipeline",
            &label(deferred),
            &label(blocking),
            "iterations per second",
            "it/s",
            &samples[first_lib + 1],
            &samples[first_lib],
            true,
        );
        report.cost(
            "4 pipeline",
            &label(deferred),
            &label(blocking),
            "peak device bytes",
            "KiB",
            &[kib(ctxs[1].ctx.memory_stats().peak_bytes)],
            &[kib(ctxs[0].ctx.memory_stats().peak_bytes)],
        );
        if peer.is_some() {
            for (b, baseline) in [(2, OCL_PEER), (3, OCL_ASYNC)] {
                for (k, (p, &variant)) in ctxs.iter().zip(&libs).enumerate() {
                    let name = label(variant);
                    report.push(
                        "6 peer",
                        &name,
                        baseline,
                        "iterations per second",
                        "it/s",
                        &samples[first_lib + k],
                        &samples[b],
                        true,
                    );
                    report.cost(
                        "6 peer",
                        &name,
                        baseline,
                        "peak device bytes",
                        "KiB",
                        &[kib(p.ctx.memory_stats().peak_bytes)],
                        &[kib(peaks[b].peak)],
                    );
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 5. Scale.
// ---------------------------------------------------------------------------------------

/// One repetition of comparison 5: µs to release an unused buffer, the first release after
/// the launches, then µs to release the buffer the launches used.
///
/// The first driver call after a burst of launches pays for the driver's clean-up of them,
/// whichever buffer it releases: on PoCL 3.1, after 10^6 launches, an unused buffer's
/// release takes 8-44 µs and the next release 4-22 µs, while a third one, of a buffer with
/// the same 10^6 commands, takes 1.3-2 µs. Timing only the release that comes first would
/// measure that clean-up, not the history; so each side releases an unused buffer first,
/// and both releases are reported.
type ScaleSample = (f64, f64);

/// Comparison 5, cl-lifetime: an unused buffer's release, then the release of a buffer
/// after `commands` `tiny` launches on it (launched and drained untimed).
fn scale_lib(lib: &Lib, commands: usize) -> anyhow::Result<ScaleSample> {
    let unused = lib.ctx.buffer_from(&[0i32; TINY_ITEMS])?;
    let buf = lib.ctx.buffer_from(&[0i32; TINY_ITEMS])?;
    for i in 0..commands {
        // SAFETY: tiny touches buf[i], i < TINY_ITEMS, buf's length.
        unsafe { lib.queues[0].launch(&lib.tiny, &[TINY_ITEMS], &[Arg::read_write(&buf)]) }?;
        if i % BATCH == BATCH - 1 {
            lib_finish(&lib.queues[0])?;
        }
    }
    lib_finish(&lib.queues[0])?;
    let start = Instant::now();
    unused.release()?;
    let first = start.elapsed();
    let start = Instant::now();
    buf.release()?;
    Ok((micros(first), micros(start.elapsed())))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Signalled by a destructor callback when the driver frees a buffer.
#[derive(Default)]
struct FreedFlag {
    done: std::sync::Mutex<bool>,
    signal: std::sync::Condvar,
}

extern "C" fn on_raw_freed(_mem: cl_mem, user: *mut std::ffi::c_void) {
    // SAFETY: `user` is the `Arc<FreedFlag>` leaked in `watch_raw_free`; the callback runs
    // once, so the reference is taken back once.
    let flag = unsafe { std::sync::Arc::from_raw(user.cast_const().cast::<FreedFlag>()) };
    *flag.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
    flag.signal.notify_all();
}

fn watch_raw_free(mem: cl_mem) -> anyhow::Result<std::sync::Arc<FreedFlag>> {
    let flag = std::sync::Arc::new(FreedFlag::default());
    let user = std::sync::Arc::into_raw(flag.clone()).cast_mut().cast();
    // SAFETY: `mem` is live; `user` is a leaked Arc that the callback takes back.
    unsafe { clm::set_mem_object_destructor_callback(mem, on_raw_freed, user) }
        .map_err(cl_err("clSetMemObjectDestructorCallback"))?;
    Ok(flag)
}

/// How a raw release in comparison 5 ends.
#[derive(Clone, Copy)]
enum RawEnd {
    /// `clReleaseMemObject` returned.
    Returned,
    /// The destructor callback fired: the memory is freed, as `release()` guarantees.
    Freed,
}

/// `clReleaseMemObject` of `mem`, and with [`RawEnd::Freed`] the wait for its destructor
/// callback (`flag`, set before the release).
fn raw_release_timed(
    raw: &Raw,
    mem: cl_mem,
    flag: &std::sync::Arc<FreedFlag>,
    end: RawEnd,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    raw.release(mem)?;
    if let RawEnd::Freed = end {
        let done = flag.done.lock().unwrap_or_else(|e| e.into_inner());
        let (done, _) = flag
            .signal
            .wait_timeout_while(done, Duration::from_secs(2), |done| !*done)
            .unwrap_or_else(|e| e.into_inner());
        if !*done {
            bail!("the raw buffer was not freed 2 s after its release");
        }
    }
    Ok(micros(start.elapsed()))
}

/// Comparison 5, raw: as [`scale_lib`], with `clReleaseMemObject` ending as `end` says.
fn scale_raw(raw: &Raw, commands: usize, end: RawEnd) -> anyhow::Result<ScaleSample> {
    let unused = raw.create_from(&[0i32; TINY_ITEMS])?;
    let mem = match raw.create_from(&[0i32; TINY_ITEMS]) {
        Ok(mem) => mem,
        Err(e) => {
            raw.release(unused)?;
            return Err(e);
        }
    };
    let prepared = (|| -> anyhow::Result<_> {
        let flags = (watch_raw_free(unused)?, watch_raw_free(mem)?);
        raw.set_args(&raw.tiny, &[RawArg::Mem(mem)])?;
        for i in 0..commands {
            release_event(raw.enqueue(0, &raw.tiny, TINY_ITEMS, &[])?)?;
            if i % BATCH == BATCH - 1 {
                raw.finish(0)?;
            }
        }
        raw.finish(0)?;
        Ok(flags)
    })();
    match prepared {
        Ok((flag_unused, flag_mem)) => {
            let first = raw_release_timed(raw, unused, &flag_unused, end);
            let second = raw_release_timed(raw, mem, &flag_mem, end);
            Ok((first?, second?))
        }
        Err(e) => {
            raw.release(unused)?;
            raw.release(mem)?;
            Err(e)
        }
    }
}

fn scale(plan: &Plan, raw: &Raw, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    // At most 5 repetitions: a million launches per repetition is long enough.
    let reps = plan.reps.min(5);
    let mut history = Vec::new();
    let mut live_points = Vec::new();
    for &commands in &plan.commands {
        let (ours, freed) = scale_point(
            raw,
            lib,
            reps,
            report,
            commands,
            &format!("after {commands} commands"),
            "same commands",
        )?;
        history.push((commands, ours, freed));
    }
    growth(report, "commands seen", &history);
    for &live in &plan.live {
        // `live - 1` other buffers on each side, each used once.
        let others = live - 1;
        let mut raw_mems = Vec::with_capacity(others);
        let mut lib_bufs = Vec::with_capacity(others);
        let result = (|| -> anyhow::Result<()> {
            for _ in 0..others {
                let mem = raw.create(TINY_ITEMS * size_of::<i32>())?;
                raw_mems.push(mem);
                // Used once, as the library's are.
                release_event(raw.fill(0, mem)?)?;
                let buf = lib.ctx.buffer::<i32>(TINY_ITEMS)?;
                lib.queues[0].fill(&buf, 0)?;
                lib_bufs.push(buf);
            }
            lib_finish(&lib.queues[0])?;
            raw.finish(0)?;
            let (ours, freed) = scale_point(
                raw,
                lib,
                reps,
                report,
                1,
                &format!("{live} live buffers"),
                "same live buffers",
            )?;
            live_points.push((live, ours, freed));
            Ok(())
        })();
        for mem in raw_mems {
            raw.release(mem)?;
        }
        for buf in lib_bufs {
            buf.release_deferred();
        }
        lib.ctx.wait_deferred();
        result?;
    }
    growth(report, "live buffers", &live_points);
    if plan.quick {
        report.notes.push(format!(
            "5 scale, quick mode: commands seen {:?} and live buffers {:?} (full mode: up to \
             1,000,000 and 100,000)",
            plan.commands, plan.live
        ));
    }
    Ok(())
}

/// One point of comparison 5: the release of an idle buffer after `commands` launches,
/// ours against both raw baselines; returns the medians of ours and of the raw release
/// that waits for its destructor callback.
fn scale_point(
    raw: &Raw,
    lib: &Lib,
    reps: usize,
    report: &mut Report,
    commands: usize,
    point: &str,
    same: &str,
) -> anyhow::Result<(f64, f64)> {
    let firsts: [std::cell::RefCell<Vec<f64>>; 3] = Default::default();
    let mut variants: Vec<Variant<'_>> = vec![
        Box::new(|| keep_first(&firsts[0], scale_raw(raw, commands, RawEnd::Returned))),
        Box::new(|| keep_first(&firsts[1], scale_raw(raw, commands, RawEnd::Freed))),
        Box::new(|| keep_first(&firsts[2], scale_lib(lib, commands))),
    ];
    let samples = interleave(reps, &mut variants)?;
    for (b, baseline) in [(0, RAW_RETURNED), (1, RAW_FREED)] {
        report.cost(
            "5 scale",
            &format!("cl-lifetime release(), idle, {point}"),
            &format!("{baseline}, {same}"),
            "host time per release",
            "µs",
            &samples[2],
            &samples[b],
        );
    }
    report.cost(
        "5 scale",
        &format!("cl-lifetime release() of an unused buffer, released first, {point}"),
        &format!("{RAW_FREED}, released first, {same}"),
        "host time per release",
        "µs",
        &firsts[2].borrow(),
        &firsts[1].borrow(),
    );
    Ok((median(&samples[2]), median(&samples[1])))
}

/// Keeps the first release's time of a scale sample in `firsts`; returns the second's.
fn keep_first(
    firsts: &std::cell::RefCell<Vec<f64>>,
    sample: anyhow::Result<ScaleSample>,
) -> anyhow::Result<f64> {
    let (first, second) = sample?;
    firsts.borrow_mut().push(first);
    Ok(second)
}

const RAW_RETURNED: &str = "raw clReleaseMemObject returned";
const RAW_FREED: &str = "raw clReleaseMemObject + its destructor callback (freed, as release() is)";

/// The goal's flatness figure: release time at the largest point over the smallest, ours
/// against the raw release (with its destructor callback) over the same points.
fn growth(report: &mut Report, axis: &str, points: &[(usize, f64, f64)]) {
    if let (Some(first), Some(last)) = (points.first(), points.last()) {
        if first.0 != last.0 {
            report.cost(
                "5 scale",
                &format!(
                    "cl-lifetime release() at {} {axis} over at {}",
                    last.0, first.0
                ),
                &format!("{RAW_FREED}, same points"),
                "growth of the release time, largest point / smallest",
                "x",
                &[last.1 / first.1],
                &[last.2 / first.2],
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// 7. Blocking host calls.
// ---------------------------------------------------------------------------------------

/// Comparison 7: elements of the buffer a kernel updates and the host then reads, writes
/// or maps (4 KiB).
const HOST_ITEMS: usize = 1024;

/// The blocking call each iteration of comparison 7 ends with.
#[derive(Clone, Copy, Debug)]
enum HostCall {
    Read,
    Write,
    Map,
}

impl HostCall {
    fn label(self) -> &'static str {
        match self {
            HostCall::Read => "a blocking read",
            HostCall::Write => "a blocking write",
            HostCall::Map => "a blocking map for reading, then its unmap",
        }
    }
}

/// µs per iteration of raw code: a `tiny` launch on `mem`, then the blocking call.
fn blocking_raw(raw: &Raw, mem: cl_mem, call: HostCall, n: usize) -> anyhow::Result<f64> {
    let mut host = vec![0i32; HOST_ITEMS];
    let bytes = size_of_val(host.as_slice());
    raw.set_args(&raw.tiny, &[RawArg::Mem(mem)])?;
    let start = Instant::now();
    for _ in 0..n {
        release_event(raw.enqueue(0, &raw.tiny, HOST_ITEMS, &[])?)?;
        // SAFETY: `mem` holds `bytes`; `host` is alive and unaliased for each blocking call;
        // no wait list.
        let event = unsafe {
            match call {
                HostCall::Read => clq::enqueue_read_buffer(
                    raw.queue(0),
                    mem,
                    clq::CL_BLOCKING,
                    0,
                    bytes,
                    host.as_mut_ptr().cast(),
                    0,
                    ptr::null(),
                ),
                HostCall::Write => clq::enqueue_write_buffer(
                    raw.queue(0),
                    mem,
                    clq::CL_BLOCKING,
                    0,
                    bytes,
                    host.as_ptr().cast(),
                    0,
                    ptr::null(),
                ),
                HostCall::Map => {
                    let mut mapped = ptr::null_mut();
                    let map = clq::enqueue_map_buffer(
                        raw.queue(0),
                        mem,
                        clq::CL_BLOCKING,
                        clm::CL_MAP_READ,
                        0,
                        bytes,
                        &mut mapped,
                        0,
                        ptr::null(),
                    )
                    .map_err(cl_err("clEnqueueMapBuffer"))?;
                    release_event(map)?;
                    std::hint::black_box(*mapped.cast::<i32>());
                    clq::enqueue_unmap_mem_object(raw.queue(0), mem, mapped, 0, ptr::null())
                }
            }
        }
        .map_err(cl_err("a blocking call"))?;
        release_event(event)?;
    }
    let micros = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    raw.finish(0)?;
    Ok(micros)
}

/// µs per iteration of the library: a `tiny` launch on `buf`, then the blocking call.
fn blocking_lib(lib: &Lib, buf: &ClBuffer<i32>, call: HostCall, n: usize) -> anyhow::Result<f64> {
    let queue = &lib.queues[0];
    let mut host = vec![0i32; HOST_ITEMS];
    let start = Instant::now();
    for _ in 0..n {
        // SAFETY: tiny touches buf[i], i < HOST_ITEMS, the length of the buffer the caller passes.
        unsafe { queue.launch(&lib.tiny, &[HOST_ITEMS], &[Arg::read_write(buf)]) }?;
        match call {
            HostCall::Read => queue.read(buf, &mut host)?,
            HostCall::Write => queue.write(buf, &host)?,
            HostCall::Map => {
                let mapped = queue.map(buf, 0..HOST_ITEMS)?;
                std::hint::black_box(mapped[0]);
            }
        }
    }
    let micros = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    lib_finish(queue)?;
    Ok(micros)
}

fn blocking(plan: &Plan, raw: &Raw, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    let mem = raw.create_from(&[0i32; HOST_ITEMS])?;
    let buf = lib.ctx.buffer_from(&[0i32; HOST_ITEMS])?;
    let n = if plan.quick { 500 } else { 2_000 };
    let result = (|| -> anyhow::Result<()> {
        for call in [HostCall::Read, HostCall::Write, HostCall::Map] {
            // Warm-up: first launches, first maps.
            blocking_raw(raw, mem, call, 50)?;
            blocking_lib(lib, &buf, call, 50)?;
            let mut variants: Vec<Variant<'_>> = vec![
                Box::new(|| blocking_raw(raw, mem, call, n)),
                Box::new(|| blocking_lib(lib, &buf, call, n)),
            ];
            let samples = interleave(plan.reps, &mut variants)?;
            report.cost(
                "7 blocking host calls",
                &format!("cl-lifetime: a launch, then {}", call.label()),
                &format!("raw opencl3: a launch, then {}", call.label()),
                "host time per iteration",
                "µs",
                &samples[1],
                &samples[0],
            );
        }
        Ok(())
    })();
    raw.release(mem)?;
    buf.release()?;
    result
}

// ---------------------------------------------------------------------------------------
// 8. BabelStream.
// ---------------------------------------------------------------------------------------

/// BabelStream's five kernels, written from its published definitions (Deakin et al.,
/// "Evaluating attainable memory bandwidth of parallel programming models via
/// BabelStream"): copy, mul, add, triad, and dot, which leaves one partial sum per work
/// group for the host to read back and add up.
const BABELSTREAM: &str = "
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define SCALAR 0.4
__kernel void copy(__global const double *a, __global double *c) {
    const size_t i = get_global_id(0);
    c[i] = a[i];
}
__kernel void mul(__global double *b, __global const double *c) {
    const size_t i = get_global_id(0);
    b[i] = SCALAR * c[i];
}
__kernel void add(__global const double *a, __global const double *b, __global double *c) {
    const size_t i = get_global_id(0);
    c[i] = a[i] + b[i];
}
__kernel void triad(__global double *a, __global const double *b, __global const double *c) {
    const size_t i = get_global_id(0);
    a[i] = b[i] + SCALAR * c[i];
}
__kernel void stream_dot(__global const double *a, __global const double *b,
                         __global double *sum, __local double *wg_sum, long array_size) {
    size_t i = get_global_id(0);
    const size_t local_i = get_local_id(0);
    wg_sum[local_i] = 0.0;
    for (; i < array_size; i += get_global_size(0)) wg_sum[local_i] += a[i] * b[i];
    for (int offset = get_local_size(0) / 2; offset > 0; offset /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (local_i < offset) wg_sum[local_i] += wg_sum[local_i + offset];
    }
    if (local_i == 0) sum[get_group_id(0)] = wg_sum[local_i];
}
";

/// BabelStream's starting values and scalar.
const START_A: f64 = 0.1;
const START_B: f64 = 0.2;
const START_C: f64 = 0.0;
const SCALAR: f64 = 0.4;
/// Work-group size of `dot`, and its groups per compute unit, as in BabelStream.
const DOT_WG: usize = 256;
const DOT_GROUPS_PER_CU: usize = 4;
const STREAM_KERNELS: [&str; 5] = ["copy", "mul", "add", "triad", "dot"];

/// The sizes of one BabelStream run.
#[derive(Clone, Copy)]
struct Stream {
    /// Elements per array.
    n: usize,
    /// Iterations (each runs the five kernels once).
    times: usize,
    /// Work groups of `dot`.
    groups: usize,
}

/// One run's result: the median time of each kernel in µs (copy, mul, add, triad, dot,
/// dot including its read-back), the median iteration, and the final arrays' check.
struct StreamRun {
    kernels: [f64; 5],
    iteration: f64,
}

/// What the arrays and the sum must be after `s.times` iterations.
fn stream_gold(s: Stream) -> (f64, f64, f64, f64) {
    let (mut a, mut b, mut c) = (START_A, START_B, START_C);
    for _ in 0..s.times {
        c = a;
        b = SCALAR * c;
        c = a + b;
        a = b + SCALAR * c;
    }
    (a, b, c, a * b * s.n as f64)
}

/// BabelStream's solution check: the mean relative error of each array below 1e-8 (the
/// epsilon it uses for doubles, scaled up), and of the sum below 1e-8.
fn stream_check(s: Stream, a: &[f64], b: &[f64], c: &[f64], sum: f64) -> anyhow::Result<()> {
    let (ga, gb, gc, gsum) = stream_gold(s);
    let err = |v: &[f64], g: f64| {
        v.iter().map(|x| (x - g).abs()).sum::<f64>()
            / v.len() as f64
            / g.abs().max(f64::MIN_POSITIVE)
    };
    let (ea, eb, ec) = (err(a, ga), err(b, gb), err(c, gc));
    let esum = ((sum - gsum) / gsum).abs();
    if ea > 1e-8 || eb > 1e-8 || ec > 1e-8 || esum > 1e-8 {
        bail!("BabelStream check failed: errors a {ea:e}, b {eb:e}, c {ec:e}, sum {esum:e}");
    }
    Ok(())
}

/// The raw side: opencl3 calls as BabelStream's OpenCL code makes them (each kernel waited
/// for with `clFinish`, `dot`'s sums read back with a blocking read).
fn stream_raw(
    raw_queue: clq::cl_command_queue,
    ctx: &Context,
    program: &ProgramHandle,
    s: Stream,
) -> anyhow::Result<StreamRun> {
    let bytes = s.n * size_of::<f64>();
    let make = |v: f64| -> anyhow::Result<cl_mem> {
        let mut host = vec![v; s.n];
        // SAFETY: `host` holds `bytes`, copied before the call returns.
        unsafe {
            clm::create_buffer(
                ctx.as_raw(),
                CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                bytes,
                host.as_mut_ptr().cast(),
            )
        }
        .map_err(cl_err("clCreateBuffer"))
    };
    let (a, b, c) = (make(START_A)?, make(START_B)?, make(START_C)?);
    let sums = make(0.0)?;
    let kernels: Vec<RawKernel> = ["copy", "mul", "add", "triad", "stream_dot"]
        .iter()
        .map(|k| program.kernel(k))
        .collect::<anyhow::Result<_>>()?;
    // SAFETY: each kernel's parameters are `__global double *` at the positions given,
    // then the local buffer (no host data) and a `long` for `stream_dot`; every buffer is
    // live; only this thread uses the kernels.
    unsafe {
        set_arg(kernels[0].get(), 0, &a)?;
        set_arg(kernels[0].get(), 1, &c)?;
        set_arg(kernels[1].get(), 0, &b)?;
        set_arg(kernels[1].get(), 1, &c)?;
        set_arg(kernels[2].get(), 0, &a)?;
        set_arg(kernels[2].get(), 1, &b)?;
        set_arg(kernels[2].get(), 2, &c)?;
        set_arg(kernels[3].get(), 0, &a)?;
        set_arg(kernels[3].get(), 1, &b)?;
        set_arg(kernels[3].get(), 2, &c)?;
        set_arg(kernels[4].get(), 0, &a)?;
        set_arg(kernels[4].get(), 1, &b)?;
        set_arg(kernels[4].get(), 2, &sums)?;
        opencl3::kernel::set_kernel_arg(
            kernels[4].get(),
            3,
            DOT_WG * size_of::<f64>(),
            ptr::null(),
        )
        .map_err(cl_err("clSetKernelArg"))?;
        set_arg(kernels[4].get(), 4, &(s.n as i64))?;
    }
    let mut partial = vec![0f64; s.groups];
    let mut times: Vec<Vec<f64>> = (0..5).map(|_| Vec::with_capacity(s.times)).collect();
    let mut iterations = Vec::with_capacity(s.times);
    let mut sum = 0.0;
    for _ in 0..s.times {
        let iteration = Instant::now();
        for (k, kernel) in kernels.iter().enumerate() {
            let start = Instant::now();
            let (global, local) = if k == 4 {
                (s.groups * DOT_WG, Some(DOT_WG))
            } else {
                (s.n, None)
            };
            let global = [global];
            let local_size = local.map(|l| [l]);
            // SAFETY: the arguments are set; the global size covers the arrays (or is
            // `dot`'s, which strides); no wait list.
            let event = unsafe {
                clq::enqueue_nd_range_kernel(
                    raw_queue,
                    kernel.get(),
                    1,
                    ptr::null(),
                    global.as_ptr(),
                    local_size.as_ref().map_or(ptr::null(), |l| l.as_ptr()),
                    0,
                    ptr::null(),
                )
            }
            .map_err(cl_err("clEnqueueNDRangeKernel"))?;
            release_event(event)?;
            if k == 4 {
                // SAFETY: `partial` holds one double per group; a blocking read.
                let read = unsafe {
                    clq::enqueue_read_buffer(
                        raw_queue,
                        sums,
                        clq::CL_BLOCKING,
                        0,
                        s.groups * 8,
                        partial.as_mut_ptr().cast(),
                        0,
                        ptr::null(),
                    )
                }
                .map_err(cl_err("clEnqueueReadBuffer"))?;
                release_event(read)?;
                sum = partial.iter().sum();
            } else {
                clq::finish(raw_queue).map_err(cl_err("clFinish"))?;
            }
            times[k].push(start.elapsed().as_secs_f64() * 1e6);
        }
        iterations.push(iteration.elapsed().as_secs_f64() * 1e6);
    }
    let read_all = |mem: cl_mem| -> anyhow::Result<Vec<f64>> {
        let mut out = vec![0f64; s.n];
        // SAFETY: `out` holds `bytes`; a blocking read.
        let read = unsafe {
            clq::enqueue_read_buffer(
                raw_queue,
                mem,
                clq::CL_BLOCKING,
                0,
                bytes,
                out.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueReadBuffer"))?;
        release_event(read)?;
        Ok(out)
    };
    let checked = stream_check(s, &read_all(a)?, &read_all(b)?, &read_all(c)?, sum);
    for mem in [a, b, c, sums] {
        // SAFETY: created above, released once; nothing runs on them any more.
        unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))?;
    }
    checked?;
    Ok(StreamRun {
        kernels: std::array::from_fn(|k| median(&times[k])),
        iteration: median(&iterations),
    })
}

/// The library's side: the same kernels through `Queue::launch`, each waited for on its
/// event, `dot`'s sums read back with `Queue::read`.
fn stream_lib(
    ctx: &Context,
    queue: &Queue,
    kernels: &[Kernel],
    s: Stream,
) -> anyhow::Result<StreamRun> {
    let filled = |len: usize, v: f64| ctx.buffer_from(&vec![v; len]);
    let (a, b, c) = (
        filled(s.n, START_A)?,
        filled(s.n, START_B)?,
        filled(s.n, START_C)?,
    );
    let sums = filled(s.groups, 0.0)?;
    let mut partial = vec![0f64; s.groups];
    let mut times: Vec<Vec<f64>> = (0..5).map(|_| Vec::with_capacity(s.times)).collect();
    let mut iterations = Vec::with_capacity(s.times);
    let mut sum = 0.0;
    let n = [s.n];
    // Each kernel timed from its enqueue to its end, as BabelStream does.
    let mut timed = |k: usize, run: &mut dyn FnMut() -> anyhow::Result<()>| {
        let start = Instant::now();
        run()?;
        times[k].push(start.elapsed().as_secs_f64() * 1e6);
        anyhow::Ok(())
    };
    for _ in 0..s.times {
        let iteration = Instant::now();
        let streams: [&[Arg<'_>]; 4] = [
            &[Arg::read(&a), Arg::write(&c)],
            &[Arg::write(&b), Arg::read(&c)],
            &[Arg::read(&a), Arg::read(&b), Arg::write(&c)],
            &[Arg::write(&a), Arg::read(&b), Arg::read(&c)],
        ];
        for (k, args) in streams.into_iter().enumerate() {
            timed(k, &mut || {
                // SAFETY: `kernels` are BABELSTREAM's (the one caller builds them): kernel k < 4
                // touches element i < s.n of a, b and c, each s.n long, and writes only the one
                // given as written.
                Ok(unsafe { queue.launch(&kernels[k], &n, args) }?.wait()?)
            })?;
        }
        timed(4, &mut || {
            // SAFETY: stream_dot reads a[i] and b[i] only where i < s.n, their length, writes
            // sums[g], g < s.groups, its length, and wg_sum[l], l < DOT_WG, the DOT_WG given.
            unsafe {
                queue.launch_local(
                    &kernels[4],
                    &[s.groups * DOT_WG],
                    Some(&[DOT_WG]),
                    &[
                        Arg::read(&a),
                        Arg::read(&b),
                        Arg::write(&sums),
                        Arg::local::<f64>(DOT_WG),
                        Arg::scalar(s.n as i64),
                    ],
                )
            }?;
            queue.read(&sums, &mut partial)?;
            sum = partial.iter().sum();
            Ok(())
        })?;
        iterations.push(iteration.elapsed().as_secs_f64() * 1e6);
    }
    let read_all =
        |buf: &ClBuffer<f64>| -> anyhow::Result<Vec<f64>> { Ok(queue.read_owned(buf)?.wait()?) };
    stream_check(s, &read_all(&a)?, &read_all(&b)?, &read_all(&c)?, sum)?;
    Ok(StreamRun {
        kernels: std::array::from_fn(|k| median(&times[k])),
        iteration: median(&iterations),
    })
}

fn babelstream(plan: &Plan, raw: &Raw, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    let device = lib.ctx.device();
    let cus = opencl3::device::Device::new(device.as_raw())
        .max_compute_units()
        .map_err(|e| anyhow!("clGetDeviceInfo: {e}"))? as usize;
    let (n, times) = if plan.quick {
        (1 << 22, 20)
    } else {
        (1 << 25, 100)
    };
    let s = Stream {
        n,
        times,
        groups: cus * DOT_GROUPS_PER_CU,
    };
    if (3 * n * 8) as u64 > device.global_mem_bytes() / 2
        || (n * 8) as u64 > device.max_alloc_bytes()
    {
        println!("   skipped: three arrays of {n} doubles do not fit the device");
        return Ok(());
    }
    let program = ProgramHandle::build(lib.ctx.as_raw(), device.as_raw(), BABELSTREAM)?;
    let lib_program = lib
        .ctx
        .program_from_source("babelstream", BABELSTREAM, "")?;
    let kernels: Vec<Kernel> = ["copy", "mul", "add", "triad", "stream_dot"]
        .iter()
        .map(|k| lib_program.kernel(k))
        .collect::<Result<_, _>>()?;
    let queue = &lib.queues[0];
    let raw_queue = raw.queue(0);
    let runs = if plan.quick { 3 } else { 5 };
    let mut raw_runs = Vec::new();
    let mut lib_runs = Vec::new();
    interleave_with(runs, &[false, true], |ours| {
        if ours {
            lib_runs.push(stream_lib(&lib.ctx, queue, &kernels, s)?);
        } else {
            raw_runs.push(stream_raw(raw_queue, &lib.ctx, &program, s)?);
        }
        Ok(())
    })?;
    let label = format!(
        "2^{} doubles, {times} iterations, {runs} interleaved runs",
        n.trailing_zeros()
    );
    for (k, name) in STREAM_KERNELS.iter().enumerate() {
        let ours: Vec<f64> = lib_runs.iter().map(|r| r.kernels[k]).collect();
        let theirs: Vec<f64> = raw_runs.iter().map(|r| r.kernels[k]).collect();
        let what = if k == 4 {
            "dot with its read-back"
        } else {
            name
        };
        report.cost(
            "8 BabelStream",
            &format!("cl-lifetime {what} ({label})"),
            &format!("raw opencl3 {what}, the same kernel"),
            "median time per call",
            "µs",
            &ours,
            &theirs,
        );
    }
    let ours: Vec<f64> = lib_runs.iter().map(|r| r.iteration).collect();
    let theirs: Vec<f64> = raw_runs.iter().map(|r| r.iteration).collect();
    report.cost(
        "8 BabelStream",
        &format!("cl-lifetime iteration of all five ({label})"),
        "raw opencl3 iteration",
        "median time per iteration",
        "µs",
        &ours,
        &theirs,
    );
    Ok(())
}
