//! The pending host transfers: [`PendingRead`] and [`PendingWrite`], which own (or
//! borrow for good) the host memory a non-blocking transfer uses until it has ended, and
//! their futures ([`ReadFuture`], [`WriteFuture`], one `Settled` underneath). Dropped
//! before the transfer ended, each hands the memory to the library's thread (the record
//! layer's *lent host memory* rule).

use std::fmt;
use std::marker::PhantomData;

use super::host::HostMemory;
use crate::core::reaper::{Deferred, Step};
use crate::error::Result;
use crate::event::Event;
use crate::ffi;
use crate::pod::Pod;
use crate::record::failure::settle;
use crate::record::history::Writes;

/// A non-blocking read into an owned `Vec`; [`PendingRead::wait`] returns it, and
/// `.await` on it does the same without blocking (see [`ReadFuture`]).
///
/// Dropping it without waiting never blocks, as for a [`PendingWrite`]: the device may
/// still be writing into its memory, which goes to the library's thread and is freed once
/// the read has ended ([`Context::wait_deferred`](crate::Context::wait_deferred) waits for
/// that).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::PendingRead;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[1u32, 2, 3, 4])?;
/// let pending: PendingRead<u32> = queue.read_owned_range(&buf, 1..3)?;
/// // Host work here overlaps the read.
/// assert_eq!(pending.wait()?, [2, 3]);
/// # Ok(())
/// # }
/// ```
pub struct PendingRead<T: Pod, H: HostMemory<T> = Vec<T>> {
    event: Event,
    /// The writes the buffer's contents came from when the read was enqueued (the
    /// *failed write* rule).
    writers: Writes,
    /// Room for `len` elements, filled once the read has completed; `None` once handed
    /// back or handed over.
    data: Option<H>,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod, H: HostMemory<T>> fmt::Debug for PendingRead<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRead")
            .field("event", &self.event)
            .field("len", &self.len)
            .finish()
    }
}

impl<T: Pod, H: HostMemory<T>> PendingRead<T, H> {
    /// A read of `len` elements into `data`'s room for them ([`HostMemory::room_for`]).
    pub(crate) fn new(event: Event, writers: Writes, data: H, len: usize) -> Self {
        PendingRead {
            event,
            writers,
            data: Some(data),
            len,
            _elements: PhantomData,
        }
    }

    /// The read's event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Blocks until the read has ended and returns the data.
    ///
    /// # Errors
    ///
    /// [`Error::DependencyFailed`](crate::Error::DependencyFailed) when the buffer's last write before the read failed
    /// (the *failed write* rule), [`Error::CommandFailed`](crate::Error::CommandFailed) when the read
    /// itself failed.
    pub fn wait(mut self) -> Result<H> {
        settle(&self.event, &self.writers)?;
        let mut data = self.data.take().ok_or(crate::Error::Polled)?;
        // SAFETY: the read completed, so the device wrote all `len` elements into the
        // room `room_for` gave it.
        unsafe { data.filled(self.len) };
        Ok(data)
    }
}

impl<T: Pod, H: HostMemory<T>> Drop for PendingRead<T, H> {
    fn drop(&mut self) {
        if self.data.is_none() || ffi::has_ended(self.event.raw()) {
            return;
        }
        // The device may still be writing into `data`: it goes to the library's thread,
        // never freed under the read, and this drop does not wait (on an async executor's
        // worker, or behind a gate the caller is about to set, waiting here would block
        // what the read waits for).
        log::debug!(
            target: "cl_lifetime::buffer",
            "a pending read of {} elements was dropped before it ended; its memory is freed on \
             the library's thread once the read has ended",
            self.len
        );
        self.hand_over();
    }
}

impl<T: Pod, H: HostMemory<T>> PendingRead<T, H> {
    /// Hands the memory the read writes into to the library's thread (see
    /// [`keep_until_ended`]).
    fn hand_over(&mut self) {
        if let Some(data) = self.data.take() {
            keep_until_ended(&self.event, Box::new(data));
        }
    }
}

