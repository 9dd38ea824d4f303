//! The enqueue protocol, in one place: gather the hazards, enqueue, commit the event on
//! every buffer touched, then fold.
//!
//! # Rules
//!
//! - **Every command recorded.** Every command that touches a buffer records its event
//!   there, with its access: writes, reads, copies (both ends), fills, maps, unmaps and
//!   kernel launches.
//! - **Locked in ID order.** The records of all buffers a command touches are locked, in
//!   buffer-ID order, from before the wait list is computed until the new event is
//!   recorded, so the order of the records is the order of the enqueues, whatever the
//!   threads do (the *lock order* of [`crate::record`]).
//! - **Two ranges.** A command that touches one buffer twice (a copy within it, a kernel
//!   given two views of it) keeps each range that shares no byte with the other apart: it
//!   waits on the hazards of each range with that range's access, and is recorded once per
//!   range, so that a copy from elements 0..2 onto 14..16 is a read of 0..2 and a write of
//!   14..16, not a write of 0..16, and when it fails it leaves only 14..16 to the *failed
//!   write* rule of [`crate::record`]
//!   (`failures::a_failed_command_that_touched_two_ranges_refuses_only_the_bytes_it_wrote`).
//!   Its failure is reported once ([`super::failure::Failures`]).
//! - **Hazards and dependencies.** The wait list is the buffers' hazards (the
//!   [`tracker`](crate::tracker)'s *hazards* and *same-queue elision* rules: read after
//!   write, write after read or write, nothing from the command's own in-order queue),
//!   plus the extra dependencies given to [`Queue::after`](crate::Queue::after).
//! - **Failures change the wait list.** Once a failure is possible (the *failures
//!   possible* flag of [`crate::core::gates`]), the status of every event that would
//!   enter the wait list is read first: ended hazards are left out, since drivers never
//!   run a command whose wait list holds a failed event (PoCL leaves it queued forever,
//!   and its in-order queue with it); a dependency given to `after` that has failed
//!   refuses the command with [`Error::DependencyFailed`],
//!   and so does a command that reads a buffer whose last write failed (the *failed
//!   write* rule). Once a failure has been seen in the context, the command's own in-order
//!   queue is not trusted either (PoCL stops ordering a queue's later commands after its
//!   pending ones once one of them has failed): every unended hazard goes in the wait
//!   list. Before any of that, no status is read on the enqueue path (it costs
//!   microseconds on NVIDIA). Once a failure is possible, the new event keeps the events
//!   of its wait list until it is seen complete: a failed command is not released while a
//!   dependency of it may still end (see [`crate::event`]).
//! - **Flush before a cross-queue wait.** An event from another queue is flushed before
//!   it enters this queue's wait list (design trap "flush before a cross-queue wait");
//!   each queue is flushed only if it has unflushed work.
//! - **Batch.** On a driver that ends a flushed batch's commands together (rusticl; design
//!   trap "rusticl ends a batch together"), the command's own queue is flushed too before a
//!   command whose wait list holds another queue's command or a user event, so that the
//!   commands before it do not end only with it.
//! - **Fold.** A record that grows past [`FOLD_AT`](crate::tracker::FOLD_AT) live entries
//!   has its oldest reads folded into one `clEnqueueMarkerWithWaitList` event (the
//!   tracker's *bound* rule).
//!
//! # Steps
//!
//! 1. **Lock** the records of every buffer the command touches, in buffer-ID order, a
//!    buffer touched twice once with the stronger access.
//! 2. **Gather** the checks and the wait list ([`Submit::gather`]): mappings, the *failed
//!    write* rule, failed dependencies, then the hazards of each record and the extra
//!    dependencies, flushing the queues they came from.
//! 3. **Enqueue** through the caller's closure, which alone calls OpenCL; gathered again,
//!    with every status read afresh, when the driver refused the enqueue and an event of
//!    the wait list has failed meanwhile, until the wait list holds none that failed.
//!    Just before it, once the checks have passed, the zero fill of each fresh buffer the
//!    command may read ([`Submit::zero_fresh`]; the *zeroed before read* rule of
//!    [`crate::record`]) goes in, and into the wait list: a command refused by a check
//!    enqueues none, and one the driver refuses after its fill leaves only the fill
//!    recorded.
//! 4. **Commit** ([`Submit::commit`]): nothing from here on can fail, so every buffer
//!    touched records the command (one that did not could be released while it runs).
//! 5. **Fold**: a fold that cannot be enqueued leaves the record as it is (longer, still
//!    complete).

