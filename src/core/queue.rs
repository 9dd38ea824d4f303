//! The shared state of one command queue: what events and the enqueue protocol need to
//! know about the queue that produced a command.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use crate::util::sync::{Guard, Mutex, rank};

use super::context::ContextCore;
use super::device::Device;
use super::echo::{self, Echo, RawEvent};
use super::gates::{failure_epoch, failures_possible};
use super::pins::LetGo;
use super::staging::{Pinned, STAGE_MAX, Staging};
use crate::checks::Limits;
use crate::error::Result;
use crate::ffi::{self, CL_COMPLETE, cl_command_queue, cl_event};
use crate::tracker::Lane;
use crate::util::next_id;

/// One command queue. Held by the public `Queue` handles and by every event the queue
/// produced, so a queue lives as long as a command of it may need a flush.
pub(crate) struct QueueCore {
    /// The driver's queue that commands go to now: replaced where a failure left the
    /// one before failing every command (the *renewed* rule of [`QueueCore::settle`]).
    raw: AtomicPtr<std::ffi::c_void>,
    /// Every driver queue `raw` has named, the current one last: those the *renewed* rule
    /// replaced (every command of each ended) are released with this one, since a thread
    /// may still hold one's handle from before the swap. Dropped before the other fields.
    owned: Mutex<Vec<ffi::OwnedQueue>, rank::Retired>,
    /// What a replacement queue is made on, and what launches are checked against.
    device: ffi::DeviceId,
    opencl_major: u32,
    pub(crate) lane: Lane,
    pub(crate) ctx: Arc<ContextCore>,
    /// The queue's device's limits, which launches are checked against.
    pub(crate) limits: Limits,
    /// Set by every enqueue, cleared by a flush.
    dirty: AtomicBool,
    /// Whether the queue records its commands' times (`CL_QUEUE_PROFILING_ENABLE`).
    pub(crate) profiling: bool,
    /// Pinned blocks that small blocking reads go through (see [`super::staging`]).
    pub(crate) staging: Option<Staging>,
    /// The commands that the driver may have skipped after a failure (see
    /// [`super::echo`]): kept on every queue, since no probe can show that a driver never
    /// does it.
    echo: Arc<EchoCell>,
    /// Whether the echo's window is open, as last seen under its lock, and the failure
    /// epoch at which [`QueueCore::settle`] last found nothing to do: with no window open
    /// and no failure since, `settle` takes no lock.
    echo_open: AtomicBool,
    settled_epoch: AtomicU64,
    /// Whether hazards that have ended are left out of wait lists even while no failure
    /// is possible ([`Behaviour::chains_events`](super::driver::Behaviour::chains_events)).
    pub(crate) drop_ended_hazards: bool,
    /// Whether a command waits on one event at most, each other event of its wait list
    /// through a marker enqueued just before it (an in-order queue of a driver that
    /// [mishandles failures](super::driver::Behaviour::mishandles_failures)): Intel's CPU
    /// runtime frees a command's event, retained or not, when two events of another
    /// command's wait list fail together (`examples/intel_cpu.rs`).
    single_event_waits: bool,
    /// Whether a command of the queue that fails ahead of its turn keeps its buffers until
    /// the commands before it on the queue have ended (an in-order queue of a driver that
    /// [mishandles failures](super::driver::Behaviour::mishandles_failures): design trap
    /// "Intel's CPU runtime keeps a failed command's buffers until its turn"), so that a
    /// release waits for those too ([`QueueCore::first_ahead_of`]).
    pub(crate) holds_failed_until_turn: bool,
    /// Whether the queue is flushed before a command that waits on another queue's command
    /// or a user event
    /// ([`Behaviour::ends_batches_together`](super::driver::Behaviour::ends_batches_together)).
    pub(crate) flush_before_foreign_waits: bool,
    /// Whether a launch waits for the pending launches of its kernel at other work sizes
    /// ([`Behaviour::orders_kernel_widths`](super::driver::Behaviour::orders_kernel_widths);
    /// not on a queue of single-event waits: the kernel layer's *widest first* rule).
    pub(crate) orders_kernel_widths: bool,
    /// The *finished queue* rule.
    finishes: Finishes,
    /// Whether each command's event keeps the command before it on the queue once a
    /// failure is possible (the echo's *queue order* rule): in order, and on a driver
    /// whose events do not keep buffers (one that does would keep the earlier command's
    /// buffers with it).
    follows: bool,
}

