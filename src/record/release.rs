//! Releases: blocking ([`Block::retire`]), on the reaper thread ([`DeferredRelease`]), or
//! back to the block's owner; and the report of what was waited for.

use std::any::Any;
use std::panic::Location;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::util::sync::{Mutex, rank};
use std::time::{Duration, Instant};

use super::block::{Alloc, Block, Home, Memory};
use super::failure::FailedCommand;
use crate::core::context::{ContextCore, svm_calls};
use crate::core::gates::OpenGates;
use crate::core::reaper::{Deferred, Step, held_for_reuse};
use crate::core::stats::{Bucket, Source};
use crate::error::Result;
use crate::event::{Event, graveyard};
use crate::ffi::{self, Freed, cl_event};
use crate::util::sites;
use crate::util::stages::Stages;

/// How long an explicit release waits behind unset user events before it says so in the
/// log (the *drop behind a gate* rule of [`crate::record`]).
pub const STALL_LOG_AFTER: Duration = Duration::from_secs(1);

/// What [`ClBuffer::release`](crate::ClBuffer::release) did.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Pool, PoolOptions, ReleaseReport};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u8>(4096)?;
/// queue.fill(&buf, 1)?.wait()?;
/// let report: ReleaseReport = buf.release()?;
/// assert_eq!(report.waited_on, 0); // its one command had ended
/// assert!(report.freed && report.failed.is_empty() && !report.recycled);
/// let pool = Pool::new(&ctx, PoolOptions::default())?;
/// let pooled = pool.acquire::<u8>(4096)?;
/// assert!(pooled.release()?.recycled); // back to its pool: nothing waited for
/// # Ok(())
/// # }
/// ```
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
    /// reference after the context's [free grace](crate::Context::free_grace). A carve of an
    /// [`Arena`](crate::Arena) has no memory of its own: its sub-buffer stays with the
    /// arena, for the next carve of its region, until the arena's release (the *shelved,
    /// never released* rule), and this is `true`.
    pub freed: bool,
    /// How long the release waited, after `clReleaseMemObject`, for the driver to free
    /// the memory (the *released means freed* rule): about zero normally, the whole grace when `freed` is
    /// `false`.
    pub free_wait: Duration,
    /// Whether the block went back to its [`Pool`](crate::Pool) instead, carrying its
    /// events to the next owner (nothing was waited for). Views do not cost reuse: the
    /// block goes back whatever [views](crate::View) of it went to kernels, and the next
    /// owner starts with none of their sub-buffers (released once the commands that used
    /// them have ended). A pool block the pool does not
    /// keep (over its threshold, or the pool is gone) is released deferred instead, and
    /// this is `false`; so is `freed`, since the release has not happened yet.
    pub recycled: bool,
}

