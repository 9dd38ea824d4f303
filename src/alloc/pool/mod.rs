//! An event-aware pool of blocks that are reused without waiting for the device.
//!
//! # Rules
//!
//! 1. **Size classes.** Blocks come in size classes (powers of two from 256 bytes; a block larger than the
//!    largest power of two the device allows is its own class). A released pool buffer
//!    goes back to its class **with its event record**: nothing is waited for, whatever
//!    views of it went to kernels (the sub-buffers' *left behind at a change of owner* rule
//!    of [`crate::record::sub`]: the next owner starts with none of them).
//! 2. **Inherited record.** The next owner inherits that record, so the enqueue protocol orders it after the old
//!    owner's commands: on the same in-order queue with no wait at all, on another queue
//!    through its first command's wait list (a device-side wait, never a host wait). A
//!    block whose earlier commands could still overlap the new owner's is never handed out
//!    unordered, which is what PyOpenCL's pool gets wrong across queues (its issue #447).
//!    **Clean hand-over:** the old owner's failures are not the new owner's. A drained
//!    failure is forgotten at the hand-over; a command already doomed (a dependency
//!    failed) is passed over while there is room for a new block; and once a failure is
//!    possible, commands still pending that the new owner's queue does not order (any,
//!    for an acquire with no queue) are stood in for by a gate of the library that the
//!    waiter sets complete once they have all ended, whatever their status
//!    ([`crate::record::block::Block::hand_out_again`]). A device-side wait on them
//!    would fail the new owner's command if one of them failed later, and on an in-order
//!    queue every command behind it (PoCL 3.1: status -1 for tasks that used no failed
//!    gate; `pool::a_gate_failed_after_a_hand_over_never_fails_the_new_owners_commands`).
//! 3. **Threshold and trim.** The pool keeps at most [`PoolOptions::release_threshold`] unused bytes (like
//!    `cudaMemPoolAttrReleaseThreshold`); [`Pool::trim`] releases unused blocks down to a
//!    size. Blocks leave through deferred releases: the caller never waits.
//! 4. **Maximum.** [`PoolOptions::max_bytes`] bounds the device memory the pool holds: blocks in use,
//!    unused blocks, and blocks it has let go whose deferred releases are not done yet
//!    (until the driver has freed them, or their grace has passed). An allocation that
//!    would pass it first trims unused blocks, then waits for the pool's pending releases,
//!    and fails with [`Error::PoolExhausted`] when the blocks in use leave no room, or
//!    when it would have to wait while a user event of the context is not set (a release
//!    could be behind it: the wait would have no end). None of this happens while an
//!    unused block of the size class is left: that one is handed out, ordered by a
//!    device-side wait if it is still in use (*inherited record*, *stream-ordered reuse*). A driver allocation failure
//!    trims everything and retries once before it is returned.
//! 5. **Forced residency.** [`PoolOptions::force_residency`] migrates each new block to the device at allocation
//!    (`CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED`), so out-of-memory shows there and not at
//!    first use (design trap "late allocation failure").
//! 6. **Poison.** [`PoolOptions::poison`] fills every recycled block with [`POISON`] through the
//!    `poison` kernel (embedded from `kernels/poison.cl`) when it changes hands, on the
//!    new owner's queue for [`Pool::acquire_on`] (else on the pool's), ordered like any
//!    command, so reads of stale data show up in tests.
//! 7. **Stream-ordered reuse.** [`Pool::acquire_on`] is the stream-ordered form (`cudaMallocAsync`'s). Of the size
//!    class's unused blocks it looks at the oldest eight (those it passes over go to the
//!    back) and takes the first one a command on the given queue can use with no wait:
//!    every command recorded on it has ended, or ran on that queue (when it is in order).
//!    Failing that, it allocates a new block while the maximum allows, so queues do not
//!    serialise on one block. Only at the maximum does it hand out a block still in use
//!    on another queue (ordered by a device-side wait: *inherited record*). So if, whenever it calls
//!    `acquire_on`, a program holds or has commands pending on at most `k` blocks of a
//!    class (`k` below eight), the pool makes at most `k + 1` blocks of that class,
//!    whatever the device's timing.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::panic::Location;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar};

use crate::core::waiter::Watch;
use crate::util::sync::{Guard, Mutex, rank};
use std::time::Duration;

mod reuse;

