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
//! ([`open_beneath`]), which the kernel refuses on the same paths the walk
//! refuses (a symlink anywhere, a climb out of the root). Only when it
//! fails does the component walk run, and it decides the answer: every
//! error names the component that is a symlink or a file, exactly as
//! without the shortcut, and a kernel without `openat2` (before 5.6) just
//! takes the walk. The last component is touched as above.
//!
//! # Writes
//!
//! [`Backend::stage`] creates a named temporary file in the staging
//! directory, outside the root, so neither listings nor containers ever see
//! it; dropping it unlinks it. A commit renames it into place, which is
//! atomic and leaves readers of the old inode reading the old content. When
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
//! The counter starts at the wall clock in microseconds ([`version_floor`]),
//! not at 1: the workspace outlives the process, and a server restarted on
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

pub use super::TEMP_PREFIX;
use super::{check_name, check_transfer, Backend, CommitMode, Content, OpenFile, StagedFile};
use crate::durability::Durability;
use crate::journal::Intent;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags, ResolveFlags, StatxFlags};
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsfs::{CanonicalPath, Error, FileKind, Metadata, Permissions, Result};

/// Deepest directory tree that recursive operations descend (each level
/// holds a descriptor open).
const MAX_TREE_DEPTH: usize = 256;

/// How often an operation retries an entry that another process keeps
/// changing under it.
const RACE_RETRIES: usize = 4;

/// Opening a directory component: never through a symlink.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opening a file for reading: never through a symlink, and never blocking
/// on a pipe planted where a file was expected.
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Resolving a whole path in one call ([`open_beneath`]): never above the
/// root, never through a symlink of any kind.
const RESOLVE_FLAGS: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Creating a temporary file: a fresh name, never an existing file or link.
const CREATE_FLAGS: OFlags = OFlags::RDWR
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

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
}

/// The user and group that own everything a DIRECTORY session's service
/// creates, and the bits a new file or directory gets when its call names
/// none, so that a container running as that user owns its workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub file_permissions: Permissions,
    pub directory_permissions: Permissions,
}

impl Owner {
    /// An owner as a request names it: bits 0 mean the usual defaults;
    /// bits above `0o777` are `INVALID_ARGUMENT`.
    pub fn new(uid: u32, gid: u32, file_bits: u32, directory_bits: u32) -> Result<Owner> {
        let bits = |b: u32, default: Permissions| match b {
            0 => Ok(default),
            b => Permissions::new(b),
        };
        Ok(Owner {
            uid,
            gid,
            file_permissions: bits(file_bits, Permissions::FILE_DEFAULT)?,
            directory_permissions: bits(directory_bits, Permissions::DIRECTORY_DEFAULT)?,
        })
    }

    /// Gives the file or directory open as `fd` to the owner (by
    /// descriptor: whatever its name now leads to is not touched).
    fn claim(&self, fd: impl AsFd) -> std::result::Result<(), Errno> {
        rustix::fs::fchown(
            fd,
            Some(rustix::process::Uid::from_raw(self.uid)),
            Some(rustix::process::Gid::from_raw(self.gid)),
        )
    }

    /// Gives the entry `dir/name` to the owner without following it (a
    /// symlink the service made is itself the owner's).
    fn claim_at(&self, dir: impl AsFd, name: &CStr) -> std::result::Result<(), Errno> {
        rustix::fs::chownat(
            dir,
            name,
            Some(rustix::process::Uid::from_raw(self.uid)),
            Some(rustix::process::Gid::from_raw(self.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
    }
}

/// Gives `fd` to `owner`, if there is one.
fn claim(owner: Option<&Owner>, fd: impl AsFd) -> std::result::Result<(), Errno> {
    owner.map_or(Ok(()), |o| o.claim(fd))
}

#[derive(Debug, Clone, Copy)]
struct Known {
    version: u64,
    fingerprint: Fingerprint,
}

/// What an entry is, as far as wsfs cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    /// A pipe, socket or device.
    Special,
}

impl Kind {
    fn from_file_type(ft: FileType) -> Kind {
        match ft {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Special,
        }
    }

    fn file_kind(self) -> FileKind {
        match self {
            Kind::File | Kind::Special => FileKind::File,
            Kind::Dir => FileKind::Directory,
            Kind::Symlink => FileKind::Symlink,
        }
    }
}

type Timestamp = (i64, u32);

/// The identity and state of an entry; any change means a new version.
type Fingerprint = ((u32, u32), u64, u64, Timestamp, Timestamp, Kind);

/// The `statx` fields wsfs uses.
#[derive(Debug, Clone, Copy)]
struct Stat {
    kind: Kind,
    /// Permission bits.
    mode: u32,
    size: u64,
    dev: (u32, u32),
    ino: u64,
    mtime: Timestamp,
    ctime: Timestamp,
    btime: Option<Timestamp>,
}

impl Stat {
    fn from_statx(x: &rustix::fs::Statx) -> Stat {
        let ts = |t: &rustix::fs::StatxTimestamp| (t.tv_sec, t.tv_nsec);
        let mode = u32::from(x.stx_mode);
        Stat {
            kind: Kind::from_file_type(FileType::from_raw_mode(mode)),
            mode: mode & 0o7777,
            size: x.stx_size,
            dev: (x.stx_dev_major, x.stx_dev_minor),
            ino: x.stx_ino,
            mtime: ts(&x.stx_mtime),
            ctime: ts(&x.stx_ctime),
            btime: (x.stx_mask & StatxFlags::BTIME.bits() != 0).then(|| ts(&x.stx_btime)),
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        (
            self.dev, self.ino, self.size, self.mtime, self.ctime, self.kind,
        )
    }

    fn metadata(&self, path: &CanonicalPath, version: u64) -> Metadata {
        Metadata {
            path: path.clone(),
            kind: self.kind.file_kind(),
            size: if self.kind == Kind::Dir { 0 } else { self.size },
            created: system_time(self.btime.unwrap_or(self.mtime)),
            modified: system_time(self.mtime),
            version,
            permissions: self.permissions(),
        }
    }

    fn permissions(&self) -> Permissions {
        Permissions::masked(self.mode)
    }
}

fn system_time((sec, nsec): Timestamp) -> SystemTime {
    let t = if sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(sec.unsigned_abs()))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(sec.unsigned_abs()))
    };
    t.and_then(|t| t.checked_add(Duration::from_nanos(u64::from(nsec))))
        .unwrap_or(UNIX_EPOCH)
}

/// `t` as the kernel takes it, saturated to what a `time_t` holds.
fn timespec(t: SystemTime) -> rustix::fs::Timespec {
    let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(before) => {
            let d = before.duration();
            let sec = i64::try_from(d.as_secs()).map_or(i64::MIN, |s| -s);
            match d.subsec_nanos() {
                0 => (sec, 0),
                n => (sec.saturating_sub(1), 1_000_000_000 - n),
            }
        }
    };
    rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec.into(),
    }
}

/// Applies bits and/or a modification time to an open file or directory:
/// by descriptor, so nothing swapped in at its path is touched.
fn set_attributes_fd(
    fd: impl AsFd,
    permissions: Option<Permissions>,
    modified: Option<SystemTime>,
) -> std::result::Result<(), Errno> {
    if let Some(permissions) = permissions {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(permissions.bits()))?;
    }
    if let Some(modified) = modified {
        let omit = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        };
        let times = rustix::fs::Timestamps {
            last_access: omit,
            last_modification: timespec(modified),
        };
        rustix::fs::futimens(&fd, &times)?;
    }
    Ok(())
}

const STATX_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

/// Stats `name` in `dir` without following a symlink.
fn stat_at<P: rustix::path::Arg>(dir: impl AsFd, name: P) -> std::result::Result<Stat, Errno> {
    rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
        .map(|x| Stat::from_statx(&x))
}

fn stat_fd(fd: impl AsFd) -> std::result::Result<Stat, Errno> {
    rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, STATX_MASK).map(|x| Stat::from_statx(&x))
}

/// A fresh descriptor (with its own read position) for the same directory.
fn reopen(dir: impl AsFd) -> std::result::Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn io(e: Errno, path: &CanonicalPath) -> Error {
    Error::from_io(e.into(), path)
}

fn symlink_denied(path: &CanonicalPath, last: bool) -> Error {
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

fn not_regular(path: &CanonicalPath) -> Error {
    Error::PermissionDenied {
        path: path.as_str().to_string(),
        message: format!(
            "'{path}' is a pipe, socket or device; wsfs only reads and writes regular files"
        ),
    }
}

fn not_found(path: &CanonicalPath) -> Error {
    Error::FileNotFound {
        path: path.as_str().to_string(),
    }
}

fn kept_changing(path: &CanonicalPath) -> Error {
    Error::Unavailable {
        message: format!("'{path}' kept changing while wsfs worked on it; try again"),
    }
}

fn too_deep(path: &CanonicalPath) -> Error {
    Error::invalid_argument(format!(
        "the directory tree under '{path}' is deeper than {MAX_TREE_DEPTH} levels"
    ))
}

fn staging_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            Error::QuotaExceeded {
                message: format!("no space left for the data being written: {e}"),
            }
        }
        _ => Error::internal(format!("could not write the server's temporary file: {e}")),
    }
}

/// Refuses reserved and malformed segments. `CanonicalPath` already rules
/// out the latter; this is the last line before a name reaches a syscall.
fn check_path(path: &CanonicalPath) -> Result<()> {
    for seg in path.segments() {
        if seg == "." || seg == ".." || seg.contains('\0') {
            return Err(Error::InvalidPath {
                path: path.as_str().to_string(),
                message: format!("'{seg}' is not a valid path segment"),
            });
        }
    }
    check_name(path)
}

fn is_reserved(name: &CStr) -> bool {
    name.to_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

/// A name listings show: UTF-8 and not reserved.
fn visible_name(name: &CStr) -> Option<&str> {
    name.to_str().ok().filter(|n| !n.starts_with(TEMP_PREFIX))
}

fn cname(name: &str, path: &CanonicalPath) -> Result<CString> {
    CString::new(name).map_err(|_| Error::InvalidPath {
        path: path.as_str().to_string(),
        message: "path contains a NUL byte".into(),
    })
}

/// `child` for messages, also when its name is not UTF-8.
fn child_path(dir: &CanonicalPath, name: &CStr) -> CanonicalPath {
    dir.join(&name.to_string_lossy())
        .unwrap_or_else(|_| dir.clone())
}

/// The entries of a directory except `.` and `..`, with their `d_type`.
fn read_entries(dir: impl AsFd) -> std::result::Result<Vec<(CString, FileType)>, Errno> {
    let mut entries = Vec::new();
    let mut stream = Dir::read_from(dir)?;
    while let Some(entry) = stream.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            entries.push((name.to_owned(), entry.file_type()));
        }
    }
    Ok(entries)
}

/// The kind of an entry from its `d_type`, asking `statx` when the
/// filesystem does not say. `None` when it is gone.
fn entry_kind(dir: impl AsFd, name: &CStr, ft: FileType) -> Option<Kind> {
    match ft {
        FileType::Unknown => stat_at(dir, name).ok().map(|s| s.kind),
        ft => Some(Kind::from_file_type(ft)),
    }
}

/// Why a directory component could not be opened.
enum Blocked {
    Missing,
    Symlink,
    NotADirectory,
    Io(Errno),
}

fn classify(dir: impl AsFd, name: &str, e: Errno) -> Blocked {
    match e {
        Errno::NOENT => Blocked::Missing,
        Errno::LOOP => Blocked::Symlink,
        // O_DIRECTORY|O_NOFOLLOW on a symlink gives ENOTDIR: look closer.
        Errno::NOTDIR => match stat_at(dir, name) {
            Ok(s) if s.kind == Kind::Symlink => Blocked::Symlink,
            Ok(_) => Blocked::NotADirectory,
            Err(Errno::NOENT) => Blocked::Missing,
            Err(e) => Blocked::Io(e),
        },
        e => Blocked::Io(e),
    }
}

/// Opens a regular file for reading, refusing links, directories and
/// special files.
fn open_regular(dir: impl AsFd, name: &CStr, path: &CanonicalPath) -> Result<(File, Stat)> {
    let check = |st: &Stat| match st.kind {
        Kind::File => Ok(()),
        Kind::Dir => Err(Error::IsADirectory {
            path: path.as_str().to_string(),
        }),
        Kind::Symlink => Err(symlink_denied(path, true)),
        Kind::Special => Err(not_regular(path)),
    };
    // Checked before opening so that a device is never opened; checked
    // again on the descriptor in case the entry changed in between.
    check(&stat_at(dir.as_fd(), name).map_err(|e| io(e, path))?)?;
    let fd = rustix::fs::openat(dir, name, READ_FLAGS, Mode::empty()).map_err(|e| match e {
        Errno::LOOP => symlink_denied(path, true),
        e => io(e, path),
    })?;
    let st = stat_fd(&fd).map_err(|e| io(e, path))?;
    check(&st)?;
    Ok((File::from(fd), st))
}