/// The *finished queue* rule's counts: how many [`QueueCore::finish`] calls have begun
/// (each takes the next ticket), and the highest ticket of one that succeeded while no
/// failure was possible. A command whose event read a lower count than that ticket when
/// it was made has ended, and did not fail.
#[derive(Default)]
pub(crate) struct Finishes {
    begun: AtomicU64,
    clean: AtomicU64,
}

impl Finishes {
    /// Takes the next ticket, before `clFinish` is called.
    fn begin(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Notes that the finish of `ticket` succeeded while no failure was possible.
    fn ended_clean(&self, ticket: u64) {
        self.clean.fetch_max(ticket, Ordering::Release);
    }

    /// The count an event stores, read once its command's enqueue has returned.
    fn count(&self) -> u64 {
        self.begun.load(Ordering::SeqCst)
    }

    /// Whether an event that read `count` was covered by a clean finish.
    fn covers(&self, count: u64) -> bool {
        count < self.clean.load(Ordering::Acquire)
    }
}

impl QueueCore {
    /// A new queue of `ctx` on `device` (one of its devices), out of order and with
    /// profiling as asked.
    pub(crate) fn create(
        ctx: &Arc<ContextCore>,
        device: &Device,
        out_of_order: bool,
        profiling: bool,
        stage_reads: bool,
    ) -> Result<QueueCore> {
        // On a driver measured to report failed commands complete, out of order only in
        // name: in order (see `Behaviour::reports_failed_complete`).
        let asked = out_of_order;
        let out_of_order = asked && !ctx.behaviour(device).mishandles_failures();
        if asked && !out_of_order {
            log::debug!(
                target: "cl_lifetime::queue",
                "{device}: an out-of-order queue is made in order (its driver reports failed commands complete)"
            );
        }
        let raw = ffi::create_queue(
            ctx.raw(),
            device.id,
            out_of_order,
            profiling,
            device.opencl_major(),
        )?;
        // SAFETY: clCreateCommandQueue* returned the queue with one reference, given to its
        // owner.
        let owned = unsafe { ffi::OwnedQueue::from_raw(raw) };
        // A driver may drop the flag silently (AMD's masks it): its properties, read back,
        // say what the queue is, and every rule of the library follows them.
        let out_of_order = match ffi::queue_info(raw) {
            Ok(info) => out_of_order && info.out_of_order,
            Err(_) => out_of_order,
        };
        Ok(QueueCore::adopt(
            ctx,
            owned,
            device,
            out_of_order,
            profiling,
            stage_reads,
        ))
    }

    /// The queue `owned` holds, of `ctx` on `device`, made with the properties given;
    /// small blocking reads go through pinned blocks when `stage_reads`.
    pub(crate) fn adopt(
        ctx: &Arc<ContextCore>,
        owned: ffi::OwnedQueue,
        device: &Device,
        out_of_order: bool,
        profiling: bool,
        stage_reads: bool,
    ) -> QueueCore {
        let id = next_id();
        let behaviour = ctx.behaviour(device);
        if crate::trace::on() {
            crate::trace::queue(id, ctx.id, device.name(), !out_of_order, profiling);
        }
        let single_event_waits = !out_of_order && behaviour.mishandles_failures();
        QueueCore {
            raw: AtomicPtr::new(owned.raw()),
            owned: Mutex::new(vec![owned]),
            device: device.id,
            opencl_major: device.opencl_major(),
            lane: Lane {
                id,
                in_order: !out_of_order,
            },
            ctx: ctx.clone(),
            limits: device.limits,
            dirty: AtomicBool::new(false),
            profiling,
            staging: stage_reads.then(Staging::default),
            echo: Arc::default(),
            echo_open: AtomicBool::new(false),
            settled_epoch: AtomicU64::new(u64::MAX),
            drop_ended_hazards: behaviour.chains_events(),
            flush_before_foreign_waits: behaviour.ends_batches_together(),
            single_event_waits,
            holds_failed_until_turn: single_event_waits,
            orders_kernel_widths: behaviour.orders_kernel_widths() && !single_event_waits,
            finishes: Finishes::default(),
            follows: !out_of_order && !behaviour.events_keep_buffers(),
        }
    }

