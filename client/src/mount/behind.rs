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
//! Namespace changes go behind too ([`Shared::queue_change`]): an unlink
//! of a file the mount knows (not open, nothing staged), an rmdir of a
//! directory the mount made or listed whose known names are all gone,
//! and the chmod or utimens of a directory the mount made (one change
//! when they come within [`GATHER`]) are answered once they are on their
//! way, at most
//! [`CHANGES`] at a time (their Deletes gathered into DeleteMany calls,
//! batch.rs). Each waits for the changes queued before it on
//! its path, above it or below it (an rmdir after the unlinks in it), and
//! whatever depends on the path waits for it ([`Shared::settle`]): a
//! lookup, Stat or create of the same name or in it, a rename, a listing
//! or rmdir of the directory, the unmount. A change the server refuses is
//! written to stderr, a removed name is known again, and the refusal is
//! the error of the parent directory's next rmdir or fsync.

use super::errno::{describe, errno};
use super::shared::Shared;
use fuser::{Errno, FileAttr};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedMutexGuard, Semaphore};
use wsfs::{Attributes, CanonicalPath, DeleteOptions, Error, FileKind, Filesystem as _};

/// Commits queued or running at most.
pub(super) const QUEUE: usize = 64;

/// How long a queued commit waits for the calls that follow a close.
const GATHER: Duration = Duration::from_millis(10);

/// Namespace changes on their way at most.
pub(super) const CHANGES: usize = 64;

/// A namespace change sent behind.
pub(super) enum Change {
    /// An unlink, or an rmdir.
    Delete { directory: bool },
    /// A directory's chmod or utimens.
    Attributes(Attributes),
}

/// The queue's places, and the changes on their way.
pub(super) struct WriteBehind {
    places: Arc<Semaphore>,
    change_places: Arc<Semaphore>,
    changes: Mutex<Changes>,
    /// Bumped whenever a change ends, for whoever waits on one.
    ended: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Changes {
    /// The next change's place in line.
    next: u64,
    /// The paths of the changes on their way, by place in line.
    pending: BTreeMap<u64, CanonicalPath>,
    /// The first refusal of a change, by the directory it was in.
    refused: HashMap<CanonicalPath, Errno>,
    /// A directory's bits and time queued and not sent yet, which a later
    /// chmod or utimens of it joins.
    unsent: HashMap<CanonicalPath, Attributes>,
}

/// Where a wait for the changes on their way looks, from a path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// The path and the directories above it.
    Above,
    /// Those and everything below the path.
    Related,
}

impl Reach {
    fn covers(self, path: &CanonicalPath, pending: &CanonicalPath) -> bool {
        path.starts_with(pending) || (self == Reach::Related && pending.starts_with(path))
    }
}

impl WriteBehind {
    pub(super) fn new() -> WriteBehind {
        WriteBehind {
            places: Arc::new(Semaphore::new(QUEUE)),
            change_places: Arc::new(Semaphore::new(CHANGES)),
            changes: Mutex::default(),
            ended: tokio::sync::watch::channel(0).0,
        }
    }

