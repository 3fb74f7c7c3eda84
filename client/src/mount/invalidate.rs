//! Keeps the kernel's caches honest: the session's Watch stream names
//! every change, whoever made it, and each one drops the kernel's cached
//! entry, attributes and pages of that path, so the long cache lifetimes
//! never show a stale file for longer than the event takes to arrive.
//!
//! Notifications go out from a thread of their own: the kernel may hold
//! one back until a request on the same directory is answered, and those
//! answers come from the runtime, which must not wait for it.

use super::shared::Shared;
use crate::{ChangeEvent, ChangeKind};
use fuser::{INodeNo, Notifier};
use futures::StreamExt;
use std::ffi::OsString;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use wsfs::FileKind;

/// One thing for the kernel to forget.
pub(super) enum Forget {
    /// Attributes and cached pages.
    Inode(u64),
    /// The name `1` in directory `0`.
    Entry(u64, OsString),
}

/// Starts the notifying thread and the watching task; both end when the
/// mount does (the task is aborted, the thread sees its channel close).
pub(super) fn start(shared: Arc<Shared>, notifier: Notifier) -> tokio::task::JoinHandle<()> {
    let (tx, rx) = mpsc::channel::<Forget>();
    let _ = shared.kernel.set(tx.clone());
    std::thread::Builder::new()
        .name("wsfs-mount-invalidate".into())
        .spawn(move || {
            for forget in rx {
                // An inode or name the kernel no longer caches is no error.
                let _ = match forget {
                    Forget::Inode(ino) => notifier.inval_inode(INodeNo(ino), 0, 0),
                    Forget::Entry(parent, name) => notifier.inval_entry(INodeNo(parent), &name),
                };
            }
        })
        .expect("start the mount's invalidation thread");
    let runtime = tokio::runtime::Handle::current();
    runtime.spawn(watch(shared, tx))
}

