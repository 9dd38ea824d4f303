//! The waiter: wakes the tasks that await commands, from threads of the library's that
//! block in `clWaitForEvents`, with no driver callback and no polling.
//!
//! A future that finds its command pending hands the command's event to the process's
//! waiter ([`waiter`], [`Waiter::watch`]) with a [`Watch`] holding its task's waker. The waiter's
//! threads each block in `clWaitForEvents` on one watched event, and when it ends, read
//! which watched commands of the same *lane* have ended, and wake their tasks.
//!
//! # Rules
//!
//! 1. **Lanes.** A watched command belongs to a lane: the queue it ran on, or a lane of its
//!    own (a user event, a command from outside the library). A lane's commands are kept
//!    in the order they were watched, which is the order they end in where an in-order
//!    queue's commands are awaited as they were enqueued.
//! 2. **Covered.** Every watched command is *covered*: a thread blocks on it, or on a
//!    command of its lane that ends on its own (it was enqueued while every user event of
//!    its context was set, or none is unset now: every command enqueued before then ends
//!    without the program's help). When that wait returns, the thread reads its lane,
//!    wakes the ended, and covers the rest again. So a command that has ended is never left
//!    unwoken behind one that waits for a gate the program opens later: a command
//!    watched where no wait of its lane ends on its own gets a thread of its own.
//! 3. **Threads on demand.** A command that no thread covers wakes an idle thread or
//!    starts one, up to [`MAX_THREADS`] in the process (beyond them it waits for a thread
//!    to come free); a thread idle for [`IDLE_EXIT`] ends, so a program that awaits
//!    nothing keeps none. While nothing ends, the threads block in the
//!    driver or on a condition variable: no polling.
//! 4. **Read in order.** After a wait, the lane's commands are read oldest first: on an
//!    in-order queue up to the first still pending (it is waited for next), elsewhere up to
//!    [`SCAN`] pending ones.
//! 5. **Wake outside the lock.** A task is woken after the waiter's lock is let go, and
//!    its [`Watch`] is marked ended under the watch's own lock, which the future takes
//!    to store its waker and read the mark: a wake-up is never lost between the two.
//! 6. **Forgotten on drop.** A future dropped before its command ended takes its command
//!    off the waiter ([`Waiter::forget`]), and its waker with it; the device is not
//!    touched. A thread blocked on that command keeps its own reference to the event until
//!    its wait returns, and wakes no one.
//! 7. **Jobs.** Work that would block an async task on the device (a release's
//!    `clReleaseMemObject` and its wait for the free) runs on the waiter's threads
//!    ([`Waiter::run`]), ahead of new waits.
//! 8. **Only the handle.** The waiter holds the events it watches (retained raw handles)
//!    and their contexts' open gates, never a context or a queue: a context dropped while
//!    futures of its commands are alive goes when its last handle does.
//! 9. **Quiet on a spinning driver.** A driver whose `clWaitForEvents` spins (NVIDIA's:
//!    the blocked thread uses a whole core) is found by the first wait of 2 ms or more on
//!    one of its commands, from the thread's CPU time; its later waits sleep until the
//!    driver's callback at the command's end, one callback per wait, not per watched
//!    command, with the status read again at growing intervals (10 ms doubling to 1 s)
//!    for a driver that skips the callback of a failed command (rusticl 22.3). That wakes
//!    later than a spinning wait (design trap "callbacks wake slowly"); `CL_LIFETIME_WAIT=spin` keeps every wait in `clWaitForEvents`, and `quiet`
//!    puts every wait through a callback.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::Duration;

use super::gates::OpenGates;

/// The most threads one context's waiter runs at once (the *threads on demand* rule).
pub(crate) const MAX_THREADS: usize = 256;
/// How long a waiter thread with nothing to do waits before it ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(2);
/// How many pending commands of a lane that is not in order are read after a wait (the
/// *read in order* rule).
pub(crate) const SCAN: usize = 64;
/// The stack of a waiter thread: it only waits, reads statuses and wakes tasks.
const STACK: usize = 256 * 1024;

/// What the waiter asks of a watched command.
pub(crate) trait Awaited: Send + Sync + 'static {
    /// Whether the command has ended (completed or failed).
    fn has_ended(&self) -> bool;
    /// Blocks until the command has ended (`clWaitForEvents`).
    fn wait(&self);
    /// Blocks until the command has ended, asleep: woken by the driver's callback at the
    /// command's end (the *quiet on a spinning driver* rule).
    fn wait_quietly(&self) {
        self.wait();
    }
}

