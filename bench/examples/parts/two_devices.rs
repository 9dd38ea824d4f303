//! Comparison 11 of `compare.rs`: a pipeline that alternates two devices of one context
//! on one buffer set, each stage on the device that owns it. Included by `compare.rs`
//! (`#[path]`), not an example of its own.
//!
//! Iteration `i`, [`DEPTH`] in flight, one in-order queue per device:
//!
//! - stage A, device 0: a non-blocking write of the host input `x[k] = i + k` into buffer
//!   `a`, then `stage_a`: `a[k] = a[k] * 3 + i`;
//! - stage B, device 1: `stage_b`: `b[k] = a[k] + 1`, into buffer `b`;
//! - stage C, device 0: `stage_c`: `a[k] = a[k] + 2 * b[k]`, then a non-blocking read of
//!   `a` back to the host, checked when the iteration's slot comes round again against
//!   `9 (i + k) + 3 i + 2` (every element every [`FULL_CHECK`]th iteration, the first,
//!   middle and last otherwise, on both sides alike).
//!
//! `a` belongs to device 0 and `b` to device 1. The library takes `a` from a pool of
//! device 0 and `b` from a pool of device 1 (`Pool::acquire_on` the owning device's
//! queue), enqueues with no event in sight and releases both with `release_deferred` once
//! the read is enqueued: its hazards put B after A's kernel, C after B, and a reused block
//! after its earlier commands. The raw side is `opencl3` on the same context and devices
//! holding its events by hand: a `clCreateBuffer` per buffer and iteration, the producer's
//! event in each consumer's wait list, the producer's queue flushed before a wait from
//! the other queue, and each buffer's events (its commands' last on each queue) waited
//! for with `clWaitForEvents` before its `clReleaseMemObject`.

use std::ffi::CString;

use opencl3::program as clp;
use opencl3::types::cl_command_queue;

use super::*;

/// The three stages, one program for both devices (library and raw alike).
const SOURCE: &str = "
__kernel void stage_a(__global int *a, uint seed) {
    size_t k = get_global_id(0);
    a[k] = a[k] * 3 + (int)seed;
}
__kernel void stage_b(__global const int *a, __global int *b) {
    size_t k = get_global_id(0);
    b[k] = a[k] + 1;
}
__kernel void stage_c(__global int *a, __global const int *b) {
    size_t k = get_global_id(0);
    a[k] = a[k] + 2 * b[k];
}
";

/// Every element of an iteration's result is checked when `i % FULL_CHECK == 0`; the
/// first, middle and last otherwise.
const FULL_CHECK: usize = 8;

const LIB: &str = "cl-lifetime, a pool per device (acquire_on), no events by hand, 4 in flight";
const RAW: &str = "raw opencl3, clCreateBuffer per iteration, events passed, flushed and \
                   held by hand, 4 in flight";

/// Iteration `i`'s host input.
fn input(i: usize) -> Vec<i32> {
    (0..PIPE_ITEMS).map(|k| (i + k) as i32).collect()
}

/// Iteration `i`'s result: element `k` is `9 (i + k) + 3 i + 2`.
fn check_result(out: &[i32], i: usize) -> anyhow::Result<()> {
    if out.len() != PIPE_ITEMS {
        bail!(
            "iteration {i}: {} elements, expected {PIPE_ITEMS}",
            out.len()
        );
    }
    let expect = |k: usize| (9 * (i + k) + 3 * i + 2) as i32;
    let wrong = if i % FULL_CHECK == 0 {
        out.iter().enumerate().find(|&(k, &x)| x != expect(k))
    } else {
        [0, PIPE_ITEMS / 2, PIPE_ITEMS - 1]
            .into_iter()
            .map(|k| (k, &out[k]))
            .find(|&(k, &x)| x != expect(k))
    };
    match wrong {
        Some((k, x)) => bail!("iteration {i}: element {k} is {x}, expected {}", expect(k)),
        None => Ok(()),
    }
}

