//! Transfers between host and device, device-side copies and fills, and the events they
//! return. Non-blocking transfers are gated with user events, so that what is in flight
//! is decided by the test, not by timing.

use cl_lifetime::{Arg, CommandKind, Error, Status, wait_all};

use crate::common::{self, pattern};

#[test]
fn blocking_write_then_read_round_trips() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let data = pattern(1000, 1);
    let buf = ctx.buffer::<u32>(1000).unwrap();
    queue.write(&buf, &data).unwrap();
    let mut out = vec![0u32; 1000];
    queue.read(&buf, &mut out).unwrap();
    assert_eq!(out, data);

    // A shorter read and write touch only the start.
    queue.write(&buf, &[7, 8, 9]).unwrap();
    let mut head = [0u32; 4];
    queue.read(&buf, &mut head).unwrap();
    assert_eq!(head, [7, 8, 9, data[3]]);

    let report = buf.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(report.waited_on <= 2, "{report:?}");
}

#[test]
fn write_at_and_read_at_use_element_offsets() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[0i64; 16]).unwrap();
    queue.write_at(&buf, 5, &[1, 2, 3]).unwrap();
    queue.write_at(&buf, 15, &[-4]).unwrap();
    let owned = queue.write_owned_at(&buf, 10, vec![10, 11]).unwrap();
    owned.wait().unwrap();

    let mut all = [0i64; 16];
    queue.read(&buf, &mut all).unwrap();
    assert_eq!(all, [0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 10, 11, 0, 0, 0, -4]);

    let mut middle = [0i64; 3];
    queue.read_at(&buf, 5, &mut middle).unwrap();
    assert_eq!(middle, [1, 2, 3]);
    let mut last = [0i64; 2];
    queue.read_at(&buf, 14, &mut last).unwrap();
    assert_eq!(last, [0, -4]);
    buf.release().unwrap();
}

#[test]
fn copy_and_copy_range_move_exactly_the_named_elements() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let src_data = pattern(64, 2);
    let src = ctx.buffer_from(&src_data).unwrap();
    let whole = ctx.buffer_from(&[0u32; 80]).unwrap();
    let part = ctx.buffer_from(&[0u32; 32]).unwrap();

    queue.copy(&src, &whole).unwrap().wait().unwrap();
    queue
        .copy_range(&src, 10, &part, 20, 8)
        .unwrap()
        .wait()
        .unwrap();

    let got = queue.read_owned(&whole).unwrap().wait().unwrap();
    assert_eq!(got[..64], src_data[..]);
    assert_eq!(got[64..], [0u32; 16], "copy wrote past the source length");

    let got = queue.read_owned(&part).unwrap().wait().unwrap();
    let mut expected = vec![0u32; 32];
    expected[20..28].copy_from_slice(&src_data[10..18]);
    assert_eq!(got, expected);

    // The source is unchanged.
    assert_eq!(queue.read_owned(&src).unwrap().wait().unwrap(), src_data);

    for buf in [src, whole, part] {
        let report = buf.release().unwrap();
        assert!(report.failed.is_empty(), "{report:?}");
    }
}

#[test]
fn copy_range_within_one_buffer_works_and_overlap_is_refused() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let data: Vec<i32> = (0..32).collect();
    let buf = ctx.buffer_from(&data).unwrap();
    // Source and destination are one buffer: its record must be locked once, not twice.
    queue
        .copy_range(&buf, 0, &buf, 16, 16)
        .unwrap()
        .wait()
        .unwrap();
    let got = queue.read_owned(&buf).unwrap().wait().unwrap();
    let expected: Vec<i32> = (0..16).chain(0..16).collect();
    assert_eq!(got, expected);

    let err = queue.copy_range(&buf, 0, &buf, 8, 16).unwrap_err();
    assert_eq!(
        err.status().map(|s| s.code()),
        Some(-8), // CL_MEM_COPY_OVERLAP
        "{err:?}"
    );
    let report = buf.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
}

#[test]
fn fill_sets_every_element_and_fill_range_only_its_range() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<f32>(100).unwrap();
    queue.fill(&buf, 1.5).unwrap().wait().unwrap();
    assert_eq!(
        queue.read_owned(&buf).unwrap().wait().unwrap(),
        vec![1.5f32; 100]
    );

    queue
        .fill_range(&buf, -2.0, 30..45)
        .unwrap()
        .wait()
        .unwrap();
    let got = queue.read_owned(&buf).unwrap().wait().unwrap();
    for (i, &x) in got.iter().enumerate() {
        let expected = if (30..45).contains(&i) { -2.0 } else { 1.5 };
        assert_eq!(x, expected, "element {i}");
    }

    // One-byte elements: the fill must not spill into the neighbours.
    let bytes = ctx.buffer_from(&[0u8; 33]).unwrap();
    queue.fill_range(&bytes, 0xAB, 1..32).unwrap();
    let got = queue.read_owned(&bytes).unwrap().wait().unwrap();
    assert_eq!(got[0], 0);
    assert!(got[1..32].iter().all(|&b| b == 0xAB), "{got:?}");
    assert_eq!(got[32], 0);

    buf.release().unwrap();
    bytes.release().unwrap();
}

