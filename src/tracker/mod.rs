//! The per-buffer event record and its hazard rules, without any OpenCL in it.
//!
//! An [`EventSet`] holds the events of the commands that may still touch one buffer, each
//! with the [`Lane`] (queue) it ran on and its [`Access`]. It never asks a driver anything:
//! whoever records an event also says which recorded events have completed, through a
//! closure, so the bookkeeping is tested with plain numbers standing in for events (the
//! way wgpu-core's lifetime tracker is told which submissions finished).
//!
//! # Rules
//!
//! 1. **Hazards.** A new command waits on the events [`EventSet::hazards`] returns: a read
//!    waits on the recorded writes (read after write); a write waits on every recorded
//!    event, writes and reads (write after write, write after read). Reads never wait on
//!    reads.
//! 2. **Same-queue elision.** Events of the new command's own queue are left out when that
//!    queue is in order: the queue already runs them first.
//! 3. **A write covers everything before it.** A recorded write waited (rule 1, or its
//!    queue's order) on every entry, so when it succeeds it has completed after all of
//!    them: recording it moves the whole set to the *shadow*.
//! 4. **In-order reads.** On an in-order queue a newer read moves the older reads of its
//!    queue to the shadow, so an in-order queue keeps at most one write and one read live.
//! 5. **The shadow.** Cover holds only for commands that succeed: a command that fails
//!    because something in its wait list failed can end before the rest of its wait list.
//!    So when the superseding command had a wait list, superseded entries stay in the
//!    shadow until they are known to have ended; a release waits on them too, and after a
//!    failure the caller asks [`EventSet::hazards_after_failure`], which leaves nothing
//!    out. A command with an empty wait list cannot end early: what it supersedes is
//!    either ordered before it by its in-order queue or has ended already, and is
//!    dropped (unless it may end late, rule 8).
//! 6. **Pruning.** Ended events are dropped as new ones arrive, when the set has doubled
//!    since the last prune, or when as many commands as it held then (at least 256) have
//!    been recorded since: constant cost per record on average, the set stays within twice its live
//!    size, and entries that ended are not scanned for ever by each new command (a buffer
//!    whose 16,384 chunks were each written once, then used through a few: rule 9 leaves
//!    the others' entries live, and the set never doubles). Asking a driver about an event costs (microseconds on some), so
//!    the superseded entries of an in-order queue are not asked about one by one: a
//!    command of such a queue completes only after every older one has ended, so when
//!    one has completed (not failed) every older entry of its queue goes unasked, and the
//!    point where the queue's entries turn from complete to pending is found by bisection.
//!    A failure breaks that pattern: then each is asked, and the caller turns the
//!    shortcut off ([`EventSet::prune_each`]) once a failure may have happened. Until one
//!    has been seen, an in-order queue's superseded entries are then asked about oldest
//!    first, up to the first one still pending ([`EventSet::stop_at_pending`]): the rest
//!    are kept, as if asked a little later, so that a batch of commands behind a closed
//!    gate costs one question per prune instead of one per command.
//! 7. **Bound.** Reads on out-of-order queues are kept until they complete. When more than
//!    [`FOLD_AT`] entries are live, the caller folds the oldest reads into one marker event
//!    ([`EventSet::reads_to_fold`], then [`EventSet::fold`]), which stands for them all.
//! 8. **Late ends.** A command that moves data between the buffer and host memory may end
//!    after later commands of its in-order queue have (NVIDIA ends a non-blocking read
//!    into pageable memory on a thread of its own; design trap "pageable reads complete
//!    late"), so queue order says nothing about its end: it is recorded as *late*
//!    ([`EventSet::record_late`]), goes to the shadow when superseded even by a command
//!    with no wait list (rule 5), and pruning asks about it itself (rule 6). Its queue
//!    order still orders it on the device, so rule 2 still leaves it out of its queue's
//!    hazards.
//!
//! 9. **Byte ranges.** Each command touches a [`Span`] of the buffer's bytes (the whole
//!    buffer unless it says otherwise). Rules 1 and 5 count only entries whose span
//!    overlaps the new command's: commands on disjoint ranges never wait on each other.
//!    Rules 3 and 4 supersede only entries whose span the new command's contains; an entry
//!    it overlaps in part stays live, a hazard for the rest of its range. A fold's marker
//!    (rule 7) spans the hull of the reads it stands for.
//!
//! 10. **Sub-buffers.** OpenCL leaves undefined any concurrent use of a buffer and a
//!     sub-buffer of it where one writes, whatever bytes each touches, and of two
//!     overlapping sub-buffers where one writes (OpenCL 3.0, `clCreateSubBuffer`; NVIDIA's
//!     driver crashes on it). A span says whether its command goes through a sub-buffer
//!     ([`Span::sub_buffer`]), and [`Span::overlaps`] counts one through the buffer's own
//!     object and one through a sub-buffer as overlapping, whatever their bytes: rule 1
//!     orders them when one writes. Sub-buffers among themselves follow rule 9 by bytes.
//!     Rules 3 and 4 supersede across kinds only with the whole buffer through its own
//!     object ([`Span::contains`]).
//!
//! Together these keep every command that may still touch the buffer covered: each is in
//! the set, or completes before an event that is.

