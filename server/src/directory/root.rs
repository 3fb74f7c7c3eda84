//! A DIRECTORY session rooted in an existing directory: the root must lie
//! inside a directory the operator allows (`--allow-root`), and is opened
//! one component at a time, never through a symlink, and by identity
//! after a restart.

use super::record::RootIdentity;
use std::path::{Path, PathBuf};
use wsfs::{Error, Result};

/// Opens the directory at `root` (a resolved path) from the allowed root
/// that holds it, one component at a time and never through a symlink,
/// and checks it is the directory `expected` names, when given. The
/// error says why the root cannot be used.
pub(crate) fn open_rooted(
    allow_roots: &[PathBuf],
    root: &Path,
    expected: Option<RootIdentity>,
) -> std::result::Result<(std::os::fd::OwnedFd, RootIdentity), String> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let (allowed, rest) = allow_roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .find_map(|allowed| {
            let rest = root.strip_prefix(&allowed).ok()?.to_path_buf();
            Some((allowed, rest))
        })
        .ok_or_else(|| {
            format!(
                "its root '{}' is not inside a directory the server allows (--allow-root)",
                root.display()
            )
        })?;
    // The allowed root itself is the operator's, trusted as configured.
    let mut fd =
        rustix::fs::open(&allowed, flags & !OFlags::NOFOLLOW, Mode::empty()).map_err(|e| {
            format!(
                "the allowed root '{}' cannot be opened: {e}",
                allowed.display()
            )
        })?;
    for component in rest.components() {
        let std::path::Component::Normal(name) = component else {
            return Err(format!("its root '{}' is not a plain path", root.display()));
        };
        fd = rustix::fs::openat(&fd, name, flags, Mode::empty()).map_err(|e| {
            format!(
                "its root '{}' cannot be opened without following a link: '{}' is {}",
                root.display(),
                name.to_string_lossy(),
                if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
                    "a symlink or not a directory".to_string()
                } else {
                    e.to_string()
                }
            )
        })?;
    }
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat its root: {e}"))?;
    let found = RootIdentity {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    if expected.is_some_and(|e| e != found) {
        return Err(format!(
            "its root '{}' is no longer the directory it was created in (it was replaced)",
            root.display()
        ));
    }
    Ok((fd, found))
}

/// Resolves a requested root: it must exist, be a directory, and lie
/// inside one of the allowed roots after every symlink is resolved.
pub(crate) fn allowed_root(allow_roots: &[PathBuf], requested: &Path) -> Result<PathBuf> {
    let denied = |why: String| Error::PermissionDenied {
        path: requested.display().to_string(),
        message: why,
    };
    let real = std::fs::canonicalize(requested).map_err(|e| {
        denied(format!(
            "root '{}' cannot be used: {e}",
            requested.display()
        ))
    })?;
    if !real.is_dir() {
        return Err(denied(format!(
            "root '{}' is not a directory",
            requested.display()
        )));
    }
    let inside = allow_roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .any(|allowed| real.starts_with(&allowed));
    if !inside {
        return Err(denied(format!(
            "root '{}' is not inside a directory the server allows (--allow-root)",
            requested.display()
        )));
    }
    Ok(real)
}

/// A path that opens exactly the directory `fd` holds, with no lookup of
/// the name it was reached by.
pub(crate) fn fd_path(fd: &std::os::fd::OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}
