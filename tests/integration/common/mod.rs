//! What the integration tests share: finding a device, the cl-sys oracle ([`oracle`]),
//! child processes for tests that need one ([`child`]), the one logger ([`logs`]), and
//! test data.

#[macro_use]
mod child;
pub mod logs;
mod oracle;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use cl_lifetime::{ClBuffer, Context, Pod, Queue};

pub use child::{CHILD_LIMIT, isolated, rss_bytes, test_path};
pub use oracle::{Watch, raw_status, watch};

/// How long a command held back by a closed gate (or a call waiting for one) is given to
/// end or return wrongly. A correct library passes whatever this is; a broken one fails
/// unless the machine stalls this long. It can only show that something has not happened
/// yet: order is shown by the data once the gate opens.
pub const WINDOW: Duration = Duration::from_millis(200);

/// How long a call that must not block is given before the test fails instead of hanging.
pub const HANG: Duration = Duration::from_secs(30);

/// Runs `call`, which waits behind a closed gate, on a thread of its own: asserts that it
/// has not returned after [`WINDOW`], then runs `open` (which opens the gate) and asserts
/// that `call` returns, within [`HANG`], and only after `open` began. Returns what `call`
/// returned. `what` names the call in the failures.
pub fn returns_only_after<T: Send + 'static>(
    what: &str,
    call: impl FnOnce() -> T + Send + 'static,
    open: impl FnOnce(),
) -> T {
    let opened = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let seen = opened.clone();
    let caller = std::thread::spawn(move || {
        let out = call();
        let _ = tx.send(seen.load(Ordering::SeqCst));
        out
    });
    assert!(
        rx.recv_timeout(WINDOW).is_err(),
        "{what} returned while its gate was closed"
    );
    opened.store(true, Ordering::SeqCst);
    open();
    match rx.recv_timeout(HANG) {
        Ok(after_open) => assert!(after_open, "{what} returned before its gate opened"),
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what} did not return within {HANG:?} after its gate opened")
        }
        // `call` panicked: the join below passes its panic on.
        Err(RecvTimeoutError::Disconnected) => {}
    }
    caller
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The context the tests run on: `CL_LIFETIME_DEVICE`, or the default device. Without a
/// device the test is skipped, except under `CL_LIFETIME_REQUIRE_DEVICE=1` (set by CI),
/// where finding none fails it.
pub fn context() -> Option<Context> {
    logs::install();
    match Context::from_env() {
        Ok(ctx) => Some(ctx),
        Err(e) if std::env::var("CL_LIFETIME_REQUIRE_DEVICE").as_deref() == Ok("1") => {
            panic!("CL_LIFETIME_REQUIRE_DEVICE=1 but no OpenCL device: {e}")
        }
        Err(e) => {
            not_run(format_args!("no OpenCL device ({e})"));
            None
        }
    }
}

/// A context on the chosen device or, when it cannot be opened, on the first device that
/// can. For child processes whose test is not about the device: on an H100 machine a child
/// of a test process that held the GPU saw no NVIDIA device (compute mode `Default`; the
/// cause is not known), and a lookup test has no reason to depend on that.
pub fn any_context() -> Option<Context> {
    logs::install();
    if let Ok(ctx) = Context::from_env() {
        return Some(ctx);
    }
    let devices = cl_lifetime::Device::all().unwrap_or_default();
    let found = devices.iter().find_map(|d| Context::new(d).ok());
    if found.is_none() {
        return context();
    }
    found
}

/// The environment variable naming a file to which [`not_run`] appends its line
/// (`make test-all` lists them for each implementation).
pub const NOT_RUN_LOG_VAR: &str = "CL_LIFETIME_NOT_RUN_LOG";

/// Says by name that the running test does not run here, and why: `not run on
/// <implementation>: <test>: <why>` on stderr, and appended to the file
/// `CL_LIFETIME_NOT_RUN_LOG` names. Nothing is skipped silently.
pub fn not_run(why: impl std::fmt::Display) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let on = cl_lifetime::Device::from_env()
        .map(|d| d.platform_name().to_string())
        .unwrap_or_else(|_| "this machine".to_string());
    let line = format!("not run on {on}: {test}: {why}");
    eprintln!("{line}");
    if let Ok(path) = std::env::var(NOT_RUN_LOG_VAR) {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            eprintln!("{NOT_RUN_LOG_VAR}={path}: {e}");
        }
    }
}