use super::classes::class_of;
use crate::api::buffer::ClBuffer;
use crate::api::context::Context;
use crate::api::queue::Queue;
use crate::api::svm::SvmBuffer;
use crate::core::context::ContextCore;
use crate::core::device::SvmKind;
use crate::core::gates;
use crate::core::stats::Bucket;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi;
use crate::kernel::{Arg, Kernel};
use crate::pod::Pod;
use crate::pod::Ty;
use crate::record::block::{Block, Home, Memory};
use crate::record::hooks::Owner;
use crate::tracker::{Access, Lane, Span};

/// The work items of every poison launch, whatever the block's size (each strides over the
/// block): PoCL 5 and 6 abort when one kernel runs twice at once at different widths, and
/// the pools of all contexts share the poison kernel.
const POISON_ITEMS: usize = 256;

/// The word [`PoolOptions::poison`] writes over recycled blocks.
pub const POISON: u32 = 0xDEAD_BEEF;

/// How long a wait for the pool's pending releases sleeps before it looks at the
/// context's user events again (the *maximum* rule).
const WAIT_SLICE: Duration = Duration::from_millis(5);

/// How a [`Pool`] behaves.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Context, Error, Pool, PoolOptions};
/// let ctx = Context::from_env()?;
/// let options = PoolOptions::default().max_bytes(1 << 20).release_threshold(0);
/// let pool = Pool::new(&ctx, options)?;
/// let held = pool.acquire::<u8>(1 << 20)?;
/// assert!(matches!(pool.acquire::<u8>(1), Err(Error::PoolExhausted { .. })));
/// let report = held.release()?;
/// assert!(!report.recycled); // over the threshold of 0: released, not kept
/// assert_eq!(pool.stats().pooled_bytes, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PoolOptions {
    /// Unused bytes the pool keeps for reuse; blocks recycled beyond it are released.
    /// Default: unlimited (keep everything until [`Pool::trim`]).
    pub release_threshold: u64,
    /// The most bytes the pool may hold, in use and unused. Default: unlimited.
    pub max_bytes: Option<u64>,
    /// Migrate each new block to the device at allocation (the *forced residency* rule). Default: off.
    pub force_residency: bool,
    /// Fill recycled blocks with [`POISON`] (the *poison* rule). Default: off.
    pub poison: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            release_threshold: u64::MAX,
            max_bytes: None,
            force_residency: false,
            poison: false,
        }
    }
}

impl PoolOptions {
    /// Sets [`PoolOptions::release_threshold`].
    pub fn release_threshold(mut self, bytes: u64) -> Self {
        self.release_threshold = bytes;
        self
    }

    /// Sets [`PoolOptions::max_bytes`].
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// Sets [`PoolOptions::force_residency`].
    pub fn force_residency(mut self, on: bool) -> Self {
        self.force_residency = on;
        self
    }

    /// Sets [`PoolOptions::poison`].
    pub fn poison(mut self, on: bool) -> Self {
        self.poison = on;
        self
    }
}

/// What a pool holds.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Context, Pool, PoolOptions, PoolStats};
/// let ctx = Context::from_env()?;
/// let pool = Pool::new(&ctx, PoolOptions::default())?;
/// let buf = pool.acquire::<u32>(1000)?;
/// let held: PoolStats = pool.stats();
/// assert!(held.in_use_bytes >= 4000); // its size class
/// assert_eq!((held.pooled_bytes, held.pooled_blocks), (0, 0));
/// buf.release()?; // back to the pool, not to the driver
/// let kept = pool.stats();
/// assert_eq!((kept.in_use_bytes, kept.pooled_blocks), (0, 1));
/// assert_eq!(kept.pooled_bytes, held.in_use_bytes);
/// assert_eq!(pool.trim(0), held.in_use_bytes);
/// assert_eq!(pool.stats(), PoolStats::default());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes handed out and not yet back.
    pub in_use_bytes: u64,
    /// Unused bytes kept for reuse.
    pub pooled_bytes: u64,
    /// Unused blocks kept for reuse.
    pub pooled_blocks: usize,
}

#[derive(Default)]
struct PoolState {
    /// Each class's unused blocks, buffers and each kind of SVM apart, in the order
    /// [`Pool::acquire_on`] looks at them.
    free: BTreeMap<(usize, Memory), VecDeque<Block>>,
    in_use: u64,
    pooled: u64,
    blocks: usize,
}

