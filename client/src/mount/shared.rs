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

/// An open file or directory.
pub(super) enum Handle {
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
    /// The session's per-write limit once a commit has learned it (0: not
    /// yet): a commit sending more goes in parts of at most this.
    pub(super) max_write: AtomicU64,
    /// The directories whose every name the mount knows (known.rs).
    pub(super) known: KnownDirs,
    /// Directories the mount is making, until the inode table knows them:
    /// their Created event must not drop the entry the Mkdir's answer
    /// gives the kernel (invalidate.rs).
    pub(super) making: Mutex<std::collections::HashSet<CanonicalPath>>,
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
        self.retry(|| {
            self.session
                .patch_bytes(path, options, futures::stream::empty().boxed())
        })
        .await
    }

    pub(super) async fn stat(&self, path: &CanonicalPath) -> Result<Metadata, Errno> {
        self.retry(|| self.session.stat(path)).await
    }
}
