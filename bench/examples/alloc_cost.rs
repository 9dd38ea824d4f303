//! The host cost of allocating and releasing: cl-lifetime against raw `opencl3`, measured
//! in one run on one device.
//!
//! **Part 1, allocation.** A pooled `Pool::acquire` + `ClBuffer::release` pair against the
//! raw path a user writes without a pool: `clCreateBuffer`, a first use, then
//! `clReleaseMemObject`. The first use is part of the raw path because drivers allocate
//! lazily (NVIDIA and PoCL reserve the memory at the first command on the buffer), so a
//! bare create + release measures an allocation that never happened; that bare pair is
//! still shown, for information. The first use is the same small command on both sides: a
//! 4-byte `clEnqueueFillBuffer` at offset 0, then a wait for it. The pooled side is timed
//! twice: the pair alone (acquire + release, the library's own cost) and the pair with the
//! same first use (what a user's loop pays in all). Sizes: 4 KiB, 1 MiB and 64 MiB.
//!
//! **Part 2, release of a busy buffer.** A `spin` kernel (kernels/busy.cl), calibrated to
//! run for about 75 ms, uses a buffer; a short while after its launch the host lets go of
//! the buffer. Timed: `ClBuffer::release_deferred` (returns at once; the context's reaper
//! thread frees the memory when the kernel ends), `ClBuffer::release` (waits for the
//! kernel, then frees), and raw `clReleaseMemObject` (returns at once on PoCL, which frees
//! later; blocks until the kernel ends on NVIDIA). `Context::wait_deferred` runs after the
//! clock stops.
//!
//! Each variant runs R repetitions (default 7), interleaved with the others in an order that
//! alternates every repetition, so drift falls on all of them alike. Part 1 reports, per
//! variant, the median over the repetitions of the mean µs per pair, the min-max of those
//! means, and the speed-up: the raw baseline's median over the variant's. The number of
//! pairs per repetition is chosen per variant so that a repetition takes about 0.25 s.
//! Part 2 reports the median, min-max and ratio of the host time of one release.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example alloc_cost
//! cargo run --release --example alloc_cost -- --quick
//! cargo run --release --example alloc_cost -- --reps 11
//! ```
//!
//! `--quick` runs 3 shorter repetitions and leaves out 1 MiB; `--reps R` sets the
//! repetitions. `CL_LIFETIME_DEVICE` picks the device; `CL_LIFETIME_KERNELS` names the
//! folder(s) holding `busy.cl` when the binary runs away from its source tree.

use std::ptr;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cl_lifetime::{Arg, Context, Kernel, Pool, PoolOptions, Queue};
use opencl3::command_queue::{self as clq, CL_QUEUE_PROPERTIES, CommandQueue};
use opencl3::event as cle;
use opencl3::kernel::Kernel as RawKernel;
use opencl3::memory::{self as clm, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
use opencl3::types::{cl_event, cl_mem};

use harness::{
    ProgramHandle, Stats, calibrate, cl_err, enqueue_1d, interleave_with, median, print_device,
    release_event, set_arg, size_label,
};

/// Buffer sizes of part 1, in bytes.
const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];
const SIZES_QUICK: [usize; 2] = [4 << 10, 64 << 20];
/// How long one repetition of one variant should take.
const TARGET_REP: Duration = Duration::from_millis(250);
const TARGET_REP_QUICK: Duration = Duration::from_millis(60);
const REPS: usize = 7;
const REPS_QUICK: usize = 3;
/// Bounds on the pairs per repetition.
const MIN_N: usize = 10;
const MAX_N: usize = 1_000_000;
/// The first-use command: a fill of this pattern over the first 4 bytes.
const PATTERN: u32 = 0x5EED_5EED;

/// How long one `spin` launch of part 2 should run.
const SPIN_TARGET: Duration = Duration::from_millis(75);
const SPIN_TARGET_QUICK: Duration = Duration::from_millis(60);
/// Work items per `spin` launch (and f32 elements of its buffer).
const SPIN_ITEMS: usize = 1 << 16;
/// How long the host lets the kernel run before it lets go of the buffer.
const HEAD_START: Duration = Duration::from_millis(10);

