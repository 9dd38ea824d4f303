//! The *widest first* rule: on a driver whose launches of one kernel at a new, wider work
//! size must not overlap the launches before them ([`Behaviour::orders_kernel_widths`]), a
//! launch wider than any before it of its kernel waits for the pending launches of that
//! kernel.
//!
//! PoCL 5.0 to 6.x keep compiled work-group functions per kernel, local size and grid
//! width: a launch takes the first one at least as wide as it, and one wider than all
//! builds a new one, put first. A launch's end decrements the first one of its kernel and
//! local size, not necessarily the one it took: a launch that took an older one and ends
//! after a wider one was built decrements the wider one, whose own launch then finds its
//! count at zero and aborts the process in `pocl_release_dlhandle_cache` (design trap
//! "PoCL's dlhandle cache"; `examples/pocl_dlhandle.rs`). Launches no wider than one
//! before them all take the widest, so only a launch that widens needs ordering.
//!
//! # Rules
//!
//! - **Widest first.** Each program keeps, per kernel name, the widest global size launched
//!   (the largest dimension) and the launches that may be pending. A launch wider than all
//!   before it waits (in its wait list) for every pending launch of its kernel; every
//!   other launch is enqueued as it is. The program's lock is held from that reading to the
//!   launch's recording, so two threads cannot both find nothing pending.
//! - **Never behind a closed gate.** A launch that widens while a user event of the
//!   context is unset is not ordered: a pending launch may wait for that gate, and a
//!   command behind it would then wait for a gate its own wait list never named (a release
//!   or a wait on it could block until the program opens a gate it meant to open later).
//!   A launch still behind a gate has taken no work-group function yet, and takes the
//!   widest when it runs; what is left open is a launch already running when the gate
//!   was closed.
//! - **Flushed.** The queues of the launches a widening launch waits for are flushed
//!   first (design trap "flush before a cross-queue wait").
//! - **Ended let go.** The list keeps, per kernel and in-order queue, the newest launch
//!   (its queue ends the older ones first). Launches that have ended leave it once it has
//!   doubled since it was last asked about and, where events keep their buffers, at every
//!   release (the pins' *swept at release* rule), so the list never keeps memory a
//!   release is owed.
//! - **Not on single-event queues.** A queue whose commands wait on one event at most (a
//!   driver measured to mishandle failures, which is not PoCL) does not order launches.
//!
//! PoCL's cache is one per process; the lists are per program, so launches of one kernel
//! source in two contexts are not ordered against each other.
//!
//! [`Behaviour::orders_kernel_widths`]: crate::DriverBehaviour::orders_kernel_widths

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::util::sync::{Guard, Mutex, rank};

use crate::core::context::ContextCore;
use crate::core::pins::LetGo;
use crate::event::Event;
use crate::ffi::{self, cl_event};

/// The width PoCL compares: the largest dimension of the global size.
pub(crate) fn width(global: &[usize]) -> usize {
    global.iter().copied().max().unwrap_or(0)
}

struct Pending {
    name: Arc<str>,
    event: Event,
}

#[derive(Default)]
struct Launches {
    /// The widest global size launched, per kernel name.
    widest: Vec<(Arc<str>, usize)>,
    /// The launches recorded that may not have ended: per kernel and in-order queue the
    /// newest only (the queue ends the older ones first), every one of an out-of-order
    /// queue.
    pending: Vec<Pending>,
    /// `pending` is asked about once it has grown to this many (doubling, as the records'
    /// pruning does), so a launch costs a constant number of status reads.
    prune_at: usize,
}

/// The size at which `pending` is first asked about.
const FIRST_PRUNE: usize = 16;

/// One program's launches (the *widest first* rule).
#[derive(Default)]
pub(crate) struct Widths {
    launches: Mutex<Launches, rank::Widths>,
    /// Whether this list is in the context's pins.
    listed: AtomicBool,
}

/// The program's lock, held by one launch from its reading of the pending launches to its
/// recording.
pub(crate) struct Turn<'w> {
    widths: &'w Arc<Widths>,
    launches: Guard<'w, Launches>,
    name: Arc<str>,
    /// The pending launches this one waits for (empty unless it widens).
    before: Vec<Event>,
}

