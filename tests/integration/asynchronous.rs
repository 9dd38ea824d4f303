//! Async: commands, reads, releases and pooled allocations awaited on real executors
//! (tokio's multi-threaded runtime, `pollster`, and polls by hand), woken by the library's
//! waiter threads. Ordering is shown with user events as gates: a future is polled while
//! its command is held behind a gate, and must be pending; the gate opens, and the waker
//! must be called.

use std::future::{Future, IntoFuture};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use cl_lifetime::{Arg, Context, Error, Pool, PoolOptions};

use crate::common;

/// A waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counting {
    fn woken(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Waits up to [`common::HANG`] for a wake; panics naming `what` if none comes.
    fn wait_woken(&self, what: &str) {
        let start = Instant::now();
        while self.woken() == 0 {
            assert!(start.elapsed() < common::HANG, "{what}: never woken");
            // Polls the counter; nothing is ordered by this pause.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Polls `future` once with `waker`.
fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Arc<Counting>) -> Poll<F::Output> {
    let waker = Waker::from(waker.clone());
    std::pin::Pin::new(future).poll(&mut TaskContext::from_waker(&waker))
}

/// A context whose driver lets the library's waiter threads wait while the test's thread
/// enqueues (not Oclgrind's, whose runtime is not thread-safe), or `None`, said by name.
/// Oclgrind also runs a queue's commands at its flush, so a gate could not hold them.
fn async_context() -> Option<Context> {
    let ctx = common::context()?;
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return None;
    }
    Some(ctx)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn an_awaited_command_is_pending_behind_its_gate_and_woken_when_it_ends() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(1024).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 5).unwrap();
    let mut ended = fill.ended();
    let task = Arc::new(Counting::default());
    assert!(poll_once(&mut ended, &task).is_pending());
    assert!(poll_once(&mut ended, &task).is_pending());
    assert_eq!(task.woken(), 0, "woken while its gate is closed");
    gate.complete().unwrap();
    task.wait_woken("the fill's task");
    assert!(matches!(poll_once(&mut ended, &task), Poll::Ready(Ok(()))));
    assert_eq!(common::contents(&queue, &buf), vec![5; 1024]);
}

#[test]
fn an_awaited_command_whose_gate_failed_is_its_failure() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(64).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 5).unwrap();
    let mut ended = fill.ended();
    let task = Arc::new(Counting::default());
    assert!(poll_once(&mut ended, &task).is_pending());
    gate.fail(-77).unwrap();
    task.wait_woken("the failed fill's task");
    match poll_once(&mut ended, &task) {
        Poll::Ready(Err(Error::CommandFailed { .. })) => {}
        other => panic!("a failed command awaited: {other:?}"),
    }
    // And as `.await` from tokio, the same.
    let outcome = runtime().block_on(async { fill.await });
    assert!(
        matches!(outcome, Err(Error::CommandFailed { .. })),
        "{outcome:?}"
    );
}

#[test]
fn an_awaited_read_hands_back_what_the_kernel_wrote() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let program = common::busy(&ctx);
    let increment = program.kernel("increment").unwrap();
    let n = 4096;
    let buf = ctx.buffer_from(&vec![41i32; n]).unwrap();
    let data = runtime().block_on(async {
        // SAFETY: increment touches buf[i] only where i < n, its length.
        unsafe {
            queue.launch(
                &increment,
                &[n],
                &[Arg::read_write(&buf), Arg::scalar(n as u32)],
            )
        }
        .unwrap()
        .await
        .unwrap();
        queue.read_owned(&buf).unwrap().await
    });
    assert_eq!(data.unwrap(), vec![42i32; n]);
}

#[test]
fn a_read_awaited_by_one_task_wakes_when_another_task_opens_its_gate() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&common::ramp(2048, 3)).unwrap();
    let gate = ctx.user_event().unwrap();
    let read = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
    let other = ctx.queue().unwrap();
    let unrelated = ctx.buffer::<u32>(16).unwrap();
    let data = runtime().block_on(async move {
        let reader = tokio::spawn(async move { read.await });
        // The opener awaits a command of its own first: the reader's wait must not hold
        // it up, nor it the reader.
        other.fill(&unrelated, 1).unwrap().await.unwrap();
        gate.complete().unwrap();
        reader.await.unwrap()
    });
    assert_eq!(data.unwrap(), common::ramp(2048, 3));
}