/// The goals the pooled pair is held to (on a GPU).
const GOAL_US: f64 = 1.0;
const GOAL_SPEEDUP: f64 = 20.0;

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let options = Options::parse()?;

    let ctx = Context::from_env()?;
    print_device(&ctx);
    let device = ctx.device();

    let program = ctx.program("busy.cl", "")?;
    let raw = Raw::new(&ctx, &std::fs::read_to_string(program.file())?)?;
    let queue = ctx.queue()?;
    let reps = options.reps;

    // Part 1.
    let alloc = AllocBench {
        ctx: &ctx,
        queue: &queue,
        pool: Pool::new(&ctx, PoolOptions::default())?,
        raw: &raw,
    };
    let sizes: &[usize] = if options.quick { &SIZES_QUICK } else { &SIZES };
    println!(
        "part 1:   {reps} repetitions per variant, about {} ms each, interleaved\n",
        options.target().as_millis()
    );
    let mut sized = Vec::new();
    for &bytes in sizes {
        if bytes as u64 > device.max_alloc_bytes() {
            println!(
                "skipped {}: above CL_DEVICE_MAX_MEM_ALLOC_SIZE ({} bytes)",
                size_label(bytes),
                device.max_alloc_bytes()
            );
            continue;
        }
        sized.push(alloc.measure(bytes, reps, options.target())?);
    }
    drop(alloc);
    ctx.wait_deferred();

    // Part 2.
    let spin = program.kernel("spin")?;
    // SAFETY: `spin` is busy.cl's spin.
    let iters = unsafe { calibrate(&ctx, &queue, &spin, SPIN_ITEMS, options.spin_target()) }?;
    let release = ReleaseBench {
        ctx: &ctx,
        queue: &queue,
        spin: &spin,
        raw: &raw,
        iters,
    };
    let released = release.measure(reps)?;
    ctx.wait_deferred();

    println!();
    print_alloc_table(&sized, device.is_gpu());
    println!();
    print_release_table(&released, reps);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Options.
// ---------------------------------------------------------------------------------------

struct Options {
    quick: bool,
    reps: usize,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let mut quick = false;
        let mut reps = None;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => quick = true,
                "--reps" => {
                    let value = args.next().context("--reps needs a number")?;
                    let r: usize = value
                        .parse()
                        .with_context(|| format!("--reps {value}: not a number"))?;
                    if r == 0 {
                        bail!("--reps must be at least 1");
                    }
                    reps = Some(r);
                }
                // `cargo bench`-style harness flags, harmless to ignore.
                "--bench" => {}
                other => bail!("unknown argument {other:?} (expected --quick or --reps R)"),
            }
        }
        let default = if quick { REPS_QUICK } else { REPS };
        Ok(Options {
            quick,
            reps: reps.unwrap_or(default),
        })
    }

    fn target(&self) -> Duration {
        if self.quick {
            TARGET_REP_QUICK
        } else {
            TARGET_REP
        }
    }

    fn spin_target(&self) -> Duration {
        if self.quick {
            SPIN_TARGET_QUICK
        } else {
            SPIN_TARGET
        }
    }
}

// ---------------------------------------------------------------------------------------
// Raw opencl3: a queue and the `spin` kernel in the library's context, with raw calls.
// ---------------------------------------------------------------------------------------

struct Raw {
    context: opencl3::types::cl_context,
    queue: CommandQueue,
    spin: RawKernel,
    _program: ProgramHandle,
}

impl Raw {
    fn new(ctx: &Context, source: &str) -> anyhow::Result<Raw> {
        let device = ctx.device().as_raw();
        let properties = [u64::from(CL_QUEUE_PROPERTIES), 0, 0];
        // SAFETY: context and device are live handles of `ctx`; `properties` is a
        // zero-terminated list that outlives the call.
        let queue = unsafe {
            clq::create_command_queue_with_properties(ctx.as_raw(), device, properties.as_ptr())
        }
        .map_err(cl_err("clCreateCommandQueueWithProperties"))?;
        // The wrapper releases it on drop; the dimension count is only used by opencl3's
        // `ExecuteKernel`, which this code does not use.
        let queue = CommandQueue::new(queue, 3);
        let program = ProgramHandle::build(ctx.as_raw(), device, source)?;
        let spin = program.kernel("spin")?;
        Ok(Raw {
            context: ctx.as_raw(),
            queue,
            spin,
            _program: program,
        })
    }

