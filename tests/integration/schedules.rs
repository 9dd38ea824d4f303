//! Randomized schedules checked against a sequential model.
//!
//! Each schedule is a random list of commands over a few buffers, issued in program order
//! on random queues (in-order and out-of-order, on one device or spread over two). The
//! library must make the device honour that order through the wait lists it computes from
//! the buffers each command touches; a sequential CPU model applies the same commands in
//! program order, and every read must see the model's value at the moment it was issued.
//!
//! To make a missing wait show, some commands are gated by user events that are opened
//! only a few commands later, so that commands issued after them (on other queues) are
//! really enqueued before they ran. A blocking command whose inputs depend on a closed
//! gate opens it first (the plan says so), so no schedule can deadlock.
//!
//! The failure-mode test also fails gates (`UserEvent::fail`) or drops them while closed,
//! and gives some commands a gate that has failed already. Which commands then fail is
//! not predicted (drivers propagate failures differently); instead every command's
//! outcome is observed (refused at enqueue, or its event's final status) and the model is
//! replayed in program order with a command changing the buffers only if it completed. A
//! buffer's last write is the latest earlier command not refused at enqueue that writes
//! it, except that a write that completed without replacing all of the buffer leaves a
//! failed last write in place (the rest of the buffer is still what the failed one left,
//! and a failed command's effect is unknown: NVIDIA runs some and skips others). The
//! failure rule must hold:
//!
//! - R1: a host read or map that returned data read a buffer whose last write did not
//!   fail, and the data is the model's;
//! - R2: a host read whose buffer's last write failed returned an error
//!   (`DependencyFailed`, or `CommandFailed` when the read itself failed);
//! - R3: a copy or kernel that completed read no buffer whose last write failed;
//! - R4: a command given a gate that had failed was refused at enqueue, and every refusal
//!   was one of those or of a command reading a buffer whose last write failed;
//! - R5: nothing hangs (a watchdog aborts the test's child process with the schedule
//!   after 30 s), and once the buffers are dropped the context accounts for no live or
//!   pending bytes.
//!
//! A gate that will fail never gates a blocking command: like one that will open, it is
//! set before. PoCL (3.1, 5.0, up to 7.1) finishes a command twice, and aborts
//! (`pocl_util.c` assertions `event->status == CL_SUBMITTED`, `cq->command_count > 0`,
//! `pocl_refcount > 0`) or crashes now and then, when a dependency of it completes on the
//! device while the host fails another of them (design trap "PoCL's double finish"); a
//! dependency's status reads complete a little before PoCL is done with it, so waiting for
//! it is not enough. So failure-mode plans keep the *failing order*: no gate opens while a
//! gate that will fail is closed (those are failed or dropped first). And before the host
//! enqueues a command that may wait on a closed gate that will fail, or fails one, it waits
//! for every command that cannot be waiting on a closed gate, the unmaps of earlier maps
//! included (taken with `Mapped::unmap`): PoCL ties a command to no dependency that has
//! completed, so a failing gate's commands wait on nothing that may end as it fails.
//!
//! The threaded test gives each host thread its own queue and buffers, plus buffers all
//! threads only read; their one write is gated until every thread has enqueued all it can
//! without blocking. Threads never map the shared buffers: PoCL 3.1 crashes, or maps
//! wrong contents, when several host threads map one buffer at once (raw OpenCL calls
//! do it too).
//!
//! # Replaying
//!
//! A failure prints the seed of the failing schedule (or round) with its command list.
//!
//! - `CL_LIFETIME_SCHEDULE_SEED=<u64>` runs only that one schedule (in
//!   `random_schedules_match_a_sequential_model` and
//!   `random_schedules_with_failures_keep_the_failure_rule`) or that one round (in
//!   `threads_with_their_own_queues_match_a_sequential_model`); name the test on the
//!   command line (`schedules::<test>`) to run just one of them. The lowest bit of a seed picks the context:
//!   0 for one device, 1 for two devices of one platform (`common::two_device_context`;
//!   PoCL gives two with `POCL_DEVICES="pthread pthread"`).
//! - `CL_LIFETIME_SCHEDULES=<n>` sets how many schedules the first test runs (default
//!   2,000, half of them on two devices when there are two).
//! - `CL_LIFETIME_ROUNDS=<n>` sets how many rounds the threaded test runs (default 300).
//! - `CL_LIFETIME_FAILURE_SCHEDULES=<n>` sets how many schedules the failure-mode test
//!   runs (default 300, half of them on two devices when there are two).
//!
//! ```text
//! POCL_DEVICES="pthread pthread" CL_LIFETIME_SCHEDULE_SEED=1234 cargo test \
//!     --test integration schedules::random_schedules_match_a_sequential_model -- --nocapture
//! ```

use std::cell::Cell;
use std::fmt;
use std::io::Write as _;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cl_lifetime::{
    After, Arg, ClBuffer, Context, Event, HazardStats, Kernel, PendingRead, Queue, UserEvent,
    wait_all,
};

use crate::common::{self, Rng, mix};

const SEED_VAR: &str = "CL_LIFETIME_SCHEDULE_SEED";
/// Set: each seed is named on stderr before it runs, so that a crash inside the driver
/// names the seed to replay.
const TRAIL_VAR: &str = "CL_LIFETIME_SCHEDULE_TRAIL";
const SCHEDULES_VAR: &str = "CL_LIFETIME_SCHEDULES";
const ROUNDS_VAR: &str = "CL_LIFETIME_ROUNDS";
const FAILURE_SCHEDULES_VAR: &str = "CL_LIFETIME_FAILURE_SCHEDULES";
const DEFAULT_SCHEDULES: usize = 2000;
const DEFAULT_ROUNDS: usize = 300;
const DEFAULT_FAILURE_SCHEDULES: usize = 300;
/// The status failure-mode plans fail gates with.
const GATE_FAILURE: i32 = -1234;
/// How long one failure-mode schedule may run before the test calls it a hang.
const HANG_LIMIT: Duration = Duration::from_secs(30);
/// How long the failure-mode test may run in all (its child process's limit).
const FAILURE_RUN_LIMIT: Duration = Duration::from_secs(600);
/// Queues of each kind per device in a context's pool: the most a schedule uses.
const MAX_QUEUES: usize = 4;
/// The narrowest global size of a kernel launch, whatever the buffers' length (the kernels
/// stride). Launches run at one of three widths ([`items`]): PoCL 5 and 6 abort when one
/// kernel runs on two queues at once at different widths, a driver bug that
/// `examples/pocl_dlhandle.rs` reproduces without this library and that the library orders
/// launches around there (the kernel layer's *one width at a time* rule).
const SCHEDULE_ITEMS: usize = 64;

/// The global size of a launch whose constant is `v`: 64, 128 or 256 work items.
fn items(v: i32) -> usize {
    SCHEDULE_ITEMS << v.rem_euclid(3)
}
/// User-event gates per plan, at most (one bit each in a `u32` mask).
const MAX_GATES: usize = 8;
/// Failing schedules reported before the test stops looking for more.
const MAX_REPORTED: usize = 3;

// ---------------------------------------------------------------------------------------
// Deterministic randomness ([`Rng`])
// ---------------------------------------------------------------------------------------

/// The `i`-th seed of a run: its lowest bit says on how many devices it runs.
fn nth_seed(base: u64, i: usize, devices: usize) -> u64 {
    (mix(base ^ (i as u64).wrapping_mul(0xD134_2543_DE82_EF95)) & !1) | (devices as u64 - 1)
}

fn devices_of(seed: u64) -> usize {
    1 + (seed & 1) as usize
}

fn env_number(var: &str) -> Option<u64> {
    let value = std::env::var(var).ok()?;
    let value = value.trim();
    let parsed = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{var}={value:?} is not a u64: {e}")))
}

// ---------------------------------------------------------------------------------------
// Plans: what a schedule does, decided from its seed alone
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct QueueSpec {
    device: usize,
    in_order: bool,
}

impl fmt::Display for QueueSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.in_order {
            "in-order"
        } else {
            "out-of-order"
        };
        write!(f, "{kind} on device {}", self.device)
    }
}

/// Buffer contents `base + step * i`, wrapping.
#[derive(Clone, Copy, Debug)]
struct Pattern {
    base: i32,
    step: i32,
}

impl Pattern {
    fn random(rng: &mut Rng) -> Pattern {
        Pattern {
            base: rng.int(-1000, 1000),
            step: rng.int(-9, 9),
        }
    }

    fn values(self, len: usize) -> Vec<i32> {
        (0..len)
            .map(|i| self.base.wrapping_add(self.step.wrapping_mul(i as i32)))
            .collect()
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:+}i", self.base, self.step)
    }
}

/// One command. Buffers and queues are indices into the plan's lists.
#[derive(Clone, Debug)]
enum Kind {
    /// Blocking `write` / `write_at`.
    Write {
        b: usize,
        at: usize,
        len: usize,
        data: Pattern,
    },
    /// `write_owned` / `write_owned_at`.
    WriteOwned {
        b: usize,
        at: usize,
        len: usize,
        data: Pattern,
    },
    Fill {
        b: usize,
        value: i32,
    },
    FillRange {
        b: usize,
        value: i32,
        range: Range<usize>,
    },
    Copy {
        src: usize,
        dst: usize,
    },
    CopyRange {
        src: usize,
        src_at: usize,
        dst: usize,
        dst_at: usize,
        len: usize,
    },
    /// `add_const(b, c)`: `b[i] += c`, on the elements `view` (a [`cl_lifetime::View`]
    /// unless all of them).
    AddConst {
        b: usize,
        c: i32,
        view: Range<usize>,
    },
    /// `axpy_int(x, y, a)`: `y[i] = a * x[i] + y[i]`; `x` may be `y`; both on the
    /// elements `view`.
    Axpy {
        x: usize,
        y: usize,
        a: i32,
        view: Range<usize>,
    },
    /// Blocking `read` / `read_at`, checked at once.
    Read {
        b: usize,
        range: Range<usize>,
    },
    /// `read_owned` / `read_owned_range`, waited for at once or at the end.
    ReadOwned {
        b: usize,
        range: Range<usize>,
        wait_now: bool,
    },
    /// Blocking read-only `map`, checked at once and unmapped.
    Map {
        b: usize,
        range: Range<usize>,
    },
}

