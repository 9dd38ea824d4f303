//! A failure's echo on its queue: which commands of a queue a driver may have skipped
//! while reporting them complete, after another command of that queue failed.
//!
//! NVIDIA's driver runs a queue's commands in order, out-of-order queues included, and
//! when one of them fails (a gate it waits on failed, or a dependency did) the commands
//! behind it on that queue are skipped: most are reported failed, but now and then one is
//! reported complete although it never ran (design trap "a failure echoes on its queue").
//! The commands enqueued right after the failure are hit too, even with empty wait lists,
//! until the queue has drained once. A status that says complete is then a lie the driver
//! gives no way to see, so the library keeps, for each queue of such a driver, the
//! stretches of commands that may have been skipped and reports those as failed.
//!
//! # Rules
//!
//! - **Watched.** Once a failure is possible, every command of the queue that has a wait
//!   list (it can fail) or is enqueued inside an open window is watched until it is seen
//!   ended. Commands get consecutive sequence numbers in enqueue order.
//! - **Window.** When a watched command is seen failed, every command after it on the
//!   queue is suspect: a window opens at the next sequence number.
//! - **Settle.** An open window closes once a marker enqueued on the queue after every
//!   watched command before it had ended has itself ended: the queue drained once, and a
//!   command enqueued from then on runs. The window ends at the first command enqueued
//!   after the marker was seen ended. The next command on the queue waits for the marker
//!   (for at most two seconds: it waits only for commands that end by themselves), so the
//!   commands after a failure run as soon as the queue has drained, and no command is tied
//!   through the queue's order to a marker still pending (PoCL would finish it twice if
//!   its gate failed as the marker ended: design trap "PoCL's double finish").
//! - **Skipped.** A command that the driver reports complete and whose sequence number
//!   lies in a window is reported failed (`CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`):
//!   its effect is unknown, as a failed command's is.
//! - **Held behind a marker.** While a settling marker has not ended, the echo lets go of
//!   no event, the marker's included: a command enqueued behind the marker depends on it
//!   through the queue's order, and if that command fails and its last reference goes
//!   before the marker ends, PoCL notifies the freed event (design trap "PoCL's
//!   failed-event notify list"; the record knows only a command's wait list, not its queue
//!   order). The echo runs on every queue of every driver, so it must hold there too.
//! - **Queue order.** On an in-order queue (where events do not keep buffers), the echo
//!   keeps the last command enqueued through it and hands the one before to each new
//!   command's event, which keeps it (see [`crate::event`]'s *queue order* rule): PoCL
//!   ties every command of an in-order queue to the one before it, and a failed command
//!   must outlive that one (design trap "PoCL's failed command behind a pending one").

use super::gates::EventKind;
use crate::ffi::{self, CL_COMPLETE, cl_int};

/// A command the echo watches: something whose execution status can be read.
pub(crate) trait Watched {
    /// The driver's execution status (negative once failed).
    fn status(&self) -> cl_int;
}

/// One queue's echo state; see the module's rules.
pub(crate) struct Echo<W: Watched> {
    /// The sequence number of the next command enqueued.
    next: u64,
    /// Watched commands not seen ended, in enqueue order.
    watched: Vec<(u64, W)>,
    /// Stretches `[from, until)` of suspect commands; the last may be open
    /// (`until == u64::MAX`).
    windows: Vec<(u64, u64)>,
    /// The marker that will close the open window, with its sequence number.
    settle: Option<(u64, W)>,
    /// The failure epoch ([`crate::core::gates`]) when the enqueue path last read the
    /// watched commands' statuses.
    polled_epoch: u64,
    /// The enqueue path reads them again, with no new failure, once this many are watched.
    poll_at: usize,
    /// Settling markers superseded before they ended, and events let go of while a
    /// marker had not ended (the *held behind a marker* rule).
    superseded: Vec<W>,
    held: Vec<W>,
    /// The last command enqueued through the echo on an in-order queue that keeps the
    /// *queue order* rule ([`Echo::follow`]).
    last: Option<W>,
}

/// The fewest watched commands at which the enqueue path reads their statuses with no
/// new failure seen.
const POLL_AT: usize = 16;

/// At most this many closed windows are kept; older ones merge into one.
const MAX_WINDOWS: usize = 64;

impl<W: Watched> Default for Echo<W> {
    fn default() -> Self {
        Echo {
            next: 1,
            watched: Vec::new(),
            windows: Vec::new(),
            settle: None,
            polled_epoch: 0,
            poll_at: POLL_AT,
            superseded: Vec::new(),
            held: Vec::new(),
            last: None,
        }
    }
}

