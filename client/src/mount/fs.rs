//! The FUSE operations. fuser calls each one on its own threads with a
//! `Reply` that may be answered from anywhere: every operation that talks
//! to the server becomes a task on the tokio runtime, so many run at once
//! and no call waits behind another. Writes go to the local staging file
//! right away, on fuser's thread, and reach the server at the commit.

use super::errno::{describe, errno, local};
use super::inodes::{Inodes, ROOT};
use super::staging::{Commit, Staged};
use super::MountOptions;
use crate::Session;
use bytes::Bytes;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use futures::StreamExt;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use wsfs::{
    Attributes, ByteRange, CanonicalPath, DeleteOptions, Error, FileKind, Filesystem as _,
    Metadata, MkdirOptions, PatchChunk, PatchChunks, PatchOptions, Permissions, SymlinkOptions,
    TransferOptions, MAX_CHUNK_SIZE,
};

/// `st_blksize`: the buffer size programs pick for their reads and writes.
const BLOCK_SIZE: u32 = 128 * 1024;
/// The largest write and read the kernel is asked to send in one request.
const MAX_IO: u32 = 1024 * 1024;

/// An open file or directory.
enum Handle {
    File {
        writable: bool,
    },
    /// A directory's entries, listed once at the first readdir of this
    /// handle, so the kernel's follow-up calls page through one listing.
    Dir {
        listing: Option<Arc<Vec<Metadata>>>,
    },
}

/// What every task shares.
pub(super) struct Shared {
    pub session: Session,
    pub inodes: Mutex<Inodes>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_handle: AtomicU64,
    staging: PathBuf,
    options: MountOptions,
    uid: u32,
    gid: u32,
    runtime: tokio::runtime::Handle,
}

impl Shared {
    pub fn new(
        session: Session,
        staging: PathBuf,
        options: MountOptions,
        runtime: tokio::runtime::Handle,
    ) -> Shared {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Shared {
            session,
            inodes: Mutex::new(Inodes::new()),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            staging,
            options,
            uid,
            gid,
            runtime,
        }
    }

    pub fn inodes(&self) -> MutexGuard<'_, Inodes> {
        self.inodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handles(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add_handle(&self, handle: Handle) -> u64 {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles().insert(fh, handle);
        fh
    }

    /// Calls the server, waiting out an unreachable server for at most
    /// `server_wait` (the channel reconnects by itself).
    async fn retry<T, F, Fut>(&self, mut call: F) -> Result<T, Errno>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = wsfs::Result<T>>,
    {
        let deadline = Instant::now() + self.options.server_wait;
        let mut pause = Duration::from_millis(50);
        loop {
            match call().await {
                Ok(value) => return Ok(value),
                Err(Error::Unavailable { .. }) if Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(errno(&e)),
            }
        }
    }

    /// The path of `ino`, while it names one.
    fn path(&self, ino: u64) -> Result<(CanonicalPath, FileKind), Errno> {
        let inodes = self.inodes();
        let node = inodes.get(ino).ok_or(Errno::ENOENT)?;
        if node.unlinked {
            return Err(Errno::ENOENT);
        }
        Ok((node.path.clone(), node.kind))
    }

    /// The path of `name` in directory `parent`.
    fn child(&self, parent: u64, name: &OsStr) -> Result<CanonicalPath, Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        let (dir, _) = self.path(parent)?;
        dir.join(name).map_err(|e| errno(&e))
    }

    fn staged(&self, ino: u64) -> Option<Arc<Staged>> {
        self.inodes().get(ino).and_then(|n| n.staged.clone())
    }

    fn ttl(&self) -> Duration {
        self.options.cache_ttl
    }