impl Kind {
    fn buffers(&self) -> Vec<usize> {
        match *self {
            Kind::Write { b, .. }
            | Kind::WriteOwned { b, .. }
            | Kind::Fill { b, .. }
            | Kind::FillRange { b, .. }
            | Kind::AddConst { b, .. }
            | Kind::Read { b, .. }
            | Kind::ReadOwned { b, .. }
            | Kind::Map { b, .. } => vec![b],
            Kind::Copy { src, dst } | Kind::CopyRange { src, dst, .. } => vec![src, dst],
            Kind::Axpy { x, y, .. } => vec![x, y],
        }
    }

    /// Whether the host blocks until the command is done: such a command must not wait
    /// on a closed gate.
    fn blocks(&self) -> bool {
        matches!(
            self,
            Kind::Write { .. } | Kind::Read { .. } | Kind::Map { .. }
        )
    }

    /// The buffers whose contents the command may read (the *failed write* rule): a host read's or
    /// map's, a copy's source, and every buffer argument of a kernel, writable ones too.
    fn reads(&self) -> Vec<usize> {
        match *self {
            Kind::Write { .. }
            | Kind::WriteOwned { .. }
            | Kind::Fill { .. }
            | Kind::FillRange { .. } => vec![],
            Kind::Copy { src, .. } | Kind::CopyRange { src, .. } => vec![src],
            Kind::AddConst { b, .. }
            | Kind::Read { b, .. }
            | Kind::ReadOwned { b, .. }
            | Kind::Map { b, .. } => vec![b],
            Kind::Axpy { x, y, .. } => vec![x, y],
        }
    }

    /// The buffers the command writes: it becomes their last write.
    fn writes(&self) -> Vec<usize> {
        match *self {
            Kind::Write { b, .. }
            | Kind::WriteOwned { b, .. }
            | Kind::Fill { b, .. }
            | Kind::FillRange { b, .. }
            | Kind::AddConst { b, .. } => vec![b],
            Kind::Copy { dst, .. } | Kind::CopyRange { dst, .. } => vec![dst],
            Kind::Axpy { y, .. } => vec![y],
            Kind::Read { .. } | Kind::ReadOwned { .. } | Kind::Map { .. } => vec![],
        }
    }

    /// Whether the command writes all of the buffer it writes (of `len` elements) and
    /// reads none of it: it then replaces every earlier write (the failure rule).
    fn replaces(&self, len: usize) -> bool {
        match *self {
            Kind::Write { at, len: n, .. } | Kind::WriteOwned { at, len: n, .. } => {
                at == 0 && n == len
            }
            Kind::Fill { .. } => true,
            Kind::FillRange { ref range, .. } => *range == (0..len),
            Kind::Copy { src, dst } => src != dst,
            Kind::CopyRange {
                src,
                dst,
                dst_at,
                len: n,
                ..
            } => src != dst && dst_at == 0 && n == len,
            Kind::AddConst { .. }
            | Kind::Axpy { .. }
            | Kind::Read { .. }
            | Kind::ReadOwned { .. }
            | Kind::Map { .. } => false,
        }
    }

    /// The elements the command reads, per buffer, as the library tracks them: a kernel
    /// and a whole copy touch the whole buffer, a range command or a map its range, and a
    /// copy within one buffer its source range only (the record's *two ranges* rule).
    fn read_ranges(&self, len: usize) -> Vec<(usize, Range<usize>)> {
        match *self {
            Kind::CopyRange {
                src,
                src_at,
                len: n,
                ..
            } => vec![(src, src_at..src_at + n)],
            Kind::Read { b, ref range }
            | Kind::ReadOwned { b, ref range, .. }
            | Kind::Map { b, ref range } => vec![(b, range.clone())],
            Kind::AddConst { ref view, .. } | Kind::Axpy { ref view, .. } => self
                .reads()
                .into_iter()
                .map(|b| (b, view.clone()))
                .collect(),
            _ => self.reads().into_iter().map(|b| (b, 0..len)).collect(),
        }
    }

    /// The elements the command writes, per buffer, as the library tracks them (see
    /// [`Kind::read_ranges`]).
    fn write_ranges(&self, len: usize) -> Vec<(usize, Range<usize>)> {
        match *self {
            Kind::Write { b, at, len: n, .. } | Kind::WriteOwned { b, at, len: n, .. } => {
                vec![(b, at..at + n)]
            }
            Kind::FillRange { b, ref range, .. } => vec![(b, range.clone())],
            Kind::CopyRange {
                dst,
                dst_at,
                len: n,
                ..
            } => vec![(dst, dst_at..dst_at + n)],
            Kind::AddConst { ref view, .. } | Kind::Axpy { ref view, .. } => self
                .writes()
                .into_iter()
                .map(|b| (b, view.clone()))
                .collect(),
            _ => self.writes().into_iter().map(|b| (b, 0..len)).collect(),
        }
    }

    /// Whether the host reads the data back (a read or a map).
    fn is_host_read(&self) -> bool {
        matches!(
            self,
            Kind::Read { .. } | Kind::ReadOwned { .. } | Kind::Map { .. }
        )
    }

    /// The buffer and elements a host read or map returns.
    fn read_span(&self) -> Option<(usize, Range<usize>)> {
        match self {
            Kind::Read { b, range } | Kind::ReadOwned { b, range, .. } | Kind::Map { b, range } => {
                Some((*b, range.clone()))
            }
            _ => None,
        }
    }

    /// Applies the command to the sequential model (a read changes nothing).
    fn apply(&self, model: &mut [Vec<i32>]) {
        match *self {
            Kind::Write { b, at, len, data } | Kind::WriteOwned { b, at, len, data } => {
                model[b][at..at + len].copy_from_slice(&data.values(len));
            }
            Kind::Fill { b, value } => model[b].fill(value),
            Kind::FillRange {
                b,
                value,
                ref range,
            } => model[b][range.clone()].fill(value),
            Kind::Copy { src, dst } => model[dst] = model[src].clone(),
            Kind::CopyRange {
                src,
                src_at,
                dst,
                dst_at,
                len,
            } => {
                let moved = model[src][src_at..src_at + len].to_vec();
                model[dst][dst_at..dst_at + len].copy_from_slice(&moved);
            }
            Kind::AddConst { b, c, ref view } => {
                for v in &mut model[b][view.clone()] {
                    *v = v.wrapping_add(c);
                }
            }
            Kind::Axpy { x, y, a, ref view } => {
                let xs = model[x][view.clone()].to_vec();
                for (v, x) in model[y][view.clone()].iter_mut().zip(xs) {
                    *v = a.wrapping_mul(x).wrapping_add(*v);
                }
            }
            Kind::Read { .. } | Kind::ReadOwned { .. } | Kind::Map { .. } => {}
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Write { b, at, len, data } => {
                write!(f, "write b{b}[{at}..{}] = {data} (blocking)", at + len)
            }
            Kind::WriteOwned { b, at, len, data } => {
                write!(f, "write_owned b{b}[{at}..{}] = {data}", at + len)
            }
            Kind::Fill { b, value } => write!(f, "fill b{b} = {value}"),
            Kind::FillRange { b, value, range } => {
                write!(f, "fill_range b{b}[{range:?}] = {value}")
            }
            Kind::Copy { src, dst } => write!(f, "copy b{src} -> b{dst}"),
            Kind::CopyRange {
                src,
                src_at,
                dst,
                dst_at,
                len,
            } => write!(
                f,
                "copy_range b{src}[{src_at}..{}] -> b{dst}[{dst_at}..{}]",
                src_at + len,
                dst_at + len
            ),
            Kind::AddConst { b, c, view } => write!(f, "add_const b{b}[{view:?}] += {c}"),
            Kind::Axpy { x, y, a, view } => {
                write!(
                    f,
                    "axpy_int b{y}[{view:?}] = {a} * b{x}[{view:?}] + b{y}[{view:?}]"
                )
            }
            Kind::Read { b, range } => write!(f, "read b{b}[{range:?}] (blocking)"),
            Kind::ReadOwned { b, range, wait_now } => {
                let when = if *wait_now { "at once" } else { "at the end" };
                write!(f, "read_owned b{b}[{range:?}] (waited {when})")
            }
            Kind::Map { b, range } => write!(f, "map b{b}[{range:?}] (blocking)"),
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// Issue `kind` on queue `queue`, after gate `gate` when there is one.
    Enqueue {
        queue: usize,
        gate: Option<usize>,
        kind: Kind,
    },
    /// Open the gates whose bits are set.
    Open(u32),
    /// Fail the gates whose bits are set, with [`GATE_FAILURE`] (failure mode only).
    Fail(u32),
    /// Drop the gates whose bits are set while still closed, which fails them (failure
    /// mode only).
    Drop(u32),
}

/// The gates whose bits are set in `mask`, lowest first.
fn gates_in(mask: u32) -> impl Iterator<Item = usize> {
    (0..32).filter(move |g| mask & (1 << g) != 0)
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Enqueue { queue, gate, kind } => {
                write!(f, "q{queue} ")?;
                if let Some(g) = gate {
                    write!(f, "after gate {g}: ")?;
                }
                write!(f, "{kind}")
            }
            Step::Open(mask) => {
                let gates: Vec<usize> = gates_in(*mask).collect();
                write!(f, "open gates {gates:?}")
            }
            Step::Fail(mask) => {
                let gates: Vec<usize> = gates_in(*mask).collect();
                write!(f, "fail gates {gates:?} with {GATE_FAILURE}")
            }
            Step::Drop(mask) => {
                let gates: Vec<usize> = gates_in(*mask).collect();
                write!(f, "drop gates {gates:?} while closed (fails them)")
            }
        }
    }
}

