//! Views: commands on part of a buffer, with hazards per byte range. Orders are proven
//! with user events as gates: a command that must not wait ends while the gate is closed,
//! one that must wait has not ended until it opens.

use cl_lifetime::{Arena, Arg, BufferUse, ClBuffer, Context, Error, Transfer};

use crate::common;

use common::sub_buffer_unit as unit;

fn gates_work(ctx: &Context) -> bool {
    !common::not_on(ctx, "oclgrind", common::oclgrind::GATES)
}

#[test]
fn kernels_on_disjoint_views_do_not_wait_on_each_other() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let half = 8 * unit(&ctx);
    let buf = ctx.buffer_from(&vec![10i32; 2 * half]).unwrap();
    let (low, high) = buf.split_at(half).unwrap();
    let gate = ctx.user_event().unwrap();
    // SAFETY: increment touches low[i] only where i < half, low's length.
    let gated = unsafe {
        first.after(&[gate.event()]).launch(
            &increment,
            &[half],
            &[Arg::read_write(low), Arg::scalar(half as u32)],
        )
    }
    .unwrap();
    // Ends while the gate is closed: it waits for nothing on the other half (polled, so
    // that a wrong wait fails the test instead of hanging it).
    // SAFETY: increment touches high[i] only where i < half, high's length.
    let other = unsafe {
        second.launch(
            &increment,
            &[half],
            &[Arg::read_write(high), Arg::scalar(half as u32)],
        )
    }
    .unwrap();
    let read_other = second.read_owned(high).unwrap();
    second.flush().unwrap();
    assert!(
        common::eventually(|| read_other.event().is_terminal()),
        "a launch and a read on the other half waited for the gated launch"
    );
    assert!(other.is_terminal());
    assert_eq!(read_other.wait().unwrap(), vec![11; half]);
    assert!(
        !gated.is_terminal(),
        "the gated launch ran before its gate opened"
    );
    // Overlaps the gated view: ordered after it.
    let read = second.read_owned(low).unwrap();
    assert!(
        !read.event().is_terminal(),
        "a read of the gated view ran first"
    );
    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), vec![11; half]);
}

#[test]
fn a_command_on_an_overlapping_view_waits_for_the_writer() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let u = unit(&ctx);
    let buf = ctx.buffer_from(&vec![0u32; 8 * u]).unwrap();
    let writer = buf.view(0..4 * u).unwrap();
    let gate = ctx.user_event().unwrap();
    let gated = first.after(&[gate.event()]).fill(writer, 5).unwrap();
    // Shares one element with the gated fill: each command kind waits for it.
    let overlap = buf.view(4 * u - 1..6 * u).unwrap();
    let read = second.read_owned(overlap).unwrap();
    let fill = second.fill(overlap.view(1..).unwrap(), 6).unwrap();
    let overwrite = second.fill(overlap, 7).unwrap();
    second.flush().unwrap();
    for (what, event) in [
        ("read", read.event()),
        ("fill", &fill),
        ("write", &overwrite),
    ] {
        assert!(!event.is_terminal(), "the overlapping {what} ran first");
    }
    assert!(!gated.is_terminal());
    gate.complete().unwrap();
    let mut expected = vec![5u32];
    expected.extend(vec![0u32; 2 * u]);
    assert_eq!(
        read.wait().unwrap(),
        expected,
        "the read saw the gated write only"
    );
    let mut all = vec![5u32; 8 * u];
    all[4 * u - 1..6 * u].fill(7);
    all[6 * u..].fill(0);
    assert_eq!(common::contents(&second, &buf), all);
}

/// OpenCL leaves concurrent use of a buffer and a sub-buffer of it undefined where one
/// writes, whatever bytes each touches (NVIDIA's driver crashed on it in the random
/// schedules): a command through the buffer itself waits for a kernel writing a view,
/// even of other bytes, while a transfer on another view (through its own sub-buffer)
/// does not.
#[test]
fn a_command_through_the_buffer_waits_for_a_kernel_writing_a_view_whatever_the_bytes() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let buf = ctx.buffer_from(&vec![0i32; 4 * u]).unwrap();
    let (low, high) = buf.split_at(2 * u).unwrap();
    // The high view gets its sub-buffer (a kernel argument), which its transfers then use.
    // SAFETY: with n = 0, increment touches nothing.
    unsafe {
        second.launch(
            &increment,
            &[2 * u],
            &[Arg::read_write(high), Arg::scalar(0u32)],
        )
    }
    .unwrap()
    .wait()
    .unwrap();
    let gate = ctx.user_event().unwrap();
    // SAFETY: increment touches low[i] only where i < 2 * u, low's length.
    unsafe {
        first.after(&[gate.event()]).launch(
            &increment,
            &[2 * u],
            &[Arg::read_write(low), Arg::scalar(2 * u as u32)],
        )
    }
    .unwrap();
    // Through the high view's sub-buffer: no wait.
    let on_view = second.read_owned(high).unwrap();
    second.flush().unwrap();
    assert!(
        common::eventually(|| on_view.event().is_terminal()),
        "a read of the other view waited for the gated kernel"
    );
    // Through the buffer itself, of the high bytes only: waits.
    let through_buffer = second.fill_range(&buf, 7, 3 * u..4 * u).unwrap();
    second.flush().unwrap();
    assert!(
        !through_buffer.is_terminal(),
        "a fill through the buffer ran beside a kernel writing a sub-buffer of it"
    );
    gate.complete().unwrap();
    through_buffer.wait().unwrap();
    assert_eq!(on_view.wait().unwrap(), vec![0; 2 * u]);
    let mut expected = vec![1i32; 2 * u];
    expected.extend(vec![0; u]);
    expected.extend(vec![7; u]);
    assert_eq!(common::contents(&second, &buf), expected);
}

#[test]
fn a_command_on_the_whole_buffer_waits_for_a_view_s_command_and_the_reverse() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let u = unit(&ctx);
    let buf = ctx.buffer_from(&vec![0u32; 4 * u]).unwrap();
    let part = buf.view(u..2 * u).unwrap();

    let gate = ctx.user_event().unwrap();
    let on_view = first.after(&[gate.event()]).fill(part, 1).unwrap();
    let whole = second.read_owned(&buf).unwrap();
    second.flush().unwrap();
    assert!(
        !whole.event().is_terminal(),
        "a whole-buffer read passed a view's write"
    );
    gate.complete().unwrap();
    on_view.wait().unwrap();
    let mut expected = vec![0u32; 4 * u];
    expected[u..2 * u].fill(1);
    assert_eq!(whole.wait().unwrap(), expected);

    let gate = ctx.user_event().unwrap();
    let on_whole = first.after(&[gate.event()]).fill(&buf, 2).unwrap();
    let on_view = second.read_owned(part).unwrap();
    second.flush().unwrap();
    assert!(
        !on_view.event().is_terminal(),
        "a view's read passed a whole-buffer write"
    );
    gate.complete().unwrap();
    on_whole.wait().unwrap();
    assert_eq!(on_view.wait().unwrap(), vec![2u32; u]);
}

#[test]
fn release_waits_for_the_commands_of_every_view() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let buf = ctx.buffer_from(&vec![0i32; 4 * u]).unwrap();
    let gate = ctx.user_event().unwrap();
    // SAFETY: increment touches the view's element i only where i < u, its length.
    let launched = unsafe {
        queue.after(&[gate.event()]).launch(
            &increment,
            &[u],
            &[
                Arg::read_write(buf.view(2 * u..3 * u).unwrap()),
                Arg::scalar(u as u32),
            ],
        )
    }
    .unwrap();
    let filled = queue.fill(buf.view(3 * u..).unwrap(), 3).unwrap();
    queue.flush().unwrap();
    let watch = common::watch(&buf, &[&launched, &filled]);
    drop((launched, filled));
    let report = common::returns_only_after(
        "the release of a buffer whose view's launch is gated",
        move || buf.release().unwrap(),
        || {
            assert!(
                !watch.fired(),
                "memory freed while a view's launch was gated"
            );
            gate.complete().unwrap();
        },
    );
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(report.freed, "{report:?}");
}

