//! An exhaustive model check of the waiter's protocol (issue 47): every interleaving of
//! its threads, the tasks' futures, the device and the program, over small programs,
//! explored state by state.
//!
//! # The model
//!
//! A program is a few commands, each on one of two queues (in order or not) or on a lane
//! of its own, each awaited by a task of its own. A command is *gated* (it waits for the
//! program's gate: a user event) or not, and the waiter is told it *ends on its own* or
//! not. The program sets its gate only once a given task, the *opener*, has seen its
//! command end (or dropped its future): issue 47's shape, where tasks await gated commands
//! and one more awaits an ungated command, whose task would then set the gate.
//!
//! Each step below is one atomic step of a thread: what it does under one hold of a lock,
//! or one call that touches shared state. Every interleaving of the enabled steps is
//! explored, breadth first, with a set of the states seen.
//!
//! - **The device** ends a command at any time once it may: a gated one only after the
//!   gate is set, one of an in-order queue only after the commands enqueued before it.
//! - **The program** sets the gate once the opener's task is done, through the library
//!   (then the gate's kick is a later step of its own: rule 3, *kicked*, `Waiter::kick`)
//!   or through the gate's raw handle (no kick).
//! - **The gate's setter**, after the kick (rule 3, *read where set*,
//!   `Waiter::read_where_set`), reads, takes and ends watches as the poller does, beside
//!   it, and stops reading at any step (the poller took the kick, its time is up, or all
//!   it read ended).
//! - **A task's first poll** finds its command ended (ready at once), or stores its waker
//!   in a new watch and hands the command to the waiter (`Waiter::watch`): its lane
//!   (rule 1), a blocker summoned where the lane has a command that ends on its own
//!   (rule 4), the poller started.
//! - **A woken task's poll** takes the watch's lock, reads the mark, and if the command is
//!   not marked ended stores its waker (rule 6, `Watch::ended_or_wake`): one step, since
//!   every other step on the watch waits for its lock. The mutant handshakes split it.
//! - **A task's drop** takes its command off the waiter and lets go of its waker (rule 7,
//!   `Waiter::forget` and `Watch::disarm`).
//! - **The poller** (rule 2) reads the status of watched commands into a batch, never
//!   blocking, then takes those it read ended off the waiter under one hold of its lock
//!   (those still there: a blocker or a drop may have taken them meanwhile), then ends
//!   their watches. Which commands it reads, and when, is left free: its pauses are
//!   timing, so every order is explored. That it does read every watched command again
//!   is a property of its schedule, checked on the waiter's own threads
//!   (`the_pollers_schedule_holds_every_watched_command`).
//! - **A blocker** (rule 4) looks for work under the waiter's lock (the lanes waiting for
//!   one, oldest first; a command of the lane that ends on its own), waits on that command
//!   (the step is enabled only once the command has ended: `clWaitForEvents` returns then
//!   and only then), reads its lane oldest first (rule 5, with the rules of
//!   `Lane::first_blockable` and `State::read_lane`, cross-checked against them in
//!   `the_models_lane_rules_are_the_waiters`), requeues the lane, and ends the watches
//!   it took. Idle, it answers a summons, looks again, or ends (its idle time-out), woken
//!   at any time. Summons follow `summon_blocker`: an idle blocker, or a new one below the
//!   cap (at most [`MAX_BLOCKERS`]).
//! - **Ending a watch** (rule 6, `Watch::end_and_wake`, after the waiter's lock is let go)
//!   is two steps, each under the watch's lock: take the waker and wake it; then mark the
//!   watch ended, take a waker stored meanwhile and wake it. (The wake outside the lock
//!   and the take before it form one step: no step of the model can poll the task between
//!   them.)
//!
//! Left out: jobs (rule 8: they wake no task through a watch), the waiter's drop (the
//! process's waiter lives as long as the process), threads that fail to start, panicking
//! wakers, and the order in which a kick walks the lanes (one order is explored). Two
//! reductions keep the states few without losing a behaviour: threads in alike states
//! are alike (the crew is kept sorted), and of the order the commands were watched only
//! the order within each queue is kept (the only one the rules read).
//!
//! # What is checked
//!
//! - **No wake-up lost**: in every state where no step is left, every task whose future
//!   was not dropped has seen its command end, and the waiter holds nothing (no watched
//!   command, no lane waiting for a blocker, no thread). A task is woken only while it
//!   waits (after it returned pending, before it is polled again): never before its
//!   command ended, and exactly once per wait. (A task that polls between the two steps
//!   of ending its watch returns pending once more, and is woken once more by the second
//!   step.)
//! - **No deadlock**: from every reachable state, a state where every command has ended
//!   and every live task has seen it is reachable; and the graph of states has no cycle,
//!   so every run of the program ends in such a state.
//! - **Bounded threads**: the poller and the blockers are at most `1 + cap` threads in
//!   every state, whatever the number of commands, and the crew's counts never go below
//!   zero.
//!
//! The check is not vacuous: the same model runs the earlier waiter (a thread blocked per
//! awaited command, capped, no poller) and finds its deadlock
//! (`the_model_finds_the_deadlock_of_a_thread_per_gated_await`), finds the lost wake-up
//! of a handshake whose mark is set outside the watch's lock or whose future reads the
//! mark before it stores its waker
//! (`the_model_finds_a_lost_wake_up_when_the_mark_is_set_outside_the_watch_lock`,
//! `the_model_finds_a_lost_wake_up_when_the_future_reads_the_mark_before_storing_its_waker`),
//! and finds the crew's count taken below zero where starting and woken threads share one
//! count, as they did before this model found it
//! (`the_model_finds_a_summons_taken_from_a_starting_blocker`).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use super::{MAX_BLOCKERS, SCAN};

/// The most commands a model program has.
const COMMANDS: usize = 4;
/// The lanes: the two queues, then a lane of its own per command.
const LANES: usize = 2 + COMMANDS;
/// The longest queue of lanes waiting for a blocker (or of commands waiting for a thread).
const QUEUE: usize = 8;
/// No command (in a lane's `blocked`).
const NONE: u8 = u8::MAX;

/// Where a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Queue(u8),
    Alone,
}

/// A command of a model program.
#[derive(Clone, Copy, Debug)]
struct Command {
    lane: Lane,
    /// It waits for the program's gate.
    gated: bool,
    /// The waiter is told it ends on its own (`Order::ends_on_its_own`). Told of a gated
    /// command, the judgement is wrong (a command behind an event from outside the
    /// library): the protocol must still hold.
    own: bool,
    /// Its task may drop its future before the command ends.
    droppable: bool,
}

impl Command {
    fn new(lane: Lane, gated: bool, own: bool) -> Command {
        Command {
            lane,
            gated,
            own,
            droppable: false,
        }
    }
}

/// Which waiter runs the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// The waiter of `waiter.rs`: a poller, and at most `blockers` blockers.
    Waiter { blockers: usize },
    /// The earlier waiter: a thread blocked in `clWaitForEvents` per awaited command, at
    /// most `threads` (beyond them a command waits for a thread to come free), no poller.
    ThreadPerAwait { threads: usize },
}

/// How the future and the waiter share a watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handshake {
    /// The waiter's (rule 6): the future reads the mark and stores its waker under the
    /// watch's lock, and the waiter marks the watch ended under it.
    Locked,
    /// A mutant: the waiter marks the watch ended without taking the watch's lock.
    MarkOutsideLock,
    /// A mutant: the future reads the mark under the lock, lets it go, and stores its
    /// waker under it again.
    ReadBeforeStore,
}

/// How the crew counts its threads coming to look for work (`Crew`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Accounting {
    /// The waiter's: threads starting and idle threads woken are counted apart.
    Apart,
    /// The count before the model found it wrong: one count for both, so an idle thread
    /// woken by its time-out could answer a starting thread's summons, and the starting
    /// thread then took one from zero.
    Shared,
}

/// A model program and the waiter it runs on.
#[derive(Clone, Debug)]
struct Program {
    commands: Vec<Command>,
    /// Whether each queue runs its commands in order.
    in_order: [bool; 2],
    /// The task whose end the program awaits before it sets its gate; `None`: the program
    /// sets it at any time.
    opener: Option<usize>,
    protocol: Protocol,
    handshake: Handshake,
    accounting: Accounting,
}