/// Everything one schedule (or one thread of a round) does.
#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    len: usize,
    queues: Vec<QueueSpec>,
    /// Per buffer: its contents before the first step.
    initial: Vec<Pattern>,
    /// Per buffer: whether steps may write it (the threaded test's shared buffers may not).
    writable: Vec<bool>,
    steps: Vec<Step>,
    /// How many gates the steps use.
    gates: usize,
    /// Per buffer: the queue of its final read.
    final_reads: Vec<usize>,
    /// Per step: the gates a command may be waiting on when enqueued, as a bit mask (a
    /// conservative over-approximation; 0 for a gate step, or a command refused at
    /// enqueue).
    waits: Vec<u32>,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan of seed {}: {} elements per buffer, {} gates",
            self.seed, self.len, self.gates
        )?;
        for (q, spec) in self.queues.iter().enumerate() {
            writeln!(f, "  q{q}: {spec}")?;
        }
        for (b, pattern) in self.initial.iter().enumerate() {
            let shared = if self.writable[b] {
                ""
            } else {
                " (shared, read-only)"
            };
            writeln!(f, "  b{b} = {pattern}{shared}")?;
        }
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "  #{i:<3} {step}")?;
        }
        let finals: Vec<String> = self
            .final_reads
            .iter()
            .enumerate()
            .map(|(b, q)| format!("b{b} on q{q}"))
            .collect();
        write!(
            f,
            "  then: wait for the pending reads; final reads {}",
            finals.join(", ")
        )
    }
}

/// What a plan does with a gate when the time comes to set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Open,
    /// `UserEvent::fail(GATE_FAILURE)`.
    Fail,
    /// Dropped while closed, which fails it.
    Drop,
}

/// The gates of a plan being made.
struct GateBook {
    /// Per gate: what becomes of it.
    fates: Vec<Fate>,
    /// Per gate: the command before which it is set, at the latest.
    open_at: Vec<usize>,
    closed: u32,
    /// Gates failed or dropped so far.
    failed: u32,
    /// Which closed gates each buffer and queue may be waiting on, as bit masks: a
    /// conservative over-approximation of what the device will make them wait on.
    buffer_gates: Vec<u32>,
    queue_gates: Vec<u32>,
}

impl GateBook {
    /// Sets the closed gates of `mask`, each as its fate says. A gate opens only once no
    /// gate that will fail is closed: those are set first (the *failing order* of the
    /// module's documentation).
    fn set(&mut self, mut mask: u32, steps: &mut Vec<Step>) {
        if mask == 0 {
            return;
        }
        if gates_in(mask).any(|g| self.fates[g] == Fate::Open) {
            mask |= gates_in(self.closed)
                .filter(|&g| self.fates[g] != Fate::Open)
                .fold(0u32, |m, g| m | (1 << g));
        }
        self.closed &= !mask;
        for m in self
            .buffer_gates
            .iter_mut()
            .chain(self.queue_gates.iter_mut())
        {
            *m &= !mask;
        }
        let fates = &self.fates;
        let with = |fate: Fate| {
            gates_in(mask)
                .filter(|&g| fates[g] == fate)
                .fold(0u32, |m, g| m | (1 << g))
        };
        let (open, fail, drop) = (with(Fate::Open), with(Fate::Fail), with(Fate::Drop));
        self.failed |= fail | drop;
        for (m, step) in [
            (open, Step::Open(open)),
            (fail, Step::Fail(fail)),
            (drop, Step::Drop(drop)),
        ] {
            if m != 0 {
                steps.push(step);
            }
        }
    }
}

/// Picks `count` commands over `writable.len()` buffers and `queues`, and decides where
/// gates go. `initial` is the buffers' contents before the first command.
///
/// With `failures`, some gates are failed or dropped instead of opened (never one a
/// blocking command may wait on: those are set before it, as opened ones are), and some
/// commands are given a gate that has already failed, which must make the library refuse
/// them. Without, the plan is what it always was for a seed.
#[allow(clippy::too_many_arguments)]
fn plan_steps(
    rng: &mut Rng,
    seed: u64,
    len: usize,
    unit: usize,
    queues: Vec<QueueSpec>,
    initial: Vec<Pattern>,
    writable: Vec<bool>,
    count: usize,
    failures: bool,
) -> Plan {
    let buffers = initial.len();
    let targets: Vec<usize> = (0..buffers).filter(|&b| writable[b]).collect();
    let mut book = GateBook {
        fates: Vec::new(),
        open_at: Vec::new(),
        closed: 0,
        failed: 0,
        buffer_gates: vec![0; buffers],
        queue_gates: vec![0; queues.len()],
    };
    let mut steps = Vec::new();
    let mut waits = Vec::new();

    for i in 0..count {
        let due = gates_in(book.closed)
            .filter(|&g| book.open_at[g] <= i)
            .fold(0u32, |m, g| m | (1 << g));
        book.set(due, &mut steps);

        let mut kind = random_kind(rng, len, unit, buffers, &targets);
        let queue = rng.below(queues.len());
        // A gate that has failed already: the library must refuse the command.
        let dead = if failures && book.failed != 0 && rng.chance(10) {
            let choices: Vec<usize> = gates_in(book.failed).collect();
            Some(choices[rng.below(choices.len())])
        } else {
            None
        };
        let touched = kind.buffers();
        let mut waits_on = touched
            .iter()
            .fold(book.queue_gates[queue], |m, &b| m | book.buffer_gates[b]);
        let mut gate = None;
        if kind.blocks() {
            // The host would wait for a closed gate that only it can set.
            book.set(waits_on, &mut steps);
            waits_on = 0;
        } else if dead.is_none() && rng.chance(if failures { 25 } else { 15 }) {
            if book.closed != 0 && rng.chance(40) {
                let choices: Vec<usize> = gates_in(book.closed).collect();
                gate = Some(choices[rng.below(choices.len())]);
            } else if book.open_at.len() < MAX_GATES {
                let g = book.open_at.len();
                book.open_at.push(i + rng.between(1, 8));
                let fate = match failures && rng.chance(45) {
                    false => Fate::Open,
                    true if rng.chance(50) => Fate::Fail,
                    true => Fate::Drop,
                };
                book.fates.push(fate);
                book.closed |= 1 << g;
                gate = Some(g);
            }
        }
        if let Some(g) = gate {
            waits_on |= 1 << g;
        }
        if dead.is_some() {
            // Refused at enqueue, so it waits on nothing.
            gate = dead;
            waits_on = 0;
        }
        if let Kind::ReadOwned { wait_now, .. } = &mut kind {
            *wait_now = waits_on == 0 && rng.chance(50);
        }
        if waits_on != 0 {
            book.queue_gates[queue] |= waits_on;
            for &b in &touched {
                book.buffer_gates[b] |= waits_on;
            }
        }
        waits.resize(steps.len(), 0);
        waits.push(waits_on);
        steps.push(Step::Enqueue { queue, gate, kind });
    }
    book.set(book.closed, &mut steps);
    waits.resize(steps.len(), 0);
    let final_reads = (0..buffers).map(|_| rng.below(queues.len())).collect();
    Plan {
        seed,
        len,
        queues,
        initial,
        writable,
        steps,
        gates: book.open_at.len(),
        final_reads,
        waits,
    }
}

/// The elements a kernel runs on: all of them, or one of a buffer's two views, which do
/// not overlap (the library keeps no two overlapping sub-buffers of one buffer, and would
/// refuse a view that overlaps one whose commands wait on a closed gate): a prefix, and,
/// in buffers longer than `unit` elements (the devices' `CL_DEVICE_MEM_BASE_ADDR_ALIGN`,
/// where a sub-buffer may start), the rest from `unit` on.
fn kernel_view(rng: &mut Rng, len: usize, unit: usize) -> Range<usize> {
    let prefix = 0..(len / 2).min(unit);
    match rng.below(10) {
        0..5 => 0..len,
        5..8 => prefix,
        _ if len > unit => unit..len,
        _ => prefix,
    }
}

/// The length of a plan's buffers: mostly short, and at times a few alignment units
/// (`unit` elements) long, so that views at aligned origins other than 0 occur.
fn buffer_len(rng: &mut Rng, unit: usize) -> usize {
    if unit <= 64 && rng.chance(30) {
        unit * rng.between(2, 4)
    } else {
        rng.between(16, 64)
    }
}

/// One random command; `wait_now` of a read is decided by the caller.
fn random_kind(rng: &mut Rng, len: usize, unit: usize, buffers: usize, targets: &[usize]) -> Kind {
    let target = targets[rng.below(targets.len())];
    let any = rng.below(buffers);
    let some_range = |rng: &mut Rng| {
        if rng.chance(40) {
            0..len
        } else {
            rng.range(len)
        }
    };
    match rng.below(100) {
        0..8 => {
            let r = some_range(rng);
            Kind::Write {
                b: target,
                at: r.start,
                len: r.len(),
                data: Pattern::random(rng),
            }
        }
        8..18 => {
            let r = some_range(rng);
            Kind::WriteOwned {
                b: target,
                at: r.start,
                len: r.len(),
                data: Pattern::random(rng),
            }
        }
        18..24 => Kind::Fill {
            b: target,
            value: rng.int(-1000, 1000),
        },
        24..32 => Kind::FillRange {
            b: target,
            value: rng.int(-1000, 1000),
            range: rng.range(len),
        },
        32..40 => {
            let others: Vec<usize> = (0..buffers).filter(|&b| b != target).collect();
            Kind::Copy {
                src: others[rng.below(others.len())],
                dst: target,
            }
        }
        40..52 => {
            if any == target {
                // Two ranges of one buffer that do not overlap: `lo` before `hi`.
                let n = rng.between(1, len / 2);
                let lo = rng.below(len - 2 * n + 1);
                let hi = rng.between(lo + n, len - n);
                let (src_at, dst_at) = if rng.chance(50) { (lo, hi) } else { (hi, lo) };
                Kind::CopyRange {
                    src: any,
                    src_at,
                    dst: target,
                    dst_at,
                    len: n,
                }
            } else {
                let n = rng.between(1, len);
                Kind::CopyRange {
                    src: any,
                    src_at: rng.below(len - n + 1),
                    dst: target,
                    dst_at: rng.below(len - n + 1),
                    len: n,
                }
            }
        }
        52..64 => Kind::AddConst {
            b: target,
            c: rng.int(-50, 50),
            view: kernel_view(rng, len, unit),
        },
        64..76 => Kind::Axpy {
            x: any,
            y: target,
            a: rng.int(-3, 3),
            view: kernel_view(rng, len, unit),
        },
        76..84 => Kind::Read {
            b: any,
            range: some_range(rng),
        },
        84..95 => Kind::ReadOwned {
            b: any,
            range: some_range(rng),
            wait_now: false,
        },
        // Only buffers the plan may write, which in the threaded test are the thread's own:
        // PoCL 3.1 crashes (or maps wrong contents) when several host threads map one
        // buffer at once, even through raw OpenCL calls.
        _ => Kind::Map {
            b: target,
            range: some_range(rng),
        },
    }
}

