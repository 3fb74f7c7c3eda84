//! The `*at` / `openat2` system-call layer and the descriptor walk to a
//! directory beneath the root (see the safety model in the module above).

use super::owner::claim;
use super::DirectoryBackend;
use crate::backend::Backend;
use crate::backend::{check_name, TEMP_PREFIX};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags, ResolveFlags, StatxFlags};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsfs::{CanonicalPath, Error, FileKind, Metadata, Permissions, Result};

/// Deepest directory tree that recursive operations descend (each level
/// holds a descriptor open).
pub(crate) const MAX_TREE_DEPTH: usize = 256;

/// How often an operation retries an entry that another process keeps
/// changing under it.
pub(super) const RACE_RETRIES: usize = 4;

/// Opening a directory component: never through a symlink.
pub(crate) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opening a file for reading: never through a symlink, and never blocking
/// on a pipe planted where a file was expected.
pub(super) const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Resolving a whole path in one call ([`open_beneath`]): never above the
/// root, never through a symlink of any kind.
pub(super) const RESOLVE_FLAGS: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Creating a temporary file: a fresh name, never an existing file or link.
pub(super) const CREATE_FLAGS: OFlags = OFlags::RDWR
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// What an entry is, as far as wsfs cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    /// A pipe, socket or device.
    Special,
}

impl Kind {
    pub(super) fn from_file_type(ft: FileType) -> Kind {
        match ft {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Special,
        }
    }

    pub(super) fn file_kind(self) -> FileKind {
        match self {
            Kind::File | Kind::Special => FileKind::File,
            Kind::Dir => FileKind::Directory,
            Kind::Symlink => FileKind::Symlink,
        }
    }
}

pub(crate) type Timestamp = (i64, u32);

/// The identity and state of an entry; any change means a new version.
pub(super) type Fingerprint = ((u32, u32), u64, u64, Timestamp, Timestamp, Kind);

/// The `statx` fields wsfs uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub(crate) kind: Kind,
    /// Permission bits.
    pub(super) mode: u32,
    pub(crate) size: u64,
    pub(super) dev: (u32, u32),
    pub(crate) ino: u64,
    pub(crate) mtime: Timestamp,
    pub(crate) ctime: Timestamp,
    pub(super) btime: Option<Timestamp>,
}

impl Stat {
    pub(super) fn from_statx(x: &rustix::fs::Statx) -> Stat {
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

    pub(super) fn fingerprint(&self) -> Fingerprint {
        (
            self.dev, self.ino, self.size, self.mtime, self.ctime, self.kind,
        )
    }

    pub(super) fn metadata(&self, path: &CanonicalPath, version: u64) -> Metadata {
        Metadata {
            path: path.clone(),
            kind: self.kind.file_kind(),
            size: if self.kind == Kind::Dir { 0 } else { self.size },
            created: system_time(self.btime.unwrap_or(self.mtime)),
            modified: system_time(self.mtime),
            version,
            permissions: self.permissions(),
            symlink_target: None,
        }
    }

    pub(crate) fn permissions(&self) -> Permissions {
        Permissions::masked(self.mode)
    }
}

pub(crate) fn system_time((sec, nsec): Timestamp) -> SystemTime {
    let t = if sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(sec.unsigned_abs()))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(sec.unsigned_abs()))
    };
    t.and_then(|t| t.checked_add(Duration::from_nanos(u64::from(nsec))))
        .unwrap_or(UNIX_EPOCH)
}

