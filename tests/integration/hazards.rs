//! The hazard rules, proven with user events as gates: every enqueue waits on exactly the
//! commands it conflicts with (read after write, write after read, write after write),
//! reads never wait on reads, an in-order queue's own events are left to the queue, and a
//! producing queue is flushed before another queue waits on it.
//!
//! Order is never inferred from time. A gate holds the first command back; the second is
//! shown to be still blocked while the gate is closed (a bounded WINDOW can only show that
//! something has not happened yet), and the contents after the gate opens show which
//! command ran first.
//!
//! A failing test must end, not hang: a `PendingRead` or a `ClBuffer` dropped waits for
//! its commands, so whatever may wait on a gate is declared before the gate (locals drop
//! in reverse order), and a [`Gate`] dropped while closed opens.

use std::ops::Deref;
use std::sync::{Arc, mpsc};
use std::thread;

use cl_lifetime::tracker::FOLD_AT;
use cl_lifetime::{Access, Arg, Context, Error, Event, Queue, UserEvent};

use crate::common::{self, HANG, WINDOW, contents, ramp};

const N: usize = 1024;

/// A closed gate: a user event. Dropped still closed, as when an assertion fails before
/// it was opened, it opens rather than fails, so the commands behind it end and the test
/// reports its failure: failing them instead aborts the whole test binary on PoCL 3.1
/// (`PTHREAD ERROR in pocl_update_event_failed(): Invalid argument`).
struct Gate(UserEvent);

fn closed_gate(ctx: &Context) -> Gate {
    Gate(ctx.user_event().expect("a user event"))
}

impl Deref for Gate {
    type Target = UserEvent;
    fn deref(&self) -> &UserEvent {
        &self.0
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // An error only says that the test opened it already.
        let _ = self.0.complete();
    }
}

/// Asserts that none of `events` ends within [`WINDOW`]: each is held back by a gate that
/// is still closed.
fn assert_blocked(what: &str, events: &[&Event]) {
    let (tx, rx) = mpsc::channel();
    for event in events {
        let (event, tx) = ((*event).clone(), tx.clone());
        // Ends when the event does; a failing test opens its gates as they drop.
        thread::spawn(move || {
            let _ = event.wait();
            let _ = tx.send(());
        });
    }
    drop(tx);
    assert!(
        rx.recv_timeout(WINDOW).is_err(),
        "{what} ended while its gate was closed"
    );
    for event in events {
        assert!(
            !event.is_terminal(),
            "{what} ended while its gate was closed"
        );
    }
}

/// Runs `f`, a call that must return, on a thread; fails the test after [`HANG`] instead
/// of hanging.
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not return in {HANG:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

fn assert_mapped<T: std::fmt::Debug>(what: &str, result: cl_lifetime::Result<T>) {
    match result {
        Err(Error::Mapped) => {}
        other => panic!("{what}: expected Error::Mapped, got {other:?}"),
    }
}

#[test]
fn read_after_write_on_another_queue_waits() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b, c) = (
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
    );
    let scale = common::busy(&ctx).kernel("scale").unwrap();
    let buf = ctx.buffer_from(&[0.0f32; N]).unwrap();
    let out = ctx.buffer_from(&[0.0f32; N]).unwrap();
    let read;
    let gate = closed_gate(&ctx);

    let fill = a.after(&[gate.event()]).fill(&buf, 7.0f32).unwrap();
    // A transfer and a kernel that read `buf`, each on a queue of its own.
    read = b.read_owned(&buf).unwrap();
    // SAFETY: scale touches element i of buf and out only where i < N, their length, and
    // writes only out.
    let launch = unsafe {
        c.launch(
            &scale,
            &[N],
            &[
                Arg::read(&buf),
                Arg::write(&out),
                Arg::scalar(2.0f32),
                Arg::scalar(N as u32),
            ],
        )
    }
    .unwrap();
    assert_blocked("a read after a gated write", &[read.event(), &launch]);
    assert!(!fill.is_terminal());

    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), vec![7.0f32; N]);
    assert_eq!(contents(&b, &out), vec![14.0f32; N]);
}

