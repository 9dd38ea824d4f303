//! Handles from opencl3, the binding this crate is built on (and re-exports): each
//! conversion takes a reference of its own, as `from_raw` does, and leaves the opencl3
//! object and its reference as they were (design trap "opencl3's From releases": the
//! library never converts opencl3's objects into raw handles by value).
//!
//! They are safe where `from_raw` is not because an opencl3 object holds a valid handle
//! for as long as it is borrowed.

use super::buffer::ClBuffer;
use super::context::Context;
use super::queue::Queue;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::kernel::Program;
use crate::pod::Pod;
use opencl3::memory::ClMem as _;

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