impl<W: Watched> Echo<W> {
    /// Whether a window of suspect commands is open.
    pub(crate) fn open(&self) -> bool {
        self.windows
            .last()
            .is_some_and(|&(_, until)| until == u64::MAX)
    }

    /// Reads the watched commands' statuses (those before `before`), oldest first, up to
    /// the first still running (the driver runs the queue in order: the ones after it
    /// have not ended either, so each update costs one query more than the commands it
    /// lets go). Ended ones go, and a failed one opens a window after itself. Then closes
    /// the open window if its settling marker has ended.
    fn update(&mut self, before: u64) {
        let mut failed_at = None;
        let mut ended = 0;
        for (seq, w) in &self.watched {
            if *seq >= before {
                break;
            }
            let status = w.status();
            if status > CL_COMPLETE {
                break;
            }
            if status < 0 && failed_at.is_none() {
                failed_at = Some(*seq);
            }
            ended += 1;
        }
        let gone = self.watched.drain(..ended).map(|(_, w)| w);
        if self.settle.is_some() || !self.superseded.is_empty() {
            self.held.extend(gone);
        } else {
            gone.for_each(drop);
        }
        if let Some(seq) = failed_at {
            self.open_after(seq);
        }
        if let Some((_, marker)) = &self.settle {
            if marker.status() <= CL_COMPLETE {
                // Held while a superseded marker is pending (the *held behind a marker* rule).
                if let Some((_, marker)) = self.settle.take() {
                    if !self.superseded.is_empty() {
                        self.held.push(marker);
                    }
                }
                if let Some(last) = self.windows.last_mut() {
                    last.1 = self.next;
                }
            }
        }
        self.release_held();
    }

    /// Lets go of the watched commands that have ended (and of what the *held behind a
    /// marker* rule held, once no marker is pending), for the pins' *swept at release*
    /// rule: where events keep their buffers, a watched event would keep its buffer.
    pub(crate) fn let_go_of_ended(&mut self) {
        self.update(self.next);
    }

    /// Whether it still holds any event.
    pub(crate) fn holds_events(&self) -> bool {
        !self.watched.is_empty()
            || !self.held.is_empty()
            || self.settle.is_some()
            || !self.superseded.is_empty()
    }

    /// Releases what the *held behind a marker* rule held, once every marker has ended.
    fn release_held(&mut self) {
        if !self.superseded.is_empty() {
            let (ended, pending): (Vec<W>, Vec<W>) = std::mem::take(&mut self.superseded)
                .into_iter()
                .partition(|m| m.status() <= CL_COMPLETE);
            self.superseded = pending;
            self.held.extend(ended);
        }
        if self.settle.is_none() && self.superseded.is_empty() {
            self.held.clear();
        }
    }

    fn open_after(&mut self, seq: u64) {
        let from = seq + 1;
        match self.windows.last_mut() {
            Some(last) if last.1 == u64::MAX => last.0 = last.0.min(from),
            // A failure inside the last closed window reopens it from there.
            Some(last) if last.1 > from => {
                last.0 = last.0.min(from);
                last.1 = u64::MAX;
            }
            _ => {
                if self.windows.len() == MAX_WINDOWS {
                    let (first, second) = (self.windows[0], self.windows[1]);
                    self.windows[1] = (first.0, second.1);
                    self.windows.remove(0);
                }
                self.windows.push((from, u64::MAX));
            }
        }
        // A marker enqueued before this failure says nothing of its echo; it is let go of
        // once it has ended.
        if let Some((_, marker)) = self.settle.take() {
            self.superseded.push(marker);
        }
    }

    /// Before a command is enqueued: updates the state, and says whether a settling
    /// marker should be enqueued first (a window is open, none is pending, and every
    /// watched command before now has ended). `epoch` is the failure epoch: the statuses
    /// are read only when a failure was seen since the last time, a window is open, or
    /// the watched commands have doubled (so they stay few); a failure that happens
    /// unseen is found by [`Echo::skipped`], which always reads them.
    pub(crate) fn before_enqueue(&mut self, epoch: u64) -> bool {
        if epoch != self.polled_epoch || self.open() || self.watched.len() >= self.poll_at {
            self.polled_epoch = epoch;
            self.update(self.next);
            self.poll_at = (2 * self.watched.len()).max(POLL_AT);
        }
        self.open() && self.settle.is_none() && self.watched.is_empty()
    }

    /// The settling marker enqueued and not yet seen ended, if any: a command enqueued
    /// before it is seen ended lies in the open window, so another thread waits for it
    /// too (the *settle* rule).
    pub(crate) fn pending_marker(&self) -> Option<&W> {
        self.settle.as_ref().map(|(_, marker)| marker)
    }