#[test]
fn write_after_read_on_another_queue_waits() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b, c) = (
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
    );
    let old = ramp(N, 1);
    let buf = ctx.buffer_from(&old).unwrap();
    let snapshot = ctx.buffer_from(&[0u32; N]).unwrap();
    let gate = closed_gate(&ctx);

    let copy = a.after(&[gate.event()]).copy(&buf, &snapshot).unwrap();
    let fill = b.fill(&buf, 9).unwrap();
    assert_blocked("a fill after a gated copy that reads its buffer", &[&fill]);

    gate.complete().unwrap();
    fill.wait().unwrap();
    copy.wait().unwrap();
    assert_eq!(contents(&b, &snapshot), old, "the copy saw the later fill");
    assert_eq!(contents(&b, &buf), vec![9; N]);

    // Readers on two queues: the write waits for both, not only the newest.
    let (first, second);
    let (first_gate, second_gate) = (closed_gate(&ctx), closed_gate(&ctx));
    first = a.after(&[first_gate.event()]).read_owned(&buf).unwrap();
    second = b.after(&[second_gate.event()]).read_owned(&buf).unwrap();
    let fill = c.fill(&buf, 10).unwrap();
    second_gate.complete().unwrap();
    let seen = returns("a read beside a gated read", move || second.wait().unwrap());
    assert_eq!(seen, vec![9; N]);
    assert_blocked("a fill after two reads, one still gated", &[&fill]);
    first_gate.complete().unwrap();
    assert_eq!(
        first.wait().unwrap(),
        vec![9; N],
        "the read saw the later fill"
    );
    fill.wait().unwrap();
    assert_eq!(contents(&c, &buf), vec![10; N]);
}

#[test]
fn write_after_write_waits() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer_from(&[0u32; N]).unwrap();
    let gate = closed_gate(&ctx);

    let first = a.after(&[gate.event()]).fill(&buf, 1).unwrap();
    let second = b.write_owned(&buf, ramp(N, 2)).unwrap();
    assert_blocked("a write after a gated write", &[&second]);

    gate.complete().unwrap();
    first.wait().unwrap();
    second.wait().unwrap();
    assert_eq!(contents(&a, &buf), ramp(N, 2), "the first write ran last");
}

#[test]
fn read_after_read_on_two_queues_runs_without_waiting() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let scale = common::busy(&ctx).kernel("scale").unwrap();
    let data: Vec<f32> = ramp(N, 3).into_iter().map(|x| x as f32).collect();
    let buf = Arc::new(ctx.buffer_from(&data).unwrap());
    let copy = ctx.buffer_from(&[0.0f32; N]).unwrap();
    let scaled = ctx.buffer_from(&[0.0f32; N]).unwrap();
    let gated;
    let gate = closed_gate(&ctx);

    gated = a.after(&[gate.event()]).read_owned(&buf).unwrap();
    let seen = {
        let (b, buf) = (b.clone(), buf.clone());
        returns("a blocking read beside a gated read", move || {
            let mut out = vec![0.0f32; N];
            b.read(&buf, &mut out).unwrap();
            out
        })
    };
    assert_eq!(seen, data);
    // Nor do a copy and a kernel that read it.
    let copied = b.copy(&buf, &copy).unwrap();
    // SAFETY: scale touches element i of buf and scaled only where i < N, their length, and
    // writes only scaled.
    let launched = unsafe {
        b.launch(
            &scale,
            &[N],
            &[
                Arg::read(&buf),
                Arg::write(&scaled),
                Arg::scalar(2.0f32),
                Arg::scalar(N as u32),
            ],
        )
    }
    .unwrap();
    returns(
        "a copy and a kernel reading a buffer with a gated read",
        move || {
            copied.wait().unwrap();
            launched.wait().unwrap();
        },
    );
    assert_eq!(contents(&b, &copy), data);
    let doubled: Vec<f32> = data.iter().map(|x| x * 2.0).collect();
    assert_eq!(contents(&b, &scaled), doubled);
    assert!(
        !gated.event().is_terminal(),
        "the gated read ran before its gate opened"
    );

    gate.complete().unwrap();
    assert_eq!(gated.wait().unwrap(), data);
}

#[test]
fn reads_on_one_out_of_order_queue_run_without_waiting() {
    let ctx = device!();
    let Ok(queue) = ctx.out_of_order_queue() else {
        common::not_run("the device has no out-of-order queues");
        return;
    };
    let data = ramp(N, 5);
    let buf = ctx.buffer_from(&data).unwrap();
    let gated;
    let gate = closed_gate(&ctx);

    gated = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
    let before = ctx.hazard_stats();
    let free = queue.read_owned(&buf).unwrap();
    // The library's part, on every driver: the second read waits on nothing.
    let after = ctx.hazard_stats();
    assert_eq!(after.enqueues, before.enqueues + 1);
    assert_eq!(
        after.wait_entries, before.wait_entries,
        "a read waited on a read"
    );
    // The device's part, measured rather than named: a driver may accept an out-of-order
    // queue and run it in order (NVIDIA's and rusticl's do: on an H100 and on llvmpipe the
    // free read stayed behind the gated one; design trap "NVIDIA runs out-of-order queues
    // in order"), or drop the flag (AMD's: then the queue reads back in order), and the
    // library makes the queue in order where out of order is unsafe (Intel's CPU runtime).
    // Where the free read ends while the gate is closed, the driver reordered; where it has
    // not ended after two seconds, the driver runs the queue in order. The results are
    // checked either way.
    let reordered = !queue.is_in_order() && {
        let free_event = free.event().clone();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        // Polls a status for a bound; nothing is ordered by this pause.
        while !free_event.is_terminal() && std::time::Instant::now() < deadline {
            thread::sleep(std::time::Duration::from_millis(1));
        }
        free_event.is_terminal()
    };
    if reordered {
        assert!(
            !gated.event().is_terminal(),
            "the gated read ran before its gate"
        );
    } else if !queue.is_in_order() {
        common::not_run(
            "the device's part: the driver runs out-of-order queues in order (a read beside \
             a gated one had not ended after 2 s)",
        );
    }
    gate.complete().unwrap();
    assert_eq!(free.wait().unwrap(), data);
    assert_eq!(gated.wait().unwrap(), data);
}