#[test]
fn a_kernel_on_a_view_sees_the_view_s_first_element_at_index_zero_and_writes_only_the_view() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let buf = ctx
        .buffer_from(&(0..6 * u as i32).collect::<Vec<_>>())
        .unwrap();
    let view = buf.view(2 * u..5 * u).unwrap();
    // More work items than the view's elements; the kernel's bound keeps it inside.
    let n = u;
    // SAFETY: increment touches view[i] only where i < n = u, below its length 3 * u.
    unsafe {
        queue.launch(
            &increment,
            &[3 * u],
            &[Arg::read_write(view), Arg::scalar(n as u32)],
        )
    }
    .unwrap()
    .wait()
    .unwrap();
    let mut expected: Vec<i32> = (0..6 * u as i32).collect();
    for x in &mut expected[2 * u..3 * u] {
        *x += 1;
    }
    assert_eq!(common::contents(&queue, &buf), expected);
    assert_eq!(buf.kept_sub_buffers(), 1);
    // The same view again, by reference: the kept sub-buffer.
    #[allow(clippy::needless_borrows_for_generic_args)]
    // SAFETY: increment touches view[i] only where i < n = u, below its length 3 * u.
    unsafe {
        queue.launch(
            &increment,
            &[n],
            &[Arg::read_write(&view), Arg::scalar(n as u32)],
        )
    }
    .unwrap();
    assert_eq!(buf.kept_sub_buffers(), 1);
    for x in &mut expected[2 * u..3 * u] {
        *x += 1;
    }
    assert_eq!(common::contents(&queue, &buf), expected);
}

#[test]
fn a_view_launched_at_an_origin_off_the_device_alignment_is_a_typed_error_naming_it() {
    let ctx = device!();
    let u = unit(&ctx);
    if u == 1 {
        common::not_run("the device places sub-buffers at any byte");
        return;
    }
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let buf = ctx.buffer_from(&vec![0i32; 4 * u]).unwrap();
    // SAFETY: refused for the view's alignment; increment would touch i < u of its u elements.
    let err = unsafe {
        queue.launch(
            &increment,
            &[u],
            &[
                Arg::read_write(buf.view(1..u + 1).unwrap()),
                Arg::scalar(u as u32),
            ],
        )
    }
    .unwrap_err();
    let align = u * size_of::<i32>();
    assert!(
        matches!(err, Error::ViewMisaligned { byte_offset: 4, align: a } if a == align),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("CL_DEVICE_MEM_BASE_ADDR_ALIGN"),
        "{err}"
    );
    // Nothing was enqueued or recorded, and the buffer is as it was.
    assert_eq!(buf.record_len(), 0);
    assert_eq!(common::contents(&queue, &buf), vec![0i32; 4 * u]);
}

#[test]
fn transfers_maps_copies_and_raw_commands_on_a_view_use_its_elements() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&(0..100u32).collect::<Vec<_>>()).unwrap();
    let view = buf.view(10..30).unwrap();
    assert_eq!(
        (view.offset(), view.len(), view.byte_offset()),
        (10, 20, 40)
    );
    // Offsets count from the view's start.
    queue.write_at(view, 5, &[1000, 1001]).unwrap();
    let mut two = [0u32; 2];
    queue.read_at(view, 5, &mut two).unwrap();
    assert_eq!(two, [1000, 1001]);
    assert_eq!(
        queue.read_owned_range(view, 0..3).unwrap().wait().unwrap(),
        vec![10, 11, 12]
    );
    {
        let mapped = queue.map(view.view(4..7).unwrap(), 0..3).unwrap();
        assert_eq!(&mapped[..], &[14, 1000, 1001]);
    }
    {
        let mut mapped = queue.map_mut(view, 19..20).unwrap();
        mapped[0] = 7;
    }
    queue.fill_range(view, 9, 0..2).unwrap();
    // A copy between two views of one buffer.
    queue
        .copy(buf.view(0..5).unwrap(), buf.view(90..95).unwrap())
        .unwrap();
    // A raw fill of the view's bytes, at the view's byte offset in the memory object.
    let tail = buf.view(95..).unwrap();
    let seven = 77u32;
    // SAFETY: the fill writes the view's bytes only, waits on the list given, and hands
    // its event's one reference over.
    unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[BufferUse::write(tail)], |raw_queue, wait| {
                cl_lifetime::opencl3::command_queue::enqueue_fill_buffer(
                    raw_queue,
                    tail.buffer().as_raw(),
                    std::ptr::from_ref(&seven).cast(),
                    size_of::<u32>(),
                    tail.byte_offset(),
                    tail.bytes(),
                    wait.len() as u32,
                    if wait.is_empty() {
                        std::ptr::null()
                    } else {
                        wait.as_ptr()
                    },
                )
                .map_err(|status| Error::Cl {
                    call: "clEnqueueFillBuffer",
                    status: cl_lifetime::ClStatus(status),
                })
            })
    }
    .unwrap();
    let mut expected: Vec<u32> = (0..100).collect();
    expected[15] = 1000;
    expected[16] = 1001;
    expected[29] = 7;
    expected[10..12].fill(9);
    expected.copy_within(0..5, 90);
    expected[95..].fill(77);
    assert_eq!(common::contents(&queue, &buf), expected);
}

#[test]
fn a_range_that_leaves_the_buffer_or_the_view_is_a_typed_error() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf: ClBuffer<u32> = ctx.buffer(16).unwrap();
    assert!(matches!(
        buf.view(8..17),
        Err(Error::OutOfRange {
            transfer: Transfer::View,
            ..
        })
    ));
    assert!(matches!(buf.split_at(16), Err(Error::ZeroLength)));
    let view = buf.view(8..).unwrap();
    assert!(matches!(view.view(0..9), Err(Error::OutOfRange { .. })));
    // A write past the view's end, though inside the buffer.
    assert!(matches!(
        queue.write_at(view, 7, &[1, 2]),
        Err(Error::OutOfRange {
            transfer: Transfer::Write,
            offset: 7,
            len: 2,
            buffer_len: 8
        })
    ));
    assert_eq!(buf.record_len(), 0);
}

#[test]
fn a_view_of_an_arena_carved_buffer_launches_on_the_arena_s_memory() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let arena = Arena::new(&ctx, 64 * u * size_of::<i32>()).unwrap();
    let _first = arena.carve::<i32>(3).unwrap();
    let buf = arena.carve::<i32>(4 * u).unwrap();
    queue.fill(&buf, 1).unwrap();
    // SAFETY: increment touches the view's element i only where i < u, its length.
    unsafe {
        queue.launch(
            &increment,
            &[u],
            &[
                Arg::read_write(buf.view(u..2 * u).unwrap()),
                Arg::scalar(u as u32),
            ],
        )
    }
    .unwrap();
    let mut expected = vec![1i32; 4 * u];
    expected[u..2 * u].fill(2);
    assert_eq!(common::contents(&queue, &buf), expected);
    buf.release().unwrap();
}

#[test]
fn a_buffer_keeps_one_sub_buffer_per_view_passed_to_kernels_and_transfers_make_none() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let views = 40;
    let buf = ctx.buffer_from(&vec![0i32; views * u]).unwrap();
    for k in 0..views {
        queue
            .fill(buf.view(k * u..(k + 1) * u).unwrap(), 1)
            .unwrap();
    }
    assert_eq!(buf.kept_sub_buffers(), 0);
    for round in 0..2 {
        for k in 0..views {
            let view = buf.view(k * u..(k + 1) * u).unwrap();
            // SAFETY: increment touches view[i] only where i < u, its length.
            unsafe {
                queue.launch(
                    &increment,
                    &[u],
                    &[Arg::read_write(view), Arg::scalar(u as u32)],
                )
            }
            .unwrap();
        }
        assert_eq!(buf.kept_sub_buffers(), views, "round {round}");
    }
    // Transfers on those views go through their sub-buffers.
    for k in 0..views {
        queue
            .fill_range(buf.view(k * u..(k + 1) * u).unwrap(), 7, 0..1)
            .unwrap();
    }
    assert_eq!(buf.kept_sub_buffers(), views);
    let mut expected = vec![3i32; views * u];
    for k in 0..views {
        expected[k * u] = 7;
    }
    assert_eq!(common::contents(&queue, &buf), expected);
    assert!(buf.release().unwrap().freed);
}

