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
//! content (see [`super::DirectorySnapshots::adopt`]).

use super::directory::ForkSource;
use super::{check_restore_entry, SnapshotInfo};
use crate::backend::MemoryImage;
use crate::limits::SessionLimits;
use crate::quota::Usage;
use bytes::Bytes;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Result};

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

/// What [`Origin::for_each`] calls with each entry: its path, and for a
/// file its size and bytes.
pub type Visit<'a> = dyn FnMut(&CanonicalPath, Option<(u64, FileSource<'_>)>) -> Result<()> + 'a;

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
                for (path, data) in image.entries() {
                    f(&path, data.map(|d| (d.len() as u64, FileSource::Bytes(d))))?;
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
        self.for_each(&mut |path, file| {
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
        self.for_each(&mut |path, file| {
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
            entries.push((path.as_str().to_string(), data));
            Ok(())
        })?;
        Ok(Arc::new(entries.into_iter().collect()))
    }

    /// Writes the snapshot's entries into `root`, a directory this fork
    /// just made and nobody else can reach yet (so plain paths are safe:
    /// every entry was checked by [`Origin::check`]). Stops at the next
    /// entry once `cancel` is set. Blocking.
    pub fn materialise(&self, root: &Path, cancel: &AtomicBool) -> Result<()> {
        self.for_each(&mut |path, file| {
            if cancel.load(Ordering::Relaxed) {
                return Err(abandoned());
            }
            let target = root.join(path.as_str());
            match file {
                None => std::fs::create_dir(&target),
                Some((_, FileSource::Bytes(b))) => std::fs::write(&target, b),
                Some((_, FileSource::Object(p))) => clone_file(p, &target),
            }
            .map_err(|e| Error::internal(format!("cannot make the fork's '{path}': {e}")))
        })
    }
}

/// Makes `to` a copy of `from`: sharing its blocks where the filesystem
/// can (`FICLONE`), else copying its data runs (holes stay holes).
fn clone_file(from: &Path, to: &Path) -> std::io::Result<()> {
    let src = std::fs::File::open(from)?;
    let dst = std::fs::File::create_new(to)?;
    if rustix::fs::ioctl_ficlone(&dst, &src).is_ok() {
        return Ok(());
    }
    crate::backend::directory::copy_data(&src, &dst, 0).map(|_| ())
}

pub(crate) fn abandoned() -> Error {
    Error::Cancelled {
        message: "the fork was abandoned by its caller; nothing was kept".to_string(),
    }
}

fn store_error(e: std::io::Error) -> Error {
    Error::internal(format!("the origin's snapshot store failed: {e}"))
}
