//! Bad input gives a typed error, and nothing is lost: a rejected command leaves its
//! buffers' records as they were, the buffers still work, and they still release after
//! their own commands (checked with the cl-sys oracle).

use std::error::Error as _;
use std::fmt::Debug;
use std::path::Path;

use cl_lifetime::{Arg, ClBuffer, Context, Error, Kernel, Pod, Queue, Transfer};

use crate::common::{self, TempDir, ramp};

/// A broken kernel: `undeclared_thing_xyz` is not declared anywhere.
const BROKEN_SOURCE: &str = "__kernel void broken(__global int *out) {\n    \
                             out[get_global_id(0)] = undeclared_thing_xyz;\n}\n";

/// A buffer of 16 `u32`s with an empty record, so that any command wrongly recorded on
/// it shows. (On an in-order queue a new write replaces the older write in the record, so
/// a record that already held one would not grow.)
fn sixteen(ctx: &Context) -> ClBuffer<u32> {
    let buf = ctx.buffer_from(&[9u32; 16]).expect("create a buffer");
    assert_eq!(buf.record_len(), 0);
    buf
}

/// Asserts that a rejected command left `buf` whole: its record did not grow, data
/// written to it reads back, and it releases only after those commands.
#[track_caller]
fn assert_unharmed<T: Pod + PartialEq + Debug>(
    queue: &Queue,
    buf: ClBuffer<T>,
    record_before: usize,
    data: Vec<T>,
) {
    assert_eq!(
        buf.record_len(),
        record_before,
        "a rejected command changed the record"
    );
    assert_eq!(data.len(), buf.len());
    let write = queue
        .write_owned(&buf, data.clone())
        .expect("write after the rejection");
    let pending = queue.read_owned(&buf).expect("read after the rejection");
    let read = pending.event().clone();
    assert_eq!(pending.wait().expect("read completes"), data);
    let watch = common::watch(&buf, &[&write, &read]);
    // Handles of its commands keep a buffer alive on rusticl (design trap "rusticl's
    // events keep their buffers").
    drop((write, read));
    let report = buf.release().expect("release");
    assert!(report.failed.is_empty(), "{report:?}");
    watch.assert_released_after_events();
}

fn vector_add(ctx: &Context) -> Kernel {
    ctx.program("vector_add.cl", "")
        .expect("vector_add.cl builds")
        .kernel("add")
        .expect("vector_add.cl has add")
}

/// Launches `add` correctly on `a + b -> sum` and checks the result.
#[track_caller]
fn assert_add_works(
    queue: &Queue,
    add: &Kernel,
    a: &ClBuffer<f32>,
    b: &ClBuffer<f32>,
    sum: &ClBuffer<f32>,
) {
    let n = sum.len();
    // SAFETY: add touches a[i], b[i], sum[i] only where i < n = sum's length; every caller
    // passes add_operands' three buffers of 64 elements. It writes only sum.
    unsafe {
        queue.launch(
            add,
            &[n],
            &[
                Arg::read(a),
                Arg::read(b),
                Arg::write(sum),
                Arg::scalar(n as u32),
            ],
        )
    }
    .expect("launch with the right arguments")
    .wait()
    .expect("kernel completes");
    let out = queue
        .read_owned(sum)
        .and_then(|r| r.wait())
        .expect("read the sum");
    let expected: Vec<f32> = (0..n).map(|i| i as f32 + 2.0 * i as f32).collect();
    assert_eq!(out, expected);
}

/// `a = i`, `b = 2i`, `sum` unwritten, 64 elements each.
fn add_operands(ctx: &Context) -> (ClBuffer<f32>, ClBuffer<f32>, ClBuffer<f32>) {
    let a: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..64).map(|i| 2.0 * i as f32).collect();
    (
        ctx.buffer_from(&a).expect("buffer a"),
        ctx.buffer_from(&b).expect("buffer b"),
        ctx.buffer::<f32>(64).expect("buffer sum"),
    )
}

// ---- buffer creation ----

#[test]
fn zero_length_buffer_is_a_typed_error() {
    let ctx = device!();
    let err = ctx.buffer::<f32>(0).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    // The context is unharmed.
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(16).unwrap();
    assert_unharmed(&queue, buf, 0, ramp(16, 3));
}

#[test]
fn buffer_from_an_empty_slice_is_a_zero_length_error() {
    let ctx = device!();
    let err = ctx.buffer_from::<u32>(&[]).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
}

