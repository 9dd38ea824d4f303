//! The waiter: wakes the tasks that await commands, from a bounded set of the library's
//! threads: one *poller* that reads statuses and never blocks on a command, and up to
//! [`MAX_BLOCKERS`] *blockers*, each blocked in `clWaitForEvents` on a command that ends
//! without the program's help. Work that would block a task (a release, an
//! [`unblock`](crate::unblock) closure) runs on *job* threads.
//!
//! A future that finds its command pending hands the command's event to the process's
//! waiter ([`waiter`], [`Waiter::watch`]) with a [`Watch`] holding its task's waker.
//!
//! # Rules
//!
//! 1. **Lanes.** A watched command belongs to a lane: the queue it ran on, or a lane of its
//!    own (a user event, a command from outside the library), kept in the order watched.
//! 2. **Polled.** Every watched command is on the poller's schedule until it is seen ended
//!    or forgotten: its status is read after pauses that double from [`FIRST_PAUSE`] to
//!    [`MAX_PAUSE`], or longer where that many reads would cost the poller more than
//!    1/[`POLL_SHARE`] of a core. The poller never blocks on a command, so every command
//!    that ends is seen within its pause, whatever the program's gates do: no wake-up
//!    depends on another command ending, and no set of awaits can deadlock.
//!
//!    **Held.** A command that waits on a gate not set yet (in its wait list, or in that
//!    of a pending command it waits on) cannot complete before a kick: it is read at the
//!    longest pause until then, and after a kick's spin while that gate is still closed.
//!    So awaits behind closed gates cost one filing each and almost no reads, however
//!    many there are and however long they wait. Only a failure of another of its
//!    dependencies, which the driver may pass on at once, ends it sooner; that end is
//!    seen within the longest pause.
//! 3. **Kicked.** A gate set through the library (complete or failed) kicks the poller,
//!    after the driver's call: every watched command of the gate's context is read back to
//!    back, yielding between passes, for [`SPIN`], then from [`FIRST_PAUSE`] again. A
//!    command of a driver whose waits spin (below) that ends on its own is read back to
//!    back from its watch the same way.
//!
//!    **Read where set.** Until the poller has taken the kick (a sleeping thread takes
//!    tens of microseconds to run again: 47 µs at the median and 183 µs at p99 on an idle
//!    H200 host, longer than the gated command's own latency), the thread that set the
//!    gate reads up to [`SCAN`] of those commands itself (each lane's oldest first,
//!    passing over those still held, above), back to back, and wakes the tasks of those
//!    that end, for at most [`SPIN`]. A command that its gate lets go is thus seen ending
//!    as soon as a thread blocked in `clWaitForEvents` sees it. The setter pays for it:
//!    its call returns up to the poller's wake-up later. Never on the poller's or a
//!    blocker's thread.
//! 4. **Blocked where it ends on its own.** A lane with a command that ends on its own
//!    (enqueued while every user event of its context was set, or watched while none is
//!    unset) gets a blocker: a thread blocked in `clWaitForEvents` on that command, which
//!    then reads its lane (below) and goes on with the lane's next such command. At most
//!    [`MAX_BLOCKERS`] run; a lane beyond them waits for one, polled meanwhile. A blocker's
//!    wait always returns without the program's help, so blockers cannot all be stuck, and
//!    the poller covers their lanes anyway. A driver whose `clWaitForEvents` spins
//!    (NVIDIA's: a blocked thread uses a whole core) gets no blockers: the first wait of
//!    [`MEASURED_WAIT`] or more on one of its commands reads the thread's CPU time.
//!    `CL_LIFETIME_WAIT=spin` always blocks, `quiet` never does.
//! 5. **Read in order.** After a blocker's wait, its lane is read oldest first: on an
//!    in-order queue up to the first still pending, elsewhere up to [`SCAN`] pending ones.
//! 6. **Wake outside the lock, contained.** A task is woken after the waiter's lock is let
//!    go, and its [`Watch`] is marked ended under the watch's own lock, which the future
//!    takes to store its waker and read the mark: a wake-up is never lost between the two.
//!    A waker that panics is caught on the library's thread: the thread goes on, and the
//!    panic is handed to the task, resumed at its next poll of the future.
//! 7. **Forgotten on drop.** A future dropped before its command ended takes its command
//!    off the waiter ([`Waiter::forget`], O(log n)); the poller's schedule forgets it when
//!    it comes to it. A blocker's wait on it keeps its own reference to the event.
//! 8. **Jobs.** Work that would block an async task runs on a job thread ([`Waiter::run`]):
//!    an idle one, or a new one (a job may block until the program acts, so any cap could
//!    deadlock); one idle for [`IDLE_EXIT`] ends. A job that panics is caught: its thread
//!    goes on (the job's own future hands the panic to its task).
//! 9. **Only the handle.** The waiter holds the events it watches (retained raw handles)
//!    and their contexts' open gates, never a context or a queue.
//!
//! Threads: one poller, at most [`MAX_BLOCKERS`] blockers, and a job thread per job
//! running at once; none while nothing is watched or run for [`IDLE_EXIT`].
//!
//! The protocol is checked exhaustively, every interleaving of these threads, the tasks'
//! futures and the device over small programs, by the `model` tests (`waiter/model.rs`).

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar};

use crate::util::sync::{Guard, Mutex, rank};
use std::task::Waker;
use std::time::{Duration, Instant};

use super::gates::OpenGates;

/// The most blockers the process runs at once (the *blocked where it ends on its own*
/// rule).
pub(crate) const MAX_BLOCKERS: usize = 8;
/// How long a thread of the waiter with nothing to do waits before it ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(2);
/// How many pending commands of a lane that is not in order are read after a wait (the
/// *read in order* rule).
pub(crate) const SCAN: usize = 64;
/// How long commands are read back to back after a kick (the *kicked* rule).
pub(crate) const SPIN: Duration = Duration::from_millis(1);
/// The first pause between two reads of a command's status (the *polled* rule).
pub(crate) const FIRST_PAUSE: Duration = Duration::from_micros(50);
/// The longest pause, unless reads cost more than [`POLL_SHARE`] allows.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(250);
/// The poller's reads take at most one part in this many of a core while nothing ends.
pub(crate) const POLL_SHARE: u32 = 200;
/// Pauses: `FIRST_PAUSE << k` for the schedule's level `k`, the last one `MAX_PAUSE`.
const LEVELS: usize = 14;
/// The level a new command is first read at where a blocker or a kick covers it (about a
/// millisecond).
const COVERED_LEVEL: usize = 4;
/// The level of a command held behind a closed gate (the *held* rule): the longest pause.
const HELD_LEVEL: usize = LEVELS - 1;
/// The stack of a waiter thread: it waits, reads statuses and wakes tasks. Job threads run
/// the program's closures, and get the default.
const STACK: usize = 256 * 1024;