    /// `clCreateBuffer` of `bytes`, no host pointer.
    fn create(&self, bytes: usize) -> anyhow::Result<cl_mem> {
        // SAFETY: no host pointer; `bytes` is within CL_DEVICE_MAX_MEM_ALLOC_SIZE (checked
        // by the caller).
        unsafe { clm::create_buffer(self.context, CL_MEM_READ_WRITE, bytes, ptr::null_mut()) }
            .map_err(cl_err("clCreateBuffer"))
    }

    /// The first use: a 4-byte fill at offset 0, waited for; the event is released.
    fn first_use(&self, mem: cl_mem) -> anyhow::Result<()> {
        // SAFETY: `mem` is a live buffer of at least 4 bytes; the 4-byte pattern is copied
        // by OpenCL before the call returns; no wait list.
        let event = unsafe {
            clq::enqueue_fill_buffer(
                self.queue.get(),
                mem,
                ptr::from_ref(&PATTERN).cast(),
                size_of::<u32>(),
                0,
                size_of::<u32>(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueFillBuffer"))?;
        let waited = cle::wait_for_events(&[event]).map_err(cl_err("clWaitForEvents"));
        release_event(event)?;
        waited
    }

    /// `clReleaseMemObject`.
    fn release(&self, mem: cl_mem) -> anyhow::Result<()> {
        // SAFETY: `mem` came from `create` and this code releases its one reference exactly
        // once, here. Commands still running on it keep it alive inside the driver.
        unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))
    }

    /// A buffer of `SPIN_ITEMS` ones.
    fn spin_buffer(&self) -> anyhow::Result<cl_mem> {
        let mut ones = vec![1.0f32; SPIN_ITEMS];
        // SAFETY: `ones` holds SPIN_ITEMS f32, copied by OpenCL before the call returns
        // (CL_MEM_COPY_HOST_PTR) and not used afterwards.
        unsafe {
            clm::create_buffer(
                self.context,
                CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                size_of_val(ones.as_slice()),
                ones.as_mut_ptr().cast(),
            )
        }
        .map_err(cl_err("clCreateBuffer"))
    }

    /// Launches `spin` on `mem` and submits it; the caller owns the returned event.
    fn launch_spin(&self, mem: cl_mem, iters: u32) -> anyhow::Result<cl_event> {
        let kernel = self.spin.get();
        // SAFETY: argument 0 of `spin` is a `__global float*` and gets a live cl_mem,
        // argument 1 a `uint`. Only this thread uses the kernel.
        unsafe {
            set_arg(kernel, 0, &mem)?;
            set_arg(kernel, 1, &iters)?;
        }
        // SAFETY: both arguments are set; the buffer holds SPIN_ITEMS floats, one per work
        // item; no wait list.
        let event = unsafe { enqueue_1d(self.queue.get(), kernel, SPIN_ITEMS, &[]) }?;
        clq::flush(self.queue.get()).map_err(cl_err("clFlush"))?;
        Ok(event)
    }
}

/// Whether the command of a raw event has completed or failed.
fn raw_done(event: cl_event) -> anyhow::Result<bool> {
    let status = cle::get_event_info(event, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
        .map_err(cl_err("clGetEventInfo"))?
        .to_int();
    Ok(status <= cle::CL_COMPLETE)
}

// ---------------------------------------------------------------------------------------
// Part 1: allocation.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Alloc {
    /// Raw `clCreateBuffer` + 4-byte fill, waited + `clReleaseMemObject`: the baseline.
    Raw,
    /// Raw `clCreateBuffer` + `clReleaseMemObject`, never used: not a real allocation on a
    /// driver that allocates lazily. For information.
    RawUnused,
    /// `Pool::acquire` + `ClBuffer::release`.
    Pooled,
    /// `Pool::acquire` + 4-byte fill, waited + `ClBuffer::release`.
    PooledUsed,
}

impl Alloc {
    const ALL: [Alloc; 4] = [
        Alloc::Raw,
        Alloc::RawUnused,
        Alloc::Pooled,
        Alloc::PooledUsed,
    ];

