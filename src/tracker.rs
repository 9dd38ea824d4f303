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
//! 6. **Pruning.** Completed events are dropped as new ones arrive. Pruning asks about every
//!    entry, so it runs only when the set has doubled since the last prune: constant cost
//!    per record on average, and the set stays within twice its live size.
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
}

/// The smallest size at which a record is pruned.
const MIN_PRUNE_AT: usize = 8;

/// The events of every command that may still touch one buffer.
#[derive(Debug)]
pub struct EventSet<E> {
    entries: Vec<Entry<E>>,
    /// Rule 5: entries superseded by a newer one, kept until they are known to have ended.
    shadow: Vec<Entry<E>>,
    prune_at: usize,
}

impl<E> Default for EventSet<E> {
    fn default() -> Self {
        EventSet {
            entries: Vec::new(),
            shadow: Vec::new(),
            prune_at: MIN_PRUNE_AT,
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
        self.shadow
            .iter()
            .chain(&self.entries)
            .filter(move |e| access == Access::Write || e.access == Access::Write)
    }

    /// The superseded entries not yet known to have ended (rule 5).
    pub fn shadow(&self) -> &[Entry<E>] {
        &self.shadow
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
    /// its wait list was empty (rule 5). `is_done` is asked only about events already in
    /// the set.
    pub fn record(
        &mut self,
        lane: Lane,
        access: Access,
        event: E,
        had_wait_list: bool,
        is_done: impl FnMut(&E) -> bool,
    ) {
        let superseded = |e: &Entry<E>| match access {
            Access::Write => true,
            Access::Read => lane.in_order && e.lane == lane && e.access == Access::Read,
        };
        let mut i = 0;
        while i < self.entries.len() {
            if superseded(&self.entries[i]) {
                let old = self.entries.remove(i);
                if had_wait_list {
                    self.shadow.push(old);
                }
            } else {
                i += 1;
            }
        }
        if self.entries.len() + self.shadow.len() >= self.prune_at {
            self.prune(is_done);
        }
        self.entries.push(Entry {
            lane,
            access,
            event,
        });
    }

    /// Removes every entry whose event `is_done` says has completed.
    pub fn prune(&mut self, mut is_done: impl FnMut(&E) -> bool) {
        self.entries.retain(|e| !is_done(&e.event));
        self.shadow.retain(|e| !is_done(&e.event));
        self.prune_at = ((self.entries.len() + self.shadow.len()) * 2).max(MIN_PRUNE_AT);
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
        let mut all = std::mem::take(&mut self.shadow);
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

    fn events(set: &EventSet<u32>) -> Vec<u32> {
        set.entries().iter().map(|e| e.event).collect()
    }

    fn hazards(set: &EventSet<u32>, lane: Lane, access: Access) -> Vec<u32> {
        set.hazards(lane, access).map(|e| e.event).collect()
    }

    #[test]
    fn read_after_write_on_another_queue_waits_on_the_write() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, |_| false);
        assert_eq!(hazards(&set, IN_ORDER_B, Access::Read), [1]);
    }

    #[test]
    fn write_after_read_waits_on_the_readers_and_the_writer() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, |_| false);
        set.record(IN_ORDER_B, Access::Read, 2, false, |_| false);
        set.record(OUT_OF_ORDER, Access::Read, 3, false, |_| false);
        assert_eq!(hazards(&set, IN_ORDER_A, Access::Write), [2, 3]);
        assert_eq!(hazards(&set, OUT_OF_ORDER, Access::Write), [1, 2, 3]);
    }

    #[test]
    fn reads_do_not_wait_on_reads() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, |_| false);
        set.record(OUT_OF_ORDER, Access::Read, 2, false, |_| false);
        assert!(hazards(&set, IN_ORDER_B, Access::Read).is_empty());
    }

    #[test]
    fn same_in_order_queue_gets_no_wait_list() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, |_| false);
        set.record(IN_ORDER_A, Access::Read, 2, false, |_| false);
        assert!(hazards(&set, IN_ORDER_A, Access::Write).is_empty());
        assert_eq!(set.hazards_without_elision(Access::Write), 2);
    }

    #[test]
    fn out_of_order_queue_waits_on_its_own_events() {
        let mut set = EventSet::new();
        set.record(OUT_OF_ORDER, Access::Write, 1, false, |_| false);
        assert_eq!(hazards(&set, OUT_OF_ORDER, Access::Read), [1]);
    }

    #[test]
    fn a_write_with_no_wait_list_drops_what_it_covers() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, |_| false);
        set.record(IN_ORDER_A, Access::Write, 2, false, |_| false);
        assert_eq!(events(&set), [2]);
        assert!(set.shadow().is_empty());
    }

    #[test]
    fn a_write_replaces_the_whole_record() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, |_| false);
        set.record(OUT_OF_ORDER, Access::Read, 2, false, |_| false);
        set.record(IN_ORDER_B, Access::Write, 3, true, |_| false);
        assert_eq!(events(&set), [3]);
        let shadow: Vec<u32> = set.shadow().iter().map(|e| e.event).collect();
        assert_eq!(shadow, [1, 2], "superseded entries wait in the shadow");
    }

    #[test]
    fn after_a_failure_hazards_leave_nothing_out() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, false, |_| false);
        set.record(IN_ORDER_B, Access::Write, 2, true, |_| false);
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
            set.record(IN_ORDER_A, Access::Write, e, true, |&x| x + 4 < e);
            assert!(
                set.shadow().len() <= 2 * MIN_PRUNE_AT,
                "shadow {}",
                set.shadow().len()
            );
        }
    }

    #[test]
    fn in_order_queue_keeps_one_read() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, false, |_| false);
        set.record(IN_ORDER_A, Access::Read, 2, false, |_| false);
        set.record(IN_ORDER_A, Access::Read, 3, false, |_| false);
        set.record(IN_ORDER_B, Access::Read, 4, false, |_| false);
        assert_eq!(events(&set), [1, 3, 4]);
    }

    #[test]
    fn out_of_order_reads_are_kept_until_done() {
        let mut set = EventSet::new();
        for e in 0..5 {
            set.record(OUT_OF_ORDER, Access::Read, e, false, |_| false);
        }
        assert_eq!(events(&set), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn completed_events_are_pruned_as_new_ones_arrive() {
        let mut set = EventSet::new();
        let done: HashSet<u32> = (0..1000).collect();
        for e in 0..1000u32 {
            set.record(OUT_OF_ORDER, Access::Read, e, false, |x| done.contains(x));
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
                true
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
        set.record(OUT_OF_ORDER, Access::Write, 0, false, |_| false);
        for e in 1..=(FOLD_AT as u32 + 1) {
            set.record(OUT_OF_ORDER, Access::Read, e, false, |_| false);
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
        set.record(IN_ORDER_A, Access::Write, 7, false, |_| false);
        assert_eq!(set.take().len(), 1);
        assert!(set.is_empty());
    }

    /// The reference model: a happens-before graph of every command, checked against the
    /// rules for random schedules.
    mod model {
        use super::super::*;
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
                        set.record(l, access, id, had_wait_list, |&e| done[e]);
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