impl Program {
    fn new(commands: Vec<Command>, opener: Option<usize>, protocol: Protocol) -> Program {
        assert!(commands.len() <= COMMANDS, "at most {COMMANDS} commands");
        let p = Program {
            commands,
            in_order: [true, true],
            opener,
            protocol,
            handshake: Handshake::Locked,
            accounting: Accounting::Apart,
        };
        assert!(
            p.cap() <= MAX_BLOCKERS,
            "at most MAX_BLOCKERS threads besides the poller"
        );
        p
    }

    fn droppable(mut self) -> Program {
        for command in &mut self.commands {
            command.droppable = true;
        }
        self
    }

    fn lane(&self, command: usize) -> usize {
        match self.commands[command].lane {
            Lane::Queue(q) => usize::from(q),
            Lane::Alone => 2 + command,
        }
    }

    /// Lanes of their own are never in order (`Order::in_order` of a command of no queue).
    fn in_order(&self, lane: usize) -> bool {
        lane < 2 && self.in_order[lane]
    }

    fn gated(&self) -> bool {
        self.commands.iter().any(|c| c.gated)
    }

    /// The waiter's threads besides the poller, at most.
    fn cap(&self) -> usize {
        match self.protocol {
            Protocol::Waiter { blockers } => blockers,
            Protocol::ThreadPerAwait { threads } => threads,
        }
    }
}

/// An entry of a lane, oldest first, as rules 4 and 5 read it.
#[derive(Clone, Copy, Debug)]
struct Entry {
    command: u8,
    ended: bool,
    own: bool,
}

/// The command of a lane a blocker waits on next (rule 4, `Lane::first_blockable`): none
/// while one is waited on; the oldest once every gate is set; else the oldest that ends on
/// its own.
fn first_blockable(entries: &[Entry], blocked: bool, gates_set: bool) -> Option<u8> {
    if blocked {
        return None;
    }
    if gates_set {
        return entries.first().map(|e| e.command);
    }
    entries.iter().find(|e| e.own).map(|e| e.command)
}

/// The commands a blocker takes off its lane once its wait on `waited` returned (rule 5,
/// `State::read_lane`): that one, then the ended ones oldest first, up to the first still
/// pending on an in-order queue, up to [`SCAN`] pending ones elsewhere.
fn read_lane(entries: &[Entry], in_order: bool, waited: u8) -> Vec<u8> {
    let mut taken: Vec<u8> = entries
        .iter()
        .filter(|e| e.command == waited)
        .map(|e| e.command)
        .collect();
    let mut pending = 0;
    for e in entries.iter().filter(|e| e.command != waited) {
        if e.ended {
            taken.push(e.command);
            continue;
        }
        pending += 1;
        if in_order || pending >= SCAN {
            break;
        }
    }
    taken
}

/// Where a task's future is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Task {
    /// Not polled yet.
    Fresh,
    /// Waiting for a wake-up.
    Pending,
    /// Woken: its executor polls it next (or drops it).
    Woken,
    /// In a poll that read no mark: its waker is stored next (a step of its own in the
    /// mutant handshakes only).
    Storing,
    /// It saw its command end.
    Done,
    /// Its future was dropped.
    Dropped,
}

/// A future's watch (`Watch`): the mark, whether a waker is stored, and whether the
/// future holds its lock between reading the mark and storing its waker (in the
/// `MarkOutsideLock` mutant, where that is two steps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Watch {
    ended: bool,
    waker: bool,
    locked: bool,
}

/// The two steps of ending a watch (`Watch::end_and_wake`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Take the stored waker and wake it.
    Wake,
    /// Mark the watch ended, take a waker stored meanwhile and wake it.
    Mark,
}

/// A thread of the waiter besides the poller: a blocker, or a thread of the earlier
/// waiter. Sorted in the state (threads are alike), the absent last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Thread {
    /// Started: it takes itself off the starting count, then looks for work.
    Start,
    /// About to look for work.
    Look,
    /// Blocked on `command` of `lane`.
    Wait {
        lane: u8,
        command: u8,
    },
    /// Ending the watches in `list` (a set of commands), the lowest first.
    Ending {
        list: u8,
        phase: Phase,
    },
    /// Waiting for a summons (`blocker_work`).
    Idle,
    Absent,
}

/// The poller, and the thread that set the gate through the library while it reads the
/// gated commands (rule 3, *read where set*; `Off` before and after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poller {
    Off,
    Idle,
    /// A batch: it read the commands of `read` (a set) ended, and takes those still there
    /// off the waiter next, under one hold of the waiter's lock.
    Reading(u8),
    /// Ending the watches of `list` (a set), the lowest first.
    Ending {
        list: u8,
        phase: Phase,
    },
}

/// The program's gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    Unset,
    /// Set through the library: its kick is to come.
    Kicking,
    Set,
}

/// A state of the whole: device, program, tasks and waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    /// The commands the device has ended (a set).
    ended: u8,
    gate: Gate,
    tasks: [Task; COMMANDS],
    watches: [Watch; COMMANDS],
    /// The waiter's entries (a set of commands), oldest first in `order` (which keeps
    /// only the order of the entries of a queue).
    watched: u8,
    order: [u8; COMMANDS],
    order_len: u8,
    /// Lanes in the blockers' queue (a set: `Lane::wanting`), and each lane's command a
    /// blocker waits on (`Lane::blocked`).
    wanting: u8,
    blocked: [u8; LANES],
    /// The blockers' queue of lanes (`State::wanting`), or the earlier waiter's queue of
    /// commands waiting for a thread.
    queue: [u8; QUEUE],
    queue_len: u8,
    poller: Poller,
    setter: Poller,
    /// The crew (`Crew`): threads running, idle, woken for work, and starting.
    threads: u8,
    idle: u8,
    summoned: u8,
    starting: u8,
    crew: [Thread; MAX_BLOCKERS],
}

/// A state's bytes, for the set of states seen: quicker to hash and compare than its
/// fields one by one.
type Key = [u8; 72];

impl State {
    fn key(&self) -> Key {
        let mut key = [0u8; 72];
        let mut at = 0;
        let mut put = |b: u8| {
            key[at] = b;
            at += 1;
        };
        put(self.ended);
        put(self.gate as u8);
        for task in self.tasks {
            put(task as u8);
        }
        for w in self.watches {
            put(u8::from(w.ended) | u8::from(w.waker) << 1 | u8::from(w.locked) << 2);
        }
        put(self.watched);
        self.order.iter().for_each(|&c| put(c));
        put(self.order_len);
        put(self.wanting);
        self.blocked.iter().for_each(|&c| put(c));
        self.queue.iter().for_each(|&c| put(c));
        put(self.queue_len);
        for reader in [self.poller, self.setter] {
            let (tag, a, b) = match reader {
                Poller::Off => (0, 0, 0),
                Poller::Idle => (1, 0, 0),
                Poller::Reading(read) => (2, read, 0),
                Poller::Ending { list, phase } => (3, list, phase as u8),
            };
            put(tag);
            put(a);
            put(b);
        }
        put(self.threads);
        put(self.idle);
        put(self.summoned);
        put(self.starting);
        for thread in self.crew {
            let (tag, a, b) = match thread {
                Thread::Start => (0, 0, 0),
                Thread::Look => (1, 0, 0),
                Thread::Wait { lane, command } => (2, lane, command),
                Thread::Ending { list, phase } => (3, list, phase as u8),
                Thread::Idle => (4, 0, 0),
                Thread::Absent => (5, 0, 0),
            };
            put(tag);
            put(a);
            put(b);
        }
        assert!(at <= key.len(), "a key long enough");
        key
    }
}

/// What a step found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Broken {
    /// A task was woken before its command ended.
    WokenEarly { task: usize },
    /// A task was woken while it was not waiting: a second wake-up for one wait.
    WokenTwice { task: usize },
    /// A count of the crew went below zero.
    Miscount,
    /// More threads than the poller and the cap.
    TooManyThreads { threads: usize },
    /// Nothing can happen, and a live task waits for a command that has ended, which the
    /// waiter no longer holds.
    LostWakeUp { task: usize },
    /// Nothing can happen, and work is left: a task waits for a command the waiter still
    /// holds, or for one that never ends.
    Deadlock,
    /// Steps remain, but none leads to every command ended and every task done.
    Stuck,
    /// Every task is done, yet the waiter holds a command, a lane or a thread.
    LeftOver,
}

