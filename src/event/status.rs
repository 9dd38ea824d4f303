//! Reading a command's status: once from the driver when it is terminal, and, once a
//! failure is possible, resolved against the command's queue and wait list (a driver's
//! "complete" is not taken on trust after a failure).

use super::*;

impl Event {
    /// The command's execution status.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] when the status cannot be queried.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::Status;
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(1024)?;
    /// let fill = queue.fill(&buf, 1)?;
    /// fill.wait()?;
    /// assert_eq!(fill.status()?, Status::Complete);
    /// # Ok(())
    /// # }
    /// ```
    pub fn status(&self) -> Result<Status> {
        let seen = self.inner.seen.load(Ordering::Acquire);
        if seen != UNKNOWN {
            if seen < 0 {
                self.let_go_of_ended_deps();
            }
            return Ok(Status::from_raw(seen));
        }
        let snapshot = snapshot::current();
        if snapshot != 0 {
            let pending = self.inner.pending_in.load(Ordering::Relaxed);
            if pending >> 2 == snapshot {
                return Ok(Status::from_raw((pending & 3) as cl_int));
            }
        }
        if self.finished_by_its_queue() {
            return Ok(Status::from_raw(self.finish(ffi::CL_COMPLETE)));
        }
        let raw = ffi::execution_status(self.inner.raw.raw())
            .map_err(|s| Error::cl("clGetEventInfo", s))?;
        let raw = match raw {
            ffi::CL_COMPLETE if failures_possible() => self.resolve_complete(),
            terminal if terminal <= ffi::CL_COMPLETE => self.finish(terminal),
            running => self.note_pending(snapshot, running),
        };
        Ok(Status::from_raw(raw))
    }

    /// The *finished queue* rule: a command that a successful [`Queue::finish`] waited
    /// for, while no failure was possible, has completed; no driver call is needed to
    /// know it (after 10^5 commands, PoCL's first status read of one costs 1.4-2.5 µs).
    ///
    /// [`Queue::finish`]: crate::Queue::finish
    fn finished_by_its_queue(&self) -> bool {
        self.inner
            .queue
            .as_ref()
            .is_some_and(|q| q.finished(self.inner.finish_count))
    }

    /// Keeps a pending status for the rest of the enqueue that read it (`snapshot`).
    fn note_pending(&self, snapshot: u64, running: cl_int) -> cl_int {
        if snapshot != 0 && (0..=3).contains(&running) {
            let pending = snapshot << 2 | running as u64;
            self.inner.pending_in.store(pending, Ordering::Relaxed);
        }
        running
    }

    /// The status of this command, which the driver reports complete, once a failure is
    /// possible. It failed when its queue's driver may have skipped it after another
    /// command failed (design trap "a failure echoes on its queue"), or when a command of
    /// its wait list failed: NVIDIA reports some such commands complete without having
    /// run them, and runs others on what a skipped command left. The commands of the wait
    /// list that the driver reports complete are resolved the same way first, without
    /// recursion, so a chain that ran after a skipped command fails as a whole.
    fn resolve_complete(&self) -> cl_int {
        // Most commands resolve in one step, with no allocation; a chain of commands the
        // driver reports complete and no one has asked about is walked with a stack.
        let Some(deps) = self.resolve_step() else {
            return self.inner.seen.load(Ordering::Acquire);
        };
        // Usually each of those resolves in one step itself, and so does this one then.
        if deps.iter().all(|dep| dep.resolve_step().is_none()) {
            let failed = self.failed_dependency();
            return self.finish(failed.unwrap_or(ffi::CL_COMPLETE));
        }
        let mut stack: Vec<(Event, Vec<Event>)> = vec![(self.clone(), deps)];
        while let Some((_, deps)) = stack.last_mut() {
            match deps.pop() {
                Some(dep) => {
                    if let Some(its_deps) = dep.resolve_step() {
                        stack.push((dep, its_deps));
                    }
                }
                None => {
                    if let Some((event, _)) = stack.pop() {
                        // Every dependency the driver reported complete is resolved now.
                        let failed = event.failed_dependency();
                        event.finish(failed.unwrap_or(ffi::CL_COMPLETE));
                    }
                }
            }
        }
        self.inner.seen.load(Ordering::Acquire)
    }

