//! Failures end cleanly: when a command fails (a gate failed, dropped closed or already
//! failed, a dependency that failed), nothing crashes, nothing waits forever, nothing
//! leaks, and data that depends on the failed command comes back as an error.
//!
//! A test of a crash or a hang runs its body in a child process with a time limit
//! ([`common::isolated`]), so the suite reports it instead of dying or stalling. Ordering
//! is made with user events as gates, never with sleeps.

use std::time::Duration;

use cl_lifetime::{Arg, ClBuffer, CommandKind, Context, Error, Queue, Status};

use crate::common::{self, CHILD_LIMIT, eventually};

/// The execution status the tests fail their gates with.
const CANCELLED: i32 = -1234;

fn queues(ctx: &Context) -> (Queue, Queue) {
    (
        ctx.queue().expect("a queue"),
        ctx.queue().expect("a second queue"),
    )
}

// 1. A failed command must outlive its own closed dependencies (PoCL walks its notify list).

/// Fills `buf` on `queue` behind two gates: returns them (`later`, `cancel`) and the
/// fill's raw handle, which the buffer's record keeps alive.
fn fill_behind_two_gates(
    ctx: &Context,
    queue: &Queue,
    buf: &cl_lifetime::ClBuffer<u32>,
) -> (
    cl_lifetime::UserEvent,
    cl_lifetime::UserEvent,
    cl_sys::cl_event,
) {
    let later = ctx.user_event().expect("a gate");
    let cancel = ctx.user_event().expect("a second gate");
    let fill = queue
        .after(&[cancel.event(), later.event()])
        .fill(buf, 1)
        .expect("a fill behind both");
    (later, cancel, fill.as_raw() as cl_sys::cl_event)
}

/// Releases `buf`, whose command `fill` (a raw handle the buffer's record keeps alive)
/// waits on a failed gate and on `later`, and completes `later`. Where the driver ended
/// the command when the gate failed (PoCL), the release comes first: the order that made
/// PoCL read a freed event. Where the command waits for every dependency before it fails
/// (NVIDIA), the release waits for it, so it runs on a thread while `later` completes.
fn release_then_complete(
    buf: cl_lifetime::ClBuffer<u32>,
    fill: cl_sys::cl_event,
    later: &cl_lifetime::UserEvent,
) -> cl_lifetime::ReleaseReport {
    if common::raw_status(fill) < 0 {
        let report = buf.release().expect("the release");
        later.complete().expect("the other gate opens");
        report
    } else {
        std::thread::scope(|s| {
            let release = s.spawn(move || buf.release().expect("the release"));
            later.complete().expect("the other gate opens");
            release.join().expect("the release's thread")
        })
    }
}

isolated_test! {
    fn a_failed_command_whose_other_dependency_is_closed_survives_its_buffers_release() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(1024).unwrap();
        let (later, cancel, fill) = fill_behind_two_gates(&ctx, &queue, &buf);
        cancel.fail(CANCELLED).unwrap();
        let report = release_then_complete(buf, fill, &later);
        assert_eq!(report.failed.len(), 1, "{report:?}");
        // Something after the dependency ended, to let the driver walk its lists.
        let other = ctx.buffer::<u32>(16).unwrap();
        queue.fill(&other, 2).unwrap().wait().unwrap();
    }
}

isolated_test! {
    fn a_failed_command_whose_other_dependency_is_closed_survives_being_superseded() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let buf = ctx.buffer::<u32>(1024).unwrap();
        let (later, cancel, _) = fill_behind_two_gates(&ctx, &queue, &buf);
        cancel.fail(CANCELLED).unwrap();
        // Supersedes the failed fill (waits on it where it has not ended: NVIDIA).
        let other = other_queue.fill(&buf, 2).unwrap();
        // The same queue too: a command with no wait list drops what it covers.
        let mut last = None;
        for _ in 0..40 {
            last = Some(queue.fill(&buf, 3).unwrap());
        }
        later.complete().unwrap();
        // Where they waited on the failed fill they fail too (NVIDIA, a moment later).
        let _ = other.wait();
        let _ = last.map(|e| e.wait());
        queue.fill(&buf, 5).unwrap().wait().unwrap();
        assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap()[0], 5);
    }
}

isolated_test! {
    fn a_failed_command_whose_failing_gate_was_dropped_survives_its_buffers_release() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(1024).unwrap();
        let (later, cancel, fill) = fill_behind_two_gates(&ctx, &queue, &buf);
        drop(cancel);
        let report = release_then_complete(buf, fill, &later);
        assert_eq!(report.failed.len(), 1, "{report:?}");
        let other = ctx.buffer::<u32>(16).unwrap();
        queue.fill(&other, 2).unwrap().wait().unwrap();
    }
}

// 2. An already-failed dependency: the command would never run.

isolated_test! {
    fn an_already_failed_dependency_is_refused_instead_of_hanging_naming_the_gate_by_its_index() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(64).unwrap();
        let ended = queue.fill(&buf, 0).unwrap();
        ended.wait().unwrap();
        let gate = ctx.user_event().unwrap();
        gate.fail(CANCELLED).unwrap();
        let err = queue.after(&[&ended, gate.event()]).fill(&buf, 1).unwrap_err();
        assert!(
            matches!(
                err,
                Error::DependencyFailed {
                    command: CommandKind::User,
                    status,
                    buffer: None,
                    dependency: Some(1),
                } if status.0 == CANCELLED
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("user event (gate) given to Queue::after at index 1"),
            "{text}"
        );
        // Nothing was enqueued: the queue, the buffer and the context all go on.
        queue.fill(&buf, 7).unwrap().wait().unwrap();
        assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap()[0], 7);
        buf.release().unwrap();
        ctx.wait_deferred();
    }
}

isolated_test! {
    fn an_already_failed_command_as_a_dependency_is_refused_instead_of_hanging() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let (a, b) = (
            ctx.buffer::<u32>(64).unwrap(),
            ctx.buffer::<u32>(64).unwrap(),
        );
        let gate = ctx.user_event().unwrap();
        let failed = queue.after(&[gate.event()]).fill(&a, 1).unwrap();
        gate.fail(CANCELLED).unwrap();
        assert!(failed.wait().is_err());
        let err = other_queue.after(&[&failed]).fill(&b, 2).unwrap_err();
        assert!(
            matches!(
                err,
                Error::DependencyFailed {
                    command: CommandKind::Fill,
                    ..
                }
            ),
            "{err:?}"
        );
        other_queue.fill(&b, 3).unwrap().wait().unwrap();
        drop((a, b));
    }
}

// 3. Failures the library did not cause itself are seen all the same.

isolated_test! {
    fn a_gate_failed_by_its_drop_does_not_stall_the_next_command_on_another_queue() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let buf = ctx.buffer::<u32>(64).unwrap();
        let gate = ctx.user_event().unwrap();
        let gated = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
        drop(gate);
        // Some drivers (NVIDIA) fail a dependent command a moment after its gate.
        assert!(gated.wait().is_err());
        drop(gated);
        other_queue.fill(&buf, 2).unwrap().wait().unwrap();
        assert_eq!(other_queue.read_owned(&buf).unwrap().wait().unwrap()[0], 2);
    }
}

isolated_test! {
    fn a_gate_failed_through_its_raw_handle_does_not_stall_the_next_command_on_another_queue() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let buf = ctx.buffer::<u32>(64).unwrap();
        let gate = ctx.user_event().unwrap();
        let gated = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
        // SAFETY: a live user event of this context, set once.
        let rc = unsafe {
            cl_sys::clSetUserEventStatus(gate.as_raw() as cl_sys::cl_event, CANCELLED)
        };
        assert_eq!(rc, 0);
        // Some drivers (NVIDIA) fail a dependent command a moment after its gate.
        assert!(gated.wait().is_err());
        drop(gated);
        other_queue.fill(&buf, 2).unwrap().wait().unwrap();
        assert_eq!(other_queue.read_owned(&buf).unwrap().wait().unwrap()[0], 2);
        std::mem::forget(gate); // set through the raw handle; its Drop would set it again
    }
}

