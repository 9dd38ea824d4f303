//! Async: a command's end, a pending read, a release and a pooled allocation as futures,
//! for any executor, woken by the library's waiter threads (`core::waiter`).
//!
//! # Rules
//!
//! 1. **No executor.** The futures use std's `Future` and `Waker` only: tokio, async-std,
//!    smol, `pollster` or a hand-written loop all drive them.
//! 2. **Ended first.** A future whose command has ended when it is polled is ready at once:
//!    one status read, no thread involved.
//! 3. **Flushed, then watched.** A pending command's queue is flushed (a command not
//!    submitted may never run on some drivers, and a wait in another thread flushes only
//!    its own queue), then its event goes to the waiter with the task's waker
//!    (`core::waiter`'s rules: a poller that never blocks on a command, blockers only on
//!    commands that end on their own, no driver callback).
//! 4. **Dropped, forgotten.** Dropping a future takes its command off the waiter. Nothing
//!    on the device is cancelled, and no record changes: the command stays recorded on
//!    its buffers as it was, and a buffer moved into a dropped release future is released
//!    (deferred) as a dropped buffer is.
//! 5. **Off the task's thread.** What would block a task on the device runs on the
//!    waiter's job threads: the release itself (`clReleaseMemObject`, which NVIDIA's driver
//!    blocks while the memory is busy, and the wait for the driver's free).
//! 6. **The sync result.** A future hands back what the blocking call would: `Event`'s
//!    [`Ended`] what [`Event::wait`] returns, a pending read its data or the same error as
//!    [`PendingRead::wait`](crate::PendingRead::wait), a release its
//!    [`ReleaseReport`](crate::ReleaseReport).
//! 7. **Panics reach the task.** A panic of an [`unblock`] job, or of the task's waker on a
//!    library thread, is caught there and resumed in the task at its next poll of the
//!    future: the library's threads go on, and nothing stays watched.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;

use crate::util::sync::{Mutex, rank};
use std::task::{Context, Poll, Waker};

use crate::core::echo::RawEvent;
use crate::core::waiter::{Order, Ticket, Watch, contained, waiter};
use crate::error::Result;
use crate::event::Event;

/// The end of a command: a future that is ready once the command has completed or failed,
/// with what [`Event::wait`] returns ([`Event::ended`], or `.await` on an [`Event`]).
///
/// Dropping it cancels nothing: the command runs as it would have.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(1024)?;
/// let fill = queue.fill(&buf, 7)?;
/// let ended: cl_lifetime::Ended = fill.ended();
/// pollster::block_on(ended)?; // the task's thread never blocks on the device
/// assert!(fill.is_terminal());
/// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![7; 1024]);
/// # Ok(())
/// # }
/// ```
#[must_use = "a future does nothing unless awaited"]
pub struct Ended {
    event: Event,
    watching: Option<(Ticket, Arc<Watch>)>,
}

impl std::fmt::Debug for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ended")
            .field("event", &self.event)
            .field("watched", &self.watching.is_some())
            .finish()
    }
}

impl Ended {
    pub(crate) fn new(event: Event) -> Ended {
        Ended {
            event,
            watching: None,
        }
    }

    /// Polls for the end alone (the caller reads the result): the rules *ended first* and
    /// *flushed, then watched*.
    pub(crate) fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some((_, watch)) = &self.watching {
            if !watch.ended_or_wake(cx.waker()) {
                return Poll::Pending;
            }
            let panic = watch.take_panic();
            self.watching = None;
            // The waker's panic, caught on the thread that woke it, is this task's.
            if let Some(panic) = panic {
                std::panic::resume_unwind(panic);
            }
            return Poll::Ready(());
        }
        if self.event.has_ended() {
            return Poll::Ready(());
        }
        if let Err(e) = self.event.flush_producer() {
            log::warn!(target: "cl_lifetime::waiter", "flushing an awaited command's queue: {e}");
        }
        // SAFETY: the event is live (held by `self.event`).
        let Some(raw) = unsafe { RawEvent::retain(self.event.raw()) }.ok() else {
            return self.block_here();
        };
        let watch = Arc::new(Watch::default());
        // Stored before the waiter can see the command, so a wake-up cannot come first.
        if watch.ended_or_wake(cx.waker()) {
            return Poll::Ready(());
        }
        match waiter().watch(Arc::new(raw), self.order(), watch.clone()) {
            Ok(ticket) => {
                self.watching = Some((ticket, watch));
                Poll::Pending
            }
            Err(e) => {
                log::error!(target: "cl_lifetime::waiter", "no waiter thread ({e}): waiting on the task's thread");
                self.block_here()
            }
        }
    }

    /// Where no waiter thread can run: the wait happens on the caller's thread.
    fn block_here(&self) -> Poll<()> {
        crate::ffi::wait_terminal(&[self.event.raw()]);
        Poll::Ready(())
    }

    fn order(&self) -> Order {
        match &self.event.inner.queue {
            Some(queue) => Order {
                // A device of the queue's platform: one per driver, for the life of the
                // process (a context's handle may be reused by another's).
                driver: queue.ctx.device.id.raw() as usize,
                queue: Some(queue.lane.id),
                in_order: queue.lane.in_order,
                ends_on_its_own: self.event.enqueued_ungated(),
                gates: Some(queue.ctx.gates.clone()),
                held: self.event.held_by(),
            },
            None => Order {
                driver: self.event.context_raw() as usize,
                queue: None,
                in_order: false,
                ends_on_its_own: false,
                gates: None,
                held: None,
            },
        }
    }
}

