//! Symbolic links made and read as links: Symlink builds one under a
//! temporary name and renames it into place (never over anything), and
//! Stat and List read a link's target with `readlinkat`. Nothing here
//! resolves a link.

use super::owner::Claim;
use super::staging::{Replace, TempEntry};
use super::sys::{check_path, cname, io};
use super::DirectoryBackend;
use rustix::fd::{AsFd, OwnedFd};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, FileKind, Metadata, Result};

impl DirectoryBackend {
    /// A new link holding `target` in the temporary directory `home`, given
    /// to the session's owner; `dst` names it in errors.
    pub(super) fn build_link(
        &self,
        home: &Arc<OwnedFd>,
        target: &CStr,
        dst: &CanonicalPath,
    ) -> Result<TempEntry> {
        let name = TempEntry::new_name();
        rustix::fs::symlinkat(target, home.as_fd(), &name).map_err(|e| io(e, dst))?;
        let temp = TempEntry::adopt(home, name, false);
        if let Some(owner) = &self.owner {
            owner
                .claim_at(home.as_fd(), &temp.name)
                .map_err(|e| io(e, dst))?;
        }
        Ok(temp)
    }

    /// [`crate::backend::Backend::symlink`].
    pub(super) fn make_symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        create_parents: bool,
    ) -> Result<Metadata> {
        check_path(path)?;
        let exists = || Error::AlreadyExists {
            path: path.as_str().to_string(),
        };
        if path.is_root() {
            return Err(exists());
        }
        let target = CString::new(target).map_err(|_| {
            Error::invalid_argument(format!(
                "cannot make the symbolic link '{path}': its target contains a NUL byte"
            ))
        })?;
        let parent = path.parent().unwrap_or_default();
        let (dir, name) = self.parent_dir(path, create_parents, &parent)?;
        let dir = Arc::new(dir);
        let name = cname(name, path)?;
        self.install(&dir, &name, path, Replace::No, |home, _| {
            self.build_link(home, &target, path)
        })?;
        let meta = self.record(dir.as_fd(), &name, path)?;
        link_target(dir.as_fd(), &name, meta)
    }
}

/// `meta` of the entry `dir/name`, with its target when it is a symlink.
/// A link that another process removed or replaced since it was stated
/// keeps no target.
pub(super) fn link_target(dir: impl AsFd, name: &CStr, mut meta: Metadata) -> Result<Metadata> {
    if meta.kind != FileKind::Symlink {
        return Ok(meta);
    }
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => {
            // Targets are UTF-8 when the service made them; one planted by
            // another program that is not is shown lossily.
            meta.symlink_target = Some(target.to_string_lossy().into_owned());
            Ok(meta)
        }
        Err(Errno::NOENT | Errno::INVAL) => Ok(meta),
        Err(e) => Err(io(e, &meta.path)),
    }
}
