//! [`Session`]: one session's workspace, as a [`Filesystem`] and through
//! helpers that take `&str` paths.

use crate::credentials::Credentials;
use crate::query::{GlobBuilder, GrepBuilder};
use crate::stream::{self, UploadAbort};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::io::ReaderStream;
use tonic::transport::Channel;
use wsfs::proto::filesystem_client::FilesystemClient;
use wsfs::proto::sessions_client::SessionsClient;
use wsfs::wire::filesystem::{self as call, Upload};
use wsfs::wire::Request as _;
use wsfs::{
    Attributes, AttributesOutcome, ByteChunks, ByteRange, ByteStream, CanonicalPath, DeleteOptions,
    EditOutcome, EditSpec, Error, FileKind, Filesystem, GlobOutcome, GlobQuery, GrepEvent,
    GrepQuery, LineRange, Listing, Metadata, MkdirOptions, PatchChunk, PatchChunks, PatchOptions,
    PathLimits, Result, SymlinkOptions, TextPage, TransferOptions, Transferred, WriteOptions,
    WriteOutcome, DEFAULT_CHUNK_SIZE,
};

/// Lines per Read in [`Session::read_to_string`].
const PAGE_LINES: u64 = 10_000;
/// Times [`Session::read_to_string`] starts over when the file changes
/// between its pages.
const READ_ATTEMPTS: usize = 3;

/// The scheme chibi's tools write workspace paths with
/// (`vfs:///shared/notes.md`); [`parse_path`] accepts it.
pub const VFS_SCHEME: &str = "vfs://";

/// Parses a workspace path the way the server will, so a path that climbs
/// out of the root fails here, before any call, with the server's error.
/// Length limits are the session's business and are left to the server.
/// A path written as chibi writes them, `vfs:///shared/notes.md`, is the
/// workspace path after the scheme (`/shared/notes.md`).
pub fn parse_path(raw: &str) -> Result<CanonicalPath> {
    let raw = raw.strip_prefix(VFS_SCHEME).unwrap_or(raw);
    CanonicalPath::parse(raw, &PathLimits::UNLIMITED)
}

/// A handle on one session's workspace. Cheap to clone; every clone talks
/// over the client's channel. The [`Filesystem`] methods are the whole
/// protocol in Rust types; the inherent methods are conveniences built on
/// them.
#[derive(Debug, Clone)]
pub struct Session {
    id: String,
    filesystem: FilesystemClient<Channel>,
    /// For the session-wide calls: archives.
    pub(crate) sessions: SessionsClient<Channel>,
    credentials: Credentials,
}

