//! `ClBuffer<T>`: one `cl_mem` and the events of every command that touched it.
//!
//! # The release guarantee
//!
//! 1. [`ClBuffer::release`] waits with `clWaitForEvents` on exactly the buffer's record
//!    (nothing when it is empty: DESIGN.md trap 1), then calls `clReleaseMemObject`. It
//!    never waits on work that did not touch the buffer: no `clFinish`.
//! 2. A command that failed still ends: the memory is released anyway and the failure is
//!    reported (trap 2).
//! 3. Host memory lent to a non-blocking write is kept alive until the write ends, and
//!    no longer: it goes at the next command or prune on the buffer after the write has
//!    ended, and at the latest after the release's wait (trap 14).
//! 4. `Drop` does the same as `release`, logs what went wrong, and never panics. A Drop
//!    that would wait behind a user event of its context that has not been set (the
//!    natural drop order `let gate; let buf;`, or an unwind) hands the release to the
//!    reaper thread instead and says so in the log; an explicit `release` waits, as
//!    asked, and names in the log the unset user events it may be behind once it has
//!    waited [`STALL_LOG_AFTER`].
//! 5. "Released" means freed: the library's destructor callback (which only signals, trap
//!    6) has fired before `release` returns. Some drivers drop their own reference to the
//!    buffer a moment after the last event completes (PoCL does, on its worker thread), so
//!    `release` waits for that signal too, up to the context's
//!    [free grace](crate::Context::free_grace); a reference held outside the library (a
//!    forgotten mapping, a raw retain) can delay it longer, which the report shows as
//!    `freed: false`, with the time spent in `free_wait`.
//! 6. A failed write leaves the buffer's contents undefined: a command that reads the
//!    buffer after its last write failed is refused with [`Error::DependencyFailed`]
//!    naming that write (a host read that was already enqueued returns that error when it
//!    ends). A write that reads nothing of the buffer (`write`, `write_owned`, `fill`, a
//!    copy into it) replaces the failed one, and reads succeed again.

use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::panic::Location;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use opencl3::memory as cl;
use opencl3::types::{cl_event, cl_mem};

use crate::context::{ContextInner, next_id};
use crate::error::{ClStatus, Error, ExecStatus, Result};
use crate::event::{CommandKind, Event, Status, wait_terminal};
use crate::program::KernelInner;
use crate::stats::Bucket;
use crate::tracker::{Access, EventSet, Lane, State};

/// Plain data that may live in a device buffer: `Copy`, no padding that matters, and
/// valid for every bit pattern the device may write.
///
/// # Safety
///
/// Implement it only for types that are valid for every bit pattern and contain no
/// pointers or references (`#[repr(C)]` structs of such fields, for example).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number is valid for every bit pattern and holds no pointer.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

// SAFETY: an array of `Pod` elements has no padding between them and inherits their
// validity for every bit pattern.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// How long a release waits by default, after `clReleaseMemObject`, for the driver to free
/// the memory (rule 5); [`Context::set_free_grace`](crate::Context::set_free_grace)
/// changes it.
pub const FREE_GRACE: Duration = Duration::from_secs(2);

/// How long an explicit release waits behind unset user events before it says so in the
/// log (rule 4).
pub const STALL_LOG_AFTER: Duration = Duration::from_secs(1);

/// Set by the destructor callback when the driver frees the memory.
#[derive(Default)]
struct Freed {
    done: Mutex<bool>,
    signal: Condvar,
}

impl Freed {
    /// Whether the callback has fired.
    pub(crate) fn fired(&self) -> bool {
        *self.done.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to `limit` for the callback; returns whether it fired.
    fn wait(&self, limit: Duration) -> bool {
        let done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        let (done, _) = self
            .signal
            .wait_timeout_while(done, limit, |done| !*done)
            .unwrap_or_else(PoisonError::into_inner);
        *done
    }
}

/// The destructor callback: it only signals (DESIGN.md trap 6).
extern "C" fn on_freed(_mem: cl_mem, user: *mut c_void) {
    // SAFETY: `user` is the `Arc<Freed>` leaked in `watch_free`, and OpenCL calls this
    // callback exactly once, so the reference is taken back exactly once.
    let freed = unsafe { Arc::from_raw(user.cast_const().cast::<Freed>()) };
    *freed.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
    freed.signal.notify_all();
}

/// Registers [`on_freed`] on `raw`. `None` when the driver refuses (then rule 5 is not
/// checked for this buffer).
fn watch_free(raw: cl_mem) -> Option<Arc<Freed>> {
    let freed = Arc::new(Freed::default());
    let user = Arc::into_raw(freed.clone()).cast_mut().cast::<c_void>();
    // SAFETY: `raw` is a live buffer; `user` is a leaked Arc that the callback takes back.
    match unsafe { cl::set_mem_object_destructor_callback(raw, on_freed, user) } {
        Ok(()) => Some(freed),
        Err(status) => {
            // SAFETY: the callback was not registered, so it will never take `user` back.
            drop(unsafe { Arc::from_raw(user.cast_const().cast::<Freed>()) });
            log::debug!(target: "cl_lifetime::buffer", "no destructor callback: {}", ClStatus(status));
            None
        }
    }
}

/// A command that ended with an error status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailedCommand {
    /// What kind of command it was.
    pub command: CommandKind,
    /// Its negative execution status.
    pub status: ExecStatus,
}