/// The *maximum* rule: the bytes of blocks the pool has let go whose deferred releases are not done
/// yet. Raised under the pool's state lock; lowered by the reaper, which takes only this
/// lock (the pool's state lock comes first where both are taken).
#[derive(Default)]
struct Leaving {
    bytes: Mutex<u64, rank::PoolLeaving>,
    done: Condvar,
    /// The tasks of async allocations waiting for bytes to leave, woken with `done`; a
    /// waker's panic is kept in its watch for its task.
    wakers: Mutex<Vec<Arc<Watch>>, rank::PoolWakers>,
}

/// What [`PoolInner::try_take`] did.
enum Taken {
    Block(Block),
    /// Nothing: `seen` bytes were leaving, and the maximum leaves room once some have.
    AfterLeaving {
        seen: u64,
    },
}

/// What [`PoolInner::try_reserve`] did.
enum Reserved {
    Yes,
    /// Nothing: `seen` bytes were leaving, and the maximum leaves room once some have.
    AfterLeaving {
        seen: u64,
    },
}

impl Leaving {
    fn lock(&self) -> Guard<'_, u64> {
        self.bytes.lock()
    }

    fn bytes(&self) -> u64 {
        *self.lock()
    }

    fn add(&self, bytes: u64) {
        *self.lock() += bytes;
    }

    fn done(&self, bytes: u64) {
        let mut leaving = self.lock();
        *leaving = leaving.saturating_sub(bytes);
        drop(leaving);
        self.done.notify_all();
        let wakers = std::mem::take(&mut *self.wakers.lock());
        // On the reaper's thread: a waker that panics must not end it; its panic goes to
        // its task, resumed at its next poll.
        for watch in wakers {
            watch.end_and_wake();
        }
    }

    /// Whether the bytes are no longer `seen`; if they still are, `watch` is ended (its
    /// waker woken) when they change.
    fn changed_or_wake(&self, seen: u64, watch: &Arc<Watch>) -> bool {
        let mut wakers = self.wakers.lock();
        // Read under the wakers' lock, which `done` takes after changing the bytes: a
        // change after this read finds the watch.
        if self.bytes() != seen {
            return true;
        }
        if !wakers.iter().any(|w| Arc::ptr_eq(w, watch)) {
            wakers.push(watch.clone());
        }
        false
    }

    /// Waits until the bytes are no longer `seen`, for at most `limit`.
    fn wait_change(&self, seen: u64, limit: Duration) {
        let leaving = self.lock();
        let _unchanged = leaving.wait_timeout_while(&self.done, limit, |bytes| *bytes == seen);
    }
}

pub(crate) struct PoolInner {
    ctx: Arc<ContextCore>,
    options: PoolOptions,
    /// Runs residency migrations and poison fills.
    queue: Queue,
    poison: Option<Kernel>,
    state: Mutex<PoolState, rank::PoolState>,
    leaving: Arc<Leaving>,
    /// Set when the user's last `Pool` handle is dropped: blocks coming back are released.
    closed: AtomicBool,
}

