//! One owner type for every kind of OpenCL handle the library holds references to:
//! [`Owned<K>`] holds one reference and gives it up when dropped, logging a refused
//! release; its `Send` and `Sync` are argued once, here. Every other type holds its
//! handles through owners, so it is `Send` and `Sync` by composition.
//!
//! The kinds with a plain release are here ([`Mem`], [`Queue`], [`Context`], [`Program`],
//! [`Kernel`], [`Event`]). The events the library holds are released by the gates'
//! *failure in flight* rule, which the core layer keeps, so their kind is implemented
//! there (`core::gates::EventKind`), over [`Event`].

use std::fmt;
use std::marker::PhantomData;

use super::{cl_command_queue, cl_context, cl_event, cl_kernel, cl_mem, cl_program};
use crate::error::Result;

/// A kind of OpenCL handle that the library counts references to.
///
/// # Safety
///
/// `Raw` is an OpenCL object handle (`cl_mem`, `cl_event`, ...): every OpenCL call on it
/// may be made from any thread (OpenCL 3.0, appendix A.2), so an owner of one reference
/// may be sent to another thread. Sharing one between threads is [`Shared`]'s contract.
pub(crate) unsafe trait Kind {
    /// The raw handle.
    type Raw: Copy + Eq + fmt::Pointer;
    /// What a refused release is logged under.
    const TARGET: &'static str;

    /// `clRetain*`.
    ///
    /// # Safety
    ///
    /// `raw` is a valid handle of this kind.
    unsafe fn retain(raw: Self::Raw) -> Result<()>;

    /// Gives up one reference: `clRelease*`, now or where the kind's rules say.
    ///
    /// # Safety
    ///
    /// The caller owns one reference to `raw` and gives it up here, exactly once.
    unsafe fn release(raw: Self::Raw) -> Result<()>;

    /// Notes that an owner now holds a reference (the census's counts).
    fn taken() {}
}

/// One reference to an OpenCL handle of kind `K`, given up when dropped.
pub(crate) struct Owned<K: Kind> {
    raw: K::Raw,
    kind: PhantomData<fn() -> K>,
}

/// A kind of handle whose every OpenCL call may be made by several threads at once: every
/// kind but kernels, whose `clSetKernelArg` is the one call that is not (OpenCL 3.0,
/// appendix A.2). A kernel's owner is shared only behind its kernel's lock.
///
/// # Safety
///
/// No OpenCL call on the kind's handles needs the caller to keep other threads out.
pub(crate) unsafe trait Shared: Kind {}

// SAFETY: an owner holds one reference to a handle, which `K`'s contract (an OpenCL object
// handle: every call on it may be made from any thread) lets any thread use and release.
unsafe impl<K: Kind> Send for Owned<K> {}
// SAFETY: `K`'s calls may be made by several threads at once (`Shared`'s contract), and
// `&Owned<K>` only reads the handle's value.
unsafe impl<K: Shared> Sync for Owned<K> {}

impl<K: Kind> Owned<K> {
    /// Takes over the one reference the caller owns.
    ///
    /// # Safety
    ///
    /// `raw` is a valid handle of kind `K` whose reference the caller gives up.
    pub(crate) unsafe fn from_raw(raw: K::Raw) -> Owned<K> {
        K::taken();
        Owned {
            raw,
            kind: PhantomData,
        }
    }

    /// Takes one more reference to `raw`.
    ///
    /// # Safety
    ///
    /// `raw` is a valid handle of kind `K`.
    pub(crate) unsafe fn retain(raw: K::Raw) -> Result<Owned<K>> {
        // SAFETY: as the caller vouches.
        unsafe { K::retain(raw) }?;
        // SAFETY: the reference was just taken, for this owner.
        Ok(unsafe { Owned::from_raw(raw) })
    }

    /// Another owner of the same handle, with a reference of its own.
    pub(crate) fn try_clone(&self) -> Result<Owned<K>> {
        // SAFETY: the handle is live: this owner holds a reference.
        unsafe { Owned::retain(self.raw) }
    }

