//! Records that share a command with other records, on a driver whose events keep their
//! commands' buffers (design trap "rusticl's events keep their buffers").
//!
//! A copy or a kernel that touches several buffers is recorded on each of them. On
//! rusticl its event holds every one of those buffers, so the release of one of them
//! frees nothing while another buffer's record still holds the event, although the
//! command has ended: a resize's old block stays while the new one holds the copy, a
//! GEMM's inputs while its output holds the GEMM, and a buffer whose command failed behind
//! a command on another buffer while the other buffer's record keeps the failure (issue 48).
//!
//! # Rules
//!
//! - **Listed.** On such a driver a record that takes the event of a command touching
//!   more than one buffer, or of a command with a wait list (whose events may be of
//!   commands on other buffers: rusticl's and Intel's CPU runtime's events keep their wait
//!   lists too), is listed here, once, until it holds no such event. A failed write the
//!   record keeps for its *failed write* rule is kept as its failure, not its event.
//! - **Swept at release.** A release, before its `clReleaseMemObject` and again while it
//!   waits for the memory to be freed, has every listed record let go of the events that
//!   have ended. A record another thread holds locked is passed over (it is in the middle
//!   of an enqueue) and asked again at the next sweep: a sweep never blocks.

use std::sync::Weak;

use crate::util::sync::{Mutex, rank};

/// A record that can let go of the events that have ended.
pub(crate) trait LetGo: Send + Sync {
    /// Lets go of the events that have ended, unless the record is locked elsewhere.
    /// Returns whether it must stay listed (it is locked, or still holds an event of a
    /// command touching several buffers).
    fn let_go_of_ended(&self) -> bool;
}

/// The records listed on one context (the *listed* rule).
#[derive(Default)]
pub(crate) struct Pins {
    listed: Mutex<Vec<Weak<dyn LetGo>>, rank::Pins>,
}

impl Pins {
    /// Lists `record` (the caller lists each record once until it leaves).
    pub(crate) fn list(&self, record: Weak<dyn LetGo>) {
        self.listed.lock().push(record);
    }

    /// The *swept at release* rule: every listed record lets go of its ended events; the
    /// records gone, or left with nothing shared, leave the list.
    pub(crate) fn sweep(&self) {
        let mut listed = self.listed.lock();
        listed.retain(|record| record.upgrade().is_some_and(|r| r.let_go_of_ended()));
    }

    /// How many records are listed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.listed.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::{LetGo, Pins};

    struct Fake {
        holds: AtomicBool,
    }

    impl LetGo for Fake {
        fn let_go_of_ended(&self) -> bool {
            self.holds.load(Ordering::SeqCst)
        }
    }

    fn fake(holds: bool) -> Arc<Fake> {
        Arc::new(Fake {
            holds: AtomicBool::new(holds),
        })
    }

    #[test]
    fn a_sweep_keeps_only_records_that_still_hold_a_shared_event() {
        let pins = Pins::default();
        let (holding, done, gone) = (fake(true), fake(false), fake(true));
        for r in [&holding, &done, &gone] {
            let r: Arc<dyn LetGo> = r.clone();
            pins.list(Arc::downgrade(&r));
        }
        drop(gone);
        pins.sweep();
        assert_eq!(pins.len(), 1);
        holding.holds.store(false, Ordering::SeqCst);
        pins.sweep();
        assert_eq!(pins.len(), 0);
    }
}
