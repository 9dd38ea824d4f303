//! Deferred releases, on a thread of the library's.
//!
//! # Rules
//!
//! 1. **Returns at once.** [`ClBuffer::release_deferred`](crate::ClBuffer::release_deferred) returns at once:
//!    the buffer and its event record go to the context's reaper thread, which frees the
//!    memory once the events have ended (the OpenCL `cudaFreeAsync`).
//! 2. **An ordinary thread.** Nothing blocking runs in an event callback, and `clReleaseMemObject` never runs in one
//!    (design trap "nothing blocking in callbacks"): the reaper is an ordinary thread. NVIDIA's `clReleaseMemObject`,
//!    which can block for a whole kernel (design trap "NVIDIA's release blocks"), blocks the reaper, never the caller.
//! 3. **Wait deferred.** [`Context::wait_deferred`](crate::Context::wait_deferred) waits until every deferred
//!    release submitted before the call is done; dropping the last handle of a context
//!    does the same, unless a user event of the context is still unset (then a release
//!    may be behind it, and the reaper finishes on its own).
//! 4. **Finished first.** Whatever has finished is freed first: the reaper never blocks on one release. It
//!    asks each pending release to advance ([`Deferred::poll`]: its commands ended? then
//!    release; the driver freed it, or its grace passed? then done), and between rounds
//!    with nothing done it sleeps, from 20 µs doubling up to 1 ms, waking at once for a
//!    new release. So a busy buffer, or one whose free is held up by a reference outside
//!    the library, holds up no other.
//! 5. **Thread life.** The thread starts with the first release and ends when the context is gone.
//! 6. **Reclaim.** A deferred release of a plain buffer is also parked ([`Parked`]): until the
//!    reaper has begun to release it, a new uninitialized buffer of the same size on the
//!    context takes it over once its commands have ended without failing, instead of
//!    asking the driver for more memory while this memory waits its turn (the stream-ordered
//!    reuse of `cudaFreeAsync` and `cudaMallocAsync`). The reaper then finds nothing to do.
//! 7. **Held for reuse.** A parked release whose commands the reaper has found ended stays
//!    parked for [`RECLAIM_HOLD`] before the reaper frees it, marked as ended: an allocation
//!    of its size takes such a block first, without asking the driver anything, and the
//!    reaper does not race the program for memory the program is about to ask for again.
//!    A caller waiting for the deferred releases ([`Reaper::wait_idle`], and the context's
//!    drop) is not held up: while one waits, or once the context is gone, ended releases
//!    are freed at once.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Weak};

use crate::util::sync::{Guard, Mutex, rank};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// A deferred release, advanced step by step without blocking (the *finished first* rule).
pub(crate) trait Deferred: Send {
    /// Advances the release as far as it can without blocking. `hurry`: someone waits for
    /// the releases, or the context is gone, so nothing is held for reuse (the *held for
    /// reuse* rule).
    fn poll(&mut self, hurry: bool) -> Step;
}

/// Where a [`Deferred::poll`] left its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Pending,
    Done,
    /// Done with nothing to do: a new buffer took the block over (the *reclaim* rule).
    /// It does not count as progress for the pause between rounds.
    Moot,
}

/// The first pause between rounds that finished nothing (the *finished first* rule).
const FIRST_PAUSE: Duration = Duration::from_micros(20);
/// The longest pause between rounds that finished nothing (the *finished first* rule).
const LONGEST_PAUSE: Duration = Duration::from_millis(1);
/// How long a parked release whose commands have ended waits for a new buffer to take it
/// over before the reaper frees it (the *held for reuse* rule): one of the reaper's
/// longest pauses, so such memory is freed within two of them.
const RECLAIM_HOLD: Duration = LONGEST_PAUSE;

#[derive(Default)]
struct State {
    /// Submitted and not yet taken by the thread.
    new: Vec<Box<dyn Deferred>>,
    submitted: u64,
    done: u64,
    /// The context is gone: the thread ends once nothing is pending.
    closed: bool,
    /// The thread has nothing pending and waits for a job without a timeout.
    idle: bool,
    /// A job that should not wait for the thread's next round was submitted, or a
    /// caller waits for the jobs.
    urgent: bool,
    /// How many callers wait for the jobs (the *held for reuse* rule: nothing is held
    /// while one does).
    waiters: usize,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State, rank::Reaper>,
    /// Signals the thread: a new release, or closing.
    wake: Condvar,
    /// Signals waiters: a release is done.
    progress: Condvar,
}