/// Above this many live entries, the oldest reads are folded into one marker (rule 7).
pub const FOLD_AT: usize = 64;

/// How a command uses a buffer.
///
/// # Examples
///
/// ```
/// use cl_lifetime::tracker::{Access, EventSet, Lane, State};
/// let (a, b) = (Lane { id: 1, in_order: true }, Lane { id: 2, in_order: true });
/// let mut set = EventSet::new();
/// set.record(a, Access::Write, "write", false, |_| State::Pending);
/// set.record(a, Access::Read, "read", false, |_| State::Pending);
/// // On another queue, a read waits on the write only, a write on both (rule 1).
/// let waits = |access| set.hazards(b, access).map(|e| e.event).collect::<Vec<_>>();
/// assert_eq!(waits(Access::Read), ["write"]);
/// assert_eq!(waits(Access::Write), ["write", "read"]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The command only reads the buffer.
    Read,
    /// The command may write the buffer (a read-write kernel argument counts as a write).
    Write,
}

/// How a command uses one buffer, the one description from its launch or transfer to the
/// buffer's record: its access, the bytes it touches (rule 9), and whether its event may
/// end after later commands of its queue (rule 8: it moves data between the buffer and
/// host memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Use {
    pub(crate) access: Access,
    pub(crate) span: Span,
    pub(crate) late: bool,
}

impl Use {
    /// All of the buffer, with `access`, ending in queue order.
    pub(crate) const fn new(access: Access) -> Use {
        Use {
            access,
            span: Span::ALL,
            late: false,
        }
    }

    /// The same use, of the bytes `span` only.
    pub(crate) const fn within(self, span: Span) -> Use {
        Use { span, ..self }
    }

    /// Both uses as one: the stronger access, the hull of the bytes, late if either is.
    pub(crate) fn merge(self, other: Use) -> Use {
        Use {
            access: if other.access == Access::Write {
                Access::Write
            } else {
                self.access
            },
            span: self.span.hull(other.span),
            late: self.late || other.late,
        }
    }
}