/// Opens the non-root `path` beneath `root` in one call, with `flags`;
/// `None` on any failure, for the component walk to answer (and name the
/// culprit).
fn open_beneath(root: &OwnedFd, path: &CanonicalPath, flags: OFlags) -> Option<OwnedFd> {
    rustix::fs::openat2(root, path.as_str(), flags, Mode::empty(), RESOLVE_FLAGS).ok()
}

/// The next run of data in `f` at or after `offset` and before `end`, as
/// `(start, stop)`; `None` when only a hole is left. A filesystem that
/// cannot tell holes (no `SEEK_DATA`) reports the rest as data. Moves the
/// descriptor's offset: callers read with explicit offsets.
pub(crate) fn next_data(f: &File, offset: u64, end: u64) -> std::io::Result<Option<(u64, u64)>> {
    use rustix::fs::SeekFrom;
    if offset >= end {
        return Ok(None);
    }
    let start = match rustix::fs::seek(f, SeekFrom::Data(offset)) {
        Ok(start) => start,
        Err(Errno::NXIO) => return Ok(None),
        Err(Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) => return Ok(Some((offset, end))),
        Err(e) => return Err(e.into()),
    };
    if start >= end {
        return Ok(None);
    }
    let stop = match rustix::fs::seek(f, SeekFrom::Hole(start)) {
        Ok(stop) => stop.clamp(start, end),
        // Truncated since, or holes unknown: the rest is read as data (a
        // short read ends it).
        Err(_) => end,
    };
    Ok(Some((start, stop)))
}

/// Copies all of `from` to `to` starting at `to_offset`, keeping holes:
/// only `from`'s data runs are copied, and `to` is then extended to the
/// full length, so a sparse file costs its data, not its apparent size.
/// Returns the bytes the copy spans (its apparent size).
pub(crate) fn copy_data(from: &File, to: &File, to_offset: u64) -> std::io::Result<u64> {
    let size = from.metadata()?.len();
    let (mut offset, mut len) = (0, size);
    let mut buf = Vec::new();
    while let Some((start, stop)) = next_data(from, offset, size)? {
        let copied = copy_range(from, to, start, stop, to_offset, &mut buf)?;
        offset = start + copied;
        if offset < stop {
            // Truncated under the copy: what was read is what there is.
            len = offset;
            break;
        }
    }
    to.set_len(to_offset + len)?;
    Ok(len)
}

/// Copies `from[start..stop]` to `to` at `to_offset + start`; returns the
/// bytes copied (fewer when `from` ends early).
fn copy_range(
    from: &File,
    to: &File,
    start: u64,
    stop: u64,
    to_offset: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<u64> {
    let (mut in_off, mut out_off) = (start, to_offset + start);
    while in_off < stop {
        let want = usize::try_from(stop - in_off)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        match rustix::fs::copy_file_range(from, Some(&mut in_off), to, Some(&mut out_off), want) {
            Ok(0) => return Ok(in_off - start),
            Ok(_) | Err(Errno::INTR) => {}
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP | Errno::PERM) => {
                break
            }
            Err(e) => return Err(e.into()),
        }
    }
    if buf.is_empty() {
        buf.resize(64 * 1024, 0);
    }
    while in_off < stop {
        let want = usize::try_from(stop - in_off)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = from.read_at(&mut buf[..want], in_off)?;
        if n == 0 {
            break;
        }
        to.write_all_at(&buf[..n], out_off)?;
        in_off += n as u64;
        out_off += n as u64;
    }
    Ok(in_off - start)
}

/// `renameat2(RENAME_NOREPLACE)`, checking by hand on filesystems that do
/// not support the flag.
fn rename_noreplace(
    from: BorrowedFd,
    from_name: &CStr,
    to: BorrowedFd,
    to_name: &CStr,
) -> std::result::Result<(), Errno> {
    match rustix::fs::renameat_with(from, from_name, to, to_name, RenameFlags::NOREPLACE) {
        Err(Errno::INVAL | Errno::NOSYS) => match stat_at(to, to_name) {
            Ok(_) => Err(Errno::EXIST),
            Err(Errno::NOENT) => rustix::fs::renameat(from, from_name, to, to_name),
            Err(e) => Err(e),
        },
        r => r,
    }
}

/// The target of the symlink `dir/name`. `EINVAL` means the entry is no
/// longer a link: another process swapped it since it was looked at.
fn read_link(dir: impl AsFd, name: &CStr, path: &CanonicalPath) -> Result<CString> {
    rustix::fs::readlinkat(dir, name, Vec::new()).map_err(|e| match e {
        Errno::INVAL => kept_changing(path),
        e => io(e, path),
    })
}

/// Whether a directory holds any entry a listing would count.
fn has_entries(dir: impl AsFd, path: &CanonicalPath) -> Result<bool> {
    let entries = read_entries(dir).map_err(|e| io(e, path))?;
    Ok(entries.iter().any(|(name, _)| !is_reserved(name)))
}

/// Removes everything inside `dir`; returns how many entries went
/// (temporary files are removed but not counted).
fn remove_contents(dir: &OwnedFd, path: &CanonicalPath, depth: usize) -> Result<u64> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    for (name, _) in read_entries(dir).map_err(|e| io(e, path))? {
        count += remove_entry(dir, &name, &child_path(path, &name), depth)?;
    }
    Ok(count)
}

/// Removes one entry of `dir`, whatever it is, a directory with everything
/// in it; a symlink is removed itself, never followed. Returns how many
/// entries went; 0 when it was already gone.
fn remove_entry(dir: &OwnedFd, name: &CStr, path: &CanonicalPath, depth: usize) -> Result<u64> {
    let own = u64::from(!is_reserved(name));
    let mut count = 0;
    for _ in 0..RACE_RETRIES {
        let st = match stat_at(dir, name) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(count),
            Err(e) => return Err(io(e, path)),
        };
        if st.kind != Kind::Dir {
            match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) => return Ok(count + own),
                Err(Errno::NOENT) => return Ok(count),
                Err(Errno::ISDIR | Errno::PERM) => continue,
                Err(e) => return Err(io(e, path)),
            }
        }
        let sub = match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(count),
            // Swapped for something else since the stat: look again.
            Err(Errno::LOOP | Errno::NOTDIR) => continue,
            Err(e) => return Err(io(e, path)),
        };
        count += remove_contents(&sub, path, depth + 1)?;
        drop(sub);
        match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
            Ok(()) => return Ok(count + own),
            Err(Errno::NOENT) => return Ok(count),
            // Something was added, or the entry was swapped: go again.
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => continue,
            Err(e) => return Err(io(e, path)),
        }
    }
    Err(kept_changing(path))
}

/// How many visible entries a directory holds, all levels down.
fn count_tree(dir: &OwnedFd, path: &CanonicalPath, depth: usize) -> Result<u64> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    for (name, ft) in read_entries(dir).map_err(|e| io(e, path))? {
        if is_reserved(&name) {
            continue;
        }
        count += 1;
        if entry_kind(dir, &name, ft) == Some(Kind::Dir) {
            if let Ok(sub) = rustix::fs::openat(dir, &name, DIR_FLAGS, Mode::empty()) {
                count += count_tree(&sub, &child_path(path, &name), depth + 1)?;
            }
        }
    }
    Ok(count)
}

/// Copies the visible contents of `src` into the empty directory `dst`:
/// files, directories and symlinks (as links). Returns how many entries
/// were created.
fn copy_tree(
    src: &OwnedFd,
    dst: &OwnedFd,
    path: &CanonicalPath,
    depth: usize,
    owner: Option<&Owner>,
) -> Result<u64> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    let mut count = 0;
    for (name, _) in read_entries(src).map_err(|e| io(e, path))? {
        if visible_name(&name).is_none() {
            continue;
        }
        let child = child_path(path, &name);
        let st = match stat_at(src, &name) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io(e, &child)),
        };
        count += match st.kind {
            Kind::File => {
                let (from, st) = open_regular(src, &name, &child)?;
                let to = rustix::fs::openat(
                    dst,
                    &name,
                    CREATE_FLAGS,
                    Mode::from_raw_mode(st.mode & 0o777),
                )
                .map(File::from)
                .map_err(|e| io(e, &child))?;
                claim(owner, &to).map_err(|e| io(e, &child))?;
                copy_data(&from, &to, 0).map_err(|e| Error::from_io(e, &child))?;
                // The umask trimmed the bits it was created with.
                set_attributes_fd(&to, Some(st.permissions()), None).map_err(|e| io(e, &child))?;
                1
            }
            Kind::Dir => {
                let from = rustix::fs::openat(src, &name, DIR_FLAGS, Mode::empty()).map_err(
                    |e| match e {
                        Errno::LOOP | Errno::NOTDIR => symlink_denied(&child, true),
                        e => io(e, &child),
                    },
                )?;
                rustix::fs::mkdirat(dst, &name, Mode::RWXU).map_err(|e| io(e, &child))?;
                let to = rustix::fs::openat(dst, &name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| io(e, &child))?;
                claim(owner, &to).map_err(|e| io(e, &child))?;
                let inner = copy_tree(&from, &to, &child, depth + 1, owner)?;
                // Permissions last, so a read-only source directory can be filled.
                rustix::fs::fchmod(&to, Mode::from_raw_mode(st.mode & 0o777))
                    .map_err(|e| io(e, &child))?;
                inner + 1
            }
            Kind::Symlink => {
                let target = read_link(src, &name, &child)?;
                rustix::fs::symlinkat(&target, dst, &name).map_err(|e| io(e, &child))?;
                if let Some(owner) = owner {
                    owner.claim_at(dst, &name).map_err(|e| io(e, &child))?;
                }
                1
            }
            Kind::Special => 0,
        };
    }
    Ok(count)
}

/// A temporary entry owned by the server, removed on drop unless kept.
struct TempEntry {
    dir: Arc<OwnedFd>,
    name: CString,
    is_dir: bool,
    armed: bool,
}

