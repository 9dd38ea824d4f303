//! What the library measured of each OpenCL device's driver at its first context, and what
//! that probe cost: the behaviours it adapts to (`cl_lifetime::DriverBehaviour`), never
//! chosen by the platform's name.
//!
//! ```text
//! cargo run --release --example drivers            # every device
//! CL_LIFETIME_DRIVER=unknown cargo run --release --example drivers
//! ```
//!
//! For each device: the first context's creation time (which includes the probe), a
//! second context's (the probe is not repeated), and the measured behaviours.

use std::time::Instant;

use cl_lifetime::{Context, Device};

fn main() -> anyhow::Result<()> {
    for device in Device::all()? {
        let start = Instant::now();
        let first = Context::new(&device)?;
        let first_time = start.elapsed();
        let start = Instant::now();
        let second = Context::new(&device)?;
        let second_time = start.elapsed();
        let b = first.driver();
        println!("{device}");
        println!(
            "  first context {first_time:.2?} (probe {:.2?}), second context {second_time:.2?}",
            b.probe_time()
        );
        println!(
            "  measured: {}  events keep buffers: {}  chains events: {}  ends batches together: {}  \
             reports failed commands complete: {}  mishandles failures: {}  orders kernel widths: {}",
            b.measured(),
            b.events_keep_buffers(),
            b.chains_events(),
            b.ends_batches_together(),
            b.reports_failed_complete(),
            b.mishandles_failures(),
            b.orders_kernel_widths()
        );
        assert_eq!(second.driver(), b, "a second context reuses the probe");
    }
    Ok(())
}
