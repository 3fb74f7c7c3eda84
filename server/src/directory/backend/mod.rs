//! The directory backend: a workspace kept in a directory on the server's
//! disk, which containers may share (bind-mount) and change behind our back.
//!
//! # Safety model
//!
//! The root is opened once, in [`DirectoryBackend::open`], and never
//! resolved by string again. Every path is resolved beneath that descriptor
//! one component at a time with `openat(dir, name, O_NOFOLLOW|O_DIRECTORY)`
//! ([`DirectoryBackend::open_dir`]); the last component is then touched with
//! a `*at` call relative to its parent's descriptor (`statx` with
//! `AT_SYMLINK_NOFOLLOW`, `openat` with `O_NOFOLLOW`, `renameat2`,
//! `unlinkat`, `mkdirat`). Recursive operations (list, walk, copy, remove)
//! descend the same way, by descriptor, so a directory swapped for a symlink
//! between a check and a use makes the call fail or skip that entry; it can
//! never send it outside the root. Symbolic links are never followed, not
//! even when they point inside the root. The assumption behind this: nobody
//! can move a directory out of the root while we hold it open (a container
//! sees the root as a bind mount and cannot rename across it).
//!
//! The walk to a directory is first tried as one `openat2` call with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`
//! ([`sys::open_beneath`]), which the kernel refuses on the same paths the
//! walk refuses (a symlink anywhere, a climb out of the root). Only when it
//! fails does the component walk run, and it decides the answer: every
//! error names the component that is a symlink or a file, exactly as
//! without the shortcut, and a kernel without `openat2` (before 5.6) just
//! takes the walk. The last component is touched as above.
//!
//! # Writes
//!
//! [`Backend::stage`] keeps the first 64 KiB in memory
//! ([`staging::SMALL_STAGE_BYTES`]) and puts bytes past them in a named
//! temporary file in the staging directory, outside the root, so neither
//! listings nor containers ever see it; dropping it unlinks it (a small
//! write's file is made there at its commit). A commit renames it into
//! place, which is atomic and leaves readers of the old inode reading the
//! old content. When
//! the staging directory is on another filesystem (`EXDEV`), the content is
//! copied into a temporary file in the destination directory, named with
//! [`TEMP_PREFIX`], and renamed from there; such names are reserved: they
//! never show in listings, and paths that use them are refused. Directory
//! copies are built the same way and renamed into place whole. Nothing is
//! fsynced unless the server runs with `--durability fsync`
//! ([`crate::durability`]): then a staged file's data is flushed before the
//! rename that publishes it, and [`Backend::settle`] syncs the filesystem
//! before a change is answered. Parent directories made by
//! `create_parents` stay when the commit after them fails.
//!
//! # Versions
//!
//! Each path's version is remembered with a fingerprint of what was seen
//! there (device, inode, size, mtime, ctime, kind). Seeing a different
//! fingerprint, or an unknown path, assigns the next value of the backend's
//! counter, so changes made from outside the service raise versions when
//! they are next observed. Directories have versions too; their mtime moves
//! when entries come and go, so their version does as well.
//!
//! The counter starts at the wall clock in microseconds
//! ([`versions::version_floor`]), not at 1: the workspace outlives the process, and a server restarted on
//! it must not hand out again a version a client may still hold, or that
//! client's `if_version` would overwrite changes it never saw.
//!
//! # Choices
//!
//! - Names that are not UTF-8 are skipped by list, walk and copy (they
//!   cannot be named in the protocol); remove deletes them with their
//!   directory.
//! - Pipes, sockets and devices list as files; opening or overwriting them
//!   is `PermissionDenied`, walks skip them and directory copies leave them
//!   out.
//! - A symlink is copied and moved as the link itself.
//! - Directory sizes are reported as 0, as the memory backend does.
//! - `statx` (Linux 4.11) is required.
//!
//! # Layout
//!
//! `sys` is the system-call layer and the descriptor walk to a directory;
//! `versions` the fingerprints; `staging` writes and commits; `patch`
//! ranged writes; `links` symlinks made and read; `walk` list, copy,
//! remove and count; `intent` the replacement record. The snapshot
//! store's tree walk ([`super::snapshots`]) descends with `sys` and `walk`.

