//! The async benchmark: what awaiting a command costs against a thread blocked in
//! `clWaitForEvents` on the same command, measured in one run.
//!
//! ```text
//! make bench                                   # runs this after the comparisons
//! cargo run --release -p cl-lifetime-bench --example async_wake -- --quick
//! cargo run --release -p cl-lifetime-bench --example async_wake -- --latency-only  # row 1
//! cargo run --release -p cl-lifetime-bench --example async_wake -- --quiet-only    # row 3
//! cargo run --release -p cl-lifetime-bench --example async_wake -- --dropped-only  # row 4
//! ```
//!
//! 1. **Wake latency.** Each trial enqueues a fill behind a user event, has a thread block
//!    in `clWaitForEvents` on the fill's event and a task (on a thread of its own that parks
//!    until woken, as `pollster` does) await the same event, then opens the gate: each side
//!    notes when it is back, and the task also when its waker was called (the library's
//!    part, before the executor's). A third thread, parked, is unparked by the blocked
//!    thread when its wait returns: the floor for any task whose executor parks its thread.
//!    A second task awaits the same event on a thread that spins between polls, as a
//!    busy-polling executor does: like for like with a driver whose `clWaitForEvents`
//!    spins (NVIDIA's), where the blocked thread never sleeps either. That task polls
//!    first, so its wake comes first (the library wakes tasks of one command in the order
//!    they polled), and costs the parked task's next to nothing.
//!    Reported: p50 and p99 of gate-to-wake over the trials, each side's, and their ratios
//!    (goal: p99 within 1.5x of the blocked thread's). The two sides wait on the same command at the
//!    same time, so its end is the same for both.
//! 2. **Many at once.** 10,000 fills behind one gate, each awaited by its own tokio task
//!    (2 worker threads), against one thread blocked in `clWaitForEvents` on all 10,000:
//!    gate-to-all-done, interleaved repetitions, ratio of the medians.
//! 3. **Quiet.** A task awaits a command behind a gate that stays closed for a second, and
//!    a thread blocks in `clWaitForEvents` on the same command: the CPU time the library's
//!    threads use meanwhile (read from `/proc/self/task/*/schedstat`), against the blocked
//!    thread's (goal: under 1% of a core; a driver whose `clWaitForEvents` spins shows it
//!    on the blocked side).
//! 4. **Dropped.** 10^4, 10^5 and 10^6 futures of one gated command, each polled once (so
//!    each is watched) and then all dropped: the cost per future of creating, polling and
//!    dropping, and of the drops alone (goal: within 2x across the three counts).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use cl_lifetime::{ClBuffer, Context, Event, Queue};
use harness::{Stats, cl_err, interleave, print_device};
use opencl3::event as cle;
use opencl3::types::cl_event;

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let quick = std::env::args().any(|a| a == "--quick");
    let ctx = Context::from_env()?;
    print_device(&ctx);
    let queue = ctx.queue()?;
    let buf = ctx.buffer::<u32>(64)?;
    println!("mode:     {}", if quick { "quick" } else { "full" });
    println!(
        "waits:    {}={} (spin: clWaitForEvents; quiet: a driver callback; unset: measured per driver)\n",
        cl_lifetime::WAIT_VAR,
        std::env::var(cl_lifetime::WAIT_VAR).unwrap_or_default()
    );

    if std::env::args().any(|a| a == "--quiet-only") {
        return quiet(&ctx, &queue, &buf);
    }
    if std::env::args().any(|a| a == "--dropped-only") {
        return dropped(&ctx, &queue, &buf);
    }
    wake_latency(&ctx, &queue, &buf, if quick { 100 } else { 400 })?;
    if std::env::args().any(|a| a == "--latency-only") {
        return Ok(());
    }
    many_at_once(&ctx, &queue, &buf, if quick { 3 } else { 7 })?;
    quiet(&ctx, &queue, &buf)?;
    dropped(&ctx, &queue, &buf)?;
    Ok(())
}

/// How a `block_on` waits between polls.
#[derive(Clone, Copy)]
enum Idle {
    /// Park the thread until woken, as `pollster` does.
    Park,
    /// Spin on a flag the waker sets, as a busy-polling executor does (and as NVIDIA's
    /// `clWaitForEvents` does inside the driver): no wake-up of a parked thread.
    Spin,
}

