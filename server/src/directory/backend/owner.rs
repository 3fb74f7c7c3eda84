//! Who owns what a DIRECTORY session's service creates.

use rustix::fd::AsFd;
use rustix::fs::AtFlags;
use rustix::io::Errno;
use std::ffi::CStr;

pub use crate::kind::Owner;

/// What the DIRECTORY backend does with an [`Owner`]: gives it what the
/// service creates.
pub(super) trait Claim {
    /// Gives the file or directory open as `fd` to the owner (by
    /// descriptor: whatever its name now leads to is not touched).
    fn claim(&self, fd: impl AsFd) -> std::result::Result<(), Errno>;

    /// Gives the entry `dir/name` to the owner without following it (a
    /// symlink the service made is itself the owner's).
    fn claim_at(&self, dir: impl AsFd, name: &CStr) -> std::result::Result<(), Errno>;
}

impl Claim for Owner {
    /// Gives the file or directory open as `fd` to the owner (by
    /// descriptor: whatever its name now leads to is not touched).
    fn claim(&self, fd: impl AsFd) -> std::result::Result<(), Errno> {
        rustix::fs::fchown(
            fd,
            Some(rustix::process::Uid::from_raw(self.uid)),
            Some(rustix::process::Gid::from_raw(self.gid)),
        )
    }

    /// Gives the entry `dir/name` to the owner without following it (a
    /// symlink the service made is itself the owner's).
    fn claim_at(&self, dir: impl AsFd, name: &CStr) -> std::result::Result<(), Errno> {
        rustix::fs::chownat(
            dir,
            name,
            Some(rustix::process::Uid::from_raw(self.uid)),
            Some(rustix::process::Gid::from_raw(self.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
    }
}

/// Gives `fd` to `owner`, if there is one.
pub(super) fn claim(owner: Option<&Owner>, fd: impl AsFd) -> std::result::Result<(), Errno> {
    owner.map_or(Ok(()), |o| o.claim(fd))
}
