//! The release guarantee, proven with user events as gates and the cl-sys oracle.

use std::sync::mpsc;
use std::time::Duration;

use cl_lifetime::{Arg, CommandKind, Error};

use crate::common::{self, HANG, pattern};

/// A release returns only once its buffer's gated command has run, and the memory is
/// freed after it: a kernel, and an owned write (which also holds host memory).
#[test]
fn release_waits_for_a_gated_command_on_its_buffer() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let n = 1024;
    for what in ["kernel", "owned write"] {
        let buf = ctx.buffer_from(&vec![0i32; n]).unwrap();
        let gate = ctx.user_event().unwrap();
        let deps = [gate.event()];
        let gated = queue.after(&deps);
        let command = match what {
            // SAFETY: increment touches buf[i] only where i < n, its length.
            "kernel" => unsafe {
                gated.launch(
                    &increment,
                    &[n],
                    &[Arg::read_write(&buf), Arg::scalar(n as u32)],
                )
            },
            _ => gated.write_owned(&buf, pattern(n, 4).into_iter().map(|x| x as i32).collect()),
        }
        .unwrap();
        queue.flush().unwrap();
        let watch = common::watch(&buf, &[&command]);
        // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
        // their buffers"): that it completed shows in the report and the oracle.
        drop(command);

        let report = common::returns_only_after(
            &format!("the release of a buffer with a gated {what}"),
            move || buf.release().unwrap(),
            || {
                assert!(!watch.fired(), "memory freed while its {what} was gated");
                gate.complete().unwrap();
            },
        );
        assert_eq!(report.waited_on, 1, "{what}: {report:?}");
        assert!(report.failed.is_empty(), "{what}: {report:?}");
        assert!(report.freed, "{what}: {report:?}");
        watch.assert_released_after_events();
    }
}

/// NVIDIA ends a non-blocking read into pageable memory after the next command of its
/// queue has run (design trap "pageable reads complete late"), so the end of a later
/// command of the read's queue says nothing about the read's. The record dropped such a
/// read once a command of its queue with no wait list superseded it, so the release
/// waited only for that command, and the memory could go while the read was pending
/// (seen on NVIDIA, by the oracle of `pool::long_random_run_ends_with_nothing_live_or_pending`).
/// The release waits for the read itself.
#[test]
fn release_waits_for_a_host_read_itself_not_only_for_a_later_command_of_its_queue() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let n = 1024;
    for what in ["owned read", "owned write"] {
        let buf = ctx.buffer_from(&vec![3u32; n]).unwrap();
        let gate = ctx.user_event().unwrap();
        let deps = [gate.event()];
        let gated = queue.after(&deps);
        let (host, pending_read) = match what {
            "owned read" => {
                let read = gated.read_owned(&buf).unwrap();
                (read.event().clone(), Some(read))
            }
            _ => (gated.write_owned(&buf, vec![4u32; n]).unwrap(), None),
        };
        // Same in-order queue: no wait list, so it supersedes the transfer outright.
        let fill = queue.fill(&buf, 5).unwrap();
        queue.flush().unwrap();
        let watch = common::watch(&buf, &[&host, &fill]);
        // The handles would keep the memory on rusticl (design trap "rusticl's events
        // keep their buffers"); the read's goes once the gate is open (dropping it hands
        // it to the library's thread, which lets go of it once the read has ended).
        drop((host, fill));
        let report = common::returns_only_after(
            &format!("the release of a buffer with a gated {what}"),
            move || buf.release().unwrap(),
            || {
                gate.complete().unwrap();
                drop(pending_read);
            },
        );
        assert_eq!(
            report.waited_on, 2,
            "{what}: the release waits for the transfer and the fill: {report:?}"
        );
        assert!(report.freed, "{what}: {report:?}");
        watch.assert_released_after_events();
    }
}