#[test]
fn buffer_from_holds_the_initial_contents() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let data: Vec<f64> = (0..777).map(|i| f64::from(i) * 0.25 - 50.0).collect();
    let buf = ctx.buffer_from(&data).unwrap();
    assert_eq!(buf.len(), 777);
    assert_eq!(buf.bytes(), 777 * 8);
    assert_eq!(buf.record_len(), 0, "creation is not a command");
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), data);

    // The contents were copied at creation: changing the host slice afterwards does not
    // reach the device.
    let mut host = vec![3u16; 10];
    let copy = ctx.buffer_from(&host).unwrap();
    host.fill(9);
    assert_eq!(
        queue.read_owned(&copy).unwrap().wait().unwrap(),
        vec![3u16; 10]
    );
    buf.release().unwrap();
    copy.release().unwrap();
}

#[test]
fn array_elements_transfer_copy_and_fill_as_units() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let data: Vec<[f32; 4]> = (0..50)
        .map(|i| {
            let x = i as f32;
            [x, x + 0.5, -x, x * 2.0]
        })
        .collect();
    let buf = ctx.buffer_from(&data).unwrap();
    assert_eq!(buf.len(), 50);
    assert_eq!(buf.bytes(), 50 * 16);
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), data);

    queue.write_at(&buf, 3, &[[9.0, 8.0, 7.0, 6.0]]).unwrap();
    let mut one = [[0.0f32; 4]; 1];
    queue.read_at(&buf, 3, &mut one).unwrap();
    assert_eq!(one, [[9.0, 8.0, 7.0, 6.0]]);

    let dst = ctx.buffer::<[f32; 4]>(50).unwrap();
    queue.fill(&dst, [1.0, 2.0, 3.0, 4.0]).unwrap();
    queue.copy_range(&buf, 0, &dst, 40, 5).unwrap();
    let got = queue.read_owned(&dst).unwrap().wait().unwrap();
    let mut expected = vec![[1.0f32, 2.0, 3.0, 4.0]; 50];
    expected[40..45].copy_from_slice(&data[..5]);
    expected[43] = [9.0, 8.0, 7.0, 6.0];
    assert_eq!(got, expected);
    buf.release().unwrap();
    dst.release().unwrap();
}

#[test]
fn non_blocking_write_keeps_its_host_memory_alive_until_it_runs() {
    const LEN: usize = 4096;
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let expected = pattern(LEN, 3);
    let buf = ctx.buffer::<u32>(LEN).unwrap();
    let gate = ctx.user_event().unwrap();

    // A fresh allocation, moved into the library: the test keeps no handle on it.
    let data = expected.clone();
    let write = queue
        .after(&[gate.event()])
        .write_owned(&buf, data)
        .unwrap();
    queue.flush().unwrap();

    // Were `data` freed, these same-sized allocations would likely take its place and
    // overwrite it before the gated write reads it.
    let scribbles: Vec<Vec<u32>> = (0..16)
        .map(|k| std::hint::black_box(vec![0xDEAD_0000 | k; LEN]))
        .collect();
    assert!(!write.is_terminal(), "the write ran before its gate opened");

    gate.complete().unwrap();
    write.wait().unwrap();
    // Its handle would keep the memory on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(write);
    let mut out = vec![0u32; LEN];
    queue.read(&buf, &mut out).unwrap();
    assert!(
        out == expected,
        "the device read freed host memory: first difference at element {:?}",
        out.iter().zip(&expected).position(|(a, b)| a != b)
    );
    drop(std::hint::black_box(scribbles));
    let report = buf.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(report.freed, "{report:?}");
}

#[test]
fn gated_read_owned_is_pending_until_its_gate_opens() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let data: Vec<i32> = (0..512).map(|i| i * 3 - 700).collect();
    let buf = ctx.buffer_from(&data).unwrap();
    let gate = ctx.user_event().unwrap();
    let whole = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
    let part = queue
        .after(&[gate.event()])
        .read_owned_range(&buf, 100..164)
        .unwrap();
    queue.flush().unwrap();
    assert!(!whole.event().is_terminal(), "read ran before its gate");
    assert!(!part.event().is_terminal(), "read ran before its gate");
    assert!(
        !whole.event().status().unwrap().is_terminal(),
        "read ran before its gate"
    );

    gate.complete().unwrap();
    assert_eq!(part.wait().unwrap(), data[100..164]);
    assert_eq!(whole.wait().unwrap(), data);
    let report = buf.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
}

#[test]
fn read_owned_range_returns_exactly_the_range() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let data = pattern(300, 5);
    let buf = ctx.buffer_from(&data).unwrap();
    for range in [0..1, 0..300, 299..300, 17..171] {
        let got = queue
            .read_owned_range(&buf, range.clone())
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(got.len(), range.len());
        assert_eq!(got, data[range]);
    }
    buf.release().unwrap();
}

// Dropping a pending read behind a gate that is not set returns at once (waiting could be
// for ever: the caller may be about to set it, or unwinding); the read's memory is kept by
// the library's thread until the read has ended, which `wait_deferred` waits for.
#[test]
fn dropping_a_pending_read_behind_an_unset_gate_returns_and_its_memory_is_kept_until_the_read_ends()
{
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&pattern(4096, 6)).unwrap();
    let gate = ctx.user_event().unwrap();
    let pending = queue.after(&[gate.event()]).read_owned(&buf).unwrap();
    queue.flush().unwrap();
    let read_event = pending.event().clone();
    drop(pending);
    assert!(
        !read_event.is_terminal(),
        "the read ran before its gate opened"
    );
    let waiter = ctx.clone();
    common::returns_only_after(
        "waiting for the library's deferred work",
        move || waiter.wait_deferred(),
        || gate.complete().unwrap(),
    );
    assert_eq!(read_event.status().unwrap(), Status::Complete);
    let report = buf.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
}

