//! Reads and directory listings: bytes from the staging file or the
//! server, symlink targets, and the entries readdir pages through.
//!
//! A file read in order (as `cat`, `cp` and compilers read) is read ahead:
//! [`ReadAhead`] keeps [`AHEAD`] ranged reads of a block ([`BLOCK`] bytes)
//! each in flight past a sequential reader and answers the kernel's next
//! requests from those blocks. Each read is drained as it arrives: a
//! stream left waiting for a slow reader would hold the connection's
//! flow-control window, which every call of the mount shares. The blocks
//! carry the version they were read at and serve only a reader of that
//! same version; a change the Watch stream reports drops the file's blocks
//! (invalidate.rs).
//!
//! Directories are opened by the kernel alone: the first opendir is
//! answered `ENOSYS`, which tells the kernel to send no opendir or
//! releasedir again and to keep each directory's listing in its cache
//! ([`do_opendir`](WsfsFs::do_opendir)). `git status` opens every directory
//! of a tree: two requests fewer each. The kernel reads a listing in
//! pieces, each at the offset where the last ended; [`Paging`] keeps the
//! listing a read from offset 0 took, by directory, until the read reaches
//! its end, so that every piece comes from one listing.

use super::attr::file_type;
use super::dispatch::WsfsFs;
use super::errno::local;
use super::inodes::ROOT;
use super::shared::Shared;
use super::staging::Staged;
use bytes::{Bytes, BytesMut};
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyOpen,
};
use futures::future::{BoxFuture, FutureExt, Shared as SharedFuture};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};
use wsfs::{
    ByteRange, CanonicalPath, FileKind, Filesystem as _, Metadata, Permissions, MAX_CHUNK_SIZE,
};

/// The bytes of one read-ahead block: one ranged read, one chunk on the
/// wire.
pub(super) const BLOCK: u64 = MAX_CHUNK_SIZE as u64;

/// Blocks read ahead of a sequential reader, in flight at once (besides
/// its own and the one before it).
pub(super) const AHEAD: u64 = 4;

/// Files read ahead at once; the least recently read one gives way. With
/// [`AHEAD`] and [`BLOCK`] this bounds read-ahead memory to
/// `READERS * (AHEAD + 2) * BLOCK` = 24 MiB (docs/MOUNT.md).
pub(super) const READERS: usize = 4;

/// The kernel's own read-ahead on the mount, in KiB: a block, so that it
/// asks for the next block while a reader copies the one before. FUSE
/// starts every mount at 128 KiB and its INIT reply can only lower that.
const KERNEL_READAHEAD_KIB: u64 = BLOCK / 1024;

/// Raises the kernel's read-ahead of the mount at `dir` (the
/// `read_ahead_kb` of its backing device, this mount's alone) to
/// [`KERNEL_READAHEAD_KIB`]. Its first call into the mount waits for the
/// kernel's INIT, which would otherwise set it back. Writing it takes
/// root: elsewhere the kernel's default stays (docs/MOUNT.md says how to
/// raise it by hand), and reads are slower but as correct.
pub(super) async fn widen_kernel_readahead(dir: std::path::PathBuf) {
    let _ = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(&dir)?.dev();
        let knob = format!(
            "/sys/class/bdi/{}:{}/read_ahead_kb",
            libc::major(dev),
            libc::minor(dev)
        );
        std::fs::write(knob, KERNEL_READAHEAD_KIB.to_string())
    })
    .await;
}

/// A block's bytes, of the file at `version`.
#[derive(Clone)]
pub(super) struct Fetched {
    version: u64,
    bytes: Bytes,
}

type Pending = SharedFuture<BoxFuture<'static, Result<Fetched, Errno>>>;

/// One block being read, or read: its read is cancelled when the block is
/// dropped.
struct Block {
    fetched: Pending,
    task: tokio::task::AbortHandle,
}