    fn label(self) -> &'static str {
        match self {
            Alloc::Raw => "raw: create + 4 B fill, wait + release (baseline)",
            Alloc::RawUnused => "raw: create + release, never used (no real allocation)",
            Alloc::Pooled => "pool: acquire + release (pair only)",
            Alloc::PooledUsed => "pool: acquire + 4 B fill, wait + release",
        }
    }
}

struct AllocBench<'a> {
    ctx: &'a Context,
    queue: &'a Queue,
    pool: Pool,
    raw: &'a Raw,
}

impl AllocBench<'_> {
    /// `n` pairs of `variant` at `bytes`; returns the host time of the loop.
    fn run(&self, variant: Alloc, bytes: usize, n: usize) -> anyhow::Result<Duration> {
        let len = bytes / size_of::<u32>();
        let start = Instant::now();
        match variant {
            Alloc::Raw => {
                for _ in 0..n {
                    let mem = self.raw.create(bytes)?;
                    self.raw.first_use(mem)?;
                    self.raw.release(mem)?;
                }
            }
            Alloc::RawUnused => {
                for _ in 0..n {
                    let mem = self.raw.create(bytes)?;
                    self.raw.release(mem)?;
                }
            }
            Alloc::Pooled => {
                for _ in 0..n {
                    let buf = self.pool.acquire::<u32>(len)?;
                    buf.release()?;
                }
            }
            Alloc::PooledUsed => {
                for _ in 0..n {
                    let buf = self.pool.acquire::<u32>(len)?;
                    self.queue.fill_range(&buf, PATTERN, 0..1)?.wait()?;
                    buf.release()?;
                }
            }
        }
        Ok(start.elapsed())
    }

    /// Pairs per repetition so that one takes about `target`, rounded to two significant
    /// digits.
    fn choose_n(&self, variant: Alloc, bytes: usize, target: Duration) -> anyhow::Result<usize> {
        let mut probe = 4;
        let took = loop {
            let took = self.run(variant, bytes, probe)?;
            if took >= target / 10 || probe >= MAX_N {
                break took;
            }
            probe *= 4;
        };
        let per = took.as_secs_f64().max(1e-9) / probe as f64;
        let n = (target.as_secs_f64() / per).clamp(MIN_N as f64, MAX_N as f64) as usize;
        let scale = 10usize.pow(n.ilog10().saturating_sub(1));
        Ok(n / scale * scale)
    }

    fn measure(&self, bytes: usize, reps: usize, target: Duration) -> anyhow::Result<SizeResult> {
        // Warm-up: PoCL builds its fill kernel at the first fill; the pool creates its
        // block of this size class.
        for variant in Alloc::ALL {
            self.run(variant, bytes, 3)?;
        }
        let mut n = [0; 4];
        for variant in Alloc::ALL {
            n[variant as usize] = self.choose_n(variant, bytes, target)?;
        }
        let mut samples: [Vec<f64>; 4] = Default::default();
        let mut pooled_pairs = 0u64;
        let mut pooled_driver_allocations = 0u64;
        interleave_with(reps, &Alloc::ALL, |variant| {
            let pooled = matches!(variant, Alloc::Pooled | Alloc::PooledUsed);
            let before = self.ctx.memory_stats().driver_allocations;
            let took = self.run(variant, bytes, n[variant as usize])?;
            if pooled {
                pooled_pairs += n[variant as usize] as u64;
                pooled_driver_allocations += self.ctx.memory_stats().driver_allocations - before;
            }
            samples[variant as usize].push(took.as_secs_f64() * 1e6 / n[variant as usize] as f64);
            Ok(())
        })?;
        let stats = samples.map(|s| Stats::of(&s));
        println!(
            "{:>6}: raw {:.2} µs, pool pair {:.3} µs ({:.0}x), pool pair + use {:.2} µs \
             ({:.1}x); {pooled_pairs} pooled pairs made {pooled_driver_allocations} \
             driver allocations",
            size_label(bytes),
            stats[Alloc::Raw as usize].median,
            stats[Alloc::Pooled as usize].median,
            stats[Alloc::Raw as usize].median / stats[Alloc::Pooled as usize].median,
            stats[Alloc::PooledUsed as usize].median,
            stats[Alloc::Raw as usize].median / stats[Alloc::PooledUsed as usize].median,
        );
        if pooled_driver_allocations != 0 {
            bail!("the pool called clCreateBuffer inside a timed loop: it did not reuse");
        }
        Ok(SizeResult { bytes, n, stats })
    }
}

