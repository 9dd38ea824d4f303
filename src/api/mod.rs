//! The public API: [`Context`](context::Context), [`ClBuffer`](buffer::ClBuffer) and
//! [`Queue`](queue::Queue), whose commands are transfers, maps and launches, and
//! commands from other code ([`raw`]), and the host memory transfers lend ([`host`]). Each command
//! checks its input, then hands the buffers it touches and one closure that calls OpenCL
//! to the record layer's enqueue protocol ([`crate::record::submit`]).

pub(crate) mod buffer;
pub(crate) mod context;
pub(crate) mod host;
mod interop;
pub(crate) mod launch;
pub(crate) mod map;
pub(crate) mod pending;
pub(crate) mod queue;
pub(crate) mod raw;
pub(crate) mod svm;
mod transfer;
pub(crate) mod view;
