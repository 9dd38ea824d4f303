//! Reproduces, with raw OpenCL calls only, the pattern of an arena's carves and views that
//! crashes NVIDIA's driver under the library (design trap "overlapping sub-buffers on
//! NVIDIA", the paragraph on carves), so that it can be told apart from anything the library
//! does. The library only picks the device and finds the kernel file.
//!
//! ```text
//! CL_LIFETIME_DEVICE=nvidia cargo run --release --example nvidia_carve_views [STEPS]
//! ```
//!
//! One buffer of 32 alignment units (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`) plays the arena. A
//! random program of `STEPS` steps (default 3,000; a seed per run, printed) on one in-order
//! queue, every command waited for before the next: *carve* a sub-buffer of 1 to 3 units at
//! the next free unit (back to unit 0 once the arena is full and no carve is live) and fill
//! it with zeros, as the library zeroes a carve before its first read; *use a view* of a live
//! carve: a sub-buffer of the arena's buffer over some of the carve's units (kept per range,
//! as the library keeps a view's sub-buffer), given to a command; *release* a live carve:
//! its views' sub-buffers newest first, then the carve. At most 6 carves live at once. All of
//! it is valid OpenCL: sub-buffers may overlap, and every command on one has ended before its
//! release.
//!
//! Each case runs in a child process (this program again), so that a crash is reported and
//! the other cases still run: the view used by `add_const` (a kernel), by a fill (no
//! kernel), and no views (`add_const` on the carves themselves). Where nothing crashes this
//! prints `ok` for each. On an H200 (driver 580) both cases with views die of SIGSEGV within
//! about 300 steps, and the one without never does. `NVIDIA_CARVE_VARIANT` changes one thing
//! (see `variant`); with `keep-all-reused`, the library's *shelved, never released* rule,
//! nothing crashed (0 of 120 runs).

use std::ptr;

use cl_lifetime::Context;
use opencl3::command_queue as clq;
use opencl3::memory::{self as clm, CL_MEM_READ_WRITE};
use opencl3::types::{cl_buffer_region, cl_command_queue, cl_mem};

mod common;
use common::{ProgramHandle, add_const_and_wait, cl_err, print_device, raw_queue, release_event};

/// How a case uses a carve's views.
#[derive(Clone, Copy, PartialEq)]
enum Views {
    /// Views given to `add_const`: the library's pattern.
    Kernel,
    /// Views filled, never given to a kernel.
    Fill,
    /// No views: `add_const` runs on the carve itself.
    None,
}

const CASES: [(&str, Views); 3] = [
    ("carves, views given to a kernel, releases", Views::Kernel),
    ("carves, views filled (no kernel), releases", Views::Fill),
    ("carves given to a kernel (no views), releases", Views::None),
];

/// Units of the arena.
const UNITS: usize = 32;

/// A live carve: its sub-buffer, first unit and units, and its views' sub-buffers by range
/// of units within it, oldest first.
struct Carve {
    mem: cl_mem,
    at: usize,
    units: usize,
    views: Vec<((usize, usize), cl_mem)>,
}

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if let Some(case) = first.as_deref().and_then(|a| a.strip_prefix("case=")) {
        let steps = args.next().map_or(Ok(3000), |s| s.parse())?;
        let seed = args.next().map_or(Ok(1), |s| s.parse())?;
        return run(CASES[case.parse::<usize>()?].1, steps, seed);
    }
    let steps: usize = first.map_or(Ok(3000), |s| s.parse())?;
    let ctx = Context::from_env()?;
    print_device(&ctx);
    for (i, (name, _)) in CASES.iter().enumerate() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64
            | 1;
        let out = common::this_program_again()?
            .args([format!("case={i}"), steps.to_string(), seed.to_string()])
            .output()?;
        let said = String::from_utf8_lossy(&out.stdout);
        let last = said.lines().last().unwrap_or("");
        let error = String::from_utf8_lossy(&out.stderr);
        let error = error.lines().find(|l| l.starts_with("Error")).unwrap_or("");
        match out.status.code() {
            Some(0) => println!("{name}: ok ({last})"),
            _ => println!(
                "{name}: died ({}) at {last} (seed {seed}) {error}",
                out.status
            ),
        }
    }
    Ok(())
}