impl Drop for Block {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A reader's place in one file.
struct Window {
    /// Where the last read ended: a read starting there goes on in order.
    next: u64,
    /// Blocks by index (offset / [`BLOCK`]), the reader's own and those
    /// ahead of it.
    blocks: BTreeMap<u64, Block>,
    /// Whether the reader goes in order (its blocks are read ahead).
    in_order: bool,
    used: Instant,
}

/// The read-ahead windows, by inode, at most [`READERS`].
#[derive(Default)]
pub(super) struct ReadAhead {
    windows: Mutex<HashMap<u64, Window>>,
}

impl ReadAhead {
    fn windows(&self) -> MutexGuard<'_, HashMap<u64, Window>> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops what is read ahead of `ino` (changed elsewhere, closed).
    pub(super) fn forget(&self, ino: u64) {
        self.windows().remove(&ino);
    }
}

/// The directories whose listing is being read, at most [`PAGED`].
const PAGED: usize = 64;

/// The listings being read in pieces, by directory inode (see the
/// module's notes). One past [`PAGED`] drops the oldest: its reader's next
/// piece lists the directory again.
#[derive(Default)]
pub(super) struct Paging {
    listings: Mutex<Paged>,
}

#[derive(Default)]
struct Paged {
    by_ino: HashMap<u64, Arc<Vec<Metadata>>>,
    /// The inodes of `by_ino`, oldest first.
    order: std::collections::VecDeque<u64>,
}

impl Paging {
    fn lock(&self) -> MutexGuard<'_, Paged> {
        self.listings.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, ino: u64) -> Option<Arc<Vec<Metadata>>> {
        self.lock().by_ino.get(&ino).cloned()
    }

    fn put(&self, ino: u64, listing: Arc<Vec<Metadata>>) {
        let paged = &mut *self.lock();
        if paged.by_ino.insert(ino, listing).is_none() {
            paged.order.push_back(ino);
        }
        while paged.order.len() > PAGED {
            if let Some(oldest) = paged.order.pop_front() {
                paged.by_ino.remove(&oldest);
            }
        }
    }

    /// The read of `ino`'s listing reached its end, or the directory
    /// changed (invalidate.rs): its next piece lists it again.
    pub(super) fn forget(&self, ino: u64) {
        let paged = &mut *self.lock();
        if paged.by_ino.remove(&ino).is_some() {
            paged.order.retain(|&i| i != ino);
        }
    }
}

