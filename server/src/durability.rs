//! How far an acknowledged change has travelled before the answer: the
//! operator's choice (`--durability`), kept in one place.
//!
//! | mode | an answered change survives |
//! | --- | --- |
//! | `none` (default) | a crash of the server (SIGKILL, panic): it is in the kernel's page cache |
//! | `fsync` | a crash of the machine or a power loss too: its data and the directory entries naming it are on stable storage |
//!
//! Whatever the mode, Restore and ImportArchive on DIRECTORY sessions write
//! an intent record (see [`crate::directory::journal`]) and fsync it before their first
//! change, so a crash part-way is completed at the next start rather than
//! left half done.

use clap::ValueEnum;
use rustix::fd::AsFd;
use std::path::Path;
use wsfs::{Error, Result};

/// What an answer promises about the change it reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// Changes are handed to the kernel; nothing is fsynced.
    #[default]
    None,
    /// Changes (file data, directory entries, snapshot and session records)
    /// are on stable storage before the answer.
    Fsync,
}

impl Durability {
    pub fn is_fsync(self) -> bool {
        self == Durability::Fsync
    }

    /// In `fsync` mode, flushes the whole filesystem holding `fd`: the
    /// simplest promise that covers whole trees (Copy, Restore, Import,
    /// recursive Delete) and the directories they touched.
    pub fn settle_fs(self, fd: impl AsFd) -> Result<()> {
        if self.is_fsync() {
            rustix::fs::syncfs(fd).map_err(|e| sync_failed("the workspace", e.into()))?;
        }
        Ok(())
    }

    /// In `fsync` mode, flushes `file`'s data (before it is renamed into
    /// place, so the rename never publishes bytes a power loss could lose).
    pub fn settle_file(self, file: &std::fs::File) -> Result<()> {
        if self.is_fsync() {
            file.sync_data().map_err(|e| sync_failed("a file", e))?;
        }
        Ok(())
    }

    /// In `fsync` mode, flushes `path` (a file written in place) and the
    /// directory holding it, so both its data and its name last.
    pub fn settle_path(self, path: &Path) -> Result<()> {
        if self.is_fsync() {
            sync_path(path)?;
        }
        Ok(())
    }
}

/// Flushes `path` and its parent directory, whatever the mode: for records
/// that must be durable in every mode (the intent record).
pub fn sync_path(path: &Path) -> Result<()> {
    let shown = path.display().to_string();
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| sync_failed(&shown, e))?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Flushes a directory's entries (a rename or unlink in it).
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| sync_failed(&dir.display().to_string(), e))
}

fn sync_failed(what: &str, e: std::io::Error) -> Error {
    Error::internal(format!("cannot flush {what} to stable storage: {e}"))
}