/// Part 1's results at one size.
struct SizeResult {
    bytes: usize,
    /// Pairs per repetition, indexed by `Alloc as usize`.
    n: [usize; 4],
    stats: [Stats; 4],
}

// ---------------------------------------------------------------------------------------
// Part 2: releasing a buffer whose kernel is still running.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    /// `ClBuffer::release_deferred`.
    Deferred,
    /// `ClBuffer::release`.
    Blocking,
    /// Raw `clReleaseMemObject`.
    Raw,
}

impl Release {
    const ALL: [Release; 3] = [Release::Deferred, Release::Blocking, Release::Raw];

    fn label(self) -> &'static str {
        match self {
            Release::Deferred => "cl-lifetime: release_deferred()",
            Release::Blocking => "cl-lifetime: release() (waits for its kernel)",
            Release::Raw => "raw: clReleaseMemObject",
        }
    }
}

/// One timed release.
struct Released {
    /// Host time of the release call.
    took: Duration,
    /// Whether the kernel was still running when the call returned.
    kernel_running: bool,
    /// From the launch to the end of the kernel (as the host saw it).
    kernel: Duration,
}

struct ReleaseBench<'a> {
    ctx: &'a Context,
    queue: &'a Queue,
    spin: &'a Kernel,
    raw: &'a Raw,
    iters: u32,
}

impl ReleaseBench<'_> {
    fn run(&self, variant: Release) -> anyhow::Result<Released> {
        if variant == Release::Raw {
            return self.run_raw();
        }
        let buf = self.ctx.buffer::<f32>(SPIN_ITEMS)?;
        self.queue.fill(&buf, 1.0)?;
        let launched = Instant::now();
        // SAFETY: `self.spin` is busy.cl's spin (main builds it): it touches buf[i], i <
        // SPIN_ITEMS, buf's length.
        let kernel = unsafe {
            self.queue.launch(
                self.spin,
                &[SPIN_ITEMS],
                &[Arg::read_write(&buf), Arg::scalar(self.iters)],
            )
        }?;
        self.queue.flush()?;
        thread::sleep(HEAD_START);

        let start = Instant::now();
        match variant {
            Release::Deferred => buf.release_deferred(),
            _ => {
                buf.release()?;
            }
        }
        let took = start.elapsed();
        let kernel_running = !kernel.is_terminal();

        kernel.wait()?;
        let kernel_time = launched.elapsed();
        self.ctx.wait_deferred();
        Ok(Released {
            took,
            kernel_running,
            kernel: kernel_time,
        })
    }

    fn run_raw(&self) -> anyhow::Result<Released> {
        let mem = self.raw.spin_buffer()?;
        let launched = Instant::now();
        let kernel = self.raw.launch_spin(mem, self.iters)?;
        thread::sleep(HEAD_START);

        let start = Instant::now();
        let released = self.raw.release(mem);
        let took = start.elapsed();
        let kernel_running = !raw_done(kernel)?;

        let waited = cle::wait_for_events(&[kernel]).map_err(cl_err("clWaitForEvents"));
        let kernel_time = launched.elapsed();
        release_event(kernel)?;
        released?;
        waited?;
        Ok(Released {
            took,
            kernel_running,
            kernel: kernel_time,
        })
    }

    fn measure(&self, reps: usize) -> anyhow::Result<ReleaseResults> {
        // Warm-up: the raw kernel's first launch builds it for the device.
        let mem = self.raw.spin_buffer()?;
        let warm = self.raw.launch_spin(mem, 1)?;
        let waited = cle::wait_for_events(&[warm]).map_err(cl_err("clWaitForEvents"));
        release_event(warm)?;
        self.raw.release(mem)?;
        waited?;

        let mut samples: [Vec<Released>; 3] = Default::default();
        interleave_with(reps, &Release::ALL, |variant| {
            samples[variant as usize].push(self.run(variant)?);
            Ok(())
        })?;
        let pending = self.ctx.memory_stats().pending_release_bytes;
        if pending != 0 {
            bail!("{pending} bytes still pending release after wait_deferred");
        }
        Ok(ReleaseResults {
            iters: self.iters,
            samples,
        })
    }
}

