//! Where a wake's time goes, on raw OpenCL: a gated fill's end as seen by a thread blocked
//! in `clWaitForEvents` and, in the same trial, by one other watcher:
//!
//! - `hot`: a thread already reading the fill's status back to back;
//! - `kicked`: a thread asleep on a condition variable, notified just before the gate is set,
//!   that then reads the status back to back (the library's poller after a kick);
//! - `setter`: the thread that set the gate, reading the status back to back after the set.
//!
//! Also: how long `clSetUserEventStatus` takes, how long the kicked thread takes to run,
//! and what one status read costs. The trials of the modes are interleaved.
//!
//! ```text
//! cargo run --release -p cl-lifetime-bench --example wake_parts -- [trials]
//! ```

use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use cl_lifetime::Context;
use harness::{cl_err, print_device, release_event};
use opencl3::event as cle;
use opencl3::types::{cl_event, cl_int};

/// A raw event handed to another thread.
#[derive(Clone, Copy)]
struct SendEvent(cl_event);
// SAFETY: OpenCL event handles may be used from any thread (OpenCL 3.0 appendix A.2); the
// main thread keeps the event alive until every watcher has answered.
unsafe impl Send for SendEvent {}

fn status(event: cl_event) -> cl_int {
    cle::get_event_info(event, cle::CL_EVENT_COMMAND_EXECUTION_STATUS).map_or(-1, |s| s.to_int())
}

/// Reads `event`'s status until it ended: when it was seen, and how many reads it took.
fn read_until_ended(event: cl_event) -> (Instant, u32) {
    let mut reads = 0;
    loop {
        reads += 1;
        if status(event) <= cle::CL_COMPLETE {
            return (Instant::now(), reads);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn row(name: &str, values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(values, 0.5), percentile(values, 0.99));
    println!("   {name:<46} {p50:>9.1} {p99:>9.1}");
    (p50, p99)
}

const MODES: [&str; 3] = ["hot", "kicked", "setter"];

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let trials: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let queue = ctx.queue()?;
    let buf = ctx.buffer::<u32>(64)?;

    let (to_blocked, blocked_gets) = mpsc::channel::<SendEvent>();
    let (blocked_says, from_blocked) = mpsc::channel::<Instant>();
    let blocked = thread::spawn(move || {
        for e in blocked_gets {
            let _ = cle::wait_for_events(&[e.0]);
            let _ = blocked_says.send(Instant::now());
        }
    });
    let (to_hot, hot_gets) = mpsc::channel::<SendEvent>();
    let (hot_says, from_hot) = mpsc::channel::<(Instant, u32)>();
    let hot = thread::spawn(move || {
        for e in hot_gets {
            let _ = hot_says.send(read_until_ended(e.0));
        }
    });
    // The kicked thread: sleeps until handed an event and notified.
    let slot: Arc<(Mutex<Option<Option<SendEvent>>>, Condvar)> = Arc::default();
    let (kicked_says, from_kicked) = mpsc::channel::<(Instant, Instant, u32)>();
    let kicked = {
        let slot = slot.clone();
        thread::spawn(move || {
            loop {
                let mut s = slot.0.lock().unwrap_or_else(|p| p.into_inner());
                let e = loop {
                    if let Some(e) = s.take() {
                        break e;
                    }
                    s = slot.1.wait(s).unwrap_or_else(|p| p.into_inner());
                };
                drop(s);
                let Some(e) = e else { break };
                let awake = Instant::now();
                let (seen, reads) = read_until_ended(e.0);
                let _ = kicked_says.send((awake, seen, reads));
            }
        })
    };

    let mut blocked_us: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut other_us: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let (mut set_us, mut awake_us, mut read_ns) = (Vec::new(), Vec::new(), Vec::new());
    for trial in 0..(trials + 10) * MODES.len() {
        let mode = trial % MODES.len();
        let gate = cle::create_user_event(ctx.as_raw()).map_err(cl_err("clCreateUserEvent"))?;
        let pattern = trial as u32;
        // SAFETY: buf is a live buffer of 64 u32; the pattern is read before the call
        // returns; the wait list holds one live event.
        let fill = unsafe {
            opencl3::command_queue::enqueue_fill_buffer(
                queue.as_raw(),
                buf.as_raw(),
                std::ptr::from_ref(&pattern).cast(),
                4,
                0,
                256,
                1,
                &raw const gate,
            )
        }
        .map_err(cl_err("clEnqueueFillBuffer"))?;
        queue.flush()?;
        // A status read while it is pending.
        let start = Instant::now();
        for _ in 0..100 {
            std::hint::black_box(status(fill));
        }
        read_ns.push(start.elapsed().as_secs_f64() * 1e9 / 100.0);
        to_blocked
            .send(SendEvent(fill))
            .map_err(|_| anyhow!("blocked thread gone"))?;
        if MODES[mode] == "hot" {
            to_hot
                .send(SendEvent(fill))
                .map_err(|_| anyhow!("hot thread gone"))?;
        }
        thread::sleep(Duration::from_millis(2));
        let opened = Instant::now();
        if MODES[mode] == "kicked" {
            *slot.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Some(SendEvent(fill)));
            slot.1.notify_one();
        }
        cle::set_user_event_status(gate, cle::CL_COMPLETE)
            .map_err(cl_err("clSetUserEventStatus"))?;
        let set = opened.elapsed();
        let other = match MODES[mode] {
            "hot" => from_hot.recv()?.0,
            "kicked" => {
                let (awake, seen, _) = from_kicked.recv()?;
                if trial >= 10 * MODES.len() {
                    awake_us.push(awake.duration_since(opened).as_secs_f64() * 1e6);
                }
                seen
            }
            _ => read_until_ended(fill).0,
        };
        let theirs = from_blocked.recv()?;
        cle::wait_for_events(&[fill]).map_err(cl_err("clWaitForEvents"))?;
        release_event(fill)?;
        release_event(gate)?;
        if trial >= 10 * MODES.len() {
            blocked_us[mode].push(theirs.duration_since(opened).as_secs_f64() * 1e6);
            other_us[mode].push(other.duration_since(opened).as_secs_f64() * 1e6);
            set_us.push(set.as_secs_f64() * 1e6);
        }
    }
    drop((to_blocked, to_hot));
    *slot.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(None);
    slot.1.notify_one();
    for t in [blocked, hot, kicked] {
        t.join().map_err(|_| anyhow!("a watcher panicked"))?;
    }

    println!("\ngate set to end seen, µs ({trials} trials a mode)");
    println!("   {:<46} {:>9} {:>9}", "", "p50", "p99");
    for (m, name) in MODES.iter().enumerate() {
        let (b50, b99) = row(
            &format!("{name}: thread blocked in clWaitForEvents"),
            &mut blocked_us[m],
        );
        let (o50, o99) = row(&format!("{name}: the {name} thread"), &mut other_us[m]);
        println!(
            "   {:<46} {:>8.2}x {:>8.2}x",
            format!("{name}: ratio"),
            o50 / b50,
            o99 / b99
        );
    }
    row("clSetUserEventStatus returns", &mut set_us);
    row("kicked thread running", &mut awake_us);
    read_ns.sort_by(f64::total_cmp);
    println!(
        "   one status read of a pending command, ns (p50): {:.0}",
        percentile(&read_ns, 0.5)
    );
    Ok(())
}
