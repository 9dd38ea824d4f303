//! The host cost of one enqueue: cl-lifetime against raw `opencl3`, measured in one run.
//!
//! Every cl-lifetime enqueue locks the records of the buffers it touches, computes its
//! wait list from their hazards, enqueues and records the event. This benchmark measures
//! what that costs the host, per enqueue, against the raw calls a user would otherwise
//! write. The kernel is `tiny` (kernels/tiny.cl: `data[i] += 1` over 64 work items), so
//! the host side dominates. Two scenarios:
//!
//! - **A**, one in-order queue, one buffer: the same kernel launched N times. Nothing
//!   needs a wait list (same-queue hazards are left out), so this is the library's fixed
//!   cost per launch. Two raw baselines: the argument set once before the loop (the least
//!   a user can write), and the argument set on every launch under a lock, which is what a
//!   multi-threaded program sharing the kernel must do (OpenCL 3.0 appendix A.2), and
//!   what the library does (it also resets the argument to NULL after the enqueue).
//! - **B**, two in-order queues alternating on one buffer: each launch must wait on the
//!   previous one, from the other queue. Raw code passes the previous event as a one-entry
//!   wait list by hand and flushes the producer queue first (design trap "flush before a cross-queue wait", docs/design.md); the
//!   library works both out from the buffer's record.
//!
//! Two more raw variants isolate what the library's record does with events in B: it keeps
//! each superseded event until it is known to have ended (the tracker's *shadow* rule, in case the
//! command that superseded it fails early), then releases it as it prunes, where raw code
//! releases each event as soon as the next launch has it in its wait list. "Raw, events
//! kept until drained" holds every event of a batch and releases them after the clock
//! stops (the cost of holding alone); "raw, events released a batch late" holds them and
//! releases the previous batch's, ended by then, one per launch inside the loop (holding
//! plus freeing ended events on the enqueuing thread, as the library does). Freeing an
//! ended event is the driver's real work: a pending event released by raw code is freed
//! later by the driver, off the clock and off the caller's thread.
//!
//! # Method
//!
//! Only the enqueue loop is timed: each launch's returned event is released (raw) or
//! dropped (cl-lifetime) in the loop. Each variant runs R repetitions of N launches,
//! interleaved with the other variants in an order that reverses every repetition, so that
//! drift (clocks, caches, a busy neighbour) falls on all of them alike. Reported: the
//! median and min-max of µs per enqueue, the ratio cl-lifetime / raw of the medians, and
//! their difference, the host time the library adds per enqueue. Both sides use one
//! context and the same kernel source; each has its own queues, kernel object and buffer.
//! Every launch increments the buffer, so the final check that each element counts every
//! launch also shows that scenario B's cross-queue ordering held on both sides.
//!
//! A repetition runs in batches of 1,000 launches. By default each batch is **gated**: an
//! untimed lead launch waits on a user event, so the batch's launches queue up behind it
//! while the clock runs; the gate opens and `clFinish` drains the batch after the clock
//! stops. This measures the host path alone, and the difference cl-lifetime - raw comes
//! out the same from run to run. Without the gate (`--live`) the device runs the launches
//! meanwhile: the numbers are those of a real program, but where the driver's worker
//! threads share a few cores with the enqueuing thread (PoCL on a small machine), the
//! difference moves several times more from run to run than it does gated. Batching
//! bounds the work in flight, so the driver recycles its command memory rather than
//! faulting in fresh pages (more expensive than an enqueue on a virtual machine), and in
//! live mode it keeps a device slower than the host from blocking the enqueues; the
//! per-scenario "drain" figure, the time from the end of the loop to the end of `clFinish`
//! summed over a repetition, shows how much work was left.
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example enqueue_cost
//! cargo run --release --example enqueue_cost -- --quick
//! cargo run --release --example enqueue_cost -- --live --n 100000
//! ```
//!
//! `--quick` runs 3 shorter repetitions; `--n N` fixes the launches per repetition (by
//! default N is chosen so that a raw repetition's loops take about 0.2 s); `--live`
//! removes the gate. `CL_LIFETIME_DEVICE` picks the device; `CL_LIFETIME_KERNELS` names
//! the folder(s) holding `tiny.cl` when the binary runs away from its source tree.