/// The plan of one schedule of the first test, or with `failures` of the failure-mode
/// test.
fn plan_schedule(seed: u64, failures: bool, unit: usize) -> Plan {
    let mut rng = Rng(seed);
    let devices = devices_of(seed);
    let count = rng.between(2, MAX_QUEUES);
    let mut queues: Vec<QueueSpec> = Vec::with_capacity(count);
    for k in 0..count {
        let in_order = match k {
            // At least one queue of each kind, and on two devices one on each.
            1 => !queues[0].in_order,
            _ => rng.chance(50),
        };
        let device = if k < devices { k } else { rng.below(devices) };
        queues.push(QueueSpec { device, in_order });
    }
    // Shuffle, so that q0 is not always on the first device.
    for k in (1..queues.len()).rev() {
        queues.swap(k, rng.below(k + 1));
    }
    let len = buffer_len(&mut rng, unit);
    let buffers = rng.between(3, 5);
    let initial = (0..buffers).map(|_| Pattern::random(&mut rng)).collect();
    let steps = rng.between(10, 40);
    plan_steps(
        &mut rng,
        seed,
        len,
        unit,
        queues,
        initial,
        vec![true; buffers],
        steps,
        failures,
    )
}

// ---------------------------------------------------------------------------------------
// Running a plan against the device and the model
// ---------------------------------------------------------------------------------------

/// A context with its kernels and a pool of queues, made once per test.
struct Env {
    label: &'static str,
    ctx: Context,
    add_const: Kernel,
    axpy: Kernel,
    /// Elements of `i32` per `CL_DEVICE_MEM_BASE_ADDR_ALIGN` (the largest of the
    /// devices'): where a view passed to a kernel may start.
    unit: usize,
    /// `pool[device][in_order as usize]`: `MAX_QUEUES` queues each.
    pool: Vec<[Vec<Queue>; 2]>,
}

impl Env {
    fn new(ctx: Context, label: &'static str) -> Env {
        let program = ctx.program("schedule.cl", "").expect("schedule.cl builds");
        let add_const = program.kernel("add_const").expect("add_const kernel");
        let axpy = program.kernel("axpy_int").expect("axpy_int kernel");
        let unit = common::sub_buffer_unit(&ctx);
        let pool = ctx
            .devices()
            .iter()
            .map(|device| {
                let make = |out_of_order: bool| -> Vec<Queue> {
                    (0..MAX_QUEUES)
                        .map(|_| ctx.queue_on(device, out_of_order).expect("queue"))
                        .collect()
                };
                [make(true), make(false)]
            })
            .collect();
        Env {
            label,
            ctx,
            add_const,
            axpy,
            unit,
            pool,
        }
    }

    /// Fresh buffers holding `patterns`, each of `len` elements.
    fn buffers(&self, patterns: &[Pattern], len: usize) -> Result<Vec<ClBuffer<i32>>, String> {
        patterns
            .iter()
            .map(|p| self.ctx.buffer_from(&p.values(len)))
            .collect::<cl_lifetime::Result<_>>()
            .map_err(|e| format!("creating the buffers: {e}"))
    }

    /// Distinct pool queues for `specs`.
    fn queues(&self, specs: &[QueueSpec]) -> Vec<Queue> {
        let mut used = vec![[0usize; 2]; self.pool.len()];
        specs
            .iter()
            .map(|s| {
                let k = usize::from(s.in_order);
                let n = &mut used[s.device][k];
                *n += 1;
                self.pool[s.device][k][*n - 1].clone()
            })
            .collect()
    }

    fn print_stats(&self, what: &str) {
        let stats: HazardStats = self.ctx.hazard_stats();
        println!(
            "hazard stats ({what}{}): {} enqueues, {:.3} wait entries per enqueue, {:.3} without \
             same-queue elision",
            self.label,
            stats.enqueues,
            stats.per_enqueue(),
            stats.per_enqueue_without_elision(),
        );
    }
}

/// The gates of one plan. Dropping them opens any still closed, so that nothing the
/// plan enqueued waits forever, whatever went wrong.
struct Gates(Vec<UserEvent>);

impl Gates {
    fn open(&self, mask: u32) -> cl_lifetime::Result<()> {
        for (g, gate) in self.0.iter().enumerate() {
            if mask & (1 << g) != 0 {
                gate.complete()?;
            }
        }
        Ok(())
    }
}

impl Drop for Gates {
    fn drop(&mut self) {
        for gate in &self.0 {
            // An error only says it was open already.
            let _ = gate.complete();
        }
    }
}

/// Calls its function when dropped.
struct OnDrop<'a>(&'a dyn Fn());

impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn compare(failures: &mut Vec<String>, what: String, expected: &[i32], got: &[i32]) {
    if expected == got {
        return;
    }
    let wrong: Vec<usize> = (0..expected.len().min(got.len()))
        .filter(|&i| expected[i] != got[i])
        .collect();
    failures.push(format!(
        "{what}: {} of {} elements differ (first at {:?})\n    expected {expected:?}\n    got      {got:?}",
        wrong.len(),
        expected.len(),
        wrong.first(),
    ));
}

/// Runs `plan` on `queues` over `buffers` (whose device contents must be `plan.initial`),
/// checking every read against the sequential model. `before_blocking` is called before
/// the host first blocks on the device (and at the end, whatever happens).
/// Launches a kernel command (`add_const` or `axpy_int`) on its view of its buffers.
fn launch(
    env: &Env,
    after: &cl_lifetime::After<'_>,
    buffers: &[&ClBuffer<i32>],
    kind: &Kind,
) -> Result<cl_lifetime::Event, cl_lifetime::Error> {
    match kind {
        Kind::AddConst { b, c, view } => {
            let args = [
                Arg::read_write(buffers[*b].view(view.clone())?),
                Arg::scalar(*c),
                Arg::scalar(view.len() as u32),
            ];
            // SAFETY: add_const touches the view's element i only where i < its length.
            unsafe { after.launch(&env.add_const, &[items(*c)], &args) }
        }
        Kind::Axpy { x, y, a, view } => {
            let args = [
                Arg::read(buffers[*x].view(view.clone())?),
                Arg::read_write(buffers[*y].view(view.clone())?),
                Arg::scalar(*a),
                Arg::scalar(view.len() as u32),
            ];
            // SAFETY: axpy_int touches both views' element i only where i < their (equal) length,
            // and writes only y's.
            unsafe { after.launch(&env.axpy, &[items(*a)], &args) }
        }
        _ => unreachable!("not a launch: {kind}"),
    }
}