impl TempEntry {
    fn new_name() -> CString {
        let name = format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple());
        CString::new(name).unwrap_or_default()
    }

    /// Takes charge of the existing entry `dir/name`.
    fn adopt(dir: &Arc<OwnedFd>, name: CString, is_dir: bool) -> TempEntry {
        TempEntry {
            dir: dir.clone(),
            name,
            is_dir,
            armed: true,
        }
    }

    /// Creates an empty temporary file in `dir`.
    fn file(dir: &Arc<OwnedFd>) -> std::result::Result<(TempEntry, File), Errno> {
        loop {
            let name = Self::new_name();
            match rustix::fs::openat(dir.as_fd(), &name, CREATE_FLAGS, Mode::from_raw_mode(0o666)) {
                Ok(fd) => return Ok((TempEntry::adopt(dir, name, false), File::from(fd))),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates an empty temporary directory in `dir`.
    fn dir(dir: &Arc<OwnedFd>) -> std::result::Result<(TempEntry, OwnedFd), Errno> {
        loop {
            let name = Self::new_name();
            match rustix::fs::mkdirat(dir.as_fd(), &name, Mode::RWXU) {
                Ok(()) => {
                    let entry = TempEntry::adopt(dir, name, true);
                    let fd =
                        rustix::fs::openat(dir.as_fd(), &entry.name, DIR_FLAGS, Mode::empty())?;
                    return Ok((entry, fd));
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The entry has been renamed into place: nothing to clean up.
    fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for TempEntry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let result = if self.is_dir {
            remove_entry(&self.dir, &self.name, &CanonicalPath::root(), 0).map(drop)
        } else {
            rustix::fs::unlinkat(self.dir.as_fd(), &self.name, AtFlags::empty())
                .or_else(|e| if e == Errno::NOENT { Ok(()) } else { Err(e) })
                .map_err(|e| Error::internal(e.to_string()))
        };
        if let Err(e) = result {
            tracing::warn!(name = ?self.name, error = %e, "could not remove a temporary entry");
        }
    }
}

/// Bytes being written, in a temporary file in the staging directory.
pub struct DirectoryStaged {
    /// Open until [`StagedFile::finish`].
    file: Option<File>,
    temp: TempEntry,
    len: u64,
}

impl DirectoryStaged {
    /// The staged file, reopened by its name in the staging directory (a
    /// directory only the server writes) when `finish` closed it.
    fn into_parts(self) -> Result<(File, TempEntry)> {
        let file = match self.file {
            Some(file) => file,
            None => rustix::fs::openat(
                self.temp.dir.as_fd(),
                &self.temp.name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map(File::from)
            .map_err(|e| staging_error(e.into()))?,
        };
        Ok((file, self.temp))
    }
}

impl DirectoryStaged {
    /// Appends `len` zero bytes as a hole: they cost no disk.
    pub fn write_hole(&mut self, len: u64) -> Result<()> {
        use std::io::Seek;
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::internal("a finished staged file was written to"))?;
        let end = self.len + len;
        // The length first, so the staged file holds the zeros even when
        // nothing follows them.
        file.set_len(end).map_err(staging_error)?;
        file.seek(std::io::SeekFrom::Start(end))
            .map_err(staging_error)?;
        self.len = end;
        Ok(())
    }
}

impl StagedFile for DirectoryStaged {
    fn write_chunk(&mut self, chunk: &[u8]) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::internal("a finished staged file was written to"))?;
        file.write_all(chunk).map_err(staging_error)?;
        self.len += chunk.len() as u64;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn finish(&mut self) -> Result<()> {
        self.file = None;
        Ok(())
    }

    fn journal_name(&self) -> Option<String> {
        self.temp.name.to_str().ok().map(str::to_string)
    }
}

/// How [`DirectoryBackend::place`] treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replace {
    /// Fail with `EEXIST`.
    No,
    /// Atomically replace a file (rename does).
    File,
    /// Replace a directory whole: move it aside, move in, delete it.
    Dir,
    /// Swap atomically with an existing file, which takes the
    /// temporary's name: the caller removes it when it likes (freeing a
    /// file's blocks can cost milliseconds, which need not be spent while
    /// the workspace waits).
    FileAside,
}

fn open_trusted_dir(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        let shown = path.display().to_string();
        match e {
            Errno::NOENT => Error::FileNotFound { path: shown },
            Errno::NOTDIR => Error::NotADirectory { path: shown },
            e => Error::internal(format!("cannot open directory '{shown}': {e}")),
        }
    })
}

/// Where a freshly opened backend starts its version counter: microseconds
/// since the Unix epoch. Every version an earlier process gave out is
/// below it, unless that process gave out more than one per microsecond
/// of its life or the clock has gone back; versions stay below 2^53, so
/// JSON clients read them exactly.
fn version_floor() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
        .max(1)
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
        })
    }

    /// The same backend, giving everything it creates to `owner`.
    pub fn with_owner(mut self, owner: Option<Owner>) -> Self {
        self.owner = owner;
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

    fn versions(&self) -> MutexGuard<'_, BTreeMap<String, Known>> {
        self.versions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `probe` (which stats, and perhaps opens, `path`) and returns its
    /// result with the path's version: the remembered one when the
    /// fingerprint is unchanged, the next counter value otherwise. When a
    /// version was handed out for the path while the probe ran, the probe
    /// may have seen the state before that change, so it runs again.
    fn observe<T>(
        &self,
        path: &CanonicalPath,
        mut probe: impl FnMut() -> Result<Option<(T, Stat)>>,
    ) -> Result<Option<(T, Stat, u64)>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = self.next_version.load(Ordering::SeqCst);
            let Some((value, st)) = probe()? else {
                return Ok(None);
            };
            let fingerprint = st.fingerprint();
            let mut versions = self.versions();
            match versions.get(path.as_str()) {
                Some(known) if known.fingerprint == fingerprint => {
                    return Ok(Some((value, st, known.version)))
                }
                Some(known) if known.version >= started && attempt < RACE_RETRIES => continue,
                _ => {
                    let version = self.next_version.fetch_add(1, Ordering::SeqCst);
                    versions.insert(
                        path.as_str().to_string(),
                        Known {
                            version,
                            fingerprint,
                        },
                    );
                    return Ok(Some((value, st, version)));
                }
            }
        }
    }

    /// Metadata of `name` in `dir`; `None` when it is not there.
    fn observe_at(
        &self,
        dir: impl AsFd,
        name: &str,
        path: &CanonicalPath,
    ) -> Result<Option<Metadata>> {
        let name = cname(name, path)?;
        let found = self.observe(path, || match stat_at(dir.as_fd(), &name) {
            Ok(st) => Ok(Some(((), st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io(e, path)),
        })?;
        Ok(found.map(|((), st, version)| st.metadata(path, version)))
    }

    /// Remembers a change we made: a fresh version for what is at `path`.
    fn record(&self, dir: impl AsFd, name: &CStr, path: &CanonicalPath) -> Result<Metadata> {
        let st = stat_at(dir, name).map_err(|e| io(e, path))?;
        Ok(self.record_stat(&st, path))
    }

    /// [`Self::record`] of an entry already stated.
    fn record_stat(&self, st: &Stat, path: &CanonicalPath) -> Metadata {
        let version = self.next_version.fetch_add(1, Ordering::SeqCst);
        self.versions().insert(
            path.as_str().to_string(),
            Known {
                version,
                fingerprint: st.fingerprint(),
            },
        );
        st.metadata(path, version)
    }

    /// Forgets `path` and everything beneath it (the root itself is kept).
    fn forget(&self, path: &CanonicalPath) {
        let prefix = if path.is_root() {
            String::new()
        } else {
            format!("{}/", path.as_str())
        };
        let mut versions = self.versions();
        if !path.is_root() {
            versions.remove(path.as_str());
        }
        let below: Vec<String> = versions
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .filter(|k| !k.is_empty())
            .cloned()
            .collect();
        for key in below {
            versions.remove(&key);
        }
    }

    /// Opens the directory at `path` beneath the root, never through a
    /// symlink. `Ok(None)` when a component is missing; a component that is
    /// a symlink is `PermissionDenied`, a file `NotADirectory`.
    fn open_dir(&self, path: &CanonicalPath) -> Result<Option<OwnedFd>> {
        if !path.is_root() {
            if let Some(fd) = open_beneath(&self.root, path, DIR_FLAGS) {
                return Ok(Some(fd));
            }
        }
        let mut fd = reopen(&self.root).map_err(|e| io(e, &CanonicalPath::root()))?;
        let mut walked = CanonicalPath::root();
        let depth = path.depth();
        for (i, seg) in path.segments().enumerate() {
            walked = walked.join(seg)?;
            match rustix::fs::openat(&fd, seg, DIR_FLAGS, Mode::empty()) {
                Ok(next) => fd = next,
                Err(e) => {
                    return match classify(&fd, seg, e) {
                        Blocked::Missing => Ok(None),
                        Blocked::Symlink => Err(symlink_denied(&walked, i + 1 == depth)),
                        Blocked::NotADirectory => Err(Error::NotADirectory {
                            path: walked.as_str().to_string(),
                        }),
                        Blocked::Io(e) => Err(io(e, &walked)),
                    }
                }
            }
        }
        Ok(Some(fd))
    }

    /// Like [`Self::open_dir`], creating missing directories on the way.
    fn make_dirs(&self, path: &CanonicalPath) -> Result<OwnedFd> {
        let mut fd = reopen(&self.root).map_err(|e| io(e, &CanonicalPath::root()))?;
        let mut walked = CanonicalPath::root();
        let depth = path.depth();
        for (i, seg) in path.segments().enumerate() {
            walked = walked.join(seg)?;
            let mut created = false;
            let mut attempts = 0;
            let next = loop {
                attempts += 1;
                match rustix::fs::openat(&fd, seg, DIR_FLAGS, Mode::empty()) {
                    Ok(next) => break next,
                    Err(e) => match classify(&fd, seg, e) {
                        Blocked::Missing if attempts < RACE_RETRIES => {
                            match rustix::fs::mkdirat(&fd, seg, Mode::from_raw_mode(0o777)) {
                                Ok(()) => created = true,
                                Err(Errno::EXIST) => {}
                                Err(e) => return Err(io(e, &walked)),
                            }
                        }
                        Blocked::Missing => return Err(kept_changing(&walked)),
                        Blocked::Symlink => return Err(symlink_denied(&walked, i + 1 == depth)),
                        Blocked::NotADirectory => {
                            return Err(Error::NotADirectory {
                                path: walked.as_str().to_string(),
                            })
                        }
                        Blocked::Io(e) => return Err(io(e, &walked)),
                    },
                }
            };
            if created {
                // Not left to the server's umask.
                claim(self.owner.as_ref(), &next).map_err(|e| io(e, &walked))?;
                set_attributes_fd(&next, Some(self.default_directory_permissions()), None)
                    .map_err(|e| io(e, &walked))?;
                let name = cname(seg, &walked)?;
                self.record(&fd, &name, &walked)?;
            }
            fd = next;
        }
        Ok(fd)
    }

    /// Opens the regular file at the non-root `path` for reading (see
    /// [`open_regular`]).
    fn open_file(&self, path: &CanonicalPath) -> Result<(File, Stat)> {
        let (dir, name) = self.parent_dir(path, false, path)?;
        open_regular(&dir, &cname(name, path)?, path)
    }

    /// The parent directory of a non-root `path` and its last name. A
    /// missing parent is `FileNotFound` naming `missing`.
    fn parent_dir<'p>(
        &self,
        path: &'p CanonicalPath,
        create: bool,
        missing: &CanonicalPath,
    ) -> Result<(OwnedFd, &'p str)> {
        let (Some(parent), Some(name)) = (path.parent(), path.name()) else {
            return Err(Error::internal("the workspace root has no parent"));
        };
        let dir = if create {
            self.make_dirs(&parent)?
        } else {
            self.open_dir(&parent)?.ok_or_else(|| not_found(missing))?
        };
        Ok((dir, name))
    }

    /// Where temporary entries for `dest` are made: the staging directory,
    /// or the destination directory when staging is on another filesystem.
    fn temp_home(&self, dest: &Arc<OwnedFd>) -> (Arc<OwnedFd>, bool) {
        if self.cross_device.load(Ordering::Relaxed) {
            (dest.clone(), false)
        } else {
            (self.staging.clone(), true)
        }
    }

    /// Moves `from/from_name` to `to/to_name`, treating an existing
    /// destination as `replace` says. True when it was swapped
    /// ([`Replace::FileAside`]): `from/from_name` now holds the old entry.
    fn place(
        &self,
        from: BorrowedFd,
        from_name: &CStr,
        to: &Arc<OwnedFd>,
        to_name: &CStr,
        replace: Replace,
    ) -> std::result::Result<bool, Errno> {
        match replace {
            Replace::No => rename_noreplace(from, from_name, to.as_fd(), to_name).map(|()| false),
            Replace::File => {
                rustix::fs::renameat(from, from_name, to.as_fd(), to_name).map(|()| false)
            }
            Replace::FileAside => {
                match rustix::fs::renameat_with(
                    from,
                    from_name,
                    to.as_fd(),
                    to_name,
                    RenameFlags::EXCHANGE,
                ) {
                    Ok(()) => Ok(true),
                    // Nothing there to swap with.
                    Err(Errno::NOENT) => {
                        rename_noreplace(from, from_name, to.as_fd(), to_name).map(|()| false)
                    }
                    // No exchange on this filesystem: a plain replace.
                    Err(Errno::INVAL | Errno::NOSYS) => {
                        rustix::fs::renameat(from, from_name, to.as_fd(), to_name).map(|()| false)
                    }
                    Err(e) => Err(e),
                }
            }
            Replace::Dir => {
                let aside = self.move_aside(to, to_name)?;
                match rename_noreplace(from, from_name, to.as_fd(), to_name) {
                    // Dropping `aside` deletes the old directory.
                    Ok(()) => Ok(false),
                    Err(e) => {
                        if let Some(aside) = aside {
                            let restored = rename_noreplace(
                                aside.dir.as_fd(),
                                &aside.name,
                                to.as_fd(),
                                to_name,
                            );
                            if restored.is_err() {
                                tracing::warn!(name = ?aside.name, "could not put a replaced directory back; it is kept aside");
                            }
                            aside.keep();
                        }
                        Err(e)
                    }
                }
            }
        }
    }

    /// Renames `to/name` to a temporary name, in the staging directory when
    /// possible; `None` when nothing is there.
    fn move_aside(
        &self,
        to: &Arc<OwnedFd>,
        name: &CStr,
    ) -> std::result::Result<Option<TempEntry>, Errno> {
        for _ in 0..2 {
            let (home, _) = self.temp_home(to);
            let aside = TempEntry::new_name();
            match rename_noreplace(to.as_fd(), name, home.as_fd(), &aside) {
                Ok(()) => return Ok(Some(TempEntry::adopt(&home, aside, true))),
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::XDEV) if !self.cross_device.swap(true, Ordering::Relaxed) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Errno::XDEV)
    }

    /// Builds a new entry with `build` in a temporary place, then moves it
    /// to `dir/name`. `build` gets the temporary directory and whether it is
    /// the staging directory; it runs again in the destination directory
    /// when the staging directory turns out to be on another filesystem.
    /// With [`Replace::FileAside`], returns the old file it displaced.
    fn install(
        &self,
        dir: &Arc<OwnedFd>,
        name: &CStr,
        path: &CanonicalPath,
        replace: Replace,
        mut build: impl FnMut(&Arc<OwnedFd>, bool) -> Result<TempEntry>,
    ) -> Result<Option<TempEntry>> {
        loop {
            let (home, in_staging) = self.temp_home(dir);
            let temp = build(&home, in_staging)?;
            match self.place(temp.dir.as_fd(), &temp.name, dir, name, replace) {
                Ok(false) => {
                    temp.keep();
                    return Ok(None);
                }
                Ok(true) => {
                    // `temp` now names the old entry. Only a file may be
                    // displaced; a directory swapped in meanwhile goes back.
                    return match stat_at(temp.dir.as_fd(), &temp.name) {
                        Ok(st) if st.kind != Kind::Dir => Ok(Some(temp)),
                        _ => {
                            let back = rustix::fs::renameat_with(
                                temp.dir.as_fd(),
                                &temp.name,
                                dir.as_fd(),
                                name,
                                RenameFlags::EXCHANGE,
                            );
                            if back.is_err() {
                                tracing::warn!(name = ?temp.name, "could not put a displaced directory back; it is kept aside");
                                temp.keep();
                            }
                            Err(Error::IsADirectory {
                                path: path.as_str().to_string(),
                            })
                        }
                    };
                }
                Err(Errno::XDEV) if in_staging => self.cross_device.store(true, Ordering::Relaxed),
                Err(Errno::EXIST | Errno::NOTEMPTY) => {
                    return Err(Error::AlreadyExists {
                        path: path.as_str().to_string(),
                    })
                }
                Err(e) => return Err(io(e, path)),
            }
        }
    }

    /// Both ends of a move or copy, checked (`check_transfer`) and resolved
    /// beneath the root: the source's parent and name, and the
    /// destination's parent (made when `create_parents`) and name.
    fn transfer_plan(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<TransferPlan> {
        check_path(src)?;
        check_path(dst)?;
        let src_meta = self.metadata(src)?;
        let dst_meta = self.metadata(dst)?;
        let replace = check_transfer(src, src_meta.as_ref(), dst, dst_meta.as_ref(), overwrite)?;
        let src_meta = src_meta.ok_or_else(|| not_found(src))?;
        let replace = match (replace, src_meta.kind) {
            (false, _) => Replace::No,
            (true, FileKind::Directory) => Replace::Dir,
            (true, _) => Replace::File,
        };
        let (src_dir, src_name) = self.parent_dir(src, false, src)?;
        let src_name = cname(src_name, src)?;
        let dst_parent = dst.parent().unwrap_or_default();
        let (dst_dir, dst_name) = self.parent_dir(dst, create_parents, &dst_parent)?;
        let dst_name = cname(dst_name, dst)?;
        Ok(TransferPlan {
            src_meta,
            replace,
            src_dir,
            src_name,
            dst_dir: Arc::new(dst_dir),
            dst_name,
        })
    }
}

/// What `transfer_plan` resolved for a move or copy.
struct TransferPlan {
    src_meta: Metadata,
    replace: Replace,
    src_dir: OwnedFd,
    src_name: CString,
    dst_dir: Arc<OwnedFd>,
    dst_name: CString,
}

impl Backend for DirectoryBackend {
    type Staged = DirectoryStaged;

    const BLOCKING: bool = true;

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

    fn list(&self, dir: &CanonicalPath, depth: u32, max: usize) -> Result<(Vec<Metadata>, bool)> {
        check_path(dir)?;
        let fd = self.open_dir(dir)?.ok_or_else(|| not_found(dir))?;
        let mut out = Vec::new();
        let truncated = depth > 0 && self.list_into(&fd, dir, depth, max, &mut out, 0)?;
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
        check_path(path)?;
        if path.is_root() {
            return Err(Error::IsADirectory {
                path: String::new(),
            });
        }
        self.open_file(path).map(|(file, _)| Content::Disk(file))
    }

    fn stage(&self) -> Result<DirectoryStaged> {
        let (temp, file) = TempEntry::file(&self.staging).map_err(|e| staging_error(e.into()))?;
        Ok(DirectoryStaged {
            file: Some(file),
            temp,
            len: 0,
        })
    }

    fn commit(
        &self,
        staged: DirectoryStaged,
        path: &CanonicalPath,
        mode: CommitMode,
    ) -> Result<Metadata> {
        self.commit_with(staged, path, mode, Replace::File)
            .map(|(meta, _)| meta)
    }

    fn settle(&self) -> Result<()> {
        self.durability().settle_fs(&self.root)
    }

    fn begin_intent(&self, intent: &Intent) -> Result<()> {
        self.write_intent(intent)
    }

    fn end_intent(&self) -> Result<()> {
        self.clear_intent()
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
            let removed = remove_contents(&root, path, 0);
            self.forget(path);
            return removed;
        }
        let (dir, name) = self.parent_dir(path, false, path)?;
        let name = cname(name, path)?;
        let st = stat_at(&dir, &name).map_err(|e| io(e, path))?;
        let removed = match (st.kind, recursive) {
            (Kind::Dir, true) => remove_entry(&dir, &name, path, 0),
            (Kind::Dir, false) => rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR)
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
                    let name = TempEntry::new_name();
                    rustix::fs::symlinkat(&target, home.as_fd(), &name).map_err(|e| io(e, dst))?;
                    let temp = TempEntry::adopt(home, name, false);
                    if let Some(owner) = &self.owner {
                        owner
                            .claim_at(home.as_fd(), &temp.name)
                            .map_err(|e| io(e, dst))?;
                    }
                    Ok(temp)
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

impl DirectoryBackend {
    /// Like [`Backend::commit`], but an existing file is swapped out
    /// atomically rather than unlinked: it is returned, kept in the staging
    /// area until the [`Displaced`] is dropped. A restore drops them after
    /// it let go of the workspace, so that freeing the old files' blocks
    /// does not hold it up.
    pub fn commit_aside(
        &self,
        staged: DirectoryStaged,
        path: &CanonicalPath,
        mode: CommitMode,
    ) -> Result<(Metadata, Option<Displaced>)> {
        self.commit_with(staged, path, mode, Replace::FileAside)
    }

    fn commit_with(
        &self,
        staged: DirectoryStaged,
        path: &CanonicalPath,
        mode: CommitMode,
        replace: Replace,
    ) -> Result<(Metadata, Option<Displaced>)> {
        check_path(path)?;
        if path.is_root() {
            return Err(Error::IsADirectory {
                path: String::new(),
            });
        }
        let parent = path.parent().unwrap_or_default();
        let (dir, name) = self.parent_dir(path, mode.create_parents, &parent)?;
        let dir = Arc::new(dir);
        let name = cname(name, path)?;
        let existing = match stat_at(dir.as_fd(), &name) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(io(e, path)),
        };
        match existing.map(|st| st.kind) {
            Some(Kind::Dir) => {
                return Err(Error::IsADirectory {
                    path: path.as_str().to_string(),
                })
            }
            Some(Kind::Symlink) => return Err(symlink_denied(path, true)),
            Some(Kind::Special) => return Err(not_regular(path)),
            Some(Kind::File) | None => {}
        }
        let current = match (mode.append, existing) {
            (true, Some(_)) => match open_regular(dir.as_fd(), &name, path) {
                Ok((file, _)) => Some(file),
                Err(Error::FileNotFound { .. }) => None,
                Err(e) => return Err(e),
            },
            _ => None,
        };
        let perms = match (mode.permissions, &self.owner) {
            (None, Some(owner)) if existing.is_none() => owner.file_permissions,
            _ => mode.permissions_over(existing.map(|st| st.permissions())),
        };
        let (staged_file, temp) = staged.into_parts()?;
        let mut staged_temp = Some(temp);
        let displaced = self.install(&dir, &name, path, replace, |home, in_staging| {
            let fail = |e: std::io::Error| staging_error(e);
            // The staged file itself moves into place when it can.
            let (temp, file) = match (current.is_none() && in_staging, staged_temp.take()) {
                (true, Some(temp)) => (temp, None),
                _ => {
                    let (temp, file) = TempEntry::file(home).map_err(|e| fail(e.into()))?;
                    let mut offset = 0;
                    if let Some(current) = &current {
                        offset =
                            copy_data(current, &file, 0).map_err(|e| Error::from_io(e, path))?;
                    }
                    copy_data(&staged_file, &file, offset).map_err(fail)?;
                    (temp, Some(file))
                }
            };
            let target = file.as_ref().unwrap_or(&staged_file);
            // Before it is renamed into place: it never appears there with
            // the server's owner.
            claim(self.owner.as_ref(), target).map_err(|e| fail(e.into()))?;
            // The staged file was made with the umask's bits; the new
            // file gets the asked, kept or default ones.
            set_attributes_fd(target, Some(perms), mode.modified).map_err(|e| fail(e.into()))?;
            self.durability().settle_file(target)?;
            Ok(temp)
        })?;
        let meta = self.record(dir.as_fd(), &name, path)?;
        Ok((meta, displaced.map(|entry| Displaced { _entry: entry })))
    }
}

/// An old file that [`DirectoryBackend::commit_aside`] replaced, under a
/// temporary name outside the workspace's listings; dropping it removes it.
pub struct Displaced {
    _entry: TempEntry,
}

impl DirectoryBackend {
    /// Appends the entries beneath `dir` to `out` in path order, `levels`
    /// deep; true when it stopped at `max` with more left.
    fn list_into(
        &self,
        dir: &OwnedFd,
        path: &CanonicalPath,
        levels: u32,
        max: usize,
        out: &mut Vec<Metadata>,
        depth: usize,
    ) -> Result<bool> {
        let mut items = Vec::new();
        for (raw, ft) in read_entries(dir).map_err(|e| io(e, path))? {
            let Some(name) = visible_name(&raw) else {
                continue;
            };
            let descend = levels > 1
                && depth + 1 < MAX_TREE_DEPTH
                && entry_kind(dir, &raw, ft) == Some(Kind::Dir);
            if descend {
                items.push(Item::Subtree(name.to_string()));
            }
            items.push(Item::Entry(name.to_string()));
        }
        items.sort_by(Item::cmp_path);
        for item in items {
            match item {
                Item::Entry(name) => {
                    let child = path.join(&name)?;
                    if let Some(meta) = self.observe_at(dir, &name, &child)? {
                        if out.len() >= max {
                            return Ok(true);
                        }
                        out.push(meta);
                    }
                }
                Item::Subtree(name) => {
                    let child = path.join(&name)?;
                    let sub = match rustix::fs::openat(dir, name.as_str(), DIR_FLAGS, Mode::empty())
                    {
                        Ok(fd) => fd,
                        // Gone or swapped for something else since read.
                        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
                        Err(e) => return Err(io(e, &child)),
                    };
                    if self.list_into(&sub, &child, levels - 1, max, out, depth + 1)? {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// What a snapshot sees of one entry: enough to tell, without reading it,
/// whether a file changed since it was last hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub path: CanonicalPath,
    pub kind: TreeKind,
    pub size: u64,
    /// Inode, size, mtime and ctime (ns): equal identities mean an
    /// unchanged file, short of a writer that restores all four.
    pub identity: FileIdentity,
    pub permissions: Permissions,
}

/// What a [`TreeEntry`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    File,
    Directory,
    /// A symlink, pipe, socket or device: never read, never followed.
    Other,
}

/// See [`TreeEntry::identity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileIdentity {
    /// A time of seconds and nanoseconds as the nanoseconds an identity
    /// records (saturating): the one rule every reader of identities uses,
    /// so that two readings of an unchanged file compare equal.
    pub fn nanos(sec: i64, nsec: i64) -> i64 {
        sec.saturating_mul(1_000_000_000).saturating_add(nsec)
    }

    /// The modification time this identity saw.
    pub fn modified(&self) -> SystemTime {
        let (sec, nsec) = (
            self.mtime_ns.div_euclid(1_000_000_000),
            self.mtime_ns.rem_euclid(1_000_000_000),
        );
        system_time((sec, nsec as u32))
    }
}

/// Most threads that walk a tree at once.
const MAX_WALK_THREADS: usize = 4;

impl DirectoryBackend {
    /// Every entry beneath the root (files, directories, and links or
    /// special files as [`TreeKind::Other`]) in path order, with identities
    /// from one `statx` each and no versions touched. Descends by
    /// descriptor, never through a symlink, like every other walk here.
    /// The root's subdirectories are walked on a few threads at once (the
    /// cost is one `statx` per entry, which threads overlap).
    pub fn tree(&self) -> Result<Vec<TreeEntry>> {
        let root_path = CanonicalPath::root();
        let root = reopen(&self.root).map_err(|e| io(e, &root_path))?;
        let items = tree_items(&root, &root_path)?;
        let subtrees: Vec<&str> = items
            .iter()
            .filter_map(|item| match item {
                Item::Subtree(name) => Some(name.as_str()),
                Item::Entry(_) => None,
            })
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_WALK_THREADS)
            .min(subtrees.len());
        let mut walked: Vec<Result<Vec<TreeEntry>>> = Vec::with_capacity(subtrees.len());
        if threads <= 1 {
            for name in &subtrees {
                let mut out = Vec::new();
                walked.push(tree_subtree(&root, name, &root_path, 0, &mut out).map(|()| out));
            }
        } else {
            // Threads take the next unwalked subdirectory until none is
            // left; results go back in order by index.
            let next = AtomicUsize::new(0);
            let mut parts: Vec<(usize, Result<Vec<TreeEntry>>)> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut done = Vec::new();
                            loop {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                let Some(name) = subtrees.get(i) else {
                                    return done;
                                };
                                let mut out = Vec::new();
                                let result = tree_subtree(&root, name, &root_path, 0, &mut out);
                                done.push((i, result.map(|()| out)));
                            }
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| {
                        h.join().unwrap_or_else(|_| {
                            vec![(0, Err(Error::internal("a tree walk thread panicked")))]
                        })
                    })
                    .collect()
            });
            parts.sort_by_key(|(i, _)| *i);
            walked.extend(parts.into_iter().map(|(_, r)| r));
        }
        let mut walked = walked.into_iter();
        let mut out = Vec::new();
        for item in items {
            match item {
                Item::Entry(name) => out.extend(tree_entry(&root, &name, &root_path)?),
                Item::Subtree(_) => {
                    let part = walked
                        .next()
                        .ok_or_else(|| Error::internal("a tree walk lost a directory"))??;
                    out.extend(part);
                }
            }
        }
        Ok(out)
    }
}

