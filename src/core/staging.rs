//! Pinned staging for blocking reads and read mappings: host memory the driver transfers
//! into directly.
//!
//! A blocking read enqueues without blocking (so that no record stays locked while the
//! host waits) and then waits for its command. Into ordinary (pageable) host memory,
//! NVIDIA completes such a read 13-14 µs after a blocking read of the same bytes would have
//! returned: it stages the data through pinned memory on a thread of its own. Into pinned
//! memory (a mapped `CL_MEM_ALLOC_HOST_PTR` buffer) the read completes when the transfer
//! does. So on a GPU a small blocking read goes through a pinned block of the queue's, and
//! the host copies it out (design trap "pageable reads complete late").
//!
//! # Rules
//!
//! - **Small only.** Reads up to [`STAGE_MAX`] bytes are staged; larger ones go straight
//!   to the caller's memory, where the transfer dwarfs the delay.
//! - **One reader per block.** A block is taken for one read and given back once that
//!   read has ended; at most [`KEEP`] blocks are kept per queue.
//! - **Staged read mappings.** A read mapping ([`Queue::map`](crate::Queue::map)) of up
//!   to [`STAGE_MAX`] bytes of a buffer the library made is a read into a pinned block,
//!   which the mapping keeps until it is unmapped: NVIDIA's non-blocking map, waited for,
//!   costs about 2 µs more than its blocking one, where the staged read costs less. It is
//!   recorded as a map, so the *mapped* rule of [`crate::record`] holds as for a driver's
//!   mapping, and its unmap is no command: the record lets go of the mapping and the block
//!   goes back. Writable mappings, and buffers adopted from other code (which may expect
//!   their own host memory back, as with `CL_MEM_USE_HOST_PTR`), map through the driver.
//! - **Mapped for life.** A block is mapped once when made and unmapped when let go; only
//!   its host address is used, never the buffer in a command.

use crate::util::sync::{Mutex, rank};
use std::ffi::c_void;

use super::echo::RawEvent;
use crate::error::Result;
use crate::ffi::{self, cl_command_queue, cl_context};

/// Reads up to this many bytes are staged (the *small only* rule).
pub(crate) const STAGE_MAX: usize = 1 << 20;

/// Blocks kept per queue (the *one reader per block* rule).
const KEEP: usize = 4;

/// One pinned block: a mapped `CL_MEM_ALLOC_HOST_PTR` buffer.
pub(crate) struct Pinned {
    mem: ffi::OwnedMem,
    ptr: *mut c_void,
    bytes: usize,
}

// SAFETY: `ptr` is the buffer's mapping: plain host memory, used by one reader at a time
// (the *one reader per block* rule), and unmapped before the buffer goes.
unsafe impl Send for Pinned {}

impl Pinned {
    /// The host address of the block's `bytes` bytes.
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// A new block of exactly `bytes`, mapped through `queue`.
    pub(crate) fn create(
        context: cl_context,
        queue: cl_command_queue,
        bytes: usize,
    ) -> Result<Pinned> {
        // SAFETY: clCreateBuffer returned the buffer with one reference, given to its owner.
        let mem = unsafe { ffi::OwnedMem::from_raw(ffi::create_pinned_buffer(context, bytes)?) };
        let mapped = {
            // The map joins the queue behind its commands, which a failing gate may be
            // failing right now: a command a driver meets mid-enqueue in a failure's
            // propagation crashes PoCL 3.1 (the gates' *no failure mid-enqueue* rule).
            let _enqueuing = super::gates::Enqueuing::begin();
            // SAFETY: `queue` and `mem` are live; the map waits on nothing.
            unsafe { ffi::enqueue_map(queue, mem.raw(), true, 0, bytes, &[]) }
        };
        // An error releases the buffer (its owner).
        let (event, ptr) = mapped?;
        // SAFETY: the map's event, with the enqueue's one reference (it waits behind the
        // queue's commands, so it may fail as a gate fails: its owner's release follows the
        // gates' *failure in flight* rule).
        let event = unsafe { RawEvent::from_raw(event) };
        event.wait();
        let status = ffi::execution_status(event.raw());
        drop(event);
        let pinned = Pinned { mem, ptr, bytes };
        match status {
            Ok(ffi::CL_COMPLETE) => Ok(pinned),
            Ok(status) | Err(status) => {
                pinned.release(queue, true);
                Err(crate::error::Error::cl("clEnqueueMapBuffer", status))
            }
        }
    }

    /// Unmaps the block through `queue` and releases it; logs what went wrong. `guarded`:
    /// the unmap joins the gates' *no failure mid-enqueue* handshake, as the map did; only
    /// where the caller holds no lock of the library (the handshake's holder must never
    /// wait on one), and the queue may be shared.
    pub(crate) fn release(self, queue: cl_command_queue, guarded: bool) {
        if !self.ptr.is_null() {
            let unmapped = {
                let _enqueuing = guarded.then(super::gates::Enqueuing::begin);
                // SAFETY: `ptr` is this buffer's mapping, unmapped once, here; nothing uses
                // it.
                unsafe { ffi::enqueue_unmap(queue, self.mem.raw(), self.ptr, &[]) }
            };
            match unmapped {
                Ok(event) => {
                    // SAFETY: the unmap's event, with the enqueue's one reference (as the
                    // map's).
                    unsafe { RawEvent::from_raw(event) }.wait();
                }
                Err(e) => {
                    log::warn!(target: "cl_lifetime::queue", "unmapping a staging block: {e}")
                }
            }
        }
        // Then the buffer, by its owner.
    }
}

/// The pinned blocks of one queue.
#[derive(Default)]
pub(crate) struct Staging {
    free: Mutex<Vec<Pinned>, rank::Staging>,
}

impl Staging {
    /// A block of at least `bytes` for one read: the smallest free one that fits, or a
    /// new one.
    pub(crate) fn take(
        &self,
        context: cl_context,
        queue: cl_command_queue,
        bytes: usize,
    ) -> Result<Pinned> {
        {
            let mut free = self.free.lock();
            let fit = free
                .iter()
                .enumerate()
                .filter(|(_, p)| p.bytes >= bytes)
                .min_by_key(|(_, p)| p.bytes)
                .map(|(i, _)| i);
            if let Some(i) = fit {
                return Ok(free.swap_remove(i));
            }
        }
        // Sizes rounded up, so that blocks serve reads of other sizes.
        Pinned::create(context, queue, bytes.next_power_of_two().max(4096))
    }

    /// Gives `block` back after its read has ended; lets the smallest go past [`KEEP`].
    pub(crate) fn give_back(&self, block: Pinned, queue: cl_command_queue) {
        let spare = {
            let mut free = self.free.lock();
            free.push(block);
            if free.len() > KEEP {
                let smallest = (0..free.len()).min_by_key(|&i| free[i].bytes).unwrap_or(0);
                Some(free.swap_remove(smallest))
            } else {
                None
            }
        };
        if let Some(spare) = spare {
            // After a read or a mapping ended, with no lock held.
            spare.release(queue, true);
        }
    }

    /// Lets every block go, through `queue` (the queue's drop).
    pub(crate) fn release_all(&mut self, queue: cl_command_queue) {
        let free = std::mem::take(self.free.get_mut());
        for block in free {
            // At the queue's drop, which may come under a lock (an event's last handle):
            // no other thread can enqueue on a queue being dropped.
            block.release(queue, false);
        }
    }
}
