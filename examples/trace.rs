//! A small two-queue pipeline with the lifetime trace on: open the JSON it writes in
//! <https://ui.perfetto.dev> or `chrome://tracing`.
//!
//! Each step takes two blocks from a pool; a producer queue writes and updates `x`, a
//! consumer queue (with profiling on) adds `x` into `y` and reads `y` back, so every step
//! shows a hazard wait across the queues; `x` goes back to the pool and `y` is released
//! deferred. The trace shows a track per queue, a track per buffer from allocation to
//! release, the live, pending and pooled bytes, and arrows for the waits across queues.
//!
//! With `views` after the path, it traces two writers of a buffer's two halves instead
//! (`ClBuffer::split_at`, a `spin` kernel on each half on two profiling queues) and a read
//! of the first half: the two launches overlap on the device, and the read waits for its
//! own half's writer only.
//!
//! ```text
//! make trace                                   # target/trace/pipeline.json
//! cargo run --release --example trace -- out.json
//! cargo run --release --example trace -- target/trace/views.json views
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use cl_lifetime::{Arg, Context, Pool, PoolOptions, QueueOptions};

/// Elements per buffer.
const N: usize = 1 << 18;
/// Pipeline steps.
const STEPS: i32 = 6;

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/trace/pipeline.json".to_string());
    if let Some(dir) = std::path::Path::new(&path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let views = std::env::args().nth(2).as_deref() == Some("views");
    cl_lifetime::trace::start(&path)?;
    let stats = if views { halves()? } else { pipeline()? };
    let written = cl_lifetime::trace::finish()?;
    println!("{stats}");
    if let Some(written) = written {
        println!("trace written to {}", written.display());
    }
    Ok(())
}

/// Two writers of a buffer's two halves on two queues, then a read of the first half, a
/// few rounds; returns the context's statistics line at its end.
fn halves() -> anyhow::Result<String> {
    let ctx = Context::from_env()?;
    println!("device: {}", ctx.device().name());
    let spin = ctx.program("busy.cl", "")?.kernel("spin")?;
    let profiled = || ctx.queue_with(QueueOptions::default().profiling(true));
    let (first, second) = (profiled()?, profiled()?);
    let buf = ctx.buffer_from(&vec![1f32; 2 * N])?;
    let (a, b) = buf.split_at(N)?;
    let iters = std::env::var("SPIN_ITERS").map_or(Ok(20_000), |v| v.parse())?;
    let mut host = vec![0f32; N];
    for _ in 0..4 {
        // SAFETY: spin touches a[i], i < N, a's length.
        unsafe { first.launch(&spin, &[N], &[Arg::write(a), Arg::scalar(iters)]) }?;
        // SAFETY: spin touches b[i], i < N, b's length.
        unsafe { second.launch(&spin, &[N], &[Arg::write(b), Arg::scalar(iters)]) }?;
        second.flush()?;
        host = first.read_into(a, host)?.wait()?;
        second.finish()?;
    }
    anyhow::ensure!(host.iter().all(|x| x.is_finite()), "half A holds garbage");
    drop(host);
    buf.release()?;
    ctx.log_stats();
    Ok(ctx.stats_line())
}

/// Runs the pipeline; returns the context's statistics line at its end.
fn pipeline() -> anyhow::Result<String> {
    let ctx = Context::from_env()?;
    println!("device: {}", ctx.device().name());
    let program = ctx.program("schedule.cl", "")?;
    let (axpy, add) = (program.kernel("axpy_int")?, program.kernel("add_const")?);
    let producer = ctx.queue()?;
    let consumer = ctx.queue_with(QueueOptions::default().profiling(true))?;
    let pool = Pool::new(&ctx, PoolOptions::default())?;
    let n = N as u32;
    for step in 0..STEPS {
        let x = pool.acquire::<i32>(N)?;
        let y = ctx.buffer::<i32>(N)?;
        producer.fill(&x, step)?;
        // SAFETY: add_const touches x[i] only where i < n = N, x's length.
        unsafe {
            producer.launch(
                &add,
                &[N],
                &[Arg::read_write(&x), Arg::scalar(1), Arg::scalar(n)],
            )
        }?;
        consumer.fill(&y, 100)?;
        // y = 2 * x + y, after the producer's commands on x: a wait across the queues.
        // SAFETY: axpy_int touches x[i] and y[i] only where i < n = N, their length, and writes
        // only y.
        unsafe {
            consumer.launch(
                &axpy,
                &[N],
                &[
                    Arg::read(&x),
                    Arg::read_write(&y),
                    Arg::scalar(2),
                    Arg::scalar(n),
                ],
            )
        }?;
        let read = consumer.read_owned(&y)?;
        drop(x);
        y.release_deferred();
        let y = read.wait()?;
        let expected = 2 * (step + 1) + 100;
        anyhow::ensure!(
            y.iter().all(|&v| v == expected),
            "step {step}: expected {expected} everywhere, read {}",
            y[0]
        );
    }
    drop(pool);
    ctx.wait_deferred();
    ctx.log_stats();
    Ok(ctx.stats_line())
}