// Without an unset gate too, a dropped pending read's memory goes to the library's thread
// (the drop blocked until the read had ended, an async executor's worker with it), which
// frees it once the read has ended: `wait_deferred` returns only then.
#[test]
fn dropping_a_pending_read_with_no_unset_gate_keeps_its_memory_until_the_read_ends() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&pattern(1 << 20, 7)).unwrap();
    let pending = queue.read_owned(&buf).unwrap();
    let read_event = pending.event().clone();
    drop(pending);
    ctx.wait_deferred();
    assert!(
        read_event.is_terminal(),
        "the library's thread let go of the memory before the read ended"
    );
    assert_eq!(read_event.status().unwrap(), Status::Complete);
    let report = buf.release().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
}

// A pending read behind a command that waits on a user event other code made (no gate of
// the library's is open, so the drop used to wait): dropping it returns while the read is
// still pending, as on an async executor's worker it must. Before, the drop blocked until
// the read ended, here until the test set the event after its time limit.
#[test]
fn dropping_a_pending_read_behind_other_codes_user_event_returns_at_once() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&pattern(1024, 8)).unwrap();
    let mut status = 0;
    // SAFETY: a live context; the event is set and released below.
    let raw_gate = unsafe { cl_sys::clCreateUserEvent(ctx.as_raw() as _, &mut status) };
    assert_eq!(status, 0, "clCreateUserEvent");
    let gate_addr = raw_gate as usize;
    let seven = 7u32;
    // SAFETY: the fill writes `buf` only, waits on the raw gate and the list it is given,
    // and hands its event's one reference over.
    unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[cl_lifetime::BufferUse::write(&buf)], |raw_queue, wait| {
                let mut list: Vec<cl_sys::cl_event> = wait.iter().map(|&e| e as _).collect();
                list.push(gate_addr as cl_sys::cl_event);
                let mut event: cl_sys::cl_event = std::ptr::null_mut();
                let rc = cl_sys::clEnqueueFillBuffer(
                    raw_queue as _,
                    buf.as_raw() as _,
                    (&raw const seven).cast(),
                    4,
                    0,
                    1024 * 4,
                    list.len() as u32,
                    list.as_ptr(),
                    &mut event,
                );
                if rc == 0 {
                    Ok(event as _)
                } else {
                    Err(Error::Cl {
                        call: "clEnqueueFillBuffer",
                        status: cl_lifetime::ClStatus(rc),
                    })
                }
            })
            .unwrap();
    }
    queue.flush().unwrap();
    let pending = queue.read_owned(&buf).unwrap();
    let read_event = pending.event().clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(pending);
        let _ = tx.send(());
    });
    let returned = rx.recv_timeout(common::WINDOW * 10).is_ok();
    let still_pending = !read_event.is_terminal();
    // SAFETY: the raw gate made above, set once and released once.
    unsafe {
        assert_eq!(cl_sys::clSetUserEventStatus(gate_addr as _, 0), 0);
        assert_eq!(cl_sys::clReleaseEvent(gate_addr as _), 0);
    }
    dropper.join().unwrap();
    assert!(returned, "dropping the pending read waited for the read");
    assert!(still_pending, "the read ended before its gate was set");
    ctx.wait_deferred();
    assert_eq!(read_event.status().unwrap(), Status::Complete);
    assert_eq!(common::contents(&queue, &buf), vec![7; 1024]);
}

#[test]
fn blocking_transfers_gated_on_completed_events_run() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let other_queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(64).unwrap();

    let gate = ctx.user_event().unwrap();
    gate.complete().unwrap();
    let data = pattern(64, 8);
    queue.after(&[gate.event()]).write(&buf, &data).unwrap();

    // An event of another queue, already complete.
    let fill = other_queue.fill(&buf, 5).unwrap();
    fill.wait().unwrap();
    queue
        .after(&[&fill, gate.event()])
        .write_at(&buf, 60, &[1, 2])
        .unwrap();

    let mut out = vec![0u32; 64];
    queue.after(&[&fill]).read(&buf, &mut out).unwrap();
    let mut expected = vec![5u32; 64];
    expected[60..62].copy_from_slice(&[1, 2]);
    assert_eq!(out, expected);
    buf.release().unwrap();
}