/// What [`ClBuffer::release`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseReport {
    /// How many recorded events had not ended when it was called, and so were waited on
    /// (0 for an empty or finished record).
    pub waited_on: usize,
    /// How long the wait took.
    pub waited: Duration,
    /// Commands on the buffer that failed; the memory was released all the same.
    pub failed: Vec<FailedCommand>,
    /// Whether the driver had freed the memory (its destructor callback fired) when
    /// `release` returned. `false` only when something outside the library still held a
    /// reference after the context's [free grace](crate::Context::free_grace).
    pub freed: bool,
    /// How long the release waited, after `clReleaseMemObject`, for the driver to free
    /// the memory (buffer rule 5): about zero normally, the whole grace when `freed` is
    /// `false`.
    pub free_wait: Duration,
    /// Whether the block went back to its [`Pool`](crate::Pool) instead, carrying its
    /// events to the next owner (nothing was waited for). A pool block the pool does not
    /// keep (over its threshold, or the pool is gone) is released deferred instead, and
    /// this is `false`; so is `freed`, since the release has not happened yet.
    pub recycled: bool,
}

/// The failure of `event`, if it failed: what command it was and its status.
pub(crate) fn failure_of(event: &Event) -> Option<FailedCommand> {
    match event.status() {
        Ok(Status::Failed(status)) => Some(FailedCommand {
            command: event.command_kind().unwrap_or(CommandKind::Other(0)),
            status,
        }),
        _ => None,
    }
}

impl From<FailedCommand> for Error {
    /// The error of a command that depends on the failed one (rule 6).
    fn from(failed: FailedCommand) -> Error {
        Error::DependencyFailed {
            command: failed.command,
            status: failed.status,
        }
    }
}

/// Waits for a host command that reads a buffer (a read or a map), then applies rule 6:
/// if `writer`, the buffer's last write when the command was enqueued, failed, the data
/// is not what was asked for.
pub(crate) fn settle(event: &Event, writer: Option<&Event>) -> Result<()> {
    let ended = event.wait();
    if crate::event::failures_possible() {
        if let Some(failed) = writer.and_then(failure_of) {
            return Err(failed.into());
        }
    }
    ended
}

/// At most this many failures are kept for the report.
const MAX_FAILURES: usize = 64;

/// How a command changes a buffer's mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapStep {
    /// An ordinary command: refused while a mapping conflicts with its access.
    None,
    /// Maps the buffer for host access of this kind.
    Map(Access),
    /// Ends a mapping of this kind.
    Unmap(Access),
}

/// Host mappings of a buffer that are alive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Mapped {
    #[default]
    No,
    /// This many read-only mappings.
    Reading(usize),
    /// One writable mapping.
    Writing,
}

/// Everything recorded about a buffer's commands.
#[derive(Default)]
pub(crate) struct Record {
    events: EventSet<Event>,
    /// Tracker rule 5: a recorded command failed while superseded ones may still run, so
    /// wait lists leave nothing out until the shadow has drained.
    tainted: bool,
    /// The failure epoch this record last looked at.
    seen_failures: u64,
    mapped: Mapped,
    failed: Vec<FailedCommand>,
    /// A recorded command was seen to fail (tracker rule 5 then trusts no cover until the
    /// shadow has drained).
    saw_failure: bool,
    /// The newest command that wrote the buffer, kept after it ends: a command that reads
    /// the buffer after it failed reads data that was never written (rule 6).
    last_write: Option<Event>,
    /// Host memory that in-flight commands use (rule 3), with the event that ends the use.
    host: Vec<(Event, Box<dyn Any + Send>)>,
}

impl Record {
    pub(crate) fn events(&self) -> &EventSet<Event> {
        &self.events
    }

    /// Tracker rule 5: whether wait lists must leave nothing out. Looks for failed events
    /// only when a failure has happened somewhere since the last look and superseded
    /// commands may still run.
    pub(crate) fn after_failure(&mut self) -> bool {
        let epoch = crate::event::failure_epoch();
        if self.seen_failures != epoch {
            self.seen_failures = epoch;
            if self.events.shadow_len() != 0
                && self
                    .events
                    .entries()
                    .iter()
                    .any(|e| matches!(e.event.status(), Ok(Status::Failed(_))))
            {
                self.tainted = true;
            }
        }
        self.tainted
    }

