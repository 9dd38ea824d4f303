//! What a device's driver does that the library adapts to: measured once per device, at its
//! first context, never guessed from the platform's name.
//!
//! OpenCL leaves much to the implementation: whether an event keeps the buffers of its
//! command, whether a command keeps its wait list, when a flushed command really runs.
//! Drivers differ on each (design traps "rusticl's events keep their buffers", "rusticl
//! chains events", "rusticl ends a batch together"; Intel's CPU runtime keeps buffers as
//! rusticl does). A library tuned to a list of names gives every driver not on the list
//! the least careful path; this module measures instead.
//!
//! # Rules
//!
//! 1. **Measured, not named.** Each behaviour below is read by a probe of raw OpenCL calls
//!    on a queue and a 4 KiB buffer of the library's own (no library state is touched; one
//!    fill behind a user event fails, on the probe's own queue, released afterwards): see
//!    [`probe`].
//! 2. **Careful when unsure.** A probe that cannot run, times out, or reads what it does
//!    not expect leaves its behaviour at the careful value ([`Behaviour::CAREFUL`]), the one
//!    that is correct on every driver at some cost. `CL_LIFETIME_DRIVER=unknown` skips the
//!    probes and takes every careful value: that is the path a driver never seen gets when
//!    a probe cannot tell, and the test suite runs under it too.
//! 3. **Workarounds are measured.** A driver fault that only a workaround survives, where
//!    the workaround breaks another driver ([`Behaviour::mishandles_failures`]), has no
//!    careful value: its probe runs under `CL_LIFETIME_DRIVER=unknown` too, as it would for
//!    a driver never seen, and a probe that cannot tell leaves the workaround off. So has a
//!    careful path that would block a driver: a queue is flushed before a command that waits
//!    on a user event ([`Behaviour::ends_batches_together`]) only where the probe saw a flush
//!    return with a gated command in its queue, since a driver that runs a queue's commands
//!    in its flush (Oclgrind) would wait there for the gate for ever.
//! 4. **Named only where a probe would crash.** PoCL 5.0 to 6.x abort when one kernel runs
//!    at two widths at once ([`Behaviour::orders_kernel_widths`]); a probe for it would be
//!    that abort, so it is read from the version PoCL reports, and it is on wherever the
//!    probes are skipped.
//! 5. **Once per device.** The first context over a device probes it (a few hundred
//!    microseconds on PoCL, NVIDIA and Intel's CPU runtime; longer only where a behaviour
//!    is present and the probe waits out its limit); every later context of the process
//!    reuses the result.
//! 6. **The rest is correct everywhere.** What no probe can settle cheaply is handled by a
//!    path that holds on every driver: the echo after a failure (`super::echo`) on every
//!    queue, a command counted failed only once its driver ends it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use crate::util::sync::{Mutex, rank};
use std::time::{Duration, Instant};

use super::device::Device;
use super::echo::RawEvent;
use crate::ffi::{self, CL_COMPLETE, cl_context, cl_event};

/// The environment variable that makes the library treat every device as unknown:
/// `CL_LIFETIME_DRIVER=unknown` (rule *careful when unsure*).
pub const DRIVER_VAR: &str = "CL_LIFETIME_DRIVER";

/// What the library knows of a device's driver, measured at the device's first context
/// (see [`Context::driver`](crate::Context::driver)).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::DriverBehaviour;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let driver: DriverBehaviour = ctx.driver();
/// println!("{}: {driver:?}", ctx.device().name());
/// assert_eq!(ctx.driver_of(ctx.device()), driver);
/// // The careful values are correct on every driver; an unmeasured one gets them.
/// let careful = DriverBehaviour::CAREFUL;
/// assert!(careful.events_keep_buffers() && careful.chains_events() && !careful.measured());
/// assert!(driver.measured() || driver.events_keep_buffers());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Behaviour {
    events_keep_buffers: bool,
    chains_events: bool,
    ends_batches_together: bool,
    reports_failed_complete: bool,
    mishandles_failures: bool,
    orders_kernel_widths: bool,
    measured: bool,
    probe_time: Duration,
}