/// The bytes of a buffer a command touches: `start..end` (rule 9), and through which
/// memory object (rule 10).
///
/// # Examples
///
/// ```
/// use cl_lifetime::tracker::{Access, EventSet, Lane, Span, State};
/// let (low, high) = (Span::new(0, 512), Span::new(512, 1024));
/// assert!(!low.overlaps(high) && Span::ALL.contains(low));
/// assert_eq!(low.hull(high), Span::new(0, 1024));
/// // Through a sub-buffer it overlaps the buffer's own object whatever the bytes (rule 10).
/// assert!(low.through_sub_buffer().overlaps(high));
/// // Commands on disjoint bytes never wait on each other (rule 9).
/// let (a, b) = (Lane { id: 1, in_order: true }, Lane { id: 2, in_order: true });
/// let mut set = EventSet::new();
/// set.record_in(a, Access::Write, low, "low", false, |_| State::Pending);
/// assert_eq!(set.hazards_in(b, Access::Write, high).count(), 0);
/// assert_eq!(set.hazards_in(b, Access::Read, Span::new(500, 600)).count(), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    /// The first byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Whether the command reaches them through a sub-buffer (rule 10) rather than the
    /// buffer's own memory object.
    pub sub_buffer: bool,
}

impl Span {
    /// Every byte of the buffer, whatever its size, through its own memory object.
    pub const ALL: Span = Span {
        start: 0,
        end: u64::MAX,
        sub_buffer: false,
    };

    /// Bytes `start..end`, through the buffer's own memory object.
    pub const fn new(start: u64, end: u64) -> Span {
        Span {
            start,
            end,
            sub_buffer: false,
        }
    }

    /// The same bytes, through a sub-buffer of them (rule 10).
    pub const fn through_sub_buffer(self) -> Span {
        Span {
            sub_buffer: true,
            ..self
        }
    }

    /// Whether commands on the two must be ordered when one of them writes (rules 9 and
    /// 10): they share a byte, or one goes through the buffer's own memory object and the
    /// other through a sub-buffer.
    pub fn overlaps(self, other: Span) -> bool {
        self.sub_buffer != other.sub_buffer || self.overlaps_bytes(other)
    }

    /// Whether the two share a byte, whatever the objects.
    pub fn overlaps_bytes(self, other: Span) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Whether a command on `self` stands for one on `other` in every ordering (rules 3,
    /// 4 and 10): it holds every byte of `other`, through the same kind of object, or is
    /// the whole buffer through its own.
    pub fn contains(self, other: Span) -> bool {
        (self.sub_buffer == other.sub_buffer || self == Span::ALL) && self.contains_bytes(other)
    }

    /// Whether every byte of `other` is in `self`, whatever the objects.
    pub fn contains_bytes(self, other: Span) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    /// The smallest span that [`contains`](Span::contains) both: the whole buffer when
    /// they go through different kinds of object.
    pub fn hull(self, other: Span) -> Span {
        if self.sub_buffer != other.sub_buffer {
            return Span::ALL;
        }
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
            sub_buffer: self.sub_buffer,
        }
    }
}

/// The queue a command ran on, as far as ordering is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lane {
    /// A number unique to the queue for the life of the process.
    pub id: u64,
    /// Whether the queue runs its commands in order.
    pub in_order: bool,
}

/// One recorded command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<E> {
    /// Where it ran.
    pub lane: Lane,
    /// How it used the buffer.
    pub access: Access,
    /// The bytes it touched (rule 9).
    pub span: Span,
    /// Its event.
    pub event: E,
    /// Its place in the order of records (rule 6).
    pub seq: u64,
    /// Whether it may end after later commands of its queue (rule 8).
    pub late: bool,
}

/// What became of a recorded command, as the caller's driver says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not ended yet.
    Pending,
    /// Completed successfully.
    Complete,
    /// Ended with an error (or its status cannot be read).
    Failed,
}

impl State {
    /// Whether the command has ended, either way.
    pub fn has_ended(self) -> bool {
        self != State::Pending
    }
}

/// The smallest size at which a record is pruned.
const MIN_PRUNE_AT: usize = 16;

/// The fewest records between two prunes that the count of records triggers (rule 6): a
/// small set that its own commands keep small is not asked about every few commands.
const PRUNE_EVERY_AT_LEAST: usize = 256;

/// The superseded entries of one lane, oldest first.
#[derive(Debug)]
struct LaneShadow<E> {
    lane: Lane,
    entries: Vec<Entry<E>>,
}

