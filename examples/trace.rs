//! A small two-queue pipeline with the lifetime trace on: open the JSON it writes in
//! <https://ui.perfetto.dev> or `chrome://tracing`.
//!
//! Each step takes two blocks from a pool; a producer queue writes and updates `x`, a
//! consumer queue (with profiling on) adds `x` into `y` and reads `y` back, so every step
//! shows a hazard wait across the queues; `x` goes back to the pool and `y` is released
//! deferred. The trace shows a track per queue, a track per buffer from allocation to
//! release, the live, pending and pooled bytes, and arrows for the waits across queues.
//!
//! ```text
//! make trace                                   # target/trace/pipeline.json
//! cargo run --release --example trace -- out.json
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
    cl_lifetime::trace::start(&path)?;
    let stats = pipeline()?;
    let written = cl_lifetime::trace::finish()?;
    println!("{stats}");
    if let Some(written) = written {
        println!("trace written to {}", written.display());
    }
    Ok(())
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
        producer.launch(
            &add,
            &[N],
            &[Arg::read_write(&x), Arg::scalar(1), Arg::scalar(n)],
        )?;
        consumer.fill(&y, 100)?;
        // y = 2 * x + y, after the producer's commands on x: a wait across the queues.
        consumer.launch(
            &axpy,
            &[N],
            &[
                Arg::read(&x),
                Arg::read_write(&y),
                Arg::scalar(2),
                Arg::scalar(n),
            ],
        )?;
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