#[test]
fn buffer_over_max_alloc_is_too_large_with_its_size_and_the_limit() {
    let ctx = device!();
    let max = ctx.device().max_alloc_bytes();
    let len = usize::try_from(max / 4 + 1).unwrap();
    let err = ctx.buffer::<u32>(len).unwrap_err();
    let expected_bytes = (max / 4 + 1) * 4;
    assert!(
        matches!(err, Error::TooLarge { bytes, max: m } if bytes == expected_bytes && m == max),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&expected_bytes.to_string()), "{text}");
    assert!(text.contains("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), "{text}");
}

#[test]
fn buffer_of_usize_max_elements_is_too_large_without_overflow() {
    let ctx = device!();
    let max = ctx.device().max_alloc_bytes();
    let err = ctx.buffer::<u32>(usize::MAX).unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { bytes, max: m } if bytes == u64::MAX && m == max),
        "{err:?}"
    );
    let err = ctx.buffer::<u8>(usize::MAX).unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { bytes, max: m } if bytes == usize::MAX as u64 && m == max),
        "{err:?}"
    );
}

/// Issue 50: `host_buffer` of elements of zero bytes, or of more bytes than the device
/// allocates, returned the driver's raw `Error::Cl` where `buffer` returns `ZeroLength`
/// or `TooLarge`. It checks its size as `buffer` does, with the same errors.
#[test]
fn host_buffer_checks_its_size_as_buffer_does() {
    let ctx = device!();
    let max = ctx.device().max_alloc_bytes();
    let err = ctx.host_buffer::<u32>(0).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    let err = ctx.host_buffer::<[u32; 0]>(16).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    let err = ctx.buffer::<[u32; 0]>(16).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "buffer: {err:?}");
    let over = usize::try_from(max / 4 + 1).unwrap();
    for len in [over, usize::MAX / 4, usize::MAX] {
        let Error::TooLarge { bytes, max: m } = ctx.buffer::<u32>(len).unwrap_err() else {
            panic!("buffer of {len}: not TooLarge");
        };
        let err = ctx.host_buffer::<u32>(len).unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { bytes: b, max: hm } if b == bytes && hm == m),
            "host_buffer of {len}: {err:?} where TooLarge {{ bytes: {bytes}, max: {m} }} was due"
        );
    }
    // The context is unharmed.
    let pinned = ctx.host_buffer::<u32>(16).unwrap();
    assert_eq!(*pinned, [0; 16]);
}

// ---- transfers out of range ----

#[test]
fn read_past_the_end_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let mut out = [0u32; 17];
    let err = queue.read(&buf, &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Read,
                offset: 0,
                len: 17,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn read_at_an_offset_past_the_end_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let mut out = [0u32; 8];
    let err = queue.read_at(&buf, 10, &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Read,
                offset: 10,
                len: 8,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn owned_read_of_a_range_past_the_end_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.read_owned_range(&buf, 8..17).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Read,
                offset: 8,
                len: 9,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    // A range this large must be refused before any host memory is reserved for it.
    let err = queue.read_owned_range(&buf, 0..usize::MAX).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Read,
                offset: 0,
                len: usize::MAX,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn write_longer_than_the_buffer_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.write(&buf, &[1u32; 17]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Write,
                offset: 0,
                len: 17,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn owned_write_longer_than_the_buffer_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.write_owned(&buf, vec![1u32; 17]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Write,
                offset: 0,
                len: 17,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    let err = queue.write_owned_at(&buf, 15, vec![1u32; 2]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Write,
                offset: 15,
                len: 2,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn write_at_an_offset_past_the_end_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.write_at(&buf, 12, &[1u32; 5]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Write,
                offset: 12,
                len: 5,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn write_at_usize_max_offset_is_out_of_range_without_overflow() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.write_at(&buf, usize::MAX, &[1u32]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Write,
                offset: usize::MAX,
                len: 1,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    // Display must not overflow either.
    assert!(err.to_string().contains("outside a buffer of 16"), "{err}");
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn copy_reading_past_the_source_end_is_out_of_range_on_the_source() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let src = sixteen(&ctx);
    let dst = ctx.buffer_from(&[5u32; 32]).unwrap();
    let (src_before, dst_before) = (src.record_len(), dst.record_len());
    let err = queue.copy_range(&src, 10, &dst, 0, 8).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::CopySource,
                offset: 10,
                len: 8,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, src, src_before, ramp(16, 3));
    assert_unharmed(&queue, dst, dst_before, ramp(32, 3));
}

#[test]
fn copy_writing_past_the_destination_end_is_out_of_range_on_the_destination() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let src = ctx.buffer_from(&[5u32; 32]).unwrap();
    let dst = sixteen(&ctx);
    let (src_before, dst_before) = (src.record_len(), dst.record_len());
    // All of a 32-element source into a 16-element destination.
    let err = queue.copy(&src, &dst).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::CopyDestination,
                offset: 0,
                len: 32,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    let err = queue.copy_range(&src, 0, &dst, 9, 8).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::CopyDestination,
                offset: 9,
                len: 8,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, src, src_before, ramp(32, 3));
    assert_unharmed(&queue, dst, dst_before, ramp(16, 3));
}

#[test]
fn fill_of_a_range_past_the_end_is_out_of_range_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.fill_range(&buf, 7, 10..17).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                transfer: Transfer::Fill,
                offset: 10,
                len: 7,
                buffer_len: 16
            }
        ),
        "{err:?}"
    );
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

