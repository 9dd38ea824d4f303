//! The shared state of one command queue: what events and the enqueue protocol need to
//! know about the queue that produced a command.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::context::ContextCore;
use super::device::Device;
use crate::error::Result;
use crate::ffi::{self, cl_command_queue};
use crate::launch::Limits;
use crate::tracker::Lane;
use crate::util::next_id;

/// One command queue. Held by the public `Queue` handles and by every event the queue
/// produced, so a queue lives as long as a command of it may need a flush.
pub(crate) struct QueueCore {
    pub(crate) raw: cl_command_queue,
    pub(crate) lane: Lane,
    pub(crate) ctx: Arc<ContextCore>,
    /// The queue's device's limits, which launches are checked against.
    pub(crate) limits: Limits,
    /// Set by every enqueue, cleared by a flush.
    dirty: AtomicBool,
}

// SAFETY: a cl_command_queue may be used from any thread (OpenCL 3.0 appendix A.2: every
// call is thread-safe except clSetKernelArg); `dirty` is atomic.
unsafe impl Send for QueueCore {}
// SAFETY: as above.
unsafe impl Sync for QueueCore {}

impl QueueCore {
    /// A new queue of `ctx` on `device` (one of its devices).
    pub(crate) fn create(
        ctx: &Arc<ContextCore>,
        device: &Device,
        out_of_order: bool,
    ) -> Result<QueueCore> {
        let raw = ffi::create_queue(
            ctx.raw,
            device.id,
            out_of_order,
            opencl_major(device.version()),
        )?;
        Ok(QueueCore {
            raw,
            lane: Lane {
                id: next_id(),
                in_order: !out_of_order,
            },
            ctx: ctx.clone(),
            limits: device.limits,
            dirty: AtomicBool::new(false),
        })
    }

    /// Notes that a command was enqueued and not flushed yet.
    pub(crate) fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Flushes the queue if it has unflushed work: before an event of it enters another
    /// queue's wait list (design trap "flush before a cross-queue wait").
    pub(crate) fn flush_if_dirty(&self) -> Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            ffi::flush(self.raw)?;
        }
        Ok(())
    }

    /// Flushes the queue.
    pub(crate) fn flush(&self) -> Result<()> {
        self.dirty.store(false, Ordering::Release);
        ffi::flush(self.raw)
    }
}

impl Drop for QueueCore {
    fn drop(&mut self) {
        // SAFETY: `raw` came from clCreateCommandQueue* and is released once, here. The
        // release flushes the queue; its commands still complete.
        if let Err(e) = unsafe { ffi::release_queue(self.raw) } {
            log::error!(target: "cl_lifetime::queue", "{e}");
        }
    }
}

/// The major version in a `CL_DEVICE_VERSION` string (`OpenCL <major>.<minor> <vendor>`);
/// 1 when it cannot be read, the version whose entry points every platform has.
pub(crate) fn opencl_major(version: &str) -> u32 {
    version
        .strip_prefix("OpenCL ")
        .and_then(|v| v.split('.').next())
        .and_then(|major| major.trim().parse().ok())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::opencl_major;

    #[test]
    fn the_queue_entry_point_follows_the_device_version() {
        assert_eq!(opencl_major("OpenCL 1.2 Oclgrind 21.10"), 1);
        assert_eq!(opencl_major("OpenCL 3.0 CUDA"), 3);
        assert_eq!(opencl_major("OpenCL 3.0 PoCL HSTR: pthread-x86_64"), 3);
        assert_eq!(opencl_major("OpenCL 2.1 AMD-APP"), 2);
        assert_eq!(opencl_major("garbage"), 1);
        assert_eq!(opencl_major(""), 1);
    }
}