impl Shared {
    fn lock(&self) -> Guard<'_, State> {
        self.state.lock()
    }
}

#[derive(Default)]
pub(crate) struct Reaper {
    shared: Arc<Shared>,
    thread: Mutex<Option<(JoinHandle<()>, ThreadId)>, rank::ReaperThread>,
}

impl Reaper {
    /// The *returns at once* rule: hands `job` to the reaper thread, starting it if needed. If the thread cannot
    /// be started, the job runs here instead, to the end: late is better than leaked.
    ///
    /// `soon`: the job may wait for the thread's next round (at most [`LONGEST_PAUSE`]
    /// away) instead of waking it now, unless the thread is idle. A parked release (the
    /// *reclaim* rule) is such a job: a new buffer can take it over in the meantime, and
    /// not waking the thread for each one keeps it off the cores the program uses.
    pub(crate) fn submit(&self, mut job: Box<dyn Deferred>, soon: bool) {
        let mut thread = self.thread.lock();
        if thread.is_none() {
            match self.start() {
                Ok(started) => *thread = Some(started),
                Err(e) => {
                    drop(thread);
                    log::error!(target: "cl_lifetime::reaper", "no reaper thread ({e}); releasing on the caller's thread");
                    while job.poll(true) == Step::Pending {
                        thread::sleep(LONGEST_PAUSE);
                    }
                    return;
                }
            }
        }
        drop(thread);
        let mut state = self.shared.lock();
        state.submitted += 1;
        state.new.push(job);
        state.urgent |= !soon;
        let wake = !soon || state.idle;
        drop(state);
        if wake {
            self.shared.wake.notify_one();
        }
    }

    fn start(&self) -> std::io::Result<(JoinHandle<()>, ThreadId)> {
        let shared = self.shared.clone();
        let handle = thread::Builder::new()
            .name("cl-lifetime-reaper".to_string())
            .spawn(move || run(&shared))?;
        let id = handle.thread().id();
        Ok((handle, id))
    }

    /// The *wait deferred* rule: blocks until every job submitted before this call is done.
    pub(crate) fn wait_idle(&self) {
        let mut state = self.shared.lock();
        let target = state.submitted;
        // Jobs submitted to run soon are waited for now, and none is held for reuse.
        state.urgent = true;
        state.waiters += 1;
        self.shared.wake.notify_one();
        let mut state = state.wait_while(&self.shared.progress, |s| s.done < target);
        state.waiters -= 1;
    }
}

/// How many parked releases of the size asked for an allocation looks at (the *reclaim*
/// rule): each costs a status query when its commands may still run.
const RECLAIM_CANDIDATES: usize = 4;

/// A deferred release: its size in bytes, and its slot, which its job shares.
type Slot = (usize, Weak<dyn Any + Send + Sync>);

/// Deferred releases a new allocation may take over (the *reclaim* rule): each a slot its
/// job shares, with its size in bytes, oldest first. The slots are kept weakly: one goes
/// when its job is done.
#[derive(Default)]
pub(crate) struct Parked {
    slots: Mutex<Vec<Slot>, rank::ReaperSlots>,
    /// How many slots are listed, read without the lock: with none, an allocation takes
    /// no lock.
    listed: AtomicUsize,
}

impl Parked {
    /// Lists `slot`, of `bytes`, as the newest.
    pub(crate) fn park(&self, bytes: usize, slot: Weak<dyn Any + Send + Sync>) {
        let mut slots = self.slots.lock();
        slots.retain(|(_, s)| s.strong_count() > 0);
        slots.push((bytes, slot));
        self.listed.store(slots.len(), Ordering::Relaxed);
    }

