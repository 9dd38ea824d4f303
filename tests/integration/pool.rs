//! Deferred release, the event-aware pool, resize, arenas and the memory ledger, proven
//! with user events as gates and the cl-sys oracle.
//!
//! Order is never inferred from time. A gate holds a command back; a call that must not
//! wait for the device is shown to return while the gate is still closed (it runs on the
//! test thread, and the gate is opened only after it returns; a watchdog opens the gate
//! after [`HANG`] so that a host wait fails the test instead of hanging it), and the
//! contents after the gate opens show which command ran last.

use std::collections::HashSet;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use cl_lifetime::{
    Arena, Arg, ClBuffer, Context, Error, Event, MemoryStats, POISON, PendingRead, Pod, Pool,
    PoolOptions, PoolStats, Queue, UserEvent,
};

use crate::common::{self, HANG, Rng, Watch, contents, ramp};

/// Runs `op` on this thread while `gate` is closed and returns its result. A watchdog
/// opens the gate after [`HANG`]; if it had to, `op` waited for the device and the test
/// fails.
fn returns_while_gated<R>(gate: &UserEvent, what: &str, op: impl FnOnce() -> R) -> R {
    let (tx, rx) = mpsc::channel::<()>();
    let (out, watchdog_opened) = thread::scope(|s| {
        // Owned here, so that a panic in `op` drops it and ends the watchdog at once.
        let tx = tx;
        let watchdog = s.spawn(move || match rx.recv_timeout(HANG) {
            Err(RecvTimeoutError::Timeout) => {
                let _ = gate.complete();
                true
            }
            _ => false,
        });
        let out = op();
        let _ = tx.send(());
        (out, watchdog.join().expect("watchdog"))
    });
    assert!(
        !watchdog_opened,
        "{what} blocked until its gate was opened after {HANG:?}: the host waited for the device"
    );
    out
}

/// A sub-buffer's origin in its parent (`CL_MEM_OFFSET`), through cl-sys.
fn mem_offset<T: Pod>(buf: &ClBuffer<T>) -> usize {
    let mut offset: usize = usize::MAX;
    // SAFETY: the buffer's cl_mem is live for the call; the output is one size_t.
    let rc = unsafe {
        cl_sys::clGetMemObjectInfo(
            buf.as_raw() as cl_sys::cl_mem,
            cl_sys::CL_MEM_OFFSET,
            size_of::<usize>(),
            (&raw mut offset).cast(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "clGetMemObjectInfo(CL_MEM_OFFSET)");
    offset
}

#[test]
fn deferred_release_returns_while_a_gated_command_is_pending() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (queue, other) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer::<u32>(1000).unwrap();
    let bytes = buf.bytes() as u64;
    assert_eq!(bytes, 4000);
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 7).unwrap();
    // A read on another queue, behind the fill (read after write).
    let read = other.read_owned(&buf).unwrap();
    queue.flush().unwrap();
    let watch = common::watch(&buf, &[&fill, read.event()]);
    assert_eq!(ctx.memory_stats().live_bytes, bytes);

    returns_while_gated(&gate, "release_deferred", || buf.release_deferred());

    assert!(!fill.is_terminal() && !read.event().is_terminal());
    let stats = ctx.memory_stats();
    assert_eq!(stats.pending_release_bytes, bytes, "{stats:?}");
    assert_eq!(stats.live_bytes, 0, "{stats:?}");
    assert!(!watch.fired(), "memory freed while its commands were gated");

    gate.complete().unwrap();
    // The test's handles would keep the memory on rusticl (design trap "rusticl's events
    // keep their buffers").
    assert_eq!(read.wait().unwrap(), vec![7; 1000]);
    drop(fill);
    ctx.wait_deferred();
    watch.assert_released_after_events();
    let stats = ctx.memory_stats();
    assert_eq!(stats.pending_release_bytes, 0, "{stats:?}");
    assert_eq!(stats.live_bytes, 0, "{stats:?}");
}

/// A buffer of 1,000 `u32` whose fill waits on a closed gate, released deferred while the
/// gate is closed: the gate, the fill and the oracle's watch on the buffer.
fn released_deferred_behind_a_gate(ctx: &Context, queue: &Queue) -> (UserEvent, Event, Watch) {
    let old = ctx.buffer::<u32>(1000).expect("a buffer");
    let gate = ctx.user_event().expect("a gate");
    let fill = queue
        .after(&[gate.event()])
        .fill(&old, 7)
        .expect("a gated fill");
    queue.flush().expect("a flush");
    let watch = common::watch(&old, &[&fill]);
    returns_while_gated(&gate, "release_deferred", || old.release_deferred());
    (gate, fill, watch)
}

/// The reaper's *reclaim* rule: a new uninitialized buffer of the same size takes over a
/// deferred release once its commands have ended, never before; the memory then belongs
/// to the new buffer, and goes with its release. Whether the allocation or the reaper
/// gets there first is up to timing, so the round is repeated until the allocation does.
#[test]
fn a_new_buffer_takes_over_a_deferred_release_only_once_its_commands_have_ended() {
    // In a child process, away from the tests beside it in the suite's process: in a loaded
    // full run (the emulated-mesa row) all 50 rounds once lost the race to the reaper.
    common::isolated(
        &test_path!(a_new_buffer_takes_over_a_deferred_release_only_once_its_commands_have_ended),
        common::CHILD_LIMIT,
        &[],
        || {
            let ctx = device!();
            if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
                return;
            }
            let queue = ctx.queue().unwrap();
            let mut taken = None;
            for round in 0..50 {
                let (gate, fill, watch) = released_deferred_behind_a_gate(&ctx, &queue);
                let early = ctx.buffer::<u32>(1000).unwrap();
                let stats = ctx.memory_stats();
                assert_eq!(
                    (stats.reclaimed, stats.pending_release_bytes),
                    (0, 4000),
                    "round {round}: a new buffer took over memory whose fill was gated: {stats:?}"
                );
                gate.complete().unwrap();
                fill.wait().unwrap();
                // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
                // their buffers").
                drop(fill);
                let new = ctx.buffer::<u32>(1000).unwrap();
                early.release().unwrap();
                if ctx.memory_stats().reclaimed == 1 {
                    taken = Some((round, new, watch));
                    break;
                }
                // The reaper began the release first.
                new.release().unwrap();
                ctx.wait_deferred();
                watch.assert_released_after_events();
            }
            let (round, new, watch) = taken
                .expect("in 50 rounds no new buffer took over a deferred release that had ended");
            eprintln!("taken over in round {round}");
            let stats = ctx.memory_stats();
            assert_eq!(
                (stats.live_bytes, stats.pending_release_bytes),
                (4000, 0),
                "{stats:?}"
            );
            ctx.wait_deferred();
            assert!(
                !watch.fired(),
                "the reaper freed memory that a buffer holds"
            );
            queue.fill(&new, 9).unwrap();
            assert_eq!(contents(&queue, &new), vec![9; 1000]);
            let report = new.release().unwrap();
            assert!(report.freed && report.failed.is_empty(), "{report:?}");
            assert!(
                common::eventually(|| watch.fired()),
                "the memory taken over was not freed with its new owner"
            );
            assert_eq!(ctx.memory_stats().live_bytes, 0);
        },
    );
}

/// Issue 50: a buffer that took over a deferred release (made by `ctx.buffer`, or by
/// `resize`) inherited the old buffer's sub-buffers, and refused a valid view across one
/// of them with `Error::ViewOverlap`. It starts with none. Rounds as in the test above,
/// until the allocation gets there before the reaper.
#[test]
fn a_buffer_that_takes_over_a_deferred_release_starts_with_no_sub_buffers_of_the_old_one() {
    // In a child process, away from the tests beside it in the suite's process: in a loaded
    // full run (the emulated-mesa row) all 50 rounds once lost the race to the reaper.
    common::isolated(
        &test_path!(
            a_buffer_that_takes_over_a_deferred_release_starts_with_no_sub_buffers_of_the_old_one
        ),
        common::CHILD_LIMIT,
        &[],
        || {
            let ctx = device!();
            let queue = ctx.queue().unwrap();
            let increment = common::busy(&ctx).kernel("increment").unwrap();
            let unit = common::sub_buffer_unit(&ctx);
            let len = 4 * unit;
            for resize in [false, true] {
                let mut taken = None;
                for _round in 0..50 {
                    let old = ctx.buffer::<i32>(len).unwrap();
                    // SAFETY: increment touches element i of the view only where i < 2 * unit, its length.
                    unsafe {
                        queue.launch(
                            &increment,
                            &[2 * unit],
                            &[
                                Arg::read_write(old.view(..2 * unit).unwrap()),
                                Arg::scalar(2 * unit as u32),
                            ],
                        )
                    }
                    .unwrap()
                    .wait()
                    .unwrap();
                    assert_eq!(old.kept_sub_buffers(), 1);
                    // Made first: between the release and the allocation, as little as can be.
                    let small = resize.then(|| ctx.buffer::<i32>(unit).unwrap());
                    let reclaimed = ctx.memory_stats().reclaimed;
                    old.release_deferred();
                    let new = match small {
                        Some(mut new) => {
                            new.resize(&queue, len).unwrap();
                            new
                        }
                        None => ctx.buffer::<i32>(len).unwrap(),
                    };
                    if ctx.memory_stats().reclaimed > reclaimed {
                        taken = Some(new);
                        break;
                    }
                    // The reaper began the release first.
                    drop(new);
                    ctx.wait_deferred();
                }
                let new = taken.unwrap_or_else(|| {
                    panic!(
                        "resize {resize}: in 50 rounds no new buffer took over a deferred release"
                    )
                });
                queue.fill(&new, 0).unwrap();
                // Across the old buffer's view: a valid view of the new buffer.
                // SAFETY: increment touches element i of the view only where i < 2 * unit, its length.
                unsafe {
                    queue.launch(
                        &increment,
                        &[2 * unit],
                        &[
                            Arg::read_write(new.view(unit..3 * unit).unwrap()),
                            Arg::scalar(2 * unit as u32),
                        ],
                    )
                }
                .unwrap_or_else(|e| panic!("resize {resize}: {e}"));
                assert_eq!(new.kept_sub_buffers(), 1, "resize {resize}");
                let mut expected = vec![0i32; len];
                expected[unit..3 * unit].fill(1);
                assert_eq!(contents(&queue, &new), expected, "resize {resize}");
                assert!(new.release().unwrap().freed);
            }
        },
    );
}