impl Behaviour {
    /// The value of every behaviour that is correct on every driver: what a device gets
    /// under `CL_LIFETIME_DRIVER=unknown`.
    pub const CAREFUL: Behaviour = Behaviour {
        events_keep_buffers: true,
        chains_events: true,
        ends_batches_together: true,
        reports_failed_complete: true,
        mishandles_failures: false,
        orders_kernel_widths: true,
        measured: false,
        probe_time: Duration::ZERO,
    };

    /// Whether a command's event keeps every buffer the command used until the event is
    /// released, so that a buffer whose commands have ended is not freed while anyone holds
    /// one of their events (rusticl, Intel's CPU runtime). The library then has the other
    /// records that hold a shared command let go of it before a release (`super::pins`).
    pub fn events_keep_buffers(&self) -> bool {
        self.events_keep_buffers
    }

    /// Whether a command's event keeps its wait list alive for as long as the event lives,
    /// so that a long chain of dependent commands is freed recursively and can overflow the
    /// stack (rusticl). The library then leaves commands that have ended out of wait lists.
    pub fn chains_events(&self) -> bool {
        self.chains_events
    }

    /// Whether a command flushed ahead of one that waits on other work (a user event,
    /// another queue's command) is reported ended only once that work has (rusticl 22.3).
    /// The library then flushes a queue before it enqueues a command waiting on such work.
    /// Careful value: on, but off wherever a flush was measured to wait for a user event
    /// (Oclgrind), even under `CL_LIFETIME_DRIVER=unknown`: that flush would block for ever.
    pub fn ends_batches_together(&self) -> bool {
        self.ends_batches_together
    }

    /// Whether a command that did not run because a dependency failed can read
    /// `CL_COMPLETE` (Intel's CPU runtime: `clWaitForEvents` on it says
    /// `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`, its status says complete, and it
    /// wrote nothing). The library reads a failure from its own record of the wait list
    /// on every driver; a driver measured to do this also gets the workarounds of
    /// [`Behaviour::mishandles_failures`].
    pub fn reports_failed_complete(&self) -> bool {
        self.reports_failed_complete
    }

    /// [`Behaviour::reports_failed_complete`] as measured, never its careful value, and
    /// measured under `CL_LIFETIME_DRIVER=unknown` too (rule *workarounds are measured*):
    /// Intel's CPU runtime, whose failure handling crashes in `clReleaseCommandQueue` of an
    /// out-of-order queue after a failed dependency, and frees a retained event when two of
    /// one command's dependencies fail together (`examples/intel_cpu.rs`). The library gives
    /// such a driver in-order queues (the specification lets an implementation run an
    /// out-of-order queue in order) and wait lists of one event, the others waited on by
    /// markers once a failure is possible. Not a driver where the probe could not tell:
    /// those markers give a command two dependencies that can end together, one failed,
    /// which PoCL finishes twice (design trap "PoCL's double finish"), so no path is
    /// correct on both, and only the measurement tells them apart.
    pub fn mishandles_failures(&self) -> bool {
        self.mishandles_failures
    }

    /// Whether launches of one kernel at different work sizes must not overlap: PoCL 5.0 to
    /// 6.x abort in `pocl_release_dlhandle_cache` when one kernel runs on two queues at once
    /// at different widths (design trap "PoCL's dlhandle cache"; fixed in PoCL 7.0). The
    /// library then has a launch wider than all before it of its kernel wait for that
    /// kernel's pending launches (the kernel layer's *widest first* rule). The one behaviour read
    /// from a version, not measured (rule *named only where a probe would crash*): its only
    /// probe is the abort. Careful value: on.
    pub fn orders_kernel_widths(&self) -> bool {
        self.orders_kernel_widths
    }

    /// Whether the values were measured (`false`: every one is careful, under
    /// `CL_LIFETIME_DRIVER=unknown`, but those of rule *workarounds are measured*:
    /// [`Behaviour::mishandles_failures`], and [`Behaviour::ends_batches_together`] where a
    /// flush waits for a gate).
    pub fn measured(&self) -> bool {
        self.measured
    }