/// One step, for the traces.
#[derive(Clone, Copy, Debug)]
enum Step {
    Start,
    FirstPoll { task: usize },
    Poll { task: usize },
    StoreWaker { task: usize },
    Drop { task: usize },
    End { command: usize },
    SetGate { kick: bool },
    Kick,
    PollerReads { command: usize },
    PollerTakes { read: u8 },
    PollerEnds { command: usize, phase: Phase },
    PollerExits,
    SetterReads { command: usize },
    SetterTakes { read: u8 },
    SetterEnds { command: usize, phase: Phase },
    SetterLeaves,
    Crew { was: Thread },
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Step::Start => write!(f, "start"),
            Step::FirstPoll { task } => write!(f, "task {task} polls its future first"),
            Step::Poll { task } => write!(f, "task {task} polls its future"),
            Step::StoreWaker { task } => write!(f, "task {task} stores its waker"),
            Step::Drop { task } => write!(f, "task {task} drops its future"),
            Step::End { command } => write!(f, "the device ends command {command}"),
            Step::SetGate { kick } => write!(
                f,
                "the program sets the gate {}",
                if kick {
                    "through the library"
                } else {
                    "through its raw handle"
                }
            ),
            Step::Kick => write!(f, "the gate's kick"),
            Step::PollerReads { command } => write!(f, "the poller reads command {command} ended"),
            Step::PollerTakes { read } => {
                write!(
                    f,
                    "the poller takes the commands it read ended, of {read:#b}"
                )
            }
            Step::PollerEnds { command, phase } => {
                write!(f, "the poller ends command {command}'s watch: {phase:?}")
            }
            Step::PollerExits => write!(f, "the poller ends"),
            Step::SetterReads { command } => {
                write!(f, "the gate's setter reads command {command} ended")
            }
            Step::SetterTakes { read } => write!(
                f,
                "the gate's setter takes the commands it read ended, of {read:#b}"
            ),
            Step::SetterEnds { command, phase } => {
                write!(
                    f,
                    "the gate's setter ends command {command}'s watch: {phase:?}"
                )
            }
            Step::SetterLeaves => write!(f, "the gate's setter stops reading"),
            Step::Crew { was } => write!(f, "a thread of the crew steps from {was:?}"),
        }
    }
}

/// Prints a trace, a step a line.
fn print_trace(steps: &[Step]) {
    for step in steps {
        println!("  {step}");
    }
}

/// A state being changed by a step, and what the step found wrong.
struct Move<'p> {
    p: &'p Program,
    s: State,
    broken: Option<Broken>,
}

impl State {
    fn new() -> State {
        State {
            ended: 0,
            gate: Gate::Unset,
            tasks: [Task::Fresh; COMMANDS],
            watches: [Watch::default(); COMMANDS],
            watched: 0,
            order: [0; COMMANDS],
            order_len: 0,
            wanting: 0,
            blocked: [NONE; LANES],
            queue: [0; QUEUE],
            queue_len: 0,
            poller: Poller::Off,
            setter: Poller::Off,
            threads: 0,
            idle: 0,
            summoned: 0,
            starting: 0,
            crew: [Thread::Absent; MAX_BLOCKERS],
        }
    }

    fn has_ended(&self, command: usize) -> bool {
        self.ended & (1 << command) != 0
    }

    fn is_watched(&self, command: usize) -> bool {
        self.watched & (1 << command) != 0
    }

    fn gates_set(&self, p: &Program) -> bool {
        !p.gated() || self.gate != Gate::Unset
    }

    /// A lane's entries, oldest first.
    fn entries(&self, p: &Program, lane: usize) -> Vec<Entry> {
        self.order[..usize::from(self.order_len)]
            .iter()
            .map(|&c| usize::from(c))
            .filter(|&c| self.is_watched(c) && p.lane(c) == lane)
            .map(|c| Entry {
                command: c as u8,
                ended: self.has_ended(c),
                own: p.commands[c].own,
            })
            .collect()
    }

    /// A lane is kept while it has entries or a blocker waits on one of its commands.
    fn lane_exists(&self, p: &Program, lane: usize) -> bool {
        self.blocked[lane] != NONE
            || (0..p.commands.len()).any(|c| self.is_watched(c) && p.lane(c) == lane)
    }

    fn first_blockable(&self, p: &Program, lane: usize) -> Option<u8> {
        first_blockable(
            &self.entries(p, lane),
            self.blocked[lane] != NONE,
            self.gates_set(p),
        )
    }

    /// The poller and the crew.
    fn thread_count(&self) -> usize {
        usize::from(self.poller != Poller::Off) + usize::from(self.threads)
    }

    /// Every command ended, every live task done.
    fn is_done(&self, p: &Program) -> bool {
        (0..p.commands.len())
            .all(|c| self.has_ended(c) && matches!(self.tasks[c], Task::Done | Task::Dropped))
    }

    /// Whether some thread of the waiter is about to take or end `command`'s watch.
    fn is_ending(&self, command: usize) -> bool {
        let c = command as u8;
        let reading = |r: Poller| matches!(r, Poller::Reading(set) | Poller::Ending { list: set, .. } if set & (1 << c) != 0);
        let poller = reading(self.poller) || reading(self.setter);
        let crew = self.crew.iter().any(|t| match *t {
            Thread::Ending { list, .. } => list & (1 << c) != 0,
            _ => false,
        });
        poller || crew
    }

    /// What is wrong with a state where nothing can happen, if anything.
    fn judge_final(&self, p: &Program) -> Option<Broken> {
        if self.is_done(p) {
            let holds = self.watched != 0
                || self.queue_len != 0
                || self.poller != Poller::Off
                || self.setter != Poller::Off
                || self.threads != 0;
            return holds.then_some(Broken::LeftOver);
        }
        let lost = (0..p.commands.len()).find(|&c| {
            self.tasks[c] == Task::Pending
                && self.has_ended(c)
                && !self.is_watched(c)
                && !self.is_ending(c)
        });
        Some(lost.map_or(Broken::Deadlock, |task| Broken::LostWakeUp { task }))
    }
}