mod intent;
mod links;
mod owner;
mod patch;
mod removal;
mod staging;
pub(crate) mod sys;
#[cfg(test)]
mod tests;
mod versions;
pub(crate) mod walk;

pub use crate::backend::TEMP_PREFIX;
pub(crate) use intent::INTENT_NAME;
pub use owner::Owner;
pub use removal::REMOVING_DIR;
pub use staging::{DirectoryStaged, Displaced};
pub(crate) use sys::{copy_data, next_data};

use crate::backend::Intent;
use crate::backend::{Backend, CommitMode, Content, Listed, ListedFiles, OpenFile, Patch};
use crate::durability::Durability;
use owner::{claim, Claim};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, Mode};
use rustix::io::Errno;
use staging::{Replace, TempEntry};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use sys::{
    check_path, cname, io, not_found, not_regular, open_listed_regular, open_regular,
    open_trusted_dir, read_link, reopen, set_attributes_fd, staging_error, stat_at, stat_fd,
    symlink_denied, Kind, DIR_FLAGS,
};
use versions::{version_floor, Known};
use walk::{copy_tree, count_tree, has_entries, FileWalk, TransferPlan};
use wsfs::{CanonicalPath, Error, FileKind, Metadata, Permissions, Result};

/// A workspace stored in a directory. See the module documentation.
pub struct DirectoryBackend {
    root: OwnedFd,
    staging: Arc<OwnedFd>,
    /// True once renames from the staging directory into the root are known
    /// to fail with `EXDEV`; temporaries are then made in the destination.
    cross_device: AtomicBool,
    /// The next version to hand out.
    next_version: AtomicU64,
    /// Path -> what was last seen there and its version.
    versions: Mutex<BTreeMap<String, Known>>,
    /// What an answered change must survive: true for `fsync`. Settable
    /// after opening, so that a new session is filled (mounts, seeds)
    /// without a sync per file and synced once, with its record.
    fsync: AtomicBool,
    /// Who owns what the service creates; `None`: the server's own user.
    owner: Option<Owner>,
    /// Whether a removed directory's contents are removed by the remover
    /// thread after the call ([`Self::removing_later`]) rather than in it.
    remove_later: bool,
    /// True while an intent record names staged files
    /// ([`Self::begin_intent`] to [`Self::end_intent`]): a commit then
    /// replaces a file by one rename, since swapping the old file out under
    /// the staged file's name would make a replay take it for the new one.
    /// Otherwise a commit swaps the old file out and removes it: on ext4 a
    /// rename over a file writes the new file's data out at once (about
    /// 0.5 s per GiB), an exchange does not.
    replacing: AtomicBool,
}

impl DirectoryBackend {
    /// Opens the workspace directory `root`, with temporary files made in
    /// `staging`, a directory outside the root (normally on the same
    /// filesystem, so commits are plain renames).
    pub fn open(root: &Path, staging: &Path) -> Result<Self> {
        let root_fd = open_trusted_dir(root)?;
        let staging_fd = open_trusted_dir(staging)?;
        let real = |p: &Path| {
            std::fs::canonicalize(p)
                .map_err(|e| Error::internal(format!("cannot resolve '{}': {e}", p.display())))
        };
        if real(staging)?.starts_with(real(root)?) {
            return Err(Error::invalid_argument(format!(
                "the staging directory '{}' must be outside the workspace '{}'",
                staging.display(),
                root.display()
            )));
        }
        let dev = |fd: &OwnedFd| {
            stat_fd(fd)
                .map(|s| s.dev)
                .map_err(|e| Error::internal(format!("cannot stat a workspace directory: {e}")))
        };
        let cross_device = dev(&root_fd)? != dev(&staging_fd)?;
        Ok(DirectoryBackend {
            root: root_fd,
            staging: Arc::new(staging_fd),
            cross_device: AtomicBool::new(cross_device),
            next_version: AtomicU64::new(version_floor()),
            versions: Mutex::new(BTreeMap::new()),
            fsync: AtomicBool::new(false),
            owner: None,
            remove_later: false,
            replacing: AtomicBool::new(false),
        })
    }