/// Oclgrind's own limits, for [`not_on`].
pub mod oclgrind {
    /// A command waiting on a gate the test opens later.
    pub const GATES: &str = "Oclgrind runs a queue's commands at its flush and busy-waits \
        there on a user event that is not set, so a command behind a gate the test opens \
        later blocks the host";
    /// Threads sharing a context.
    pub const THREADS: &str = "Oclgrind's runtime is not thread-safe: threads sharing a \
        context crash it";
    /// A measure of the process's memory.
    pub const MEMORY: &str = "Oclgrind's uninitialized-value check keeps shadow copies of the \
        data written (the process held 768 MiB after six 64 MiB writes, and nothing extra \
        without the check), so the process's memory measures Oclgrind, not the library";
    /// A command after failed ones on an in-order queue.
    pub const ECHO: &str = "Oclgrind stops running a command's predecessors on its in-order \
        queue at the first failed dependency: the failed commands before it stay queued, \
        unrun, every command enqueued behind them fails with them, and its clFinish runs \
        only one of them per call, so the queue never drains of the cancelled commands";
}

/// Whether `ctx` is on the implementation named `name` (a part of its platform name, in
/// lowercase); if so, says by name that the test does not run there and why
/// ([`not_run`]). `if common::not_on(&ctx, "oclgrind", oclgrind::GATES) { return; }`
pub fn not_on(ctx: &Context, name: &str, why: &str) -> bool {
    let on = on_platform(ctx, &[name]);
    if on {
        not_run(why);
    }
    on
}

/// Whether `ctx`'s platform name contains one of `names` (lowercase), for a test that
/// asserts a driver's own behaviour where that driver differs.
pub fn on_platform(ctx: &Context, names: &[&str]) -> bool {
    let platform = ctx.device().platform_name().to_lowercase();
    names.iter().any(|name| platform.contains(name))
}

/// Whether `ctx`'s device is PoCL's, by its platform's name or, where an emulation
/// (`make emulate`) renamed the platform, by the device version PoCL gives: for a test
/// that PoCL's own faults keep from running.
pub fn on_pocl(ctx: &Context) -> bool {
    on_platform(ctx, &["portable computing language"]) || ctx.device().version().contains(" PoCL")
}

/// Runs `body` in a child process ([`isolated`], test `name`) whose OpenCL library is the
/// project's driver emulator (`make emulate`) with profile `profile`, over the driver of
/// `ctx`'s device, which the child selects by name; where the emulator is not built, says
/// the test did not run.
pub fn under_emulation(ctx: Context, name: &str, profile: &str, body: impl FnOnce()) {
    // Where `make emulate` built it: CARGO_TARGET_DIR (relative to the package) or target/.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    let emulator = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(target_dir)
        .join("emulate");
    if !emulator.join("libOpenCL.so.1").exists() {
        not_run("the driver emulator is not built here (make emulate)");
        return;
    }
    let library_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(path) if !path.is_empty() => format!("{}:{path}", emulator.display()),
        _ => emulator.display().to_string(),
    };
    let device = ctx.device().name().to_string();
    drop(ctx);
    let env = [
        ("CL_EMULATE", profile),
        ("LD_LIBRARY_PATH", library_path.as_str()),
        ("CL_LIFETIME_DEVICE", device.as_str()),
    ];
    isolated(name, CHILD_LIMIT, &env, body);
}

/// `let ctx = device!();` returns from the test when there is no device (see [`context`]).
macro_rules! device {
    () => {
        match $crate::common::context() {
            Some(ctx) => ctx,
            None => return,
        }
    };
}

/// The largest `CL_DEVICE_MEM_BASE_ADDR_ALIGN` of the context's devices, in bytes: where
/// a sub-buffer (an arena's carving, a view passed to a kernel) may start on each of them.
pub fn sub_buffer_align(ctx: &Context) -> usize {
    ctx.devices()
        .iter()
        .map(|d| d.base_addr_align_bytes())
        .max()
        .unwrap_or(1) as usize
}

/// [`sub_buffer_align`] in elements of `i32` (at least one): a view starting at a multiple
/// of it can be a kernel argument.
pub fn sub_buffer_unit(ctx: &Context) -> usize {
    (sub_buffer_align(ctx) / size_of::<i32>()).max(1)
}

/// The `busy.cl` program's kernels.
pub fn busy(ctx: &Context) -> cl_lifetime::Program {
    ctx.program("busy.cl", "").expect("busy.cl builds")
}

