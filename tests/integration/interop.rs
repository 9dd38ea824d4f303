//! Adoption: handles from other code come in and go out, commands other code enqueues
//! join the buffers' records, and queues can time their commands.
//!
//! The raw side goes through cl-sys (an OpenCL binding independent of the library's) and,
//! for a library no one here wrote, CLBlast, loaded at run time. Ordering is made with
//! user events as gates, never with sleeps.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use cl_lifetime::{
    Access, BufferUse, ClBuffer, ClStatus, Context, Error, Event, Queue, QueueOptions,
};

use crate::common::{self, returns_only_after};

fn cl(call: &'static str, status: i32) -> Error {
    Error::Cl {
        call,
        status: ClStatus(status),
    }
}

/// A raw wait list as OpenCL takes it: null when empty.
fn wait_ptr(wait: &[cl_sys::cl_event]) -> *const cl_sys::cl_event {
    if wait.is_empty() {
        ptr::null()
    } else {
        wait.as_ptr()
    }
}

/// The event of a raw enqueue `call` that returned `status`.
fn enqueued(
    call: &'static str,
    status: i32,
    event: cl_sys::cl_event,
) -> Result<cl_sys::cl_event, Error> {
    if status == 0 {
        Ok(event)
    } else {
        Err(cl(call, status))
    }
}

/// A raw `clEnqueueFillBuffer` of all of `buf` with `value`, after `wait`.
///
/// # Safety
///
/// `queue` is a live queue of `buf`'s context; every event of `wait` is live.
unsafe fn raw_fill(
    queue: cl_sys::cl_command_queue,
    buf: &ClBuffer<u32>,
    value: u32,
    wait: &[cl_sys::cl_event],
) -> Result<cl_sys::cl_event, Error> {
    let mut event = ptr::null_mut();
    // SAFETY: as the caller vouches; `value` is read before the call returns.
    let status = unsafe {
        cl_sys::clEnqueueFillBuffer(
            queue,
            buf.as_raw() as cl_sys::cl_mem,
            (&raw const value).cast(),
            4,
            0,
            buf.len() * 4,
            wait.len() as u32,
            wait_ptr(wait),
            &mut event,
        )
    };
    enqueued("clEnqueueFillBuffer", status, event)
}

/// A raw `clEnqueueCopyBuffer` of all of `src` into `dst`, after `wait`.
///
/// # Safety
///
/// As [`raw_fill`], for both buffers.
unsafe fn raw_copy(
    queue: cl_sys::cl_command_queue,
    src: &ClBuffer<u32>,
    dst: &ClBuffer<u32>,
    wait: &[cl_sys::cl_event],
) -> Result<cl_sys::cl_event, Error> {
    let mut event = ptr::null_mut();
    // SAFETY: as the caller vouches.
    let status = unsafe {
        cl_sys::clEnqueueCopyBuffer(
            queue,
            src.as_raw() as cl_sys::cl_mem,
            dst.as_raw() as cl_sys::cl_mem,
            0,
            0,
            src.len() * 4,
            wait.len() as u32,
            wait_ptr(wait),
            &mut event,
        )
    };
    enqueued("clEnqueueCopyBuffer", status, event)
}

fn as_cl_sys(wait: &[cl_lifetime::opencl3::types::cl_event]) -> Vec<cl_sys::cl_event> {
    wait.iter().map(|&e| e as cl_sys::cl_event).collect()
}

/// A 4 KiB buffer of `ctx` made with a raw `clCreateBuffer`: the caller owns its one
/// reference.
fn raw_buffer(ctx: &Context) -> cl_sys::cl_mem {
    let mut status = 0;
    // SAFETY: a plain buffer of the library's context.
    let raw = unsafe {
        cl_sys::clCreateBuffer(
            ctx.as_raw() as _,
            cl_sys::CL_MEM_READ_WRITE,
            4096,
            ptr::null_mut(),
            &mut status,
        )
    };
    assert_eq!(status, 0);
    raw
}

