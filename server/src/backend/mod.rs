//! Storage backends: dumb, versioned storage under one workspace root.
//!
//! A backend knows nothing of gRPC, callers, line pagination or edits; the
//! [`crate::workspace::Workspace`] wraps a backend and implements the
//! contract's `Filesystem` operations on top of it ("thin trait, fat
//! router"). Backend methods are blocking; the workspace runs them on the
//! blocking pool when [`Backend::BLOCKING`] says so.
//!
//! Rules every backend keeps:
//! - paths are [`CanonicalPath`]s relative to the workspace root;
//! - every change to a path gives it a new version, taken from one counter
//!   per session, so a path's version only ever grows (even across delete
//!   and re-create);
//! - [`Backend::open`] returns one consistent version of a file: later
//!   commits never change what an open file reads;
//! - [`Backend::commit`] replaces a file atomically: readers see the old or
//!   the new content, never a mix, and a staged file that is dropped without
//!   commit leaves no trace;
//! - symlinks are never followed: they are listed as `FileKind::Symlink`
//!   with their target; opening, writing or resolving through one is
//!   `PermissionDenied` ([`symlink_denied`]).

use bytes::Bytes;
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Metadata, Permissions, Result};

#[cfg(test)]
pub(crate) mod contract_tests;
pub mod intent;

pub use intent::Intent;

/// Names starting with this are the server's temporary files (the
/// directory backend stages writes under such names beside their
/// destination): hidden from listings and refused in paths on every
/// backend, so a workspace moves between backends whole.
pub const TEMP_PREFIX: &str = ".wsfs-tmp-";

/// Refuses a path a backend will not hold: any segment with the reserved
/// [`TEMP_PREFIX`]. Every backend's writes check it, and so do the import
/// and restore planners, before they change anything.
pub fn check_name(path: &CanonicalPath) -> Result<()> {
    if path.segments().any(|seg| seg.starts_with(TEMP_PREFIX)) {
        return Err(Error::InvalidPath {
            path: path.as_str().to_string(),
            message: format!(
                "names starting with '{TEMP_PREFIX}' are reserved for the server's temporary files"
            ),
        });
    }
    Ok(())
}

/// Why a symlink at or on the way to `path` (`last`: at it) is refused:
/// the one refusal every backend gives.
pub fn symlink_denied(path: &CanonicalPath, last: bool) -> Error {
    let message = if last {
        format!("'{path}' is a symbolic link; wsfs never follows symbolic links")
    } else {
        format!("'{path}' goes through a symbolic link; wsfs never follows symbolic links")
    };
    Error::PermissionDenied {
        path: path.as_str().to_string(),
        message,
    }
}

/// A backend's own handle on where a walk found a file, kept for
/// [`Backend::open_listed`]: opaque to everyone but the backend that made
/// it (DIRECTORY keeps the directory it held open).
pub type FoundAt = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// A file a walk listed ([`Backend::walk_listed`]).
pub struct Listed {
    pub path: CanonicalPath,
    found: Option<FoundAt>,
}

impl Listed {
    /// A file known by its path alone.
    pub fn path(path: CanonicalPath) -> Listed {
        Listed { path, found: None }
    }

    /// A file with the backend's handle on where it was found.
    pub fn found(path: CanonicalPath, at: FoundAt) -> Listed {
        Listed {
            path,
            found: Some(at),
        }
    }

    /// The handle [`Listed::found`] kept, if it is a `T`.
    pub fn found_at<T: std::any::Any>(&self) -> Option<&T> {
        self.found.as_ref()?.downcast_ref()
    }

    /// Whether this file holds a handle that `previous` (the file listed
    /// before it) does not: what keeping a run of listed files costs in
    /// descriptors.
    pub fn holds_new_dir(&self, previous: Option<&Listed>) -> bool {
        match (&self.found, previous.and_then(|p| p.found.as_ref())) {
            (None, _) => false,
            (Some(at), Some(prev)) => !std::sync::Arc::ptr_eq(at, prev),
            (Some(_), None) => true,
        }
    }
}

/// The lazy walk [`Backend::walk_listed`] returns.
pub type ListedFiles = Box<dyn Iterator<Item = Result<Listed>> + Send>;

/// One consistent version of a file's bytes.
pub enum Content {
    /// In-memory bytes (cheap to clone, never change).
    Memory(Bytes),
    /// An open file. Directory commits replace files by rename, so an open
    /// descriptor keeps reading the version it opened.
    Disk(std::fs::File),
}