    /// The echo's *settle* rule, before a command's records are locked: when a window of
    /// suspect commands is open and every command that may have opened it has ended,
    /// enqueues a marker and waits for it ([`QueueCore::await_marker`]), so that the
    /// command about to be enqueued runs.
    pub(crate) fn settle(&self) {
        if !failures_possible() {
            return;
        }
        let echo = &self.echo.echo;
        let epoch = failure_epoch();
        if !self.echo_open.load(Ordering::Acquire)
            && self.settled_epoch.load(Ordering::Acquire) == epoch
        {
            return;
        }
        // The marker to wait for: this thread's, or another's still pending.
        let marker = {
            let mut echo = echo.lock();
            let due = echo.before_enqueue(epoch);
            self.echo_open.store(echo.open(), Ordering::Release);
            if !due {
                if !echo.open() {
                    self.settled_epoch.store(epoch, Ordering::Release);
                    return;
                }
                // Another thread's settling marker is pending: this command waits for it
                // too, or it would be enqueued inside the window and reported failed
                // though it runs.
                // SAFETY: the pending marker is live (held by the echo).
                echo.pending_marker()
                    .and_then(|m| unsafe { RawEvent::retain(m.raw()) }.ok())
            } else {
                // SAFETY: `raw` is live (held by `self`); an empty wait list waits for
                // every command enqueued before.
                let marker = match unsafe { ffi::enqueue_marker(self.raw(), &[]) } {
                    Ok(marker) => marker,
                    Err(e) => {
                        log::warn!(target: "cl_lifetime::queue", "settling a queue after a failure: {e}");
                        return;
                    }
                };
                // SAFETY: the marker was just returned by the enqueue, so it is valid; this
                // second reference is this function's.
                let ours = unsafe { RawEvent::retain(marker) }.ok();
                // SAFETY: the enqueue's reference, which nothing else releases, goes to
                // the echo.
                echo.settling(unsafe { RawEvent::from_raw(marker) });
                ours
            }
        };
        let Some(marker) = marker else { return };
        if self.await_marker(&marker) {
            // Renewed before any thread that waited for the marker enqueues again: by
            // whichever of them sees it failed first (the *renewed* rule).
            self.renew_if_failed(&marker);
            // Sees the marker ended and closes the window.
            let mut echo = echo.lock();
            echo.before_enqueue(failure_epoch());
            self.echo_open.store(echo.open(), Ordering::Release);
        }
    }

    /// The driver's queue that commands go to now.
    pub(crate) fn raw(&self) -> cl_command_queue {
        self.raw.load(Ordering::Acquire)
    }

    /// The queue's device.
    pub(crate) fn device(&self) -> ffi::DeviceId {
        self.device
    }

