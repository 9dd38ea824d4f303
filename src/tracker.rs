//! The per-buffer event record, without any OpenCL in it.
//!
//! An [`EventSet`] holds the events of the commands that touched one buffer, each with
//! the [`Lane`] (queue) it ran on and its [`Access`]. It never asks a driver anything:
//! whoever records an event also says which of the recorded events have completed, through
//! a closure, so the bookkeeping can be tested with plain numbers standing in for events
//! (the way wgpu-core's lifetime tracker is told which submissions finished).
//!
//! # Rules
//!
//! 1. Every recorded event stays in the set until it is known to be complete, or until a
//!    newer event provably completes after it.
//! 2. On an in-order queue a newer command completes after every older one of that queue,
//!    so a newer event replaces the older one of the same queue and access; a write also
//!    replaces the older reads of its queue. An in-order queue therefore never holds more
//!    than two entries (its newest write and its newest read).
//! 3. Events on out-of-order queues are kept until they complete.
//! 4. Completed events are pruned as new ones arrive. Pruning asks about every entry, so
//!    it runs only when the set has doubled since the last prune: the cost per record is
//!    constant on average, and the set stays within twice its live size.

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
    prune_at: usize,
}

impl<E> Default for EventSet<E> {
    fn default() -> Self {
        EventSet {
            entries: Vec::new(),
            prune_at: MIN_PRUNE_AT,
        }
    }
}

impl<E> EventSet<E> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `event`, a command on `lane` with `access`, applying rules 2 and 4.
    /// `is_done` is asked only about events already in the set.
    pub fn record(
        &mut self,
        lane: Lane,
        access: Access,
        event: E,
        is_done: impl FnMut(&E) -> bool,
    ) {
        if lane.in_order {
            self.entries.retain(|e| {
                !(e.lane.id == lane.id && (e.access == access || access == Access::Write))
            });
        }
        if self.entries.len() >= self.prune_at {
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
        self.prune_at = (self.entries.len() * 2).max(MIN_PRUNE_AT);
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

    /// Empties the set, returning its entries oldest first.
    pub fn take(&mut self) -> Vec<Entry<E>> {
        self.prune_at = MIN_PRUNE_AT;
        std::mem::take(&mut self.entries)
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

    #[test]
    fn in_order_queue_keeps_newest_event_per_access() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, |_| false);
        set.record(IN_ORDER_A, Access::Read, 2, |_| false);
        set.record(IN_ORDER_A, Access::Write, 3, |_| false);
        set.record(IN_ORDER_A, Access::Read, 4, |_| false);
        assert_eq!(events(&set), vec![3, 4]);
    }

    #[test]
    fn write_replaces_older_reads_of_its_queue() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Read, 1, |_| false);
        set.record(IN_ORDER_A, Access::Write, 2, |_| false);
        assert_eq!(events(&set), vec![2]);
    }

    #[test]
    fn queues_do_not_replace_each_other() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 1, |_| false);
        set.record(IN_ORDER_B, Access::Write, 2, |_| false);
        assert_eq!(events(&set), vec![1, 2]);
    }

    #[test]
    fn out_of_order_events_are_kept_until_done() {
        let mut set = EventSet::new();
        for e in 0..5 {
            set.record(OUT_OF_ORDER, Access::Write, e, |_| false);
        }
        assert_eq!(events(&set), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn completed_events_are_pruned_as_new_ones_arrive() {
        let mut set = EventSet::new();
        let done: HashSet<u32> = (0..1000).collect();
        for e in 0..1000u32 {
            set.record(OUT_OF_ORDER, Access::Read, e, |x| done.contains(x));
            assert!(set.len() <= MIN_PRUNE_AT, "len {} at {e}", set.len());
        }
    }

    #[test]
    fn pending_events_survive_pruning() {
        let mut set = EventSet::new();
        for e in 0..100u32 {
            // Only even events complete.
            set.record(OUT_OF_ORDER, Access::Write, e, |x| x % 2 == 0);
        }
        let kept = events(&set);
        for odd in (1..100).step_by(2) {
            assert!(kept.contains(&odd), "pending event {odd} was dropped");
        }
        assert!(kept.len() <= 2 * 50 + 1);
    }

    #[test]
    fn pruning_is_amortized() {
        let mut set = EventSet::new();
        let mut asked = 0usize;
        for e in 0..10_000u32 {
            set.record(OUT_OF_ORDER, Access::Read, e, |_| {
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
    fn take_empties_the_set() {
        let mut set = EventSet::new();
        set.record(IN_ORDER_A, Access::Write, 7, |_| false);
        let taken = set.take();
        assert_eq!(taken.len(), 1);
        assert!(set.is_empty());
    }

    /// The record must always contain an event that completes no earlier than each
    /// recorded command: either the command itself, or a newer one on the same in-order
    /// queue.
    #[test]
    fn every_recorded_command_stays_covered() {
        let lanes = [IN_ORDER_A, IN_ORDER_B, OUT_OF_ORDER];
        let mut set = EventSet::new();
        let mut history: Vec<(Lane, u32)> = Vec::new();
        let mut seed = 0x2545_f491_u32;
        for e in 0..2000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let lane = lanes[(seed % 3) as usize];
            let access = if seed & 8 == 0 {
                Access::Read
            } else {
                Access::Write
            };
            set.record(lane, access, e, |_| false);
            history.push((lane, e));
            for &(lane, old) in &history {
                let covered = set
                    .entries()
                    .iter()
                    .any(|k| k.event == old || (lane.in_order && k.lane == lane && k.event > old));
                assert!(covered, "command {old} lost its cover");
            }
            assert!(
                set.entries().iter().filter(|k| k.lane.in_order).count() <= 4,
                "in-order lanes keep at most two entries each"
            );
        }
    }
}
