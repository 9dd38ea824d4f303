//! The opt-in lifetime trace: every allocation, enqueue, command end, release, deferred
//! release, pool reuse and trim the library makes, with timestamps, written as the Chrome
//! trace-event JSON that [Perfetto](https://ui.perfetto.dev) and `chrome://tracing` open.
//!
//! Turn it on with [`start`] (and write it with [`finish`]), or for a whole program with
//! the environment variable [`TRACE_VAR`] (`CL_LIFETIME_TRACE=trace.json`): the file is then
//! written when the program's last [`Context`](crate::Context) is dropped. Beside the JSON
//! goes a page that draws it, with no dependency ([`viewer_path`]: `trace.html` for
//! `trace.json`): open it in a browser.
//!
//! ```
//! # fn main() -> Result<(), cl_lifetime::Error> {
//! let path = std::env::temp_dir().join("cl-lifetime-doc-trace.json");
//! cl_lifetime::trace::start(&path)?;
//! let ctx = cl_lifetime::Context::from_env()?;
//! let queue = ctx.queue()?;
//! let buf = ctx.buffer::<u32>(1024)?;
//! queue.fill(&buf, 7)?;
//! buf.release()?;
//! assert_eq!(cl_lifetime::trace::finish()?, Some(path.clone()));
//! let json = std::fs::read_to_string(&path).expect("the trace was written");
//! assert!(json.starts_with("{\"traceEvents\":["));
//! let page = std::fs::read_to_string(cl_lifetime::trace::viewer_path(&path)).unwrap();
//! assert!(page.contains("<svg id=\"view\""));
//! # Ok(())
//! # }
//! ```
//!
//! # What the file shows
//!
//! - **Commands**, one track per queue (several where an out-of-order queue runs commands
//!   side by side): each command from its start to its end, with the buffers it touched and
//!   how, its wait list and its status. Without profiling, its start is when it was
//!   enqueued, or when the command before it on its in-order queue ended if that was later;
//!   with profiling on its queue, the device's duration, ending when the library learnt
//!   the command had ended (the device's clock has no fixed offset from the host's), and
//!   the device's own times among its details.
//! - **Buffers**, one track per buffer: from its allocation to its `clReleaseMemObject`,
//!   with its phases inside (held by the program, pending a deferred release, kept by a
//!   pool), the release and what it waited on, reuse from a pool, and the destructor
//!   callback that says the driver freed the memory.
//! - **Memory**, a counter per context: live, pending and pooled bytes.
//! - **Hazard waits** across queues, as flow arrows from the command waited on to the one
//!   that waited.
//!
//! # Rules
//!
//! - **Off costs one branch.** Every hook in the library sits behind one relaxed
//!   atomic load; nothing else runs while no trace is on.
//! - **Recorded, then written.** While on, hooks append small records under one lock; the
//!   JSON is made only when the trace is written.
//! - **Host time.** Timestamps are microseconds of the host's monotonic clock since the
//!   trace began.
//! - **A command's status is the library's.** The terminal status the library read for it
//!   (after a failure it does not take a driver's "complete" on trust: NVIDIA reports some
//!   commands whose gate failed complete), else its end callback's.
//! - **A command ends when first known to.** Its end is the earlier of its end callback
//!   (`clSetEventCallback`) and the moment the library first read a terminal status for it:
//!   callbacks can run late, and the library never releases a buffer before it has seen
//!   the buffer's commands end.

mod json;

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::util::sync::{Guard, Mutex, rank};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::ffi::{self, cl_event, cl_int};

/// The environment variable that turns the trace on for a whole program: the path of
/// the JSON file, written when the program's last context is dropped.
pub const TRACE_VAR: &str = "CL_LIFETIME_TRACE";

static ON: AtomicBool = AtomicBool::new(false);
static TRACER: Mutex<Option<Tracer>, rank::Tracer> = Mutex::new(None);

