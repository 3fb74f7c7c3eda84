//! A session as a POSIX filesystem, through FUSE (Linux).
//!
//! [`mount`] puts a session's workspace at a local directory; the returned
//! [`MountHandle`] unmounts it when dropped. Programs in the mount see
//! close-to-open consistency, as NFS gives: a file written through the
//! mount is committed to the session (one new version, one change event)
//! when it is closed or fsynced, and an open after that, anywhere, sees it.
//!
//! - `inodes`: the kernel's inode numbers for the server's paths.
//! - `staging`: a file's written bytes on local disk until the commit,
//!   which sends only the changed ranges.
//! - `dispatch`: the FUSE operations, each run on fuser's thread until it
//!   must wait and then as a task on the tokio runtime,
//!   handed to the module that does it:
//!   - `attr`: lookup, getattr and setattr, and the kernel's attributes;
//!   - `read`: reads, symlink targets and directory listings;
//!   - `write`: opens, writes and the commits of staged files;
//!   - `upload_ahead`: a file written in long runs starts its commit's upload
//!     while it is written, and the commit ends it;
//!   - `namespace`: create (answered locally in a directory the mount
//!     knows), mkdir, symlink, rename, unlink, rmdir.
//! - `behind`: the write-behind: commits at close queued (bounded,
//!   ordered per file), so that closing a file waits for no round trip;
//!   and unlinks, and the rmdir, chmod and utimens of directories the
//!   mount made, answered once they are on their way.
//! - `shared`: what every operation's task shares (session, inodes,
//!   handles) and the server calls behind a retry.
//! - `invalidate`: the session's Watch stream dropping the kernel's cached
//!   entries, attributes and pages of whatever changed.
//! - `errno`: the one table from refusal to errno.
//!
//! docs/MOUNT.md is the user's guide: how to mount, what is supported, the
//! errno table and the memory bound.

mod attr;
mod batch;
mod behind;
mod dispatch;
mod errno;
mod inodes;
mod invalidate;
mod known;
mod namespace;
mod read;
mod shared;
mod staging;
mod upload_ahead;
mod write;

use crate::Session;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wsfs::Filesystem as _;

/// How a mount behaves. `MountOptions::default()` is what `wsfs mount`
/// uses.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Refuse every change with EROFS (and mount read-only). Default: false.
    pub read_only: bool,
    /// How long the kernel keeps entries and attributes without asking;
    /// changes reach it sooner through the Watch stream. Default: 60 s.
    pub cache_ttl: Duration,
    /// How long a call waits for an unreachable server before it fails
    /// with EIO. Default: 15 s.
    pub server_wait: Duration,
    /// Where files being written are staged (a private directory is made
    /// inside it). Default: the system's temporary directory.
    pub staging_dir: Option<PathBuf>,
    /// Threads reading requests from the kernel. Default: 4.
    pub threads: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            cache_ttl: Duration::from_secs(60),
            server_wait: Duration::from_secs(15),
            staging_dir: None,
            threads: 4,
        }
    }
}

/// Why a mount could not start.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The session could not be reached or refused us.
    #[error(transparent)]
    Session(#[from] wsfs::Error),
    /// The local side: no FUSE device, no permission, no such directory.
    #[error("cannot mount at '{}': {source}", dir.display())]
    Local { dir: PathBuf, source: io::Error },
}

/// A mounted session. Dropping it (or [`unmount`](MountHandle::unmount))
/// commits what is staged and unmounts.
pub struct MountHandle {
    dir: PathBuf,
    session: Option<fuser::BackgroundSession>,
    watcher: tokio::task::JoinHandle<()>,
    ended: tokio::sync::watch::Receiver<bool>,
    shared: Arc<shared::Shared>,
    /// The private staging directory, removed after the unmount.
    _staging: tempfile::TempDir,
}

