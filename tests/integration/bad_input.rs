//! Bad input a user can write in safe code gets a typed error before the driver sees it:
//! launch arguments of the wrong kind or size, work sizes that cannot end, build options
//! that crash a driver, objects of another context, zero-sized elements, reversed ranges.
//! Programs are cached by source, and kernel files are found by a rule that does not
//! depend on the machine the binary was built on.
//!
//! A test of what used to crash or hang runs its body in a child process with a time
//! limit ([`common::isolated`]), so the suite reports it instead of dying or stalling.

use cl_lifetime::{Arg, Context, Error, Kernel, Pool, PoolOptions, Transfer};

use crate::common;

/// `busy.cl`'s `increment(__global int *data, const uint n)`.
fn increment(ctx: &Context) -> Kernel {
    common::busy(ctx).kernel("increment").expect("increment")
}

/// Asserts that `err` refuses argument `index` as given `given`, naming what the kernel
/// declares.
#[track_caller]
fn assert_refused(err: &Error, index: usize, declared: &str, given: &str) {
    let Error::KernelArg {
        index: i,
        declared: d,
        given: g,
        status,
        ..
    } = err
    else {
        panic!("expected KernelArg, got {err:?}");
    };
    assert_eq!(
        (*i, d.as_str(), g.as_str()),
        (index, declared, given),
        "{err}"
    );
    assert_eq!(
        *status, None,
        "refused by the library, not the driver: {err}"
    );
    let text = err.to_string();
    assert!(text.contains(declared) && text.contains(given), "{text}");
}

/// Runs `increment` on a buffer of four zeros and checks it: the kernel still works after
/// a refused launch.
#[track_caller]
fn assert_increment_works(ctx: &Context, kernel: &Kernel) {
    let queue = ctx.queue().expect("a queue");
    let buf = ctx.buffer_from(&[0i32; 4]).expect("a buffer");
    // SAFETY: increment touches buf[i] only where i < n = 4, buf's length.
    unsafe { queue.launch(kernel, &[4], &[Arg::read_write(&buf), Arg::scalar(4u32)]) }
        .expect("a correct launch after a refused one");
    assert_eq!(
        queue
            .read_owned(&buf)
            .and_then(|r| r.wait())
            .expect("read back"),
        [1; 4]
    );
}

// ---- 1. Launch arguments are checked against what the kernel declares ----

isolated_test! {
    fn a_scalar_given_for_a_buffer_parameter_is_refused_instead_of_crashing() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let k = increment(&ctx);
        let args = [Arg::scalar(0xdead_beef_u64), Arg::scalar(4u32)];
        // SAFETY: refused by the argument check (a scalar for `data`): nothing runs.
        let err = unsafe { queue.launch(&k, &[4], &args) }.unwrap_err();
        assert_refused(&err, 0, "__global int* data", "a 8-byte scalar (u64)");
        assert_increment_works(&ctx, &k);
    }
}

#[test]
fn a_null_scalar_given_for_a_buffer_parameter_is_refused_instead_of_launching() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let k = increment(&ctx);
    let err =
        // SAFETY: refused by the argument check (a scalar for `data`): nothing runs.
        unsafe { queue.launch(&k, &[4], &[Arg::scalar(0u64), Arg::scalar(4u32)]) }.unwrap_err();
    assert_refused(&err, 0, "__global int* data", "a 8-byte scalar (u64)");
    assert_increment_works(&ctx, &k);
}

isolated_test! {
    fn local_memory_given_for_a_buffer_parameter_is_refused_instead_of_crashing() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let k = increment(&ctx);
        let args = [Arg::local::<u64>(1), Arg::scalar(4u32)];
        // SAFETY: refused by the argument check (local memory for `data`): nothing runs.
        let err = unsafe { queue.launch(&k, &[4], &args) }.unwrap_err();
        assert_refused(&err, 0, "__global int* data", "local memory of 8 bytes");
        assert_increment_works(&ctx, &k);
    }
}