// ---- zero-length transfers ----

#[test]
fn zero_length_write_is_a_typed_error_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.write(&buf, &[]).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    let err = queue.write_owned(&buf, Vec::new()).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn zero_length_read_is_a_typed_error_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.read(&buf, &mut []).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    let err = queue.read_owned_range(&buf, 4..4).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn zero_length_copy_is_a_typed_error_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let src = sixteen(&ctx);
    let dst = sixteen(&ctx);
    let (src_before, dst_before) = (src.record_len(), dst.record_len());
    let err = queue.copy_range(&src, 0, &dst, 0, 0).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    assert_unharmed(&queue, src, src_before, ramp(16, 3));
    assert_unharmed(&queue, dst, dst_before, ramp(16, 3));
}

#[test]
fn zero_length_fill_is_a_typed_error_and_loses_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();
    let err = queue.fill_range(&buf, 1, 3..3).unwrap_err();
    assert!(matches!(err, Error::ZeroLength), "{err:?}");
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

// ---- kernel files and builds ----

#[test]
fn missing_kernel_file_lists_where_it_was_looked_for() {
    let ctx = device!();
    let err = ctx.program("no_such_kernel_file.cl", "").unwrap_err();
    let Error::KernelFileNotFound {
        name,
        searched,
        cwd,
    } = &err
    else {
        panic!("expected KernelFileNotFound, got {err:?}");
    };
    assert_eq!(name, "no_such_kernel_file.cl");
    assert_eq!(cwd, &std::env::current_dir().unwrap());
    assert!(searched.iter().all(|p| p.is_absolute()), "{searched:?}");
    let under_cwd = cwd.join("kernels").join("no_such_kernel_file.cl");
    assert!(searched.contains(&under_cwd), "{searched:?}");
    let text = err.to_string();
    assert!(text.contains("no_such_kernel_file.cl"), "{text}");
    assert!(text.contains(&under_cwd.display().to_string()), "{text}");
    assert!(text.contains(&cwd.display().to_string()), "{text}");
    assert!(err.source().is_none());
    assert_eq!(ctx.programs_built(), 0);
}

#[test]
fn kernel_file_name_without_extension_is_also_looked_for_with_cl() {
    let ctx = device!();
    let err = ctx.program("no_such_kernel_file", "").unwrap_err();
    let Error::KernelFileNotFound { name, searched, .. } = &err else {
        panic!("expected KernelFileNotFound, got {err:?}");
    };
    // The error names the file as asked for, and lists the name with `.cl` among the paths.
    assert_eq!(name, "no_such_kernel_file");
    assert!(
        searched
            .iter()
            .any(|p| p.ends_with("kernels/no_such_kernel_file.cl")),
        "{searched:?}"
    );
    assert_eq!(ctx.programs_built(), 0);
}

#[test]
fn directory_named_like_a_kernel_file_is_not_found() {
    let ctx = device!();
    let tmp = TempDir::new("directory_named_like_a_kernel_file");
    let dir = tmp.path().join("x.cl");
    std::fs::create_dir(&dir).unwrap();
    let err = ctx.program(dir.to_str().unwrap(), "").unwrap_err();
    let Error::KernelFileNotFound { searched, .. } = &err else {
        panic!("expected KernelFileNotFound, got {err:?}");
    };
    assert!(searched.contains(&dir), "{searched:?}");
}