/// The events of every command that may still touch one buffer.
///
/// # Examples
///
/// Plain numbers stand in for events; the closure says which recorded ones have ended.
///
/// ```
/// use cl_lifetime::tracker::{Access, EventSet, Lane, State};
/// let queue = Lane { id: 1, in_order: true };
/// let other = Lane { id: 2, in_order: false };
/// let mut set = EventSet::new();
/// set.record(queue, Access::Write, 1, false, |_| State::Pending);
/// // The write's own in-order queue runs it first: no wait (rule 2). Another queue waits.
/// assert_eq!(set.hazards(queue, Access::Read).count(), 0);
/// assert_eq!(set.hazards(other, Access::Read).map(|e| e.event).collect::<Vec<_>>(), [1]);
/// // A newer write with no wait list covers the older one, which leaves the set (rule 3).
/// set.record(queue, Access::Write, 2, false, |_| State::Pending);
/// assert_eq!(set.entries().iter().map(|e| e.event).collect::<Vec<_>>(), [2]);
/// assert_eq!(set.shadow_len(), 0);
/// ```
#[derive(Debug)]
pub struct EventSet<E> {
    entries: Vec<Entry<E>>,
    /// Rule 5: entries superseded by a newer one, kept until they are known to have ended.
    /// Kept per lane, each lane's entries oldest first (rule 6 bisects them).
    shadow: Vec<LaneShadow<E>>,
    prune_at: usize,
    /// Rule 6: records since the last prune, and how many prune the set again.
    pushed: usize,
    prune_every: usize,
    /// Rule 6: whether pruning may trust queue order (see [`EventSet::prune_each`]).
    by_lane: bool,
    /// Rule 6: without that trust, whether an in-order queue's superseded entries are
    /// asked about only up to the first pending one (see [`EventSet::stop_at_pending`]).
    until_pending: bool,
    next_seq: u64,
}

impl<E> Default for EventSet<E> {
    fn default() -> Self {
        EventSet {
            entries: Vec::new(),
            shadow: Vec::new(),
            prune_at: MIN_PRUNE_AT,
            pushed: 0,
            prune_every: PRUNE_EVERY_AT_LEAST,
            by_lane: true,
            until_pending: false,
            next_seq: 0,
        }
    }
}