/// Follows the Watch stream for the mount's life, reconnecting after the
/// last event seen when the server goes away.
async fn watch(shared: Arc<Shared>, tx: mpsc::Sender<Forget>) {
    let mut since = 0u64;
    loop {
        let stream = shared
            .session
            .watch("")
            .recursive()
            .since(since)
            .stream()
            .await;
        if let Ok(mut events) = stream {
            while let Some(Ok(event)) = events.next().await {
                let kind = ChangeKind::try_from(event.kind).unwrap_or(ChangeKind::Unspecified);
                since = resume_after(since, kind, event.seq);
                // Before the kernel's entries go: a lookup after that must
                // not be answered "absent" from a stale directory, nor a
                // listing kept from before the change reused.
                note_existing(&shared, kind, &event.path, &event.to_path);
                note_changed(&shared, &event.path, &event.to_path);
                let own = match kind {
                    ChangeKind::Created | ChangeKind::Modified => Some(&event.path),
                    ChangeKind::Moved => Some(&event.to_path),
                    _ => None,
                }
                .and_then(|raw| crate::parse_path(raw).ok())
                .filter(|p| shared.own_pending(p));
                match own {
                    // Perhaps the mount's own change, whose answer is on its
                    // way: judged once the mount has noted it.
                    Some(path) => {
                        let (shared, tx) = (shared.clone(), tx.clone());
                        tokio::spawn(async move {
                            shared.own_settled(&path).await;
                            judge(&shared, &tx, kind, &event);
                        });
                    }
                    None => judge(&shared, &tx, kind, &event),
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The cursor to resume the Watch from after an event of `kind` at `seq`:
/// the furthest event seen, except after a RESYNC, which names the
/// position of the log the mount now follows. That log may number below
/// the last one (a failover to a replica whose clock is behind): a cursor
/// kept from the old log would be refused with another RESYNC at every
/// reconnection, or, once the new log's numbers pass it, skip the changes
/// between.
fn resume_after(since: u64, kind: ChangeKind, seq: u64) -> u64 {
    match kind {
        ChangeKind::Resync => seq,
        _ => since.max(seq),
    }
}

/// What the kernel must forget for `event`.
fn judge(shared: &Shared, tx: &mpsc::Sender<Forget>, kind: ChangeKind, event: &ChangeEvent) {
    match kind {
        ChangeKind::Ready | ChangeKind::Keepalive | ChangeKind::Unspecified => {}
        ChangeKind::Resync => forget_everything(shared, tx),
        ChangeKind::Created | ChangeKind::Modified
            if already_cached(shared, &event.path, event.version) => {}
        // The mount's own rename: the kernel made it itself, and keeps
        // what it holds of the entry (its pages, whose version the rename
        // checked).
        ChangeKind::Moved if already_cached(shared, &event.to_path, event.version) => {}
        ChangeKind::Created if made_here(shared, &event.path) => {}
        ChangeKind::Created | ChangeKind::Modified => {
            forget_path(shared, tx, &event.path, Still::There);
        }
        ChangeKind::Deleted | ChangeKind::Moved => {
            for path in [&event.path, &event.to_path] {
                if !path.is_empty() {
                    forget_path(shared, tx, path, Still::Replaced);
                }
            }
        }
    }
}

impl Shared {
    /// Drops what the mount and the kernel hold of `path` (its attributes;
    /// its entry too when `gone`, the path having been removed here): a
    /// change the mount showed did not happen after all.
    pub(super) fn forget_cached(&self, path: &wsfs::CanonicalPath, gone: bool) {
        let still = if gone { Still::Replaced } else { Still::There };
        if let Some(tx) = self.kernel.get() {
            forget_path(self, tx, path.as_str(), still);
        }
    }
}

/// `version` of `path` is the mount's own last commit or create, which the
/// kernel already holds, or an older one (a path's versions only grow: the
/// create's event judged after the file's first commit answered): dropping
/// its caches would only cost lookups.
fn already_cached(shared: &Shared, raw: &str, version: u64) -> bool {
    let Ok(path) = crate::parse_path(raw) else {
        return false;
    };
    let inodes = shared.inodes();
    version != 0
        && inodes
            .at(&path)
            .and_then(|ino| inodes.get(ino))
            .is_some_and(|node| node.own_version.is_some_and(|own| version <= own))
}

/// `path` is a directory the mount made itself, whose attributes it
/// told the kernel: its Created event says nothing new (and dropping them
/// would cost `tar x` a Stat before each directory's chmod and utimens).
fn made_here(shared: &Shared, raw: &str) -> bool {
    let Ok(path) = crate::parse_path(raw) else {
        return false;
    };
    let inodes = shared.inodes();
    shared.known.made_here(&path)
        && inodes
            .at(&path)
            .and_then(|ino| inodes.get(ino))
            .is_some_and(|node| node.kind == FileKind::Directory && node.attr.is_some())
}

/// What an event says of the object the kernel knows at its path.
#[derive(Clone, Copy, PartialEq)]
enum Still {
    /// Created or modified: a directory the kernel knows there is still
    /// the same directory.
    There,
    /// Deleted, moved away or replaced.
    Replaced,
}

fn forget_path(shared: &Shared, tx: &mpsc::Sender<Forget>, raw: &str, still: Still) {
    let Ok(path) = crate::parse_path(raw) else {
        return;
    };
    let mut inodes = shared.inodes();
    if let Some(ino) = inodes.at(&path) {
        let node = inodes.get_mut(ino).expect("at() names live nodes");
        node.attr = None;
        shared.readahead.forget(ino);
        shared.paging.forget(ino);
        let _ = tx.send(Forget::Inode(ino));
        if still == Still::There && node.kind == FileKind::Directory {
            // Its entry stays: dropping a directory's entry would cut the
            // working directory of every process inside it (getcwd fails
            // with ENOENT), for a directory that is still there.
            return;
        }
    }
    // The name in the nearest directory the kernel knows: a call that made
    // parents on the way names only its file, and the kernel may hold a
    // negative entry for the first new parent.
    let mut child = path;
    while let Some(parent) = child.parent() {
        if still == Still::There && shared.making().contains(&child) {
            // The mount's own Mkdir, its answer on the way: the kernel
            // gets a positive entry from it (and a working directory may
            // be made in it at once).
            break;
        }
        if let (Some(dir), Some(name)) = (inodes.at(&parent), child.name()) {
            shared.paging.forget(dir);
            let _ = tx.send(Forget::Entry(dir, name.into()));
            let _ = tx.send(Forget::Inode(dir));
            break;
        }
        child = parent;
    }
}

/// The names an event says exist now, for the directories whose names
/// the mount knows (known.rs); after a gap, none is known any more.
fn note_existing(shared: &Shared, kind: ChangeKind, path: &str, to_path: &str) {
    let made = match kind {
        ChangeKind::Created | ChangeKind::Modified => path,
        ChangeKind::Moved => to_path,
        ChangeKind::Resync => return shared.known.forget_all(),
        _ => return,
    };
    if let Ok(made) = crate::parse_path(made) {
        shared.known.added(&made);
    }
}

/// The listings kept of the directories an event touches are old now
/// (known.rs).
fn note_changed(shared: &Shared, path: &str, to_path: &str) {
    for raw in [path, to_path] {
        if let Ok(changed) = crate::parse_path(raw) {
            shared.known.changed(&changed);
        }
    }
}

/// After a gap in the events: every path the kernel may cache.
fn forget_everything(shared: &Shared, tx: &mpsc::Sender<Forget>) {
    let paths: Vec<String> = {
        let mut inodes = shared.inodes();
        // A session recovered elsewhere may number its versions anew: none
        // known here is compared with the server's answers again.
        for ino in inodes.all() {
            if let Some(node) = inodes.get_mut(ino) {
                node.cached_version = None;
                node.own_version = None;
            }
        }
        inodes
            .all()
            .into_iter()
            .filter_map(|ino| inodes.get(ino))
            .filter(|node| !node.unlinked)
            .map(|node| node.path.as_str().to_string())
            .collect()
    };
    // Directories keep their entries (see `Still::There`): one removed in
    // the gap answers ENOENT from the server to what is looked up in it.
    for path in paths {
        forget_path(shared, tx, &path, Still::There);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resync_from_a_lower_numbered_log_moves_the_cursor_back_to_it() {
        // Events of the first log, then a RESYNC from a replica's log that
        // numbers below it, then that log's events.
        let mut since = 0;
        for (kind, seq) in [
            (ChangeKind::Ready, 5_000),
            (ChangeKind::Created, 5_001),
            (ChangeKind::Modified, 5_002),
            (ChangeKind::Ready, 4_000),
            (ChangeKind::Resync, 4_000),
            (ChangeKind::Created, 4_001),
        ] {
            since = resume_after(since, kind, seq);
        }
        assert_eq!(since, 4_001);
        // Within one log the cursor never goes back: a READY or KEEPALIVE
        // naming a lower seq changes nothing.
        assert_eq!(resume_after(5_002, ChangeKind::Keepalive, 5_001), 5_002);
        assert_eq!(resume_after(5_002, ChangeKind::Ready, 4_000), 5_002);
    }
}