/// A context over two devices of one platform: the platform of the chosen device
/// (`CL_LIFETIME_DEVICE`, or the default) when it has two, else the first platform that
/// does. The chosen device comes first when it is on that platform. Without such a
/// platform the test is skipped, except under `CL_LIFETIME_REQUIRE_TWO_DEVICES=1` (set
/// by CI, which runs PoCL with `POCL_DEVICES="pthread pthread"`), where it fails.
pub fn two_device_context() -> Option<Context> {
    two_devices_for(None)
}

/// [`two_device_context`] for `part` of a test, the part that needs two devices: the
/// line [`not_run`] writes names it.
pub fn two_devices_for(part: Option<&str>) -> Option<Context> {
    logs::install();
    match find_two_devices() {
        Ok(ctx) => Some(ctx),
        Err(why) if std::env::var("CL_LIFETIME_REQUIRE_TWO_DEVICES").as_deref() == Ok("1") => {
            panic!("CL_LIFETIME_REQUIRE_TWO_DEVICES=1 but {why}")
        }
        Err(why) => {
            match part {
                Some(part) => not_run(format_args!("{part}: {why}")),
                None => not_run(&why),
            }
            None
        }
    }
}

/// A context over two devices of one platform, as [`two_device_context`], or why there is
/// none; says nothing, for a test that runs on one device too.
pub fn find_two_devices() -> Result<Context, String> {
    logs::install();
    let devices = match cl_lifetime::Device::all() {
        Ok(devices) => devices,
        Err(e) => return Err(format!("no OpenCL devices ({e})")),
    };
    let chosen = cl_lifetime::Device::from_env().ok();
    let mut platforms: Vec<usize> = devices.iter().map(|d| d.indices().0).collect();
    platforms.dedup();
    if let Some(p) = chosen.as_ref().map(|d| d.indices().0) {
        platforms.sort_by_key(|&q| q != p);
    }
    let mut failures = Vec::new();
    for platform in platforms {
        let mut on: Vec<&cl_lifetime::Device> = devices
            .iter()
            .filter(|d| d.indices().0 == platform)
            .collect();
        if let Some(c) = &chosen {
            on.sort_by_key(|d| d.indices() != c.indices());
        }
        if let [d0, d1, ..] = on[..] {
            match Context::with_devices(&[d0.clone(), d1.clone()]) {
                Ok(ctx) => return Ok(ctx),
                Err(e) => failures.push(format!("{d0} + {d1}: {e}")),
            }
        }
    }
    let found: Vec<String> = devices.iter().map(ToString::to_string).collect();
    Err(format!(
        "no platform with two usable devices (found {found:?}; failed {failures:?}); \
         PoCL exposes two with POCL_DEVICES=\"pthread pthread\""
    ))
}

/// The buffer's contents, read on `queue` (which waits on the buffer's writers).
pub fn contents<T: Pod>(queue: &Queue, buf: &ClBuffer<T>) -> Vec<T> {
    queue
        .read_owned(buf)
        .expect("read enqueued")
        .wait()
        .expect("read")
}

/// `1, 1 + step, 1 + 2 * step, ...` (wrapping): data that no fill or stale block holds by
/// accident.
pub fn ramp(len: usize, step: u32) -> Vec<u32> {
    (0..len as u32).map(|i| i.wrapping_mul(step) + 1).collect()
}

/// A recognisable, index-dependent pattern, different for each `seed`: a misplaced or
/// stale element shows up.
pub fn pattern(len: usize, seed: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(seed) ^ 0x5A5A_5A5A)
        .collect()
}

/// The splitmix64 finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// splitmix64: small, fast and good enough to drive randomized tests from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n`, `n > 0`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + self.below((hi - lo + 1) as usize) as i32
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// A non-empty range inside `0..len`.
    pub fn range(&mut self, len: usize) -> std::ops::Range<usize> {
        let start = self.below(len);
        start..self.between(start + 1, len)
    }
}

/// A temporary folder unique to this process, tag and moment, removed when dropped
/// whatever the test's outcome.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates `cl-lifetime-<tag>-<pid>-<nanos>` in the system's temporary folder.
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("cl-lifetime-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a temporary folder");
        TempDir(dir)
    }

    /// The folder.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Writes `contents` to the file `name` in the folder; returns its path.
    pub fn write(&self, name: &str, contents: &[u8]) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).expect("write a temporary file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `done` until it holds, for at most [`HANG`]; whether it held. For a state the
/// driver or the library reaches on a thread of its own (a destructor callback); it
/// orders nothing.
pub fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < HANG {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done()
}