#[test]
fn same_in_order_queue_gets_no_wait_list() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let buf = ctx.buffer::<u32>(N).unwrap();

    // One in-order queue: write, read, write. Nothing completes before the gate opens,
    // so the record keeps every entry and the counts are exact.
    {
        let queue = ctx.queue().unwrap();
        let read;
        let gate = closed_gate(&ctx);
        let before = ctx.hazard_stats();
        let first = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
        let gated = ctx.hazard_stats();
        assert_eq!(gated.enqueues - before.enqueues, 1);
        assert_eq!(gated.wait_entries - before.wait_entries, 1, "only the gate");
        read = queue.read_owned(&buf).unwrap();
        let last = queue.fill(&buf, 2).unwrap();
        let after = ctx.hazard_stats();
        assert_eq!(after.enqueues - gated.enqueues, 2);
        assert_eq!(
            after.wait_entries - gated.wait_entries,
            0,
            "commands of one in-order queue got a wait list"
        );
        // Without the elision: the read on the write, the second write on both.
        assert_eq!(
            after.wait_entries_without_elision - gated.wait_entries_without_elision,
            3
        );
        assert_blocked(
            "commands behind a gated write on an in-order queue",
            &[read.event(), &last],
        );
        gate.complete().unwrap();
        assert_eq!(read.wait().unwrap(), vec![1; N]);
        first.wait().unwrap();
        assert_eq!(contents(&queue, &buf), vec![2; N]);
    }

    // The same pattern across two queues: the read waits on the write, the second write
    // on the read (its own queue's first write is left out).
    {
        let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        let read;
        let gate = closed_gate(&ctx);
        a.after(&[gate.event()]).fill(&buf, 3).unwrap();
        let gated = ctx.hazard_stats();
        read = b.read_owned(&buf).unwrap();
        let last = a.fill(&buf, 4).unwrap();
        let after = ctx.hazard_stats();
        assert_eq!(after.wait_entries - gated.wait_entries, 2);
        assert_eq!(
            after.wait_entries_without_elision - gated.wait_entries_without_elision,
            3
        );
        assert_blocked(
            "commands behind a gated write on another queue",
            &[read.event(), &last],
        );
        gate.complete().unwrap();
        assert_eq!(read.wait().unwrap(), vec![3; N]);
        last.wait().unwrap();
        assert_eq!(contents(&b, &buf), vec![4; N]);
    }
}

#[test]
fn out_of_order_queue_orders_its_own_hazards() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let Ok(queue) = ctx.out_of_order_queue() else {
        common::not_run("the device has no out-of-order queues");
        return;
    };
    let buf = ctx.buffer_from(&[0u32; N]).unwrap();
    let data = ramp(N, 7);
    let read;
    let gate = closed_gate(&ctx);

    let write = queue
        .after(&[gate.event()])
        .write_owned(&buf, data.clone())
        .unwrap();
    // Read after write, then write after read, all on the one out-of-order queue.
    read = queue.read_owned(&buf).unwrap();
    let fill = queue.fill(&buf, 5).unwrap();
    assert_blocked(
        "commands behind a gated write on an out-of-order queue",
        &[read.event(), &fill],
    );
    assert!(!write.is_terminal());

    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), data);
    fill.wait().unwrap();
    assert_eq!(contents(&queue, &buf), vec![5; N]);
}

