//! The shared-virtual-memory free trap, measured on one OpenCL device: `clSVMFree` frees
//! at once, whatever still uses the memory (the OpenCL specification leaves the wait to
//! the caller), so code that frees an SVM allocation right after enqueueing the kernel that
//! reads it hands the kernel freed memory.
//!
//! A loop of 40 steps, each: allocate a coarse-grained SVM list of 2^20 nodes (16 MiB; a
//! node is two `u64`: a value and the address of the next node, or 0), map it, link the
//! nodes in a shuffled order on the host (a small deterministic generator), unmap it;
//! launch `walk`, whose 8192 work items each start at node i (`list + 16 i`
//! bytes), follow `next` for up to 64 nodes and add the values they saw into `out[i]` of an
//! ordinary buffer OUT that lives for the whole run; launch the `spin` kernel of
//! kernels/busy.cl (64 work items, calibrated to about 15 ms) on a second queue over a
//! second long-lived buffer OTHER, unrelated work still in flight when the list is freed;
//! free the list. The maps go through a third queue, so that a map waits for nothing the
//! walks do. At the end OUT is read back and compared with the sums the host computed from
//! its own lists. (On a CPU device the host, the walks and the unrelated work share the
//! same cores.)
//!
//! Rows, each its own loop:
//!
//! 1. raw `opencl3`: `clFinish` on the walk's queue and on the unrelated work's, then
//!    `clSVMFree` (safe, and waits for the unrelated work too);
//! 2. raw `opencl3`: `clWaitForEvents` on the walk's event, held by hand, then `clSVMFree`
//!    (the exact hand-written wait, the baseline of the ratio column);
//! 3. cl-lifetime: `list.release()`, which waits for the list's own commands only;
//! 4. cl-lifetime: `list.release_deferred()`, which returns at once; the library's thread
//!    frees the list when its commands have ended;
//! 5. raw `opencl3`: `clSVMFree` right after enqueueing the walk: the trap. The walk then
//!    reads freed memory (which the next step's `clSVMAlloc` may hand out again and the host
//!    overwrite), so this row runs in a child process (this program with `--row trap`): the
//!    table gives its exit status, or the count of wrong sums, and the steps in which the
//!    walk had not ended when `clSVMFree` returned (a driver may wait in `clSVMFree`; the
//!    specification does not promise it).
//!
//! Measured: steps per second (host list building included, and the wait for both queues
//! to drain at the end), the time against row 2, the wrong elements of OUT, and for rows 3
//! and 4 the context's peak bytes (live + pending release). The library's lists are made
//! with `svm_uninitialized`, since the host writes every node before the walk reads any (a
//! map for writing counts as a read, so `svm` would zero-fill each list first).
//!
//! Run it with `make examples` (with the other examples of this series), or directly:
//!
//! ```text
//! CL_LIFETIME_DEVICE=pocl cargo run --release --example svm_linked_list
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name). A
//! device that reports no coarse-grained SVM (every OpenCL 1.x device) gets a line saying
//! so, and the program ends successfully.

use std::ffi::c_void;
use std::io::Read as _;
use std::process::{ExitStatus, Stdio};
use std::ptr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use cl_lifetime::{Arg, Context, Device, Error, SvmKind};
use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::kernel::{self as clk, Kernel as RawKernel};
use opencl3::memory::{self as clm, CL_MAP_WRITE, CL_MEM_READ_WRITE};
use opencl3::types::{CL_BLOCKING, cl_command_queue, cl_event, cl_kernel, cl_mem};

mod common;
use common::{
    ProgramHandle, calibrate, cl_err, mib, ms, print_device, print_table, raw_queue, release_event,
    set_arg,
};

/// Steps per loop.
const STEPS: usize = 40;
/// Nodes per list: 16 MiB of nodes.
const NODES: usize = 1 << 20;
/// Work items of `walk`: item i starts at node i.
const ITEMS: usize = 1 << 13;
/// Nodes each work item visits at most.
const HOPS: u32 = 64;
/// Work items of the unrelated `spin`.
const SPIN_ITEMS: usize = 64;
/// How long one unrelated `spin` should run.
const SPIN: Duration = Duration::from_millis(15);
/// The argument that makes this program run row 5 alone (in the child process).
const TRAP_ARG: &str = "--row";
/// What the child prints before its figures: seconds and wrong elements.
const TRAP_TAG: &str = "trap-result";

