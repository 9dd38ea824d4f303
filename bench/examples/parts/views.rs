//! Comparisons 9 and 10 of `compare.rs`: views of a buffer, and a streaming pipeline with a
//! host check of every frame. Included by `compare.rs` (`#[path]`), not an example of its
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
