//! The server's one wall clock, in the unit its records and leases keep:
//! milliseconds since the Unix epoch (and microseconds, where a log's
//! numbering starts from it).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, since the Unix epoch; zero on a clock set before it.
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Now, in milliseconds since the Unix epoch; 0 on a clock set before it.
pub(crate) fn now_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// Now, in microseconds since the Unix epoch; 0 on a clock set before it.
pub(crate) fn now_us() -> u64 {
    since_epoch().as_micros() as u64
}
