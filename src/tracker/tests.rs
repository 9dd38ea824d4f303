//! The tracker's rules, one test each, with plain numbers for events.

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
pub(super) fn done_if<E>(done: impl Fn(&E) -> bool) -> impl FnMut(&E) -> State {
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

/// Rule 8: NVIDIA ends a non-blocking read into pageable memory after the next command
/// of its queue has run, so that command's completion says nothing about the read's.
#[test]
fn a_late_read_stays_in_the_shadow_when_its_queue_writes_with_no_wait_list() {
    let mut set = EventSet::new();
    set.record_late(IN_ORDER_A, Access::Read, 1, false, pending);
    set.record(IN_ORDER_A, Access::Write, 2, false, pending);
    assert_eq!(events(&set), [2]);
    let shadow: Vec<u32> = set.shadow().map(|e| e.event).collect();
    assert_eq!(shadow, [1]);
    // Still ordered by the queue: its own queue does not wait on it.
    assert!(hazards(&set, IN_ORDER_A, Access::Write).is_empty());
}

/// Rule 8 against rule 6: a later command of the queue that has completed does not make
/// a late entry count as ended, nor does bisection.
#[test]
fn a_late_entry_is_asked_about_itself_when_the_shadow_is_pruned() {
    let mut set = EventSet::new();
    set.record(IN_ORDER_A, Access::Write, 1, false, pending);
    set.record_late(IN_ORDER_A, Access::Read, 2, false, pending);
    // Superseded with a wait list, so the write goes to the shadow too.
    set.record(IN_ORDER_A, Access::Write, 3, true, pending);
    set.record(IN_ORDER_A, Access::Write, 4, true, pending);
    // Everything but the late read has completed.
    set.prune(done_if(|&e| e != 2));
    let shadow: Vec<u32> = set.shadow().map(|e| e.event).collect();
    assert_eq!(shadow, [2]);
    set.prune(done_if(|_| true));
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
fn without_trust_in_queue_order_but_no_failure_seen_pruning_stops_at_the_first_pending_entry() {
    let mut set = EventSet::new();
    for e in 0..8u32 {
        set.record(IN_ORDER_A, Access::Write, e, true, pending);
        set.record(OUT_OF_ORDER, Access::Write, 100 + e, true, pending);
    }
    set.prune_each(true);
    set.stop_at_pending(true);
    let mut asked = Vec::new();
    // 0 and 1 have ended, 2 is pending, 3 has ended out of order (kept for a later prune).
    set.prune(|&e| {
        asked.push(e);
        match e {
            0 | 3 | 101 => State::Complete,
            1 => State::Failed,
            _ => State::Pending,
        }
    });
    let in_order: Vec<u32> = asked.iter().copied().filter(|&e| e < 100).collect();
    // Lane A's superseded entries, oldest first, up to the first pending one.
    assert_eq!(in_order, [0, 1, 2], "asked {asked:?}");
    // The out-of-order lane's entries are each asked about, with the live one (107).
    assert_eq!(
        asked.iter().filter(|&&e| e >= 100).count(),
        8,
        "asked {asked:?}"
    );
    let left: Vec<u32> = set.shadow().map(|e| e.event).collect();
    assert!(left.contains(&3) && !left.contains(&0) && !left.contains(&1));
    assert!(!left.contains(&101) && left.contains(&102), "{left:?}");
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

const FIRST_HALF: Span = Span::new(0, 512);
const SECOND_HALF: Span = Span::new(512, 1024);

fn hazards_in(set: &EventSet<u32>, lane: Lane, access: Access, span: Span) -> Vec<u32> {
    set.hazards_in(lane, access, span)
        .map(|e| e.event)
        .collect()
}

#[test]
fn commands_on_disjoint_byte_ranges_never_wait_on_each_other() {
    let mut set = EventSet::new();
    set.record_in(IN_ORDER_A, Access::Write, FIRST_HALF, 1, false, pending);
    assert!(hazards_in(&set, IN_ORDER_B, Access::Write, SECOND_HALF).is_empty());
    set.record_in(IN_ORDER_B, Access::Write, SECOND_HALF, 2, false, pending);
    // A reader of one half waits for that half's writer only.
    assert_eq!(
        hazards_in(&set, OUT_OF_ORDER, Access::Read, FIRST_HALF),
        [1]
    );
    assert_eq!(
        hazards_in(&set, OUT_OF_ORDER, Access::Read, SECOND_HALF),
        [2]
    );
    // A command on the whole buffer waits for both, and the reverse.
    assert_eq!(hazards(&set, OUT_OF_ORDER, Access::Read), [1, 2]);
}

#[test]
fn a_write_supersedes_only_what_its_range_contains() {
    let mut set = EventSet::new();
    set.record_in(
        IN_ORDER_A,
        Access::Write,
        Span::new(0, 600),
        1,
        false,
        pending,
    );
    set.record_in(IN_ORDER_B, Access::Write, FIRST_HALF, 2, true, pending);
    // The first write still holds bytes 512..600: a reader there waits for it alone.
    assert_eq!(
        hazards_in(&set, OUT_OF_ORDER, Access::Read, Span::new(550, 560)),
        [1]
    );
    assert_eq!(
        hazards_in(&set, OUT_OF_ORDER, Access::Read, Span::new(0, 10)),
        [1, 2]
    );
    set.record_in(
        IN_ORDER_B,
        Access::Write,
        Span::new(0, 1024),
        3,
        true,
        pending,
    );
    // Both are now contained: only the last write is live, the rest in the shadow.
    assert_eq!(
        hazards_in(&set, OUT_OF_ORDER, Access::Read, Span::new(550, 560)),
        [3]
    );
    assert_eq!(set.shadow_len(), 2);
}

#[test]
fn a_fold_marker_spans_the_hull_of_its_reads() {
    let mut set = EventSet::new();
    for i in 0..=FOLD_AT as u32 {
        let span = if i % 2 == 0 {
            Span::new(0, 10)
        } else {
            Span::new(20, 30)
        };
        set.record_in(OUT_OF_ORDER, Access::Read, span, i, false, pending);
    }
    let folded = set.reads_to_fold().len();
    assert!(folded > 0);
    set.fold(folded, OUT_OF_ORDER, 1000);
    let marker = set.entries().iter().find(|e| e.event == 1000).unwrap();
    assert_eq!(marker.span, Span::new(0, 30));
    assert!(hazards_in(&set, IN_ORDER_A, Access::Write, Span::new(40, 50)).is_empty());
}

#[test]
fn the_buffer_and_a_sub_buffer_of_it_overlap_whatever_their_bytes_and_sub_buffers_by_bytes() {
    let own_low = Span::new(0, 50);
    let sub_high = Span::new(50, 100).through_sub_buffer();
    let sub_low = Span::new(0, 50).through_sub_buffer();
    // OpenCL 3.0, clCreateSubBuffer: a buffer and its sub-buffer, whatever the bytes.
    assert!(own_low.overlaps(sub_high) && sub_high.overlaps(own_low));
    assert!(!own_low.overlaps_bytes(sub_high));
    // Two sub-buffers: by their bytes.
    assert!(!sub_low.overlaps(sub_high));
    assert!(sub_low.overlaps(Span::new(40, 60).through_sub_buffer()));
    // Standing in for another command: the same kind of object, or the whole buffer.
    assert!(!Span::new(0, 100).through_sub_buffer().contains(own_low));
    assert!(!Span::new(0, 100).contains(sub_low));
    assert!(Span::ALL.contains(sub_low));
    assert!(Span::new(0, 100).through_sub_buffer().contains(sub_low));
    assert_eq!(own_low.hull(sub_high), Span::ALL);
    assert_eq!(
        sub_low.hull(sub_high),
        Span::new(0, 100).through_sub_buffer()
    );
}

#[test]
fn a_write_through_a_sub_buffer_waits_for_a_read_of_other_bytes_through_the_buffer() {
    let mut set = EventSet::new();
    let own = Span::new(0, 10);
    let sub = Span::new(500, 600).through_sub_buffer();
    set.record_in(OUT_OF_ORDER, Access::Read, own, 1, false, pending);
    assert_eq!(hazards_in(&set, IN_ORDER_B, Access::Write, sub), [1]);
    // Reads of both may run together.
    assert!(hazards_in(&set, IN_ORDER_B, Access::Read, sub).is_empty());
    // A write through the sub-buffer does not stand for the read of other bytes: a later
    // write through the buffer of those bytes still waits for it.
    set.record_in(IN_ORDER_B, Access::Write, sub, 2, true, pending);
    assert_eq!(hazards_in(&set, IN_ORDER_A, Access::Write, own), [1, 2]);
}
