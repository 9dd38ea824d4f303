//! The stress test: several host threads share three queues (two in order, one out of
//! order) on two devices, and each issues random operations on buffers of its own: plain
//! buffers, pool blocks and arena sub-buffers; writes, fills, copies, kernels, reads that
//! block and reads that do not, maps, resizes, and releases blocking, deferred and by drop.
//! All of them read two input buffers they share. Some writes wait on a gate (a user
//! event) that is later opened, failed, or dropped closed, and some commands are given a
//! gate that has failed already.
//!
//! Each thread keeps a model of its buffers and checks every read and map against it.
//! A buffer whose write failed is *failed*: a read of it must return an error (the failure
//! reaches its owner), a copy out of it must be refused or make its destination failed
//! too, and its blocking release must report the failure. Nothing of another thread's may
//! fail. At the end the context accounts for no live, pending or pooled bytes, every
//! buffer's destructor callback has fired (`cl_lifetime::buffers_not_freed()`), and the
//! library holds no event reference (`cl_lifetime::events_held()`).
//!
//! A thread sets every gate it holds before anything that blocks, so no thread waits on
//! another's gate while holding one of its own. Gated writes go onto a buffer that is idle
//! (written by a blocking write just before), and to the out-of-order queue, or, when the
//! gate will fail, to a queue of their own (NVIDIA fails later commands of a queue after
//! one failed): no other command orders after them, and none of their dependencies is
//! still running when the gate fails (PoCL 3.1 has been seen to crash then, see
//! `schedules`). For the same reason every command on a failed buffer (a read, or a copy
//! out of it) goes to a queue of the thread's own, where only commands that fail anyway
//! follow it.
//!
//! `CL_LIFETIME_STRESS_OPS` sets the number of operations (all threads together; default
//! 20,000, `make stress` runs 100,000), `CL_LIFETIME_STRESS_SEED` the seed and
//! `CL_LIFETIME_STRESS_THREADS` the number of threads (default 4).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use cl_lifetime::{
    Arena, Arg, ClBuffer, Context, Error, Kernel, PendingRead, Pool, PoolOptions, Queue, UserEvent,
};

use crate::common::{self, Rng};

const OPS_VAR: &str = "CL_LIFETIME_STRESS_OPS";
const SEED_VAR: &str = "CL_LIFETIME_STRESS_SEED";
const DEFAULT_OPS: usize = 20_000;
const THREADS_VAR: &str = "CL_LIFETIME_STRESS_THREADS";
const THREADS: usize = 4;
/// Kernels run at one global size whatever the buffer's length (see `kernels/schedule.cl`).
const ITEMS: usize = 64;
const LENGTHS: [usize; 5] = [64, 256, 1000, 1024, 4096];
const MAX_SLOTS: usize = 6;
const MAX_GATES: usize = 2;
const MAX_PENDING_READS: usize = 4;
const ARENA_BYTES: usize = 64 << 10;

/// Everything the threads share.
struct Shared {
    ctx: Context,
    /// In order on the first device, in order on the second (or the first again), out of
    /// order on the first.
    queues: [Queue; 3],
    pool: Pool,
    inputs: [(ClBuffer<i32>, Vec<i32>); 2],
    program: cl_lifetime::Program,
    /// One kernel object all threads launch.
    add_const: Kernel,
}

const OUT_OF_ORDER: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Home {
    Plain,
    Pool,
    Arena,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Clean,
    /// Its last write waits on gate number `.0` of the thread's.
    Gated(u64),
    /// Its last write failed.
    Failed,
}

struct Slot {
    id: u64,
    buf: ClBuffer<i32>,
    home: Home,
    model: Vec<i32>,
    state: State,
}

#[derive(Clone, Copy, Debug)]
enum Fate {
    Open,
    Fail,
    Drop,
}