    fn changes(&self) -> MutexGuard<'_, Changes> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a change that `reach` covers from `path` is on its way
    /// ahead of place `before` in line.
    fn waiting(&self, path: &CanonicalPath, reach: Reach, before: u64) -> bool {
        self.changes()
            .pending
            .range(..before)
            .any(|(_, pending)| reach.covers(path, pending))
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
            // Its change event waits for it: `commit` holds the guard.
            let committed = s.commit(ino).await;
            let failure = match committed {
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

    /// Sends `change` to `path` and returns once it is on its way (after
    /// waiting for a place when [`CHANGES`] are): the caller has already
    /// made the mount show it (a removed name out of the inode table and
    /// the known names; a directory's new bits and time remembered).
    pub(super) async fn queue_change(self: &Arc<Self>, path: CanonicalPath, change: Change) {
        if let Change::Attributes(later) = &change {
            // A directory's chmod and utimens, back to back (tar): one
            // SetAttributes, when the first has not been sent yet.
            if let Some(unsent) = self.behind.changes().unsent.get_mut(&path) {
                unsent.permissions = later.permissions.or(unsent.permissions);
                unsent.modified = later.modified.or(unsent.modified);
                return;
            }
        }
        let place = self
            .behind
            .change_places
            .clone()
            .acquire_owned()
            .await
            .expect("the changes' semaphore is never closed");
        let ticket = {
            let mut changes = self.behind.changes();
            let ticket = changes.next;
            changes.next += 1;
            changes.pending.insert(ticket, path.clone());
            if let Change::Attributes(attributes) = change {
                changes.unsent.insert(path.clone(), attributes);
            }
            ticket
        };
        let s = self.clone();
        self.runtime.spawn(async move {
            if let Change::Attributes(_) = change {
                // For the utimens that follows a chmod.
                tokio::time::sleep(GATHER).await;
            }
            // In order on the path: an rmdir after the unlinks in it, a
            // second chmod after the first.
            s.wait_for_changes(&path, Reach::Related, ticket).await;
            let sent = match &change {
                Change::Delete { directory } => {
                    let options = DeleteOptions {
                        recursive: false,
                        allow_missing: false,
                        if_version: None,
                    };
                    let sent = s.retry_refusal(|| s.deletes.delete(&path, options)).await;
                    if *directory {
                        s.behind.changes().refused.remove(&path);
                    }
                    // Gone already (removed elsewhere first) is what was
                    // asked.
                    sent.map(drop).or_else(|e| match e {
                        Error::FileNotFound { .. } => Ok(()),
                        e => Err(e),
                    })
                }
                Change::Attributes(first) => {
                    let attributes = s.behind.changes().unsent.remove(&path).unwrap_or(*first);
                    let _own = s.own_change(&path);
                    let set = s
                        .retry_refusal(|| s.session.set_attributes(&path, attributes))
                        .await;
                    if let Ok(outcome) = &set {
                        // The mount shows these already: their event
                        // changes nothing the kernel holds.
                        let mut inodes = s.inodes();
                        let node = inodes.at(&path).and_then(|ino| inodes.get_mut(ino));
                        if let Some(node) = node {
                            node.own_version = Some(outcome.version);
                        }
                    }
                    set.map(drop)
                }
            };
            if let Err(e) = sent {
                s.change_refused(&path, &change, errno(&e));
            }
            s.behind.changes().pending.remove(&ticket);
            drop(place);
            s.behind.ended.send_modify(|n| *n += 1);
        });
    }

    /// A change sent behind was refused: said on stderr, the mount shows
    /// the path as the server holds it, and the refusal waits for the
    /// parent directory's next rmdir or fsync.
    fn change_refused(&self, path: &CanonicalPath, change: &Change, refusal: Errno) {
        let what = match change {
            Change::Delete { directory: false } => {
                format!("the file '{path}' could not be removed (it is still there)")
            }
            Change::Delete { directory: true } => {
                format!("the directory '{path}' could not be removed (it is still there)")
            }
            Change::Attributes(_) => {
                format!("the mode or time of the directory '{path}' could not be set")
            }
        };
        eprintln!("wsfs mount: {what}: {}", describe(refusal));
        let removed = matches!(change, Change::Delete { .. });
        if removed {
            self.known.added(path);
        }
        self.forget_cached(path, removed);
        if let Some(dir) = path.parent() {
            self.behind.changes().refused.entry(dir).or_insert(refusal);
        }
    }

    /// A chmod or utimens of the directory `ino`, answered here and sent
    /// behind when the mount made the directory and knows what the kernel
    /// was told of it: the attributes it has now. `None`: it must go to
    /// the server first.
    pub(super) async fn set_attributes_behind(
        self: &Arc<Self>,
        ino: u64,
        attributes: Attributes,
    ) -> Option<FileAttr> {
        if let Ok((path, _)) = self.path(ino) {
            // Its entry in its directory's kept listing is old, whether
            // the change goes behind or not.
            self.known.changed(&path);
        }
        let (path, attr) = {
            let mut inodes = self.inodes();
            let node = inodes.get_mut(ino).filter(|node| {
                node.kind == FileKind::Directory
                    && !node.unlinked
                    && !node.path.is_root()
                    && self.known.made_here(&node.path)
            })?;
            let mut attr = node.attr?;
            if let Some(permissions) = attributes.permissions {
                attr.perm = permissions.bits() as u16;
            }
            if let Some(modified) = attributes.modified {
                (attr.mtime, attr.atime, attr.ctime) = (modified, modified, modified);
            }
            node.attr = Some(attr);
            node.attr_at = Instant::now();
            (node.path.clone(), attr)
        };
        self.queue_change(path, Change::Attributes(attributes))
            .await;
        Some(attr)
    }

    /// Waits until no change on its way covers `path` (above it).
    pub(super) async fn settle(&self, path: &CanonicalPath) {
        self.wait_for_changes(path, Reach::Above, u64::MAX).await;
    }

    /// Waits until no change on its way covers `path`, above or below it.
    pub(super) async fn settle_under(&self, path: &CanonicalPath) {
        self.wait_for_changes(path, Reach::Related, u64::MAX).await;
    }

    async fn wait_for_changes(&self, path: &CanonicalPath, reach: Reach, before: u64) {
        let mut ended = self.behind.ended.subscribe();
        while self.behind.waiting(path, reach, before) {
            if ended.changed().await.is_err() {
                return;
            }
        }
    }

    /// The first change in `dir` the server refused since the last call,
    /// once the changes under it have ended.
    pub(super) async fn delete_refused(&self, dir: &CanonicalPath) -> Option<Errno> {
        self.settle_under(dir).await;
        self.behind.changes().refused.remove(dir)
    }

    /// A change in `dir` the server refused, already known (no wait).
    pub(super) fn refused_now(&self, dir: &CanonicalPath) -> Option<Errno> {
        self.behind.changes().refused.remove(dir)
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
