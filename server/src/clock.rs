//! The server's one wall clock, in the unit its records and leases keep:
//! milliseconds since the Unix epoch (and microseconds, where a log's
//! numbering starts from it).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch; 0 on a clock set before it.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Now, in microseconds since the Unix epoch; 0 on a clock set before it.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