    /// The same backend, giving everything it creates to `owner`.
    pub fn with_owner(mut self, owner: Option<Owner>) -> Self {
        self.owner = owner;
        self
    }

    /// The same backend, leaving the contents of a directory a recursive
    /// removal moved out of the workspace to the remover thread: the call
    /// answers once the tree is out (see `removal`).
    pub fn removing_later(mut self) -> Self {
        self.remove_later = true;
        self
    }

    pub fn owner(&self) -> Option<Owner> {
        self.owner
    }

    /// Proves that the server may give files to the owner, before a session
    /// is made with it: a probe file in the staging directory is chowned
    /// (and removed), then the root, when `claim_root` (the session made
    /// it). Without the right: `PermissionDenied`, nothing changed.
    pub fn claim_for_owner(&self, claim_root: bool) -> Result<()> {
        let Some(owner) = self.owner else {
            return Ok(());
        };
        let refused = |e: Errno| match e {
            Errno::PERM => Error::PermissionDenied {
                path: String::new(),
                message: format!(
                    "the server cannot give files to uid {} gid {}: changing a file's owner \
                     needs the server to run as root or with CAP_CHOWN ({e})",
                    owner.uid, owner.gid
                ),
            },
            e => Error::internal(format!("cannot change a probe file's owner: {e}")),
        };
        let (_probe, file) = TempEntry::file(&self.staging).map_err(|e| staging_error(e.into()))?;
        owner.claim(&file).map_err(refused)?;
        if claim_root {
            owner.claim(&self.root).map_err(refused)?;
        }
        Ok(())
    }

    /// The same backend, making its changes as durable as `durability` says.
    pub fn with_durability(self, durability: Durability) -> Self {
        self.set_durability(durability);
        self
    }

    /// Makes later changes as durable as `durability` says.
    pub fn set_durability(&self, durability: Durability) {
        self.fsync.store(durability.is_fsync(), Ordering::SeqCst);
    }

    pub fn durability(&self) -> Durability {
        if self.fsync.load(Ordering::SeqCst) {
            Durability::Fsync
        } else {
            Durability::None
        }
    }
}

impl Backend for DirectoryBackend {
    type Staged = DirectoryStaged;

    const BLOCKING: bool = true;

    /// Unless every change is fsynced: an fsync waits for the disk.
    fn small_changes_in_place(&self) -> bool {
        !self.durability().is_fsync()
    }

    fn metadata(&self, path: &CanonicalPath) -> Result<Option<Metadata>> {
        check_path(path)?;
        if path.is_root() {
            let found = self.observe(path, || {
                let st = stat_fd(&self.root).map_err(|e| io(e, path))?;
                Ok(Some(((), st)))
            })?;
            return Ok(found.map(|((), st, version)| st.metadata(path, version)));
        }
        let (Some(parent), Some(name)) = (path.parent(), path.name()) else {
            return Ok(None);
        };
        match self.open_dir(&parent)? {
            Some(dir) => self.observe_at(&dir, name, path),
            None => Ok(None),
        }
    }

    fn list(
        &self,
        dir: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
        max: usize,
    ) -> Result<(Vec<Metadata>, bool)> {
        check_path(dir)?;
        let fd = self.open_dir(dir)?.ok_or_else(|| not_found(dir))?;
        let mut out = Vec::new();
        let page = walk::Page { after, max };
        let truncated = depth > 0 && self.list_into(&fd, dir, depth, &page, &mut out, 0)?;
        Ok((out, truncated))
    }

    fn open(&self, path: &CanonicalPath) -> Result<OpenFile> {
        check_path(path)?;
        if path.is_root() {
            return Err(Error::IsADirectory {
                path: String::new(),
            });
        }
        let (file, st, version) = self
            .observe(path, || self.open_file(path).map(Some))?
            .ok_or_else(|| not_found(path))?;
        Ok(OpenFile {
            meta: st.metadata(path, version),
            content: Content::Disk(file),
        })
    }

    /// Without a version, nothing is remembered: no fingerprint, no lock.
    fn open_content(&self, path: &CanonicalPath) -> Result<Content> {
        self.open_listed(&Listed::path(path.clone()))
            .map(|(content, _)| content)
    }