impl Move<'_> {
    fn broke(&mut self, broken: Broken) {
        self.broken.get_or_insert(broken);
    }

    fn push_back(&mut self, item: u8) {
        let len = usize::from(self.s.queue_len);
        assert!(len < QUEUE, "the model's queue is too short");
        self.s.queue[len] = item;
        self.s.queue_len += 1;
    }

    fn push_front(&mut self, item: u8) {
        let len = usize::from(self.s.queue_len);
        assert!(len < QUEUE, "the model's queue is too short");
        self.s.queue.copy_within(0..len, 1);
        self.s.queue[0] = item;
        self.s.queue_len += 1;
    }

    fn pop_front(&mut self) -> Option<u8> {
        let len = usize::from(self.s.queue_len);
        if len == 0 {
            return None;
        }
        let item = self.s.queue[0];
        self.s.queue.copy_within(1..len, 0);
        self.s.queue[len - 1] = 0;
        self.s.queue_len -= 1;
        Some(item)
    }

    /// A lane that is no longer kept is out of the blockers' queue's set (a new one
    /// starts with `wanting` false).
    fn tidy(&mut self, lane: usize) {
        if !self.s.lane_exists(self.p, lane) {
            self.s.wanting &= !(1 << lane);
        }
    }

    /// The waiter takes `command`'s watch off, to end it.
    fn take(&mut self, command: usize) {
        self.s.watched &= !(1 << command);
    }

    /// The task of `command` is woken.
    fn wake(&mut self, command: usize) {
        if !self.s.has_ended(command) {
            self.broke(Broken::WokenEarly { task: command });
        }
        match self.s.tasks[command] {
            Task::Pending => self.s.tasks[command] = Task::Woken,
            Task::Dropped => {}
            _ => self.broke(Broken::WokenTwice { task: command }),
        }
    }

    /// One step of ending `command`'s watch (`Watch::end_and_wake`).
    fn end_watch(&mut self, command: usize, phase: Phase) {
        let watch = &mut self.s.watches[command];
        if phase == Phase::Mark {
            watch.ended = true;
        }
        if std::mem::take(&mut watch.waker) {
            self.wake(command);
        }
    }

    /// One step of ending the watches of `list`, the lowest first (`wake_all`): what is
    /// left to do, if anything.
    fn end_next(&mut self, list: u8, phase: Phase) -> Option<(u8, Phase)> {
        let command = list.trailing_zeros() as usize;
        self.end_watch(command, phase);
        match phase {
            Phase::Wake => Some((list, Phase::Mark)),
            Phase::Mark => {
                let list = list & !(1 << command);
                (list != 0).then_some((list, Phase::Wake))
            }
        }
    }

    /// `summon_blocker`: an idle blocker, or a new one below the cap.
    fn summon(&mut self) {
        let s = &mut self.s;
        if s.idle > s.summoned {
            s.summoned += 1;
            return;
        }
        if usize::from(s.threads) >= self.p.cap() || s.summoned + s.starting > 0 {
            return;
        }
        s.threads += 1;
        match self.p.accounting {
            Accounting::Apart => s.starting += 1,
            Accounting::Shared => s.summoned += 1,
        }
        self.spawn(Thread::Start);
    }

    fn spawn(&mut self, thread: Thread) {
        let slot = self.s.crew[..self.p.cap()]
            .iter()
            .position(|t| *t == Thread::Absent)
            .expect("a slot for every thread below the cap");
        self.s.crew[slot] = thread;
    }

    /// A blocker looks for work under the waiter's lock (the loop of `block`).
    fn look(&mut self, slot: usize) {
        let mut work = None;
        while let Some(lane) = self.pop_front() {
            let lane = usize::from(lane);
            if !self.s.lane_exists(self.p, lane) {
                continue;
            }
            self.s.wanting &= !(1 << lane);
            if let Some(command) = self.s.first_blockable(self.p, lane) {
                self.s.blocked[lane] = command;
                work = Some((lane as u8, command));
                break;
            }
        }
        if work.is_some() && self.s.queue_len != 0 {
            self.summon();
        }
        self.s.crew[slot] = match work {
            Some((lane, command)) => Thread::Wait { lane, command },
            None => {
                self.s.idle += 1;
                Thread::Idle
            }
        };
    }

    /// A blocker's wait on `command` of `lane` returned: it reads the lane (rule 5) and
    /// requeues it where it has another command that ends on its own.
    fn read_after_wait(&mut self, slot: usize, lane: usize, command: u8) {
        self.s.blocked[lane] = NONE;
        let entries = self.s.entries(self.p, lane);
        let mut list = 0u8;
        for c in read_lane(&entries, self.p.in_order(lane), command) {
            self.take(usize::from(c));
            list |= 1 << c;
        }
        self.tidy(lane);
        if self.s.lane_exists(self.p, lane)
            && self.s.wanting & (1 << lane) == 0
            && self.s.first_blockable(self.p, lane).is_some()
        {
            self.s.wanting |= 1 << lane;
            self.push_front(lane as u8);
        }
        self.s.crew[slot] = Thread::Ending {
            list,
            phase: Phase::Wake,
        };
        if list == 0 {
            self.s.crew[slot] = Thread::Look;
        }
    }

    /// The earlier waiter's thread, free: the next command waiting for a thread, or it
    /// ends.
    fn next_command(&mut self, slot: usize) {
        while let Some(command) = self.pop_front() {
            if self.s.is_watched(usize::from(command)) {
                self.s.crew[slot] = Thread::Wait {
                    lane: NONE,
                    command,
                };
                return;
            }
        }
        self.s.crew[slot] = Thread::Absent;
        self.s.threads -= 1;
    }

    /// A task's first poll (`Ended::poll_end`, then `Waiter::watch`).
    fn first_poll(&mut self, task: usize) {
        if self.s.has_ended(task) {
            self.s.tasks[task] = Task::Done;
            return;
        }
        self.s.watches[task].waker = true;
        self.s.tasks[task] = Task::Pending;
        self.s.watched |= 1 << task;
        self.s.order[usize::from(self.s.order_len)] = task as u8;
        self.s.order_len += 1;
        match self.p.protocol {
            Protocol::Waiter { blockers } => {
                let lane = self.p.lane(task);
                let blockable = self.s.first_blockable(self.p, lane).is_some();
                if blockers > 0 && blockable && self.s.wanting & (1 << lane) == 0 {
                    self.s.wanting |= 1 << lane;
                    self.push_back(lane as u8);
                    self.summon();
                }
                if self.s.poller == Poller::Off {
                    self.s.poller = Poller::Idle;
                }
            }
            Protocol::ThreadPerAwait { threads } => {
                if usize::from(self.s.threads) < threads {
                    self.s.threads += 1;
                    self.spawn(Thread::Wait {
                        lane: NONE,
                        command: task as u8,
                    });
                } else {
                    self.push_back(task as u8);
                }
            }
        }
    }

    /// The gate's kick (`Waiter::kick`, after the gate is set).
    fn kick(&mut self) {
        self.s.gate = Gate::Set;
        let Protocol::Waiter { blockers } = self.p.protocol else {
            return;
        };
        if self.s.watched == 0 {
            return;
        }
        // The setter reads the gated commands next (`Waiter::read_where_set`).
        self.s.setter = Poller::Idle;
        if blockers == 0 {
            return;
        }
        for lane in 0..LANES {
            if self.s.lane_exists(self.p, lane)
                && self.s.wanting & (1 << lane) == 0
                && self.s.first_blockable(self.p, lane).is_some()
            {
                self.s.wanting |= 1 << lane;
                self.push_back(lane as u8);
                self.summon();
            }
        }
    }

    /// A task drops its future (`Waiter::forget`, then `Watch::disarm`).
    fn drop_future(&mut self, task: usize) {
        self.s.tasks[task] = Task::Dropped;
        if self.s.is_watched(task) {
            self.s.watched &= !(1 << task);
            if matches!(self.p.protocol, Protocol::Waiter { .. }) {
                self.tidy(self.p.lane(task));
            }
        }
        self.s.watches[task].waker = false;
    }

    /// A step of a thread of the crew, if it has one now.
    fn crew_step(&mut self, slot: usize) -> bool {
        let waiter = matches!(self.p.protocol, Protocol::Waiter { .. });
        match self.s.crew[slot] {
            Thread::Absent => return false,
            Thread::Start => {
                let count = match self.p.accounting {
                    Accounting::Apart => &mut self.s.starting,
                    Accounting::Shared => &mut self.s.summoned,
                };
                match count.checked_sub(1) {
                    Some(left) => *count = left,
                    None => self.broke(Broken::Miscount),
                }
                self.look(slot);
            }
            Thread::Look if waiter => self.look(slot),
            Thread::Look => self.next_command(slot),
            Thread::Wait { lane, command } => {
                if !self.s.has_ended(usize::from(command)) {
                    return false;
                }
                if waiter {
                    self.read_after_wait(slot, usize::from(lane), command);
                } else if self.s.is_watched(usize::from(command)) {
                    self.take(usize::from(command));
                    self.s.crew[slot] = Thread::Ending {
                        list: 1 << command,
                        phase: Phase::Wake,
                    };
                } else {
                    self.next_command(slot);
                }
            }
            Thread::Ending { list, phase } => {
                if !self.may_end(list.trailing_zeros() as usize, phase) {
                    return false;
                }
                self.s.crew[slot] = match self.end_next(list, phase) {
                    Some((list, phase)) => Thread::Ending { list, phase },
                    None => Thread::Look,
                };
            }
            Thread::Idle => {
                // Woken by a summons, a time-out or spuriously: it answers a summons if
                // one is out, and looks for work if there may be some.
                self.s.idle -= 1;
                if self.s.summoned > 0 {
                    self.s.summoned -= 1;
                    self.look(slot);
                } else if self.s.queue_len != 0 {
                    self.look(slot);
                } else {
                    // Its idle time-out.
                    self.s.threads -= 1;
                    self.s.crew[slot] = Thread::Absent;
                }
            }
        }
        true
    }

    /// A reader (the poller, or the gate's setter) takes the commands of `read` it read
    /// ended and still watched, under the waiter's lock: its next state.
    fn take_read(&mut self, read: u8) -> Poller {
        let list = read & self.s.watched;
        for command in (0..self.p.commands.len()).filter(|c| list & (1 << c) != 0) {
            self.take(command);
            self.tidy(self.p.lane(command));
        }
        match list {
            0 => Poller::Idle,
            _ => Poller::Ending {
                list,
                phase: Phase::Wake,
            },
        }
    }

    /// A reader's step of ending the watches of `list`: its next state, or `None` while
    /// the watch's lock is held.
    fn end_read(&mut self, list: u8, phase: Phase) -> Option<Poller> {
        if !self.may_end(list.trailing_zeros() as usize, phase) {
            return None;
        }
        Some(match self.end_next(list, phase) {
            Some((list, phase)) => Poller::Ending { list, phase },
            None => Poller::Idle,
        })
    }

    /// Whether the waiter may take the watch's lock for `phase` now.
    fn may_end(&self, command: usize, phase: Phase) -> bool {
        !self.s.watches[command].locked
            || (phase == Phase::Mark && self.p.handshake == Handshake::MarkOutsideLock)
    }

    /// Keeps in `order` only what the rules read: the order of each queue's entries.
    fn normalize_order(&mut self) {
        let mut order = [0u8; COMMANDS];
        let mut len = 0;
        for queue in 0..2 {
            for &c in &self.s.order[..usize::from(self.s.order_len)] {
                let command = usize::from(c);
                if self.s.is_watched(command) && self.p.lane(command) == queue {
                    order[len] = c;
                    len += 1;
                }
            }
        }
        for command in 0..self.p.commands.len() {
            if self.s.is_watched(command) && self.p.lane(command) >= 2 {
                order[len] = command as u8;
                len += 1;
            }
        }
        self.s.order = order;
        self.s.order_len = len as u8;
    }

    fn finish(mut self) -> (State, Option<Broken>) {
        let threads = self.s.thread_count();
        if threads > 1 + self.p.cap() {
            self.broke(Broken::TooManyThreads { threads });
        }
        self.s.crew[..self.p.cap()].sort_unstable();
        self.normalize_order();
        (self.s, self.broken)
    }
}