use std::cell::Cell;
use std::ptr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use cl_lifetime::{Arg, ClBuffer, Context, Event, HazardStats, Kernel, Queue};
use opencl3::command_queue::{self as clq, CL_QUEUE_PROPERTIES, CommandQueue};
use opencl3::kernel::Kernel as RawKernel;
use opencl3::memory::{self as clm, Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE, ClMem};
use opencl3::types::{cl_event, cl_mem};

use harness::{
    Keep, KeptEvents, ProgramHandle, RawGate, Stats, cl_err, enqueue_1d, interleave_with, median,
    print_device, release_event, set_arg,
};

/// Work items per launch (and elements of each buffer).
const WORK_ITEMS: usize = 64;
/// How long a raw repetition should take when N is chosen automatically.
const TARGET_REP: Duration = Duration::from_millis(200);
const TARGET_REP_QUICK: Duration = Duration::from_millis(60);
const REPS: usize = 7;
const REPS_QUICK: usize = 3;
/// Bounds on the automatic N.
const MIN_N: usize = 2_000;
const MAX_N: usize = 1_000_000;
/// Launches in flight at most: a repetition runs in batches of this many, each drained
/// (untimed) before the next, so that the driver recycles its command memory instead of
/// faulting in fresh pages, which costs more than an enqueue on a virtual machine.
const BATCH: usize = 1_000;
/// Untimed launches per variant and scenario before measuring.
const WARM_UP: usize = 20 * BATCH;

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let options = Options::parse()?;

    let ctx = Context::from_env()?;
    print_device(&ctx);

    // Both sides build the same file: the one the library's search rule finds.
    let program = ctx.program("tiny.cl", "")?;
    let source = std::fs::read_to_string(program.file())
        .with_context(|| format!("reading {}", program.file().display()))?;
    let bench = Bench {
        raw: Raw::new(&ctx, &source)?,
        lib: Lib {
            ctx: ctx.clone(),
            queues: [ctx.queue()?, ctx.queue()?],
            kernel: program.kernel("tiny")?,
            buffer: ctx.buffer_from(&[0i32; WORK_ITEMS])?,
            launched: Cell::new(0),
        },
        gated: !options.live,
    };

    if let Some((scenario, variant)) = options.only {
        return bench.only(scenario, variant, options.n.unwrap_or(MIN_N));
    }

    // Warm-up: PoCL builds the kernel for the device at the first launch, and the heap
    // settles; every variant of both scenarios runs, untimed.
    for scenario in Scenario::ALL {
        for variant in Variant::ALL {
            bench.run(scenario, variant, WARM_UP)?;
        }
    }
    let n = match options.n {
        Some(n) => n,
        None => bench.choose_n(options.target())?,
    };
    let reps = options.reps();
    println!(
        "kernel:   tiny, {WORK_ITEMS} work items; {n} enqueues per repetition, {reps} \
         repetitions per variant, interleaved"
    );
    println!(
        "mode:     {}\n",
        if bench.gated {
            "gated: the launches wait on a user event until the clock stops (host cost \
             alone; --live lets the device run meanwhile)"
        } else {
            "live: the device runs the launches while the host enqueues them"
        }
    );

    let mut results = Vec::new();
    for scenario in Scenario::ALL {
        let result = bench.measure(scenario, n, reps)?;
        result.print();
        results.push(result);
    }
    bench.check()?;
    print_table(&results);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Options.
// ---------------------------------------------------------------------------------------

struct Options {
    quick: bool,
    live: bool,
    n: Option<usize>,
    /// `--only SCENARIO:VARIANT`: one variant alone, for a profiler.
    only: Option<(Scenario, Variant)>,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let mut options = Options {
            quick: false,
            live: false,
            n: None,
            only: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => options.quick = true,
                "--live" => options.live = true,
                "--n" => {
                    let value = args.next().context("--n needs a number")?;
                    let n: usize = value
                        .parse()
                        .with_context(|| format!("--n {value}: not a number"))?;
                    if n == 0 {
                        bail!("--n must be at least 1");
                    }
                    options.n = Some(n);
                }
                "--only" => {
                    let value = args.next().context("--only needs SCENARIO:VARIANT")?;
                    options.only = Some(parse_only(&value)?);
                }
                // `cargo bench`-style harness flags, harmless to ignore.
                "--bench" => {}
                other => bail!(
                    "unknown argument {other:?} (expected --quick, --live, --n N or \
                     --only SCENARIO:VARIANT)"
                ),
            }
        }
        Ok(options)
    }

    fn target(&self) -> Duration {
        if self.quick {
            TARGET_REP_QUICK
        } else {
            TARGET_REP
        }
    }

    fn reps(&self) -> usize {
        if self.quick { REPS_QUICK } else { REPS }
    }
}

