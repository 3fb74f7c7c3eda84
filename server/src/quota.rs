//! Per-session quotas: `max_files` (regular files) and `max_total_bytes`
//! (their sizes summed). A mutation is checked before it commits, holding
//! its claim on the paths it changes, so a refused call changes nothing.
//! Mutations of different paths run in parallel, so the check also counts
//! what the others have reserved and not yet landed ([`Ledger`]).
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
#[cfg(test)]
pub fn check<B: Backend + ?Sized>(
    b: &B,
    limits: &SessionLimits,
    path: &CanonicalPath,
    removed: Usage,
    added: Usage,
) -> Result<()> {
    check_beside(b, limits, path, Usage::default(), removed, added)
}

/// Refuses a change to `path` that removes `removed` and adds `added` when
/// the workspace would end up over a quota, with `pending` growth
/// (reserved by parallel changes, not yet on disk) counted as if it were
/// there. Changes that shrink usage pass.
fn check_beside<B: Backend + ?Sized>(
    b: &B,
    limits: &SessionLimits,
    path: &CanonicalPath,
    pending: Usage,
    removed: Usage,
    added: Usage,
) -> Result<()> {
    if !limited(limits) {
        return Ok(());
    }
    let walked = usage(b, &CanonicalPath::root())?;
    let now = Usage {
        files: walked.files + pending.files,
        bytes: walked.bytes + pending.bytes,
    };
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

/// One session's quota bookkeeping for mutations that run in parallel:
/// each check sees the workspace with no change half made, and counts the
/// growth that checks before it let through and whose changes have not
/// landed yet. So parallel writers that together would go over a quota
/// are refused (those that come last), and writers that fit all pass.
#[derive(Default)]
pub struct Ledger {
    /// A check holds it alone (its walk sees every change whole); changes
    /// hold it shared, so they still run in parallel with each other.
    gate: std::sync::RwLock<()>,
    /// Growth let through by checks whose changes have not landed.
    reserved: std::sync::Mutex<Usage>,
}

/// Growth a check let through, counted by later checks until the change
/// lands or fails (dropped).
#[must_use = "the reservation is given back when dropped"]
pub struct Reservation<'a> {
    ledger: &'a Ledger,
    growth: Usage,
}

impl Ledger {
    fn reserved(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`check`], counting what is reserved and not landed, then reserves
    /// this change's growth. Nothing is walked or reserved when the
    /// session has no quota.
    pub fn reserve<B: Backend + ?Sized>(
        &self,
        b: &B,
        limits: &SessionLimits,
        path: &CanonicalPath,
        removed: Usage,
        added: Usage,
    ) -> Result<Reservation<'_>> {
        let mut growth = Usage::default();
        if limited(limits) {
            let _alone = self.gate.write().unwrap_or_else(|e| e.into_inner());
            let pending = *self.reserved();
            check_beside(b, limits, path, pending, removed, added)?;
            growth = Usage {
                files: added.files.saturating_sub(removed.files),
                bytes: added.bytes.saturating_sub(removed.bytes),
            };
            let mut reserved = self.reserved();
            reserved.files += growth.files;
            reserved.bytes += growth.bytes;
        }
        Ok(Reservation {
            ledger: self,
            growth,
        })
    }

    /// Runs a change that needs no check (a Delete, a Move) so that no
    /// check's walk sees it half made.
    pub fn change<T>(&self, f: impl FnOnce() -> T) -> T {
        let _shared = self.gate.read().unwrap_or_else(|e| e.into_inner());
        f()
    }
}

impl Reservation<'_> {
    /// Makes the reserved change: the walk of a later check sees it whole,
    /// and its growth stops being counted the moment it is there to see.
    pub fn land<T>(self, f: impl FnOnce() -> T) -> T {
        let _shared = self.ledger.gate.read().unwrap_or_else(|e| e.into_inner());
        let out = f();
        drop(self);
        out
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut reserved = self.ledger.reserved();
        reserved.files -= self.growth.files;
        reserved.bytes -= self.growth.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;
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

    /// Growth let through and not landed counts against the next check,
    /// until it lands (then the walk sees it) or fails (then it is given
    /// back): two changes checked before either lands cannot both pass
    /// where only one fits.
    #[test]
    fn reserved_growth_counts_until_it_lands_or_fails() {
        use crate::backend::{Backend, CommitMode, StagedFile};
        let b = MemoryBackend::new();
        let (ledger, l) = (Ledger::default(), limits(1, 0));
        let (a, c) = (
            CanonicalPath::from_canonical("a"),
            CanonicalPath::from_canonical("c"),
        );
        let first = ledger
            .reserve(&b, &l, &a, Usage::default(), Usage::file(1))
            .expect("one file fits");
        let err = ledger
            .reserve(&b, &l, &c, Usage::default(), Usage::file(1))
            .err()
            .expect("a second file while the first is reserved");
        assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
        assert!(err.to_string().contains("would hold 2 files"), "{err}");

        drop(first);
        let again = ledger
            .reserve(&b, &l, &a, Usage::default(), Usage::file(1))
            .expect("a failed change gives its growth back");
        let mut staged = b.stage().unwrap();
        staged.write_chunk(b"x").unwrap();
        again
            .land(|| b.commit(staged, &a, CommitMode::default()))
            .unwrap();
        assert_eq!(
            *ledger.reserved(),
            Usage::default(),
            "landed: not counted twice"
        );
        let err = ledger
            .reserve(&b, &l, &c, Usage::default(), Usage::file(1))
            .err()
            .expect("the landed file is walked");
        assert!(err.to_string().contains("would hold 2 files"), "{err}");
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
