//! Patches: a file's new version is a staged copy of the current one
//! (made in the kernel with `copy_file_range`, which shares blocks on
//! filesystems that can reflink), cut or extended and then written over
//! with the patch's ranges, and swapped into place as every other write
//! is. A crash leaves the old version or the new one, never a mix; the
//! cost is one server-side copy of the file.

use super::owner::claim;
use super::staging::{DirectoryStaged, Replace, Source, TempEntry};
use super::sys::{
    check_path, cname, copy_range, io, next_data, not_found, not_regular, open_regular,
    set_attributes_fd, staging_error, stat_at, symlink_denied, Kind,
};
use super::DirectoryBackend;
use crate::backend::{CommitMode, Patch};
use rustix::fd::AsFd;
use rustix::io::Errno;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Metadata, Result};

/// Bytes of a range moved from the staged data per read and write.
const RANGE_BUFFER_BYTES: usize = 256 * 1024;

impl DirectoryBackend {
    /// [`crate::backend::Backend::commit_patch`].
    pub(super) fn patch_with(
        &self,
        staged: DirectoryStaged,
        path: &CanonicalPath,
        patch: &Patch,
        mode: CommitMode,
    ) -> Result<Metadata> {
        check_path(path)?;
        let Some(parent) = path.parent() else {
            return Err(Error::IsADirectory {
                path: String::new(),
            });
        };
        let create = patch.create_missing && mode.create_parents;
        let (dir, name) = match self.parent_dir(path, create, &parent) {
            Err(Error::FileNotFound { .. }) if !patch.create_missing => {
                return Err(not_found(path))
            }
            other => other?,
        };
        let dir = Arc::new(dir);
        let name = cname(name, path)?;
        let current = match stat_at(dir.as_fd(), &name) {
            Ok(st) => match st.kind {
                Kind::File => Some(open_regular(dir.as_fd(), &name, path)?),
                Kind::Dir => {
                    return Err(Error::IsADirectory {
                        path: path.as_str().to_string(),
                    })
                }
                Kind::Symlink => return Err(symlink_denied(path, true)),
                Kind::Special => return Err(not_regular(path)),
            },
            Err(Errno::NOENT) if patch.create_missing => None,
            Err(Errno::NOENT) => return Err(not_found(path)),
            Err(e) => return Err(io(e, path)),
        };
        let perms = match (mode.permissions, &self.owner) {
            (None, Some(owner)) if current.is_none() => owner.file_permissions,
            _ => mode.permissions_over(current.as_ref().map(|(_, st)| st.permissions())),
        };
        let old_len = current.as_ref().map_or(0, |(_, st)| st.size);
        let (data, _staged_entry) = staged.into_source()?;
        let fail = |e: std::io::Error| staging_error(e);
        let displaced = self.install(&dir, &name, path, Replace::FileAside, |home, _| {
            let (temp, file) = TempEntry::file(home).map_err(|e| fail(e.into()))?;
            let base = patch.base_len(old_len);
            if let Some((current, _)) = &current {
                copy_prefix(current, &file, base.min(old_len))
                    .map_err(|e| Error::from_io(e, path))?;
            }
            file.set_len(base).map_err(fail)?;
            write_ranges(&data, &file, patch).map_err(fail)?;
            // Before it is renamed into place: it never appears there with
            // the server's owner, or with the staged file's bits.
            claim(self.owner.as_ref(), &file).map_err(|e| fail(e.into()))?;
            set_attributes_fd(&file, Some(perms), mode.modified).map_err(|e| fail(e.into()))?;
            self.durability().settle_file(&file)?;
            Ok(temp)
        })?;
        let meta = self.record(dir.as_fd(), &name, path)?;
        // The old version, swapped out under a temporary name, goes here.
        drop(displaced);
        Ok(meta)
    }
}

/// Copies `from[..end]` to the same offsets of `to`, data runs only (holes
/// stay holes), in the kernel where it can.
fn copy_prefix(from: &File, to: &File, end: u64) -> std::io::Result<()> {
    let (mut offset, mut buf) = (0, Vec::new());
    while let Some((start, stop)) = next_data(from, offset, end)? {
        offset = start + copy_range(from, to, start, stop, 0, &mut buf)?;
        if offset < stop {
            // Cut short by another process: what was read is what there is.
            break;
        }
    }
    Ok(())
}

/// Writes each range of `patch` into `to`, taking its bytes one after
/// another from `data`.
fn write_ranges(data: &Source, to: &File, patch: &Patch) -> std::io::Result<()> {
    let mut buf = vec![0u8; RANGE_BUFFER_BYTES];
    let mut from = 0u64;
    for range in &patch.ranges {
        let mut done = 0u64;
        while done < range.len {
            let want = (range.len - done).min(buf.len() as u64) as usize;
            data.read_exact_at(&mut buf[..want], from + done)?;
            to.write_all_at(&buf[..want], range.offset + done)?;
            done += want as u64;
        }
        from += range.len;
    }
    Ok(())
}
