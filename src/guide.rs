//! The user guide: one chapter per task, each with examples that run as doc tests.
//!
//! The [README](https://github.com/cl-lifetime/cl-lifetime#readme) is the five-minute quick
//! start; these chapters say how each part of the library behaves, on which driver, and
//! what it costs, with the measured figures. Their Markdown sources are `docs/guide/` in
//! the repository, and every Rust block in them runs in the tests (`cargo test --doc`).
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`releasing`] | what `release` waits for and what drivers do at `clReleaseMemObject`; what a buffer records; released means freed |
//! | [`ordering`] | the hazard rules across queues and devices, byte ranges, your own dependencies |
//! | [`pools_and_deferred_release`] | `release_deferred`, pools (`acquire_on`, bounds, poison), arenas and `resize` |
//! | [`failures`] | failed commands and gates, where the guarantees stop, typed errors, the bad-input table |
//! | [`adopting`] | raw and opencl3 handles in and out, raw commands in the record, hazards, profiling |
//! | [`asynchronous`] | awaiting events, reads, releases and allocations; `unblock` |
//! | [`views_and_host_memory`] | views, maps, `write_lent`, `read_into` and pinned host buffers |
//! | [`trace`] | memory statistics, the leak report and the lifetime trace |
//! | [`choosing_a_device`] | `CL_LIFETIME_DEVICE`, kernel files and inline sources, other implementations |
//! | [`driver_notes`] | what is measured per driver, NVIDIA and PoCL specifics, the emulated drivers |
//! | [`measuring_and_testing`] | the benchmarks, the measuring programs and the test targets |
//! | [`shared_virtual_memory`] | SVM allocations, their commands, kernels that follow pointers, release and pools |
//!
//! The driver behaviour the crate was built against, and the traps it guards against (each
//! named, and cited by name in the code), are in `docs/design.md`. The crate's layers and
//! the rules each keeps are in its docs: `cargo doc --open` for the public API and the
//! [`tracker`](crate::tracker) (the event record, tested without a device), and
//! `cargo doc --document-private-items --open` for the layers beneath (`ffi`, the only code
//! that calls OpenCL; `core`; `event`; `record`, with the enqueue protocol, the release
//! rules; `util::sync`, the lock order as code; `kernel`; `api`; `alloc`).

#[doc = include_str!("../docs/guide/01-releasing.md")]
pub mod releasing {}

#[doc = include_str!("../docs/guide/02-ordering.md")]
pub mod ordering {}

#[doc = include_str!("../docs/guide/03-pools-and-deferred-release.md")]
pub mod pools_and_deferred_release {}

#[doc = include_str!("../docs/guide/04-failures.md")]
pub mod failures {}

#[doc = include_str!("../docs/guide/05-adopting.md")]
pub mod adopting {}

#[doc = include_str!("../docs/guide/06-async.md")]
pub mod asynchronous {}

#[doc = include_str!("../docs/guide/07-views-and-host-memory.md")]
pub mod views_and_host_memory {}

#[doc = include_str!("../docs/guide/08-trace.md")]
pub mod trace {}

#[doc = include_str!("../docs/guide/09-choosing-a-device.md")]
pub mod choosing_a_device {}

#[doc = include_str!("../docs/guide/10-driver-notes.md")]
pub mod driver_notes {}

#[doc = include_str!("../docs/guide/11-measuring-and-testing.md")]
pub mod measuring_and_testing {}

#[doc = include_str!("../docs/guide/12-shared-virtual-memory.md")]
pub mod shared_virtual_memory {}
