//! Test bodies run in a child process: this test binary again, running one test.
//!
//! Every area's tests run in one process, so a test needs a process of its own when it
//! may crash or hang it (the suite must report that, not die or stall), when it changes
//! what the whole process shares (environment variables, the working directory, the
//! installed ICDs), or when it measures what the whole process holds (its memory,
//! `cl_lifetime::events_held()`), which the tests running beside it would change.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a child process may take before its test counts as hung.
pub const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// The variable that tells a child process which isolated test body to run.
const ISOLATED_VAR: &str = "CL_LIFETIME_ISOLATED";

/// The full name under which the test harness knows test `name` of module `module`
/// (`module_path!()`): the module path without the crate's name, e.g.
/// `failures::cancelled_commands_keep_the_process_memory_flat`. `--exact` needs it.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// `test_path!(name)`: the full name of test `name` of the module this is written in.
macro_rules! test_path {
    ($name:ident) => {
        $crate::common::test_path(module_path!(), stringify!($name))
    };
}

/// A test whose body runs in a child process ([`isolated`]) with the time limit
/// [`CHILD_LIMIT`], so that a crash or a hang fails it instead of the suite.
macro_rules! isolated_test {
    ($(#[$meta:meta])* fn $name:ident() $body:block) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            $crate::common::isolated(&test_path!($name), $crate::common::CHILD_LIMIT, &[], || {
                $body
            });
        }
    };
}

/// The environment this process started with, read before anything opened OpenCL:
/// NVIDIA's driver changes the environment of a process that opens it, and a child that
/// inherits the changed one sees no NVIDIA device (design trap "NVIDIA changes the environment", docs/design.md).
static START_ENV: std::sync::OnceLock<Vec<(std::ffi::OsString, std::ffi::OsString)>> =
    std::sync::OnceLock::new();

extern "C" fn capture_start_env() {
    let _ = START_ENV.set(std::env::vars_os().collect());
}

// Runs before `main`, so before any test opens OpenCL.
#[used]
#[unsafe(link_section = ".init_array")]
static CAPTURE_START_ENV: extern "C" fn() = capture_start_env;

/// The folder a crash report is also written to.
const CRASH_DIR_VAR: &str = "CL_LIFETIME_CRASH_DIR";

/// Installs the crash report in this process too, when `CL_LIFETIME_CRASH_DIR` asks for
/// reports: a driver's crash in a test not run in a child process then names the crashing
/// thread, which the test harness names after its test. Called once, before any context.
pub fn report_crashes_where_asked() {
    if std::env::var_os(CRASH_DIR_VAR).is_some() {
        crash_report::install();
    }
}

/// The tests whose threads have opened the test logger and not ended yet, by thread name
/// (the harness names each test's thread after the test): a crash report lists them.
static RUNNING: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Takes its test off [`RUNNING`] when the test's thread ends.
struct Running(String);

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = running.iter().position(|t| *t == self.0) {
            running.swap_remove(i);
        }
    }
}

thread_local! {
    static THIS_TEST: std::cell::RefCell<Option<Running>> = const { std::cell::RefCell::new(None) };
}

/// Notes the calling thread's test among those running, once per thread.
pub fn note_running_test() {
    let Some(name) = std::thread::current().name().map(str::to_owned) else {
        return;
    };
    THIS_TEST.with(|this| {
        let mut this = this.borrow_mut();
        if this.is_none() {
            RUNNING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(name.clone());
            *this = Some(Running(name));
        }
    });
}

/// Runs `body` in a child process (this test binary again, running only the test `name`,
/// its full path: see [`test_path`]), failing the test if the child crashes, fails, does
/// not run the body, or has not ended after `limit`. `env` adds variables to the child's
/// environment, which is otherwise the one this process started with.
///
/// In the child, `body` runs; in the parent, `body` is not called.
pub fn isolated(name: &str, limit: Duration, env: &[(&str, &str)], body: impl FnOnce()) {
    if std::env::var(ISOLATED_VAR).as_deref() == Ok(name) {
        crash_report::install();
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
    let start = Instant::now();
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
        std::thread::sleep(Duration::from_millis(10));
    };
    let output = format!(
        "--- child stdout ---\n{}\n--- child stderr ---\n{}",
        last_lines(&stdout.join().unwrap_or_default()),
        last_lines(&stderr.join().unwrap_or_default())
    );
    // Shown with the test's own output (`--nocapture`, or when it fails).
    println!("{output}");
    match status {
        None => panic!("`{name}` hung: still running after {limit:?}\n{output}"),
        Some(status) if !status.success() => {
            panic!("`{name}` crashed or failed in its child process ({status})\n{output}")
        }
        // A name the harness does not know runs no test, and succeeds.
        Some(_) => assert!(
            output.contains(&format!("isolated body finished: {name}")),
            "`{name}`: the child did not run the body\n{output}"
        ),
    }
}