#[test]
fn a_raw_command_told_to_the_library_waits_on_the_hazards_it_is_handed() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (queue, raw_side) = (ctx.queue().unwrap(), ctx.out_of_order_queue().unwrap());
    let src = ctx.buffer_from(&[1u32; 1024]).unwrap();
    let dst = ctx.buffer_from(&[0u32; 1024]).unwrap();
    let gate = ctx.user_event().unwrap();
    queue.after(&[gate.event()]).fill(&src, 7).unwrap();
    // SAFETY: the copy reads `src` and writes `dst` only, waits on the list given, and
    // hands its event over.
    let copy = unsafe {
        raw_side.after(&[]).enqueue_raw(
            &[BufferUse::read(&src), BufferUse::write(&dst)],
            |raw_queue, wait| {
                assert_eq!(wait.len(), 1, "the gated fill is the one hazard");
                raw_copy(raw_queue as _, &src, &dst, &as_cl_sys(wait)).map(|e| e as _)
            },
        )
    }
    .unwrap();
    // A read through the library waits for the raw copy, which waits for the fill.
    let read = queue.read_owned(&dst).unwrap();
    assert!(
        !copy.is_terminal(),
        "the raw copy ran before the fill it reads"
    );
    gate.complete().unwrap();
    assert_eq!(read.wait().unwrap(), vec![7; 1024]);
    assert!(copy.is_terminal());
}

#[test]
fn the_release_of_a_buffer_waits_for_a_raw_command_told_to_the_library() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    // Uninitialized: a raw use may read, so a zeroed buffer would get a zero fill first,
    // and the release would wait on it too if it had not ended yet.
    let buf = ctx.buffer_uninitialized::<u32>(1 << 16).unwrap();
    let gate = ctx.user_event().unwrap();
    // SAFETY: the fill writes `buf` only, waits on the list given (which holds the
    // gate), and hands its event over.
    let fill = unsafe {
        queue
            .after(&[gate.event()])
            .enqueue_raw(&[BufferUse::write(&buf)], |q, wait| {
                raw_fill(q as _, &buf, 3, &as_cl_sys(wait)).map(|e| e as _)
            })
    }
    .unwrap();
    let watch = common::watch(&buf, &[&fill]);
    // The record keeps the fill; the test's handle would keep the memory on rusticl
    // (design trap "rusticl's events keep their buffers").
    drop(fill);
    let report = returns_only_after(
        "the release",
        move || buf.release().unwrap(),
        || gate.complete().unwrap(),
    );
    assert_eq!(report.waited_on, 1);
    assert!(report.freed);
    watch.assert_released_after_events();
}

#[test]
fn a_raw_command_after_a_barrier_is_ordered_without_a_wait_list() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    // An out-of-order queue: only the barrier keeps the copy behind the gated fill.
    let queue = ctx.out_of_order_queue().unwrap();
    let other = ctx.queue().unwrap();
    let src = ctx.buffer_from(&[1u32; 1024]).unwrap();
    let dst = ctx.buffer_from(&[0u32; 1024]).unwrap();
    let gate = ctx.user_event().unwrap();
    other.after(&[gate.event()]).fill(&src, 9).unwrap();
    // SAFETY: the copy reads `src` and writes `dst` only, and hands its event over; it
    // takes no wait list: the barrier orders it.
    let copy = unsafe {
        queue
            .after(&[])
            .enqueue_raw_after_barrier(&[BufferUse::read(&src), BufferUse::write(&dst)], |q| {
                raw_copy(q as _, &src, &dst, &[]).map(|e| e as _)
            })
    }
    .unwrap();
    assert!(!copy.is_terminal(), "the copy ran past the barrier");
    gate.complete().unwrap();
    assert_eq!(
        other.read_owned(&dst).unwrap().wait().unwrap(),
        vec![9; 1024]
    );
}