fn execute(
    env: &Env,
    plan: &Plan,
    queues: &[Queue],
    buffers: &[&ClBuffer<i32>],
    before_blocking: &dyn Fn(),
) -> Result<(), String> {
    let len = plan.len;
    let mut model: Vec<Vec<i32>> = plan.initial.iter().map(|p| p.values(len)).collect();
    let mut failures: Vec<String> = Vec::new();
    // Declared before the gates and the guard: dropped after them, so never while a gate
    // they may wait on is closed.
    let mut pending: Vec<(usize, Vec<i32>, PendingRead<i32>)> = Vec::new();
    let gates = Gates(
        (0..plan.gates)
            .map(|_| env.ctx.user_event())
            .collect::<cl_lifetime::Result<_>>()
            .map_err(|e| format!("user event: {e}"))?,
    );
    let _guard = OnDrop(before_blocking);

    for (i, step) in plan.steps.iter().enumerate() {
        let failed = |e: cl_lifetime::Error| format!("step #{i} ({step}) failed: {e}");
        let (queue, gate, kind) = match step {
            Step::Open(mask) => {
                gates.open(*mask).map_err(failed)?;
                continue;
            }
            Step::Fail(_) | Step::Drop(_) => {
                return Err(format!(
                    "step #{i} ({step}): a failure in a plan without them"
                ));
            }
            Step::Enqueue { queue, gate, kind } => (&queues[*queue], *gate, kind),
        };
        let deps: Vec<&Event> = gate.iter().map(|&g| gates.0[g].event()).collect();
        let after = queue.after(&deps);
        match kind {
            Kind::Write {
                b,
                at,
                len: n,
                data,
            } => {
                before_blocking();
                let values = data.values(*n);
                if *at == 0 && *n == len {
                    queue.write(buffers[*b], &values).map_err(failed)?;
                } else {
                    queue.write_at(buffers[*b], *at, &values).map_err(failed)?;
                }
            }
            Kind::WriteOwned {
                b,
                at,
                len: n,
                data,
            } => {
                let values = data.values(*n);
                if *at == 0 && *n == len {
                    after.write_owned(buffers[*b], values).map_err(failed)?;
                } else {
                    after
                        .write_owned_at(buffers[*b], *at, values)
                        .map_err(failed)?;
                }
            }
            Kind::Fill { b, value } => {
                after.fill(buffers[*b], *value).map_err(failed)?;
            }
            Kind::FillRange { b, value, range } => {
                // Through a view: where a kernel's view starts there and holds the range,
                // the fill goes through its sub-buffer (the tracker's *sub-buffers* rule).
                buffers[*b]
                    .view(range.clone())
                    .and_then(|view| after.fill(view, *value))
                    .map_err(failed)?;
            }
            Kind::Copy { src, dst } => {
                after.copy(buffers[*src], buffers[*dst]).map_err(failed)?;
            }
            Kind::CopyRange {
                src,
                src_at,
                dst,
                dst_at,
                len: n,
            } => {
                after
                    .copy_range(buffers[*src], *src_at, buffers[*dst], *dst_at, *n)
                    .map_err(failed)?;
            }
            Kind::AddConst { .. } | Kind::Axpy { .. } => {
                launch(env, &after, buffers, kind).map_err(failed)?;
            }
            Kind::Read { b, range } => {
                before_blocking();
                let mut out = vec![0i32; range.len()];
                if range.len() == len {
                    queue.read(buffers[*b], &mut out).map_err(failed)?;
                } else {
                    queue
                        .read_at(buffers[*b], range.start, &mut out)
                        .map_err(failed)?;
                }
                compare(
                    &mut failures,
                    format!("step #{i} ({step})"),
                    &model[*b][range.clone()],
                    &out,
                );
            }
            Kind::ReadOwned { b, range, wait_now } => {
                let expected = model[*b][range.clone()].to_vec();
                let read = if range.len() == len {
                    after.read_owned(buffers[*b])
                } else {
                    // Through a view, as a fill of part of a buffer is.
                    buffers[*b]
                        .view(range.clone())
                        .and_then(|view| after.read_owned(view))
                }
                .map_err(failed)?;
                if *wait_now {
                    before_blocking();
                    let got = read.wait().map_err(failed)?;
                    compare(
                        &mut failures,
                        format!("step #{i} ({step})"),
                        &expected,
                        &got,
                    );
                } else {
                    pending.push((i, expected, read));
                }
            }
            Kind::Map { b, range } => {
                before_blocking();
                let mapped = queue.map(buffers[*b], range.clone()).map_err(failed)?;
                compare(
                    &mut failures,
                    format!("step #{i} ({step})"),
                    &model[*b][range.clone()],
                    &mapped,
                );
            }
        }
        kind.apply(&mut model);
    }

    // The plan has opened every gate by now.
    before_blocking();
    for (i, expected, read) in pending.drain(..) {
        let what = format!("step #{i} ({})", plan.steps[i]);
        let got = read
            .wait()
            .map_err(|e| format!("{what}: waiting failed: {e}"))?;
        compare(&mut failures, what, &expected, &got);
    }
    let finals: Vec<PendingRead<i32>> = plan
        .final_reads
        .iter()
        .enumerate()
        .map(|(b, &q)| queues[q].read_owned(buffers[b]))
        .collect::<cl_lifetime::Result<_>>()
        .map_err(|e| format!("final read: {e}"))?;
    for (b, read) in finals.into_iter().enumerate() {
        let what = format!("final read of b{b} on q{}", plan.final_reads[b]);
        let got = read
            .wait()
            .map_err(|e| format!("{what}: waiting failed: {e}"))?;
        compare(&mut failures, what, &model[b], &got);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic".to_string())
}

// ---------------------------------------------------------------------------------------
// Test 1: one host thread, several queues
// ---------------------------------------------------------------------------------------

fn run_schedule(env: &Env, seed: u64) -> Result<(), String> {
    let plan = plan_schedule(seed, false, env.unit);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let queues = env.queues(&plan.queues);
        let buffers = env.buffers(&plan.initial, plan.len)?;
        let refs: Vec<&ClBuffer<i32>> = buffers.iter().collect();
        execute(env, &plan, &queues, &refs, &|| {})
    }));
    let failure = match outcome {
        Ok(result) => result,
        Err(payload) => Err(format!("panicked: {}", panic_message(&*payload))),
    };
    failure.map_err(|e| format!("{e}\n{plan}"))
}

/// What a randomized test runs: the contexts (one device, and two when the platform has
/// two) and the seeds, with the seed being replayed, if any.
struct Runs {
    replay: Option<u64>,
    envs: [Option<Env>; 2],
    seeds: Vec<u64>,
}

/// The runs of a randomized test on `one` (and a two-device context when there is one):
/// the seed `CL_LIFETIME_SCHEDULE_SEED` names, or `count_var` seeds (default `default`)
/// derived from `base`, alternating between the contexts. `None`, after saying so, when
/// the replayed seed needs two devices and there are not two.
fn runs(one: Context, count_var: &str, default: usize, base: u64) -> Option<Runs> {
    let replay = env_number(SEED_VAR);
    let two = match replay {
        Some(seed) if devices_of(seed) == 1 => None,
        _ => common::two_devices_for(Some("its runs on two devices")),
    };
    if replay.is_some_and(|s| devices_of(s) == 2) && two.is_none() {
        common::not_run(format_args!("seed {replay:?} needs two devices"));
        return None;
    }
    let envs = [
        Some(Env::new(one, "1 device")),
        two.map(|ctx| Env::new(ctx, "2 devices")),
    ];
    let seeds = match replay {
        Some(seed) => vec![seed],
        None => {
            let count = env_number(count_var).map_or(default, |n| n as usize);
            (0..count)
                .map(|i| {
                    let devices = if envs[1].is_some() { 1 + i % 2 } else { 1 };
                    nth_seed(base, i, devices)
                })
                .collect()
        }
    };
    Some(Runs {
        replay,
        envs,
        seeds,
    })
}

impl Runs {
    /// Runs `run` for every seed on its context, stopping after [`MAX_REPORTED`]
    /// failures; returns how many ran on each context and a report per failure, named
    /// `what`, with the command that replays it.
    fn run(
        &self,
        what: &str,
        mut run: impl FnMut(&Env, u64) -> Result<(), String>,
    ) -> ([usize; 2], Vec<String>) {
        let mut counts = [0usize; 2];
        let mut failures = Vec::new();
        for &seed in &self.seeds {
            let devices = devices_of(seed);
            let Some(env) = &self.envs[devices - 1] else {
                unreachable!("a seed for a context that is not there")
            };
            counts[devices - 1] += 1;
            if std::env::var_os(TRAIL_VAR).is_some() {
                eprintln!("{what} seed {seed} ({})", env.label);
            }
            if let Err(e) = run(env, seed) {
                failures.push(format!(
                    "{what} seed {seed} ({}) failed; replay with {SEED_VAR}={seed}:\n{e}",
                    env.label
                ));
                if failures.len() >= MAX_REPORTED {
                    break;
                }
            }
        }
        (counts, failures)
    }
}

#[test]
fn random_schedules_match_a_sequential_model() {
    let one = device!();
    if common::not_on(&one, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    let Some(runs) = runs(one, SCHEDULES_VAR, DEFAULT_SCHEDULES, 0x5C4E_D01E_0000_0001) else {
        return;
    };

    let start = Instant::now();
    let (counts, failures) = runs.run("schedule", run_schedule);
    let failed = failures.len();
    println!(
        "{} schedules ({} on 1 device, {} on 2 devices) in {:.1?}",
        counts[0] + counts[1],
        counts[0],
        counts[1],
        start.elapsed()
    );
    for (env, count) in runs.envs.iter().zip(counts) {
        if let (Some(env), 1..) = (env, count) {
            env.print_stats("");
        }
    }
    assert!(
        failures.is_empty(),
        "{failed} schedule(s) failed (stopped after {MAX_REPORTED}); replay one with \
         {SEED_VAR}=<seed> cargo test --test integration \
         schedules::random_schedules_match_a_sequential_model -- --nocapture\n\n{}",
        failures.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------
// Test 2: host threads with their own queues over shared read-only buffers
// ---------------------------------------------------------------------------------------

/// One round: buffers every thread reads, and one plan per thread.
struct Round {
    len: usize,
    shared: Vec<Pattern>,
    threads: Vec<Plan>,
}

fn plan_round(seed: u64, unit: usize) -> Round {
    let mut rng = Rng(seed);
    let devices = devices_of(seed);
    let threads = rng.between(3, 4);
    let len = buffer_len(&mut rng, unit);
    let shared: Vec<Pattern> = (0..rng.between(2, 3))
        .map(|_| Pattern::random(&mut rng))
        .collect();
    let first_in_order = rng.chance(50);
    let plans = (0..threads)
        .map(|t| {
            let in_order = match t {
                0 => first_in_order,
                1 => !first_in_order,
                _ => rng.chance(50),
            };
            let spec = QueueSpec {
                device: t % devices,
                in_order,
            };
            let thread_seed = rng.next();
            let mut thread_rng = Rng(thread_seed);
            let own = thread_rng.between(2, 3);
            let mut initial = shared.clone();
            initial.extend((0..own).map(|_| Pattern::random(&mut thread_rng)));
            let mut writable = vec![false; shared.len()];
            writable.extend(vec![true; own]);
            let steps = thread_rng.between(10, 40);
            plan_steps(
                &mut thread_rng,
                thread_seed,
                len,
                unit,
                vec![spec],
                initial,
                writable,
                steps,
                false,
            )
        })
        .collect();
    Round {
        len,
        shared,
        threads: plans,
    }
}

/// Tells the main thread, once, that this thread is about to block on the device (or is
/// done): until every thread has, the shared buffers' writes stay gated.
struct Signal(Cell<Option<mpsc::Sender<()>>>);

impl Signal {
    fn fire(&self) {
        if let Some(tx) = self.0.take() {
            // The receiver only goes away after every thread has ended.
            let _ = tx.send(());
        }
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        self.fire();
    }
}

fn run_thread(
    env: &Env,
    plan: &Plan,
    queue: &Queue,
    shared: &[ClBuffer<i32>],
    signal: &Signal,
) -> Result<(), String> {
    let own = env.buffers(&plan.initial[shared.len()..], plan.len)?;
    let buffers: Vec<&ClBuffer<i32>> = shared.iter().chain(&own).collect();
    execute(env, plan, std::slice::from_ref(queue), &buffers, &|| {
        signal.fire()
    })
}

fn run_round(env: &Env, seed: u64) -> Result<(), String> {
    let round = plan_round(seed, env.unit);
    let len = round.len;
    let ctx = &env.ctx;
    let setup = env
        .queues(&[QueueSpec {
            device: 0,
            in_order: true,
        }])
        .remove(0);
    let shared: Vec<ClBuffer<i32>> = (0..round.shared.len())
        .map(|_| ctx.buffer::<i32>(len))
        .collect::<cl_lifetime::Result<_>>()
        .map_err(|e| format!("creating the shared buffers: {e}"))?;
    // Written once, before the threads start, but held back by a gate until every thread
    // has enqueued all it can without blocking.
    let gate = Gates(vec![
        ctx.user_event().map_err(|e| format!("user event: {e}"))?,
    ]);
    for (buffer, pattern) in shared.iter().zip(&round.shared) {
        setup
            .after(&[gate.0[0].event()])
            .write_owned(buffer, pattern.values(len))
            .map_err(|e| format!("writing the shared buffers: {e}"))?;
    }
    let queues: Vec<Queue> = round
        .threads
        .iter()
        .map(|p| {
            let spec = p.queues[0];
            ctx.queue_on(&ctx.devices()[spec.device], !spec.in_order)
        })
        .collect::<cl_lifetime::Result<_>>()
        .map_err(|e| format!("creating the queues: {e}"))?;

    let (tx, rx) = mpsc::channel();
    let (opened, results) = std::thread::scope(|s| {
        let workers: Vec<_> = round
            .threads
            .iter()
            .zip(&queues)
            .map(|(plan, queue)| {
                let signal = Signal(Cell::new(Some(tx.clone())));
                let shared = &shared;
                s.spawn(move || {
                    let signal = signal;
                    run_thread(env, plan, queue, shared, &signal)
                })
            })
            .collect();
        drop(tx);
        // Every sender is dropped once its thread has fired its signal (or ended).
        while rx.recv().is_ok() {}
        let opened = gate.open(1);
        let results: Vec<Result<(), String>> = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))))
            })
            .collect();
        (opened, results)
    });
    opened.map_err(|e| format!("opening the gate: {e}"))?;

    let mut failures: Vec<String> = Vec::new();
    for (t, result) in results.into_iter().enumerate() {
        if let Err(e) = result {
            let plan = &round.threads[t];
            failures.push(format!(
                "thread {t} (queue {}): {e}\n{plan}",
                plan.queues[0]
            ));
        }
    }
    // The shared buffers were only read.
    let reads: Vec<PendingRead<i32>> = shared
        .iter()
        .map(|b| setup.read_owned(b))
        .collect::<cl_lifetime::Result<_>>()
        .map_err(|e| format!("reading the shared buffers: {e}"))?;
    let events: Vec<&Event> = reads.iter().map(PendingRead::event).collect();
    wait_all(&events).map_err(|e| format!("reading the shared buffers: {e}"))?;
    for (s, read) in reads.into_iter().enumerate() {
        let got = read
            .wait()
            .map_err(|e| format!("reading the shared buffers: {e}"))?;
        compare(
            &mut failures,
            format!("shared buffer b{s} at the end"),
            &round.shared[s].values(len),
            &got,
        );
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n\n"))
    }
}