struct Gate {
    id: u64,
    event: UserEvent,
    /// The queue of its own a write that will fail goes to.
    _queue: Option<Queue>,
    fate: Fate,
    slot: u64,
    data: Vec<i32>,
}

/// What one thread saw.
#[derive(Default, Debug)]
struct Tally {
    ops: usize,
    checks: usize,
    gates_failed: usize,
    failures_seen: usize,
    refused: usize,
    propagated: usize,
}

fn is_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::DependencyFailed { .. } | Error::CommandFailed { .. }
    )
}

/// A buffer a command reads, with its model: slot `src` of the thread's, or else shared
/// input `input`.
fn operand<'a>(
    slots: &'a [Slot],
    shared: &'a Shared,
    src: Option<usize>,
    input: usize,
) -> (&'a ClBuffer<i32>, Vec<i32>) {
    match src {
        Some(j) => (&slots[j].buf, slots[j].model.clone()),
        None => (&shared.inputs[input].0, shared.inputs[input].1.clone()),
    }
}

struct Worker<'s> {
    shared: &'s Shared,
    rng: Rng,
    slots: Vec<Slot>,
    gates: Vec<Gate>,
    reads: Vec<(u64, PendingRead<i32>, Vec<i32>)>,
    arena: Arena,
    axpy: Kernel,
    add_const: Kernel,
    failed_gate: UserEvent,
    /// Where the commands on failed buffers go: the thread's own, so that a failure's
    /// echo (design trap "a failure echoes on its queue") reaches only commands that fail
    /// anyway.
    failing: Queue,
    next_id: u64,
    tally: Tally,
    thread: usize,
}

