//! The shared state of one context, which every queue, buffer and event of it reaches.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::util::sync::{Guard, Mutex, rank};
use std::time::Duration;

use super::device::{Device, SvmKind};
use super::driver::{self, Behaviour};
use super::gates::OpenGates;
use super::pins::Pins;
use super::reaper::{Parked, Reaper};
use super::shelf::Shelves;
use super::stats::{Ledger, Stats};
use crate::error::{Error, Result};
use crate::ffi::{self, cl_context};
use crate::util::next_id;

/// How long a release waits by default, after `clReleaseMemObject`, for the driver to free
/// the memory; [`Context::set_free_grace`](crate::Context::set_free_grace) changes it.
pub const FREE_GRACE: Duration = Duration::from_secs(2);

/// One OpenCL context and what the library keeps per context: its devices, counters,
/// ledger, reaper thread and open gates. Queues, buffers and programs hold it in an `Arc`,
/// so the context is released after the last of them.
pub(crate) struct ContextCore {
    owned: ffi::OwnedContext,
    pub(crate) id: u64,
    /// The first of `devices`: the default for queues.
    pub(crate) device: Device,
    pub(crate) devices: Vec<Device>,
    /// The smallest `CL_DEVICE_MAX_MEM_ALLOC_SIZE` of `devices`.
    pub(crate) max_alloc: u64,
    pub(crate) stats: Stats,
    pub(crate) ledger: Ledger,
    pub(crate) reaper: Reaper,
    /// Deferred releases a new buffer may take over (the reaper's *reclaim* rule).
    pub(crate) parked: Parked,
    /// The context's user events that have not been set.
    pub(crate) gates: Arc<OpenGates>,
    /// How long a release waits for the driver to free the memory, in nanoseconds.
    free_grace: AtomicU64,
    /// What each device's driver does, measured at its first context ([`super::driver`]),
    /// in the order of `devices`.
    pub(crate) behaviours: Vec<Behaviour>,
    /// On a driver whose events keep their commands' buffers: the records sharing a
    /// command with other records ([`super::pins`]).
    pub(crate) pins: Option<Pins>,
    /// The memory objects the context's blocks hold (by handle), with where each was
    /// handed out: one memory object is one block (a second adoption is refused).
    pub(crate) tracked: Mutex<HashMap<usize, &'static Location<'static>>, rank::Tracked>,
    /// The shelves of the roots the library makes sub-buffers on ([`super::shelf`]).
    pub(crate) shelves: Shelves,
    /// What the probe of SVM kernels found, coarse then fine, in a context of several
    /// devices ([`ContextCore::check_svm`]): `None` when they ran, else the device and
    /// what failed.
    svm_probed: [OnceLock<Option<(String, String)>>; 2],
}

/// Held across every `clSVMAlloc` and `clSVMFree` of the process (design trap "NVIDIA's
/// clSVMAlloc fails under concurrent calls"): one SVM allocation or free at a time, on
/// every driver. It is taken after any record lock and held across nothing else.
pub(crate) fn svm_calls() -> Guard<'static, ()> {
    static SVM_CALLS: Mutex<(), rank::SvmCalls> = Mutex::new(());
    SVM_CALLS.lock()
}

impl ContextCore {
    /// The context's handle: every queue, buffer and program of the library holds an
    /// `Arc` to this struct, so it is released after the last of them.
    #[inline]
    pub(crate) fn raw(&self) -> cl_context {
        self.owned.raw()
    }

    /// Notes that a block holds `raw`, handed out at `site`.
    pub(crate) fn track(&self, raw: ffi::cl_mem, site: &'static Location<'static>) {
        self.tracked.lock().insert(raw as usize, site);
    }

    /// Notes that no block holds `raw` any more (before its release: the driver may hand
    /// the handle out again).
    pub(crate) fn untrack(&self, raw: ffi::cl_mem) {
        self.tracked.lock().remove(&(raw as usize));
    }

    /// Where the block holding `raw` was handed out, if one does.
    pub(crate) fn tracked_at(&self, raw: ffi::cl_mem) -> Option<&'static Location<'static>> {
        self.tracked.lock().get(&(raw as usize)).copied()
    }

