//! What every FUSE task shares: the session, the inode table, the open
//! handles and the mount's options, with the calls every operation makes
//! (a path for an inode, the server behind a retry).

use super::behind::WriteBehind;
use super::errno::errno;
use super::inodes::Inodes;
use super::known::KnownDirs;
use super::staging::Staged;
use super::MountOptions;
use crate::Session;
use fuser::Errno;
use futures::StreamExt;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use wsfs::{CanonicalPath, Error, FileKind, Filesystem as _, Metadata, PatchOptions};

/// An open file (the kernel opens directories by itself: read.rs).
pub(super) enum Handle {
    File { writable: bool },
}

/// What every task shares.
pub(super) struct Shared {
    pub(super) session: Session,
    pub(super) inodes: Mutex<Inodes>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_handle: AtomicU64,
    pub(super) staging: PathBuf,
    pub(super) options: MountOptions,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) behind: WriteBehind,
    /// The write-behind's Deletes, sent in batches (batch.rs).
    pub(super) deletes: Arc<super::batch::Deletes>,
    /// The session's per-write limit once a commit has learned it (0: not
    /// yet): a commit sending more goes in parts of at most this.
    pub(super) max_write: AtomicU64,
    /// The directories whose every name the mount knows (known.rs).
    pub(super) known: KnownDirs,
    /// Directories the mount is making, until the inode table knows them:
    /// their Created event must not drop the entry the Mkdir's answer
    /// gives the kernel (invalidate.rs).
    pub(super) making: Mutex<std::collections::HashSet<CanonicalPath>>,
    /// The versions the mount's latest commits made, by path.
    recent: Mutex<RecentCommits>,
    /// The mount's own changes on their way, by path (see
    /// [`Shared::own_change`]).
    own: Mutex<HashMap<CanonicalPath, usize>>,
    /// Bumped whenever one of them ends.
    own_ended: tokio::sync::watch::Sender<u64>,
    /// What is read ahead of sequential readers (read.rs).
    pub(super) readahead: super::read::ReadAhead,
    /// The directory listings being read in pieces (read.rs).
    pub(super) paging: super::read::Paging,
    /// Where the kernel is told to forget what it caches (invalidate.rs).
    pub(super) kernel: std::sync::OnceLock<std::sync::mpsc::Sender<super::invalidate::Forget>>,
    /// Where bytes are given to the kernel's page cache, at once, by the
    /// caller (write.rs).
    pub(super) pages: std::sync::OnceLock<fuser::Notifier>,
}

/// The versions the mount's own latest commits made, by path, at most
/// [`RecentCommits::KEPT`] (the oldest go first): a Stat answer below one
/// of them left the server before that commit landed, whatever the inode
/// table has forgotten since.
#[derive(Default)]
struct RecentCommits {
    by_path: HashMap<CanonicalPath, u64>,
    order: std::collections::VecDeque<CanonicalPath>,
}

impl RecentCommits {
    const KEPT: usize = 4096;

    fn note(&mut self, path: &CanonicalPath, version: u64) {
        if self.by_path.insert(path.clone(), version).is_none() {
            self.order.push_back(path.clone());
        }
        while self.order.len() > Self::KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.by_path.remove(&oldest);
            }
        }
    }

    fn newer_than(&self, path: &CanonicalPath, version: u64) -> bool {
        self.by_path.get(path).is_some_and(|&v| v > version)
    }
}

impl Shared {
    pub(super) fn new(
        session: Session,
        staging: PathBuf,
        options: MountOptions,
        runtime: tokio::runtime::Handle,
    ) -> Shared {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Shared {
            deletes: Arc::new(super::batch::Deletes::new(session.clone(), runtime.clone())),
            session,
            inodes: Mutex::new(Inodes::new()),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            staging,
            options,
            uid,
            gid,
            runtime,
            behind: WriteBehind::new(),
            max_write: AtomicU64::new(0),
            known: KnownDirs::default(),
            making: Mutex::default(),
            recent: Mutex::default(),
            own: Mutex::default(),
            own_ended: tokio::sync::watch::channel(0).0,
            readahead: Default::default(),
            paging: Default::default(),
            kernel: std::sync::OnceLock::new(),
            pages: std::sync::OnceLock::new(),
        }
    }