impl Awaited for super::echo::RawEvent {
    fn has_ended(&self) -> bool {
        crate::ffi::has_ended(self.as_raw())
    }

    fn wait(&self) {
        super::echo::RawEvent::wait(self);
    }

    fn wait_quietly(&self) {
        let bell = Arc::new(Bell::default());
        let user = Arc::into_raw(bell.clone()) as *mut std::ffi::c_void;
        // SAFETY: the event is live (held by `self`); `ring` takes back the one reference
        // `user` carries, once, from whichever thread the driver calls it on.
        if let Err(e) = unsafe { crate::ffi::on_end(self.as_raw(), ring, user) } {
            // SAFETY: the driver refused the callback, so `user`'s reference is still ours.
            drop(unsafe { Arc::from_raw(user.cast_const().cast::<Bell>()) });
            log::debug!(target: "cl_lifetime::waiter", "waiting with clWaitForEvents: {e}");
            self.wait();
            return;
        }
        // A net for a driver that skips the callback of a command that failed (rusticl
        // 22.3): the status is read again at growing intervals, about once a second at
        // most after the first seconds, so a missed callback costs a delay, never a hang.
        let mut pause = Duration::from_millis(10);
        while !bell.wait_for(pause) {
            if self.has_ended() {
                return;
            }
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

/// Rung by a driver's callback at a command's end.
#[derive(Default)]
struct Bell {
    rung: Mutex<bool>,
    heard: Condvar,
}

impl Bell {
    /// Whether it rang within `limit`.
    fn wait_for(&self, limit: Duration) -> bool {
        let rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        let (rung, _) = self
            .heard
            .wait_timeout_while(rung, limit, |r| !*r)
            .unwrap_or_else(PoisonError::into_inner);
        *rung
    }
}

/// The driver's callback: rings the bell. Takes no lock but the bell's, which its waiter
/// holds only to sleep (design trap "nothing blocking in callbacks").
extern "C" fn ring(
    _event: crate::ffi::cl_event,
    _status: crate::ffi::cl_int,
    user: *mut std::ffi::c_void,
) {
    // SAFETY: `user` is the reference `wait_quietly` gave the driver, taken back once here.
    let bell = unsafe { Arc::from_raw(user.cast_const().cast::<Bell>()) };
    *bell.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
    bell.heard.notify_all();
}

/// How waiter threads wait (`CL_LIFETIME_WAIT`): `spin` always in `clWaitForEvents`, `quiet`
/// always through a callback, otherwise as measured per driver (the *quiet on a spinning
/// driver* rule).
pub const WAIT_VAR: &str = "CL_LIFETIME_WAIT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitMode {
    Spin,
    Quiet,
    Measure,
}

fn wait_mode() -> WaitMode {
    static MODE: std::sync::OnceLock<WaitMode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var(WAIT_VAR).as_deref().map(str::trim) {
        Ok("spin") => WaitMode::Spin,
        Ok("quiet") => WaitMode::Quiet,
        _ => WaitMode::Measure,
    })
}

/// The CPU time this thread has used, in nanoseconds, where the system says.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// A wait at least this long tells whether a driver's `clWaitForEvents` spins.
const MEASURED_WAIT: Duration = Duration::from_millis(2);

/// Where a watched command runs (the *lanes* rule), and whether it ends on its own.
#[derive(Clone)]
pub(crate) struct Order {
    /// Its driver, by a device of it (or its context's handle, for a command of no
    /// queue): whether waits spin is known per driver.
    pub(crate) driver: usize,
    /// The queue's lane id, `None` for a lane of its own.
    pub(crate) queue: Option<u64>,
    /// Whether the queue runs its commands in order.
    pub(crate) in_order: bool,
    /// Whether it was enqueued while every user event of its context was set.
    pub(crate) ends_on_its_own: bool,
    /// Its context's user events not set yet, where known.
    pub(crate) gates: Option<Arc<OpenGates>>,
}

/// One future's side of a watched command: whether it ended, and the waker to call then.
#[derive(Default)]
pub(crate) struct Watch {
    state: Mutex<WatchState>,
}

#[derive(Default)]
struct WatchState {
    ended: bool,
    waker: Option<Waker>,
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the waiter saw the command end; if not, `waker` is the one it will wake
    /// (the *wake outside the lock* rule).
    pub(crate) fn ended_or_wake(&self, waker: &Waker) -> bool {
        let mut state = self.lock();
        if state.ended {
            return true;
        }
        match &mut state.waker {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        false
    }

    /// Lets go of the waker: a forgotten command wakes no one (the *forgotten on drop*
    /// rule), even where a thread's wait on it is under way.
    fn disarm(&self) {
        self.lock().waker = None;
    }

    /// Marks the command ended and hands back the waker to wake.
    fn end(&self) -> Option<Waker> {
        let mut state = self.lock();
        state.ended = true;
        state.waker.take()
    }
}

/// A watched command, as [`Waiter::watch`] hands it back: for [`Waiter::forget`].
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    lane: LaneKey,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LaneKey {
    Queue(u64),
    Alone(u64),
}

struct Entry<E> {
    id: u64,
    driver: usize,
    event: Arc<E>,
    watch: Arc<Watch>,
    ends_on_its_own: bool,
    gates: Option<Arc<OpenGates>>,
}

/// A thread's wait on a command of a lane.
struct Wait {
    /// The command's id.
    id: u64,
    /// The command ends on its own, or no user event of the context was unset when the
    /// wait began (the *covered* rule).
    ends_on_its_own: bool,
}

struct Lane<E> {
    key: LaneKey,
    in_order: bool,
    /// Oldest first.
    entries: Vec<Entry<E>>,
    waits: Vec<Wait>,
}

impl<E> Lane<E> {
    /// The first command of the lane that no thread covers (the *covered* rule).
    fn uncovered(&self) -> Option<usize> {
        if self.waits.iter().any(|w| w.ends_on_its_own) {
            return None;
        }
        // A command a thread blocks on is covered by its own wait.
        self.entries
            .iter()
            .position(|e| !self.waits.iter().any(|w| w.id == e.id))
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct State<E> {
    lanes: Vec<Lane<E>>,
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    /// Threads started or woken that have not looked for work yet: a command watched
    /// meanwhile summons no other (the thread that takes work summons the next).
    summoned: usize,
    /// The waiter is gone: threads end once nothing is left to do.
    closed: bool,
}

struct Shared<E> {
    state: Mutex<State<E>>,
    work: Condvar,
    next_id: AtomicU64,
    /// Per driver, whether its `clWaitForEvents` was measured to spin.
    spins: Mutex<Vec<(usize, bool)>>,
}

impl<E> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, State<E>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A waiter (see the module's rules).
pub(crate) struct Waiter<E: Awaited> {
    shared: Arc<Shared<E>>,
}

impl<E: Awaited> Waiter<E> {
    /// A waiter. No thread starts until a command is watched.
    pub(crate) fn new() -> Self {
        Waiter {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    lanes: Vec::new(),
                    jobs: VecDeque::new(),
                    threads: 0,
                    idle: 0,
                    summoned: 0,
                    closed: false,
                }),
                work: Condvar::new(),
                spins: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Watches `event`, running as `order` says: `watch` is marked ended and its waker
    /// woken once the event has ended. `Err` when no thread could be started and none
    /// runs (the caller then waits another way).
    pub(crate) fn watch(
        &self,
        event: Arc<E>,
        order: Order,
        watch: Arc<Watch>,
    ) -> std::io::Result<Ticket> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let key = match order.queue {
            Some(queue) => LaneKey::Queue(queue),
            None => LaneKey::Alone(id),
        };
        let entry = Entry {
            id,
            driver: order.driver,
            event,
            watch,
            ends_on_its_own: order.ends_on_its_own,
            gates: order.gates,
        };
        let mut state = self.shared.lock();
        match state.lanes.iter_mut().find(|l| l.key == key) {
            Some(lane) => lane.entries.push(entry),
            None => state.lanes.push(Lane {
                key,
                in_order: order.in_order,
                entries: vec![entry],
                waits: Vec::new(),
            }),
        }
        let ticket = Ticket { id, lane: key };
        let needs_thread = state.summoned == 0
            && state
                .lanes
                .iter()
                .find(|l| l.key == key)
                .is_some_and(|l| l.uncovered().is_some());
        if needs_thread {
            if let Err(e) = summon(&self.shared, state) {
                self.forget(&ticket);
                return Err(e);
            }
        }
        Ok(ticket)
    }

    /// The *forgotten on drop* rule: takes the command of `ticket` off the waiter, if it
    /// is still there.
    pub(crate) fn forget(&self, ticket: &Ticket) {
        let removed = {
            let mut state = self.shared.lock();
            let Some(l) = state.lanes.iter().position(|l| l.key == ticket.lane) else {
                return;
            };
            let lane = &mut state.lanes[l];
            let removed = lane
                .entries
                .iter()
                .position(|e| e.id == ticket.id)
                .map(|i| lane.entries.remove(i));
            if lane.entries.is_empty() && lane.waits.is_empty() {
                state.lanes.swap_remove(l);
            }
            removed
        };
        if let Some(entry) = &removed {
            entry.watch.disarm();
        }
        // Outside the lock: the event may be released here.
        drop(removed);
    }

    /// The *jobs* rule: runs `job` on a waiter thread. `Err` (with the job back) when no
    /// thread could be started and none runs.
    pub(crate) fn run(&self, job: Job) -> Result<(), (std::io::Error, Job)> {
        let mut state = self.shared.lock();
        state.jobs.push_back(job);
        if let Err(e) = summon(&self.shared, state) {
            let mut state = self.shared.lock();
            if state.threads == 0 {
                if let Some(job) = state.jobs.pop_back() {
                    return Err((e, job));
                }
            }
        }
        Ok(())
    }

    /// How many threads the waiter runs now.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.shared.lock().threads
    }

    /// How many commands it watches now.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.shared
            .lock()
            .lanes
            .iter()
            .map(|l| l.entries.len())
            .sum()
    }
}

impl<E: Awaited> Drop for Waiter<E> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
    }
}