/// A thread's own `block_on`, noting when its waker was first called: the library's part
/// of a wake, before the executor's.
fn block_on_noting_wake<F: std::future::Future>(
    future: F,
    idle: Idle,
    polled: &mpsc::Sender<()>,
) -> (Option<Instant>, F::Output) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct Noting {
        thread: thread::Thread,
        woken: Mutex<Option<Instant>>,
        flag: AtomicBool,
    }
    impl Wake for Noting {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let mut woken = self.woken.lock().unwrap_or_else(|p| p.into_inner());
            woken.get_or_insert_with(Instant::now);
            drop(woken);
            self.flag.store(true, Ordering::Release);
            self.thread.unpark();
        }
    }
    let noting = Arc::new(Noting {
        thread: thread::current(),
        woken: Mutex::new(None),
        flag: AtomicBool::new(false),
    });
    let waker = Waker::from(noting.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let mut first = true;
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            let woken = *noting.woken.lock().unwrap_or_else(|p| p.into_inner());
            if first {
                let _ = polled.send(());
            }
            return (woken, out);
        }
        if std::mem::take(&mut first) {
            let _ = polled.send(());
        }
        match idle {
            Idle::Park => thread::park(),
            Idle::Spin => {
                while !noting.flag.swap(false, Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// A raw event handle handed to another thread.
struct SendEvent(cl_event);
// SAFETY: OpenCL event handles may be used from any thread (OpenCL 3.0 appendix A.2); the
// sender keeps the event alive until the receiver has answered.
unsafe impl Send for SendEvent {}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn wake_latency(
    ctx: &Context,
    queue: &Queue,
    buf: &ClBuffer<u32>,
    trials: usize,
) -> anyhow::Result<()> {
    // The blocked thread and the task's thread, each answering with when it was back.
    let (to_blocked, blocked_gets) = mpsc::channel::<SendEvent>();
    let (blocked_says, from_blocked) = mpsc::channel::<Instant>();
    // The floor for a task on a thread that parks: a thread parked until the blocked
    // thread, back from its wait, unparks it (one wake-up of a parked thread).
    let go = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    let (parked_says, from_parked) = mpsc::channel::<Instant>();
    let parked = {
        let go = go.clone();
        thread::spawn(move || {
            loop {
                match go.swap(0, std::sync::atomic::Ordering::AcqRel) {
                    0 => thread::park(),
                    1 => {
                        let _ = parked_says.send(Instant::now());
                    }
                    _ => break,
                }
            }
        })
    };
    let parked_thread = parked.thread().clone();
    let (to_go, parked_thread_2) = (go.clone(), parked_thread.clone());
    let blocked = thread::spawn(move || {
        for event in blocked_gets {
            let _ = cle::wait_for_events(&[event.0]);
            let back = Instant::now();
            to_go.store(1, std::sync::atomic::Ordering::Release);
            parked_thread_2.unpark();
            let _ = blocked_says.send(back);
        }
    });
    // A task on a parking executor, and one on a spinning executor.
    let task_thread = |idle: Idle| {
        let (to_task, task_gets) = mpsc::channel::<Event>();
        let (task_says, from_task) = mpsc::channel::<(Instant, Instant)>();
        let (polled, task_polled) = mpsc::channel::<()>();
        let task = thread::spawn(move || {
            for event in task_gets {
                let (woken, _) = block_on_noting_wake(event.ended(), idle, &polled);
                let _ = task_says.send((woken.unwrap_or_else(Instant::now), Instant::now()));
            }
        });
        (to_task, from_task, task_polled, task)
    };
    let (to_task, from_task, task_polled, task) = task_thread(Idle::Park);
    let (to_spinner, from_spinner, spinner_polled, spinner) = task_thread(Idle::Spin);
    let (mut ours, mut theirs, mut called, mut floor, mut spun) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for trial in 0..trials + 10 {
        let gate = ctx.user_event()?;
        let fill = queue.after(&[gate.event()]).fill(buf, trial as u32)?;
        queue.flush()?;
        to_blocked
            .send(SendEvent(fill.as_raw()))
            .map_err(|_| anyhow!("blocked thread gone"))?;
        // The spinning task's future first: the library wakes the two in the order they
        // were polled, and a spinning task's wake-up costs the other next to nothing.
        to_spinner
            .send(fill.clone())
            .map_err(|_| anyhow!("spinning task thread gone"))?;
        spinner_polled.recv()?;
        to_task
            .send(fill.clone())
            .map_err(|_| anyhow!("task thread gone"))?;
        task_polled.recv()?;
        // Both sides settle into their waits (not an ordering claim: a side that came late
        // would only look faster).
        thread::sleep(Duration::from_millis(2));
        let opened = Instant::now();
        gate.complete()?;
        let their = from_blocked.recv()?.duration_since(opened);
        let (woken, back) = from_task.recv()?;
        let (_, spun_back) = from_spinner.recv()?;
        let unparked = from_parked.recv()?.duration_since(opened);
        let our = back.duration_since(opened);
        fill.wait()?;
        // The first trials warm up the threads and the driver.
        if trial >= 10 {
            theirs.push(their.as_secs_f64() * 1e6);
            ours.push(our.as_secs_f64() * 1e6);
            called.push(woken.saturating_duration_since(opened).as_secs_f64() * 1e6);
            floor.push(unparked.as_secs_f64() * 1e6);
            spun.push(spun_back.duration_since(opened).as_secs_f64() * 1e6);
        }
    }
    drop((to_blocked, to_task, to_spinner));
    blocked
        .join()
        .map_err(|_| anyhow!("blocked thread panicked"))?;
    task.join().map_err(|_| anyhow!("task thread panicked"))?;
    spinner
        .join()
        .map_err(|_| anyhow!("spinning task thread panicked"))?;
    go.store(2, std::sync::atomic::Ordering::Release);
    parked_thread.unpark();
    parked
        .join()
        .map_err(|_| anyhow!("parked thread panicked"))?;
    ours.sort_by(f64::total_cmp);
    floor.sort_by(f64::total_cmp);
    theirs.sort_by(f64::total_cmp);
    called.sort_by(f64::total_cmp);
    spun.sort_by(f64::total_cmp);
    println!("1. wake latency, gate opened to back on the waiting thread ({trials} trials)");
    println!("   {:<44} {:>9} {:>9}", "", "p50 µs", "p99 µs");
    println!(
        "   {:<44} {:>9.1} {:>9.1}",
        "thread blocked in clWaitForEvents",
        percentile(&theirs, 0.5),
        percentile(&theirs, 0.99)
    );
    println!(
        "   {:<44} {:>9.1} {:>9.1}",
        "  and a parked thread it unparks then",
        percentile(&floor, 0.5),
        percentile(&floor, 0.99)
    );
    println!(
        "   {:<44} {:>9.1} {:>9.1}",
        "task awaiting Event::ended, back running",
        percentile(&ours, 0.5),
        percentile(&ours, 0.99)
    );
    println!(
        "   {:<44} {:>9.1} {:>9.1}",
        "  of which: its waker called by the library",
        percentile(&called, 0.5),
        percentile(&called, 0.99)
    );
    println!(
        "   {:<44} {:>9.1} {:>9.1}",
        "task awaiting, its executor spinning",
        percentile(&spun, 0.5),
        percentile(&spun, 0.99)
    );
    println!(
        "   ratio awaited / blocked: p50 {:.2}x, p99 {:.2}x (goal: p99 within 1.5x)",
        percentile(&ours, 0.5) / percentile(&theirs, 0.5),
        percentile(&ours, 0.99) / percentile(&theirs, 0.99)
    );
    println!(
        "   ratio awaited, spinning executor / blocked: p50 {:.2}x, p99 {:.2}x (like for like where the blocked thread spins)",
        percentile(&spun, 0.5) / percentile(&theirs, 0.5),
        percentile(&spun, 0.99) / percentile(&theirs, 0.99)
    );
    println!(
        "   ratio waker called / blocked: p50 {:.2}x, p99 {:.2}x (the library's part)",
        percentile(&called, 0.5) / percentile(&theirs, 0.5),
        percentile(&called, 0.99) / percentile(&theirs, 0.99)
    );
    println!(
        "   ratio awaited / parked thread unparked: p50 {:.2}x, p99 {:.2}x (against the floor of a parking executor)\n",
        percentile(&ours, 0.5) / percentile(&floor, 0.5),
        percentile(&ours, 0.99) / percentile(&floor, 0.99)
    );
    Ok(())
}

const MANY: usize = 10_000;

/// Gate-to-all-done in µs of `MANY` fills behind one gate, awaited by tokio tasks.
fn many_awaited(
    ctx: &Context,
    queue: &Queue,
    buf: &ClBuffer<u32>,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<f64> {
    let gate = ctx.user_event()?;
    let fills = (0..MANY)
        .map(|i| queue.after(&[gate.event()]).fill(buf, i as u32))
        .collect::<Result<Vec<_>, _>>()?;
    queue.flush()?;
    let tasks: Vec<_> = runtime.block_on(async {
        fills
            .into_iter()
            .map(|f| tokio::spawn(f.into_future_owned()))
            .collect()
    });
    // The tasks poll once, and their commands go to the waiter, before the gate opens.
    thread::sleep(Duration::from_millis(20));
    let opened = Instant::now();
    gate.complete()?;
    runtime.block_on(async {
        for task in tasks {
            task.await.map_err(|e| anyhow!("{e}"))??;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(opened.elapsed().as_secs_f64() * 1e6)
}

/// The same with one thread blocked in `clWaitForEvents` on all of them.
fn many_blocked(ctx: &Context, queue: &Queue, buf: &ClBuffer<u32>) -> anyhow::Result<f64> {
    let gate = ctx.user_event()?;
    let fills = (0..MANY)
        .map(|i| queue.after(&[gate.event()]).fill(buf, i as u32))
        .collect::<Result<Vec<_>, _>>()?;
    queue.flush()?;
    let raws: Vec<usize> = fills.iter().map(|f| f.as_raw() as usize).collect();
    let (says, back) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let raws: Vec<cl_event> = raws.into_iter().map(|r| r as cl_event).collect();
        let waited = cle::wait_for_events(&raws).map_err(cl_err("clWaitForEvents"));
        let _ = says.send(Instant::now());
        waited
    });
    thread::sleep(Duration::from_millis(20));
    let opened = Instant::now();
    gate.complete()?;
    let done = back.recv()?;
    waiter
        .join()
        .map_err(|_| anyhow!("waiting thread panicked"))??;
    drop(fills);
    Ok(done.duration_since(opened).as_secs_f64() * 1e6)
}

/// The owned future of an event, for `tokio::spawn`.
trait OwnedFuture {
    fn into_future_owned(self) -> cl_lifetime::Ended;
}

impl OwnedFuture for Event {
    fn into_future_owned(self) -> cl_lifetime::Ended {
        std::future::IntoFuture::into_future(self)
    }
}

fn many_at_once(
    ctx: &Context,
    queue: &Queue,
    buf: &ClBuffer<u32>,
    reps: usize,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("a tokio runtime")?;
    many_awaited(ctx, queue, buf, &runtime)?;
    many_blocked(ctx, queue, buf)?;
    let samples = interleave(
        reps,
        &mut [
            Box::new(|| many_blocked(ctx, queue, buf)),
            Box::new(|| many_awaited(ctx, queue, buf, &runtime)),
        ],
    )?;
    let (theirs, ours) = (Stats::of(&samples[0]), Stats::of(&samples[1]));
    println!("2. {MANY} commands behind one gate, gate opened to all done ({reps} repetitions)");
    println!(
        "   one thread blocked in clWaitForEvents on all   {:>10.0} µs (min {:.0}, max {:.0})",
        theirs.median, theirs.min, theirs.max
    );
    println!(
        "   a tokio task awaiting each                     {:>10.0} µs (min {:.0}, max {:.0})",
        ours.median, ours.min, ours.max
    );
    println!(
        "   ratio awaited / blocked: {:.2}x\n",
        ours.median / theirs.median
    );
    Ok(())
}

/// CPU time in ns of this process's threads whose name starts with `prefix`.
fn cpu_ns(prefix: &str) -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let path = task?.path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue;
        };
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let Ok(sched) = std::fs::read_to_string(path.join("schedstat")) else {
            continue;
        };
        total += sched
            .split_whitespace()
            .next()
            .unwrap_or("0")
            .parse::<u64>()
            .unwrap_or(0);
    }
    Ok(total)
}

fn quiet(ctx: &Context, queue: &Queue, buf: &ClBuffer<u32>) -> anyhow::Result<()> {
    let gate = ctx.user_event()?;
    let fill = queue.after(&[gate.event()]).fill(buf, 1)?;
    queue.flush()?;
    let raw = SendEvent(fill.as_raw());
    let blocked = thread::Builder::new()
        .name("raw-blocked".into())
        .spawn(move || {
            let raw = raw;
            let _ = cle::wait_for_events(&[raw.0]);
        })?;
    let awaited = fill.clone();
    let task = thread::spawn(move || pollster::block_on(awaited.ended()));
    thread::sleep(Duration::from_millis(50));
    let (ours0, theirs0) = (cpu_ns("cl-lifetime-")?, cpu_ns("raw-blocked")?);
    let quiet_for = Duration::from_secs(1);
    thread::sleep(quiet_for);
    let (ours1, theirs1) = (cpu_ns("cl-lifetime-")?, cpu_ns("raw-blocked")?);
    gate.complete()?;
    blocked
        .join()
        .map_err(|_| anyhow!("blocked thread panicked"))?;
    task.join().map_err(|_| anyhow!("task thread panicked"))??;
    let per_s = |ns: u64| ns as f64 / 1e3 / quiet_for.as_secs_f64();
    println!("3. CPU time while an awaited command waits on a closed gate for {quiet_for:?}");
    println!(
        "   thread blocked in clWaitForEvents              {:>10.1} µs per second",
        per_s(theirs1 - theirs0)
    );
    println!(
        "   the library's threads                          {:>10.1} µs per second ({:.3}% of a core; goal: under 1%)\n",
        per_s(ours1 - ours0),
        per_s(ours1 - ours0) / 1e4
    );
    Ok(())
}

/// Creates `count` futures of `event`, polls each once, then drops them all: ns per future
/// for the whole, and for the drops alone.
fn create_poll_drop(event: &Event, count: usize) -> (f64, f64) {
    use std::future::Future;
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let start = Instant::now();
    let mut futures: Vec<_> = (0..count).map(|_| Box::pin(event.ended())).collect();
    for f in &mut futures {
        assert!(f.as_mut().poll(&mut cx).is_pending());
    }
    let dropping = Instant::now();
    drop(futures);
    let end = Instant::now();
    let per = |d: Duration| d.as_secs_f64() * 1e9 / count as f64;
    (per(end - start), per(end - dropping))
}

fn dropped(ctx: &Context, queue: &Queue, buf: &ClBuffer<u32>) -> anyhow::Result<()> {
    let gate = ctx.user_event()?;
    let fill = queue.after(&[gate.event()]).fill(buf, 2)?;
    queue.flush()?;
    create_poll_drop(&fill, 1000);
    println!("4. futures of one gated command: created, polled once, dropped");
    println!(
        "   {:<12} {:>22} {:>16}",
        "futures", "ns per future, all", "ns per drop"
    );
    let mut rows = Vec::new();
    for count in [10_000, 100_000, 1_000_000] {
        let (all, drops) = create_poll_drop(&fill, count);
        println!("   {count:<12} {all:>22.0} {drops:>16.0}");
        rows.push((all, drops));
    }
    let spread = |f: fn(&(f64, f64)) -> f64| {
        let values: Vec<f64> = rows.iter().map(f).collect();
        values.iter().copied().fold(f64::MIN, f64::max)
            / values.iter().copied().fold(f64::MAX, f64::min)
    };
    println!(
        "   largest / smallest per future: all {:.2}x, drops {:.2}x (goal: within 2x)",
        spread(|r| r.0),
        spread(|r| r.1)
    );
    gate.complete()?;
    fill.wait()?;
    Ok(())
}