    /// The *renewed* rule: a settling marker waits on nothing but the queue's order, so
    /// when it ends failed, the driver fails the queue's commands whatever they wait on
    /// (current Mesa's rusticl keeps a queue's first failure and fails every later command
    /// of the queue with it). Every command before the marker has ended, so the queue is
    /// replaced by a new one with the same device and properties, and commands go there
    /// from now on: nothing on the old queue is left to order them after, and no failure
    /// is inherited. Recognised at the failure, on every driver, with no probe; where the
    /// new queue cannot be made, commands stay on the old one and fail as its driver says.
    /// Every thread that waited for the marker calls this before its next enqueue, and the
    /// first renews: a thread that let another renew could enqueue on the old queue first.
    fn renew_if_failed(&self, marker: &RawEvent) {
        let status = echo::Watched::status(marker);
        if status >= CL_COMPLETE {
            return;
        }
        let mut owned = self.owned.lock();
        if ffi::event_queue(marker.raw()) != self.raw() {
            // Renewed already, by another thread that waited for this marker.
            return;
        }
        let fresh = ffi::create_queue(
            self.ctx.raw(),
            self.device,
            !self.lane.in_order,
            self.profiling,
            self.opencl_major,
        );
        match fresh {
            Ok(fresh) => {
                // SAFETY: clCreateCommandQueue* returned the queue with one reference,
                // given to its owner, kept before any thread can read it from `raw`.
                owned.push(unsafe { ffi::OwnedQueue::from_raw(fresh) });
                let old = self.raw.swap(fresh, Ordering::AcqRel);
                log::info!(
                    target: "cl_lifetime::queue",
                    "queue {old:p}: a marker waiting on nothing failed ({}), so its driver fails \
                     every later command; commands go to a new queue {fresh:p}",
                    crate::status::ExecStatus(status)
                );
            }
            Err(e) => log::warn!(
                target: "cl_lifetime::queue",
                "queue {:p} fails every command after a failure, and no new queue could be made: {e}",
                self.raw()
            ),
        }
    }

    /// Flushes the queue and waits for a settling marker to end, for at most
    /// [`MARKER_LIMIT`]; returns whether it ended. The marker waits only for commands
    /// before it on the queue, which were all seen ended or wait on nothing the host must
    /// do (it is enqueued only then), so it ends by itself; the limit is for a command
    /// enqueued on the queue behind the library's back. Waited for, so that the command
    /// after it is not tied to a pending marker: PoCL finishes a command twice when one of
    /// its dependencies fails while another completes (design trap "PoCL's double
    /// finish"), and the queue's order makes the marker one of them.
    fn await_marker(&self, marker: &RawEvent) -> bool {
        if let Err(e) = self.flush() {
            log::warn!(target: "cl_lifetime::queue", "settling a queue after a failure: {e}");
            return false;
        }
        let deadline = std::time::Instant::now() + MARKER_LIMIT;
        let mut pause = std::time::Duration::from_micros(20);
        loop {
            if echo::Watched::status(marker) <= ffi::CL_COMPLETE {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                let gates = self.ctx.gates.sites();
                let gates: Vec<String> = gates.iter().map(ToString::to_string).collect();
                log::warn!(
                    target: "cl_lifetime::queue",
                    "settling queue {:p} after a failure: its marker {:p} has not ended after \
                     {MARKER_LIMIT:?}; a command enqueued on it outside the library may wait on \
                     a user event not set (the context's unset ones were created at {})",
                    self.raw(),
                    marker.raw(),
                    if gates.is_empty() { "nowhere: none is unset".to_string() } else { gates.join(", ") }
                );
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(5));
        }
    }