struct ReleaseResults {
    iters: u32,
    /// Indexed by `Release as usize`.
    samples: [Vec<Released>; 3],
}

impl ReleaseResults {
    fn stats(&self, variant: Release) -> Stats {
        let us: Vec<f64> = self.samples[variant as usize]
            .iter()
            .map(|s| s.took.as_secs_f64() * 1e6)
            .collect();
        Stats::of(&us)
    }

    fn kernel_ms(&self) -> f64 {
        let all: Vec<f64> = self
            .samples
            .iter()
            .flatten()
            .map(|s| s.kernel.as_secs_f64() * 1e3)
            .collect();
        median(&all)
    }
}

// ---------------------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------------------

/// µs with a precision that suits its size.
fn us(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.3}")
    } else if value < 1000.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

fn print_alloc_table(sized: &[SizeResult], is_gpu: bool) {
    println!(
        "| size | variant | pairs / rep | µs / pair (median) | min-max | speed-up \
         (baseline / this) | goal |"
    );
    println!("|---|---|---:|---:|---:|---:|---|");
    for s in sized {
        let baseline = s.stats[Alloc::Raw as usize].median;
        for variant in Alloc::ALL {
            let st = &s.stats[variant as usize];
            let speedup = baseline / st.median;
            let goal = match variant {
                Alloc::Pooled => format!(
                    "≤ {GOAL_US} µs: {}; ≥ {GOAL_SPEEDUP}x: {}",
                    yes_no(st.median <= GOAL_US),
                    yes_no(speedup >= GOAL_SPEEDUP)
                ),
                _ => String::new(),
            };
            let ratio = if variant == Alloc::Raw {
                "1.00x".to_string()
            } else if speedup >= 10.0 {
                format!("{speedup:.0}x")
            } else {
                format!("{speedup:.2}x")
            };
            println!(
                "| {} | {} | {} | {} | {}-{} | {ratio} | {goal} |",
                size_label(s.bytes),
                variant.label(),
                s.n[variant as usize],
                us(st.median),
                us(st.min),
                us(st.max),
            );
        }
    }
    println!("\nThe goals are for a GPU, where the raw path pays the driver's allocation.");
    if !is_gpu {
        println!(
            "This is not a GPU: the allocation is a host malloc at first use, and the \
             4-byte fill's round trip dominates the rows that include a first use."
        );
    }
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "no" }
}

fn print_release_table(results: &ReleaseResults, reps: usize) {
    println!(
        "Release of a buffer whose `spin` kernel ({SPIN_ITEMS} items x {} iterations, \
         {:.0} ms median from launch) is still running, {} ms after its launch; {reps} \
         repetitions each:\n",
        results.iters,
        results.kernel_ms(),
        HEAD_START.as_millis()
    );
    println!(
        "| release | host µs per release (median) | min-max | this / release_deferred | \
         kernel still running at return |"
    );
    println!("|---|---:|---:|---:|---:|");
    let deferred = results.stats(Release::Deferred).median;
    for variant in Release::ALL {
        let st = results.stats(variant);
        let running = results.samples[variant as usize]
            .iter()
            .filter(|s| s.kernel_running)
            .count();
        let ratio = st.median / deferred;
        let ratio = if ratio >= 10.0 {
            format!("{ratio:.0}x")
        } else {
            format!("{ratio:.2}x")
        };
        println!(
            "| {} | {} | {}-{} | {ratio} | {running}/{} |",
            variant.label(),
            us(st.median),
            us(st.min),
            us(st.max),
            results.samples[variant as usize].len()
        );
    }
}