/// The reaper's *reclaim* rule: memory whose last command failed is not taken over; the
/// reaper releases it (and logs the failure). Rounds as in the test above, where the
/// allocation gets there before the reaper within a few.
#[test]
fn a_deferred_release_whose_command_failed_is_not_taken_over() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    for round in 0..20 {
        let (gate, fill, watch) = released_deferred_behind_a_gate(&ctx, &queue);
        gate.fail(-1234).unwrap();
        assert!(fill.wait().is_err());
        drop(fill);
        let new = ctx.buffer::<u32>(1000).unwrap();
        let stats = ctx.memory_stats();
        assert_eq!(
            stats.reclaimed, 0,
            "round {round}: took over memory after a failed command: {stats:?}"
        );
        ctx.wait_deferred();
        watch.assert_released_after_events();
        assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
        new.release().unwrap();
    }
}

#[test]
fn dropping_the_context_finishes_deferred_releases() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let spin = common::busy(&ctx).kernel("spin").unwrap();
    let n = 256;
    let buf = ctx.buffer_from(&vec![0.5f32; n]).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 1.0f32).unwrap();
    // Device work behind the gate, so that the reaper is still waiting when the context
    // goes: a drop that did not wait for it would find the memory not yet freed.
    let spins: Vec<Event> = (0..4)
        .map(|_| {
            // SAFETY: spin touches buf[i], i < n, buf's length.
            unsafe {
                queue.launch(
                    &spin,
                    &[n],
                    &[Arg::read_write(&buf), Arg::scalar(20_000u32)],
                )
            }
            .unwrap()
        })
        .collect();
    queue.flush().unwrap();
    let mut watched: Vec<&Event> = vec![&fill];
    watched.extend(spins.iter());
    let watch = common::watch(&buf, &watched);
    // The record keeps them; the test's handles would keep the memory on rusticl (design
    // trap "rusticl's events keep their buffers").
    drop(fill);

    returns_while_gated(&gate, "release_deferred", || buf.release_deferred());
    assert!(!watch.fired(), "memory freed while its commands were gated");
    assert_eq!(ctx.memory_stats().pending_release_bytes, (n * 4) as u64);

    gate.complete().unwrap();
    let still_running = !spins.last().unwrap().is_terminal();
    drop(spins);
    drop(spin);
    drop(queue);
    drop(ctx); // the last handle: waits for the reaper
    eprintln!("device work still running when the context was dropped: {still_running}");
    // Freed, and every watched command (the spins included) had ended by then.
    watch.assert_released_after_events();
}

#[test]
fn same_queue_reuse_needs_no_wait_list() {
    let ctx = device!();
    // The hand-over behind an open gate has the waiter's poller watch the old owner's
    // write (the pool's *clean hand-over* rule): a second thread in the context.
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let n = 1000;
    let old = pool.acquire::<u32>(n).unwrap();
    let raw = old.as_raw();
    let gate = ctx.user_event().unwrap();
    let old_write = queue
        .after(&[gate.event()])
        .write_owned(&old, ramp(n, 3))
        .unwrap();

    let (report, new, new_write, delta) = returns_while_gated(&gate, "recycle and reuse", || {
        let report = old.release().unwrap();
        let new = pool.acquire::<u32>(n).unwrap();
        let before = ctx.hazard_stats();
        let new_write = queue.write_owned(&new, ramp(n, 5)).unwrap();
        let after = ctx.hazard_stats();
        (report, new, new_write, (before, after))
    });
    assert!(report.recycled, "{report:?}");
    assert_eq!(report.waited_on, 0, "{report:?}");
    assert_eq!(new.as_raw(), raw, "the pooled block was not reused");
    let (before, after) = delta;
    assert_eq!(after.enqueues - before.enqueues, 1);
    assert_eq!(
        after.wait_entries - before.wait_entries,
        0,
        "a write on the old owner's in-order queue needs no wait list"
    );
    assert_eq!(
        after.wait_entries_without_elision - before.wait_entries_without_elision,
        1,
        "the new owner did not inherit the old owner's write"
    );
    let stats = ctx.memory_stats();
    assert_eq!(
        (stats.driver_allocations, stats.reuses),
        (1, 1),
        "{stats:?}"
    );
    assert!(!old_write.is_terminal() && !new_write.is_terminal());

    gate.complete().unwrap();
    assert_eq!(contents(&queue, &new), ramp(n, 5));
}

#[test]
fn cross_queue_reuse_orders_the_new_owner_after_the_old() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let n = 1024;
    let (a, b) = (0xAAAA_0000u32, 0x0000_BBBBu32);
    for round in 0..200 {
        let old_first = round % 2 == 0;
        let old_gate = ctx.user_event().unwrap();
        let new_gate = ctx.user_event().unwrap();
        let old = pool.acquire::<u32>(n).unwrap();
        let raw = old.as_raw();
        let old_write = q1
            .after(&[old_gate.event()])
            .write_owned(&old, vec![a + round; n])
            .unwrap();
        let (new, new_fill, delta) = returns_while_gated(&old_gate, "recycle and reuse", || {
            assert!(old.release().unwrap().recycled);
            let new = pool.acquire::<u32>(n).unwrap();
            let before = ctx.hazard_stats();
            let fill = q2.after(&[new_gate.event()]).fill(&new, b + round).unwrap();
            let after = ctx.hazard_stats();
            (new, fill, after.wait_entries - before.wait_entries)
        });
        assert_eq!(new.as_raw(), raw, "round {round}: block not reused");
        assert_eq!(
            delta, 2,
            "round {round}: the new owner's fill waits on its gate and the old owner's write"
        );
        assert!(!new_fill.is_terminal(), "round {round}");

        if old_first {
            old_gate.complete().unwrap();
            assert!(!new_fill.is_terminal(), "round {round}: ran past its gate");
            new_gate.complete().unwrap();
        } else {
            new_gate.complete().unwrap();
            assert!(
                !new_fill.is_terminal(),
                "round {round}: the new owner's fill ran before the old owner's gated write"
            );
            old_gate.complete().unwrap();
        }
        let reader = if round % 4 < 2 { &q1 } else { &q2 };
        let got = contents(reader, &new);
        assert!(
            got.iter().all(|&x| x == b + round),
            "round {round} (old gate first: {old_first}): the old owner's write landed after the new owner's fill: {:#x}",
            got[0]
        );
        assert!(old_write.is_terminal());
        assert!(new.release().unwrap().recycled);
    }
    assert_eq!(ctx.memory_stats().driver_allocations, 1);
}

#[test]
fn acquire_on_gives_each_queue_its_own_block_while_another_queues_block_is_pending() {
    let ctx = device!();
    let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let n = 1024;
    let gate = ctx.user_event().unwrap();
    let first = pool.acquire_on::<u32>(&q1, n).unwrap();
    let raw1 = first.as_raw();
    let gated = q1.after(&[gate.event()]).fill(&first, 1).unwrap();
    let (second, again, fill2, wait_entries) = returns_while_gated(&gate, "acquire_on", || {
        first.release_deferred();
        // q2 must not inherit q1's gated block: it would wait for the gate.
        let second = pool.acquire_on::<u32>(&q2, n).unwrap();
        let before = ctx.hazard_stats();
        let fill2 = q2.fill(&second, 2).unwrap();
        second.release_deferred();
        // q1 gets its own block back, ordered by the queue alone.
        let again = pool.acquire_on::<u32>(&q1, n).unwrap();
        q1.fill(&again, 3).unwrap();
        let after = ctx.hazard_stats();
        let second = pool.acquire_on::<u32>(&q2, n).unwrap();
        (
            second,
            again,
            fill2,
            after.wait_entries - before.wait_entries,
        )
    });
    assert_ne!(second.as_raw(), raw1, "q2 was handed q1's pending block");
    assert_eq!(again.as_raw(), raw1, "q1 did not get its own block back");
    assert_eq!(wait_entries, 0, "neither queue waits on the other's block");
    // q2's fill ran although q1's gate is still closed.
    fill2.wait().unwrap();
    assert!(!gated.is_terminal(), "the gate was open");
    gate.complete().unwrap();
    assert_eq!(contents(&q1, &again), vec![3; n]);
    assert_eq!(contents(&q2, &second), vec![2; n]);
    assert_eq!(ctx.memory_stats().driver_allocations, 2);
}

#[test]
fn acquire_on_at_max_bytes_orders_the_new_owner_after_another_queues_commands() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let n = 1024;
    let bytes = (n * size_of::<u32>()) as u64;
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(bytes)).unwrap();
    let gate = ctx.user_event().unwrap();
    let old = pool.acquire_on::<u32>(&q1, n).unwrap();
    let raw = old.as_raw();
    let old_write = q1
        .after(&[gate.event()])
        .write_owned(&old, vec![1; n])
        .unwrap();
    let (new, fill) = returns_while_gated(&gate, "acquire_on at the maximum", || {
        old.release_deferred();
        let new = pool.acquire_on::<u32>(&q2, n).unwrap();
        let fill = q2.fill(&new, 2).unwrap();
        (new, fill)
    });
    assert_eq!(new.as_raw(), raw, "at the maximum the only block is reused");
    assert!(
        !fill.is_terminal(),
        "the fill ran before the gated write it must follow"
    );
    gate.complete().unwrap();
    assert!(old_write.wait().is_ok());
    assert_eq!(contents(&q2, &new), vec![2; n]);
}

#[test]
fn acquire_on_reuses_any_idle_block_not_only_the_newest() {
    let ctx = device!();
    let (q1, q2, q3) = (
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
    );
    let n = 1024;
    for poison in [false, true] {
        let pool = Pool::new(&ctx, PoolOptions::default().poison(poison)).unwrap();
        let before = ctx.memory_stats().driver_allocations;
        let idle = pool.acquire_on::<u32>(&q1, n).unwrap();
        let busy = pool.acquire_on::<u32>(&q3, n).unwrap();
        let raw = idle.as_raw();
        // The older block ran on two queues and has ended: the blocking read saw to that,
        // and the waits make sure its commands' statuses say so (on rusticl, under load, a
        // status once still said pending after the read had returned).
        let fills = [q1.fill(&idle, 1).unwrap(), q2.fill(&idle, 2).unwrap()];
        assert_eq!(contents(&q2, &idle), vec![2; n]);
        for fill in fills {
            fill.wait().unwrap();
        }
        // The newer block waits behind a gate on a third queue.
        let gate = ctx.user_event().unwrap();
        let gated = q3.after(&[gate.event()]).fill(&busy, 3).unwrap();
        let again = returns_while_gated(&gate, "acquire_on", || {
            idle.release_deferred();
            busy.release_deferred();
            pool.acquire_on::<u32>(&q1, n).unwrap()
        });
        let allocated = ctx.memory_stats().driver_allocations - before;
        assert_eq!(
            (again.as_raw() == raw, allocated),
            (true, 2),
            "poison: {poison}: the idle older block was passed over for a new one"
        );
        assert!(!gated.is_terminal(), "poison: {poison}: the gate was open");
        let expected = if poison { POISON } else { 2 };
        assert_eq!(contents(&q1, &again), vec![expected; n], "poison: {poison}");
        gate.complete().unwrap();
        gated.wait().unwrap();
    }
}