/// Whether a trace is being recorded: the one branch every hook costs while none is.
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Whether a trace is being recorded.
pub fn is_on() -> bool {
    on()
}

/// Starts recording a trace, to be written to `path` by [`finish`] or [`write()`].
///
/// # Errors
///
/// [`Error::TraceAlreadyOn`] when a trace is already being recorded (it goes on,
/// unchanged); [`Error::TraceUnwritable`] when `path` cannot be created (checked now, so
/// that a long run does not find out at its end).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let path = std::env::temp_dir().join("cl-lifetime-doc-trace-start.json");
/// cl_lifetime::trace::start(&path)?;
/// assert!(cl_lifetime::trace::is_on());
/// assert!(cl_lifetime::trace::start(&path).is_err()); // one trace at a time
/// let ctx = cl_lifetime::Context::from_env()?;
/// ctx.buffer_from(&[1u32; 64])?.release()?;
/// cl_lifetime::trace::finish()?;
/// assert!(std::fs::read_to_string(&path).unwrap().contains("traceEvents"));
/// # Ok(())
/// # }
/// ```
pub fn start(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref().to_path_buf();
    let mut tracer = lock();
    if let Some(t) = tracer.as_ref() {
        return Err(Error::TraceAlreadyOn {
            path: t.path.clone(),
        });
    }
    std::fs::File::create(&path).map_err(|source| Error::TraceUnwritable {
        path: path.clone(),
        source,
    })?;
    *tracer = Some(Tracer::new(path, false));
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

/// Stops recording and writes the trace; returns its path, or `None` when no trace was
/// on.
///
/// # Errors
///
/// [`Error::TraceUnwritable`] when the file cannot be written; the trace is stopped all
/// the same.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let path = std::env::temp_dir().join("cl-lifetime-doc-trace-finish.json");
/// assert_eq!(cl_lifetime::trace::finish()?, None); // no trace on
/// cl_lifetime::trace::start(&path)?;
/// let ctx = cl_lifetime::Context::from_env()?;
/// ctx.queue()?.fill(&ctx.buffer::<u8>(256)?, 1)?.wait()?;
/// assert_eq!(cl_lifetime::trace::finish()?, Some(path.clone()));
/// assert!(!cl_lifetime::trace::is_on());
/// assert!(std::fs::metadata(&path).unwrap().len() > 0);
/// # Ok(())
/// # }
/// ```
pub fn finish() -> Result<Option<PathBuf>> {
    let tracer = {
        let mut guard = lock();
        ON.store(false, Ordering::Relaxed);
        guard.take()
    };
    match tracer {
        Some(t) => t.write_file().map(Some),
        None => Ok(None),
    }
}

/// Stops recording and drops what was recorded, writing nothing; returns whether a trace
/// was on.
pub fn discard() -> bool {
    let mut guard = lock();
    ON.store(false, Ordering::Relaxed);
    guard.take().is_some()
}

/// Writes what the trace holds so far, and goes on recording; returns its path, or `None`
/// when no trace is on.
///
/// # Errors
///
/// [`Error::TraceUnwritable`] when the file cannot be written.
pub fn write() -> Result<Option<PathBuf>> {
    let guard = lock();
    match guard.as_ref() {
        Some(t) => t.write_file().map(Some),
        None => Ok(None),
    }
}

fn lock() -> Guard<'static, Option<Tracer>> {
    TRACER.lock()
}

/// Runs `f` on the trace being recorded, if any.
fn with(f: impl FnOnce(&mut Tracer)) {
    if let Some(t) = lock().as_mut() {
        f(t);
    }
}

/// Appends the record `make` gives for the time now, if a trace is being recorded.
fn record(make: impl FnOnce(f64) -> Rec) {
    with(|t| {
        let at = t.now();
        t.records.push(make(at));
    });
}

/// How a command used a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    Read,
    Write,
}