/// What a thread does next.
enum Task<E> {
    Job(Job),
    Wait {
        lane: LaneKey,
        id: u64,
        driver: usize,
        event: Arc<E>,
        watch: Arc<Watch>,
    },
}

impl<E: Awaited> State<E> {
    /// A job, else a wait on the first uncovered command, noted in its lane's waits.
    fn next(&mut self) -> Option<Task<E>> {
        if let Some(job) = self.jobs.pop_front() {
            return Some(Task::Job(job));
        }
        let (lane, i) = self
            .lanes
            .iter_mut()
            .find_map(|l| l.uncovered().map(|i| (l, i)))?;
        let entry = &lane.entries[i];
        lane.waits.push(Wait {
            id: entry.id,
            ends_on_its_own: entry.ends_on_its_own
                || entry.gates.as_ref().is_some_and(|g| g.count() == 0),
        });
        Some(Task::Wait {
            lane: lane.key,
            id: entry.id,
            driver: entry.driver,
            event: entry.event.clone(),
            watch: entry.watch.clone(),
        })
    }

    /// After a wait on command `id` of `lane` returned: the wait is over, and the lane's
    /// ended commands leave it (the *read in order* rule); their watches are handed back.
    fn waited(&mut self, key: LaneKey, id: u64) -> Vec<Arc<Watch>> {
        let Some(l) = self.lanes.iter().position(|l| l.key == key) else {
            return Vec::new();
        };
        let lane = &mut self.lanes[l];
        lane.waits.retain(|w| w.id != id);
        let mut ended = Vec::new();
        if let Some(i) = lane.entries.iter().position(|e| e.id == id) {
            ended.push(lane.entries.remove(i).watch);
        }
        // Read oldest first; the ended leave in one pass (a lane can hold thousands).
        let mut pending_seen = 0;
        let mut ended_ids = Vec::new();
        for entry in &lane.entries {
            if entry.event.has_ended() {
                ended_ids.push(entry.id);
                continue;
            }
            pending_seen += 1;
            if lane.in_order || pending_seen >= SCAN {
                break;
            }
        }
        if !ended_ids.is_empty() {
            let mut next = 0;
            lane.entries.retain_mut(|e| {
                if ended_ids.get(next) == Some(&e.id) {
                    next += 1;
                    ended.push(e.watch.clone());
                    false
                } else {
                    true
                }
            });
        }
        if lane.entries.is_empty() && lane.waits.is_empty() {
            self.lanes.swap_remove(l);
        }
        ended
    }
}