/// `walk` (a pointer read from memory is followed on the device; OpenCL C 1.2 is enough,
/// and PoCL 5 builds no OpenCL C 2.0).
const WALK: &str = "
// Work item i walks the list from node i (a node is {value, address of the next or 0}):
// up to `hops` nodes, or to the list's end, adding their values into out[i].
__kernel void walk(__global const ulong *list, __global ulong *out, const uint hops) {
    size_t i = get_global_id(0);
    __global const ulong *node = list + 2 * i;
    ulong sum = 0;
    for (uint h = 0; h < hops && node != 0; ++h) {
        sum += node[0];
        node = (__global const ulong *)node[1];
    }
    out[i] += sum;
}
";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, row, which, iters] = args.as_slice() {
        if row == TRAP_ARG && which == "trap" {
            return trap_child(iters.parse()?);
        }
    }

    env_logger::init();
    let ctx = Context::from_env()?;
    print_device(&ctx);
    match ctx.svm::<u64>(2, SvmKind::Coarse) {
        Ok(probe) => drop(probe.release()?),
        Err(Error::Unsupported { capability, .. }) => {
            println!("SVM is not reported by this device ({capability}): nothing to measure.");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    let queue = ctx.queue()?;
    let spin = ctx.program("busy.cl", "")?.kernel("spin")?;
    // SAFETY: `spin` is busy.cl's spin.
    let iters = unsafe { calibrate(&ctx, &queue, &spin, SPIN_ITEMS, SPIN) }?;
    println!(
        "{STEPS} steps; list: {NODES} nodes ({} MiB of coarse-grained SVM), linked in a \
         shuffled order; walk: {ITEMS} work items x up to {HOPS} nodes; unrelated work: spin \
         over {SPIN_ITEMS} work items x {iters} iterations, about {} ms, on a second queue\n",
        mib((NODES * NODE_BYTES) as u64),
        SPIN.as_millis()
    );

    let kit = RawKit::new(&ctx)?;
    let raw_row = |approach, free| -> anyhow::Result<Row> {
        let (took, wrong, _) = raw_loop(&ctx, &kit, iters, free)?;
        Ok(Row {
            approach,
            took,
            wrong,
            peak: None,
        })
    };
    let finish = raw_row("raw: clFinish both queues, clSVMFree", RawFree::Finish)?;
    let event = raw_row("raw: clWaitForEvents(walk), clSVMFree", RawFree::Event)?;
    let release = lib_loop(ctx.device(), iters, false)?;
    let deferred = lib_loop(ctx.device(), iters, true)?;
    let trap = trap_row(iters)?;

    let rows = [finish, event, release, deferred];
    let base = rows[1].took.as_secs_f64();
    let per_s = |took: Duration| format!("{:.1}", STEPS as f64 / took.as_secs_f64());
    let mut table: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                r.approach.to_string(),
                per_s(r.took),
                format!("{:.2}", r.took.as_secs_f64() / base),
                r.wrong.to_string(),
                r.peak.map_or_else(|| "-".to_string(), mib),
            ]
        })
        .collect();
    table.push(vec![
        "5".to_string(),
        "raw: clSVMFree right after the walk (the trap)".to_string(),
        trap.took.map_or_else(|| "-".to_string(), per_s),
        trap.took.map_or_else(
            || "-".to_string(),
            |t| format!("{:.2}", t.as_secs_f64() / base),
        ),
        trap.outcome.clone(),
        "-".to_string(),
    ]);
    print_table(
        &[
            "row",
            "approach",
            "steps/s",
            "time vs row 2",
            "wrong results",
            "peak MiB",
        ],
        &table,
    );
    println!(
        "\nrow 5 (child process): {}; {}",
        trap.status,
        ms_per_step(trap.took)
    );
    let wrong: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.wrong != 0)
        .map(|(i, r)| format!("row {}: {} of {ITEMS}", i + 1, r.wrong))
        .collect();
    if !wrong.is_empty() {
        bail!("a safe row read wrong sums: {}", wrong.join(", "));
    }
    Ok(())
}