/// A file opened for reading: its metadata at open time and its content.
pub struct OpenFile {
    pub meta: Metadata,
    pub content: Content,
}

/// Bytes being written, invisible to every listing until committed.
/// Dropping it without commit removes it.
pub trait StagedFile: Send + 'static {
    fn write_chunk(&mut self, chunk: &[u8]) -> Result<()>;
    /// Bytes written so far.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every byte is written: release what the staged bytes hold open (a
    /// descriptor), so that many staged files can wait for their commits
    /// together. Writing after it is an error.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
    /// The name an intent record uses to find this staged file again after
    /// a restart; `None` when it does not outlive the process (memory).
    fn journal_name(&self) -> Option<String> {
        None
    }
}

/// Where a commit puts the staged bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitMode {
    /// The new content is the current content followed by the staged bytes.
    pub append: bool,
    /// Create missing parent directories.
    pub create_parents: bool,
    /// The file's bits; `None`: an existing file keeps its own, a new one
    /// gets [`Permissions::FILE_DEFAULT`].
    pub permissions: Option<Permissions>,
    /// The file's modification time; `None`: the time of the commit.
    pub modified: Option<SystemTime>,
}

impl CommitMode {
    /// The bits a commit gives the file, given the bits of the file it
    /// replaces (`None`: there is none).
    pub fn permissions_over(&self, existing: Option<Permissions>) -> Permissions {
        self.permissions
            .or(existing)
            .unwrap_or(Permissions::FILE_DEFAULT)
    }
}

/// What a patch does to a file, in order: its length set to
/// `truncate_to` (cut, or extended with zeros), then each range written
/// with the next bytes of the staged file. Workspace-level rules (limits,
/// quotas, versions) are checked before a backend sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    pub truncate_to: Option<u64>,
    /// In the order they apply; their bytes follow one another in the
    /// staged file.
    pub ranges: Vec<PatchRange>,
    /// A missing file starts empty instead of being `FileNotFound`.
    pub create_missing: bool,
}

/// `len` bytes written at `offset` of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchRange {
    pub offset: u64,
    pub len: u64,
}

impl PatchRange {
    /// Where the range ends; the workspace refuses ranges that overflow.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

impl Patch {
    /// The file's length once the length is set, before the ranges.
    pub fn base_len(&self, before: u64) -> u64 {
        self.truncate_to.unwrap_or(before)
    }

    /// The file's length after the patch, given its length before.
    pub fn size_after(&self, before: u64) -> u64 {
        self.ranges
            .iter()
            .map(PatchRange::end)
            .fold(self.base_len(before), u64::max)
    }

    /// Whether the staged bytes are the whole file after the patch, given
    /// its length before: at most one range, at offset 0, reaching at
    /// least the length set first, so that no old byte and no zero of an
    /// extension is kept (a file rewritten from its start to its end).
    pub fn replaces_whole(&self, before: u64) -> bool {
        match self.ranges.as_slice() {
            [] => self.base_len(before) == 0,
            [only] => only.offset == 0 && only.len >= self.base_len(before),
            _ => false,
        }
    }
}

/// Storage for one workspace.
pub trait Backend: Send + Sync + 'static {
    type Staged: StagedFile;

    /// True when methods make blocking system calls and must run on the
    /// blocking pool.
    const BLOCKING: bool;

    /// True when a small change (a few system calls the page cache takes
    /// without waiting for the disk) may run in place, on the runtime's
    /// thread, even though the backend blocks (see the workspace's `Cost`).
    fn small_changes_in_place(&self) -> bool {
        !Self::BLOCKING
    }

    /// Metadata of `path` without following a final symlink; `Ok(None)`
    /// when nothing is there. The root is a directory. A symlink or file
    /// met as an intermediate component: `PermissionDenied` / `NotADirectory`.
    fn metadata(&self, path: &CanonicalPath) -> Result<Option<Metadata>>;

    /// Entries beneath directory `dir` down to `depth` levels (1 = its own
    /// entries), sorted by path bytewise, only those whose path sorts after
    /// `after` when given, at most `max` of them; the bool is true when
    /// more were left out. Missing: `FileNotFound`; a file:
    /// `NotADirectory`.
    fn list(
        &self,
        dir: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
        max: usize,
    ) -> Result<(Vec<Metadata>, bool)>;