/// Wakes an idle thread, or starts one below [`MAX_THREADS`] (the *threads on demand*
/// rule). `Err` only when a thread was needed, none could be started and none runs.
fn summon<E: Awaited>(
    shared: &Arc<Shared<E>>,
    mut state: MutexGuard<'_, State<E>>,
) -> std::io::Result<()> {
    if state.idle > state.summoned {
        state.summoned += 1;
        drop(state);
        shared.work.notify_one();
        return Ok(());
    }
    if state.threads >= MAX_THREADS {
        log::debug!(target: "cl_lifetime::waiter", "{MAX_THREADS} waiter threads busy; a wait queues");
        return Ok(());
    }
    state.threads += 1;
    state.summoned += 1;
    drop(state);
    let theirs = shared.clone();
    let started = std::thread::Builder::new()
        .name("cl-lifetime-waiter".into())
        .stack_size(STACK)
        .spawn(move || run(&theirs));
    match started {
        Ok(_) => Ok(()),
        Err(e) => {
            let mut state = shared.lock();
            state.threads -= 1;
            state.summoned -= 1;
            log::error!(target: "cl_lifetime::waiter", "no waiter thread: {e}");
            if state.threads == 0 { Err(e) } else { Ok(()) }
        }
    }
}

/// The *quiet on a spinning driver* rule: waits for `event` of `driver` in
/// `clWaitForEvents`, unless that driver's was measured to spin (NVIDIA's does: a thread
/// blocked there uses a whole core), where it sleeps until the driver's callback at the
/// command's end. The first wait of a driver's of at least [`MEASURED_WAIT`] measures it.
fn wait_for<E: Awaited>(shared: &Shared<E>, event: &E, driver: usize) {
    let known = || {
        let spins = shared.spins.lock().unwrap_or_else(PoisonError::into_inner);
        spins.iter().find(|(d, _)| *d == driver).map(|&(_, s)| s)
    };
    match (wait_mode(), known()) {
        (WaitMode::Spin, _) | (WaitMode::Measure, Some(false)) => event.wait(),
        (WaitMode::Quiet, _) | (WaitMode::Measure, Some(true)) => event.wait_quietly(),
        (WaitMode::Measure, None) => {
            let (start, cpu) = (std::time::Instant::now(), thread_cpu_ns());
            event.wait();
            let wall = start.elapsed();
            let (Some(before), Some(after)) = (cpu, thread_cpu_ns()) else {
                return;
            };
            if wall >= MEASURED_WAIT {
                let spun = after.saturating_sub(before) as u128 * 2 >= wall.as_nanos();
                log::debug!(
                    target: "cl_lifetime::waiter",
                    "a wait of {wall:?} used {} µs of CPU: waits {}",
                    after.saturating_sub(before) / 1000,
                    if spun { "go through callbacks" } else { "block in clWaitForEvents" }
                );
                let mut spins = shared.spins.lock().unwrap_or_else(PoisonError::into_inner);
                if !spins.iter().any(|(d, _)| *d == driver) {
                    spins.push((driver, spun));
                }
            }
        }
    }
}

