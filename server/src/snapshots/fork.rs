//! Forks: a new session whose workspace is exactly one snapshot of
//! another session, on either backend.
//!
//! The origin's snapshot is read entry by entry, in path order, without
//! ever holding all of it: a DIRECTORY origin walks its manifests one
//! directory at a time (memory grows with the tree's depth and widest
//! directory, not with its files or bytes); a MEMORY origin's image is
//! shared, its `Bytes` with it. Before anything is created the fork checks
//! the snapshot against its own limits ([`Origin::check`]).
//!
//! A DIRECTORY fork's files are cloned from the origin's stored objects
//! (`FICLONE` where the filesystem shares blocks, else a copy of the data
//! runs in the kernel, holes kept), by a few threads at once, each file's
//! identity read from the handle that wrote it (see
//! [`crate::directory::snapshots::materialise`]). A DIRECTORY origin's
//! objects are hard-linked into the fork's store by the thread that
//! wrote each file, its manifests once every file is written, so that
//! both stores share every content (never a workspace's file: containers
//! write those in place).

use super::{check_restore_entry, SnapshotInfo};
use crate::limits::SessionLimits;
use crate::quota::Usage;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Permissions, Result};

/// A snapshot that a new session is forked from.
pub struct Origin {
    info: SnapshotInfo,
    source: Box<dyn OriginSource>,
}

/// Where a fork's origin reads the snapshot's entries from: the kind of
/// session it was taken in (a MEMORY image, a DIRECTORY store).
pub trait OriginSource: Send + Sync + 'static {
    /// Calls `f` with every entry in path order (bytewise): a directory
    /// with `None`, a file with its size and bytes. Blocking.
    fn for_each(&self, f: &mut Visit<'_>) -> Result<()>;

    /// For the kind that made it, to read it its own way.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// What [`Origin::for_each`] calls with each entry: its path, its bits and
/// time, and for a file its size and bytes.
pub type Visit<'a> =
    dyn FnMut(&CanonicalPath, EntryAttributes, Option<(u64, FileSource<'_>)>) -> Result<()> + 'a;

/// An entry's permission bits and, where the snapshot knows it (files),
/// its modification time.
#[derive(Debug, Clone, Copy)]
pub struct EntryAttributes {
    pub permissions: Permissions,
    pub modified: Option<SystemTime>,
}

impl EntryAttributes {
    /// What a snapshot that kept no bits (an earlier version's) gives.
    pub fn defaults(directory: bool) -> Self {
        EntryAttributes {
            permissions: if directory {
                Permissions::DIRECTORY_DEFAULT
            } else {
                Permissions::FILE_DEFAULT
            },
            modified: None,
        }
    }
}

/// Where one file's bytes come from.
pub enum FileSource<'a> {
    Bytes(&'a Bytes),
    /// A stored object, immutable.
    Object(&'a Path),
}

impl Origin {
    pub fn new(info: SnapshotInfo, source: impl OriginSource) -> Self {
        Origin {
            info,
            source: Box::new(source),
        }
    }

    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }

    /// The source as the kind that made it sees it, when it is a `T`.
    pub fn source<T: OriginSource>(&self) -> Option<&T> {
        self.source.as_any().downcast_ref()
    }

    /// Calls `f` with every entry in path order (bytewise): a directory
    /// with `None`, a file with its size and bytes. Blocking.
    pub fn for_each(&self, f: &mut Visit<'_>) -> Result<()> {
        self.source.for_each(f)
    }

    /// Refuses, before anything is created, a snapshot the fork could not
    /// hold whole: the restore rule ([`super::check_restore`]) against the
    /// fork's `limits` with its byte budget. Blocking.
    pub fn check(&self, limits: &SessionLimits) -> Result<()> {
        let mut usage = Usage::default();
        self.for_each(&mut |path, _, file| {
            check_restore_entry(limits, path)?;
            if let Some((size, _)) = file {
                usage.files += 1;
                usage.bytes = usage.bytes.saturating_add(size);
            }
            Ok(())
        })?;
        crate::quota::check_usage(limits, usage, "cannot fork the snapshot: it holds")
    }
}

pub(crate) fn abandoned() -> Error {
    Error::Cancelled {
        message: "the fork was abandoned by its caller; nothing was kept".to_string(),
    }
}

pub(crate) fn task_failed(e: tokio::task::JoinError) -> Error {
    Error::internal(format!("the fork's task failed: {e}"))
}

/// What a fork has made so far: dropped before [`HalfMade::keep`] (the
/// caller went away, or the fork failed), it stops the fork's task at its
/// next step and removes its session directory once that task is done.
pub(crate) struct HalfMade {
    dir: Option<PathBuf>,
    pub(crate) cancel: Arc<AtomicBool>,
    /// Held by the task that makes the directory.
    pub(crate) busy: Arc<Mutex<()>>,
}

impl HalfMade {
    pub(crate) fn memory(cancel: Arc<AtomicBool>) -> Self {
        HalfMade {
            dir: None,
            cancel,
            busy: Arc::default(),
        }
    }

    pub(crate) fn directory(dir: PathBuf) -> Self {
        HalfMade {
            dir: Some(dir),
            cancel: Arc::default(),
            busy: Arc::default(),
        }
    }

    /// The fork is complete: keep what it made.
    pub(crate) fn keep(&mut self) {
        self.dir = None;
    }
}

impl Drop for HalfMade {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(dir) = self.dir.take() {
            let busy = self.busy.clone();
            // Not on the runtime: this waits for the fork's task to stop.
            std::thread::spawn(move || {
                let _busy = busy.lock().unwrap_or_else(|e| e.into_inner());
                let _ = std::fs::remove_dir_all(dir);
            });
        }
    }
}