    /// A device command may not write memory the host has mapped, nor read memory the
    /// host may be writing; two writable mappings may not alias.
    pub(crate) fn check_map(&self, access: Access, step: MapStep) -> Result<()> {
        let allowed = match (step, self.mapped) {
            (MapStep::Unmap(_), _) | (_, Mapped::No) => true,
            (MapStep::None | MapStep::Map(Access::Read), Mapped::Reading(_)) => {
                access == Access::Read
            }
            _ => false,
        };
        if allowed { Ok(()) } else { Err(Error::Mapped) }
    }

    pub(crate) fn apply_map(&mut self, step: MapStep) {
        self.mapped = match (step, self.mapped) {
            (MapStep::Map(Access::Write), _) => Mapped::Writing,
            (MapStep::Map(Access::Read), Mapped::Reading(n)) => Mapped::Reading(n + 1),
            (MapStep::Map(Access::Read), _) => Mapped::Reading(1),
            (MapStep::Unmap(_), Mapped::Reading(n)) if n > 1 => Mapped::Reading(n - 1),
            (MapStep::Unmap(_), _) => Mapped::No,
            (MapStep::None, mapped) => mapped,
        };
    }

    pub(crate) fn fold(&mut self, count: usize, lane: Lane, marker: Event) {
        self.events.fold(count, lane, marker);
    }

    /// What became of `e`; a failure is kept for the report and taints the record. The
    /// failed event itself goes when its last handle does: the event keeps its own
    /// dependencies, and is kept past its last handle while they may still notify it
    /// (DESIGN.md trap 17; see [`crate::event`]).
    fn ended(e: &Event, failed: &mut Vec<FailedCommand>, saw: &mut bool) -> State {
        match e.status() {
            Ok(Status::Complete) => State::Complete,
            Ok(Status::Failed(_)) => {
                if failed.len() < MAX_FAILURES {
                    failed.extend(failure_of(e));
                }
                *saw = true;
                State::Failed
            }
            Ok(_) => State::Pending,
            // Unreadable status: nothing can wait on it either.
            Err(_) => State::Failed,
        }
    }

    /// Tracker rule 6 trusts queue order only while no failure has been possible in the
    /// process, and none has been seen in this record.
    fn trust_queue_order(&mut self, failures_possible: bool) {
        self.events
            .prune_each(failures_possible || self.saw_failure);
    }

    /// Records `event`; `failures_possible` is what the enqueue read from
    /// [`crate::event::failures_possible`].
    pub(crate) fn record(
        &mut self,
        lane: Lane,
        access: Access,
        event: Event,
        had_wait_list: bool,
        failures_possible: bool,
    ) {
        self.trust_queue_order(failures_possible);
        if access == Access::Write {
            self.last_write = Some(event.clone());
        }
        let (failed, saw) = (&mut self.failed, &mut self.saw_failure);
        self.events.record(lane, access, event, had_wait_list, |e| {
            Self::ended(e, failed, saw)
        });
        if self.saw_failure {
            self.tainted = true;
        }
        // Once every superseded command has ended, cover holds again (tracker rule 5).
        if self.events.shadow_len() == 0 {
            self.tainted = false;
            self.saw_failure = false;
        }
        self.prune_host();
    }

    /// Drops every event that has ended, keeping the failures for the report.
    fn prune_ended(&mut self) {
        self.trust_queue_order(crate::event::failures_possible());
        let (failed, saw) = (&mut self.failed, &mut self.saw_failure);
        self.events.prune(|e| Self::ended(e, failed, saw));
        self.prune_host();
    }

    /// Rule 3: host memory goes as soon as the command that used it has ended.
    fn prune_host(&mut self) {
        if !self.host.is_empty() {
            self.host.retain(|(e, _)| !e.is_terminal());
        }
    }

    /// Rule 6: the failure of the buffer's last write, if it failed (asks the driver until
    /// the write has ended, then remembers).
    pub(crate) fn failed_write(&self) -> Option<FailedCommand> {
        let write = self.last_write.as_ref()?;
        failure_of(write)
    }

    /// The newest write, for a host read to check once it has ended (rule 6).
    pub(crate) fn last_write(&self) -> Option<&Event> {
        self.last_write.as_ref()
    }

    /// Whether every command recorded here, and every use of lent host memory, has ended
    /// (asks the driver; never blocks).
    pub(crate) fn all_ended(&mut self) -> bool {
        self.prune_ended();
        self.events.is_empty() && self.events.shadow_len() == 0 && self.host.is_empty()
    }

    /// Flushes the library queues whose commands this record holds, for a release that
    /// polls them on the library's thread: a command never flushed may never start
    /// (Oclgrind runs nothing before a flush), and polling a status flushes nothing.
    fn flush_producers(&self) {
        let entries = self.events.entries().iter().chain(self.events.shadow());
        let events = entries
            .map(|e| &e.event)
            .chain(self.host.iter().map(|(e, _)| e));
        for event in events {
            if let Err(e) = event.flush_producer() {
                log::debug!(target: "cl_lifetime::buffer", "flushing before a deferred release: {e}");
            }
        }
    }

