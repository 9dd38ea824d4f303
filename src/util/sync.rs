//! Ranked locks, after wgpu-core's `lock/rank.rs`: the library's lock order as code.
//!
//! # Rules
//!
//! - **Ranked.** Every lock of the library is a [`Mutex`] whose type names its rank, one of
//!   the list in [`rank`], outermost first. A thread may take a lock only when its rank is
//!   above the rank of every lock the thread holds; a rank marked `repeats` may also be
//!   taken again while it is held (a command's records, in buffer-ID order). A
//!   [`Mutex::try_lock`] cannot wait, so it is not checked, but what it holds counts for
//!   the locks taken under it.
//! - **Checked in debug builds.** With `debug_assertions` (the test suite), taking a lock
//!   out of order panics, naming both locks: an order that could deadlock fails the first
//!   test that takes it, whether or not the threads ever meet. Release builds keep no
//!   record and check nothing.
//! - **Poison ignored.** [`Mutex::lock`] hands out the data whatever panicked while it was
//!   held: the library keeps each lock's data consistent at every point where user code
//!   can run (user code runs under no lock: *no lock across user code*, below), so a
//!   panic elsewhere does not make it wrong.
//! - **No lock across a host wait or user code.** Nothing here checks it; the rank list
//!   says, for each lock, what is done while it is held.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, PoisonError, TryLockError};
use std::time::Duration;

/// A lock's place in the order.
pub(crate) trait Rank {
    /// Its place: a thread takes ranks in increasing order.
    const RANK: u16;
    /// Its name, in a panic.
    const NAME: &'static str;
    /// Whether it may be taken again while held (several objects of one kind, taken in
    /// an order of their own).
    const REPEATS: bool;
}