#[test]
fn wait_works_across_two_devices() {
    let Some(ctx) = common::two_device_context() else {
        return;
    };
    let (dev0, dev1) = (&ctx.devices()[0], &ctx.devices()[1]);
    assert_ne!(dev0.as_raw(), dev1.as_raw());
    let on0 = ctx.queue_on(dev0, false).unwrap();
    let on1 = ctx.queue_on(dev1, false).unwrap();
    let kernel_on1 = ctx.queue_on(dev1, false).unwrap();
    let scale = common::busy(&ctx).kernel("scale").unwrap();
    let data: Vec<f32> = (0..N).map(|i| i as f32 + 0.5).collect();
    let buf = ctx.buffer_from(&[0.0f32; N]).unwrap();
    let out = ctx.buffer_from(&[0.0f32; N]).unwrap();
    let read;
    let gate = closed_gate(&ctx);

    let write = on0
        .after(&[gate.event()])
        .write_owned(&buf, data.clone())
        .unwrap();
    read = on1.read_owned(&buf).unwrap();
    // SAFETY: scale touches element i of buf and out only where i < N, their length, and
    // writes only out.
    let launch = unsafe {
        kernel_on1.launch(
            &scale,
            &[N],
            &[
                Arg::read(&buf),
                Arg::write(&out),
                Arg::scalar(3.0f32),
                Arg::scalar(N as u32),
            ],
        )
    }
    .unwrap();
    assert_blocked(
        "commands on device 1 after a gated write on device 0",
        &[read.event(), &launch],
    );
    assert!(!write.is_terminal());

    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), data);
    // And back: device 0 reads what the kernel on device 1 wrote.
    let scaled: Vec<f32> = data.iter().map(|x| x * 3.0).collect();
    assert_eq!(contents(&on0, &out), scaled);
}

#[test]
fn producing_queue_is_flushed_before_another_queue_waits() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = Arc::new(ctx.buffer_from(&[0u32; N]).unwrap());
    let data = ramp(N, 11);

    // No flush and no wait on A: only the library's flush submits the write.
    a.write_owned(&buf, data.clone()).unwrap();
    let seen = returns("a blocking read on B after an unflushed write on A", {
        let buf = buf.clone();
        move || {
            let mut out = vec![0; N];
            b.read(&buf, &mut out).unwrap();
            out
        }
    });
    assert_eq!(seen, data);

    // The same through a kernel on A and a user dependency on its event.
    let c = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let counters = ctx.buffer_from(&[0i32; N]).unwrap();
    // SAFETY: increment touches counters[i] only where i < N, its length.
    let launch = unsafe {
        a.launch(
            &increment,
            &[N],
            &[Arg::read_write(&counters), Arg::scalar(N as u32)],
        )
    }
    .unwrap();
    let unrelated = ctx.buffer::<u8>(16).unwrap();
    let marker = c.after(&[&launch]).fill(&unrelated, 1).unwrap();
    returns("a command on C after an unflushed kernel on A", move || {
        marker.wait().unwrap();
    });
    assert!(launch.is_terminal());
}

#[test]
fn user_dependencies_add_to_the_hazards() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());

    // A buffer with no hazards: only the extra dependency holds the command back.
    let fresh = ctx.buffer_from(&[0u32; N]).unwrap();
    let gate = closed_gate(&ctx);
    let fill = b.after(&[gate.event()]).fill(&fresh, 4).unwrap();
    assert_blocked("a command on a fresh buffer after a closed gate", &[&fill]);
    gate.complete().unwrap();
    fill.wait().unwrap();
    assert_eq!(contents(&a, &fresh), vec![4; N]);

    // Hazards and extra dependencies together: opening either alone is not enough.
    let c = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[0u32; N]).unwrap();
    let data = ramp(N, 13);
    let (after_dep, after_hazard);
    let (hazard_gate, dep_gate, other_dep_gate) =
        (closed_gate(&ctx), closed_gate(&ctx), closed_gate(&ctx));
    let write = a
        .after(&[hazard_gate.event()])
        .write_owned(&buf, data.clone())
        .unwrap();
    after_dep = b.after(&[dep_gate.event()]).read_owned(&buf).unwrap();
    after_hazard = c.after(&[other_dep_gate.event()]).read_owned(&buf).unwrap();
    other_dep_gate.complete().unwrap();
    assert_blocked(
        "a read whose dependency ended but whose hazard did not",
        &[after_hazard.event(), after_dep.event()],
    );
    hazard_gate.complete().unwrap();
    write.wait().unwrap();
    assert_blocked(
        "a read whose hazard ended but whose dependency did not",
        &[after_dep.event()],
    );
    let seen = returns("a read whose hazard and dependency both ended", move || {
        after_hazard.wait().unwrap()
    });
    assert_eq!(seen, data);
    dep_gate.complete().unwrap();
    assert_eq!(after_dep.wait().unwrap(), data);

    // An enqueue's event as a dependency on another queue, with no shared buffer.
    let other = ctx.buffer::<u32>(N).unwrap();
    let target = ctx.buffer_from(&[0u32; N]).unwrap();
    let gate = closed_gate(&ctx);
    let upstream = a.after(&[gate.event()]).fill(&other, 1).unwrap();
    let downstream = b.after(&[&upstream]).fill(&target, 6).unwrap();
    assert_blocked("a command after a gated command's event", &[&downstream]);
    gate.complete().unwrap();
    downstream.wait().unwrap();
    assert!(upstream.is_terminal());
    assert_eq!(contents(&b, &target), vec![6; N]);
}