/// A waiter thread.
fn run<E: Awaited>(shared: &Arc<Shared<E>>) {
    let mut state = shared.lock();
    // Started summoned.
    let mut summoned = true;
    loop {
        let task = state.next();
        if std::mem::take(&mut summoned) {
            state.summoned -= 1;
        }
        // The *threads on demand* rule: the next uncovered command gets its own thread.
        if task.is_some() && state.summoned == 0 && state.has_uncovered() {
            if let Err(e) = summon(shared, state) {
                log::debug!(target: "cl_lifetime::waiter", "no second waiter thread: {e}");
            }
            state = shared.lock();
        }
        match task {
            Some(Task::Job(job)) => {
                drop(state);
                job();
                state = shared.lock();
            }
            Some(Task::Wait {
                lane,
                id,
                driver,
                event,
                watch,
            }) => {
                drop(state);
                wait_for(shared, &*event, driver);
                // Its own task first, before the lane is read (a forgotten command's watch
                // holds no waker).
                if let Some(waker) = watch.end() {
                    waker.wake();
                }
                drop(watch);
                let ended = shared.lock().waited(lane, id);
                // Outside the lock (the *wake outside the lock* rule); the event may be
                // released here too.
                drop(event);
                for watch in ended {
                    if let Some(waker) = watch.end() {
                        waker.wake();
                    }
                }
                state = shared.lock();
            }
            None => {
                if state.closed && state.lanes.is_empty() {
                    break;
                }
                state.idle += 1;
                let (s, timeout) = shared
                    .work
                    .wait_timeout(state, IDLE_EXIT)
                    .unwrap_or_else(PoisonError::into_inner);
                state = s;
                state.idle -= 1;
                // A summons, if one is out, is this thread's to answer: it looks for work.
                let summons = state.summoned > 0;
                if summons {
                    state.summoned -= 1;
                }
                if timeout.timed_out()
                    && !summons
                    && state.jobs.is_empty()
                    && !state.has_uncovered()
                {
                    break;
                }
            }
        }
    }
    state.threads -= 1;
}

