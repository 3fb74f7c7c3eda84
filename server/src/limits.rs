//! Per-session limits, resolved once against the server's maxima: a
//! creation asks for [`RequestedLimits`] (zero: the default), the session
//! enforces the [`SessionLimits`] they resolve to.

use wsfs::{PathLimits, RequestedLimits};

pub use wsfs::DEFAULT_MAX_WRITE_BYTES;

/// The limits one session's workspace enforces: what its creation asked
/// for, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Largest single write (Write, WriteBytes, the result of an Edit).
    pub max_write_bytes: u64,
    pub path: PathLimits,
    /// Files in the workspace; 0: no limit.
    pub max_files: u64,
    /// Bytes in the workspace; 0: no limit.
    pub max_total_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_write_bytes: DEFAULT_MAX_WRITE_BYTES,
            path: PathLimits::default(),
            max_files: 0,
            max_total_bytes: 0,
        }
    }
}

impl SessionLimits {
    /// Resolves requested limits (0 = default) against the server's maximum
    /// per-write size: a session never gets more than the server allows.
    pub fn resolve(r: &RequestedLimits, server_max_write: u64) -> Self {
        let d = SessionLimits::default();
        let or = |v: u64, default: u64| if v == 0 { default } else { v };
        SessionLimits {
            max_write_bytes: or(r.max_write_bytes, d.max_write_bytes.min(server_max_write))
                .min(server_max_write),
            path: PathLimits {
                max_depth: or(r.max_path_depth as u64, d.path.max_depth as u64) as usize,
                max_segment_chars: or(r.max_segment_length as u64, d.path.max_segment_chars as u64)
                    as usize,
            },
            max_files: r.max_files,
            max_total_bytes: r.max_total_bytes,
        }
    }

    /// The limits as GetSession reports them: in the shape of a request
    /// that would resolve to them.
    pub fn as_requested(self) -> wsfs::RequestedLimits {
        wsfs::RequestedLimits {
            max_write_bytes: self.max_write_bytes,
            max_path_depth: self.path.max_depth as u32,
            max_segment_length: self.path.max_segment_chars as u32,
            max_files: self.max_files,
            max_total_bytes: self.max_total_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_zeroes() {
        let l = SessionLimits::resolve(&RequestedLimits::default(), u64::MAX);
        assert_eq!(l, SessionLimits::default());
    }

    #[test]
    fn never_above_server_maximum() {
        let req = RequestedLimits {
            max_write_bytes: 1 << 40,
            ..Default::default()
        };
        assert_eq!(
            SessionLimits::resolve(&req, 1 << 20).max_write_bytes,
            1 << 20
        );
        assert_eq!(
            SessionLimits::resolve(&RequestedLimits::default(), 1000).max_write_bytes,
            1000
        );
    }
}