#[test]
fn thousands_of_commands_awaited_at_once_all_end_with_their_results() {
    let Some(ctx) = async_context() else { return };
    let queues = [ctx.queue().unwrap(), ctx.queue().unwrap()];
    let count = 2000;
    let buffers: Vec<_> = (0..count)
        .map(|i| ctx.buffer_from(&[i as u32; 16]).unwrap())
        .collect();
    let reads: Vec<_> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| queues[i % 2].read_owned(b).unwrap())
        .collect();
    let results = runtime().block_on(async move {
        let tasks: Vec<_> = reads
            .into_iter()
            .map(|read| tokio::spawn(read.into_future()))
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap().unwrap());
        }
        results
    });
    for (i, data) in results.iter().enumerate() {
        assert_eq!(data, &vec![i as u32; 16], "read {i}");
    }
}

#[test]
fn an_async_release_waits_for_the_buffers_commands_and_hands_back_the_report() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(4096).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 9).unwrap();
    let watch = common::watch(&buf, &[&fill]);
    drop(fill);
    let mut release = pin!(buf.release_async());
    let task = Arc::new(Counting::default());
    let waker = Waker::from(task.clone());
    let mut cx = TaskContext::from_waker(&waker);
    assert!(release.as_mut().poll(&mut cx).is_pending());
    assert!(
        !watch.fired(),
        "released while its fill is held behind a gate"
    );
    gate.complete().unwrap();
    let report = pollster::block_on(release).unwrap();
    assert_eq!(
        report.waited_on, 0,
        "the future waited, not the release: {report:?}"
    );
    assert!(report.freed, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    watch.assert_released_after_events();
}

#[test]
fn an_async_release_reports_a_failed_command_as_the_blocking_one_does() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(256).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 9).unwrap();
    drop(fill);
    let release = buf.release_async();
    gate.fail(-55).unwrap();
    let report = pollster::block_on(release).unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.freed, "{report:?}");
}

#[test]
fn a_release_future_dropped_before_it_ends_releases_the_buffer_deferred() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(4096).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 9).unwrap();
    let watch = common::watch(&buf, &[&fill]);
    drop(fill);
    let mut release = Box::pin(buf.release_async());
    let task = Arc::new(Counting::default());
    let waker = Waker::from(task.clone());
    assert!(
        release
            .as_mut()
            .poll(&mut TaskContext::from_waker(&waker))
            .is_pending()
    );
    drop(release);
    assert!(!watch.fired());
    gate.complete().unwrap();
    ctx.wait_deferred();
    watch.assert_released_after_events();
    assert!(ctx.live_buffers().is_empty(), "{}", ctx.live_buffers());
    assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
}

#[test]
fn a_read_future_dropped_behind_its_gate_returns_at_once_and_loses_nothing() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[1u32; 1 << 16]).unwrap();
    let gate = ctx.user_event().unwrap();
    let read = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
    let event = read.event().clone();
    let mut future = read.into_future();
    let task = Arc::new(Counting::default());
    assert!(poll_once(&mut future, &task).is_pending());
    // Returns although the read is still held: the memory goes to the library's thread.
    drop(future);
    gate.complete().unwrap();
    event.wait().unwrap();
    assert_eq!(common::contents(&queue, &buf), vec![1u32; 1 << 16]);
}