#[test]
fn enqueue_events_report_their_command_kind_and_complete() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let a = ctx.buffer::<i32>(64).unwrap();
    let b = ctx.buffer::<i32>(64).unwrap();

    let write = queue.write_owned(&a, vec![10; 64]).unwrap();
    let fill = queue.fill(&b, 0).unwrap();
    let copy = queue.copy_range(&a, 0, &b, 0, 32).unwrap();
    // SAFETY: increment touches b[i] only where i < 64, its length.
    let kernel = unsafe {
        queue.launch(
            &increment,
            &[64],
            &[Arg::read_write(&b), Arg::scalar(64u32)],
        )
    }
    .unwrap();
    let read = queue.read_owned(&b).unwrap();
    let read_event = read.event().clone();

    let expected = [
        (&write, CommandKind::Write),
        (&fill, CommandKind::Fill),
        (&copy, CommandKind::Copy),
        (&kernel, CommandKind::Kernel),
        (&read_event, CommandKind::Read),
    ];
    for (event, kind) in expected {
        assert_eq!(event.command_kind().unwrap(), kind);
    }
    let got = read.wait().unwrap();
    let mut want = vec![11; 32];
    want.extend([1; 32]);
    assert_eq!(got, want);
    for (event, kind) in expected {
        event.wait().unwrap();
        assert_eq!(event.status().unwrap(), Status::Complete, "{kind:?}");
    }

    let gate = ctx.user_event().unwrap();
    assert_eq!(gate.command_kind().unwrap(), CommandKind::User);
    gate.complete().unwrap();
    a.release().unwrap();
    b.release().unwrap();
}

#[test]
fn wait_all_waits_for_every_event_and_reports_a_failure() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let other_queue = ctx.queue().unwrap();
    let a = ctx.buffer::<u32>(256).unwrap();
    let b = ctx.buffer::<u32>(256).unwrap();
    let gate = ctx.user_event().unwrap();
    let e1 = queue.after(&[gate.event()]).fill(&a, 1).unwrap();
    let e2 = other_queue.after(&[gate.event()]).fill(&b, 2).unwrap();
    queue.flush().unwrap();
    other_queue.flush().unwrap();

    wait_all(&[]).unwrap();
    let (w1, w2) = (e1.clone(), e2.clone());
    common::returns_only_after(
        "wait_all of two gated events",
        move || wait_all(&[&w1, &w2]),
        || gate.complete().unwrap(),
    )
    .unwrap();
    assert_eq!(e1.status().unwrap(), Status::Complete);
    assert_eq!(e2.status().unwrap(), Status::Complete);

    // One failed event among completed ones: wait_all reports it.
    let failing_gate = ctx.user_event().unwrap();
    let failing = other_queue
        .after(&[failing_gate.event()])
        .fill(&b, 3)
        .unwrap();
    failing_gate.fail(-5).unwrap();
    let err = wait_all(&[&e1, &failing]).unwrap_err();
    assert!(matches!(err, Error::CommandFailed { .. }), "{err:?}");

    assert_eq!(queue.read_owned(&a).unwrap().wait().unwrap(), vec![1; 256]);
    a.release().unwrap();
    let report = b.release().unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(report.failed[0].command, CommandKind::Fill);
}

/// Small blocking reads through a queue's pinned blocks (`QueueOptions::stage_reads`, on
/// by default on GPUs) return what was written, at any offset and size, from several
/// threads at once; a read past the staged size goes straight to the caller's memory.
#[test]
fn staged_blocking_reads_return_what_was_written_from_several_threads() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let queue = ctx
        .queue_with(cl_lifetime::QueueOptions::default().stage_reads(true))
        .unwrap();
    let len = (1 << 20) / 4 + 1000; // past the 1 MiB staged size when read whole
    let data = common::pattern(len, 7);
    let buf = ctx.buffer_from(&data).unwrap();
    std::thread::scope(|s| {
        for t in 0..3usize {
            let (queue, buf, data) = (&queue, &buf, &data);
            s.spawn(move || {
                for (offset, n) in [(0, 1), (3 + t, 100), (1000, 4096), (17, 65_536)] {
                    let mut out = vec![0u32; n];
                    queue.read_at(buf, offset, &mut out).unwrap();
                    assert_eq!(
                        out,
                        data[offset..offset + n],
                        "offset {offset}, {n} elements"
                    );
                }
            });
        }
    });
    let mut whole = vec![0u32; len];
    queue.read(&buf, &mut whole).unwrap();
    assert_eq!(whole, data);
    // A read behind a failed write is an error, and the next staged read works.
    let gate = ctx.user_event().unwrap();
    queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
    gate.fail(-5).unwrap();
    let mut out = vec![0u32; 16];
    assert!(queue.read(&buf, &mut out).is_err());
    queue.write(&buf, &data).unwrap();
    queue.read_at(&buf, 5, &mut out).unwrap();
    assert_eq!(out, data[5..21]);
}

/// A queue that stages its reads ([`cl_lifetime::QueueOptions::stage_reads`], on by
/// default on GPUs).
fn staging_queue(ctx: &cl_lifetime::Context) -> cl_lifetime::Queue {
    ctx.queue_with(cl_lifetime::QueueOptions::default().stage_reads(true))
        .expect("a queue that stages its reads")
}