    fn keep_alive(&mut self, event: Event, payload: Box<dyn Any + Send>) {
        self.prune_host();
        self.host.push((event, payload));
    }
}

pub(crate) struct MemInner {
    raw: cl_mem,
    pub(crate) id: u64,
    bytes: usize,
    pub(crate) ctx: Arc<ContextInner>,
    record: Mutex<Record>,
    allocated_at: &'static Location<'static>,
    freed: Option<Arc<Freed>>,
    /// Where the ledger counts its bytes.
    bucket: Bucket,
    /// Where the block goes at its release instead of back to the driver.
    home: Option<Home>,
    /// Kernels that may hold this buffer as an argument (program rule 5), reset at the
    /// release.
    kernels: Mutex<Vec<Weak<KernelInner>>>,
}

/// The owner a block returns to, or keeps alive.
pub(crate) enum Home {
    /// Recycled into this pool at release.
    Pool(Arc<crate::pool::PoolInner>),
    /// A sub-buffer of this arena, which it keeps alive: never read, only held.
    Arena(#[allow(dead_code)] Arc<crate::pool::ArenaInner>),
}

// SAFETY: a cl_mem may be used from any thread (OpenCL 3.0 appendix A.2: every call is
// thread-safe except clSetKernelArg); the record is behind a Mutex.
unsafe impl Send for MemInner {}
// SAFETY: as above.
unsafe impl Sync for MemInner {}

impl MemInner {
    /// The size check every allocation makes: `len` elements of `T`, at least one byte, within
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE` of every device.
    pub(crate) fn check_size<T>(ctx: &ContextInner, len: usize) -> Result<usize> {
        if len == 0 || size_of::<T>() == 0 {
            return Err(Error::ZeroLength);
        }
        let max = ctx.max_alloc;
        len.checked_mul(size_of::<T>())
            .filter(|&b| b as u64 <= max)
            .ok_or(Error::TooLarge {
                bytes: (len as u64).saturating_mul(size_of::<T>() as u64),
                max,
            })
    }

    /// Takes ownership of `raw` (one reference) as a live block of `bytes`, handed out at
    /// `site`; `driver` when it was just created rather than reused.
    pub(crate) fn adopt(
        ctx: &Arc<ContextInner>,
        raw: cl_mem,
        bytes: usize,
        site: &'static Location<'static>,
        driver: bool,
    ) -> MemInner {
        log::debug!(target: "cl_lifetime::buffer", "allocated {bytes} bytes at {site}");
        let id = next_id();
        ctx.ledger.shift(bytes as u64, Bucket::Freed, Bucket::Live);
        ctx.ledger.handed_out(id, bytes as u64, site, driver);
        MemInner {
            raw,
            id,
            bytes,
            ctx: ctx.clone(),
            record: Mutex::new(Record::default()),
            allocated_at: site,
            freed: watch_free(raw),
            bucket: Bucket::Live,
            home: None,
            kernels: Mutex::default(),
        }
    }

    /// Takes ownership of `raw`, a sub-buffer (a view of memory the ledger already counts),
    /// handed out at `site`.
    pub(crate) fn adopt_view(
        ctx: &Arc<ContextInner>,
        raw: cl_mem,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> MemInner {
        MemInner {
            raw,
            id: next_id(),
            bytes,
            ctx: ctx.clone(),
            record: Mutex::new(Record::default()),
            allocated_at: site,
            freed: watch_free(raw),
            bucket: Bucket::Freed,
            home: None,
            kernels: Mutex::default(),
        }
    }

    /// Moves the block out, leaving a hollow `MemInner` whose drop does nothing.
    pub(crate) fn take_block(&mut self) -> MemInner {
        MemInner {
            raw: std::mem::replace(&mut self.raw, ptr::null_mut()),
            id: self.id,
            bytes: self.bytes,
            ctx: self.ctx.clone(),
            record: Mutex::new(std::mem::take(
                self.record
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner),
            )),
            allocated_at: self.allocated_at,
            freed: self.freed.take(),
            bucket: std::mem::replace(&mut self.bucket, Bucket::Freed),
            home: None,
            kernels: Mutex::new(std::mem::take(
                self.kernels
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner),
            )),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Re-registers a reused block with the ledger, as handed out at `site`.
    pub(crate) fn hand_out_again(&mut self, site: &'static Location<'static>) {
        self.allocated_at = site;
        self.ctx
            .ledger
            .shift(self.bytes as u64, self.bucket, Bucket::Live);
        self.ctx
            .ledger
            .handed_out(self.id, self.bytes as u64, site, false);
        self.bucket = Bucket::Live;
    }

    pub(crate) fn bucket(&self) -> Bucket {
        self.bucket
    }

    pub(crate) fn set_bucket(&mut self, bucket: Bucket) {
        self.bucket = bucket;
    }

    pub(crate) fn set_home(&mut self, home: Home) {
        self.home = Some(home);
    }

    /// Forgets the failures of an earlier owner (a pool block changing hands), and the
    /// events that have ended, so none of them reaches the new owner's report.
    pub(crate) fn clear_failures(&mut self) {
        let record = self
            .record
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        record.failed.clear();
        record.saw_failure = false;
        record.last_write = None;
        record.events.prune_each(true);
        record.events.prune(Event::state);
    }

    /// Releases the block on the reaper thread (reaper rule 1).
    pub(crate) fn release_deferred(self) {
        self.release_deferred_then(None);
    }

    /// [`MemInner::release_deferred`], calling `done` once the release is done (the driver
    /// freed the memory, or its grace passed): a pool counts the bytes until then.
    pub(crate) fn release_deferred_then(mut self, done: Option<Box<dyn FnOnce() + Send>>) {
        self.record
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .flush_producers();
        let ctx = self.ctx.clone();
        if self.bucket == Bucket::Live {
            ctx.ledger.given_back(self.id);
        }
        // A sub-buffer's bytes are its arena's, counted there (bucket `Freed`).
        if self.bucket != Bucket::Freed {
            ctx.ledger
                .shift(self.bytes as u64, self.bucket, Bucket::Pending);
            self.bucket = Bucket::Pending;
        }
        ctx.reaper.submit(Box::new(DeferredRelease {
            mem: self,
            freeing: None,
            done,
        }));
    }

    pub(crate) fn raw(&self) -> cl_mem {
        self.raw
    }

    /// Whether a command on `lane` could use this block with no wait (pool rule 7): every
    /// recorded command has ended or ran on `lane`, an in-order queue. Newest first, and it
    /// stops at the first that has not, so a block still in use costs one status query
    /// (an ended command's status is read from the driver once, then kept).
    pub(crate) fn free_for(&mut self, lane: Lane) -> bool {
        let events = &self
            .record
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .events;
        let ordered = |e: &crate::tracker::Entry<Event>| lane.in_order && e.lane == lane;
        events
            .entries()
            .iter()
            .rev()
            .chain(events.shadow())
            .all(|e| ordered(e) || e.event.state().has_ended())
    }

    /// Notes that `kernel` now holds this buffer as an argument (program rule 5).
    pub(crate) fn bound_to(&self, kernel: Weak<KernelInner>) {
        let mut kernels = self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        if !kernels.iter().any(|k| k.ptr_eq(&kernel)) {
            kernels.retain(|k| k.strong_count() > 0);
            kernels.push(kernel);
        }
    }

    /// Program rule 5: no kernel object keeps this buffer alive once it is released.
    fn unbind_kernels(&mut self) {
        let kernels = std::mem::take(
            self.kernels
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for kernel in kernels.iter().filter_map(Weak::upgrade) {
            kernel.unbind(self.id);
        }
    }

    pub(crate) fn lock_record(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn keep_alive(&self, event: Event, payload: Box<dyn Any + Send>) {
        self.lock_record().keep_alive(event, payload);
    }

    /// Rules 1 to 5, or back to the pool, blocking until the memory is freed or the grace
    /// has passed. Idempotent: the second call finds nothing.
    fn retire(&mut self) -> Result<ReleaseReport> {
        let (mut report, freed) = self.retire_then(true)?;
        if let Some(freed) = freed {
            let start = Instant::now();
            report.freed = freed.wait(self.ctx.free_grace());
            report.free_wait = start.elapsed();
            if !report.freed {
                log::warn!(
                    target: "cl_lifetime::buffer",
                    "buffer allocated at {} not freed {:?} after its release: \
                     something outside the library still holds a reference",
                    self.allocated_at,
                    report.free_wait
                );
            }
        }
        Ok(report)
    }

    /// Rules 1 to 4, or back to the pool: waits for the recorded commands (`block`; the
    /// reaper calls this only once they have all ended) and releases the memory. Returns
    /// the destructor signal still to wait for (rule 5), if it has not fired yet.
    fn retire_then(&mut self, block: bool) -> Result<(ReleaseReport, Option<Arc<Freed>>)> {
        if self.raw.is_null() {
            let report = ReleaseReport {
                freed: true,
                ..ReleaseReport::default()
            };
            return Ok((report, None));
        }
        if let Some(Home::Pool(pool)) = &self.home {
            let pool = pool.clone();
            self.home = None;
            let recycled = pool.recycle(self.take_block());
            let report = ReleaseReport {
                recycled,
                ..ReleaseReport::default()
            };
            return Ok((report, None));
        }
        let mut stages = Stages::start();
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        if self.bucket == Bucket::Live {
            self.ctx.ledger.given_back(self.id);
        }
        let record = self
            .record
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        stages.mark("ledger");
        record.prune_ended();
        stages.mark("status of the recorded events");
        let mut events: Vec<Event> = record.events.take().into_iter().map(|e| e.event).collect();
        events.extend(record.host.iter().map(|(e, _)| e.clone()));
        events.sort_by_key(|e| e.as_raw() as usize);
        events.dedup_by_key(|e| e.as_raw());
        let raws: Vec<cl_event> = events.iter().map(Event::as_raw).collect();

        let waited = if raws.is_empty() || !block {
            Duration::ZERO
        } else {
            let start = Instant::now();
            wait_reporting_stalls(&raws, &self.ctx.gates, self.allocated_at);
            start.elapsed()
        };

        stages.mark("wait");
        let mut failed = std::mem::take(&mut record.failed);
        failed.extend(events.iter().filter_map(failure_of));
        // Every command that used the host memory has ended (rule 3).
        record.host.clear();
        record.last_write = None;

        stages.mark("failures");
        self.unbind_kernels();
        stages.mark("kernel arguments reset");
        // SAFETY: `raw` came from clCreateBuffer and is released once, here (it was
        // swapped out for null above); every event that used it has ended (waited for
        // above, or found ended by the reaper before it called this).
        let released = unsafe { cl::release_mem_object(raw) };
        log::debug!(
            target: "cl_lifetime::buffer",
            "released {} bytes allocated at {} after waiting {:?} on {} events",
            self.bytes,
            self.allocated_at,
            waited,
            raws.len()
        );
        self.ctx
            .ledger
            .shift(self.bytes as u64, self.bucket, Bucket::Freed);
        self.bucket = Bucket::Freed;
        stages.mark("clReleaseMemObject");
        released.map_err(|s| Error::cl("clReleaseMemObject", s))?;
        let freed = self.freed.take().filter(|f| !f.fired());
        drop(events);
        stages.mark("events released");
        stages.log(self.allocated_at);
        let report = ReleaseReport {
            waited_on: raws.len(),
            waited,
            failed,
            freed: freed.is_none(),
            free_wait: Duration::ZERO,
            recycled: false,
        };
        Ok((report, freed))
    }

    /// Rule 4: whether this block's release would wait behind a user event of its
    /// context that has not been set. Answers `false` at once when every gate is set.
    fn behind_open_gate(&mut self) -> bool {
        self.ctx.gates.count() != 0
            && !self
                .record
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .all_ended()
    }
}

/// Waits until every event in `raws` has ended. While user events of the context are
/// not set, polls instead of blocking in `clWaitForEvents`, and after
/// [`STALL_LOG_AFTER`] says in the log which unset user events the release may be behind
/// (rule 4).
fn wait_reporting_stalls(
    raws: &[cl_event],
    gates: &crate::event::OpenGates,
    allocated_at: &Location<'_>,
) {
    if gates.count() == 0 {
        wait_terminal(raws);
        return;
    }
    let start = Instant::now();
    let mut pause = Duration::from_micros(20);
    let mut said = false;
    let ended = |raw: &cl_event| {
        crate::event::read_status(*raw).map_or(true, |s| s <= opencl3::event::CL_COMPLETE)
    };
    while !raws.iter().all(ended) {
        if !said && start.elapsed() >= STALL_LOG_AFTER {
            said = true;
            log::warn!(
                target: "cl_lifetime::buffer",
                "the release of the buffer allocated at {allocated_at} has waited {:?} for its \
                 commands; user events of its context not set yet (created at {}) may hold them",
                start.elapsed(),
                crate::context::sites(&gates.sites())
            );
        }
        if gates.count() == 0 {
            wait_terminal(raws);
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// A deferred release, advanced by the reaper without blocking (reaper rule 4): first the
/// recorded commands end, then the memory is released, then the driver frees it (or the
/// grace passes).
struct DeferredRelease {
    mem: MemInner,
    /// Released; waiting for the destructor callback until the deadline.
    freeing: Option<(Arc<Freed>, Instant)>,
    /// Called when the release is done (when the reaper drops it).
    done: Option<Box<dyn FnOnce() + Send>>,
}

impl Drop for DeferredRelease {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done();
        }
    }
}

impl crate::reaper::Deferred for DeferredRelease {
    fn poll(&mut self) -> bool {
        // Failed events kept for their dependencies go as those end, also while the
        // program enqueues nothing more.
        crate::event::graveyard::sweep();
        if let Some((freed, deadline)) = &self.freeing {
            if freed.fired() {
                return true;
            }
            if Instant::now() < *deadline {
                return false;
            }
            log::warn!(
                target: "cl_lifetime::buffer",
                "deferred release of the buffer allocated at {} not freed {:?} after \
                 clReleaseMemObject: something outside the library still holds a reference",
                self.mem.allocated_at,
                self.mem.ctx.free_grace()
            );
            return true;
        }
        let mem = &mut self.mem;
        if !mem.raw.is_null()
            && !mem
                .record
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .all_ended()
        {
            return false;
        }
        match mem.retire_then(false) {
            Ok((report, freed)) => {
                for failure in &report.failed {
                    log::warn!(
                        target: "cl_lifetime::buffer",
                        "a {:?} command on a buffer released deferred failed: {}",
                        failure.command,
                        failure.status
                    );
                }
                match freed {
                    Some(freed) => {
                        let deadline = Instant::now() + mem.ctx.free_grace();
                        self.freeing = Some((freed, deadline));
                        false
                    }
                    None => true,
                }
            }
            Err(e) => {
                log::error!(target: "cl_lifetime::buffer", "deferred release: {e}");
                true
            }
        }
    }
}

/// A release's time, stage by stage, logged at trace level under the target
/// `cl_lifetime::buffer::stages` (`RUST_LOG=cl_lifetime::buffer::stages=trace`)
/// for profiling: each stage's host time, library bookkeeping and driver calls alike. Costs
/// nothing when trace logging is off.
struct Stages {
    last: Option<Instant>,
    spent: Vec<(&'static str, Duration)>,
}

impl Stages {
    fn start() -> Stages {
        let on = log::log_enabled!(target: "cl_lifetime::buffer::stages", log::Level::Trace);
        Stages {
            last: on.then(Instant::now),
            spent: Vec::new(),
        }
    }

    /// Ends the stage called `name`.
    fn mark(&mut self, name: &'static str) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.spent.push((name, now - last));
            self.last = Some(now);
        }
    }

    fn log(&self, allocated_at: &Location<'_>) {
        if self.last.is_some() {
            let total: Duration = self.spent.iter().map(|(_, d)| *d).sum();
            let stages: Vec<String> = self
                .spent
                .iter()
                .map(|(name, d)| format!("{name} {:.2}", d.as_secs_f64() * 1e6))
                .collect();
            log::trace!(
                target: "cl_lifetime::buffer::stages",
                "release of the buffer allocated at {allocated_at}: {:.2} µs = {} (µs)",
                total.as_secs_f64() * 1e6,
                stages.join(", ")
            );
        }
    }
}

impl Drop for MemInner {
    fn drop(&mut self) {
        let pooled = matches!(self.home, Some(Home::Pool(_)));
        if !self.raw.is_null() && !pooled && self.behind_open_gate() {
            // Rule 4: the caller may be about to set the gate (it drops after this
            // buffer), or unwinding past it; waiting here could be forever.
            log::info!(
                target: "cl_lifetime::buffer",
                "the buffer allocated at {} was dropped while user events of its context \
                 are not set (created at {}); it is released on the library's thread",
                self.allocated_at,
                crate::context::sites(&self.ctx.gates.sites())
            );
            let mut block = self.take_block();
            // An arena home stays with the sub-buffer until its release is done.
            block.home = self.home.take();
            block.release_deferred();
            return;
        }
        match self.retire() {
            Ok(report) => {
                for failure in &report.failed {
                    log::warn!(
                        target: "cl_lifetime::buffer",
                        "a {:?} command on a dropped buffer failed: {}",
                        failure.command,
                        failure.status
                    );
                }
            }
            Err(e) => log::error!(target: "cl_lifetime::buffer", "dropping a buffer: {e}"),
        }
    }
}

/// A device buffer of `len` elements of `T`, released only after its own commands end.
///
/// Create one with [`Context::buffer`](crate::Context::buffer); use it through a
/// [`Queue`](crate::Queue). It is `Send` and `Sync`: several threads may enqueue commands
/// on one buffer at once.
pub struct ClBuffer<T: Pod> {
    mem: MemInner,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod> fmt::Debug for ClBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClBuffer")
            .field("len", &self.len)
            .field("raw", &self.mem.raw)
            .field("recorded", &self.record_len())
            .finish()
    }
}

impl<T: Pod> ClBuffer<T> {
    #[track_caller]
    pub(crate) fn create(ctx: &Arc<ContextInner>, len: usize, init: Option<&[T]>) -> Result<Self> {
        let bytes = MemInner::check_size::<T>(ctx, len)?;
        let (flags, host) = match init {
            Some(data) => (
                cl::CL_MEM_READ_WRITE | cl::CL_MEM_COPY_HOST_PTR,
                data.as_ptr().cast_mut().cast(),
            ),
            None => (cl::CL_MEM_READ_WRITE, ptr::null_mut()),
        };
        // SAFETY: `host` is null, or points to `bytes` readable bytes that OpenCL copies
        // before returning (CL_MEM_COPY_HOST_PTR).
        let raw = unsafe { cl::create_buffer(ctx.raw, flags, bytes, host) }
            .map_err(|s| Error::cl("clCreateBuffer", s))?;
        let mem = MemInner::adopt(ctx, raw, bytes, Location::caller(), true);
        Ok(ClBuffer::from_mem(mem, len))
    }

    pub(crate) fn into_mem(self) -> MemInner {
        let ClBuffer { mem, .. } = self;
        mem
    }

    pub(crate) fn from_mem(mem: MemInner, len: usize) -> Self {
        ClBuffer {
            mem,
            len,
            _elements: PhantomData,
        }
    }

    pub(crate) fn mem(&self) -> &MemInner {
        &self.mem
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a buffer holds at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.mem.bytes
    }

    /// How many events the record holds now. It stays small: completed events are
    /// pruned, and an in-order queue keeps only its newest read and write.
    pub fn record_len(&self) -> usize {
        self.mem.lock_record().events.len()
    }

    /// Waits for every command that touched the buffer, then releases it. When this
    /// returns, those commands have ended and `clReleaseMemObject` has been called.
    ///
    /// A failed command does not stop the release; it is listed in the report.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when `clReleaseMemObject` itself fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<f32>(1024)?;
    /// queue.fill(&buf, 1.0)?;
    /// let report = buf.release()?;
    /// assert!(report.waited_on <= 1);
    /// assert!(report.failed.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(mut self) -> Result<ReleaseReport> {
        self.mem.retire()
    }

    /// Releases the buffer without blocking: its memory is freed on the context's reaper
    /// thread once every command that touched it has ended (reaper rules). The bytes show
    /// as pending release until then; [`Context::wait_deferred`](crate::Context::wait_deferred)
    /// waits for them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u8>(1 << 20)?;
    /// queue.fill(&buf, 0)?;
    /// buf.release_deferred(); // returns at once
    /// ctx.wait_deferred();
    /// assert_eq!(ctx.memory_stats().pending_release_bytes, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn release_deferred(self) {
        let ClBuffer { mut mem, .. } = self;
        // Only a pool takes the block back; an arena home stays with the sub-buffer, to
        // keep the arena busy until the release is done.
        if let Some(Home::Pool(pool)) = &mem.home {
            let pool = pool.clone();
            mem.home = None;
            pool.recycle(mem.take_block());
        } else {
            mem.release_deferred();
        }
    }

    /// Grows or shrinks the buffer to `new_len` elements, keeping the contents that fit:
    /// a new block, a device-side copy ordered after every command on the old one, and a
    /// deferred release of the old block. The host never waits.
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`](crate::Context::buffer) for the new block, or from the copy;
    /// on error the buffer is unchanged.
    #[track_caller]
    pub fn resize(&mut self, queue: &crate::Queue, new_len: usize) -> Result<()> {
        let mut grown = ClBuffer::<T>::create(&self.mem.ctx, new_len, None)?;
        let keep = self.len.min(new_len);
        queue.copy_range(self, 0, &grown, 0, keep)?;
        std::mem::swap(self, &mut grown);
        grown.release_deferred();
        Ok(())
    }