#[test]
fn futures_outlive_the_context_handles_they_came_from() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&common::ramp(512, 7)).unwrap();
    let gate = ctx.user_event().unwrap();
    let read = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
    let mut future = read.into_future();
    let task = Arc::new(Counting::default());
    assert!(poll_once(&mut future, &task).is_pending());
    drop(queue);
    drop(buf);
    drop(ctx);
    gate.complete().unwrap();
    task.wait_woken("the read's task, with its context's handles gone");
    match poll_once(&mut future, &task) {
        Poll::Ready(Ok(data)) => assert_eq!(data, common::ramp(512, 7)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pool_allocation_at_its_maximum_waits_for_bytes_leaving_without_blocking() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(8192)).unwrap();
    let spin = common::busy(&ctx).kernel("spin").unwrap();
    // One 8 KiB block, busy on the device, back in the pool.
    let big = pool.acquire::<f32>(2048).unwrap();
    // SAFETY: spin touches big[i], i < 2048, its length.
    let spun = unsafe {
        queue.launch(
            &spin,
            &[2048],
            &[Arg::read_write(&big), Arg::scalar(50_000u32)],
        )
    }
    .unwrap();
    big.release_deferred();
    // A 4 KiB block: the pool lets the 8 KiB one go to make room, and its bytes leave only
    // once the kernel has ended.
    let mut small = Box::pin(pool.acquire_async::<u32>(1024));
    let task = Arc::new(Counting::default());
    let waker = Waker::from(task.clone());
    let first = small.as_mut().poll(&mut TaskContext::from_waker(&waker));
    let kernel_running = !spun.is_terminal();
    match first {
        Poll::Pending => {}
        Poll::Ready(got) => {
            assert!(
                !kernel_running,
                "taken while the block's kernel ran: {got:?}"
            );
        }
    }
    let small = pollster::block_on(small).unwrap();
    assert!(spun.is_terminal());
    assert_eq!(small.len(), 1024);
    assert!(pool.stats().in_use_bytes <= 8192);
}

#[test]
fn an_async_pool_allocation_refused_by_the_maximum_is_the_same_error() {
    let Some(ctx) = async_context() else { return };
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(4096)).unwrap();
    let held = pool.acquire::<u8>(4096).unwrap();
    let refused = pollster::block_on(pool.acquire_async::<u8>(4096));
    assert!(
        matches!(refused, Err(Error::PoolExhausted { .. })),
        "{refused:?}"
    );
    drop(held);
}

/// With no blockers (`CL_LIFETIME_WAIT=quiet`, what a driver whose `clWaitForEvents` spins
/// gets), an awaited command behind a gate is woken by the poller when the gate opens, and
/// a failed one is its failure. In a child process: the mode is the process's.
#[test]
fn an_awaited_command_wakes_through_the_poller_when_waits_are_quiet() {
    common::isolated(
        &test_path!(an_awaited_command_wakes_through_the_poller_when_waits_are_quiet),
        common::CHILD_LIMIT,
        &[(cl_lifetime::WAIT_VAR, "quiet")],
        || {
            let Some(ctx) = async_context() else { return };
            let queue = ctx.queue().unwrap();
            let buf = ctx.buffer::<u32>(256).unwrap();
            for fail in [false, true] {
                let gate = ctx.user_event().unwrap();
                let fill = queue.after(&[gate.event()]).fill(&buf, 3).unwrap();
                let mut ended = fill.ended();
                let task = Arc::new(Counting::default());
                assert!(poll_once(&mut ended, &task).is_pending());
                assert_eq!(task.woken(), 0);
                if fail {
                    gate.fail(-9).unwrap();
                } else {
                    gate.complete().unwrap();
                }
                task.wait_woken("the fill's task, woken by the poller");
                match poll_once(&mut ended, &task) {
                    Poll::Ready(Ok(())) if !fail => {}
                    Poll::Ready(Err(Error::CommandFailed { .. })) if fail => {}
                    other => panic!("failed: {fail}: {other:?}"),
                }
            }
        },
    );
}

#[test]
fn a_lent_write_awaited_hands_its_vec_back() {
    let Some(ctx) = async_context() else { return };
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(2048).unwrap();
    let frames = runtime().block_on(async {
        let mut frame = vec![0u32; 2048];
        let ptr = frame.as_ptr();
        for i in 0..4 {
            frame.fill(i);
            frame = queue.write_lent(&buf, frame).unwrap().await.unwrap();
            assert_eq!(frame.as_ptr(), ptr);
        }
        queue.read_into(&buf, frame).unwrap().await.unwrap()
    });
    assert_eq!(frames, vec![3u32; 2048]);
}