/// The record layer's *drop behind a gate* rule: a Drop that would wait behind an unset user event of its context (the
/// caller may be about to set it, or unwinding past it) returns at once and leaves the
/// release to the reaper, which frees the memory only after the command has ended.
#[test]
fn drop_behind_an_unset_gate_returns_and_frees_only_after_the_gated_command() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(1024).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 7).unwrap();
    queue.flush().unwrap();
    let watch = common::watch(&buf, &[&fill]);
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(fill);

    let (tx, rx) = mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(buf);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(HANG)
        .expect("the drop returned while its gate was closed");
    dropper.join().unwrap();
    assert!(!watch.fired(), "freed while its command could not have run");
    assert_eq!(ctx.memory_stats().pending_release_bytes, 4096);
    gate.complete().unwrap();
    ctx.wait_deferred();
    watch.assert_released_after_events();
    assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
}

#[test]
fn release_ignores_gated_command_on_another_buffer() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let other_queue = ctx.queue().unwrap();
    let busy_buf = ctx.buffer::<f32>(256).unwrap();
    let gate = ctx.user_event().unwrap();
    // Gated work on another buffer, on the same queue and on another queue.
    let same_queue = queue.after(&[gate.event()]).fill(&busy_buf, 1.0).unwrap();
    let other = other_queue
        .after(&[gate.event()])
        .fill(&busy_buf, 2.0)
        .unwrap();

    let free_queue = ctx.queue().unwrap();
    let mine = ctx.buffer::<f32>(256).unwrap();
    let done = free_queue.fill(&mine, 3.0).unwrap();
    done.wait().unwrap();
    let watch = common::watch(&mine, &[&done]);
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(done);
    let report = mine.release().unwrap();
    watch.assert_released_after_events();
    assert!(report.waited_on <= 1);
    assert!(
        !same_queue.is_terminal() && !other.is_terminal(),
        "release waited on other work"
    );
    // Their handles would keep `busy_buf` on rusticl.
    drop((same_queue, other));
    gate.complete().unwrap();
    busy_buf.release().unwrap();
}

#[test]
fn release_ignores_gated_command_on_another_queue_sharing_nothing() {
    let ctx = device!();
    let gated_queue = ctx.queue().unwrap();
    let queue = ctx.queue().unwrap();
    let gate = ctx.user_event().unwrap();
    let unrelated = ctx.buffer::<u8>(64).unwrap();
    let blocked = gated_queue
        .after(&[gate.event()])
        .fill(&unrelated, 1)
        .unwrap();

    let buf = ctx.buffer::<u8>(64).unwrap();
    let write = queue.write_owned(&buf, vec![5u8; 64]).unwrap();
    write.wait().unwrap();
    let watch = common::watch(&buf, &[&write]);
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(write);
    buf.release().unwrap();
    watch.assert_released_after_events();
    assert!(!blocked.is_terminal(), "release waited for another queue");
    gate.complete().unwrap();
}

/// A command whose gate failed ends: its buffer's release waits for it, frees the memory
/// after it and reports the failure. A fill, and a read, whose wait returns the failure.
#[test]
fn failed_command_still_ends_in_released_memory() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    for what in [CommandKind::Fill, CommandKind::Read] {
        // A fresh queue: some drivers refuse further work on a queue that ran a failed
        // command.
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer_from(&[1i32; 256]).unwrap();
        let gate = ctx.user_event().unwrap();
        let deps = [gate.event()];
        let (command, read) = match what {
            CommandKind::Fill => (queue.after(&deps).fill(&buf, 2).unwrap(), None),
            _ => {
                let read = queue.after(&deps).read_owned(&buf).unwrap();
                (read.event().clone(), Some(read))
            }
        };
        queue.flush().unwrap();
        let watch = common::watch(&buf, &[&command]);
        // Its handle would keep the memory on rusticl (design trap "rusticl's events
        // keep their buffers"); the read's goes with its wait.
        drop(command);
        gate.fail(-42).unwrap();
        if let Some(read) = read {
            match read.wait() {
                Err(Error::CommandFailed { status }) => assert!(status.code() < 0, "{status}"),
                other => panic!("expected CommandFailed, got {other:?}"),
            }
        }
        let report = buf.release().unwrap();
        watch.assert_released_after_events();
        assert!(report.freed, "{what:?}: {report:?}");
        assert_eq!(report.failed.len(), 1, "{what:?}: {report:?}");
        assert_eq!(report.failed[0].command, what);
        assert!(report.failed[0].status.code() < 0, "{what:?}: {report:?}");
    }
}