#[test]
fn a_raw_command_that_reads_a_failed_write_is_refused_before_it_is_called() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[1u32; 64]).unwrap();
    let dst = ctx.buffer::<u32>(64).unwrap();
    let gate = ctx.user_event().unwrap();
    queue.after(&[gate.event()]).fill(&buf, 2).unwrap();
    gate.fail(-77).unwrap();
    queue.read_owned(&buf).and_then(|r| r.wait()).ok();
    let mut called = false;
    // SAFETY: never called: the library refuses first.
    let refused = unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[BufferUse::read(&buf), BufferUse::write(&dst)], |q, w| {
                called = true;
                raw_copy(q as _, &buf, &dst, &as_cl_sys(w)).map(|e| e as _)
            })
    };
    assert!(
        matches!(refused, Err(Error::DependencyFailed { .. })),
        "{refused:?}"
    );
    assert!(!called);
}

/// NVIDIA refuses an enqueue whose wait list holds a command that has failed, with that
/// command's status, and a gate's failure reaches all its commands there within
/// microseconds, so several can fail between the gathering and the enqueue. The library
/// gathered again only three times, the later times reusing the statuses read before
/// the refusal, so with more than three such commands it passed the driver's refusal on
/// (seen on NVIDIA in the failure schedules, as `clEnqueueCopyBuffer` failing with the
/// gate's -1234). Here the commands fail inside the enqueue, and the enqueue refuses as
/// NVIDIA's does.
#[test]
fn an_enqueue_refused_after_many_hazards_failed_meanwhile_is_gathered_again_until_it_goes_through()
{
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let readers = ctx.out_of_order_queue().unwrap();
    if readers.is_in_order() {
        // On an in-order queue the fill waits on the newest read only.
        common::not_run(
            "the queue asked out of order is in order (its driver dropped the flag, or \
             reports failed commands complete and the library made it in order)",
        );
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[1u32; 64]).unwrap();
    let gate = ctx.user_event().unwrap();
    let reads: Vec<_> = (0..6)
        .map(|_| readers.after(&[gate.event()]).read_owned(&buf).unwrap())
        .collect();
    let mut calls = 0;
    let mut refused = 0;
    // SAFETY: the fill writes `buf` only, waits on the list given, and hands its event
    // over; a call that returns an error enqueued nothing.
    let fill = unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[BufferUse::write(&buf)], |q, w| {
                calls += 1;
                let wait = as_cl_sys(w);
                if calls == 1 {
                    assert_eq!(wait.len(), reads.len(), "the fill waits on every read");
                    // Every read fails between the gathering and the enqueue.
                    gate.fail(-1234)?;
                    let start = std::time::Instant::now();
                    while wait.iter().any(|&e| common::raw_status(e) >= 0) {
                        assert!(
                            start.elapsed() < common::CHILD_LIMIT,
                            "the gate's failure did not reach the reads"
                        );
                        std::thread::yield_now();
                    }
                }
                // NVIDIA's check.
                if let Some(failed) = wait.iter().map(|&e| common::raw_status(e)).find(|&s| s < 0) {
                    refused += 1;
                    return Err(cl("clEnqueueFillBuffer", failed));
                }
                raw_fill(q as _, &buf, 5, &wait).map(|e| e as _)
            })
    };
    let fill = fill.expect("the enqueue went through once no failed read was waited on");
    assert_eq!(
        (calls, refused),
        (2, 1),
        "gathered again once, with every read's status read again"
    );
    fill.wait().unwrap();
    for read in reads {
        assert!(read.wait().is_err(), "a read behind the failed gate ran");
    }
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), vec![5; 64]);
}

#[test]
fn hazards_are_the_commands_a_use_must_wait_for() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.buffer::<u32>(64).unwrap();
    let other = ctx.buffer::<u32>(64).unwrap();
    let gate = ctx.user_event().unwrap();
    let write = q1.after(&[gate.event()]).fill(&buf, 1).unwrap();
    let read = q2.copy(&buf, &other).unwrap();
    let raws = |events: Vec<Event>| {
        let mut raws: Vec<_> = events.iter().map(|e| e.as_raw() as usize).collect();
        raws.sort_unstable();
        raws
    };
    assert_eq!(raws(buf.hazards(Access::Read)), raws(vec![write.clone()]));
    assert_eq!(
        raws(buf.hazards(Access::Write)),
        raws(vec![write.clone(), read.clone()])
    );
    gate.complete().unwrap();
    read.wait().unwrap();
    assert!(buf.hazards(Access::Write).is_empty());
}