/// Every step enabled in `s`, with the state it leads to and what it found wrong.
fn successors(p: &Program, s: &State) -> Vec<(Step, State, Option<Broken>)> {
    let mut out = Vec::new();
    let step = |out: &mut Vec<_>, label: Step, change: &dyn Fn(&mut Move<'_>) -> bool| {
        let mut m = Move {
            p,
            s: s.clone(),
            broken: None,
        };
        if change(&mut m) {
            let (next, broken) = m.finish();
            if next != *s {
                out.push((label, next, broken));
            }
        }
    };
    let n = p.commands.len();
    for c in 0..n {
        let command = p.commands[c];
        // The device.
        let may_end = !s.has_ended(c)
            && (!command.gated || s.gate != Gate::Unset)
            && match command.lane {
                Lane::Queue(q) if p.in_order[usize::from(q)] => {
                    (0..c).all(|b| p.commands[b].lane != command.lane || s.has_ended(b))
                }
                _ => true,
            };
        if may_end {
            step(&mut out, Step::End { command: c }, &|m| {
                m.s.ended |= 1 << c;
                true
            });
        }
        // The task.
        match s.tasks[c] {
            Task::Fresh => step(&mut out, Step::FirstPoll { task: c }, &|m| {
                m.first_poll(c);
                true
            }),
            // Under the watch's lock, reading the mark and storing the waker are one step:
            // every other step on the watch waits for the lock.
            Task::Woken if !s.watches[c].locked => step(&mut out, Step::Poll { task: c }, &|m| {
                let watch = &mut m.s.watches[c];
                if watch.ended {
                    m.s.tasks[c] = Task::Done;
                    return true;
                }
                match m.p.handshake {
                    Handshake::Locked => {
                        watch.waker = true;
                        m.s.tasks[c] = Task::Pending;
                    }
                    Handshake::MarkOutsideLock => {
                        watch.locked = true;
                        m.s.tasks[c] = Task::Storing;
                    }
                    Handshake::ReadBeforeStore => m.s.tasks[c] = Task::Storing,
                }
                true
            }),
            Task::Storing => step(&mut out, Step::StoreWaker { task: c }, &|m| {
                let watch = &mut m.s.watches[c];
                watch.waker = true;
                watch.locked = false;
                m.s.tasks[c] = Task::Pending;
                true
            }),
            _ => {}
        }
        if command.droppable && matches!(s.tasks[c], Task::Pending | Task::Woken) {
            step(&mut out, Step::Drop { task: c }, &|m| {
                m.drop_future(c);
                true
            });
        }
        // The poller reads a watched command into its batch; reading one still pending
        // changes nothing.
        let read = match s.poller {
            Poller::Idle => Some(0),
            Poller::Reading(read) if read & (1 << c) == 0 => Some(read),
            _ => None,
        };
        if let Some(read) = read.filter(|_| s.is_watched(c) && s.has_ended(c)) {
            step(&mut out, Step::PollerReads { command: c }, &|m| {
                m.s.poller = Poller::Reading(read | 1 << c);
                true
            });
        }
        // So does the gate's setter, while it reads.
        let read = match s.setter {
            Poller::Idle => Some(0),
            Poller::Reading(read) if read & (1 << c) == 0 => Some(read),
            _ => None,
        };
        if let Some(read) = read.filter(|_| s.is_watched(c) && s.has_ended(c)) {
            step(&mut out, Step::SetterReads { command: c }, &|m| {
                m.s.setter = Poller::Reading(read | 1 << c);
                true
            });
        }
    }
    // The program.
    let opener_done = p
        .opener
        .is_none_or(|o| matches!(s.tasks[o], Task::Done | Task::Dropped));
    if s.gate == Gate::Unset && p.gated() && opener_done {
        for kick in [false, true] {
            step(&mut out, Step::SetGate { kick }, &|m| {
                m.s.gate = if kick { Gate::Kicking } else { Gate::Set };
                true
            });
        }
    }
    if s.gate == Gate::Kicking {
        step(&mut out, Step::Kick, &|m| {
            m.kick();
            true
        });
    }
    // The poller.
    match s.poller {
        Poller::Idle if s.watched == 0 => step(&mut out, Step::PollerExits, &|m| {
            m.s.poller = Poller::Off;
            true
        }),
        Poller::Reading(read) => {
            step(&mut out, Step::PollerTakes { read }, &|m| {
                m.s.poller = m.take_read(read);
                true
            });
        }
        Poller::Ending { list, phase } => {
            let command = list.trailing_zeros() as usize;
            step(&mut out, Step::PollerEnds { command, phase }, &|m| {
                m.end_read(list, phase)
                    .map(|next| m.s.poller = next)
                    .is_some()
            });
        }
        _ => {}
    }
    // The gate's setter: it takes and ends as the poller does, and stops reading at any
    // time (the poller took the kick, its time is up, or all it read ended).
    match s.setter {
        Poller::Idle => step(&mut out, Step::SetterLeaves, &|m| {
            m.s.setter = Poller::Off;
            true
        }),
        Poller::Reading(read) => {
            step(&mut out, Step::SetterTakes { read }, &|m| {
                m.s.setter = m.take_read(read);
                true
            });
        }
        Poller::Ending { list, phase } => {
            let command = list.trailing_zeros() as usize;
            step(&mut out, Step::SetterEnds { command, phase }, &|m| {
                m.end_read(list, phase)
                    .map(|next| m.s.setter = next)
                    .is_some()
            });
        }
        Poller::Off => {}
    }
    // The crew: alike threads in alike states make one step.
    for slot in 0..p.cap() {
        let was = s.crew[slot];
        if was == Thread::Absent || s.crew[..slot].contains(&was) {
            continue;
        }
        step(&mut out, Step::Crew { was }, &|m| m.crew_step(slot));
    }
    out
}

/// What an exploration found.
#[derive(Debug)]
struct Report {
    states: usize,
    steps: usize,
    /// States where nothing can happen.
    finals: usize,
    /// Whether no run can go on for ever (the graph of states has no cycle).
    acyclic: bool,
    /// The most threads of the waiter in one state.
    most_threads: usize,
    /// The first state found of each kind of fault, with the steps that lead to it.
    broken: Vec<(Broken, Vec<Step>)>,
}

impl Report {
    fn kinds(&self) -> Vec<Broken> {
        self.broken.iter().map(|(b, _)| *b).collect()
    }

    fn trace_of(&self, found: impl Fn(&Broken) -> bool) -> Option<&[Step]> {
        self.broken
            .iter()
            .find(|(b, _)| found(b))
            .map(|(_, t)| t.as_slice())
    }
}

/// A quick hash for the set of states seen (std's is made for hostile keys).
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A fault found: in a state, or by a step from it.
type Found = (Broken, u32, Option<Step>);