use std::panic::Location;
use std::sync::Arc;

use crate::util::sync::Guard;

use super::block::Block;
use super::failure::failure_of;
use super::history::Writes;
use super::history::{MapStep, Record, Recorded};
use crate::census;
use crate::core::echo::RawEvent;
use crate::core::gates::{self, failures_possible};
use crate::core::pins::LetGo;
use crate::core::queue::QueueCore;
use crate::error::Result;
use crate::event::{Event, graveyard, snapshot};
use crate::ffi::{self, cl_event};
use crate::status::Status;
use crate::tracker::{Access, Entry, Span, Use};
use crate::util::inline;

/// One buffer a command touches, and how.
pub(crate) struct Touch<'a> {
    pub(crate) block: &'a Block,
    /// Its access, the bytes it touches (the tracker's *byte ranges* rule: all of them
    /// unless [`Touch::within`] says otherwise), and whether it moves data between the
    /// buffer and host memory, so that its event may end after later commands of its
    /// queue (the tracker's *late ends* rule; design trap "pageable reads complete late").
    pub(crate) how: Use,
    pub(crate) map: MapStep,
    /// Whether the command may read the buffer's contents (the *failed write* rule): every
    /// read, a kernel's writable argument (it may read too) and a map; not a write, fill
    /// or copy into it, nor an unmap.
    pub(crate) reads: bool,
    /// Whether the command writes all of the buffer (the *failed write* rule: with no
    /// read, it replaces every earlier write).
    pub(crate) covers: bool,
}

impl<'a> Touch<'a> {
    /// The same touch, of the bytes `span` only.
    pub(crate) fn within(self, span: Span) -> Self {
        Touch {
            how: self.how.within(span),
            ..self
        }
    }

    /// A command that reads the buffer when `access` is `Read`, and only writes it
    /// otherwise.
    pub(crate) fn new(block: &'a Block, access: Access) -> Self {
        Touch {
            block,
            how: Use::new(access),
            map: MapStep::None,
            reads: access == Access::Read,
            covers: false,
        }
    }

    /// A command that only writes the buffer: all of it when `covers`.
    pub(crate) fn write(block: &'a Block, covers: bool) -> Self {
        Touch {
            covers,
            ..Touch::new(block, Access::Write)
        }
    }

    /// A transfer between the buffer and host memory: a read, or a write of all of it
    /// when `covers`.
    pub(crate) fn host(block: &'a Block, access: Access, covers: bool) -> Self {
        let touch = Touch::new(block, access);
        Touch {
            covers,
            how: Use {
                late: true,
                ..touch.how
            },
            ..touch
        }
    }

    /// A kernel argument used as `how` says: a writable one may be read too.
    pub(crate) fn kernel_arg(block: &'a Block, how: Use) -> Self {
        Touch {
            how,
            reads: true,
            ..Touch::new(block, how.access)
        }
    }
}

/// One range of a buffer a command touches, and how: what the *two ranges* rule keeps
/// apart for a command that touches one buffer twice.
#[derive(Clone, Copy)]
struct Part {
    how: Use,
    reads: bool,
    covers: bool,
}

impl Part {
    fn of(touch: &Touch<'_>) -> Part {
        Part {
            how: touch.how,
            reads: touch.reads,
            covers: touch.covers,
        }
    }

    /// `other` as well: the stronger access, the hull of the bytes.
    fn merge(&mut self, other: Part) {
        self.how = self.how.merge(other.how);
        self.reads |= other.reads;
        self.covers |= other.covers;
    }
}

