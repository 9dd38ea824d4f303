//! The cl-sys oracle (design traps "the destructor callback is not completion" and "no cl-sys in the library", docs/design.md): a buffer's destructor callback and raw
//! event statuses, read through `cl-sys`, a binding independent of the library's own, so
//! a bug in the library's wrappers cannot hide itself from the tests.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cl_lifetime::{ClBuffer, Event, Pod};

struct WatchState {
    fired: AtomicBool,
    /// How many watched events were not terminal when the destructor callback ran.
    unfinished_at_fire: AtomicUsize,
    events: Vec<cl_sys::cl_event>,
}

// SAFETY: event handles may be used from any thread; the rest is atomic.
unsafe impl Send for WatchState {}
// SAFETY: as above.
unsafe impl Sync for WatchState {}

impl Drop for WatchState {
    fn drop(&mut self) {
        for &e in &self.events {
            // SAFETY: retained once in `watch`, released once here.
            unsafe { cl_sys::clReleaseEvent(e) };
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
    let unfinished = state.events.iter().filter(|&&e| raw_status(e) > 0).count();
    state.unfinished_at_fire.store(unfinished, Ordering::SeqCst);
    state.fired.store(true, Ordering::SeqCst);
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

/// Registers a destructor callback on `buffer` through cl-sys.
pub fn watch<T: Pod>(buffer: &ClBuffer<T>, events: &[&Event]) -> Watch {
    let events: Vec<cl_sys::cl_event> = events
        .iter()
        .map(|e| {
            let raw = e.as_raw() as cl_sys::cl_event;
            // SAFETY: `raw` is live (held by `e`); the retain is released by WatchState.
            assert_eq!(unsafe { cl_sys::clRetainEvent(raw) }, 0);
            raw
        })
        .collect();
    let state = Arc::new(WatchState {
        fired: AtomicBool::new(false),
        unfinished_at_fire: AtomicUsize::new(usize::MAX),
        events,
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
    Watch(state)
}
