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
        queue
            .launch(
                &increment,
                &[n],
                &[Arg::read_write(&buf), Arg::scalar(n as u32)],
            )
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
    let spun = queue
        .launch(
            &spin,
            &[2048],
            &[Arg::read_write(&big), Arg::scalar(50_000u32)],
        )
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

/// With every wait through a driver callback (`CL_LIFETIME_WAIT=quiet`, what a driver whose
/// `clWaitForEvents` spins gets), an awaited command behind a gate is woken when the gate
/// opens, and a failed one is its failure. In a child process: the mode is the process's.
#[test]
fn an_awaited_command_wakes_through_a_driver_callback_when_waits_are_quiet() {
    common::isolated(
        &test_path!(an_awaited_command_wakes_through_a_driver_callback_when_waits_are_quiet),
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
                task.wait_woken("the fill's task, woken through a callback");
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