/// Where a buffer's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Held by the program.
    Live,
    /// Released with `release_deferred`, its commands not ended yet.
    Pending,
    /// Kept by a pool.
    Pooled,
    /// Released to the driver (`clReleaseMemObject`).
    Released,
}

/// One entry of a command's wait list.
#[derive(Clone, Copy, Debug)]
enum Wait {
    Command(u64),
    /// An event the trace has no command for (a user event, another library's).
    Other(usize),
}

/// One thing the library did, at `at` microseconds after the trace began.
#[derive(Debug)]
enum Rec {
    Queue {
        id: u64,
        ctx: u64,
        device: String,
        in_order: bool,
        profiling: bool,
    },
    Command {
        id: u64,
        queue: u64,
        kind: u32,
        at: f64,
        touches: Vec<(u64, Use)>,
        waits: Vec<Wait>,
    },
    /// The end callback ran: the command ended with `status`; device times (queued,
    /// submitted, started, ended, in nanoseconds) where its queue profiles.
    Ended {
        id: u64,
        at: f64,
        status: cl_int,
        device: Option<[u64; 4]>,
    },
    /// The library read the terminal status `status` for the command.
    Seen {
        id: u64,
        at: f64,
        status: cl_int,
    },
    Phase {
        block: u64,
        ctx: u64,
        bytes: u64,
        to: Phase,
        at: f64,
    },
    HandedOut {
        block: u64,
        site: &'static Location<'static>,
        source: &'static str,
        at: f64,
    },
    Release {
        block: u64,
        from: f64,
        at: f64,
        /// `None` for a deferred release.
        waited_on: Option<usize>,
    },
    Freed {
        block: u64,
        at: f64,
    },
    Memory {
        ctx: u64,
        at: f64,
        live: u64,
        pending: u64,
        pooled: u64,
    },
}

struct Tracer {
    path: PathBuf,
    t0: Instant,
    /// Turned on by [`TRACE_VAR`]: written at the drop of the last open context.
    from_env: bool,
    open_contexts: usize,
    records: Vec<Rec>,
    /// Commands by event handle, for wait lists and statuses read.
    commands: HashMap<usize, u64>,
    /// This trace's number in the process: a command's end is recorded only in the trace
    /// it was enqueued in.
    session: u64,
}

/// The next command's id, never reused by a later trace of the process.
static NEXT_COMMAND: AtomicU64 = AtomicU64::new(1);
/// The number of the last trace started.
static SESSIONS: AtomicU64 = AtomicU64::new(0);

impl Tracer {
    fn new(path: PathBuf, from_env: bool) -> Tracer {
        Tracer {
            path,
            t0: Instant::now(),
            from_env,
            open_contexts: 0,
            records: Vec::new(),
            commands: HashMap::new(),
            session: SESSIONS.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    fn now(&self) -> f64 {
        micros(self.t0.elapsed())
    }

    /// Writes the JSON to its path, and beside it the viewer page with the same trace in
    /// it ([`viewer_path`]).
    fn write_file(&self) -> Result<PathBuf> {
        let mut text = Vec::new();
        json::write(&self.records, self.now(), &mut text).map_err(|source| {
            Error::TraceUnwritable {
                path: self.path.clone(),
                source,
            }
        })?;
        std::fs::write(&self.path, &text).map_err(|source| Error::TraceUnwritable {
            path: self.path.clone(),
            source,
        })?;
        let page = viewer_path(&self.path);
        std::fs::write(&page, viewer_page(&String::from_utf8_lossy(&text))).map_err(|source| {
            Error::TraceUnwritable {
                path: page.clone(),
                source,
            }
        })?;
        Ok(self.path.clone())
    }
}

/// The viewer page: a static HTML file with no dependency that draws a trace (one row per
/// track, commands as boxes, the memory counters as areas, hazard waits as arrows).
const VIEWER: &str = include_str!("view.html");

/// Where the viewer page of the trace written to `json` goes: beside it, its name ending
/// in `.html` (`trace.json` gives `trace.html`).
pub fn viewer_path(json: &Path) -> PathBuf {
    json.with_extension("html")
}

/// The viewer page with `trace_json` in it, escaped so that no string in the JSON can end
/// the page's script element.
fn viewer_page(trace_json: &str) -> String {
    const EMPTY: &str = r#"{"traceEvents":[]}</script>"#;
    let escaped = trace_json.trim().replace("</", r"<\/");
    VIEWER.replacen(EMPTY, &format!("{escaped}</script>"), 1)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Turns the trace on from [`TRACE_VAR`], once per process, when it names a file.
pub(crate) fn start_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(path) = std::env::var_os(TRACE_VAR).filter(|p| !p.is_empty()) else {
            return;
        };
        let path = PathBuf::from(path);
        let mut tracer = lock();
        if tracer.is_some() {
            return;
        }
        match std::fs::File::create(&path) {
            Ok(_) => {
                *tracer = Some(Tracer::new(path, true));
                ON.store(true, Ordering::Relaxed);
            }
            Err(e) => log::warn!(
                target: "cl_lifetime::trace",
                "{TRACE_VAR}={}: cannot create the file ({e}); no trace",
                path.display()
            ),
        }
    });
}

