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

use super::errno::describe;
use super::shared::Shared;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedMutexGuard, Semaphore};
use wsfs::CanonicalPath;

/// Commits queued or running at most.
pub(super) const QUEUE: usize = 64;

/// How long a queued commit waits for the calls that follow a close.
const GATHER: Duration = Duration::from_millis(10);

/// The queue's places.
pub(super) struct WriteBehind {
    places: Arc<Semaphore>,
}

impl WriteBehind {
    pub(super) fn new() -> WriteBehind {
        WriteBehind {
            places: Arc::new(Semaphore::new(QUEUE)),
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
        let place = self
            .behind
            .places
            .clone()
            .acquire_owned()
            .await
            .expect("the queue's semaphore is never closed");
        if !staged.enqueue() {
            return;
        }
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

    /// Waits until every queued commit has ended.
    pub(super) async fn drain(&self) {
        let all = self
            .behind
            .places
            .acquire_many(QUEUE as u32)
            .await
            .expect("the queue's semaphore is never closed");
        drop(all);
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
