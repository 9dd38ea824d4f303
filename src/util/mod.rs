//! Helpers with no OpenCL and no library state: inline lists for the enqueue path,
//! ranked locks (the lock order as code), process-unique IDs, stage timing, and formatting.

pub(crate) mod inline;
pub(crate) mod stages;
pub(crate) mod sync;

use std::sync::atomic::{AtomicU64, Ordering};

/// Gives each context, queue and buffer an ID unique for the life of the process.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `a, b` for a list of code locations.
pub(crate) fn sites(sites: &[&std::panic::Location<'_>]) -> String {
    let names: Vec<String> = sites.iter().map(ToString::to_string).collect();
    names.join(", ")
}
