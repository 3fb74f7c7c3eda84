//! `Workspace`: the contract's file operations on top of a storage backend.
//!
//! Everything both backends share lives here once: line pagination, the
//! per-write limit, `if_version` checks, write modes, exact-text edits and
//! their diffs, and the session's write lock that makes check-and-commit
//! atomic. Uploads are staged outside the lock, so a slow client never
//! blocks other writers; only the version check and the commit are locked.
//!
//! # The write lock is a lock over paths
//!
//! A mutation claims the paths it changes ([`crate::claims`]): Write,
//! WriteBytes, Edit, SetAttributes, Delete and Mkdir their path; Move and
//! Copy both ends; whole-tree work (Snapshot, Restore, ImportArchive, and
//! whatever runs through [`Workspace::exclusive`]) the root. Two claims
//! exclude each other when a path of one is equal to or an ancestor of a
//! path of the other, so a claim on a directory covers its subtree (a
//! recursive Delete, a Move of a directory) and the parents a Write
//! creates. Writes to different files run in parallel; writes to one file
//! stay one after another, each checking `if_version` against the last.
//! Conflicting claims are granted in arrival order, so a Snapshot waits
//! only for the writes already running, never for those that come after.
//! Quotas are checked and reserved atomically ([`crate::quota::Ledger`]),
//! so parallel writers never take a session past them together.
//!
//! # Mutations own their lock
//!
//! Every change to a workspace (a Write's commit, Edit, Delete, Mkdir,
//! Move, Copy, Restore, Import, and whatever runs through
//! [`Workspace::exclusive`]) runs through [`Workspace::locked`]: it takes
//! its claim as an owned guard and moves the guard, with
//! the work, into the task that does it. The caller's future only awaits
//! that task. A caller that goes away (a cancelled RPC, a deadline, a
//! client that hung up) drops its wait, not the lock: the work runs to its
//! last byte with the lock held, and the next writer starts after it. So a
//! cancelled call either completes (its answer is lost) or, cancelled
//! before it took the lock, changes nothing; it never runs beside, and
//! undoes, a write acknowledged after the cancel.
//!
//! A call may also hand its whole work (the change and what the service
//! does after it, such as reporting the event) to a task of its own, so
//! that the event is not lost with the caller: it runs that task within
//! [`Commitment::scope`]. The work then commits (passes the point where it
//! holds the lock and begins to change) only while the caller is still
//! there; a caller that left before that point abandons it, and the work
//! changes nothing, exactly as if it had run in the caller's future.

use crate::backend::{Backend, CommitMode, Content, OpenFile, Patch, PatchRange, StagedFile};
use crate::claims::PathLocks;
use crate::limits::SessionLimits;
use crate::quota::{self, Ledger, Usage};
use crate::search;
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use wsfs::{
    Attributes, AttributesOutcome, ByteChunks, ByteRange, ByteStream, CanonicalPath, DeleteOptions,
    EditOutcome, EditSpec, Error, FileKind, Filesystem, GlobOutcome, GlobQuery, GrepEvent,
    GrepQuery, LineRange, Listing, Metadata, MkdirOptions, PatchChunk, PatchChunks, PatchOptions,
    Result, SymlinkOptions, TextPage, TransferOptions, WriteMode, WriteOptions, WriteOutcome,
    MAX_CHUNK_SIZE,
};

/// Most bytes one text Read page carries; longer pages are cut at a line
/// boundary and marked `truncated`.
pub const MAX_READ_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// Most entries one List returns.
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Uploads are handed to the backend in batches of about this size.
const STAGE_BATCH_BYTES: usize = 1024 * 1024;

/// Most separate ranges one patch writes (touching ranges count as one):
/// the list is held in memory until the commit, 16 bytes a range.
pub const MAX_PATCH_RANGES: usize = 65_536;

/// How far a ReadBytes producer may read ahead of the stream on disk
/// (in whole chunks, at least one). With one chunk queued the reading
/// thread slept and woke for every 64 KiB; four measured a fifth faster.
const READ_AHEAD_BYTES: usize = 256 * 1024;

/// One session's workspace over backend `B`.
pub struct Workspace<B: Backend> {
    backend: Arc<B>,
    limits: SessionLimits,
    read_only: std::sync::atomic::AtomicBool,
    /// The claims of the mutations running and waiting; see "The write
    /// lock is a lock over paths" above.
    writes: Arc<PathLocks>,
    /// Quota reservations of the mutations running in parallel.
    quota: Arc<Ledger>,
}

/// Whether a call that handed its work to a task of its own still wants
/// it: the work commits (takes the session's write lock and begins to
/// change the workspace) or the caller abandons it, whichever comes first.
#[derive(Debug, Default)]
pub struct Commitment(std::sync::atomic::AtomicU8);

const PENDING: u8 = 0;
const COMMITTED: u8 = 1;
const ABANDONED: u8 = 2;

tokio::task_local! {
    static COMMITMENT: Arc<Commitment>;
}

