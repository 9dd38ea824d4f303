//! Pieces the library's examples share: the device header, raw-`opencl3` error mapping,
//! kernel arguments, event release and program handle, the `spin` kernel's calibration
//! and the start that calibrates it,
//! raw `opencl3` objects on the same device, the driver's word on when memory is freed,
//! and a plain table. Each example uses part of it. (The measuring programs of bench/ have
//! their own copy in their harness: each package builds from its own files.)
#![allow(dead_code)]

use std::ffi::{CString, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cl_lifetime::{Arg, ClBuffer, ClStatus, Context, Kernel, Queue};
use opencl3::event as cle;
use opencl3::kernel::{self as clk, ExecuteKernel, Kernel as RawKernel};
use opencl3::memory::{self as clm, Buffer, CL_MEM_READ_WRITE, ClMem as _};
use opencl3::program as clp;
use opencl3::types::{cl_context, cl_device_id, cl_event, cl_int, cl_kernel, cl_mem, cl_program};

/// Prints the device, platform and driver the run measures.
pub fn print_device(ctx: &Context) {
    let device = ctx.device();
    println!("device:   {} ({})", device.name(), device.version());
    println!("platform: {}", device.platform_name());
    println!("driver:   {}", device.driver_version());
}

/// Maps a raw status to an error naming the call and the status.
pub fn cl_err(call: &'static str) -> impl Fn(cl_int) -> anyhow::Error {
    move |s| anyhow!("{call} failed: {}", ClStatus(s))
}

/// `clSetKernelArg` of argument `index` to the plain value `value` (a `cl_mem` handle or a
/// scalar), which OpenCL copies before returning.
///
/// # Safety
///
/// Argument `index` of `kernel` must be declared with `T`'s type (a `__global` pointer for
/// a live `cl_mem`, `uint` for a `u32`), and no other thread may set `kernel`'s arguments
/// meanwhile (OpenCL 3.0 appendix A.2).
pub unsafe fn set_arg<T: Copy>(kernel: cl_kernel, index: u32, value: &T) -> anyhow::Result<()> {
    // SAFETY: the caller vouches for the argument's type and for exclusive use of the
    // kernel; `value` is valid for `size_of::<T>()` bytes during the call.
    unsafe { clk::set_kernel_arg(kernel, index, size_of::<T>(), ptr::from_ref(value).cast()) }
        .map_err(cl_err("clSetKernelArg"))
}

/// Runs `add_const` of `schedule.cl` (adds `c` to each of the first `n` ints) on `mem`
/// through `queue`, and waits for it.
///
/// # Safety
///
/// `kernel` is `add_const(__global int *data, int c, uint n)`, used by this thread only;
/// `mem` is a live buffer of `queue`'s context holding at least `n` ints.
pub unsafe fn add_const_and_wait(
    queue: opencl3::types::cl_command_queue,
    kernel: cl_kernel,
    mem: cl_mem,
    c: i32,
    n: u32,
) -> anyhow::Result<()> {
    // SAFETY: the argument types are `add_const`'s, and the kernel is this thread's (the
    // caller vouches).
    unsafe {
        set_arg(kernel, 0, &mem)?;
        set_arg(kernel, 1, &c)?;
        set_arg(kernel, 2, &n)?;
    }
    // SAFETY: every argument is set; one dimension of 64 items (the kernel strides); no wait
    // list; the event is waited for and released below.
    let event = unsafe {
        opencl3::command_queue::enqueue_nd_range_kernel(
            queue,
            kernel,
            1,
            ptr::null(),
            [64usize].as_ptr(),
            ptr::null(),
            0,
            ptr::null(),
        )
    }
    .map_err(cl_err("clEnqueueNDRangeKernel"))?;
    cle::wait_for_events(&[event]).map_err(cl_err("clWaitForEvents"))?;
    release_event(event)
}

/// A fill of 7s over all 4 KiB of `buffer` on `queue` behind `gate`.
pub fn gated_fill(
    queue: opencl3::types::cl_command_queue,
    buffer: cl_mem,
    gate: cl_event,
) -> anyhow::Result<cl_event> {
    let value = 7u32;
    // SAFETY: the queue and buffer are live; the pattern is 4 bytes copied before the call
    // returns; the gate is live.
    unsafe {
        opencl3::command_queue::enqueue_fill_buffer(
            queue,
            buffer,
            (&raw const value).cast(),
            4,
            0,
            4096,
            1,
            &gate,
        )
    }
    .map_err(cl_err("clEnqueueFillBuffer"))
}

/// A raw queue on the context's device with the `CL_QUEUE_PROPERTIES` bits `flags` (0: in
/// order, no profiling).
pub fn raw_queue(ctx: &Context, flags: u64) -> anyhow::Result<opencl3::types::cl_command_queue> {
    let properties = [
        u64::from(opencl3::command_queue::CL_QUEUE_PROPERTIES),
        flags,
        0,
    ];
    // SAFETY: context and device are live handles of `ctx`; `properties` is a zero-terminated
    // list that outlives the call.
    unsafe {
        opencl3::command_queue::create_command_queue_with_properties(
            ctx.as_raw(),
            ctx.device().as_raw(),
            properties.as_ptr(),
        )
    }
    .map_err(cl_err("clCreateCommandQueueWithProperties"))
}

/// A raw buffer of `bytes` on the context, read-write, with no host pointer; the caller
/// owns its one reference.
pub fn raw_buffer(ctx: &Context, bytes: usize) -> anyhow::Result<cl_mem> {
    // SAFETY: the context is live; no host pointer.
    unsafe { clm::create_buffer(ctx.as_raw(), CL_MEM_READ_WRITE, bytes, ptr::null_mut()) }
        .map_err(cl_err("clCreateBuffer"))
}

/// Runs each case of a repeated-round reproducer in a child process (this program again,
/// with the case's index as its argument), and prints `ok` or the round it died in: the
/// child prints each finished round's number on a line of its own.
pub fn run_round_cases(names: &[&str], rounds: usize) -> anyhow::Result<()> {
    for (i, name) in names.iter().enumerate() {
        let out = this_program_again()?.arg(i.to_string()).output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().find(|l| l.contains("ERROR")).unwrap_or("");
        let done = String::from_utf8_lossy(&out.stdout);
        let done = done.lines().last().unwrap_or("0").trim();
        match out.status.code() {
            Some(0) => println!("{name}: ok ({rounds} rounds)"),
            _ => println!(
                "{name}: died in round {} of {rounds} ({}) {said}",
                done.parse::<usize>().map_or(0, |r| r + 1),
                out.status
            ),
        }
    }
    Ok(())
}

/// The environment this process started with, read before anything opened OpenCL:
/// NVIDIA's driver changes the environment of a process that opens it, and a child that
/// inherits the changed one sees no NVIDIA device (design trap "NVIDIA changes the
/// environment").
static START_ENV: std::sync::OnceLock<Vec<(std::ffi::OsString, std::ffi::OsString)>> =
    std::sync::OnceLock::new();

extern "C" fn capture_start_env() {
    let _ = START_ENV.set(std::env::vars_os().collect());
}

// Runs before `main`, so before the example opens OpenCL.
#[used]
#[unsafe(link_section = ".init_array")]
static CAPTURE_START_ENV: extern "C" fn() = capture_start_env;

/// This program again, as a child process with the environment it started with.
pub fn this_program_again() -> anyhow::Result<std::process::Command> {
    let mut child = std::process::Command::new(std::env::current_exe()?);
    if let Some(env) = START_ENV.get() {
        child.env_clear().envs(env.iter().cloned());
    }
    Ok(child)
}

/// Releases one reference to `event`, which the caller owns.
pub fn release_event(event: cl_event) -> anyhow::Result<()> {
    // SAFETY: `event` came from an enqueue or clCreateUserEvent of the caller, which owns
    // its one reference and gives it up here, exactly once.
    unsafe { cle::release_event(event) }.map_err(cl_err("clReleaseEvent"))
}

/// A raw program, released on drop (opencl3's `Program` cannot wrap a handle).
pub struct ProgramHandle(pub cl_program);

impl ProgramHandle {
    /// `clCreateProgramWithSource` + `clBuildProgram` for `device`.
    pub fn build(context: cl_context, device: cl_device_id, source: &str) -> anyhow::Result<Self> {
        let program = ProgramHandle(
            clp::create_program_with_source(context, &[source])
                .map_err(cl_err("clCreateProgramWithSource"))?,
        );
        clp::build_program(
            program.0,
            &[device],
            &CString::default(),
            None,
            ptr::null_mut(),
        )
        .map_err(cl_err("clBuildProgram"))?;
        Ok(program)
    }

    /// A new kernel object for `name`.
    pub fn kernel(&self, name: &str) -> anyhow::Result<RawKernel> {
        let name = CString::new(name)?;
        Ok(RawKernel::new(
            clk::create_kernel(self.0, &name).map_err(cl_err("clCreateKernel"))?,
        ))
    }
}

impl Drop for ProgramHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from clCreateProgramWithSource and is released once, here;
        // the kernels made from it hold their own references.
        if let Err(s) = unsafe { clp::release_program(self.0) } {
            log::error!("clReleaseProgram failed: {}", ClStatus(s));
        }
    }
}