    /// Offers `take` the slots of `bytes` until it takes something from one, which then
    /// leaves the list: first every slot `ready` says the reaper found ended (the *held
    /// for reuse* rule: no driver query), oldest first, then the oldest others, at most
    /// [`RECLAIM_CANDIDATES`] of them.
    pub(crate) fn take<T: Any + Send + Sync, R>(
        &self,
        bytes: usize,
        ready: impl Fn(&T) -> bool,
        mut take: impl FnMut(&T) -> Option<R>,
    ) -> Option<R> {
        if self.listed.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut slots = self.slots.lock();
        slots.retain(|(_, s)| s.strong_count() > 0);
        let ready = &ready;
        let candidates = |want_ready: bool| {
            slots
                .iter()
                .enumerate()
                .filter(|(_, (b, _))| *b == bytes)
                .filter_map(|(i, (_, s))| Some((i, s.upgrade()?.downcast::<T>().ok()?)))
                .filter(move |(_, slot)| ready(slot) == want_ready)
        };
        let taken = candidates(true)
            .chain(candidates(false).take(RECLAIM_CANDIDATES))
            .find_map(|(i, slot)| Some((i, take(&slot)?)));
        let taken = taken.map(|(i, r)| {
            slots.remove(i);
            r
        });
        self.listed.store(slots.len(), Ordering::Relaxed);
        taken
    }
}

/// The *held for reuse* rule for a parked release whose commands have ended: whether it
/// stays parked at `now`. `ended_at` is when they were first found ended, noted here on
/// the first call.
pub(crate) fn held_for_reuse(ended_at: &mut Option<Instant>, now: Instant, hurry: bool) -> bool {
    let since = *ended_at.get_or_insert(now);
    !hurry && now.duration_since(since) < RECLAIM_HOLD
}

