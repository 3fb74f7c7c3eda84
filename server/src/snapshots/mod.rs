//! Snapshots of a session's workspace: take, restore, list, delete, and
//! read back.
//!
//! Each session owns one [`SnapshotStore`], chosen by its backend:
//!
//! - [`crate::memory::MemorySnapshots`]: a snapshot is a [`crate::memory::MemoryImage`] of the tree, whose
//!   file contents are `Bytes` shared with the live tree and every other
//!   snapshot. Gone with the session or the server.
//! - [`crate::directory::DirectorySnapshots`]: a content-addressed object store and one
//!   manifest per snapshot, under the session's directory in the server's
//!   data directory (never inside the workspace root, where agents and
//!   containers could reach it). Survives a restart.
//!
//! Both keep the same rules: a snapshot holds every regular file and every
//! directory (empty ones too); symlinks and special files are left out.
//! Restore takes the workspace's write lock and makes the tree exactly the
//! snapshot's: entries created since go, entries deleted since return, and
//! every entry it changes gets a fresh version (entries already equal to the
//! snapshot keep theirs).

pub mod diff;
pub mod fork;
pub mod phases;

use crate::backend::{check_name, Content};
use crate::limits::SessionLimits;
use async_trait::async_trait;
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Permissions, Result};

pub use wsfs::{Restored, SnapshotInfo};

/// One entry of a snapshot, as [`SnapshotStore::files`] yields it.
pub enum SnapshotEntry {
    Directory {
        path: CanonicalPath,
        permissions: Permissions,
    },
    File {
        path: CanonicalPath,
        size: u64,
        permissions: Permissions,
        /// The epoch when the snapshot does not know it.
        modified: SystemTime,
        /// The snapshot's bytes: shared `Bytes` (memory) or an open object
        /// file (directory), read from its start.
        content: Content,
    },
}

impl SnapshotEntry {
    pub fn path(&self) -> &CanonicalPath {
        match self {
            SnapshotEntry::Directory { path, .. } | SnapshotEntry::File { path, .. } => path,
        }
    }

    pub fn permissions(&self) -> Permissions {
        match self {
            SnapshotEntry::Directory { permissions, .. }
            | SnapshotEntry::File { permissions, .. } => *permissions,
        }
    }
}

/// A snapshot's entries in path order (bytewise), produced lazily: a file's
/// content is opened when the iterator reaches it. Blocking for directory
/// sessions: drive it on the blocking pool.
pub type SnapshotFiles = Box<dyn Iterator<Item = Result<SnapshotEntry>> + Send>;

/// One session's snapshots.
#[async_trait]
pub trait SnapshotStore: Send + Sync {
    /// Captures the workspace as it is now. Allowed on read-only sessions.
    async fn snapshot(&self, tag: &str) -> Result<SnapshotInfo>;

    /// Puts the workspace back exactly as snapshot `id` holds it, under the
    /// write lock; with `at` other than the root, only the file or
    /// directory at `at` (entries beneath it that the snapshot lacks go,
    /// nothing outside it changes but its missing parents, which come back
    /// as the snapshot holds them). Read-only session: `ReadOnly`; unknown
    /// id: `SnapshotNotFound`; `at` not in the snapshot: `FileNotFound`; a
    /// parent of `at` that is not a directory in the workspace:
    /// `NotADirectory` (or `PermissionDenied` for a link). Every refusal
    /// changes nothing. [`Restored`] counts what the snapshot holds at `at`.
    async fn restore(&self, id: &str, at: &CanonicalPath) -> Result<Restored>;

    /// Every snapshot, oldest first.
    async fn list(&self) -> Result<Vec<SnapshotInfo>>;

    /// Forgets snapshot `id` and frees the storage only it used.
    async fn delete(&self, id: &str) -> Result<()>;

    /// Snapshot `id`'s entries, for archive export. See [`SnapshotFiles`].
    async fn files(&self, id: &str) -> Result<SnapshotFiles>;

    /// Snapshot `id` as the origin of a new session ([`fork`]). Unknown
    /// id: `SnapshotNotFound`.
    async fn fork_origin(&self, id: &str) -> Result<fork::Origin>;