/// A context was opened.
pub(crate) fn context_opened() {
    with(|t| t.open_contexts += 1);
}

/// A context was dropped: the last one writes a trace [`TRACE_VAR`] turned on.
pub(crate) fn context_closed() {
    let mut guard = lock();
    let Some(t) = guard.as_mut() else { return };
    t.open_contexts = t.open_contexts.saturating_sub(1);
    if t.open_contexts == 0 && t.from_env {
        match t.write_file() {
            Ok(path) => {
                log::info!(target: "cl_lifetime::trace", "trace written to {}", path.display())
            }
            Err(e) => log::warn!(target: "cl_lifetime::trace", "{e}"),
        }
    }
}

/// A queue was made.
pub(crate) fn queue(id: u64, ctx: u64, device: &str, in_order: bool, profiling: bool) {
    with(|t| {
        t.records.push(Rec::Queue {
            id,
            ctx,
            device: device.to_string(),
            in_order,
            profiling,
        });
    });
}

/// A command was enqueued on `queue` as `raw`, touching `touches` after `wait`. Asks the
/// driver to say when it ends.
pub(crate) fn command(
    raw: cl_event,
    queue: u64,
    profiling: bool,
    touches: Vec<(u64, Use)>,
    wait: &[cl_event],
) {
    let kind = ffi::command_type(raw).unwrap_or(0);
    let (mut id, mut session) = (0, 0);
    with(|t| {
        id = NEXT_COMMAND.fetch_add(1, Ordering::Relaxed);
        session = t.session;
        let waits = wait
            .iter()
            .map(|w| match t.commands.get(&(*w as usize)) {
                Some(&c) => Wait::Command(c),
                None => Wait::Other(*w as usize),
            })
            .collect();
        t.commands.insert(raw as usize, id);
        let at = t.now();
        t.records.push(Rec::Command {
            id,
            queue,
            kind,
            at,
            touches,
            waits,
        });
    });
    if id == 0 {
        return;
    }
    // Outside the lock: a driver may run the callback at once, on this thread.
    let watch = EndWatch {
        id,
        session,
        profiling,
    };
    let user = Box::into_raw(Box::new(watch)).cast::<c_void>();
    // SAFETY: `raw` was just enqueued and is live; `on_command_end` takes `user` back
    // exactly once.
    if let Err(e) = unsafe { ffi::on_end(raw, on_command_end, user) } {
        // SAFETY: the callback was not registered, so it will never take `user` back.
        drop(unsafe { Box::from_raw(user.cast::<EndWatch>()) });
        log::debug!(target: "cl_lifetime::trace", "no end callback: {e}");
    }
}