/// The visible children of `dir` as walk steps, in path order.
fn tree_items(dir: &OwnedFd, path: &CanonicalPath) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for (raw, ft) in read_entries(dir).map_err(|e| io(e, path))? {
        let Some(name) = visible_name(&raw) else {
            continue;
        };
        if entry_kind(dir, &raw, ft) == Some(Kind::Dir) {
            items.push(Item::Subtree(name.to_string()));
        }
        items.push(Item::Entry(name.to_string()));
    }
    items.sort_by(Item::cmp_path);
    Ok(items)
}

/// The [`TreeEntry`] of `name` in `dir`; `None` when it is gone.
fn tree_entry(dir: &OwnedFd, name: &str, path: &CanonicalPath) -> Result<Option<TreeEntry>> {
    let child = path.join(name)?;
    let st = match stat_at(dir, name) {
        Ok(st) => st,
        // Gone since read.
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io(e, &child)),
    };
    let kind = match st.kind {
        Kind::File => TreeKind::File,
        Kind::Dir => TreeKind::Directory,
        Kind::Symlink | Kind::Special => TreeKind::Other,
    };
    let ns = |(sec, nsec): Timestamp| FileIdentity::nanos(sec, i64::from(nsec));
    Ok(Some(TreeEntry {
        path: child,
        kind,
        size: if kind == TreeKind::File { st.size } else { 0 },
        identity: FileIdentity {
            ino: st.ino,
            size: st.size,
            mtime_ns: ns(st.mtime),
            ctime_ns: ns(st.ctime),
        },
        permissions: st.permissions(),
    }))
}

