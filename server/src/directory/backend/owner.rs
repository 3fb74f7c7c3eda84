//! Who owns what a DIRECTORY session's service creates.

use rustix::fd::AsFd;
use rustix::fs::AtFlags;
use rustix::io::Errno;
use std::ffi::CStr;
use wsfs::{Permissions, Result};

/// The user and group that own everything a DIRECTORY session's service
/// creates, and the bits a new file or directory gets when its call names
/// none, so that a container running as that user owns its workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub file_permissions: Permissions,
    pub directory_permissions: Permissions,
}

impl Owner {
    /// An owner as a request names it: bits 0 mean the usual defaults;
    /// bits above `0o777` are `INVALID_ARGUMENT`.
    pub fn new(uid: u32, gid: u32, file_bits: u32, directory_bits: u32) -> Result<Owner> {
        let bits = |b: u32, default: Permissions| match b {
            0 => Ok(default),
            b => Permissions::new(b),
        };
        Ok(Owner {
            uid,
            gid,
            file_permissions: bits(file_bits, Permissions::FILE_DEFAULT)?,
            directory_permissions: bits(directory_bits, Permissions::DIRECTORY_DEFAULT)?,
        })
    }

    /// Gives the file or directory open as `fd` to the owner (by
    /// descriptor: whatever its name now leads to is not touched).
    pub(super) fn claim(&self, fd: impl AsFd) -> std::result::Result<(), Errno> {
        rustix::fs::fchown(
            fd,
            Some(rustix::process::Uid::from_raw(self.uid)),
            Some(rustix::process::Gid::from_raw(self.gid)),
        )
    }

    /// Gives the entry `dir/name` to the owner without following it (a
    /// symlink the service made is itself the owner's).
    pub(super) fn claim_at(&self, dir: impl AsFd, name: &CStr) -> std::result::Result<(), Errno> {
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