#[test]
fn kernel_file_that_is_not_utf8_is_unreadable_with_its_io_error_as_source() {
    let ctx = device!();
    let tmp = TempDir::new("kernel_file_that_is_not_utf8");
    let path = tmp.write("latin1.cl", b"// caf\xe9\n__kernel void k(void) {}\n");
    let err = ctx.program(path.to_str().unwrap(), "").unwrap_err();
    let Error::KernelFileUnreadable { path: reported, .. } = &err else {
        panic!("expected KernelFileUnreadable, got {err:?}");
    };
    assert_eq!(reported, &path.canonicalize().unwrap());
    let source = err.source().expect("KernelFileUnreadable has a source");
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the source is the io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("latin1.cl"), "{err}");
    assert_eq!(ctx.programs_built(), 0);
}

#[test]
fn kernel_that_does_not_compile_is_a_build_error_with_the_compiler_log() {
    let ctx = device!();
    let tmp = TempDir::new("kernel_that_does_not_compile");
    let path = tmp.write("broken.cl", BROKEN_SOURCE.as_bytes());
    let err = ctx
        .program(path.to_str().unwrap(), "-DUNUSED_OPTION=1")
        .unwrap_err();
    let Error::Build {
        file,
        device,
        options,
        status,
        log,
    } = &err
    else {
        panic!("expected Build, got {err:?}");
    };
    assert_eq!(file, &path.canonicalize().unwrap());
    assert!(device.contains(ctx.device().name()), "{device}");
    assert_eq!(options, "-DUNUSED_OPTION=1");
    assert_eq!(status.name(), "CL_BUILD_PROGRAM_FAILURE");
    assert_eq!(err.status(), Some(*status));
    assert!(log.contains("undeclared_thing_xyz"), "build log: {log}");
    assert!(log.contains("error"), "build log: {log}");
    assert!(err.source().is_none());

    let text = format!("{err}");
    assert!(text.contains("CL_BUILD_PROGRAM_FAILURE"), "{text}");
    assert!(text.contains(ctx.device().name()), "{text}");
    assert!(text.contains("broken.cl"), "{text}");
    assert!(text.contains("undeclared_thing_xyz"), "{text}");

    // A failed build is not cached: it fails again, and good programs still build.
    assert_eq!(ctx.programs_built(), 0);
    let again = ctx
        .program(path.to_str().unwrap(), "-DUNUSED_OPTION=1")
        .unwrap_err();
    assert!(matches!(again, Error::Build { .. }), "{again:?}");
    assert_eq!(ctx.programs_built(), 0);
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    assert_eq!(ctx.programs_built(), 1);
    let (a, b, sum) = add_operands(&ctx);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

#[test]
fn source_that_does_not_compile_is_a_build_error_naming_the_embedded_source() {
    let ctx = device!();
    let err = ctx
        .program_from_source("broken_embedded", BROKEN_SOURCE, "")
        .unwrap_err();
    let Error::Build {
        file,
        device,
        status,
        log,
        ..
    } = &err
    else {
        panic!("expected Build, got {err:?}");
    };
    assert_eq!(file, Path::new("<source>/broken_embedded"));
    assert!(device.contains(ctx.device().name()), "{device}");
    assert_eq!(status.name(), "CL_BUILD_PROGRAM_FAILURE");
    assert!(status.code() < 0, "{status}");
    assert!(log.contains("undeclared_thing_xyz"), "build log: {log}");
    assert_eq!(ctx.programs_built(), 0);
    // The same name with a correct source builds: the failure was not cached.
    let fixed = BROKEN_SOURCE.replace("undeclared_thing_xyz", "7");
    let program = ctx
        .program_from_source("broken_embedded", &fixed, "")
        .unwrap();
    assert_eq!(program.kernel_names().unwrap(), vec!["broken".to_string()]);
    assert_eq!(ctx.programs_built(), 1);
}

#[test]
fn unknown_kernel_name_lists_the_kernels_the_program_has() {
    let ctx = device!();
    let program = ctx.program("vector_add.cl", "").unwrap();
    let err = program.kernel("nope").unwrap_err();
    let Error::UnknownKernel {
        name,
        file,
        available,
    } = &err
    else {
        panic!("expected UnknownKernel, got {err:?}");
    };
    assert_eq!(name, "nope");
    assert!(file.ends_with("kernels/vector_add.cl"), "{file:?}");
    assert_eq!(available, &vec!["add".to_string()]);
    let text = err.to_string();
    assert!(text.contains("nope") && text.contains("add"), "{text}");
    // The program is unharmed.
    assert_eq!(program.kernel("add").unwrap().num_args(), 4);
}

#[test]
fn kernel_name_with_a_nul_byte_is_an_unknown_kernel() {
    let ctx = device!();
    let program = ctx.program("vector_add.cl", "").unwrap();
    let err = program.kernel("add\0").unwrap_err();
    assert!(
        matches!(&err, Error::UnknownKernel { name, available, .. }
            if name == "add\0" && available == &vec!["add".to_string()]),
        "{err:?}"
    );
}

// ---- launches ----

#[test]
fn wrong_argument_count_is_a_typed_error_and_records_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let before = [a.record_len(), b.record_len(), sum.record_len()];
    // SAFETY: refused by the argument count check: nothing runs.
    let err = unsafe { queue.launch(&add, &[64], &[Arg::read(&a), Arg::read(&b)]) }.unwrap_err();
    assert!(
        matches!(&err, Error::ArgCount { kernel, expected: 4, given: 2 } if kernel == "add"),
        "{err:?}"
    );
    assert!(err.to_string().contains("add"), "{err}");
    assert_eq!(
        [a.record_len(), b.record_len(), sum.record_len()],
        before,
        "a rejected launch changed a record"
    );
    assert_add_works(&queue, &add, &a, &b, &sum);
    let watch = common::watch(&sum, &[]);
    sum.release().unwrap();
    watch.assert_released_after_events();
}

