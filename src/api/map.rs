//! Host mappings: a guard per mapping, unmapped (and recorded) on drop; the *mapped* rule
//! of [`crate::record`] keeps device commands off mapped memory.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::ptr;

use super::queue::{After, Queue};
use super::svm::{IntoSvm, SvmView, svm_range};
use super::transfer::check_span;
use super::view::{IntoView, View};
use crate::core::staging::{Pinned, Staging};
use crate::error::{Result, Transfer};
use crate::event::Event;
use crate::ffi::{self, cl_event};
use crate::pod::Pod;
use crate::record::block::Block;
use crate::record::failure::settle;
use crate::record::history::MapStep;
use crate::record::history::Writes;
use crate::record::submit::Touch;
use crate::tracker::{Access, Span, Use};

impl After<'_> {
    /// Maps elements `range` of `buffer` for reading on the host; blocks until the map is
    /// done, which waits only on the buffer's writers. Unmapped when the guard drops.
    ///
    /// Several read mappings of one buffer may be alive at once, as OpenCL allows. PoCL 3.1
    /// crashes when several host threads map the same buffer at the same moment (seen with
    /// raw OpenCL calls too); on it, map a shared buffer from one thread at a time.
    ///
    /// On a queue that stages its reads ([`QueueOptions::stage_reads`](crate::QueueOptions::stage_reads), on by default on
    /// GPUs), a mapping of up to 1 MiB of a buffer the library made is a read into pinned
    /// host memory of the queue's, kept until the unmap, which then enqueues nothing: the
    /// same contents and the same rules while mapped, in less host time than NVIDIA's own
    /// map and unmap. Buffers adopted from other code map through the driver.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) or [`Error::ZeroLength`](crate::Error::ZeroLength) for a bad range, [`Error::Mapped`](crate::Error::Mapped)
    /// while the buffer is mapped for writing, [`Error::CommandFailed`](crate::Error::CommandFailed) when the map failed.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer_from(&[10u32, 20, 30, 40])?;
    /// let mapped = queue.map(&buf, 1..3)?; // waits for the buffer's writers only
    /// assert_eq!(*mapped, [20, 30]);
    /// drop(mapped); // unmapped
    /// # Ok(())
    /// # }
    /// ```
    pub fn map<'b, T: Pod>(
        &self,
        buffer: impl IntoView<'b, T>,
        range: Range<usize>,
    ) -> Result<Mapped<'b, T>> {
        self.map_as(buffer, range, Access::Read).map(Mapped)
    }

    /// Maps elements `range` of `buffer` for reading and writing on the host; blocks until
    /// the map is done. No device command may use the buffer until the guard drops.
    ///
    /// # Errors
    ///
    /// As [`After::map`], and [`Error::Mapped`](crate::Error::Mapped) while any other mapping is alive.
    pub fn map_mut<'b, T: Pod>(
        &self,
        buffer: impl IntoView<'b, T>,
        range: Range<usize>,
    ) -> Result<MappedMut<'b, T>> {
        self.map_as(buffer, range, Access::Write).map(MappedMut)
    }

    fn map_as<'b, T: Pod>(
        &self,
        buffer: impl IntoView<'b, T>,
        range: Range<usize>,
        access: Access,
    ) -> Result<Mapping<'b, T>> {
        let view = buffer.into_view();
        let transfer = match access {
            Access::Read => Transfer::Map,
            Access::Write => Transfer::MapMut,
        };
        let len = check_span(transfer, &range, view.len())?;
        let start = view.offset() + range.start;
        let span = view.span(start, len);
        let block = view.block();
        let bytes = len * size_of::<T>();
        let core = &self.queue.core;
        // The *staged read mappings* rule of [`crate::core::staging`]: a small read
        // mapping of the library's own buffer, on a queue that stages its reads, is a
        // read into a pinned block the mapping keeps until it is unmapped.
        if access == Access::Read && !block.is_shared() {
            if let Some((staging, pinned)) = core.stage(bytes) {
                return self.map_staged(view, range.start, len, staging, pinned);
            }
        }
        self.map_through(block, access, span, len, |wait| {
            // SAFETY: the queue and the buffer are live (borrowed); the range was checked;
            // the wait list holds live events.
            unsafe {
                ffi::enqueue_map(
                    core.raw(),
                    block.raw(),
                    access == Access::Write,
                    start * size_of::<T>(),
                    bytes,
                    wait,
                )
            }
        })
    }

    /// The map of `len` elements of `block` (`span`, its bytes), enqueued by `enqueue`,
    /// which returns the event and the mapped address: recorded as a map with `access`
    /// (the *mapped* rule holds for the whole buffer), settled as a read (the *failed
    /// write* rule), and unmapped by the guard whatever happens after the enqueue.
    fn map_through<'b, T: Pod>(
        &self,
        block: &'b Block,
        access: Access,
        span: Span,
        len: usize,
        mut enqueue: impl FnMut(&[cl_event]) -> Result<(cl_event, *mut c_void)>,
    ) -> Result<Mapping<'b, T>> {
        let touch = Touch {
            block,
            how: Use {
                access,
                span,
                late: true,
            },
            map: MapStep::Map(access),
            reads: true,
            covers: false,
        };
        let mut writers = Writes::default();
        let mut mapped = ptr::null_mut();
        let event = self.submit().run_reading(
            &[touch],
            |wait| {
                let (event, at) = enqueue(wait)?;
                mapped = at;
                Ok(event)
            },
            Some(&mut writers),
        )?;
        // From here on the guard unmaps, whatever happens.
        let mapping = Mapping {
            queue: self.queue.clone(),
            block,
            ptr: mapped.cast(),
            len,
            access,
            span,
            unmapped: false,
            staged: None,
            _elements: PhantomData,
        };
        settle(&event, &writers)?;
        // No slice of a misaligned pointer (the guard unmaps).
        mapping.check_aligned()?;
        Ok(mapping)
    }

    /// A read mapping that reads elements `start..start + len` of `buffer` into `pinned`,
    /// a block of the queue's `staging` (the *staged read mappings* rule): recorded as a
    /// map, so that the *mapped* rule holds as for a driver's mapping, with no command to
    /// unmap it.
    fn map_staged<'b, T: Pod>(
        &self,
        view: View<'b, T>,
        start: usize,
        len: usize,
        staging: &Staging,
        pinned: Pinned,
    ) -> Result<Mapping<'b, T>> {
        let (block, at) = (view.block(), pinned.ptr());
        let mut writers = Writes::default();
        let map = MapStep::Map(Access::Read);
        // `at` holds at least `len` elements (the block was taken for that many bytes)
        // and is used by this read alone until the mapping is unmapped.
        let read = match self.enqueue_read(view, start, at.cast(), len, &mut writers, map) {
            Ok(read) => read,
            Err(e) => {
                // Refused before it was enqueued: nothing reads into the block.
                staging.give_back(pinned, self.queue.core.raw());
                return Err(e);
            }
        };
        if let Err(e) = settle(&read, &writers) {
            // The read has ended (`settle` returns only after): the buffer is not mapped.
            block.forget_mapping(Access::Read);
            staging.give_back(pinned, self.queue.core.raw());
            return Err(e);
        }
        let mapping = Mapping {
            queue: self.queue.clone(),
            block,
            ptr: at.cast(),
            len,
            access: Access::Read,
            span: Span::ALL,
            unmapped: false,
            staged: Some((pinned, read)),
            _elements: PhantomData,
        };
        // No slice of a misaligned pointer (the guard gives the staging back).
        mapping.check_aligned()?;
        Ok(mapping)
    }
}