// Handles in and out.

#[test]
fn a_buffer_made_by_raw_code_is_tracked_once_adopted_and_its_owner_keeps_it() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let raw = raw_buffer(&ctx);
    // SAFETY: `raw` is a valid memory object, kept by this test until the end.
    let buf = unsafe { ClBuffer::<u32>::from_raw(&ctx, raw as _) }.unwrap();
    assert_eq!(buf.len(), 1024);
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 5).unwrap();
    let watch = common::watch(&buf, &[&fill]);
    let report = returns_only_after(
        "the adopted buffer's release",
        move || buf.release().unwrap(),
        || gate.complete().unwrap(),
    );
    assert!(fill.is_terminal());
    assert!(!report.freed, "the raw owner's reference keeps the memory");
    assert!(
        report.free_wait < ctx.free_grace(),
        "the release waited the free grace for memory its owner keeps"
    );
    assert!(!watch.fired());
    // The owner's data is the library's fill.
    let mut out = vec![0u32; 1024];
    // SAFETY: `raw` is live; `out` holds 4096 bytes; a blocking read.
    let status = unsafe {
        cl_sys::clEnqueueReadBuffer(
            queue.as_raw() as _,
            raw,
            1,
            0,
            4096,
            out.as_mut_ptr().cast(),
            0,
            ptr::null(),
            ptr::null_mut(),
        )
    };
    assert_eq!(status, 0);
    assert_eq!(out, vec![5; 1024]);
    // The fill's handle would keep the memory on rusticl (design trap "rusticl's events
    // keep their buffers").
    drop(fill);
    // SAFETY: the test's own reference, given up once.
    assert_eq!(unsafe { cl_sys::clReleaseMemObject(raw) }, 0);
    assert!(common::eventually(|| watch.fired()));
}

#[test]
fn a_context_and_a_queue_made_by_raw_code_work_once_adopted() {
    let made = device!();
    // SAFETY: the library's context handle is valid; adoption takes a reference.
    let ctx = unsafe { Context::from_raw(made.as_raw()) }.unwrap();
    assert_eq!(ctx.device().as_raw(), made.device().as_raw());
    let mut status = 0;
    // SAFETY: a queue on the context's device.
    #[allow(deprecated)]
    let raw = unsafe {
        cl_sys::clCreateCommandQueue(
            ctx.as_raw() as _,
            ctx.device().as_raw() as _,
            0,
            &mut status,
        )
    };
    assert_eq!(status, 0);
    // SAFETY: `raw` is a valid queue of `ctx`; the test releases its own reference.
    let queue = unsafe { Queue::from_raw(&ctx, raw as _) }.unwrap();
    // SAFETY: the test's reference, given up once: the library holds its own.
    assert_eq!(unsafe { cl_sys::clReleaseCommandQueue(raw) }, 0);
    assert!(queue.is_in_order());
    let buf = ctx.buffer::<u32>(16).unwrap();
    queue.fill(&buf, 4).unwrap();
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), vec![4; 16]);
    // A queue of another context is refused.
    let elsewhere = device!();
    let foreign = elsewhere.queue().unwrap();
    // SAFETY: a valid queue, of another context.
    let refused = unsafe { Queue::from_raw(&ctx, foreign.as_raw()) };
    assert!(
        matches!(refused, Err(Error::ContextMismatch { .. })),
        "{refused:?}"
    );
}