    /// Nothing is made until the bytes outgrow memory
    /// ([`staging::SMALL_STAGE_BYTES`]).
    fn stage(&self) -> Result<DirectoryStaged> {
        Ok(DirectoryStaged::new(&self.staging))
    }

    fn commit(
        &self,
        staged: DirectoryStaged,
        path: &CanonicalPath,
        mode: CommitMode,
    ) -> Result<Metadata> {
        let replace = if self.replacing.load(Ordering::Acquire) {
            Replace::File
        } else {
            Replace::FileAside
        };
        // The old file, if one was swapped out, is removed here.
        self.commit_with(staged, path, mode, replace)
            .map(|(meta, _displaced)| meta)
    }

    fn commit_patch(
        &self,
        staged: DirectoryStaged,
        path: &CanonicalPath,
        patch: &Patch,
        mode: CommitMode,
    ) -> Result<Metadata> {
        self.patch_with(staged, path, patch, mode)
    }

    fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        create_parents: bool,
    ) -> Result<Metadata> {
        self.make_symlink(path, target, create_parents)
    }

    fn settle(&self) -> Result<()> {
        self.durability().settle_fs(&self.root)
    }

    /// Records `intent` before the first change and clears it after the
    /// last ([`crate::directory::journal`]). A step that fails with an error
    /// (a full disk) has dropped the staged files it did not reach, so the
    /// record could not be replayed whole: it is cleared, and the error says
    /// the call failed part-way (calling again completes it).
    fn replace_whole<T>(&self, intent: &Intent, changes: impl FnOnce() -> Result<T>) -> Result<T> {
        self.begin_intent(intent)?;
        let out = changes();
        let cleared = self.end_intent();
        let out = out?;
        cleared?;
        Ok(out)
    }

    fn remove(&self, path: &CanonicalPath, recursive: bool) -> Result<u64> {
        check_path(path)?;
        if path.is_root() {
            let root = reopen(&self.root).map_err(|e| io(e, path))?;
            if !recursive {
                return match has_entries(&root, path)? {
                    true => Err(Error::DirectoryNotEmpty {
                        path: String::new(),
                    }),
                    false => Ok(0),
                };
            }
            let removed = self.remove_all(&root, path);
            self.forget(path);
            return removed;
        }
        let (dir, name) = self.parent_dir(path, false, path)?;
        let name = cname(name, path)?;
        let st = stat_at(&dir, &name).map_err(|e| io(e, path))?;
        let removed = match (st.kind, recursive) {
            (Kind::Dir, true) => self.remove_tree(&dir, &name, path),
            (Kind::Dir, false) => rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR)
                .or_else(|e| match e {
                    // Empty to every listing, but holding a temporary file
                    // a crash left (one staged beside its place when the
                    // staging directory is on another filesystem): it goes,
                    // and so does the directory.
                    Errno::NOTEMPTY | Errno::EXIST if only_leftovers(&dir, &name) => {
                        rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR)
                    }
                    e => Err(e),
                })
                .map(|()| 1)
                .map_err(|e| match e {
                    Errno::NOTEMPTY | Errno::EXIST => Error::DirectoryNotEmpty {
                        path: path.as_str().to_string(),
                    },
                    e => io(e, path),
                }),
            _ => rustix::fs::unlinkat(&dir, &name, AtFlags::empty())
                .map(|()| 1)
                .map_err(|e| io(e, path)),
        };
        // A partial recursive removal still removed things; a refused
        // non-recursive one changed nothing and keeps its versions.
        if removed.is_ok() || recursive {
            self.forget(path);
        }
        match removed? {
            0 => Err(not_found(path)),
            n => Ok(n),
        }
    }

    fn default_directory_permissions(&self) -> Permissions {
        self.owner
            .map_or(Permissions::DIRECTORY_DEFAULT, |o| o.directory_permissions)
    }

    fn mkdir(&self, path: &CanonicalPath, parents: bool, permissions: Permissions) -> Result<bool> {
        check_path(path)?;
        if path.is_root() {
            return Ok(false);
        }
        let parent = path.parent().unwrap_or_default();
        let (dir, name) = self.parent_dir(path, parents, &parent)?;
        let name = cname(name, path)?;
        // Made owner-only, then given its bits by descriptor: the umask
        // never decides, and nobody else can use it in between.
        match rustix::fs::mkdirat(&dir, &name, Mode::RWXU) {
            Ok(()) => {
                let made = rustix::fs::openat(&dir, &name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| io(e, path))?;
                claim(self.owner.as_ref(), &made).map_err(|e| io(e, path))?;
                set_attributes_fd(&made, Some(permissions), None).map_err(|e| io(e, path))?;
                self.record(&dir, &name, path)?;
                Ok(true)
            }
            Err(Errno::EXIST) => match stat_at(&dir, &name) {
                Ok(st) if st.kind == Kind::Dir => Ok(false),
                _ => Err(Error::AlreadyExists {
                    path: path.as_str().to_string(),
                }),
            },
            Err(e) => Err(io(e, path)),
        }
    }

    fn set_attributes(
        &self,
        path: &CanonicalPath,
        permissions: Option<Permissions>,
        modified: Option<SystemTime>,
    ) -> Result<Metadata> {
        check_path(path)?;
        // The entry is opened without following links and changed through
        // its descriptor; its parent is re-stated by name only to record
        // the new version.
        let fd: OwnedFd = if path.is_root() {
            reopen(&self.root).map_err(|e| io(e, path))?
        } else {
            let (dir, name) = self.parent_dir(path, false, path)?;
            let name = cname(name, path)?;
            match stat_at(&dir, &name).map_err(|e| io(e, path))?.kind {
                Kind::Dir => rustix::fs::openat(&dir, &name, DIR_FLAGS, Mode::empty()).map_err(
                    |e| match e {
                        Errno::LOOP | Errno::NOTDIR => symlink_denied(path, true),
                        e => io(e, path),
                    },
                )?,
                Kind::File => open_regular(&dir, &name, path)?.0.into(),
                Kind::Symlink => return Err(symlink_denied(path, true)),
                Kind::Special => return Err(not_regular(path)),
            }
        };
        set_attributes_fd(&fd, permissions, modified).map_err(|e| io(e, path))?;
        let st = stat_fd(&fd).map_err(|e| io(e, path))?;
        Ok(self.record_stat(&st, path))
    }

    fn rename(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<u64> {
        let TransferPlan {
            src_meta,
            replace,
            src_dir,
            src_name,
            dst_dir,
            dst_name,
        } = self.transfer_plan(src, dst, overwrite, create_parents)?;
        self.place(src_dir.as_fd(), &src_name, &dst_dir, &dst_name, replace)
            .map(drop)
            .map_err(|e| match e {
                Errno::EXIST | Errno::NOTEMPTY => Error::AlreadyExists {
                    path: dst.as_str().to_string(),
                },
                Errno::NOENT => not_found(src),
                e => io(e, dst),
            })?;
        self.forget(src);
        self.forget(dst);
        let mut moved = 1;
        if src_meta.kind == FileKind::Directory {
            if let Ok(fd) = rustix::fs::openat(dst_dir.as_fd(), &dst_name, DIR_FLAGS, Mode::empty())
            {
                moved += count_tree(&fd, dst, 0)?;
            }
        }
        self.record(dst_dir.as_fd(), &dst_name, dst)?;
        Ok(moved)
    }

    fn copy(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<u64> {
        let TransferPlan {
            src_meta,
            replace,
            src_dir,
            src_name,
            dst_dir,
            dst_name,
        } = self.transfer_plan(src, dst, overwrite, create_parents)?;
        let mut created = 0;
        match src_meta.kind {
            FileKind::File => {
                let (from, st) = open_regular(&src_dir, &src_name, src)?;
                self.install(&dst_dir, &dst_name, dst, replace, |home, _| {
                    let (temp, to) = TempEntry::file(home).map_err(|e| staging_error(e.into()))?;
                    claim(self.owner.as_ref(), &to).map_err(|e| io(e, dst))?;
                    copy_data(&from, &to, 0).map_err(|e| Error::from_io(e, src))?;
                    rustix::fs::fchmod(&to, Mode::from_raw_mode(st.mode & 0o777))
                        .map_err(|e| io(e, dst))?;
                    Ok(temp)
                })?;
                created = 1;
            }
            FileKind::Directory => {
                let from = rustix::fs::openat(&src_dir, &src_name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| match e {
                        Errno::LOOP | Errno::NOTDIR => symlink_denied(src, true),
                        e => io(e, src),
                    })?;
                let perms = stat_fd(&from).map_err(|e| io(e, src))?.mode & 0o777;
                self.install(&dst_dir, &dst_name, dst, replace, |home, _| {
                    let (temp, to) = TempEntry::dir(home).map_err(|e| io(e, dst))?;
                    claim(self.owner.as_ref(), &to).map_err(|e| io(e, dst))?;
                    created = 1 + copy_tree(&from, &to, src, 0, self.owner.as_ref())?;
                    rustix::fs::fchmod(&to, Mode::from_raw_mode(perms)).map_err(|e| io(e, dst))?;
                    Ok(temp)
                })?;
            }
            FileKind::Symlink => {
                let target = read_link(&src_dir, &src_name, src)?;
                self.install(&dst_dir, &dst_name, dst, replace, |home, _| {
                    self.build_link(home, &target, dst)
                })?;
                created = 1;
            }
        }
        self.forget(dst);
        self.record(dst_dir.as_fd(), &dst_name, dst)?;
        Ok(created)
    }

    fn walk_files(
        &self,
        base: &CanonicalPath,
    ) -> Result<Box<dyn Iterator<Item = Result<CanonicalPath>> + Send>> {
        let files = self.walk_listed(base)?;
        Ok(Box::new(files.map(|f| f.map(|f| f.path))))
    }

    fn open_listed(&self, file: &Listed) -> Result<(Content, u64)> {
        // Where the walk found it, or by its path from the root.
        let (file, st) = match (file.found_at::<OwnedFd>(), file.path.name()) {
            (Some(dir), Some(name)) => open_listed_regular(dir, name, &file.path)?,
            _ if file.path.is_root() => {
                return Err(Error::IsADirectory {
                    path: String::new(),
                })
            }
            _ => {
                check_path(&file.path)?;
                self.open_file(&file.path)?
            }
        };
        Ok((Content::Disk(file), st.size))
    }

    fn walk_listed(&self, base: &CanonicalPath) -> Result<ListedFiles> {
        check_path(base)?;
        let mut walk = FileWalk::default();
        let start = if base.is_root() {
            Some(reopen(&self.root).map_err(|e| io(e, base))?)
        } else {
            let (Some(parent), Some(name)) = (base.parent(), base.name()) else {
                return Ok(Box::new(walk));
            };
            let dir = match self.open_dir(&parent) {
                Ok(Some(dir)) => dir,
                Ok(None) | Err(Error::NotADirectory { .. }) => return Ok(Box::new(walk)),
                Err(e) => return Err(e),
            };
            match stat_at(&dir, name).map(|st| st.kind) {
                Ok(Kind::File) => {
                    walk.single = Some(base.clone());
                    None
                }
                Ok(Kind::Dir) => rustix::fs::openat(&dir, name, DIR_FLAGS, Mode::empty()).ok(),
                Ok(_) | Err(Errno::NOENT) => None,
                Err(e) => return Err(io(e, base)),
            }
        };
        if let Some(fd) = start {
            walk.push(fd, base.clone())?;
        }
        Ok(Box::new(walk))
    }
}

/// Whether `dir/name` holds nothing but files with reserved names (left by
/// a crash between a temporary file's making and its rename); those are
/// removed. Its own claim keeps every commit out of the directory
/// meanwhile, so none of them is in use.
fn only_leftovers(dir: impl AsFd, name: &std::ffi::CStr) -> bool {
    let Ok(inner) = rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) else {
        return false;
    };
    let Ok(entries) = sys::read_entries(&inner) else {
        return false;
    };
    let leftovers = entries
        .iter()
        .all(|(n, t)| sys::is_reserved(n) && *t == rustix::fs::FileType::RegularFile);
    leftovers
        && entries
            .iter()
            .all(|(n, _)| rustix::fs::unlinkat(&inner, n, AtFlags::empty()).is_ok())
}
