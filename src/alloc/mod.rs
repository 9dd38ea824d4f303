//! The allocation layer, a client of the buffer API: pools that reuse blocks without
//! waiting for the device, and arenas carved from one buffer. Their bookkeeping of size
//! classes has no OpenCL in it ([`classes`]).

mod arena;
mod classes;
mod pool;

pub use arena::Arena;
pub use pool::{POISON, Pool, PoolOptions, PoolStats};