/// Fails a gate through a raw handle while three threads read, on their own queue and on
/// the gate's, the buffers that commands behind the gate fill: `adopted` makes the gate a
/// user event made outside the library and adopted with `Event::from_raw`, otherwise it
/// is a `UserEvent` failed through `as_raw()`. Every read must end, with the fill's data
/// or a typed failure.
fn fail_a_raw_gate_under_racing_reads(adopted: bool) {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let rounds: usize = std::env::var("CL_LIFETIME_RAW_GATE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    for round in 0..rounds {
        let gated_queue = ctx.queue().expect("a queue");
        let bufs: Vec<_> = (0..4)
            .map(|_| ctx.buffer::<u32>(256).expect("a buffer"))
            .collect();
        let (library_gate, foreign_gate) = if adopted {
            let mut rc = 0;
            // SAFETY: a live context; the one reference made is handed to the `Event`.
            let raw =
                unsafe { cl_sys::clCreateUserEvent(ctx.as_raw() as cl_sys::cl_context, &mut rc) };
            assert_eq!(rc, 0);
            // SAFETY: a user event just made, whose one reference is handed over.
            (
                None,
                Some(unsafe { cl_lifetime::Event::from_raw_owned(raw as _) }),
            )
        } else {
            (Some(ctx.user_event().expect("a gate")), None)
        };
        let gate: &cl_lifetime::Event = match (&library_gate, &foreign_gate) {
            (Some(g), _) => g.event(),
            (_, Some(e)) => e,
            _ => unreachable!(),
        };
        for buf in &bufs {
            gated_queue
                .after(&[gate])
                .fill(buf, 1)
                .expect("a fill behind the gate");
        }
        let raw = gate.as_raw() as usize;
        let failed_reads = std::thread::scope(|s| {
            let workers: Vec<_> = (0..3)
                .map(|t| {
                    let (ctx, bufs, gated_queue) = (&ctx, &bufs, &gated_queue);
                    s.spawn(move || {
                        let own = ctx.queue().expect("a queue");
                        let mut failed = 0;
                        for i in 0..24 {
                            let buf = &bufs[(t + i) % bufs.len()];
                            let queue = if i % 2 == 0 { &own } else { gated_queue };
                            match queue.read_owned(buf).and_then(|read| read.wait()) {
                                Ok(data) => assert!(data.iter().all(|&x| x == 1), "round {round}"),
                                Err(
                                    Error::DependencyFailed { .. } | Error::CommandFailed { .. },
                                ) => {
                                    failed += 1;
                                }
                                Err(e) => panic!("round {round}: {e:?}"),
                            }
                        }
                        failed
                    })
                })
                .collect();
            for _ in 0..(round % 7) * 50 {
                std::hint::spin_loop();
            }
            // SAFETY: a live user event of this context, set once.
            let rc = unsafe { cl_sys::clSetUserEventStatus(raw as cl_sys::cl_event, CANCELLED) };
            assert_eq!(rc, 0);
            workers
                .into_iter()
                .map(|w| w.join().expect("a reader"))
                .sum::<usize>()
        });
        assert!(
            failed_reads > 0,
            "round {round}: no read saw the failed fill"
        );
        // Set through its raw handle: its drop finds it set, and logs nothing.
        drop(library_gate);
        for buf in bufs {
            buf.release().expect("a release");
        }
    }
}

isolated_test! {
    /// Another library (or the program's own C code) fails a gate through its raw handle
    /// while threads enqueue behind the gate's dependents: a driver that never runs a
    /// command whose wait list holds a failed event (PoCL leaves it queued for good) would
    /// hold an enqueue that read the dependency's status just before the failure.
    fn a_gate_failed_through_its_raw_handle_while_threads_enqueue_behind_it_hangs_no_thread() {
        fail_a_raw_gate_under_racing_reads(false);
    }
}

isolated_test! {
    /// As above, with a user event made outside the library and adopted.
    fn an_adopted_user_event_failed_while_threads_enqueue_behind_it_hangs_no_thread() {
        fail_a_raw_gate_under_racing_reads(true);
    }
}

// 4. Drops in natural order, on unwind, and a context dropped with a held closed gate.

isolated_test! {
    fn a_buffer_dropped_before_its_closed_gate_in_natural_order_does_not_hang() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let queue = ctx.queue().unwrap();
        {
            let gate = ctx.user_event().unwrap();
            let buf = ctx.buffer::<u32>(1 << 16).unwrap();
            queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
            // The scope ends: `buf` drops first, then `gate`.
        }
        ctx.wait_deferred();
        assert_eq!(ctx.memory_stats().live_bytes, 0);
        assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
    }
}

isolated_test! {
    fn a_buffer_dropped_before_its_closed_gate_on_unwind_does_not_hang() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let queue = ctx.queue().unwrap();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let gate = ctx.user_event().unwrap();
            let buf = ctx.buffer::<u32>(1 << 16).unwrap();
            queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
            panic!("the caller's code fails here");
        }));
        assert!(unwound.is_err());
        ctx.wait_deferred();
        assert_eq!(ctx.memory_stats().live_bytes, 0);
    }
}

// A panic while a `PendingRead` was alive behind a user event never set blocked the
// program for ever, with no log line (its drop waited for the read).
isolated_test! {
    fn a_pending_read_dropped_before_its_closed_gate_on_unwind_does_not_hang() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer_from(&[3u32; 1 << 16]).unwrap();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let gate = ctx.user_event().unwrap();
            let _read = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
            panic!("the caller's code fails here");
        }));
        assert!(unwound.is_err());
        // The read's memory is with the library's thread until the read has ended.
        ctx.wait_deferred();
        assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), vec![3; 1 << 16]);
    }
}

// Every handle whose drop can wait (a buffer, a pooled buffer, an arena's buffer, a pending
// read, a deferred release, a queue, a pool, an arena, a second context) is unwound past
// while the gate its commands wait behind is still closed: the unwind returns.
isolated_test! {
    fn unwinding_past_every_handle_that_can_wait_behind_a_closed_gate_does_not_hang() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let gate = ctx.user_event().unwrap();
            let queue = ctx.queue().unwrap();
            let deps = [gate.event()];
            let after = queue.after(&deps);
            let buf = ctx.buffer::<u32>(1024).unwrap();
            after.fill(&buf, 1).unwrap();
            let pool = cl_lifetime::Pool::new(&ctx, cl_lifetime::PoolOptions::default()).unwrap();
            let pooled = pool.acquire::<u32>(1024).unwrap();
            after.fill(&pooled, 2).unwrap();
            let arena = cl_lifetime::Arena::new(&ctx, 1 << 16).unwrap();
            let carved = arena.carve::<u32>(256).unwrap();
            after.fill(&carved, 3).unwrap();
            let _read = after.read_owned(&buf).unwrap();
            let deferred = ctx.buffer::<u32>(1024).unwrap();
            after.fill(&deferred, 4).unwrap();
            deferred.release_deferred();
            let other = Context::new(ctx.device()).unwrap();
            let other_gate = other.user_event().unwrap();
            let theirs = other.buffer::<u32>(1024).unwrap();
            other.queue().unwrap().after(&[other_gate.event()]).fill(&theirs, 5).unwrap();
            let _handles = (pooled, carved, theirs, other_gate, other, arena, pool, queue);
            panic!("the caller's code fails here");
        }));
        assert!(unwound.is_err());
        ctx.wait_deferred();
        assert_eq!(ctx.memory_stats().live_bytes, 0);
    }
}

isolated_test! {
    fn a_context_dropped_with_a_deferred_release_behind_a_held_closed_gate_does_not_hang() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let queue = ctx.queue().unwrap();
        let gate = ctx.user_event().unwrap();
        let buf = ctx.buffer::<u32>(1 << 16).unwrap();
        let watch = common::watch(&buf, &[]);
        queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
        buf.release_deferred();
        drop(queue);
        drop(ctx); // must not wait for the gate the caller still holds
        assert!(!watch.fired(), "freed before its command could run");
        gate.complete().unwrap();
        assert!(
            eventually(|| watch.fired()),
            "never freed after the gate opened"
        );
    }
}

#[test]
fn an_explicit_release_behind_a_closed_gate_says_which_gate_it_waits_behind() {
    common::isolated(
        &test_path!(an_explicit_release_behind_a_closed_gate_says_which_gate_it_waits_behind),
        2 * CHILD_LIMIT,
        &[],
        || {
            let ctx = device!();
            if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
                return;
            }
            let queue = ctx.queue().unwrap();
            let gate = ctx.user_event().unwrap();
            let gate_line = line!() - 1;
            let buf = ctx.buffer::<u32>(1024).unwrap();
            queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
            let site = format!("{}:{gate_line}", file!());
            // The release logs from its own thread.
            let names_the_gate = |l: &common::logs::Line| {
                l.message.contains("not set yet") && l.message.contains(&site)
            };
            std::thread::scope(|s| {
                let release = s.spawn(|| buf.release().unwrap());
                let said = eventually(|| !common::logs::lines(names_the_gate).is_empty());
                gate.complete().unwrap();
                release.join().unwrap();
                assert!(
                    said,
                    "no log line named the gate at {site}: {:?}",
                    common::logs::lines(|_| true)
                );
            });
        },
    );
}

// 5. Failed events are let go.

