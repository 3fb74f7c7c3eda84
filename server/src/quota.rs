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
    if limits.max_files > 0 && initial.files > limits.max_files {
        return Err(Error::QuotaExceeded {
            message: format!(
                "the session's mounts and seed files hold {} files, over its limit of {}",
                initial.files, limits.max_files
            ),
        });
    }
    if limits.max_total_bytes > 0 && initial.bytes > limits.max_total_bytes {
        return Err(Error::QuotaExceeded {
            message: format!(
                "the session's mounts and seed files hold {} bytes, over its limit of {}",
                initial.bytes, limits.max_total_bytes
            ),
        });
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
    let files = (now.files + added.files).saturating_sub(removed.files);
    let bytes = (now.bytes + added.bytes).saturating_sub(removed.bytes);
    if limits.max_files > 0 && files > limits.max_files && added.files > removed.files {
        return Err(Error::QuotaExceeded {
            message: format!(
                "cannot change '{path}': the session would hold {files} files, over its limit of {}",
                limits.max_files
            ),
        });
    }
    if limits.max_total_bytes > 0 && bytes > limits.max_total_bytes && added.bytes > removed.bytes {
        return Err(Error::QuotaExceeded {
            message: format!(
                "cannot change '{path}': the session would hold {bytes} bytes, over its limit of {}",
                limits.max_total_bytes
            ),
        });
    }
    Ok(())
}
