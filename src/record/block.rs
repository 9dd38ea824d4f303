//! A block: one allocation (a `cl_mem`, or a shared virtual memory pointer), its record,
//! its place in the ledger and its home.

use std::any::Any;
use std::ffi::c_void;
use std::panic::Location;
use std::ptr;
use std::sync::{Arc, Weak};

use crate::util::sync::{Guard, Mutex, rank};

use super::history::{MapStep, Record};
use super::hooks::{ArgHolder, Owner};
use super::sub::{Held, LeftBehind, Subs};
use crate::core::context::{ContextCore, svm_calls};
use crate::core::device::SvmKind;
use crate::core::stats::{Bucket, Source};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi::{self, Freed, cl_mem};
use crate::trace;
use crate::tracker::{Access, Lane};
use crate::util::next_id;

/// One device allocation and everything the library knows about it. A `ClBuffer` is a
/// typed handle to one; a pool keeps unused ones. Its drop releases it (the *release*
/// rules of [`crate::record`]).
pub(crate) struct Block {
    /// The allocation, owned: a buffer's reference, or a shared virtual memory allocation
    /// (`memory` says which); [`Alloc::Released`] once its release took it.
    pub(super) alloc: Alloc,
    /// What `alloc` is, and so how commands name it and how it is freed.
    pub(crate) memory: Memory,
    pub(crate) id: u64,
    pub(super) bytes: usize,
    pub(crate) ctx: Arc<ContextCore>,
    /// Shared only with the context's [`pins`](crate::core::pins), which may let go of
    /// its ended events from another thread.
    pub(super) record: Arc<Mutex<Record, rank::Record>>,
    pub(super) allocated_at: &'static Location<'static>,
    pub(super) freed: Option<Arc<Freed>>,
    /// Where the ledger counts its bytes.
    pub(super) bucket: Bucket,
    /// Where the block goes at its release instead of back to the driver.
    pub(super) home: Option<Home>,
    /// Kernels that may hold this block as an argument, reset at the release (the
    /// *unbind at release* rule of [`crate::kernel`]).
    kernels: Mutex<Vec<Weak<dyn ArgHolder>>, rank::BlockKernels>,
    /// Adopted from other code, which keeps its own reference: the release does not wait
    /// for the memory to be freed.
    pub(super) shared: bool,
    /// The sub-buffers of its views passed as kernel arguments ([`super::sub`]).
    pub(super) subs: Subs,
}

/// A block's allocation, with its owner.
pub(crate) enum Alloc {
    /// Taken by the block's release (or moved to another block).
    Released,
    /// A buffer's one reference.
    Buffer(ffi::OwnedMem),
    /// A shared virtual memory allocation of a kind, freed by the release alone.
    Svm(ffi::SvmAlloc, SvmKind),
}

impl Alloc {
    /// Its handle: the `cl_mem`, or the SVM allocation's address as one; null once
    /// released.
    #[inline]
    pub(crate) fn raw(&self) -> cl_mem {
        match self {
            Alloc::Buffer(mem) => mem.raw(),
            Alloc::Svm(svm, _) => svm.ptr().cast(),
            Alloc::Released => ptr::null_mut(),
        }
    }

    pub(crate) fn is_released(&self) -> bool {
        matches!(self, Alloc::Released)
    }
}

/// What a block's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Memory {
    /// A buffer: commands name it by its `cl_mem`; `clReleaseMemObject` releases it, and
    /// the driver frees it when its last reference goes (the destructor callback says
    /// when).
    Buffer,
    /// A shared virtual memory allocation: commands and kernels name it by address;
    /// `clSVMFree` frees it at once, whatever still uses it (so the release waits first,
    /// as for a buffer).
    Svm(SvmKind),
}

/// The owner a block returns to, or keeps alive.
pub(crate) enum Home {
    /// Taken back at release, with its record.
    Owner(Arc<dyn Owner>),
    /// Kept alive until the block's release is done (an arena, for its sub-buffers):
    /// never read, only held.
    KeepAlive(#[allow(dead_code)] Arc<dyn Any + Send + Sync>),
}

impl Block {
    /// The size check every allocation makes: `len` elements of `T`, at least one byte,
    /// within `CL_DEVICE_MAX_MEM_ALLOC_SIZE` of every device.
    pub(crate) fn check_size<T>(ctx: &ContextCore, len: usize) -> Result<usize> {
        if len == 0 || size_of::<T>() == 0 {
            return Err(Error::ZeroLength);
        }
        let max = ctx.max_alloc;
        len.checked_mul(size_of::<T>())
            .filter(|&b| b as u64 <= max)
            .ok_or(Error::TooLarge {
                bytes: (len as u64).saturating_mul(size_of::<T>() as u64),
                max,
            })
    }

