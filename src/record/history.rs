//! The record of one buffer: its event set, with what the tracker does not know (the
//! failures seen, the taint after a failure, the mappings alive, the last write, lent
//! host memory).

use crate::util::sync::{Mutex, rank};
use std::any::Any;
use std::panic::Location;

use super::failure::{self, FailedCommand, Failures};
use crate::core::gates;
use crate::core::pins::LetGo;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi::{self, cl_event};
use crate::status::Status;
use crate::tracker::{Access, Entry, EventSet, Lane, Span, State, Use};

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

/// How a command recorded on a buffer uses it.
#[derive(Clone, Copy)]
pub(crate) struct Recorded {
    /// The queue it ran on.
    pub(crate) lane: Lane,
    /// Its access, the bytes it touched, and whether it may end after later commands of
    /// its queue (the tracker's *byte ranges* and *late ends* rules).
    pub(crate) how: Use,
    /// Whether it writes all of the buffer, or reads it (see `record_write`).
    pub(crate) replaces: bool,
    /// Whether a failure had been seen in the context when it was enqueued (the *every
    /// failure reported* rule then keeps every command it supersedes).
    pub(crate) failure_seen: bool,
}

/// The size at which the *every failure reported* rule first asks about the commands it
/// keeps.
const UNASKED_FIRST_PRUNE: usize = 16;

/// Everything recorded about a buffer's commands.
#[derive(Default)]
pub(crate) struct Record {
    events: EventSet<Event>,
    /// The tracker's *shadow* rule: a recorded command failed while superseded ones may still run, so
    /// wait lists leave nothing out until the shadow has drained.
    tainted: bool,
    /// The failure epoch this record last looked at.
    seen_failures: u64,
    mapped: Mapped,
    failed: Failures,
    /// A recorded command was seen to fail (the *shadow* rule then trusts no cover until the
    /// shadow has drained).
    saw_failure: bool,
    /// The writes the buffer's contents come from (the *failed write* rule): the newest,
    /// and the one before it when that one had failed and the newest did not replace all
    /// of the buffer. A command that reads the buffer after one of them failed reads data
    /// that was never written.
    writes: Writes,
    /// Host memory that in-flight commands use (the *lent host memory* rule), with the event that ends the use.
    host: Vec<(Event, Box<dyn Any + Send>)>,
    /// Listed in the context's pins (their *listed* rule).
    pub(super) listed: bool,
    /// Commands the tracker let go of unasked, superseded by a command with no wait list
    /// once a failure was possible: kept until seen ended, so that a failure among them
    /// reaches the release's report (the *every failure reported* rule). Not a command of
    /// the new one's in-order queue that could fail only by following the command before
    /// it: the one that failed first is kept, and the new command fails with it.
    unasked: Vec<Event>,
    /// `unasked` is asked about when it has grown to this many (doubling, as the
    /// tracker's pruning does), so each command costs a constant number of status reads.
    unasked_prune_at: usize,
    /// No command has touched the buffer, and its memory holds whatever the driver left
    /// there: its first command that may read it is preceded by a zero fill (the
    /// *zeroed before read* rule).
    pub(crate) fresh: bool,
}

impl Record {
    pub(crate) fn events(&self) -> &EventSet<Event> {
        &self.events
    }

