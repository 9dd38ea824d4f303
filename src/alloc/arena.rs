//! Arenas: one buffer carved into sub-buffers, for users who know their peak.
//!
//! # Rules
//!
//! - **Aligned carving.** An [`Arena`] is one buffer carved into sub-buffers whose origins
//!   are aligned to the devices' `CL_DEVICE_MEM_BASE_ADDR_ALIGN` (design trap "sub-buffer
//!   alignment"). Carved ranges never overlap; each sub-buffer keeps the arena alive (its
//!   home) and has its own event record.
//! - **Zeroed carves.** A carve is zeroed before its first read, as
//!   [`Context::buffer`] is (the record's *zeroed before read* rule): after
//!   [`Arena::reset`] a carve lies over the bytes of earlier ones, and the arena's own
//!   buffer may have taken over another buffer's memory (the reaper's *reclaim* rule).

use std::fmt;
use std::panic::Location;
use std::sync::Arc;

use crate::util::sync::{Mutex, rank};

use crate::api::buffer::ClBuffer;
use crate::api::context::Context;
use crate::error::{Error, Result};
use crate::pod::Pod;
use crate::record::block::{Block, Home};

pub(crate) struct ArenaInner {
    parent: Block,
    next: Mutex<usize, rank::ArenaNext>,
}

/// One buffer carved into aligned, non-overlapping sub-buffers (the *aligned carving*
/// rule): pre-allocation for users who know their peak. Each carve reads as zeros until
/// it is written, as a new buffer does (the *zeroed carves* rule), whatever earlier
/// carves over the same bytes held before a [`reset`](Arena::reset).
///
/// NVIDIA's driver (580) crashes when sub-buffers nested in others, carves and the
/// sub-buffers of [views](crate::View) of them, are released and the same bytes get new
/// ones (design trap "overlapping sub-buffers on NVIDIA"), so on every driver the arena
/// releases none before itself: a released carve, and a view's sub-buffer, waits on the
/// arena's shelf, and the next carve or view of exactly its region takes it
/// ([`Arena::kept_sub_buffers`] counts the idle ones). That costs a handle per region the
/// arena had at once, not memory, and a carve of a region carved before makes no
/// sub-buffer.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let arena = cl_lifetime::Arena::new(&ctx, 1 << 20)?;
/// let a = arena.carve::<f32>(1000)?;
/// let b = arena.carve::<u8>(10)?;
/// ctx.queue()?.fill(&a, 1.0)?;
/// assert!(arena.used() >= 4000 + 10);
/// # drop((a, b));
/// # Ok(())
/// # }
/// ```
pub struct Arena {
    inner: Arc<ArenaInner>,
    align: usize,
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("capacity", &self.capacity())
            .field("used", &self.used())
            .finish()
    }
}

impl Arena {
    /// An arena of `bytes` bytes.
    ///
    /// # Errors
    ///
    /// As [`Context::buffer`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let arena = cl_lifetime::Arena::new(&ctx, 1 << 16)?;
    /// assert_eq!((arena.capacity(), arena.used()), (1 << 16, 0));
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn new(ctx: &Context, bytes: usize) -> Result<Arena> {
        let parent = ctx.buffer::<u8>(bytes)?.into_block();
        let align = ctx
            .devices()
            .iter()
            .map(|d| d.base_addr_align_bytes())
            .max()
            .unwrap_or(1) as usize;
        Ok(Arena {
            inner: Arc::new(ArenaInner {
                parent,
                next: Mutex::new(0),
            }),
            align,
        })
    }

    /// A sub-buffer of `len` elements at the next aligned origin, zeroed before its first
    /// read as [`Context::buffer`] is: a first command that writes all of it costs no
    /// fill, any other is preceded by one (the *zeroed carves* rule).
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLength`], [`Error::ArenaFull`], or [`Error::Cl`] from
    /// `clCreateSubBuffer`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let arena = cl_lifetime::Arena::new(&ctx, 1 << 16)?;
    /// let (a, b) = (arena.carve::<u32>(16)?, arena.carve::<u32>(16)?);
    /// queue.fill(&a, 1)?;
    /// queue.fill(&b, 2)?; // b does not overlap a
    /// assert_eq!(queue.read_owned(&a)?.wait()?, [1; 16]);
    /// assert!(arena.carve::<u8>(1 << 17).is_err()); // larger than what is left
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn carve<T: Pod>(&self, len: usize) -> Result<ClBuffer<T>> {
        let site = Location::caller();
        let parent = &self.inner.parent;
        let bytes = Block::check_size::<T>(&parent.ctx, len)?;
        let mut next = self.inner.next.lock();
        let origin = next.next_multiple_of(self.align);
        let capacity = parent.bytes();
        if origin.checked_add(bytes).is_none_or(|end| end > capacity) {
            return Err(Error::ArenaFull {
                requested: bytes as u64,
                available: capacity.saturating_sub(origin) as u64,
            });
        }
        let mut block = Block::carve(parent, origin, bytes, site)?;
        *next = origin + bytes;
        block.mark_fresh();
        block.set_home(Home::KeepAlive(self.inner.clone()));
        Ok(ClBuffer::from_block(block, len))
    }

    /// Bytes carved so far, alignment gaps included.
    pub fn used(&self) -> usize {
        *self.inner.next.lock()
    }

    /// How many idle sub-buffers the arena holds: those of released carves, and of views
    /// of them that went to kernels, each waiting for the next carve or view of exactly
    /// its region, until the arena's release (the *shelved, never released* rule; NVIDIA's
    /// driver crashes otherwise). At most one per region the arena had at once: a handle
    /// each, not memory.
    pub fn kept_sub_buffers(&self) -> usize {
        self.inner
            .parent
            .ctx
            .shelves
            .idle_of(self.inner.parent.raw())
    }

    /// The arena's size in bytes.
    pub fn capacity(&self) -> usize {
        self.inner.parent.bytes()
    }

    /// Makes the whole arena free again. Later carves read as zeros until written, not
    /// as the earlier carves left the memory.
    ///
    /// # Errors
    ///
    /// [`Error::ArenaBusy`] while sub-buffers carved from it are alive.
    pub fn reset(&mut self) -> Result<()> {
        let live = Arc::strong_count(&self.inner) - 1;
        if live > 0 {
            return Err(Error::ArenaBusy { live });
        }
        *self.inner.next.lock() = 0;
        Ok(())
    }
}