/// "x ms per step", or why there is no time.
fn ms_per_step(took: Option<Duration>) -> String {
    took.map_or_else(
        || "no time: it did not finish".to_string(),
        |t| format!("{} ms per step", ms(t / STEPS as u32)),
    )
}

/// Bytes per node: value and next.
const NODE_BYTES: usize = 2 * size_of::<u64>();

/// One safe loop's figures.
struct Row {
    approach: &'static str,
    took: Duration,
    wrong: usize,
    /// The library context's peak bytes (rows 3 and 4).
    peak: Option<u64>,
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// Node `node`'s value in step `step`'s list.
fn value(step: usize, node: usize) -> u64 {
    1 + ((node as u64) ^ (step as u64).wrapping_mul(0x9e37_79b9)) % 1000
}

/// The host's share: each step's list order, and the sums the walks must find.
struct Lists {
    /// The nodes in list order.
    order: Vec<u32>,
    /// Each node's place in the list.
    place: Vec<u32>,
    /// `prefix[j]`: the values of the first `j` nodes of the list, summed.
    prefix: Vec<u64>,
    /// What OUT must hold: the walks' sums over the steps so far.
    expected: Vec<u64>,
}

impl Lists {
    fn new() -> Lists {
        Lists {
            order: vec![0; NODES],
            place: vec![0; NODES],
            prefix: vec![0; NODES + 1],
            expected: vec![0; ITEMS],
        }
    }

    /// Writes step `step`'s list into `nodes`, the allocation at address `base`, and adds
    /// the sums its walks must find to `expected`.
    fn build(&mut self, nodes: &mut [u64], base: u64, step: usize) {
        assert_eq!(nodes.len(), 2 * NODES, "a list holds NODES nodes");
        let mut rng = Rng(step as u64);
        for (j, o) in self.order.iter_mut().enumerate() {
            *o = j as u32;
        }
        for j in (1..NODES).rev() {
            self.order.swap(j, rng.below(j + 1));
        }
        for (j, &node) in self.order.iter().enumerate() {
            let node = node as usize;
            let next = self
                .order
                .get(j + 1)
                .map_or(0, |&n| base + (NODE_BYTES as u64) * u64::from(n));
            let v = value(step, node);
            nodes[2 * node] = v;
            nodes[2 * node + 1] = next;
            self.place[node] = j as u32;
            self.prefix[j + 1] = self.prefix[j] + v;
        }
        for (i, e) in self.expected.iter_mut().enumerate() {
            let from = self.place[i] as usize;
            let to = (from + HOPS as usize).min(NODES);
            *e += self.prefix[to] - self.prefix[from];
        }
    }

    /// How many elements of `out` differ from the expected sums.
    fn wrong(&self, out: &[u64]) -> usize {
        self.expected
            .iter()
            .zip(out)
            .filter(|(e, o)| e != o)
            .count()
    }
}

/// How a raw loop frees each step's list.
#[derive(Clone, Copy, PartialEq)]
enum RawFree {
    /// `clFinish` on both queues, then `clSVMFree`.
    Finish,
    /// `clWaitForEvents` on the walk's event, then `clSVMFree`.
    Event,
    /// `clSVMFree` at once: the bug this example demonstrates.
    Trap,
}

/// The raw kernels rows 1, 2 and 5 use, built on the library context's device as code
/// without the library would build them.
struct RawKit {
    walk: RawKernel,
    spin: RawKernel,
    _programs: [ProgramHandle; 2],
}

impl RawKit {
    fn new(ctx: &Context) -> anyhow::Result<RawKit> {
        let device = ctx.device().as_raw();
        let walks = ProgramHandle::build(ctx.as_raw(), device, WALK)?;
        let busy = std::fs::read_to_string(ctx.program("busy.cl", "")?.file())?;
        let busy = ProgramHandle::build(ctx.as_raw(), device, &busy)?;
        Ok(RawKit {
            walk: walks.kernel("walk")?,
            spin: busy.kernel("spin")?,
            _programs: [walks, busy],
        })
    }
}

/// A raw command queue, released on drop.
struct RawQueue(cl_command_queue);

impl RawQueue {
    fn new(ctx: &Context) -> anyhow::Result<RawQueue> {
        Ok(RawQueue(raw_queue(ctx, 0)?))
    }

