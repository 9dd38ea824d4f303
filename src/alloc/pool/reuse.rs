//! The pool's choice of a block to reuse (the *stream-ordered reuse* rule of
//! [`super`]), as a pure function over the class's unused blocks: no device, no lock, no
//! driver call of its own, so its bound is a device-free property test, as
//! gpu-allocator's sub-allocators are tested.

use std::collections::VecDeque;

/// How many pooled blocks of a class [`Pool::acquire_on`](super::Pool::acquire_on) looks
/// at before it allocates (the *stream-ordered reuse* rule, which names the number): each
/// costs at most one query of a pending status.
pub(super) const SCAN: usize = 8;

/// What the choice asks of an unused block.
pub(super) trait Reusable<L> {
    /// Whether a command on `lane` can use it with no wait: every command recorded on it
    /// has ended, or ran on that in-order queue.
    fn free_for(&mut self, lane: L) -> bool;
    /// Whether it holds a command that will fail (the *clean hand-over* rule).
    fn holds_doomed(&mut self) -> bool;
}

/// Takes a block for `lane` out of `blocks` (oldest first), or `None` for a new one.
/// Without a lane, the newest. With one, the first of the oldest [`SCAN`] blocks that
/// [`Reusable::free_for`] the lane; those looked at and passed over go to the back, so
/// blocks held up for long do not keep the others from being seen. Failing that, `None`
/// while `room` says a new block fits the maximum, else the newest (ordered by a
/// device-side wait: *inherited record*). Where `doomed_possible`, a block that
/// [`Reusable::holds_doomed`] is passed over while there is room.
pub(super) fn pick<L: Copy, B: Reusable<L>>(
    blocks: &mut VecDeque<B>,
    lane: Option<L>,
    doomed_possible: bool,
    room: impl Fn() -> bool,
) -> Option<B> {
    match lane {
        None if !doomed_possible => blocks.pop_back(),
        None => {
            let newest = blocks.len();
            let found = (newest.saturating_sub(SCAN)..newest)
                .rev()
                .find(|&i| !blocks[i].holds_doomed());
            match found {
                Some(i) => blocks.remove(i),
                None if room() => None,
                None => blocks.pop_back(),
            }
        }
        Some(lane) => {
            let mut free = None;
            for _ in 0..blocks.len().min(SCAN) {
                let Some(mut block) = blocks.pop_front() else {
                    break;
                };
                if block.free_for(lane) && !(doomed_possible && block.holds_doomed()) {
                    free = Some(block);
                    break;
                }
                blocks.push_back(block);
            }
            match free {
                Some(block) => Some(block),
                None if room() => None,
                None => blocks.pop_back(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, VecDeque};

    use proptest::prelude::*;

    use super::{Reusable, SCAN, pick};

    /// A block of the model: its number, and the lane of its commands still pending
    /// (`None`: all ended). A block is free for its own lane's in-order queue.
    struct Fake {
        id: usize,
        pending_on: Option<u8>,
        doomed: bool,
    }

    impl Reusable<u8> for Fake {
        fn free_for(&mut self, lane: u8) -> bool {
            self.pending_on.is_none_or(|on| on == lane)
        }
        fn holds_doomed(&mut self) -> bool {
            self.doomed
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// `acquire_on(lane)`.
        Acquire(u8),
        /// The `n`th held block goes back, with commands still pending on its lane or not.
        Release(usize, bool),
        /// The `n`th unused block's pending commands end.
        End(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..4).prop_map(Op::Acquire),
            (any::<usize>(), any::<bool>()).prop_map(|(n, p)| Op::Release(n, p)),
            any::<usize>().prop_map(Op::End),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// The rule's bound: if, whenever the program acquires, it holds or has commands
        /// pending on at most `k` blocks (`k` below [`SCAN`]), the pool makes at most
        /// `k + 1` blocks, whatever the order of ends and releases. (Acquires that would
        /// break the premise are left out of the program.)
        #[test]
        fn the_pool_makes_at_most_one_block_more_than_the_program_keeps_busy(
            k in 1usize..SCAN,
            ops in prop::collection::vec(op(), 1..300),
        ) {
            let mut unused: VecDeque<Fake> = VecDeque::new();
            let mut held: Vec<(usize, u8)> = Vec::new();
            let mut made = 0usize;
            for op in ops {
                match op {
                    Op::Acquire(lane) => {
                        let busy = held.len() + unused.iter().filter(|b| b.pending_on.is_some()).count();
                        if busy + 1 > k {
                            continue;
                        }
                        let block = match pick(&mut unused, Some(lane), false, || true) {
                            Some(block) => block.id,
                            None => {
                                made += 1;
                                made - 1
                            }
                        };
                        held.push((block, lane));
                    }
                    Op::Release(n, pending) if !held.is_empty() => {
                        let (id, lane) = held.swap_remove(n % held.len());
                        unused.push_back(Fake { id, pending_on: pending.then_some(lane), doomed: false });
                    }
                    Op::End(n) if !unused.is_empty() => {
                        let i = n % unused.len();
                        unused[i].pending_on = None;
                    }
                    _ => {}
                }
                prop_assert!(made <= k + 1, "{made} blocks made for at most {k} busy");
            }
            let ids: BTreeSet<usize> = unused.iter().map(|b| b.id).chain(held.iter().map(|h| h.0)).collect();
            prop_assert_eq!(ids.len(), unused.len() + held.len(), "a block handed out twice");
        }
    }

    #[test]
    fn without_a_lane_the_newest_clean_block_is_taken_and_a_doomed_one_passed_over() {
        let mut blocks: VecDeque<Fake> = (0..3)
            .map(|id| Fake {
                id,
                pending_on: None,
                doomed: id == 2,
            })
            .collect();
        assert_eq!(
            pick(&mut blocks, None, true, || true).map(|b| b.id),
            Some(1)
        );
        assert_eq!(
            pick(&mut blocks, None, false, || true).map(|b| b.id),
            Some(2)
        );
    }

    #[test]
    fn at_the_maximum_a_busy_block_is_handed_out_rather_than_none() {
        let mut blocks: VecDeque<Fake> = (0..2)
            .map(|id| Fake {
                id,
                pending_on: Some(9),
                doomed: false,
            })
            .collect();
        assert!(
            pick(&mut blocks, Some(1), false, || true).is_none(),
            "room: a new block"
        );
        assert_eq!(
            pick(&mut blocks, Some(1), false, || false).map(|b| b.id),
            Some(1)
        );
    }
}