/// Finds how many iterations make one `spin` launch over `items` work items take about
/// `target`. The first launch also builds the kernel for the device (PoCL compiles at the
/// first enqueue).
///
/// # Safety
///
/// `spin` is the `spin` kernel of `busy.cl` (or one that touches only element
/// `get_global_id(0)` of its one buffer argument), which it is launched as.
pub unsafe fn calibrate(
    ctx: &Context,
    queue: &Queue,
    spin: &Kernel,
    items: usize,
    target: Duration,
) -> anyhow::Result<u32> {
    let buf = ctx.buffer::<f32>(items)?;
    queue.fill(&buf, 1.0)?;
    let time = |iters: u32| -> anyhow::Result<Duration> {
        let start = Instant::now();
        let args = [Arg::read_write(&buf), Arg::scalar(iters)];
        // SAFETY: `spin` touches element i < items of buf, which has items (the caller's
        // contract).
        unsafe { queue.launch(spin, &[items], &args)? }.wait()?;
        Ok(start.elapsed())
    };
    let scale = |iters: u32, took: Duration| -> u32 {
        let took = took.max(Duration::from_micros(10));
        let scaled = f64::from(iters) * target.as_secs_f64() / took.as_secs_f64();
        scaled.clamp(1.0, f64::from(u32::MAX)) as u32
    };
    time(1)?; // warm-up
    let mut iters: u32 = 256;
    let estimate = loop {
        let took = time(iters)?.max(Duration::from_micros(10));
        if took >= target / 8 || iters == u32::MAX {
            break scale(iters, took);
        }
        let factor = ((target / 6).as_secs_f64() / took.as_secs_f64()).clamp(2.0, 64.0);
        iters = (f64::from(iters) * factor).min(f64::from(u32::MAX)) as u32;
    };
    // Refine at full length, on the median of three launches: a short probe on a busy
    // host (PoCL shares its cores with everything else) can be far off.
    let mut took = [time(estimate)?, time(estimate)?, time(estimate)?];
    took.sort();
    Ok(scale(estimate, took[1]))
}

