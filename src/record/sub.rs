//! The sub-buffers a block makes for views passed to kernels, which transfers on those
//! views use too.
//!
//! # Rules
//!
//! - **On the root.** A view's sub-buffer is made on the memory object the block's own is
//!   part of (an arena's, or the one an adopted sub-buffer came from: OpenCL makes no
//!   sub-buffer of a sub-buffer), at the view's origin there, which must be a multiple of
//!   the device's `CL_DEVICE_MEM_BASE_ADDR_ALIGN` ([`Error::ViewMisaligned`]).
//! - **Any views, overlapping too.** Views of one block passed to kernels may overlap
//!   (OpenCL allows overlapping sub-buffers: reading them at once is defined, and the
//!   tracker's *sub-buffers* rule orders by bytes every command through overlapping ones
//!   where one writes). A view that starts where a kept sub-buffer does and ends within
//!   it is given that one (a longer buffer whose first elements are the view's); any other
//!   gets its own.
//! - **Found by range.** The kept sub-buffers are a map keyed by their region, so finding
//!   a view's costs the logarithm of their number: a launch or transfer on a view costs
//!   the same whatever the number of views its block has had.
//! - **Kept for the owner's life.** A block lets go of a sub-buffer only at its release,
//!   or when it changes owner (none is made again over the same bytes while its owner
//!   holds it), so a view launched every frame makes one; the distinct regions launched
//!   bound their number. A transfer on a view uses the view's kept sub-buffer, and makes
//!   none.
//! - **Left behind at a change of owner.** A block handed to a new owner (back to its
//!   pool, or a deferred release taken over) starts with no sub-buffers: its old owner's
//!   are [`LeftBehind`], and let go of as its release would (the rules below), once
//!   every command recorded on the block when it changed hands has ended: at once
//!   when they all have, else on the reaper thread. A sub-buffer keeps its parent alive,
//!   so the block may be released before them.
//! - **None for a refused launch.** A sub-buffer made for a launch that is then refused
//!   (a mapped buffer, another context's buffer or dependency, a failed dependency, the
//!   driver) goes again at once, unbound first, unless it was handed to another command
//!   meanwhile or a newer kept one overlaps it (the next rule's order): a refused launch
//!   leaves no sub-buffer behind but there.
//! - **Unbound first, newest first.** The block's release, after its wait and before its
//!   own `clReleaseMemObject`, lets go of its sub-buffers newest first (NVIDIA's driver
//!   crashes releasing a sub-buffer while a newer one that a kernel has used lies inside it
//!   or across it, and never crashed the other way round: design trap "overlapping
//!   sub-buffers on NVIDIA"), each after every
//!   kernel argument holding it has been reset to NULL (a driver that lets a kernel
//!   argument keep its memory object would release it later, when the argument is next
//!   set). The block alone holds each, so each goes exactly then.
//! - **Shelved, never released.** A sub-buffer on a root the library owns (the block's
//!   own memory object, or an arena's for a carve) is not released when its block lets go
//!   of it: it goes on the root's shelf, and a later view or carve of exactly its region
//!   takes it instead of making one; the root's release releases the shelf, newest made
//!   first, before itself ([`crate::core::shelf`], which says why: NVIDIA's driver crashes
//!   otherwise). Sub-buffers on a root other code owns (an adopted sub-buffer's) are
//!   released as above.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::util::sync::{Mutex, rank};

use super::hooks::ArgHolder;
use crate::core::context::ContextCore;
use crate::core::reaper::{Deferred, Step};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi::{self, cl_mem};
use crate::util::next_id;

/// A sub-buffer for one view, held by its block alone (and, for a moment, by a
/// [`Held`]): released when the block lets go of it.
pub(crate) struct SubMem {
    /// Its one reference (`None` only in its drop, which hands it to the shelf or
    /// releases it).
    mem: Option<ffi::OwnedMem>,
    /// Unique for the process, as blocks' IDs are (a kernel argument names it).
    id: u64,
    /// Its region of its block, in bytes.
    origin: usize,
    bytes: usize,
    /// Its origin in the root memory object.
    root_origin: usize,
    /// Found kept and handed to a command other than the launch that made it (set under
    /// the [`Subs`] lock): the *none for a refused launch* rule keeps it then.
    handed: AtomicBool,
    /// Its root and the root's context, when the root is the library's: its drop puts it
    /// on the root's shelf ([`crate::core::shelf`]) rather than releasing it.
    /// (The root outlives it: its block lets go of it before the root's release.)
    shelf: Option<(Arc<ContextCore>, ffi::UnownedMem)>,
}