impl After<'_> {
    /// Maps elements `range` of the shared virtual memory `svm` for reading on the host
    /// (`clEnqueueSVMMap`); blocks until the map is done, which waits only on the
    /// allocation's writers. Unmapped when the guard drops. The same guard, and the same
    /// rules while mapped, as [`After::map`].
    ///
    /// # Errors
    ///
    /// As [`After::map`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::SvmKind;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let Ok(svm) = ctx.svm::<u32>(4, SvmKind::Coarse) else { return Ok(()) };
    /// queue.fill_svm(&svm, 9)?;
    /// let mapped = queue.map_svm(&svm, 1..3)?; // waits for the fill
    /// assert_eq!(*mapped, [9, 9]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn map_svm<'b, T: Pod>(
        &self,
        svm: impl IntoSvm<'b, T>,
        range: Range<usize>,
    ) -> Result<Mapped<'b, T>> {
        self.map_svm_as(svm.into_svm(), range, Access::Read)
            .map(Mapped)
    }

    /// Maps elements `range` of `svm` for reading and writing on the host; blocks until
    /// the map is done. No device command may use the allocation until the guard drops.
    ///
    /// # Errors
    ///
    /// As [`After::map_mut`].
    pub fn map_svm_mut<'b, T: Pod>(
        &self,
        svm: impl IntoSvm<'b, T>,
        range: Range<usize>,
    ) -> Result<MappedMut<'b, T>> {
        self.map_svm_as(svm.into_svm(), range, Access::Write)
            .map(MappedMut)
    }

    fn map_svm_as<'b, T: Pod>(
        &self,
        view: SvmView<'b, T>,
        range: Range<usize>,
        access: Access,
    ) -> Result<Mapping<'b, T>> {
        let transfer = match access {
            Access::Read => Transfer::Map,
            Access::Write => Transfer::MapMut,
        };
        let (start, len, span) = svm_range(&view, transfer, &range)?;
        let block = view.block();
        let at = block.svm_at(start * size_of::<T>());
        let core = &self.queue.core;
        self.map_through(block, access, span, len, |wait| {
            // SAFETY: the queue and the allocation are live (borrowed); the range was
            // checked against it; the wait list holds live events. An SVM map maps the
            // memory at its own address. The queue's driver handle is read here, inside
            // the enqueue protocol, after the *renewed* rule may have replaced it.
            let event = unsafe {
                ffi::enqueue_svm_map(
                    core.raw(),
                    at,
                    access == Access::Write,
                    len * size_of::<T>(),
                    wait,
                )
            }?;
            Ok((event, at))
        })
    }
}