/// What the examples that keep a buffer busy start from: the logger, the library's
/// context on the chosen device (printed), an in-order queue, and the `spin` kernel of
/// `busy.cl` with the iterations that make a launch over `items` work items take about
/// `target` ([`calibrate`]).
pub struct Busy {
    pub ctx: Context,
    pub queue: Queue,
    pub spin: Kernel,
    pub iters: u32,
}

impl Busy {
    pub fn start(items: usize, target: Duration) -> anyhow::Result<Busy> {
        env_logger::init();
        let ctx = Context::from_env()?;
        print_device(&ctx);
        let queue = ctx.queue()?;
        let spin = ctx.program("busy.cl", "")?.kernel("spin")?;
        // SAFETY: `spin` is busy.cl's spin.
        let iters = unsafe { calibrate(&ctx, &queue, &spin, items, target) }?;
        Ok(Busy {
            ctx,
            queue,
            spin,
            iters,
        })
    }
}

/// Raw `opencl3` objects on the library context's device, as code without the library
/// has them: a context of their own, an in-order queue and the `spin` kernel of the
/// `busy.cl` the library found.
pub struct RawSpin {
    pub context: opencl3::context::Context,
    pub queue: opencl3::command_queue::CommandQueue,
    pub spin: RawKernel,
}

