//! Attributes and entries: what the kernel is told a file is (lookup,
//! getattr, setattr), and the conversions from wsfs's kinds and
//! permissions to the kernel's.

use super::dispatch::WsfsFs;
use super::errno::local;
use super::inodes::ROOT;
use super::shared::Shared;
use super::staging::Staged;
use fuser::{Errno, FileAttr, FileType, Generation, INodeNo, ReplyAttr, ReplyEntry, TimeOrNow};
use std::ffi::OsStr;
use std::time::{Duration, Instant, SystemTime};
use wsfs::{Attributes, FileKind, Filesystem as _, Metadata, PatchOptions, Permissions};

/// `st_blksize`: the buffer size programs pick for their reads and writes.
const BLOCK_SIZE: u32 = 128 * 1024;
/// How long the kernel remembers that a name does not exist. Short: a
/// name made elsewhere while the Watch stream is reconnecting shows up
/// after this at the latest.
const NEGATIVE_TTL: Duration = Duration::from_secs(5);

impl Shared {
    /// The kernel's attributes for `meta`, with the staged length and time
    /// of a file being written.
    pub(super) fn attr(&self, ino: u64, meta: &Metadata) -> FileAttr {
        if let Some(known) = self.newer_than(ino, meta.version) {
            return known;
        }
        let (size, modified, permissions) = match self.staged(ino) {
            Some(staged) => (
                staged.size(),
                staged.modified(),
                staged.permissions().unwrap_or(meta.permissions),
            ),
            None => (meta.size, meta.modified, meta.permissions),
        };
        let attr = self.attr_of(ino, meta.kind, size, modified, meta.created, permissions);
        self.remember(ino, attr)
    }

    /// What the mount told the kernel of `ino`, when it knows a version
    /// newer than `version`: an answer that left the server before one of
    /// the mount's own commits landed (and arrived after it) must not take
    /// the file back to its older length, which would make the kernel drop
    /// the bytes just written from its cache.
    fn newer_than(&self, ino: u64, version: u64) -> Option<FileAttr> {
        let newer = self
            .inodes()
            .get(ino)
            .is_some_and(|node| node.cached_version.is_some_and(|v| v > version));
        newer.then(|| self.known_attr(ino)).flatten()
    }

    /// Keeps `attr` as what the kernel was told of `ino`.
    pub(super) fn remember(&self, ino: u64, attr: FileAttr) -> FileAttr {
        if let Some(node) = self.inodes().get_mut(ino) {
            node.attr = Some(attr);
            node.attr_at = Instant::now();
        }
        attr
    }

    /// [`known_attr`](Shared::known_attr), when read from the server within
    /// the cache lifetime: what a directory's own creates and removes, which
    /// do not refresh its modification time, leave stale for no longer.
    fn fresh_attr(&self, ino: u64) -> Option<FileAttr> {
        let fresh = self
            .inodes()
            .get(ino)
            .is_some_and(|node| node.attr_at.elapsed() < self.ttl());
        fresh.then(|| self.known_attr(ino)).flatten()
    }

    /// The attributes of `ino` as last told, with the staged length and
    /// time of a file being written; `None` when they may be stale.
    pub(super) fn known_attr(&self, ino: u64) -> Option<FileAttr> {
        let (mut attr, staged) = {
            let inodes = self.inodes();
            let node = inodes.get(ino).filter(|n| !n.unlinked)?;
            (node.attr?, node.staged.clone())
        };
        if let Some(staged) = staged {
            attr.size = staged.size();
            attr.blocks = attr.size.div_ceil(512);
            attr.mtime = staged.modified();
            attr.atime = attr.mtime;
            attr.ctime = attr.mtime;
            if let Some(permissions) = staged.permissions() {
                attr.perm = permissions.bits() as u16;
            }
        }
        Some(attr)
    }

    /// The attributes of `ino` when the setattr asked changes nothing the
    /// mount reports: the owner it shows, the bits it has, the length a
    /// staged file has. `None`: the server must be asked.
    fn unchanged_by(&self, ino: u64, asked: &Setattr) -> Option<FileAttr> {
        let attr = self.known_attr(ino)?;
        let same_owner =
            asked.uid.is_none_or(|u| u == attr.uid) && asked.gid.is_none_or(|g| g == attr.gid);
        let same_mode = asked
            .mode
            .is_none_or(|m| Permissions::masked(m).bits() as u16 == attr.perm);
        let same_size = asked
            .size
            .is_none_or(|len| self.staged(ino).is_some() && len == attr.size);
        (same_owner && same_mode && same_size && asked.mtime.is_none()).then_some(attr)
    }