    /// The tracker's *shadow* rule: whether wait lists must leave nothing out. Looks for failed events
    /// only when a failure has happened somewhere since the last look and superseded
    /// commands may still run.
    pub(crate) fn after_failure(&mut self) -> bool {
        let epoch = gates::failure_epoch();
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
    /// (design trap "PoCL's failed-event notify list"; see [`crate::event`]).
    fn ended(e: &Event, failed: &mut Failures, saw: &mut bool) -> State {
        // An unreadable status counts as failed: nothing can wait on it either.
        let state = e.state();
        if state == State::Failed {
            *saw |= failed.collect(e);
        }
        state
    }

    /// The tracker's *pruning* rule trusts queue order only while no failure has been possible in the
    /// process, and none has been seen in this record.
    fn trust_queue_order(&mut self, failures_possible: bool) {
        self.events
            .prune_each(failures_possible || self.saw_failure);
        self.events
            .stop_at_pending(!self.saw_failure && gates::failure_epoch() == 0);
    }

    /// Records `event`, the command `how`; `failures_possible` is what the enqueue read
    /// from the *failures possible* flag ([`crate::core::gates`]).
    pub(crate) fn record(
        &mut self,
        how: Recorded,
        event: Event,
        had_wait_list: bool,
        failures_possible: bool,
    ) {
        let Recorded {
            lane,
            how,
            replaces,
            failure_seen,
        } = how;
        let Use { access, span, .. } = how;
        self.trust_queue_order(failures_possible);
        if access == Access::Write {
            self.record_write(&event, failures_possible, replaces, span);
        }
        if failures_possible && !had_wait_list {
            self.keep_unasked(lane, access, span, failure_seen);
        }
        let (failed, saw) = (&mut self.failed, &mut self.saw_failure);
        let state = |e: &Event| Self::ended(e, failed, saw);
        self.events
            .record_use(lane, how, event, had_wait_list, state);
        if self.saw_failure {
            self.tainted = true;
        }
        // Once every superseded command has ended, cover holds again (the *shadow* rule).
        if self.events.shadow_len() == 0 {
            self.tainted = false;
            self.saw_failure = false;
        }
        self.prune_host();
    }

    /// The *every failure reported* rule: the entries a command with no wait list, `access`
    /// on `lane`, supersedes and the tracker drops unasked (its rule 5: they are ordered
    /// before it or have ended; rule 8 keeps what may end late), kept until seen ended.
    fn keep_unasked(&mut self, lane: Lane, access: Access, span: Span, failure_seen: bool) {
        // What was kept before and has ended goes, its failure kept, once the list has
        // doubled since it was last asked about.
        if self.unasked.len() >= self.unasked_prune_at.max(UNASKED_FIRST_PRUNE) {
            let (failed, saw) = (&mut self.failed, &mut self.saw_failure);
            self.unasked
                .retain(|e| !Self::ended(e, failed, saw).has_ended());
            self.unasked_prune_at = 2 * self.unasked.len();
        }
        // Until a failure has been seen in the context, a command of this in-order queue
        // that could fail only by following a failed command before it is not kept: the
        // new command, enqueued behind it before the failure, fails with it and is
        // recorded. Once one has been seen, the new command may have been enqueued after
        // the failure ended it, and run: every command it supersedes is kept, since the
        // one that failed first may have touched another buffer only.
        let dropped = |e: &&Entry<Event>| {
            !e.late
                && span.contains(e.span)
                && (failure_seen || e.lane != lane || !lane.in_order || e.event.may_fail_alone())
                && match access {
                    Access::Write => true,
                    Access::Read => lane.in_order && e.lane == lane && e.access == Access::Read,
                }
        };
        for entry in self.events.entries().iter().filter(dropped) {
            self.unasked.push(entry.event.clone());
        }
    }

    /// Drops every event that has ended, keeping the failures for the report.
    pub(crate) fn prune_ended(&mut self) {
        self.trust_queue_order(gates::failures_possible());
        let (failed, saw) = (&mut self.failed, &mut self.saw_failure);
        self.events.prune(|e| Self::ended(e, failed, saw));
        self.unasked
            .retain(|e| !Self::ended(e, failed, saw).has_ended());
        self.prune_host();
    }

    /// The *lent host memory* rule: host memory goes as soon as the command that used it has ended.
    fn prune_host(&mut self) {
        if !self.host.is_empty() {
            self.host.retain(|(e, _)| !e.is_terminal());
        }
    }

    /// Whether every command recorded here, and every use of lent host memory, has ended
    /// (asks the driver; never blocks). A busy record costs one status query, not one
    /// per event: see [`Record::some_pending`].
    pub(crate) fn all_ended(&mut self) -> bool {
        if self.some_pending() {
            return false;
        }
        self.prune_ended();
        self.events.is_empty()
            && self.events.shadow_len() == 0
            && self.host.is_empty()
            && !self.failed.ahead_pending()
    }

    /// The oldest command ahead of one of the buffer's failed ones on its queue that has
    /// not ended (the *failed ahead of its turn* rule), as an event of its queue for a
    /// release to await (so that a gate set through the library kicks the waiter's reads
    /// of it).
    pub(crate) fn first_ahead_of_failures(&mut self) -> Option<Event> {
        let (queue, ahead) = self.failed.first_ahead()?;
        // SAFETY: `ahead` is live (held until the end of this call); the reference taken
        // here is the new event's.
        unsafe { ffi::retain_event(ahead.raw()) }.ok()?;
        Some(Event::from_enqueue_with(
            ahead.raw(),
            &queue,
            None,
            false,
            0,
        ))
    }

    /// Whether some command recorded here, or some use of lent host memory, has not ended:
    /// asks the newest first and stops at the first one pending, so a busy record costs
    /// one status query (a terminal status is kept, so the pruning after it asks the
    /// driver nothing again).
    fn some_pending(&self) -> bool {
        let entries = self.events.entries().iter().rev();
        let mut events = entries
            .chain(self.events.shadow())
            .map(|e| &e.event)
            .chain(self.host.iter().rev().map(|(e, _)| e));
        events.any(|e| !e.is_terminal())
    }

    /// The pins' *swept at release* rule for this record: lets go of the events that have
    /// ended, and of the newest write once it has completed (only a failed one matters to
    /// the *failed write* rule). Returns whether it still holds an event.
    fn let_go_of_ended(&mut self) -> bool {
        self.prune_ended();
        self.writes.let_go_of_ended();
        let holds = !self.events.is_empty()
            || self.events.shadow_len() != 0
            || !self.unasked.is_empty()
            || self.writes.holds_events();
        self.listed = holds;
        holds
    }

    /// Whether a recorded command was seen to fail.
    pub(crate) fn saw_failures(&self) -> bool {
        self.saw_failure || !self.failed.is_empty()
    }

    /// Forgets the failures of an earlier owner (a pool block changing hands), and the
    /// events that have ended, so none of them reaches the new owner's report.
    pub(crate) fn forget_failures(&mut self) {
        self.failed = Failures::default();
        self.saw_failure = false;
        self.writes = Writes::default();
        self.unasked.clear();
        self.events.prune_each(true);
        self.events.prune(Event::state);
    }

    /// Whether a command on `lane` could use the buffer with no wait (the pool's
    /// *stream-ordered reuse* rule): every recorded command has ended or ran on `lane`, an
    /// in-order queue. Newest first, and it stops at the first that has not, so a buffer
    /// still in use costs one status query (an ended command's status is read from the
    /// driver once, then kept).
    /// Whether a recorded command is doomed ([`Event::is_doomed`]): the next owner of a
    /// pool block would wait on it and could fail with it.
    pub(crate) fn holds_doomed(&self) -> bool {
        self.events
            .entries()
            .iter()
            .chain(self.events.shadow())
            .any(|e| e.event.is_doomed())
    }

    /// The in-order queue that every recorded command not ended in the driver ran on,
    /// if one queue holds them all.
    pub(crate) fn pending_lane(&self) -> Option<Lane> {
        let mut pending = (self.events.entries().iter())
            .chain(self.events.shadow())
            .filter(|e| ffi::execution_status(e.event.raw()).is_ok_and(|s| s > ffi::CL_COMPLETE))
            .map(|e| e.lane);
        let lane = pending.next()?;
        (lane.in_order && pending.all(|l| l == lane)).then_some(lane)
    }

    pub(crate) fn free_for(&self, lane: Lane) -> bool {
        let ordered = |e: &Entry<Event>| lane.in_order && e.lane == lane;
        self.events
            .entries()
            .iter()
            .rev()
            .chain(self.events.shadow())
            .all(|e| ordered(e) || e.event.state().has_ended())
    }

    /// Takes what a release must wait on: every recorded event and every event of lent
    /// host memory, each once; the events kept by the *every failure reported* rule (they
    /// end before those, so the release asks them after its wait, without waiting on
    /// them); and the failures kept so far.
    pub(crate) fn take_for_release(&mut self) -> (Vec<Event>, Vec<Event>, Failures) {
        let mut events: Vec<Event> = self.events.take().into_iter().map(|e| e.event).collect();
        events.extend(self.host.iter().map(|(e, _)| e.clone()));
        events.sort_by_key(|e| e.raw() as usize);
        events.dedup_by_key(|e| e.raw());
        let unasked = std::mem::take(&mut self.unasked);
        (events, unasked, std::mem::take(&mut self.failed))
    }

    /// After the release's wait: every command that used lent host memory has ended, and
    /// the last write is of no more interest.
    pub(crate) fn released(&mut self) {
        self.host.clear();
        self.writes = Writes::default();
    }

    /// Every event the record holds for a release to wait on (its entries, its shadow and
    /// the commands using lent host memory), each once.
    pub(crate) fn pending_events(&self) -> Vec<Event> {
        let entries = self.events.entries().iter().chain(self.events.shadow());
        let mut events: Vec<Event> = entries
            .map(|e| e.event.clone())
            .chain(self.host.iter().map(|(e, _)| e.clone()))
            .collect();
        events.sort_by_key(|e| e.raw() as usize);
        events.dedup_by_key(|e| e.raw());
        events
    }

    /// Flushes the library queues whose commands this record holds, for a release that
    /// polls them (on the library's thread, or on the caller's while a gate is closed): a
    /// command never flushed may never start (Oclgrind and rusticl run nothing before a
    /// flush), and polling a status flushes nothing.
    pub(crate) fn flush_producers(&self) {
        let entries = self.events.entries().iter().chain(self.events.shadow());
        let events = entries
            .map(|e| &e.event)
            .chain(self.host.iter().map(|(e, _)| e));
        for event in events {
            if let Err(e) = event.flush_producer() {
                log::debug!(target: "cl_lifetime::buffer", "flushing before a release: {e}");
            }
        }
    }

    pub(crate) fn keep_alive(&mut self, event: Event, payload: Box<dyn Any + Send>) {
        self.prune_host();
        self.host.push((event, payload));
    }
}

/// The *failed write* rule ([`crate::record`]): the writes a buffer's contents come from.
impl Record {
    /// The *failed write* rule: a write that replaces all of the buffer is all its
    /// contents come from, and so is one that reads the buffer (it was refused if a write
    /// before it had failed, and waits on those still running, so it fails if they do).
    /// A partial write that reads nothing leaves the rest to the writes before it; of
    /// those only one that has failed needs keeping: one still running is in the new
    /// write's wait list (a write waits on every earlier write, or follows it on an
    /// in-order queue), so if it fails, the new write fails too.
    fn record_write(&mut self, event: &Event, failures_possible: bool, replaces: bool, span: Span) {
        let writes = &mut self.writes.list;
        if replaces && span == Span::ALL || !failures_possible {
            writes.clear();
        } else {
            // A write of bytes `span` waited on the earlier writes it overlaps, so it fails
            // if they do: those whose bytes it holds all of go, unless one failed already
            // (it may not have waited for that). Those it leaves bytes of stay.
            writes.retain_mut(|(old, w)| {
                w.settle();
                !span.contains_bytes(*old) || matches!(w, Write::Failed(_))
            });
            if writes.len() >= WRITES_PRUNE_AT {
                // Only a failed write matters: one that completed goes.
                writes.retain(|(_, w)| !w.completed());
            }
        }
        writes.push((span, Write::Event(event.clone())));
    }