    /// Notes the settling marker just enqueued.
    pub(crate) fn settling(&mut self, marker: W) {
        self.settle = Some((self.next, marker));
        self.next += 1;
    }

    /// Whether a command with a wait list (`may_fail`) enqueued now would be watched.
    pub(crate) fn watches(&self, may_fail: bool) -> bool {
        may_fail || self.open()
    }

    /// The *queue order* rule: notes `command`, just enqueued, as the queue's last, and
    /// returns the one before it, which the new command's event keeps
    /// ([`crate::event`]'s *queue order* rule).
    pub(crate) fn follow(&mut self, command: W) -> Option<W> {
        self.last.replace(command)
    }

    /// Notes a command just enqueued, watched (`Some`) or not; returns its sequence
    /// number.
    pub(crate) fn enqueued(&mut self, watched: Option<W>) -> u64 {
        let seq = self.next;
        self.next += 1;
        if let Some(w) = watched {
            self.watched.push((seq, w));
        }
        seq
    }

    /// Whether the command numbered `seq`, which the driver reports complete, may have
    /// been skipped (the *skipped* rule).
    pub(crate) fn skipped(&mut self, seq: u64) -> bool {
        self.update(seq);
        self.windows
            .iter()
            .any(|&(from, until)| from <= seq && seq < until)
    }
}

impl Echo<RawEvent> {
    /// The watched commands numbered below `before` not seen ended, each with a reference
    /// of its own (the *finished* rule of [`crate::core::queue::QueueCore::finish`]).
    pub(crate) fn unended_before(&self, before: u64) -> Vec<RawEvent> {
        self.watched
            .iter()
            .take_while(|(seq, _)| *seq < before)
            // SAFETY: a watched event is live (held here).
            .filter_map(|(_, w)| unsafe { RawEvent::retain(w.raw()) }.ok())
            .collect()
    }

    /// The oldest watched command numbered below `before` that has not ended, with a
    /// reference of its own (the record's *failed ahead of its turn* rule).
    pub(crate) fn first_unended_before(&self, before: u64) -> Option<RawEvent> {
        self.watched
            .iter()
            .take_while(|(seq, _)| *seq < before)
            .find(|(_, w)| !w.has_ended())
            // SAFETY: a watched event is live (held here).
            .and_then(|(_, w)| unsafe { RawEvent::retain(w.raw()) }.ok())
    }

    /// The number the next command will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next
    }
}

/// One reference to an event, counted in the census and released by the gates' *failure
/// in flight* rule: what a queue's echo watches, and what an [`crate::event::Event`]
/// holds. It holds no library handle, so the queue and its watched commands do not keep
/// each other alive.
pub(crate) type RawEvent = ffi::Owned<EventKind>;

impl RawEvent {
    /// Whether its command has ended (an unreadable status counts as ended).
    pub(crate) fn has_ended(&self) -> bool {
        ffi::has_ended(self.raw())
    }
}

impl Echo<RawEvent> {
    /// Blocks until every settling marker has ended, then lets go of what the *held
    /// behind a marker* rule held. A marker waits for nothing but the commands before it
    /// on its queue, which were seen ended or wait for no gate when it was enqueued, so
    /// this ends without anyone's help. For the queue's release.
    pub(crate) fn wait_for_markers(&mut self) {
        for marker in self.settle.iter().map(|(_, m)| m).chain(&self.superseded) {
            marker.wait();
        }
        self.release_held();
    }
}

impl RawEvent {
    /// Blocks until the command has ended.
    pub(crate) fn wait(&self) {
        ffi::wait_terminal(&[self.raw()]);
    }
}

impl Watched for RawEvent {
    fn status(&self) -> cl_int {
        // An unreadable status counts as failed: nothing is known of the command.
        ffi::execution_status(self.raw()).unwrap_or(-1)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::{Echo, Watched};

    const RUNNING: i32 = 2;

    /// A new failure epoch at each call, so that every update reads the statuses.
    fn epoch() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static EPOCH: AtomicU64 = AtomicU64::new(1);
        EPOCH.fetch_add(1, Ordering::Relaxed)
    }

    #[derive(Clone)]
    struct Fake(Rc<Cell<i32>>);

    impl Fake {
        fn new() -> Fake {
            Fake(Rc::new(Cell::new(RUNNING)))
        }
        fn set(&self, status: i32) {
            self.0.set(status);
        }
    }

    impl Watched for Fake {
        fn status(&self) -> i32 {
            self.0.get()
        }
    }