/// What the waiter asks of a watched command.
pub(crate) trait Awaited: Send + Sync + 'static {
    /// Whether the command has ended (completed or failed).
    fn has_ended(&self) -> bool;
    /// Blocks until the command has ended (`clWaitForEvents`).
    fn wait(&self);
}

impl Awaited for super::echo::RawEvent {
    fn has_ended(&self) -> bool {
        crate::ffi::has_ended(self.raw())
    }

    fn wait(&self) {
        super::echo::RawEvent::wait(self);
    }
}

/// How waiter threads wait (`CL_LIFETIME_WAIT`): `spin` always has blockers in
/// `clWaitForEvents`, `quiet` never (the poller alone), otherwise as measured per driver
/// (the *blocked where it ends on its own* rule).
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
pub(crate) const MEASURED_WAIT: Duration = Duration::from_millis(2);

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
    /// The flag of a gate that it waits on (the *held* rule), set once the gate is set,
    /// where known.
    pub(crate) held: Option<Arc<AtomicBool>>,
}

/// Whether the gate of `held` still holds its command back (the *held* rule).
fn still_held(held: Option<&Arc<AtomicBool>>) -> bool {
    held.is_some_and(|set| !set.load(Ordering::Acquire))
}

/// A panic caught on a library thread, for the task it belongs to.
pub(crate) type Panic = Box<dyn Any + Send + 'static>;

/// One future's side of a watched command: whether it ended, and the waker to call then.
#[derive(Default)]
pub(crate) struct Watch {
    state: Mutex<WatchState, rank::WaiterWatch>,
}

#[derive(Default)]
struct WatchState {
    ended: bool,
    waker: Option<Waker>,
    /// The waker's panic, caught on the thread that woke it.
    panic: Option<Panic>,
}

impl Watch {
    fn lock(&self) -> Guard<'_, WatchState> {
        self.state.lock()
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

    /// The panic of this task's waker, caught where it was woken (the *contained* rule).
    pub(crate) fn take_panic(&self) -> Option<Panic> {
        self.lock().panic.take()
    }

    /// Lets go of the waker: a forgotten command wakes no one (the *forgotten on drop*
    /// rule), even where a thread's wait on it is under way.
    fn disarm(&self) {
        let waker = self.lock().waker.take();
        // Outside the lock: a waker's drop is the program's code.
        drop(waker);
    }

    /// Marks the command ended and wakes its task, outside the watch's lock; a panic of
    /// the waker is kept for the task (the *wake outside the lock, contained* rule).
    ///
    /// The mark is set after the wake returns, with its panic: a poll during the wake
    /// stores a new waker, woken in turn.
    pub(crate) fn end_and_wake(&self) {
        let first = self.lock().waker.take();
        let panic = first.and_then(wake_contained);
        let second = {
            let mut state = self.lock();
            state.ended = true;
            state.panic = panic;
            state.waker.take()
        };
        if let Some(panic) = second.and_then(wake_contained) {
            self.lock().panic.get_or_insert(panic);
        }
    }
}

/// Wakes `waker`, catching its panic (the *contained* rule).
fn wake_contained(waker: Waker) -> Option<Panic> {
    let panic = contained(|| waker.wake()).err();
    if panic.is_some() {
        log::error!(target: "cl_lifetime::waiter", "a task's waker panicked on a library thread; the task gets the panic at its next poll");
    }
    panic
}

/// Runs `f`, catching a panic (the program's code run on a library thread).
pub(crate) fn contained<R>(f: impl FnOnce() -> R) -> Result<R, Panic> {
    catch_unwind(AssertUnwindSafe(f))
}

/// A watched command, as [`Waiter::watch`] hands it back: for [`Waiter::forget`].
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    lane: LaneKey,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum LaneKey {
    Queue(u64),
    Alone(u64),
}

struct Entry<E> {
    event: Arc<E>,
    watch: Arc<Watch>,
    /// The token of its current place in the poller's schedule: other places are stale.
    filed: u64,
    /// The flag of the gate it waits on (the *held* rule).
    held: Option<Arc<AtomicBool>>,
}

struct Lane<E> {
    in_order: bool,
    driver: usize,
    gates: Option<Arc<OpenGates>>,
    /// By id: oldest first.
    entries: BTreeMap<u64, Entry<E>>,
    /// The entries enqueued while every gate of the context was set.
    own: BTreeSet<u64>,
    /// The command a blocker waits on.
    blocked: Option<u64>,
    /// In the blockers' queue.
    wanting: bool,
}

impl<E> Lane<E> {
    /// The first command of the lane that ends on its own, not blocked on yet.
    fn first_blockable(&self) -> Option<u64> {
        if self.blocked.is_some() {
            return None;
        }
        if self.gates.as_ref().is_some_and(|g| g.count() == 0) {
            return self.entries.keys().next().copied();
        }
        self.own.first().copied()
    }

    fn gates_key(&self) -> Option<usize> {
        self.gates.as_ref().map(|g| Arc::as_ptr(g) as usize)
    }
}

/// A place in the poller's schedule.
#[derive(Clone, Copy)]
struct Filed {
    lane: LaneKey,
    id: u64,
    token: u64,
}

/// The poller's schedule (the *polled* and *kicked* rules).
struct Schedule {
    /// Read back to back until `spin_until`.
    spin: Vec<Filed>,
    spin_until: Instant,
    /// Level `k`: read at `due[k]`, then filed at level `k + 1`.
    levels: Vec<Vec<Filed>>,
    due: Vec<Option<Instant>>,
}

impl Schedule {
    fn new() -> Schedule {
        Schedule {
            spin: Vec::new(),
            spin_until: Instant::now(),
            levels: (0..LEVELS).map(|_| Vec::new()).collect(),
            due: vec![None; LEVELS],
        }
    }

    fn file(&mut self, level: usize, filed: Filed, now: Instant, top_pause: Duration) {
        let level = level.min(LEVELS - 1);
        if self.levels[level].is_empty() {
            self.due[level] = Some(now + pause(level, top_pause));
        }
        self.levels[level].push(filed);
    }

    fn spin(&mut self, filed: Filed, now: Instant) {
        self.spin.push(filed);
        self.spin_until = self.spin_until.max(now + SPIN);
    }