    /// The *failed write* rule: the failure of a write the contents of bytes `span` come
    /// from, if one failed (asks the driver until each write has ended, then remembers).
    pub(crate) fn failed_write(&self, span: Span) -> Option<FailedCommand> {
        self.writes.failure_in(span)
    }

    /// The writes the buffer's contents come from, for a host read to check once it has
    /// ended (the *failed write* rule).
    pub(crate) fn writes(&self) -> &Writes {
        &self.writes
    }
}

impl LetGo for Mutex<Record, rank::Record> {
    fn let_go_of_ended(&self) -> bool {
        match self.try_lock() {
            Some(mut record) => record.let_go_of_ended(),
            // In the middle of an enqueue: asked again at the next sweep.
            None => true,
        }
    }
}

/// The writes a buffer's contents come from (the *failed write* rule), each with the
/// bytes it wrote: a write stays until a later one holds all its bytes (and it has not
/// failed), so writes of disjoint ranges, which do not wait on each other, all stay.
///
/// A write seen failed is kept as its failure, not its event (the *failure, not the
/// event* rule of [`crate::record`]): a failed command's event may hold other buffers
/// (rusticl's and Intel's CPU runtime's events keep their commands' buffers and wait
/// lists), and the failure is all the rule needs.
#[derive(Clone, Default)]
pub(crate) struct Writes {
    /// Oldest first.
    list: Vec<(Span, Write)>,
    /// The buffer's allocation site, for the error of a failed write: set only in the
    /// writes handed back to a host read ([`Writes::only`]), `None` in the record.
    pub(crate) site: Option<&'static Location<'static>>,
}

/// One write of [`Writes`].
#[derive(Clone)]
enum Write {
    /// Not seen ended, or seen complete.
    Event(Event),
    /// Seen failed: what the *failed write* rule reports.
    Failed(FailedCommand),
}

impl Write {
    /// Its failure, if it failed (asks the driver until the write has ended).
    fn failure(&self) -> Option<FailedCommand> {
        match self {
            Write::Event(event) => failure::failure_of(event),
            Write::Failed(failed) => Some(*failed),
        }
    }

