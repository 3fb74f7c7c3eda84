//! Open files, writes and commits: a writable open stages the file on
//! local disk, writes land there, and flush, fsync and the last close
//! send the changed ranges to the server in one patch.

use super::dispatch::WsfsFs;
use super::errno::{create_errno, describe, errno, local};
use super::namespace::create_options;
use super::shared::{Handle, Shared};
use super::staging::{split, Commit, StageReader, Staged};
use fuser::{
    Errno, FileHandle, FopenFlags, INodeNo, OpenAccMode, OpenFlags, ReplyEmpty, ReplyOpen,
    ReplyWrite,
};
use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wsfs::{
    CanonicalPath, Error, FileKind, Filesystem as _, PatchChunk, PatchChunks, PatchOptions,
    DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE,
};

/// The staging's last bytes given to the kernel at its end start at a
/// multiple of this: a whole page cache folio (4 KiB, or a larger folio up
/// to this) from its start to the file's end, which the kernel takes as
/// up to date.
const TAIL_BLOCK: u64 = 64 * 1024;

impl Shared {
    /// The staging of `ino`, made when it has none: for a file of
    /// `server_size` bytes on the server.
    pub(super) fn stage(
        &self,
        ino: u64,
        server_size: u64,
        known: bool,
    ) -> Result<Arc<Staged>, Errno> {
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
    pub(super) async fn keep_if_open(&self, path: &CanonicalPath) -> Result<(), Errno> {
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
    pub(super) async fn commit(&self, ino: u64) -> Result<(), Errno> {
        let Some(staged) = self.staged(ino) else {
            return Ok(());
        };
        let _one = staged.commit_lock.lock().await;
        let path = match self.path(ino) {
            Ok((path, _)) => path,
            // Unlinked: nobody can see these bytes any more.
            Err(_) => {
                self.drop_ahead(&staged).await;
                return Ok(());
            }
        };
        // The commit's change event is judged once what it made is noted
        // (invalidate.rs). Taken here, under the commit lock, so that it
        // names the path the commit lands at: a rename or unlink of the
        // file waits for that lock, and one that ran just before would
        // leave a guard taken earlier on the old name.
        let _own = self.own_change(&path);
        let unborn = self.unborn_at(&path) == Some(ino);
        let mut unborn = unborn;
        if let Some((commit, outcome, whole)) = self.finish_ahead(&staged, &path, unborn).await {
            if unborn {
                self.made(&path);
                unborn = false;
            }
            self.landed(ino, &path, &staged, &commit, outcome.version);
            if !whole {
                // Bits or a time set since the upload began: they follow
                // in a commit of their own, below.
                staged.attributes_again(&commit);
            } else {
                // The server's clock gave the time: the kernel is told it.
                if let Ok(meta) = self.session.stat(&path).await {
                    if meta.version == outcome.version {
                        staged.landed_at(&commit, meta.modified);
                        if let Some(attr) = self.inodes().get_mut(ino).and_then(|n| n.attr.as_mut())
                        {
                            (attr.mtime, attr.atime, attr.ctime) =
                                (meta.modified, meta.modified, meta.modified);
                        }
                    }
                }
                return Ok(());
            }
        }
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
        let sent = self.send(&path, &reader, &commit, unborn).await;
        match sent {
            Ok(outcome) => {
                self.landed(ino, &path, &staged, &commit, outcome.version);
                Ok(())
            }
            Err(e) => {
                staged.failed(commit);
                if unborn {
                    self.create_lost(ino, &path, e);
                }
                Err(e)
            }
        }
    }

    /// `commit` of `ino` at `path` landed as `version`.
    fn landed(
        &self,
        ino: u64,
        path: &CanonicalPath,
        staged: &Staged,
        commit: &Commit,
        version: u64,
    ) {
        self.committed(path, version);
        staged.committed(commit);
        if let Some(node) = self.inodes().get_mut(ino) {
            node.cached_version = Some(version);
            node.own_version = Some(version);
            // What the kernel was told is the server's now: its
            // getattr is answered from here, without a Stat.
            if let Some(attr) = &mut node.attr {
                attr.size = commit.size;
                attr.blocks = commit.size.div_ceil(512);
                if let Some(modified) = commit.modified {
                    (attr.mtime, attr.atime, attr.ctime) = (modified, modified, modified);
                }
                if let Some(permissions) = commit.permissions {
                    attr.perm = permissions.bits() as u16;
                }
            }
        }
    }

    /// Sends `commit` to `path`: one patch, or when its bytes pass the
    /// session's per-write limit, one patch per part of at most the limit,
    /// in order (the length change first, the bits and time last). The
    /// first part of an `unborn` file's commit creates it, exclusively.
    async fn send(
        &self,
        path: &CanonicalPath,
        reader: &Arc<StageReader>,
        commit: &Commit,
        mut unborn: bool,
    ) -> Result<wsfs::WriteOutcome, Errno> {
        loop {
            let limit = self.max_write.load(Ordering::Relaxed);
            let parts = split(&commit.ranges, limit);
            let last = parts.len() - 1;
            let mut outcome = None;
            for (i, ranges) in parts.iter().enumerate() {
                let options = PatchOptions {
                    truncate_to: if i == 0 { commit.truncate_to } else { None },
                    permissions: if i == last { commit.permissions } else { None },
                    modified: if i == last { commit.modified } else { None },
                    ..create_options(unborn && i == 0)
                };
                let sent = self
                    .retry_refusal(|| {
                        self.session
                            .patch_bytes(path, options, chunks(reader.clone(), ranges))
                    })
                    .await;
                match sent {
                    Ok(done) => {
                        if unborn {
                            // Made: what follows, or a later try, must not
                            // ask for it to be new again.
                            unborn = false;
                            self.made(path);
                        }
                        outcome = Some(done);
                    }
                    // The limit, learned: the commit goes again in parts
                    // (what went already is sent again, unchanged).
                    Err(Error::TooLarge { limit: learned, .. })
                        if learned > 0 && learned != limit =>
                    {
                        self.max_write.store(learned, Ordering::Relaxed);
                        outcome = None;
                        break;
                    }
                    Err(e) if unborn => return Err(create_errno(&e)),
                    Err(e) => return Err(errno(&e)),
                }
            }
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
        }
    }

    /// Commits every staged file, after the queued commits (at unmount,
    /// and [`MountHandle::sync`](super::MountHandle::sync)). Each failure is
    /// written to stderr (at unmount the only place left to report it);
    /// the first is returned.
    pub(super) async fn commit_all(&self) -> Result<(), std::io::Error> {
        self.drain().await;
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
        let mut first = Ok(());
        for (ino, path) in staged {
            if let Err(e) = self.commit(ino).await {
                let message = format!(
                    "the changes to '{path}' could not be committed: {}",
                    describe(e)
                );
                eprintln!("wsfs mount: {message}");
                if first.is_ok() {
                    first = Err(std::io::Error::new(describe(e).kind(), message));
                }
            }
            self.drop_staging_if_done(ino);
        }
        first
    }

    /// A file handle of `ino` closed.
    pub(super) fn release_node(&self, ino: u64) {
        let closed = match self.inodes().get_mut(ino) {
            Some(node) => {
                node.open = node.open.saturating_sub(1);
                node.open == 0
            }
            None => true,
        };
        if closed {
            self.readahead.forget(ino);
        }
        self.drop_staging_if_done(ino);
    }

    /// The staging of `ino` goes once no handle is open and nothing waits
    /// to be committed (or the file left the workspace). Its last bytes go
    /// into the kernel's page cache first (see [`TAIL_BLOCK`]).
    pub(super) fn drop_staging_if_done(&self, ino: u64) {
        let mut inodes = self.inodes();
        if let Some(node) = inodes.get_mut(ino) {
            let done = node
                .staged
                .as_ref()
                .is_none_or(|staged| node.unlinked || !staged.busy());
            if node.open == 0 && done {
                if let Some(staged) = node.staged.take() {
                    if !node.unlinked {
                        // Under the table's lock: no open can start
                        // (and no write land in the pages) meanwhile.
                        self.store_tail(ino, &staged);
                    }
                }
            }
        }
        inodes.collect(ino);
    }

    /// Gives the kernel the last bytes of `ino`, which the staging holds:
    /// the pages a write filled whole are in its cache already, but one a
    /// write filled only in part (the last, short one, as a rule) is not,
    /// and reading the file back would fetch it from the server. An error
    /// (the kernel no longer holds the inode) changes nothing.
    fn store_tail(&self, ino: u64, staged: &Staged) {
        let Some(pages) = self.pages.get() else {
            return;
        };
        if let Some((offset, bytes)) = staged.tail(TAIL_BLOCK) {
            let _ = pages.store(INodeNo(ino), offset, &bytes);
        }
    }
}

/// The patch chunks of `ranges`, read from the staging file as they are
/// sent (at most a read's worth, 1 MiB, in memory at a time).
fn chunks(file: Arc<StageReader>, ranges: &[(u64, u64)]) -> PatchChunks {
    let mut pieces = Vec::new();
    for &(start, end) in ranges {
        let mut at = start;
        while at < end {
            let len = (end - at).min(MAX_CHUNK_SIZE as u64);
            pieces.push((at, len as usize));
            at += len;
        }
    }
    futures::stream::iter(pieces)
        .flat_map(move |(offset, len)| futures::stream::iter(read_staged(&file, offset, len)))
        .boxed()
}

/// `len` bytes at `offset` of a staging file, read at once and sent as
/// messages of the client's usual size: the server stages a message as
/// it arrives, so small ones keep the upload flowing within the stream's
/// flow-control window where 1 MiB ones stall it (a 512 MiB commit took
/// 2.6 s in 1 MiB messages against 0.9 to 1.5 s for `wsfs put`, which
/// sends 64 KiB ones).
pub(super) fn read_staged(
    file: &StageReader,
    offset: u64,
    len: usize,
) -> Vec<wsfs::Result<PatchChunk>> {
    let data = match file.read_at(offset, len) {
        Ok(data) => data,
        Err(e) => {
            return vec![Err(Error::internal(format!(
                "reading the mount's staged bytes failed: {e}"
            )))]
        }
    };
    (0..len)
        .step_by(DEFAULT_CHUNK_SIZE)
        .map(|at| {
            Ok(PatchChunk {
                offset: offset + at as u64,
                data: data.slice(at..(at + DEFAULT_CHUNK_SIZE).min(len)),
            })
        })
        .collect()
}

impl WsfsFs {
    pub(super) fn do_open(&self, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
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
                    // `stat` never answers older than what the mount's own
                    // commits made (shared.rs).
                    let same = node.cached_version == Some(meta.version);
                    node.cached_version = Some(meta.version);
                    node.open += 1;
                    same && !truncating
                };
                if !keep_cache {
                    // Fresh from the server: what getattr answers from now.
                    s.attr(ino, &meta);
                }
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

    pub(super) fn do_write(&self, ino: INodeNo, offset: u64, data: &[u8], reply: ReplyWrite) {
        // Local disk only: answered here, without a task.
        let Some(staged) = self.shared.staged(ino.0) else {
            return reply.error(Errno::EBADF);
        };
        match staged.write(offset, data) {
            Ok(()) => {
                reply.written(data.len() as u32);
                self.shared.upload_ahead(ino.0, &staged);
            }
            Err(e) => reply.error(local(&e)),
        }
    }

    /// A close: the commit is queued (behind.rs); a queued commit of this
    /// file that failed since is reported here.
    pub(super) fn do_flush(&self, ino: INodeNo, reply: ReplyEmpty) {
        self.spawn(move |s| async move {
            let failure = s.staged(ino.0).and_then(|staged| staged.take_failure());
            if let Some(errno) = failure {
                return reply.error(Errno::from_i32(errno));
            }
            s.queue_commit(ino.0).await;
            reply.ok();
        });
    }

    /// fsync: committed before it returns, after any queued commit.
    pub(super) fn do_fsync(&self, ino: INodeNo, reply: ReplyEmpty) {
        self.spawn(move |s| async move {
            match s.commit(ino.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn do_release(&self, ino: INodeNo, fh: FileHandle, reply: ReplyEmpty) {
        let handle = self.shared.handles().remove(&fh.0);
        let writable = matches!(handle, Some(Handle::File { writable: true, .. }));
        let ino = ino.0;
        self.spawn(move |s| async move {
            if writable {
                s.queue_commit(ino).await;
            }
            s.release_node(ino);
            reply.ok();
        });
    }
}