    /// When the poller next has something to read.
    fn next_due(&self) -> Option<Instant> {
        let spin = (!self.spin.is_empty()).then_some(self.spin_until.min(Instant::now()));
        self.due.iter().flatten().copied().chain(spin).min()
    }
}

/// The pause of level `level`.
fn pause(level: usize, top_pause: Duration) -> Duration {
    if level + 1 >= LEVELS {
        top_pause
    } else {
        (FIRST_PAUSE * (1u32 << level)).min(top_pause)
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Threads of one kind (blockers, jobs): how many run, are idle, were woken for work and
/// were started.
#[derive(Default)]
struct Crew {
    threads: usize,
    idle: usize,
    /// Idle threads woken for work, not yet looking for it; at most `idle`. An idle thread
    /// that wakes answers one, whatever woke it (a time-out, a spurious wake-up).
    summoned: usize,
    /// Started, not yet looking for work. Kept apart from `summoned`: an idle thread that
    /// answered a starting thread's summons would leave that thread a count of zero to
    /// take one from.
    starting: usize,
}

struct State<E> {
    lanes: HashMap<LaneKey, Lane<E>>,
    watched: usize,
    schedule: Schedule,
    next_token: u64,
    /// Gates set since the poller last looked (the *kicked* rule), by address.
    kicked: Vec<usize>,
    /// Kicks so far: the poller has taken those up to `Shared::kicks_taken`.
    kicks: u64,
    poller: bool,
    /// When the sleeping poller wakes by itself.
    poller_wakes: Option<Instant>,
    /// The cost of one status read, in nanoseconds, as the poller last measured it.
    read_ns: u64,
    /// Lanes waiting for a blocker.
    wanting: VecDeque<LaneKey>,
    blockers: Crew,
    jobs: VecDeque<Job>,
    job_crew: Crew,
    /// The waiter is gone: threads end once nothing is left to do.
    closed: bool,
}

impl<E> State<E> {
    /// The longest pause: [`MAX_PAUSE`], or longer where reading every watched command
    /// that often would cost more than the [`POLL_SHARE`].
    fn top_pause(&self) -> Duration {
        let share = Duration::from_nanos(
            (self.watched as u64)
                .saturating_mul(self.read_ns)
                .saturating_mul(u64::from(POLL_SHARE)),
        );
        MAX_PAUSE.max(share)
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }
}

struct Shared<E> {
    state: Mutex<State<E>, rank::Waiter>,
    poller_work: Condvar,
    blocker_work: Condvar,
    job_work: Condvar,
    next_id: AtomicU64,
    /// Per driver, whether its `clWaitForEvents` was measured to spin.
    spins: Mutex<Vec<(usize, bool)>, rank::WaiterSpins>,
    /// The kicks the poller has taken (`State::kicks` when it last applied them): it is
    /// awake and reading their commands (the *read where set* rule).
    kicks_taken: AtomicU64,
}

impl<E> Shared<E> {
    fn lock(&self) -> Guard<'_, State<E>> {
        self.state.lock()
    }

    /// Whether blockers wait on `driver`'s commands (the *blocked where it ends on its
    /// own* rule).
    fn blocks_on(&self, driver: usize) -> bool {
        match wait_mode() {
            WaitMode::Spin => true,
            WaitMode::Quiet => false,
            WaitMode::Measure => {
                let spins = self.spins.lock();
                !spins.iter().any(|&(d, s)| d == driver && s)
            }
        }
    }
}

/// A waiter (see the module's rules).
pub(crate) struct Waiter<E: Awaited> {
    shared: Arc<Shared<E>>,
}

impl<E: Awaited> Waiter<E> {
    /// A waiter. No thread starts until a command is watched or a job run.
    pub(crate) fn new() -> Self {
        Waiter {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    lanes: HashMap::new(),
                    watched: 0,
                    schedule: Schedule::new(),
                    next_token: 0,
                    kicked: Vec::new(),
                    kicks: 0,
                    poller: false,
                    poller_wakes: None,
                    read_ns: 0,
                    wanting: VecDeque::new(),
                    blockers: Crew::default(),
                    jobs: VecDeque::new(),
                    job_crew: Crew::default(),
                    closed: false,
                }),
                poller_work: Condvar::new(),
                blocker_work: Condvar::new(),
                job_work: Condvar::new(),
                spins: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(1),
                kicks_taken: AtomicU64::new(0),
            }),
        }
    }

    /// Watches `event`, running as `order` says: `watch` is marked ended and its waker
    /// woken once the event has ended. `Err` when the poller could not be started and none
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
        let blocks = self.shared.blocks_on(order.driver);
        let now = Instant::now();
        let mut state = self.shared.lock();
        // Read under the lock: a gate set after this read kicks the waiter after the
        // command is filed, so the kick finds it.
        let held = still_held(order.held.as_ref());
        let token = state.token();
        let lane = state.lanes.entry(key).or_insert_with(|| Lane {
            in_order: order.in_order,
            driver: order.driver,
            gates: order.gates.clone(),
            entries: BTreeMap::new(),
            own: BTreeSet::new(),
            blocked: None,
            wanting: false,
        });
        lane.entries.insert(
            id,
            Entry {
                event,
                watch,
                filed: token,
                held: order.held,
            },
        );
        if order.ends_on_its_own {
            lane.own.insert(id);
        }
        let blockable = lane.first_blockable().is_some();
        let wants_blocker = blocks && blockable && !lane.wanting;
        if wants_blocker {
            lane.wanting = true;
        }
        state.watched += 1;
        let top = state.top_pause();
        let filed = Filed {
            lane: key,
            id,
            token,
        };
        if blockable && !blocks {
            // A spinning driver's command that ends on its own: read back to back.
            state.schedule.spin(filed, now);
        } else if held {
            // The *held* rule: read at the longest pause until a kick.
            state.schedule.file(HELD_LEVEL, filed, now, top);
        } else {
            state.schedule.file(COVERED_LEVEL, filed, now, top);
        }
        let ticket = Ticket { id, lane: key };
        if wants_blocker {
            state.wanting.push_back(key);
            summon_blocker(&self.shared, &mut state);
        }
        if let Err(e) = ensure_poller(&self.shared, &mut state) {
            drop(state);
            self.forget(&ticket);
            return Err(e);
        }
        Ok(ticket)
    }

    /// The *forgotten on drop* rule: takes the command of `ticket` off the waiter, if it
    /// is still there.
    pub(crate) fn forget(&self, ticket: &Ticket) {
        let removed = {
            let mut state = self.shared.lock();
            let Some(lane) = state.lanes.get_mut(&ticket.lane) else {
                return;
            };
            let removed = lane.entries.remove(&ticket.id);
            lane.own.remove(&ticket.id);
            if lane.entries.is_empty() && lane.blocked.is_none() {
                state.lanes.remove(&ticket.lane);
            }
            if removed.is_some() {
                state.watched -= 1;
            }
            removed
        };
        if let Some(entry) = &removed {
            entry.watch.disarm();
        }
        // Outside the lock: the event may be released here.
        drop(removed);
    }

    /// The *kicked* rule: a gate of `gates` was set; their context's commands are read back
    /// to back for a while. The kick's number, for [`Waiter::read_where_set`]; `None` where
    /// nothing is watched.
    pub(crate) fn kick(&self, gates: &OpenGates) -> Option<u64> {
        let mut state = self.shared.lock();
        if state.watched == 0 {
            return None;
        }
        state.kicked.push(std::ptr::from_ref(gates) as usize);
        state.kicks += 1;
        let kick = state.kicks;
        // A blocker for lanes whose commands now end on their own.
        if gates.count() == 0 {
            let lanes: Vec<LaneKey> = state
                .lanes
                .iter()
                .filter(|(_, l)| {
                    !l.wanting
                        && l.gates_key() == Some(std::ptr::from_ref(gates) as usize)
                        && l.first_blockable().is_some()
                        && self.shared.blocks_on(l.driver)
                })
                .map(|(k, _)| *k)
                .collect();
            for key in lanes {
                if let Some(lane) = state.lanes.get_mut(&key) {
                    lane.wanting = true;
                }
                state.wanting.push_back(key);
                summon_blocker(&self.shared, &mut state);
            }
        }
        drop(state);
        self.shared.poller_work.notify_one();
        Some(kick)
    }

    /// The *read where set* rule: the thread that set a gate of `gates`, kicked as `kick`,
    /// reads up to [`SCAN`] of their context's watched commands not held behind a gate
    /// still closed (each lane's oldest first)
    /// back to back, and wakes the tasks of those that end, until the poller has taken the
    /// kick, they have all ended, or [`SPIN`] has passed. Not on the waiter's own threads,
    /// whose poller this would wait for.
    pub(crate) fn read_where_set(&self, gates: &OpenGates, kick: u64) {
        if ON_WAITER_THREAD.get() || self.shared.kicks_taken.load(Ordering::Acquire) >= kick {
            return;
        }
        let until = Instant::now() + SPIN;
        let key = std::ptr::from_ref(gates) as usize;
        let mut reads: Vec<(LaneKey, u64, Arc<E>)> = {
            let state = self.shared.lock();
            // Not those still held behind a closed gate (the *held* rule): this set did not
            // let them go, and the poller's kick reads them all the same.
            let mut lanes: Vec<_> = (state.lanes.iter())
                .filter(|(_, l)| l.gates_key() == Some(key))
                .map(|(k, l)| {
                    let free = (l.entries.iter()).filter(|(_, e)| !still_held(e.held.as_ref()));
                    (*k, free)
                })
                .collect();
            let mut reads = Vec::new();
            // A command of each lane in turn, oldest first, up to SCAN.
            while reads.len() < SCAN && !lanes.is_empty() {
                lanes.retain_mut(|(k, entries)| match entries.next() {
                    Some((id, entry)) if reads.len() < SCAN => {
                        reads.push((*k, *id, entry.event.clone()));
                        true
                    }
                    _ => false,
                });
            }
            reads
        };
        loop {
            if self.shared.kicks_taken.load(Ordering::Acquire) >= kick {
                break;
            }
            let ended: Vec<bool> = reads.iter().map(|(_, _, e)| e.has_ended()).collect();
            if ended.contains(&true) {
                let mut woken = Vec::new();
                let mut events = Vec::new();
                let mut state = self.shared.lock();
                let mut i = 0;
                reads.retain(|(lane, id, _)| {
                    let keep = !ended[i];
                    i += 1;
                    if !keep {
                        if let Some(entry) = state.take_ended(*lane, *id) {
                            woken.push(entry.watch);
                            events.push(entry.event);
                        }
                    }
                    keep
                });
                drop(state);
                // Outside the lock: wakers and the events' releases.
                wake_all(woken);
                drop(events);
            }
            if reads.is_empty() || Instant::now() >= until {
                break;
            }
            // Leaving the core to the driver's threads between passes.
            std::thread::yield_now();
        }
        // Outside the lock: the events may be released here.
        drop(reads);
    }

    /// The *jobs* rule: runs `job` on a job thread. `Err` (with the job back) when no
    /// thread could be started and none runs.
    pub(crate) fn run(&self, job: Job) -> Result<(), (std::io::Error, Job)> {
        let mut state = self.shared.lock();
        state.jobs.push_back(job);
        if state.job_crew.idle > state.job_crew.summoned {
            state.job_crew.summoned += 1;
            drop(state);
            self.shared.job_work.notify_one();
            return Ok(());
        }
        state.job_crew.threads += 1;
        state.job_crew.starting += 1;
        drop(state);
        let theirs = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("cl-lifetime-job".into())
            .spawn(move || run_jobs(&theirs));
        if let Err(e) = started {
            let mut state = self.shared.lock();
            state.job_crew.threads -= 1;
            state.job_crew.starting -= 1;
            log::error!(target: "cl_lifetime::waiter", "no job thread: {e}");
            if state.job_crew.threads == 0 {
                if let Some(job) = state.jobs.pop_back() {
                    return Err((e, job));
                }
            }
        }
        Ok(())
    }

    /// How many threads the waiter runs now: the poller, blockers and job threads.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        let state = self.shared.lock();
        usize::from(state.poller) + state.blockers.threads + state.job_crew.threads
    }

    /// How many blockers run now.
    #[cfg(test)]
    pub(crate) fn blockers(&self) -> usize {
        self.shared.lock().blockers.threads
    }

    /// How many commands it watches now.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.shared.lock().watched
    }
}