#[test]
fn blocking_map_waits_only_on_writers() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let data = ramp(N, 17);
    let buf = Arc::new(ctx.buffer_from(&data).unwrap());

    // A pending read does not hold a read mapping back.
    let gated;
    let gate = closed_gate(&ctx);
    gated = a.after(&[gate.event()]).read_owned(&buf).unwrap();
    let seen = returns("a map beside a gated read", {
        let (b, buf) = (b.clone(), buf.clone());
        move || b.map(&buf, 0..N).unwrap().to_vec()
    });
    assert_eq!(seen, data);
    assert!(!gated.event().is_terminal());
    gate.complete().unwrap();
    assert_eq!(gated.wait().unwrap(), data);

    // A pending write does.
    let gate = closed_gate(&ctx);
    let written = ramp(N, 19);
    let write = a
        .after(&[gate.event()])
        .write_owned(&buf, written.clone())
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let mapper = thread::spawn({
        let (b, buf) = (b.clone(), buf.clone());
        move || {
            let mapped = b.map(&buf, 0..N).unwrap();
            tx.send(mapped.to_vec()).unwrap();
        }
    });
    assert!(
        rx.recv_timeout(WINDOW).is_err(),
        "a map returned while a write on its buffer was gated"
    );
    assert!(!write.is_terminal());
    gate.complete().unwrap();
    let seen = rx.recv_timeout(HANG).expect("the map returned");
    assert_eq!(seen, written);
    mapper.join().unwrap();
}

#[test]
fn writable_map_waits_on_readers() {
    let ctx = device!();
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let old = ramp(N, 23);
    let buf = Arc::new(ctx.buffer_from(&old).unwrap());
    let gated;
    let gate = closed_gate(&ctx);

    gated = a.after(&[gate.event()]).read_owned(&buf).unwrap();
    let (tx, rx) = mpsc::channel();
    let mapper = thread::spawn({
        let (b, buf) = (b.clone(), buf.clone());
        move || {
            let mut mapped = b.map_mut(&buf, 0..N).unwrap();
            mapped.fill(0);
            tx.send(()).unwrap();
        }
    });
    assert!(
        rx.recv_timeout(WINDOW).is_err(),
        "a writable map returned while a read of its buffer was gated"
    );
    gate.complete().unwrap();
    rx.recv_timeout(HANG).expect("the map returned");
    mapper.join().unwrap();
    assert_eq!(gated.wait().unwrap(), old, "the read saw the host's writes");
    assert_eq!(contents(&a, &buf), vec![0; N]);
}

#[test]
fn map_mut_writes_are_seen_by_later_commands() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b, c) = (
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
    );
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let buf = ctx.buffer_from(&[0i32; N]).unwrap();
    let unrelated = ctx.buffer::<u8>(16).unwrap();
    let read;
    let gate = closed_gate(&ctx);

    let mut mapped = a.map_mut(&buf, 0..N).unwrap();
    for (i, x) in mapped.iter_mut().enumerate() {
        *x = i as i32 * 3;
    }
    // A gated command on another buffer holds in-order queue A, so the unmap that the
    // drop enqueues there waits behind it: later commands must wait for the unmap.
    let hold = a.after(&[gate.event()]).fill(&unrelated, 0).unwrap();
    drop(mapped);
    read = b.read_owned(&buf).unwrap();
    assert_blocked(
        "a read after an unmap held back on its queue",
        &[read.event()],
    );
    gate.complete().unwrap();
    hold.wait().unwrap();
    let expected: Vec<i32> = (0..N as i32).map(|i| i * 3).collect();
    assert_eq!(read.wait().unwrap(), expected);

    // Part of the buffer, then a kernel on a third queue.
    {
        let mut mapped = a.map_mut(&buf, 16..32).unwrap();
        assert_eq!(mapped.len(), 16);
        mapped.fill(-1);
    }
    // SAFETY: increment touches buf[i] only where i < N, its length.
    unsafe {
        c.launch(
            &increment,
            &[N],
            &[Arg::read_write(&buf), Arg::scalar(N as u32)],
        )
    }
    .unwrap();
    let expected: Vec<i32> = (0..N as i32)
        .map(|i| if (16..32).contains(&i) { 0 } else { i * 3 + 1 })
        .collect();
    assert_eq!(contents(&b, &buf), expected);
}