#[test]
fn empty_record_releases_at_once() {
    let ctx = device!();
    let buf = ctx.buffer::<u64>(32).unwrap();
    let watch = common::watch(&buf, &[]);
    let report = buf.release().unwrap();
    assert_eq!(report.waited_on, 0);
    assert_eq!(report.waited, Duration::ZERO);
    watch.assert_released_after_events();
}

#[test]
fn record_stays_small_over_100_000_commands() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(16).unwrap();
    let mut largest = 0;
    for i in 0..100_000u32 {
        if i % 2 == 0 {
            queue.fill(&buf, i).unwrap();
        } else {
            queue.read_owned(&buf).unwrap().wait().unwrap();
        }
        largest = largest.max(buf.record_len());
    }
    // One queue: its newest write and newest read.
    assert!(largest <= 2, "record grew to {largest}");
    let report = buf.release().unwrap();
    assert!(report.waited_on <= 2);
}

#[test]
fn record_stays_small_on_an_out_of_order_queue() {
    let ctx = device!();
    let Ok(queue) = ctx.out_of_order_queue() else {
        common::not_run("the device has no out-of-order queues");
        return;
    };
    let buf = ctx.buffer::<u32>(16).unwrap();
    let mut largest = 0;
    for i in 0..20_000u32 {
        let fill = queue.fill(&buf, i).unwrap();
        if i % 64 == 0 {
            fill.wait().unwrap();
        }
        largest = largest.max(buf.record_len());
    }
    assert!(largest <= 256, "record grew to {largest}");
    buf.release().unwrap();
}

/// Trap 11: a kernel object must not keep a released buffer alive through its arguments.
#[test]
fn kernel_arguments_do_not_keep_released_buffers_alive() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let buf = ctx.buffer_from(&[1i32; 32]).unwrap();
    // SAFETY: increment touches buf[i] only where i < 32, its length.
    let launch = unsafe {
        queue.launch(
            &increment,
            &[32],
            &[Arg::read_write(&buf), Arg::scalar(32u32)],
        )
    }
    .unwrap();
    let watch = common::watch(&buf, &[&launch]);
    buf.release().unwrap();
    // `increment` is still alive here, and was last launched with `buf`.
    watch.assert_released_after_events();
    drop(increment);
}

#[test]
fn release_after_write_and_kernel_reports_what_it_waited_on() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let other = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let buf = ctx.buffer::<i32>(32).unwrap();
    let gate = ctx.user_event().unwrap();
    let w = queue
        .after(&[gate.event()])
        .write_owned(&buf, vec![1; 32])
        .unwrap();
    // SAFETY: increment touches buf[i] only where i < 32, its length.
    let k = unsafe {
        other.after(&[gate.event(), &w]).launch(
            &increment,
            &[32],
            &[Arg::read_write(&buf), Arg::scalar(32u32)],
        )
    }
    .unwrap();
    let watch = common::watch(&buf, &[&w, &k]);
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop((w, k));
    gate.complete().unwrap();
    let mut out = vec![0; 32];
    other.read(&buf, &mut out).unwrap();
    assert_eq!(out, vec![2; 32]);
    let report = buf.release().unwrap();
    // Two queues: at most one write and one read each.
    assert!(report.waited_on <= 4, "{report:?}");
    watch.assert_released_after_events();
}