/// Cancels `n` commands on one buffer, as a user cancelling work would: each waits on a
/// gate that is then failed. Returns the resident set size after each tenth, and the most
/// events the library held then.
fn cancel_commands(ctx: &Context, n: usize) -> (Vec<u64>, usize) {
    let queue = ctx.queue().expect("a queue");
    let buf = ctx.buffer::<u32>(256).expect("a buffer");
    let mut rss = Vec::new();
    let mut held = 0;
    for i in 0..n {
        let gate = ctx.user_event().expect("a gate");
        let cancelled = queue
            .after(&[gate.event()])
            .fill(&buf, i as u32)
            .expect("a gated fill");
        gate.fail(CANCELLED).expect("the gate fails");
        if (i + 1) % (n / 10).max(1) == 0 {
            // Some drivers (NVIDIA) fail a dependent command a moment after its gate: the
            // next command on the queue would fail with it.
            assert!(cancelled.wait().is_err());
            queue
                .fill(&buf, 0)
                .and_then(|e| e.wait())
                .expect("a fill after the cancelled ones");
            rss.push(common::rss_bytes().unwrap_or(0));
            held = held.max(cl_lifetime::events_held());
        }
    }
    assert!(buf.record_len() <= 4, "record holds {}", buf.record_len());
    (rss, held)
}

/// The soak: `CL_LIFETIME_SOAK` cancelled commands (default 30,000) leave the library
/// holding a handful of events, however many were cancelled. `make soak` runs 300,000 and
/// also checks the process's memory: flat over the second half (drivers grow their own
/// pools during the first: NVIDIA's rises by about 100 MiB, then stays).
#[test]
fn cancelled_commands_keep_the_process_memory_flat() {
    common::isolated(
        &test_path!(cancelled_commands_keep_the_process_memory_flat),
        Duration::from_secs(600),
        &[],
        || {
            let ctx = device!();
            if common::not_on(&ctx, "oclgrind", common::oclgrind::ECHO) {
                return;
            }
            let soak = std::env::var("CL_LIFETIME_SOAK").ok();
            let n: usize = soak
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(30_000);
            let start = common::rss_bytes().unwrap_or(0);
            let held_before = cl_lifetime::events_held();
            let (rss, held) = cancel_commands(&ctx, n);
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            let curve: Vec<String> = rss.iter().map(|&b| format!("{:.1}", mib(b))).collect();
            println!(
                "soak: {n} cancelled commands; events held {held_before} before, at most {held} during; \
                 RSS MiB at start {:.1}, after each tenth: {}",
                mib(start),
                curve.join(" ")
            );
            // Not in proportion to `n`: at each checkpoint (every tenth, after waiting for
            // the cancelled commands) the library holds no more than one tenth's commands.
            // A record keeps up to twice its live entries between prunes (the tracker's *pruning* rule),
            // so a driver that fails dependent commands a moment after their gate (NVIDIA,
            // a backlog of hundreds) leaves more than one that fails them at once (PoCL).
            assert!(
                held <= held_before + n / 10 + 64,
                "the library held {held} events"
            );
            if soak.is_some() {
                let grown = rss[rss.len() - 1].saturating_sub(rss[rss.len() / 2 - 1]);
                assert!(
                    grown < 4 << 20,
                    "the process grew {:.1} MiB over the second half: {curve:?}",
                    mib(grown)
                );
            }
        },
    );
}

// 6. Host memory lent to a write goes when the write has ended.

isolated_test! {
    fn write_owned_host_memory_goes_once_its_write_has_ended() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::MEMORY) {
            return;
        }
        let queue = ctx.queue().unwrap();
        let len = 16 << 20; // 64 MiB of u32
        let buf = ctx.buffer::<u32>(len).unwrap();
        queue.fill(&buf, 0).unwrap().wait().unwrap();
        let before = common::rss_bytes().unwrap();
        for i in 0..6 {
            queue
                .write_owned(&buf, vec![i; len])
                .unwrap()
                .wait()
                .unwrap();
        }
        queue.fill_range(&buf, 9, 0..1).unwrap().wait().unwrap();
        let after = common::rss_bytes().unwrap();
        let held = after.saturating_sub(before) >> 20;
        assert!(held < 70, "{held} MiB of host memory still held");
        drop(buf);
    }
}

// 7. Data that depends on a failed command is an error naming that command.

/// A buffer whose last write (a fill on `queue`) failed.
fn failed_fill(ctx: &Context, queue: &Queue) -> cl_lifetime::ClBuffer<u32> {
    let buf = ctx.buffer_from(&[5u32; 64]).expect("a buffer");
    let gate = ctx.user_event().expect("a gate");
    queue
        .after(&[gate.event()])
        .fill(&buf, 1)
        .expect("a gated fill");
    gate.fail(CANCELLED).expect("the gate fails");
    buf
}

/// Checks that `result` is the error of the failed fill of [`failed_fill`]'s buffer,
/// naming the buffer by where it was allocated.
#[track_caller]
fn names_the_failed_fill(result: Result<impl std::fmt::Debug, Error>) {
    match result {
        Err(
            err @ Error::DependencyFailed {
                command: CommandKind::Fill,
                buffer: Some(site),
                dependency: None,
                ..
            },
        ) => {
            assert!(site.file().ends_with("failures.rs"), "{site}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("the buffer allocated at {site}")) && text.contains("Fill"),
                "{text}"
            );
        }
        other => panic!("expected DependencyFailed naming the fill and its buffer, got {other:?}"),
    }
}

isolated_test! {
    fn a_read_after_a_failed_write_is_an_error_naming_that_write_and_its_buffer() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let buf = failed_fill(&ctx, &queue);
        let mut out = [0u32; 64];
        names_the_failed_fill(queue.read(&buf, &mut out));
        names_the_failed_fill(other_queue.read(&buf, &mut out));
        names_the_failed_fill(queue.read_owned(&buf).and_then(|r| r.wait()));
        names_the_failed_fill(queue.map(&buf, 0..64).map(|m| m[0]));
        // A copy from it is refused too; a write that replaces it clears it.
        let dst = ctx.buffer::<u32>(64).unwrap();
        names_the_failed_fill(queue.copy(&buf, &dst));
        queue.write(&buf, &[8; 64]).unwrap();
        assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), [8; 64]);
    }
}

isolated_test! {
    fn a_partial_write_after_a_failed_write_leaves_the_rest_unreadable() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let buf = failed_fill(&ctx, &queue);
        let mut out = [0u32; 64];
        // Returns once the fill has ended (NVIDIA fails it a moment after its gate; a
        // command enqueued before then would wait on it and fail with it).
        names_the_failed_fill(queue.read(&buf, &mut out));
        // Half of it written again: the other half is still what the failed fill left.
        other_queue.fill_range(&buf, 7, 0..32).unwrap().wait().unwrap();
        other_queue.write_at(&buf, 32, &[8; 16]).unwrap();
        names_the_failed_fill(other_queue.read(&buf, &mut out));
        names_the_failed_fill(queue.read_owned_range(&buf, 0..16).and_then(|r| r.wait()));
        // All of it written: readable again.
        other_queue.fill(&buf, 9).unwrap();
        assert_eq!(other_queue.read_owned(&buf).unwrap().wait().unwrap(), [9; 64]);
    }
}

isolated_test! {
    fn a_read_enqueued_before_its_write_failed_is_an_error_naming_that_write() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let (queue, other_queue) = queues(&ctx);
        for reader in [&queue, &other_queue] {
            let buf = ctx.buffer_from(&[5u32; 64]).unwrap();
            let gate = ctx.user_event().unwrap();
            queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
            let pending = reader.read_owned(&buf).unwrap();
            gate.fail(CANCELLED).unwrap();
            names_the_failed_fill(pending.wait());
        }
    }
}

/// Reads elements `range` of `buf` on `queue`, waiting for them.
fn read_range(
    queue: &Queue,
    buf: &ClBuffer<u32>,
    range: std::ops::Range<usize>,
) -> Result<Vec<u32>, Error> {
    queue.read_owned_range(buf, range).and_then(|r| r.wait())
}

fn names_the_failed_copy(result: Result<impl std::fmt::Debug, Error>) {
    match result {
        Err(Error::DependencyFailed {
            command: CommandKind::Copy,
            ..
        }) => {}
        other => panic!("expected DependencyFailed naming the copy, got {other:?}"),
    }
}

