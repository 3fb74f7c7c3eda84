//! The write-behind: the commit a close asks for is queued, not awaited,
//! so that a program writing many files (`tar x`, `git clone`) waits for
//! no commit's round trip, and the commits of many files travel at once.
//!
//! - Bounded: at most [`QUEUE`] commits are queued or running; a close
//!   that finds the queue full waits for a place. A queued file keeps its
//!   staging (on local disk) until its commit lands.
//! - Ordered per file: a commit holds its file's commit lock, and whatever
//!   depends on the server holding the file takes that lock first (fsync,
//!   rename, unlink; see [`Shared::quiesce`]); a directory rename and the
//!   unmount wait for the whole queue ([`Shared::drain`]).
//! - Folding: a queued commit waits [`GATHER`] before it starts, so the
//!   chmod and utimensat that `tar` and `cp -p` make right after close go
//!   in the same commit, and a temporary file renamed or deleted at once
//!   is committed at its new name or not at all.
//! - Reported: a queued commit that fails keeps its bytes staged, is
//!   written to the mount's stderr, and is the error of the file's next
//!   close or fsync (which tries again).
//!
//! Unlinks go behind too ([`Shared::queue_delete`]): an unlink of a file
//! the mount knows (not open, nothing staged) is answered once its Delete
//! is on its way, at most [`DELETES`] at a time. Whatever depends on the
//! name waits for it ([`Shared::settle`]): a lookup or create of the same
//! name, a rename, a listing or rmdir of the directory, the unmount. A
//! Delete the server refuses is written to stderr, the name is known
//! again, and the refusal is the error of the directory's next rmdir or
//! fsync.

use super::errno::{describe, errno};
use super::shared::Shared;
use fuser::Errno;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{OwnedMutexGuard, Semaphore};
use wsfs::{CanonicalPath, DeleteOptions, Error, Filesystem as _};

/// Commits queued or running at most.
pub(super) const QUEUE: usize = 64;

/// How long a queued commit waits for the calls that follow a close.
const GATHER: Duration = Duration::from_millis(10);

/// Deletes on their way at most.
pub(super) const DELETES: usize = 64;

/// The queue's places, and the Deletes on their way.
pub(super) struct WriteBehind {
    places: Arc<Semaphore>,
    delete_places: Arc<Semaphore>,
    deletes: Mutex<Deletes>,
    /// Bumped whenever a Delete ends, for whoever waits on one.
    ended: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Deletes {
    /// The paths of the Deletes on their way (a count each).
    pending: HashMap<CanonicalPath, u32>,
    /// The first refusal of a Delete, by the directory it was in.
    refused: HashMap<CanonicalPath, Errno>,
}

impl WriteBehind {
    pub(super) fn new() -> WriteBehind {
        WriteBehind {
            places: Arc::new(Semaphore::new(QUEUE)),
            delete_places: Arc::new(Semaphore::new(DELETES)),
            deletes: Mutex::default(),
            ended: tokio::sync::watch::channel(0).0,
        }
    }

    fn deletes(&self) -> MutexGuard<'_, Deletes> {
        self.deletes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a Delete of `path` (or, with `under`, of anything under
    /// it) is on its way.
    fn deleting(&self, path: &CanonicalPath, under: bool) -> bool {
        let deletes = self.deletes();
        if under {
            deletes.pending.keys().any(|p| p.starts_with(path))
        } else {
            deletes.pending.contains_key(path)
        }
    }
}

impl Shared {
    /// Queues the commit of `ino`'s staged changes and returns once it is
    /// queued (after waiting for a place when the queue is full).
    pub(super) async fn queue_commit(self: &Arc<Self>, ino: u64) {
        let Some(staged) = self.staged(ino) else {
            return;
        };
        if !staged.has_work() {
            return;
        }
        // A commit queued and not started sends this change too: a chmod
        // or utimensat after close waits for no place.
        if !staged.enqueue() {
            return;
        }
        let place = self
            .behind
            .places
            .clone()
            .acquire_owned()
            .await
            .expect("the queue's semaphore is never closed");
        let s = self.clone();
        self.runtime.spawn(async move {
            tokio::time::sleep(GATHER).await;
            staged.started();
            let failure = match s.commit(ino).await {
                Ok(()) => None,
                Err(e) => {
                    let path = s.path(ino).map(|(p, _)| p.to_string()).unwrap_or_default();
                    eprintln!(
                        "wsfs mount: the changes to '{path}' could not be committed: {}",
                        describe(e)
                    );
                    Some(i32::from(e))
                }
            };
            staged.ended(failure);
            drop(place);
            s.drop_staging_if_done(ino);
        });
    }