isolated_test! {
    fn a_released_buffers_handle_given_as_a_scalar_is_refused() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let k = increment(&ctx);
        let buf = ctx.buffer_from(&[0i32; 4]).unwrap();
        let handle = buf.as_raw() as u64;
        buf.release().unwrap();
        let args = [Arg::scalar(handle), Arg::scalar(4u32)];
        // SAFETY: refused by the argument check (a scalar for `data`): nothing runs.
        let err = unsafe { queue.launch(&k, &[4], &args) }.unwrap_err();
        assert_refused(&err, 0, "__global int* data", "a 8-byte scalar (u64)");
        assert_increment_works(&ctx, &k);
    }
}

#[test]
fn a_buffer_given_for_a_value_parameter_is_refused() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let k = increment(&ctx);
    let buf = ctx.buffer_from(&[0i32; 4]).unwrap();
    let err =
        // SAFETY: refused by the argument check (a buffer for `n`): nothing runs.
        unsafe { queue.launch(&k, &[4], &[Arg::read_write(&buf), Arg::read(&buf)]) }.unwrap_err();
    assert_refused(&err, 1, "uint n", "a buffer of i32 read (Arg::read)");
    assert_eq!(buf.record_len(), 0, "a refused launch was recorded");
    assert_increment_works(&ctx, &k);
}

#[test]
fn local_memory_past_the_device_is_refused() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let sum = common::busy(&ctx).kernel("group_sum").unwrap();
    let input = ctx.buffer_from(&[1i32; 64]).unwrap();
    let out = ctx.buffer::<i32>(4).unwrap();
    for local in [Arg::local::<u8>(usize::MAX), Arg::local::<u8>(0)] {
        let args = [Arg::read(&input), Arg::write(&out), local];
        // SAFETY: refused by the local memory check: nothing runs.
        let err = unsafe { queue.launch_local(&sum, &[64], Some(&[16]), &args) }.unwrap_err();
        assert!(
            matches!(
                err,
                Error::KernelArg {
                    index: 2,
                    status: None,
                    ..
                }
            ),
            "{err:?}"
        );
    }
    // Within the device it runs.
    let args = [Arg::read(&input), Arg::write(&out), Arg::local::<i32>(16)];
    // SAFETY: group_sum reads input[i], i < 64 of 64, writes out[g], g < 4 of 4, and
    // scratch[l], l < 16 of the 16 ints given.
    unsafe { queue.launch_local(&sum, &[64], Some(&[16]), &args) }.unwrap();
    assert_eq!(queue.read_owned(&out).unwrap().wait().unwrap(), [16; 4]);
}

isolated_test! {
    fn a_global_size_that_cannot_end_is_refused() {
        let ctx = device!();
        let queue = ctx.queue().unwrap();
        let k = increment(&ctx);
        let buf = ctx.buffer_from(&[0i32; 4]).unwrap();
        let args = [Arg::read_write(&buf), Arg::scalar(4u32)];
        // SAFETY: increment touches buf[i] only where i < n = 4, buf's length.
        let err = unsafe { queue.launch(&k, &[usize::MAX], &args) }.unwrap_err();
        let Error::WorkSize { global, reason, .. } = &err else {
            panic!("expected WorkSize, got {err:?}");
        };
        assert_eq!(global, &[usize::MAX]);
        assert!(reason.contains("cannot end"), "{err}");
        assert_increment_works(&ctx, &k);
    }
}

#[test]
fn a_work_group_past_the_device_is_refused_naming_the_sizes() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let k = increment(&ctx);
    let buf = ctx.buffer_from(&[0i32; 4]).unwrap();
    let args = [Arg::read_write(&buf), Arg::scalar(4u32)];
    let too_big = 1 << 20;
    // SAFETY: increment touches buf[i] only where i < n = 4, buf's length.
    let err = unsafe { queue.launch_local(&k, &[too_big], Some(&[too_big]), &args) }.unwrap_err();
    let Error::WorkSize { global, local, .. } = &err else {
        panic!("expected WorkSize, got {err:?}");
    };
    assert_eq!(
        (global.as_slice(), local.as_deref()),
        (&[too_big][..], Some(&[too_big][..]))
    );
    let text = err.to_string();
    assert!(text.contains(&too_big.to_string()), "{text}");
    assert!(text.contains("CL_DEVICE_MAX_WORK_"), "{text}");
}