isolated_test! {
    /// A copy from elements 0..2 onto 14..16 of one buffer reads 0..2 and writes 14..16:
    /// when it fails, reads of its source and of the elements it never touched (2..14)
    /// succeed, whether enqueued before it failed (they never wait on it) or after, on
    /// its queue or another; only a read of 14..16 is refused, naming it.
    fn a_failed_command_that_touched_two_ranges_refuses_only_the_bytes_it_wrote() {
        let ctx = device!();
        let (queue, other_queue) = queues(&ctx);
        let data: Vec<u32> = (0..16).collect();
        let buf = ctx.buffer_from(&data).unwrap();
        let gate = ctx.user_event().unwrap();
        let copy = queue
            .after(&[gate.event()])
            .copy_range(&buf, 0, &buf, 14, 2)
            .unwrap();
        if !common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            // Enqueued while the copy waits: they end before its gate is set.
            let source = other_queue.read_owned_range(&buf, 0..2).unwrap();
            let untouched = other_queue.read_owned_range(&buf, 2..14).unwrap();
            other_queue.flush().unwrap();
            assert!(
                eventually(|| source.event().is_terminal() && untouched.event().is_terminal()),
                "a read of the copy's source or of elements it never touched waited on it"
            );
            assert_eq!(source.wait().unwrap(), data[0..2]);
            assert_eq!(untouched.wait().unwrap(), data[2..14]);
        }
        gate.fail(CANCELLED).unwrap();
        assert!(copy.wait().is_err(), "the copy behind a failed gate succeeded");
        for reader in [&queue, &other_queue] {
            assert_eq!(read_range(reader, &buf, 0..2).unwrap(), data[0..2]);
            assert_eq!(read_range(reader, &buf, 2..14).unwrap(), data[2..14]);
            names_the_failed_copy(read_range(reader, &buf, 14..16));
            names_the_failed_copy(read_range(reader, &buf, 13..15));
        }
        // The same through views of each end.
        let view = buf.view(0..8).unwrap();
        assert_eq!(reader_of(&other_queue, view), data[0..8]);
        names_the_failed_copy(other_queue.read_owned(buf.view(8..).unwrap()).and_then(|r| r.wait()));
        let report = buf.release().unwrap();
        assert_eq!(report.failed.len(), 1, "{report:?}");
    }
}

fn reader_of(queue: &Queue, view: cl_lifetime::View<'_, u32>) -> Vec<u32> {
    queue
        .read_owned(view)
        .and_then(|r| r.wait())
        .expect("a read of the view")
}

isolated_test! {
    /// A copy that read a buffer and failed is in that buffer's release report, whether it
    /// read all of it or a view, and whatever came after it on its queue: here it failed
    /// by following a failed fill of another buffer on its in-order queue, and a read of
    /// the whole buffer on that queue, enqueued once the failure was seen, superseded it.
    fn every_failed_command_that_touched_a_buffer_through_a_view_or_not_is_in_its_release_report() {
        let ctx = device!();
        let u = common::sub_buffer_unit(&ctx);
        for through in ["the whole buffer", "a view"] {
            let queue = ctx.queue().unwrap();
            let b = ctx.buffer_from(&vec![3u32; 2 * u]).unwrap();
            let dst = ctx.buffer_from(&vec![4u32; 2 * u]).unwrap();
            let other = ctx.buffer_from(&vec![5u32; 2 * u]).unwrap();
            let gate = ctx.user_event().unwrap();
            queue.after(&[gate.event()]).fill(&other, 1).unwrap();
            let copy = match through {
                "a view" => queue.copy(b.view(0..u).unwrap(), &dst),
                _ => queue.copy(&b, &dst),
            }
            .unwrap();
            gate.fail(CANCELLED).unwrap();
            // Intel's CPU runtime runs a command behind a failed one (design trap "Intel
            // runs a command behind a failed one"): then the copy did not fail.
            let copy_failed = copy.wait().is_err();
            drop(copy);
            assert_eq!(common::contents(&queue, &b), vec![3; 2 * u], "{through}");
            let report = b.release().unwrap();
            let failed: Vec<_> = report.failed.iter().map(|f| f.command).collect();
            let expected: &[CommandKind] = if copy_failed { &[CommandKind::Copy] } else { &[] };
            assert_eq!(failed, expected, "{through}: {report:?}");
            let report = dst.release().unwrap();
            assert_eq!(report.failed.len(), usize::from(copy_failed), "{through}: {report:?}");
            assert_eq!(other.release().unwrap().failed.len(), 1, "{through}");
        }
    }
}

/// Why a test of [`over_a_released_pattern`] did not run.
const NO_TAKEOVER: &str = "the reaper freed every released buffer before a new one took it over";

/// A new buffer (`Context::buffer`, zeroed before its first read) of `len` elements that
/// took over the memory of a deferred release holding `pattern(len, seed)` (the reaper's
/// *reclaim* rule), or `None` when the reaper freed that memory first in every round.
fn over_a_released_pattern(
    ctx: &Context,
    queue: &Queue,
    len: usize,
    seed: u32,
) -> Option<cl_lifetime::ClBuffer<u32>> {
    for _ in 0..50 {
        let old = ctx.buffer::<u32>(len).expect("a buffer");
        queue
            .write(&old, &common::pattern(len, seed))
            .expect("the pattern");
        old.release_deferred();
        let before = ctx.memory_stats().reclaimed;
        let new = ctx.buffer::<u32>(len).expect("a new buffer");
        if ctx.memory_stats().reclaimed > before {
            return Some(new);
        }
        drop(new);
        ctx.wait_deferred();
    }
    None
}

// The *zeroed before read* rule holds for a buffer whose first command, a write of all of
// it, was refused (here for a dependency that had failed): the refused command changes
// nothing, so the buffer's first read still reads zeros, not the bytes of the buffer
// whose memory it took over.
isolated_test! {
    fn a_refused_whole_buffer_write_keeps_the_zeroed_before_read_promise() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let failed = ctx.user_event().unwrap();
        failed.fail(CANCELLED).unwrap();
        let len = 1024;
        for (seed, what) in ["fill", "write"].into_iter().enumerate() {
            let Some(buf) = over_a_released_pattern(&ctx, &queue, len, seed as u32) else {
                common::not_run(NO_TAKEOVER);
                return;
            };
            let deps = [failed.event()];
            let after_failed = queue.after(&deps);
            let refused = match what {
                "fill" => after_failed.fill(&buf, 7).map(drop),
                _ => after_failed.write(&buf, &[7; 1024]),
            };
            let err = refused.expect_err("a command behind a failed gate is refused");
            assert!(matches!(err, Error::DependencyFailed { .. }), "{what}: {err:?}");
            let got = common::contents(&queue, &buf);
            let foreign = got.iter().filter(|&&x| x != 0).count();
            assert_eq!(
                foreign, 0,
                "after a refused whole-buffer {what}, the new buffer read {foreign} of {len} \
                 words that are not zero (the released buffer's pattern: {})",
                got == common::pattern(len, seed as u32)
            );
        }
    }
}

// A write of all of a new buffer that was enqueued and then failed (its gate failed)
// leaves the buffer unreadable, as every failed write does (the *failed write* rule): a
// read is refused, never handed the bytes of the buffer whose memory it took over, and so
// is a read of any part after a partial write, until a write of all of it.
isolated_test! {
    fn a_whole_buffer_write_that_failed_never_hands_a_read_another_buffers_bytes() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let queue = ctx.queue().unwrap();
        let len = 1024;
        let Some(buf) = over_a_released_pattern(&ctx, &queue, len, 3) else {
            common::not_run(NO_TAKEOVER);
            return;
        };
        let gate = ctx.user_event().unwrap();
        queue.after(&[gate.event()]).fill(&buf, 7u32).unwrap();
        gate.fail(CANCELLED).unwrap();
        names_the_failed_fill(queue.read_owned(&buf).and_then(|r| r.wait()));
        queue.write_at(&buf, 0, &[8; 16]).unwrap();
        for range in [0..16, 16..len, 0..len] {
            names_the_failed_fill(queue.read_owned_range(&buf, range).and_then(|r| r.wait()));
        }
        queue.write(&buf, &common::ramp(len, 5)).unwrap();
        assert_eq!(common::contents(&queue, &buf), common::ramp(len, 5));
    }
}

// 9. The reaper frees what has finished first.

isolated_test! {
    fn an_idle_buffer_released_deferred_is_freed_before_a_busy_one_released_earlier() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let (queue, other_queue) = queues(&ctx);
        let gate = ctx.user_event().unwrap();
        let busy = ctx.buffer::<u8>(1 << 20).unwrap();
        let idle = ctx.buffer::<u8>(1 << 16).unwrap();
        queue.after(&[gate.event()]).fill(&busy, 1).unwrap();
        other_queue.fill(&idle, 2).unwrap().wait().unwrap();
        busy.release_deferred();
        idle.release_deferred();
        let freed_first = eventually(|| ctx.memory_stats().pending_release_bytes == 1 << 20);
        gate.complete().unwrap();
        ctx.wait_deferred();
        assert!(freed_first, "the idle buffer waited behind the busy one");
        assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
    }
}

isolated_test! {
    fn a_forgotten_mapping_costs_its_own_release_the_configured_grace_and_no_one_elses() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        ctx.set_free_grace(Duration::from_millis(300));
        assert_eq!(ctx.free_grace(), Duration::from_millis(300));

        // A blocking release reports the time it spent in the grace.
        let mapped = ctx.buffer_from(&[1u32; 256]).unwrap();
        std::mem::forget(queue.map(&mapped, 0..256).unwrap());
        let report = mapped.release().unwrap();
        println!("release of a buffer with a forgotten mapping: {report:?}");
        // PoCL keeps a mapped buffer; a driver that does not frees it at once.
        assert!(
            report.freed || report.free_wait >= Duration::from_millis(300),
            "{report:?}"
        );
        assert!(report.free_wait < Duration::from_secs(2), "{report:?}");

        // On the reaper, a stalled free does not hold up the next release.
        let stalled = ctx.buffer_from(&[1u32; 256]).unwrap();
        std::mem::forget(queue.map(&stalled, 0..256).unwrap());
        let idle = ctx.buffer::<u8>(1 << 20).unwrap();
        queue.fill(&idle, 0).unwrap().wait().unwrap();
        stalled.release_deferred();
        idle.release_deferred();
        assert!(
            eventually(|| ctx.memory_stats().pending_release_bytes < 1 << 20),
            "the idle buffer waited behind the stalled one"
        );
        ctx.wait_deferred();
    }
}