    /// The handle, for a call that borrows it; live while `self` is.
    #[inline]
    pub(crate) fn raw(&self) -> K::Raw {
        self.raw
    }

    /// Gives up the reference now and returns what the release returned (a drop logs a
    /// refusal instead).
    pub(crate) fn release(self) -> Result<()> {
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: the owner's one reference, given up here, once: `forget` keeps its drop
        // from giving it up again.
        unsafe { K::release(raw) }
    }
}

impl<K: Kind> Drop for Owned<K> {
    fn drop(&mut self) {
        // SAFETY: the owner's one reference, taken in `from_raw` or `retain`, is given up
        // here, once.
        if let Err(e) = unsafe { K::release(self.raw) } {
            log::error!(target: K::TARGET, "{e}");
        }
    }
}

impl<K: Kind> fmt::Debug for Owned<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:p}", self.raw)
    }
}

/// A handle of kind `K` that something its holder owns keeps alive (an event keeps its
/// context): copied, compared and passed to calls, never released.
pub(crate) struct Unowned<K: Kind> {
    raw: K::Raw,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Clone for Unowned<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Kind> Copy for Unowned<K> {}

// SAFETY: as for `Owned`: an OpenCL object handle, which any thread may use; it owns
// nothing, so nothing is released.
unsafe impl<K: Kind> Send for Unowned<K> {}
// SAFETY: as for `Owned`.
unsafe impl<K: Shared> Sync for Unowned<K> {}

impl<K: Kind> Unowned<K> {
    /// `raw`, kept alive by what its holder owns as long as the holder uses it.
    pub(crate) fn new(raw: K::Raw) -> Unowned<K> {
        Unowned {
            raw,
            kind: PhantomData,
        }
    }

    /// The handle.
    #[inline]
    pub(crate) fn raw(self) -> K::Raw {
        self.raw
    }
}

/// Declares the kinds with a plain `clRetain*`/`clRelease*` pair.
macro_rules! kinds {
    ($($(#[$doc:meta])* $name:ident($raw:ty, $retain:ident, $release:ident, $target:literal $(, $shared:ident)?);)*) => {$(
        $(#[$doc])*
        pub(crate) enum $name {}

        // SAFETY: `$raw` is an OpenCL object handle.
        unsafe impl Kind for $name {
            type Raw = $raw;
            const TARGET: &'static str = $target;

            unsafe fn retain(raw: $raw) -> Result<()> {
                // SAFETY: as the caller vouches.
                unsafe { super::$retain(raw) }
            }

            unsafe fn release(raw: $raw) -> Result<()> {
                // SAFETY: as the caller vouches.
                unsafe { super::$release(raw) }
            }
        }

        $(
            // SAFETY: every OpenCL call on `$raw` may be made by several threads at once
            // (OpenCL 3.0 appendix A.2 excepts only `clSetKernelArg`).
            unsafe impl $shared for $name {}
        )?
    )*};
}

kinds! {
    /// Memory objects: buffers, sub-buffers, pinned staging blocks.
    Mem(cl_mem, retain_mem, release_mem, "cl_lifetime::buffer", Shared);
    /// Command queues.
    Queue(cl_command_queue, retain_queue, release_queue, "cl_lifetime::queue", Shared);
    /// Contexts.
    Context(cl_context, retain_context, release_context, "cl_lifetime::context", Shared);
    /// Programs.
    Program(cl_program, retain_program, release_program, "cl_lifetime::program", Shared);
    /// Kernel objects: `Send`, not `Sync` (`clSetKernelArg`), so shared only behind a lock.
    Kernel(cl_kernel, retain_kernel, release_kernel, "cl_lifetime::program");
    /// Events released at once: what the core layer's kind of event, whose releases follow
    /// its rules, releases through.
    Event(cl_event, retain_event, release_event, "cl_lifetime::event", Shared);
}
