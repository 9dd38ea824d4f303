//! Criterion micro-benchmarks of the library's hot paths.
//!
//! Groups:
//!
//! - `record_event`: [`EventSet::record`] in steady state, with `u32` events and an
//!   `is_done` that says every event older than [`DONE_LAG`] has completed.
//!   `one_in_order_lane` alternates read and write on a single in-order queue (the common
//!   case: nothing to wait on, at most one read and one write live); `four_lanes_mixed`
//!   cycles over two in-order and two out-of-order queues with one write in four commands,
//!   so entries go to the shadow and are pruned.
//! - `compute_wait_list`: [`EventSet::hazards`] for a write on another queue, collected into
//!   a reused `Vec`, for records of 1, 4, 16 and 64 live entries (the set is built once).
//! - `prune`: [`EventSet::prune`] of a 64-entry set where every other event is done (the
//!   set is rebuilt outside the timing with `iter_batched`).
//! - `release_idle_buffer` (device): [`ClBuffer::release`] of a 1 KiB buffer whose one
//!   command (a fill) has already completed; creating the buffer and running the fill are
//!   outside the timing.
//! - `pooled_acquire_release` (device): [`Pool::acquire`] of 4096 bytes then
//!   [`ClBuffer::release`] back to a warm pool.
//!
//! - `enqueue_fill` (device): [`Queue::fill`] of a 1 KiB buffer on one in-order queue, the
//!   event dropped; `trace_off` as every program runs, `trace_on` with the lifetime trace
//!   recording ([`cl_lifetime::trace`]; what it recorded is discarded, not written).
//!
//! The device groups run on `Context::from_env()` (`CL_LIFETIME_DEVICE` picks the device);
//! when no context can be made they are skipped with a message.
//!
//! Run with `cargo bench --bench hot_paths` (about half a minute; add a filter such as
//! `cargo bench --bench hot_paths -- prune` for one group). `cargo test --benches` runs
//! every benchmark once, as a smoke test.
//!
//! [`ClBuffer::release`]: cl_lifetime::ClBuffer::release
//! [`Pool::acquire`]: cl_lifetime::Pool::acquire
//! [`Queue::fill`]: cl_lifetime::Queue::fill

use std::hint::black_box;
use std::time::Duration;

use cl_lifetime::tracker::{Access, EventSet, Lane, State};
use cl_lifetime::{Context, Pool, PoolOptions};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// Events more than this many records old count as done.
const DONE_LAG: u32 = 8;

const IN_ORDER_A: Lane = Lane {
    id: 1,
    in_order: true,
};
const IN_ORDER_B: Lane = Lane {
    id: 2,
    in_order: true,
};
const OUT_OF_ORDER_C: Lane = Lane {
    id: 3,
    in_order: false,
};
const OUT_OF_ORDER_D: Lane = Lane {
    id: 4,
    in_order: false,
};

/// The `is_done` of the steady-state benches: everything older than [`DONE_LAG`] records
/// before `now` has completed.
fn done_before(now: u32) -> impl FnMut(&u32) -> State {
    let horizon = now.saturating_sub(DONE_LAG);
    move |&e| {
        if e < horizon {
            State::Complete
        } else {
            State::Pending
        }
    }
}

fn record_event(c: &mut Criterion) {
    let mut group = c.benchmark_group("record_event");
    group.throughput(Throughput::Elements(1));

    group.bench_function("one_in_order_lane", |b| {
        let mut set = EventSet::<u32>::new();
        let mut next = 0u32;
        b.iter(|| {
            next += 1;
            let access = if next % 2 == 0 {
                Access::Write
            } else {
                Access::Read
            };
            // Same in-order queue: nothing to wait on, so no wait list.
            set.record(
                IN_ORDER_A,
                black_box(access),
                black_box(next),
                false,
                done_before(next),
            );
        });
        black_box(set.len());
    });

    group.bench_function("four_lanes_mixed", |b| {
        const LANES: [Lane; 4] = [IN_ORDER_A, OUT_OF_ORDER_C, IN_ORDER_B, OUT_OF_ORDER_D];
        let mut set = EventSet::<u32>::new();
        let mut next = 0u32;
        b.iter(|| {
            next += 1;
            let lane = LANES[(next % 4) as usize];
            // One write in four (it lands on a different lane each cycle of four).
            let access = if next % 4 == (next / 4) % 4 {
                Access::Write
            } else {
                Access::Read
            };
            // A cross-queue write waits on the others, so its superseded entries go to
            // the shadow (the tracker's *shadow* rule) and are pruned as they complete.
            let had_wait_list = access == Access::Write;
            set.record(
                black_box(lane),
                black_box(access),
                black_box(next),
                had_wait_list,
                done_before(next),
            );
        });
        black_box(set.len());
    });

    group.finish();
}

