//! [`Profile`]: when a command was queued, submitted, started and ended.

/// When a command was queued, submitted, started and ended: `CL_PROFILING_COMMAND_*`, in
/// nanoseconds of the device's clock (comparable between commands of one device).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), cl_lifetime::Error> {
/// use cl_lifetime::{Profile, QueueOptions};
/// let ctx = cl_lifetime::Context::from_env()?;
/// let queue = ctx.queue_with(QueueOptions::default().profiling(true))?;
/// let buf = ctx.buffer::<u32>(1 << 16)?;
/// let fill = queue.fill(&buf, 1)?;
/// fill.wait()?;
/// let profile: Profile = fill.profile()?;
/// assert!(profile.queued <= profile.started && profile.started <= profile.ended);
/// assert_eq!(profile.duration().as_nanos(), u128::from(profile.ended - profile.started));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// When the host enqueued it.
    pub queued: u64,
    /// When the host handed it to the device.
    pub submitted: u64,
    /// When the device started running it.
    pub started: u64,
    /// When the device finished it.
    pub ended: u64,
}

impl Profile {
    /// How long it ran on the device (end - start).
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.ended.saturating_sub(self.started))
    }

    /// How long it waited between being enqueued and starting (start - queued): its wait
    /// list, the queue's order and the device's load.
    pub fn waited(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.started.saturating_sub(self.queued))
    }
}