/// How many tasks await commands behind closed gates in the *never starve* test: 100,000,
/// far more than any thread count a waiter might block per command (256 did before), on
/// every implementation the suite runs on (about 5 s in a debug build on PoCL 3.1);
/// `CL_LIFETIME_GATED_AWAITS` sets another count.
fn gated_awaits() -> usize {
    std::env::var("CL_LIFETIME_GATED_AWAITS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

isolated_test! {
    /// Issue 47's deadlock: many tasks await commands behind closed gates; one more awaits its
    /// own read, which waits for no gate, and opens the gates once it has it. Its read ends,
    /// so its task must be woken however many others wait, and then all of them.
    fn awaits_behind_closed_gates_never_starve_an_ungated_one() {
        let Some(ctx) = async_context() else { return };
        let count = gated_awaits();
        let queues: Vec<_> = (0..4).map(|_| ctx.queue().unwrap()).collect();
        let gates: Vec<_> = (0..8).map(|_| ctx.user_event().unwrap()).collect();
        let buffers: Vec<_> = (0..64).map(|_| ctx.buffer::<u32>(16).unwrap()).collect();
        let mut gated = Vec::with_capacity(count);
        for i in 0..count {
            let gate = &gates[i % gates.len()];
            let fill = queues[i % queues.len()]
                .after(&[gate.event()])
                .fill(&buffers[i % buffers.len()], i as u32)
                .unwrap();
            gated.push(fill);
        }
        let mine = ctx.buffer_from(&[5u32; 64]).unwrap();
        let reader = ctx.queue().unwrap();
        let ended = runtime().block_on(async move {
            let tasks: Vec<_> = gated
                .into_iter()
                .map(|fill| tokio::spawn(fill.into_future()))
                .collect();
            // Every gated task has polled its command once (and is pending) before
            // the opener starts.
            tokio::task::yield_now().await;
            let opener = tokio::spawn(async move {
                let data = reader.read_owned(&mine).unwrap().await.unwrap();
                assert_eq!(data, vec![5u32; 64]);
                for gate in gates {
                    gate.complete().unwrap();
                }
            });
            opener.await.unwrap();
            let mut ended = 0;
            for task in tasks {
                task.await.unwrap().unwrap();
                ended += 1;
            }
            ended
        });
        assert_eq!(ended, count);
        println!("{count} tasks behind closed gates all woken, after an ungated one");
    }
}

/// A waker that panics when woken, counting its wakes first.
#[derive(Default)]
struct Panicking(Counting);

impl Wake for Panicking {
    fn wake(self: Arc<Self>) {
        self.0.0.fetch_add(1, Ordering::SeqCst);
        panic!("a waker that panics when woken");
    }
}

isolated_test! {
    /// Issue 47: a waker that panics runs on a library thread; that thread must survive it, and
    /// later awaits on the same queue must still be woken.
    fn a_waker_that_panics_leaves_later_awaits_on_its_queue_woken() {
        let Some(ctx) = async_context() else { return };
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(64).unwrap();
        for round in 0..3 {
            let gate = ctx.user_event().unwrap();
            let fill = queue.after(&[gate.event()]).fill(&buf, round).unwrap();
            let mut ended = fill.ended();
            let panicking = Arc::new(Panicking::default());
            let waker = Waker::from(panicking.clone());
            assert!(
                std::pin::Pin::new(&mut ended)
                    .poll(&mut TaskContext::from_waker(&waker))
                    .is_pending()
            );
            gate.complete().unwrap();
            // A later await on the same queue, woken as any other.
            let gate = ctx.user_event().unwrap();
            let later = queue.after(&[gate.event()]).fill(&buf, round + 10).unwrap();
            let mut later = later.ended();
            let task = Arc::new(Counting::default());
            assert!(poll_once(&mut later, &task).is_pending());
            gate.complete().unwrap();
            task.wait_woken("an await on the queue after a waker panicked");
            assert!(matches!(poll_once(&mut later, &task), Poll::Ready(Ok(()))));
            // The panicking task, polled again once its waker was called, gets the
            // waker's panic.
            panicking.0.wait_woken("the panicking waker");
            // A poll while the waiter is still inside the waker's call is pending, and
            // woken again once the call has returned.
            let resumed = loop {
                let task = Arc::new(Counting::default());
                let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    poll_once(&mut ended, &task).is_ready()
                }));
                match polled {
                    Err(_) => break true,
                    Ok(true) => break false,
                    Ok(false) => task.wait_woken("a poll during the panicking waker's call"),
                }
            };
            assert!(resumed, "round {round}: the waker's panic is the task's");
        }
    }
}