/// A record locked for one command.
struct Locked<'a> {
    block: &'a Block,
    /// The buffer's touches together: the stronger access, the hull of their bytes (for
    /// the mapping check, the zero fill and the trace).
    how: Use,
    map: MapStep,
    reads: bool,
    covers: bool,
    /// The touches that share no byte, each recorded with its own access and bytes (the
    /// *two ranges* rule); one for a buffer touched once.
    parts: inline::List<Part>,
    record: Guard<'a, Record>,
    /// The *zeroed before read* rule's fill of this (fresh) buffer, enqueued for this
    /// command and not yet recorded.
    zero: Option<Event>,
}

/// What [`Submit::gather`] found: the wait list, the events it holds (kept by the new
/// event once a failure is possible), and the wait-list length without same-queue
/// elision (for the statistics).
struct Gathered {
    wait: inline::WaitList,
    holds: inline::List<Event>,
    unelided: usize,
    /// Whether the wait list holds an event of another queue or a user event.
    foreign: bool,
}

impl Gathered {
    /// Nothing gathered yet, for a command with `deps` extra dependencies.
    fn new(deps: usize) -> Gathered {
        Gathered {
            wait: inline::WaitList::new(),
            holds: inline::List::new(),
            unelided: deps,
            foreign: false,
        }
    }
}

/// What [`Submit::gather_and_enqueue`] hands back: the command's event, its sequence
/// number, its wait list when tracing, what was gathered for it, and the command before it
/// on its in-order queue.
type Enqueued = (
    cl_event,
    u64,
    Option<Vec<cl_event>>,
    Gathered,
    Option<RawEvent>,
);

/// One command on `queue`, after the hazards of the buffers it touches and the extra
/// dependencies `deps`.
pub(crate) struct Submit<'a> {
    pub(crate) queue: &'a Arc<QueueCore>,
    pub(crate) deps: &'a [&'a Event],
}