/// Walks the subdirectory `name` of `dir` into `out`.
fn tree_subtree(
    dir: &OwnedFd,
    name: &str,
    path: &CanonicalPath,
    depth: usize,
    out: &mut Vec<TreeEntry>,
) -> Result<()> {
    let child = path.join(name)?;
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => tree_into(&fd, &child, depth + 1, out),
        // Gone or swapped for something else since read.
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => Ok(()),
        Err(e) => Err(io(e, &child)),
    }
}

fn tree_into(
    dir: &OwnedFd,
    path: &CanonicalPath,
    depth: usize,
    out: &mut Vec<TreeEntry>,
) -> Result<()> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    for item in tree_items(dir, path)? {
        match item {
            Item::Entry(name) => out.extend(tree_entry(dir, &name, path)?),
            Item::Subtree(name) => tree_subtree(dir, &name, path, depth, out)?,
        }
    }
    Ok(())
}

/// One step of an ordered walk over a directory's children. A directory
/// is an `Entry` under its name and a `Subtree` under its name plus `/`:
/// sorting by those keys bytewise puts every path in full-path byte order
/// (`a`, `a.txt`, `a/b`).
enum Item {
    Entry(String),
    Subtree(String),
}

impl Item {
    fn cmp_path(&self, other: &Item) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }

    fn key(&self) -> impl Iterator<Item = u8> + '_ {
        let (name, suffix): (&str, &[u8]) = match self {
            Item::Entry(name) => (name, b""),
            Item::Subtree(name) => (name, b"/"),
        };
        name.bytes().chain(suffix.iter().copied())
    }
}

/// The lazy iterator behind `walk_files`: a stack of open directories, each
/// with its remaining children in path order.
#[derive(Default)]
struct FileWalk {
    single: Option<CanonicalPath>,
    stack: Vec<WalkLevel>,
}

struct WalkLevel {
    dir: OwnedFd,
    path: CanonicalPath,
    /// Remaining children, in reverse order (popped from the end).
    items: Vec<Item>,
}

impl FileWalk {
    fn push(&mut self, dir: OwnedFd, path: CanonicalPath) -> Result<()> {
        if self.stack.len() >= MAX_TREE_DEPTH {
            return Err(too_deep(&path));
        }
        let mut items = Vec::new();
        for (name, ft) in read_entries(&dir).map_err(|e| io(e, &path))? {
            let Some(visible) = visible_name(&name) else {
                continue;
            };
            match entry_kind(&dir, &name, ft) {
                Some(Kind::File) => items.push(Item::Entry(visible.to_string())),
                Some(Kind::Dir) => items.push(Item::Subtree(visible.to_string())),
                _ => {}
            }
        }
        items.sort_by(|a, b| b.cmp_path(a));
        self.stack.push(WalkLevel { dir, path, items });
        Ok(())
    }
}

impl Iterator for FileWalk {
    type Item = Result<CanonicalPath>;

    fn next(&mut self) -> Option<Result<CanonicalPath>> {
        if let Some(path) = self.single.take() {
            return Some(Ok(path));
        }
        loop {
            let level = self.stack.last_mut()?;
            let Some(item) = level.items.pop() else {
                self.stack.pop();
                continue;
            };
            match item {
                Item::Entry(name) => return Some(level.path.join(&name)),
                Item::Subtree(name) => {
                    let path = match level.path.join(&name) {
                        Ok(path) => path,
                        Err(e) => return Some(Err(e)),
                    };
                    match rustix::fs::openat(&level.dir, name.as_str(), DIR_FLAGS, Mode::empty()) {
                        Ok(fd) => {
                            if let Err(e) = self.push(fd, path) {
                                return Some(Err(e));
                            }
                        }
                        // Gone or swapped for something else since read.
                        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => {}
                        Err(e) => return Some(Err(io(e, &path))),
                    }
                }
            }
        }
    }
}

/// The intent record of a whole-workspace replacement in progress, in the
/// staging directory beside the staged files it names (see
/// [`crate::journal`]).
const INTENT_NAME: &str = "intent.json";

impl DirectoryBackend {
    /// Records `intent` before the first change, durably in every mode:
    /// written aside, fsynced, renamed into place, directory fsynced. In
    /// `fsync` mode the staged files it names are flushed first.
    fn write_intent(&self, intent: &Intent) -> Result<()> {
        let fail = |e: std::io::Error| {
            Error::internal(format!("cannot record the intent of a replacement: {e}"))
        };
        self.durability().settle_fs(&*self.staging)?;
        let json = serde_json::to_vec(intent)
            .map_err(|e| Error::internal(format!("cannot encode an intent record: {e}")))?;
        let tmp = CString::new(format!("{TEMP_PREFIX}{INTENT_NAME}")).unwrap_or_default();
        let name = CString::new(INTENT_NAME).unwrap_or_default();
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut file = rustix::fs::openat(
            self.staging.as_fd(),
            &tmp,
            flags,
            Mode::from_raw_mode(0o600),
        )
        .map(File::from)
        .map_err(|e| fail(e.into()))?;
        file.write_all(&json).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        rustix::fs::renameat(self.staging.as_fd(), &tmp, self.staging.as_fd(), &name)
            .map_err(|e| fail(e.into()))?;
        rustix::fs::fsync(self.staging.as_fd()).map_err(|e| fail(e.into()))
    }

    /// The replacement is complete: in `fsync` mode its changes are flushed,
    /// then the record goes (durably, so a power loss cannot bring back a
    /// record that would replay over later writes).
    fn clear_intent(&self) -> Result<()> {
        let fail = |e: Errno| {
            Error::internal(format!(
                "cannot clear the intent record of a replacement: {e}"
            ))
        };
        self.settle()?;
        let name = CString::new(INTENT_NAME).unwrap_or_default();
        match rustix::fs::unlinkat(self.staging.as_fd(), &name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(fail(e)),
        }
        rustix::fs::fsync(self.staging.as_fd()).map_err(fail)
    }

    /// The intent record a stopped server left, if any.
    pub fn pending_intent(&self) -> Result<Option<Intent>> {
        let name = CString::new(INTENT_NAME).unwrap_or_default();
        let file = match rustix::fs::openat(
            self.staging.as_fd(),
            &name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => File::from(fd),
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => {
                return Err(Error::internal(format!(
                    "cannot read the intent record: {e}"
                )))
            }
        };
        serde_json::from_reader(std::io::BufReader::new(file))
            .map(Some)
            .map_err(|e| Error::internal(format!("the intent record is corrupt: {e}")))
    }

    /// The staged file named `name` in the staging directory, taken in
    /// charge again (after a restart); `None` when it is gone (committed).
    pub fn staged(&self, name: &str) -> Result<Option<DirectoryStaged>> {
        if !name.starts_with(TEMP_PREFIX) || name.contains('/') {
            return Err(Error::internal(format!(
                "the intent record names '{name}', which is no staged file"
            )));
        }
        let cname = CString::new(name)
            .map_err(|_| Error::internal("the intent record names a staged file with a NUL"))?;
        let fd = match rustix::fs::openat(
            self.staging.as_fd(),
            &cname,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(staging_error(e.into())),
        };
        let len = stat_fd(&fd).map_err(|e| staging_error(e.into()))?.size;
        Ok(Some(DirectoryStaged {
            file: None,
            temp: TempEntry::adopt(&self.staging, cname, false),
            len,
        }))
    }
}

#[cfg(test)]
mod tests {
    const DIR: wsfs::Permissions = wsfs::Permissions::DIRECTORY_DEFAULT;
    use super::*;
    use std::collections::BTreeSet;
    use std::io::Read;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::PathBuf;
    use wsfs::PathLimits;

    const SECRET: &[u8] = b"SECRET outside the workspace";

    /// `base/ws` is the workspace, `base/staging` its staging directory,
    /// `base/outside` and `base/sibling` must never be touched.
    struct Fixture {
        _tmp: tempfile::TempDir,
        base: PathBuf,
        root: PathBuf,
        staging: PathBuf,
        outside: PathBuf,
        sibling: PathBuf,
        backend: DirectoryBackend,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().to_path_buf();
        let (root, staging) = (base.join("ws"), base.join("staging"));
        let (outside, sibling) = (base.join("outside"), base.join("sibling"));
        for d in [&root, &staging, &outside, &sibling] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
        std::fs::write(outside.join("only-outside.txt"), SECRET).unwrap();
        std::fs::write(sibling.join("other.txt"), b"sibling workspace").unwrap();
        let backend = DirectoryBackend::open(&root, &staging).unwrap();
        Fixture {
            _tmp: tmp,
            base,
            root,
            staging,
            outside,
            sibling,
            backend,
        }
    }