#[test]
fn an_event_from_raw_keeps_its_own_reference() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(16).unwrap();
    // SAFETY: a fill of `buf` on the library's queue, outside the record; finished
    // below before `buf` goes.
    let raw = unsafe { raw_fill(queue.as_raw() as _, &buf, 1, &[]) }.unwrap();
    // SAFETY: `raw` is valid; the test keeps and releases its own reference.
    let event = unsafe { Event::from_raw(raw as _) }.unwrap();
    // SAFETY: the test's reference, given up once.
    assert_eq!(unsafe { cl_sys::clReleaseEvent(raw) }, 0);
    event.wait().unwrap();
    assert_eq!(common::raw_status(event.as_raw() as _), 0);
}

// Profiling.

#[test]
fn a_profiling_queue_times_its_commands_and_another_says_it_cannot() {
    let ctx = device!();
    let timed = ctx
        .queue_with(QueueOptions::default().profiling(true))
        .unwrap();
    assert!(timed.is_profiling());
    let buf = ctx.buffer::<u32>(1 << 16).unwrap();
    let fill = timed.fill(&buf, 1).unwrap();
    fill.wait().unwrap();
    let p = fill.profile().unwrap();
    assert!(
        p.queued <= p.submitted && p.submitted <= p.started && p.started <= p.ended,
        "{p:?}"
    );
    assert_eq!(p.duration().as_nanos() as u64, p.ended - p.started);
    let plain = ctx.queue().unwrap();
    assert!(!plain.is_profiling());
    let untimed = plain.fill(&buf, 2).unwrap();
    untimed.wait().unwrap();
    match untimed.profile() {
        Err(Error::Cl { status, .. }) => {
            assert_eq!(status.name(), "CL_PROFILING_INFO_NOT_AVAILABLE")
        }
        other => panic!("expected CL_PROFILING_INFO_NOT_AVAILABLE, got {other:?}"),
    }
    timed.finish().unwrap();
}

/// Intel's CPU runtime answers `clGetEventProfilingInfo` of a command that never ran
/// (its gate failed) with success and a start of 0, so `Profile::duration()` came out
/// near 14,000 s. A command that did not complete has no profile.
#[test]
fn a_command_that_did_not_complete_has_no_profile() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let timed = ctx
        .queue_with(QueueOptions::default().profiling(true))
        .unwrap();
    let buf = ctx.buffer::<u32>(1024).unwrap();
    let gate = ctx.user_event().unwrap();
    let gated = timed.after(&[gate.event()]).fill(&buf, 1).unwrap();
    let kernel_after = timed.fill(&buf, 2).unwrap();
    timed.flush().unwrap();
    match gated.profile() {
        Err(Error::Cl { status, .. }) => {
            assert_eq!(status.name(), "CL_PROFILING_INFO_NOT_AVAILABLE")
        }
        other => {
            panic!("a pending command: expected CL_PROFILING_INFO_NOT_AVAILABLE, got {other:?}")
        }
    }
    gate.fail(-77).unwrap();
    assert!(gated.wait().is_err());
    for (what, event) in [
        ("the gated fill", &gated),
        ("the fill after it", &kernel_after),
    ] {
        let _ = event.wait();
        if event.wait().is_err() {
            let profile = event.profile();
            assert!(
                profile.is_err(),
                "{what} failed, yet has a profile: {profile:?}"
            );
        }
    }
    drop(buf);
}

// A library no one here wrote: CLBlast.

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `CLBlastSgemm` (clblast_c.h).
type Sgemm = unsafe extern "C" fn(
    layout: c_int,
    a_transpose: c_int,
    b_transpose: c_int,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: cl_sys::cl_mem,
    a_offset: usize,
    a_ld: usize,
    b: cl_sys::cl_mem,
    b_offset: usize,
    b_ld: usize,
    beta: f32,
    c: cl_sys::cl_mem,
    c_offset: usize,
    c_ld: usize,
    queue: *mut cl_sys::cl_command_queue,
    event: *mut cl_sys::cl_event,
) -> c_int;