/// Lines of a child's output shown at most: a long test prints a progress line per step
/// (see `schedules::Watchdog`), and the end of it says where it crashed.
const SHOWN_LINES: usize = 60;

/// `text`, or its last [`SHOWN_LINES`] lines after a line saying how many were left out.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    match lines.len().checked_sub(SHOWN_LINES) {
        Some(left_out) if left_out > 0 => format!(
            "[{left_out} earlier lines left out]\n{}",
            lines[left_out..].join("\n")
        ),
        _ => text.to_string(),
    }
}

/// This process's resident set size in bytes (Linux), or `None` elsewhere.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Where a child process that crashes says where: on a fatal signal (SIGSEGV, SIGBUS,
/// SIGABRT, SIGILL, SIGFPE) it writes the signal, the faulting address, the instruction
/// and each return address of the crashing thread's stack, each as `library+offset` (read
/// from `/proc/self/maps`, so a driver's frames are named by its file; this binary's
/// offsets go to `addr2line`), then dies of the same signal. The report goes to stderr,
/// which the parent shows, and, when `CL_LIFETIME_CRASH_DIR` names a folder, to
/// `crash-<pid>.txt` there. A diagnostic that runs only in a process already crashing: it
/// allocates and reads a file, which is not async-signal-safe, and may itself fail. A
/// driver may put handlers of its own in front: on PoCL (whose LLVM installs signal
/// handlers) a SIGABRT sent to a child was swallowed, and an assertion of PoCL's printed no
/// report; the test still fails by name, with the driver's message. A fault (SIGSEGV) runs
/// its instruction again and reaches this handler.
mod crash_report {
    use std::ffi::c_void;
    use std::io::Write;

    use super::CRASH_DIR_VAR as DIR_VAR;

    unsafe extern "C" {
        // The unwinder of the Rust runtime (libgcc_s): every Linux Rust binary links it.
        fn _Unwind_Backtrace(
            trace: extern "C" fn(*mut c_void, *mut c_void) -> i32,
            arg: *mut c_void,
        ) -> i32;
        fn _Unwind_GetIP(context: *mut c_void) -> usize;
    }

    extern "C" fn frame(context: *mut c_void, _arg: *mut c_void) -> i32 {
        // SAFETY: `context` is the unwinder's, valid during this callback.
        let ip = unsafe { _Unwind_GetIP(context) };
        report(&format!("crash frame {ip:#x} {}", module(ip)));
        // _URC_NO_REASON: go on.
        0
    }

    /// `ip` as `file+offset`, the offset into the file of the mapping that holds it.
    fn module(ip: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        for line in maps.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(range), Some(offset)) = (fields.first(), fields.get(2)) else {
                continue;
            };
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            let hex = |s: &str| usize::from_str_radix(s, 16).unwrap_or(0);
            if (hex(start)..hex(end)).contains(&ip) {
                let file = fields.get(5).copied().unwrap_or("[anonymous]");
                return format!("{file}+{:#x}", ip - hex(start) + hex(offset));
            }
        }
        "(not mapped)".to_string()
    }

    fn report(line: &str) {
        eprintln!("{line}");
        if let Ok(dir) = std::env::var(DIR_VAR) {
            let path = format!("{dir}/crash-{}.txt", std::process::id());
            if let Ok(mut file) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(file, "{line}");
            }
        }
    }

    extern "C" fn on_fatal(signal: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
        // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
        let (address, ip) = unsafe {
            let context = context.cast::<libc::ucontext_t>();
            (
                (*info).si_addr() as usize,
                (*context).uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
            )
        };
        report(&format!(
            "crash: signal {signal} at address {address:#x}, instruction {ip:#x} {} on thread {:?}",
            module(ip),
            std::thread::current().name()
        ));
        // Not waited for: the crashing thread may hold it.
        if let Ok(running) = super::RUNNING.try_lock() {
            report(&format!("crash: tests running: {}", running.join(", ")));
        }
        // SAFETY: `frame` only reads each frame's instruction pointer.
        unsafe { _Unwind_Backtrace(frame, std::ptr::null_mut()) };
        // SAFETY: back to the default action, then the same signal again: the process
        // dies of it, as it would have without this handler.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }

    /// Installs the handler for this (child) process.
    pub fn install() {
        let handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) = on_fatal;
        for signal in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGILL,
            libc::SIGFPE,
        ] {
            // SAFETY: a zeroed sigaction is a valid empty one (no flags, empty mask); the
            // handler has the SA_SIGINFO signature and lives as long as the process.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = handler as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO;
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod crash_report {
    pub fn install() {}
}