// 10. OpenCL 1.x devices get the OpenCL 1.x entry points.

/// Where Debian's `oclgrind` package puts its ICD library.
const OCLGRIND_ICD: &str = "/usr/lib/oclgrind/liboclgrind-rt-icd.so";

/// Runs `body` in a child process whose only OpenCL platform is Oclgrind (an OpenCL 1.2
/// implementation that runs nothing before a flush); skipped where Oclgrind is not
/// installed, unless `CL_LIFETIME_REQUIRE_OCLGRIND=1` (set by CI).
fn on_oclgrind(name: &str, body: impl FnOnce()) {
    if !std::path::Path::new(OCLGRIND_ICD).exists() {
        assert_ne!(
            std::env::var("CL_LIFETIME_REQUIRE_OCLGRIND").as_deref(),
            Ok("1"),
            "CL_LIFETIME_REQUIRE_OCLGRIND=1 but {OCLGRIND_ICD} is missing (apt-get install oclgrind)"
        );
        common::not_run("Oclgrind (an OpenCL 1.2 platform) is not installed");
        return;
    }
    // Oclgrind alone, registered for the child only.
    let vendors = common::TempDir::new("oclgrind-vendors");
    std::fs::write(
        vendors.path().join("oclgrind.icd"),
        format!("{OCLGRIND_ICD}\n"),
    )
    .expect("write the ICD file");
    let vendors = vendors.path().to_str().expect("a UTF-8 path").to_string();
    let env = [
        ("OCL_ICD_VENDORS", vendors.as_str()),
        ("CL_LIFETIME_DEVICE", "oclgrind"),
    ];
    common::isolated(name, CHILD_LIMIT, &env, body);
}

#[test]
fn a_queue_on_an_opencl_1_2_device_is_created_without_the_2_0_entry_point() {
    on_oclgrind(
        &test_path!(a_queue_on_an_opencl_1_2_device_is_created_without_the_2_0_entry_point),
        || {
            let ctx = Context::from_env().expect("Oclgrind's device");
            let version = ctx.device().version().to_string();
            assert!(version.starts_with("OpenCL 1."), "{version}");
            let queue = ctx.queue().unwrap();
            let buf = ctx.buffer::<u32>(16).unwrap();
            queue.fill(&buf, 3).unwrap().wait().unwrap();
            assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), [3; 16]);
            buf.release().unwrap();
        },
    );
}

// A deferred release polls its commands' status on the library's thread, which flushes
// nothing: it flushes their queues first, or a command never flushed never runs.

#[test]
fn a_deferred_release_flushes_the_queues_of_its_commands() {
    on_oclgrind(
        &test_path!(a_deferred_release_flushes_the_queues_of_its_commands),
        || {
            let ctx = Context::from_env().expect("Oclgrind's device");
            let queue = ctx.queue().unwrap();
            let buf = ctx.buffer::<u32>(16).unwrap();
            queue.fill(&buf, 3).unwrap();
            buf.release_deferred();
            ctx.wait_deferred();
            assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
        },
    );
}

// 8. A failed command fails or leaves alone the commands queued behind it on its queue,
// never reports them complete without running them (design trap "a failure echoes on its
// queue"): NVIDIA's driver skips a command that follows a failed one on the same queue,
// usually reporting it failed and now and then complete.

/// How many rounds the echo test runs: NVIDIA reports a skipped command complete in
/// about one round of a few hundred.
const ECHO_ROUNDS: usize = 400;

/// What a host read of a buffer written with `want` may return after failures around it:
/// the data, or an error that says a command failed. Anything else is described.
fn stale(got: cl_lifetime::Result<Vec<u32>>, want: u32) -> Option<String> {
    match got {
        Ok(v) if v.iter().all(|&x| x == want) => None,
        Ok(v) => Some(format!("read {:?}, not {want}, with no error", &v[..4])),
        Err(Error::DependencyFailed { .. } | Error::CommandFailed { .. }) => None,
        Err(e) => Some(format!("failed with {e}")),
    }
}

isolated_test! {
    fn commands_behind_a_failed_one_on_its_queue_are_never_reported_complete_unrun() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        const N: usize = 33;
        let mut wrong = Vec::new();
        for round in 0..ECHO_ROUNDS {
            let ooo = ctx.out_of_order_queue().unwrap();
            let (gated, reader) = queues(&ctx);
            let a = ctx.buffer_from(&[1u32; N]).unwrap();
            let [b, c, d] = [2u32, 3, 4].map(|v| ctx.buffer_from(&[v; N]).unwrap());
            let gate = ctx.user_event().unwrap();
            // Fails with the gate, on another queue; the fill on `ooo` waits on it (a
            // hazard), so it fails too, on `ooo`.
            gated.after(&[gate.event()]).write_owned(&a, vec![9; N]).unwrap();
            ooo.fill(&a, 5).unwrap();
            // Behind it on `ooo`, enqueued before and after the gate fails; each has no
            // wait list of its own. A copy on another queue reads the last.
            ooo.write_owned(&b, vec![70; N]).unwrap();
            if round % 2 == 0 {
                gate.fail(CANCELLED).unwrap();
            } else {
                drop(gate);
            }
            ooo.write_owned(&c, vec![80; N]).unwrap();
            // Refused when the library knows the write of `c` failed; then `d` keeps its 4.
            let d_want = if reader.copy(&c, &d).is_ok() { 80 } else { 4 };
            for (name, buf, want) in [("b", &b, 70), ("c", &c, 80), ("d", &d, d_want)] {
                if let Some(what) = stale(reader.read_owned(buf).and_then(|r| r.wait()), want) {
                    wrong.push(format!("round {round}, {name}: {what}"));
                }
            }
        }
        assert!(wrong.is_empty(), "{} wrong reads:\n{}", wrong.len(), wrong.join("\n"));
    }
}

isolated_test! {
    // Its own process: no failure is possible there until its gate is made.
    fn a_finished_queue_vouches_only_for_commands_it_waited_for_while_no_failure_was_possible() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer::<u32>(64).unwrap();
        let before = queue.fill(&buf, 1).unwrap();
        queue.finish().unwrap();
        assert_eq!(before.status().unwrap(), Status::Complete);

        let gate = ctx.user_event().unwrap();
        let gated = queue.after(&[gate.event()]).fill(&buf, 2).unwrap();
        assert!(
            !gated.status().unwrap().is_terminal(),
            "a command enqueued after the finish, behind a closed gate, has not ended"
        );
        gate.fail(CANCELLED).unwrap();
        // A finish once a failure is possible vouches for nothing (whether the driver's
        // clFinish reports the failure or not).
        let _ = queue.finish();
        // Failed, or not ended yet where the driver's clFinish returns before it has failed
        // the command (rusticl 22.3): never complete.
        assert_ne!(gated.status().unwrap(), Status::Complete);
        assert!(gated.wait().is_err(), "{:?}", gated.status());
        assert!(matches!(gated.status().unwrap(), Status::Failed(_)));
        let report = buf.release().unwrap();
        assert_eq!(report.failed.len(), 1, "{report:?}");
    }
}

isolated_test! {
    // Intel's CPU runtime frees a command's event, retained or not, when two events of
    // another command's wait list fail together (here the gate, and a copy on another queue
    // behind a fill behind that gate): the library's next status read of the copy crashed
    // the process in the failure schedules. Where a driver is measured to mishandle
    // failures, a command waits on one event at most, the others through markers.
    fn a_command_whose_two_dependencies_fail_together_leaves_every_event_usable() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        // Where events keep their buffers, the failed copy's event, which each buffer's
        // record keeps for its release report, keeps the other buffer: each release here
        // would wait the whole free grace (not this test's subject).
        ctx.set_free_grace(Duration::from_millis(20));
        let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        for _ in 0..10 {
            let x = ctx.buffer_from(&[1u32; 1024]).unwrap();
            let y = ctx.buffer_from(&[2u32; 1024]).unwrap();
            let gate = ctx.user_event().unwrap();
            let fill = first.after(&[gate.event()]).fill(&x, 3).unwrap();
            second.flush().unwrap();
            let copy = second.copy(&x, &y).unwrap();
            second.flush().unwrap();
            // Waits on the copy (a write of `y`) and on the gate.
            let last = first.after(&[gate.event()]).fill(&y, 4).unwrap();
            gate.fail(CANCELLED).unwrap();
            for (what, event) in [("fill", &fill), ("copy", &copy), ("last fill", &last)] {
                assert!(event.wait().is_err(), "the {what} behind the failed gate");
                assert!(matches!(event.status(), Ok(Status::Failed(_))), "{what}");
            }
            drop((fill, copy, last));
            assert!(!x.release().unwrap().failed.is_empty());
            assert!(!y.release().unwrap().failed.is_empty());
        }
    }
}