impl<E> EventSet<E> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rules 1 and 2: the recorded entries a new command with `access` on `lane`, on the
    /// whole buffer, must wait on.
    pub fn hazards(&self, lane: Lane, access: Access) -> impl Iterator<Item = &Entry<E>> {
        self.hazards_in(lane, access, Span::ALL)
    }

    /// Rules 1, 2 and 9: the recorded entries a new command with `access` on `lane`,
    /// touching `span`, must wait on.
    pub fn hazards_in(
        &self,
        lane: Lane,
        access: Access,
        span: Span,
    ) -> impl Iterator<Item = &Entry<E>> {
        self.conflicting_in(access, span)
            .filter(move |e| !(lane.in_order && e.lane == lane))
    }

    /// The entries that [`EventSet::hazards_in`] leaves out for queue order (rule 2): they
    /// conflict with a new command with `access` on `lane`, touching `span`, and ran
    /// before it on its in-order queue.
    pub fn ordered_by_queue_in(
        &self,
        lane: Lane,
        access: Access,
        span: Span,
    ) -> impl Iterator<Item = &Entry<E>> {
        self.conflicting_in(access, span)
            .filter(move |e| lane.in_order && e.lane == lane)
    }

    /// The recorded entries that conflict with a new command with `access` touching
    /// `span` (one of the two writes), whatever their queue.
    fn conflicting_in(&self, access: Access, span: Span) -> impl Iterator<Item = &Entry<E>> {
        self.entries.iter().filter(move |e| {
            (access == Access::Write || e.access == Access::Write) && e.span.overlaps(span)
        })
    }

    /// Rule 5: after a failure, every recorded entry that conflicts with `access`, live or
    /// shadow, with nothing left out for queue order.
    pub fn hazards_after_failure(&self, access: Access) -> impl Iterator<Item = &Entry<E>> {
        self.hazards_after_failure_in(access, Span::ALL)
    }

    /// Rules 5 and 9: [`EventSet::hazards_after_failure`] for a command touching `span`.
    pub fn hazards_after_failure_in(
        &self,
        access: Access,
        span: Span,
    ) -> impl Iterator<Item = &Entry<E>> {
        self.shadow().chain(&self.entries).filter(move |e| {
            (access == Access::Write || e.access == Access::Write) && e.span.overlaps(span)
        })
    }

    /// The superseded entries not yet known to have ended (rule 5), lane by lane.
    pub fn shadow(&self) -> impl Iterator<Item = &Entry<E>> {
        self.shadow.iter().flat_map(|group| &group.entries)
    }

    /// How many superseded entries are kept (rule 5).
    pub fn shadow_len(&self) -> usize {
        self.shadow.iter().map(|group| group.entries.len()).sum()
    }

    /// Moves `entry` to the shadow of its lane, keeping the lane's entries oldest first.
    /// Late entries (rule 8) of an in-order lane have a group of their own, pruned as an
    /// out-of-order lane's: each is asked.
    fn shadow_entry(&mut self, entry: Entry<E>) {
        let lane = Lane {
            in_order: entry.lane.in_order && !entry.late,
            ..entry.lane
        };
        let at = match self.shadow.iter().position(|g| g.lane == lane) {
            Some(at) => at,
            None => {
                self.shadow.push(LaneShadow {
                    lane,
                    entries: Vec::new(),
                });
                self.shadow.len() - 1
            }
        };
        let entries = &mut self.shadow[at].entries;
        if entries.last().is_none_or(|last| last.seq < entry.seq) {
            entries.push(entry);
        } else {
            let pos = entries.partition_point(|e| e.seq < entry.seq);
            entries.insert(pos, entry);
        }
    }

    /// How many entries rule 1 alone would ask for, before rule 2 leaves out the command's
    /// own in-order queue. For statistics.
    pub fn hazards_without_elision(&self, access: Access) -> usize {
        self.hazards_without_elision_in(access, Span::ALL)
    }

    /// [`EventSet::hazards_without_elision`] for a command touching `span`.
    pub fn hazards_without_elision_in(&self, access: Access, span: Span) -> usize {
        self.entries
            .iter()
            .filter(|e| {
                (access == Access::Write || e.access == Access::Write) && e.span.overlaps(span)
            })
            .count()
    }

    /// Records `event`, a command on `lane` with `access` that waited on the unended
    /// [`hazards`](EventSet::hazards), applying rules 3 to 6. `had_wait_list` says whether
    /// its wait list was empty (rule 5). `state` is asked only about events already in
    /// the set.
    pub fn record(
        &mut self,
        lane: Lane,
        access: Access,
        event: E,
        had_wait_list: bool,
        state: impl FnMut(&E) -> State,
    ) {
        self.record_use(lane, Use::new(access), event, had_wait_list, state);
    }

    /// [`record`](EventSet::record) for a command touching `span` (rule 9).
    pub fn record_in(
        &mut self,
        lane: Lane,
        access: Access,
        span: Span,
        event: E,
        had_wait_list: bool,
        state: impl FnMut(&E) -> State,
    ) {
        let how = Use::new(access).within(span);
        self.record_use(lane, how, event, had_wait_list, state);
    }

    /// [`record`](EventSet::record), for a command that may end after later commands of
    /// its queue: a transfer between the buffer and host memory (rule 8).
    pub fn record_late(
        &mut self,
        lane: Lane,
        access: Access,
        event: E,
        had_wait_list: bool,
        state: impl FnMut(&E) -> State,
    ) {
        let how = Use {
            late: true,
            ..Use::new(access)
        };
        self.record_use(lane, how, event, had_wait_list, state);
    }

    /// [`record_late`](EventSet::record_late) for a command touching `span` (rule 9).
    pub fn record_late_in(
        &mut self,
        lane: Lane,
        access: Access,
        span: Span,
        event: E,
        had_wait_list: bool,
        state: impl FnMut(&E) -> State,
    ) {
        let how = Use {
            access,
            span,
            late: true,
        };
        self.record_use(lane, how, event, had_wait_list, state);
    }

    /// Records `event`, a command on `lane` that uses the buffer as `how` says: what
    /// every `record` form above comes to, and what the library calls.
    // Inlined: the enqueue path calls it once per buffer touched.
    #[inline(always)]
    pub(crate) fn record_use(
        &mut self,
        lane: Lane,
        how: Use,
        event: E,
        had_wait_list: bool,
        state: impl FnMut(&E) -> State,
    ) {
        let Use { access, span, late } = how;
        // Rules 3, 4 and 9.
        let superseded = |e: &Entry<E>| {
            span.contains(e.span)
                && match access {
                    Access::Write => true,
                    Access::Read => lane.in_order && e.lane == lane && e.access == Access::Read,
                }
        };
        // Rule 5, and rule 8 for what may end late.
        let keep = |old: &Entry<E>| had_wait_list || old.late;
        let covers_all = access == Access::Write
            && (span == Span::ALL || self.entries.iter().all(|e| span.contains(e.span)));
        if covers_all && !had_wait_list && !self.entries.iter().any(|e| e.late) {
            self.entries.clear();
        } else if covers_all {
            // Taken and put back, so that the set keeps its allocation.
            let mut superseded = std::mem::take(&mut self.entries);
            for old in superseded.drain(..) {
                if keep(&old) {
                    self.shadow_entry(old);
                }
            }
            self.entries = superseded;
        } else {
            let mut i = 0;
            while i < self.entries.len() {
                if superseded(&self.entries[i]) {
                    let old = self.entries.remove(i);
                    if keep(&old) {
                        self.shadow_entry(old);
                    }
                } else {
                    i += 1;
                }
            }
        }
        self.pushed += 1;
        if self.entries.len() + self.shadow_len() >= self.prune_at
            || self.pushed >= self.prune_every
        {
            self.prune(state);
        }
        let seq = self.take_seq();
        self.entries.push(Entry {
            lane,
            access,
            span,
            event,
            seq,
            late,
        });
    }

    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Rule 6: whether pruning may skip asking about superseded entries of an in-order
    /// queue, trusting that a completed command of such a queue ran after every older
    /// command of it had ended. On by default; turn it off once a failure has been seen,
    /// since a driver's handling of commands behind a failed one is its own.
    pub fn prune_each(&mut self, each: bool) {
        self.by_lane = !each;
    }

    /// Rule 6: while queue order is not trusted ([`EventSet::prune_each`]) but no failure
    /// has been seen, whether pruning asks about an in-order queue's superseded entries
    /// oldest first and stops at the first one still pending, keeping it and the rest.
    /// Nothing that has not ended is dropped, and a failure among those kept is found
    /// by a later prune.
    pub fn stop_at_pending(&mut self, stop: bool) {
        self.until_pending = stop;
    }

    /// Removes every entry that has ended, by `state` or by rule 6.
    pub fn prune(&mut self, mut state: impl FnMut(&E) -> State) {
        let by_lane = self.by_lane;
        // Per in-order lane, the newest live entry known complete.
        let mut complete: Vec<(u64, u64)> = Vec::new();
        self.entries.retain(|e| {
            let st = state(&e.event);
            if by_lane && e.lane.in_order && st == State::Complete {
                match complete.iter_mut().find(|(id, _)| *id == e.lane.id) {
                    Some(slot) => slot.1 = slot.1.max(e.seq),
                    None => complete.push((e.lane.id, e.seq)),
                }
            }
            !st.has_ended()
        });
        for group in &mut self.shadow {
            let (lane, entries) = (group.lane, &mut group.entries);
            if !(by_lane && lane.in_order) {
                if self.until_pending && lane.in_order {
                    let first_pending = entries
                        .iter()
                        .position(|e| !state(&e.event).has_ended())
                        .unwrap_or(entries.len());
                    entries.drain(..first_pending);
                } else {
                    entries.retain(|e| !state(&e.event).has_ended());
                }
                continue;
            }
            // Older than a completed live entry of the queue: ended.
            let cutoff = complete
                .iter()
                .find(|(id, _)| *id == lane.id)
                .map_or(0, |&(_, seq)| seq);
            let ended = entries.partition_point(|e| e.seq < cutoff);
            // The rest, oldest first, is complete up to some point and then not: find the
            // point by bisection. A failure breaks the pattern: then each is asked.
            let (mut lo, mut hi) = (ended, entries.len());
            let mut failed_at = None;
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match state(&entries[mid].event) {
                    State::Complete => lo = mid + 1,
                    State::Pending => hi = mid,
                    State::Failed => {
                        failed_at = Some(entries[mid].seq);
                        break;
                    }
                }
            }
            match failed_at {
                None => drop(entries.drain(..lo)),
                Some(failed) => {
                    entries.drain(..ended);
                    entries.retain(|e| e.seq != failed && !state(&e.event).has_ended());
                }
            }
        }
        // Lanes come and go with queues: forget emptied ones beyond a few.
        if self.shadow.len() > 4 {
            self.shadow.retain(|group| !group.entries.is_empty());
        }
        let kept = self.entries.len() + self.shadow_len();
        self.prune_at = (kept * 2).max(MIN_PRUNE_AT);
        self.pushed = 0;
        self.prune_every = kept.max(PRUNE_EVERY_AT_LEAST);
    }
}