    /// A chmod or utimens (nothing else) of a file open and staged with
    /// changes waiting: its bits and time go into the staging, with the
    /// bytes at the commit, and the attributes are answered at once.
    /// `None` (having changed nothing, or only what the slow path sets
    /// again): the file is not such a file, or it was closed meanwhile and
    /// its commit must be queued.
    fn set_while_open(&self, ino: u64, asked: &Setattr) -> Option<FileAttr> {
        let open_file = |s: &Self| {
            s.inodes()
                .get(ino)
                .is_some_and(|n| n.open > 0 && !n.unlinked && n.kind == FileKind::File)
        };
        if asked.size.is_some() || !open_file(self) {
            return None;
        }
        let staged = self.staged(ino).filter(|staged| staged.busy())?;
        asked.stage_into(&staged);
        // Still open: its close commits what was just set.
        open_file(self).then(|| self.known_attr(ino)).flatten()
    }

    pub(super) fn attr_of(
        &self,
        ino: u64,
        kind: FileKind,
        size: u64,
        modified: SystemTime,
        created: SystemTime,
        permissions: Permissions,
    ) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: modified,
            mtime: modified,
            ctime: modified,
            crtime: created,
            kind: file_type(kind),
            perm: permissions.bits() as u16,
            nlink: if kind == FileKind::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK_SIZE,
            flags: 0,
        }
    }

    /// The attributes of `ino` now.
    pub(super) async fn getattr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let (path, unlinked, staged) = {
            let inodes = self.inodes();
            let node = inodes.get(ino).ok_or(Errno::ENOENT)?;
            (node.path.clone(), node.unlinked, node.staged.clone())
        };
        if unlinked {
            // Only its open handles still reach it, through the staged copy.
            let staged = staged.ok_or(Errno::ENOENT)?;
            let now = staged.modified();
            return Ok(self.attr_of(
                ino,
                FileKind::File,
                staged.size(),
                now,
                now,
                Permissions::FILE_DEFAULT,
            ));
        }
        match self.stat(&path).await {
            Ok(meta) => Ok(self.attr(ino, &meta)),
            Err(_) if ino == ROOT => Ok(self.attr_of(
                ROOT,
                FileKind::Directory,
                0,
                SystemTime::now(),
                SystemTime::now(),
                Permissions::DIRECTORY_DEFAULT,
            )),
            Err(e) => Err(e),
        }
    }
}

impl Shared {
    /// What a lookup answers for a name that does not exist: inode 0,
    /// which the kernel keeps as a negative entry.
    fn absent_attr(&self) -> FileAttr {
        let never = SystemTime::UNIX_EPOCH;
        self.attr_of(
            0,
            FileKind::File,
            0,
            never,
            never,
            Permissions::FILE_DEFAULT,
        )
    }
}

