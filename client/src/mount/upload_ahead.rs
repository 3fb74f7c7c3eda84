//! The upload ahead: a file written in long runs (a copy, a download, a
//! build's output) starts its commit's patch while it is still being
//! written, so that the bytes travel beside the writes instead of after
//! them. The server stages what arrives and commits nothing until the
//! stream ends, and the stream ends only in the commit at flush, fsync or
//! the last close: the file still becomes one new version, at the same
//! moment as without it. Bits or a time set meanwhile follow in a commit
//! of their own. A commit that sets another length than the upload began
//! with (a cut since), a rename, or the session's per-write limit passed
//! abandons it: the stream breaks off, the server drops what it staged,
//! and the commit goes the ordinary way with every byte.

use super::shared::Shared;
use super::staging::{AheadHeader, AheadStep, Commit, Staged};
use futures::StreamExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Filesystem as _, PatchOptions, WriteOutcome};

/// Most uploads ahead at once in a process: each holds one of its
/// connection's calls (the server allows 256 at once) while its file is
/// being written, and a chunk of memory. A file written while this many
/// run commits the ordinary way.
const MAX_AHEAD: usize = 8;

/// Uploads ahead under way.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// One of the [`MAX_AHEAD`] places, let go when dropped.
struct Place;

impl Place {
    fn take() -> Option<Place> {
        RUNNING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_AHEAD).then_some(n + 1)
            })
            .ok()
            .map(|_| Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An upload ahead under way.
pub(super) struct Running {
    path: CanonicalPath,
    unborn: bool,
    task: tokio::task::JoinHandle<wsfs::Result<WriteOutcome>>,
}

impl Shared {
    /// After a write to `ino`: starts its upload ahead when the write left
    /// a long dirty run (staging.rs says when).
    pub(super) fn upload_ahead(self: &Arc<Self>, ino: u64, staged: &Arc<Staged>) {
        if !staged.may_begin_ahead() {
            return;
        }
        let Ok((path, _)) = self.path(ino) else {
            return;
        };
        let Some(place) = Place::take() else {
            return;
        };
        let Some(header) = staged.begin_ahead() else {
            return;
        };
        let reader = match staged.reader() {
            Ok(reader) => reader,
            Err(_) => {
                staged.end_ahead(false);
                return;
            }
        };
        let unborn = self.unborn_at(&path) == Some(ino);
        let options = ahead_options(header, unborn);
        let chunks = ahead_chunks(self.clone(), staged, reader);
        let shared = self.clone();
        let target = path.clone();
        let task = self.runtime.spawn(async move {
            let _place = place;
            shared.session.patch_bytes(&target, options, chunks).await
        });
        *staged.ahead_task.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Running { path, unborn, task });
    }

    /// Ends the upload ahead of `staged`, if one runs, with the commit of
    /// `path` (its commit lock held): the commit and the server's answer
    /// when the upload carried it; `None` when there was none or it did
    /// not land (its bytes are dirty again, for the ordinary commit).
    pub(super) async fn finish_ahead(
        &self,
        staged: &Staged,
        path: &CanonicalPath,
        unborn: bool,
    ) -> Option<(Commit, WriteOutcome, bool)> {
        let running = staged
            .ahead_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let commit = staged.begin_commit();
        let limit = self.max_write.load(Ordering::Relaxed);
        let fits = match &commit {
            Some(commit) if running.path == *path && running.unborn == unborn => {
                staged.finish_ahead(commit, limit)
            }
            _ => None,
        };
        if fits.is_none() {
            staged.abort_ahead();
        }
        let answer = running
            .task
            .await
            .unwrap_or_else(|e| Err(Error::internal(format!("the upload's task failed: {e}"))));
        match (commit, answer, fits) {
            (Some(commit), Ok(outcome), Some(whole)) => {
                staged.end_ahead(true);
                Some((commit, outcome, whole))
            }
            (commit, answer, _) => {
                staged.end_ahead(false);
                if let Some(commit) = commit {
                    staged.failed(commit);
                }
                if let Err(Error::TooLarge { limit, .. }) = answer {
                    if limit > 0 {
                        self.max_write.store(limit, Ordering::Relaxed);
                    }
                }
                None
            }
        }
    }

    /// Abandons the upload ahead of `staged`, if one runs (the file left
    /// the workspace): nothing of it lands.
    pub(super) async fn drop_ahead(&self, staged: &Staged) {
        let running = staged
            .ahead_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(running) = running {
            staged.abort_ahead();
            let _ = running.task.await;
            staged.end_ahead(false);
        }
    }
}

/// The patch's options: what the commit will ask for, without the
/// modification time (the server's clock sets it as the bytes land).
fn ahead_options(header: AheadHeader, unborn: bool) -> PatchOptions {
    PatchOptions {
        truncate_to: header.truncate_to,
        permissions: header.permissions,
        ..super::namespace::create_options(unborn)
    }
}

/// The upload's chunks: dirty bytes as the writes leave them, then the
/// commit's last ranges; an error (which breaks the stream off, so that
/// nothing lands) when it is abandoned or the staging is gone.
fn ahead_chunks(
    shared: Arc<Shared>,
    staged: &Arc<Staged>,
    reader: super::staging::StageReader,
) -> wsfs::PatchChunks {
    // Held weakly: the upload never keeps the staging alive.
    let (wake, staged) = (staged.ahead_wake.clone(), Arc::downgrade(staged));
    futures::stream::unfold((shared, staged, reader, wake), |state| async move {
        let (shared, staged, reader, wake) = state;
        loop {
            let step = {
                let notified = wake.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let step = match staged.upgrade() {
                    Some(staged) => staged.next_ahead(shared.max_write.load(Ordering::Relaxed)),
                    None => AheadStep::Abort,
                };
                if step == AheadStep::Wait {
                    notified.await;
                    continue;
                }
                step
            };
            let chunks = match step {
                AheadStep::Send(offset, len) => {
                    super::write::read_staged(&reader, offset, len as usize)
                }
                AheadStep::Abort => vec![Err(Error::Cancelled {
                    message: "the upload ahead of the commit was abandoned".to_string(),
                })],
                AheadStep::Wait | AheadStep::Done => return None,
            };
            return Some((
                futures::stream::iter(chunks),
                (shared, staged, reader, wake),
            ));
        }
    })
    .flatten()
    .boxed()
}