    /// A new block of `bytes` from the driver, copied from `init` when it is not null,
    /// handed out at `site`: the one place the library creates buffers. An uninitialized
    /// one may take over a deferred release instead (the reaper's *reclaim* rule).
    ///
    /// # Safety
    ///
    /// `init` is null or points to `bytes` readable bytes.
    pub(crate) unsafe fn create(
        ctx: &Arc<ContextCore>,
        bytes: usize,
        init: *const c_void,
        site: &'static Location<'static>,
    ) -> Result<Block> {
        if init.is_null() {
            if let Some(block) = Block::reclaim(ctx, bytes, site) {
                return Ok(block);
            }
        }
        // SAFETY: as the caller vouches; the creation's one reference goes to its owner.
        let mem = unsafe { ffi::OwnedMem::from_raw(ffi::create_buffer(ctx.raw(), bytes, init)?) };
        Ok(Block::adopt(
            ctx,
            Alloc::Buffer(mem),
            bytes,
            site,
            Bucket::Live,
        ))
    }

    /// A new shared virtual memory allocation of `bytes`, of `kind`, handed out at
    /// `site`, holding whatever the driver left there (so marked fresh: the *zeroed
    /// before read* rule).
    pub(crate) fn create_svm(
        ctx: &Arc<ContextCore>,
        bytes: usize,
        kind: SvmKind,
        site: &'static Location<'static>,
    ) -> Result<Block> {
        ctx.check_svm(kind)?;
        let svm = {
            let _one_at_a_time = svm_calls();
            // SAFETY: every device of the context reports `kind` (checked above), the SVM
            // call lock is held, and the block holds its context.
            unsafe { ffi::SvmAlloc::alloc(ctx.raw(), bytes, kind == SvmKind::Fine) }?
        };
        Ok(Block::adopt(
            ctx,
            Alloc::Svm(svm, kind),
            bytes,
            site,
            Bucket::Live,
        ))
    }

    /// Marks the block as holding whatever the driver left in its memory (the *zeroed
    /// before read* rule).
    pub(crate) fn mark_fresh(&self) {
        self.lock_record().fresh = true;
    }

    /// [`Error::ContextMismatch`] for this buffer, used with the context `used_with`.
    pub(crate) fn context_mismatch(&self, used_with: ffi::cl_context) -> Error {
        Error::context_mismatch(
            format!("buffer allocated at {}", self.allocated_at),
            Some(self.ctx.raw()),
            used_with,
        )
    }

    /// A block for `raw`, a memory object of `ctx` made by other code, which keeps its
    /// reference; the block takes one of its own. Handed out at `site`.
    ///
    /// # Safety
    ///
    /// `raw` is a valid memory object.
    pub(crate) unsafe fn adopt_raw(
        ctx: &Arc<ContextCore>,
        raw: cl_mem,
        site: &'static Location<'static>,
    ) -> Result<Block> {
        let (bytes, context) = ffi::mem_size_and_context(raw)?;
        if context != ctx.raw() {
            return Err(Error::context_mismatch(
                format!("memory object {raw:p}"),
                Some(context),
                ctx.raw(),
            ));
        }
        // One memory object is one block: two records of it would not order each other's
        // commands (a read through one would miss a write through the other).
        if let Some(at) = ctx.tracked_at(raw) {
            return Err(Error::AlreadyTracked {
                raw: raw as usize,
                allocated_at: at.to_string(),
            });
        }
        // SAFETY: `raw` is valid, as the caller vouches; this reference is the block's.
        let mem = unsafe { ffi::OwnedMem::retain(raw) }?;
        let mut block = Block::adopt(ctx, Alloc::Buffer(mem), bytes, site, Bucket::Live);
        block.shared = true;
        Ok(block)
    }

