//! What the measuring programs of cl-lifetime share (the examples of this package:
//! `compare`, `enqueue_cost`, `alloc_cost`, `release_stages`): raw-`opencl3` pieces (launches
//! in one dimension, a user-event gate, the raw side's event keeping) and, from the
//! library's own examples (`examples/common/mod.rs`), the device header, error mapping,
//! kernel arguments, event release, program handle and the `spin` calibration; and the
//! statistics and interleaved repetitions of their method ([`stats`]). Each example uses
//! part of it.

use std::ptr;

use opencl3::command_queue as clq;
use opencl3::event as cle;
use opencl3::types::{cl_command_queue, cl_context, cl_event, cl_kernel};

// The library's examples' shared pieces, one copy for both. In a library, clippy asks that
// a public function taking a raw handle be `unsafe`; `release_event` stays as the
// examples call it, on events they own.
#[path = "../../examples/common/mod.rs"]
#[allow(clippy::not_unsafe_ptr_arg_deref)]
mod common;
pub use common::{ProgramHandle, calibrate, cl_err, print_device, release_event, set_arg};

pub mod stats;
pub use stats::{Stats, Variant, interleave, interleave_with, median};

/// `clEnqueueNDRangeKernel` over `global` work items in one dimension, waiting on `wait`;
/// the caller owns the returned event.
///
/// # Safety
///
/// Every argument of `kernel` must be set, its buffers must hold what `global` work items
/// touch, and `wait` must hold live events.
#[inline]
pub unsafe fn enqueue_1d(
    queue: cl_command_queue,
    kernel: cl_kernel,
    global: usize,
    wait: &[cl_event],
) -> anyhow::Result<cl_event> {
    let global = [global];
    let wait_ptr = if wait.is_empty() {
        ptr::null()
    } else {
        wait.as_ptr()
    };
    // SAFETY: the caller vouches for the arguments, the buffers and the wait list; `global`
    // has one entry for work_dim 1; an empty wait list goes as a null pointer.
    unsafe {
        clq::enqueue_nd_range_kernel(
            queue,
            kernel,
            1,
            ptr::null(),
            global.as_ptr(),
            ptr::null(),
            wait.len() as u32,
            wait_ptr,
        )
    }
    .map_err(cl_err("clEnqueueNDRangeKernel"))
}

/// When raw code releases the events of its launches: the measuring examples' baseline
/// releases each at once; the others reproduce what the library's record does with them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// At once.
    No,
    /// After the batch is drained, off the clock.
    Drained,
    /// During the next batch's timed loop, one per launch (ended by then).
    Late,
}

/// The raw side's events of one batch of launches, kept as [`Keep`] says.
pub struct KeptEvents {
    keep: Keep,
    kept: Vec<cl_event>,
    /// `Keep::Late`: the previous batch's events, released one per launch.
    late: Vec<cl_event>,
}

impl KeptEvents {
    /// A batch; with `Keep::Late`, `previous` is what the last batch kept.
    pub fn new(keep: Keep, previous: Vec<cl_event>) -> KeptEvents {
        KeptEvents {
            keep,
            kept: Vec::new(),
            late: previous,
        }
    }

    /// The launch code is done with `event` (it owns its one reference): released now or
    /// kept; and with `Keep::Late`, one of the previous batch's events released.
    #[inline]
    pub fn done(&mut self, event: cl_event) -> anyhow::Result<()> {
        match self.keep {
            Keep::No => release_event(event)?,
            Keep::Drained | Keep::Late => self.kept.push(event),
        }
        self.late.pop().map_or(Ok(()), release_event)
    }

    /// The end of the timed loop: the previous batch's events not released yet go now.
    pub fn end_loop(&mut self) -> anyhow::Result<()> {
        self.late.drain(..).try_for_each(release_event)
    }

    /// After the drain, off the clock: `Keep::Drained` releases what it kept; `Keep::Late`
    /// returns it for the next batch.
    pub fn after_drain(&mut self) -> anyhow::Result<Vec<cl_event>> {
        self.end_loop()?;
        let kept = std::mem::take(&mut self.kept);
        match self.keep {
            Keep::Late => Ok(kept),
            Keep::No | Keep::Drained => {
                kept.into_iter().try_for_each(release_event)?;
                Ok(Vec::new())
            }
        }
    }
}

impl Drop for KeptEvents {
    /// A batch cut short by an error still gives its events back.
    fn drop(&mut self) {
        for event in self.kept.drain(..).chain(self.late.drain(..)) {
            let _ = release_event(event);
        }
    }
}

/// A raw user event that holds launches back. Dropping it opens it (if still closed, so
/// that nothing waits forever after an error) and releases it.
pub struct RawGate {
    /// The user event, for the wait lists of the launches it holds back.
    pub event: cl_event,
    open: bool,
}

impl RawGate {
    /// A closed gate in `context`.
    pub fn new(context: cl_context) -> anyhow::Result<RawGate> {
        let event = cle::create_user_event(context).map_err(cl_err("clCreateUserEvent"))?;
        Ok(RawGate { event, open: false })
    }

    /// Opens the gate: the launches waiting on it may run.
    pub fn open(&mut self) -> anyhow::Result<()> {
        self.open = true;
        cle::set_user_event_status(self.event, cle::CL_COMPLETE)
            .map_err(cl_err("clSetUserEventStatus"))
    }
}

impl Drop for RawGate {
    fn drop(&mut self) {
        if !self.open {
            if let Err(e) = self.open() {
                log::error!("opening a gate: {e}");
            }
        }
        if let Err(e) = release_event(self.event) {
            log::error!("{e}");
        }
    }
}

/// A buffer size in KiB or MiB.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