/// Keeps the first fault found of each kind.
fn note(found: &mut Vec<Found>, broken: Broken, at: u32, step: Option<Step>) {
    let kind = std::mem::discriminant(&broken);
    if !found
        .iter()
        .any(|(b, _, _)| std::mem::discriminant(b) == kind)
    {
        found.push((broken, at, step));
    }
}

/// Explores every state of `p` reachable from the start, breadth first.
fn explore(p: &Program) -> Report {
    let mut index: HashMap<Key, u32, BuildHasherDefault<Fx>> = HashMap::default();
    let mut states = vec![State::new()];
    let mut parent: Vec<(u32, Step)> = vec![(0, Step::Start)];
    index.insert(State::new().key(), 0);
    // The successors of state `i` are `targets[offsets[i]..offsets[i + 1]]`.
    let mut offsets = vec![0usize];
    let mut targets: Vec<u32> = Vec::new();
    let mut found: Vec<Found> = Vec::new();
    let mut finals = 0;
    let mut most_threads = 0;
    let mut i = 0;
    while i < states.len() {
        let s = states[i].clone();
        most_threads = most_threads.max(s.thread_count());
        let next = successors(p, &s);
        if next.is_empty() {
            finals += 1;
            if let Some(broken) = s.judge_final(p) {
                note(&mut found, broken, i as u32, None);
            }
        }
        for (step, t, broken) in next {
            let key = t.key();
            let id = match index.get(&key) {
                Some(&id) => id,
                None => {
                    let id = u32::try_from(states.len()).expect("fewer than 2^32 states");
                    index.insert(key, id);
                    states.push(t);
                    parent.push((i as u32, step));
                    id
                }
            };
            if let Some(broken) = broken {
                note(&mut found, broken, i as u32, Some(step));
            }
            targets.push(id);
        }
        offsets.push(targets.len());
        i += 1;
    }
    let n = states.len();
    // Which states can reach one where everything is done: backwards from those.
    let mut incoming = vec![0usize; n + 1];
    for &t in &targets {
        incoming[t as usize + 1] += 1;
    }
    for k in 0..n {
        incoming[k + 1] += incoming[k];
    }
    let mut sources = vec![0u32; targets.len()];
    let mut fill = incoming.clone();
    for from in 0..n {
        for &t in &targets[offsets[from]..offsets[from + 1]] {
            sources[fill[t as usize]] = from as u32;
            fill[t as usize] += 1;
        }
    }
    let mut reaches = vec![false; n];
    let mut work: VecDeque<usize> = (0..n).filter(|&k| states[k].is_done(p)).collect();
    for &k in &work {
        reaches[k] = true;
    }
    while let Some(k) = work.pop_front() {
        for &from in &sources[incoming[k]..incoming[k + 1]] {
            if !reaches[from as usize] {
                reaches[from as usize] = true;
                work.push_back(from as usize);
            }
        }
    }
    if let Some(k) = (0..n).find(|&k| !reaches[k] && offsets[k + 1] > offsets[k]) {
        note(&mut found, Broken::Stuck, k as u32, None);
    }
    // No cycle: every state can be peeled off once the states after it are.
    let mut after: Vec<usize> = (0..n).map(|k| offsets[k + 1] - offsets[k]).collect();
    let mut peel: Vec<usize> = (0..n).filter(|&k| after[k] == 0).collect();
    let mut peeled = 0;
    while let Some(k) = peel.pop() {
        peeled += 1;
        for &from in &sources[incoming[k]..incoming[k + 1]] {
            after[from as usize] -= 1;
            if after[from as usize] == 0 {
                peel.push(from as usize);
            }
        }
    }
    let trace = |mut k: u32, last: Option<Step>| {
        let mut steps: Vec<Step> = last.into_iter().collect();
        while k != 0 {
            let (from, step) = parent[k as usize];
            steps.push(step);
            k = from;
        }
        steps.reverse();
        steps
    };
    Report {
        states: n,
        steps: targets.len(),
        finals,
        acyclic: peeled == n,
        most_threads,
        broken: found
            .into_iter()
            .map(|(b, k, last)| (b, trace(k, last)))
            .collect(),
    }
}

/// Explores `p`, prints what it found, and hands the report back.
fn run(name: &str, p: &Program) -> Report {
    let start = Instant::now();
    let report = explore(p);
    println!(
        "{name}: {} states, {} steps, {} final, {}, at most {} threads, {:?} found, in {:?}",
        report.states,
        report.steps,
        report.finals,
        if report.acyclic { "no cycle" } else { "cycles" },
        report.most_threads,
        report.kinds(),
        start.elapsed()
    );
    report
}

/// Asserts that every run of `p` wakes every task once its command ended, never before,
/// once per wait, and ends with nothing left, within `1 + cap` threads.
fn assert_sound(name: &str, report: &Report, p: &Program) {
    for (broken, trace) in &report.broken {
        println!("{name}: {broken:?} after");
        print_trace(trace);
    }
    assert!(report.broken.is_empty(), "{name}: {:?}", report.kinds());
    assert!(report.acyclic, "{name}: a run that goes on for ever");
    assert!(
        report.most_threads <= 1 + p.cap(),
        "{name}: too many threads"
    );
}

/// Explores `p` and asserts it sound.
fn check(name: &str, p: &Program) -> Report {
    let report = run(name, p);
    assert_sound(name, &report, p);
    report
}

/// Explores and asserts sound every program of `programs`, printing a line for all.
fn check_all(name: &str, programs: &[Program]) {
    let start = Instant::now();
    let (mut states, mut steps, mut largest) = (0, 0, 0);
    for (k, p) in programs.iter().enumerate() {
        let report = explore(p);
        assert_sound(&format!("{name}, program {k}: {p:?}"), &report, p);
        states += report.states;
        steps += report.steps;
        largest = largest.max(report.states);
    }
    println!(
        "{name}: {} programs, {states} states ({largest} in the largest), {steps} steps, in {:?}",
        programs.len(),
        start.elapsed()
    );
}

use Lane::{Alone, Queue};

/// Issue 47's shape: two tasks await gated commands on lanes of their own, a third awaits
/// an ungated command of a queue (enqueued while the gate was unset, so not known to end
/// on its own), and the program sets the gate once that third task has seen its end.
fn issue_47(protocol: Protocol) -> Program {
    Program::new(
        vec![
            Command::new(Alone, true, false),
            Command::new(Alone, true, false),
            Command::new(Queue(0), false, false),
        ],
        Some(2),
        protocol,
    )
}

/// Issue 47's shape with blockers at work before the gate is set and after its kick: a
/// command that ends on its own first on queue 0, gated ones on a lane of their own and
/// behind it on queue 0, and the ungated one whose task sets the gate on queue 1.
fn issue_47_with_blockers(blockers: usize) -> Program {
    Program::new(
        vec![
            Command::new(Queue(0), false, true),
            Command::new(Alone, true, false),
            Command::new(Queue(0), true, false),
            Command::new(Queue(1), false, false),
        ],
        Some(3),
        Protocol::Waiter { blockers },
    )
}

/// Every program of `n` commands: each on queue 0 (in order), on queue 1 (not in order)
/// or on a lane of its own, gated or not; the gate made before every command (none is
/// known to end on its own) or just before the first gated one (the ungated commands
/// before it are); the gate set once the task of the last command that waits for no gate
/// (nor behind one on the in-order queue) has seen its end, at any time where there is
/// none.
fn every_program(n: usize, protocol: Protocol) -> Vec<Program> {
    let lanes = [Queue(0), Queue(1), Alone];
    let mut programs = Vec::new();
    for shape in 0..3usize.pow(n as u32) {
        for gating in 0..1u32 << n {
            let first_gated = (0..n).find(|&c| gating & (1 << c) != 0).unwrap_or(n);
            let made_at = if first_gated == 0 {
                vec![0]
            } else {
                vec![0, first_gated]
            };
            for made in made_at {
                let commands: Vec<Command> = (0..n)
                    .map(|c| {
                        let gated = gating & (1 << c) != 0;
                        Command::new(lanes[shape / 3usize.pow(c as u32) % 3], gated, c < made)
                    })
                    .collect();
                let behind_gate = |c: usize| {
                    commands[c].gated
                        || commands[c].lane == Queue(0)
                            && (0..c).any(|b| commands[b].gated && commands[b].lane == Queue(0))
                };
                let opener = (0..n).rev().find(|&c| !behind_gate(c));
                let mut p = Program::new(commands, opener, protocol);
                p.in_order = [true, false];
                programs.push(p);
            }
        }
    }
    programs
}

