//! The intent record of a whole-workspace replacement (see
//! [`crate::directory::journal`]).

use super::staging::{DirectoryStaged, TempEntry};
use super::sys::{staging_error, stat_fd};
use super::DirectoryBackend;
use crate::backend::Intent;
use crate::backend::{Backend, TEMP_PREFIX};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::Ordering;
use wsfs::{Error, Result};

/// The intent record of a whole-workspace replacement in progress, in the
/// staging directory beside the staged files it names (see
/// [`crate::directory::journal`]).
pub(crate) const INTENT_NAME: &str = "intent.json";

impl DirectoryBackend {
    /// Records `intent` before the first change of a whole-workspace
    /// replacement ([`Backend::replace_whole`]); commits replace files by
    /// one rename until [`Self::end_intent`].
    pub(crate) fn begin_intent(&self, intent: &Intent) -> Result<()> {
        self.write_intent(intent)?;
        self.replacing.store(true, Ordering::Release);
        Ok(())
    }

    /// The replacement begun by [`Self::begin_intent`] (or found pending by
    /// [`Self::resume_intent`]) is complete: its record goes.
    pub(crate) fn end_intent(&self) -> Result<()> {
        let cleared = self.clear_intent();
        self.replacing.store(false, Ordering::Release);
        cleared
    }

    /// [`Self::pending_intent`], for replaying it: until
    /// [`Self::end_intent`], commits replace files by one rename.
    pub(crate) fn resume_intent(&self) -> Result<Option<Intent>> {
        let pending = self.pending_intent()?;
        if pending.is_some() {
            self.replacing.store(true, Ordering::Release);
        }
        Ok(pending)
    }

    /// Records `intent` before the first change, durably in every mode:
    /// written aside, fsynced, renamed into place, directory fsynced. In
    /// `fsync` mode the staged files it names are flushed first.
    fn write_intent(&self, intent: &Intent) -> Result<()> {
        let fail = |e: std::io::Error| Error::io_while(e, "recording the intent of a replacement");
        self.durability().settle_fs(&*self.staging)?;
        let json = serde_json::to_vec(intent)
            .map_err(|e| Error::internal(format!("cannot encode an intent record: {e}")))?;
        let tmp = CString::new(format!("{TEMP_PREFIX}{INTENT_NAME}")).unwrap_or_default();
        let name = CString::new(INTENT_NAME).unwrap_or_default();
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut file = rustix::fs::openat(
            self.staging.as_fd(),
            &tmp,
            flags,
            Mode::from_raw_mode(0o600),
        )
        .map(File::from)
        .map_err(|e| fail(e.into()))?;
        // Removed unless it becomes the record: a refused replacement (a
        // full disk) leaves nothing in the staging directory.
        let aside = TempEntry::adopt(&self.staging, tmp, false);
        file.write_all(&json).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        rustix::fs::renameat(
            self.staging.as_fd(),
            &aside.name,
            self.staging.as_fd(),
            &name,
        )
        .map_err(|e| fail(e.into()))?;
        aside.keep();
        if let Err(e) = rustix::fs::fsync(self.staging.as_fd()) {
            // Not durable, so not begun: the replacement is refused and
            // its record must not replay at the next start.
            let _ = rustix::fs::unlinkat(self.staging.as_fd(), &name, AtFlags::empty());
            return Err(fail(e.into()));
        }
        Ok(())
    }

    /// The replacement is complete: in `fsync` mode its changes are flushed,
    /// then the record goes (durably, so a power loss cannot bring back a
    /// record that would replay over later writes).
    fn clear_intent(&self) -> Result<()> {
        let fail = |e: Errno| {
            Error::internal(format!(
                "cannot clear the intent record of a replacement: {e}"
            ))
        };
        self.settle()?;
        let name = CString::new(INTENT_NAME).unwrap_or_default();
        match rustix::fs::unlinkat(self.staging.as_fd(), &name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(fail(e)),
        }
        rustix::fs::fsync(self.staging.as_fd()).map_err(fail)
    }

    /// The intent record a stopped server left, if any.
    pub fn pending_intent(&self) -> Result<Option<Intent>> {
        let name = CString::new(INTENT_NAME).unwrap_or_default();
        let file = match rustix::fs::openat(
            self.staging.as_fd(),
            &name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => File::from(fd),
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => {
                return Err(Error::internal(format!(
                    "cannot read the intent record: {e}"
                )))
            }
        };
        serde_json::from_reader(std::io::BufReader::new(file))
            .map(Some)
            .map_err(|e| Error::internal(format!("the intent record is corrupt: {e}")))
    }

    /// The staged file named `name` in the staging directory, taken in
    /// charge again (after a restart); `None` when it is gone (committed).
    pub fn staged(&self, name: &str) -> Result<Option<DirectoryStaged>> {
        if !name.starts_with(TEMP_PREFIX) || name.contains('/') {
            return Err(Error::internal(format!(
                "the intent record names '{name}', which is no staged file"
            )));
        }
        let cname = CString::new(name)
            .map_err(|_| Error::internal("the intent record names a staged file with a NUL"))?;
        let fd = match rustix::fs::openat(
            self.staging.as_fd(),
            &cname,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(staging_error(e.into())),
        };
        let len = stat_fd(&fd).map_err(|e| staging_error(e.into()))?.size;
        Ok(Some(DirectoryStaged::adopted(
            &self.staging,
            TempEntry::adopt(&self.staging, cname, false),
            len,
        )))
    }
}