/// Chunks a pipeline keeps in flight, the one being acquired for included: before it
/// acquires a block for chunk `i`, the host checks chunk `i - PIPELINE_DEPTH`'s read-back.
const PIPELINE_DEPTH: usize = 3;

/// Blocks a three-queue pipeline may allocate. At each `acquire_on` the host holds no
/// block, and at most `PIPELINE_DEPTH - 1` pooled blocks can still be in use: every older
/// chunk's read-back has completed, and with it the write and the kernel it waited for.
/// So once the pool holds `PIPELINE_DEPTH` blocks, one of them has ended, and the *stream-ordered reuse* rule
/// reuses it (it looks at eight): never a new block, whatever the device's timing.
const PIPELINE_BLOCKS: u64 = PIPELINE_DEPTH as u64;

/// Runs `chunks` chunks through three queues: the upload queue writes each into a block
/// from `acquire_on`, the compute queue increments it, the download queue reads it back;
/// the block goes back with `release_deferred` as soon as the read is enqueued. Every
/// chunk's values are checked. Returns the context's driver allocations.
fn three_queue_pipeline(options: PoolOptions, chunks: usize) -> Option<u64> {
    let ctx = common::context()?;
    let queue = || ctx.queue().expect("a queue");
    let (upload, compute, download) = (queue(), queue(), queue());
    let increment = common::busy(&ctx).kernel("increment").expect("increment");
    let pool = Pool::new(&ctx, options).expect("a pool");
    let n = 4096; // 16 KiB: exactly one size class
    let chunk = |c: usize| -> Vec<i32> { (0..n).map(|k| (c * 7919 + k) as i32).collect() };
    let check = |c: usize, read: PendingRead<i32>| {
        let got = read.wait().expect("chunk read back");
        let want: Vec<i32> = chunk(c).iter().map(|x| x + 1).collect();
        if let Some(k) = (0..n).find(|&k| got[k] != want[k]) {
            panic!(
                "chunk {c}, element {k}: read back {:#x}, expected {:#x}",
                got[k], want[k]
            );
        }
    };
    let mut in_flight = std::collections::VecDeque::new();
    for c in 0..chunks {
        if in_flight.len() == PIPELINE_DEPTH {
            let (old, read) = in_flight.pop_front().expect("a chunk in flight");
            check(old, read);
        }
        let buf = pool.acquire_on::<i32>(&upload, n).expect("acquire_on");
        upload.write_owned(&buf, chunk(c)).expect("upload");
        // SAFETY: increment touches buf[i] only where i < n, buf's length.
        unsafe {
            compute.launch(
                &increment,
                &[n],
                &[Arg::read_write(&buf), Arg::scalar(n as u32)],
            )
        }
        .expect("compute");
        let read = download.read_owned(&buf).expect("download");
        download.flush().expect("flush");
        buf.release_deferred();
        in_flight.push_back((c, read));
    }
    for (c, read) in in_flight {
        check(c, read);
    }
    let stats = ctx.memory_stats();
    eprintln!("{chunks} chunks on {}: {stats:?}", ctx.device());
    assert_eq!(stats.allocations, chunks as u64, "{stats:?}");
    Some(stats.driver_allocations)
}

#[test]
fn a_three_queue_pipeline_reuses_blocks_instead_of_growing() {
    let Some(allocated) = three_queue_pipeline(PoolOptions::default(), 1000) else {
        return;
    };
    assert!(
        allocated <= PIPELINE_BLOCKS,
        "1,000 chunks, at most {PIPELINE_DEPTH} in flight: {allocated} driver allocations \
         (at most {PIPELINE_BLOCKS} expected)"
    );
}

#[test]
fn a_three_queue_pipeline_with_poison_reuses_blocks_instead_of_growing() {
    let Some(allocated) = three_queue_pipeline(PoolOptions::default().poison(true), 1000) else {
        return;
    };
    assert!(
        allocated <= PIPELINE_BLOCKS,
        "1,000 chunks, at most {PIPELINE_DEPTH} in flight, poison on: {allocated} driver \
         allocations (at most {PIPELINE_BLOCKS} expected)"
    );
}

/// The bytes of device memory a context's ledger counts: live, pending release and pooled.
fn held(ms: &MemoryStats) -> u64 {
    ms.live_bytes + ms.pending_release_bytes + ms.pooled_bytes
}

#[test]
fn max_bytes_bounds_pending_releases_too() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let max = 1u64 << 20;
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(max)).unwrap();
    // Half the maximum goes back to the pool while its fill is gated.
    let gate = ctx.user_event().unwrap();
    let half = pool.acquire::<u8>(max as usize / 2).unwrap();
    let fill = queue.after(&[gate.event()]).fill(&half, 1).unwrap();
    queue.flush().unwrap();
    let watch = common::watch(&half, &[&fill]);
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(fill);
    assert!(half.release().unwrap().recycled);

    // The whole maximum fits only once that block is gone, and it cannot go while its
    // fill is gated: a typed error, at once, and nothing over the maximum.
    let refused = returns_while_gated(&gate, "an acquire behind a pending release", || {
        pool.acquire::<u8>(max as usize)
    });
    let ms = ctx.memory_stats();
    match refused {
        Err(Error::PoolExhausted {
            requested, max: m, ..
        }) => {
            assert_eq!((requested, m), (max, max))
        }
        Ok(buf) => panic!(
            "handed out {} bytes while {} more were pending release: {} held under a \
             maximum of {max} ({ms:?})",
            buf.block_bytes(),
            ms.pending_release_bytes,
            held(&ms)
        ),
        Err(e) => panic!("expected PoolExhausted, got {e}"),
    }
    assert!(held(&ms) <= max, "{ms:?}");
    assert_eq!(ms.driver_allocations, 1, "{ms:?}");
    assert!(!watch.fired(), "freed while its fill was gated");

    // Once the gate is open, the acquire waits for the pending release, then allocates.
    gate.complete().unwrap();
    let whole = pool.acquire::<u8>(max as usize).unwrap();
    watch.assert_released_after_events();
    let ms = ctx.memory_stats();
    assert_eq!(
        (ms.live_bytes, ms.pending_release_bytes, ms.pooled_bytes),
        (max, 0, 0),
        "{ms:?}"
    );
    assert!(ms.peak_bytes <= max, "{ms:?}");
    queue.fill(&whole, 2).unwrap();
    assert!(contents(&queue, &whole).iter().all(|&x| x == 2));
}

/// The device memory of the blocks a test has been handed, by the cl-sys oracle: each
/// block is watched from its first hand-out until the driver frees it.
#[derive(Default)]
struct Footprint {
    blocks: std::sync::Mutex<Vec<(usize, u64, common::Watch)>>,
}

impl Footprint {
    /// Notes `buf` as handed out; returns the bytes of every noted block not freed yet.
    fn note<T: Pod>(&self, buf: &ClBuffer<T>) -> u64 {
        let mut blocks = self.blocks.lock().expect("footprint lock");
        // A freed block's callbacks run before the driver can reuse its handle.
        blocks.retain(|(_, _, watch)| !watch.fired());
        let raw = buf.as_raw() as usize;
        if !blocks.iter().any(|&(r, _, _)| r == raw) {
            blocks.push((raw, buf.block_bytes() as u64, common::watch(buf, &[])));
        }
        blocks.iter().map(|&(_, bytes, _)| bytes).sum()
    }
}

#[test]
fn max_bytes_bounds_pending_releases_when_threads_acquire_at_once() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let mib = 1usize << 20;
    let max = 8 * mib as u64;
    let (threads, rounds) = (4, 200);
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(max)).unwrap();
    let footprint = Footprint::default();
    let barrier = std::sync::Barrier::new(threads);
    let most = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (pool, footprint, barrier, ctx) = (&pool, &footprint, &barrier, &ctx);
                s.spawn(move || {
                    let queue = ctx.queue().unwrap();
                    barrier.wait();
                    let mut most = 0;
                    for round in 0..rounds {
                        // Four threads of at most 2 MiB each always fit under 8 MiB, so
                        // no acquire may fail; alternating classes make the pool trim.
                        let bytes = if (t + round) % 2 == 0 { mib } else { 2 * mib };
                        let buf = match pool.acquire_on::<u8>(&queue, bytes) {
                            Ok(buf) => buf,
                            Err(e) => panic!("thread {t}, round {round}: {e}"),
                        };
                        most = most.max(footprint.note(&buf));
                        queue.fill(&buf, round as u8).unwrap();
                        queue.flush().unwrap();
                        buf.release_deferred();
                    }
                    most
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or(0)
    });
    eprintln!(
        "at most {most} bytes not freed under {max}: {:?}",
        ctx.memory_stats()
    );
    assert!(
        most <= max,
        "{most} bytes of device memory not freed under a maximum of {max} \
         ({:.1} MiB); {:?}",
        most as f64 / mib as f64,
        ctx.memory_stats()
    );
    assert_eq!(pool.stats().in_use_bytes, 0);
}

#[test]
fn acquire_on_a_queue_of_another_context_is_a_context_mismatch() {
    let ctx = device!();
    let Some(other) = common::context() else {
        return;
    };
    let (queue, foreign) = (ctx.queue().unwrap(), other.queue().unwrap());
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let n = 1024;
    let pooled = pool.acquire_on::<u32>(&queue, n).unwrap();
    let raw = pooled.as_raw();
    assert!(pooled.release().unwrap().recycled);
    let (stats, ours, theirs) = (pool.stats(), ctx.memory_stats(), other.memory_stats());

    match pool.acquire_on::<u32>(&foreign, n) {
        Err(Error::ContextMismatch { .. }) => {}
        Ok(buf) => panic!(
            "handed out a block of this pool's context ({:?}) for a queue of another",
            buf.as_raw()
        ),
        Err(e) => panic!("expected ContextMismatch, got {e}"),
    }
    // Nothing was lost: the pooled block is still there, and nothing was allocated.
    assert_eq!(pool.stats(), stats);
    assert_eq!(ctx.memory_stats(), ours);
    assert_eq!(other.memory_stats(), theirs);
    let again = pool.acquire_on::<u32>(&queue, n).unwrap();
    assert_eq!(again.as_raw(), raw);
    queue.fill(&again, 4).unwrap();
    assert_eq!(contents(&queue, &again), vec![4; n]);
}

/// Waits for `event` on a helper thread for up to [`HANG`]; `None` when it did not end.
fn wait_bounded(event: &Event) -> Option<cl_lifetime::Result<()>> {
    let (tx, rx) = mpsc::channel();
    let event = event.clone();
    thread::spawn(move || {
        let _ = tx.send(event.wait());
    });
    rx.recv_timeout(HANG).ok()
}

