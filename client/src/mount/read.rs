//! Reads and directory listings: bytes from the staging file or the
//! server, symlink targets, and the entries readdir pages through.

use super::attr::file_type;
use super::dispatch::WsfsFs;
use super::errno::local;
use super::inodes::ROOT;
use super::shared::{Handle, Shared};
use super::staging::Staged;
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyOpen,
};
use futures::StreamExt;
use std::sync::Arc;
use std::time::SystemTime;
use wsfs::{
    ByteRange, CanonicalPath, FileKind, Filesystem as _, Metadata, Permissions, MAX_CHUNK_SIZE,
};

impl Shared {
    /// Up to `len` bytes at `offset` from the server; none past the end.
    pub(super) async fn fetch(
        &self,
        path: &CanonicalPath,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, Errno> {
        let range = ByteRange {
            offset,
            limit: Some(len),
        };
        let read = || async {
            let mut stream = self.session.read_bytes(path, range, MAX_CHUNK_SIZE).await?;
            let mut out = Vec::with_capacity(stream.length as usize);
            while let Some(chunk) = stream.chunks.next().await {
                out.extend_from_slice(&chunk?);
            }
            Ok(out)
        };
        match self.retry(read).await {
            Err(e) if e == Errno::EINVAL => Ok(Vec::new()),
            other => other,
        }
    }

    /// Fetches every byte of `[offset, end)` the staging file lacks.
    pub(super) async fn fill(
        &self,
        path: &CanonicalPath,
        staged: &Staged,
        gaps: Vec<(u64, u64)>,
    ) -> Result<(), Errno> {
        for (start, end) in gaps {
            let mut at = start;
            while at < end {
                let len = (end - at).min(MAX_CHUNK_SIZE as u64 * 4);
                let bytes = self.fetch(path, at, len).await?;
                if bytes.is_empty() {
                    break;
                }
                staged.fill(at, &bytes).map_err(|e| local(&e))?;
                at += bytes.len() as u64;
            }
        }
        Ok(())
    }

    /// The entries of directory `ino` for handle `fh`, listed at its first
    /// readdir.
    pub(super) async fn listing(&self, ino: u64, fh: u64) -> Result<Arc<Vec<Metadata>>, Errno> {
        if let Some(Handle::Dir {
            listing: Some(listing),
        }) = self.handles().get(&fh)
        {
            return Ok(listing.clone());
        }
        let (path, _) = self.path(ino)?;
        self.settle_dir(&path).await;
        let listing = Arc::new(self.retry(|| self.session.list(&path, 1)).await?.entries);
        if let Some(Handle::Dir { listing: slot }) = self.handles().get_mut(&fh) {
            *slot = Some(listing.clone());
        }
        Ok(listing)
    }

    /// `.`, `..` and the entries, each with an inode number (known ones
    /// keep theirs; readdir does not count as a lookup, so new ones are
    /// only numbered).
    pub(super) fn dir_entries(
        &self,
        ino: u64,
        entries: &[Metadata],
    ) -> Vec<(String, u64, FileKind)> {
        let mut inodes = self.inodes();
        let parent = inodes
            .get(ino)
            .and_then(|n| n.path.parent())
            .and_then(|p| inodes.at(&p))
            .unwrap_or(ROOT);
        let mut out = vec![
            (".".to_string(), ino, FileKind::Directory),
            ("..".to_string(), parent, FileKind::Directory),
        ];
        for meta in entries {
            let entry_ino = inodes.number(&meta.path, meta.kind);
            out.push((meta.name().to_string(), entry_ino, meta.kind));
        }
        out
    }
}

impl WsfsFs {
    pub(super) fn do_readlink(&self, ino: INodeNo, reply: ReplyData) {
        self.spawn(move |s| async move {
            let result = async {
                let (path, _) = s.path(ino.0)?;
                let meta = s.stat(&path).await?;
                meta.symlink_target.ok_or(Errno::EINVAL)
            }
            .await;
            match result {
                Ok(target) => reply.data(target.as_bytes()),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_read(&self, ino: INodeNo, offset: u64, size: u32, reply: ReplyData) {
        let ino = ino.0;
        self.spawn(move |s| async move {
            let result = async {
                match s.staged(ino) {
                    Some(staged) => {
                        let (end, gaps) = staged.missing(offset, size.into());
                        if !gaps.is_empty() {
                            let (path, _) = s.path(ino)?;
                            s.fill(&path, &staged, gaps).await?;
                        }
                        staged.read_local(offset, end).map_err(|e| local(&e))
                    }
                    None => {
                        let (path, _) = s.path(ino)?;
                        s.fetch(&path, offset, size.into()).await
                    }
                }
            }
            .await;
            match result {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_opendir(&self, reply: ReplyOpen) {
        let fh = self.shared.add_handle(Handle::Dir { listing: None });
        // The kernel keeps the listing between opens: its own creates,
        // removes and renames drop it, and the Watch stream drops it for
        // changes made elsewhere (invalidate.rs).
        reply.opened(
            FileHandle(fh),
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        );
    }

    pub(super) fn do_readdir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.spawn(move |s| async move {
            let entries = match s.listing(ino.0, fh.0).await {
                Ok(entries) => entries,
                Err(e) => return reply.error(e),
            };
            for (i, (name, entry_ino, kind)) in s
                .dir_entries(ino.0, &entries)
                .into_iter()
                .enumerate()
                .skip(offset as usize)
            {
                if reply.add(INodeNo(entry_ino), i as u64 + 1, file_type(kind), name) {
                    break;
                }
            }
            reply.ok();
        });
    }

    pub(super) fn do_readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.spawn(move |s| async move {
            let entries = match s.listing(ino.0, fh.0).await {
                Ok(entries) => entries,
                Err(e) => return reply.error(e),
            };
            let dir_attr = s.attr_of(
                ino.0,
                FileKind::Directory,
                0,
                SystemTime::now(),
                SystemTime::now(),
                Permissions::DIRECTORY_DEFAULT,
            );
            let ttl = s.ttl();
            for i in (offset as usize)..entries.len() + 2 {
                let next = i as u64 + 1;
                let full = match i {
                    0 => reply.add(ino, next, ".", &ttl, &dir_attr, Generation(0)),
                    1 => reply.add(ino, next, "..", &ttl, &dir_attr, Generation(0)),
                    _ => {
                        let meta = &entries[i - 2];
                        // Each entry counts as a lookup the kernel will forget.
                        let entry_ino = s.inodes().learn(&meta.path, meta.kind);
                        let attr = s.attr(entry_ino, meta);
                        let full = reply.add(
                            INodeNo(entry_ino),
                            next,
                            meta.name(),
                            &ttl,
                            &attr,
                            Generation(0),
                        );
                        if full {
                            s.inodes().forget(entry_ino, 1);
                        }
                        full
                    }
                };
                if full {
                    break;
                }
            }
            reply.ok();
        });
    }

    pub(super) fn do_releasedir(&self, fh: FileHandle, reply: ReplyEmpty) {
        self.shared.handles().remove(&fh.0);
        reply.ok();
    }
}
