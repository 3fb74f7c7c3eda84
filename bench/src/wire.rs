//! Talking to the server with the generated gRPC clients: connecting,
//! DIRECTORY sessions over a tree on disk, and streaming a file up.

use bytes::{Bytes, BytesMut};
use futures::stream::{self, Stream, StreamExt};
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;
use tonic::transport::Channel;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::proto::{self, session::Backend};

/// Bytes per data message on every byte stream, as the server's default.
pub const CHUNK_BYTES: usize = wsfs::DEFAULT_CHUNK_SIZE;

/// Bytes read from disk at a time before being cut into chunks.
pub const DISK_READ_BYTES: usize = 1024 * 1024;

pub type Fs = FilesystemClient<Channel>;

pub async fn connect(url: &str) -> Result<Channel, String> {
    // The project's client settings, so the figures are what its users get.
    let endpoint = wsfs_client::endpoint(url).map_err(|e| format!("bad server URL: {e}"))?;
    // The server may still be binding; give it a moment.
    let mut last = String::new();
    for _ in 0..50 {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(format!("cannot connect to {url}: {last}"))
}

pub fn filesystem(channel: &Channel) -> Fs {
    FilesystemClient::new(channel.clone())
        .max_decoding_message_size(wsfs_server::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(wsfs_server::MAX_MESSAGE_BYTES)
}

/// One local file and the workspace path it has in a session.
#[derive(Debug, Clone)]
pub struct TreeFile {
    pub local: PathBuf,
    pub path: String,
    pub len: u64,
}

/// A DIRECTORY session that shows a tree from disk.
pub struct TreeSession {
    pub id: String,
    /// How the tree got there, when not by rooting the session at it.
    pub note: Option<String>,
}

fn limits(max_write_bytes: u64) -> proto::SessionLimits {
    proto::SessionLimits {
        max_write_bytes,
        // Real source trees nest deeper and name files longer than the
        // defaults allow; the benchmark is not about path limits.
        max_path_depth: 64,
        max_segment_length: 255,
        ..Default::default()
    }
}

pub async fn create_directory_session(
    channel: &Channel,
    root: Option<&Path>,
    max_write_bytes: u64,
) -> Result<String, tonic::Status> {
    let request = proto::CreateSessionRequest {
        backend: Backend::Directory as i32,
        root: root.map(|r| r.display().to_string()).unwrap_or_default(),
        limits: Some(limits(max_write_bytes)),
        labels: [("purpose".to_string(), "wsfs-bench".to_string())].into(),
        ..Default::default()
    };
    let session = SessionsClient::new(channel.clone())
        .create_session(request)
        .await?
        .into_inner();
    Ok(session.session_id)
}

pub async fn delete_session(channel: &Channel, id: &str) {
    let _ = SessionsClient::new(channel.clone())
        .delete_session(proto::DeleteSessionRequest {
            session_id: id.to_string(),
        })
        .await;
}

pub async fn exists(fs: &mut Fs, session: &str, path: &str) -> Result<bool, tonic::Status> {
    Ok(fs
        .exists(proto::ExistsRequest {
            session_id: session.to_string(),
            path: path.to_string(),
        })
        .await?
        .into_inner()
        .exists)
}

/// A MEMORY session holding `files`, uploaded.
pub async fn memory_session(channel: &Channel, files: &[TreeFile]) -> Result<String, String> {
    let request = proto::CreateSessionRequest {
        backend: Backend::Memory as i32,
        limits: Some(limits(1 << 30)),
        labels: [("purpose".to_string(), "wsfs-bench".to_string())].into(),
        ..Default::default()
    };
    let id = SessionsClient::new(channel.clone())
        .create_session(request)
        .await
        .map_err(|s| format!("CreateSession(MEMORY) failed: {}", s.message()))?
        .into_inner()
        .session_id;
    let mut fs = filesystem(channel);
    for f in files {
        write_file(&mut fs, &id, &f.path, &f.local)
            .await
            .map_err(|e| format!("uploading '{}' failed: {e}", f.path))?;
    }
    Ok(id)
}

/// Opens a DIRECTORY session rooted at `root`, so the server works on the
/// files in place. When the server will not root a session there (an
/// external server that does not allow the directory) or its directory
/// backend does not show the files already on disk, a session with a fresh
/// directory gets `files` uploaded instead (never into `root` itself), and
/// the returned note says so.
pub async fn tree_session(
    channel: &Channel,
    root: &Path,
    files: &[TreeFile],
    max_write_bytes: u64,
) -> Result<TreeSession, String> {
    let sentinel = files
        .first()
        .ok_or_else(|| format!("'{}' holds no files", root.display()))?;
    let mut fs = filesystem(channel);
    let why_upload = match create_directory_session(channel, Some(root), max_write_bytes).await {
        Ok(id) => {
            let visible = exists(&mut fs, &id, &sentinel.path)
                .await
                .map_err(|s| format!("Exists failed: {}", s.message()))?;
            if visible {
                return Ok(TreeSession { id, note: None });
            }
            delete_session(channel, &id).await;
            "the DIRECTORY backend did not show the files already on disk, so they were \
             uploaded into a fresh DIRECTORY session"
                .to_string()
        }
        Err(status) => format!(
            "the server would not root a session at the tree ({}), so it was uploaded into a \
             fresh DIRECTORY session",
            status.message()
        ),
    };
    let id = create_directory_session(channel, None, max_write_bytes)
        .await
        .map_err(|s| format!("CreateSession(DIRECTORY) failed: {}", s.message()))?;
    let total: u64 = files.iter().map(|f| f.len).sum();
    eprintln!(
        "  uploading {} files ({:.0} MB) into the session...",
        files.len(),
        total as f64 / 1e6
    );
    let failed: Vec<String> = stream::iter(files.iter().cloned())
        .map(|f| {
            let mut fs = fs.clone();
            let id = id.clone();
            async move {
                write_file(&mut fs, &id, &f.path, &f.local)
                    .await
                    .map_err(|e| format!("uploading '{}' failed: {e}", f.path))
            }
        })
        .buffer_unordered(8)
        .filter_map(|r| async move { r.err() })
        .collect()
        .await;
    if let Some(first) = failed.first() {
        return Err(format!(
            "{} uploads failed; the first: {first}",
            failed.len()
        ));
    }
    Ok(TreeSession {
        id,
        note: Some(why_upload),
    })
}

/// A file's bytes as a stream of `CHUNK_BYTES` pieces, read from disk a
/// megabyte at a time; the pieces share the read buffer, no copy.
pub fn file_chunks(file: tokio::fs::File) -> impl Stream<Item = std::io::Result<Bytes>> {
    stream::unfold(Some(file), |state| async move {
        let mut file = state?;
        let mut buf = BytesMut::with_capacity(DISK_READ_BYTES);
        while buf.len() < DISK_READ_BYTES {
            match file.read_buf(&mut buf).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Some((vec![Err(e)], None)),
            }
        }
        if buf.is_empty() {
            return None;
        }
        let mut block = buf.freeze();
        let mut pieces = Vec::with_capacity(block.len().div_ceil(CHUNK_BYTES));
        while !block.is_empty() {
            pieces.push(Ok(block.split_to(CHUNK_BYTES.min(block.len()))));
        }
        Some((pieces, Some(file)))
    })
    .flat_map(stream::iter)
}

/// Streams the local file `local` to `path` with WriteBytes; returns the
/// bytes written, which must be the whole file.
pub async fn write_file(
    fs: &mut Fs,
    session: &str,
    path: &str,
    local: &Path,
) -> Result<u64, String> {
    use proto::write_bytes_request::Payload;
    let file = tokio::fs::File::open(local)
        .await
        .map_err(|e| format!("cannot open '{}': {e}", local.display()))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| format!("cannot stat '{}': {e}", local.display()))?
        .len();
    let header = proto::WriteBytesRequest {
        payload: Some(Payload::Header(proto::WriteBytesHeader {
            session_id: session.to_string(),
            path: path.to_string(),
            mode: proto::WriteMode::Overwrite as i32,
            create_parents: Some(true),
            if_version: None,
            ..Default::default()
        })),
    };
    // A read error ends the stream early, and the short count below says so.
    let data = file_chunks(file)
        .take_while(|c| futures::future::ready(c.is_ok()))
        .filter_map(|c| futures::future::ready(c.ok()))
        .map(|d| proto::WriteBytesRequest {
            payload: Some(Payload::Data(d)),
        });
    let response = fs
        .write_bytes(stream::once(async { header }).chain(data))
        .await
        .map_err(|s| format!("WriteBytes failed: {}", s.message()))?
        .into_inner();
    let written = response.bytes_written as u64;
    if written != len {
        return Err(format!("wrote {written} of {len} bytes"));
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_chunks_rebuild_the_file_in_chunk_sized_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let data: Vec<u8> = (0..DISK_READ_BYTES * 2 + 1000).map(|i| i as u8).collect();
        std::fs::write(&path, &data).unwrap();

        let file = tokio::fs::File::open(&path).await.unwrap();
        let pieces: Vec<Bytes> = file_chunks(file).map(|c| c.unwrap()).collect().await;

        assert!(pieces.iter().all(|p| p.len() <= CHUNK_BYTES));
        assert_eq!(pieces.len(), (DISK_READ_BYTES * 2) / CHUNK_BYTES + 1);
        assert_eq!(pieces.concat(), data);
    }
}