    pub(super) fn inodes(&self) -> MutexGuard<'_, Inodes> {
        self.inodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// See [`Shared::making`].
    pub(super) fn making(&self) -> MutexGuard<'_, std::collections::HashSet<CanonicalPath>> {
        self.making.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn handles(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add_handle(&self, handle: Handle) -> u64 {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles().insert(fh, handle);
        fh
    }

    /// Calls the server, waiting out an unreachable server for at most
    /// `server_wait` (the channel reconnects by itself).
    pub(super) async fn retry<T, F, Fut>(&self, call: F) -> Result<T, Errno>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = wsfs::Result<T>>,
    {
        self.retry_refusal(call).await.map_err(|e| errno(&e))
    }

    /// [`retry`](Shared::retry), with the server's refusal as it came.
    pub(super) async fn retry_refusal<T, F, Fut>(&self, mut call: F) -> wsfs::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = wsfs::Result<T>>,
    {
        let deadline = Instant::now() + self.options.server_wait;
        let mut pause = Duration::from_millis(50);
        loop {
            match call().await {
                Err(Error::Unavailable { .. }) if Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// The path of `ino`, while it names one.
    pub(super) fn path(&self, ino: u64) -> Result<(CanonicalPath, FileKind), Errno> {
        let inodes = self.inodes();
        let node = inodes.get(ino).ok_or(Errno::ENOENT)?;
        if node.unlinked {
            return Err(Errno::ENOENT);
        }
        Ok((node.path.clone(), node.kind))
    }

    /// The path of `name` in directory `parent`.
    pub(super) fn child(&self, parent: u64, name: &OsStr) -> Result<CanonicalPath, Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        let (dir, _) = self.path(parent)?;
        dir.join(name).map_err(|e| errno(&e))
    }

    pub(super) fn staged(&self, ino: u64) -> Option<Arc<Staged>> {
        self.inodes().get(ino).and_then(|n| n.staged.clone())
    }

    pub(super) fn ttl(&self) -> Duration {
        self.options.cache_ttl
    }

    /// A patch that sends no bytes: creates, truncates.
    pub(super) async fn patch(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
    ) -> Result<wsfs::WriteOutcome, Errno> {
        self.settle(path).await;
        let patched = self
            .retry(|| {
                self.session
                    .patch_bytes(path, options, futures::stream::empty().boxed())
            })
            .await;
        // A listing kept of its directory holds its old length.
        self.known.changed(path);
        patched
    }

    /// The server's metadata of `path`. An answer older than a commit of
    /// the mount's own that landed while it travelled (its version below
    /// the one the mount knows; versions only grow) is asked again once:
    /// the second question leaves after that commit, so it sees it.
    ///
    /// A file the mount created and has not committed yet is committed
    /// first, and a Delete of `path` on its way ends first: the server's
    /// answer is about what the mount's programs see.
    pub(super) async fn stat(&self, path: &CanonicalPath) -> Result<Metadata, Errno> {
        self.settle(path).await;
        self.born(path).await?;
        let meta = self.retry(|| self.session.stat(path)).await?;
        let known = {
            let inodes = self.inodes();
            inodes
                .at(path)
                .and_then(|ino| inodes.get(ino))
                .and_then(|node| node.cached_version)
        };
        let stale =
            known.is_some_and(|v| v > meta.version) || self.recent().newer_than(path, meta.version);
        if stale {
            return self.retry(|| self.session.stat(path)).await;
        }
        Ok(meta)
    }

    /// The file at `path`, when the mount created it and the server does
    /// not hold it yet (namespace.rs).
    pub(super) fn unborn_at(&self, path: &CanonicalPath) -> Option<u64> {
        let inodes = self.inodes();
        inodes
            .at(path)
            .filter(|&ino| inodes.get(ino).is_some_and(|node| node.unborn))
    }

    /// Makes the file the mount created at `path` on the server now (its
    /// first commit), when it has not yet: for what needs the server to
    /// hold it (a rename of it, an open, a Stat). A create that lost to a
    /// file made elsewhere first is not an error here: the path is that
    /// file now (see [`Shared::create_lost`]).
    pub(super) async fn born(&self, path: &CanonicalPath) -> Result<(), Errno> {
        let Some(ino) = self.unborn_at(path) else {
            return Ok(());
        };
        let _own = self.own_change(path);
        match self.commit(ino).await {
            Err(e) if self.unborn_at(path) == Some(ino) => Err(e),
            _ => Ok(()),
        }
    }

    /// The first commit of the file the mount created at `path` (`ino`)
    /// failed with `error`. When the name was taken first (a file made
    /// elsewhere since the create), the mount's file leaves the path, as
    /// an unlinked one does: its open handles keep its bytes, the path
    /// shows the file that won, and nothing of the loser reaches the
    /// server (the failure is reported at close or fsync). Other refusals
    /// keep it staged, to be tried again.
    pub(super) fn create_lost(&self, ino: u64, path: &CanonicalPath, error: Errno) {
        if error == Errno::EEXIST && self.unborn_at(path) == Some(ino) {
            self.inodes().detach(path);
        }
    }

    /// The server holds the file the mount created at `path` now.
    pub(super) fn made(&self, path: &CanonicalPath) {
        if let Some(ino) = self.unborn_at(path) {
            if let Some(node) = self.inodes().get_mut(ino) {
                node.unborn = false;
            }
        }
    }

    /// Before a listing or rmdir of `dir`: its Deletes on their way end and
    /// the files the mount created in it reach the server. Whether every
    /// one did: a create the server refuses is reported at the file's
    /// close or fsync, and the file stays out of the listing.
    pub(super) async fn settle_dir(&self, dir: &CanonicalPath) -> bool {
        self.settle_under(dir).await;
        let unborn = self.inodes().unborn_in(dir);
        let mut all = true;
        for ino in unborn {
            if let Ok((path, _)) = self.path(ino) {
                all &= self.born(&path).await.is_ok();
            }
        }
        all
    }

    /// A commit of the mount's own made `version` of `path`.
    pub(super) fn committed(&self, path: &CanonicalPath, version: u64) {
        self.recent().note(path, version);
    }

    fn recent(&self) -> MutexGuard<'_, RecentCommits> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn own(&self) -> MutexGuard<'_, HashMap<CanonicalPath, usize>> {
        self.own.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A change of the mount's own to `path` is on its way until the
    /// returned guard goes, once the mount has noted what it made (the
    /// version, the attributes it told the kernel). Its change event can
    /// arrive before the answer; the Watch stream holds such an event
    /// until the guard goes and then judges it (invalidate.rs), so that
    /// the mount's own change does not drop what the kernel holds of it.
    pub(super) fn own_change(&self, path: &CanonicalPath) -> OwnChange<'_> {
        *self.own().entry(path.clone()).or_default() += 1;
        OwnChange {
            shared: self,
            path: path.clone(),
        }
    }

    /// Whether a change of the mount's own to `path` is on its way.
    pub(super) fn own_pending(&self, path: &CanonicalPath) -> bool {
        self.own().contains_key(path)
    }

    /// Waits until no change of the mount's own to `path` is on its way.
    pub(super) async fn own_settled(&self, path: &CanonicalPath) {
        let mut ended = self.own_ended.subscribe();
        while self.own_pending(path) {
            if ended.changed().await.is_err() {
                return;
            }
        }
    }
}

/// See [`Shared::own_change`].
pub(super) struct OwnChange<'a> {
    shared: &'a Shared,
    path: CanonicalPath,
}

impl Drop for OwnChange<'_> {
    fn drop(&mut self) {
        let mut own = self.shared.own();
        if let Some(count) = own.get_mut(&self.path) {
            *count -= 1;
            if *count == 0 {
                own.remove(&self.path);
            }
        }
        drop(own);
        self.shared.own_ended.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::RecentCommits;

    fn p(s: &str) -> wsfs::CanonicalPath {
        crate::parse_path(s).unwrap()
    }

    #[test]
    fn an_answer_below_a_recent_commit_is_stale_and_the_oldest_go_first() {
        let mut recent = RecentCommits::default();
        recent.note(&p("a"), 10);
        assert!(recent.newer_than(&p("a"), 9), "left before the commit");
        assert!(!recent.newer_than(&p("a"), 10));
        assert!(!recent.newer_than(&p("a"), 11), "a later change elsewhere");
        assert!(!recent.newer_than(&p("b"), 1), "no commit there");
        for i in 0..RecentCommits::KEPT {
            recent.note(&p(&format!("f{i}")), 5);
        }
        assert!(!recent.newer_than(&p("a"), 9), "the oldest went first");
        assert!(recent.newer_than(&p("f1"), 4));
        assert_eq!(recent.by_path.len(), RecentCommits::KEPT);
    }
}