#[test]
fn threads_with_their_own_queues_match_a_sequential_model() {
    let one = device!();
    if common::not_on(&one, "oclgrind", common::oclgrind::THREADS) {
        return;
    }
    let Some(runs) = runs(one, ROUNDS_VAR, DEFAULT_ROUNDS, 0x7C4E_AD50_0000_0002) else {
        return;
    };

    let start = Instant::now();
    let (counts, failures) = runs.run("round", |env, seed| {
        catch_unwind(AssertUnwindSafe(|| run_round(env, seed)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))))
    });
    let failed = failures.len();
    println!(
        "{} rounds ({} on 1 device, {} on 2 devices) in {:.1?}",
        counts[0] + counts[1],
        counts[0],
        counts[1],
        start.elapsed()
    );
    for (env, count) in runs.envs.iter().zip(counts) {
        if let (Some(env), 1..) = (env, count) {
            env.print_stats("threads, ");
        }
    }
    assert!(
        failures.is_empty(),
        "{failed} round(s) failed (stopped after {MAX_REPORTED}); replay one with \
         {SEED_VAR}=<seed> cargo test --test integration \
         schedules::threads_with_their_own_queues_match_a_sequential_model -- --nocapture\n\n{}",
        failures.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------
// Test 3: gates that fail, checked against the model replayed with observed outcomes
// ---------------------------------------------------------------------------------------

/// How one command of a failure-mode schedule went, as the host saw it.
enum Issue {
    /// Refused at enqueue with this error: nothing was enqueued.
    Refused(cl_lifetime::Error),
    /// Enqueued; its event says how it ended.
    Enqueued(Event),
    /// A blocking write that was enqueued: what it returned.
    Wrote(cl_lifetime::Result<()>),
    /// A host read or map: what it returned, and its event when it has one to show (a
    /// `read_owned`'s; a blocking read or map may also have been refused at enqueue).
    /// `unmapped`: a map's unmap, which runs on after the map returned.
    Read {
        event: Option<Event>,
        got: cl_lifetime::Result<Vec<i32>>,
        unmapped: Option<Event>,
    },
}

impl Issue {
    fn event(&self) -> Option<&Event> {
        match self {
            Issue::Enqueued(event) => Some(event),
            Issue::Read { event, .. } => event.as_ref(),
            Issue::Refused(_) | Issue::Wrote(_) => None,
        }
    }
}

/// What came of issuing a command: its issue, or a `read_owned` to wait for at the end.
enum Issued {
    Now(Issue),
    Later(PendingRead<i32>),
}

/// Issues `kind` through `after`. Every command goes through `after`, so that a blocking
/// one may be given a gate that has already failed (and must then be refused).
fn issue(
    env: &Env,
    after: After<'_>,
    buffers: &[&ClBuffer<i32>],
    kind: &Kind,
    len: usize,
) -> Issued {
    let enqueued = |result: cl_lifetime::Result<Event>| {
        Issued::Now(match result {
            Ok(event) => Issue::Enqueued(event),
            Err(e) => Issue::Refused(e),
        })
    };
    match kind {
        Kind::Write {
            b,
            at,
            len: n,
            data,
        } => {
            let values = data.values(*n);
            let wrote = if *at == 0 && *n == len {
                after.write(buffers[*b], &values)
            } else {
                after.write_at(buffers[*b], *at, &values)
            };
            // The write's own failure shows as `CommandFailed`; `DependencyFailed` is
            // the refusal at enqueue.
            Issued::Now(match wrote {
                Err(e @ cl_lifetime::Error::DependencyFailed { .. }) => Issue::Refused(e),
                wrote => Issue::Wrote(wrote),
            })
        }
        Kind::WriteOwned {
            b,
            at,
            len: n,
            data,
        } => {
            let values = data.values(*n);
            enqueued(if *at == 0 && *n == len {
                after.write_owned(buffers[*b], values)
            } else {
                after.write_owned_at(buffers[*b], *at, values)
            })
        }
        Kind::Fill { b, value } => enqueued(after.fill(buffers[*b], *value)),
        Kind::FillRange { b, value, range } => enqueued(
            buffers[*b]
                .view(range.clone())
                .and_then(|view| after.fill(view, *value)),
        ),
        Kind::Copy { src, dst } => enqueued(after.copy(buffers[*src], buffers[*dst])),
        Kind::CopyRange {
            src,
            src_at,
            dst,
            dst_at,
            len: n,
        } => enqueued(after.copy_range(buffers[*src], *src_at, buffers[*dst], *dst_at, *n)),
        Kind::AddConst { .. } | Kind::Axpy { .. } => enqueued(launch(env, &after, buffers, kind)),
        Kind::Read { b, range } => {
            let mut out = vec![0i32; range.len()];
            let read = if range.len() == len {
                after.read(buffers[*b], &mut out)
            } else {
                after.read_at(buffers[*b], range.start, &mut out)
            };
            Issued::Now(Issue::Read {
                event: None,
                got: read.map(|()| out),
                unmapped: None,
            })
        }
        Kind::ReadOwned { b, range, wait_now } => {
            let read = if range.len() == len {
                after.read_owned(buffers[*b])
            } else {
                buffers[*b]
                    .view(range.clone())
                    .and_then(|view| after.read_owned(view))
            };
            match read {
                Err(e) => Issued::Now(Issue::Refused(e)),
                Ok(read) if *wait_now => Issued::Now(Issue::Read {
                    event: Some(read.event().clone()),
                    got: read.wait(),
                    unmapped: None,
                }),
                Ok(read) => Issued::Later(read),
            }
        }
        Kind::Map { b, range } => {
            let (got, unmapped) = match after.map(buffers[*b], range.clone()) {
                Ok(mapped) => {
                    let values = mapped.to_vec();
                    (
                        Ok(values),
                        Some(mapped.unmap().expect("the unmap is enqueued")),
                    )
                }
                Err(e) => (Err(e), None),
            };
            Issued::Now(Issue::Read {
                event: None,
                got,
                unmapped,
            })
        }
    }
}

/// The gates of a failure-mode plan, each opened, failed or dropped as the plan says.
/// Their events stay, for commands given a gate that has already failed (a dropped one
/// included). Dropping this opens any still closed, so that nothing waits forever,
/// whatever went wrong.
struct FailingGates {
    gates: Vec<Option<UserEvent>>,
    events: Vec<Event>,
}

impl FailingGates {
    fn new(ctx: &Context, count: usize) -> cl_lifetime::Result<FailingGates> {
        let gates: Vec<UserEvent> = (0..count)
            .map(|_| ctx.user_event())
            .collect::<cl_lifetime::Result<_>>()?;
        let events = gates.iter().map(|g| g.event().clone()).collect();
        Ok(FailingGates {
            gates: gates.into_iter().map(Some).collect(),
            events,
        })
    }

    /// Carries out an `Open`, `Fail` or `Drop` step.
    fn set(&mut self, step: &Step) -> Result<(), String> {
        let (mask, fate) = match *step {
            Step::Open(mask) => (mask, Fate::Open),
            Step::Fail(mask) => (mask, Fate::Fail),
            Step::Drop(mask) => (mask, Fate::Drop),
            Step::Enqueue { .. } => unreachable!("not a gate step"),
        };
        for g in gates_in(mask) {
            let gate = self.gates[g]
                .take()
                .ok_or_else(|| format!("gate {g} was set before"))?;
            match fate {
                Fate::Open => gate.complete(),
                Fate::Fail => gate.fail(GATE_FAILURE),
                // Dropping it fails it.
                Fate::Drop => Ok(()),
            }
            .map_err(|e| format!("setting gate {g}: {e}"))?;
        }
        Ok(())
    }
}

impl Drop for FailingGates {
    fn drop(&mut self) {
        for gate in self.gates.iter().flatten() {
            // An error only says it was set already.
            let _ = gate.complete();
        }
    }
}

/// What the commands of failure-mode schedules came to.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    /// Commands (host reads included) that completed.
    completed: usize,
    /// Commands enqueued that failed (never run).
    failed: usize,
    /// Commands refused at enqueue (a `read_owned` included; a blocking read or map that
    /// returned an error counts among the read errors only, as it may have been either).
    refused: usize,
    /// Host reads and maps that returned an error, refused or failed.
    read_errors: usize,
}