/// `A:raw`, `B:lib`...: a scenario (`A`, `B`) and a variant (`raw`, `raw-args`, `lib`, or
/// the experiments `raw-keep` and `raw-late`).
fn parse_only(value: &str) -> anyhow::Result<(Scenario, Variant)> {
    let (scenario, variant) = value
        .split_once(':')
        .with_context(|| format!("--only {value}: expected SCENARIO:VARIANT, as in B:lib"))?;
    let scenario = match scenario {
        "A" => Scenario::OneQueue,
        "B" => Scenario::TwoQueues,
        other => bail!("--only: scenario {other:?} is not A or B"),
    };
    let variant = match variant {
        "raw" => Variant::RawOnce,
        "raw-args" => Variant::RawPerLaunch,
        "lib" => Variant::Library,
        "raw-keep" => Variant::RawKeep,
        "raw-late" => Variant::RawLate,
        other => {
            bail!("--only: variant {other:?} is not raw, raw-args, lib, raw-keep or raw-late")
        }
    };
    Ok((scenario, variant))
}

// ---------------------------------------------------------------------------------------
// What is measured.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// One in-order queue, one buffer.
    OneQueue,
    /// Two in-order queues alternating on one buffer.
    TwoQueues,
}

impl Scenario {
    const ALL: [Scenario; 2] = [Scenario::OneQueue, Scenario::TwoQueues];

    fn label(self) -> &'static str {
        match self {
            Scenario::OneQueue => "A: 1 in-order queue",
            Scenario::TwoQueues => "B: 2 queues alternating",
        }
    }

    fn queues(self) -> usize {
        match self {
            Scenario::OneQueue => 1,
            Scenario::TwoQueues => 2,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Raw opencl3, the argument set once before the loop.
    RawOnce,
    /// Raw opencl3, the argument set on every launch under a lock.
    RawPerLaunch,
    /// cl-lifetime's `Queue::launch`.
    Library,
    /// Raw, each launch's event kept until the batch is drained, then released untimed:
    /// what holding events costs the enqueues.
    RawKeep,
    /// Raw, each launch's event kept, and the previous batch's events (ended by then)
    /// released one per launch inside the timed loop: in scenario B, what the library's
    /// record does with superseded events (the tracker's *shadow* rule) when it prunes them.
    RawLate,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::RawOnce,
        Variant::RawPerLaunch,
        Variant::RawKeep,
        Variant::RawLate,
        Variant::Library,
    ];

    fn label(self) -> &'static str {
        match self {
            Variant::RawOnce => "raw, args set once",
            Variant::RawPerLaunch => "raw, args per launch",
            Variant::Library => "cl-lifetime launch",
            Variant::RawKeep => "raw, events kept until drained",
            Variant::RawLate => "raw, events released a batch late",
        }
    }
}

/// One timed repetition.
struct Sample {
    /// Host time of the enqueue loop.
    enqueue: Duration,
    /// From the end of the loop to the end of `clFinish`, opening the gate included.
    drain: Duration,
    /// The library's wait-list counters over the timed launches (zero for raw code).
    hazards: HazardStats,
}

fn add_hazards(total: &mut HazardStats, more: &HazardStats) {
    total.enqueues += more.enqueues;
    total.wait_entries += more.wait_entries;
    total.wait_entries_without_elision += more.wait_entries_without_elision;
}

struct Bench {
    raw: Raw,
    lib: Lib,
    /// Whether each repetition's launches wait on a user event opened after the clock
    /// stops.
    gated: bool,
}

