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
//!    either ordered before it by its in-order queue or has ended already, and is dropped.
//! 6. **Pruning.** Ended events are dropped as new ones arrive, when the set has doubled
//!    since the last prune: constant cost per record on average, and the set stays within
//!    twice its live size. Asking a driver about an event costs (microseconds on some), so
//!    the superseded entries of an in-order queue are not asked about one by one: a
//!    command of such a queue completes only after every older one has ended, so when
//!    one has completed (not failed) every older entry of its queue goes unasked, and the
//!    point where the queue's entries turn from complete to pending is found by bisection.
//!    A failure breaks that pattern: then each is asked, and the caller turns the
//!    shortcut off ([`EventSet::prune_each`]) once a failure has been seen.
//! 7. **Bound.** Reads on out-of-order queues are kept until they complete. When more than
//!    [`FOLD_AT`] entries are live, the caller folds the oldest reads into one marker event
//!    ([`EventSet::reads_to_fold`], then [`EventSet::fold`]), which stands for them all.
//!
//! Together these keep every command that may still touch the buffer covered: each is in
//! the set, or completes before an event that is.

/// Above this many live entries, the oldest reads are folded into one marker (rule 7).
pub const FOLD_AT: usize = 64;

/// How a command uses a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The command only reads the buffer.
    Read,
    /// The command may write the buffer (a read-write kernel argument counts as a write).
    Write,
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
    /// Its event.
    pub event: E,
    /// Its place in the order of records (rule 6).
    pub seq: u64,
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

/// The superseded entries of one lane, oldest first.
#[derive(Debug)]
struct LaneShadow<E> {
    lane: Lane,
    entries: Vec<Entry<E>>,
}

/// The events of every command that may still touch one buffer.
#[derive(Debug)]
pub struct EventSet<E> {
    entries: Vec<Entry<E>>,
    /// Rule 5: entries superseded by a newer one, kept until they are known to have ended.
    /// Kept per lane, each lane's entries oldest first (rule 6 bisects them).
    shadow: Vec<LaneShadow<E>>,
    prune_at: usize,
    /// Rule 6: whether pruning may trust queue order (see [`EventSet::prune_each`]).
    by_lane: bool,
    next_seq: u64,
}

impl<E> Default for EventSet<E> {
    fn default() -> Self {
        EventSet {
            entries: Vec::new(),
            shadow: Vec::new(),
            prune_at: MIN_PRUNE_AT,
            by_lane: true,
            next_seq: 0,
        }
    }
}