#[test]
fn too_many_arguments_is_an_arg_count_error() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    // SAFETY: refused by the argument count check: nothing runs.
    let err = unsafe {
        queue.launch(
            &add,
            &[64],
            &[
                Arg::read(&a),
                Arg::read(&b),
                Arg::write(&sum),
                Arg::scalar(64u32),
                Arg::scalar(0u32),
            ],
        )
    }
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ArgCount {
                expected: 4,
                given: 5,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(sum.record_len(), 0);
}

#[test]
fn empty_global_work_size_is_a_typed_error_and_records_nothing() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let before = [a.record_len(), b.record_len(), sum.record_len()];
    let args = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(64u32),
    ];
    // SAFETY: refused by the work size check. add touches a[i], b[i], sum[i] only where i < n = 64,
    // their length; it writes only sum.
    let err = unsafe { queue.launch(&add, &[], &args) }.unwrap_err();
    assert!(matches!(err, Error::WorkSize { .. }), "{err:?}");
    assert!(err.to_string().contains("work size refused"), "{err}");
    assert_eq!([a.record_len(), b.record_len(), sum.record_len()], before);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

#[test]
fn four_dimensional_work_size_is_a_typed_error() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let args = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(64u32),
    ];
    // SAFETY: refused by the work size check. add touches a[i], b[i], sum[i] only where i < n = 64,
    // their length; it writes only sum.
    let err = unsafe { queue.launch(&add, &[4, 4, 2, 2], &args) }.unwrap_err();
    assert!(matches!(err, Error::WorkSize { .. }), "{err:?}");
    assert_eq!(sum.record_len(), 0);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

#[test]
fn zero_global_dimension_is_a_typed_error() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let args = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(64u32),
    ];
    // SAFETY: refused by the work size check. add touches a[i], b[i], sum[i] only where i < n = 64,
    // their length; it writes only sum.
    let err = unsafe { queue.launch(&add, &[64, 0], &args) }.unwrap_err();
    assert!(matches!(err, Error::WorkSize { .. }), "{err:?}");
    assert_eq!(sum.record_len(), 0);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

#[test]
fn local_size_of_other_dimensions_than_global_is_a_typed_error() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let args = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(64u32),
    ];
    // SAFETY: refused by the work size check. add touches a[i], b[i], sum[i] only where i < n = 64,
    // their length; it writes only sum.
    let err = unsafe { queue.launch_local(&add, &[64], Some(&[8, 8]), &args) }.unwrap_err();
    assert!(matches!(err, Error::WorkSize { .. }), "{err:?}");
    // SAFETY: refused by the work size check. add touches a[i], b[i], sum[i] only where i < n = 64,
    // their length; it writes only sum.
    let err = unsafe { queue.launch_local(&add, &[64], Some(&[0]), &args) }.unwrap_err();
    assert!(matches!(err, Error::WorkSize { .. }), "{err:?}");
    assert_eq!(sum.record_len(), 0);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