impl SubMem {
    /// Its handle.
    #[inline]
    pub(crate) fn raw(&self) -> cl_mem {
        self.mem
            .as_ref()
            .map_or(std::ptr::null_mut(), ffi::OwnedMem::raw)
    }

    /// Its ID, by which kernel arguments name it.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether it shares a byte with `other`.
    fn overlaps(&self, other: &SubMem) -> bool {
        self.origin < other.origin + other.bytes && other.origin < self.origin + self.bytes
    }
}

impl Drop for SubMem {
    fn drop(&mut self) {
        // Let go of by the block's release, after its wait (no command uses it) and after
        // the kernel arguments holding it were reset.
        let Some(mem) = self.mem.take() else { return };
        let mem = match &self.shelf {
            Some((ctx, root)) => {
                match ctx
                    .shelves
                    .put(root.raw(), (self.root_origin, self.bytes), mem)
                {
                    Ok(()) => return,
                    Err(mem) => mem,
                }
            }
            None => mem,
        };
        // Released by its owner, as it was let go of above.
        drop(mem);
    }
}

/// A sub-buffer handed to a command: the memory object and the ID a kernel argument
/// names it by; and whether it was made for this command (the *none for a refused
/// launch* rule).
#[derive(Clone)]
pub(crate) struct Held(Arc<SubMem>, bool);

impl Held {
    /// Whether it was made for the command it is handed to (not found kept).
    pub(crate) fn is_new(&self) -> bool {
        self.1
    }

    pub(crate) fn raw(&self) -> cl_mem {
        self.0.raw()
    }

    pub(crate) fn id(&self) -> u64 {
        self.0.id
    }
}

/// A block's sub-buffers, by region (origin, bytes): the *found by range* rule.
#[derive(Default)]
pub(crate) struct Subs(Mutex<BTreeMap<(usize, usize), Arc<SubMem>>, rank::Subs>);

impl Subs {
    /// The kept sub-buffer for the view of `bytes` at `origin`: the same view, or one that
    /// starts where it does and holds all of it, if its root origin is a multiple of
    /// `align` bytes. What a transfer on a view uses; it makes none.
    pub(crate) fn kept(&self, (origin, bytes): (usize, usize), align: usize) -> Option<Held> {
        let subs = self.0.lock();
        find_kept(&subs, origin, bytes, align).ok().flatten()
    }

    /// The sub-buffer for the view of `bytes` at `origin` of `block` (a live memory
    /// object) passed to a kernel, on a device that places sub-buffers at multiples of
    /// `align` bytes: the kept one, or a new one, as the rules above give it. Where the
    /// root is the library's (`block` itself, or an arena's buffer when `block` is one
    /// of its carves) the *shelved* rule applies, through `ctx`.
    pub(crate) fn for_kernel(
        &self,
        block: cl_mem,
        (origin, bytes): (usize, usize),
        align: usize,
        (ctx, carve): (&Arc<ContextCore>, bool),
    ) -> Result<Held> {
        let mut subs = self.0.lock();
        if let Some(held) = find_kept(&subs, origin, bytes, align)? {
            log::trace!(target: "cl_lifetime::buffer", "view {origin}+{bytes} of {block:p}: kept sub-buffer {:p} ({}+{})", held.0.raw(), held.0.origin, held.0.bytes);
            return Ok(held);
        }
        // The *on the root* rule.
        let (root, root_origin, shelf) = match ffi::mem_parent(block)? {
            Some((root, offset)) => (root, offset + origin, carve.then_some(ctx)),
            None => (block, origin, Some(ctx)),
        };
        check_align(root_origin, align)?;
        // SAFETY: `root` is live: `block` is (the caller's), and a sub-buffer keeps the
        // object it was made from; the driver checks the region.
        // The creation's one reference goes to its owner.
        let make = || unsafe {
            ffi::create_sub_buffer(root, root_origin, bytes).map(|raw| ffi::OwnedMem::from_raw(raw))
        };
        let mem = match shelf {
            Some(ctx) => ctx.shelves.take_or_make(root, (root_origin, bytes), make)?,
            None => make()?,
        };
        let raw = mem.raw();
        let sub = Arc::new(SubMem {
            mem: Some(mem),
            id: next_id(),
            origin,
            bytes,
            root_origin,
            handed: AtomicBool::new(false),
            shelf: shelf.map(|ctx| (ctx.clone(), ffi::UnownedMem::new(root))),
        });
        log::trace!(target: "cl_lifetime::buffer", "view {origin}+{bytes} of {block:p}: new sub-buffer {raw:p} at {root_origin} of {root:p} ({} kept)", subs.len());
        subs.insert((origin, bytes), sub.clone());
        Ok(Held(sub, true))
    }