#[test]
fn a_recycled_block_does_not_pass_the_old_owners_failure_on() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    eprintln!("device: {}", ctx.device());
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let n = 256;
    for same_queue in [true, false] {
        // Fresh queues each round: some drivers refuse further work on a queue that ran a
        // failed command.
        let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        let old = pool.acquire::<u32>(n).unwrap();
        let gate = ctx.user_event().unwrap();
        let failing = q1.after(&[gate.event()]).fill(&old, 1).unwrap();
        gate.fail(-42).unwrap();
        assert!(failing.wait().is_err(), "the gated fill did not fail");
        assert!(old.release().unwrap().recycled);

        // The old owner's command has ended: it needs no ordering, and its failure is
        // not the new owner's.
        let new = pool.acquire::<u32>(n).unwrap();
        let q = if same_queue { &q1 } else { &q2 };
        let fill = match q.fill(&new, 7) {
            Ok(fill) => fill,
            Err(e) => panic!(
                "same queue: {same_queue}: the new owner's first command was refused ({e}): \
                 its wait list held the old owner's failed command"
            ),
        };
        match wait_bounded(&fill) {
            Some(ended) => assert!(
                ended.is_ok(),
                "same queue: {same_queue}: the new owner's first command failed: {ended:?}"
            ),
            None => {
                let status = fill.status();
                // Everything that would wait for the stuck command is leaked, so that the
                // failure is reported instead of hanging in a destructor.
                std::mem::forget((new, fill, failing));
                std::mem::forget((pool, q1, q2, ctx));
                panic!(
                    "same queue: {same_queue}: the new owner's first command never ran \
                     ({status:?} after {HANG:?}): the recycled block's record still held \
                     the old owner's failed command, and the new owner's command waited on it"
                );
            }
        }
        assert_eq!(contents(q, &new), vec![7; n]);
        let report = new.release().unwrap();
        assert!(report.failed.is_empty(), "{report:?}");
    }
}

/// The *clean hand-over* rule, for a failure that comes after the hand-over: a pooled
/// block whose old owner's fill waits on an open gate goes to a new owner on another
/// queue (taken with no queue given, or with one at the pool's maximum), and only then is
/// the gate failed. The new owner's fill runs after the old owner's, and neither fails
/// with it nor reads what it would have written. Before the rule's gate, the new owner's
/// fill waited on the old owner's and failed with it (PoCL 3.1: status -1), and on an
/// in-order queue every command enqueued behind it failed too: the randomized async test
/// saw ten to seventeen tasks of one queue get `DependencyFailed` for commands that had
/// no failed gate.
#[test]
fn a_gate_failed_after_a_hand_over_never_fails_the_new_owners_commands() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let n = 1024;
    let bytes = (n * size_of::<u32>()) as u64;
    for at_max in [false, true] {
        // Fresh queues each round: some drivers refuse further work on a queue that ran a
        // failed command.
        let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        let options = if at_max {
            PoolOptions::default().max_bytes(bytes)
        } else {
            PoolOptions::default()
        };
        let pool = Pool::new(&ctx, options).unwrap();
        let gate = ctx.user_event().unwrap();
        let old = pool.acquire::<u32>(n).unwrap();
        let raw = old.as_raw();
        let old_fill = q1.after(&[gate.event()]).fill(&old, 1).unwrap();
        let (new, fill) = returns_while_gated(&gate, "a hand-over behind a gate", || {
            assert!(old.release().unwrap().recycled);
            let new = if at_max {
                pool.acquire_on::<u32>(&q2, n).unwrap()
            } else {
                pool.acquire::<u32>(n).unwrap()
            };
            let fill = q2.fill(&new, 7).unwrap();
            (new, fill)
        });
        assert_eq!(
            new.as_raw(),
            raw,
            "at max {at_max}: the pooled block was not reused"
        );
        assert!(
            !fill.is_terminal(),
            "at max {at_max}: the new owner's fill ran before the old owner's gated fill"
        );
        gate.fail(-9).unwrap();
        assert!(
            old_fill.wait().is_err(),
            "at max {at_max}: the old fill did not fail"
        );
        match wait_bounded(&fill) {
            Some(ended) => assert!(
                ended.is_ok(),
                "at max {at_max}: the new owner's fill failed with the old owner's gate: {ended:?}"
            ),
            None => panic!(
                "at max {at_max}: the new owner's fill never ran ({:?})",
                fill.status()
            ),
        }
        assert_eq!(
            common::raw_status(fill.as_raw() as _),
            0,
            "at max {at_max}: the driver's status of the new owner's fill"
        );
        assert_eq!(contents(&q2, &new), vec![7; n], "at max {at_max}");
        let report = new.release().unwrap();
        assert!(report.failed.is_empty(), "at max {at_max}: {report:?}");
    }
}

// The *clean hand-over* rule's gates, chained: the second stands for the first and for the
// first new owner's fill, and both old owners' queues are gone. Each gate lets go of the
// commands it saw end after its own lock, and opening one kicks the waiter for the
// commands behind it. Before that, a gate that held the last reference to a command, and
// so to its queue, let it go under its lock, the queue's drop took a lock ranked before
// it, the rank check panicked on the waiter's thread in a debug build, and the gate never
// opened: `max_bytes_bounds_pending_releases_when_threads_acquire_at_once` hung on
// Intel's runtime (CI's `intel` row). This test did not meet that order of drops; it
// checks that a chain through dropped queues opens.
#[test]
fn a_chain_of_hand_over_gates_through_dropped_queues_opens_when_the_first_command_ends() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let n = 1024;
    // At its maximum, the pool must hand the pending block over.
    let bytes = (n * size_of::<u32>()) as u64;
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(bytes)).unwrap();
    let q2 = ctx.queue().unwrap();
    let gate = ctx.user_event().unwrap();
    let (raw, new, fill) = {
        // Two hand-overs, each to a queue that is then dropped: the second gate stands
        // for the first gate and the first new owner's fill.
        let (q0, q1) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        let old = pool.acquire::<u32>(n).unwrap();
        let raw = old.as_raw();
        // The events are dropped here: the deferred releases, the old owners' records
        // and the hand-over gates hold the rest.
        drop(q0.after(&[gate.event()]).fill(&old, 1).unwrap());
        q0.flush().unwrap();
        old.release_deferred();
        let middle = pool.acquire_on::<u32>(&q1, n).unwrap();
        drop(q1.fill(&middle, 2).unwrap());
        q1.flush().unwrap();
        middle.release_deferred();
        let new = pool.acquire_on::<u32>(&q2, n).unwrap();
        let fill = q2.fill(&new, 7).unwrap();
        (raw, new, fill)
        // `q0` and `q1` are dropped here, with their fills still behind the gate.
    };
    assert_eq!(new.as_raw(), raw, "the pooled block was not reused");
    assert!(
        !fill.is_terminal(),
        "the new owner's fill ran before the old owner's gated fill"
    );
    gate.complete().unwrap();
    match wait_bounded(&fill) {
        Some(ended) => assert!(ended.is_ok(), "the new owner's fill failed: {ended:?}"),
        None => panic!(
            "the new owner's fill never ran: the hand-over gate stayed closed ({:?})",
            fill.status()
        ),
    }
    assert_eq!(contents(&q2, &new), vec![7; n]);
    assert!(new.release().unwrap().failed.is_empty());
}

// The *doomed command* and *clean hand-over* rules: a command one of whose gates failed,
// while another is still closed, may still be pending in the driver (rusticl fails it a
// moment later, NVIDIA once every gate is set, and may run it). The block's next owner
// neither waits on it nor inherits its failure. It failed on rusticl and NVIDIA before
// those rules: the new owner's fill waited on the old owner's command.
isolated_test! {
    fn a_recycled_block_does_not_pass_on_a_failure_the_driver_has_not_reported_yet() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
        let queue = ctx.queue().unwrap();
        let n = 256;
        let old = pool.acquire::<u32>(n).unwrap();
        let (failing, closed) = (ctx.user_event().unwrap(), ctx.user_event().unwrap());
        let doomed = queue
            .after(&[failing.event(), closed.event()])
            .fill(&old, 1)
            .unwrap();
        failing.fail(-42).unwrap();
        // Pending or failed, as the driver says (PoCL fails it at once, rusticl a moment
        // later, NVIDIA may run it): the pool passes the block over either way (the
        // *clean hand-over* rule).
        assert!(old.release().unwrap().recycled);

        let new = pool.acquire::<u32>(n).unwrap();
        let other = ctx.queue().unwrap();
        let fill = other.fill(&new, 7).expect("the new owner's fill is not refused");
        let ended = wait_bounded(&fill);
        // Only now: the new owner must not have needed it.
        closed.complete().unwrap();
        match ended {
            Some(result) => assert!(result.is_ok(), "the new owner's fill failed: {result:?}"),
            None => panic!("the new owner's fill waited on the old owner's doomed command"),
        }
        assert_eq!(contents(&other, &new), vec![7; n]);
        assert!(new.release().unwrap().failed.is_empty());
        assert!(doomed.wait().is_err(), "the old owner's command failed");
    }
}