#[test]
fn an_explicit_unmap_returns_the_event_later_commands_wait_on() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer_from(&[0i32; N]).unwrap();
    let unrelated = ctx.buffer::<u8>(16).unwrap();
    let gate = closed_gate(&ctx);

    let mut mapped = a.map_mut(&buf, 0..N).unwrap();
    mapped.fill(7);
    // The gated fill holds in-order queue A, so the unmap waits behind it.
    let hold = a.after(&[gate.event()]).fill(&unrelated, 0).unwrap();
    let unmapped = mapped.unmap().unwrap();
    assert_blocked("an unmap held back on its queue", &[&unmapped]);
    let before_a_read: Vec<_> = buf
        .hazards(Access::Read)
        .iter()
        .map(Event::as_raw)
        .collect();
    assert_eq!(
        before_a_read,
        vec![unmapped.as_raw()],
        "a read waits on the unmap alone"
    );
    let read = b.read_owned(&buf).unwrap();
    assert_blocked("a read after the held unmap", &[read.event()]);
    gate.complete().unwrap();
    hold.wait().unwrap();
    unmapped.wait().unwrap();
    assert_eq!(read.wait().unwrap(), vec![7; N]);
    // Unmapped once: the buffer maps again, and its contents are the host's writes.
    let again = a.map(&buf, 0..N).unwrap();
    assert_eq!(*again, [7; N]);
    again.unmap().unwrap().wait().unwrap();
}

#[test]
fn commands_that_conflict_with_a_mapping_are_refused() {
    let ctx = device!();
    let (q, other_queue) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let buf = ctx.buffer_from(&[1i32; N]).unwrap();
    let other = ctx.buffer_from(&[0i32; N]).unwrap();
    // SAFETY: increment touches buf[i] only where i < N, its length.
    let launch_on = |queue: &Queue| unsafe {
        queue.launch(
            &increment,
            &[N],
            &[Arg::read_write(&buf), Arg::scalar(N as u32)],
        )
    };
    // A device command that only reads `buf`.
    let copy_out = |queue: &Queue| queue.copy(&buf, &other);
    let mut out = vec![0i32; N];

    // Mapped for writing: no device command may touch it, and no other mapping.
    {
        let mut mapped = q.map_mut(&buf, 0..N).unwrap();
        mapped.fill(2);
        for queue in [&q, &other_queue] {
            assert_mapped("fill", queue.fill(&buf, 3));
            assert_mapped("write", queue.write(&buf, &[3; N]));
            assert_mapped("write_owned", queue.write_owned(&buf, vec![3; N]));
            assert_mapped("read", queue.read(&buf, &mut out));
            assert_mapped("read_owned", queue.read_owned(&buf));
            assert_mapped("copy from", copy_out(queue));
            assert_mapped("copy into", queue.copy(&other, &buf));
            assert_mapped("launch", launch_on(queue));
            assert_mapped("map", queue.map(&buf, 0..N));
            assert_mapped("map of another range", queue.map(&buf, 0..1));
            assert_mapped("map_mut", queue.map_mut(&buf, 0..N));
        }
        // Other buffers are not affected.
        q.fill(&other, 5).unwrap();
    }
    // Refused commands left nothing behind: the host's writes are all there.
    assert_eq!(contents(&other_queue, &buf), vec![2; N]);
    assert_eq!(contents(&other_queue, &other), vec![5; N]);

    // Mapped for reading: device reads and more read mappings are allowed, writes are not.
    {
        let mapped = q.map(&buf, 0..N).unwrap();
        let second = other_queue.map(&buf, 0..N / 2).unwrap();
        other_queue.read(&buf, &mut out).unwrap();
        assert_eq!(out, vec![2; N]);
        copy_out(&q).unwrap().wait().unwrap();
        for queue in [&q, &other_queue] {
            assert_mapped("fill", queue.fill(&buf, 3));
            assert_mapped("write", queue.write(&buf, &[3; N]));
            assert_mapped("copy into", queue.copy(&other, &buf));
            assert_mapped("launch", launch_on(queue));
            assert_mapped("map_mut", queue.map_mut(&buf, 0..N));
        }
        drop(second);
        // One read mapping is still alive.
        assert_mapped("fill with one of two mappings left", q.fill(&buf, 3));
        assert_eq!(&mapped[..], &[2; N][..]);
    }
    assert_eq!(contents(&q, &other), vec![2; N]);

    // Unmapped: everything works again.
    q.fill(&buf, 3).unwrap();
    launch_on(&other_queue).unwrap();
    assert_eq!(contents(&q, &buf), vec![4; N]);
    {
        let mut mapped = other_queue.map_mut(&buf, 0..N).unwrap();
        assert_eq!(&mapped[..], &[4; N][..]);
        mapped.fill(8);
    }
    q.read(&buf, &mut out).unwrap();
    assert_eq!(out, vec![8; N]);
}

