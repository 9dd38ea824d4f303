//! The record layer: a buffer's block, its event record, the enqueue protocol that keeps
//! the record, and the releases that honour it.
//!
//! - [`block::Block`]: one allocation (a `cl_mem`, or a shared virtual memory pointer) with its
//!   record, ledger bucket and home;
//! - [`history::Record`]: the tracker's [`EventSet`](crate::tracker::EventSet) plus what
//!   the tracker does not know (failures, mappings, the last write, lent host memory);
//! - [`submit`]: the enqueue protocol (gather, enqueue, commit, fold) in one place;
//! - [`release`]: blocking, deferred and owner releases, and their report;
//! - [`failure`]: reading and collecting failures;
//! - [`sub`]: the sub-buffers a block makes for views passed as kernel arguments;
//! - [`hooks`]: the traits through which a pool takes blocks back and kernels are told to
//!   let go of them, without this layer knowing either.
//!
//! # Rules
//!
//! - **Exact wait.** A release waits with `clWaitForEvents` on exactly the buffer's
//!   record (nothing when it is empty: design trap "empty wait lists"), then calls
//!   `clReleaseMemObject` (`clSVMFree` for shared virtual memory: design trap "clSVMFree
//!   does not wait"). It never waits on work that did not touch the buffer: no
//!   `clFinish` (the one exception: the *failed ahead of its turn* rule).
//! - **Failures end too.** A command that failed still ends: the memory is released
//!   anyway and the failure is reported (design trap "a failed wait returns early").
//! - **Failed ahead of its turn.** On a queue whose driver keeps a failed command's buffers
//!   until the commands before it on the in-order queue have ended (Intel's CPU runtime,
//!   whose failed commands end at once: design trap "Intel's CPU runtime keeps a failed
//!   command's buffers until its turn"), a release of a buffer one of whose commands
//!   failed there also waits for the commands before that one on its queue, one at a
//!   time, so that the memory it releases is freed. The commands it waits for are those
//!   the queue's echo watches (every one with a wait list once a failure is possible);
//!   the others wait for nothing but the queue's order. A drop does not wait behind them
//!   while a user event of the context is unset (the *drop behind a gate* rule), and the
//!   reaper releases the buffer only once they have ended
//!   (`release::a_release_after_a_failed_fill_on_a_shared_queue_frees_the_memory_on_every_driver`).
//! - **Zeroed before read.** A buffer made without contents (`Context::buffer`) is
//!   *fresh*: its first command that may read it (a read, a map, a kernel argument, a copy
//!   from it, a partial write) is preceded by a zero fill on that command's queue, enqueued
//!   and recorded under the record's lock once the command has passed its checks; a first
//!   command that writes all of it clears the mark for nothing, once it is enqueued (design
//!   trap "a new buffer holds another's bytes"). A refused command (a failed dependency, a
//!   mapping, a launch check) leaves the mark, and enqueues no fill. A first write of all
//!   of it that fails once enqueued leaves the buffer unreadable (the *failed write* rule),
//!   never another allocation's bytes.
//! - **Every failure reported.** Once a failure is possible, the commands the tracker lets
//!   go of unasked (superseded by a command with an empty wait list: ordered before it by
//!   their queue, or already ended, a failed one included) are kept until seen ended, so
//!   the report lists every failed command that touched the buffer, through a view or not
//!   (`release::a_failed_command_superseded_by_a_write_from_another_queue_is_in_the_release_report`,
//!   `failures::every_failed_command_that_touched_a_buffer_through_a_view_or_not_is_in_its_release_report`).
//!   Until a failure has been seen in the context, a command of the superseding command's
//!   in-order queue that could fail only by following a failed one before it is not kept:
//!   the superseding command, enqueued behind it, fails with it and is reported. Once one
//!   has been seen, every superseded command is kept: the command that failed first may
//!   have touched another buffer only, and the superseding one may run.
//! - **Lent host memory.** Host memory lent to a non-blocking command is kept alive until
//!   the command ends, and no longer: it goes at the next command or prune on the buffer
//!   after the command has ended, and at the latest after the release's wait (design trap
//!   "borrowed host memory").
//! - **Drop behind a gate.** `Drop` does the same as `release`, logs what went wrong, and
//!   never panics. A drop that would wait behind a user event of its context that has not
//!   been set (the natural drop order `let gate; let buf;`, or an unwind) hands the
//!   release to the reaper thread instead and says so in the log; an explicit `release`
//!   waits, as asked, and names in the log the unset user events it may be behind once it
//!   has waited [`STALL_LOG_AFTER`](release::STALL_LOG_AFTER).
//! - **Released means freed.** The library's destructor callback (which only signals:
//!   design trap "nothing blocking in callbacks") has fired before `release` returns. Some
//!   drivers drop their own reference to the buffer a moment after the last event
//!   completes (PoCL does, on its worker thread), so `release` waits for that signal too,
//!   up to the context's free grace; a reference held outside the library (a forgotten
//!   mapping, a raw retain) can delay it longer, which the report shows as
//!   `freed: false`, with the time spent in `free_wait`.
//! - **Failed write.** A failed write leaves the buffer's contents undefined (it may have
//!   run in part, or not at all): a command that reads the buffer after one of the writes
//!   its contents come from failed is refused with
//!   [`Error::DependencyFailed`](crate::Error::DependencyFailed) naming that write (a host
//!   read that was already enqueued returns that error when it ends). A write that reads
//!   nothing of the buffer and covers all of it (`write`, `write_owned`, `fill`, a copy
//!   into all of it) replaces the failed one, and reads succeed again; a partial write
//!   (`write_at`, `fill_range`, `copy_range`) leaves the rest of the buffer to the failed
//!   one, and does not. The rule holds per byte range, as hazards do (the tracker's *byte
//!   ranges* rule): each write is kept with the bytes it wrote until a later write holds
//!   all of them (a failed one until a write of the whole buffer), and a command is refused
//!   only for a failed write of bytes it reads: a read of one half of a buffer is not
//!   refused for a failed write of the other half, nor a read of a copy's source for the
//!   failure of a copy within the buffer (its *two ranges* rule: [`submit`]). On a driver whose failures echo on their queue (NVIDIA), a command that
//!   followed a failed one on its queue counts as failed ([`crate::core::echo`]).
//! - **Failure, not the event.** A write kept for the *failed write* rule is kept as its
//!   failure (its command kind and status) once it is seen failed, not as its event: on
//!   rusticl and Intel's CPU runtime an event keeps its command's buffers and wait list, so
//!   a failed copy or kernel kept for the buffer it wrote held the memory of the buffer it
//!   read, or waited on, past that buffer's release (issue 48;
//!   `release::a_failure_kept_for_a_live_buffer_does_not_keep_a_released_buffers_memory`).
//! - **Mapped.** A mapped buffer refuses device commands that conflict with the mapping
//!   ([`Error::Mapped`](crate::Error::Mapped)): nothing writes memory the host reads, and a
//!   writable mapping is exclusive.
//!
//! # Lock order
//!
//! The library's locks and their order are code: [`crate::util::sync::rank`] lists every
//! lock, outermost first, with what is done while it is held, and in debug builds (the test
//! suite) taking one out of order panics, naming both (the *ranked* rule of
//! [`crate::util::sync`]). No lock is held across a host wait for the device
//! (`clWaitForEvents`) or across a call into user code.
//!
//! A release takes a block's record through `&mut` (no lock): the block is its own. Two
//! records are never locked but by [`submit::Submit`], always in buffer-ID order, so
//! commands on overlapping buffers cannot deadlock.

pub(crate) mod block;
pub(crate) mod failure;
pub(crate) mod history;
pub(crate) mod hooks;
pub(crate) mod release;
pub(crate) mod sub;
pub(crate) mod submit;
