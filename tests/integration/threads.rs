//! Buffers, queues and kernels used from several threads at once.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Barrier;

use cl_lifetime::{Arg, ClBuffer, Context, Kernel};

const THREADS: usize = 4;
const LAUNCHES: usize = 200;
const LEN: usize = 1024;

/// How each thread gets its `scale` kernel.
#[derive(Clone, Copy, Debug)]
enum Sharing {
    /// A kernel object of its own.
    Own,
    /// A clone of one kernel: one `cl_kernel` and one lock.
    Clone,
    /// The same `Kernel`, borrowed.
    Reference,
}

/// Whether the threads read one input buffer or each its own.
#[derive(Clone, Copy, Debug)]
enum Input {
    Shared,
    PerThread,
}

/// `THREADS` threads, each with its own queue and output buffer, launch `scale` `LAUNCHES`
/// times. Each launch uses a factor unique to its thread and iteration and is checked
/// exactly, so arguments of one thread reaching another's launch (design trap "kernel arguments hold buffers") show up as a
/// wrong result. A barrier before every launch makes the threads set arguments at the
/// same moment as often as possible.
///
/// With a shared input, the input's record lock already serialises the launches, kernel
/// lock or not; only `Input::PerThread` leaves the kernel's own lock (the *one lock per kernel* rule) alone in
/// keeping the arguments of concurrent launches apart.
fn scale_from_threads(ctx: &Context, sharing: Sharing, input: Input) {
    let program = common::busy(ctx);
    let shared = program.kernel("scale").expect("scale kernel");
    let values: Vec<f32> = (0..LEN).map(|i| i as f32).collect();
    let inputs: Vec<ClBuffer<f32>> = match input {
        Input::Shared => vec![ctx.buffer_from(&values).expect("input buffer")],
        Input::PerThread => (0..THREADS)
            .map(|_| ctx.buffer_from(&values).expect("input buffer"))
            .collect(),
    };
    let outputs: Vec<ClBuffer<f32>> = (0..THREADS)
        .map(|_| ctx.buffer::<f32>(LEN).expect("output buffer"))
        .collect();
    let start_line = Barrier::new(THREADS);

    let failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = outputs
            .iter()
            .enumerate()
            .map(|(t, output)| {
                let input = &inputs[t % inputs.len()];
                let (values, shared, program) = (&values, &shared, &program);
                let start_line = &start_line;
                s.spawn(move || {
                    let queue = ctx.queue().expect("queue");
                    let own;
                    let kernel: &Kernel = match sharing {
                        Sharing::Own => {
                            own = program.kernel("scale").expect("scale kernel");
                            &own
                        }
                        Sharing::Clone => {
                            own = shared.clone();
                            &own
                        }
                        Sharing::Reference => shared,
                    };
                    let mut out = vec![0f32; LEN];
                    let mut failure = None;
                    for i in 0..LAUNCHES {
                        // Every thread reaches the barrier every time, even after a
                        // failure, so that none waits there forever.
                        start_line.wait();
                        if failure.is_some() {
                            continue;
                        }
                        // Distinct for every (thread, launch); products stay exact in f32.
                        let factor = (1 + t + THREADS * i) as f32;
                        let run = || -> Result<(), String> {
                            // SAFETY: scale touches element i of input and output only where i <
                            // LEN, their length, and writes only output.
                            unsafe {
                                queue.launch(
                                    kernel,
                                    &[LEN],
                                    &[
                                        Arg::read(input),
                                        Arg::write(output),
                                        Arg::scalar(factor),
                                        Arg::scalar(LEN as u32),
                                    ],
                                )
                            }
                            .map_err(|e| e.to_string())?;
                            queue.read(output, &mut out).map_err(|e| e.to_string())?;
                            match (0..LEN).find(|&j| out[j] != values[j] * factor) {
                                None => Ok(()),
                                Some(bad) => Err(format!(
                                    "out[{bad}] = {}, expected {}",
                                    out[bad],
                                    values[bad] * factor
                                )),
                            }
                        };
                        failure = match catch_unwind(AssertUnwindSafe(run)) {
                            Ok(Ok(())) => None,
                            Ok(Err(e)) => Some(format!("thread {t}, launch {i}: {e}")),
                            Err(_) => Some(format!("thread {t}, launch {i}: panicked")),
                        };
                    }
                    failure
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    assert!(failures.is_empty(), "{sharing:?}: {failures:#?}");

    for output in outputs {
        let report = output.release().expect("release output");
        assert!(report.failed.is_empty(), "{report:?}");
        assert!(report.freed, "{report:?}");
        assert!(report.waited_on <= 2, "{report:?}");
    }
    for input in inputs {
        // Read by one kernel at a time on each of the in-order queues that used it.
        let report = input.release().expect("release input");
        assert!(report.failed.is_empty(), "{report:?}");
        assert!(report.freed, "{report:?}");
        assert!(report.waited_on <= THREADS, "{report:?}");
    }
}

#[test]
fn threads_reading_one_input_with_their_own_kernels_get_their_own_results() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    scale_from_threads(&ctx, Sharing::Own, Input::Shared);
}

#[test]
fn threads_reading_one_input_through_clones_of_one_kernel_get_their_own_results() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    scale_from_threads(&ctx, Sharing::Clone, Input::Shared);
}

#[test]
fn threads_reading_one_input_through_one_borrowed_kernel_get_their_own_results() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    scale_from_threads(&ctx, Sharing::Reference, Input::Shared);
}

#[test]
fn threads_launching_clones_of_one_kernel_do_not_interleave_arguments() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    scale_from_threads(&ctx, Sharing::Clone, Input::PerThread);
}