macro_rules! ranks {
    ($($(#[doc = $doc:literal])* $name:ident $(($repeats:ident))?,)*) => {
        #[allow(dead_code, clippy::enum_variant_names)]
        #[repr(u16)]
        enum Order {
            $($name,)*
        }
        $(
            $(#[doc = $doc])*
            pub(crate) struct $name;
            impl Rank for $name {
                const RANK: u16 = Order::$name as u16;
                const NAME: &'static str = stringify!($name);
                const REPEATS: bool = ranks!(@repeats $($repeats)?);
            }
        )*
        /// Every rank, in order: the lock table of the documentation.
        #[cfg(test)]
        pub(crate) const ALL: &[(&str, bool)] = &[$((stringify!($name), ranks!(@repeats $($repeats)?)),)*];
    };
    (@repeats repeats) => { true };
    (@repeats) => { false };
}

/// The library's locks, outermost first: a thread holding one may take only those below
/// it. Each says what is done while it is held; no lock is held across a host wait for
/// the device (`clWaitForEvents`) or across a call into user code.
pub(crate) mod rank {
    use super::Rank;

    ranks! {
        /// [`crate::core::device`]: platform and device enumeration, one at a time in the
        /// process. Held across `clGetPlatformIDs` and `clGetDeviceIDs`.
        Enumerating,
        /// [`crate::core::driver`]: what each device's driver does, measured once. Held
        /// across the probe (contexts, queues, commands of its own).
        Probed,
        /// [`crate::core::gates`]: the library's user-event sets, one at a time in the
        /// process. Held across `clSetUserEventStatus` only, whose driver callbacks take
        /// later ranks.
        GateSets,
        /// [`crate::alloc`]: a pool's state. Held across a block's `free_for` status
        /// queries; never an enqueue.
        PoolState,
        /// [`crate::api`] `Context`: the program cache. Held across the build
        /// (`clBuildProgram`).
        ProgramCache,
        /// [`crate::alloc`]: an arena's next free byte. Held across `clCreateSubBuffer`.
        ArenaNext,
        /// [`crate::core::reaper`]: the deferred releases a new buffer may take over. Held
        /// while one is taken over: its slot, then its record.
        ReaperSlots,
        /// [`crate::record::release`]: a deferred release's block, while the reaper polls
        /// it or a new buffer takes it over (try-lock only for the latter).
        DeferredSlot,
        /// [`crate::kernel::widths`]: a kernel's pending launches by width: a launch's turn
        /// under the *widest first* rule, held across its records and its enqueue, and
        /// while a refused launch lets its new sub-buffers go.
        Widths,
        /// [`crate::record::sub`]: a block's sub-buffers. Taken by a launch or transfer on
        /// a view, before the records; held across `clCreateSubBuffer`,
        /// `clGetMemObjectInfo`.
        Subs,
        /// [`crate::record::block`]: a buffer's record, taken by `Submit` for each buffer
        /// of a command in buffer-ID order. Held across status queries, flushes of other
        /// queues, the enqueue, the fold's marker.
        Record(repeats),
        /// [`crate::core::pins`]: a context's pins. Held across try-locks of records and
        /// echoes, and the status reads they make.
        Pins,
        /// [`crate::core::echo`]: a queue's echo. Held across the enqueue (and the
        /// settling marker's), and status queries of the commands it watches.
        Echo,
        /// [`crate::core::queue`]: a queue's retired handles. Held across
        /// `clCreateCommandQueue*` when a failed settling marker renews the queue, which
        /// an enqueue does under its echo.
        Retired,
        /// [`crate::kernel`]: a kernel object's state. Held across `clSetKernelArg` and
        /// `clEnqueueNDRangeKernel`.
        KernelState,
        /// [`crate::record::block`]: the kernels that hold a block as an argument.
        BlockKernels,
        /// [`crate::core::staging`]: a queue's free staging blocks.
        Staging,
        /// [`crate::event`]: a user event's twin for its raw handle.
        Twin,
        /// [`crate::event`]: the commands a pooled block's hand-over gate waits for.
        /// Held across their status queries.
        Joiner,
        /// [`crate::event`]: an event's dependency list.
        EventDeps,
        /// [`crate::event`]: the graveyard (try-lock only).
        Graveyard,
        /// [`crate::alloc`]: the wakers of a pool's waiting acquires.
        PoolWakers,
        /// [`crate::alloc`]: a pool's leaving bytes.
        PoolLeaving,
        /// [`crate::core::reaper`]: the reaper's thread handle.
        ReaperThread,
        /// [`crate::core::reaper`]: the reaper's state.
        Reaper,
        /// [`crate::core::waiter`]: the waiter's state.
        Waiter,
        /// [`crate::core::waiter`]: the commands a blocker spins on.
        WaiterSpins,
        /// [`crate::core::waiter`]: one awaited command's watch.
        WaiterWatch,
        /// [`crate::awaiting`]: a future's state.
        Awaiting,
        /// [`crate::core::gates`]: a context's open gates.
        Gates,
        /// [`crate::core::gates`]: the failures in flight.
        GatesInFlight,
        /// [`crate::core::context`]: the memory objects a context's blocks hold, and the
        /// carves it keeps.
        Tracked,
        /// [`crate::core::context`] (`svm_calls`): every `clSVMAlloc` and `clSVMFree` of
        /// the process. Held across that call only.
        SvmCalls,
        /// [`crate::core::stats`]: allocation sites of the ledger.
        LedgerSites,
        /// [`crate::trace`]: the trace being recorded.
        Tracer,
        /// [`crate::ffi`]: a memory object's destructor signal (set by the driver's
        /// callback thread).
        FreedSignal,
    }
}

/// A lock of rank `R` over a `T`.
pub(crate) struct Mutex<T: ?Sized, R: Rank> {
    rank: PhantomData<fn() -> R>,
    inner: std::sync::Mutex<T>,
}

impl<T: Default, R: Rank> Default for Mutex<T, R> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T, R: Rank> Mutex<T, R> {
    pub(crate) const fn new(value: T) -> Self {
        Mutex {
            rank: PhantomData,
            inner: std::sync::Mutex::new(value),
        }
    }
}

impl<T: ?Sized, R: Rank> Mutex<T, R> {
    /// Takes the lock, poison ignored; in debug builds, panics if a lock of this rank may
    /// not be taken now (the *ranked* rule).
    #[track_caller]
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        let rank = Held::of(R::RANK, R::NAME);
        rank.enter(R::REPEATS, true);
        Guard {
            inner: Some(self.inner.lock().unwrap_or_else(PoisonError::into_inner)),
            rank,
        }
    }

    /// Takes the lock if it is free, poison ignored: not checked, since it cannot wait.
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        let inner = match self.inner.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let rank = Held::of(R::RANK, R::NAME);
        rank.enter(R::REPEATS, false);
        Some(Guard {
            inner: Some(inner),
            rank,
        })
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: ?Sized + std::fmt::Debug, R: Rank> std::fmt::Debug for Mutex<T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple(R::NAME).field(&&self.inner).finish()
    }
}

/// A held lock; its drop lets it go.
pub(crate) struct Guard<'a, T: ?Sized> {
    /// Always `Some` but inside a condition variable's wait.
    inner: Option<std::sync::MutexGuard<'a, T>>,
    rank: Held,
}