/// One view given as two arguments of one launch (`axpy_int(x, y)` with `x` = `y`), with
/// and without a gate before it; and two different views of one buffer as its two
/// arguments.
#[test]
fn one_view_may_be_two_arguments_of_a_launch() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let axpy = ctx
        .program("schedule.cl", "")
        .unwrap()
        .kernel("axpy_int")
        .unwrap();
    let u = unit(&ctx);
    let n = 2 * u;
    for gated in [false, true] {
        let buf = ctx.buffer_from(&vec![3i32; 4 * u]).unwrap();
        let view = buf.view(..n - 5).unwrap();
        let gate = ctx.user_event().unwrap();
        let deps = [gate.event()];
        let after = queue.after(if gated { &deps[..] } else { &[] });
        // y = 2 * y + y on the view: 9 where it runs.
        // SAFETY: axpy_int touches view[i] only where i < its length, and writes it through the
        // argument given as written.
        unsafe {
            after.launch(
                &axpy,
                &[64],
                &[
                    Arg::read(view),
                    Arg::read_write(view),
                    Arg::scalar(2i32),
                    Arg::scalar(view.len() as u32),
                ],
            )
        }
        .unwrap();
        gate.complete().unwrap();
        let mut expected = vec![3i32; 4 * u];
        expected[..n - 5].fill(9);
        assert_eq!(common::contents(&queue, &buf), expected, "gated: {gated}");
        // x and y two views of one buffer: y = 1 * x + y.
        let (x, y) = (buf.view(..u).unwrap(), buf.view(2 * u..3 * u).unwrap());
        // SAFETY: axpy_int touches x[i] and y[i] only where i < u, their length, and writes only y.
        unsafe {
            queue.launch(
                &axpy,
                &[64],
                &[
                    Arg::read(x),
                    Arg::read_write(y),
                    Arg::scalar(1i32),
                    Arg::scalar(u as u32),
                ],
            )
        }
        .unwrap();
        for (k, e) in expected[2 * u..3 * u].iter_mut().enumerate() {
            *e += if k < n - 5 { 9 } else { 3 };
        }
        assert_eq!(common::contents(&queue, &buf), expected, "gated: {gated}");
        assert!(buf.release().unwrap().freed);
    }
}

isolated_test! {
    fn a_launch_on_a_view_cancelled_by_its_gate_ends_and_everything_is_released() {
        let ctx = device!();
        if !gates_work(&ctx) {
            return;
        }
        let increment = common::busy(&ctx).kernel("increment").unwrap();
        let u = unit(&ctx);
        for step in ["buffer first", "kernel first"] {
            let queue = ctx.queue().unwrap();
            let kernel = increment.clone();
            let buf = ctx.buffer_from(&vec![1i32; 4 * u]).unwrap();
            let gate = ctx.user_event().unwrap();
            let view = buf.view(u..2 * u).unwrap();
            let args = [Arg::read_write(view), Arg::scalar(u as u32)];
            // SAFETY: increment touches view[i] only where i < u, its length.
            let launched = unsafe { queue.after(&[gate.event()]).launch(&kernel, &[u], &args) }
                .unwrap();
            // Another launch on the same view behind the first.
            // SAFETY: increment touches view[i] only where i < u, its length.
            let second = unsafe { queue.launch(&kernel, &[u], &args) }.unwrap();
            queue.flush().unwrap();
            gate.fail(-1234).unwrap();
            assert!(launched.wait().is_err(), "{step}: the cancelled launch succeeded");
            let _ = second.wait();
            drop((launched, second));
            eprintln!("{step}: releasing");
            if step == "buffer first" {
                let report = buf.release().unwrap();
                assert!(!report.failed.is_empty(), "{step}: {report:?}");
                drop(kernel);
            } else {
                drop(kernel);
                let report = buf.release().unwrap();
                assert!(!report.failed.is_empty(), "{step}: {report:?}");
            }
            eprintln!("{step}: released");
            drop(queue);
        }
        drop(increment);
        drop(ctx);
        eprintln!("context dropped");
    }
}

// Disjoint views and views from one start passed to kernels on two queues, transfers on
// views inside and across them, and the buffer released with its sub-buffers: in a child
// process (NVIDIA's driver crashed on overlapping sub-buffers before the library kept
// none).
isolated_test! {
    fn views_passed_to_kernels_and_transfers_across_them_release_cleanly() {
        let ctx = device!();
        let axpy = ctx
            .program("schedule.cl", "")
            .unwrap()
            .kernel("axpy_int")
            .unwrap();
        let u = unit(&ctx);
        let queues = [ctx.queue().unwrap(), ctx.queue().unwrap()];
        for round in 0..3 {
            let buf = ctx.buffer_from(&vec![1i32; 8 * u]).unwrap();
            let other = ctx.buffer_from(&vec![2i32; 8 * u]).unwrap();
            // Disjoint, and from the start of the first one, ending within it.
            let ranges = [0..3 * u, 0..4, 0..41, 3 * u..5 * u, 6 * u..7 * u, 3 * u..3 * u + 3];
            for (k, range) in ranges.iter().enumerate() {
                let view = buf.view(range.clone()).unwrap();
                let x = other.view(range.clone()).unwrap();
                // SAFETY: axpy_int touches x[i] and view[i] only where i < view.len(), both views'
                // length, and writes only view.
                unsafe {
                    queues[k % 2].launch(
                        &axpy,
                        &[64],
                        &[Arg::read(x), Arg::read_write(view), Arg::scalar(1i32), Arg::scalar(view.len() as u32)],
                    )
                }
                .unwrap();
            }
            assert_eq!(buf.kept_sub_buffers(), 3, "round {round}");
            // Transfers of many lengths inside and across them.
            for k in 0..40 {
                let view = buf.view(k % 5..(k % 7 + 1) * u).unwrap();
                queues[k % 2].fill(view, k as i32).unwrap();
            }
            for queue in &queues {
                queue.finish().unwrap();
            }
            let report = buf.release().unwrap();
            assert!(report.failed.is_empty() && report.freed, "round {round}: {report:?}");
            other.release().unwrap();
        }
    }
}

/// Views passed to kernels may overlap (they were refused with `Error::ViewOverlap` against
/// every view ever launched, issue 50): kernels writing views across each other, on two
/// queues, are ordered by their bytes and lose no write. A view that starts where a kept
/// one does and ends within it is given that one.
#[test]
fn kernels_writing_views_across_each_other_on_two_queues_are_ordered_and_lose_nothing() {
    let ctx = device!();
    let queues = [ctx.queue().unwrap(), ctx.queue().unwrap()];
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let buf = ctx.buffer_from(&vec![0i32; 4 * u]).unwrap();
    let b = buf.view(u..3 * u).unwrap();
    let views = [
        buf.view(0..2 * u).unwrap(),
        b,
        buf.view(0..3 * u).unwrap(),
        buf.view(0..u).unwrap(),
    ];
    for (k, view) in views.into_iter().enumerate() {
        // SAFETY: increment touches the view's element i only where i < n, its length.
        unsafe {
            queues[k % 2].launch(
                &increment,
                &[view.len()],
                &[Arg::read_write(view), Arg::scalar(view.len() as u32)],
            )
        }
        .unwrap();
    }
    // The last one took the kept sub-buffer of 0..2u.
    assert_eq!(buf.kept_sub_buffers(), 3);
    // Transfers take any view.
    queues[0].fill(b, 5).unwrap();
    let mut expected = vec![3i32; u];
    expected.extend(vec![5; 2 * u]);
    expected.extend(vec![0; u]);
    assert_eq!(common::contents(&queues[1], &buf), expected);
}

/// A halo: two read-only views that overlap (elements `0..3u` and `2u..5u`, `u` the
/// device's sub-buffer alignment in elements), each read by a kernel on its own queue.
/// OpenCL defines reading overlapping sub-buffers at once, so the second runs while the
/// first waits behind a closed gate (it was refused with `Error::ViewOverlap`, issue 50).
#[test]
fn overlapping_read_only_views_launched_at_once_on_two_queues_run_without_waiting() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let axpy = ctx
        .program("schedule.cl", "")
        .unwrap()
        .kernel("axpy_int")
        .unwrap();
    let u = unit(&ctx);
    let x = ctx
        .buffer_from(&(0..5 * u as i32).collect::<Vec<_>>())
        .unwrap();
    let (low, high) = (x.view(0..3 * u).unwrap(), x.view(2 * u..5 * u).unwrap());
    let (y_low, y_high) = (
        ctx.buffer_from(&vec![0i32; 3 * u]).unwrap(),
        ctx.buffer_from(&vec![0i32; 3 * u]).unwrap(),
    );
    let copy = |view, y| {
        [
            Arg::read(view),
            Arg::read_write(y),
            Arg::scalar(1i32),
            Arg::scalar(3 * u as u32),
        ]
    };
    let gate = ctx.user_event().unwrap();
    // SAFETY: axpy_int touches element i of the view and of y_low only where i < n = 3u, their length.
    let gated = unsafe {
        first
            .after(&[gate.event()])
            .launch(&axpy, &[3 * u], &copy(low, &y_low))
    }
    .unwrap();
    // SAFETY: axpy_int touches element i of the view and of y_high only where i < n = 3u, their length.
    let other = unsafe { second.launch(&axpy, &[3 * u], &copy(high, &y_high)) }.unwrap();
    second.flush().unwrap();
    assert!(
        common::eventually(|| other.is_terminal()),
        "a read of an overlapping view waited for a gated read"
    );
    assert!(
        !gated.is_terminal(),
        "the gated launch ran before its gate opened"
    );
    gate.complete().unwrap();
    gated.wait().unwrap();
    let all: Vec<i32> = (0..5 * u as i32).collect();
    assert_eq!(common::contents(&first, &y_low), all[..3 * u]);
    assert_eq!(common::contents(&first, &y_high), all[2 * u..]);
    assert_eq!(x.kept_sub_buffers(), 2);
}