    /// Whether it completed (asks the driver until the write has ended).
    fn completed(&self) -> bool {
        match self {
            Write::Event(event) => matches!(event.status(), Ok(Status::Complete)),
            Write::Failed(_) => false,
        }
    }

    /// Keeps only the failure of a write seen failed, letting go of its event.
    fn settle(&mut self) {
        if let Write::Event(event) = self {
            if let Some(failed) = failure::failure_of(event) {
                *self = Write::Failed(failed);
            }
        }
    }
}

/// How many writes a record keeps before it lets go of those that completed.
const WRITES_PRUNE_AT: usize = 8;

impl Writes {
    /// Whether it holds the event of a write (one not seen failed).
    fn holds_events(&self) -> bool {
        self.list.iter().any(|(_, w)| matches!(w, Write::Event(_)))
    }

    /// The failure of one of the writes, the older first, if one failed.
    pub(crate) fn failure(&self) -> Option<FailedCommand> {
        self.list.iter().find_map(|(_, w)| w.failure())
    }

    /// The failure of one of the writes the contents of bytes `span` come from, the older
    /// first, if one failed.
    pub(crate) fn failure_in(&self, span: Span) -> Option<FailedCommand> {
        self.list
            .iter()
            .filter(|(s, _)| s.overlaps_bytes(span))
            .find_map(|(_, w)| w.failure())
    }

    /// Whether `raw` is the event of a write the contents of bytes `span` come from.
    pub(crate) fn holds_in(&self, span: Span, raw: cl_event) -> bool {
        self.list
            .iter()
            .any(|(s, w)| s.overlaps_bytes(span) && matches!(w, Write::Event(e) if e.raw() == raw))
    }

    /// Those of bytes `span`, for a host read to check once it has ended.
    pub(crate) fn only(&self, span: Span, site: &'static Location<'static>) -> Writes {
        Writes {
            site: Some(site),
            list: self
                .list
                .iter()
                .filter(|(s, _)| s.overlaps_bytes(span))
                .cloned()
                .collect(),
        }
    }

    /// Lets go of the writes that completed (only a failed one matters), and of the
    /// events of those that failed, keeping their failures.
    fn let_go_of_ended(&mut self) {
        self.list.retain_mut(|(_, w)| {
            w.settle();
            !w.completed()
        });
    }
}