// ---- 4. Programs are cached by source; the library's own are apart ----

#[test]
fn two_sources_under_one_name_are_two_programs() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let source = |value: i32| {
        format!("__kernel void set(__global int *x) {{ x[get_global_id(0)] = {value}; }}")
    };
    let buf = ctx.buffer::<i32>(4).unwrap();
    for value in [1, 2] {
        let program = ctx
            .program_from_source("generated", &source(value), "")
            .unwrap();
        let set = program.kernel("set").unwrap();
        // SAFETY: set writes x[i], i < 4, buf's length.
        unsafe { queue.launch(&set, &[4], &[Arg::write(&buf)]) }.unwrap();
        assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), [value; 4]);
    }
    assert_eq!(ctx.programs_built(), 2);
    // The same source again is a cache hit.
    ctx.program_from_source("generated", &source(1), "")
        .unwrap();
    assert_eq!(ctx.programs_built(), 2);
}

#[test]
fn a_user_program_named_like_the_pools_own_does_not_replace_it() {
    let ctx = device!();
    // Once the process has made a user event, the pool's second hand-out of the block
    // watches its old fill through the waiter (a hand-over gate), whose blocker thread
    // crashed Oclgrind's runtime beside this thread's calls (1 of 2 runs of the row).
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let mine = "__kernel void poison(__global int *x) { x[get_global_id(0)] = 7; }";
    let program = ctx.program_from_source("poison.cl", mine, "").unwrap();
    let pool = Pool::new(&ctx, PoolOptions::default().poison(true)).unwrap();
    let buf = pool.acquire::<u32>(64).unwrap();
    queue.fill(&buf, 5).unwrap();
    buf.release_deferred();
    // The recycled block holds the pool's poison word, not the user kernel's 7s.
    let again = pool.acquire::<u32>(64).unwrap();
    let read = queue.read_owned(&again).unwrap().wait().unwrap();
    assert_eq!(read, vec![cl_lifetime::POISON; 64]);
    // And the user's program is the user's.
    let user = ctx.buffer::<i32>(4).unwrap();
    let k = program.kernel("poison").unwrap();
    // SAFETY: the user's poison writes x[i], i < 4, user's length.
    unsafe { queue.launch(&k, &[4], &[Arg::write(&user)]) }.unwrap();
    assert_eq!(queue.read_owned(&user).unwrap().wait().unwrap(), [7; 4]);
}

// ---- 5. Build options that crash a driver are refused ----

isolated_test! {
    fn build_options_ending_in_a_bare_define_or_include_are_refused_before_the_driver() {
        let ctx = device!();
        for options in ["-D", "-I", "-DX=1 -I", "-D -I"] {
            let err = ctx.program("vector_add.cl", options).unwrap_err();
            let Error::BuildOptions { options: o, reason } = &err else {
                panic!("{options:?}: expected BuildOptions, got {err:?}");
            };
            assert_eq!(o, options);
            assert!(reason.contains("not followed by its value"), "{err}");
        }
        assert_eq!(ctx.programs_built(), 0);
        // Options with their values build.
        ctx.program("vector_add.cl", "-D X=1 -I .").unwrap();
        assert_eq!(ctx.programs_built(), 1);
    }
}

#[test]
fn build_options_with_a_nul_byte_are_refused_before_the_driver() {
    let ctx = device!();
    let err = ctx.program("vector_add.cl", "-DX=1\0").unwrap_err();
    let Error::BuildOptions { reason, .. } = &err else {
        panic!("expected BuildOptions, got {err:?}");
    };
    assert!(reason.contains("NUL"), "{err}");
    assert_eq!(ctx.programs_built(), 0);
}

// ---- 6. Kernel files are found by a rule that does not depend on the build machine ----

