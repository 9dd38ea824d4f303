//! Events dropped while their command may still fail or be notified.
//!
//! Two PoCL faults, once a failure is possible:
//! - **Pending.** If the last reference to a command's event goes while the command is
//!   pending, and the command then fails (its gate failed, or a command before it on its
//!   in-order queue did) with another command behind it, PoCL 3.1 aborts in
//!   `pocl_update_event_failed` (`PTHREAD ERROR ... Invalid argument`; design trap
//!   "PoCL's failed pending event", `examples/pocl_failed_pending_event.rs`).
//! - **Failed.** PoCL walks an event's notify list when a dependency of it ends: if the
//!   last reference to a failed event goes while another of its dependencies is still
//!   pending, PoCL reads freed memory and aborts (design trap "PoCL's failed-event notify
//!   list").
//!
//! - **Queue order.** PoCL ties every command of an in-order queue to the command
//!   before it, which the wait list does not name: a failed command is on that one's
//!   notify list until it ends, and if the last reference to the failed one goes first,
//!   PoCL 3.1 locks the freed event and aborts (`pocl_lock_events_inorder` or
//!   `pocl_update_event_failed`: `PTHREAD ERROR ... Invalid argument`; design trap
//!   "PoCL's failed command behind a pending one",
//!   `examples/pocl_failed_behind_pending.rs`). So on an in-order queue (of a driver whose
//!   events do not keep buffers), once a failure is possible, each command's event keeps
//!   the one before it on its queue (handed over by the queue's echo), and a failed one
//!   is kept until that one has ended too.
//!
//! So an event dropped in either state is kept here, unreleased, with its dependencies
//! and the command before it, and released by a later [`sweep`](graveyard::sweep) once
//! it and they have all ended.
//! Nothing else is kept: an event whose command completed, or failed after its
//! dependencies ended, is released when its last handle goes.

use super::*;

struct Grave {
    raw: RawEvent,
    deps: Box<[Event]>,
    before: Option<RawEvent>,
}

static GRAVES: Mutex<Vec<Grave>, rank::Graveyard> = Mutex::new(Vec::new());
/// How many graves there are, read without the lock.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Sweep when the graveyard has grown to this many (doubling, like a record's prune).
static SWEEP_AT: AtomicUsize = AtomicUsize::new(16);

pub(super) fn bury(raw: RawEvent, deps: Box<[Event]>, before: Option<RawEvent>) {
    let count = {
        let mut graves = GRAVES.lock();
        graves.push(Grave { raw, deps, before });
        COUNT.store(graves.len(), Ordering::Release);
        graves.len()
    };
    log::debug!(target: "cl_lifetime::event", "an event waits for its command and dependencies to end ({count} waiting)");
    if count >= SWEEP_AT.load(Ordering::Acquire) {
        let left = sweep();
        SWEEP_AT.store((left * 2).max(16), Ordering::Release);
    }
}

/// Releases every kept event whose dependencies have all ended; returns how many are
/// left. Cheap when there are none.
pub(crate) fn sweep() -> usize {
    if COUNT.load(Ordering::Acquire) == 0 {
        return 0;
    }
    let (ready, left) = {
        let Some(mut graves) = GRAVES.try_lock() else {
            return COUNT.load(Ordering::Acquire);
        };
        let (ready, waiting): (Vec<Grave>, Vec<Grave>) =
            std::mem::take(&mut *graves).into_iter().partition(|g| {
                g.raw.has_ended()
                    && g.deps.iter().all(Event::has_ended)
                    && g.before.as_ref().is_none_or(RawEvent::has_ended)
            });
        *graves = waiting;
        COUNT.store(graves.len(), Ordering::Release);
        (ready, graves.len())
    };
    // Outside the lock: dropping dependencies can bury more.
    for grave in ready {
        drop_iteratively(grave.deps);
        drop(grave.raw);
        drop(grave.before);
    }
    left
}