/// On a queue that stages its reads, a small read mapping is a read into pinned memory:
/// it shows the buffer's contents, keeps the mapping rules while alive (device writes and
/// writable mappings refused, device reads and other read mappings allowed), and its
/// unmap enqueues nothing (the event handed back is the read's, already ended). A mapping
/// past the staged size goes to the driver, and its unmap is a command.
#[test]
fn a_staged_read_mapping_shows_the_contents_and_keeps_the_mapping_rules() {
    let ctx = device!();
    let queue = staging_queue(&ctx);
    let other = ctx.queue().unwrap();
    let data = pattern(4096, 11);
    let buf = ctx.buffer_from(&data).unwrap();
    let mut out = vec![0u32; 16];
    {
        let mapped = queue.map(&buf, 100..1100).unwrap();
        assert_eq!(&mapped[..], &data[100..1100]);
        let second = queue.map(&buf, 0..8).unwrap();
        assert_eq!(&second[..], &data[..8]);
        for q in [&queue, &other] {
            assert!(matches!(q.fill(&buf, 1), Err(Error::Mapped)));
            assert!(matches!(q.write(&buf, &[1; 4]), Err(Error::Mapped)));
            assert!(matches!(q.map_mut(&buf, 0..4), Err(Error::Mapped)));
            q.read(&buf, &mut out).unwrap();
            assert_eq!(out, data[..16]);
        }
        let unmapped = second.unmap().unwrap();
        assert!(unmapped.is_terminal(), "a staged unmap waits on nothing");
        assert_eq!(unmapped.command_kind().unwrap(), CommandKind::Read);
        // One read mapping is still alive.
        assert!(matches!(queue.fill(&buf, 1), Err(Error::Mapped)));
        assert_eq!(&mapped[..3], &data[100..103]);
    }
    // Unmapped: writes are allowed again, and a new mapping sees them.
    queue.fill(&buf, 9).unwrap();
    assert_eq!(*queue.map(&buf, 4000..4096).unwrap(), [9; 96]);

    // Past the staged size (1 MiB), the driver maps.
    let big = ctx.buffer_from(&pattern((1 << 20) / 4 + 1, 3)).unwrap();
    let mapped = queue.map(&big, 0..big.len()).unwrap();
    assert_eq!(
        mapped[big.len() - 1],
        pattern((1 << 20) / 4 + 1, 3)[big.len() - 1]
    );
    let unmapped = mapped.unmap().unwrap();
    assert_eq!(unmapped.command_kind().unwrap(), CommandKind::Unmap);
    unmapped.wait().unwrap();
}

/// A staged read mapping waits for the writes before it, as a driver's map does: behind a
/// gated write on another queue it returns only once the gate opens, with the written
/// data.
#[test]
fn a_staged_read_mapping_waits_for_the_write_before_it() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = staging_queue(&ctx);
    let writer = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[0u32; 256]).unwrap();
    let gate = ctx.user_event().unwrap();
    let written = pattern(256, 5);
    writer
        .after(&[gate.event()])
        .write_owned(&buf, written.clone())
        .unwrap();
    writer.flush().unwrap();
    let (buf, seen) = common::returns_only_after(
        "a staged map behind a gated write",
        move || {
            let seen = queue.map(&buf, 0..256).map(|m| m.to_vec());
            (buf, seen)
        },
        || gate.complete().unwrap(),
    );
    assert_eq!(seen.unwrap(), written);
    writer.fill(&buf, 1).unwrap();
    assert_eq!(common::contents(&writer, &buf), vec![1; 256]);
}

// In a child process: PoCL 3.1 aborted in `pocl_update_event_failed` here, beside
// `svm::svm_random_programs_match_a_sequential_model` in one process and then alone under
// load (design trap "PoCL's failed event released mid-propagation", fixed since); there
// such an abort is this test's failure, and the rest of the suite runs.
isolated_test! {
    /// A staged read mapping of data whose write failed is an error, and leaves the buffer
    /// unmapped: later commands are not refused as mapped.
    fn a_failed_staged_read_mapping_leaves_the_buffer_unmapped() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        map_behind_a_failed_fill(&ctx, staging_queue(&ctx), "a staged map");
    }
}

// A staged map behind a fill whose gate fails ends inside that gate's
// `clSetUserEventStatus`, and the staging block's own map with it: the library released
// that map's event as soon as it saw it fail, while PoCL 3.1 was still inside the failure
// and used the event again (`PTHREAD ERROR in pocl_update_event_failed()`, design trap
// "PoCL's failed event released mid-propagation"). In a `.ci/run` the test above aborted
// once in its child; these rounds aborted in 7 of 10 runs.
isolated_test! {
    /// Maps that fail as their gate fails, round after round, each on a new queue that
    /// stages its reads, never abort the driver, and each fails with an error.
    fn maps_that_fail_while_their_gate_fails_never_abort_the_driver() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
            return;
        }
        for round in 0..300 {
            let queue = staging_queue(&ctx);
            let buf = ctx.buffer_from(&[1u32; 64]).expect("a buffer");
            let gate = ctx.user_event().expect("a gate");
            queue
                .after(&[gate.event()])
                .fill(&buf, 2)
                .expect("a fill behind the gate");
            queue.flush().expect("a flush");
            let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mapper = {
                let started = started.clone();
                std::thread::spawn(move || {
                    started.store(true, std::sync::atomic::Ordering::SeqCst);
                    queue.map(&buf, 0..64).map(|m| m.to_vec())
                })
            };
            // The map is on its way or waiting: the failure meets it either way.
            while !started.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::yield_now();
            }
            gate.fail(-5).expect("the gate fails");
            let map = mapper.join().expect("the mapping thread");
            assert!(map.is_err(), "round {round}: a map of data whose fill failed: {map:?}");
        }
    }
}