impl<E: Awaited> Drop for Waiter<E> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.poller_work.notify_all();
        self.shared.blocker_work.notify_all();
        self.shared.job_work.notify_all();
    }
}

/// Starts the poller if none runs; wakes it if it sleeps past the schedule's next read.
fn ensure_poller<E: Awaited>(shared: &Arc<Shared<E>>, state: &mut State<E>) -> std::io::Result<()> {
    if state.poller {
        let next = state.schedule.next_due();
        if next.is_some_and(|n| state.poller_wakes.is_none_or(|w| n < w)) {
            shared.poller_work.notify_one();
        }
        return Ok(());
    }
    let theirs = shared.clone();
    std::thread::Builder::new()
        .name("cl-lifetime-poller".into())
        .stack_size(STACK)
        .spawn(move || poll(&theirs))?;
    state.poller = true;
    Ok(())
}

/// Wakes an idle blocker, or starts one below [`MAX_BLOCKERS`]; beyond them the lane
/// waits in `wanting` for one to come free.
fn summon_blocker<E: Awaited>(shared: &Arc<Shared<E>>, state: &mut State<E>) {
    let crew = &mut state.blockers;
    if crew.idle > crew.summoned {
        crew.summoned += 1;
        shared.blocker_work.notify_one();
        return;
    }
    // One started or woken is coming: work queued meanwhile summons no other.
    if crew.threads >= MAX_BLOCKERS || crew.summoned + crew.starting > 0 {
        return;
    }
    crew.threads += 1;
    crew.starting += 1;
    let theirs = shared.clone();
    let started = std::thread::Builder::new()
        .name("cl-lifetime-blocker".into())
        .stack_size(STACK)
        .spawn(move || block(&theirs));
    if let Err(e) = started {
        // The poller covers the lane.
        state.blockers.threads -= 1;
        state.blockers.starting -= 1;
        log::debug!(target: "cl_lifetime::waiter", "no blocker thread: {e}");
    }
}