impl Commitment {
    /// Runs `work` with this commitment deciding its changes.
    pub fn scope<F: std::future::Future>(
        self: &Arc<Self>,
        work: F,
    ) -> impl std::future::Future<Output = F::Output> {
        COMMITMENT.scope(self.clone(), work)
    }

    /// The work's side: true when it may change the workspace (again).
    fn commit(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        match self.0.compare_exchange(PENDING, COMMITTED, SeqCst, SeqCst) {
            Ok(_) => true,
            Err(now) => now == COMMITTED,
        }
    }

    /// The caller's side, when it goes away: true when the work had not
    /// committed and now never will.
    pub fn abandon(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.0
            .compare_exchange(PENDING, ABANDONED, SeqCst, SeqCst)
            .is_ok()
    }
}

/// Whether the work running now may change the workspace: always, unless
/// it runs in a [`Commitment::scope`] whose caller has gone.
fn may_commit() -> bool {
    COMMITMENT.try_with(|c| c.commit()).unwrap_or(true)
}

impl<B: Backend> Workspace<B> {
    pub fn new(backend: B, limits: SessionLimits) -> Self {
        Workspace {
            backend: Arc::new(backend),
            limits,
            read_only: std::sync::atomic::AtomicBool::new(false),
            writes: Arc::new(PathLocks::default()),
            quota: Arc::new(Ledger::default()),
        }
    }

    /// Makes every later mutation fail with `READ_ONLY` (or allows them again).
    pub fn set_read_only(&self, read_only: bool) {
        self.read_only
            .store(read_only, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs `f` on the backend holding a claim on the whole workspace, so
    /// that no write made through the service interleaves with it
    /// (snapshots, restores, imports). The claim stays held until `f`
    /// returns, even if the caller goes away first.
    pub async fn exclusive<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T> + Send + 'static,
    {
        self.claimed(vec![CanonicalPath::root()], f).await
    }

    /// Runs `f` on the backend holding a claim on `paths`, owned by the
    /// work (see "Mutations own their lock").
    async fn claimed<T, F>(&self, paths: Vec<CanonicalPath>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T> + Send + 'static,
    {
        let guard = self.writes.claim(paths).await;
        // One pending point after the lock is taken and before any change:
        // a caller that went away meanwhile (the transport drops a
        // cancelled call's future when it is next pending) is dropped here,
        // with the guard, having changed nothing. Past this point the work
        // owns the guard and finishes.
        tokio::task::yield_now().await;
        if !may_commit() {
            return Err(Error::Cancelled {
                message: "the call was cancelled before its change began; nothing changed"
                    .to_string(),
            });
        }
        run_on(&self.backend, move |b| {
            let _guard = guard;
            f(b)
        })
        .await
    }

    /// Runs mutation `f` holding a claim on `paths`, owned by the work
    /// rather than by the caller (see "Mutations own their lock"), and
    /// makes its changes as durable as the server's `--durability` asks
    /// before the claim is let go.
    async fn locked<T, F>(&self, paths: Vec<CanonicalPath>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T> + Send + 'static,
    {
        self.claimed(paths, move |b| {
            let out = f(b)?;
            b.settle()?;
            Ok(out)
        })
        .await
    }

    /// Runs a backend call, on the blocking pool when the backend blocks.
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T> + Send + 'static,
    {
        run_on(&self.backend, f).await
    }

    /// `READ_ONLY` when the session is read-only: the one check, and the
    /// one refusal, for every mutation, snapshot restore and archive
    /// import. `action` says what was refused; `path` is the path it
    /// named, empty for the whole workspace.
    pub(crate) fn writable_for(&self, path: &str, action: impl std::fmt::Display) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                path: path.to_string(),
                message: format!("cannot {action}: this session is read-only"),
            });
        }
        Ok(())
    }

    /// [`Self::writable_for`] a change to `path`.
    pub(crate) fn writable(&self, path: &CanonicalPath) -> Result<()> {
        self.writable_for(path.as_str(), format_args!("change '{path}'"))
    }

    /// [`Self::writable`] for a call that writes a file's bytes (`verb`
    /// says which): the root is no file.
    fn writable_file(&self, path: &CanonicalPath, verb: &str) -> Result<()> {
        if path.is_root() {
            return Err(Error::invalid_argument(format!(
                "cannot {verb} the workspace root; name a file inside it"
            )));
        }
        self.writable(path)
    }

    fn check_size(&self, path: &CanonicalPath, size: u64) -> Result<()> {
        if size > self.limits.max_write_bytes {
            return Err(Error::TooLarge {
                path: path.as_str().to_string(),
                size,
                limit: self.limits.max_write_bytes,
            });
        }
        Ok(())
    }