    /// The kernel's attributes for `meta`, with the staged length and time
    /// of a file being written.
    fn attr(&self, ino: u64, meta: &Metadata) -> FileAttr {
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

    fn attr_of(
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

    /// A patch that sends no bytes: creates, truncates.
    async fn patch(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
    ) -> Result<wsfs::WriteOutcome, Errno> {
        self.retry(|| {
            self.session
                .patch_bytes(path, options, futures::stream::empty().boxed())
        })
        .await
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata, Errno> {
        self.retry(|| self.session.stat(path)).await
    }

    /// The attributes of `ino` now.
    async fn getattr(&self, ino: u64) -> Result<FileAttr, Errno> {
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

    /// Up to `len` bytes at `offset` from the server; none past the end.
    async fn fetch(&self, path: &CanonicalPath, offset: u64, len: u64) -> Result<Vec<u8>, Errno> {
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
    async fn fill(
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

    /// The staging of `ino`, made when it has none: for a file of
    /// `server_size` bytes on the server.
    fn stage(&self, ino: u64, server_size: u64, known: bool) -> Result<Arc<Staged>, Errno> {
        let mut inodes = self.inodes();
        let node = inodes.get_mut(ino).ok_or(Errno::ENOENT)?;
        if let Some(staged) = &node.staged {
            return Ok(staged.clone());
        }
        let staged =
            Arc::new(Staged::new(&self.staging, server_size, known).map_err(|e| local(&e))?);
        node.staged = Some(staged.clone());
        Ok(staged)
    }

    /// Before `path` leaves the workspace: an inode still open there keeps
    /// its bytes, copied whole into its staging file, so that its handles
    /// go on reading (and writing) it as POSIX promises.
    async fn keep_if_open(&self, path: &CanonicalPath) -> Result<(), Errno> {
        let ino = {
            let inodes = self.inodes();
            match inodes.at(path) {
                Some(ino)
                    if inodes
                        .get(ino)
                        .is_some_and(|n| n.open > 0 && n.kind == FileKind::File) =>
                {
                    ino
                }
                _ => return Ok(()),
            }
        };
        let meta = self.stat(path).await?;
        let staged = self.stage(ino, meta.size, false)?;
        let (_, gaps) = staged.missing(0, u64::MAX);
        self.fill(path, &staged, gaps).await
    }

    /// Sends what `ino` holds that the server does not: one patch.
    async fn commit(&self, ino: u64) -> Result<(), Errno> {
        let Some(staged) = self.staged(ino) else {
            return Ok(());
        };
        let _one = staged.commit_lock.lock().await;
        let path = match self.path(ino) {
            Ok((path, _)) => path,
            // Unlinked: nobody can see these bytes any more.
            Err(_) => return Ok(()),
        };
        let Some(commit) = staged.begin_commit() else {
            return Ok(());
        };
        let reader = match staged.reader() {
            Ok(reader) => Arc::new(reader),
            Err(e) => {
                staged.failed(commit);
                return Err(local(&e));
            }
        };
        let options = PatchOptions {
            truncate_to: commit.truncate_to,
            ..PatchOptions::default()
        };
        let sent = self
            .retry(|| {
                self.session
                    .patch_bytes(&path, options, chunks(reader.clone(), &commit))
            })
            .await;
        match sent {
            Ok(outcome) => {
                staged.committed(&commit);
                if let Some(node) = self.inodes().get_mut(ino) {
                    node.cached_version = Some(outcome.version);
                }
                Ok(())
            }
            Err(e) => {
                staged.failed(commit);
                Err(e)
            }
        }
    }

    /// Commits every staged file (at unmount); failures are reported on
    /// stderr, the only place left to report them.
    pub async fn commit_all(&self) {
        let staged: Vec<(u64, CanonicalPath)> = {
            let inodes = self.inodes();
            inodes
                .all()
                .into_iter()
                .filter_map(|ino| {
                    let node = inodes.get(ino)?;
                    (node.staged.is_some() && !node.unlinked).then(|| (ino, node.path.clone()))
                })
                .collect()
        };
        for (ino, path) in staged {
            if let Err(e) = self.commit(ino).await {
                eprintln!(
                    "wsfs mount: the changes to '{path}' could not be committed: {}",
                    describe(e)
                );
            }
        }
    }
}

/// The patch chunks of `commit`, read from the staging file as they are
/// sent (at most a chunk in memory at a time).
fn chunks(file: Arc<std::fs::File>, commit: &Commit) -> PatchChunks {
    let mut pieces = Vec::new();
    for &(start, end) in &commit.ranges {
        let mut at = start;
        while at < end {
            let len = (end - at).min(MAX_CHUNK_SIZE as u64);
            pieces.push((at, len as usize));
            at += len;
        }
    }
    futures::stream::iter(pieces)
        .map(move |(offset, len)| {
            let mut data = vec![0; len];
            file.read_exact_at(&mut data, offset).map_err(|e| {
                Error::internal(format!("reading the mount's staged bytes failed: {e}"))
            })?;
            Ok(PatchChunk {
                offset,
                data: Bytes::from(data),
            })
        })
        .boxed()
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
    }
}

/// What a new file or directory gets: the mode asked less the umask, within
/// the bits wsfs keeps.
fn new_permissions(mode: u32, umask: u32) -> Permissions {
    Permissions::masked(mode & !umask)
}

/// The FUSE filesystem: a thin shell that hands each call to [`Shared`].
pub(super) struct WsfsFs {
    pub shared: Arc<Shared>,
    /// Told when the kernel ends the session (unmounted from anywhere).
    pub ended: tokio::sync::watch::Sender<bool>,
}

impl WsfsFs {
    /// Runs `work` as a task; its error answers through `fail`.
    fn spawn<F, Fut>(&self, work: F)
    where
        F: FnOnce(Arc<Shared>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let shared = self.shared.clone();
        self.shared.runtime.spawn(work(shared));
    }

    fn read_only(&self) -> bool {
        self.shared.options.read_only
    }

    /// The path of a name about to be made or removed in `parent`.
    fn new_child(&self, parent: INodeNo, name: &OsStr) -> Result<CanonicalPath, Errno> {
        if self.read_only() {
            return Err(Errno::EROFS);
        }
        self.shared.child(parent.0, name)
    }
}

impl fuser::Filesystem for WsfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each is a wish: a kernel without it still mounts.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.add_capabilities(InitFlags::FUSE_MAX_PAGES);
        let _ = config.set_max_write(MAX_IO);
        let _ = config.set_max_readahead(MAX_IO);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn destroy(&mut self) {
        let shared = self.shared.clone();
        self.shared
            .runtime
            .block_on(async move { shared.commit_all().await });
        let _ = self.ended.send(true);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
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
                Err(e) => reply.error(e),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.inodes().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.spawn(move |s| async move {
            match s.getattr(ino.0).await {
                Ok(attr) => reply.attr(&s.ttl(), &attr),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
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

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
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

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Devices, pipes and sockets have no place in a workspace.
            return reply.error(Errno::ENOTSUP);
        }
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let permissions = new_permissions(mode, umask);
        self.spawn(move |s| async move {
            let options = PatchOptions {
                create_missing: true,
                create_parents: false,
                if_version: Some(0),
                permissions: Some(permissions),
                ..PatchOptions::default()
            };
            let made = s.patch(&path, options).await;
            match made {
                Ok(_) => match s.stat(&path).await {
                    Ok(meta) => {
                        let ino = s.inodes().learn(&path, meta.kind);
                        reply.entry(&s.ttl(), &s.attr(ino, &meta), Generation(0));
                    }
                    Err(e) => reply.error(e),
                },
                Err(e) => reply.error(e),
            }
        });
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let permissions = new_permissions(mode, umask);
        self.spawn(move |s| async move {
            let options = MkdirOptions {
                parents: false,
                exist_ok: false,
                permissions: Some(permissions),
            };
            match s.retry(|| s.session.mkdir(&path, options)).await {
                Ok(_) => {
                    let ino = s.inodes().learn(&path, FileKind::Directory);
                    let now = SystemTime::now();
                    let attr = s.attr_of(ino, FileKind::Directory, 0, now, now, permissions);
                    reply.entry(&s.ttl(), &attr, Generation(0));
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, false, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, true, reply);
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let path = match self.new_child(parent, link_name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let Some(target) = target.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(move |s| async move {
            let options = SymlinkOptions {
                create_parents: false,
            };
            match s.retry(|| s.session.symlink(&path, &target, options)).await {
                Ok(meta) => {
                    let ino = s.inodes().learn(&path, FileKind::Symlink);
                    reply.entry(&s.ttl(), &s.attr(ino, &meta), Generation(0));
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if self.read_only() {
            return reply.error(Errno::EROFS);
        }
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT: not in the protocol.
            return reply.error(Errno::EINVAL);
        }
        let replace = !flags.contains(RenameFlags::RENAME_NOREPLACE);
        let (source, destination) = match (
            self.shared.child(parent.0, name),
            self.shared.child(newparent.0, newname),
        ) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        if source == destination {
            return reply.ok();
        }
        self.spawn(move |s| async move {
            let result = async {
                if replace {
                    // A directory replaces only an empty directory.
                    let target_kind = s.inodes().kind_at(&destination);
                    if target_kind == Some(FileKind::Directory) {
                        match s.retry(|| s.session.list(&destination, 1)).await {
                            Ok(listing) if !listing.entries.is_empty() => {
                                return Err(Errno::ENOTEMPTY)
                            }
                            Ok(_) | Err(Errno::ENOENT) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    s.keep_if_open(&destination).await?;
                }
                let options = TransferOptions {
                    overwrite: replace,
                    create_parents: false,
                    if_version: None,
                };
                s.retry(|| s.session.rename(&source, &destination, options))
                    .await?;
                s.inodes().renamed(&source, &destination);
                Ok(())
            }
            .await;
            match result {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // Hard links are not in the protocol; ln and git fall back from EPERM.
        reply.error(Errno::EPERM);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        if writable && self.read_only() {
            return reply.error(Errno::EROFS);
        }
        let truncating = flags.0 & libc::O_TRUNC != 0;
        let ino = ino.0;
        self.spawn(move |s| async move {
            let result = async {
                let (path, kind) = s.path(ino)?;
                if kind == FileKind::Directory {
                    return Err(Errno::EISDIR);
                }
                let meta = s.stat(&path).await?;
                let keep_cache = {
                    let mut inodes = s.inodes();
                    let node = inodes.get_mut(ino).ok_or(Errno::ENOENT)?;
                    let same = node.cached_version == Some(meta.version);
                    node.cached_version = Some(meta.version);
                    node.open += 1;
                    same && !truncating
                };
                if writable {
                    if let Err(e) = s.stage(ino, meta.size, false) {
                        s.release_node(ino);
                        return Err(e);
                    }
                }
                let fh = s.add_handle(Handle::File { writable });
                let flags = if keep_cache {
                    FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    FopenFlags::empty()
                };
                Ok((fh, flags))
            }
            .await;
            match result {
                Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
                Err(e) => reply.error(e),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
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

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Local disk only: answered here, without a task.
        let Some(staged) = self.shared.staged(ino.0) else {
            return reply.error(Errno::EBADF);
        };
        match staged.write(offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(local(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.commit_and(ino, reply);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.commit_and(ino, reply);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let handle = self.shared.handles().remove(&fh.0);
        let writable = matches!(handle, Some(Handle::File { writable: true, .. }));
        let ino = ino.0;
        self.spawn(move |s| async move {
            if writable {
                if let Err(e) = s.commit(ino).await {
                    // flush already told the program; this is the last word.
                    let path = s.path(ino).map(|(p, _)| p.to_string()).unwrap_or_default();
                    eprintln!(
                        "wsfs mount: the changes to '{path}' could not be committed: {}",
                        describe(e)
                    );
                }
            }
            s.release_node(ino);
            reply.ok();
        });
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.shared.add_handle(Handle::Dir { listing: None });
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
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

    fn readdirplus(
        &self,
        _req: &Request,
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

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.handles().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Every directory change is committed before it is answered.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // The session's limits are the server's business; report room
        // enough that programs do not refuse to start.
        const BLOCKS: u64 = 1 << 32;
        const FILES: u64 = 1 << 32;
        reply.statfs(BLOCKS, BLOCKS, BLOCKS, FILES, FILES, 4096, 255, 4096);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOTSUP);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOTSUP);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        let permissions = new_permissions(mode, umask);
        let exclusive = flags & libc::O_EXCL != 0;
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncate = flags & libc::O_TRUNC != 0;
        self.spawn(move |s| async move {
            let result = async {
                let options = PatchOptions {
                    truncate_to: truncate.then_some(0),
                    create_missing: true,
                    create_parents: false,
                    if_version: exclusive.then_some(0),
                    permissions: Some(permissions),
                    modified: None,
                };
                let outcome = s.patch(&path, options).await?;
                let ino = {
                    let mut inodes = s.inodes();
                    let ino = inodes.learn(&path, FileKind::File);
                    let node = inodes.get_mut(ino).expect("just learned");
                    node.open += 1;
                    node.cached_version = Some(outcome.version);
                    ino
                };
                if writable {
                    if let Err(e) = s.stage(ino, outcome.size, outcome.size == 0) {
                        s.release_node(ino);
                        return Err(e);
                    }
                }
                let now = SystemTime::now();
                let attr = s.attr_of(ino, FileKind::File, outcome.size, now, now, permissions);
                let fh = s.add_handle(Handle::File { writable });
                Ok((attr, fh))
            }
            .await;
            match result {
                Ok((attr, fh)) => reply.created(
                    &s.ttl(),
                    &attr,
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(e),
            }
        });
    }
}

impl WsfsFs {
    fn commit_and(&self, ino: INodeNo, reply: ReplyEmpty) {
        self.spawn(move |s| async move {
            match s.commit(ino.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    /// unlink (`directory` false) and rmdir (true).
    fn remove(&self, parent: INodeNo, name: &OsStr, directory: bool, reply: ReplyEmpty) {
        let path = match self.new_child(parent, name) {
            Ok(path) => path,
            Err(e) => return reply.error(e),
        };
        self.spawn(move |s| async move {
            let result = async {
                let known = s.inodes().kind_at(&path);
                let kind = match known {
                    Some(kind) => kind,
                    None => s.stat(&path).await?.kind,
                };
                match (directory, kind == FileKind::Directory) {
                    (false, true) => return Err(Errno::EISDIR),
                    (true, false) => return Err(Errno::ENOTDIR),
                    _ => {}
                }
                if !directory {
                    s.keep_if_open(&path).await?;
                }
                let options = DeleteOptions {
                    recursive: false,
                    allow_missing: false,
                    if_version: None,
                };
                s.retry(|| s.session.delete(&path, options)).await?;
                s.inodes().detach(&path);
                Ok(())
            }
            .await;
            match result {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }
}

impl Shared {
    /// A file handle of `ino` closed: the staging goes with the last one.
    fn release_node(&self, ino: u64) {
        let mut inodes = self.inodes();
        if let Some(node) = inodes.get_mut(ino) {
            node.open = node.open.saturating_sub(1);
            if node.open == 0 {
                node.staged = None;
            }
        }
        inodes.collect(ino);
    }

    /// The entries of directory `ino` for handle `fh`, listed at its first
    /// readdir.
    async fn listing(&self, ino: u64, fh: u64) -> Result<Arc<Vec<Metadata>>, Errno> {
        if let Some(Handle::Dir {
            listing: Some(listing),
        }) = self.handles().get(&fh)
        {
            return Ok(listing.clone());
        }
        let (path, _) = self.path(ino)?;
        let listing = Arc::new(self.retry(|| self.session.list(&path, 1)).await?.entries);
        if let Some(Handle::Dir { listing: slot }) = self.handles().get_mut(&fh) {
            *slot = Some(listing.clone());
        }
        Ok(listing)
    }

    /// `.`, `..` and the entries, each with an inode number (known ones
    /// keep theirs; readdir does not count as a lookup, so new ones are
    /// only numbered).
    fn dir_entries(&self, ino: u64, entries: &[Metadata]) -> Vec<(String, u64, FileKind)> {
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