    /// Enqueues one command through `enqueue` and returns its event with its sequence
    /// number on the queue (0 when the queue keeps no echo, or no failure is possible
    /// yet), the markers enqueued before it, each with its one reference for the
    /// caller, and the command before it on the queue, for its event to keep (the echo's
    /// *queue order* rule; `None` where the rule is off or no failure is possible). `enqueue` gets the wait list to give the driver: `wait`, or its last event
    /// where the queue waits on one event at most (the others go to markers just before).
    ///
    /// On a queue with an echo, the enqueue runs under the echo's lock, so that numbers
    /// follow the driver's order, and a settling marker goes in first when one is due
    /// (the echo's *settle* rule).
    ///
    /// # Safety
    ///
    /// Every event of `wait` is live.
    pub(crate) unsafe fn enqueue_tracked(
        &self,
        wait: &[cl_event],
        enqueue: impl FnOnce(&[cl_event]) -> Result<cl_event>,
    ) -> Result<(cl_event, u64, Vec<cl_event>, Option<RawEvent>)> {
        // No failure possible, no failure to mishandle: the wait list goes as it is.
        if !failures_possible() {
            return Ok((enqueue(wait)?, 0, Vec::new(), None));
        }
        let may_fail = !wait.is_empty();
        let mut echo = self.echo.echo.lock();
        if echo.before_enqueue(failure_epoch()) {
            // SAFETY: `raw` is live (held by `self`); an empty wait list waits for every
            // command enqueued before.
            match unsafe { ffi::enqueue_marker(self.raw(), &[]) } {
                Ok(marker) => {
                    // SAFETY: the marker was just returned by the enqueue, so it is valid;
                    // this second reference is this function's.
                    let ours = unsafe { RawEvent::retain(marker) }.ok();
                    // SAFETY: the enqueue's reference, which nothing else releases, goes
                    // to the echo.
                    echo.settling(unsafe { RawEvent::from_raw(marker) });
                    if let Some(ours) = ours {
                        if self.await_marker(&ours) {
                            self.renew_if_failed(&ours);
                            echo.before_enqueue(failure_epoch());
                        }
                    }
                }
                Err(e) => {
                    log::warn!(target: "cl_lifetime::queue", "settling a queue after a failure: {e}")
                }
            }
        }
        let mut markers = Vec::new();
        let raw = if self.single_event_waits && wait.len() >= 2 {
            // SAFETY: the events of `wait` are live, as the caller vouches.
            unsafe { self.one_event_wait(wait, &mut markers) }.and_then(|w| enqueue(&w))
        } else {
            enqueue(wait)
        };
        self.echo_open.store(echo.open(), Ordering::Release);
        let raw = match raw {
            Ok(raw) => raw,
            Err(e) => {
                for marker in markers {
                    // SAFETY: the marker's one reference, not handed to anyone.
                    let _ = unsafe { ffi::release_event(marker) };
                }
                return Err(e);
            }
        };
        let watched = if echo.watches(may_fail) {
            // SAFETY: `raw` was just returned by the enqueue, so it is valid.
            unsafe { RawEvent::retain(raw) }.ok()
        } else {
            None
        };
        let list = watched.is_some() && self.ctx.pins.is_some();
        let seq = echo.enqueued(watched);
        let before = if self.follows {
            // SAFETY: `raw` was just returned by the enqueue, so it is valid.
            unsafe { RawEvent::retain(raw) }.ok()
        } else {
            None
        };
        let before = before.and_then(|ours| echo.follow(ours));
        // The echo's lock goes first: a sweep holds the pins' lock and reads statuses,
        // which takes the echo's (lock order: pins, then echo).
        drop(echo);
        // Where events keep their buffers, a release has the echo let go of the events
        // that have ended, as it has the records (the pins' *swept at release* rule).
        if let Some(pins) = self.ctx.pins.as_ref().filter(|_| list) {
            if !self.echo.listed.swap(true, Ordering::AcqRel) {
                let cell: std::sync::Weak<dyn LetGo> = Arc::downgrade(&self.echo) as _;
                pins.list(cell);
            }
        }
        Ok((raw, seq, markers, before))
    }

