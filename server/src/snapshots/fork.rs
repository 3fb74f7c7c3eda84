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
//! runs, holes kept); a DIRECTORY origin's objects and manifests are then
//! hard-linked into the fork's store, so that both stores share every
//! content (see [`crate::directory::DirectorySnapshots::adopt`]).

use super::{check_restore_entry, SnapshotInfo};
use crate::directory::snapshots::ForkSource;
use crate::limits::SessionLimits;
use crate::memory::{ImageEntry, MemoryImage};
use crate::quota::Usage;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Permissions, Result};

/// A snapshot that a new session is forked from.
pub enum Origin {
    Memory {
        info: SnapshotInfo,
        image: Arc<MemoryImage>,
    },
    Directory {
        info: SnapshotInfo,
        source: ForkSource,
    },
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
    pub fn info(&self) -> &SnapshotInfo {
        match self {
            Origin::Memory { info, .. } | Origin::Directory { info, .. } => info,
        }
    }

    /// Calls `f` with every entry in path order (bytewise): a directory
    /// with `None`, a file with its size and bytes. Blocking.
    pub fn for_each(&self, f: &mut Visit<'_>) -> Result<()> {
        match self {
            Origin::Memory { image, .. } => {
                for (path, entry) in image.entries() {
                    let attributes = EntryAttributes {
                        permissions: entry.permissions,
                        modified: entry.data.is_some().then_some(entry.modified),
                    };
                    let file = entry
                        .data
                        .as_ref()
                        .map(|d| (d.len() as u64, FileSource::Bytes(d)));
                    f(&path, attributes, file)?;
                }
                Ok(())
            }
            Origin::Directory { source, .. } => source.for_each(f),
        }
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

    /// The snapshot as a memory image: shared as it is from a MEMORY
    /// origin, read in from a DIRECTORY one (its bytes were checked
    /// against the fork's budget first). Blocking.
    pub fn memory_image(&self, cancel: &AtomicBool) -> Result<Arc<MemoryImage>> {
        if let Origin::Memory { image, .. } = self {
            return Ok(image.clone());
        }
        let mut entries = Vec::new();
        let now = SystemTime::now();
        self.for_each(&mut |path, attributes, file| {
            if cancel.load(Ordering::Relaxed) {
                return Err(abandoned());
            }
            let data = match file {
                None => None,
                Some((_, FileSource::Bytes(b))) => Some(b.clone()),
                Some((_, FileSource::Object(p))) => {
                    Some(Bytes::from(std::fs::read(p).map_err(store_error)?))
                }
            };
            let entry = ImageEntry {
                data,
                permissions: attributes.permissions,
                modified: attributes.modified.unwrap_or(now),
            };
            entries.push((path.as_str().to_string(), entry));
            Ok(())
        })?;
        Ok(Arc::new(entries.into_iter().collect()))
    }

    /// Writes the snapshot's entries into `root`, a directory this fork
    /// just made and nobody else can reach yet (so plain paths are safe:
    /// every entry was checked by [`Origin::check`]). Stops at the next
    /// entry once `cancel` is set. Blocking.
    ///
    /// Files get their bits and time as they are made; directories get
    /// their bits last, deepest first, so that one without the owner's
    /// write bit is filled before it is closed.
    pub fn materialise(&self, root: &Path, cancel: &AtomicBool) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let made = |path: &CanonicalPath, e: std::io::Error| {
            Error::io_while(e, format!("making the fork's '{path}'"))
        };
        let mut directories = Vec::new();
        self.for_each(&mut |path, attributes, file| {
            if cancel.load(Ordering::Relaxed) {
                return Err(abandoned());
            }
            let target = root.join(path.as_str());
            let bits = std::fs::Permissions::from_mode(attributes.permissions.bits());
            let Some((_, source)) = file else {
                std::fs::create_dir(&target).map_err(|e| made(path, e))?;
                directories.push((path.clone(), target, bits));
                return Ok(());
            };
            let out = match source {
                FileSource::Bytes(b) => std::fs::File::create_new(&target)
                    .and_then(|mut out| std::io::Write::write_all(&mut out, b).map(|()| out)),
                FileSource::Object(p) => clone_file(p, &target),
            }
            .map_err(|e| made(path, e))?;
            out.set_permissions(bits).map_err(|e| made(path, e))?;
            if let Some(modified) = attributes.modified {
                out.set_modified(modified).map_err(|e| made(path, e))?;
            }
            Ok(())
        })?;
        for (path, target, bits) in directories.into_iter().rev() {
            std::fs::set_permissions(&target, bits).map_err(|e| made(&path, e))?;
        }
        Ok(())
    }
}

/// Makes `to` a copy of `from`: sharing its blocks where the filesystem
/// can (`FICLONE`), else copying its data runs (holes stay holes).
fn clone_file(from: &Path, to: &Path) -> std::io::Result<std::fs::File> {
    let src = std::fs::File::open(from)?;
    let dst = std::fs::File::create_new(to)?;
    if rustix::fs::ioctl_ficlone(&dst, &src).is_ok() {
        return Ok(dst);
    }
    crate::directory::backend::copy_data(&src, &dst, 0).map(|_| dst)
}

pub(crate) fn abandoned() -> Error {
    Error::Cancelled {
        message: "the fork was abandoned by its caller; nothing was kept".to_string(),
    }
}

fn store_error(e: std::io::Error) -> Error {
    Error::io_while(e, "reading the origin's snapshot store")
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
