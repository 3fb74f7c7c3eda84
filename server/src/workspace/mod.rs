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

mod byte_stream;
mod commitment;
mod edit;
mod filesystem;
mod patch;
mod text;

pub(crate) use byte_stream::byte_chunks;
pub use commitment::Commitment;
pub use edit::{EDIT_DIFF_DEADLINE, MAX_EDIT_DIFF_BYTES};
pub use patch::MAX_PATCH_RANGES;
pub use text::MAX_READ_PAGE_BYTES;

use crate::backend::{Backend, CommitMode, StagedFile};
use crate::claims::PathLocks;
use crate::limits::SessionLimits;
use crate::quota::{Ledger, Usage};
use bytes::Bytes;
use commitment::may_commit;
use futures::stream::StreamExt;
use std::sync::Arc;
use wsfs::{
    ByteChunks, CanonicalPath, Error, FileKind, Metadata, Result, WriteMode, WriteOptions,
    WriteOutcome,
};

/// Most entries one List returns.
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Uploads are handed to the backend in batches of about this size.
const STAGE_BATCH_BYTES: usize = 1024 * 1024;

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
        self.claimed(vec![CanonicalPath::root()], Cost::Large, f)
            .await
    }

    /// Runs `f` on the backend holding a claim on `paths`, owned by the
    /// work (see "Mutations own their lock").
    async fn claimed<T, F>(&self, paths: Vec<CanonicalPath>, cost: Cost, f: F) -> Result<T>
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
        // A session with a quota walks the workspace for each change's
        // check: never small.
        let cost = if crate::quota::limited(&self.limits) {
            Cost::Large
        } else {
            cost
        };
        run_costed(&self.backend, cost, move |b| {
            let _guard = guard;
            f(b)
        })
        .await
    }

    /// Runs mutation `f` holding a claim on `paths`, owned by the work
    /// rather than by the caller (see "Mutations own their lock"), and
    /// makes its changes as durable as the server's `--durability` asks
    /// before the claim is let go.
    async fn locked<T, F>(&self, paths: Vec<CanonicalPath>, cost: Cost, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&B) -> Result<T> + Send + 'static,
    {
        self.claimed(paths, cost, move |b| {
            let out = f(b)?;
            b.settle()?;
            Ok(out)
        })
        .await
    }

    /// The cost of a change that stages `staged` bytes and copies, replaces
    /// or removes the file at `path` as it is now (a patch, an append, an
    /// overwrite, whose old file's blocks are freed as it goes, a Delete):
    /// the file's size is read in place, before the lock, as Stat reads
    /// it. A file that grows in between makes a large change run in place
    /// once; nothing else.
    fn cost_of_file(&self, path: &CanonicalPath, staged: u64) -> Cost {
        if Cost::of_bytes(staged) == Cost::Large {
            // No need to look.
            return Cost::Large;
        }
        let current = match self.backend.metadata(path) {
            Ok(Some(m)) => m.size,
            Ok(None) => 0,
            Err(_) => return Cost::Large,
        };
        Cost::of_bytes(staged.max(current))
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
        // Appending copies the file as it is, and replacing it frees its
        // blocks: large unless it is small.
        let cost = self.cost_of_file(&path, staged.len());
        self.locked(vec![path.clone()], cost, move |b| {
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
        let mut staged = run_costed(&self.backend, Cost::Small, |b| b.stage()).await?;
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
                let cost = Cost::of_bytes(chunks.iter().map(|c| c.len() as u64).sum());
                staged = run_costed(&self.backend, cost, move |_| {
                    for c in &chunks {
                        staged.write_chunk(c)?;
                    }
                    Ok(staged)
                })
                .await?;
            }
            if next.is_none() {
                break;
            }
        }
        Ok(staged)
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
    run_costed(backend, Cost::Large, f).await
}

/// The most bytes a change may stage, or find in the file it changes, and
/// still be [`Cost::Small`].
const SMALL_CHANGE_BYTES: u64 = 64 * 1024;

/// What a backend call costs, which decides where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cost {
    /// A few system calls over at most [`SMALL_CHANGE_BYTES`] (a small
    /// file written, patched, removed or renamed, a directory made, bits or
    /// a time set): run in place, on the runtime's thread, when the
    /// backend allows it ([`Backend::small_changes_in_place`]). The hand-off
    /// to the blocking pool and back costs two thread wake-ups, more than
    /// the change itself: a profile of `tar x` through the mount had most
    /// of the server's time in them.
    Small,
    /// Anything else: on the blocking pool when the backend blocks.
    Large,
}

impl Cost {
    /// [`Cost::Small`] when `bytes` (staged, or in the file a change
    /// copies) are at most [`SMALL_CHANGE_BYTES`].
    pub(crate) fn of_bytes(bytes: u64) -> Cost {
        if bytes <= SMALL_CHANGE_BYTES {
            Cost::Small
        } else {
            Cost::Large
        }
    }
}

/// Runs `f` in place when it costs little and the backend allows it, else
/// as [`run_on`] does.
async fn run_costed<B, T, F>(backend: &Arc<B>, cost: Cost, f: F) -> Result<T>
where
    B: Backend,
    T: Send + 'static,
    F: FnOnce(&B) -> Result<T> + Send + 'static,
{
    let in_place = cost == Cost::Small && backend.small_changes_in_place();
    if B::BLOCKING && !in_place {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;
    use wsfs::{Filesystem, LineRange, WriteOptions};

    fn memory_workspace() -> Arc<Workspace<MemoryBackend>> {
        Arc::new(Workspace::new(
            MemoryBackend::new(),
            SessionLimits::default(),
        ))
    }

    #[tokio::test]
    async fn a_change_is_small_while_its_bytes_and_its_file_are_at_most_64_kib() {
        let ws = memory_workspace();
        let small = "s".repeat(SMALL_CHANGE_BYTES as usize);
        let large = "l".repeat(SMALL_CHANGE_BYTES as usize + 1);
        for (name, content) in [("small.txt", &small), ("large.txt", &large)] {
            ws.write(
                &CanonicalPath::from_canonical(name),
                content,
                WriteOptions::default(),
            )
            .await
            .unwrap();
        }
        let cost =
            |name: &str, staged: u64| ws.cost_of_file(&CanonicalPath::from_canonical(name), staged);
        assert_eq!(cost("missing.txt", SMALL_CHANGE_BYTES), Cost::Small);
        assert_eq!(cost("missing.txt", SMALL_CHANGE_BYTES + 1), Cost::Large);
        assert_eq!(cost("small.txt", 0), Cost::Small);
        assert_eq!(cost("small.txt", SMALL_CHANGE_BYTES + 1), Cost::Large);
        // A small write over, or the removal of, a large file frees its
        // blocks: large.
        assert_eq!(cost("large.txt", 1), Cost::Large);
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