/// The pins' *swept at release* rule: the release of a buffer copied into another one that
/// lives on frees the memory, although the other buffer's record holds the copy (on
/// rusticl a command's event keeps every buffer it used; before the rule, the release
/// waited the whole free grace and reported `freed: false`). The same for a kernel that
/// reads one buffer and writes another.
#[test]
fn a_buffer_read_into_another_that_lives_on_is_freed_at_its_release() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let program = ctx.program("schedule.cl", "").unwrap();
    let axpy = program.kernel("axpy_int").unwrap();
    for what in ["copy", "kernel"] {
        let src = ctx.buffer_from(&[3i32; 256]).unwrap();
        let dst = ctx.buffer_from(&[1i32; 256]).unwrap();
        if what == "copy" {
            queue.copy(&src, &dst).unwrap();
        } else {
            // dst = 1 * src + dst
            // SAFETY: axpy_int touches src[i] and dst[i] only where i < 256, their length, and
            // writes only dst.
            unsafe {
                queue.launch(
                    &axpy,
                    &[256],
                    &[
                        Arg::read(&src),
                        Arg::read_write(&dst),
                        Arg::scalar(1i32),
                        Arg::scalar(256u32),
                    ],
                )
            }
            .unwrap();
        }
        let watch = common::watch(&src, &[]);
        let report = src.release().unwrap();
        assert!(report.freed, "{what}: {report:?}");
        assert!(
            watch.fired(),
            "{what}: the destructor callback has not fired"
        );
        let mut out = vec![0; 256];
        queue.read(&dst, &mut out).unwrap();
        let want = if what == "copy" { 3 } else { 4 };
        assert_eq!(out, vec![want; 256], "{what}");
    }
}

// While any user event of the context is unset, a blocking release polls its commands'
// statuses instead of waiting in `clWaitForEvents` (so that it can say which gate it waits
// behind): the poll flushes nothing, and rusticl runs nothing that has not been flushed.
// The release must flush its commands' queues itself.
isolated_test! {
    fn a_release_while_an_unrelated_gate_is_closed_flushes_the_queue_of_its_commands() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        // Closed, and nothing waits on it.
        let gate = ctx.user_event().unwrap();
        let buf = ctx.buffer::<u32>(1024).unwrap();
        // Nothing flushes this queue but the release.
        drop(queue.fill(&buf, 7).unwrap());
        let report = buf.release().unwrap();
        assert!(report.freed, "{report:?}");
        gate.complete().unwrap();
    }
}

// A failed command that a later write superseded was missing from `ReleaseReport::failed`,
// which lists every failed command the buffer saw: here on its own in-order queue (the
// later write waits for it through the queue's order, with an empty wait list).
#[test]
fn a_failed_command_superseded_by_a_write_on_its_queue_is_in_the_release_report() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(1024).unwrap();
    let gate = ctx.user_event().unwrap();
    queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
    queue.write_owned(&buf, vec![2; 1024]).unwrap();
    queue.flush().unwrap();
    gate.fail(-42).unwrap();
    let report = buf.release().unwrap();
    assert!(
        report.failed.iter().any(|f| f.command == CommandKind::Fill),
        "the superseded fill is missing: {report:?}"
    );
}

// The same from another queue: the write waits for nothing (a failed command never enters
// a wait list), and supersedes the failed fill.
#[test]
fn a_failed_command_superseded_by_a_write_from_another_queue_is_in_the_release_report() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (queue, other) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer::<u32>(1024).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
    queue.flush().unwrap();
    gate.fail(-42).unwrap();
    assert!(fill.wait().is_err());
    drop(fill);
    other.fill(&buf, 2).unwrap();
    assert_eq!(
        other.read_owned(&buf).unwrap().wait().unwrap(),
        vec![2; 1024]
    );
    let report = buf.release().unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(report.failed[0].command, CommandKind::Fill, "{report:?}");
}