    /// The *none for a refused launch* rule: takes `held`, made for a launch that was
    /// refused, out of the kept ones, unless it was handed to another command since or a
    /// newer kept one overlaps it (released first, it would be released before that one).
    /// Returns it, for the caller to release once the kernel arguments holding it are
    /// reset. Only a refused launch comes here, so the scan for newer ones costs nothing
    /// on the launch path.
    pub(crate) fn forget_unused(&self, held: &Held) -> Option<Arc<SubMem>> {
        let mut subs = self.0.lock();
        let key = (held.0.origin, held.0.bytes);
        let kept = subs.get(&key).filter(|s| Arc::ptr_eq(s, &held.0))?;
        if kept.handed.load(Ordering::Relaxed)
            || subs
                .values()
                .any(|s| s.id > held.0.id && s.overlaps(&held.0))
        {
            return None;
        }
        subs.remove(&key)
    }

    /// Releases every sub-buffer, newest first, each after `unbind` has reset the kernel
    /// arguments holding it (by ID): the *unbound first, newest first* rule. No command
    /// uses any of them any more, and no [`Held`] is left (a view borrows its buffer).
    pub(crate) fn clear(&mut self, unbind: &dyn Fn(u64)) {
        let subs = std::mem::take(self.0.get_mut());
        let mut subs: Vec<Arc<SubMem>> = subs.into_values().collect();
        // IDs grow with each one made: the newest has the largest.
        subs.sort_unstable_by_key(|s| s.id);
        while let Some(sub) = subs.pop() {
            unbind(sub.id);
            drop(sub);
        }
    }

    /// Moves the sub-buffers out, leaving none.
    pub(crate) fn take(&mut self) -> Subs {
        Subs(Mutex::new(std::mem::take(self.0.get_mut())))
    }

    /// How many the block holds.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }
}

/// The sub-buffers a block's old owner made, left behind when the block changed hands
/// (the *left behind at a change of owner* rule): released, unbound first and newest
/// first, once `events` (every command recorded on the block then) have ended.
pub(crate) struct LeftBehind {
    subs: Subs,
    /// Flushed already, so that polling them sees them end.
    events: Vec<Event>,
    /// The kernels that may hold one of them as an argument.
    kernels: Vec<Weak<dyn ArgHolder>>,
}

impl LeftBehind {
    pub(crate) fn new(subs: Subs, events: Vec<Event>, kernels: Vec<Weak<dyn ArgHolder>>) -> Self {
        LeftBehind {
            subs,
            events,
            kernels,
        }
    }

    /// Whether every command that may have used them has ended (asks the driver; never
    /// blocks).
    pub(crate) fn ended(&self) -> bool {
        self.events.iter().all(|e| e.state().has_ended())
    }

    /// Releases them: call only once [`LeftBehind::ended`].
    pub(crate) fn release(&mut self) {
        // Before the memory: on rusticl an event keeps its command's buffers alive.
        self.events.clear();
        let kernels = std::mem::take(&mut self.kernels);
        self.subs.clear(&|id| {
            for kernel in kernels.iter().filter_map(Weak::upgrade) {
                kernel.unbind_sub(id);
            }
        });
    }
}

impl Deferred for LeftBehind {
    fn poll(&mut self, _hurry: bool) -> Step {
        if !self.ended() {
            return Step::Pending;
        }
        self.release();
        Step::Done
    }
}

/// The kept sub-buffer that starts at `origin` and holds `bytes` from it, checked against
/// `align`.
/// The shortest of them: the first key from `(origin, bytes)` on, if it starts at `origin`.
fn find_kept(
    subs: &BTreeMap<(usize, usize), Arc<SubMem>>,
    origin: usize,
    bytes: usize,
    align: usize,
) -> Result<Option<Held>> {
    match subs.range((origin, bytes)..=(origin, usize::MAX)).next() {
        Some((_, sub)) => {
            check_align(sub.root_origin, align)?;
            sub.handed.store(true, Ordering::Relaxed);
            Ok(Some(Held(sub.clone(), false)))
        }
        None => Ok(None),
    }
}

fn check_align(root_origin: usize, align: usize) -> Result<()> {
    if root_origin % align.max(1) == 0 {
        Ok(())
    } else {
        Err(Error::ViewMisaligned {
            byte_offset: root_origin,
            align,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_off_the_device_alignment_is_a_typed_error_naming_both() {
        assert!(check_align(0, 128).is_ok());
        assert!(check_align(256, 128).is_ok());
        assert!(check_align(7, 1).is_ok());
        assert!(matches!(
            check_align(4, 128),
            Err(Error::ViewMisaligned {
                byte_offset: 4,
                align: 128
            })
        ));
    }
}