impl PoolInner {
    fn lock(&self) -> Guard<'_, PoolState> {
        self.state.lock()
    }

    /// The *stream-ordered reuse* rule: an unused block of `class` for `lane`, taken out of
    /// `state` by [`reuse::pick`], with room for a new block while the maximum allows one.
    fn pick(
        &self,
        state: &mut PoolState,
        class: usize,
        memory: Memory,
        lane: Option<Lane>,
    ) -> Option<Block> {
        let (in_use, pooled) = (state.in_use, state.pooled);
        let room = || {
            self.options
                .max_bytes
                .is_none_or(|max| in_use + pooled + self.leaving.bytes() + class as u64 <= max)
        };
        let blocks = state.free.get_mut(&(class, memory))?;
        // A block whose old owner left a doomed command would pass its failure on (the
        // *clean hand-over* rule): passed over while there is room for a new one.
        let block = reuse::pick(blocks, lane, gates::any_failure_seen(), room)?;
        state.pooled -= class as u64;
        state.blocks -= 1;
        state.in_use += class as u64;
        Some(block)
    }

    /// The *poison* rule: fills a block changing hands with [`POISON`], on `queue` when given (the
    /// new owner's queue, so that its commands need no wait for the fill), else on the
    /// pool's queue. Ordered after the old owner's commands like any command.
    fn poison_fill(&self, mem: &Block, queue: Option<&Queue>) {
        let Some(kernel) = &self.poison else {
            return;
        };
        let words = (mem.bytes() / 4) as u64;
        let args = [
            Arg::block(mem, Access::Write, Ty::of::<u32>(), None, Span::ALL),
            Arg::scalar(POISON),
            Arg::scalar(words),
        ];
        let queue = queue.unwrap_or(&self.queue);
        // SAFETY: `poison` (kernels/poison.cl) writes `data[i]` only for `i < n`, and `n`
        // is the block's length in whole words, so it stays inside the block, the one
        // buffer it is given, which it is given as written; it takes no local memory.
        let launched = unsafe {
            queue
                .after(&[])
                .launch_kernel(kernel, &[POISON_ITEMS], None, &args)
        };
        if let Err(e) = launched {
            log::warn!(target: "cl_lifetime::pool", "poisoning a recycled block: {e}");
        }
    }

    /// Takes the largest unused block out of `state`, counting it as leaving (the *maximum* rule): the
    /// caller lets it go.
    fn take_largest(&self, state: &mut PoolState) -> Option<Block> {
        loop {
            let mut largest = state.free.last_entry()?;
            let Some(block) = largest.get_mut().pop_back() else {
                largest.remove();
                continue;
            };
            if largest.get().is_empty() {
                largest.remove();
            }
            state.pooled -= block.bytes() as u64;
            state.blocks -= 1;
            self.leaving.add(block.bytes() as u64);
            return Some(block);
        }
    }

    /// The *threshold and trim* rule: releases unused blocks, largest first, until at most `to_bytes` are kept.
    fn trim(&self, to_bytes: u64) -> u64 {
        let mut released = Vec::new();
        {
            let mut state = self.lock();
            while state.pooled > to_bytes {
                match self.take_largest(&mut state) {
                    Some(block) => released.push(block),
                    None => break,
                }
            }
        }
        self.let_go(released)
    }

    /// Releases `blocks`, already counted as leaving, deferred (which flushes their
    /// queues, so a full pool that waits for them (the *maximum* rule) does not depend on a later
    /// flush); returns their bytes.
    fn let_go(&self, blocks: Vec<Block>) -> u64 {
        let mut total = 0;
        for block in blocks {
            let bytes = block.bytes() as u64;
            total += bytes;
            let leaving = self.leaving.clone();
            block.release_deferred_then(Some(Box::new(move || leaving.done(bytes))));
        }
        total
    }

    /// The *maximum* rule: reserves `class` bytes of the maximum for a new block. Unused blocks are
    /// trimmed as needed, in one critical section so that threads cannot overshoot it;
    /// the blocks the pool let go count until their releases are done, and are waited
    /// for, unless a user event of the context is not set (one may hold them back for
    /// good): then, or when the blocks in use leave no room, it fails.
    /// A block of `memory` for `bytes`, pooled or new, or the bytes that were leaving when
    /// the maximum left no room for it (nothing was taken then).
    fn try_take(
        self: &Arc<Self>,
        bytes: usize,
        memory: Memory,
        queue: Option<&Queue>,
        site: &'static Location<'static>,
    ) -> Result<Taken> {
        let class = class_of(bytes, self.ctx.max_alloc);
        let lane = queue.map(|q| q.core.lane);
        let reused = self.pick(&mut self.lock(), class, memory, lane);
        let mut mem = match reused {
            Some(mut mem) => {
                mem.hand_out_again(site, lane);
                self.poison_fill(&mem, queue);
                mem
            }
            None => {
                if let Reserved::AfterLeaving { seen } = self.try_reserve(class as u64)? {
                    return Ok(Taken::AfterLeaving { seen });
                }
                let created = match self.create_block(class, memory, site) {
                    Err(e) if is_out_of_memory(&e) => {
                        self.trim(0);
                        self.create_block(class, memory, site)
                    }
                    other => other,
                };
                created.inspect_err(|_| self.unreserve(class as u64))?
            }
        };
        mem.set_home(Home::Owner(self.clone()));
        Ok(Taken::Block(mem))
    }

    /// The *maximum* rule: reserves `class` bytes, or says how many bytes
    /// were leaving (deferred releases not done) when it could not. `Err` when waiting for
    /// them could not help, or could be forever (a user event of the context is unset).
    fn try_reserve(&self, class: u64) -> Result<Reserved> {
        let Some(max) = self.options.max_bytes else {
            self.lock().in_use += class;
            return Ok(Reserved::Yes);
        };
        let mut released = Vec::new();
        let waiting = {
            let mut state = self.lock();
            let exhausted = Error::PoolExhausted {
                requested: class,
                max,
                in_use: state.in_use,
            };
            if state.in_use + class > max {
                return Err(exhausted);
            }
            while state.in_use + state.pooled + class > max {
                match self.take_largest(&mut state) {
                    Some(block) => released.push(block),
                    None => break,
                }
            }
            let leaving = self.leaving.bytes();
            if state.in_use + state.pooled + leaving + class <= max {
                state.in_use += class;
                None
            } else {
                Some((leaving, exhausted))
            }
        };
        self.let_go(released);
        let Some((seen, exhausted)) = waiting else {
            return Ok(Reserved::Yes);
        };
        if self.ctx.gates.count() != 0 {
            return Err(exhausted);
        }
        Ok(Reserved::AfterLeaving { seen })
    }

    fn unreserve(&self, class: u64) {
        let mut state = self.lock();
        state.in_use = state.in_use.saturating_sub(class);
    }

    fn create_block(
        &self,
        class: usize,
        memory: Memory,
        site: &'static Location<'static>,
    ) -> Result<Block> {
        let block = match memory {
            // SAFETY: no host memory to copy.
            Memory::Buffer => unsafe { Block::create(&self.ctx, class, ptr::null(), site) }?,
            // The *forced residency* rule is for buffers: migrating SVM needs OpenCL 2.1.
            Memory::Svm(kind) => return Block::create_svm(&self.ctx, class, kind, site),
        };
        if self.options.force_residency {
            // SAFETY: the pool's queue and the new block are live.
            let migrated = unsafe { ffi::enqueue_migrate(self.queue.as_raw(), block.raw()) }?;
            // SAFETY: `migrated` came from the enqueue above; its one reference is handed over.
            let event = unsafe { Event::from_raw_owned(migrated) };
            event.wait()?;
        }
        Ok(block)
    }
}