#[test]
fn scalar_of_the_wrong_size_is_a_kernel_arg_error_and_the_kernel_still_works() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let before = [a.record_len(), b.record_len(), sum.record_len()];
    // `n` is a `uint`: eight bytes are refused.
    // SAFETY: refused by the argument check (a u64 for `uint n`): nothing runs.
    let err = unsafe {
        queue.launch(
            &add,
            &[64],
            &[
                Arg::read(&a),
                Arg::read(&b),
                Arg::write(&sum),
                Arg::scalar(1u64),
            ],
        )
    }
    .unwrap_err();
    let Error::KernelArg {
        kernel,
        index,
        declared,
        given,
        ..
    } = &err
    else {
        panic!("expected KernelArg, got {err:?}");
    };
    assert_eq!(kernel, "add");
    assert_eq!(*index, 3);
    assert_eq!(declared, "uint n");
    assert_eq!(given, "a 8-byte scalar (u64)");
    let text = err.to_string();
    assert!(text.contains("4-byte value"), "{text}");
    assert!(text.contains("argument 3"), "{text}");
    assert_eq!(
        [a.record_len(), b.record_len(), sum.record_len()],
        before,
        "a refused launch changed a record"
    );
    assert_add_works(&queue, &add, &a, &b, &sum);
    let watch = common::watch(&sum, &[]);
    sum.release().unwrap();
    watch.assert_released_after_events();
}

/// A launch the driver refuses for its work size (a local size that does not divide the
/// global one, which a program built for OpenCL C 1.x may not have) is refused before any
/// command reaches the buffers: `sum`, a new buffer whose first use would be preceded by
/// its zero fill, keeps an empty record too.
#[test]
fn a_launch_refused_for_its_work_size_leaves_every_record_untouched() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let before = [a.record_len(), b.record_len(), sum.record_len()];
    let args = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(64u32),
    ];
    // SAFETY: refused by the work size check. add touches a[i], b[i], sum[i] only where i < n = 64,
    // their length; it writes only sum.
    let err = unsafe { queue.launch_local(&add, &[64], Some(&[7]), &args) }.unwrap_err();
    assert!(matches!(err, Error::WorkSize { .. }), "{err:?}");
    assert_eq!(
        [a.record_len(), b.record_len(), sum.record_len()],
        before,
        "a launch refused for its work size changed a record"
    );
    assert_add_works(&queue, &add, &a, &b, &sum);
}

/// A launch refused because one argument is mapped leaves the records of the others
/// untouched too, a new buffer's included (its zero fill is not enqueued for a command
/// that is refused).
#[test]
fn a_launch_refused_for_a_mapped_argument_leaves_every_record_untouched() {
    let ctx = device!();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let before = [a.record_len(), b.record_len(), sum.record_len()];
    let mapped = queue.map_mut(&b, 0..64).unwrap();
    let mapped_record = b.record_len();
    let args = [
        Arg::read(&a),
        Arg::read(&b),
        Arg::write(&sum),
        Arg::scalar(64u32),
    ];
    // SAFETY: refused for the mapped argument. add touches a[i], b[i], sum[i] only where i < n =
    // 64, their length; it writes only sum.
    let err = unsafe { queue.launch(&add, &[64], &args) }.unwrap_err();
    assert!(matches!(err, Error::Mapped), "{err:?}");
    assert_eq!(
        [a.record_len(), b.record_len(), sum.record_len()],
        [before[0], mapped_record, before[2]],
        "a launch refused for a mapped argument changed a record"
    );
    drop(mapped);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

// ---- objects of two contexts ----

#[test]
fn buffer_of_another_context_is_refused_by_a_queue() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let other_queue = other.queue().unwrap();
    let queue = ctx.queue().unwrap();
    let buf = sixteen(&ctx);
    let before = buf.record_len();

    let err = other_queue.write(&buf, &[1; 16]).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    let err = other_queue.fill(&buf, 1).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    let mut out = [0u32; 16];
    let err = other_queue.read(&buf, &mut out).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    let err = other_queue.read_owned(&buf).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    assert_unharmed(&queue, buf, before, ramp(16, 3));
}