    /// Opens one consistent version of a file. Missing: `FileNotFound`; a
    /// directory: `IsADirectory`; a symlink: `PermissionDenied`.
    fn open(&self, path: &CanonicalPath) -> Result<OpenFile>;

    /// [`Backend::open`] for a reader that needs neither the version nor
    /// the metadata (a search): a backend may skip what finding them costs.
    fn open_content(&self, path: &CanonicalPath) -> Result<Content> {
        self.open(path).map(|file| file.content)
    }

    /// [`Backend::open_content`] of a file [`Backend::walk_listed`] listed,
    /// with its size when opened: a backend may open it where the walk
    /// found it instead of resolving its path again.
    fn open_listed(&self, file: &Listed) -> Result<(Content, u64)> {
        self.open(&file.path).map(|f| (f.content, f.meta.size))
    }

    /// A new, empty staged file.
    fn stage(&self) -> Result<Self::Staged>;

    /// Atomically puts the staged bytes at `path` and returns the new
    /// metadata (with a new version). Parent missing and not
    /// `create_parents`: `FileNotFound` naming the parent; a parent that is a
    /// file: `NotADirectory`; `path` a directory: `IsADirectory`; a symlink
    /// anywhere on the way: `PermissionDenied`. On error nothing changed.
    fn commit(
        &self,
        staged: Self::Staged,
        path: &CanonicalPath,
        mode: CommitMode,
    ) -> Result<Metadata>;

    /// Atomically replaces the file at `path` with its current content
    /// changed by `patch` (the bytes of its ranges, in order, in `staged`)
    /// and returns the new metadata (with a new version). Missing:
    /// `FileNotFound`, unless `patch.create_missing` (then it starts empty,
    /// and its parents are made as `mode.create_parents` says); otherwise
    /// the errors of [`Backend::commit`]. On error nothing changed.
    fn commit_patch(
        &self,
        staged: Self::Staged,
        path: &CanonicalPath,
        patch: &Patch,
        mode: CommitMode,
    ) -> Result<Metadata>;

    /// Creates a symlink at `path` holding `target` (already checked by
    /// [`wsfs::check_symlink_target`]) and returns its metadata, with a new
    /// version. Anything at `path` (the root too): `AlreadyExists`; a parent
    /// missing and not `create_parents`: `FileNotFound` naming the parent; a
    /// symlink on the way: `PermissionDenied`.
    fn symlink(&self, path: &CanonicalPath, target: &str, create_parents: bool)
        -> Result<Metadata>;

    /// Removes a file, a symlink (the link itself), or a directory (with
    /// `recursive` when not empty: `DirectoryNotEmpty` otherwise). The root
    /// with `recursive` is emptied and kept. Returns how many files,
    /// directories and links went. Missing: `FileNotFound`.
    fn remove(&self, path: &CanonicalPath, recursive: bool) -> Result<u64>;

    /// Creates a directory with `permissions` (parents made on the way get
    /// [`Permissions::DIRECTORY_DEFAULT`]). Already a directory: `Ok(false)`,
    /// its bits unchanged; a file there: `AlreadyExists`; parent missing
    /// and not `parents`: `FileNotFound`.
    fn mkdir(&self, path: &CanonicalPath, parents: bool, permissions: Permissions) -> Result<bool>;

    /// Bits a new directory gets when its Mkdir names none.
    fn default_directory_permissions(&self) -> Permissions {
        Permissions::DIRECTORY_DEFAULT
    }

    /// Sets the bits and/or modification time of the file or directory at
    /// `path` (the root included) and returns its new metadata, with a new
    /// version. Missing: `FileNotFound`; a symlink (or a pipe, socket or
    /// device): `PermissionDenied`.
    fn set_attributes(
        &self,
        path: &CanonicalPath,
        permissions: Option<Permissions>,
        modified: Option<SystemTime>,
    ) -> Result<Metadata>;