    impl Fixture {
        /// Everything outside the workspace and staging directories, by
        /// path, with file contents (links read as their targets).
        fn outside_state(&self) -> BTreeMap<PathBuf, Vec<u8>> {
            fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
                for entry in std::fs::read_dir(dir).unwrap() {
                    let path = entry.unwrap().path();
                    let meta = std::fs::symlink_metadata(&path).unwrap();
                    if meta.is_dir() {
                        out.insert(path.clone(), b"<dir>".to_vec());
                        walk(&path, out);
                    } else if meta.file_type().is_symlink() {
                        let target = std::fs::read_link(&path).unwrap();
                        out.insert(path, target.into_os_string().into_encoded_bytes());
                    } else {
                        out.insert(path.clone(), std::fs::read(&path).unwrap());
                    }
                }
            }
            let mut out = BTreeMap::new();
            for entry in std::fs::read_dir(&self.base).unwrap() {
                let path = entry.unwrap().path();
                if path != self.root && path != self.staging {
                    out.insert(path.clone(), Vec::new());
                    walk(&path, &mut out);
                }
            }
            out
        }

        fn staging_entries(&self) -> Vec<String> {
            entries(&self.staging)
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::parse(s, &PathLimits::default()).unwrap()
    }

    fn commit(b: &DirectoryBackend, path: &str, bytes: &[u8], append: bool) -> Result<Metadata> {
        let mut staged = b.stage()?;
        staged.write_chunk(bytes)?;
        let mode = CommitMode {
            append,
            create_parents: true,
            ..CommitMode::default()
        };
        b.commit(staged, &p(path), mode)
    }

    fn write(b: &DirectoryBackend, path: &str, bytes: &[u8]) -> Result<Metadata> {
        commit(b, path, bytes, false)
    }

    fn read(b: &DirectoryBackend, path: &str) -> Result<Vec<u8>> {
        read_open(b.open(&p(path))?)
    }