isolated_test! {
    fn kernels_are_not_looked_for_on_the_build_machine() {
        // The context first: an implementation registered through relative paths
        // (`OCL_ICD_VENDORS=.opencl/intel/vendors LD_LIBRARY_PATH=.opencl/intel/lib`) is
        // found from the checkout, not from the directory this test moves to.
        let ctx = device!();
        let dir = common::TempDir::new("kernels_are_not_looked_for_on_the_build_machine");
        std::env::set_current_dir(dir.path()).unwrap();
        // SAFETY: the child process runs this test alone, on one thread.
        unsafe { std::env::remove_var(cl_lifetime::KERNELS_VAR) };
        let err = ctx.program("busy.cl", "").unwrap_err();
        let Error::KernelFileNotFound { searched, cwd, .. } = &err else {
            panic!("expected KernelFileNotFound, got {err:?}");
        };
        // The crate's own `kernels/` (where the binary was built) is not searched; the
        // executable's folder is, and in a test that lies under the crate's `target/`.
        let built_here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let crate_kernels = built_here.join("kernels");
        assert!(
            searched.iter().all(|p| p.is_absolute() && !p.starts_with(&crate_kernels)),
            "{searched:?}"
        );
        assert_eq!(cwd, &dir.path().canonicalize().unwrap());
        assert!(err.to_string().contains(&cwd.display().to_string()), "{err}");
        // `kernels/` under the working directory is the documented place.
        let kernels = dir.path().join("kernels");
        std::fs::create_dir(&kernels).unwrap();
        // Compiled in: the build machine's checkout may not exist where the tests run.
        std::fs::write(kernels.join("busy.cl"), include_str!("../../kernels/busy.cl")).unwrap();
        let program = ctx.program("busy", "").unwrap();
        assert_eq!(program.file(), kernels.join("busy.cl").canonicalize().unwrap());
    }
}

// ---- 7. Errors that point the right way ----

#[test]
fn an_event_of_another_context_in_after_is_a_context_mismatch() {
    let ctx = device!();
    let other = common::context().unwrap();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[0u32; 4]).unwrap();
    let gate = other.user_event().unwrap();
    let done = other
        .queue()
        .unwrap()
        .fill(&other.buffer::<u32>(4).unwrap(), 1)
        .unwrap();
    for foreign in [gate.event(), &done] {
        let err = queue.after(&[foreign]).fill(&buf, 2).unwrap_err();
        assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    }
    assert_eq!(buf.record_len(), 0, "a refused command was recorded");
    gate.complete().unwrap();
    // An event of its own context is fine.
    let own = queue.fill(&buf, 3).unwrap();
    queue.after(&[&own]).fill(&buf, 4).unwrap();
    assert_eq!(queue.read_owned(&buf).unwrap().wait().unwrap(), [4; 4]);
}

#[test]
fn zero_sized_elements_are_zero_length_everywhere() {
    let ctx = device!();
    let pool = Pool::new(&ctx, PoolOptions::default()).unwrap();
    let errors = [
        ctx.buffer::<[u32; 0]>(4).map(drop),
        ctx.buffer_from(&[[0u32; 0]; 4]).map(drop),
        pool.acquire::<[u32; 0]>(4).map(drop),
        pool.acquire_on::<[u32; 0]>(&ctx.queue().unwrap(), 4)
            .map(drop),
    ];
    for (i, result) in errors.into_iter().enumerate() {
        assert!(matches!(result, Err(Error::ZeroLength)), "{i}: {result:?}");
    }
    assert_eq!(ctx.memory_stats().driver_allocations, 0);
}

#[test]
fn a_failed_command_prints_its_execution_status_not_an_api_error() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(4).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 1).unwrap();
    gate.fail(-1).unwrap();
    let err = fill.wait().unwrap_err();
    let Some(status) = err.exec_status() else {
        panic!("expected an execution status, got {err:?}");
    };
    assert!(status.code() < 0, "{err}");
    assert_eq!(
        err.status(),
        None,
        "an execution status is not an API status"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("execution status {}", status.code())),
        "{text}"
    );
    assert!(!text.contains("CL_DEVICE_NOT_FOUND"), "{text}");
}