/// Waits on `event` of `driver` in `clWaitForEvents`; the first wait of a driver's of at
/// least [`MEASURED_WAIT`] tells whether its waits spin.
fn wait_for<E: Awaited>(shared: &Shared<E>, event: &E, driver: usize) {
    let known = {
        let spins = shared.spins.lock();
        spins.iter().any(|(d, _)| *d == driver)
    };
    if known || wait_mode() != WaitMode::Measure {
        event.wait();
        return;
    }
    let (start, cpu) = (Instant::now(), thread_cpu_ns());
    event.wait();
    let wall = start.elapsed();
    let (Some(before), Some(after)) = (cpu, thread_cpu_ns()) else {
        return;
    };
    if wall >= MEASURED_WAIT {
        let spun = u128::from(after.saturating_sub(before)) * 2 >= wall.as_nanos();
        log::debug!(
            target: "cl_lifetime::waiter",
            "a wait of {wall:?} used {} µs of CPU: {}",
            after.saturating_sub(before) / 1000,
            if spun { "the poller reads this driver's commands" } else { "blockers wait in clWaitForEvents" }
        );
        let mut spins = shared.spins.lock();
        if !spins.iter().any(|(d, _)| *d == driver) {
            spins.push((driver, spun));
        }
    }
}

/// Wakes every watch in `ended`, outside every lock of the waiter.
fn wake_all(ended: Vec<Arc<Watch>>) {
    for watch in ended {
        watch.end_and_wake();
    }
}

impl<E: Awaited> State<E> {
    /// Takes the ended command `id` of `lane` off the waiter, if it is still there.
    fn take_ended(&mut self, key: LaneKey, id: u64) -> Option<Entry<E>> {
        let lane = self.lanes.get_mut(&key)?;
        let entry = lane.entries.remove(&id)?;
        lane.own.remove(&id);
        if lane.entries.is_empty() && lane.blocked.is_none() {
            self.lanes.remove(&key);
        }
        self.watched -= 1;
        Some(entry)
    }

    /// The *read in order* rule, after a blocker's wait on `id` of `key` returned: the
    /// ended commands leave the lane, their watches handed back.
    fn read_lane(&mut self, key: LaneKey, id: u64) -> (Vec<Arc<Watch>>, Vec<Arc<E>>) {
        let mut ended = Vec::new();
        let mut events = Vec::new();
        if let Some(lane) = self.lanes.get_mut(&key) {
            lane.blocked = None;
        }
        if let Some(entry) = self.take_ended(key, id) {
            ended.push(entry.watch);
            events.push(entry.event);
        }
        let Some(lane) = self.lanes.get(&key) else {
            return (ended, events);
        };
        if lane.entries.is_empty() {
            self.lanes.remove(&key);
            return (ended, events);
        }
        let mut pending_seen = 0;
        let mut ended_ids = Vec::new();
        for (&eid, entry) in &lane.entries {
            if entry.event.has_ended() {
                ended_ids.push(eid);
                continue;
            }
            pending_seen += 1;
            if lane.in_order || pending_seen >= SCAN {
                break;
            }
        }
        for eid in ended_ids {
            if let Some(entry) = self.take_ended(key, eid) {
                ended.push(entry.watch);
                events.push(entry.event);
            }
        }
        (ended, events)
    }

    /// Files every command of the kicked gates' contexts to be read back to back.
    fn apply_kicks(&mut self, now: Instant) {
        if self.kicked.is_empty() {
            return;
        }
        let kicked = std::mem::take(&mut self.kicked);
        let mut spun = Vec::new();
        for (key, lane) in &self.lanes {
            if lane.gates_key().is_some_and(|g| kicked.contains(&g)) {
                spun.extend(lane.entries.keys().map(|&id| (*key, id)));
            }
        }
        for (key, id) in spun {
            let token = self.token();
            if let Some(entry) = self
                .lanes
                .get_mut(&key)
                .and_then(|l| l.entries.get_mut(&id))
            {
                entry.filed = token;
                self.schedule.spin(
                    Filed {
                        lane: key,
                        id,
                        token,
                    },
                    now,
                );
            }
        }
    }

    /// Where a command read back to back is filed once the spin is over: the first level,
    /// or the last where a gate still holds it back (the *held* rule).
    fn level_after_spin(&self, f: &Filed) -> usize {
        let held = (self.entry(f)).is_some_and(|e| still_held(e.held.as_ref()));
        if held { HELD_LEVEL } else { 0 }
    }

    /// The watched command of `f`, if it is still watched.
    fn entry(&self, f: &Filed) -> Option<&Entry<E>> {
        self.lanes.get(&f.lane)?.entries.get(&f.id)
    }

    /// Whether `f` is still where the command of `f` is filed.
    fn is_filed(&self, f: &Filed) -> bool {
        self.entry(f).is_some_and(|e| e.filed == f.token)
    }

    /// What the poller reads now: the spinning commands while the spin lasts (level
    /// `None`), and the levels that are due.
    fn due_batch(&mut self, now: Instant) -> Vec<(Filed, Option<usize>)> {
        let mut batch = Vec::new();
        if !self.schedule.spin.is_empty() {
            let spin = std::mem::take(&mut self.schedule.spin);
            if now < self.schedule.spin_until {
                batch.extend(spin.into_iter().map(|f| (f, None)));
            } else {
                let top = self.top_pause();
                for f in spin {
                    let level = self.level_after_spin(&f);
                    self.schedule.file(level, f, now, top);
                }
            }
        }
        for level in 0..LEVELS {
            if self.schedule.due[level].is_some_and(|d| d <= now) {
                self.schedule.due[level] = None;
                let filed = std::mem::take(&mut self.schedule.levels[level]);
                batch.extend(filed.into_iter().map(|f| (f, Some(level))));
            }
        }
        batch
    }
}