#[test]
fn the_waiter_wakes_every_task_of_issue_47s_shape_once_and_never_deadlocks() {
    for blockers in [0, 1, 2] {
        let waiter = Protocol::Waiter { blockers };
        check(&format!("issue 47, {blockers} blockers"), &issue_47(waiter));
    }
    for blockers in [0, 1] {
        let waiter = Protocol::Waiter { blockers };
        let name = format!("issue 47, {blockers} blockers, every future droppable");
        check(&name, &issue_47(waiter).droppable());
    }
    check(
        "issue 47 with blockers at work, 1 blocker",
        &issue_47_with_blockers(1),
    );
}

/// `full` runs the larger configurations of
/// [`every_program_of_three_commands_wakes_each_task_once_and_never_deadlocks`].
const MODEL_VAR: &str = "CL_LIFETIME_MODEL";

#[test]
fn every_program_of_two_commands_wakes_each_task_once_and_never_deadlocks() {
    for blockers in [0, 1, 2] {
        let programs = every_program(2, Protocol::Waiter { blockers });
        check_all(
            &format!("every program of 2 commands, {blockers} blockers"),
            &programs,
        );
    }
    let programs = every_program(2, Protocol::Waiter { blockers: 0 });
    let droppable: Vec<Program> = programs.into_iter().map(Program::droppable).collect();
    check_all(
        "every program of 2 commands, 0 blockers, droppable",
        &droppable,
    );
}

/// The larger configurations, beyond the few seconds the others take in a debug build:
/// every program of two commands with droppable futures and blockers, every program of
/// three commands with 0 to 2 blockers and droppable futures or not, issue 47's shapes
/// with two blockers or droppable futures, and four lanes with 1, 2 or [`MAX_BLOCKERS`]
/// blockers. About 350 million states, eleven minutes in a release build on two cores: run under
/// `CL_LIFETIME_MODEL=full` (`make stress`). By default, every 27th program of three
/// commands with one blocker.
#[test]
fn every_program_of_three_commands_wakes_each_task_once_and_never_deadlocks() {
    if std::env::var(MODEL_VAR).as_deref() != Ok("full") {
        let sample: Vec<Program> = every_program(3, Protocol::Waiter { blockers: 1 })
            .into_iter()
            .step_by(27)
            .collect();
        assert!(sample.len() >= 10, "{} programs", sample.len());
        check_all("every 27th program of 3 commands, 1 blocker", &sample);
        return;
    }
    for blockers in [1, 2] {
        let programs = every_program(2, Protocol::Waiter { blockers });
        let droppable: Vec<Program> = programs.into_iter().map(Program::droppable).collect();
        check_all(
            &format!("every program of 2 commands, {blockers} blockers, droppable"),
            &droppable,
        );
    }
    for blockers in [0, 1, 2] {
        let programs = every_program(3, Protocol::Waiter { blockers });
        check_all(
            &format!("every program of 3 commands, {blockers} blockers"),
            &programs,
        );
        let droppable: Vec<Program> = programs.into_iter().map(Program::droppable).collect();
        check_all(
            &format!("every program of 3 commands, {blockers} blockers, droppable"),
            &droppable,
        );
    }
    check(
        "issue 47, 2 blockers, every future droppable",
        &issue_47(Protocol::Waiter { blockers: 2 }).droppable(),
    );
    check(
        "issue 47 with blockers at work, 2 blockers",
        &issue_47_with_blockers(2),
    );
    check(
        "issue 47 with blockers at work, 1 blocker, every future droppable",
        &issue_47_with_blockers(1).droppable(),
    );
    let lanes = vec![Command::new(Alone, false, true); COMMANDS];
    for blockers in [1, 2, MAX_BLOCKERS] {
        let p = Program::new(lanes.clone(), None, Protocol::Waiter { blockers });
        let report = check(&format!("{COMMANDS} lanes, {blockers} blockers"), &p);
        assert_eq!(report.most_threads, 1 + blockers.min(COMMANDS));
    }
}

/// A gated command the waiter was told ends on its own (a command behind an event from
/// outside the library): its blocker is held until the gate is set, and the poller wakes
/// the task that sets it.
#[test]
fn a_blocker_held_by_a_wrong_judgement_holds_up_no_wake_up() {
    for blockers in [1, 2] {
        let p = Program::new(
            vec![
                Command::new(Alone, true, true),
                Command::new(Queue(0), true, true),
                Command::new(Queue(1), false, false),
            ],
            Some(2),
            Protocol::Waiter { blockers },
        );
        check(&format!("misjudged, {blockers} blockers"), &p);
    }
}

/// The waiter's threads: at most the poller and the cap of blockers, however many lanes
/// have commands that end on their own; the cap is reached where lanes outnumber it.
#[test]
fn the_waiters_threads_stay_within_one_poller_and_its_blockers() {
    let lanes = 3;
    let alone = vec![Command::new(Alone, false, true); lanes];
    for blockers in [1, MAX_BLOCKERS] {
        let p = Program::new(alone.clone(), None, Protocol::Waiter { blockers });
        let report = check(&format!("{lanes} lanes, {blockers} blockers"), &p);
        assert_eq!(report.most_threads, 1 + blockers.min(lanes));
    }
}

#[test]
fn the_model_finds_the_deadlock_of_a_thread_per_gated_await() {
    let report = run(
        "issue 47, a thread per await, 2 threads",
        &issue_47(Protocol::ThreadPerAwait { threads: 2 }),
    );
    let trace = report
        .trace_of(|b| *b == Broken::Deadlock)
        .expect("the deadlock is found");
    print_trace(trace);
    assert!(
        report
            .trace_of(|b| matches!(b, Broken::LostWakeUp { .. }))
            .is_none()
    );
    // The same protocol with a thread for every await has none: the deadlock is the cap's.
    check(
        "issue 47, a thread per await, 3 threads",
        &issue_47(Protocol::ThreadPerAwait { threads: 3 }),
    );
}

/// The crew's count as it was before this model: the model finds the count taken below
/// zero (an overflow: a panic of the blocker in a debug build, a count stuck near
/// `usize::MAX` in a release build, after which no blocker is summoned again).
#[test]
fn the_model_finds_a_summons_taken_from_a_starting_blocker() {
    let mut p = issue_47(Protocol::Waiter { blockers: 2 });
    p.accounting = Accounting::Shared;
    let report = run("issue 47, 2 blockers, one count for starting and woken", &p);
    let trace = report
        .trace_of(|b| *b == Broken::Miscount)
        .expect("the count taken below zero is found");
    print_trace(trace);
}

#[test]
fn the_model_finds_a_lost_wake_up_when_the_mark_is_set_outside_the_watch_lock() {
    let mut p = issue_47(Protocol::Waiter { blockers: 1 });
    p.handshake = Handshake::MarkOutsideLock;
    let report = run("issue 47, the mark set outside the watch's lock", &p);
    let trace = report
        .trace_of(|b| matches!(b, Broken::LostWakeUp { .. }))
        .expect("the lost wake-up is found");
    print_trace(trace);
}

#[test]
fn the_model_finds_a_lost_wake_up_when_the_future_reads_the_mark_before_storing_its_waker() {
    let mut p = issue_47(Protocol::Waiter { blockers: 1 });
    p.handshake = Handshake::ReadBeforeStore;
    let report = run("issue 47, the mark read before the waker is stored", &p);
    let trace = report
        .trace_of(|b| matches!(b, Broken::LostWakeUp { .. }))
        .expect("the lost wake-up is found");
    print_trace(trace);
}

/// A command whose status the test fixes, for the waiter's own lanes.
struct Status(bool);

impl super::Awaited for Status {
    fn has_ended(&self) -> bool {
        self.0
    }

    fn wait(&self) {
        assert!(self.0, "a wait on a command that never ends");
    }
}