/// The rank a guard holds, for the checks: nothing in release builds, where a guard is as
/// small as the standard one (the enqueue path moves guards into its lists).
#[derive(Clone, Copy)]
struct Held {
    #[cfg(debug_assertions)]
    rank: u16,
    #[cfg(debug_assertions)]
    name: &'static str,
}

impl Held {
    #[cfg_attr(not(debug_assertions), allow(unused_variables))]
    const fn of(rank: u16, name: &'static str) -> Held {
        Held {
            #[cfg(debug_assertions)]
            rank,
            #[cfg(debug_assertions)]
            name,
        }
    }

    /// Notes that the thread takes it: see [`held::enter`].
    #[track_caller]
    #[inline(always)]
    fn enter(self, repeats: bool, check: bool) {
        #[cfg(debug_assertions)]
        held::enter(self.rank, self.name, repeats, check);
        #[cfg(not(debug_assertions))]
        let _ = (repeats, check);
    }

    /// Notes that the thread let it go.
    #[inline(always)]
    fn leave(self) {
        #[cfg(debug_assertions)]
        held::leave(self.rank);
    }
}

impl<'a, T> Guard<'a, T> {
    /// Runs `wait` (a condition variable's) on the lock, its rank let go meanwhile.
    #[track_caller]
    fn waiting<W>(
        &mut self,
        wait: impl FnOnce(std::sync::MutexGuard<'a, T>) -> (std::sync::MutexGuard<'a, T>, W),
    ) -> W {
        let inner = self
            .inner
            .take()
            .expect("a guard outside a wait holds its lock");
        self.rank.leave();
        let (inner, waited) = wait(inner);
        self.rank.enter(false, true);
        self.inner = Some(inner);
        waited
    }

    /// Waits on `condvar` while `condition` holds, the lock let go meanwhile.
    #[track_caller]
    pub(crate) fn wait_while(
        mut self,
        condvar: &Condvar,
        condition: impl FnMut(&mut T) -> bool,
    ) -> Self {
        self.waiting(|inner| {
            let inner = condvar
                .wait_while(inner, condition)
                .unwrap_or_else(PoisonError::into_inner);
            (inner, ())
        });
        self
    }

    /// Waits on `condvar` while `condition` holds, for at most `timeout`; `true` when it
    /// timed out.
    #[track_caller]
    pub(crate) fn wait_timeout_while(
        mut self,
        condvar: &Condvar,
        timeout: Duration,
        condition: impl FnMut(&mut T) -> bool,
    ) -> (Self, bool) {
        let timed_out = self.waiting(|inner| {
            let (inner, result) = condvar
                .wait_timeout_while(inner, timeout, condition)
                .unwrap_or_else(PoisonError::into_inner);
            (inner, result.timed_out())
        });
        (self, timed_out)
    }

    /// Waits on `condvar` for at most `timeout`; `true` when it timed out.
    #[track_caller]
    pub(crate) fn wait_timeout(mut self, condvar: &Condvar, timeout: Duration) -> (Self, bool) {
        let timed_out = self.waiting(|inner| {
            let (inner, result) = condvar
                .wait_timeout(inner, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            (inner, result.timed_out())
        });
        (self, timed_out)
    }
}

impl<T: ?Sized> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.inner
            .as_deref()
            .expect("a guard outside a wait holds its lock")
    }
}

impl<T: ?Sized> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.inner
            .as_deref_mut()
            .expect("a guard outside a wait holds its lock")
    }
}

