//! Snapshots of a DIRECTORY session: a content-addressed store on disk,
//! shaped like git's object store.
//!
//! Everything lives under the session's directory in the data directory,
//! beside (never inside) the workspace root:
//!
//! ```text
//! sessions/<id>/objects/<aa>/<62 hex>     file contents, named by SHA-256
//! sessions/<id>/objects/tmp/              contents being written
//! sessions/<id>/trees/<aa>/<62 hex>       directory manifests, named by the
//!                                         SHA-256 of their bytes
//! sessions/<id>/trees/tmp/                manifests being written
//! sessions/<id>/snapshots/<uuid>.json     a snapshot's info and root
//!                                         manifest (its presence makes the
//!                                         snapshot exist)
//! sessions/<id>/head                      the root manifest the next
//!                                         snapshot compares against
//! ```
//!
//! A directory manifest ([`Tree`]) lists a directory's children by name: for
//! a file its size, content hash and the identity (inode, size, mtime,
//! ctime) it had when it was hashed; for a directory the hash of the
//! directory's own manifest. An unchanged directory has the same manifest,
//! stored once, so a snapshot writes only the manifests of the directories
//! on the way to a change, and an unchanged file is stored once across all
//! snapshots.
//!
//! A snapshot stats every entry (one `statx` each, by descriptor, through
//! [`tree()`]) and compares it with the previous snapshot's
//! manifests, kept in memory: a file with the same identity is not read, so
//! the snapshot's reads and writes grow with what changed. Restore compares
//! the same way and rewrites only the files that differ from the snapshot.
//! It stages every file it will write (checking the stored bytes against
//! their hash) before its first change to the workspace, so a store that
//! fails to deliver leaves the workspace as it was. Replaced files are
//! swapped out atomically and freed after the restore has answered. Files
//! are read through the backend's `open` and restored through `stage`,
//! `commit_aside`, `mkdir` and `remove`: the symlink-proof paths every
//! other call takes.
//!
//! Sparse files stay sparse: contents are read, stored and staged run by
//! run (`SEEK_DATA` / `SEEK_HOLE`), holes hashed as zeros but never
//! written. Hashing still costs a file's apparent size in time, so a
//! snapshot is refused (`QuotaExceeded`) before it stores anything when
//! the files' apparent sizes add up to more than the session's byte
//! budget ([`crate::quota::budget`]). A snapshot whose caller goes away
//! stops at its next step and removes every object and manifest it
//! stored; restore checks the snapshot against the session's limits
//! ([`crate::snapshots::check_restore`]) before staging.
//!
//! Snapshots written by earlier versions (a JSON list of entries in
//! `snapshots/<uuid>.entries`) are still listed, exported and restored.
//!
//! # Layout
//!
//! `store` the store's files, head and garbage collection; `take` a
//! snapshot's walk; `restore` restore planning, staging and applying;
//! `content` the hash-named files and sparse reads; `records` the info
//! and entries of one snapshot; `manifest` and `tree` the manifests and
//! the workspace walk they are compared with; `fork` and `mirror` what
//! forks and the object store read of the store.

use crate::snapshots::{
    check_restore, new_id, not_found, parse_id, Restored, SnapshotEntry, SnapshotFiles,
    SnapshotInfo, SnapshotMirror, SnapshotStore,
};
// Manifests nested deeper than a workspace walk descends are corrupt.
use crate::backend::intent::{self, Intent, IntentFile, Prune};
use crate::backend::{Backend, CommitMode, Content, StagedFile};
use crate::directory::backend::sys::MAX_TREE_DEPTH;
use crate::directory::backend::{next_data, Displaced};
use crate::directory::DirectoryBackend;
use crate::limits::SessionLimits;
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, PathLimits, Permissions, Result};

mod content;
mod fork;
mod manifest;
pub mod mirror;
mod records;
mod restore;
mod store;
mod take;
mod tree;
use content::{
    hex, parse_hash, read_sparse, storage_error, write_atomic, write_json, ContentStore, Piece,
};
pub use fork::{first_snapshot, materialise, materialise_fetched, ForkSource, Identities};
use manifest::{Node, Tree, TreeItem};
use records::{FlatEntry, FlatFile, InfoFile, LegacyEntry};
use store::{split_parent, State, Store};
pub(crate) use tree::{tree, FileIdentity, TreeEntry, TreeKind};