impl Owner for PoolInner {
    /// The *size classes* and *threshold and trim* rules: takes a block back from a
    /// released buffer. Returns whether the pool kept it (else it is released deferred).
    fn take_back(&self, mut mem: Block) -> bool {
        let class = mem.bytes() as u64;
        mem.given_back();
        // The next owner starts with no sub-buffers of the old owner's views, whatever
        // views it makes (the sub-buffers' *left behind at a change of owner* rule).
        // Outside the pool's lock: it may reset kernel arguments.
        mem.leave_subs_behind();
        let mut state = self.lock();
        state.in_use = state.in_use.saturating_sub(class);
        let keep = !self.closed.load(Ordering::Acquire)
            && state.pooled + class <= self.options.release_threshold;
        if keep {
            state.pooled += class;
            state.blocks += 1;
            mem.move_to(Bucket::Pooled);
            let key = (mem.bytes(), mem.memory);
            state.free.entry(key).or_default().push_back(mem);
        } else {
            self.leaving.add(class);
            drop(state);
            self.let_go(vec![mem]);
        }
        keep
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        self.trim(0);
    }
}

fn is_out_of_memory(e: &Error) -> bool {
    matches!(
        e.status().map(|s| s.code()),
        Some(ffi::codes::CL_MEM_OBJECT_ALLOCATION_FAILURE)
            | Some(ffi::codes::CL_OUT_OF_RESOURCES)
            | Some(ffi::codes::CL_OUT_OF_HOST_MEMORY)
    )
}

/// A pool of device blocks that are reused without waiting for the device.
///
/// A `Pool` is a cheap handle, like [`Context`](crate::Context): its clones share one pool
/// (its blocks, bounds and statistics), and may be used from any thread. When the last of
/// them is dropped, the pool's unused blocks are released, and blocks still in use are
/// released when they come back.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Context, Pool, PoolOptions};
/// let ctx = Context::from_env()?;
/// let queue = ctx.queue()?;
/// let pool = Pool::new(&ctx, PoolOptions::default())?;
/// for i in 0..10u32 {
///     let buf = pool.acquire::<u32>(1024)?; // one clCreateBuffer, then reuse
///     queue.fill(&buf, i)?;
///     buf.release()?; // back to the pool with its events: no wait
/// }
/// assert_eq!(ctx.memory_stats().driver_allocations, 1);
///
/// // A clone is the same pool: a block let go through one is reused through the other.
/// let other = pool.clone();
/// let reused = std::thread::spawn(move || other.acquire::<u32>(1024).map(drop));
/// reused.join().expect("the thread ran")?;
/// assert_eq!(ctx.memory_stats().driver_allocations, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
    /// Shared by the user's clones only (blocks hold `inner`): its drop closes the pool.
    _open: Arc<Open>,
}