    /// Mirrors snapshot `id` (taken before the session held its lease: a
    /// fork's first) from what the store holds of it; `None` when the
    /// store keeps its snapshots on disk, where the mirror reads them
    /// itself ([`crate::objstore::upload::SessionMirror::upload_snapshot`]).
    async fn mirror_taken(&self, _id: &str) -> Option<Result<()>> {
        None
    }
}

/// Where a session's snapshots are mirrored: the object store
/// (`--object-store`), for the kinds whose sessions outlive a restart.
#[async_trait]
pub trait SnapshotMirror: Send + Sync {
    /// Mirrors the snapshot `info` just taken; on failure calls
    /// `roll_back` (on the blocking pool) and fails. The upload, and its
    /// roll-back, run to their end even when the caller goes away.
    async fn mirror(
        self: std::sync::Arc<Self>,
        info: SnapshotInfo,
        roll_back: Box<dyn FnOnce() + Send>,
    ) -> Result<SnapshotInfo>;

    /// Mirrors `snapshot`, taken of a tree held in memory (MEMORY): the
    /// same objects in the bucket as a stored one. Runs to its end even
    /// when the caller goes away; on failure nothing of it is recorded.
    async fn mirror_loose(
        self: std::sync::Arc<Self>,
        snapshot: std::sync::Arc<LooseSnapshot>,
    ) -> Result<()>;

    /// Forgets snapshot `id` in the mirror, which then names `newest_left`
    /// as the session's latest.
    async fn forget_snapshot(&self, id: &str, newest_left: Option<&str>) -> Result<()>;

    /// Fetches into the session's local store the contents `wanted`
    /// (hash, size) that it lacks, each checked against its hash: those
    /// of the snapshots a recovery left in the mirror
    /// ([`crate::objstore::download`]).
    async fn fetch_contents(&self, wanted: Vec<([u8; 32], u64)>) -> Result<()> {
        let _ = wanted;
        Err(not_in_mirror())
    }

    /// Hands content `hash` from the mirror to `sink`, chunk by chunk,
    /// checking nothing (the caller checks the bytes against `hash`).
    /// Blocking: called on the blocking pool or a thread of its own.
    fn stream_content(
        &self,
        hash: &[u8; 32],
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let _ = (hash, sink);
        Err(not_in_mirror())
    }
}

fn not_in_mirror() -> Error {
    Error::internal("this session's mirror keeps no contents to fetch")
}

/// A snapshot of a tree held in memory, ready to mirror: its record,
/// its manifests (children before parents) and its files' contents by
/// hash, as `Bytes` shared with the session (laid out by
/// [`crate::directory::snapshots::mirror::manifests_of`]).
pub struct LooseSnapshot {
    pub id: String,
    pub record: Vec<u8>,
    pub manifests: Vec<([u8; 32], Vec<u8>)>,
    pub contents: Vec<([u8; 32], bytes::Bytes)>,
}

/// Makes each session's [`SnapshotMirror`]: the object store.
pub trait SnapshotMirrors: Send + Sync {
    /// The mirror of session `id`'s snapshots, kept in `session_dir`.
    fn mirror(
        self: std::sync::Arc<Self>,
        id: &str,
        session_dir: &std::path::Path,
    ) -> std::sync::Arc<dyn SnapshotMirror>;
}

/// Contents fetched from the object store at once: by a recovery, and
/// by a call that needs contents a recovered session's store lacks.
pub(crate) const FETCH_CONCURRENCY: usize = 16;

/// The canonical form of a snapshot id; anything that is not a UUID
/// cannot name a snapshot.
pub(crate) fn parse_id(id: &str) -> Result<String> {
    uuid::Uuid::parse_str(id)
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| not_found(id))
}

pub(crate) fn not_found(id: &str) -> Error {
    Error::SnapshotNotFound {
        snapshot_id: id.to_string(),
    }
}