/// Mounts `session` at `dir`, an existing directory. Must be called within
/// a tokio runtime (multi-threaded): the mount's work runs on it.
pub async fn mount(
    session: Session,
    dir: impl AsRef<Path>,
    options: MountOptions,
) -> Result<MountHandle, MountError> {
    let dir = dir.as_ref().to_path_buf();
    let local = |source: io::Error| MountError::Local {
        dir: dir.clone(),
        source,
    };
    // A session that cannot be reached fails here, not at the first ls.
    session.stat(&wsfs::CanonicalPath::root()).await?;
    let staging = match &options.staging_dir {
        Some(parent) => tempfile::Builder::new()
            .prefix("wsfs-mount-")
            .tempdir_in(parent),
        None => tempfile::Builder::new().prefix("wsfs-mount-").tempdir(),
    }
    .map_err(local)?;
    let runtime = tokio::runtime::Handle::current();
    let shared = Arc::new(shared::Shared::new(
        session.clone(),
        staging.path().to_path_buf(),
        options.clone(),
        runtime,
    ));
    let (ended_tx, ended) = tokio::sync::watch::channel(false);
    let filesystem = dispatch::WsfsFs {
        shared: shared.clone(),
        ended: ended_tx,
        no_opendir: false,
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("wsfs:{}", session.id())),
        fuser::MountOption::Subtype("wsfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        if options.read_only {
            fuser::MountOption::RO
        } else {
            fuser::MountOption::RW
        },
    ];
    config.n_threads = Some(options.threads.max(1));
    config.clone_fd = true;
    // Mounting waits for the kernel's first request: off the runtime.
    let mount_dir = dir.clone();
    let fuse =
        tokio::task::spawn_blocking(move || fuser::Session::new(filesystem, &mount_dir, &config))
            .await
            .map_err(|e| local(io::Error::other(e)))?
            .map_err(local)?;
    let notifier = fuse.notifier();
    let _ = shared.pages.set(notifier.clone());
    let watcher = invalidate::start(shared.clone(), notifier);
    let session = fuse.spawn().map_err(local)?;
    shared
        .runtime
        .spawn(read::widen_kernel_readahead(dir.clone()));
    Ok(MountHandle {
        dir,
        session: Some(session),
        watcher,
        ended,
        shared,
        _staging: staging,
    })
}

impl MountHandle {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Commits everything closed or fsynced so far whose commit is still
    /// queued, and everything staged: once it returns, every client sees
    /// what the mount's programs wrote. The first failure is returned (all
    /// are written to stderr).
    pub async fn sync(&self) -> io::Result<()> {
        self.shared.commit_all().await
    }

    /// Resolves when the mount ends, whoever unmounted it (`wsfs unmount`,
    /// `fusermount3 -u`, `umount`).
    pub async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|done| *done).await;
    }

    /// Unmounts, after committing what is staged. A mount still in use is
    /// detached (lazily unmounted): it goes when its last file closes.
    pub fn unmount(mut self) -> io::Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<()> {
        self.watcher.abort();
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        if !*self.ended.borrow() {
            // The queued commits land while the mount can still report
            // them; what programs close after this, the kernel's last
            // call (destroy) commits.
            let shared = self.shared.clone();
            let runtime = shared.runtime.clone();
            let _ = std::thread::spawn(move || {
                runtime.block_on(async move { shared.commit_all().await })
            })
            .join();
        }
        let result = if *self.ended.borrow() {
            Ok(())
        } else {
            unmount(&self.dir)
        };
        // The session thread ends once the kernel lets go; a detached mount
        // still in use may keep it, and nobody should wait on that here.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = session.join();
            let _ = done_tx.send(());
        });
        let _ = done_rx.recv_timeout(Duration::from_secs(10));
        result
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!(
                "wsfs mount: unmounting '{}' failed: {e}",
                self.dir.display()
            );
        }
    }
}

/// Unmounts the FUSE mount at `dir` (`wsfs unmount`): as root directly,
/// else through `fusermount3 -u` (or `fusermount -u`). A busy mount is
/// detached: it disappears from the tree now and goes when its last file
/// closes.
pub fn unmount(dir: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))?;
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        // SAFETY: a valid NUL-terminated path; umount2 reads only it.
        if unsafe { libc::umount2(c_dir.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EBUSY) {
            return Err(error);
        }
        // SAFETY: as above.
        if unsafe { libc::umount2(c_dir.as_ptr(), libc::MNT_DETACH) } == 0 {
            return Ok(());
        }
        return Err(io::Error::last_os_error());
    }
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        "neither fusermount3 nor fusermount is installed (Debian: apt-get install fuse3)",
    );
    for program in ["fusermount3", "fusermount"] {
        for args in [&["-u", "-q"][..], &["-u", "-q", "-z"][..]] {
            match std::process::Command::new(program)
                .args(args)
                .arg(dir)
                .output()
            {
                Ok(out) if out.status.success() => return Ok(()),
                Ok(out) => {
                    last =
                        io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => last = e,
            }
        }
    }
    Err(last)
}