isolated_test! {
    /// Issue 47: an `unblock` job that panics resumes its panic in the awaiting task, and its
    /// thread is not lost: 600 such panics, then an await, an `unblock` and an async release
    /// still complete.
    fn an_unblock_job_that_panics_resumes_in_its_task_and_loses_no_thread() {
        let Some(ctx) = async_context() else { return };
        let rt = runtime();
        for i in 0..600u32 {
            let task = rt.spawn(cl_lifetime::unblock(move || -> u32 {
                panic!("job {i} panics")
            }));
            let joined = rt.block_on(task);
            let panic = joined.expect_err("the job's panic reaches its task");
            assert!(panic.is_panic());
        }
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(64).unwrap();
        let gate = ctx.user_event().unwrap();
        let fill = queue.after(&[gate.event()]).fill(&buf, 4).unwrap();
        let done = rt.block_on(async move {
            let waiting = tokio::spawn(fill.into_future());
            let seven = cl_lifetime::unblock(|| 7).await;
            gate.complete().unwrap();
            waiting.await.unwrap().unwrap();
            let report = buf.release_async().await.unwrap();
            (seven, report.freed)
        });
        assert_eq!(done, (7, true));
    }
}

isolated_test! {
    /// Issue 47: the waker of a pooled allocation waiting for bytes to leave runs on the
    /// context's reaper thread; if it panics, the reaper must go on releasing, and the
    /// allocation's task gets the panic at its next poll.
    fn a_panicking_waker_of_a_pooled_allocation_leaves_the_reaper_running() {
        let Some(ctx) = async_context() else { return };
        let queue = ctx.queue().unwrap();
        let spin = common::busy(&ctx).kernel("spin").unwrap();
        let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(8192)).unwrap();
        // Until the allocation is seen waiting: a kernel that ends before the poll
        // leaves nothing to wait for, so the next try spins longer.
        let mut pending = false;
        let mut iterations = 50_000u32;
        while !pending && iterations < 50_000 << 8 {
            let big = pool.acquire::<f32>(2048).unwrap();
            // SAFETY: spin touches big[i], i < 2048, its length.
            unsafe {
                queue.launch(
                    &spin,
                    &[2048],
                    &[Arg::read_write(&big), Arg::scalar(iterations)],
                )
            }
            .unwrap();
            big.release_deferred();
            // A block 8 times smaller: the pool does not hand out the big one for it,
            // and must let the big one go to make room.
            let mut small = Box::pin(pool.acquire_async::<u32>(256));
            let panicking = Arc::new(Panicking::default());
            let waker = Waker::from(panicking.clone());
            pending = small
                .as_mut()
                .poll(&mut TaskContext::from_waker(&waker))
                .is_pending();
            // The reaper frees the block and wakes the panicking waker: it must
            // survive it.
            ctx.wait_deferred();
            iterations *= 2;
            if pending {
                panicking.0.wait_woken("the panicking waker");
                // Polled again, the task gets its waker's panic.
                let task = Arc::new(Counting::default());
                let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let waker = Waker::from(task.clone());
                    small.as_mut().poll(&mut TaskContext::from_waker(&waker)).is_ready()
                }));
                let panic = again.expect_err("the waker's panic is the task's");
                assert_eq!(
                    panic.downcast_ref::<&str>(),
                    Some(&"a waker that panics when woken")
                );
            }
        }
        assert!(pending, "the allocation never waited for bytes leaving");
        let other = ctx.buffer::<u32>(256).unwrap();
        queue.fill(&other, 3).unwrap();
        other.release_deferred();
        ctx.wait_deferred();
        assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
    }
}

