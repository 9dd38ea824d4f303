//! Kernel launches, and the buffer arguments that name their access.

use super::queue::{After, Queue};
use super::svm::{IntoSvm, SvmBuffer, SvmView};
use std::ops::RangeBounds;

use super::view::{IntoView, View};
use crate::error::Result;
use crate::event::Event;
use crate::kernel::{Arg, Kernel};
use crate::pod::Pod;
use crate::pod::Ty;
use crate::record::sub::Held;
use crate::record::submit::Touch;
use crate::tracker::Access;
use crate::util::inline;

/// A buffer or a view the kernel uses with `access`.
fn buffer_arg<'a, T: Pod>(view: View<'a, T>, access: Access) -> Arg<'a> {
    Arg::block(
        view.block(),
        access,
        Ty::of::<T>(),
        view.region(),
        view.arg_span(),
    )
}

/// The whole buffer of `buffer`, of which the kernel touches only the elements `range` of
/// `buffer` with `access`: the record has only their bytes, through the buffer's own
/// memory object (the *range arguments* rule of [`Arg::read_range`]).
fn range_arg<'a, T: Pod>(
    buffer: impl IntoView<'a, T>,
    range: impl RangeBounds<usize>,
    access: Access,
) -> Result<Arg<'a>> {
    let declared = buffer.into_view().view(range)?;
    Ok(Arg::block(
        declared.block(),
        access,
        Ty::of::<T>(),
        None,
        declared.own_span(),
    ))
}

/// What a kernel takes as a pointer argument: a buffer or a [`View`] of one
/// (every [`IntoView`]), or shared virtual memory ([`SvmBuffer`], [`SvmView`]).
pub trait IntoArg<'a, T: Pod> {
    /// The argument, used by the kernel with `access`.
    fn into_arg(self, access: Access) -> Arg<'a>;
}

impl<'a, T: Pod, V: IntoView<'a, T>> IntoArg<'a, T> for V {
    fn into_arg(self, access: Access) -> Arg<'a> {
        buffer_arg(self.into_view(), access)
    }
}

impl<'a, T: Pod> IntoArg<'a, T> for &'a SvmBuffer<T> {
    fn into_arg(self, access: Access) -> Arg<'a> {
        self.into_svm().arg(access)
    }
}

impl<'a, T: Pod> IntoArg<'a, T> for SvmView<'a, T> {
    fn into_arg(self, access: Access) -> Arg<'a> {
        self.arg(access)
    }
}