    #[test]
    fn without_a_failure_nothing_is_skipped() {
        let mut echo = Echo::default();
        let gated = Fake::new();
        let a = echo.enqueued(Some(gated.clone()));
        let b = echo.enqueued(None);
        gated.set(0);
        assert!(!echo.skipped(a));
        assert!(!echo.skipped(b));
        assert!(!echo.before_enqueue(epoch()));
    }

    #[test]
    fn commands_after_a_failed_one_are_skipped_until_the_queue_settles() {
        let mut echo = Echo::default();
        let before = echo.enqueued(None);
        let gated = Fake::new();
        let failing = echo.enqueued(Some(gated.clone()));
        let behind = echo.enqueued(None);
        gated.set(-1234);
        // Enqueued after the failure, before anything settled.
        let after = echo.enqueued(None);
        assert!(!echo.skipped(before));
        assert!(echo.skipped(behind));
        assert!(echo.skipped(after));
        // The settling marker goes in once every watched command has ended.
        assert!(echo.before_enqueue(epoch()));
        let marker = Fake::new();
        echo.settling(marker.clone());
        assert!(!echo.before_enqueue(epoch()), "one marker at a time");
        let while_settling = echo.enqueued(Some(Fake::new()));
        marker.set(0);
        assert!(
            echo.skipped(while_settling),
            "enqueued before the marker ended"
        );
        assert!(!echo.before_enqueue(epoch()));
        let settled = echo.enqueued(None);
        assert!(!echo.skipped(settled));
        assert!(echo.skipped(behind), "a closed window still counts");
        let _ = failing;
    }

    #[test]
    fn a_pending_watched_command_holds_the_settling_marker_back() {
        let mut echo = Echo::default();
        let failed = Fake::new();
        echo.enqueued(Some(failed.clone()));
        let behind_a_gate = Fake::new();
        echo.enqueued(Some(behind_a_gate.clone()));
        failed.set(-5);
        assert!(
            !echo.before_enqueue(epoch()),
            "a command before may still fail and echo"
        );
        behind_a_gate.set(0);
        assert!(echo.before_enqueue(epoch()));
    }

    #[test]
    fn a_failure_while_settling_needs_a_new_marker() {
        let mut echo = Echo::default();
        let first = Fake::new();
        echo.enqueued(Some(first.clone()));
        first.set(-1);
        assert!(echo.before_enqueue(epoch()));
        let marker = Fake::new();
        echo.settling(marker.clone());
        let second = Fake::new();
        let late = echo.enqueued(Some(second.clone()));
        second.set(-1);
        marker.set(0);
        let next = echo.enqueued(None);
        assert!(
            echo.skipped(next),
            "the second failure keeps the window open"
        );
        assert!(echo.skipped(late + 1));
        assert!(echo.before_enqueue(epoch()));
    }

    #[test]
    fn with_no_new_failure_the_enqueue_path_reads_statuses_only_as_the_watched_double() {
        let mut echo = Echo::default();
        assert!(!echo.before_enqueue(7));
        let done: Vec<Fake> = (0..super::POLL_AT - 1).map(|_| Fake::new()).collect();
        for d in &done {
            echo.enqueued(Some(d.clone()));
            d.set(0);
        }
        assert!(!echo.before_enqueue(7));
        assert!(!echo.before_enqueue(7));
        assert_eq!(
            echo.watched.len(),
            super::POLL_AT - 1,
            "no new failure: not read"
        );
        echo.enqueued(Some(Fake::new()));
        assert!(!echo.before_enqueue(7));
        assert_eq!(echo.watched.len(), 1, "read once they reached the bound");
        // A failure seen elsewhere makes the next enqueue read them.
        let failing = Fake::new();
        echo.enqueued(Some(failing.clone()));
        failing.set(-1);
        echo.watched.remove(0);
        assert!(echo.before_enqueue(8), "the failure opened a window");
    }

    #[test]
    fn only_the_newest_windows_are_kept_apart() {
        let mut echo = Echo::default();
        for _ in 0..super::MAX_WINDOWS + 10 {
            let failing = Fake::new();
            echo.enqueued(Some(failing.clone()));
            failing.set(-1);
            assert!(echo.before_enqueue(epoch()));
            let marker = Fake::new();
            echo.settling(marker.clone());
            marker.set(0);
            echo.before_enqueue(epoch());
            echo.enqueued(None);
        }
        assert!(echo.windows.len() <= super::MAX_WINDOWS);
        assert!(echo.skipped(2), "merged windows still cover the oldest");
    }
}