/// The value of an enqueue of the randomized async test, or the task's end: an enqueue
/// behind a gate that failed may be refused at once, which is the model's failure.
macro_rules! or_failed {
    ($enqueue:expr, $opens:expr, $what:expr) => {
        match $enqueue {
            Ok(value) => value,
            Err(Error::DependencyFailed { .. } | Error::CommandFailed { .. }) if !$opens => {
                return Ok(());
            }
            Err(e) => return Err(format!("{}: enqueue refused: {e}", $what)),
        }
    };
}

/// How many tasks the randomized async test runs: 1,200 by default, 20,000 in
/// `make stress` (`CL_LIFETIME_ASYNC_TASKS`).
fn random_tasks() -> usize {
    std::env::var("CL_LIFETIME_ASYNC_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1200)
}

/// What one task of the randomized async test does.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// Fills a buffer behind gate `gate` and awaits its read back: the fill's value, or a
    /// typed failure when the gate is failed.
    Gated { gate: usize, pooled: bool },
    /// Fills and awaits its read, behind no gate.
    Free { pooled: bool },
    /// Polls a gated read once, then drops it (a cancelled task): nothing is lost.
    Cancelled { gate: usize },
    /// Polls a gated fill's future with a waker that panics, then awaits the fill again.
    PanickingWaker { gate: usize },
    /// An `unblock` job that panics: the task gets the panic.
    PanickingJob,
    /// Releases its buffer with `release_async` after a gated fill.
    Release { gate: usize },
}