    /// Checks `if_version` and the write mode, then commits; under the lock.
    async fn commit(
        &self,
        path: &CanonicalPath,
        staged: B::Staged,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        let path = path.clone();
        let limits = self.limits;
        let quota = self.quota.clone();
        self.locked(vec![path.clone()], move |b| {
            let current = b.metadata(&path)?;
            check_version(&path, current.as_ref(), options.if_version)?;
            if let Some(m) = &current {
                if m.kind == FileKind::Directory {
                    return Err(Error::IsADirectory {
                        path: path.as_str().to_string(),
                    });
                }
                if options.mode == WriteMode::Create {
                    return Err(Error::AlreadyExists {
                        path: path.as_str().to_string(),
                    });
                }
            }
            let bytes_written = staged.len();
            let mode = CommitMode {
                append: options.mode == WriteMode::Append,
                create_parents: options.create_parents,
                permissions: options.permissions,
                modified: options.modified,
                swap_out: true,
            };
            let old = current.as_ref().map_or(0, |m| m.size);
            let new = if mode.append {
                old + bytes_written
            } else {
                bytes_written
            };
            let landing = Landing {
                quota: &quota,
                limits: &limits,
                current: current.as_ref(),
                size: new,
                bytes_written,
            };
            landing.land(b, path, |b, path| b.commit(staged, path, mode))
        })
        .await
    }

    /// Stages an upload's bytes as they arrive, outside the write lock,
    /// refusing it once it passes the per-write limit. A stream that
    /// breaks off drops what was staged.
    async fn stage_upload(&self, path: &CanonicalPath, mut data: ByteChunks) -> Result<B::Staged> {
        let mut staged = self.run(|b| b.stage()).await?;
        let mut batch: Vec<Bytes> = Vec::new();
        let (mut batched, mut total) = (0usize, 0u64);
        loop {
            let next = data.next().await;
            if let Some(chunk) = &next {
                let chunk = chunk.as_ref().map_err(Clone::clone)?;
                total += chunk.len() as u64;
                self.check_size(path, total)?;
                batched += chunk.len();
                batch.push(chunk.clone());
            }
            if batched >= STAGE_BATCH_BYTES || (next.is_none() && !batch.is_empty()) {
                let chunks = std::mem::take(&mut batch);
                batched = 0;
                staged = if B::BLOCKING {
                    tokio::task::spawn_blocking(move || {
                        for c in &chunks {
                            staged.write_chunk(c)?;
                        }
                        Ok::<_, Error>(staged)
                    })
                    .await
                    .map_err(|e| Error::internal(format!("storage task failed: {e}")))??
                } else {
                    for c in &chunks {
                        staged.write_chunk(c)?;
                    }
                    staged
                };
            }
            if next.is_none() {
                break;
            }
        }
        Ok(staged)
    }

    /// Reads a whole text file that an edit may rewrite.
    fn read_text_for_edit(b: &B, path: &CanonicalPath, limit: u64) -> Result<(String, Metadata)> {
        let file = b.open(path)?;
        if file.meta.size > limit {
            return Err(Error::TooLarge {
                path: path.as_str().to_string(),
                size: file.meta.size,
                limit,
            });
        }
        let bytes = match file.content {
            Content::Memory(b) => b.to_vec(),
            Content::Disk(f) => {
                let mut v = Vec::with_capacity(file.meta.size as usize);
                f.take(limit + 1)
                    .read_to_end(&mut v)
                    .map_err(|e| Error::from_io(e, path))?;
                v
            }
        };
        let text = String::from_utf8(bytes).map_err(|_| Error::NotText {
            path: path.as_str().to_string(),
        })?;
        Ok((text, file.meta))
    }
}

/// The last step of a write that replaces (or creates) one file, under
/// its claim: the quota for the file's new size is reserved, the commit
/// runs, and the answer is made.
struct Landing<'a> {
    quota: &'a Ledger,
    limits: &'a SessionLimits,
    /// The file before the write; `None`: there was none.
    current: Option<&'a Metadata>,
    /// Its size after the write.
    size: u64,
    bytes_written: u64,
}

impl Landing<'_> {
    fn land<B: Backend>(
        self,
        b: &B,
        path: CanonicalPath,
        commit: impl FnOnce(&B, &CanonicalPath) -> Result<Metadata>,
    ) -> Result<WriteOutcome> {
        let removed = self
            .current
            .map(|m| Usage::file(m.size))
            .unwrap_or_default();
        let added = Usage::file(self.size);
        let reserved = self.quota.reserve(b, self.limits, &path, removed, added)?;
        let meta = reserved.land(|| commit(b, &path))?;
        Ok(WriteOutcome {
            path,
            bytes_written: self.bytes_written,
            size: meta.size,
            version: meta.version,
            created: self.current.is_none(),
        })
    }
}

pub(crate) async fn run_on<B, T, F>(backend: &Arc<B>, f: F) -> Result<T>
where
    B: Backend,
    T: Send + 'static,
    F: FnOnce(&B) -> Result<T> + Send + 'static,
{
    if B::BLOCKING {
        let b = backend.clone();
        tokio::task::spawn_blocking(move || f(&b))
            .await
            .map_err(|e| Error::internal(format!("storage task failed: {e}")))?
    } else {
        f(backend)
    }
}