/// A read mapping of a buffer adopted from other code goes to the driver even on a queue
/// that stages its reads: made with `CL_MEM_USE_HOST_PTR`, its mapping is the owner's
/// host memory, as OpenCL promises, not a copy.
#[test]
fn a_read_mapping_of_an_adopted_host_memory_buffer_is_its_own_memory() {
    let ctx = device!();
    let queue = staging_queue(&ctx);
    let mut host = pattern(1024, 13);
    let mut status = 0;
    // SAFETY: `host` outlives the buffer (released below, before `host` drops) and is
    // not touched by the test while the buffer lives.
    let raw = unsafe {
        cl_sys::clCreateBuffer(
            ctx.as_raw() as _,
            cl_sys::CL_MEM_READ_WRITE | cl_sys::CL_MEM_USE_HOST_PTR,
            4096,
            host.as_mut_ptr().cast(),
            &mut status,
        )
    };
    assert_eq!(status, 0);
    // SAFETY: `raw` is a valid memory object of the context.
    let buf = unsafe { cl_lifetime::ClBuffer::<u32>::from_raw(&ctx, raw as _) }.unwrap();
    // SAFETY: the library holds its own reference now.
    assert_eq!(unsafe { cl_sys::clReleaseMemObject(raw) }, 0);
    let expected = pattern(1024, 13);
    {
        let mapped = queue.map(&buf, 10..20).unwrap();
        assert_eq!(&mapped[..], &expected[10..20]);
        assert_eq!(
            mapped.as_ptr(),
            host[10..].as_ptr(),
            "not the owner's memory"
        );
        let unmapped = mapped.unmap().unwrap();
        assert_eq!(unmapped.command_kind().unwrap(), CommandKind::Unmap);
        unmapped.wait().unwrap();
    }
    buf.release().unwrap();
    drop(host);
}

/// A blocking map whose command failed (the buffer's fill waited on a gate that then
/// failed) leaves the buffer unmapped: later commands are not refused as mapped. rusticl
/// refuses to unmap the pointer of a map that failed (`CL_INVALID_VALUE`), and the buffer
/// stayed mapped in its record for good, so every later command on it was refused.
#[test]
fn a_failed_blocking_map_leaves_the_buffer_unmapped() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    map_behind_a_failed_fill(&ctx, ctx.queue().unwrap(), "a blocking map");
}

/// Maps a buffer on `queue` behind its fill, gated by a user event that then fails:
/// asserts that the map returns only after the gate fails, with an error, and that the
/// buffer is not left mapped (a fill after it works, and a new mapping sees it).
fn map_behind_a_failed_fill(ctx: &cl_lifetime::Context, queue: cl_lifetime::Queue, what: &str) {
    let buf = ctx.buffer_from(&[1u32; 64]).expect("a buffer");
    let gate = ctx.user_event().expect("a gate");
    queue
        .after(&[gate.event()])
        .fill(&buf, 2)
        .expect("a fill behind the gate");
    queue.flush().expect("a flush");
    let mapper = queue.clone();
    let (buf, map) = common::returns_only_after(
        &format!("{what} behind a gate that fails"),
        move || {
            let map = mapper.map(&buf, 0..64).map(|m| m.to_vec());
            (buf, map)
        },
        || gate.fail(-5).expect("the gate fails"),
    );
    assert!(map.is_err(), "{what} of data whose fill failed: {map:?}");
    queue.fill(&buf, 3).expect("a fill after the failed map");
    assert_eq!(common::contents(&queue, &buf), vec![3u32; 64]);
    let again = queue.map(&buf, 0..64).expect("a map after the failed one");
    assert_eq!(*again, [3; 64]);
}

// `ctx.buffer::<T>(n)` then a read returned whatever the driver left there (here the
// memory of a buffer released deferred, which a new buffer of its size takes over).
#[test]
fn a_new_buffer_read_before_any_write_reads_zeros() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    for round in 0..3 {
        let old = ctx.buffer_from(&[0xABu32; 4096]).unwrap();
        queue.fill(&old, 0xCD).unwrap().wait().unwrap();
        old.release_deferred();
        let new = ctx.buffer::<u32>(4096).unwrap();
        assert_eq!(
            queue.read_owned(&new).unwrap().wait().unwrap(),
            vec![0; 4096],
            "round {round}"
        );
    }
}

// The zeroing covers every first use that may read: a kernel argument, a partial write
// (the rest reads as zeros), a copy from it; a first write of all of it needs none.
#[test]
fn a_new_buffer_is_zero_wherever_its_first_command_may_read_it() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let n = 64usize;
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let counted = ctx.buffer::<i32>(n).unwrap();
    // SAFETY: increment touches counted[i] only where i < n, its length.
    unsafe {
        queue.launch(
            &increment,
            &[n],
            &[Arg::read_write(&counted), Arg::scalar(n as u32)],
        )
    }
    .unwrap();
    assert_eq!(
        queue.read_owned(&counted).unwrap().wait().unwrap(),
        vec![1; n]
    );

    let partial = ctx.buffer::<u32>(n).unwrap();
    queue.write_at(&partial, 0, &[7; 8]).unwrap();
    let mut expected = vec![0u32; n];
    expected[..8].fill(7);
    assert_eq!(
        queue.read_owned(&partial).unwrap().wait().unwrap(),
        expected
    );

    let source = ctx.buffer::<u32>(n).unwrap();
    let target = ctx.buffer_from(&vec![5u32; n]).unwrap();
    queue.copy(&source, &target).unwrap();
    assert_eq!(
        queue.read_owned(&target).unwrap().wait().unwrap(),
        vec![0; n]
    );

    let written = ctx.buffer::<u32>(n).unwrap();
    queue.fill(&written, 3).unwrap();
    assert_eq!(
        written.record_len(),
        1,
        "a zero fill ran before a fill of all of it"
    );
    assert_eq!(
        queue.read_owned(&written).unwrap().wait().unwrap(),
        vec![3; n]
    );
}