#[test]
fn record_is_bounded_on_out_of_order_queues_under_load() {
    const READS: usize = 500;
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let Ok(queue) = ctx.out_of_order_queue() else {
        common::not_run("the device has no out-of-order queues");
        return;
    };
    if queue.is_in_order() {
        common::not_run(
            "the queue asked out of order is in order (its driver dropped the flag, or \
             reports failed commands complete and the library made it in order)",
        );
        return;
    }
    let writer = ctx.queue().unwrap();
    let data = ramp(256, 29);
    let buf = ctx.buffer_from(&data).unwrap();

    // Many gated reads: none can complete, so only folding keeps the record small.
    let mut largest = 0;
    let mut reads = Vec::with_capacity(READS);
    let gate = closed_gate(&ctx);
    for _ in 0..READS {
        reads.push(queue.after(&[gate.event()]).read_owned(&buf).unwrap());
        largest = largest.max(buf.record_len());
    }
    assert!(largest <= FOLD_AT + 1, "record grew to {largest}");
    // A write must still wait on every one of them, folded or not.
    let fill = writer.fill(&buf, 0).unwrap();
    assert_blocked("a write after 500 gated reads", &[&fill, reads[0].event()]);
    gate.complete().unwrap();
    for (i, read) in reads.into_iter().enumerate() {
        assert_eq!(read.wait().unwrap(), data, "read {i} saw the later write");
    }
    fill.wait().unwrap();
    assert_eq!(contents(&writer, &buf), vec![0; 256]);

    // Again, then release: it waits for every read, folded or not.
    let mut events = Vec::with_capacity(READS);
    let mut reads = Vec::with_capacity(READS);
    let gate = closed_gate(&ctx);
    for _ in 0..READS {
        let read = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
        events.push(read.event().clone());
        reads.push(read);
        largest = largest.max(buf.record_len());
    }
    assert!(largest <= FOLD_AT + 1, "record grew to {largest}");
    let (tx, rx) = mpsc::channel();
    let releaser = thread::spawn(move || {
        let report = buf.release();
        let _ = tx.send(());
        report
    });
    assert!(
        rx.recv_timeout(WINDOW).is_err(),
        "release returned while 500 reads of the buffer were gated"
    );
    gate.complete().unwrap();
    rx.recv_timeout(HANG).expect("release returned");
    let report = releaser.join().unwrap().unwrap();
    let pending = events.iter().filter(|e| !e.is_terminal()).count();
    assert_eq!(pending, 0, "release returned before {pending} reads ended");
    assert!(report.waited_on <= FOLD_AT + 1, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    for read in reads {
        assert_eq!(read.wait().unwrap(), vec![0; 256]);
    }
}

/// A write that waited on the reads before it stands for them in the record (it "covers
/// everything before it"), which holds only if it ends after them. A write whose
/// dependency failed ends at once, failed, without waiting for the rest of its wait list.
#[test]
fn writes_after_a_failed_write_still_wait_for_the_reads_before_it() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let old = ramp(N, 37);
    let buf = ctx.buffer_from(&old).unwrap();
    // The failed write's event outlives the read it waited on, even when an assertion
    // fails: PoCL 3.1 aborts when that read ends after the event was released.
    let failed;
    let read;
    let (read_gate, failing_gate) = (closed_gate(&ctx), closed_gate(&ctx));

    read = a.after(&[read_gate.event()]).read_owned(&buf).unwrap();
    failed = b.after(&[failing_gate.event()]).fill(&buf, 5).unwrap();
    failing_gate.fail(-1234).unwrap();
    let later = b.fill(&buf, 7).unwrap();
    assert_blocked(
        "a write queued behind a failed write that waited on a gated read",
        &[&later],
    );

    read_gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), old, "the read saw a later write");
    assert!(failed.wait().is_err());
    match later.wait() {
        // Read on the write's own queue: whether a command on another queue fails for
        // waiting on the failed write is not what this test is about.
        Ok(()) => assert_eq!(contents(&b, &buf), vec![7; N]),
        // NVIDIA fails the commands queued behind a failed one on an in-order queue (seen
        // on an H100); what matters here is that the write did not run before the read.
        Err(cl_lifetime::Error::CommandFailed { .. }) => {}
        Err(e) => panic!("the later write: {e}"),
    }
}