/// Reversed on purpose: refused as reversed, not read as empty.
#[test]
#[allow(clippy::reversed_empty_ranges)]
fn a_reversed_range_is_named_as_given() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[0u32; 16]).unwrap();
    let err = queue.fill_range(&buf, 1, 12..4).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReversedRange {
                transfer: Transfer::Fill,
                start: 12,
                end: 4
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("12..4"), "{err}");
    let err = queue.read_owned_range(&buf, 5..3).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReversedRange {
                transfer: Transfer::Read,
                start: 5,
                end: 3,
            }
        ),
        "{err:?}"
    );
    assert_eq!(buf.record_len(), 0);
    // Nothing was recorded, so the release waits for nothing.
    assert_eq!(buf.release().unwrap().waited_on, 0);
}

/// A mapping past the end, across it or of a range too large to be a range, is
/// `OutOfRange` naming `Map` or `MapMut` with the range as given; a reversed range is
/// `ReversedRange`, an empty one `ZeroLength`. None is recorded, and the buffer is left
/// unmapped.
#[test]
#[allow(clippy::reversed_empty_ranges)]
fn a_mapping_out_of_range_names_the_mapping() {
    const N: usize = 16;
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer_from(&[0u32; N]).unwrap();
    let err = queue.map_mut(&buf, 8..20).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::MapMut,
                ..
            }
        ),
        "{err:?}"
    );
    let err = queue.map(&buf, 8..20).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Map,
                ..
            }
        ),
        "{err:?}"
    );
    match queue.map(&buf, 0..N + 1) {
        Err(Error::OutOfRange {
            transfer: Transfer::Map,
            offset: 0,
            len,
            buffer_len: N,
        }) => assert_eq!(len, N + 1),
        other => panic!("map past the end: {other:?}"),
    }
    match queue.map(&buf, N - 4..N + 4) {
        Err(Error::OutOfRange {
            offset,
            len: 8,
            buffer_len: N,
            ..
        }) => assert_eq!(offset, N - 4),
        other => panic!("map across the end: {other:?}"),
    }
    match queue.map_mut(&buf, 10..N + 1) {
        Err(Error::OutOfRange {
            transfer: Transfer::MapMut,
            offset: 10,
            len,
            buffer_len: N,
        }) => assert_eq!(len, N - 9),
        other => panic!("map_mut past the end: {other:?}"),
    }
    match queue.map(&buf, 1..usize::MAX) {
        Err(Error::OutOfRange { buffer_len: N, .. }) => {}
        other => panic!("huge map: {other:?}"),
    }
    match queue.map(&buf, 8..4) {
        Err(Error::ReversedRange {
            transfer: Transfer::Map,
            start: 8,
            end: 4,
        }) => {}
        other => panic!("reversed range: {other:?}"),
    }
    assert!(
        matches!(queue.map(&buf, 5..5), Err(Error::ZeroLength)),
        "an empty range is ZeroLength"
    );
    assert!(matches!(queue.map_mut(&buf, 5..5), Err(Error::ZeroLength)));
    assert_eq!(buf.record_len(), 0);

    // The refused maps left the buffer unmapped.
    queue.fill(&buf, 2).unwrap();
    let mapped = queue.map(&buf, N - 1..N).unwrap();
    assert_eq!(&mapped[..], &[2]);
}

// ---- Element types and const parameters ----

