//! The sub-buffers a block makes for views passed as kernel arguments.
//!
//! # Rules
//!
//! - **On the root.** A view's sub-buffer is made on the memory object the block's own is
//!   part of (an arena's, or the one an adopted sub-buffer came from: OpenCL makes no
//!   sub-buffer of a sub-buffer), at the view's origin there, which must be a multiple of
//!   the device's `CL_DEVICE_MEM_BASE_ADDR_ALIGN` ([`Error::ViewMisaligned`]).
//! - **Kept, bounded.** A block keeps the sub-buffers of its views, up to [`KEPT`], so a
//!   view launched every frame makes one; the oldest goes when a new one would pass the
//!   bound. A launch keeps the sub-buffers it used until its command has ended (the
//!   record's *lent host memory* rule), so none is released while a command uses it.
//! - **Gone before the memory.** A block's release drops its sub-buffers after its wait
//!   and before `clReleaseMemObject`: none keeps the memory alive past it.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::ffi::{self, cl_mem};
use crate::util::next_id;

/// How many sub-buffers a block keeps (the *kept, bounded* rule).
pub(crate) const KEPT: usize = 32;

/// A sub-buffer for one view: released when its last holder lets go.
pub(crate) struct SubMem {
    raw: cl_mem,
    /// Unique for the process, as blocks' IDs are (a kernel argument names it).
    pub(crate) id: u64,
    /// The view's region of its block, in bytes.
    origin: usize,
    bytes: usize,
    /// Its origin in the root memory object.
    root_origin: usize,
}

// SAFETY: a cl_mem may be used from any thread (OpenCL 3.0 appendix A.2).
unsafe impl Send for SubMem {}
// SAFETY: as above; nothing in it changes after it is made.
unsafe impl Sync for SubMem {}

impl SubMem {
    pub(crate) fn raw(&self) -> cl_mem {
        self.raw
    }
}

impl Drop for SubMem {
    fn drop(&mut self) {
        // SAFETY: `raw` came from clCreateSubBuffer and is released once, here; every
        // command that used it has ended (the *kept, bounded* rule).
        if let Err(e) = unsafe { ffi::release_mem(self.raw) } {
            log::error!(target: "cl_lifetime::buffer", "releasing a view's sub-buffer: {e}");
        }
    }
}

/// A block's sub-buffers, oldest first.
#[derive(Default)]
pub(crate) struct Subs(Mutex<Vec<Arc<SubMem>>>);

impl Subs {
    /// The sub-buffer of `bytes` at `origin` of `block` (a live memory object), made if
    /// it is not kept yet, for a device that places sub-buffers at multiples of `align`
    /// bytes.
    pub(crate) fn get(
        &self,
        block: cl_mem,
        origin: usize,
        bytes: usize,
        align: usize,
    ) -> Result<Arc<SubMem>> {
        let mut subs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = subs
            .iter()
            .position(|s| s.origin == origin && s.bytes == bytes)
        {
            let sub = subs.remove(at);
            check_align(sub.root_origin, align)?;
            subs.push(sub.clone());
            return Ok(sub);
        }
        // The *on the root* rule.
        let (root, root_origin) = match ffi::mem_parent(block)? {
            Some((root, offset)) => (root, offset + origin),
            None => (block, origin),
        };
        check_align(root_origin, align)?;
        // SAFETY: `root` is live: `block` is (the caller's), and a sub-buffer keeps the
        // object it was made from; the driver checks the region.
        let raw = unsafe { ffi::create_sub_buffer(root, root_origin, bytes) }?;
        let sub = Arc::new(SubMem {
            raw,
            id: next_id(),
            origin,
            bytes,
            root_origin,
        });
        if subs.len() == KEPT {
            // Released here, or by the last command that used it once it has ended.
            drop(subs.remove(0));
        }
        subs.push(sub.clone());
        Ok(sub)
    }

    /// Drops every kept sub-buffer (the *gone before the memory* rule).
    pub(crate) fn clear(&mut self) {
        self.0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Moves the kept sub-buffers out, leaving none.
    pub(crate) fn take(&mut self) -> Subs {
        Subs(Mutex::new(std::mem::take(
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner),
        )))
    }

    /// How many are kept.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
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
