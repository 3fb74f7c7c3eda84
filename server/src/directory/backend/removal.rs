//! Recursive removal, all or nothing across a crash: a directory leaves
//! the workspace in one rename, out of the root, and its contents are
//! removed afterwards by the server's remover thread.
//!
//! Where it goes: the staging directory (outside the root, emptied at
//! every start before the session answers). When the staging directory is
//! on another filesystem than the root (a session rooted elsewhere), a
//! rename there fails with `EXDEV`; the tree then goes to [`REMOVING_DIR`],
//! a hidden directory at the top of the root. Its name carries the
//! reserved prefix ([`crate::backend::TEMP_PREFIX`]), so no listing, walk,
//! glob, grep, quota count or snapshot sees it, and no client path can name
//! it; it too is emptied at start ([`DirectoryBackend::finish_removals`]).
//! A directory on a third filesystem (a mount inside the root) cannot be
//! renamed into either: it is removed in place, entry by entry, as before.

use super::staging::TempEntry;
use super::sys::{
    child_path, entry_kind, io, is_reserved, not_found, read_entries, rename_noreplace, Kind,
    DIR_FLAGS,
};
use super::walk::{count_tree, remove_entry};
use super::DirectoryBackend;
use crate::backend::TEMP_PREFIX;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::Mode;
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};
use wsfs::{CanonicalPath, Result};

/// The hidden directory at the top of a root that holds trees being
/// removed when the staging directory is on another filesystem.
pub const REMOVING_DIR: &str = ".wsfs-tmp-removing";

impl DirectoryBackend {
    /// Removes the directory `dir/name` (at `path`) with everything in it:
    /// moved out of the workspace in one rename, counted, then removed by
    /// the remover thread (or at once, when this backend removes in
    /// place). Returns how many entries went.
    pub(super) fn remove_tree(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        path: &CanonicalPath,
    ) -> Result<u64> {
        let Some(aside) = self.move_out(dir, name, path)? else {
            return remove_entry(dir, name, path, 0);
        };
        let counted = rustix::fs::openat(aside.dir.as_fd(), &aside.name, DIR_FLAGS, Mode::empty())
            .map_err(|e| io(e, path))
            .and_then(|fd| count_tree(&fd, path, 0));
        match counted {
            Ok(count) => {
                self.dispose(aside);
                Ok(1 + count)
            }
            Err(e) => {
                // A tree too deep to count is too deep to remove: it goes
                // back, and the call changes nothing.
                if rename_noreplace(aside.dir.as_fd(), &aside.name, dir.as_fd(), name).is_ok() {
                    aside.keep();
                }
                Err(e)
            }
        }
    }

    /// Removes everything inside the root, each directory by
    /// [`Self::remove_tree`]; returns how many entries went.
    pub(super) fn remove_all(&self, root: &OwnedFd, path: &CanonicalPath) -> Result<u64> {
        let mut count = 0;
        for (name, ft) in read_entries(root).map_err(|e| io(e, path))? {
            if name.as_bytes() == REMOVING_DIR.as_bytes() {
                continue;
            }
            let child = child_path(path, &name);
            count += match entry_kind(root, &name, ft) {
                Some(Kind::Dir) if !is_reserved(&name) => {
                    match self.remove_tree(root, &name, &child) {
                        Err(wsfs::Error::FileNotFound { .. }) => 0,
                        other => other?,
                    }
                }
                _ => remove_entry(root, &name, &child, 0)?,
            };
        }
        Ok(count)
    }

    /// Renames `dir/name` out of the workspace, under a temporary name;
    /// `None` when no place on its filesystem is known.
    fn move_out(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        path: &CanonicalPath,
    ) -> Result<Option<TempEntry>> {
        for _ in 0..2 {
            let cross_device = self.cross_device.load(Ordering::Relaxed);
            let home = match cross_device {
                false => self.staging.clone(),
                true => match self.removing_dir() {
                    Ok(home) => home,
                    // A link or a file planted under the reserved name.
                    Err(_) => return Ok(None),
                },
            };
            let aside = TempEntry::new_name();
            match rename_noreplace(dir.as_fd(), name, home.as_fd(), &aside) {
                Ok(()) => return Ok(Some(TempEntry::adopt(&home, aside, true))),
                Err(Errno::XDEV) if !cross_device => {
                    self.cross_device.store(true, Ordering::Relaxed)
                }
                Err(Errno::XDEV) => return Ok(None),
                Err(Errno::NOENT) => return Err(not_found(path)),
                Err(e) => return Err(io(e, path)),
            }
        }
        Ok(None)
    }

    /// [`REMOVING_DIR`], made when missing; never through a link.
    fn removing_dir(&self) -> std::result::Result<Arc<OwnedFd>, Errno> {
        let name = removing_name();
        match rustix::fs::mkdirat(&self.root, &name, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        rustix::fs::openat(&self.root, &name, DIR_FLAGS, Mode::empty()).map(Arc::new)
    }

    /// Removes what a stop left in [`REMOVING_DIR`]; called at start,
    /// before the session answers.
    pub fn finish_removals(&self) -> Result<()> {
        remove_entry(&self.root, &removing_name(), &CanonicalPath::root(), 0).map(drop)
    }

    /// Whether a stop left trees in [`REMOVING_DIR`] of the root at `root`.
    pub fn removals_left(root: &std::path::Path) -> bool {
        root.join(REMOVING_DIR).symlink_metadata().is_ok()
    }

    /// Removes `aside` now, or hands it to the remover thread.
    fn dispose(&self, aside: TempEntry) {
        if !self.remove_later {
            drop(aside);
            return;
        }
        let queue = remover().queue.lock().unwrap_or_else(|e| e.into_inner());
        let refused = match queue.as_ref() {
            Some(queue) => queue.send(aside).err().map(|e| e.0),
            None => Some(aside),
        };
        if let Some(aside) = refused {
            // No remover thread: removed here.
            drop(aside);
        }
    }
}

fn removing_name() -> CString {
    debug_assert!(REMOVING_DIR.starts_with(TEMP_PREFIX));
    CString::new(REMOVING_DIR).unwrap_or_default()
}

/// The server's one remover thread: what it is given, it removes, in
/// order (dropping a [`TempEntry`] removes it).
struct Remover {
    /// `None` when the thread could not be started.
    queue: Mutex<Option<Sender<TempEntry>>>,
}

fn remover() -> &'static Remover {
    static REMOVER: OnceLock<Remover> = OnceLock::new();
    REMOVER.get_or_init(|| {
        let (queue, trees) = std::sync::mpsc::channel::<TempEntry>();
        let started = std::thread::Builder::new()
            .name("wsfs-remover".to_string())
            .spawn(move || trees.into_iter().for_each(drop));
        if let Err(e) = &started {
            tracing::warn!(error = %e, "no remover thread: deleted directories are removed in the call");
        }
        Remover {
            queue: Mutex::new(started.ok().map(|_| queue)),
        }
    })
}
