//! ZIP archives of a session's workspace: [`Session::export_to`] and
//! [`Session::import_from`], and their `AsyncWrite` / `AsyncRead` forms.
//!
//! An archive holds `manifest.json` and every file under `files/<path>`
//! (empty directories as `files/<path>/`); any backend imports any
//! backend's archive. Both directions stream: neither side holds the
//! archive in memory.
//!
//! ```no_run
//! # async fn example(session: wsfs_client::Session) -> wsfs_client::Result<()> {
//! session.export_to("backup.zip").await?;
//! let (files, bytes) = session.import_from("backup.zip").await?;
//! # Ok(()) }
//! ```

use crate::session::Session;
use crate::stream::UploadAbort;
use futures::stream::{self, StreamExt};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::io::ReaderStream;
use wsfs::proto::{self, import_archive_request::Payload};
use wsfs::{Error, Result, DEFAULT_CHUNK_SIZE};

impl Session {
    /// Writes the workspace's archive to a local file; returns its size.
    /// The file is written under a temporary name and renamed into place,
    /// so a failed export leaves no partial archive behind.
    pub async fn export_to(&self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let local =
            |e: std::io::Error| Error::internal(format!("cannot write '{}': {e}", path.display()));
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let file = tokio::fs::File::create(&partial).await.map_err(local)?;
        let written = match self.export_to_writer(file, None).await {
            Ok(n) => n,
            Err(e) => {
                let _ = tokio::fs::remove_file(&partial).await;
                return Err(e);
            }
        };
        tokio::fs::rename(&partial, path).await.map_err(local)?;
        Ok(written)
    }

    /// Streams the archive of the live workspace, or of `snapshot`, into
    /// `writer`; returns the bytes written.
    pub async fn export_to_writer<W>(&self, mut writer: W, snapshot: Option<&str>) -> Result<u64>
    where
        W: AsyncWrite + Unpin,
    {
        let request = proto::ExportArchiveRequest {
            session_id: self.id().to_string(),
            snapshot_id: snapshot.unwrap_or_default().to_string(),
        };
        let mut chunks = self
            .sessions
            .clone()
            .export_archive(self.request(request))
            .await?
            .into_inner();
        let local = |e: std::io::Error| Error::internal(format!("writing the archive failed: {e}"));
        let mut written = 0u64;
        while let Some(chunk) = chunks.message().await? {
            writer.write_all(&chunk.data).await.map_err(local)?;
            written += chunk.data.len() as u64;
        }
        writer.flush().await.map_err(local)?;
        Ok(written)
    }

    /// Replaces the workspace with the archive in a local file; returns
    /// the files and bytes it now holds.
    pub async fn import_from(&self, path: impl AsRef<Path>) -> Result<(u64, u64)> {
        let path = path.as_ref();
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| Error::internal(format!("cannot open '{}': {e}", path.display())))?;
        self.import_from_reader(file).await
    }

    /// Replaces the workspace with the archive read from `reader`. The
    /// server checks the whole archive first: a refused archive (or a read
    /// error here, which aborts the upload) changes nothing.
    pub async fn import_from_reader<R>(&self, reader: R) -> Result<(u64, u64)>
    where
        R: AsyncRead + Send + 'static,
    {
        let abort = Arc::new(UploadAbort::default());
        let first = proto::ImportArchiveRequest {
            payload: Some(Payload::SessionId(self.id().to_string())),
        };
        let data = stream::unfold(
            (
                Box::pin(ReaderStream::with_capacity(reader, DEFAULT_CHUNK_SIZE)),
                abort.clone(),
            ),
            |(mut reader, abort)| async move {
                match reader.next().await {
                    Some(Ok(chunk)) => Some((
                        proto::ImportArchiveRequest {
                            payload: Some(Payload::Data(chunk)),
                        },
                        (reader, abort),
                    )),
                    Some(Err(e)) => {
                        abort.fail(Error::internal(format!("reading the archive failed: {e}")));
                        // Never end: ending would send a complete, shorter archive.
                        futures::future::pending().await
                    }
                    None => None,
                }
            },
        );
        let mut request = self.request(stream::once(async { first }).chain(data));
        abort.arm(request.cancellation_handle());
        let result = self.sessions.clone().import_archive(request).await;
        if let Some(error) = abort.take_error() {
            return Err(error);
        }
        let imported = wsfs::Restored::try_from(result?.into_inner())?;
        Ok((imported.file_count, imported.total_bytes))
    }
}
