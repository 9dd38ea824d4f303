//! Comparisons 9, 10, 12 and 13 of `compare.rs`: views of a buffer, a streaming pipeline
//! with a host check of every frame, launches on views of a buffer split into many chunks,
//! and a pooled service splitting each buffer into views. Included by `compare.rs` (`#[path]`), not an example of its
//! own.

use super::*;

/// f32 elements per half of the views' buffer (a multiple of every device's
/// `CL_DEVICE_MEM_BASE_ADDR_ALIGN`).
const HALF: usize = SPIN_ITEMS;

/// How the two writers of comparison 9 name their halves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Halves {
    /// `buf.split_at(HALF)`: a view each.
    Views,
    /// The whole buffer, with the half's first element as an argument (`spin_from`).
    Whole,
}

/// One repetition of comparison 9 on the library: `n` rounds of two `spin` writers (one per
/// half, on queues 0 and 1) and a read of half A on queue 0. Returns the milliseconds per
/// round until half A was back on the host, and until both halves were written.
fn views_lib(
    lib: &Lib,
    spin_from: &Kernel,
    buf: &ClBuffer<f32>,
    halves: Halves,
    iters: u32,
    n: usize,
) -> anyhow::Result<(f64, f64)> {
    let (a, b) = buf.split_at(HALF)?;
    let (q0, q1) = (&lib.queues[0], &lib.queues[1]);
    let mut host = vec![0f32; HALF];
    let (mut ready, mut both) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..n {
        let start = Instant::now();
        match halves {
            Halves::Views => {
                // SAFETY: spin touches a[i], i < HALF, a's length.
                unsafe { q0.launch(&lib.spin, &[HALF], &[Arg::write(a), Arg::scalar(iters)]) }?;
                // SAFETY: spin touches b[i], i < HALF, b's length.
                unsafe { q1.launch(&lib.spin, &[HALF], &[Arg::write(b), Arg::scalar(iters)]) }?;
            }
            Halves::Whole => {
                for (q, first) in [(q0, 0u32), (q1, HALF as u32)] {
                    // SAFETY: spin_from touches buf[first + i], i < HALF, first at most HALF:
                    // inside the 2 * HALF elements of the buffer the one caller passes.
                    unsafe {
                        q.launch(
                            spin_from,
                            &[HALF],
                            &[Arg::write(buf), Arg::scalar(first), Arg::scalar(iters)],
                        )
                    }?;
                }
            }
        }
        q1.flush()?;
        host = q0.read_into(a, host)?.wait()?;
        ready += start.elapsed();
        q1.finish()?;
        both += start.elapsed();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
    Ok((ms(ready), ms(both)))
}

/// Comparison 9 in raw OpenCL: the same rounds on two sub-buffers made by hand, each
/// command's event held until it is waited for.
fn views_raw(raw: &Raw, halves: [cl_mem; 2], iters: u32, n: usize) -> anyhow::Result<(f64, f64)> {
    let mut host = vec![0f32; HALF];
    let (mut ready, mut both) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..n {
        let start = Instant::now();
        let mut events = Vec::with_capacity(2);
        for (q, &half) in halves.iter().enumerate() {
            events.push(raw.launch(
                q,
                &raw.spin,
                &[RawArg::Mem(half), RawArg::U32(iters)],
                HALF,
            )?);
        }
        raw.flush(1)?;
        // SAFETY: half A holds `HALF` f32s; `host` is alive and untouched until the read's
        // event is waited for below.
        let read = unsafe {
            clq::enqueue_read_buffer(
                raw.queue(0),
                halves[0],
                clq::CL_NON_BLOCKING,
                0,
                HALF * size_of::<f32>(),
                host.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueReadBuffer"))?;
        wait_release(read)?;
        ready += start.elapsed();
        for event in events {
            wait_release(event)?;
        }
        both += start.elapsed();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
    Ok((ms(ready), ms(both)))
}

/// `clCreateSubBuffer` of `bytes` at `origin` of `parent`.
fn raw_sub_buffer(parent: cl_mem, origin: usize, bytes: usize) -> anyhow::Result<cl_mem> {
    let region = opencl3::types::cl_buffer_region {
        origin,
        size: bytes,
    };
    // SAFETY: `parent` is live; the region lies inside it and `region` outlives the call.
    unsafe {
        clm::create_sub_buffer(
            parent,
            CL_MEM_READ_WRITE,
            clm::CL_BUFFER_CREATE_TYPE_REGION,
            ptr::from_ref(&region).cast(),
        )
    }
    .map_err(cl_err("clCreateSubBuffer"))
}

pub(super) fn views(
    plan: &Plan,
    raw: &Raw,
    lib: &Lib,
    busy: &cl_lifetime::Program,
    report: &mut Report,
) -> anyhow::Result<()> {
    let spin_from = busy.kernel("spin_from")?;
    let target = plan.spin / 4;
    // SAFETY: `lib.spin` is busy.cl's spin.
    let iters = unsafe { calibrate(&lib.ctx, &lib.queues[0], &lib.spin, HALF, target) }?;
    println!("   spin: {iters} iterations for about {target:?} per half");
    let buf = lib.ctx.buffer_from(&vec![1f32; 2 * HALF])?;
    let mem = raw.create_from(&vec![1f32; 2 * HALF])?;
    let bytes = HALF * size_of::<f32>();
    let subs = [
        raw_sub_buffer(mem, 0, bytes)?,
        raw_sub_buffer(mem, bytes, bytes)?,
    ];
    let n = if plan.quick { 4 } else { 8 };
    let result = (|| -> anyhow::Result<()> {
        // Warm-up: builds, sub-buffers, first launches.
        views_lib(lib, &spin_from, &buf, Halves::Views, iters, 1)?;
        views_lib(lib, &spin_from, &buf, Halves::Whole, iters, 1)?;
        views_raw(raw, subs, iters, 1)?;
        let mut samples = [(); 3].map(|()| (Vec::new(), Vec::new()));
        interleave_with(plan.reps, &[0usize, 1, 2], |v| {
            let (ready, both) = match v {
                0 => views_lib(lib, &spin_from, &buf, Halves::Views, iters, n)?,
                1 => views_lib(lib, &spin_from, &buf, Halves::Whole, iters, n)?,
                _ => views_raw(raw, subs, iters, n)?,
            };
            samples[v].0.push(ready);
            samples[v].1.push(both);
            Ok(())
        })?;
        const RAW: &str = "raw sub-buffers made by hand, events held";
        const WHOLE: &str = "cl-lifetime, whole buffer (one record range)";
        for (metric, pick) in [
            ("ms per round until half A is back on the host", 0),
            ("ms per round until both halves are written", 1),
        ] {
            let get = |v: usize| -> &Vec<f64> {
                if pick == 0 {
                    &samples[v].0
                } else {
                    &samples[v].1
                }
            };
            for (baseline, b) in [(RAW, 2), (WHOLE, 1)] {
                report.cost(
                    "9 views",
                    "cl-lifetime views (split_at), two writers and a reader",
                    baseline,
                    metric,
                    "ms",
                    get(0),
                    get(b),
                );
            }
        }
        Ok(())
    })();
    for sub in subs {
        raw.release(sub)?;
    }
    raw.release(mem)?;
    buf.release()?;
    result
}

// ---------------------------------------------------------------------------------------
// 10. Streaming with a host check of every frame.
// ---------------------------------------------------------------------------------------

/// Queues of the streaming pipeline.
const STREAM_QUEUES: usize = 3;

/// The host's work on a frame: makes frame `i`'s input.
fn produce(frame: &mut [i32], i: usize) {
    for (k, x) in frame.iter_mut().enumerate() {
        *x = (i + k) as i32;
    }
}

/// The host's check of frame `i`'s output: every element is its input plus one.
fn check_frame(frame: &[i32], i: usize) -> anyhow::Result<()> {
    if frame.len() != PIPE_ITEMS {
        bail!("frame {i}: {} elements, expected {PIPE_ITEMS}", frame.len());
    }
    match frame
        .iter()
        .enumerate()
        .find(|&(k, &x)| x != (i + k) as i32 + 1)
    {
        Some((k, x)) => bail!("frame {i}: element {k} is {x}, expected {}", (i + k) + 1),
        None => Ok(()),
    }
}

/// Frames per second of the library's streaming pipeline: one device buffer per slot
/// ([`DEPTH`] slots per queue, [`STREAM_QUEUES`] queues), each frame produced on the host
/// into the slot's input, written with `write_lent`, incremented, read with `read_into`
/// into the slot's output, and checked on the host when its slot comes round again. The
/// host memory and the buffers are the same for every frame.
fn stream_lib(p: &PipeCtx, n: usize) -> anyhow::Result<f64> {
    struct Slot {
        buf: ClBuffer<i32>,
        input: Option<cl_lifetime::PendingWrite<i32>>,
        output: Option<PendingRead<i32>>,
        frame: usize,
    }
    let mut slots: Vec<Slot> = (0..STREAM_QUEUES * DEPTH)
        .map(|_| -> anyhow::Result<Slot> {
            Ok(Slot {
                buf: p.ctx.buffer::<i32>(PIPE_ITEMS)?,
                input: None,
                output: None,
                frame: 0,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let mut spare_in = vec![vec![0i32; PIPE_ITEMS]; slots.len()];
    let mut spare_out = vec![Vec::with_capacity(PIPE_ITEMS); slots.len()];
    let start = Instant::now();
    for i in 0..n + slots.len() {
        let s = i % slots.len();
        let slot = &mut slots[s];
        if let Some(read) = slot.output.take() {
            let out = read.wait()?;
            check_frame(&out, slot.frame)?;
            spare_out[s] = out;
        }
        if let Some(write) = slot.input.take() {
            spare_in[s] = write.wait()?;
        }
        if i >= n {
            continue;
        }
        let queue = &p.queues[s % STREAM_QUEUES];
        let mut input = std::mem::take(&mut spare_in[s]);
        produce(&mut input, i);
        slot.input = Some(queue.write_lent(&slot.buf, input)?);
        // SAFETY: increment touches slot.buf[i] only where i < PIPE_ITEMS, its length.
        unsafe {
            queue.launch(
                &p.increment,
                &[PIPE_ITEMS],
                &[Arg::read_write(&slot.buf), Arg::scalar(PIPE_ITEMS as u32)],
            )
        }?;
        slot.output = Some(queue.read_into(&slot.buf, std::mem::take(&mut spare_out[s]))?);
        queue.flush()?;
        slot.frame = i;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    for slot in slots {
        slot.buf.release()?;
    }
    Ok(rate)
}

/// The same streaming pipeline in raw OpenCL: one buffer, input and output per slot,
/// the write's and the read's events held until the slot comes round again.
fn stream_raw(raw: &Raw, n: usize) -> anyhow::Result<f64> {
    struct Slot {
        mem: cl_mem,
        input: Vec<i32>,
        output: Vec<i32>,
        events: Option<[cl_event; 2]>,
        frame: usize,
    }
    let mut slots: Vec<Slot> = (0..STREAM_QUEUES * DEPTH)
        .map(|_| -> anyhow::Result<Slot> {
            Ok(Slot {
                mem: raw.create(PIPE_BYTES as usize)?,
                input: vec![0; PIPE_ITEMS],
                output: vec![0; PIPE_ITEMS],
                events: None,
                frame: 0,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let start = Instant::now();
    let result = (|| -> anyhow::Result<()> {
        for i in 0..n + slots.len() {
            let s = i % slots.len();
            let slot = &mut slots[s];
            if let Some([write, read]) = slot.events.take() {
                wait_release(read)?;
                wait_release(write)?;
                check_frame(&slot.output, slot.frame)?;
            }
            if i >= n {
                continue;
            }
            let q = s % STREAM_QUEUES;
            produce(&mut slot.input, i);
            let write = raw.write(q, slot.mem, &slot.input)?;
            release_event(raw.launch(
                q,
                &raw.increment,
                &[RawArg::Mem(slot.mem), RawArg::U32(PIPE_ITEMS as u32)],
                PIPE_ITEMS,
            )?)?;
            let read = raw.read(q, slot.mem, &mut slot.output)?;
            raw.flush(q)?;
            slot.events = Some([write, read]);
            slot.frame = i;
        }
        Ok(())
    })();
    let rate = n as f64 / start.elapsed().as_secs_f64();
    for slot in slots {
        if let Some(events) = slot.events {
            events.into_iter().try_for_each(wait_release)?;
        }
        raw.release(slot.mem)?;
    }
    result.map(|()| rate)
}

pub(super) fn streaming(plan: &Plan, raw: &Raw, report: &mut Report) -> anyhow::Result<()> {
    let p = PipeCtx::new()?;
    let n = plan.iterations;
    stream_lib(&p, 2 * STREAM_QUEUES * DEPTH)?;
    stream_raw(raw, 2 * STREAM_QUEUES * DEPTH)?;
    let mut variants: Vec<Variant<'_>> = vec![
        Box::new(|| stream_raw(raw, n)),
        Box::new(|| stream_lib(&p, n)),
    ];
    let samples = interleave(plan.reps, &mut variants)?;
    report.push(
        "10 streaming",
        "cl-lifetime write_lent / read_into, host check of every frame, 3 queues",
        "raw opencl3, the same buffers and host memory reused, events held",
        "frames per second",
        "frames/s",
        &samples[1],
        &samples[0],
        true,
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 12. Launches on views of a buffer that has had many.
// ---------------------------------------------------------------------------------------

/// Chunks of the baseline's buffer, and of the measured one.
const FEW_CHUNKS: usize = 16;
const MANY_CHUNKS: usize = 16_384;

/// µs per `tiny` launch on `views` (in turn), in gated batches of [`BATCH`], `n` in all:
/// the host's enqueue path alone, as in comparison 1.
fn chunk_launches(lib: &Lib, views: &[View<'_, i32>], n: usize) -> anyhow::Result<f64> {
    let queue = &lib.queues[0];
    let mut total = Duration::ZERO;
    let (mut left, mut next) = (n, 0);
    while left > 0 {
        let batch = left.min(BATCH);
        left -= batch;
        let gate = lib.ctx.user_event()?;
        // SAFETY: tiny touches element i of the view for i below the work size, its length.
        unsafe {
            queue.after(&[gate.event()]).launch(
                &lib.tiny,
                &[views[0].len()],
                &[Arg::read_write(views[0])],
            )
        }?;
        let start = Instant::now();
        for _ in 0..batch {
            let view = views[next % views.len()];
            next += 1;
            // SAFETY: tiny touches element i of the view for i below the work size, its length.
            unsafe { queue.launch(&lib.tiny, &[view.len()], &[Arg::read_write(view)]) }?;
        }
        total += start.elapsed();
        gate.complete()?;
        lib_finish(queue)?;
    }
    Ok(total.as_secs_f64() * 1e6 / n as f64)
}

pub(super) fn view_chunks(plan: &Plan, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    // One chunk: the device's sub-buffer alignment, in i32s (each chunk's origin must be a
    // multiple of it).
    let chunk = (lib.ctx.device().base_addr_align_bytes() as usize / size_of::<i32>()).max(1);
    let few = lib.ctx.buffer::<i32>(FEW_CHUNKS * chunk)?;
    let many = lib.ctx.buffer::<i32>(MANY_CHUNKS * chunk)?;
    fn chunks(buf: &ClBuffer<i32>, chunk: usize) -> anyhow::Result<Vec<View<'_, i32>>> {
        (0..buf.len() / chunk)
            .map(|c| Ok(buf.view(c * chunk..(c + 1) * chunk)?))
            .collect()
    }
    let (few_views, many_views) = (chunks(&few, chunk)?, chunks(&many, chunk)?);
    // Every chunk launched once: the buffers have had 16 and 16,384 views passed to kernels.
    chunk_launches(lib, &few_views, FEW_CHUNKS)?;
    chunk_launches(lib, &many_views, MANY_CHUNKS)?;
    println!(
        "   {chunk} i32s per chunk; sub-buffers kept: {} and {}",
        few.kept_sub_buffers(),
        many.kept_sub_buffers()
    );
    // Measured: launches on 16 chunks of each, the same work: all of the first buffer's,
    // and every 1,024th of the second's (spread over it: the last one made among them).
    let spread: Vec<View<'_, i32>> = many_views
        .iter()
        .step_by(MANY_CHUNKS / FEW_CHUNKS)
        .rev()
        .copied()
        .collect();
    let timed = [&few_views[..], &spread[..]];
    let n = plan.launches;
    for views in timed {
        chunk_launches(lib, views, n)?;
    }
    let mut samples = [Vec::new(), Vec::new()];
    interleave_with(plan.reps, &[0usize, 1], |v| {
        samples[v].push(chunk_launches(lib, timed[v], n)?);
        Ok(())
    })?;
    report.cost(
        "12 view chunks",
        "cl-lifetime launch on a view of a buffer split into 16,384 chunks",
        "the same launch on a buffer split into 16 chunks",
        "µs per launch",
        "µs",
        &samples[1],
        &samples[0],
    );
    drop((few_views, many_views, spread));
    few.release()?;
    many.release()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 13. A pooled service that splits each buffer into views.
// ---------------------------------------------------------------------------------------

/// f32 elements of a service buffer (4 MiB).
const SERVICE_LEN: usize = (4 << 20) / size_of::<f32>();

/// The figures of one run of the service.
struct Service {
    /// µs per iteration.
    us: f64,
    /// Memory objects allocated from the driver.
    allocations: f64,
    /// The context's peak device bytes, in MiB.
    peak_mib: f64,
}

/// `n` iterations of the service pattern, on a context of its own (so that its memory
/// figures are the run's): acquire 4 MiB from a `Pool`, run `spin_from` (one iteration)
/// on each half on its own queue, then release the buffer (back to the pool with its
/// commands' events, which the next owner's commands wait on); both queues finished
/// before the clock stops. Each half is a view (`split_at`) or, for the baseline, the whole buffer
/// with the half's first element as an argument.
fn service(device: &cl_lifetime::Device, halves: Halves, n: usize) -> anyhow::Result<Service> {
    let ctx = Context::new(device)?;
    let queues = [ctx.queue()?, ctx.queue()?];
    let spin_from = ctx.program("busy.cl", "")?.kernel("spin_from")?;
    let pool = Pool::new(&ctx, PoolOptions::default())?;
    let half = SERVICE_LEN / 2;
    let start = Instant::now();
    for _ in 0..n {
        let buf = pool.acquire::<f32>(SERVICE_LEN)?;
        match halves {
            Halves::Views => {
                let (a, b) = buf.split_at(half)?;
                for (queue, view) in queues.iter().zip([a, b]) {
                    // SAFETY: spin_from touches data[0 + i] for i < half, the view's length.
                    unsafe {
                        queue.launch(
                            &spin_from,
                            &[half],
                            &[Arg::read_write(view), Arg::scalar(0u32), Arg::scalar(1u32)],
                        )
                    }?;
                }
            }
            Halves::Whole => {
                for (queue, first) in queues.iter().zip([0u32, half as u32]) {
                    // SAFETY: spin_from touches data[first + i] for i < half: the half of the buffer from first.
                    unsafe {
                        queue.launch(
                            &spin_from,
                            &[half],
                            &[Arg::read_write(&buf), Arg::scalar(first), Arg::scalar(1u32)],
                        )
                    }?;
                }
            }
        }
        buf.release()?;
    }
    for queue in &queues {
        queue.finish()?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    let stats = ctx.memory_stats();
    Ok(Service {
        us,
        allocations: stats.driver_allocations as f64,
        peak_mib: stats.peak_bytes as f64 / (1 << 20) as f64,
    })
}

pub(super) fn pooled_views(plan: &Plan, lib: &Lib, report: &mut Report) -> anyhow::Result<()> {
    const N: usize = 200;
    let device = lib.ctx.device();
    // Warm-up: the program's build, the heap.
    service(device, Halves::Views, 4)?;
    service(device, Halves::Whole, 4)?;
    let mut samples: [Vec<Service>; 2] = [Vec::new(), Vec::new()];
    interleave_with(plan.reps, &[0usize, 1], |v| {
        let halves = if v == 0 { Halves::Views } else { Halves::Whole };
        samples[v].push(service(device, halves, N)?);
        Ok(())
    })?;
    const VARIANT: &str = "cl-lifetime Pool, each 4 MiB buffer split into two views (split_at) \
        on two queues, 200 iterations";
    const BASELINE: &str = "the same, the whole buffer and each half's first element";
    let pick = |v: usize, f: fn(&Service) -> f64| samples[v].iter().map(f).collect::<Vec<_>>();
    for (metric, unit, f) in [
        (
            "µs per iteration",
            "µs",
            (|s: &Service| s.us) as fn(&Service) -> f64,
        ),
        (
            "memory objects allocated from the driver",
            "allocations",
            |s| s.allocations,
        ),
        ("peak device MiB", "MiB", |s| s.peak_mib),
    ] {
        report.cost(
            "13 pooled views",
            VARIANT,
            BASELINE,
            metric,
            unit,
            &pick(0, f),
            &pick(1, f),
        );
    }
    Ok(())
}