/// Folding, and what the set holds.
impl<E> EventSet<E> {
    /// Rule 7: when more than [`FOLD_AT`] entries are recorded, the oldest reads to fold
    /// into one marker (all but the newest [`FOLD_AT`]` / 2` entries' reads); empty
    /// otherwise. The caller enqueues a marker that waits on them, then calls
    /// [`fold`](EventSet::fold) with the number returned.
    pub fn reads_to_fold(&self) -> Vec<&E> {
        if self.entries.len() <= FOLD_AT {
            return Vec::new();
        }
        let oldest = self.entries.len() - FOLD_AT / 2;
        self.entries[..oldest]
            .iter()
            .filter(|e| e.access == Access::Read)
            .map(|e| &e.event)
            .collect()
    }

    /// Replaces the reads [`reads_to_fold`](EventSet::reads_to_fold) returned (`count` of
    /// them) with `marker`, a command on `lane` that waited on them all, spanning their
    /// hull (rule 9).
    pub fn fold(&mut self, count: usize, lane: Lane, marker: E) {
        let seq = self.take_seq();
        let mut left = count;
        let mut hull: Option<Span> = None;
        self.entries.retain(|e| {
            if left > 0 && e.access == Access::Read {
                left -= 1;
                hull = Some(hull.map_or(e.span, |h| h.hull(e.span)));
                false
            } else {
                true
            }
        });
        self.entries.insert(
            0,
            Entry {
                lane,
                access: Access::Read,
                span: hull.unwrap_or(Span::ALL),
                event: marker,
                seq,
                late: false,
            },
        );
    }

    /// Number of recorded entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The recorded entries, oldest first.
    pub fn entries(&self) -> &[Entry<E>] {
        &self.entries
    }

    /// Empties the set, returning every entry, shadow first.
    pub fn take(&mut self) -> Vec<Entry<E>> {
        self.prune_at = MIN_PRUNE_AT;
        let mut all: Vec<Entry<E>> = std::mem::take(&mut self.shadow)
            .into_iter()
            .flat_map(|group| group.entries)
            .collect();
        all.append(&mut self.entries);
        all
    }
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
