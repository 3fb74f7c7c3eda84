//! Snapshots of a CONTAINER session: each one an archive of the inner
//! workspace (the same ZIP ExportArchive sends), kept by the outer server
//! under its data directory, never in the container. Restore imports it,
//! so the inner server checks it and swaps the workspace under its
//! session's write lock.

use super::ContainerFs;
use crate::archive::FILES_PREFIX;
use crate::backend::Content;
use crate::limits::SessionLimits;
use crate::snapshots::{
    new_id, not_found, parse_id, Restored, SnapshotEntry, SnapshotFiles, SnapshotInfo,
    SnapshotStore,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, PathLimits, Permissions, Result};

/// Room for ZIP headers and data that does not compress, beyond the bytes
/// a snapshot may hold.
const ARCHIVE_SLACK_BYTES: u64 = 64 * 1024 * 1024;

/// What `<id>.json` records beside `<id>.zip`.
#[derive(Serialize, Deserialize)]
struct Recorded {
    id: String,
    tag: String,
    created_at: SystemTime,
    file_count: u64,
    total_bytes: u64,
}

impl From<Recorded> for SnapshotInfo {
    fn from(r: Recorded) -> SnapshotInfo {
        SnapshotInfo {
            id: r.id,
            tag: r.tag,
            created_at: r.created_at,
            file_count: r.file_count,
            total_bytes: r.total_bytes,
        }
    }
}

pub struct ContainerSnapshots {
    fs: Arc<ContainerFs>,
    dir: PathBuf,
    /// The most bytes an archive kept here may take (0: no limit).
    max_archive_bytes: u64,
    /// One snapshot, restore or delete at a time.
    busy: tokio::sync::Mutex<()>,
}

fn io(what: &str, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("{what}: {e}"))
}

impl ContainerSnapshots {
    /// Snapshots kept in `dir` (made on the first snapshot), each at most
    /// the session's byte budget (`limits` with the server's default
    /// applied) plus ZIP overhead.
    pub fn new(fs: Arc<ContainerFs>, dir: PathBuf, limits: &SessionLimits) -> Self {
        let max_archive_bytes = match limits.max_total_bytes {
            0 => 0,
            n => n.saturating_mul(2).saturating_add(ARCHIVE_SLACK_BYTES),
        };
        ContainerSnapshots {
            fs,
            dir,
            max_archive_bytes,
            busy: tokio::sync::Mutex::new(()),
        }
    }

    fn archive(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.zip"))
    }

    fn record(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn read_record(&self, id: &str) -> Result<Recorded> {
        let bytes = match std::fs::read(self.record(id)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(id)),
            Err(e) => return Err(io("cannot read a snapshot record", e)),
        };
        serde_json::from_slice(&bytes).map_err(|e| io("a snapshot record is damaged", e))
    }
}

/// Counts the regular files and their bytes in an export archive.
fn count(path: &Path) -> Result<(u64, u64)> {
    let file = std::fs::File::open(path).map_err(|e| io("cannot reopen the snapshot", e))?;
    let mut zip =
        zip::ZipArchive::new(file).map_err(|e| io("the container's archive is unreadable", e))?;
    let (mut files, mut bytes) = (0u64, 0u64);
    for i in 0..zip.len() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| io("the container's archive is unreadable", e))?;
        if entry.name_raw().starts_with(FILES_PREFIX.as_bytes()) && !entry.is_dir() {
            files += 1;
            bytes = bytes.saturating_add(entry.size());
        }
    }
    Ok((files, bytes))
}

/// Refuses an archive that grows past its cap, before the byte lands.
struct Capped {
    file: tokio::fs::File,
    written: u64,
    cap: u64,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.cap > 0 && self.written.saturating_add(buf.len() as u64) > self.cap {
            return Poll::Ready(Err(std::io::Error::other(format!(
                "the workspace's archive is larger than {} bytes",
                self.cap
            ))));
        }
        let polled = Pin::new(&mut self.file).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.written += n as u64;
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

#[async_trait]
impl SnapshotStore for ContainerSnapshots {
    async fn snapshot(&self, tag: &str) -> Result<SnapshotInfo> {
        let _one = self.busy.lock().await;
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(|e| io("cannot make the snapshot directory", e))?;
        let id = new_id();
        let partial = tempfile::Builder::new()
            .prefix("partial-")
            .tempfile_in(&self.dir)
            .map_err(|e| io("cannot store a snapshot", e))?
            .into_temp_path();
        let file = tokio::fs::File::create(&partial)
            .await
            .map_err(|e| io("cannot store a snapshot", e))?;
        let writer = Capped {
            file,
            written: 0,
            cap: self.max_archive_bytes,
        };
        self.fs.export_into(writer).await.map_err(|e| match e {
            Error::Internal { message } if message.contains("larger than") => {
                Error::QuotaExceeded {
                    message: format!("cannot take the snapshot: {message}"),
                }
            }
            other => other,
        })?;
        let checked = partial.to_path_buf();
        let (file_count, total_bytes) = tokio::task::spawn_blocking(move || count(&checked))
            .await
            .map_err(|e| io("counting the snapshot failed", e))??;
        let recorded = Recorded {
            id: id.clone(),
            tag: tag.to_string(),
            created_at: SystemTime::now(),
            file_count,
            total_bytes,
        };
        let json = serde_json::to_vec(&recorded).map_err(|e| io("cannot encode a record", e))?;
        partial
            .persist(self.archive(&id))
            .map_err(|e| io("cannot store a snapshot", e))?;
        if let Err(e) = std::fs::write(self.record(&id), json) {
            let _ = std::fs::remove_file(self.archive(&id));
            return Err(io("cannot record a snapshot", e));
        }
        Ok(recorded.into())
    }