/// A context over two devices of one platform: the platform of `CL_LIFETIME_DEVICE` (or
/// the default device) when it has two, else the first platform that does, the chosen
/// device first when it is on it (as the integration tests pick them); or why there is
/// none.
fn find_two_devices() -> Result<Context, String> {
    let devices = cl_lifetime::Device::all().map_err(|e| format!("no OpenCL devices ({e})"))?;
    let chosen = cl_lifetime::Device::from_env().ok();
    let mut platforms: Vec<usize> = devices.iter().map(|d| d.indices().0).collect();
    platforms.dedup();
    if let Some(p) = chosen.as_ref().map(|d| d.indices().0) {
        platforms.sort_by_key(|&q| q != p);
    }
    let mut failures = Vec::new();
    for platform in platforms {
        let mut on: Vec<&cl_lifetime::Device> = devices
            .iter()
            .filter(|d| d.indices().0 == platform)
            .collect();
        if let Some(c) = &chosen {
            on.sort_by_key(|d| d.indices() != c.indices());
        }
        if let [d0, d1, ..] = on[..] {
            match Context::with_devices(&[d0.clone(), d1.clone()]) {
                Ok(ctx) => return Ok(ctx),
                Err(e) => failures.push(format!("{d0} + {d1}: {e}")),
            }
        }
    }
    let found: Vec<String> = devices.iter().map(ToString::to_string).collect();
    let failed = if failures.is_empty() {
        String::new()
    } else {
        format!("; failed: {}", failures.join(", "))
    };
    Err(format!(
        "no platform with two usable devices (found {}{failed}); PoCL exposes two with \
         POCL_DEVICES=\"pthread pthread\"",
        found.join(", ")
    ))
}

// ---------------------------------------------------------------------------------------
// The library's side.
// ---------------------------------------------------------------------------------------

/// The library's queues (one per device), pools (one per device) and stage kernels.
struct LibTwo {
    ctx: Context,
    queues: [Queue; 2],
    pools: [Pool; 2],
    stages: [Kernel; 3],
    /// The most bytes each device's pool has held (in use + pooled), seen after each
    /// acquire.
    peak: [u64; 2],
}

impl LibTwo {
    fn new(ctx: &Context) -> anyhow::Result<LibTwo> {
        let devices = ctx.devices();
        let program = ctx.program_from_source("two_devices", SOURCE, "")?;
        Ok(LibTwo {
            ctx: ctx.clone(),
            queues: [
                ctx.queue_on(&devices[0], false)?,
                ctx.queue_on(&devices[1], false)?,
            ],
            pools: [
                Pool::new(ctx, PoolOptions::default())?,
                Pool::new(ctx, PoolOptions::default())?,
            ],
            stages: [
                program.kernel("stage_a")?,
                program.kernel("stage_b")?,
                program.kernel("stage_c")?,
            ],
            peak: [0; 2],
        })
    }

    /// µs per iteration of `n` iterations, [`DEPTH`] in flight.
    fn run(&mut self, n: usize) -> anyhow::Result<f64> {
        struct Slot {
            read: PendingRead<i32>,
            i: usize,
        }
        let retire =
            |slot: Slot| -> anyhow::Result<()> { check_result(&slot.read.wait()?, slot.i) };
        let mut slots = InFlight::new(1);
        let start = Instant::now();
        for i in 0..n {
            slots.make_room(0, retire)?;
            let [q0, q1] = &self.queues;
            let [stage_a, stage_b, stage_c] = &self.stages;
            let a = self.pools[0].acquire_on::<i32>(q0, PIPE_ITEMS)?;
            let b = self.pools[1].acquire_on::<i32>(q1, PIPE_ITEMS)?;
            // Each device's bytes: its pool's blocks in use and pooled, with this
            // iteration's just taken.
            for (pool, peak) in self.pools.iter().zip(&mut self.peak) {
                let stats = pool.stats();
                *peak = (*peak).max(stats.in_use_bytes + stats.pooled_bytes);
            }
            q0.write_owned(&a, input(i))?;
            // SAFETY: stage_a touches a[k], k < PIPE_ITEMS, a's length.
            unsafe {
                q0.launch(
                    stage_a,
                    &[PIPE_ITEMS],
                    &[Arg::read_write(&a), Arg::scalar(i as u32)],
                )
            }?;
            // SAFETY: stage_b touches a[k] and b[k], k < PIPE_ITEMS, their length, and writes only
            // b.
            unsafe { q1.launch(stage_b, &[PIPE_ITEMS], &[Arg::read(&a), Arg::write(&b)]) }?;
            // SAFETY: stage_c touches a[k] and b[k], k < PIPE_ITEMS, their length, and writes only
            // a.
            unsafe {
                q0.launch(
                    stage_c,
                    &[PIPE_ITEMS],
                    &[Arg::read_write(&a), Arg::read(&b)],
                )
            }?;
            let read = q0.read_owned(&a)?;
            q0.flush()?;
            a.release_deferred();
            b.release_deferred();
            slots.push(0, Slot { read, i });
        }
        slots.drain(retire)?;
        // The deferred releases count: the run ends when the blocks are back.
        self.ctx.wait_deferred();
        Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
    }
}

// ---------------------------------------------------------------------------------------
// The raw side.
// ---------------------------------------------------------------------------------------

/// Raw queues (one per device) and kernels on the library's two-device context.
struct RawTwo {
    context: cl_context,
    queues: [CommandQueue; 2],
    stages: [RawKernel; 3],
    _program: ProgramHandle,
    /// Bytes of live buffers of each device, now and at most.
    peak: [Peak; 2],
}

