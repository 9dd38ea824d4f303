//! A small async service: each request runs a kernel on a shared queue and awaits its
//! result, on tokio, against the same service written with `spawn_blocking` around the
//! blocking calls.
//!
//! A request is 16,384 floats and a factor; the response is the floats scaled by the
//! factor, computed by a kernel (`scale`, inline below). 32 clients each send their
//! requests one after another; every response is checked against the host's own product.
//! Both services share one context and one in-order queue, and use a tokio runtime with 2
//! worker threads:
//!
//! - **async**: the handler enqueues a write, the kernel and a read on the shared queue,
//!   then `.await`s the read ([`PendingRead`](cl_lifetime::PendingRead) is a future) and
//!   the release of the two buffers (`release_async`), so a worker thread never blocks on
//!   the device;
//! - **spawn_blocking**: the same calls, with `wait()` and `release()`, inside
//!   `tokio::task::spawn_blocking`, which is what a user writes without async support.
//!
//! Reported: requests per second of each, median of interleaved repetitions, and their
//! ratio.
//!
//! ```text
//! cargo run --release --example async_service
//! cargo run --release --example async_service -- --quick
//! ```
//!
//! `CL_LIFETIME_DEVICE` picks the device (`P:D` or part of a platform or device name).

use std::sync::Arc;
use std::time::Instant;

use cl_lifetime::{Arg, ClBuffer, Context, Kernel, PendingRead, Queue};

const SOURCE: &str = "
__kernel void scale(__global const float *in, __global float *out, const float factor,
                    const uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        out[i] = in[i] * factor;
    }
}
";

const ITEMS: usize = 16_384;
const CLIENTS: usize = 32;

/// What every handler shares.
struct Service {
    ctx: Context,
    queue: Queue,
    scale: Kernel,
}

/// A request: its input, deterministic from its number, and its factor.
fn request(number: usize) -> (Vec<f32>, f32) {
    let input = (0..ITEMS)
        .map(|i| ((i * 7 + number * 13) % 1000) as f32 * 0.5)
        .collect();
    (input, 1.0 + (number % 5) as f32)
}

fn check(number: usize, input: &[f32], factor: f32, output: &[f32]) -> Result<(), String> {
    match input.iter().zip(output).position(|(x, y)| x * factor != *y) {
        None if output.len() == input.len() => Ok(()),
        None => Err(format!("request {number}: {} results", output.len())),
        Some(i) => Err(format!(
            "request {number}: element {i} is {}, not {}",
            output[i],
            input[i] * factor
        )),
    }
}

/// One request's commands, enqueued: its input and factor, its two buffers and the
/// pending read of the result. Neither handler blocks here; they differ in how they wait.
struct Enqueued {
    input: Vec<f32>,
    factor: f32,
    a: ClBuffer<f32>,
    b: ClBuffer<f32>,
    read: PendingRead<f32>,
}

fn text(e: cl_lifetime::Error) -> String {
    e.to_string()
}

impl Service {
    /// Writes request `number`'s input, launches the kernel and reads the result back,
    /// without blocking.
    fn enqueue(&self, number: usize) -> Result<Enqueued, String> {
        let (input, factor) = request(number);
        let a = self.ctx.buffer_uninitialized::<f32>(ITEMS).map_err(text)?;
        let b = self.ctx.buffer_uninitialized::<f32>(ITEMS).map_err(text)?;
        self.queue.write_owned(&a, input.clone()).map_err(text)?;
        // SAFETY: scale touches a[i] and b[i] only where i < ITEMS, their length, and writes only
        // b.
        unsafe {
            self.queue.launch(
                &self.scale,
                &[ITEMS],
                &[
                    Arg::read(&a),
                    Arg::write(&b),
                    Arg::scalar(factor),
                    Arg::scalar(ITEMS as u32),
                ],
            )
        }
        .map_err(text)?;
        let read = self.queue.read_owned(&b).map_err(text)?;
        Ok(Enqueued {
            input,
            factor,
            a,
            b,
            read,
        })
    }

    /// The async handler: nothing in it blocks a worker thread on the device.
    async fn handle(&self, number: usize) -> Result<(), String> {
        let Enqueued {
            input,
            factor,
            a,
            b,
            read,
        } = self.enqueue(number)?;
        let output = read.await.map_err(text)?;
        a.release_async().await.map_err(text)?;
        b.release_async().await.map_err(text)?;
        check(number, &input, factor, &output)
    }

    /// The blocking handler, for `spawn_blocking`.
    fn handle_blocking(&self, number: usize) -> Result<(), String> {
        let Enqueued {
            input,
            factor,
            a,
            b,
            read,
        } = self.enqueue(number)?;
        let output = read.wait().map_err(text)?;
        a.release().map_err(text)?;
        b.release().map_err(text)?;
        check(number, &input, factor, &output)
    }
}

/// Requests per second of `requests` requests from [`CLIENTS`] clients, each awaiting its
/// response before sending the next.
fn run(
    runtime: &tokio::runtime::Runtime,
    service: &Arc<Service>,
    requests: usize,
    blocking: bool,
) -> Result<f64, String> {
    let start = Instant::now();
    runtime.block_on(async {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let service = service.clone();
                tokio::spawn(async move {
                    for number in (client..requests).step_by(CLIENTS) {
                        if blocking {
                            let service = service.clone();
                            tokio::task::spawn_blocking(move || service.handle_blocking(number))
                                .await
                                .map_err(|e| e.to_string())??;
                        } else {
                            service.handle(number).await?;
                        }
                    }
                    Ok::<_, String>(())
                })
            })
            .collect();
        for client in clients {
            client.await.map_err(|e| e.to_string())??;
        }
        Ok::<_, String>(())
    })?;
    Ok(requests as f64 / start.elapsed().as_secs_f64())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let quick = std::env::args().any(|a| a == "--quick");
    let (requests, reps) = if quick { (640, 3) } else { (3200, 5) };
    let ctx = Context::from_env()?;
    let device = ctx.device();
    println!("device:   {} ({})", device.name(), device.version());
    println!("platform: {}", device.platform_name());
    let scale = ctx
        .program_from_source("async_service.cl", SOURCE, "")?
        .kernel("scale")?;
    let queue = ctx.queue()?;
    let service = Arc::new(Service { ctx, queue, scale });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // Warm-up: the kernel's first launches, the threads.
    run(&runtime, &service, CLIENTS * 2, false)?;
    run(&runtime, &service, CLIENTS * 2, true)?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        // The order reverses every repetition, so drift falls on both alike.
        for blocking in if rep % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            let rate = run(&runtime, &service, requests, blocking)?;
            if blocking {
                theirs.push(rate);
            } else {
                ours.push(rate);
            }
        }
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "{requests} requests of {ITEMS} floats from {CLIENTS} clients, every response checked, \
         median of {reps} interleaved repetitions:"
    );
    println!("  async (awaits the read and the releases)  {ours:>9.0} requests/s");
    println!("  spawn_blocking around wait() / release()  {theirs:>9.0} requests/s");
    println!("  async / spawn_blocking: {:.2}x", ours / theirs);
    Ok(())
}