impl WsfsFs {
    pub(super) fn do_lookup(&self, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let path = match self.shared.child(parent.0, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        if self.shared.known.absent(&path) && self.shared.inodes().at(&path).is_none() {
            // A directory the mount made, and no such name in it.
            return reply.entry(&NEGATIVE_TTL, &self.shared.absent_attr(), Generation(0));
        }
        self.spawn(move |s| async move {
            match s.stat(&path).await {
                Ok(meta) => {
                    let ino = s.inodes().learn(&path, meta.kind);
                    reply.entry(&s.ttl(), &s.attr(ino, &meta), Generation(0));
                }
                Err(Errno::ENOENT) => {
                    // Inode 0: the kernel remembers the absence for a
                    // while (the Watch stream drops it when the name is
                    // made elsewhere), so builds and git probing for
                    // missing files ask once.
                    reply.entry(&NEGATIVE_TTL, &s.absent_attr(), Generation(0));
                }
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_getattr(&self, ino: INodeNo, reply: ReplyAttr) {
        // The kernel asks again after its own changes (a create or unlink
        // in a directory, a write): what the mount told it stays true of
        // those; a change from elsewhere drops it (invalidate.rs).
        if let Some(attr) = self.shared.fresh_attr(ino.0) {
            return reply.attr(&self.shared.ttl(), &attr);
        }
        self.spawn(move |s| async move {
            match s.getattr(ino.0).await {
                Ok(attr) => reply.attr(&s.ttl(), &attr),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_setattr(&self, ino: INodeNo, asked: Setattr, reply: ReplyAttr) {
        let Setattr {
            mode, size, mtime, ..
        } = asked;
        if self.read_only() && (mode.is_some() || size.is_some() || mtime.is_some()) {
            return reply.error(Errno::EROFS);
        }
        let ino = ino.0;
        // tar's fchown to the owner the file has, fchmod to the bits it was
        // made with: answered here.
        if let Some(attr) = self.shared.unchanged_by(ino, &asked) {
            return reply.attr(&self.shared.ttl(), &attr);
        }
        // tar's fchmod and futimens of a file it is still writing: into
        // its staging, answered here.
        if let Some(attr) = self.shared.set_while_open(ino, &asked) {
            return reply.attr(&self.shared.ttl(), &attr);
        }
        self.spawn(move |s| async move {
            let result = async {
                let staged = s.staged(ino);
                let unlinked = s.inodes().get(ino).is_none_or(|n| n.unlinked);
                if let Some(len) = size {
                    match &staged {
                        Some(staged) => {
                            staged.truncate(len).map_err(|e| local(&e))?;
                            s.queue_closed(ino).await;
                        }
                        None => {
                            let (path, kind) = s.path(ino)?;
                            if kind == FileKind::Directory {
                                return Err(Errno::EISDIR);
                            }
                            let options = PatchOptions {
                                truncate_to: Some(len),
                                ..PatchOptions::default()
                            };
                            s.patch(&path, options).await?;
                        }
                    }
                }
                let (permissions, modified) = asked.bits_and_time();
                let kind = s.inodes().get(ino).map(|n| n.kind);
                // A link's own times and bits are not kept (the server
                // never changes a link): accepted, as tar expects, and
                // left as they are.
                let kept = !unlinked && kind != Some(FileKind::Symlink);
                let waiting = staged.as_ref().filter(|staged| staged.busy());
                if let (true, Some(staged)) = (kept, waiting) {
                    // Bytes wait for the commit: the bits and time go with
                    // them, in the same patch.
                    asked.stage_into(staged);
                    // Closed already (tar's utimensat after close): into
                    // the queued commit, or a new one.
                    s.queue_closed(ino).await;
                    if let Some(attr) = s.known_attr(ino) {
                        return Ok(attr);
                    }
                } else if kept && (permissions.is_some() || modified.is_some()) {
                    let (path, _) = s.path(ino)?;
                    let attributes = Attributes {
                        permissions,
                        modified,
                        if_version: None,
                    };
                    if let Some(attr) = s.set_attributes_behind(ino, attributes).await {
                        return Ok(attr);
                    }
                    s.retry(|| s.session.set_attributes(&path, attributes))
                        .await?;
                }
                s.getattr(ino).await
            }
            .await;
            match result {
                Ok(attr) => reply.attr(&s.ttl(), &attr),
                Err(e) => reply.error(e),
            }
        });
    }
}

/// What a setattr asks to change (times other than mtime are not kept).
pub(super) struct Setattr {
    pub(super) mode: Option<u32>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) size: Option<u64>,
    pub(super) mtime: Option<TimeOrNow>,
}

impl Setattr {
    /// The bits and the modification time asked, as the session keeps
    /// them.
    fn bits_and_time(&self) -> (Option<Permissions>, Option<SystemTime>) {
        let modified = self.mtime.map(|t| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => SystemTime::now(),
        });
        (self.mode.map(Permissions::masked), modified)
    }

    /// Puts the bits and time asked into `staged`, for its next commit.
    fn stage_into(&self, staged: &Staged) {
        let (permissions, modified) = self.bits_and_time();
        if let Some(permissions) = permissions {
            staged.set_permissions(permissions);
        }
        if let Some(modified) = modified {
            staged.set_modified(modified);
        }
    }
}

pub(super) fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
    }
}

/// What a new file or directory gets: the mode asked less the umask, within
/// the bits wsfs keeps.
pub(super) fn new_permissions(mode: u32, umask: u32) -> Permissions {
    Permissions::masked(mode & !umask)
}