/// A kernel writing a view that overlaps a view a gated kernel reads, on another queue, is
/// ordered after the read, not refused (it was `Error::ViewOverlap`, issue 50): the read
/// sees the elements they share as they were before the write.
#[test]
fn a_write_view_overlapping_a_pending_read_view_is_ordered_after_it() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let axpy = ctx
        .program("schedule.cl", "")
        .unwrap()
        .kernel("axpy_int")
        .unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let u = unit(&ctx);
    let before: Vec<i32> = (0..5 * u as i32).collect();
    let x = ctx.buffer_from(&before).unwrap();
    let (read, write) = (x.view(0..3 * u).unwrap(), x.view(2 * u..5 * u).unwrap());
    let y = ctx.buffer_from(&vec![0i32; 3 * u]).unwrap();
    let gate = ctx.user_event().unwrap();
    // SAFETY: axpy_int touches element i of both arguments only where i < n = 3u, their length.
    let gated = unsafe {
        first.after(&[gate.event()]).launch(
            &axpy,
            &[3 * u],
            &[
                Arg::read(read),
                Arg::read_write(&y),
                Arg::scalar(1i32),
                Arg::scalar(3 * u as u32),
            ],
        )
    }
    .unwrap();
    // SAFETY: increment touches the view's element i only where i < n = 3u, its length.
    let writer = unsafe {
        second.launch(
            &increment,
            &[3 * u],
            &[Arg::read_write(write), Arg::scalar(3 * u as u32)],
        )
    }
    .unwrap();
    second.flush().unwrap();
    assert!(
        !writer.is_terminal(),
        "the overlapping write ran before the gated read"
    );
    gate.complete().unwrap();
    writer.wait().unwrap();
    assert!(gated.is_terminal());
    assert_eq!(
        common::contents(&second, &y),
        before[..3 * u],
        "the read saw the later write"
    );
    let mut after = before.clone();
    after[2 * u..].iter_mut().for_each(|v| *v += 1);
    assert_eq!(common::contents(&second, &x), after);
}

/// `add_from(data, first, c)`: `data[first + i] += c`; `copy_from(x, y, first)`:
/// `y[first + i] = x[first + i]`: kernels given whole buffers and the first element.
const FROM: &str = "
__kernel void add_from(__global int *data, const uint first, const int c) {
    size_t i = first + get_global_id(0); data[i] += c; }
__kernel void copy_from(__global const int *x, __global int *y, const uint first) {
    size_t i = first + get_global_id(0); y[i] = x[i]; }";

/// A range argument (`Arg::write_range` / `read_range`: the whole buffer, with the declared
/// elements in the record) starts at any element, 3 here (12 bytes, off every device's
/// sub-buffer alignment), makes no sub-buffer, and has hazards per range: a launch on the
/// next elements and a read of the elements before run while a gated launch on the range
/// waits; a kernel reading elements across it, and a read of them, wait for it.
#[test]
fn a_range_argument_at_an_unaligned_element_offset_works_and_its_hazards_are_per_range() {
    let ctx = device!();
    if !gates_work(&ctx) {
        return;
    }
    let (first, second) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let program = ctx.program_from_source("from", FROM, "").unwrap();
    let (add, copy) = (
        program.kernel("add_from").unwrap(),
        program.kernel("copy_from").unwrap(),
    );
    let x = ctx.buffer_from(&[10i32; 16]).unwrap();
    let y = ctx.buffer_from(&[0i32; 16]).unwrap();
    let gate = ctx.user_event().unwrap();
    // SAFETY: add_from touches data[3 + i], i < 4: elements 3..7 of x, the declared range.
    let gated = unsafe {
        first.after(&[gate.event()]).launch(
            &add,
            &[4],
            &[
                Arg::write_range(&x, 3..7).unwrap(),
                Arg::scalar(3u32),
                Arg::scalar(1i32),
            ],
        )
    }
    .unwrap();
    // Disjoint: these do not wait for the gated launch.
    // SAFETY: add_from touches data[7 + i], i < 4: elements 7..11 of x, the declared range.
    let next = unsafe {
        second.launch(
            &add,
            &[4],
            &[
                Arg::read_write_range(&x, 7..11).unwrap(),
                Arg::scalar(7u32),
                Arg::scalar(2i32),
            ],
        )
    }
    .unwrap();
    let head = second.read_owned(x.view(0..3).unwrap()).unwrap();
    second.flush().unwrap();
    assert!(
        common::eventually(|| next.is_terminal() && head.event().is_terminal()),
        "a launch or a read on other elements waited for the gated range"
    );
    assert!(!gated.is_terminal(), "the gated launch ran before its gate");
    assert_eq!(head.wait().unwrap(), [10; 3]);
    // Across the gated range: they wait.
    // SAFETY: copy_from touches x[5 + i] and y[5 + i], i < 4: elements 5..9, the declared ranges.
    let across = unsafe {
        second.launch(
            &copy,
            &[4],
            &[
                Arg::read_range(&x, 5..9).unwrap(),
                Arg::write_range(&y, 5..9).unwrap(),
                Arg::scalar(5u32),
            ],
        )
    }
    .unwrap();
    let read = second.read_owned(x.view(6..8).unwrap()).unwrap();
    second.flush().unwrap();
    assert!(
        !across.is_terminal(),
        "a kernel reading across the range ran first"
    );
    assert!(
        !read.event().is_terminal(),
        "a read across the range ran first"
    );
    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), [11, 12]);
    let mut expected_x = [10i32; 16];
    expected_x[3..7].fill(11);
    expected_x[7..11].fill(12);
    assert_eq!(common::contents(&first, &x), expected_x);
    let mut expected_y = [0i32; 16];
    expected_y[5..9].copy_from_slice(&expected_x[5..9]);
    assert_eq!(common::contents(&first, &y), expected_y);
    assert_eq!((x.kept_sub_buffers(), y.kept_sub_buffers()), (0, 0));
    // A range is checked as a view's is.
    assert!(matches!(
        Arg::read_range(&x, 14..17),
        Err(Error::OutOfRange {
            transfer: Transfer::View,
            ..
        })
    ));
    assert!(matches!(Arg::write_range(&x, 4..4), Err(Error::ZeroLength)));
    // Of a view: counted from the view's start; the kernel is given the whole buffer.
    let tail = x.view(8..).unwrap();
    // SAFETY: add_from touches data[9 + i], i < 2: elements 9..11 of x, the tail's 1..3.
    unsafe {
        first.launch(
            &add,
            &[2],
            &[
                Arg::write_range(tail, 1..3).unwrap(),
                Arg::scalar(9u32),
                Arg::scalar(5i32),
            ],
        )
    }
    .unwrap();
    expected_x[9..11].iter_mut().for_each(|v| *v += 5);
    assert_eq!(common::contents(&first, &x), expected_x);
}

/// A copy whose source and destination are overlapping bytes of one buffer (through the
/// buffer, its views, in any combination) is refused by the library itself with
/// `CL_MEM_COPY_OVERLAP`, before the driver sees it: the buffer is unchanged and nothing is
/// recorded. Intel's runtime and NVIDIA's ran such a copy where one side was a view's
/// sub-buffer (they refuse overlap only within one memory object; PoCL refuses it there
/// too), so each case runs with the views fresh and again once they have sub-buffers (kept
/// for kernels), here and under the driver emulator's `unchecked-overlap` profile (`make
/// emulate`), which runs such copies as those drivers do. Copies between disjoint (or
/// adjacent) ranges of one buffer still run.
#[test]
fn a_copy_between_overlapping_bytes_of_one_buffer_is_refused_and_changes_nothing() {
    let ctx = device!();
    overlapping_copies_are_refused(&ctx);
    let name =
        test_path!(a_copy_between_overlapping_bytes_of_one_buffer_is_refused_and_changes_nothing);
    common::under_emulation(ctx, &name, "unchecked-overlap", || {
        let ctx = device!();
        assert_eq!(
            ctx.device().platform_name(),
            "NVIDIA CUDA",
            "the emulator is not the OpenCL library of this process"
        );
        overlapping_copies_are_refused(&ctx);
    });
}