impl RawSpin {
    /// Builds the objects on `ctx`'s first device and runs `spin` once (PoCL compiles at
    /// the first enqueue).
    pub fn new(ctx: &Context) -> anyhow::Result<RawSpin> {
        use opencl3::command_queue::CommandQueue;
        let device = opencl3::device::Device::new(ctx.device().as_raw());
        let context = opencl3::context::Context::from_device(&device)?;
        // The OpenCL 1.x entry point, which every device has.
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0)?;
        let source = std::fs::read_to_string(ctx.program("busy.cl", "")?.file())?;
        let program =
            opencl3::program::Program::create_and_build_from_source(&context, &source, "")
                .map_err(|log| anyhow!("building busy.cl: {log}"))?;
        let spin = RawKernel::create(&program, "spin")?;
        let raw = RawSpin {
            context,
            queue,
            spin,
        };
        let mut warm = raw.buffer(1)?;
        raw.fill(&mut warm, 1.0)?.wait()?;
        raw.spin(&warm, 1, 1)?.wait()?;
        Ok(raw)
    }

    /// `clCreateBuffer` of `len` floats, contents undefined.
    pub fn buffer(&self, len: usize) -> anyhow::Result<Buffer<f32>> {
        // SAFETY: no host pointer is given, so OpenCL reads no host memory.
        let buffer = unsafe {
            Buffer::<f32>::create(&self.context, CL_MEM_READ_WRITE, len, ptr::null_mut())
        }?;
        Ok(buffer)
    }

    /// `clEnqueueFillBuffer` of all of `buffer` with `value`.
    pub fn fill(&self, buffer: &mut Buffer<f32>, value: f32) -> anyhow::Result<cle::Event> {
        let bytes = buffer.size()?;
        // SAFETY: the whole buffer, `bytes` long, in whole floats; OpenCL copies the
        // pattern before returning.
        let event = unsafe {
            self.queue
                .enqueue_fill_buffer(buffer, &[value], 0, bytes, &[])
        }?;
        Ok(event)
    }

    /// Launches `spin` over the first `items` floats of `buffer`, and submits it.
    pub fn spin(
        &self,
        buffer: &Buffer<f32>,
        items: usize,
        iters: u32,
    ) -> anyhow::Result<cle::Event> {
        anyhow::ensure!(
            items * size_of::<f32>() <= buffer.size()?,
            "spin past the buffer's end"
        );
        let mem = buffer.get(); // not `cl_mem::from(buffer)`: that drops it (design trap "opencl3's From releases")
        // SAFETY: `spin(__global float *data, const uint iters)` gets a live cl_mem and a
        // u32, over `items` work items, one element each, all inside the buffer (checked).
        let event = unsafe {
            ExecuteKernel::new(&self.spin)
                .set_arg(&mem)
                .set_arg(&iters)
                .set_global_work_size(items)
                .enqueue_nd_range(&self.queue)
        }?;
        self.queue.flush()?;
        Ok(event)
    }
}

/// A buffer of either kind, whose `cl_mem` is live for as long as it is borrowed.
pub trait LiveMem {
    fn live_mem(&self) -> cl_mem;
}

impl LiveMem for Buffer<f32> {
    fn live_mem(&self) -> cl_mem {
        self.get()
    }
}

impl<T: cl_lifetime::Pod> LiveMem for ClBuffer<T> {
    fn live_mem(&self) -> cl_mem {
        self.as_raw()
    }
}

/// What runs when a memory object is destroyed.
type OnFreed = Box<dyn FnOnce() + Send>;

/// The destructor callback: runs the closure `on_freed` registered, once.
extern "C" fn run_on_freed(_mem: cl_mem, user_data: *mut c_void) {
    // SAFETY: `user_data` is the `Box::into_raw` of a `Box<OnFreed>` that `on_freed`
    // handed to this registration alone, and OpenCL calls a destructor callback once.
    let f = unsafe { Box::from_raw(user_data.cast::<OnFreed>()) };
    f();
}