/// `t` as the kernel takes it, saturated to what a `time_t` holds.
pub(super) fn timespec(t: SystemTime) -> rustix::fs::Timespec {
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
pub(super) fn set_attributes_fd(
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

pub(super) const STATX_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

/// Stats `name` in `dir` without following a symlink.
pub(crate) fn stat_at<P: rustix::path::Arg>(
    dir: impl AsFd,
    name: P,
) -> std::result::Result<Stat, Errno> {
    rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
        .map(|x| Stat::from_statx(&x))
}

pub(super) fn stat_fd(fd: impl AsFd) -> std::result::Result<Stat, Errno> {
    rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, STATX_MASK).map(|x| Stat::from_statx(&x))
}

/// A fresh descriptor (with its own read position) for the same directory.
pub(super) fn reopen(dir: impl AsFd) -> std::result::Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

pub(crate) fn io(e: Errno, path: &CanonicalPath) -> Error {
    Error::from_io(e.into(), path)
}

pub(super) use crate::backend::symlink_denied;

pub(super) fn not_regular(path: &CanonicalPath) -> Error {
    Error::PermissionDenied {
        path: path.as_str().to_string(),
        message: format!(
            "'{path}' is a pipe, socket or device; wsfs only reads and writes regular files"
        ),
    }
}

pub(super) fn not_found(path: &CanonicalPath) -> Error {
    Error::FileNotFound {
        path: path.as_str().to_string(),
    }
}

pub(super) fn kept_changing(path: &CanonicalPath) -> Error {
    Error::Unavailable {
        message: format!("'{path}' kept changing while wsfs worked on it; try again"),
    }
}

pub(crate) fn too_deep(path: &CanonicalPath) -> Error {
    Error::invalid_argument(format!(
        "the directory tree under '{path}' is deeper than {MAX_TREE_DEPTH} levels"
    ))
}

pub(super) fn staging_error(e: std::io::Error) -> Error {
    Error::io_while(e, "storing the data being written")
}

/// Refuses reserved and malformed segments. `CanonicalPath` already rules
/// out the latter; this is the last line before a name reaches a syscall.
pub(super) fn check_path(path: &CanonicalPath) -> Result<()> {
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

pub(super) fn is_reserved(name: &CStr) -> bool {
    name.to_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

/// A name listings show: UTF-8 and not reserved.
pub(crate) fn visible_name(name: &CStr) -> Option<&str> {
    name.to_str().ok().filter(|n| !n.starts_with(TEMP_PREFIX))
}

pub(super) fn cname(name: &str, path: &CanonicalPath) -> Result<CString> {
    CString::new(name).map_err(|_| Error::InvalidPath {
        path: path.as_str().to_string(),
        message: "path contains a NUL byte".into(),
    })
}

/// `child` for messages, also when its name is not UTF-8.
pub(super) fn child_path(dir: &CanonicalPath, name: &CStr) -> CanonicalPath {
    dir.join(&name.to_string_lossy())
        .unwrap_or_else(|_| dir.clone())
}

/// The entries of a directory except `.` and `..`, with their `d_type`.
pub(crate) fn read_entries(dir: impl AsFd) -> std::result::Result<Vec<(CString, FileType)>, Errno> {
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
pub(crate) fn entry_kind(dir: impl AsFd, name: &CStr, ft: FileType) -> Option<Kind> {
    match ft {
        FileType::Unknown => stat_at(dir, name).ok().map(|s| s.kind),
        ft => Some(Kind::from_file_type(ft)),
    }
}

/// Why a directory component could not be opened.
pub(super) enum Blocked {
    Missing,
    Symlink,
    NotADirectory,
    Io(Errno),
}

pub(super) fn classify(dir: impl AsFd, name: &str, e: Errno) -> Blocked {
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
pub(super) fn open_regular(
    dir: impl AsFd,
    name: &CStr,
    path: &CanonicalPath,
) -> Result<(File, Stat)> {
    // Checked before opening so that a device is never opened; checked
    // again on the descriptor in case the entry changed in between.
    check_regular(&stat_at(dir.as_fd(), name).map_err(|e| io(e, path))?, path)?;
    open_listed_regular(dir, name, path)
}

/// [`open_regular`] of an entry a walk just listed as a regular file: the
/// listing's `d_type` (or its `statx` where the filesystem gives none) is
/// the check before opening, so the file costs one `openat` and one
/// `statx` on the descriptor. `dir` is the descriptor the walk listed it
/// in, opened without following links from the root; a directory moved
/// meanwhile cannot leave the root's mount (a rename across mounts fails).
pub(super) fn open_listed_regular(
    dir: impl AsFd,
    name: impl rustix::path::Arg,
    path: &CanonicalPath,
) -> Result<(File, Stat)> {
    let fd = rustix::fs::openat(dir, name, READ_FLAGS, Mode::empty()).map_err(|e| match e {
        Errno::LOOP => symlink_denied(path, true),
        e => io(e, path),
    })?;
    let st = stat_fd(&fd).map_err(|e| io(e, path))?;
    check_regular(&st, path)?;
    Ok((File::from(fd), st))
}

/// Refuses what is not a regular file, saying what it is.
fn check_regular(st: &Stat, path: &CanonicalPath) -> Result<()> {
    match st.kind {
        Kind::File => Ok(()),
        Kind::Dir => Err(Error::IsADirectory {
            path: path.as_str().to_string(),
        }),
        Kind::Symlink => Err(symlink_denied(path, true)),
        Kind::Special => Err(not_regular(path)),
    }
}

/// Opens the non-root `path` beneath `root` in one call, with `flags`;
/// `None` on any failure, for the component walk to answer (and name the
/// culprit).
pub(super) fn open_beneath(root: &OwnedFd, path: &CanonicalPath, flags: OFlags) -> Option<OwnedFd> {
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
    // Only when the length is not right yet (a hole at the end, or a
    // longer file written over): ext4 truncates even to the same length,
    // a journal transaction per file.
    if to.metadata()?.len() != to_offset + len {
        to.set_len(to_offset + len)?;
    }
    Ok(len)
}

/// Copies `from[start..stop]` to `to` at `to_offset + start`; returns the
/// bytes copied (fewer when `from` ends early).
pub(super) fn copy_range(
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
pub(super) fn rename_noreplace(
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
pub(super) fn read_link(dir: impl AsFd, name: &CStr, path: &CanonicalPath) -> Result<CString> {
    rustix::fs::readlinkat(dir, name, Vec::new()).map_err(|e| match e {
        Errno::INVAL => kept_changing(path),
        e => io(e, path),
    })
}

pub(super) fn open_trusted_dir(path: &Path) -> Result<OwnedFd> {
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

impl DirectoryBackend {
    /// A fresh descriptor for the root, for a walk that descends from it
    /// (the snapshot store's tree walk).
    pub(crate) fn root_dir(&self) -> Result<OwnedFd> {
        reopen(&self.root).map_err(|e| io(e, &CanonicalPath::root()))
    }

    /// Opens the directory at `path` beneath the root, never through a
    /// symlink. `Ok(None)` when a component is missing; a component that is
    /// a symlink is `PermissionDenied`, a file `NotADirectory`.
    pub(super) fn open_dir(&self, path: &CanonicalPath) -> Result<Option<OwnedFd>> {
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
    pub(super) fn make_dirs(&self, path: &CanonicalPath) -> Result<OwnedFd> {
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
    pub(super) fn open_file(&self, path: &CanonicalPath) -> Result<(File, Stat)> {
        let (dir, name) = self.parent_dir(path, false, path)?;
        open_regular(&dir, &cname(name, path)?, path)
    }

    /// The parent directory of a non-root `path` and its last name. A
    /// missing parent is `FileNotFound` naming `missing`.
    pub(super) fn parent_dir<'p>(
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
}