thread_local! {
    /// This thread is the poller or a blocker (the *read where set* rule).
    static ON_WAITER_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A command the poller reads: where it was filed, at which level, and its event.
type Read<E> = (Filed, Option<usize>, Arc<E>);

/// The poller (the *polled* and *kicked* rules).
fn poll<E: Awaited>(shared: &Arc<Shared<E>>) {
    ON_WAITER_THREAD.set(true);
    let mut state = shared.lock();
    let mut idle_since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        state.apply_kicks(now);
        shared.kicks_taken.store(state.kicks, Ordering::Release);
        let batch = state.due_batch(now);
        if batch.is_empty() {
            if state.watched == 0 && state.schedule.spin.is_empty() {
                let since = *idle_since.get_or_insert(now);
                if state.closed || now.duration_since(since) >= IDLE_EXIT {
                    break;
                }
            } else {
                idle_since = None;
            }
            let wake_at = state
                .schedule
                .next_due()
                .map_or(now + IDLE_EXIT, |d| d.min(now + IDLE_EXIT));
            state.poller_wakes = Some(wake_at);
            let (s, _) =
                state.wait_timeout(&shared.poller_work, wake_at.saturating_duration_since(now));
            state = s;
            state.poller_wakes = None;
            continue;
        }
        idle_since = None;
        let reads: Vec<Read<E>> = batch
            .into_iter()
            .filter_map(|(f, level)| {
                let entry = state.entry(&f)?;
                (entry.filed == f.token).then(|| (f, level, entry.event.clone()))
            })
            .collect();
        drop(state);
        let started = Instant::now();
        let ended: Vec<bool> = reads.iter().map(|(_, _, e)| e.has_ended()).collect();
        let cost = started.elapsed();
        state = shared.lock();
        if !reads.is_empty() {
            state.read_ns =
                u64::try_from(cost.as_nanos() / reads.len() as u128).unwrap_or(u64::MAX);
        }
        let now = Instant::now();
        let top = state.top_pause();
        let mut woken = Vec::new();
        let mut events = Vec::with_capacity(reads.len());
        let mut spun = false;
        for ((f, level, event), ended) in reads.into_iter().zip(ended) {
            events.push(event);
            if !state.is_filed(&f) {
                continue;
            }
            if ended {
                if let Some(entry) = state.take_ended(f.lane, f.id) {
                    woken.push(entry.watch);
                    events.push(entry.event);
                }
                continue;
            }
            match level {
                None if now < state.schedule.spin_until => {
                    spun = true;
                    state.schedule.spin.push(f);
                }
                None => {
                    let level = state.level_after_spin(&f);
                    state.schedule.file(level, f, now, top);
                }
                Some(k) => state.schedule.file(k + 1, f, now, top),
            }
        }
        drop(state);
        // Outside the lock: wakers and the events' releases.
        wake_all(woken);
        drop(events);
        if spun {
            // Back to back, leaving the core to the driver's threads between passes.
            std::thread::yield_now();
        }
        state = shared.lock();
    }
    state.poller = false;
}

/// A blocker (the *blocked where it ends on its own* rule).
fn block<E: Awaited>(shared: &Arc<Shared<E>>) {
    ON_WAITER_THREAD.set(true);
    let mut state = shared.lock();
    state.blockers.starting -= 1;
    loop {
        let mut work = None;
        while let Some(key) = state.wanting.pop_front() {
            let Some(lane) = state.lanes.get_mut(&key) else {
                continue;
            };
            lane.wanting = false;
            if !shared.blocks_on(lane.driver) {
                continue;
            }
            if let Some(id) = lane.first_blockable() {
                lane.blocked = Some(id);
                let (event, driver) = (lane.entries[&id].event.clone(), lane.driver);
                work = Some((key, id, event, driver));
                break;
            }
        }
        // The next lane waiting gets a thread of its own.
        if work.is_some() && !state.wanting.is_empty() {
            summon_blocker(shared, &mut state);
        }
        match work {
            Some((key, id, event, driver)) => {
                drop(state);
                wait_for(shared, &*event, driver);
                drop(event);
                state = shared.lock();
                let (ended, events) = state.read_lane(key, id);
                // The lane's next command that ends on its own, first in line.
                if let Some(lane) = state.lanes.get_mut(&key) {
                    if !lane.wanting && lane.first_blockable().is_some() {
                        lane.wanting = true;
                        state.wanting.push_front(key);
                    }
                }
                drop(state);
                wake_all(ended);
                drop(events);
                state = shared.lock();
            }
            None => {
                if state.closed {
                    break;
                }
                state.blockers.idle += 1;
                let (s, timed_out) = state.wait_timeout(&shared.blocker_work, IDLE_EXIT);
                state = s;
                state.blockers.idle -= 1;
                // A summons, if one is out, is this thread's to answer.
                if state.blockers.summoned > 0 {
                    state.blockers.summoned -= 1;
                } else if timed_out && state.wanting.is_empty() {
                    break;
                }
            }
        }
    }
    state.blockers.threads -= 1;
}

/// A job thread (the *jobs* rule).
fn run_jobs<E: Awaited>(shared: &Arc<Shared<E>>) {
    let mut state = shared.lock();
    state.job_crew.starting -= 1;
    loop {
        if let Some(job) = state.jobs.pop_front() {
            drop(state);
            if contained(job).is_err() {
                log::error!(target: "cl_lifetime::waiter", "a job panicked on a library thread; the thread goes on");
            }
            state = shared.lock();
            continue;
        }
        if state.closed {
            break;
        }
        state.job_crew.idle += 1;
        let (s, timed_out) = state.wait_timeout(&shared.job_work, IDLE_EXIT);
        state = s;
        state.job_crew.idle -= 1;
        if state.job_crew.summoned > 0 {
            state.job_crew.summoned -= 1;
        } else if timed_out && state.jobs.is_empty() {
            break;
        }
    }
    state.job_crew.threads -= 1;
}

/// The process's waiter, for every context's commands.
pub(crate) fn waiter() -> &'static Waiter<super::echo::RawEvent> {
    static WAITER: std::sync::OnceLock<Waiter<super::echo::RawEvent>> = std::sync::OnceLock::new();
    WAITER.get_or_init(Waiter::new)
}