/// Runs `f` when the driver destroys `buffer`'s memory object: when its memory is really
/// freed. `f` only records (no OpenCL call, nothing that blocks: design trap "nothing
/// blocking in callbacks").
pub fn on_freed(buffer: &impl LiveMem, f: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
    let data = Box::into_raw(Box::new(Box::new(f) as OnFreed)).cast::<c_void>();
    // SAFETY: the cl_mem is live (`buffer` is borrowed); the callback takes `data` back.
    let set =
        unsafe { clm::set_mem_object_destructor_callback(buffer.live_mem(), run_on_freed, data) };
    set.map_err(|s| {
        // SAFETY: the registration failed, so the callback never runs and `data` is ours.
        drop(unsafe { Box::from_raw(data.cast::<OnFreed>()) });
        cl_err("clSetMemObjectDestructorCallback")(s)
    })
}

/// When a buffer's memory was freed, and a wait for it.
#[derive(Clone, Default)]
pub struct FreedAt(Arc<(Mutex<Option<Instant>>, Condvar)>);

impl FreedAt {
    /// Watches `buffer`.
    pub fn watch(buffer: &impl LiveMem) -> anyhow::Result<FreedAt> {
        let mark = FreedAt::default();
        let set = mark.clone();
        on_freed(buffer, move || {
            let (at, fired) = &*set.0;
            *at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            fired.notify_all();
        })?;
        Ok(mark)
    }

    /// When the memory was freed, waiting up to `grace` for it.
    pub fn wait(&self, grace: Duration) -> Option<Instant> {
        let (at, fired) = &*self.0;
        let at = at.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, _) = fired
            .wait_timeout_while(at, grace, |at| at.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        *at
    }
}

/// Device bytes held by raw buffers, as the driver's destructor callbacks tell: a
/// buffer's bytes count from its creation until the driver frees it.
#[derive(Default)]
pub struct RawLedger {
    held: Arc<AtomicU64>,
    peak: AtomicU64,
    created: AtomicU64,
    created_bytes: AtomicU64,
}

impl RawLedger {
    /// Counts `buffer` (just created) until the driver frees it.
    pub fn track(&self, buffer: &Buffer<f32>) -> anyhow::Result<()> {
        let bytes = buffer.size()? as u64;
        let held = self.held.clone();
        let now = held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.created.fetch_add(1, Ordering::Relaxed);
        self.created_bytes.fetch_add(bytes, Ordering::Relaxed);
        on_freed(buffer, move || {
            held.fetch_sub(bytes, Ordering::Relaxed);
        })
    }

    /// The most bytes held at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Buffers created, and their bytes in all.
    pub fn created(&self) -> (u64, u64) {
        (
            self.created.load(Ordering::Relaxed),
            self.created_bytes.load(Ordering::Relaxed),
        )
    }
}

/// Prints `rows` under `header`: columns of numbers right-aligned, the others left-aligned.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    let mut numeric = vec![true; header.len()];
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(header.len()) {
            width[i] = width[i].max(cell.chars().count());
            numeric[i] &= cell.parse::<f64>().is_ok();
        }
    }
    let line = |cells: &[String]| {
        let cells: Vec<String> = cells
            .iter()
            .zip(width.iter().zip(&numeric))
            .map(|(cell, (&w, &right))| {
                if right {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        println!("{}", cells.join(" | ").trim_end());
    };
    line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    let rule: Vec<String> = width.iter().map(|&w| "-".repeat(w)).collect();
    println!("{}", rule.join("-|-"));
    for row in rows {
        line(row);
    }
}

/// Milliseconds, one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// Microseconds, one decimal.
pub fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// Bytes in MiB, two decimals.
pub fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / f64::from(1u32 << 20))
}

/// How `ours` compares with `theirs`, two amounts of which less is better (host time,
/// bytes): "2.0x less host time" where ours is smaller, "1.1x more host time" where it is
/// larger (the faster or smaller side first), "as much host time" where they are equal
/// to one decimal.
pub fn compared(theirs: f64, ours: f64, less: &str, more: &str, what: &str) -> String {
    let (theirs, ours) = (theirs.max(1e-12), ours.max(1e-12));
    if format!("{:.1}", theirs / ours) == "1.0" && format!("{:.1}", ours / theirs) == "1.0" {
        format!("as much {what}")
    } else if ours < theirs {
        format!("{:.1}x {less} {what}", theirs / ours)
    } else {
        format!("{:.1}x {more} {what}", ours / theirs)
    }
}