#[test]
fn threshold_and_trim_bound_the_footprint() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let class = 4096u64;
    // Three blocks fit, a fourth would not: half a block is left over.
    let threshold = 3 * class + class / 2;
    let pool = Pool::new(&ctx, PoolOptions::default().release_threshold(threshold)).unwrap();
    let gate = ctx.user_event().unwrap();
    let blocks: Vec<ClBuffer<u32>> = (0..6).map(|_| pool.acquire::<u32>(1024).unwrap()).collect();
    let mut watches = Vec::new();
    for b in &blocks {
        assert_eq!(b.block_bytes() as u64, class);
        let fill = queue.after(&[gate.event()]).fill(b, 1).unwrap();
        watches.push(common::watch(b, &[&fill]));
    }
    assert_eq!(pool.stats().in_use_bytes, 6 * class);

    returns_while_gated(&gate, "releasing to the pool and trimming", || {
        for (i, b) in blocks.into_iter().enumerate() {
            b.release().unwrap();
            let ps = pool.stats();
            let ms = ctx.memory_stats();
            assert!(ps.pooled_bytes <= threshold, "{ps:?}");
            assert_eq!(ps.pooled_bytes, (i as u64 + 1).min(3) * class, "{ps:?}");
            assert_eq!(ms.pooled_bytes, ps.pooled_bytes, "{ms:?}");
            assert_eq!(ps.in_use_bytes, (5 - i as u64) * class, "{ps:?}");
            // Blocks past the threshold leave through deferred releases, still gated.
            assert_eq!(
                ms.pending_release_bytes,
                (i as u64 + 1).saturating_sub(3) * class,
                "{ms:?}"
            );
            assert_eq!(ms.live_bytes, (5 - i as u64) * class, "{ms:?}");
        }
        assert_eq!(pool.stats().pooled_blocks, 3);

        // Down to a size: largest first, at most `to` bytes kept.
        let released = pool.trim(2 * class);
        assert_eq!(released, class);
        assert_eq!(pool.stats().pooled_bytes, 2 * class);
        assert_eq!(ctx.memory_stats().pooled_bytes, 2 * class);

        let released = pool.trim(0);
        assert_eq!(released, 2 * class);
        assert_eq!(
            pool.stats(),
            PoolStats {
                in_use_bytes: 0,
                pooled_bytes: 0,
                pooled_blocks: 0
            }
        );
        let ms = ctx.memory_stats();
        assert_eq!(ms.pooled_bytes, 0, "{ms:?}");
        assert_eq!(ms.pending_release_bytes, 6 * class, "{ms:?}");
    });
    for w in &watches {
        assert!(
            !w.fired(),
            "a pooled block was freed while its fill was gated"
        );
    }
    gate.complete().unwrap();
    ctx.wait_deferred();
    let ms = ctx.memory_stats();
    assert_eq!(
        (ms.live_bytes, ms.pending_release_bytes, ms.pooled_bytes),
        (0, 0, 0),
        "{ms:?}"
    );
    for w in &watches {
        w.assert_released_after_events();
    }
    // Mixed classes: trim releases the largest first.
    let small = pool.acquire::<u8>(256).unwrap();
    let large = pool.acquire::<u8>(2048).unwrap();
    small.release().unwrap();
    large.release().unwrap();
    assert_eq!(pool.stats().pooled_bytes, 256 + 2048);
    assert_eq!(pool.trim(1000), 2048);
    assert_eq!(pool.stats().pooled_bytes, 256);

    // A block that comes back after the pool was dropped is released, not kept, even
    // while another block of the pool is still out.
    let late = pool.acquire::<u32>(1024).unwrap();
    let other = pool.acquire::<u32>(1024).unwrap();
    let watch = common::watch(&late, &[]);
    drop(pool);
    late.release().unwrap();
    ctx.wait_deferred();
    watch.assert_released_after_events();
    let ms = ctx.memory_stats();
    assert_eq!((ms.live_bytes, ms.pooled_bytes), (class, 0), "{ms:?}");
    drop(other);
    ctx.wait_deferred();
    let ms = ctx.memory_stats();
    assert_eq!(
        (ms.live_bytes, ms.pending_release_bytes, ms.pooled_bytes),
        (0, 0, 0),
        "{ms:?}"
    );
}

#[test]
fn max_bytes_makes_allocation_fail_with_a_typed_error_after_trimming() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let max = 4096u64;
    let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(max)).unwrap();
    let mut held: Vec<ClBuffer<u8>> = (0..4).map(|_| pool.acquire::<u8>(1024).unwrap()).collect();
    match pool.acquire::<u8>(1024) {
        Err(Error::PoolExhausted {
            requested,
            max: m,
            in_use,
        }) => assert_eq!((requested, m, in_use), (1024, max, max)),
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    // A smaller class does not fit either.
    assert!(matches!(
        pool.acquire::<u8>(1),
        Err(Error::PoolExhausted { requested: 256, .. })
    ));

    // Two blocks back to the pool, with gated commands: 2048 in use, 2048 pooled.
    let gate = ctx.user_event().unwrap();
    let mut watches = Vec::new();
    for b in held.drain(2..) {
        let fill = queue.after(&[gate.event()]).fill(&b, 9).unwrap();
        watches.push(common::watch(&b, &[&fill]));
        assert!(b.release().unwrap().recycled);
    }
    assert_eq!(
        pool.stats(),
        PoolStats {
            in_use_bytes: 2048,
            pooled_bytes: 2048,
            pooled_blocks: 2
        }
    );
    // Another class: the pooled blocks are trimmed to make room, without waiting. Their
    // releases are behind the gate, and the maximum counts them until they are done: no
    // room yet, and no waiting behind a gate, so a typed error.
    let refused = returns_while_gated(&gate, "an acquire that trims", || pool.acquire::<u8>(2048));
    match refused {
        Err(Error::PoolExhausted {
            requested,
            max: m,
            in_use,
        }) => assert_eq!((requested, m, in_use), (2048, max, 2048)),
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    assert_eq!(
        pool.stats(),
        PoolStats {
            in_use_bytes: 2048,
            pooled_bytes: 0,
            pooled_blocks: 0
        }
    );
    let ms = ctx.memory_stats();
    assert_eq!(ms.pending_release_bytes, 2048, "{ms:?}");
    assert_eq!(ms.pooled_bytes, 0, "{ms:?}");
    for w in &watches {
        assert!(!w.fired());
    }
    // With the gate open, the acquire waits for those releases, then allocates.
    gate.complete().unwrap();
    let big = pool.acquire::<u8>(2048).unwrap();
    assert_eq!(big.bytes(), 2048);
    for w in &watches {
        w.assert_released_after_events();
    }
    assert_eq!(
        pool.stats(),
        PoolStats {
            in_use_bytes: 4096,
            pooled_bytes: 0,
            pooled_blocks: 0
        }
    );
    let ms = ctx.memory_stats();
    assert_eq!(ms.pending_release_bytes, 0, "{ms:?}");
    assert!(ms.peak_bytes <= max, "{ms:?}");
    assert!(matches!(
        pool.acquire::<u8>(1024),
        Err(Error::PoolExhausted { in_use: 4096, .. })
    ));

    // Pooled blocks that are not enough: trimmed, and still a typed error.
    held.pop().unwrap().release().unwrap(); // 1024 pooled, 3072 in use
    match pool.acquire::<u8>(2048) {
        Err(Error::PoolExhausted {
            requested,
            max: m,
            in_use,
        }) => assert_eq!((requested, m, in_use), (2048, max, 3072)),
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    // The new block works.
    queue.write(&big, &[3u8; 2048]).unwrap();
    assert_eq!(contents(&queue, &big), vec![3u8; 2048]);
}

#[test]
fn max_bytes_holds_when_threads_acquire_at_once() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let class = 1024usize;
    let max = 4 * class as u64;
    let threads = 8;
    for round in 0..100 {
        let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(max)).unwrap();
        let barrier = std::sync::Barrier::new(threads);
        let got: Vec<Option<ClBuffer<u8>>> = thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        match pool.acquire::<u8>(class) {
                            Ok(buf) => Some(buf),
                            Err(Error::PoolExhausted { .. }) => None,
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let held = got.iter().flatten().count();
        assert!(
            held as u64 * class as u64 <= max,
            "round {round}: {held} blocks of {class} bytes handed out under max_bytes {max}; \
             pool stats {:?}",
            pool.stats()
        );
        assert_eq!(held, 4, "round {round}: the pool refused room it had");
    }
}

#[test]
fn force_residency_allocates_and_works() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let pool = Pool::new(&ctx, PoolOptions::default().force_residency(true)).unwrap();
    for len in [1usize, 1000, 65_536] {
        let buf = pool.acquire::<u32>(len).unwrap();
        assert!(buf.bytes() >= len * 4);
        let data = ramp(len, 7);
        queue.write(&buf, &data).unwrap();
        assert_eq!(contents(&queue, &buf), data);
        assert!(buf.release().unwrap().recycled);
    }
    let again = pool.acquire::<u32>(1000).unwrap();
    queue.fill(&again, 5).unwrap();
    assert_eq!(contents(&queue, &again), vec![5; 1000]);
    let stats = ctx.memory_stats();
    assert_eq!(
        (stats.driver_allocations, stats.reuses),
        (3, 1),
        "{stats:?}"
    );
}

#[test]
fn poison_fills_recycled_blocks() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let pool = Pool::new(&ctx, PoolOptions::default().poison(true)).unwrap();
    let n = 1000;
    let buf = pool.acquire::<u32>(n).unwrap();
    queue.write(&buf, &ramp(n, 1)).unwrap();
    let raw = buf.as_raw();
    assert!(buf.release().unwrap().recycled);
    let again = pool.acquire::<u32>(n).unwrap();
    assert_eq!(again.as_raw(), raw);
    let got = contents(&queue, &again);
    assert!(
        got.iter().all(|&x| x == POISON),
        "stale data in a recycled block: {:#x}",
        got[0]
    );

    // The poison is ordered after the old owner's gated write: it never lands first.
    let gate = ctx.user_event().unwrap();
    let old_write = queue
        .after(&[gate.event()])
        .write_owned(&again, ramp(n, 9))
        .unwrap();
    let read = returns_while_gated(&gate, "recycle with poison and reuse", || {
        assert!(again.release().unwrap().recycled);
        let third = pool.acquire::<u32>(n).unwrap();
        let read = queue.read_owned(&third).unwrap();
        (third, read)
    });
    assert!(!old_write.is_terminal() && !read.1.event().is_terminal());
    gate.complete().unwrap();
    let (third, read) = read;
    let got = read.wait().unwrap();
    assert!(
        got.iter().all(|&x| x == POISON),
        "the old owner's write landed after the poison: {:#x}",
        got[0]
    );
    // The block's whole class is poisoned, past the length asked for.
    drop(third);
    let wide = pool.acquire::<u32>(1024).unwrap();
    assert_eq!(wide.as_raw(), raw);
    assert!(contents(&queue, &wide).iter().all(|&x| x == POISON));
}

#[test]
fn resize_keeps_contents_and_orders_after_pending_writes() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let n = 1000;
    let data = ramp(n, 11);
    let mut buf = ctx.buffer::<u32>(n).unwrap();
    let gate = ctx.user_event().unwrap();
    let write = q1
        .after(&[gate.event()])
        .write_owned(&buf, data.clone())
        .unwrap();
    let old_raw = buf.as_raw();
    let watch_old = common::watch(&buf, &[&write]);

    returns_while_gated(&gate, "growing resize", || buf.resize(&q2, 3 * n).unwrap());
    assert_eq!(buf.len(), 3 * n);
    assert_ne!(buf.as_raw(), old_raw);
    let ms = ctx.memory_stats();
    assert_eq!(ms.live_bytes, (3 * n * 4) as u64, "{ms:?}");
    assert_eq!(ms.pending_release_bytes, (n * 4) as u64, "{ms:?}");
    assert!(!write.is_terminal());
    assert!(
        !watch_old.fired(),
        "old block freed while its write was gated"
    );
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(write);

    gate.complete().unwrap();
    let grown = contents(&q2, &buf);
    assert_eq!(
        &grown[..n],
        &data[..],
        "contents lost by the growing resize"
    );
    ctx.wait_deferred();
    watch_old.assert_released_after_events();
    assert_eq!(ctx.memory_stats().pending_release_bytes, 0);

    // Shrinking, behind another gated write on the other queue.
    let gate = ctx.user_event().unwrap();
    let second = ramp(3 * n, 13);
    let write = q2
        .after(&[gate.event()])
        .write_owned(&buf, second.clone())
        .unwrap();
    let watch_old = common::watch(&buf, &[&write]);
    drop(write);
    returns_while_gated(&gate, "shrinking resize", || {
        buf.resize(&q1, n / 2).unwrap()
    });
    assert_eq!(buf.len(), n / 2);
    assert!(!watch_old.fired());
    gate.complete().unwrap();
    assert_eq!(contents(&q1, &buf), second[..n / 2]);
    ctx.wait_deferred();
    watch_old.assert_released_after_events();
    let ms = ctx.memory_stats();
    assert_eq!(ms.pending_release_bytes, 0, "{ms:?}");
    assert_eq!(ms.live_bytes, (n / 2 * 4) as u64, "{ms:?}");
    buf.release().unwrap();
    assert_eq!(ctx.memory_stats().live_bytes, 0);
}