#[test]
fn copy_between_contexts_is_refused_and_records_nothing() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let queue = ctx.queue().unwrap();
    let other_queue = other.queue().unwrap();
    let mine = sixteen(&ctx);
    let theirs = sixteen(&other);
    let (mine_before, theirs_before) = (mine.record_len(), theirs.record_len());
    let err = queue.copy(&mine, &theirs).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    let err = queue.copy(&theirs, &mine).unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    assert_unharmed(&queue, mine, mine_before, ramp(16, 3));
    assert_unharmed(&other_queue, theirs, theirs_before, ramp(16, 3));
}

/// A kernel of one context launched on a queue of another, with that queue's buffers, is
/// refused, either way round. Each context builds its own program from one file: a
/// program cached by the first context and handed to the second would be refused on the
/// second's queue.
#[test]
fn kernel_of_another_context_is_refused_by_a_queue() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let contexts = [&ctx, &other];
    let adds = [vector_add(&ctx), vector_add(&other)];
    for (mine, theirs) in [(0, 1), (1, 0)] {
        let queue = contexts[mine].queue().unwrap();
        let (a, b, sum) = add_operands(contexts[mine]);
        // SAFETY: refused (a kernel of another context): nothing runs. add touches a[i], b[i],
        // sum[i] only where i < n = 64, their length; it writes only sum.
        let err = unsafe {
            queue.launch(
                &adds[theirs],
                &[64],
                &[
                    Arg::read(&a),
                    Arg::read(&b),
                    Arg::write(&sum),
                    Arg::scalar(64u32),
                ],
            )
        }
        .unwrap_err();
        assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
        assert_eq!(sum.record_len(), 0, "a refused launch was recorded");
        // The right kernel for that context works on the same buffers.
        assert_add_works(&queue, &adds[mine], &a, &b, &sum);
    }
}

#[test]
fn launch_with_a_buffer_of_another_context_is_refused_and_records_nothing() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let queue = ctx.queue().unwrap();
    let add = vector_add(&ctx);
    let (a, b, sum) = add_operands(&ctx);
    let foreign = other.buffer::<f32>(64).unwrap();
    let before = [a.record_len(), b.record_len(), sum.record_len()];
    // SAFETY: refused (a buffer of another context): nothing runs. add touches a[i], b[i], sum[i]
    // only where i < n = 64, their length; it writes only sum.
    let err = unsafe {
        queue.launch(
            &add,
            &[64],
            &[
                Arg::read(&a),
                Arg::read(&foreign),
                Arg::write(&sum),
                Arg::scalar(64u32),
            ],
        )
    }
    .unwrap_err();
    assert!(matches!(err, Error::ContextMismatch { .. }), "{err:?}");
    assert_eq!([a.record_len(), b.record_len(), sum.record_len()], before);
    assert_eq!(foreign.record_len(), 0);
    assert_add_works(&queue, &add, &a, &b, &sum);
}

// ---- user events ----

#[test]
fn failing_a_gate_with_a_non_negative_status_is_refused_and_leaves_it_closed() {
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let queue = ctx.queue().unwrap();
    let buf = ctx.buffer::<u32>(16).unwrap();
    let gate = ctx.user_event().unwrap();
    let fill = queue.after(&[gate.event()]).fill(&buf, 4).unwrap();
    queue.flush().unwrap();

    let err = gate.fail(0).unwrap_err();
    let Error::Cl { call, status } = &err else {
        panic!("expected Cl, got {err:?}");
    };
    assert_eq!(*call, "clSetUserEventStatus");
    assert_eq!(status.name(), "CL_INVALID_VALUE");
    assert!(err.source().is_none());
    assert!(err.to_string().contains("CL_INVALID_VALUE"), "{err}");
    assert!(!fill.is_terminal(), "a refused fail(0) released the gate");

    // The gate still opens normally.
    gate.complete().unwrap();
    fill.wait().unwrap();
    let mut out = [0u32; 16];
    queue.read(&buf, &mut out).unwrap();
    assert_eq!(out, [4; 16]);
}