    /// How long the probe took at the device's first context (under
    /// `CL_LIFETIME_DRIVER=unknown`, the probes of rule *workarounds are measured* alone).
    pub fn probe_time(&self) -> Duration {
        self.probe_time
    }
}

/// Whether `CL_LIFETIME_DRIVER=unknown` is set (read once per process).
pub(crate) fn treat_all_as_unknown() -> bool {
    static UNKNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *UNKNOWN.get_or_init(|| match std::env::var(DRIVER_VAR) {
        Ok(v) if v.trim().eq_ignore_ascii_case("unknown") => true,
        Ok(v) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("measure") => false,
        Ok(v) => {
            log::warn!(
                target: "cl_lifetime::driver",
                "{DRIVER_VAR}={v:?} is neither \"unknown\" nor \"measure\": drivers are measured"
            );
            false
        }
        Err(_) => false,
    })
}

/// The behaviour of `device`'s driver, probed on `context` (a context over it) the first
/// time the process asks (rule *once per device*).
pub(crate) fn behaviour(device: &Device, context: cl_context) -> Behaviour {
    // Probes one device at a time: two threads creating the first contexts of one device
    // would otherwise both probe it.
    static PROBED: Mutex<Vec<(usize, Behaviour)>, rank::Probed> = Mutex::new(Vec::new());
    let mut probed = PROBED.lock();
    let key = device.id.raw() as usize;
    if let Some((_, known)) = probed.iter().find(|(id, _)| *id == key) {
        return *known;
    }
    let measured = if treat_all_as_unknown() {
        probe_workarounds(device, context)
    } else {
        probe(device, context)
    };
    log::debug!(target: "cl_lifetime::driver", "{device}: {measured:?}");
    probed.push((key, measured));
    measured
}

/// How long a probe waits for something a driver without the behaviour does at once.
const PROBE_LIMIT: Duration = Duration::from_millis(100);

/// The probes of rule *measured, not named*, on a queue of their own.
fn probe(device: &Device, context: cl_context) -> Behaviour {
    let start = Instant::now();
    let major = device.opencl_major();
    let Ok(queue) = ffi::create_queue(context, device.id, false, false, major) else {
        return Behaviour::CAREFUL;
    };
    // SAFETY: the creation's one reference, handed over.
    let queue = unsafe { ffi::OwnedQueue::from_raw(queue) };
    let careful = Behaviour::CAREFUL;
    let mut found = Behaviour {
        events_keep_buffers: keeps_buffers(context, queue.raw())
            .unwrap_or(careful.events_keep_buffers),
        chains_events: chains_events(context, queue.raw()).unwrap_or(careful.chains_events),
        ends_batches_together: ends_batches_together(context, queue.raw())
            .unwrap_or(careful.ends_batches_together),
        reports_failed_complete: careful.reports_failed_complete,
        mishandles_failures: careful.mishandles_failures,
        orders_kernel_widths: pocl_dlhandle_cache(device),
        measured: true,
        probe_time: Duration::ZERO,
    };
    if let Some(complete) = reports_failed_complete(context, queue.raw()) {
        found.reports_failed_complete = complete;
        found.mishandles_failures = complete;
    }
    drop(queue);
    found.probe_time = start.elapsed();
    found
}

/// Under `CL_LIFETIME_DRIVER=unknown`: every careful value, and the probe of rule
/// *workarounds are measured*, on a queue of its own.
fn probe_workarounds(device: &Device, context: cl_context) -> Behaviour {
    let start = Instant::now();
    let major = device.opencl_major();
    let mut found = Behaviour::CAREFUL;
    if let Ok(queue) = ffi::create_queue(context, device.id, false, false, major) {
        // SAFETY: the creation's one reference, handed over.
        let queue = unsafe { ffi::OwnedQueue::from_raw(queue) };
        found.mishandles_failures = reports_failed_complete(context, queue.raw()) == Some(true);
        // The careful value, where a flush before a gated command does not block the host.
        found.ends_batches_together =
            flush_returns_behind_gates(context, queue.raw()) == Some(true);
    }
    found.probe_time = start.elapsed();
    found
}

