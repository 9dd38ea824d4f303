//! What a block lets the layers above attach to it, without knowing them: an owner that
//! takes it back at its release (a pool), and kernels that hold it as an argument.

use super::block::Block;

/// Takes released blocks back with their records, instead of the driver (a pool).
pub(crate) trait Owner: Send + Sync {
    /// Takes back `block`, released by its user; returns whether it kept it (else it let
    /// it go, released deferred).
    fn take_back(&self, block: Block) -> bool;
}

/// A kernel object that may hold blocks as arguments: the *unbind at release* rule of
/// [`crate::kernel`] resets them before the block's memory is released.
pub(crate) trait ArgHolder: Send + Sync {
    /// Resets every argument that holds the block `block_id`, or a sub-buffer of it, to
    /// NULL.
    fn unbind(&self, block_id: u64);
    /// Resets every argument that holds the sub-buffer `sub_id` to NULL.
    fn unbind_sub(&self, sub_id: u64);
}