const COPY_BUFFER: usize = 1024 * 1024;
/// Zeros hashed at a time for a hole.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
const INFO_SUFFIX: &str = ".json";
/// The entries of a snapshot written by an earlier version.
const ENTRIES_SUFFIX: &str = ".entries";
/// A SHA-256 digest.
type Hash = [u8; 32];

pub struct DirectorySnapshots {
    workspace: Arc<Workspace<DirectoryBackend>>,
    store: Arc<Store>,
    /// The server's `--default-max-total-bytes`: a snapshot's budget when
    /// the session sets no `max_total_bytes` ([`crate::quota::budget`]).
    default_budget: u64,
    /// The object store every snapshot is mirrored to, when the server
    /// has one ([`crate::objstore`]).
    mirror: Option<Arc<dyn SnapshotMirror>>,
}

impl DirectorySnapshots {
    /// The snapshots of the workspace, kept under `session_dir` (which must
    /// lie outside the workspace root). `default_budget`: the server's
    /// `--default-max-total-bytes`.
    pub fn new(
        workspace: Arc<Workspace<DirectoryBackend>>,
        session_dir: &Path,
        default_budget: u64,
    ) -> Self {
        DirectorySnapshots {
            default_budget,
            mirror: None,
            workspace,
            store: Arc::new(Store {
                dir: session_dir.to_path_buf(),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Mirrors every snapshot to `mirror`'s bucket: a snapshot answers
    /// once it is there.
    pub fn mirrored(mut self, mirror: Option<Arc<dyn SnapshotMirror>>) -> Self {
        self.mirror = mirror;
        self
    }

    /// Makes the workspace of a session just recovered from the object
    /// store exactly snapshot `id`, whose contents stream from the bucket
    /// straight into their workspace files (each byte written once,
    /// checked against its hash before the first change to the
    /// workspace), then makes the head name the restored files'
    /// identities, so that the next snapshot reads (and uploads) none of
    /// them unless they change. The store keeps no copy of those
    /// contents: they are fetched again when something needs them
    /// ([`Self::ensure_local`]). Only for a workspace nothing else writes
    /// yet. (A session whose files belong to an owner comes back this
    /// way, through the backend that gives them to it; others through
    /// [`materialise_fetched`].)
    pub async fn restore_recovered(&self, id: &str, workspace_root: &Path) -> Result<Restored> {
        let key = parse_id(id)?;
        let store = self.store.clone();
        let limits = crate::quota::with_budget(self.workspace.limits(), self.default_budget);
        let source = self.mirror.clone();
        let workspace_root = workspace_root.to_path_buf();
        let (restored, displaced) = self
            .workspace
            .exclusive(move |b| {
                let root = CanonicalPath::root();
                let restored = store.restore(b, &key, &root, &limits, source.as_deref())?;
                store.adopt_restored(&key, &workspace_root, None)?;
                Ok(restored)
            })
            .await?;
        drop(displaced);
        Ok(restored)
    }

    /// Makes the head of a session just recovered from the object store
    /// name its workspace, which [`materialise_fetched`] wrote from
    /// snapshot `id` (`written`: the files' identities as they were
    /// written) and nothing else has written since, so that the next
    /// snapshot reads (and uploads) none of them unless they change.
    pub async fn adopt_recovered(
        &self,
        id: &str,
        workspace_root: &Path,
        written: fork::Identities,
    ) -> Result<()> {
        let key = parse_id(id)?;
        let workspace_root = workspace_root.to_path_buf();
        self.blocking(move |store| store.adopt_restored(&key, &workspace_root, Some(&written)))
            .await
    }

    /// Fetches what the local store lacks of snapshot `id`'s contents
    /// (a recovered session's other snapshots stay in the bucket until
    /// needed), once: they are then in the local store. Without an
    /// object store there is nowhere to fetch from: a content missing
    /// then is damage, which the call reading it reports.
    async fn ensure_local(&self, id: &str) -> Result<()> {
        let Some(mirror) = &self.mirror else {
            return Ok(());
        };
        let key = id.to_string();
        let wanted = self.blocking(move |s| s.missing(&key)).await?;
        if wanted.is_empty() {
            return Ok(());
        }
        mirror.fetch_contents(wanted).await
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Error::internal(format!("snapshot task failed: {e}")))?
    }
}

#[async_trait]
impl SnapshotStore for DirectorySnapshots {
    async fn snapshot(&self, tag: &str) -> Result<SnapshotInfo> {
        let store = self.store.clone();
        let tag = tag.to_string();
        let budget = crate::quota::budget(self.workspace.limits(), self.default_budget);
        // A snapshot changes no workspace: when its caller goes away (this
        // future is dropped) the walk stops at its next step and removes
        // what it stored.
        let cancel = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = CancelOnDrop(cancel.clone());
        let taken = self.store.clone();
        let info = self
            .workspace
            .exclusive(move |b| {
                let info = store.take(b, tag, budget, &cancel)?;
                // The store may sit on another filesystem than the root.
                store.settle(b.durability())?;
                Ok(info)
            })
            .await?;
        match &self.mirror {
            Some(mirror) => {
                // A snapshot that did not reach the bucket is not kept.
                let id = info.id.clone();
                let roll_back = move || {
                    if let Err(e) = taken.delete(&id) {
                        tracing::warn!(snapshot = %id, error = %e, "an unmirrored snapshot could not be removed");
                    }
                };
                mirror.clone().mirror(info, Box::new(roll_back)).await
            }
            None => Ok(info),
        }
    }

    async fn restore(&self, id: &str, at: &CanonicalPath) -> Result<Restored> {
        self.workspace
            .writable_for(at.as_str(), "restore a snapshot")?;
        let key = parse_id(id)?;
        let store = self.store.clone();
        let limits = crate::quota::with_budget(self.workspace.limits(), self.default_budget);
        let at = at.clone();
        self.ensure_local(&key).await?;
        let source = self.mirror.clone();
        let (restored, displaced) = self
            .workspace
            .exclusive(move |b| store.restore(b, &key, &at, &limits, source.as_deref()))
            .await?;
        if !displaced.is_empty() {
            // The replaced files' blocks are freed once the workspace is
            // free again.
            tokio::task::spawn_blocking(move || drop(displaced));
        }
        Ok(restored)
    }

    async fn list(&self) -> Result<Vec<SnapshotInfo>> {
        self.blocking(|s| {
            let _state = s.lock();
            s.infos()
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let key = parse_id(id)?;
        if let Some(mirror) = &self.mirror {
            // The bucket first: when it is unreachable, nothing changes.
            let infos = self.list().await?;
            if !infos.iter().any(|i| i.id == key) {
                return Err(not_found(id));
            }
            let newest_left = infos
                .iter()
                .rev()
                .find(|i| i.id != key)
                .map(|i| i.id.as_str());
            mirror.forget_snapshot(&key, newest_left).await?;
        }
        self.blocking(move |s| s.delete(&key)).await
    }

    async fn fork_origin(&self, id: &str) -> Result<crate::snapshots::fork::Origin> {
        let key = parse_id(id)?;
        self.ensure_local(&key).await?;
        let store = self.store.clone();
        self.blocking(move |s| {
            Ok(crate::snapshots::fork::Origin::new(
                s.read_info(&key)?.info(),
                ForkSource::new(store, s.read_info(&key)?),
            ))
        })
        .await
    }

    async fn files(&self, id: &str) -> Result<SnapshotFiles> {
        let key = parse_id(id)?;
        self.ensure_local(&key).await?;
        self.blocking(move |s| {
            let state = s.lock();
            let info = s.read_info(&key)?;
            let entries = s.flatten(&info, &state)?;
            let objects = s.objects();
            Ok(Box::new(entries.into_iter().map(move |e| e.open(&objects))) as SnapshotFiles)
        })
        .await
    }
}

/// Sets its flag when dropped: the snapshot's caller is gone (or done).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn cancelled() -> Error {
    Error::Cancelled {
        message: "the snapshot was abandoned by its caller; nothing was stored".to_string(),
    }
}