impl Submit<'_> {
    /// The protocol: locks the records of `touches`, computes the wait list, enqueues
    /// through `enqueue`, and records the new event on every buffer touched.
    pub(crate) fn run<'t>(
        &self,
        touches: impl IntoIterator<Item = &'t Touch<'t>>,
        enqueue: impl FnMut(&[cl_event]) -> Result<cl_event>,
    ) -> Result<Event> {
        self.run_reading(touches, enqueue, None)
    }

    /// [`Submit::run`], also handing back in `writer` the writes the contents of the (one) buffer
    /// touched, for a host read to check once it has ended (the *failed write* rule).
    pub(crate) fn run_reading<'t>(
        &self,
        touches: impl IntoIterator<Item = &'t Touch<'t>>,
        mut enqueue: impl FnMut(&[cl_event]) -> Result<cl_event>,
        writer: Option<&mut Writes>,
    ) -> Result<Event> {
        let queue = self.queue;
        if let Some(d) = self.deps.iter().find(|d| !d.in_context(&queue.ctx)) {
            return Err(d.context_mismatch(queue.ctx.raw()));
        }
        // After a failure on a queue whose failures echo, let the queue drain first when
        // it can, so that this command runs ([`crate::core::echo`]).
        queue.settle();
        // One answer per pending command for the whole enqueue (one gathering of it).
        let mut answers = Some(snapshot::begin());
        // Filled in place (it is large, and the enqueue path would copy it otherwise).
        let mut locked = inline::List::new();
        self.lock(touches, &mut locked)?;
        // Reading an event's status costs microseconds on some drivers (NVIDIA), so the
        // statuses of dependencies and hazards are read only once a failure is possible.
        let failures_possible = failures_possible();
        // No gate is failed through the library from the statuses' reading to the enqueue
        // (the gates' *no failure mid-enqueue* rule).
        let _enqueuing = failures_possible.then(crate::core::gates::Enqueuing::begin);
        let enqueued =
            self.gather_and_enqueue(&mut locked, failures_possible, &mut enqueue, &mut answers);
        let (raw, seq, traced_wait, gathered, before) = match enqueued {
            Ok(enqueued) => enqueued,
            Err(e) => {
                // A zero fill enqueued before the driver refused the command is a command
                // on its buffer all the same.
                for l in locked.iter_mut() {
                    self.record_zero(l);
                }
                return Err(e);
            }
        };
        let had_wait_list = !gathered.wait.as_slice().is_empty();
        let holds = gathered.holds;
        queue.mark_dirty();
        let deps = (holds.len() != 0).then(|| holds.into_boxed_slice());
        let event = Event::from_enqueue_with(raw, queue, deps, had_wait_list, seq);
        event.follows(before);
        self.commit(
            &mut locked,
            &event,
            had_wait_list,
            failures_possible,
            writer,
        );
        if let Some(wait) = traced_wait {
            let touches = locked
                .iter()
                .map(|l| {
                    let how = match l.how.access {
                        Access::Read => crate::trace::Use::Read,
                        Access::Write => crate::trace::Use::Write,
                    };
                    (l.block.id, how)
                })
                .collect();
            crate::trace::command(raw, queue.lane.id, queue.profiling, touches, &wait);
        }
        Ok(event)
    }

    /// Steps 2 and 3, with the records locked: gathers the checks and the wait list,
    /// enqueues the *zeroed before read* rule's fills once the checks have passed, then
    /// the command. Returns the command's event, its sequence number, its wait list when
    /// tracing, what was gathered for it, and the command before it on its in-order queue
    /// (the echo's *queue order* rule).
    fn gather_and_enqueue(
        &self,
        locked: &mut inline::List<Locked<'_>>,
        failures_possible: bool,
        mut enqueue: impl FnMut(&[cl_event]) -> Result<cl_event>,
        answers: &mut Option<snapshot::Guard>,
    ) -> Result<Enqueued> {
        let queue = self.queue;
        // An event of the wait list can fail between the gathering and the enqueue, and
        // NVIDIA then refuses the enqueue with the failed status; a gate's failure reaches
        // all its commands at once there, so several can. Then the wait list is gathered
        // again, in a new snapshot so that every status is read afresh: the failed events
        // are left out, or refuse the command. Each new gathering holds fewer events than
        // the one before (nothing else can enter it while the records are locked), so
        // this ends.
        let mut refusals = 0;
        let mut first_holds = None;
        // Filled in place (it is large, and the enqueue path would copy it otherwise).
        let mut gathered = Gathered::new(self.deps.len());
        loop {
            self.gather(locked, failures_possible, &mut gathered)?;
            // The *zeroed before read* rule: only for a command that passed its checks,
            // and after every fill, on this queue, whatever the queue's order.
            if locked.iter().any(|l| l.record.fresh) {
                self.zero_fresh(locked)?;
                for zero in locked.iter().filter_map(|l| l.zero.as_ref()) {
                    self.add(&mut gathered, zero, failures_possible)?;
                }
            }
            // The *batch* rule: where a driver ends a flushed batch's commands together
            // (rusticl), the commands before one that waits on other work go in a batch of
            // their own, so that none of them waits for that work.
            if gathered.foreign && queue.flush_before_foreign_waits {
                queue.flush_if_dirty()?;
            }
            let wait = gathered.wait.as_slice();
            // SAFETY: the wait list holds live events (retained by the locked records,
            // their zero fills and `gathered.holds`).
            match unsafe { queue.enqueue_tracked(wait, &mut enqueue) } {
                Ok((raw, seq, markers, before)) => {
                    queue.ctx.stats.count_enqueue(wait.len(), gathered.unelided);
                    let traced_wait = crate::trace::on().then(|| wait.to_vec());
                    for marker in markers {
                        gathered
                            .holds
                            .push(Event::from_enqueue(marker, queue, None, 0));
                    }
                    return Ok((raw, seq, traced_wait, gathered, before));
                }
                Err(e) => {
                    *answers = None;
                    *answers = Some(snapshot::begin());
                    let holds = &gathered.holds;
                    let explained = failures_possible
                        && holds
                            .iter()
                            .any(|h| matches!(h.status(), Ok(Status::Failed(_))));
                    refusals += 1;
                    if !explained || refusals > *first_holds.get_or_insert(holds.len()) {
                        return Err(e);
                    }
                    log::debug!(target: "cl_lifetime::queue", "enqueue refused after a dependency failed ({e}); gathering again");
                    gathered = Gathered::new(self.deps.len());
                }
            }
        }
    }

    /// The *zeroed before read* rule, with the records locked and the command's checks
    /// passed: a fresh buffer that the command may read, or writes only in part, gets a
    /// zero fill on this queue first, kept in its [`Locked::zero`] until it is recorded
    /// (as a write that replaces all of it, so that the command orders after it like after
    /// any write). A command that writes all of it and reads nothing needs none: the
    /// buffer stops being fresh when that command is recorded ([`Submit::commit`]), and
    /// not before, so that a command refused after all leaves the promise standing.
    #[cold]
    fn zero_fresh(&self, locked: &mut inline::List<Locked<'_>>) -> Result<()> {
        let queue = self.queue;
        let needs_fill =
            |l: &Locked<'_>| l.record.fresh && l.zero.is_none() && (l.reads || !l.covers);
        for l in locked.iter_mut().filter(|l| needs_fill(l)) {
            let (block, bytes) = (l.block, l.block.bytes());
            // A four-byte pattern where the size allows (drivers fill words faster).
            let (zero, size) = if bytes % 4 == 0 { (0u32, 4) } else { (0u32, 1) };
            let pattern = (&raw const zero).cast();
            // SAFETY: the queue is live (borrowed) and the block is live (locked); the
            // pattern is `size` readable bytes, copied by OpenCL before it returns; the
            // fill covers the block's `bytes`, a multiple of `size`; its record is empty
            // (fresh), so nothing is waited on.
            let (event, seq, _, before) = unsafe {
                queue.enqueue_tracked(&[], |wait| {
                    if block.is_svm() {
                        let at = block.svm_at(0);
                        ffi::enqueue_svm_fill(queue.raw(), at, pattern, size, bytes, wait)
                    } else {
                        let raw = block.raw();
                        ffi::enqueue_fill(queue.raw(), raw, pattern, size, 0, bytes, wait)
                    }
                })
            }?;
            queue.mark_dirty();
            let zero = Event::from_enqueue(event, queue, None, seq);
            zero.follows(before);
            l.zero = Some(zero);
        }
        Ok(())
    }

    /// Records the zero fill enqueued for `l` ([`Submit::zero_fresh`]), if any: the buffer
    /// is no longer fresh.
    fn record_zero(&self, l: &mut Locked<'_>) {
        if let Some(event) = l.zero.take() {
            let how = Recorded {
                lane: self.queue.lane,
                how: Use::new(Access::Write),
                replaces: true,
                failure_seen: self.queue.ctx.gates.failure_seen(),
            };
            l.record.record(how, event, false, failures_possible());
            l.record.fresh = false;
        }
    }

    /// Step 1: the records of `touches`, locked in buffer-ID order, into `locked`.
    fn lock<'t>(
        &self,
        touches: impl IntoIterator<Item = &'t Touch<'t>>,
        locked: &mut inline::List<Locked<'t>>,
    ) -> Result<()> {
        let mut order: inline::List<&Touch<'_>> = inline::List::new();
        for touch in touches {
            if touch.block.ctx.id != self.queue.ctx.id {
                return Err(touch.block.context_mismatch(self.queue.ctx.raw()));
            }
            order.push(touch);
        }
        order.sort_by_key(|t| t.block.id);
        for touch in order.iter() {
            match locked.last_mut() {
                Some(last) if last.block.id == touch.block.id => {
                    last.how = last.how.merge(touch.how);
                    last.reads |= touch.reads;
                    last.covers |= touch.covers;
                    // The *two ranges* rule: a touch that shares bytes with a part joins
                    // it; one that shares none is a part of its own.
                    let part = Part::of(touch);
                    let joined = last
                        .parts
                        .iter_mut()
                        .find(|p| p.how.span.overlaps_bytes(part.how.span));
                    if let Some(joined) = joined {
                        joined.merge(part);
                    } else {
                        last.parts.push(part);
                    }
                }
                _ => locked.push(Locked {
                    block: touch.block,
                    how: touch.how,
                    map: touch.map,
                    reads: touch.reads,
                    covers: touch.covers,
                    parts: {
                        let mut parts = inline::List::new();
                        parts.push(Part::of(touch));
                        parts
                    },
                    record: touch.block.lock_record(),
                    zero: None,
                }),
            }
        }
        Ok(())
    }
}