/// What the program releases, and where it carves (`NVIDIA_CARVE_VARIANT`): the pattern
/// above by default; `fresh`: an arena so large that no carve is ever made over bytes an
/// earlier one had; `keep-carves`: a carve's views are released at its release, the carve
/// itself only at the end; `kept-reused`: as `keep-carves`, and a carve of a kept one's
/// region takes it again; `keep-viewed`: as `keep-carves` for carves that had views, the
/// others released; `keep-views`: the carve is released, its views only at the
/// end; `keep-all`: nothing is released before the end (then newest first); `no-carve`:
/// a carve is a range with no sub-buffer of its own, only its views have one;
/// `unit-views`: every view is one unit (views of a carve never overlap each other);
/// `whole-views`: every view is its whole carve (the same region as the carve);
/// `keep-all-reused`: as `keep-all`, and a carve or view of a region a kept sub-buffer has
/// takes that one (so the arena's sub-buffers are bounded by the distinct regions used); at
/// the end all go newest made first.
fn variant() -> String {
    std::env::var("NVIDIA_CARVE_VARIANT").unwrap_or_default()
}

fn run(views: Views, steps: usize, seed: u64) -> anyhow::Result<()> {
    let variant = variant();
    let units_total = if variant == "fresh" { 16 * 1024 } else { UNITS };
    let mut kept: Vec<cl_mem> = Vec::new();
    // `kept-reused`: released carves by region, taken again by a carve of the same one.
    let mut kept_carves: Vec<((usize, usize), cl_mem)> = Vec::new();
    let ctx = Context::from_env()?;
    let unit = ctx.device().base_addr_align_bytes().max(64) as usize;
    let device = ctx.device().as_raw();
    let source = std::fs::read_to_string(ctx.program("schedule.cl", "")?.file())?;
    let program = ProgramHandle::build(ctx.as_raw(), device, &source)?;
    let add = program.kernel("add_const")?;
    let queue = raw_queue(&ctx, 0)?;
    // SAFETY: no host pointer.
    let arena = unsafe {
        clm::create_buffer(
            ctx.as_raw(),
            CL_MEM_READ_WRITE,
            units_total * unit,
            ptr::null_mut(),
        )
    }
    .map_err(cl_err("clCreateBuffer"))?;
    // Every sub-buffer made, oldest first (`keep-all-reused` releases them newest first).
    let created = std::cell::RefCell::new(Vec::new());
    let sub = |at: usize, units: usize| -> anyhow::Result<cl_mem> {
        let region = cl_buffer_region {
            origin: at * unit,
            size: units * unit,
        };
        // SAFETY: `arena` is live; `region` outlives the call; the driver checks it.
        unsafe {
            clm::create_sub_buffer(
                arena,
                CL_MEM_READ_WRITE,
                clm::CL_BUFFER_CREATE_TYPE_REGION,
                ptr::from_ref(&region).cast(),
            )
        }
        .map_err(cl_err("clCreateSubBuffer"))
        .inspect(|&mem| created.borrow_mut().push(mem))
    };
    // `keep-all-reused`: every released sub-buffer by its region (units of the arena), taken
    // again by the next carve or view of that region.
    let mut regions: Vec<((usize, usize), cl_mem)> = Vec::new();
    let take_or_sub = |regions: &mut Vec<((usize, usize), cl_mem)>,
                       at: usize,
                       units: usize|
     -> anyhow::Result<cl_mem> {
        match regions.iter().position(|k| k.0 == (at, units)) {
            Some(k) => Ok(regions.swap_remove(k).1),
            None => sub(at, units),
        }
    };
    let mut rng = Rng(seed);
    let mut live: Vec<Carve> = Vec::new();
    let mut next = 0;
    for step in 0..steps {
        // Printed before the step: a crash's last line names it.
        println!("step {step}");
        match rng.below(3) {
            0 if live.len() < 6 => {
                let units = 1 + rng.below(3);
                if next + units > units_total {
                    if !live.is_empty() {
                        continue;
                    }
                    next = 0;
                }
                let reused = (variant == "kept-reused")
                    .then(|| kept_carves.iter().position(|k| k.0 == (next, units)))
                    .flatten();
                let mem = if variant == "no-carve" {
                    ptr::null_mut()
                } else if let Some(k) = reused {
                    let mem = kept_carves.swap_remove(k).1;
                    fill(queue, mem, units * unit)?;
                    mem
                } else {
                    let mem = take_or_sub(&mut regions, next, units)?;
                    fill(queue, mem, units * unit)?;
                    mem
                };
                live.push(Carve {
                    mem,
                    at: next,
                    units,
                    views: Vec::new(),
                });
                next += units;
            }
            1 if !live.is_empty() => {
                let k = rng.below(live.len());
                let carve = &mut live[k];
                let mut start = rng.below(carve.units);
                let mut end = start + 1 + rng.below(carve.units - start);
                if variant == "unit-views" {
                    end = start + 1;
                } else if variant == "whole-views" {
                    (start, end) = (0, carve.units);
                }
                let mem = match views {
                    Views::None if carve.mem.is_null() => continue,
                    Views::None => carve.mem,
                    _ => match carve.views.iter().find(|(r, _)| *r == (start, end)) {
                        Some((_, mem)) => *mem,
                        None => {
                            let mem = take_or_sub(&mut regions, carve.at + start, end - start)?;
                            carve.views.push(((start, end), mem));
                            mem
                        }
                    },
                };
                let bytes = match views {
                    Views::None => carve.units * unit,
                    _ => (end - start) * unit,
                };
                if views == Views::Fill {
                    fill(queue, mem, bytes)?;
                } else {
                    let n = (bytes / size_of::<i32>()) as u32;
                    // SAFETY: `add` is `add_const`, used by this thread only; `mem` holds
                    // `bytes`, `n` ints.
                    unsafe { add_const_and_wait(queue, add.get(), mem, 1, n) }?;
                }
            }
            2 if !live.is_empty() => {
                let carve = live.swap_remove(rng.below(live.len()));
                let viewed = !carve.views.is_empty();
                if variant == "keep-all-reused" {
                    for ((start, end), mem) in carve.views.into_iter().rev() {
                        regions.push(((carve.at + start, end - start), mem));
                    }
                    if !carve.mem.is_null() {
                        regions.push(((carve.at, carve.units), carve.mem));
                    }
                    continue;
                }
                for (_, mem) in carve.views.into_iter().rev() {
                    if variant == "keep-views" || variant == "keep-all" {
                        kept.push(mem);
                        continue;
                    }
                    // SAFETY: the one reference this code holds; every command on it has
                    // ended (each was waited for).
                    unsafe { clm::release_mem_object(mem) }
                        .map_err(cl_err("clReleaseMemObject"))?;
                }
                if carve.mem.is_null() {
                } else if variant == "keep-viewed" && viewed {
                    kept.push(carve.mem);
                } else if variant == "kept-reused" {
                    kept_carves.push(((carve.at, carve.units), carve.mem));
                } else if variant == "keep-carves" || variant == "keep-all" {
                    kept.push(carve.mem);
                } else {
                    // SAFETY: as above; its views' sub-buffers went first.
                    unsafe { clm::release_mem_object(carve.mem) }
                        .map_err(cl_err("clReleaseMemObject"))?;
                }
            }
            _ => {}
        }
    }
    if variant == "keep-all-reused" {
        // None was released: all of them, newest made first (the *newest first* rule).
        live.clear();
        regions.clear();
        for &mem in created.borrow().iter().rev() {
            // SAFETY: as in the release step; each is released once, here.
            unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))?;
        }
    }
    for carve in live {
        for (_, mem) in carve.views.into_iter().rev() {
            // SAFETY: as in the release step.
            unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))?;
        }
        if !carve.mem.is_null() {
            // SAFETY: as in the release step.
            unsafe { clm::release_mem_object(carve.mem) }.map_err(cl_err("clReleaseMemObject"))?;
        }
    }
    kept.extend(kept_carves.into_iter().map(|k| k.1));
    kept.extend(regions.into_iter().map(|k| k.1));
    for mem in kept.into_iter().rev() {
        // SAFETY: as in the release step; kept ones go newest first.
        unsafe { clm::release_mem_object(mem) }.map_err(cl_err("clReleaseMemObject"))?;
    }
    // SAFETY: every sub-buffer of it is released; every command on it has ended.
    unsafe { clm::release_mem_object(arena) }.map_err(cl_err("clReleaseMemObject"))?;
    // SAFETY: every command on it has ended; the queue is not used again.
    unsafe { clq::release_command_queue(queue) }.map_err(cl_err("clReleaseCommandQueue"))?;
    println!("{steps} steps");
    Ok(())
}

/// Fills `bytes` of `mem` with zeros and waits.
fn fill(queue: cl_command_queue, mem: cl_mem, bytes: usize) -> anyhow::Result<()> {
    let zero = 0i32;
    // SAFETY: the queue and `mem` are live; the 4-byte pattern is copied before the call
    // returns; `bytes` is within `mem`.
    let event = unsafe {
        clq::enqueue_fill_buffer(
            queue,
            mem,
            (&raw const zero).cast(),
            4,
            0,
            bytes,
            0,
            ptr::null(),
        )
    }
    .map_err(cl_err("clEnqueueFillBuffer"))?;
    opencl3::event::wait_for_events(&[event]).map_err(cl_err("clWaitForEvents"))?;
    release_event(event)
}