// The warning for a user event dropped while not set named neither the event nor where it
// was created.
#[test]
fn a_user_event_dropped_unset_is_named_in_the_log_with_where_it_was_created() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let me = std::thread::current().id();
    let (gate, line) = (ctx.user_event().unwrap(), line!());
    let raw = gate.event().as_raw();
    drop(gate);
    let said = common::logs::messages(me, "cl_lifetime::event");
    let site = format!("{}:{line}", file!());
    assert!(
        said.iter()
            .any(|m| m.contains(&format!("{raw:p}")) && m.contains(&site)),
        "no warning names {raw:p} and {site}: {said:?}"
    );
}

// Current Mesa's rusticl keeps a queue's first failure and fails every later command of
// that queue with it: a fill after a cancelled command failed, and so did every command of
// the library's own on that queue (pool reuse, staging). Run here under the project's
// driver emulator (`make emulate`, profile `mesa`), in a child process whose OpenCL library
// is the emulator over this device's driver.
#[test]
fn a_queue_whose_driver_fails_every_command_after_a_failure_runs_the_next_command() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let name =
        test_path!(a_queue_whose_driver_fails_every_command_after_a_failure_runs_the_next_command);
    common::under_emulation(ctx, &name, "mesa", || {
        let ctx = device!();
        assert_eq!(
            ctx.device().platform_name(),
            "rusticl",
            "the emulator is not the OpenCL library of this process"
        );
        let queue = ctx.queue().unwrap();
        let buf = ctx.buffer_from(&[1u32; 64]).unwrap();
        let mut recoveries = Vec::new();
        for round in 0..20u32 {
            let gate = ctx.user_event().unwrap();
            let cancelled = queue.after(&[gate.event()]).fill(&buf, 7).unwrap();
            let failed_at = std::time::Instant::now();
            gate.fail(CANCELLED).unwrap();
            assert!(
                cancelled.wait().is_err(),
                "round {round}: the cancelled fill succeeded"
            );
            // Not behind the failure: runs, on this queue, and so do the library's own
            // commands (a blocking read stages through pinned memory).
            queue.fill(&buf, round).unwrap().wait().unwrap();
            recoveries.push(failed_at.elapsed());
            assert_eq!(
                queue.read_owned(&buf).unwrap().wait().unwrap(),
                vec![round; 64]
            );
            let mut out = [0u32; 8];
            queue.read(&buf, &mut out).unwrap();
            assert_eq!(out, [round; 8], "round {round}");
        }
        recoveries.sort();
        println!(
            "from a failure to the next command of its queue completing: median {:?} (of {})",
            recoveries[recoveries.len() / 2],
            recoveries.len()
        );
        buf.release().unwrap();
    });
}

// Intel's GPU runtime never runs a command enqueued behind an event that has already
// failed (intel/compute-runtime: `EventBuilder::finalize` makes it a child of the failed
// event, and `Event::addChild` unblocks children only of a completed one), nor does PoCL
// 3.1. The library refuses to enqueue behind an event it knows has failed, but a
// dependency that failed between the library's status read and the driver's enqueue
// slipped through, and the command, and a wait on it, hung (2 of 3 runs under the
// emulation, 1 of 4 on PoCL 3.1 itself). Run under the driver emulator (profile
// `intel-gpu`), with gates failed from another thread while commands behind their
// dependents go in.
#[test]
fn a_dependency_failing_during_the_enqueue_never_leaves_a_command_that_never_runs() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    // Intel's GPU runtime fails a gate's dependents inside `clSetUserEventStatus`; the
    // emulation follows it only over a driver that does the same (PoCL does; rusticl fails
    // them later, on its worker thread, where the emulation would hold commands that
    // rusticl itself fails).
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(64).unwrap();
    let at_once = (0..20).all(|_| {
        let gate = ctx.user_event().unwrap();
        let fill = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
        gate.fail(CANCELLED).unwrap();
        let failed = common::raw_status(fill.as_raw() as _) < 0;
        let _ = fill.wait();
        failed
    });
    drop((queue, buf));
    if !at_once {
        common::not_run(
            "the driver here fails a gate's dependents after clSetUserEventStatus returns, \
             where Intel's GPU runtime, which the emulation follows, fails them inside it",
        );
        return;
    }
    let name =
        test_path!(a_dependency_failing_during_the_enqueue_never_leaves_a_command_that_never_runs);
    common::under_emulation(ctx, &name, "intel-gpu", || {
        let ctx = device!();
        assert_eq!(
            ctx.device().platform_name(),
            "Intel(R) OpenCL Graphics",
            "the emulator is not the OpenCL library of this process"
        );
        let (writer, reader) = queues(&ctx);
        let buf = ctx.buffer_from(&[1u32; 64]).unwrap();
        let (mut ran, mut refused) = (0, 0);
        for round in 0..2000u32 {
            let gate = ctx.user_event().unwrap();
            writer.after(&[gate.event()]).fill(&buf, round).unwrap();
            writer.flush().unwrap();
            let failing = std::thread::spawn(move || gate.fail(CANCELLED).unwrap());
            // Waits on the gated fill (a hazard), which fails around now.
            match reader.copy_range(&buf, 0, &buf, 32, 32) {
                Ok(copy) => {
                    let _ = copy.wait();
                    ran += 1;
                }
                Err(_) => refused += 1,
            }
            failing.join().unwrap();
        }
        println!("{ran} copies enqueued and ended, {refused} refused at enqueue");
        buf.release().unwrap();
    });
}