#[test]
fn threads_launching_one_borrowed_kernel_do_not_interleave_arguments() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    scale_from_threads(&ctx, Sharing::Reference, Input::PerThread);
}

#[test]
fn increments_from_threads_through_one_in_order_queue_all_land() {
    const PER_THREAD: usize = 250;
    const N: usize = 256;
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let counts = ctx.buffer_from(&[0i32; N]).unwrap();

    std::thread::scope(|s| {
        for _ in 0..THREADS {
            // Each thread its own handle on the one queue, which serialises the
            // increments on the device.
            let queue = queue.clone();
            let (increment, counts) = (&increment, &counts);
            s.spawn(move || {
                for _ in 0..PER_THREAD {
                    // SAFETY: increment touches counts[i] only where i < N, its length.
                    unsafe {
                        queue.launch(
                            increment,
                            &[N],
                            &[Arg::read_write(counts), Arg::scalar(N as u32)],
                        )
                    }
                    .unwrap();
                }
            });
        }
    });

    // The in-order queue keeps only its newest write in the record.
    assert!(counts.record_len() <= 1, "record: {}", counts.record_len());
    let got = queue.read_owned(&counts).unwrap().wait().unwrap();
    let expected = (PER_THREAD * THREADS) as i32;
    assert!(
        got.iter().all(|&c| c == expected),
        "expected {expected} everywhere, got {:?}",
        &got[..8]
    );
    let report = counts.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(report.freed, "{report:?}");
    assert!(report.waited_on <= 2, "{report:?}");
}

#[test]
fn releasing_a_buffer_while_other_threads_use_the_same_queue_completes() {
    const ROUNDS: usize = 100;
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    // Where events keep their buffers, a release while the test holds a pending read of
    // the buffer frees only once the read is dropped: it waits a short grace, not the
    // default.
    let pins = ctx.driver().events_keep_buffers();
    if pins {
        ctx.set_free_grace(std::time::Duration::from_millis(5));
    }
    let kept: Vec<ClBuffer<i32>> = (0..THREADS - 1)
        .map(|_| ctx.buffer_from(&[0i32; LEN]).unwrap())
        .collect();

    std::thread::scope(|s| {
        // One thread creates, uses and releases buffers on the shared queue...
        let (ctx, releaser_queue, kernel) = (&ctx, queue.clone(), &increment);
        s.spawn(move || {
            for round in 0..ROUNDS {
                let value = round as i32;
                let buf = ctx.buffer::<i32>(LEN).unwrap();
                let fill = releaser_queue.fill(&buf, value).unwrap();
                // SAFETY: increment touches buf[i] only where i < LEN, its length.
                let launch = unsafe {
                    releaser_queue.launch(
                        kernel,
                        &[LEN],
                        &[Arg::read_write(&buf), Arg::scalar(LEN as u32)],
                    )
                }
                .unwrap();
                let pending = releaser_queue.read_owned(&buf).unwrap();
                let read = pending.event().clone();
                let watch = common::watch(&buf, &[&fill, &launch, &read]);
                // Their handles would keep the memory on rusticl (design trap "rusticl's
                // events keep their buffers").
                drop((fill, launch, read));
                if round % 2 == 0 {
                    // Released with the read possibly still in flight.
                    let report = buf.release().unwrap();
                    assert!(report.failed.is_empty(), "{report:?}");
                    assert!(report.waited_on <= 2, "{report:?}");
                    if pins {
                        // The pending read's event still holds it there: freed with it.
                        assert!(pending.wait().unwrap().iter().all(|&x| x == value + 1));
                        assert!(common::eventually(|| watch.fired()), "not freed");
                        watch.assert_released_after_events();
                        continue;
                    }
                    assert!(report.freed, "{report:?}");
                    watch.assert_released_after_events();
                    assert!(pending.wait().unwrap().iter().all(|&x| x == value + 1));
                } else {
                    assert!(pending.wait().unwrap().iter().all(|&x| x == value + 1));
                    drop(buf);
                    // With the short grace the drop may return before the free.
                    assert!(!pins || common::eventually(|| watch.fired()), "not freed");
                    watch.assert_released_after_events();
                }
            }
        });
        // ...while the others keep using their own buffers on the same queue.
        for (t, buf) in kept.iter().enumerate() {
            let (queue, kernel) = (queue.clone(), &increment);
            s.spawn(move || {
                let mut out = vec![0i32; LEN];
                for round in 1..=ROUNDS {
                    // SAFETY: increment touches buf[i] only where i < LEN, its length.
                    unsafe {
                        queue.launch(
                            kernel,
                            &[LEN],
                            &[Arg::read_write(buf), Arg::scalar(LEN as u32)],
                        )
                    }
                    .unwrap();
                    queue.read(buf, &mut out).unwrap();
                    assert!(
                        out.iter().all(|&x| x == round as i32),
                        "thread {t}, round {round}: {:?}",
                        &out[..4]
                    );
                }
            });
        }
    });

    for buf in kept {
        let report = buf.release().unwrap();
        assert!(report.failed.is_empty(), "{report:?}");
        assert!(report.freed, "{report:?}");
        assert!(report.waited_on <= 2, "{report:?}");
    }
}