/// The reaper thread (the *finished first* rule).
fn run(shared: &Shared) {
    let mut pending: Vec<Box<dyn Deferred>> = Vec::new();
    let mut pause = FIRST_PAUSE;
    loop {
        let hurry = {
            let mut state = shared.lock();
            if pending.is_empty() && state.new.is_empty() {
                if state.closed {
                    return;
                }
                state.idle = true;
                state = state.wait_while(&shared.wake, |s| s.new.is_empty() && !s.closed);
                state.idle = false;
            }
            pending.append(&mut state.new);
            state.urgent = false;
            state.waiters > 0 || state.closed
        };
        let (mut ended, mut released) = (0, false);
        // A finished job drops here, outside the lock: its drop may drop the context,
        // and with it this reaper.
        pending.retain_mut(|job| match job.poll(hurry) {
            Step::Pending => true,
            Step::Done => {
                ended += 1;
                released = true;
                false
            }
            Step::Moot => {
                ended += 1;
                false
            }
        });
        let mut state = shared.lock();
        if ended > 0 {
            state.done += ended;
            shared.progress.notify_all();
        }
        if released {
            pause = FIRST_PAUSE;
        } else if !pending.is_empty() && !state.urgent {
            let (_state, _) =
                state.wait_timeout_while(&shared.wake, pause, |s| !s.urgent && !s.closed);
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
        let thread = self.thread.get_mut().take();
        if let Some((handle, id)) = thread {
            // The last job may hold the last reference to the context, so this can run on
            // the reaper itself, which then ends on its own.
            if thread::current().id() != id && handle.join().is_err() {
                log::error!(target: "cl_lifetime::reaper", "the reaper thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A job done after `polls` polls, counting its polls in `seen`.
    struct Countdown {
        polls: usize,
        done_order: Arc<Mutex<Vec<usize>>>,
        name: usize,
        seen: Arc<AtomicUsize>,
    }

    impl Deferred for Countdown {
        fn poll(&mut self, _hurry: bool) -> Step {
            self.seen.fetch_add(1, Ordering::Relaxed);
            if self.polls == 0 {
                self.done_order.lock().unwrap().push(self.name);
                return Step::Done;
            }
            self.polls -= 1;
            Step::Pending
        }
    }

    #[test]
    fn a_job_that_finishes_first_is_done_first_whatever_the_submission_order() {
        let reaper = Reaper::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(AtomicUsize::new(0));
        let slow = Countdown {
            polls: 50,
            done_order: order.clone(),
            name: 1,
            seen: seen.clone(),
        };
        let quick = Countdown {
            polls: 0,
            done_order: order.clone(),
            name: 2,
            seen: seen.clone(),
        };
        reaper.submit(Box::new(slow), false);
        reaper.submit(Box::new(quick), false);
        reaper.wait_idle();
        assert_eq!(*order.lock().unwrap(), [2, 1]);
        assert!(seen.load(Ordering::Relaxed) >= 52);
    }

    /// A job blocked until the test opens it.
    struct Blocked(Arc<(Mutex<bool>, Condvar)>);

    impl Deferred for Blocked {
        fn poll(&mut self, _hurry: bool) -> Step {
            if *self.0.0.lock().unwrap() {
                Step::Done
            } else {
                Step::Pending
            }
        }
    }

    /// A job that is done only when hurried: a parked release held for reuse.
    struct HeldUntilHurried;

    impl Deferred for HeldUntilHurried {
        fn poll(&mut self, hurry: bool) -> Step {
            if hurry { Step::Done } else { Step::Pending }
        }
    }

    #[test]
    fn nothing_is_held_for_reuse_while_a_caller_waits() {
        let reaper = Reaper::default();
        reaper.submit(Box::new(HeldUntilHurried), true);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                reaper.wait_idle();
                let _ = tx.send(());
            });
            let waited = rx.recv_timeout(Duration::from_secs(20));
            // Closing hurries the job too, so the waiter ends even when this failed.
            reaper.shared.lock().closed = true;
            reaper.shared.wake.notify_all();
            assert!(
                waited.is_ok(),
                "wait_idle waited for a release held for reuse"
            );
        });
        assert_eq!(reaper.shared.lock().waiters, 0);
    }

    #[test]
    fn an_ended_parked_release_is_held_for_reuse_until_the_hold_passes_or_someone_waits() {
        let start = Instant::now();
        let mut ended_at = None;
        assert!(held_for_reuse(&mut ended_at, start, false));
        assert_eq!(ended_at, Some(start), "the first finding is noted");
        let later = start + RECLAIM_HOLD / 2;
        assert!(held_for_reuse(&mut ended_at, later, false));
        assert!(
            !held_for_reuse(&mut ended_at, later, true),
            "a waiter is not held up"
        );
        assert!(!held_for_reuse(&mut ended_at, start + RECLAIM_HOLD, false));
        assert_eq!(
            ended_at,
            Some(start),
            "the hold counts from the first finding"
        );
    }

    /// A parked entry: whether the reaper found it ended.
    struct Entry {
        name: usize,
        ended: bool,
    }

    #[test]
    fn an_allocation_takes_a_release_the_reaper_found_ended_before_asking_older_ones() {
        let parked = Parked::default();
        // The oldest entries still run; the newest was found ended. Another size is never
        // offered.
        let entries: Vec<Arc<dyn Any + Send + Sync>> = (0..RECLAIM_CANDIDATES + 2)
            .map(|name| {
                let ended = name == RECLAIM_CANDIDATES + 1;
                Arc::new(Entry { name, ended }) as Arc<dyn Any + Send + Sync>
            })
            .collect();
        let other: Arc<dyn Any + Send + Sync> = Arc::new(Entry {
            name: 99,
            ended: true,
        });
        parked.park(8, Arc::downgrade(&other));
        for entry in &entries {
            parked.park(4, Arc::downgrade(entry));
        }
        let mut asked = Vec::new();
        let taken = parked.take(
            4,
            |e: &Entry| e.ended,
            |e: &Entry| {
                asked.push(e.name);
                e.ended.then_some(e.name)
            },
        );
        assert_eq!(taken, Some(RECLAIM_CANDIDATES + 1));
        assert_eq!(
            asked,
            [RECLAIM_CANDIDATES + 1],
            "a running entry was asked first"
        );
        // With none found ended, the oldest are asked, at most RECLAIM_CANDIDATES of them.
        asked.clear();
        let taken = parked.take(
            4,
            |_: &Entry| false,
            |e: &Entry| {
                asked.push(e.name);
                None::<()>
            },
        );
        assert_eq!(taken, None);
        assert_eq!(asked, (0..RECLAIM_CANDIDATES).collect::<Vec<_>>());
        assert_eq!(
            parked.listed.load(Ordering::Relaxed),
            RECLAIM_CANDIDATES + 2
        );
    }

    #[test]
    fn wait_idle_waits_for_every_job_submitted_before_it() {
        let reaper = Reaper::default();
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        reaper.submit(Box::new(Blocked(open.clone())), false);
        let waited = std::thread::scope(|s| {
            let waiter = s.spawn(|| reaper.wait_idle());
            // The job cannot be done before it is opened, however often it is polled.
            assert_eq!(reaper.shared.lock().done, 0);
            *open.0.lock().unwrap() = true;
            waiter.join().is_ok()
        });
        assert!(waited);
        assert_eq!(reaper.shared.lock().done, 1);
    }
}