/// The body of `a_copy_between_overlapping_bytes_of_one_buffer_is_refused_and_changes_nothing`.
fn overlapping_copies_are_refused(ctx: &Context) {
    let queue = ctx.queue().expect("a queue");
    let increment = common::busy(ctx).kernel("increment").expect("increment");
    let on = ctx.device().platform_name().to_string();
    // 256 elements, or the next multiple of where a sub-buffer may start.
    let q = 256usize.next_multiple_of(unit(ctx));
    let buf = ctx.buffer_from(&common::ramp(4 * q, 3)).expect("a buffer");
    let mut expected = common::ramp(4 * q, 3);
    for with_subs in [false, true] {
        if with_subs {
            // Kernels on the low and high halves: each keeps a sub-buffer, through which
            // later transfers on those views go.
            for half in [0..2 * q, 2 * q..4 * q] {
                let view = buf.view(half.clone()).expect("a half");
                let args = [Arg::read_write(view), Arg::scalar((2 * q) as u32)];
                // SAFETY: increment touches view[i] only where i < 2 * q, its length.
                unsafe { queue.launch(&increment, &[2 * q], &args) }.expect("the launch");
                expected[half].iter_mut().for_each(|x| *x += 1);
            }
            assert_eq!(buf.kept_sub_buffers(), 2, "{on}");
        }
        let (low, high) = buf.split_at(2 * q).expect("two halves");
        let middle = buf.view(q..3 * q).expect("the middle");
        let cases = [
            ("low half to the middle", queue.copy(low, middle)),
            ("the middle to the low half", queue.copy(middle, low)),
            (
                "low half to the buffer",
                queue.copy_range(low, 0, &buf, q / 2, q),
            ),
            (
                "the buffer to the high half",
                queue.copy_range(&buf, 2 * q + q / 2, high, 0, q),
            ),
            ("high half to itself", queue.copy_range(high, 0, high, 1, q)),
            (
                "the buffer to itself",
                queue.copy_range(&buf, q, &buf, q + 1, q),
            ),
        ];
        let before = buf.record_len();
        for (what, copied) in cases {
            let what = format!("{on}: {what} (sub-buffers kept: {with_subs})");
            match copied {
                Err(Error::Cl { call, status }) => {
                    assert_eq!(status.name(), "CL_MEM_COPY_OVERLAP", "{what}");
                    assert_eq!(call, "clEnqueueCopyBuffer", "{what}");
                }
                other => panic!("{what}: {other:?}, not CL_MEM_COPY_OVERLAP"),
            }
        }
        assert_eq!(
            buf.record_len(),
            before,
            "{on}: a refused copy was recorded"
        );
        let got = common::contents(&queue, &buf);
        assert!(
            got == expected,
            "{on}: a refused copy changed the buffer ({with_subs})"
        );
    }
    // Disjoint and adjacent ranges of one buffer: the copies run.
    let (low, high) = buf.split_at(2 * q).expect("two halves");
    queue
        .copy_range(low, 0, high, 0, q)
        .expect("a disjoint copy");
    expected.copy_within(0..q, 2 * q);
    queue
        .copy_range(&buf, q, low, 0, q)
        .expect("an adjacent copy");
    expected.copy_within(q..2 * q, 0);
    queue
        .copy_range(high, q, &buf, q, q)
        .expect("a disjoint copy");
    expected.copy_within(3 * q..4 * q, q);
    assert!(
        common::contents(&queue, &buf) == expected,
        "{on}: the disjoint copies"
    );
    let report = buf.release().expect("the release");
    assert!(report.failed.is_empty(), "{on}: {report:?}");
}

/// Issue 50: a launch refused with `Error::Mapped` or `Error::ContextMismatch` still made
/// its views' sub-buffers and kept them, on another context's buffer too, so a valid view
/// across one of them was refused next with `Error::ViewOverlap`. A refused launch makes
/// none.
#[test]
fn a_refused_launch_keeps_no_sub_buffer() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let queue = ctx.queue().unwrap();
    let increment = common::busy(&ctx).kernel("increment").unwrap();
    let axpy = ctx
        .program("schedule.cl", "")
        .unwrap()
        .kernel("axpy_int")
        .unwrap();
    let u = unit(&ctx);
    // SAFETY: increment touches view[i] only where i < 2 * u, the length of every view given.
    let launch_low = |view| unsafe {
        queue.launch(
            &increment,
            &[2 * u],
            &[Arg::read_write(view), Arg::scalar(2 * u as u32)],
        )
    };
    let buf = ctx.buffer_from(&vec![0i32; 4 * u]).unwrap();
    // Mapped: one view, and one view as two arguments.
    let mapped = queue.map_mut(&buf, 0..4 * u).unwrap();
    let low = buf.view(..2 * u).unwrap();
    let err = launch_low(low).unwrap_err();
    assert!(matches!(err, Error::Mapped), "{err:?}");
    // SAFETY: refused for the mapping; axpy_int would touch i < 2 * u of low's 2 * u.
    let err = unsafe {
        queue.launch(
            &axpy,
            &[2 * u],
            &[
                Arg::read(low),
                Arg::read_write(low),
                Arg::scalar(2i32),
                Arg::scalar(2 * u as u32),
            ],
        )
    }
    .unwrap_err();
    assert!(matches!(err, Error::Mapped), "{err:?}");
    assert_eq!(buf.kept_sub_buffers(), 0, "after Mapped");
    drop(mapped);
    // Another context's buffer, alone and beside one of this context.
    let foreign = other.buffer::<i32>(4 * u).unwrap();
    let err = launch_low(foreign.view(..2 * u).unwrap()).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    // SAFETY: refused for the foreign buffer; axpy_int would touch i < 2 * u of both views.
    let err = unsafe {
        queue.launch(
            &axpy,
            &[2 * u],
            &[
                Arg::read(foreign.view(..2 * u).unwrap()),
                Arg::read_write(low),
                Arg::scalar(2i32),
                Arg::scalar(2 * u as u32),
            ],
        )
    }
    .unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    // A dependency of another context.
    let gate = other.user_event().unwrap();
    // SAFETY: refused for the foreign gate; increment would touch i < 2 * u of low's 2 * u.
    let err = unsafe {
        queue.after(&[gate.event()]).launch(
            &increment,
            &[2 * u],
            &[Arg::read_write(low), Arg::scalar(2 * u as u32)],
        )
    }
    .unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    gate.complete().unwrap();
    assert_eq!(
        (buf.kept_sub_buffers(), foreign.kept_sub_buffers()),
        (0, 0),
        "after ContextMismatch"
    );
    // A view across the refused ones is valid.
    launch_low(buf.view(u..3 * u).unwrap()).unwrap();
    assert_eq!(buf.kept_sub_buffers(), 1);
    let mut expected = vec![0i32; 4 * u];
    expected[u..3 * u].fill(1);
    assert_eq!(common::contents(&queue, &buf), expected);
    assert_eq!(foreign.record_len(), 0);
}

/// Issue 50: `view(17..)` of 16 elements was refused as `ReversedRange 17..16`, a range
/// the caller never wrote. A view starting past the end is out of range, whatever its
/// end; a range written reversed inside the buffer is still reversed.
#[test]
fn a_view_starting_past_the_end_is_out_of_range_whatever_its_end() {
    let ctx = device!();
    let buf: ClBuffer<u32> = ctx.buffer(16).unwrap();
    let out_of_range = |got: Result<_, Error>, want: (usize, usize, usize)| match got {
        Err(Error::OutOfRange {
            transfer: Transfer::View,
            offset,
            len,
            buffer_len,
        }) => assert_eq!((offset, len, buffer_len), want),
        Err(e) => panic!("{e:?} where OutOfRange {want:?} was due"),
        Ok(_) => panic!("a view out of range was made"),
    };
    out_of_range(buf.view(17..).map(|_| ()), (17, 0, 16));
    out_of_range(buf.view(17..20).map(|_| ()), (17, 3, 16));
    #[allow(clippy::reversed_empty_ranges)]
    let past_and_reversed = buf.view(20..18);
    out_of_range(past_and_reversed.map(|_| ()), (20, 0, 16));
    out_of_range(buf.split_at(17).map(|_| ()), (0, 17, 16));
    let tail = buf.view(8..).unwrap();
    out_of_range(tail.view(9..).map(|_| ()), (9, 0, 8));
    assert!(matches!(buf.view(16..), Err(Error::ZeroLength)));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = buf.view(6..2);
    assert!(matches!(
        reversed,
        Err(Error::ReversedRange {
            transfer: Transfer::View,
            start: 6,
            end: 2
        })
    ));
}