/// CLBlast's `CLBlastSgemm`, loaded from `libclblast.so.1`, or `None` (with a message)
/// where CLBlast is not installed; a failure there under `CL_LIFETIME_REQUIRE_CLBLAST=1`
/// (set by CI, whose set-up installs it).
fn clblast_sgemm() -> Option<Sgemm> {
    const RTLD_NOW: c_int = 2;
    // SAFETY: a NUL-terminated name; dlopen reports failure with null.
    let lib = unsafe { dlopen(c"libclblast.so.1".as_ptr(), RTLD_NOW) };
    if lib.is_null() {
        let missing = "CLBlast (libclblast.so.1) is not installed; `make setup-all` installs it";
        assert!(
            std::env::var("CL_LIFETIME_REQUIRE_CLBLAST").as_deref() != Ok("1"),
            "{missing} (CL_LIFETIME_REQUIRE_CLBLAST=1)"
        );
        common::not_run(missing);
        return None;
    }
    // SAFETY: a loaded library and a NUL-terminated name.
    let sym = unsafe { dlsym(lib, c"CLBlastSgemm".as_ptr()) };
    assert!(!sym.is_null(), "libclblast.so.1 has no CLBlastSgemm");
    // SAFETY: CLBlastSgemm has the signature of `Sgemm` (clblast_c.h, CLBlast 1.5).
    Some(unsafe { std::mem::transmute::<*mut c_void, Sgemm>(sym) })
}

#[test]
fn a_clblast_gemm_joins_the_record_of_the_buffers_it_uses() {
    const M: usize = 32;
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let Some(sgemm) = clblast_sgemm() else { return };
    let queue = ctx.queue().unwrap();
    let reader = ctx.queue().unwrap();
    let a = ctx.buffer::<f32>(M * M).unwrap();
    let b = ctx.buffer::<f32>(M * M).unwrap();
    let c = ctx.buffer_from(&[0f32; M * M]).unwrap();
    let av: Vec<f32> = (0..M * M).map(|i| (i % 7) as f32).collect();
    let bv: Vec<f32> = (0..M * M).map(|i| (i % 5) as f32 - 2.0).collect();
    // The inputs are written behind a gate on another queue: the GEMM must wait for them.
    let gate = ctx.user_event().unwrap();
    let deps = [gate.event()];
    let writes = reader.after(&deps);
    writes.write_owned(&a, av.clone()).unwrap();
    writes.write_owned(&b, bv.clone()).unwrap();
    // SAFETY: CLBlast reads `a` and `b` and writes `c` only, enqueues on the in-order
    // queue it is given, and returns its last command's event with its one reference.
    let gemm = unsafe {
        queue.after(&[]).enqueue_raw_after_barrier(
            &[
                BufferUse::read(&a),
                BufferUse::read(&b),
                BufferUse::write(&c),
            ],
            |raw_queue| {
                let mut q = raw_queue as cl_sys::cl_command_queue;
                let mut event = ptr::null_mut();
                let status = sgemm(
                    101, // CLBlastLayoutRowMajor
                    111, // CLBlastTransposeNo
                    111,
                    M,
                    M,
                    M,
                    1.0,
                    a.as_raw() as _,
                    0,
                    M,
                    b.as_raw() as _,
                    0,
                    M,
                    0.0,
                    c.as_raw() as _,
                    0,
                    M,
                    &mut q,
                    &mut event,
                );
                if status == 0 {
                    Ok(event as _)
                } else {
                    Err(cl("CLBlastSgemm", status))
                }
            },
        )
    }
    .unwrap();
    // A second queue reads the result: no host wait in between, the library orders it.
    let result = reader.read_owned(&c).unwrap();
    assert!(
        !gemm.is_terminal(),
        "the GEMM ran before its inputs were written"
    );
    // The inputs' releases wait for the GEMM (checked with the cl-sys oracle).
    let watch_a = common::watch(&a, &[&gemm]);
    // Its handle would keep the inputs on rusticl (design trap "rusticl's events keep
    // their buffers").
    drop(gemm);
    let release = std::thread::spawn(move || a.release().unwrap());
    gate.complete().unwrap();
    // The pending read holds the GEMM's event too (the write its result comes from), and
    // with it the inputs on rusticl: it is waited for before the release must be done.
    let got = result.wait().unwrap();
    let report = release.join().unwrap();
    assert!(report.freed, "{report:?}");
    watch_a.assert_released_after_events();
    let mut want = vec![0f32; M * M];
    for i in 0..M {
        for j in 0..M {
            want[i * M + j] = (0..M).map(|k| av[i * M + k] * bv[k * M + j]).sum();
        }
    }
    assert_eq!(got, want);
}

