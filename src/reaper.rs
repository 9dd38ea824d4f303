//! Deferred releases, on a thread of the library's.
//!
//! # Rules
//!
//! 1. [`ClBuffer::release_deferred`](crate::ClBuffer::release_deferred) returns at once:
//!    the buffer and its event record go to the context's reaper thread, which waits on the
//!    events and releases the memory (the OpenCL `cudaFreeAsync`).
//! 2. Nothing blocking runs in an event callback, and `clReleaseMemObject` never runs in one
//!    (DESIGN.md trap 6): the reaper is an ordinary thread that blocks in
//!    `clWaitForEvents`. NVIDIA's `clReleaseMemObject`, which can block for a whole kernel
//!    (trap 7), blocks the reaper, never the caller.
//! 3. [`Context::wait_deferred`](crate::Context::wait_deferred) waits until every deferred
//!    release submitted before the call is done; dropping the last handle of a context
//!    does the same.
//! 4. Jobs run in submission order. The thread starts with the first job and ends when the
//!    context is gone.

use std::sync::mpsc::{self, Sender};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle, ThreadId};

/// A deferred release, or any other work that must leave the caller's thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Progress {
    submitted: u64,
    done: u64,
}

#[derive(Default)]
pub(crate) struct Reaper {
    sender: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<(JoinHandle<()>, ThreadId)>>,
    progress: std::sync::Arc<(Mutex<Progress>, Condvar)>,
}

impl Reaper {
    /// Rule 1: hands `job` to the reaper thread, starting it if needed. If the thread cannot
    /// be started, the job runs here instead: late is better than leaked.
    pub(crate) fn submit(&self, job: Job) {
        let mut sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        if sender.is_none() {
            match self.start() {
                Ok(started) => *sender = Some(started),
                Err(e) => {
                    log::error!(target: "cl_lifetime::reaper", "no reaper thread ({e}); releasing on the caller's thread");
                    job();
                    return;
                }
            }
        }
        self.progress
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .submitted += 1;
        if let Some(tx) = sender.as_ref() {
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                // The thread is gone (it cannot be, while `sender` lives): run it here.
                job();
                self.finished();
            }
        }
    }

    fn start(&self) -> std::io::Result<Sender<Job>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let progress = self.progress.clone();
        let handle = thread::Builder::new()
            .name("cl-lifetime-reaper".to_string())
            .spawn(move || {
                for job in rx {
                    job();
                    let (lock, signal) = &*progress;
                    lock.lock().unwrap_or_else(PoisonError::into_inner).done += 1;
                    signal.notify_all();
                }
            })?;
        let id = handle.thread().id();
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some((handle, id));
        Ok(tx)
    }

    fn finished(&self) {
        let (lock, signal) = &*self.progress;
        lock.lock().unwrap_or_else(PoisonError::into_inner).done += 1;
        signal.notify_all();
    }

    /// Rule 3: blocks until every job submitted before this call has run.
    pub(crate) fn wait_idle(&self) {
        let (lock, signal) = &*self.progress;
        let progress = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let target = progress.submitted;
        let _done = signal
            .wait_while(progress, |p| p.done < target)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Closing the channel ends the thread once its queue is empty.
        drop(
            self.sender
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((handle, id)) = thread {
            // The last job may hold the last reference to the context, so this can run on
            // the reaper itself, which then ends on its own.
            if thread::current().id() != id && handle.join().is_err() {
                log::error!(target: "cl_lifetime::reaper", "the reaper thread panicked");
            }
        }
    }
}