// Four threads doing staged blocking reads on one shared queue while gates fail crashed
// PoCL 3.1 (2 of 2 runs; one thread did not). It is PoCL's double finish, not a reference
// the library lets go early: PoCL aborts with every failed event kept to the end, and
// `examples/pocl_double_finish.rs` aborts it with raw calls alone. Every other
// implementation runs it. In a child: a crash fails this test, not the suite.
isolated_test! {
    fn staged_blocking_reads_from_four_threads_while_gates_fail_end_in_errors_not_crashes() {
        let ctx = device!();
        if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
            return;
        }
        if common::on_pocl(&ctx) {
            common::not_run(
                "PoCL's double finish (examples/pocl_double_finish.rs aborts it with raw calls)",
            );
            return;
        }
        let queue = staging_queue(&ctx);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (ctx, queue) = (&ctx, &queue);
                s.spawn(move || {
                    for round in 0..40u32 {
                        let buf = ctx.buffer_from(&[t; 256]).unwrap();
                        let gate = ctx.user_event().unwrap();
                        queue.after(&[gate.event()]).fill(&buf, round).unwrap();
                        let failing = std::thread::spawn(move || gate.fail(-7).unwrap());
                        let mut out = [0u32; 64];
                        let read = queue.read(&buf, &mut out);
                        failing.join().unwrap();
                        assert!(
                            matches!(read, Err(Error::DependencyFailed { .. } | Error::CommandFailed { .. })),
                            "thread {t}, round {round}: {read:?}"
                        );
                        // Behind another thread's failed command on the shared in-order
                        // queue, a command may fail too (its queue's order ties it there);
                        // when it does not, it is right.
                        let written = queue.write(&buf, &[round; 256]);
                        if written.is_ok() && queue.read(&buf, &mut out).is_ok() {
                            assert_eq!(out, [round; 64]);
                        }
                        buf.release().unwrap();
                    }
                });
            }
        });
    }
}

#[test]
fn a_lent_write_hands_its_vec_back_unmoved_once_the_write_has_ended() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(4096).unwrap();
    let data = pattern(4096, 3);
    let (ptr, capacity) = (data.as_ptr(), data.capacity());
    let gate = ctx.user_event().unwrap();
    let write = queue.after(&[gate.event()]).write_lent(&buf, data).unwrap();
    assert!(
        !write.event().is_terminal(),
        "the write ran before its gate opened"
    );
    gate.complete().unwrap();
    let back = write.wait().unwrap();
    assert_eq!(
        (back.as_ptr(), back.capacity()),
        (ptr, capacity),
        "not the same allocation"
    );
    assert_eq!(back, pattern(4096, 3), "the Vec came back changed");
    assert_eq!(common::contents(&queue, &buf), pattern(4096, 3));
}

#[test]
fn one_allocation_streams_frames_both_ways() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(1024).unwrap();
    let mut up = vec![0u32; 1024];
    let mut down = Vec::with_capacity(1024);
    let (up_ptr, down_ptr) = (up.as_ptr(), down.as_ptr());
    for frame in 0..5u32 {
        up.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = frame * 10_000 + i as u32);
        up = queue.write_lent(&buf, up).unwrap().wait().unwrap();
        down = queue.read_into(&buf, down).unwrap().wait().unwrap();
        assert_eq!(down, up, "frame {frame}");
    }
    assert_eq!(up.as_ptr(), up_ptr, "the write's Vec was reallocated");
    assert_eq!(down.as_ptr(), down_ptr, "the read's Vec was reallocated");
}

#[test]
fn a_read_into_a_short_vec_grows_it_and_replaces_its_contents() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&pattern(300, 9)).unwrap();
    let stale = vec![7u32; 10];
    let read = queue.read_range_into(&buf, 100..300, stale).unwrap();
    assert_eq!(read.wait().unwrap(), pattern(300, 9)[100..300].to_vec());
    let refused = queue.read_range_into(&buf, 200..301, Vec::new());
    assert!(
        matches!(refused, Err(Error::OutOfRange { .. })),
        "{refused:?}"
    );
}

#[test]
fn a_lent_write_dropped_behind_its_gate_returns_at_once_and_still_lands() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(1 << 16).unwrap();
    let gate = ctx.user_event().unwrap();
    let write = queue
        .after(&[gate.event()])
        .write_lent(&buf, pattern(1 << 16, 5))
        .unwrap();
    let event = write.event().clone();
    // Returns although the device has not read the memory yet: the library keeps it.
    drop(write);
    gate.complete().unwrap();
    event.wait().unwrap();
    assert_eq!(common::contents(&queue, &buf), pattern(1 << 16, 5));
}