// A `ClBuffer<f32>` given for an `int*` parameter, or an `f32` scalar for a `uint` one,
// launched.
#[test]
fn a_buffer_or_scalar_of_another_element_type_is_refused_naming_both_types() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let k = increment(&ctx);
    let floats = ctx.buffer_from(&[0f32; 4]).unwrap();
    let ints = ctx.buffer_from(&[0i32; 4]).unwrap();
    let err =
        // SAFETY: refused by the argument check (f32 for `int*`): nothing runs.
        unsafe { queue.launch(&k, &[4], &[Arg::write(&floats), Arg::scalar(4u32)]) }.unwrap_err();
    assert_refused(
        &err,
        0,
        "__global int* data",
        "a buffer of f32 written (Arg::write)",
    );
    assert!(
        err.to_string().contains("declares int and f32 is given"),
        "{err}"
    );
    let err =
        // SAFETY: refused by the argument check (f32 for `uint`): nothing runs.
        unsafe { queue.launch(&k, &[4], &[Arg::write(&ints), Arg::scalar(4f32)]) }.unwrap_err();
    assert_refused(&err, 1, "uint n", "a 4-byte scalar (f32)");
    assert_eq!(
        floats.record_len() + ints.record_len(),
        0,
        "a refused launch was recorded"
    );
    assert_increment_works(&ctx, &k);
}

// `Arg::write` for a `const` parameter is refused (the kernel cannot write it); `Arg::read`
// for a parameter that is not const launches, and is logged once per argument.
#[test]
fn arg_write_for_a_const_parameter_is_refused_and_arg_read_for_a_writable_one_is_logged() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = ctx
        .program("vector_add", "")
        .unwrap()
        .kernel("add")
        .unwrap();
    let a = ctx.buffer_from(&[1f32; 16]).unwrap();
    let b = ctx.buffer_from(&[2f32; 16]).unwrap();
    let sum = ctx.buffer_from(&[0f32; 16]).unwrap();
    let args = [
        Arg::write(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(16u32),
    ];
    // SAFETY: refused by the argument check (a write for `const`): nothing runs.
    let err = unsafe { queue.launch(&add, &[16], &args) }.unwrap_err();
    assert_refused(
        &err,
        0,
        "__global const float* a",
        "a buffer of f32 written (Arg::write)",
    );
    assert!(err.to_string().contains("const"), "{err}");

    let me = std::thread::current().id();
    // n = 0: the launch is checked (and logged) as any, and the kernel writes nothing.
    let reads = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::read(&sum),
        Arg::scalar(0u32),
    ];
    // SAFETY: with n = 0, add touches nothing (and so writes no argument given as read).
    unsafe { queue.launch(&add, &[16], &reads) }
        .unwrap()
        .wait()
        .unwrap();
    // SAFETY: with n = 0, add touches nothing (and so writes no argument given as read).
    unsafe { queue.launch(&add, &[16], &reads) }
        .unwrap()
        .wait()
        .unwrap();
    let said: Vec<String> = common::logs::messages(me, "cl_lifetime::kernel")
        .into_iter()
        .filter(|m| m.contains("kernel add argument"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("argument 2") && said[0].contains("not const"),
        "{said:?}"
    );
}

// `Arg::read_write` (and its range form) for a `const` parameter is refused naming what
// was passed, `Arg::read_write`, not `Arg::write`.
#[test]
fn arg_read_write_for_a_const_parameter_is_refused_naming_arg_read_write() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = ctx
        .program("vector_add", "")
        .unwrap()
        .kernel("add")
        .unwrap();
    let a = ctx.buffer_from(&[1f32; 16]).unwrap();
    let b = ctx.buffer_from(&[2f32; 16]).unwrap();
    let sum = ctx.buffer_from(&[0f32; 16]).unwrap();
    for first in [
        Arg::read_write(&a),
        Arg::read_write_range(&a, 0..16).unwrap(),
    ] {
        let args = [first, Arg::read(&b), Arg::write(&sum), Arg::scalar(16u32)];
        // SAFETY: refused by the argument check (a write for `const`): nothing runs.
        let err = unsafe { queue.launch(&add, &[16], &args) }.unwrap_err();
        assert_refused(
            &err,
            0,
            "__global const float* a",
            "a buffer of f32 read and written (Arg::read_write)",
        );
        assert!(!err.to_string().contains("Arg::write"), "{err}");
        assert!(format!("{:?}", args[0]).starts_with("Arg::read_write("));
    }
    assert_eq!(a.record_len(), 0, "a refused launch was recorded");
}
