//! ExportArchive: a ZIP written as it is sent.
//!
//! An [`ExportSource`] yields entries (the live workspace through the
//! `Filesystem` trait today: [`LiveWorkspace`]; a snapshot's files plug in
//! as another source). [`zip_stream`] runs the `zip` crate's streaming
//! writer on the blocking pool; its output is cut into ~64 KiB chunks and
//! sent through a small bounded channel, so the server holds a few chunks
//! per export whatever the workspace's size, and a client that goes away
//! fails the next send and stops the export.

use super::{Manifest, FILES_PREFIX, MANIFEST_NAME, MANIFEST_VERSION};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::mpsc;
use wsfs::{ByteRange, CanonicalPath, Error, FileKind, Filesystem, Metadata, Permissions, Result};
use zip::write::SimpleFileOptions;

/// Bytes per chunk the export sends.
pub const EXPORT_CHUNK_BYTES: usize = wsfs::DEFAULT_CHUNK_SIZE;
/// Chunks waiting for the client at most.
const EXPORT_CHANNEL_CHUNKS: usize = 4;

/// One entry of an export, in the order it goes into the archive.
pub enum ExportEntry {
    Directory {
        path: CanonicalPath,
        modified: SystemTime,
        permissions: Permissions,
    },
    File {
        path: CanonicalPath,
        modified: SystemTime,
        permissions: Permissions,
        /// The size the content is expected to have (ZIP64 is used above 4 GiB).
        size: u64,
        content: BoxStream<'static, Result<Bytes>>,
    },
}

/// Where an export reads its entries from.
#[async_trait]
pub trait ExportSource: Send + 'static {
    /// The next entry; `None` when every entry has been given.
    async fn next_entry(&mut self) -> Result<Option<ExportEntry>>;
}

/// The live workspace, walked depth-first in path order through the
/// `Filesystem` trait (so the directory backend's symlink-proof reads are
/// the only way in). Symlinks are left out; a file deleted between its
/// listing and its read is left out too. Each directory is read a listing
/// page at a time (`list_after`), so a directory of any size is exported
/// while the walk holds at most one page per directory it is inside.
pub struct LiveWorkspace {
    fs: Arc<dyn Filesystem>,
    /// The directories the walk is inside, the innermost last.
    open: Vec<Frame>,
    started: bool,
}

/// One directory the walk is inside: what is left of its current page,
/// and where its next page starts when there is one.
struct Frame {
    dir: CanonicalPath,
    /// The page's entries still to visit, the next one last.
    page: Vec<Metadata>,
    /// The last entry of the current page, when more follow it.
    more_after: Option<CanonicalPath>,
}

impl LiveWorkspace {
    pub fn new(fs: Arc<dyn Filesystem>) -> Self {
        LiveWorkspace {
            fs,
            open: Vec::new(),
            started: false,
        }
    }

    /// The page of `dir`'s children after `after` (from the first without).
    async fn page(
        &self,
        dir: &CanonicalPath,
        after: Option<&CanonicalPath>,
    ) -> Result<(Vec<Metadata>, Option<CanonicalPath>)> {
        let listing = match self.fs.list_after(dir, 1, after).await {
            Ok(l) => l,
            // Removed since its parent was listed: nothing to export there.
            Err(Error::FileNotFound { .. } | Error::NotADirectory { .. }) if !dir.is_root() => {
                return Ok((Vec::new(), None))
            }
            Err(e) => return Err(e),
        };
        let more_after = if listing.truncated {
            listing.entries.last().map(|m| m.path.clone())
        } else {
            None
        };
        let mut page = listing.entries;
        page.reverse();
        Ok((page, more_after))
    }

    /// Enters `dir`: its first page becomes the innermost frame.
    async fn enter(&mut self, dir: CanonicalPath) -> Result<()> {
        let (page, more_after) = self.page(&dir, None).await?;
        self.open.push(Frame {
            dir,
            page,
            more_after,
        });
        Ok(())
    }

    /// The next entry of the walk, in path order; `None` at its end.
    async fn next_listed(&mut self) -> Result<Option<Metadata>> {
        loop {
            let Some(frame) = self.open.last_mut() else {
                return Ok(None);
            };
            if let Some(meta) = frame.page.pop() {
                return Ok(Some(meta));
            }
            match frame.more_after.take() {
                Some(after) => {
                    let dir = frame.dir.clone();
                    let (page, more_after) = self.page(&dir, Some(&after)).await?;
                    if let Some(frame) = self.open.last_mut() {
                        (frame.page, frame.more_after) = (page, more_after);
                    }
                }
                None => {
                    self.open.pop();
                }
            }
        }
    }
}