    fn read_open(open: OpenFile) -> Result<Vec<u8>> {
        match open.content {
            Content::Disk(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).unwrap();
                Ok(bytes)
            }
            Content::Memory(bytes) => Ok(bytes.to_vec()),
        }
    }

    fn paths(list: &[Metadata]) -> Vec<&str> {
        list.iter().map(|m| m.path.as_str()).collect()
    }

    fn walk(b: &DirectoryBackend, base: &str) -> Vec<String> {
        b.walk_files(&p(base))
            .unwrap()
            .map(|r| r.unwrap().as_str().to_string())
            .collect()
    }

    #[track_caller]
    fn assert_denied<T>(r: Result<T>) {
        match r.map(|_| ()) {
            Err(Error::PermissionDenied { .. }) => {}
            other => panic!("expected PermissionDenied, got {other:?}"),
        }
    }

    #[test]
    fn commit_then_open_round_trips() {
        let fx = fixture();
        let meta = write(&fx.backend, "src/a.rs", b"fn main() {}\n").unwrap();
        assert_eq!(meta.kind, FileKind::File);
        assert_eq!(meta.size, 13);
        assert_eq!(read(&fx.backend, "src/a.rs").unwrap(), b"fn main() {}\n");
        assert_eq!(
            std::fs::read(fx.root.join("src/a.rs")).unwrap(),
            b"fn main() {}\n"
        );
    }

    #[test]
    fn append_adds_to_existing_content_and_creates_missing_file() {
        let fx = fixture();
        commit(&fx.backend, "log", b"one\n", true).unwrap();
        let meta = commit(&fx.backend, "log", b"two\n", true).unwrap();
        assert_eq!(meta.size, 8);
        assert_eq!(read(&fx.backend, "log").unwrap(), b"one\ntwo\n");
    }

    #[test]
    fn an_open_file_keeps_reading_the_version_it_opened() {
        let fx = fixture();
        write(&fx.backend, "f", b"old").unwrap();
        let open = fx.backend.open(&p("f")).unwrap();
        write(&fx.backend, "f", b"new content").unwrap();
        assert_eq!(read_open(open).unwrap(), b"old");
        assert_eq!(read(&fx.backend, "f").unwrap(), b"new content");
    }

    #[test]
    fn overwrite_keeps_the_file_permissions() {
        let fx = fixture();
        write(&fx.backend, "run.sh", b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            fx.root.join("run.sh"),
            std::fs::Permissions::from_mode(0o751),
        )
        .unwrap();
        write(&fx.backend, "run.sh", b"#!/bin/sh\necho hi\n").unwrap();
        commit(&fx.backend, "run.sh", b"echo bye\n", true).unwrap();
        let mode = std::fs::metadata(fx.root.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o751);
    }

    #[test]
    fn commit_errors_name_the_problem_and_change_nothing() {
        let fx = fixture();
        let b = &fx.backend;
        write(b, "file", b"x").unwrap();
        b.mkdir(&p("dir"), false, DIR).unwrap();
        let mut staged = b.stage().unwrap();
        staged.write_chunk(b"data").unwrap();
        let no_parents = CommitMode {
            append: false,
            create_parents: false,
            ..CommitMode::default()
        };
        match b.commit(staged, &p("missing/deeper/f"), no_parents) {
            Err(Error::FileNotFound { path }) => assert_eq!(path, "missing/deeper"),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(write(b, "file/f", b"x"), Err(Error::NotADirectory { path }) if path == "file")
        );
        assert!(matches!(
            write(b, "dir", b"x"),
            Err(Error::IsADirectory { .. })
        ));
        assert!(matches!(
            write(b, "", b"x"),
            Err(Error::IsADirectory { .. })
        ));
        assert_eq!(entries(&fx.root), ["dir", "file"]);
        assert!(fx.staging_entries().is_empty());
    }

    #[test]
    fn list_is_in_full_path_byte_order() {
        let fx = fixture();
        let b = &fx.backend;
        for f in ["a/b", "a/c/d", "a.txt", "a-b", "b", "A"] {
            write(b, f, b"x").unwrap();
        }
        let (all, truncated) = b.list(&CanonicalPath::root(), 10, 100).unwrap();
        assert!(!truncated);
        let expected: BTreeSet<&str> =
            ["A", "a", "a-b", "a.txt", "a/b", "a/c", "a/c/d", "b"].into();
        assert_eq!(paths(&all), expected.into_iter().collect::<Vec<_>>());
        assert_eq!(all[1].kind, FileKind::Directory);

        let (shallow, _) = b.list(&CanonicalPath::root(), 1, 100).unwrap();
        assert_eq!(paths(&shallow), ["A", "a", "a-b", "a.txt", "b"]);
        let (sub, _) = b.list(&p("a"), 1, 100).unwrap();
        assert_eq!(paths(&sub), ["a/b", "a/c"]);

        let (first, truncated) = b.list(&CanonicalPath::root(), 10, 5).unwrap();
        assert!(truncated);
        assert_eq!(paths(&first), ["A", "a", "a-b", "a.txt", "a/b"]);
        let (exact, truncated) = b.list(&CanonicalPath::root(), 10, 8).unwrap();
        assert!(!truncated);
        assert_eq!(exact.len(), 8);
    }

    #[test]
    fn list_of_a_file_or_a_missing_path_fails() {
        let fx = fixture();
        write(&fx.backend, "f", b"x").unwrap();
        assert!(matches!(
            fx.backend.list(&p("f"), 1, 10),
            Err(Error::NotADirectory { .. })
        ));
        assert!(matches!(
            fx.backend.list(&p("nope"), 1, 10),
            Err(Error::FileNotFound { .. })
        ));
    }

    #[test]
    fn walk_yields_regular_files_in_path_order() {
        let fx = fixture();
        let b = &fx.backend;
        for f in ["a/b", "a/c/d", "a.txt", "a-b", "z"] {
            write(b, f, b"x").unwrap();
        }
        b.mkdir(&p("empty"), false, DIR).unwrap();
        symlink(fx.root.join("z"), fx.root.join("link")).unwrap();
        assert_eq!(walk(b, ""), ["a-b", "a.txt", "a/b", "a/c/d", "z"]);
        assert_eq!(walk(b, "a"), ["a/b", "a/c/d"]);
        assert_eq!(walk(b, "a.txt"), ["a.txt"]);
        assert!(walk(b, "missing").is_empty());
        assert!(walk(b, "link").is_empty());
    }

    #[test]
    fn versions_grow_with_every_change_including_external_ones() {
        let fx = fixture();
        let b = &fx.backend;
        let v1 = write(b, "f", b"one").unwrap().version;
        assert_eq!(b.metadata(&p("f")).unwrap().unwrap().version, v1);
        assert_eq!(b.open(&p("f")).unwrap().meta.version, v1);

        std::fs::write(fx.root.join("f"), b"changed outside").unwrap();
        let v2 = b.metadata(&p("f")).unwrap().unwrap().version;
        assert!(v2 > v1);
        let (listed, _) = b.list(&CanonicalPath::root(), 1, 10).unwrap();
        assert_eq!(listed[0].version, v2);

        let v3 = write(b, "f", b"three").unwrap().version;
        assert!(v3 > v2);
        b.remove(&p("f"), false).unwrap();
        let v4 = write(b, "f", b"again").unwrap().version;
        assert!(v4 > v3);

        b.mkdir(&p("d"), false, DIR).unwrap();
        let d1 = b.metadata(&p("d")).unwrap().unwrap().version;
        std::fs::write(fx.root.join("d/new"), b"x").unwrap();
        let d2 = b.metadata(&p("d")).unwrap().unwrap().version;
        assert!(d2 > d1);
        let created = b.metadata(&p("d/new")).unwrap().unwrap().version;
        assert!(created > d2);
    }

    #[test]
    fn remove_follows_the_rules() {
        let fx = fixture();
        let b = &fx.backend;
        for f in ["f", "d/x", "d/e/y"] {
            write(b, f, b"x").unwrap();
        }
        b.mkdir(&p("empty"), false, DIR).unwrap();
        assert_eq!(b.remove(&p("f"), false).unwrap(), 1);
        assert_eq!(b.remove(&p("empty"), false).unwrap(), 1);
        assert!(matches!(
            b.remove(&p("d"), false),
            Err(Error::DirectoryNotEmpty { .. })
        ));
        assert!(matches!(
            b.remove(&p("f"), false),
            Err(Error::FileNotFound { .. })
        ));
        assert!(matches!(
            b.remove(&CanonicalPath::root(), false),
            Err(Error::DirectoryNotEmpty { .. })
        ));
        assert_eq!(b.remove(&p("d"), true).unwrap(), 4);
        write(b, "g", b"x").unwrap();
        write(b, "h/i", b"x").unwrap();
        assert_eq!(b.remove(&CanonicalPath::root(), true).unwrap(), 3);
        assert!(fx.root.is_dir());
        assert!(entries(&fx.root).is_empty());
        assert_eq!(b.remove(&CanonicalPath::root(), false).unwrap(), 0);
    }

    #[test]
    fn mkdir_follows_the_rules() {
        let fx = fixture();
        let b = &fx.backend;
        assert!(b.mkdir(&p("d"), false, DIR).unwrap());
        assert!(!b.mkdir(&p("d"), false, DIR).unwrap());
        assert!(!b.mkdir(&CanonicalPath::root(), false, DIR).unwrap());
        write(b, "f", b"x").unwrap();
        assert!(matches!(
            b.mkdir(&p("f"), false, DIR),
            Err(Error::AlreadyExists { .. })
        ));
        assert!(
            matches!(b.mkdir(&p("x/y"), false, DIR), Err(Error::FileNotFound { path }) if path == "x")
        );
        assert!(b.mkdir(&p("x/y/z"), true, DIR).unwrap());
        assert_eq!(
            b.metadata(&p("x/y")).unwrap().unwrap().kind,
            FileKind::Directory
        );
    }

    #[test]
    fn rename_moves_files_and_whole_directories() {
        let fx = fixture();
        let b = &fx.backend;
        for f in ["d/a", "d/sub/b", "f", "g", "other/old"] {
            write(b, f, f.as_bytes()).unwrap();
        }
        assert_eq!(b.rename(&p("f"), &p("moved/f"), false, true).unwrap(), 1);
        assert_eq!(read(b, "moved/f").unwrap(), b"f");
        assert!(b.metadata(&p("f")).unwrap().is_none());
        assert!(matches!(
            b.rename(&p("g"), &p("nope/g"), false, false),
            Err(Error::FileNotFound { .. })
        ));
        assert!(matches!(
            b.rename(&p("g"), &p("moved/f"), false, false),
            Err(Error::AlreadyExists { .. })
        ));
        assert!(matches!(
            b.rename(&p("g"), &p("d"), true, false),
            Err(Error::IsADirectory { .. })
        ));
        assert!(matches!(
            b.rename(&p("d"), &p("d/sub/x"), false, false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            b.rename(&p("d/sub"), &p("d"), true, false),
            Err(Error::InvalidArgument { .. })
        ));

        assert_eq!(b.rename(&p("g"), &p("moved/f"), true, false).unwrap(), 1);
        assert_eq!(read(b, "moved/f").unwrap(), b"g");
        // A directory replaces a directory whole: `other/old` goes.
        assert_eq!(b.rename(&p("d"), &p("other"), true, false).unwrap(), 4);
        assert_eq!(walk(b, ""), ["moved/f", "other/a", "other/sub/b"]);
        assert!(fx.staging_entries().is_empty());
    }

    #[test]
    fn copy_copies_files_and_whole_directories() {
        let fx = fixture();
        let b = &fx.backend;
        for f in ["d/a", "d/sub/b", "f", "other/old"] {
            write(b, f, f.as_bytes()).unwrap();
        }
        assert_eq!(b.copy(&p("f"), &p("c/f"), false, true).unwrap(), 1);
        assert_eq!(read(b, "c/f").unwrap(), b"f");
        assert_eq!(read(b, "f").unwrap(), b"f");
        assert!(matches!(
            b.copy(&p("f"), &p("c/f"), false, false),
            Err(Error::AlreadyExists { .. })
        ));
        assert_eq!(b.copy(&p("d"), &p("e"), false, false).unwrap(), 4);
        assert_eq!(b.copy(&p("d"), &p("other"), true, false).unwrap(), 4);
        assert_eq!(
            walk(b, ""),
            [
                "c/f",
                "d/a",
                "d/sub/b",
                "e/a",
                "e/sub/b",
                "f",
                "other/a",
                "other/sub/b"
            ]
        );
        assert_eq!(read(b, "e/sub/b").unwrap(), b"d/sub/b");
        assert!(fx.staging_entries().is_empty());
    }

    #[test]
    fn a_file_in_the_middle_of_a_path_is_not_a_directory() {
        let fx = fixture();
        write(&fx.backend, "f", b"x").unwrap();
        let b = &fx.backend;
        assert!(matches!(b.metadata(&p("f/x")), Err(Error::NotADirectory { path }) if path == "f"));
        assert!(matches!(
            b.open(&p("f/x")),
            Err(Error::NotADirectory { .. })
        ));
        assert!(matches!(
            b.mkdir(&p("f/x"), true, DIR),
            Err(Error::NotADirectory { .. })
        ));
    }

    #[test]
    fn staged_files_are_never_listed_and_dropped_ones_leave_nothing() {
        let fx = fixture();
        let b = &fx.backend;
        let mut staged = b.stage().unwrap();
        staged.write_chunk(b"pending").unwrap();
        assert_eq!(staged.len(), 7);
        assert!(b.list(&CanonicalPath::root(), 5, 100).unwrap().0.is_empty());
        assert!(entries(&fx.root).is_empty());
        drop(staged);
        assert!(fx.staging_entries().is_empty());
        assert!(entries(&fx.root).is_empty());
    }

    #[test]
    fn tree_lists_every_entry_in_path_order_with_its_kind() {
        let fx = fixture();
        let b = &fx.backend;
        let mut expected = Vec::new();
        // Enough subdirectories of the root to be shared among threads.
        for d in 0..12 {
            for f in ["a", "a.txt", "b"] {
                write(b, &format!("d{d:02}/{f}/x"), b"12345").unwrap();
                write(b, &format!("d{d:02}/{f}.bin"), b"1").unwrap();
            }
        }
        write(b, "top.txt", b"123").unwrap();
        symlink("/", fx.root.join("link")).unwrap();
        for e in b.tree().unwrap() {
            expected.push((e.path.as_str().to_string(), e.kind, e.size));
        }
        let mut sorted = expected.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(expected, sorted, "entries come in path order");
        assert_eq!(expected.len(), 12 * (1 + 3 * 3) + 2);
        let find = |path: &str| expected.iter().find(|e| e.0 == path).cloned();
        assert_eq!(find("d03"), Some(("d03".into(), TreeKind::Directory, 0)));
        assert_eq!(
            find("d03/a.txt/x"),
            Some(("d03/a.txt/x".into(), TreeKind::File, 5))
        );
        assert_eq!(find("link"), Some(("link".into(), TreeKind::Other, 0)));
        assert_eq!(find("top.txt"), Some(("top.txt".into(), TreeKind::File, 3)));
    }

    #[test]
    fn commit_aside_swaps_the_old_file_out_and_frees_it_when_dropped() {
        let fx = fixture();
        let b = &fx.backend;
        write(b, "a.txt", b"old").unwrap();
        // Someone else holds the old file open: it must stay whole.
        let mut reader = std::fs::File::open(fx.root.join("a.txt")).unwrap();
        let put = CommitMode {
            append: false,
            create_parents: true,
            ..CommitMode::default()
        };
        let mut staged = b.stage().unwrap();
        staged.write_chunk(b"new").unwrap();
        staged.finish().unwrap();

        let (meta, displaced) = b.commit_aside(staged, &p("a.txt"), put).unwrap();

        assert_eq!(meta.size, 3);
        assert_eq!(std::fs::read(fx.root.join("a.txt")).unwrap(), b"new");
        assert_eq!(entries(&fx.root), ["a.txt"]);
        let displaced = displaced.expect("the old file is kept aside");
        assert_eq!(fx.staging_entries().len(), 1);
        let mut old = String::new();
        reader.read_to_string(&mut old).unwrap();
        assert_eq!(old, "old");
        drop(displaced);
        assert!(fx.staging_entries().is_empty());

        // Nothing to displace: a plain create.
        let staged = b.stage().unwrap();
        let (_, displaced) = b.commit_aside(staged, &p("d/b.txt"), put).unwrap();
        assert!(displaced.is_none());
        assert_eq!(std::fs::read(fx.root.join("d/b.txt")).unwrap(), b"");
        // A directory is never swapped out.
        let staged = b.stage().unwrap();
        assert!(matches!(
            b.commit_aside(staged, &p("d"), put),
            Err(Error::IsADirectory { .. })
        ));
        assert!(fx.root.join("d/b.txt").is_file());
        assert!(fx.staging_entries().is_empty());
    }

    #[test]
    fn reserved_temp_names_are_hidden_and_refused() {
        let fx = fixture();
        let b = &fx.backend;
        std::fs::write(fx.root.join(".wsfs-tmp-leftover"), b"x").unwrap();
        write(b, "visible", b"x").unwrap();
        assert_eq!(
            paths(&b.list(&CanonicalPath::root(), 1, 10).unwrap().0),
            ["visible"]
        );
        assert_eq!(walk(b, ""), ["visible"]);
        assert!(matches!(
            b.metadata(&p(".wsfs-tmp-leftover")),
            Err(Error::InvalidPath { .. })
        ));
        assert!(matches!(
            write(b, "d/.wsfs-tmp-x", b"x"),
            Err(Error::InvalidPath { .. })
        ));
        assert_eq!(
            b.remove(&CanonicalPath::root(), false)
                .unwrap_err()
                .reason(),
            "DIRECTORY_NOT_EMPTY"
        );
        b.remove(&p("visible"), false).unwrap();
        assert_eq!(b.remove(&CanonicalPath::root(), false).unwrap(), 0);
    }

    #[test]
    fn a_staging_directory_on_another_filesystem_still_commits_atomically() {
        let fx = fixture();
        let b = &fx.backend;
        b.cross_device.store(true, Ordering::Relaxed);
        write(b, "d/f", b"one").unwrap();
        commit(b, "d/f", b"+two", true).unwrap();
        assert_eq!(read(b, "d/f").unwrap(), b"one+two");
        write(b, "e/g", b"g").unwrap();
        assert_eq!(b.copy(&p("d"), &p("e"), true, false).unwrap(), 2);
        assert_eq!(b.rename(&p("e"), &p("d"), true, false).unwrap(), 2);
        assert_eq!(walk(b, ""), ["d/f"]);
        assert_eq!(entries(&fx.root), ["d"]);
        assert_eq!(entries(&fx.root.join("d")), ["f"]);
        assert!(fx.staging_entries().is_empty());
    }

    #[test]
    fn names_that_are_not_utf8_are_skipped_but_removed_with_their_directory() {
        use std::os::unix::ffi::OsStrExt;
        let fx = fixture();
        let b = &fx.backend;
        write(b, "d/ok", b"x").unwrap();
        let odd = std::ffi::OsStr::from_bytes(b"bad\xff");
        std::fs::write(fx.root.join("d").join(odd), b"x").unwrap();
        assert_eq!(paths(&b.list(&p("d"), 1, 10).unwrap().0), ["d/ok"]);
        assert_eq!(walk(b, ""), ["d/ok"]);
        assert_eq!(b.copy(&p("d"), &p("e"), false, false).unwrap(), 2);
        assert_eq!(b.remove(&p("d"), true).unwrap(), 3);
        assert_eq!(entries(&fx.root), ["e"]);
    }

    #[test]
    fn a_staging_directory_inside_the_root_is_refused() {
        let fx = fixture();
        let inner = fx.root.join("staging");
        std::fs::create_dir(&inner).unwrap();
        let opened = DirectoryBackend::open(&fx.root, &inner);
        assert!(matches!(opened, Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn a_pipe_is_listed_but_never_opened_or_written() {
        let fx = fixture();
        let b = &fx.backend;
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            fx.root.join("pipe"),
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        assert_eq!(
            b.metadata(&p("pipe")).unwrap().unwrap().kind,
            FileKind::File
        );
        assert_denied(b.open(&p("pipe")));
        assert_denied(write(b, "pipe", b"x"));
        assert!(walk(b, "").is_empty());
        assert_eq!(b.remove(&p("pipe"), false).unwrap(), 1);
    }

    #[test]
    fn a_symlink_to_an_outside_file_is_never_followed() {
        let fx = fixture();
        let b = &fx.backend;
        let before = fx.outside_state();
        symlink(fx.outside.join("secret.txt"), fx.root.join("link")).unwrap();

        assert_eq!(
            b.metadata(&p("link")).unwrap().unwrap().kind,
            FileKind::Symlink
        );
        let (listed, _) = b.list(&CanonicalPath::root(), 3, 10).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].kind, FileKind::Symlink);
        assert_denied(b.open(&p("link")));
        assert_denied(write(b, "link", b"pwned"));
        assert_denied(commit(b, "link", b"pwned", true));
        assert!(walk(b, "").is_empty());

        // Copy and move work on the link itself.
        assert_eq!(b.copy(&p("link"), &p("copy"), false, false).unwrap(), 1);
        assert_eq!(
            b.metadata(&p("copy")).unwrap().unwrap().kind,
            FileKind::Symlink
        );
        assert_denied(b.open(&p("copy")));
        assert_eq!(b.rename(&p("copy"), &p("moved"), false, false).unwrap(), 1);
        assert_eq!(b.remove(&p("moved"), true).unwrap(), 1);
        assert_eq!(b.remove(&p("link"), true).unwrap(), 1);
        assert!(entries(&fx.root).is_empty());
        assert_eq!(fx.outside_state(), before);
    }

    /// Links to an outside directory, to `..`, to a sibling workspace and
    /// to `/etc`, used as a path component: every operation is refused.
    #[test]
    fn a_symlink_in_the_middle_of_a_path_is_permission_denied() {
        let fx = fixture();
        let b = &fx.backend;
        write(b, "f", b"inside").unwrap();
        let before = fx.outside_state();
        symlink(&fx.outside, fx.root.join("out")).unwrap();
        symlink("..", fx.root.join("up")).unwrap();
        symlink(&fx.sibling, fx.root.join("sib")).unwrap();
        symlink("/etc", fx.root.join("etc")).unwrap();
        for (link, inner) in [
            ("out", "secret.txt"),
            ("up", "outside/secret.txt"),
            ("sib", "other.txt"),
            ("etc", "passwd"),
        ] {
            let target = format!("{link}/{inner}");
            assert_denied(b.metadata(&p(&target)));
            assert_denied(b.open(&p(&target)));
            assert_denied(write(b, &target, b"pwned"));
            assert_denied(commit(b, &target, b"pwned", true));
            assert_denied(write(b, &format!("{link}/new.txt"), b"pwned"));
            assert_denied(b.list(&p(link), 1, 10));
            assert_denied(b.list(&p(&format!("{link}/{inner}")), 1, 10));
            assert_denied(b.mkdir(&p(&format!("{link}/d")), true, DIR));
            assert_denied(b.remove(&p(&target), true));
            assert_denied(b.rename(&p(&target), &p("stolen"), false, false));
            assert_denied(b.copy(&p(&target), &p("stolen"), false, false));
            assert_denied(b.rename(&p("f"), &p(&format!("{link}/f")), true, true));
            assert_denied(b.copy(&p("f"), &p(&format!("{link}/f")), true, true));
            assert_denied(b.walk_files(&p(&target)));
            assert!(walk(b, link).is_empty());
        }
        assert_eq!(walk(b, ""), ["f"]);
        let (listed, _) = b.list(&CanonicalPath::root(), 10, 100).unwrap();
        assert_eq!(paths(&listed), ["etc", "f", "out", "sib", "up"]);
        // Removing the links removes the links.
        for link in ["out", "up", "sib", "etc"] {
            assert_eq!(b.remove(&p(link), true).unwrap(), 1);
        }
        assert_eq!(entries(&fx.root), ["f"]);
        assert_eq!(fx.outside_state(), before);
        assert!(fx.staging_entries().is_empty());
    }

    #[test]
    fn a_path_refused_in_one_call_is_answered_by_the_walk_naming_the_culprit() {
        let fx = fixture();
        let b = &fx.backend;
        write(b, "a/b/c/f.txt", b"deep").unwrap();
        write(b, "a/file", b"x").unwrap();
        symlink("c", fx.root.join("a/b/in")).unwrap();
        symlink(&fx.outside, fx.root.join("a/b/out")).unwrap();
        let before = fx.outside_state();
        let read_all = |content: Content| match content {
            Content::Disk(mut f) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut bytes).unwrap();
                bytes
            }
            Content::Memory(bytes) => bytes.to_vec(),
        };
        // Nothing in the way: found in one call, same bytes either way.
        assert_eq!(
            read_all(b.open_content(&p("a/b/c/f.txt")).unwrap()),
            b"deep"
        );
        assert_eq!(read(b, "a/b/c/f.txt").unwrap(), b"deep");
        // A link inside the root or out of it, at any depth: the walk
        // names it (as it always did), for a versioned open and a search.
        let deep = "goes through a symbolic link";
        let named = "is a symbolic link";
        for (path, culprit, said) in [
            ("a/b/in/f.txt", "a/b/in", named),
            ("a/b/in/x/f.txt", "a/b/in", deep),
            ("a/b/out/secret.txt", "a/b/out", named),
            ("a/b/out/d/secret.txt", "a/b/out", deep),
            ("a/b/in", "a/b/in", named),
        ] {
            let check = |r: Result<()>| match r {
                Err(Error::PermissionDenied {
                    path: reported,
                    message,
                }) => {
                    assert_eq!(reported, culprit, "{path}");
                    assert!(message.contains(said), "{path}: {message}");
                }
                other => panic!("{path}: expected PermissionDenied, got {other:?}"),
            };
            check(b.open(&p(path)).map(|_| ()));
            check(b.open_content(&p(path)).map(|_| ()));
        }
        for open in [
            |b: &DirectoryBackend, s: &str| b.open(&p(s)).map(|_| ()),
            |b: &DirectoryBackend, s: &str| b.open_content(&p(s)).map(|_| ()),
        ] {
            assert!(
                matches!(open(b, "a/file/x"), Err(Error::NotADirectory { path }) if path == "a/file")
            );
            assert!(
                matches!(open(b, "a/nope/f"), Err(Error::FileNotFound { path }) if path == "a/nope/f")
            );
            assert!(matches!(open(b, "a/b"), Err(Error::IsADirectory { path }) if path == "a/b"));
            assert!(matches!(open(b, ""), Err(Error::IsADirectory { .. })));
        }
        assert_eq!(fx.outside_state(), before);
    }

    #[test]
    fn recursive_copy_and_remove_never_go_through_links() {
        let fx = fixture();
        let b = &fx.backend;
        write(b, "d/f", b"inside").unwrap();
        symlink(&fx.outside, fx.root.join("d/out")).unwrap();
        symlink("..", fx.root.join("d/up")).unwrap();
        let before = fx.outside_state();

        assert_eq!(b.copy(&p("d"), &p("e"), false, false).unwrap(), 4);
        assert_eq!(
            std::fs::read_link(fx.root.join("e/out")).unwrap(),
            fx.outside
        );
        assert_eq!(walk(b, ""), ["d/f", "e/f"]);
        let (listed, _) = b.list(&CanonicalPath::root(), 10, 100).unwrap();
        assert_eq!(
            paths(&listed),
            ["d", "d/f", "d/out", "d/up", "e", "e/f", "e/out", "e/up"]
        );
        assert_eq!(b.rename(&p("e"), &p("d"), true, false).unwrap(), 4);
        assert_eq!(b.remove(&p("d"), true).unwrap(), 4);
        assert_eq!(b.remove(&CanonicalPath::root(), true).unwrap(), 0);
        assert_eq!(fx.outside_state(), before);
        assert!(fx.staging_entries().is_empty());
    }

    /// Kind of what is at `path` in a test: Some(true) for a symlink.
    fn is_link(path: &Path) -> Option<bool> {
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| m.file_type().is_symlink())
    }

    /// Makes `real` a real entry (made by `make`) and `link` a symlink to
    /// `target`, whatever is there now.
    fn reset_pair(real: &Path, link: &Path, target: &Path, make: impl Fn(&Path)) {
        if matches!(
            (is_link(real), is_link(link)),
            (Some(false), Some(true)) | (Some(true), Some(false))
        ) {
            return;
        }
        for path in [real, link] {
            match is_link(path) {
                Some(true) => drop(std::fs::remove_file(path)),
                Some(false) if path.is_dir() => drop(std::fs::remove_dir_all(path)),
                Some(false) => drop(std::fs::remove_file(path)),
                None => {}
            }
        }
        make(real);
        let _ = symlink(target, link);
    }

    /// Another process keeps exchanging (`RENAME_EXCHANGE`) a directory
    /// with a symlink to the outside directory, and a file with a symlink
    /// to an outside file, while every kind of operation runs on and under
    /// them. Nothing outside is ever read, listed, copied or changed.
    #[test]
    fn swapping_entries_for_symlinks_never_lets_an_operation_escape() {
        use std::sync::atomic::AtomicBool;
        let fx = fixture();
        let b = &fx.backend;
        let before = fx.outside_state();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (root, outside, stop) = (fx.root.clone(), fx.outside.clone(), stop.clone());
            std::thread::spawn(move || {
                let boxed = root.join("box");
                let (sub, sub_link) = (boxed.join("sub"), boxed.join("sub-swap"));
                let (file, file_link) = (boxed.join("file"), boxed.join("file-swap"));
                let secret = outside.join("secret.txt");
                let mut swaps = 0u64;
                let exchange = |a: &Path, b: &Path| {
                    let cwd = rustix::fs::CWD;
                    rustix::fs::renameat_with(cwd, a, cwd, b, RenameFlags::EXCHANGE).is_ok()
                };
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if i.is_multiple_of(64) {
                        let _ = std::fs::create_dir(&boxed);
                        reset_pair(&sub, &sub_link, &outside, |p| {
                            let _ = std::fs::create_dir(p);
                            let _ = std::fs::write(p.join("f"), b"inside");
                        });
                        reset_pair(&file, &file_link, &secret, |p| {
                            let _ = std::fs::write(p, b"inside");
                        });
                    }
                    i += 1;
                    swaps += u64::from(exchange(&sub, &sub_link));
                    swaps += u64::from(exchange(&file, &file_link));
                }
                swaps
            })
        };
        let leaked = |path: &str| path.contains("only-outside");
        let assert_inside = |r: Result<Vec<u8>>| {
            if let Ok(bytes) = r {
                let text = String::from_utf8_lossy(&bytes).to_string();
                assert!(!text.contains("SECRET"), "read through a link: {text}");
            }
        };
        for round in 0..400 {
            assert_inside(read(b, "box/file"));
            assert_inside(read(b, "box/sub/secret.txt"));
            assert_inside(read(b, "box/sub/f"));
            let _ = commit(b, "box/file", b"+appended", true);
            assert_inside(read(b, "box/file"));
            let _ = write(b, "box/sub/secret.txt", b"overwritten");
            let _ = commit(b, "box/sub/secret.txt", b"+appended", true);
            let _ = write(b, "box/sub/deep/new.txt", b"new");
            let _ = b.mkdir(&p("box/sub/made"), true, DIR);
            let _ = b.rename(&p("box/sub/f"), &p("box/sub/g"), true, false);
            let _ = b.copy(&p("box/file"), &p("copied-file"), true, false);
            assert_inside(read(b, "copied-file"));
            let _ = b.copy(&p("box"), &p("copy"), true, false);
            if let Ok(files) = b.walk_files(&CanonicalPath::root()) {
                for path in files.flatten() {
                    assert!(!leaked(path.as_str()), "walked through a link: {path}");
                    assert_inside(read(b, path.as_str()));
                }
            }
            if let Ok((listed, _)) = b.list(&CanonicalPath::root(), 10, 1000) {
                assert!(
                    !listed.iter().any(|m| leaked(m.path.as_str())),
                    "listed through a link"
                );
            }
            let _ = b.remove(&p("box/sub/secret.txt"), false);
            let _ = b.remove(&p("copy"), true);
            match round % 3 {
                0 => drop(b.remove(&p("box/sub"), true)),
                1 => drop(b.remove(&p("box"), true)),
                _ => drop(b.remove(&p("box/file"), false)),
            }
            assert_eq!(fx.outside_state(), before, "round {round}");
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(swaps > 1000, "the race barely ran ({swaps} swaps)");
        assert_eq!(fx.outside_state(), before);
        assert!(fx.staging_entries().is_empty());
    }

    /// A sparse file of 256 MiB with 4 bytes of data in its middle, copied
    /// alone and inside a directory, then appended to: every copy has its
    /// holes and its data where they were.
    #[test]
    fn copies_and_appends_keep_a_sparse_file_s_holes() {
        use std::os::unix::fs::MetadataExt;
        let fx = fixture();
        let b = &fx.backend;
        let (len, at) = (256u64 << 20, 128u64 << 20);
        std::fs::create_dir(fx.root.join("d")).unwrap();
        let f = std::fs::File::create(fx.root.join("d/sparse.bin")).unwrap();
        f.set_len(len).unwrap();
        f.write_all_at(b"data", at).unwrap();
        b.copy(&p("d/sparse.bin"), &p("copy.bin"), false, false)
            .unwrap();
        b.copy(&p("d"), &p("e"), false, false).unwrap();
        commit(b, "copy.bin", b"+tail", true).unwrap();
        for (name, want_len) in [("copy.bin", len + 5), ("e/sparse.bin", len)] {
            let path = fx.root.join(name);
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(meta.len(), want_len, "{name}");
            assert!(
                meta.blocks() * 512 < 1 << 20,
                "{name}: {} blocks",
                meta.blocks()
            );
            let mut data = [0u8; 4];
            File::open(&path)
                .unwrap()
                .read_exact_at(&mut data, at)
                .unwrap();
            assert_eq!(&data, b"data", "{name}");
        }
        let mut tail = [0u8; 5];
        File::open(fx.root.join("copy.bin"))
            .unwrap()
            .read_exact_at(&mut tail, len)
            .unwrap();
        assert_eq!(&tail, b"+tail");
    }

    /// Another process keeps exchanging a directory with a symlink (and a
    /// file with a symlink) inside a directory being copied: every copy
    /// either succeeds or fails with a contract reason, never INTERNAL.
    #[test]
    fn copying_a_directory_under_a_swap_race_answers_a_contract_reason() {
        use std::sync::atomic::AtomicBool;
        let fx = fixture();
        let b = &fx.backend;
        let boxed = fx.root.join("box");
        std::fs::create_dir(&boxed).unwrap();
        let (sub, sub_link) = (boxed.join("sub"), boxed.join("sub-swap"));
        let (file, file_link) = (boxed.join("file"), boxed.join("file-swap"));
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("f"), b"inside").unwrap();
        std::fs::write(&file, b"inside").unwrap();
        symlink(&fx.outside, &sub_link).unwrap();
        symlink(fx.outside.join("secret.txt"), &file_link).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let cwd = rustix::fs::CWD;
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for (a, b) in [(&sub, &sub_link), (&file, &file_link)] {
                        swaps += u64::from(
                            rustix::fs::renameat_with(cwd, a, cwd, b, RenameFlags::EXCHANGE)
                                .is_ok(),
                        );
                    }
                }
                swaps
            })
        };
        let mut internal = Vec::new();
        for _ in 0..800 {
            if let Err(e @ Error::Internal { .. }) = b.copy(&p("box"), &p("copy"), true, false) {
                internal.push(e.to_string());
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(swaps > 1000, "the race barely ran ({swaps} swaps)");
        assert!(
            internal.is_empty(),
            "{} INTERNAL answers: {:?}",
            internal.len(),
            &internal[..internal.len().min(5)]
        );
        assert!(fx.staging_entries().is_empty());
    }
}