    /// Whether every device of the context can use shared virtual memory of `kind`:
    /// [`Error::Unsupported`] naming the capability and the first device that does not
    /// report it; in a context of several devices, also what the probe of kernels given
    /// SVM saw go wrong, measured at the context's first allocation of the kind (design
    /// trap "NVIDIA runs no SVM kernel in a context of two GPUs").
    pub(crate) fn check_svm(&self, kind: SvmKind) -> Result<()> {
        if let Some(device) = self.devices.iter().find(|d| !d.supports_svm(kind)) {
            return Err(Error::Unsupported {
                capability: kind.capability(),
                device: device.to_string(),
                failed: None,
            });
        }
        if self.devices.len() < 2 {
            return Ok(());
        }
        let probed = &self.svm_probed[usize::from(kind == SvmKind::Fine)];
        let failed = probed.get_or_init(|| {
            let failed =
                driver::svm_kernels_fail(self.raw(), &self.devices, kind == SvmKind::Fine, svm_calls);
            if let Some((device, why)) = &failed {
                log::warn!(target: "cl_lifetime::context", "{kind:?} SVM refused in this context: on {device}, {why}");
            }
            failed
        });
        match failed {
            Some((device, why)) => Err(Error::Unsupported {
                capability: kind.capability(),
                device: device.clone(),
                failed: Some(why.clone()),
            }),
            None => Ok(()),
        }
    }

    /// A new context over `devices` (at least one, all of one platform).
    pub(crate) fn create(devices: &[Device]) -> Result<ContextCore> {
        let Some(first) = devices.first() else {
            return Err(Error::NoDevice {
                looked_for: "a context over no devices".to_string(),
                found: Vec::new(),
                hint: "pass at least one device (Device::all lists them)",
            });
        };
        let ids: Vec<_> = devices.iter().map(|d| d.id).collect();
        // SAFETY: clCreateContext returned the context with one reference, given to its
        // owner.
        let owned = unsafe { ffi::OwnedContext::from_raw(ffi::create_context(&ids)?) };
        log::debug!(target: "cl_lifetime::context", "context on {devices:?}");
        Ok(ContextCore::adopt(owned, first, devices))
    }

    /// The context `owned` holds, over `devices` (`first` among them).
    pub(crate) fn adopt(
        owned: ffi::OwnedContext,
        first: &Device,
        devices: &[Device],
    ) -> ContextCore {
        let behaviours: Vec<Behaviour> = devices
            .iter()
            .map(|device| driver::behaviour(device, owned.raw()))
            .collect();
        ContextCore {
            owned,
            id: next_id(),
            device: first.clone(),
            devices: devices.to_vec(),
            max_alloc: devices
                .iter()
                .map(Device::max_alloc_bytes)
                .min()
                .unwrap_or(0),
            stats: Stats::default(),
            ledger: Ledger::default(),
            reaper: Reaper::default(),
            parked: Parked::default(),
            gates: Arc::default(),
            free_grace: AtomicU64::new(FREE_GRACE.as_nanos() as u64),
            pins: behaviours
                .iter()
                .any(Behaviour::events_keep_buffers)
                .then(Pins::default),
            behaviours,
            tracked: Mutex::default(),
            shelves: Shelves::default(),
            svm_probed: Default::default(),
        }
    }

    /// What the driver of `device` (one of the context's) does; the careful behaviour for
    /// a device the context does not list.
    pub(crate) fn behaviour(&self, device: &Device) -> Behaviour {
        self.devices
            .iter()
            .zip(&self.behaviours)
            .find(|(d, _)| d.id == device.id)
            .map_or(Behaviour::CAREFUL, |(_, b)| *b)
    }

    /// How long a release waits for the driver to free the memory.
    pub(crate) fn free_grace(&self) -> Duration {
        Duration::from_nanos(self.free_grace.load(Ordering::Relaxed))
    }

    pub(crate) fn set_free_grace(&self, grace: Duration) {
        let nanos = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        self.free_grace.store(nanos, Ordering::Relaxed);
    }
}

impl Drop for ContextCore {
    fn drop(&mut self) {
        // Shelved sub-buffers of roots other code released (an adopted buffer's): newest
        // made first, before the context.
        self.shelves.release_all();
        // Then the context, by its owner: the first field, dropped before the others.
    }
}