impl<'a> Arg<'a> {
    /// A buffer (or a [`View`](crate::View) of one, or shared virtual memory) the kernel
    /// only reads.
    pub fn read<T: Pod>(buffer: impl IntoArg<'a, T>) -> Arg<'a> {
        buffer.into_arg(Access::Read)
    }

    /// A buffer (or a view, or shared virtual memory) the kernel writes (and may read).
    ///
    /// A view is passed to the kernel as a sub-buffer: its element 0 is the view's first
    /// element, and its start must be a multiple of the device's
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` (the launch returns
    /// [`Error::ViewMisaligned`](crate::Error::ViewMisaligned) otherwise). The kernel must
    /// touch only the view's elements (tell it the view's length). Views of one buffer
    /// passed to kernels may overlap: reads of overlapping views run at once, and a write
    /// is ordered after every pending command on bytes it overlaps. For a part at any
    /// element, pass the whole buffer with [`Arg::write_range`]. A view of shared
    /// virtual memory is the address of its first element, with none of these limits: the
    /// kernel may reach anywhere in the allocation from it, and the launch is recorded as
    /// using the whole allocation with the access declared (see [`SvmBuffer`]).
    pub fn write<T: Pod>(buffer: impl IntoArg<'a, T>) -> Arg<'a> {
        buffer.into_arg(Access::Write)
    }

    /// A buffer (or a view, or shared virtual memory) the kernel reads and writes.
    pub fn read_write<T: Pod>(buffer: impl IntoArg<'a, T>) -> Arg<'a> {
        Arg::write(buffer).read_and_written()
    }

    /// The whole buffer, of which the kernel only reads the elements `range`: a halo, or a
    /// part that starts at any element.
    ///
    /// # Range arguments
    ///
    /// - **The whole buffer, the range's bytes.** The kernel is given the whole buffer
    ///   (its element 0 is the buffer's first element, also when `buffer` is a
    ///   [`View`](crate::View)), and the launch is recorded as touching only the elements
    ///   `range` (counted from the start of `buffer`, as every command's offsets on a view
    ///   are), with the tracker's byte-range hazards: commands on disjoint ranges do not
    ///   wait on each other, reads of overlapping ranges run at once, and a write is
    ///   ordered after every pending command on bytes it overlaps and before later ones.
    /// - **No sub-buffer.** Nothing is made for it, so it starts at any element (a view
    ///   passed to a kernel needs an origin at a multiple of the device's
    ///   `CL_DEVICE_MEM_BASE_ADDR_ALIGN`, [`Error::ViewMisaligned`](crate::Error::ViewMisaligned)),
    ///   and its commands go through the buffer's own memory object: they are ordered with
    ///   every command through a view's sub-buffer where one writes, whatever the bytes
    ///   (OpenCL leaves a buffer and its sub-buffers used at once undefined). A program
    ///   splitting a buffer between kernels uses ranges for all of them.
    /// - **The kernel's contract.** The kernel must touch only the elements `range`, and
    ///   write none of them when passed with `read_range`: this is part of what the
    ///   caller of the launch vouches for ([`After::launch`]). Pass the range's first
    ///   element (and its length) as scalar arguments.
    ///
    /// # Errors
    ///
    /// As [`ClBuffer::view`](crate::ClBuffer::view) for `range`: [`Error::OutOfRange`](crate::Error::OutOfRange),
    /// [`Error::ReversedRange`](crate::Error::ReversedRange), [`Error::ZeroLength`](crate::Error::ZeroLength).
    ///
    /// # Examples
    ///
    /// Two kernels on two queues, each reading a halo that overlaps the other's, at an
    /// offset no device aligns sub-buffers to:
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Arg;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let (q0, q1) = (ctx.queue()?, ctx.queue()?);
    /// let source = "__kernel void sum3(__global const int *x, __global int *y, uint first) {
    ///     size_t i = first + get_global_id(0); y[i] = x[i - 1] + x[i] + x[i + 1]; }";
    /// let sum3 = ctx.program_from_source("sum3", source, "")?.kernel("sum3")?;
    /// let x = ctx.buffer_from(&[1i32; 10])?;
    /// let y = ctx.buffer_from(&[0i32; 10])?;
    /// // Elements 1..5 and 5..9 of y, from 0..6 and 4..10 of x.
    /// for (queue, first) in [(&q0, 1usize), (&q1, 5)] {
    ///     let args = [
    ///         Arg::read_range(&x, first - 1..first + 5)?,
    ///         Arg::write_range(&y, first..first + 4)?,
    ///         Arg::scalar(first as u32),
    ///     ];
    ///     // SAFETY: sum3 reads x[first - 1 + k] for k < 6 and writes y[first + k] for
    ///     // k < 4: the declared ranges.
    ///     unsafe { queue.launch(&sum3, &[4], &args) }?;
    /// }
    /// assert_eq!(q0.read_owned(&y)?.wait()?, [0, 3, 3, 3, 3, 3, 3, 3, 3, 0]);
    /// assert!(Arg::read_range(&x, 8..11).is_err()); // past the end
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_range<T: Pod>(
        buffer: impl IntoView<'a, T>,
        range: impl RangeBounds<usize>,
    ) -> Result<Arg<'a>> {
        range_arg(buffer, range, Access::Read)
    }

    /// The whole buffer, of which the kernel writes (and may read) the elements `range`
    /// only: as [`Arg::read_range`] says.
    ///
    /// # Errors
    ///
    /// As [`Arg::read_range`].
    pub fn write_range<T: Pod>(
        buffer: impl IntoView<'a, T>,
        range: impl RangeBounds<usize>,
    ) -> Result<Arg<'a>> {
        range_arg(buffer, range, Access::Write)
    }

    /// The whole buffer, of which the kernel reads and writes the elements `range` only:
    /// as [`Arg::read_range`] says.
    ///
    /// # Errors
    ///
    /// As [`Arg::read_range`].
    pub fn read_write_range<T: Pod>(
        buffer: impl IntoView<'a, T>,
        range: impl RangeBounds<usize>,
    ) -> Result<Arg<'a>> {
        Arg::write_range(buffer, range).map(Arg::read_and_written)
    }
}

impl After<'_> {
    /// Launches `kernel` over `global` work items, letting the device pick the
    /// work-group size. Every buffer argument records the launch with its access.
    ///
    /// # What is checked
    ///
    /// Before the driver sees anything, the library checks (the launch checks):
    /// - the kernel, every buffer and every event come from this queue's context;
    /// - `args` has one entry per kernel parameter, and each has the kind the kernel
    ///   declares: a buffer for a `__global` or `__constant` pointer, [`Arg::local`] for a
    ///   `__local` one, [`Arg::scalar`] of the declared size for a value (images,
    ///   samplers, pipes and queues are refused). Where the driver gives no argument
    ///   information, only the count is checked and the driver checks the rest;
    /// - local memory: each [`Arg::local`] at least one byte, all of them within the
    ///   device's `CL_DEVICE_LOCAL_MEM_SIZE`;
    /// - work sizes: one to three dimensions, none zero, a local size within the device's
    ///   and the kernel's work-group limits (its `reqd_work_group_size` where it declares
    ///   one) that divides the global size where work groups must be uniform (a program
    ///   of OpenCL C 1.x, the default, or built with `-cl-uniform-work-group-size`, or a
    ///   device without non-uniform work groups), and each global dimension at most
    ///   2³² − 1 groups.
    ///
    /// A launch these checks refuse, or one refused for a mapped buffer or a failed
    /// dependency, leaves every buffer's record as it was: not even a new buffer's zero
    /// fill is enqueued. A refused launch keeps no sub-buffer of its views either, however
    /// it was refused (the driver's refusal included).
    ///
    /// # Safety
    ///
    /// No check can see the kernel's body, and the kernel runs on memory the library
    /// hands it: on a CPU device that is host memory, which no OpenCL implementation
    /// guards. So a launch is `unsafe`, as in cudarc, opencl3 and ocl. The caller
    /// guarantees that every work item of the launch:
    ///
    /// - reads and writes a buffer or [`View`](crate::View) argument only at elements it
    ///   has: indices from 0 to below the argument's length, where a view's element 0 is
    ///   the view's first element. A launch of more work items than an argument has
    ///   elements needs a kernel that guards its index (`if (i < n)`, with `n` passed as a
    ///   scalar). A buffer passed with a range ([`Arg::read_range`], [`Arg::write_range`],
    ///   [`Arg::read_write_range`]) arrives whole (element 0 is the buffer's), and the
    ///   kernel touches only the elements of that range;
    /// - reads and writes shared virtual memory only inside the allocations passed as
    ///   arguments ([`SvmBuffer`] or [`SvmView`], each recorded as its whole allocation),
    ///   whether by index or through pointers stored in the memory;
    /// - writes only arguments passed with [`Arg::write`] or [`Arg::read_write`] (or their
    ///   `_range` forms, only inside the range): the
    ///   library orders other commands, maps and host reads by the access each argument
    ///   declares, so a write through an [`Arg::read`] argument races with them (and with
    ///   the host slices of a map);
    /// - uses local memory only within the bytes each [`Arg::local`] gives;
    /// - reaches no other memory: not through a pointer passed as a scalar, nor one stored
    ///   in a buffer that points outside the arguments above.
    ///
    /// Everything else is the library's to check, and is checked: a launch that keeps
    /// this contract reaches no undefined behaviour, whatever its arguments and sizes.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`](crate::Error::ContextMismatch), [`Error::ArgCount`](crate::Error::ArgCount), [`Error::KernelArg`](crate::Error::KernelArg) naming the
    /// argument, what was given and what the kernel declares, [`Error::WorkSize`](crate::Error::WorkSize) with the
    /// sizes and the device's limits, [`Error::DependencyFailed`](crate::Error::DependencyFailed) (the *failed write* rule, or a failed dependency), or
    /// [`Error::Cl`](crate::Error::Cl) from `clEnqueueNDRangeKernel`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Arg;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let source = "__kernel void axpy(__global const float *x, __global float *y, float a) {
    ///     size_t i = get_global_id(0); y[i] += a * x[i]; }";
    /// let axpy = ctx.program_from_source("axpy", source, "")?.kernel("axpy")?;
    /// let (x, y) = (ctx.buffer_from(&[1.0f32; 64])?, ctx.buffer_from(&[2.0f32; 64])?);
    /// let args = [Arg::read(&x), Arg::read_write(&y), Arg::scalar(3.0f32)];
    /// // SAFETY: axpy touches element i < 64 of x and y, both 64 long, and writes only y.
    /// unsafe { queue.after(&[]).launch(&axpy, &[64], &args)? };
    /// assert_eq!(queue.read_owned(&y)?.wait()?, vec![5.0; 64]);
    /// # Ok(())
    /// # }
    /// ```
    pub unsafe fn launch(
        &self,
        kernel: &Kernel,
        global: &[usize],
        args: &[Arg<'_>],
    ) -> Result<Event> {
        // SAFETY: the caller keeps this launch's contract, which is `launch_kernel`'s.
        unsafe { self.launch_kernel(kernel, global, None, args) }
    }

    /// Launches `kernel` over `global` work items in work groups of `local`.
    ///
    /// # Safety
    ///
    /// As [`After::launch`]: the kernel touches only the elements of its arguments, and
    /// writes only those passed as written.
    ///
    /// # Errors
    ///
    /// As [`After::launch`].
    pub unsafe fn launch_local(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
    ) -> Result<Event> {
        // SAFETY: the caller keeps this launch's contract, which is `launch_kernel`'s.
        unsafe { self.launch_kernel(kernel, global, local, args) }
    }

    /// The launch behind [`After::launch`] and [`After::launch_local`], and the path of the
    /// library's own kernels (the pool's poison fill).
    ///
    /// # Safety
    ///
    /// As [`After::launch`]: the kernel, on every work item, touches only the elements of
    /// its arguments that exist, writes only those passed as written, and uses local
    /// memory only within what it is given.
    pub(crate) unsafe fn launch_kernel(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
    ) -> Result<Event> {
        let core = &self.queue.core;
        kernel.check_launch(&core.ctx, core.device(), &core.limits, global, local, args)?;
        let mut touches: inline::List<Touch<'_>> = inline::List::new();
        for touch in args.iter().filter_map(Arg::touch) {
            touches.push(touch);
        }
        // Views' sub-buffers, made (or found) before any record is locked.
        let mut subs: Vec<(usize, Held)> = Vec::new();
        if let Err(e) = view_subs(args, core.limits.base_align, &mut subs) {
            forget_new_subs(args, subs);
            return Err(e);
        }
        // The kernel layer's *widest first* rule, where the driver needs it.
        let turn = core
            .orders_kernel_widths
            .then(|| kernel.width_turn(global, core.ctx.gates.count() > 0));
        let submitted = self.submit().run(touches.iter(), |wait| {
            let wait = match &turn {
                Some(turn) => turn.wait_list(wait),
                None => std::borrow::Cow::Borrowed(wait),
            };
            kernel.enqueue(core.raw(), global, local, args, &subs, &wait)
        });
        let event = match submitted {
            Ok(event) => event,
            Err(e) => {
                forget_new_subs(args, subs);
                return Err(e);
            }
        };
        if let Some(turn) = turn {
            turn.launched(&core.ctx, &event);
        }
        Ok(event)
    }
}

impl Queue {
    /// Launches `kernel` over `global` work items, letting the device pick the
    /// work-group size: [`After::launch`] with no dependencies of the caller's. Every
    /// buffer argument records the launch with its access.
    ///
    /// # Safety
    ///
    /// As [`After::launch`], which says what the library checks. In short: every work item
    /// reads and writes only elements of its buffer and view arguments that exist (a launch
    /// wider than a buffer needs a kernel that guards its index), only inside the shared
    /// virtual memory allocations it is given, writes only the arguments passed with
    /// [`Arg::write`] or [`Arg::read_write`], and uses local memory only within each
    /// [`Arg::local`].
    ///
    /// # Errors
    ///
    /// As [`After::launch`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Arg;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let source = "__kernel void scale(__global float *v, float k, uint n) {
    ///     size_t i = get_global_id(0); if (i < n) v[i] *= k; }";
    /// let scale = ctx.program_from_source("scale", source, "")?.kernel("scale")?;
    /// let v = ctx.buffer_from(&[1.0f32; 100])?;
    /// // 128 work items over 100 elements: the kernel guards its index.
    /// let args = [Arg::read_write(&v), Arg::scalar(2.0f32), Arg::scalar(100u32)];
    /// // SAFETY: scale touches element i of v only where i < n = 100, v's length.
    /// unsafe { queue.launch(&scale, &[128], &args)? };
    /// assert_eq!(queue.read_owned(&v)?.wait()?, vec![2.0; 100]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A launch is `unsafe` to call: no library can see what a kernel touches. This one
    /// writes 1024 elements past the end of `x`, and does not compile:
    ///
    /// ```compile_fail,E0133
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Arg;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let source = "__kernel void one(__global uint *x) { x[get_global_id(0)] = 1; }";
    /// let one = ctx.program_from_source("one", source, "")?.kernel("one")?;
    /// let x = ctx.buffer::<u32>(1024)?;
    /// queue.launch(&one, &[2048], &[Arg::write(&x)])?;
    /// # Ok(())
    /// # }
    /// ```
    pub unsafe fn launch(
        &self,
        kernel: &Kernel,
        global: &[usize],
        args: &[Arg<'_>],
    ) -> Result<Event> {
        // SAFETY: the caller keeps this launch's contract, which is `After::launch`'s.
        unsafe { self.after(&[]).launch(kernel, global, args) }
    }

    /// Launches `kernel` over `global` work items in work groups of `local`:
    /// [`After::launch_local`] with no dependencies of the caller's.
    ///
    /// # Safety
    ///
    /// As [`After::launch`].
    ///
    /// # Errors
    ///
    /// As [`After::launch`].
    pub unsafe fn launch_local(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg<'_>],
    ) -> Result<Event> {
        // SAFETY: the caller keeps this launch's contract, which is `After::launch`'s.
        unsafe { self.after(&[]).launch_local(kernel, global, local, args) }
    }
}

/// The sub-buffers of the views among `args` passed to a kernel, by argument index, into
/// `subs` (those made before an error stay there, for [`forget_new_subs`]). One view given
/// as two arguments is one sub-buffer, handed to both.
fn view_subs(args: &[Arg<'_>], align: usize, subs: &mut Vec<(usize, Held)>) -> Result<()> {
    for (index, arg) in args.iter().enumerate() {
        let Some(b) = arg.buffer().filter(|b| !b.block.is_svm()) else {
            continue;
        };
        let Some((origin, bytes)) = b.region else {
            continue;
        };
        let same = subs.iter().find(|(i, _)| {
            args[*i]
                .buffer()
                .is_some_and(|o| o.block.id == b.block.id && o.region == b.region)
        });
        let held = match same {
            Some((_, held)) => held.clone(),
            None => b.block.sub_for_kernel(origin, bytes, align)?,
        };
        subs.push((index, held));
    }
    Ok(())
}

/// The sub-buffers' *none for a refused launch* rule ([`crate::record::sub`]): the
/// sub-buffers made for a launch that was refused go again.
fn forget_new_subs(args: &[Arg<'_>], subs: Vec<(usize, Held)>) {
    for (index, held) in subs {
        if let Some(b) = args[index].buffer().filter(|_| held.is_new()) {
            b.block.forget_unused_sub(held);
        }
    }
}