impl Shared {
    /// Up to `len` bytes at `offset` from the server; none past the end.
    pub(super) async fn fetch(
        &self,
        path: &CanonicalPath,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, Errno> {
        match self.retry(|| self.read_range(path, offset, len)).await {
            Ok(fetched) => Ok(fetched.bytes),
            Err(e) if e == Errno::EINVAL => Ok(Bytes::new()),
            Err(e) => Err(e),
        }
    }

    /// One ranged read, drained: up to `len` bytes at `offset`, with the
    /// version they are of.
    async fn read_range(
        &self,
        path: &CanonicalPath,
        offset: u64,
        len: u64,
    ) -> wsfs::Result<Fetched> {
        let range = ByteRange {
            offset,
            limit: Some(len),
        };
        let mut stream = self.session.read_bytes(path, range, MAX_CHUNK_SIZE).await?;
        let version = stream.version;
        let first = match stream.chunks.next().await {
            Some(chunk) => chunk?,
            None => Bytes::new(),
        };
        // One chunk (up to 1 MiB: a block) is kept as it came, uncopied.
        let Some(second) = stream.chunks.next().await else {
            return Ok(Fetched {
                version,
                bytes: first,
            });
        };
        let mut out = BytesMut::with_capacity(stream.length as usize);
        out.extend_from_slice(&first);
        out.extend_from_slice(&second?);
        while let Some(chunk) = stream.chunks.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(Fetched {
            version,
            bytes: out.freeze(),
        })
    }

    /// `size` bytes at `offset` of `ino` (at `path`), not staged: from the
    /// read-ahead window when the reader goes in order, else one ranged
    /// read.
    async fn read_server(
        self: &Arc<Self>,
        ino: u64,
        path: &CanonicalPath,
        offset: u64,
        size: u64,
    ) -> Result<Bytes, Errno> {
        let (version, file_size) = {
            let inodes = self.inodes();
            let node = inodes.get(ino).ok_or(Errno::ENOENT)?;
            (node.cached_version, node.attr.map(|a| a.size))
        };
        let end = offset.saturating_add(size);
        let wanted = match version {
            Some(_) if size > 0 => self.ahead(ino, path, offset, end, file_size),
            _ => None,
        };
        if let (Some(version), Some(wanted)) = (version, wanted) {
            let mut blocks = Some(Vec::with_capacity(wanted.len()));
            for (index, pending) in wanted {
                match (pending.await, &mut blocks) {
                    (Ok(fetched), Some(got)) => got.push((index, fetched)),
                    _ => blocks = None,
                }
            }
            if let Some(bytes) = blocks.and_then(|b| assemble(b, version, offset, end)) {
                return Ok(bytes);
            }
            // A block of another version, or failed: this read goes
            // alone, and the window starts again.
            self.readahead.forget(ino);
        }
        self.fetch(path, offset, size).await
    }

    /// `size` bytes at `offset` of `ino` when its window holds them read
    /// already: answered on the kernel's thread, without a task.
    fn read_ready(self: &Arc<Self>, ino: u64, offset: u64, size: u64) -> Option<Bytes> {
        let (path, version, file_size) = {
            let inodes = self.inodes();
            let node = inodes.get(ino)?;
            if node.unlinked || node.staged.is_some() || size == 0 {
                return None;
            }
            (
                node.path.clone(),
                node.cached_version?,
                node.attr.map(|a| a.size),
            )
        };
        let end = offset.saturating_add(size);
        let wanted = self.ahead(ino, &path, offset, end, file_size)?;
        let blocks = wanted
            .into_iter()
            .map(|(index, pending)| match pending.peek() {
                Some(Ok(fetched)) => Some((index, fetched.clone())),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        assemble(blocks, version, offset, end)
    }

    /// Moves the window of `ino` to a read of `[offset, end)`: the blocks
    /// it needs, with [`AHEAD`] more asked of the stream behind them;
    /// `None` when the read is not in order (it goes alone).
    fn ahead(
        self: &Arc<Self>,
        ino: u64,
        path: &CanonicalPath,
        offset: u64,
        end: u64,
        file_size: Option<u64>,
    ) -> Option<Vec<(u64, Pending)>> {
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        let mut windows = self.readahead.windows();
        let window = windows.get(&ino);
        let going_on = window.is_some_and(|w| w.in_order && w.blocks.contains_key(&first));
        if !going_on {
            let behind = window
                .and_then(|w| w.blocks.first_key_value())
                .is_some_and(|(&b, _)| first < b);
            if behind {
                // A late request of the kernel's own read-ahead: alone,
                // the window unmoved.
                return None;
            }
            let in_order = offset == 0 || window.is_some_and(|w| w.next == offset);
            if window.is_none() && windows.len() >= READERS {
                let oldest = windows
                    .iter()
                    .min_by_key(|(_, w)| w.used)
                    .map(|(&ino, _)| ino);
                if let Some(oldest) = oldest {
                    windows.remove(&oldest);
                }
            }
            windows.insert(
                ino,
                Window {
                    next: end,
                    blocks: BTreeMap::new(),
                    in_order,
                    used: Instant::now(),
                },
            );
            if !in_order {
                // A new place: a read going on from here is read ahead.
                return None;
            }
        }
        let window = windows.get_mut(&ino).expect("inserted above");
        window.next = end;
        window.used = Instant::now();
        // What the reader has passed is dropped, but for the block just
        // before (the kernel's requests may arrive a little out of order).
        window.blocks = window.blocks.split_off(&first.saturating_sub(1));
        // Not past the end the kernel knows (nothing ahead when it knows
        // none: a small file costs one read, as without read-ahead).
        let stop = file_size.map_or(last, |size| {
            (last + AHEAD).min(size.saturating_sub(1) / BLOCK).max(last)
        });
        for index in first..=stop {
            window
                .blocks
                .entry(index)
                .or_insert_with(|| self.read_block(path, index));
        }
        (first..=last)
            .map(|i| window.blocks.get(&i).map(|b| (i, b.fetched.clone())))
            .collect()
    }

    /// Block `index` of `path`, read by a task of its own.
    fn read_block(self: &Arc<Self>, path: &CanonicalPath, index: u64) -> Block {
        let (shared, path) = (self.clone(), path.clone());
        let task = self.runtime.spawn(async move {
            shared
                .retry(|| shared.read_range(&path, index * BLOCK, BLOCK))
                .await
        });
        let abort = task.abort_handle();
        let fetched = async move { task.await.unwrap_or(Err(Errno::EIO)) }
            .boxed()
            .shared();
        Block {
            fetched,
            task: abort,
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

    /// The entries of directory `ino` for a readdir at `offset`: those of
    /// the listing its read from offset 0 took ([`Paging`]); at offset 0,
    /// the directory's last listing when nothing in it changed since
    /// (known.rs: `rm -rf` opens each directory twice), else a new one.
    pub(super) async fn listing(&self, ino: u64, offset: u64) -> Result<Arc<Vec<Metadata>>, Errno> {
        if offset > 0 {
            if let Some(listing) = self.paging.get(ino) {
                return Ok(listing);
            }
        }
        let (path, _) = self.path(ino)?;
        let listing = match self.known.kept_listing(&path) {
            Some(listing) => listing,
            None if let Some(listing) = self.listing_here(&path) => Arc::new(listing),
            None => {
                self.settle_dir(&path).await;
                let ticket = self.known.listing_asked(&path);
                let listed = self.retry(|| self.session.list_all(&path, 1)).await;
                let listing = Arc::new(listed.inspect_err(|_| self.known.changed(&path))?);
                self.known.listed(&path, listing.iter().map(Metadata::name));
                self.known.keep_listing(&path, ticket, &listing);
                listing
            }
        };
        self.paging.put(ino, listing.clone());
        Ok(listing)
    }

    /// The listing of a directory the mount made, from what it knows:
    /// every name in it (known.rs) and what the kernel was told of each,
    /// in the server's order. `None` when a name is not in the inode table
    /// with its attributes (made elsewhere, changed elsewhere, or
    /// forgotten by the kernel): the server lists the directory. `rm -rf`
    /// of a tree the mount made lists each directory so.
    fn listing_here(&self, dir: &CanonicalPath) -> Option<Vec<Metadata>> {
        let names = self.known.made_names(dir)?;
        let mut listing = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(&name).ok()?;
            let (ino, kind) = {
                let inodes = self.inodes();
                let ino = inodes.at(&path)?;
                (ino, inodes.get(ino)?.kind)
            };
            let attr = self.known_attr(ino)?;
            listing.push(Metadata {
                path,
                kind,
                size: attr.size,
                created: attr.crtime,
                modified: attr.mtime,
                // No server gives it: readdirplus answers what the
                // kernel was told of the entry.
                version: 0,
                permissions: Permissions::masked(attr.perm.into()),
                symlink_target: None,
            });
        }
        Some(listing)
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

/// The bytes `[offset, end)` from `blocks` (consecutive, from the one
/// holding `offset`), when every one is of `version`; a short block ends
/// the file.
fn assemble(blocks: Vec<(u64, Fetched)>, version: u64, offset: u64, end: u64) -> Option<Bytes> {
    let mut pieces = Vec::with_capacity(blocks.len());
    for (index, fetched) in blocks {
        if fetched.version != version && !fetched.bytes.is_empty() {
            return None;
        }
        let start = index * BLOCK;
        let from = (offset.max(start) - start) as usize;
        let to = ((end - start) as usize).min(fetched.bytes.len());
        if from < to {
            pieces.push(fetched.bytes.slice(from..to));
        }
        if fetched.bytes.len() < BLOCK as usize {
            break;
        }
    }
    Some(match pieces.len() {
        0 => Bytes::new(),
        1 => pieces.pop().expect("one piece"),
        _ => pieces.concat().into(),
    })
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
        if let Some(bytes) = self.shared.read_ready(ino, offset, size.into()) {
            return reply.data(&bytes);
        }
        self.spawn(move |s| async move {
            let result = async {
                match s.staged(ino) {
                    Some(staged) => {
                        let (end, gaps) = staged.missing(offset, size.into());
                        if !gaps.is_empty() {
                            let (path, _) = s.path(ino)?;
                            s.fill(&path, &staged, gaps).await?;
                        }
                        staged
                            .read_local(offset, end)
                            .map(Bytes::from)
                            .map_err(|e| local(&e))
                    }
                    None => {
                        let (path, _) = s.path(ino)?;
                        s.read_server(ino, &path, offset, size.into()).await
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

    /// Answered `ENOSYS`, the first time only: the kernel then opens
    /// directories by itself, sends no releasedir, and keeps each
    /// listing in its cache between opens (as `FOPEN_CACHE_DIR |
    /// FOPEN_KEEP_CACHE` would). Its own creates, removes and renames drop
    /// a listing, and the Watch stream drops it for changes made elsewhere
    /// (invalidate.rs). A kernel older than that (before Linux 5.1) gets
    /// those two flags; readdir needs no handle either way.
    pub(super) fn do_opendir(&self, reply: ReplyOpen) {
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        );
    }

    pub(super) fn do_readdir(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
        self.spawn(move |s| async move {
            let entries = match s.listing(ino.0, offset).await {
                Ok(entries) => entries,
                Err(e) => return reply.error(e),
            };
            if offset as usize >= entries.len() + 2 {
                s.paging.forget(ino.0);
            }
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

    pub(super) fn do_readdirplus(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        self.spawn(move |s| async move {
            let entries = match s.listing(ino.0, offset).await {
                Ok(entries) => entries,
                Err(e) => return reply.error(e),
            };
            if offset as usize >= entries.len() + 2 {
                s.paging.forget(ino.0);
            }
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
                        // Version 0 (no server gives it): an entry of a
                        // listing made here, whose attributes are those
                        // the kernel was told, not new ones to remember.
                        let attr = match meta.version {
                            0 => s.known_attr(entry_ino),
                            _ => None,
                        }
                        .unwrap_or_else(|| s.attr(entry_ino, meta));
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

    /// Never sent once opendir is answered `ENOSYS` (see there).
    pub(super) fn do_releasedir(&self, reply: ReplyEmpty) {
        reply.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(version: u64, fill: u8, len: u64) -> Fetched {
        Fetched {
            version,
            bytes: Bytes::from(vec![fill; len as usize]),
        }
    }

    #[test]
    fn a_read_across_blocks_takes_each_ones_part() {
        let blocks = vec![(3, block(7, b'a', BLOCK)), (4, block(7, b'b', BLOCK))];
        let offset = 4 * BLOCK - 2;
        let got = assemble(blocks, 7, offset, offset + 5).unwrap();
        assert_eq!(&got[..], b"aabbb");
    }

    #[test]
    fn a_block_of_another_version_answers_nothing() {
        let blocks = vec![(0, block(7, b'a', BLOCK)), (1, block(8, b'b', BLOCK))];
        assert!(assemble(blocks, 7, 0, BLOCK + 1).is_none());
    }

    #[test]
    fn a_short_block_ends_the_file() {
        let blocks = vec![(0, block(7, b'a', 10)), (1, block(7, b'b', BLOCK))];
        let got = assemble(blocks, 7, 4, BLOCK + 100).unwrap();
        assert_eq!(&got[..], b"aaaaaa");
    }
}
