//! Host mounts: directories on the server copied into a new session's
//! workspace once, when the session is created.
//!
//! [`prepare`] checks a mount before anything is created: `host_path` must
//! resolve (every symlink and `..` followed) inside one of the allowed
//! roots (`--allow-root`), or the creation fails with PERMISSION_DENIED;
//! `mount_path` is parsed under the session's path limits; the globs
//! compile. [`scan`] then walks the host tree (blocking) and decides which
//! files go where:
//!
//! - paths are matched relative to `host_path`, with the workspace's glob
//!   rules (`*` stays in one segment, `**` spans segments); a file is kept
//!   when it matches an include pattern (every file when there are none),
//!   then dropped when it matches an exclude pattern; a directory that
//!   matches an exclude pattern is skipped whole (`target` or
//!   `**/node_modules`);
//! - symlinks are skipped unless `follow_symlinks`; followed links must
//!   resolve inside an allowed root (PERMISSION_DENIED otherwise, naming
//!   the link: exclude it to go on); link cycles are not descended twice;
//! - only regular files are copied (no pipes, sockets or devices), and
//!   directories only as the parents of copied files;
//! - `max_bytes` caps the total of one mount: going over fails the
//!   creation with RESOURCE_EXHAUSTED `QUOTA_EXCEEDED`.
//!
//! [`copy`] writes the files through the workspace's `write_bytes`,
//! streamed. Each file is opened without following a final symlink (unless
//! allowed), and the open descriptor's real path is checked again, so a
//! link swapped in after the scan cannot pull in a file from elsewhere.
//! Mounts are copied in order, later ones overwriting earlier ones at the
//! same path; seed files are written after every mount.

use crate::pattern::compile_glob_set;
use crate::quota::Usage;
use futures::stream::StreamExt;
use globset::GlobSet;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Filesystem, PathLimits, Permissions, Result, WriteOptions};

pub use wsfs::HostMount;

/// A mount that passed [`prepare`].
#[derive(Debug, Clone)]
pub struct PreparedMount {
    /// `host_path`, resolved.
    host_root: PathBuf,
    requested: PathBuf,
    mount_path: CanonicalPath,
    include: Option<GlobSet>,
    exclude: GlobSet,
    max_bytes: u64,
    follow_symlinks: bool,
    /// The allowed roots, resolved.
    allowed: Vec<PathBuf>,
}

/// One file to copy.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    pub host: PathBuf,
    pub dest: CanonicalPath,
    /// The size seen by the scan.
    pub size: u64,
}

/// The files of one mount, in walk order.
#[derive(Debug, Clone)]
pub struct MountPlan {
    mount: PreparedMount,
    pub files: Vec<PlannedFile>,
}

fn denied(path: &Path, message: String) -> Error {
    Error::PermissionDenied {
        path: path.display().to_string(),
        message,
    }
}

/// Checks a mount against the allowed roots and the session's path limits.
pub fn prepare(
    mount: &HostMount,
    allow_roots: &[PathBuf],
    limits: &PathLimits,
) -> Result<PreparedMount> {
    let requested = &mount.host_path;
    let allowed: Vec<PathBuf> = allow_roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    let real = std::fs::canonicalize(requested).map_err(|e| {
        denied(
            requested,
            format!("host path '{}' cannot be mounted: {e}", requested.display()),
        )
    })?;
    if !allowed.iter().any(|a| real.starts_with(a)) {
        return Err(denied(
            requested,
            format!(
                "host path '{}' is not inside a directory the server allows (--allow-root)",
                requested.display()
            ),
        ));
    }
    if !real.is_dir() {
        return Err(denied(
            requested,
            format!("host path '{}' is not a directory", requested.display()),
        ));
    }
    Ok(PreparedMount {
        host_root: real,
        requested: requested.clone(),
        mount_path: CanonicalPath::parse(&mount.mount_path, limits)?,
        include: if mount.include_glob.is_empty() {
            None
        } else {
            Some(compile_glob_set(&mount.include_glob)?)
        },
        exclude: compile_glob_set(&mount.exclude_glob)?,
        max_bytes: mount.max_bytes,
        follow_symlinks: mount.follow_symlinks,
        allowed,
    })
}

fn host_io(path: &Path, e: std::io::Error) -> Error {
    Error::internal(format!("cannot read host path '{}': {e}", path.display()))
}