impl Bench {
    /// `n` timed launches, in batches of at most `BATCH`.
    fn run(&self, scenario: Scenario, variant: Variant, n: usize) -> anyhow::Result<Sample> {
        let mut total = Sample {
            enqueue: Duration::ZERO,
            drain: Duration::ZERO,
            hazards: HazardStats::default(),
        };
        let mut left = n;
        while left > 0 {
            let batch = left.min(BATCH);
            left -= batch;
            let sample = match variant {
                Variant::RawOnce => self.raw.run(scenario, false, Keep::No, batch, self.gated),
                Variant::RawPerLaunch => self.raw.run(scenario, true, Keep::No, batch, self.gated),
                Variant::RawKeep => self
                    .raw
                    .run(scenario, false, Keep::Drained, batch, self.gated),
                Variant::RawLate => self.raw.run(scenario, false, Keep::Late, batch, self.gated),
                Variant::Library => self.lib.run(scenario, batch, self.gated),
            }?;
            total.enqueue += sample.enqueue;
            total.drain += sample.drain;
            add_hazards(&mut total.hazards, &sample.hazards);
        }
        Ok(total)
    }

    /// `--only`: a warm-up and `n` launches of one variant, nothing else, so that a profiler
    /// (`perf`, or the call counter scripts/cl-calls.c) sees that variant alone.
    fn only(&self, scenario: Scenario, variant: Variant, n: usize) -> anyhow::Result<()> {
        self.run(scenario, variant, BATCH)?;
        let sample = self.run(scenario, variant, n)?;
        println!(
            "{}, {}: {n} launches, {:.3} µs/enqueue",
            scenario.label(),
            variant.label(),
            sample.enqueue.as_secs_f64() * 1e6 / n as f64
        );
        self.check()
    }

    /// N such that a raw repetition of scenario A takes about `target`, rounded to two
    /// significant digits.
    fn choose_n(&self, target: Duration) -> anyhow::Result<usize> {
        let probe = 10_000;
        let took = self
            .run(Scenario::OneQueue, Variant::RawOnce, probe)?
            .enqueue;
        let per = took.as_secs_f64().max(1e-9) / probe as f64;
        let n = (target.as_secs_f64() / per).clamp(MIN_N as f64, MAX_N as f64) as usize;
        let scale = 10usize.pow(n.ilog10().saturating_sub(1));
        Ok(n / scale * scale)
    }

    fn measure(&self, scenario: Scenario, n: usize, reps: usize) -> anyhow::Result<Measured> {
        let mut samples: [Vec<Sample>; 5] = Default::default();
        let mut hazards = HazardStats::default();
        interleave_with(reps, &Variant::ALL, |variant| {
            let sample = self.run(scenario, variant, n)?;
            add_hazards(&mut hazards, &sample.hazards);
            samples[variant as usize].push(sample);
            Ok(())
        })?;
        // What the raw code passes by hand: nothing in A; in B, every launch waits on the
        // one before.
        let raw_waits = match scenario {
            Scenario::OneQueue => 0.0,
            Scenario::TwoQueues => 1.0,
        };
        let measured = samples.map(|s| stats_of(&s, n));
        Ok(Measured {
            scenario,
            n,
            gated: self.gated,
            stats: measured.map(|(stats, _)| stats),
            drain_ms: measured.map(|(_, drain)| drain),
            hazards,
            raw_waits,
        })
    }