#[test]
fn arena_carves_aligned_non_overlapping_sub_buffers() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let align = common::sub_buffer_align(&ctx);
    let capacity = 16 * align + 4096;
    let mut arena = Arena::new(&ctx, capacity).unwrap();
    assert_eq!(arena.capacity(), capacity);
    assert_eq!(ctx.memory_stats().live_bytes, capacity as u64);

    let a = arena.carve::<u32>(100).unwrap();
    let b = arena.carve::<u8>(3).unwrap();
    let c = arena.carve::<u32>(17).unwrap();
    let d = arena.carve::<u16>(align).unwrap();
    let mut ranges: Vec<(usize, usize)> = [
        (mem_offset(&a), a.bytes()),
        (mem_offset(&b), b.bytes()),
        (mem_offset(&c), c.bytes()),
        (mem_offset(&d), d.bytes()),
    ]
    .into_iter()
    .map(|(o, len)| (o, o + len))
    .collect();
    for &(start, end) in &ranges {
        assert_eq!(start % align, 0, "origin {start} not aligned to {align}");
        assert!(end <= capacity);
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "carved ranges overlap: {ranges:?}");
    }
    assert!(arena.used() >= ranges.last().unwrap().1);

    // Data written to each stays separate.
    queue.write(&a, &ramp(100, 1)).unwrap();
    queue.fill(&b, 0xB0u8).unwrap();
    queue.write(&c, &ramp(17, 1000)).unwrap();
    queue.fill(&d, 0xD0D0u16).unwrap();
    assert_eq!(contents(&queue, &a), ramp(100, 1));
    assert_eq!(contents(&queue, &b), vec![0xB0u8; 3]);
    assert_eq!(contents(&queue, &c), ramp(17, 1000));
    assert_eq!(contents(&queue, &d), vec![0xD0D0u16; align]);

    match arena.carve::<u8>(capacity) {
        Err(Error::ArenaFull {
            requested,
            available,
        }) => {
            assert_eq!(requested, capacity as u64);
            assert!(available < capacity as u64);
        }
        other => panic!("expected ArenaFull, got {other:?}"),
    }
    match arena.reset() {
        Err(Error::ArenaBusy { live }) => assert_eq!(live, 4),
        other => panic!("expected ArenaBusy, got {other:?}"),
    }
    let watch = common::watch(&a, &[]);
    drop((a, b, c));
    // Released carves wait on the arena's shelf, released with it (the *shelved, never
    // released* rule).
    assert_eq!(arena.kept_sub_buffers(), 3);
    assert!(!watch.fired());
    assert!(matches!(arena.reset(), Err(Error::ArenaBusy { live: 1 })));
    drop(d);
    arena.reset().unwrap();
    assert_eq!(arena.used(), 0);

    // After the reset the whole arena is free again, from origin 0.
    let whole = arena.carve::<u8>(capacity).unwrap();
    assert_eq!(mem_offset(&whole), 0);
    queue.fill(&whole, 1u8).unwrap();
    assert_eq!(contents(&queue, &whole), vec![1u8; capacity]);
    assert!(matches!(arena.carve::<u8>(1), Err(Error::ArenaFull { .. })));
    drop(whole);
    drop(arena);
    watch.assert_released_after_events();
    assert_eq!(ctx.memory_stats().live_bytes, 0);
}

/// A carve is zeroed before its first read, as a new buffer is: after a reset, a new
/// carve over the range of an earlier one does not read that one's bytes.
#[test]
fn a_carve_after_a_reset_reads_zeros_not_the_previous_carves_bytes() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let n = 1024;
    let mut arena = Arena::new(&ctx, n * 4).unwrap();
    let old = arena.carve::<u32>(n).unwrap();
    queue.write(&old, &common::pattern(n, 11)).unwrap();
    old.release().unwrap();
    arena.reset().unwrap();
    let new = arena.carve::<u32>(n).unwrap();
    let got = contents(&queue, &new);
    let stale = got.iter().filter(|&&x| x != 0).count();
    assert_eq!(
        stale, 0,
        "a carve after a reset read {stale} of {n} words that are not zero"
    );
    // After a partial write as its first command, the rest of it is zeros too.
    queue.write(&new, &common::pattern(n, 12)).unwrap();
    new.release().unwrap();
    arena.reset().unwrap();
    let new = arena.carve::<u32>(n).unwrap();
    queue.write_at(&new, 8, &[5; 8]).unwrap();
    let mut want = vec![0; n];
    want[8..16].fill(5);
    assert_eq!(contents(&queue, &new), want);
}

#[test]
fn arena_reset_is_refused_while_a_deferred_release_of_a_sub_buffer_is_pending() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (queue, other) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let n = 1024;
    let mut arena = Arena::new(&ctx, n * 4).unwrap();
    let old = arena.carve::<u32>(n).unwrap();
    let gate = ctx.user_event().unwrap();
    let (a, b) = (0xAAAA_AAAAu32, 0xBBBB_BBBBu32);
    let fill = queue.after(&[gate.event()]).fill(&old, a).unwrap();
    let watch = common::watch(&old, &[&fill]);
    // The record keeps the fill; the test's handle would keep the memory on rusticl
    // (design trap "rusticl's events keep their buffers").
    drop(fill);
    returns_while_gated(&gate, "release_deferred of a sub-buffer", || {
        old.release_deferred()
    });
    assert!(!watch.fired());

    // The sub-buffer is alive until the reaper frees it, and its gated fill still writes
    // the range: the range may not be carved again.
    let reset = arena.reset();
    if reset.is_ok() {
        let new = arena.carve::<u32>(n).unwrap();
        other.fill(&new, b).unwrap();
        gate.complete().unwrap();
        let got = contents(&other, &new);
        panic!(
            "reset succeeded while a deferred release of a sub-buffer with a gated fill was \
             pending; a new carve over the same range then read {:#x} (old owner's fill \
             {a:#x}, new owner's fill {b:#x})",
            got[0]
        );
    }
    assert!(
        matches!(reset, Err(Error::ArenaBusy { live: 1 })),
        "{reset:?}"
    );
    gate.complete().unwrap();
    ctx.wait_deferred();
    // On the arena's shelf now, after its fill ended; released with the arena.
    assert_eq!(arena.kept_sub_buffers(), 1);
    arena.reset().unwrap();
    let new = arena.carve::<u32>(n).unwrap();
    other.fill(&new, b).unwrap();
    assert_eq!(contents(&other, &new), vec![b; n]);
    drop((new, arena));
    watch.assert_released_after_events();
}

#[test]
fn deferred_release_of_a_sub_buffer_does_not_count_its_bytes_twice() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let capacity = 64 * 1024;
    let arena = Arena::new(&ctx, capacity).unwrap();
    let sub = arena.carve::<u8>(capacity / 2).unwrap();
    let gate = ctx.user_event().unwrap();
    queue.after(&[gate.event()]).fill(&sub, 1u8).unwrap();
    returns_while_gated(&gate, "release_deferred of a sub-buffer", || {
        sub.release_deferred()
    });
    // The sub-buffer is a view of the arena's memory: the ledger never holds more bytes
    // than were allocated.
    let ms = ctx.memory_stats();
    gate.complete().unwrap();
    ctx.wait_deferred();
    let total = ms.live_bytes + ms.pending_release_bytes + ms.pooled_bytes;
    assert_eq!(ms.live_bytes, capacity as u64, "{ms:?}");
    assert!(
        total <= capacity as u64,
        "{total} bytes accounted for, {capacity} allocated: {ms:?}"
    );
    assert_eq!(ctx.memory_stats().peak_bytes, capacity as u64);
    drop(arena);
    assert_eq!(ctx.memory_stats().live_bytes, 0);
}

#[test]
fn accounting_tracks_live_pooled_pending_and_peak() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let stats = |live, pending, pooled, peak, allocations, reuses, driver| MemoryStats {
        live_bytes: live,
        pending_release_bytes: pending,
        pooled_bytes: pooled,
        peak_bytes: peak,
        allocations,
        reuses,
        reclaimed: 0,
        driver_allocations: driver,
    };
    assert_eq!(ctx.memory_stats(), MemoryStats::default());

    let a = ctx.buffer::<u8>(1000).unwrap();
    assert_eq!(ctx.memory_stats(), stats(1000, 0, 0, 1000, 1, 0, 1));
    let p = pool.acquire::<u32>(100).unwrap(); // 400 bytes: the 512-byte class
    assert_eq!(p.block_bytes(), 512);
    assert_eq!(ctx.memory_stats(), stats(1512, 0, 0, 1512, 2, 0, 2));
    assert!(p.release().unwrap().recycled);
    assert_eq!(ctx.memory_stats(), stats(1000, 0, 512, 1512, 2, 0, 2));
    let p2 = pool.acquire::<u8>(257).unwrap(); // the same class: reused
    assert_eq!(ctx.memory_stats(), stats(1512, 0, 0, 1512, 3, 1, 2));
    let p3 = pool.acquire::<u8>(1).unwrap(); // the 256-byte class: new
    assert_eq!(p3.block_bytes(), 256);
    assert_eq!(ctx.memory_stats(), stats(1768, 0, 0, 1768, 4, 1, 3));

    let gate = ctx.user_event().unwrap();
    queue.after(&[gate.event()]).fill(&a, 1u8).unwrap();
    queue.after(&[gate.event()]).fill(&p2, 2u8).unwrap();
    queue.after(&[gate.event()]).fill(&p3, 3u8).unwrap();
    let mut b = returns_while_gated(&gate, "the accounting sequence", || {
        a.release_deferred();
        assert_eq!(ctx.memory_stats(), stats(768, 1000, 0, 1768, 4, 1, 3));
        let b = ctx.buffer::<u8>(2000).unwrap();
        assert_eq!(ctx.memory_stats(), stats(2768, 1000, 0, 3768, 5, 1, 4));
        drop(p2); // back to the pool
        drop(p3);
        assert_eq!(ctx.memory_stats(), stats(2000, 1000, 768, 3768, 5, 1, 4));
        assert_eq!(pool.trim(0), 768);
        assert_eq!(ctx.memory_stats(), stats(2000, 1768, 0, 3768, 5, 1, 4));
        b
    });
    gate.complete().unwrap();
    ctx.wait_deferred();
    assert_eq!(ctx.memory_stats(), stats(2000, 0, 0, 3768, 5, 1, 4));

    // A resize allocates the new block before the old one leaves: the peak shows both.
    b.resize(&queue, 3000).unwrap();
    let ms = ctx.memory_stats();
    assert_eq!(ms.live_bytes, 3000, "{ms:?}");
    assert!(ms.pending_release_bytes <= 2000, "{ms:?}");
    assert_eq!(
        (
            ms.peak_bytes,
            ms.allocations,
            ms.reuses,
            ms.driver_allocations
        ),
        (5000, 6, 1, 5),
        "{ms:?}"
    );
    ctx.wait_deferred();
    b.release().unwrap();
    assert_eq!(ctx.memory_stats(), stats(0, 0, 0, 5000, 6, 1, 5));
}

