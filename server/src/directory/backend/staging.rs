//! Writes: staged files, temporary entries, and moving them into place
//! (commit, commit aside, displaced files).

use super::owner::claim;
use super::sys::{
    check_path, cname, copy_data, io, not_regular, open_regular, rename_noreplace,
    set_attributes_fd, staging_error, stat_at, symlink_denied, Kind, CREATE_FLAGS, DIR_FLAGS,
};
use super::walk::remove_entry;
use super::DirectoryBackend;
use crate::backend::{CommitMode, StagedFile, TEMP_PREFIX};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Metadata, Result};

/// A temporary entry owned by the server, removed on drop unless kept.
pub(super) struct TempEntry {
    pub(super) dir: Arc<OwnedFd>,
    pub(super) name: CString,
    pub(super) is_dir: bool,
    pub(super) armed: bool,
}

impl TempEntry {
    pub(super) fn new_name() -> CString {
        let name = format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple());
        CString::new(name).unwrap_or_default()
    }

    /// Takes charge of the existing entry `dir/name`.
    pub(super) fn adopt(dir: &Arc<OwnedFd>, name: CString, is_dir: bool) -> TempEntry {
        TempEntry {
            dir: dir.clone(),
            name,
            is_dir,
            armed: true,
        }
    }

    /// Creates an empty temporary file in `dir`.
    pub(super) fn file(dir: &Arc<OwnedFd>) -> std::result::Result<(TempEntry, File), Errno> {
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
    pub(super) fn dir(dir: &Arc<OwnedFd>) -> std::result::Result<(TempEntry, OwnedFd), Errno> {
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
    pub(super) fn keep(mut self) {
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

/// The most bytes a write keeps in memory before it makes a staged file:
/// a small write makes its temporary file only at the commit, in place on
/// the runtime's thread (see the workspace's `Cost`), rather than one at
/// the start and its writes on the blocking pool.
///
/// (Making a small file's temporary file beside its destination instead,
/// so that its inode is made where it will live, was tried and dropped: a
/// crash between its making and its rename left a reserved name inside
/// the workspace, where a container sees it; the staging directory is
/// emptied at every start.)
pub const SMALL_STAGE_BYTES: u64 = 64 * 1024;

/// Bytes being written: in memory while they are few, then in a temporary
/// file in the staging directory.
pub struct DirectoryStaged {
    pub(super) held: Held,
    pub(super) len: u64,
    /// Where the bytes go when they outgrow memory.
    pub(super) staging: Arc<OwnedFd>,
}

pub(super) enum Held {
    /// At most [`SMALL_STAGE_BYTES`].
    Memory(Vec<u8>),
    /// A temporary file, open until [`StagedFile::finish`].
    File(Option<File>, TempEntry),
}

/// What a commit reads the staged bytes from.
pub(super) enum Source {
    Memory(Vec<u8>),
    File(File),
}

impl Source {
    /// Writes every staged byte into `to` from `offset`.
    pub(super) fn copy_to(&self, to: &File, offset: u64) -> std::io::Result<()> {
        match self {
            Source::Memory(bytes) => to.write_all_at(bytes, offset),
            Source::File(from) => copy_data(from, to, offset).map(drop),
        }
    }

    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Source::Memory(bytes) => {
                let start = offset as usize;
                let end = start.saturating_add(buf.len());
                let part = bytes
                    .get(start..end)
                    .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(part);
                Ok(())
            }
            Source::File(from) => from.read_exact_at(buf, offset),
        }
    }
}

impl DirectoryStaged {
    /// Nothing written yet, nothing made.
    pub(super) fn new(staging: &Arc<OwnedFd>) -> DirectoryStaged {
        DirectoryStaged {
            held: Held::Memory(Vec::new()),
            len: 0,
            staging: staging.clone(),
        }
    }

    /// A staged file already in the staging directory, `len` bytes long.
    pub(super) fn adopted(staging: &Arc<OwnedFd>, temp: TempEntry, len: u64) -> DirectoryStaged {
        DirectoryStaged {
            held: Held::File(None, temp),
            len,
            staging: staging.clone(),
        }
    }

    /// The bytes in memory, when bytes up to `end` still fit there.
    fn in_memory(&mut self, end: u64) -> Option<&mut Vec<u8>> {
        match &mut self.held {
            Held::Memory(bytes) if end <= SMALL_STAGE_BYTES => Some(bytes),
            _ => None,
        }
    }

    /// The open staged file, made from the bytes in memory if need be
    /// (they are all `len` bytes, so it is left positioned at its end).
    fn file(&mut self) -> Result<&mut File> {
        if let Held::Memory(bytes) = &self.held {
            let (temp, mut file) =
                TempEntry::file(&self.staging).map_err(|e| staging_error(e.into()))?;
            file.write_all(bytes).map_err(staging_error)?;
            self.held = Held::File(Some(file), temp);
        }
        match &mut self.held {
            Held::File(Some(file), _) => Ok(file),
            _ => Err(Error::internal("a finished staged file was written to")),
        }
    }

    /// The staged bytes, and the staged file's entry when there is one (in
    /// the staging directory, a directory only the server writes; reopened
    /// by its name when `finish` closed it).
    pub(super) fn into_source(self) -> Result<(Source, Option<TempEntry>)> {
        match self.held {
            Held::Memory(bytes) => Ok((Source::Memory(bytes), None)),
            Held::File(Some(file), temp) => Ok((Source::File(file), Some(temp))),
            Held::File(None, temp) => {
                let file = rustix::fs::openat(
                    temp.dir.as_fd(),
                    &temp.name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map(File::from)
                .map_err(|e| staging_error(e.into()))?;
                Ok((Source::File(file), Some(temp)))
            }
        }
    }
}

impl DirectoryStaged {
    /// Appends `len` zero bytes as a hole: they cost no disk.
    pub fn write_hole(&mut self, len: u64) -> Result<()> {
        use std::io::Seek;
        let end = self.len + len;
        if let Some(bytes) = self.in_memory(end) {
            bytes.resize(end as usize, 0);
            self.len = end;
            return Ok(());
        }
        let file = self.file()?;
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
        let end = self.len + chunk.len() as u64;
        if let Some(bytes) = self.in_memory(end) {
            bytes.extend_from_slice(chunk);
            self.len = end;
            return Ok(());
        }
        self.file()?.write_all(chunk).map_err(staging_error)?;
        self.len = end;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    /// Closes the staged file; bytes still in memory are put in one first,
    /// so that an intent record can name it.
    fn finish(&mut self) -> Result<()> {
        if let Held::Memory(_) = self.held {
            self.file()?;
        }
        if let Held::File(file, _) = &mut self.held {
            *file = None;
        }
        Ok(())
    }

    /// `None` while the bytes are in memory ([`Self::finish`] puts them in
    /// a file first).
    fn journal_name(&self) -> Option<String> {
        match &self.held {
            Held::Memory(_) => None,
            Held::File(_, temp) => temp.name.to_str().ok().map(str::to_string),
        }
    }
}

/// How [`DirectoryBackend::place`] treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Replace {
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

impl DirectoryBackend {
    /// Where temporary entries for `dest` are made: the staging directory,
    /// or the destination directory when staging is on another filesystem.
    pub(super) fn temp_home(&self, dest: &Arc<OwnedFd>) -> (Arc<OwnedFd>, bool) {
        if self.cross_device.load(Ordering::Relaxed) {
            (dest.clone(), false)
        } else {
            (self.staging.clone(), true)
        }
    }

    /// Moves `from/from_name` to `to/to_name`, treating an existing
    /// destination as `replace` says. True when it was swapped
    /// ([`Replace::FileAside`]): `from/from_name` now holds the old entry.
    pub(super) fn place(
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
    pub(super) fn move_aside(
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
    pub(super) fn install(
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

    pub(super) fn commit_with(
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
        let (source, mut staged_temp) = staged.into_source()?;
        let displaced = self.install(&dir, &name, path, replace, |home, in_staging| {
            let fail = |e: std::io::Error| staging_error(e);
            // The staged file itself moves into place when it can.
            let made;
            let (temp, target) = match (current.is_none() && in_staging, &source) {
                (true, Source::File(staged_file)) if staged_temp.is_some() => {
                    (staged_temp.take().expect("checked"), staged_file)
                }
                _ => {
                    let (temp, file) = TempEntry::file(home).map_err(|e| fail(e.into()))?;
                    let mut offset = 0;
                    if let Some(current) = &current {
                        offset =
                            copy_data(current, &file, 0).map_err(|e| Error::from_io(e, path))?;
                    }
                    source.copy_to(&file, offset).map_err(fail)?;
                    made = file;
                    (temp, &made)
                }
            };
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