impl<E> EventSet<E> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rules 1 and 2: the recorded entries a new command with `access` on `lane` must
    /// wait on.
    pub fn hazards(&self, lane: Lane, access: Access) -> impl Iterator<Item = &Entry<E>> {
        self.entries.iter().filter(move |e| {
            let conflicts = access == Access::Write || e.access == Access::Write;
            let ordered_by_queue = lane.in_order && e.lane == lane;
            conflicts && !ordered_by_queue
        })
    }

    /// Rule 5: after a failure, every recorded entry that conflicts with `access`, live or
    /// shadow, with nothing left out for queue order.
    pub fn hazards_after_failure(&self, access: Access) -> impl Iterator<Item = &Entry<E>> {
        self.shadow()
            .chain(&self.entries)
            .filter(move |e| access == Access::Write || e.access == Access::Write)
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
    fn shadow_entry(&mut self, entry: Entry<E>) {
        let at = match self.shadow.iter().position(|g| g.lane == entry.lane) {
            Some(at) => at,
            None => {
                self.shadow.push(LaneShadow {
                    lane: entry.lane,
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
        self.entries
            .iter()
            .filter(|e| access == Access::Write || e.access == Access::Write)
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
        let superseded = |e: &Entry<E>| match access {
            Access::Write => true,
            Access::Read => lane.in_order && e.lane == lane && e.access == Access::Read,
        };
        if access == Access::Write {
            if had_wait_list {
                let superseded = std::mem::take(&mut self.entries);
                for old in superseded {
                    self.shadow_entry(old);
                }
            } else {
                self.entries.clear();
            }
        } else {
            let mut i = 0;
            while i < self.entries.len() {
                if superseded(&self.entries[i]) {
                    let old = self.entries.remove(i);
                    if had_wait_list {
                        self.shadow_entry(old);
                    }
                } else {
                    i += 1;
                }
            }
        }
        if self.entries.len() + self.shadow_len() >= self.prune_at {
            self.prune(state);
        }
        let seq = self.take_seq();
        self.entries.push(Entry {
            lane,
            access,
            event,
            seq,
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
                entries.retain(|e| !state(&e.event).has_ended());
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
        self.prune_at = ((self.entries.len() + self.shadow_len()) * 2).max(MIN_PRUNE_AT);
    }

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
    /// them) with `marker`, a command on `lane` that waited on them all.
    pub fn fold(&mut self, count: usize, lane: Lane, marker: E) {
        let seq = self.take_seq();
        let mut left = count;
        self.entries.retain(|e| {
            if left > 0 && e.access == Access::Read {
                left -= 1;
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
                event: marker,
                seq,
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
mod tests {
    use super::*;
    use std::collections::HashSet;

    const IN_ORDER_A: Lane = Lane {
        id: 1,
        in_order: true,
    };
    const IN_ORDER_B: Lane = Lane {
        id: 2,
        in_order: true,
    };
    const OUT_OF_ORDER: Lane = Lane {
        id: 3,
        in_order: false,
    };

    fn pending<E>(_: &E) -> State {
        State::Pending
    }

    /// A `state` that says complete where `done` says so.
    fn done_if<E>(done: impl Fn(&E) -> bool) -> impl FnMut(&E) -> State {
        move |e| {
            if done(e) {
                State::Complete
            } else {
                State::Pending
            }
        }
    }

    fn events(set: &EventSet<u32>) -> Vec<u32> {
        set.entries().iter().map(|e| e.event).collect()
    }

    fn hazards(set: &EventSet<u32>, lane: Lane, access: Access) -> Vec<u32> {
        set.hazards(lane, access).map(|e| e.event).collect()
    }

    #[test]
    fn read_after_write_on_another_queue_waits_on_the_write() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, pending);
        assert_eq!(hazards(&set, IN_ORDER_B, Access::Read), [1]);
    }

    #[test]
    fn write_after_read_waits_on_the_readers_and_the_writer() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, pending);
        set.record(IN_ORDER_B, Access::Read, 2, false, pending);
        set.record(OUT_OF_ORDER, Access::Read, 3, false, pending);
        assert_eq!(hazards(&set, IN_ORDER_A, Access::Write), [2, 3]);
        assert_eq!(hazards(&set, OUT_OF_ORDER, Access::Write), [1, 2, 3]);
    }

    #[test]
    fn reads_do_not_wait_on_reads() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, pending);
        set.record(OUT_OF_ORDER, Access::Read, 2, false, pending);
        assert!(hazards(&set, IN_ORDER_B, Access::Read).is_empty());
    }

    #[test]
    fn same_in_order_queue_gets_no_wait_list() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, pending);
        set.record(IN_ORDER_A, Access::Read, 2, false, pending);
        assert!(hazards(&set, IN_ORDER_A, Access::Write).is_empty());
        assert_eq!(set.hazards_without_elision(Access::Write), 2);
    }

    #[test]
    fn out_of_order_queue_waits_on_its_own_events() {
        let mut set = EventSet::new();
        set.record(OUT_OF_ORDER, Access::Write, 1, false, pending);
        assert_eq!(hazards(&set, OUT_OF_ORDER, Access::Read), [1]);
    }

    #[test]
    fn a_write_with_no_wait_list_drops_what_it_covers() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, pending);
        set.record(IN_ORDER_A, Access::Write, 2, false, pending);
        assert_eq!(events(&set), [2]);
        assert_eq!(set.shadow_len(), 0);
    }

    #[test]
    fn a_write_replaces_the_whole_record() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, pending);
        set.record(OUT_OF_ORDER, Access::Read, 2, false, pending);
        set.record(IN_ORDER_B, Access::Write, 3, true, pending);
        assert_eq!(events(&set), [3]);
        let shadow: Vec<u32> = set.shadow().map(|e| e.event).collect();
        assert_eq!(shadow, [1, 2], "superseded entries wait in the shadow");
    }

    #[test]
    fn after_a_failure_hazards_leave_nothing_out() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, pending);
        set.record(IN_ORDER_B, Access::Write, 2, true, pending);
        // Normally the write on B covers the read, and B's own write is elided on B.
        assert!(hazards(&set, IN_ORDER_B, Access::Write).is_empty());
        let all: Vec<u32> = set
            .hazards_after_failure(Access::Write)
            .map(|e| e.event)
            .collect();
        assert_eq!(all, [1, 2]);
    }

    #[test]
    fn the_shadow_is_pruned_as_events_end() {
        let mut set = EventSet::new();
        for e in 0..1000u32 {
            set.record(IN_ORDER_A, Access::Write, e, true, done_if(|&x| x + 4 < e));
            assert!(
                set.shadow_len() <= 2 * MIN_PRUNE_AT,
                "shadow {}",
                set.shadow_len()
            );
        }
    }

    /// Two in-order queues alternating writes, each waiting on the other, so every write
    /// but the newest goes to the shadow.
    fn alternating(n: u32) -> EventSet<u32> {
        let mut set = EventSet::new();
        for e in 0..n {
            let lane = if e % 2 == 0 { IN_ORDER_A } else { IN_ORDER_B };
            set.record(lane, Access::Write, e, e > 0, pending);
        }
        assert_eq!(set.shadow_len(), n as usize - 1);
        set
    }

    #[test]
    fn a_completed_live_command_clears_the_older_shadow_of_its_queue_unasked() {
        let mut set = alternating(10);
        let mut asked = Vec::new();
        set.prune(|&e| {
            asked.push(e);
            State::Complete
        });
        // 9 is live and complete: B's older entries go unasked; bisection finds all of
        // A's five complete in three asks.
        assert!(asked.len() <= 4, "asked about {asked:?}");
        assert!(set.is_empty() && set.shadow_len() == 0);
    }

    #[test]
    fn the_point_where_a_queue_turns_pending_is_found_by_bisection() {
        let mut set = alternating(1000);
        let mut asked = 0;
        set.prune(|&e| {
            asked += 1;
            if e < 600 {
                State::Complete
            } else {
                State::Pending
            }
        });
        // The live 999 and about log2(500) asks per queue.
        assert!(asked <= 1 + 2 * 10, "asked {asked} times");
        let mut left: Vec<u32> = set.shadow().map(|e| e.event).collect();
        left.sort_unstable();
        assert_eq!(left, (600..999).collect::<Vec<_>>());
    }

    #[test]
    fn a_failure_makes_the_prune_ask_about_each_entry() {
        let mut set = EventSet::new();
        for e in 0..6u32 {
            set.record(IN_ORDER_A, Access::Write, e, true, pending);
        }
        // A command failed early (rule 5) while older ones still run: bisection cannot
        // trust the order, so each is asked, and only the ended ones go.
        let mut asked = Vec::new();
        set.prune(|&e| {
            asked.push(e);
            match e {
                2 => State::Failed,
                0 => State::Complete,
                _ => State::Pending,
            }
        });
        let left: Vec<u32> = set.shadow().map(|e| e.event).collect();
        assert_eq!(left, [1, 3, 4]);
        assert_eq!(
            asked.iter().filter(|&&e| e == 2).count(),
            1,
            "the failure is asked once"
        );
        // Without trust in queue order, every entry is asked even when a newer one completed.
        set.prune_each(true);
        let mut asked = 0;
        set.prune(|&e| {
            asked += 1;
            if e == 4 {
                State::Complete
            } else {
                State::Pending
            }
        });
        assert_eq!(asked, 4);
        assert_eq!(set.shadow_len(), 2);
    }

    #[test]
    fn out_of_order_shadow_entries_are_each_asked_about() {
        let mut set = EventSet::new();
        for e in 0..4u32 {
            set.record(OUT_OF_ORDER, Access::Write, e, true, pending);
        }
        let mut asked = 0;
        set.prune(|&e| {
            asked += 1;
            if e == 3 {
                State::Complete
            } else {
                State::Pending
            }
        });
        assert_eq!(asked, 4);
        assert_eq!(set.shadow_len(), 3);
    }

    #[test]
    fn in_order_queue_keeps_one_read() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, pending);
        set.record(IN_ORDER_A, Access::Read, 2, false, pending);
        set.record(IN_ORDER_A, Access::Read, 3, false, pending);
        set.record(IN_ORDER_B, Access::Read, 4, false, pending);
        assert_eq!(events(&set), [1, 3, 4]);
    }

    #[test]
    fn out_of_order_reads_are_kept_until_done() {
        let mut set = EventSet::new();
        for e in 0..5 {
            set.record(OUT_OF_ORDER, Access::Read, e, false, pending);
        }
        assert_eq!(events(&set), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn completed_events_are_pruned_as_new_ones_arrive() {
        let mut set = EventSet::new();
        let done: HashSet<u32> = (0..1000).collect();
        for e in 0..1000u32 {
            set.record(
                OUT_OF_ORDER,
                Access::Read,
                e,
                false,
                done_if(|x| done.contains(x)),
            );
            assert!(set.len() <= MIN_PRUNE_AT, "len {} at {e}", set.len());
        }
    }

    #[test]
    fn pruning_is_amortized() {
        let mut set = EventSet::new();
        let mut asked = 0usize;
        for e in 0..10_000u32 {
            set.record(OUT_OF_ORDER, Access::Read, e, false, |_| {
                asked += 1;
                State::Complete
            });
        }
        assert!(
            asked <= 2 * 10_000,
            "asked {asked} times for 10,000 records"
        );
    }

    #[test]
    fn many_pending_reads_fold_into_one_marker() {
        let mut set = EventSet::new();
        set.record(OUT_OF_ORDER, Access::Write, 0, false, pending);
        for e in 1..=(FOLD_AT as u32 + 1) {
            set.record(OUT_OF_ORDER, Access::Read, e, false, pending);
        }
        let folded: Vec<u32> = set.reads_to_fold().into_iter().copied().collect();
        assert!(!folded.is_empty());
        assert!(!folded.contains(&0), "the write is never folded");
        set.fold(folded.len(), IN_ORDER_A, 999);
        assert!(set.len() <= FOLD_AT / 2 + 2, "len {}", set.len());
        // A later write waits on the marker, which stands for the folded reads.
        assert!(hazards(&set, IN_ORDER_B, Access::Write).contains(&999));
        // A later read still waits on the write, not on the marker.
        assert_eq!(hazards(&set, IN_ORDER_B, Access::Read), [0]);
    }

    #[test]
    fn take_empties_the_set() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 7, false, pending);
        assert_eq!(set.take().len(), 1);
        assert!(set.is_empty());
    }

    /// The reference model: a happens-before graph of every command, checked against the
    /// rules for random schedules.
    mod model {
        use super::super::*;
        use super::done_if;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        struct Command {
            lane: usize,
            access: Access,
            /// What it waited on: its wait list, plus the previous command of its lane when
            /// that lane is in order.
            after: Vec<usize>,
            done: bool,
        }

        #[derive(Debug, Clone)]
        enum Step {
            Enqueue {
                lane: usize,
                write: bool,
            },
            /// Completes every command whose predecessors are complete, each with
            /// probability `percent` (in [0, 100]).
            Complete {
                percent: u8,
            },
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                4 => (0usize..4, any::<bool>()).prop_map(|(lane, write)| Step::Enqueue { lane, write }),
                1 => (0u8..=100).prop_map(|percent| Step::Complete { percent }),
            ]
        }

        /// Whether `target` happens before `from` (is reachable through `after`), or is
        /// complete.
        fn covered(cmds: &[Command], from: usize, target: usize) -> bool {
            let mut stack = vec![from];
            let mut seen = vec![false; cmds.len()];
            while let Some(c) = stack.pop() {
                if c == target {
                    return true;
                }
                if !std::mem::replace(&mut seen[c], true) {
                    stack.extend(&cmds[c].after);
                }
            }
            false
        }

        fn run(in_order: [bool; 4], steps: Vec<Step>, seed: u64) -> Result<(), TestCaseError> {
            let lanes: Vec<Lane> = (0..4)
                .map(|i| Lane {
                    id: i as u64 + 1,
                    in_order: in_order[i],
                })
                .collect();
            let mut set: EventSet<usize> = EventSet::new();
            let mut cmds: Vec<Command> = Vec::new();
            let mut last_on_lane: [Option<usize>; 4] = [None; 4];
            let mut rng = seed | 1;
            let mut coin = move |percent: u8| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % 100) < u64::from(percent)
            };
            let (mut waits, mut waits_unelided) = (0usize, 0usize);
            for step in steps {
                match step {
                    Step::Complete { percent } => {
                        for c in 0..cmds.len() {
                            if !cmds[c].done
                                && cmds[c].after.iter().all(|&p| cmds[p].done)
                                && coin(percent)
                            {
                                cmds[c].done = true;
                            }
                        }
                    }
                    Step::Enqueue { lane, write } => {
                        let access = if write { Access::Write } else { Access::Read };
                        let l = lanes[lane];
                        let wait: Vec<usize> = set.hazards(l, access).map(|e| e.event).collect();
                        waits += wait.len();
                        waits_unelided += set.hazards_without_elision(access);
                        // Rule 1: reads never wait on reads.
                        if access == Access::Read {
                            for &w in &wait {
                                prop_assert_eq!(cmds[w].access, Access::Write);
                            }
                        }
                        // Rule 2: nothing of the command's own in-order queue.
                        if l.in_order {
                            for &w in &wait {
                                prop_assert_ne!(cmds[w].lane, lane);
                            }
                        }
                        let id = cmds.len();
                        let had_wait_list = !wait.is_empty();
                        let mut after = wait;
                        if l.in_order {
                            after.extend(last_on_lane[lane]);
                        }
                        cmds.push(Command {
                            lane,
                            access,
                            after,
                            done: false,
                        });
                        last_on_lane[lane] = Some(id);
                        // The hazard rules: every earlier conflicting command that is not
                        // complete happens before this one.
                        for p in 0..id {
                            let conflict =
                                access == Access::Write || cmds[p].access == Access::Write;
                            if conflict && !cmds[p].done {
                                prop_assert!(
                                    covered(&cmds, id, p),
                                    "command {id} ({access:?} on lane {lane}) does not wait for {p} ({:?} on lane {})",
                                    cmds[p].access,
                                    cmds[p].lane
                                );
                            }
                        }
                        let done: Vec<bool> = cmds.iter().map(|c| c.done).collect();
                        set.record(l, access, id, had_wait_list, done_if(|&e: &usize| done[e]));
                        // Rule 7: fold, as the library does, with a marker on this lane.
                        let folded: Vec<usize> = set.reads_to_fold().into_iter().copied().collect();
                        if !folded.is_empty() {
                            let marker = cmds.len();
                            let mut after = folded.clone();
                            if l.in_order {
                                after.extend(last_on_lane[lane]);
                                last_on_lane[lane] = Some(marker);
                            }
                            cmds.push(Command {
                                lane,
                                access: Access::Read,
                                after,
                                done: false,
                            });
                            set.fold(folded.len(), l, marker);
                        }
                        prop_assert!(set.len() <= FOLD_AT + 1, "record grew to {}", set.len());
                    }
                }
                // Release: every command not complete is covered by a recorded event.
                for p in 0..cmds.len() {
                    if !cmds[p].done {
                        let ok = set.entries().iter().any(|e| covered(&cmds, e.event, p));
                        prop_assert!(ok, "command {p} is no longer covered by the record");
                    }
                }
            }
            prop_assert!(waits <= waits_unelided);
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn random_schedules_follow_the_hazard_rules(
                in_order in any::<[bool; 4]>(),
                steps in prop::collection::vec(step(), 1..200),
                seed in any::<u64>(),
            ) {
                run(in_order, steps, seed)?;
            }
        }

        #[test]
        fn long_out_of_order_read_runs_stay_bounded() {
            let steps: Vec<Step> = std::iter::once(Step::Enqueue {
                lane: 0,
                write: true,
            })
            .chain((0..600).map(|i| Step::Enqueue {
                lane: i % 2,
                write: false,
            }))
            .collect();
            run([false, false, true, true], steps, 7).unwrap();
        }
    }
}
