//! The integration tests, in one binary: one module per area, the helpers they share in
//! [`common`].
//!
//! All areas run in one process, in parallel threads, so a test must not depend on state
//! the library keeps for the whole process (`cl_lifetime::events_held()`, whether any
//! failure has happened yet), on the process's memory, on its environment variables, its
//! working directory or its logger, unless it runs its body in a child process of its own
//! ([`common::isolated`]). Run one area with `cargo test --test integration failures::`,
//! one test with its full path, e.g.
//! `cargo test --test integration -- --exact failures::cancelled_commands_keep_the_process_memory_flat`.

#[macro_use]
mod common;

mod asynchronous;
mod bad_input;
mod device;
mod errors;
mod failures;
mod hazards;
mod interop;
mod pool;
mod programs;
mod release;
mod schedules;
mod stress;
mod svm;
mod threads;
mod trace;
mod transfers;
mod views;
