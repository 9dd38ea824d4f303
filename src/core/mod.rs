//! The core layer: the per-context and per-queue state every higher layer shares, with
//! no protocol in it.
//!
//! - [`device`]: platforms, devices and the selection rule;
//! - [`driver`]: what a device's driver does, measured at its first context;
//! - [`context::ContextCore`]: one context's handle, devices, counters, ledger, reaper
//!   and open gates;
//! - [`queue::QueueCore`]: one queue's handle, lane, unflushed-work flag and echo;
//! - [`echo`]: which commands of a queue a driver may have skipped after a failure;
//! - [`pins`]: records sharing a command, on a driver whose events keep their buffers;
//! - [`staging`]: pinned host memory that small blocking reads go through on GPUs;
//! - [`stats`]: the enqueue counters and the memory ledger;
//! - [`reaper`]: the thread that finishes deferred releases;
//! - [`shelf`]: the sub-buffers a root keeps until its release, by region;
//! - [`waiter`]: the threads that wake the tasks awaiting commands;
//! - [`gates`]: whether failures are possible, the failure epoch, and a context's
//!   user events not set yet.

pub(crate) mod context;
pub(crate) mod device;
pub(crate) mod driver;
pub(crate) mod echo;
pub(crate) mod gates;
pub(crate) mod pins;
pub(crate) mod queue;
pub(crate) mod reaper;
pub(crate) mod shelf;
pub(crate) mod staging;
pub(crate) mod stats;
pub(crate) mod waiter;