/// The randomized run over views: where a buffer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    /// `Context::buffer` (zeroed), or `resize` of one.
    Context,
    /// `Pool::acquire`.
    Pool,
    /// `Arena::carve` (zeroed).
    Arena,
}

/// A buffer of the randomized run over views, and the host model of its contents.
struct Modelled {
    buf: ClBuffer<i32>,
    from: From,
    model: Vec<i32>,
}

/// An SVM allocation of the randomized run over views, and its model.
struct ModelledSvm {
    svm: cl_lifetime::SvmBuffer<i32>,
    model: Vec<i32>,
}

/// Seed of [`random_views_with_pools_arenas_resize_and_svm_match_a_host_model`].
const VIEWS_SEED_VAR: &str = "CL_LIFETIME_VIEWS_SEED";
/// Its number of steps (default [`VIEWS_DEFAULT_STEPS`]: a few seconds on PoCL).
const VIEWS_STEPS_VAR: &str = "CL_LIFETIME_VIEWS_STEPS";
const VIEWS_DEFAULT_STEPS: usize = 600;
/// The operations it may pick (their numbers in the test, comma-separated; default all):
/// to find which of them a driver's fault needs.
const VIEWS_OPS_VAR: &str = "CL_LIFETIME_VIEWS_OPS";

/// Random programs of views (`view`, `split_at`) given to kernels and transfers on two
/// queues, over buffers from the context, a pool, an arena and SVM allocations, with
/// `resize`, arena resets and the three kinds of release: the contents match a host model
/// after every read, and the memory ledger matches a model of the allocations at every
/// step: a pooled buffer goes back to its pool whatever views of it went to kernels, an
/// acquire of a size class with an unused block reuses it (no driver allocation), live
/// bytes are what is held, the peak lies between the highest held total and that total
/// with every deferred release still pending, and at the end nothing is live, pending or
/// pooled. The seed is printed first (`CL_LIFETIME_VIEWS_SEED` replays it;
/// `CL_LIFETIME_VIEWS_STEPS` runs longer); the run is in a child process, so that a hang
/// fails with the seed.
#[test]
fn random_views_with_pools_arenas_resize_and_svm_match_a_host_model() {
    common::isolated(
        &test_path!(random_views_with_pools_arenas_resize_and_svm_match_a_host_model),
        common::CHILD_LIMIT,
        &[],
        || {
            use cl_lifetime::{Pool, PoolOptions, SvmKind};
            use std::collections::HashMap;

            let ctx = device!();
            let seed = std::env::var(VIEWS_SEED_VAR)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(1)
                });
            let steps = std::env::var(VIEWS_STEPS_VAR)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(VIEWS_DEFAULT_STEPS);
            eprintln!("random views seed: {seed} (rerun with {VIEWS_SEED_VAR}={seed})");
            let started = std::time::Instant::now();
            let mut rng = common::Rng(seed);
            let u = unit(&ctx);
            let queues = [ctx.queue().unwrap(), ctx.queue().unwrap()];
            let increment = common::busy(&ctx).kernel("increment").unwrap();
            // A threshold no run reaches: every pooled block goes back to its pool.
            let pool = Pool::new(&ctx, PoolOptions::default().release_threshold(1 << 30)).unwrap();
            let arena_bytes = 32 * u * size_of::<i32>();
            let mut arena = Some(Arena::new(&ctx, arena_bytes).unwrap());
            let svm_works = ctx.svm::<i32>(u, SvmKind::Coarse).is_ok();
            let mut held: Vec<Modelled> = Vec::new();
            let mut svms: Vec<ModelledSvm> = Vec::new();
            // Unused blocks the pool must hold, by size class (bytes).
            let mut pooled: HashMap<usize, usize> = HashMap::new();
            // Bytes released deferred (or left by a resize) since the last `wait_deferred`.
            let mut deferred = 0u64;
            // The peak so far (the probe of SVM support above included).
            let start_peak = ctx.memory_stats().peak_bytes;
            let (mut low_peak, mut high_peak) = (start_peak, start_peak);
            let mut counts = [0usize; 16];
            let knobs = ViewsKnobs::from_env();
            let at = |step: usize, what: &str| format!("seed {seed}, step {step} ({what})");

            for step in 0..steps {
                let qi = rng.below(2) % knobs.queues;
                let q = &queues[qi];
                let op = rng.below(16);
                if let Ok(ops) = std::env::var(VIEWS_OPS_VAR) {
                    if !ops.split(',').any(|o| o == op.to_string()) {
                        continue;
                    }
                }
                if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
                    eprintln!("step {step}: op {op} on queue {qi}; held {}", held.len());
                }
                counts[op] += 1;
                let before = ctx.memory_stats();
                let mut what = "";
                match op {
                    // A buffer from the context, zeroed.
                    0 if held.len() < 12 => {
                        what = "context buffer";
                        let len = u * rng.between(1, 6);
                        let buf = ctx.buffer::<i32>(len).unwrap();
                        let ms = ctx.memory_stats();
                        assert_eq!(
                            ms.driver_allocations + ms.reclaimed,
                            before.driver_allocations + before.reclaimed + 1,
                            "{}: {ms:?}",
                            at(step, what)
                        );
                        held.push(Modelled {
                            buf,
                            from: From::Context,
                            model: vec![0; len],
                        });
                    }
                    // A buffer from the pool, filled at once (it may hold an old owner's data).
                    1 | 2 if held.len() < 12 => {
                        what = "pool acquire";
                        let len = u * [2, 4, 4, 8][rng.below(4)];
                        let buf = pool.acquire::<i32>(len).unwrap();
                        let ms = ctx.memory_stats();
                        let class = buf.block_bytes();
                        let unused = pooled.entry(class).or_default();
                        if *unused > 0 {
                            *unused -= 1;
                            assert_eq!(
                                (ms.reuses, ms.driver_allocations),
                                (before.reuses + 1, before.driver_allocations),
                                "{}: the pool holds an unused block of {class} bytes, yet this \
                         acquire did not reuse it: {ms:?}",
                                at(step, what)
                            );
                        } else {
                            assert_eq!(ms.reuses, before.reuses, "{}: {ms:?}", at(step, what));
                        }
                        let value = rng.next() as i32;
                        q.fill(&buf, value).unwrap();
                        held.push(Modelled {
                            buf,
                            from: From::Pool,
                            model: vec![value; len],
                        });
                    }
                    // A carve of the arena, zeroed; or a reset once nothing carved is alive.
                    3 => {
                        what = "arena";
                        let a = arena.as_mut().unwrap();
                        let len = u * rng.between(1, 4);
                        let carved = held.iter().any(|h| h.from == From::Arena);
                        let reset = !carved && rng.chance(30);
                        if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
                            eprintln!("  arena reset {reset} len {len}");
                        }
                        if reset {
                            // A carve released deferred keeps the arena busy until it is done.
                            knobs.settle(&queues);
                            ctx.wait_deferred();
                            a.reset().unwrap();
                        } else if held.len() < 12 {
                            match a.carve::<i32>(len) {
                                Ok(buf) => held.push(Modelled {
                                    buf,
                                    from: From::Arena,
                                    model: vec![0; len],
                                }),
                                Err(Error::ArenaFull { .. }) => {}
                                Err(e) => panic!("{}: {e}", at(step, what)),
                            }
                        }
                    }
                    // A kernel on each half of a buffer through `split_at`, one per queue: the
                    // frame service's pattern.
                    4 | 5 if !held.is_empty() => {
                        what = "kernels on both halves";
                        let pick = rng.below(held.len());
                        let h = &mut held[pick];
                        if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
                            eprintln!("halves of a buffer from {:?}", h.from);
                        }
                        let units = h.buf.len() / u;
                        if units >= 2 {
                            let mid = u * rng.between(1, units - 1);
                            let (low, high) = h.buf.split_at(mid).unwrap();
                            for (k, (view, range)) in [(low, 0..mid), (high, mid..h.buf.len())]
                                .into_iter()
                                .enumerate()
                            {
                                launch_increment(
                                    &queues[(qi + k) % knobs.queues],
                                    &increment,
                                    view,
                                    &at(step, what),
                                );
                                h.model[range]
                                    .iter_mut()
                                    .for_each(|x| *x = x.wrapping_add(1));
                            }
                        }
                    }
                    // A kernel on an aligned view.
                    6 if !held.is_empty() => {
                        what = "kernel on a view";
                        let pick = rng.below(held.len());
                        let h = &mut held[pick];
                        if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
                            eprintln!("a view of a buffer from {:?}", h.from);
                        }
                        let units = h.buf.len() / u;
                        let start = u * rng.below(units);
                        let end = u * rng.between(start / u + 1, units);
                        if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
                            eprintln!(
                                "  view {start}..{end} of {} elements (kept subs {})",
                                h.buf.len(),
                                h.buf.kept_sub_buffers()
                            );
                        }
                        let view = h.buf.view(start..end).unwrap();
                        launch_increment(q, &increment, view, &at(step, what));
                        h.model[start..end]
                            .iter_mut()
                            .for_each(|x| *x = x.wrapping_add(1));
                    }
                    // A fill of any range, through a view or not.
                    7 if !held.is_empty() => {
                        what = "fill";
                        let pick = rng.below(held.len());
                        let h = &mut held[pick];
                        let len = h.buf.len();
                        let start = rng.below(len);
                        let end = rng.between(start + 1, len);
                        let value = rng.next() as i32;
                        if rng.chance(50) {
                            q.fill(h.buf.view(start..end).unwrap(), value).unwrap();
                        } else {
                            q.fill_range(&h.buf, value, start..end).unwrap();
                        }
                        h.model[start..end].fill(value);
                    }
                    // A copy between ranges of two buffers, or two disjoint ranges of one.
                    8 if !held.is_empty() => {
                        what = "copy";
                        let (si, di) = (rng.below(held.len()), rng.below(held.len()));
                        let (slen, dlen) = (held[si].buf.len(), held[di].buf.len());
                        let len = rng.between(1, slen.min(dlen));
                        let from = rng.below(slen - len + 1);
                        let to = rng.below(dlen - len + 1);
                        if si != di || from + len <= to || to + len <= from {
                            let (src, dst) = (&held[si].buf, &held[di].buf);
                            if rng.chance(50) {
                                q.copy(
                                    src.view(from..from + len).unwrap(),
                                    dst.view(to..to + len).unwrap(),
                                )
                                .unwrap();
                            } else {
                                q.copy_range(src, from, dst, to, len).unwrap();
                            }
                            let data = held[si].model[from..from + len].to_vec();
                            held[di].model[to..to + len].copy_from_slice(&data);
                        }
                    }
                    // A read of a range, through a view or not, checked against the model.
                    9 | 10 if !held.is_empty() => {
                        what = "read";
                        let i = rng.below(held.len());
                        let h = &held[i];
                        let len = h.buf.len();
                        let start = rng.below(len);
                        let end = rng.between(start + 1, len);
                        let got = if rng.chance(50) {
                            q.read_owned(h.buf.view(start..end).unwrap())
                                .unwrap()
                                .wait()
                                .unwrap()
                        } else {
                            q.read_owned_range(&h.buf, start..end)
                                .unwrap()
                                .wait()
                                .unwrap()
                        };
                        if let Some(k) = (0..got.len()).find(|&k| got[k] != h.model[start + k]) {
                            panic!(
                                "{}: {:?} buffer {i}, element {} is {}, expected {}",
                                at(step, what),
                                h.from,
                                start + k,
                                got[k],
                                h.model[start + k]
                            );
                        }
                    }
                    // `resize` of a buffer from the context: a new block, the old one released
                    // deferred.
                    11 if !held.is_empty() => {
                        what = "resize";
                        let i = rng.below(held.len());
                        if held[i].from == From::Context {
                            let h = &mut held[i];
                            let old = h.buf.block_bytes() as u64;
                            let len = u * rng.between(1, 6);
                            h.buf.resize(q, len).unwrap();
                            h.model.resize(len, 0);
                            deferred += old;
                            let ms = ctx.memory_stats();
                            assert_eq!(
                                ms.driver_allocations + ms.reclaimed,
                                before.driver_allocations + before.reclaimed + 1,
                                "{}: {ms:?}",
                                at(step, what)
                            );
                        }
                    }
                    // A release of the three kinds.
                    12 | 13 if !held.is_empty() => {
                        what = "release";
                        let h = held.swap_remove(rng.below(held.len()));
                        let bytes = h.buf.block_bytes();
                        knobs.settle(&queues);
                        let kind = knobs.kind(rng.below(3));
                        if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
                            eprintln!(
                                "  release kind {kind} of {:?} of {} elements (kept subs {})",
                                h.from,
                                h.buf.len(),
                                h.buf.kept_sub_buffers()
                            );
                        }
                        match kind {
                            0 => {
                                let report = h.buf.release().unwrap();
                                assert!(report.failed.is_empty(), "{}: {report:?}", at(step, what));
                                assert_eq!(
                                    report.recycled,
                                    h.from == From::Pool,
                                    "{}: a {:?} buffer, views of it may have gone to kernels: {report:?}",
                                    at(step, what),
                                    h.from
                                );
                            }
                            1 => drop(h.buf),
                            _ => {
                                if h.from == From::Context {
                                    deferred += bytes as u64;
                                }
                                h.buf.release_deferred();
                            }
                        }
                        if h.from == From::Pool {
                            *pooled.entry(bytes).or_default() += 1;
                        }
                    }
                    // SVM: an allocation, a fill, a kernel or a read of a view, or a release.
                    14 | 15 if svm_works => {
                        what = "svm";
                        if svms.is_empty() || (svms.len() < 4 && rng.chance(25)) {
                            let len = u * rng.between(1, 4);
                            let svm = ctx.svm::<i32>(len, SvmKind::Coarse).unwrap();
                            svms.push(ModelledSvm {
                                svm,
                                model: vec![0; len],
                            });
                        } else {
                            let i = rng.below(svms.len());
                            let s = &mut svms[i];
                            let units = s.svm.len() / u;
                            let start = u * rng.below(units);
                            let end = u * rng.between(start / u + 1, units);
                            let view = s.svm.view(start..end).unwrap();
                            match rng.below(5) {
                                0 => {
                                    let value = rng.next() as i32;
                                    q.fill_svm(view, value).unwrap();
                                    s.model[start..end].fill(value);
                                }
                                1 => {
                                    let n = end - start;
                                    // SAFETY: increment touches the view's element i only where
                                    // i < n, its length (an SVM view: of its allocation's bytes).
                                    unsafe {
                                        q.launch(
                                            &increment,
                                            &[n],
                                            &[Arg::read_write(view), Arg::scalar(n as u32)],
                                        )
                                    }
                                    .unwrap();
                                    s.model[start..end]
                                        .iter_mut()
                                        .for_each(|x| *x = x.wrapping_add(1));
                                }
                                2 => {
                                    let mut got = vec![0; end - start];
                                    q.read_svm(view, &mut got).unwrap();
                                    assert_eq!(
                                        got,
                                        s.model[start..end],
                                        "{}: svm {i}",
                                        at(step, what)
                                    );
                                }
                                3 => {
                                    let data: Vec<i32> =
                                        (0..end - start).map(|_| rng.next() as i32).collect();
                                    q.write_svm(view, &data).unwrap();
                                    s.model[start..end].copy_from_slice(&data);
                                }
                                _ => {
                                    let s = svms.swap_remove(i);
                                    if rng.chance(50) {
                                        s.svm.release().unwrap();
                                    } else {
                                        deferred += s.svm_bytes();
                                        s.svm.release_deferred();
                                    }
                                }
                            }
                        }
                    }
                    _ => {}
                }
                // The ledger against the model, at every step.
                let ms = ctx.memory_stats();
                let ps = pool.stats();
                let unused: usize = pooled.values().sum();
                assert_eq!(
                    ps.pooled_blocks,
                    unused,
                    "{}: the pool holds {} unused blocks, the model {unused} (every pooled buffer \
             released goes back, whatever views of it went to kernels): {ps:?} {ms:?}",
                    at(step, what),
                    ps.pooled_blocks
                );
                let live: u64 = held
                    .iter()
                    .filter(|h| h.from != From::Arena)
                    .map(|h| h.buf.block_bytes() as u64)
                    .chain(svms.iter().map(|s| s.svm_bytes()))
                    .sum::<u64>()
                    + arena_bytes as u64;
                assert_eq!(ms.live_bytes, live, "{}: {ms:?}", at(step, what));
                let pooled_bytes: u64 = pooled.iter().map(|(&c, &n)| (c * n) as u64).sum();
                assert_eq!(ms.pooled_bytes, pooled_bytes, "{}: {ms:?}", at(step, what));
                low_peak = low_peak.max(live + pooled_bytes);
                high_peak = high_peak.max(live + pooled_bytes + deferred);
                assert!(
                    (low_peak..=high_peak).contains(&ms.peak_bytes),
                    "{}: peak {} outside {low_peak}..={high_peak}: {ms:?}",
                    at(step, what),
                    ms.peak_bytes
                );
                if step % 50 == 49 {
                    ctx.wait_deferred();
                    deferred = 0;
                }
            }
            for h in held.drain(..) {
                let check = h
                    .buf
                    .view(..)
                    .map(|v| queues[0].read_owned(v).unwrap().wait().unwrap());
                assert_eq!(
                    check.unwrap(),
                    h.model,
                    "seed {seed}: a {:?} buffer at the end",
                    h.from
                );
                h.buf.release_deferred();
            }
            for s in svms.drain(..) {
                let mut got = vec![0; s.svm.len()];
                queues[1].read_svm(&s.svm, &mut got).unwrap();
                assert_eq!(got, s.model, "seed {seed}: an SVM allocation at the end");
                s.svm.release().unwrap();
            }
            drop(pool);
            drop(arena.take());
            ctx.wait_deferred();
            let ms = ctx.memory_stats();
            assert_eq!(
                (ms.live_bytes, ms.pending_release_bytes, ms.pooled_bytes),
                (0, 0, 0),
                "seed {seed}: {ms:?}"
            );
            eprintln!(
                "seed {seed}: {steps} steps (per op {counts:?}) in {:?}; {ms:?}",
                started.elapsed()
            );
        },
    );
}