    /// `wait`, or on a queue of single-event waits its last event not known complete,
    /// each other one waited on by a marker enqueued now (the queue is in order, so the
    /// command enqueued next runs after them), whose events go to `markers`: the caller
    /// keeps them with the command's dependencies, so that a failed marker outlives what
    /// it waits on (design trap "PoCL's failed-event notify list"). Events already
    /// complete are left out: a marker on one would be a pending command the next one is
    /// tied to by the queue's order, which PoCL may finish twice if that command's gate
    /// fails as the marker ends (design trap "PoCL's double finish").
    ///
    /// # Safety
    ///
    /// Every event of `wait` is live.
    unsafe fn one_event_wait<'w>(
        &self,
        wait: &'w [cl_event],
        markers: &mut Vec<cl_event>,
    ) -> Result<Cow<'w, [cl_event]>> {
        if !self.single_event_waits || wait.len() < 2 {
            return Ok(Cow::Borrowed(wait));
        }
        let pending: Vec<cl_event> = wait
            .iter()
            .copied()
            .filter(|&event| ffi::execution_status(event) != Ok(CL_COMPLETE))
            .collect();
        let Some((last, others)) = pending.split_last() else {
            return Ok(Cow::Owned(pending));
        };
        for &event in others {
            // SAFETY: the queue is live (held by `self`); `event` is live (the caller
            // vouches).
            markers.push(unsafe { ffi::enqueue_marker(self.raw(), &[event]) }?);
        }
        Ok(Cow::Owned(vec![*last]))
    }

    /// The oldest command before the one numbered `seq` on this queue that its echo
    /// watches and that has not ended, with a reference of its own, on a queue that
    /// [holds failed commands until their turn](QueueCore::holds_failed_until_turn) (none
    /// elsewhere, or for a command numbered before any failure was possible). Every command
    /// with a wait list is watched once a failure is possible, so a command before `seq`
    /// that is not watched waits for nothing but the queue's order, and ends by itself once
    /// the watched ones have. Flushes the queue when it finds one: a command never flushed
    /// may never start.
    pub(crate) fn first_ahead_of(&self, seq: u64) -> Option<RawEvent> {
        if !self.holds_failed_until_turn || seq == 0 {
            return None;
        }
        let ahead = self.echo.lock().first_unended_before(seq)?;
        if let Err(e) = self.flush_if_dirty() {
            log::debug!(target: "cl_lifetime::queue", "flushing before a wait on a command ahead of a failure: {e}");
        }
        Some(ahead)
    }

    /// Whether the command numbered `seq` on this queue, which the driver reports
    /// complete, may have been skipped after a failure (the echo's *skipped* rule).
    pub(crate) fn skipped(&self, seq: u64) -> bool {
        // 0: numbered before any failure was possible.
        if seq == 0 {
            return false;
        }
        let mut echo = self.echo.echo.lock();
        let skipped = echo.skipped(seq);
        self.echo_open.store(echo.open(), Ordering::Release);
        skipped
    }

    /// Notes that a command was enqueued and not flushed yet.
    pub(crate) fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Flushes the queue if it has unflushed work: before an event of it enters another
    /// queue's wait list (design trap "flush before a cross-queue wait").
    pub(crate) fn flush_if_dirty(&self) -> Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            ffi::flush(self.raw())?;
        }
        Ok(())
    }

    /// Flushes the queue.
    pub(crate) fn flush(&self) -> Result<()> {
        self.dirty.store(false, Ordering::Release);
        ffi::flush(self.raw())
    }

    /// A pinned block for a read of `bytes` through this queue's staging (the *small only*
    /// rule of [`super::staging`]), with the staging it goes back to; `None` when the
    /// queue does not stage, the read is too large, or no block can be made (its map
    /// failed: on NVIDIA, behind a failed command of the queue), which only means the
    /// read goes straight to its destination.
    pub(crate) fn stage(&self, bytes: usize) -> Option<(&Staging, Pinned)> {
        let staging = self.staging.as_ref().filter(|_| bytes <= STAGE_MAX)?;
        match staging.take(self.ctx.raw(), self.raw(), bytes) {
            Ok(block) => Some((staging, block)),
            Err(e) => {
                log::debug!(target: "cl_lifetime::queue", "reading without staging: {e}");
                None
            }
        }
    }

    /// `clFinish`, noting for the *finished queue* rule what it covered.
    ///
    /// The ticket is taken before `clFinish` is called, and an event reads the count after
    /// its enqueue returned: an event that read a count below the ticket was enqueued
    /// before this call, so `clFinish` waited for its command. Whether a failure is
    /// possible is read after the ticket is taken; every access here and in
    /// [`QueueCore::finish_count`] and `note_failure_possible` is `SeqCst`, so a command
    /// enqueued after a failure became possible (its gate made before it) is seen as such.
    ///
    /// Once a failure is possible, the failures of the commands it drained are seen before
    /// it returns: a driver's `clFinish` may return while a command it failed still reads
    /// queued (rusticl 22.3, a fill behind a failed gate, for a moment), and the echo would
    /// then see the failure only after commands enqueued after the finish, and report
    /// those failed though they run (design trap "a drained failure read late").
    pub(crate) fn finish(&self) -> Result<()> {
        self.flush_if_dirty()?;
        let ticket = self.finishes.begin();
        let clean = !crate::core::gates::failures_possible_now();
        let before = (!clean).then(|| self.echo.lock().next_seq());
        let finished = ffi::finish(self.raw());
        if let Some(before) = before {
            self.see_drained_failures(before);
        }
        finished?;
        if clean {
            self.finishes.ended_clean(ticket);
        }
        Ok(())
    }

    /// Waits until every watched command numbered below `before` (enqueued before a
    /// `clFinish` that has returned, so ended or about to read so) reads ended, then lets
    /// the echo see them: a failure among them opens its window now.
    fn see_drained_failures(&self, before: u64) {
        let unended = self.echo.lock().unended_before(before);
        if unended.is_empty() {
            return;
        }
        // Read, not waited on: they have ended for the driver, only their status lags.
        let deadline = std::time::Instant::now() + MARKER_LIMIT;
        while !unended.iter().all(|e| ffi::has_ended(e.raw()))
            && std::time::Instant::now() < deadline
        {
            std::thread::yield_now();
        }
        drop(unended);
        let mut echo = self.echo.lock();
        echo.let_go_of_ended();
        self.echo_open.store(echo.open(), Ordering::Release);
    }

    /// The count an event made now stores for [`QueueCore::finished`]: read once its
    /// command's enqueue has returned.
    pub(crate) fn finish_count(&self) -> u64 {
        self.finishes.count()
    }

    /// The *finished queue* rule: whether the command of an event that read
    /// `count` ([`QueueCore::finish_count`]) has ended without failing, known because a
    /// later `clFinish` succeeded while no failure was possible.
    pub(crate) fn finished(&self, count: u64) -> bool {
        self.finishes.covers(count)
    }
}