#[test]
fn release_after_a_failed_write_still_waits_for_the_reads_before_it() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer_from(&ramp(N, 41)).unwrap();
    // Kept past the read's end, as in the test above.
    let failed;
    let read;
    let (read_gate, failing_gate) = (closed_gate(&ctx), closed_gate(&ctx));

    read = a.after(&[read_gate.event()]).read_owned(&buf).unwrap();
    failed = b.after(&[failing_gate.event()]).fill(&buf, 5).unwrap();
    failing_gate.fail(-1234).unwrap();
    let read_event = read.event().clone();
    let (tx, rx) = mpsc::channel();
    let releaser = thread::spawn(move || {
        let report = buf.release();
        let _ = tx.send(read_event.is_terminal());
        report
    });
    // Longer than the release's own wait for the driver's free, which a release that
    // skipped the read spends before it returns.
    let window = cl_lifetime::FREE_GRACE + WINDOW;
    assert!(
        rx.recv_timeout(window).is_err(),
        "release returned while a read of its buffer was gated"
    );
    read_gate.complete().unwrap();
    assert!(
        rx.recv_timeout(HANG).expect("release returned"),
        "release returned before the read ended"
    );
    let report = releaser.join().unwrap().unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    // The test still holds the read's and the fill's events: where those keep the memory
    // (design trap "rusticl's events keep their buffers"), the release says so; where the
    // library measured that they do not, it frees.
    assert!(
        report.freed || ctx.driver().events_keep_buffers(),
        "{report:?}"
    );
    read.wait().unwrap();
    assert!(failed.wait().is_err());
}

#[test]
fn hazards_chain_through_three_queues() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (a, b, c) = (
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
        ctx.queue().unwrap(),
    );
    let buf = ctx.buffer_from(&[0u32; N]).unwrap();
    let buf2 = ctx.buffer_from(&[0u32; N]).unwrap();
    let data = ramp(N, 31);
    let read;
    let gate = closed_gate(&ctx);

    let write = a
        .after(&[gate.event()])
        .write_owned(&buf, data.clone())
        .unwrap();
    let copy = b.copy(&buf, &buf2).unwrap();
    read = c.read_owned(&buf2).unwrap();
    assert_blocked(
        "a copy and a read chained behind a gated write",
        &[&copy, read.event()],
    );
    assert!(!write.is_terminal());

    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), data);
}

// A command ahead of a gated one on an in-order queue ends while the gate is closed. Mesa
// 22.3's rusticl reports a flushed batch of commands complete together, after the last of
// them has run (design trap "rusticl ends a batch together"): a fill flushed with a read
// behind it that waits for a gated fill on another queue ended only when the gate opened,
// and the release of its buffer hung.
isolated_test! {
    fn a_command_ahead_of_a_gated_one_on_its_queue_ends_while_the_gate_is_closed() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        let (queue, other) = (ctx.queue().unwrap(), ctx.queue().unwrap());
        let x = ctx.buffer::<u32>(1024).unwrap();
        let z = ctx.buffer::<u32>(1024).unwrap();
        let gate = ctx.user_event().unwrap();
        let w = ctx.buffer::<u32>(1024).unwrap();
        // On the other queue: a fill the first read waits for, then a gated fill the last
        // read waits for.
        other.fill(&w, 3).unwrap();
        other.after(&[gate.event()]).fill(&z, 2).unwrap();
        let first = queue.read_owned(&w).unwrap();
        queue.fill(&x, 1).unwrap();
        let behind = queue.read_owned(&z).unwrap();
        // A blocking release while a gate is closed polls the fill's status.
        let report = x.release().unwrap();
        assert!(report.freed, "{report:?}");
        assert_eq!(first.wait().unwrap(), vec![3; 1024]);
        assert!(!behind.event().is_terminal(), "the read ran before its gate opened");
        gate.complete().unwrap();
        assert_eq!(behind.wait().unwrap(), vec![2; 1024]);
    }
}

/// The tracker's *byte ranges* rule on a real queue pair: a fill of one half does not wait
/// for a gated fill of the other half, and a read of the gated half waits for it.
#[test]
fn commands_on_disjoint_halves_of_a_buffer_do_not_wait_on_each_other() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer::<u32>(1024).unwrap();
    first.fill(&buf, 0).unwrap().wait().unwrap();
    let gate = ctx.user_event().unwrap();
    let gated = first
        .after(&[gate.event()])
        .fill_range(&buf, 1, 0..512)
        .unwrap();
    // Ends while the gate is closed: it waits for nothing on the other half.
    second
        .fill_range(&buf, 2, 512..1024)
        .unwrap()
        .wait()
        .unwrap();
    second.write_at(&buf, 700, &[9u32; 10]).unwrap();
    assert!(
        !gated.is_terminal(),
        "the gated fill ran before its gate opened"
    );
    // Overlaps the gated half: ordered after it.
    let read = second.read_owned_range(&buf, 500..520).unwrap();
    gate.complete().unwrap();
    let mut expected = vec![1u32; 12];
    expected.extend([2u32; 8]);
    assert_eq!(read.wait().unwrap(), expected);
    let mut all = vec![1u32; 512];
    all.extend(vec![2u32; 512]);
    all[700..710].fill(9);
    assert_eq!(common::contents(&second, &buf), all);
}