impl Widths {
    /// Takes the program's turn for a launch of `name` over `global`, letting go of the
    /// launches that have ended (the *ended let go* rule); `gates_open`: whether a user
    /// event of the context is unset (the *never behind a closed gate* rule). Called
    /// before the launch locks any record: reading an event's state can take its queue's
    /// echo lock, which an enqueue holds.
    pub(crate) fn turn<'w>(
        self: &'w Arc<Widths>,
        name: &Arc<str>,
        global: &[usize],
        gates_open: bool,
    ) -> Turn<'w> {
        let mut launches = self.launches.lock();
        if launches.pending.len() >= launches.prune_at.max(FIRST_PRUNE) {
            launches.pending.retain(|p| !p.event.state().has_ended());
            launches.prune_at = 2 * launches.pending.len();
        }
        let width = width(global);
        let widens = match launches.widest.iter_mut().find(|(n, _)| n == name) {
            Some((_, widest)) if *widest >= width => false,
            Some((_, widest)) => {
                *widest = width;
                true
            }
            None => {
                launches.widest.push((name.clone(), width));
                true
            }
        };
        let before: Vec<Event> = if widens && !gates_open {
            let pending = launches.pending.iter().filter(|p| p.name == *name);
            pending.map(|p| p.event.clone()).collect()
        } else {
            Vec::new()
        };
        // The *flushed* rule: this launch may wait for them from another queue.
        for queue in before.iter().filter_map(|e| e.inner.queue.as_ref()) {
            if let Err(e) = queue.flush_if_dirty() {
                log::warn!(target: "cl_lifetime::queue", "flushing a launch another waits for: {e}");
            }
        }
        Turn {
            widths: self,
            launches,
            name: name.clone(),
            before,
        }
    }
}

impl Turn<'_> {
    /// `wait` and the pending launches this one waits for, whose driver statuses are read
    /// now (a launch ended, failed or not, is left out; the driver's status takes no lock
    /// of the library, and the caller holds its queue's).
    pub(crate) fn wait_list<'a>(&self, wait: &'a [cl_event]) -> Cow<'a, [cl_event]> {
        if self.before.is_empty() {
            return Cow::Borrowed(wait);
        }
        let mut list = wait.to_vec();
        for event in &self.before {
            let raw = event.raw();
            if !ffi::has_ended(raw) {
                list.push(raw);
            }
        }
        Cow::Owned(list)
    }

    /// Records the launch let through (in place of the kernel's launch before it on the
    /// same in-order queue), and lists the program in the context's pins where events keep
    /// their buffers.
    pub(crate) fn launched(mut self, ctx: &ContextCore, event: &Event) {
        let queue = event.inner.queue.as_ref().filter(|q| q.lane.in_order);
        let name = &self.name;
        // In place of the kernel's launch before it on the same in-order queue, if listed.
        let slot = queue.and_then(|queue| {
            self.launches.pending.iter_mut().find(|p| {
                p.name == *name
                    && p.event
                        .inner
                        .queue
                        .as_ref()
                        .is_some_and(|q| Arc::ptr_eq(q, queue))
            })
        });
        match slot {
            Some(slot) => slot.event = event.clone(),
            None => self.launches.pending.push(Pending {
                name: self.name.clone(),
                event: event.clone(),
            }),
        }
        drop(self.launches);
        if let Some(pins) = ctx.pins.as_ref() {
            if !self.widths.listed.swap(true, Ordering::AcqRel) {
                let widths: std::sync::Weak<dyn LetGo> = Arc::downgrade(self.widths) as _;
                pins.list(widths);
            }
        }
    }
}

impl LetGo for Widths {
    fn let_go_of_ended(&self) -> bool {
        // A launch holds the turn: asked again at the next sweep.
        let Some(mut launches) = self.launches.try_lock() else {
            return true;
        };
        launches.pending.retain(|p| !p.event.state().has_ended());
        let holds = !launches.pending.is_empty();
        if !holds {
            self.listed.store(false, Ordering::Release);
        }
        holds
    }
}

#[cfg(test)]
mod tests {
    use super::width;

    #[test]
    fn the_width_is_the_largest_global_dimension() {
        assert_eq!(width(&[64]), 64);
        assert_eq!(width(&[16, 128]), 128);
        assert_eq!(width(&[8, 4, 2]), 8);
    }
}