impl Session {
    pub(crate) fn new(
        id: String,
        filesystem: FilesystemClient<Channel>,
        sessions: SessionsClient<Channel>,
        credentials: Credentials,
    ) -> Session {
        Session {
            id,
            filesystem,
            sessions,
            credentials,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Calls as the holder of `token` (`authorization: Bearer <token>`).
    pub fn with_token(mut self, token: &str) -> Result<Session> {
        self.credentials = Credentials::token(token)?;
        Ok(self)
    }

    /// Calls as `caller` (`x-wsfs-caller`; servers with tokens off).
    pub fn with_caller(mut self, caller: &str) -> Result<Session> {
        self.credentials = Credentials::caller(caller)?;
        Ok(self)
    }

    /// The generated stub takes `&mut self`; clones share the channel.
    pub(crate) fn stub(&self) -> FilesystemClient<Channel> {
        self.filesystem.clone()
    }

    /// Every call of this session is built here, so that each carries the
    /// session id a proxy routes by.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.credentials.session_request(&self.id, message)
    }

    /// Every entry [`Filesystem::list`] gives, page after page (each asked
    /// after the last entry of the one before): a directory over one page
    /// (the server's limit, 100,000 entries) is listed whole. They are held
    /// in memory, at most the session's file limit of them.
    pub async fn list_all(&self, path: &CanonicalPath, depth: u32) -> Result<Vec<Metadata>> {
        let mut entries: Vec<Metadata> = Vec::new();
        loop {
            let after = entries.last().map(|m| m.path.clone());
            let page = self.list_after(path, depth, after.as_ref()).await?;
            let progressed = !page.entries.is_empty();
            entries.extend(page.entries);
            if !page.truncated || !progressed {
                return Ok(entries);
            }
        }
    }

    /// The whole text file. Reads page by page; if the file changes between
    /// pages it starts over, and after a few tries gives up with
    /// `VERSION_MISMATCH` rather than return a mix of two versions.
    pub async fn read_to_string(&self, path: &str) -> Result<String> {
        let path = parse_path(path)?;
        let mut last_error = None;
        for _ in 0..READ_ATTEMPTS {
            match self.read_pages(&path).await? {
                Ok(text) => return Ok(text),
                Err(changed) => last_error = Some(changed),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::internal("read_to_string made no attempt")))
    }

    /// One attempt: the text, or the version mismatch that spoiled it.
    async fn read_pages(&self, path: &CanonicalPath) -> Result<Result<String>> {
        let page = |offset| LineRange {
            offset,
            limit: Some(PAGE_LINES),
        };
        let first = self.read(path, page(0)).await?;
        let version = first.version;
        let mut next = first.offset + first.lines;
        let mut more = first.truncated;
        let mut text = first.content;
        while more {
            let page = self.read(path, page(next)).await?;
            if page.version != version {
                return Ok(Err(Error::VersionMismatch {
                    path: path.as_str().to_string(),
                    expected: version,
                    current: page.version,
                }));
            }
            if page.lines == 0 {
                return Err(Error::internal(format!(
                    "the server said '{path}' has more lines after line {next} but returned none"
                )));
            }
            text.push_str(&page.content);
            next = page.offset + page.lines;
            more = page.truncated;
        }
        Ok(Ok(text))
    }

    /// Writes `text`, replacing the file and creating missing parents.
    pub async fn write_str(&self, path: &str, text: &str) -> Result<WriteOutcome> {
        self.write(&parse_path(path)?, text, WriteOptions::default())
            .await
    }

    /// Streams a file of any size into `writer`, 64 KiB at a time; returns
    /// the bytes written. `writer` is flushed at the end.
    pub async fn download<W>(&self, path: &str, mut writer: W) -> Result<u64>
    where
        W: AsyncWrite + Unpin,
    {
        let path = parse_path(path)?;
        let mut stream = self
            .read_bytes(&path, ByteRange::default(), DEFAULT_CHUNK_SIZE)
            .await?;
        let mut written = 0u64;
        let local = |e: std::io::Error| {
            Error::internal(format!("writing the download of '{path}' failed: {e}"))
        };
        while let Some(chunk) = stream.chunks.next().await {
            let chunk = chunk?;
            writer.write_all(&chunk).await.map_err(local)?;
            written += chunk.len() as u64;
        }
        writer.flush().await.map_err(local)?;
        Ok(written)
    }

    /// Streams `reader` into a file, 64 KiB at a time. The file appears
    /// whole or not at all: a read error aborts the upload and is returned.
    pub async fn upload<R>(
        &self,
        path: &str,
        reader: R,
        options: WriteOptions,
    ) -> Result<WriteOutcome>
    where
        R: AsyncRead + Send + 'static,
    {
        let path = parse_path(path)?;
        let source = path.clone();
        let data = ReaderStream::with_capacity(reader, DEFAULT_CHUNK_SIZE)
            .map(move |chunk| {
                chunk.map_err(|e| {
                    Error::internal(format!("reading the upload for '{source}' failed: {e}"))
                })
            })
            .boxed();
        self.write_bytes(&path, options, data).await
    }

    /// Writes `data` at `offset` of an existing file, keeping every other
    /// byte (writing past the end extends it, a gap reading as zeros): one
    /// commit that sends only `data`.
    pub async fn write_at(
        &self,
        path: &str,
        offset: u64,
        data: impl Into<Bytes>,
    ) -> Result<WriteOutcome> {
        self.patch(path, [(offset, data.into())], None).await
    }

    /// Cuts an existing file to `len` bytes, or extends it with zeros.
    pub async fn truncate(&self, path: &str, len: u64) -> Result<WriteOutcome> {
        self.patch(path, [], Some(len)).await
    }

    /// Sets an existing file's length to `truncate_to` (when given), then
    /// writes each `(offset, bytes)` in order, as one commit with one new
    /// version; only these bytes travel. See [`Filesystem::patch_bytes`]
    /// for the options this leaves at their defaults.
    pub async fn patch(
        &self,
        path: &str,
        ranges: impl IntoIterator<Item = (u64, Bytes)>,
        truncate_to: Option<u64>,
    ) -> Result<WriteOutcome> {
        let chunks: Vec<Result<PatchChunk>> = ranges
            .into_iter()
            .map(|(offset, data)| Ok(PatchChunk { offset, data }))
            .collect();
        let options = PatchOptions {
            truncate_to,
            ..PatchOptions::default()
        };
        let data = futures::stream::iter(chunks).boxed();
        self.patch_bytes(&parse_path(path)?, options, data).await
    }

    /// Creates the symbolic link `path` holding `target` (stored as given,
    /// never followed by the server), making missing parents.
    pub async fn create_symlink(&self, path: &str, target: &str) -> Result<Metadata> {
        self.symlink(&parse_path(path)?, target, SymlinkOptions::default())
            .await
    }

    /// Sends an upload's request body and awaits the answer; the body's
    /// source failing aborts the call with its own error.
    async fn send_upload<S>(&self, body: S, abort: Arc<UploadAbort>) -> Result<WriteOutcome>
    where
        S: futures::Stream<Item = wsfs::proto::WriteBytesRequest> + Send + 'static,
    {
        let mut request = self.request(body);
        abort.arm(request.cancellation_handle());
        let result = self.stub().write_bytes(request).await;
        // The source's own error says more than the cancelled call.
        if let Some(error) = abort.take_error() {
            return Err(error);
        }
        result?.into_inner().try_into()
    }

    /// The first message of an upload.
    fn upload_header(&self, upload: Upload) -> Result<wsfs::proto::WriteBytesRequest> {
        Ok(upload.message()?.into())
    }

    /// A Move's or Copy's request (one message for both).
    fn transfer(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<tonic::Request<wsfs::proto::TransferRequest>> {
        let request = call::Transfer {
            session_id: self.id.clone(),
            source: source.clone(),
            destination: destination.clone(),
            options,
        };
        Ok(self.request(request.message()?))
    }

    /// A search of this workspace; see [`GrepBuilder`].
    pub fn grep_query(&self, pattern: impl Into<String>) -> GrepBuilder<'_> {
        GrepBuilder::new(self, pattern.into())
    }

    /// A glob over this workspace; see [`GlobBuilder`].
    pub fn glob_query(&self, pattern: impl Into<String>) -> GlobBuilder<'_> {
        GlobBuilder::new(self, pattern.into())
    }
}

