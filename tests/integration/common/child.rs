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

/// Runs `body` in a child process (this test binary again, running only the test `name`,
/// its full path: see [`test_path`]), failing the test if the child crashes, fails, does
/// not run the body, or has not ended after `limit`. `env` adds variables to the child's
/// environment, which is otherwise the one this process started with.
///
/// In the child, `body` runs; in the parent, `body` is not called.
pub fn isolated(name: &str, limit: Duration, env: &[(&str, &str)], body: impl FnOnce()) {
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