/// `if_version`: `Some(0)` means the path must not exist; otherwise the
/// path's current version must equal it.
fn check_version(
    path: &CanonicalPath,
    current: Option<&Metadata>,
    expected: Option<u64>,
) -> Result<()> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let current = current.map_or(0, |m| m.version);
    if current != expected {
        return Err(Error::VersionMismatch {
            path: path.as_str().to_string(),
            expected,
            current,
        });
    }
    Ok(())
}

/// The size of a text of `len` bytes after `count` replacements of
/// `old` bytes by `new` bytes; `u64::MAX` when it does not fit.
fn edited_size(len: u64, count: u64, old: u64, new: u64) -> u64 {
    count
        .checked_mul(old)
        .and_then(|removed| len.checked_sub(removed))
        .and_then(|kept| {
            count
                .checked_mul(new)
                .and_then(|added| kept.checked_add(added))
        })
        .unwrap_or(u64::MAX)
}

/// Longest an Edit's diff may search for a minimal answer; past it the
/// diff is coarser (whole blocks replaced) but still correct.
pub const EDIT_DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// Most bytes of unified diff an Edit returns; a longer diff is cut at a
/// line boundary and ends with a line saying so.
pub const MAX_EDIT_DIFF_BYTES: usize = 1024 * 1024;

/// The unified diff from `old` to `new`, within [`EDIT_DIFF_DEADLINE`] and
/// [`MAX_EDIT_DIFF_BYTES`]: an edit that rewrites a large file costs a
/// bounded diff, not one as large as the file twice over.
fn bounded_diff(path: &CanonicalPath, old: &str, new: &str) -> String {
    use std::fmt::Write;
    let diff = similar::TextDiff::configure()
        .deadline(std::time::Instant::now() + EDIT_DIFF_DEADLINE)
        .diff_lines(old, new);
    let mut out = Capped {
        text: String::new(),
        cap: MAX_EDIT_DIFF_BYTES,
    };
    let written = write!(
        out,
        "{}",
        diff.unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
    );
    let mut text = out.text;
    if written.is_err() {
        text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
        let _ = writeln!(
            text,
            "\\ diff cut here: it is longer than {MAX_EDIT_DIFF_BYTES} bytes"
        );
    }
    text
}

/// A string that refuses writes past `cap` bytes.
struct Capped {
    text: String,
    cap: usize,
}

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > self.cap {
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// Selects a page of lines from a reader, validating that the whole file is
/// UTF-8 and counting all its lines, holding at most one page in memory.
fn read_page<R: BufRead>(
    mut reader: R,
    path: &CanonicalPath,
    range: LineRange,
) -> Result<(String, u64, u64, bool)> {
    let io = |e| Error::from_io(e, path);
    let end = range.limit.map(|l| range.offset.saturating_add(l));
    let mut line = Vec::new();
    let mut page = Vec::new();
    let (mut index, mut taken, mut cut) = (0u64, 0u64, false);
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_READ_PAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            break;
        }
        if line.len() > MAX_READ_PAGE_BYTES {
            return Err(Error::TooLarge {
                path: path.as_str().to_string(),
                size: line.len() as u64,
                limit: MAX_READ_PAGE_BYTES as u64,
            });
        }
        if std::str::from_utf8(&line).is_err() {
            return Err(Error::NotText {
                path: path.as_str().to_string(),
            });
        }
        let selected = index >= range.offset && end.is_none_or(|e| index < e);
        if selected && !cut {
            if page.len() + line.len() > MAX_READ_PAGE_BYTES {
                cut = true;
            } else {
                page.extend_from_slice(&line);
                taken += 1;
            }
        }
        index += 1;
    }
    let offset = range.offset.min(index);
    let truncated = offset + taken < index;
    let content = String::from_utf8(page).map_err(|_| Error::NotText {
        path: path.as_str().to_string(),
    })?;
    Ok((content, index, taken, truncated))
}

/// The page of `file` that `range` selects.
fn text_page(file: OpenFile, path: CanonicalPath, range: LineRange) -> Result<TextPage> {
    let (content, total, lines, truncated) = match file.content {
        Content::Memory(data) => read_page(&data[..], &path, range)?,
        Content::Disk(f) => {
            // One read for a small file, not a 256 KiB buffer.
            let capacity = file.meta.size.saturating_add(1).min(256 * 1024) as usize;
            read_page(BufReader::with_capacity(capacity, f), &path, range)?
        }
    };
    Ok(TextPage {
        offset: range.offset.min(total),
        path,
        content,
        total_lines: total,
        lines,
        truncated,
        version: file.meta.version,
        size: file.meta.size,
    })
}