    /// Moves a file or a whole directory; returns how many entries moved.
    /// Preconditions: [`check_transfer`].
    fn rename(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<u64>;

    /// Copies a file or a whole directory; returns how many entries were
    /// created. Preconditions: [`check_transfer`].
    fn copy(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<u64>;

    /// Every regular file beneath `base` (or `base` itself when it is a
    /// file), in path order, lazily; symlinks are skipped. A missing base
    /// yields nothing.
    fn walk_files(
        &self,
        base: &CanonicalPath,
    ) -> Result<Box<dyn Iterator<Item = Result<CanonicalPath>> + Send>>;

    /// [`Backend::walk_files`], each file with what
    /// [`Backend::open_listed`] needs to open it where it was found.
    fn walk_listed(&self, base: &CanonicalPath) -> Result<ListedFiles> {
        let files = self.walk_files(base)?;
        Ok(Box::new(files.map(|f| f.map(Listed::path))))
    }

    /// Makes the changes made so far as durable as the server's
    /// `--durability` asks, before they are answered. Memory: nothing
    /// outlives the process, so nothing to do.
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    /// Runs `changes`, a whole-workspace replacement (a restore, an
    /// import, emptying the root) whose every file is already staged as
    /// `intent` describes; the caller holds the workspace's write lock. A
    /// backend whose changes outlive a crash records `intent` first, so
    /// that a crash part-way is completed at the next start
    /// ([`intent::apply`]). Memory: nothing outlives a crash, so it just
    /// runs them.
    fn replace_whole<T>(&self, _intent: &Intent, changes: impl FnOnce() -> Result<T>) -> Result<T> {
        changes()
    }
}

/// Gives directories made by a whole-workspace replacement (a restore, an
/// import, their replay) their final bits, after their files are in: a
/// directory without write permission can only be filled before. `dirs`
/// is in path order (parents first); they are set deepest first, and only
/// where the bits differ.
pub fn finish_directories<'a, B: Backend>(
    backend: &B,
    dirs: impl DoubleEndedIterator<Item = (&'a CanonicalPath, Permissions)>,
) -> Result<()> {
    for (path, bits) in dirs.rev() {
        if backend
            .metadata(path)?
            .is_some_and(|m| m.permissions != bits)
        {
            backend.set_attributes(path, Some(bits), None)?;
        }
    }
    Ok(())
}

/// The preconditions of Move and Copy, shared by every backend. Given the
/// metadata of both ends (`None`: missing), returns `Ok(true)` when the
/// destination exists and must be replaced, `Ok(false)` when it is free.
///
/// - `src` missing: `FileNotFound`; `src` the root, `dst` equal to or
///   inside `src`, or `dst` an ancestor of `src`: `InvalidArgument`; `dst`
///   the root: `AlreadyExists`.
/// - `dst` exists and not `overwrite`: `AlreadyExists`.
/// - `dst` exists and `overwrite`: a file replaces a file, a directory
///   replaces a directory whole; a file over a directory is `IsADirectory`,
///   a directory over a file `NotADirectory`.
///
/// A missing parent of `dst` is the backend's to report (`FileNotFound`
/// without `create_parents`). A symlink source moves or copies as the link.
pub fn check_transfer(
    src: &CanonicalPath,
    src_meta: Option<&Metadata>,
    dst: &CanonicalPath,
    dst_meta: Option<&Metadata>,
    overwrite: bool,
) -> Result<bool> {
    use wsfs::{Error, FileKind};
    let Some(src_meta) = src_meta else {
        return Err(Error::FileNotFound {
            path: src.as_str().to_string(),
        });
    };
    if src.is_root() {
        return Err(Error::invalid_argument(
            "the workspace root cannot be moved or copied; name a file or directory inside it",
        ));
    }
    if dst.starts_with(src) {
        return Err(Error::invalid_argument(format!(
            "cannot move or copy '{src}' into itself ('{dst}')"
        )));
    }
    if dst.is_root() {
        return Err(Error::AlreadyExists {
            path: String::new(),
        });
    }
    if src.starts_with(dst) {
        return Err(Error::invalid_argument(format!(
            "cannot move or copy '{src}' over its own ancestor '{dst}'"
        )));
    }
    let Some(dst_meta) = dst_meta else {
        return Ok(false);
    };
    if !overwrite {
        return Err(Error::AlreadyExists {
            path: dst.as_str().to_string(),
        });
    }
    let src_is_dir = src_meta.kind == FileKind::Directory;
    let dst_is_dir = dst_meta.kind == FileKind::Directory;
    match (src_is_dir, dst_is_dir) {
        (false, true) => Err(Error::IsADirectory {
            path: dst.as_str().to_string(),
        }),
        (true, false) => Err(Error::NotADirectory {
            path: dst.as_str().to_string(),
        }),
        _ => Ok(true),
    }
}