/// A set of `n` live entries that a write on another queue must all wait on: one write,
/// then `n - 1` reads, all on an out-of-order queue, none done.
fn live_set(n: u32) -> EventSet<u32> {
    let mut set = EventSet::new();
    set.record(OUT_OF_ORDER_C, Access::Write, 0, false, |_| State::Pending);
    for e in 1..n {
        set.record(OUT_OF_ORDER_C, Access::Read, e, false, |_| State::Pending);
    }
    set
}

fn compute_wait_list(c: &mut Criterion) {
    let mut group = c.benchmark_group("compute_wait_list");
    for n in [1u32, 4, 16, 64] {
        let set = live_set(n);
        assert_eq!(set.hazards(IN_ORDER_B, Access::Write).count(), n as usize);
        group.throughput(Throughput::Elements(u64::from(n)));
        group.bench_with_input(BenchmarkId::from_parameter(n), &set, |b, set| {
            let mut wait: Vec<u32> = Vec::with_capacity(64);
            b.iter(|| {
                wait.clear();
                wait.extend(
                    set.hazards(black_box(IN_ORDER_B), black_box(Access::Write))
                        .map(|e| e.event),
                );
                black_box(&wait);
            });
        });
    }
    group.finish();
}

fn prune(c: &mut Criterion) {
    let mut group = c.benchmark_group("prune");
    group.throughput(Throughput::Elements(64));
    group.bench_function("64_half_done", |b| {
        b.iter_batched(
            || live_set(64),
            |mut set| {
                set.prune(|&e| {
                    if black_box(e) % 2 == 0 {
                        State::Complete
                    } else {
                        State::Pending
                    }
                });
                set
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn device(c: &mut Criterion) {
    let ctx = match Context::from_env() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("hot_paths: no OpenCL context ({e}); skipping the device benchmarks");
            return;
        }
    };
    let queue = match ctx.queue() {
        Ok(queue) => queue,
        Err(e) => {
            eprintln!("hot_paths: no OpenCL queue ({e}); skipping the device benchmarks");
            return;
        }
    };
    eprintln!("hot_paths: device benchmarks on {:?}", ctx.device());

    c.bench_function("release_idle_buffer/1KiB", |b| {
        b.iter_batched(
            || {
                let buf = ctx.buffer::<u8>(1024).expect("create a 1 KiB buffer");
                queue
                    .fill(&buf, 0u8)
                    .expect("enqueue a fill")
                    .wait()
                    .expect("the fill completes");
                buf
            },
            |buf| buf.release().expect("release"),
            BatchSize::SmallInput,
        );
    });

    let target = ctx.buffer::<u8>(1024).expect("create a 1 KiB buffer");
    let mut group = c.benchmark_group("enqueue_fill");
    group.throughput(Throughput::Elements(1));
    group.bench_function("trace_off", |b| {
        b.iter(|| queue.fill(&target, black_box(1u8)).expect("enqueue a fill"));
    });
    let trace = std::env::temp_dir().join(format!("hot-paths-{}.json", std::process::id()));
    cl_lifetime::trace::start(&trace).expect("start a trace");
    group.bench_function("trace_on", |b| {
        b.iter(|| queue.fill(&target, black_box(1u8)).expect("enqueue a fill"));
    });
    cl_lifetime::trace::discard();
    let _ = std::fs::remove_file(&trace);
    group.finish();
    queue.finish().expect("the fills end");

    let pool = Pool::new(&ctx, PoolOptions::default()).expect("create a pool");
    // Warm the pool: one block of the size class exists before the timing.
    pool.acquire::<u8>(4096)
        .expect("first acquire")
        .release()
        .expect("first release");
    c.bench_function("pooled_acquire_release/4KiB", |b| {
        b.iter(|| {
            let buf = pool.acquire::<u8>(black_box(4096)).expect("acquire");
            buf.release().expect("release to the pool")
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = record_event, compute_wait_list, prune, device
}
criterion_main!(benches);
