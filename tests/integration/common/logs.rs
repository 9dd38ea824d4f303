//! The test binary's one logger: it keeps the library's warnings and errors for the tests
//! to read back, and prints what `RUST_LOG` asks for as `env_logger` does.
//!
//! A process has one logger, and every area's tests share the process, so no test
//! installs its own: [`install`] runs before any test opens a context
//! ([`super::context`] and the other context helpers call it).

use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread::ThreadId;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// A warning or error the library logged.
#[derive(Clone, Debug)]
pub struct Line {
    /// The thread that logged it.
    pub thread: ThreadId,
    pub target: String,
    pub message: String,
}

static LINES: Mutex<Vec<Line>> = Mutex::new(Vec::new());

struct Capture {
    print: env_logger::Logger,
}

impl Log for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Warn || self.print.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if record.level() <= Level::Warn && record.target().starts_with("cl_lifetime") {
            LINES
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Line {
                    thread: std::thread::current().id(),
                    target: record.target().to_string(),
                    message: record.args().to_string(),
                });
        }
        if self.print.matches(record) {
            self.print.log(record);
        }
    }

    fn flush(&self) {
        self.print.flush();
    }
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();

/// Installs the capturing logger, once per process.
pub fn install() {
    super::child::note_running_test();
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        super::child::report_crashes_where_asked();
        let capture = CAPTURE.get_or_init(|| Capture {
            print: env_logger::Builder::from_default_env()
                .is_test(true)
                .build(),
        });
        let level = capture.print.filter().max(LevelFilter::Warn);
        log::set_logger(capture).expect("no other logger is installed in the test binary");
        log::set_max_level(level);
    });
}

/// The warnings and errors the library has logged in this process so far that `keep`
/// keeps, oldest first.
pub fn lines(keep: impl Fn(&Line) -> bool) -> Vec<Line> {
    LINES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|l| keep(l))
        .cloned()
        .collect()
}

/// The messages of `target` that `thread` logged.
pub fn messages(thread: ThreadId, target: &str) -> Vec<String> {
    lines(|l| l.thread == thread && l.target == target)
        .into_iter()
        .map(|l| l.message)
        .collect()
}