#[test]
fn a_lent_write_behind_a_failed_gate_is_its_failure() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(64).unwrap();
    let gate = ctx.user_event().unwrap();
    let write = queue
        .after(&[gate.event()])
        .write_lent(&buf, vec![1; 64])
        .unwrap();
    gate.fail(-31).unwrap();
    let failed = write.wait();
    assert!(
        matches!(failed, Err(Error::CommandFailed { .. })),
        "{failed:?}"
    );
}

#[test]
fn a_host_buffer_starts_zeroed_and_streams_frames_both_ways_in_place() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(4096).unwrap();
    let mut up = ctx.host_buffer::<u32>(4096).unwrap();
    let mut down = ctx.host_buffer::<u32>(4096).unwrap();
    assert!(up.iter().chain(down.iter()).all(|&x| x == 0), "not zeroed");
    let (up_ptr, down_ptr) = (up.as_ptr(), down.as_ptr());
    for frame in 0..4u32 {
        up.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = frame * 100_000 + i as u32);
        up = queue.write_lent(&buf, up).unwrap().wait().unwrap();
        down = queue.read_into(&buf, down).unwrap().wait().unwrap();
        assert_eq!(&down[..], &up[..], "frame {frame}");
    }
    assert_eq!((up.as_ptr(), down.as_ptr()), (up_ptr, down_ptr));
}

#[test]
fn a_read_into_a_host_buffer_shorter_than_the_read_is_refused_before_any_command() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[1u32; 100]).unwrap();
    let short = ctx.host_buffer::<u32>(99).unwrap();
    let refused = queue.read_into(&buf, short);
    assert!(
        matches!(
            refused,
            Err(Error::HostTooSmall {
                needed: 100,
                len: 99
            })
        ),
        "{refused:?}"
    );
    assert_eq!(buf.record_len(), 0, "a command was recorded");
    // A range that fits is read.
    let fits = ctx.host_buffer::<u32>(99).unwrap();
    let got = queue
        .read_range_into(&buf, 1..100, fits)
        .unwrap()
        .wait()
        .unwrap();
    assert!(got.iter().all(|&x| x == 1));
    assert!(matches!(ctx.host_buffer::<u32>(0), Err(Error::ZeroLength)));
}

#[test]
fn a_host_buffer_read_dropped_behind_its_gate_returns_at_once_and_loses_nothing() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&pattern(1 << 14, 4)).unwrap();
    let gate = ctx.user_event().unwrap();
    let host = ctx.host_buffer::<u32>(1 << 14).unwrap();
    let read = queue.after(&[gate.event()]).read_into(&buf, host).unwrap();
    let event = read.event().clone();
    drop(read);
    gate.complete().unwrap();
    event.wait().unwrap();
    assert_eq!(common::contents(&queue, &buf), pattern(1 << 14, 4));
}

/// An element type aligned to a page: `Pod` allows any alignment.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(4096))]
struct Page([u32; 1024]);

// SAFETY: an array of `u32`, valid for every bit pattern, with no padding.
unsafe impl cl_lifetime::Pod for Page {}

/// Issue 48: host slices are made from the driver's pointer only where it is aligned for
/// the element type. PoCL's mappings are 128-512-byte aligned, so a page-aligned element
/// type got a misaligned `&[T]` (undefined behaviour; a debug build aborts in
/// `slice::from_raw_parts`). Now a map, a writable map and a host buffer either hand out an
/// aligned slice or refuse with `Error::HostMisaligned`, and nothing stays mapped. In a
/// child process: the abort it guards against ends the process.
#[test]
fn host_slices_are_aligned_for_their_element_type_or_refused() {
    common::isolated(
        &test_path!(host_slices_are_aligned_for_their_element_type_or_refused),
        common::CHILD_LIMIT,
        &[],
        || {
            let Some(ctx) = common::context() else { return };
            let queue = ctx.queue().unwrap();
            let page = Page([7; 1024]);
            let buf = ctx.buffer_from(&[page; 3]).unwrap();
            let aligned = |p: *const Page| p as usize % std::mem::align_of::<Page>() == 0;
            match queue.map(&buf, 0..3) {
                Ok(mapped) => {
                    assert!(aligned(mapped.as_ptr()));
                    assert_eq!(mapped[2], page);
                }
                Err(Error::HostMisaligned { align, address }) => {
                    assert_eq!(align, 4096);
                    println!("a mapping at {address:#x} refused");
                }
                Err(e) => panic!("map: {e}"),
            }
            match queue.map_mut(&buf, 0..3) {
                Ok(mut mapped) => {
                    assert!(aligned(mapped.as_ptr()));
                    mapped[1] = Page([9; 1024]);
                }
                Err(Error::HostMisaligned { .. }) => {
                    queue.write_at(&buf, 1, &[Page([9; 1024])]).unwrap()
                }
                Err(e) => panic!("map_mut: {e}"),
            }
            // Nothing stays mapped: a write and a read go through.
            queue.write(&buf, &[Page([1; 1024]); 3]).unwrap();
            assert_eq!(
                queue.read_owned(&buf).unwrap().wait().unwrap(),
                [Page([1; 1024]); 3]
            );
            match ctx.host_buffer::<Page>(2) {
                Ok(host) => assert!(aligned(host.as_ptr())),
                Err(Error::HostMisaligned { .. }) => {}
                Err(e) => panic!("host_buffer: {e}"),
            }
        },
    );
}