pub(crate) fn byte_chunks(
    content: Content,
    path: CanonicalPath,
    offset: u64,
    length: u64,
    chunk: usize,
) -> BoxStream<'static, Result<Bytes>> {
    match content {
        Content::Memory(data) => {
            let start = offset as usize;
            let end = start + length as usize;
            futures::stream::iter((start..end).step_by(chunk.max(1)).map(move |at| {
                if at > start {
                    crate::faults::check_stream(path.as_str());
                }
                Ok(data.slice(at..(at + chunk).min(end)))
            }))
            .boxed()
        }
        Content::Disk(file) => {
            // One producer per stream, at most READ_AHEAD_BYTES (or one
            // chunk) queued: memory stays bounded, and a dropped receiver
            // stops the reads.
            let queued = (READ_AHEAD_BYTES / chunk.max(1)).max(1);
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes>>(queued);
            crate::producer::spawn_blocking("ReadBytes", tx, move |tx| {
                let mut at = offset;
                let end = offset + length;
                while at < end {
                    if at > offset {
                        crate::faults::check_stream(path.as_str());
                    }
                    let want = ((end - at) as usize).min(chunk);
                    // Read into the new buffer's spare room: not zeroed
                    // first, a chunk's bytes are written once.
                    let mut buf = Vec::with_capacity(want);
                    let read =
                        rustix::io::pread(&file, rustix::buffer::spare_capacity(&mut buf), at);
                    let msg = match read {
                        Ok(0) => Err(Error::internal(format!(
                            "'{path}' was truncated by another process while being read"
                        ))),
                        Ok(n) => {
                            at += n as u64;
                            Ok(Bytes::from(buf))
                        }
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(e) => Err(Error::from_io(e.into(), &path)),
                    };
                    let failed = msg.is_err();
                    if tx.blocking_send(msg).is_err() || failed {
                        return;
                    }
                }
            });
            tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
        }
    }
}