/// A length for the random run: mostly a few sizes, so that pooled blocks are reused while
/// their old owners' commands are still gated.
fn random_len(rng: &mut Rng) -> usize {
    const LENS: [usize; 6] = [1, 100, 1000, 1024, 2000, 4096];
    if rng.below(4) == 0 {
        1 + rng.below(4096)
    } else {
        LENS[rng.below(LENS.len())]
    }
}

/// A buffer of the random run, and what is known of it.
struct Held {
    buf: ClBuffer<u32>,
    /// Came from the pool and was not resized since.
    pooled: bool,
    /// The first `known` elements equal `value`.
    value: u32,
    known: usize,
    /// Commands enqueued on it by this owner.
    events: Vec<Event>,
    /// Something it depends on may be behind the current gate: a release must not block.
    gated: bool,
}

/// Ends `h` in one of the three ways, watching its block with the commands it enqueued.
fn release(h: Held, how: usize, watches: &mut Vec<common::Watch>, seed: u64, step: usize) {
    let events: Vec<&Event> = h.events.iter().collect();
    watches.push(common::watch(&h.buf, &events));
    match how {
        0 => {
            let report = h.buf.release().expect("release");
            // A pool block goes back to its pool unless the pool is over its threshold;
            // a plain buffer never does.
            assert!(h.pooled || !report.recycled, "seed {seed}, step {step}");
            assert!(report.failed.is_empty(), "seed {seed}: {report:?}");
        }
        1 => drop(h.buf),
        _ => h.buf.release_deferred(),
    }
}

/// A data check of the random run: a read in flight and what it must return.
struct Check {
    read: PendingRead<u32>,
    value: u32,
    step: usize,
}

/// 5,000 random steps (allocations, pool hand-outs, fills, writes, kernels, reads,
/// resizes, releases of the three kinds, trims) with gated work on one queue: the data
/// reads back as written, the ledger agrees with what is held at every step, and at the
/// end nothing is live, pending or pooled and every buffer was freed after its commands.
/// The run prints its seed first and runs in a child process, so that a hang fails this
/// test after [`common::CHILD_LIMIT`] with the seed, instead of stalling the suite.
#[test]
fn long_random_run_ends_with_nothing_live_or_pending() {
    common::isolated(
        &test_path!(long_random_run_ends_with_nothing_live_or_pending),
        common::CHILD_LIMIT,
        &[],
        || {
            let ctx = device!();
            if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
                return;
            }
            let seed = std::env::var("POOL_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(1)
                });
            eprintln!("random run seed: {seed} (rerun with POOL_SEED={seed})");
            // The run holds events of buffers it releases, which on rusticl keep their
            // memory (design trap "rusticl's events keep their buffers"): a release does
            // not wait the whole default grace for that here; the end of the run checks
            // that every buffer was freed.
            ctx.set_free_grace(Duration::from_millis(20));
            let mut rng = Rng(seed);
            let queues = [ctx.queue().unwrap(), ctx.queue().unwrap()];
            let increment = common::busy(&ctx).kernel("increment").unwrap();
            let mut pool = Some(
                Pool::new(
                    &ctx,
                    PoolOptions::default()
                        .release_threshold(64 * 1024 + rng.below(64) as u64 * 1024),
                )
                .unwrap(),
            );
            let mut gate = ctx.user_event().unwrap();
            let mut queue_gated = [false; 2];
            // Pooled blocks whose commands may wait on the current gate.
            let mut block_gated: HashSet<usize> = HashSet::new();
            let mut held: Vec<Held> = Vec::new();
            let mut checks: Vec<Check> = Vec::new();
            let mut watches: Vec<common::Watch> = Vec::new();
            let mut handed_out = 0usize;
            let started = Instant::now();
            let steps = 5000;

            // Opens the gate, checks every read in flight, and closes a new gate.
            let settle = |gate: &mut UserEvent, checks: &mut Vec<Check>, held: &mut Vec<Held>| {
                gate.complete().unwrap();
                for c in checks.drain(..) {
                    let got = c.read.wait().unwrap();
                    if let Some(i) = got.iter().position(|&x| x != c.value) {
                        panic!(
                            "seed {seed}, read at step {}: element {i} is {:#x}, expected {:#x}",
                            c.step, got[i], c.value
                        );
                    }
                }
                for h in held.iter_mut() {
                    h.gated = false;
                }
                *gate = ctx.user_event().unwrap();
            };

            for step in 0..steps {
                if step % 64 == 63 {
                    settle(&mut gate, &mut checks, &mut held);
                    queue_gated = [false; 2];
                    block_gated.clear();
                    // Nothing deferred so far waits on the new gate: this returns.
                    if rng.below(4) == 0 {
                        ctx.wait_deferred();
                    }
                }
                let pool_ref = pool.as_ref().unwrap();
                let qi = rng.below(2);
                let q = &queues[qi];
                // Only the first queue takes gated commands: the second runs at once unless the
                // hazard rules hold it back.
                let gate_it = qi == 0 && rng.below(2) == 0;
                let deps = [gate.event()];
                let after = if gate_it {
                    q.after(&deps)
                } else {
                    q.after(&[])
                };
                // An in-order queue holds everything after a gated command behind it too.
                let gated = gate_it || queue_gated[qi];
                let op = if held.is_empty() {
                    rng.below(2)
                } else {
                    rng.below(12)
                };
                let i = if held.is_empty() {
                    0
                } else {
                    rng.below(held.len())
                };
                match op {
                    0 | 1 if held.len() < 16 => {
                        let len = random_len(&mut rng);
                        let (buf, pooled) = if op == 0 {
                            (ctx.buffer::<u32>(len).unwrap(), false)
                        } else {
                            (pool_ref.acquire::<u32>(len).unwrap(), true)
                        };
                        handed_out += 1;
                        // A recycled block carries its previous owner's commands.
                        let gated = pooled && block_gated.contains(&(buf.as_raw() as usize));
                        held.push(Held {
                            buf,
                            pooled,
                            value: 0,
                            known: 0,
                            events: Vec::new(),
                            gated,
                        });
                    }
                    0 | 1 => {}
                    2 | 3 => {
                        let h = &mut held[i];
                        let value = rng.next() as u32;
                        let event = if op == 2 {
                            after.fill(&h.buf, value).unwrap()
                        } else {
                            after.write_owned(&h.buf, vec![value; h.buf.len()]).unwrap()
                        };
                        h.events.push(event);
                        (h.value, h.known) = (value, h.buf.len());
                        h.gated |= gated;
                        // A command behind gated work on its buffer holds its queue too.
                        queue_gated[qi] |= h.gated;
                    }
                    4 => {
                        let h = &mut held[i];
                        let len = h.buf.len() as u32;
                        // SAFETY: increment touches h.buf[i] only where i < len, h.buf's length.
                        let event = unsafe {
                            after.launch(
                                &increment,
                                &[h.buf.len()],
                                &[Arg::read_write(&h.buf), Arg::scalar(len)],
                            )
                        }
                        .unwrap();
                        h.events.push(event);
                        h.value = h.value.wrapping_add(1);
                        h.gated |= gated;
                        queue_gated[qi] |= h.gated;
                    }
                    5 | 6 => {
                        let h = &mut held[i];
                        if h.known > 0 {
                            let read = after.read_owned_range(&h.buf, 0..h.known).unwrap();
                            h.events.push(read.event().clone());
                            h.gated |= gated;
                            queue_gated[qi] |= h.gated;
                            checks.push(Check {
                                read,
                                value: h.value,
                                step,
                            });
                        }
                    }
                    7 => {
                        let new_len = random_len(&mut rng);
                        let h = &mut held[i];
                        let events: Vec<&Event> = h.events.iter().collect();
                        watches.push(common::watch(&h.buf, &events));
                        let old_raw = h.buf.as_raw() as usize;
                        h.buf.resize(q, new_len).unwrap();
                        handed_out += 1;
                        // The copy reads the old block on `q`, behind whatever holds either.
                        h.gated |= queue_gated[qi];
                        queue_gated[qi] |= h.gated;
                        if h.pooled && h.gated {
                            block_gated.insert(old_raw);
                        }
                        h.events.clear();
                        h.known = h.known.min(new_len);
                        h.pooled = false;
                    }
                    8 | 9 => {
                        // Release, drop or deferred release; one that would wait only when nothing
                        // it depends on is gated.
                        let how = rng.below(3);
                        let blocks = !held[i].pooled && held[i].gated;
                        if how < 2 && blocks {
                            continue;
                        }
                        let h = held.swap_remove(i);
                        let (len, pooled, gated_before) = (h.buf.len(), h.pooled, h.gated);
                        let raw = h.buf.as_raw() as usize;
                        release(h, how, &mut watches, seed, step);
                        if pooled && gated_before {
                            block_gated.insert(raw);
                        }
                        // Often the block goes straight to a new owner, who writes it at once,
                        // on either queue: the hazard rules must order that after the old owner.
                        if pooled && op == 9 {
                            let buf = pool_ref.acquire::<u32>(len).unwrap();
                            handed_out += 1;
                            let mut h = Held {
                                gated: block_gated.contains(&(buf.as_raw() as usize)),
                                buf,
                                pooled: true,
                                value: rng.next() as u32,
                                known: len,
                                events: Vec::new(),
                            };
                            h.events.push(after.fill(&h.buf, h.value).unwrap());
                            h.gated |= gated;
                            queue_gated[qi] |= h.gated;
                            held.push(h);
                        }
                    }
                    10 if rng.below(4) == 0 => {
                        pool_ref.trim(rng.below(128) as u64 * 1024);
                    }
                    _ => {}
                }

                // The ledger agrees with what is held, whatever the reaper does meanwhile.
                let ms = ctx.memory_stats();
                let ps = pool.as_ref().unwrap().stats();
                let live: u64 = held.iter().map(|h| h.buf.block_bytes() as u64).sum();
                let in_pool_use: u64 = held
                    .iter()
                    .filter(|h| h.pooled)
                    .map(|h| h.buf.block_bytes() as u64)
                    .sum();
                assert_eq!(ms.live_bytes, live, "seed {seed}, step {step}: {ms:?}");
                assert_eq!(
                    ms.pooled_bytes, ps.pooled_bytes,
                    "seed {seed}, step {step}: {ms:?} {ps:?}"
                );
                assert_eq!(ps.in_use_bytes, in_pool_use, "seed {seed}, step {step}");
                assert!(
                    ms.peak_bytes >= ms.live_bytes + ms.pooled_bytes,
                    "seed {seed}, step {step}: {ms:?}"
                );
            }

            settle(&mut gate, &mut checks, &mut held);
            gate.complete().unwrap();
            // Half the buffers go before the pool, half after it (back to a closed pool).
            let later = held.split_off(held.len() / 2);
            for h in held {
                let events: Vec<&Event> = h.events.iter().collect();
                watches.push(common::watch(&h.buf, &events));
                h.buf.release_deferred();
            }
            drop(pool.take());
            for h in later {
                let events: Vec<&Event> = h.events.iter().collect();
                watches.push(common::watch(&h.buf, &events));
                drop(h.buf);
            }
            ctx.wait_deferred();
            let ms = ctx.memory_stats();
            assert_eq!(
                (ms.live_bytes, ms.pending_release_bytes, ms.pooled_bytes),
                (0, 0, 0),
                "seed {seed}: {ms:?}"
            );
            assert_eq!(
                watches.len(),
                handed_out,
                "seed {seed}: every buffer watched once"
            );
            let fired = watches.iter().filter(|w| w.fired()).count();
            assert_eq!(
                fired, handed_out,
                "seed {seed}: destructor callbacks fired for {fired} of {handed_out} buffers"
            );
            for w in &watches {
                w.assert_released_after_events();
            }
            eprintln!(
                "seed {seed}: {steps} steps, {handed_out} buffers in {:?}; {ms:?}",
                started.elapsed()
            );
        },
    );
}