#[async_trait]
impl ExportSource for LiveWorkspace {
    async fn next_entry(&mut self) -> Result<Option<ExportEntry>> {
        if !self.started {
            self.started = true;
            self.enter(CanonicalPath::root()).await?;
        }
        while let Some(meta) = self.next_listed().await? {
            match meta.kind {
                FileKind::Symlink => continue,
                FileKind::Directory => {
                    self.enter(meta.path.clone()).await?;
                    return Ok(Some(ExportEntry::Directory {
                        path: meta.path,
                        modified: meta.modified,
                        permissions: meta.permissions,
                    }));
                }
                FileKind::File => {
                    let stream = match self
                        .fs
                        .read_bytes(&meta.path, ByteRange::default(), EXPORT_CHUNK_BYTES)
                        .await
                    {
                        Ok(s) => s,
                        Err(Error::FileNotFound { .. }) => continue,
                        Err(e) => return Err(e),
                    };
                    return Ok(Some(ExportEntry::File {
                        path: meta.path,
                        modified: meta.modified,
                        permissions: meta.permissions,
                        size: stream.length,
                        content: stream.chunks,
                    }));
                }
            }
        }
        Ok(None)
    }
}

/// One snapshot of a session, read back through its snapshot store. The
/// entries come in path order with their stored bytes and bits; a file's
/// time is the one the snapshot kept, a directory's (or a file's the
/// snapshot does not know) the snapshot's.
pub struct SnapshotSource {
    files: Option<crate::snapshots::SnapshotFiles>,
    taken: SystemTime,
}

impl SnapshotSource {
    pub fn new(files: crate::snapshots::SnapshotFiles, taken: SystemTime) -> Self {
        SnapshotSource {
            files: Some(files),
            taken,
        }
    }
}

#[async_trait]
impl ExportSource for SnapshotSource {
    async fn next_entry(&mut self) -> Result<Option<ExportEntry>> {
        use crate::snapshots::SnapshotEntry;
        let Some(mut files) = self.files.take() else {
            return Ok(None);
        };
        // The iterator opens object files: blocking work.
        let (files, next) = tokio::task::spawn_blocking(move || {
            let next = files.next();
            (files, next)
        })
        .await
        .map_err(|e| Error::internal(format!("snapshot read failed: {e}")))?;
        self.files = Some(files);
        let taken = self.taken;
        Ok(match next.transpose()? {
            None => None,
            Some(SnapshotEntry::Directory { path, permissions }) => Some(ExportEntry::Directory {
                path,
                modified: taken,
                permissions,
            }),
            Some(SnapshotEntry::File {
                path,
                size,
                content,
                permissions,
                modified,
            }) => Some(ExportEntry::File {
                content: crate::workspace::byte_chunks(
                    content,
                    path.clone(),
                    0,
                    size,
                    EXPORT_CHUNK_BYTES,
                ),
                path,
                modified: if modified == std::time::UNIX_EPOCH {
                    taken
                } else {
                    modified
                },
                permissions,
                size,
            }),
        })
    }
}

/// Streams the ZIP of `source`: chunks of about [`EXPORT_CHUNK_BYTES`],
/// then the end of the stream, or an error as the last item.
pub fn zip_stream(source: Box<dyn ExportSource>) -> BoxStream<'static, Result<Bytes>> {
    let (tx, rx) = mpsc::channel::<Result<Bytes>>(EXPORT_CHANNEL_CHUNKS);
    let runtime = tokio::runtime::Handle::current();
    crate::producer::spawn_blocking("ExportArchive", tx, move |tx| {
        let _running = crate::metrics::Gauge::hold(&crate::metrics::ACTIVE_EXPORTS);
        let errors = tx.clone();
        if let Err(e) = write_zip(source, ChannelWriter::new(tx), &runtime) {
            // Fails quietly when the client is gone, which is what stopped us.
            let _ = errors.blocking_send(Err(e));
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
}

/// Writes the whole archive; runs on the blocking pool and waits on the
/// source's async reads through `runtime`.
fn write_zip(
    mut source: Box<dyn ExportSource>,
    out: ChannelWriter,
    runtime: &tokio::runtime::Handle,
) -> Result<()> {
    let zip_error = |e: zip::result::ZipError| match e {
        zip::result::ZipError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe => {
            Error::Cancelled {
                message: "the client went away during the export".into(),
            }
        }
        e => Error::internal(format!("writing the archive failed: {e}")),
    };
    let io_error = |e: std::io::Error| zip_error(zip::result::ZipError::Io(e));
    let mut zip = zip::ZipWriter::new_stream(out);
    let (mut file_count, mut total_bytes) = (0u64, 0u64);
    while let Some(entry) = runtime.block_on(source.next_entry())? {
        match entry {
            ExportEntry::Directory {
                path,
                modified,
                permissions,
            } => {
                zip.add_directory(
                    format!("{FILES_PREFIX}{path}/"),
                    options(modified, permissions),
                )
                .map_err(zip_error)?;
            }
            ExportEntry::File {
                path,
                modified,
                permissions,
                size,
                mut content,
            } => {
                crate::faults::check_stream(path.as_str());
                let options = options(modified, permissions).large_file(size >= u32::MAX as u64);
                zip.start_file(format!("{FILES_PREFIX}{path}"), options)
                    .map_err(zip_error)?;
                while let Some(chunk) = runtime.block_on(content.next()) {
                    let chunk = chunk?;
                    zip.write_all(&chunk).map_err(io_error)?;
                    total_bytes += chunk.len() as u64;
                }
                file_count += 1;
            }
        }
    }
    let manifest = Manifest {
        version: MANIFEST_VERSION.to_string(),
        created_at: prost_types::Timestamp::from(SystemTime::now()).to_string(),
        file_count,
        total_bytes,
    };
    let json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| Error::internal(format!("cannot encode the manifest: {e}")))?;
    zip.start_file(
        MANIFEST_NAME,
        options(SystemTime::now(), Permissions::FILE_DEFAULT),
    )
    .map_err(zip_error)?;
    zip.write_all(&json).map_err(io_error)?;
    let mut out = zip.finish().map_err(zip_error)?.into_inner();
    out.flush().map_err(io_error)
}

fn options(modified: SystemTime, permissions: Permissions) -> SimpleFileOptions {
    let options = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(permissions.bits());
    // Out of ZIP's range: its earliest time, named here because zip's own
    // default for an entry without one is the time of the export.
    options.last_modified_time(zip_time(modified).unwrap_or_default())
}

/// A modification time as a ZIP (MS-DOS, here UTC) date and time; `None`
/// outside 1980..=2107.
fn zip_time(t: SystemTime) -> Option<zip::DateTime> {
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    let utc = time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).ok()?).ok()?;
    zip::DateTime::try_from(time::PrimitiveDateTime::new(utc.date(), utc.time())).ok()
}