/// Diagnostic narrowing of [`random_views_with_pools_arenas_resize_and_svm_match_a_host_model`],
/// to find what a driver's fault needs (each off unless set):
/// `CL_LIFETIME_VIEWS_QUEUES=1` runs everything on one queue;
/// `CL_LIFETIME_VIEWS_SETTLE=1` finishes both queues before every release and arena reset;
/// `CL_LIFETIME_VIEWS_KINDS=0,1` picks release kinds from those only (0 `release`, 1 drop,
/// 2 `release_deferred`).
struct ViewsKnobs {
    queues: usize,
    settle: bool,
    kinds: Vec<usize>,
}

impl ViewsKnobs {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        ViewsKnobs {
            queues: if var("CL_LIFETIME_VIEWS_QUEUES").as_deref() == Some("1") {
                1
            } else {
                2
            },
            settle: var("CL_LIFETIME_VIEWS_SETTLE").is_some(),
            kinds: var("CL_LIFETIME_VIEWS_KINDS")
                .map(|k| k.split(',').filter_map(|k| k.parse().ok()).collect())
                .unwrap_or_default(),
        }
    }

    /// Finishes both queues where asked to.
    fn settle(&self, queues: &[cl_lifetime::Queue]) {
        if self.settle {
            queues
                .iter()
                .for_each(|q| q.finish().expect("finish a queue"));
        }
    }

    /// The release kind to use for `drawn`.
    fn kind(&self, drawn: usize) -> usize {
        if self.kinds.is_empty() || self.kinds.contains(&drawn) {
            drawn
        } else {
            self.kinds[drawn % self.kinds.len()]
        }
    }
}