    /// Every launch of both sides ran exactly once: each element counts them. In B this
    /// also shows the cross-queue ordering held (racing launches would lose increments).
    fn check(&self) -> anyhow::Result<()> {
        let raw = self.raw.read()?;
        let lib = self.lib.queues[0].read_owned(&self.lib.buffer)?.wait()?;
        for (side, values, expected) in [
            ("raw", raw, self.raw.launched.get()),
            ("cl-lifetime", lib, self.lib.launched.get()),
        ] {
            if let Some(bad) = values.iter().find(|&&v| i64::from(v) != expected as i64) {
                bail!("{side}: an element holds {bad}, expected {expected} (one per launch)");
            }
        }
        println!(
            "check:    every element counts every launch (raw {}, cl-lifetime {})\n",
            self.raw.launched.get(),
            self.lib.launched.get()
        );
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Raw opencl3: the calls a user writes without the library.
// ---------------------------------------------------------------------------------------

struct Raw {
    /// Keeps the context of every raw handle below alive; gives user events.
    ctx: Context,
    queues: [CommandQueue; 2],
    kernel: RawKernel,
    _program: ProgramHandle,
    buffer: Buffer<i32>,
    /// What a multi-threaded program holds around clSetKernelArg + enqueue of a shared
    /// kernel (OpenCL 3.0 appendix A.2); uncontended here.
    kernel_lock: Mutex<()>,
    launched: Cell<usize>,
    /// `Keep::Late`: the last batch's events, released during the next one.
    held: std::cell::RefCell<Vec<cl_event>>,
}

impl Drop for Raw {
    fn drop(&mut self) {
        for event in self.held.take() {
            let _ = release_event(event);
        }
    }
}

impl Raw {
    /// Queues, program, kernel and buffer in the library's context, with raw calls.
    fn new(ctx: &Context, source: &str) -> anyhow::Result<Raw> {
        let device = ctx.device().as_raw();
        let properties = [u64::from(CL_QUEUE_PROPERTIES), 0, 0];
        let queue = || -> anyhow::Result<CommandQueue> {
            // SAFETY: context and device are live handles of `ctx`; `properties` is a
            // zero-terminated list that outlives the call.
            let raw = unsafe {
                clq::create_command_queue_with_properties(ctx.as_raw(), device, properties.as_ptr())
            }
            .map_err(cl_err("clCreateCommandQueueWithProperties"))?;
            // The wrapper releases it on drop; the dimension count is only used by
            // opencl3's `ExecuteKernel`, which this code does not use.
            Ok(CommandQueue::new(raw, 3))
        };
        let queues = [queue()?, queue()?];

        let program = ProgramHandle::build(ctx.as_raw(), device, source)?;
        let kernel = program.kernel("tiny")?;

        let mut zeros = [0i32; WORK_ITEMS];
        // SAFETY: `zeros` holds WORK_ITEMS i32, copied by OpenCL before the call returns
        // (CL_MEM_COPY_HOST_PTR) and not used afterwards.
        let mem = unsafe {
            clm::create_buffer(
                ctx.as_raw(),
                CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                size_of_val(&zeros),
                zeros.as_mut_ptr().cast(),
            )
        }
        .map_err(cl_err("clCreateBuffer"))?;
        Ok(Raw {
            ctx: ctx.clone(),
            queues,
            kernel,
            _program: program,
            buffer: Buffer::new(mem),
            kernel_lock: Mutex::new(()),
            launched: Cell::new(0),
            held: Default::default(),
        })
    }

    #[inline]
    fn set_arg(&self) -> anyhow::Result<()> {
        let mem: cl_mem = self.buffer.get();
        // SAFETY: argument 0 of `tiny` is a `__global int*`; `mem` is a live cl_mem (owned
        // by `self.buffer`, which outlives every launch). Only this thread uses the kernel,
        // and `launch` holds the kernel lock around this call and the enqueue that follows
        // when it is per launch.
        unsafe { set_arg(self.kernel.get(), 0, &mem) }
    }

    /// One launch of `tiny` on `queue`, waiting on `wait`; the caller owns the event.
    #[inline]
    fn launch(
        &self,
        queue: &CommandQueue,
        per_launch: bool,
        wait: &[cl_event],
    ) -> anyhow::Result<cl_event> {
        let enqueue = || {
            // SAFETY: the kernel's one argument is set (before the loop, or just before
            // this call under the kernel lock); the buffer holds WORK_ITEMS ints; the wait
            // list holds live events (retained by the caller until after this call).
            unsafe { enqueue_1d(queue.get(), self.kernel.get(), WORK_ITEMS, wait) }
        };
        if per_launch {
            let _held = self
                .kernel_lock
                .lock()
                .map_err(|_| anyhow!("kernel lock poisoned"))?;
            self.set_arg()?;
            enqueue()
        } else {
            enqueue()
        }
    }

    fn run(
        &self,
        scenario: Scenario,
        per_launch: bool,
        keep: Keep,
        n: usize,
        gated: bool,
    ) -> anyhow::Result<Sample> {
        if !per_launch {
            self.set_arg()?;
        }
        let mut gate = if gated {
            Some(RawGate::new(self.ctx.as_raw())?)
        } else {
            None
        };
        let gate_list: Vec<cl_event> = gate.iter().map(|g| g.event).collect();
        // The lead launch, untimed: waits on the gate, and is the first launch's producer
        // in scenario B (on the queue the first timed launch does not use).
        let lead_queue = scenario.queues() - 1;
        let lead = self.launch(&self.queues[lead_queue], per_launch, &gate_list)?;

        let mut events = KeptEvents::new(
            keep,
            if keep == Keep::Late {
                self.held.take()
            } else {
                Vec::new()
            },
        );
        let start = Instant::now();
        match scenario {
            Scenario::OneQueue => {
                release_event(lead)?;
                let queue = &self.queues[0];
                for _ in 0..n {
                    events.done(self.launch(queue, per_launch, &[])?)?;
                }
            }
            Scenario::TwoQueues => {
                let (mut previous, mut producer) = (lead, lead_queue);
                for i in 0..n {
                    let q = i % 2;
                    // The producer queue must be flushed before another queue waits on its
                    // event (design trap "flush before a cross-queue wait", docs/design.md).
                    clq::flush(self.queues[producer].get()).map_err(cl_err("clFlush"))?;
                    let event = self.launch(&self.queues[q], per_launch, &[previous])?;
                    events.done(previous)?;
                    (previous, producer) = (event, q);
                }
                events.done(previous)?;
            }
        }
        events.end_loop()?;
        let enqueue = start.elapsed();

        let start = Instant::now();
        if let Some(gate) = &mut gate {
            gate.open()?;
        }
        for queue in &self.queues[..scenario.queues()] {
            queue
                .finish()
                .map_err(|e| anyhow!("clFinish failed: {e}"))?;
        }
        let late = events.after_drain()?;
        if keep == Keep::Late {
            // What `held` had was taken at the start of this batch.
            *self.held.borrow_mut() = late;
        }
        self.launched.set(self.launched.get() + n + 1);
        Ok(Sample {
            enqueue,
            drain: start.elapsed(),
            hazards: HazardStats::default(),
        })
    }

    fn read(&self) -> anyhow::Result<Vec<i32>> {
        let mut out = vec![0i32; WORK_ITEMS];
        // SAFETY: a blocking read of WORK_ITEMS i32 into `out`, which holds that many;
        // every launch on the buffer has finished (clFinish after each repetition).
        let event = unsafe {
            clq::enqueue_read_buffer(
                self.queues[0].get(),
                self.buffer.get(),
                clq::CL_BLOCKING,
                0,
                size_of_val(out.as_slice()),
                out.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueReadBuffer"))?;
        release_event(event)?;
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------
// cl-lifetime.
// ---------------------------------------------------------------------------------------

struct Lib {
    ctx: Context,
    queues: [Queue; 2],
    kernel: Kernel,
    buffer: ClBuffer<i32>,
    launched: Cell<usize>,
}

impl Lib {
    fn run(&self, scenario: Scenario, n: usize, gated: bool) -> anyhow::Result<Sample> {
        let gate = if gated {
            Some(self.ctx.user_event()?)
        } else {
            None
        };
        let deps: Vec<&Event> = gate.iter().map(|g| g.event()).collect();
        // The lead launch, untimed, as on the raw side.
        let lead_queue = &self.queues[scenario.queues() - 1];
        // SAFETY: tiny touches buffer[i], i < WORK_ITEMS, the buffer's length.
        unsafe {
            lead_queue.after(&deps).launch(
                &self.kernel,
                &[WORK_ITEMS],
                &[Arg::read_write(&self.buffer)],
            )
        }?;
        let before = self.ctx.hazard_stats();

        let start = Instant::now();
        for i in 0..n {
            let queue = &self.queues[i % scenario.queues()];
            // The returned event is dropped: the buffer's record keeps what it needs.
            // SAFETY: as above.
            unsafe {
                queue.launch(
                    &self.kernel,
                    &[WORK_ITEMS],
                    &[Arg::read_write(&self.buffer)],
                )
            }?;
        }
        let enqueue = start.elapsed();

        let after = self.ctx.hazard_stats();
        let start = Instant::now();
        if let Some(gate) = &gate {
            gate.complete()?;
        }
        for queue in &self.queues[..scenario.queues()] {
            clq::finish(queue.as_raw()).map_err(cl_err("clFinish"))?;
        }
        self.launched.set(self.launched.get() + n + 1);
        Ok(Sample {
            enqueue,
            drain: start.elapsed(),
            hazards: HazardStats {
                enqueues: after.enqueues - before.enqueues,
                wait_entries: after.wait_entries - before.wait_entries,
                wait_entries_without_elision: after.wait_entries_without_elision
                    - before.wait_entries_without_elision,
            },
        })
    }
}

// ---------------------------------------------------------------------------------------
// Statistics and output.
// ---------------------------------------------------------------------------------------

/// µs per enqueue over the repetitions of one variant, and the median drain time per
/// repetition in ms.
fn stats_of(samples: &[Sample], n: usize) -> (Stats, f64) {
    let us: Vec<f64> = samples
        .iter()
        .map(|s| s.enqueue.as_secs_f64() * 1e6 / n as f64)
        .collect();
    let drain: Vec<f64> = samples
        .iter()
        .map(|s| s.drain.as_secs_f64() * 1e3)
        .collect();
    (Stats::of(&us), median(&drain))
}

struct Measured {
    scenario: Scenario,
    n: usize,
    gated: bool,
    /// µs per enqueue, indexed by `Variant as usize`.
    stats: [Stats; 5],
    /// Median drain time per repetition in ms, indexed by `Variant as usize`.
    drain_ms: [f64; 5],
    hazards: HazardStats,
    /// Wait-list entries per enqueue the raw code passes by hand.
    raw_waits: f64,
}

impl Measured {
    fn lib(&self) -> &Stats {
        &self.stats[Variant::Library as usize]
    }

    fn print(&self) {
        println!("{}", self.scenario.label());
        for variant in Variant::ALL {
            let s = &self.stats[variant as usize];
            println!(
                "  {:<34} {:>7.3} µs/enqueue (min {:.3}, max {:.3}); drain {:.1} ms",
                variant.label(),
                s.median,
                s.min,
                s.max,
                self.drain_ms[variant as usize]
            );
        }
        for variant in Variant::ALL.into_iter().filter(|&v| v != Variant::Library) {
            let raw = &self.stats[variant as usize];
            println!(
                "  cl-lifetime vs {:<34} {:.2}x, {:+.3} µs per enqueue",
                variant.label(),
                self.lib().median / raw.median,
                self.lib().median - raw.median
            );
        }
        println!(
            "  wait-list entries per enqueue: cl-lifetime {:.3} ({:.3} without same-queue \
             elision, {} enqueues); raw passes {:.3} by hand",
            self.hazards.per_enqueue(),
            self.hazards.per_enqueue_without_elision(),
            self.hazards.enqueues,
            self.raw_waits
        );
        let drain = self.drain_ms.iter().copied().fold(0.0, f64::max);
        let slowest = self
            .stats
            .iter()
            .map(|s| s.median * self.n as f64 / 1e3)
            .fold(0.0, f64::max);
        if !self.gated && drain > slowest {
            println!(
                "  note: the device drained for longer ({drain:.0} ms) than the host took to \
                 enqueue ({slowest:.0} ms): it lags the host, which may then block"
            );
        }
        println!();
    }
}

fn print_table(results: &[Measured]) {
    println!(
        "| scenario | variant | µs/enqueue (median) | min-max | cl-lifetime / this | \
         cl-lifetime - this (µs) | wait entries / enqueue |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for m in results {
        for variant in Variant::ALL {
            let s = &m.stats[variant as usize];
            let (ratio, delta, waits) = if variant == Variant::Library {
                (
                    "-".to_string(),
                    "-".to_string(),
                    format!("{:.3}", m.hazards.per_enqueue()),
                )
            } else {
                (
                    format!("{:.2}x", m.lib().median / s.median),
                    format!("{:+.3}", m.lib().median - s.median),
                    format!("{:.3}", m.raw_waits),
                )
            };
            println!(
                "| {} | {} | {:.3} | {:.3}-{:.3} | {ratio} | {delta} | {waits} |",
                m.scenario.label(),
                variant.label(),
                s.median,
                s.min,
                s.max
            );
        }
    }
}