impl Drop for QueueCore {
    fn drop(&mut self) {
        let raw = self.raw();
        if let Some(staging) = &mut self.staging {
            staging.release_all(raw);
        }
        // Flushed first: a marker not yet submitted would never end.
        let _ = ffi::flush(self.raw());
        self.echo.echo.lock().wait_for_markers();
        // Then every driver queue, oldest first, by their owners (`owned`, dropped before
        // the other fields). A release flushes its queue; its commands still complete.
    }
}

/// A queue's echo, shared with the context's pins where events keep their buffers.
#[derive(Default)]
pub(crate) struct EchoCell {
    echo: Mutex<Echo<RawEvent>, rank::Echo>,
    /// Whether it is listed in the context's pins.
    listed: AtomicBool,
}

impl EchoCell {
    fn lock(&self) -> Guard<'_, Echo<RawEvent>> {
        self.echo.lock()
    }
}

impl LetGo for EchoCell {
    fn let_go_of_ended(&self) -> bool {
        // In the middle of an enqueue: asked again at the next sweep.
        let Some(mut echo) = self.echo.try_lock() else {
            return true;
        };
        echo.let_go_of_ended();
        let holds = echo.holds_events();
        if !holds {
            self.listed.store(false, Ordering::Release);
        }
        holds
    }
}

/// How long [`QueueCore::await_marker`] waits for a settling marker.
const MARKER_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::Finishes;

    #[test]
    fn a_clean_finish_covers_the_events_made_before_its_ticket() {
        let finishes = Finishes::default();
        let before = finishes.count();
        assert!(!finishes.covers(before), "no finish has ended yet");
        let ticket = finishes.begin();
        let during = finishes.count();
        finishes.ended_clean(ticket);
        assert!(finishes.covers(before));
        assert!(
            !finishes.covers(during),
            "an event made once the finish had begun may have been enqueued after clFinish"
        );
    }

    #[test]
    fn a_finish_that_was_not_clean_covers_nothing() {
        let finishes = Finishes::default();
        let before = finishes.count();
        let _unclean = finishes.begin();
        assert!(!finishes.covers(before));
        let clean = finishes.begin();
        let between = finishes.count();
        finishes.ended_clean(clean);
        assert!(finishes.covers(before) && !finishes.covers(between));
    }

    #[test]
    fn finishes_ending_out_of_order_keep_the_highest_clean_ticket() {
        let finishes = Finishes::default();
        let first = finishes.begin();
        let made = finishes.count();
        let second = finishes.begin();
        finishes.ended_clean(second);
        finishes.ended_clean(first);
        assert!(finishes.covers(made), "the later ticket still covers it");
    }
}