/// The exhaustive model check of this protocol.
#[cfg(test)]
mod model;

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
        /// How many times its status was read.
        reads: AtomicUsize,
    }

    impl Command {
        fn reads(&self) -> usize {
            self.reads.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn end(&self) {
            *self.ended.lock().unwrap() = true;
            self.changed.notify_all();
        }
    }

    impl Awaited for Command {
        fn has_ended(&self) -> bool {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
            held: None,
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
    fn commands_that_end_on_their_own_share_one_blocker_per_queue() {
        let waiter = Waiter::new();
        let none_open = gates(0);
        let commands: Vec<Arc<Command>> = (0..2000).map(|_| Arc::default()).collect();
        let tasks: Vec<_> = commands
            .iter()
            .map(|c| watch(&waiter, c, order(Some(3), true, &none_open)).1)
            .collect();
        assert!(waiter.blockers() <= 1, "{} blockers", waiter.blockers());
        for command in &commands {
            command.end();
        }
        eventually("every task is woken", || {
            tasks.iter().all(|t| t.woken() == 1)
        });
        eventually("nothing is left watched", || waiter.watched() == 0);
    }

    /// Issue 47's deadlock, without a device: far more commands behind closed gates than
    /// the waiter has threads, on lanes of their own and on queues; a command that waits
    /// for no gate ends, and its task must be woken while every gated one still waits. The
    /// threads stay bounded whatever the count.
    #[test]
    fn gated_commands_beyond_any_thread_count_never_starve_an_ungated_one() {
        let waiter = Waiter::new();
        let open = gates(1);
        let gated: Vec<Arc<Command>> = (0..3000).map(|_| Arc::default()).collect();
        let gated_tasks: Vec<_> = gated
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let queue = (i % 3 != 0).then_some(i as u64 % 7);
                watch(&waiter, c, order(queue, false, &open)).1
            })
            .collect();
        // Waits for no gate, but was enqueued while one was closed: not known to end on
        // its own.
        let ungated = Arc::new(Command::default());
        let (_, task, _) = watch(&waiter, &ungated, order(Some(2), false, &open));
        assert!(
            waiter.threads() <= 1 + super::MAX_BLOCKERS,
            "{} threads",
            waiter.threads()
        );
        ungated.end();
        eventually("the ungated command's task is woken", || task.woken() == 1);
        assert!(gated_tasks.iter().all(|t| t.woken() == 0));
        for command in &gated {
            command.end();
        }
        waiter.kick(&open);
        eventually("every gated task is woken", || {
            gated_tasks.iter().all(|t| t.woken() == 1)
        });
        eventually("nothing is left watched", || waiter.watched() == 0);
    }

    /// A task's waker that holds the thread that wakes it until the test lets it go.
    #[derive(Default)]
    struct Holding {
        /// (woken, let go)
        state: Mutex<(bool, bool)>,
        changed: Condvar,
    }

    impl Wake for Holding {
        fn wake(self: Arc<Self>) {
            let mut state = self.state.lock().unwrap();
            state.0 = true;
            self.changed.notify_all();
            let _let_go = self.changed.wait_while(state, |s| !s.1).unwrap();
        }
    }

    /// Holds `waiter`'s poller in a task's waker until the holding is let go: the poller
    /// reads an ended command (behind another context's gate, so no blocker) and wakes it.
    fn hold_poller(waiter: &Waiter<Command>) -> Arc<Holding> {
        let elsewhere = gates(1);
        let holder = Arc::new(Command::default());
        holder.end();
        let holding = Arc::new(Holding::default());
        let held_watch = Arc::new(Watch::default());
        assert!(!held_watch.ended_or_wake(&Waker::from(holding.clone())));
        waiter
            .watch(holder, order(None, false, &elsewhere), held_watch)
            .unwrap();
        holding.wait_woken();
        holding
    }

    impl Holding {
        fn wait_woken(&self) {
            let state = self.state.lock().unwrap();
            let (_woken, timeout) = self
                .changed
                .wait_timeout_while(state, Duration::from_secs(10), |s| !s.0)
                .unwrap();
            assert!(!timeout.timed_out(), "not woken within 10 s");
        }

        fn let_go(&self) {
            self.state.lock().unwrap().1 = true;
            self.changed.notify_all();
        }
    }

    /// The *held* rule: a command held behind a closed gate is not read while a command
    /// watched beside it is read again and again (before the rule, both were read at every
    /// pause), nor after a kick for another gate once the kick's spin is over; once its
    /// gate is set, the kick has it read and its task woken.
    #[test]
    fn a_command_held_behind_a_closed_gate_is_read_only_once_the_gate_is_set() {
        let waiter = Waiter::new();
        let open = gates(2);
        let set = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Arc::new(Command::default());
        let beside = Arc::new(Command::default());
        let held_order = Order {
            held: Some(set.clone()),
            ..order(Some(3), false, &open)
        };
        let (_, held_task, _) = watch(&waiter, &held, held_order);
        let (_, _, _) = watch(&waiter, &beside, order(Some(4), false, &open));
        // Three reads more of the command beside it than of the held one: the held one
        // sits out the pauses that the other is read at.
        eventually("the command beside it is read three times more", || {
            beside.reads() >= held.reads() + 3
        });
        // Another gate of the context is set: both are read back to back for the kick's
        // spin, then the held one waits again while the other is read.
        let (held_then, beside_then) = (held.reads(), beside.reads());
        waiter.kick(&open).expect("commands are watched");
        eventually("the held command is read for the kick", || {
            held.reads() > held_then
        });
        eventually("after the spin, the other is read three times more", || {
            beside.reads() - beside_then >= held.reads() - held_then + 3
        });
        assert_eq!(held_task.woken(), 0);
        // Its own gate is set: the kick has it read, and its task woken.
        held.end();
        set.store(true, std::sync::atomic::Ordering::Release);
        waiter.kick(&open).expect("commands are watched");
        eventually("the held command's task is woken", || {
            held_task.woken() == 1
        });
        beside.end();
        eventually("nothing is left watched", || waiter.watched() == 0);
    }

    /// The *read where set* and *held* rules together: commands held behind another gate,
    /// still closed, do not take the setter's reads. Before, the setter read the oldest
    /// [`SCAN`] commands of the lane, all held, and missed the one its set let go.
    #[test]
    fn the_thread_that_sets_a_gate_reads_past_commands_held_behind_another() {
        let waiter = Waiter::new();
        let holding = hold_poller(&waiter);

        let open = gates(2);
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held: Vec<_> = (0..super::SCAN)
            .map(|_| {
                let command = Arc::new(Command::default());
                let held_order = Order {
                    held: Some(closed.clone()),
                    ..order(Some(8), false, &open)
                };
                (command.clone(), watch(&waiter, &command, held_order).1)
            })
            .collect();
        let ended = Arc::new(Command::default());
        let (_, ended_task, _) = watch(&waiter, &ended, order(Some(8), false, &open));
        ended.end();
        let kick = waiter.kick(&open).expect("commands are watched");
        waiter.read_where_set(&open, kick);
        assert_eq!(ended_task.woken(), 1, "the ended command's task, on return");
        assert!(held.iter().all(|(_, task)| task.woken() == 0));

        holding.let_go();
        closed.store(true, std::sync::atomic::Ordering::Release);
        for (command, _) in &held {
            command.end();
        }
        // The poller, let go, may have seen them all end already.
        let _ = waiter.kick(&open);
        eventually("the held commands' tasks are woken", || {
            held.iter().all(|(_, task)| task.woken() == 1)
        });
        eventually("nothing is left watched", || waiter.watched() == 0);
    }

    /// The *read where set* rule: while the poller is held (here in a waker of the
    /// program's that blocks), the thread that set a gate reads the gated commands itself,
    /// wakes the task of one that ended before it returns, wakes none that has not ended,
    /// and does not wait for the poller.
    #[test]
    fn the_thread_that_sets_a_gate_wakes_what_ended_while_the_poller_is_held() {
        let waiter = Waiter::new();
        let holding = hold_poller(&waiter);

        let open = gates(1);
        let pending = Arc::new(Command::default());
        let (_, pending_task, _) = watch(&waiter, &pending, order(Some(5), false, &open));
        let ended = Arc::new(Command::default());
        let (ended_watch, ended_task, _) = watch(&waiter, &ended, order(Some(6), false, &open));
        ended.end();
        let kick = waiter.kick(&open).expect("commands are watched");
        waiter.read_where_set(&open, kick);
        assert_eq!(ended_task.woken(), 1, "the ended command's task, on return");
        assert!(ended_watch.ended_or_wake(&Waker::from(ended_task.clone())));
        assert_eq!(
            pending_task.woken(),
            0,
            "a command still pending woke its task"
        );

        holding.let_go();
        pending.end();
        eventually("the poller wakes the other task", || {
            pending_task.woken() == 1
        });
        eventually("nothing is left watched", || waiter.watched() == 0);
    }

    /// A task's waker that panics.
    struct Panicking;

    impl Wake for Panicking {
        fn wake(self: Arc<Self>) {
            panic!("a waker that panics");
        }
    }

    #[test]
    fn a_waker_that_panics_is_contained_and_its_lane_still_wakes() {
        let waiter = Waiter::new();
        let none_open = gates(0);
        for _ in 0..3 {
            let command = Arc::new(Command::default());
            let watched = Arc::new(Watch::default());
            assert!(!watched.ended_or_wake(&Waker::from(Arc::new(Panicking))));
            waiter
                .watch(
                    command.clone(),
                    order(Some(5), true, &none_open),
                    watched.clone(),
                )
                .unwrap();
            command.end();
            eventually("the panicking waker was called", || {
                watched.lock().panic.is_some()
            });
            let later = Arc::new(Command::default());
            let (_, task, _) = watch(&waiter, &later, order(Some(5), true, &none_open));
            later.end();
            eventually("a later command of the lane is woken", || task.woken() == 1);
        }
    }

    #[test]
    fn a_job_that_panics_leaves_the_jobs_running() {
        let waiter: Waiter<Command> = Waiter::new();
        for _ in 0..50 {
            waiter
                .run(Box::new(|| panic!("a job that panics")))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        let (send, receive) = std::sync::mpsc::channel();
        waiter
            .run(Box::new(move || send.send(7).unwrap()))
            .map_err(|(e, _)| e)
            .unwrap();
        assert_eq!(receive.recv_timeout(Duration::from_secs(10)), Ok(7));
    }

    /// Every program of three commands, each on one of two queues or a lane of its own,
    /// gated or not, ended in every order, with the gates set through the library (a kick)
    /// or through their raw handles (none): every task is woken exactly once, never before
    /// its command ended, and a gated command is ended only after every ungated one's task
    /// was woken (a program may open its gates only then).
    #[test]
    fn every_program_of_three_commands_wakes_each_once_after_its_end() {
        const ORDERS: [[usize; 3]; 6] = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let lanes = [Some(1), Some(2), None];
        let mut programs = 0;
        for shape in 0..27 {
            for gating in 0..8u32 {
                for ending in ORDERS {
                    for kicked in [false, true] {
                        let waiter = Waiter::new();
                        let open = gates(usize::from(gating != 0));
                        let none_open = gates(0);
                        let mut watched = Vec::new();
                        for c in 0..3 {
                            let lane = lanes[(shape / 3usize.pow(c as u32)) % 3];
                            let gated = gating & (1 << c) != 0;
                            let command = Arc::new(Command::default());
                            let order = if gated {
                                order(lane, false, &open)
                            } else {
                                order(lane, true, &none_open)
                            };
                            let (_, task, _) = watch(&waiter, &command, order);
                            watched.push((command, task, gated));
                        }
                        // The ungated first, in the program's order; then the gated.
                        let sequence: Vec<usize> = ending
                            .iter()
                            .copied()
                            .filter(|&c| !watched[c].2)
                            .chain(ending.iter().copied().filter(|&c| watched[c].2))
                            .collect();
                        for c in sequence {
                            let (command, task, gated) = &watched[c];
                            assert_eq!(task.woken(), 0, "woken before its command ended");
                            command.end();
                            if *gated && kicked {
                                waiter.kick(&open);
                            }
                            eventually("a task woken after its command ended", || {
                                task.woken() == 1
                            });
                        }
                        eventually("nothing is left watched", || waiter.watched() == 0);
                        for (_, task, _) in &watched {
                            assert_eq!(task.woken(), 1);
                        }
                        programs += 1;
                    }
                }
            }
        }
        assert_eq!(programs, 27 * 8 * 6 * 2);
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
                    held: None,
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
                // Set through the library (a kick), or through the gate's raw handle.
                if next(3) != 0 {
                    waiter.kick(&open);
                }
                eventually("a gated command's task is woken", || task.woken() == 1);
            }
            eventually("nothing is left watched", || waiter.watched() == 0);
            for (_, _, task, _) in &watched {
                assert_eq!(task.woken(), 1);
            }
        }
    }
}