/// A live mapping; unmaps on drop, or when asked (the unmap is recorded like any
/// command).
struct Mapping<'b, T: Pod> {
    queue: Queue,
    block: &'b Block,
    ptr: *mut T,
    len: usize,
    access: Access,
    /// The bytes mapped (the tracker's *byte ranges* rule).
    span: Span,
    /// Whether the unmap was enqueued (or refused) already.
    unmapped: bool,
    /// A staged read mapping's pinned block, which `ptr` points into, and the event of
    /// the read that filled it (the *staged read mappings* rule).
    staged: Option<(Pinned, Event)>,
    _elements: PhantomData<&'b mut [T]>,
}

impl<T: Pod> Mapping<'_, T> {
    /// [`Error::HostMisaligned`](crate::Error::HostMisaligned) unless the driver's pointer
    /// is aligned for `T`: a slice is made of it only then.
    fn check_aligned(&self) -> Result<()> {
        check_aligned::<T>(self.ptr.cast())
    }

    /// Enqueues the unmap; called once, by the guard's `unmap` or by the drop, whichever
    /// comes first.
    fn unmap(&mut self) -> Result<Event> {
        self.unmapped = true;
        let queue = &self.queue.core;
        if let Some((pinned, read)) = self.staged.take() {
            // Nothing on the device to unmap: the record lets go of the mapping, and the
            // block goes back to the queue (its read has ended).
            self.block.forget_mapping(self.access);
            if let Some(staging) = &self.queue.core.staging {
                staging.give_back(pinned, queue.raw());
            }
            return Ok(read);
        }
        let (block, mapped) = (self.block, self.ptr);
        let touch = Touch {
            block,
            how: Use {
                access: self.access,
                span: self.span,
                late: true,
            },
            map: MapStep::Unmap(self.access),
            reads: false,
            covers: false,
        };
        let unmapped = self.queue.after(&[]).submit().run(&[touch], |wait| {
            // SAFETY: the queue and the buffer are live (borrowed); `mapped` came from
            // clEnqueueMapBuffer on this buffer and is unmapped once, here (`unmapped`
            // was false: the drop checks it, and the guard that lent the memory out was
            // consumed or dropped); the wait list holds live events. An SVM mapping is
            // unmapped by its address, which clEnqueueSVMMap mapped.
            unsafe {
                if block.is_svm() {
                    ffi::enqueue_svm_unmap(queue.raw(), mapped.cast(), wait)
                } else {
                    ffi::enqueue_unmap(queue.raw(), block.raw(), mapped.cast(), wait)
                }
            }
        });
        if unmapped.is_err() {
            // The driver holds no mapping it would unmap (rusticl refuses the pointer of a
            // map that failed with CL_INVALID_VALUE): the record lets go of it too, or
            // every later command on the buffer would be refused as mapped.
            block.forget_mapping(self.access);
        }
        unmapped
    }
}