    /// A sub-buffer of `bytes` at `origin` of `parent`, handed out at `site`. Its bytes are
    /// the parent's, counted there (bucket `Freed`).
    pub(crate) fn carve(
        parent: &Block,
        origin: usize,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Block> {
        // The *shelved* rule of [`crate::core::shelf`]: one of the region, or a new one.
        let root = parent.raw();
        let mem = parent.ctx.shelves.take_or_make(root, (origin, bytes), || {
            // SAFETY: `parent` is live while borrowed; the driver checks the region.
            // The creation's one reference goes to its owner.
            unsafe {
                ffi::create_sub_buffer(root, origin, bytes).map(|raw| ffi::OwnedMem::from_raw(raw))
            }
        })?;
        // The block gives it back to the shelf at its release.
        Ok(Block::adopt(
            &parent.ctx,
            Alloc::Buffer(mem),
            bytes,
            site,
            Bucket::Freed,
        ))
    }

    /// `alloc` as a block of `bytes` handed out at `site`, counted in `bucket` (`Live` for
    /// a new allocation).
    fn adopt(
        ctx: &Arc<ContextCore>,
        alloc: Alloc,
        bytes: usize,
        site: &'static Location<'static>,
        bucket: Bucket,
    ) -> Block {
        let raw = alloc.raw();
        let memory = match alloc {
            Alloc::Svm(_, kind) => Memory::Svm(kind),
            Alloc::Buffer(_) | Alloc::Released => Memory::Buffer,
        };
        let freed = match memory {
            // A carve (counted `Freed`): its memory is its arena's, and its release puts
            // it on the arena's shelf, where it may be taken again ([`crate::core::shelf`]):
            // nothing to watch.
            Memory::Buffer if bucket == Bucket::Freed => {
                ctx.track(raw, site);
                None
            }
            Memory::Buffer => {
                ctx.track(raw, site);
                // SAFETY: `raw` is valid, and one reference to it is owned here.
                unsafe { ffi::watch_free(raw) }
            }
            // Freed inside clSVMFree: nothing to watch.
            Memory::Svm(_) => None,
        };
        let mut block = Block {
            alloc,
            memory,
            id: next_id(),
            bytes,
            ctx: ctx.clone(),
            record: Arc::default(),
            allocated_at: site,
            freed,
            bucket: Bucket::Freed,
            home: None,
            kernels: Mutex::default(),
            shared: false,
            subs: Subs::default(),
        };
        if bucket == Bucket::Live {
            log::debug!(target: "cl_lifetime::buffer", "allocated {bytes} bytes at {site}");
            block.move_to(Bucket::Live);
            ctx.ledger
                .handed_out(block.id, bytes as u64, site, Source::Driver);
        }
        block
    }

    /// Moves the block's bytes to `to` in the ledger: the one place a block's bytes change
    /// buckets.
    pub(crate) fn move_to(&mut self, to: Bucket) {
        self.ctx.ledger.shift(self.bytes as u64, self.bucket, to);
        self.bucket = to;
        if crate::trace::on() {
            self.trace_move(to);
        }
    }

    #[cold]
    fn trace_move(&self, to: Bucket) {
        let phase = match to {
            Bucket::Live => trace::Phase::Live,
            Bucket::Pending => trace::Phase::Pending,
            Bucket::Pooled => trace::Phase::Pooled,
            Bucket::Freed => trace::Phase::Released,
        };
        let m = self.ctx.ledger.memory();
        let memory = [m.live_bytes, m.pending_release_bytes, m.pooled_bytes];
        trace::phase(self.id, self.ctx.id, self.bytes as u64, phase, memory);
    }

    /// The program no longer holds the block: it leaves the leak report.
    pub(crate) fn given_back(&self) {
        if self.bucket == Bucket::Live {
            self.ctx.ledger.given_back(self.id);
        }
    }

    /// Moves the block out, leaving a hollow `Block` whose drop does nothing.
    pub(crate) fn take_block(&mut self) -> Block {
        Block {
            alloc: std::mem::replace(&mut self.alloc, Alloc::Released),
            memory: self.memory,
            id: self.id,
            bytes: self.bytes,
            ctx: self.ctx.clone(),
            // The record itself moves, so that the context's pins still find it.
            record: std::mem::take(&mut self.record),
            allocated_at: self.allocated_at,
            freed: self.freed.take(),
            bucket: std::mem::replace(&mut self.bucket, Bucket::Freed),
            home: None,
            kernels: Mutex::new(std::mem::take(self.kernels.get_mut())),
            shared: self.shared,
            subs: self.subs.take(),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The buffer's `cl_mem`.
    pub(crate) fn raw(&self) -> cl_mem {
        debug_assert_eq!(self.memory, Memory::Buffer, "an SVM block has no cl_mem");
        self.alloc.raw()
    }

    /// The address of byte `offset` of a shared virtual memory block.
    pub(crate) fn svm_at(&self, offset: usize) -> *mut c_void {
        debug_assert!(
            matches!(self.memory, Memory::Svm(_)),
            "a buffer has no address"
        );
        debug_assert!(offset <= self.bytes);
        self.alloc.raw().cast::<u8>().wrapping_add(offset).cast()
    }

    /// Whether the block is shared virtual memory.
    pub(crate) fn is_svm(&self) -> bool {
        matches!(self.memory, Memory::Svm(_))
    }

    /// Hands a kept block out again, at `site`: it goes back to the live bytes and the
    /// failures of its earlier owner are forgotten, so none reaches the new owner's
    /// report.
    ///
    /// The *clean hand-over* rule: once a failure is possible, commands of the old owner
    /// that the new owner's first command on `lane` (any queue, without one) would wait
    /// on could still fail after any check made now (a gate failed later), and a driver
    /// fails a command whose dependency failed. So the new record holds, in their place,
    /// a gate that the waiter sets complete once they have all ended, whatever their
    /// status: the new owner's commands run after them and never fail with them. The
    /// old record is kept until then (its lent host memory with it). Commands ordered by
    /// `lane`'s own in-order queue need none.
    pub(crate) fn hand_out_again(&mut self, site: &'static Location<'static>, lane: Option<Lane>) {
        self.allocated_at = site;
        self.move_to(Bucket::Live);
        self.ctx
            .ledger
            .handed_out(self.id, self.bytes as u64, site, Source::Pool);
        let clean = {
            let mut record = self.record.lock();
            record.forget_failures();
            !crate::core::gates::failures_possible()
                || match lane {
                    Some(lane) => record.free_for(lane),
                    None => record.all_ended(),
                }
        };
        if !clean {
            self.stand_in_for_old_commands(site);
        }
    }

    /// The *clean hand-over* rule's gate, in place of the old owner's commands.
    fn stand_in_for_old_commands(&mut self, site: &'static Location<'static>) {
        // Their queues are flushed when a command of another queue waits on the gate
        // (`Event::flush_producer`), not here.
        let (pending, lane) = {
            let record = self.record.lock();
            (record.pending_events(), record.pending_lane())
        };
        let old = self.record.clone();
        let gates = &self.ctx.gates;
        match crate::event::gate::Gate::after_all(
            pending,
            self.ctx.raw(),
            gates,
            Box::new(old),
            site,
        ) {
            Ok(gate) => {
                let record = Arc::<Mutex<Record, rank::Record>>::default();
                let how = crate::record::history::Recorded {
                    // The in-order queue of every command it stands in for, whose order
                    // runs a command of that queue after them with no wait (*same-queue
                    // elision*); else a lane of its own, which no queue's order follows.
                    lane: lane.unwrap_or(Lane {
                        id: next_id(),
                        in_order: false,
                    }),
                    how: crate::tracker::Use {
                        access: Access::Write,
                        span: crate::tracker::Span::ALL,
                        late: false,
                    },
                    replaces: true,
                    failure_seen: false,
                };
                record.lock().record(how, gate.event.clone(), true, true);
                self.record = record;
            }
            Err(e) => log::warn!(
                target: "cl_lifetime::pool",
                "a pooled block handed out at {site}: no gate could stand in for its old owner's commands ({e}); the new owner's commands wait on them directly"
            ),
        }
    }

    pub(crate) fn set_home(&mut self, home: Home) {
        self.home = Some(home);
    }

    /// Hands the block to its owner, if it has one (a pool), leaving this one hollow:
    /// the one way a block goes back. Returns whether the owner kept it.
    pub(super) fn back_to_owner(&mut self) -> Option<bool> {
        match self.home.take() {
            Some(Home::Owner(owner)) => Some(owner.take_back(self.take_block())),
            other => {
                self.home = other;
                None
            }
        }
    }

    /// Whether the block's next owner could inherit a failure: see [`Record::holds_doomed`].
    pub(crate) fn holds_doomed(&mut self) -> bool {
        self.record.lock().holds_doomed()
    }

    /// Whether a command on `lane` could use this block with no wait (the pool's
    /// *stream-ordered reuse* rule): see [`Record::free_for`].
    pub(crate) fn free_for(&mut self, lane: Lane) -> bool {
        self.record.lock().free_for(lane)
    }

    /// The sub-buffer of the view of `bytes` at byte `origin` of this block for a kernel
    /// argument, on a device that places sub-buffers at multiples of `align` bytes: see
    /// [`super::sub`].
    pub(crate) fn sub_for_kernel(&self, origin: usize, bytes: usize, align: usize) -> Result<Held> {
        let carve = matches!(self.home, Some(Home::KeepAlive(_)));
        self.subs
            .for_kernel(self.alloc.raw(), (origin, bytes), align, (&self.ctx, carve))
    }

    /// The *none for a refused launch* rule of [`super::sub`]: `held`, made for a launch
    /// that was refused, goes again (its kernel arguments reset first), unless another
    /// command was handed it meanwhile.
    pub(crate) fn forget_unused_sub(&self, held: Held) {
        let Some(sub) = self.subs.forget_unused(&held) else {
            return;
        };
        drop(held);
        self.unbind_sub(sub.id());
        // The last reference, or the last but those of the same launch's other
        // arguments, which go with it: no command used it.
        drop(sub);
    }

    /// The view's kept sub-buffer, for a transfer: see [`super::sub`].
    pub(crate) fn kept_sub(&self, origin: usize, bytes: usize, align: usize) -> Option<Held> {
        self.subs.kept((origin, bytes), align)
    }

    /// How many sub-buffers of views the block holds.
    pub(crate) fn subs_kept(&self) -> usize {
        self.subs.len()
    }

    /// Resets the kernel arguments that hold the sub-buffer `sub_id` of this block (the
    /// sub-buffers' *unbound first* rule).
    fn unbind_sub(&self, sub_id: u64) {
        // The list is copied out first: a kernel's lock is never taken under it.
        let kernels: Vec<Weak<dyn ArgHolder>> = self.kernels.lock().clone();
        for kernel in kernels.iter().filter_map(Weak::upgrade) {
            kernel.unbind_sub(sub_id);
        }
    }

    /// The sub-buffers' *left behind at a change of owner* rule: the block, about to go
    /// to a new owner, keeps no sub-buffer of its old owner's views. They are released
    /// as [`Block::release_subs`] releases them, once every command recorded on the block
    /// now has ended: here when they all have, else on the reaper thread (with the
    /// commands' queues flushed, so that polling them sees them end).
    pub(crate) fn leave_subs_behind(&mut self) {
        let subs = self.subs.take();
        if subs.len() == 0 {
            return;
        }
        let events = {
            let mut record = self.record.lock();
            if record.all_ended() {
                Vec::new()
            } else {
                record.flush_producers();
                record.pending_events()
            }
        };
        let kernels = self.kernels.lock().clone();
        let mut left = LeftBehind::new(subs, events, kernels);
        if left.ended() {
            left.release();
        } else {
            self.ctx.reaper.submit(Box::new(left), true);
        }
    }

    /// Releases the block's sub-buffers (their *gone before the memory* rule).
    pub(super) fn release_subs(&mut self) {
        let mut subs = self.subs.take();
        subs.clear(&|id| self.unbind_sub(id));
    }

    /// Notes that `kernel` now holds this block, or a sub-buffer of it, as an argument.
    pub(crate) fn bound_to(&self, kernel: Weak<dyn ArgHolder>) {
        let mut kernels = self.kernels.lock();
        if !kernels.iter().any(|k| k.ptr_eq(&kernel)) {
            kernels.retain(|k| k.strong_count() > 0);
            kernels.push(kernel);
        }
    }

    /// The *unbind at release* rule: no kernel object keeps this block alive once it is
    /// released.
    pub(super) fn unbind_kernels(&mut self) {
        let kernels = std::mem::take(self.kernels.get_mut());
        for kernel in kernels.iter().filter_map(Weak::upgrade) {
            kernel.unbind(self.id);
        }
    }

    /// Locks the record (see the lock order in [`crate::record`]).
    pub(crate) fn lock_record(&self) -> Guard<'_, Record> {
        self.record.lock()
    }

    /// Whether other code holds its own reference to the memory (an adopted buffer).
    pub(crate) fn is_shared(&self) -> bool {
        self.shared
    }

    /// Ends a mapping of kind `access` in the record without an unmap command: the
    /// driver refused the unmap, so it holds no such mapping, or the mapping was a staged
    /// read (the *staged read mappings* rule of [`crate::core::staging`]).
    pub(crate) fn forget_mapping(&self, access: Access) {
        self.lock_record().apply_map(MapStep::Unmap(access));
    }

    /// How many events the record holds.
    pub(crate) fn record_len(&self) -> usize {
        self.lock_record().events().len()
    }

    /// Keeps `payload` (host memory a command uses) until `event` has ended (the *lent
    /// host memory* rule).
    pub(crate) fn keep_alive(&self, event: Event, payload: Box<dyn Any + Send>) {
        self.lock_record().keep_alive(event, payload);
    }
}
