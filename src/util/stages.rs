//! Stage timing for profiling a release.

use std::panic::Location;
use std::time::{Duration, Instant};

/// A release's time, stage by stage, logged at trace level under the target
/// `cl_lifetime::buffer::stages` (`RUST_LOG=cl_lifetime::buffer::stages=trace`)
/// for profiling: each stage's host time, library bookkeeping and driver calls alike. Costs
/// nothing when trace logging is off.
pub(crate) struct Stages {
    last: Option<Instant>,
    spent: Vec<(&'static str, Duration)>,
}

impl Stages {
    pub(crate) fn start() -> Stages {
        let on = log::log_enabled!(target: "cl_lifetime::buffer::stages", log::Level::Trace);
        Stages {
            last: on.then(Instant::now),
            spent: Vec::new(),
        }
    }

    /// Ends the stage called `name`.
    pub(crate) fn mark(&mut self, name: &'static str) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.spent.push((name, now - last));
            self.last = Some(now);
        }
    }

    pub(crate) fn log(&self, allocated_at: &Location<'_>) {
        if self.last.is_some() {
            let total: Duration = self.spent.iter().map(|(_, d)| *d).sum();
            let stages: Vec<String> = self
                .spent
                .iter()
                .map(|(name, d)| format!("{name} {:.2}", d.as_secs_f64() * 1e6))
                .collect();
            log::trace!(
                target: "cl_lifetime::buffer::stages",
                "release of the buffer allocated at {allocated_at}: {:.2} µs = {} (µs)",
                total.as_secs_f64() * 1e6,
                stages.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Stages;

    #[test]
    fn release_stages_are_not_timed_while_trace_logging_is_off() {
        // No logger is installed in unit tests, so trace is off: no clock is read and
        // nothing is kept.
        let mut stages = Stages::start();
        stages.mark("ledger");
        stages.mark("wait");
        assert!(stages.last.is_none());
        assert!(stages.spent.is_empty());
    }

    #[test]
    fn release_stages_keep_each_stage_in_order_when_on() {
        let mut stages = Stages {
            last: Some(std::time::Instant::now()),
            spent: Vec::new(),
        };
        stages.mark("ledger");
        stages.mark("wait");
        let names: Vec<&str> = stages.spent.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["ledger", "wait"]);
    }
}