/// Runs a failure-mode `plan` on `queues` over `buffers` (whose device contents must be
/// `plan.initial`), waits for everything, and checks what it observed against the model
/// replayed with the observed outcomes (see [`replay`]).
fn execute_with_failures(
    env: &Env,
    plan: &Plan,
    queues: &[Queue],
    buffers: &[&ClBuffer<i32>],
    tally: &mut Tally,
) -> Result<(), String> {
    let len = plan.len;
    let mut issues: Vec<Option<Issue>> = (0..plan.steps.len()).map(|_| None).collect();
    // Declared before the gates: dropped after them, so never while a gate they may wait
    // on is closed.
    let mut pending: Vec<(usize, PendingRead<i32>)> = Vec::new();
    let mut gates =
        FailingGates::new(&env.ctx, plan.gates).map_err(|e| format!("user event: {e}"))?;

    // Gates not set yet.
    let mut unset: u32 = (0..plan.gates).fold(0, |m, g| m | (1 << g));
    // Gates the plan fails or drops.
    let failing = plan.steps.iter().fold(0u32, |m, step| match step {
        Step::Fail(mask) | Step::Drop(mask) => m | mask,
        _ => m,
    });
    // Waits for every command issued so far that cannot be waiting on a closed gate
    // (the PoCL trap of the module's documentation).
    let wait_for_free =
        |issues: &[Option<Issue>], pending: &[(usize, PendingRead<i32>)], unset: u32| {
            let free = issues
                .iter()
                .zip(&plan.waits)
                .filter(|(_, waits)| **waits & unset == 0);
            let unmaps = issues.iter().flatten().filter_map(|issue| match issue {
                Issue::Read { unmapped, .. } => unmapped.as_ref(),
                _ => None,
            });
            let free: Vec<&Event> = free
                .filter_map(|(issue, _)| issue.as_ref()?.event())
                .chain(unmaps)
                .chain(
                    pending
                        .iter()
                        .filter(|(at, _)| plan.waits[*at] & unset == 0)
                        .map(|(_, read)| read.event()),
                )
                .collect();
            let _ = wait_all(&free);
        };
    // A replay names each step as it goes: a crash inside the driver prints nothing else.
    let trail = std::env::var_os(SEED_VAR).is_some() && std::env::var_os(TRAIL_VAR).is_some();
    for (i, step) in plan.steps.iter().enumerate() {
        if trail {
            eprintln!("step #{i}");
        }
        let (queue, gate, kind) = match step {
            Step::Enqueue { queue, gate, kind } => (&queues[*queue], *gate, kind),
            setting => {
                if let Step::Fail(_) | Step::Drop(_) = setting {
                    wait_for_free(&issues[..i], &pending, unset);
                }
                if let Step::Open(mask) | Step::Fail(mask) | Step::Drop(mask) = setting {
                    unset &= !mask;
                }
                gates
                    .set(setting)
                    .map_err(|e| format!("step #{i} ({step}) failed: {e}"))?;
                continue;
            }
        };
        if plan.waits[i] & unset & failing != 0 {
            // Behind a gate that will fail: what it waits on besides closed gates has
            // ended, so the driver ties it to nothing that may end as the gate fails.
            wait_for_free(&issues[..i], &pending, unset);
        }
        let deps: Vec<&Event> = gate.iter().map(|&g| &gates.events[g]).collect();
        match issue(env, queue.after(&deps), buffers, kind, len) {
            Issued::Now(done) => issues[i] = Some(done),
            Issued::Later(read) => pending.push((i, read)),
        }
    }

    if trail {
        eprintln!("pending reads");
    }
    // The plan has set every gate by now.
    for (i, read) in pending.drain(..) {
        let event = Some(read.event().clone());
        issues[i] = Some(Issue::Read {
            event,
            got: read.wait(),
            unmapped: None,
        });
    }
    let finals: Vec<Issue> = plan
        .final_reads
        .iter()
        .enumerate()
        .map(|(b, &q)| queues[q].read_owned(buffers[b]))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|read| match read {
            Ok(read) => Issue::Read {
                event: Some(read.event().clone()),
                got: read.wait(),
                unmapped: None,
            },
            Err(e) => Issue::Refused(e),
        })
        .collect();
    // Every command has ended before its outcome is read; a failed one is an outcome
    // here, not an error.
    let events: Vec<&Event> = issues
        .iter()
        .flatten()
        .chain(&finals)
        .filter_map(Issue::event)
        .collect();
    if trail {
        eprintln!("final reads issued");
    }
    let _ = wait_all(&events);
    env.ctx.wait_deferred();
    if trail {
        eprintln!("all ended");
    }

    let failures = replay(plan, &issues, &finals, tally);
    if failures.is_empty() {
        Ok(())
    } else {
        let observed: Vec<String> = issues
            .iter()
            .enumerate()
            .filter_map(|(i, issue)| Some(format!("#{i}: {}", outcome(issue.as_ref()?))))
            .collect();
        Err(format!(
            "{}\nobserved outcomes: {}",
            failures.join("\n"),
            observed.join(", ")
        ))
    }
}

/// How one issued command ended, in a word, for a failing schedule's report.
fn outcome(issue: &Issue) -> String {
    match issue {
        Issue::Refused(_) => "refused".into(),
        Issue::Enqueued(event)
        | Issue::Read {
            event: Some(event), ..
        } => match event.status() {
            Ok(cl_lifetime::Status::Complete) => "complete".into(),
            Ok(cl_lifetime::Status::Failed(s)) => format!("failed ({s})"),
            Ok(status) => format!("{status:?}"),
            Err(e) => format!("status unreadable: {e}"),
        },
        Issue::Wrote(Ok(())) | Issue::Read { got: Ok(_), .. } => "returned ok".into(),
        Issue::Wrote(Err(_)) | Issue::Read { got: Err(_), .. } => "returned an error".into(),
    }
}

/// Per buffer in [`replay`], per element: the step of its last write (not refused at
/// enqueue), and whether that write failed.
type LastWrite = Vec<Option<(std::rc::Rc<str>, bool)>>;

/// Walks `plan` in program order with a sequential model in which a command changes the
/// buffers only if it completed, and checks every observed outcome against the failure
/// rule (the rule names are the module's, R1 to R4).
fn replay(
    plan: &Plan,
    issues: &[Option<Issue>],
    finals: &[Issue],
    tally: &mut Tally,
) -> Vec<String> {
    let len = plan.len;
    let mut model: Vec<Vec<i32>> = plan.initial.iter().map(|p| p.values(len)).collect();
    let mut last_write: Vec<LastWrite> = vec![vec![None; len]; model.len()];
    let mut failed_gates = 0u32;
    let mut failures = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let (gate, kind) = match step {
            Step::Enqueue { gate, kind, .. } => (*gate, kind),
            Step::Fail(mask) | Step::Drop(mask) => {
                failed_gates |= mask;
                continue;
            }
            Step::Open(_) => continue,
        };
        let what = format!("step #{i} ({step})");
        // Given a gate that had already failed.
        let dead = gate.filter(|g| failed_gates & (1 << g) != 0);
        match &issues[i] {
            Some(issue) => check_outcome(
                &what,
                kind,
                dead,
                issue,
                &mut model,
                &mut last_write,
                tally,
                &mut failures,
            ),
            None => failures.push(format!("{what}: never issued")),
        }
    }
    for (b, issue) in finals.iter().enumerate() {
        let what = format!("final read of b{b} on q{}", plan.final_reads[b]);
        let kind = Kind::ReadOwned {
            b,
            range: 0..len,
            wait_now: true,
        };
        check_outcome(
            &what,
            &kind,
            None,
            issue,
            &mut model,
            &mut last_write,
            tally,
            &mut failures,
        );
    }
    failures
}