#[test]
fn completing_a_gate_twice_is_a_typed_error() {
    let ctx = device!();
    let gate = ctx.user_event().unwrap();
    gate.complete().unwrap();
    let err = gate.complete().unwrap_err();
    assert!(
        matches!(&err, Error::Cl { call: "clSetUserEventStatus", status }
            if status.name() == "CL_INVALID_OPERATION"),
        "{err:?}"
    );
    assert!(err.to_string().contains("CL_INVALID_OPERATION"), "{err}");
    assert!(err.source().is_none());
    let err = gate.fail(-5).unwrap_err();
    assert!(
        matches!(&err, Error::Cl { status, .. } if status.name() == "CL_INVALID_OPERATION"),
        "{err:?}"
    );
}

#[test]
fn completing_a_failed_gate_is_a_typed_error() {
    let ctx = device!();
    let gate = ctx.user_event().unwrap();
    gate.fail(-5).unwrap();
    let err = gate.complete().unwrap_err();
    assert!(
        matches!(&err, Error::Cl { status, .. } if status.name() == "CL_INVALID_OPERATION"),
        "{err:?}"
    );
}

// ---- release after rejections ----

/// The release check of [`assert_unharmed`], repeated until a race would show: after
/// each rejected transfer the buffer is used, then released, and its memory must be gone
/// (the destructor callback fired) when `release` returns. Two threads, each on its own
/// queue, so the device's worker threads are busy as in a real program.
#[test]
fn buffer_is_freed_when_release_returns_after_a_rejected_transfer() {
    const ROUNDS: usize = 25_000;
    let ctx = device!();
    if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                let queue = ctx.queue().unwrap();
                let mut not_freed = 0;
                for _ in 0..ROUNDS {
                    let buf = ctx.buffer_from(&[1u32; 16]).unwrap();
                    let err = queue.write_at(&buf, usize::MAX, &[2u32]).unwrap_err();
                    assert!(matches!(err, Error::OutOfRange { .. }), "{err:?}");
                    let write = queue.write_owned(&buf, vec![2u32; 16]).unwrap();
                    let pending = queue.read_owned(&buf).unwrap();
                    let read = pending.event().clone();
                    assert_eq!(pending.wait().unwrap(), vec![2u32; 16]);
                    let watch = common::watch(&buf, &[&write, &read]);
                    drop((write, read));
                    buf.release().unwrap();
                    if !watch.fired() {
                        not_freed += 1;
                    }
                }
                not_freed
            })
        })
        .collect();
    let not_freed: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(
        not_freed,
        0,
        "{not_freed} of {} buffers were still allocated when release() returned",
        2 * ROUNDS
    );
}

// `ContextMismatch` said only that objects of different contexts were mixed: it names the
// object (a buffer with its allocation site, an event with its command, a kernel) and both
// contexts.
#[test]
fn a_context_mismatch_names_the_object_and_both_contexts() {
    let ctx = device!();
    let other = Context::new(ctx.device()).unwrap();
    let other_queue = other.queue().unwrap();
    let buf = sixteen(&ctx);
    let (mine, theirs) = (ctx.as_raw() as usize, other.as_raw() as usize);
    let named = |err: Error, object: &str| {
        let Error::ContextMismatch {
            object: named,
            its_context,
            used_with,
        } = &err
        else {
            panic!("expected ContextMismatch, got {err:?}");
        };
        assert!(named.contains(object), "{err}");
        assert_eq!((*its_context, *used_with), (Some(mine), theirs), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("{mine:#x}")) && text.contains(&format!("{theirs:#x}")),
            "{text}"
        );
    };
    named(
        other_queue.fill(&buf, 1).unwrap_err(),
        &format!("buffer allocated at {}", file!()),
    );
    let fill = ctx.queue().unwrap().fill(&buf, 2).unwrap();
    let theirs_buf = sixteen(&other);
    named(
        other_queue
            .after(&[&fill])
            .fill(&theirs_buf, 1)
            .unwrap_err(),
        "event",
    );
    let kernel = ctx
        .program("vector_add", "")
        .unwrap()
        .kernel("add")
        .unwrap();
    let args = [
        Arg::read(&theirs_buf),
        Arg::read(&theirs_buf),
        Arg::write(&theirs_buf),
        Arg::scalar(16u32),
    ];
    // SAFETY: refused (a kernel of another context): nothing runs; add would touch element
    // i < 16 of the 16-element buffer.
    let err = unsafe { other_queue.launch(&kernel, &[16], &args) }.unwrap_err();
    named(err, "kernel add");
}