    fn flush(&self) -> anyhow::Result<()> {
        clq::flush(self.0).map_err(cl_err("clFlush"))
    }

    fn finish(&self) -> anyhow::Result<()> {
        clq::finish(self.0).map_err(cl_err("clFinish"))
    }

    /// `clEnqueueNDRangeKernel` of `kernel` over `items` work items after `wait`.
    ///
    /// # Safety
    ///
    /// Every argument of `kernel` is set, and what its pointers name stays allocated until
    /// the launch has ended; `wait` holds live events.
    unsafe fn launch(
        &self,
        kernel: cl_kernel,
        items: usize,
        wait: &[cl_event],
    ) -> anyhow::Result<cl_event> {
        // SAFETY: the queue and kernel are live; the caller vouches for the arguments and
        // the wait list; `items` outlives the call, which copies it.
        unsafe {
            clq::enqueue_nd_range_kernel(
                self.0,
                kernel,
                1,
                ptr::null(),
                &items,
                ptr::null(),
                wait.len() as u32,
                if wait.is_empty() {
                    ptr::null()
                } else {
                    wait.as_ptr()
                },
            )
        }
        .map_err(cl_err("clEnqueueNDRangeKernel"))
    }
}

impl Drop for RawQueue {
    fn drop(&mut self) {
        // SAFETY: the queue came from `raw_queue` and is released once, here.
        if let Err(s) = unsafe { clq::release_command_queue(self.0) } {
            log::error!("clReleaseCommandQueue failed: {}", cl_lifetime::ClStatus(s));
        }
    }
}

/// A raw buffer of the context, released on drop.
struct RawMem(cl_mem);

impl RawMem {
    /// `bytes` bytes holding `pattern` over and over, filled on `queue` (waited for).
    fn filled<P: Copy>(
        ctx: &Context,
        queue: &RawQueue,
        bytes: usize,
        pattern: P,
    ) -> anyhow::Result<RawMem> {
        // SAFETY: no host pointer is given, so OpenCL reads no host memory.
        let mem =
            unsafe { clm::create_buffer(ctx.as_raw(), CL_MEM_READ_WRITE, bytes, ptr::null_mut()) }
                .map_err(cl_err("clCreateBuffer"))?;
        let mem = RawMem(mem);
        // SAFETY: the buffer is live and `bytes` long, a multiple of the pattern's size
        // (the callers' sizes); the pattern is read before the call returns.
        let filled = unsafe {
            clq::enqueue_fill_buffer(
                queue.0,
                mem.0,
                ptr::from_ref(&pattern).cast(),
                size_of::<P>(),
                0,
                bytes,
                0,
                ptr::null(),
            )
        }
        .map_err(cl_err("clEnqueueFillBuffer"))?;
        release_event(filled)?;
        queue.finish()?;
        Ok(mem)
    }
}

impl Drop for RawMem {
    fn drop(&mut self) {
        // SAFETY: the buffer came from `clCreateBuffer` and is released once, here, after
        // the loop's last `clFinish`.
        if let Err(s) = unsafe { clm::release_mem_object(self.0) } {
            log::error!("clReleaseMemObject failed: {}", cl_lifetime::ClStatus(s));
        }
    }
}

/// `clSVMAlloc` of a list of `nodes` nodes, mapped for writing on `maps` (blocking),
/// written by `write`, and unmapped: the list's address and the unmap's event.
fn raw_list(
    ctx: &Context,
    maps: &RawQueue,
    nodes: usize,
    write: impl FnOnce(&mut [u64], u64),
) -> anyhow::Result<(*mut c_void, cl_event)> {
    let bytes = nodes * NODE_BYTES;
    // SAFETY: a live context, whose device reports coarse-grained SVM (checked by `main`
    // or by the child's first `clSVMAlloc` failing).
    let list = unsafe { clm::svm_alloc(ctx.as_raw(), CL_MEM_READ_WRITE, bytes, 0) }
        .map_err(cl_err("clSVMAlloc"))?;
    // SAFETY: `list` is a live SVM allocation of `bytes` bytes; the map is blocking, so the
    // host may touch the memory once it returns.
    let mapped = unsafe {
        clq::enqueue_svm_map(
            maps.0,
            CL_BLOCKING,
            CL_MAP_WRITE,
            list,
            bytes,
            0,
            ptr::null(),
        )
    }
    .map_err(cl_err("clEnqueueSVMMap"))?;
    release_event(mapped)?;
    {
        // SAFETY: the allocation is `bytes` = 2 `nodes` u64 long, aligned for them (SVM
        // allocations are aligned to the largest OpenCL type), mapped for writing (the map
        // above has ended), and no other reference to it exists until the unmap below.
        let slice = unsafe { std::slice::from_raw_parts_mut(list.cast::<u64>(), 2 * nodes) };
        write(slice, list as u64);
    }
    // SAFETY: `list` was mapped on this queue above and the host is done with it.
    let unmapped = unsafe { clq::enqueue_svm_unmap(maps.0, list, 0, ptr::null()) }
        .map_err(cl_err("clEnqueueSVMUnmap"))?;
    maps.flush()?;
    Ok((list, unmapped))
}

/// Rows 1, 2 and 5: raw `opencl3` on the library context's device, the list freed as
/// `free` says. Returns the time, the wrong elements of OUT, and in how many steps the
/// walk had not ended when `clSVMFree` returned.
fn raw_loop(
    ctx: &Context,
    kit: &RawKit,
    iters: u32,
    free: RawFree,
) -> anyhow::Result<(Duration, usize, usize)> {
    let (walks, maps, others) = (
        RawQueue::new(ctx)?,
        RawQueue::new(ctx)?,
        RawQueue::new(ctx)?,
    );
    let out = RawMem::filled(ctx, &walks, ITEMS * size_of::<u64>(), 0u64)?;
    let other = RawMem::filled(ctx, &others, SPIN_ITEMS * size_of::<f32>(), 1.0f32)?;
    let (walk, spin) = (kit.walk.get(), kit.spin.get());
    // SAFETY: `walk(__global const ulong *list, __global ulong *out, const uint hops)` and
    // `spin(__global float *data, const uint iters)` get live buffers and u32s; this thread
    // alone sets these kernels' arguments.
    unsafe {
        set_arg(walk, 1, &out.0)?;
        set_arg(walk, 2, &HOPS)?;
        set_arg(spin, 0, &other.0)?;
        set_arg(spin, 1, &1u32)?;
    }
    // Warm-up (PoCL compiles at the first enqueue): a list of ITEMS zeroed nodes, each
    // walk stops at its first node and adds 0.
    let (warm, unmapped) = raw_list(ctx, &maps, ITEMS, |nodes, _| nodes.fill(0))?;
    // SAFETY: `warm` is a live SVM allocation, holding the ITEMS nodes the walks start at
    // and ending their walks (next = 0); it is freed after the `clFinish` below.
    let walked = unsafe {
        clk::set_kernel_arg_svm_pointer(walk, 0, warm)
            .map_err(cl_err("clSetKernelArgSVMPointer"))?;
        walks.launch(walk, ITEMS, &[unmapped])?
    };
    // SAFETY: `spin` covers the SPIN_ITEMS floats of `other`, which outlives the loop.
    let spun = unsafe { others.launch(spin, SPIN_ITEMS, &[])? };
    walks.finish()?;
    others.finish()?;
    for e in [unmapped, walked, spun] {
        release_event(e)?;
    }
    // SAFETY: the one command that used `warm` has ended (`clFinish` above).
    unsafe { clm::svm_free(ctx.as_raw(), warm) }.map_err(cl_err("clSVMFree"))?;
    // SAFETY: as the arguments above.
    unsafe { set_arg(spin, 1, &iters)? };

    let mut lists = Lists::new();
    let mut pending_at_free = 0;
    let start = Instant::now();
    for step in 0..STEPS {
        let (list, unmapped) = raw_list(ctx, &maps, NODES, |nodes, base| {
            lists.build(nodes, base, step)
        })?;
        // SAFETY: rows 1 and 2: `list` is a live SVM allocation of NODES nodes whose
        // pointers stay inside it, and it stays allocated until the walk has ended: the
        // `clFinish` or `clWaitForEvents` below comes before its `clSVMFree`. The walk
        // waits for the unmap (its wait list). Row 5 (`RawFree::Trap`) breaks this on
        // purpose, the bug being demonstrated: see the free below.
        let walked = unsafe {
            clk::set_kernel_arg_svm_pointer(walk, 0, list)
                .map_err(cl_err("clSetKernelArgSVMPointer"))?;
            walks.launch(walk, ITEMS, &[unmapped])?
        };
        release_event(unmapped)?;
        // SAFETY: `spin` covers the SPIN_ITEMS floats of `other`, which outlives the loop.
        let spun = unsafe { others.launch(spin, SPIN_ITEMS, &[])? };
        release_event(spun)?;
        walks.flush()?;
        others.flush()?;
        match free {
            RawFree::Finish => {
                walks.finish()?;
                others.finish()?;
            }
            RawFree::Event => cle::wait_for_events(&[walked]).map_err(cl_err("clWaitForEvents"))?,
            RawFree::Trap => {}
        }
        // SAFETY: rows 1 and 2: the walk, the one command that reads the list, has ended
        // (waited for just above). Row 5: it has NOT: the walk may still be queued or
        // running, and this frees its memory under it. That is the bug this example
        // demonstrates, which is why row 5 runs in a child process of its own.
        unsafe { clm::svm_free(ctx.as_raw(), list) }.map_err(cl_err("clSVMFree"))?;
        // Whether the driver's clSVMFree returned while the walk had not ended: the
        // specification allows it (the caller must wait), so this counts what it did.
        let status = cle::get_event_info(walked, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
            .map_err(cl_err("clGetEventInfo"))?;
        if i32::from(status) > 0 {
            pending_at_free += 1;
        }
        release_event(walked)?;
    }
    walks.finish()?;
    others.finish()?;
    let took = start.elapsed();

    let mut got = vec![0u64; ITEMS];
    // SAFETY: `got` holds ITEMS u64, OUT's size; the read is blocking.
    let read = unsafe {
        clq::enqueue_read_buffer(
            walks.0,
            out.0,
            CL_BLOCKING,
            0,
            size_of_val(got.as_slice()),
            got.as_mut_ptr().cast(),
            0,
            ptr::null(),
        )
    }
    .map_err(cl_err("clEnqueueReadBuffer"))?;
    release_event(read)?;
    Ok((took, lists.wrong(&got), pending_at_free))
}

/// Rows 3 and 4: cl-lifetime, on a context of its own (for its own peak).
fn lib_loop(device: &Device, iters: u32, deferred: bool) -> anyhow::Result<Row> {
    let ctx = Context::new(device)?;
    let (walks, maps, others) = (ctx.queue()?, ctx.queue()?, ctx.queue()?);
    let walk = ctx
        .program_from_source("svm_linked_list", WALK, "")?
        .kernel("walk")?;
    let spin = ctx.program("busy.cl", "")?.kernel("spin")?;
    let out = ctx.buffer::<u64>(ITEMS)?;
    let other = ctx.buffer::<f32>(SPIN_ITEMS)?;
    others.fill(&other, 1.0)?;
    // Warm-up, as in the raw loop.
    let warm = ctx.svm::<u64>(2 * ITEMS, SvmKind::Coarse)?;
    maps.fill_svm(&warm, 0)?;
    // SAFETY: walk i starts at node i < ITEMS of warm's 2 * ITEMS elements, all of whose next
    // addresses are 0, and touches out[i] of ITEMS; it writes only out.
    unsafe {
        walks.launch(
            &walk,
            &[ITEMS],
            &[Arg::read(&warm), Arg::read_write(&out), Arg::scalar(HOPS)],
        )
    }?;
    // SAFETY: spin touches other[i], i < SPIN_ITEMS, other's length.
    unsafe {
        others.launch(
            &spin,
            &[SPIN_ITEMS],
            &[Arg::read_write(&other), Arg::scalar(1u32)],
        )
    }?;
    warm.release()?;
    others.finish()?;

    let mut lists = Lists::new();
    let start = Instant::now();
    for step in 0..STEPS {
        // The host writes every node before the walk reads any: no zero fill first.
        let list = ctx.svm_uninitialized::<u64>(2 * NODES, SvmKind::Coarse)?;
        let base = list.as_ptr() as u64;
        let mut nodes = maps.map_svm_mut(&list, 0..2 * NODES)?;
        lists.build(&mut nodes, base, step);
        drop(nodes); // unmapped: the walk waits for it
        // SAFETY: walk i starts at node i < ITEMS of the list's NODES and follows next addresses
        // that are nodes of the same list (Lists::build) or 0; it touches out[i] of ITEMS and
        // writes only out.
        unsafe {
            walks.launch(
                &walk,
                &[ITEMS],
                &[Arg::read(&list), Arg::read_write(&out), Arg::scalar(HOPS)],
            )
        }?;
        // SAFETY: spin touches other[i], i < SPIN_ITEMS, other's length.
        unsafe {
            others.launch(
                &spin,
                &[SPIN_ITEMS],
                &[Arg::read_write(&other), Arg::scalar(iters)],
            )
        }?;
        maps.flush()?;
        walks.flush()?;
        others.flush()?;
        if deferred {
            list.release_deferred();
        } else {
            list.release()?;
        }
    }
    walks.finish()?;
    others.finish()?;
    ctx.wait_deferred();
    let took = start.elapsed();

    let got = walks.read_owned(&out)?.wait()?;
    Ok(Row {
        approach: if deferred {
            "cl-lifetime: list.release_deferred()"
        } else {
            "cl-lifetime: list.release()"
        },
        took,
        wrong: lists.wrong(&got),
        peak: Some(ctx.memory_stats().peak_bytes),
    })
}

/// Row 5's figures, from the child process.
struct Trap {
    /// Its time, when it finished.
    took: Option<Duration>,
    /// Its wrong elements, or how it ended.
    outcome: String,
    /// Its exit status, in words.
    status: String,
}

/// Row 5 in a child process: this program with `--row trap ITERS`, with the environment
/// this program started with (`common::this_program_again`).
fn trap_row(iters: u32) -> anyhow::Result<Trap> {
    let mut child = common::this_program_again()?
        .args([TRAP_ARG, "trap", &iters.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let status: Option<ExitStatus> = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut printed = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut printed)?;
    }
    let figures = printed.lines().find_map(|line| {
        let mut words = line.strip_prefix(TRAP_TAG)?.split_whitespace();
        let secs: f64 = words.next()?.parse().ok()?;
        let wrong: usize = words.next()?.parse().ok()?;
        let pending: usize = words.next()?.parse().ok()?;
        Some((Duration::from_secs_f64(secs), wrong, pending))
    });
    Ok(match (status, figures) {
        (None, _) => Trap {
            took: None,
            outcome: "killed after 300 s".to_string(),
            status: "killed after 300 s (did not end)".to_string(),
        },
        (Some(status), Some((took, wrong, pending))) if status.success() => Trap {
            took: Some(took),
            outcome: format!("{wrong} of {ITEMS}"),
            status: format!(
                "exited with {status}, {wrong} of {ITEMS} sums wrong; the walk had not ended \
                 when clSVMFree returned in {pending} of {STEPS} steps (0: the driver's \
                 clSVMFree waited for it, which the specification does not promise)"
            ),
        },
        (Some(status), _) => Trap {
            took: None,
            outcome: format!("crashed ({status})"),
            status: format!("ended with {status}"),
        },
    })
}

/// The child's side of row 5: the trap loop alone, its figures on one line.
fn trap_child(iters: u32) -> anyhow::Result<()> {
    env_logger::init();
    let ctx = Context::from_env()?;
    let kit = RawKit::new(&ctx)?;
    let (took, wrong, pending) = raw_loop(&ctx, &kit, iters, RawFree::Trap)
        .map_err(|e| anyhow!("the trap loop failed: {e}"))?;
    println!("{TRAP_TAG} {} {wrong} {pending}", took.as_secs_f64());
    Ok(())
}