/// Hands `memory`, which `event`'s command still uses, to the library's thread, which
/// frees it once the command has ended; the command's queue is flushed first (the
/// library's thread only reads its status, which submits nothing: rusticl runs nothing
/// that was not flushed). An event of no queue of the library's is waited for here.
fn keep_until_ended(event: &Event, memory: Box<dyn Send>) {
    let Some(queue) = event.inner.queue.as_ref() else {
        ffi::wait_terminal(&[event.raw()]);
        return;
    };
    if let Err(e) = queue.flush_if_dirty() {
        log::warn!(target: "cl_lifetime::queue", "flushing a dropped transfer's queue: {e}");
    }
    let kept = KeptUntilEnded {
        event: event.clone(),
        _memory: memory,
    };
    queue.ctx.reaper.submit(Box::new(kept), true);
}

/// A pending transfer that lends host memory, as [`Settled`] awaits it.
trait Lends: Sized {
    type Output;
    fn event(&self) -> &Event;
    /// Its result; does not block once the command has ended.
    fn wait(self) -> Result<Self::Output>;
    /// Lets go of it without waiting: memory the command may still use goes to the
    /// library's thread.
    fn let_go(self);
}

impl<T: Pod, H: HostMemory<T>> Lends for PendingRead<T, H> {
    type Output = H;

    fn event(&self) -> &Event {
        &self.event
    }

    fn wait(self) -> Result<H> {
        PendingRead::wait(self)
    }

    fn let_go(mut self) {
        if self.data.is_some() && !ffi::has_ended(self.event.raw()) {
            self.hand_over();
        }
    }
}

impl<T: Pod, H: HostMemory<T>> Lends for PendingWrite<T, H> {
    type Output = H;

    fn event(&self) -> &Event {
        &self.event
    }

    fn wait(self) -> Result<H> {
        PendingWrite::wait(self)
    }

    /// Its drop does not wait.
    fn let_go(self) {}
}

/// A pending transfer awaited: ready once its command has ended, with what its `wait`
/// returns; dropped early, it lets go of the transfer without waiting.
struct Settled<P: Lends> {
    pending: Option<P>,
    ended: crate::awaiting::Ended,
}

impl<P: Lends> Settled<P> {
    fn new(pending: P) -> Self {
        Settled {
            ended: crate::awaiting::Ended::new(pending.event().clone()),
            pending: Some(pending),
        }
    }

    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<P::Output>> {
        match self.ended.poll_end(cx) {
            std::task::Poll::Pending => std::task::Poll::Pending,
            std::task::Poll::Ready(()) => std::task::Poll::Ready(match self.pending.take() {
                Some(pending) => pending.wait(),
                None => Err(crate::Error::Polled),
            }),
        }
    }
}

impl<P: Lends> Drop for Settled<P> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.let_go();
        }
    }
}

/// A [`PendingRead`] as a future: its data once the read has ended, or the error
/// [`PendingRead::wait`] would return (`.await` on a `PendingRead`). The task's thread
/// never blocks; dropped before the read ended, it hands the memory the read writes into
/// to the library's thread, which frees it once the read has ended.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use std::future::IntoFuture;
/// use cl_lifetime::ReadFuture;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[1u32; 16])?;
/// let read: ReadFuture<u32> = queue.read_owned(&buf)?.into_future();
/// assert_eq!(pollster::block_on(read)?, vec![1; 16]);
/// // The same in an async block: `.await` on the `PendingRead`.
/// let data = pollster::block_on(async { queue.read_owned(&buf)?.await })?;
/// assert_eq!(data, vec![1; 16]);
/// # Ok(())
/// # }
/// ```
#[must_use = "a future does nothing unless awaited"]
pub struct ReadFuture<T: Pod, H: HostMemory<T> = Vec<T>>(Settled<PendingRead<T, H>>);

impl<T: Pod, H: HostMemory<T>> fmt::Debug for ReadFuture<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadFuture")
            .field("read", &self.0.pending)
            .finish()
    }
}

// Nothing in it relies on staying where it is: it holds handles and host memory.
impl<T: Pod, H: HostMemory<T>> Unpin for ReadFuture<T, H> {}

impl<T: Pod, H: HostMemory<T>> std::future::IntoFuture for PendingRead<T, H> {
    type Output = Result<H>;
    type IntoFuture = ReadFuture<T, H>;

    fn into_future(self) -> ReadFuture<T, H> {
        ReadFuture(Settled::new(self))
    }
}

impl<T: Pod, H: HostMemory<T>> std::future::Future for ReadFuture<T, H> {
    type Output = Result<H>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<H>> {
        self.get_mut().0.poll(cx)
    }
}