// Release builds have nothing to note: the standard guard's own drop lets the lock go.
#[cfg(debug_assertions)]
impl<T: ?Sized> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        if self.inner.take().is_some() {
            self.rank.leave();
        }
    }
}

/// The ranks a thread holds, in debug builds.
#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<(u16, &'static str)>> = const { RefCell::new(Vec::new()) };
    }

    /// Notes that the thread takes `rank`; when `check`, panics if it may not.
    #[track_caller]
    pub(super) fn enter(rank: u16, name: &'static str, repeats: bool, check: bool) {
        let clash = HELD
            .try_with(|held| {
                let mut held = held.borrow_mut();
                let top = held.iter().copied().max_by_key(|&(r, _)| r);
                held.push((rank, name));
                top.filter(|&(r, _)| check && (r > rank || (r == rank && !repeats)))
            })
            .ok()
            .flatten();
        if let Some((_, holding)) = clash {
            leave(rank);
            panic!(
                "lock order: {name} taken while holding {holding}, which comes after it \
                 (util::sync::rank lists the order)"
            );
        }
    }

    /// Notes that the thread let `rank` go (its newest hold of it).
    pub(super) fn leave(rank: u16) {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|&(r, _)| r == rank) {
                held.remove(i);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::rank::{ALL, Echo, Record, Retired, Subs};
    use super::*;

    #[test]
    fn locks_taken_in_rank_order_pass() {
        let (subs, record, echo) = (
            Mutex::<u8, Subs>::new(0),
            Mutex::<u8, Record>::new(0),
            Mutex::<u8, Echo>::new(0),
        );
        let _s = subs.lock();
        let _r = record.lock();
        let _e = echo.lock();
    }

    #[test]
    #[cfg(debug_assertions)]
    fn a_lock_taken_under_one_that_comes_after_it_panics_naming_both() {
        let (subs, echo) = (Mutex::<u8, Subs>::new(0), Mutex::<u8, Echo>::new(0));
        let _e = echo.lock();
        let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _s = subs.lock();
        }));
        let message = taken.expect_err("Subs under Echo panics");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("Subs taken while holding Echo"), "{text}");
        // Nothing of the refused lock stays noted: a lock of a later rank still passes.
        drop(_e);
        let _s = subs.lock();
        let _e = echo.lock();
    }

    #[test]
    #[cfg(debug_assertions)]
    fn a_repeating_rank_may_be_taken_again_and_another_may_not() {
        let (a, b) = (Mutex::<u8, Record>::new(0), Mutex::<u8, Record>::new(0));
        let (_a, _b) = (a.lock(), b.lock());
        let (c, d) = (Mutex::<u8, Echo>::new(0), Mutex::<u8, Echo>::new(0));
        let _c = c.lock();
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _d = d.lock();
        }));
        assert!(again.is_err(), "a second Echo under the first panics");
    }

    /// An enqueue whose settling marker failed renews its queue under the queue's echo,
    /// taking the retired list there: with Retired before Echo in the list, the random
    /// failure schedules panicked on emulated Mesa in 3 of 30 runs.
    #[test]
    fn a_queue_renewed_during_an_enqueue_takes_its_retired_list_under_the_echo() {
        let (echo, retired) = (Mutex::<u8, Echo>::new(0), Mutex::<u8, Retired>::new(0));
        let _e = echo.lock();
        let _r = retired.lock();
    }

    #[test]
    fn a_try_lock_is_not_checked_but_what_it_holds_counts() {
        let (record, echo) = (Mutex::<u8, Record>::new(0), Mutex::<u8, Echo>::new(0));
        let _e = echo.lock();
        assert!(record.try_lock().is_some());
    }

    #[test]
    fn a_condvar_wait_lets_the_lock_go_and_takes_it_back() {
        let lock = Mutex::<bool, Echo>::new(false);
        let signal = Condvar::new();
        let guard = lock.lock();
        let (guard, timed_out) = guard.wait_timeout(&signal, Duration::from_millis(1));
        assert!(timed_out && !*guard);
        drop(guard);
        let _again = lock.lock();
    }

    #[test]
    fn every_rank_has_a_distinct_name() {
        let mut names: Vec<&str> = ALL.iter().map(|r| r.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