impl Future for Ended {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        match this.poll_end(cx) {
            Poll::Ready(()) => Poll::Ready(this.event.outcome()),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        // The *dropped, forgotten* rule.
        if let Some((ticket, _)) = self.watching.take() {
            waiter().forget(&ticket);
        }
    }
}

impl Event {
    /// A future that is ready once the command has ended, with what [`Event::wait`]
    /// returns; the task's thread never blocks. `.await` on an `Event` does the same.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1024)?;
    /// let fill = queue.fill(&buf, 7)?;
    /// pollster::block_on(fill.ended())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn ended(&self) -> Ended {
        Ended::new(self.clone())
    }
}

impl IntoFuture for Event {
    type Output = Result<()>;
    type IntoFuture = Ended;

    fn into_future(self) -> Ended {
        Ended::new(self)
    }
}

impl IntoFuture for &Event {
    type Output = Result<()>;
    type IntoFuture = Ended;

    fn into_future(self) -> Ended {
        self.ended()
    }
}

/// The result of work done on a job thread (the *off the task's thread* rule): the value,
/// or the job's panic.
struct Slot<T> {
    state: Mutex<(Option<std::thread::Result<T>>, Option<Waker>), rank::Awaiting>,
}

/// Runs `job` on one of the library's threads and returns a future of its result: for a
/// blocking call that has no async form (a blocking read into a slice, a map, a
/// `Queue::finish`), or an enqueue on a driver that may block it (see the crate's
/// *Blocking calls* table). The task's thread does not block; the library's thread does,
/// for as long as `job` runs.
///
/// Dropping the future does not stop `job`: it runs to its end, and its result is dropped.
///
/// # Panics
///
/// When `job` panics, the panic is caught on the library's thread (which goes on) and
/// resumed in the task that polls the future, as [`std::thread::JoinHandle::join`] hands
/// it back.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[3u32; 256])?;
/// let read = cl_lifetime::unblock(move || {
///     let mut out = vec![0u32; 256];
///     queue.read(&buf, &mut out).map(|()| out)
/// });
/// assert_eq!(pollster::block_on(read)?, vec![3u32; 256]);
/// # Ok(())
/// # }
/// ```
///
/// The library's own async forms use it for their blocking part (the *off the task's
/// thread* rule); where no waiter thread can start, `job` runs on the caller's thread.
pub fn unblock<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> impl Future<Output = T> + Send + 'static {
    let slot = Arc::new(Slot {
        state: Mutex::new((None, None)),
    });
    let theirs = slot.clone();
    let run: Box<dyn FnOnce() + Send> = Box::new(move || {
        // A panic of the job is caught here and resumed in the task that awaits it.
        let value = contained(job);
        let waker = {
            let mut state = theirs.state.lock();
            state.0 = Some(value);
            state.1.take()
        };
        if let Some(waker) = waker {
            // A waker that panics loses nothing: the value is in the slot.
            if contained(|| waker.wake()).is_err() {
                log::error!(target: "cl_lifetime::waiter", "a task's waker panicked on a job thread");
            }
        }
        // The slot, and the value in it if the future is gone, drop here: a panic of its
        // `Drop` is the job thread's to contain (the waiter's *jobs* rule).
        drop(theirs);
    });
    if let Err((e, run)) = waiter().run(run) {
        log::error!(target: "cl_lifetime::waiter", "no waiter thread ({e}): running on the task's thread");
        run();
    }
    std::future::poll_fn(move |cx| {
        let mut state = slot.state.lock();
        match state.0.take() {
            Some(Ok(value)) => Poll::Ready(value),
            Some(Err(panic)) => {
                drop(state);
                std::panic::resume_unwind(panic)
            }
            None => {
                state.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    })
}