impl Submit<'_> {
    /// Step 2: the checks and the wait list, with the events it holds. Those are needed
    /// only once a failure is possible (a failed command must outlive its dependencies),
    /// so until then the enqueue path clones and allocates nothing for them.
    fn gather(
        &self,
        locked: &mut inline::List<Locked<'_>>,
        failures_possible: bool,
        gathered: &mut Gathered,
    ) -> Result<()> {
        for l in locked.iter() {
            l.record.check_map(l.how.access, l.map)?;
            // The failed write rule: nothing reads data whose write failed, range by range
            // (a copy within the buffer reads its source only).
            if failures_possible && l.reads {
                for part in l.parts.iter().filter(|p| p.reads) {
                    if let Some(failed) = l.record.failed_write(part.how.span) {
                        return Err(failed.in_buffer(l.block.allocated_at));
                    }
                }
            }
        }
        if failures_possible {
            graveyard::sweep();
            // A driver never runs a command whose wait list holds a failed event.
            let failed = (self.deps.iter().enumerate())
                .find_map(|(index, dep)| failure_of(dep).map(|failed| (index, failed)));
            if let Some((index, failed)) = failed {
                return Err(failed.as_dependency(index));
            }
        }
        for dep in self.deps {
            // A foreign event that has not ended waits behind a gate of the library's that
            // follows it (the *raw handles* rule, `event::gate`).
            match dep.wait_stand_in(&self.queue.ctx.gates) {
                Some(proxy) => self.add(gathered, &proxy, failures_possible)?,
                None => self.add(gathered, dep, failures_possible)?,
            }
        }
        // PoCL stops ordering an in-order queue's later commands after earlier pending
        // ones once a command on it has failed, so after a failure in the context the
        // queue's order is not trusted: every unended hazard goes in the wait list.
        let failure_seen = self.queue.ctx.gates.failure_seen();
        for l in locked.iter_mut() {
            self.gather_hazards(l, failure_seen, failures_possible, gathered)?;
        }
        if locked.len() > 1 || !self.deps.is_empty() || locked.iter().any(|l| l.parts.len() > 1) {
            gathered.wait.sort_dedup();
        }
        Ok(())
    }

    /// The hazards of one record (the tracker's *hazards* and *same-queue elision* rules,
    /// or all of them after a failure: the *shadow* rule).
    fn gather_hazards(
        &self,
        l: &mut Locked<'_>,
        failure_seen: bool,
        failures_possible: bool,
        gathered: &mut Gathered,
    ) -> Result<()> {
        let after_failure = l.record.after_failure() || failure_seen;
        for part in l.parts.iter() {
            let site = l.block.allocated_at;
            self.gather_part_hazards(
                &l.record,
                site,
                *part,
                after_failure,
                failures_possible,
                gathered,
            )?;
        }
        Ok(())
    }

    /// [`Submit::gather_hazards`] for one range the command touches (the *two ranges*
    /// rule).
    fn gather_part_hazards(
        &self,
        record: &Record,
        site: &'static Location<'static>,
        part: Part,
        after_failure: bool,
        failures_possible: bool,
        gathered: &mut Gathered,
    ) -> Result<()> {
        let Part { how, reads, .. } = part;
        let Use { access, span, .. } = how;
        gathered.unelided += record.events().hazards_without_elision_in(access, span);
        // The failed write rule for a write that has ended: a reader of what it wrote is
        // refused if it failed.
        let refuse_failed_write = |entry: &Entry<Event>| -> Result<()> {
            let raw = entry.event.raw();
            if record.writes().holds_in(span, raw) {
                if let Some(failed) = failure_of(&entry.event) {
                    return Err(failed.in_buffer(site));
                }
            }
            Ok(())
        };
        let mut add = |entry: &Entry<Event>| -> Result<()> {
            // A finished command needs no wait, and a failed one must not be waited on:
            // drivers fail (or never run) a command whose wait list holds one. The status
            // is read once here: the last write may have failed since the check above, and
            // then a reader is refused (the failed write rule).
            let ended =
                (failures_possible || self.queue.drop_ended_hazards) && entry.event.is_terminal();
            if ended && reads && entry.access == Access::Write {
                refuse_failed_write(entry)?;
            }
            if !ended {
                self.add(gathered, &entry.event, failures_possible)?;
            }
            Ok(())
        };
        let events = record.events();
        if after_failure {
            events
                .hazards_after_failure_in(access, span)
                .try_for_each(&mut add)
        } else {
            events
                .hazards_in(self.queue.lane, access, span)
                .try_for_each(&mut add)?;
            if failures_possible && reads {
                // The *inputs produced* rule: the writes this command reads that its
                // queue's order runs first are not in its wait list, but its event holds
                // them, so its status resolves as failed when one of them failed. A driver
                // that runs a command behind a failed one and reports both complete
                // (Intel's CPU runtime) reports no stale result as success.
                for entry in events
                    .ordered_by_queue_in(self.queue.lane, access, span)
                    .filter(|e| e.access == Access::Write)
                {
                    if entry.event.is_terminal() {
                        refuse_failed_write(entry)?;
                    } else {
                        gathered.holds.push(entry.event.clone());
                    }
                }
            }
            Ok(())
        }
    }

    /// Adds `event` to the wait list, flushing its queue first when it is another one
    /// (design trap "flush before a cross-queue wait").
    fn add(&self, gathered: &mut Gathered, event: &Event, failures_possible: bool) -> Result<()> {
        if !event.same_queue(self.queue) {
            event.flush_producer()?;
            gathered.foreign = true;
        }
        gathered.wait.push(event.raw());
        if failures_possible {
            gathered.holds.push(event.clone());
        }
        Ok(())
    }
}