#[async_trait]
impl<B: Backend> Filesystem for Workspace<B> {
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        let path = path.clone();
        self.run(move |b| text_page(b.open(&path)?, path, range))
            .await
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        let chunk = if chunk_size == 0 {
            wsfs::DEFAULT_CHUNK_SIZE
        } else {
            chunk_size.min(MAX_CHUNK_SIZE)
        };
        let p = path.clone();
        let file = self.run(move |b| b.open(&p)).await?;
        let size = file.meta.size;
        if range.offset > size {
            return Err(Error::OutOfRange {
                path: path.as_str().to_string(),
                message: format!(
                    "offset {} is past the end of '{path}' ({size} bytes)",
                    range.offset
                ),
            });
        }
        let length = range
            .limit
            .map_or(size - range.offset, |l| l.min(size - range.offset));
        Ok(ByteStream {
            path: path.clone(),
            size,
            version: file.meta.version,
            offset: range.offset,
            length,
            chunks: crate::metrics::Gauged::new(
                byte_chunks(file.content, path.clone(), range.offset, length, chunk)
                    .inspect(|c| {
                        if let Ok(bytes) = c {
                            crate::metrics::BYTES_STREAMED.fetch_add(
                                bytes.len() as u64,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                        }
                    })
                    .boxed(),
                &crate::metrics::ACTIVE_BYTE_STREAMS,
            )
            .boxed(),
        })
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        // Refused before the content is copied.
        self.check_size(path, content.len() as u64)?;
        let data = Bytes::copy_from_slice(content.as_bytes());
        self.write_bytes(path, options, futures::stream::iter([Ok(data)]).boxed())
            .await
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        self.writable_file(path, "write")?;
        let staged = self.stage_upload(path, data).await?;
        self.commit(path, staged, options).await
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        self.writable_file(path, "patch")?;
        let ranges = Arc::new(std::sync::Mutex::new(Vec::new()));
        let admitted = ranges.clone();
        let (p, limit) = (path.clone(), self.limits.max_write_bytes);
        let bytes = data
            .map(move |chunk| {
                let mut ranges = admitted.lock().unwrap_or_else(|e| e.into_inner());
                admit_chunk(&p, &mut ranges, chunk?)
            })
            .boxed();
        let staged = self.stage_upload(path, bytes).await?;
        let patch = Patch {
            truncate_to: options.truncate_to,
            ranges: std::mem::take(&mut *ranges.lock().unwrap_or_else(|e| e.into_inner())),
            create_missing: options.create_missing,
        };
        let (path, limits, quota) = (path.clone(), self.limits, self.quota.clone());
        self.locked(vec![path.clone()], move |b| {
            let current = b.metadata(&path)?;
            check_version(&path, current.as_ref(), options.if_version)?;
            match current.as_ref().map(|m| m.kind) {
                None if !options.create_missing => {
                    return Err(Error::FileNotFound {
                        path: path.as_str().to_string(),
                    })
                }
                Some(FileKind::Directory) => {
                    return Err(Error::IsADirectory {
                        path: path.as_str().to_string(),
                    })
                }
                Some(FileKind::Symlink) => return Err(crate::backend::symlink_denied(&path, true)),
                _ => {}
            }
            let old = current.as_ref().map_or(0, |m| m.size);
            let size = patch.size_after(old);
            // What a patch adds to the file costs what writing it costs: a
            // gap or an extension is bytes the server makes.
            if size.saturating_sub(old) > limit {
                return Err(Error::TooLarge {
                    path: path.as_str().to_string(),
                    size: size - old,
                    limit,
                });
            }
            let bytes_written = staged.len();
            let mode = CommitMode {
                append: false,
                create_parents: options.create_parents,
                permissions: options.permissions,
                modified: options.modified,
                swap_out: true,
            };
            let landing = Landing {
                quota: &quota,
                limits: &limits,
                current: current.as_ref(),
                size,
                bytes_written,
            };
            landing.land(b, path, |b, path| {
                b.commit_patch(staged, path, &patch, mode)
            })
        })
        .await
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        wsfs::check_symlink_target(path, target)?;
        self.writable(path)?;
        let (path, target) = (path.clone(), target.to_string());
        self.locked(vec![path.clone()], move |b| {
            b.symlink(&path, &target, options.create_parents)
        })
        .await
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        if edit.old_text.is_empty() {
            return Err(Error::invalid_argument("old_text must not be empty"));
        }
        // A dry run previews the real edit: it fails wherever the edit
        // would, and costs no more.
        self.writable(path)?;
        let limit = self.limits.max_write_bytes;
        // Neither text can be part of a result within the limit when it is
        // itself larger: refused before the file is read.
        for text in [&edit.old_text, &edit.new_text] {
            self.check_size(path, text.len() as u64)?;
        }
        // Read, replace and commit under the lock: no update slips between.
        let limits = self.limits;
        let quota = self.quota.clone();
        let path = path.clone();
        self.locked(vec![path.clone()], move |b| {
            let (text, meta) = Self::read_text_for_edit(b, &path, limit)?;
            check_version(&path, Some(&meta), edit.if_version)?;
            let count = text.matches(edit.old_text.as_str()).count() as u64;
            if count == 0 {
                return Err(Error::NoMatch {
                    path: path.as_str().to_string(),
                });
            }
            if count > 1 && !edit.replace_all {
                return Err(Error::AmbiguousMatch {
                    path: path.as_str().to_string(),
                    count,
                });
            }
            // The result's size follows from the match count alone, so an
            // edit that would grow past the limit is refused before the
            // result is built.
            let size = edited_size(
                text.len() as u64,
                count,
                edit.old_text.len() as u64,
                edit.new_text.len() as u64,
            );
            if size > limit {
                return Err(Error::TooLarge {
                    path: path.as_str().to_string(),
                    size,
                    limit,
                });
            }
            let new_text = text.replace(edit.old_text.as_str(), &edit.new_text);
            let diff = bounded_diff(&path, &text, &new_text);
            let (version, size) = if edit.dry_run {
                (meta.version, meta.size)
            } else {
                let (old, new) = (Usage::file(meta.size), Usage::file(new_text.len() as u64));
                let reserved = quota.reserve(b, &limits, &path, old, new)?;
                let mut staged = b.stage()?;
                staged.write_chunk(new_text.as_bytes())?;
                let mode = CommitMode {
                    append: false,
                    create_parents: false,
                    swap_out: true,
                    ..CommitMode::default()
                };
                let m = reserved.land(|| b.commit(staged, &path, mode))?;
                (m.version, m.size)
            };
            Ok(EditOutcome {
                path,
                replacements: count,
                version,
                diff,
                dry_run: edit.dry_run,
                size,
            })
        })
        .await
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        self.writable(path)?;
        let path = path.clone();
        let quota = self.quota.clone();
        self.locked(vec![path.clone()], move |b| {
            let current = match b.metadata(&path) {
                Err(Error::NotADirectory { .. }) => None,
                other => other?,
            };
            check_version(&path, current.as_ref(), options.if_version)?;
            match current {
                None if options.allow_missing => Ok(0),
                None => Err(Error::FileNotFound {
                    path: path.as_str().to_string(),
                }),
                // Emptying the workspace is one removal per entry at its
                // top: recorded, so that the next start completes one a
                // crash cut short.
                Some(_) if path.is_root() && options.recursive => quota.change(|| {
                    let intent =
                        crate::backend::intent::Intent::emptying("delete the workspace's contents");
                    crate::backend::intent::apply(b, &intent, || b.remove(&path, true))
                }),
                Some(_) => quota.change(|| b.remove(&path, options.recursive)),
            }
        })
        .await
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        self.writable(path)?;
        let p = path.clone();
        let created = self
            .locked(vec![p.clone()], move |b| {
                let permissions = options
                    .permissions
                    .unwrap_or_else(|| b.default_directory_permissions());
                b.mkdir(&p, options.parents, permissions)
            })
            .await?;
        if !created && !options.exist_ok {
            return Err(Error::AlreadyExists {
                path: path.as_str().to_string(),
            });
        }
        Ok(created)
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<u64> {
        self.writable(source)?;
        self.writable(destination)?;
        let (src, dst) = (source.clone(), destination.clone());
        let quota = self.quota.clone();
        self.locked(vec![src.clone(), dst.clone()], move |b| {
            if options.if_version.is_some() {
                let current = b.metadata(&src)?;
                check_version(&src, current.as_ref(), options.if_version)?;
            }
            quota.change(|| b.rename(&src, &dst, options.overwrite, options.create_parents))
        })
        .await
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<u64> {
        self.writable(destination)?;
        let (src, dst) = (source.clone(), destination.clone());
        let limits = self.limits;
        let quota = self.quota.clone();
        self.locked(vec![src.clone(), dst.clone()], move |b| {
            let (removed, added) = if quota::limited(&limits) {
                (quota::usage(b, &dst)?, quota::usage(b, &src)?)
            } else {
                Default::default()
            };
            let reserved = quota.reserve(b, &limits, &dst, removed, added)?;
            reserved.land(|| b.copy(&src, &dst, options.overwrite, options.create_parents))
        })
        .await
    }

    async fn list(&self, path: &CanonicalPath, depth: u32) -> Result<Listing> {
        let depth = depth.max(1);
        let p = path.clone();
        let (entries, truncated) = self
            .run(move |b| b.list(&p, depth, MAX_LIST_ENTRIES))
            .await?;
        Ok(Listing {
            path: path.clone(),
            entries,
            truncated,
        })
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        let matcher = crate::glob::compile_glob(&query.pattern)?;
        let max = match query.max_results {
            0 => GlobQuery::DEFAULT_MAX_RESULTS,
            n => n.min(search::MAX_GLOB_RESULTS),
        };
        self.run(move |b| {
            let mut paths = Vec::new();
            for file in b.walk_files(&query.base)? {
                let file = file?;
                let rel = file
                    .strip_prefix(&query.base)
                    .unwrap_or_else(|| file.clone());
                if matcher.is_match(rel.as_str()) {
                    if paths.len() as u64 == max {
                        return Ok(GlobOutcome {
                            paths,
                            truncated: true,
                        });
                    }
                    paths.push(file);
                }
            }
            Ok(GlobOutcome {
                paths,
                truncated: false,
            })
        })
        .await
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        search::grep(self.backend.clone(), query)
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        // In place, even on a backend that blocks: a path resolution and a
        // `statx` cost less than the hand-off to the blocking pool and back
        // (two thread wake-ups, most of a Stat's time with 16 callers on 2
        // CPUs). A text Read measured slower in place and stays there.
        self.backend
            .metadata(path)?
            .ok_or_else(|| Error::FileNotFound {
                path: path.as_str().to_string(),
            })
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        // In place, as Stat.
        match self.backend.metadata(path) {
            Ok(m) => Ok(m.map(|m| m.kind)),
            Err(Error::NotADirectory { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        attributes.check()?;
        self.writable(path)?;
        let path = path.clone();
        self.locked(vec![path.clone()], move |b| {
            let current = b.metadata(&path)?;
            check_version(&path, current.as_ref(), attributes.if_version)?;
            if current.is_none() {
                return Err(Error::FileNotFound {
                    path: path.as_str().to_string(),
                });
            }
            let m = b.set_attributes(&path, attributes.permissions, attributes.modified)?;
            Ok(AttributesOutcome::from(&m))
        })
        .await
    }
}

/// Adds one chunk of a patch to its list of ranges (a chunk that
/// continues the last range extends it) and hands on its bytes.
fn admit_chunk(
    path: &CanonicalPath,
    ranges: &mut Vec<PatchRange>,
    chunk: PatchChunk,
) -> Result<Bytes> {
    let len = chunk.data.len() as u64;
    if len == 0 {
        return Ok(chunk.data);
    }
    if chunk
        .offset
        .checked_add(len)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(Error::invalid_argument(format!(
            "a patch of '{path}' writes {len} bytes at offset {}, past the largest file size",
            chunk.offset
        )));
    }
    if let Some(last) = ranges.last_mut().filter(|last| last.end() == chunk.offset) {
        last.len += len;
        return Ok(chunk.data);
    }
    if ranges.len() == MAX_PATCH_RANGES {
        return Err(Error::invalid_argument(format!(
            "a patch of '{path}' may write at most {MAX_PATCH_RANGES} separate ranges; \
             join neighbouring writes or send several patches"
        )));
    }
    ranges.push(PatchRange {
        offset: chunk.offset,
        len,
    });
    Ok(chunk.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;
    use wsfs::{Filesystem, WriteOptions};

    fn memory_workspace() -> Arc<Workspace<MemoryBackend>> {
        Arc::new(Workspace::new(
            MemoryBackend::new(),
            SessionLimits::default(),
        ))
    }

    #[tokio::test]
    async fn work_abandoned_before_it_commits_changes_nothing_and_committed_work_finishes() {
        let ws = memory_workspace();
        let p = CanonicalPath::from_canonical("f.txt");

        // Abandoned while it waits for the lock: refused, nothing written.
        let held = ws.writes.clone().lock_owned().await;
        let commitment = Arc::new(Commitment::default());
        let waiting = {
            let (ws, p) = (ws.clone(), p.clone());
            let scope = commitment.clone();
            tokio::spawn(async move {
                scope
                    .scope(ws.write(&p, "late", WriteOptions::default()))
                    .await
            })
        };
        tokio::task::yield_now().await;
        assert!(commitment.abandon());
        drop(held);
        let err = waiting.await.unwrap().unwrap_err();
        assert_eq!(err.reason(), "CANCELLED", "{err}");
        assert_eq!(ws.exists(&p).await.unwrap(), None);

        // Committed: the caller can no longer abandon it.
        let commitment = Arc::new(Commitment::default());
        commitment
            .scope(ws.write(&p, "kept", WriteOptions::default()))
            .await
            .unwrap();
        assert!(!commitment.abandon());
        assert_eq!(
            ws.read(&p, LineRange::default()).await.unwrap().content,
            "kept"
        );
    }

    fn chunk(offset: u64, data: &'static [u8]) -> PatchChunk {
        PatchChunk {
            offset,
            data: Bytes::from_static(data),
        }
    }

    #[test]
    fn touching_patch_chunks_are_one_range_and_empty_ones_none() {
        let path = CanonicalPath::from_canonical("f");
        let mut ranges = Vec::new();
        for c in [
            chunk(0, b"ab"),
            chunk(2, b"c"),
            chunk(9, b""),
            chunk(5, b"x"),
        ] {
            admit_chunk(&path, &mut ranges, c).unwrap();
        }
        assert_eq!(
            ranges,
            [
                PatchRange { offset: 0, len: 3 },
                PatchRange { offset: 5, len: 1 }
            ]
        );
    }

    #[test]
    fn a_patch_of_too_many_ranges_is_refused_at_the_first_one_over() {
        let path = CanonicalPath::from_canonical("f");
        let mut ranges = Vec::new();
        for i in 0..MAX_PATCH_RANGES as u64 {
            admit_chunk(&path, &mut ranges, chunk(i * 2, b"x")).unwrap();
        }
        // One that touches the last range still fits.
        admit_chunk(
            &path,
            &mut ranges,
            chunk(MAX_PATCH_RANGES as u64 * 2 - 1, b"y"),
        )
        .unwrap();
        let err = admit_chunk(&path, &mut ranges, chunk(u64::from(u32::MAX), b"z")).unwrap_err();
        assert_eq!(err.reason(), "INVALID_ARGUMENT");
        assert!(
            err.to_string().contains("at most 65536 separate ranges"),
            "{err}"
        );
        assert_eq!(ranges.len(), MAX_PATCH_RANGES);
    }

    fn page(text: &str, offset: u64, limit: Option<u64>) -> (String, u64, u64, bool) {
        let p = CanonicalPath::from_canonical("f");
        read_page(text.as_bytes(), &p, LineRange { offset, limit }).unwrap()
    }

    #[test]
    fn final_newline_does_not_start_a_line() {
        assert_eq!(page("a\nb\n", 0, None).1, 2);
        assert_eq!(page("a\nb", 0, None).1, 2);
        assert_eq!(page("", 0, None).1, 0);
    }

    #[test]
    fn pages_rebuild_the_file() {
        let text = "one\r\ntwo\n\nfour";
        for size in 1..5 {
            let mut rebuilt = String::new();
            let mut offset = 0;
            loop {
                let (content, total, taken, truncated) = page(text, offset, Some(size));
                rebuilt.push_str(&content);
                offset += taken;
                if !truncated {
                    assert_eq!(offset, total);
                    break;
                }
            }
            assert_eq!(rebuilt, text);
        }
    }

    #[test]
    fn invalid_utf8_anywhere_is_not_text() {
        let p = CanonicalPath::from_canonical("f");
        let data = b"ok\n\xff\xfe\n";
        let r = read_page(
            &data[..],
            &p,
            LineRange {
                offset: 0,
                limit: Some(1),
            },
        );
        assert!(matches!(r, Err(Error::NotText { .. })));
    }

    /// A write, a restore and an import on a read-only session are refused
    /// by the one check, in the same words, before anything changes.
    #[tokio::test]
    async fn read_only_refuses_writes_restores_and_imports_alike() {
        use crate::archive::import::ArchiveTarget;
        use crate::memory::MemorySnapshots;
        use crate::snapshots::SnapshotStore;
        let ws = memory_workspace();
        let p = CanonicalPath::from_canonical("f.txt");
        ws.write(&p, "before", WriteOptions::default())
            .await
            .unwrap();
        let snapshots = MemorySnapshots::new(ws.clone());
        let taken = snapshots.snapshot("t").await.unwrap();
        ws.set_read_only(true);

        let write = ws.write(&p, "after", WriteOptions::default()).await;
        let restore = snapshots
            .restore(&taken.id, &CanonicalPath::root())
            .await
            .map(drop);
        let import = ws.importable();
        for (refused, path, action) in [
            (write.map(drop), "f.txt", "change 'f.txt'"),
            (restore, "", "restore a snapshot"),
            (import, "", "import an archive"),
        ] {
            match refused {
                Err(Error::ReadOnly { path: p, message }) => {
                    assert_eq!(p, path);
                    assert_eq!(
                        message,
                        format!("cannot {action}: this session is read-only")
                    );
                }
                other => panic!("{action}: {other:?}"),
            }
        }
        assert_eq!(
            ws.read(&p, LineRange::default()).await.unwrap().content,
            "before"
        );
    }
}