impl Block {
    /// A blocking release, or back to the owner: the *exact wait* to *released means
    /// freed* rules of [`crate::record`], waiting for the memory to be freed or the grace
    /// to pass. Idempotent: the second call finds nothing.
    pub(crate) fn retire(&mut self) -> Result<ReleaseReport> {
        let (mut report, freed) = self.retire_then(true)?;
        if let Some(freed) = freed {
            let start = Instant::now();
            report.freed = self.wait_freed(&freed);
            report.free_wait = start.elapsed();
            if report.freed && crate::trace::on() {
                crate::trace::freed(self.id);
            }
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

    /// Waits up to the context's free grace for `freed` to fire. Where the context has
    /// pins, sweeps them and the graveyard every millisecond meanwhile (their *swept at
    /// release* rule): a record locked at the first sweep, or an event kept until its
    /// command ended, may hold an event that keeps this memory.
    fn wait_freed(&self, freed: &Freed) -> bool {
        let grace = self.ctx.free_grace();
        let Some(pins) = &self.ctx.pins else {
            return freed.wait(grace);
        };
        let start = Instant::now();
        loop {
            let slice = grace
                .saturating_sub(start.elapsed())
                .min(Duration::from_millis(1));
            if freed.wait(slice) {
                return true;
            }
            if slice.is_zero() {
                return false;
            }
            graveyard::sweep();
            pins.sweep();
        }
    }

    /// The *exact wait*, *failures end too*, *lent host memory* and *drop behind a gate*
    /// rules, or back to the owner: waits for the recorded commands (`block`; the
    /// reaper calls this only once they have all ended) and releases the memory. Returns
    /// the destructor signal still to wait for (*released means freed*), if it has not fired yet.
    fn retire_then(&mut self, block: bool) -> Result<(ReleaseReport, Option<Arc<Freed>>)> {
        if self.alloc.is_released() {
            let report = ReleaseReport {
                freed: true,
                ..ReleaseReport::default()
            };
            return Ok((report, None));
        }
        if let Some(recycled) = self.back_to_owner() {
            let report = ReleaseReport {
                recycled,
                ..ReleaseReport::default()
            };
            return Ok((report, None));
        }
        let mut stages = Stages::start();
        let called = crate::trace::on().then(Instant::now);
        let alloc = std::mem::replace(&mut self.alloc, Alloc::Released);
        let raw = alloc.raw();
        self.given_back();
        let mut record = self.record.lock();
        stages.mark("ledger");
        record.prune_ended();
        stages.mark("status of the recorded events");
        if block {
            // While a gate is closed the wait polls statuses, which submit nothing, and
            // rusticl runs nothing that was not flushed: the commands' queues are flushed
            // first (design trap "flush before a cross-queue wait", for the host).
            record.flush_producers();
        }
        let (events, unasked, mut failed) = record.take_for_release();
        let raws: Vec<cl_event> = events.iter().map(Event::raw).collect();

        let waited = if raws.is_empty() || !block {
            Duration::ZERO
        } else {
            let start = Instant::now();
            wait_reporting_stalls(&raws, &self.ctx.gates, self.allocated_at);
            start.elapsed()
        };

        stages.mark("wait");
        for event in events.iter().chain(&unasked) {
            failed.collect(event);
        }
        // The *failed ahead of its turn* rule: the driver frees a failed command's buffers
        // only once the commands before it on its queue have ended. The reaper calls this
        // only once they have (`Record::all_ended`).
        let mut waited = waited;
        while let Some((_, ahead)) = block.then(|| failed.first_ahead()).flatten() {
            let start = Instant::now();
            wait_reporting_stalls(&[ahead.raw()], &self.ctx.gates, self.allocated_at);
            waited += start.elapsed();
        }
        drop(unasked);
        record.released();
        drop(record);
        // Before the memory: on rusticl an event keeps its command's buffers alive (design
        // trap "rusticl's events keep their buffers"), in this record and in the records
        // of the other buffers of its commands (the pins' *swept at release* rule).
        drop(events);
        if let Some(pins) = &self.ctx.pins {
            pins.sweep();
        }
        stages.mark("failures and events released");
        // The *shelved* rule ([`crate::core::shelf`]): a carve goes on its arena's shelf.
        let shelf = match (self.memory, &self.home) {
            (Memory::Buffer, Some(Home::KeepAlive(_))) => ffi::mem_parent(raw).ok().flatten(),
            _ => None,
        };
        let mut on_shelf = false;
        // The sub-buffer *gone before the memory* rule: every command has ended.
        self.release_subs();
        let released = match alloc {
            // Every event that used it has ended (waited for above, or found ended by the
            // reaper before it called this).
            Alloc::Buffer(owned) => {
                // Before the release: the driver may hand the handle out again after it.
                self.ctx.untrack(raw);
                let shelved = match shelf {
                    Some((root, origin)) => self.ctx.shelves.put(root, (origin, self.bytes), owned),
                    None => Err(owned),
                };
                match shelved {
                    Ok(()) => {
                        on_shelf = true;
                        stages.mark("shelved for its root");
                        Ok(())
                    }
                    Err(owned) => {
                        // Before the root: its shelf goes first.
                        self.ctx.shelves.release_of(raw);
                        let released = owned.release();
                        stages.mark("clReleaseMemObject");
                        released
                    }
                }
            }
            Alloc::Svm(svm, _) => {
                let released = {
                    let _one_at_a_time = svm_calls();
                    // SAFETY: every command that used it has ended, as above, and the SVM
                    // call lock is held. Kernels hold no reference to it: an argument set
                    // to it is set again at the next launch that names it (its block ID is
                    // new).
                    unsafe { svm.free() }
                };
                stages.mark("clSVMFree");
                released
            }
            // Taken at the top of this function, where it was checked.
            Alloc::Released => Ok(()),
        };
        let watched = self.freed.take();
        // A buffer is freed when its destructor callback has fired, SVM inside clSVMFree.
        let freed_now = self.is_svm() || watched.as_ref().is_some_and(|f| f.fired());
        if crate::trace::on() && freed_now {
            crate::trace::freed(self.id);
        }
        let unfreed = watched.filter(|f| !f.fired());
        // The *unbind at release* rule, only where it matters: a kernel argument can keep
        // the memory only if the driver has not freed it already (PoCL frees it inside
        // clReleaseMemObject, so the arguments it was set to are left as they are; they
        // name a block that no launch can name again), or where it was not released but
        // shelved (its root's release must find no argument holding it).
        if unfreed.is_some() || self.shared || released.is_err() || on_shelf {
            self.unbind_kernels();
            stages.mark("kernel arguments reset");
        }
        log::debug!(
            target: "cl_lifetime::buffer",
            "released {} bytes allocated at {} after waiting {:?} on {} events",
            self.bytes,
            self.allocated_at,
            waited,
            raws.len()
        );
        if let Some(called) = called {
            crate::trace::release(self.id, called, block.then_some(raws.len()));
        }
        self.move_to(Bucket::Freed);
        released?;
        let report_freed = unfreed.is_none();
        // Other code keeps its own reference to an adopted buffer: its memory goes with
        // that, not with this release, which waits for nothing more.
        let freed = if self.shared { None } else { unfreed };
        stages.log(self.allocated_at);
        let report = ReleaseReport {
            waited_on: raws.len(),
            waited,
            failed: failed.into_list(),
            freed: report_freed,
            free_wait: Duration::ZERO,
            recycled: false,
        };
        Ok((report, freed))
    }

    /// The events a release would wait for now (every recorded command not seen ended),
    /// with their queues flushed; none where the block goes back to its owner, whose
    /// release waits for nothing. For a release that awaits them first.
    pub(crate) fn awaited_at_release(&mut self) -> Vec<Event> {
        if self.alloc.is_released() || matches!(self.home, Some(Home::Owner(_))) {
            return Vec::new();
        }
        let mut record = self.record.lock();
        record.prune_ended();
        record.flush_producers();
        record.pending_events()
    }

    /// The oldest command ahead of one of the block's failed ones on its queue that has
    /// not ended (the record's *failed ahead of its turn* rule), for a release that has
    /// awaited [`Block::awaited_at_release`] (a command seen failed only then may have
    /// some), one at a time; `None` where the block goes back to its owner.
    pub(crate) fn awaited_ahead(&mut self) -> Option<Event> {
        if self.alloc.is_released() || matches!(self.home, Some(Home::Owner(_))) {
            return None;
        }
        let mut record = self.record.lock();
        record.prune_ended();
        record.first_ahead_of_failures()
    }

    /// Releases the block on the reaper thread (the reaper's rules, [`crate::core::reaper`]).
    pub(crate) fn release_deferred(self) {
        self.release_deferred_then(None);
    }

    /// [`Block::release_deferred`], calling `done` once the release is done (the driver
    /// freed the memory, or its grace passed): a pool counts the bytes until then.
    pub(crate) fn release_deferred_then(mut self, done: Option<Box<dyn FnOnce() + Send>>) {
        self.record.lock().flush_producers();
        self.given_back();
        // A sub-buffer's bytes are its arena's, counted there (bucket `Freed`).
        if self.bucket != Bucket::Freed {
            self.move_to(Bucket::Pending);
        }
        let ctx = self.ctx.clone();
        // The reaper's *reclaim* rule: a plain block is parked, for a new buffer of its
        // size to take over once its commands have ended.
        let parked = done.is_none() && self.reclaimable();
        let held = if parked {
            let bytes = self.bytes;
            let slot = Arc::new(Slot {
                block: Mutex::new(Some(self)),
                ended: AtomicBool::new(false),
            });
            let listed: Arc<dyn Any + Send + Sync> = slot.clone();
            ctx.parked.park(bytes, Arc::downgrade(&listed));
            Held::Parked(slot)
        } else {
            Held::Own(self)
        };
        ctx.reaper.submit(
            Box::new(DeferredRelease {
                held,
                ended_at: None,
                freeing: None,
                done,
            }),
            parked,
        );
    }

    /// Whether a later allocation may take this block over while its deferred release
    /// waits (the reaper's *reclaim* rule): a whole buffer the library made, that no one
    /// else holds and no owner takes back (not shared virtual memory, which a new buffer
    /// cannot be).
    fn reclaimable(&self) -> bool {
        !self.alloc.is_released()
            && self.memory == Memory::Buffer
            && self.home.is_none()
            && !self.shared
            && self.bucket == Bucket::Pending
    }

    /// The reaper's *reclaim* rule: a parked block of `bytes` whose commands have all
    /// ended, none failed, handed out again at `site` with an empty record and no
    /// sub-buffers; `None` when
    /// there is none. A block whose commands failed is left to the reaper, which reports
    /// the failures.
    pub(crate) fn reclaim(
        ctx: &ContextCore,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Option<Block> {
        let ready = |slot: &Slot| slot.ended.load(Ordering::Relaxed);
        let mut block = ctx.parked.take(bytes, ready, |slot: &Slot| {
            // The reaper holds the slot while it looks at it: that block is not taken.
            let mut held = slot.block.try_lock()?;
            let taken_over = {
                let mut record = held.as_mut()?.record.lock();
                // One the reaper found ended costs no status query.
                record.all_ended() && !record.saw_failures()
            };
            if !taken_over {
                return None;
            }
            held.take()
        })?;
        // Its commands have all ended: the old owner's sub-buffers go now (the
        // sub-buffers' *left behind at a change of owner* rule), before the record.
        block.leave_subs_behind();
        // A new record, which the context's pins do not list.
        block.record = Arc::default();
        block.allocated_at = site;
        block.move_to(Bucket::Live);
        ctx.ledger
            .handed_out(block.id, bytes as u64, site, Source::Reclaimed);
        log::debug!(
            target: "cl_lifetime::buffer",
            "{bytes} bytes at {site}: took over a deferred release whose commands have ended"
        );
        Some(block)
    }

    /// Gives the block back without blocking: to its owner when it has one (a pool), else
    /// released deferred. A home that only keeps something alive (an arena) stays with
    /// the block until its release is done.
    pub(crate) fn hand_back_deferred(mut self) {
        if self.back_to_owner().is_none() {
            self.release_deferred();
        }
    }

    /// Whether every command recorded on the block has ended (asks the driver; never
    /// blocks).
    fn ended(&mut self) -> bool {
        self.alloc.is_released() || self.record.lock().all_ended()
    }

    /// The *drop behind a gate* rule: whether this block's release would wait behind a user event of its
    /// context that has not been set. Answers `false` at once when every gate is set.
    fn behind_open_gate(&mut self) -> bool {
        self.ctx.gates.count() != 0 && !self.record.lock().all_ended()
    }
}

/// Waits until every event in `raws` has ended. While user events of the context are
/// not set, polls instead of blocking in `clWaitForEvents`, and after
/// [`STALL_LOG_AFTER`] says in the log which unset user events the release may be behind
/// (the *drop behind a gate* rule).
fn wait_reporting_stalls(raws: &[cl_event], gates: &OpenGates, allocated_at: &Location<'_>) {
    if gates.count() == 0 {
        ffi::wait_terminal(raws);
        return;
    }
    let start = Instant::now();
    let mut pause = Duration::from_micros(20);
    let mut said = false;
    while !raws.iter().all(|&raw| ffi::has_ended(raw)) {
        if !said && start.elapsed() >= STALL_LOG_AFTER {
            said = true;
            log::warn!(
                target: "cl_lifetime::buffer",
                "the release of the buffer allocated at {allocated_at} has waited {:?} for its \
                 commands; user events of its context not set yet (created at {}) may hold them",
                start.elapsed(),
                sites(&gates.sites())
            );
        }
        if gates.count() == 0 {
            ffi::wait_terminal(raws);
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// A deferred release, advanced by the reaper without blocking (the reaper's *finished first* rule): first the
/// recorded commands end, then the memory is released, then the driver frees it (or the
/// grace passes).
struct DeferredRelease {
    held: Held,
    /// When the reaper first found the parked block's commands ended (the reaper's *held
    /// for reuse* rule).
    ended_at: Option<Instant>,
    /// Released; waiting for the destructor callback until the deadline (the grace
    /// after the release), with the allocation site for the log.
    freeing: Option<(Arc<Freed>, Instant, &'static Location<'static>, Duration)>,
    /// Called when the release is done (when the reaper drops it).
    done: Option<Box<dyn FnOnce() + Send>>,
}

/// A parked block's slot (the reaper's *reclaim* rule): emptied by the allocation that
/// takes the block over, or by the reaper when it begins the release.
struct Slot {
    block: Mutex<Option<Block>, rank::DeferredSlot>,
    /// The reaper found the block's commands ended (its *held for reuse* rule): an
    /// allocation takes this one first, and finds its events' statuses already read.
    ended: AtomicBool,
}

/// The block a deferred release frees.
// The job that holds it is boxed already; boxing the block too would cost an allocation
// per release.
#[allow(clippy::large_enum_variant)]
enum Held {
    Own(Block),
    /// Parked: a new buffer may still take it over.
    Parked(Arc<Slot>),
}

impl Drop for DeferredRelease {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done();
        }
    }
}

impl Deferred for DeferredRelease {
    fn poll(&mut self, hurry: bool) -> Step {
        // Failed events kept for their dependencies go as those end, also while the
        // program enqueues nothing more.
        graveyard::sweep();
        if let Some((freed, deadline, site, grace)) = &self.freeing {
            if freed.fired() {
                return Step::Done;
            }
            // The pins' *swept at release* rule, while the memory is not freed.
            if let Held::Own(block) = &self.held {
                if let Some(pins) = &block.ctx.pins {
                    pins.sweep();
                }
            }
            if Instant::now() < *deadline {
                return Step::Pending;
            }
            log::warn!(
                target: "cl_lifetime::buffer",
                "deferred release of the buffer allocated at {} not freed {:?} after \
                 clReleaseMemObject: something outside the library still holds a reference",
                site,
                grace
            );
            return Step::Done;
        }
        if let Held::Parked(slot) = &self.held {
            let mut parked = slot.block.lock();
            let Some(block) = parked.as_mut() else {
                // A new buffer took it over: nothing to release.
                return Step::Moot;
            };
            if !block.ended() {
                return Step::Pending;
            }
            // A new buffer of its size may still take it over.
            slot.ended.store(true, Ordering::Relaxed);
            if held_for_reuse(&mut self.ended_at, Instant::now(), hurry) {
                return Step::Pending;
            }
            // Its commands have ended: from here on the release is the reaper's alone.
            let Some(block) = parked.take() else {
                return Step::Done;
            };
            drop(parked);
            self.held = Held::Own(block);
        }
        let Held::Own(block) = &mut self.held else {
            return Step::Done;
        };
        if !block.ended() {
            return Step::Pending;
        }
        match block.retire_then(false) {
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
                        let grace = block.ctx.free_grace();
                        let deadline = Instant::now() + grace;
                        self.freeing = Some((freed, deadline, block.allocated_at, grace));
                        Step::Pending
                    }
                    None => Step::Done,
                }
            }
            Err(e) => {
                log::error!(target: "cl_lifetime::buffer", "deferred release: {e}");
                Step::Done
            }
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let pooled = matches!(self.home, Some(Home::Owner(_)));
        if !self.alloc.is_released() && !pooled && self.behind_open_gate() {
            // The drop behind a gate rule: the caller may be about to set the gate (it drops after this
            // buffer), or unwinding past it; waiting here could be forever.
            log::info!(
                target: "cl_lifetime::buffer",
                "the buffer allocated at {} was dropped while user events of its context \
                 are not set (created at {}); it is released on the library's thread",
                self.allocated_at,
                sites(&self.ctx.gates.sites())
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