/// The user's side of a pool: dropped with the last [`Pool`] handle.
struct Open(Arc<PoolInner>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.trim(0);
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("options", &self.inner.options)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Pool {
    /// A pool on `ctx`'s first device.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when its queue cannot be created, [`Error::Build`] when the poison
    /// kernel does not build.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Pool, PoolOptions};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(64 << 20))?;
    /// assert_eq!(pool.stats().in_use_bytes, 0); // nothing allocated yet
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(ctx: &Context, options: PoolOptions) -> Result<Pool> {
        let poison = if options.poison {
            let program =
                ctx.own_program("poison.cl", include_str!("../../../kernels/poison.cl"))?;
            Some(program.kernel("poison")?)
        } else {
            None
        };
        let inner = Arc::new(PoolInner {
            ctx: ctx.core().clone(),
            options,
            queue: ctx.queue()?,
            poison,
            state: Mutex::new(PoolState::default()),
            leaving: Arc::default(),
            closed: AtomicBool::new(false),
        });
        Ok(Pool {
            _open: Arc::new(Open(inner.clone())),
            inner,
        })
    }

    /// A buffer of `len` elements: a pooled block of its size class when there is one
    /// (the *inherited record* rule orders it after the block's earlier commands), else a new one.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLength`], [`Error::TooLarge`], [`Error::PoolExhausted`] (the *maximum* rule), or
    /// the driver's allocation error after one trim and retry.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Pool, PoolOptions};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let pool = Pool::new(&ctx, PoolOptions::default())?;
    /// let buf = pool.acquire::<f32>(100)?;
    /// queue.fill(&buf, 0.5)?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![0.5; 100]);
    /// buf.release()?; // back to the pool
    /// assert_eq!(pool.stats().pooled_blocks, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn acquire<T: Pod>(&self, len: usize) -> Result<ClBuffer<T>> {
        self.take::<T>(len, None, Location::caller())
    }

    /// The *stream-ordered reuse* rule: a buffer of `len` elements for use on `queue`, the stream-ordered form
    /// (`cudaMallocAsync`'s). It looks at the oldest eight pooled blocks of the size class
    /// (those passed over go to the back) and takes the first that a command on
    /// `queue` can use with no wait: every command recorded on it has ended, or ran on
    /// `queue` (when it is in order). Failing that, it allocates a new block while
    /// [`PoolOptions::max_bytes`] allows, so that queues do not wait on each other's
    /// blocks; only at the maximum does it hand out a block still in use on another
    /// queue, ordered after those commands by a device-side wait (*inherited record*). With
    /// [`PoolOptions::poison`], a reused block is poisoned on `queue` (the *poison* rule).
    ///
    /// So if, whenever it calls `acquire_on`, a program holds or has commands pending on
    /// at most `k` blocks of a class (`k` below eight), the pool makes at most `k + 1`
    /// blocks of that class, whatever the device's timing: a pipeline that releases each
    /// block with [`ClBuffer::release_deferred`] once its last command is enqueued, and
    /// waits for a chunk's last command (say its read-back) before the block for the
    /// chunk `k + 1` later is acquired, stays within `k + 1` blocks.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Context, Pool, PoolOptions};
    /// let ctx = Context::from_env()?;
    /// let (a, b) = (ctx.queue()?, ctx.queue()?);
    /// let pool = Pool::new(&ctx, PoolOptions::default())?;
    /// for i in 0..10u32 {
    ///     for queue in [&a, &b] {
    ///         let buf = pool.acquire_on::<u32>(queue, 1024)?;
    ///         queue.fill(&buf, i)?;
    ///         buf.release_deferred(); // back to the pool; the next acquire_on reuses it
    ///     }
    /// }
    /// // At most one block per queue: neither queue waits on the other's (one block in
    /// // all when it is idle by the time the other queue asks).
    /// assert!(ctx.memory_stats().driver_allocations <= 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `queue` belongs to another context (nothing is
    /// taken from the pool); else as [`Pool::acquire`].
    #[track_caller]
    pub fn acquire_on<T: Pod>(&self, queue: &Queue, len: usize) -> Result<ClBuffer<T>> {
        if queue.core.ctx.id != self.inner.ctx.id {
            return Err(Error::context_mismatch(
                "queue",
                Some(queue.core.ctx.raw()),
                self.inner.ctx.raw(),
            ));
        }
        self.take::<T>(len, Some(queue), Location::caller())
    }

    fn take<T: Pod>(
        &self,
        len: usize,
        queue: Option<&Queue>,
        site: &'static Location<'static>,
    ) -> Result<ClBuffer<T>> {
        let bytes = Block::check_size::<T>(&self.inner.ctx, len)?;
        let block = self.take_block(bytes, Memory::Buffer, queue, site)?;
        Ok(ClBuffer::from_block(block, len))
    }

    /// A block of `memory` for `bytes`, waiting for leaving bytes as the *maximum* rule
    /// says.
    fn take_block(
        &self,
        bytes: usize,
        memory: Memory,
        queue: Option<&Queue>,
        site: &'static Location<'static>,
    ) -> Result<Block> {
        loop {
            match self.inner.try_take(bytes, memory, queue, site)? {
                Taken::Block(block) => return Ok(block),
                Taken::AfterLeaving { seen } => self.inner.leaving.wait_change(seen, WAIT_SLICE),
            }
        }
    }

    /// Shared virtual memory of `len` elements of `kind` ([`Context::svm`]), pooled like
    /// buffers: a pooled allocation of the size class and kind when there is one, ordered
    /// after its earlier commands (the *inherited record* rule), else a new one. Buffers
    /// and each kind of SVM are kept apart; the options apply to all, but for
    /// [`PoolOptions::force_residency`], which migrates buffers only.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when a device of the context does not report `kind`; else as
    /// [`Pool::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Pool, PoolOptions, SvmKind};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let pool = Pool::new(&ctx, PoolOptions::default())?;
    /// if !ctx.device().supports_svm(SvmKind::Coarse) {
    ///     return Ok(());
    /// }
    /// for i in 0..10u32 {
    ///     let svm = pool.acquire_svm::<u32>(1024, SvmKind::Coarse)?; // one clSVMAlloc
    ///     queue.fill_svm(&svm, i)?;
    ///     assert!(svm.release()?.recycled); // back to the pool with its events: no wait
    /// }
    /// assert_eq!(ctx.memory_stats().driver_allocations, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn acquire_svm<T: Pod>(&self, len: usize, kind: SvmKind) -> Result<SvmBuffer<T>> {
        self.take_svm(len, kind, None, Location::caller())
    }

    /// [`Pool::acquire_svm`] in the stream-ordered form of [`Pool::acquire_on`].
    ///
    /// # Errors
    ///
    /// As [`Pool::acquire_on`] and [`Pool::acquire_svm`].
    #[track_caller]
    pub fn acquire_svm_on<T: Pod>(
        &self,
        queue: &Queue,
        len: usize,
        kind: SvmKind,
    ) -> Result<SvmBuffer<T>> {
        if queue.core.ctx.id != self.inner.ctx.id {
            return Err(Error::context_mismatch(
                "queue",
                Some(queue.core.ctx.raw()),
                self.inner.ctx.raw(),
            ));
        }
        self.take_svm(len, kind, Some(queue), Location::caller())
    }

    fn take_svm<T: Pod>(
        &self,
        len: usize,
        kind: SvmKind,
        queue: Option<&Queue>,
        site: &'static Location<'static>,
    ) -> Result<SvmBuffer<T>> {
        self.inner.ctx.check_svm(kind)?;
        let bytes = Block::check_size::<T>(&self.inner.ctx, len)?;
        let block = self.take_block(bytes, Memory::Svm(kind), queue, site)?;
        Ok(SvmBuffer::from_block(block, len))
    }

    /// [`Pool::acquire`] as a future: where the pool is at [`PoolOptions::max_bytes`] and
    /// bytes it let go are still leaving (deferred releases not done), the task waits for
    /// them without blocking its thread, woken as each is done.
    ///
    /// # Errors
    ///
    /// As [`Pool::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Context, Pool, PoolOptions};
    /// let ctx = Context::from_env()?;
    /// let pool = Pool::new(&ctx, PoolOptions::default().max_bytes(1 << 20))?;
    /// let buf = pollster::block_on(pool.acquire_async::<u32>(1024))?;
    /// assert_eq!(buf.len(), 1024);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn acquire_async<T: Pod>(
        &self,
        len: usize,
    ) -> impl std::future::Future<Output = Result<ClBuffer<T>>> + Send + 'static {
        self.take_async(len, None, Location::caller())
    }

    /// [`Pool::acquire_on`] as a future, waiting as [`Pool::acquire_async`] does.
    ///
    /// # Errors
    ///
    /// As [`Pool::acquire_on`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Pool, PoolOptions};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let pool = Pool::new(&ctx, PoolOptions::default())?;
    /// let data = pollster::block_on(async {
    ///     let buf = pool.acquire_on_async::<u32>(&queue, 64).await?;
    ///     queue.fill(&buf, 8)?;
    ///     queue.read_owned(&buf)?.await
    /// })?;
    /// assert_eq!(data, vec![8; 64]);
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn acquire_on_async<T: Pod>(
        &self,
        queue: &Queue,
        len: usize,
    ) -> impl std::future::Future<Output = Result<ClBuffer<T>>> + Send + 'static {
        let mismatch = (queue.core.ctx.id != self.inner.ctx.id).then(|| {
            Error::context_mismatch("queue", Some(queue.core.ctx.raw()), self.inner.ctx.raw())
        });
        let taken = self.take_async(len, Some(queue.clone()), Location::caller());
        async move {
            match mismatch {
                Some(e) => Err(e),
                None => taken.await,
            }
        }
    }

    fn take_async<T: Pod>(
        &self,
        len: usize,
        queue: Option<Queue>,
        site: &'static Location<'static>,
    ) -> impl std::future::Future<Output = Result<ClBuffer<T>>> + Send + 'static {
        let inner = self.inner.clone();
        // The watch of the wait for bytes to leave, while one is registered.
        let mut waiting: Option<Arc<Watch>> = None;
        std::future::poll_fn(move |cx| {
            // The panic of this task's waker, caught on the reaper's thread.
            if let Some(panic) = waiting.as_ref().and_then(|w| w.take_panic()) {
                std::panic::resume_unwind(panic);
            }
            let bytes = match Block::check_size::<T>(&inner.ctx, len) {
                Ok(bytes) => bytes,
                Err(e) => return std::task::Poll::Ready(Err(e)),
            };
            loop {
                match inner.try_take(bytes, Memory::Buffer, queue.as_ref(), site) {
                    Err(e) => return std::task::Poll::Ready(Err(e)),
                    Ok(Taken::Block(block)) => {
                        return std::task::Poll::Ready(Ok(ClBuffer::from_block(block, len)));
                    }
                    Ok(Taken::AfterLeaving { seen }) => {
                        // The registered watch with this poll's waker, or a new one once
                        // it has ended.
                        let watch = match &waiting {
                            Some(w) if !w.ended_or_wake(cx.waker()) => w.clone(),
                            _ => {
                                let w = Arc::new(Watch::default());
                                let _ = w.ended_or_wake(cx.waker());
                                waiting = Some(w.clone());
                                w
                            }
                        };
                        if !inner.leaving.changed_or_wake(seen, &watch) {
                            return std::task::Poll::Pending;
                        }
                    }
                }
            }
        })
    }

    /// Releases unused blocks until at most `to_bytes` are kept; returns the bytes let go.
    /// The releases are deferred: this never waits for the device.
    pub fn trim(&self, to_bytes: u64) -> u64 {
        self.inner.trim(to_bytes)
    }

    /// What the pool holds now.
    pub fn stats(&self) -> PoolStats {
        let state = self.inner.lock();
        PoolStats {
            in_use_bytes: state.in_use,
            pooled_bytes: state.pooled,
            pooled_blocks: state.blocks,
        }
    }
}

impl reuse::Reusable<Lane> for Block {
    fn free_for(&mut self, lane: Lane) -> bool {
        Block::free_for(self, lane)
    }
    fn holds_doomed(&mut self) -> bool {
        Block::holds_doomed(self)
    }
}
