//! Where an idle buffer's release spends its time, against the number of commands the
//! buffer has seen: the profile behind comparison 5 of `compare` (BENCHMARKS.md).
//!
//! For each history length N, each repetition creates two buffers, launches `tiny` N times
//! on one of them (draining every 1,000 launches), drains, then releases the unused buffer
//! first and the used one second. The release logs its stages at trace level
//! (ledger, status of the recorded events, wait, failures, kernel arguments reset,
//! `clReleaseMemObject`, destructor callback, events released); this example turns that log
//! on (target `cl_lifetime::buffer::stages`) unless `RUST_LOG` says otherwise.
//!
//! `--live L` keeps L other buffers alive throughout, each used once (the live-buffer axis
//! of comparison 5).
//!
//! `--warm` reads, before each release, what the release will touch that a read-only call
//! can reach (the buffer's record, the context's ledger and its list of live buffers):
//! the difference from a run without it is what the release pays for finding those cold
//! after the launches.
//!
//! ```text
//! cargo run --release --example release_stages
//! cargo run --release --example release_stages -- --commands 1,100000 --reps 5
//! cargo run --release --example release_stages -- --commands 1 --live 100000
//! cargo run --release --example release_stages -- --commands 100000 --warm
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device; `CL_LIFETIME_KERNELS` names the folder(s) holding
//! `tiny.cl` when the binary runs away from its source tree.

use anyhow::{Context as _, bail};
use cl_lifetime::{Arg, Context};

use harness::print_device;

/// Launches between two drains, as in `compare`.
const BATCH: usize = 1_000;
const ITEMS: usize = 64;

fn main() -> anyhow::Result<()> {
    let mut commands = vec![1, 1_000, 100_000];
    let mut reps = 3;
    let mut live = 0;
    let mut warm = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--commands" => {
                commands = value()?
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .with_context(|| format!("{n:?}: not a number"))
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "--reps" => reps = value()?.parse().context("--reps: not a number")?,
            "--live" => live = value()?.parse().context("--live: not a number")?,
            "--warm" => warm = true,
            "--bench" => {}
            other => bail!(
                "unknown argument {other:?} (expected --commands N,N,..., --reps R, --live L or --warm)"
            ),
        }
    }
    if std::env::var_os("RUST_LOG").is_none() {
        env_logger::Builder::new()
            .filter_module("cl_lifetime::buffer::stages", log::LevelFilter::Trace)
            .init();
    } else {
        env_logger::init();
    }

    let ctx = Context::from_env()?;
    print_device(&ctx);
    let queue = ctx.queue()?;
    let tiny = ctx.program("tiny.cl", "")?.kernel("tiny")?;
    // `--live L`: L other buffers, each used once, alive throughout.
    let others = (0..live)
        .map(|_| {
            let buf = ctx.buffer::<i32>(ITEMS)?;
            queue.fill(&buf, 0)?;
            Ok(buf)
        })
        .collect::<cl_lifetime::Result<Vec<_>>>()?;
    queue.finish()?;
    println!("{} other live buffers", others.len());
    for &n in &commands {
        for rep in 0..reps {
            let unused = ctx.buffer_from(&[0i32; ITEMS])?;
            let used = ctx.buffer_from(&[0i32; ITEMS])?;
            for i in 0..n {
                // SAFETY: tiny touches used[i], i < ITEMS, used's length.
                unsafe { queue.launch(&tiny, &[ITEMS], &[Arg::read_write(&used)]) }?;
                if i % BATCH == BATCH - 1 {
                    queue.finish()?;
                }
            }
            queue.finish()?;
            println!("{n} commands, repetition {rep}: the unused buffer, then the used one");
            if warm {
                touch(&ctx, &unused);
            }
            unused.release()?;
            if warm {
                touch(&ctx, &used);
            }
            used.release()?;
        }
    }
    // The other buffers' releases are not part of the profile.
    log::set_max_level(log::LevelFilter::Off);
    drop(others);
    Ok(())
}

/// `--warm`: reads what a release of `buf` touches that read-only calls reach.
fn touch(ctx: &Context, buf: &cl_lifetime::ClBuffer<i32>) {
    std::hint::black_box(buf.record_len());
    std::hint::black_box(ctx.live_buffers());
    std::hint::black_box(ctx.memory_stats());
    std::hint::black_box(ctx.free_grace());
}