#[test]
fn opencl3_objects_convert_and_their_program_and_kernel_launch_through_the_library() {
    use cl_lifetime::opencl3;
    use cl_lifetime::{Arg, Kernel, Program};
    use opencl3::memory::ClMem as _;
    let Some(device) = common::context().map(|c| c.device().clone()) else {
        return;
    };
    let cl_device = opencl3::device::Device::new(device.as_raw());
    let raw_ctx = opencl3::context::Context::from_device(&cl_device).unwrap();
    let ctx = Context::try_from(&raw_ctx).unwrap();
    #[allow(deprecated)]
    let raw_queue = opencl3::command_queue::CommandQueue::create_default(&raw_ctx, 0).unwrap();
    let queue = Queue::from_opencl3(&ctx, &raw_queue).unwrap();
    // SAFETY: a plain buffer of 64 u32s.
    let raw_buf = unsafe {
        opencl3::memory::Buffer::<u32>::create(
            &raw_ctx,
            opencl3::memory::CL_MEM_READ_WRITE,
            64,
            ptr::null_mut(),
        )
    }
    .unwrap();
    let buf = ClBuffer::from_opencl3(&ctx, &raw_buf).unwrap();
    assert_eq!(buf.as_raw(), raw_buf.get());
    let source = "__kernel void add(__global uint *v, uint by) { v[get_global_id(0)] += by; }";
    let raw_program =
        opencl3::program::Program::create_and_build_from_source(&raw_ctx, source, "").unwrap();
    let program = Program::from_opencl3(&ctx, &raw_program).unwrap();
    assert_eq!(program.as_raw(), raw_program.get());
    let from_program = program.kernel("add").unwrap();
    let raw_kernel = opencl3::kernel::Kernel::create(&raw_program, "add").unwrap();
    // SAFETY: a valid kernel that no other code sets arguments of or enqueues from now on.
    let adopted = unsafe { Kernel::from_raw(&ctx, raw_kernel.get()) }.unwrap();
    assert_eq!(adopted.name(), "add");
    queue.fill(&buf, 1).unwrap();
    // SAFETY: add touches v[i], i < 64, buf's length.
    unsafe {
        queue.launch(
            &from_program,
            &[64],
            &[Arg::read_write(&buf), Arg::scalar(2u32)],
        )
    }
    .unwrap();
    let last =
        // SAFETY: add touches v[i], i < 64, buf's length.
        unsafe { queue.launch(&adopted, &[64], &[Arg::read_write(&buf), Arg::scalar(3u32)]) }
            .unwrap();
    let event = Event::try_from(&opencl3::event::Event::new({
        // SAFETY: `last` is live; opencl3's Event takes over this extra reference.
        assert_eq!(unsafe { cl_sys::clRetainEvent(last.as_raw() as _) }, 0);
        last.as_raw()
    }))
    .unwrap();
    event.wait().unwrap();
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), vec![6; 64]);
    // Another context's program is refused.
    let elsewhere = device!();
    let foreign = elsewhere.program_from_source("add", source, "").unwrap();
    // SAFETY: a valid program, of another context.
    let refused = unsafe { Program::from_raw(&ctx, foreign.as_raw()) };
    assert!(
        matches!(refused, Err(Error::ContextMismatch { .. })),
        "{refused:?}"
    );
}

