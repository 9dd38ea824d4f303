//! The optional features, built with `--features bytemuck,half` (`make test` runs this
//! file so): a user's `#[derive(bytemuck::Pod)]` struct in a buffer with no `unsafe impl`
//! of the crate's `Pod`, and `half::f16` buffers checked against kernel parameters
//! declared `half`. Without a device each test says so and passes, as the integration
//! tests do, except under `CL_LIFETIME_REQUIRE_DEVICE=1`.

use cl_lifetime::{Arg, Context, Error, Kernel};
use half::f16;

/// The type name the driver gives for argument `index` of `kernel`
/// (`clGetKernelArgInfo`), if it gives one.
fn arg_type(kernel: &Kernel, index: u32) -> Option<String> {
    let mut name = [0u8; 64];
    let mut len = 0usize;
    // SAFETY: a live kernel; `name` holds 64 bytes, and the driver writes at most that
    // many (it refuses a longer name with CL_INVALID_VALUE).
    let status = unsafe {
        cl_sys::clGetKernelArgInfo(
            kernel.as_raw() as cl_sys::cl_kernel,
            index,
            cl_sys::CL_KERNEL_ARG_TYPE_NAME,
            name.len(),
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (status == 0).then(|| String::from_utf8_lossy(&name[..len.saturating_sub(1)]).into_owned())
}

/// The context the tests run on, or `None` (said) without a device.
fn context() -> Option<Context> {
    match Context::from_env() {
        Ok(ctx) => Some(ctx),
        Err(e) if std::env::var("CL_LIFETIME_REQUIRE_DEVICE").as_deref() == Ok("1") => {
            panic!("CL_LIFETIME_REQUIRE_DEVICE=1 but no OpenCL device: {e}")
        }
        Err(e) => {
            eprintln!("not run: no OpenCL device ({e})");
            None
        }
    }
}

/// A particle as a user's program has it, with bytemuck's derive and nothing of the
/// crate's.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
struct Particle {
    position: [f32; 2],
    mass: f32,
    id: u32,
}

const KERNELS: &str = "
typedef struct { float2 position; float mass; uint id; } particle;
__kernel void heavier(__global particle *p, const float by, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) { p[i].mass += by; }
}
__kernel void halve(__global const half *in, __global half *out, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) { vstore_half(vload_half(i, in) * 0.5f, i, out); }
}
__kernel void floats(__global float *out) { out[get_global_id(0)] = 1.0f; }";

#[test]
fn a_derived_bytemuck_struct_is_a_buffer_element_without_unsafe() {
    let Some(ctx) = context() else { return };
    let queue = ctx.queue().expect("a queue");
    let program = ctx
        .program_from_source("features", KERNELS, "")
        .expect("the kernels build");
    let heavier = program.kernel("heavier").expect("heavier");
    let particles: Vec<Particle> = (0..64)
        .map(|i| Particle {
            position: [i as f32, -(i as f32)],
            mass: 1.0,
            id: i,
        })
        .collect();
    let buf = ctx.buffer_from(&particles).expect("a buffer of particles");
    let args = [
        Arg::read_write(&buf),
        Arg::scalar(0.5f32),
        Arg::scalar(64u32),
    ];
    // SAFETY: `heavier` touches p[i] only where i < n = 64, the buffer's length; the OpenCL
    // struct has the Rust one's layout (two floats, a float, a uint: 16 bytes, no padding).
    unsafe { queue.launch(&heavier, &[64], &args) }.expect("the launch");
    let back = queue
        .read_owned(&buf)
        .expect("a read")
        .wait()
        .expect("the data");
    for (got, was) in back.iter().zip(&particles) {
        assert_eq!(*got, Particle { mass: 1.5, ..*was });
    }
}

#[test]
fn half_buffers_fit_half_parameters_and_nothing_else() {
    let Some(ctx) = context() else { return };
    let queue = ctx.queue().expect("a queue");
    let program = ctx
        .program_from_source("features", KERNELS, "")
        .expect("the kernels build");
    let halve = program.kernel("halve").expect("halve");
    let values: Vec<f16> = (0..32).map(|i| f16::from_f32(i as f32)).collect();
    let input = ctx.buffer_from(&values).expect("a buffer of f16");
    let output = ctx.buffer::<f16>(32).expect("a buffer of f16");
    let args = [Arg::read(&input), Arg::write(&output), Arg::scalar(32u32)];
    // SAFETY: `halve` reads in[i] and writes out[i] only where i < n = 32, both lengths.
    unsafe { queue.launch(&halve, &[32], &args) }.expect("the launch");
    let back = queue
        .read_owned(&output)
        .expect("a read")
        .wait()
        .expect("the data");
    let want: Vec<f16> = (0..32).map(|i| f16::from_f32(i as f32 * 0.5)).collect();
    assert_eq!(back, want);

    // The same bits as `u16`: an integer for a `half` parameter is refused by the launch
    // check, where the driver gives the parameters' types.
    let ints = ctx.buffer::<u16>(32).expect("a buffer of u16");
    let args = [Arg::read(&ints), Arg::write(&output), Arg::scalar(32u32)];
    // SAFETY: refused by the argument check where the driver names the types; otherwise
    // it runs within both buffers' lengths, as above.
    let ints_given = unsafe { queue.launch(&halve, &[32], &args) };
    // And `f16` for a `float` parameter.
    let floats = program.kernel("floats").expect("floats");
    // SAFETY: as above; `floats` writes out[i] for i < 16, but it is refused first where
    // the driver names the types: 16 halves are 8 floats.
    let halves_given = unsafe { queue.launch(&floats, &[16], &[Arg::write(&output)]) };
    if arg_type(&halve, 0).is_some_and(|t| t.contains("half")) {
        for (what, result) in [
            ("u16 for half", ints_given),
            ("f16 for float", halves_given),
        ] {
            let err = result.expect_err(what);
            assert!(matches!(err, Error::KernelArg { .. }), "{what}: {err:?}");
        }
    } else {
        eprintln!("not run: the driver gives no kernel argument types");
    }
}
