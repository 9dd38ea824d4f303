//! Handles from other code: raw kernels and programs ([`Kernel::from_raw`],
//! [`Program::from_raw`]; the other kinds' `from_raw` are beside their types), and
//! opencl3's objects, the binding this crate is built on (and re-exports). Each takes a
//! reference of its own and leaves the caller's as it was (design trap "opencl3's From
//! releases": the library never converts opencl3's objects into raw handles by value).
//!
//! The opencl3 conversions are safe where `from_raw` is not because an opencl3 object
//! holds a valid handle for as long as it is borrowed.

use super::buffer::ClBuffer;
use super::context::Context;
use super::queue::Queue;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi;
use crate::kernel::program::ProgramInner;
use crate::kernel::{Kernel, Program};
use crate::pod::Pod;
use opencl3::memory::ClMem as _;

impl Kernel {
    /// A kernel for the raw handle `raw`, made by other code from a program built for
    /// `ctx`: the library takes its own references to it and its program, and the caller
    /// keeps theirs. It launches like any other, with every argument set by the library
    /// at its first launch.
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_kernel`, and from now on no other code sets its arguments or
    /// enqueues it (the library keeps what it set, and sets and enqueues under one lock
    /// per kernel).
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when its program belongs to another context;
    /// [`Error::Cl`] when it cannot be queried.
    pub unsafe fn from_raw(ctx: &Context, raw: ffi::cl_kernel) -> Result<Kernel> {
        let (program, name) = ffi::kernel_program_and_name(raw)?;
        // SAFETY: a valid kernel's program is valid while the kernel is.
        let program = unsafe { ProgramInner::adopt(ctx.core(), program) }?;
        // SAFETY: as the caller vouches; the reference taken here is the kernel's.
        let owned = unsafe { ffi::OwnedKernel::retain(raw) }?;
        Kernel::adopt(owned, &name, &program)
    }
}

impl Program {
    /// A program for the raw handle `raw`, built by other code for the devices of `ctx`:
    /// the library takes its own reference, and the caller keeps theirs. Its kernels are
    /// checked at launch as far as the driver describes them: a program built without
    /// `-cl-kernel-arg-info` gets the count, local-memory and work-size checks only.
    /// [`Program::file`] is `<raw>`.
    ///
    /// # Safety
    ///
    /// `raw` is a valid `cl_program`.
    ///
    /// # Errors
    ///
    /// [`Error::ContextMismatch`] when `raw` belongs to another context; [`Error::Cl`]
    /// when it cannot be queried.
    pub unsafe fn from_raw(ctx: &Context, raw: ffi::cl_program) -> Result<Program> {
        // SAFETY: as the caller vouches.
        Ok(Program::from_inner(unsafe {
            ProgramInner::adopt(ctx.core(), raw)
        }?))
    }
}

impl TryFrom<&opencl3::context::Context> for Context {
    type Error = Error;

    /// The context of an opencl3 `Context`; see [`Context::from_raw`].
    fn try_from(context: &opencl3::context::Context) -> Result<Context> {
        // SAFETY: an opencl3 context holds a valid handle while it is borrowed.
        unsafe { Context::from_raw(context.get()) }
    }
}

impl TryFrom<&opencl3::event::Event> for Event {
    type Error = Error;

    /// The event of an opencl3 `Event`; see [`Event::from_raw`].
    fn try_from(event: &opencl3::event::Event) -> Result<Event> {
        // SAFETY: an opencl3 event holds a valid handle while it is borrowed.
        unsafe { Event::from_raw(event.get()) }
    }
}

impl Queue {
    /// The queue of an opencl3 `CommandQueue` of `ctx`; see [`Queue::from_raw`].
    ///
    /// # Errors
    ///
    /// As [`Queue::from_raw`].
    pub fn from_opencl3(
        ctx: &Context,
        queue: &opencl3::command_queue::CommandQueue,
    ) -> Result<Queue> {
        // SAFETY: an opencl3 queue holds a valid handle while it is borrowed.
        unsafe { Queue::from_raw(ctx, queue.get()) }
    }
}

impl<T: Pod> ClBuffer<T> {
    /// The buffer of an opencl3 `Buffer<T>` of `ctx`; see [`ClBuffer::from_raw`].
    ///
    /// # Errors
    ///
    /// As [`ClBuffer::from_raw`].
    #[track_caller]
    pub fn from_opencl3(ctx: &Context, buffer: &opencl3::memory::Buffer<T>) -> Result<Self> {
        // SAFETY: an opencl3 buffer holds a valid handle while it is borrowed.
        unsafe { ClBuffer::from_raw(ctx, buffer.get()) }
    }
}

impl Program {
    /// The program of an opencl3 `Program` built for `ctx`; see [`Program::from_raw`].
    ///
    /// # Errors
    ///
    /// As [`Program::from_raw`].
    pub fn from_opencl3(ctx: &Context, program: &opencl3::program::Program) -> Result<Program> {
        // SAFETY: an opencl3 program holds a valid handle while it is borrowed.
        unsafe { Program::from_raw(ctx, program.get()) }
    }
}