// `After::enqueue_raw` took a null event, and an event of another context, from its
// closure (`after` refuses the latter): both are refused with typed errors, and the buffer
// stays usable.
#[test]
fn a_raw_enqueue_returning_a_null_or_foreign_event_is_refused_and_the_buffer_stays_usable() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let (queue, theirs) = (ctx.queue().unwrap(), other.queue().unwrap());
    let buf = ctx.buffer_from(&[5u32; 64]).unwrap();
    let before = buf.record_len();
    // SAFETY: the closure enqueues nothing on the library's queue and uses no buffer.
    let null = unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[BufferUse::write(&buf)], |_, _| Ok(ptr::null_mut()))
    };
    assert!(matches!(null, Err(Error::NullEvent)), "{null:?}");
    // SAFETY: the marker is on the other context's queue and touches no buffer; its one
    // reference is handed over.
    let foreign = unsafe {
        queue
            .after(&[])
            .enqueue_raw(&[BufferUse::write(&buf)], |_, _| {
                cl_lifetime::opencl3::command_queue::enqueue_marker_with_wait_list(
                    theirs.as_raw(),
                    0,
                    ptr::null(),
                )
                .map_err(|s| Error::Cl {
                    call: "clEnqueueMarkerWithWaitList",
                    status: ClStatus(s),
                })
            })
    };
    match &foreign {
        Err(Error::ContextMismatch {
            its_context,
            used_with,
            ..
        }) => {
            assert_eq!(*its_context, Some(other.as_raw() as usize));
            assert_eq!(*used_with, ctx.as_raw() as usize);
        }
        _ => panic!("expected ContextMismatch, got {foreign:?}"),
    }
    assert_eq!(
        buf.record_len(),
        before,
        "a refused raw enqueue was recorded"
    );
    queue.fill(&buf, 9).unwrap();
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), vec![9; 64]);
}

// `ClBuffer::from_raw` of one `cl_mem` twice gave two buffers with two records: a read
// through one did not wait for a write through the other and returned the old values. The
// second adoption is refused, naming the first buffer; once that buffer is released, the
// memory object may be adopted again.
#[test]
fn adopting_one_memory_object_twice_is_refused_naming_the_buffer_that_holds_it() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let raw = raw_buffer(&ctx);
    // SAFETY: `raw` is a valid memory object, kept by this test until the end.
    let first = unsafe { ClBuffer::<u32>::from_raw(&ctx, raw as _) }.unwrap();
    // SAFETY: as above.
    let second = unsafe { ClBuffer::<u32>::from_raw(&ctx, raw as _) };
    match &second {
        Err(Error::AlreadyTracked {
            raw: r,
            allocated_at,
        }) => {
            assert_eq!(*r, raw as usize);
            assert!(allocated_at.contains(file!()), "{allocated_at}");
        }
        _ => panic!("expected AlreadyTracked, got {second:?}"),
    }
    queue.fill(&first, 9).unwrap();
    assert_eq!(
        queue.read_owned(&first).unwrap().wait().unwrap(),
        vec![9; 1024]
    );
    first.release().unwrap();
    // SAFETY: released by the library above, the test's own reference keeps it valid.
    let again = unsafe { ClBuffer::<u32>::from_raw(&ctx, raw as _) }.unwrap();
    assert_eq!(
        queue.read_owned(&again).unwrap().wait().unwrap(),
        vec![9; 1024]
    );
    drop(again);
    // SAFETY: the test's own reference, released once.
    assert_eq!(unsafe { cl_sys::clReleaseMemObject(raw) }, 0);
}

// Adopting the raw handle of one of the library's own buffers made that buffer's release
// wait the whole free grace and report `freed: false` (the adopted copy kept the memory).
#[test]
fn adopting_a_library_buffers_own_handle_is_refused_and_its_release_frees() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[1u32; 256]).unwrap();
    // SAFETY: the buffer's handle is valid while the buffer lives.
    let copy = unsafe { ClBuffer::<u32>::from_raw(&ctx, buf.as_raw()) };
    assert!(
        matches!(copy, Err(Error::AlreadyTracked { .. })),
        "{copy:?}"
    );
    queue.fill(&buf, 2).unwrap();
    let report = buf.release().unwrap();
    assert!(report.freed, "{report:?}");
    assert!(report.free_wait < ctx.free_grace(), "{report:?}");
}