/// A `Write` that cuts what it is given into chunks of about
/// [`EXPORT_CHUNK_BYTES`] and sends each through a bounded channel,
/// blocking while the client is behind. A closed channel (the client went
/// away) is a `BrokenPipe` error.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn new(tx: mpsc::Sender<Result<Bytes>>) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(EXPORT_CHUNK_BYTES),
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(EXPORT_CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = EXPORT_CHUNK_BYTES - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= EXPORT_CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory over one listing page is exported whole, in path
    /// order, with what follows it: the walk reads it page by page. Before
    /// the change the export failed RESOURCE_EXHAUSTED "holds more entries
    /// than one listing returns".
    #[tokio::test]
    async fn a_directory_over_one_listing_page_is_walked_whole_in_path_order() {
        use crate::workspace::{Workspace, MAX_LIST_ENTRIES};
        let fs: Arc<dyn Filesystem> = Arc::new(Workspace::new(
            crate::memory::MemoryBackend::new(),
            crate::SessionLimits::default(),
        ));
        let p = |s: &str| CanonicalPath::parse(s, &wsfs::PathLimits::default()).unwrap();
        let files = MAX_LIST_ENTRIES + 5;
        let name = |i: usize| format!("big/f{i:07}");
        for i in 0..files {
            fs.write(&p(&name(i)), "x", wsfs::WriteOptions::default())
                .await
                .unwrap();
        }
        for path in ["big/z/inner.txt", "c.txt"] {
            fs.write(&p(path), "y", wsfs::WriteOptions::default())
                .await
                .unwrap();
        }

        let mut walk = LiveWorkspace::new(fs);
        let mut seen = Vec::new();
        while let Some(entry) = walk.next_entry().await.unwrap() {
            seen.push(match entry {
                ExportEntry::Directory { path, .. } => format!("{}/", path.as_str()),
                ExportEntry::File { path, .. } => path.as_str().to_string(),
            });
        }
        let mut expected = vec!["big/".to_string()];
        expected.extend((0..files).map(name));
        expected.extend(["big/z/", "big/z/inner.txt", "c.txt"].map(String::from));
        assert_eq!(seen.len(), expected.len());
        assert!(seen == expected, "the walk's order differs from path order");
    }

    #[test]
    fn zip_time_is_the_utc_civil_date() {
        // 2024-02-29T13:45:30Z
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_709_214_330);
        let z = zip_time(t).unwrap();
        assert_eq!(
            (
                z.year(),
                z.month(),
                z.day(),
                z.hour(),
                z.minute(),
                z.second()
            ),
            (2024, 2, 29, 13, 45, 30)
        );
        assert!(zip_time(std::time::UNIX_EPOCH).is_none());
    }

    /// What the export writes, the import reads back (to ZIP's two-second
    /// steps), across a leap day and at both ends of ZIP's range.
    #[test]
    fn zip_times_read_back_as_the_times_written() {
        use crate::archive::import::zip_time_to_system;
        let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        for secs in [
            1_709_214_330,   // 2024-02-29T13:45:30Z
            315_532_800,     // 1980-01-01T00:00:00Z
            4_354_819_198,   // 2107-12-31T23:59:58Z
            951_782_400 + 2, // 2000-02-29T00:00:02Z
        ] {
            let z = zip_time(at(secs)).unwrap();
            assert_eq!(zip_time_to_system(z), Some(at(secs)), "{secs}");
        }
        assert!(
            zip_time(at(4_354_819_200)).is_none(),
            "2108 is past ZIP's range"
        );
        assert!(zip_time(at(315_532_799)).is_none(), "1979 is before it");
    }
}