impl ModelledSvm {
    fn svm_bytes(&self) -> u64 {
        self.svm.bytes() as u64
    }
}

/// Launches `increment` on `view` (views may overlap others given to kernels: the
/// hazards order them); any error fails `at`.
fn launch_increment(
    q: &cl_lifetime::Queue,
    increment: &cl_lifetime::Kernel,
    view: cl_lifetime::View<'_, i32>,
    at: &str,
) {
    let n = view.len();
    if std::env::var_os("CL_LIFETIME_VIEWS_TRACE").is_some() {
        eprintln!("{at}: increment on {view:?}");
    }
    // SAFETY: increment touches the view's element i only where i < n, its length.
    if let Err(e) = unsafe {
        q.launch(
            increment,
            &[n],
            &[Arg::read_write(view), Arg::scalar(n as u32)],
        )
    } {
        panic!("{at}: {e}");
    }
}

/// The pattern of `examples/nvidia_carve_views.rs` through the library: an arena of 32
/// alignment units, carves of 1 to 3 units (at most 6 live, the arena reset when full
/// and none is), kernels on views of live carves, and carves released (their views'
/// sub-buffers with them). With raw calls it crashes NVIDIA's driver (580) within about
/// 200 steps; the library releases no sub-buffer of the arena before the arena, and a
/// carve or view of a region takes the idle sub-buffer of that region off the arena's
/// shelf (the *shelved, never released* rule), so 3,000 steps end with the data right
/// and no crash. The arena's idle sub-buffers match a model of that rule at every step.
/// In a child process: a driver crash fails this test, by name.
#[test]
fn carves_with_views_released_and_carved_again_never_crash_the_driver() {
    common::isolated(
        &test_path!(carves_with_views_released_and_carved_again_never_crash_the_driver),
        common::CHILD_LIMIT,
        &[],
        || {
            use std::collections::{BTreeSet, HashMap};

            /// A live carve: its first unit and units, its views' sub-buffers (unit
            /// regions within it), and the host model of its elements.
            struct Live {
                carve: ClBuffer<i32>,
                at: usize,
                units: usize,
                subs: BTreeSet<(usize, usize)>,
                model: Vec<i32>,
            }
            let ctx = device!();
            let u = unit(&ctx);
            let q = ctx.queue().unwrap();
            let increment = common::busy(&ctx).kernel("increment").unwrap();
            let mut arena = Arena::new(&ctx, 32 * u * size_of::<i32>()).unwrap();
            let mut rng = common::Rng(7);
            let mut live: Vec<Live> = Vec::new();
            // Idle sub-buffers on the arena's shelf by unit region (first unit, units).
            let mut idle: HashMap<(usize, usize), usize> = HashMap::new();
            let take = |idle: &mut HashMap<(usize, usize), usize>, region| {
                if let Some(n) = idle.get_mut(&region).filter(|n| **n > 0) {
                    *n -= 1;
                }
            };
            let (mut next, mut reused) = (0, 0);
            for step in 0..3000 {
                let at = format!("step {step}");
                match rng.below(3) {
                    0 if live.len() < 6 => {
                        let units = 1 + rng.below(3);
                        if next + units > 32 {
                            if !live.is_empty() {
                                continue;
                            }
                            arena.reset().unwrap();
                            next = 0;
                        }
                        let carve = arena.carve::<i32>(units * u).unwrap();
                        reused += usize::from(idle.get(&(next, units)).is_some_and(|&n| n > 0));
                        take(&mut idle, (next, units));
                        live.push(Live {
                            carve,
                            at: next,
                            units,
                            subs: BTreeSet::new(),
                            model: vec![0; units * u],
                        });
                        next += units;
                    }
                    1 if !live.is_empty() => {
                        let k = rng.below(live.len());
                        let l = &mut live[k];
                        let start = rng.below(l.units);
                        let end = start + 1 + rng.below(l.units - start);
                        let view = l.carve.view(start * u..end * u).unwrap();
                        launch_increment(&q, &increment, view, &at);
                        // A view of the whole carve is the carve itself; any
                        // other takes the kept sub-buffer that starts where it does and
                        // holds it, else one of its region off the shelf, else a new one.
                        let len = end - start;
                        let kept = l.subs.range((start, len)..=(start, usize::MAX)).next();
                        if (start, end) != (0, l.units) && kept.is_none() {
                            take(&mut idle, (l.at + start, len));
                            l.subs.insert((start, len));
                        }
                        for x in &mut l.model[start * u..end * u] {
                            *x += 1;
                        }
                        assert_eq!(l.carve.kept_sub_buffers(), l.subs.len(), "{at}");
                    }
                    2 if !live.is_empty() => {
                        let l = live.swap_remove(rng.below(live.len()));
                        let got = q.read_owned(&l.carve).unwrap().wait().unwrap();
                        assert_eq!(got, l.model, "{at}");
                        l.carve.release().unwrap();
                        for (start, len) in l.subs {
                            *idle.entry((l.at + start, len)).or_default() += 1;
                        }
                        *idle.entry((l.at, l.units)).or_default() += 1;
                    }
                    _ => {}
                }
                let idle_total: usize = idle.values().sum();
                assert_eq!(arena.kept_sub_buffers(), idle_total, "{at}");
            }
            for l in live {
                assert_eq!(q.read_owned(&l.carve).unwrap().wait().unwrap(), l.model);
                l.carve.release().unwrap();
            }
            assert!(reused > 0, "no carve took a shelved sub-buffer");
            drop(arena);
            assert_eq!(ctx.memory_stats().live_bytes, 0);
        },
    );
}
