//! The reference model: a happens-before graph of every command, checked against the
//! rules for random schedules.

use super::tests::done_if;
use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Command {
    lane: usize,
    access: Access,
    /// The bytes it touches (rule 9).
    span: Span,
    /// Its wait list: it starts once each of them is done.
    wait: Vec<usize>,
    /// The previous command of its lane when that lane is in order: it starts once that
    /// one has run.
    prev: Option<usize>,
    /// Whether it may be done only some time after it has run (rule 8: a transfer to or
    /// from host memory), while later commands of its queue run.
    late: bool,
    /// Whether it has run on the device.
    ran: bool,
    /// Whether its event has completed.
    done: bool,
}

impl Command {
    /// Everything it is ordered after.
    fn after(&self) -> impl Iterator<Item = usize> + '_ {
        self.wait.iter().copied().chain(self.prev)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Enqueue {
        lane: usize,
        write: bool,
        late: bool,
        /// Which of [`SPANS`] it touches.
        span: usize,
    },
    /// Runs every command that may start (and completes it, unless it is late), and
    /// completes every late command that has run, each with probability `percent` (in
    /// [0, 100]).
    Complete { percent: u8 },
}

/// The byte ranges commands touch (rule 9): the whole buffer, its bytes given as a range,
/// its halves, a middle overlapping both, and a piece of the first half; and some of
/// them through sub-buffers (rule 10).
const SPANS: [Span; 10] = [
    Span::ALL,
    Span::new(0, 100),
    Span::new(0, 50),
    Span::new(50, 100),
    Span::new(25, 75),
    Span::new(10, 20),
    Span::new(0, 50).through_sub_buffer(),
    Span::new(50, 100).through_sub_buffer(),
    Span::new(25, 75).through_sub_buffer(),
    Span::new(10, 20).through_sub_buffer(),
];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..4, any::<bool>(), prop::bool::weighted(0.25), 0..SPANS.len())
            .prop_map(|(lane, write, late, span)| Step::Enqueue { lane, write, late, span }),
        1 => (0u8..=100).prop_map(|percent| Step::Complete { percent }),
    ]
}

/// Whether `target` happens before `from` (is reachable through `after`).
fn covered(cmds: &[Command], from: usize, target: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = vec![false; cmds.len()];
    while let Some(c) = stack.pop() {
        if c == target {
            return true;
        }
        if !std::mem::replace(&mut seen[c], true) {
            stack.extend(cmds[c].after());
        }
    }
    false
}