/// Whether `device` is PoCL 5.0 to 6.x, whose dlhandle cache aborts when one kernel runs at
/// two widths at once (rule *named only where a probe would crash*): PoCL's device version
/// names it, and its driver version starts with its release (`5.0+debian`).
fn pocl_dlhandle_cache(device: &Device) -> bool {
    affected_pocl(device.version(), device.driver_version())
}

fn affected_pocl(device_version: &str, driver_version: &str) -> bool {
    if !device_version.contains(" PoCL") {
        return false;
    }
    let major: Option<u32> = driver_version
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|m| m.parse().ok());
    // A PoCL whose release cannot be read gets the ordering.
    major.is_none_or(|m| (5..7).contains(&m))
}

/// A fill of `mem`'s first 4 KiB on `queue` behind `wait`.
fn fill(queue: ffi::cl_command_queue, mem: ffi::cl_mem, wait: &[cl_event]) -> Option<RawEvent> {
    let pattern = 0u32;
    // SAFETY: `queue` and `mem` are live (the probe owns them), 4 KiB lie inside `mem`, the
    // pattern is 4 readable bytes, and every event of `wait` is live.
    let raw =
        unsafe { ffi::enqueue_fill(queue, mem, (&raw const pattern).cast(), 4, 0, 4096, wait) }
            .ok()?;
    // SAFETY: the enqueue's one reference, handed over.
    Some(unsafe { RawEvent::from_raw(raw) })
}

/// A user event of `context`, not set.
fn gate(context: cl_context) -> Option<RawEvent> {
    let raw = ffi::create_user_event(context).ok()?;
    // SAFETY: the creation's one reference, handed over.
    Some(unsafe { RawEvent::from_raw(raw) })
}

fn buffer(context: cl_context) -> Option<ffi::OwnedMem> {
    // SAFETY: no host pointer.
    let raw = unsafe { ffi::create_buffer(context, 4096, std::ptr::null()) }.ok()?;
    // SAFETY: the creation's one reference, handed over.
    Some(unsafe { ffi::OwnedMem::from_raw(raw) })
}

/// Whether a completed command's event keeps its buffer: the buffer's reference count
/// stays above the probe's own one while the event lives, or the buffer, released, is not
/// freed until the event goes.
fn keeps_buffers(context: cl_context, queue: ffi::cl_command_queue) -> Option<bool> {
    let owned = buffer(context)?;
    let raw = owned.raw();
    let event = fill(queue, raw, &[])?;
    ffi::wait_terminal(&[event.raw()]);
    if ffi::execution_status(event.raw()).ok()? != CL_COMPLETE {
        return None;
    }
    if ffi::mem_reference_count(raw).ok()? > 1 {
        return Some(true);
    }
    // SAFETY: `raw` is live (the probe owns it).
    let freed = unsafe { ffi::watch_free(raw) }?;
    drop(owned);
    let keeps = !freed.wait(PROBE_LIMIT);
    drop(event);
    if keeps {
        // Let the memory go before the context's first buffer, where the driver allows.
        freed.wait(PROBE_LIMIT);
    }
    Some(keeps)
}

