//! The sub-buffers a block makes for views: kernel arguments, and transfers on part of a
//! buffer.
//!
//! # Rules
//!
//! - **On the root.** A view's sub-buffer is made on the memory object the block's own is
//!   part of (an arena's, or the one an adopted sub-buffer came from: OpenCL makes no
//!   sub-buffer of a sub-buffer), at the view's origin there, which must be a multiple of
//!   the device's `CL_DEVICE_MEM_BASE_ADDR_ALIGN` ([`Error::ViewMisaligned`]).
//! - **Kept for the block's life.** A block keeps every sub-buffer it makes, one per view
//!   (origin and length), and releases them only with its memory. NVIDIA's driver crashes
//!   in `clReleaseMemObject` of a sub-buffer while a newer one that a kernel has used lies
//!   inside it or overlaps it in part (seen with raw OpenCL calls on an H200, driver 580),
//!   and any holder of a reference (a command, a kernel argument) could be the one that
//!   releases it: so none is released while the block lives. A transfer makes one only
//!   while the block holds fewer than [`KEPT`] (it goes through the buffer itself
//!   otherwise); a kernel argument needs one, so the views a program passes to kernels
//!   bound the count.
//! - **Newest first, unbound first.** A block's release, after its wait and before its
//!   own `clReleaseMemObject`, releases its sub-buffers newest first (the order that
//!   driver survives), each after every kernel argument holding it has been reset to
//!   NULL (a driver that lets a kernel argument keep its memory object would release it
//!   later, out of that order).

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::ffi::{self, cl_mem};
use crate::util::next_id;

/// How many sub-buffers a block makes for transfers (the *kept for the block's life*
/// rule).
pub(crate) const KEPT: usize = 32;

/// A sub-buffer for one view, released when the block lets go of it.
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
        // SAFETY: `raw` came from clCreateSubBuffer and is released once, here, when the
        // last holder lets go: the block's release, newest first (the *newest first*
        // rule), or a command that ends after it.
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
    /// the block has none yet, for a device that places sub-buffers at multiples of
    /// `align` bytes; `None` for a transfer (`for_kernel` false) when the block holds
    /// [`KEPT`] already.
    pub(crate) fn get(
        &self,
        block: cl_mem,
        origin: usize,
        bytes: usize,
        align: usize,
        for_kernel: bool,
    ) -> Result<Option<Arc<SubMem>>> {
        let mut subs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sub) = subs.iter().find(|s| s.origin == origin && s.bytes == bytes) {
            check_align(sub.root_origin, align)?;
            return Ok(Some(sub.clone()));
        }
        if !for_kernel && subs.len() >= KEPT {
            return Ok(None);
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
        subs.push(sub.clone());
        Ok(Some(sub))
    }

    /// Releases every sub-buffer, newest first, each after `unbind` has reset the kernel
    /// arguments holding it (by ID): the *newest first, unbound first* rule. No command
    /// uses any of them any more.
    pub(crate) fn clear(&mut self, unbind: &dyn Fn(u64)) {
        let subs = self.0.get_mut().unwrap_or_else(PoisonError::into_inner);
        while let Some(sub) = subs.pop() {
            unbind(sub.id);
            drop(sub);
        }
    }

    /// Moves the sub-buffers out, leaving none.
    pub(crate) fn take(&mut self) -> Subs {
        Subs(Mutex::new(std::mem::take(
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner),
        )))
    }

    /// How many the block holds.
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