    async fn restore(&self, id: &str, at: &CanonicalPath) -> Result<Restored> {
        let id = parse_id(id)?;
        if !at.is_root() {
            // The snapshot is an archive the inner server imports whole.
            return Err(Error::Unimplemented {
                message: format!(
                    "a CONTAINER session restores whole snapshots only, not '{at}': restore the whole snapshot, or read the file back with ReadSnapshotFile"
                ),
            });
        }
        let _one = self.busy.lock().await;
        self.read_record(&id)?;
        let (file_count, total_bytes) = self.fs.import_file(&self.archive(&id)).await?;
        Ok(Restored {
            file_count,
            total_bytes,
        })
    }

    async fn list(&self) -> Result<Vec<SnapshotInfo>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("cannot list snapshots", e)),
        };
        let mut all = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            all.push(SnapshotInfo::from(self.read_record(id)?));
        }
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(all)
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let id = parse_id(id)?;
        let _one = self.busy.lock().await;
        self.read_record(&id)?;
        std::fs::remove_file(self.record(&id)).map_err(|e| io("cannot delete a snapshot", e))?;
        let _ = std::fs::remove_file(self.archive(&id));
        Ok(())
    }

    async fn fork_origin(&self, id: &str) -> Result<crate::snapshots::fork::Origin> {
        let id = parse_id(id)?;
        self.read_record(&id)?;
        Err(Error::invalid_argument(
            "a CONTAINER session's snapshots cannot be forked yet: export the snapshot (ExportArchive with its id) and import it into a new session",
        ))
    }

    async fn files(&self, id: &str) -> Result<SnapshotFiles> {
        let id = parse_id(id)?;
        self.read_record(&id)?;
        let archive = self.archive(&id);
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || entries(&archive, dir))
            .await
            .map_err(|e| io("reading the snapshot failed", e))?
    }
}

/// The archive's entries in path order; each file is inflated into an
/// unnamed temporary file when the iterator reaches it.
fn entries(archive: &Path, dir: PathBuf) -> Result<SnapshotFiles> {
    let file = std::fs::File::open(archive).map_err(|e| io("cannot open the snapshot", e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| io("the snapshot is unreadable", e))?;
    // Each entry's path, its index for a file, its bits and its time.
    type Listed = (CanonicalPath, Option<usize>, Permissions, SystemTime);
    let mut listed: Vec<Listed> = Vec::new();
    for i in 0..zip.len() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| io("the snapshot is unreadable", e))?;
        let name = std::str::from_utf8(entry.name_raw())
            .map_err(|_| io("the snapshot is damaged", "an entry name is not UTF-8"))?;
        let Some(rest) = name.strip_prefix(FILES_PREFIX) else {
            continue;
        };
        let is_dir = entry.is_dir();
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() {
            continue;
        }
        let path = CanonicalPath::parse(rest, &PathLimits::UNLIMITED)?;
        let permissions = match (entry.unix_mode(), is_dir) {
            (Some(mode), _) => Permissions::masked(mode),
            (None, true) => Permissions::DIRECTORY_DEFAULT,
            (None, false) => Permissions::FILE_DEFAULT,
        };
        let modified = entry
            .last_modified()
            .and_then(crate::archive::import::zip_time_to_system)
            .unwrap_or(std::time::UNIX_EPOCH);
        listed.push((path, (!is_dir).then_some(i), permissions, modified));
    }
    listed.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
    let mut zip = zip;
    let iter = listed
        .into_iter()
        .map(move |(path, index, permissions, modified)| {
            let Some(index) = index else {
                return Ok(SnapshotEntry::Directory { path, permissions });
            };
            let mut entry = zip
                .by_index(index)
                .map_err(|e| io("the snapshot is unreadable", e))?;
            let size = entry.size();
            let mut out =
                tempfile::tempfile_in(&dir).map_err(|e| io("cannot read the snapshot", e))?;
            std::io::copy(&mut entry, &mut out).map_err(|e| io("cannot read the snapshot", e))?;
            out.flush().map_err(|e| io("cannot read the snapshot", e))?;
            out.rewind()
                .map_err(|e| io("cannot read the snapshot", e))?;
            Ok(SnapshotEntry::File {
                path,
                size,
                permissions,
                modified,
                content: Content::Disk(out),
            })
        });
    Ok(Box::new(iter))
}
