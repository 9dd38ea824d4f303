//! [`UserEvent`]: a gate the host opens or fails.

use super::*;

/// A gate the host opens ([`UserEvent::complete`]) or fails ([`UserEvent::fail`]).
/// Commands given it as a dependency wait until then. Dropping a gate that is still
/// closed fails it with `CL_INVALID_OPERATION`, so nothing waits on it forever.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue()?;
/// let buf = ctx.buffer::<u32>(256)?;
/// let gate = ctx.user_event()?;
/// let fill = queue.after(&[gate.event()]).fill(&buf, 5)?;
/// queue.flush()?;
/// assert!(!fill.is_terminal()); // held until the gate opens
/// gate.complete()?;
/// assert_eq!(queue.read_owned(&buf)?.wait()?, vec![5; 256]);
/// assert!(gate.complete().is_err()); // a gate is set once
/// # Ok(())
/// # }
/// ```
pub struct UserEvent {
    gate: Arc<gate::Gate>,
}

impl fmt::Debug for UserEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserEvent")
            .field("event", &self.gate.event)
            .field("set", &self.gate.is_set())
            .finish()
    }
}

impl UserEvent {
    pub(crate) fn new(
        context: cl_context,
        gates: &Arc<OpenGates>,
        id: u64,
        site: &'static std::panic::Location<'static>,
    ) -> Result<UserEvent> {
        Ok(UserEvent {
            gate: gate::Gate::new(context, gates, id, site)?,
        })
    }

    /// The event to pass as a dependency.
    pub fn event(&self) -> &Event {
        &self.gate.event
    }

    /// Opens the gate: commands waiting on it may run.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_OPERATION` when the gate was already set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(8)?;
    /// let gate = ctx.user_event()?;
    /// let write = queue.after(&[gate.event()]).write_owned(&buf, vec![4; 8])?;
    /// gate.complete()?; // the write may run now
    /// write.wait()?;
    /// assert_eq!(queue.read_owned(&buf)?.wait()?, [4; 8]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn complete(&self) -> Result<()> {
        self.gate.set_status_here(ffi::CL_COMPLETE)
    }

    /// Fails the gate with `status`, which must be negative; commands waiting on it
    /// terminate with an error.
    ///
    /// # Errors
    ///
    /// [`Error::Cl`] with `CL_INVALID_VALUE` for a status that is not negative, or
    /// `CL_INVALID_OPERATION` when the gate was already set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), cl_lifetime::Error> {
    /// use cl_lifetime::{Error, Status};
    /// let ctx = cl_lifetime::Context::from_env()?;
    /// let queue = ctx.queue()?;
    /// let buf = ctx.buffer::<u32>(8)?;
    /// let gate = ctx.user_event()?;
    /// let fill = queue.after(&[gate.event()]).fill(&buf, 1)?;
    /// gate.fail(-1)?; // the fill never runs
    /// assert!(matches!(fill.wait(), Err(Error::CommandFailed { .. })));
    /// assert!(matches!(fill.status()?, Status::Failed(_)));
    /// assert!(gate.fail(0).is_err()); // a status that is not negative is refused
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail(&self, status: cl_int) -> Result<()> {
        if status >= 0 {
            return Err(Error::cl(
                "clSetUserEventStatus",
                ffi::codes::CL_INVALID_VALUE,
            ));
        }
        self.gate.set_status_here(status)
    }
}

impl std::ops::Deref for UserEvent {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.gate.event
    }
}

impl Drop for UserEvent {
    fn drop(&mut self) {
        // Set through its twin, and not seen yet: as it was set.
        self.gate.follow_twin_now();
        if !self.gate.is_set() {
            log::warn!(
                target: "cl_lifetime::event",
                "the user event {:p} created at {} was dropped while not set; failing it (the \
                 commands behind it fail)",
                self.gate.shown(),
                self.gate.site
            );
            if let Err(e) = self.gate.set_status(ffi::codes::CL_INVALID_OPERATION) {
                log::error!(target: "cl_lifetime::event", "failing a dropped user event: {e}");
            }
        }
    }
}
