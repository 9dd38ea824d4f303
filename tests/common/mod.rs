//! Shared test helpers: finding a device, and the cl-sys oracle (DESIGN.md traps 8 and 10).
//!
//! The oracle talks to OpenCL through `cl-sys`, a binding independent of the library's
//! own, so a bug in the library's wrappers cannot hide itself from the tests.
#![allow(dead_code)]

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cl_lifetime::{ClBuffer, Context, Event, Pod};

/// The context the tests run on: `CL_LIFETIME_DEVICE`, or the default device. Without a
/// device the test is skipped, except under `CL_LIFETIME_REQUIRE_DEVICE=1` (set by CI),
/// where finding none fails it.
pub fn context() -> Option<Context> {
    let _ = env_logger::builder().is_test(true).try_init();
    match Context::from_env() {
        Ok(ctx) => Some(ctx),
        Err(e) if std::env::var("CL_LIFETIME_REQUIRE_DEVICE").as_deref() == Ok("1") => {
            panic!("CL_LIFETIME_REQUIRE_DEVICE=1 but no OpenCL device: {e}")
        }
        Err(e) => {
            eprintln!("skipped: no OpenCL device ({e})");
            None
        }
    }
}

/// A context on the chosen device or, when it cannot be opened, on the first device that
/// can. For child processes whose test is not about the device: on an H100 machine a child
/// of a test process that held the GPU saw no NVIDIA device (compute mode `Default`; the
/// cause is not known), and a lookup test has no reason to depend on that.
pub fn any_context() -> Option<Context> {
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

/// `let ctx = device!();` returns from the test when there is no device (see [`context`]).
#[macro_export]
macro_rules! device {
    () => {
        match common::context() {
            Some(ctx) => ctx,
            None => return,
        }
    };
}

struct WatchState {
    fired: AtomicBool,
    /// How many watched events were not terminal when the destructor callback ran.
    unfinished_at_fire: AtomicUsize,
    events: Vec<cl_sys::cl_event>,
}

// SAFETY: event handles may be used from any thread; the rest is atomic.
unsafe impl Send for WatchState {}
// SAFETY: as above.
unsafe impl Sync for WatchState {}

impl Drop for WatchState {
    fn drop(&mut self) {
        for &e in &self.events {
            // SAFETY: retained once in `watch`, released once here.
            unsafe { cl_sys::clReleaseEvent(e) };
        }
    }
}

/// Raw execution status through cl-sys.
pub fn raw_status(event: cl_sys::cl_event) -> i32 {
    let mut status: cl_sys::cl_int = 1;
    // SAFETY: `event` is a retained event; the output is one cl_int.
    let rc = unsafe {
        cl_sys::clGetEventInfo(
            event,
            cl_sys::CL_EVENT_COMMAND_EXECUTION_STATUS,
            size_of::<cl_sys::cl_int>(),
            (&raw mut status).cast(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "clGetEventInfo");
    status
}

extern "C" fn on_destroy(_mem: cl_sys::cl_mem, user: *mut c_void) {
    // SAFETY: `user` is the Arc leaked in `watch`; the callback runs once.
    let state = unsafe { Arc::from_raw(user as *const WatchState) };
    let unfinished = state.events.iter().filter(|&&e| raw_status(e) > 0).count();
    state.unfinished_at_fire.store(unfinished, Ordering::SeqCst);
    state.fired.store(true, Ordering::SeqCst);
}

/// Watches one buffer's end: whether its destructor callback fired, and whether the
/// given events were all terminal (complete or failed) when it did.
pub struct Watch(Arc<WatchState>);

impl Watch {
    /// Whether the destructor callback has fired.
    pub fn fired(&self) -> bool {
        self.0.fired.load(Ordering::SeqCst)
    }

    /// Asserts the release guarantee (trap 8): the callback has fired and every watched
    /// event was terminal when it did.
    pub fn assert_released_after_events(&self) {
        assert!(self.fired(), "destructor callback has not fired");
        assert_eq!(
            self.0.unfinished_at_fire.load(Ordering::SeqCst),
            0,
            "events were still pending when the memory was released"
        );
    }
}

/// Registers a destructor callback on `buffer` through cl-sys.
pub fn watch<T: Pod>(buffer: &ClBuffer<T>, events: &[&Event]) -> Watch {
    let events: Vec<cl_sys::cl_event> = events
        .iter()
        .map(|e| {
            let raw = e.as_raw() as cl_sys::cl_event;
            // SAFETY: `raw` is live (held by `e`); the retain is released by WatchState.
            assert_eq!(unsafe { cl_sys::clRetainEvent(raw) }, 0);
            raw
        })
        .collect();
    let state = Arc::new(WatchState {
        fired: AtomicBool::new(false),
        unfinished_at_fire: AtomicUsize::new(usize::MAX),
        events,
    });
    let user = Arc::into_raw(state.clone()) as *mut c_void;
    // SAFETY: the buffer's cl_mem is live; `user` stays valid until the callback takes it.
    let rc = unsafe {
        cl_sys::clSetMemObjectDestructorCallback(
            buffer.as_raw() as cl_sys::cl_mem,
            Some(on_destroy),
            user,
        )
    };
    assert_eq!(rc, 0, "clSetMemObjectDestructorCallback");
    Watch(state)
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
    let _ = env_logger::builder().is_test(true).try_init();
    let required = std::env::var("CL_LIFETIME_REQUIRE_TWO_DEVICES").as_deref() == Ok("1");
    let skip = |why: String| -> Option<Context> {
        if required {
            panic!("CL_LIFETIME_REQUIRE_TWO_DEVICES=1 but {why}");
        }
        eprintln!("skipped: {why}");
        None
    };
    let devices = match cl_lifetime::Device::all() {
        Ok(devices) => devices,
        Err(e) => return skip(format!("no OpenCL devices ({e})")),
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
                Ok(ctx) => return Some(ctx),
                Err(e) => failures.push(format!("{d0} + {d1}: {e}")),
            }
        }
    }
    let found: Vec<String> = devices.iter().map(ToString::to_string).collect();
    skip(format!(
        "no platform with two usable devices (found {found:?}; failed {failures:?}); \
         PoCL exposes two with POCL_DEVICES=\"pthread pthread\""
    ))
}

/// The environment this process started with, read before anything opened OpenCL:
/// NVIDIA's driver changes the environment of a process that opens it, and a child that
/// inherits the changed one sees no NVIDIA device (DESIGN.md trap 15).
static START_ENV: std::sync::OnceLock<Vec<(std::ffi::OsString, std::ffi::OsString)>> =
    std::sync::OnceLock::new();

extern "C" fn capture_start_env() {
    let _ = START_ENV.set(std::env::vars_os().collect());
}

// Runs before `main`, so before any test opens OpenCL.
#[used]
#[unsafe(link_section = ".init_array")]
static CAPTURE_START_ENV: extern "C" fn() = capture_start_env;

/// The variable that tells a child process which isolated test body to run.
const ISOLATED_VAR: &str = "CL_LIFETIME_ISOLATED";

/// Runs `body` in a child process (this test binary again, running only the test `name`),
/// failing the test if the child crashes, fails, or has not ended after `limit`. A test
/// of a crash or a hang calls this, so that the suite reports the crash or the hang
/// instead of dying or stalling. `env` adds variables to the child's environment.
///
/// In the child, `body` runs; in the parent, `body` is not called.
pub fn isolated(name: &str, limit: std::time::Duration, env: &[(&str, &str)], body: impl FnOnce()) {
    use std::io::Read;
    use std::process::{Command, Stdio};
    if std::env::var(ISOLATED_VAR).as_deref() == Ok(name) {
        body();
        println!("isolated body finished: {name}");
        return;
    }
    let start_env = START_ENV
        .get()
        .cloned()
        .unwrap_or_else(|| std::env::vars_os().collect());
    let mut child = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env_clear()
        .envs(start_env)
        .env(ISOLATED_VAR, name)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child test process starts");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        // Polls the child for its end; nothing is ordered by this pause.
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let output = format!(
        "--- child stdout ---\n{}\n--- child stderr ---\n{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    // Shown with the test's own output (`--nocapture`, or when it fails).
    println!("{output}");
    match status {
        None => panic!("`{name}` hung: still running after {limit:?}\n{output}"),
        Some(status) if !status.success() => {
            panic!("`{name}` crashed or failed in its child process ({status})\n{output}")
        }
        Some(_) => assert!(
            output.contains(&format!("isolated body finished: {name}")),
            "`{name}`: the child did not run the body\n{output}"
        ),
    }
}

/// This process's resident set size in bytes (Linux), or `None` elsewhere.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
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