/// A non-blocking write from a `Vec` the library hands back once the write has ended
/// ([`After::write_lent`](crate::After::write_lent)): [`PendingWrite::wait`] returns it,
/// and `.await` on it does the same without blocking.
///
/// Dropped before the write has ended, it returns at once: the `Vec` goes to the library's
/// thread, which frees it once the write has ended.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::PendingWrite;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(1024)?;
/// let pending: PendingWrite<u32> = queue.write_lent(&buf, vec![7u32; 1024])?;
/// let data = pending.wait()?; // the same `Vec`, handed back once the write has ended
/// assert_eq!(queue.read_owned(&buf)?.wait()?, data);
/// # Ok(())
/// # }
/// ```
pub struct PendingWrite<T: Pod, H: HostMemory<T> = Vec<T>> {
    event: Event,
    /// Read by the device until the write has ended; `None` once handed back.
    data: Option<H>,
    _elements: PhantomData<T>,
}

impl<T: Pod, H: HostMemory<T>> fmt::Debug for PendingWrite<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingWrite")
            .field("event", &self.event)
            .field("len", &self.data.as_ref().map(|d| d.elements().len()))
            .finish()
    }
}

impl<T: Pod, H: HostMemory<T>> PendingWrite<T, H> {
    pub(crate) fn new(event: Event, data: H) -> Self {
        PendingWrite {
            event,
            data: Some(data),
            _elements: PhantomData,
        }
    }

    /// The write's event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Blocks until the write has ended and hands the `Vec` back, as it was.
    ///
    /// # Errors
    ///
    /// [`Error::CommandFailed`](crate::Error::CommandFailed) when the write failed (the
    /// `Vec` is freed).
    pub fn wait(mut self) -> Result<H> {
        let outcome = self.event.wait();
        // The write has ended: the device no longer reads the memory.
        let data = self.data.take().ok_or(crate::Error::Polled)?;
        outcome.map(|()| data)
    }
}

impl<T: Pod, H: HostMemory<T>> Drop for PendingWrite<T, H> {
    fn drop(&mut self) {
        // The device may still read `data`: it goes to the library's thread, never freed
        // under the write, and this drop does not wait.
        if let Some(data) = self.data.take() {
            if !ffi::has_ended(self.event.raw()) {
                keep_until_ended(&self.event, Box::new(data));
            }
        }
    }
}

/// A [`PendingWrite`] as a future: the `Vec` once the write has ended, or the error
/// [`PendingWrite::wait`] would return (`.await` on a `PendingWrite`).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use std::future::IntoFuture;
/// use cl_lifetime::WriteFuture;
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(256)?;
/// let write: WriteFuture<u32> = queue.write_lent(&buf, vec![3u32; 256])?.into_future();
/// let back = pollster::block_on(write)?; // the `Vec`, once written
/// assert_eq!(back, vec![3; 256]);
/// assert_eq!(queue.read_owned(&buf)?.wait()?, back);
/// # Ok(())
/// # }
/// ```
#[must_use = "a future does nothing unless awaited"]
pub struct WriteFuture<T: Pod, H: HostMemory<T> = Vec<T>>(Settled<PendingWrite<T, H>>);

impl<T: Pod, H: HostMemory<T>> fmt::Debug for WriteFuture<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteFuture")
            .field("write", &self.0.pending)
            .finish()
    }
}

// Nothing in it relies on staying where it is: it holds handles and host memory.
impl<T: Pod, H: HostMemory<T>> Unpin for WriteFuture<T, H> {}

impl<T: Pod, H: HostMemory<T>> std::future::IntoFuture for PendingWrite<T, H> {
    type Output = Result<H>;
    type IntoFuture = WriteFuture<T, H>;

    fn into_future(self) -> WriteFuture<T, H> {
        WriteFuture(Settled::new(self))
    }
}

impl<T: Pod, H: HostMemory<T>> std::future::Future for WriteFuture<T, H> {
    type Output = Result<H>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<H>> {
        self.get_mut().0.poll(cx)
    }
}

/// Host memory a command still uses, kept by the library's thread until the command has
/// ended (a pending read or a lent write dropped before it ended).
struct KeptUntilEnded {
    event: Event,
    _memory: Box<dyn Send>,
}

impl Deferred for KeptUntilEnded {
    fn poll(&mut self, _hurry: bool) -> Step {
        if ffi::has_ended(self.event.raw()) {
            Step::Done
        } else {
            Step::Pending
        }
    }
}