    /// One step of [`Event::resolve_complete`] for a command the driver reports complete
    /// (or already resolved): finishes it when its queue may have skipped it, when a
    /// dependency failed, or when every dependency is resolved, reading each dependency's
    /// status once; otherwise returns the dependencies to resolve first.
    fn resolve_step(&self) -> Option<Vec<Event>> {
        if self.inner.seen.load(Ordering::Acquire) != UNKNOWN {
            return None;
        }
        if self
            .inner
            .queue
            .as_ref()
            .is_some_and(|queue| queue.skipped(self.inner.seq))
        {
            self.finish(ffi::codes::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
            return None;
        }
        let mut unresolved = Vec::new();
        let mut failed = None;
        {
            let deps = self.inner.deps.lock();
            for dep in deps.as_deref().unwrap_or_default() {
                let unknown = dep.inner.seen.load(Ordering::Acquire) == UNKNOWN;
                match dep.raw_status_now() {
                    status if status < 0 => {
                        failed = Some(status);
                        break;
                    }
                    ffi::CL_COMPLETE if unknown => unresolved.push(dep.clone()),
                    _ => {}
                }
            }
        }
        if failed.is_some() || unresolved.is_empty() {
            self.finish(failed.unwrap_or(ffi::CL_COMPLETE));
            None
        } else {
            Some(unresolved)
        }
    }

    /// Records the terminal status `raw`, unless one was recorded first (which is
    /// returned instead), and lets go of the dependencies that are no longer needed.
    fn finish(&self, raw: cl_int) -> cl_int {
        if let Err(seen) =
            self.inner
                .seen
                .compare_exchange(UNKNOWN, raw, Ordering::AcqRel, Ordering::Acquire)
        {
            return seen;
        }
        if crate::trace::on() {
            crate::trace::seen_ended(self.inner.raw.raw(), raw);
        }
        if raw == ffi::CL_COMPLETE {
            // Complete, so every dependency completed before it: none is needed now,
            // and letting them go breaks chains of commands that waited on each other.
            let deps = self.inner.deps.lock().take();
            if let Some(deps) = deps {
                drop_iteratively(deps);
            }
        } else {
            match &self.inner.queue {
                Some(queue) => queue.ctx.gates.note_failure(),
                None => note_failure(),
            }
            self.let_go_of_ended_deps();
        }
        raw
    }

    /// The terminal status if known, else the driver's status, without looking at
    /// dependencies (no recursion through chains of commands).
    fn raw_status_now(&self) -> cl_int {
        let seen = self.inner.seen.load(Ordering::Acquire);
        if seen != UNKNOWN {
            return seen;
        }
        ffi::execution_status(self.inner.raw.raw()).unwrap_or(-1)
    }

    /// Whether the command has ended (completed or failed), asked without recursion.
    pub(crate) fn has_ended(&self) -> bool {
        self.raw_status_now() <= ffi::CL_COMPLETE
    }

    /// A failed command keeps its dependencies only while one of them may still end
    /// (and notify it); once all have ended they go, so that commands that failed one
    /// after another do not keep each other in a chain.
    fn let_go_of_ended_deps(&self) {
        let mut deps = self.inner.deps.lock();
        if deps
            .as_deref()
            .is_some_and(|d| d.iter().all(Event::has_ended))
        {
            let ended = deps.take();
            drop(deps);
            if let Some(ended) = ended {
                drop_iteratively(ended);
            }
        }
    }

    /// Whether the command has not ended although one of its dependencies failed: a
    /// driver may still fail it, or run it (NVIDIA), and a command that waits on it may
    /// fail with it.
    pub(crate) fn is_doomed(&self) -> bool {
        !self.has_ended() && self.failed_dependency().is_some()
    }

    /// The status of a failed event of this command's wait list, if one failed.
    fn failed_dependency(&self) -> Option<cl_int> {
        let deps = self.inner.deps.lock();
        deps.as_deref()?
            .iter()
            .map(Event::raw_status_now)
            .find(|&status| status < 0)
    }
}