/// Issue 48: "completed work reported failed". One gated fill on an in-order queue fails,
/// `Queue::finish` drains the queue (or a wait sees the fill end), then several threads
/// each write a buffer, launch a kernel reading it and read the result, on that queue.
/// Every one of those commands runs, so none may be reported failed (under current Mesa's
/// behaviour, emulated, on the queue the library renewed after the failure). Before the fix, the
/// threads that enqueued while another thread waited for the settling marker got
/// `DependencyFailed` (`Kernel`, -14) with the right data computed (PoCL 3.1: 2 to 6 of
/// 480 here; 30 of 120 in the program).
#[test]
fn work_after_a_drained_failure_is_never_reported_failed() {
    let Some(ctx) = common::context() else { return };
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let scale = common::busy(&ctx).kernel("scale").unwrap();
    let (threads, rounds) = (4, 30);
    let mut wrong = Vec::new();
    for round in 0..4 {
        let queue = ctx.queue().unwrap();
        let gate = ctx.user_event().unwrap();
        let doomed = ctx.buffer::<f32>(64).unwrap();
        let fill = queue.after(&[gate.event()]).fill(&doomed, 1.0).unwrap();
        gate.fail(-9).unwrap();
        // Drained by `Queue::finish`, or seen ended by a wait on the failed fill: either
        // way every command before the threads' has ended. The failure is the fill's.
        if round % 2 == 0 {
            let _ = queue.finish();
        } else {
            assert!(fill.wait().is_err());
        }
        // The threads start together, so their first enqueues meet the failure's echo at
        // once.
        let start = std::sync::Barrier::new(threads);
        let reports = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (ctx, queue, scale, start) = (&ctx, &queue, &scale, &start);
                    s.spawn(move || {
                        let mut wrong = Vec::new();
                        let input = ctx.buffer::<f32>(256).unwrap();
                        let output = ctx.buffer::<f32>(256).unwrap();
                        start.wait();
                        for i in 0..rounds {
                            let value = (t * rounds + i) as f32;
                            let result = queue
                                .write(&input, &vec![value; 256])
                                // SAFETY: scale touches element i of input and output only where i
                                // < 256, their length, and writes only output.
                                .and_then(|_| unsafe {
                                    queue.launch(
                                        scale,
                                        &[256],
                                        &[
                                            Arg::read(&input),
                                            Arg::write(&output),
                                            Arg::scalar(2.0f32),
                                            Arg::scalar(256u32),
                                        ],
                                    )
                                })
                                .and_then(|_| queue.read_owned(&output)?.wait());
                            match result {
                                Ok(data) if data == vec![value * 2.0; 256] => {}
                                other => wrong.push(format!(
                                    "round {round}, thread {t}, task {i}: {:?}",
                                    other.map(|d| d[0])
                                )),
                            }
                        }
                        wrong
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        wrong.extend(reports);
    }
    assert!(
        wrong.is_empty(),
        "{} of {} tasks reported wrong after a drained failure: {wrong:#?}",
        wrong.len(),
        4 * threads * rounds
    );
}

isolated_test! {
    /// Issue 48: "failed work reported complete". A fill behind a gate that fails never runs;
    /// a kernel that reads the written buffer, and a read of the kernel's output, must never
    /// be reported complete with values computed from what the write would have replaced.
    /// Intel's CPU runtime runs the kernel anyway and reports it complete (6 of 6 runs at the
    /// process's first failure, before the fix); in a child process, so the failure is the
    /// process's first. On one in-order queue and across two queues.
    fn a_kernel_behind_a_failed_write_is_never_reported_complete() {
        let Some(ctx) = common::context() else { return };
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let scale = common::busy(&ctx).kernel("scale").unwrap();
        let mut wrong = Vec::new();
        for round in 0..6 {
            let (writer, runner) = (ctx.queue().unwrap(), ctx.queue().unwrap());
            let runner = if round % 2 == 0 { &writer } else { &runner };
            let input = ctx.buffer::<f32>(256).unwrap();
            let output = ctx.buffer::<f32>(256).unwrap();
            let gate = ctx.user_event().unwrap();
            let written = writer.after(&[gate.event()]).fill(&input, 3.0f32);
            let launched = written.and_then(|_| {
                // SAFETY: scale touches element i of input and output only where i < 256, their
                // length, and writes only output.
                unsafe {
                    runner.launch(
                        &scale,
                        &[256],
                        &[
                            Arg::read(&input),
                            Arg::write(&output),
                            Arg::scalar(2.0f32),
                            Arg::scalar(256u32),
                        ],
                    )
                }
            });
            let kernel = launched.unwrap();
            gate.fail(-9).unwrap();
            let ended = kernel.wait();
            let read = runner.read_owned(&output).and_then(|r| r.wait());
            match (&ended, &read) {
                (Err(_), Err(_)) => {}
                _ => wrong.push(format!(
                    "round {round}: kernel {ended:?}, read {:?}",
                    read.as_ref().map(|d| d[0])
                )),
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}

isolated_test! {
    /// Issue 49: PoCL 3.1 aborts in `pocl_update_event_failed` when a command whose last
    /// reference went fails with a command behind it (design trap "PoCL's failed pending
    /// event", `examples/pocl_failed_pending_event.rs`). Here the program keeps no event: a
    /// fill behind a gate, a kernel on that buffer (it fails with the fill through the queue's
    /// order), then a whole fill, which takes the kernel's place in the buffer's record; then
    /// the gate fails. The library keeps the kernel's event until it has ended. In a child
    /// process, so an abort is this test's failure.
    fn a_pending_command_no_one_holds_fails_without_aborting_the_driver() {
        let Some(ctx) = common::context() else { return };
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let increment = common::busy(&ctx).kernel("increment").unwrap();
        for _ in 0..20 {
            let queue = ctx.queue().unwrap();
            let buf = ctx.buffer::<i32>(1024).unwrap();
            let gate = ctx.user_event().unwrap();
            drop(queue.after(&[gate.event()]).fill(&buf, 1).unwrap());
            // Fails with the fill, by its queue's order: no wait list of its own.
            let args = [Arg::read_write(&buf), Arg::scalar(1024u32)];
            // SAFETY: increment touches buf[i] only where i < 1024, its length.
            drop(unsafe { queue.launch(&increment, &[1024], &args) }.unwrap());
            // A whole write: the kernel leaves the buffer's record.
            drop(queue.fill(&buf, 2).unwrap());
            queue.flush().unwrap();
            gate.fail(-9).unwrap();
            assert!(buf.release().unwrap().freed);
        }
    }
}

/// One command of [`random_results_match_the_drivers_statuses_and_a_host_model`]: what the
/// library said of it, the driver's raw status of its event (once ended), whether its
/// inputs were produced in the host model, and whether it is held to the strict rule.
struct Judged {
    what: String,
    said: Result<(), String>,
    raw: Option<i32>,
    produced: bool,
    strict: bool,
}

/// One task of a thread in [`random_results_match_the_drivers_statuses_and_a_host_model`]:
/// how it writes and whether it copies, its gate (`Some(true)`: completed, `Some(false)`:
/// failed), the value written, and whether its read is enqueued only once the gate is set
/// and the commands before the read have ended.
type Task = (u8, Option<bool>, f32, bool);

/// The driver's status of `event` once it has ended (`clWaitForEvents` first: a failed
/// wait of the library's returns as soon as one command failed).
fn raw_ended(event: &cl_lifetime::Event) -> i32 {
    let raw = event.as_raw() as cl_sys::cl_event;
    // SAFETY: `raw` is retained by `event`, which outlives the call; one event is given.
    // Its result is read from the status after it: a failed command returns an error here.
    unsafe { cl_sys::clWaitForEvents(1, &raw) };
    common::raw_status(raw)
}

/// The rules a randomized program's results are held to (issue 48): a command the driver
/// completed whose inputs the model produced is never reported failed (where `strict`: every
/// command of its task was enqueued before any write behind a gate that fails on its queue,
/// since a command run behind a failed one on its queue is suspect on drivers that skip such
/// commands and report them complete); a command whose inputs were not produced is never
/// reported complete, whatever the driver says.
fn judge(judged: &[Judged]) -> Vec<String> {
    let mut wrong = Vec::new();
    for j in judged {
        match (&j.said, j.raw, j.produced) {
            (Err(e), Some(0), true) if j.strict => wrong.push(format!(
                "{}: the driver completed it, reported {e:?}",
                j.what
            )),
            (Ok(()), raw, false) => wrong.push(format!(
                "{}: its inputs were not produced, reported complete (driver: {raw:?})",
                j.what
            )),
            _ => {}
        }
    }
    wrong
}

isolated_test! {
    /// Issue 48: randomized programs on shared queues, each result compared with the
    /// driver's raw status of its command and a host model. Each round fails or completes a
    /// gated fill on one queue and drains it (`Queue::finish`, or a wait on the fill), then
    /// four threads, two per queue, each run tasks at once, the first half on the drained
    /// queue, all four threads together: a write or a fill of an input (behind a gate of the
    /// thread's own, which it then completes or fails, or ungated), a kernel reading it into
    /// an output, now and then a copy of the output, and a read, enqueued before the gate is
    /// set or, half the time, after it and the kernel have ended. A command the driver
    /// completed is never reported failed (unless a write behind a gate that fails was
    /// enqueued on its queue before its task's last command), a command whose inputs were not
    /// produced is never reported complete, and the data of every `Ok` read is the model's.
    /// A new seed each run, printed; `CL_LIFETIME_ORACLE_SEED` replays one and
    /// `CL_LIFETIME_ORACLE_ROUNDS` sets the rounds (24). Runs under every emulated profile
    /// with the suite. On PoCL (and the profiles emulated over it, but the one of a driver
    /// measured to mishandle failures) the threads' own gates are only completed, never
    /// failed: PoCL's double finish (design trap) aborts it otherwise now and then (1 of 30
    /// runs, and once in a full `.ci/run`).
    ///
    /// On the commits before the fixes of issue 48's first two cases it finds both, with this
    /// body (launches not yet `unsafe` there), 24 rounds: "completed work reported failed" at
    /// 844fa98 on PoCL 3.1 (`POCL_DEVICES="pthread pthread" CL_LIFETIME_DEVICE=pocl cargo
    /// test --test integration failures::random_results`) in 16 of 20 runs, a thread's first
    /// write, kernel, copy or read after a drained failure reported failed (-14) though the
    /// driver completed it; "failed work reported complete" at b43122c under the emulated
    /// `intel-cpu` profile (this commit's `make emulate`, the suite's `emulated-intel-cpu`
    /// row) in 10 of 10 runs, in round 0 (the process's first failure): a kernel behind a
    /// failed write, its copy and its read reported complete.
    fn random_results_match_the_drivers_statuses_and_a_host_model() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let Some(ctx) = common::context() else { return };
        if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
            return;
        }
        let seed = std::env::var("CL_LIFETIME_ORACLE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        let rounds: usize = std::env::var("CL_LIFETIME_ORACLE_ROUNDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(24);
        println!("random_results_match_the_drivers_statuses_and_a_host_model: CL_LIFETIME_ORACLE_SEED={seed}");
        let mut rng = common::Rng(seed);
        let scale = common::busy(&ctx).kernel("scale").unwrap();
        let (threads, tasks, n) = (4, 8, 256);
        // Except under a driver measured to mishandle failures (the emulated `intel-cpu`
        // profile over PoCL): there the first failure of the process must be a thread's, to
        // find issue 48's second case, and the double finish is that profile's risk.
        let thread_failures = !common::on_pocl(&ctx) || ctx.driver().mishandles_failures();
        let mut wrong = Vec::new();
        for round in 0..rounds {
            let queues = [ctx.queue().unwrap(), ctx.queue().unwrap()];
            // The drained failure (never in round 0: there the first failure of the process
            // is a thread's gated write, where Intel's CPU runtime ran the kernel behind it).
            let d = rng.below(2);
            let drained = &queues[d];
            let gate = ctx.user_event().unwrap();
            let doomed = ctx.buffer::<f32>(64).unwrap();
            let fill = drained.after(&[gate.event()]).fill(&doomed, 1.0).unwrap();
            if round > 0 && rng.chance(75) {
                gate.fail(-9).unwrap();
            } else {
                gate.complete().unwrap();
            }
            if rng.chance(50) {
                let _ = drained.finish();
            } else {
                let _ = fill.wait();
            }
            // Half the rounds fail no gate of a thread's. On PoCL none does (but see
            // `thread_failures`): a thread's gate
            // failed by the host while the command before its write on the shared queue,
            // another thread's, ends on a worker makes PoCL finish the write twice and abort
            // (design trap "PoCL's double finish", fixed after PoCL 7.1;
            // `examples/pocl_double_finish.rs` aborts it so with raw calls). Each round's
            // drained failure stays: its fill is the first command of its new queue.
            let may_fail = thread_failures && (round == 0 || rng.chance(50));
            let plans: Vec<Vec<Task>> = (0..threads)
                .map(|_| {
                    (0..tasks)
                        .map(|i| {
                            let how = rng.below(4) as u8;
                            // The first tasks after the drain are ungated: their
                            // enqueues meet the failure's echo at once.
                            let gated = (i >= tasks / 2 && rng.chance(50))
                                .then(|| !(may_fail && rng.chance(50)));
                            let late = gated.is_some() && rng.chance(50);
                            (how, gated, (rng.below(1000) + i) as f32, late)
                        })
                        .collect()
                })
                .collect();
            // Per queue: whether a write behind a gate that fails has been enqueued on it.
            let failing = [AtomicBool::new(false), AtomicBool::new(false)];
            let start = std::sync::Barrier::new(threads);
            let results: Vec<(usize, Vec<Judged>, Vec<String>)> = std::thread::scope(|s| {
                let handles: Vec<_> = plans
                    .iter()
                    .enumerate()
                    .map(|(t, plan)| {
                        let (ctx, scale, start, queues, failing) =
                            (&ctx, &scale, &start, &queues, &failing);
                        s.spawn(move || {
                            let mut judged = Vec::new();
                            let mut data_wrong = Vec::new();
                            let input = ctx.buffer::<f32>(n).unwrap();
                            let output = ctx.buffer::<f32>(n).unwrap();
                            let copied = ctx.buffer::<f32>(n).unwrap();
                            start.wait();
                            for (i, &(how, gated, value, late)) in plan.iter().enumerate() {
                                // The first half on the drained queue, all four threads.
                                let q = if i < tasks / 2 { d } else { t % 2 };
                                let queue = &queues[q];
                                let name = |what: &str| format!("round {round}, thread {t}, task {i}: {what}");
                                let gate = gated.map(|_| ctx.user_event().unwrap());
                                let deps: Vec<&cl_lifetime::Event> =
                                    gate.iter().map(|g| g.event()).collect();
                                if gated == Some(false) {
                                    failing[q].store(true, SeqCst);
                                }
                                let after = queue.after(&deps);
                                let written = if how % 2 == 0 {
                                    after.fill(&input, value)
                                } else {
                                    after.write_owned(&input, vec![value; n])
                                };
                                let args = [
                                    Arg::read(&input),
                                    Arg::write(&output),
                                    Arg::scalar(2.0f32),
                                    Arg::scalar(n as u32),
                                ];
                                let launched = written
                                    .as_ref()
                                    .map_err(|e| format!("{e:?}"))
                                    // SAFETY: scale touches element i of input and output only
                                    // where i < n, their length, and writes only output.
                                    .and_then(|_| unsafe { queue.launch(scale, &[n], &args) }.map_err(|e| format!("{e:?}")));
                                let copy = how >= 2;
                                let last = if copy { &copied } else { &output };
                                let copied_event = launched
                                    .as_ref()
                                    .ok()
                                    .filter(|_| copy)
                                    .map(|_| queue.copy(&output, &copied));
                                let readable = matches!(
                                    (&launched, &copied_event),
                                    (Ok(_), None) | (Ok(_), Some(Ok(_)))
                                );
                                let mut read = (readable && !late).then(|| queue.read_owned(last));
                                if let Some(gate) = &gate {
                                    if gated == Some(true) {
                                        gate.complete().unwrap();
                                    } else {
                                        gate.fail(-9).unwrap();
                                    }
                                }
                                let produced = gated != Some(false);
                                let mut task = Vec::new();
                                let mut judge = |what: &str, r: Result<&cl_lifetime::Event, String>| {
                                    let (said, raw) = match r {
                                        Ok(event) => (
                                            event.wait().map_err(|e| format!("{e:?}")),
                                            Some(raw_ended(event)),
                                        ),
                                        Err(e) => (Err(e), None),
                                    };
                                    task.push(Judged { what: name(what), said, raw, produced, strict: false });
                                };
                                judge("write", written.as_ref().map_err(|e| format!("{e:?}")));
                                judge("kernel", launched.as_ref().map_err(Clone::clone));
                                if let Some(c) = &copied_event {
                                    judge("copy", c.as_ref().map_err(|e| format!("{e:?}")));
                                }
                                // A late read: enqueued once the gate is set and the
                                // commands before it have ended.
                                if readable && late {
                                    read = Some(queue.read_owned(last));
                                }
                                // Every command of the task is enqueued: held to the strict
                                // rule if no write that fails was enqueued before on its queue.
                                let strict = !failing[q].load(SeqCst);
                                if let Some(read) = read {
                                    let (said, raw) = match read {
                                        Ok(pending) => {
                                            let raw = raw_ended(pending.event());
                                            match pending.wait() {
                                                Ok(data) => {
                                                    if produced && data != vec![2.0 * value; n] {
                                                        data_wrong.push(name(&format!(
                                                            "read Ok({}), the model says {}",
                                                            data[0],
                                                            2.0 * value
                                                        )));
                                                    }
                                                    (Ok(()), Some(raw))
                                                }
                                                Err(e) => (Err(format!("{e:?}")), Some(raw)),
                                            }
                                        }
                                        Err(e) => (Err(format!("{e:?}")), None),
                                    };
                                    task.push(Judged { what: name("read"), said, raw, produced, strict });
                                }
                                judged.extend(task.into_iter().map(|j| Judged { strict, ..j }));
                            }
                            (t, judged, data_wrong)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (t, judged, data_wrong) in results {
                let failed = judged.iter().filter(|j| j.said.is_err()).count();
                println!("round {round}, thread {t}: {} commands, {failed} reported failed", judged.len());
                wrong.extend(judge(&judged));
                wrong.extend(data_wrong);
            }
        }
        assert!(wrong.is_empty(), "seed {seed}: {wrong:#?}");
    }
}

// The gates' *one set at a time* rule (design trap "PoCL's double finish"): user events
// set from several threads at once, most failed, while each command behind one also
// follows the command before it on their shared in-order queue, which another thread's
// gate decides. PoCL 3.1 finished such a command twice when its own gate and the command
// before it ended at the same moment (aborts in `pocl_update_event_finished`, or a
// SIGSEGV in `pocl_broadcast`, inside `clSetUserEventStatus`). Every command ends, and
// the driver survives.
isolated_test! {
    fn gates_set_from_several_threads_at_once_never_finish_a_command_twice() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
            return;
        }
        let rounds: usize = std::env::var("CL_LIFETIME_SET_ROUNDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(40);
        let (threads, per_round) = (4, 64);
        for round in 0..rounds {
            // A fresh queue each round: some drivers refuse work on a queue after a failure.
            let queue = ctx.queue().unwrap();
            let gates: Vec<_> = (0..per_round).map(|_| ctx.user_event().unwrap()).collect();
            let bufs: Vec<ClBuffer<u32>> =
                (0..per_round).map(|_| ctx.buffer(16).unwrap()).collect();
            let fills: Vec<_> = gates
                .iter()
                .zip(&bufs)
                .map(|(gate, buf)| queue.after(&[gate.event()]).fill(buf, 1).unwrap())
                .collect();
            queue.flush().unwrap();
            let barrier = std::sync::Barrier::new(threads);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (gates, barrier) = (&gates, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        for (i, gate) in gates.iter().enumerate().skip(t).step_by(threads) {
                            if (i + round) % 5 == 0 {
                                gate.complete().unwrap();
                            } else {
                                gate.fail(-9).unwrap();
                            }
                        }
                    });
                }
            });
            for (i, fill) in fills.iter().enumerate() {
                // Failed or run: a command whose gate completed runs on a worker.
                let _ = fill.wait();
                let status = common::raw_status(fill.as_raw() as _);
                assert!(
                    status <= 0,
                    "round {round}: fill {i} has not ended after every gate was set ({status})"
                );
            }
        }
    }
}