impl<'s> Worker<'s> {
    fn new(shared: &'s Shared, thread: usize, seed: u64) -> Worker<'s> {
        let failed_gate = shared.ctx.user_event().expect("a user event");
        failed_gate.fail(-1).expect("a new gate fails");
        Worker {
            shared,
            rng: Rng(seed),
            slots: Vec::new(),
            gates: Vec::new(),
            reads: Vec::new(),
            arena: Arena::new(&shared.ctx, ARENA_BYTES).expect("an arena"),
            axpy: shared.program.kernel("axpy_int").expect("axpy_int"),
            add_const: shared.program.kernel("add_const").expect("add_const"),
            failed_gate,
            failing: shared
                .ctx
                .queue_on(&shared.ctx.devices()[0], false)
                .expect("a queue"),
            next_id: 0,
            tally: Tally::default(),
            thread,
        }
    }

    fn queue(&mut self) -> &'s Queue {
        &self.shared.queues[self.rng.below(3)]
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A slot in `state`, by index.
    fn pick(&mut self, state: State) -> Option<usize> {
        let found: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].state == state)
            .collect();
        (!found.is_empty()).then(|| found[self.rng.below(found.len())])
    }

    fn run(&mut self, ops: usize) {
        for _ in 0..ops {
            self.step();
            self.tally.ops += 1;
        }
        self.set_gates();
        self.settle_reads(None);
        while !self.slots.is_empty() {
            let i = self.slots.len() - 1;
            if self.slots[i].state == State::Clean {
                self.check(i);
                self.let_go(i);
            } else {
                self.read_failed(i);
            }
        }
    }

    fn step(&mut self) {
        let roll = self.rng.below(100);
        let clean = self.pick(State::Clean);
        if self.slots.len() < 2 || (roll < 8 && self.slots.len() < MAX_SLOTS) {
            return self.allocate();
        }
        if let Some(i) = self.pick(State::Failed) {
            if roll < 30 {
                return self.on_failed(i, clean);
            }
        }
        let Some(i) = clean else {
            return self.set_gates();
        };
        match roll {
            0..=7 => self.allocate(),
            8..=17 => self.write(i),
            18..=24 => self.fill(i),
            25..=34 => self.copy(i),
            35..=49 => self.kernel(i),
            50..=57 => self.read_later(i),
            58..=61 => {
                self.set_gates();
                self.check(i)
            }
            62..=65 => self.map(i),
            66..=69 => self.resize(i),
            70..=75 => self.let_go(i),
            76..=80 => self.gate(i),
            81..=84 => self.set_one_gate(),
            85..=87 => self.already_failed(i),
            _ => self.settle_reads(Some(1)),
        }
    }

    fn allocate(&mut self) {
        if self.slots.len() >= MAX_SLOTS {
            return;
        }
        let len = LENGTHS[self.rng.below(LENGTHS.len())];
        let queue = self.queue();
        let (buf, home) = match self.rng.below(3) {
            0 => (self.shared.ctx.buffer::<i32>(len), Home::Plain),
            1 if self.rng.chance(50) => (self.shared.pool.acquire_on(queue, len), Home::Pool),
            1 => (self.shared.pool.acquire(len), Home::Pool),
            _ => {
                if self.arena.capacity() - self.arena.used() < len * 4 + 4096
                    && !self.slots.iter().any(|s| s.home == Home::Arena)
                {
                    self.set_gates();
                    // Busy while a deferred release of a sub-buffer is not done yet.
                    match self.arena.reset() {
                        Ok(()) | Err(Error::ArenaBusy { .. }) => {}
                        Err(e) => panic!("an arena reset: {e}"),
                    }
                }
                match self.arena.carve::<i32>(len) {
                    Err(Error::ArenaFull { .. }) => return,
                    carved => (carved, Home::Arena),
                }
            }
        };
        let buf = buf.expect("an allocation");
        let model: Vec<i32> = (0..len).map(|_| self.rng.next() as i32).collect();
        queue
            .write_owned(&buf, model.clone())
            .expect("the first write");
        let id = self.id();
        self.slots.push(Slot {
            id,
            buf,
            home,
            model,
            state: State::Clean,
        });
    }

    fn write(&mut self, i: usize) {
        let range = self.rng.range(self.slots[i].model.len());
        let data: Vec<i32> = range.clone().map(|_| self.rng.next() as i32).collect();
        let queue = self.queue();
        let slot = &mut self.slots[i];
        queue
            .write_owned_at(&slot.buf, range.start, data.clone())
            .expect("a write");
        slot.model[range].copy_from_slice(&data);
    }

    fn fill(&mut self, i: usize) {
        let range = self.rng.range(self.slots[i].model.len());
        let value = self.rng.next() as i32;
        let queue = self.queue();
        let slot = &mut self.slots[i];
        queue
            .fill_range(&slot.buf, value, range.clone())
            .expect("a fill");
        slot.model[range].fill(value);
    }

    /// A source for `dst`: another clean buffer of the thread's, or a shared input.
    fn source(&mut self, dst: usize) -> Option<usize> {
        let others: Vec<usize> = (0..self.slots.len())
            .filter(|&j| j != dst && self.slots[j].state == State::Clean)
            .collect();
        (!others.is_empty() && self.rng.chance(60)).then(|| others[self.rng.below(others.len())])
    }

    fn copy(&mut self, dst: usize) {
        let queue = self.queue();
        let input = self.rng.below(2);
        let src = self.source(dst);
        let (src_buf, src_model) = operand(&self.slots, self.shared, src, input);
        let dst_len = self.slots[dst].model.len();
        let len = self.rng.between(1, src_model.len().min(dst_len));
        let from = self.rng.below(src_model.len() - len + 1);
        let to = self.rng.below(dst_len - len + 1);
        if let Err(e) = queue.copy_range(src_buf, from, &self.slots[dst].buf, to, len) {
            panic!(
                "thread {}: a copy from {} into buffer {} ({:?}): {e}",
                self.thread,
                src.map_or("a shared input".to_string(), |j| format!(
                    "buffer {} ({:?})",
                    self.slots[j].id, self.slots[j].home
                )),
                self.slots[dst].id,
                self.slots[dst].home
            );
        }
        self.slots[dst].model[to..to + len].copy_from_slice(&src_model[from..from + len]);
    }

    fn kernel(&mut self, y: usize) {
        let queue = self.queue();
        if self.rng.chance(40) {
            let c = self.rng.int(-1000, 1000);
            // Half of the launches use the kernel object every thread shares.
            let kernel = if self.rng.chance(50) {
                &self.shared.add_const
            } else {
                &self.add_const
            };
            let slot = &mut self.slots[y];
            let n = slot.model.len();
            // SAFETY: add_const touches the buffer's element i only where i < n, its length.
            unsafe {
                queue.launch(
                    kernel,
                    &[ITEMS],
                    &[
                        Arg::read_write(&slot.buf),
                        Arg::scalar(c),
                        Arg::scalar(n as u32),
                    ],
                )
            }
            .expect("add_const");
            for v in &mut slot.model {
                *v = v.wrapping_add(c);
            }
            return;
        }
        let a = self.rng.int(-3, 3);
        let input = self.rng.below(2);
        let x = self.source(y);
        let (x_buf, x_model) = operand(&self.slots, self.shared, x, input);
        let n = x_model.len().min(self.slots[y].model.len());
        // SAFETY: axpy_int touches x[i] and y[i] only where i < n, the shorter of their lengths,
        // and writes only y.
        unsafe {
            queue.launch(
                &self.axpy,
                &[ITEMS],
                &[
                    Arg::read(x_buf),
                    Arg::read_write(&self.slots[y].buf),
                    Arg::scalar(a),
                    Arg::scalar(n as u32),
                ],
            )
        }
        .expect("axpy_int");
        for (yv, xv) in self.slots[y].model[..n].iter_mut().zip(&x_model) {
            *yv = a.wrapping_mul(*xv).wrapping_add(*yv);
        }
    }

    fn read_later(&mut self, i: usize) {
        if self.reads.len() >= MAX_PENDING_READS {
            self.settle_reads(Some(1));
        }
        let queue = self.queue();
        let slot = &self.slots[i];
        let read = queue.read_owned(&slot.buf).expect("a read");
        self.reads.push((slot.id, read, slot.model.clone()));
    }

    /// Waits for the oldest `count` pending reads (all with `None`) and checks them.
    fn settle_reads(&mut self, count: Option<usize>) {
        let n = count.unwrap_or(self.reads.len()).min(self.reads.len());
        if n > 0 {
            self.set_gates();
        }
        for (id, read, expected) in self.reads.drain(..n) {
            let got = read.wait().expect("a read of a clean buffer");
            assert!(
                got == expected,
                "thread {}: a read of buffer {id} does not match the model",
                self.thread
            );
            self.tally.checks += 1;
        }
    }

    /// Settles the pending reads of slot `i` (before it changes hands).
    fn settle_reads_of(&mut self, i: usize) {
        let id = self.slots[i].id;
        if let Some(last) = self.reads.iter().rposition(|(r, _, _)| *r == id) {
            self.settle_reads(Some(last + 1));
        }
    }

    /// A blocking read of slot `i`, checked.
    fn check(&mut self, i: usize) {
        let queue = self.queue();
        let slot = &self.slots[i];
        let range = self.rng.range(slot.model.len());
        let mut out = vec![0; range.len()];
        queue
            .read_at(&slot.buf, range.start, &mut out)
            .expect("a read of a clean buffer");
        assert!(
            out == slot.model[range],
            "thread {}: a blocking read of buffer {} does not match the model",
            self.thread,
            slot.id
        );
        self.tally.checks += 1;
    }

    fn map(&mut self, i: usize) {
        self.set_gates();
        let queue = self.queue();
        let range = self.rng.range(self.slots[i].model.len());
        if self.rng.chance(50) {
            let slot = &self.slots[i];
            let mapped = queue.map(&slot.buf, range.clone()).expect("a map");
            assert!(
                mapped[..] == slot.model[range],
                "thread {}: a map of buffer {} does not match the model",
                self.thread,
                slot.id
            );
            self.tally.checks += 1;
        } else {
            let value = self.rng.next() as i32;
            let slot = &mut self.slots[i];
            let mut mapped = queue.map_mut(&slot.buf, range.clone()).expect("a map");
            assert!(mapped[..] == slot.model[range.clone()]);
            mapped[..].fill(value);
            drop(mapped);
            slot.model[range].fill(value);
            self.tally.checks += 1;
        }
    }

    fn resize(&mut self, i: usize) {
        if self.slots[i].home != Home::Plain {
            return self.write(i);
        }
        let new_len = LENGTHS[self.rng.below(LENGTHS.len())];
        let queue = self.queue();
        let slot = &mut self.slots[i];
        let old_len = slot.model.len();
        slot.buf.resize(queue, new_len).expect("a resize");
        slot.model.resize(new_len, 0);
        if new_len > old_len {
            // The new tail's contents are undefined until written.
            queue
                .fill_range(&slot.buf, 0, old_len..new_len)
                .expect("a fill of the new tail");
        }
    }

    /// Releases slot `i` one way or another.
    fn let_go(&mut self, i: usize) {
        self.settle_reads_of(i);
        let slot = self.slots.swap_remove(i);
        let failed = slot.state == State::Failed;
        match self.rng.below(3) {
            0 => {
                self.set_gates();
                let report = slot.buf.release().expect("a release");
                if failed && slot.home != Home::Pool {
                    assert!(
                        !report.failed.is_empty(),
                        "thread {}: the release of failed buffer {} reported no failure",
                        self.thread,
                        slot.id
                    );
                } else if !failed {
                    assert!(report.failed.is_empty(), "{:?}", report.failed);
                }
            }
            1 => slot.buf.release_deferred(),
            _ => drop(slot.buf),
        }
    }

    /// A write of new contents to slot `i` on the out-of-order queue, behind a new gate.
    fn gate(&mut self, i: usize) {
        if self.gates.len() >= MAX_GATES {
            return self.set_one_gate();
        }
        self.settle_reads_of(i);
        self.set_gates();
        let queue = self.queue();
        let slot = &self.slots[i];
        // Idle from here: no dependency of the gated write is still running.
        queue
            .write(&slot.buf, &slot.model)
            .expect("a blocking write");
        let event = self.shared.ctx.user_event().expect("a user event");
        let data: Vec<i32> = (0..slot.model.len())
            .map(|_| self.rng.next() as i32)
            .collect();
        let fate = match self.rng.below(3) {
            0 => Fate::Open,
            1 => Fate::Fail,
            _ => Fate::Drop,
        };
        // A write that will fail goes to a queue of its own: NVIDIA fails later commands of
        // a queue on which one failed (design trap "a failure echoes on its queue"), and
        // on a shared queue those would be other threads' commands.
        let own = match fate {
            Fate::Open => None,
            Fate::Fail | Fate::Drop => Some(
                self.shared
                    .ctx
                    .queue_on(&self.shared.ctx.devices()[0], true)
                    .expect("a queue"),
            ),
        };
        own.as_ref()
            .unwrap_or(&self.shared.queues[OUT_OF_ORDER])
            .after(&[event.event()])
            .write_owned(&slot.buf, data.clone())
            .expect("a gated write");
        let slot_id = slot.id;
        let id = self.id();
        self.slots[i].state = State::Gated(id);
        self.gates.push(Gate {
            id,
            event,
            _queue: own,
            fate,
            slot: slot_id,
            data,
        });
    }

    fn set_one_gate(&mut self) {
        if !self.gates.is_empty() {
            let g = self.rng.below(self.gates.len());
            let gate = self.gates.swap_remove(g);
            self.set(gate);
        }
    }

    fn set_gates(&mut self) {
        while let Some(gate) = self.gates.pop() {
            self.set(gate);
        }
    }

    fn set(&mut self, gate: Gate) {
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.id == gate.slot)
            .expect("a gated buffer stays until its gate is set");
        assert_eq!(slot.state, State::Gated(gate.id));
        match gate.fate {
            Fate::Open => {
                gate.event.complete().expect("the gate opens");
                slot.model = gate.data;
                slot.state = State::Clean;
            }
            Fate::Fail => {
                gate.event.fail(-77).expect("the gate fails");
                slot.state = State::Failed;
                self.tally.gates_failed += 1;
            }
            Fate::Drop => {
                drop(gate.event);
                slot.state = State::Failed;
                self.tally.gates_failed += 1;
            }
        }
    }

    /// A fill behind the gate that failed at the start: refused, nothing changes.
    fn already_failed(&mut self, i: usize) {
        let queue = self.queue();
        let result = queue
            .after(&[self.failed_gate.event()])
            .fill(&self.slots[i].buf, 1);
        assert!(
            matches!(result, Err(Error::DependencyFailed { .. })),
            "thread {}: a fill behind a failed gate was not refused: {result:?}",
            self.thread
        );
        self.tally.refused += 1;
    }

    /// Failed slot `i`: copied into a clean one (refused, or the destination fails too),
    /// or read (an error) and let go.
    fn on_failed(&mut self, i: usize, clean: Option<usize>) {
        if let Some(j) = clean.filter(|_| self.rng.chance(30)) {
            let queue = &self.failing;
            let len = self.slots[i].model.len().min(self.slots[j].model.len());
            match queue.copy_range(&self.slots[i].buf, 0, &self.slots[j].buf, 0, len) {
                Err(e) if is_failure(&e) => self.tally.refused += 1,
                Err(e) => panic!("thread {}: a copy out of a failed buffer: {e}", self.thread),
                Ok(_) => {
                    self.slots[j].state = State::Failed;
                    self.tally.propagated += 1;
                }
            }
            return;
        }
        self.read_failed(i);
    }

    /// Reads failed slot `i`, which must give an error, and lets it go.
    fn read_failed(&mut self, i: usize) {
        self.set_gates();
        let queue = &self.failing;
        let slot = &self.slots[i];
        let result = if self.rng.chance(50) {
            let mut out = vec![0; slot.model.len()];
            queue.read(&slot.buf, &mut out).map(|()| out)
        } else {
            queue.read_owned(&slot.buf).and_then(PendingRead::wait)
        };
        match result {
            Err(e) if is_failure(&e) => self.tally.failures_seen += 1,
            other => panic!(
                "thread {}: a read of failed buffer {} gave {:?}",
                self.thread,
                slot.id,
                other.map(|v| v.len())
            ),
        }
        self.let_go(i);
    }
}