    /// Queues the commit of a change made to `ino` after its last close
    /// (a chmod, utimensat or truncate by name): no close will send it.
    pub(super) async fn queue_closed(self: &Arc<Self>, ino: u64) {
        let closed = self.inodes().get(ino).is_some_and(|node| node.open == 0);
        if closed {
            self.queue_commit(ino).await;
        }
    }

    /// Waits until every queued commit and every Delete has ended.
    pub(super) async fn drain(&self) {
        let all = self
            .behind
            .places
            .acquire_many(QUEUE as u32)
            .await
            .expect("the queue's semaphore is never closed");
        drop(all);
        self.settle_under(&CanonicalPath::root()).await;
    }

    /// Sends the Delete of the file at `path` and returns once it is on its
    /// way (after waiting for a place when [`DELETES`] are): the caller
    /// has already taken the name out of the inode table and the known
    /// names.
    pub(super) async fn queue_delete(self: &Arc<Self>, path: CanonicalPath) {
        let place = self
            .behind
            .delete_places
            .clone()
            .acquire_owned()
            .await
            .expect("the deletes' semaphore is never closed");
        *self
            .behind
            .deletes()
            .pending
            .entry(path.clone())
            .or_default() += 1;
        let s = self.clone();
        self.runtime.spawn(async move {
            let options = DeleteOptions {
                recursive: false,
                allow_missing: false,
                if_version: None,
            };
            let sent = s.retry_refusal(|| s.session.delete(&path, options)).await;
            // Gone already (removed elsewhere first) is what was asked.
            if let Some(e) = sent
                .as_ref()
                .err()
                .filter(|e| !matches!(e, Error::FileNotFound { .. }))
            {
                let refusal = errno(e);
                eprintln!(
                    "wsfs mount: the file '{path}' could not be removed (it is still there): {}",
                    describe(refusal)
                );
                s.known.added(&path);
                if let Some(dir) = path.parent() {
                    s.behind.deletes().refused.entry(dir).or_insert(refusal);
                }
            }
            {
                let mut deletes = s.behind.deletes();
                if let Some(count) = deletes.pending.get_mut(&path) {
                    *count -= 1;
                    if *count == 0 {
                        deletes.pending.remove(&path);
                    }
                }
            }
            drop(place);
            s.behind.ended.send_modify(|n| *n += 1);
        });
    }

    /// Waits until no Delete of `path` is on its way.
    pub(super) async fn settle(&self, path: &CanonicalPath) {
        self.settle_deletes(path, false).await;
    }

    /// Waits until no Delete of `path` or of anything under it is on its
    /// way.
    pub(super) async fn settle_under(&self, path: &CanonicalPath) {
        self.settle_deletes(path, true).await;
    }

    async fn settle_deletes(&self, path: &CanonicalPath, under: bool) {
        let mut ended = self.behind.ended.subscribe();
        while self.behind.deleting(path, under) {
            if ended.changed().await.is_err() {
                return;
            }
        }
    }

    /// The first Delete in `dir` the server refused since the last call,
    /// once its Deletes have ended.
    pub(super) async fn delete_refused(&self, dir: &CanonicalPath) -> Option<Errno> {
        self.settle_under(dir).await;
        self.behind.deletes().refused.remove(dir)
    }

    /// Waits for a running commit of the file at `path` and holds its
    /// commit lock: a commit queued before a rename or unlink that takes
    /// this runs after it, at the new name or not at all.
    pub(super) async fn quiesce(&self, path: &CanonicalPath) -> Option<OwnedMutexGuard<()>> {
        let staged = {
            let inodes = self.inodes();
            let ino = inodes.at(path)?;
            inodes.get(ino)?.staged.clone()?
        };
        Some(staged.commit_lock.clone().lock_owned().await)
    }

    /// [`quiesce`](Shared::quiesce) of a rename's two files, in one order
    /// (the paths'), so that two renames never wait for each other.
    pub(super) async fn quiesce_both(
        &self,
        a: &CanonicalPath,
        b: &CanonicalPath,
    ) -> Vec<OwnedMutexGuard<()>> {
        let (first, second) = if a.as_str() <= b.as_str() {
            (a, b)
        } else {
            (b, a)
        };
        let mut held = Vec::new();
        held.extend(self.quiesce(first).await);
        held.extend(self.quiesce(second).await);
        held
    }
}