#[async_trait]
impl Filesystem for Session {
    async fn read(&self, path: &CanonicalPath, range: LineRange) -> Result<TextPage> {
        let request = call::Read {
            session_id: self.id.clone(),
            path: path.clone(),
            range,
        };
        let response = self.stub().read(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn read_bytes(
        &self,
        path: &CanonicalPath,
        range: ByteRange,
        chunk_size: usize,
    ) -> Result<ByteStream> {
        let request = call::ReadBytes {
            session_id: self.id.clone(),
            path: path.clone(),
            range,
            chunk_size,
        };
        let responses = self
            .stub()
            .read_bytes(self.request(request.message()?))
            .await?;
        let mut bytes = stream::read_bytes(responses.into_inner()).await?;
        if range.limit == Some(0) {
            // Sent as a one-byte read (the wire has no "zero bytes"); the
            // header is what the caller asked for, the byte is dropped unread.
            bytes.length = 0;
            bytes.chunks = futures::stream::empty().boxed();
        }
        Ok(bytes)
    }

    async fn write(
        &self,
        path: &CanonicalPath,
        content: &str,
        options: WriteOptions,
    ) -> Result<WriteOutcome> {
        if options.modified.is_some() {
            // Only the byte upload carries a modification time.
            let data = Bytes::copy_from_slice(content.as_bytes());
            let chunks = futures::stream::iter([Ok(data)]).boxed();
            return self.write_bytes(path, options, chunks).await;
        }
        let request = call::Write {
            session_id: self.id.clone(),
            path: path.clone(),
            content: content.to_string(),
            options,
        };
        let response = self.stub().write(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn write_bytes(
        &self,
        path: &CanonicalPath,
        options: WriteOptions,
        data: ByteChunks,
    ) -> Result<WriteOutcome> {
        let abort = Arc::new(UploadAbort::default());
        let header = self.upload_header(Upload::Write {
            session_id: self.id.clone(),
            path: path.clone(),
            options,
        })?;
        let body = stream::upload_body(header, data, abort.clone());
        self.send_upload(body, abort).await
    }

    async fn patch_bytes(
        &self,
        path: &CanonicalPath,
        options: PatchOptions,
        data: PatchChunks,
    ) -> Result<WriteOutcome> {
        let abort = Arc::new(UploadAbort::default());
        let header = self.upload_header(Upload::Patch {
            session_id: self.id.clone(),
            path: path.clone(),
            options,
        })?;
        let body = stream::patch_body(header, data, abort.clone());
        self.send_upload(body, abort).await
    }

    async fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        options: SymlinkOptions,
    ) -> Result<Metadata> {
        let request = call::Symlink {
            session_id: self.id.clone(),
            path: path.clone(),
            target: target.to_string(),
            options,
        };
        let response = self
            .stub()
            .symlink(self.request(request.message()?))
            .await?;
        response.into_inner().try_into()
    }

    async fn edit(&self, path: &CanonicalPath, edit: EditSpec) -> Result<EditOutcome> {
        let request = call::Edit {
            session_id: self.id.clone(),
            path: path.clone(),
            edit,
        };
        let response = self.stub().edit(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn delete(&self, path: &CanonicalPath, options: DeleteOptions) -> Result<u64> {
        let request = call::Delete {
            session_id: self.id.clone(),
            path: path.clone(),
            options,
        };
        let response = self.stub().delete(self.request(request.message()?)).await?;
        call::Delete::outcome(response.into_inner())
    }

    /// One DeleteMany call; a server that predates it (`UNIMPLEMENTED`)
    /// gets one Delete per entry instead.
    async fn delete_many(
        &self,
        entries: Vec<(CanonicalPath, DeleteOptions)>,
    ) -> Result<Vec<Result<u64>>> {
        wsfs::check_delete_entries(entries.len())?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let sent = entries.len();
        let request = call::DeleteMany {
            session_id: self.id.clone(),
            entries: entries.clone(),
        };
        match self
            .stub()
            .delete_many(self.request(request.message()?))
            .await
        {
            Ok(response) => call::DeleteMany::outcome(response.into_inner(), sent),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                Ok(wsfs::delete_each(self, entries).await)
            }
            Err(status) => Err(status.into()),
        }
    }

    async fn mkdir(&self, path: &CanonicalPath, options: MkdirOptions) -> Result<bool> {
        let request = call::Mkdir {
            session_id: self.id.clone(),
            path: path.clone(),
            options,
        };
        let response = self.stub().mkdir(self.request(request.message()?)).await?;
        Ok(response.into_inner().created)
    }

    async fn rename(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        let request = self.transfer(source, destination, options)?;
        let response = self.stub().r#move(request).await?;
        call::Transfer::outcome(response.into_inner())
    }

    async fn copy(
        &self,
        source: &CanonicalPath,
        destination: &CanonicalPath,
        options: TransferOptions,
    ) -> Result<Transferred> {
        let request = self.transfer(source, destination, options)?;
        let response = self.stub().copy(request).await?;
        call::Transfer::outcome(response.into_inner())
    }

    async fn list_after(
        &self,
        path: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
    ) -> Result<Listing> {
        let request = call::List {
            session_id: self.id.clone(),
            path: path.clone(),
            depth,
            after: after.cloned(),
        };
        let response = self.stub().list(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn glob(&self, query: GlobQuery) -> Result<GlobOutcome> {
        let request = call::Glob {
            session_id: self.id.clone(),
            query,
        };
        let response = self.stub().glob(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn grep(&self, query: GrepQuery) -> Result<BoxStream<'static, Result<GrepEvent>>> {
        let request = call::Grep {
            session_id: self.id.clone(),
            query,
        };
        let responses = self.stub().grep(self.request(request.message()?)).await?;
        Ok(stream::grep_events(responses.into_inner()))
    }

    async fn stat(&self, path: &CanonicalPath) -> Result<Metadata> {
        let request = call::Stat {
            session_id: self.id.clone(),
            path: path.clone(),
        };
        let response = self.stub().stat(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn exists(&self, path: &CanonicalPath) -> Result<Option<FileKind>> {
        let request = call::Exists {
            session_id: self.id.clone(),
            path: path.clone(),
        };
        let response = self.stub().exists(self.request(request.message()?)).await?;
        response.into_inner().try_into()
    }

    async fn set_attributes(
        &self,
        path: &CanonicalPath,
        attributes: Attributes,
    ) -> Result<AttributesOutcome> {
        let request = call::SetAttributes {
            session_id: self.id.clone(),
            path: path.clone(),
            attributes,
        };
        let response = self
            .stub()
            .set_attributes(self.request(request.message()?))
            .await?;
        response.into_inner().try_into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_path_fails_with_the_servers_error() {
        assert_eq!(
            parse_path("a/../../etc").unwrap_err(),
            Error::PathEscapesRoot {
                path: "a/../../etc".into()
            }
        );
    }

    #[test]
    fn chibi_vfs_paths_name_the_workspace_path_after_the_scheme() {
        assert_eq!(
            parse_path("vfs:///shared/notes.md").unwrap(),
            parse_path("shared/notes.md").unwrap()
        );
        assert!(parse_path("vfs:///").unwrap().is_root());
        assert_eq!(
            parse_path("vfs:///../etc").unwrap_err(),
            Error::PathEscapesRoot {
                path: "/../etc".into()
            }
        );
        // Only a leading scheme is one: elsewhere `vfs:` is a name.
        assert_eq!(parse_path("a/vfs://b").unwrap().as_str(), "a/vfs:/b");
    }

    #[test]
    fn long_paths_are_left_to_the_session_limits() {
        let deep = vec!["d"; 100].join("/");
        assert_eq!(parse_path(&deep).unwrap().depth(), 100);
    }
}