/// Issue 48: "a release returns before the memory is freed". A command on a buffer that
/// lives on (`kept`) fails after waiting on a gated fill of `released`: a copy from it, a
/// kernel reading it, or a fill of `kept` given the fill as a dependency. `kept` keeps the
/// failure for its reads and its own report, but not the failed command's event, which
/// holds `released`'s memory on drivers whose events keep their buffers, or their wait
/// lists (rusticl, Intel's CPU runtime): the release of `released` frees its memory.
/// Before, it returned after the whole free grace with `freed: false` (rusticl: copy and
/// kernel; Intel's CPU runtime: the same). On the fill's queue and on another.
#[test]
fn a_failure_kept_for_a_live_buffer_does_not_keep_a_released_buffers_memory() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (filler, other) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let scale = common::busy(&ctx).kernel("scale").unwrap();
    let mut wrong = Vec::new();
    let cases = ["copy", "kernel", "fill after"].into_iter();
    for (what, queue) in cases.flat_map(|what| [(what, &filler), (what, &other)]) {
        let on = if std::ptr::eq(queue, &filler) {
            "its queue"
        } else {
            "another queue"
        };
        let released = ctx.buffer_from(&[1.0f32; 256]).unwrap();
        let kept = ctx.buffer_from(&[2.0f32; 256]).unwrap();
        let gate = ctx.user_event().unwrap();
        let fill = filler.after(&[gate.event()]).fill(&released, 3.0).unwrap();
        let failing = match what {
            "copy" => queue.copy(&released, &kept),
            // SAFETY: scale touches element i of both buffers only where i < 256, their
            // length, and writes only `kept`.
            "kernel" => unsafe {
                queue.launch(
                    &scale,
                    &[256],
                    &[
                        Arg::read(&released),
                        Arg::write(&kept),
                        Arg::scalar(2.0f32),
                        Arg::scalar(256u32),
                    ],
                )
            },
            _ => queue.after(&[&fill]).fill(&kept, 4.0),
        }
        .unwrap();
        filler.flush().unwrap();
        queue.flush().unwrap();
        gate.fail(-9).unwrap();
        let ended = failing.wait();
        drop((fill, failing));
        let watch = common::watch(&released, &[]);
        let report = released.release().unwrap();
        let fired = watch.fired();
        // The failure is still `kept`'s: a read names it, and so does its release.
        let read = queue.read_owned(&kept).and_then(|r| r.wait());
        let kept_report = kept.release().unwrap();
        let named = matches!(read, Err(Error::DependencyFailed { .. }));
        if ended.is_ok() || !report.freed || !fired || !named || kept_report.failed.is_empty() {
            wrong.push(format!(
                "{what} on {on}: failing command {ended:?}; released {report:?} (callback fired: \
                 {fired}); read of kept {:?}; kept {kept_report:?}",
                read.map(|d| d[0])
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A release after a fill whose gate failed frees the buffer's memory, also while a
/// command before the fill on its in-order queue still waits on a gate: Intel's CPU
/// runtime ends such a fill ahead of its turn and keeps its buffer until the commands
/// before it have ended (design trap "Intel's CPU runtime keeps a failed command's
/// buffers until its turn"), so the release waits for those too. Blocking and async, for
/// several buffers filled behind the one failed gate. Before, there, every release
/// returned after its free grace with `freed: false` (issue 48).
#[test]
fn a_release_after_a_failed_fill_on_a_shared_queue_frees_the_memory_on_every_driver() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    // Shorter than the gate ahead stays closed: a release that did not wait for the
    // command ahead would report its memory not freed.
    ctx.set_free_grace(Duration::from_millis(50));
    let queue = ctx.queue().unwrap();
    let mut wrong = Vec::new();
    for how in ["release", "release_async"] {
        let kept = ctx.buffer::<u32>(64).unwrap();
        let closed = ctx.user_event().unwrap();
        let failing = ctx.user_event().unwrap();
        let ahead = queue.after(&[closed.event()]).fill(&kept, 1).unwrap();
        let released: Vec<_> = (0..3).map(|_| ctx.buffer::<u32>(64).unwrap()).collect();
        for buf in &released {
            queue.after(&[failing.event()]).fill(buf, 2).unwrap();
        }
        queue.flush().unwrap();
        failing.fail(-9).unwrap();
        let watches: Vec<_> = released.iter().map(|b| common::watch(b, &[])).collect();
        let opener = std::thread::spawn(move || {
            std::thread::sleep(common::WINDOW);
            closed.complete().unwrap();
        });
        for (i, (buf, watch)) in released.into_iter().zip(&watches).enumerate() {
            let report = match how {
                "release" => buf.release(),
                _ => pollster::block_on(buf.release_async()),
            }
            .unwrap();
            let fired = watch.fired();
            if !report.freed || !fired || report.failed.is_empty() {
                wrong.push(format!(
                    "{how} of buffer {i}: {report:?} (callback fired: {fired})"
                ));
            }
        }
        opener.join().unwrap();
        ahead.wait().unwrap();
        // Its event would keep `kept` on drivers whose events keep their buffers.
        drop(ahead);
        assert!(kept.release().unwrap().freed);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