#[test]
fn leak_report_names_the_allocation_site() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let (kept, kept_line) = (ctx.buffer::<u32>(1000).unwrap(), line!());
    let (freed, freed_line) = (ctx.buffer::<u32>(500).unwrap(), line!());
    assert_eq!(ctx.memory_stats().live_bytes, 6000);
    drop(freed);
    assert_eq!(ctx.memory_stats().live_bytes, 4000);
    let me = thread::current().id();
    let clone = ctx.clone();
    drop(ctx); // not the last handle: no report
    assert!(common::logs::messages(me, "cl_lifetime::context").is_empty());
    assert_eq!(clone.memory_stats().live_bytes, 4000);
    drop(clone); // the last handle: the report names `kept`, and only it

    let report = common::logs::messages(me, "cl_lifetime::context");
    assert!(
        report
            .iter()
            .any(|m| m.contains("1 live buffers (4000 bytes)")),
        "{report:#?}"
    );
    let site = format!("4000 bytes allocated at {}:{kept_line}:", file!());
    assert!(report.iter().any(|m| m.contains(&site)), "{report:#?}");
    let freed_site = format!("{}:{freed_line}:", file!());
    assert!(
        !report.iter().any(|m| m.contains(&freed_site)),
        "{report:#?}"
    );

    // The buffer keeps the context alive: it still works, and is freed when dropped.
    queue.write(&kept, &ramp(1000, 2)).unwrap();
    assert_eq!(contents(&queue, &kept), ramp(1000, 2));
    let watch = common::watch(&kept, &[]);
    drop(kept);
    watch.assert_released_after_events();
}

// A pooled buffer's `bytes()` was its pool's size class (1024 for `acquire::<u8>(1000)`),
// though its doc said the buffer's size in bytes.
#[test]
fn a_pooled_buffers_bytes_are_its_elements_and_its_block_is_the_size_class() {
    let ctx = device!();
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let buf = pool.acquire::<u8>(1000).unwrap();
    assert_eq!(buf.len(), 1000);
    assert_eq!(buf.bytes(), 1000);
    assert_eq!(buf.block_bytes(), 1024);
    let words = pool.acquire::<u32>(100).unwrap();
    assert_eq!(words.bytes(), 400);
    assert_eq!(words.block_bytes(), 512);
}

/// Issue 50: a pooled block whose views went to kernels was let go instead of kept (its
/// sub-buffers could overlap the next owner's views), so a loop of "acquire, a kernel on
/// each half through views, release" allocated from the driver every time. The block goes
/// back to its pool whatever views were made of it, and its next owner starts with none
/// of the old owner's sub-buffers: one allocation, the peak one block, the data right
/// every time, also when the next owner splits the block elsewhere.
#[test]
fn a_pooled_block_whose_views_went_to_kernels_returns_to_its_pool_with_no_sub_buffers() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let unit = common::sub_buffer_unit(&ctx);
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    // 1 MiB, a power of two (its own size class), halves at a multiple of the alignment.
    let len = (1 << 20) / size_of::<i32>();
    let half = len / 2;
    assert_eq!(half % unit, 0);
    let before = ctx.memory_stats();
    for i in 0..50 {
        let buf = pool.acquire::<i32>(len).unwrap();
        assert_eq!(
            buf.kept_sub_buffers(),
            0,
            "iteration {i}: the old owner's views"
        );
        queue.fill(&buf, i).unwrap();
        // Every other owner splits the block elsewhere: views the old owner's sub-buffers
        // would overlap.
        let (low, high) = if i % 2 == 0 {
            buf.split_at(half).unwrap()
        } else {
            (
                buf.view(..unit).unwrap(),
                buf.view(unit..unit + half).unwrap(),
            )
        };
        for view in [low, high] {
            // SAFETY: increment touches element i of the view only where i < its length.
            unsafe {
                queue.launch(
                    &increment,
                    &[view.len()],
                    &[Arg::read_write(view), Arg::scalar(view.len() as u32)],
                )
            }
            .unwrap_or_else(|e| panic!("iteration {i}: {e}"));
        }
        assert_eq!(buf.kept_sub_buffers(), 2);
        let mut expected = vec![i; len];
        let end = high.offset() + high.len();
        expected[..end].iter_mut().for_each(|x| *x += 1);
        assert_eq!(contents(&queue, &buf), expected, "iteration {i}");
        if i % 2 == 0 {
            drop(buf);
        } else {
            assert!(buf.release().unwrap().recycled, "iteration {i}");
        }
    }
    let after = ctx.memory_stats();
    assert_eq!(
        (
            after.allocations - before.allocations,
            after.driver_allocations - before.driver_allocations,
            after.reuses - before.reuses,
        ),
        (50, 1, 49),
        "{after:?}"
    );
    assert_eq!(
        after.peak_bytes,
        (len * size_of::<i32>()) as u64,
        "{after:?}"
    );
    assert_eq!(pool.stats().pooled_blocks, 1);
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    // A block that changes hands while a kernel on its view is held back by a gate: the
    // old owner's sub-buffer is released only later (on the reaper thread), and the next
    // owner's overlapping view is ordered after that kernel.
    let gate = ctx.user_event().unwrap();
    let old = pool.acquire::<i32>(len).unwrap();
    queue.fill(&old, 7).unwrap();
    // SAFETY: increment touches element i of the view only where i < half, its length.
    let gated = unsafe {
        queue.after(&[gate.event()]).launch(
            &increment,
            &[half],
            &[
                Arg::read_write(old.view(..half).unwrap()),
                Arg::scalar(half as u32),
            ],
        )
    }
    .unwrap();
    assert!(old.release().unwrap().recycled);
    let new = pool.acquire::<i32>(len).unwrap();
    assert_eq!(new.kept_sub_buffers(), 0);
    let view = new.view(unit..unit + half).unwrap();
    // SAFETY: increment touches element i of the view only where i < half, its length.
    unsafe {
        queue.launch(
            &increment,
            &[half],
            &[Arg::read_write(view), Arg::scalar(half as u32)],
        )
    }
    .unwrap();
    assert!(
        !gated.is_terminal(),
        "the gated launch ran before its gate opened"
    );
    gate.complete().unwrap();
    let mut expected = vec![7; len];
    expected[..half].iter_mut().for_each(|x| *x += 1);
    expected[unit..unit + half].iter_mut().for_each(|x| *x += 1);
    assert_eq!(contents(&queue, &new), expected);
    drop(new);
    ctx.wait_deferred();
    assert_eq!(ctx.memory_stats().driver_allocations, 1);
}

// A clone of a pool is the same pool: a block let go through one is handed out by the
// other (from another thread too), both see the same statistics, and the pool stays open
// until its last clone is dropped, which releases what it keeps.
#[test]
fn clones_of_a_pool_share_its_blocks_and_the_last_drop_closes_it() {
    let ctx = device!();
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let clone = pool.clone();
    let first = pool.acquire::<u32>(1024).unwrap();
    let raw = first.as_raw() as usize;
    first.release().unwrap();
    assert_eq!(clone.stats(), pool.stats());
    assert_eq!(clone.stats().pooled_blocks, 1);

    let other = clone.clone();
    let again = thread::spawn(move || {
        let buf = other.acquire::<u32>(1024).unwrap();
        let raw = buf.as_raw() as usize;
        buf.release().unwrap();
        raw
    })
    .join()
    .unwrap();
    assert_eq!(
        again, raw,
        "the clone made a new block instead of reusing the pool's"
    );
    assert_eq!(ctx.memory_stats().driver_allocations, 1);

    // Dropping one clone closes nothing: the block stays pooled and is reused.
    drop(pool);
    assert_eq!(clone.stats().pooled_blocks, 1);
    let reused = clone.acquire::<u32>(1024).unwrap();
    assert_eq!(reused.as_raw() as usize, raw);
    reused.release().unwrap();
    assert_eq!(ctx.memory_stats().driver_allocations, 1);

    // The last one releases the pooled block.
    drop(clone);
    ctx.wait_deferred();
    let ms = ctx.memory_stats();
    assert_eq!(
        (ms.live_bytes, ms.pending_release_bytes, ms.pooled_bytes),
        (0, 0, 0),
        "{ms:?}"
    );
}