impl Submit<'_> {
    /// Steps 4 and 5: records `event` on every locked record, then folds those that grew
    /// past their bound. Infallible: a fold that fails is logged and leaves its record
    /// longer, still complete.
    fn commit(
        &self,
        locked: &mut inline::List<Locked<'_>>,
        event: &Event,
        had_wait_list: bool,
        failures_possible: bool,
        mut writer: Option<&mut Writes>,
    ) {
        let failure_seen = failures_possible && self.queue.ctx.gates.failure_seen();
        for l in locked.iter_mut() {
            self.record_zero(l);
            // Enqueued: a fresh buffer it writes all of is no longer fresh (the *zeroed
            // before read* rule); one it may read got its zero fill above.
            l.record.fresh = false;
            if let Some(writer) = writer.as_deref_mut() {
                *writer = l.record.writes().only(l.how.span, l.block.allocated_at);
            }
            // The *two ranges* rule: each range with its own access, so that a failed
            // copy within the buffer is a failed write of its destination only.
            for part in l.parts.iter() {
                // Late if any touch of the buffer is.
                let how = Recorded {
                    lane: self.queue.lane,
                    how: Use {
                        late: l.how.late,
                        ..part.how
                    },
                    replaces: part.covers || part.reads,
                    failure_seen,
                };
                l.record
                    .record(how, event.clone(), had_wait_list, failures_possible);
            }
            l.record.apply_map(l.map);
            census::record_reached(l.record.events().len());
        }
        // The pins' *listed* rule: a command on several buffers, or with a wait list (which
        // may hold commands on other buffers), on a driver whose events keep them all.
        let shared = locked.len() > 1 || had_wait_list;
        if let Some(pins) = self.queue.ctx.pins.as_ref().filter(|_| shared) {
            for l in locked.iter_mut().filter(|l| !l.record.listed) {
                l.record.listed = true;
                let record: Arc<dyn LetGo> = l.block.record.clone();
                pins.list(Arc::downgrade(&record));
            }
        }
        for l in locked.iter_mut() {
            if let Err(e) = self.fold(&mut l.record) {
                log::warn!(target: "cl_lifetime::queue", "folding a record's reads: {e}");
            }
        }
    }

    /// Step 5: folds a record's oldest reads into one marker on this queue when it has
    /// grown past its bound (the tracker's *bound* rule).
    fn fold(&self, record: &mut Record) -> Result<()> {
        #[cfg(test)]
        if tests::FAIL_FOLDS.get() && !record.events().reads_to_fold().is_empty() {
            return Err(crate::error::Error::cl(
                "clEnqueueMarkerWithWaitList",
                ffi::codes::CL_OUT_OF_HOST_MEMORY,
            ));
        }
        let queue = self.queue;
        let failures_possible = gates::failures_possible();
        let (count, holds): (usize, Vec<Event>) = {
            let reads = record.events().reads_to_fold();
            if reads.is_empty() {
                return Ok(());
            }
            // The marker stands for every read folded; those that have ended need no
            // wait, and a failed one must not be waited on (see `gather`).
            let live: Vec<Event> = reads
                .iter()
                .filter(|e| !(failures_possible && e.is_terminal()))
                .map(|&e| e.clone())
                .collect();
            for event in &live {
                if !event.same_queue(queue) {
                    event.flush_producer()?;
                }
            }
            (reads.len(), live)
        };
        let folded: Vec<cl_event> = holds.iter().map(Event::raw).collect();
        // SAFETY: `queue` is live (held by `self`); the wait list holds live events
        // (retained by `holds`) and outlives the call.
        let (raw, seq, markers, before) = unsafe {
            queue.enqueue_tracked(&folded, |wait| ffi::enqueue_marker(queue.raw(), wait))
        }?;
        let mut holds = holds;
        holds.extend(
            markers
                .into_iter()
                .map(|m| Event::from_enqueue(m, queue, None, 0)),
        );
        queue.mark_dirty();
        if crate::trace::on() {
            crate::trace::command(raw, queue.lane.id, queue.profiling, Vec::new(), &folded);
        }
        let deps = (!holds.is_empty()).then(|| holds.into_boxed_slice());
        let marker = Event::from_enqueue(raw, queue, deps, seq);
        marker.follows(before);
        record.fold(count, queue.lane, marker);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// Makes every fold on this thread fail, as an enqueue the driver refuses would.
        pub(crate) static FAIL_FOLDS: Cell<bool> = const { Cell::new(false) };
    }

    /// A fold that fails after the enqueue must not leave the other buffers of the
    /// command without its event (they could be released while it runs).
    #[test]
    fn a_command_is_recorded_on_every_buffer_even_when_a_fold_fails() {
        let Ok(ctx) = crate::Context::from_env() else {
            return;
        };
        let Ok(ooo) = ctx.out_of_order_queue() else {
            return;
        };
        let a = ctx.buffer::<u32>(16).unwrap();
        let b = ctx.buffer::<u32>(16).unwrap();
        let gate = ctx.user_event().unwrap();
        let reads: Vec<_> = (0..crate::tracker::FOLD_AT)
            .map(|_| ooo.after(&[gate.event()]).read_owned(&a).unwrap())
            .collect();
        FAIL_FOLDS.set(true);
        let copied = ooo.after(&[gate.event()]).copy(&a, &b);
        FAIL_FOLDS.set(false);
        let on_b = b.record_len();
        gate.complete().unwrap();
        for read in reads {
            read.wait().unwrap();
        }
        let copy = copied.expect("the copy was enqueued, so it is reported");
        copy.wait().unwrap();
        assert_eq!(on_b, 1, "the copy is missing from its destination's record");
    }
}