/// Refuses, before anything changes, a restore the workspace could not
/// take whole: a path over the session's path limits or with a name the
/// backends reserve ([`crate::backend::check_name`]), or more files or
/// bytes than `limits` allow (pass the session's limits with its byte
/// budget, [`crate::quota::with_budget`]). A session's limits can differ
/// from those in force when the snapshot was taken (a restart with other
/// flags), and a snapshot store can be damaged: the restore must not find
/// out halfway. `entries` yields each path and, for a file, its size.
pub(crate) fn check_restore<P: std::borrow::Borrow<CanonicalPath>>(
    limits: &SessionLimits,
    entries: impl IntoIterator<Item = (P, Option<u64>)>,
) -> Result<()> {
    let (mut files, mut bytes) = (0u64, 0u64);
    for (path, size) in entries {
        check_restore_entry(limits, path.borrow())?;
        if let Some(size) = size {
            files += 1;
            bytes = bytes.saturating_add(size);
        }
    }
    let holds = crate::quota::Usage { files, bytes };
    crate::quota::check_usage(limits, holds, "cannot restore the snapshot: it holds")
}

/// [`check_restore`] for a restore of the subtree at `at` (not the root):
/// each entry's path as there, and the workspace after the restore (`now`,
/// less what lies at `at` today, `removed`, plus the snapshot's files)
/// judged against the quotas as any change is ([`crate::quota::check_change`]).
pub(crate) fn check_restore_at<P: std::borrow::Borrow<CanonicalPath>>(
    limits: &SessionLimits,
    at: &CanonicalPath,
    now: crate::quota::Usage,
    removed: crate::quota::Usage,
    entries: impl IntoIterator<Item = (P, Option<u64>)>,
) -> Result<()> {
    let mut added = crate::quota::Usage::default();
    for (path, size) in entries {
        check_restore_entry(limits, path.borrow())?;
        if let Some(size) = size {
            added.files += 1;
            added.bytes = added.bytes.saturating_add(size);
        }
    }
    crate::quota::check_change(limits, at, now, removed, added)
}

/// The refusal of a restore of `at`, which snapshot `id` does not hold.
pub(crate) fn not_in_snapshot(at: &CanonicalPath) -> Error {
    Error::FileNotFound {
        path: at.as_str().to_string(),
    }
}

/// [`check_restore`]'s rule for one entry's path.
pub(crate) fn check_restore_entry(limits: &SessionLimits, path: &CanonicalPath) -> Result<()> {
    let reparsed =
        CanonicalPath::parse(path.as_str(), &limits.path).map_err(|e| refuse_entry(path, e))?;
    check_name(&reparsed).map_err(|e| refuse_entry(path, e))
}

fn refuse_entry(path: &CanonicalPath, e: Error) -> Error {
    match e {
        Error::InvalidPath { message, .. } => Error::InvalidPath {
            message: format!("cannot restore the snapshot: its entry '{path}': {message}"),
            path: path.as_str().to_string(),
        },
        other => other,
    }
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::from_canonical(s)
    }

    /// What a damaged store or a session with tighter limits could hold is
    /// refused by the planner, naming the entry, before any change.
    #[test]
    fn restore_plans_refuse_what_the_workspace_could_not_take() {
        let limits = SessionLimits {
            max_files: 2,
            max_total_bytes: 100,
            ..SessionLimits::default()
        };
        let ok = [
            (p("src"), None),
            (p("src/a.rs"), Some(60)),
            (p("b"), Some(40)),
        ];
        check_restore(&limits, ok.clone()).unwrap();

        let reserved = [(p("src"), None), (p("src/.wsfs-tmp-1"), Some(1))];
        let err = check_restore(&limits, reserved).unwrap_err();
        assert_eq!(err.reason(), "INVALID_PATH", "{err}");
        assert!(err.to_string().contains("src/.wsfs-tmp-1"), "{err}");

        let deep = "d/".repeat(limits.path.max_depth) + "f";
        let err = check_restore(&limits, [(p(&deep), Some(1))]).unwrap_err();
        assert_eq!(err.reason(), "INVALID_PATH", "{err}");

        let long = "x".repeat(limits.path.max_segment_chars + 1);
        let err = check_restore(&limits, [(p(&long), Some(1))]).unwrap_err();
        assert_eq!(err.reason(), "INVALID_PATH", "{err}");

        let files = [(p("a"), Some(1)), (p("b"), Some(1)), (p("c"), Some(1))];
        let err = check_restore(&limits, files).unwrap_err();
        assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");

        let bytes = [(p("a"), Some(60)), (p("b"), Some(41))];
        let err = check_restore(&limits, bytes).unwrap_err();
        assert_eq!(err.reason(), "QUOTA_EXCEEDED", "{err}");
    }
}
