//! Attributes and entries: what the kernel is told a file is (lookup,
//! getattr, setattr), and the conversions from wsfs's kinds and
//! permissions to the kernel's.

use super::dispatch::WsfsFs;
use super::errno::local;
use super::inodes::ROOT;
use super::shared::Shared;
use fuser::{Errno, FileAttr, FileType, Generation, INodeNo, ReplyAttr, ReplyEntry, TimeOrNow};
use std::ffi::OsStr;
use std::time::{Duration, SystemTime};
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
        let (size, modified) = match self.staged(ino) {
            Some(staged) => (staged.size(), staged.modified()),
            None => (meta.size, meta.modified),
        };
        self.attr_of(
            ino,
            meta.kind,
            size,
            modified,
            meta.created,
            meta.permissions,
        )
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

impl WsfsFs {
    pub(super) fn do_lookup(&self, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let path = match self.shared.child(parent.0, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
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
                    let never = SystemTime::UNIX_EPOCH;
                    let none = s.attr_of(
                        0,
                        FileKind::File,
                        0,
                        never,
                        never,
                        Permissions::FILE_DEFAULT,
                    );
                    reply.entry(&NEGATIVE_TTL, &none, Generation(0));
                }
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_getattr(&self, ino: INodeNo, reply: ReplyAttr) {
        self.spawn(move |s| async move {
            match s.getattr(ino.0).await {
                Ok(attr) => reply.attr(&s.ttl(), &attr),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_setattr(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        size: Option<u64>,
        mtime: Option<TimeOrNow>,
        reply: ReplyAttr,
    ) {
        if self.read_only() && (mode.is_some() || size.is_some() || mtime.is_some()) {
            return reply.error(Errno::EROFS);
        }
        let ino = ino.0;
        self.spawn(move |s| async move {
            let result = async {
                let staged = s.staged(ino);
                let unlinked = s.inodes().get(ino).is_none_or(|n| n.unlinked);
                if let Some(len) = size {
                    match &staged {
                        Some(staged) => staged.truncate(len).map_err(|e| local(&e))?,
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
                let permissions = mode.map(Permissions::masked);
                let modified = mtime.map(|t| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                });
                let kind = s.inodes().get(ino).map(|n| n.kind);
                // A link's own times and bits are not kept (the server
                // never changes a link): accepted, as tar expects, and
                // left as they are.
                let kept = !unlinked && kind != Some(FileKind::Symlink);
                if kept && (permissions.is_some() || modified.is_some()) {
                    let (path, _) = s.path(ino)?;
                    let attributes = Attributes {
                        permissions,
                        modified,
                        if_version: None,
                    };
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