/// Checks one command's outcome against the failure rule and applies it to the model:
/// `dead` is the gate it was given if that had failed already, `last_write` what the
/// replay has seen of each buffer's last write so far.
#[allow(clippy::too_many_arguments)]
fn check_outcome(
    what: &str,
    kind: &Kind,
    dead: Option<usize>,
    issue: &Issue,
    model: &mut [Vec<i32>],
    last_write: &mut [LastWrite],
    tally: &mut Tally,
    failures: &mut Vec<String>,
) {
    use cl_lifetime::Error::{CommandFailed, DependencyFailed};
    use cl_lifetime::Status;

    let len = model[0].len();
    // The buffers it reads an element of whose last write failed, described.
    let poisoned: Vec<String> = kind
        .read_ranges(len)
        .into_iter()
        .filter_map(|(b, range)| {
            last_write[b][range.clone()]
                .iter()
                .zip(range)
                .find_map(|(w, i)| match w {
                    Some((writer, true)) => Some(format!(
                        "b{b}, element {i} last written by {writer}, which failed"
                    )),
                    _ => None,
                })
        })
        .collect();
    let reason = match (dead, poisoned.is_empty()) {
        (Some(g), _) => format!("gate {g} had failed already"),
        (None, false) => poisoned.join("; "),
        (None, true) => "it had no failed gate and reads no buffer whose last write failed".into(),
    };
    // How its event ended, once everything was waited for.
    let ended = |event: &Event, failures: &mut Vec<String>| -> Option<bool> {
        match event.status() {
            Ok(Status::Complete) => Some(true),
            Ok(Status::Failed(_)) => Some(false),
            Ok(status) => {
                failures.push(format!(
                    "{what}: still {status:?} after everything was waited for"
                ));
                None
            }
            Err(e) => {
                failures.push(format!("{what}: reading its status: {e}"));
                None
            }
        }
    };
    if dead.is_some() {
        let refused = match issue {
            Issue::Refused(_) => true,
            // A blocking read or map may have been refused: it says so by its error.
            Issue::Read {
                event: None, got, ..
            } => matches!(got, Err(DependencyFailed { .. })),
            _ => false,
        };
        if !refused {
            failures.push(format!(
                "{what} (R4): given gate {}, which had failed already, yet not refused at \
                 enqueue",
                dead.unwrap_or_default()
            ));
        }
    }

    match issue {
        Issue::Refused(e) => {
            tally.refused += 1;
            if kind.is_host_read() {
                tally.read_errors += 1;
            }
            if !matches!(e, DependencyFailed { .. }) {
                failures.push(format!("{what}: refused with {e}, not DependencyFailed"));
            } else if dead.is_none() && poisoned.is_empty() {
                failures.push(format!("{what} (R4): refused with {e}, but {reason}"));
            }
            // Nothing was enqueued: nothing changes, not even the last write.
        }
        Issue::Enqueued(_) | Issue::Wrote(_) => {
            let completed = match issue {
                Issue::Enqueued(event) => ended(event, failures),
                Issue::Wrote(Ok(())) => Some(true),
                Issue::Wrote(Err(CommandFailed { .. })) => Some(false),
                Issue::Wrote(Err(e)) => {
                    failures.push(format!("{what}: the blocking write returned {e}"));
                    None
                }
                _ => unreachable!(),
            };
            // A command whose outcome is unknown counts as failed from here on: the
            // failures above already say what went wrong.
            let completed = completed.unwrap_or(false);
            if completed {
                tally.completed += 1;
                if !poisoned.is_empty() {
                    failures.push(format!(
                        "{what} (R3): completed although it reads {}",
                        poisoned.join("; ")
                    ));
                }
                kind.apply(model);
            } else {
                tally.failed += 1;
            }
            // A write that completed but left part of the buffer to a failed one before
            // it does not make the buffer readable again.
            let replaces = kind.replaces(len);
            let writer: std::rc::Rc<str> = what.into();
            for (b, range) in kind.write_ranges(len) {
                for element in &mut last_write[b][range] {
                    let failed_before = matches!(element, Some((_, true)));
                    if !completed || replaces || !failed_before {
                        *element = Some((writer.clone(), !completed));
                    }
                }
            }
        }
        Issue::Read { event, got, .. } => {
            let ran = event.as_ref().and_then(|e| ended(e, failures));
            match ran {
                Some(true) => tally.completed += 1,
                Some(false) => tally.failed += 1,
                None if event.is_none() && got.is_ok() => tally.completed += 1,
                None => {}
            }
            let Some((b, range)) = kind.read_span() else {
                unreachable!("a read of no buffer")
            };
            match got {
                Ok(values) => {
                    if !poisoned.is_empty() {
                        failures.push(format!(
                            "{what} (R1): returned data although it reads {}",
                            poisoned.join("; ")
                        ));
                    }
                    if ran == Some(false) {
                        failures.push(format!(
                            "{what} (R1): returned data although the read itself failed"
                        ));
                    }
                    compare(failures, format!("{what} (R1)"), &model[b][range], values);
                }
                Err(e) => {
                    tally.read_errors += 1;
                    match e {
                        DependencyFailed { .. } if dead.is_some() || !poisoned.is_empty() => {}
                        // The read itself failed (behind a gate that failed, or a failed
                        // command ahead of it on its queue): tolerated.
                        CommandFailed { .. } => {}
                        DependencyFailed { .. } => {
                            failures.push(format!("{what} (R2): returned {e}, but {reason}"))
                        }
                        e => failures.push(format!("{what}: returned {e}")),
                    }
                }
            }
        }
    }
}

/// Aborts the process (the test's own child process) when one schedule runs past
/// [`HANG_LIMIT`], after printing which (and its plan): a command left waiting on a failed
/// event would otherwise hang the test without a word. Written straight to stderr, which
/// the test harness does not capture.
struct Watchdog(mpsc::Sender<Option<String>>);

impl Watchdog {
    fn new() -> Watchdog {
        let (tx, rx) = mpsc::channel::<Option<String>>();
        std::thread::spawn(move || {
            let mut watched: Option<String> = None;
            loop {
                let next = match &watched {
                    None => rx.recv().ok(),
                    Some(what) => match rx.recv_timeout(HANG_LIMIT) {
                        Ok(next) => Some(next),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let _ = writeln!(
                                std::io::stderr().lock(),
                                "\n{what}\nstill running after {HANG_LIMIT:?}: it hangs (R5)"
                            );
                            std::process::abort();
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => None,
                    },
                };
                match next {
                    Some(next) => watched = next,
                    // The test has ended.
                    None => return,
                }
            }
        });
        Watchdog(tx)
    }

    /// Starts watching: `what` says what runs, and its first line goes to stderr first, so
    /// that a crash of the process (which no watchdog sees) names the schedule it was in.
    fn watch(&self, what: String) {
        let first = what
            .lines()
            .next()
            .unwrap_or_default()
            .trim_end_matches(':');
        let _ = writeln!(std::io::stderr().lock(), "running {first}");
        let _ = self.0.send(Some(what));
    }

    fn done(&self) {
        let _ = self.0.send(None);
    }
}

/// Runs one failure-mode schedule on fresh buffers, then drops them and checks that the
/// context accounts for no memory (R5).
fn run_failure_schedule(env: &Env, plan: &Plan, tally: &mut Tally) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let queues = env.queues(&plan.queues);
        let buffers = env.buffers(&plan.initial, plan.len)?;
        let refs: Vec<&ClBuffer<i32>> = buffers.iter().collect();
        let checked = execute_with_failures(env, plan, &queues, &refs, tally);
        drop(refs);
        drop(buffers);
        env.ctx.wait_deferred();
        let stats = env.ctx.memory_stats();
        let leaked = (stats.live_bytes != 0 || stats.pending_release_bytes != 0).then(|| {
            format!(
                "(R5) after the buffers were dropped and the deferred releases waited for, \
                 {} bytes are live and {} pending release",
                stats.live_bytes, stats.pending_release_bytes
            )
        });
        match (checked, leaked) {
            (Ok(()), None) => Ok(()),
            (Ok(()), Some(leak)) => Err(leak),
            (Err(e), None) => Err(e),
            (Err(e), Some(leak)) => Err(format!("{e}\n{leak}")),
        }
    }));
    let failure = match outcome {
        Ok(result) => result,
        Err(payload) => Err(format!("panicked: {}", panic_message(&*payload))),
    };
    failure.map_err(|e| format!("{e}\n{plan}"))
}

/// Runs in a child process: its watchdog aborts the process on a hang (after printing the
/// schedule), and it fails gates by the hundred, which PoCL 3.1 has been seen to crash on;
/// either must fail this test, not end the suite. The limit is for the whole run; one
/// schedule that hangs is caught by the watchdog after [`HANG_LIMIT`].
#[test]
fn random_schedules_with_failures_keep_the_failure_rule() {
    common::isolated(
        &test_path!(random_schedules_with_failures_keep_the_failure_rule),
        FAILURE_RUN_LIMIT,
        &[],
        || failure_schedules(0xFA11_5C4E_D000_0003),
    );
}

fn failure_schedules(base: u64) {
    let one = device!();
    if common::not_on(&one, "oclgrind", common::oclgrind::GATES) {
        return;
    }
    // Intel's CPU runtime as emulated over PoCL (`make emulate`, profile `intel-cpu`): the
    // workaround the measurement selects (one event per wait list, the others through
    // markers) gives PoCL commands two dependencies that can end together, which PoCL
    // finishes twice (it aborts in `pocl_lock_events_inorder` on a freed event; design trap
    // "PoCL's double finish").
    if one.driver().mishandles_failures() && common::on_pocl(&one) {
        common::not_run(
            "a driver measured to report failed commands complete, emulated over PoCL: the \
             workaround for it meets PoCL's double finish",
        );
        return;
    }
    let Some(runs) = runs(one, FAILURE_SCHEDULES_VAR, DEFAULT_FAILURE_SCHEDULES, base) else {
        return;
    };

    let start = Instant::now();
    let watchdog = Watchdog::new();
    let mut tally = Tally::default();
    let runs_one = runs.replay.is_some();
    let (counts, failures) = runs.run("failure schedule", |env, seed| {
        let plan = plan_schedule(seed, true, env.unit);
        watchdog.watch(format!(
            "failure schedule seed {seed} ({}); replay with {SEED_VAR}={seed}:\n{plan}",
            env.label
        ));
        if runs_one {
            // A replay shows its plan first: a crash inside the driver prints nothing else.
            eprintln!("{plan}");
        }
        let outcome = run_failure_schedule(env, &plan, &mut tally);
        watchdog.done();
        outcome
    });
    let failed = failures.len();
    println!(
        "{} failure schedules ({} on 1 device, {} on 2 devices) in {:.1?}: {} commands \
         completed, {} failed, {} refused at enqueue; {} host reads returned errors",
        counts[0] + counts[1],
        counts[0],
        counts[1],
        start.elapsed(),
        tally.completed,
        tally.failed,
        tally.refused,
        tally.read_errors,
    );
    assert!(
        failures.is_empty(),
        "{failed} failure schedule(s) failed (stopped after {MAX_REPORTED}); replay one with \
         {SEED_VAR}=<seed> cargo test --test integration \
         schedules::random_schedules_with_failures_keep_the_failure_rule -- --nocapture\n\n{}",
        failures.join("\n\n")
    );
    if runs.replay.is_none() && runs.seeds.len() >= 50 {
        assert!(
            tally.failed > 0 && tally.refused > 0 && tally.read_errors > 0,
            "the failure mode did not exercise failures: {tally:?}"
        );
    }
}