fn stress(ctx: Context, ops: usize, seed: u64, threads: usize) {
    // On rusticl a command's event keeps every buffer the command used (design trap
    // "rusticl's events keep their buffers"): a buffer copied into another is freed only
    // once that other one's record lets go of the copy. A release does not wait the whole
    // default grace for that here; the end of the run checks that every buffer was freed.
    ctx.set_free_grace(Duration::from_millis(20));
    let devices = ctx.devices().to_vec();
    let second = devices.get(1).unwrap_or(&devices[0]);
    let queues = [
        ctx.queue_on(&devices[0], false).expect("a queue"),
        ctx.queue_on(second, false).expect("a queue"),
        ctx.queue_on(&devices[0], true)
            .expect("an out-of-order queue"),
    ];
    let program = ctx.program("schedule.cl", "").expect("schedule.cl builds");
    let mut rng = Rng(seed);
    let mut input = |len: usize| {
        let data: Vec<i32> = (0..len).map(|_| rng.next() as i32).collect();
        (ctx.buffer_from(&data).expect("an input"), data)
    };
    let inputs = [input(4096), input(1000)];
    let shared = Shared {
        pool: Pool::new(&ctx, PoolOptions::default()).expect("a pool"),
        add_const: program.kernel("add_const").expect("add_const"),
        program,
        inputs,
        queues,
        ctx: ctx.clone(),
    };
    println!(
        "stress: {ops} operations, {threads} threads, seed {seed:#x}, on {} device(s): {}",
        devices.len(),
        devices[0]
    );

    let start = Instant::now();
    let ready = Barrier::new(threads);
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (shared, ready) = (&shared, &ready);
                s.spawn(move || {
                    let mut worker = Worker::new(shared, t, common::mix(seed ^ t as u64));
                    ready.wait();
                    worker.run(ops / threads);
                    worker.tally
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let elapsed = start.elapsed();
    let enqueued = ctx.hazard_stats().enqueues;
    let total = |f: fn(&Tally) -> usize| tallies.iter().map(f).sum::<usize>();
    println!(
        "stress: {} operations in {elapsed:.2?} ({:.0} per second, {enqueued} commands \
         enqueued on buffers); {} data checks, {} gates failed, {} failures seen by their owners, {} commands refused, {} failures carried \
         by a copy; longest record {}",
        total(|t| t.ops),
        total(|t| t.ops) as f64 / elapsed.as_secs_f64(),
        total(|t| t.checks),
        total(|t| t.gates_failed),
        total(|t| t.failures_seen),
        total(|t| t.refused),
        total(|t| t.propagated),
        cl_lifetime::longest_record(),
    );
    assert!(total(|t| t.checks) > 0 && total(|t| t.refused) > 0);
    assert_eq!(
        total(|t| t.failures_seen),
        total(|t| t.gates_failed) + total(|t| t.propagated),
        "every buffer that failed (through its gate or a copy out of a failed one) was \
         read, and the read failed"
    );
    if ops >= 2_000 {
        assert!(
            total(|t| t.gates_failed) > 0 && total(|t| t.failures_seen) > 0,
            "no failure was injected: {tallies:?}"
        );
    }

    drop(shared);
    ctx.wait_deferred();
    let stats = ctx.memory_stats();
    assert_eq!(
        (
            stats.live_bytes,
            stats.pending_release_bytes,
            stats.pooled_bytes
        ),
        (0, 0, 0),
        "{stats:?}"
    );
    drop(ctx);
    let settled = common::eventually(|| {
        cl_lifetime::buffers_not_freed() == 0 && cl_lifetime::events_held() == 0
    });
    assert!(
        settled,
        "after the run: {} buffers not freed, {} events held",
        cl_lifetime::buffers_not_freed(),
        cl_lifetime::events_held()
    );
}

/// Runs in a child process of its own: the process-wide counts it checks at the end must
/// be this run's alone, and a crash or a hang must fail the test, not the suite.
#[test]
fn threads_sharing_queues_under_injected_failures_match_their_models_and_leak_nothing() {
    common::isolated(
        &test_path!(
            threads_sharing_queues_under_injected_failures_match_their_models_and_leak_nothing
        ),
        Duration::from_secs(600),
        &[],
        || {
            // Two devices where a platform has them, else one.
            let ctx = match common::find_two_devices() {
                Ok(ctx) => ctx,
                Err(_) => device!(),
            };
            if common::not_on(&ctx, "oclgrind", common::oclgrind::THREADS) {
                return;
            }
            let number = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok());
            let ops = number(OPS_VAR).map_or(DEFAULT_OPS, |n| n as usize);
            let seed = number(SEED_VAR).unwrap_or(0x0577_2E55);
            let threads = number(THREADS_VAR).map_or(THREADS, |n| n as usize);
            stress(ctx, ops, seed, threads);
        },
    );
}