impl<E> State<E> {
    fn has_uncovered(&self) -> bool {
        self.lanes.iter().any(|l| l.uncovered().is_some())
    }
}

/// The process's waiter, for every context's commands.
pub(crate) fn waiter() -> &'static Waiter<super::echo::RawEvent> {
    static WAITER: std::sync::OnceLock<Waiter<super::echo::RawEvent>> = std::sync::OnceLock::new();
    WAITER.get_or_init(Waiter::new)
}

#[cfg(test)]
mod tests {
    //! The waiter's protocol against commands of the test's own, which end when the test
    //! says: no device, every interleaving the threads produce.

    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Condvar, Mutex};
    use std::task::{Wake, Waker};
    use std::time::{Duration, Instant};

    use super::{Awaited, Order, Waiter, Watch};
    use crate::core::gates::OpenGates;

    /// A command that ends when the test ends it.
    #[derive(Default)]
    struct Command {
        ended: Mutex<bool>,
        changed: Condvar,
    }

    impl Command {
        fn end(&self) {
            *self.ended.lock().unwrap() = true;
            self.changed.notify_all();
        }
    }

    impl Awaited for Command {
        fn has_ended(&self) -> bool {
            *self.ended.lock().unwrap()
        }

        fn wait(&self) {
            let ended = self.ended.lock().unwrap();
            let _ended = self.changed.wait_while(ended, |e| !*e).unwrap();
        }
    }

    /// A task's waker that counts its wakes.
    #[derive(Default)]
    struct Task {
        woken: AtomicUsize,
    }

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.woken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Task {
        fn woken(&self) -> usize {
            self.woken.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// Waits up to ten seconds for `done`.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "not within 10 s: {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn gates(open: usize) -> Arc<OpenGates> {
        let gates = Arc::new(OpenGates::default());
        for id in 0..open {
            gates.opened(id as u64, std::panic::Location::caller());
        }
        gates
    }

    fn order(queue: Option<u64>, ends_on_its_own: bool, gates: &Arc<OpenGates>) -> Order {
        Order {
            driver: 0,
            queue,
            in_order: true,
            ends_on_its_own,
            gates: Some(gates.clone()),
        }
    }

    /// Watches `command` for a new task; hands back the watch and the task.
    fn watch(
        waiter: &Waiter<Command>,
        command: &Arc<Command>,
        order: Order,
    ) -> (Arc<Watch>, Arc<Task>, super::Ticket) {
        let task = Arc::new(Task::default());
        let watch = Arc::new(Watch::default());
        let waker = Waker::from(task.clone());
        assert!(!watch.ended_or_wake(&waker));
        let ticket = waiter.watch(command.clone(), order, watch.clone()).unwrap();
        (watch, task, ticket)
    }

    #[test]
    fn a_task_is_woken_once_when_its_command_ends_and_not_before() {
        let waiter = Waiter::new();
        let command = Arc::new(Command::default());
        let (watch, task, _) = watch(&waiter, &command, order(Some(1), true, &gates(0)));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(task.woken(), 0, "woken before its command ended");
        command.end();
        eventually("the task is woken", || task.woken() == 1);
        let waker = Waker::from(task.clone());
        assert!(watch.ended_or_wake(&waker));
        eventually("nothing is left watched", || waiter.watched() == 0);
        assert_eq!(task.woken(), 1);
    }

    #[test]
    fn a_command_behind_a_gated_one_of_its_queue_is_woken_when_it_ends() {
        let waiter = Waiter::new();
        let open = gates(1);
        let gated = Arc::new(Command::default());
        let later = Arc::new(Command::default());
        // Watched in this order: the gated one first, as the *covered* rule's hard case.
        let (_, gated_task, _) = watch(&waiter, &gated, order(Some(7), false, &open));
        let (_, later_task, _) = watch(&waiter, &later, order(Some(7), false, &open));
        later.end();
        eventually(
            "the ended command's task is woken while the gated one waits",
            || later_task.woken() == 1,
        );
        assert_eq!(gated_task.woken(), 0);
        gated.end();
        eventually("the gated command's task is woken", || {
            gated_task.woken() == 1
        });
    }

    #[test]
    fn commands_that_end_on_their_own_share_one_thread_per_queue() {
        let waiter = Waiter::new();
        let none_open = gates(0);
        let commands: Vec<Arc<Command>> = (0..2000).map(|_| Arc::default()).collect();
        let tasks: Vec<_> = commands
            .iter()
            .map(|c| watch(&waiter, c, order(Some(3), true, &none_open)).1)
            .collect();
        assert!(waiter.threads() <= 1, "{} threads", waiter.threads());
        for command in &commands {
            command.end();
        }
        eventually("every task is woken", || {
            tasks.iter().all(|t| t.woken() == 1)
        });
        eventually("nothing is left watched", || waiter.watched() == 0);
    }

    #[test]
    fn a_forgotten_command_is_neither_held_nor_woken() {
        let waiter = Waiter::new();
        let command = Arc::new(Command::default());
        let (_, task, ticket) = watch(&waiter, &command, order(None, false, &gates(0)));
        waiter.forget(&ticket);
        assert_eq!(waiter.watched(), 0);
        command.end();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(task.woken(), 0);
        // The thread that waited on it let go of its reference.
        eventually("only the test holds the command", || {
            Arc::strong_count(&command) == 1
        });
    }

    #[test]
    fn jobs_run_on_a_waiter_thread() {
        let waiter: Waiter<Command> = Waiter::new();
        let (send, receive) = std::sync::mpsc::channel();
        let caller = std::thread::current().id();
        waiter
            .run(Box::new(move || {
                send.send(std::thread::current().id()).unwrap();
            }))
            .map_err(|(e, _)| e)
            .unwrap();
        let ran_on = receive.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(ran_on, caller);
    }

    /// Random programs of watched commands on a few lanes, some gated, ended in a random
    /// order: every task is woken exactly once, only after its command ended, whatever the
    /// order; and a gated command never holds up another's wake-up.
    #[test]
    fn random_programs_wake_every_ended_command_exactly_once() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..40 {
            let waiter = Waiter::new();
            let open = gates(1);
            let closed = gates(0);
            let count = 1 + next(60) as usize;
            let mut watched = Vec::new();
            for _ in 0..count {
                let command = Arc::new(Command::default());
                let queue = match next(4) {
                    0 => None,
                    q => Some(q),
                };
                let gated = next(3) == 0;
                let order = Order {
                    driver: 0,
                    queue,
                    in_order: next(2) == 0,
                    ends_on_its_own: !gated,
                    gates: Some(if gated { open.clone() } else { closed.clone() }),
                };
                let (watch, task, _) = watch(&waiter, &command, order);
                watched.push((command, watch, task, gated));
            }
            // The commands that end on their own end, in a random order, with nobody
            // waiting for a wake-up in between (a device ends them regardless): all are
            // woken while every gated one is still pending. Then the gated ones end, in a
            // random order: each is woken before the next one ends, since a gate the
            // program has not opened may wait for that wake-up.
            let (mut free, mut gated): (Vec<_>, Vec<_>) =
                watched.iter().partition(|(_, _, _, g)| !*g);
            let tasks: Vec<_> = free.iter().map(|(_, _, task, _)| task.clone()).collect();
            while !free.is_empty() {
                let (command, _, _, _) = free.swap_remove(next(free.len() as u64) as usize);
                command.end();
            }
            eventually("every ungated command's task is woken", || {
                tasks.iter().all(|t| t.woken() == 1)
            });
            while !gated.is_empty() {
                let (command, _, task, _) = gated.swap_remove(next(gated.len() as u64) as usize);
                command.end();
                eventually("a gated command's task is woken", || task.woken() == 1);
            }
            eventually("nothing is left watched", || waiter.watched() == 0);
            for (_, _, task, _) in &watched {
                assert_eq!(task.woken(), 1);
            }
        }
    }
}