impl RawTwo {
    fn new(ctx: &Context) -> anyhow::Result<RawTwo> {
        let devices = [ctx.devices()[0].as_raw(), ctx.devices()[1].as_raw()];
        let properties = [u64::from(CL_QUEUE_PROPERTIES), 0, 0];
        let queue = |device| -> anyhow::Result<CommandQueue> {
            // SAFETY: context and device are live handles of `ctx`; `properties` is a
            // zero-terminated list that outlives the call.
            let queue = unsafe {
                clq::create_command_queue_with_properties(ctx.as_raw(), device, properties.as_ptr())
            }
            .map_err(cl_err("clCreateCommandQueueWithProperties"))?;
            // Released on drop; the dimension count is only used by opencl3's
            // `ExecuteKernel`, which this code does not use.
            Ok(CommandQueue::new(queue, 3))
        };
        let queues = [queue(devices[0])?, queue(devices[1])?];
        let program = ProgramHandle(
            clp::create_program_with_source(ctx.as_raw(), &[SOURCE])
                .map_err(cl_err("clCreateProgramWithSource"))?,
        );
        clp::build_program(
            program.0,
            &devices,
            &CString::default(),
            None,
            ptr::null_mut(),
        )
        .map_err(cl_err("clBuildProgram"))?;
        Ok(RawTwo {
            context: ctx.as_raw(),
            queues,
            stages: [
                program.kernel("stage_a")?,
                program.kernel("stage_b")?,
                program.kernel("stage_c")?,
            ],
            _program: program,
            peak: Default::default(),
        })
    }

    fn queue(&self, d: usize) -> cl_command_queue {
        self.queues[d].get()
    }

    /// `clCreateBuffer` of one pipeline buffer, counted as device `d`'s.
    fn create(&mut self, d: usize) -> anyhow::Result<cl_mem> {
        // SAFETY: no host pointer; PIPE_BYTES is far below any device's largest buffer.
        let mem = unsafe {
            clm::create_buffer(
                self.context,
                CL_MEM_READ_WRITE,
                PIPE_BYTES as usize,
                ptr::null_mut(),
            )
        }
        .map_err(cl_err("clCreateBuffer"))?;
        self.peak[d].add(PIPE_BYTES);
        Ok(mem)
    }