/// The randomized async test (issue 47): more than a thousand tokio tasks over three
/// queues, fresh and pooled buffers (a pool behind `max_bytes`), gates opened and failed by
/// tasks that first await ungated commands of their own, cancellations, panicking wakers
/// and jobs. Each result is checked against the model (the gate's fate decides the value
/// or the typed failure), and at the end nothing is live, pending or held by the pool. On
/// the waiter that blocked a thread per gated command, the openers were never woken.
#[test]
fn random_async_programs_match_their_model() {
    common::isolated(
        &test_path!(random_async_programs_match_their_model),
        Duration::from_secs(120),
        &[],
        || {
            let Some(ctx) = async_context() else { return };
            let tasks = random_tasks();
            // A new seed each run, printed; `CL_LIFETIME_ASYNC_SEED` replays one.
            let seed = std::env::var("CL_LIFETIME_ASYNC_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(1, |d| d.as_nanos() as u64)
                });
            println!("random_async_programs_match_their_model: CL_LIFETIME_ASYNC_SEED={seed}");
            let mut rng = common::Rng(seed);
            let gates_count = 24;
            let fates: Vec<bool> = (0..gates_count).map(|_| rng.below(4usize) != 0).collect();
            let plans: Vec<Plan> = (0..tasks)
                .map(|_| {
                    let gate = rng.below(gates_count);
                    match rng.below(12) {
                        0..=4 => Plan::Gated {
                            gate,
                            pooled: rng.below(2) == 0,
                        },
                        5..=6 => Plan::Free {
                            pooled: rng.below(2) == 0,
                        },
                        7..=8 => Plan::Cancelled { gate },
                        9 => Plan::PanickingWaker { gate },
                        10 => Plan::PanickingJob,
                        _ => Plan::Release { gate },
                    }
                })
                .collect();
            let queues: Arc<Vec<_>> = Arc::new((0..3).map(|_| ctx.queue().unwrap()).collect());
            let gates: Vec<_> = (0..gates_count)
                .map(|_| ctx.user_event().unwrap())
                .collect();
            let gate_events: Arc<Vec<_>> =
                Arc::new(gates.iter().map(|g| g.event().clone()).collect());
            let pool =
                Arc::new(Pool::new(&ctx, PoolOptions::default().max_bytes(256 * 1024)).unwrap());
            let rt = runtime();
            let outcomes = rt.block_on(async {
                let mut handles = Vec::new();
                for (i, plan) in plans.iter().copied().enumerate() {
                    let (ctx, queues, gate_events, pool) = (
                        ctx.clone(),
                        queues.clone(),
                        gate_events.clone(),
                        pool.clone(),
                    );
                    let fates = fates.clone();
                    handles.push(tokio::spawn(async move {
                        // Commands behind a gate that fails on a queue of their own: on an
                        // in-order queue, a driver may fail every command after a failed one.
                        let fails = match plan {
                            Plan::Gated { gate, .. }
                            | Plan::Cancelled { gate }
                            | Plan::PanickingWaker { gate }
                            | Plan::Release { gate } => !fates[gate],
                            Plan::Free { .. } | Plan::PanickingJob => false,
                        };
                        let queue = &queues[if fails { 2 } else { i % 2 }];
                        let value = i as u32;
                        let buffer = |pooled: bool| {
                            let (ctx, pool) = (ctx.clone(), pool.clone());
                            async move {
                                if pooled {
                                    pool.acquire_async::<u32>(64).await
                                } else {
                                    ctx.buffer::<u32>(64)
                                }
                            }
                        };
                        match plan {
                            Plan::Gated { gate, pooled } => {
                                let buf = match buffer(pooled).await {
                                    Ok(buf) => buf,
                                    // The pool at its maximum while gates are closed.
                                    Err(Error::PoolExhausted { .. }) => return Ok(()),
                                    Err(e) => return Err(format!("task {i}: {e}")),
                                };
                                or_failed!(
                                    queue.after(&[&gate_events[gate]]).fill(&buf, value),
                                    fates[gate],
                                    format!("task {i} {plan:?}")
                                );
                                let read = or_failed!(
                                    queue.read_owned(&buf),
                                    fates[gate],
                                    format!("task {i} {plan:?}")
                                )
                                .await;
                                match (fates[gate], read) {
                                    (true, Ok(data)) if data == vec![value; 64] => Ok(()),
                                    (
                                        false,
                                        Err(
                                            Error::DependencyFailed { .. }
                                            | Error::CommandFailed { .. },
                                        ),
                                    ) => Ok(()),
                                    (fate, other) => Err(format!(
                                        "task {i} {plan:?}: gate opened {fate}, got {other:?}"
                                    )),
                                }
                            }
                            Plan::Free { pooled } => {
                                let buf = match buffer(pooled).await {
                                    Ok(buf) => buf,
                                    Err(Error::PoolExhausted { .. }) => return Ok(()),
                                    Err(e) => return Err(format!("task {i}: {e}")),
                                };
                                queue.fill(&buf, value).unwrap();
                                match queue.read_owned(&buf).unwrap().await {
                                    Ok(data) if data == vec![value; 64] => Ok(()),
                                    other => Err(format!("task {i} {plan:?}: {other:?}")),
                                }
                            }
                            Plan::Cancelled { gate } => {
                                let buf = ctx.buffer::<u32>(64).unwrap();
                                or_failed!(
                                    queue.after(&[&gate_events[gate]]).fill(&buf, value),
                                    fates[gate],
                                    format!("task {i} {plan:?}")
                                );
                                let read = or_failed!(
                                    queue.read_owned(&buf),
                                    fates[gate],
                                    format!("task {i} {plan:?}")
                                );
                                // Polled once (pending behind its gate), then dropped.
                                let cancelled = tokio::time::timeout(
                                    Duration::from_micros(1),
                                    read.into_future(),
                                )
                                .await;
                                match cancelled {
                                    Err(_elapsed) => Ok(()),
                                    Ok(Ok(data)) if fates[gate] && data == vec![value; 64] => {
                                        Ok(())
                                    }
                                    Ok(Err(_)) if !fates[gate] => Ok(()),
                                    Ok(other) => Err(format!("task {i} {plan:?}: {other:?}")),
                                }
                            }
                            Plan::PanickingWaker { gate } => {
                                let buf = ctx.buffer::<u32>(64).unwrap();
                                let fill = or_failed!(
                                    queue.after(&[&gate_events[gate]]).fill(&buf, value),
                                    fates[gate],
                                    format!("task {i} {plan:?}")
                                );
                                let mut first = fill.ended();
                                let waker = Waker::from(Arc::new(Panicking::default()));
                                let _ = std::pin::Pin::new(&mut first)
                                    .poll(&mut TaskContext::from_waker(&waker));
                                let outcome = fill.ended().await;
                                drop(first);
                                match (fates[gate], outcome) {
                                    (true, Ok(())) | (false, Err(_)) => Ok(()),
                                    (fate, other) => Err(format!(
                                        "task {i} {plan:?}: gate opened {fate}, got {other:?}"
                                    )),
                                }
                            }
                            Plan::PanickingJob => {
                                let job = tokio::spawn(cl_lifetime::unblock(move || -> u32 {
                                    panic!("job of task {i}")
                                }));
                                match job.await {
                                    Err(e) if e.is_panic() => Ok(()),
                                    other => Err(format!("task {i}: {other:?}")),
                                }
                            }
                            Plan::Release { gate } => {
                                let buf = ctx.buffer::<u32>(64).unwrap();
                                or_failed!(
                                    queue.after(&[&gate_events[gate]]).fill(&buf, value),
                                    fates[gate],
                                    format!("task {i} {plan:?}")
                                );
                                // Freed, a failed fill too (issue 48: where events keep
                                // their buffers, a failure kept elsewhere kept its event; on
                                // Intel's CPU runtime a fill whose gate failed behind a
                                // gated command of this shared queue kept its buffer until
                                // that command ended, and the release now waits for it).
                                match buf.release_async().await {
                                    Ok(report)
                                        if report.freed
                                            && report.failed.is_empty() == fates[gate] =>
                                    {
                                        Ok(())
                                    }
                                    other => Err(format!(
                                        "task {i} {plan:?}: gate opened {}, got {other:?}",
                                        fates[gate]
                                    )),
                                }
                            }
                        }
                    }));
                }
                // The openers: each awaits a command of its own that waits for no gate
                // first, then sets its gates, completed or failed as the model says.
                let mut openers = Vec::new();
                let mut gates = gates.into_iter();
                for chunk in 0..4 {
                    let gates: Vec<_> = gates.by_ref().take(gates_count / 4).collect();
                    let fates: Vec<bool> = fates[chunk * (gates_count / 4)..].to_vec();
                    // A queue of its own: on an in-order queue, its read would wait for
                    // the gated commands before it.
                    let (ctx, queue) = (ctx.clone(), ctx.queue().unwrap());
                    openers.push(tokio::spawn(async move {
                        tokio::task::yield_now().await;
                        let mine = ctx.buffer_from(&[chunk as u32; 16]).unwrap();
                        let data = queue.read_owned(&mine).unwrap().await.unwrap();
                        assert_eq!(data, vec![chunk as u32; 16]);
                        for (gate, fate) in gates.iter().zip(fates) {
                            if fate {
                                gate.complete().unwrap();
                            } else {
                                gate.fail(-9).unwrap();
                            }
                        }
                    }));
                }
                for opener in openers {
                    opener.await.unwrap();
                }
                let mut outcomes = Vec::new();
                for (i, handle) in handles.into_iter().enumerate() {
                    let joined = handle.await;
                    outcomes.push(joined.unwrap_or_else(|e| {
                        let panic = e.try_into_panic().map_or_else(
                            |e| format!("{e}"),
                            |p| format!("{:?}", p.downcast_ref::<String>()),
                        );
                        Err(format!("task {i} panicked: {panic}"))
                    }));
                }
                outcomes
            });
            let wrong: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
            assert!(
                wrong.is_empty(),
                "{} of {tasks} tasks wrong: {wrong:#?}",
                wrong.len()
            );
            drop(rt);
            // The tasks are done: the pool's other handles are gone.
            pool.trim(0);
            drop(pool);
            ctx.wait_deferred();
            let stats = ctx.memory_stats();
            assert_eq!(
                (
                    stats.live_bytes,
                    stats.pending_release_bytes,
                    stats.pooled_bytes
                ),
                (0, 0, 0),
                "{stats:?}"
            );
        },
    );
}