/// Whether a completed command keeps its wait list: a user event it waited on keeps a
/// reference more than the probe's own while the command's event lives.
fn chains_events(context: cl_context, queue: ffi::cl_command_queue) -> Option<bool> {
    let owned = buffer(context)?;
    let gate = gate(context)?;
    let event = fill(queue, owned.raw(), &[gate.raw()])?;
    // Opened before any flush: a driver that runs commands at their flush (Oclgrind)
    // would wait there for the gate.
    ffi::set_user_event_status(gate.raw(), CL_COMPLETE).ok()?;
    ffi::wait_terminal(&[event.raw()]);
    if ffi::execution_status(event.raw()).ok()? != CL_COMPLETE {
        return None;
    }
    // A driver lets go of a command's dependencies on a thread of its own, a moment after
    // the command's status reads complete.
    let deadline = Instant::now() + PROBE_LIMIT;
    loop {
        if ffi::event_reference_count(gate.raw()).ok()? <= 1 {
            return Some(false);
        }
        if Instant::now() >= deadline {
            return Some(true);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether a command flushed ahead of a gated one ends only with it: a fill, then a fill
/// behind a user event, flushed; the first fill has not ended within [`PROBE_LIMIT`]
/// while the gate is closed. Not taken where the flush itself waited for the gate
/// ([`flush_returns_behind_gates`]): a flush before a gated command would block the host.
fn ends_batches_together(context: cl_context, queue: ffi::cl_command_queue) -> Option<bool> {
    flushed_behind_a_gate(context, queue, |first, opened| {
        let deadline = Instant::now() + PROBE_LIMIT;
        let ended_alone = loop {
            match ffi::execution_status(first) {
                Ok(CL_COMPLETE) => break !opened.load(Ordering::SeqCst),
                Ok(s) if s < 0 => break false,
                Err(_) => break false,
                Ok(_) if Instant::now() >= deadline => break false,
                Ok(_) => std::thread::sleep(Duration::from_micros(100)),
            }
        };
        !ended_alone
    })
}

/// Whether `clFlush` returns while the queue holds a command behind a closed user event:
/// `false` where the flush runs the queue's commands itself and so waits for the gate
/// (Oclgrind; rule *workarounds are measured*).
fn flush_returns_behind_gates(context: cl_context, queue: ffi::cl_command_queue) -> Option<bool> {
    flushed_behind_a_gate(context, queue, |_, _| true)
}

/// A fill, then a fill behind a user event, flushed, then `after_flush` given the first
/// fill and whether the gate was opened yet. A helper thread opens the gate once
/// `after_flush` has returned, or at twice [`PROBE_LIMIT`] whatever happens, so a driver
/// whose flush waits for the gate (Oclgrind) cannot hang the probe: there the answer is
/// `Some(false)`, without `after_flush`.
fn flushed_behind_a_gate(
    context: cl_context,
    queue: ffi::cl_command_queue,
    after_flush: impl FnOnce(cl_event, &AtomicBool) -> bool,
) -> Option<bool> {
    let owned = buffer(context)?;
    let gate = gate(context)?;
    let first = fill(queue, owned.raw(), &[])?;
    let gated = fill(queue, owned.raw(), &[gate.raw()])?;
    let opened = Arc::new(AtomicBool::new(false));
    let (open_now, wait_for_it) = mpsc::channel::<()>();
    // The helper's own reference to the gate.
    let helper_gate = gate.try_clone().ok()?;
    let helper = {
        let opened = opened.clone();
        std::thread::Builder::new()
            .name("cl-lifetime-probe".into())
            .spawn(move || {
                let _ = wait_for_it.recv_timeout(PROBE_LIMIT * 2);
                opened.store(true, Ordering::SeqCst);
                let _ = ffi::set_user_event_status(helper_gate.raw(), CL_COMPLETE);
            })
            .ok()?
    };
    let flushed = ffi::flush(queue).is_ok();
    // A flush that returned only once the helper opened the gate runs the queue's commands
    // itself, gate included (Oclgrind).
    let flush_waited = opened.load(Ordering::SeqCst);
    let answer = (!flush_waited).then(|| after_flush(first.raw(), &opened));
    let _ = open_now.send(());
    let _ = helper.join();
    ffi::wait_terminal(&[first.raw(), gated.raw()]);
    flushed.then_some(answer.unwrap_or(false))
}

/// Whether a command behind a failed user event reads `CL_COMPLETE`. The gate fails before
/// the queue is flushed (a driver that runs commands at their flush would wait there for
/// it), and the probe's queue is released afterwards, so a driver whose queue keeps a
/// failure for ever (current Mesa) keeps it only there.
fn reports_failed_complete(context: cl_context, queue: ffi::cl_command_queue) -> Option<bool> {
    let owned = buffer(context)?;
    let gate = gate(context)?;
    let gated = fill(queue, owned.raw(), &[gate.raw()])?;
    ffi::set_user_event_status(gate.raw(), -1).ok()?;
    ffi::flush(queue).ok()?;
    ffi::wait_terminal(&[gated.raw()]);
    match ffi::execution_status(gated.raw()).ok()? {
        CL_COMPLETE => Some(true),
        status if status < 0 => Some(false),
        _ => None,
    }
}

/// The probe of SVM in a context of several devices (design trap "NVIDIA runs no SVM
/// kernel in a context of two GPUs"): an allocation of `kind`, a kernel on each device
/// writing its own word of it through `clSetKernelArgSVMPointer`, and the words read back
/// through a map. `None` when every kernel completed and wrote its word; else the device
/// and what went wrong, for [`Error::Unsupported`](crate::Error::Unsupported). Its
/// allocation and free take `svm_calls` as every SVM allocation does.
pub(crate) fn svm_kernels_fail(
    context: cl_context,
    devices: &[Device],
    fine: bool,
    svm_calls: fn() -> crate::util::sync::Guard<'static, ()>,
) -> Option<(String, String)> {
    let words = devices.len();
    let at = {
        let _one_at_a_time = svm_calls();
        // SAFETY: every device of `context` reports the kind (the caller checked).
        match unsafe { ffi::svm_alloc(context, 4 * words, fine) } {
            Ok(at) => at,
            Err(e) => {
                return Some((
                    devices[0].to_string(),
                    format!("the probe's allocation failed: {e}"),
                ));
            }
        }
    };
    let outcome = svm_kernels_on(context, devices, at.cast::<i32>());
    let _one_at_a_time = svm_calls();
    // SAFETY: `at` came from clSVMAlloc above and is freed once; every command that used
    // it has ended (`svm_kernels_on` waits for each before it returns).
    if let Err(e) = unsafe { ffi::svm_free(context, at) } {
        log::debug!(target: "cl_lifetime::driver", "SVM probe: {e}");
    }
    outcome.err()
}

/// The kernels and the read-back of [`svm_kernels_fail`], on `words`, one `i32` per
/// device; every command it enqueues has ended when it returns.
fn svm_kernels_on(
    context: cl_context,
    devices: &[Device],
    words: *mut i32,
) -> std::result::Result<(), (String, String)> {
    let first = || devices[0].to_string();
    const SOURCE: &str =
        "__kernel void svm_probe(__global int *word, uint value) { *word = (int)value; }";
    let program = ffi::create_program(context, SOURCE).map_err(|e| (first(), e.to_string()))?;
    // SAFETY: the creation's one reference, handed over.
    let program = unsafe { ffi::OwnedProgram::from_raw(program) };
    let ids: Vec<_> = devices.iter().map(|d| d.id).collect();
    ffi::build_program(program.raw(), &ids, c"").map_err(|s| {
        let status = crate::error::ClStatus(s);
        (
            first(),
            format!("the probe's kernel did not build: {status}"),
        )
    })?;
    let kernel = ffi::create_kernel(program.raw(), c"svm_probe").map_err(|s| {
        (
            first(),
            format!("the probe's kernel: {}", crate::error::ClStatus(s)),
        )
    })?;
    // SAFETY: the creation's one reference, handed over.
    let kernel = unsafe { ffi::OwnedKernel::from_raw(kernel) };
    let mut queues = Vec::new();
    for (i, device) in devices.iter().enumerate() {
        let major = device.opencl_major();
        let queue = ffi::create_queue(context, device.id, false, false, major)
            .map_err(|e| (device.to_string(), e.to_string()))?;
        // SAFETY: the creation's one reference, handed over.
        let queue = unsafe { ffi::OwnedQueue::from_raw(queue) };
        let value = i as u32 + 1;
        // SAFETY: the kernel is the probe's own (no other thread sets its arguments);
        // `words` holds one i32 per device, so word `i` lies inside the allocation; the
        // value is 4 readable bytes, copied before the call returns; no event waits.
        let event = unsafe {
            ffi::set_arg_svm(kernel.raw(), 0, words.add(i).cast())
                .and_then(|()| ffi::set_arg_bytes(kernel.raw(), 1, &value.to_ne_bytes()))
                .and_then(|()| ffi::enqueue_kernel(queue.raw(), kernel.raw(), &[1], None, &[]))
        }
        .map_err(|s| {
            let status = crate::error::ClStatus(s);
            let why = format!("a kernel given an SVM pointer is refused with {status}");
            (device.to_string(), why)
        })?;
        // SAFETY: the enqueue's one reference, handed over.
        let event = unsafe { RawEvent::from_raw(event) };
        let _ = ffi::flush(queue.raw());
        event.wait();
        match ffi::execution_status(event.raw()) {
            Ok(CL_COMPLETE) => {}
            Ok(status) | Err(status) => {
                let status = crate::error::ClStatus(status);
                return Err((
                    device.to_string(),
                    format!("a kernel given an SVM pointer ended with {status}"),
                ));
            }
        }
        queues.push(queue);
    }
    let Some(queue) = queues.first() else {
        return Ok(());
    };
    let bytes = 4 * devices.len();
    // SAFETY: the queue is live, `words` holds `bytes` bytes of SVM, nothing waits.
    let mapped = unsafe { ffi::enqueue_svm_map(queue.raw(), words.cast(), false, bytes, &[]) }
        .map_err(|e| (first(), e.to_string()))?;
    // SAFETY: the enqueue's one reference, handed over.
    let mapped = unsafe { RawEvent::from_raw(mapped) };
    let _ = ffi::flush(queue.raw());
    mapped.wait();
    let seen: Vec<i32> = if ffi::execution_status(mapped.raw()) == Ok(CL_COMPLETE) {
        // SAFETY: the map completed, so the host may read the mapped words until the
        // unmap below.
        (0..devices.len())
            .map(|i| unsafe { words.add(i).read_volatile() })
            .collect()
    } else {
        Vec::new()
    };
    // SAFETY: `words` was mapped above, on this queue, and is unmapped once.
    let unmapped = unsafe { ffi::enqueue_svm_unmap(queue.raw(), words.cast(), &[]) }
        .map_err(|e| (first(), e.to_string()))?;
    // SAFETY: the enqueue's one reference, handed over.
    let unmapped = unsafe { RawEvent::from_raw(unmapped) };
    let _ = ffi::flush(queue.raw());
    unmapped.wait();
    let wanted: Vec<i32> = (1..=devices.len() as i32).collect();
    if seen != wanted {
        return Err((
            first(),
            format!("kernels given SVM on each device left {seen:?} where they wrote {wanted:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Behaviour;

    #[test]
    fn the_careful_behaviour_takes_every_costly_path() {
        let careful = Behaviour::CAREFUL;
        assert!(careful.events_keep_buffers());
        assert!(careful.chains_events());
        assert!(careful.ends_batches_together());
        assert!(careful.reports_failed_complete());
        assert!(!careful.measured());
        // The workarounds break drivers that do not need them: never on unmeasured.
        assert!(!careful.mishandles_failures());
        assert!(careful.orders_kernel_widths());
    }

    #[test]
    fn pocl_orders_kernel_widths_from_5_0_to_6_x_only() {
        let pocl = "OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512";
        assert!(!super::affected_pocl(pocl, "3.1+debian"));
        assert!(super::affected_pocl(pocl, "5.0+debian"));
        assert!(super::affected_pocl(pocl, "6.0"));
        assert!(!super::affected_pocl(pocl, "7.0"));
        assert!(!super::affected_pocl(pocl, "7.1-pre"));
        assert!(super::affected_pocl(pocl, "unreadable"));
        assert!(!super::affected_pocl("OpenCL 3.0 CUDA", "580.65.06"));
        assert!(!super::affected_pocl(
            "OpenCL 3.0 (Build 0)",
            "2026.22.10.0.01_160000"
        ));
    }
}