    /// Waits for `events` (the buffer's last command on each queue), then
    /// `clReleaseMemObject` of device `d`'s buffer `mem`.
    fn wait_and_release(
        &mut self,
        d: usize,
        mem: cl_mem,
        events: &[cl_event],
    ) -> anyhow::Result<()> {
        let waited = cle::wait_for_events(events).map_err(cl_err("clWaitForEvents"));
        // SAFETY: `mem` came from `create` and its one reference is released here, once;
        // every command on it has ended (or failed: the driver keeps it alive for them).
        unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))?;
        self.peak[d].live -= PIPE_BYTES;
        waited
    }

    /// Sets kernel `stage`'s arguments and launches it over the pipeline's items on device
    /// `d`'s queue after `wait`; the caller owns the event.
    fn launch(
        &self,
        d: usize,
        stage: usize,
        args: &[RawArg],
        wait: &[cl_event],
    ) -> anyhow::Result<cl_event> {
        let kernel = self.stages[stage].get();
        for (i, arg) in args.iter().enumerate() {
            let i = i as u32;
            // The stage kernels take their buffers as `__global` pointers and the seed as
            // `uint`, at the positions the callers pass them; only this thread uses them.
            match arg {
                // SAFETY: a `__global` pointer argument, and `mem` is a live cl_mem.
                RawArg::Mem(mem) => unsafe { set_arg(kernel, i, mem) }?,
                // SAFETY: a `uint` argument.
                RawArg::U32(value) => unsafe { set_arg(kernel, i, value) }?,
            }
        }
        // SAFETY: every argument is set just above; the buffers hold PIPE_ITEMS i32, one
        // per work item; the wait list holds live events of this context.
        unsafe { enqueue_1d(self.queue(d), kernel, PIPE_ITEMS, wait) }
    }

    fn flush(&self, d: usize) -> anyhow::Result<()> {
        clq::flush(self.queue(d)).map_err(cl_err("clFlush"))
    }

    /// µs per iteration of `n` iterations, [`DEPTH`] in flight.
    fn run(&mut self, n: usize) -> anyhow::Result<f64> {
        struct Slot {
            a: cl_mem,
            b: cl_mem,
            /// Stage B (the last command on `a` and `b` on device 1's queue), stage C
            /// (the last on `b` on device 0's queue) and the read (the last on `a` there).
            kb: cl_event,
            kc: cl_event,
            read: cl_event,
            _input: Vec<i32>,
            out: Vec<i32>,
            i: usize,
        }
        let retire = |raw: &mut RawTwo, slot: Slot| -> anyhow::Result<()> {
            let a = raw.wait_and_release(0, slot.a, &[slot.kb, slot.read]);
            let b = raw.wait_and_release(1, slot.b, &[slot.kb, slot.kc]);
            for event in [slot.kb, slot.kc, slot.read] {
                release_event(event)?;
            }
            a?;
            b?;
            check_result(&slot.out, slot.i)
        };
        let mut slots = InFlight::new(1);
        let start = Instant::now();
        for i in 0..n {
            slots.make_room(0, |slot| retire(self, slot))?;
            let a = self.create(0)?;
            let b = self.create(1)?;
            let data = input(i);
            let mut out = vec![0i32; PIPE_ITEMS];
            // SAFETY: `a` holds PIPE_BYTES; `data` lives in the slot until the read (after
            // this write on the same in-order queue) has been waited for.
            let write = unsafe {
                clq::enqueue_write_buffer(
                    self.queue(0),
                    a,
                    clq::CL_NON_BLOCKING,
                    0,
                    PIPE_BYTES as usize,
                    data.as_ptr().cast(),
                    0,
                    ptr::null(),
                )
            }
            .map_err(cl_err("clEnqueueWriteBuffer"))?;
            release_event(write)?;
            let ka = self.launch(0, 0, &[RawArg::Mem(a), RawArg::U32(i as u32)], &[])?;
            // Device 1 waits on device 0's kernel: its queue goes to the device first.
            self.flush(0)?;
            let kb = self.launch(1, 1, &[RawArg::Mem(a), RawArg::Mem(b)], &[ka]);
            release_event(ka)?;
            let kb = kb?;
            self.flush(1)?;
            let kc = self.launch(0, 2, &[RawArg::Mem(a), RawArg::Mem(b)], &[kb])?;
            // SAFETY: `a` holds PIPE_BYTES; `out` lives in the slot, untouched, until the
            // read's event has been waited for.
            let read = unsafe {
                clq::enqueue_read_buffer(
                    self.queue(0),
                    a,
                    clq::CL_NON_BLOCKING,
                    0,
                    PIPE_BYTES as usize,
                    out.as_mut_ptr().cast(),
                    0,
                    ptr::null(),
                )
            }
            .map_err(cl_err("clEnqueueReadBuffer"))?;
            self.flush(0)?;
            slots.push(
                0,
                Slot {
                    a,
                    b,
                    kb,
                    kc,
                    read,
                    _input: data,
                    out,
                    i,
                },
            );
        }
        slots.drain(|slot| retire(self, slot))?;
        Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
    }
}

pub(super) fn two_devices(plan: &Plan, report: &mut Report) -> anyhow::Result<()> {
    let ctx = match find_two_devices() {
        Ok(ctx) => ctx,
        Err(why) => {
            println!("   not run: {why}");
            return Ok(());
        }
    };
    let [d0, d1] = [&ctx.devices()[0], &ctx.devices()[1]];
    println!("   device 0: {d0}\n   device 1: {d1}");
    let mut lib = LibTwo::new(&ctx)?;
    let mut raw = RawTwo::new(&ctx)?;
    let n = plan.iterations;
    // Warm-up: builds for both devices, first launches, the pools' first blocks (which
    // the peak counts, as the raw side's warm-up buffers count in its own).
    lib.run(2 * DEPTH)?;
    raw.run(2 * DEPTH)?;
    let samples = {
        let (lib, raw) = (&mut lib, &mut raw);
        let mut variants: Vec<Variant<'_>> =
            vec![Box::new(move || raw.run(n)), Box::new(move || lib.run(n))];
        interleave(plan.reps, &mut variants)?
    };
    report.notes.push(format!(
        "11 two devices: device 0 is {d0}, device 1 is {d1} (one context); {n} iterations \
         per repetition, {PIPE_ITEMS} i32 per buffer"
    ));
    report.cost(
        "11 two devices",
        LIB,
        RAW,
        "µs per iteration (write + kernel on device 0, kernel on device 1, kernel + read on device 0)",
        "µs",
        &samples[1],
        &samples[0],
    );
    let kib = |bytes: u64| bytes as f64 / 1024.0;
    for d in 0..2 {
        // The device in the labels too: the printed line does not show the metric.
        report.cost(
            "11 two devices",
            &format!("{LIB}, device {d}"),
            &format!("{RAW}, device {d}"),
            &format!("peak device bytes, device {d}"),
            "KiB",
            &[kib(lib.peak[d])],
            &[kib(raw.peak[d].peak)],
        );
    }
    // The raw side's queues and kernels go before the library's context they live in
    // (`ctx`, declared first, goes last).
    Ok(())
}