/// The lane rules the model runs (rules 4 and 5) against the waiter's own: every lane of
/// up to four entries, each ended or not and told to end on its own or not, in order or
/// not, with the gates set or not, read after a wait on each ended entry or on one
/// already taken off; and a lane with more than [`SCAN`] pending entries.
#[test]
fn the_models_lane_rules_are_the_waiters() {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::{Entry as Real, Lane as RealLane, LaneKey, Waiter};
    use crate::core::gates::OpenGates;

    let waiter: Waiter<Status> = Waiter::new();
    let key = LaneKey::Queue(1);
    let real = |entries: &[Entry], in_order: bool, set: bool| {
        let gates = Arc::new(OpenGates::default());
        if !set {
            gates.opened(0, std::panic::Location::caller());
        }
        RealLane {
            in_order,
            driver: 0,
            gates: Some(gates),
            entries: entries
                .iter()
                .map(|e| {
                    let entry = Real {
                        event: Arc::new(Status(e.ended)),
                        watch: Arc::default(),
                        filed: 0,
                        held: None,
                    };
                    (u64::from(e.command), entry)
                })
                .collect(),
            own: entries
                .iter()
                .filter(|e| e.own)
                .map(|e| u64::from(e.command))
                .collect(),
            blocked: None,
            wanting: false,
        }
    };
    // The entries the waiter's read leaves, and the command it would block on next.
    let read = |lane: RealLane<Status>, waited: u8| {
        let mut state = waiter.shared.lock();
        state.watched = lane.entries.len();
        state.lanes.insert(key, lane);
        let taken = state.read_lane(key, u64::from(waited));
        let left: BTreeSet<u8> = state
            .lanes
            .get(&key)
            .map(|l| l.entries.keys().map(|&id| id as u8).collect())
            .unwrap_or_default();
        let next = state.lanes.get(&key).and_then(|l| l.first_blockable());
        state.lanes.clear();
        state.watched = 0;
        drop(state);
        drop(taken);
        (left, next)
    };
    let mut lanes = 0;
    for n in 0..=COMMANDS {
        for ended in 0..1u32 << n {
            for own in 0..1u32 << n {
                for in_order in [false, true] {
                    for set in [false, true] {
                        let entries: Vec<Entry> = (0..n)
                            .map(|k| Entry {
                                command: k as u8,
                                ended: ended >> k & 1 == 1,
                                own: own >> k & 1 == 1,
                            })
                            .collect();
                        assert_eq!(
                            real(&entries, in_order, set).first_blockable(),
                            first_blockable(&entries, false, set).map(u64::from)
                        );
                        // After a wait on each ended entry, or on one already taken off.
                        let waits = entries.iter().filter(|e| e.ended).map(|e| e.command);
                        for waited in waits.chain([COMMANDS as u8]) {
                            let (left, next) = read(real(&entries, in_order, set), waited);
                            let taken: BTreeSet<u8> =
                                read_lane(&entries, in_order, waited).into_iter().collect();
                            let rest: Vec<Entry> = entries
                                .iter()
                                .copied()
                                .filter(|e| !taken.contains(&e.command))
                                .collect();
                            assert_eq!(
                                left,
                                rest.iter().map(|e| e.command).collect(),
                                "{entries:?}, in order {in_order}, after {waited}"
                            );
                            assert_eq!(next, first_blockable(&rest, false, set).map(u64::from));
                            lanes += 1;
                        }
                    }
                }
            }
        }
    }
    println!("{lanes} lane reads alike");
    // Beyond SCAN pending entries of a lane not in order, an ended one is left to the
    // poller.
    let long = SCAN + 3;
    assert!(long < usize::from(u8::MAX));
    let entries: Vec<Entry> = (0..long)
        .map(|k| Entry {
            command: k as u8,
            ended: k == 0 || k == long - 1,
            own: true,
        })
        .collect();
    let taken = read_lane(&entries, false, 0);
    assert_eq!(taken, vec![0]);
    let (left, _) = read(real(&entries, false, true), 0);
    assert_eq!(left.len(), long - 1);
}

/// A command that ends when the test ends it, for the waiter's own threads.
#[derive(Default)]
struct Switch {
    ended: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl Switch {
    fn end(&self) {
        *self.ended.lock().expect("the switch's lock") = true;
        self.changed.notify_all();
    }
}

impl super::Awaited for Switch {
    fn has_ended(&self) -> bool {
        *self.ended.lock().expect("the switch's lock")
    }

    fn wait(&self) {
        let ended = self.ended.lock().expect("the switch's lock");
        drop(
            self.changed
                .wait_while(ended, |e| !*e)
                .expect("the switch's lock"),
        );
    }
}

/// What the model takes of the poller's schedule (rule 2: the poller may read any watched
/// command, at any time), against the waiter's own threads: whenever the poller sleeps,
/// every watched command has a place in its schedule that is still its own, in a level
/// that is due at some time, or in the spin. Random programs of watches, ends, drops and
/// kicks, on lanes with commands that end on their own or not, held behind closed gates
/// or not (the *held* rule), those gates set at random.
#[test]
fn the_pollers_schedule_holds_every_watched_command() {
    use std::sync::Arc;
    use std::task::Waker;
    use std::time::Duration;

    use super::{Order, Waiter, Watch as RealWatch};
    use crate::core::gates::OpenGates;

    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let waiter: Waiter<Switch> = Waiter::new();
    // A context with a gate unset, and one with every gate set.
    let unset = Arc::new(OpenGates::default());
    unset.opened(0, std::panic::Location::caller());
    let set = Arc::new(OpenGates::default());
    // The flags of two closed gates that commands may be held behind; one set is replaced
    // by a closed one, so later commands are held again.
    let mut flags: [Arc<std::sync::atomic::AtomicBool>; 2] = Default::default();
    let mut watched = Vec::new();
    let mut checks = 0;
    for _ in 0..400 {
        match next(6) {
            0 | 1 => {
                let command = Arc::new(Switch::default());
                let watch = Arc::new(RealWatch::default());
                assert!(!watch.ended_or_wake(Waker::noop()));
                let queue = match next(3) {
                    0 => None,
                    q => Some(q),
                };
                let order = Order {
                    driver: 0,
                    queue,
                    in_order: next(2) == 0,
                    ends_on_its_own: next(2) == 0,
                    gates: Some(if next(2) == 0 { &unset } else { &set }.clone()),
                    held: match next(3) {
                        2 => None,
                        f => Some(flags[f as usize].clone()),
                    },
                };
                let ticket = waiter
                    .watch(command.clone(), order, watch)
                    .expect("the poller starts");
                watched.push((command, ticket));
            }
            2 if !watched.is_empty() => {
                let k = next(watched.len() as u64) as usize;
                watched[k].0.end();
            }
            3 if !watched.is_empty() => {
                let k = next(watched.len() as u64) as usize;
                let (_, ticket) = watched.swap_remove(k);
                waiter.forget(&ticket);
            }
            4 => {
                let gates = if next(2) == 0 { &unset } else { &set };
                if next(2) == 0 {
                    // A held command's gate is set before its kick, as `Gate::set_status`
                    // sets it.
                    let f = next(2) as usize;
                    flags[f].store(true, std::sync::atomic::Ordering::Release);
                    flags[f] = Arc::default();
                }
                if let Some(kick) = waiter.kick(gates) {
                    if next(2) == 0 {
                        waiter.read_where_set(gates, kick);
                    }
                }
            }
            _ => std::thread::sleep(Duration::from_micros(next(300))),
        }
        // Once the poller sleeps (it spins for a millisecond after a kick).
        let asleep = Instant::now();
        let state = loop {
            let state = waiter.shared.lock();
            if state.poller_wakes.is_some() || asleep.elapsed() > Duration::from_millis(50) {
                break state;
            }
            drop(state);
            std::thread::sleep(Duration::from_micros(20));
        };
        if state.poller_wakes.is_none() {
            continue;
        }
        let schedule = &state.schedule;
        for (k, level) in schedule.levels.iter().enumerate() {
            assert!(
                level.is_empty() || schedule.due[k].is_some(),
                "level {k} never due"
            );
        }
        for (key, lane) in &state.lanes {
            for (&id, entry) in &lane.entries {
                let placed = schedule
                    .spin
                    .iter()
                    .chain(schedule.levels.iter().flatten())
                    .any(|f| f.lane == *key && f.id == id && f.token == entry.filed);
                assert!(
                    placed,
                    "command {id} of {key:?} is on no place of the schedule"
                );
            }
        }
        checks += 1;
    }
    for (command, _) in &watched {
        command.end();
    }
    let start = Instant::now();
    while waiter.watched() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "every command is seen ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("{checks} sleeps of the poller checked");
    assert!(checks > 100);
}