    /// The raw handle, still owned by this buffer. Commands enqueued on it directly are
    /// not recorded: the release guarantee does not cover them.
    pub fn as_raw(&self) -> cl_mem {
        self.mem.raw
    }
}

/// A non-blocking read into an owned `Vec`; [`PendingRead::wait`] returns it.
///
/// Dropping it without waiting blocks until the read has ended, since the device is
/// writing into its memory.
pub struct PendingRead<T: Pod> {
    event: Event,
    /// The buffer's last write when the read was enqueued (buffer rule 6).
    writer: Option<Event>,
    /// Capacity `len`; length 0 until the read has completed.
    data: Vec<T>,
    len: usize,
}

impl<T: Pod> fmt::Debug for PendingRead<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRead")
            .field("event", &self.event)
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod> PendingRead<T> {
    pub(crate) fn new(event: Event, writer: Option<Event>, data: Vec<T>, len: usize) -> Self {
        PendingRead {
            event,
            writer,
            data,
            len,
        }
    }

    /// The read's event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Blocks until the read has ended and returns the data.
    ///
    /// # Errors
    ///
    /// [`Error::DependencyFailed`] when the buffer's last write before the read failed
    /// (rule 6), [`Error::CommandFailed`] when the read itself failed.
    pub fn wait(mut self) -> Result<Vec<T>> {
        settle(&self.event, self.writer.as_ref())?;
        // SAFETY: the read completed, so the device wrote all `len` elements, and the
        // capacity is at least `len` (allocated with it).
        unsafe { self.data.set_len(self.len) };
        Ok(std::mem::take(&mut self.data))
    }
}

impl<T: Pod> Drop for PendingRead<T> {
    fn drop(&mut self) {
        if self.data.capacity() != 0 {
            // The device may still be writing into `data`.
            wait_terminal(&[self.event.as_raw()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Stages;

    #[test]
    fn release_stages_are_not_timed_while_trace_logging_is_off() {
        // No logger is installed in unit tests, so trace is off: no clock is read and
        // nothing is kept.
        let mut stages = Stages::start();
        stages.mark("ledger");
        stages.mark("wait");
        assert!(stages.last.is_none());
        assert!(stages.spent.is_empty());
    }

    #[test]
    fn release_stages_keep_each_stage_in_order_when_on() {
        let mut stages = Stages {
            last: Some(std::time::Instant::now()),
            spent: Vec::new(),
        };
        stages.mark("ledger");
        stages.mark("wait");
        let names: Vec<&str> = stages.spent.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["ledger", "wait"]);
    }
}
