//! The cl-sys oracle (design traps "the destructor callback is not completion" and "no cl-sys in the library", docs/design.md): a buffer's destructor callback and raw
//! event statuses, read through `cl-sys`, a binding independent of the library's own, so
//! a bug in the library's wrappers cannot hide itself from the tests.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cl_lifetime::{ClBuffer, Event, Pod};

struct WatchState {
    fired: AtomicBool,
    /// How many watched events were not terminal when the destructor callback ran.
    unfinished_at_fire: AtomicUsize,
    /// The watched events, retained; on implementations whose events keep their
    /// commands' buffers (design trap "rusticl's events keep their buffers") each is let
    /// go, and nulled, once the oracle has seen it end, so that the oracle never keeps
    /// the buffer alive itself.
    slots: Mutex<Vec<cl_sys::cl_event>>,
}

// SAFETY: event handles may be used from any thread; the rest is atomic or locked.
unsafe impl Send for WatchState {}
// SAFETY: as above.
unsafe impl Sync for WatchState {}

impl Drop for WatchState {
    fn drop(&mut self) {
        let slots = self.slots.get_mut().unwrap_or_else(PoisonError::into_inner);
        for &event in slots.iter().filter(|e| !e.is_null()) {
            // SAFETY: retained once in `watch`, not let go yet, released once here.
            unsafe { cl_sys::clReleaseEvent(event) };
        }
    }
}

/// Raw execution status through cl-sys.
pub fn raw_status(event: cl_sys::cl_event) -> i32 {
    let mut status: cl_sys::cl_int = 1;
    // SAFETY: `event` is a retained event; the output is one cl_int.
    let rc = unsafe {
        cl_sys::clGetEventInfo(
            event,
            cl_sys::CL_EVENT_COMMAND_EXECUTION_STATUS,
            size_of::<cl_sys::cl_int>(),
            (&raw mut status).cast(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "clGetEventInfo");
    status
}

extern "C" fn on_destroy(_mem: cl_sys::cl_mem, user: *mut c_void) {
    // SAFETY: `user` is the Arc leaked in `watch`; the callback runs once.
    let state = unsafe { Arc::from_raw(user as *const WatchState) };
    // An event whose completion callback has not run yet is asked directly: callbacks can
    // be delivered late (design trap "callbacks wake slowly").
    let unfinished = state
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|e| !e.is_null() && raw_status(**e) > 0)
        .count();
    state.unfinished_at_fire.store(unfinished, Ordering::SeqCst);
    state.fired.store(true, Ordering::SeqCst);
}

/// On implementations whose events keep their buffers: lets go of each watched event once
/// it has ended, asking its status every millisecond (rusticl runs no `CL_COMPLETE`
/// callback for a command that failed, so a callback would keep a failed command's
/// buffer forever). Stops once every event is let go, or when no `Watch` is left.
fn let_go_when_ended(state: Arc<WatchState>) {
    loop {
        let (ended, done) = {
            let mut slots = state.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let ended: Vec<cl_sys::cl_event> = slots
                .iter_mut()
                .filter(|e| !e.is_null() && raw_status(**e) <= 0)
                .map(|e| std::mem::replace(e, std::ptr::null_mut()))
                .collect();
            (ended, slots.iter().all(|e| e.is_null()))
        };
        for event in ended {
            // SAFETY: retained once in `watch`, released once here (the slot was nulled).
            unsafe { cl_sys::clReleaseEvent(event) };
        }
        if done || Arc::strong_count(&state) == 1 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Watches one buffer's end: whether its destructor callback fired, and whether the
/// given events were all terminal (complete or failed) when it did.
pub struct Watch(Arc<WatchState>);

impl Watch {
    /// Whether the destructor callback has fired.
    pub fn fired(&self) -> bool {
        self.0.fired.load(Ordering::SeqCst)
    }

    /// Asserts the release guarantee (design trap "the destructor callback is not completion"): the callback has fired and every watched
    /// event was terminal when it did.
    pub fn assert_released_after_events(&self) {
        assert!(self.fired(), "destructor callback has not fired");
        assert_eq!(
            self.0.unfinished_at_fire.load(Ordering::SeqCst),
            0,
            "events were still pending when the memory was released"
        );
    }
}

/// Registers a destructor callback on `buffer` through cl-sys, and a thread that lets go
/// of each of `events` once it has ended ([`let_go_when_ended`]): some drivers' events keep
/// their commands' buffers, and the oracle must not keep the memory itself.
pub fn watch<T: Pod>(buffer: &ClBuffer<T>, events: &[&Event]) -> Watch {
    let raws: Vec<cl_sys::cl_event> = events
        .iter()
        .map(|e| e.as_raw() as cl_sys::cl_event)
        .collect();
    let slots = raws
        .iter()
        .map(|&raw| {
            // SAFETY: `raw` is live (held by its `Event`); the retain is released when the
            // oracle has seen it end, or by WatchState.
            assert_eq!(unsafe { cl_sys::clRetainEvent(raw) }, 0);
            raw
        })
        .collect();
    let state = Arc::new(WatchState {
        fired: AtomicBool::new(false),
        unfinished_at_fire: AtomicUsize::new(usize::MAX),
        slots: Mutex::new(slots),
    });
    let user = Arc::into_raw(state.clone()) as *mut c_void;
    // SAFETY: the buffer's cl_mem is live; `user` stays valid until the callback takes it.
    let rc = unsafe {
        cl_sys::clSetMemObjectDestructorCallback(
            buffer.as_raw() as cl_sys::cl_mem,
            Some(on_destroy),
            user,
        )
    };
    assert_eq!(rc, 0, "clSetMemObjectDestructorCallback");
    // On every implementation: some drivers' events keep their buffers (rusticl's, Intel's
    // CPU runtime's), and the oracle must not be what keeps the memory.
    {
        let state = state.clone();
        std::thread::spawn(move || let_go_when_ended(state));
    }
    Watch(state)
}
