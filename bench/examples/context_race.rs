//! Does `clCreateContext` fail while other threads of the process use OpenCL? Raw calls
//! only. Each phase runs creators (threads that create and release a context of the
//! device in a loop) beside one kind of other work, and counts the creations that failed,
//! by status.
//!
//! ```text
//! cargo run --release -p cl-lifetime-bench --example context_race -- [creations per thread]
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use cl_lifetime::{ClStatus, Context};
use opencl3::types::{cl_context, cl_device_id};

#[derive(Clone, Copy)]
struct Send_<T>(T);
// SAFETY: OpenCL handles may be used from any thread (OpenCL 3.0 appendix A.2); the main
// thread keeps them alive until the threads are joined.
unsafe impl<T> Send for Send_<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Send_<T> {}

const CREATORS: usize = 8;
const OTHERS: usize = 4;

fn main() -> anyhow::Result<()> {
    let per_thread: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let ctx = Context::from_env()?;
    harness::print_device(&ctx);
    let device = Send_(ctx.device().as_raw());
    let shared = Send_(ctx.as_raw());
    for phase in ["alone", "svm", "buffers", "contexts", "svm-contexts"] {
        let failures: Arc<Mutex<BTreeMap<i32, usize>>> = Arc::default();
        let other_failures: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let others: Vec<_> = (0..if phase == "alone" { 0 } else { OTHERS })
            .map(|_| {
                let (stop, other_failures) = (stop.clone(), other_failures.clone());
                thread::spawn(move || other_work(phase, device, shared, &stop, &other_failures))
            })
            .collect();
        let creators: Vec<_> = (0..CREATORS)
            .map(|_| {
                let failures = failures.clone();
                thread::spawn(move || {
                    let device = device;
                    for _ in 0..per_thread {
                        match create(device.0) {
                            Ok(c) => release(c),
                            Err(s) => {
                                *failures
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .entry(s)
                                    .or_default() += 1
                            }
                        }
                    }
                })
            })
            .collect();
        for c in creators {
            let _ = c.join();
        }
        stop.store(true, Ordering::Release);
        for o in others {
            let _ = o.join();
        }
        let failed: Vec<String> = failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(s, n)| format!("{n} x {}", ClStatus(*s)))
            .collect();
        println!(
            "{phase:<9} {} creations in {:.1} s: {} failed [{}]; other work's failures: {:?}",
            CREATORS * per_thread,
            start.elapsed().as_secs_f64(),
            failures
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .sum::<usize>(),
            failed.join(", "),
            other_failures
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        );
    }
    Ok(())
}

fn create(device: cl_device_id) -> Result<cl_context, i32> {
    opencl3::context::context::create_context(
        &[device],
        std::ptr::null(),
        None,
        std::ptr::null_mut(),
    )
}

fn release(context: cl_context) {
    // SAFETY: `context` came from clCreateContext on this thread and is released once.
    let _ = unsafe { opencl3::context::context::release_context(context) };
}

fn other_work(
    phase: &str,
    device: Send_<cl_device_id>,
    shared: Send_<cl_context>,
    stop: &AtomicBool,
    failures: &Mutex<BTreeMap<String, usize>>,
) {
    let fail = |what: &str| {
        *failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(what.to_string())
            .or_default() += 1
    };
    while !stop.load(Ordering::Acquire) {
        match phase {
            "svm" => {
                // SAFETY: a coarse-grained allocation of 4 KiB in a live context, freed
                // once, unused in between.
                unsafe {
                    match opencl3::memory::svm_alloc(
                        shared.0,
                        opencl3::memory::CL_MEM_READ_WRITE,
                        4096,
                        0,
                    ) {
                        Ok(p) => {
                            let _ = opencl3::memory::svm_free(shared.0, p);
                        }
                        Err(_) => fail("clSVMAlloc"),
                    }
                }
            }
            "buffers" => {
                // SAFETY: a buffer of 4 KiB in a live context, released once, unused.
                unsafe {
                    match opencl3::memory::create_buffer(
                        shared.0,
                        opencl3::memory::CL_MEM_READ_WRITE,
                        4096,
                        std::ptr::null_mut(),
                    ) {
                        Ok(m) => {
                            let _ = opencl3::memory::release_mem_object(m);
                        }
                        Err(_) => fail("clCreateBuffer"),
                    }
                }
            }
            "svm-contexts" => match create(device.0) {
                Ok(c) => {
                    // SAFETY: an allocation of 4 KiB in the new context, freed before it.
                    unsafe {
                        match opencl3::memory::svm_alloc(
                            c,
                            opencl3::memory::CL_MEM_READ_WRITE,
                            4096,
                            0,
                        ) {
                            Ok(p) => {
                                let _ = opencl3::memory::svm_free(c, p);
                            }
                            Err(_) => fail("clSVMAlloc"),
                        }
                    }
                    release(c);
                }
                Err(_) => fail("clCreateContext (other)"),
            },
            _ => match create(device.0) {
                Ok(c) => {
                    // SAFETY: a buffer of 4 KiB in the new context, released before it.
                    unsafe {
                        if let Ok(m) = opencl3::memory::create_buffer(
                            c,
                            opencl3::memory::CL_MEM_READ_WRITE,
                            4096,
                            std::ptr::null_mut(),
                        ) {
                            let _ = opencl3::memory::release_mem_object(m);
                        }
                    }
                    release(c);
                }
                Err(_) => fail("clCreateContext (other)"),
            },
        }
    }
}