/// Whether `target` is done once `from` is: a command is done only after its wait list
/// is done and after the previous command of its queue has run, which is done then too
/// unless it is late (rule 8).
fn ends_before(cmds: &[Command], from: usize, target: usize) -> bool {
    // (command, whether it is known done rather than only run)
    let mut stack = vec![(from, true)];
    let mut seen = vec![[false; 2]; cmds.len()];
    while let Some((c, done)) = stack.pop() {
        if c == target && done {
            return true;
        }
        if !std::mem::replace(&mut seen[c][usize::from(done)], true) {
            stack.extend(cmds[c].wait.iter().map(|&w| (w, true)));
            stack.extend(cmds[c].prev.map(|p| (p, !cmds[p].late)));
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
                    let cmd = &cmds[c];
                    if cmd.ran {
                        if !cmd.done && coin(percent) {
                            cmds[c].done = true;
                        }
                        continue;
                    }
                    let may_start = cmd.wait.iter().all(|&w| cmds[w].done)
                        && cmd.prev.is_none_or(|p| cmds[p].ran);
                    if may_start && coin(percent) {
                        cmds[c].ran = true;
                        cmds[c].done = !cmds[c].late;
                    }
                }
            }
            Step::Enqueue {
                lane,
                write,
                late,
                span,
            } => {
                let access = if write { Access::Write } else { Access::Read };
                let span = SPANS[span];
                let l = lanes[lane];
                let wait: Vec<usize> = set.hazards_in(l, access, span).map(|e| e.event).collect();
                waits += wait.len();
                waits_unelided += set.hazards_without_elision_in(access, span);
                // Rule 9: nothing on bytes it does not touch.
                for &w in &wait {
                    prop_assert!(cmds[w].span.overlaps(span));
                }
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
                cmds.push(Command {
                    lane,
                    access,
                    span,
                    wait,
                    prev: last_on_lane[lane].filter(|_| l.in_order),
                    late,
                    ran: false,
                    done: false,
                });
                last_on_lane[lane] = Some(id);
                // The hazard rules: every earlier conflicting command that has not run
                // on the device happens before this one. A late command (rule 8) has
                // done its device work once it has run, in its queue's order, though its
                // event may not have completed: the release check below waits for that.
                for p in 0..id {
                    let conflict = (access == Access::Write || cmds[p].access == Access::Write)
                        && cmds[p].span.overlaps(span);
                    if conflict && !cmds[p].ran {
                        prop_assert!(
                            covered(&cmds, id, p),
                            "command {id} ({access:?} on lane {lane}) does not wait for {p} ({:?} on lane {})",
                            cmds[p].access,
                            cmds[p].lane
                        );
                    }
                }
                let done: Vec<bool> = cmds.iter().map(|c| c.done).collect();
                let state = done_if(|&e: &usize| done[e]);
                if late {
                    set.record_late_in(l, access, span, id, had_wait_list, state);
                } else {
                    set.record_in(l, access, span, id, had_wait_list, state);
                }
                // Rule 7: fold, as the library does, with a marker on this lane.
                let folded: Vec<usize> = set.reads_to_fold().into_iter().copied().collect();
                if !folded.is_empty() {
                    let marker = cmds.len();
                    let hull = folded
                        .iter()
                        .map(|&f| cmds[f].span)
                        .reduce(Span::hull)
                        .unwrap_or(Span::ALL);
                    cmds.push(Command {
                        lane,
                        access: Access::Read,
                        span: hull,
                        wait: folded.clone(),
                        prev: last_on_lane[lane].filter(|_| l.in_order),
                        late: false,
                        ran: false,
                        done: false,
                    });
                    if l.in_order {
                        last_on_lane[lane] = Some(marker);
                    }
                    set.fold(folded.len(), l, marker);
                }
                prop_assert!(set.len() <= FOLD_AT + 1, "record grew to {}", set.len());
            }
        }
        // Release: every command not done is done once every event recorded is.
        for p in 0..cmds.len() {
            if !cmds[p].done {
                let ok = set
                    .entries()
                    .iter()
                    .chain(set.shadow())
                    .any(|e| ends_before(&cmds, e.event, p));
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

/// A write that may end late, then a write of its in-order queue with no wait list, then
/// reads on another queue once the second write has completed: the first write's device
/// work ended before the second one ran, so the reads need not wait for its event (they
/// did not, and the model once said they must). Found by the proptest above.
#[test]
fn a_late_write_followed_by_a_completed_write_of_its_queue_needs_no_wait() {
    let read = |lane| Step::Enqueue {
        lane,
        write: false,
        late: false,
        span: 0,
    };
    let mut steps: Vec<Step> = (0..11).map(|_| read(0)).collect();
    steps.extend([
        Step::Complete { percent: 6 },
        read(3),
        Step::Enqueue {
            lane: 3,
            write: true,
            late: true,
            span: 0,
        },
        Step::Enqueue {
            lane: 3,
            write: true,
            late: false,
            span: 0,
        },
        read(0),
        Step::Complete { percent: 93 },
        read(0),
        read(0),
        read(0),
    ]);
    run([false, false, false, true], steps, 3767467674184148646).unwrap();
}

#[test]
fn long_out_of_order_read_runs_stay_bounded() {
    let steps: Vec<Step> = std::iter::once(Step::Enqueue {
        lane: 0,
        write: true,
        late: false,
        span: 0,
    })
    .chain((0..600).map(|i| Step::Enqueue {
        lane: i % 2,
        write: false,
        late: false,
        span: i % SPANS.len(),
    }))
    .collect();
    run([false, false, true, true], steps, 7).unwrap();
}