impl<T: Pod> Drop for Mapping<'_, T> {
    fn drop(&mut self) {
        if self.unmapped {
            return;
        }
        if let Err(e) = self.unmap() {
            log::error!(target: "cl_lifetime::queue", "unmapping a buffer: {e}");
        }
    }
}

/// Part of a buffer mapped for reading on the host ([`Queue::map`]). Derefs to `[T]`;
/// unmapped on drop.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Error, Mapped};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer_from(&[1u32, 2, 3, 4])?;
/// let mapped: Mapped<'_, u32> = queue.map(&buf, 0..4)?;
/// assert_eq!(mapped.iter().sum::<u32>(), 10);
/// assert!(matches!(queue.fill(&buf, 0), Err(Error::Mapped))); // no device write meanwhile
/// drop(mapped);
/// queue.fill(&buf, 0)?;
/// # Ok(())
/// # }
/// ```
pub struct Mapped<'b, T: Pod>(Mapping<'b, T>);

/// Part of a buffer mapped for reading and writing on the host ([`Queue::map_mut`]).
/// Derefs to `[T]` mutably; unmapped on drop, after which device commands see the writes.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Error, MappedMut};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(4)?;
/// let mut mapped: MappedMut<'_, u32> = queue.map_mut(&buf, 0..4)?;
/// mapped.copy_from_slice(&[1, 2, 3, 4]);
/// mapped[0] = 10;
/// assert!(matches!(queue.read_owned(&buf), Err(Error::Mapped))); // not while mapped
/// drop(mapped); // unmapped: device commands see the writes
/// assert_eq!(queue.read_owned(&buf)?.wait()?, [10, 2, 3, 4]);
/// # Ok(())
/// # }
/// ```
pub struct MappedMut<'b, T: Pod>(Mapping<'b, T>);

impl<T: Pod> Mapped<'_, T> {
    /// Unmaps now and returns the unmap's event, which later commands on the buffer wait
    /// for like any other; dropping the guard unmaps the same way but keeps the event.
    /// A staged mapping (see [`After::map`]) has no unmap command: its event is the
    /// read's that filled it, already ended.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`](crate::Error::Cl) when the driver refuses the unmap; the buffer
    /// counts as unmapped all the same.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer_from(&[1u32, 2, 3, 4])?;
    /// let mapped = queue.map(&buf, 1..3)?;
    /// assert_eq!(*mapped, [2, 3]);
    /// let unmapped = mapped.unmap()?;
    /// unmapped.wait()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unmap(mut self) -> Result<Event> {
        self.0.unmap()
    }
}

impl<T: Pod> MappedMut<'_, T> {
    /// Unmaps now and returns the unmap's event, after which device commands see the
    /// writes; as [`Mapped::unmap`].
    ///
    /// # Errors
    ///
    /// As [`Mapped::unmap`].
    pub fn unmap(mut self) -> Result<Event> {
        self.0.unmap()
    }
}

impl<T: Pod> std::ops::Deref for Mapped<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the map completed, so `ptr` addresses `len` elements of host-visible
        // memory until the unmap in Drop; no device command may write them meanwhile
        // (the record refuses it while mapped).
        unsafe { std::slice::from_raw_parts(self.0.ptr, self.0.len) }
    }
}

impl<T: Pod> std::ops::Deref for MappedMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: as for `Mapped`; this is the only mapping of the buffer.
        unsafe { std::slice::from_raw_parts(self.0.ptr, self.0.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for MappedMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `Mapped`; a writable mapping is exclusive (the record refuses any
        // other mapping and every device command), and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr, self.0.len) }
    }
}

impl<T: Pod> fmt::Debug for Mapped<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapped").field("len", &self.0.len).finish()
    }
}

impl<T: Pod> fmt::Debug for MappedMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedMut")
            .field("len", &self.0.len)
            .finish()
    }
}

/// [`Error::HostMisaligned`](crate::Error::HostMisaligned) unless `ptr` is aligned for `T`.
pub(crate) fn check_aligned<T>(ptr: *const c_void) -> Result<()> {
    let (address, align) = (ptr as usize, std::mem::align_of::<T>());
    if address % align == 0 {
        Ok(())
    } else {
        Err(crate::Error::HostMisaligned { address, align })
    }
}