struct EndWatch {
    id: u64,
    /// The trace it was enqueued in.
    session: u64,
    profiling: bool,
}

/// The end callback: notes the time, the status and, where the queue profiles, the
/// device's times (design trap "nothing blocking in callbacks": these are reads).
extern "C" fn on_command_end(raw: cl_event, status: cl_int, user: *mut c_void) {
    // SAFETY: `user` is the `EndWatch` boxed in `command`, and OpenCL calls this callback
    // exactly once, so it is taken back exactly once.
    let watch = unsafe { Box::from_raw(user.cast::<EndWatch>()) };
    let device = (watch.profiling && status == ffi::CL_COMPLETE)
        .then(|| ffi::profiling_times(raw).ok())
        .flatten();
    with(|t| {
        // A command of a trace already finished ends in none.
        if t.session != watch.session {
            return;
        }
        let at = t.now();
        t.records.push(Rec::Ended {
            id: watch.id,
            at,
            status,
            device,
        });
    });
}

/// `raw` is an event the library did not enqueue (a user event, another library's): a
/// freed command's event may have had its address, and wait lists name it as it is.
pub(crate) fn not_a_command(raw: cl_event) {
    with(|t| {
        t.commands.remove(&(raw as usize));
    });
}

/// The library read the terminal status `status` for `raw` (some drivers run no end
/// callback for a failed command: rusticl).
pub(crate) fn seen_ended(raw: cl_event, status: cl_int) {
    with(|t| {
        if let Some(&id) = t.commands.get(&(raw as usize)) {
            let at = t.now();
            t.records.push(Rec::Seen { id, at, status });
        }
    });
}

/// A buffer's bytes moved to `to`; `memory` is its context's live, pending and pooled
/// bytes after the move.
pub(crate) fn phase(block: u64, ctx: u64, bytes: u64, to: Phase, memory: [u64; 3]) {
    let [live, pending, pooled] = memory;
    record(|at| Rec::Phase {
        block,
        ctx,
        bytes,
        to,
        at,
    });
    record(|at| Rec::Memory {
        ctx,
        at,
        live,
        pending,
        pooled,
    });
}

/// A buffer was handed out at `site`, from `source` (the driver, a pool, a deferred
/// release taken over).
pub(crate) fn handed_out(block: u64, site: &'static Location<'static>, source: &'static str) {
    record(|at| Rec::HandedOut {
        block,
        site,
        source,
        at,
    });
}

/// A release that began at `from`: a blocking one that waited on `waited_on` commands, or
/// (`None`) a deferred one, made once its commands had ended.
pub(crate) fn release(block: u64, from: Instant, waited_on: Option<usize>) {
    with(|t| {
        let from = micros(from.saturating_duration_since(t.t0));
        let at = t.now();
        t.records.push(Rec::Release {
            block,
            from,
            at,
            waited_on,
        });
    });
}

/// The driver's destructor callback for a buffer has been seen.
pub(crate) fn freed(block: u64) {
    record(|at| Rec::Freed { block, at });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: the trace is the process's.
    #[test]
    fn a_trace_is_refused_where_it_cannot_be_written_or_is_already_on() {
        let nowhere = Path::new("/nonexistent-directory/trace.json");
        assert!(matches!(start(nowhere), Err(Error::TraceUnwritable { .. })));
        assert!(!is_on());
        let path =
            std::env::temp_dir().join(format!("cl-lifetime-unit-{}.json", std::process::id()));
        start(&path).unwrap();
        let again = start(std::env::temp_dir().join("other.json"));
        assert!(matches!(again, Err(Error::TraceAlreadyOn { path: ref p }) if *p == path));
        assert_eq!(finish().unwrap(), Some(path.clone()));
        assert_eq!(finish().unwrap(), None, "finished once");
        let json = std::fs::read_to_string(&path).unwrap();
        assert!(json.starts_with("{\"traceEvents\":["), "{json}");
        std::fs::remove_file(&path).unwrap();
    }
}
