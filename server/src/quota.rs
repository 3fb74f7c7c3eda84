//! Per-session quotas: `max_files` (regular files) and `max_total_bytes`
//! (their sizes summed). A mutation is checked before it commits, under the
//! workspace's write lock, so a refused call changes nothing.
//!
//! Usage is measured by walking the workspace at check time, and only when
//! the session has a quota: it stays exact even when a container changes a
//! directory-backed workspace from outside, at the cost of one walk per
//! mutation of a quota-limited session.

use crate::backend::Backend;
use crate::limits::SessionLimits;
use std::fmt::Display;
use wsfs::{CanonicalPath, Error, Result};

/// Files and bytes under some path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub files: u64,
    pub bytes: u64,
}

impl Usage {
    pub fn file(bytes: u64) -> Usage {
        Usage { files: 1, bytes }
    }
}

/// Regular files beneath `base` (or `base` itself) and their total size.
pub fn usage<B: Backend + ?Sized>(b: &B, base: &CanonicalPath) -> Result<Usage> {
    let mut total = Usage::default();
    for path in b.walk_files(base)? {
        if let Some(meta) = b.metadata(&path?)? {
            total.files += 1;
            total.bytes += meta.size;
        }
    }
    Ok(total)
}

/// The server's byte budget for a session without `max_total_bytes`,
/// unless `--default-max-total-bytes` says otherwise.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 1024 * 1024 * 1024;

/// The most bytes one whole-workspace operation (an archive import, a
/// snapshot) may hold: the session's `max_total_bytes`, or the server's
/// `default` (`--default-max-total-bytes`) when the session has none; 0
/// when neither sets one. Ordinary writes are held to `max_total_bytes`
/// only, so a session without one pays no usage walk per write.
pub fn budget(limits: &SessionLimits, default: u64) -> u64 {
    match limits.max_total_bytes {
        0 => default,
        n => n,
    }
}

/// `limits` with the byte budget in place of `max_total_bytes`: what an
/// archive import or a restore is checked against.
pub fn with_budget(limits: &SessionLimits, default: u64) -> SessionLimits {
    SessionLimits {
        max_total_bytes: budget(limits, default),
        ..*limits
    }
}

/// Whether the session has any quota to check.
pub fn limited(limits: &SessionLimits) -> bool {
    limits.max_files > 0 || limits.max_total_bytes > 0
}

/// Refuses a new session whose initial content (host mounts and seed
/// files, see [`crate::mounts::initial_usage`]) is already over its quotas,
/// before anything is created or copied.
pub fn check_initial(limits: &SessionLimits, initial: Usage) -> Result<()> {
    check_usage(limits, initial, "the session's mounts and seed files hold")
}

/// The one quota rule: a workspace holding `usage` is over quota with
/// more regular files than `max_files` or more bytes than
/// `max_total_bytes` (0: no limit), files judged first. `holder` opens the
/// message ("the archive holds"), which goes on with the count and limit.
pub fn check_usage(limits: &SessionLimits, usage: Usage, holder: impl Display) -> Result<()> {
    let over = |n: u64, unit: &str, limit: u64| Error::QuotaExceeded {
        message: format!("{holder} {n} {unit}; this session allows at most {limit}"),
    };
    if limits.max_files > 0 && usage.files > limits.max_files {
        return Err(over(usage.files, "files", limits.max_files));
    }
    if limits.max_total_bytes > 0 && usage.bytes > limits.max_total_bytes {
        return Err(over(usage.bytes, "bytes", limits.max_total_bytes));
    }
    Ok(())
}

/// Refuses a change to `path` that removes `removed` and adds `added` when
/// the workspace would end up over a quota. Changes that shrink usage pass.
pub fn check<B: Backend + ?Sized>(
    b: &B,
    limits: &SessionLimits,
    path: &CanonicalPath,
    removed: Usage,
    added: Usage,
) -> Result<()> {
    if !limited(limits) {
        return Ok(());
    }
    let now = usage(b, &CanonicalPath::root())?;
    check_change(limits, path, now, removed, added)
}

/// [`check`]'s rule, given the workspace's usage `now`.
pub fn check_change(
    limits: &SessionLimits,
    path: &CanonicalPath,
    now: Usage,
    removed: Usage,
    added: Usage,
) -> Result<()> {
    // Only a count the change grows is judged (the other stands at 0), so
    // a workspace already over a quota (lowered on a restart, or filled
    // from outside) can still shrink.
    let grown = |now: u64, added: u64, removed: u64| {
        if added > removed {
            now.saturating_add(added).saturating_sub(removed)
        } else {
            0
        }
    };
    let after = Usage {
        files: grown(now.files, added.files, removed.files),
        bytes: grown(now.bytes, added.bytes, removed.bytes),
    };
    check_usage(
        limits,
        after,
        format_args!("cannot change '{path}': the session would hold"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::workspace::Workspace;
    use wsfs::{Filesystem, WriteOptions};

    fn limits(max_files: u64, max_total_bytes: u64) -> SessionLimits {
        SessionLimits {
            max_files,
            max_total_bytes,
            ..SessionLimits::default()
        }
    }

    #[test]
    fn usage_over_either_quota_is_refused_files_first() {
        let l = limits(2, 10);
        check_usage(
            &l,
            Usage {
                files: 2,
                bytes: 10,
            },
            "it holds",
        )
        .unwrap();
        let err = check_usage(
            &l,
            Usage {
                files: 3,
                bytes: 11,
            },
            "it holds",
        )
        .unwrap_err();
        assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
        assert!(
            err.to_string()
                .contains("it holds 3 files; this session allows at most 2"),
            "{err}"
        );
        let err = check_usage(
            &l,
            Usage {
                files: 2,
                bytes: 11,
            },
            "it holds",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("it holds 11 bytes; this session allows at most 10"),
            "{err}"
        );
        let huge = Usage {
            files: u64::MAX,
            bytes: u64::MAX,
        };
        check_usage(&limits(0, 0), huge, "it holds").unwrap();
    }

    #[tokio::test]
    async fn a_change_over_quota_is_refused_only_for_the_count_it_grows() {
        let ws = Workspace::new(MemoryBackend::new(), SessionLimits::default());
        for name in ["a", "b", "c"] {
            let path = CanonicalPath::from_canonical(name);
            ws.write(&path, "12345", WriteOptions::default())
                .await
                .unwrap();
        }
        // Three files of 5 bytes under limits lowered to 2 files, 12 bytes.
        let (b, l, path) = (
            ws.backend(),
            limits(2, 12),
            CanonicalPath::from_canonical("a"),
        );
        check(&**b, &l, &path, Usage::file(5), Usage::file(1)).expect("a shrinking rewrite passes");
        let err = check(&**b, &l, &path, Usage::default(), Usage::file(0)).unwrap_err();
        assert!(err.to_string().contains("would hold 4 files"), "{err}");
        let err = check(&**b, &l, &path, Usage::file(5), Usage::file(6)).unwrap_err();
        assert!(err.to_string().contains("would hold 16 bytes"), "{err}");
    }
}