/// Walks the host tree of `mount` and lists the files to copy. Blocking.
pub fn scan(mount: PreparedMount, limits: &PathLimits) -> Result<MountPlan> {
    let mut files = Vec::new();
    let mut total = 0u64;
    // (host directory, its path relative to host_root, its resolved path)
    let mut stack = vec![(mount.host_root.clone(), String::new())];
    let mut visited: HashSet<PathBuf> = HashSet::from([mount.host_root.clone()]);
    while let Some((dir, rel_dir)) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| host_io(&dir, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| host_io(&dir, e))?;
        entries.sort_by_key(|e| e.file_name());
        // Directories are pushed in reverse, so they pop in name order.
        let mut subdirs = Vec::new();
        for entry in entries {
            let host = entry.path();
            let Some(name) = entry.file_name().to_str().map(String::from) else {
                tracing::warn!(path = %host.display(), "host mount skips a name that is not UTF-8");
                continue;
            };
            let rel = if rel_dir.is_empty() {
                name
            } else {
                format!("{rel_dir}/{name}")
            };
            let file_type = entry.file_type().map_err(|e| host_io(&host, e))?;
            let meta = if file_type.is_symlink() {
                if !mount.follow_symlinks {
                    continue;
                }
                let Ok(target) = std::fs::canonicalize(&host) else {
                    continue; // dangling
                };
                if !mount.allowed.iter().any(|a| target.starts_with(a)) {
                    return Err(denied(
                        &host,
                        format!(
                            "symlink '{}' points outside the directories the server allows; exclude it or mount without follow_symlinks",
                            host.display()
                        ),
                    ));
                }
                match std::fs::metadata(&target) {
                    Ok(m) if m.is_dir() && !visited.insert(target.clone()) => continue,
                    Ok(m) => m,
                    Err(_) => continue,
                }
            } else {
                entry.metadata().map_err(|e| host_io(&host, e))?
            };
            if meta.is_dir() {
                if !mount.exclude.is_match(&rel) {
                    subdirs.push((host, rel));
                }
                continue;
            }
            if !meta.is_file() {
                continue;
            }
            if mount.include.as_ref().is_some_and(|i| !i.is_match(&rel))
                || mount.exclude.is_match(&rel)
            {
                continue;
            }
            total += meta.len();
            if mount.max_bytes > 0 && total > mount.max_bytes {
                return Err(over_budget(&mount));
            }
            let dest = CanonicalPath::parse(&format!("{}/{rel}", mount.mount_path), limits)?;
            files.push(PlannedFile {
                host,
                dest,
                size: meta.len(),
            });
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(MountPlan { mount, files })
}

fn over_budget(mount: &PreparedMount) -> Error {
    Error::QuotaExceeded {
        message: format!(
            "host mount '{}' holds more than its max_bytes of {} bytes",
            mount.requested.display(),
            mount.max_bytes
        ),
    }
}

/// Opens a planned file and checks what was opened: a regular file whose
/// real path lies inside the mount (or, following links, an allowed root).
/// Its metadata, taken from the descriptor, comes with it.
fn open_checked(mount: &PreparedMount, host: &Path) -> Result<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = rustix::fs::OFlags::NONBLOCK;
    if !mount.follow_symlinks {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(host)
        .map_err(|e| host_io(host, e))?;
    let meta = file.metadata().map_err(|e| host_io(host, e))?;
    let real = {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|e| host_io(host, e))?
    };
    let inside = if mount.follow_symlinks {
        mount.allowed.iter().any(|a| real.starts_with(a))
    } else {
        real.starts_with(&mount.host_root)
    };
    if !meta.is_file() || !inside {
        return Err(denied(
            host,
            format!(
                "host file '{}' changed into something that may not be mounted",
                host.display()
            ),
        ));
    }
    Ok((file, meta))
}

/// Copies the planned files into `fs` through `write_bytes`, streamed.
pub async fn copy(fs: &dyn Filesystem, plan: MountPlan) -> Result<()> {
    let mount = Arc::new(plan.mount);
    // The budget holds while copying too: a file may grow after the scan.
    let copied = Arc::new(AtomicU64::new(0));
    for file in plan.files {
        let m = mount.clone();
        let host = file.host.clone();
        let (opened, meta) = tokio::task::spawn_blocking(move || open_checked(&m, &host))
            .await
            .map_err(|e| Error::internal(format!("opening a host file failed: {e}")))??;
        let (m, copied, host) = (mount.clone(), copied.clone(), file.host.clone());
        let data = tokio_util::io::ReaderStream::with_capacity(
            tokio::fs::File::from_std(opened),
            wsfs::DEFAULT_CHUNK_SIZE,
        )
        .map(move |chunk| {
            let chunk = chunk.map_err(|e| host_io(&host, e))?;
            let total =
                copied.fetch_add(chunk.len() as u64, Ordering::Relaxed) + chunk.len() as u64;
            if m.max_bytes > 0 && total > m.max_bytes {
                return Err(over_budget(&m));
            }
            Ok(chunk)
        })
        .boxed();
        // The host file's bits (never setuid, setgid or sticky) and time.
        let options = WriteOptions {
            permissions: Some(Permissions::masked(meta.permissions().mode())),
            modified: meta.modified().ok(),
            ..WriteOptions::default()
        };
        fs.write_bytes(&file.dest, options, data).await?;
    }
    Ok(())
}

/// The files and bytes a new workspace will hold once `plans` are copied
/// and `seeds` written: later mounts replace earlier ones at the same path,
/// and seeds replace both.
pub fn initial_usage(plans: &[MountPlan], seeds: &[(CanonicalPath, bytes::Bytes)]) -> Usage {
    let mut sizes: HashMap<&str, u64> = HashMap::new();
    for file in plans.iter().flat_map(|p| &p.files) {
        sizes.insert(file.dest.as_str(), file.size);
    }
    for (path, data) in seeds {
        sizes.insert(path.as_str(), data.len() as u64);
    }
    Usage {
        files: sizes.len() as u64,
        bytes: sizes.values().sum(),
    }
}

/// Prepares and scans every mount, in order; nothing is created yet.
pub async fn plan_all(
    mounts: &[HostMount],
    allow_roots: &[PathBuf],
    limits: &PathLimits,
) -> Result<Vec<MountPlan>> {
    if mounts.is_empty() {
        return Ok(Vec::new());
    }
    let prepared = mounts
        .iter()
        .map(|m| prepare(m, allow_roots, limits))
        .collect::<Result<Vec<_>>>()?;
    let limits = *limits;
    tokio::task::spawn_blocking(move || {
        prepared
            .into_iter()
            .map(|m| scan(m, &limits))
            .collect::<Result<Vec<_>>>()
    })
    .await
    .map_err(|e| Error::internal(format!("scanning host mounts failed: {e}")))?
}
